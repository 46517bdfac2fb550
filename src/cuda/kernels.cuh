#ifndef GPT2__PART_CUDA_KERNELS_CUH
#define GPT2__PART_CUDA_KERNELS_CUH
#include "common.cuh"

/* The CUDA backend's kernels: a prompt's between the cuBLAS products, the one-token kernels the
   decode graph captures, sampling and log-probabilities on the GPU. */

/* ---- Kernels ---------------------------------------------------------------------------- */

/* Programmatic dependent launch (sm_90): the one-token kernels start while the previous one
   finishes, fetch their weights (which nothing writes), and only then wait for the previous
   kernel's results. Both are no-ops when a kernel was launched without the attribute. */
__device__ __forceinline__ void gpt2__grid_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void gpt2__launch_next() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

/* Asks L2 for the 128-byte line at p (weights a kernel will read soon). */
__device__ __forceinline__ void gpt2__prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }

template <class T> __device__ __forceinline__ float gpt2__to_f32(T v);
template <> __device__ __forceinline__ float gpt2__to_f32<__half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float gpt2__to_f32<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }
template <class T> __device__ __forceinline__ T gpt2__from_f32(float v);
template <> __device__ __forceinline__ __half gpt2__from_f32<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 gpt2__from_f32<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

/* dot of 8 packed 16-bit values with 8 floats */
template <class T>
__device__ __forceinline__ float gpt2__dot8(uint4 w, const float* x) {
    const uint32_t words[4] = {w.x, w.y, w.z, w.w};
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        T pair[2];
        memcpy(pair, &words[i], 4);
        s += gpt2__to_f32<T>(pair[0]) * x[2 * i] + gpt2__to_f32<T>(pair[1]) * x[2 * i + 1];
    }
    return s;
}

__device__ __forceinline__ float gpt2__warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float gpt2__warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Sum over the block; every thread gets it. `red` holds 32 floats. */
__device__ __forceinline__ float gpt2__block_sum(float v, float* red) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = (blockDim.x + 31) >> 5;
    v = gpt2__warp_sum(v);
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    v = lane < n_warps ? red[lane] : 0.0f;
    return gpt2__warp_sum(v);
}
__device__ __forceinline__ float gpt2__block_max(float v, float* red) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = (blockDim.x + 31) >> 5;
    v = gpt2__warp_max(v);
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    v = lane < n_warps ? red[lane] : -INFINITY;
    return gpt2__warp_max(v);
}

/* LayerNorm of the n floats in shared memory `xs`, in place (two passes, like the CPU's). */
__device__ void gpt2__layer_norm_shared(float* xs, int n, const float* w, const float* b, float eps, float* red) {
    float s = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += xs[i];
    const float mean = gpt2__block_sum(s, red) / n;
    float v = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) v += (xs[i] - mean) * (xs[i] - mean);
    const float inv_std = rsqrtf(gpt2__block_sum(v, red) / n + eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x) xs[i] = (xs[i] - mean) * inv_std * w[i] + (b ? b[i] : 0.0f);
    __syncthreads();
}

__device__ __forceinline__ float gpt2__gelu_f(float x, int tanh_form) {
    if (tanh_form) return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
    return 0.5f * x * (1.0f + erff(x * 0.7071067811865476f));
}

template <class T>
__global__ void gpt2__convert_kernel(T* out, const float* in, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) out[i] = gpt2__from_f32<T>(in[i]);
}

/* x (T, C) = wte[ids] + wpe[pos0 + t]; pos0 is *pos when pos is given (graph replays). */
template <class T>
__global__ void gpt2__embed_kernel(float* x, const T* wte, const T* wpe, const int32_t* ids, const int* pos, int pos0, int C) {
    gpt2__grid_wait();
    gpt2__launch_next();
    const int t = blockIdx.x;
    const int p = (pos ? *pos : pos0) + t;
    const T* e = wte + (size_t)ids[t] * C;
    const T* q = wpe + (size_t)p * C;
    for (int i = threadIdx.x; i < C; i += blockDim.x) x[(size_t)t * C + i] = gpt2__to_f32<T>(e[i]) + gpt2__to_f32<T>(q[i]);
}

