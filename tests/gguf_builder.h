// A small GGUF writer for tests: keys and tensors in, the bytes of a file out, with knobs to
// corrupt any field (magic, version, counts, key types, shapes, types, offsets). tiny_model()
// builds a complete, valid 2-layer character model that the tests then break one field at a time.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

enum GgufType : uint32_t {
    GGUF_UINT8 = 0, GGUF_INT8, GGUF_UINT16, GGUF_INT16, GGUF_UINT32, GGUF_INT32, GGUF_FLOAT32,
    GGUF_BOOL, GGUF_STRING, GGUF_ARRAY, GGUF_UINT64, GGUF_INT64, GGUF_FLOAT64
};

struct GgufBuilder {
    struct Key {
        std::string name;
        uint32_t type;              // GgufType; the value's bytes follow it as written
        std::vector<uint8_t> value; // for arrays: element type, count, elements
    };
    struct Tensor {
        std::string name;
        std::vector<uint64_t> ne;   // ne[0] = row length
        uint32_t type;              // 0 f32, 1 f16, 8 q8_0, ...
        std::vector<uint8_t> data;
        bool has_offset = false;    // override the computed offset
        uint64_t offset = 0;
    };

    uint32_t magic = 0x46554747u;   // "GGUF"
    uint32_t version = 3;
    uint64_t alignment = 32;        // layout only; write general.alignment yourself to change the loader's
    bool override_counts = false;   // write n_tensors / n_keys below instead of the real counts
    uint64_t n_tensors = 0, n_keys = 0;
    std::vector<Key> keys;
    std::vector<Tensor> tensors;

    // ---- keys ----
    static void put(std::vector<uint8_t>& out, const void* p, size_t n) {
        const uint8_t* b = (const uint8_t*)p;
        out.insert(out.end(), b, b + n);
    }
    static void put_u32(std::vector<uint8_t>& out, uint32_t v) { put(out, &v, 4); }
    static void put_u64(std::vector<uint8_t>& out, uint64_t v) { put(out, &v, 8); }
    static void put_string(std::vector<uint8_t>& out, const std::string& s) {
        put_u64(out, s.size());
        put(out, s.data(), s.size());
    }
    GgufBuilder& set_raw(const std::string& name, uint32_t type, std::vector<uint8_t> value) {
        remove_key(name);
        keys.push_back({name, type, std::move(value)});
        return *this;
    }
    GgufBuilder& add_raw(const std::string& name, uint32_t type, std::vector<uint8_t> value) { // allows duplicates
        keys.push_back({name, type, std::move(value)});
        return *this;
    }
    GgufBuilder& set_u32(const std::string& name, uint32_t v) {
        std::vector<uint8_t> b;
        put_u32(b, v);
        return set_raw(name, GGUF_UINT32, b);
    }
    GgufBuilder& set_u64(const std::string& name, uint64_t v) {
        std::vector<uint8_t> b;
        put_u64(b, v);
        return set_raw(name, GGUF_UINT64, b);
    }
    GgufBuilder& set_i32(const std::string& name, int32_t v) {
        std::vector<uint8_t> b;
        put(b, &v, 4);
        return set_raw(name, GGUF_INT32, b);
    }
    GgufBuilder& set_f32(const std::string& name, float v) {
        std::vector<uint8_t> b;
        put(b, &v, 4);
        return set_raw(name, GGUF_FLOAT32, b);
    }
    GgufBuilder& set_string(const std::string& name, const std::string& v) {
        std::vector<uint8_t> b;
        put_string(b, v);
        return set_raw(name, GGUF_STRING, b);
    }
    GgufBuilder& set_strings(const std::string& name, const std::vector<std::string>& v) {
        std::vector<uint8_t> b;
        put_u32(b, GGUF_STRING);
        put_u64(b, v.size());
        for (const std::string& s : v) put_string(b, s);
        return set_raw(name, GGUF_ARRAY, b);
    }
    Key* key(const std::string& name) {
        for (Key& k : keys)
            if (k.name == name) return &k;
        return nullptr;
    }
    void remove_key(const std::string& name) {
        for (size_t i = 0; i < keys.size(); i++)
            if (keys[i].name == name) keys.erase(keys.begin() + (long)i--);
    }

    // ---- tensors ----
    GgufBuilder& add_tensor(const std::string& name, std::vector<uint64_t> ne, uint32_t type, std::vector<uint8_t> data) {
        tensors.push_back({name, std::move(ne), type, std::move(data)});
        return *this;
    }
    GgufBuilder& add_f32(const std::string& name, std::vector<uint64_t> ne, const std::vector<float>& values) {
        std::vector<uint8_t> data(values.size() * 4);
        if (!values.empty()) std::memcpy(data.data(), values.data(), data.size());
        return add_tensor(name, std::move(ne), 0, std::move(data));
    }
    Tensor* tensor(const std::string& name) {
        for (Tensor& t : tensors)
            if (t.name == name) return &t;
        return nullptr;
    }
    void remove_tensor(const std::string& name) {
        for (size_t i = 0; i < tensors.size(); i++)
            if (tensors[i].name == name) tensors.erase(tensors.begin() + (long)i--);
    }

