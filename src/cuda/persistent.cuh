#ifndef GPT2__PART_CUDA_PERSISTENT_CUH
#define GPT2__PART_CUDA_PERSISTENT_CUH
#include "session.cuh"

/* The persistent one-token kernel, compiled only with GPT2_CUDA_PERSISTENT_DECODE (passes the
   CUDA tests on an H200 but decodes slower than the graph: bench/cuda_results.md, run 3). */

#if defined(GPT2_CUDA_PERSISTENT_DECODE)

/* ---- The persistent one-token kernel (GPT2_CUDA_PERSISTENT_DECODE) ------------------------
   One launch per token instead of ~5 kernels per layer: a grid of one block per SM, launched
   cooperatively (so every block is resident), walks the phases of the whole model with a
   grid-wide barrier between them. Per layer: LN_1 + c_attn (k, v into the cache) | attention
   split over the cache (the last block of a head combines) | c_proj + residual | LN_2 + c_fc
   + GELU | mlp c_proj + residual; then LN_f + head. Before each barrier a warp loads its first
   row of the next phase's weights into registers and asks L2 for the next rows, so the weight
   reads overlap the wait. Activations written inside the kernel are read with __ldcg (L2),
   never through the non-coherent L1 path. */
enum { GPT2__PK_THREADS = 512, GPT2__PK_WARPS = GPT2__PK_THREADS / 32, GPT2__PK_KEYS = 64, GPT2__PK_PRE = 8, GPT2__PK_L2_ROWS = 4 };

struct gpt2__decode_args {
    const gpt2__cuda_layer* layers; /* device copy of the layer table */
    int n_layer, C, F, H, D, V, n_ctx, n_splits, gelu_tanh;
    float eps, scale;
    const void *wte, *wpe, *lm_head;
    const float *ln_f_w, *ln_f_b;
    float *x, *q, *att, *fc, *logits, *part;
    void *k_cache, *v_cache;
    const int* step;
    unsigned* tickets;
    unsigned* bar; /* [0] arrivals, [1] generation: zero before the first launch, left at count 0 */
};

