// libFuzzer target for grammars: gpt2_grammar_from_gbnf on arbitrary GBNF text, then
// gpt2_grammar_match, the token masks and a short generation on what it accepts, for two tiny
// models (a character vocabulary with three multi-byte characters, and a byte-level BPE
// vocabulary whose merged tokens cross literals and UTF-8 characters). Built and run by
// tests/fuzz/run_fuzz.sh; seeds in tests/fuzz/corpus_grammar/.
//
// The input is GBNF, a NUL, the text to match (at most 256 bytes are used); a second NUL starts
// a start rule's name (at most 64 bytes) to pass as `root` instead of NULL. A finding is a crash,
// a sanitizer report, a timeout or an abort() below, on one of these rules:
// - from_gbnf returns GPT2_OK with a grammar, or GPT2_ERROR_BAD_GRAMMAR with NULL; the same for
//   both vocabularies, message included, but that the character vocabulary also refuses a
//   grammar none of whose sentences it can write (then every sentence the BPE vocabulary's
//   grammar accepts holds a character it lacks); root NULL and root "root" agree.
// - gpt2_grammar_match returns GPT2_OK or GPT2_ERROR_BAD_GRAMMAR (too ambiguous) only. Over
//   the text's prefixes, NONE and too-ambiguous are final (so every prefix of a COMPLETE or
//   PREFIX text is not NONE), and the answers equal those of one matcher fed a byte at a time.
//   A COMPLETE text is UTF-8; a PREFIX one is UTF-8 up to an unfinished last character.
// - The mask (gpt2__matcher_mask, its cache included) allows exactly the tokens t for which
//   the text + t is not NONE, and the end-of-text token exactly when the text is COMPLETE.
// - gpt2_generate with the grammar returns GPT2_OK or GPT2_ERROR_BAD_GRAMMAR; the generated
//   bytes match as grammar_match says, on_token receives exactly them, and a generation that
//   ends early ends at the end-of-text token or at a sentence nothing extends.
// - Every error message is non-empty and ends within the 512 bytes of gpt2_error::message.
// Per-input work is bounded: inputs over 4 KB and grammars whose repetition counts add up past
// kRepeatBudget are skipped, and a text that makes the matcher too ambiguous or use many stack
// nodes gets the few checks that matter most (see LLVMFuzzerTestOneInput).
#define GPT2_IMPLEMENTATION
#define GPT2_STATIC
#include "gpt2.h"
#include "gguf_builder.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

enum { kMaxInput = 4096, kMaxText = 256, kMaxRoot = 64, kMaskText = 32, kNewTokens = 4, kRepeatBudget = 8192, kHeavyNodes = 1 << 16 };

static void require(bool ok, const char* what) {
    if (ok) return;
    std::fprintf(stderr, "fuzz_grammar: violated: %s\n", what);
    std::abort();
}

static void check_message(const gpt2_error& err) {
    require(std::memchr(err.message, '\0', sizeof err.message) != nullptr, "an error message is NUL-terminated");
    require(err.message[0] != '\0', "an error message is not empty");
}

// The GPT-2 byte alphabet's spelling of raw bytes (a BPE token's text in the GGUF file).
static std::string spelled(const std::string& bytes) {
    uint32_t byte_char[256];
    gpt2__bytes_to_unicode(byte_char);
    std::string out;
    for (unsigned char b : bytes) {
        const uint32_t cp = byte_char[b];
        if (cp < 0x80) out += (char)cp;
        else out += (char)(0xC0 | (cp >> 6)), out += (char)(0x80 | (cp & 0x3F)); // all below U+0800
    }
    return out;
}

static std::vector<uint8_t> char_model_file() {
    static const char* const chars[] = {"\n", " ", "\"", ",", ":", "[", "]", "{", "}", "-", ".", "\\", "_", "0", "1", "2", "5",
                                        "9", "a", "b", "c", "e", "f", "l", "n", "r", "s", "t", "u", "x", "y", "z", "A", "B",
                                        "\xc3\xa9" /* é */, "\xe4\xb8\x96" /* 世 */, "\xf0\x9f\x98\x80" /* 😀 */};
    TinyModelShape shape;
    shape.n_vocab = shape.n_vocab_rows = (int)(sizeof chars / sizeof chars[0]);
    GgufBuilder g = tiny_model(shape);
    g.set_strings("gpt2h.tokenizer.chars", std::vector<std::string>(std::begin(chars), std::end(chars)));
    return g.build();
}

