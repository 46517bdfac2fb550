/* ---- src/cuda/cuda_api.h ---- */
/* gpt2_cuda.cuh - the CUDA path of gpt2.h: GPT-2-class models on an NVIDIA GPU.
   MIT license at the end of gpt2.h.

   THIS FILE IS GENERATED from src/cuda/ by tools/amalgamate.py. Edit the parts under src/.

   USAGE
     In exactly one CUDA translation unit (a .cu file, compiled by nvcc with -std=c++17 and
     linked with -lcublas):
         #define GPT2_IMPLEMENTATION
         #include "gpt2_cuda.cuh"      // includes gpt2.h: this file holds the CPU path too
     Everywhere else (C or C++, any compiler) just #include "gpt2.h", and ask for the GPU:
         gpt2_model_params mp = gpt2_model_default_params();
         mp.device = GPT2_DEVICE_CUDA;
         mp.cuda_device_index = 0;
         gpt2_model_load_file("model.gguf", &mp, &model, &err);   // weights go to the GPU once
     Sessions, generation, scoring and sampling are then the same calls as on the CPU.
     Without this file in the program, GPT2_DEVICE_CUDA is refused with GPT2_ERROR_UNSUPPORTED.

   WHAT RUNS WHERE
     model    the weights as 16-bit floats on the GPU (bf16 when the file is bf16, else f16;
              f32, q8_0 and q4_0 files are converted while loading; with GPT2_CUDA_Q8 q8_0
              matrices also in 8 bits), biases and norms as f32.
     session  its own CUDA stream, cuBLAS handle, KV cache (16-bit) and scratch on the GPU, so
              sessions on one model run concurrently. A prompt runs as cuBLAS matrix products
              with our own kernels between them; each new token runs as one replay of a CUDA
              graph of our own kernels (matrix-vector products fused with their LayerNorm,
              bias, GELU and residual add; attention split over the cache). Sampling
              (temperature, top-k, the library's SplitMix64 RNG) runs on the GPU too: only the
              token id crosses to the host per step. gpt2_session_logits copies the logits
              to the host when asked. Inside a gpt2_generate callback the next step is
              already running, so there it returns the logits after the token just delivered.
     errors   no device, an unsupported GPU or driver, out of GPU memory, or a failed kernel
              come back as GPT2_ERROR_DEVICE / GPT2_ERROR_OUT_OF_MEMORY with a message.

   BUILD OPTIONS (define them where the implementation is compiled, e.g. nvcc -DGPT2_CUDA_BATCH;
   the library reads no environment variable)
     GPT2_CUDA_BATCH              gpt2_batch_eval and gpt2_generate_batch run all sessions in one
                                  pass: their new tokens as the rows of one activation matrix, so
                                  each weight product is one cuBLAS GEMM for all of them, attention
                                  per session against its own cache. Without it (the default) they
                                  run the sessions one by one. Passes the CUDA tests on an H200,
                                  not yet timed there (bench/cuda_results.md, run 3);
                                  gpt2-cuda-tests-batch is built with it.
     GPT2_CUDA_PERSISTENT_DECODE  decode each token with one cooperative kernel instead of the
                                  graph of one-token kernels (the default). Passes the CUDA tests
                                  on an H200 but decodes slower than the graph (0.49 against 0.45
                                  ms a token for 124M: bench/cuda_results.md, run 3);
                                  gpt2-bench-cuda-persistent and gpt2-cuda-tests-persistent are
                                  built with it.
     GPT2_CUDA_NO_PDL             no programmatic dependent launch between the one-token kernels
                                  (on by default on sm_90 and newer; measured no different).
     GPT2_CUDA_FAST_SAMPLER       draw each token with the many-block sampler (a block per 4,096
                                  logits, then one merges; src/cuda/sampler.cuh) instead of the
                                  one-block kernel, and draw gpt2_generate's chain of a grammar's
                                  mask, top_k, top_p and temperature on the GPU too (without it
                                  such a chain copies the logits to the host each step). The same
                                  draws as the host's chain for the same seed (its CPU twin is
                                  tested against it). NOT YET RUN ON A GPU (bench/cuda_results.md);
                                  gpt2-cuda-tests-next and gpt2-bench-cuda-next are built with it.
     GPT2_CUDA_Q8                 a q8_0 file's matrices also go to the GPU in 8 bits (34 bytes a
                                  block of 32 weights, values and scales apart), and each new token
                                  reads those: half the bytes of the 16-bit copy, which the prompt's
                                  cuBLAS products keep using. Each product quantizes its input to
                                  int8 as the CPU's q8_0 tokens do (src/cuda/decode_q8.cuh; its CPU
                                  twin is tested against the CPU's q8_0 rows). NOT YET RUN ON A GPU;
                                  in gpt2-cuda-tests-next and gpt2-bench-cuda-next.
     GPT2_CUDA_FUSED_ATTN_PROJ    each token's attention and its output projection (c_proj, with its
                                  bias and the residual add) run as one kernel: the block that
                                  combines a head also multiplies it by that head's columns, and
                                  the last head adds the parts (src/cuda/fused.cuh; its CPU twin
                                  is in the tests). 50 instead of 62 kernels a token for 124M. NOT
                                  YET RUN ON A GPU; in gpt2-cuda-tests-next and gpt2-bench-cuda-next.
*/
#ifndef GPT2_CUDA_CUH
#define GPT2_CUDA_CUH

#if defined(GPT2_IMPLEMENTATION)
#if defined(GPT2_IMPLEMENTATION_DONE) && !defined(GPT2__CUDA_BACKEND)
#error "gpt2.h's implementation was included before gpt2_cuda.cuh: in the implementation file include only gpt2_cuda.cuh"
#endif
#define GPT2__CUDA_BACKEND
#endif
#include "gpt2.h"

#endif /* GPT2_CUDA_CUH */

/* ---- src/cuda/implementation.cuh ---- */
/* ======================================================================================== */
/*                                 CUDA IMPLEMENTATION                                      */
/* ======================================================================================== */
#if defined(GPT2_IMPLEMENTATION) && !defined(GPT2__CUDA_IMPLEMENTATION_DONE)
#define GPT2__CUDA_IMPLEMENTATION_DONE

/* ---- src/cuda/common.cuh ---- */
/* What every part of the CUDA backend uses: the CUDA headers, errors as gpt2_result, the
   weights on the device. */

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

/* ---- Errors: every CUDA and cuBLAS call is checked and becomes a gpt2_result ---------- */

