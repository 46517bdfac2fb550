// A session's state: save and load, copy (fork), truncate (rewind), the discard context policy
// and abort_fn. The reference for "continues exactly" is a session that evaluated the same
// tokens from scratch.
#include "helpers.h"
#include <doctest/doctest.h>
#include <cstring>
#include <string>
#include <fstream>
#include <iterator>

// The state's checksum as src/state.h documents it (64-bit FNV-1a over 8-byte words, then the
// tail bytes, then a mixer), written again here to forge states of another version.
static uint64_t state_hash(const uint8_t* p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; n >= 8; p += 8, n -= 8) {
        uint64_t w;
        std::memcpy(&w, p, 8);
        h = (h ^ w) * 0x100000001b3ull;
    }
    for (; n; p++, n--) h = (h ^ *p) * 0x100000001b3ull;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    return h ^ (h >> 33);
}

static std::vector<int32_t> some_tokens(size_t n, int n_vocab, int salt = 0) {
    std::vector<int32_t> ids(n);
    for (size_t i = 0; i < n; i++) ids[i] = (int32_t)((i * 31 + 7 + (size_t)salt * 13) % (size_t)n_vocab);
    return ids;
}

static std::vector<uint8_t> save(gpt2_session* s) {
    size_t n = 0;
    REQUIRE(gpt2_session_save(s, nullptr, 0, &n, nullptr) == GPT2_OK);
    std::vector<uint8_t> bytes(n);
    gpt2_error err{};
    REQUIRE_MESSAGE(gpt2_session_save(s, bytes.data(), bytes.size(), &n, &err) == GPT2_OK, err.message);
    REQUIRE(n == bytes.size());
    return bytes;
}

static std::vector<float> logits_of(gpt2_session* s, int n_vocab) {
    const float* l = gpt2_session_logits(s);
    REQUIRE(l);
    return std::vector<float>(l, l + n_vocab);
}

static std::vector<int32_t> tokens_of(gpt2_session* s) {
    const int32_t* t = gpt2_session_tokens(s);
    return std::vector<int32_t>(t, t + gpt2_session_n_tokens(s));
}

// Greedy and seeded continuations of `a` equal those of `b`, and so do the logits on the way.
static void check_continues_alike(gpt2_session* a, gpt2_session* b, int n_vocab, float tolerance) {
    CHECK(tokens_of(a) == tokens_of(b));
    CHECK(max_abs_diff(logits_of(a, n_vocab).data(), logits_of(b, n_vocab).data(), (size_t)n_vocab) <= tolerance);
    const std::vector<int32_t> seeded_a = generate(a, {}, 12, 0.9f, 20, 42), seeded_b = generate(b, {}, 12, 0.9f, 20, 42);
    CHECK(seeded_a == seeded_b);
    CHECK(max_abs_diff(logits_of(a, n_vocab).data(), logits_of(b, n_vocab).data(), (size_t)n_vocab) <= tolerance);
    CHECK(generate(a, {}, 12, 0.0f, 0, 0) == generate(b, {}, 12, 0.0f, 0, 0));
}

TEST_CASE("a saved session loads into a new one and continues as the session that evaluated from scratch") {
    Model m(test_model("shakespeare_char.gguf"));
    REQUIRE(m.model);
    const int V = m.info().n_vocab;
    for (int kv_f16 : {0, 1}) {
        CAPTURE(kv_f16);
        Session original(m, 1, 0, kv_f16), restored(m, 1, 0, kv_f16), scratch(m, 1, 0, kv_f16);
        const std::vector<int32_t> prompt = some_tokens(20, V);
        REQUIRE(gpt2_session_eval(original.session, prompt.data(), prompt.size(), nullptr) == GPT2_OK);
        const std::vector<int32_t> answer = generate(original.session, {}, 9, 0.8f, 0, 5);
        const std::vector<uint8_t> state = save(original.session);
        gpt2_error err{};
        REQUIRE_MESSAGE(gpt2_session_load(restored.session, state.data(), state.size(), &err) == GPT2_OK, err.message);
        CHECK(logits_of(restored.session, V) == logits_of(original.session, V)); // stored, not recomputed
        // evaluated as the original was (the prompt at once, then a token at a time), so that an f16
        // cache rounds the same values
        REQUIRE(gpt2_session_eval(scratch.session, prompt.data(), prompt.size(), nullptr) == GPT2_OK);
        for (int32_t id : answer) REQUIRE(gpt2_session_eval(scratch.session, &id, 1, nullptr) == GPT2_OK);
        check_continues_alike(restored.session, scratch.session, V, 1e-5f);
    }
}

