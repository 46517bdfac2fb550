#!/usr/bin/env bash
# gpt2.h beside llama.cpp on the same GGUF files, alternated in one sitting: GPT-2-shaped models
# with random weights and GPT-2's vocabulary (gpt2-bench --save), each weight type at 1 and 2
# threads, ROUNDS rounds (default 5) whose order of the two programs alternates. Per round: a
# prompt of each length in PROMPTS (default 128) timed as prefill, then 32 tokens decoded after
# the first one. Prints the Markdown tables: medians, the range of the rounds in brackets, the
# ratio; our decode against the read bandwidth and our prefill against the limit of the unit that
# multiplies, both as gpt2-bench measures them in the same run.
#
#   bench/beside_llama.sh build/bench/gpt2-bench path/to/llama-bench [results.jsonl]
#   ROUNDS=10 TYPES="f16" THREADS=2 bench/beside_llama.sh ...   (the spread of 10 alternated runs)
#   MODELS="124M 774M" PROMPTS="128 512" TYPES="f16 bf16 q8_0 q4_0" GPT2_BENCH_ARGS="--kernels avx2" \
#       bench/beside_llama.sh build/bench/gpt2-bench llama-avx2/bin/llama-bench   (the AVX2 sets' prompts)
#
# CPU_TIME=1 adds, at one thread, each prompt's CPU time (gpt2-bench's prefill_cpu_ms; llama-bench's
# from its CPU time with -r 6 less that with -r 1, over 5): the work itself, whatever else a shared
# host ran meanwhile, which wall time is not.
#
# llama-bench: from llama.cpp's source (llama-cpp-python's source package has it in
# vendor/llama.cpp): cmake -B build -DLLAMA_CURL=OFF && cmake --build build --target llama-bench;
# for its AVX2 build add -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON
# -DGGML_F16C=ON -DGGML_AVX512=OFF -DGGML_BMI2=ON, and run gpt2-bench with --kernels avx2 beside it.
# Many sessions at once beside llama-batched-bench: bench/beside_llama_batched.sh.
set -euo pipefail
gpt2_bench="$1"; llama_bench="$2"; out="${3:-beside-llama.jsonl}"
rounds="${ROUNDS:-5}"; types="${TYPES:-f32 f16 q8_0 q4_0}"; threads_list="${THREADS:-1 2}"
models_list="${MODELS:-124M}"; prompts="${PROMPTS:-128}"
first_prompt="${prompts%% *}"
models=$(mktemp -d)
trap 'rm -rf "$models"' EXIT
for model in $models_list; do
    for type in $types; do "$gpt2_bench" --random "$model" --type "$type" --save "$models/$model-$type.gguf" >/dev/null; done
done
: > "$out"

