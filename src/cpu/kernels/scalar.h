#ifndef GPT2__PART_CPU_KERNELS_SCALAR_H
#define GPT2__PART_CPU_KERNELS_SCALAR_H
#include "contract.h"

/* Portable kernels: small pure functions over pointers and sizes. They define the results the
   SIMD kernels must reproduce, and run wherever no SIMD kernel applies. */

/* Converts n 16-bit values (f16 or bf16, by `to_f32`) to float. */
static void gpt2__widen_row(const uint8_t* row, float* out, int64_t n, float (*to_f32)(uint16_t)) {
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        std::memcpy(&h, row + 2 * i, 2);
        out[i] = to_f32(h);
    }
}

/* Value i of a q8_0 or q4_0 block, before its scale: q8_0's byte, or q4_0's nibble - 8 (value j in
   byte j's low nibble, value j + 16 in its high one). */
static inline int gpt2__block_value(uint32_t type, const uint8_t* block, int i) {
    if (type == GPT2_TYPE_Q8_0) return gpt2__q8_values(block)[i];
    const uint8_t byte = gpt2__q4_nibbles(block)[i % (gpt2__q4_block_values / 2)];
    return (i < gpt2__q4_block_values / 2 ? byte & 15 : byte >> 4) - 8;
}

/* Converts one row of `n` values of any weight type to float. */
static void gpt2__dequantize_row(uint32_t type, const uint8_t* row, float* out, int64_t n) {
    switch (type) {
    case GPT2_TYPE_F32:
        std::memcpy(out, row, (size_t)n * 4);
        break;
    case GPT2_TYPE_F16:
        gpt2__widen_row(row, out, n, gpt2__f16_to_f32);
        break;
    case GPT2_TYPE_BF16:
        gpt2__widen_row(row, out, n, gpt2__bf16_to_f32);
        break;
    case GPT2_TYPE_Q8_0:
    case GPT2_TYPE_Q4_0: { /* both blocks: 32 values after one f16 scale */
        const size_t block_bytes = type == GPT2_TYPE_Q8_0 ? gpt2__q8_block_bytes : gpt2__q4_block_bytes;
        for (int64_t b = 0; b < n / gpt2__q8_block_values; b++) {
            const uint8_t* block = row + block_bytes * b;
            const float scale = gpt2__f16_to_f32(gpt2__q8_scale_f16(block));
            for (int i = 0; i < gpt2__q8_block_values; i++) out[gpt2__q8_block_values * b + i] = scale * (float)gpt2__block_value(type, block, i);
        }
        break;
    }
    default:
        GPT2_ASSERT(!"unknown weight type");
    }
}

/* Quantizes n values (n a multiple of gpt2__q8_block_values) to blocks of int8 with one float
   scale each, q = round(x * 127 / max|x|), the activation side of q8_0 x q8_0 dot products. Every
   kernel set quantizes with these same float operations, so the result is identical everywhere. */
static void gpt2__quantize_q8_scalar(int8_t* q, float* scale, const float* x, int64_t n) {
    const int B = gpt2__q8_block_values;
    for (int64_t b = 0; b < n / B; b++) {
        float amax = 0.0f;
        for (int i = 0; i < B; i++) amax = std::max(amax, std::fabs(x[B * b + i]));
        const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
        scale[b] = amax / 127.0f;
        for (int i = 0; i < B; i++) q[B * b + i] = (int8_t)std::nearbyint(x[B * b + i] * inv);
    }
}

/* Dot product of one weight row (any type) with a float vector of length n. */
static float gpt2__dot_row_scalar(uint32_t type, const uint8_t* row, const float* x, int64_t n) {
    float sum = 0.0f;
    switch (type) {
    case GPT2_TYPE_F32: {
        const float* w = (const float*)row;
        for (int64_t i = 0; i < n; i++) sum += w[i] * x[i];
        break;
    }
    case GPT2_TYPE_F16:
    case GPT2_TYPE_BF16:
    case GPT2_TYPE_Q8_0:
    case GPT2_TYPE_Q4_0: {
        float buffer[256];
        for (int64_t start = 0; start < n; start += 256) {
            const int64_t len = std::min<int64_t>(256, n - start);
            const size_t offset = type == GPT2_TYPE_Q8_0   ? (size_t)start / gpt2__q8_block_values * gpt2__q8_block_bytes
                                  : type == GPT2_TYPE_Q4_0 ? (size_t)start / gpt2__q4_block_values * gpt2__q4_block_bytes
                                                           : (size_t)start * 2;
            gpt2__dequantize_row(type, row + offset, buffer, len);
            for (int64_t i = 0; i < len; i++) sum += buffer[i] * x[start + i];
        }
        break;
    }
    default:
        GPT2_ASSERT(!"unknown weight type");
    }
    return sum;
}