static gpt2_result gpt2__cuda_fail(gpt2_error* err, cudaError_t e, const char* what) {
    cudaGetLastError(); /* clear a non-sticky error so the next call starts clean */
    const gpt2_result code = e == cudaErrorMemoryAllocation ? GPT2_ERROR_OUT_OF_MEMORY : GPT2_ERROR_DEVICE;
    return gpt2__fail(err, code, "CUDA: %s failed: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

static const char* gpt2__cublas_name(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_NOT_INITIALIZED: return "not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "invalid value";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "architecture mismatch";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "execution failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "not supported";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "internal error";
    default: return "error";
    }
}

#define GPT2__CUDA_TRY(call)                                                  \
    do {                                                                      \
        cudaError_t gpt2__e = (call);                                         \
        if (gpt2__e != cudaSuccess) return gpt2__cuda_fail(err, gpt2__e, #call); \
    } while (0)

#define GPT2__CUBLAS_TRY(call)                                                                          \
    do {                                                                                                \
        cublasStatus_t gpt2__s = (call);                                                                \
        if (gpt2__s != CUBLAS_STATUS_SUCCESS)                                                           \
            return gpt2__fail(err, gpt2__s == CUBLAS_STATUS_ALLOC_FAILED ? GPT2_ERROR_OUT_OF_MEMORY : GPT2_ERROR_DEVICE, \
                              "cuBLAS: %s failed: %s (%d)", #call, gpt2__cublas_name(gpt2__s), (int)gpt2__s); \
    } while (0)

/* A kernel launch is checked like a call. */
#define GPT2__LAUNCHED(what)                                                                 \
    do {                                                                                     \
        cudaError_t gpt2__e = cudaGetLastError();                                            \
        if (gpt2__e != cudaSuccess) return gpt2__cuda_fail(err, gpt2__e, "launching the " what " kernel"); \
    } while (0)

/* ---- Device model: the weights, uploaded once ------------------------------------------ */

/* A q8_0 matrix's 8-bit copy for the one-token products (GPT2_CUDA_Q8: decode_q8.cuh). */
struct gpt2__cuda_q8 {
    int8_t* values = nullptr;   /* (rows, cols) */
    uint16_t* scales = nullptr; /* (rows, cols / 32), f16 bits */
};

struct gpt2__cuda_layer {
    void *c_attn, *c_proj, *c_fc, *mlp_proj;  /* 16-bit (rows, cols) row-major */
    float *ln_1_w, *ln_1_b, *c_attn_b, *c_proj_b, *ln_2_w, *ln_2_b, *c_fc_b, *mlp_proj_b; /* f32, b may be NULL */
    gpt2__cuda_q8 c_attn_q8, c_proj_q8, c_fc_q8, mlp_proj_q8; /* empty but for q8_0 matrices with GPT2_CUDA_Q8 */
};

struct gpt2__cuda_model {
    int device = 0;
    bool bf16 = false; /* element type of weights, activations fed to matrix products, KV cache */
    int n_sm = 0;
    void *wte = nullptr, *wpe = nullptr, *lm_head = nullptr;
    float *ln_f_w = nullptr, *ln_f_b = nullptr;
    gpt2__cuda_q8 lm_head_q8;
    gpt2__vector<gpt2__cuda_layer> layers;
    gpt2__vector<void*> allocations;
    size_t bytes = 0;
    bool fast_decode = false; /* shapes the one-token kernels handle (else the prompt path runs) */
    bool pdl = false;         /* programmatic dependent launch between them (sm_90; off with GPT2_CUDA_NO_PDL) */
    bool persistent = false;  /* one persistent kernel per token instead of the graph of small ones (GPT2_CUDA_PERSISTENT_DECODE) */
    bool fast_sampler = false; /* draws with the many-block sampler (GPT2_CUDA_FAST_SAMPLER; set at load, sessions made after see it) */
    bool q8_decode = false;    /* the one-token products read the q8_0 matrices' 8-bit copies (GPT2_CUDA_Q8; a graph captured after sees it) */
    bool fused_attn_proj = false; /* attention and c_proj in one kernel (GPT2_CUDA_FUSED_ATTN_PROJ; sessions made after see it) */
    int pk_blocks = 0;        /* its grid: one block per SM */
    gpt2__cuda_layer* layers_d = nullptr; /* the layer table on the device, for that kernel */
};

static gpt2__cuda_model* gpt2__cuda_model_of(const gpt2_model* m) { return (gpt2__cuda_model*)m->device_weights; }

/* ---- src/cuda/kernels.cuh ---- */
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

/* ---- src/cuda/sampler.cuh ---- */
/* The many-block sampler: the draw of the host's chain (sampler.h: the grammar's mask, top_k,
   top_p, temperature, the SplitMix64 draw) in one launch of a block per 4,096 logits. The
   backend uses it only in a build with GPT2_CUDA_FAST_SAMPLER (not yet run on a GPU:
   bench/cuda_results.md); without it each token is drawn by gpt2__sample_kernel (one block) and
   a chain with top_p or a grammar runs on the host. tests/cuda/sampler_twin.h is the same
   algorithm in plain C++, which the CPU tests compare with the host's chain and the CUDA tests
   with this kernel.

   The algorithm. Every block takes a slice of the logits (thread t its 4 consecutive logits),
   applies the mask (a banned token's logit is -inf) and finds the slice's largest logit (its
   first index); with top_k (1 < k < n, k <= GPT2__FS_MAX_K) also the slice's k-th largest b
   (radix select), and stores as candidates, in index order, the finite logits >= b, or, when
   ties at b leave no room for all (more than GPT2__FS_CAP), those > b and a count of the ties.
   The last block to finish (a ticket) merges:
   - the largest logit M over the slices (the first on ties): the greedy token;
   - the k-th largest v over the candidates (the tie counts standing in for their logits): a
     slice's b is never above v, so every logit >= v is a candidate or one of those ties;
   - K = the candidates >= v, in index order. When it holds at most GPT2__FS_EXACT_MAX tokens:
     top_p sorts K, adds exp(l - M) in double one by one from the largest and keeps the logits >=
     the first whose running sum reaches top_p * total; the draw adds the weights
     (float)exp((l - M) / t) in index order one by one and takes the first token whose running
     sum passes u * total (u the uniform of the RNG). These are the host chain's operations in its
     order, so the draws are the CPU's bit for bit while K holds at most 256 tokens (beyond, the
     host adds top_p's total in partial_sort's order: rounding apart).
   - Else (no top_k, or ties at v that a slice could not store, or K too large) the draw runs over
     every slice in a fixed tree of sums, each a plain running sum: a thread's 4 weights, a warp's
     32 threads, a slice's 32 warps, the slices; the token is found level by level (the first unit
     whose running sum passes what is left of u * total). The same draws as the host's to
     rounding of the total (a token's odds moved by about 1e-16). top_p with such a K is left to
     the host's chain (the token is -1). */

enum {
    GPT2__FS_THREADS = 1024,                                       /* threads of a block */
    GPT2__FS_PER_THREAD = 4,                                       /* consecutive logits per thread */
    GPT2__FS_SLICE = GPT2__FS_THREADS * GPT2__FS_PER_THREAD,       /* logits per block */
    GPT2__FS_MAX_SLICES = 64,                                      /* vocabularies up to 262,144 */
    GPT2__FS_MAX_K = 256,                                          /* top_k the candidates serve */
    GPT2__FS_CAP = 256,                                            /* candidates a slice stores (>= GPT2__FS_MAX_K) */
    GPT2__FS_EXACT_MAX = 1024,                                     /* tokens the merge draws from with the host's sums */
};
static_assert(GPT2__FS_CAP >= GPT2__FS_MAX_K, "a slice must store the logits above its k-th largest");

/* Which way a draw went (tests and the benchmark read it). */
enum { GPT2__FS_GREEDY = 0, GPT2__FS_EXACT = 1, GPT2__FS_TREE = 2, GPT2__FS_HOST = 3 };

/* What a slice leaves for the merge. */
struct gpt2__fs_slice {
    float max;  /* its largest logit after the mask (-inf when all are banned) */
    int argmax; /* the first index holding it */
    float kth;  /* with top_k: its k-th largest */
    int stored; /* candidates stored */
    int ties;   /* logits equal to kth that did not fit (then only those > kth are stored), else 0 */
};

/* Device memory a draw uses: a session's (GPT2_CUDA_FAST_SAMPLER) or a test's. */
struct gpt2__fs_work {
    gpt2__fs_slice* slices; /* GPT2__FS_MAX_SLICES */
    float* cand_v;          /* GPT2__FS_CAP per slice */
    int32_t* cand_i;
    unsigned* ticket; /* zero between launches (the merge resets it) */
    int* path;        /* one int: which way the draw went (GPT2__FS_...) */
};

struct gpt2__fs_args {
    const float* logits;
    int n;
    const uint32_t* allowed; /* the grammar's mask, a bit per token; NULL: every token */
    float temperature;
    int top_k;
    float top_p; /* 0 or >= 1: off */
    uint64_t rng;
    int32_t* token_out; /* the token, or -1 where the host's chain must draw */
    int* step;          /* when not NULL: step[0] = next_pos, step[1] = the token */
    int next_pos;
};

/* The shared memory of a block: phase one's and the merge's. */
struct gpt2__fs_shared {
    unsigned hist[256];
    int scan[32];
    float best_v[32];
    int best_i[32];
    uint32_t prefix;
    int k, count, last, pick, last_kept, big;
    float kth, threshold;
    double wsum[32];                      /* a slice's warp sums */
    double dsum[GPT2__FS_THREADS];        /* its threads' sums; the merge's running sums */
    double slice_sum[GPT2__FS_MAX_SLICES];
    float kv[GPT2__FS_EXACT_MAX];         /* K: logits, */
    int32_t ki[GPT2__FS_EXACT_MAX];       /* their tokens */
    float sorted[GPT2__FS_EXACT_MAX];     /* K's logits sorted (top_p), then the weights */
};

__device__ __forceinline__ float gpt2__fs_logit(const gpt2__fs_args& a, int i) {
    if (a.allowed && !((a.allowed[i >> 5] >> (i & 31)) & 1u)) return -INFINITY;
    return a.logits[i];
}

/* Exclusive prefix sum of v over the block, in thread order; *total gets the sum. */
__device__ int gpt2__fs_scan(int v, gpt2__fs_shared& sh, int* total) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int x = v;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int y = __shfl_up_sync(0xffffffffu, x, o);
        if (lane >= o) x += y;
    }
    __syncthreads();
    if (lane == 31) sh.scan[warp] = x;
    __syncthreads();
    if (warp == 0) {
        int s = sh.scan[lane];
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const int y = __shfl_up_sync(0xffffffffu, s, o);
            if (lane >= o) s += y;
        }
        sh.scan[lane] = s;
    }
    __syncthreads();
    *total = sh.scan[31];
    return x - v + (warp ? sh.scan[warp - 1] : 0);
}

/* One digit of a radix select over the block's histogram (warp 0): the digit holding the k-th
   largest key with the current prefix; k becomes its rank within that digit. */
