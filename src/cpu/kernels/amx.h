#ifndef GPT2__PART_CPU_KERNELS_AMX_H
#define GPT2__PART_CPU_KERNELS_AMX_H
#include "avx512_bf16.h"

/* The AMX set: the AVX-512 set with the bf16 unit, whose products of many rows multiply AMX tiles
   (Intel's Advanced Matrix Extensions, since Sapphire Rapids): q8_0 and q4_0 lanes times int8
   activations quantized as the AVX-512 int8 panels quantize them (TDPBSUD), and bf16 lanes times a
   prompt's activations rounded to bf16 (TDPBF16PS). A lone token, and 2 or 3 rows, stay on the
   AVX-512 kernels (streaming W is memory's work, not the multiplier's); f16 prompts stay on the
   AVX-512 FMAs (AMX multiplies bf16, whose 8-bit mantissa would round f16's 11 bits).

   Run on AMX hardware on one host so far (Intel Xeon, Emerald Rapids, 2026-12-07): the tests pass
   on the tiles; bf16 prompts run 4-5x the avx512_bf16 set, q8_0 ones 0.8-1.0x its int8 tiles
   (docs/PERFORMANCE.md), so the set stays off by default. Its arithmetic, layouts and blocking
   run in the tests everywhere through gpt2__amx_model, a plain C++ model of the tile operations
   (the kernel set "amx_model", compiled with GPT2_AMX_MODEL); the same kernels over the
   instructions (gpt2__amx_hardware, the set "amx") are compiled only with GPT2_AMX and chosen only
   where the CPU has AMX and the OS grants the process its tile data (dispatch.h).

   A tile is up to 16 rows of 64 bytes. TDPBSUD adds to C (rows x 16 int32) the dot products of
   A's rows (signed bytes) with B's columns (unsigned bytes, 4 to a 32-bit column of a row of B:
   B's row k holds bytes 4k..4k+3 of every column). The lanes of a q8_0 matrix are already B
   tiles: per block and group, vector s holds word s (bytes 4s..4s+3) of each of the 16 rows'
   blocks as w + 128 (avx512_panels.h), so a block's 8 vectors, 128 bytes apart, are the 8 rows of
   B for K = 32; A is 16 tokens' int8 values of that block, as quantize_q8_packed wrote them. C is
   then sum x (w + 128): the token's start (-128 times its sum of x) makes it sum x w, exactly the
   integer the AVX-512 tile sums, and the same float arithmetic scales it, so the outputs are the
   AVX-512 lanes' bits, a batch's decode rows the lone token's. A q4_0 panel's nibbles are spread
   per product into that layout (values 0-15; the start divided by 16: -8 times the sum). bf16
   lanes are B tiles for TDPBF16PS as they are: per pair of columns a row of the group's 16 rows'
   pairs, 128 bytes apart; C sums a prompt's products over all of K in fp32. */

#if defined(GPT2__X86)

/* What LDTILECFG reads: palette 1, then per tile its bytes per row and rows. */
struct gpt2__amx_config {
    uint8_t palette = 1, start_row = 0, reserved[14] = {};
    uint16_t colsb[16] = {};
    uint8_t rows[16] = {};
};
static_assert(sizeof(gpt2__amx_config) == 64, "LDTILECFG reads 64 bytes");

/* The tiles the kernels use: C, A and B of a product, and A and B of a bf16 product's last
   columns when K is not a multiple of 32. */
enum { gpt2__tile_c = 0, gpt2__tile_a = 1, gpt2__tile_b = 2, gpt2__tile_a_last = 3, gpt2__tile_b_last = 4 };

/* A configuration for n tokens (rows of A and C): int8 A of 32 bytes (a block) and B of 8 rows,
   or bf16 A of 64 bytes (32 values) and B of 16 rows (pairs), and for bf16 the last `last_pairs`
   pairs of columns (A of 4 bytes each, B of a row each). */
static inline gpt2__amx_config gpt2__amx_shapes(int n, bool int8, int last_pairs) {
    gpt2__amx_config c;
    c.rows[gpt2__tile_c] = (uint8_t)n;
    c.colsb[gpt2__tile_c] = 64;
    c.rows[gpt2__tile_a] = (uint8_t)n;
    c.colsb[gpt2__tile_a] = int8 ? 32 : 64;
    c.rows[gpt2__tile_b] = int8 ? 8 : 16;
    c.colsb[gpt2__tile_b] = 64;
    if (last_pairs) {
        c.rows[gpt2__tile_a_last] = (uint8_t)n;
        c.colsb[gpt2__tile_a_last] = (uint16_t)(4 * last_pairs);
        c.rows[gpt2__tile_b_last] = (uint8_t)last_pairs;
        c.colsb[gpt2__tile_b_last] = 64;
    }
    return c;
}

