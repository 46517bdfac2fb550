"""The README's embedding example compiles and runs as printed (so it cannot drift from the API)."""
import os
import re
import shutil
import subprocess
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class ReadmeExample(unittest.TestCase):
    def test_embedding_example_compiles_and_generates(self):
        compiler = shutil.which("c++") or shutil.which("g++")
        if not compiler:
            self.skipTest("no C++ compiler on PATH")
        with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
            blocks = re.findall(r"```cpp\n(.*?)```", f.read(), re.S)
        programs = [b for b in blocks if "int main" in b]
        self.assertEqual(len(programs), 1, "README should hold one complete example program")
        with tempfile.TemporaryDirectory() as tmp:
            source, exe = os.path.join(tmp, "example.cpp"), os.path.join(tmp, "example")
            with open(source, "w", encoding="utf-8") as f:
                f.write(programs[0])
            build = subprocess.run([compiler, "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", "-I", ROOT,
                                    source, "-o", exe, "-pthread"], capture_output=True, text=True, timeout=600)
            self.assertEqual(build.returncode, 0, build.stderr)
            run = subprocess.run([exe], cwd=ROOT, capture_output=True, text=True, timeout=120)
            self.assertEqual(run.returncode, 0, run.stderr)
            self.assertGreaterEqual(len(run.stdout), 200)  # 200 characters of the char model


if __name__ == "__main__":
    unittest.main()
