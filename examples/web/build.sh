#!/usr/bin/env bash
# Builds gpt2.h for WebAssembly with Emscripten (Debian 12's emscripten 3.1.6 or newer).
#
#   bash examples/web/build.sh           the page's module: examples/web/gpt2_web.js + .wasm
#   bash examples/web/build.sh tests     also the doctest suite for Node: build-wasm/tests/gpt2-tests.js
#
# GPT2_WASM_SIMD=0 builds without -msimd128, so the portable (scalar) kernels run; GPT2_WASM_OUT=DIR
# writes the module to DIR instead of examples/web. No -pthread:
# threads would need a SharedArrayBuffer, which browsers give only to cross-origin isolated
# pages, so every session runs on one thread (src/cpu/threadpool.h).
set -euo pipefail
cd "$(dirname "$0")/../.."
command -v em++ >/dev/null || { echo "build.sh: em++ not found; install Emscripten (Debian: apt-get install emscripten)" >&2; exit 1; }
# Debian's emscripten runs its JavaScript optimizer with Node and finds acorn among Debian's Node
# modules; a Node from elsewhere (nodesource) does not look there by itself.
export NODE_PATH="${NODE_PATH:+$NODE_PATH:}/usr/share/nodejs"

simd=()
[ "${GPT2_WASM_SIMD:-1}" = 1 ] && simd=(-msimd128)
common=(-std=c++17 -O3 "${simd[@]}" -Wall -Wextra -I.)

# The page's Web Worker and the Node driver load this one module: MODULARIZE makes it a factory,
# createGpt2(), that resolves once the wasm is instantiated.
module_dir="${GPT2_WASM_OUT:-examples/web}"
mkdir -p "$module_dir"
em++ "${common[@]}" examples/web/gpt2_web.cpp -o "$module_dir/gpt2_web.js" \
    -sMODULARIZE=1 -sEXPORT_NAME=createGpt2 -sENVIRONMENT=web,worker,node -sALLOW_MEMORY_GROWTH=1 \
    -sEXPORTED_FUNCTIONS=_malloc,_free -sEXPORTED_RUNTIME_METHODS=ccall,UTF8ToString
echo "wrote $module_dir/gpt2_web.js and gpt2_web.wasm"

[ "${1:-}" = tests ] || exit 0

# The doctest suite as one Node program. NODERAWFS lets it read the test data from the real file
# system; the models it reads are made by the converter, as CTest's fixture makes them.
out=build-wasm/tests
mkdir -p "$out/include/doctest" "$out/obj"
cp /usr/include/doctest/doctest.h "$out/include/doctest/"
python3 tests/make_test_models.py "$out/generated" >/dev/null
defs=(-DGPT2_REFERENCE_FORWARD "-DGPT2_TEST_DATA=\"$PWD/tests/data\"" "-DGPT2_TEST_OUT=\"$PWD/$out/generated\""
      "-DGPT2_SOURCE_DIR=\"$PWD\"" "-DGPT2_BINARY_DIR=\"$PWD/$out\"")
# doctest's REQUIRE throws: exceptions on (Emscripten turns catching off by default).
sources=(tests/main.cpp tests/test_*.cpp)
printf '%s\n' "${sources[@]}" | xargs -P "$(nproc)" -I{} sh -c \
    'f="{}"; em++ "$@" -fexceptions -c "$f" -o "'"$out"'/obj/$(basename "$f" .cpp).o"' _ "${common[@]}" -I"$out/include" "${defs[@]}"
em++ "${common[@]}" -fexceptions "$out"/obj/*.o -o "$out/gpt2-tests.js" \
    -sENVIRONMENT=node -sNODERAWFS=1 -sALLOW_MEMORY_GROWTH=1 -sEXIT_RUNTIME=1
echo "wrote $out/gpt2-tests.js"