__device__ __forceinline__ unsigned gpt2__ld_acquire(const unsigned* p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ uint64_t gpt2__globaltimer_ns() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* Every block of the grid arrives here before any leaves; writes before it are seen after it.
   A block that waits 10 s (blocks not resident together: a broken launch) traps, so the step
   fails with an error instead of hanging. */
__device__ __forceinline__ void gpt2__grid_barrier(unsigned* bar) {
    __syncthreads();
    if (threadIdx.x == 0) {
        const unsigned gen = gpt2__ld_acquire(bar + 1);
        __threadfence();
        if (atomicAdd(bar, 1u) == gridDim.x - 1) {
            atomicExch(bar, 0u);
            __threadfence();
            atomicAdd(bar + 1, 1u);
        } else {
            const uint64_t t0 = gpt2__globaltimer_ns();
            while (gpt2__ld_acquire(bar + 1) == gen)
                if (gpt2__globaltimer_ns() - t0 > 10000000000ull) __trap();
        }
        __threadfence();
    }
    __syncthreads();
}

/* One matrix-vector phase: y (N) = W (N, K) in, in = LayerNorm(src) when ln_w is given. `src`
   is an activation written earlier in this kernel (or, with `embed`, the token's embedding,
   computed by every block; block 0 also stores it to x). A warp per row, rows spread over
   every warp of the grid. `wait`: whether to pass the grid barrier before reading src. */
template <class T, int EPI>
__device__ void gpt2__pk_gemv(const gpt2__decode_args& a, bool wait, bool embed, const T* W, int N, int K, const float* src, const float* ln_w, const float* ln_b,
                              const float* bias, float* out, T* kc, T* vc, float* xs, float* red) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int stride = gridDim.x * GPT2__PK_WARPS, K8 = K >> 3;
    int o = blockIdx.x * GPT2__PK_WARPS + warp;
    uint4 pre[GPT2__PK_PRE];
#pragma unroll
    for (int c = 0; c < GPT2__PK_PRE; c++) {
        const int idx = lane + 32 * c;
        pre[c] = o < N && idx < K8 ? __ldg((const uint4*)(W + (size_t)o * K) + idx) : make_uint4(0, 0, 0, 0);
    }
    /* the rest of the first row and the next rows of this warp: to L2 while the grid waits */
    const int row_lines = (K * 2 + 127) >> 7;
    for (int r = 0; r < GPT2__PK_L2_ROWS; r++) {
        const int orow = o + r * stride;
        if (orow >= N) break;
        const char* base = (const char*)(W + (size_t)orow * K);
        for (int line = lane + (r == 0 ? 32 * GPT2__PK_PRE * 16 / 128 : 0); line < row_lines; line += 32) gpt2__prefetch_l2(base + ((size_t)line << 7));
    }
    const float first_bias = bias && o < N ? __ldg(bias + o) : 0.0f;
    if (wait) gpt2__grid_barrier(a.bar);
    const int pos = a.step[0];
    if (embed) {
        const T* e = (const T*)a.wte + (size_t)a.step[1] * K;
        const T* p = (const T*)a.wpe + (size_t)pos * K;
        for (int i = threadIdx.x; i < K; i += blockDim.x) {
            const float v = gpt2__to_f32<T>(e[i]) + gpt2__to_f32<T>(p[i]);
            xs[i] = v;
            if (blockIdx.x == 0) a.x[i] = v;
        }
    } else {
        for (int i = threadIdx.x; i < K; i += blockDim.x) xs[i] = __ldcg(src + i);
    }
    __syncthreads();
    if (ln_w) gpt2__layer_norm_shared(xs, K, ln_w, ln_b, a.eps, red);
    bool first = true;
    for (; o < N; o += stride) {
        const uint4* w = (const uint4*)(W + (size_t)o * K);
        float acc = 0.0f, b = 0.0f;
        int c0 = lane;
        if (first) {
            b = first_bias;
#pragma unroll
            for (int c = 0; c < GPT2__PK_PRE; c++)
                if (lane + 32 * c < K8) acc += gpt2__dot8<T>(pre[c], xs + 8 * (lane + 32 * c));
            c0 = lane + 32 * GPT2__PK_PRE;
            first = false;
        } else if (bias) {
            b = __ldg(bias + o);
        }
        if (o + GPT2__PK_L2_ROWS * stride < N) { /* keep L2 a few rows ahead */
            const char* base = (const char*)(W + (size_t)(o + GPT2__PK_L2_ROWS * stride) * K);
            for (int line = lane; line < row_lines; line += 32) gpt2__prefetch_l2(base + ((size_t)line << 7));
        }
#pragma unroll 4
        for (int c = c0; c < K8; c += 32) acc += gpt2__dot8<T>(__ldg(w + c), xs + 8 * c);
        acc = gpt2__warp_sum(acc);
        if (lane != 0) continue;
        const float y = acc + b;
        if (EPI == GPT2__EPI_STORE) out[o] = y;
        if (EPI == GPT2__EPI_RESIDUAL) out[o] = __ldcg(out + o) + y;
        if (EPI == GPT2__EPI_GELU) out[o] = gpt2__gelu_f(y, a.gelu_tanh);
        if (EPI == GPT2__EPI_QKV) {
            const size_t row = (size_t)pos * a.C;
            if (o < a.C) out[o] = y;
            else if (o < 2 * a.C) kc[row + o - a.C] = gpt2__from_f32<T>(y);
            else vc[row + o - 2 * a.C] = gpt2__from_f32<T>(y);
        }
    }
}

/* Attention of the token at step[0] over the cache: items (head, split of GPT2__PK_KEYS keys)
   spread over the blocks; partial max, sum and output per item, and the last item of a head to
   finish combines them into att (flash-decoding). */
