// Many sessions in one pass (gpt2_batch_eval, gpt2_generate_batch) against the same sessions run
// one by one: the same logits to 1e-4 (fewer than gpt2__panel_min_rows decode rows stream as a
// lone session's do, bit for bit; more multiply panels, the same products in another order), the
// same tokens, every weight type, f32 and f16 caches, 1 to 3 threads, every kernel set this CPU
// runs. This file holds a private copy of the implementation to choose the kernel set.
#define GPT2_IMPLEMENTATION
#define GPT2_STATIC
#include "batch_helpers.h"
#include "gguf_builder.h"
#include "tools/gguf_write.h"
#include <doctest/doctest.h>

static const struct {
    const char* name;
    uint32_t type;
} weight_types[] = {{"f32", GPT2_TYPE_F32}, {"f16", GPT2_TYPE_F16}, {"bf16", GPT2_TYPE_BF16}, {"q8_0", GPT2_TYPE_Q8_0}, {"q4_0", GPT2_TYPE_Q4_0}};

static std::vector<int32_t> ids(int n, int seed) {
    std::vector<int32_t> v;
    for (int i = 0; i < n; i++) v.push_back((int32_t)((i * 31 + seed * 17 + 7) % 77));
    return v;
}

// Sessions at different context lengths, some given a prompt (prefill rows), some 2 or 3 tokens
// (decode rows that q8_0 and q4_0 weights run as prefill), some one (decode rows), in the same
// passes; one session's context grows past 64 keys, where decode attention splits it into ranges.
static Rounds ragged_rounds() {
    Rounds r(6);
    r[0] = {ids(7, 1), ids(2, 2), ids(1, 3), ids(150, 4), ids(3, 5)};
    r[1] = {ids(1, 6), ids(3, 7), ids(5, 8), ids(1, 9), {}};
    r[2] = {ids(1, 10), ids(1, 11), ids(1, 12), ids(1, 13), ids(40, 14)};
    for (int k = 3; k < 6; k++) r[(size_t)k] = {ids(1, k), ids(1, k + 1), ids(k == 4 ? 2 : 1, k + 2), ids(1, k + 3), ids(1, k + 4)};
    return r;
}

TEST_CASE("gpt2_batch_eval gives every session of a ragged batch its lone logits: every weight type, kernel set, KV cache type, 1 to 3 threads") {
    const gpt2__kernels* sets[gpt2__max_kernel_sets];
    const int n_sets = gpt2__supported_kernels(sets);
    const Rounds rounds = ragged_rounds();
    for (const auto& t : weight_types) {
        Loaded m(random_model(t.type));
        REQUIRE_MESSAGE(m.model, m.err.message);
        float worst_by_cache[2] = {0, 0}, largest_logit = 0;
        for (int set = 0; set < n_sets; set++)
            for (int kv_f16 : {0, 1})
                for (int threads : {1, 2, 3}) {
                    const std::string weights = t.name, kernels = sets[set]->name;
                    CAPTURE(weights); CAPTURE(kernels); CAPTURE(kv_f16); CAPTURE(threads);
                    std::vector<std::unique_ptr<Owned>> owned;
                    std::vector<gpt2_session*> batched, alone;
                    for (int i = 0; i < 5; i++) {
                        owned.push_back(session(m.model, threads, kv_f16));
                        batched.push_back(owned.back()->session);
                        owned.push_back(session(m.model, threads, kv_f16));
                        alone.push_back(owned.back()->session);
                    }
                    for (gpt2_session* s : batched) use_kernels(s, sets[set]);
                    for (gpt2_session* s : alone) use_kernels(s, sets[set]);
                    worst_by_cache[kv_f16] = std::max(worst_by_cache[kv_f16], compare_rounds(batched, alone, rounds, m.model->n_vocab, &largest_logit));
                }
        // f16 caches: where the batch's keys differ from the lone ones in the last bits, an f16
        // rounding may go the other way, so those differences are larger
        MESSAGE(std::string(t.name) << " weights: largest logit difference, batched against one by one: f32 cache " << worst_by_cache[0] << ", f16 cache "
                                    << worst_by_cache[1] << " (largest |logit| " << largest_logit << ")");
        CHECK(worst_by_cache[0] <= 1e-4f);
        CHECK(worst_by_cache[1] <= 1e-4f);
    }
}

