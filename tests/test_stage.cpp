// The stage (gpt2_stage_*): lines that join at different steps and leave when done, against the
// same sessions generating alone with gpt2_generate_text: the same tokens and text, every weight
// type, every kernel set this CPU runs; cancellation, abort_fn, freeing with lines on it, bad
// input, and lines added from another thread than the one stepping. This file holds a private
// copy of the implementation to choose the kernel set.
#define GPT2_IMPLEMENTATION
#define GPT2_STATIC
#include "batch_helpers.h"
#include "gguf_builder.h"
#include "tools/gguf_write.h"
#include <doctest/doctest.h>
#include <atomic>
#include <cmath>
#include <thread>

static std::vector<int32_t> context_ids(int n) {
    std::vector<int32_t> v;
    for (int i = 0; i < n; i++) v.push_back((int32_t)((i * 31 + 58) % 77));
    return v;
}

// The lines of the scene: prompt, params, the step at which each joins.
struct Scene {
    static constexpr int n = 6;
    const char* prompts[n] = {"ABC", "", "0123456789", "K", "HELLO", "Q"};
    int joins_at[n] = {0, 0, 2, 3, 9, 14};
    const char* stops[1] = {"Z"};
    std::vector<gpt2_generate_params> params;
    Scene(const gpt2_grammar* grammar) : params(n, gpt2_generate_default_params()) {
        params[0].temperature = 0.0f, params[0].max_new_tokens = 20; // greedy
        params[1].seed = 7, params[1].max_new_tokens = 25;           // continues its context
        params[2].temperature = 1.3f, params[2].top_k = 5, params[2].seed = 99, params[2].max_new_tokens = 30;
        params[2].stop = stops, params[2].n_stop = 1;
        params[3].top_p = 0.9f, params[3].repeat_penalty = 1.3f, params[3].max_new_tokens = 40; // reaches its context (30, discard)
        params[4].max_new_tokens = 30;                                                            // its callback stops after 4 tokens
        params[5].grammar = grammar, params[5].max_new_tokens = 30;                               // a sentence ends it
    }
};

static std::unique_ptr<Owned> scene_session(const gpt2_model* m, int i, int threads) {
    return session(m, threads, i % 2, i == 3 ? 30 : 0, i == 3 ? GPT2_CONTEXT_DISCARD : GPT2_CONTEXT_EXACT);
}

