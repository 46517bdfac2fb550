#ifndef GPT2__PART_CPU_KERNELS_AVX2_H
#define GPT2__PART_CPU_KERNELS_AVX2_H
#include "x86_prefill.h"

/* AVX2 + FMA + F16C kernels; x86_prefill.h has the target macros and the prefill pieces shared
   with AVX-512. */

#if defined(GPT2__X86)

GPT2__AVX2 static inline float gpt2__hsum_avx2(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* 8 weights from element k as floats (k + 8 <= row length). */
template <uint32_t TYPE>
GPT2__AVX2 static inline __m256 gpt2__w8_avx2(const uint8_t* row, int64_t k) {
    if constexpr (TYPE == GPT2_TYPE_F32) {
        return _mm256_loadu_ps((const float*)row + k);
    } else if constexpr (TYPE == GPT2_TYPE_F16) {
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(row + 2 * k)));
    } else {
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)(row + 2 * k))), 16));
    }
}

/* A row tail of fewer than 8 elements, in scalar float, added after the vector sum. */
static inline float gpt2__w_scalar(uint32_t type, const uint8_t* row, int64_t k) {
    uint16_t h;
    switch (type) {
    case GPT2_TYPE_F32: return ((const float*)row)[k];
    case GPT2_TYPE_F16: std::memcpy(&h, row + 2 * k, 2); return gpt2__f16_to_f32(h);
    default: std::memcpy(&h, row + 2 * k, 2); return gpt2__bf16_to_f32(h);
    }
}

/* How far ahead of its reads an int8 decode row (q8_0, q4_0) prefetches its weights. Their
   arithmetic takes most of the time their bytes take from DRAM, and the hardware prefetcher
   alone fell behind (docs/PERFORMANCE.md, Kernel notes). */
static const int gpt2__decode_ahead_bytes = 4096;

/* Prefetches the 64-byte lines from `at` + AHEAD on that cover the next BYTES, into L1, or with
   IntoL2 into L2. */
template <int BYTES, bool IntoL2 = false, int AHEAD = gpt2__decode_ahead_bytes>
GPT2__ALWAYS_INLINE static void gpt2__prefetch_decode_ahead(const uint8_t* at) {
    GPT2__UNROLL
    for (int line = 0; line < (BYTES + 63) / 64; line++) {
        if constexpr (IntoL2) _mm_prefetch((const char*)at + AHEAD + 64 * line, _MM_HINT_T1);
        else _mm_prefetch((const char*)at + AHEAD + 64 * line, _MM_HINT_T0);
    }
}

/* How far ahead float decode rows (f32, f16, bf16) of `cols` values prefetch into L2; 0: not at
   all. On Intel's cores gpt2__decode_ahead_bytes, where the hardware prefetcher alone streamed
   them at 0.65-0.85x the speed (Emerald Rapids, one thread from DRAM: f32 14.1 -> 17 GB/s, the
   AVX2 set's f16 11 -> 15.7). On Zen 4 the hardware prefetcher alone streams rows of up to 4096
   values at the limit, and is slower with a prefetch; past that the row's activations (4 bytes a
   value, read again for every row) no longer stay in L1 beside the weights, and f16 and bf16 rows
   fell to 13-18 GB/s, which a prefetch 16 KB ahead brings back to 23-32 (f32 rows gained
   nothing; docs/PERFORMANCE.md, Kernel notes). */
static const int gpt2__wide_rows_ahead_bytes = 16384;
static const int64_t gpt2__rows_streamed_alone_values = 4096; /* the longest row Zen 4 streams at the limit unaided */
/* On AMD, rows longer than that: f16 and bf16 16 KB ahead, f32 not at all (also the prefetch of
   the rows that go together, gpt2__matmul_rows_together_avx2, which are all that long where the
   L1 data cache holds 24 KB or more). */
static constexpr int gpt2__long_rows_ahead(uint32_t type) { return type == GPT2_TYPE_F32 ? 0 : gpt2__wide_rows_ahead_bytes; }
static int gpt2__float_rows_ahead(uint32_t type, int64_t cols) {
    if (gpt2__intel_cpu()) return gpt2__decode_ahead_bytes;
    return cols > gpt2__rows_streamed_alone_values ? gpt2__long_rows_ahead(type) : 0;
}

/* Decode reads the weights one row at a time, so each thread's rows are one sequential stream,
   which the hardware prefetcher follows across row ends (with AHEAD bytes > 0, prefetched that far
   ahead too). */
template <uint32_t TYPE, int AHEAD>
GPT2__AVX2 static float gpt2__row_avx2(const uint8_t* w, const float* x, int64_t K) {
    constexpr int value_bytes = TYPE == GPT2_TYPE_F32 ? 4 : 2;
    __m256 acc[4];
    GPT2__UNROLL
    for (int i = 0; i < 4; i++) acc[i] = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 32 <= K; k += 32) {
        if constexpr (AHEAD > 0) gpt2__prefetch_decode_ahead<32 * value_bytes, true, AHEAD>(w + value_bytes * k);
        GPT2__UNROLL
        for (int i = 0; i < 4; i++) acc[i] = _mm256_fmadd_ps(gpt2__w8_avx2<TYPE>(w, k + 8 * i), _mm256_loadu_ps(x + k + 8 * i), acc[i]);
    }
    for (; k + 8 <= K; k += 8) acc[0] = _mm256_fmadd_ps(gpt2__w8_avx2<TYPE>(w, k), _mm256_loadu_ps(x + k), acc[0]);
    float tail = 0.0f;
    for (; k < K; k++) tail += gpt2__w_scalar(TYPE, w, k) * x[k];
    return gpt2__hsum_avx2(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]))) + tail;
}

/* R rows of TYPE (gpt2__rows_together) at once, their 32-value steps in turn, each prefetched
   AHEAD bytes ahead as alone, each row's sums over the same steps in the same order as
   gpt2__row_avx2's: the same bits. Kept apart from it: gpt2__row_avx2 written as this with R = 1
   streamed f16 and bf16 rows of 768 values at 0.83-0.94x the speed (kernel bench, Zen 4, 3
   alternated rounds). The dot products go to dots[0..R). */
template <uint32_t TYPE, int R, int AHEAD>
GPT2__AVX2 static void gpt2__rows_avx2(const uint8_t* const* w, const float* x, int64_t K, float* dots) {
    constexpr int value_bytes = TYPE == GPT2_TYPE_F32 ? 4 : 2;
    __m256 acc[R][4];
    GPT2__UNROLL
    for (int r = 0; r < R; r++)
        GPT2__UNROLL
        for (int i = 0; i < 4; i++) acc[r][i] = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 32 <= K; k += 32)
        GPT2__UNROLL
        for (int r = 0; r < R; r++) {
            if constexpr (AHEAD > 0) gpt2__prefetch_decode_ahead<32 * value_bytes, true, AHEAD>(w[r] + value_bytes * k);
            GPT2__UNROLL
            for (int i = 0; i < 4; i++) acc[r][i] = _mm256_fmadd_ps(gpt2__w8_avx2<TYPE>(w[r], k + 8 * i), _mm256_loadu_ps(x + k + 8 * i), acc[r][i]);
        }
    for (int r = 0; r < R; r++) {
        int64_t j = k;
        for (; j + 8 <= K; j += 8) acc[r][0] = _mm256_fmadd_ps(gpt2__w8_avx2<TYPE>(w[r], j), _mm256_loadu_ps(x + j), acc[r][0]);
        float tail = 0.0f;
        for (; j < K; j++) tail += gpt2__w_scalar(TYPE, w[r], j) * x[j];
        dots[r] = gpt2__hsum_avx2(_mm256_add_ps(_mm256_add_ps(acc[r][0], acc[r][1]), _mm256_add_ps(acc[r][2], acc[r][3]))) + tail;
    }
}

template <int AHEAD>
GPT2__AVX2 static float gpt2__dot_row_avx2(uint32_t type, const uint8_t* row, const float* x, int64_t K) {
    switch (type) {
    case GPT2_TYPE_F32: return gpt2__row_avx2<GPT2_TYPE_F32, AHEAD>(row, x, K);
    case GPT2_TYPE_F16: return gpt2__row_avx2<GPT2_TYPE_F16, AHEAD>(row, x, K);
    default: return gpt2__row_avx2<GPT2_TYPE_BF16, AHEAD>(row, x, K);
    }
}

