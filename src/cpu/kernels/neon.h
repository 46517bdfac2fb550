#ifndef GPT2__PART_CPU_KERNELS_NEON_H
#define GPT2__PART_CPU_KERNELS_NEON_H
#include "scalar.h"

/* Arm NEON kernels (AArch64, where NEON is always present). Kept plain: one vector accumulator
   per output, weights converted to float on the fly; attention and GELU use the portable code. */

#if !defined(GPT2_NO_SIMD) && (defined(__aarch64__) || defined(_M_ARM64))
#define GPT2__NEON 1
#include <arm_neon.h>

/* Dot product of one row of any type with x (n values); the tail runs in scalar. */
static float gpt2__dot_row_neon(uint32_t type, const uint8_t* row, const float* x, int64_t n) {
    float32x4_t acc = vdupq_n_f32(0.0f);
    int64_t k = 0;
    if (type == GPT2_TYPE_Q8_0) {
        const int B = gpt2__q8_block_values;
        for (int64_t b = 0; b < n / B; b++) {
            const uint8_t* block = row + gpt2__q8_block_bytes * b;
            const float32x4_t scale = vdupq_n_f32(gpt2__f16_to_f32(gpt2__q8_scale_f16(block)));
            const int8_t* q = gpt2__q8_values(block);
            for (int i = 0; i < B; i += 8) {
                const int16x8_t q16 = vmovl_s8(vld1_s8(q + i));
                const float32x4_t lo = vmulq_f32(scale, vcvtq_f32_s32(vmovl_s16(vget_low_s16(q16))));
                const float32x4_t hi = vmulq_f32(scale, vcvtq_f32_s32(vmovl_s16(vget_high_s16(q16))));
                acc = vfmaq_f32(acc, lo, vld1q_f32(x + B * b + i));
                acc = vfmaq_f32(acc, hi, vld1q_f32(x + B * b + i + 4));
            }
        }
        return vaddvq_f32(acc);
    }
    if (type == GPT2_TYPE_Q4_0) { /* a block at a time through the portable conversion */
        const int B = gpt2__q4_block_values;
        float w[gpt2__q4_block_values];
        for (int64_t b = 0; b < n / B; b++) {
            gpt2__dequantize_row(type, row + gpt2__q4_block_bytes * b, w, B);
            for (int i = 0; i < B; i += 4) acc = vfmaq_f32(acc, vld1q_f32(w + i), vld1q_f32(x + B * b + i));
        }
        return vaddvq_f32(acc);
    }
    for (; k + 4 <= n; k += 4) {
        float32x4_t w;
        if (type == GPT2_TYPE_F32) w = vld1q_f32((const float*)row + k);
        else if (type == GPT2_TYPE_F16) w = vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16((const uint16_t*)(row + 2 * k))));
        else w = vreinterpretq_f32_u32(vshll_n_u16(vld1_u16((const uint16_t*)(row + 2 * k)), 16));
        acc = vfmaq_f32(acc, w, vld1q_f32(x + k));
    }
    float sum = vaddvq_f32(acc);
    for (; k < n; k++) {
        float w[1] = {0.0f}; /* set: gcc cannot see that every type reaching here fills it */
        gpt2__dequantize_row(type, row + (type == GPT2_TYPE_F32 ? 4 : 2) * k, w, 1);
        sum += w[0] * x[k];
    }
    return sum;
}

/* One q8_0 block (at p) times its 32 quantized activations, as 4 int32 partial sums. */
static inline int32x4_t gpt2__block_dot_q8_neon(const uint8_t* p, const int8_t* xq) {
    const int8_t* q = gpt2__q8_values(p);
    int32x4_t isum = vdupq_n_s32(0);
    for (int i = 0; i < gpt2__q8_block_values; i += 16) {
        const int8x16_t w = vld1q_s8(q + i), xv = vld1q_s8(xq + i);
        isum = vpadalq_s16(isum, vmull_s8(vget_low_s8(w), vget_low_s8(xv)));
        isum = vpadalq_s16(isum, vmull_s8(vget_high_s8(w), vget_high_s8(xv)));
    }
    return isum;
}

/* One q4_0 block (at p) times its 32 quantized activations: the nibbles less 8 as signed bytes. */
static inline int32x4_t gpt2__block_dot_q4_neon(const uint8_t* p, const int8_t* xq) {
    const uint8x16_t packed = vld1q_u8(gpt2__q4_nibbles(p));
    const int8x16_t lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(packed, vdupq_n_u8(15))), vdupq_n_s8(8));
    const int8x16_t hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(packed, 4)), vdupq_n_s8(8));
    const int8x16_t x0 = vld1q_s8(xq), x1 = vld1q_s8(xq + 16);
    int32x4_t isum = vpaddlq_s16(vmull_s8(vget_low_s8(lo), vget_low_s8(x0)));
    isum = vpadalq_s16(isum, vmull_s8(vget_high_s8(lo), vget_high_s8(x0)));
    isum = vpadalq_s16(isum, vmull_s8(vget_low_s8(hi), vget_low_s8(x1)));
    return vpadalq_s16(isum, vmull_s8(vget_high_s8(hi), vget_high_s8(x1)));
}

/* row . x for one row of int8-dot blocks (q8_0 or q4_0, BYTES each) against x quantized by
   gpt2__quantize_q8 (xscale: its block scales): exact integer sums per block, scaled by both
   blocks' scales. */
template <int BYTES, int32x4_t (*BlockDot)(const uint8_t*, const int8_t*)>
static float gpt2__dot_blocks_neon(const uint8_t* row, const int8_t* xq, const float* xscale, int64_t n) {
    const int B = gpt2__q8_block_values;
    float32x4_t acc = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < n / B; b++) {
        const uint8_t* block = row + BYTES * b;
        acc = vfmaq_n_f32(acc, vcvtq_f32_s32(BlockDot(block, xq + B * b)), gpt2__f16_to_f32(gpt2__q8_scale_f16(block)) * xscale[b]);
    }
    return vaddvq_f32(acc);
}

static void gpt2__matmul_rows_neon(const gpt2__matmul_args& a, int64_t o_begin, int64_t o_end, float* panel) {
    (void)panel;
    gpt2__matmul_by_rows<gpt2__dot_blocks_neon<gpt2__q8_block_bytes, gpt2__block_dot_q8_neon>,
                         gpt2__dot_blocks_neon<gpt2__q4_block_bytes, gpt2__block_dot_q4_neon>, gpt2__dot_row_neon>(a, o_begin, o_end);
}

/* NEON's conversion rounds as the FPCR says, to nearest even unless a caller changed it, as
   gpt2__f32_to_f16. */
static void gpt2__to_f16_neon(uint16_t* dst, const float* x, size_t n) {
    size_t i = 0;
    for (; i + 4 <= n; i += 4) vst1_u16(dst + i, vreinterpret_u16_f16(vcvt_f16_f32(vld1q_f32(x + i))));
    gpt2__to_f16_scalar(dst + i, x + i, n - i);
}

#endif /* GPT2__NEON */

#endif /* GPT2__PART_CPU_KERNELS_NEON_H */
