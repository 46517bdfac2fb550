#!/bin/sh
# The released sizes table of docs/PERFORMANCE.md: gpt2-bench on OpenAI's GPT-2 shapes (124M,
# 355M, 774M, 1558M; random weights) for every weight type at 1 and 2 threads, short runs.
#
#   bench/run_sizes.sh [path/to/gpt2-bench] [results.jsonl] [sizes] [types]
#
# Prints one JSON line per run (also appended to the results file), then the Markdown table.
set -e
BENCH=${1:-build/bench/gpt2-bench}
OUT=${2:-bench-sizes.jsonl}
SIZES=${3:-124M 355M 774M 1558M}
TYPES=${4:-f32 f16 bf16 q8_0 q4_0}
HERE=$(dirname "$0")
: > "$OUT"
for size in $SIZES; do
    for type in $TYPES; do
        for threads in 1 2; do
            "$BENCH" --random "$size" --type "$type" -t "$threads" --prompt 64 --gen 16 --repeat 3 --json | tee -a "$OUT"
        done
    done
done
python3 "$HERE/table.py" --sizes "$OUT"
