#ifndef GPT2__PART_CPU_KERNELS_WASM_SIMD128_H
#define GPT2__PART_CPU_KERNELS_WASM_SIMD128_H
#include "scalar.h"

/* WebAssembly SIMD128 kernels (Emscripten with -msimd128, which defines __wasm_simd128__). A
   browser has no run-time query for SIMD support, so the set is chosen when compiling: a build
   without -msimd128 runs the portable kernels. Kept plain as the NEON set is: matmuls row by row,
   decode widening the weights to float on the fly and prefill once per row; GELU in four lanes;
   attention and the activation quantization use the portable code. SIMD128 has no fused multiply-add, so products and sums
   round separately, as the scalar set's do. */

#if !defined(GPT2_NO_SIMD) && defined(__wasm_simd128__)
#define GPT2__WASM_SIMD128 1
#include <wasm_simd128.h>

/* Eight f16 values to float, exactly as gpt2__f16_to_f32: the exponent and mantissa shifted into
   float's fields and multiplied by 2^112 (the difference of the exponent biases), which is exact
   for normal and subnormal values alike; the sign, and float's all-ones exponent for infinities
   and NaNs, are made in 16-bit lanes and put in the high halves of the floats. */
static inline void gpt2__f16x8_to_f32_wasm(const uint8_t* p, v128_t* lo, v128_t* hi) {
    const v128_t h = wasm_v128_load(p);
    const v128_t magnitude = wasm_v128_and(h, wasm_i16x8_splat(0x7fff));
    const v128_t inf_or_nan = wasm_i16x8_gt(magnitude, wasm_i16x8_splat(0x7bff));
    const v128_t high = wasm_v128_or(wasm_v128_and(h, wasm_i16x8_splat((int16_t)0x8000)), wasm_v128_and(inf_or_nan, wasm_i16x8_splat(0x7f80)));
    const v128_t rebias = wasm_f32x4_splat(0x1p112f), zero = wasm_i16x8_splat(0);
    *lo = wasm_f32x4_mul(wasm_i32x4_shl(wasm_u32x4_extend_low_u16x8(magnitude), 13), rebias);
    *hi = wasm_f32x4_mul(wasm_i32x4_shl(wasm_u32x4_extend_high_u16x8(magnitude), 13), rebias);
    *lo = wasm_v128_or(*lo, wasm_i16x8_shuffle(zero, high, 0, 8, 1, 9, 2, 10, 3, 11));
    *hi = wasm_v128_or(*hi, wasm_i16x8_shuffle(zero, high, 4, 12, 5, 13, 6, 14, 7, 15));
}

static inline float gpt2__sum_f32x4_wasm(v128_t v) {
    return (wasm_f32x4_extract_lane(v, 0) + wasm_f32x4_extract_lane(v, 1)) + (wasm_f32x4_extract_lane(v, 2) + wasm_f32x4_extract_lane(v, 3));
}

/* Eight weights of a row of type TYPE, starting at value k, as floats. */
template <uint32_t TYPE>
static inline void gpt2__load_weights8_wasm(const uint8_t* row, int64_t k, v128_t* lo, v128_t* hi) {
    if constexpr (TYPE == GPT2_TYPE_F32) {
        *lo = wasm_v128_load(row + 4 * k);
        *hi = wasm_v128_load(row + 4 * k + 16);
    } else if constexpr (TYPE == GPT2_TYPE_F16) {
        gpt2__f16x8_to_f32_wasm(row + 2 * k, lo, hi);
    } else { /* bf16: the high half of a float */
        const v128_t h = wasm_v128_load(row + 2 * k), zero = wasm_i16x8_splat(0);
        *lo = wasm_i16x8_shuffle(zero, h, 0, 8, 1, 9, 2, 10, 3, 11);
        *hi = wasm_i16x8_shuffle(zero, h, 4, 12, 5, 13, 6, 14, 7, 15);
    }
}

/* Dot product of a row of f32, f16 or bf16 with x (n values): eight values per step in two
   accumulators of four lanes (which hide the latency of the adds); the tail runs in scalar. */
