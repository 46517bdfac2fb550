// GPT-2-shaped models with random weights, written as a GGUF file in memory, for the CUDA
// benchmark and tests: no download, any of OpenAI's four sizes. Weights follow GPT-2's
// initialisation (normal, std 0.02; residual projections 0.02 / sqrt(2 n_layer)) with small
// random biases and LayerNorm parameters, so every part of the forward pass is exercised.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

struct random_gpt2_shape {
    const char* name;
    int n_layer, n_head, n_embd, n_ctx, n_vocab;
};

// OpenAI's GPT-2 sizes; nullptr when `name` is none of 124M, 355M, 774M, 1558M.
inline const random_gpt2_shape* random_gpt2_find_shape(const std::string& name) {
    static const random_gpt2_shape shapes[] = {
        {"124M", 12, 12, 768, 1024, 50257},
        {"355M", 24, 16, 1024, 1024, 50257},
        {"774M", 36, 20, 1280, 1024, 50257},
        {"1558M", 48, 25, 1600, 1024, 50257},
    };
    for (const random_gpt2_shape& s : shapes)
        if (name == s.name) return &s;
    return nullptr;
}

// A GGUF file in a 64-byte aligned buffer (gpt2_model_load_memory uses such a buffer in place).
struct random_gguf {
    uint8_t* data = nullptr;
    size_t size = 0;
    random_gguf() = default;
    random_gguf(const random_gguf&) = delete;
    random_gguf& operator=(const random_gguf&) = delete;
    ~random_gguf() { std::free(data); }
};

namespace random_gguf_detail {

inline uint64_t splitmix(uint64_t* s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

inline uint16_t f32_to_f16(float f) {  // round to nearest even; no subnormal care needed here
    uint32_t x;
    std::memcpy(&x, &f, 4);
    const uint32_t sign = (x >> 16) & 0x8000u, abs = x & 0x7fffffffu;
    if (abs < 0x38800000u) return (uint16_t)sign;  // tiny: flush to zero
    if (abs >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
    uint32_t h = (((abs >> 23) - 112) << 10) | ((abs & 0x7fffffu) >> 13);
    const uint32_t rest = abs & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1))) h++;
    return (uint16_t)(sign | h);
}

struct writer {
    std::vector<uint8_t> bytes;
    void raw(const void* p, size_t n) { bytes.insert(bytes.end(), (const uint8_t*)p, (const uint8_t*)p + n); }
    void u32(uint32_t v) { raw(&v, 4); }
    void u64(uint64_t v) { raw(&v, 8); }
    void str(const std::string& s) { u64(s.size()); raw(s.data(), s.size()); }
};

struct tensor {
    std::string name;
    uint64_t cols, rows;  // rows == 0: a vector of `cols`
    uint32_t type;        // 0 f32, 1 f16
    float mean, std;
    uint64_t offset, bytes;
};

}  // namespace random_gguf_detail

// GGUF's tensor types the model may use for its matrices.
enum { random_gguf_f32 = 0, random_gguf_f16 = 1, random_gguf_q8_0 = 8 };

// Bytes of a tensor of n values of `type` (q8_0: blocks of 32 values after an f16 scale).
inline uint64_t random_gguf_bytes(uint32_t type, uint64_t n) { return type == random_gguf_q8_0 ? n / 32 * 34 : n * (type == random_gguf_f16 ? 2 : 4); }

