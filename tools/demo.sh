#!/usr/bin/env bash
# Builds gpt2.h's programs and starts the REPL on the shipped Shakespeare model.
# Arguments are passed to the gpt2 program. Without a terminal it prints one sample instead.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DGPT2_BUILD_TESTS=OFF >/dev/null
cmake --build build -j"$(nproc)" --target gpt2-cli >/dev/null
if [ $# -eq 0 ] && [ ! -t 0 ]; then
    exec ./build/examples/gpt2 -p "ROMEO:" -n 200
fi
exec ./build/examples/gpt2 "$@"
