#ifndef GPT2__PART_CPU_KERNELS_AVX512_H
#define GPT2__PART_CPU_KERNELS_AVX512_H
#include "avx2.h"

/* AVX-512 (F, BW, VL, DQ, VNNI) kernels; x86_prefill.h has the target macros and the prefill
   pieces shared with AVX2. Decode attention and float matrix rows use the AVX2 kernels (avx2.h). */

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
   q4_0 rows, 1 q8_0 row. 124M end to end (gpt2-bench, binaries alternated, medians): a q4_0
   model (its head q8_0) at one thread 2.56 ms a token with 4 q4_0 rows a step, 2.72 with 1; a
   q8_0 model 3.46 ms with 1 row a step, 4.16 with 4 and 4.40 with 2 (2 threads: 3.14, 3.63,
   3.85), its head alone 41 MB. From DRAM, interleaved rows defeat the hardware prefetcher, so
   each row prefetches the bytes gpt2__decode_prefetch_bytes ahead of it (4 KB: q4_0 rows 0.9x
   one row at a time; 8 KB and 16 KB: 0.75x). */
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

/* One q4_0 row of K weights to floats, d * (nibble - 8) as gpt2__dequantize_row. */
GPT2__AVX512 static void gpt2__q4_to_float_avx512(float* dst, const uint8_t* row, int64_t K) {
    const int B = gpt2__q4_block_values;
    for (int64_t b = 0; b < K / B; b++) {
        const uint8_t* block = row + gpt2__q4_block_bytes * b;
        const __m512 scale = _mm512_set1_ps(_cvtsh_ss(gpt2__q8_scale_f16(block)));
        const __m128i packed = _mm_loadu_si128((const __m128i*)gpt2__q4_nibbles(block)), low4 = _mm_set1_epi8(15), eight = _mm_set1_epi8(8);
        const __m128i lo = _mm_sub_epi8(_mm_and_si128(packed, low4), eight), hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(packed, 4), low4), eight);
        _mm512_storeu_ps(dst + B * b, _mm512_mul_ps(scale, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(lo))));
        _mm512_storeu_ps(dst + B * b + 16, _mm512_mul_ps(scale, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(hi))));
    }
}

/* One row of K weights (f16, bf16, q8_0 or q4_0) to floats, for a prefill panel. */
GPT2__AVX512 static void gpt2__row_to_float_avx512(float* dst, uint32_t type, const uint8_t* row, int64_t K) {
    if (type == GPT2_TYPE_Q4_0) return gpt2__q4_to_float_avx512(dst, row, K);
    if (type == GPT2_TYPE_Q8_0) {
        const int B = gpt2__q8_block_values;
        for (int64_t b = 0; b < K / B; b++) {
            const uint8_t* block = row + gpt2__q8_block_bytes * b;
            const __m512 scale = _mm512_set1_ps(_cvtsh_ss(gpt2__q8_scale_f16(block)));
            const __m128i* q = (const __m128i*)gpt2__q8_values(block);
            _mm512_storeu_ps(dst + B * b, _mm512_mul_ps(scale, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(q)))));
            _mm512_storeu_ps(dst + B * b + 16, _mm512_mul_ps(scale, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(q + 1)))));
        }
        return;
    }
    for (int64_t k = 0; k < K; k += 16) {
        const __mmask16 m = gpt2__mask16(k, K);
        const __m512 v = type == GPT2_TYPE_F16 ? gpt2__w16_avx512<GPT2_TYPE_F16>(row, k, m) : gpt2__w16_avx512<GPT2_TYPE_BF16>(row, k, m);
        _mm512_mask_storeu_ps(dst + k, m, v);
    }
}

/* The sums of 16 vectors at once, lane i = sum of v[i]: a tree of shuffles and adds that
   treats every input alike, so each sum is the same whatever the other 15 hold. */
GPT2__AVX512 static inline __m512 gpt2__hsum16_avx512(const __m512* v) {
    __m512 s1[8], s2[4], s3[2];
    for (int i = 0; i < 8; i++) /* halves: lo 8 lanes = v[2i], hi = v[2i+1] */
        s1[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x44), _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xee));
    for (int i = 0; i < 4; i++) /* 128-bit lane k = v[4i + k] */
        s2[i] = _mm512_add_ps(_mm512_shuffle_f32x4(s1[2 * i], s1[2 * i + 1], 0x88), _mm512_shuffle_f32x4(s1[2 * i], s1[2 * i + 1], 0xdd));
    for (int i = 0; i < 2; i++) /* lane k: v[8i + k] twice, then v[8i + 4 + k] twice */
        s3[i] = _mm512_add_ps(_mm512_shuffle_ps(s2[2 * i], s2[2 * i + 1], 0x44), _mm512_shuffle_ps(s2[2 * i], s2[2 * i + 1], 0xee));
    const __m512 t = _mm512_add_ps(_mm512_shuffle_ps(s3[0], s3[1], 0x88), _mm512_shuffle_ps(s3[0], s3[1], 0xdd)); /* element 4k + m = v[4m + k] */
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), t);
}

/* out[t * gpt2__tile_rows + r] += w_r . x_t for an R x N tile: R weight rows (ldw apart) and N tokens (ldx
   apart). Token-major, so a full tile's outputs for one token are 4 adjacent floats of y. */
template <int R, int N>
GPT2__AVX512 static void gpt2__tile_avx512(float* out, const float* w, size_t ldw, const float* x, size_t ldx, int64_t K) {
    static_assert(R * N <= 16, "one tile is reduced by one 16-way sum");
    __m512 acc[16];
    GPT2__UNROLL
    for (int i = 0; i < 16; i++) acc[i] = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 16 <= K; k += 16) {
        __m512 xv[N];
        GPT2__UNROLL
        for (int t = 0; t < N; t++) {
            __m512 v = _mm512_loadu_ps(x + t * ldx + k);
            GPT2__IN_REGISTER(v);
            xv[t] = v;
        }
        GPT2__UNROLL
        for (int r = 0; r < R; r++) {
            __m512 wv = _mm512_loadu_ps(w + r * ldw + k);
            GPT2__IN_REGISTER(wv);
            GPT2__UNROLL
            for (int t = 0; t < N; t++) acc[t * gpt2__tile_rows + r] = _mm512_fmadd_ps(wv, xv[t], acc[t * gpt2__tile_rows + r]);
        }
    }
    if (k < K) {
        const __mmask16 m = gpt2__mask16(k, K);
        __m512 xv[N];
        GPT2__UNROLL
        for (int t = 0; t < N; t++) xv[t] = _mm512_maskz_loadu_ps(m, x + t * ldx + k);
        GPT2__UNROLL
        for (int r = 0; r < R; r++) {
            const __m512 wv = _mm512_maskz_loadu_ps(m, w + r * ldw + k);
            GPT2__UNROLL
            for (int t = 0; t < N; t++) acc[t * gpt2__tile_rows + r] = _mm512_fmadd_ps(wv, xv[t], acc[t * gpt2__tile_rows + r]);
        }
    }
    _mm512_storeu_ps(out, _mm512_add_ps(_mm512_loadu_ps(out), gpt2__hsum16_avx512(acc)));
}

