// Model files for the tests, built in memory with the one GGUF writer (tools/gguf_write.h):
// keys and tensors with their bytes in, the bytes of a file out, with knobs to break any field
// (magic, version, counts, key types, shapes, types, offsets). tiny_model() builds a complete,
// valid 2-layer character model that the tests then break one field at a time.
#pragma once
#include "tools/gguf_write.h"
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

// The keys (set(), set_u32(), ... from GgufKeyValues) and tensors of a file.
struct GgufBuilder : GgufKeyValues {
    struct Tensor {
        std::string name;
        std::vector<uint64_t> ne;   // ne[0] = row length
        uint32_t type;              // 0 f32, 1 f16, 8 q8_0, ...
        std::vector<uint8_t> data;  // written as they are, whatever ne and type say
        bool has_offset = false;    // claim `offset` in the header instead of where the data is
        uint64_t offset = 0;
    };

    uint32_t magic = GGUF_MAGIC;
    uint32_t version = 3;
    uint64_t alignment = 32;        // layout only; write general.alignment yourself to change the loader's
    bool override_counts = false;   // write n_tensors / n_keys below instead of the real counts
    uint64_t n_tensors = 0, n_keys = 0;
    std::vector<Tensor> tensors;

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
        auto it = std::find_if(tensors.begin(), tensors.end(), [&](const Tensor& t) { return t.name == name; });
        return it == tensors.end() ? nullptr : &*it;
    }
    void remove_tensor(const std::string& name) {
        tensors.erase(std::remove_if(tensors.begin(), tensors.end(), [&](const Tensor& t) { return t.name == name; }), tensors.end());
    }

    // The file, laid out by GgufWriter, then broken as the knobs say. It ends with the last
    // tensor's last byte, so any cut loses data.
    std::vector<uint8_t> build() const {
        GgufWriter w;
        w.keys = keys;
        w.version = version;
        w.alignment = alignment;
        for (const Tensor& t : tensors) w.add_tensor(t.name, t.ne, t.type, t.data.size());
        std::vector<uint8_t> out((size_t)w.layout(), 0);
        uint64_t end = w.data_start();
        for (size_t i = 0; i < tensors.size(); i++) {
            const std::vector<uint8_t>& d = tensors[i].data;
            if (!d.empty()) std::memcpy(w.tensor_data(out.data(), i), d.data(), d.size());
            end = w.data_start() + w.tensors[i].offset + d.size();
            if (tensors[i].has_offset) w.tensors[i].offset = tensors[i].offset;
        }
        w.write_header(out.data());
        std::memcpy(out.data(), &magic, 4);
        if (override_counts) {
            std::memcpy(out.data() + 8, &n_tensors, 8);
            std::memcpy(out.data() + 16, &n_keys, 8);
        }
        out.resize((size_t)end);
        return out;
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
    const GgufGpt2Shape s{(uint64_t)shape.n_layer, (uint64_t)shape.n_embd, (uint64_t)shape.n_head, (uint64_t)shape.n_ctx, (uint64_t)shape.n_vocab_rows};
    GgufBuilder g;
    gguf_set_gpt2_keys(g, "tiny", s, "erf");
    if (shape.vocabulary) {
        g.set("gpt2h.tokenizer.kind", "char");
        std::vector<std::string> chars;
        for (int i = 0; i < shape.n_vocab; i++) chars.push_back(std::string(1, (char)('a' + i % 26)) + (i >= 26 ? std::to_string(i) : ""));
        g.set("gpt2h.tokenizer.chars", chars);
    }
    // LayerNorm gains 1; everything else small and deterministic, one seed per tensor.
    uint32_t seed = 1;
    for (const GgufTensorShape& t : gguf_gpt2_tensors(s)) {
        const size_t n = (size_t)gguf_elements(t.ne);
        const auto is = [&](const char* part) { return t.name.find(part) != std::string::npos; };
        const float scale = is("token_embd") ? 1.0f : is("position_embd") ? 0.5f : is(".bias") ? 0.1f : 0.2f;
        g.add_f32(t.name, t.ne, is("norm.weight") ? std::vector<float>(n, 1.0f) : test_weights(n, seed++, scale));
    }
    return g;
}

#if defined(GPT2_IMPLEMENTATION) // gguf_quantize_row is the library's own row quantizer
// A random 2-layer model (C 64, 4 heads of 16) with room for 300 positions, where decode
// attention splits a query's keys into up to 4 ranges; GPT-2's tanh GELU, biases, and an untied
// head of 80 rows for a 77-character vocabulary (3 padding rows). Its matrices are in `type`.
// The model of the reference-forward and batch tests.
inline std::vector<uint8_t> random_model(uint32_t type) {
    TinyModelShape shape;
    shape.n_embd = 64;
    shape.n_head = 4;
    shape.n_ctx = 300;
    shape.n_vocab_rows = 80;
    GgufBuilder g = tiny_model(shape);
    std::vector<std::string> chars;
    for (int i = 0; i < 77; i++) chars.push_back(std::string(1, (char)('0' + i)));
    g.set_strings("gpt2h.tokenizer.chars", chars);
    g.set_string("gpt2h.gelu", "tanh");
    g.add_f32("output.weight", {64, 80}, test_weights(64 * 80, 99, 1.0f));
    for (GgufBuilder::Tensor& t : g.tensors) {
        if (t.ne.size() != 2 || type == GPT2_TYPE_F32) continue;
        const int64_t cols = (int64_t)t.ne[0], rows = (int64_t)t.ne[1];
        const size_t row_bytes = (size_t)(gguf_tensor_bytes(type, t.ne) / (uint64_t)rows);
        std::vector<uint8_t> data(row_bytes * (size_t)rows);
        std::vector<float> row((size_t)cols);
        for (int64_t r = 0; r < rows; r++) {
            std::memcpy(row.data(), t.data.data() + (size_t)(r * cols * 4), (size_t)cols * 4);
            gguf_quantize_row(type, row.data(), data.data() + (size_t)r * row_bytes, cols);
        }
        t.data = std::move(data);
        t.type = type;
    }
    return g.build();
}
#endif