    // ---- the file ----
    std::vector<uint8_t> build() const {
        std::vector<uint8_t> out;
        put_u32(out, magic);
        put_u32(out, version);
        put_u64(out, override_counts ? n_tensors : tensors.size());
        put_u64(out, override_counts ? n_keys : keys.size());
        for (const Key& k : keys) {
            put_string(out, k.name);
            put_u32(out, k.type);
            put(out, k.value.data(), k.value.size());
        }
        std::vector<uint64_t> offsets;
        uint64_t next = 0;
        for (const Tensor& t : tensors) {
            put_string(out, t.name);
            put_u32(out, (uint32_t)t.ne.size());
            for (uint64_t n : t.ne) put_u64(out, n);
            put_u32(out, t.type);
            offsets.push_back(next);
            put_u64(out, t.has_offset ? t.offset : next);
            next += (t.data.size() + alignment - 1) / alignment * alignment;
        }
        while (out.size() % alignment) out.push_back(0);
        const size_t data_start = out.size();
        for (size_t i = 0; i < tensors.size(); i++) {
            const std::vector<uint8_t>& d = tensors[i].data;
            out.resize(data_start + offsets[i]);  // zero padding up to the tensor
            out.insert(out.end(), d.begin(), d.end());
        }
        return out;  // ends with the last tensor's last byte: any cut loses data
    }
};

// Deterministic small weights, so a built model produces a fixed, non-degenerate distribution.
inline std::vector<float> test_weights(size_t n, uint32_t seed, float scale = 0.2f) {
    std::vector<float> v(n);
    uint32_t x = seed * 2654435761u + 12345u;
    for (float& f : v) {
        x = x * 1664525u + 1013904223u;
        f = ((float)(x >> 8) / 16777216.0f - 0.5f) * 2.0f * scale;
    }
    return v;
}

struct TinyModelShape {
    int n_layer = 2, n_embd = 8, n_head = 2, n_ctx = 16;
    int n_vocab = 10;       // characters of the vocabulary ("abcdefghij")
    int n_vocab_rows = 10;  // rows of token_embd.weight (more: padding rows)
    bool vocabulary = true; // false: a token-ids-only model
};

// A complete, valid GPT-2 model with a character vocabulary, as tools/convert.py writes one.
inline GgufBuilder tiny_model(const TinyModelShape& shape = TinyModelShape()) {
    const uint64_t C = (uint64_t)shape.n_embd, F = 4 * C;
    GgufBuilder g;
    g.set_string("general.architecture", "gpt2");
    g.set_string("general.name", "tiny");
    g.set_u32("gpt2.context_length", (uint32_t)shape.n_ctx);
    g.set_u32("gpt2.embedding_length", (uint32_t)C);
    g.set_u32("gpt2.feed_forward_length", (uint32_t)F);
    g.set_u32("gpt2.block_count", (uint32_t)shape.n_layer);
    g.set_u32("gpt2.attention.head_count", (uint32_t)shape.n_head);
    g.set_f32("gpt2.attention.layer_norm_epsilon", 1e-5f);
    g.set_string("gpt2h.gelu", "erf");
    if (shape.vocabulary) {
        g.set_string("gpt2h.tokenizer.kind", "char");
        std::vector<std::string> chars;
        for (int i = 0; i < shape.n_vocab; i++) chars.push_back(std::string(1, (char)('a' + i % 26)) + (i >= 26 ? std::to_string(i) : ""));
        g.set_strings("gpt2h.tokenizer.chars", chars);
    }
    uint32_t seed = 1;
    const uint64_t V = (uint64_t)shape.n_vocab_rows, T = (uint64_t)shape.n_ctx;
    g.add_f32("token_embd.weight", {C, V}, test_weights(C * V, seed++, 1.0f));
    g.add_f32("position_embd.weight", {C, T}, test_weights(C * T, seed++, 0.5f));
    for (int l = 0; l < shape.n_layer; l++) {
        const std::string b = "blk." + std::to_string(l) + ".";
        g.add_f32(b + "attn_norm.weight", {C}, std::vector<float>(C, 1.0f));
        g.add_f32(b + "attn_norm.bias", {C}, test_weights(C, seed++, 0.1f));
        g.add_f32(b + "attn_qkv.weight", {C, 3 * C}, test_weights(3 * C * C, seed++));
        g.add_f32(b + "attn_qkv.bias", {3 * C}, test_weights(3 * C, seed++, 0.1f));
        g.add_f32(b + "attn_output.weight", {C, C}, test_weights(C * C, seed++));
        g.add_f32(b + "attn_output.bias", {C}, test_weights(C, seed++, 0.1f));
        g.add_f32(b + "ffn_norm.weight", {C}, std::vector<float>(C, 1.0f));
        g.add_f32(b + "ffn_norm.bias", {C}, test_weights(C, seed++, 0.1f));
        g.add_f32(b + "ffn_up.weight", {C, F}, test_weights(F * C, seed++));
        g.add_f32(b + "ffn_up.bias", {F}, test_weights(F, seed++, 0.1f));
        g.add_f32(b + "ffn_down.weight", {F, C}, test_weights(C * F, seed++));
        g.add_f32(b + "ffn_down.bias", {C}, test_weights(C, seed++, 0.1f));
    }
    g.add_f32("output_norm.weight", {C}, std::vector<float>(C, 1.0f));
    g.add_f32("output_norm.bias", {C}, test_weights(C, seed++, 0.1f));
    return g;
}
