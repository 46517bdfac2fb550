#!/usr/bin/env bash
# Two builds of gpt2-bench side by side, alternated in one sitting: every weight type of the random
# GPT-2 124M shape at 1 and 2 threads, with --batch 1 and --batch 8, ROUNDS times each (default 3).
# Prints the medians of each build and their ratio (after / before) per configuration.
#
#   bench/compare_builds.sh BEFORE/gpt2-bench AFTER/gpt2-bench [results.jsonl]
set -euo pipefail
before="$1"; after="$2"; out="${3:-compare-builds.jsonl}"
rounds="${ROUNDS:-3}"
: > "$out"
for type in f32 f16 bf16 q8_0 q4_0; do
    for threads in 1 2; do
        for batch in 1 8; do
            for round in $(seq "$rounds"); do
                for build in before after; do
                    bin="$before"; [ "$build" = after ] && bin="$after"
                    "$bin" --random 124M --type "$type" -t "$threads" --prompt 128 --gen 32 --repeat 3 --batch "$batch" --bandwidth-mb 256 --json |
                        python3 -c "import json,sys; r=json.loads(sys.stdin.readline()); r.update(build='$build', round=$round); print(json.dumps(r))" >> "$out"
                done
            done
        done
    done
done
python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
keys = [("prefill_tok_s", "prefill tok/s"), ("decode_ms_per_token", "decode ms/token"), ("decode_ms_per_step", "batch step ms"),
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
