// The CPU twin of the fused attention + output projection (gpt2__attn_proj_decode_kernel,
// src/cuda/fused.cuh): given the heads' outputs att (C floats, the kernel's att1), x after
// x += c_proj(att) + bias with the kernel's sums: per row o and head h, cpr = D / 8 lanes' sums
// of 8 fma each in column order, a butterfly over the cpr lanes, the heads' parts added in head
// order, then the bias. tests/test_cuda_twins.cpp compares it with a float64 product;
// tests/cuda/test_cuda.cu compares the kernel with it bit for bit. Needs gpt2.h's implementation.
#ifndef GPT2_TESTS_CUDA_FUSED_TWIN_H
#define GPT2_TESTS_CUDA_FUSED_TWIN_H

#include <cmath>
#include <cstdint>
#include <vector>

namespace fused_twin {

// W (C, C) row-major as f16 or bf16 bits.
inline void attn_proj(const uint16_t* W, bool bf16, const float* att, const float* bias, int C, int H, float* x) {
    const int D = C / H, cpr = D / 8;
    std::vector<float> lanes((size_t)cpr), next((size_t)cpr);
    for (int o = 0; o < C; o++) {
        float y = 0.0f;
        for (int h = 0; h < H; h++) {
            for (int c = 0; c < cpr; c++) {
                float s = 0.0f;
                for (int i = 0; i < 8; i++) {
                    const uint16_t w = W[(size_t)o * C + (size_t)h * D + 8 * c + i];
                    s = std::fma(bf16 ? gpt2__bf16_to_f32(w) : gpt2__f16_to_f32(w), att[h * D + 8 * c + i], s);
                }
                lanes[(size_t)c] = s;
            }
            for (int off = cpr / 2; off > 0; off /= 2) { // lane c adds lane c ^ off
                for (int c = 0; c < cpr; c++) next[(size_t)c] = lanes[(size_t)c] + lanes[(size_t)(c ^ off)];
                lanes.swap(next);
            }
            y += lanes[0];
        }
        x[o] += y + (bias ? bias[o] : 0.0f);
    }
}

} // namespace fused_twin

#endif