TEST_CASE("a state holds the cache rows in use only, in the session's cache type") {
    Model m(test_model("shakespeare_char.gguf"));
    REQUIRE(m.model);
    const gpt2_model_info info = m.info();
    Session f32(m, 1, 0, 0), f16(m, 1, 0, 1);
    const std::vector<int32_t> ids = some_tokens(10, info.n_vocab);
    REQUIRE(gpt2_session_eval(f32.session, ids.data(), 10, nullptr) == GPT2_OK);
    REQUIRE(gpt2_session_eval(f16.session, ids.data(), 10, nullptr) == GPT2_OK);
    const size_t row = 2 * (size_t)info.n_layer * info.n_embd; // one token's keys and values, in values
    const size_t a = save(f32.session).size(), b = save(f16.session).size();
    CHECK(a - b == 10 * row * 2);
    REQUIRE(gpt2_session_eval(f32.session, ids.data(), 1, nullptr) == GPT2_OK);
    CHECK(save(f32.session).size() - a == row * 4 + 4); // one more token: its rows and its id
}

TEST_CASE("a state saved with one cache type loads into a session of the other") {
    Model m(test_model("shakespeare_char.gguf"));
    REQUIRE(m.model);
    const int V = m.info().n_vocab;
    const std::vector<int32_t> ids = some_tokens(16, V);
    for (int from_f16 : {0, 1}) {
        CAPTURE(from_f16);
        Session from(m, 1, 0, from_f16), to(m, 1, 0, !from_f16), scratch(m, 1, 0, !from_f16);
        REQUIRE(gpt2_session_eval(from.session, ids.data(), ids.size(), nullptr) == GPT2_OK);
        REQUIRE(gpt2_session_eval(scratch.session, ids.data(), ids.size(), nullptr) == GPT2_OK);
        const std::vector<uint8_t> state = save(from.session);
        REQUIRE(gpt2_session_load(to.session, state.data(), state.size(), nullptr) == GPT2_OK);
        // f16 rows of the cache round the keys and values: as evaluating with an f16 cache would
        REQUIRE(gpt2_session_eval(to.session, ids.data(), 1, nullptr) == GPT2_OK);
        REQUIRE(gpt2_session_eval(scratch.session, ids.data(), 1, nullptr) == GPT2_OK);
        CHECK(max_abs_diff(logits_of(to.session, V).data(), logits_of(scratch.session, V).data(), (size_t)V) <= 2e-3f);
    }
}

TEST_CASE("a copied session is a fork: both continue as the original would") {
    Model m(test_model("shakespeare_char.gguf"));
    REQUIRE(m.model);
    const int V = m.info().n_vocab;
    for (int kv_f16 : {0, 1}) {
        CAPTURE(kv_f16);
        Session preamble(m, 1, 0, kv_f16), fork(m, 2, 0, kv_f16), scratch(m, 1, 0, kv_f16), scratch2(m, 1, 0, kv_f16);
        const std::vector<int32_t> ids = some_tokens(30, V);
        REQUIRE(gpt2_session_eval(preamble.session, ids.data(), ids.size(), nullptr) == GPT2_OK);
        gpt2_error err{};
        REQUIRE_MESSAGE(gpt2_session_copy(fork.session, preamble.session, &err) == GPT2_OK, err.message);
        REQUIRE(gpt2_session_eval(scratch.session, ids.data(), ids.size(), nullptr) == GPT2_OK);
        REQUIRE(gpt2_session_eval(scratch2.session, ids.data(), ids.size(), nullptr) == GPT2_OK);
        check_continues_alike(fork.session, scratch.session, V, 1e-5f);
        check_continues_alike(preamble.session, scratch2.session, V, 1e-5f); // the fork took nothing from the original
    }
}

