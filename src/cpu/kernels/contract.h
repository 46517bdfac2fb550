#ifndef GPT2__PART_CPU_KERNELS_CONTRACT_H
#define GPT2__PART_CPU_KERNELS_CONTRACT_H
#include "../../model/model.h"

/* The kernel contract: what every kernel set (scalar.h, avx2.h, avx512.h, avx512_bf16.h, neon.h)
   shares and what the forward pass may rely on. A set is a table of the functions below
   (gpt2__kernels) that gives the scalar set's results, to rounding (bit for bit where a comment
   says so; avx512_bf16.h rounds a bf16 prompt's activations to bf16 first); dispatch.h picks one
   per process. Adding a set: write its functions, fill one table, list it in dispatch.h. */

/* Fully unrolled loops over accumulators keep them in registers. */
#if defined(__CUDACC__) /* nvcc's front end rejects "GCC unroll" in host code */
#define GPT2__UNROLL
#elif defined(__clang__)
#define GPT2__UNROLL _Pragma("unroll")
#elif defined(__GNUC__)
#define GPT2__UNROLL _Pragma("GCC unroll 16")
#else
#define GPT2__UNROLL
#endif

/* ---- Decode and prefill ---------------------------------------------------------------- */

/* A pass over T new tokens is decode when T <= gpt2__decode_max_tokens, else prefill; this is the
   one place that says so. Decode reads every weight for a handful of tokens, so memory is the
   limit: matmuls stream W row by row in its own type, attention takes all heads of one query at
   once over ranges of its keys, layer norms run on the calling thread. Prefill has arithmetic to
   spare: the x86 sets' matmuls multiply float panels of W with tiles of tokens, attention takes
   blocks of gpt2__query_block queries head by head. */
static const int gpt2__decode_max_tokens = 3;
static inline bool gpt2__is_decode(int T) { return T <= gpt2__decode_max_tokens; }

/* Weights in blocks of 32 integers with one f16 scale each (q8_0, q4_0) meet int8 activations in
   blocks of the same 32 (gpt2__quantize_q8): a block's dot product is an exact integer sum. */
static inline bool gpt2__int8_weights(uint32_t weight_type) { return weight_type == GPT2_TYPE_Q8_0 || weight_type == GPT2_TYPE_Q4_0; }

/* A q8_0 or q4_0 matmul over a single token first quantizes its activations to int8
   (gpt2__matmul_args.xq) for integer dot products; the session holds one quantized row. With 2 or
   3 tokens, such rows take the prefill path. */
static inline bool gpt2__int8_activations(int T, uint32_t weight_type) { return gpt2__int8_weights(weight_type) && T == 1; }

/* ---- Matrix products ------------------------------------------------------------------- */

/* A q8_0 block as GGUF lays it out: one f16 scale, then gpt2__q8_block_values signed bytes;
   value = scale * q. Activations quantized for q8_0 weights (gpt2__quantize_q8) come in blocks
   of the same length, with a float scale each. */
struct gpt2__block_q8_0 {
    uint16_t scale;
    int8_t q[gpt2__q8_block_values];
};
static_assert(sizeof(gpt2__block_q8_0) == gpt2__q8_block_bytes, "q8_0 blocks are 34 bytes");

/* The f16 bits of the scale of the q8_0 block at `block`, and its quantized values. */
static inline uint16_t gpt2__q8_scale_f16(const uint8_t* block) {
    uint16_t h;
    std::memcpy(&h, block, 2);
    return h;
}
static inline const int8_t* gpt2__q8_values(const uint8_t* block) { return (const int8_t*)(block + 2); }

/* A q4_0 block as GGUF (ggml's block_q4_0) lays it out: one f16 scale d, then 16 bytes; byte j
   holds value j in its low nibble and value j + 16 in its high one; value = d * (nibble - 8).
   Its scale is read with gpt2__q8_scale_f16, as both blocks start with it. */
