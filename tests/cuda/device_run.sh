#!/usr/bin/env bash
# The CUDA checks on a machine with a GPU, in one go, each part going on past a failed one: build
# the benchmark (first, on its own), make the test models, build the CUDA tests, run the tests for
# the shipped build and the opt-in ones, the benchmarks (124M prefill and decode, 1558M decode) and
# Hugging Face's generate() on the same GPU; one table at the end. Logs go to $OUT (default
# /tmp/gpt2-device-out). Test binaries (tests/cuda/CMakeLists.txt): gpt2-cuda-tests as the library
# ships, gpt2-cuda-tests-batch with the batched pass (GPT2_CUDA_BATCH), gpt2-cuda-tests-persistent
# with the persistent one-token kernel too; the last two are built only on the GPU machine.
#
#   tests/cuda/device_run.sh --prepare   on this machine, before lending: copies doctest's header
#                                        into .thirdparty/ (git ignores it; carry it to the device)
#   tests/cuda/device_run.sh             on the GPU machine, from the repository root
#   tests/cuda/device_run.sh --dry-run   every step up to the first GPU call, with the same
#                                        commands and files; the GPU commands are printed (CI runs it)
#
# Needs nvcc (on PATH or under /usr/local/cuda*/bin), CMake, python3, doctest's header (the system's
# or .thirdparty/doctest/doctest.h); torch and transformers only for the Hugging Face step.
# Budget: BUDGET_S (default 300) seconds from the end of the builds (they took about 2 minutes on
# the device); a step that would start later is skipped and says so.
set -uo pipefail
mode=run
case "${1:-}" in
--prepare) mode=prepare ;;
--dry-run) mode=dry ;;
"") ;;
*) echo "usage: tests/cuda/device_run.sh [--prepare | --dry-run]" >&2; exit 2 ;;
esac
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
OUT="${OUT:-/tmp/gpt2-device-out}"
mkdir -p "$OUT"
rm -f "$OUT"/tests-*.log "$OUT"/hf.jsonl
step() { echo; echo "== $* ($(date +%T), ${SECONDS}s)"; }
failed=()
fail() { failed+=("$1"); echo "FAILED: $1 (log: $2)"; tail -20 "$2"; }

if [ "$mode" = prepare ]; then
    [ -f /usr/include/doctest/doctest.h ] || { echo "doctest's header is not installed here (apt-get install doctest-dev)" >&2; exit 1; }
    mkdir -p .thirdparty && cp -r /usr/include/doctest .thirdparty/
    echo "copied doctest into .thirdparty/doctest; carry .thirdparty to the device machine"
    exit 0
fi

# On the GPU machine, or printed in a dry run.
gpu() {
    if [ "$mode" = dry ]; then echo "(dry run) would run: $*"; return 0; fi
    "$@"
}

step "tools"
nvcc="$(command -v nvcc || ls -d /usr/local/cuda/bin/nvcc /usr/local/cuda-*/bin/nvcc 2>/dev/null | head -1)"
[ -x "${nvcc:-}" ] || { echo "no nvcc on PATH or under /usr/local/cuda*/bin: nothing can be built"; exit 1; }
doctest_dir=""
for d in "$root/.thirdparty" /usr/include /usr/local/include; do [ -f "$d/doctest/doctest.h" ] && { doctest_dir="$d"; break; }; done
echo "nvcc: $nvcc ($("$nvcc" --version | tail -1)); doctest: ${doctest_dir:-none (the CUDA tests will not build; run --prepare here first)}"
gpu nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv 2>&1 | tee "$OUT/gpu.txt"

build=build-device
jobs="$(nproc)"
gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
step "configure ($build, sm_90)"
cmake -S . -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DGPT2_CUDA=ON -DCMAKE_CUDA_COMPILER="$nvcc" -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DGPT2_BUILD_TESTS=OFF -DGPT2_BUILD_EXAMPLES=OFF -DGPT2_CUDA_TESTS="$([ -n "$doctest_dir" ] && echo ON || echo OFF)" \
    ${doctest_dir:+-DGPT2_DOCTEST_INCLUDE_DIR="$doctest_dir"} >"$OUT/configure.log" 2>&1 || fail configure "$OUT/configure.log"

