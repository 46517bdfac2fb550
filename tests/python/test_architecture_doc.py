"""docs/ARCHITECTURE.md names only what exists: every function, type, macro and file it cites.

The names are the backticked words that start with gpt2_ / gpt2__ / GPT2_ (a call's parentheses,
template arguments and a `->` before the name are dropped); each must be defined or used as a word
somewhere under src/. Every backticked path under src/, tools/, tests/, docs/, bench/ or examples/
must exist (a bare file name, as `avx512.h`, is looked for anywhere under src/).
"""
import os
import re
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOC = os.path.join(ROOT, "docs", "ARCHITECTURE.md")


def source_text():
    texts = []
    for folder, _, files in os.walk(os.path.join(ROOT, "src")):
        for name in files:
            with open(os.path.join(folder, name), encoding="utf-8") as f:
                texts.append(f.read())
    return "\n".join(texts)


def source_files():
    return {name for _, _, files in os.walk(os.path.join(ROOT, "src")) for name in files}


def cited(doc):
    """The backticked spans of the document."""
    return re.findall(r"`([^`]+)`", doc)


class ArchitectureDocTest(unittest.TestCase):
    def setUp(self):
        with open(DOC, encoding="utf-8") as f:
            self.spans = cited(f.read())

    def test_every_cited_name_exists_in_src(self):
        src = source_text()
        names = set()
        for span in self.spans:
            for name in re.findall(r"\b(?:gpt2_|GPT2_)\w+", span.split("(")[0].split("<")[0]):
                names.add(name)
        self.assertGreater(len(names), 30, "the document cites the functions a token passes through")
        missing = sorted(n for n in names if not re.search(r"\b" + re.escape(n) + r"\b", src))
        self.assertEqual(missing, [], "docs/ARCHITECTURE.md cites names that src/ does not have")

    def test_every_cited_path_exists(self):
        files = source_files()
        missing = []
        for span in self.spans:
            span = span.split()[0] if span.split() else span
            if "NAME" in span:  # a placeholder: `src/cpu/kernels/NAME.h`
                continue
            if re.fullmatch(r"(src|tools|tests|docs|bench|examples)/[\w./-]+", span):
                if not os.path.exists(os.path.join(ROOT, span)):
                    missing.append(span)
            elif re.fullmatch(r"[\w/]+\.(h|cuh)", span) and os.path.basename(span) not in files and not os.path.exists(os.path.join(ROOT, span)) \
                    and not os.path.exists(os.path.join(ROOT, "src", span)):
                missing.append(span)
        self.assertEqual(missing, [], "docs/ARCHITECTURE.md cites files that do not exist")


if __name__ == "__main__":
    unittest.main()