TEST_CASE("truncating rewinds: the logits and the continuation are those of the shorter context") {
    Model m(test_model("shakespeare_char.gguf"));
    REQUIRE(m.model);
    const int V = m.info().n_vocab;
    for (int kv_f16 : {0, 1}) {
        CAPTURE(kv_f16);
        Session s(m, 2, 0, kv_f16), scratch(m, 2, 0, kv_f16);
        const std::vector<int32_t> ids = some_tokens(25, V);
        REQUIRE(gpt2_session_eval(s.session, ids.data(), ids.size(), nullptr) == GPT2_OK);
        generate(s.session, {}, 10, 0.8f, 0, 3); // an answer to undo
        gpt2_error err{};
        REQUIRE_MESSAGE(gpt2_session_truncate(s.session, 25, &err) == GPT2_OK, err.message);
        REQUIRE(gpt2_session_eval(scratch.session, ids.data(), ids.size(), nullptr) == GPT2_OK);
        // The recomputed token's row comes from a one-token pass, scratch's from the prompt's
        // pass: sums in another order, which an f16 cache can round a half-ulp apart (as for the
        // discard policy's recompute below; 1.1e-5 on an AVX2 host, Zen 3).
        check_continues_alike(s.session, scratch.session, V, kv_f16 ? 1e-3f : 1e-5f);
    }
}

TEST_CASE("truncate to the whole context changes nothing; to 0 resets; past the end is refused") {
    Model m(test_model("shakespeare_char.gguf"));
    REQUIRE(m.model);
    const int V = m.info().n_vocab;
    Session s(m, 1);
    const std::vector<int32_t> ids = some_tokens(8, V);
    REQUIRE(gpt2_session_eval(s.session, ids.data(), ids.size(), nullptr) == GPT2_OK);
    const std::vector<float> before = logits_of(s.session, V);
    REQUIRE(gpt2_session_truncate(s.session, 8, nullptr) == GPT2_OK);
    CHECK(logits_of(s.session, V) == before);
    gpt2_error err{};
    CHECK(gpt2_session_truncate(s.session, 9, &err) == GPT2_ERROR_INVALID_ARGUMENT);
    CHECK_ERROR(err, GPT2_ERROR_INVALID_ARGUMENT, "n_tokens is 9 but the context holds 8");
    CHECK(tokens_of(s.session) == ids);
    REQUIRE(gpt2_session_truncate(s.session, 0, nullptr) == GPT2_OK);
    CHECK(gpt2_session_n_tokens(s.session) == 0);
    CHECK(gpt2_session_logits(s.session) == nullptr);
}

TEST_CASE("the size query, a small buffer and an empty session") {
    Model m(test_model("shakespeare_char.gguf"));
    REQUIRE(m.model);
    Session s(m, 1), other(m, 1);
    size_t n = 0;
    REQUIRE(gpt2_session_save(s.session, nullptr, 0, &n, nullptr) == GPT2_OK);
    std::vector<uint8_t> small(n - 1);
    gpt2_error err{};
    CHECK(gpt2_session_save(s.session, small.data(), small.size(), &n, &err) == GPT2_ERROR_INVALID_ARGUMENT);
    CHECK_ERROR(err, GPT2_ERROR_INVALID_ARGUMENT, ("buffer of " + std::to_string(small.size()) + " bytes; the state needs " + std::to_string(n)).c_str());
    CHECK(gpt2_session_save(s.session, nullptr, 0, nullptr, &err) == GPT2_ERROR_INVALID_ARGUMENT);
    const std::vector<uint8_t> empty = save(s.session);
    const int32_t one = 3;
    REQUIRE(gpt2_session_eval(other.session, &one, 1, nullptr) == GPT2_OK);
    REQUIRE(gpt2_session_load(other.session, empty.data(), empty.size(), nullptr) == GPT2_OK);
    CHECK(gpt2_session_n_tokens(other.session) == 0);
    CHECK(gpt2_session_logits(other.session) == nullptr);
}

