#ifndef GPT2__PART_CUDA_FORWARD_CUH
#define GPT2__PART_CUDA_FORWARD_CUH
#include "persistent.cuh"
#include "fused.cuh"

/* The CUDA forward pass: a prompt as cuBLAS products with our kernels between them, a token as
   one replay of the captured graph of one-token kernels; the logits, sampling, scoring and the
   cache's rows for the session's state. */

/* ---- Forward pass ------------------------------------------------------------------------- */

static cudaDataType_t gpt2__cuda_type(const gpt2__cuda_model* dm) { return dm->bf16 ? CUDA_R_16BF : CUDA_R_16F; }

/* Y (T, N) row-major (f32, or 16-bit when out16) = X (T, K) W^T, W (N, K) row-major; beta 1
   accumulates into Y (the residual stream). */
static gpt2_result gpt2__cuda_linear(gpt2__cuda_session* s, const void* W, const void* X, void* Y, bool out16, int N, int T, int K, float beta, gpt2_error* err) {
    const float alpha = 1.0f;
    const cudaDataType_t t = gpt2__cuda_type(s->dm);
    GPT2__CUBLAS_TRY(cublasGemmEx(s->blas, CUBLAS_OP_T, CUBLAS_OP_N, N, T, K, &alpha, W, t, K, X, t, K, &beta, Y, out16 ? t : CUDA_R_32F, N,
                                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return GPT2_OK;
}

/* Launches a kernel, with programmatic dependent launch when `pdl` (see gpt2__grid_wait). */
template <class... Params, class... Args>
static cudaError_t gpt2__launch(bool pdl, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, Args... args) {
    cudaLaunchConfig_t config = {};
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = smem;
    config.stream = stream;
    cudaLaunchAttribute attribute[1];
    attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute[0].val.programmaticStreamSerializationAllowed = 1;
    config.attrs = attribute;
    config.numAttrs = pdl ? 1 : 0;
    return cudaLaunchKernelEx(&config, kernel, args...);
}

static int gpt2__cuda_grid(size_t n, int threads) { return (int)std::min<size_t>((n + threads - 1) / threads, 65535); }

/* Rows [row, row + T) of a pass through the cuBLAS path: one session's new tokens, at positions
   pos0.. of its KV cache. */
struct gpt2__cuda_part {
    gpt2__cuda_session* s;
    int row, T, pos0;
};

/* The R tokens a.ids[0..R) through the whole model with cuBLAS, on the stream and cuBLAS handle
   of `r`: the prompt path (any T), and the batched pass (gpt2__cuda_run_batch). Each weight
   product is one GEMM over all R rows and LayerNorm, bias and GELU one launch each; embedding
   and attention go part by part, each part against its own session's cache, in that session's
   attention scratch (scores, probs16). A prompt is one part. Leaves the final LayerNorm of every
   row in a.xn16 (R, C). */
template <class TT>
static gpt2_result gpt2__cuda_forward_rows(gpt2__cuda_session* r, const gpt2__cuda_rows& a, const gpt2__cuda_part* parts, size_t n_parts, int R, gpt2_error* err) {
    const gpt2_model* m = r->model;
    const gpt2__cuda_model* dm = r->dm;
    const int C = m->n_embd, F = m->n_ff, H = m->n_head, D = C / H;
    const float eps = m->layer_norm_eps;
    cudaStream_t st = r->stream;
    const size_t ln_smem = (size_t)C * 4;
    for (size_t i = 0; i < n_parts; i++) {
        const gpt2__cuda_part& p = parts[i];
        gpt2__embed_kernel<TT><<<p.T, 256, 0, st>>>(a.x + (size_t)p.row * C, (const TT*)dm->wte, (const TT*)dm->wpe, a.ids + p.row, nullptr, p.pos0, C);
        GPT2__LAUNCHED("embed");
    }
    const float* pending_bias = nullptr; /* the bias of the last residual product, added with the next LayerNorm */
    const cudaDataType_t t16 = gpt2__cuda_type(dm);
    for (int l = 0; l < m->n_layer; l++) {
        const gpt2__cuda_layer& G = dm->layers[(size_t)l];
        gpt2__add_layer_norm_kernel<TT><<<R, 256, ln_smem, st>>>(a.x, pending_bias, G.ln_1_w, G.ln_1_b, (TT*)a.xn16, C, eps);
        GPT2__LAUNCHED("layer norm");
        GPT2__TRY(gpt2__cuda_linear(r, G.c_attn, a.xn16, a.qkv, false, 3 * C, R, C, 0.0f, err));
        for (size_t i = 0; i < n_parts; i++) {
            const gpt2__cuda_part& p = parts[i];
            gpt2__cuda_session* s = p.s;
            const int T = p.T, Lk = p.pos0 + T;
            TT* kc = (TT*)s->k_cache + (size_t)l * s->n_ctx * C;
            TT* vc = (TT*)s->v_cache + (size_t)l * s->n_ctx * C;
            TT* q16 = (TT*)a.q16 + (size_t)p.row * C;
            TT* att16 = (TT*)a.att16 + (size_t)p.row * C;
            gpt2__qkv_split_kernel<TT><<<gpt2__cuda_grid((size_t)T * 3 * C, 256), 256, 0, st>>>(a.qkv + (size_t)p.row * 3 * C, G.c_attn_b, q16, kc, vc, T, C, p.pos0);
            GPT2__LAUNCHED("qkv split");
            /* scores_h (T, Lk) = q_h k_h^T; column-major: S^T (Lk, T) = K_h (Lk, D) x Q_h^T */
            const float one = 1.0f, zero = 0.0f;
            GPT2__CUBLAS_TRY(cublasGemmStridedBatchedEx(r->blas, CUBLAS_OP_T, CUBLAS_OP_N, Lk, T, D, &one, kc, t16, C, D, q16, t16, C, D, &zero, s->scores, CUDA_R_32F,
                                                        Lk, (long long)T * Lk, H, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
            gpt2__causal_softmax_kernel<TT><<<H * T, 256, 0, st>>>(s->scores, (TT*)s->probs16, T, Lk, p.pos0, 1.0f / std::sqrt((float)D));
            GPT2__LAUNCHED("softmax");
            /* att_h (T, D) = P_h (T, Lk) v_h (Lk, D); column-major: O^T (D, T) = V^T (D, Lk) P^T (Lk, T) */
            GPT2__CUBLAS_TRY(cublasGemmStridedBatchedEx(r->blas, CUBLAS_OP_N, CUBLAS_OP_N, D, T, Lk, &one, vc, t16, C, D, s->probs16, t16, Lk, (long long)T * Lk, &zero,
                                                        att16, t16, C, D, H, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        }
        GPT2__TRY(gpt2__cuda_linear(r, G.c_proj, a.att16, a.x, false, C, R, C, 1.0f, err)); /* x += att W^T */
        gpt2__add_layer_norm_kernel<TT><<<R, 256, ln_smem, st>>>(a.x, G.c_proj_b, G.ln_2_w, G.ln_2_b, (TT*)a.xn16, C, eps);
        GPT2__LAUNCHED("layer norm");
        GPT2__TRY(gpt2__cuda_linear(r, G.c_fc, a.xn16, a.fc, false, F, R, C, 0.0f, err));
        gpt2__bias_gelu_kernel<TT><<<gpt2__cuda_grid((size_t)R * F, 256), 256, 0, st>>>(a.fc, G.c_fc_b, (TT*)a.fc16, (size_t)R * F, F, m->gelu_tanh ? 1 : 0);
        GPT2__LAUNCHED("gelu");
        GPT2__TRY(gpt2__cuda_linear(r, G.mlp_proj, a.fc16, a.x, false, C, R, F, 1.0f, err));
        pending_bias = G.mlp_proj_b;
    }
    gpt2__add_layer_norm_kernel<TT><<<R, 256, ln_smem, st>>>(a.x, pending_bias, dm->ln_f_w, dm->ln_f_b, (TT*)a.xn16, C, eps);
    GPT2__LAUNCHED("layer norm");
    return GPT2_OK;
}

/* The kernels of one token at position step_d[0], token step_d[1]; logits to logits_d. Reads
   its position and token from device memory, so one captured graph serves every step. */
template <class TT>
static gpt2_result gpt2__cuda_forward_token(gpt2__cuda_session* s, gpt2_error* err) {
    const gpt2_model* m = s->model;
    const gpt2__cuda_model* dm = s->dm;
    const int C = m->n_embd, F = m->n_ff, H = m->n_head, D = C / H;
    cudaStream_t st = s->stream;
#if defined(GPT2_CUDA_PERSISTENT_DECODE)
    if (dm->persistent) return gpt2__cuda_launch_persistent<TT>(s, err);
#endif
    const int warps = 8, cap = dm->n_sm * 8;
    const bool pdl = dm->pdl;
    /* one product of W (16-bit, or its 8-bit copy W8 where the model decodes q8_0 in 8 bits) */
    auto gemv = [&](void (*kernel)(gpt2__gemv_args), void (*kernel_q8)(gpt2__gemv_args), const void* W, const gpt2__cuda_q8& W8, gpt2__gemv_args a) {
        const bool q8 = dm->q8_decode && W8.values;
        a.W = q8 ? (const void*)W8.values : W;
        a.scales = q8 ? W8.scales : nullptr;
        const int grid = std::max(1, std::min((a.N + warps - 1) / warps, cap));
        const size_t smem = q8 ? gpt2__gemv_q8_smem(a.K, a.ln_w != nullptr) : (size_t)a.K * 4 * (a.ln_w ? 3 : 1);
        return gpt2__launch(pdl, q8 ? kernel_q8 : kernel, dim3(grid), dim3(256), smem, st, a);
    };
    gpt2__embed_kernel<TT><<<1, 256, 0, st>>>(s->x, (const TT*)dm->wte, (const TT*)dm->wpe, s->step_d + 1, s->step_d, 0, C);
    GPT2__LAUNCHED("embed");
    for (int l = 0; l < m->n_layer; l++) {
        const gpt2__cuda_layer& G = dm->layers[(size_t)l];
        gpt2__gemv_args a{};
        a.eps = m->layer_norm_eps;
        a.C = C;
        a.pos = s->step_d;
        a.gelu_tanh = m->gelu_tanh ? 1 : 0;
        /* q, k, v = c_attn(ln_1(x)) + bias; k and v straight into the cache */
        a.N = 3 * C; a.K = C; a.in = s->x; a.ln_w = G.ln_1_w; a.ln_b = G.ln_1_b; a.bias = G.c_attn_b; a.out = s->q1;
        a.k_cache = (TT*)s->k_cache + (size_t)l * s->n_ctx * C;
        a.v_cache = (TT*)s->v_cache + (size_t)l * s->n_ctx * C;
        GPT2__CUDA_TRY(gemv(gpt2__gemv_kernel<TT, GPT2__EPI_QKV>, gpt2__gemv_q8_kernel<TT, GPT2__EPI_QKV>, G.c_attn, G.c_attn_q8, a));
        const float scale = 1.0f / std::sqrt((float)D);
        if (dm->fused_attn_proj && !(dm->q8_decode && G.c_proj_q8.values)) { /* attention, then x += c_proj(att) + bias, in one kernel */
            const gpt2__attn_proj_args p{G.c_proj, G.c_proj_b, s->x, s->proj_part, s->proj_ticket};
            GPT2__CUDA_TRY(gpt2__launch(pdl, gpt2__attn_proj_decode_kernel<TT>, dim3(H, s->n_splits), dim3(GPT2__ATTN_THREADS), 0, st, (const float*)s->q1,
                                        (const TT*)a.k_cache, (const TT*)a.v_cache, (const int*)s->step_d, s->part, s->tickets, s->att1, C, D, s->n_splits, scale, p));
        } else {
            GPT2__CUDA_TRY(gpt2__launch(pdl, gpt2__attn_decode_kernel<TT>, dim3(H, s->n_splits), dim3(GPT2__ATTN_THREADS), 0, st, (const float*)s->q1, (const TT*)a.k_cache,
                                        (const TT*)a.v_cache, (const int*)s->step_d, s->part, s->tickets, s->att1, C, D, s->n_splits, scale));
            /* x += c_proj(att) + bias */
            a.N = C; a.K = C; a.in = s->att1; a.ln_w = nullptr; a.ln_b = nullptr; a.bias = G.c_proj_b; a.out = s->x;
            GPT2__CUDA_TRY(gemv(gpt2__gemv_kernel<TT, GPT2__EPI_RESIDUAL>, gpt2__gemv_q8_kernel<TT, GPT2__EPI_RESIDUAL>, G.c_proj, G.c_proj_q8, a));
        }
        /* fc = gelu(c_fc(ln_2(x)) + bias) */
        a.N = F; a.K = C; a.in = s->x; a.ln_w = G.ln_2_w; a.ln_b = G.ln_2_b; a.bias = G.c_fc_b; a.out = s->fc1;
        GPT2__CUDA_TRY(gemv(gpt2__gemv_kernel<TT, GPT2__EPI_GELU>, gpt2__gemv_q8_kernel<TT, GPT2__EPI_GELU>, G.c_fc, G.c_fc_q8, a));
        /* x += mlp c_proj(fc) + bias */
        a.N = C; a.K = F; a.in = s->fc1; a.ln_w = nullptr; a.ln_b = nullptr; a.bias = G.mlp_proj_b; a.out = s->x;
        GPT2__CUDA_TRY(gemv(gpt2__gemv_kernel<TT, GPT2__EPI_RESIDUAL>, gpt2__gemv_q8_kernel<TT, GPT2__EPI_RESIDUAL>, G.mlp_proj, G.mlp_proj_q8, a));
    }
    gpt2__gemv_args a{};
    a.N = m->n_vocab; a.K = C; a.in = s->x; a.ln_w = dm->ln_f_w; a.ln_b = dm->ln_f_b; a.eps = m->layer_norm_eps; a.out = s->logits_d;
    GPT2__CUDA_TRY(gemv(gpt2__gemv_kernel<TT, GPT2__EPI_STORE>, gpt2__gemv_q8_kernel<TT, GPT2__EPI_STORE>, dm->lm_head, dm->lm_head_q8, a));
    return GPT2_OK;
}

/* Queues one token's pass: a replay of the captured graph (captured on first use). */
static gpt2_result gpt2__cuda_launch_token(gpt2__cuda_session* s, gpt2_error* err) {
    if (!s->graph_exec && !s->graph_failed) {
        gpt2_result res = GPT2_OK;
        GPT2__CUDA_TRY(cudaStreamBeginCapture(s->stream, cudaStreamCaptureModeThreadLocal));
        res = s->dm->bf16 ? gpt2__cuda_forward_token<__nv_bfloat16>(s, err) : gpt2__cuda_forward_token<__half>(s, err);
        cudaGraph_t graph = nullptr;
        cudaError_t e = cudaStreamEndCapture(s->stream, &graph);
        if (res != GPT2_OK) {
            if (graph) cudaGraphDestroy(graph);
            graph = nullptr;
            if (!s->dm->persistent) return res;
            /* a cooperative launch that the capture refused: launch it directly from now on */
            if (e == cudaSuccess) e = cudaErrorStreamCaptureUnsupported;
        }
        if (e == cudaSuccess) e = cudaGraphInstantiate(&s->graph_exec, graph, 0);
        if (e != cudaSuccess) { /* run the kernels directly from now on */
            cudaGetLastError();
            s->graph_failed = true;
            s->graph_exec = nullptr;
            gpt2__log(s->model->params, GPT2_LOG_WARNING, "CUDA: graph capture failed (%s); launching kernels directly", cudaGetErrorString(e));
        }
        s->graph = graph;
    }
    if (s->graph_exec) {
        GPT2__CUDA_TRY(cudaGraphLaunch(s->graph_exec, s->stream));
        return GPT2_OK;
    }
    return s->dm->bf16 ? gpt2__cuda_forward_token<__nv_bfloat16>(s, err) : gpt2__cuda_forward_token<__half>(s, err);
}

/* Runs tokens[n_cached..) at positions n_cached.. and leaves the last position's logits in
   logits_d. One token at a time goes through the graph; more through the prompt path. */
static gpt2_result gpt2__cuda_run(gpt2__cuda_session* s, gpt2_error* err) {
    const gpt2_model* m = s->model;
    const int T = (int)s->tokens.size() - s->n_cached, pos0 = s->n_cached;
    if (T == 1 && s->dm->fast_decode) {
        gpt2__set_step_kernel<<<1, 1, 0, s->stream>>>(s->step_d, pos0, s->tokens.back());
        GPT2__LAUNCHED("set step");
        GPT2__TRY(gpt2__cuda_launch_token(s, err));
    } else {
        GPT2__CUDA_TRY(cudaMemcpyAsync(s->ids_d, s->tokens.data() + pos0, (size_t)T * 4, cudaMemcpyHostToDevice, s->stream));
        const gpt2__cuda_rows own = gpt2__cuda_own_rows(s);
        const gpt2__cuda_part prompt{s, 0, T, pos0};
        GPT2__TRY(s->dm->bf16 ? gpt2__cuda_forward_rows<__nv_bfloat16>(s, own, &prompt, 1, T, err) : gpt2__cuda_forward_rows<__half>(s, own, &prompt, 1, T, err));
        const size_t C = (size_t)m->n_embd;
        const void* last = (const uint8_t*)s->xn16 + (size_t)(T - 1) * C * 2;
        GPT2__TRY(gpt2__cuda_linear(s, s->dm->lm_head, last, s->logits_d, false, m->n_vocab, 1, (int)C, 0.0f, err));
    }
    return GPT2_OK;
}

/* True when the pass gpt2__cuda_sample queued computes what is to run now: the one new token, at
   the position it was queued for. The queued pass is spent either way. */
static bool gpt2__cuda_take_pending(gpt2__cuda_session* s) {
    if (!s->pending) return false;
    s->pending = false;
    return s->tokens.size() == (size_t)s->n_cached + 1 && s->n_cached == s->pending_pos && s->tokens.back() == s->pending_token;
}

/* The backend's run: the shared part appended the tokens; n_cached says where they start. */
static gpt2_result gpt2__cuda_run_session(gpt2_session* session, gpt2_error* err) {
    gpt2__cuda_session* s = gpt2__cuda(session);
    GPT2__CUDA_TRY(cudaSetDevice(s->dm->device));
    cudaGetLastError();
    if (gpt2__abort_requested(s)) { /* one pass is one graph or one prompt: polled before it */
        if (s->pending) { /* the queued pass overwrote the logits: an aborted run leaves them as they were */
            GPT2__CUDA_TRY(cudaMemcpyAsync(s->logits_d, s->logits_d + s->model->n_vocab, (size_t)s->model->n_vocab * 4, cudaMemcpyDeviceToDevice, s->stream));
            GPT2__CUDA_TRY(cudaStreamSynchronize(s->stream));
        }
        s->pending = false;
        return gpt2__aborted(err);
    }
    s->logits_on_host = false;
    if (gpt2__cuda_take_pending(s)) return GPT2_OK;
    GPT2__TRY(gpt2__cuda_run(s, err));
    const cudaError_t e = cudaStreamSynchronize(s->stream);
    return e == cudaSuccess ? GPT2_OK : gpt2__cuda_fail(err, e, "the forward pass");
}

static const float* gpt2__cuda_logits(gpt2_session* session) {
    gpt2__cuda_session* s = gpt2__cuda(session);
    if (!s->logits_on_host) {
        cudaSetDevice(s->dm->device);
        if (cudaMemcpyAsync(s->logits, s->logits_d, (size_t)s->model->n_vocab * 4, cudaMemcpyDeviceToHost, s->stream) != cudaSuccess ||
            cudaStreamSynchronize(s->stream) != cudaSuccess) {
            cudaGetLastError();
            return nullptr;
        }
        s->logits_on_host = true;
    }
    return s->logits;
}

/* The many-block sampler's arguments for a draw from logits_d with the session's RNG, the token
   to token_h; step (when not NULL) gets the next position and the token. */
static gpt2__fs_args gpt2__cuda_fs_args(gpt2__cuda_session* s, float temperature, int top_k, float top_p, const uint32_t* allowed, int* step) {
    gpt2__fs_args a{};
    a.logits = s->logits_d;
    a.n = s->model->n_vocab;
    a.allowed = allowed;
    a.temperature = temperature;
    a.top_k = top_k;
    a.top_p = top_p;
    a.rng = s->rng_state;
    a.token_out = s->token_h_dev;
    a.step = step;
    a.next_pos = s->n_cached;
    return a;
}

/* Queues the draw of the next token from logits_d (temperature and top_k) into token_h and
   step_d: the many-block sampler where the model uses it and it serves the parameters, else the
   one-block kernel. */
static gpt2_result gpt2__cuda_queue_sample(gpt2__cuda_session* s, float temperature, int top_k, gpt2_error* err) {
    const int n = s->model->n_vocab;
    if (s->dm->fast_sampler && gpt2__fs_serves(n, temperature, top_k)) {
        GPT2__CUDA_TRY(gpt2__fs_launch(gpt2__cuda_fs_args(s, temperature, top_k, 0.0f, nullptr, s->step_d), s->fs, s->stream));
        return GPT2_OK;
    }
    gpt2__sample_kernel<<<1, GPT2__SAMPLE_THREADS, 0, s->stream>>>(s->logits_d, n, temperature, top_k, s->rng_state, s->token_h_dev, s->step_d, s->n_cached);
    GPT2__LAUNCHED("sample");
    return GPT2_OK;
}

/* Samples on the GPU from logits_d. When the token will simply extend the context, its pass
   is queued right behind the sampler, so the GPU works while the host handles the token. */
static gpt2_result gpt2__cuda_sample(gpt2_session* session, float temperature, int top_k, int32_t* token, gpt2_error* err) {
    gpt2__cuda_session* s = gpt2__cuda(session);
    GPT2__CUDA_TRY(cudaSetDevice(s->dm->device));
    cudaGetLastError();
    const bool extend = s->dm->fast_decode && s->tokens.size() == (size_t)s->n_cached && s->tokens.size() < (size_t)s->n_ctx;
    GPT2__TRY(gpt2__cuda_queue_sample(s, temperature, top_k, err));
    GPT2__CUDA_TRY(cudaEventRecord(s->token_ready, s->stream));
    s->pending = false;
    if (extend) { /* the logits the queued pass replaces, for an abort before it is taken (logits_d's second row: scoring's scratch) */
        GPT2__CUDA_TRY(cudaMemcpyAsync(s->logits_d + s->model->n_vocab, s->logits_d, (size_t)s->model->n_vocab * 4, cudaMemcpyDeviceToDevice, s->stream));
        GPT2__TRY(gpt2__cuda_launch_token(s, err));
    }
    GPT2__CUDA_TRY(cudaEventSynchronize(s->token_ready));
    *token = *s->token_h;
    if (!(temperature == 0.0f || top_k == 1)) gpt2__rng_next(&s->rng_state); /* the kernel drew one number */
    s->pending = extend;
    s->pending_token = *token;
    s->pending_pos = s->n_cached;
    return GPT2_OK;
}

/* The backend's sample_chain (in the table with GPT2_CUDA_FAST_SAMPLER): the host chain's draw
   with the grammar's mask, top_k, top_p and temperature, by the many-block sampler, so only the
   mask goes to the GPU and only the token comes back. GPT2__NOT_HANDLED where the sampler leaves
   the draw to the host (gpt2__fast_sample_kernel says when). */
[[maybe_unused]] static gpt2_result gpt2__cuda_sample_chain(gpt2_session* session, float temperature, int top_k, float top_p, const uint32_t* allowed, int32_t* token,
                                                            gpt2_error* err) {
    gpt2__cuda_session* s = gpt2__cuda(session);
    const int n = s->model->n_vocab;
    if (!s->dm->fast_sampler || !gpt2__fs_serves(n, temperature, top_k)) return GPT2__NOT_HANDLED;
    GPT2__CUDA_TRY(cudaSetDevice(s->dm->device));
    cudaGetLastError();
    if (allowed) GPT2__CUDA_TRY(cudaMemcpyAsync(s->allowed_d, allowed, ((size_t)n + 31) / 32 * 4, cudaMemcpyHostToDevice, s->stream));
    GPT2__CUDA_TRY(gpt2__fs_launch(gpt2__cuda_fs_args(s, temperature, top_k, top_p, allowed ? s->allowed_d : nullptr, nullptr), s->fs, s->stream));
    GPT2__CUDA_TRY(cudaEventRecord(s->token_ready, s->stream));
    GPT2__CUDA_TRY(cudaEventSynchronize(s->token_ready));
    if (*s->token_h < 0) return GPT2__NOT_HANDLED;
    *token = *s->token_h;
    if (!(temperature == 0.0f || top_k == 1)) gpt2__rng_next(&s->rng_state); /* the kernel drew one number */
    return GPT2_OK;
}

/* Log-probabilities of tokens[1..n) after the prompt pass over tokens[0..n) (xn16 holds every
   position's final hidden state): the head over GPT2__SCORE_ROWS rows at a time. */
static gpt2_result gpt2__cuda_window_logprob(gpt2_session* session, const int32_t* tokens, size_t n, double* sum, gpt2_error* err) {
    gpt2__cuda_session* s = gpt2__cuda(session);
    *sum = 0.0;
    if (n < 2) return GPT2_OK;
    const gpt2_model* m = s->model;
    const size_t C = (size_t)m->n_embd;
    GPT2__CUDA_TRY(cudaMemcpyAsync(s->ids_d, tokens, n * 4, cudaMemcpyHostToDevice, s->stream));
    for (size_t r0 = 0; r0 + 1 < n; r0 += GPT2__SCORE_ROWS) {
        const int rows = (int)std::min<size_t>(GPT2__SCORE_ROWS, n - 1 - r0);
        GPT2__TRY(gpt2__cuda_linear(s, s->dm->lm_head, (const uint8_t*)s->xn16 + r0 * C * 2, s->logits_d, false, m->n_vocab, rows, (int)C, 0.0f, err));
        gpt2__log_prob_kernel<<<rows, 256, 0, s->stream>>>(s->logits_d, m->n_vocab, s->ids_d + r0 + 1, s->logp_d + r0);
        GPT2__LAUNCHED("log prob");
    }
    gpt2__vector<double> logp(n - 1);
    GPT2__CUDA_TRY(cudaMemcpyAsync(logp.data(), s->logp_d, (n - 1) * 8, cudaMemcpyDeviceToHost, s->stream));
    GPT2__CUDA_TRY(cudaStreamSynchronize(s->stream));
    for (double v : logp) *sum += v;
    /* logits_d held the head of other rows: put back the last position's */
    GPT2__TRY(gpt2__cuda_linear(s, s->dm->lm_head, (const uint8_t*)s->xn16 + (n - 1) * C * 2, s->logits_d, false, m->n_vocab, 1, (int)C, 0.0f, err));
    GPT2__CUDA_TRY(cudaStreamSynchronize(s->stream));
    s->logits_on_host = false;
    return GPT2_OK;
}

/* Rows [0, n) of every layer's 16-bit caches to or from `packed` host memory in the state's
   format (gpt2__backend.save_cache): the keys (n_layer, n, C), then the values; an f16 cache's
   as they are, a bf16 cache's as f32 (exact; on the way back rounded to nearest even, as the
   GPU rounds what it writes). */
static gpt2_result gpt2__cuda_copy_rows(gpt2__cuda_session* s, int n, uint8_t* packed, bool to_device, gpt2_error* err) {
    const size_t row = (size_t)s->model->n_embd * 2, rows = (size_t)n * row, layer = (size_t)s->n_ctx * row, L = (size_t)s->model->n_layer;
    const size_t values = 2 * L * (size_t)n * (size_t)s->model->n_embd;
    gpt2__vector<uint16_t> bf16; /* a bf16 cache's rows on the host */
    uint8_t* raw = packed;
    if (s->dm->bf16) {
        bf16.resize(values);
        raw = (uint8_t*)bf16.data();
        if (to_device)
            for (size_t i = 0; i < values; i++) bf16[i] = gpt2__f32_to_bf16(((const float*)packed)[i]);
    }
    void* caches[2] = {s->k_cache, s->v_cache};
    uint8_t* at = raw;
    for (void* cache : caches) {
        if (to_device) GPT2__CUDA_TRY(cudaMemcpy2DAsync(cache, layer, at, rows, rows, L, cudaMemcpyHostToDevice, s->stream));
        else GPT2__CUDA_TRY(cudaMemcpy2DAsync(at, rows, cache, layer, rows, L, cudaMemcpyDeviceToHost, s->stream));
        at += L * rows;
    }
    GPT2__CUDA_TRY(cudaStreamSynchronize(s->stream)); /* the staging buffer goes at the return */
    if (s->dm->bf16 && !to_device)
        for (size_t i = 0; i < values; i++) ((float*)packed)[i] = gpt2__bf16_to_f32(bf16[i]);
    return GPT2_OK;
}

static gpt2_result gpt2__cuda_save_cache(gpt2_session* session, int n, void* rows, gpt2_error* err) {
    gpt2__cuda_session* s = gpt2__cuda(session);
    GPT2__CUDA_TRY(cudaSetDevice(s->dm->device));
    if (n) GPT2__TRY(gpt2__cuda_copy_rows(s, n, (uint8_t*)rows, false, err));
    GPT2__CUDA_TRY(cudaStreamSynchronize(s->stream));
    return GPT2_OK;
}

static gpt2_result gpt2__cuda_load_cache(gpt2_session* session, int n, const void* rows, const float* logits, gpt2_error* err) {
    gpt2__cuda_session* s = gpt2__cuda(session);
    GPT2__CUDA_TRY(cudaSetDevice(s->dm->device));
    s->pending = false;
    if (n) GPT2__TRY(gpt2__cuda_copy_rows(s, n, (uint8_t*)const_cast<void*>(rows), true, err));
    if (logits) {
        GPT2__CUDA_TRY(cudaMemcpyAsync(s->logits_d, logits, (size_t)s->model->n_vocab * 4, cudaMemcpyHostToDevice, s->stream));
        s->logits_on_host = false;
    }
    GPT2__CUDA_TRY(cudaStreamSynchronize(s->stream));
    return GPT2_OK;
}

#endif /* GPT2__PART_CUDA_FORWARD_CUH */
