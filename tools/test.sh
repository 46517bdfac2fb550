#!/usr/bin/env bash
# Runs gpt2.h's tests.
#
#   bash tools/test.sh          the library, the tools, the examples, the shared library and the C#
#                               binding, built and tested on this host (CTest: the doctest cases,
#                               the Python tests of the tools and examples, C and C# over the
#                               shared library). The command a contributor runs.
#   bash tools/test.sh --full   also the WebAssembly build under Node and Chromium, the Windows
#                               (Wine) and aarch64 (qemu) cross builds, the CUDA dry run (with the
#                               header compiled for every GPU architecture we target), the
#                               doctest suite built with -march=native, then ASan+UBSan, TSan,
#                               valgrind and short fuzzing (docs/RELIABILITY.md). What CI runs.
#
# Each stage prints its name when it starts and its time when it ends; the last line says which
# stages passed. GPT2_FUZZ_SECONDS (default 30) sets how long each fuzzer runs.
#
# GPT2_TEST_BUDGET_S (default: none) bounds a --full run's time: before each stage after the
# host's, one that would not end within the budget (by its time on the slowest host measured, a
# 2-vCPU AMD EPYC Zen 1: 91 min for everything) is skipped and named as skipped, so a slow CI
# machine runs what fits instead of running out of time. The stages run most telling first.
set -euo pipefail
cd "$(dirname "$0")/.."
full=0
case "${1:-}" in
    --full) full=1 ;;
    "") ;;
    *) echo "usage: bash tools/test.sh [--full]" >&2; exit 2 ;;
esac

passed=()
skipped=()
started=$SECONDS
budget="${GPT2_TEST_BUDGET_S:-}"
stage() { # stage NAME COMMAND...: runs COMMAND, timed; a failure ends the script naming the stage
    local name="$1" begin=$SECONDS
    shift
    echo "==== test.sh: $name ..."
    if ! "$@"; then
        echo "==== test.sh: $name FAILED after $((SECONDS - begin)) s (passed before it: ${passed[*]:-none})"
        exit 1
    fi
    echo "==== test.sh: $name passed in $((SECONDS - begin)) s"
    passed+=("$name ($((SECONDS - begin)) s)")
}

optional_stage() { # optional_stage SECONDS NAME COMMAND...: a stage that SECONDS (its time on the slowest host) must fit in the budget
    local cost="$1" name="$2"
    if [ -n "$budget" ] && [ $((SECONDS - started + cost)) -gt "$budget" ]; then
        echo "==== test.sh: $name SKIPPED: $((budget - (SECONDS - started))) s left of GPT2_TEST_BUDGET_S=$budget, and it takes up to $cost s"
        skipped+=("$name")
        return 0
    fi
    shift
    stage "$@"
}

host_tests() {
    # The shared library and its tests (tests/shared/: C programs and the C# binding) ride along.
    cmake -S . -B build-test -DCMAKE_BUILD_TYPE=Release -DGPT2_BUILD_SHARED=ON >/dev/null
    cmake --build build-test -j"$(nproc)"
    ctest --test-dir build-test --output-on-failure -j"$(nproc)" -LE '^cuda$'
}

cuda_dry_run() {
    # The device run's every step up to the first GPU call (tests/cuda/device_run.sh --dry-run builds
    # the benchmark and the CUDA tests for sm_90 and makes their models), then the CUDA tests, which
    # skip their GPU cases without a GPU. First the CTest cases labelled cuda (the header compiles
    # for every GPU architecture we target), which the host stage leaves to this one.
    ctest --test-dir build-test --output-on-failure -L '^cuda$'
    OUT=build-device/out bash tests/cuda/device_run.sh --dry-run
    GPT2_SC_GGUF="$PWD/build-device/models/shakespeare_char.gguf" ./build-device/tests/cuda/gpt2-cuda-tests
}

native_suite() {
    # The doctest suite built as an embedder may build the header, with -march=native: AVX-512 and
    # FMA contraction in all the code, and GCC's tuning for this CPU in the kernels
    # (docs/PERFORMANCE.md, What runs).
    cmake -S . -B build-native -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS=-march=native -DCMAKE_C_FLAGS=-march=native >/dev/null
    cmake --build build-native -j"$(nproc)" --target gpt2-tests
    mkdir -p build-native/tests/generated
    python3 tests/make_test_models.py build-native/tests/generated >/dev/null
    build-native/tests/gpt2-tests
}

fuzzing() {
    bash tests/fuzz/run_fuzz.sh "${GPT2_FUZZ_SECONDS:-30}"
    # A fixed seed and count: CI tries the same mutated checkpoints every run (random seeds are for
    # longer runs by hand, docs/RELIABILITY.md).
    python3 tests/fuzz/fuzz_convert.py --seed "${GPT2_FUZZ_SEED:-1}" --iterations 300 --seconds 300
}

# mono-mcs (with the Mono runtime it depends on) compiles and runs the C# binding's tests.
if [ "$full" = 1 ]; then
    stage "install packages" bash tools/install_deps.sh mono-mcs clang libclang-rt-dev valgrind emscripten chromium \
        g++-mingw-w64-x86-64-posix wine64 g++-aarch64-linux-gnu qemu-user
else
    stage "install packages" bash tools/install_deps.sh mono-mcs
fi
stage "build and CTest" host_tests
if [ "$full" = 1 ]; then
    # The C++ code under ASan+UBSan, TSan and valgrind, then the fuzzers.
    optional_stage 1500 "sanitizers (tools/sanitize.sh)" bash tools/sanitize.sh asan tsan valgrind
    optional_stage 480 "fuzzing" fuzzing
    # The Emscripten build of the library (SIMD128 kernels) and of the doctest suite, the suite
    # under Node, and the web page in headless Chromium, each generating the native program's
    # tokens for the same seed.
    optional_stage 470 "WebAssembly (tools/web_test.sh)" env GPT2_NATIVE_CLI=build-test/examples/gpt2 bash tools/web_test.sh
    if command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then
        optional_stage 420 "CUDA dry run" cuda_dry_run
    fi
    optional_stage 300 "doctest suite with -march=native" native_suite
    # MinGW-w64 builds run under Wine and aarch64 builds under qemu-user must pass the doctest suite
    # (qemu: its instruction-set-dependent part) and print the native build's token ids with every
    # kernel set, NEON included.
    optional_stage 1900 "Windows and aarch64 (tools/cross_test.sh)" env GPT2_NATIVE_BUILD=build-test bash tools/cross_test.sh
fi
summary="every stage passed"
[ ${#skipped[@]} -gt 0 ] && summary="the stages run passed; SKIPPED for time: ${skipped[*]}"
echo "==== test.sh$([ "$full" = 1 ] && echo " --full"): $summary, in $(((SECONDS - started) / 60)) min $(((SECONDS - started) % 60)) s: ${passed[*]}"