struct gpt2__prefill_avx512 {
    static constexpr int NT = 4; /* 4 rows x 4 tokens: 16 accumulators, one 16-way reduction */
    static_assert(gpt2__tile_rows * NT == 16, "a full tile fills gpt2__hsum16_avx512");
    using Panel = gpt2__float_panel;
    static Panel panel(const gpt2__matmul_args& a, int64_t o, int rows, float* scratch) { return gpt2__float_panel_of<gpt2__row_to_float_avx512, true>(a, o, rows, scratch); }
    template <int R, int N>
    static void tile(float* out, const Panel& w, const gpt2__matmul_args& a, int t, int64_t k0, int64_t kn) {
        const size_t K = (size_t)a.W->cols;
        gpt2__tile_avx512<R, N>(out, w.w + k0, w.ldw, a.x + t * K + k0, K, kn);
    }
};

/* ---- Int8 panels: q8_0 and q4_0 weights times many rows of int8 activations (contract.h) -----

   vpdpbusd adds 4 byte products into each of 16 int32 lanes. A lane per weight row and an
   activation's 4 bytes broadcast to all, 8 of them give the dot products of 16 rows with one
   32-value block of a token, exact in int32; one conversion, one product of scales and one FMA
   bring the 16 sums to float. A panel of 32 rows (two vectors) times a tile of 6 tokens keeps
   24 block sums and 24 float sums in registers, each weight vector loaded once for 6 tokens and
   each broadcast once for 2 vectors. vpdpbusd multiplies unsigned by signed bytes: the weights
   are stored as w + 128 (a q4_0 value, nibble - 8, as nibble + 120), and a token's block sum
   starts from -128 times the sum of its values (gpt2__quantize_q8_packed_avx512). Every output
   is its own lane and its own sum over the blocks in order, so no result depends on the panel
   or tile it falls in, nor on how many tokens the tile has.
   A panel: 32 rows, two groups of 16 (a vector's lanes each); per block, the two groups' 8
   vectors of words, interleaved line by line, then the 16 f16 scales of each: 1,088 bytes, 17
   cache lines, the same bytes as the rows' q8_0 blocks, and one stream through memory. A matrix's
   lanes (gpt2__pack_lanes_avx512) are its panels in order, the last one's missing rows repeating
   its last row. A q4_0 matrix's lanes keep its nibbles: 4 vectors a group, vector k's bytes
   holding word k in their low nibbles and word k + 4 in their high ones (a q4_0 block's bytes
   4k..4k+3 as they are), as unsigned values 0-15 whose block sums start from -8 times the sum of
   x: 576 bytes a block, again the rows' own bytes. (A q4_0 product's per-product panel is packed
   as q8_0's, each value as nibble + 120.) */
static const int gpt2__q8_tile_tokens = 6;
/* How far ahead in its lanes a product of one or two tokens prefetches (Zen 5, from DRAM): a
   lone token streams fastest 4 KB ahead, non-temporally (124M q8_0 decode, medians of 9: 87.9%
   of the read bandwidth at 1 thread, where 4 KB into L2 gave 86% and 16 KB 80%). More tokens
   prefetch the next panel (gpt2__matmul_lanes_avx512). */
static const size_t gpt2__lanes_stream_ahead = 4096;
static const size_t gpt2__q8_scales_bytes = 2 * gpt2__q8_lane_rows; /* a group's 16 f16 scales */
/* Vectors of a group's block, and bytes of a panel's block, in the layout of TYPE. */
template <uint32_t TYPE>
static constexpr size_t gpt2__lane_vectors = TYPE == GPT2_TYPE_Q4_0 ? 4 : 8;
template <uint32_t TYPE>
static constexpr size_t gpt2__panel_block_bytes = 2 * (64 * gpt2__lane_vectors<TYPE> + gpt2__q8_scales_bytes);
static_assert(gpt2__q8_panel_rows == 2 * gpt2__q8_lane_rows && gpt2__panel_block_bytes<GPT2_TYPE_Q8_0> == gpt2__q8_panel_rows * (size_t)gpt2__q8_block_bytes &&
                  gpt2__panel_block_bytes<GPT2_TYPE_Q4_0> == gpt2__q8_panel_rows * (size_t)gpt2__q4_block_bytes,
              "a panel is two groups of 16 rows, the rows' own bytes");
/* Where group j (0 or 1) of the panel at p keeps its vectors (128 bytes apart) and its scales. */
static inline const uint8_t* gpt2__q8_group_words(const uint8_t* p, int j) { return p + 64 * j; }
template <uint32_t TYPE>
static inline const uint8_t* gpt2__q8_group_scales(const uint8_t* p, int j) { return p + 128 * gpt2__lane_vectors<TYPE> + gpt2__q8_scales_bytes * j; }
/* The lane that holds row i of a group (gpt2__q8_lane_order's order). */
static inline int gpt2__lane_of_row(int i) { return 4 * (i / 4 == 1 ? 2 : i / 4 == 2 ? 1 : i / 4) + i % 4; }

/* A transpose with in-lane shuffles leaves the rows in lanes 0-3, 8-11, 4-7, 12-15: this turns
   a vector of 16 rows in order into that order, and back. */
GPT2__AVX512 static inline __m512 gpt2__q8_lane_order(__m512 v) { return _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(3, 1, 2, 0)); }

/* The 32 values of the block at p and of the block at q (a q8_0 or a q4_0 block: nibble - 8) as
   signed bytes, p's low. */
template <uint32_t TYPE>
GPT2__AVX512 static inline __m512i gpt2__two_blocks_avx512(const uint8_t* p, const uint8_t* q) {
    if constexpr (TYPE == GPT2_TYPE_Q4_0) { /* each block's 16 bytes in two 128-bit lanes, the second shifted to its high nibbles */
        const __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i*)gpt2__q4_nibbles(p)))),
                                                _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i*)gpt2__q4_nibbles(q))), 1);
        const __m512i nibbles = _mm512_and_si512(_mm512_mask_srli_epi16(both, (__mmask32)0xff00ff00u, both, 4), _mm512_set1_epi8(15));
        return _mm512_sub_epi8(nibbles, _mm512_set1_epi8(8));
    } else {
        return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i*)gpt2__q8_values(p))), _mm256_loadu_si256((const __m256i*)gpt2__q8_values(q)), 1);
    }
}

/* 16 q8_0 or q4_0 rows (row[i]) of nb blocks into group j of the panel at p: per block, vector s
   lane i holds 4-byte word s of the block of row i (in gpt2__q8_lane_order) as w + 128; the
   scales in the same order. Both types' blocks begin with their f16 scale. With `ahead` (else 0),
   the same block of the rows that many bytes on (the next panel's) is prefetched. */