__device__ void gpt2__fs_pick_digit(gpt2__fs_shared& sh, int shift) {
    const int lane = threadIdx.x & 31;
    const int k = sh.k; /* every lane reads it before one of them writes it */
    __syncwarp();
    unsigned cnt[8], mine = 0;
#pragma unroll
    for (int b = 0; b < 8; b++) mine += cnt[b] = sh.hist[8 * lane + b];
    unsigned at_or_above = mine; /* keys in this lane's bins and every higher one */
    for (int off = 1; off < 32; off <<= 1) {
        const unsigned t = __shfl_down_sync(0xffffffffu, at_or_above, off);
        if (lane + off < 32) at_or_above += t;
    }
    const unsigned above = at_or_above - mine;
    if ((int)above < k && k <= (int)at_or_above) {
        int kk = k - (int)above, d = 8 * lane;
        for (int b = 7; b >= 0; b--) {
            if ((int)cnt[b] >= kk) { d = 8 * lane + b; break; }
            kk -= (int)cnt[b];
        }
        sh.k = kk;
        sh.prefix |= (uint32_t)d << shift;
    }
}

/* Counts key into the histogram bin of its digit at `shift` when it has the prefix; lanes of a
   warp that share a bin add once. Every lane of the warp calls it (bin 256: none). */
__device__ __forceinline__ void gpt2__fs_count(gpt2__fs_shared& sh, bool present, uint32_t key, uint32_t prefix, uint32_t mask, int shift) {
    const unsigned bin = present && (key & mask) == prefix ? (key >> shift) & 255u : 256u;
    const unsigned same = __match_any_sync(0xffffffffu, bin);
    if (bin < 256u && (int)(threadIdx.x & 31) == __ffs(same) - 1) atomicAdd(&sh.hist[bin], (unsigned)__popc(same));
}

/* The weight of a logit in the draw: the host's (float)exp((l - max) / t), 0 when not drawn from. */
__device__ __forceinline__ float gpt2__fs_weight(float l, float threshold, float max_logit, double inv_t) {
    return l >= threshold && l > -INFINITY ? (float)exp(((double)l - max_logit) * inv_t) : 0.0f;
}

/* The tree's sums of slice `b` (see the top of this part): dsum[t] thread t's, wsum[w] warp w's;
   returns the slice's (to every thread). */
__device__ double gpt2__fs_slice_sums(const gpt2__fs_args& a, int b, float threshold, float max_logit, double inv_t, gpt2__fs_shared& sh) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int i0 = b * GPT2__FS_SLICE + GPT2__FS_PER_THREAD * tid;
    double d = 0.0;
#pragma unroll
    for (int u = 0; u < GPT2__FS_PER_THREAD; u++)
        if (i0 + u < a.n) d += gpt2__fs_weight(gpt2__fs_logit(a, i0 + u), threshold, max_logit, inv_t);
    __syncthreads(); /* the previous slice's sums are read */
    sh.dsum[tid] = d;
    __syncthreads();
    if (lane == 0) {
        double s = 0.0;
        for (int l = 0; l < 32; l++) s += sh.dsum[32 * warp + l];
        sh.wsum[warp] = s;
    }
    __syncthreads();
    double s = 0.0;
    for (int w = 0; w < GPT2__FS_THREADS / 32; w++) s += sh.wsum[w];
    return s;
}

/* The first of `count` running sums (sums[0..count), kept in order) that target stays below: the
   unit where the draw lands; when rounding leaves target at the very top, the last unit with a
   positive part. *before gets the running sum before it. One thread. */
__device__ int gpt2__fs_descend(const double* parts, int count, double target, double* before) {
    double running = 0.0;
    int last = -1;
    double last_before = 0.0;
    for (int j = 0; j < count; j++) {
        if (parts[j] > 0.0) {
            last = j;
            last_before = running;
        }
        const double next = running + parts[j];
        if (parts[j] > 0.0 && target < next) {
            *before = running;
            return j;
        }
        running = next;
    }
    *before = last_before;
    return last;
}