/* One q8_0 block (at p) times its 32 quantized activations, as 8 exact integer partial sums. */
GPT2__AVX2 static inline __m256i gpt2__block_dot_q8_avx2(const uint8_t* p, const int8_t* xq) {
    const __m256i w = _mm256_loadu_si256((const __m256i*)gpt2__q8_values(p)), x = _mm256_loadu_si256((const __m256i*)xq);
    const __m256i dot16 = _mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(x, w));
    return _mm256_madd_epi16(dot16, _mm256_set1_epi16(1));
}

/* One q4_0 block (at p) times its 32 quantized activations, as 8 exact integer partial sums. The
   nibbles are unsigned bytes, as pmaddubsw takes its first operand, so it multiplies them as they
   are and 8 times the sums of x come off after (the pairs' sums fit in 16 bits: |15 x| + |15 x| < 2^15). */
GPT2__AVX2 static inline __m256i gpt2__block_dot_q4_avx2(const uint8_t* p, const int8_t* xq) {
    const __m128i packed = _mm_loadu_si128((const __m128i*)gpt2__q4_nibbles(p));
    const __m256i w = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(packed, 4), packed), _mm256_set1_epi8(15)); /* values 0-15, then 16-31 */
    const __m256i x = _mm256_loadu_si256((const __m256i*)xq);
    const __m256i dot16 = _mm256_sub_epi16(_mm256_maddubs_epi16(w, x), _mm256_maddubs_epi16(_mm256_set1_epi8(8), x));
    return _mm256_madd_epi16(dot16, _mm256_set1_epi16(1));
}

/* row . x for one row of int8-dot blocks (q8_0 or q4_0, BYTES each, BlockDot giving one block's
   8 integer partial sums) against x quantized by gpt2__quantize_q8 (xs: its block scales). Four
   blocks a step: two rounds of horizontal adds leave each block's two 128-bit halves summed in
   one lane of a half (block i in lanes i and 4 + i), so one conversion and one FMA with the four
   scales (weight times activation) serve the four blocks. The integer sums are exact (at most
   16 x 127 x 128 a lane), so only the float adds' order differs from a block at a time; `first`
   blocks on, the rest of the row. */
template <int BYTES, __m256i (*BlockDot)(const uint8_t*, const int8_t*)>
GPT2__AVX2 static __m256 gpt2__dot_blocks_from_avx2(__m256 acc, const uint8_t* w, const int8_t* xq, const float* xs, int64_t first, int64_t nb) {
    const int B = gpt2__q8_block_values;
    static_assert(gpt2__q8_block_values == 32 && gpt2__q4_block_values == 32, "a block's values fill one 256-bit register");
    int64_t b = first;
    for (; b + 4 <= nb; b += 4) {
        const uint8_t* p = w + BYTES * b;
        gpt2__prefetch_decode_ahead<4 * BYTES>(p);
        uint16_t h[4];
        for (int i = 0; i < 4; i++) h[i] = gpt2__q8_scale_f16(p + BYTES * i);
        const __m128 scales = _mm_mul_ps(_mm_cvtph_ps(_mm_loadl_epi64((const __m128i*)h)), _mm_loadu_ps(xs + b));
        const __m256i pairs01 = _mm256_hadd_epi32(BlockDot(p, xq + B * b), BlockDot(p + BYTES, xq + B * (b + 1)));
        const __m256i pairs23 = _mm256_hadd_epi32(BlockDot(p + 2 * BYTES, xq + B * (b + 2)), BlockDot(p + 3 * BYTES, xq + B * (b + 3)));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_hadd_epi32(pairs01, pairs23)), _mm256_set_m128(scales, scales), acc);
    }
    for (; b < nb; b++) {
        const uint8_t* p = w + BYTES * b;
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(BlockDot(p, xq + B * b)), _mm256_set1_ps(_cvtsh_ss(gpt2__q8_scale_f16(p)) * xs[b]), acc);
    }
    return acc;
}
template <int BYTES, __m256i (*BlockDot)(const uint8_t*, const int8_t*)>
GPT2__AVX2 static float gpt2__dot_blocks_avx2(const uint8_t* w, const int8_t* xq, const float* xs, int64_t K) {
    return gpt2__hsum_avx2(gpt2__dot_blocks_from_avx2<BYTES, BlockDot>(_mm256_setzero_ps(), w, xq, xs, 0, K / gpt2__q8_block_values));
}

/* q4_0 decode rows, two blocks to a register. A block's 16 bytes hold its values 0-15 in their
   low nibbles and 16-31 in their high ones, so two blocks' bytes side by side give, masked, the
   low halves of both in one register and, shifted and masked, the high halves in another, with x
   rearranged to match once per call and token (gpt2__prepare_q4_x_avx2): a shift and two masks
   per two blocks, where a block alone takes a shift, an insert and a mask. A value is nibble - 8:
   the nibbles are multiplied as the unsigned bytes pmaddubsw takes, and 8 times each block's sum
   of x, the same for every row, comes off once per 8 blocks (prepared with x). Eight blocks a
   step: three rounds of horizontal adds leave blocks 0, 2, 4, 6 in the low half's lanes and 1,
   3, 5, 7 in the high half's, and their scales are taken in that order. Integer sums exact as
   above (a 16-bit lane holds at most 4 x 15 x 127), so only the float adds' order differs from
   the scalar set's; the blocks after the last 8 go as above (gpt2__dot_blocks_from_avx2). */
static const int gpt2__q4_step_blocks = 8;
/* Per step of 8 blocks, the prepared x: for each pair of blocks their values 0-15 side by side,
   then their values 16-31 (64 bytes a pair), then 8 x each block's sum of x (8 int32) and the
   blocks' activation scales (8 floats), both in the lanes' order. */
static const size_t gpt2__q4_step_offsets = 4 * 64, gpt2__q4_step_scales = gpt2__q4_step_offsets + 8 * 4, gpt2__q4_step_bytes = gpt2__q4_step_scales + 8 * 4;

/* The int32 sums of a step's 4 pairs of blocks, each pair's low and high halves of w (unsigned
   bytes) against the prepared x's: blocks 0, 2, 4, 6 in the low half's lanes, 1, 3, 5, 7 in the
   high half's. The x preparation sums x through this too (w all ones), so both agree on the
   lanes by construction. */
GPT2__AVX2 static inline __m256i gpt2__q4_step_sums_avx2(const __m256i* w_low, const __m256i* w_high, const uint8_t* prepared) {
    __m256i pair_sums[gpt2__q4_step_blocks / 2];
    for (int pair = 0; pair < gpt2__q4_step_blocks / 2; pair++) {
        const __m256i x_low = _mm256_loadu_si256((const __m256i*)(prepared + 64 * pair)), x_high = _mm256_loadu_si256((const __m256i*)(prepared + 64 * pair + 32));
        const __m256i sums16 = _mm256_add_epi16(_mm256_maddubs_epi16(w_low[pair], x_low), _mm256_maddubs_epi16(w_high[pair], x_high));
        pair_sums[pair] = _mm256_madd_epi16(sums16, _mm256_set1_epi16(1));
    }
    return _mm256_hadd_epi32(_mm256_hadd_epi32(pair_sums[0], pair_sums[1]), _mm256_hadd_epi32(pair_sums[2], pair_sums[3]));
}

GPT2__AVX2 static void gpt2__prepare_q4_x_avx2(uint8_t* dst, const int8_t* xq, const float* xs, int64_t steps) {
    const int B = gpt2__q8_block_values, S = gpt2__q4_step_blocks;
    const __m256i ones[S / 2] = {_mm256_set1_epi8(1), _mm256_set1_epi8(1), _mm256_set1_epi8(1), _mm256_set1_epi8(1)};
    for (int64_t g = 0; g < steps; g++, dst += gpt2__q4_step_bytes) {
        const int8_t* x = xq + (size_t)B * S * g;
        for (int pair = 0; pair < S / 2; pair++) {
            const __m256i first = _mm256_loadu_si256((const __m256i*)(x + 2 * B * pair)), second = _mm256_loadu_si256((const __m256i*)(x + 2 * B * pair + B));
            _mm256_storeu_si256((__m256i*)(dst + 64 * pair), _mm256_permute2x128_si256(first, second, 0x20));
            _mm256_storeu_si256((__m256i*)(dst + 64 * pair + 32), _mm256_permute2x128_si256(first, second, 0x31));
        }
        _mm256_storeu_si256((__m256i*)(dst + gpt2__q4_step_offsets), _mm256_slli_epi32(gpt2__q4_step_sums_avx2(ones, ones, dst), 3));
        _mm256_storeu_ps((float*)(dst + gpt2__q4_step_scales), _mm256_permutevar8x32_ps(_mm256_loadu_ps(xs + S * g), _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7)));
    }
}

