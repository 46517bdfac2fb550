#!/usr/bin/env bash
# Two builds of gpt2-bench side by side, alternated in one sitting (the order flipped each round):
# every weight type of the random GPT-2 124M shape at 1 and 2 threads, with --batch 1 and --batch 8,
# ROUNDS times each (default 3). Prints the medians of each build and their ratio (after / before)
# per configuration. MODEL, TYPES, THREADS, BATCHES and GPT2_BENCH_ARGS (e.g. "--kernels avx2")
# narrow or change the sitting.
#
#   bench/compare_builds.sh BEFORE/gpt2-bench AFTER/gpt2-bench [results.jsonl]
#   MODEL=774M TYPES="f16 bf16" BATCHES=1 GPT2_BENCH_ARGS="--kernels avx2" bench/compare_builds.sh ...
set -euo pipefail
before="$1"; after="$2"; out="${3:-compare-builds.jsonl}"
rounds="${ROUNDS:-3}"
: > "$out"
for type in ${TYPES:-f32 f16 bf16 q8_0 q4_0}; do
    for threads in ${THREADS:-1 2}; do
        for batch in ${BATCHES:-1 8}; do
            for round in $(seq "$rounds"); do
                order="before after"; [ $((round % 2)) = 0 ] && order="after before"
                for build in $order; do
                    bin="$before"; [ "$build" = after ] && bin="$after"
                    # shellcheck disable=SC2086 # GPT2_BENCH_ARGS is a list of options
                    "$bin" --random "${MODEL:-124M}" --type "$type" -t "$threads" --prompt 128 --gen 32 --repeat 3 --batch "$batch" --bandwidth-mb 256 ${GPT2_BENCH_ARGS:-} --json |
                        python3 -c "import json,sys; r=json.loads(sys.stdin.readline()); r.update(build='$build', round=$round); print(json.dumps(r))" >> "$out"
                done
            done
        done
    done
done
python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
keys = [("prefill_tok_s", "prefill tok/s"), ("decode_ms_per_token", "decode ms/token"), ("decode_pct_of_limit", "decode % of bandwidth"), ("decode_ms_per_step", "batch step ms"),
        ("generate_batch_ms_per_step", "generate_batch step ms")]
configs = sorted({(r["type"], r["threads"], r["batch"]) for r in rows}, key=lambda c: (["f32", "f16", "bf16", "q8_0", "q4_0"].index(c[0]), c[1], c[2]))
print("| weights | threads | batch | " + " | ".join(f"{name} before | after | ratio" for _, name in keys) + " |")
print("|---|---|---|" + "---|---|---|" * len(keys))
for c in configs:
    cells = []
    for key, _ in keys:
        med = {b: statistics.median(r[key] for r in rows if (r["type"], r["threads"], r["batch"]) == c and r["build"] == b) for b in ("before", "after")}
        cells.append(f"{med['before']:.2f} | {med['after']:.2f} | {med['after'] / med['before']:.3f}")
    print(f"| {c[0]} | {c[1]} | {c[2]} | " + " | ".join(cells) + " |")
PY
