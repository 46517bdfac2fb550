// The KV cache in blocks (src/cpu/kv_cache.h): forks (gpt2_session_copy) share the scene's full
// blocks, and the model counts them once; copy on write keeps every session's tokens its own, which
// the reference forward pass checks after forks diverge, are truncated or cut by the discard
// policy; the state of a session whose blocks are shared saves and loads; every block is freed
// once in whatever order the sessions go, also on several threads and beside a stage. This file
// holds a private copy of the implementation (with GPT2_REFERENCE_FORWARD) to reach the reference
// and the sessions' blocks.
#define GPT2_IMPLEMENTATION
#define GPT2_STATIC
#include "helpers.h"
#include "gguf_builder.h"
#include <doctest/doctest.h>
#include <algorithm>
#include <memory>
#include <set>
#include <thread>

static const gpt2__kv_cache& cache_of(const gpt2_session* s) { return static_cast<const gpt2__cpu_session*>(s)->kv; }

// The bytes of the distinct blocks the sessions hold, counted from their block tables: what the
// model's count of block bytes must say when no other session of the model holds any.
static int64_t distinct_block_bytes(const std::vector<gpt2_session*>& sessions) {
    std::set<const uint8_t*> blocks;
    size_t per_block = 0;
    for (const gpt2_session* s : sessions) {
        blocks.insert(cache_of(s).blocks.begin(), cache_of(s).blocks.end());
        per_block = gpt2__kv_block_bytes(&cache_of(s));
    }
    return (int64_t)(blocks.size() * per_block);
}

static std::vector<int32_t> token_ids(int n, int n_vocab, int salt) {
    std::vector<int32_t> ids;
    for (int i = 0; i < n; i++) ids.push_back((int32_t)((i * 31 + 7 + salt * 17) % n_vocab));
    return ids;
}

static std::vector<int32_t> context_of(const gpt2_session* s) { return std::vector<int32_t>(gpt2_session_tokens(s), gpt2_session_tokens(s) + gpt2_session_n_tokens(s)); }

static std::vector<float> logits_of(const gpt2_session* s) {
    const float* l = gpt2_session_logits(s);
    REQUIRE(l);
    return std::vector<float>(l, l + s->model->n_vocab);
}

// The session's logits against the reference's after the tokens of its context.
static float reference_error(const gpt2_session* s) {
    const std::vector<int32_t> ids = context_of(s);
    const std::vector<float> want = reference_logits(s->model, ids);
    return logit_error(gpt2_session_logits(s), &want[(ids.size() - 1) * (size_t)s->model->n_vocab], s->model->n_vocab);
}

static std::vector<uint8_t> state_of(const gpt2_session* s) {
    size_t n = 0;
    REQUIRE(gpt2_session_save(s, nullptr, 0, &n, nullptr) == GPT2_OK);
    std::vector<uint8_t> bytes(n);
    REQUIRE(gpt2_session_save(s, bytes.data(), bytes.size(), &n, nullptr) == GPT2_OK);
    return bytes;
}

static void eval(gpt2_session* s, const std::vector<int32_t>& ids) {
    gpt2_error err{};
    REQUIRE_MESSAGE(gpt2_session_eval(s, ids.data(), ids.size(), &err) == GPT2_OK, err.message);
}

static void copy(gpt2_session* dst, const gpt2_session* src) {
    gpt2_error err{};
    REQUIRE_MESSAGE(gpt2_session_copy(dst, src, &err) == GPT2_OK, err.message);
}

