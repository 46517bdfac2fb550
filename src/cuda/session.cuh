#ifndef GPT2__PART_CUDA_SESSION_CUH
#define GPT2__PART_CUDA_SESSION_CUH
#include "model.cuh"
#include "sampler.cuh"

/* A CUDA session: its stream, cuBLAS handle, KV cache and scratch on the GPU. */

/* ---- Sessions ----------------------------------------------------------------------------- */

enum { GPT2__SCORE_ROWS = 64 }; /* rows of logits computed at once when scoring */

/* The activations of a pass through the cuBLAS path (gpt2__cuda_forward_rows) over R rows, the
   new tokens of one session or of a batch of them. */
struct gpt2__cuda_rows {
    float *x = nullptr, *qkv = nullptr, *fc = nullptr;                     /* (R, C) residual stream, (R, 3C), (R, F) */
    void *xn16 = nullptr, *q16 = nullptr, *att16 = nullptr, *fc16 = nullptr; /* (R, C) LayerNorm output, (R, C), (R, C), (R, F) */
    int32_t* ids = nullptr;                                                /* (R) the tokens */
};

/* gpt2_batch_eval's activations, held by the session whose stream runs the pass: R rows of B
   sessions, grown on demand, freed with the session. */
struct gpt2__cuda_batch_workspace {
    size_t rows = 0, sessions = 0; /* R and B it has room for */
    gpt2__cuda_rows a;
    void* last16 = nullptr;        /* (B, C) each session's last row after ln_f: the head's input */
    float* logits = nullptr;       /* (B, V) */
    gpt2__vector<void*> allocations;
};

struct gpt2__cuda_session : gpt2_session {
    gpt2__cuda_model* dm = nullptr;
    cudaStream_t stream = nullptr;
    cublasHandle_t blas = nullptr;
    cudaEvent_t token_ready = nullptr;
    gpt2__vector<void*> allocations;
    float *x = nullptr, *qkv = nullptr, *fc = nullptr, *scores = nullptr, *logits_d = nullptr;
    void *xn16 = nullptr, *q16 = nullptr, *att16 = nullptr, *fc16 = nullptr, *probs16 = nullptr, *k_cache = nullptr, *v_cache = nullptr;
    float *q1 = nullptr, *att1 = nullptr, *fc1 = nullptr, *part = nullptr; /* one-token path */
    unsigned* tickets = nullptr;
    unsigned* grid_bar = nullptr; /* the persistent kernel's grid barrier */
    int32_t* ids_d = nullptr;
    int* step_d = nullptr;
    int32_t* token_d = nullptr;
    double* logp_d = nullptr;
    int32_t* token_h = nullptr;     /* pinned, mapped: the sampled token */
    int32_t* token_h_dev = nullptr; /* its device address */
    int n_splits = 0;
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t graph_exec = nullptr;
    bool graph_failed = false;
    bool logits_on_host = false;
    bool pending = false; /* the sampled token's forward pass is already queued; the logits it
                             replaces are kept in logits_d's second row until it is taken */
    int32_t pending_token = 0;
    int pending_pos = 0;  /* the position that pass computes */
    float* logits = nullptr; /* (V) host copy of logits_d */
    gpt2__cuda_batch_workspace batch; /* the activations of gpt2_batch_eval's passes run on this session's stream */
    gpt2__fs_work fs{};               /* the many-block sampler's memory, when the model uses it */
    float* proj_part = nullptr;       /* (H, C) the heads' parts of c_proj, when attention and c_proj are fused */
    unsigned* proj_ticket = nullptr;
    uint32_t* allowed_d = nullptr;    /* a grammar's mask for it, a bit per token */
};

static gpt2__cuda_session* gpt2__cuda(gpt2_session* s) { return static_cast<gpt2__cuda_session*>(s); }

/* The session's own prompt buffers (n_ctx rows) as the rows of a pass. */
static gpt2__cuda_rows gpt2__cuda_own_rows(gpt2__cuda_session* s) {
    gpt2__cuda_rows a;
    a.x = s->x; a.qkv = s->qkv; a.fc = s->fc;
    a.xn16 = s->xn16; a.q16 = s->q16; a.att16 = s->att16; a.fc16 = s->fc16;
    a.ids = s->ids_d;
    return a;
}

static void gpt2__cuda_batch_free(gpt2__cuda_batch_workspace* w) {
    for (void* p : w->allocations) cudaFree(p);
    *w = gpt2__cuda_batch_workspace();
}

static void gpt2__cuda_session_destroy(gpt2__cuda_session* s) {
    if (s->dm) cudaSetDevice(s->dm->device);
    if (s->stream) cudaStreamSynchronize(s->stream);
    if (s->graph_exec) cudaGraphExecDestroy(s->graph_exec);
    if (s->graph) cudaGraphDestroy(s->graph);
    if (s->blas) cublasDestroy(s->blas);
    if (s->token_ready) cudaEventDestroy(s->token_ready);
    if (s->stream) cudaStreamDestroy(s->stream);
    for (void* p : s->allocations) cudaFree(p);
    gpt2__cuda_batch_free(&s->batch);
    if (s->token_h) cudaFreeHost(s->token_h);
    cudaGetLastError();
    GPT2_FREE(s->logits);
    gpt2__session_delete(s);
}

