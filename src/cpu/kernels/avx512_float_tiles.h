#ifndef GPT2__PART_CPU_KERNELS_AVX512_FLOAT_TILES_H
#define GPT2__PART_CPU_KERNELS_AVX512_FLOAT_TILES_H
#include "avx512_rows.h"

/* The AVX-512 set, part 2 of 4: prefill's float tiles (GPT2__FLOAT_TILES): rows converted to
   float panels, multiplied with tiles of tokens by x86_prefill.h's driver. */

#if defined(GPT2__X86)

/* One row of K weights (f16, bf16, q8_0 or q4_0) to floats, for a prefill panel. */
GPT2__AVX512 static void gpt2__row_to_float_avx512(float* dst, uint32_t type, const uint8_t* row, int64_t K) {
    /* q8_0 and q4_0 prompts multiply int8 panels on this set (gpt2__strategy_for): their float
       panels are converted only when a test asks for them, by the AVX2 code, to the same floats */
    if (gpt2__int8_weights(type)) return gpt2__row_to_float_avx2(dst, type, row, K);
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

#endif /* GPT2__X86 */

#endif /* GPT2__PART_CPU_KERNELS_AVX512_FLOAT_TILES_H */