template <uint32_t TYPE>
GPT2__AVX512 static void gpt2__pack_q8_group_avx512(uint8_t* p, int j, const uint8_t* const* row, int64_t nb, size_t ahead) {
    const __m512i to_unsigned = _mm512_set1_epi8((char)0x80);
    uint8_t* dst = (uint8_t*)gpt2__q8_group_words(p, j);
    uint8_t* scales = (uint8_t*)gpt2__q8_group_scales<GPT2_TYPE_Q8_0>(p, j);
    const size_t block_bytes = gpt2__panel_block_bytes<GPT2_TYPE_Q8_0>;
    for (int64_t b = 0; b < nb; b++, dst += block_bytes, scales += block_bytes) {
        const size_t at = (size_t)b * (TYPE == GPT2_TYPE_Q4_0 ? gpt2__q4_block_bytes : gpt2__q8_block_bytes);
        if (ahead)
            for (int i = 0; i < gpt2__q8_lane_rows; i++) _mm_prefetch((const char*)row[i] + at + ahead, _MM_HINT_T1);
        __m128i low = _mm_setzero_si128(), high = _mm_setzero_si128(); /* the scales of lanes 0-7 (rows 0-3, 8-11) and 8-15 (rows 4-7, 12-15) */
        low = _mm_insert_epi16(low, gpt2__q8_scale_f16(row[0] + at), 0); /* immediates: a loop's index is not one for every compiler */
        low = _mm_insert_epi16(low, gpt2__q8_scale_f16(row[1] + at), 1);
        low = _mm_insert_epi16(low, gpt2__q8_scale_f16(row[2] + at), 2);
        low = _mm_insert_epi16(low, gpt2__q8_scale_f16(row[3] + at), 3);
        low = _mm_insert_epi16(low, gpt2__q8_scale_f16(row[8] + at), 4);
        low = _mm_insert_epi16(low, gpt2__q8_scale_f16(row[9] + at), 5);
        low = _mm_insert_epi16(low, gpt2__q8_scale_f16(row[10] + at), 6);
        low = _mm_insert_epi16(low, gpt2__q8_scale_f16(row[11] + at), 7);
        high = _mm_insert_epi16(high, gpt2__q8_scale_f16(row[4] + at), 0);
        high = _mm_insert_epi16(high, gpt2__q8_scale_f16(row[5] + at), 1);
        high = _mm_insert_epi16(high, gpt2__q8_scale_f16(row[6] + at), 2);
        high = _mm_insert_epi16(high, gpt2__q8_scale_f16(row[7] + at), 3);
        high = _mm_insert_epi16(high, gpt2__q8_scale_f16(row[12] + at), 4);
        high = _mm_insert_epi16(high, gpt2__q8_scale_f16(row[13] + at), 5);
        high = _mm_insert_epi16(high, gpt2__q8_scale_f16(row[14] + at), 6);
        high = _mm_insert_epi16(high, gpt2__q8_scale_f16(row[15] + at), 7);
        _mm256_storeu_si256((__m256i*)scales, _mm256_set_m128i(high, low));
        __m512i z[8], t[8], u[8]; /* z[i]: the block of row i, then of row i + 8 */
        for (int i = 0; i < 8; i++) z[i] = gpt2__two_blocks_avx512<TYPE>(row[i] + at, row[i + 8] + at);
        for (int i = 0; i < 8; i += 2) {
            t[i] = _mm512_unpacklo_epi32(z[i], z[i + 1]);
            t[i + 1] = _mm512_unpackhi_epi32(z[i], z[i + 1]);
        }
        for (int h = 0; h < 8; h += 4) { /* u[h + k], 128-bit lanes: word k, 4 + k of rows h.., then of rows h + 8.. */
            u[h] = _mm512_unpacklo_epi64(t[h], t[h + 2]);
            u[h + 1] = _mm512_unpackhi_epi64(t[h], t[h + 2]);
            u[h + 2] = _mm512_unpacklo_epi64(t[h + 1], t[h + 3]);
            u[h + 3] = _mm512_unpackhi_epi64(t[h + 1], t[h + 3]);
        }
        for (int k = 0; k < 4; k++) {
            _mm512_storeu_si512(dst + 128 * k, _mm512_xor_si512(_mm512_shuffle_i32x4(u[k], u[4 + k], _MM_SHUFFLE(2, 0, 2, 0)), to_unsigned));
            _mm512_storeu_si512(dst + 128 * (4 + k), _mm512_xor_si512(_mm512_shuffle_i32x4(u[k], u[4 + k], _MM_SHUFFLE(3, 1, 3, 1)), to_unsigned));
        }
    }
}

/* 64 bytes at p; with `halves`, as two 256-bit loads, which Zen 4 and 5 stream from DRAM faster
   than one 512-bit load (it splits those anyway): a tile of few tokens waits on memory (124M
   q8_0, one token, one thread: 6% faster; 24576 x 3072 from DRAM, one thread, 8 tokens as 4 + 4:
   2.42 -> 2.15 ms), where tiles of 5 or 6 are busy enough that the extra load costs (32 tokens 2%
   slower). */
template <bool halves>
GPT2__AVX512 static inline __m512i gpt2__load_streamed_avx512(const uint8_t* p) {
    if constexpr (halves) return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i*)p)), _mm256_loadu_si256((const __m256i*)(p + 32)), 1);
    else return _mm512_loadu_si512(p);
}

/* Tokens t0.. t0 + N - 1's sums of a group of 16 rows from row r (row r + i in lane i), stored
   for the rows in [lo, hi) as gpt2__store_out does: the bias added, and with `accumulate` y
   added to. */
template <int N>
GPT2__AVX512 static inline void gpt2__store_group_avx512(const gpt2__matmul_args& a, int64_t r, int64_t lo, int64_t hi, int t0, const __m512* sums) {
    const int64_t from = std::max<int64_t>(lo - r, 0), to = std::min<int64_t>(hi - r, gpt2__q8_lane_rows);
    if (from >= to) return;
    const __mmask16 m = (__mmask16)(((1u << to) - 1) & ~((1u << from) - 1));
    const __m512 bias = a.bias ? _mm512_maskz_loadu_ps(m, a.bias + r) : _mm512_setzero_ps();
    GPT2__UNROLL
    for (int t = 0; t < N; t++) {
        float* y = a.y + (size_t)(t0 + t) * a.W->rows + r;
        const __m512 out = _mm512_add_ps(bias, sums[t]);
        _mm512_mask_storeu_ps(y, m, a.accumulate ? _mm512_add_ps(_mm512_maskz_loadu_ps(m, y), out) : out);
    }
}

/* Tokens t0.. t0 + N - 1: V groups of a panel from group j (lane 0 of the first is row
   first_row) times N packed activation rows, the panel in the layout of LAYOUT (q8_0's, or q4_0
   lanes'); the outputs of rows [lo, hi) stored as gpt2__store_out does. `lines` cache lines from
   `prefetch` on are prefetched, spread over the blocks. */