struct gpt2__block_q4_0 {
    uint16_t scale;
    uint8_t q[gpt2__q4_block_values / 2];
};
static_assert(sizeof(gpt2__block_q4_0) == gpt2__q4_block_bytes, "q4_0 blocks are 18 bytes");
static inline const uint8_t* gpt2__q4_nibbles(const uint8_t* block) { return block + 2; }
/* Int8 panels: a set that has them (gpt2__kernels.quantize_q8_packed) multiplies q8_0 and q4_0
   weights with many rows of int8 activations in integer dot products, the products of a whole
   block adding up in one 32-bit lane before they meet their scales. It packs up to
   gpt2__panel_rows rows of W at a time into its panel scratch, gpt2__q8_panel_row_block_bytes
   per row and block, and the activation rows with quantize_q8_packed, gpt2__q8_packed_row_bytes
   each: the values, a float scale and an int32 per block. The layouts are the set's own. */
static const int gpt2__panel_rows = 32;
static const size_t gpt2__q8_panel_row_block_bytes = gpt2__q8_block_bytes; /* a row's 32 values and its f16 scale, packed */

/* Lanes: a set with int8 panels may also have pack_lanes, which packs a whole q8_0, q4_0, f16 or
   bf16 matrix into its panels' layout once, when the model loads (the CPU backend keeps the copy:
   gpt2__weight.lanes). Every product of that matrix, a single token's included, then multiplies
   the lanes in place (int8 activations for q8_0 and q4_0, x as it is for f16 and bf16, or x
   rounded to bf16 for a bf16 prompt on the bf16 unit): no packing per product, and the same bytes
   per weight as the file (gpt2__lanes_bytes: the rows rounded up to gpt2__panel_rows, bf16's
   columns to an even count). Lanes are made only by the
   process's own set (gpt2__cpu_kernels), and every set with pack_lanes shares its layout. */
static const int gpt2__lane_rows = 16;
/* Whether pack_lanes takes matrices of this type: q8_0, q4_0, and the 16-bit floats f16 and bf16
   (whose lanes hold their values column by column, or bf16's by pairs of columns). */
static constexpr bool gpt2__float16_lanes(uint32_t type) { return type == GPT2_TYPE_F16 || type == GPT2_TYPE_BF16; }
static inline bool gpt2__lanes_type(uint32_t type) { return gpt2__int8_weights(type) || gpt2__float16_lanes(type); }
/* Columns of a 16-bit matrix's lanes: bf16's go in pairs, an odd count padded with a zero. */
static inline int64_t gpt2__lanes_columns(const gpt2__weight& W) { return W.type == GPT2_TYPE_BF16 ? (W.cols + 1) / 2 * 2 : W.cols; }
static inline size_t gpt2__lanes_bytes(const gpt2__weight& W) {
    const size_t rows = (size_t)(W.rows + gpt2__panel_rows - 1) / gpt2__panel_rows * gpt2__panel_rows;
    if (gpt2__float16_lanes(W.type)) return rows * (size_t)gpt2__lanes_columns(W) * 2;
    const size_t block_bytes = W.type == GPT2_TYPE_Q4_0 ? gpt2__q4_block_bytes : gpt2__q8_block_bytes;
    return rows * (size_t)(W.cols / gpt2__q8_block_values) * block_bytes;
}
/* Bytes of one activation row of `cols` values packed by quantize_q8_packed. */
static inline size_t gpt2__q8_packed_row_bytes(int64_t cols) { return (size_t)cols + (size_t)cols / gpt2__q8_block_values * 8; }

/* How one product multiplies. gpt2__strategy_for (forward.h) chooses it, once per product, from
   W's type, the rows and what the kernel set has; a set reads it and infers nothing. A set that
   lacks a strategy is never handed it (its kernel in gpt2__kernels.matmul is NULL). */
