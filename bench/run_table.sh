#!/bin/sh
# The table of docs/PERFORMANCE.md: gpt2-bench on the random GPT-2 124M shape for every weight
# type at 1 and 2 threads, then decode at a 1,024-token context (f32 and f16 KV cache).
#
#   bench/run_table.sh [path/to/gpt2-bench] [results.jsonl]
#
# Prints one JSON line per run (also appended to the results file), then the Markdown table of
# docs/PERFORMANCE.md and the short one of the README.
set -e
BENCH=${1:-build/bench/gpt2-bench}
OUT=${2:-bench-results.jsonl}
HERE=$(dirname "$0")
: > "$OUT"
for type in f32 f16 bf16 q8_0 q4_0; do
    for threads in 1 2; do
        "$BENCH" --random 124M --type $type -t $threads --prompt 128 --gen 32 --repeat 5 --json | tee -a "$OUT"
    done
done
for type in f32 q8_0; do
    "$BENCH" --random 124M --type $type -t 2 --prompt 128 --context 1000 --gen 16 --repeat 3 --json | tee -a "$OUT"
    "$BENCH" --random 124M --type $type -t 2 --prompt 128 --context 1000 --gen 16 --repeat 3 --kv-f16 --json | tee -a "$OUT"
done
python3 "$HERE/table.py" "$OUT"
echo
python3 "$HERE/table.py" --compact "$OUT"