template <uint32_t LAYOUT, int V, int N>
GPT2__AVX512 static void gpt2__tile_q8_avx512(const gpt2__matmul_args& a, const uint8_t* p, int j, int64_t first_row, int64_t lo, int64_t hi, int t0,
                                              const char* prefetch, size_t lines) {
    constexpr bool nibbles = LAYOUT == GPT2_TYPE_Q4_0;
    constexpr size_t block_bytes = gpt2__panel_block_bytes<LAYOUT>;
    const int64_t K = a.W->cols, nb = K / gpt2__q8_block_values;
    const size_t ldx = gpt2__q8_packed_row_bytes(K);
    const uint8_t *w = gpt2__q8_group_words(p, j), *scales = gpt2__q8_group_scales<LAYOUT>(p, j);
    const int8_t* xq[N];
    const float* xs[N];
    const int32_t* start[N];
    for (int t = 0; t < N; t++) {
        const uint8_t* row = a.xq_packed + (size_t)(t0 + t) * ldx;
        xq[t] = (const int8_t*)row;
        xs[t] = (const float*)(row + K);
        start[t] = (const int32_t*)(xs[t] + nb);
    }
    __m512 f[V][N];
    GPT2__UNROLL
    for (int v = 0; v < V; v++)
        GPT2__UNROLL
        for (int t = 0; t < N; t++) f[v][t] = _mm512_setzero_ps();
    const size_t lines_per_block = (lines + (size_t)nb - 1) / (size_t)nb;
    for (int64_t b = 0; b < nb; b++) {
        for (size_t l = (size_t)b * lines_per_block, end = std::min(lines, l + lines_per_block); l < end; l++) {
            _mm_prefetch(prefetch + 64 * l, _MM_HINT_NTA); /* see gpt2__matmul_lanes_avx512 */
        }
        const uint8_t* wb = w + (size_t)b * block_bytes;
        __m512i d[V][N];
        GPT2__UNROLL
        for (int t = 0; t < N; t++) {
            const __m512i s = _mm512_set1_epi32(nibbles ? start[t][b] / 16 : start[t][b]); /* -8 or -128 times the sum of x: exact */
            GPT2__UNROLL
            for (int v = 0; v < V; v++) d[v][t] = s;
        }
        __m512i packed[V];
        GPT2__UNROLL
        for (int i = 0; i < 8; i++) {
            const int s = nibbles ? (i % 2 ? i / 2 + 4 : i / 2) : i; /* nibbles: words 0, 4, 1, 5, ..., two from each vector */
            __m512i wv[V];
            GPT2__UNROLL
            for (int v = 0; v < V; v++) {
                if constexpr (!nibbles) {
                    wv[v] = gpt2__load_streamed_avx512<N <= 4>(wb + 64 * v + 128 * s);
                } else if (i % 2 == 0) {
                    packed[v] = gpt2__load_streamed_avx512<N <= 4>(wb + 64 * v + 128 * s);
                    wv[v] = _mm512_and_si512(packed[v], _mm512_set1_epi8(15));
                } else {
                    wv[v] = _mm512_and_si512(_mm512_srli_epi16(packed[v], 4), _mm512_set1_epi8(15));
                }
            }
            GPT2__UNROLL
            for (int t = 0; t < N; t++) {
                int32_t word;
                std::memcpy(&word, xq[t] + gpt2__q8_block_values * b + 4 * s, 4);
                const __m512i x = _mm512_set1_epi32(word);
                GPT2__UNROLL
                for (int v = 0; v < V; v++) d[v][t] = _mm512_dpbusd_epi32(d[v][t], wv[v], x);
            }
        }
        __m512 w_scale[V];
        GPT2__UNROLL
        for (int v = 0; v < V; v++) w_scale[v] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(scales + (size_t)b * block_bytes + v * gpt2__q8_scales_bytes)));
        GPT2__UNROLL
        for (int t = 0; t < N; t++) {
            const __m512 x_scale = _mm512_set1_ps(xs[t][b]);
            GPT2__UNROLL
            for (int v = 0; v < V; v++) f[v][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d[v][t]), _mm512_mul_ps(w_scale[v], x_scale), f[v][t]);
        }
    }
    GPT2__UNROLL
    for (int v = 0; v < V; v++) {
        __m512 sums[N];
        GPT2__UNROLL
        for (int t = 0; t < N; t++) sums[t] = gpt2__q8_lane_order(f[v][t]);
        gpt2__store_group_avx512<N>(a, first_row + gpt2__q8_lane_rows * v, lo, hi, t0, sums);
    }
}

/* f16 lanes: an f16 matrix's panels of 32 rows, column by column: per column a cache line of
   the 32 rows' values there (group 0's 16, then group 1's), the last panel's missing rows
   repeating its last row: 64 bytes a column, the rows' own bytes. bf16 lanes hold pairs of
   columns instead: per pair two cache lines, group 0's then group 1's, each row's two values in
   its 32-bit lane (the even column low), as the bf16 unit multiplies them; an odd last column
   is paired with a zero. A tile widens a group's 16 values of a column at once (bf16: a shift
   and a mask of the pair) and multiplies them with each token's value there, broadcast, so each
   output is its own lane: summed over the even and the odd columns apart (two chains, which a
   lone token needs to keep up with memory) and then together, the same for every tile width and
   row range. */
static const size_t gpt2__f16_column_bytes = 2 * gpt2__q8_panel_rows;
/* Tokens in a tile of LAYOUT: 6 for int8 panels; 16-bit tiles keep two sums per output and run
   out of registers at 6 (f16, 3072 x 768 in L1, one thread: 128 GMAC/s at 5 tokens, 84 at 6). */
template <uint32_t LAYOUT>
static constexpr int gpt2__lanes_tile_tokens = gpt2__float16_lanes(LAYOUT) ? 5 : gpt2__q8_tile_tokens;

/* Group v's 16 values of columns 2i and 2i + 1 of a 16-bit panel (TYPE: f16 or bf16) as floats;
   w points at the tile's first group. Without `odd`, column 2i alone (an odd count's last). */
template <uint32_t TYPE>
GPT2__AVX512 static inline void gpt2__column_pair_avx512(const uint8_t* w, int64_t i, int v, __m512* even, __m512* odd) {
    const uint8_t* pair = w + gpt2__f16_column_bytes * 2 * (size_t)i;
    if constexpr (TYPE == GPT2_TYPE_F16) {
        *even = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(pair + 32 * v)));
        if (odd) *odd = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(pair + gpt2__f16_column_bytes + 32 * v)));
    } else {
        const __m512i both = _mm512_loadu_si512(pair + 64 * v);
        *even = _mm512_castsi512_ps(_mm512_slli_epi32(both, 16));
        if (odd) *odd = _mm512_castsi512_ps(_mm512_and_si512(both, _mm512_set1_epi32((int)0xffff0000u)));
    }
}