static gpt2_result gpt2__cuda_session_alloc(gpt2__cuda_session* s, gpt2_error* err) {
    const gpt2_model* m = s->model;
    gpt2__cuda_model* dm = s->dm;
    GPT2__CUDA_TRY(cudaSetDevice(dm->device));
    GPT2__CUDA_TRY(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking));
    GPT2__CUDA_TRY(cudaEventCreateWithFlags(&s->token_ready, cudaEventDisableTiming));
    GPT2__CUBLAS_TRY(cublasCreate(&s->blas));
    GPT2__CUBLAS_TRY(cublasSetStream(s->blas, s->stream));
    const size_t ctx = (size_t)s->n_ctx, C = (size_t)m->n_embd, F = (size_t)m->n_ff, H = (size_t)m->n_head, L = (size_t)m->n_layer, V = (size_t)m->n_vocab;
    const size_t D = C / H;
    s->n_splits = (int)((ctx + GPT2__ATTN_KEYS - 1) / GPT2__ATTN_KEYS);
    const size_t kv = L * ctx * C * 2;
    struct { void** p; size_t bytes; } plan[] = {
        {(void**)&s->x, ctx * C * 4}, {&s->xn16, ctx * C * 2}, {(void**)&s->qkv, ctx * 3 * C * 4}, {&s->q16, ctx * C * 2},
        {&s->att16, ctx * C * 2}, {(void**)&s->fc, ctx * F * 4}, {&s->fc16, ctx * F * 2},
        {(void**)&s->scores, H * ctx * ctx * 4}, {&s->probs16, H * ctx * ctx * 2}, {&s->k_cache, kv}, {&s->v_cache, kv},
        {(void**)&s->logits_d, GPT2__SCORE_ROWS * V * 4}, {(void**)&s->ids_d, ctx * 4}, {(void**)&s->step_d, 16}, {(void**)&s->token_d, 16},
        {(void**)&s->logp_d, ctx * 8}, {(void**)&s->q1, C * 4}, {(void**)&s->att1, C * 4}, {(void**)&s->fc1, F * 4},
        {(void**)&s->part, H * (size_t)s->n_splits * (D + 2) * 4}, {(void**)&s->tickets, H * 4}, {(void**)&s->grid_bar, 16},
    };
    char what[48];
    std::snprintf(what, sizeof what, "the session (n_ctx %d)", s->n_ctx);
    for (auto& b : plan) {
        GPT2__TRY(gpt2__cuda_malloc(b.p, b.bytes, dm->device, what, err));
        s->allocations.push_back(*b.p);
    }
    if (dm->fast_sampler) {
        const size_t slices = GPT2__FS_MAX_SLICES, cap = slices * GPT2__FS_CAP;
        struct { void** p; size_t bytes; } fs[] = {
            {(void**)&s->fs.slices, slices * sizeof(gpt2__fs_slice)}, {(void**)&s->fs.cand_v, cap * 4}, {(void**)&s->fs.cand_i, cap * 4},
            {(void**)&s->fs.ticket, 16}, {(void**)&s->fs.path, 16}, {(void**)&s->allowed_d, (V + 31) / 32 * 4},
        };
        for (auto& b : fs) {
            GPT2__TRY(gpt2__cuda_malloc(b.p, b.bytes, dm->device, what, err));
            s->allocations.push_back(*b.p);
        }
        GPT2__CUDA_TRY(cudaMemsetAsync(s->fs.ticket, 0, 16, s->stream));
    }
    if (dm->fused_attn_proj) {
        struct { void** p; size_t bytes; } fused[] = {{(void**)&s->proj_part, H * C * 4}, {(void**)&s->proj_ticket, 16}};
        for (auto& b : fused) {
            GPT2__TRY(gpt2__cuda_malloc(b.p, b.bytes, dm->device, what, err));
            s->allocations.push_back(*b.p);
        }
        GPT2__CUDA_TRY(cudaMemsetAsync(s->proj_ticket, 0, 16, s->stream));
    }
    GPT2__CUDA_TRY(cudaMemsetAsync(s->tickets, 0, H * 4, s->stream));
    GPT2__CUDA_TRY(cudaMemsetAsync(s->grid_bar, 0, 16, s->stream));
    GPT2__CUDA_TRY(cudaMemsetAsync(s->step_d, 0, 16, s->stream));
    /* the sampler writes the token straight into host memory: no copy between it and the next pass */
    GPT2__CUDA_TRY(cudaHostAlloc((void**)&s->token_h, 16, cudaHostAllocMapped));
    GPT2__CUDA_TRY(cudaHostGetDevicePointer((void**)&s->token_h_dev, s->token_h, 0));
    s->logits = (float*)GPT2_MALLOC(V * 4);
    if (!s->logits) return gpt2__fail(err, GPT2_ERROR_OUT_OF_MEMORY, "cannot allocate %zu bytes for the logits", V * 4);
    GPT2__CUDA_TRY(cudaStreamSynchronize(s->stream));
    return GPT2_OK;
}

static gpt2_result gpt2__cuda_session_create(const gpt2_model* m, const gpt2_session_params& p, gpt2_session** out, gpt2_error* err) {
    gpt2__cuda_session* s = gpt2__session_new<gpt2__cuda_session>(m, p);
    if (!s) return gpt2__fail(err, GPT2_ERROR_OUT_OF_MEMORY, "out of memory");
    s->dm = gpt2__cuda_model_of(m);
    /* The GPU's KV cache is 16-bit, of the model's 16-bit type. An f16 cache's rows go into a
       session state as f16; a bf16 cache's (bf16 models) as f32, which holds them exactly: the
       state says what it holds (gpt2__cuda_copy_rows), and a CPU session loads it as it is. */
    s->kv_f16 = !s->dm->bf16;
    gpt2_result res = gpt2__cuda_session_alloc(s, err);
    if (res != GPT2_OK) {
        gpt2__cuda_session_destroy(s);
        return res;
    }
    *out = s;
    return GPT2_OK;
}

static void gpt2__cuda_session_free(gpt2_session* s) { gpt2__cuda_session_destroy(gpt2__cuda(s)); }

#endif /* GPT2__PART_CUDA_SESSION_CUH */
