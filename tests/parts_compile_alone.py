#!/usr/bin/env python3
"""Each part of gpt2.h under src/ compiles on its own, as an editor opens it: it includes what it
uses (tools/amalgamate.py drops those includes from the generated header).

    python3 tests/parts_compile_alone.py [CXX]

CXX (default c++) is run with -std=c++17 -fsyntax-only on every part but the two that open and
close the implementation (src/implementation.h, src/end.h), with GPT2_REFERENCE_FORWARD defined
so that the reference forward pass is compiled too. Prints '<N> passed, <M> failed'.
"""
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import amalgamate  # noqa: E402

MARKERS = {"src/implementation.h", "src/end.h"}


def compile_part(cxx, part):
    result = subprocess.run([cxx, "-std=c++17", "-fsyntax-only", "-DGPT2_REFERENCE_FORWARD", "-x", "c++", os.path.join(ROOT, part)],
                            capture_output=True, text=True)
    return part, result.returncode, result.stderr


def main():
    cxx = sys.argv[1] if len(sys.argv) > 1 else "c++"
    parts = [p for p in amalgamate.OUTPUTS["gpt2.h"] if p not in MARKERS]
    failed = 0
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        for part, code, stderr in pool.map(lambda p: compile_part(cxx, p), parts):
            if code != 0:
                failed += 1
                print(f"FAIL {part}:\n{stderr[:2000]}")
    print(f"{len(parts) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
