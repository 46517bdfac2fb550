/* The CPU forward pass: nanoGPT's model.py over plain arrays, with a KV cache.
   Shapes in comments: T new tokens, C = n_embd, F = n_ff, V = n_vocab. */

/* A CPU session: the shared part, plus the KV cache, the activations of a pass and the threads. */
struct gpt2__cpu_session : gpt2_session {
    gpt2__pool pool;
    const gpt2__kernels* kernels = nullptr;
    void* k_cache = nullptr;      /* (n_layer, n_ctx, C) float or f16: a key's heads side by side */
    void* v_cache = nullptr;
    float* x = nullptr;       /* (n_ctx, C) residual stream */
    float* xn = nullptr;      /* (n_ctx, C) normalised input of a sub-block; after the pass, ln_f output */
    float* qkv = nullptr;     /* (n_ctx, 3C) */
    float* att = nullptr;     /* (n_ctx, C) attention output, then any (T, C) temporary */
    float* fc = nullptr;      /* (n_ctx, F) */
    float* scores = nullptr;  /* (n_threads, gpt2__attention_scratch) */
    float* parts = nullptr;   /* (gpt2__decode_max_tokens, gpt2__max_key_ranges, C + 2 * n_head) attention of key ranges */
    float* panel = nullptr;   /* (n_threads, gpt2__panel_floats(F)) weight panels of the matmul kernels */
    int8_t* xq = nullptr;     /* (F) one activation row quantized for q8_0 weights */
    float* xq_scale = nullptr; /* (F / gpt2__q8_block_values) */
    float* logits = nullptr;  /* (V) */
    float* probs = nullptr;   /* (V) sampling scratch */
};

static gpt2__cpu_session* gpt2__cpu(gpt2_session* s) { return static_cast<gpt2__cpu_session*>(s); }

/* Decode attention (gpt2__is_decode) takes all heads of a query at once (gpt2__attend_rows_scalar)
   and splits its keys into up to gpt2__max_key_ranges ranges of at least gpt2__min_key_range
   keys, so threads share one query's attention and each reads whole rows of the cache (each
   range costs a single thread a little, hence the minimum). Ranges depend on the number of keys
   only, so no result depends on the thread count. */
static const int gpt2__min_key_range = 64;

static int gpt2__key_range(int n_keys) { return std::max(gpt2__min_key_range, (n_keys + gpt2__max_key_ranges - 1) / gpt2__max_key_ranges); }

/* Floats of per-thread attention scratch: what gpt2__attend_rows_scalar asks for at n_ctx keys,
   or a block of queries' scores (gpt2__query_scratch). */
static size_t gpt2__attention_scratch(int n_head, int n_ctx) { return std::max(2 * (size_t)n_head * n_ctx, gpt2__query_scratch(n_ctx)); }

/* y (T, W.rows) = x (T, W.cols) W^T + bias, split over the rows of W; with `accumulate`,
   y += instead (the residual connection); with `gelu`, GELU on the result (the MLP's c_fc).
   One parallel region for all of it. When gpt2__int8_activations says so, x is first quantized
   to int8, so the kernel can use integer dot products against q8_0 weights. */
static void gpt2__matmul(gpt2__cpu_session* s, float* y, const float* x, const gpt2__weight& W, const float* bias, int T, bool accumulate = false, bool gelu = false) {
    const gpt2__kernels* kernels = s->kernels;
    gpt2__matmul_args a{y, x, nullptr, nullptr, &W, bias, T, accumulate};
    if (gpt2__int8_activations(T, W.type)) {
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

static void gpt2__layer_norm_rows(gpt2__cpu_session* s, float* out, const float* x, const float* weight, const float* bias, int T) {
    const int C = s->model->n_embd;
    const float eps = s->model->layer_norm_eps;
    if (gpt2__is_decode(T)) { /* not worth waking the workers */
        for (int t = 0; t < T; t++) gpt2__layer_norm(out + (size_t)t * C, x + (size_t)t * C, weight, bias, C, eps);
        return;
    }
    gpt2__parallel_for(&s->pool, T, 1, [&](int64_t begin, int64_t end, int) {
        for (int64_t t = begin; t < end; t++) gpt2__layer_norm(out + t * C, x + t * C, weight, bias, C, eps);
    });
}

/* Causal self-attention of T new queries at positions pos0.. against the cache of one layer. */
template <class KV>
static void gpt2__attention(gpt2__cpu_session* s, int layer, int T, int pos0) {
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
    if (!gpt2__is_decode(T)) {
        /* a task per (head, block of queries), from a counter, as later queries have more keys;
           head by head, so consecutive tasks read the same head's keys and values, from L2 */
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
    int ranges[gpt2__decode_max_tokens], tasks = 0;
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

/* logits (V) = lm_head (V, C) h (C); padding rows past n_vocab are never computed. */
static void gpt2__head(gpt2__cpu_session* s, const float* h, float* logits) {
    gpt2__weight head = s->model->lm_head;
    head.rows = s->model->n_vocab;
    gpt2__matmul(s, logits, h, head, nullptr, 1);
}

/* The backend's run: tokens[n_cached..) at positions n_cached.. (the cache holds the positions
   before, of the same sequence). Leaves the final LayerNorm of every new position in s->xn
   (T, C) and the prediction after the last one in s->logits (V). */
static gpt2_result gpt2__forward(gpt2_session* session, gpt2_error* err) {
    gpt2__cpu_session* s = gpt2__cpu(session);
    const gpt2_model* m = s->model;
    const int C = m->n_embd, pos0 = s->n_cached, T = (int)s->tokens.size() - pos0;
    const int32_t* ids = s->tokens.data() + pos0;
    float* position = s->att; /* scratch row */
    for (int t = 0; t < T; t++) { /* x = wte[id] + wpe[pos] */
        float* x = s->x + (size_t)t * C;
        gpt2__dequantize_row(m->wte.type, m->wte.data + (size_t)ids[t] * m->wte.row_bytes, x, C);
        gpt2__dequantize_row(m->wpe.type, m->wpe.data + (size_t)(pos0 + t) * m->wpe.row_bytes, position, C);
        gpt2__add(x, position, (size_t)C);
    }
    for (int l = 0; l < m->n_layer; l++) {
        if (gpt2__abort_requested(s)) return gpt2__aborted(err);
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
    gpt2__head(s, s->xn + (size_t)(T - 1) * C, s->logits);
    return GPT2_OK;
}
