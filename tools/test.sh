#!/usr/bin/env bash
# Builds everything and runs all tests (CTest: doctest cases, converter tests, tool checks),
# the Windows (Wine) and aarch64 (qemu) cross builds' tests (tools/cross_test.sh), the doctest
# suite built with -march=native, then the reliability checks (docs/RELIABILITY.md): the tests
# under ASan+UBSan, TSan and valgrind (tools/sanitize.sh), and short fuzzing runs of the loader,
# the tokenizer and the converter. GPT2_TEST_FAST=1 skips the cross builds and the reliability checks; GPT2_FUZZ_SECONDS (default 30)
# sets how long each fuzzer runs.
set -euo pipefail
cd "$(dirname "$0")/.."
fast="${GPT2_TEST_FAST:-0}"
# mono-mcs (with the Mono runtime it depends on) compiles and runs the C# binding's tests.
if [ "$fast" = 1 ]; then bash tools/install_deps.sh mono-mcs; else bash tools/install_deps.sh mono-mcs clang libclang-rt-dev valgrind; fi
# The shared library and its tests (tests/shared/: C programs and the C# binding) ride along.
cmake -S . -B build-test -DCMAKE_BUILD_TYPE=Release -DGPT2_BUILD_SHARED=ON >/dev/null
cmake --build build-test -j"$(nproc)"
ctest --test-dir build-test --output-on-failure -j"$(nproc)"

# ---- WebAssembly (examples/web/): the Emscripten build of the library (SIMD128 kernels) and of the
# doctest suite, the suite under Node, and the web page in headless Chromium, each generating the
# native program's tokens for the same seed (tools/web_test.sh; about 4 min on 2 cores) ----
bash tools/install_deps.sh emscripten chromium
GPT2_NATIVE_CLI=build-test/examples/gpt2 bash tools/web_test.sh

# ---- Windows and ARM (tools/cross_test.sh): MinGW-w64 builds run under Wine and aarch64 builds
# under qemu-user must pass the doctest suite (qemu: its instruction-set-dependent part) and print
# the native build's token ids with every kernel set, NEON included. 17 min on 2 cores in CI's run
# of 2026-12-03, 12 of them building (README, Platforms, has each part's time). ----
if [ "$fast" != 1 ]; then
    bash tools/install_deps.sh g++-mingw-w64-x86-64-posix wine64 g++-aarch64-linux-gnu qemu-user
    GPT2_NATIVE_BUILD=build-test bash tools/cross_test.sh
fi

# ---- the CUDA path, wherever nvcc is: the device run's every step up to the first GPU call
# (tests/cuda/device_run.sh --dry-run builds the benchmark and the CUDA tests for sm_90 and makes
# their models), then the CUDA tests, which skip their GPU cases without a GPU; the header for
# every target GPU is compiled by the CTest case cuda_header_compiles ----
if command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then
    OUT=build-device/out bash tests/cuda/device_run.sh --dry-run
    GPT2_SC_GGUF="$PWD/build-device/models/shakespeare_char.gguf" ./build-device/tests/cuda/gpt2-cuda-tests
fi

# ---- the doctest suite built as an embedder may build the header, with -march=native: AVX-512 and
# FMA contraction in all the code, and GCC's tuning for this CPU in the kernels (docs/PERFORMANCE.md,
# What runs); about 75 s on 2 cores ----
if [ "$fast" != 1 ]; then
    cmake -S . -B build-native -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS=-march=native -DCMAKE_C_FLAGS=-march=native >/dev/null
    cmake --build build-native -j"$(nproc)" --target gpt2-tests
    mkdir -p build-native/tests/generated
    python3 tests/make_test_models.py build-native/tests/generated >/dev/null
    build-native/tests/gpt2-tests
fi

# ---- reliability: sanitizers and fuzzing ----
if [ "$fast" != 1 ]; then
    bash tools/sanitize.sh asan tsan valgrind
    bash tests/fuzz/run_fuzz.sh "${GPT2_FUZZ_SECONDS:-30}"
    # A fixed seed and count: CI tries the same mutated checkpoints every run (random seeds are for
    # longer runs by hand, docs/RELIABILITY.md).
    python3 tests/fuzz/fuzz_convert.py --seed "${GPT2_FUZZ_SEED:-1}" --iterations 300 --seconds 300
fi