step "build the benchmarks (graph decode; persistent decode, GPT2_CUDA_PERSISTENT_DECODE)"
cmake --build "$build" -j"$jobs" --target gpt2-bench-cuda gpt2-bench-cuda-persistent >"$OUT/build-bench.log" 2>&1 ||
    fail "build gpt2-bench-cuda" "$OUT/build-bench.log"

step "test models"
models="$build/models"
python3 tests/make_test_models.py "$models" >"$OUT/models.log" 2>&1 || fail "tests/make_test_models.py" "$OUT/models.log"
export GPT2_SC_GGUF="$root/$models/shakespeare_char.gguf" GPT2_TEST_DATA_DIR="$root/tests/data"
ls -l "$GPT2_SC_GGUF" 2>&1

step "build the CUDA tests"
if [ -n "$doctest_dir" ]; then
    targets=(gpt2-cuda-tests)
    [ "$mode" = dry ] || targets+=(gpt2-cuda-tests-batch gpt2-cuda-tests-persistent) # CI's time: the opt-in code is compiled by compile_check.sh
    cmake --build "$build" -j"$jobs" --target "${targets[@]}" >"$OUT/build-tests.log" 2>&1 ||
        fail "build gpt2-cuda-tests" "$OUT/build-tests.log"
else
    failed+=("the CUDA tests: no doctest header")
fi

budget="${BUDGET_S:-300}" budget_start=$SECONDS # the builds are not the measurements' budget
left() {
    if [ "$mode" != dry ] && (( SECONDS - budget_start > budget )); then
        echo "(skipped: $((SECONDS - budget_start))s past the ${budget}s budget after the builds)"
        return 1
    fi
}
: >"$OUT/bench.jsonl"
# The binaries of a build: graph (as shipped), batch (GPT2_CUDA_BATCH) or persistent (GPT2_CUDA_PERSISTENT_DECODE).
suffix() { [ "$1" = graph ] || echo "-$1"; }
bench_run() { # decode-mode shape extra-args...
    local decode=$1 shape=$2; shift 2
    local bench="$build/gpt2-bench-cuda$(suffix "$decode")"
    [ -x "$bench" ] || { echo "no benchmark binary $bench"; return 1; }
    [ "$mode" = dry ] && { gpu timeout 70 "$bench" --random "$shape" "$@" --json; return 0; }
    timeout 70 "$bench" --random "$shape" "$@" --json 2>&1 |
        sed "s/\"model\": \"random-$shape\"/\"model\": \"random-$shape-$decode\"/" | tee -a "$OUT/bench.jsonl"
}
run_tests() { # build
    local tests="$build/tests/cuda/gpt2-cuda-tests$(suffix "$1")"
    [ "$mode" = dry ] && { gpu timeout 150 "$tests"; return 0; }
    [ -x "$tests" ] || { echo "no test binary $tests"; return 1; }
    timeout 150 "$tests" 2>&1 | tee "$OUT/tests-$1.log" | grep -E "ERROR|FAILED|test cases|assertions|CHECK|REQUIRE|CUDA|difference" | tail -40
}