TEST_CASE("forks share the scene's full blocks: the model counts them once, and a fork's own tokens take blocks of its own") {
    Loaded m(random_model(GPT2_TYPE_F32));
    REQUIRE_MESSAGE(m.model, m.err.message);
    const int V = m.model->n_vocab, B = gpt2__kv_block_rows;
    for (int kv_f16 : {0, 1}) {
        CAPTURE(kv_f16);
        const int scene = 2 * B + 5; // two full blocks and 5 rows of a third (the model's context: 300)
        Session preamble(m.model, 1, 0, kv_f16);
        CHECK(gpt2__kv_bytes(m.model) == 0); // nothing for n_ctx up front
        eval(preamble.session, token_ids(scene, V, 0));
        const int64_t block = (int64_t)gpt2__kv_block_bytes(&cache_of(preamble.session));
        CHECK(block == 2 * m.model->n_layer * B * m.model->n_embd * (kv_f16 ? 2 : 4));
        CHECK(gpt2__kv_bytes(m.model) == 3 * block);
        std::vector<std::unique_ptr<Session>> forks;
        std::vector<gpt2_session*> all = {preamble.session};
        for (int i = 0; i < 5; i++) {
            forks.push_back(std::make_unique<Session>(m.model, 1, 0, kv_f16));
            copy(forks.back()->session, preamble.session);
            all.push_back(forks.back()->session);
            for (int b = 0; b < 2; b++) CHECK(cache_of(forks.back()->session).blocks[(size_t)b] == cache_of(preamble.session).blocks[(size_t)b]);
            CHECK(cache_of(forks.back()->session).blocks[2] != cache_of(preamble.session).blocks[2]); // the partial block copied
        }
        CHECK(gpt2__kv_bytes(m.model) == (3 + 5) * block);
        CHECK(gpt2__kv_bytes(m.model) == distinct_block_bytes(all));
        for (size_t i = 0; i < forks.size(); i++) eval(forks[i]->session, token_ids(B, V, (int)i + 1)); // rows to 3 B + 5: one more block each
        CHECK(gpt2__kv_bytes(m.model) == (3 + 5 * 2) * block);
        CHECK(gpt2__kv_bytes(m.model) == distinct_block_bytes(all));
        for (gpt2_session* s : all) CHECK(reference_error(s) <= (kv_f16 ? 1e-3f : 1e-5f));
    }
    CHECK(gpt2__kv_bytes(m.model) == 0);
}

TEST_CASE("copy on write: forks that diverge, are truncated into shared blocks or cut by the discard policy never see each other's tokens") {
    Loaded m(random_model(GPT2_TYPE_F32));
    REQUIRE_MESSAGE(m.model, m.err.message);
    const int V = m.model->n_vocab, B = gpt2__kv_block_rows;
    const gpt2__kernels* sets[gpt2__max_kernel_sets];
    const int n_sets = kernel_sets_to_test(sets);
    for (int i = 0; i < n_sets; i++)
        for (int kv_f16 : {0, 1}) {
            const std::string kernels = sets[i]->name;
            CAPTURE(kernels); CAPTURE(kv_f16);
            const float bound = kv_f16 ? 1e-3f : 1e-5f;
            gpt2_session_params discard = gpt2_session_default_params();
            discard.n_threads = 1;
            discard.kv_f16 = kv_f16;
            discard.n_ctx = 4 * B;
            discard.context_policy = GPT2_CONTEXT_DISCARD;
            discard.n_keep = B + 3; // inside the second block, shared
            discard.n_discard = 2;
            Session preamble(m.model, 2, 0, kv_f16), a(m.model, 2, 0, kv_f16), b(m.model, 1, 0, kv_f16), c(m.model, 1, 0, kv_f16);
            std::unique_ptr<gpt2_session, void (*)(gpt2_session*)> d(nullptr, gpt2_session_free);
            gpt2_session* made = nullptr;
            REQUIRE(gpt2_session_create(m.model, &discard, &made, nullptr) == GPT2_OK);
            d.reset(made);
            for (gpt2_session* s : {preamble.session, a.session, b.session, c.session, d.get()}) {
                REQUIRE(s);
                use_kernels(s, sets[i]);
            }
            eval(preamble.session, token_ids(2 * B + 6, V, 0));
            for (gpt2_session* fork : {a.session, b.session, c.session, d.get()}) copy(fork, preamble.session);
            // diverge: a prompt, single tokens, a few at once; and the original goes on too
            eval(a.session, token_ids(9, V, 1));
            for (int32_t id : token_ids(3, V, 2)) eval(b.session, {id});
            eval(c.session, token_ids(2, V, 3));
            eval(preamble.session, token_ids(5, V, 4));
            std::vector<gpt2_session*> others = {preamble.session, b.session, c.session};
            std::vector<std::vector<float>> before;
            for (gpt2_session* s : others) {
                CHECK(reference_error(s) <= bound);
                before.push_back(logits_of(s));
            }
            // truncate a into the first block (shared by all): its pass writes there
            REQUIRE(gpt2_session_truncate(a.session, (size_t)B - 4, nullptr) == GPT2_OK);
            CHECK(reference_error(a.session) <= bound);
            eval(a.session, token_ids(B + 3, V, 5));
            CHECK(reference_error(a.session) <= bound);
            // d runs past its context of 4 B: the discard policy cuts back to n_keep, in the shared second block
            for (int round = 0; round < 3; round++) {
                eval(d.get(), token_ids(B - 1, V, 6 + round));
                CHECK(reference_error(d.get()) <= bound);
            }
            for (size_t k = 0; k < others.size(); k++) CHECK(logits_of(others[k]) == before[k]);
            // and they go on as their own contexts say
            eval(b.session, token_ids(B, V, 9));
            eval(c.session, {3});
            eval(preamble.session, token_ids(4, V, 10));
            for (gpt2_session* s : others) CHECK(reference_error(s) <= bound);
        }
}