// 256 byte tokens, merged tokens (JSON words, characters in 2 and 3 bytes, tokens that end or
// begin inside a character) and an end-of-text token.
static std::vector<uint8_t> bpe_model_file() {
    static const char* const merges[][2] = {
        {"t", "r"}, {"tr", "u"}, {"tru", "e"}, {"f", "a"}, {"fa", "l"}, {"fal", "s"}, {"fals", "e"}, {"n", "u"}, {"nu", "l"},
        {"nul", "l"}, {"\"", ":"}, {"\"", ","}, {"{", "\""}, {",", " "}, {" ", "a"}, {"a", "b"}, {"ab", "c"}, {"a", "a"},
        {"aa", "aa"}, {"1", "2"}, {"0", "."}, {"\n", "\n"}, {"\xc3", "\xa9"}, {"\xe4", "\xb8"}, {"\xe4\xb8", "\x96"},
        {"a", "\xc3"}, {"\xa9", "b"}, {"\xf0", "\x9f"}, {"\x98", "\x80"}};
    std::vector<std::string> tokens, merge_lines;
    for (int b = 0; b < 256; b++) tokens.push_back(spelled(std::string(1, (char)b)));
    for (const auto& m : merges) {
        merge_lines.push_back(spelled(m[0]) + " " + spelled(m[1]));
        tokens.push_back(spelled(std::string(m[0]) + m[1]));
    }
    tokens.push_back("<|endoftext|>");
    TinyModelShape shape;
    shape.vocabulary = false;
    shape.n_vocab = shape.n_vocab_rows = (int)tokens.size();
    GgufBuilder g = tiny_model(shape);
    g.set("tokenizer.ggml.model", std::string("gpt2"));
    g.set("tokenizer.ggml.tokens", tokens);
    g.set("tokenizer.ggml.merges", merge_lines);
    g.set("tokenizer.ggml.eos_token_id", (uint32_t)(tokens.size() - 1));
    return g.build();
}

struct Vocabulary {
    std::vector<uint8_t> file;
    gpt2_model* model = nullptr;
    gpt2_session* session = nullptr;
    int n_vocab = 0, eos = -1;
    explicit Vocabulary(std::vector<uint8_t> bytes) : file(std::move(bytes)) {
        gpt2_error err;
        if (gpt2_model_load_memory(file.data(), file.size(), nullptr, &model, &err) != GPT2_OK) {
            std::fprintf(stderr, "fuzz_grammar: %s\n", err.message);
            std::abort();
        }
        gpt2_session_params sp = gpt2_session_default_params();
        sp.n_threads = 1;
        sp.n_ctx = 8;
        if (gpt2_session_create(model, &sp, &session, nullptr) != GPT2_OK) std::abort();
        n_vocab = model->n_vocab;
        eos = model->tokenizer.eos;
    }
    std::string_view bytes(int32_t token) const { return gpt2__tokenizer_token_bytes(&model->tokenizer, token); }
};

static Vocabulary& vocabulary(int i) {
    static Vocabulary chars(char_model_file()), bpe(bpe_model_file());
    return i == 0 ? chars : bpe;
}

// Strict UTF-8 (no overlong forms, no surrogates, nothing above U+10FFFF): 2 valid, 1 valid but
// ending inside a character that more bytes could finish, 0 otherwise.
static int utf8_kind(const unsigned char* s, size_t n) {
    for (size_t i = 0; i < n;) {
        const unsigned char b = s[i];
        size_t len;
        unsigned char lo = 0x80, hi = 0xBF; // the second byte's range
        if (b < 0x80) len = 1;
        else if (b >= 0xC2 && b <= 0xDF) len = 2;
        else if (b >= 0xE0 && b <= 0xEF) len = 3, lo = b == 0xE0 ? 0xA0 : 0x80, hi = b == 0xED ? 0x9F : 0xBF;
        else if (b >= 0xF0 && b <= 0xF4) len = 4, lo = b == 0xF0 ? 0x90 : 0x80, hi = b == 0xF4 ? 0x8F : 0xBF;
        else return 0;
        for (size_t k = 1; k < len; k++) {
            if (i + k == n) return 1;
            const unsigned char c = s[i + k];
            if (c < (k == 1 ? lo : 0x80) || c > (k == 1 ? hi : 0xBF)) return 0;
        }
        i += len;
    }
    return 2;
}

