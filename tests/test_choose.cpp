// gpt2_choose: options scored as continuations of the context, each equal to gpt2_score of the
// context and the option less gpt2_score of the context alone, the session left as it was.
#include "helpers.h"
#include <doctest/doctest.h>
#include <string>
#include <vector>

namespace {

std::vector<int32_t> tokenize(const gpt2_model* m, const std::string& text) {
    size_t n = 0;
    REQUIRE(gpt2_tokenize(m, text.data(), text.size(), 0, nullptr, 0, &n, nullptr) == GPT2_OK);
    std::vector<int32_t> ids(n);
    REQUIRE(gpt2_tokenize(m, text.data(), text.size(), 0, ids.data(), ids.size(), &n, nullptr) == GPT2_OK);
    return ids;
}

// The reference: gpt2_score of context + option less gpt2_score of the context (which scores
// every token after the first), each from a fresh session.
double score_after(const gpt2_model* m, const std::vector<int32_t>& context, const std::string& option) {
    Session s(m);
    std::vector<int32_t> all = context, opt = tokenize(m, option);
    all.insert(all.end(), opt.begin(), opt.end());
    double with = 0, without = 0;
    REQUIRE(gpt2_score(s.session, all.data(), all.size(), &with, nullptr) == GPT2_OK);
    if (context.size() > 1) REQUIRE(gpt2_score(s.session, context.data(), context.size(), &without, nullptr) == GPT2_OK);
    return with - without;
}

std::vector<uint8_t> saved(const gpt2_session* s) {
    size_t n = 0;
    REQUIRE(gpt2_session_save(s, nullptr, 0, &n, nullptr) == GPT2_OK);
    std::vector<uint8_t> bytes(n);
    REQUIRE(gpt2_session_save(s, bytes.data(), bytes.size(), &n, nullptr) == GPT2_OK);
    return bytes;
}

// A session whose context is `prompt`, with some generated tokens after it so that the RNG has moved.
struct Prompted {
    Session s;
    std::vector<int32_t> context;
    Prompted(const gpt2_model* m, const std::string& prompt, int n_ctx = 0) : s(m, 2, n_ctx) {
        REQUIRE(s.session);
        std::vector<int32_t> ids = tokenize(m, prompt);
        gpt2_generate_params p = gpt2_generate_default_params();
        p.max_new_tokens = 3;
        REQUIRE(gpt2_generate(s.session, ids.data(), ids.size(), &p, nullptr, 0, nullptr, nullptr) == GPT2_OK);
        context.assign(gpt2_session_tokens(s.session), gpt2_session_tokens(s.session) + gpt2_session_n_tokens(s.session));
    }
};

// Chooses among options and checks every logprob against score_after, *best the first maximum,
// and the session's saved bytes the same before and after.
size_t check_choose(const gpt2_model* m, const std::string& prompt, const std::vector<std::string>& options) {
    Prompted p(m, prompt);
    const std::vector<uint8_t> before = saved(p.s.session);
    std::vector<const char*> ptrs;
    for (const std::string& o : options) ptrs.push_back(o.c_str());
    std::vector<float> logprobs(options.size());
    size_t best = 99;
    gpt2_error err{};
    REQUIRE(gpt2_choose(p.s.session, ptrs.data(), ptrs.size(), logprobs.data(), &best, &err) == GPT2_OK);
    CHECK(saved(p.s.session) == before);
    size_t expected_best = 0;
    for (size_t i = 0; i < options.size(); i++) {
        INFO("option " << i << ": '" << options[i] << "'");
        CHECK(std::fabs(logprobs[i] - score_after(m, p.context, options[i])) <= 1e-5);
        CHECK(logprobs[i] < 0.0f);
        if (logprobs[i] > logprobs[expected_best]) expected_best = i;
    }
    CHECK(best == expected_best);
    size_t best_alone = 99; // logprobs may be NULL
    REQUIRE(gpt2_choose(p.s.session, ptrs.data(), ptrs.size(), nullptr, &best_alone, nullptr) == GPT2_OK);
    CHECK(best_alone == best);
    CHECK(saved(p.s.session) == before);
    return best;
}


} // namespace

TEST_CASE("gpt2_choose with the character vocabulary: each logprob is gpt2_score's, options sharing prefixes, one a prefix of another") {
    REQUIRE(char_model().model);
    check_choose(char_model().model, "ROMEO:\nWhat say", {" you", " yes", " yet", " no", " y", "!", " you, sir"});
}

TEST_CASE("gpt2_choose with GPT-2's BPE vocabulary: each logprob is gpt2_score's") {
    REQUIRE(bpe_model().model);
    check_choose(bpe_model().model, "The weather today is", {" sunny", " sunny and warm", " rainy", " cold", " sunny and cold", "!"});
}

