#ifndef GPT2__PART_CPU_KERNELS_AVX512_ROWS_H
#define GPT2__PART_CPU_KERNELS_AVX512_ROWS_H
#include "avx2.h"

/* The AVX-512 set (F, BW, VL, DQ, VNNI), part 1 of 4: loads every part shares, and decode's
   streamed q8_0 and q4_0 rows against int8 activations (GPT2__STREAM_INT8). avx512.h is the
   set's entry; x86_prefill.h has the target macros and the prefill driver shared with AVX2. */

#if defined(GPT2__X86)

/* 16 weights of a row from element k, as floats; lanes outside mask m are zero. */
template <uint32_t TYPE>
GPT2__AVX512 static inline __m512 gpt2__w16_avx512(const uint8_t* row, int64_t k, __mmask16 m) {
    if constexpr (TYPE == GPT2_TYPE_F32) {
        return _mm512_maskz_loadu_ps(m, (const float*)row + k);
    } else if constexpr (TYPE == GPT2_TYPE_F16) {
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, row + 2 * k));
    } else {
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, row + 2 * k)), 16));
    }
}

GPT2__AVX512 static inline __mmask16 gpt2__mask16(int64_t k, int64_t n) {
    return n - k >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - k)) - 1);
}

/* ---- Decode: q8_0 and q4_0 rows against one row of int8 activations --------------------------

   vpdpbusd multiplies unsigned bytes by signed ones, 4 products into each int32 lane. The weights
   go in as unsigned w + offset (q8_0's values xor 0x80: offset 128; q4_0's nibbles as they are:
   offset 8) and x as it is, so a lane's sum is offset x (the sum of its 4 x) too high: a term of
   x alone, computed once per call (gpt2__prepare_x_avx512) and the lane's starting value, so the
   sum stays exact in int32 and a row pays nothing for it. Blocks go 4 at a time: the 8 lanes a
   block fills are added in pairs (exactly) into one vector of 4 lanes a block, which is
   converted, scaled and accumulated once. */

/* Rows a decode step takes together, each group's activations loaded once for all of them: 4
   q4_0 rows, 1 q8_0 row. From DRAM, interleaved rows defeat the hardware prefetcher, so each row
   prefetches the bytes gpt2__decode_prefetch_bytes ahead of it (docs/PERFORMANCE.md, Kernel
   notes). */
template <uint32_t TYPE>
static constexpr int gpt2__decode_rows = TYPE == GPT2_TYPE_Q4_0 ? 4 : 1;
static const int gpt2__decode_prefetch_bytes = 8192;

/* The block (0-3) of each lane of a group's sums, after gpt2__dot4_avx512's pairing. */
GPT2__AVX512 static inline __m512i gpt2__lane_blocks_avx512() { return _mm512_setr_epi32(0, 0, 2, 2, 0, 0, 2, 2, 1, 1, 3, 3, 1, 1, 3, 3); }

/* Bytes of the activations' part of one group of 4 blocks: the two vectors of lane offsets
   (-offset x the lane's 4 x), then the 4 activation scales in the lanes' order. */
static const size_t gpt2__x4_bytes = 192;

template <uint32_t TYPE>
GPT2__AVX512 static void gpt2__prepare_x_avx512(uint8_t* dst, const int8_t* xq, const float* xs, int64_t groups) {
    const __m512i offset = _mm512_set1_epi8(TYPE == GPT2_TYPE_Q4_0 ? 8 : (char)0x80), zero = _mm512_setzero_si512();
    for (int64_t g = 0; g < groups; g++, dst += gpt2__x4_bytes) {
        for (int half = 0; half < 2; half++)
            _mm512_storeu_si512(dst + 64 * half, _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, offset, _mm512_loadu_si512(xq + 128 * g + 64 * half))));
        _mm512_storeu_ps(dst + 128, _mm512_permutexvar_ps(gpt2__lane_blocks_avx512(), _mm512_castps128_ps512(_mm_loadu_ps(xs + 4 * g))));
    }
}