// gpt2_grammar_match with its rules on the result: OK (*m set) or BAD_GRAMMAR (*m NONE).
static gpt2_result match(const gpt2_grammar* g, const char* text, size_t len, gpt2_match* m) {
    gpt2_error err;
    *m = GPT2_MATCH_COMPLETE;
    const gpt2_result r = gpt2_grammar_match(g, text, len, m, &err);
    if (r == GPT2_OK) {
        require(err.code == GPT2_OK, "a match that succeeds clears the error");
        require(*m == GPT2_MATCH_NONE || *m == GPT2_MATCH_PREFIX || *m == GPT2_MATCH_COMPLETE, "a match is NONE, PREFIX or COMPLETE");
        const int kind = utf8_kind(reinterpret_cast<const unsigned char*>(text), len);
        if (*m == GPT2_MATCH_COMPLETE) require(kind == 2, "a COMPLETE text is UTF-8");
        if (*m == GPT2_MATCH_PREFIX) require(kind >= 1, "a PREFIX text is UTF-8 up to an unfinished last character");
        return r;
    }
    require(r == GPT2_ERROR_BAD_GRAMMAR, "gpt2_grammar_match returns GPT2_OK or GPT2_ERROR_BAD_GRAMMAR");
    require(err.code == r, "the error's code is the result");
    require(*m == GPT2_MATCH_NONE, "a failed match says NONE");
    check_message(err);
    return r;
}

static gpt2_grammar* make_grammar(const gpt2_model* model, const std::string& gbnf, const char* root, gpt2_error* err) {
    static char sentinel;
    gpt2_grammar* g = reinterpret_cast<gpt2_grammar*>(&sentinel); // anything but NULL: from_gbnf must set it
    const gpt2_result r = gpt2_grammar_from_gbnf(model, gbnf.c_str(), root, &g, err);
    if (r == GPT2_OK) {
        require(g != nullptr && err->code == GPT2_OK, "a grammar that is made is returned");
    } else {
        require(r == GPT2_ERROR_BAD_GRAMMAR, "gpt2_grammar_from_gbnf returns GPT2_OK or GPT2_ERROR_BAD_GRAMMAR");
        require(g == nullptr, "a refused grammar leaves *out_grammar NULL");
        require(err->code == r, "the error's code is the result");
        check_message(*err);
    }
    return g;
}

// What one matcher fed a byte at a time says after each prefix of `text`: NONE from the first
// byte that leaves the grammar on; *overflow_at = the prefix length at which it became too
// ambiguous (SIZE_MAX: never; answers from there on are unknown). *heavy: it overflowed or
// needed many stack nodes, so that every further match of this text is slow.
static std::vector<gpt2_match> incremental(const gpt2_grammar* g, const std::string& text, size_t* overflow_at, bool* heavy) {
    std::vector<gpt2_match> out(text.size() + 1, GPT2_MATCH_NONE);
    *overflow_at = SIZE_MAX;
    *heavy = true;
    gpt2__grammar_matcher m;
    gpt2__matcher_begin(&m, g);
    if (m.gss.overflow) {
        *overflow_at = 0;
        return out;
    }
    out[0] = m.state.complete ? GPT2_MATCH_COMPLETE : GPT2_MATCH_PREFIX;
    bool compacted = false;
    for (size_t i = 0; i < text.size(); i++) {
        bool alive = false;
        gpt2_error err;
        const size_t nodes = m.gss.nodes.size();
        if (gpt2__matcher_feed(&m, std::string_view(text.data() + i, 1), &alive, &err) != GPT2_OK) {
            require(err.code == GPT2_ERROR_BAD_GRAMMAR, "a matcher fails with GPT2_ERROR_BAD_GRAMMAR only");
            check_message(err);
            *overflow_at = i + 1;
            return out;
        }
        compacted = compacted || m.gss.nodes.size() < nodes; // it passed GPT2__GSS_COMPACT_AT nodes
        if (!alive) break;
        out[i + 1] = m.state.complete && m.state.need == 0 ? GPT2_MATCH_COMPLETE : GPT2_MATCH_PREFIX;
    }
    *heavy = compacted || m.gss.nodes.size() > kHeavyNodes;
    return out;
}

