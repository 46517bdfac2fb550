/* The session and the forward pass: nanoGPT's model.py over plain arrays, with a KV cache.
   Shapes in comments: T new tokens, C = n_embd, F = n_ff, V = n_vocab. */

struct gpt2_session {
    const gpt2_model* model = nullptr;
    int n_ctx = 0;
    bool kv_f16 = false;
    gpt2__pool pool;
    const gpt2__kernels* kernels = nullptr;
    gpt2__vector<int32_t> tokens; /* the context window: at most n_ctx ids */
    int n_cached = 0;             /* tokens[0..n_cached) have their keys and values in the cache */
    void* k_cache = nullptr;      /* (n_layer, n_ctx, C) float or f16: a key's heads side by side */
    void* v_cache = nullptr;
    float* x = nullptr;       /* (n_ctx, C) residual stream */
    float* xn = nullptr;      /* (n_ctx, C) normalised input of a sub-block; after the pass, ln_f output */
    float* qkv = nullptr;     /* (n_ctx, 3C) */
    float* att = nullptr;     /* (n_ctx, C) attention output, then any (T, C) temporary */
    float* fc = nullptr;      /* (n_ctx, F) */
    float* scores = nullptr;  /* (n_threads, gpt2__attention_scratch) */
    float* parts = nullptr;   /* (gpt2__few_queries - 1, gpt2__max_key_ranges, C + 2 * n_head) attention of key ranges */
    float* panel = nullptr;   /* (n_threads, gpt2__panel_floats(F)) weight panels of the matmul kernels */
    int8_t* xq = nullptr;     /* (F) one activation row quantized for q8_0 weights */
    float* xq_scale = nullptr; /* (F / 32) */
    float* logits = nullptr;  /* (V) */
    float* probs = nullptr;   /* (V) sampling scratch */
    bool has_logits = false;
    uint64_t rng_state = 0;
    gpt2__utf8_stream stream;
    gpt2__string text;        /* the text of the token being delivered to the callback */
};

/* A pass with fewer queries than gpt2__few_queries (decode) attends with all heads at once
   (gpt2__attend_rows_scalar) and splits each query's keys into up to gpt2__max_key_ranges
   ranges of at least gpt2__min_key_range keys, so threads share one query's attention and each
   reads whole rows of the cache (splitting the heads instead, two threads ran 2x slower than
   one). Ranges cost one thread a little (Zen 4, 512 keys, with the 512-bit kernel of the time:
   1.8 ms whole, 1.9-2.2 ms in 4, 2.2-2.8 in 8). They depend on the number of keys only, so no
   result depends on the thread count. */
static const int gpt2__few_queries = 4, gpt2__min_key_range = 64;

static int gpt2__key_range(int n_keys) { return std::max(gpt2__min_key_range, (n_keys + gpt2__max_key_ranges - 1) / gpt2__max_key_ranges); }

/* Floats of per-thread attention scratch: what gpt2__attend_rows_scalar asks for at n_ctx keys,
   or a block of queries' scores (gpt2__query_scratch). */
static size_t gpt2__attention_scratch(int n_head, int n_ctx) { return std::max(2 * (size_t)n_head * n_ctx, gpt2__query_scratch(n_ctx)); }

static void gpt2__session_destroy(gpt2_session* s) {
    gpt2__pool_stop(&s->pool);
    void* buffers[] = {s->k_cache, s->v_cache, s->x, s->xn, s->qkv, s->att, s->fc, s->scores, s->parts, s->panel, s->xq, s->xq_scale, s->logits, s->probs};
    for (void* b : buffers) gpt2__free_aligned(b);
    if (s->model) s->model->n_sessions--;
    s->~gpt2_session();
    GPT2_FREE(s);
}