TEST_CASE("the state of a session whose blocks are shared saves, loads into a fork, and changes no other holder") {
    Loaded m(random_model(GPT2_TYPE_F32));
    REQUIRE_MESSAGE(m.model, m.err.message);
    const int V = m.model->n_vocab, B = gpt2__kv_block_rows;
    Session preamble(m.model, 1), a(m.model, 1), b(m.model, 1), fresh(m.model, 1), other(m.model, 1);
    eval(preamble.session, token_ids(3 * B + 2, V, 0));
    copy(a.session, preamble.session);
    copy(b.session, preamble.session);
    const std::vector<uint8_t> scene = state_of(preamble.session);
    CHECK(state_of(a.session) == scene); // a fork's state is its source's, byte for byte
    // a saved fork loads into a session holding nothing
    REQUIRE(gpt2_session_load(fresh.session, scene.data(), scene.size(), nullptr) == GPT2_OK);
    CHECK(state_of(fresh.session) == scene);
    // another state loads into a fork over its shared blocks: the other holders keep theirs
    eval(other.session, token_ids(2 * B + 9, V, 1));
    const std::vector<uint8_t> loaded = state_of(other.session);
    REQUIRE(gpt2_session_load(a.session, loaded.data(), loaded.size(), nullptr) == GPT2_OK);
    CHECK(state_of(a.session) == loaded);
    CHECK(state_of(preamble.session) == scene);
    CHECK(state_of(b.session) == scene);
    // and each goes on as its context says
    for (gpt2_session* s : {preamble.session, a.session, b.session, fresh.session}) {
        eval(s, token_ids(4, V, 2));
        CHECK(reference_error(s) <= 1e-5f);
    }
    CHECK(gpt2__kv_bytes(m.model) == distinct_block_bytes({preamble.session, a.session, b.session, fresh.session, other.session}));
}

TEST_CASE("a copy between sessions of the two cache types shares nothing and converts, as a save and a load") {
    Loaded m(random_model(GPT2_TYPE_F32));
    REQUIRE_MESSAGE(m.model, m.err.message);
    const int B = gpt2__kv_block_rows;
    Session preamble(m.model, 1, 0, 0), copied(m.model, 1, 0, 1), loaded(m.model, 1, 0, 1);
    eval(preamble.session, token_ids(2 * B + 3, m.model->n_vocab, 0));
    copy(copied.session, preamble.session);
    const std::vector<uint8_t> state = state_of(preamble.session);
    REQUIRE(gpt2_session_load(loaded.session, state.data(), state.size(), nullptr) == GPT2_OK);
    CHECK(state_of(copied.session) == state_of(loaded.session));
    for (const uint8_t* block : cache_of(copied.session).blocks)
        CHECK(std::find(cache_of(preamble.session).blocks.begin(), cache_of(preamble.session).blocks.end(), block) == cache_of(preamble.session).blocks.end());
}