/* A q8_0 or q4_0 (TYPE) weight row against activations quantized by gpt2__quantize_q8: exact
   integer sums per block of value x, scaled by both blocks' scales. */
template <uint32_t TYPE>
static float gpt2__dot_int8_scalar(const uint8_t* row, const int8_t* xq, const float* xscale, int64_t n) {
    const int B = gpt2__q8_block_values;
    const size_t block_bytes = TYPE == GPT2_TYPE_Q8_0 ? gpt2__q8_block_bytes : gpt2__q4_block_bytes;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / B; b++) {
        const uint8_t* block = row + block_bytes * b;
        int32_t isum = 0;
        for (int i = 0; i < B; i++) isum += gpt2__block_value(TYPE, block, i) * (int32_t)xq[B * b + i];
        sum += (float)isum * (gpt2__f16_to_f32(gpt2__q8_scale_f16(block)) * xscale[b]);
    }
    return sum;
}
static float gpt2__dot_q8_scalar(const uint8_t* row, const int8_t* xq, const float* xscale, int64_t n) { return gpt2__dot_int8_scalar<GPT2_TYPE_Q8_0>(row, xq, xscale, n); }
static float gpt2__dot_q4_scalar(const uint8_t* row, const int8_t* xq, const float* xscale, int64_t n) { return gpt2__dot_int8_scalar<GPT2_TYPE_Q4_0>(row, xq, xscale, n); }

/* The streamed strategies (GPT2__STREAM_ROWS, GPT2__STREAM_INT8) of any row dot kernels (q8_0 and
   q4_0 rows against int8 activations, any row against floats), one output row at a time: the
   portable set below, and the NEON set, whose speed lies in its dot kernels alone. */
template <float (*DotQ8)(const uint8_t*, const int8_t*, const float*, int64_t), float (*DotQ4)(const uint8_t*, const int8_t*, const float*, int64_t),
          float (*DotRow)(uint32_t, const uint8_t*, const float*, int64_t)>
static void gpt2__matmul_by_rows(const gpt2__matmul_args& a, int64_t o_begin, int64_t o_end) {
    /* a's fields copied once: the stores to y may alias them, so read through `a` they would be
       reloaded every row */
    const gpt2__weight W = *a.W;
    const float *x = a.x, *bias = a.bias, *xq_scale = a.xq_scale;
    const int8_t* xq = a.xq;
    float* y = a.y;
    const int T = a.T;
    const bool accumulate = a.accumulate, int8 = a.strategy == GPT2__STREAM_INT8;
    float (*const dot_int8)(const uint8_t*, const int8_t*, const float*, int64_t) = W.type == GPT2_TYPE_Q4_0 ? DotQ4 : DotQ8;
    for (int64_t o = o_begin; o < o_end; o++) {
        const uint8_t* row = W.data + (size_t)o * W.row_bytes;
        for (int t = 0; t < T; t++) {
            float v = (bias ? bias[o] : 0.0f);
            v += int8 ? dot_int8(row, xq + (size_t)t * W.cols, xq_scale + (size_t)t * (W.cols / gpt2__q8_block_values), W.cols)
                      : DotRow(W.type, row, x + (size_t)t * W.cols, W.cols);
            float* out = y + (size_t)t * W.rows + o;
            *out = accumulate ? *out + v : v;
        }
    }
}

static void gpt2__matmul_rows_scalar(const gpt2__matmul_args& a, int64_t o_begin, int64_t o_end, float* panel) {
    (void)panel;
    gpt2__matmul_by_rows<gpt2__dot_q8_scalar, gpt2__dot_q4_scalar, gpt2__dot_row_scalar>(a, o_begin, o_end);
}

/* GPT2__FLOAT_TILES of the sets without tiles (scalar, NEON, WebAssembly): a row that is not f32
   converted to floats once (Widen, exact), into `panel` (gpt2__panel_floats), for all the prompt's
   tokens, instead of once a token. DotRow's products of the floats are those it makes of the row
   in its own type, in the same order, so a prompt gives the streamed rows' bits. */
