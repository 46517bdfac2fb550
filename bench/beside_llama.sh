#!/usr/bin/env bash
# gpt2.h beside llama.cpp on the same GGUF files, alternated in one sitting (issue 34's tables):
# GPT-2 124M's shape with random weights and GPT-2's vocabulary (gpt2-bench --save), prompt 128,
# then 32 tokens decoded after it, each weight type at 1 and 2 threads, ROUNDS rounds (default 5)
# whose order of the two programs alternates. Prints the Markdown table: medians, the range of the
# rounds in brackets, the ratio, and our decode against the read bandwidth gpt2-bench measures in
# the same run.
#
#   bench/beside_llama.sh build/bench/gpt2-bench path/to/llama-bench [results.jsonl]
#   ROUNDS=10 TYPES="f16" THREADS=2 bench/beside_llama.sh ...   (the spread of 10 alternated runs)
#
# llama-bench: from llama.cpp's source (llama-cpp-python's source package has it in
# vendor/llama.cpp): cmake -B build -DLLAMA_CURL=OFF && cmake --build build --target llama-bench;
# add -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON for its AVX2 build, and run
# gpt2-bench with --kernels avx2 (GPT2_BENCH_ARGS="--kernels avx2") beside it.
set -euo pipefail
gpt2_bench="$1"; llama_bench="$2"; out="${3:-beside-llama.jsonl}"
rounds="${ROUNDS:-5}"; types="${TYPES:-f32 f16 q8_0 q4_0}"; threads_list="${THREADS:-1 2}"
models=$(mktemp -d)
trap 'rm -rf "$models"' EXIT
for type in $types; do "$gpt2_bench" --random 124M --type "$type" --save "$models/$type.gguf" >/dev/null; done
: > "$out"

# one JSON line: {program, type, threads, round, decode_tok_s, prefill_tok_s[, decode_pct_of_limit]}
run_gpt2() {
    # shellcheck disable=SC2086  # GPT2_BENCH_ARGS holds several words
    "$gpt2_bench" -m "$models/$1.gguf" -t "$2" --prompt 128 --gen 32 --repeat 3 ${GPT2_BENCH_ARGS:-} --json |
        python3 -c 'import json, sys; r = json.loads(sys.stdin.readline())
print(json.dumps({"program": "gpt2.h", "type": sys.argv[1], "threads": int(sys.argv[2]), "round": int(sys.argv[3]), "decode_tok_s": 1000 / r["decode_ms_per_token"],
                  "prefill_tok_s": r["prefill_tok_s"], "decode_pct_of_limit": r["decode_pct_of_limit"], "bandwidth_gb_s": r["bandwidth_gb_s"], "kernels": r["kernels"]}))' "$1" "$2" "$3"
}
run_llama() {
    local decode prefill
    decode=$("$llama_bench" -m "$models/$1.gguf" -t "$2" -p 0 -n 32 -d 128 -r 3 -o jsonl 2>/dev/null | tail -1)
    prefill=$("$llama_bench" -m "$models/$1.gguf" -t "$2" -p 128 -n 0 -r 3 -o jsonl 2>/dev/null | tail -1)
    python3 -c 'import json, sys; d, p = json.loads(sys.argv[4]), json.loads(sys.argv[5])
print(json.dumps({"program": "llama.cpp", "type": sys.argv[1], "threads": int(sys.argv[2]), "round": int(sys.argv[3]),
                  "decode_tok_s": d["avg_ts"], "prefill_tok_s": p["avg_ts"]}))' "$1" "$2" "$3" "$decode" "$prefill"
}

for round in $(seq "$rounds"); do
    for type in $types; do
        for threads in $threads_list; do
            if [ $((round % 2)) = 1 ]; then
                run_gpt2 "$type" "$threads" "$round" >> "$out"; run_llama "$type" "$threads" "$round" >> "$out"
            else
                run_llama "$type" "$threads" "$round" >> "$out"; run_gpt2 "$type" "$threads" "$round" >> "$out"
            fi
        done
    done
    echo "beside_llama: round $round of $rounds done" >&2
done

python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
def of(program, t, n, key):
    return [r[key] for r in rows if r["program"] == program and r["type"] == t and r["threads"] == n]
def cell(values):
    return f"{statistics.median(values):.1f} ({min(values):.0f}-{max(values):.0f})"
ours = [r for r in rows if r["program"] == "gpt2.h"]
print(f"kernels {ours[0]['kernels']}; read bandwidth measured by gpt2-bench, median {statistics.median(r['bandwidth_gb_s'] for r in ours):.1f} GB/s"
      f" ({min(r['bandwidth_gb_s'] for r in ours):.1f}-{max(r['bandwidth_gb_s'] for r in ours):.1f}); {max(r['round'] for r in rows)} rounds\n")
print("| weights | threads | decode tok/s gpt2.h | llama.cpp | ratio | gpt2.h, % of bandwidth limit | prefill tok/s gpt2.h | llama.cpp | ratio |")
print("|---|---|---|---|---|---|---|---|---|")
for t in dict.fromkeys(r["type"] for r in rows):
    for n in sorted({r["threads"] for r in rows}):
        d_ours, d_llama = of("gpt2.h", t, n, "decode_tok_s"), of("llama.cpp", t, n, "decode_tok_s")
        p_ours, p_llama = of("gpt2.h", t, n, "prefill_tok_s"), of("llama.cpp", t, n, "prefill_tok_s")
        if not d_ours or not d_llama:
            continue
        print(f"| {t} | {n} | {cell(d_ours)} | {cell(d_llama)} | {statistics.median(d_ours) / statistics.median(d_llama):.2f} | "
              f"{statistics.median(of('gpt2.h', t, n, 'decode_pct_of_limit')):.0f}% | {cell(p_ours)} | {cell(p_llama)} | "
              f"{statistics.median(p_ours) / statistics.median(p_llama):.2f} |")
PY
