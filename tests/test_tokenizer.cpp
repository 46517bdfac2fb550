// Tokenizer tests: GPT-2 BPE against OpenAI's encoder.py (golden files), round trips, the
// character vocabulary, init validation, UTF-8 streaming and concurrent encoding.
//
// The tests call the internal gpt2__tokenizer_* functions, so this file compiles its own private
// (GPT2_STATIC) copy of the implementation; tests/main.cpp holds the one the public API uses.
// Parts of the library this file does not call would warn as unused static functions.
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#endif
#define GPT2_IMPLEMENTATION
#define GPT2_STATIC
#include "gpt2.h"
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

#include <doctest/doctest.h>

#include "json.h"

#include <cstdio>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace {

// GPT-2's tokenizer from encoder.json and vocab.bpe, loaded once for all tests.
const gpt2__tokenizer& gpt2_bpe() {
    static gpt2__tokenizer tok;
    static bool loaded = false;
    if (!loaded) {
        std::vector<std::string> tokens, merge_lines;
        REQUIRE(load_gpt2_bpe_files(std::string(GPT2_TEST_DATA) + "/gpt2-bpe", &tokens, &merge_lines));
        std::vector<std::string_view> merges(merge_lines.begin(), merge_lines.end());
        std::vector<std::string_view> views(tokens.begin(), tokens.end());
        gpt2_error err;
        REQUIRE(gpt2__tokenizer_init_bpe(&tok, views.data(), views.size(), merges.data(), merges.size(), 50256,
                                         &err) == GPT2_OK);
        loaded = true;
    }
    return tok;
}

std::vector<int32_t> encode(const gpt2__tokenizer& tok, const std::string& text, bool allow_special = false) {
    gpt2__vector<int32_t> ids;
    gpt2_error err;
    gpt2_result r = gpt2__tokenizer_encode(&tok, text.data(), text.size(), allow_special, &ids, &err);
    REQUIRE_MESSAGE(r == GPT2_OK, err.message);
    return std::vector<int32_t>(ids.begin(), ids.end());
}

std::string decode(const gpt2__tokenizer& tok, const std::vector<int32_t>& ids) {
    std::string out;
    for (int32_t id : ids) {
        REQUIRE((id >= 0 && (size_t)id < gpt2__tokenizer_size(&tok)));
        std::string_view b = gpt2__tokenizer_token_bytes(&tok, id);
        out.append(b.data(), b.size());
    }
    return out;
}

// Independent of the library's decoder: strict UTF-8 validity.
bool valid_utf8(std::string_view s) {
    size_t i = 0;
    while (i < s.size()) {
        unsigned c = (unsigned char)s[i];
        size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (len == 0 || i + len > s.size()) return false;
        uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
        for (size_t k = 1; k < len; k++) {
            unsigned d = (unsigned char)s[i + k];
            if ((d & 0xC0) != 0x80) return false;
            cp = (cp << 6) | (d & 0x3F);
        }
        static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min_cp[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000)) return false;
        i += len;
    }
    return true;
}

// Random valid UTF-8 biased towards what the pre-tokenizer cares about.
std::string random_text(std::mt19937& rng) {
    static const uint32_t specials[] = {' ', ' ', ' ', '\'', '\'', 's', 't', 'r', 'e', 'v', 'm', 'l', 'd', 'S',
                                        '\n', '\t', '\r', 0x0B, 0x0C, 0x1C, 0x85, 0xA0, 0x2028, 0x3000, 0x200A,
                                        '0', '7', '!', '.', ',', 0x301, 0x308, 0x1F600, 0x1F3FD, 0x200D, 0x4E16,
                                        0x3042, 0x0416, 0x03B1, 0x0663, 0x2160, 0xBD, 0xE9, 0xFEFF};
    std::string s;
    int n = (int)(rng() % 40);
    for (int k = 0; k < n; k++) {
        uint32_t cp;
        switch (rng() % 4) {
            case 0: cp = 0x20 + rng() % 0x5F; break;
            case 1: cp = specials[rng() % (sizeof specials / sizeof specials[0])]; break;
            case 2: cp = rng() % 0x800; break;
            default: cp = rng() % 0x110000; break;
        }
        if (cp >= 0xD800 && cp < 0xE000) cp = 'x';
        int repeat = rng() % 8 == 0 ? 1 + (int)(rng() % 6) : 1;
        for (int r = 0; r < repeat; r++) append_utf8(&s, cp);
    }
    return s;
}