__global__ void __launch_bounds__(GPT2__FS_THREADS) gpt2__fast_sample_kernel(gpt2__fs_args a, gpt2__fs_work w) {
    __shared__ gpt2__fs_shared sh;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int n_slices = (a.n + GPT2__FS_SLICE - 1) / GPT2__FS_SLICE;
    const bool greedy = a.temperature == 0.0f || a.top_k == 1;
    const bool top_k = !greedy && a.top_k > 0 && a.top_k < a.n;
    const int b = blockIdx.x;

    /* ---- phase one: this block's slice ---- */
    const int i0 = b * GPT2__FS_SLICE + GPT2__FS_PER_THREAD * tid;
    float v[GPT2__FS_PER_THREAD];
    bool present[GPT2__FS_PER_THREAD];
#pragma unroll
    for (int u = 0; u < GPT2__FS_PER_THREAD; u++) {
        present[u] = i0 + u < a.n;
        v[u] = present[u] ? gpt2__fs_logit(a, i0 + u) : -INFINITY;
    }
    /* the largest logit, its first index */
    float bv = -INFINITY;
    int bi = INT_MAX;
#pragma unroll
    for (int u = 0; u < GPT2__FS_PER_THREAD; u++)
        if (present[u] && (v[u] > bv || bi == INT_MAX)) { bv = v[u]; bi = i0 + u; }
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (ov > bv || (ov == bv && oi < bi)) { bv = ov; bi = oi; }
    }
    if (lane == 0) { sh.best_v[warp] = bv; sh.best_i[warp] = bi; }
    __syncthreads();
    if (tid == 0) {
        for (int j = 1; j < GPT2__FS_THREADS / 32; j++)
            if (sh.best_v[j] > sh.best_v[0] || (sh.best_v[j] == sh.best_v[0] && sh.best_i[j] < sh.best_i[0])) { sh.best_v[0] = sh.best_v[j]; sh.best_i[0] = sh.best_i[j]; }
        w.slices[b].max = sh.best_v[0];
        w.slices[b].argmax = sh.best_i[0];
        w.slices[b].stored = 0;
        w.slices[b].ties = 0;
        w.slices[b].kth = -INFINITY;
    }
    if (top_k && a.top_k <= GPT2__FS_MAX_K) {
        /* the slice's k-th largest (counting banned tokens' -inf, as the host's nth_element does) */
        const int n_in = min(GPT2__FS_SLICE, a.n - b * GPT2__FS_SLICE);
        uint32_t key[GPT2__FS_PER_THREAD];
#pragma unroll
        for (int u = 0; u < GPT2__FS_PER_THREAD; u++) key[u] = gpt2__float_key(v[u]);
        if (tid == 0) { sh.prefix = 0; sh.k = min(a.top_k, n_in); }
        for (int shift = 24; shift >= 0; shift -= 8) {
            for (int j = tid; j < 256; j += GPT2__FS_THREADS) sh.hist[j] = 0;
            __syncthreads();
            const uint32_t prefix = sh.prefix, mask = shift == 24 ? 0u : 0xffffffffu << (shift + 8);
#pragma unroll
            for (int u = 0; u < GPT2__FS_PER_THREAD; u++) gpt2__fs_count(sh, present[u], key[u], prefix, mask, shift);
            __syncthreads();
            if (warp == 0) gpt2__fs_pick_digit(sh, shift);
            __syncthreads();
        }
        const float kth = gpt2__key_float(sh.prefix);
        /* the candidates: every finite logit >= kth when they fit, else those > kth */
        int strict = 0, tie = 0;
#pragma unroll
        for (int u = 0; u < GPT2__FS_PER_THREAD; u++) {
            strict += present[u] && v[u] > -INFINITY && v[u] > kth;
            tie += present[u] && v[u] > -INFINITY && v[u] == kth;
        }
        int n_strict = 0, n_tie = 0;
        gpt2__fs_scan(strict, sh, &n_strict);
        gpt2__fs_scan(tie, sh, &n_tie);
        const bool all_fit = n_strict + n_tie <= GPT2__FS_CAP;
        int mine = 0;
#pragma unroll
        for (int u = 0; u < GPT2__FS_PER_THREAD; u++) mine += present[u] && v[u] > -INFINITY && (v[u] > kth || (all_fit && v[u] == kth));
        int stored = 0;
        int at = gpt2__fs_scan(mine, sh, &stored);
#pragma unroll
        for (int u = 0; u < GPT2__FS_PER_THREAD; u++)
            if (present[u] && v[u] > -INFINITY && (v[u] > kth || (all_fit && v[u] == kth))) {
                w.cand_v[b * GPT2__FS_CAP + at] = v[u];
                w.cand_i[b * GPT2__FS_CAP + at] = i0 + u;
                at++;
            }
        if (tid == 0) {
            w.slices[b].kth = kth;
            w.slices[b].stored = stored;
            w.slices[b].ties = all_fit ? 0 : n_tie;
        }
    }

    /* ---- the last block to finish merges ---- */
    __threadfence();
    __syncthreads();
    if (tid == 0) sh.last = atomicAdd(w.ticket, 1u) == (unsigned)n_slices - 1;
    __syncthreads();
    if (!sh.last) return;
    __threadfence();
    if (tid == 0) {
        float m = -INFINITY;
        int mi = INT_MAX;
        for (int s = 0; s < n_slices; s++) {
            const float sm = __ldcg(&w.slices[s].max);
            const int si = __ldcg(&w.slices[s].argmax);
            if (sm > m || mi == INT_MAX) { m = sm; mi = si; }
        }
        sh.best_v[0] = m;
        sh.best_i[0] = mi;
        sh.big = !top_k; /* without top_k every token may be drawn: the tree */
        sh.threshold = -INFINITY;
        sh.pick = -1;
    }
    __syncthreads();
    const float max_logit = sh.best_v[0];
    int path = GPT2__FS_GREEDY;
    int32_t token = sh.best_i[0];
    if (!greedy && top_k && a.top_k > GPT2__FS_MAX_K) { /* the caller sends these to the one-block kernel or the host */
        path = GPT2__FS_HOST;
        token = -1;
    } else if (!greedy) {
        const double inv_t = 1.0 / a.temperature;
        const double u = gpt2__rng_uniform_device(a.rng);
        const bool top_p = a.top_p > 0.0f && a.top_p < 1.0f;
        int m = 0; /* |K| */
        if (top_k) {
            /* v: the k-th largest candidate, the ties that did not fit counted at their value */
            if (tid == 0) {
                int total = 0;
                for (int s = 0; s < n_slices; s++) total += __ldcg(&w.slices[s].stored) + __ldcg(&w.slices[s].ties);
                sh.count = total;
                sh.prefix = 0;
                sh.k = a.top_k;
            }
            __syncthreads();
            float kth = -INFINITY; /* fewer finite logits than k: every one is kept */
            if (sh.count >= a.top_k) {
                const int flat = n_slices * GPT2__FS_CAP;
                for (int shift = 24; shift >= 0; shift -= 8) {
                    for (int j = tid; j < 256; j += GPT2__FS_THREADS) sh.hist[j] = 0;
                    __syncthreads();
                    const uint32_t prefix = sh.prefix, mask = shift == 24 ? 0u : 0xffffffffu << (shift + 8);
                    for (int base = 0; base < flat; base += GPT2__FS_THREADS) {
                        const int j = base + tid, s = j / GPT2__FS_CAP;
                        const bool here = j < flat && j % GPT2__FS_CAP < __ldcg(&w.slices[min(s, n_slices - 1)].stored);
                        gpt2__fs_count(sh, here, here ? gpt2__float_key(__ldcg(&w.cand_v[j])) : 0u, prefix, mask, shift);
                    }
                    if (tid < n_slices) {
                        const int ties = __ldcg(&w.slices[tid].ties);
                        const uint32_t key = gpt2__float_key(__ldcg(&w.slices[tid].kth));
                        if (ties > 0 && (key & mask) == prefix) atomicAdd(&sh.hist[(key >> shift) & 255u], (unsigned)ties);
                    }
                    __syncthreads();
                    if (warp == 0) gpt2__fs_pick_digit(sh, shift);
                    __syncthreads();
                }
                kth = gpt2__key_float(sh.prefix);
            }
            /* ties at v that a slice could not store: K is not all in hand */
            if (tid < n_slices && __ldcg(&w.slices[tid].ties) > 0 && __ldcg(&w.slices[tid].kth) == kth) sh.big = 1;
            __syncthreads();
            /* K = the candidates >= v, in index order: the flat candidate array taken 4 at a time */
            if (!sh.big) {
                const int flat = n_slices * GPT2__FS_CAP;
                int base_out = 0;
                for (int base = 0; base < flat; base += GPT2__FS_SLICE) {
                    const int j0 = base + GPT2__FS_PER_THREAD * tid;
                    bool take[GPT2__FS_PER_THREAD];
                    int mine = 0;
#pragma unroll
                    for (int q = 0; q < GPT2__FS_PER_THREAD; q++) {
                        const int j = j0 + q, s = j / GPT2__FS_CAP;
                        take[q] = j < flat && j % GPT2__FS_CAP < __ldcg(&w.slices[min(s, n_slices - 1)].stored) && __ldcg(&w.cand_v[j]) >= kth;
                        mine += take[q];
                    }
                    int total = 0;
                    int at = base_out + gpt2__fs_scan(mine, sh, &total);
#pragma unroll
                    for (int q = 0; q < GPT2__FS_PER_THREAD; q++)
                        if (take[q]) {
                            if (at < GPT2__FS_EXACT_MAX) {
                                sh.kv[at] = __ldcg(&w.cand_v[j0 + q]);
                                sh.ki[at] = __ldcg(&w.cand_i[j0 + q]);
                            }
                            at++;
                        }
                    base_out += total;
                }
                m = base_out;
                if (tid == 0 && m > GPT2__FS_EXACT_MAX) sh.big = 1;
            }
            if (tid == 0) sh.threshold = kth;
            __syncthreads();
        }
        if (sh.big && top_p) { /* the host's chain sorts them */
            path = GPT2__FS_HOST;
            token = -1;
        } else if (!sh.big && m == 0) { /* no finite logit: the host's draw takes token 0 */
            path = GPT2__FS_EXACT;
            token = 0;
        } else if (!sh.big) {
            path = GPT2__FS_EXACT;
            float threshold = -INFINITY;
            if (top_p) {
                /* K's logits sorted, largest first (bitonic, padded with -inf) */
                int p2 = 1;
                while (p2 < m) p2 <<= 1;
                for (int j = tid; j < p2; j += GPT2__FS_THREADS) sh.sorted[j] = j < m ? sh.kv[j] : -INFINITY;
                __syncthreads();
                for (int size = 2; size <= p2; size <<= 1)
                    for (int stride = size >> 1; stride > 0; stride >>= 1) {
                        for (int j = tid; j < p2; j += GPT2__FS_THREADS) {
                            const int partner = j ^ stride;
                            if (partner > j) {
                                const bool descending = (j & size) == 0;
                                const float x = sh.sorted[j], y = sh.sorted[partner];
                                if (descending ? x < y : x > y) { sh.sorted[j] = y; sh.sorted[partner] = x; }
                            }
                        }
                        __syncthreads();
                    }
                /* the host's running sum of exp(l - max) at temperature 1, largest first */
                for (int j = tid; j < m; j += GPT2__FS_THREADS) sh.dsum[j] = exp((double)sh.sorted[j] - (double)sh.sorted[0]);
                __syncthreads();
                if (tid == 0) {
                    double running = 0.0;
                    for (int j = 0; j < m; j++) sh.dsum[j] = running += sh.dsum[j];
                    sh.pick = INT_MAX;
                }
                __syncthreads();
                const double target = (double)a.top_p * sh.dsum[m - 1];
                for (int j = tid; j < m; j += GPT2__FS_THREADS)
                    if (sh.dsum[j] >= target) atomicMin(&sh.pick, j);
                __syncthreads();
                threshold = sh.pick < m ? sh.sorted[sh.pick] : -INFINITY;
                __syncthreads();
            }
            /* the draw: weights in index order, the host's running sum */
            for (int j = tid; j < m; j += GPT2__FS_THREADS) sh.sorted[j] = gpt2__fs_weight(sh.kv[j], threshold, max_logit, inv_t);
            __syncthreads();
            if (tid == 0) {
                double running = 0.0;
                for (int j = 0; j < m; j++) sh.dsum[j] = running += sh.sorted[j];
                sh.pick = INT_MAX;
                sh.last_kept = -1;
            }
            __syncthreads();
            const double target = u * sh.dsum[m - 1];
            for (int j = tid; j < m; j += GPT2__FS_THREADS) {
                if (target < sh.dsum[j]) atomicMin(&sh.pick, j);
                if (sh.sorted[j] != 0.0f) atomicMax(&sh.last_kept, j);
            }
            __syncthreads();
            token = sh.ki[sh.pick < m ? sh.pick : max(sh.last_kept, 0)];
        } else {
            /* the tree over every slice */
            path = GPT2__FS_TREE;
            const float threshold = sh.threshold;
            for (int s = 0; s < n_slices; s++) {
                const double t = gpt2__fs_slice_sums(a, s, threshold, max_logit, inv_t, sh);
                if (tid == 0) sh.slice_sum[s] = t;
            }
            __syncthreads();
            double target = 0.0, before = 0.0;
            if (tid == 0) {
                double total = 0.0;
                for (int s = 0; s < n_slices; s++) total += sh.slice_sum[s];
                target = u * total;
                sh.pick = gpt2__fs_descend(sh.slice_sum, n_slices, target, &before);
                target -= before;
                sh.dsum[0] = target; /* read back below, after the slice's sums overwrite dsum */
            }
            __syncthreads();
            const int s = sh.pick;
            target = sh.dsum[0];
            if (s < 0) { /* no finite logit: the host's draw takes token 0 */
                token = 0;
            } else {
                gpt2__fs_slice_sums(a, s, threshold, max_logit, inv_t, sh);
                __syncthreads();
                if (tid == 0) {
                    const int wp = gpt2__fs_descend(sh.wsum, GPT2__FS_THREADS / 32, target, &before);
                    target -= before;
                    const int t = 32 * wp + gpt2__fs_descend(sh.dsum + 32 * wp, 32, target, &before);
                    target -= before;
                    double weights[GPT2__FS_PER_THREAD];
                    const int first = s * GPT2__FS_SLICE + GPT2__FS_PER_THREAD * t;
                    for (int q = 0; q < GPT2__FS_PER_THREAD; q++)
                        weights[q] = first + q < a.n ? gpt2__fs_weight(gpt2__fs_logit(a, first + q), threshold, max_logit, inv_t) : 0.0;
                    sh.pick = first + gpt2__fs_descend(weights, GPT2__FS_PER_THREAD, target, &before);
                }
                __syncthreads();
                token = sh.pick;
            }
        }
    }
    if (tid == 0) {
        *a.token_out = token;
        if (w.path) *w.path = path;
        if (a.step && token >= 0) {
            a.step[0] = a.next_pos;
            a.step[1] = token;
        }
        *w.ticket = 0; /* ready for the next launch */
    }
}

