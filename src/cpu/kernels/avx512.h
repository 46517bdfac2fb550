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

/* 16 rows of 16 floats transposed in place: afterwards v[c] lane i is row i's value c. */
GPT2__AVX512 GPT2__ALWAYS_INLINE static void gpt2__transpose16_avx512(__m512* v) {
    __m512 t[16];
    GPT2__UNROLL
    for (int i = 0; i < 16; i += 2) { /* rows i and i + 1 interleaved */
        t[i] = _mm512_unpacklo_ps(v[i], v[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(v[i], v[i + 1]);
    }
    GPT2__UNROLL
    for (int i = 0; i < 16; i += 4) { /* each 128-bit lane: one column of rows i.. i + 3 */
        v[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
        v[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
        v[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
        v[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
    }
    GPT2__UNROLL
    for (int h = 0; h < 16; h += 8) /* the 128-bit lanes gathered, in two steps */
        GPT2__UNROLL
        for (int c = 0; c < 4; c++) {
            t[h + c] = _mm512_shuffle_f32x4(v[h + c], v[h + 4 + c], 0x88);
            t[h + 4 + c] = _mm512_shuffle_f32x4(v[h + c], v[h + 4 + c], 0xdd);
        }
    GPT2__UNROLL
    for (int c = 0; c < 8; c++) {
        v[c] = _mm512_shuffle_f32x4(t[c], t[8 + c], 0x88);
        v[8 + c] = _mm512_shuffle_f32x4(t[c], t[8 + c], 0xdd);
    }
}

/* gpt2__attend_scalar's block of queries at once, a query in each vector lane (lanes past
   n_queries idle): the queries transposed once (16 dimensions at a time), so a key's scores for
   all 16 are sums of FMAs of the queries' vector of a dimension with the key's value there,
   broadcast, 8 keys at a time, with no reduction across lanes; `scores` keeps a vector per key
   (its 16 queries), so the causal mask, the maxima, exponentials and sums of the softmax are
   lane by lane too. The values are then weighted for 4 queries at a time, each key's values
   loaded once for the 4 (64 dimensions a pass), each query's weights broadcast from its lane;
   every output is divided by its query's sum at the end. A query's outputs do not depend on the
   others of its block. */
template <class KV>
GPT2__AVX512 static void gpt2__attend_avx512(float* out, size_t out_stride, const float* q, size_t q_stride, gpt2__kv_rows<KV> k, gpt2__kv_rows<KV> v, int n_keys, int n_queries, int head_dim, float* scores) {
    static_assert(gpt2__query_block == 16, "a query per lane");
    constexpr int DC = gpt2__attend_dims, KB = gpt2__attend_keys;
    const int D = head_dim, keys = n_keys + n_queries - 1; /* the last query's */
    alignas(64) float qt[DC * 16];                         /* qt[16 d + i]: query i's dimension d0 + d */
    alignas(64) float kf[sizeof(KV) == 2 ? KB * DC : 1];   /* an f16 cache's keys as floats */
    for (int d0 = 0; d0 < D; d0 += DC) {
        const int dn = std::min(DC, D - d0);
        for (int c = 0; c < dn; c += 16) {
            const __mmask16 m = gpt2__mask16(c, dn);
            __m512 rows[16];
            GPT2__UNROLL
            for (int i = 0; i < 16; i++) rows[i] = i < n_queries ? _mm512_maskz_loadu_ps(m, q + (size_t)i * q_stride + d0 + c) : _mm512_setzero_ps();
            gpt2__transpose16_avx512(rows);
            GPT2__UNROLL
            for (int d = 0; d < 16; d++)
                if (c + d < dn) _mm512_store_ps(qt + 16 * (c + d), rows[d]);
        }
        for (int j0 = 0; j0 < keys; j0 += KB) {
            const float* kr[KB];
            for (int r = 0; r < KB; r++) {
                const KV* key = k.row(std::min(j0 + r, keys - 1)) + d0;
                if constexpr (sizeof(KV) == 4) {
                    kr[r] = key;
                } else {
                    for (int c = 0; c < dn; c += 16) _mm512_storeu_ps(kf + r * DC + c, gpt2__kv16_avx512(key + c, gpt2__mask16(c, dn)));
                    kr[r] = kf + r * DC;
                }
            }
            __m512 acc[KB];
            GPT2__UNROLL
            for (int r = 0; r < KB; r++) acc[r] = _mm512_setzero_ps();
            for (int d = 0; d < dn; d++) {
                const __m512 qv = _mm512_load_ps(qt + 16 * d);
                GPT2__UNROLL
                for (int r = 0; r < KB; r++) acc[r] = _mm512_fmadd_ps(qv, _mm512_set1_ps(kr[r][d]), acc[r]);
            }
            GPT2__UNROLL /* a fixed count, so the accumulators stay in registers */
            for (int r = 0; r < KB; r++) {
                float* row = scores + 16 * (size_t)(j0 + r);
                if (j0 + r < keys) _mm512_storeu_ps(row, d0 == 0 ? acc[r] : _mm512_add_ps(_mm512_loadu_ps(row), acc[r]));
            }
        }
    }
    /* the softmax, lane by lane: query i sees keys j < n_keys + i */
    const __m512 scale = _mm512_set1_ps(1.0f / std::sqrt((float)D));
    const __m512i seen = _mm512_add_epi32(_mm512_set1_epi32(n_keys), _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
    __m512 vmax = _mm512_set1_ps(-INFINITY), vsum = _mm512_setzero_ps();
    for (int j = 0; j < keys; j++) {
        const __m512 s = _mm512_mul_ps(_mm512_loadu_ps(scores + 16 * (size_t)j), scale);
        _mm512_storeu_ps(scores + 16 * (size_t)j, s);
        vmax = _mm512_mask_max_ps(vmax, _mm512_cmpgt_epi32_mask(seen, _mm512_set1_epi32(j)), vmax, s);
    }
    for (int j = 0; j < keys; j++) {
        const __mmask16 m = _mm512_cmpgt_epi32_mask(seen, _mm512_set1_epi32(j));
        const __m512 e = _mm512_maskz_mov_ps(m, gpt2__exp_avx512(_mm512_sub_ps(_mm512_loadu_ps(scores + 16 * (size_t)j), vmax)));
        _mm512_storeu_ps(scores + 16 * (size_t)j, e);
        vsum = _mm512_add_ps(vsum, e);
    }
    alignas(64) float inv_sum[16];
    _mm512_store_ps(inv_sum, _mm512_div_ps(_mm512_set1_ps(1.0f), vsum));
    for (int g = 0; g < n_queries; g += 4) {
        const int last = std::min(g + 3, n_queries - 1), g_keys = n_keys + last; /* the group's last query's keys */
        for (int d0 = 0; d0 < D; d0 += 64) {
            __mmask16 m[4];
            __m512 acc[4][4]; /* query g + i, dimensions d0 + 16c .. */
            GPT2__UNROLL
            for (int c = 0; c < 4; c++) {
                m[c] = d0 + 16 * c < D ? gpt2__mask16(d0 + 16 * c, D) : (__mmask16)0;
                GPT2__UNROLL
                for (int i = 0; i < 4; i++) acc[i][c] = _mm512_setzero_ps();
            }
            for (int j = 0; j < g_keys; j++) {
                const KV* vj = v.row(j) + d0;
                const float* p = scores + 16 * (size_t)j + g;
                GPT2__UNROLL
                for (int c = 0; c < 4; c++) {
                    const __m512 vv = gpt2__kv16_avx512(vj + 16 * c, m[c]);
                    GPT2__UNROLL
                    for (int i = 0; i < 4; i++) acc[i][c] = _mm512_fmadd_ps(_mm512_set1_ps(p[i]), vv, acc[i][c]);
                }
            }
            GPT2__UNROLL /* a fixed count, so the accumulators stay in registers */
            for (int i = 0; i < 4; i++)
                GPT2__UNROLL
                for (int c = 0; c < 4; c++)
                    if (g + i < n_queries) _mm512_mask_storeu_ps(out + (size_t)(g + i) * out_stride + d0 + 16 * c, m[c], _mm512_mul_ps(acc[i][c], _mm512_set1_ps(inv_sum[g + i])));
        }
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
