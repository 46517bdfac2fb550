#ifndef GPT2__PART_CPU_KERNELS_X86_PREFILL_H
#define GPT2__PART_CPU_KERNELS_X86_PREFILL_H
#include "scalar.h"

/* What the x86 kernel sets, avx2.h (AVX2 + FMA + F16C), avx512.h (AVX-512 F, BW, VL, DQ, VNNI)
   and avx512_bf16.h (those and AVX512_BF16), share: the target macros and the prefill matmul
   driver. Each kernel carries its instruction set in a target
   attribute, so the library builds without -m flags and the dispatcher (dispatch.h) runs only
   what the CPU has.

   A matrix product takes one of two shapes (its gpt2__strategy):
   - decode (GPT2__STREAM_ROWS, GPT2__STREAM_INT8): every weight is read once, straight from the (mapped) file, in its own type, one row
     after the other (gpt2__matmul_by_rows): memory bandwidth is the limit. q8_0 rows meet
     activations quantized to int8 and use integer dot products (vpdpbusd / pmaddubsw), as ggml's
     q8_0 x q8_0.
   - prefill (GPT2__FLOAT_TILES): a panel of gpt2__tile_rows rows is converted to float once (in L1) and multiplied
     with tiles of tokens held in registers, so each weight load feeds several FMAs: arithmetic is
     the limit. (q8_0 on the AVX-512 set: int8 panels instead, avx512.h.)
   A result never depends on where its row falls in a thread's range: decode computes each row
   with the same instructions whatever rows it goes with, and prefill reduces every tile the
   same way. */

#if !defined(GPT2_NO_SIMD) && (defined(__x86_64__) || defined(_M_X64))
#define GPT2__X86 1
#include <immintrin.h>
#if defined(_MSC_VER) && !defined(__clang__)
#include <intrin.h>
#define GPT2__AVX2
#define GPT2__AVX512
#define GPT2__AVX512_BF16
#else
#include <cpuid.h>
#define GPT2__AVX2 __attribute__((target("avx2,fma,f16c")))
#define GPT2__AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))
#define GPT2__AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512bf16,avx2,fma,f16c")))
/* GCC 12 warns inside its own AVX-512 intrinsics (their _mm512_undefined_ps() pass-through), which
   this driver's AVX-512 instances inline too; popped at the end of amx.h, the last x86 part. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#endif

/* cpuid's EAX, EBX, ECX and EDX for a leaf and sub-leaf. */
static inline void gpt2__cpuid(unsigned leaf, unsigned subleaf, unsigned r[4]) {
#if defined(_MSC_VER) && !defined(__clang__)
    int regs[4];
    __cpuidex(regs, (int)leaf, (int)subleaf);
    for (int i = 0; i < 4; i++) r[i] = (unsigned)regs[i];
#else
    __cpuid_count(leaf, subleaf, r[0], r[1], r[2], r[3]);
#endif
}

/* Whether the CPU is Intel's ("GenuineIntel" in leaf 0's EBX, EDX, ECX), asked once per process:
   a few choices measured to differ between Intel's cores and AMD's follow it (docs/
   PERFORMANCE.md, Kernel notes). */
static bool gpt2__intel_cpu() {
    static const bool intel = [] {
        unsigned r[4];
        gpt2__cpuid(0, 0, r);
        return r[1] == 0x756e6547u && r[3] == 0x49656e69u && r[2] == 0x6c65746eu;
    }();
    return intel;
}

/* Keeps a vector that several FMAs share in a register. GCC tuned for Zen (-march=native on
   AMD, -mtune=znver3) otherwise folds its load into every FMA that uses it, loading it again
   each time: the float tiles ran at half speed (docs/PERFORMANCE.md, Kernel notes).
   Applied to a local, not to an array's element: GCC then kept the whole array in memory. */
#if defined(_MSC_VER) && !defined(__clang__)
#define GPT2__IN_REGISTER(v) ((void)0)
#define GPT2__IN_REGISTERS(v, w) ((void)0)
#else
#define GPT2__IN_REGISTER(v) __asm__("" : "+v"(v))
#define GPT2__IN_REGISTERS(v, w) __asm__("" : "+v"(v), "+v"(w))
#endif

/* Stores an output with the bias and the residual, as gpt2__matmul_rows_scalar does. */
static inline void gpt2__store_out(const gpt2__matmul_args& a, int t, int64_t o, float dot) {
    const float v = (a.bias ? a.bias[o] : 0.0f) + dot;
    float* y = a.y + (size_t)t * a.W->rows + o;
    *y = a.accumulate ? *y + v : v;
}

