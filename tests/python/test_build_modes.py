"""The implementation tells a user who compiles it the slow or the wrong way: as C++ older than 17
it stops with an #error that names C++17 (before, clang's default C++14 gave 20 errors starting at
std::string_view); without optimisation the compiler prints a note and every model load logs a
warning (before, such a program ran about ten times slower in silence)."""
import os
import shutil
import subprocess
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(ROOT, "models", "shakespeare_char_medium.gguf")

PROGRAM = r"""
#define GPT2_IMPLEMENTATION
#include "gpt2.h"
#include <cstdio>
static void log_line(void*, gpt2_log_level level, const char* message) {
    if (level == GPT2_LOG_WARNING) std::printf("warning: %s\n", message);
}
int main(int argc, char** argv) {
    gpt2_model_params p = gpt2_model_default_params();
    p.log = log_line;
    gpt2_model* model;
    gpt2_error err;
    if (gpt2_model_load_file(argv[1], &p, &model, &err) != GPT2_OK) return std::printf("%s\n", err.message), 1;
    gpt2_model_free(model);
    return argc > 2;
}
"""


class BuildModes(unittest.TestCase):
    def setUp(self):
        self.compiler = shutil.which("g++") or shutil.which("c++")
        if not self.compiler:
            self.skipTest("no C++ compiler on PATH")
        self.tmp = tempfile.TemporaryDirectory()
        self.source = os.path.join(self.tmp.name, "main.cpp")
        with open(self.source, "w", encoding="utf-8") as f:
            f.write(PROGRAM)

    def tearDown(self):
        self.tmp.cleanup()

    def compile(self, *flags):
        exe = os.path.join(self.tmp.name, "main")
        build = subprocess.run([self.compiler, *flags, "-I", ROOT, self.source, "-o", exe, "-pthread"],
                               capture_output=True, text=True, timeout=900)
        return build, exe

    def test_older_cplusplus_is_told_to_use_cplusplus17(self):
        build, _ = self.compile("-std=c++14", "-fsyntax-only")
        self.assertNotEqual(build.returncode, 0)
        self.assertIn("the implementation needs C++17 or later", build.stderr)
        first_error = next(line for line in build.stderr.splitlines() if "error" in line)
        self.assertIn("C++17", first_error, "the #error must come first, before what C++14 cannot parse")

    def test_unoptimised_build_is_noted_at_compile_time_and_at_load(self):
        if not os.path.exists(MODEL):
            self.skipTest("the shipped model is unpacked by CMake's configure step")
        build, exe = self.compile("-std=c++17", "-O0")
        self.assertEqual(build.returncode, 0, build.stderr)
        self.assertIn("compiled without optimisation", build.stderr)
        run = subprocess.run([exe, MODEL], capture_output=True, text=True, timeout=120)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        self.assertIn("warning: this program's copy of gpt2.h was compiled without optimisation", run.stdout)

    def test_optimised_build_says_nothing(self):
        build, _ = self.compile("-std=c++17", "-O1", "-fsyntax-only")
        self.assertEqual(build.returncode, 0, build.stderr)
        self.assertNotIn("without optimisation", build.stderr)

    def test_unoptimised_ok_silences_the_note(self):
        build, _ = self.compile("-std=c++17", "-O0", "-DGPT2_UNOPTIMISED_OK", "-fsyntax-only")
        self.assertEqual(build.returncode, 0, build.stderr)
        self.assertNotIn("without optimisation", build.stderr)


if __name__ == "__main__":
    unittest.main()