template <uint32_t TYPE, int V, int N>
GPT2__AVX512 static void gpt2__tile_float16_avx512(const gpt2__matmul_args& a, const uint8_t* p, int j, int64_t first_row, int64_t lo, int64_t hi, int t0,
                                                   const char* prefetch, size_t lines) {
    const int64_t K = a.W->cols;
    const uint8_t* w = p + (TYPE == GPT2_TYPE_F16 ? 32 : 64) * j;
    const float* x[N];
    for (int t = 0; t < N; t++) x[t] = a.x + (size_t)(t0 + t) * K;
    __m512 even[V][N], odd[V][N];
    GPT2__UNROLL
    for (int v = 0; v < V; v++)
        GPT2__UNROLL
        for (int t = 0; t < N; t++) even[v][t] = odd[v][t] = _mm512_setzero_ps();
    const int64_t pairs = K / 2;
    const size_t lines_per_pair = pairs ? (lines + (size_t)pairs - 1) / (size_t)pairs : 0;
    for (int64_t i = 0; i < pairs; i++) {
        for (size_t l = (size_t)i * lines_per_pair, end = std::min(lines, l + lines_per_pair); l < end; l++) {
            _mm_prefetch(prefetch + 64 * l, _MM_HINT_NTA); /* see gpt2__matmul_lanes_avx512 */
        }
        __m512 w0[V], w1[V];
        GPT2__UNROLL
        for (int v = 0; v < V; v++) gpt2__column_pair_avx512<TYPE>(w, i, v, &w0[v], &w1[v]);
        /* The even column's products, then the odd one's, one broadcast live at a time (26
           registers in all). Interleaved token by token, GCC tuned for Zen (-march=native on
           AMD) spilled a weight (3072 x 768, 32 tokens, one thread: f16 570 -> 640 us, bf16 ->
           790 us); group by group, with a token's broadcast kept for both, plain builds did. */
        GPT2__UNROLL
        for (int t = 0; t < N; t++) {
            const __m512 x0 = _mm512_set1_ps(x[t][2 * i]);
            GPT2__UNROLL
            for (int v = 0; v < V; v++) even[v][t] = _mm512_fmadd_ps(w0[v], x0, even[v][t]);
        }
        GPT2__UNROLL
        for (int t = 0; t < N; t++) {
            const __m512 x1 = _mm512_set1_ps(x[t][2 * i + 1]);
            GPT2__UNROLL
            for (int v = 0; v < V; v++) odd[v][t] = _mm512_fmadd_ps(w1[v], x1, odd[v][t]);
        }
    }
    if (K % 2) { /* the last column, to the even sums */
        GPT2__UNROLL
        for (int v = 0; v < V; v++) {
            __m512 wv;
            gpt2__column_pair_avx512<TYPE>(w, K / 2, v, &wv, nullptr);
            GPT2__UNROLL
            for (int t = 0; t < N; t++) even[v][t] = _mm512_fmadd_ps(wv, _mm512_set1_ps(x[t][K - 1]), even[v][t]);
        }
    }
    GPT2__UNROLL
    for (int v = 0; v < V; v++) {
        __m512 sums[N];
        GPT2__UNROLL
        for (int t = 0; t < N; t++) sums[t] = _mm512_add_ps(even[v][t], odd[v][t]);
        gpt2__store_group_avx512<N>(a, first_row + gpt2__q8_lane_rows * v, lo, hi, t0, sums);
    }
}

/* The bf16 unit's tile on bf16 lanes (avx512_bf16.h), for a.x_bf16: one sum per output, so
   wider than the FMA tiles (3072 x 768 in L1, 64 tokens, one thread: 193 GMAC/s at 5 tokens,
   258 at 8: the `vdpbf16ps` peak; 8 x 2 sums fill half the registers). */
static const int gpt2__bf16_unit_tile_tokens = 8;
template <int V, int N>
GPT2__AVX512_BF16 static void gpt2__tile_bf16_unit_avx512(const gpt2__matmul_args& a, const uint8_t* p, int j, int64_t first_row, int64_t lo, int64_t hi, int t0,
                                                          const char* prefetch, size_t lines);

/* A tile of N tokens in the layout of LAYOUT: f16 or bf16 lanes, or an int8 panel (q8_0's, or
   q4_0 lanes'). */
template <uint32_t LAYOUT, int V, int N>
GPT2__AVX512 static void gpt2__tile_lanes_avx512(const gpt2__matmul_args& a, const uint8_t* p, int j, int64_t first_row, int64_t lo, int64_t hi, int t0,
                                                 const char* prefetch, size_t lines) {
    if constexpr (LAYOUT == GPT2_TYPE_BF16) {
        if (a.strategy == GPT2__BF16_UNIT) return gpt2__tile_bf16_unit_avx512<V, N>(a, p, j, first_row, lo, hi, t0, prefetch, lines);
    }
    if constexpr (N > gpt2__lanes_tile_tokens<LAYOUT>) return; /* only the bf16 unit's tiles are this wide */
    else if constexpr (gpt2__float16_lanes(LAYOUT)) gpt2__tile_float16_avx512<LAYOUT, V, N>(a, p, j, first_row, lo, hi, t0, prefetch, lines);
    else gpt2__tile_q8_avx512<LAYOUT, V, N>(a, p, j, first_row, lo, hi, t0, prefetch, lines);
}

template <uint32_t LAYOUT, int V>
GPT2__AVX512 static void gpt2__tile_tokens_avx512(int n, const gpt2__matmul_args& a, const uint8_t* p, int j, int64_t first_row, int64_t lo, int64_t hi, int t0,
                                                  const char* prefetch, size_t lines) {
    constexpr int widest = LAYOUT == GPT2_TYPE_BF16 ? gpt2__bf16_unit_tile_tokens : gpt2__lanes_tile_tokens<LAYOUT>;
    static_assert(widest >= 5 && widest <= 8, "a case per tile width");
    switch (n) {
    case 1: gpt2__tile_lanes_avx512<LAYOUT, V, 1>(a, p, j, first_row, lo, hi, t0, prefetch, lines); break;
    case 2: gpt2__tile_lanes_avx512<LAYOUT, V, 2>(a, p, j, first_row, lo, hi, t0, prefetch, lines); break;
    case 3: gpt2__tile_lanes_avx512<LAYOUT, V, 3>(a, p, j, first_row, lo, hi, t0, prefetch, lines); break;
    case 4: gpt2__tile_lanes_avx512<LAYOUT, V, 4>(a, p, j, first_row, lo, hi, t0, prefetch, lines); break;
    case 5: gpt2__tile_lanes_avx512<LAYOUT, V, std::min(5, widest)>(a, p, j, first_row, lo, hi, t0, prefetch, lines); break;
    case 6: gpt2__tile_lanes_avx512<LAYOUT, V, std::min(6, widest)>(a, p, j, first_row, lo, hi, t0, prefetch, lines); break;
    case 7: gpt2__tile_lanes_avx512<LAYOUT, V, std::min(7, widest)>(a, p, j, first_row, lo, hi, t0, prefetch, lines); break;
    default: gpt2__tile_lanes_avx512<LAYOUT, V, widest>(a, p, j, first_row, lo, hi, t0, prefetch, lines); break;
    }
}

/* All of a.T's tokens through V groups (as gpt2__tile_lanes_avx512), shared evenly among the
   tiles (8 tokens as 4 + 4, not 6 + 2: a small tile costs about what a full one does; 3072 x
   768, one thread, 8 tokens 129 -> 114 us). The tiles share the prefetch of `lines` cache lines
   from `prefetch` on, spread along their blocks. */