template <class T>
__device__ void gpt2__pk_attention(const gpt2__decode_args& a, const T* kc, const T* vc, float* red, float* qs, float* sc, float* acc_rows) {
    __shared__ bool last;
    gpt2__grid_barrier(a.bar);
    const int tid = threadIdx.x, C = a.C, D = a.D;
    const int n_keys = a.step[0] + 1, used = (n_keys + GPT2__PK_KEYS - 1) / GPT2__PK_KEYS;
    const int cpr = D >> 3, rows = GPT2__PK_THREADS / cpr, r = tid / cpr, c = tid % cpr;
    for (int item = blockIdx.x; item < a.H * used; item += gridDim.x) {
        const int h = item / used, split = item % used, j0 = split * GPT2__PK_KEYS;
        float* P = a.part + ((size_t)h * a.n_splits + split) * (D + 2);
        for (int d = tid; d < D; d += blockDim.x) qs[d] = __ldcg(a.q + h * D + d) * a.scale;
        __syncthreads();
        for (int jj = r; jj < GPT2__PK_KEYS; jj += rows) {
            const int j = j0 + jj;
            float partial = 0.0f;
            if (j < n_keys) partial = gpt2__dot8<T>(__ldcg((const uint4*)(kc + (size_t)j * C + (size_t)h * D + 8 * c)), qs + 8 * c);
            for (int off = cpr >> 1; off > 0; off >>= 1) partial += __shfl_xor_sync(0xffffffffu, partial, off);
            if (c == 0) sc[jj] = j < n_keys ? partial : -INFINITY;
        }
        __syncthreads();
        const float s = tid < GPT2__PK_KEYS ? sc[tid] : -INFINITY;
        const float m = gpt2__block_max(s, red);
        const float e = s == -INFINITY ? 0.0f : expf(s - m);
        if (tid < GPT2__PK_KEYS) sc[tid] = e;
        const float l = gpt2__block_sum(e, red); /* its barriers also publish sc[] */
        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int jj = r; jj < GPT2__PK_KEYS; jj += rows) {
            const int j = j0 + jj;
            if (j >= n_keys) break;
            const uint4 v = __ldcg((const uint4*)(vc + (size_t)j * C + (size_t)h * D + 8 * c));
            const uint32_t words[4] = {v.x, v.y, v.z, v.w};
            const float p = sc[jj];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                T pair[2];
                memcpy(pair, &words[i], 4);
                acc[2 * i] += p * gpt2__to_f32<T>(pair[0]);
                acc[2 * i + 1] += p * gpt2__to_f32<T>(pair[1]);
            }
        }
        const int n_rows = min(rows, GPT2__PK_KEYS);
        if (r < n_rows) {
#pragma unroll
            for (int i = 0; i < 8; i++) acc_rows[r * D + 8 * c + i] = acc[i];
        }
        __syncthreads();
        if (tid < D) {
            float o = 0.0f;
            for (int rr = 0; rr < n_rows; rr++) o += acc_rows[rr * D + tid];
            P[2 + tid] = o;
        }
        if (tid == 0) {
            P[0] = m;
            P[1] = l;
        }
        __threadfence();
        __syncthreads();
        if (tid == 0) last = atomicAdd(&a.tickets[h], 1u) == (unsigned)used - 1;
        __syncthreads();
        if (last) {
            __threadfence();
            const float* H_part = a.part + (size_t)h * a.n_splits * (D + 2);
            float M = -INFINITY;
            for (int sp = tid; sp < used; sp += blockDim.x) M = fmaxf(M, __ldcg(H_part + (size_t)sp * (D + 2)));
            M = gpt2__block_max(M, red);
            if (tid < D) {
                float L = 0.0f, o = 0.0f;
#pragma unroll 4
                for (int sp = 0; sp < used; sp++) {
                    const float* Q = H_part + (size_t)sp * (D + 2);
                    const float w = expf(__ldcg(Q) - M);
                    L += __ldcg(Q + 1) * w;
                    o += __ldcg(Q + 2 + tid) * w;
                }
                a.att[h * D + tid] = o / L;
            }
            if (tid == 0) a.tickets[h] = 0; /* ready for the next layer */
        }
        __syncthreads(); /* qs, sc, acc_rows and `last` are reused by the next item */
    }
}

template <class T>
__global__ void __launch_bounds__(GPT2__PK_THREADS, 1) gpt2__decode_persistent_kernel(gpt2__decode_args a) {
    extern __shared__ float xs[]; /* max(C, F) floats: the phase's input vector */
    __shared__ float red[32], qs[128], sc[GPT2__PK_KEYS];
    __shared__ float acc_rows[GPT2__PK_THREADS * 8];
    const int C = a.C, F = a.F;
    for (int l = 0; l < a.n_layer; l++) {
        const gpt2__cuda_layer& G = a.layers[l];
        T* kc = (T*)a.k_cache + (size_t)l * a.n_ctx * C;
        T* vc = (T*)a.v_cache + (size_t)l * a.n_ctx * C;
        gpt2__pk_gemv<T, GPT2__EPI_QKV>(a, l > 0, l == 0, (const T*)G.c_attn, 3 * C, C, a.x, G.ln_1_w, G.ln_1_b, G.c_attn_b, a.q, kc, vc, xs, red);
        gpt2__pk_attention<T>(a, kc, vc, red, qs, sc, acc_rows);
        gpt2__pk_gemv<T, GPT2__EPI_RESIDUAL>(a, true, false, (const T*)G.c_proj, C, C, a.att, nullptr, nullptr, G.c_proj_b, a.x, nullptr, nullptr, xs, red);
        gpt2__pk_gemv<T, GPT2__EPI_GELU>(a, true, false, (const T*)G.c_fc, F, C, a.x, G.ln_2_w, G.ln_2_b, G.c_fc_b, a.fc, nullptr, nullptr, xs, red);
        gpt2__pk_gemv<T, GPT2__EPI_RESIDUAL>(a, true, false, (const T*)G.mlp_proj, C, F, a.fc, nullptr, nullptr, G.mlp_proj_b, a.x, nullptr, nullptr, xs, red);
    }
    gpt2__pk_gemv<T, GPT2__EPI_STORE>(a, true, false, (const T*)a.lm_head, a.V, C, a.x, a.ln_f_w, a.ln_f_b, nullptr, a.logits, nullptr, nullptr, xs, red);
}