TEST_CASE("lines joining a stage at different steps give each session the tokens and text it generates alone: every weight type and kernel set") {
    const gpt2__kernels* sets[gpt2__max_kernel_sets];
    const int n_sets = kernel_sets_to_test(sets);
    for (const auto& t : {GPT2_TYPE_F32, GPT2_TYPE_F16, GPT2_TYPE_BF16, GPT2_TYPE_Q8_0, GPT2_TYPE_Q4_0}) {
        Loaded m(random_model(t));
        REQUIRE_MESSAGE(m.model, m.err.message);
        gpt2_error err;
        gpt2_grammar* grammar = nullptr;
        REQUIRE_MESSAGE(gpt2_grammar_from_gbnf(m.model, "root ::= [A-Z] [a-z] [a-z] \";\"", "root", &grammar, &err) == GPT2_OK, err.message);
        for (int set = 0; set < n_sets; set++) {
            CAPTURE(t);
            CAPTURE(std::string(sets[set]->name));
            Scene scene(grammar);
            const int n = Scene::n;
            std::vector<Heard> heard_staged(n), heard_alone(n);
            heard_staged[4].stop_after = heard_alone[4].stop_after = 4;
            gpt2_match match_staged = GPT2_MATCH_NONE, match_alone = GPT2_MATCH_NONE;
            std::vector<std::unique_ptr<Owned>> owned;
            std::vector<gpt2_session*> staged, alone;
            for (int i = 0; i < n; i++) {
                owned.push_back(scene_session(m.model, i, 2));
                alone.push_back(owned.back()->session);
                owned.push_back(scene_session(m.model, i, 2));
                staged.push_back(owned.back()->session);
            }
            const std::vector<int32_t> context = context_ids(20);
            for (gpt2_session* s : {staged[1], alone[1]}) REQUIRE(gpt2_session_eval(s, context.data(), context.size(), nullptr) == GPT2_OK);
            for (int i = 0; i < n; i++) {
                use_kernels(alone[(size_t)i], sets[set]);
                use_kernels(staged[(size_t)i], sets[set]); // attention runs on the session's kernels, the products on the runner's
                gpt2_generate_params p = scene.params[(size_t)i];
                p.on_token = hear, p.user = &heard_alone[(size_t)i];
                if (p.grammar) p.grammar_match = &match_alone;
                REQUIRE_MESSAGE(gpt2_generate_text(alone[(size_t)i], scene.prompts[i], &p, &err) == GPT2_OK, err.message);
                scene.params[(size_t)i].on_token = hear, scene.params[(size_t)i].user = &heard_staged[(size_t)i];
                if (p.grammar) scene.params[(size_t)i].grammar_match = &match_staged;
            }
            gpt2_stage_params sp = gpt2_stage_default_params();
            sp.n_threads = 2;
            gpt2_stage* stage;
            REQUIRE_MESSAGE(gpt2_stage_create(m.model, &sp, &stage, &err) == GPT2_OK, err.message);
            use_kernels(stage->runner, sets[set]);
            size_t n_active = 0;
            int joined = 0;
            for (int step = 0; step < 200 && (joined < n || n_active > 0); step++) {
                for (int i = 0; i < n; i++)
                    if (scene.joins_at[i] == step) {
                        REQUIRE_MESSAGE(gpt2_stage_add(stage, staged[(size_t)i], scene.prompts[i], &scene.params[(size_t)i], &err) == GPT2_OK, err.message);
                        joined++;
                    }
                REQUIRE_MESSAGE(gpt2_stage_step(stage, 0, &n_active, &err) == GPT2_OK, err.message);
            }
            CHECK(n_active == 0);
            gpt2_stage_free(stage);
            for (int i = 0; i < n; i++) {
                CAPTURE(i);
                CHECK(heard_staged[(size_t)i].tokens == heard_alone[(size_t)i].tokens);
                CHECK(heard_staged[(size_t)i].text == heard_alone[(size_t)i].text);
                REQUIRE(gpt2_session_n_tokens(staged[(size_t)i]) == gpt2_session_n_tokens(alone[(size_t)i]));
                CHECK(std::equal(gpt2_session_tokens(staged[(size_t)i]), gpt2_session_tokens(staged[(size_t)i]) + gpt2_session_n_tokens(staged[(size_t)i]),
                                 gpt2_session_tokens(alone[(size_t)i])));
                CHECK(max_abs_diff(gpt2_session_logits(staged[(size_t)i]), gpt2_session_logits(alone[(size_t)i]), (size_t)m.model->n_vocab) <= 1e-4f);
            }
            CHECK(heard_staged[4].tokens.size() == 4); // stopped by its callback while the others went on
            CHECK(heard_staged[3].tokens.size() == 40);
            CHECK(match_staged == GPT2_MATCH_COMPLETE);
            CHECK(match_staged == match_alone);
            CHECK(heard_staged[5].text.back() == ';');
        }
        gpt2_grammar_free(grammar);
    }
}

// A session's state to compare: its tokens and logits.
struct Snapshot {
    std::vector<int32_t> tokens;
    std::vector<float> logits;
    explicit Snapshot(const gpt2_session* s, int n_vocab) : tokens(gpt2_session_tokens(s), gpt2_session_tokens(s) + gpt2_session_n_tokens(s)) {
        const float* l = gpt2_session_logits(s);
        if (l) logits.assign(l, l + n_vocab);
    }
    bool operator==(const Snapshot& o) const { return tokens == o.tokens && logits == o.logits; }
};