// Pieces of the pre-tokenizer's split, as strings.
std::vector<std::string> pretokens(const std::string& text) {
    std::vector<std::string> out;
    const unsigned char* s = reinterpret_cast<const unsigned char*>(text.data());
    for (size_t i = 0; i < text.size();) {
        size_t end = gpt2__pretoken_end(s, text.size(), i);
        REQUIRE(end > i);
        out.emplace_back(text, i, end - i);
        i = end;
    }
    return out;
}

// The byte-level alphabet: byte b as the UTF-8 string of its stand-in character.
std::vector<std::string> byte_alphabet() {
    uint32_t byte_char[256];
    gpt2__bytes_to_unicode(byte_char);
    std::vector<std::string> out(256);
    for (int b = 0; b < 256; b++) append_utf8(&out[(size_t)b], byte_char[b]);
    return out;
}

gpt2_result init_small_bpe(gpt2__tokenizer* tok, std::vector<std::string> extra, std::vector<std::string> merges,
                           gpt2_error* err, int32_t eos = -1) {
    std::vector<std::string> tokens = byte_alphabet();
    tokens.insert(tokens.end(), extra.begin(), extra.end());
    std::vector<std::string_view> tv(tokens.begin(), tokens.end()), mv(merges.begin(), merges.end());
    return gpt2__tokenizer_init_bpe(tok, tv.data(), tv.size(), mv.data(), mv.size(), eos, err);
}

}  // namespace

TEST_CASE("tokenizer: GPT-2 BPE encodes every golden_dev.json case exactly and decodes it back") {
    const gpt2__tokenizer& tok = gpt2_bpe();
    Json golden = read_json((std::string(GPT2_TEST_DATA) + "/gpt2-bpe/golden_dev.json"));
    REQUIRE(golden.array.size() >= 40);
    for (const Json& c : golden.array) {
        std::vector<int32_t> expected;
        for (const Json& id : c["ids"].array) expected.push_back((int32_t)id.number);
        CAPTURE(c["text"].string);
        CHECK(encode(tok, c["text"].string) == expected);
        CHECK(decode(tok, expected) == c["text"].string);
    }
}

TEST_CASE("tokenizer: GPT-2 BPE matches encoder.py on 2000 random strings (golden_random.json)") {
    const gpt2__tokenizer& tok = gpt2_bpe();
    Json golden = read_json((std::string(GPT2_TEST_DATA) + "/gpt2-bpe/golden_random.json"));
    REQUIRE(golden.array.size() == 2000);
    int mismatches = 0;
    for (const Json& c : golden.array) {
        std::vector<int32_t> expected;
        for (const Json& id : c["ids"].array) expected.push_back((int32_t)id.number);
        std::vector<int32_t> got = encode(tok, c["text"].string);
        if (got != expected && ++mismatches <= 5) {
            CAPTURE(c["text"].string);
            CHECK(got == expected);
        }
        CHECK(decode(tok, got) == c["text"].string);
    }
    CHECK(mismatches == 0);
}

