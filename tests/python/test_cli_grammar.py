"""The gpt2 program's --grammar, --grammar-text and --json-schema: the text follows the grammars
and the schema the repo ships (examples/grammars/), checked here by an independent reference
(Python's re, json, the schema's rules written out), and a bad grammar or schema is refused with
where it went wrong.

Needs GPT2_BINARY_DIR (the build folder; CTest sets it) and the shipped model, which CMake's
configure step unpacks.
"""
import json
import os
import re
import subprocess
import unittest

from cli_paths import BINARY_DIR, MODEL, PROGRAM, ROOT
GRAMMARS = os.path.join(ROOT, "examples", "grammars")

# The regular grammars of examples/grammars as regular expressions, written from their GBNF.
REGEX = {
    "choice.gbnf": r"yes|no|maybe",
    "npc_action.gbnf": r"ACTION: (wave|attack|flee|trade|follow)\n[A-Z][^\n]{1,120}[.!?]",
    "list.gbnf": r"(- [A-Za-z][A-Za-z ,']{0,40}\n){1,5}",
    "dialogue_line.gbnf": r"[A-Z]{2,12}( [A-Z]{2,12})?:\n[A-Z][a-z ,;']{2,80}[.!?]\n",
}


# A model with GPT-2's vocabulary (random weights), which can write JSON's braces and quotes
BPE_MODEL = os.path.join(os.environ.get("GPT2_TEST_OUT", os.path.join(BINARY_DIR, "tests", "generated")), "padded_gpt2.gguf")


def run(*args, model=MODEL):
    return subprocess.run([PROGRAM, "-m", model, "-t", "1", *args], capture_output=True, text=True, timeout=300)


def generate(grammar_args, seed, n=300, model=MODEL):
    """The JSON of one generation; the exit status is 3 exactly when the answer is incomplete."""
    out = run("-p", "ROMEO:", "-n", str(n), "--seed", str(seed), "--json", *grammar_args, model=model)
    if out.returncode not in (0, 3):
        raise AssertionError(out.stderr)
    result = json.loads(out.stdout)
    if (out.returncode == 3) != (not result["grammar_complete"]):
        raise AssertionError("exit status %d with grammar_complete %s" % (out.returncode, result["grammar_complete"]))
    if out.returncode == 3 and "the answer is incomplete" not in out.stderr:
        raise AssertionError(out.stderr)
    return result


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
        self.assertEqual(result["end"], "grammar")

    def test_an_answer_cut_by_n_is_reported_incomplete(self):
        grammar = ["--grammar-text", 'root ::= "ACTION: " ("wave" | "flee") "." [a-z ]{1,30} "."']
        cut = run("-p", "ROMEO:", "-n", "4", "--seed", "1", "--json", *grammar)
        self.assertEqual(cut.returncode, 3, cut.stderr)
        self.assertIn("the answer is incomplete: -n 4 tokens", cut.stderr)
        result = json.loads(cut.stdout)
        self.assertEqual((result["end"], result["grammar_complete"]), ("max_tokens", False))
        plain = run("-p", "ROMEO:", "-n", "4", "--seed", "1", *grammar)
        self.assertEqual(plain.returncode, 3)
        self.assertEqual(plain.stdout, "ROMEO:ACTI\n")
        free = run("-p", "ROMEO:", "-n", "4", "--json")
        self.assertEqual(free.returncode, 0, free.stderr)
        self.assertEqual(json.loads(free.stdout)["end"], "max_tokens")
        stopped = run("-p", "ROMEO:", "-n", "200", "--stop", "\n", "--json")
        self.assertEqual(json.loads(stopped.stdout)["end"], "stop")

    def test_bad_grammar_is_refused_with_line_and_column(self):
        out = run("-p", "ROMEO:", "--grammar-text", 'root ::= "open')
        self.assertEqual(out.returncode, 1)
        self.assertIn("line 1, column 10", out.stderr)
        out = run("-p", "ROMEO:", "--grammar", os.path.join(GRAMMARS, "missing.gbnf"))
        self.assertEqual(out.returncode, 1)
        self.assertIn("cannot open grammar file", out.stderr)
        out = run("-p", "ROMEO:", "--grammar", "a", "--grammar-text", "b")
        self.assertIn("give one of", out.stderr)


    def test_json_schema_gives_objects_the_schema_accepts(self):
        if not os.path.exists(BPE_MODEL):
            self.skipTest("needs " + BPE_MODEL + " (ctest -R convert_fixture_models makes it)")
        complete = 0
        for seed in (1, 2, 3, 4):
            result = generate(["--json-schema", os.path.join(GRAMMARS, "npc_state.schema.json")], seed, n=120, model=BPE_MODEL)
            if not result["grammar_complete"]:
                continue
            complete += 1
            with self.subTest(seed=seed, text=result["text"]):
                state = json.loads(result["text"])
                self.assertEqual(set(state), {"mood", "action", "trust", "say"})
                self.assertIn(state["mood"], ("calm", "angry", "afraid", "happy"))
                self.assertIn(state["action"], ("wave", "attack", "flee", "trade", "follow"))
                self.assertIsInstance(state["trust"], int)
                self.assertTrue(0 <= state["trust"] <= 10)
                self.assertIsInstance(state["say"], str)
                self.assertLessEqual(len(state["say"]), 60)
        self.assertGreater(complete, 0)

    def test_json_compact_leaves_out_whitespace(self):
        if not os.path.exists(BPE_MODEL):
            self.skipTest("needs " + BPE_MODEL + " (ctest -R convert_fixture_models makes it)")
        schema = os.path.join(GRAMMARS, "npc_state.schema.json")
        complete = 0
        for seed in (1, 2, 3, 4):
            result = generate(["--json-schema", schema, "--json-compact"], seed, n=120, model=BPE_MODEL)
            if not result["grammar_complete"]:
                continue
            complete += 1
            text = result["text"]
            self.assertEqual(text, json.dumps(json.loads(text), separators=(",", ":"), ensure_ascii=False), text)
        self.assertGreater(complete, 0)
        out = run("-p", "x", "--json-compact")
        self.assertEqual(out.returncode, 1)
        self.assertIn("--json-compact shapes the JSON of --json-schema", out.stderr)

    def test_bad_json_schema_is_refused_naming_where(self):
        out = run("-p", "x", "--json-schema", os.path.join(GRAMMARS, "missing.schema.json"))
        self.assertEqual(out.returncode, 1)
        self.assertIn("cannot open JSON Schema file", out.stderr)
        path = os.path.join(BINARY_DIR, "tests", "refused.schema.json")
        with open(path, "w") as f:
            f.write('{"type": "object", "properties": {"n": {"type": "array", "uniqueItems": true}}}')
        out = run("-p", "x", "--json-schema", path)
        self.assertEqual(out.returncode, 1)
        self.assertIn("/properties/n/uniqueItems: 'uniqueItems' is not enforced", out.stderr)
        out = run("-p", "x", "--grammar", "a", "--json-schema", "b")
        self.assertIn("give one of", out.stderr)


if __name__ == "__main__":
    unittest.main()
