// The forward pass against gpt2__forward_reference (src/cpu/forward_reference.h: nanoGPT's
// model.py in plain loops, no KV cache): every kernel set this CPU runs, every weight type, f32
// and f16 KV caches, 1 and 2 threads, through the prefill and the decode paths; and the
// reference itself against nanoGPT's own logits. This file holds a private copy of the
// implementation (with GPT2_REFERENCE_FORWARD, set in tests/CMakeLists.txt) to reach the
// reference and the kernel sets.
#define GPT2_IMPLEMENTATION
#define GPT2_STATIC
#include "helpers.h"
#include "gguf_builder.h"
#include "tools/gguf_write.h"
#include <doctest/doctest.h>
#include <memory>

static std::vector<int32_t> token_ids(int n, int n_vocab) {
    std::vector<int32_t> ids;
    for (int i = 0; i < n; i++) ids.push_back((int32_t)((i * 31 + 7) % n_vocab));
    return ids;
}

// The largest logit_error allowed for a weight type, KV cache type and kernel set, with the
// largest measured on x86-64 (AVX-512, AVX2 and scalar sets alike, unless named) in brackets.
static float bound(uint32_t type, int kv_f16, const gpt2__kernels* kernels) {
    if (gpt2__int8_weights(type)) return 5e-2f; // a one-token matmul (each decode step's; the head's always) rounds its input to int8 [q8_0 1.9e-2, q4_0 2.1e-2]
    if (type == GPT2_TYPE_BF16 && kernels->matmul[GPT2__BF16_UNIT])
        return 2e-2f; // a prompt's products on the bf16 unit (or AMX's bf16 tiles) round their inputs to bf16 [4.7e-3]
    if (kv_f16) return 1e-3f; // keys and values rounded to 11 significant bits, where the reference keeps f32 [3.5e-4]
    return 1e-5f; // the same f32 arithmetic in another order; 16-bit weights turn into f32 exactly [1.6e-6]
}

// The ways to feed a context: all at once (prefill), one token a pass (decode), 2 and 3 a pass
// (decode of several queries), 5 and 11 a pass (prefill over a filled cache).
struct Passes {
    std::string name;
    std::vector<int> sizes; // in turn; 0: the whole context
};
static const Passes all_passes[] = {{"all at once", {0}}, {"one a pass", {1}}, {"2 and 3 a pass", {2, 3}}, {"5 and 11 a pass", {5, 11}}};

// Feeds `ids` to `s`, emptied first, in `passes`, and checks the logits after every pass
// against the reference's row of the pass's last token; returns the largest logit_error.
static float check_passes(gpt2_session* s, int V, const std::vector<int32_t>& ids, const std::vector<float>& want, const Passes& passes, float bound) {
    CAPTURE(passes.name);
    gpt2_session_reset(s);
    float worst = 0;
    size_t worst_at = 0;
    for (size_t fed = 0, i = 0; fed < ids.size(); i++) {
        const int size = passes.sizes[i % passes.sizes.size()];
        const size_t n = size ? std::min(ids.size() - fed, (size_t)size) : ids.size();
        REQUIRE(gpt2_session_eval(s, ids.data() + fed, n, nullptr) == GPT2_OK);
        fed += n;
        const float error = logit_error(gpt2_session_logits(s), &want[(fed - 1) * (size_t)V], V);
        if (error > worst) worst = error, worst_at = fed;
    }
    CHECK_MESSAGE(worst <= bound, "the largest error after " << worst_at << " tokens");
    return worst;
}

// check_passes for every kernel set this CPU runs, at each thread count, with a KV cache of f32
// or f16, within the set's bound; returns the largest logit_error.
static float check_kernel_sets(const gpt2_model* m, int kv_f16, std::initializer_list<int> thread_counts, const std::vector<int32_t>& ids) {
    const int V = m->n_vocab;
    const std::vector<float> want = reference_logits(m, ids);
    float worst = 0;
    const gpt2__kernels* sets[gpt2__max_kernel_sets];
    const int n_sets = kernel_sets_to_test(sets);
    for (int i = 0; i < n_sets; i++) {
        for (int threads : thread_counts) {
            const std::string kernels = sets[i]->name;
            CAPTURE(kernels); CAPTURE(threads); CAPTURE(kv_f16);
            Session s(m, threads, 0, kv_f16);
            REQUIRE(s.session);
            use_kernels(s.session, sets[i]);
            for (const Passes& p : all_passes) worst = std::max(worst, check_passes(s.session, V, ids, want, p, bound(gpt2_model_get_info(m).weight_type, kv_f16, sets[i])));
        }
    }
    return worst;
}

TEST_CASE("the reference forward gives nanoGPT's logits within 5e-5 at every position") {
    const Json ref = read_json(test_data("shakespeare_char/reference.json"));
    Model m(test_model("shakespeare_char.gguf"));
    REQUIRE_MESSAGE(m.model, m.err.message);
    const int V = m.model->n_vocab;
    float worst = 0;
    int rows = 0;
    for (const Json& prompt : ref["prompts"].array) {
        CAPTURE(prompt["name"].string);
        const std::vector<int32_t> ids = prompt["ids"].ints();
        const std::vector<float> got = reference_logits(m.model, ids);
        const std::vector<float> last = prompt["last_logits"].floats();
        REQUIRE(last.size() == (size_t)V);
        worst = std::max(worst, max_abs_diff(&got[(ids.size() - 1) * V], last.data(), (size_t)V));
        rows++;
        if (!prompt.has("all_logits")) continue;
        for (size_t t = 0; t < ids.size(); t++, rows++)
            worst = std::max(worst, max_abs_diff(&got[t * V], prompt["all_logits"][t].floats().data(), (size_t)V));
    }
    MESSAGE("largest |logit difference| from nanoGPT: " << worst << " over " << rows << " rows");
    CHECK(rows >= 10);
    CHECK(worst <= 5e-5f); // measured 6.7e-6; nanoGPT's own float32 logits are 1.1e-5 from float64
}