TEST_CASE("tokenizer: pre-tokenizer splits like the GPT-2 regex") {
    using V = std::vector<std::string>;
    CHECK(pretokens("Hello world") == V{"Hello", " world"});
    CHECK(pretokens("a   b") == V{"a", "  ", " b"});           // \s+(?!\S) leaves the last space
    CHECK(pretokens("x\n\ny") == V{"x", "\n", "\n", "y"});    // then \s+ takes a lone newline
    CHECK(pretokens("end   ") == V{"end", "   "});            // at the end, the whole run
    CHECK(pretokens("it's IT'S") == V{"it", "'s", " IT", "'", "S"});  // contractions are case-sensitive
    CHECK(pretokens("we'll they're I've") == V{"we", "'ll", " they", "'re", " I", "'ve"});
    CHECK(pretokens("''s") == V{"''", "s"});                  // punctuation run is greedy
    CHECK(pretokens("abc123 456!?") == V{"abc", "123", " 456", "!?"});
    CHECK(pretokens(" !") == V{" !"});
    CHECK(pretokens("a \u00a0b") == V{"a", " ", "\u00a0", "b"});  // NBSP is \s but not ' '
    CHECK(pretokens(" \u00a0 x") == V{" \u00a0", " x"});
    CHECK(pretokens("\x1c") == V{"\x1c"});                    // U+001C is not White_Space
    CHECK(pretokens("e\u0301t\u00e9") == V{"e", "\u0301", "t\u00e9"});  // Mn is neither L nor N
}

TEST_CASE("tokenizer: decode(encode(s)) == s for random valid UTF-8 and random bytes") {
    const gpt2__tokenizer& tok = gpt2_bpe();
    std::mt19937 rng(42);
    for (int k = 0; k < 5000; k++) {
        std::string s = random_text(rng);
        REQUIRE(valid_utf8(s));
        CAPTURE(s);
        REQUIRE(decode(tok, encode(tok, s)) == s);
    }
    for (int k = 0; k < 5000; k++) {
        std::string s;
        int n = (int)(rng() % 32);
        for (int i = 0; i < n; i++) s.push_back((char)(rng() % 4 == 0 ? "\x80\xbf\xc0\xc3\xe0\xed\xf0\xf4\xff '"[rng() % 12] : rng()));
        CAPTURE(s);
        REQUIRE(decode(tok, encode(tok, s)) == s);
    }
}

TEST_CASE("tokenizer: invalid UTF-8 bytes are encoded as punctuation-like characters and round-trip") {
    const gpt2__tokenizer& tok = gpt2_bpe();
    using V = std::vector<std::string>;
    CHECK(pretokens("a\xff" "b") == V{"a", "\xff", "b"});
    CHECK(pretokens(" \xe2\x82!") == V{" \xe2\x82!"});          // truncated sequence: two OTHER bytes
    CHECK(pretokens("\xed\xa0\x80x") == V{"\xed\xa0\x80", "x"}); // encoded surrogate: three OTHER bytes
    CHECK(pretokens("\xf0\x9f\x98") == V{"\xf0\x9f\x98"});
    std::string s = "caf\xc3 \xff\xfe wrong\x80";
    std::vector<int32_t> ids = encode(tok, s);
    CHECK(decode(tok, ids) == s);
    CHECK(encode(tok, "\xff") == std::vector<int32_t>{tok.byte_id[0xff]});
}

TEST_CASE("tokenizer: <|endoftext|> is the eos token only with allow_special") {
    const gpt2__tokenizer& tok = gpt2_bpe();
    std::string text = "Hi<|endoftext|> there<|endoftext|>";
    std::vector<int32_t> special = encode(tok, text, true);
    CHECK(special == std::vector<int32_t>{17250, 50256, 612, 50256});
    std::vector<int32_t> plain = encode(tok, text, false);
    CHECK(std::count(plain.begin(), plain.end(), 50256) == 0);
    CHECK(decode(tok, plain) == text);
    CHECK(decode(tok, special) == text);
    CHECK(encode(tok, "<|endoftext|>", true) == std::vector<int32_t>{50256});
    CHECK(encode(tok, "<|endoftext|", true) == encode(tok, "<|endoftext|", false));
}