static gpt2_result gpt2__session_alloc(gpt2_session* s, gpt2_error* err) {
    const gpt2_model* m = s->model;
    const size_t ctx = (size_t)s->n_ctx, C = (size_t)m->n_embd;
    const size_t cache = (size_t)m->n_layer * ctx * C * (s->kv_f16 ? 2 : 4);
    struct { void** p; size_t bytes; } plan[] = {
        {&s->k_cache, cache}, {&s->v_cache, cache},
        {(void**)&s->x, ctx * C * 4}, {(void**)&s->xn, ctx * C * 4}, {(void**)&s->qkv, ctx * 3 * C * 4},
        {(void**)&s->att, ctx * C * 4}, {(void**)&s->fc, ctx * (size_t)m->n_ff * 4},
        {(void**)&s->scores, (size_t)s->pool.n_threads * gpt2__attention_scratch(m->n_head, s->n_ctx) * 4},
        {(void**)&s->parts, (size_t)(gpt2__few_queries - 1) * gpt2__max_key_ranges * (C + 2 * (size_t)m->n_head) * 4},
        {(void**)&s->panel, (size_t)s->pool.n_threads * gpt2__panel_floats(std::max(m->n_embd, m->n_ff)) * 4},
        {(void**)&s->xq, (size_t)std::max(m->n_embd, m->n_ff)}, {(void**)&s->xq_scale, (size_t)std::max(m->n_embd, m->n_ff) / 32 * 4 + 4},
        {(void**)&s->logits, (size_t)m->n_vocab * 4}, {(void**)&s->probs, (size_t)m->n_vocab * 4},
    };
    for (auto& b : plan) {
        *b.p = gpt2__malloc_aligned(b.bytes);
        if (!*b.p) return gpt2__fail(err, GPT2_ERROR_OUT_OF_MEMORY, "cannot allocate %zu bytes for the session (n_ctx %d)", b.bytes, s->n_ctx);
    }
    gpt2__advise_huge_pages(s->k_cache, cache);
    gpt2__advise_huge_pages(s->v_cache, cache);
    return GPT2_OK;
}

/* y (T, W.rows) = x (T, W.cols) W^T + bias, split over the rows of W; with `accumulate`,
   y += instead (the residual connection); with `gelu`, GELU on the result (the MLP's c_fc).
   One parallel region for all of it. A single token (decode) against q8_0 weights first
   quantizes x to int8, so the kernel can use integer dot products. */
static void gpt2__matmul(gpt2_session* s, float* y, const float* x, const gpt2__weight& W, const float* bias, int T, bool accumulate = false, bool gelu = false) {
    const gpt2__kernels* kernels = s->kernels;
    gpt2__matmul_args a{y, x, nullptr, nullptr, &W, bias, T, accumulate};
    if (W.type == GPT2_TYPE_Q8_0 && T == 1) {
        kernels->quantize_q8(s->xq, s->xq_scale, x, W.cols);
        a.xq = s->xq;
        a.xq_scale = s->xq_scale;
    }
    const size_t panel = gpt2__panel_floats(std::max(s->model->n_embd, s->model->n_ff));
    const bool gelu_tanh = s->model->gelu_tanh;
    gpt2__parallel_for(&s->pool, W.rows, 16, [&](int64_t begin, int64_t end, int thread) {
        kernels->matmul(a, begin, end, s->panel + (size_t)thread * panel);
        if (gelu)
            for (int t = 0; t < T; t++) kernels->gelu(y + (size_t)t * W.rows + begin, (size_t)(end - begin), gelu_tanh);
    });
}

static void gpt2__layer_norm_rows(gpt2_session* s, float* out, const float* x, const float* weight, const float* bias, int T) {
    const int C = s->model->n_embd;
    const float eps = s->model->layer_norm_eps;
    if (T < 4) { /* not worth waking the workers */
        for (int t = 0; t < T; t++) gpt2__layer_norm(out + (size_t)t * C, x + (size_t)t * C, weight, bias, C, eps);
        return;
    }
    gpt2__parallel_for(&s->pool, T, 1, [&](int64_t begin, int64_t end, int) {
        for (int64_t t = begin; t < end; t++) gpt2__layer_norm(out + t * C, x + t * C, weight, bias, C, eps);
    });
}

