#ifndef GPT2__PART_CPU_BACKEND_CPU_H
#define GPT2__PART_CPU_BACKEND_CPU_H
#include "forward.h"

/* The CPU backend: sessions of gpt2__cpu_session, run by gpt2__pass on this CPU's kernels. */

static void gpt2__cpu_session_free(gpt2_session* session) {
    gpt2__cpu_session* s = gpt2__cpu(session);
    gpt2__pool_stop(&s->pool);
    void* buffers[] = {s->k_cache, s->v_cache, s->panel, s->logits, s->probs};
    for (void* b : buffers) gpt2__free_aligned(b);
    gpt2__activations_free(&s->act);
    gpt2__session_delete(s);
}

static gpt2_result gpt2__cpu_session_alloc(gpt2__cpu_session* s, gpt2_error* err) {
    const gpt2_model* m = s->model;
    const size_t ctx = (size_t)s->n_ctx, C = (size_t)m->n_embd;
    const size_t cache = (size_t)m->n_layer * ctx * C * (s->kv_f16 ? 2 : 4);
    struct { void** p; size_t bytes; } plan[] = {
        {&s->k_cache, cache}, {&s->v_cache, cache},
        {(void**)&s->panel, (size_t)s->pool.n_threads * gpt2__panel_floats(std::max(m->n_embd, m->n_ff)) * 4},
        {(void**)&s->logits, (size_t)m->n_vocab * 4}, {(void**)&s->probs, (size_t)m->n_vocab * 4},
    };
    for (auto& b : plan) {
        *b.p = gpt2__malloc_aligned(b.bytes);
        if (!*b.p) return gpt2__fail(err, GPT2_ERROR_OUT_OF_MEMORY, "cannot allocate %zu bytes for the session (n_ctx %d)", b.bytes, s->n_ctx);
    }
    /* a prompt that fills the context runs in the session's own activations */
    GPT2__TRY(gpt2__activations_reserve(s, ctx, (size_t)gpt2__decode_max_tokens, 1, err));
    gpt2__advise_huge_pages(s->k_cache, cache);
    gpt2__advise_huge_pages(s->v_cache, cache);
    return GPT2_OK;
}

static gpt2_result gpt2__cpu_session_create(const gpt2_model* m, const gpt2_session_params& p, gpt2_session** out, gpt2_error* err) {
    gpt2__cpu_session* s = gpt2__session_new<gpt2__cpu_session>(m, p);
    if (!s) return gpt2__fail(err, GPT2_ERROR_OUT_OF_MEMORY, "out of memory");
    s->kernels = &gpt2__cpu_kernels();
    gpt2__pool_start(&s->pool, p.n_threads ? p.n_threads : (int)std::max(1u, std::thread::hardware_concurrency()));
    const gpt2_result res = gpt2__cpu_session_alloc(s, err);
    if (res != GPT2_OK) {
        gpt2__cpu_session_free(s);
        return res;
    }
    *out = s;
    return GPT2_OK;
}

static const float* gpt2__cpu_logits(gpt2_session* s) { return gpt2__cpu(s)->logits; }

static gpt2_result gpt2__cpu_sample(gpt2_session* session, float temperature, int top_k, int32_t* token, gpt2_error*) {
    gpt2__cpu_session* s = gpt2__cpu(session);
    *token = gpt2__sample(s->logits, s->model->n_vocab, temperature, top_k, &s->rng_state, s->probs);
    return GPT2_OK;
}

/* The sessions' draws shared among the runner's threads: each reads only its own session's
   logits, RNG and scratch. */
static gpt2_result gpt2__cpu_sample_batch(gpt2_session* runner, gpt2_session* const* sessions, size_t n, const float* temperature, const int* top_k, int32_t* tokens,
                                          gpt2_error*) {
    gpt2__parallel_for(&gpt2__cpu(runner)->pool, (int64_t)n, 1, [&](int64_t begin, int64_t end, int) {
        for (int64_t i = begin; i < end; i++) gpt2__cpu_sample(sessions[i], temperature[i], top_k[i], &tokens[i], nullptr); /* cannot fail */
    });
    return GPT2_OK;
}

/* Every position of the window from the one pass: act.xn holds their final hidden states. */
static gpt2_result gpt2__cpu_window_logprob(gpt2_session* session, const int32_t* tokens, size_t n, double* sum, gpt2_error*) {
    gpt2__cpu_session* s = gpt2__cpu(session);
    const int V = s->model->n_vocab, C = s->model->n_embd;
    *sum = 0.0;
    for (size_t t = 1; t < n; t++) {
        gpt2__head(s, s->probs, s->act.xn + (t - 1) * C, 1);
        *sum += gpt2__log_prob(s->probs, V, tokens[t]);
    }
    return GPT2_OK;
}

