#ifndef GPT2__PART_CUDA_COMMON_CUH
#define GPT2__PART_CUDA_COMMON_CUH
#include "cuda_api.h"

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

#endif /* GPT2__PART_CUDA_COMMON_CUH */
