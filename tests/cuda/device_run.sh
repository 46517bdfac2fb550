#!/usr/bin/env bash
# The CUDA checks on a machine with a GPU, in one go, each part going on past a failed one: make
# the test models, build the benchmarks and the CUDA tests (all at once), run the tests of the
# shipped build and of the opt-in paths not yet run on a GPU, compute-sanitizer on the new
# kernels, then the benchmarks, each opt-in path side by side with the shipped build in the same
# run (124M f16 and q8_0, sessions decoding together at B = 8, 32, 64, 1558M), and Hugging Face's
# generate() if time is left; one table at the end. Output goes to $OUT (default
# /tmp/gpt2-device-out): gpu.txt, bench.jsonl (one JSON object a measurement, with a "label"),
# summary.txt, hf.jsonl and logs.tgz (every log), at most 8 files, as the device tool returns.
# Test binaries (tests/cuda/CMakeLists.txt): gpt2-cuda-tests as the library ships,
# gpt2-cuda-tests-next with every opt-in path not yet run on a GPU (GPT2_CUDA_NEXT_OPTIONS in
# CMakeLists.txt: the many-block sampler, q8_0 in 8 bits, the batched pass); the benchmark
# gpt2-bench-cuda-next likewise, whose --paths switches them off again in the same program.
#
#   tests/cuda/device_run.sh --prepare   on this machine, before lending: copies doctest's header
#                                        into .thirdparty/ (git ignores it; carry it to the device)
#   tests/cuda/device_run.sh             on the GPU machine, from the repository root
#   tests/cuda/device_run.sh --dry-run   every step up to the first GPU call, with the same
#                                        commands and files; the GPU commands are printed (CI runs
#                                        it; it builds only the shipped targets, for CI's time:
#                                        compile_check.sh compiles the opt-in code)
#
# Needs nvcc (on PATH or under /usr/local/cuda*/bin), CMake, python3, doctest's header (the system's
# or .thirdparty/doctest/doctest.h); torch and transformers only for the Hugging Face step.
# Time: the device allows 10 minutes a command. A step that could end (by its timeout) past
# LIMIT_S (default 570) seconds from the start is skipped and says so; builds took ~2 minutes there.
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
rm -f "$OUT"/*.log "$OUT"/hf.jsonl "$OUT"/logs.tgz
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
limit="${LIMIT_S:-570}"
left() { # seconds the step may take (its timeout): skipped when it could end past the limit
    if [ "$mode" != dry ] && (( SECONDS + $1 > limit )); then
        echo "(skipped: ${SECONDS}s + up to $1s would pass the ${limit}s limit)"
        return 1
    fi
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
gen=(); keep_going=()
command -v ninja >/dev/null && { gen=(-G Ninja); keep_going=(-- -k 0); }
step "configure ($build, sm_90)"
cmake -S . -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DGPT2_CUDA=ON -DCMAKE_CUDA_COMPILER="$nvcc" -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DGPT2_BUILD_TESTS=OFF -DGPT2_BUILD_EXAMPLES=OFF -DGPT2_CUDA_TESTS="$([ -n "$doctest_dir" ] && echo ON || echo OFF)" \
    ${doctest_dir:+-DGPT2_DOCTEST_INCLUDE_DIR="$doctest_dir"} >"$OUT/configure.log" 2>&1 || fail configure "$OUT/configure.log"

step "test models"
models="$build/models"
python3 tests/make_test_models.py "$models" >"$OUT/models.log" 2>&1 || fail "tests/make_test_models.py" "$OUT/models.log"
export GPT2_SC_GGUF="$root/$models/shakespeare_char.gguf" GPT2_TEST_DATA_DIR="$root/tests/data"
ls -l "$GPT2_SC_GGUF" 2>&1

step "build the benchmarks and the CUDA tests, shipped and with the opt-in paths (one parallel build)"
targets=(gpt2-bench-cuda)
[ "$mode" = dry ] || targets+=(gpt2-bench-cuda-next)
if [ -n "$doctest_dir" ]; then
    targets+=(gpt2-cuda-tests)
    [ "$mode" = dry ] || targets+=(gpt2-cuda-tests-next)
else
    failed+=("the CUDA tests: no doctest header")
fi
cmake --build "$build" -j"$jobs" --target "${targets[@]}" "${keep_going[@]}" >"$OUT/build.log" 2>&1 || fail "build ${targets[*]}" "$OUT/build.log"

: >"$OUT/bench.jsonl"
bench_run() { # label binary(shipped|next) args...: one JSON line into bench.jsonl, labelled
    local label=$1 which=$2; shift 2
    local bench="$build/gpt2-bench-cuda$([ "$which" = next ] && echo -next)"
    [ "$mode" = dry ] && { gpu timeout 90 "$bench" "$@" --json; return 0; }
    [ -x "$bench" ] || { echo "no benchmark binary $bench"; return 1; }
    timeout 90 "$bench" "$@" --json 2>"$OUT/bench-$label.log" | sed "s/^{/{\"label\": \"$label\", /" | tee -a "$OUT/bench.jsonl"
}
run_tests() { # build(shipped|next) [doctest args]
    local which=$1; shift
    local tests="$build/tests/cuda/gpt2-cuda-tests$([ "$which" = next ] && echo -next)"
    [ "$mode" = dry ] && { gpu timeout 170 "$tests" "$@"; return 0; }
    [ -x "$tests" ] || { echo "no test binary $tests"; return 1; }
    timeout 170 "$tests" "$@" 2>&1 | tee "$OUT/tests-$which.log" | grep -E "ERROR|FAILED|test cases|assertions|CHECK|REQUIRE|MESSAGE|difference|draws|rows|built without" | tail -60
}
sanitizer="$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)"
sanitize() { # tool test-cases: the opt-in build's cases under compute-sanitizer, their quick variants
    local tool=$1 cases=$2
    if [ -z "$sanitizer" ] && [ "$mode" != dry ]; then echo "no compute-sanitizer"; return 1; fi
    gpu sh -c "GPT2_CUDA_TEST_QUICK=1 timeout 120 '${sanitizer:-compute-sanitizer}' --tool $tool --error-exitcode 9 '$build/tests/cuda/gpt2-cuda-tests-next' \
        -tc='$cases' >'$OUT/$tool.log' 2>&1; echo \"$tool exit \$?\" | tee -a '$OUT/$tool.log'; grep -E 'ERROR SUMMARY|test cases' '$OUT/$tool.log'"
}

# Most telling first: the shipped build's tests (its default path changed only in refactors),
# the opt-in paths' tests, the sanitizers on the new kernels, then the measurements, each new path
# beside the shipped build in the same run; 1558M and Hugging Face last.
step "CUDA tests, as shipped"
left 170 && run_tests shipped
step "CUDA tests, every opt-in path (gpt2-cuda-tests-next)"
left 170 && run_tests next
step "compute-sanitizer memcheck, then racecheck: the many-block sampler, the q8_0 product, the fused attention"
left 120 && sanitize memcheck 'the many-block sampler*,the q8_0 one-token product*,attention fused*,GPT2_CUDA_Q8*,GPT2_CUDA_FAST_SAMPLER*'
left 120 && sanitize racecheck 'the many-block sampler*,the q8_0 one-token product*,attention fused*'
step "benchmark 124M f16: shipped, the many-block sampler alone, attention fused with c_proj alone, both"
left 90 && bench_run 124M-f16-shipped shipped --random 124M --prompt 1024 --decode 256
left 90 && bench_run 124M-f16-sampler next --random 124M --prompt 1024 --decode 256 --paths sampler
left 90 && bench_run 124M-f16-attn-proj next --random 124M --prompt 1024 --decode 256 --paths attn-proj
left 90 && bench_run 124M-f16-sampler-attn-proj next --random 124M --prompt 1024 --decode 256 --paths sampler,attn-proj
step "benchmark 124M q8_0: shipped (16-bit on the GPU), 8-bit weights alone, both new paths"
left 90 && bench_run 124M-q8_0-shipped shipped --random 124M --type q8_0 --prompt 1024 --decode 256
left 90 && bench_run 124M-q8_0-q8 next --random 124M --type q8_0 --prompt 1024 --decode 256 --paths q8
left 90 && bench_run 124M-q8_0-sampler-q8 next --random 124M --type q8_0 --prompt 1024 --decode 256 --paths sampler,q8
step "benchmark B = 8, 32, 64 sessions: one by one (shipped), one pass (GPT2_CUDA_BATCH)"
left 90 && bench_run batch-shipped shipped --random 124M --batch 8,32,64 --decode 64 --repeat 2
left 90 && bench_run batch-next next --random 124M --batch 8,32,64 --decode 64 --repeat 2 --paths default
step "benchmark 1558M: shipped f16, then q8_0 shipped and with both new paths"
left 90 && bench_run 1558M-f16-shipped shipped --random 1558M --prompt 1024 --decode 128 --repeat 1
left 90 && bench_run 1558M-q8_0-shipped shipped --random 1558M --type q8_0 --prompt 256 --decode 128 --repeat 1
left 90 && bench_run 1558M-q8_0-sampler-q8 next --random 1558M --type q8_0 --prompt 256 --decode 128 --repeat 1 --paths sampler,q8
step "Hugging Face transformers generate, 124M fp16"
left 80 && gpu sh -c "PYTHONUNBUFFERED=1 timeout 80 python3 tests/cuda/hf_generate.py --shape 124M --new 128 --json 2>'$OUT/hf.err' | tee '$OUT/hf.jsonl'"

step summary
python3 - "$OUT" <<'PY' | tee "$OUT/summary.txt"
import json, os, sys
out = sys.argv[1]
def lines(name):
    path = os.path.join(out, name)
    return [json.loads(l) for l in open(path) if l.startswith("{")] if os.path.exists(path) else []
rows, hf = lines("bench.jsonl"), lines("hf.jsonl")
single = [r for r in rows if "batch" not in r]
batch = [r for r in rows if "batch" in r]
print(f"{'label':24} {'paths':12} {'prefill ms':>10} {'decode ms/tok':>13} {'decode tok/s':>12} {'% copy bw':>9} {'graph ms':>8} {'kernels':>7} {'sample ms':>9}")
for r in single:
    print(f"{r['label']:24} {r.get('paths', ''):12} {r['prefill_ms']:10.3f} {r['decode_ms_per_token']:13.4f} {r['decode_tok_s']:12.0f} {r['decode_pct_of_limit']:9.1f} "
          f"{r.get('graph_replay_ms', 0):8.4f} {r.get('graph_kernels', 0):7d} {r.get('sample_kernel_ms', 0):9.4f}")
if single:
    print(f"GPU {single[0]['gpu']}: copy bandwidth {single[0]['copy_bandwidth_gb_s']:.0f} GB/s (read+write), f16 GEMM {single[0]['gemm_f16_tflop_s']:.0f} TFLOP/s")
by = {r['label']: r for r in single}
for new, old, what in [("124M-f16-sampler", "124M-f16-shipped", "many-block sampler, 124M f16"), ("124M-f16-attn-proj", "124M-f16-shipped", "attention + c_proj fused, 124M f16"),
                       ("124M-f16-sampler-attn-proj", "124M-f16-shipped", "sampler + fused attention, 124M f16"), ("124M-q8_0-q8", "124M-q8_0-shipped", "q8_0 in 8 bits, 124M"),
                       ("124M-q8_0-sampler-q8", "124M-q8_0-shipped", "sampler + q8_0, 124M"), ("1558M-q8_0-sampler-q8", "1558M-q8_0-shipped", "sampler + q8_0, 1558M")]:
    if new in by and old in by:
        a, b = by[new], by[old]
        print(f"{what}: decode {b['decode_ms_per_token']:.4f} -> {a['decode_ms_per_token']:.4f} ms/token ({b['decode_ms_per_token'] / a['decode_ms_per_token']:.2f}x), "
              f"sampler {b.get('sample_kernel_ms', 0) * 1e3:.1f} -> {a.get('sample_kernel_ms', 0) * 1e3:.1f} us, graph {b.get('graph_replay_ms', 0):.4f} -> {a.get('graph_replay_ms', 0):.4f} ms")
for r in batch:
    print(f"{r['label']:16} B {r['batch']:3d} {'one pass' if r['batched_pass'] else 'one by one':10}: gpt2_batch_eval {r['batch_ms_per_step']:8.3f} ms a step, "
          f"{r['batch_tok_s']:9.0f} tok/s; gpt2_generate_batch {r['generate_batch_ms_per_step']:8.3f} ms a step, {r['generate_batch_tok_s']:9.0f} tok/s")
for h in hf:
    ours = by.get("124M-f16-shipped")
    ratio = h['decode_ms_per_token'] / ours['decode_ms_per_token'] if ours else float('nan')
    print(f"transformers {h['version']} {h['shape']} fp16 generate: {h['decode_ms_per_token']:.3f} ms/token; gpt2.h CUDA (shipped) is {ratio:.1f}x faster")
for build in ("shipped", "next"):
    log = os.path.join(out, f"tests-{build}.log")
    if os.path.exists(log):
        summary = [l.strip() for l in open(log, errors="replace") if l.startswith("[doctest] test cases") or l.startswith("[doctest] Status")]
        print(f"tests ({build}): {' | '.join(summary) or 'no summary (crashed or timed out?)'}")
for tool in ("memcheck", "racecheck"):
    log = os.path.join(out, f"{tool}.log")
    if os.path.exists(log):
        print(f"compute-sanitizer {tool}: " + " | ".join([l.strip() for l in open(log, errors="replace") if l.startswith(tool + " exit") or "ERROR SUMMARY" in l] or ["no summary"]))
if not rows and not hf:
    print("no measurements (a dry run, or every step failed)")
PY
# at most 8 files come back from the device: the logs in one archive
( cd "$OUT" && logs="$(ls *.log hf.err 2>/dev/null)"; [ -n "$logs" ] && tar czf logs.tgz $logs && rm -f $logs )
if [ ${#failed[@]} -gt 0 ]; then
    printf 'failed: %s\n' "${failed[@]}"
    exit 1
fi
echo "device_run: all steps ran (${SECONDS}s)"