/* The f16 scales of the 8 q4_0 blocks at p as floats, in the lanes' order (blocks 0, 2, 4, 6,
   1, 3, 5, 7). Block k's scale lies at byte 18 k: in the 32 bytes from 32 (k / 2) on, it is
   32-bit word k / 2 of the low half when k is even (its low 16 bits), of the high half when odd
   (its high 16 bits), so three blends of 4 loads hold all 8, and one byte shuffle and one permute
   line them up. (From 8 scalar loads GCC assembled the words with a dozen shuffles; a gather was
   slower still on Zen 4.) */
GPT2__AVX2 static inline __m256 gpt2__q4_scales8_avx2(const uint8_t* p) {
    __m256i words = _mm256_loadu_si256((const __m256i*)p);
    words = _mm256_blend_epi32(words, _mm256_loadu_si256((const __m256i*)(p + 32)), 0x22);
    words = _mm256_blend_epi32(words, _mm256_loadu_si256((const __m256i*)(p + 64)), 0x44);
    words = _mm256_blend_epi32(words, _mm256_loadu_si256((const __m256i*)(p + 96)), 0x88);
    const __m256i pick = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1, 2, 3, 6, 7, 10, 11, 14, 15, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m256i lined = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(words, pick), _MM_SHUFFLE(3, 1, 2, 0));
    return _mm256_cvtph_ps(_mm256_castsi256_si128(lined));
}

GPT2__AVX2 static float gpt2__dot_q4_row_avx2(const uint8_t* w, const int8_t* xq, const float* xs, const uint8_t* prepared, int64_t nb) {
    const int S = gpt2__q4_step_blocks, BYTES = gpt2__q4_block_bytes;
    const __m256i low = _mm256_set1_epi8(15);
    __m256 acc = _mm256_setzero_ps();
    int64_t b = 0;
    for (; b + S <= nb; b += S, prepared += gpt2__q4_step_bytes) {
        const uint8_t* p = w + BYTES * b;
        gpt2__prefetch_decode_ahead<S * BYTES>(p);
        __m256i w_low[S / 2], w_high[S / 2];
        for (int pair = 0; pair < S / 2; pair++) {
            const uint8_t* first = p + 2 * BYTES * pair;
            const __m256i both = _mm256_loadu2_m128i((const __m128i*)gpt2__q4_nibbles(first + BYTES), (const __m128i*)gpt2__q4_nibbles(first));
            w_low[pair] = _mm256_and_si256(both, low);
            w_high[pair] = _mm256_and_si256(_mm256_srli_epi16(both, 4), low);
        }
        const __m256i sums = gpt2__q4_step_sums_avx2(w_low, w_high, prepared);
        const __m256i offsets = _mm256_loadu_si256((const __m256i*)(prepared + gpt2__q4_step_offsets));
        const __m256 scales = _mm256_mul_ps(gpt2__q4_scales8_avx2(p), _mm256_loadu_ps((const float*)(prepared + gpt2__q4_step_scales)));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(sums, offsets)), scales, acc);
    }
    return gpt2__hsum_avx2(gpt2__dot_blocks_from_avx2<gpt2__q4_block_bytes, gpt2__block_dot_q4_avx2>(acc, w, xq, xs, b, nb));
}

/* GPT2__STREAM_INT8 on q4_0 rows: x prepared for as many tokens as `scratch` (the panel) holds,
   then every row's dot products with those tokens, stored as gpt2__store_out does. */
GPT2__AVX2 static void gpt2__matmul_q4_rows_avx2(const gpt2__matmul_args& a, int64_t o_begin, int64_t o_end, uint8_t* scratch) {
    const gpt2__weight& W = *a.W;
    const int64_t nb = W.cols / gpt2__q8_block_values, steps = nb / gpt2__q4_step_blocks;
    const size_t per_token = std::max<size_t>((size_t)steps * gpt2__q4_step_bytes, 1);
    const int tokens_per_pass = (int)std::min<size_t>((size_t)a.T, gpt2__panel_floats(W.cols) * 4 / per_token);
    for (int t0 = 0; t0 < a.T; t0 += tokens_per_pass) {
        const int n = std::min(tokens_per_pass, a.T - t0);
        for (int t = 0; t < n; t++) gpt2__prepare_q4_x_avx2(scratch + t * per_token, a.xq + (size_t)(t0 + t) * W.cols, a.xq_scale + (size_t)(t0 + t) * nb, steps);
        for (int64_t o = o_begin; o < o_end; o++)
            for (int t = t0; t < t0 + n; t++)
                gpt2__store_out(a, t, o, gpt2__dot_q4_row_avx2(W.data + (size_t)o * W.row_bytes, a.xq + (size_t)t * W.cols, a.xq_scale + (size_t)t * nb, scratch + (t - t0) * per_token, nb));
    }
}

/* One q4_0 row of K weights to floats, d * (nibble - 8) as gpt2__dequantize_row. */
GPT2__AVX2 static void gpt2__q4_to_float_avx2(float* dst, const uint8_t* row, int64_t K) {
    const int B = gpt2__q4_block_values;
    for (int64_t b = 0; b < K / B; b++) {
        const uint8_t* block = row + gpt2__q4_block_bytes * b;
        const __m256 scale = _mm256_set1_ps(_cvtsh_ss(gpt2__q8_scale_f16(block)));
        const __m128i packed = _mm_loadu_si128((const __m128i*)gpt2__q4_nibbles(block)), low4 = _mm_set1_epi8(15), eight = _mm_set1_epi8(8);
        const __m128i half[2] = {_mm_sub_epi8(_mm_and_si128(packed, low4), eight), _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(packed, 4), low4), eight)};
        for (int i = 0; i < 4; i++) {
            const __m128i q = i & 1 ? _mm_srli_si128(half[i / 2], 8) : half[i / 2];
            _mm256_storeu_ps(dst + B * b + 8 * i, _mm256_mul_ps(scale, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q))));
        }
    }
}

/* One row of K weights (f16, bf16, q8_0 or q4_0) to floats, for a prefill panel. */
GPT2__AVX2 static void gpt2__row_to_float_avx2(float* dst, uint32_t type, const uint8_t* row, int64_t K) {
    if (type == GPT2_TYPE_Q4_0) return gpt2__q4_to_float_avx2(dst, row, K);
    if (type == GPT2_TYPE_Q8_0) {
        const int B = gpt2__q8_block_values;
        for (int64_t b = 0; b < K / B; b++) {
            const uint8_t* block = row + gpt2__q8_block_bytes * b;
            const __m256 scale = _mm256_set1_ps(_cvtsh_ss(gpt2__q8_scale_f16(block)));
            for (int i = 0; i < B / 8; i++) {
                const __m128i q = _mm_loadl_epi64((const __m128i*)(gpt2__q8_values(block) + 8 * i));
                _mm256_storeu_ps(dst + B * b + 8 * i, _mm256_mul_ps(scale, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q))));
            }
        }
        return;
    }
    int64_t k = 0;
    for (; k + 8 <= K; k += 8)
        _mm256_storeu_ps(dst + k, type == GPT2_TYPE_F16 ? gpt2__w8_avx2<GPT2_TYPE_F16>(row, k) : gpt2__w8_avx2<GPT2_TYPE_BF16>(row, k));
    for (; k < K; k++) dst[k] = gpt2__w_scalar(type, row, k);
}

/* The 8 sums of 8 vectors, in order, by a tree of horizontal adds. */
GPT2__AVX2 static inline __m256 gpt2__hsum8_avx2(const __m256* v) {
    const __m256 g0 = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
    const __m256 g1 = _mm256_hadd_ps(_mm256_hadd_ps(v[4], v[5]), _mm256_hadd_ps(v[6], v[7]));
    return _mm256_add_ps(_mm256_permute2f128_ps(g0, g1, 0x20), _mm256_permute2f128_ps(g0, g1, 0x31));
}

