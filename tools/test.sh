#!/usr/bin/env bash
# Builds everything and runs all tests (CTest: doctest cases, converter tests, tool checks),
# then the reliability checks (docs/RELIABILITY.md): the tests under ASan+UBSan, TSan and
# valgrind (tools/sanitize.sh), and short fuzzing runs of the loader, the tokenizer and the
# converter. GPT2_TEST_FAST=1 skips the reliability checks; GPT2_FUZZ_SECONDS (default 30)
# sets how long each fuzzer runs.
set -euo pipefail
cd "$(dirname "$0")/.."
fast="${GPT2_TEST_FAST:-0}"
if [ "$fast" = 1 ]; then bash tools/install_deps.sh; else bash tools/install_deps.sh clang libclang-rt-dev valgrind; fi
cmake -S . -B build-test -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build-test -j"$(nproc)"
ctest --test-dir build-test --output-on-failure -j"$(nproc)"

# ---- the CUDA path: built for every target GPU wherever nvcc is; its tests skip without a GPU ----
nvcc="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)"
if [ -x "$nvcc" ]; then
    cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DGPT2_CUDA=ON -DCMAKE_CUDA_COMPILER="$nvcc" \
        -DGPT2_BUILD_TESTS=OFF -DGPT2_CUDA_TESTS=ON -DGPT2_BUILD_EXAMPLES=OFF >/dev/null
    cmake --build build-cuda -j"$(nproc)"
    ./build-cuda/tests/cuda/gpt2-cuda-tests
fi

# ---- reliability: sanitizers and fuzzing ----
if [ "$fast" != 1 ]; then
    bash tools/sanitize.sh asan tsan valgrind
    bash tests/fuzz/run_fuzz.sh "${GPT2_FUZZ_SECONDS:-30}"
    # A fixed seed and count: CI tries the same mutated checkpoints every run (random seeds are for
    # longer runs by hand, docs/RELIABILITY.md).
    python3 tests/fuzz/fuzz_convert.py --seed "${GPT2_FUZZ_SEED:-1}" --iterations 300 --seconds 300
fi