template <uint32_t TYPE>
static float gpt2__dot_row16_wasm(const uint8_t* row, const float* x, int64_t n) {
    v128_t acc0 = wasm_f32x4_splat(0.0f), acc1 = wasm_f32x4_splat(0.0f);
    int64_t k = 0;
    for (; k + 8 <= n; k += 8) {
        v128_t lo, hi;
        gpt2__load_weights8_wasm<TYPE>(row, k, &lo, &hi);
        acc0 = wasm_f32x4_add(acc0, wasm_f32x4_mul(lo, wasm_v128_load(x + k)));
        acc1 = wasm_f32x4_add(acc1, wasm_f32x4_mul(hi, wasm_v128_load(x + k + 4)));
    }
    float sum = gpt2__sum_f32x4_wasm(wasm_f32x4_add(acc0, acc1));
    for (; k < n; k++) {
        float w;
        gpt2__dequantize_row(TYPE, row + (TYPE == GPT2_TYPE_F32 ? 4 : 2) * k, &w, 1);
        sum += w * x[k];
    }
    return sum;
}

/* A q8_0 row against float activations (the prefill path): each weight is scale * q in float,
   as gpt2__dequantize_row makes it, then multiplied by x. */
static float gpt2__dot_q8_float_wasm(const uint8_t* row, const float* x, int64_t n) {
    const int B = gpt2__q8_block_values;
    v128_t acc0 = wasm_f32x4_splat(0.0f), acc1 = wasm_f32x4_splat(0.0f);
    for (int64_t b = 0; b < n / B; b++) {
        const uint8_t* block = row + gpt2__q8_block_bytes * b;
        const v128_t scale = wasm_f32x4_splat(gpt2__f16_to_f32(gpt2__q8_scale_f16(block)));
        const int8_t* q = gpt2__q8_values(block);
        for (int i = 0; i < B; i += 8) {
            const v128_t q16 = wasm_i16x8_load8x8(q + i);
            const v128_t lo = wasm_f32x4_mul(scale, wasm_f32x4_convert_i32x4(wasm_i32x4_extend_low_i16x8(q16)));
            const v128_t hi = wasm_f32x4_mul(scale, wasm_f32x4_convert_i32x4(wasm_i32x4_extend_high_i16x8(q16)));
            acc0 = wasm_f32x4_add(acc0, wasm_f32x4_mul(lo, wasm_v128_load(x + B * b + i)));
            acc1 = wasm_f32x4_add(acc1, wasm_f32x4_mul(hi, wasm_v128_load(x + B * b + i + 4)));
        }
    }
    return gpt2__sum_f32x4_wasm(wasm_f32x4_add(acc0, acc1));
}

/* Dot product of one weight row with float x. A weight type this set has no loop for (q4_0, and
   any added later) takes the portable dot product, so every type the loader accepts runs; q4_0
   rows against int8 activations take gpt2__dot_q4_scalar (gpt2__matmul_rows_wasm). */
static float gpt2__dot_row_wasm(uint32_t type, const uint8_t* row, const float* x, int64_t n) {
    switch (type) {
    case GPT2_TYPE_F32: return gpt2__dot_row16_wasm<GPT2_TYPE_F32>(row, x, n);
    case GPT2_TYPE_F16: return gpt2__dot_row16_wasm<GPT2_TYPE_F16>(row, x, n);
    case GPT2_TYPE_BF16: return gpt2__dot_row16_wasm<GPT2_TYPE_BF16>(row, x, n);
    case GPT2_TYPE_Q8_0: return gpt2__dot_q8_float_wasm(row, x, n);
    default: return gpt2__dot_row_scalar(type, row, x, n);
    }
}

/* A q8_0 row against int8 activations: each block's integer sum from 16-bit products added in
   pairs (i32x4.dot_i16x8), exact; then the blocks are scaled and summed in gpt2__dot_q8_scalar's
   order, so the result equals the scalar set's bit for bit. */