enum gpt2__strategy : uint8_t {
    GPT2__STREAM_ROWS,   /* decode: W read row by row in its own type, each row's dot products with every token of x */
    GPT2__STREAM_INT8,   /* decode: q8_0 or q4_0 rows the same way against xq, the tokens quantized per block (integer dot products) */
    GPT2__FLOAT_TILES,   /* prefill: W converted to floats a panel at a time, multiplied with tiles of tokens (x86; SIMD128, NEON and scalar widen a row at a time) */
    GPT2__INT8_PANELS,   /* q8_0 or q4_0 W in int8 panels (its lanes, or packed per product) times xq_packed, any number of tokens */
    GPT2__FLOAT16_LANES, /* f16 or bf16 W's lanes, in place, times x, any number of tokens */
    GPT2__BF16_UNIT,     /* bf16 W's lanes times x rounded to bf16 (x_bf16) on the bf16 unit: a prompt */
    GPT2__FLOAT16_PROMPT, /* f16 or bf16 W's lanes times a prompt's x: one sum per output, wider tiles */
    gpt2__strategies
};

/* The arguments of one matrix multiplication, y (T, W.rows) = x (T, W.cols) W^T + bias.
   A kernel computes the output columns [o_begin, o_end) of every token; the threads of a
   session split the rows of W between them. Every output is computed in the same order
   whichever range it falls in, so results never depend on the number of threads. */
struct gpt2__matmul_args {
    float* y;                  /* (T, W->rows) */
    const float* x;            /* (T, W->cols) */
    const int8_t* xq;          /* GPT2__STREAM_INT8: x quantized by gpt2__quantize_q8 */
    const float* xq_scale;     /*   and its blocks' scales */
    const gpt2__weight* W;
    const float* bias;         /* (W->rows) or NULL */
    int T;
    bool accumulate;           /* y += x W^T + bias (the residual connection) instead of y = */
    gpt2__strategy strategy = GPT2__STREAM_ROWS;
    const uint8_t* xq_packed = nullptr; /* GPT2__INT8_PANELS: x packed by the set's quantize_q8_packed */
    const uint16_t* x_bf16 = nullptr; /* GPT2__BF16_UNIT: x rounded to bf16, rows of gpt2__lanes_columns(*W) values */
    const float* x_tiles = nullptr;   /* GPT2__FLOAT16_LANES: x packed by the set's pack_tile_rows, where it packs them */
};

/* A batch's decode rows share panels, as a prompt's tokens do, once there are this many of them:
   each panel converted once serves them all, where streamed rows convert and re-read every
   weight row once per session (docs/PERFORMANCE.md, Kernel notes). Fewer stream W together, each weight row
   read from memory once for all of them and its dot products with every row those a lone
   session computes, so bit for bit the lone results. */
static const int gpt2__panel_min_rows = 4;

/* Prefill multiplies gpt2__tile_rows rows of W at a time (converted to a float panel unless f32)
   with tiles of a few tokens, whose products stay in registers, over chunks of about
   gpt2__chunk_tokens tokens. */
static const int gpt2__tile_rows = 4, gpt2__chunk_tokens = 64;

/* Floats of per-thread scratch a matmul kernel may use as its weight panel, for rows of `cols`:
   gpt2__tile_rows rows as floats, gpt2__panel_rows rows as an int8 panel, or a chunk of tokens
   rounded to bf16 (the bf16 unit's activations, avx512_bf16.h). */
static size_t gpt2__panel_floats(int64_t cols) {
    const size_t int8_panel = (size_t)cols / gpt2__q8_block_values * gpt2__q8_panel_row_block_bytes * gpt2__panel_rows / 4;
    return std::max({(size_t)cols * gpt2__tile_rows, int8_panel, (size_t)(cols + 1) * gpt2__chunk_tokens / 2});
}

/* ---- Attention --------------------------------------------------------------------------- */