TEST_CASE("prefill and decode give the reference's logits: every kernel set, weight type and KV cache type, 1 and 2 threads") {
    const uint32_t types[] = {GPT2_TYPE_F32, GPT2_TYPE_F16, GPT2_TYPE_BF16, GPT2_TYPE_Q8_0, GPT2_TYPE_Q4_0};
    for (uint32_t type : types) {
        const std::string weights = gpt2__type_name(type);
        CAPTURE(weights);
        Loaded m(random_model(type));
        REQUIRE_MESSAGE(m.model, m.err.message);
        const std::vector<int32_t> ids = token_ids(37, m.model->n_vocab);
        for (int kv_f16 : {0, 1}) {
            const float worst = check_kernel_sets(m.model, kv_f16, {1, 2}, ids);
            MESSAGE(weights << " weights, " << (kv_f16 ? "f16" : "f32") << " cache: largest relative logit error " << worst);
        }
    }
}

TEST_CASE("decode splits a query's keys into ranges and merges them: the reference's logits at all 300 positions") {
    Loaded m(random_model(GPT2_TYPE_F32));
    REQUIRE_MESSAGE(m.model, m.err.message);
    const std::vector<int32_t> ids = token_ids(300, m.model->n_vocab);
    REQUIRE(gpt2__key_range(300) < 300 / 3); // the last queries' keys split into 4 ranges
    // One thread: the ranges depend on the number of keys only, and 2 or 3 threads give the same
    // bits (tests/test_attention_paths.cpp).
    for (int kv_f16 : {0, 1}) {
        const float worst = check_kernel_sets(m.model, kv_f16, {1}, ids);
        MESSAGE((kv_f16 ? "f16" : "f32") << " cache: largest relative logit error " << worst);
    }
}

TEST_CASE("a trained model, shakespeare_char (no biases, erf GELU, tied head): the reference's logits at every position to n_ctx") {
    Model m(test_model("shakespeare_char.gguf"));
    REQUIRE_MESSAGE(m.model, m.err.message);
    const float worst = check_kernel_sets(m.model, 0, {1}, token_ids(m.model->n_ctx, m.model->n_vocab));
    MESSAGE("largest relative logit error " << worst);
}

// The tokens in a session's context.
static std::vector<int32_t> context_of(const gpt2_session* s) {
    return std::vector<int32_t>(gpt2_session_tokens(s), gpt2_session_tokens(s) + gpt2_session_n_tokens(s));
}

TEST_CASE("more tokens than the context holds are cropped as the policy crops: the reference's logits of the window kept, alone and in a batch") {
    Loaded m(random_model(GPT2_TYPE_F32));
    REQUIRE_MESSAGE(m.model, m.err.message);
    const int V = m.model->n_vocab, n_ctx = 16;
    const std::vector<int32_t> ids = token_ids(23, V), before = {5, 6};
    // What each policy keeps of `before` and then `ids` given at once: EXACT the last n_ctx of
    // both (nanoGPT's crop); DISCARD with n_keep 3 the first 3, then the last 13.
    std::vector<int32_t> exact(ids.end() - n_ctx, ids.end()), discard = {5, 6, ids[0]};
    discard.insert(discard.end(), ids.end() - (n_ctx - 3), ids.end());
    for (gpt2_context_policy policy : {GPT2_CONTEXT_EXACT, GPT2_CONTEXT_DISCARD}) {
        CAPTURE(policy);
        const std::vector<int32_t>& window = policy == GPT2_CONTEXT_EXACT ? exact : discard;
        const std::vector<float> want = reference_logits(m.model, window);
        gpt2_session_params p = gpt2_session_default_params();
        p.n_threads = 2;
        p.n_ctx = n_ctx;
        p.context_policy = policy;
        p.n_keep = policy == GPT2_CONTEXT_DISCARD ? 3 : 0;
        gpt2_session *alone = nullptr, *other = nullptr;
        gpt2_error err{};
        REQUIRE(gpt2_session_create(m.model, &p, &alone, &err) == GPT2_OK);
        std::unique_ptr<gpt2_session, void (*)(gpt2_session*)> free_alone(alone, gpt2_session_free);
        REQUIRE(gpt2_session_create(m.model, &p, &other, &err) == GPT2_OK);
        std::unique_ptr<gpt2_session, void (*)(gpt2_session*)> free_other(other, gpt2_session_free);
        REQUIRE(gpt2_session_eval(alone, before.data(), before.size(), &err) == GPT2_OK);
        REQUIRE_MESSAGE(gpt2_session_eval(alone, ids.data(), ids.size(), &err) == GPT2_OK, err.message);
        CHECK(context_of(alone) == window);
        CHECK(logit_error(gpt2_session_logits(alone), &want[(size_t)(n_ctx - 1) * V], V) <= 1e-5f);
        // the same in a batch beside a session that fits
        gpt2_session_reset(alone);
        REQUIRE(gpt2_session_eval(alone, before.data(), before.size(), &err) == GPT2_OK);
        gpt2_session* both[] = {other, alone};
        const int32_t* tokens[] = {before.data(), ids.data()};
        const size_t counts[] = {before.size(), ids.size()};
        REQUIRE_MESSAGE(gpt2_batch_eval(both, tokens, counts, 2, &err) == GPT2_OK, err.message);
        CHECK(context_of(alone) == window);
        CHECK(context_of(other) == before);
        CHECK(logit_error(gpt2_session_logits(alone), &want[(size_t)(n_ctx - 1) * V], V) <= 1e-5f);
    }
}