TEST_CASE("gpt2_choose: duplicate options score the same and the tie goes to the lower index") {
    REQUIRE(char_model().model);
    Prompted p(char_model().model, "KING:\n");
    const char* options[] = {" zzq", " the", " the", " zzq"};
    float logprobs[4];
    size_t best = 99;
    REQUIRE(gpt2_choose(p.s.session, options, 4, logprobs, &best, nullptr) == GPT2_OK);
    CHECK(logprobs[1] == logprobs[2]);
    CHECK(logprobs[0] == logprobs[3]);
    CHECK(best == (logprobs[1] >= logprobs[0] ? 1u : 0u));
    const char* same[] = {"a", "a", "a"};
    REQUIRE(gpt2_choose(p.s.session, same, 3, logprobs, &best, nullptr) == GPT2_OK);
    CHECK(best == 0);
}

TEST_CASE("gpt2_choose refuses bad arguments with a message, and the session is unchanged") {
    REQUIRE(char_model().model);
    Prompted p(char_model().model, "ROMEO:", 16);
    const std::vector<uint8_t> before = saved(p.s.session);
    const char* ok[] = {"a", "b"};
    float logprobs[2];
    size_t best = 0;
    gpt2_error e{};
    CHECK(gpt2_choose(nullptr, ok, 2, logprobs, &best, &e) == GPT2_ERROR_INVALID_ARGUMENT);
    CHECK_ERROR(e, GPT2_ERROR_INVALID_ARGUMENT, "session is NULL");
    CHECK(gpt2_choose(p.s.session, nullptr, 2, logprobs, &best, &e) == GPT2_ERROR_INVALID_ARGUMENT);
    CHECK_ERROR(e, GPT2_ERROR_INVALID_ARGUMENT, "no options");
    CHECK(gpt2_choose(p.s.session, ok, 0, logprobs, &best, &e) == GPT2_ERROR_INVALID_ARGUMENT);
    CHECK_ERROR(e, GPT2_ERROR_INVALID_ARGUMENT, "n_options is 0");
    CHECK(gpt2_choose(p.s.session, ok, 2, logprobs, nullptr, &e) == GPT2_ERROR_INVALID_ARGUMENT);
    CHECK_ERROR(e, GPT2_ERROR_INVALID_ARGUMENT, "best is NULL");
    const char* empty[] = {"a", ""};
    CHECK(gpt2_choose(p.s.session, empty, 2, logprobs, &best, &e) == GPT2_ERROR_INVALID_ARGUMENT);
    CHECK_ERROR(e, GPT2_ERROR_INVALID_ARGUMENT, "options[1] is empty");
    const char* null_option[] = {nullptr, "a"};
    CHECK(gpt2_choose(p.s.session, null_option, 2, logprobs, &best, &e) == GPT2_ERROR_INVALID_ARGUMENT);
    CHECK_ERROR(e, GPT2_ERROR_INVALID_ARGUMENT, "options[0] is NULL");
    // n_ctx 16: an option of 16 characters does not fit beside the one context token kept
    const char* too_long[] = {"a", "abcdefghijklmno", "abcdefghijklmnop"};
    CHECK(gpt2_choose(p.s.session, too_long, 3, logprobs, &best, &e) == GPT2_ERROR_CONTEXT_FULL);
    CHECK_ERROR(e, GPT2_ERROR_CONTEXT_FULL, "options[2] is 16 tokens; beside the 1 context token the context policy keeps that is 17, more than n_ctx 16");
    const char* bad_text[] = {"a", "\xE2\x82\xAC"}; // the character vocabulary has no euro sign
    CHECK(gpt2_choose(p.s.session, bad_text, 2, logprobs, &best, &e) != GPT2_OK);
    CHECK(has(e, "options[1]: "));
    CHECK(saved(p.s.session) == before);

    Session fresh(char_model().model);
    CHECK(gpt2_choose(fresh.session, ok, 2, logprobs, &best, &e) == GPT2_ERROR_INVALID_ARGUMENT);
    CHECK_ERROR(e, GPT2_ERROR_INVALID_ARGUMENT, "context is empty");
    CHECK(gpt2_session_n_tokens(fresh.session) == 0);
}