TEST_CASE("sessions reaching their context limit mid-batch follow their own policies, as alone") {
    Loaded m(random_model(GPT2_TYPE_Q8_0));
    REQUIRE_MESSAGE(m.model, m.err.message);
    for (int threads : {1, 2}) {
        CAPTURE(threads);
        const auto make = [&](std::vector<std::unique_ptr<Owned>>* owned) {
            owned->push_back(session(m.model, threads, 0, 12, GPT2_CONTEXT_EXACT));
            owned->push_back(session(m.model, threads, 1, 16, GPT2_CONTEXT_DISCARD, 3));
            owned->push_back(session(m.model, threads, 0)); // the model's 300 positions: never full here
            std::vector<gpt2_session*> v;
            for (auto& s : *owned) v.push_back(s->session);
            return v;
        };
        std::vector<std::unique_ptr<Owned>> a, b;
        const std::vector<gpt2_session*> batched = make(&a), alone = make(&b);
        Rounds rounds(30);
        rounds[0] = {ids(9, 1), ids(10, 2), ids(4, 3)};
        for (int r = 1; r < 30; r++) rounds[(size_t)r] = {ids(r % 7 == 0 ? 3 : 1, r), ids(1, r + 1), ids(1, r + 2)};
        float largest_logit = 0;
        const float worst = compare_rounds(batched, alone, rounds, m.model->n_vocab, &largest_logit);
        CHECK(gpt2_session_n_tokens(batched[0]) == 12);
        CHECK(gpt2_session_n_tokens(batched[1]) <= 16);
        MESSAGE("largest logit difference: " << worst);
        CHECK(worst == 0.0f); // at most 3 decode rows a pass (fewer than gpt2__panel_min_rows): streamed as alone
    }
}

TEST_CASE("gpt2_generate_batch gives each session the tokens and text it generates alone, with its own parameters") {
    for (const auto& t : weight_types) {
        CAPTURE(std::string(t.name));
        Loaded m(random_model(t.type));
        REQUIRE_MESSAGE(m.model, m.err.message);
        const char* stops[] = {"Z"};
        const char* prompts[] = {"ABC", "", "0123456789", "K", "HELLO"};
        const int n = 5;
        std::vector<gpt2_generate_params> params(n, gpt2_generate_default_params());
        params[0].temperature = 0.0f; // greedy
        params[0].max_new_tokens = 20;
        params[1].seed = 7;           // continues its context
        params[1].max_new_tokens = 25;
        params[2].temperature = 1.3f, params[2].top_k = 5, params[2].seed = 99, params[2].max_new_tokens = 30;
        params[2].stop = stops, params[2].n_stop = 1;
        params[3].top_p = 0.9f, params[3].repeat_penalty = 1.3f, params[3].max_new_tokens = 40; // the host's sampling chain
        params[4].max_new_tokens = 30;                                                            // its callback stops after 4 tokens
        std::vector<Heard> heard_batched(n), heard_alone(n);
        heard_batched[4].stop_after = heard_alone[4].stop_after = 4;
        std::vector<std::unique_ptr<Owned>> owned;
        std::vector<gpt2_session*> batched, alone;
        for (int i = 0; i < n; i++) {
            owned.push_back(session(m.model, 2, i % 2, i == 3 ? 30 : 0, i == 3 ? GPT2_CONTEXT_DISCARD : GPT2_CONTEXT_EXACT)); // session 3 reaches its context
            batched.push_back(owned.back()->session);
            owned.push_back(session(m.model, 2, i % 2, i == 3 ? 30 : 0, i == 3 ? GPT2_CONTEXT_DISCARD : GPT2_CONTEXT_EXACT));
            alone.push_back(owned.back()->session);
        }
        const std::vector<int32_t> context = ids(20, 3);
        for (gpt2_session* s : {batched[1], alone[1]}) REQUIRE(gpt2_session_eval(s, context.data(), context.size(), nullptr) == GPT2_OK);
        gpt2_error err;
        for (int i = 0; i < n; i++) {
            gpt2_generate_params p = params[(size_t)i];
            p.on_token = hear, p.user = &heard_alone[(size_t)i];
            REQUIRE_MESSAGE(gpt2_generate_text(alone[(size_t)i], prompts[i], &p, &err) == GPT2_OK, err.message);
            params[(size_t)i].on_token = hear, params[(size_t)i].user = &heard_batched[(size_t)i];
        }
        REQUIRE_MESSAGE(gpt2_generate_batch(batched.data(), prompts, params.data(), n, &err) == GPT2_OK, err.message);
        for (int i = 0; i < n; i++) {
            CAPTURE(i);
            CHECK(heard_batched[(size_t)i].tokens == heard_alone[(size_t)i].tokens);
            CHECK(heard_batched[(size_t)i].text == heard_alone[(size_t)i].text);
            CHECK(gpt2_session_n_tokens(batched[(size_t)i]) == gpt2_session_n_tokens(alone[(size_t)i]));
            CHECK(max_abs_diff(gpt2_session_logits(batched[(size_t)i]), gpt2_session_logits(alone[(size_t)i]), (size_t)m.model->n_vocab) <= 1e-4f);
        }
        CHECK(heard_batched[4].tokens.size() == 4); // stopped early by its callback while the others went on
        CHECK(heard_batched[3].tokens.size() == 40);
    }
}