/* One row per block: x += add (when given), then out = LayerNorm(x) in 16 bits. */
template <class T>
__global__ void gpt2__add_layer_norm_kernel(float* x, const float* add, const float* w, const float* b, T* out, int C, float eps) {
    extern __shared__ float xs[];
    __shared__ float red[32];
    float* row = x + (size_t)blockIdx.x * C;
    for (int i = threadIdx.x; i < C; i += blockDim.x) {
        float v = row[i];
        if (add) row[i] = v = v + add[i];
        xs[i] = v;
    }
    __syncthreads();
    gpt2__layer_norm_shared(xs, C, w, b, eps, red);
    for (int i = threadIdx.x; i < C; i += blockDim.x) out[(size_t)blockIdx.x * C + i] = gpt2__from_f32<T>(xs[i]);
}

/* qkv (T, 3C) + bias: q to q16 (T, C), k and v to the cache rows pos0.. */
template <class T>
__global__ void gpt2__qkv_split_kernel(const float* qkv, const float* bias, T* q16, T* k_cache, T* v_cache, int T_, int C, int pos0) {
    const size_t n = (size_t)T_ * 3 * C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const int t = (int)(i / (3 * C)), j = (int)(i % (3 * C));
        const float v = qkv[i] + (bias ? bias[j] : 0.0f);
        if (j < C) q16[(size_t)t * C + j] = gpt2__from_f32<T>(v);
        else if (j < 2 * C) k_cache[(size_t)(pos0 + t) * C + j - C] = gpt2__from_f32<T>(v);
        else v_cache[(size_t)(pos0 + t) * C + j - 2 * C] = gpt2__from_f32<T>(v);
    }
}

/* Causal softmax of scores (H, T, Lk) rows: query t sees keys j <= pos0 + t. */
template <class T>
__global__ void gpt2__causal_softmax_kernel(const float* scores, T* probs, int T_, int Lk, int pos0, float scale) {
    __shared__ float red[32];
    const size_t row = blockIdx.x; /* h * T + t */
    const int t = (int)(row % T_);
    const int n = pos0 + t + 1;
    const float* s = scores + row * Lk;
    T* p = probs + row * Lk;
    float m = -INFINITY;
    for (int j = threadIdx.x; j < n; j += blockDim.x) m = fmaxf(m, s[j] * scale);
    m = gpt2__block_max(m, red);
    float sum = 0.0f;
    for (int j = threadIdx.x; j < n; j += blockDim.x) sum += expf(s[j] * scale - m);
    const float inv = 1.0f / gpt2__block_sum(sum, red);
    for (int j = threadIdx.x; j < Lk; j += blockDim.x) p[j] = gpt2__from_f32<T>(j < n ? expf(s[j] * scale - m) * inv : 0.0f);
}

template <class T>
__global__ void gpt2__bias_gelu_kernel(const float* in, const float* bias, T* out, size_t n, int F, int tanh_form) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = gpt2__from_f32<T>(gpt2__gelu_f(in[i] + (bias ? bias[i % F] : 0.0f), tanh_form));
}

/* The one-token matrix-vector products: y (N) = W (N, K) x, a warp per output row, with the
   input optionally LayerNorm'ed in a prologue and one of these epilogues. */
enum { GPT2__EPI_STORE, GPT2__EPI_RESIDUAL, GPT2__EPI_GELU, GPT2__EPI_QKV };

struct gpt2__gemv_args {
    const void* W;
    int N, K;
    const float* in;                 /* K floats */
    const float *ln_w, *ln_b;        /* LayerNorm prologue when ln_w is given */
    float eps;
    const float* bias;               /* may be NULL */
    float* out;                      /* STORE/GELU: y; RESIDUAL: out += y; QKV: q */
    void *k_cache, *v_cache;         /* QKV: rows of this layer */
    const int* pos;                  /* QKV: the position written */
    int C;                           /* QKV */
    int gelu_tanh;
    const uint16_t* scales;          /* q8_0 weights (gpt2__gemv_q8_kernel): W's f16 scales, (N, K / 32) */
};

