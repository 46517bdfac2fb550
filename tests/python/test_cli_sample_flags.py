"""The gpt2 program takes nanoGPT's sample.py flags (before, each was refused as an unknown
option) and a prompt piped to stdin (before: "the REPL needs a terminal").

Needs GPT2_BINARY_DIR (the build folder; CTest sets it) and the shipped model, which CMake's
configure step unpacks.
"""
import os
import subprocess
import tempfile
import unittest

from cli_paths import MODEL, PROGRAM
DASHES = "---------------"


def run(*args, stdin=""):
    return subprocess.run([PROGRAM, "-m", MODEL, "-t", "1", *args], input=stdin, capture_output=True, text=True, timeout=300)


class SampleFlags(unittest.TestCase):
    def setUp(self):
        if not os.path.exists(PROGRAM) or not os.path.exists(MODEL):
            self.skipTest("needs the gpt2 program and the shipped model (build the project first)")

    def test_sample_py_flags_give_what_ours_give(self):
        theirs = run("--start=ROMEO:", "--max_new_tokens", "40", "--temperature=0.8", "--top_k", "200", "--seed=7", "--json")
        ours = run("-p", "ROMEO:", "-n", "40", "--temp", "0.8", "--top-k", "200", "--seed", "7", "--json")
        self.assertEqual(theirs.returncode, 0, theirs.stderr)
        self.assertEqual(theirs.stdout, ours.stdout)

    def test_num_samples_prints_each_sample_and_dashes(self):
        out = run("--start", "ROMEO:", "--num_samples", "3", "--max_new_tokens", "30", "--seed", "5")
        self.assertEqual(out.returncode, 0, out.stderr)
        samples = out.stdout.split(DASHES + "\n")
        self.assertEqual(len(samples), 4, out.stdout)  # three samples, each followed by dashes
        self.assertEqual(samples[3], "")
        for sample in samples[:3]:
            self.assertTrue(sample.startswith("ROMEO:"), sample)
        self.assertEqual(len(set(samples[:3])), 3, "seed + i gives each sample its own text")
        first = run("-p", "ROMEO:", "-n", "30", "--seed", "5")
        self.assertEqual(samples[0], first.stdout, "sample 0 is the single generation with --seed")

    def test_start_reads_a_file(self):
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
            f.write("JULIET:")
        try:
            from_file = run(f"--start=FILE:{f.name}", "--max_new_tokens", "20", "--temperature", "0", "--json")
            given = run("-p", "JULIET:", "-n", "20", "--temp", "0", "--json")
        finally:
            os.unlink(f.name)
        self.assertEqual(from_file.returncode, 0, from_file.stderr)
        self.assertEqual(from_file.stdout, given.stdout)
        missing = run("--start=FILE:/nonexistent/prompt.txt")
        self.assertNotEqual(missing.returncode, 0)
        self.assertIn("--start: cannot open /nonexistent/prompt.txt", missing.stderr)

    def test_prompt_piped_to_stdin(self):
        piped = run("-n", "20", "--temp", "0", "--json", stdin="ROMEO:")
        given = run("-p", "ROMEO:", "-n", "20", "--temp", "0", "--json")
        self.assertEqual(piped.returncode, 0, piped.stderr)
        self.assertEqual(piped.stdout, given.stdout)

    def test_out_dir_finds_the_converted_checkpoint_and_says_how_to_convert(self):
        with tempfile.TemporaryDirectory() as out_dir:
            missing = subprocess.run([PROGRAM, "--out_dir", out_dir], capture_output=True, text=True, timeout=60)
            self.assertEqual(missing.returncode, 1)
            self.assertIn("has no ckpt.pt and no .gguf file", missing.stderr)
            open(os.path.join(out_dir, "ckpt.pt"), "wb").close()
            unconverted = subprocess.run([PROGRAM, "--out_dir", out_dir], capture_output=True, text=True, timeout=60)
            self.assertEqual(unconverted.returncode, 1)
            self.assertIn("python3 tools/convert.py " + out_dir + "/ckpt.pt -o " + out_dir + "/ckpt.gguf", unconverted.stderr)
            os.symlink(MODEL, os.path.join(out_dir, "ckpt.gguf"))
            theirs = subprocess.run([PROGRAM, "--out_dir", out_dir, "--init_from", "resume", "--start", "ROMEO:", "--device", "cuda",
                                     "--dtype", "bfloat16", "--compile", "True", "--max_new_tokens", "30", "--seed", "3", "-t", "1"],
                                    capture_output=True, text=True, timeout=300)
            ours = run("-p", "ROMEO:", "-n", "30", "--seed", "3")
            self.assertEqual(theirs.returncode, 0, theirs.stderr)
            self.assertEqual(theirs.stdout, ours.stdout)
            for note in ("--device cuda: this program runs on the CPU", "--dtype bfloat16: the weights run in the model file's type",
                         "--compile True: nothing to compile"):
                self.assertIn(note, theirs.stderr)
        other = run("--init_from", "gpt2-xl")
        self.assertEqual(other.returncode, 1)
        self.assertIn("only resume", other.stderr)

    def test_without_start_sampling_begins_from_a_newline_as_sample_py_does(self):
        theirs = run("--num_samples", "1", "--max_new_tokens", "20", "--seed", "4")
        ours = run("-p", "\n", "-n", "20", "--seed", "4")
        self.assertEqual(theirs.returncode, 0, theirs.stderr)
        self.assertEqual(theirs.stdout, ours.stdout + DASHES + "\n")
        nothing_piped = run("-n", "20", "--seed", "4", stdin="")
        self.assertEqual(nothing_piped.returncode, 0, nothing_piped.stderr)
        self.assertEqual(nothing_piped.stdout, ours.stdout)

    def test_bad_values_are_named(self):
        out = run("--top_k=-3")
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("--top_k expects an integer >= 0, got '-3'", out.stderr)
        out = run("--num_samples", "0")
        self.assertIn("--num_samples expects an integer >= 1", out.stderr)


if __name__ == "__main__":
    unittest.main()