// The session `s` still holds `ids` and continues as before (a failed load changed nothing).
static void check_unchanged(gpt2_session* s, const std::vector<int32_t>& ids, const std::vector<float>& logits, int V) {
    CHECK(tokens_of(s) == ids);
    CHECK(logits_of(s, V) == logits);
}

TEST_CASE("a damaged, truncated, foreign or too long state is refused with its reason and changes nothing") {
    Model m(test_model("shakespeare_char.gguf"));
    REQUIRE(m.model);
    const int V = m.info().n_vocab;
    Session source(m, 1), target(m, 1);
    const std::vector<int32_t> ids = some_tokens(12, V), target_ids = some_tokens(5, V, 1);
    REQUIRE(gpt2_session_eval(source.session, ids.data(), ids.size(), nullptr) == GPT2_OK);
    REQUIRE(gpt2_session_eval(target.session, target_ids.data(), target_ids.size(), nullptr) == GPT2_OK);
    const std::vector<float> target_logits = logits_of(target.session, V);
    const std::vector<uint8_t> state = save(source.session);
    gpt2_error err{};

    SUBCASE("every truncation") {
        for (size_t n = 0; n < state.size(); n++) {
            CAPTURE(n);
            REQUIRE(gpt2_session_load(target.session, state.data(), n, &err) == GPT2_ERROR_BAD_STATE);
            CHECK(std::string(err.message).find(n < 8 || n >= 76 ? "truncated" : "") != std::string::npos);
        }
        check_unchanged(target.session, target_ids, target_logits, V);
    }
    SUBCASE("a flipped bit in every byte") {
        for (size_t i = 0; i < state.size(); i++) {
            CAPTURE(i);
            std::vector<uint8_t> bad = state;
            bad[i] ^= (uint8_t)(1u << (i % 8));
            REQUIRE(gpt2_session_load(target.session, bad.data(), bad.size(), &err) != GPT2_OK);
            const std::string message = err.message;
            CHECK((message.find("damaged") != std::string::npos || message.find("magic") != std::string::npos || message.find("truncated") != std::string::npos));
        }
        check_unchanged(target.session, target_ids, target_logits, V);
    }
    SUBCASE("another version") {
        std::vector<uint8_t> other = state;
        other[8] = 2; // the version, then both checksums made right again
        uint64_t h = state_hash(other.data(), 68);
        std::memcpy(other.data() + 68, &h, 8);
        h = state_hash(other.data(), other.size() - 8);
        std::memcpy(other.data() + other.size() - 8, &h, 8);
        CHECK(gpt2_session_load(target.session, other.data(), other.size(), &err) == GPT2_ERROR_UNSUPPORTED);
        CHECK_ERROR(err, GPT2_ERROR_UNSUPPORTED, "session state version 2; this build reads version 1");
        check_unchanged(target.session, target_ids, target_logits, V);
    }
    SUBCASE("a model whose weights differ in one byte") {
        std::ifstream f(test_model("shakespeare_char.gguf"), std::ios::binary);
        std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
        bytes[bytes.size() - 5] ^= 1; // inside the last tensor
        Loaded changed(bytes);
        REQUIRE(changed.model);
        Session foreign(changed.model, 1);
        REQUIRE(gpt2_session_load(foreign.session, state.data(), state.size(), &err) == GPT2_ERROR_INVALID_ARGUMENT);
        CHECK(std::string(err.message).find("belongs to another model") != std::string::npos);
        CHECK(gpt2_session_n_tokens(foreign.session) == 0);
        CHECK(gpt2_session_copy(foreign.session, source.session, &err) == GPT2_ERROR_INVALID_ARGUMENT);
        CHECK_ERROR(err, GPT2_ERROR_INVALID_ARGUMENT, "dst and src are sessions of different models");
    }
    SUBCASE("a session whose context is shorter than the saved tokens") {
        Session short_ctx(m, 1, 8);
        REQUIRE(gpt2_session_load(short_ctx.session, state.data(), state.size(), &err) == GPT2_ERROR_CONTEXT_FULL);
        CHECK_ERROR(err, GPT2_ERROR_CONTEXT_FULL, "session state holds 12 tokens but this session's context is 8");
        CHECK(gpt2_session_copy(short_ctx.session, source.session, &err) == GPT2_ERROR_CONTEXT_FULL);
        CHECK(gpt2_session_n_tokens(short_ctx.session) == 0);
    }
    SUBCASE("not a state at all") {
        const std::string text = "this is a save game, not a session state";
        CHECK(gpt2_session_load(target.session, text.data(), text.size(), &err) == GPT2_ERROR_BAD_STATE);
        CHECK_ERROR(err, GPT2_ERROR_BAD_STATE, "not a gpt2.h session state");
        check_unchanged(target.session, target_ids, target_logits, V);
    }
}