namespace {
gpt2_session* session_with_policy(const gpt2_model* m, int n_ctx, gpt2_context_policy policy, int n_keep) {
    gpt2_session_params sp = gpt2_session_default_params();
    sp.n_threads = 2;
    sp.n_ctx = n_ctx;
    sp.context_policy = policy;
    sp.n_keep = n_keep;
    gpt2_session* s = nullptr;
    REQUIRE(gpt2_session_create(m, &sp, &s, nullptr) == GPT2_OK);
    return s;
}
std::vector<int32_t> tokens_of(const gpt2_session* s) { return {gpt2_session_tokens(s), gpt2_session_tokens(s) + gpt2_session_n_tokens(s)}; }
std::vector<float> logits_of(const gpt2_model* m, const gpt2_session* s) {
    const float* l = gpt2_session_logits(s);
    return {l, l + gpt2_model_get_info(m).n_vocab};
}
} // namespace

TEST_CASE("gpt2_choose on a full context scores after the context cut as evaluating the longest option would cut it, and leaves the session as it was") {
    Model small(test_model("bias_char.gguf")); // n_ctx 16, 32 characters: quick under an emulator too
    const gpt2_model* m = small.model;
    REQUIRE(m);
    const int n_ctx = small.info().n_ctx;
    const std::vector<std::string> options = {" the", " a", " more", " hi"};
    const std::vector<int32_t> longest = tokenize(m, options[2]);
    const std::vector<int32_t> prompt = tokenize(m, "ROMEO:\nHe is more tho"); // longer than n_ctx
    struct Policy { gpt2_context_policy policy; int n_keep; };
    for (Policy p : {Policy{GPT2_CONTEXT_EXACT, 0}, Policy{GPT2_CONTEXT_DISCARD, 4}, Policy{GPT2_CONTEXT_DISCARD, 0}}) {
        CAPTURE(p.policy);
        CAPTURE(p.n_keep);
        gpt2_session* s = session_with_policy(m, n_ctx, p.policy, p.n_keep);
        REQUIRE(gpt2_session_eval(s, prompt.data(), prompt.size(), nullptr) == GPT2_OK);
        const std::vector<int32_t> context = tokens_of(s);
        REQUIRE(context.size() + longest.size() > (size_t)n_ctx); // the longest option does not fit
        // The reference cut: what evaluating the longest option does to a copy of the context.
        gpt2_session* copy = session_with_policy(m, n_ctx, p.policy, p.n_keep);
        REQUIRE(gpt2_session_copy(copy, s, nullptr) == GPT2_OK);
        REQUIRE(gpt2_session_eval(copy, longest.data(), longest.size(), nullptr) == GPT2_OK);
        std::vector<int32_t> cut = tokens_of(copy);
        cut.resize(cut.size() - longest.size());
        REQUIRE(cut.size() < context.size());
        REQUIRE(gpt2_session_copy(copy, s, nullptr) == GPT2_OK); // and the copy as the session was

        const std::vector<float> logits_before = logits_of(m, s);
        std::vector<const char*> ptrs;
        for (const std::string& o : options) ptrs.push_back(o.c_str());
        std::vector<float> logprobs(options.size());
        size_t best = 99;
        gpt2_error e{};
        REQUIRE(gpt2_choose(s, ptrs.data(), ptrs.size(), logprobs.data(), &best, &e) == GPT2_OK);
        size_t expected_best = 0;
        for (size_t i = 0; i < options.size(); i++) {
            INFO("option " << i << ": '" << options[i] << "'");
            CHECK(std::fabs(logprobs[i] - score_after(m, cut, options[i])) <= 1e-5);
            if (logprobs[i] > logprobs[expected_best]) expected_best = i;
        }
        CHECK(best == expected_best);
        CHECK(tokens_of(s) == context);
        CHECK(logits_of(m, s) == logits_before);
        // what comes next is what the copy that never chose says
        gpt2_generate_params gp = gpt2_generate_default_params();
        gp.max_new_tokens = 12;
        gp.seed = 5;
        const int32_t more = prompt.back();
        std::vector<int32_t> after_choose(12), unchanged(12);
        size_t n1 = 0, n2 = 0;
        REQUIRE(gpt2_generate(s, &more, 1, &gp, after_choose.data(), after_choose.size(), &n1, nullptr) == GPT2_OK);
        REQUIRE(gpt2_generate(copy, &more, 1, &gp, unchanged.data(), unchanged.size(), &n2, nullptr) == GPT2_OK);
        CHECK(after_choose == unchanged);
        gpt2_session_free(copy);
        gpt2_session_free(s);
    }
}

TEST_CASE("gpt2_choose on a model without vocabulary fails with NO_VOCABULARY") {
    Model m(test_model("nobias.gguf"));
    REQUIRE(m.model);
    Session s(m);
    const int32_t ids[] = {1, 2, 3};
    REQUIRE(gpt2_session_eval(s.session, ids, 3, nullptr) == GPT2_OK);
    const char* options[] = {"a"};
    size_t best = 0;
    gpt2_error e{};
    CHECK(gpt2_choose(s.session, options, 1, nullptr, &best, &e) == GPT2_ERROR_NO_VOCABULARY);
    CHECK_ERROR(e, GPT2_ERROR_NO_VOCABULARY, "no vocabulary");
    CHECK(gpt2_session_n_tokens(s.session) == 3);
}

