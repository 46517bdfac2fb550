#ifndef GPT2__PART_CPU_KERNELS_AVX512_BF16_H
#define GPT2__PART_CPU_KERNELS_AVX512_BF16_H
#include "avx512.h"

/* The AVX-512 set with the bf16 unit (AVX512_BF16, an extra runtime check: dispatch.h): bf16
   weights' products over a prompt's tokens run on vdpbf16ps; everything else is the AVX-512
   set's, a batch's decode rows too (gpt2__matmul_bf16_unit_avx512 says why).

   vdpbf16ps adds the products of 16 pairs of bf16 values into 16 float lanes: 32 multiply-adds
   per instruction where an fp32 FMA does 16. bf16 lanes (avx512.h) hold each row's pairs of
   columns in its 32-bit lane, so a tile multiplies a group of 16 rows by a token's pair,
   broadcast, in one instruction, each output summed in its own lane. Each thread rounds a chunk
   of tokens to bf16 once (to nearest even) and runs the lanes' driver over its rows. The
   activations so lose their low 16 bits, as the weights already have: see docs/PERFORMANCE.md
   for what that costs in accuracy. */

#if defined(GPT2__X86)

template <int V, int N>
GPT2__AVX512_BF16 static void gpt2__tile_bf16_unit_avx512(const gpt2__matmul_args& a, const uint8_t* p, int j, int64_t first_row, int64_t lo, int64_t hi, int t0,
                                                          const gpt2__prefetch_span& ahead) {
    const int64_t pairs = gpt2__lanes_columns(*a.W) / 2;
    const uint8_t* w = p + 64 * j;
    const uint16_t* x[N];
    for (int t = 0; t < N; t++) x[t] = a.x_bf16 + (size_t)(t0 + t) * 2 * (size_t)pairs;
    __m512 acc[V][N];
    GPT2__UNROLL
    for (int v = 0; v < V; v++)
        GPT2__UNROLL
        for (int t = 0; t < N; t++) acc[v][t] = _mm512_setzero_ps();
    const size_t lines_per_pair = gpt2__prefetch_per_step(ahead, pairs);
    for (int64_t i = 0; i < pairs; i++) {
        gpt2__prefetch_step(ahead, lines_per_pair, i);
        __m512bh wv[V];
        GPT2__UNROLL
        for (int v = 0; v < V; v++) wv[v] = (__m512bh)_mm512_loadu_si512(w + gpt2__f16_column_bytes * 2 * (size_t)i + 64 * v);
        GPT2__UNROLL
        for (int t = 0; t < N; t++) {
            int32_t pair;
            std::memcpy(&pair, x[t] + 2 * i, 4);
            const __m512bh xv = (__m512bh)_mm512_set1_epi32(pair);
            GPT2__UNROLL
            for (int v = 0; v < V; v++) acc[v][t] = _mm512_dpbf16_ps(acc[v][t], wv[v], xv);
        }
    }
    GPT2__UNROLL
    for (int v = 0; v < V; v++) gpt2__store_group_avx512<N>(a, first_row + gpt2__lane_rows * v, lo, hi, t0, acc[v]);
}

/* n rows of K floats (x) rounded to bf16, to nearest even, into dst as rows of `width` (K or K +
   1: the pad is zero). */
GPT2__AVX512_BF16 static void gpt2__round_bf16_avx512(uint16_t* dst, const float* x, int n, int64_t K, int64_t width) {
    for (int t = 0; t < n; t++) {
        for (int64_t k = 0; k < K; k += 16) {
            const __mmask16 m = gpt2__mask16(k, K);
            _mm256_mask_storeu_epi16(dst + (size_t)t * width + k, m, (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, x + (size_t)t * K + k)));
        }
        if (width > K) dst[(size_t)t * width + K] = 0;
    }
}

/* bf16 weights' products over a prompt's tokens on the bf16 unit (GPT2__BF16_UNIT; the set's other
   kernels are the AVX-512 set's): per chunk of gpt2__chunk_tokens tokens, the thread rounds them to bf16 in
   `panel` once, then runs the lanes' driver over its rows. A token's sums do not depend on its
   chunk or tile. A batch's decode rows stay on the fp32 FMAs: they must give what each session
   gets alone, where a single token streams with float activations, to rounding
   (tests/test_batch.cpp: 1e-4; on the bf16 unit they differ by 0.05). */
GPT2__AVX512_BF16 static void gpt2__matmul_bf16_unit_avx512(const gpt2__matmul_args& a, int64_t o_begin, int64_t o_end, float* panel) {
    const int64_t K = a.W->cols, width = gpt2__lanes_columns(*a.W);
    for (int t0 = 0; t0 < a.T; t0 += gpt2__chunk_tokens) {
        gpt2__matmul_args chunk = a;
        chunk.T = std::min(gpt2__chunk_tokens, a.T - t0);
        chunk.x = a.x + (size_t)t0 * K;
        chunk.y = a.y + (size_t)t0 * a.W->rows;
        gpt2__round_bf16_avx512((uint16_t*)panel, chunk.x, chunk.T, K, width);
        chunk.x_bf16 = (const uint16_t*)panel;
        gpt2__matmul_lanes_avx512(chunk, o_begin, o_end, panel);
    }
}

#endif /* GPT2__X86 */

#endif /* GPT2__PART_CPU_KERNELS_AVX512_BF16_H */