// Steps until the stage is empty; returns the steps taken.
static int step_until_done(gpt2_stage* stage) {
    size_t n_active = 1;
    int steps = 0;
    gpt2_error err;
    while (n_active > 0 && steps < 500) {
        REQUIRE_MESSAGE(gpt2_stage_step(stage, 0, &n_active, &err) == GPT2_OK, err.message);
        steps++;
    }
    return steps;
}

TEST_CASE("a cancelled line, a line its abort_fn stops, and the lines of a freed stage leave their sessions as before gpt2_stage_add, usable") {
    Loaded m(random_model(GPT2_TYPE_Q8_0));
    REQUIRE(m.model);
    const int V = m.model->n_vocab;
    gpt2_error err;
    auto a = session(m.model, 1, 0), b = session(m.model, 1, 0), c = session(m.model, 1, 0);
    std::atomic<int> stop_c{0};
    gpt2_session_params cp = gpt2_session_default_params();
    cp.n_threads = 1;
    cp.abort_fn = [](void* user) { return ((std::atomic<int>*)user)->load(); };
    cp.abort_user = &stop_c;
    gpt2_session* with_abort;
    REQUIRE(gpt2_session_create(m.model, &cp, &with_abort, &err) == GPT2_OK);
    const std::vector<int32_t> context = context_ids(12);
    for (gpt2_session* s : {a->session, b->session, with_abort}) REQUIRE(gpt2_session_eval(s, context.data(), context.size(), nullptr) == GPT2_OK);
    const Snapshot before(a->session, V);

    gpt2_stage* stage;
    REQUIRE(gpt2_stage_create(m.model, nullptr, &stage, &err) == GPT2_OK);
    gpt2_generate_params p = gpt2_generate_default_params();
    p.max_new_tokens = 50;
    for (gpt2_session* s : {a->session, b->session, with_abort}) REQUIRE_MESSAGE(gpt2_stage_add(stage, s, "ABC", &p, &err) == GPT2_OK, err.message);
    size_t n_active;
    for (int i = 0; i < 5; i++) REQUIRE(gpt2_stage_step(stage, 0, &n_active, &err) == GPT2_OK);
    CHECK(n_active == 3);
    CHECK(gpt2_generate_text(a->session, "X", nullptr, &err) == GPT2_ERROR_BUSY); // on the stage: busy, unchanged

    REQUIRE_MESSAGE(gpt2_stage_cancel(stage, a->session, &err) == GPT2_OK, err.message);
    CHECK(Snapshot(a->session, V) == before); // no step ran: it left at once
    CHECK(gpt2_stage_cancel(stage, a->session, &err) == GPT2_ERROR_INVALID_ARGUMENT);
    CHECK(std::string(err.message).find("not on this stage") != std::string::npos);
    stop_c = 1;
    REQUIRE(gpt2_stage_step(stage, 0, &n_active, &err) == GPT2_OK);
    CHECK(n_active == 1); // the abort_fn's line left before the pass
    CHECK(Snapshot(with_abort, V) == before);
    stop_c = 0;

    const Snapshot b_before_free(b->session, V);
    CHECK(b_before_free.tokens.size() > before.tokens.size() + 3);
    gpt2_stage_free(stage); // b's line ends as aborted: back to its context before the add
    CHECK(Snapshot(b->session, V) == before);

    // all three generate again, as a session that never was on a stage does
    const std::vector<int32_t> expected = generate(c->session, context, 8, 0.8f, 200, 1337);
    for (gpt2_session* s : {a->session, b->session, with_abort}) {
        gpt2_session_reset(s);
        CHECK(generate(s, context, 8, 0.8f, 200, 1337) == expected);
    }
    gpt2_session_free(with_abort);
}

// What a line's on_end heard, and what its session allowed then (p.user: on_token's Heard too).
struct EndHeard : Heard {
    int calls = 0;
    size_t tokens_then = 0; // tokens heard when on_end came: none may follow it
    gpt2_end end = GPT2_END_MAX_TOKENS;
    gpt2_result result = GPT2_OK;
    std::string message;
    gpt2_end written = (gpt2_end)-1; // params.end's
    bool session_free = false;        // on_end could evaluate on its session
    gpt2_session* session = nullptr;
};