/* A bf16 product's 2 x 2 block: the sums of 2 groups of 16 rows and 2 tiles of 16 tokens in C
   tiles 0-3 (group g, tokens u: tile 2u + g), the tokens' A tiles 4 and 5, the groups' B tiles 6
   and 7, so each tile loaded serves two products. (A tile of each a product, from L2, held a
   product to about 70 cycles where TDPBF16PS takes 16: the block ran the product 1.5-1.7x as
   fast on Emerald Rapids.) */
enum { gpt2__tile_block_c = 0, gpt2__tile_block_a = 4, gpt2__tile_block_b = 6 };
static inline gpt2__amx_config gpt2__amx_block_shapes() {
    gpt2__amx_config c;
    for (int t = 0; t < 8; t++) c.rows[t] = 16, c.colsb[t] = 64;
    return c;
}

/* The tile operations in plain C++, as Intel's manual defines them (TILELOADD, TILESTORED,
   TILEZERO, TDPBSUD, TDPBF16PS: bf16 inputs that are subnormal read as zero, each product exact
   in fp32, added to the sum in turn, rounded to nearest even, a subnormal sum flushed to zero).
   Each thread has its own tiles, as each core has; a tile's bytes past its shape are zero. */
struct gpt2__amx_model {
    struct State {
        gpt2__amx_config config;
        alignas(64) uint8_t tile[8][16][64];
    };
    static State& state() {
        static thread_local State s;
        return s;
    }
    static void configure(const gpt2__amx_config& c) {
        State& s = state();
        s.config = c;
        std::memset(s.tile, 0, sizeof(s.tile));
    }
    static void release() { configure(gpt2__amx_config()); }
    template <int T>
    static void zero() {
        std::memset(state().tile[T], 0, sizeof(state().tile[T]));
    }
    template <int T>
    static void load(const void* base, size_t stride) {
        State& s = state();
        std::memset(s.tile[T], 0, sizeof(s.tile[T]));
        for (int r = 0; r < s.config.rows[T]; r++) std::memcpy(s.tile[T][r], (const uint8_t*)base + (size_t)r * stride, s.config.colsb[T]);
    }
    template <int T>
    static void store(void* base, size_t stride) {
        const State& s = state();
        for (int r = 0; r < s.config.rows[T]; r++) std::memcpy((uint8_t*)base + (size_t)r * stride, s.tile[T][r], s.config.colsb[T]);
    }
    /* C (int32) += A (signed bytes) . B (unsigned bytes) */
    template <int C, int A, int B>
    static void dpbsud() {
        State& s = state();
        const int M = s.config.rows[C], N = s.config.colsb[C] / 4, K = s.config.colsb[A] / 4;
        for (int m = 0; m < M; m++)
            for (int n = 0; n < N; n++) {
                int32_t sum;
                std::memcpy(&sum, s.tile[C][m] + 4 * n, 4);
                for (int k = 0; k < K; k++)
                    for (int i = 0; i < 4; i++) sum += (int32_t)(int8_t)s.tile[A][m][4 * k + i] * (int32_t)s.tile[B][k][4 * n + i];
                std::memcpy(s.tile[C][m] + 4 * n, &sum, 4);
            }
    }
    static float bf16_input(const uint8_t* p) {
        uint16_t h;
        std::memcpy(&h, p, 2);
        if ((h & 0x7f80) == 0) h &= 0x8000; /* subnormal inputs as zero */
        return gpt2__bf16_to_f32(h);
    }
    static float flushed(float v) { return std::fabs(v) < std::numeric_limits<float>::min() ? std::copysign(0.0f, v) : v; }
    /* C (fp32) += A (bf16 pairs) . B (bf16 pairs) */
    template <int C, int A, int B>
    static void dpbf16ps() {
        State& s = state();
        const int M = s.config.rows[C], N = s.config.colsb[C] / 4, K = s.config.colsb[A] / 4;
        for (int m = 0; m < M; m++)
            for (int n = 0; n < N; n++) {
                float sum;
                std::memcpy(&sum, s.tile[C][m] + 4 * n, 4);
                for (int k = 0; k < K; k++)
                    for (int i = 0; i < 2; i++) sum = flushed(sum + bf16_input(s.tile[A][m] + 4 * k + 2 * i) * bf16_input(s.tile[B][k] + 4 * n + 2 * i));
                std::memcpy(s.tile[C][m] + 4 * n, &sum, 4);
            }
    }
};

