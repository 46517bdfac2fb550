#!/usr/bin/env bash
# Runs the tests under sanitizers and valgrind; any report fails the script.
#
#   tools/sanitize.sh [asan] [tsan] [valgrind]    (no argument: all three)
#
#   asan      the CTest suite built with AddressSanitizer + UndefinedBehaviorSanitizer (clang,
#             -fno-sanitize-recover=all) in build-asan/: the doctest cases and the MaskBench
#             sample, not the Python tests (they run the examples and the converter, which the
#             suite covers) nor the checks that only compile or read files; then a soak run
#             shorter than soak_short (ASan's allocator quarantine makes RSS meaningless: its
#             bound is off, leaks are LeakSanitizer's job)
#   tsan      the multi-threaded tests (the doctest cases with "thread" in their name, and a
#             short soak run: 4 sessions in 4 threads, 2 workers each) with ThreadSanitizer in
#             build-tsan/ (the soak's memory bound is off: TSan's shadow memory grows)
#   valgrind  memcheck on one end-to-end generation with the gpt2 program (Release build in
#             build-valgrind/, -n 20 tokens on tests' shakespeare_char.gguf)
# Sanitizer builds use clang (set CXX=g++ to use gcc). Needs valgrind for the third step.
set -euo pipefail
cd "$(dirname "$0")/.."
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(asan tsan valgrind)
jobs="$(nproc)"
cxx="${CXX:-clang++}"
cc="${CC:-clang}"
[[ "$cxx" == *g++* ]] && cc="${CC:-gcc}"

configure() { # configure DIR CMAKE_BUILD_TYPE FLAGS [CMAKE ARGUMENTS...]
    cmake -S . -B "$1" -DCMAKE_BUILD_TYPE="$2" -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" \
        -DCMAKE_CXX_FLAGS="$3" -DCMAKE_C_FLAGS="$3" -DCMAKE_EXE_LINKER_FLAGS="$3" "${@:4}" >/dev/null
}

for step in "${steps[@]}"; do
    start=$SECONDS
    case "$step" in
    asan)
        echo "== ASan + UBSan: all tests (build-asan)"
        # Line tables are enough for the reports' stack traces, and compile a sixth faster than -g.
        configure build-asan RelWithDebInfo "-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer" \
            -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -gline-tables-only -DNDEBUG" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -gline-tables-only -DNDEBUG"
        # Only the programs the sanitized tests run (the doctest suite, the soak, the schema
        # benchmark): every other program compiles the implementation again (3 min each under
        # ASan) to run nothing here. Left out of CTest with them: the checks
        # that only compile (the parts, the CUDA header) or read files (the amalgamation).
        cmake --build build-asan -j"$jobs" --target gpt2-sanitized-programs
        # halt_on_error and abort_on_error make any report a failed test, not a log line.
        ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1 \
        UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
            ctest --test-dir build-asan --output-on-failure -j"$jobs" \
                -E '^py_|^soak_short$|^bench_json_keys$|^amalgamation_is_current$|^parts_compile_alone$|^cuda_header_compiles$'
        # The soak test, shorter than CTest's soak_short (ASan is ~3x slower).
        build-asan/tests/gpt2-soak build-asan/tests/generated/shakespeare_char.gguf --tokens 1500 --rss-bound-kib 1000000
        ;;
    tsan)
        echo "== TSan: multi-threaded tests (build-tsan)"
        configure build-tsan RelWithDebInfo "-fsanitize=thread -fno-omit-frame-pointer"
        cmake --build build-tsan -j"$jobs" --target gpt2-tests gpt2-soak
        mkdir -p build-tsan/tests/generated
        python3 tests/make_test_models.py build-tsan/tests/generated >/dev/null
        export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
        # "two sessions ... in two threads" is left out: 600 tokens past the context take ~10 min
        # under TSan, and the soak run below covers the same (and the workers) in one.
        build-tsan/tests/gpt2-tests --test-case='*thread*' --test-case-exclude='*two sessions on one model*'
        # A few rounds of 4 sessions in 4 threads, 2 workers each (TSan is ~10x slower).
        build-tsan/tests/gpt2-soak build-tsan/tests/generated/shakespeare_char.gguf --tokens 600 --rss-bound-kib 1000000
        ;;
    valgrind)
        echo "== valgrind memcheck: gpt2 -p ... -n 20 (build-valgrind)"
        command -v valgrind >/dev/null || { echo "valgrind is not installed (apt-get install valgrind)"; exit 1; }
        cmake -S . -B build-valgrind -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGPT2_BUILD_TESTS=OFF >/dev/null
        cmake --build build-valgrind -j"$jobs" --target gpt2-cli
        model=build-valgrind/shakespeare_char.gguf
        python3 tools/convert.py tests/data/shakespeare_char/ckpt_slim.pt --meta tests/data/shakespeare_char/meta.pkl -o "$model" >/dev/null
        valgrind --tool=memcheck --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite,indirect --quiet \
            build-valgrind/examples/gpt2 -m "$model" -p "ROMEO:" -n 20 -t 2 >/dev/null
        echo "valgrind: no errors"
        ;;
    *) echo "sanitize.sh: unknown step '$step' (asan, tsan, valgrind)"; exit 1 ;;
    esac
    echo "== $step passed in $((SECONDS - start)) s"
done