template <float (*DotRow)(uint32_t, const uint8_t*, const float*, int64_t), void (*Widen)(uint32_t, const uint8_t*, float*, int64_t) = gpt2__dequantize_row>
static void gpt2__matmul_widened_rows(const gpt2__matmul_args& a, int64_t o_begin, int64_t o_end, float* panel) {
    const gpt2__weight W = *a.W; /* copied: the stores to y may alias a's fields (gpt2__matmul_by_rows) */
    const float *x = a.x, *bias = a.bias;
    float* y = a.y;
    const int T = a.T;
    const bool accumulate = a.accumulate;
    for (int64_t o = o_begin; o < o_end; o++) {
        const uint8_t* row = W.data + (size_t)o * W.row_bytes;
        if (W.type != GPT2_TYPE_F32) {
            Widen(W.type, row, panel, W.cols);
            row = (const uint8_t*)panel;
        }
        for (int t = 0; t < T; t++) {
            const float v = (bias ? bias[o] : 0.0f) + DotRow(GPT2_TYPE_F32, row, x + (size_t)t * W.cols, W.cols);
            float* out = y + (size_t)t * W.rows + o;
            *out = accumulate ? *out + v : v;
        }
    }
}

/* The sum of f(x[i]) in double, in 8 chains added at the end: one chain waits on each add's
   latency (docs/PERFORMANCE.md, Kernel notes). */
template <class F>
static double gpt2__sum_double(const float* x, int n, const F& f) {
    double chain[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) chain[j] += f(x[i + j]);
    for (; i < n; i++) chain[i % 8] += f(x[i]);
    return ((chain[0] + chain[1]) + (chain[2] + chain[3])) + ((chain[4] + chain[5]) + (chain[6] + chain[7]));
}

/* nanoGPT's LayerNorm: (x - mean) / sqrt(var + eps) * weight + bias, biased variance. */
static void gpt2__layer_norm(float* out, const float* x, const float* weight, const float* bias, int n, float eps) {
    const double mean = gpt2__sum_double(x, n, [](float v) { return (double)v; }) / n;
    const double var = gpt2__sum_double(x, n, [mean](float v) { return (v - mean) * (v - mean); }) / n;
    const float inv_std = (float)(1.0 / std::sqrt(var + eps));
    if (bias) /* apart, so the compiler vectorizes each */
        for (int i = 0; i < n; i++) out[i] = (float)(x[i] - mean) * inv_std * weight[i] + bias[i];
    else
        for (int i = 0; i < n; i++) out[i] = (float)(x[i] - mean) * inv_std * weight[i] + 0.0f; /* a zero bias's sum: -0 as +0 */
}

static void gpt2__gelu_scalar(float* x, size_t n, bool tanh_form) {
    if (tanh_form) {
        for (size_t i = 0; i < n; i++) x[i] = 0.5f * x[i] * (1.0f + std::tanh(gpt2__sqrt_2_over_pi * (x[i] + gpt2__gelu_cubic * x[i] * x[i] * x[i])));
    } else {
        for (size_t i = 0; i < n; i++) x[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * gpt2__sqrt_half));
    }
}

static void gpt2__add(float* y, const float* x, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] += x[i];
}

/* KV cache entries are float or f16; attention reads both through these. */
static inline float gpt2__load_kv(const float* p, size_t i) { return p[i]; }
static inline float gpt2__load_kv(const uint16_t* p, size_t i) { return gpt2__f16_to_f32(p[i]); }

static void gpt2__to_f16_scalar(uint16_t* dst, const float* x, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = gpt2__f32_to_f16(x[i]);
}

/* Attention has two kernels, as the matrix products have two shapes: one head at a time for
   prefill, whose keys were just written and sit in cache, so the arithmetic counts (a block of
   up to gpt2__query_block queries shares each key it loads); and all heads at once for decode,
   whose keys come from memory, so the order of the reads counts (gpt2__attend_rows_scalar).

   One head of causal attention for one query: softmax(q . k_j / sqrt(d)) over the rows j of
   [first, first + n_keys), then the weighted sum of v_j; `scores` has n_keys entries. */
