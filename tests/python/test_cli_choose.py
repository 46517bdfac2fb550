"""The gpt2 program's --choose "A|B|C": prints the option the model finds the most likely
continuation of the prompt; with --json every option's log-probability, checked here for a
one-token option against the log-softmax of the prompt's last logits (-n 0 --json).

Needs GPT2_BINARY_DIR (the build folder; CTest sets it) and the shipped model, which CMake's
configure step unpacks.
"""
import json
import math
import os
import subprocess
import unittest

from cli_paths import MODEL, PROGRAM
PROMPT = "ROMEO:\nWhat say"


def run(*args):
    return subprocess.run([PROGRAM, "-m", MODEL, "-t", "1", *args], capture_output=True, text=True, timeout=300)


def run_json(*args):
    out = run(*args, "--json")
    if out.returncode != 0:
        raise AssertionError(out.stderr)
    return json.loads(out.stdout)


class CliChoose(unittest.TestCase):
    def setUp(self):
        if not os.path.exists(PROGRAM) or not os.path.exists(MODEL):
            self.skipTest("needs the gpt2 program and the shipped model (build the project first)")

    def test_prints_the_most_likely_option_and_json_gives_every_logprob(self):
        options = [" you", " yes", " yet", " no", "!", " you, sir"]
        result = run_json("-p", PROMPT, "--choose", "|".join(options))
        self.assertEqual(result["options"], options)
        self.assertEqual(len(result["logprobs"]), len(options))
        self.assertTrue(all(lp < 0 for lp in result["logprobs"]))
        best = max(range(len(options)), key=lambda i: (result["logprobs"][i], -i))
        self.assertEqual(result["best"], best)
        self.assertEqual(result["choice"], options[best])
        # an option that extends another is less likely than it
        self.assertLess(result["logprobs"][5], result["logprobs"][0])
        plain = run("-p", PROMPT, "--choose", "|".join(options))
        self.assertEqual(plain.returncode, 0, plain.stderr)
        self.assertEqual(plain.stdout, options[best] + "\n")

    def test_a_one_token_option_scores_the_log_softmax_of_the_prompts_logits(self):
        logits = run_json("-p", PROMPT, "-n", "0")["last_logits"]
        top = max(logits)
        log_z = top + math.log(sum(math.exp(x - top) for x in logits))
        result = run_json("-p", PROMPT, "--choose", "a|e|?")
        for option, logprob in zip(result["options"], result["logprobs"]):
            token = json.loads(run("--tokenize", option).stdout)
            self.assertEqual(len(token), 1)
            self.assertAlmostEqual(logprob, logits[token[0]] - log_z, delta=1e-4)

    def test_duplicates_tie_to_the_first(self):
        result = run_json("-p", PROMPT, "--choose", "xq|xq")
        self.assertEqual(result["logprobs"][0], result["logprobs"][1])
        self.assertEqual(result["best"], 0)

    def test_bad_uses_are_refused_with_a_message(self):
        cases = [
            (["-p", PROMPT, "--choose", "a||b"], "options[1] is empty"),
            (["-p", PROMPT, "--choose", "a", "--grammar-text", 'root ::= "a"'], "--choose scores the options instead of generating"),
            (["-p", PROMPT, "--ctx", "16", "--choose", "a|" + "b" * 20], "options[1] is 20 tokens"),
        ]
        for args, message in cases:
            with self.subTest(args=args):
                out = run(*args)
                self.assertEqual(out.returncode, 1)
                self.assertIn(message, out.stderr)
                self.assertNotIn("Traceback", out.stderr)


if __name__ == "__main__":
    unittest.main()