/* 8 rows of 8 floats transposed in place: afterwards v[c] lane i is row i's value c. */
GPT2__AVX2 GPT2__ALWAYS_INLINE static void gpt2__transpose8_avx2(__m256* v) {
    __m256 t[8];
    GPT2__UNROLL
    for (int i = 0; i < 8; i += 2) { /* rows i and i + 1 interleaved */
        t[i] = _mm256_unpacklo_ps(v[i], v[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(v[i], v[i + 1]);
    }
    GPT2__UNROLL
    for (int i = 0; i < 8; i += 4) { /* each 128-bit lane: one column of rows i.. i + 3 */
        v[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        v[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        v[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        v[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    GPT2__UNROLL
    for (int c = 0; c < 4; c++) { /* rows 0-3 with rows 4-7 */
        t[c] = _mm256_permute2f128_ps(v[c], v[4 + c], 0x20);
        t[4 + c] = _mm256_permute2f128_ps(v[c], v[4 + c], 0x31);
    }
    GPT2__UNROLL
    for (int c = 0; c < 8; c++) v[c] = t[c];
}

/* out[t * gpt2__tile_rows + r] += w_r . x_t for R rows and NP <= 3 tokens, in one pass over K. Both FMA
   pipes stay busy only with enough independent accumulators in flight: 3 tokens x 4 rows give
   12 (with the 3 token vectors and a weight vector, the 16 ymm registers); a single token takes
   two steps of K at a time instead. */
template <int R, int NP>
GPT2__AVX2 static void gpt2__tokens_avx2(float* out, const float* w, size_t ldw, const float* x, size_t ldx, int64_t K) {
    constexpr int U = NP == 1 ? 2 : 1; /* steps of 8 per iteration */
    __m256 acc[U][NP][R];
    GPT2__UNROLL
    for (int u = 0; u < U; u++)
        GPT2__UNROLL
        for (int t = 0; t < NP; t++)
            GPT2__UNROLL
            for (int r = 0; r < R; r++) acc[u][t][r] = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 8 * U <= K; k += 8 * U)
        GPT2__UNROLL
        for (int u = 0; u < U; u++) {
            __m256 xv[NP];
            GPT2__UNROLL
            for (int t = 0; t < NP; t++) {
                __m256 v = _mm256_loadu_ps(x + t * ldx + k + 8 * u);
                GPT2__IN_REGISTER(v);
                xv[t] = v;
            }
            GPT2__UNROLL
            for (int r = 0; r < R; r++) {
                __m256 wv = _mm256_loadu_ps(w + r * ldw + k + 8 * u);
                GPT2__IN_REGISTER(wv);
                GPT2__UNROLL
                for (int t = 0; t < NP; t++) acc[u][t][r] = _mm256_fmadd_ps(wv, xv[t], acc[u][t][r]);
            }
        }
    for (; k + 8 <= K; k += 8)
        GPT2__UNROLL
        for (int r = 0; r < R; r++) {
            const __m256 wv = _mm256_loadu_ps(w + r * ldw + k);
            GPT2__UNROLL
            for (int t = 0; t < NP; t++) acc[0][t][r] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + t * ldx + k), acc[0][t][r]);
        }
    for (int t = 0; t < NP; t++)
        for (int r = 0; r < R; r++) {
            float tail = 0.0f;
            for (int64_t i = k; i < K; i++) tail += w[r * ldw + i] * x[t * ldx + i];
            out[t * gpt2__tile_rows + r] += gpt2__hsum_avx2(U == 2 ? _mm256_add_ps(acc[0][t][r], acc[U - 1][t][r]) : acc[0][t][r]) + tail;
        }
}

/* out[t * gpt2__tile_rows + r] += w_r . x_t for R rows and N tokens: passes of 3, 2 or 1 tokens. */
template <int R, int N>
GPT2__AVX2 static void gpt2__tile_avx2(float* out, const float* w, size_t ldw, const float* x, size_t ldx, int64_t K) {
    int t = 0;
    for (; t + 3 <= N; t += 3) gpt2__tokens_avx2<R, 3>(out + t * gpt2__tile_rows, w, ldw, x + (size_t)t * ldx, ldx, K);
    if (N - t == 2) gpt2__tokens_avx2<R, 2>(out + t * gpt2__tile_rows, w, ldw, x + (size_t)t * ldx, ldx, K);
    if (N - t == 1) gpt2__tokens_avx2<R, 1>(out + t * gpt2__tile_rows, w, ldw, x + (size_t)t * ldx, ldx, K);
}

struct gpt2__prefill_avx2 {
    /* tiles of 3 tokens, one pass of gpt2__tokens_avx2 each: a tile of 4 would take a pass of 3
       and one of 1, whose single token loads 5 vectors per 4 FMAs */
    static constexpr int NT = 3;
    using Panel = gpt2__float_panel;
    static Panel panel(const gpt2__matmul_args& a, int64_t o, int rows, float* scratch) { return gpt2__float_panel_of<gpt2__row_to_float_avx2, false>(a, o, rows, scratch); }
    template <int R, int N>
    static void tile(float* out, const Panel& w, const gpt2__matmul_args& a, int t, int64_t k0, int64_t kn) {
        const size_t K = (size_t)a.W->cols;
        gpt2__tile_avx2<R, N>(out, w.w + k0, w.ldw, a.x + t * K + k0, K, kn);
    }
};

/* The AVX2 set's prefill (GPT2__FLOAT_TILES) of gpt2__avx2_column_tokens tokens or more: W's rows
   gpt2__avx2_panel_rows at a time widened to floats column by column (a panel: per column the 16
   rows' values, two vectors), multiplied with tiles of up to gpt2__avx2_tile_tokens tokens: per
   column the two weight vectors are loaded once for 6 tokens and each token's value broadcast once
   for both, the 12 sums in registers (15 of the 16). Each output is one sum over the columns in
   order, whatever its tile, chunk, thread or row range, and no sum is reduced across lanes, where
   the tiles of 4 rows x 3 tokens above sum 8 columns a lane and reduce every output at the end of
   each block of K. Moving a panel's values into columns (8 x 8 transposes) costs more than those
   reductions save below 32 tokens, which take the 4 x 3 tiles (docs/PERFORMANCE.md, Kernel
   notes). The panel is converted once per chunk of tokens (gpt2__prefill_chunk), a prompt of 128
   on rows of 768 in one. */
static const int gpt2__avx2_panel_rows = 16, gpt2__avx2_tile_tokens = 6, gpt2__avx2_column_tokens = 32;

/* 8 values of a q8_0 or q4_0 row from element k (a multiple of 8) as floats, d times the value
   (q4_0: nibble - 8), as gpt2__row_to_float_avx2 gives them. */
template <uint32_t TYPE>
GPT2__AVX2 static inline __m256 gpt2__w8_block_avx2(const uint8_t* row, int64_t k) {
    const int m = (int)(k % gpt2__q8_block_values);
    const uint8_t* block = row + (size_t)(k / gpt2__q8_block_values) * (TYPE == GPT2_TYPE_Q4_0 ? gpt2__q4_block_bytes : gpt2__q8_block_bytes);
    __m128i q;
    if constexpr (TYPE == GPT2_TYPE_Q4_0) { /* byte j holds value j low, value j + 16 high */
        const __m128i bytes = _mm_loadl_epi64((const __m128i*)(gpt2__q4_nibbles(block) + m % 16));
        q = _mm_sub_epi8(_mm_and_si128(m >= 16 ? _mm_srli_epi16(bytes, 4) : bytes, _mm_set1_epi8(15)), _mm_set1_epi8(8));
    } else {
        q = _mm_loadl_epi64((const __m128i*)(gpt2__q8_values(block) + m));
    }
    return _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(gpt2__q8_scale_f16(block))), _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)));
}

/* Rows [o, o + rows) of W (rows <= 16) as a panel at dst: dst[16 k + r] = row r's value k (rows
   past the range repeat its last: their outputs are not stored). Each half's 8 rows are widened
   8 columns at a time and moved into columns by an 8 x 8 transpose. */
