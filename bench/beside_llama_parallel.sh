#!/usr/bin/env bash
# Many characters at once beside llama.cpp's llama-parallel (its examples/parallel: clients sharing
# a system prompt, continuous batching) on the same GGUF file, alternated in one sitting.
#
#   bench/beside_llama_parallel.sh build/bench/gpt2-bench path/to/llama-parallel [results.jsonl]
#   ROUNDS=5 CLIENTS=32 THREADS=2 TYPE=q8_0 bench/beside_llama_parallel.sh ...
#
# The scene, made alike on both sides: GPT-2 124M's shape with random weights and GPT-2's
# vocabulary (gpt2-bench --save), CLIENTS clients that share a system prompt of llama-parallel's
# own (its token count, read from its log, is our --scene-tokens), all asking at once, each a
# question of about 20 tokens answered with 40 tokens. llama-parallel: -np/-ns CLIENTS -pps (its continuous batching is on by default)
# -n 40, once with its default per-sequence KV cache (the system prompt copied into each
# client's cells: -c CLIENTS x 512) and once with --kv-unified (shared cells: -c the system
# prompt + CLIENTS x 64). gpt2.h: gpt2-bench --stage CLIENTS --arrival-ms 0 --answer-tokens 40
# (forks of one session that read the scene, on one gpt2_stage). Printed per program: generated
# tokens/s over the run (llama-parallel's window also holds its system prompt's one pass), the KV
# cache's bytes (llama.cpp: the size its log reports; ours: stage_kv_bytes, the blocks in use,
# shared ones once) and ours the time to first token p50/p99 (llama-parallel prints none).
# llama-parallel: from llama.cpp's source (llama-cpp-python's source package has it in
# vendor/llama.cpp): cmake -B build -DLLAMA_CURL=OFF && cmake --build build --target llama-parallel.
set -euo pipefail
gpt2_bench="$1"; llama_parallel="$2"; out="${3:-beside-llama-parallel.jsonl}"
rounds="${ROUNDS:-3}"; clients="${CLIENTS:-32}"; threads="${THREADS:-2}"; type="${TYPE:-q8_0}"
models=$(mktemp -d)
trap 'rm -rf "$models"' EXIT
model="$models/$type.gguf"
"$gpt2_bench" --random 124M --type "$type" --save "$model" >/dev/null
: > "$out"

# one JSON line from llama-parallel's log: generated tokens/s, its KV cache's bytes, the system
# prompt's tokens, each request's seconds (from its prompt to its last token)
run_llama() { # run_llama ROUND KIND (per-sequence | unified)
    local ctx extra=()
    if [ "$2" = unified ]; then ctx=$((512 + clients * 64)); extra=(--kv-unified); else ctx=$((clients * 512)); fi
    "$llama_parallel" -m "$model" -t "$threads" -np "$clients" -ns "$clients" -pps -n 40 -c "$ctx" --seed 1 -lv 4 "${extra[@]}" >"$models/llama.log" 2>&1
    python3 - "$1" "$2" "$models/llama.log" <<'PY'
import json, re, statistics, sys
log = open(sys.argv[3], errors="replace").read()
gen = re.search(r"Total gen tokens:\s+(\d+), speed:\s+([\d.]+) t/s", log)
system = re.search(r"system tokens = (\d+)", log)
mib = sum(float(m) for m in re.findall(r"llama_kv_cache:\s+\S+ KV buffer size =\s+([\d.]+) MiB", log))
times = sorted(float(t) for t in re.findall(r"response\s+\d+ t, time\s+([\d.]+) s", log))
print(json.dumps({"program": "llama.cpp", "kv": sys.argv[2], "round": int(sys.argv[1]), "gen_tokens": int(gen.group(1)), "tok_s": float(gen.group(2)),
                  "kv_bytes": mib * 1048576, "system_tokens": int(system.group(1)),
                  "request_s_p50": statistics.median(times), "request_s_max": times[-1]}))
PY
}

run_gpt2() { # run_gpt2 ROUND SCENE_TOKENS
    "$gpt2_bench" -m "$model" -t "$threads" --stage "$clients" --arrival-ms 0 --answer-tokens 40 --scene-tokens "$2" --json |
        python3 -c 'import json, sys; r = json.loads(sys.stdin.readline())
print(json.dumps({"program": "gpt2.h", "round": int(sys.argv[1]), "gen_tokens": r["stage_tokens"], "tok_s": r["stage_tok_s"], "kv_bytes": r["stage_kv_bytes"],
                  "ttft_ms_p50": r["stage_ttft_ms_p50"], "ttft_ms_p99": r["stage_ttft_ms_p99"]}))' "$1"
}

run_llama 0 per-sequence >/dev/null # its system prompt's length, and a warm file cache
scene_tokens=$(run_llama 0 unified | python3 -c 'import json, sys; print(json.loads(sys.stdin.readline())["system_tokens"])')
for round in $(seq "$rounds"); do
    if [ $((round % 2)) = 1 ]; then
        run_gpt2 "$round" "$scene_tokens" >> "$out"; run_llama "$round" per-sequence >> "$out"; run_llama "$round" unified >> "$out"
    else
        run_llama "$round" unified >> "$out"; run_llama "$round" per-sequence >> "$out"; run_gpt2 "$round" "$scene_tokens" >> "$out"
    fi
    echo "beside_llama_parallel: round $round of $rounds done" >&2
done

python3 - "$out" "$clients" "$threads" "$type" "$scene_tokens" <<'PY'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
def runs(program, kv=None):
    return [r for r in rows if r["program"] == program and (kv is None or r.get("kv") == kv)]
def med(rs, key):
    return statistics.median(r[key] for r in rs)
ours = runs("gpt2.h")
print(f"{sys.argv[2]} clients, {sys.argv[3]} threads, {sys.argv[4]}, a system prompt of {sys.argv[5]} tokens shared, 40 tokens each; medians of {len(ours)} alternated rounds")
print("| program | generated tok/s (range) | KV cache MB | ours: tok/s ratio | ours: cache ratio |")
print("|---|---|---|---|---|")
print(f"| gpt2.h stage | {med(ours, 'tok_s'):.1f} ({min(r['tok_s'] for r in ours):.0f}-{max(r['tok_s'] for r in ours):.0f}) | {med(ours, 'kv_bytes') / 1e6:.1f} | | |")
for kv in ("per-sequence", "unified"):
    theirs = runs("llama.cpp", kv)
    print(f"| llama-parallel, {kv} KV | {med(theirs, 'tok_s'):.1f} ({min(r['tok_s'] for r in theirs):.0f}-{max(r['tok_s'] for r in theirs):.0f}) | "
          f"{med(theirs, 'kv_bytes') / 1e6:.1f} | {med(ours, 'tok_s') / med(theirs, 'tok_s'):.2f} | {med(ours, 'kv_bytes') / med(theirs, 'kv_bytes'):.2f} |")
print(f"gpt2.h time to first token p50 {med(ours, 'ttft_ms_p50'):.0f} ms, p99 {med(ours, 'ttft_ms_p99'):.0f} ms; llama-parallel prints no first-token time: "
      + ", ".join(f"{kv} KV request time p50 {med(runs('llama.cpp', kv), 'request_s_p50'):.2f} s" for kv in ("per-sequence", "unified")))
PY