TEST_CASE("the discard policy keeps n_keep tokens and drops n_discard at once; its logits are those of its tokens") {
    Model m(test_model("shakespeare_char.gguf"));
    REQUIRE(m.model);
    const gpt2_model_info info = m.info(); // n_ctx 64
    const int V = info.n_vocab;
    gpt2_session_params p = gpt2_session_default_params();
    p.n_threads = 1;
    p.context_policy = GPT2_CONTEXT_DISCARD;
    p.n_keep = 10;
    p.n_discard = 20;
    gpt2_session* s = nullptr;
    REQUIRE(gpt2_session_create(m.model, &p, &s, nullptr) == GPT2_OK);
    const std::vector<int32_t> ids = some_tokens(64, V);
    REQUIRE(gpt2_session_eval(s, ids.data(), ids.size(), nullptr) == GPT2_OK);
    const int32_t next = 5;
    REQUIRE(gpt2_session_eval(s, &next, 1, nullptr) == GPT2_OK);
    std::vector<int32_t> expected(ids.begin(), ids.begin() + 10);
    expected.insert(expected.end(), ids.begin() + 30, ids.end());
    expected.push_back(next);
    REQUIRE(tokens_of(s) == expected); // 10 kept, 20 dropped, 34 + 1 after
    Session scratch(m, 1);
    REQUIRE(gpt2_session_eval(scratch.session, expected.data(), expected.size(), nullptr) == GPT2_OK);
    CHECK(max_abs_diff(logits_of(s, V).data(), logits_of(scratch.session, V).data(), (size_t)V) <= 1e-5f);
    gpt2_session_free(s);
}