/* Causal self-attention of T new queries at positions pos0.. against the cache of one layer. */
template <class KV>
static void gpt2__attention(gpt2_session* s, int layer, int T, int pos0) {
    const gpt2_model* m = s->model;
    const int C = m->n_embd, H = m->n_head, D = C / H;
    KV* k_cache = (KV*)s->k_cache + (size_t)layer * s->n_ctx * C;
    KV* v_cache = (KV*)s->v_cache + (size_t)layer * s->n_ctx * C;
    for (int t = 0; t < T; t++) {
        const float* row = s->qkv + (size_t)t * 3 * C;
        const size_t at = (size_t)(pos0 + t) * C;
        for (int i = 0; i < C; i++) {
            gpt2__store_kv(k_cache, at + i, row[C + i]);
            gpt2__store_kv(v_cache, at + i, row[2 * C + i]);
        }
    }
    void (*attend)(float*, size_t, const float*, size_t, const KV*, const KV*, size_t, int, int, int, float*);
    void (*attend_rows)(float*, float*, const float*, const KV*, const KV*, int, int, int, float*);
    if constexpr (sizeof(KV) == 4) attend = s->kernels->attend_f32, attend_rows = s->kernels->attend_rows_f32;
    else attend = s->kernels->attend_f16, attend_rows = s->kernels->attend_rows_f16;
    const size_t scratch = gpt2__attention_scratch(H, s->n_ctx);
    if (T >= gpt2__few_queries) {
        /* a task per (head, block of queries), from a counter, as later queries have more keys;
           head by head, so consecutive tasks read the same head's keys and values, from L2
           (query by query, every task read another head's: 1,000-token prefill 5-7% slower,
           Zen 4) */
        const int blocks = (T + gpt2__query_block - 1) / gpt2__query_block;
        gpt2__parallel_for(&s->pool, (int64_t)blocks * H, 1, [&](int64_t begin, int64_t end, int thread) {
            float* scores = s->scores + (size_t)thread * scratch;
            for (int64_t task = begin; task < end; task++) {
                const int h = (int)(task / blocks), t = (int)(task % blocks) * gpt2__query_block;
                attend(s->att + (size_t)t * C + (size_t)h * D, (size_t)C, s->qkv + (size_t)t * 3 * C + (size_t)h * D, 3 * (size_t)C, k_cache + (size_t)h * D,
                       v_cache + (size_t)h * D, (size_t)C, pos0 + t + 1, std::min(gpt2__query_block, T - t), D, scores);
            }
        });
        return;
    }
    const size_t part = (size_t)C + 2 * H;
    int ranges[gpt2__few_queries], tasks = 0;
    for (int t = 0; t < T; t++) {
        const int n_keys = pos0 + t + 1;
        tasks += ranges[t] = (n_keys + gpt2__key_range(n_keys) - 1) / gpt2__key_range(n_keys);
    }
    gpt2__parallel_for(&s->pool, tasks, 1, [&](int64_t begin, int64_t end, int thread) {
        float* scores = s->scores + (size_t)thread * scratch;
        for (int64_t task = begin; task < end; task++) {
            int t = 0, r = (int)task;
            while (r >= ranges[t]) r -= ranges[t++];
            const int range = gpt2__key_range(pos0 + t + 1), first = r * range, n_keys = std::min(range, pos0 + t + 1 - first);
            float* dst = s->parts + ((size_t)t * gpt2__max_key_ranges + r) * part;
            attend_rows(dst, dst + C, s->qkv + (size_t)t * 3 * C, k_cache + (size_t)first * C, v_cache + (size_t)first * C, n_keys, H, D, scores);
        }
    });
    for (int t = 0; t < T; t++) gpt2__merge_attention(s->att + (size_t)t * C, s->parts + (size_t)t * gpt2__max_key_ranges * part, ranges[t], H, D);
}

/* Runs tokens ids[0..T) at positions pos0..pos0+T-1 (the cache holds positions 0..pos0-1 of
   the same sequence). Leaves the final LayerNorm of every new position in s->xn (T, C). */