GPT2__AVX2 static void gpt2__panel16_avx2(float* dst, const gpt2__weight* W, int64_t o, int rows) {
    const int64_t K = W->cols, k8 = K / 8 * 8;
    for (int h = 0; h < 2; h++) {
        const uint8_t* row[8];
        for (int r = 0; r < 8; r++) row[r] = W->data + (size_t)(o + std::min(8 * h + r, rows - 1)) * W->row_bytes;
        for (int64_t k = 0; k < k8; k += 8) {
            __m256 v[8];
            if (W->type == GPT2_TYPE_Q8_0) {
                GPT2__UNROLL
                for (int r = 0; r < 8; r++) v[r] = gpt2__w8_block_avx2<GPT2_TYPE_Q8_0>(row[r], k);
            } else if (W->type == GPT2_TYPE_Q4_0) {
                GPT2__UNROLL
                for (int r = 0; r < 8; r++) v[r] = gpt2__w8_block_avx2<GPT2_TYPE_Q4_0>(row[r], k);
            } else if (W->type == GPT2_TYPE_F32) {
                GPT2__UNROLL
                for (int r = 0; r < 8; r++) v[r] = gpt2__w8_avx2<GPT2_TYPE_F32>(row[r], k);
            } else if (W->type == GPT2_TYPE_F16) {
                GPT2__UNROLL
                for (int r = 0; r < 8; r++) v[r] = gpt2__w8_avx2<GPT2_TYPE_F16>(row[r], k);
            } else {
                GPT2__UNROLL
                for (int r = 0; r < 8; r++) v[r] = gpt2__w8_avx2<GPT2_TYPE_BF16>(row[r], k);
            }
            gpt2__transpose8_avx2(v);
            GPT2__UNROLL
            for (int c = 0; c < 8; c++) _mm256_storeu_ps(dst + 16 * (k + c) + 8 * h, v[c]);
        }
        for (int64_t k = k8; k < K; k++) /* float rows' last columns (a block row's K is a multiple of 32) */
            for (int r = 0; r < 8; r++) dst[16 * k + 8 * h + r] = gpt2__w_scalar(W->type, row[r], k);
    }
}

/* Stores 8 outputs (rows r.. r + n - 1 of token t) as gpt2__store_out does: the bias added, and
   with `accumulate` y added to. */
GPT2__AVX2 static inline void gpt2__store8_avx2(const gpt2__matmul_args& a, int t, int64_t r, int n, __m256 sums) {
    float* y = a.y + (size_t)t * a.W->rows + r;
    if (n == 8) {
        const __m256 v = a.bias ? _mm256_add_ps(_mm256_loadu_ps(a.bias + r), sums) : _mm256_add_ps(_mm256_setzero_ps(), sums);
        _mm256_storeu_ps(y, a.accumulate ? _mm256_add_ps(_mm256_loadu_ps(y), v) : v);
        return;
    }
    alignas(32) float s[8];
    _mm256_store_ps(s, sums);
    for (int i = 0; i < n; i++) gpt2__store_out(a, t, r + i, s[i]);
}

/* N tokens from t0 on times the panel of rows [o, o + rows). */
template <int N>
GPT2__AVX2 static void gpt2__tile16_avx2(const gpt2__matmul_args& a, const float* panel, int64_t o, int rows, int t0) {
    const int64_t K = a.W->cols;
    const float* x[N];
    for (int t = 0; t < N; t++) x[t] = a.x + (size_t)(t0 + t) * K;
    __m256 acc[2][N];
    GPT2__UNROLL
    for (int t = 0; t < N; t++) acc[0][t] = acc[1][t] = _mm256_setzero_ps();
    for (int64_t k = 0; k < K; k++) {
        __m256 w0 = _mm256_loadu_ps(panel + 16 * k), w1 = _mm256_loadu_ps(panel + 16 * k + 8);
        GPT2__IN_REGISTERS(w0, w1); /* one statement: GCC split the loop in two halves, each broadcasting every token's value */
        GPT2__UNROLL
        for (int t = 0; t < N; t++) {
            const __m256 xv = _mm256_broadcast_ss(x[t] + k);
            acc[0][t] = _mm256_fmadd_ps(w0, xv, acc[0][t]);
            acc[1][t] = _mm256_fmadd_ps(w1, xv, acc[1][t]);
        }
    }
    GPT2__UNROLL
    for (int t = 0; t < N; t++)
        GPT2__UNROLL
        for (int h = 0; h < 2; h++)
            if (rows > 8 * h) gpt2__store8_avx2(a, t0 + t, o + 8 * h, std::min(8, rows - 8 * h), acc[h][t]);
}

GPT2__AVX2 static void gpt2__matmul_float_tiles_avx2(const gpt2__matmul_args& a, int64_t o_begin, int64_t o_end, float* panel) {
    if (a.T < gpt2__avx2_column_tokens) return gpt2__prefill_x86<gpt2__prefill_avx2>(a, o_begin, o_end, panel);
    constexpr int NT = gpt2__avx2_tile_tokens, PR = gpt2__avx2_panel_rows;
    const gpt2__weight* W = a.W;
    const int64_t K = W->cols;
    float* w = panel;
    const int chunk = gpt2__prefill_chunk(K, NT);
    for (int t0 = 0; t0 < a.T; t0 += chunk) {
        const int tokens = std::min(chunk, a.T - t0), n_tiles = (tokens + NT - 1) / NT;
        for (int64_t o = o_begin; o < o_end; o += PR) {
            const int rows = (int)std::min<int64_t>(PR, o_end - o);
            gpt2__panel16_avx2(w, W, o, rows);
            /* the next rows come from DRAM while the tiles touch no weight memory: their lines
               prefetched, spread over the tiles */
            const char* next = (const char*)(W->data + (size_t)(o + rows) * W->row_bytes);
            const size_t next_lines = (size_t)std::min<int64_t>(PR, o_end - o - rows) * W->row_bytes / 64, per_tile = (next_lines + n_tiles - 1) / n_tiles;
            for (int i = 0; i < n_tiles; i++) {
                for (size_t l = (size_t)i * per_tile, end = std::min(next_lines, l + per_tile); l < end; l++) _mm_prefetch(next + 64 * l, _MM_HINT_T1);
                const int t = t0 + i * (tokens / n_tiles) + std::min(i, tokens % n_tiles), n = tokens / n_tiles + (i < tokens % n_tiles); /* tiles of even sizes */
                switch (n) {
                case 1: gpt2__tile16_avx2<1>(a, w, o, rows, t); break;
                case 2: gpt2__tile16_avx2<2>(a, w, o, rows, t); break;
                case 3: gpt2__tile16_avx2<3>(a, w, o, rows, t); break;
                case 4: gpt2__tile16_avx2<4>(a, w, o, rows, t); break;
                case 5: gpt2__tile16_avx2<5>(a, w, o, rows, t); break;
                default: gpt2__tile16_avx2<NT>(a, w, o, rows, t); break;
                }
            }
        }
    }
}

/* Decode's rows streamed on both x86 sets: float rows by gpt2__row_avx2, prefetched as far ahead
   as gpt2__float_rows_ahead says; q8_0 and q4_0 rows against int8 activations. */
template <int AHEAD>
static void gpt2__matmul_streamed_x86(const gpt2__matmul_args& a, int64_t o_begin, int64_t o_end) {
    gpt2__matmul_by_rows<gpt2__dot_blocks_avx2<gpt2__q8_block_bytes, gpt2__block_dot_q8_avx2>, gpt2__dot_blocks_avx2<gpt2__q4_block_bytes, gpt2__block_dot_q4_avx2>,
                         gpt2__dot_row_avx2<AHEAD>>(a, o_begin, o_end);
}
/* Float decode rows whose values and activations (4 bytes a value more) overflow AMD's L1 data
   cache go gpt2__rows_together at a time: alone, each row's activations, read again for every
   row, left L1 to the row's weights, and the rows streamed at 19-20 GB/s against 31-33 for rows
   that fit (Zen 4, one thread from DRAM: f32 rows of 5120 and 6400 values; f16 and bf16 rows of
   6400, prefetched 16 KB ahead, 21 GB/s). Together the activations are read from L2 once for
   all the rows: f32 rows three at a time stream at 23-26 GB/s, f16 and bf16 rows two at a time
   (with the same prefetch) at 25-26 (three: 22). Rows that fit stream slower this way (f32 1280
   values: 16 GB/s; f16 5120: 0.95-1.0x). Six f32 rows gave a little more (26.5 GB/s) but need
   AVX-512's 32 registers. Intel's cores are not measured: they keep the rows alone
   (docs/PERFORMANCE.md, Kernel notes). */