TEST_CASE("tokens beyond the context are cropped as the policy says, and the model's log says how many went") {
    struct Warnings {
        std::vector<std::string> lines;
        static void record(void* user, gpt2_log_level level, const char* message) {
            if (level == GPT2_LOG_WARNING) static_cast<Warnings*>(user)->lines.push_back(message);
        }
    } warnings;
    gpt2_model_params mp = gpt2_model_default_params();
    mp.log = Warnings::record;
    mp.log_user = &warnings;
    Model m(test_model("shakespeare_char.gguf"), mp);
    REQUIRE(m.model);
    warnings.lines.clear(); // what the load itself says (an AMX refusal on Linux before 5.16) is not the context's
    const int V = m.info().n_vocab;
    gpt2_session_params p = gpt2_session_default_params();
    p.n_threads = 1;
    p.n_ctx = 32;
    gpt2_session* exact = nullptr;
    REQUIRE(gpt2_session_create(m.model, &p, &exact, nullptr) == GPT2_OK);
    const std::vector<int32_t> ids = some_tokens(40, V);
    REQUIRE(gpt2_session_eval(exact, ids.data(), 30, nullptr) == GPT2_OK);
    CHECK(warnings.lines.empty()); // fits: nothing said
    REQUIRE(gpt2_session_eval(exact, ids.data(), ids.size(), nullptr) == GPT2_OK);
    CHECK(tokens_of(exact) == std::vector<int32_t>(ids.end() - 32, ids.end()));
    REQUIRE(warnings.lines.size() == 1);
    CHECK(warnings.lines[0] == "40 new tokens are more than the context holds (n_ctx 32): the first 8 of them were dropped");

    p.context_policy = GPT2_CONTEXT_DISCARD;
    p.n_keep = 4;
    gpt2_session* discard = nullptr;
    REQUIRE(gpt2_session_create(m.model, &p, &discard, nullptr) == GPT2_OK);
    REQUIRE(gpt2_session_eval(discard, ids.data(), 2, nullptr) == GPT2_OK); // 2 of the 4 kept are old
    REQUIRE(gpt2_session_eval(discard, ids.data() + 2, 38, nullptr) == GPT2_OK);
    CHECK(tokens_of(discard).size() == 32); // 2 old + 2 new among the first 4, then the last 28 new
    REQUIRE(warnings.lines.size() == 2);
    CHECK(warnings.lines[1] == "38 new tokens are more than the context holds beside the 2 it keeps (n_ctx 32, n_keep 4): 8 of them were dropped");
    gpt2_session_free(exact);
    gpt2_session_free(discard);
}

TEST_CASE("over a long chat the discard policy's logits stay those of its tokens evaluated from scratch") {
    Model m(test_model("shakespeare_char.gguf"));
    REQUIRE(m.model);
    const int V = m.info().n_vocab;
    for (int kv_f16 : {0, 1}) {
        CAPTURE(kv_f16);
        gpt2_session_params p = gpt2_session_default_params();
        p.n_threads = 2;
        p.kv_f16 = kv_f16;
        p.context_policy = GPT2_CONTEXT_DISCARD;
        p.n_keep = 6; // n_discard 0: half of the other 58
        gpt2_session* s = nullptr;
        REQUIRE(gpt2_session_create(m.model, &p, &s, nullptr) == GPT2_OK);
        const std::vector<int32_t> ids = some_tokens(150, V);
        size_t fewest = 64;
        for (size_t i = 0; i < ids.size(); i++) {
            REQUIRE(gpt2_session_eval(s, &ids[i], 1, nullptr) == GPT2_OK);
            fewest = std::min(fewest, i >= 64 ? gpt2_session_n_tokens(s) : fewest);
            if (i % 16 != 15) continue;
            const std::vector<int32_t> now = tokens_of(s);
            CHECK(std::vector<int32_t>(now.begin(), now.begin() + 6) == std::vector<int32_t>(ids.begin(), ids.begin() + 6));
            Session scratch(m, 1, 0, kv_f16);
            REQUIRE(gpt2_session_eval(scratch.session, now.data(), now.size(), nullptr) == GPT2_OK);
            CHECK(max_abs_diff(logits_of(s, V).data(), logits_of(scratch.session, V).data(), (size_t)V) <= (kv_f16 ? 1e-3f : 1e-5f));
        }
        CHECK(fewest == 64 - 29 + 1); // a discard drops 29 at once: 35 tokens and the new one
        gpt2_session_free(s);
    }
}

struct AbortAfter {
    int polls_left;
};

