// GPT-2 BPE encoding throughput, single thread, median of 5 runs per mode.
//
//   cmake --build build --target gpt2-bench-tokenizer
//   build/bench/gpt2-bench-tokenizer tests/data/gpt2-bpe TEXT_FILE [TEXT_FILE...]
//   (e.g. nanoGPT's tinyshakespeare input.txt, and bench/mixed_script.txt)
//
// Modes: "cold" encodes with an empty word cache (a fresh tokenizer per run; loading is not
// timed), "warm" encodes again with the cache filled by a previous pass, "no cache" turns the
// cache off.
#if defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wunused-function"
#endif
#define GPT2_IMPLEMENTATION
#define GPT2_STATIC
#include "gpt2.h"
#include "../tests/test_files.h"

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

static bool init(gpt2__tokenizer* tok, const std::vector<std::string>& tokens, const std::vector<std::string>& merges) {
    std::vector<std::string_view> tv(tokens.begin(), tokens.end()), mv(merges.begin(), merges.end());
    gpt2_error err;
    if (gpt2__tokenizer_init_bpe(tok, tv.data(), tv.size(), mv.data(), mv.size(), 50256, &err) != GPT2_OK) {
        std::fprintf(stderr, "bench_tokenizer: %s\n", err.message);
        return false;
    }
    return true;
}

static double seconds_to_encode(const gpt2__tokenizer* tok, const std::string& text, size_t* n_ids) {
    gpt2__vector<int32_t> ids;
    auto t0 = std::chrono::steady_clock::now();
    gpt2__tokenizer_encode(tok, text.data(), text.size(), false, &ids, nullptr);
    auto t1 = std::chrono::steady_clock::now();
    *n_ids = ids.size();
    return std::chrono::duration<double>(t1 - t0).count();
}

static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

int main(int argc, char** argv) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: %s VOCAB_DIR TEXT_FILE...\n"
                             "  VOCAB_DIR holds encoder.json and vocab.bpe (tests/data/gpt2-bpe)\n", argv[0]);
        return 2;
    }
    std::vector<std::string> tokens, merges;
    if (!load_gpt2_bpe_files(argv[1], &tokens, &merges)) {
        std::fprintf(stderr, "bench_tokenizer: cannot read %s/encoder.json and vocab.bpe\n", argv[1]);
        return 1;
    }
    for (int f = 2; f < argc; f++) {
        std::string text;
        if (!read_whole_file(argv[f], &text)) {
            std::fprintf(stderr, "bench_tokenizer: cannot read %s\n", argv[f]);
            return 1;
        }
        const int runs = 5;
        std::vector<double> cold, warm, nocache;
        size_t n_ids = 0;
        for (int r = 0; r < runs; r++) {
            gpt2__tokenizer tok;
            if (!init(&tok, tokens, merges)) return 1;
            cold.push_back(seconds_to_encode(&tok, text, &n_ids));
            warm.push_back(seconds_to_encode(&tok, text, &n_ids));
            tok.use_cache = false;
            nocache.push_back(seconds_to_encode(&tok, text, &n_ids));
        }
        double mb = (double)text.size() / 1e6;
        std::printf("%s: %.2f MB, %zu tokens\n", argv[f], mb, n_ids);
        std::printf("  cold cache  %7.1f MB/s\n", mb / median(cold));
        std::printf("  warm cache  %7.1f MB/s\n", mb / median(warm));
        std::printf("  no cache    %7.1f MB/s\n", mb / median(nocache));
    }
    return 0;
}