/* Output o's epilogue: y is the row's dot product plus its bias. */
template <class T, int EPI>
__device__ __forceinline__ void gpt2__gemv_store(const gpt2__gemv_args& a, int o, float y) {
    if (EPI == GPT2__EPI_STORE) a.out[o] = y;
    if (EPI == GPT2__EPI_RESIDUAL) a.out[o] += y;
    if (EPI == GPT2__EPI_GELU) a.out[o] = gpt2__gelu_f(y, a.gelu_tanh);
    if (EPI == GPT2__EPI_QKV) {
        const size_t row = (size_t)*a.pos * a.C;
        if (o < a.C) a.out[o] = y;
        else if (o < 2 * a.C) ((T*)a.k_cache)[row + o - a.C] = gpt2__from_f32<T>(y);
        else ((T*)a.v_cache)[row + o - 2 * a.C] = gpt2__from_f32<T>(y);
    }
}

enum { GPT2__GEMV_PREFETCH = 8 }; /* 16-byte chunks per lane fetched before the wait: rows of up to 2048 */

template <class T, int EPI>
__global__ void __launch_bounds__(256) gpt2__gemv_kernel(gpt2__gemv_args a) {
    extern __shared__ float xs[]; /* K inputs; with a LayerNorm also its K weights and K biases */
    __shared__ float red[32];
    const int lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    const int K8 = a.K >> 3;
    int o = blockIdx.x * warps + (threadIdx.x >> 5);
    /* the first row's weights do not depend on the previous kernel: fetch them now */
    uint4 pre[GPT2__GEMV_PREFETCH];
#pragma unroll
    for (int c = 0; c < GPT2__GEMV_PREFETCH; c++) {
        const int idx = lane + 32 * c;
        pre[c] = o < a.N && idx < K8 ? __ldg((const uint4*)((const T*)a.W + (size_t)o * a.K) + idx) : make_uint4(0, 0, 0, 0);
    }
    /* so are the LayerNorm parameters (to shared memory, after the input) and the first bias */
    float* ln_w = xs + a.K;
    float* ln_b = xs + 2 * a.K;
    if (a.ln_w)
        for (int i = threadIdx.x; i < a.K; i += blockDim.x) {
            ln_w[i] = a.ln_w[i];
            ln_b[i] = a.ln_b ? a.ln_b[i] : 0.0f;
        }
    const float first_bias = a.bias && o < a.N ? a.bias[o] : 0.0f;
    gpt2__grid_wait();
    gpt2__launch_next();
    for (int i = threadIdx.x; i < a.K; i += blockDim.x) xs[i] = a.in[i];
    __syncthreads();
    if (a.ln_w) gpt2__layer_norm_shared(xs, a.K, ln_w, ln_b, a.eps, red);
    bool first = true;
    for (; o < a.N; o += gridDim.x * warps) {
        const uint4* w = (const uint4*)((const T*)a.W + (size_t)o * a.K);
        float acc = 0.0f, bias = 0.0f;
        int c0 = lane;
        if (first) {
            bias = first_bias;
#pragma unroll
            for (int c = 0; c < GPT2__GEMV_PREFETCH; c++)
                if (lane + 32 * c < K8) acc += gpt2__dot8<T>(pre[c], xs + 8 * (lane + 32 * c));
            c0 = lane + 32 * GPT2__GEMV_PREFETCH;
            first = false;
        } else if (a.bias) {
            bias = a.bias[o];
        }
#pragma unroll 4
        for (int c = c0; c < K8; c += 32) acc += gpt2__dot8<T>(__ldg(w + c), xs + 8 * c);
        acc = gpt2__warp_sum(acc);
        if (lane == 0) gpt2__gemv_store<T, EPI>(a, o, acc + bias);
    }
}

/* Attention of one query (the token at *pos) over the cache, split over the sequence: block
   (h, split) takes keys [32 split, 32 split + 32), writes its partial max, sum and output,
   and the last block of each head to finish combines them (flash-decoding in one launch).
   D / 8 threads share a key row, 16 bytes each, so a block reads 16 (D = 64) rows at once. */
enum { GPT2__ATTN_KEYS = 32, GPT2__ATTN_THREADS = 128 };

/* The body of gpt2__attn_decode_kernel: true in the block that combined its head, whose D outputs
   are then also in head_out (shared memory, every thread's after a barrier). */