// gpt2_grammar_match over a sample of the text's prefixes, against the incremental answers.
// Returns whether the text is heavy (see incremental).
static bool check_prefixes(const gpt2_grammar* g, const std::string& text) {
    size_t overflow_at;
    bool heavy;
    const std::vector<gpt2_match> inc = incremental(g, text, &overflow_at, &heavy);
    size_t dead_at = text.size() + 1; // the shortest NONE prefix
    for (size_t p = 0; p <= text.size() && p < overflow_at; p++)
        if (inc[p] == GPT2_MATCH_NONE) {
            dead_at = p;
            break;
        }
    std::vector<size_t> cuts;
    const size_t parts = heavy ? 1 : 8;
    for (size_t k = 0; k <= parts; k++) cuts.push_back(text.size() * k / parts);
    for (size_t p : {dead_at - 1, dead_at, overflow_at - 1, overflow_at})
        if (p <= text.size()) cuts.push_back(p);
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    bool dead = false, too_ambiguous = false;
    for (size_t p : cuts) {
        gpt2_match m;
        const gpt2_result r = match(g, text.data(), p, &m);
        if (too_ambiguous) require(r == GPT2_ERROR_BAD_GRAMMAR, "a text whose prefix is too ambiguous is too ambiguous");
        if (dead) require(r == GPT2_OK && m == GPT2_MATCH_NONE, "a text whose prefix is NONE is NONE (prefix closure)");
        if (r != GPT2_OK) {
            too_ambiguous = true;
            continue;
        }
        if (m == GPT2_MATCH_NONE) dead = true;
        if (p < overflow_at) require(m == inc[p], "gpt2_grammar_match agrees with a matcher fed a byte at a time");
        else require(false, "a text is too ambiguous when a matcher fed a byte at a time found a prefix too ambiguous");
    }
    return heavy;
}

// The mask after `text` (gpt2__matcher_mask, fed a byte at a time, so that its cache serves states
// met before) against gpt2_grammar_match of the text with each token, at `checks` prefixes.
static void check_masks(const Vocabulary& v, const gpt2_grammar* g, const std::string& text, size_t checks) {
    gpt2__grammar_matcher m;
    gpt2__matcher_begin(&m, g);
    if (m.gss.overflow) return;
    std::vector<uint32_t> allowed(((size_t)v.n_vocab + 31) / 32);
    const size_t n = std::min<size_t>(text.size(), kMaskText);
    std::string with;
    for (size_t p = 0; p <= n; p++) {
        gpt2_error err;
        if (gpt2__matcher_mask(&m, allowed.data(), &err) != GPT2_OK) {
            require(err.code == GPT2_ERROR_BAD_GRAMMAR, "a mask fails with GPT2_ERROR_BAD_GRAMMAR only");
            check_message(err);
            return;
        }
        const bool verify = p == 0 || p == n || (checks > 2 && p % (n / (checks - 1) + 1) == 0);
        if (verify) {
            gpt2_match here;
            if (match(g, text.data(), p, &here) != GPT2_OK) return;
            require(here != GPT2_MATCH_NONE, "a matcher that is alive is at a text that is not NONE");
            for (int32_t t = 0; t < v.n_vocab; t++) {
                const bool bit = (allowed[(size_t)t >> 5] >> (t & 31)) & 1;
                if (t == v.eos) {
                    require(bit == (here == GPT2_MATCH_COMPLETE), "the mask allows the end-of-text token exactly at a COMPLETE text");
                    continue;
                }
                with.assign(text.data(), p);
                with.append(v.bytes(t));
                gpt2_match after;
                if (match(g, with.data(), with.size(), &after) != GPT2_OK) continue;
                require(bit == (after != GPT2_MATCH_NONE), "the mask allows exactly the tokens after which the text is not NONE");
            }
        }
        if (p == n) break;
        bool alive = false;
        if (gpt2__matcher_feed(&m, std::string_view(text.data() + p, 1), &alive, &err) != GPT2_OK) {
            require(err.code == GPT2_ERROR_BAD_GRAMMAR, "a matcher fails with GPT2_ERROR_BAD_GRAMMAR only");
            check_message(err);
            return;
        }
        if (!alive) return;
    }
}

