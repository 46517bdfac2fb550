#ifndef GPT2__PART_CPU_KERNELS_AVX512_H
#define GPT2__PART_CPU_KERNELS_AVX512_H
#include "avx512_panels.h"

/* The AVX-512 set, part 4 of 4, its entry: exp and GELU, prefill attention, and the matmul that
   runs the strategy it is handed (parts 1-3: avx512_rows.h, avx512_float_tiles.h,
   avx512_panels.h). Decode attention and float matrix rows use the AVX2 kernels (avx2.h). */

#if defined(GPT2__X86)

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
GPT2__AVX512 static void gpt2__attend_avx512(float* out, size_t out_stride, const float* q, size_t q_stride, gpt2__kv_rows<KV> k, gpt2__kv_rows<KV> v, int n_keys,
                                              int n_queries, int head_dim, float* scores) {
    static_assert(gpt2__query_block == 4, "a block's 4 queries and 4 keys fill one 16-way reduction");
    const int D = head_dim, keys = n_keys + n_queries - 1; /* the last query's */
    const size_t ld = ((size_t)keys + 3) / 4 * 4;          /* a query's row of scores */
    const __m512 scale = _mm512_set1_ps(1.0f / std::sqrt((float)D));
    const __m512i by_query = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    const float* qi[gpt2__query_block];
    gpt2__block_rows(qi, q, q_stride, n_queries);
    for (int j = 0; j < keys; j += 4) {
        const KV* kj[4];
        for (int r = 0; r < 4; r++) kj[r] = k.row(std::min(j + r, keys - 1));
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
            const KV* vj = v.row(j) + d0;
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

/* The set's matmul kernels besides the panels' and lanes' (dispatch.h). Decode streams the
   weights row by row in their own type: float rows with the AVX2 set's 256-bit row kernel
   (gpt2__matmul_streamed_x86), which Zen 4 feeds from DRAM faster than 512-bit loads (it splits
   those in two anyway); q8_0 and q4_0 rows with 512-bit integer dot products, gpt2__decode_rows<TYPE> at a
   time. Prefill multiplies int8 panels (avx512_panels.h) or float panels. */
GPT2__AVX512 static void gpt2__matmul_rows_avx512(const gpt2__matmul_args& a, int64_t o_begin, int64_t o_end, float* panel) {
    (void)panel;
    gpt2__matmul_streamed_x86(a, o_begin, o_end);
}
GPT2__AVX512 static void gpt2__matmul_stream_int8_avx512(const gpt2__matmul_args& a, int64_t o_begin, int64_t o_end, float* panel) {
    if (a.W->type == GPT2_TYPE_Q4_0) return gpt2__matmul_int8_rows_avx512<GPT2_TYPE_Q4_0>(a, o_begin, o_end, (uint8_t*)panel);
    gpt2__matmul_int8_rows_avx512<GPT2_TYPE_Q8_0>(a, o_begin, o_end, (uint8_t*)panel);
}
GPT2__AVX512 static void gpt2__matmul_float_tiles_avx512(const gpt2__matmul_args& a, int64_t o_begin, int64_t o_end, float* panel) {
    gpt2__prefill_x86<gpt2__prefill_avx512>(a, o_begin, o_end, panel);
}

#endif /* GPT2__X86 */

#endif /* GPT2__PART_CPU_KERNELS_AVX512_H */