template <uint32_t LAYOUT, int V>
GPT2__AVX512 static void gpt2__tiles_avx512(const gpt2__matmul_args& a, const uint8_t* p, int j, int64_t first_row, int64_t lo, int64_t hi, const char* prefetch, size_t lines) {
    const int widest = a.strategy == GPT2__BF16_UNIT ? gpt2__bf16_unit_tile_tokens : gpt2__lanes_tile_tokens<LAYOUT>;
    const int tiles = (a.T + widest - 1) / widest;
    for (int i = 0, t = 0; i < tiles; i++) {
        const int n = a.T / tiles + (i < a.T % tiles);
        const size_t from = lines * i / tiles, to = lines * (i + 1) / tiles;
        gpt2__tile_tokens_avx512<LAYOUT, V>(n, a, p, j, first_row, lo, hi, t, prefetch + 64 * from, to - from);
        t += n;
    }
}

/* W (q8_0, q4_0, f16 or bf16: TYPE) on its lanes, in place, two groups at a time, times
   a.xq_packed (int8), a.x (f16, bf16) or a.x_bf16 (bf16 on the bf16 unit); a range may begin or
   end half-way through a panel: that group alone. A lone token or two prefetch
   gpt2__lanes_stream_ahead ahead; more tokens spend long enough on a panel to fetch the whole
   next one meanwhile, where 16 KB ahead fell behind the tiles that re-read the panel (24576 x
   3072 q8_0 from DRAM, one thread, 8 tokens: 2.86 -> 2.32 ms; 32 tokens: 6.87 -> 6.12 ms).
   Non-temporal prefetches, though later tiles re-read the panel: on
   Zen 5 they beat prefetching into L2 (the same, medians of 5: 4 tokens 2.16 -> 1.73 ms, with
   the halves of gpt2__load_streamed_avx512; f16 4 tokens 3.71 -> 3.47 ms; 32 tokens the same). */
template <uint32_t TYPE>
GPT2__AVX512 static void gpt2__matmul_lanes_avx512(const gpt2__matmul_args& a, int64_t o_begin, int64_t o_end) {
    const size_t panel_bytes = gpt2__float16_lanes(TYPE) ? gpt2__f16_column_bytes * (size_t)gpt2__lanes_columns(*a.W)
                                                     : (size_t)(a.W->cols / gpt2__q8_block_values) * gpt2__panel_block_bytes<TYPE>;
    for (int64_t first = o_begin / gpt2__q8_lane_rows * gpt2__q8_lane_rows; first < o_end;) {
        const uint8_t* p = a.W->lanes + (size_t)(first / gpt2__q8_panel_rows) * panel_bytes;
        const int j = (int)(first / gpt2__q8_lane_rows % 2);
        const bool both = j == 0 && first + gpt2__q8_lane_rows < o_end;
        const char* next = (const char*)p + (a.T <= 2 ? gpt2__lanes_stream_ahead : panel_bytes);
        const size_t next_lines = first + gpt2__q8_panel_rows < o_end ? panel_bytes / 64 : 0;
        if (both) gpt2__tiles_avx512<TYPE, 2>(a, p, 0, first, o_begin, o_end, next, next_lines);
        else gpt2__tiles_avx512<TYPE, 1>(a, p, j, first, o_begin, o_end, next, next_lines);
        first += gpt2__q8_lane_rows * (both ? 2 : 1);
    }
}

/* q8_0 or q4_0 W times a.xq_packed. With lanes (made at load), the tokens go through them in
   place, two groups at a time. Else each panel of up to 32 rows is packed first, then all tokens
   go through it in tiles (the panel stays in L2, a tile's activations in L1). A last panel of
   16 rows or fewer takes one group; lanes past the last row repeat it and are not stored. */
GPT2__AVX512 static void gpt2__matmul_q8_panels_avx512(const gpt2__matmul_args& a, int64_t o_begin, int64_t o_end, float* panel) {
    const gpt2__weight* W = a.W;
    if (W->lanes) return W->type == GPT2_TYPE_Q4_0 ? gpt2__matmul_lanes_avx512<GPT2_TYPE_Q4_0>(a, o_begin, o_end) : gpt2__matmul_lanes_avx512<GPT2_TYPE_Q8_0>(a, o_begin, o_end);
    const int64_t nb = W->cols / gpt2__q8_block_values;
    uint8_t* w = (uint8_t*)panel;
    for (int64_t o = o_begin; o < o_end; o += gpt2__q8_panel_rows) {
        const int rows = (int)std::min<int64_t>(gpt2__q8_panel_rows, o_end - o), V = rows > gpt2__q8_lane_rows ? 2 : 1;
        for (int v = 0; v < V; v++) {
            const uint8_t* row[gpt2__q8_lane_rows];
            for (int i = 0; i < gpt2__q8_lane_rows; i++) row[i] = W->data + (size_t)(o + std::min(gpt2__q8_lane_rows * v + i, rows - 1)) * W->row_bytes;
            const size_t ahead = o + gpt2__q8_panel_rows < o_end ? gpt2__q8_panel_rows * W->row_bytes : 0;
            if (W->type == GPT2_TYPE_Q4_0) gpt2__pack_q8_group_avx512<GPT2_TYPE_Q4_0>(w, v, row, nb, ahead);
            else gpt2__pack_q8_group_avx512<GPT2_TYPE_Q8_0>(w, v, row, nb, ahead);
        }
        /* The next panel's rows come from DRAM, 32 streams the hardware prefetcher does not all
           follow: prefetched along the pack (with few tokens there are few tiles: 50257 x 768 at
           8 tokens 93 -> 136 GMAC/s) and spread over the tiles, which touch no weight memory. */
        const char* next = (const char*)(W->data + (size_t)(o + rows) * W->row_bytes);
        const size_t next_lines = (size_t)std::min<int64_t>(gpt2__q8_panel_rows, o_end - o - rows) * W->row_bytes / 64;
        if (V == 2) gpt2__tiles_avx512<GPT2_TYPE_Q8_0, 2>(a, w, 0, o, o, o + rows, next, next_lines);
        else gpt2__tiles_avx512<GPT2_TYPE_Q8_0, 1>(a, w, 0, o, o, o + rows, next, next_lines);
    }
}

/* A q8_0, q4_0, f16 or bf16 matrix's lanes (contract.h): its panels in order, q8_0's packed as a
   product's are, q4_0's bytes moved into their lanes as 4-byte words, nibbles as they are, f16's
   values column by column, bf16's by pairs of columns. */