TEST_CASE("a bad batch fails with a clear error and changes no session") {
    Loaded m(random_model(GPT2_TYPE_F32)), other(random_model(GPT2_TYPE_F16));
    REQUIRE(m.model);
    REQUIRE(other.model);
    auto a = session(m.model, 1, 0), b = session(m.model, 1, 0), c = session(other.model, 1, 0);
    auto small = session(m.model, 1, 0, 8, GPT2_CONTEXT_DISCARD, 6);
    const std::vector<int32_t> prompt = ids(5, 1), one = ids(1, 2), bad = {3, 77};
    for (gpt2_session* s : {a->session, b->session, small->session}) REQUIRE(gpt2_session_eval(s, prompt.data(), prompt.size(), nullptr) == GPT2_OK);
    const std::vector<float> logits_a(gpt2_session_logits(a->session), gpt2_session_logits(a->session) + 77);
    const auto unchanged = [&] {
        CHECK(gpt2_session_n_tokens(a->session) == 5);
        CHECK(gpt2_session_n_tokens(b->session) == 5);
        CHECK(gpt2_session_n_tokens(small->session) == 5);
        CHECK(max_abs_diff(gpt2_session_logits(a->session), logits_a.data(), 77) == 0.0f);
    };
    gpt2_error err;
    const auto eval = [&](std::vector<gpt2_session*> sessions, std::vector<std::vector<int32_t>> tokens) {
        std::vector<const int32_t*> t;
        std::vector<size_t> n;
        for (const auto& v : tokens) t.push_back(v.data()), n.push_back(v.size());
        return gpt2_batch_eval(sessions.data(), t.data(), n.data(), sessions.size(), &err);
    };
    CHECK(gpt2_batch_eval(nullptr, nullptr, nullptr, 0, &err) == GPT2_ERROR_INVALID_ARGUMENT);
    CHECK_ERROR(err, GPT2_ERROR_INVALID_ARGUMENT, "no sessions");
    CHECK(eval({a->session, b->session, c->session}, {one, one, one}) == GPT2_ERROR_INVALID_ARGUMENT);
    CHECK_ERROR(err, GPT2_ERROR_INVALID_ARGUMENT, "sessions[2] is a session of another model");
    unchanged();
    CHECK(eval({a->session, b->session, a->session}, {one, one, one}) == GPT2_ERROR_INVALID_ARGUMENT);
    CHECK_ERROR(err, GPT2_ERROR_INVALID_ARGUMENT, "sessions[0] and sessions[2] are the same session");
    unchanged();
    CHECK(eval({a->session, nullptr}, {one, one}) == GPT2_ERROR_INVALID_ARGUMENT);
    CHECK_ERROR(err, GPT2_ERROR_INVALID_ARGUMENT, "sessions[1] is NULL");
    unchanged();
    CHECK(eval({a->session, b->session}, {one, bad}) == GPT2_ERROR_BAD_TOKEN);
    CHECK_ERROR(err, GPT2_ERROR_BAD_TOKEN, "sessions[1]: token 1 is 77");
    unchanged();
    CHECK(eval({a->session, b->session}, {one, {}}) == GPT2_ERROR_INVALID_ARGUMENT);
    CHECK_ERROR(err, GPT2_ERROR_INVALID_ARGUMENT, "n_tokens[1] is 0");
    unchanged();
    gpt2_session* two[] = {a->session, c->session};
    CHECK(gpt2_generate_batch(two, nullptr, nullptr, 2, &err) == GPT2_ERROR_INVALID_ARGUMENT);
    CHECK_ERROR(err, GPT2_ERROR_INVALID_ARGUMENT, "sessions[1] is a session of another model");
    unchanged();
}

static int abort_now(void* user) { return ++*(int*)user > 1; } // lets the first layer run