// Builds the model. weight_type: random_gguf_f32, _f16 or _q8_0 (quantized as
// gpt2-quantize does: scale max|x| / 127, values rounded) for the matrices; vectors are f32.
inline bool random_gpt2_gguf(const random_gpt2_shape& shape, uint32_t weight_type, uint64_t seed, random_gguf* out) {
    using namespace random_gguf_detail;
    const uint64_t C = (uint64_t)shape.n_embd, F = 4 * C, V = (uint64_t)shape.n_vocab;
    const float proj_std = 0.02f / std::sqrt(2.0f * (float)shape.n_layer);
    std::vector<tensor> ts;
    auto matrix = [&](std::string name, uint64_t rows, uint64_t cols, float std) { ts.push_back({name, cols, rows, weight_type, 0.0f, std, 0, 0}); };
    auto vector = [&](std::string name, uint64_t n, float mean, float std) { ts.push_back({name, n, 0, 0, mean, std, 0, 0}); };
    matrix("token_embd.weight", V, C, 0.02f);
    matrix("position_embd.weight", (uint64_t)shape.n_ctx, C, 0.01f);
    vector("output_norm.weight", C, 1.0f, 0.05f);
    vector("output_norm.bias", C, 0.0f, 0.02f);
    for (int l = 0; l < shape.n_layer; l++) {
        const std::string b = "blk." + std::to_string(l) + ".";
        vector(b + "attn_norm.weight", C, 1.0f, 0.05f);
        vector(b + "attn_norm.bias", C, 0.0f, 0.02f);
        matrix(b + "attn_qkv.weight", 3 * C, C, 0.02f);
        vector(b + "attn_qkv.bias", 3 * C, 0.0f, 0.02f);
        matrix(b + "attn_output.weight", C, C, proj_std);
        vector(b + "attn_output.bias", C, 0.0f, 0.02f);
        vector(b + "ffn_norm.weight", C, 1.0f, 0.05f);
        vector(b + "ffn_norm.bias", C, 0.0f, 0.02f);
        matrix(b + "ffn_up.weight", F, C, 0.02f);
        vector(b + "ffn_up.bias", F, 0.0f, 0.02f);
        matrix(b + "ffn_down.weight", C, F, proj_std);
        vector(b + "ffn_down.bias", C, 0.0f, 0.02f);
    }
    writer w;
    w.raw("GGUF", 4);
    w.u32(3);
    w.u64(ts.size());
    w.u64(10);
    auto kv_str = [&](const char* k, const std::string& v) { w.str(k); w.u32(8); w.str(v); };
    auto kv_u32 = [&](const char* k, uint32_t v) { w.str(k); w.u32(4); w.u32(v); };
    kv_u32("general.alignment", 64);  // the header is padded to 64 bytes below
    kv_str("general.architecture", "gpt2");
    kv_str("general.name", std::string("random-") + shape.name);
    kv_u32("gpt2.context_length", (uint32_t)shape.n_ctx);
    kv_u32("gpt2.embedding_length", (uint32_t)C);
    kv_u32("gpt2.block_count", (uint32_t)shape.n_layer);
    kv_u32("gpt2.attention.head_count", (uint32_t)shape.n_head);
    kv_u32("gpt2.feed_forward_length", (uint32_t)F);
    w.str("gpt2.attention.layer_norm_epsilon");
    w.u32(6);
    const float eps = 1e-5f;
    w.raw(&eps, 4);
    kv_str("gpt2h.gelu", "tanh");
    uint64_t offset = 0;
    for (tensor& t : ts) {
        t.offset = offset;
        t.bytes = random_gguf_bytes(t.type, (t.rows ? t.rows : 1) * t.cols);
        offset = (offset + t.bytes + 63) / 64 * 64;
        w.str(t.name);
        w.u32(t.rows ? 2 : 1);
        w.u64(t.cols);
        if (t.rows) w.u64(t.rows);
        w.u32(t.type);
        w.u64(t.offset);
    }
    const size_t header = (w.bytes.size() + 63) / 64 * 64;
    out->size = header + offset;
    out->data = (uint8_t*)std::aligned_alloc(64, (out->size + 63) / 64 * 64);
    if (!out->data) return false;
    std::memset(out->data, 0, header);
    std::memcpy(out->data, w.bytes.data(), w.bytes.size());

    // Values: a table of 4096 normal draws per tensor, indexed by random bits (fast enough for
    // 1.5 billion weights), filled by all cores.
    unsigned n_threads = std::max(1u, std::thread::hardware_concurrency());
    for (size_t i = 0; i < ts.size(); i++) {
        const tensor& t = ts[i];
        uint64_t s = seed * 1000003u + i;
        float table[4096];
        for (int k = 0; k < 4096; k += 2) {
            const double u1 = ((splitmix(&s) >> 11) + 1.0) / 9007199254740993.0, u2 = (splitmix(&s) >> 11) / 9007199254740992.0;
            const double r = std::sqrt(-2.0 * std::log(u1));
            table[k] = t.mean + t.std * (float)(r * std::cos(6.283185307179586 * u2));
            table[k + 1] = t.mean + t.std * (float)(r * std::sin(6.283185307179586 * u2));
        }
        uint16_t table16[4096];
        for (int k = 0; k < 4096; k++) table16[k] = f32_to_f16(table[k]);
        uint8_t* dst = out->data + header + t.offset;
        const uint64_t n = (t.rows ? t.rows : 1) * t.cols;
        auto fill = [&](uint64_t begin, uint64_t end, uint64_t stream) {
            uint64_t r = s ^ (stream * 0x632be59bd9b4e019ull);
            if (t.type == random_gguf_q8_0) { /* values begin..end, whole blocks */
                for (uint64_t j = begin; j < end; j += 32) {
                    float v[32], amax = 0.0f;
                    for (int q = 0; q < 32; q += 4) {
                        const uint64_t bits = splitmix(&r);
                        for (int u = 0; u < 4; u++) amax = std::max(amax, std::fabs(v[q + u] = table[(unsigned)(bits >> (16 * u)) & 4095u]));
                    }
                    const float d = amax / 127.0f, inv = amax > 0.0f ? 127.0f / amax : 0.0f;
                    uint8_t* block = dst + j / 32 * 34;
                    const uint16_t d16 = f32_to_f16(d);
                    std::memcpy(block, &d16, 2);
                    for (int q = 0; q < 32; q++) block[2 + q] = (uint8_t)(int8_t)std::lround(v[q] * inv);
                }
                return;
            }
            for (uint64_t j = begin; j < end; j += 4) {
                const uint64_t bits = splitmix(&r);
                for (uint64_t q = 0; q < 4 && j + q < end; q++) {
                    const unsigned k = (unsigned)(bits >> (16 * q)) & 4095u;
                    if (t.type == 1) std::memcpy(dst + 2 * (j + q), &table16[k], 2);
                    else std::memcpy(dst + 4 * (j + q), &table[k], 4);
                }
            }
        };
        if (n < (1u << 20) || n_threads == 1) {
            fill(0, n, 0);
        } else {
            std::vector<std::thread> workers;
            const uint64_t g = t.type == random_gguf_q8_0 ? 32 : 4; /* a thread's values start a block */
            for (unsigned k = 0; k < n_threads; k++) workers.emplace_back(fill, n * k / n_threads / g * g, k + 1 == n_threads ? n : n * (k + 1) / n_threads / g * g, k + 1);
            for (std::thread& th : workers) th.join();
        }
    }
    return true;
}