static void heard_end(void* user, gpt2_end end, gpt2_result result, const char* message) {
    EndHeard* h = static_cast<EndHeard*>(static_cast<Heard*>(user));
    h->calls++;
    h->tokens_then = h->tokens.size();
    h->end = end, h->result = result, h->message = message;
    const int32_t one = 1;
    h->session_free = gpt2_session_eval(h->session, &one, 1, nullptr) == GPT2_OK;
    if (h->session_free) gpt2_session_truncate(h->session, gpt2_session_n_tokens(h->session) - 1, nullptr);
}

TEST_CASE("each line's on_end comes once, after its last token, with its session free: ended, stopped, cancelled, failed, freed with the stage") {
    Loaded m(random_model(GPT2_TYPE_Q8_0));
    REQUIRE(m.model);
    gpt2_error err;
    gpt2_grammar* dead_end = nullptr; // writable through "b"; after "a" only '}', which no token holds
    REQUIRE_MESSAGE(gpt2_grammar_from_gbnf(m.model, "root ::= \"a\" \"}\" | \"b\"", nullptr, &dead_end, &err) == GPT2_OK, err.message);
    const gpt2_logit_bias ban_b = {(int32_t)('b' - '0'), -INFINITY};
    enum { ended, stopped, cancelled, failed, freed, n_lines };
    std::vector<EndHeard> heard(n_lines);
    std::vector<std::unique_ptr<Owned>> owned;
    std::vector<gpt2_generate_params> params(n_lines, gpt2_generate_default_params());
    for (int i = 0; i < n_lines; i++) {
        owned.push_back(session(m.model, 1, 0));
        heard[(size_t)i].session = owned.back()->session;
        params[(size_t)i].on_token = hear, params[(size_t)i].on_end = heard_end, params[(size_t)i].user = static_cast<Heard*>(&heard[(size_t)i]);
        params[(size_t)i].end = &heard[(size_t)i].written;
        params[(size_t)i].max_new_tokens = i == ended ? 6 : 60;
    }
    heard[stopped].stop_after = 3;
    params[failed].grammar = dead_end, params[failed].logit_bias = &ban_b, params[failed].n_logit_bias = 1;
    gpt2_stage* stage;
    REQUIRE(gpt2_stage_create(m.model, nullptr, &stage, &err) == GPT2_OK);
    for (int i = 0; i < n_lines; i++) REQUIRE_MESSAGE(gpt2_stage_add(stage, heard[(size_t)i].session, "ABC", &params[(size_t)i], &err) == GPT2_OK, err.message);
    size_t n_active;
    gpt2_result stepped = GPT2_OK;
    for (int i = 0; i < 8; i++) {
        const gpt2_result r = gpt2_stage_step(stage, 0, &n_active, &err);
        if (r != GPT2_OK) stepped = r;
    }
    CHECK(stepped == GPT2_ERROR_BAD_GRAMMAR); // the failed line's step said so, and the others went on
    CHECK(n_active == 2);
    REQUIRE(gpt2_stage_cancel(stage, heard[cancelled].session, &err) == GPT2_OK);
    CHECK(heard[cancelled].calls == 1); // at once: no step ran
    gpt2_stage_free(stage);

    for (int i = 0; i < n_lines; i++) {
        CAPTURE(i);
        const EndHeard& h = heard[(size_t)i];
        CHECK(h.calls == 1);
        CHECK(h.tokens_then == h.tokens.size());
        CHECK(h.written == h.end);
        CHECK(h.session_free);
    }
    CHECK((heard[ended].end == GPT2_END_MAX_TOKENS && heard[ended].result == GPT2_OK && heard[ended].message.empty() && heard[ended].tokens.size() == 6));
    CHECK((heard[stopped].end == GPT2_END_CALLBACK && heard[stopped].result == GPT2_OK && heard[stopped].tokens.size() == 3));
    for (int i : {cancelled, freed}) {
        CHECK(heard[(size_t)i].end == GPT2_END_ABORTED);
        CHECK(heard[(size_t)i].result == GPT2_ERROR_ABORTED);
        CHECK(heard[(size_t)i].message.find("the line was cancelled") != std::string::npos);
    }
    CHECK(heard[failed].end == GPT2_END_ERROR);
    CHECK(heard[failed].result == GPT2_ERROR_BAD_GRAMMAR);
    CHECK(heard[failed].message.find("no token of the model's vocabulary continues the text") != std::string::npos);
    gpt2_grammar_free(dead_end);
}