template <class T>
__device__ __forceinline__ bool gpt2__attn_decode_head(const float* q, const T* k_cache, const T* v_cache, const int* pos, float* part, unsigned* tickets, float* out,
                                                       int C, int D, int n_splits, float scale, float* head_out) {
    __shared__ float qs[128], sc[GPT2__ATTN_KEYS], red[32], acc_rows[GPT2__ATTN_THREADS * 8];
    __shared__ bool last;
    gpt2__grid_wait();
    gpt2__launch_next();
    const int h = blockIdx.x, split = blockIdx.y, tid = threadIdx.x;
    const int n_keys = *pos + 1, j0 = split * GPT2__ATTN_KEYS;
    const int cpr = D >> 3, rows = GPT2__ATTN_THREADS / cpr, r = tid / cpr, c = tid % cpr;
    float* P = part + ((size_t)h * n_splits + split) * (D + 2);
    if (j0 >= n_keys) { /* past the last key: an empty partial */
        if (tid == 0) { P[0] = -INFINITY; P[1] = 0.0f; }
    } else {
        for (int d = tid; d < D; d += blockDim.x) qs[d] = q[h * D + d] * scale;
        __syncthreads();
        /* scores: row r of each pass takes key j0 + jj, its cpr lanes one 16-byte chunk each */
        for (int jj = r; jj < GPT2__ATTN_KEYS; jj += rows) {
            const int j = j0 + jj;
            float partial = 0.0f;
            if (j < n_keys) partial = gpt2__dot8<T>(*(const uint4*)(k_cache + (size_t)j * C + (size_t)h * D + 8 * c), qs + 8 * c);
            for (int o = cpr >> 1; o > 0; o >>= 1) partial += __shfl_xor_sync(0xffffffffu, partial, o);
            if (c == 0) sc[jj] = j < n_keys ? partial : -INFINITY;
        }
        __syncthreads();
        const float s = tid < GPT2__ATTN_KEYS ? sc[tid] : -INFINITY;
        const float m = gpt2__block_max(s, red);
        const float e = s == -INFINITY ? 0.0f : expf(s - m);
        if (tid < GPT2__ATTN_KEYS) sc[tid] = e;
        const float l = gpt2__block_sum(e, red); /* its barriers also publish sc[] */
        /* weighted values: the same row layout, 8 dimensions per thread, then a sum over rows */
        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int jj = r; jj < GPT2__ATTN_KEYS; jj += rows) {
            const int j = j0 + jj;
            if (j >= n_keys) break;
            const uint4 v = *(const uint4*)(v_cache + (size_t)j * C + (size_t)h * D + 8 * c);
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
#pragma unroll
        for (int i = 0; i < 8; i++) acc_rows[r * D + 8 * c + i] = acc[i];
        __syncthreads();
        if (tid < D) {
            float o = 0.0f;
            for (int rr = 0; rr < rows; rr++) o += acc_rows[rr * D + tid];
            P[2 + tid] = o;
        }
        if (tid == 0) {
            P[0] = m;
            P[1] = l;
        }
    }
    __threadfence();
    __syncthreads();
    if (tid == 0) last = atomicAdd(&tickets[h], 1u) == (unsigned)n_splits - 1;
    __syncthreads();
    if (!last) return false;
    __threadfence();
    /* only the splits that hold keys: their partial maxima read in parallel, then the sums */
    const int used = min(n_splits, (n_keys + GPT2__ATTN_KEYS - 1) / GPT2__ATTN_KEYS);
    const float* H_part = part + (size_t)h * n_splits * (D + 2);
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
        out[h * D + tid] = head_out[tid] = o / L;
    }
    if (tid == 0) tickets[h] = 0; /* ready for the next replay */
    __syncthreads();
    return true;
}

template <class T>
__global__ void __launch_bounds__(GPT2__ATTN_THREADS) gpt2__attn_decode_kernel(const float* q, const T* k_cache, const T* v_cache, const int* pos, float* part,
                                                                               unsigned* tickets, float* out, int C, int D, int n_splits, float scale) {
    __shared__ float head_out[128];
    gpt2__attn_decode_head<T>(q, k_cache, v_cache, pos, part, tickets, out, C, D, n_splits, scale, head_out);
}

/* step[0] = position of the next token, step[1] = the token; read by the graph's kernels. */
__global__ void gpt2__set_step_kernel(int* step, int pos, int32_t token) {
    step[0] = pos;
    step[1] = token;
}