#if defined(GPT2_AMX)
#if defined(_MSC_VER) && !defined(__clang__)
#error "GPT2_AMX: the AMX tiles are written with GCC and clang inline assembly"
#endif
/* The same operations on the CPU's tiles (GCC and clang; the assembler must know AMX). The tile
   number is an immediate: a template argument printed with %c. */
struct gpt2__amx_hardware {
    static void configure(const gpt2__amx_config& c) { __asm__ volatile("ldtilecfg %0" ::"m"(c)); }
    static void release() { __asm__ volatile("tilerelease" ::); }
    template <int T>
    static void zero() {
        __asm__ volatile("tilezero %%tmm%c0" ::"i"(T));
    }
    template <int T>
    static void load(const void* base, size_t stride) {
        __asm__ volatile("tileloadd (%0,%1,1), %%tmm%c2" ::"r"(base), "r"(stride), "i"(T) : "memory");
    }
    template <int T>
    static void store(void* base, size_t stride) {
        __asm__ volatile("tilestored %%tmm%c2, (%0,%1,1)" ::"r"(base), "r"(stride), "i"(T) : "memory");
    }
    template <int C, int A, int B>
    static void dpbsud() {
        __asm__ volatile("tdpbsud %%tmm%c2, %%tmm%c1, %%tmm%c0" ::"i"(C), "i"(A), "i"(B));
    }
    template <int C, int A, int B>
    static void dpbf16ps() {
        __asm__ volatile("tdpbf16ps %%tmm%c2, %%tmm%c1, %%tmm%c0" ::"i"(C), "i"(A), "i"(B));
    }
};
#endif

/* Rows a product needs for the tiles; fewer stay on the AVX-512 kernels (a lone token's decode
   streams its lanes there, as 2 or 3 rows do). */
static const int gpt2__amx_min_rows = gpt2__panel_min_rows;

/* The spread of group j of a q4_0 panel at p into q8_0's layout of B tiles, nibbles as they are
   (0-15): per block 8 rows of 64 bytes, row s lane i the nibbles of word s of row i's block. */
GPT2__AVX512 static inline void gpt2__spread_nibbles_avx512(uint8_t* dst, const uint8_t* p, int j, int64_t nb) {
    const __m512i low = _mm512_set1_epi8(15);
    for (int64_t b = 0; b < nb; b++, dst += 8 * 64) {
        const uint8_t* block = p + (size_t)b * gpt2__panel_block_bytes<GPT2_TYPE_Q4_0> + 64 * j;
        for (int k = 0; k < 4; k++) {
            const __m512i packed = _mm512_loadu_si512(block + 128 * k);
            _mm512_storeu_si512(dst + 64 * k, _mm512_and_si512(packed, low));
            _mm512_storeu_si512(dst + 64 * (k + 4), _mm512_and_si512(_mm512_srli_epi16(packed, 4), low));
        }
    }
}

/* q8_0 or q4_0 lanes (LAYOUT) times a.xq_packed on tiles, a group of 16 rows at a time, 16 tokens
   at a time: per block one TDPBSUD, then the int32 sums scaled in 16 float vectors as the AVX-512
   tile scales them (gpt2__tile_int8_avx512), the same bits. `scratch` holds a q4_0 group spread. */