# one JSON line: {program, model, type, threads, prompt, round, prefill_tok_s[, decode_tok_s,
# decode_pct_of_limit, prefill_pct_of_limit, ...]}; the decode only with the first prompt length
run_gpt2() {
    local gen=32
    [ "$5" = "$first_prompt" ] || gen=1
    # shellcheck disable=SC2086  # GPT2_BENCH_ARGS holds several words
    "$gpt2_bench" -m "$models/$1-$2.gguf" -t "$3" --prompt "$5" --gen "$gen" --repeat 3 ${GPT2_BENCH_ARGS:-} --json |
        python3 -c 'import json, sys; r = json.loads(sys.stdin.readline()); decode = sys.argv[5] == sys.argv[6]
line = {"program": "gpt2.h", "model": sys.argv[1], "type": sys.argv[2], "threads": int(sys.argv[3]), "round": int(sys.argv[4]), "prompt": int(sys.argv[5]),
        "prefill_tok_s": r["prefill_tok_s"], "prefill_pct_of_limit": r["prefill_pct_of_limit"], "prefill_limit_unit": r["prefill_limit_unit"],
        "bandwidth_gb_s": r["bandwidth_gb_s"], "kernels": r["kernels"], "prefill_cpu_tok_s": int(sys.argv[5]) / (r["prefill_cpu_ms"] / 1000)}
if decode: line.update({"decode_tok_s": 1000 / r["decode_ms_per_token"], "decode_pct_of_limit": r["decode_pct_of_limit"]})
print(json.dumps(line))' "$1" "$2" "$3" "$4" "$5" "$first_prompt"
}
run_llama() {
    local decode="" prefill
    if [ "$5" = "$first_prompt" ]; then decode=$("$llama_bench" -m "$models/$1-$2.gguf" -t "$3" -p 0 -n 32 -d "$5" -r 3 -o jsonl 2>/dev/null | tail -1); fi
    prefill=$("$llama_bench" -m "$models/$1-$2.gguf" -t "$3" -p "$5" -n 0 -r 3 -o jsonl 2>/dev/null | tail -1)
    local cpu_tok_s=""
    if [ "${CPU_TIME:-0}" = 1 ] && [ "$3" = 1 ]; then
        cpu_tok_s=$(python3 -c 'import resource, subprocess, sys
def cpu(repeats):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(sys.argv[1:] + ["-r", str(repeats)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
prompt = int(sys.argv[sys.argv.index("-p") + 1])
print(prompt * 5 / (cpu(6) - cpu(1)))' "$llama_bench" -m "$models/$1-$2.gguf" -t 1 -p "$5" -n 0)
    fi
    python3 -c 'import json, sys; p = json.loads(sys.argv[7])
line = {"program": "llama.cpp", "model": sys.argv[1], "type": sys.argv[2], "threads": int(sys.argv[3]), "round": int(sys.argv[4]), "prompt": int(sys.argv[5]), "prefill_tok_s": p["avg_ts"]}
if sys.argv[6]: line["decode_tok_s"] = json.loads(sys.argv[6])["avg_ts"]
if sys.argv[8]: line["prefill_cpu_tok_s"] = float(sys.argv[8])
print(json.dumps(line))' "$1" "$2" "$3" "$4" "$5" "$decode" "$prefill" "$cpu_tok_s"
}

for round in $(seq "$rounds"); do
    for model in $models_list; do
        for type in $types; do
            for threads in $threads_list; do
                for prompt in $prompts; do
                    if [ $((round % 2)) = 1 ]; then
                        run_gpt2 "$model" "$type" "$threads" "$round" "$prompt" >> "$out"; run_llama "$model" "$type" "$threads" "$round" "$prompt" >> "$out"
                    else
                        run_llama "$model" "$type" "$threads" "$round" "$prompt" >> "$out"; run_gpt2 "$model" "$type" "$threads" "$round" "$prompt" >> "$out"
                    fi
                done
            done
        done
    done
    echo "beside_llama: round $round of $rounds done" >&2
done

python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
def of(program, m, t, n, p, key):
    return [r[key] for r in rows if r["program"] == program and r["model"] == m and r["type"] == t and r["threads"] == n and r["prompt"] == p and key in r]
def cell(values):
    return f"{statistics.median(values):.1f} ({min(values):.0f}-{max(values):.0f})"
ours = [r for r in rows if r["program"] == "gpt2.h"]
print(f"kernels {ours[0]['kernels']}; read bandwidth measured by gpt2-bench, median {statistics.median(r['bandwidth_gb_s'] for r in ours):.1f} GB/s"
      f" ({min(r['bandwidth_gb_s'] for r in ours):.1f}-{max(r['bandwidth_gb_s'] for r in ours):.1f}); {max(r['round'] for r in rows)} rounds\n")
first = min(r["prompt"] for r in rows)
keys = list(dict.fromkeys((r["model"], r["type"]) for r in rows))
threads = sorted({r["threads"] for r in rows})
print(f"Decode of 32 tokens after a prompt of {first}:\n")
print("| model | weights | threads | decode tok/s gpt2.h | llama.cpp | ratio | gpt2.h, % of bandwidth limit |")
print("|---|---|---|---|---|---|---|")
for m, t in keys:
    for n in threads:
        d_ours, d_llama = of("gpt2.h", m, t, n, first, "decode_tok_s"), of("llama.cpp", m, t, n, first, "decode_tok_s")
        if d_ours and d_llama:
            print(f"| {m} | {t} | {n} | {cell(d_ours)} | {cell(d_llama)} | {statistics.median(d_ours) / statistics.median(d_llama):.2f} | "
                  f"{statistics.median(of('gpt2.h', m, t, n, first, 'decode_pct_of_limit')):.0f}% |")
print("\nPrompts (prefill):\n")
print("| model | weights | threads | prompt | prefill tok/s gpt2.h | llama.cpp | ratio | gpt2.h, % of the limit (unit) |")
print("|---|---|---|---|---|---|---|---|")
for m, t in keys:
    for n in threads:
        for p in sorted({r["prompt"] for r in rows}):
            p_ours, p_llama = of("gpt2.h", m, t, n, p, "prefill_tok_s"), of("llama.cpp", m, t, n, p, "prefill_tok_s")
            if p_ours and p_llama:
                unit = of("gpt2.h", m, t, n, p, "prefill_limit_unit")[0]
                print(f"| {m} | {t} | {n} | {p} | {cell(p_ours)} | {cell(p_llama)} | {statistics.median(p_ours) / statistics.median(p_llama):.2f} | "
                      f"{statistics.median(of('gpt2.h', m, t, n, p, 'prefill_pct_of_limit')):.0f}% ({unit}) |")
if any("prefill_cpu_tok_s" in r for r in rows if r["program"] == "llama.cpp"):
    print("\nPrompts at one thread, tokens per second of CPU time (CPU_TIME=1):\n")
    print("| model | weights | prompt | gpt2.h | llama.cpp | ratio |")
    print("|---|---|---|---|---|---|")
    for m, t in keys:
        for p in sorted({r["prompt"] for r in rows}):
            c_ours, c_llama = of("gpt2.h", m, t, 1, p, "prefill_cpu_tok_s"), of("llama.cpp", m, t, 1, p, "prefill_cpu_tok_s")
            if c_ours and c_llama:
                print(f"| {m} | {t} | {p} | {cell(c_ours)} | {cell(c_llama)} | {statistics.median(c_ours) / statistics.median(c_llama):.2f} |")
PY