/* Runs Set::tile<R, N> (a kernel set's tile of R rows and N tokens) for 1 <= rows <=
   gpt2__tile_rows and 1 <= n <= Set::NT, which are known only at run time. */
template <class Set, int R>
static void gpt2__tile_tokens(float* out, int n, const typename Set::Panel& w, const gpt2__matmul_args& a, int t, int64_t k0, int64_t kn) {
    switch (n) {
    case 1: Set::template tile<R, 1>(out, w, a, t, k0, kn); break;
    case 2: Set::template tile<R, 2>(out, w, a, t, k0, kn); break;
    case 3: Set::template tile<R, 3>(out, w, a, t, k0, kn); break;
    default: Set::template tile<R, Set::NT>(out, w, a, t, k0, kn); break;
    }
}

template <class Set>
static void gpt2__tile_any(float* out, int rows, int n, const typename Set::Panel& w, const gpt2__matmul_args& a, int t, int64_t k0, int64_t kn) {
    switch (rows) {
    case 1: gpt2__tile_tokens<Set, 1>(out, n, w, a, t, k0, kn); break;
    case 2: gpt2__tile_tokens<Set, 2>(out, n, w, a, t, k0, kn); break;
    case 3: gpt2__tile_tokens<Set, 3>(out, n, w, a, t, k0, kn); break;
    default: gpt2__tile_tokens<Set, gpt2__tile_rows>(out, n, w, a, t, k0, kn); break;
    }
}

/* A converted panel's rows come from DRAM in bursts (a panel's rows, then tiles that touch no
   weight memory for a while), which neither the hardware prefetcher nor the driver's prefetch of
   the next panel runs far enough ahead of: on the AVX-512 set each row converted also prefetches
   the row gpt2__prefill_prefetch_bytes after it. The AVX2 set goes without (its tiles, not
   memory, are its limit there), and panels read in place (f32) gained nothing over the driver's
   prefetch (docs/PERFORMANCE.md, Kernel notes). */
static const int64_t gpt2__prefill_prefetch_bytes = 24576;

/* Always inlined: left a function of its own, GCC 12 finds it has no side effects (a prefetch
   has none to it) and deletes every call. */
#if defined(_MSC_VER) && !defined(__clang__)
#define GPT2__ALWAYS_INLINE __forceinline
#else
#define GPT2__ALWAYS_INLINE __attribute__((always_inline)) inline
#endif
GPT2__ALWAYS_INLINE static void gpt2__prefetch_row_ahead(const gpt2__weight* W, int64_t row) {
    const int64_t ahead = row + std::max<int64_t>(1, gpt2__prefill_prefetch_bytes / (int64_t)W->row_bytes);
    if (ahead >= W->rows) return;
    const char* p = (const char*)(W->data + (size_t)ahead * W->row_bytes);
    for (size_t line = 0; line < W->row_bytes; line += 64) _mm_prefetch(p + line, _MM_HINT_T0);
}

/* A float panel: gpt2__tile_rows rows of W from row o, ldw floats apart: the f32 rows in place,
   else the rows converted by RowToFloat(dst, type, row, K) into `scratch`. */
struct gpt2__float_panel {
    const float* w;
    size_t ldw;
};

template <void (*RowToFloat)(float*, uint32_t, const uint8_t*, int64_t), bool PrefetchAhead>
static gpt2__float_panel gpt2__float_panel_of(const gpt2__matmul_args& a, int64_t o, int rows, float* scratch) {
    const gpt2__weight* W = a.W;
    if (W->type == GPT2_TYPE_F32) return {(const float*)(W->data + (size_t)o * W->row_bytes), W->row_bytes / 4};
    for (int r = 0; r < rows; r++) {
        if (PrefetchAhead) gpt2__prefetch_row_ahead(W, o + r);
        RowToFloat(scratch + (size_t)r * W->cols, W->type, W->data + (size_t)(o + r) * W->row_bytes, W->cols);
    }
    return {scratch, (size_t)W->cols};
}

/* Prefill, shared by the x86 kernel sets and their panel types: for each group of
   gpt2__tile_rows rows (Set::panel: a float panel), tiles of Set::NT tokens, over the tokens in
   chunks of about gpt2__chunk_tokens. K goes in blocks of at most gpt2__k_block (starting at
   multiples of gpt2__k_align floats, a 512-bit vector), so a tile's rows and
   tokens stay in L1, the partial sums of the chunk's tiles adding up in `sums`.
   Set::panel(a, o, rows, scratch) makes the panel of rows [o, o + rows) in `scratch`;
   Set::tile<R, N>(out, panel, a, t, k0, kn) adds the products of R rows and tokens t.. t + N - 1
   over k0 <= k < k0 + kn to out[j * gpt2__tile_rows + r]. */