static int collect(void* user, int32_t, const char* text, size_t len) {
    static_cast<std::string*>(user)->append(text ? text : "", len);
    return 0;
}

static void check_generation(Vocabulary& v, const gpt2_grammar* g, const std::string& text, uint64_t seed) {
    gpt2_session_reset(v.session);
    const int32_t prompt = text.empty() ? 0 : (int32_t)((unsigned char)text[0] % (unsigned)v.n_vocab);
    gpt2_generate_params p = gpt2_generate_default_params();
    p.max_new_tokens = kNewTokens;
    p.seed = seed;
    p.temperature = (seed & 1) ? 0.0f : 1.5f;
    p.grammar = g;
    gpt2_match said = GPT2_MATCH_NONE;
    p.grammar_match = &said;
    std::string delivered;
    p.on_token = collect;
    p.user = &delivered;
    int32_t tokens[kNewTokens];
    size_t n = 0;
    gpt2_error err;
    const gpt2_result r = gpt2_generate(v.session, &prompt, 1, &p, tokens, kNewTokens, &n, &err);
    if (r != GPT2_OK) {
        require(r == GPT2_ERROR_BAD_GRAMMAR, "gpt2_generate with a grammar returns GPT2_OK or GPT2_ERROR_BAD_GRAMMAR");
        require(err.code == r, "the error's code is the result");
        check_message(err);
        return;
    }
    require(n >= 1 && n <= kNewTokens, "gpt2_generate makes 1 to max_new_tokens tokens");
    std::string bytes;
    bool at_eos = false;
    for (size_t i = 0; i < n; i++) {
        require(tokens[i] >= 0 && tokens[i] < v.n_vocab, "a generated token is in the vocabulary");
        require(!at_eos, "nothing follows the end-of-text token");
        if (tokens[i] == v.eos) at_eos = true;
        else bytes.append(v.bytes(tokens[i]));
    }
    require(delivered == bytes, "on_token receives the generated text");
    gpt2_match m;
    if (match(g, bytes.data(), bytes.size(), &m) != GPT2_OK) return;
    require(m != GPT2_MATCH_NONE, "generated text is not NONE");
    require(m == said, "grammar_match says what gpt2_grammar_match says of the generated text");
    if (at_eos) require(m == GPT2_MATCH_COMPLETE, "the end-of-text token comes at a COMPLETE text");
    if (n < kNewTokens && !at_eos) { // ended at a sentence that nothing extends
        require(m == GPT2_MATCH_COMPLETE, "a generation that ends early ends at a COMPLETE text");
        std::string with;
        for (int32_t t = 0; t < v.n_vocab; t++) {
            if (t == v.eos) continue;
            with = bytes;
            with.append(v.bytes(t));
            gpt2_match after;
            if (match(g, with.data(), with.size(), &after) == GPT2_OK)
                require(after == GPT2_MATCH_NONE, "a generation that ends early ends at a text that nothing extends");
        }
    }
}

