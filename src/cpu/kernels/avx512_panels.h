#ifndef GPT2__PART_CPU_KERNELS_AVX512_PANELS_H
#define GPT2__PART_CPU_KERNELS_AVX512_PANELS_H
#include "avx512_float_tiles.h"

/* The AVX-512 set, part 3 of 4: int8 panels (GPT2__INT8_PANELS) and lanes (GPT2__FLOAT16_LANES;
   the bf16 unit's tile is avx512_bf16.h's): the packed layouts, their tiles, and the packing of
   a whole matrix into lanes at load. */

#if defined(GPT2__X86)

/* ---- Int8 panels: q8_0 and q4_0 weights times many rows of int8 activations (contract.h) -----

   vpdpbusd adds 4 byte products into each of 16 int32 lanes. A lane per weight row and an
   activation's 4 bytes broadcast to all, 8 of them give the dot products of 16 rows with one
   32-value block of a token, exact in int32; one conversion, one product of scales and one FMA
   bring the 16 sums to float. A panel of 32 rows (two vectors) times a tile of 6 tokens keeps
   24 block sums and 24 float sums in registers, each weight vector loaded once for 6 tokens and
   each broadcast once for 2 vectors (tiles of 8 on Intel's cores: gpt2__int8_tile_tokens).
   vpdpbusd multiplies unsigned by signed bytes: the weights are stored as w + 128 (a q4_0
   value, nibble - 8, as nibble + 120), and a token's block sum starts from -128 times the sum
   of its values (gpt2__quantize_q8_packed_avx512). Every output is its own lane and its own sum
   over the blocks in order, so no result depends on the panel or tile it falls in, nor on how
   many tokens the tile has.
   A panel: 32 rows, two groups of 16 (a vector's lanes each); per block, the two groups' 8
   vectors of words, interleaved line by line, then the 16 f16 scales of each: 1,088 bytes, 17
   cache lines, the same bytes as the rows' q8_0 blocks, and one stream through memory. A matrix's
   lanes (gpt2__pack_lanes_avx512) are its panels in order, the last one's missing rows repeating
   its last row. A q4_0 matrix's lanes keep its nibbles: 4 vectors a group, vector k's bytes
   holding word k in their low nibbles and word k + 4 in their high ones (a q4_0 block's bytes
   4k..4k+3 as they are), as unsigned values 0-15 whose block sums start from -8 times the sum of
   x: 576 bytes a block, again the rows' own bytes. (A q4_0 product's per-product panel is packed
   as q8_0's, each value as nibble + 120.) */
static const int gpt2__int8_tile_tokens_most = 8; /* the widest int8 tile */
/* Tokens in an int8 tile on this CPU, at most. 2 groups x 6 tokens fit the 32 registers, and
   AMD's cores were measured with them. On Intel's a tile of 8 is faster although GCC then keeps a
   few sums in memory: each weight vector (and each q4_0 vector's nibbles, spread) serves 8
   tokens, and 8 sessions' decode rows go as one tile, not as 4 + 4 (Emerald Rapids, one thread,
   3072 x 768 in cache: q4_0 8 rows 228 -> 278 GMAC/s, 128 rows 259 -> 269; q8_0 16 rows 293 ->
   312, 128 rows 296 -> 314; docs/PERFORMANCE.md, Kernel notes). */
static inline int gpt2__int8_tile_tokens() { return gpt2__intel_cpu() ? gpt2__int8_tile_tokens_most : 6; }
/* How far ahead in its lanes a product of one or two tokens prefetches (Zen 5, from DRAM): a
   lone token streams fastest 4 KB ahead, non-temporally (docs/PERFORMANCE.md, Kernel notes).
   More tokens prefetch the next panel (gpt2__matmul_lanes_avx512). */
static const size_t gpt2__lanes_stream_ahead = 4096;

/* What a tile prefetches of the weights ahead of it: `lines` cache lines from `at` on, spread
   over its steps (blocks, or pairs of columns). Non-temporally, except on Intel's cores: there a
   non-temporal prefetch fills L1 alone (nor is the line kept in L2 or the L3 after it), and
   every tile ran at 0.4-0.5x the speed it has with prefetches into L2 (Emerald Rapids: one
   token's q8_0 lanes from DRAM 7.6 -> 17 GB/s; docs/PERFORMANCE.md, Kernel notes). On Zen 4 and
   5 the two hints decode alike, and non-temporal ones feed tiles of several tokens faster. */