/* Prefill attention (attend) takes up to gpt2__query_block queries of one head per call (the
   AVX-512 set a query per vector lane); its `scores` hold gpt2__query_scratch(n_keys + n_queries
   - 1) floats: a row per query, or a vector of the block's queries per key, rounded up to a
   multiple of 4 keys. */
static const int gpt2__query_block = 16;
static size_t gpt2__query_scratch(int n_keys) { return (size_t)gpt2__query_block * ((size_t)n_keys + 3); }

/* Decode attention (attend_rows) covers one range of a query's keys; gpt2__merge_attention joins
   up to gpt2__max_key_ranges of them. */
static const int gpt2__max_key_ranges = 4;

/* The KV cache is held in blocks of gpt2__kv_block_rows positions (src/cpu/kv_cache.h), and the
   attention kernels read one layer's keys or values through this view of them: the row of
   position j at blocks[j / gpt2__kv_block_rows] + offset + (j % gpt2__kv_block_rows) * stride
   values. A block's rows are contiguous, so the gpt2__kv_row_group rows from a multiple of it lie
   one after another: decode attention's ranges start at such a multiple (gpt2__key_range), and
   a kernel may address a group of 8 keys (or 4, or 2) from its first. 64 rows: decode at 1,000
   positions reads 16- and 32-row blocks ~4% slower (docs/PERFORMANCE.md). */
static const int gpt2__kv_block_rows = 64, gpt2__kv_row_group = 8;
static_assert(gpt2__kv_block_rows % gpt2__kv_row_group == 0, "a group of rows lies in one block");
template <class KV>
struct gpt2__kv_rows {
    const uint8_t* const* blocks;
    size_t offset; /* in values: the layer's keys or values within a block, and a head's within a row */
    size_t stride; /* values from a row to the next */
    const KV* row(int j) const {
        return (const KV*)blocks[(unsigned)j / gpt2__kv_block_rows] + offset + (size_t)((unsigned)j % gpt2__kv_block_rows) * stride;
    }
    gpt2__kv_rows at(size_t values) const { return {blocks, offset + values, stride}; } /* e.g. a head's */
};

/* The view of n_rows rows laid out one after another from `rows` (the kernels' tests and
   benchmarks): `table` receives a pointer per gpt2__kv_block_rows rows. */
template <class KV>
static gpt2__kv_rows<KV> gpt2__kv_rows_contiguous(const KV* rows, int n_rows, size_t stride, gpt2__vector<const uint8_t*>* table) {
    table->clear();
    for (int b = 0; b * gpt2__kv_block_rows < n_rows; b++) table->push_back((const uint8_t*)(rows + (size_t)b * gpt2__kv_block_rows * stride));
    return {table->data(), 0, stride};
}

/* ---- Constants of exp and GELU, one definition for every set ------------------------------ */

/* GELU, both of GPT-2's forms: 0.5 x (1 + erf(x / sqrt 2)), or the tanh form
   0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))). */
static constexpr float gpt2__sqrt_half = 0.7071067811865476f, gpt2__sqrt_2_over_pi = 0.7978845608028654f, gpt2__gelu_cubic = 0.044715f;

/* erf(z), z >= 0, as 1 - t P(t) e^(-z^2) with t = 1 / (1 + gpt2__erf_p z) (Abramowitz & Stegun
   7.1.26, absolute error < 1.5e-7); P's coefficients from the highest power down, P(0) = 0. */
static constexpr float gpt2__erf_p = 0.3275911f;
static constexpr float gpt2__erf_poly[5] = {1.061405429f, -1.453152027f, 1.421413741f, -0.284496736f, 0.254829592f};

/* e^x for x clamped to [gpt2__exp_min, gpt2__exp_max], to about 2 ulp (Cephes' expf): 2^n e^r
   with n = round(x log2 e) and r = x - n ln 2 (ln 2 in two parts, the first exact in float),
   e^r = 1 + r + r^2 P(r); P's coefficients from the highest power down. */