static constexpr int gpt2__rows_together(uint32_t type) { return type == GPT2_TYPE_F32 ? 3 : 2; }
static bool gpt2__rows_go_together(uint32_t type, int64_t cols) {
    static const int64_t l1_data_bytes = [] {
        unsigned r[4];
        gpt2__cpuid(0x80000000u, 0, r);
        if (gpt2__intel_cpu() || r[0] < 0x80000005u) return (int64_t)0;
        gpt2__cpuid(0x80000005u, 0, r); /* AMD: ECX bits 31-24, the L1 data cache in KB */
        return (int64_t)(r[2] >> 24) * 1024;
    }();
    const bool float_row = type == GPT2_TYPE_F32 || type == GPT2_TYPE_F16 || type == GPT2_TYPE_BF16;
    return float_row && l1_data_bytes > 0 && ((type == GPT2_TYPE_F32 ? 4 : 2) + 4) * cols > l1_data_bytes;
}
template <uint32_t TYPE>
GPT2__AVX2 static void gpt2__matmul_rows_together_avx2(const gpt2__matmul_args& a, int64_t o_begin, int64_t o_end) {
    constexpr int R = gpt2__rows_together(TYPE), AHEAD = gpt2__long_rows_ahead(TYPE);
    const int64_t K = a.W->cols;
    for (int64_t o = o_begin; o < o_end; o += R) {
        const int n = (int)std::min<int64_t>(R, o_end - o);
        const uint8_t* rows[R];
        for (int r = 0; r < n; r++) rows[r] = a.W->data + (size_t)(o + r) * a.W->row_bytes;
        float dots[R];
        if (n == R) gpt2__rows_avx2<TYPE, R, AHEAD>(rows, a.x, K, dots);
        else
            for (int r = 0; r < n; r++) dots[r] = gpt2__row_avx2<TYPE, AHEAD>(rows[r], a.x, K);
        for (int r = 0; r < n; r++) gpt2__store_out(a, 0, o + r, dots[r]);
    }
}
static void gpt2__matmul_streamed_x86(const gpt2__matmul_args& a, int64_t o_begin, int64_t o_end) {
    if (a.T == 1 && gpt2__rows_go_together(a.W->type, a.W->cols)) switch (a.W->type) {
        case GPT2_TYPE_F32: return gpt2__matmul_rows_together_avx2<GPT2_TYPE_F32>(a, o_begin, o_end);
        case GPT2_TYPE_F16: return gpt2__matmul_rows_together_avx2<GPT2_TYPE_F16>(a, o_begin, o_end);
        default: return gpt2__matmul_rows_together_avx2<GPT2_TYPE_BF16>(a, o_begin, o_end);
        }
    switch (gpt2__float_rows_ahead(a.W->type, a.W->cols)) {
    case gpt2__decode_ahead_bytes: return gpt2__matmul_streamed_x86<gpt2__decode_ahead_bytes>(a, o_begin, o_end);
    case gpt2__wide_rows_ahead_bytes: return gpt2__matmul_streamed_x86<gpt2__wide_rows_ahead_bytes>(a, o_begin, o_end);
    default: return gpt2__matmul_streamed_x86<0>(a, o_begin, o_end);
    }
}
GPT2__AVX2 static void gpt2__matmul_rows_avx2(const gpt2__matmul_args& a, int64_t o_begin, int64_t o_end, float* panel) {
    if (a.strategy == GPT2__STREAM_INT8 && a.W->type == GPT2_TYPE_Q4_0) return gpt2__matmul_q4_rows_avx2(a, o_begin, o_end, (uint8_t*)panel);
    gpt2__matmul_streamed_x86(a, o_begin, o_end);
}

GPT2__AVX2 static void gpt2__quantize_q8_avx2(int8_t* q, float* scale, const float* x, int64_t n) {
    const int B = gpt2__q8_block_values;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t b = 0; b < n / B; b++) {
        __m256 v[4], m = _mm256_setzero_ps();
        for (int i = 0; i < 4; i++) {
            v[i] = _mm256_loadu_ps(x + B * b + 8 * i);
            m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[i]));
        }
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        const float amax = _mm_cvtss_f32(m4);
        const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
        scale[b] = amax / 127.0f;
        const __m256 vi = _mm256_set1_ps(inv);
        __m256i i32[4];
        for (int i = 0; i < 4; i++) i32[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], vi));
        /* pack 32-bit -> 16 -> 8 (saturating) and undo the lane interleaving of the packs */
        const __m256i i16a = _mm256_packs_epi32(i32[0], i32[1]), i16b = _mm256_packs_epi32(i32[2], i32[3]);
        const __m256i i8 = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(i16a, i16b), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((__m256i*)(q + B * b), i8);
    }
}

/* e^x as contract.h describes it (gpt2__exp_poly), 8 lanes; 2^n built in the exponent bits. */
GPT2__AVX2 static inline __m256 gpt2__exp_avx2(__m256 x) {
    x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(gpt2__exp_max)), _mm256_set1_ps(gpt2__exp_min));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(gpt2__log2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(gpt2__ln2_hi), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(gpt2__ln2_lo), r);
    __m256 p = _mm256_set1_ps(gpt2__exp_poly[0]);
    GPT2__UNROLL
    for (size_t i = 1; i < std::size(gpt2__exp_poly); i++) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(gpt2__exp_poly[i]));
    p = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

GPT2__AVX2 static inline __m256 gpt2__gelu8_avx2(__m256 v, bool tanh_form) {
    __m256 g;
    if (tanh_form) {
        const __m256 u = _mm256_mul_ps(_mm256_set1_ps(gpt2__sqrt_2_over_pi), _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(gpt2__gelu_cubic), v), _mm256_mul_ps(v, v), v));
        const __m256 e = gpt2__exp_avx2(_mm256_add_ps(u, u));
        g = _mm256_sub_ps(_mm256_set1_ps(1.0f), _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, _mm256_set1_ps(1.0f))));
    } else {
        const __m256 sign = _mm256_and_ps(v, _mm256_set1_ps(-0.0f));
        const __m256 z = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), _mm256_mul_ps(v, _mm256_set1_ps(gpt2__sqrt_half)));
        const __m256 t = _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_fmadd_ps(_mm256_set1_ps(gpt2__erf_p), z, _mm256_set1_ps(1.0f)));
        __m256 p = _mm256_set1_ps(gpt2__erf_poly[0]);
        GPT2__UNROLL
        for (size_t i = 1; i < std::size(gpt2__erf_poly); i++) p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(gpt2__erf_poly[i]));
        p = _mm256_mul_ps(p, t);
        const __m256 e = gpt2__exp_avx2(_mm256_sub_ps(_mm256_setzero_ps(), _mm256_mul_ps(z, z)));
        g = _mm256_or_ps(_mm256_fnmadd_ps(p, e, _mm256_set1_ps(1.0f)), sign); /* erf is odd */
    }
    const __m256 half_v = _mm256_mul_ps(_mm256_set1_ps(0.5f), v);
    return _mm256_fmadd_ps(half_v, g, half_v);
}

/* F16C's conversion rounds to nearest even, as gpt2__f32_to_f16. */
GPT2__AVX2 static void gpt2__to_f16_avx2(uint16_t* dst, const float* x, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm_storeu_si128((__m128i*)(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    gpt2__to_f16_scalar(dst + i, x + i, n - i);
}

/* gpt2__gelu_avx512 in 8 lanes; the tail goes through a padded copy, so every value takes the
   same arithmetic. */
GPT2__AVX2 static void gpt2__gelu_avx2(float* x, size_t n, bool tanh_form) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, gpt2__gelu8_avx2(_mm256_loadu_ps(x + i), tanh_form));
    if (i < n) {
        float tail[8] = {0};
        std::memcpy(tail, x + i, (n - i) * 4);
        _mm256_storeu_ps(tail, gpt2__gelu8_avx2(_mm256_loadu_ps(tail), tanh_form));
        std::memcpy(x + i, tail, (n - i) * 4);
    }
}

/* gpt2__layer_norm with the sums' 8 chains in two vectors of 4 doubles, in the same order, and
   the same arithmetic per value (no fused multiply-adds): the scalar results bit for bit where
   the scalar code is not contracted into FMAs. */