/* Two consecutive blocks' 64 weights at p as unsigned bytes (w + offset), first block low. */
template <uint32_t TYPE>
GPT2__AVX512 static inline __m512i gpt2__w64_avx512(const uint8_t* p) {
    if constexpr (TYPE == GPT2_TYPE_Q4_0) { /* each block's 16 bytes in two 128-bit lanes, the second shifted to its high nibbles */
        const __m512i both = _mm512_mask_broadcast_i32x4(_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i*)gpt2__q4_nibbles(p))), (__mmask16)0xff00,
                                                         _mm_loadu_si128((const __m128i*)gpt2__q4_nibbles(p + gpt2__q4_block_bytes)));
        return _mm512_and_si512(_mm512_mask_srli_epi16(both, (__mmask32)0xff00ff00u, both, 4), _mm512_set1_epi8(15));
    } else {
        const __m512i w = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i*)gpt2__q8_values(p))),
                                             _mm256_loadu_si256((const __m256i*)gpt2__q8_values(p + gpt2__q8_block_bytes)), 1);
        return _mm512_xor_si512(w, _mm512_set1_epi8((char)0x80));
    }
}

/* The exact int32 sums of 4 blocks at p times their 128 activations (x01, x23), 4 lanes a block
   (lane i: block gpt2__lane_blocks_avx512); start01, start23: the lanes' offsets. */
template <uint32_t TYPE>
GPT2__AVX512 static inline __m512i gpt2__dot4_avx512(const uint8_t* p, __m512i x01, __m512i x23, __m512i start01, __m512i start23) {
    const int BYTES = TYPE == GPT2_TYPE_Q4_0 ? gpt2__q4_block_bytes : gpt2__q8_block_bytes;
    const __m512 d01 = _mm512_castsi512_ps(_mm512_dpbusd_epi32(start01, gpt2__w64_avx512<TYPE>(p), x01));
    const __m512 d23 = _mm512_castsi512_ps(_mm512_dpbusd_epi32(start23, gpt2__w64_avx512<TYPE>(p + 2 * BYTES), x23));
    return _mm512_add_epi32(_mm512_castps_si512(_mm512_shuffle_ps(d01, d23, 0x88)), _mm512_castps_si512(_mm512_shuffle_ps(d01, d23, 0xdd)));
}

/* The weight scales of the 4 blocks at p in the lanes' order: picked from the block bytes by
   one word permutation (q4_0's 4 blocks, 72 bytes, hold all 4 in their first 64; q8_0's 136 in
   their first 128). */
template <uint32_t TYPE>
GPT2__AVX512 static inline __m512 gpt2__scales4_avx512(const uint8_t* p) {
    const int BYTES = TYPE == GPT2_TYPE_Q4_0 ? gpt2__q4_block_bytes : gpt2__q8_block_bytes;
    const __m512i words = _mm512_castsi256_si512(_mm512_cvtepi32_epi16(_mm512_mullo_epi32(gpt2__lane_blocks_avx512(), _mm512_set1_epi32(BYTES / 2))));
    const __m512i first = _mm512_loadu_si512(p);
    if constexpr (TYPE == GPT2_TYPE_Q4_0) return _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(words, first)));
    else return _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutex2var_epi16(first, words, _mm512_loadu_si512(p + 64))));
}

/* The int32 sums of one q8_0 block times its 32 quantized activations, 8 lanes. */
GPT2__AVX512 static inline __m256i gpt2__dot1_q8_avx512(const uint8_t* p, const int8_t* xq) {
    const __m256i x = _mm256_loadu_si256((const __m256i*)xq), w = _mm256_loadu_si256((const __m256i*)gpt2__q8_values(p)), zero = _mm256_setzero_si256();
    return _mm256_dpbusd_epi32(zero, _mm256_abs_epi8(w), _mm256_mask_sub_epi8(x, _mm256_movepi8_mask(w), zero, x));
}