TEST_CASE("tokenizer: merges apply encoder.py's way: all occurrences of the best pair, left to right") {
    gpt2__tokenizer tok;
    gpt2_error err;
    // "ab a" outranks "a b", but only exists after it: encoder.py merges both "a b" first.
    REQUIRE(init_small_bpe(&tok, {"ab", "aba", "abab", "aa"}, {"ab a", "a b", "ab ab", "a a"}, &err) == GPT2_OK);
    CHECK(encode(tok, "abab") == std::vector<int32_t>{256 + 2});
    CHECK(encode(tok, "aaa") == std::vector<int32_t>{256 + 3, tok.byte_id[(int)'a']});
    CHECK(encode(tok, "aaaa") == std::vector<int32_t>{256 + 3, 256 + 3});
    CHECK(encode(tok, "aba") == std::vector<int32_t>{256 + 1});
    CHECK(encode(tok, "") == std::vector<int32_t>{});
}

TEST_CASE("tokenizer: the word cache changes no result, and 4 threads encode like one") {
    const gpt2__tokenizer& tok = gpt2_bpe();
    std::mt19937 rng(7);
    std::vector<std::string> texts;
    for (int k = 0; k < 400; k++) texts.push_back(random_text(rng) + " the cat's whiskers, 1234 " + random_text(rng));
    std::vector<std::vector<int32_t>> serial;
    for (const std::string& t : texts) serial.push_back(encode(tok, t));
    std::vector<std::vector<int32_t>> results[4];
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; t++) {
        threads.emplace_back([&, t] {
            for (int rep = 0; rep < 3; rep++) {
                results[t].clear();
                for (size_t k = 0; k < texts.size(); k++) {
                    const std::string& s = texts[(k + (size_t)t * 97) % texts.size()];
                    gpt2__vector<int32_t> ids;
                    gpt2__tokenizer_encode(&tok, s.data(), s.size(), false, &ids, nullptr);
                    results[t].emplace_back(ids.begin(), ids.end());
                }
            }
        });
    }
    for (auto& th : threads) th.join();
    for (int t = 0; t < 4; t++) {
        for (size_t k = 0; k < texts.size(); k++) {
            CHECK(results[t][k] == serial[(k + (size_t)t * 97) % texts.size()]);
        }
    }
    gpt2__tokenizer& mut = const_cast<gpt2__tokenizer&>(tok);
    mut.use_cache = false;
    for (size_t k = 0; k < texts.size(); k++) CHECK(encode(tok, texts[k]) == serial[k]);
    mut.use_cache = true;
}

TEST_CASE("tokenizer: UTF-8 stream emits exactly the decoded bytes, in whole characters") {
    const gpt2__tokenizer& tok = gpt2_bpe();
    const char* texts[] = {"😀😃😄 👍🏽 👨‍👩‍👧‍👦 🇫🇷", "你好，世界。こんにちは", "Привет ∑ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ok", "plain ascii"};
    for (const char* text : texts) {
        std::vector<int32_t> ids = encode(tok, text);
        gpt2__utf8_stream stream;
        gpt2__string all;
        for (int32_t id : ids) {
            gpt2__string chunk;
            gpt2__utf8_stream_push(&stream, gpt2__tokenizer_token_bytes(&tok, id), &chunk);
            CHECK(valid_utf8(std::string_view(chunk.data(), chunk.size())));
            all += chunk;
        }
        gpt2__string rest;
        gpt2__utf8_stream_flush(&stream, &rest);
        CHECK(rest.empty());
        all += rest;
        CHECK(std::string(all.data(), all.size()) == text);
    }
    // Random splits of valid text: every chunk valid; random bytes: nothing lost or held for good.
    std::mt19937 rng(3);
    for (int k = 0; k < 2000; k++) {
        std::string s = random_text(rng);
        bool valid = k % 2 == 0;
        if (!valid) {
            for (int i = 0; i < 4; i++) s.insert(s.begin() + (long)(rng() % (s.size() + 1)), (char)(0x80 + rng() % 0x80));
        }
        gpt2__utf8_stream stream;
        gpt2__string all;
        for (size_t i = 0; i < s.size();) {
            size_t n = std::min(s.size() - i, (size_t)(rng() % 5));
            gpt2__string chunk;
            gpt2__utf8_stream_push(&stream, std::string_view(s).substr(i, n), &chunk);
            CHECK(stream.n_held <= 3);
            if (valid) CHECK(valid_utf8(std::string_view(chunk.data(), chunk.size())));
            all += chunk;
            i += n;
        }
        gpt2__utf8_stream_flush(&stream, &all);
        REQUIRE(std::string(all.data(), all.size()) == s);
    }
    // An invalid lead is not held: "\xE0\x80" can never become valid.
    gpt2__utf8_stream stream;
    gpt2__string out;
    gpt2__utf8_stream_push(&stream, "a\xE0\x80", &out);
    CHECK(out == "a\xE0\x80");
    out.clear();
    gpt2__utf8_stream_push(&stream, "\xE2\x82", &out);
    CHECK(out.empty());
    gpt2__utf8_stream_push(&stream, "\xAC!", &out);
    CHECK(out == "\xE2\x82\xAC!");
}