/* Whether the kernel serves these parameters with n logits; else the one-block kernel (or the
   host's chain) draws. */
static bool gpt2__fs_serves(int n, float temperature, int top_k) {
    if (n > GPT2__FS_SLICE * GPT2__FS_MAX_SLICES) return false;
    const bool greedy = temperature == 0.0f || top_k == 1;
    return greedy || top_k <= 0 || top_k >= n || top_k <= GPT2__FS_MAX_K;
}

/* Queues the draw on `stream`: n logits, so one block per GPT2__FS_SLICE of them. */
static cudaError_t gpt2__fs_launch(const gpt2__fs_args& a, const gpt2__fs_work& w, cudaStream_t stream) {
    gpt2__fast_sample_kernel<<<(a.n + GPT2__FS_SLICE - 1) / GPT2__FS_SLICE, GPT2__FS_THREADS, 0, stream>>>(a, w);
    return cudaGetLastError();
}

/* ---- src/cuda/decode_q8.cuh ---- */
/* q8_0 weights read in 8 bits by the one-token products, half the bytes of their 16-bit copy.
   The backend uses them only in a build with GPT2_CUDA_Q8 (not yet run on a GPU:
   bench/cuda_results.md). A q8_0 matrix then has, besides its 16-bit copy (the prompt's cuBLAS
   products and the embedding read that one), its GGUF blocks (an f16 scale and 32 int8 values,
   34 bytes) split at load into two arrays, so that a row loads 16 bytes at a time: the values
   (N, K) int8 row-major and the scales (N, K / 32) as f16 bits.

   The product is the CPU's for a q8_0 token (scalar.h's gpt2__dot_q8_scalar): the input, after
   the LayerNorm prologue, is quantized to int8 blocks of 32 with a float scale each by
   gpt2__quantize_q8_scalar's operations, and a block's dot product is an exact integer sum. Each
   pair of lanes takes a block: 16 values each (4 dp4a), the two integer sums added, and the even
   lane adds sum * (weight scale * input scale) to its float accumulator in one fma; the warp then
   adds its lanes' accumulators in a butterfly. tests/cuda/q8_twin.h is that arithmetic in C++. */

/* Rows [0, rows) of a q8_0 matrix in GGUF blocks split into the GPU's arrays (host memory). */
static void gpt2__q8_split_rows(const uint8_t* data, size_t row_bytes, int64_t rows, int64_t cols, int8_t* values, uint16_t* scales) {
    const int64_t nb = cols / gpt2__q8_block_values;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t* block = data + (size_t)r * row_bytes + (size_t)b * gpt2__q8_block_bytes;
            scales[r * nb + b] = gpt2__q8_scale_f16(block);
            std::memcpy(values + r * cols + b * gpt2__q8_block_values, gpt2__q8_values(block), gpt2__q8_block_values);
        }
}

/* Shared memory of gpt2__gemv_q8_kernel for K inputs: the floats (with a LayerNorm, also its K
   weights and K biases), then the K int8 values and their K / 32 scales. */
static size_t gpt2__gemv_q8_smem(int K, bool layer_norm) { return (size_t)K * 4 * (layer_norm ? 3 : 1) + (size_t)K + (size_t)K / 32 * 4; }

/* A lane's 16 values of chunk c (block c / 2) against the quantized input; every lane of the warp
   calls it (the pair's integer sums meet in a shuffle). Returns the accumulator. */
__device__ __forceinline__ float gpt2__q8_chunk(float acc, uint4 w, int c, int K16, const int8_t* xq, const float* xscale, const uint16_t* w_scales) {
    int isum = 0;
    if (c < K16) {
        const int4 x = *(const int4*)(xq + 16 * c);
        isum = __dp4a((int)w.x, x.x, isum);
        isum = __dp4a((int)w.y, x.y, isum);
        isum = __dp4a((int)w.z, x.z, isum);
        isum = __dp4a((int)w.w, x.w, isum);
    }
    isum += __shfl_xor_sync(0xffffffffu, isum, 1);
    if (!(threadIdx.x & 1) && c < K16) {
        const int b = c >> 1;
        acc = __fmaf_rn((float)isum, __fmul_rn(__half2float(__ushort_as_half(w_scales[b])), xscale[b]), acc);
    }
    return acc;
}

/* gpt2__gemv_kernel for q8_0 weights: a.W their int8 values (N, K), a.scales their scales; K a
   multiple of 32. */
template <class T, int EPI>
__global__ void __launch_bounds__(256) gpt2__gemv_q8_kernel(gpt2__gemv_args a) {
    extern __shared__ float xs[]; /* gpt2__gemv_q8_smem's layout */
    __shared__ float red[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    const int K16 = a.K >> 4, nb = a.K >> 5;
    float* ln_w = xs + a.K;
    float* ln_b = xs + 2 * a.K;
    int8_t* xq = (int8_t*)(xs + (a.ln_w ? 3 : 1) * a.K);
    float* xscale = (float*)(xq + a.K);
    int o = blockIdx.x * warps + warp;
    /* the first row's weights do not depend on the previous kernel: fetch them now */
    uint4 pre[GPT2__GEMV_PREFETCH];
#pragma unroll
    for (int c = 0; c < GPT2__GEMV_PREFETCH; c++) {
        const int idx = lane + 32 * c;
        pre[c] = o < a.N && idx < K16 ? __ldg((const uint4*)((const int8_t*)a.W + (size_t)o * a.K) + idx) : make_uint4(0, 0, 0, 0);
    }
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
    /* the input as int8 blocks of 32, a warp a block: gpt2__quantize_q8_scalar's operations */
    for (int b = warp; b < nb; b += warps) {
        const float x = xs[32 * b + lane];
        const float amax = gpt2__warp_max(fabsf(x));
        const float inv = amax > 0.0f ? __fdiv_rn(127.0f, amax) : 0.0f;
        xq[32 * b + lane] = (int8_t)__float2int_rn(__fmul_rn(x, inv));
        if (lane == 0) xscale[b] = __fdiv_rn(amax, 127.0f);
    }
    __syncthreads();
    bool first = true;
    for (; o < a.N; o += gridDim.x * warps) {
        const uint4* w = (const uint4*)((const int8_t*)a.W + (size_t)o * a.K);
        const uint16_t* w_scales = a.scales + (size_t)o * nb;
        float acc = 0.0f, bias = 0.0f;
        int j0 = 0;
        if (first) {
            bias = first_bias;
#pragma unroll
            for (int j = 0; j < GPT2__GEMV_PREFETCH; j++)
                if (32 * j < K16) acc = gpt2__q8_chunk(acc, pre[j], lane + 32 * j, K16, xq, xscale, w_scales);
            j0 = GPT2__GEMV_PREFETCH;
            first = false;
        } else if (a.bias) {
            bias = a.bias[o];
        }
#pragma unroll 4
        for (int j = j0; 32 * j < K16; j++) {
            const int c = lane + 32 * j;
            acc = gpt2__q8_chunk(acc, c < K16 ? __ldg(w + c) : make_uint4(0, 0, 0, 0), c, K16, xq, xscale, w_scales);
        }
        acc = gpt2__warp_sum(acc);
        if (lane == 0) gpt2__gemv_store<T, EPI>(a, o, acc + bias);
    }
}

/* ---- src/cuda/fused.cuh ---- */
/* Fewer one-token kernels: attention with its output projection in one launch. The backend uses
   it only in a build with GPT2_CUDA_FUSED_ATTN_PROJ (not yet run on a GPU:
   bench/cuda_results.md); without it c_proj is a kernel of its own (gpt2__gemv_kernel).

   The block that combines a head's splits (gpt2__attn_decode_head) goes on with that head's part
   of x += c_proj(att) + bias: the D columns of c_proj that meet the head's D outputs, a part for
   every row o, into proj_part[h][o]; the last head to finish adds, for every o, the heads' parts
   in head order, then the bias, to x[o]. The sums are written out step by step (tests/cuda/
   fused_twin.h is the same arithmetic in C++): a part is cpr = D / 8 lanes' sums of 8 products
   each (one fma after another, in column order), added in a butterfly over the cpr lanes.
   While the attention runs, every block asks L2 for its share of its head's c_proj columns, so
   the combining block finds them there. (LayerNorm is already fused into the product after it:
   gpt2__gemv_kernel's prologue.) */

/* 8 packed 16-bit weights times 8 floats: one fma after another, in order. */
template <class T>
__device__ __forceinline__ float gpt2__dot8_fma(uint4 w, const float* x) {
    const uint32_t words[4] = {w.x, w.y, w.z, w.w};
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        T pair[2];
        memcpy(pair, &words[i], 4);
        s = __fmaf_rn(gpt2__to_f32<T>(pair[0]), x[2 * i], s);
        s = __fmaf_rn(gpt2__to_f32<T>(pair[1]), x[2 * i + 1], s);
    }
    return s;
}