/* Copies rows [0, n) of every layer between the caches, (n_layer, n_ctx, C) each, and `packed`:
   the keys (n_layer, n, C), then the values. */
static void gpt2__cpu_copy_rows(const gpt2__cpu_session* s, int n, uint8_t* packed, bool to_cache) {
    if (n == 0) return; /* packed may be NULL */
    const size_t row = (size_t)s->model->n_embd * (s->kv_f16 ? 2 : 4), rows = (size_t)n * row, layer = (size_t)s->n_ctx * row;
    uint8_t* caches[2] = {(uint8_t*)s->k_cache, (uint8_t*)s->v_cache};
    for (uint8_t* cache : caches)
        for (int l = 0; l < s->model->n_layer; l++, packed += rows) {
            if (to_cache) std::memcpy(cache + l * layer, packed, rows);
            else std::memcpy(packed, cache + l * layer, rows);
        }
}

static gpt2_result gpt2__cpu_save_cache(gpt2_session* s, int n, void* rows, gpt2_error*) {
    gpt2__cpu_copy_rows(gpt2__cpu(s), n, (uint8_t*)rows, false);
    return GPT2_OK;
}

static gpt2_result gpt2__cpu_load_cache(gpt2_session* session, int n, const void* rows, const float* logits, gpt2_error*) {
    gpt2__cpu_session* s = gpt2__cpu(session);
    gpt2__cpu_copy_rows(s, n, (uint8_t*)const_cast<void*>(rows), true);
    if (logits) std::memcpy(s->logits, logits, (size_t)s->model->n_vocab * 4);
    return GPT2_OK;
}

/* The CPU reads the file's weights in place, except where its kernels have lanes (contract.h):
   there every q8_0, q4_0, f16 and bf16 matrix is packed into them once, in one buffer (model->device_weights), and
   the matrices' pages of a mapped file are handed back to the OS (read again only if a session
   runs another kernel set), so the process keeps one copy of those weights, not two. */
static gpt2_result gpt2__cpu_model_attach(gpt2_model* m, gpt2_error* err) {
    const gpt2__kernels& kernels = gpt2__cpu_kernels();
#if defined(GPT2_AMX) && defined(GPT2__X86)
    const char* refused = nullptr;
    if (gpt2__detect_x86().amx && !gpt2__amx_granted(&refused))
        gpt2__log(m->params, GPT2_LOG_WARNING, "AMX: the CPU has it but %s; products multiply on the %s kernels", refused, kernels.name);
#endif
    if (!kernels.pack_lanes) return GPT2_OK;
    gpt2__vector<gpt2__weight*> packed;
    for (gpt2__layer& L : m->layers)
        for (gpt2__weight* W : {&L.c_attn, &L.c_proj, &L.c_fc, &L.mlp_proj})
            if (gpt2__lanes_type(W->type)) packed.push_back(W);
    if (gpt2__lanes_type(m->lm_head.type)) packed.push_back(&m->lm_head);
    size_t total = 0;
    for (const gpt2__weight* W : packed) total += gpt2__lanes_bytes(*W);
    if (total == 0) return GPT2_OK;
    uint8_t* lanes = (uint8_t*)gpt2__malloc_aligned(total);
    if (!lanes) return gpt2__fail(err, GPT2_ERROR_OUT_OF_MEMORY, "cannot allocate %zu bytes for the matrices packed for this CPU", total);
    gpt2__advise_huge_pages(lanes, total);
    m->device_weights = lanes;
    for (gpt2__weight* W : packed) {
        kernels.pack_lanes(lanes, *W);
        W->lanes = lanes;
        lanes += gpt2__lanes_bytes(*W);
        gpt2__file_release_pages(m->file, W->data, (size_t)W->rows * W->row_bytes);
    }
    return GPT2_OK;
}
static void gpt2__cpu_model_release(gpt2_model* m) { gpt2__free_aligned(m->device_weights); }

static void gpt2__cpu_set_budget(gpt2_session* runner, int64_t budget_us) {
    gpt2__executor* ex = &gpt2__cpu(runner)->exec;
    ex->budgeted = budget_us > 0;
    ex->deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(budget_us);
}

static const gpt2__backend* gpt2__cpu_backend() {
    static const gpt2__backend table = {"cpu", gpt2__cpu_model_attach, gpt2__cpu_model_release, gpt2__cpu_session_create, gpt2__cpu_session_free,
                                        gpt2__forward, gpt2__cpu_logits, gpt2__cpu_sample, gpt2__cpu_window_logprob, gpt2__cpu_save_cache,
                                        gpt2__cpu_load_cache, gpt2__pass, gpt2__cpu_sample_batch, gpt2__cpu_set_budget};
    return &table;
}

#endif /* GPT2__PART_CPU_BACKEND_CPU_H */