/* The int32 sums of one q4_0 block times its 32 quantized activations, 8 lanes. */
GPT2__AVX512 static inline __m256i gpt2__dot1_q4_avx512(const uint8_t* p, const int8_t* xq) {
    const __m128i packed = _mm_loadu_si128((const __m128i*)gpt2__q4_nibbles(p));
    const __m256i w = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(packed, 4), packed), _mm256_set1_epi8(15));
    const __m256i x = _mm256_loadu_si256((const __m256i*)xq), zero = _mm256_setzero_si256();
    return _mm256_sub_epi32(_mm256_dpbusd_epi32(zero, w, x), _mm256_dpbusd_epi32(zero, _mm256_set1_epi8(8), x));
}

/* acc[r] + the 4 blocks from block b of R rows (ld bytes apart) times x, scaled; x4: the
   group's prepared activations, loaded once for the R rows. */
template <uint32_t TYPE, int R>
GPT2__AVX512 static inline void gpt2__group_int8_avx512(__m512* acc, const uint8_t* row, size_t ld, int64_t b, const int8_t* xq, const uint8_t* x4) {
    const int BYTES = TYPE == GPT2_TYPE_Q4_0 ? gpt2__q4_block_bytes : gpt2__q8_block_bytes;
    const __m512i x01 = _mm512_loadu_si512(xq + gpt2__q8_block_values * b), x23 = _mm512_loadu_si512(xq + gpt2__q8_block_values * b + 64);
    const __m512i start01 = _mm512_loadu_si512(x4), start23 = _mm512_loadu_si512(x4 + 64);
    const __m512 x_scales = _mm512_loadu_ps(x4 + 128);
    GPT2__UNROLL
    for (int r = 0; r < R; r++) {
        const uint8_t* p = row + r * ld + BYTES * b;
        for (int l = 0; l < 4 * BYTES; l += 64) _mm_prefetch((const char*)p + gpt2__decode_prefetch_bytes + l, _MM_HINT_T0);
        const __m512 scales = _mm512_mul_ps(gpt2__scales4_avx512<TYPE>(p), x_scales);
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(gpt2__dot4_avx512<TYPE>(p, x01, x23, start01, start23)), scales, acc[r]);
    }
}

/* out[r] = row r . x for R rows of nb blocks (ld bytes apart); x: quantized by gpt2__quantize_q8
   (xs its scales), its groups of 4 blocks prepared in `prepared`. Each row runs the same
   instructions whatever R is: groups alternate between its two accumulators, up to 3 last
   blocks go one by one. */
template <uint32_t TYPE, int R>
GPT2__AVX512 static void gpt2__dot_int8_rows_avx512(float* out, const uint8_t* row, size_t ld, const int8_t* xq, const float* xs, const uint8_t* prepared, int64_t nb) {
    const int B = gpt2__q8_block_values, BYTES = TYPE == GPT2_TYPE_Q4_0 ? gpt2__q4_block_bytes : gpt2__q8_block_bytes;
    __m512 acc0[R], acc1[R];
    GPT2__UNROLL
    for (int r = 0; r < R; r++) acc0[r] = acc1[r] = _mm512_setzero_ps();
    int64_t b = 0;
    for (; b + 8 <= nb; b += 8) {
        gpt2__group_int8_avx512<TYPE, R>(acc0, row, ld, b, xq, prepared + gpt2__x4_bytes * (b / 4));
        gpt2__group_int8_avx512<TYPE, R>(acc1, row, ld, b + 4, xq, prepared + gpt2__x4_bytes * (b / 4 + 1));
    }
    if (b + 4 <= nb) {
        gpt2__group_int8_avx512<TYPE, R>(acc0, row, ld, b, xq, prepared + gpt2__x4_bytes * (b / 4));
        b += 4;
    }
    GPT2__UNROLL
    for (int r = 0; r < R; r++) {
        float sum = _mm512_reduce_add_ps(_mm512_add_ps(acc0[r], acc1[r]));
        for (int64_t k = b; k < nb; k++) {
            const uint8_t* p = row + r * ld + BYTES * k;
            const __m256i d = TYPE == GPT2_TYPE_Q4_0 ? gpt2__dot1_q4_avx512(p, xq + B * k) : gpt2__dot1_q8_avx512(p, xq + B * k);
            sum += (float)_mm512_reduce_add_epi32(_mm512_zextsi256_si512(d)) * (_cvtsh_ss(gpt2__q8_scale_f16(p)) * xs[k]);
        }
        out[r] = sum;
    }
}

