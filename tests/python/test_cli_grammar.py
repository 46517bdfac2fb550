"""The gpt2 program's --grammar and --grammar-text: the text follows the grammars the repo ships
(examples/grammars/), checked here by an independent reference (Python's re, json), and a bad
grammar is refused with the line and column.

Needs GPT2_BINARY_DIR (the build folder; CTest sets it) and the shipped model, which CMake's
configure step unpacks.
"""
import json
import os
import re
import subprocess
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BINARY_DIR = os.environ.get("GPT2_BINARY_DIR", os.path.join(ROOT, "build"))
PROGRAM = os.path.join(BINARY_DIR, "examples", "gpt2")
MODEL = os.path.join(ROOT, "models", "shakespeare_char_medium.gguf")
GRAMMARS = os.path.join(ROOT, "examples", "grammars")

# The regular grammars of examples/grammars as regular expressions, written from their GBNF.
REGEX = {
    "choice.gbnf": r"yes|no|maybe",
    "npc_action.gbnf": r"ACTION: (wave|attack|flee|trade|follow)\n[A-Z][^\n]{1,120}[.!?]",
    "list.gbnf": r"(- [A-Za-z][A-Za-z ,']{0,40}\n){1,5}",
    "dialogue_line.gbnf": r"[A-Z]{2,12}( [A-Z]{2,12})?:\n[A-Z][a-z ,;']{2,80}[.!?]\n",
}


def run(*args):
    return subprocess.run([PROGRAM, "-m", MODEL, "-t", "1", *args], capture_output=True, text=True, timeout=300)


def generate(grammar_args, seed, n=300):
    out = run("-p", "ROMEO:", "-n", str(n), "--seed", str(seed), "--json", *grammar_args)
    if out.returncode != 0:
        raise AssertionError(out.stderr)
    return json.loads(out.stdout)


class CliGrammar(unittest.TestCase):
    def setUp(self):
        if not os.path.exists(PROGRAM) or not os.path.exists(MODEL):
            self.skipTest("needs the gpt2 program and the shipped model (build the project first)")

    def test_text_follows_each_shipped_regular_grammar(self):
        for name, pattern in REGEX.items():
            for seed in (1, 2, 3):
                result = generate(["--grammar", os.path.join(GRAMMARS, name)], seed)
                with self.subTest(grammar=name, seed=seed, text=result["text"]):
                    self.assertTrue(result["grammar_complete"])
                    self.assertIsNotNone(re.fullmatch(pattern, result["text"]))

    def test_json_grammar_gives_json_when_complete(self):
        complete = 0
        for seed in range(1, 7):
            result = generate(["--grammar", os.path.join(GRAMMARS, "json.gbnf")], seed, n=60)
            if result["grammar_complete"]:
                complete += 1
                json.loads(result["text"])  # raises when it is not JSON
        self.assertGreater(complete, 0)

    def test_inline_grammar(self):
        result = generate(["--grammar-text", 'root ::= "Yea" | "Nay"'], 4)
        self.assertIn(result["text"], ("Yea", "Nay"))
        self.assertTrue(result["grammar_complete"])

    def test_bad_grammar_is_refused_with_line_and_column(self):
        out = run("-p", "ROMEO:", "--grammar-text", 'root ::= "open')
        self.assertEqual(out.returncode, 1)
        self.assertIn("line 1, column 10", out.stderr)
        out = run("-p", "ROMEO:", "--grammar", os.path.join(GRAMMARS, "missing.gbnf"))
        self.assertEqual(out.returncode, 1)
        self.assertIn("cannot open grammar file", out.stderr)
        out = run("-p", "ROMEO:", "--grammar", "a", "--grammar-text", "b")
        self.assertIn("not both", out.stderr)


if __name__ == "__main__":
    unittest.main()
