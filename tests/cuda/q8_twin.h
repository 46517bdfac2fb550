// The CPU twin of the q8_0 one-token product (gpt2__gemv_q8_kernel, src/cuda/decode_q8.cuh): the
// GPU's layout of a q8_0 row (its int8 values apart from its f16 scales), then the kernel's dot
// product with the input quantized by gpt2__quantize_q8_scalar: a pair of lanes per block of 32, an
// exact integer sum, one fma per block into the even lane's float accumulator (blocks 16 apart
// in each lane, in order), then the warp's butterfly over its 32 lanes. tests/test_cuda_twins.cpp
// compares it with the scalar kernels' q8_0 rows; tests/cuda/test_cuda.cu compares the kernel with
// it bit for bit. Needs gpt2.h's implementation before it.
#ifndef GPT2_TESTS_CUDA_Q8_TWIN_H
#define GPT2_TESTS_CUDA_Q8_TWIN_H

#include <cmath>
#include <cstdint>
#include <vector>

namespace q8_twin {

// One q8_0 row of K values in GGUF blocks as the GPU holds it: K int8 values, K / 32 scales.
struct Row {
    std::vector<int8_t> values;
    std::vector<uint16_t> scales;
};

inline Row split(const uint8_t* row, int K) {
    Row r;
    for (int b = 0; b < K / 32; b++) {
        const uint8_t* block = row + (size_t)b * gpt2__q8_block_bytes;
        r.scales.push_back(gpt2__q8_scale_f16(block));
        r.values.insert(r.values.end(), gpt2__q8_values(block), gpt2__q8_values(block) + 32);
    }
    return r;
}

// The kernel's dot product (before the bias) of a row with the quantized input xq, xscale.
inline float dot(const Row& w, const int8_t* xq, const float* xscale, int K) {
    const int K16 = K / 16;
    float acc[32] = {};
    for (int j = 0; 32 * j < K16; j++)
        for (int lane = 0; lane < 32; lane += 2) {
            const int c = lane + 32 * j; // the even lane's chunk; its pair takes c + 1
            if (c >= K16) continue;
            int isum = 0;
            for (int i = 0; i < 32; i++) isum += (int)w.values[(size_t)(16 * c + i)] * (int)xq[16 * c + i];
            const int b = c / 2;
            acc[lane] = std::fma((float)isum, gpt2__f16_to_f32(w.scales[(size_t)b]) * xscale[b], acc[lane]);
        }
    // gpt2__warp_sum: lane l adds lane l ^ o; both lanes of a pair get the same sum (a float add
    // is commutative), so each pair is summed once, in place. (Written with a copy of the 32
    // lanes, Emscripten 3.1.6's SLP vectorizer miscompiled it at -O3 -msimd128.)
    for (int o = 16; o > 0; o >>= 1)
        for (int l = 0; l < 32; l++)
            if (l < (l ^ o)) acc[l] = acc[l ^ o] = acc[l] + acc[l ^ o];
    return acc[0];
}

} // namespace q8_twin

#endif
