#!/usr/bin/env bash
# The CUDA checks on a machine with a GPU, in one go: build (or use prebuilt binaries in
# .prebuilt/ when they run), the CUDA tests, the benchmarks (124M prefill and decode, 1558M
# decode) and Hugging Face's generate() on the same GPU; a table at the end. Logs go to $OUT.
#   tests/cuda/device_run.sh          (from the repository root)
# Needs: nvcc, CMake, doctest's header (system or .thirdparty/doctest/doctest.h), python3 with
# torch and transformers for the comparison; GPT2_SC_GGUF or .thirdparty/sc.gguf for the
# shakespeare_char tests.
set -uo pipefail
OUT="${OUT:-/tmp/gpt2-device-out}"
mkdir -p "$OUT"
root="$(pwd)"
step() { echo; echo "== $* ($(date +%T))"; }

step GPU
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv 2>&1 | tee "$OUT/gpu.txt"

step build
tests=.prebuilt/gpt2-cuda-tests
bench=.prebuilt/gpt2-bench-cuda
if ! "$tests" --list-test-cases >/dev/null 2>&1 || ! "$bench" --help >/dev/null 2>&1; then
    echo "prebuilt binaries do not run here: building for sm_90"
    gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
    if ! { cmake -S . -B build-device "${gen[@]}" -DGPT2_CUDA=ON -DGPT2_CUDA_TESTS=ON -DGPT2_BUILD_TESTS=OFF -DGPT2_BUILD_EXAMPLES=OFF \
             -DCMAKE_CUDA_ARCHITECTURES=90 -DGPT2_DOCTEST_INCLUDE_DIR="$root/.thirdparty" &&
           cmake --build build-device -j16 --target gpt2-cuda-tests gpt2-bench-cuda; } >"$OUT/build.log" 2>&1; then
        tail -40 "$OUT/build.log"
        exit 1
    fi
    tests=build-device/tests/cuda/gpt2-cuda-tests
    bench=build-device/gpt2-bench-cuda
else
    echo "using prebuilt binaries"
fi

# Both decode paths: the graph of one-token kernels (default) and the persistent kernel.
# Most telling first; a step is skipped once the script has run BUDGET_S seconds (default 300).
budget="${BUDGET_S:-300}"
left() { if (( SECONDS > budget )); then echo "(skipped: ${SECONDS}s past the ${budget}s budget)"; return 1; fi; }
export GPT2_SC_GGUF="${GPT2_SC_GGUF:-$root/.thirdparty/sc.gguf}" GPT2_TEST_DATA_DIR="$root/tests/data"
: >"$OUT/bench.jsonl"
bench_run() { # mode shape extra-args...
    local mode=$1 shape=$2; shift 2
    GPT2_CUDA_DECODE=$mode timeout 70 "$bench" --random "$shape" "$@" --json 2>&1 | sed "s/\"model\": \"random-$shape\"/\"model\": \"random-$shape-$mode\"/" | tee -a "$OUT/bench.jsonl"
}

step "CUDA tests, persistent decode"
left && GPT2_CUDA_DECODE=persistent timeout 100 "$tests" 2>&1 | tee "$OUT/tests-persistent.log" | grep -E "MESSAGE|ERROR|FAILED|test cases|assertions|CHECK|REQUIRE|CUDA" | tail -30
step "benchmark 124M, persistent decode"
left && bench_run persistent 124M --prompt 1024 --decode 256
step "benchmark 124M, graph decode"
left && bench_run graph 124M --prompt 1024 --decode 256
step "Hugging Face transformers generate, 124M fp16"
left && { PYTHONUNBUFFERED=1 timeout 80 python3 tests/cuda/hf_generate.py --shape 124M --new 128 --json 2>"$OUT/hf.err" | tee "$OUT/hf.jsonl"; tail -5 "$OUT/hf.err"; }
step "benchmark 1558M, persistent decode (graph: 3.40 ms/token in run 2)"
left && bench_run persistent 1558M --prompt 1024 --decode 128 --repeat 2
step "CUDA tests, graph decode"
left && GPT2_CUDA_DECODE=graph timeout 100 "$tests" 2>&1 | tee "$OUT/tests-graph.log" | grep -E "MESSAGE|ERROR|FAILED|test cases|assertions|CHECK|REQUIRE" | tail -25
step "benchmark 1558M, graph decode"
left && bench_run graph 1558M --prompt 1024 --decode 128 --repeat 2

step summary
python3 - "$OUT" <<'PY' | tee "$OUT/summary.txt"
import json, os, sys
out = sys.argv[1]
rows = [json.loads(l) for l in open(os.path.join(out, "bench.jsonl")) if l.startswith("{")]
hf = [json.loads(l) for l in open(os.path.join(out, "hf.jsonl")) if l.startswith("{")] if os.path.exists(os.path.join(out, "hf.jsonl")) else []
print(f"{'model':24} {'prefill ms':>10} {'prefill tok/s':>13} {'decode ms/tok':>13} {'decode tok/s':>12} {'GB/s':>7} {'% copy bw':>9} {'% gemm':>7} {'graph ms':>8} {'sample ms':>9}")
for r in rows:
    print(f"{r['model']:24} {r['prefill_ms']:10.3f} {r['prefill_tok_s']:13.0f} {r['decode_ms_per_token']:13.4f} {r['decode_tok_s']:12.0f} {r['bandwidth_gb_s']:7.0f} {r['decode_pct_of_limit']:9.1f} {r['prefill_pct_of_limit']:7.1f} {r.get('graph_replay_ms', 0):8.4f} {r.get('sample_kernel_ms', 0):9.4f}")
if rows:
    print(f"GPU {rows[0]['gpu']}: copy bandwidth {rows[0]['copy_bandwidth_gb_s']:.0f} GB/s (read+write), f16 GEMM {rows[0]['gemm_f16_tflop_s']:.0f} TFLOP/s")
for h in hf:
    for mode in ("graph", "persistent"):
        ours = next((r for r in rows if r['model'] == 'random-' + h['shape'] + '-' + mode), None)
        ratio = h['decode_ms_per_token'] / ours['decode_ms_per_token'] if ours else float('nan')
        print(f"transformers {h['version']} {h['shape']} fp16 generate: {h['decode_ms_per_token']:.3f} ms/token; gpt2.h CUDA ({mode} decode) is {ratio:.1f}x faster")
for mode in ("graph", "persistent"):
    log = os.path.join(out, f"tests-{mode}.log")
    if os.path.exists(log):
        summary = [l.strip() for l in open(log, errors="replace") if l.startswith("[doctest] test cases") or l.startswith("[doctest] Status")]
        print(f"tests ({mode} decode): {' | '.join(summary) or 'no summary (crashed or timed out?)'}")
PY