static constexpr float gpt2__exp_min = -87.3f, gpt2__exp_max = 88.3f, gpt2__log2e = 1.44269504088896341f;
static constexpr float gpt2__ln2_hi = 0.693359375f, gpt2__ln2_lo = -2.12194440e-4f;
static constexpr float gpt2__exp_poly[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f, 4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};

/* ---- The table a kernel set fills --------------------------------------------------------- */

/* Attention kernels for a KV cache of floats or f16 (uint16_t), each set's one template
   instantiated for both. */
template <class KV>
using gpt2__attend_fn = void (*)(float* out, size_t out_stride, const float* q, size_t q_stride, gpt2__kv_rows<KV> k, gpt2__kv_rows<KV> v, int n_keys, int n_queries, int head_dim, float* scores);
template <class KV>
using gpt2__attend_rows_fn = void (*)(float* out, float* stats, const float* q, gpt2__kv_rows<KV> k, gpt2__kv_rows<KV> v, int first, int n_keys, int n_head, int head_dim, float* scratch);

/* A matmul kernel: the output columns [o_begin, o_end) of a.y; `panel` holds
   gpt2__panel_floats(a.W->cols). */
typedef void (*gpt2__matmul_fn)(const gpt2__matmul_args& a, int64_t o_begin, int64_t o_end, float* panel);

struct gpt2__kernels {
    const char* name;
    /* the kernel of each strategy, in gpt2__strategy's order; NULL where the set lacks it. Every
       set streams rows; GPT2__INT8_PANELS comes with quantize_q8_packed, GPT2__FLOAT16_LANES
       with pack_lanes. */
    gpt2__matmul_fn matmul[gpt2__strategies];
    /* x (n, a multiple of gpt2__q8_block_values) to int8 blocks q and their scales, bit for bit
       as gpt2__quantize_q8_scalar */
    void (*quantize_q8)(int8_t* q, float* scale, const float* x, int64_t n);
    /* NULL, or `rows` rows of x (rows, cols) quantized as quantize_q8 does and packed for the
       set's int8 panels (gpt2__q8_packed_row_bytes each) */
    void (*quantize_q8_packed)(uint8_t* dst, const float* x, int rows, int64_t cols);
    /* prefill attention, as gpt2__attend_scalar */
    gpt2__attend_fn<float> attend_f32;
    gpt2__attend_fn<uint16_t> attend_f16;
    /* decode attention, as gpt2__attend_rows_scalar */
    gpt2__attend_rows_fn<float> attend_rows_f32;
    gpt2__attend_rows_fn<uint16_t> attend_rows_f16;
    /* GELU in place on n values */
    void (*gelu)(float* x, size_t n, bool tanh_form);
    /* nanoGPT's LayerNorm of n values, as gpt2__layer_norm */
    void (*layer_norm)(float* out, const float* x, const float* weight, const float* bias, int n, float eps);
    /* n floats to f16 bit for bit as gpt2__f32_to_f16 (the f16 KV cache's writes) */
    void (*to_f16)(uint16_t* dst, const float* x, size_t n);
    /* NULL, or W (gpt2__lanes_type) packed into its lanes at dst (gpt2__lanes_bytes(W), 64-byte aligned) */
    void (*pack_lanes)(uint8_t* dst, const gpt2__weight& W);
    /* NULL, or whether the set's kernel for a.strategy reads the activations of `a` packed
       (x_tiles; only GPT2__FLOAT16_LANES may), and if so they packed at dst (a.T x W->cols floats) */
    bool (*pack_tile_rows)(float* dst, const gpt2__matmul_args& a);
};

/* Whether a product of W on `kernels` multiplies W's lanes (made at load), for any number of rows. */
static inline bool gpt2__uses_lanes(const gpt2__kernels* kernels, const gpt2__weight& W) { return W.lanes && kernels->pack_lanes; }

#endif /* GPT2__PART_CPU_KERNELS_CONTRACT_H */