/* SplitMix64 and the 53-bit uniform: the same numbers as gpt2__rng_next / gpt2__rng_uniform. */
__device__ double gpt2__rng_uniform_device(uint64_t state) {
    uint64_t z = state + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

/* Floats as unsigned keys whose order is the floats' order (for the radix select). */
__device__ __forceinline__ uint32_t gpt2__float_key(float f) {
    uint32_t b = __float_as_uint(f);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ float gpt2__key_float(uint32_t k) { return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k); }

/* gpt2__sample on the GPU, one block of 1024 threads: argmax (the first maximum), nanoGPT's
   top-k threshold (the k-th largest logit, found by radix select), weights exp((l - max) / t)
   computed in double and rounded to float as on the CPU, and the draw: the first token whose
   running sum, in index order, passes u * total. Writes the token and the next step. */
enum { GPT2__SAMPLE_THREADS = 1024 };

__global__ void __launch_bounds__(GPT2__SAMPLE_THREADS) gpt2__sample_kernel(const float* logits, int n, float temperature, int top_k, uint64_t rng,
                                                                           int32_t* token_out, int* step, int next_pos) {
    __shared__ float best_v[GPT2__SAMPLE_THREADS / 32];
    __shared__ int best_i[GPT2__SAMPLE_THREADS / 32];
    __shared__ unsigned hist[256];
    __shared__ uint32_t s_prefix;
    __shared__ int s_k;
    __shared__ double sums[GPT2__SAMPLE_THREADS];
    __shared__ int s_pick, s_last;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    /* argmax */
    float bv = -INFINITY;
    int bi = n;
    for (int base = 0; base < n; base += 4 * (int)blockDim.x) { /* 4 loads in flight per thread */
        float v[4];
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const int i = base + u * (int)blockDim.x + tid;
            v[u] = i < n ? logits[i] : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const int i = base + u * (int)blockDim.x + tid;
            if (i < n && (v[u] > bv || bi == n)) { bv = v[u]; bi = i; }
        }
    }
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (ov > bv || (ov == bv && oi < bi)) { bv = ov; bi = oi; }
    }
    if (lane == 0) { best_v[warp] = bv; best_i[warp] = bi; }
    __syncthreads();
    if (tid == 0) {
        for (int w = 1; w < (int)(blockDim.x >> 5); w++)
            if (best_v[w] > best_v[0] || (best_v[w] == best_v[0] && best_i[w] < best_i[0])) { best_v[0] = best_v[w]; best_i[0] = best_i[w]; }
    }
    __syncthreads();
    const float max_logit = best_v[0];
    int32_t token = best_i[0];
    if (!(temperature == 0.0f || top_k == 1)) {
        float threshold = -INFINITY;
        if (top_k > 0 && top_k < n) {
            if (tid == 0) { s_prefix = 0; s_k = top_k; }
            for (int shift = 24; shift >= 0; shift -= 8) {
                for (int i = tid; i < 256; i += blockDim.x) hist[i] = 0;
                __syncthreads();
                const uint32_t prefix = s_prefix, mask = shift == 24 ? 0u : 0xffffffffu << (shift + 8);
                /* logits crowd into a few bins: lanes of a warp that share a bin add once */
                for (int base = 0; base < n; base += 8 * (int)blockDim.x) {
                    float v[8];
#pragma unroll
                    for (int u = 0; u < 8; u++) {
                        const int i = base + u * (int)blockDim.x + tid;
                        v[u] = i < n ? logits[i] : 0.0f;
                    }
#pragma unroll
                    for (int u = 0; u < 8; u++) {
                        const int i = base + u * (int)blockDim.x + tid;
                        const uint32_t key = gpt2__float_key(v[u]);
                        const unsigned bin = i < n && (key & mask) == prefix ? (key >> shift) & 255u : 256u;
                        const unsigned same = __match_any_sync(0xffffffffu, bin);
                        if (bin < 256u && lane == __ffs(same) - 1) atomicAdd(&hist[bin], (unsigned)__popc(same));
                    }
                }
                __syncthreads();
                if (warp == 0) { /* the digit holding the k-th largest: lane L owns bins 8L..8L+7 */
                    unsigned cnt[8], mine = 0;
#pragma unroll
                    for (int b = 0; b < 8; b++) mine += cnt[b] = hist[8 * lane + b];
                    unsigned at_or_above = mine; /* keys in this lane's bins and all higher ones */
                    for (int off = 1; off < 32; off <<= 1) {
                        const unsigned t = __shfl_down_sync(0xffffffffu, at_or_above, off);
                        if (lane + off < 32) at_or_above += t;
                    }
                    const int k = s_k;
                    const unsigned above = at_or_above - mine;
                    if ((int)above < k && k <= (int)at_or_above) {
                        int kk = k - (int)above, d = 8 * lane;
                        for (int b = 7; b >= 0; b--) {
                            if ((int)cnt[b] >= kk) { d = 8 * lane + b; break; }
                            kk -= (int)cnt[b];
                        }
                        s_k = kk;
                        s_prefix = prefix | ((uint32_t)d << shift);
                    }
                }
                __syncthreads();
            }
            threshold = gpt2__key_float(s_prefix);
        }
        /* contiguous chunks per thread keep the index order of the CPU's running sum */
        const double inv_t = 1.0 / temperature;
        const int chunk = (n + blockDim.x - 1) / blockDim.x, begin = min(n, tid * chunk), end = min(n, begin + chunk);
        double local = 0.0;
        int last_kept = -1;
        for (int i0 = begin; i0 < end; i0 += 8) { /* 8 loads in flight, then in index order */
            float v[8];
#pragma unroll
            for (int u = 0; u < 8; u++) v[u] = i0 + u < end ? logits[i0 + u] : -INFINITY;
#pragma unroll
            for (int u = 0; u < 8; u++) {
                const float w = i0 + u < end && v[u] >= threshold ? (float)exp(((double)v[u] - max_logit) * inv_t) : 0.0f;
                local += w;
                if (w != 0.0f) last_kept = i0 + u;
            }
        }
        sums[tid] = local;
        if (tid == 0) { s_pick = n; s_last = -1; }
        __syncthreads();
        if (last_kept >= 0) atomicMax(&s_last, last_kept);
        /* inclusive scan of the chunk sums (Hillis-Steele) */
        for (int off = 1; off < (int)blockDim.x; off <<= 1) {
            const double add = tid >= off ? sums[tid - off] : 0.0;
            __syncthreads();
            sums[tid] += add;
            __syncthreads();
        }
        const double total = sums[blockDim.x - 1];
        const double target = gpt2__rng_uniform_device(rng) * total;
        double running = sums[tid] - local;
        if (target < sums[tid] + 1e-12 * total) { /* this chunk may hold the crossing: rescan it */
            bool found = false;
            for (int i0 = begin; i0 < end && !found; i0 += 8) {
                float v[8];
#pragma unroll
                for (int u = 0; u < 8; u++) v[u] = i0 + u < end ? logits[i0 + u] : -INFINITY;
#pragma unroll
                for (int u = 0; u < 8; u++) {
                    const float w = !found && i0 + u < end && v[u] >= threshold ? (float)exp(((double)v[u] - max_logit) * inv_t) : 0.0f;
                    if (w == 0.0f) continue;
                    running += w;
                    if (target < running) {
                        atomicMin(&s_pick, i0 + u);
                        found = true;
                    }
                }
            }
        }
        __syncthreads();
        token = s_pick < n ? s_pick : max(s_last, 0); /* rounding left target at the very top */
    }
    if (tid == 0) {
        *token_out = token;
        step[0] = next_pos;
        step[1] = token;
    }
}

/* log softmax(logits row)[target] for each row, in double; one block per row. */
__global__ void gpt2__log_prob_kernel(const float* logits, int V, const int32_t* targets, double* out) {
    __shared__ float red[32];
    __shared__ double dred[32];
    const float* l = logits + (size_t)blockIdx.x * V;
    float m = -INFINITY;
    for (int i = threadIdx.x; i < V; i += blockDim.x) m = fmaxf(m, l[i]);
    m = gpt2__block_max(m, red);
    double s = 0.0;
    for (int i = threadIdx.x; i < V; i += blockDim.x) s += exp((double)l[i] - m);
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if ((threadIdx.x & 31) == 0) dred[threadIdx.x >> 5] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
        double total = 0.0;
        for (int w = 0; w < (int)(blockDim.x >> 5); w++) total += dred[w];
        out[blockIdx.x] = (double)l[targets[blockIdx.x]] - m - log(total);
    }
}

#endif /* GPT2__PART_CUDA_KERNELS_CUH */