GPT2__AVX2 static void gpt2__layer_norm_avx2(float* out, const float* x, const float* weight, const float* bias, int n, float eps) {
    const int n8 = n / 8 * 8;
    alignas(32) double chain[8];
    __m256d lo = _mm256_setzero_pd(), hi = lo;
    for (int i = 0; i < n8; i += 8) {
        lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm_loadu_ps(x + i)));
        hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm_loadu_ps(x + i + 4)));
    }
    _mm256_store_pd(chain, lo);
    _mm256_store_pd(chain + 4, hi);
    for (int i = n8; i < n; i++) chain[i % 8] += (double)x[i];
    const double mean = (((chain[0] + chain[1]) + (chain[2] + chain[3])) + ((chain[4] + chain[5]) + (chain[6] + chain[7]))) / n;
    const __m256d m = _mm256_set1_pd(mean);
    lo = hi = _mm256_setzero_pd();
    for (int i = 0; i < n8; i += 8) {
        const __m256d a = _mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(x + i)), m), b = _mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(x + i + 4)), m);
        lo = _mm256_add_pd(lo, _mm256_mul_pd(a, a));
        hi = _mm256_add_pd(hi, _mm256_mul_pd(b, b));
    }
    _mm256_store_pd(chain, lo);
    _mm256_store_pd(chain + 4, hi);
    for (int i = n8; i < n; i++) chain[i % 8] += (x[i] - mean) * (x[i] - mean);
    const double var = (((chain[0] + chain[1]) + (chain[2] + chain[3])) + ((chain[4] + chain[5]) + (chain[6] + chain[7]))) / n;
    const float inv_std = (float)(1.0 / std::sqrt(var + eps));
    const __m256 s = _mm256_set1_ps(inv_std);
    for (int i = 0; i < n8; i += 8) {
        const __m256 centered = _mm256_set_m128(_mm256_cvtpd_ps(_mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(x + i + 4)), m)),
                                                _mm256_cvtpd_ps(_mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(x + i)), m)));
        const __m256 scaled = _mm256_mul_ps(_mm256_mul_ps(centered, s), _mm256_loadu_ps(weight + i));
        _mm256_storeu_ps(out + i, _mm256_add_ps(scaled, bias ? _mm256_loadu_ps(bias + i) : _mm256_setzero_ps()));
    }
    for (int i = n8; i < n; i++) out[i] = (float)(x[i] - mean) * inv_std * weight[i] + (bias ? bias[i] : 0.0f);
}

GPT2__AVX2 static inline __m256 gpt2__kv8_avx2(const float* p) { return _mm256_loadu_ps(p); }
GPT2__AVX2 static inline __m256 gpt2__kv8_avx2(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)p)); }

/* scores[j] = exp(scores[j] - max) in place, for j < n; *max_score and *sum receive the max and
   the sum of the exponentials (the softmax's two statistics). */
GPT2__AVX2 static void gpt2__exp_scores_avx2(float* scores, int n, float* max_score, float* sum) {
    float m = -INFINITY;
    for (int j = 0; j < n; j++) m = std::max(m, scores[j]);
    const __m256 vmax = _mm256_set1_ps(m);
    __m256 vsum = _mm256_setzero_ps();
    int j = 0;
    for (; j + 8 <= n; j += 8) {
        const __m256 e = gpt2__exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(scores + j), vmax));
        _mm256_storeu_ps(scores + j, e);
        vsum = _mm256_add_ps(vsum, e);
    }
    float total = gpt2__hsum_avx2(vsum);
    if (j < n) {
        float tail[8];
        for (int i = 0; i < 8; i++) tail[i] = j + i < n ? scores[j + i] - m : -INFINITY;
        _mm256_storeu_ps(tail, gpt2__exp_avx2(_mm256_loadu_ps(tail)));
        for (int i = 0; j + i < n; i++) {
            scores[j + i] = tail[i];
            total += tail[i];
        }
    }
    *max_score = m;
    *sum = total;
}

/* Dimensions of the queries transposed at a time, and keys whose scores are summed at a time, in
   the x86 sets' prefill attention. */
static const int gpt2__attend_dims = 128, gpt2__attend_keys = 8;

/* A key's values from p (floats, or an f16 cache's) into dst as floats, n of them. */
template <class KV>
GPT2__AVX2 static inline void gpt2__kv_to_float_avx2(float* dst, const KV* p, int n) {
    int d = 0;
    for (; d + 8 <= n; d += 8) _mm256_storeu_ps(dst + d, gpt2__kv8_avx2(p + d));
    for (; d < n; d++) dst[d] = gpt2__load_kv(p, (size_t)d);
}

/* gpt2__attend_scalar's block of queries, 8 at a time, a query in each vector lane (lanes past
   n_queries idle), as the AVX-512 set's gpt2__attend_avx512 (which says why) with 8 lanes: the
   scores of 8 keys from the transposed queries and each key's values broadcast; the softmax lane
   by lane; the values weighted for 4 queries at a time, 16 dimensions a pass, those past a
   multiple of 8 in scalar. */
template <class KV>
GPT2__AVX2 static void gpt2__attend_avx2(float* out, size_t out_stride, const float* q, size_t q_stride, gpt2__kv_rows<KV> k, gpt2__kv_rows<KV> v, int n_keys, int n_queries, int head_dim, float* scores) {
    constexpr int DC = gpt2__attend_dims, KB = gpt2__attend_keys;
    const int D = head_dim, d8 = D / 8 * 8;
    alignas(32) float qt[DC * 8]; /* qt[8 d + i]: query i's dimension d0 + d */
    alignas(32) float kf[sizeof(KV) == 2 ? KB * DC : 1];
    for (int h = 0; h < n_queries; h += 8) {
        const int nq = std::min(8, n_queries - h), first = n_keys + h, keys = first + nq - 1; /* the keys of the half's first and last query */
        const float* qh = q + (size_t)h * q_stride;
        for (int d0 = 0; d0 < D; d0 += DC) {
            const int dn = std::min(DC, D - d0);
            for (int c = 0; c < dn; c += 8) {
                __m256 rows[8];
                GPT2__UNROLL
                for (int i = 0; i < 8; i++) {
                    alignas(32) float row[8] = {0, 0, 0, 0, 0, 0, 0, 0};
                    if (i < nq) std::memcpy(row, qh + (size_t)i * q_stride + d0 + c, (size_t)std::min(8, dn - c) * 4);
                    rows[i] = _mm256_load_ps(row);
                }
                gpt2__transpose8_avx2(rows);
                GPT2__UNROLL
                for (int d = 0; d < 8; d++)
                    if (c + d < dn) _mm256_store_ps(qt + 8 * (c + d), rows[d]);
            }
            for (int j0 = 0; j0 < keys; j0 += KB) {
                const float* kr[KB];
                for (int r = 0; r < KB; r++) {
                    const KV* key = k.row(std::min(j0 + r, keys - 1)) + d0;
                    if constexpr (sizeof(KV) == 4) {
                        kr[r] = key;
                    } else {
                        gpt2__kv_to_float_avx2(kf + r * DC, key, dn);
                        kr[r] = kf + r * DC;
                    }
                }
                __m256 acc[KB];
                GPT2__UNROLL
                for (int r = 0; r < KB; r++) acc[r] = _mm256_setzero_ps();
                for (int d = 0; d < dn; d++) {
                    const __m256 qv = _mm256_load_ps(qt + 8 * d);
                    GPT2__UNROLL
                    for (int r = 0; r < KB; r++) acc[r] = _mm256_fmadd_ps(qv, _mm256_broadcast_ss(kr[r] + d), acc[r]);
                }
                GPT2__UNROLL /* a fixed count, so the accumulators stay in registers */
                for (int r = 0; r < KB; r++) {
                    float* row = scores + 8 * (size_t)(j0 + r);
                    if (j0 + r < keys) _mm256_storeu_ps(row, d0 == 0 ? acc[r] : _mm256_add_ps(_mm256_loadu_ps(row), acc[r]));
                }
            }
        }
        /* the softmax, lane by lane: query h + i sees keys j < first + i */
        const __m256 scale = _mm256_set1_ps(1.0f / std::sqrt((float)D));
        const __m256i seen = _mm256_add_epi32(_mm256_set1_epi32(first), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        __m256 vmax = _mm256_set1_ps(-INFINITY), vsum = _mm256_setzero_ps();
        for (int j = 0; j < keys; j++) {
            const __m256 s = _mm256_mul_ps(_mm256_loadu_ps(scores + 8 * (size_t)j), scale);
            _mm256_storeu_ps(scores + 8 * (size_t)j, s);
            vmax = _mm256_blendv_ps(vmax, _mm256_max_ps(vmax, s), _mm256_castsi256_ps(_mm256_cmpgt_epi32(seen, _mm256_set1_epi32(j))));
        }
        for (int j = 0; j < keys; j++) {
            const __m256 m = _mm256_castsi256_ps(_mm256_cmpgt_epi32(seen, _mm256_set1_epi32(j)));
            const __m256 e = _mm256_and_ps(m, gpt2__exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(scores + 8 * (size_t)j), vmax)));
            _mm256_storeu_ps(scores + 8 * (size_t)j, e);
            vsum = _mm256_add_ps(vsum, e);
        }
        alignas(32) float inv_sum[8];
        _mm256_store_ps(inv_sum, _mm256_div_ps(_mm256_set1_ps(1.0f), vsum));
        for (int g = 0; g < nq; g += 4) {
            const int g_keys = first + std::min(g + 3, nq - 1); /* the group's last query's keys */
            float* o = out + (size_t)(h + g) * out_stride;
            for (int d0 = 0; d0 < d8; d0 += 16) {
                const bool both = d0 + 16 <= d8;
                __m256 acc[4][2]; /* query g + i, dimensions d0 + 8c .. */
                GPT2__UNROLL
                for (int i = 0; i < 4; i++) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
                for (int j = 0; j < g_keys; j++) {
                    const KV* vj = v.row(j) + d0;
                    const __m256 v0 = gpt2__kv8_avx2(vj), v1 = both ? gpt2__kv8_avx2(vj + 8) : _mm256_setzero_ps();
                    const float* p = scores + 8 * (size_t)j + g;
                    GPT2__UNROLL
                    for (int i = 0; i < 4; i++) {
                        const __m256 pi = _mm256_broadcast_ss(p + i);
                        acc[i][0] = _mm256_fmadd_ps(pi, v0, acc[i][0]);
                        acc[i][1] = _mm256_fmadd_ps(pi, v1, acc[i][1]);
                    }
                }
                GPT2__UNROLL /* a fixed count, so the accumulators stay in registers */
                for (int i = 0; i < 4; i++)
                    if (g + i < nq) {
                        const __m256 inv = _mm256_broadcast_ss(inv_sum + g + i);
                        _mm256_storeu_ps(o + (size_t)i * out_stride + d0, _mm256_mul_ps(acc[i][0], inv));
                        if (both) _mm256_storeu_ps(o + (size_t)i * out_stride + d0 + 8, _mm256_mul_ps(acc[i][1], inv));
                    }
            }
            for (int i = 0; i < 4 && g + i < nq; i++) /* the last dimensions */
                for (int d = d8; d < D; d++) {
                    float sum = 0.0f;
                    for (int j = 0; j < g_keys; j++) sum += scores[8 * (size_t)j + g + i] * gpt2__load_kv(v.row(j), (size_t)d);
                    o[(size_t)i * out_stride + d] = sum * inv_sum[g + i];
                }
        }
    }
}

