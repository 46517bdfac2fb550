#ifndef GPT2__PART_CPU_BACKEND_CPU_H
#define GPT2__PART_CPU_BACKEND_CPU_H
#include "forward.h"

/* The CPU backend: sessions of gpt2__cpu_session, run by gpt2__pass on this CPU's kernels. */

static void gpt2__cpu_session_free(gpt2_session* session) {
    gpt2__cpu_session* s = gpt2__cpu(session);
    gpt2__pool_stop(&s->pool);
    gpt2__kv_free(&s->kv);
    void* buffers[] = {s->panel, s->logits, s->probs};
    for (void* b : buffers) gpt2__free_aligned(b);
    gpt2__activations_free(&s->act);
    gpt2__session_delete(s);
}

/* A new session's buffers; its KV cache takes blocks as it fills (kv_cache.h). */
static gpt2_result gpt2__cpu_session_alloc(gpt2__cpu_session* s, gpt2_error* err) {
    const gpt2_model* m = s->model;
    s->kv.model = m;
    s->kv.row_bytes = (size_t)m->n_embd * (s->kv_f16 ? 2 : 4);
    s->kv.f16 = s->kv_f16;
    struct { void** p; size_t bytes; } plan[] = {
        {(void**)&s->panel, (size_t)s->pool.n_threads * gpt2__panel_floats(std::max(m->n_embd, m->n_ff)) * 4},
        {(void**)&s->logits, (size_t)m->n_vocab * 4}, {(void**)&s->probs, (size_t)m->n_vocab * 4},
    };
    for (auto& b : plan) {
        *b.p = gpt2__malloc_aligned(b.bytes);
        if (!*b.p) return gpt2__fail(err, GPT2_ERROR_OUT_OF_MEMORY, "cannot allocate %zu bytes for the session (n_ctx %d)", b.bytes, s->n_ctx);
    }
    /* a prompt that fills the context runs in the session's own activations */
    return gpt2__activations_reserve(s, (size_t)s->n_ctx, (size_t)gpt2__decode_max_tokens, 1, err);
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

static gpt2_result gpt2__cpu_save_cache(gpt2_session* s, int n, void* rows, gpt2_error*) {
    gpt2__kv_copy_rows(&gpt2__cpu(s)->kv, n, (uint8_t*)rows, false);
    return GPT2_OK;
}

static gpt2_result gpt2__cpu_load_cache(gpt2_session* session, int n, const void* rows, const float* logits, gpt2_error* err) {
    gpt2__cpu_session* s = gpt2__cpu(session);
    if (n > 0) { /* 0: the logits alone, the cache as it is (gpt2__checkpoint_restore) */
        GPT2__TRY(gpt2__kv_prepare(&s->kv, 0, n, err));
        gpt2__kv_copy_rows(&s->kv, n, (uint8_t*)const_cast<void*>(rows), true);
    }
    if (logits) std::memcpy(s->logits, logits, (size_t)s->model->n_vocab * 4);
    return GPT2_OK;
}

/* dst's cache becomes src's rows [0, n), sharing src's full blocks (kv_cache.h). */
static gpt2_result gpt2__cpu_share_cache(gpt2_session* dst, gpt2_session* src, int n, gpt2_error* err) {
    GPT2__TRY(gpt2__kv_share(&gpt2__cpu(dst)->kv, &gpt2__cpu(src)->kv, n, err));
    std::memcpy(gpt2__cpu(dst)->logits, gpt2__cpu(src)->logits, (size_t)dst->model->n_vocab * 4);
    return GPT2_OK;
}

/* The CPU reads the file's weights in place, except where its kernels have lanes (contract.h):
   there every q8_0, q4_0, f16 and bf16 matrix is packed into them once, in one buffer (model->device_weights), and
   the matrices' pages of a mapped file are handed back to the OS (read again only if a session
   runs another kernel set), so the process keeps one copy of those weights, not two. */
static gpt2_result gpt2__cpu_pack_lanes(gpt2_model* m, gpt2_error* err) {
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

/* Loading done: the model's pool of KV cache blocks (kv_cache.h), and its lanes. */
static gpt2_result gpt2__cpu_model_attach(gpt2_model* m, gpt2_error* err) {
    m->kv_pool = gpt2__kv_pool_new(m);
    if (!m->kv_pool) return gpt2__fail(err, GPT2_ERROR_OUT_OF_MEMORY, "out of memory");
    const gpt2_result res = gpt2__cpu_pack_lanes(m, err);
    if (res != GPT2_OK) gpt2__kv_pool_free(m->kv_pool); /* the model is destroyed without model_release */
    return res;
}
static void gpt2__cpu_model_release(gpt2_model* m) {
    gpt2__free_aligned(m->device_weights);
    gpt2__kv_pool_free(m->kv_pool);
}

static void gpt2__cpu_set_budget(gpt2_session* runner, int64_t budget_us) {
    gpt2__executor* ex = &gpt2__cpu(runner)->exec;
    ex->budgeted = budget_us > 0;
    ex->deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(budget_us);
}

static const gpt2__backend* gpt2__cpu_backend() {
    static const gpt2__backend table = {"cpu", gpt2__cpu_model_attach, gpt2__cpu_model_release, gpt2__cpu_session_create, gpt2__cpu_session_free,
                                        gpt2__forward, gpt2__cpu_logits, gpt2__cpu_sample, gpt2__cpu_window_logprob, gpt2__cpu_save_cache,
                                        gpt2__cpu_load_cache, gpt2__pass, gpt2__cpu_sample_batch, gpt2__cpu_set_budget,
                                        nullptr, /* sample_chain: the chain runs on the logits where they are */
                                        gpt2__cpu_share_cache};
    return &table;
}

#endif /* GPT2__PART_CPU_BACKEND_CPU_H */
