#ifndef GPT2__PART_CPU_FORWARD_REFERENCE_H
#define GPT2__PART_CPU_FORWARD_REFERENCE_H
#include "forward.h"

/* The reference forward pass: nanoGPT's model.py as plain loops over f32 arrays. One thread,
   no SIMD, no KV cache, no session: every call computes all T positions from scratch. The
   tests check every kernel set, the prefill and decode paths and the GPU against it, so it
   is written to be read, not to be fast. Compiled only under GPT2_REFERENCE_FORWARD.
   Shapes in comments: T tokens, C = n_embd, H heads of D = C / H, F = n_ff, V = n_vocab. */
#if defined(GPT2_REFERENCE_FORWARD)

/* y (T, n_out) = x (T, W.cols) W[0..n_out)^T + bias, W turned into f32 one row at a time. */
static void gpt2__reference_linear(float* y, const float* x, const gpt2__weight& W, const float* bias, int T, int64_t n_out) {
    const int64_t n_in = W.cols;
    gpt2__vector<float> w((size_t)n_in);
    for (int64_t o = 0; o < n_out; o++) {
        gpt2__dequantize_row(W.type, W.data + o * W.row_bytes, w.data(), n_in);
        for (int t = 0; t < T; t++) {
            float sum = bias ? bias[o] : 0.0f;
            for (int64_t i = 0; i < n_in; i++) sum += x[t * n_in + i] * w[i];
            y[t * n_out + o] = sum;
        }
    }
}

/* out (T, C) = (x - mean) / sqrt(var + eps) * weight + bias, row by row, biased variance. */
static void gpt2__reference_layer_norm(const gpt2_model* m, float* out, const float* x, const float* weight, const float* bias, int T) {
    const int C = m->n_embd;
    for (int t = 0; t < T; t++) {
        const float* xt = x + t * C;
        float mean = 0.0f, var = 0.0f;
        for (int i = 0; i < C; i++) mean += xt[i];
        mean /= C;
        for (int i = 0; i < C; i++) var += (xt[i] - mean) * (xt[i] - mean);
        var /= C;
        const float inv_std = 1.0f / std::sqrt(var + m->layer_norm_eps);
        for (int i = 0; i < C; i++) out[t * C + i] = (xt[i] - mean) * inv_std * weight[i] + (bias ? bias[i] : 0.0f);
    }
}

/* CausalSelfAttention: x (T, C) -> y (T, C). */
static void gpt2__reference_attn(const gpt2_model* m, const gpt2__layer& L, float* y, const float* x, int T) {
    const int C = m->n_embd, H = m->n_head, D = C / H;
    gpt2__vector<float> qkv((size_t)T * 3 * C), att((size_t)T * C), p((size_t)T);
    gpt2__reference_linear(qkv.data(), x, L.c_attn, L.c_attn_bias, T, 3 * C); /* (T, 3C): q, k, v side by side */
    for (int h = 0; h < H; h++) {
        for (int t = 0; t < T; t++) {
            const float* q = &qkv[t * 3 * C + h * D];
            /* p (t + 1) = softmax(q k^T / sqrt(D)) over keys 0..t: the causal mask */
            float max_score = -INFINITY, sum = 0.0f;
            for (int j = 0; j <= t; j++) {
                const float* k = &qkv[j * 3 * C + C + h * D];
                float score = 0.0f;
                for (int d = 0; d < D; d++) score += q[d] * k[d];
                p[j] = score / std::sqrt((float)D);
                max_score = std::max(max_score, p[j]);
            }
            for (int j = 0; j <= t; j++) sum += p[j] = std::exp(p[j] - max_score);
            for (int j = 0; j <= t; j++) p[j] /= sum;
            /* att (D) of query t, head h = p v */
            float* out = &att[t * C + h * D];
            for (int d = 0; d < D; d++) out[d] = 0.0f;
            for (int j = 0; j <= t; j++) {
                const float* v = &qkv[j * 3 * C + 2 * C + h * D];
                for (int d = 0; d < D; d++) out[d] += p[j] * v[d];
            }
        }
    }
    gpt2__reference_linear(y, att.data(), L.c_proj, L.c_proj_bias, T, C);
}

/* MLP: x (T, C) -> y (T, C) = c_proj(gelu(c_fc(x))), GELU in the model's form. */
static void gpt2__reference_mlp(const gpt2_model* m, const gpt2__layer& L, float* y, const float* x, int T) {
    gpt2__vector<float> h((size_t)T * m->n_ff); /* (T, F) */
    gpt2__reference_linear(h.data(), x, L.c_fc, L.c_fc_bias, T, m->n_ff);
    for (float& v : h) {
        if (m->gelu_tanh) v = 0.5f * v * (1.0f + std::tanh(0.7978845608028654f * (v + 0.044715f * v * v * v))); /* sqrt(2 / pi) */
        else v = 0.5f * v * (1.0f + std::erf(v * 0.7071067811865476f));                                       /* 1 / sqrt(2) */
    }
    gpt2__reference_linear(y, h.data(), L.mlp_proj, L.mlp_proj_bias, T, m->n_embd);
}

/* logits (T, V) of ids[0..T) at positions 0..T-1, T <= n_ctx. */
[[maybe_unused]] static void gpt2__forward_reference(const gpt2_model* m, const int32_t* ids, int T, float* logits) {
    GPT2_ASSERT(T >= 1 && T <= m->n_ctx);
    const int C = m->n_embd;
    gpt2__vector<float> x((size_t)T * C), xn((size_t)T * C), y((size_t)T * C), position((size_t)C);
    for (int t = 0; t < T; t++) { /* x (T, C) = wte[ids] + wpe[0..T) */
        gpt2__dequantize_row(m->wte.type, m->wte.data + ids[t] * m->wte.row_bytes, &x[t * C], C);
        gpt2__dequantize_row(m->wpe.type, m->wpe.data + t * m->wpe.row_bytes, position.data(), C);
        for (int i = 0; i < C; i++) x[t * C + i] += position[i];
    }
    for (const gpt2__layer& L : m->layers) {
        gpt2__reference_layer_norm(m, xn.data(), x.data(), L.ln_1_weight, L.ln_1_bias, T); /* x = x + attn(ln_1(x)) */
        gpt2__reference_attn(m, L, y.data(), xn.data(), T);
        for (size_t i = 0; i < x.size(); i++) x[i] += y[i];
        gpt2__reference_layer_norm(m, xn.data(), x.data(), L.ln_2_weight, L.ln_2_bias, T); /* x = x + mlp(ln_2(x)) */
        gpt2__reference_mlp(m, L, y.data(), xn.data(), T);
        for (size_t i = 0; i < x.size(); i++) x[i] += y[i];
    }
    gpt2__reference_layer_norm(m, xn.data(), x.data(), m->ln_f_weight, m->ln_f_bias, T);
    /* lm_head is wte when the head is tied; rows past n_vocab are padding, never computed */
    gpt2__reference_linear(logits, xn.data(), m->lm_head, nullptr, T, m->n_vocab);
}

#endif /* GPT2_REFERENCE_FORWARD */

#endif /* GPT2__PART_CPU_FORWARD_REFERENCE_H */