struct gpt2__prefetch_span {
    const char* at;
    size_t lines;
    bool to_l2;
};
static bool gpt2__lanes_prefetch_to_l2() { return gpt2__intel_cpu(); }
/* Lines of span s each of `steps` steps prefetches. */
static inline size_t gpt2__prefetch_per_step(const gpt2__prefetch_span& s, int64_t steps) { return steps ? (s.lines + (size_t)steps - 1) / (size_t)steps : 0; }
/* Step i's lines of span s, per_step of them. */
GPT2__ALWAYS_INLINE static void gpt2__prefetch_step(const gpt2__prefetch_span& s, size_t per_step, int64_t i) {
    for (size_t l = (size_t)i * per_step, end = std::min(s.lines, l + per_step); l < end; l++) {
        if (s.to_l2) _mm_prefetch(s.at + 64 * l, _MM_HINT_T1);
        else _mm_prefetch(s.at + 64 * l, _MM_HINT_NTA);
    }
}
static const size_t gpt2__q8_scales_bytes = 2 * gpt2__lane_rows; /* a group's 16 f16 scales */
/* Vectors of a group's block, and bytes of a panel's block, in the layout of TYPE. */
template <uint32_t TYPE>
static constexpr size_t gpt2__lane_vectors = TYPE == GPT2_TYPE_Q4_0 ? 4 : 8;
template <uint32_t TYPE>
static constexpr size_t gpt2__panel_block_bytes = 2 * (64 * gpt2__lane_vectors<TYPE> + gpt2__q8_scales_bytes);
static_assert(gpt2__panel_rows == 2 * gpt2__lane_rows && gpt2__panel_block_bytes<GPT2_TYPE_Q8_0> == gpt2__panel_rows * (size_t)gpt2__q8_block_bytes &&
                  gpt2__panel_block_bytes<GPT2_TYPE_Q4_0> == gpt2__panel_rows * (size_t)gpt2__q4_block_bytes,
              "a panel is two groups of 16 rows, the rows' own bytes");
/* Where group j (0 or 1) of the panel at p keeps its vectors (128 bytes apart) and its scales. */
static inline const uint8_t* gpt2__q8_group_words(const uint8_t* p, int j) { return p + 64 * j; }
template <uint32_t TYPE>
static inline const uint8_t* gpt2__q8_group_scales(const uint8_t* p, int j) { return p + 128 * gpt2__lane_vectors<TYPE> + gpt2__q8_scales_bytes * j; }
/* The lane that holds row i of a group (gpt2__lane_order's order). */
static inline int gpt2__lane_of_row(int i) { return 4 * (i / 4 == 1 ? 2 : i / 4 == 2 ? 1 : i / 4) + i % 4; }

/* A transpose with in-lane shuffles leaves the rows in lanes 0-3, 8-11, 4-7, 12-15: this turns
   a vector of 16 rows in order into that order, and back. */