GPT2__AVX512 static void gpt2__pack_lanes_avx512(uint8_t* dst, const gpt2__weight& W) {
    if (gpt2__float16_lanes(W.type)) {
        const bool pairs = W.type == GPT2_TYPE_BF16;
        uint16_t* out = (uint16_t*)dst;
        for (int64_t first = 0; first < W.rows; first += gpt2__q8_panel_rows) {
            const uint16_t* row[gpt2__q8_panel_rows];
            for (int i = 0; i < gpt2__q8_panel_rows; i++) row[i] = (const uint16_t*)(W.data + (size_t)std::min<int64_t>(first + i, W.rows - 1) * W.row_bytes);
            for (int64_t k = 0; k < W.cols; k += pairs ? 2 : 1)
                for (int i = 0; i < gpt2__q8_panel_rows; i++) {
                    *out++ = row[i][k];
                    if (pairs) *out++ = k + 1 < W.cols ? row[i][k + 1] : 0;
                }
        }
        return;
    }
    const int64_t nb = W.cols / gpt2__q8_block_values;
    const bool q4 = W.type == GPT2_TYPE_Q4_0;
    const size_t block_bytes = q4 ? gpt2__panel_block_bytes<GPT2_TYPE_Q4_0> : gpt2__panel_block_bytes<GPT2_TYPE_Q8_0>;
    for (int64_t first = 0; first < W.rows; first += gpt2__q8_panel_rows, dst += (size_t)nb * block_bytes)
        for (int j = 0; j < 2; j++) {
            const uint8_t* row[gpt2__q8_lane_rows];
            for (int i = 0; i < gpt2__q8_lane_rows; i++) row[i] = W.data + (size_t)std::min<int64_t>(first + gpt2__q8_lane_rows * j + i, W.rows - 1) * W.row_bytes;
            if (!q4) {
                gpt2__pack_q8_group_avx512<GPT2_TYPE_Q8_0>(dst, j, row, nb, 0);
                continue;
            }
            for (int64_t b = 0; b < nb; b++) {
                uint8_t* words = dst + (size_t)b * block_bytes + 64 * j;
                uint8_t* scales = (uint8_t*)gpt2__q8_group_scales<GPT2_TYPE_Q4_0>(dst + (size_t)b * block_bytes, j);
                for (int i = 0; i < gpt2__q8_lane_rows; i++) {
                    const uint8_t* block = row[i] + (size_t)b * gpt2__q4_block_bytes;
                    const int lane = gpt2__lane_of_row(i);
                    for (int k = 0; k < 4; k++) std::memcpy(words + 128 * k + 4 * lane, gpt2__q4_nibbles(block) + 4 * k, 4);
                    std::memcpy(scales + 2 * lane, block, 2);
                }
            }
        }
}

/* Decode streams the weights row by row in their own type; prefill multiplies int8 panels (q8_0
   and q4_0 against packed activations) or float panels. Float rows stream with the 256-bit row
   kernel, which Zen 4 feeds from DRAM faster than 512-bit loads (it splits those in two anyway);
   q8_0 and q4_0 rows use 512-bit integer dot products, gpt2__decode_rows<TYPE> at a time. */
GPT2__AVX512 static void gpt2__matmul_avx512(const gpt2__matmul_args& a, int64_t o_begin, int64_t o_end, float* panel) {
    switch (a.strategy) {
    case GPT2__FLOAT16_LANES:
        if (a.W->type == GPT2_TYPE_BF16) return gpt2__matmul_lanes_avx512<GPT2_TYPE_BF16>(a, o_begin, o_end);
        return gpt2__matmul_lanes_avx512<GPT2_TYPE_F16>(a, o_begin, o_end);
    case GPT2__INT8_PANELS: return gpt2__matmul_q8_panels_avx512(a, o_begin, o_end, panel);
    case GPT2__FLOAT_TILES: return gpt2__prefill_x86<gpt2__prefill_avx512>(a, o_begin, o_end, panel);
    case GPT2__STREAM_INT8:
        if (a.W->type == GPT2_TYPE_Q4_0) return gpt2__matmul_int8_rows_avx512<GPT2_TYPE_Q4_0>(a, o_begin, o_end, (uint8_t*)panel);
        return gpt2__matmul_int8_rows_avx512<GPT2_TYPE_Q8_0>(a, o_begin, o_end, (uint8_t*)panel);
    case GPT2__STREAM_ROWS:
    case GPT2__BF16_UNIT: /* the avx512_bf16 set's, which takes it before this */
        break;
    }
    gpt2__matmul_by_rows<gpt2__dot_blocks_avx2<gpt2__q8_block_bytes, gpt2__block_dot_q8_avx2>, gpt2__dot_blocks_avx2<gpt2__q4_block_bytes, gpt2__block_dot_q4_avx2>,
                         gpt2__dot_row_avx2>(a, o_begin, o_end);
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

/* Rows of x quantized as gpt2__quantize_q8_avx512 does, packed for gpt2__tile_q8_avx512: per
   row the int8 values, the block scales, and per block -128 times the sum of its values (the
   start of its sums against weights stored as w + 128). */
GPT2__AVX512 static void gpt2__quantize_q8_packed_avx512(uint8_t* dst, const float* x, int rows, int64_t cols) {
    const int B = gpt2__q8_block_values;
    const int64_t nb = cols / B;
    for (int t = 0; t < rows; t++, dst += gpt2__q8_packed_row_bytes(cols)) {
        int8_t* q = (int8_t*)dst;
        float* scale = (float*)(dst + cols);
        int32_t* start = (int32_t*)(scale + nb);
        gpt2__quantize_q8_avx512(q, scale, x + (size_t)t * cols, cols);
        for (int64_t b = 0; b < nb; b++) {
            const __m128i* v = (const __m128i*)(q + B * b);
            start[b] = -128 * _mm512_reduce_add_epi32(_mm512_add_epi32(_mm512_cvtepi8_epi32(_mm_loadu_si128(v)), _mm512_cvtepi8_epi32(_mm_loadu_si128(v + 1))));
        }
    }
}

/* e^x as contract.h describes it (gpt2__exp_poly), 16 lanes; 0 below gpt2__exp_min. */
GPT2__AVX512 static inline __m512 gpt2__exp_avx512(__m512 x) {
    x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(gpt2__exp_max)), _mm512_set1_ps(gpt2__exp_min));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(gpt2__log2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(gpt2__ln2_hi), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(gpt2__ln2_lo), r);
    __m512 p = _mm512_set1_ps(gpt2__exp_poly[0]);
    GPT2__UNROLL
    for (size_t i = 1; i < std::size(gpt2__exp_poly); i++) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(gpt2__exp_poly[i]));
    p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(p, n);
}

/* GELU: the erf form with erf as contract.h gives it (gpt2__erf_poly), or the tanh form with
   tanh(u) = 1 - 2 / (e^2u + 1). */
