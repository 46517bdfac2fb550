"""The documents say what the code has, so that they cannot drift from it.

- README.md stays a page a newcomer reads (at most 200 lines); the details live under docs/.
- Every link in README.md, docs/, examples/web/README.md and bench/*.md resolves: the file exists,
  and an anchor (#heading) names a heading of its file, as GitHub makes anchors from headings.
- Every backticked gpt2_/GPT2_ name a document cites is defined or used in the code (bench/*.md,
  the results' history, may name what has gone since), and every backticked path under the
  repository's folders exists (a model as the .tar.gz the repository keeps counts).
- Every flag `gpt2 --help` lists is in docs/GUIDE.md (the guide of the `gpt2` program).
- Every gpt2_result code has its entry in docs/ERRORS.md, and the C# binding's Gpt2Result names
  the same codes in the same order.
- The documents a user reads (README.md, docs/) name no issue numbers or work sittings: they
  describe today.
"""
import glob
import os
import re
import subprocess
import unittest

from cli_paths import PROGRAM, ROOT

USER_DOCS = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
ALL_DOCS = USER_DOCS + [os.path.join(ROOT, "examples", "web", "README.md")] + sorted(glob.glob(os.path.join(ROOT, "bench", "*.md")))
CODE_FOLDERS = ["src", "examples", "bench", "tests", "tools", "bindings"]
CODE_SUFFIXES = (".h", ".c", ".cpp", ".cuh", ".cu", ".cs", ".py", ".sh", ".js", ".txt", ".cmake")
PATH_FOLDERS = ["src", "tools", "tests", "docs", "bench", "examples", "bindings", "models"]
PLACEHOLDERS = ("NAME", "FILE", "DIR", "MODEL", "*", "...", "…")


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def rel(path):
    return os.path.relpath(path, ROOT)


def code_text():
    texts = [read(os.path.join(ROOT, "CMakeLists.txt"))]
    for top in CODE_FOLDERS:
        for folder, _, files in os.walk(os.path.join(ROOT, top)):
            texts += [read(os.path.join(folder, name)) for name in files if name.endswith(CODE_SUFFIXES)]
    return "\n".join(texts)


def without_code_blocks(text):
    return re.sub(r"```.*?```", "", text, flags=re.S)


def heading_anchors(text):
    """The anchors GitHub gives a document's headings: lower case, punctuation dropped but - and _,
    spaces to hyphens; a repeated heading gets -1, -2, ..."""
    anchors, seen = set(), {}
    for heading in re.findall(r"^#{1,6} +(.+?) *#*$", without_code_blocks(text), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else "%s-%d" % (slug, count))
    return anchors


class DocsTest(unittest.TestCase):
    def test_readme_is_one_short_page(self):
        lines = read(os.path.join(ROOT, "README.md")).count("\n")
        self.assertLessEqual(lines, 200, "README.md is for deciding to use the library; details go to docs/GUIDE.md")

    def test_every_link_resolves(self):
        broken = []
        for doc in ALL_DOCS:
            text = without_code_blocks(read(doc))
            for target in re.findall(r"\]\(([^)\s]+)\)", text):
                if re.match(r"[a-z]+:", target):  # a web address
                    continue
                path, _, anchor = target.partition("#")
                full = os.path.normpath(os.path.join(os.path.dirname(doc), path)) if path else doc
                if not os.path.exists(full):
                    broken.append("%s: %s (no such file)" % (rel(doc), target))
                elif anchor and full.endswith(".md") and anchor not in heading_anchors(read(full)):
                    broken.append("%s: %s (no such heading)" % (rel(doc), target))
        self.assertEqual(broken, [])

    def test_every_cited_name_exists_in_the_code(self):
        code = code_text()
        missing = []
        for doc in USER_DOCS + [os.path.join(ROOT, "examples", "web", "README.md")]:
            for span in re.findall(r"`([^`\n]+)`", read(doc)):
                for name in re.findall(r"\b(?:gpt2_|GPT2_)\w+", span.split("(")[0].split("<")[0]):
                    if not re.search(r"\b" + re.escape(name) + r"\b", code):
                        missing.append("%s: %s" % (rel(doc), name))
        self.assertEqual(sorted(set(missing)), [])

    def test_every_cited_path_exists(self):
        missing = []
        folders = "|".join(PATH_FOLDERS)
        for doc in ALL_DOCS:
            for span in re.findall(r"`([^`\n]+)`", read(doc)):
                words = span.split()
                if not words or any(p in words[0] for p in PLACEHOLDERS):
                    continue
                path = words[0].rstrip(",.:;")
                if re.fullmatch(r"(?:%s)/[\w./+-]+" % folders, path) \
                        and not os.path.exists(os.path.join(ROOT, path)) and not os.path.exists(os.path.join(ROOT, path + ".tar.gz")):
                    missing.append("%s: %s" % (rel(doc), path))
        self.assertEqual(sorted(set(missing)), [])

    def test_help_flags_are_in_the_guide(self):
        if not os.path.exists(PROGRAM):
            self.skipTest("the gpt2 program is not built (%s)" % PROGRAM)
        helped = subprocess.run([PROGRAM, "--help"], capture_output=True, text=True, timeout=60)
        self.assertEqual(helped.returncode, 0, helped.stderr)
        flags = set(re.findall(r"(?<![\w-])(--[a-z][\w-]*)", helped.stdout))
        self.assertGreater(len(flags), 30, "the help lists the program's flags")
        guide = read(os.path.join(ROOT, "docs", "GUIDE.md"))
        missing = sorted(f for f in flags if not re.search(re.escape(f) + r"(?![\w-])", guide))
        self.assertEqual(missing, [], "flags in `gpt2 --help` that docs/GUIDE.md does not mention")

    def test_every_error_code_has_its_entry_and_its_csharp_name(self):
        api = read(os.path.join(ROOT, "src", "api.h"))
        body = re.search(r"typedef enum gpt2_result \{(.*?)\} gpt2_result;", api, re.S).group(1)
        codes = re.findall(r"\b(GPT2_(?:OK|ERROR_\w+))\b", re.sub(r"/\*.*?\*/", "", body, flags=re.S))
        self.assertGreater(len(codes), 10)
        errors = read(os.path.join(ROOT, "docs", "ERRORS.md"))
        self.assertEqual([c for c in codes[1:] if c not in errors], [], "codes docs/ERRORS.md does not explain")
        binding = read(os.path.join(ROOT, "bindings", "csharp", "Gpt2.cs"))
        members = re.search(r"public enum Gpt2Result\s*\{(.*?)\}", binding, re.S).group(1)
        csharp = [m.split("=")[0].strip() for m in re.sub(r"//.*", "", members).split(",") if m.strip()]
        expected = ["".join(w.capitalize() for w in c.replace("GPT2_ERROR_", "").replace("GPT2_", "").split("_")) for c in codes]
        self.assertEqual(csharp, expected, "the C# Gpt2Result must name gpt2_result's codes in their order")

    def test_user_docs_describe_today(self):
        dated = []
        for doc in USER_DOCS:
            for number, line in enumerate(read(doc).split("\n"), 1):
                if re.search(r"\bissue \d+|\bsittings?\b", line, re.I):
                    dated.append("%s:%d: %s" % (rel(doc), number, line.strip()[:80]))
        self.assertEqual(dated, [], "history belongs in bench/results/, not in the documents a user reads")


if __name__ == "__main__":
    unittest.main()
