/* The AVX-512 set with the bf16 unit (AVX512_BF16, an extra runtime check: dispatch.h): bf16
   weights' products over a prompt's tokens run on vdpbf16ps; everything else is the AVX-512
   set's, a batch's decode rows too (gpt2__matmul_avx512_bf16 says why).

   vdpbf16ps adds the products of 16 pairs of bf16 values into 16 float lanes: 32 multiply-adds
   per instruction where an fp32 FMA does 16. A pair is two consecutive values of a row, as a
   bf16 row lies in memory, so the weights need no panel: the tiles read them in place. Each
   thread rounds a chunk of tokens to bf16 once (to nearest even) and multiplies it with the
   shared driver's tiles of 4 rows x 4 tokens. The activations so lose their low 16 bits, as the
   weights already have: see docs/PERFORMANCE.md for what that costs in accuracy. Zen 5, one
   thread, 3072 x 768 times 64 tokens: 141-145 GMAC/s, where the float panels give 97. */

#if defined(GPT2__X86)

/* out[t * gpt2__tile_rows + r] += w_r . x_t for an R x N tile of bf16 rows: R weight rows (ldw
   apart) and N tokens (ldx apart), K values each. The last values go masked after the loop, as
   in gpt2__tile_avx512: with masked loads (or a shared step function) in the loop, GCC 12
   stores the 16 sums to memory at every step, and the tile runs at half speed. */
template <int R, int N>
GPT2__AVX512_BF16 static void gpt2__tile_bf16_avx512(float* out, const uint16_t* w, size_t ldw, const uint16_t* x, size_t ldx, int64_t K) {
    static_assert(R * N <= 16, "one tile is reduced by one 16-way sum");
    __m512 acc[16];
    GPT2__UNROLL
    for (int i = 0; i < 16; i++) acc[i] = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 32 <= K; k += 32) {
        __m512bh xv[N];
        GPT2__UNROLL
        for (int t = 0; t < N; t++) xv[t] = (__m512bh)_mm512_loadu_si512(x + t * ldx + k);
        GPT2__UNROLL
        for (int r = 0; r < R; r++) {
            const __m512bh wv = (__m512bh)_mm512_loadu_si512(w + r * ldw + k);
            GPT2__UNROLL
            for (int t = 0; t < N; t++) acc[t * gpt2__tile_rows + r] = _mm512_dpbf16_ps(acc[t * gpt2__tile_rows + r], wv, xv[t]);
        }
    }
    if (k < K) {
        const __mmask32 m = (__mmask32)((1u << (K - k)) - 1);
        __m512bh xv[N];
        GPT2__UNROLL
        for (int t = 0; t < N; t++) xv[t] = (__m512bh)_mm512_maskz_loadu_epi16(m, x + t * ldx + k);
        GPT2__UNROLL
        for (int r = 0; r < R; r++) {
            const __m512bh wv = (__m512bh)_mm512_maskz_loadu_epi16(m, w + r * ldw + k);
            GPT2__UNROLL
            for (int t = 0; t < N; t++) acc[t * gpt2__tile_rows + r] = _mm512_dpbf16_ps(acc[t * gpt2__tile_rows + r], wv, xv[t]);
        }
    }
    _mm512_storeu_ps(out, _mm512_add_ps(_mm512_loadu_ps(out), gpt2__hsum16_avx512(acc)));
}

/* The panel of gpt2__prefill_x86 for bf16 rows: the rows in place, and the chunk's tokens
   rounded to bf16 (gpt2__matmul_avx512_bf16), K apart from the chunk's first. */
struct gpt2__prefill_bf16_avx512 {
    static constexpr int NT = 4;
    static constexpr int64_t k_align = 32; /* one vdpbf16ps */
    struct Panel {
        const uint16_t* w;
        size_t ldw;
        const uint16_t* x;
    };
    static Panel panel(const gpt2__matmul_args& a, int64_t o, int, float* scratch) {
        const gpt2__weight* W = a.W;
        return {(const uint16_t*)(W->data + (size_t)o * W->row_bytes), W->row_bytes / 2, (const uint16_t*)scratch};
    }
    template <int R, int N>
    static void tile(float* out, const Panel& w, const gpt2__matmul_args& a, int t, int64_t k0, int64_t kn) {
        const size_t K = (size_t)a.W->cols;
        gpt2__tile_bf16_avx512<R, N>(out, w.w + k0, w.ldw, w.x + t * K + k0, K, kn);
    }
};

/* n rows of K floats (x) rounded to bf16, to nearest even, into dst. */
GPT2__AVX512_BF16 static void gpt2__round_bf16_avx512(uint16_t* dst, const float* x, int n, int64_t K) {
    for (size_t i = 0, end = (size_t)n * K; i < end; i += 16) {
        const __mmask16 m = gpt2__mask16((int64_t)i, (int64_t)end);
        _mm256_mask_storeu_epi16(dst + i, m, (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, x + i)));
    }
}

/* bf16 weights' products over a prompt's tokens on the bf16 unit, the rest as
   gpt2__matmul_avx512: per chunk of gpt2__chunk_tokens tokens, the thread rounds them to bf16 in
   `panel` once, then runs the driver over its rows. A token's sums do not depend on its chunk or
   tile. A batch's decode rows keep float panels: they must give what each session gets alone,
   where a single token streams with float activations, to rounding (tests/test_batch.cpp: 1e-4;
   on the bf16 unit they differ by 0.05). */
GPT2__AVX512_BF16 static void gpt2__matmul_avx512_bf16(const gpt2__matmul_args& a, int64_t o_begin, int64_t o_end, float* panel) {
    if (a.W->type != GPT2_TYPE_BF16 || a.decode_rows || gpt2__streams_rows(a)) return gpt2__matmul_avx512(a, o_begin, o_end, panel);
    const int64_t K = a.W->cols;
    for (int t0 = 0; t0 < a.T; t0 += gpt2__chunk_tokens) {
        gpt2__matmul_args chunk = a;
        chunk.T = std::min(gpt2__chunk_tokens, a.T - t0);
        chunk.x = a.x + (size_t)t0 * K;
        chunk.y = a.y + (size_t)t0 * a.W->rows;
        gpt2__round_bf16_avx512((uint16_t*)panel, chunk.x, chunk.T, K);
        gpt2__prefill_x86<gpt2__prefill_bf16_avx512>(chunk, o_begin, o_end, panel);
    }
}

#if !defined(_MSC_VER) || defined(__clang__)
#pragma GCC diagnostic pop /* pushed in x86_prefill.h */
#endif
#endif /* GPT2__X86 */