TEST_CASE("on_end may give its session the next line: a character's lines one after another") {
    Loaded m(random_model(GPT2_TYPE_F32));
    REQUIRE(m.model);
    struct Chain {
        gpt2_stage* stage = nullptr;
        gpt2_session* session = nullptr;
        gpt2_generate_params p{};
        int lines_left = 3, ends = 0;
        gpt2_result added = GPT2_OK;
    } chain;
    auto owned = session(m.model, 1, 0);
    chain.session = owned->session;
    gpt2_error err;
    REQUIRE(gpt2_stage_create(m.model, nullptr, &chain.stage, &err) == GPT2_OK);
    chain.p = gpt2_generate_default_params();
    chain.p.max_new_tokens = 4;
    chain.p.user = &chain;
    chain.p.on_end = [](void* user, gpt2_end, gpt2_result, const char*) {
        Chain* c = static_cast<Chain*>(user);
        c->ends++;
        if (--c->lines_left > 0) c->added = gpt2_stage_add(c->stage, c->session, "Q", &c->p, nullptr);
    };
    REQUIRE(gpt2_stage_add(chain.stage, chain.session, "ABC", &chain.p, &err) == GPT2_OK);
    step_until_done(chain.stage);
    CHECK(chain.added == GPT2_OK);
    CHECK(chain.ends == 3);
    CHECK(gpt2_session_n_tokens(chain.session) == 3 + 4 + 1 + 4 + 1 + 4);
    gpt2_stage_free(chain.stage);
}

TEST_CASE("a stage refuses bad input with a clear error and changes nothing") {
    Loaded m(random_model(GPT2_TYPE_F32)), other(random_model(GPT2_TYPE_F16));
    REQUIRE(m.model);
    REQUIRE(other.model);
    gpt2_error err;
    gpt2_stage* stage = nullptr;
    CHECK(gpt2_stage_create(nullptr, nullptr, &stage, &err) == GPT2_ERROR_INVALID_ARGUMENT);
    gpt2_stage_params bad_threads = gpt2_stage_default_params();
    bad_threads.n_threads = -1;
    CHECK(gpt2_stage_create(m.model, &bad_threads, &stage, &err) == GPT2_ERROR_INVALID_ARGUMENT);
    CHECK(std::string(err.message).find("n_threads") != std::string::npos);
    CHECK(stage == nullptr);
    REQUIRE(gpt2_stage_create(m.model, nullptr, &stage, &err) == GPT2_OK);
    auto a = session(m.model, 1, 0), foreign = session(other.model, 1, 0), empty = session(m.model, 1, 0);
    const auto message_has = [&](const char* what) { return std::string(err.message).find(what) != std::string::npos; };

    CHECK(gpt2_stage_add(nullptr, a->session, "A", nullptr, &err) == GPT2_ERROR_INVALID_ARGUMENT);
    CHECK(message_has("stage is NULL"));
    CHECK(gpt2_stage_add(stage, nullptr, "A", nullptr, &err) == GPT2_ERROR_INVALID_ARGUMENT);
    CHECK(gpt2_stage_add(stage, foreign->session, "A", nullptr, &err) == GPT2_ERROR_INVALID_ARGUMENT);
    CHECK(message_has("another model"));
    CHECK(gpt2_stage_add(stage, empty->session, "", nullptr, &err) == GPT2_ERROR_INVALID_ARGUMENT);
    CHECK(message_has("empty prompt"));
    gpt2_generate_params nan_temperature = gpt2_generate_default_params();
    nan_temperature.temperature = std::nanf("");
    CHECK(gpt2_stage_add(stage, a->session, "A", &nan_temperature, &err) == GPT2_ERROR_INVALID_ARGUMENT);
    CHECK(gpt2_stage_add(stage, a->session, "~~~\x80", nullptr, &err) != GPT2_OK); // not in the vocabulary
    size_t n_active = 99;
    CHECK(gpt2_stage_step(stage, 0, &n_active, &err) == GPT2_OK);
    CHECK(n_active == 0); // none of those joined
    CHECK(gpt2_session_n_tokens(a->session) == 0);

    REQUIRE(gpt2_stage_add(stage, a->session, "AB", nullptr, &err) == GPT2_OK);
    CHECK(gpt2_stage_add(stage, a->session, "AB", nullptr, &err) == GPT2_ERROR_INVALID_ARGUMENT);
    CHECK(message_has("already on this stage"));
    CHECK(gpt2_stage_step(stage, -1, &n_active, &err) == GPT2_ERROR_INVALID_ARGUMENT);
    CHECK(message_has("budget_us"));
    CHECK(gpt2_session_n_tokens(a->session) == 0); // the step did not run
    CHECK(gpt2_stage_step(nullptr, 0, &n_active, &err) == GPT2_ERROR_INVALID_ARGUMENT);
    CHECK(gpt2_stage_cancel(stage, nullptr, &err) == GPT2_ERROR_INVALID_ARGUMENT);
    CHECK(gpt2_stage_cancel(nullptr, a->session, &err) == GPT2_ERROR_INVALID_ARGUMENT);
    gpt2_stage_free(stage);
    gpt2_stage_free(nullptr);
    CHECK(gpt2_session_n_tokens(a->session) == 0);
    CHECK(gpt2_generate_text(a->session, "AB", nullptr, &err) == GPT2_OK); // free again
}