struct gpt2__attn_proj_args {
    const void* W;      /* c_proj (C, C), 16-bit */
    const float* bias;  /* (C) or NULL */
    float* x;           /* the residual stream: x += c_proj(att) + bias */
    float* proj_part;   /* (H, C) the heads' parts */
    unsigned* ticket;   /* heads done; zero between launches */
};

template <class T>
__global__ void __launch_bounds__(GPT2__ATTN_THREADS) gpt2__attn_proj_decode_kernel(const float* q, const T* k_cache, const T* v_cache, const int* pos, float* part,
                                                                                    unsigned* tickets, float* out, int C, int D, int n_splits, float scale,
                                                                                    gpt2__attn_proj_args p) {
    __shared__ float head_out[128];
    __shared__ bool last_head;
    const int h = blockIdx.x, tid = threadIdx.x, H = gridDim.x;
    const int cpr = D >> 3, rows = GPT2__ATTN_THREADS / cpr, r = tid / cpr, c = tid % cpr;
    const T* W = (const T*)p.W;
    /* this block's share of the head's c_proj columns into L2 (weights: no wait needed) */
    for (int o = blockIdx.y * GPT2__ATTN_THREADS + tid; o < C; o += n_splits * GPT2__ATTN_THREADS)
        for (int byte = 0; byte < D * 2; byte += 128) gpt2__prefetch_l2((const char*)(W + (size_t)o * C + (size_t)h * D) + byte);
    if (!gpt2__attn_decode_head<T>(q, k_cache, v_cache, pos, part, tickets, out, C, D, n_splits, scale, head_out)) return;
    /* the head's part of every row: lanes c of a row take 8 columns each */
#pragma unroll 4
    for (int o0 = 0; o0 < C; o0 += rows) {
        const int o = o0 + r;
        const uint4 w = o < C ? __ldg((const uint4*)(W + (size_t)o * C + (size_t)h * D) + c) : make_uint4(0, 0, 0, 0);
        float v = gpt2__dot8_fma<T>(w, head_out + 8 * c);
        for (int off = cpr >> 1; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
        if (c == 0 && o < C) p.proj_part[(size_t)h * C + o] = v;
    }
    __threadfence();
    __syncthreads();
    if (tid == 0) last_head = atomicAdd(p.ticket, 1u) == (unsigned)H - 1;
    __syncthreads();
    if (!last_head) return;
    __threadfence();
    for (int o = tid; o < C; o += GPT2__ATTN_THREADS) {
        float y = 0.0f;
        for (int hh = 0; hh < H; hh++) y += __ldcg(&p.proj_part[(size_t)hh * C + o]);
        p.x[o] += y + (p.bias ? p.bias[o] : 0.0f);
    }
    if (tid == 0) *p.ticket = 0; /* ready for the next replay */
}

/* ---- src/cuda/model.cuh ---- */
/* The weights uploaded once, as 16-bit floats. */

/* ---- Model upload ------------------------------------------------------------------------- */

/* cudaMalloc, failing with a message that says what for and how much the device has left. */
static gpt2_result gpt2__cuda_malloc(void** out, size_t bytes, int device, const char* what, gpt2_error* err) {
    const cudaError_t e = cudaMalloc(out, bytes);
    if (e == cudaSuccess) return GPT2_OK;
    *out = nullptr;
    cudaGetLastError();
    size_t free_bytes = 0, total = 0;
    cudaMemGetInfo(&free_bytes, &total);
    return gpt2__fail(err, e == cudaErrorMemoryAllocation ? GPT2_ERROR_OUT_OF_MEMORY : GPT2_ERROR_DEVICE,
                      "CUDA: cannot allocate %zu bytes for %s on device %d (%zu of %zu bytes free): %s", bytes, what, device, free_bytes, total,
                      cudaGetErrorString(e));
}

static gpt2_result gpt2__cuda_alloc(gpt2__cuda_model* dm, size_t bytes, void** out, const char* what, gpt2_error* err) {
    GPT2__TRY(gpt2__cuda_malloc(out, bytes, dm->device, what, err));
    dm->allocations.push_back(*out);
    dm->bytes += bytes;
    return GPT2_OK;
}

static gpt2_result gpt2__cuda_upload_vector(gpt2__cuda_model* dm, const float* v, int64_t n, float** out, gpt2_error* err) {
    *out = nullptr;
    if (!v) return GPT2_OK;
    GPT2__TRY(gpt2__cuda_alloc(dm, (size_t)n * 4, (void**)out, "a vector", err));
    GPT2__CUDA_TRY(cudaMemcpy(*out, v, (size_t)n * 4, cudaMemcpyHostToDevice));
    return GPT2_OK;
}

/* Rows [0, rows) of W as 16-bit floats: copied as they are when the file has that type, else
   dequantized to f32 on the host a slice at a time and converted on the GPU. */
static gpt2_result gpt2__cuda_upload_matrix(gpt2__cuda_model* dm, const gpt2__weight& W, int64_t rows, void** out, gpt2__vector<float>& host, float* staging,
                                            size_t staging_floats, gpt2_error* err) {
    const size_t cols = (size_t)W.cols, bytes = (size_t)rows * cols * 2;
    GPT2__TRY(gpt2__cuda_alloc(dm, bytes, out, "a weight matrix", err));
    const uint32_t target = dm->bf16 ? GPT2_TYPE_BF16 : GPT2_TYPE_F16;
    if (W.type == target) {
        GPT2__CUDA_TRY(cudaMemcpy(*out, W.data, bytes, cudaMemcpyHostToDevice));
        return GPT2_OK;
    }
    const int64_t slice = std::max<int64_t>(1, (int64_t)(staging_floats / cols));
    for (int64_t r0 = 0; r0 < rows; r0 += slice) {
        const int64_t n_rows = std::min(slice, rows - r0);
        const size_t n = (size_t)n_rows * cols;
        const float* src = (const float*)(W.data + (size_t)r0 * W.row_bytes);
        if (W.type != GPT2_TYPE_F32) {
            for (int64_t r = 0; r < n_rows; r++) gpt2__dequantize_row(W.type, W.data + (size_t)(r0 + r) * W.row_bytes, host.data() + (size_t)r * cols, (int64_t)cols);
            src = host.data();
        }
        GPT2__CUDA_TRY(cudaMemcpy(staging, src, n * 4, cudaMemcpyHostToDevice));
        const size_t offset = (size_t)r0 * cols;
        if (dm->bf16) gpt2__convert_kernel<__nv_bfloat16><<<1024, 256>>>((__nv_bfloat16*)*out + offset, staging, n);
        else gpt2__convert_kernel<__half><<<1024, 256>>>((__half*)*out + offset, staging, n);
        GPT2__LAUNCHED("convert");
        GPT2__CUDA_TRY(cudaDeviceSynchronize());
    }
    return GPT2_OK;
}

/* Rows [0, rows) of a q8_0 matrix W as the one-token products' 8-bit copy (decode_q8.cuh): its
   GGUF blocks split into values and scales on the host a slice at a time. */
static gpt2_result gpt2__cuda_upload_q8(gpt2__cuda_model* dm, const gpt2__weight& W, int64_t rows, gpt2__cuda_q8* out, gpt2_error* err) {
    const size_t cols = (size_t)W.cols, nb = cols / gpt2__q8_block_values;
    GPT2__TRY(gpt2__cuda_alloc(dm, (size_t)rows * cols, (void**)&out->values, "a q8_0 matrix's values", err));
    GPT2__TRY(gpt2__cuda_alloc(dm, (size_t)rows * nb * 2, (void**)&out->scales, "a q8_0 matrix's scales", err));
    const int64_t slice = std::max<int64_t>(1, (int64_t)(((size_t)16 << 20) / cols));
    gpt2__vector<int8_t> values((size_t)std::min(slice, rows) * cols);
    gpt2__vector<uint16_t> scales((size_t)std::min(slice, rows) * nb);
    for (int64_t r0 = 0; r0 < rows; r0 += slice) {
        const int64_t n_rows = std::min(slice, rows - r0);
        gpt2__q8_split_rows(W.data + (size_t)r0 * W.row_bytes, W.row_bytes, n_rows, (int64_t)cols, values.data(), scales.data());
        GPT2__CUDA_TRY(cudaMemcpy(out->values + (size_t)r0 * cols, values.data(), (size_t)n_rows * cols, cudaMemcpyHostToDevice));
        GPT2__CUDA_TRY(cudaMemcpy(out->scales + (size_t)r0 * nb, scales.data(), (size_t)n_rows * nb * 2, cudaMemcpyHostToDevice));
    }
    return GPT2_OK;
}

static void gpt2__cuda_model_free_memory(gpt2__cuda_model* dm) {
    if (!dm->allocations.empty()) cudaSetDevice(dm->device);
    for (void* p : dm->allocations) cudaFree(p);
    cudaGetLastError(); /* leave no error behind for the next call */
    dm->~gpt2__cuda_model();
    GPT2_FREE(dm);
}

static gpt2_result gpt2__cuda_select_device(int index, gpt2_error* err) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return gpt2__fail(err, GPT2_ERROR_DEVICE, "CUDA: no usable GPU: cudaGetDeviceCount failed: %s (%s)", cudaGetErrorString(e), cudaGetErrorName(e));
    }
    if (count == 0) return gpt2__fail(err, GPT2_ERROR_DEVICE, "CUDA: no GPU found");
    if (index < 0 || index >= count)
        return gpt2__fail(err, GPT2_ERROR_DEVICE, "cuda_device_index is %d, but there %s %d GPU%s (0 to %d)", index, count == 1 ? "is" : "are", count, count == 1 ? "" : "s", count - 1);
    GPT2__CUDA_TRY(cudaSetDevice(index));
    return GPT2_OK;
}