GPT2__AVX512 static inline __m512 gpt2__lane_order(__m512 v) { return _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(3, 1, 2, 0)); }

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
   lane i holds 4-byte word s of the block of row i (in gpt2__lane_order) as w + 128; the
   scales in the same order. Both types' blocks begin with their f16 scale. With `ahead` (else 0),
   the same block of the rows that many bytes on (the next panel's) is prefetched. */
template <uint32_t TYPE>
GPT2__AVX512 static void gpt2__pack_int8_group_avx512(uint8_t* p, int j, const uint8_t* const* row, int64_t nb, size_t ahead) {
    const __m512i to_unsigned = _mm512_set1_epi8((char)0x80);
    uint8_t* dst = (uint8_t*)gpt2__q8_group_words(p, j);
    uint8_t* scales = (uint8_t*)gpt2__q8_group_scales<GPT2_TYPE_Q8_0>(p, j);
    const size_t block_bytes = gpt2__panel_block_bytes<GPT2_TYPE_Q8_0>;
    for (int64_t b = 0; b < nb; b++, dst += block_bytes, scales += block_bytes) {
        const size_t at = (size_t)b * (TYPE == GPT2_TYPE_Q4_0 ? gpt2__q4_block_bytes : gpt2__q8_block_bytes);
        if (ahead)
            for (int i = 0; i < gpt2__lane_rows; i++) _mm_prefetch((const char*)row[i] + at + ahead, _MM_HINT_T1);
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
   than one 512-bit load (it splits those anyway): a tile of few tokens waits on memory, where
   tiles of 5 or 6 are busy enough that the extra load costs (docs/PERFORMANCE.md, Kernel notes). */
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
    const int64_t from = std::max<int64_t>(lo - r, 0), to = std::min<int64_t>(hi - r, gpt2__lane_rows);
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
   lanes'); the outputs of rows [lo, hi) stored as gpt2__store_out does; `ahead` prefetched
   along the blocks. */
template <uint32_t LAYOUT, int V, int N>
GPT2__AVX512 static void gpt2__tile_int8_avx512(const gpt2__matmul_args& a, const uint8_t* p, int j, int64_t first_row, int64_t lo, int64_t hi, int t0,
                                              const gpt2__prefetch_span& ahead) {
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
    const size_t lines_per_block = gpt2__prefetch_per_step(ahead, nb);
    for (int64_t b = 0; b < nb; b++) {
        gpt2__prefetch_step(ahead, lines_per_block, b);
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
        for (int t = 0; t < N; t++) sums[t] = gpt2__lane_order(f[v][t]);
        gpt2__store_group_avx512<N>(a, first_row + gpt2__lane_rows * v, lo, hi, t0, sums);
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
static const size_t gpt2__f16_column_bytes = 2 * gpt2__panel_rows;
/* Tokens in a tile of LAYOUT, at most: 8 for int8 panels (gpt2__int8_tile_tokens); 16-bit tiles
   keep two sums per output and run out of registers at 6 (docs/PERFORMANCE.md, Kernel notes). */
template <uint32_t LAYOUT>
static constexpr int gpt2__lanes_tile_tokens = gpt2__float16_lanes(LAYOUT) ? 5 : gpt2__int8_tile_tokens_most;
/* More f16 tokens than that go through one group of 16 rows at a time, in tiles of up to 16
   tokens x 2 sums: each column widened serves up to 16 tokens, where 2 groups x 4 tokens widened
   it for 4 (8 tokens as one tile of 8: 8 sessions' decode rows 45.6 -> 56.3 GMAC/s in cache, 41.2
   -> 50.7 from DRAM, one thread, Zen 4). Tiles of up to 16 instead of 8 widen a column half as
   often for 16 and 32 tokens: 32 tokens 88 -> 101 GMAC/s, one thread, Emerald Rapids. Their 32
   sums and two weights outnumber the 32 registers, so GCC keeps two sums in memory; 15 tokens
   would fit, but 32 tokens would then go as 11 + 11 + 10 (95 GMAC/s) and 16 as 8 + 8 (86). bf16,
   whose widening is a shift, keeps the two groups: its gain in the Zen 4 timings (2-6%) did not
   show at two threads (docs/PERFORMANCE.md, Kernel notes). */
static const int gpt2__float16_group_tile_tokens = 16;
static constexpr bool gpt2__goes_by_group(uint32_t layout) { return layout == GPT2_TYPE_F16; }

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

/* The tile of N tokens and V groups. A prompt (GPT2__FLOAT16_PROMPT) needs no second chain, nor to
   give a lone token's bits: its tile (TwoSums false) keeps one sum per output, the columns in
   order, so 12 tokens x 2 groups fit in 24 sums (with 4 widened weights and a broadcast, 29 of the
   32 registers), each group's values of a column widened once for 12 tokens instead of 5: 8
   tokens widened them half again as often, and f16 prompts ran 4-8% slower (Emerald Rapids; 13
   tokens no faster, GCC keeps some sums in memory; docs/PERFORMANCE.md, Kernel notes). Each
   output is still its own lane summed in the same order for every tile width and row range. */
static const int gpt2__float16_prompt_tile_tokens = 12;
template <uint32_t TYPE, int V, int N, bool TwoSums = true, bool Packed = false>
GPT2__AVX512 static void gpt2__tile_float16_avx512(const gpt2__matmul_args& a, const uint8_t* p, int j, int64_t first_row, int64_t lo, int64_t hi, int t0,
                                                   const gpt2__prefetch_span& ahead) {
    const int64_t K = a.W->cols;
    const uint8_t* w = p + (TYPE == GPT2_TYPE_F16 ? 32 : 64) * j;
    const float* x[N] = {}; /* the tokens' rows, or (Packed) per pair of columns the N tokens' two values at xp */
    const float* xp = nullptr;
    if constexpr (Packed) xp = a.x_tiles + (size_t)t0 * K;
    else
        for (int t = 0; t < N; t++) x[t] = a.x + (size_t)(t0 + t) * K;
    __m512 even[V][N], odd[V][N];
    GPT2__UNROLL
    for (int v = 0; v < V; v++)
        GPT2__UNROLL
        for (int t = 0; t < N; t++) even[v][t] = odd[v][t] = _mm512_setzero_ps();
    const int64_t pairs = K / 2;
    const size_t lines_per_pair = gpt2__prefetch_per_step(ahead, pairs);
    for (int64_t i = 0; i < pairs; i++) {
        gpt2__prefetch_step(ahead, lines_per_pair, i);
        __m512 w0[V], w1[V];
        GPT2__UNROLL
        for (int v = 0; v < V; v++) gpt2__column_pair_avx512<TYPE>(w, i, v, &w0[v], &w1[v]);
        /* The even column's products, then the odd one's, one broadcast live at a time (26
           registers in all). Interleaved token by token, GCC tuned for Zen (-march=native on
           AMD) spilled a weight; group by group, with a token's broadcast kept for both, plain
           builds did (docs/PERFORMANCE.md, Kernel notes). */
        GPT2__UNROLL
        for (int t = 0; t < N; t++) {
            const __m512 x0 = _mm512_set1_ps(Packed ? xp[2 * t] : x[t][2 * i]);
            GPT2__UNROLL
            for (int v = 0; v < V; v++) even[v][t] = _mm512_fmadd_ps(w0[v], x0, even[v][t]);
        }
        GPT2__UNROLL
        for (int t = 0; t < N; t++) {
            const __m512 x1 = _mm512_set1_ps(Packed ? xp[2 * t + 1] : x[t][2 * i + 1]);
            GPT2__UNROLL
            for (int v = 0; v < V; v++) {
                if constexpr (TwoSums) odd[v][t] = _mm512_fmadd_ps(w1[v], x1, odd[v][t]);
                else even[v][t] = _mm512_fmadd_ps(w1[v], x1, even[v][t]);
            }
        }
        if constexpr (Packed) xp += 2 * N;
    }
    if (K % 2) { /* the last column, to the even sums */
        GPT2__UNROLL
        for (int v = 0; v < V; v++) {
            __m512 wv;
            gpt2__column_pair_avx512<TYPE>(w, K / 2, v, &wv, nullptr);
            GPT2__UNROLL
            for (int t = 0; t < N; t++) even[v][t] = _mm512_fmadd_ps(wv, _mm512_set1_ps(Packed ? xp[t] : x[t][K - 1]), even[v][t]);
        }
    }
    GPT2__UNROLL
    for (int v = 0; v < V; v++) {
        __m512 sums[N];
        GPT2__UNROLL
        for (int t = 0; t < N; t++) sums[t] = TwoSums ? _mm512_add_ps(even[v][t], odd[v][t]) : even[v][t];
        gpt2__store_group_avx512<N>(a, first_row + gpt2__lane_rows * v, lo, hi, t0, sums);
    }
}

/* The bf16 unit's tile on bf16 lanes (avx512_bf16.h), for GPT2__BF16_UNIT: one sum per output,
   so wider than the FMA tiles (8 x 2 sums fill half the registers; docs/PERFORMANCE.md, Kernel
   notes). */
static const int gpt2__bf16_unit_tile_tokens = 8;
template <int V, int N>
GPT2__AVX512_BF16 static void gpt2__tile_bf16_unit_avx512(const gpt2__matmul_args& a, const uint8_t* p, int j, int64_t first_row, int64_t lo, int64_t hi, int t0,
                                                          const gpt2__prefetch_span& ahead);

/* A tile: N tokens from t0 on through V groups of the panel at p (group j alone when V is 1),
   the outputs of rows [lo, hi) stored, prefetching `ahead` along its blocks. */
typedef void (*gpt2__tile_fn_avx512)(const gpt2__matmul_args& a, const uint8_t* p, int j, int64_t first_row, int64_t lo, int64_t hi, int t0,
                                     const gpt2__prefetch_span& ahead);

/* The tile of N tokens and V groups of strategy S in the layout of LAYOUT (f16 or bf16 lanes, or
   an int8 panel: q8_0's, or q4_0 lanes'): a prompt's on 16-bit lanes, the bf16 unit's, or the
   lanes' tile of any rows; NULL past the widest tile. */
template <uint32_t LAYOUT, gpt2__strategy S, int V, int N>
static constexpr gpt2__tile_fn_avx512 gpt2__tile_avx512() {
    if constexpr (S == GPT2__BF16_UNIT) {
        if constexpr (N > gpt2__bf16_unit_tile_tokens) return nullptr;
        else return gpt2__tile_bf16_unit_avx512<V, N>;
    }
    else if constexpr (S == GPT2__FLOAT16_PROMPT) return gpt2__tile_float16_avx512<LAYOUT, V, N, false>;
    else if constexpr (N > gpt2__lanes_tile_tokens<LAYOUT>) return nullptr;
    else if constexpr (gpt2__float16_lanes(LAYOUT)) return gpt2__tile_float16_avx512<LAYOUT, V, N>;
    else return gpt2__tile_int8_avx512<LAYOUT, V, N>;
}

/* Every tile of a layout, by [V - 1][N - 1]: a row of gpt2__widest_tile widths per V. */
static const int gpt2__widest_tile = gpt2__float16_prompt_tile_tokens;
static_assert(gpt2__widest_tile >= gpt2__int8_tile_tokens_most && gpt2__widest_tile >= gpt2__bf16_unit_tile_tokens, "a column per tile width");
template <uint32_t LAYOUT, gpt2__strategy S, int V, int... I>
static constexpr std::array<gpt2__tile_fn_avx512, sizeof...(I)> gpt2__tile_widths_avx512(std::integer_sequence<int, I...>) {
    return {{gpt2__tile_avx512<LAYOUT, S, V, I + 1>()...}};
}
using gpt2__tiles_avx512 = std::array<std::array<gpt2__tile_fn_avx512, gpt2__widest_tile>, 2>;
template <uint32_t LAYOUT, gpt2__strategy S = GPT2__FLOAT16_LANES>
static constexpr gpt2__tiles_avx512 gpt2__tiles_of_avx512 = {{gpt2__tile_widths_avx512<LAYOUT, S, 1>(std::make_integer_sequence<int, gpt2__widest_tile>()),
                                                              gpt2__tile_widths_avx512<LAYOUT, S, 2>(std::make_integer_sequence<int, gpt2__widest_tile>())}};

/* The tiles of f16 decode rows by group (gpt2__goes_by_group), which read their tokens packed
   (gpt2__pack_tile_rows_avx512), by [N - 1]. */
template <int... I>
static constexpr std::array<gpt2__tile_fn_avx512, sizeof...(I)> gpt2__f16_group_tiles_of(std::integer_sequence<int, I...>) {
    return {{gpt2__tile_float16_avx512<GPT2_TYPE_F16, 1, I + 1, true, true>...}};
}
static constexpr auto gpt2__f16_group_tiles = gpt2__f16_group_tiles_of(std::make_integer_sequence<int, gpt2__float16_group_tile_tokens>());

/* Tile i of `tiles`, among which a.T tokens are shared evenly (8 tokens as 4 + 4, not 6 + 2: a
   small tile costs about what a full one does; docs/PERFORMANCE.md, Kernel notes), and its
   share of `lines` prefetched lines: its first token, its tokens and its lines [from, to). */
struct gpt2__tile_share {
    int t0, n;
    size_t from, to;
};
static inline gpt2__tile_share gpt2__share_tile(int T, int tiles, int i, size_t lines) {
    return {i * (T / tiles) + std::min(i, T % tiles), T / tiles + (i < T % tiles), lines * i / tiles, lines * (i + 1) / tiles};
}

/* Whether f16 decode rows go by group (more than gpt2__lanes_tile_tokens of them). */
static inline bool gpt2__f16_rows_by_group(const gpt2__matmul_args& a) {
    return a.strategy == GPT2__FLOAT16_LANES && gpt2__goes_by_group(a.W->type) && a.T > gpt2__lanes_tile_tokens<GPT2_TYPE_F16>;
}

/* The set's pack_tile_rows: f16 decode rows by group have their activations packed as their tiles
   read them: per tile (gpt2__share_tile), per pair of columns its n tokens' two values, then an
   odd K's last column's n values. A tile then reads one stream, each value at a constant offset
   from one pointer, where it read n rows K apart, each broadcast at an indexed address (which
   Intel cores split into two micro-operations): on Emerald Rapids 6 to 64 rows' products
   1.07-1.14x as fast, packing included, where a pointer a row (no indexed address) gave 1.02-1.03x
   (docs/PERFORMANCE.md, Kernel notes). Packed once per product for all threads: packed by the
   kernel, per call, it cost about 13% of a call of 64 rows at K = 3072. */
static inline bool gpt2__pack_tile_rows_avx512(float* dst, const gpt2__matmul_args& a) {
    if (!gpt2__f16_rows_by_group(a)) return false;
    const int64_t K = a.W->cols;
    const int n_tiles = (a.T + gpt2__float16_group_tile_tokens - 1) / gpt2__float16_group_tile_tokens;
    for (int i = 0; i < n_tiles; i++) {
        const gpt2__tile_share t = gpt2__share_tile(a.T, n_tiles, i, 0);
        const float* rows = a.x + (size_t)t.t0 * K;
        for (int64_t q = 0; q < K / 2; q++)
            for (int u = 0; u < t.n; u++, dst += 2) std::memcpy(dst, rows + (size_t)u * K + 2 * q, 8);
        for (int u = 0; u < t.n && K % 2; u++) *dst++ = rows[(size_t)u * K + K - 1];
    }
    return true;
}

/* W (q8_0, q4_0, f16 or bf16) on its lanes, in place, two groups at a time (f16 decode rows of
   more than gpt2__lanes_tile_tokens: one, each prefetching half the next panel), times a.xq_packed
   (int8), a.x (f16, bf16) or a.x_bf16 (bf16 on the bf16 unit); a range may begin or end half-way
   through a panel: that group alone. All of a.T's tokens go through each pair of groups in tiles
   (the pair stays in L1 or L2, each tile's activations in L1). A lone token or two prefetch
   gpt2__lanes_stream_ahead ahead, on past the range's end too: gpt2__parallel_for's next chunk for
   this thread starts there. More tokens spend long enough on a panel to fetch the whole next one
   meanwhile, where 16 KB ahead fell behind the tiles that re-read the panel; those prefetches go
   to L2, where the later tiles and the second group find it (non-temporal ones left q8_0's tiles
   of 3-12 tokens waiting for DRAM on Zen 4: 1.3-2.2x slower). A lone token or two prefetch
   non-temporally on AMD, where a lone token streams faster so (Zen 4: 33 against 24 GB/s;
   docs/PERFORMANCE.md, Kernel notes), into L2 on Intel (gpt2__prefetch_span). f16 decode rows go
   by group where their activations come packed (x_tiles), else (a caller that did not pack them)
   two groups at a time, the same bits. The kernel of GPT2__FLOAT16_LANES. */
GPT2__AVX512 static void gpt2__matmul_lanes_avx512(const gpt2__matmul_args& a, int64_t o_begin, int64_t o_end, float* panel) {
    (void)panel;
    const uint32_t type = a.W->type;
    const bool bf16_unit = a.strategy == GPT2__BF16_UNIT, prompt = a.strategy == GPT2__FLOAT16_PROMPT;
    const bool by_group = a.x_tiles && gpt2__f16_rows_by_group(a);
    const gpt2__tiles_avx512& tiles = bf16_unit                 ? gpt2__tiles_of_avx512<GPT2_TYPE_BF16, GPT2__BF16_UNIT>
                                      : prompt                  ? (type == GPT2_TYPE_BF16 ? gpt2__tiles_of_avx512<GPT2_TYPE_BF16, GPT2__FLOAT16_PROMPT>
                                                                                          : gpt2__tiles_of_avx512<GPT2_TYPE_F16, GPT2__FLOAT16_PROMPT>)
                                      : type == GPT2_TYPE_BF16 ? gpt2__tiles_of_avx512<GPT2_TYPE_BF16>
                                      : type == GPT2_TYPE_F16  ? gpt2__tiles_of_avx512<GPT2_TYPE_F16>
                                      : type == GPT2_TYPE_Q4_0 ? gpt2__tiles_of_avx512<GPT2_TYPE_Q4_0>
                                                               : gpt2__tiles_of_avx512<GPT2_TYPE_Q8_0>;
    const bool streams = a.T <= 2; /* a lone token or two stream ahead; more re-read each panel */
    const int widest = bf16_unit  ? gpt2__bf16_unit_tile_tokens
                       : prompt   ? gpt2__float16_prompt_tile_tokens
                       : by_group ? gpt2__float16_group_tile_tokens
                                  : gpt2__float16_lanes(type) ? gpt2__lanes_tile_tokens<GPT2_TYPE_F16> : gpt2__int8_tile_tokens();
    const int n_tiles = (a.T + widest - 1) / widest;
    const size_t panel_bytes = gpt2__float16_lanes(type) ? gpt2__f16_column_bytes * (size_t)gpt2__lanes_columns(*a.W)
                               : (size_t)(a.W->cols / gpt2__q8_block_values) *
                                     (type == GPT2_TYPE_Q4_0 ? gpt2__panel_block_bytes<GPT2_TYPE_Q4_0> : gpt2__panel_block_bytes<GPT2_TYPE_Q8_0>);
    const bool to_l2 = !streams || gpt2__lanes_prefetch_to_l2(); /* later tiles re-read the panel from L2 */
    for (int64_t first = o_begin / gpt2__lane_rows * gpt2__lane_rows; first < o_end;) {
        const uint8_t* p = a.W->lanes + (size_t)(first / gpt2__panel_rows) * panel_bytes;
        const int j = (int)(first / gpt2__lane_rows % 2);
        const bool both = !by_group && j == 0 && first + gpt2__lane_rows < o_end;
        const char* next = (const char*)p + (streams ? gpt2__lanes_stream_ahead : panel_bytes) + (by_group ? j * panel_bytes / 2 : 0);
        const size_t next_lines = first + gpt2__panel_rows < o_end || streams ? panel_bytes / (by_group ? 128 : 64) : 0;
        for (int i = 0; i < n_tiles; i++) {
            const gpt2__tile_share t = gpt2__share_tile(a.T, n_tiles, i, next_lines);
            (by_group ? gpt2__f16_group_tiles[t.n - 1] : tiles[both][t.n - 1])(a, p, j, first, o_begin, o_end, t.t0, {next + 64 * t.from, t.to - t.from, to_l2});
        }
        first += gpt2__lane_rows * (both ? 2 : 1);
    }
}

/* q8_0 or q4_0 W times a.xq_packed. With lanes (made at load), the tokens go through them in
   place, two groups at a time. Else each panel of up to 32 rows is packed first, then all tokens
   go through it in tiles (the panel stays in L2, a tile's activations in L1). A last panel of
   16 rows or fewer takes one group; lanes past the last row repeat it and are not stored. */
GPT2__AVX512 static void gpt2__matmul_int8_panels_avx512(const gpt2__matmul_args& a, int64_t o_begin, int64_t o_end, float* panel) {
    const gpt2__weight* W = a.W;
    if (W->lanes) return gpt2__matmul_lanes_avx512(a, o_begin, o_end, panel);
    const int64_t nb = W->cols / gpt2__q8_block_values;
    const gpt2__tiles_avx512& tiles = gpt2__tiles_of_avx512<GPT2_TYPE_Q8_0>;
    const int widest = gpt2__int8_tile_tokens(), n_tiles = (a.T + widest - 1) / widest;
    const bool to_l2 = gpt2__lanes_prefetch_to_l2();
    uint8_t* w = (uint8_t*)panel;
    for (int64_t o = o_begin; o < o_end; o += gpt2__panel_rows) {
        const int rows = (int)std::min<int64_t>(gpt2__panel_rows, o_end - o), V = rows > gpt2__lane_rows ? 2 : 1;
        for (int v = 0; v < V; v++) {
            const uint8_t* row[gpt2__lane_rows];
            for (int i = 0; i < gpt2__lane_rows; i++) row[i] = W->data + (size_t)(o + std::min(gpt2__lane_rows * v + i, rows - 1)) * W->row_bytes;
            const size_t ahead = o + gpt2__panel_rows < o_end ? gpt2__panel_rows * W->row_bytes : 0;
            if (W->type == GPT2_TYPE_Q4_0) gpt2__pack_int8_group_avx512<GPT2_TYPE_Q4_0>(w, v, row, nb, ahead);
            else gpt2__pack_int8_group_avx512<GPT2_TYPE_Q8_0>(w, v, row, nb, ahead);
        }
        /* The next panel's rows come from DRAM, 32 streams the hardware prefetcher does not all
           follow: prefetched along the pack (with few tokens there are few tiles; docs/
           PERFORMANCE.md, Kernel notes) and spread over the tiles, which touch no weight memory. */
        const char* next = (const char*)(W->data + (size_t)(o + rows) * W->row_bytes);
        const size_t next_lines = (size_t)std::min<int64_t>(gpt2__panel_rows, o_end - o - rows) * W->row_bytes / 64;
        for (int i = 0; i < n_tiles; i++) {
            const gpt2__tile_share t = gpt2__share_tile(a.T, n_tiles, i, next_lines);
            tiles[V - 1][t.n - 1](a, w, 0, o, o, o + rows, t.t0, {next + 64 * t.from, t.to - t.from, to_l2});
        }
    }
}

/* A q8_0, q4_0, f16 or bf16 matrix's lanes (contract.h): its panels in order, q8_0's packed as a
   product's are, q4_0's bytes moved into their lanes as 4-byte words, nibbles as they are, f16's
   values column by column, bf16's by pairs of columns. */
GPT2__AVX512 static void gpt2__pack_lanes_avx512(uint8_t* dst, const gpt2__weight& W) {
    if (gpt2__float16_lanes(W.type)) {
        const bool pairs = W.type == GPT2_TYPE_BF16;
        uint16_t* out = (uint16_t*)dst;
        for (int64_t first = 0; first < W.rows; first += gpt2__panel_rows) {
            const uint16_t* row[gpt2__panel_rows];
            for (int i = 0; i < gpt2__panel_rows; i++) row[i] = (const uint16_t*)(W.data + (size_t)std::min<int64_t>(first + i, W.rows - 1) * W.row_bytes);
            for (int64_t k = 0; k < W.cols; k += pairs ? 2 : 1)
                for (int i = 0; i < gpt2__panel_rows; i++) {
                    *out++ = row[i][k];
                    if (pairs) *out++ = k + 1 < W.cols ? row[i][k + 1] : 0;
                }
        }
        return;
    }
    const int64_t nb = W.cols / gpt2__q8_block_values;
    const bool q4 = W.type == GPT2_TYPE_Q4_0;
    const size_t block_bytes = q4 ? gpt2__panel_block_bytes<GPT2_TYPE_Q4_0> : gpt2__panel_block_bytes<GPT2_TYPE_Q8_0>;
    for (int64_t first = 0; first < W.rows; first += gpt2__panel_rows, dst += (size_t)nb * block_bytes)
        for (int j = 0; j < 2; j++) {
            const uint8_t* row[gpt2__lane_rows];
            for (int i = 0; i < gpt2__lane_rows; i++) row[i] = W.data + (size_t)std::min<int64_t>(first + gpt2__lane_rows * j + i, W.rows - 1) * W.row_bytes;
            if (!q4) {
                gpt2__pack_int8_group_avx512<GPT2_TYPE_Q8_0>(dst, j, row, nb, 0);
                continue;
            }
            for (int64_t b = 0; b < nb; b++) {
                uint8_t* words = dst + (size_t)b * block_bytes + 64 * j;
                uint8_t* scales = (uint8_t*)gpt2__q8_group_scales<GPT2_TYPE_Q4_0>(dst + (size_t)b * block_bytes, j);
                for (int i = 0; i < gpt2__lane_rows; i++) {
                    const uint8_t* block = row[i] + (size_t)b * gpt2__q4_block_bytes;
                    const int lane = gpt2__lane_of_row(i);
                    for (int k = 0; k < 4; k++) std::memcpy(words + 128 * k + 4 * lane, gpt2__q4_nibbles(block) + 4 * k, 4);
                    std::memcpy(scales + 2 * lane, block, 2);
                }
            }
        }
}

/* Rows of x quantized as gpt2__quantize_q8_avx512 does, packed for gpt2__tile_int8_avx512: per
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

#endif /* GPT2__X86 */

#endif /* GPT2__PART_CPU_KERNELS_AVX512_PANELS_H */