static float gpt2__dot_q8_wasm(const uint8_t* row, const int8_t* xq, const float* xscale, int64_t n) {
    const int B = gpt2__q8_block_values;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / B; b++) {
        const uint8_t* block = row + gpt2__q8_block_bytes * b;
        const int8_t* q = gpt2__q8_values(block);
        v128_t isum = wasm_i32x4_splat(0);
        for (int i = 0; i < B; i += 16) {
            const v128_t w = wasm_v128_load(q + i), xv = wasm_v128_load(xq + B * b + i);
            isum = wasm_i32x4_add(isum, wasm_i32x4_dot_i16x8(wasm_i16x8_extend_low_i8x16(w), wasm_i16x8_extend_low_i8x16(xv)));
            isum = wasm_i32x4_add(isum, wasm_i32x4_dot_i16x8(wasm_i16x8_extend_high_i8x16(w), wasm_i16x8_extend_high_i8x16(xv)));
        }
        const int32_t total = wasm_i32x4_extract_lane(isum, 0) + wasm_i32x4_extract_lane(isum, 1) + wasm_i32x4_extract_lane(isum, 2) + wasm_i32x4_extract_lane(isum, 3);
        sum += (float)total * (gpt2__f16_to_f32(gpt2__q8_scale_f16(block)) * xscale[b]);
    }
    return sum;
}

/* One row of f16, bf16 or q8_0 weights to float (exact), f16 eight values at a time. */
static void gpt2__widen_row_wasm(uint32_t type, const uint8_t* row, float* out, int64_t n) {
    if (type != GPT2_TYPE_F16) return gpt2__dequantize_row(type, row, out, n);
    int64_t k = 0;
    for (; k + 8 <= n; k += 8) {
        v128_t lo, hi;
        gpt2__f16x8_to_f32_wasm(row + 2 * k, &lo, &hi);
        wasm_v128_store(out + k, lo);
        wasm_v128_store(out + k + 4, hi);
    }
    gpt2__dequantize_row(type, row + 2 * k, out + k, n - k);
}

/* Decode streams each row of W in its own type (GPT2__STREAM_ROWS, GPT2__STREAM_INT8). A prefill row of f16, bf16
   or q8_0 weights is widened to float once, in `panel`, and every token's dot product reads the
   floats: widening f16 costs more than the multiply-adds, and is paid once per row instead of
   once per token. Widening is exact and the dot products add in the order of the streamed ones
   (gpt2__dot_q8_float_wasm's pairs of four lanes are those of gpt2__dot_row16_wasm), so prefill
   and decode give the same bits. Other types stream in prefill too. */
static void gpt2__matmul_rows_wasm(const gpt2__matmul_args& a, int64_t o_begin, int64_t o_end, float* panel) {
    (void)panel;
    gpt2__matmul_by_rows<gpt2__dot_q8_wasm, gpt2__dot_q4_scalar, gpt2__dot_row_wasm>(a, o_begin, o_end);
}
/* GPT2__FLOAT_TILES: widened rows of f16, bf16 and q8_0; other types stream as in decode. */
static void gpt2__matmul_widened_wasm(const gpt2__matmul_args& a, int64_t o_begin, int64_t o_end, float* panel) {
    const uint32_t type = a.W->type;
    if (type != GPT2_TYPE_F16 && type != GPT2_TYPE_BF16 && type != GPT2_TYPE_Q8_0) return gpt2__matmul_rows_wasm(a, o_begin, o_end, panel);
    gpt2__matmul_widened_rows<gpt2__dot_row_wasm, gpt2__widen_row_wasm>(a, o_begin, o_end, panel);
}