GPT2__AVX512 static void gpt2__gelu_avx512(float* x, size_t n, bool tanh_form) {
    for (size_t i = 0; i < n; i += 16) {
        const __mmask16 m = gpt2__mask16((int64_t)i, (int64_t)n);
        const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
        __m512 g; /* erf(v / sqrt 2) or tanh(...) */
        if (tanh_form) {
            const __m512 u = _mm512_mul_ps(_mm512_set1_ps(gpt2__sqrt_2_over_pi), _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(gpt2__gelu_cubic), v), _mm512_mul_ps(v, v), v));
            const __m512 e = gpt2__exp_avx512(_mm512_add_ps(u, u));
            g = _mm512_sub_ps(_mm512_set1_ps(1.0f), _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(e, _mm512_set1_ps(1.0f))));
        } else {
            const __m512 z = _mm512_abs_ps(_mm512_mul_ps(v, _mm512_set1_ps(gpt2__sqrt_half)));
            const __m512 t = _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_fmadd_ps(_mm512_set1_ps(gpt2__erf_p), z, _mm512_set1_ps(1.0f)));
            __m512 p = _mm512_set1_ps(gpt2__erf_poly[0]);
            GPT2__UNROLL
            for (size_t k = 1; k < std::size(gpt2__erf_poly); k++) p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(gpt2__erf_poly[k]));
            p = _mm512_mul_ps(p, t);
            const __m512 e = gpt2__exp_avx512(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_mul_ps(z, z)));
            const __m512 erf_abs = _mm512_fnmadd_ps(p, e, _mm512_set1_ps(1.0f));
            g = _mm512_mask_sub_ps(erf_abs, _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LT_OQ), _mm512_setzero_ps(), erf_abs);
        }
        const __m512 half_v = _mm512_mul_ps(_mm512_set1_ps(0.5f), v);
        _mm512_mask_storeu_ps(x + i, m, _mm512_fmadd_ps(half_v, g, half_v));
    }
}

template <class KV>
GPT2__AVX512 static inline __m512 gpt2__kv16_avx512(const KV* p, __mmask16 m) {
    if constexpr (sizeof(KV) == 4) return _mm512_maskz_loadu_ps(m, p);
    else return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
}

/* gpt2__exp_scores_avx2 for AVX-512. */
GPT2__AVX512 static void gpt2__exp_scores_avx512(float* scores, int n, float* max_score, float* sum) {
    __m512 vmax = _mm512_set1_ps(-INFINITY);
    for (int j = 0; j < n; j += 16) vmax = _mm512_mask_max_ps(vmax, gpt2__mask16(j, n), vmax, _mm512_maskz_loadu_ps(gpt2__mask16(j, n), scores + j));
    const float m = _mm512_reduce_max_ps(vmax);
    __m512 vsum = _mm512_setzero_ps();
    for (int j = 0; j < n; j += 16) {
        const __mmask16 mask = gpt2__mask16(j, n);
        const __m512 e = _mm512_maskz_mov_ps(mask, gpt2__exp_avx512(_mm512_sub_ps(_mm512_maskz_loadu_ps(mask, scores + j), _mm512_set1_ps(m))));
        _mm512_mask_storeu_ps(scores + j, mask, e);
        vsum = _mm512_add_ps(vsum, e);
    }
    *max_score = m;
    *sum = _mm512_reduce_add_ps(vsum);
}

/* gpt2__attend_scalar's block of queries at once (fewer are padded with copies of the last):
   the scores of 4 keys x 4 queries per 16-way reduction, each key loaded once for the 4; the
   values weighted for the 4 queries in registers, 64 dimensions at a time. A query's scores
   and output do not depend on the other queries of its block. */
template <class KV>
GPT2__AVX512 static void gpt2__attend_avx512(float* out, size_t out_stride, const float* q, size_t q_stride, const KV* k, const KV* v, size_t stride, int n_keys, int n_queries, int head_dim, float* scores) {
    static_assert(gpt2__query_block == 4, "a block's 4 queries and 4 keys fill one 16-way reduction");
    const int D = head_dim, keys = n_keys + n_queries - 1; /* the last query's */
    const size_t ld = ((size_t)keys + 3) / 4 * 4;          /* a query's row of scores */
    const __m512 scale = _mm512_set1_ps(1.0f / std::sqrt((float)D));
    const __m512i by_query = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    const float* qi[gpt2__query_block];
    gpt2__block_rows(qi, q, q_stride, n_queries);
    for (int j = 0; j < keys; j += 4) {
        const KV* kj[4];
        for (int r = 0; r < 4; r++) kj[r] = k + (size_t)std::min(j + r, keys - 1) * stride;
        __m512 acc[16]; /* key r, query i at 4r + i */
        GPT2__UNROLL
        for (int i = 0; i < 16; i++) acc[i] = _mm512_setzero_ps();
        for (int d = 0; d < D; d += 16) {
            const __mmask16 m = gpt2__mask16(d, D);
            __m512 qv[4];
            GPT2__UNROLL
            for (int i = 0; i < 4; i++) qv[i] = _mm512_maskz_loadu_ps(m, qi[i] + d);
            GPT2__UNROLL
            for (int r = 0; r < 4; r++) {
                const __m512 kv = gpt2__kv16_avx512(kj[r] + d, m);
                GPT2__UNROLL
                for (int i = 0; i < 4; i++) acc[4 * r + i] = _mm512_fmadd_ps(qv[i], kv, acc[4 * r + i]);
            }
        }
        const __m512 s = _mm512_permutexvar_ps(by_query, _mm512_mul_ps(gpt2__hsum16_avx512(acc), scale)); /* query i, key j + r at 4i + r */
        _mm_storeu_ps(scores + j, _mm512_extractf32x4_ps(s, 0)); /* immediates: not a loop's index, which */
        _mm_storeu_ps(scores + ld + j, _mm512_extractf32x4_ps(s, 1)); /* some compilers (nvcc) do not unroll */
        _mm_storeu_ps(scores + 2 * ld + j, _mm512_extractf32x4_ps(s, 2));
        _mm_storeu_ps(scores + 3 * ld + j, _mm512_extractf32x4_ps(s, 3));
    }
    gpt2__softmax_block<gpt2__exp_scores_avx512>(scores, ld, n_keys, n_queries);
    const float* p[gpt2__query_block];
    gpt2__block_rows(p, scores, ld, n_queries);
    for (int d0 = 0; d0 < D; d0 += 64) {
        __mmask16 m[4];
        __m512 acc[4][4]; /* query i, dimensions d0 + 16c .. */
        GPT2__UNROLL
        for (int c = 0; c < 4; c++) {
            m[c] = d0 + 16 * c < D ? gpt2__mask16(d0 + 16 * c, D) : (__mmask16)0;
            GPT2__UNROLL
            for (int i = 0; i < 4; i++) acc[i][c] = _mm512_setzero_ps();
        }
        for (int j = 0; j < keys; j++) {
            const KV* vj = v + (size_t)j * stride + d0;
            __m512 pj[4];
            GPT2__UNROLL
            for (int i = 0; i < 4; i++) pj[i] = _mm512_set1_ps(p[i][j]);
            GPT2__UNROLL
            for (int c = 0; c < 4; c++) {
                const __m512 vv = gpt2__kv16_avx512(vj + 16 * c, m[c]);
                GPT2__UNROLL
                for (int i = 0; i < 4; i++) acc[i][c] = _mm512_fmadd_ps(pj[i], vv, acc[i][c]);
            }
        }
        for (int i = 0; i < n_queries; i++)
            GPT2__UNROLL
            for (int c = 0; c < 4; c++) _mm512_mask_storeu_ps(out + i * out_stride + d0 + 16 * c, m[c], acc[i][c]);
    }
}

#endif /* GPT2__X86 */

#endif /* GPT2__PART_CPU_KERNELS_AVX512_H */