// Lines added from a second thread while the first steps, and from on_token itself: every line
// runs to its end with the tokens it generates alone (run under TSan by tools/sanitize.sh).
struct Chained {
    gpt2_stage* stage;
    gpt2_session* next; // added by the first token's callback
    const gpt2_generate_params* next_params;
    Heard heard;
    bool added = false;
};

static int hear_and_add(void* user, int32_t token, const char* text, size_t len) {
    Chained* c = (Chained*)user;
    if (!c->added) {
        gpt2_error err;
        c->added = gpt2_stage_add(c->stage, c->next, "LM", c->next_params, &err) == GPT2_OK;
    }
    return hear(&c->heard, token, text, len);
}

TEST_CASE("lines join from another thread and from on_token while a thread steps the stage") {
    Loaded m(random_model(GPT2_TYPE_Q4_0));
    REQUIRE(m.model);
    gpt2_error err;
    gpt2_stage* stage;
    gpt2_stage_params sp = gpt2_stage_default_params();
    sp.n_threads = 2;
    REQUIRE(gpt2_stage_create(m.model, &sp, &stage, &err) == GPT2_OK);
    const int n_other = 6;
    std::vector<std::unique_ptr<Owned>> staged, alone;
    for (int i = 0; i < n_other + 2; i++) {
        staged.push_back(session(m.model, 1, 0));
        alone.push_back(session(m.model, 1, 0));
    }
    std::vector<gpt2_generate_params> params(n_other + 2, gpt2_generate_default_params());
    std::vector<Heard> heard(n_other + 2), heard_alone(n_other + 2);
    for (int i = 0; i < n_other + 2; i++) {
        params[(size_t)i].seed = (uint64_t)(100 + i);
        params[(size_t)i].max_new_tokens = 10 + 3 * i;
        gpt2_generate_params p = params[(size_t)i];
        p.on_token = hear, p.user = &heard_alone[(size_t)i];
        REQUIRE(gpt2_generate_text(alone[(size_t)i]->session, i == n_other + 1 ? "LM" : "ABC", &p, &err) == GPT2_OK);
        params[(size_t)i].on_token = hear, params[(size_t)i].user = &heard[(size_t)i];
    }
    Chained chained{stage, staged[n_other + 1]->session, &params[n_other + 1], {}, false};
    params[n_other].on_token = hear_and_add, params[n_other].user = &chained;
    REQUIRE(gpt2_stage_add(stage, staged[n_other]->session, "ABC", &params[n_other], &err) == GPT2_OK);

    std::atomic<bool> adder_done{false};
    std::thread adder([&] {
        for (int i = 0; i < n_other; i++) {
            gpt2_error e;
            CHECK(gpt2_stage_add(stage, staged[(size_t)i]->session, "ABC", &params[(size_t)i], &e) == GPT2_OK);
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        adder_done = true;
    });
    size_t n_active = 1;
    for (int steps = 0; steps < 2000 && (n_active > 0 || !adder_done); steps++) REQUIRE(gpt2_stage_step(stage, 0, &n_active, &err) == GPT2_OK);
    adder.join();
    step_until_done(stage);
    gpt2_stage_free(stage);
    CHECK(chained.added);
    heard[n_other] = chained.heard;
    for (int i = 0; i < n_other + 2; i++) {
        CAPTURE(i);
        CHECK(heard[(size_t)i].tokens == heard_alone[(size_t)i].tokens);
        CHECK(heard[(size_t)i].text == heard_alone[(size_t)i].text);
    }
}

// The scene of the first case on one stage stepped with a frame budget: every line's tokens,
// text and final logits the same bits as whole steps', whatever the budget.
struct Staged {
    std::vector<Heard> heard;
    std::vector<std::vector<int32_t>> contexts;
    std::vector<std::vector<float>> logits;
    int calls = 0;
};

static Staged run_scene(const gpt2_model* model, const gpt2_grammar* grammar, int64_t budget_us, bool cancel_mid_pass) {
    Scene scene(grammar);
    const int n = Scene::n;
    Staged out;
    out.heard.resize(n);
    out.heard[4].stop_after = 4;
    std::vector<std::unique_ptr<Owned>> owned;
    for (int i = 0; i < n; i++) owned.push_back(scene_session(model, i, 1));
    const std::vector<int32_t> context = context_ids(20);
    REQUIRE(gpt2_session_eval(owned[1]->session, context.data(), context.size(), nullptr) == GPT2_OK);
    for (int i = 0; i < n; i++) scene.params[(size_t)i].on_token = hear, scene.params[(size_t)i].user = &out.heard[(size_t)i];
    gpt2_stage_params sp = gpt2_stage_default_params();
    sp.n_threads = 2;
    gpt2_stage* stage;
    gpt2_error err;
    REQUIRE(gpt2_stage_create(model, &sp, &stage, &err) == GPT2_OK);
    size_t n_active = 0;
    int joined = 0, steps = 0;
    bool cancelled = false;
    while (out.calls < 100000 && (joined < n || n_active > 0)) {
        const bool in_flight = stage->in_flight; // a step under way: nobody joins its pass
        for (int i = 0; i < n && !in_flight; i++)
            if (scene.joins_at[i] == steps) {
                REQUIRE_MESSAGE(gpt2_stage_add(stage, owned[(size_t)i]->session, scene.prompts[i], &scene.params[(size_t)i], &err) == GPT2_OK, err.message);
                joined++;
            }
        if (cancel_mid_pass && in_flight && !cancelled && steps > 12) { // line 2 leaves while a pass holds it: it goes when the pass ends
            REQUIRE(gpt2_stage_cancel(stage, owned[2]->session, &err) == GPT2_OK);
            cancelled = true;
        }
        REQUIRE_MESSAGE(gpt2_stage_step(stage, budget_us, &n_active, &err) == GPT2_OK, err.message);
        out.calls++;
        steps += !stage->in_flight;
    }
    CHECK(n_active == 0);
    CHECK(cancelled == cancel_mid_pass);
    gpt2_stage_free(stage);
    for (auto& o : owned) {
        out.contexts.emplace_back(gpt2_session_tokens(o->session), gpt2_session_tokens(o->session) + gpt2_session_n_tokens(o->session));
        const float* logits = gpt2_session_logits(o->session); // NULL for a session that never ran
        out.logits.push_back(logits ? std::vector<float>(logits, logits + model->n_vocab) : std::vector<float>());
    }
    return out;
}

TEST_CASE("a stage stepped under a frame budget of 1 us or 100 us gives the tokens, text and logits of whole steps, bit for bit") {
    for (const auto& t : {GPT2_TYPE_F32, GPT2_TYPE_BF16, GPT2_TYPE_Q8_0, GPT2_TYPE_Q4_0}) {
        CAPTURE(t);
        Loaded m(random_model(t));
        REQUIRE(m.model);
        gpt2_error err;
        gpt2_grammar* grammar = nullptr;
        REQUIRE_MESSAGE(gpt2_grammar_from_gbnf(m.model, "root ::= [A-Z] [a-z] [a-z] \";\"", "root", &grammar, &err) == GPT2_OK, err.message);
        const Staged whole = run_scene(m.model, grammar, 0, false);
        for (int64_t budget : {1, 100}) {
            CAPTURE(budget);
            const Staged budgeted = run_scene(m.model, grammar, budget, false);
            if (budget == 1) CHECK(budgeted.calls > whole.calls); // the budget did cut the steps (a pass of this small model fits in 100 us)
            for (int i = 0; i < Scene::n; i++) {
                CAPTURE(i);
                CHECK(budgeted.heard[(size_t)i].tokens == whole.heard[(size_t)i].tokens);
                CHECK(budgeted.heard[(size_t)i].text == whole.heard[(size_t)i].text);
                CHECK(budgeted.contexts[(size_t)i] == whole.contexts[(size_t)i]);
                CHECK(budgeted.logits[(size_t)i] == whole.logits[(size_t)i]);
            }
        }
        // a cancel while a paused pass holds the line: the others as before, that one as before its add
        const Staged cancelled = run_scene(m.model, grammar, 1, true);
        for (int i = 0; i < Scene::n; i++) {
            CAPTURE(i);
            if (i == 2) {
                CHECK(cancelled.contexts[2].empty()); // a fresh session before its add
                continue;
            }
            CHECK(cancelled.heard[(size_t)i].tokens == whole.heard[(size_t)i].tokens);
            CHECK(cancelled.contexts[(size_t)i] == whole.contexts[(size_t)i]);
        }
        gpt2_grammar_free(grammar);
    }
}

TEST_CASE("freeing a stage while a budgeted pass is paused leaves every session as before its add") {
    Loaded m(random_model(GPT2_TYPE_Q8_0));
    REQUIRE(m.model);
    gpt2_error err;
    auto a = session(m.model, 1, 0), b = session(m.model, 1, 1);
    const std::vector<int32_t> context = context_ids(10);
    REQUIRE(gpt2_session_eval(a->session, context.data(), context.size(), nullptr) == GPT2_OK);
    const Snapshot before(a->session, m.model->n_vocab);
    gpt2_stage* stage;
    REQUIRE(gpt2_stage_create(m.model, nullptr, &stage, &err) == GPT2_OK);
    REQUIRE(gpt2_stage_add(stage, a->session, "ABCDEFGHIJKLMNOP", nullptr, &err) == GPT2_OK);
    REQUIRE(gpt2_stage_add(stage, b->session, "QRSTUVWXYZ", nullptr, &err) == GPT2_OK);
    REQUIRE(gpt2_stage_step(stage, 1, nullptr, &err) == GPT2_OK);
    REQUIRE(stage->in_flight);
    CHECK(gpt2_session_n_tokens(a->session) == 10 + 16); // the prompt is in the pass ...
    gpt2_stage_free(stage);
    CHECK(Snapshot(a->session, m.model->n_vocab) == before); // ... and out again
    CHECK(gpt2_session_n_tokens(b->session) == 0);
    CHECK(gpt2_generate_text(b->session, "AB", nullptr, &err) == GPT2_OK);
}
