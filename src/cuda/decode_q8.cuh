#ifndef GPT2__PART_CUDA_DECODE_Q8_CUH
#define GPT2__PART_CUDA_DECODE_Q8_CUH
#include "kernels.cuh"

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

#endif /* GPT2__PART_CUDA_DECODE_Q8_CUH */