template <class Tiles, uint32_t LAYOUT>
GPT2__AVX512 static void gpt2__matmul_int8_amx_layout(const gpt2__matmul_args& a, int64_t o_begin, int64_t o_end, uint8_t* scratch) {
    constexpr bool nibbles = LAYOUT == GPT2_TYPE_Q4_0;
    constexpr size_t block_bytes = gpt2__panel_block_bytes<LAYOUT>;
    const int64_t K = a.W->cols, nb = K / gpt2__q8_block_values;
    const size_t ldx = gpt2__q8_packed_row_bytes(K), panel_bytes = (size_t)nb * block_bytes;
    alignas(64) int32_t c[16][16];
    int configured = 0;
    for (int64_t first = o_begin / gpt2__lane_rows * gpt2__lane_rows; first < o_end; first += gpt2__lane_rows) {
        const uint8_t* p = a.W->lanes + (size_t)(first / gpt2__panel_rows) * panel_bytes;
        const int j = (int)(first / gpt2__lane_rows % 2);
        const uint8_t* scales = gpt2__q8_group_scales<LAYOUT>(p, j);
        const uint8_t* words = p + 64 * j; /* block b's B tile: 8 rows 128 bytes apart */
        size_t words_step = block_bytes, words_stride = 128;
        if constexpr (nibbles) {
            gpt2__spread_nibbles_avx512(scratch, p, j, nb);
            words = scratch, words_step = 8 * 64, words_stride = 64;
        }
        for (int t0 = 0; t0 < a.T; t0 += 16) {
            const int n = std::min(16, a.T - t0);
            if (n != configured) Tiles::configure(gpt2__amx_shapes(configured = n, true, 0));
            const uint8_t* x = a.xq_packed + (size_t)t0 * ldx;
            __m512 f[16];
            GPT2__UNROLL
            for (int t = 0; t < 16; t++) f[t] = _mm512_setzero_ps();
            for (int64_t b = 0; b < nb; b++) {
                Tiles::template zero<gpt2__tile_c>();
                Tiles::template load<gpt2__tile_a>(x + gpt2__q8_block_values * b, ldx);
                Tiles::template load<gpt2__tile_b>(words + (size_t)b * words_step, words_stride);
                Tiles::template dpbsud<gpt2__tile_c, gpt2__tile_a, gpt2__tile_b>();
                Tiles::template store<gpt2__tile_c>(c, 64);
                const __m512 w_scale = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(scales + (size_t)b * block_bytes)));
                GPT2__UNROLL /* a fixed count, so the sums stay in registers */
                for (int t = 0; t < 16; t++) {
                    if (t >= n) continue;
                    const uint8_t* row = x + (size_t)t * ldx;
                    const float x_scale = ((const float*)(row + K))[b];
                    const int32_t start = ((const int32_t*)(row + K + 4 * nb))[b]; /* -8 or -128 times the sum of x: exact */
                    const __m512i d = _mm512_add_epi32(_mm512_load_si512(c[t]), _mm512_set1_epi32(nibbles ? start / 16 : start));
                    f[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_mul_ps(w_scale, _mm512_set1_ps(x_scale)), f[t]);
                }
            }
            GPT2__UNROLL
            for (int t = 0; t < 16; t++)
                if (t < n) {
                    const __m512 sums = gpt2__lane_order(f[t]);
                    gpt2__store_group_avx512<1>(a, first, o_begin, o_end, t0 + t, &sums);
                }
        }
    }
    if (configured) Tiles::release();
}

/* The set's GPT2__INT8_PANELS: q8_0 and q4_0 lanes on the tiles; fewer than gpt2__amx_min_rows
   rows, or a matrix without lanes, on the AVX-512 kernel. */
template <class Tiles>
GPT2__AVX512 static void gpt2__matmul_int8_amx(const gpt2__matmul_args& a, int64_t o_begin, int64_t o_end, float* panel) {
    if (!a.W->lanes || a.T < gpt2__amx_min_rows) return gpt2__matmul_int8_panels_avx512(a, o_begin, o_end, panel);
    if (a.W->type == GPT2_TYPE_Q4_0) return gpt2__matmul_int8_amx_layout<Tiles, GPT2_TYPE_Q4_0>(a, o_begin, o_end, (uint8_t*)panel);
    gpt2__matmul_int8_amx_layout<Tiles, GPT2_TYPE_Q8_0>(a, o_begin, o_end, (uint8_t*)panel);
}

/* A stored C tile's first n rows (a token each) as the sums of the group of 16 rows from row g for
   tokens t.., the outputs of rows [lo, hi) stored as gpt2__store_out does. */
GPT2__AVX512 static inline void gpt2__store_tile_rows(const gpt2__matmul_args& a, const float (*sums)[16], int64_t g, int64_t lo, int64_t hi, int t, int n) {
    for (int i = 0; i < n; i++) {
        const __m512 row = _mm512_load_ps(sums[i]);
        gpt2__store_group_avx512<1>(a, g, lo, hi, t + i, &row);
    }
}

/* A bf16 prompt on the tiles (GPT2__BF16_UNIT): per chunk of gpt2__chunk_tokens tokens, the thread
   rounds them to bf16 in `panel` (as the bf16 unit does), then per pair of groups of 16 rows and
   32 tokens a 2 x 2 block of C tiles, and per group and 16 tokens the blocks leave (and every
   group where K is not a multiple of 32) one C tile, sums the TDPBF16PS of every 32 columns (the
   last fewer), and their rows are stored. Each output is its own row of a C tile, summed over the
   same products in the same order in either: the same bits. */
