// libFuzzer target for the tokenizer: arbitrary bytes to encode (BPE and char vocabulary), arbitrary
// ids to decode and to the UTF-8 stream. Checks round trips, so a finding is a crash, a sanitizer
// report or an abort() below. Build and run from the repository root (after tools/amalgamate.py):
//
//   clang++ -std=c++17 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
//       -I. -DGPT2_TEST_DATA="\"$PWD/tests/data\"" tests/fuzz/fuzz_tokenizer.cpp -o build-tok/fuzz_tokenizer
//   mkdir -p build-tok/fuzz-corpus && ./build-tok/fuzz_tokenizer -max_total_time=60 -max_len=4096 build-tok/fuzz-corpus
#if defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wunused-function"
#endif
#define GPT2_IMPLEMENTATION
#define GPT2_STATIC
#include "gpt2.h"
#include "../test_files.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#ifndef GPT2_TEST_DATA
#define GPT2_TEST_DATA "tests/data"
#endif

static const gpt2__tokenizer* bpe_tokenizer() {
    static gpt2__tokenizer* tok = [] {
        std::vector<std::string> tokens, merges;
        if (!load_gpt2_bpe_files(GPT2_TEST_DATA "/gpt2-bpe", &tokens, &merges)) {
            std::fprintf(stderr, "fuzz_tokenizer: cannot read %s/gpt2-bpe\n", GPT2_TEST_DATA);
            std::abort();
        }
        std::vector<std::string_view> tv(tokens.begin(), tokens.end()), mv(merges.begin(), merges.end());
        gpt2__tokenizer* t = new gpt2__tokenizer;
        gpt2_error err;
        if (gpt2__tokenizer_init_bpe(t, tv.data(), tv.size(), mv.data(), mv.size(), 50256, &err) != GPT2_OK) {
            std::fprintf(stderr, "fuzz_tokenizer: %s\n", err.message);
            std::abort();
        }
        return t;
    }();
    return tok;
}

static const gpt2__tokenizer* char_tokenizer() {
    static gpt2__tokenizer* tok = [] {
        static const char* chars[] = {"\n", " ", "!", "'", ",", ".", "a", "b", "c", "e", "\xc3\xa9", "\xe4\xb8\x96",
                                      "\xf0\x9f\x98\x80"};
        std::vector<std::string_view> cv(chars, chars + sizeof chars / sizeof chars[0]);
        gpt2__tokenizer* t = new gpt2__tokenizer;
        if (gpt2__tokenizer_init_char(t, cv.data(), cv.size(), nullptr) != GPT2_OK) std::abort();
        return t;
    }();
    return tok;
}

static std::string decode(const gpt2__tokenizer* tok, const gpt2__vector<int32_t>& ids) {
    std::string out;
    for (int32_t id : ids) {
        if (id < 0 || (size_t)id >= gpt2__tokenizer_size(tok)) std::abort();
        std::string_view b = gpt2__tokenizer_token_bytes(tok, id);
        out.append(b.data(), b.size());
    }
    return out;
}

static bool valid_utf8(const char* s, size_t n) {
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        i += gpt2__utf8_decode(reinterpret_cast<const unsigned char*>(s) + i, n - i, &cp);
        if (cp == GPT2__INVALID_CP) return false;
    }
    return true;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    const gpt2__tokenizer* bpe = bpe_tokenizer();
    const char* text = reinterpret_cast<const char*>(data) + 1;
    size_t len = size - 1;
    unsigned mode = data[0];

    // Encoding: BPE round-trips any bytes; the char vocabulary either round-trips or says why not.
    gpt2__vector<int32_t> ids;
    gpt2_error err;
    if (gpt2__tokenizer_encode(bpe, text, len, (mode & 1) != 0, &ids, &err) != GPT2_OK) std::abort();
    if (decode(bpe, ids) != std::string(text, len)) std::abort();
    gpt2__vector<int32_t> cids;
    if (gpt2__tokenizer_encode(char_tokenizer(), text, len, false, &cids, &err) == GPT2_OK) {
        if (decode(char_tokenizer(), cids) != std::string(text, len)) std::abort();
    } else if (!cids.empty() || err.code != GPT2_ERROR_BAD_TEXT) {
        std::abort();
    }

    // Decoding arbitrary ids through the UTF-8 stream, in chunks of one token.
    gpt2__vector<int32_t> rand_ids;
    for (size_t i = 0; i + 2 <= len; i += 2) {
        uint32_t v = (uint32_t)(unsigned char)text[i] | ((uint32_t)(unsigned char)text[i + 1] << 8);
        rand_ids.push_back((int32_t)(v % gpt2__tokenizer_size(bpe)));
    }
    const gpt2__vector<int32_t>& stream_ids = (mode & 2) ? rand_ids : ids;
    std::string expected = decode(bpe, stream_ids);
    bool expected_valid = valid_utf8(expected.data(), expected.size());
    gpt2__utf8_stream stream;
    gpt2__string all;
    for (int32_t id : stream_ids) {
        gpt2__string chunk;
        gpt2__utf8_stream_push(&stream, gpt2__tokenizer_token_bytes(bpe, id), &chunk);
        if (stream.n_held > 3) std::abort();
        if (expected_valid && !valid_utf8(chunk.data(), chunk.size())) std::abort();
        all += chunk;
    }
    gpt2__utf8_stream_flush(&stream, &all);
    if (std::string(all.data(), all.size()) != expected) std::abort();
    return 0;
}