template <class KV>
static void gpt2__attend_query_scalar(float* out, const float* q, gpt2__kv_rows<KV> k, gpt2__kv_rows<KV> v, int first, int n_keys, int head_dim, float* scores,
                                      float* stats = nullptr) {
    const float scale = 1.0f / std::sqrt((float)head_dim);
    float max_score = -INFINITY;
    for (int j = 0; j < n_keys; j++) {
        const KV* kj = k.row(first + j);
        float s = 0.0f;
        for (int d = 0; d < head_dim; d++) s += q[d] * gpt2__load_kv(kj, (size_t)d);
        scores[j] = s * scale;
        max_score = std::max(max_score, scores[j]);
    }
    float sum = 0.0f;
    for (int j = 0; j < n_keys; j++) {
        scores[j] = std::exp(scores[j] - max_score);
        sum += scores[j];
    }
    if (stats) stats[0] = max_score, stats[1] = sum; /* for gpt2__attend_rows_scalar */
    const float inv_sum = 1.0f / sum;
    for (int d = 0; d < head_dim; d++) out[d] = 0.0f;
    for (int j = 0; j < n_keys; j++) {
        const KV* vj = v.row(first + j);
        const float p = scores[j] * inv_sum;
        for (int d = 0; d < head_dim; d++) out[d] += p * gpt2__load_kv(vj, (size_t)d);
    }
}

/* Causal attention of one head for n_queries <= gpt2__query_block consecutive queries: query i
   (at q + i * q_stride) attends rows 0 .. n_keys + i - 1 of k and v and writes out + i *
   out_stride. `scores` holds gpt2__query_scratch(n_keys + n_queries - 1) floats. */
template <class KV>
static void gpt2__attend_scalar(float* out, size_t out_stride, const float* q, size_t q_stride, gpt2__kv_rows<KV> k, gpt2__kv_rows<KV> v, int n_keys, int n_queries,
                                int head_dim, float* scores) {
    for (int i = 0; i < n_queries; i++) gpt2__attend_query_scalar(out + i * out_stride, q + i * q_stride, k, v, 0, n_keys + i, head_dim, scores);
}

/* All heads of one query, over rows [first, first + n_keys) of one layer's cache, each row
   holding its key's (or value's) n_head heads side by side (n_head * head_dim values), as q and
   out do. For each head h: out[h] = sum_j p_j v_j[h], p = softmax_j(q[h] . k_j[h] /
   sqrt(head_dim)); stats[2h] = the largest score and stats[2h + 1] = sum_j exp(score_j -
   largest), with which gpt2__merge_attention joins consecutive key ranges. `scratch` holds
   n_keys * n_head floats. */
template <class KV>
static void gpt2__attend_rows_scalar(float* out, float* stats, const float* q, gpt2__kv_rows<KV> k, gpt2__kv_rows<KV> v, int first, int n_keys, int n_head, int head_dim,
                                     float* scratch) {
    for (int h = 0; h < n_head; h++) {
        const size_t at = (size_t)h * head_dim;
        gpt2__attend_query_scalar(out + at, q + at, k.at(at), v.at(at), first, n_keys, head_dim, scratch, stats + 2 * h);
    }
}

/* Attention over up to gpt2__max_key_ranges consecutive key ranges, joined: `parts` holds
   n_parts blocks of the n_head * head_dim outputs and 2 * n_head stats of gpt2__attend_rows_scalar;
   each range's output counts by its share of the whole softmax denominator. */
static void gpt2__merge_attention(float* out, const float* parts, int n_parts, int n_head, int head_dim) {
    const size_t row = (size_t)n_head * head_dim, part = row + 2 * (size_t)n_head;
    for (int h = 0; h < n_head; h++) {
        float max_score = -INFINITY, denominator = 0.0f, weight[gpt2__max_key_ranges];
        for (int p = 0; p < n_parts; p++) max_score = std::max(max_score, parts[p * part + row + 2 * h]);
        for (int p = 0; p < n_parts; p++) denominator += weight[p] = std::exp(parts[p * part + row + 2 * h] - max_score) * parts[p * part + row + 2 * h + 1];
        float* o = out + (size_t)h * head_dim;
        for (int d = 0; d < head_dim; d++) o[d] = 0.0f;
        for (int p = 0; p < n_parts; p++) {
            const float share = weight[p] / denominator;
            for (int d = 0; d < head_dim; d++) o[d] += share * parts[p * part + (size_t)h * head_dim + d];
        }
    }
}

#endif /* GPT2__PART_CPU_KERNELS_SCALAR_H */