TEST_CASE("tokenizer: character vocabulary encodes, decodes and names unknown characters") {
    gpt2__tokenizer tok;
    gpt2_error err;
    std::vector<std::string_view> chars = {"\n", " ", "!", "A", "a", "b", "\u00e9", "\u4e16", "\U0001F600"};
    REQUIRE(gpt2__tokenizer_init_char(&tok, chars.data(), chars.size(), &err) == GPT2_OK);
    CHECK(gpt2__tokenizer_size(&tok) == 9);
    std::string text = "Ab \u00e9\u4e16\U0001F600!\n";
    std::vector<int32_t> ids = encode(tok, text);
    CHECK(ids == std::vector<int32_t>{3, 5, 1, 6, 7, 8, 2, 0});
    CHECK(decode(tok, ids) == text);

    gpt2__vector<int32_t> out;
    out.push_back(99);
    CHECK(gpt2__tokenizer_encode(&tok, "ab\u00fcx", 5, false, &out, &err) == GPT2_ERROR_BAD_TEXT);
    CHECK(err.code == GPT2_ERROR_BAD_TEXT);
    CHECK(std::string(err.message).find("U+00FC") != std::string::npos);
    CHECK(std::string(err.message).find("byte offset 2") != std::string::npos);
    CHECK(out.size() == 1);  // nothing appended on failure
    CHECK(gpt2__tokenizer_encode(&tok, "a\xff", 2, false, &out, &err) == GPT2_ERROR_BAD_TEXT);
    CHECK(std::string(err.message).find("byte offset 1") != std::string::npos);
}

TEST_CASE("tokenizer: init rejects bad vocabularies with the entry index") {
    gpt2__tokenizer tok;
    gpt2_error err;
    auto check_char = [&](std::vector<std::string_view> chars, const char* needle) {
        CHECK(gpt2__tokenizer_init_char(&tok, chars.data(), chars.size(), &err) == GPT2_ERROR_BAD_FILE);
        CAPTURE(err.message);
        CHECK(std::string(err.message).find(needle) != std::string::npos);
    };
    check_char({"a", "b", "a"}, "entry 2");
    check_char({"a", "\u00e9", "\u00e9"}, "entry 2");
    check_char({"a", ""}, "entry 1");
    check_char({"a", "b", "\xff"}, "entry 2");
    check_char({"ab"}, "entry 0");
    check_char({}, "0 entries");

    auto check_bpe = [&](std::vector<std::string> extra, std::vector<std::string> merges, const char* needle,
                         int32_t eos = -1) {
        CHECK(init_small_bpe(&tok, extra, merges, &err, eos) == GPT2_ERROR_BAD_FILE);
        CAPTURE(err.message);
        CHECK(std::string(err.message).find(needle) != std::string::npos);
    };
    check_bpe({"\u4e16"}, {}, "token 256");                    // not in the byte alphabet
    check_bpe({"ab", ""}, {}, "token 257 is empty");
    check_bpe({"ab", "ab"}, {}, "token 257");                  // duplicate
    check_bpe({"ab"}, {"a b", "a c d"}, "merge 1");            // malformed
    check_bpe({"ab"}, {"a b", "ab x"}, "merge 1");             // result not a token
    check_bpe({"ab"}, {"a zz"}, "merge 0");                    // part not a token
    check_bpe({"ab"}, {"a b", "a b"}, "merge 1");              // duplicate
    check_bpe({"ab"}, {}, "end-of-text", 300);
    std::vector<std::string_view> few = {"a", "b"};
    CHECK(gpt2__tokenizer_init_bpe(&tok, few.data(), few.size(), nullptr, 0, -1, &err) == GPT2_ERROR_BAD_FILE);
    CHECK(init_small_bpe(&tok, {"ab"}, {"a b"}, &err) == GPT2_OK);

    gpt2__tokenizer none;
    gpt2__vector<int32_t> ids;
    CHECK(gpt2__tokenizer_encode(&none, "x", 1, false, &ids, &err) == GPT2_ERROR_NO_VOCABULARY);
}

