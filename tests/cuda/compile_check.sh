#!/usr/bin/env bash
# Compiles the CUDA path with nvcc for every architecture the CMake build targets (sm_80, sm_89,
# sm_90 and PTX 9.0), and with every build option (GPT2_CUDA_BATCH, GPT2_CUDA_PERSISTENT_DECODE,
# GPT2_CUDA_NO_PDL, GPT2_CUDA_FAST_SAMPLER, GPT2_CUDA_Q8) for sm_90, warnings on: the check CI can
# run on a machine with nvcc and no GPU. The kernels of the many-block sampler and the q8_0
# product are compiled in every build (only their use needs the options), so the first compile
# covers them on every architecture; the options add host code and the persistent kernel.
# Exits 0 with a note when nvcc is absent. Usage: tests/cuda/compile_check.sh [nvcc]
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
nvcc="${1:-${NVCC:-nvcc}}"
if ! command -v "$nvcc" >/dev/null 2>&1; then
    echo "compile_check: $nvcc not found; CUDA compile check skipped"
    exit 0
fi
python3 "$root/tools/amalgamate.py" --check
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
printf '#define GPT2_IMPLEMENTATION\n#include "gpt2_cuda.cuh"\n' > "$tmp/impl.cu"
arch=(-gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_89,code=sm_89
      -gencode=arch=compute_90,code=sm_90 -gencode=arch=compute_90,code=compute_90)
"$nvcc" -std=c++17 -O2 "${arch[@]}" -I"$root" -Xcompiler=-Wall,-Wextra,-Werror -Werror all-warnings \
    -c "$tmp/impl.cu" -o "$tmp/impl.o"
# The opt-in paths, compiled only when asked for: all of them at once, sm_90.
"$nvcc" -std=c++17 -O2 -gencode=arch=compute_90,code=sm_90 -DGPT2_CUDA_BATCH -DGPT2_CUDA_PERSISTENT_DECODE -DGPT2_CUDA_NO_PDL \
    -DGPT2_CUDA_FAST_SAMPLER -DGPT2_CUDA_Q8 -I"$root" \
    -Xcompiler=-Wall,-Wextra,-Werror -Werror all-warnings -c "$tmp/impl.cu" -o "$tmp/impl_options.o"
# The public header stays plain C/C++ for every other file of a program.
"${CXX:-c++}" -std=c++17 -Wall -Wextra -Werror -I"$root" -fsyntax-only -x c++ - <<<'#include "gpt2_cuda.cuh"'
echo "compile_check: gpt2_cuda.cuh compiles for sm_80, sm_89, sm_90 and compute_90, and with every build option for sm_90, with $("$nvcc" --version | tail -1)"
