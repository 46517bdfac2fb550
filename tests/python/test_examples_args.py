"""The examples take one argument, a model: -h and --help print their usage (before, `npc --help`
tried to open a model file named "--help"), and another option is refused by name.

Needs GPT2_BINARY_DIR (the build folder; CTest sets it)."""
import os
import subprocess
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(os.environ.get("GPT2_BINARY_DIR", os.path.join(ROOT, "build")), "examples")


class ExampleArguments(unittest.TestCase):
    def run_example(self, name, *args):
        program = os.path.join(EXAMPLES, name)
        if not os.path.exists(program):
            self.skipTest(f"{program} is not built")
        return subprocess.run([program, *args], capture_output=True, text=True, timeout=60)

    def test_help_prints_usage(self):
        for name in ["npc", "minimal", "minimal-c"]:
            for flag in ["-h", "--help"]:
                out = self.run_example(name, flag)
                self.assertEqual(out.returncode, 0, out.stderr)
                self.assertIn("usage:", out.stdout)
                self.assertIn("[MODEL.gguf]", out.stdout)

    def test_unknown_option_is_named(self):
        out = self.run_example("npc", "--frames")
        self.assertEqual(out.returncode, 2)
        self.assertIn("unknown option '--frames'", out.stderr)


if __name__ == "__main__":
    unittest.main()