/* e^x as contract.h describes it (gpt2__exp_poly), four lanes; 2^n built in the exponent bits. */
static inline v128_t gpt2__exp_wasm(v128_t x) {
    x = wasm_f32x4_max(wasm_f32x4_min(x, wasm_f32x4_splat(gpt2__exp_max)), wasm_f32x4_splat(gpt2__exp_min));
    const v128_t n = wasm_f32x4_nearest(wasm_f32x4_mul(x, wasm_f32x4_splat(gpt2__log2e)));
    v128_t r = wasm_f32x4_sub(x, wasm_f32x4_mul(n, wasm_f32x4_splat(gpt2__ln2_hi)));
    r = wasm_f32x4_sub(r, wasm_f32x4_mul(n, wasm_f32x4_splat(gpt2__ln2_lo)));
    v128_t p = wasm_f32x4_splat(gpt2__exp_poly[0]);
    GPT2__UNROLL
    for (size_t i = 1; i < std::size(gpt2__exp_poly); i++) p = wasm_f32x4_add(wasm_f32x4_mul(p, r), wasm_f32x4_splat(gpt2__exp_poly[i]));
    p = wasm_f32x4_add(wasm_f32x4_mul(wasm_f32x4_mul(p, r), r), wasm_f32x4_add(r, wasm_f32x4_splat(1.0f)));
    const v128_t e = wasm_i32x4_shl(wasm_i32x4_add(wasm_i32x4_trunc_sat_f32x4(n), wasm_i32x4_splat(127)), 23);
    return wasm_f32x4_mul(p, e);
}

/* GELU of four values, both forms, with the constants and approximations of contract.h (as
   gpt2__gelu8_avx2). */
static inline v128_t gpt2__gelu4_wasm(v128_t v, bool tanh_form) {
    const v128_t one = wasm_f32x4_splat(1.0f);
    v128_t g;
    if (tanh_form) {
        const v128_t cubic = wasm_f32x4_mul(wasm_f32x4_mul(wasm_f32x4_splat(gpt2__gelu_cubic), v), wasm_f32x4_mul(v, v));
        const v128_t u = wasm_f32x4_mul(wasm_f32x4_splat(gpt2__sqrt_2_over_pi), wasm_f32x4_add(cubic, v));
        const v128_t e = gpt2__exp_wasm(wasm_f32x4_add(u, u));
        g = wasm_f32x4_sub(one, wasm_f32x4_div(wasm_f32x4_splat(2.0f), wasm_f32x4_add(e, one))); /* tanh u */
    } else {
        const v128_t sign_bit = wasm_f32x4_splat(-0.0f);
        const v128_t sign = wasm_v128_and(v, sign_bit);
        const v128_t z = wasm_v128_andnot(wasm_f32x4_mul(v, wasm_f32x4_splat(gpt2__sqrt_half)), sign_bit);
        const v128_t t = wasm_f32x4_div(one, wasm_f32x4_add(wasm_f32x4_mul(wasm_f32x4_splat(gpt2__erf_p), z), one));
        v128_t p = wasm_f32x4_splat(gpt2__erf_poly[0]);
        GPT2__UNROLL
        for (size_t i = 1; i < std::size(gpt2__erf_poly); i++) p = wasm_f32x4_add(wasm_f32x4_mul(p, t), wasm_f32x4_splat(gpt2__erf_poly[i]));
        p = wasm_f32x4_mul(p, t);
        const v128_t e = gpt2__exp_wasm(wasm_f32x4_neg(wasm_f32x4_mul(z, z)));
        g = wasm_v128_or(wasm_f32x4_sub(one, wasm_f32x4_mul(p, e)), sign); /* erf is odd */
    }
    const v128_t half_v = wasm_f32x4_mul(wasm_f32x4_splat(0.5f), v);
    return wasm_f32x4_add(wasm_f32x4_mul(half_v, g), half_v);
}

/* The tail goes through a padded copy, so every value takes the same arithmetic. */
static void gpt2__gelu_wasm(float* x, size_t n, bool tanh_form) {
    size_t i = 0;
    for (; i + 4 <= n; i += 4) wasm_v128_store(x + i, gpt2__gelu4_wasm(wasm_v128_load(x + i), tanh_form));
    if (i < n) {
        float tail[4] = {0};
        std::memcpy(tail, x + i, (n - i) * 4);
        wasm_v128_store(tail, gpt2__gelu4_wasm(wasm_v128_load(tail), tanh_form));
        std::memcpy(x + i, tail, (n - i) * 4);
    }
}

#endif /* GPT2__WASM_SIMD128 */

#endif /* GPT2__PART_CPU_KERNELS_WASM_SIMD128_H */