template <class Tiles>
GPT2__AVX512_BF16 static void gpt2__matmul_bf16_amx(const gpt2__matmul_args& a, int64_t o_begin, int64_t o_end, float* panel) {
    const int64_t K = a.W->cols, width = gpt2__lanes_columns(*a.W), pairs = width / 2, full = pairs / 16 * 16;
    const int last = (int)(pairs - full);
    const size_t panel_bytes = gpt2__f16_column_bytes * (size_t)width, ldx = 2 * (size_t)width;
    const uint16_t* x_bf16 = (const uint16_t*)panel;
    const auto group_at = [&](int64_t first) { /* pair i's row: 128 i on */
        return a.W->lanes + (size_t)(first / gpt2__panel_rows) * panel_bytes + 64 * (first / gpt2__lane_rows % 2);
    };
    alignas(64) float c[4][16][16];
    int configured = 0; /* the single tiles' rows, or -1: the blocks' shapes */
    for (int t0 = 0; t0 < a.T; t0 += gpt2__chunk_tokens) {
        const int chunk = std::min(gpt2__chunk_tokens, a.T - t0);
        gpt2__round_bf16_avx512((uint16_t*)panel, a.x + (size_t)t0 * K, chunk, K, width);
        for (int64_t first = o_begin / gpt2__lane_rows * gpt2__lane_rows; first < o_end; first += 2 * gpt2__lane_rows) {
            const bool blocks = !last && first + gpt2__lane_rows < o_end; /* both groups, K in whole tiles */
            const uint8_t *g0 = group_at(first), *g1 = group_at(first + gpt2__lane_rows);
            int u0 = 0;
            for (; blocks && u0 + 32 <= chunk; u0 += 32) {
                if (configured != -1) Tiles::configure(gpt2__amx_block_shapes()), configured = -1;
                constexpr int C = gpt2__tile_block_c, A = gpt2__tile_block_a, B = gpt2__tile_block_b;
                const uint8_t* x = (const uint8_t*)(x_bf16 + (size_t)u0 * width);
                Tiles::template zero<C>(), Tiles::template zero<C + 1>(), Tiles::template zero<C + 2>(), Tiles::template zero<C + 3>();
                for (int64_t i = 0; i < full; i += 16) {
                    Tiles::template load<A>(x + 4 * i, ldx);
                    Tiles::template load<B>(g0 + 128 * i, 128);
                    Tiles::template dpbf16ps<C, A, B>();
                    Tiles::template load<B + 1>(g1 + 128 * i, 128);
                    Tiles::template dpbf16ps<C + 1, A, B + 1>();
                    Tiles::template load<A + 1>(x + 16 * ldx + 4 * i, ldx);
                    Tiles::template dpbf16ps<C + 2, A + 1, B>();
                    Tiles::template dpbf16ps<C + 3, A + 1, B + 1>();
                }
                Tiles::template store<C>(c[0], 64), Tiles::template store<C + 1>(c[1], 64);
                Tiles::template store<C + 2>(c[2], 64), Tiles::template store<C + 3>(c[3], 64);
                for (int q = 0; q < 4; q++) gpt2__store_tile_rows(a, c[q], first + gpt2__lane_rows * (q % 2), o_begin, o_end, t0 + u0 + 16 * (q / 2), 16);
            }
            for (int64_t g = first; g < std::min(first + 2 * gpt2__lane_rows, o_end); g += gpt2__lane_rows)
                for (int u = u0; u < chunk; u += 16) {
                    const int n = std::min(16, chunk - u);
                    if (n != configured) Tiles::configure(gpt2__amx_shapes(configured = n, false, last));
                    const uint8_t *x = (const uint8_t*)(x_bf16 + (size_t)u * width), *group = group_at(g);
                    Tiles::template zero<gpt2__tile_c>();
                    for (int64_t i = 0; i < full; i += 16) {
                        Tiles::template load<gpt2__tile_a>(x + 4 * i, ldx);
                        Tiles::template load<gpt2__tile_b>(group + 128 * i, 128);
                        Tiles::template dpbf16ps<gpt2__tile_c, gpt2__tile_a, gpt2__tile_b>();
                    }
                    if (last) {
                        Tiles::template load<gpt2__tile_a_last>(x + 4 * full, ldx);
                        Tiles::template load<gpt2__tile_b_last>(group + 128 * full, 128);
                        Tiles::template dpbf16ps<gpt2__tile_c, gpt2__tile_a_last, gpt2__tile_b_last>();
                    }
                    Tiles::template store<gpt2__tile_c>(c[0], 64);
                    gpt2__store_tile_rows(a, c[0], g, o_begin, o_end, t0 + u, n);
                }
        }
    }
    if (configured) Tiles::release();
}

#if !defined(_MSC_VER) || defined(__clang__)
#pragma GCC diagnostic pop /* pushed in x86_prefill.h */
#endif
#endif /* GPT2__X86 */

#endif /* GPT2__PART_CPU_KERNELS_AMX_H */