static const int gpt2__k_block = 1024, gpt2__k_align = 16;
/* A chunk takes more tokens than gpt2__chunk_tokens, up to gpt2__chunk_tokens_most, while their
   rows of x stay within gpt2__chunk_x_bytes (in L2 with the panel, where the tiles re-read them for
   every panel): each panel is then converted once for all of them, where a prompt of 128 tokens
   on rows of 768 converted every panel twice (docs/PERFORMANCE.md, Kernel notes). The tokens of
   a chunk of rows of K values, in whole tiles of NT. */
static const int gpt2__chunk_tokens_most = 192;
static const int64_t gpt2__chunk_x_bytes = 400 * 1024;
static inline int gpt2__prefill_chunk(int64_t K, int NT) { return (int)std::clamp<int64_t>(gpt2__chunk_x_bytes / (4 * K), gpt2__chunk_tokens, gpt2__chunk_tokens_most) / NT * NT; }

template <class Set>
static void gpt2__prefill_x86(const gpt2__matmul_args& a, int64_t o_begin, int64_t o_end, float* panel) {
    constexpr int MR = gpt2__tile_rows, NT = Set::NT, most = gpt2__chunk_tokens_most / NT * NT;
    static_assert(MR == 4, "a full tile stores its 4 rows of a token as one 128-bit vector");
    const gpt2__weight* W = a.W;
    const int64_t K = W->cols;
    const int chunk = gpt2__prefill_chunk(K, NT);
    const int64_t k_blocks = (K + gpt2__k_block - 1) / gpt2__k_block;
    const int64_t k_step = ((K + k_blocks - 1) / k_blocks + gpt2__k_align - 1) / gpt2__k_align * gpt2__k_align;
    float sums[most / NT][MR * NT];
    for (int t0 = 0; t0 < a.T; t0 += chunk) {
        const int t_end = std::min(a.T, t0 + chunk);
        const int n_tiles = (t_end - t0 + NT - 1) / NT;
        for (int64_t o = o_begin; o < o_end; o += MR) {
            const int rows = (int)std::min<int64_t>(MR, o_end - o);
            const typename Set::Panel w = Set::panel(a, o, rows, panel);
            /* The next rows come from DRAM, and the tiles touch no weight memory for a while:
               spread prefetches of the next group's bytes over them. */
            const char* next = (const char*)(W->data + (size_t)(o + rows) * W->row_bytes);
            const size_t next_lines = (size_t)std::min<int64_t>(MR, o_end - o - rows) * W->row_bytes / 64;
            const size_t steps = (size_t)(n_tiles * k_blocks), lines_per_step = (next_lines + steps - 1) / steps;
            size_t line = 0;
            std::memset(sums, 0, sizeof(float) * MR * NT * (size_t)n_tiles);
            for (int64_t k0 = 0; k0 < K; k0 += k_step) {
                const int64_t kn = std::min(k_step, K - k0);
                for (int i = 0; i < n_tiles; i++) {
                    for (size_t end = std::min(next_lines, line + lines_per_step); line < end; line++) _mm_prefetch(next + 64 * line, _MM_HINT_T1);
                    const int t = t0 + i * NT;
                    gpt2__tile_any<Set>(sums[i], rows, std::min(NT, t_end - t), w, a, t, k0, kn);
                }
            }
            for (int i = 0; i < n_tiles; i++) {
                const int t = t0 + i * NT, n = std::min(NT, t_end - t);
                if (rows == MR && n == NT) { /* gpt2__store_out, 4 rows at once */
                    const __m128 bias = a.bias ? _mm_loadu_ps(a.bias + o) : _mm_setzero_ps();
                    for (int j = 0; j < NT; j++) {
                        float* y = a.y + (size_t)(t + j) * W->rows + o;
                        const __m128 v = _mm_add_ps(bias, _mm_loadu_ps(sums[i] + j * MR));
                        _mm_storeu_ps(y, a.accumulate ? _mm_add_ps(_mm_loadu_ps(y), v) : v);
                    }
                } else {
                    for (int r = 0; r < rows; r++)
                        for (int j = 0; j < n; j++) gpt2__store_out(a, t + j, o + r, sums[i][j * MR + r]);
                }
            }
        }
    }
}

#endif /* GPT2__X86 */

#endif /* GPT2__PART_CPU_KERNELS_X86_PREFILL_H */