TEST_CASE("an aborted batch leaves every session as it was") {
    Loaded m(random_model(GPT2_TYPE_F16));
    REQUIRE(m.model);
    int calls = 0;
    gpt2_session_params p = gpt2_session_default_params();
    p.n_threads = 2;
    p.abort_fn = abort_now;
    p.abort_user = &calls;
    gpt2_session* runner = nullptr;
    REQUIRE(gpt2_session_create(m.model, &p, &runner, nullptr) == GPT2_OK);
    auto other = session(m.model, 1, 0);
    const std::vector<int32_t> prompt = ids(6, 1), one = ids(1, 2), more = ids(4, 3);
    calls = -1000;
    for (gpt2_session* s : {runner, other->session}) REQUIRE(gpt2_session_eval(s, prompt.data(), prompt.size(), nullptr) == GPT2_OK);
    const std::vector<float> before(gpt2_session_logits(other->session), gpt2_session_logits(other->session) + 77);
    calls = 0;
    gpt2_session* sessions[] = {runner, other->session};
    const int32_t* tokens[] = {one.data(), more.data()};
    const size_t n[] = {1, 4};
    gpt2_error err;
    CHECK(gpt2_batch_eval(sessions, tokens, n, 2, &err) == GPT2_ERROR_ABORTED);
    CHECK(gpt2_session_n_tokens(runner) == 6);
    CHECK(gpt2_session_n_tokens(other->session) == 6);
    CHECK(max_abs_diff(gpt2_session_logits(other->session), before.data(), 77) == 0.0f);
    // and the sessions go on as if nothing happened
    auto fresh = session(m.model, 1, 0);
    const std::vector<int32_t> all = {prompt[0], prompt[1], prompt[2], prompt[3], prompt[4], prompt[5], more[0], more[1], more[2], more[3]};
    REQUIRE(gpt2_session_eval(fresh->session, all.data(), all.size(), nullptr) == GPT2_OK);
    calls = -1000;
    REQUIRE(gpt2_batch_eval(sessions, tokens, n, 2, &err) == GPT2_OK);
    CHECK(max_abs_diff(gpt2_session_logits(other->session), gpt2_session_logits(fresh->session), 77) <= 1e-4f);
    gpt2_session_free(runner);
}

TEST_CASE("where the kernels have lanes, q8_0, q4_0 and f16 models' matrices carry them, and 16 sessions in one pass (prompts, then single tokens) give their lone logits bit for bit") {
    if (!gpt2__cpu_kernels().pack_lanes) {
        MESSAGE("this CPU's kernels (" << gpt2__cpu_kernels().name << ") have no lanes: skipped");
        return;
    }
    Loaded f32(random_model(GPT2_TYPE_F32)); // other types are read in place
    REQUIRE_MESSAGE(f32.model, f32.err.message);
    CHECK(f32.model->layers[0].c_fc.lanes == nullptr);
    for (uint32_t type : {GPT2_TYPE_Q8_0, GPT2_TYPE_Q4_0, GPT2_TYPE_F16}) {
        CAPTURE(std::string(gpt2__type_name(type)));
        Loaded m(random_model(type));
        REQUIRE_MESSAGE(m.model, m.err.message);
        for (const gpt2__layer& L : m.model->layers)
            for (const gpt2__weight* W : {&L.c_attn, &L.c_proj, &L.c_fc, &L.mlp_proj}) CHECK(W->lanes != nullptr);
        CHECK(m.model->lm_head.lanes != nullptr);
        // first 16 prompts: the head's 16 rows in a pass of no decode rows (f16 ones packed for their
        // tiles, more than a session's own room for its 3 decode rows holds), then single tokens
        const int n = 16;
        Rounds rounds(4);
        for (int r = 0; r < 4; r++)
            for (int i = 0; i < n; i++) rounds[(size_t)r].push_back(ids(r == 0 ? 4 : 1, n * r + i));
        std::vector<std::unique_ptr<Owned>> owned;
        std::vector<gpt2_session*> batched, alone;
        for (int i = 0; i < n; i++) {
            owned.push_back(session(m.model, 2, 0));
            batched.push_back(owned.back()->session);
            owned.push_back(session(m.model, 2, 0));
            alone.push_back(owned.back()->session);
        }
        float largest_logit = 0;
        CHECK(compare_rounds(batched, alone, rounds, m.model->n_vocab, &largest_logit) == 0.0f); // 16 rows would multiply panels, in another order, without lanes
        CHECK(largest_logit > 0.0f);
    }
}
