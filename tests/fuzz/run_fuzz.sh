#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) and runs each for SECONDS seconds.
#
#   tests/fuzz/run_fuzz.sh SECONDS
#
# Targets: fuzz_gguf.cpp (seeds: corpus_gguf/), fuzz_tokenizer.cpp (seeds: corpus_tokenizer/ if
# present), fuzz_session_state.cpp (seeds: valid states it writes itself), fuzz_grammar.cpp
# (seeds: corpus_grammar/, GBNF grammars each with a text to match) and fuzz_json_schema.cpp
# (seeds: corpus_json_schema/, JSON Schemas each with an instance; json_schema.dict, its keywords,
# for libFuzzer's -dict). Seeds are copied to
# build-fuzz/ so the repository's corpus stays as committed. Any crash, sanitizer report, leak or timeout fails the script; the input
# that caused it is left in build-fuzz/ (crash-*, leak-*, timeout-*) to replay with
#   build-fuzz/fuzz_gguf build-fuzz/crash-...
# The seed is fixed (GPT2_FUZZ_SEED, default 1) so that CI runs the same inputs every time.
# Prints the number of executions of each target. docs/RELIABILITY.md describes longer runs.
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds="${1:?usage: tests/fuzz/run_fuzz.sh SECONDS}"
out=build-fuzz
mkdir -p "$out"
cxx="${CXX_FUZZ:-clang++}"
flags=(-std=c++17 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -Wall -Wextra -Werror -I. -Itests -pthread
       -DGPT2_TEST_DATA="\"$PWD/tests/data\"")

targets=()
for target in fuzz_gguf fuzz_tokenizer fuzz_session_state fuzz_grammar fuzz_json_schema; do
    if [ -f "tests/fuzz/$target.cpp" ]; then targets+=("$target"); else echo "$target: tests/fuzz/$target.cpp not present, skipped"; fi
done
# All built at once: each is one compiler run over the whole implementation (about 2 min), so
# one after another they left every core but one idle.
echo "== building ${targets[*]}"
pids=()
for target in "${targets[@]}"; do
    "$cxx" "${flags[@]}" "tests/fuzz/$target.cpp" -o "$out/$target" >"$out/$target.build.log" 2>&1 &
    pids+=($!)
done
for i in "${!targets[@]}"; do
    wait "${pids[$i]}" || { cat "$out/${targets[$i]}.build.log"; echo "${targets[$i]}: the build failed"; exit 1; }
done
status=0
for target in "${targets[@]}"; do
    corpus="$out/corpus_${target#fuzz_}"
    mkdir -p "$corpus"
    seeds="tests/fuzz/corpus_${target#fuzz_}"
    [ -d "$seeds" ] && cp -n "$seeds"/* "$corpus"/ 2>/dev/null || true
    [ "$target" = fuzz_session_state ] && GPT2_FUZZ_WRITE_SEEDS="$corpus" "$out/$target"
    echo "== $target: fuzzing for $seconds s"
    log="$out/$target.log"
    dict=()
    [ -f "tests/fuzz/${target#fuzz_}.dict" ] && dict=(-dict="$PWD/tests/fuzz/${target#fuzz_}.dict")
    if (cd "$out" && ASAN_OPTIONS=detect_leaks=1 "./$target" -max_total_time="$seconds" -seed="${GPT2_FUZZ_SEED:-1}" -timeout=20 -rss_limit_mb=2048 \
            -print_final_stats=1 "${dict[@]}" "corpus_${target#fuzz_}") >"$log" 2>&1; then
        result=ok
    else
        result=FAILED
        status=1
        tail -n 60 "$log"
    fi
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
    units=$(ls "$corpus" | wc -l)
    echo "$target: $result, $execs executions in $seconds s, corpus of $units inputs (log: $log)"
done
exit $status