/* Decode's q8_0 and q4_0 rows against the T quantized rows of a.xq: the activations of as many
   tokens as `scratch` (the panel) holds are prepared at once, then every gpt2__decode_rows<TYPE>
   rows meet them together (fewer at the end of the range: each row computed alone the same way). */
template <uint32_t TYPE>
GPT2__AVX512 static void gpt2__matmul_int8_rows_avx512(const gpt2__matmul_args& a, int64_t o_begin, int64_t o_end, uint8_t* scratch) {
    constexpr int rows_per_step = gpt2__decode_rows<TYPE>;
    const gpt2__weight& W = *a.W;
    const int64_t nb = W.cols / gpt2__q8_block_values;
    const size_t prepared = (size_t)(nb / 4) * gpt2__x4_bytes;
    const int tokens_per_pass = prepared ? (int)std::min<size_t>((size_t)a.T, gpt2__panel_floats(W.cols) * 4 / prepared) : a.T;
    for (int t0 = 0; t0 < a.T; t0 += tokens_per_pass) {
        const int n = std::min(tokens_per_pass, a.T - t0);
        for (int t = 0; t < n; t++)
            gpt2__prepare_x_avx512<TYPE>(scratch + t * prepared, a.xq + (size_t)(t0 + t) * W.cols, a.xq_scale + (size_t)(t0 + t) * nb, nb / 4);
        for (int64_t o = o_begin; o < o_end; o += rows_per_step) {
            const int rows = (int)std::min<int64_t>(rows_per_step, o_end - o);
            const uint8_t* row = W.data + (size_t)o * W.row_bytes;
            for (int t = t0; t < t0 + n; t++) {
                const int8_t* xq = a.xq + (size_t)t * W.cols;
                const float* xs = a.xq_scale + (size_t)t * nb;
                const uint8_t* x4 = scratch + (t - t0) * prepared;
                float dots[rows_per_step];
                if (rows == rows_per_step) gpt2__dot_int8_rows_avx512<TYPE, rows_per_step>(dots, row, W.row_bytes, xq, xs, x4, nb);
                else
                    for (int r = 0; r < rows; r++) gpt2__dot_int8_rows_avx512<TYPE, 1>(dots + r, row + r * W.row_bytes, W.row_bytes, xq, xs, x4, nb);
                for (int r = 0; r < rows; r++) gpt2__store_out(a, t, o + r, dots[r]);
            }
        }
    }
}

GPT2__AVX512 static void gpt2__quantize_q8_avx512(int8_t* q, float* scale, const float* x, int64_t n) {
    const int B = gpt2__q8_block_values;
    for (int64_t b = 0; b < n / B; b++) {
        const __m512 v0 = _mm512_loadu_ps(x + B * b), v1 = _mm512_loadu_ps(x + B * b + 16);
        const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
        const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
        scale[b] = amax / 127.0f;
        const __m512 vi = _mm512_set1_ps(inv);
        _mm_storeu_si128((__m128i*)(q + B * b), _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v0, vi))));
        _mm_storeu_si128((__m128i*)(q + B * b + 16), _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v1, vi))));
    }
}

#endif /* GPT2__X86 */

#endif /* GPT2__PART_CPU_KERNELS_AVX512_ROWS_H */