// Repetitions are expanded (x{0,n} is n rules), and the library lets a grammar grow to
// GPT2__GRAMMAR_MAX_ELEMS elements, which takes seconds to build under the sanitizers: inputs
// whose numbers add up past kRepeatBudget are skipped. Numbers above GPT2__GRAMMAR_MAX_REPEAT
// are refused as they are read and do not count.
static bool within_repeat_budget(const std::string& gbnf) {
    uint64_t total = 0;
    for (size_t i = 0; i < gbnf.size();) {
        if (gbnf[i] < '0' || gbnf[i] > '9') {
            i++;
            continue;
        }
        uint64_t v = 0;
        for (; i < gbnf.size() && gbnf[i] >= '0' && gbnf[i] <= '9'; i++) v = std::min<uint64_t>(v * 10 + (uint64_t)(gbnf[i] - '0'), 1u << 30);
        if (v <= GPT2__GRAMMAR_MAX_REPEAT) total += v;
    }
    return total <= kRepeatBudget;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size > kMaxInput) return 0;
    const char* in = reinterpret_cast<const char*>(data);
    const char* end = in + size;
    const char* nul = static_cast<const char*>(std::memchr(in, '\0', size));
    const std::string gbnf(in, nul ? nul : end);
    if (!within_repeat_budget(gbnf)) return 0;
    std::string text, root;
    bool has_root = false;
    if (nul) {
        const char* t = nul + 1;
        const char* nul2 = static_cast<const char*>(std::memchr(t, '\0', (size_t)(end - t)));
        text.assign(t, nul2 ? nul2 : end);
        if (nul2) {
            has_root = true;
            const char* r = nul2 + 1;
            const char* nul3 = static_cast<const char*>(std::memchr(r, '\0', (size_t)(end - r)));
            root.assign(r, std::min<size_t>((size_t)((nul3 ? nul3 : end) - r), kMaxRoot));
        }
    }
    if (text.size() > kMaxText) text.resize(kMaxText);
    const char* root_arg = has_root ? root.c_str() : nullptr;

    // Both vocabularies read the grammar alike: the GBNF does not depend on the tokens; but the
    // character vocabulary cannot write every character (the BPE one writes every byte).
    gpt2_error err[2];
    gpt2_grammar* g[2];
    for (int i = 0; i < 2; i++) g[i] = make_grammar(vocabulary(i).model, gbnf, root_arg, &err[i]);
    const bool unwritable = !g[0] && g[1] && std::strstr(err[0].message, "vocabulary cannot write any text") != nullptr;
    if (!unwritable) {
        require((g[0] == nullptr) == (g[1] == nullptr), "both vocabularies accept or refuse a grammar");
        require(std::strcmp(err[0].message, err[1].message) == 0, "both vocabularies refuse a grammar with the same message");
    }
    if (has_root) { // the start rule is the only difference from root NULL (the BPE vocabulary writes any rule)
        gpt2_error plain_err;
        gpt2_grammar* plain = make_grammar(vocabulary(1).model, gbnf, nullptr, &plain_err);
        if (root == "root") require(std::strcmp(plain_err.message, err[1].message) == 0, "root \"root\" is root NULL");
        else if ((plain == nullptr) != (g[1] == nullptr))
            require(std::strstr(plain ? err[1].message : plain_err.message, "no rule named") != nullptr,
                    "a start rule changes nothing but which rule starts");
        gpt2_grammar_free(plain);
    }
    if (g[1]) {
        // A heavy text (see incremental) gets the few checks that matter most: a match takes up
        // to GPT2__GSS_MAX_NODES stack nodes, seconds under the sanitizers.
        const bool heavy = check_prefixes(g[0] ? g[0] : g[1], text);
        gpt2_match m0, m1;
        if (!heavy && unwritable && match(g[1], text.data(), text.size(), &m1) == GPT2_OK && m1 == GPT2_MATCH_COMPLETE) {
            size_t n = 0;
            require(gpt2_tokenize(vocabulary(0).model, text.data(), text.size(), 0, nullptr, 0, &n, nullptr) != GPT2_OK,
                    "a sentence of a grammar the vocabulary cannot write holds a character it lacks");
        } else if (!heavy && g[0] && match(g[0], text.data(), text.size(), &m0) == GPT2_OK && match(g[1], text.data(), text.size(), &m1) == GPT2_OK) {
            require(m0 == m1, "both vocabularies' grammars match a text alike");
        }
        const uint64_t seed = gpt2__hash64(data, size);
        for (int i = 0, checked = 0; i < 2 && checked < (heavy ? 1 : 2); i++) {
            if (!g[i]) continue;
            checked++;
            if (!heavy) check_masks(vocabulary(i), g[i], text, i == 0 ? 4 : 2);
            check_generation(vocabulary(i), g[i], text, seed);
        }
    }
    gpt2_grammar_free(g[0]);
    gpt2_grammar_free(g[1]);
    return 0;
}
