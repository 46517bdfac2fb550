#!/usr/bin/env python3
"""MaskBench's files as the lines gpt2-bench-schema reads (Python's standard library only).

    python3 tools/maskbench_prepare.py [--first N] INPUT... > maskbench.lines

INPUT: MaskBench data files (guidance-ai/jsonschemabench, maskbench/data/*.json, one schema
each), folders of them, or a file holding a list of them (the sample in ../shared/data/maskbench).
Each schema becomes a line "schema<TAB>its file name<TAB>the schema", and each of its tests a line
"valid<TAB>instance" or "invalid<TAB>instance", the instance written as MaskBench's runner writes it
(json.dumps with indent=None, ensure_ascii=False): JSON never holds a raw newline or tab, so a
line is a record. --first N keeps the first N schemas.
"""
import argparse
import json
import os
import sys


def schema_files(inputs):
    """(name, MaskBench file as a dict), in the order given; folders in name order."""
    for path in inputs:
        if os.path.isdir(path):
            for name in sorted(os.listdir(path)):
                if name.endswith(".json"):
                    with open(os.path.join(path, name), encoding="utf-8") as f:
                        yield name, json.load(f)
            continue
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        if isinstance(data, list):
            for item in data:
                yield item.get("file", "?"), item
        else:
            yield os.path.basename(path), data


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--first", type=int, default=0, help="keep only the first N schemas")
    parser.add_argument("inputs", nargs="+")
    args = parser.parse_args()
    out = sys.stdout
    for count, (name, item) in enumerate(schema_files(args.inputs)):
        if args.first and count >= args.first:
            break
        out.write("schema\t%s\t%s\n" % (name, json.dumps(item["schema"], ensure_ascii=False)))
        for test in item["tests"]:
            out.write("%s\t%s\n" % ("valid" if test["valid"] else "invalid", json.dumps(test["data"], indent=None, ensure_ascii=False)))


if __name__ == "__main__":
    main()