static gpt2_result gpt2__cuda_upload(gpt2_model* m, gpt2__cuda_model* dm, gpt2_error* err) {
    cudaGetLastError(); /* an error left by earlier calls of this thread is not ours */
    GPT2__TRY(gpt2__cuda_select_device(dm->device, err));
    cudaDeviceProp prop;
    GPT2__CUDA_TRY(cudaGetDeviceProperties(&prop, dm->device));
    dm->n_sm = prop.multiProcessorCount;
    cudaFuncAttributes attr;
    if (cudaFuncGetAttributes(&attr, gpt2__convert_kernel<__half>) != cudaSuccess) {
        cudaGetLastError();
        return gpt2__fail(err, GPT2_ERROR_DEVICE, "CUDA: %s (compute capability %d.%d) cannot run this build's kernels (built for sm_80, sm_89, sm_90 and PTX 9.0); rebuild for it",
                          prop.name, prop.major, prop.minor);
    }
    const int C = m->n_embd, F = m->n_ff, H = m->n_head, D = C / H;
    dm->bf16 = m->weight_type == GPT2_TYPE_BF16;
    dm->fast_decode = C % 8 == 0 && F % 8 == 0 && (D == 32 || D == 64 || D == 128) && (size_t)std::max(3 * C, F) * 4 <= 48 * 1024;
#if defined(GPT2_CUDA_FAST_SAMPLER)
    dm->fast_sampler = true;
#endif
#if defined(GPT2_CUDA_FUSED_ATTN_PROJ)
    dm->fused_attn_proj = dm->fast_decode;
#endif
#if defined(GPT2_CUDA_NO_PDL)
    dm->pdl = false;
#else
    dm->pdl = prop.major >= 9;
#endif
    const size_t staging_floats = std::min<size_t>((size_t)16 << 20, std::max((size_t)m->n_vocab_rows, (size_t)F) * (size_t)C);
    gpt2__vector<float> host(staging_floats);
    float* staging = nullptr;
    GPT2__CUDA_TRY(cudaMalloc((void**)&staging, staging_floats * 4));
    struct Free {
        float* p;
        ~Free() { cudaFree(p); }
    } free_staging{staging};
    auto matrix = [&](const gpt2__weight& W, int64_t rows, void** out) { return gpt2__cuda_upload_matrix(dm, W, rows, out, host, staging, staging_floats, err); };
    GPT2__TRY(matrix(m->wte, m->n_vocab_rows, &dm->wte));
    GPT2__TRY(matrix(m->wpe, m->n_ctx, &dm->wpe));
    dm->lm_head = dm->wte;
    if (m->lm_head.data != m->wte.data) GPT2__TRY(matrix(m->lm_head, m->n_vocab_rows, &dm->lm_head));
#if defined(GPT2_CUDA_Q8)
    /* the q8_0 matrices' 8-bit copies, for the one-token products, where their shared memory fits */
    const bool q8 = dm->fast_decode && C % 32 == 0 && F % 32 == 0 && std::max(gpt2__gemv_q8_smem(C, true), gpt2__gemv_q8_smem(F, false)) <= 48 * 1024;
    const auto matrix_q8 = [&](const gpt2__weight& W, int64_t rows, gpt2__cuda_q8* out) {
        if (!q8 || W.type != GPT2_TYPE_Q8_0) return GPT2_OK;
        dm->q8_decode = true;
        return gpt2__cuda_upload_q8(dm, W, rows, out, err);
    };
    GPT2__TRY(matrix_q8(m->lm_head, m->n_vocab_rows, &dm->lm_head_q8));
#endif
    GPT2__TRY(gpt2__cuda_upload_vector(dm, m->ln_f_weight, C, &dm->ln_f_w, err));
    GPT2__TRY(gpt2__cuda_upload_vector(dm, m->ln_f_bias, C, &dm->ln_f_b, err));
    dm->layers.resize((size_t)m->n_layer);
    for (int l = 0; l < m->n_layer; l++) {
        const gpt2__layer& L = m->layers[(size_t)l];
        gpt2__cuda_layer& G = dm->layers[(size_t)l];
        GPT2__TRY(matrix(L.c_attn, 3 * C, &G.c_attn));
        GPT2__TRY(matrix(L.c_proj, C, &G.c_proj));
        GPT2__TRY(matrix(L.c_fc, F, &G.c_fc));
        GPT2__TRY(matrix(L.mlp_proj, C, &G.mlp_proj));
#if defined(GPT2_CUDA_Q8)
        GPT2__TRY(matrix_q8(L.c_attn, 3 * C, &G.c_attn_q8));
        GPT2__TRY(matrix_q8(L.c_proj, C, &G.c_proj_q8));
        GPT2__TRY(matrix_q8(L.c_fc, F, &G.c_fc_q8));
        GPT2__TRY(matrix_q8(L.mlp_proj, C, &G.mlp_proj_q8));
#endif
        GPT2__TRY(gpt2__cuda_upload_vector(dm, L.ln_1_weight, C, &G.ln_1_w, err));
        GPT2__TRY(gpt2__cuda_upload_vector(dm, L.ln_1_bias, C, &G.ln_1_b, err));
        GPT2__TRY(gpt2__cuda_upload_vector(dm, L.c_attn_bias, 3 * C, &G.c_attn_b, err));
        GPT2__TRY(gpt2__cuda_upload_vector(dm, L.c_proj_bias, C, &G.c_proj_b, err));
        GPT2__TRY(gpt2__cuda_upload_vector(dm, L.ln_2_weight, C, &G.ln_2_w, err));
        GPT2__TRY(gpt2__cuda_upload_vector(dm, L.ln_2_bias, C, &G.ln_2_b, err));
        GPT2__TRY(gpt2__cuda_upload_vector(dm, L.c_fc_bias, F, &G.c_fc_b, err));
        GPT2__TRY(gpt2__cuda_upload_vector(dm, L.mlp_proj_bias, C, &G.mlp_proj_b, err));
    }
    GPT2__CUDA_TRY(cudaDeviceSynchronize());
    gpt2__log(m->params, GPT2_LOG_INFO, "CUDA: %s, %zu bytes of %s weights on device %d%s%s%s", prop.name, dm->bytes, dm->bf16 ? "bf16" : "f16", dm->device,
              dm->fast_decode ? "" : " (no fused one-token kernels for this shape)", dm->persistent ? ", one persistent kernel per token" : "",
              dm->q8_decode ? ", q8_0 matrices also in 8 bits for decode" : "");
    return GPT2_OK;
}

/* ---- src/cuda/session.cuh ---- */
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

/* ---- src/cuda/persistent.cuh ---- */
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

/* ---- src/cuda/forward.cuh ---- */
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

/* ---- src/cuda/batch.cuh ---- */
/* Many sessions in one pass (the backend's run_batch), compiled only with GPT2_CUDA_BATCH (not
   yet run on a GPU: bench/cuda_results.md). */