/* Decode attention takes the keys in blocks of this many: per head, a block's dot products
   share each load of the query (one reduction of 8), and its values are added to the head's
   outputs held in registers; meanwhile the next block of the cache is prefetched. */
static const int gpt2__attend_block_keys = 8;
static_assert(gpt2__kv_row_group % gpt2__attend_block_keys == 0, "a block of keys lies in one of the KV cache's blocks");

/* Prefetches share h of H of the rows of the block after the one from key j0 of rows [first,
   first + n_keys) of `cache` (rows one after another: `first` is a multiple of gpt2__kv_row_group,
   contract.h), into L2. A block's rows are read head by head, across
   its rows, an order the hardware prefetcher does not follow from DRAM: each head's turn fetches
   a twelfth of the next block. Into L1 the same prefetches ran 1.6x slower: a core tracks fewer
   misses to L1 than to L2 (docs/PERFORMANCE.md, Kernel notes). Always inlined, as
   gpt2__prefetch_row_ahead is, or GCC deletes the calls. */
template <class KV>
GPT2__ALWAYS_INLINE static void gpt2__prefetch_next_block(gpt2__kv_rows<KV> cache, int first, int j0, int n_keys, int h, int H) {
    const int next = j0 + gpt2__attend_block_keys, end = std::min(next + gpt2__attend_block_keys, n_keys);
    if (next >= end) return;
    const char* from = (const char*)cache.row(first + next);
    const size_t lines = ((size_t)(end - next) * cache.stride * sizeof(KV) + 63) / 64;
    for (size_t l = lines * h / H, last = lines * (h + 1) / H; l < last; l++) _mm_prefetch(from + 64 * l, _MM_HINT_T1);
}

/* gpt2__attend_rows_scalar in blocks of gpt2__attend_block_keys keys, each head's scores and
   then its values key by key within a block, so every output's sum runs in key order, as one
   stream of the cache would; the dimensions past a multiple of 8 in scalar. The AVX-512 set uses
   this kernel too: it streams the cache faster than 512-bit loads (docs/PERFORMANCE.md). */
template <class KV>
GPT2__AVX2 static void gpt2__attend_rows_avx2(float* out, float* stats, const float* q, gpt2__kv_rows<KV> k, gpt2__kv_rows<KV> v, int first, int n_keys, int n_head,
                                             int head_dim, float* scratch) {
    constexpr int B = gpt2__attend_block_keys;
    const int H = n_head, D = head_dim, d8 = D / 8 * 8;
    const size_t row = (size_t)H * D, stride = k.stride;
    const float scale = 1.0f / std::sqrt((float)D);
    float* probs = scratch; /* head h's scores, then probabilities, at probs + h * n_keys */
    for (int j0 = 0; j0 < n_keys; j0 += B) {
        const int n = std::min(B, n_keys - j0);
        const KV* block = k.row(first + j0); /* its n rows, one after another */
        for (int h = 0; h < H; h++) {
            if (j0 + B < n_keys) gpt2__prefetch_next_block(k, first, j0, n_keys, h, H);
            else gpt2__prefetch_next_block(v, first, -B, n_keys, h, H); /* the last block of keys fetches the first of values */
            const float* qh = q + (size_t)h * D;
            const KV* key[B]; /* past the last key, copies of it (results unused) */
            for (int i = 0; i < B; i++) key[i] = block + (size_t)std::min(i, n - 1) * stride + (size_t)h * D;
            __m256 acc[B];
            GPT2__UNROLL
            for (int i = 0; i < B; i++) acc[i] = _mm256_setzero_ps();
            for (int d = 0; d < d8; d += 8) {
                const __m256 qv = _mm256_loadu_ps(qh + d);
                GPT2__UNROLL
                for (int i = 0; i < B; i++) acc[i] = _mm256_fmadd_ps(qv, gpt2__kv8_avx2(key[i] + d), acc[i]);
            }
            float s[B];
            _mm256_storeu_ps(s, gpt2__hsum8_avx2(acc));
            for (int i = 0; i < n; i++) {
                for (int d = d8; d < D; d++) s[i] += qh[d] * gpt2__load_kv(key[i], (size_t)d);
                probs[(size_t)h * n_keys + j0 + i] = s[i] * scale;
            }
        }
    }
    for (int h = 0; h < H; h++) { /* softmax of each head's scores, in place */
        float* p = probs + (size_t)h * n_keys;
        gpt2__exp_scores_avx2(p, n_keys, &stats[2 * h], &stats[2 * h + 1]);
        const float inv_sum = 1.0f / stats[2 * h + 1];
        for (int j = 0; j < n_keys; j++) p[j] *= inv_sum;
    }
    for (size_t i = 0; i < row; i++) out[i] = 0.0f;
    for (int j0 = 0; j0 < n_keys; j0 += B) {
        const int n = std::min(B, n_keys - j0);
        const KV* block = v.row(first + j0);
        for (int h = 0; h < H; h++) {
            gpt2__prefetch_next_block(v, first, j0, n_keys, h, H);
            const float* p = probs + (size_t)h * n_keys + j0;
            const KV* vh = block + (size_t)h * D;
            float* oh = out + (size_t)h * D;
            int d = 0;
            for (; d + 32 <= d8; d += 32) { /* 32 dimensions in registers through the block */
                __m256 acc[4];
                GPT2__UNROLL
                for (int c = 0; c < 4; c++) acc[c] = _mm256_loadu_ps(oh + d + 8 * c);
                for (int i = 0; i < n; i++) {
                    const __m256 pi = _mm256_set1_ps(p[i]);
                    GPT2__UNROLL
                    for (int c = 0; c < 4; c++) acc[c] = _mm256_fmadd_ps(pi, gpt2__kv8_avx2(vh + (size_t)i * stride + d + 8 * c), acc[c]);
                }
                GPT2__UNROLL
                for (int c = 0; c < 4; c++) _mm256_storeu_ps(oh + d + 8 * c, acc[c]);
            }
            for (; d < d8; d += 8) {
                __m256 acc = _mm256_loadu_ps(oh + d);
                for (int i = 0; i < n; i++) acc = _mm256_fmadd_ps(_mm256_set1_ps(p[i]), gpt2__kv8_avx2(vh + (size_t)i * stride + d), acc);
                _mm256_storeu_ps(oh + d, acc);
            }
            for (; d < D; d++)
                for (int i = 0; i < n; i++) oh[d] += p[i] * gpt2__load_kv(vh + (size_t)i * stride, (size_t)d);
        }
    }
}

#endif /* GPT2__X86 */

#endif /* GPT2__PART_CPU_KERNELS_AVX2_H */
