#!/usr/bin/env bash
# Prints what the library's programs give for fixed inputs, so that a change that must not change
# behaviour (a refactor) can be checked: run it on the build before and after, and diff the files.
#
#   bash tools/same_output.sh SOURCE_TREE BUILD_DIR OUT_FILE
#
# BUILD_DIR must hold examples/gpt2, bench/gpt2-quantize and tests/gpt2-same-tokens (a Release
# build of SOURCE_TREE). Covered, on the shipped model in every weight type (f32, f16, bf16,
# q8_0, q4_0), the test model with GPT-2's vocabulary and random models of GPT-2 124M's shape
# (f32, f16, q8_0): the `gpt2 --json` output of the
# reference prompt at 1, 2 and 3 threads, sampled and greedy; a run past the context under both
# context policies; every kernel set this CPU runs (gpt2-same-tokens) at 1, 2 and 3 threads; and
# gpt2_generate_batch over three sessions (a driver built from SOURCE_TREE's gpt2.h).
set -euo pipefail
src="$(cd "$1" && pwd)"; build="$(cd "$2" && pwd)"; out="$3"
here="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
cli="$build/examples/gpt2"
tar -xzf "$here/models/shakespeare_char_medium.gguf.tar.gz" -C "$work"
models=("$work/shakespeare_char_medium.gguf")
for type in f16 bf16 q8_0 q4_0; do
    "$build/bench/gpt2-quantize" "${models[0]}" "$work/medium_$type.gguf" --type "$type" >/dev/null
    models+=("$work/medium_$type.gguf")
done
python3 "$here/tests/make_test_models.py" "$work/test" >/dev/null
models+=("$work/test/padded_gpt2.gguf")

cat > "$work/batch.cpp" <<'CPP'
#define GPT2_IMPLEMENTATION
#include "gpt2.h"
#include <cstdio>
#include <cstdlib>
// gpt2_generate_batch over three sessions of argv[1] at argv[2] threads; prints each one's text.
static int print_token(void* user, int32_t id, const char* text, size_t len) {
    std::printf("[%d:%d]%.*s", *(int*)user, (int)id, (int)len, text ? text : "");
    return 0;
}
int main(int argc, char** argv) {
    if (argc < 3) return 2;
    gpt2_error err;
    gpt2_model* model = nullptr;
    if (gpt2_model_load_file(argv[1], nullptr, &model, &err) != GPT2_OK) return std::fprintf(stderr, "%s\n", err.message), 1;
    gpt2_session_params sp = gpt2_session_default_params();
    sp.n_threads = std::atoi(argv[2]);
    gpt2_session* s[3];
    int index[3] = {0, 1, 2};
    gpt2_generate_params p[3];
    const char* prompts[3] = {"ROMEO:", "JULIET:\nO Romeo, Romeo", "KING"};
    for (int i = 0; i < 3; i++) {
        if (gpt2_session_create(model, &sp, &s[i], &err) != GPT2_OK) return std::fprintf(stderr, "%s\n", err.message), 1;
        p[i] = gpt2_generate_default_params();
        p[i].max_new_tokens = 40 + 20 * i;
        p[i].temperature = i == 1 ? 0.0f : 0.8f;
        p[i].seed = 1337 + (uint64_t)i;
        p[i].on_token = print_token;
        p[i].user = &index[i];
    }
    if (gpt2_generate_batch(s, prompts, p, 3, &err) != GPT2_OK) return std::fprintf(stderr, "%s\n", err.message), 1;
    std::printf("\n");
    for (gpt2_session* x : s) gpt2_session_free(x);
    gpt2_model_free(model);
    return 0;
}
CPP
g++ -std=c++17 -O2 -pthread -I"$src" "$work/batch.cpp" -o "$work/batch"

{
    for m in "${models[@]}"; do
        name="$(basename "$m")"
        prompt="ROMEO:"
        for t in 1 2 3; do
            echo "# $name cli threads $t sampled"; "$cli" -m "$m" -p "$prompt" -n 60 -t "$t" --json
            echo "# $name cli threads $t greedy"; "$cli" -m "$m" -p "$prompt" -n 60 -t "$t" --temp 0 --json
        done
        for policy in exact discard; do
            echo "# $name cli past the context, $policy"; "$cli" -m "$m" -p "$prompt" -n 100 -t 2 --ctx 12 --context-policy "$policy" --json
        done
        echo "# $name batch"; "$work/batch" "$m" 2
        for k in $("$build/tests/gpt2-same-tokens" --list-kernels); do
            for t in 1 2 3; do "$build/tests/gpt2-same-tokens" --kernels "$k" --threads "$t" "$m"; done
        done
    done
    # GPT-2 124M's shape (random weights, no vocabulary): 768- and 3072-wide products, the 50257-row head
    for type in f32 f16 q8_0; do
        "$build/bench/gpt2-bench" --random 124M --type "$type" --save "$work/124M_$type.gguf" >/dev/null
        for t in 1 2 3; do
            echo "# 124M $type cli threads $t"; "$cli" -m "$work/124M_$type.gguf" --prompt-ids 1,2,3,4,5,6,7,8,9,10 -n 12 -t "$t" --json
        done
        rm "$work/124M_$type.gguf"
    done
} > "$out" 2>&1
echo "same_output: $(grep -c '^#' "$out") cases written to $out"