#if defined(GPT2_CUDA_BATCH)

/* Room in s->batch for a pass over `rows` rows of `sessions` sessions. */
static gpt2_result gpt2__cuda_batch_reserve(gpt2__cuda_session* s, size_t rows, size_t sessions, gpt2_error* err) {
    gpt2__cuda_batch_workspace* w = &s->batch;
    if (rows <= w->rows && sessions <= w->sessions) return GPT2_OK;
    rows = std::max(rows, w->rows);
    sessions = std::max(sessions, w->sessions);
    gpt2__cuda_batch_free(w);
    const size_t C = (size_t)s->model->n_embd, F = (size_t)s->model->n_ff, V = (size_t)s->model->n_vocab;
    gpt2__cuda_rows& a = w->a;
    struct { void** p; size_t bytes; } plan[] = {
        {(void**)&a.x, rows * C * 4}, {(void**)&a.qkv, rows * 3 * C * 4}, {(void**)&a.fc, rows * F * 4}, {&a.xn16, rows * C * 2}, {&a.q16, rows * C * 2},
        {&a.att16, rows * C * 2}, {&a.fc16, rows * F * 2}, {(void**)&a.ids, rows * 4}, {&w->last16, sessions * C * 2}, {(void**)&w->logits, sessions * V * 4},
    };
    char what[96];
    std::snprintf(what, sizeof what, "a batch of %zu sessions and %zu new tokens", sessions, rows);
    for (auto& b : plan) {
        GPT2__TRY(gpt2__cuda_malloc(b.p, b.bytes, s->dm->device, what, err));
        w->allocations.push_back(*b.p);
    }
    w->rows = rows;
    w->sessions = sessions;
    return GPT2_OK;
}

/* Queues the batched pass on r's stream: the parts' tokens `ids` through gpt2__cuda_forward_rows
   in r's batch workspace, then the head over each part's last row as one GEMM, and each
   session's logits to its logits_d. */
static gpt2_result gpt2__cuda_batch_pass(gpt2__cuda_session* r, const gpt2__vector<gpt2__cuda_part>& parts, const gpt2__vector<int32_t>& ids, gpt2_error* err) {
    const gpt2_model* m = r->model;
    gpt2__cuda_batch_workspace* w = &r->batch;
    const size_t C = (size_t)m->n_embd, V = (size_t)m->n_vocab, R = ids.size(), B = parts.size();
    cudaStream_t st = r->stream;
    GPT2__CUDA_TRY(cudaMemcpyAsync(w->a.ids, ids.data(), R * 4, cudaMemcpyHostToDevice, st));
    GPT2__TRY(r->dm->bf16 ? gpt2__cuda_forward_rows<__nv_bfloat16>(r, w->a, parts.data(), B, (int)R, err)
                          : gpt2__cuda_forward_rows<__half>(r, w->a, parts.data(), B, (int)R, err));
    for (size_t i = 0; i < B; i++) {
        const size_t last = (size_t)(parts[i].row + parts[i].T - 1);
        GPT2__CUDA_TRY(cudaMemcpyAsync((uint8_t*)w->last16 + i * C * 2, (const uint8_t*)w->a.xn16 + last * C * 2, C * 2, cudaMemcpyDeviceToDevice, st));
    }
    GPT2__TRY(gpt2__cuda_linear(r, r->dm->lm_head, w->last16, w->logits, false, (int)V, (int)B, (int)C, 0.0f, err));
    for (size_t i = 0; i < B; i++) GPT2__CUDA_TRY(cudaMemcpyAsync(parts[i].s->logits_d, w->logits + i * V, V * 4, cudaMemcpyDeviceToDevice, st));
    return GPT2_OK;
}

/* The backend's run_batch (only when built with GPT2_CUDA_BATCH: see the table): run for every
   session at once, on the stream, cuBLAS handle and batch workspace of `runner`. The new tokens
   of all sessions are the rows of one pass (gpt2__cuda_forward_rows, a part per session), so
   each weight product reads the weights once for all of them; attention goes session by
   session against its own cache. A session whose token the sampler's queued pass already
   computed takes that pass, as run does. Polls runner's abort_fn once, before the pass, as run
   does; the logits change only at the end. A batch of the runner alone is its run, the graph
   path. */
[[maybe_unused]] static gpt2_result gpt2__cuda_run_batch(gpt2_session* runner, gpt2_session* const* sessions, size_t n, gpt2_error* err) {
    if (n == 1 && sessions[0] == runner) return gpt2__cuda_run_session(runner, err);
    gpt2__cuda_session* r = gpt2__cuda(runner);
    GPT2__CUDA_TRY(cudaSetDevice(r->dm->device));
    cudaGetLastError();
    if (gpt2__abort_requested(r)) return gpt2__aborted(err);
    gpt2__vector<gpt2__cuda_part> parts;
    gpt2__vector<int32_t> ids; /* the new tokens of all sessions, in row order */
    for (size_t i = 0; i < n; i++) {
        gpt2__cuda_session* s = gpt2__cuda(sessions[i]);
        GPT2__CUDA_TRY(cudaStreamSynchronize(s->stream)); /* its own passes are done before r's stream uses its cache */
        s->logits_on_host = false;
        if (gpt2__cuda_take_pending(s)) continue;
        parts.push_back({s, (int)ids.size(), (int)s->tokens.size() - s->n_cached, s->n_cached});
        ids.insert(ids.end(), s->tokens.begin() + s->n_cached, s->tokens.end());
    }
    if (parts.empty()) return GPT2_OK;
    GPT2__TRY(gpt2__cuda_batch_reserve(r, ids.size(), parts.size(), err));
    const gpt2_result res = gpt2__cuda_batch_pass(r, parts, ids, err);
    const cudaError_t e = cudaStreamSynchronize(r->stream); /* after a failure too: nothing may write the caches once we return */
    if (res != GPT2_OK) return res;
    return e == cudaSuccess ? GPT2_OK : gpt2__cuda_fail(err, e, "the batched forward pass");
}

#endif /* defined(GPT2_CUDA_BATCH) */

/* ---- src/cuda/backend_cuda.cuh ---- */
/* The CUDA backend's table: the model's attach and release, and the functions of the parts. */

static gpt2_result gpt2__cuda_model_attach(gpt2_model* m, gpt2_error* err) {
    void* memory = GPT2_MALLOC(sizeof(gpt2__cuda_model));
    if (!memory) return gpt2__fail(err, GPT2_ERROR_OUT_OF_MEMORY, "out of memory");
    gpt2__cuda_model* dm = new (memory) gpt2__cuda_model();
    dm->device = m->params.cuda_device_index;
    gpt2_result res = gpt2__cuda_upload(m, dm, err);
#if defined(GPT2_CUDA_PERSISTENT_DECODE)
    if (res == GPT2_OK) res = gpt2__cuda_persistent_setup(m, dm, err);
#endif
    if (res != GPT2_OK) {
        gpt2__cuda_model_free_memory(dm);
        return res;
    }
    m->device_weights = dm;
    return GPT2_OK;
}

static void gpt2__cuda_model_release(gpt2_model* m) {
    if (m->device_weights) gpt2__cuda_model_free_memory(gpt2__cuda_model_of(m));
    m->device_weights = nullptr;
}

static const gpt2__backend gpt2__cuda_backend = {"cuda", gpt2__cuda_model_attach, gpt2__cuda_model_release, gpt2__cuda_session_create, gpt2__cuda_session_free,
                                                 gpt2__cuda_run_session, gpt2__cuda_logits, gpt2__cuda_sample, gpt2__cuda_window_logprob,
                                                 gpt2__cuda_save_cache, gpt2__cuda_load_cache,
/* run_batch is opt-in until a GPU has run tests/cuda/test_cuda.cu's batch cases; without it
   gpt2_batch_eval runs the sessions one by one */
#ifdef GPT2_CUDA_BATCH
                                                 gpt2__cuda_run_batch,
#else
                                                 nullptr,
#endif
                                                 nullptr,  /* sample_batch: each session samples on the GPU in turn */
                                                 nullptr,  /* set_budget: a GPU's pass runs whole (the host only waits on it) */
/* sample_chain is opt-in until a GPU has run the many-block sampler's tests; without it a chain
   with top_p or a grammar copies the logits to the host and draws there */
#ifdef GPT2_CUDA_FAST_SAMPLER
                                                 gpt2__cuda_sample_chain,
#else
                                                 nullptr,
#endif
                                                 nullptr}; /* share_cache: a copy copies the contiguous cache (save_cache, load_cache) */
[[maybe_unused]] static const bool gpt2__cuda_registered = gpt2__register_backend(GPT2_DEVICE_CUDA, &gpt2__cuda_backend);

/* ---- src/cuda/end.cuh ---- */
#endif /* GPT2_IMPLEMENTATION (CUDA) */