static int abort_after(void* user) {
    AbortAfter* a = (AbortAfter*)user;
    return a->polls_left-- <= 0;
}

TEST_CASE("abort_fn ends eval and generate with GPT2_ERROR_ABORTED and leaves the session as before the call") {
    Model m(test_model("shakespeare_char.gguf"));
    REQUIRE(m.model);
    const gpt2_model_info info = m.info();
    const int V = info.n_vocab;
    AbortAfter abort{1 << 30};
    gpt2_session_params p = gpt2_session_default_params();
    p.n_threads = 2;
    p.abort_fn = abort_after;
    p.abort_user = &abort;
    gpt2_session* s = nullptr;
    REQUIRE(gpt2_session_create(m.model, &p, &s, nullptr) == GPT2_OK);
    Session scratch(m, 2);
    const std::vector<int32_t> ids = some_tokens(50, V), more = some_tokens(30, V, 2);
    REQUIRE(gpt2_session_eval(s, ids.data(), ids.size(), nullptr) == GPT2_OK);
    REQUIRE(gpt2_session_eval(scratch.session, ids.data(), ids.size(), nullptr) == GPT2_OK);
    const std::vector<float> before = logits_of(s, V);
    gpt2_error err{};
    for (int after : {0, 1, info.n_layer - 1}) {
        CAPTURE(after);
        abort.polls_left = after; // 30 more tokens overflow n_ctx 64: the aborted pass recomputes the window
        CHECK(gpt2_session_eval(s, more.data(), more.size(), &err) == GPT2_ERROR_ABORTED);
        CHECK_ERROR(err, GPT2_ERROR_ABORTED, "aborted by abort_fn");
        check_unchanged(s, ids, before, V);
        abort.polls_left = 2 * info.n_layer + 3; // the prompt's pass, then a few tokens
        size_t n_generated = 99;
        std::vector<int32_t> out(20);
        gpt2_generate_params gp = gpt2_generate_default_params();
        gp.max_new_tokens = 20;
        CHECK(gpt2_generate(s, more.data(), 5, &gp, out.data(), out.size(), &n_generated, &err) == GPT2_ERROR_ABORTED);
        CHECK(n_generated == 0);
        check_unchanged(s, ids, before, V);
    }
    abort.polls_left = 1 << 30;
    check_continues_alike(s, scratch.session, V, 1e-5f);
    gpt2_session_free(s);
}

TEST_CASE("bad context policy parameters are refused with the field and its range") {
    Model m(test_model("shakespeare_char.gguf"));
    REQUIRE(m.model);
    struct Case {
        int policy, n_keep, n_discard;
        const char* message;
    } cases[] = {
        {7, 0, 0, "context_policy is 7; expected GPT2_CONTEXT_EXACT (0) or GPT2_CONTEXT_DISCARD (1)"},
        {1, -1, 0, "n_keep is -1; expected 0 to n_ctx - 1 = 63"},
        {1, 64, 0, "n_keep is 64; expected 0 to n_ctx - 1 = 63"},
        {1, 10, 55, "n_discard is 55; expected 0 (half) to n_ctx - n_keep = 54"},
        {1, 0, -2, "n_discard is -2; expected 0 (half) to n_ctx - n_keep = 64"},
    };
    for (const Case& c : cases) {
        CAPTURE(c.message);
        gpt2_session_params p = gpt2_session_default_params();
        std::memcpy(&p.context_policy, &c.policy, sizeof c.policy); // as a C caller would pass a bad value
        p.n_keep = c.n_keep;
        p.n_discard = c.n_discard;
        gpt2_session* s = nullptr;
        gpt2_error err{};
        CHECK(gpt2_session_create(m.model, &p, &s, &err) == GPT2_ERROR_INVALID_ARGUMENT);
        CHECK_ERROR(err, GPT2_ERROR_INVALID_ARGUMENT, c.message);
        CHECK(s == nullptr);
    }
}
