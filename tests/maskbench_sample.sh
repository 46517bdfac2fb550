#!/usr/bin/env bash
# CI's schema benchmark: the first 500 schemas of MaskBench's sample through gpt2-bench-schema
# (bench/schema_bench.cpp), its table printed to the test's log. Fails on an invalidation error
# (an invalid instance accepted) or a grammar that could not be followed; speed is reported, not
# checked. Skipped (exit 77) where the sample, which lives outside the repository, is absent.
#
#   tests/maskbench_sample.sh BENCH MODEL SAMPLE OUT_LINES
set -euo pipefail
bench="$1" model="$2" sample="$3" lines="$4"
if [ ! -f "$sample" ]; then
    echo "skipped: $sample is absent (MaskBench's sample lives outside the repository)"
    exit 77
fi
python3 "$(dirname "$0")/../tools/maskbench_prepare.py" --first 500 "$sample" > "$lines"
grep -m1 -E "model name|^Model" /proc/cpuinfo 2>/dev/null || true
"$bench" -m "$model" "$lines"