# Most telling first: the shipped build (tests, then 124M and 1558M), then the opt-in batched pass
# and persistent kernel, Hugging Face's generate (the baseline), a memory check of the shipped
# build, and the persistent kernel's 1558M last.
step "CUDA tests, as shipped (graph decode, sessions of a batch one by one)"
left && run_tests graph
step "benchmark 124M, graph decode"
left && bench_run graph 124M --prompt 1024 --decode 256
step "benchmark 1558M, graph decode"
left && bench_run graph 1558M --prompt 1024 --decode 128 --repeat 1
step "CUDA tests, batched pass (GPT2_CUDA_BATCH, opt-in)"
left && run_tests batch
step "CUDA tests, persistent decode (GPT2_CUDA_PERSISTENT_DECODE, opt-in)"
left && run_tests persistent
step "benchmark 124M, persistent decode"
left && bench_run persistent 124M --prompt 1024 --decode 256
step "Hugging Face transformers generate, 124M fp16"
left && gpu sh -c "PYTHONUNBUFFERED=1 timeout 80 python3 tests/cuda/hf_generate.py --shape 124M --new 128 --json 2>'$OUT/hf.err' | tee '$OUT/hf.jsonl'"
step "compute-sanitizer memcheck: the shipped build's cases of logits, states and abort"
sanitizer="$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)"
left && if [ -n "$sanitizer" ] || [ "$mode" = dry ]; then
    gpu sh -c "timeout 150 '${sanitizer:-compute-sanitizer}' --tool memcheck --error-exitcode 9 '$build/tests/cuda/gpt2-cuda-tests' \
        -tc='shakespeare_char: logits*,states move*,abort*' >'$OUT/memcheck.log' 2>&1; echo \"memcheck exit \$?\" | tee -a '$OUT/memcheck.log'; tail -5 '$OUT/memcheck.log'"
else echo "no compute-sanitizer"; fi
step "benchmark 1558M, persistent decode"
left && bench_run persistent 1558M --prompt 1024 --decode 128 --repeat 1

step summary
python3 - "$OUT" <<'PY' | tee "$OUT/summary.txt"
import json, os, sys
out = sys.argv[1]
def lines(name):
    path = os.path.join(out, name)
    return [json.loads(l) for l in open(path) if l.startswith("{")] if os.path.exists(path) else []
rows, hf = lines("bench.jsonl"), lines("hf.jsonl")
print(f"{'model':24} {'prefill ms':>10} {'prefill tok/s':>13} {'decode ms/tok':>13} {'decode tok/s':>12} {'GB/s':>7} {'% copy bw':>9} {'% gemm':>7} {'graph ms':>8} {'sample ms':>9}")
for r in rows:
    print(f"{r['model']:24} {r['prefill_ms']:10.3f} {r['prefill_tok_s']:13.0f} {r['decode_ms_per_token']:13.4f} {r['decode_tok_s']:12.0f} {r['bandwidth_gb_s']:7.0f} {r['decode_pct_of_limit']:9.1f} {r['prefill_pct_of_limit']:7.1f} {r.get('graph_replay_ms', 0):8.4f} {r.get('sample_kernel_ms', 0):9.4f}")
if rows:
    print(f"GPU {rows[0]['gpu']}: copy bandwidth {rows[0]['copy_bandwidth_gb_s']:.0f} GB/s (read+write), f16 GEMM {rows[0]['gemm_f16_tflop_s']:.0f} TFLOP/s")
for h in hf:
    for decode in ("graph", "persistent"):
        ours = next((r for r in rows if r['model'] == 'random-' + h['shape'] + '-' + decode), None)
        ratio = h['decode_ms_per_token'] / ours['decode_ms_per_token'] if ours else float('nan')
        print(f"transformers {h['version']} {h['shape']} fp16 generate: {h['decode_ms_per_token']:.3f} ms/token; gpt2.h CUDA ({decode} decode) is {ratio:.1f}x faster")
for build in ("graph", "batch", "persistent"):
    log = os.path.join(out, f"tests-{build}.log")
    if os.path.exists(log):
        summary = [l.strip() for l in open(log, errors="replace") if l.startswith("[doctest] test cases") or l.startswith("[doctest] Status")]
        print(f"tests ({build}): {' | '.join(summary) or 'no summary (crashed or timed out?)'}")
memcheck = os.path.join(out, "memcheck.log")
if os.path.exists(memcheck):
    print("compute-sanitizer memcheck: " + ([l.strip() for l in open(memcheck, errors="replace") if l.startswith("memcheck exit") or "ERROR SUMMARY" in l] or ["no summary"])[-1])
if not rows and not hf:
    print("no measurements (a dry run, or every step failed)")
PY
if [ ${#failed[@]} -gt 0 ]; then
    printf 'failed: %s\n' "${failed[@]}"
    exit 1
fi
echo "device_run: all steps ran (${SECONDS}s)"
