// One call at a time on a session: a second call, from another thread or from the first call's
// own callback, fails at once with GPT2_ERROR_BUSY and changes nothing; a callback may still read
// its session. (Before, two threads generating on one session hung for ever.) tools/sanitize.sh
// runs these cases under TSan.
#include "helpers.h"
#include <doctest/doctest.h>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace {

// Greedy generation of n tokens after "ROMEO:", the ids collected, and gpt2_generate's result in
// *result. No doctest assertion here: it runs on a thread of its own too, where doctest's
// thread_local context, destroyed at the thread's exit, corrupts MinGW's heap under Wine.
std::vector<int32_t> greedy_ids(gpt2_session* s, int n, gpt2_result* result, gpt2_token_fn on_token = nullptr, void* user = nullptr) {
    gpt2_generate_params p = gpt2_generate_default_params();
    p.temperature = 0.0f;
    p.max_new_tokens = n;
    p.on_token = on_token;
    p.user = user;
    const int32_t prompt[] = {30, 27, 25, 17, 27, 10};
    std::vector<int32_t> ids((size_t)n);
    size_t got = 0;
    *result = gpt2_generate(s, prompt, 6, &p, ids.data(), ids.size(), &got, nullptr);
    ids.resize(got);
    return ids;
}

std::vector<int32_t> greedy(gpt2_session* s, int n, gpt2_token_fn on_token = nullptr, void* user = nullptr) {
    gpt2_result result;
    const std::vector<int32_t> ids = greedy_ids(s, n, &result, on_token, user);
    REQUIRE(result == GPT2_OK);
    return ids;
}

// What the on_token callback below tried on its own session, and what each call returned.
struct FromCallback {
    explicit FromCallback(gpt2_session* s) : session(s) {}
    gpt2_session* session;
    int calls = 0;
    gpt2_result generate = GPT2_OK, eval = GPT2_OK, truncate = GPT2_OK, save = GPT2_OK;
    bool logits_readable = true;
    size_t tokens_before_reset = 0, tokens_after_reset = 0;
    std::string message;
};

int try_calls_from_callback(void* user, int32_t, const char*, size_t) {
    FromCallback* c = (FromCallback*)user;
    if (c->calls++ != 3) return 0;
    gpt2_error err{};
    c->generate = gpt2_generate_text(c->session, "KING", nullptr, &err);
    c->message = err.message;
    const int32_t id = 1;
    c->eval = gpt2_session_eval(c->session, &id, 1, nullptr);
    c->truncate = gpt2_session_truncate(c->session, 1, nullptr);
    size_t bytes = 0;
    c->save = gpt2_session_save(c->session, nullptr, 0, &bytes, nullptr);
    c->logits_readable = gpt2_session_logits(c->session) != nullptr;
    c->tokens_before_reset = gpt2_session_n_tokens(c->session);
    gpt2_session_reset(c->session);
    c->tokens_after_reset = gpt2_session_n_tokens(c->session);
    return 0;
}

} // namespace

TEST_CASE("a callback that calls into its own session: changing it fails with GPT2_ERROR_BUSY, reading it works, and the generation is unchanged") {
    Model m(test_model("shakespeare_char.gguf"));
    REQUIRE(m.model);
    Session plain(m, 1), tried(m, 1);
    const std::vector<int32_t> want = greedy(plain.session, 12);
    FromCallback c(tried.session);
    const std::vector<int32_t> got = greedy(tried.session, 12, try_calls_from_callback, &c);
    CHECK(got == want);
    CHECK(c.generate == GPT2_ERROR_BUSY);
    CHECK(c.message.find("in use by another call") != std::string::npos);
    CHECK(c.eval == GPT2_ERROR_BUSY);
    CHECK(c.truncate == GPT2_ERROR_BUSY);
    CHECK(c.save == GPT2_OK); // reading: a save from the callback works
    CHECK(c.logits_readable);
    CHECK(c.tokens_after_reset == c.tokens_before_reset); // a reset during the call does nothing
    // afterwards the session takes calls again
    gpt2_error err{};
    CHECK_MESSAGE(gpt2_generate_text(tried.session, "\n", nullptr, &err) == GPT2_OK, err.message);
}

namespace {

// Holds a generation inside its callback until `release`, so another thread calls meanwhile.
struct Held {
    std::atomic<bool> inside{false}, release{false};
};

int hold(void* user, int32_t, const char*, size_t) {
    Held* h = (Held*)user;
    h->inside.store(true);
    while (!h->release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return 0;
}

} // namespace

TEST_CASE("a session used from two threads: the second thread's calls fail at once with GPT2_ERROR_BUSY, a batch naming the session too, and nothing changes") {
    Model m(test_model("shakespeare_char.gguf"));
    REQUIRE(m.model);
    Session busy(m, 2), other(m, 1), reference(m, 1);
    const std::vector<int32_t> want = greedy(reference.session, 5);
    Held held;
    std::vector<int32_t> got;
    gpt2_result first_result = GPT2_ERROR_INVALID_ARGUMENT;
    std::thread first([&] { got = greedy_ids(busy.session, 5, &first_result, hold, &held); });
    while (!held.inside.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));

    gpt2_error err{};
    CHECK(gpt2_generate_text(busy.session, "KING", nullptr, &err) == GPT2_ERROR_BUSY);
    CHECK(has(err, "the session is in use by another call"));
    const int32_t id = 1;
    CHECK(gpt2_session_eval(busy.session, &id, 1, &err) == GPT2_ERROR_BUSY);
    CHECK(gpt2_session_logits(busy.session) == nullptr); // another thread's: not readable meanwhile
    size_t bytes = 0;
    CHECK(gpt2_session_save(busy.session, nullptr, 0, &bytes, &err) == GPT2_ERROR_BUSY);
    CHECK(gpt2_session_copy(other.session, busy.session, &err) == GPT2_ERROR_BUSY);
    CHECK(has(err, "src is in use"));
    gpt2_session* batch[] = {other.session, busy.session};
    const int32_t* ids[] = {&id, &id};
    const size_t counts[] = {1, 1};
    CHECK(gpt2_batch_eval(batch, ids, counts, 2, &err) == GPT2_ERROR_BUSY);
    CHECK(has(err, "sessions[1] is in use"));
    CHECK(gpt2_session_n_tokens(other.session) == 0); // the batch changed no session
    const char* prompts[] = {"A", "B"};
    CHECK(gpt2_generate_batch(batch, prompts, nullptr, 2, &err) == GPT2_ERROR_BUSY);
    CHECK(gpt2_session_n_tokens(other.session) == 0);
    // the other session of the batch was released: it takes calls
    CHECK(gpt2_session_eval(other.session, &id, 1, &err) == GPT2_OK);

    held.release.store(true);
    first.join();
    CHECK(first_result == GPT2_OK);
    CHECK(got == want); // the first call finished as if alone
    CHECK(gpt2_session_eval(busy.session, &id, 1, &err) == GPT2_OK);
}
