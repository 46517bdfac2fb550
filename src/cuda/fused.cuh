#ifndef GPT2__PART_CUDA_FUSED_CUH
#define GPT2__PART_CUDA_FUSED_CUH
#include "kernels.cuh"

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

#endif /* GPT2__PART_CUDA_FUSED_CUH */