namespace {
struct AbortAfter {
    int calls = 0, limit = 0;
};
int abort_after(void* user) {
    AbortAfter* a = (AbortAfter*)user;
    return a->calls++ >= a->limit;
}
int choose_from_callback(void* user, int32_t, const char*, size_t) {
    gpt2_session* s = (gpt2_session*)((void**)user)[0];
    gpt2_result* result = (gpt2_result*)((void**)user)[1];
    const char* options[] = {"a", "b"};
    size_t best = 0;
    *result = gpt2_choose(s, options, 2, nullptr, &best, nullptr);
    return 1;
}
} // namespace

TEST_CASE("gpt2_choose stopped by abort_fn returns ABORTED and leaves the session as it was") {
    REQUIRE(char_model().model);
    AbortAfter a;
    gpt2_session_params sp = gpt2_session_default_params();
    sp.n_threads = 2;
    sp.abort_fn = abort_after;
    sp.abort_user = &a;
    gpt2_session* s = nullptr;
    REQUIRE(gpt2_session_create(char_model().model, &sp, &s, nullptr) == GPT2_OK);
    a.limit = 1 << 30;
    const std::vector<int32_t> prompt = tokenize(char_model().model, "ROMEO:\nWhat");
    REQUIRE(gpt2_session_eval(s, prompt.data(), prompt.size(), nullptr) == GPT2_OK);
    const std::vector<uint8_t> before = saved(s);
    const char* options[] = {" say", " said", " sayeth"};
    float logprobs[3];
    size_t best = 0;
    for (int limit : {0, 1, 3, 7}) {
        a.calls = 0;
        a.limit = limit;
        gpt2_error e{};
        CHECK(gpt2_choose(s, options, 3, logprobs, &best, &e) == GPT2_ERROR_ABORTED);
        CHECK_ERROR(e, GPT2_ERROR_ABORTED, "aborted");
        CHECK(saved(s) == before);
    }
    a.limit = 1 << 30;
    a.calls = 0;
    REQUIRE(gpt2_choose(s, options, 3, logprobs, &best, nullptr) == GPT2_OK); // and it still works
    CHECK(saved(s) == before);
    gpt2_session_free(s);
}

TEST_CASE("gpt2_choose on a session a call is using fails with GPT2_ERROR_BUSY") {
    REQUIRE(char_model().model);
    Session s(char_model().model);
    gpt2_result result = GPT2_OK;
    void* user[] = {s.session, &result};
    gpt2_generate_params p = gpt2_generate_default_params();
    p.max_new_tokens = 2;
    p.on_token = choose_from_callback;
    p.user = user;
    REQUIRE(gpt2_generate_text(s.session, "ROMEO:", &p, nullptr) == GPT2_OK);
    CHECK(result == GPT2_ERROR_BUSY);
}

TEST_CASE("gpt2_choose runs one token for each trie node with children: a prefix the options share runs once") {
    REQUIRE(char_model().model);
    AbortAfter polls; // never aborts; counts the polls, a fixed number for each run of one token
    polls.limit = 1 << 30;
    gpt2_session_params sp = gpt2_session_default_params();
    sp.n_threads = 1;
    sp.abort_fn = abort_after;
    sp.abort_user = &polls;
    gpt2_session* s = nullptr;
    REQUIRE(gpt2_session_create(char_model().model, &sp, &s, nullptr) == GPT2_OK);
    const std::vector<int32_t> prompt = tokenize(char_model().model, "ROMEO:\nWhat say");
    REQUIRE(gpt2_session_eval(s, prompt.data(), prompt.size() - 1, nullptr) == GPT2_OK);
    polls.calls = 0;
    REQUIRE(gpt2_session_eval(s, &prompt.back(), 1, nullptr) == GPT2_OK);
    const int per_run = polls.calls;
    REQUIRE(per_run > 0);
    // " you", " yes", " yet", " yo": the trie is ' ' -> 'y' -> {'o' -> 'u', 'e' -> {'s', 't'}}; the
    // nodes with children are ' ', 'y', 'o' and 'e': 4 runs, where one option at a time runs 13 tokens
    const char* options[] = {" you", " yes", " yet", " yo"};
    polls.calls = 0;
    size_t best = 0;
    REQUIRE(gpt2_choose(s, options, 4, nullptr, &best, nullptr) == GPT2_OK);
    CHECK(polls.calls == 4 * per_run);
    gpt2_session_free(s);
}