namespace {
// encoder.py's bpe(), written as plainly as possible: find the lowest-ranked adjacent pair,
// merge all its occurrences left to right, repeat.
std::vector<std::string> naive_bpe(const std::string& word, const std::map<std::pair<std::string, std::string>, int>& ranks) {
    std::vector<std::string> w;
    for (char c : word) w.emplace_back(1, c);
    for (;;) {
        int best = -1;
        std::pair<std::string, std::string> bigram;
        for (size_t i = 0; i + 1 < w.size(); i++) {
            auto it = ranks.find({w[i], w[i + 1]});
            if (it != ranks.end() && (best < 0 || it->second < best)) {
                best = it->second;
                bigram = it->first;
            }
        }
        if (best < 0) return w;
        std::vector<std::string> merged;
        for (size_t i = 0; i < w.size();) {
            if (i + 1 < w.size() && w[i] == bigram.first && w[i + 1] == bigram.second) {
                merged.push_back(w[i] + w[i + 1]);
                i += 2;
            } else {
                merged.push_back(w[i++]);
            }
        }
        w = merged;
    }
}
}  // namespace

TEST_CASE("tokenizer: merges match a plain encoder.py port for random merge tables in any rank order") {
    std::mt19937 rng(11);
    for (int table = 0; table < 200; table++) {
        // Tokens grow from "a", "b", "c" by merging two existing tokens; ranks are then shuffled,
        // so a merge may outrank the merges that create its parts (unlike a trained table).
        std::vector<std::string> extra;
        std::vector<std::pair<std::string, std::string>> pairs;
        std::vector<std::string> pool = {"a", "b", "c"};
        std::set<std::pair<std::string, std::string>> seen;
        while (pairs.size() < 12) {
            std::string x = pool[rng() % pool.size()], y = pool[rng() % pool.size()];
            if (x.size() + y.size() > 6 || !seen.insert({x, y}).second) continue;
            pairs.emplace_back(x, y);
            if (std::find(pool.begin(), pool.end(), x + y) == pool.end()) {
                pool.push_back(x + y);
                extra.push_back(x + y);
            }
        }
        std::shuffle(pairs.begin(), pairs.end(), rng);
        std::vector<std::string> merges;
        std::map<std::pair<std::string, std::string>, int> ranks;
        for (const auto& p : pairs) {
            ranks[p] = (int)merges.size();
            merges.push_back(p.first + " " + p.second);
        }
        gpt2__tokenizer tok;
        gpt2_error err;
        REQUIRE_MESSAGE(init_small_bpe(&tok, extra, merges, &err) == GPT2_OK, err.message);
        for (int k = 0; k < 50; k++) {
            std::string word;
            size_t n = 1 + rng() % 24;
            for (size_t i = 0; i < n; i++) word.push_back("abc"[rng() % 3]);
            std::vector<int32_t> expected;
            for (const std::string& t : naive_bpe(word, ranks)) {
                expected.push_back(t.size() == 1 ? tok.byte_id[(unsigned char)t[0]]
                                                 : 256 + (int32_t)(std::find(extra.begin(), extra.end(), t) - extra.begin()));
            }
            CAPTURE(word);
            REQUIRE(encode(tok, word) == expected);
        }
    }
}