TEST_CASE("sessions sharing blocks freed in every order free every block once") {
    Loaded m(random_model(GPT2_TYPE_F32));
    REQUIRE_MESSAGE(m.model, m.err.message);
    const int V = m.model->n_vocab, B = gpt2__kv_block_rows;
    std::vector<int> order = {0, 1, 2, 3};
    do {
        std::vector<gpt2_session*> s(4, nullptr);
        gpt2_session_params p = gpt2_session_default_params();
        p.n_threads = 1;
        for (gpt2_session*& x : s) REQUIRE(gpt2_session_create(m.model, &p, &x, nullptr) == GPT2_OK);
        eval(s[0], token_ids(3 * B + 1, V, 0));
        copy(s[1], s[0]);            // shares s[0]'s three full blocks
        eval(s[1], token_ids(B, V, 1));
        copy(s[2], s[1]);            // four of s[1]'s, three of them s[0]'s too
        copy(s[3], s[0]);
        REQUIRE(gpt2_session_truncate(s[3], (size_t)B + 2, nullptr) == GPT2_OK); // a private copy of the second block
        std::vector<gpt2_session*> alive = s;
        for (int i : order) {
            CHECK(gpt2__kv_bytes(m.model) == distinct_block_bytes(alive));
            gpt2_session_free(s[(size_t)i]);
            alive.erase(std::find(alive.begin(), alive.end(), s[(size_t)i]));
        }
        CHECK(gpt2__kv_bytes(m.model) == 0);
    } while (std::next_permutation(order.begin(), order.end()));
}

// The stage may hold a pass between two budgeted calls; the stepping thread may meanwhile read a
// session on it (gpt2_session_copy's source is only read). The fork gets the session as it was
// before the step, and the pass, when it goes on, writes nothing the fork holds and loses nothing
// it wrote: a block being filled is never shared.
TEST_CASE("a fork of a session whose stage pass is paused gets it as before the step, and the line ends as an unpaused one") {
    Loaded m(random_model(GPT2_TYPE_F32));
    REQUIRE_MESSAGE(m.model, m.err.message);
    const int V = m.model->n_vocab, B = gpt2__kv_block_rows;
    Session scene(m.model, 1), paused(m.model, 1), whole(m.model, 1), fork(m.model, 1);
    eval(scene.session, token_ids(B + 5, V, 0)); // a partial block, which the line's pass fills
    copy(paused.session, scene.session);
    copy(whole.session, scene.session);
    gpt2_generate_params g = gpt2_generate_default_params();
    g.max_new_tokens = 6;
    std::vector<std::vector<int32_t>> lines;
    for (gpt2_session* s : {whole.session, paused.session}) {
        gpt2_stage* stage = nullptr;
        REQUIRE(gpt2_stage_create(m.model, nullptr, &stage, nullptr) == GPT2_OK);
        REQUIRE(gpt2_stage_add(stage, s, "0123456789", &g, nullptr) == GPT2_OK);
        const int64_t budget_us = s == paused.session ? 1 : 0;
        size_t n_active = 1;
        bool forked = false;
        while (n_active > 0) {
            REQUIRE(gpt2_stage_step(stage, budget_us, &n_active, nullptr) == GPT2_OK);
            // the prompt's pass paused after its first layer's keys and values were written
            // (steps: the embeddings, ln_1, c_attn, the cache write)
            if (stage->in_flight && gpt2__cpu(stage->runner)->exec.done >= 4 && !forked) {
                copy(fork.session, s);
                forked = true;
            }
        }
        gpt2_stage_free(stage);
        CHECK(forked == (s == paused.session));
        lines.push_back(context_of(s));
    }
    CHECK(lines[0] == lines[1]);
    CHECK(logits_of(paused.session) == logits_of(whole.session));
    CHECK(logits_of(fork.session) == logits_of(scene.session)); // the prompt appended, not yet run
    eval(fork.session, {7});
    CHECK(reference_error(fork.session) <= 1e-5f);
}