/* Makes the model decode with the persistent kernel where the GPU can launch it: the layer
   table on the device, one block per SM. Else the graph of one-token kernels stays, with a
   warning. */
static gpt2_result gpt2__cuda_persistent_setup(const gpt2_model* m, gpt2__cuda_model* dm, gpt2_error* err) {
    if (!dm->fast_decode || m->n_layer == 0) return GPT2_OK;
    const int C = m->n_embd, F = m->n_ff;
    int cooperative = 0;
    GPT2__CUDA_TRY(cudaDeviceGetAttribute(&cooperative, cudaDevAttrCooperativeLaunch, dm->device));
    const size_t pk_smem = (size_t)std::max(C, F) * 4;
    int per_sm = 0;
    cudaError_t e = dm->bf16 ? cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, gpt2__decode_persistent_kernel<__nv_bfloat16>, GPT2__PK_THREADS, pk_smem)
                             : cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, gpt2__decode_persistent_kernel<__half>, GPT2__PK_THREADS, pk_smem);
    /* its static shared memory is ~17 KB: the input vector must fit in the 48 KB a launch gets without opting in */
    if (e != cudaSuccess || per_sm < 1 || !cooperative || pk_smem > 30 * 1024) {
        cudaGetLastError();
        gpt2__log(m->params, GPT2_LOG_WARNING, "CUDA: the persistent decode kernel cannot run here (%s); using the graph of one-token kernels",
                  e != cudaSuccess ? cudaGetErrorString(e) : "no cooperative launch, or no room on an SM for this shape");
        return GPT2_OK;
    }
    GPT2__TRY(gpt2__cuda_alloc(dm, sizeof(gpt2__cuda_layer) * (size_t)m->n_layer, (void**)&dm->layers_d, "the layer table", err));
    GPT2__CUDA_TRY(cudaMemcpy(dm->layers_d, dm->layers.data(), sizeof(gpt2__cuda_layer) * (size_t)m->n_layer, cudaMemcpyHostToDevice));
    dm->persistent = true;
    dm->pk_blocks = dm->n_sm;
    gpt2__log(m->params, GPT2_LOG_INFO, "CUDA: one persistent kernel per token");
    return GPT2_OK;
}

/* The whole step in one cooperative launch. */
template <class TT>
static gpt2_result gpt2__cuda_launch_persistent(gpt2__cuda_session* s, gpt2_error* err) {
    const gpt2__cuda_model* dm = s->dm;
    gpt2__decode_args a{};
    a.layers = dm->layers_d;
    a.n_layer = s->model->n_layer; a.C = s->model->n_embd; a.F = s->model->n_ff; a.H = s->model->n_head; a.D = a.C / a.H;
    a.V = s->model->n_vocab; a.n_ctx = s->n_ctx; a.n_splits = s->n_splits;
    a.gelu_tanh = s->model->gelu_tanh ? 1 : 0;
    a.eps = s->model->layer_norm_eps;
    a.scale = 1.0f / std::sqrt((float)a.D);
    a.wte = dm->wte; a.wpe = dm->wpe; a.lm_head = dm->lm_head; a.ln_f_w = dm->ln_f_w; a.ln_f_b = dm->ln_f_b;
    a.x = s->x; a.q = s->q1; a.att = s->att1; a.fc = s->fc1; a.logits = s->logits_d; a.part = s->part;
    a.k_cache = s->k_cache; a.v_cache = s->v_cache; a.step = s->step_d; a.tickets = s->tickets; a.bar = s->grid_bar;
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(dm->pk_blocks);
    config.blockDim = dim3(GPT2__PK_THREADS);
    config.dynamicSmemBytes = (size_t)std::max(a.C, a.F) * 4;
    config.stream = s->stream;
    cudaLaunchAttribute attribute[1];
    attribute[0].id = cudaLaunchAttributeCooperative;
    attribute[0].val.cooperative = 1;
    config.attrs = attribute;
    config.numAttrs = 1;
    GPT2__CUDA_TRY(cudaLaunchKernelEx(&config, gpt2__decode_persistent_kernel<TT>, a));
    return GPT2_OK;
}

#endif /* defined(GPT2_CUDA_PERSISTENT_DECODE) */

#endif /* GPT2__PART_CUDA_PERSISTENT_CUH */