static void gpt2__forward(gpt2_session* s, const int32_t* ids, int T, int pos0) {
    const gpt2_model* m = s->model;
    const int C = m->n_embd;
    float* position = s->att; /* scratch row */
    for (int t = 0; t < T; t++) { /* x = wte[id] + wpe[pos] */
        float* x = s->x + (size_t)t * C;
        gpt2__dequantize_row(m->wte.type, m->wte.data + (size_t)ids[t] * m->wte.row_bytes, x, C);
        gpt2__dequantize_row(m->wpe.type, m->wpe.data + (size_t)(pos0 + t) * m->wpe.row_bytes, position, C);
        gpt2__add(x, position, (size_t)C);
    }
    for (int l = 0; l < m->n_layer; l++) {
        const gpt2__layer& L = m->layers[(size_t)l];
        /* x = x + attn(ln_1(x)) */
        gpt2__layer_norm_rows(s, s->xn, s->x, L.ln_1_weight, L.ln_1_bias, T);
        gpt2__matmul(s, s->qkv, s->xn, L.c_attn, L.c_attn_bias, T);
        if (s->kv_f16) gpt2__attention<uint16_t>(s, l, T, pos0);
        else gpt2__attention<float>(s, l, T, pos0);
        gpt2__matmul(s, s->x, s->att, L.c_proj, L.c_proj_bias, T, true);
        /* x = x + mlp(ln_2(x)) */
        gpt2__layer_norm_rows(s, s->xn, s->x, L.ln_2_weight, L.ln_2_bias, T);
        gpt2__matmul(s, s->fc, s->xn, L.c_fc, L.c_fc_bias, T, false, true);
        gpt2__matmul(s, s->x, s->fc, L.mlp_proj, L.mlp_proj_bias, T, true);
    }
    gpt2__layer_norm_rows(s, s->xn, s->x, m->ln_f_weight, m->ln_f_bias, T);
}

/* logits (V) = lm_head (V, C) h (C); padding rows past n_vocab are never computed. */
static void gpt2__head(gpt2_session* s, const float* h, float* logits) {
    gpt2__weight head = s->model->lm_head;
    head.rows = s->model->n_vocab;
    gpt2__matmul(s, logits, h, head, nullptr, 1);
}

static gpt2_result gpt2__check_tokens(const gpt2_model* m, const int32_t* ids, size_t n, gpt2_error* err) {
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= m->n_vocab)
            return gpt2__fail(err, GPT2_ERROR_BAD_TOKEN, "token %zu is %d, outside the vocabulary [0, %d)", i, (int)ids[i], m->n_vocab);
    return GPT2_OK;
}

/* Appends tokens to the context window and runs the model over what the cache lacks. When the
   window would exceed n_ctx, it keeps the last n_ctx tokens and recomputes them all, exactly
   as nanoGPT's generate() crops its input. Afterwards xn holds the new positions' final
   hidden states and s->logits the prediction after the last token. */
static gpt2_result gpt2__session_append(gpt2_session* s, const int32_t* ids, size_t n, gpt2_error* err) {
    GPT2__TRY(gpt2__check_tokens(s->model, ids, n, err));
    if (n > (size_t)s->n_ctx)
        return gpt2__fail(err, GPT2_ERROR_CONTEXT_FULL, "%zu tokens given at once, but the context holds %d; split them or use a shorter prompt", n, s->n_ctx);
    if (n == 0) return GPT2_OK;
    const size_t total = s->tokens.size() + n;
    if (total > (size_t)s->n_ctx) {
        const size_t drop = total - (size_t)s->n_ctx;
        s->tokens.erase(s->tokens.begin(), s->tokens.begin() + (ptrdiff_t)drop);
        s->n_cached = 0; /* every position moved: the cache is no longer valid */
    }
    s->tokens.insert(s->tokens.end(), ids, ids + n);
    const int T = (int)s->tokens.size() - s->n_cached;
    gpt2__forward(s, s->tokens.data() + s->n_cached, T, s->n_cached);
    s->n_cached = (int)s->tokens.size();
    gpt2__head(s, s->xn + (size_t)(T - 1) * s->model->n_embd, s->logits);
    s->has_logits = true;
    return GPT2_OK;
}

/* log softmax(logits)[id], in double. */
static double gpt2__log_prob(const float* logits, int n, int32_t id) {
    double max_logit = logits[0];
    for (int i = 1; i < n; i++) max_logit = std::max(max_logit, (double)logits[i]);
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += std::exp((double)logits[i] - max_logit);
    return (double)logits[id] - max_logit - std::log(sum);
}
