#!/usr/bin/env bash
# Many sessions decoding together, gpt2.h beside llama.cpp's llama-batched-bench on the same GGUF
# files (as bench/beside_llama.sh makes them), alternated in one sitting: B sessions (BATCHES,
# default "8 32") each with a prompt of 128 tokens, then 32 tokens decoded by all of them at once;
# each weight type at THREADS threads (default 2), ROUNDS rounds (default 3). gpt2-bench --batch B
# times gpt2_batch_eval steps from the context (each session a copy of one prefilled session);
# llama-batched-bench prefills B different prompts and times its text generation, S_TG (its
# prompts' prefill is not compared). Prints the Markdown table: medians of the aggregate decode
# tokens/s, the range in brackets, the ratio, and our share of the roofline that counts the KV
# reads (gpt2-bench's batch_pct_of_roofline: the weights read once a step and every session's
# cache, or the products at the multiplying unit's peak, whichever is slower).
#
#   bench/beside_llama_batched.sh build/bench/gpt2-bench path/to/llama-batched-bench [results.jsonl]
#   TYPES="f16 q8_0" BATCHES="8" THREADS="1 2" ROUNDS=5 MODEL=774M bench/beside_llama_batched.sh ...
set -euo pipefail
gpt2_bench="$1"; llama_batched="$2"; out="${3:-beside-llama-batched.jsonl}"
rounds="${ROUNDS:-3}"; types="${TYPES:-f16 q8_0 q4_0}"; threads_list="${THREADS:-2}"; batches="${BATCHES:-8 32}"
model="${MODEL:-124M}"; prompt=128; gen=32
models=$(mktemp -d)
trap 'rm -rf "$models"' EXIT
for type in $types; do "$gpt2_bench" --random "$model" --type "$type" --save "$models/$type.gguf" >/dev/null; done
: > "$out"

run_gpt2() {
    # shellcheck disable=SC2086  # GPT2_BENCH_ARGS holds several words
    "$gpt2_bench" -m "$models/$1.gguf" -t "$2" --prompt "$prompt" --gen "$gen" --batch "$4" --repeat 3 --bandwidth-mb 256 ${GPT2_BENCH_ARGS:-} --json |
        python3 -c 'import json, sys; r = json.loads(sys.stdin.readline())
print(json.dumps({"program": "gpt2.h", "type": sys.argv[1], "threads": int(sys.argv[2]), "round": int(sys.argv[3]), "batch": int(sys.argv[4]),
                  "decode_tok_s": r["decode_tok_s"], "single_tok_s": 1000 / r["decode_ms_per_token"], "batch_pct_of_roofline": r["batch_pct_of_roofline"],
                  "batch_roofline_bound": r["batch_roofline_bound"], "kernels": r["kernels"]}))' "$1" "$2" "$3" "$4"
}
run_llama() {
    local line
    line=$("$llama_batched" -m "$models/$1.gguf" -t "$2" -c $(( $4 * (prompt + gen) + 64 )) -kvu -npp "$prompt" -ntg "$gen" -npl "$4" --output-format jsonl 2>/dev/null | grep '"speed_tg"' | tail -1)
    python3 -c 'import json, sys; r = json.loads(sys.argv[5])
print(json.dumps({"program": "llama.cpp", "type": sys.argv[1], "threads": int(sys.argv[2]), "round": int(sys.argv[3]), "batch": int(sys.argv[4]), "decode_tok_s": r["speed_tg"]}))' "$1" "$2" "$3" "$4" "$line"
}

for round in $(seq "$rounds"); do
    for type in $types; do
        for threads in $threads_list; do
            for batch in $batches; do
                if [ $((round % 2)) = 1 ]; then
                    run_gpt2 "$type" "$threads" "$round" "$batch" >> "$out"; run_llama "$type" "$threads" "$round" "$batch" >> "$out"
                else
                    run_llama "$type" "$threads" "$round" "$batch" >> "$out"; run_gpt2 "$type" "$threads" "$round" "$batch" >> "$out"
                fi
            done
        done
    done
    echo "beside_llama_batched: round $round of $rounds done" >&2
done

python3 - "$out" "$model" <<'PY'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
def of(program, t, n, b, key):
    return [r[key] for r in rows if r["program"] == program and r["type"] == t and r["threads"] == n and r["batch"] == b]
def cell(values):
    return f"{statistics.median(values):.1f} ({min(values):.0f}-{max(values):.0f})"
ours = [r for r in rows if r["program"] == "gpt2.h"]
print(f"{sys.argv[2]}, kernels {ours[0]['kernels']}; prompts of 128, 32 tokens decoded by every session; {max(r['round'] for r in rows)} rounds\n")
print("| weights | threads | sessions | decode tok/s gpt2.h | llama.cpp | ratio | gpt2.h / one session | gpt2.h, % of the roofline with KV reads |")
print("|---|---|---|---|---|---|---|---|")
for t in dict.fromkeys(r["type"] for r in rows):
    for n in sorted({r["threads"] for r in rows}):
        for b in sorted({r["batch"] for r in rows}):
            d_ours, d_llama = of("gpt2.h", t, n, b, "decode_tok_s"), of("llama.cpp", t, n, b, "decode_tok_s")
            if not d_ours or not d_llama:
                continue
            single = statistics.median(of("gpt2.h", t, n, b, "single_tok_s"))
            bound = of("gpt2.h", t, n, b, "batch_roofline_bound")[0]
            print(f"| {t} | {n} | {b} | {cell(d_ours)} | {cell(d_llama)} | {statistics.median(d_ours) / statistics.median(d_llama):.2f} | "
                  f"{statistics.median(d_ours) / single:.2f}x | {statistics.median(of('gpt2.h', t, n, b, 'batch_pct_of_roofline')):.0f}% ({bound}-bound) |")
PY