// Each thread forks its own copy of the scene (whose full blocks are the scene's: every thread
// counts the same blocks up and down), diverges, truncates into the shared blocks, goes on, forks
// again and frees both, in rounds. Its logits must be those of the same calls made alone.
TEST_CASE("forks sharing blocks run, fork and are freed on several threads at once, beside a stage stepping others") {
    Loaded m(random_model(GPT2_TYPE_F32));
    REQUIRE_MESSAGE(m.model, m.err.message);
    const int V = m.model->n_vocab, B = gpt2__kv_block_rows, n_threads = 3, rounds = 4;
    Session scene(m.model, 1), x(m.model, 1), y(m.model, 1);
    eval(scene.session, token_ids(2 * B + 4, V, 0));
    std::vector<std::unique_ptr<Session>> sources;
    for (int t = 0; t < n_threads; t++) {
        sources.push_back(std::make_unique<Session>(m.model, 1));
        copy(sources.back()->session, scene.session);
    }
    const auto work = [&](int thread, std::vector<std::vector<float>>* logits) { // CHECKs only: a REQUIRE off the main thread would end the program
        gpt2_session_params p = gpt2_session_default_params();
        p.n_threads = 1 + thread % 2;
        for (int round = 0; round < rounds; round++) {
            gpt2_session *fork = nullptr, *again = nullptr;
            const std::vector<int32_t> own = token_ids(5, V, thread + 1), more = token_ids(2 * B, V, round);
            const bool ok = gpt2_session_create(m.model, &p, &fork, nullptr) == GPT2_OK && gpt2_session_create(m.model, &p, &again, nullptr) == GPT2_OK &&
                            gpt2_session_copy(fork, sources[(size_t)thread]->session, nullptr) == GPT2_OK &&
                            gpt2_session_eval(fork, own.data(), own.size(), nullptr) == GPT2_OK &&
                            gpt2_session_truncate(fork, (size_t)(B + thread), nullptr) == GPT2_OK && gpt2_session_copy(again, fork, nullptr) == GPT2_OK &&
                            gpt2_session_eval(again, more.data(), more.size(), nullptr) == GPT2_OK;
            CHECK(ok);
            if (ok) logits->push_back(std::vector<float>(gpt2_session_logits(again), gpt2_session_logits(again) + V));
            gpt2_session_free(round % 2 ? fork : again);
            gpt2_session_free(round % 2 ? again : fork);
        }
    };
    std::vector<std::vector<std::vector<float>>> alone((size_t)n_threads), together((size_t)n_threads);
    for (int t = 0; t < n_threads; t++) work(t, &alone[(size_t)t]);
    // beside them a stage steps two other forks of the scene on this thread, reading the same blocks
    copy(x.session, scene.session);
    copy(y.session, scene.session);
    gpt2_stage* stage = nullptr;
    REQUIRE(gpt2_stage_create(m.model, nullptr, &stage, nullptr) == GPT2_OK);
    gpt2_generate_params g = gpt2_generate_default_params();
    g.max_new_tokens = B;
    for (gpt2_session* s : {x.session, y.session}) REQUIRE(gpt2_stage_add(stage, s, "0123", &g, nullptr) == GPT2_OK);
    std::vector<std::thread> threads;
    for (int t = 0; t < n_threads; t++) threads.emplace_back(work, t, &together[(size_t)t]);
    size_t n_active = 1;
    gpt2_result stepped = GPT2_OK;
    while (n_active > 0 && stepped == GPT2_OK) stepped = gpt2_stage_step(stage, 0, &n_active, nullptr);
    for (std::thread& t : threads) t.join();
    gpt2_stage_free(stage);
    CHECK(stepped == GPT2_OK);
    for (int t = 0; t < n_threads; t++) CHECK(together[(size_t)t] == alone[(size_t)t]);
    CHECK(reference_error(x.session) <= 1e-5f);
    std::vector<gpt2_session*> alive = {scene.session, x.session, y.session};
    for (const auto& s : sources) alive.push_back(s->session);
    CHECK(gpt2__kv_bytes(m.model) == distinct_block_bytes(alive));
}
