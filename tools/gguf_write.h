// The one GGUF writer of the tools, the benchmark and the tests (not part of gpt2.h).
//
// - gguf_keys[]: the keys of a model file, what gpt2.h's loader does with each and its value
//   type: the one C++ list of them. docs/FORMAT.md lists the same keys; the converter's test
//   (tests/python/test_convert.py) checks the two, the converter's output and the loader's
//   getters against each other.
// - GgufKeyValues: the key-value section, in file order. set() writes a key of the table in the
//   table's type; set_u32() ... set_raw() write any key in any type (gpt2-quantize copies the
//   keys it read; the tests write wrong types on purpose).
// - GgufWriter: the keys plus the tensors' names, shapes and types. layout() places the tensors,
//   write_header() writes everything before the tensor data into a buffer, and the caller fills
//   the tensor data in place, so a multi-gigabyte model is never held twice.
// - gguf_set_gpt2_keys(), gguf_set_gpt2_bpe_keys() and gguf_gpt2_tensors(): a GPT-2 model's
//   hyper-parameter keys, GPT-2 BPE tokenizer keys and tensors as tools/convert.py writes them
//   (the tests' tiny models, the benchmark's random ones).
// - Where gpt2.h's implementation is compiled in (GPT2_IMPLEMENTATION defined, gpt2.h included
//   before this file): the row quantizers f32 -> f16 / bf16 / q8_0 and gguf_quantize_file(),
//   which is gpt2-quantize.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

// GGUF's value types, numbered as in the file.
enum GgufType : uint32_t {
    GGUF_UINT8 = 0, GGUF_INT8, GGUF_UINT16, GGUF_INT16, GGUF_UINT32, GGUF_INT32, GGUF_FLOAT32,
    GGUF_BOOL, GGUF_STRING, GGUF_ARRAY, GGUF_UINT64, GGUF_INT64, GGUF_FLOAT64
};

inline const char* gguf_type_name(uint32_t type) {
    static const char* const names[] = {"uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
                                        "bool", "string", "array", "uint64", "int64", "float64"};
    return type < sizeof names / sizeof names[0] ? names[type] : "unknown";
}

// What gpt2.h's loader does with a key. GGUF_REQUIRED: a file without it does not load (the
// tokenizer keys: when the file names that tokenizer). GGUF_OPTIONAL: read when present, a
// default otherwise. GGUF_NOT_READ: written for other readers and for people.
enum GgufKeyUse { GGUF_NOT_READ, GGUF_OPTIONAL, GGUF_REQUIRED };

struct GgufKeyInfo {
    const char* name;
    GgufKeyUse use;
    GgufType type;
    GgufType element_type = GGUF_UINT8; // arrays only
};

// Every key of a model file, in the order tools/convert.py writes them; docs/FORMAT.md says what
// each holds and the loader's defaults.
inline constexpr GgufKeyInfo gguf_keys[] = {
    {"general.alignment",                  GGUF_OPTIONAL, GGUF_UINT32},
    {"general.architecture",               GGUF_REQUIRED, GGUF_STRING},
    {"general.name",                       GGUF_OPTIONAL, GGUF_STRING},
    {"general.file_type",                  GGUF_NOT_READ, GGUF_UINT32},
    {"gpt2.context_length",                GGUF_REQUIRED, GGUF_UINT32},
    {"gpt2.embedding_length",              GGUF_REQUIRED, GGUF_UINT32},
    {"gpt2.feed_forward_length",           GGUF_OPTIONAL, GGUF_UINT32},
    {"gpt2.block_count",                   GGUF_REQUIRED, GGUF_UINT32},
    {"gpt2.attention.head_count",          GGUF_REQUIRED, GGUF_UINT32},
    {"gpt2.attention.layer_norm_epsilon",  GGUF_OPTIONAL, GGUF_FLOAT32},
    {"gpt2.vocab_size",                    GGUF_NOT_READ, GGUF_UINT32},
    {"tokenizer.ggml.model",               GGUF_OPTIONAL, GGUF_STRING},
    {"tokenizer.ggml.pre",                 GGUF_NOT_READ, GGUF_STRING},
    {"tokenizer.ggml.tokens",              GGUF_REQUIRED, GGUF_ARRAY, GGUF_STRING},
    {"tokenizer.ggml.token_type",          GGUF_NOT_READ, GGUF_ARRAY, GGUF_INT32},
    {"tokenizer.ggml.merges",              GGUF_REQUIRED, GGUF_ARRAY, GGUF_STRING},
    {"tokenizer.ggml.bos_token_id",        GGUF_NOT_READ, GGUF_UINT32},
    {"tokenizer.ggml.eos_token_id",        GGUF_OPTIONAL, GGUF_UINT32},
    {"gpt2h.gelu",                         GGUF_OPTIONAL, GGUF_STRING},
    {"gpt2h.converter_version",            GGUF_NOT_READ, GGUF_STRING},
    {"gpt2h.tokenizer.kind",               GGUF_OPTIONAL, GGUF_STRING},
    {"gpt2h.tokenizer.chars",              GGUF_REQUIRED, GGUF_ARRAY, GGUF_STRING},
    {"gpt2h.nanogpt.model_args",           GGUF_NOT_READ, GGUF_STRING},
    {"gpt2h.nanogpt.iter_num",             GGUF_NOT_READ, GGUF_UINT64},
    {"gpt2h.nanogpt.best_val_loss",        GGUF_NOT_READ, GGUF_FLOAT32},
    {"gpt2h.nanogpt.padded_vocab_size",    GGUF_NOT_READ, GGUF_UINT32},
};

// The table's entry for `name`, or nullptr.
inline const GgufKeyInfo* gguf_key_info(const std::string& name) {
    for (const GgufKeyInfo& k : gguf_keys)
        if (name == k.name) return &k;
    return nullptr;
}

constexpr uint32_t GGUF_MAGIC = 0x46554747u; // "GGUF"

inline uint64_t gguf_elements(const std::vector<uint64_t>& ne) {
    uint64_t n = 1;
    for (uint64_t d : ne) n *= d;
    return n;
}

// ---- the key-value section ------------------------------------------------------------------

struct GgufKeyValues {
    struct Key {
        std::string name;
        uint32_t type;              // GgufType; `value` holds the bytes that follow it in the file
        std::vector<uint8_t> value; // arrays: element type, count, elements
    };
    std::vector<Key> keys;          // in file order

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

    Key* key(const std::string& name) {
        auto it = std::find_if(keys.begin(), keys.end(), [&](const Key& k) { return k.name == name; });
        return it == keys.end() ? nullptr : &*it;
    }
    void remove_key(const std::string& name) {
        keys.erase(std::remove_if(keys.begin(), keys.end(), [&](const Key& k) { return k.name == name; }), keys.end());
    }

    // Any key in any type, its value already encoded. set_raw replaces the value of a key of that
    // name where the key stands, or appends one; add_raw appends even when the name is taken.
    void set_raw(const std::string& name, uint32_t type, std::vector<uint8_t> value) {
        if (Key* k = key(name)) {
            k->type = type;
            k->value = std::move(value);
        } else {
            add_raw(name, type, std::move(value));
        }
    }
    void add_raw(const std::string& name, uint32_t type, std::vector<uint8_t> value) { keys.push_back({name, type, std::move(value)}); }
    void set_u32(const std::string& name, uint32_t v) { set_raw(name, GGUF_UINT32, encode(&v, 4)); }
    void set_u64(const std::string& name, uint64_t v) { set_raw(name, GGUF_UINT64, encode(&v, 8)); }
    void set_i32(const std::string& name, int32_t v) { set_raw(name, GGUF_INT32, encode(&v, 4)); }
    void set_f32(const std::string& name, float v) { set_raw(name, GGUF_FLOAT32, encode(&v, 4)); }
    void set_string(const std::string& name, const std::string& v) {
        std::vector<uint8_t> b;
        put_string(b, v);
        set_raw(name, GGUF_STRING, std::move(b));
    }
    void set_strings(const std::string& name, const std::vector<std::string>& v) {
        std::vector<uint8_t> b;
        put_u32(b, GGUF_STRING);
        put_u64(b, v.size());
        for (const std::string& s : v) put_string(b, s);
        set_raw(name, GGUF_ARRAY, std::move(b));
    }

    void set_i32s(const std::string& name, const std::vector<int32_t>& v) {
        std::vector<uint8_t> b;
        put_u32(b, GGUF_INT32);
        put_u64(b, v.size());
        put(b, v.data(), v.size() * sizeof(int32_t));
        set_raw(name, GGUF_ARRAY, std::move(b));
    }

    // A key of gguf_keys, in the type the table gives it. A name missing from the table or a
    // value that does not fit the table's type is a mistake in the calling program: it aborts.
    template <typename Int, typename = std::enable_if_t<std::is_integral_v<Int>>>
    void set(const char* name, Int v) {
        if constexpr (std::is_signed_v<Int>)
            if (v < 0) misuse(name, "a negative value for an unsigned key");
        set_unsigned(name, (uint64_t)v);
    }
    void set(const char* name, float v) {
        if (table_entry(name).type != GGUF_FLOAT32) misuse(name, "a float32 value for a key of another type");
        set_f32(name, v);
    }
    void set(const char* name, const std::string& v) {
        if (table_entry(name).type != GGUF_STRING) misuse(name, "a string value for a key of another type");
        set_string(name, v);
    }
    void set(const char* name, const std::vector<std::string>& v) {
        const GgufKeyInfo& k = table_entry(name);
        if (k.type != GGUF_ARRAY || k.element_type != GGUF_STRING) misuse(name, "strings for a key of another type");
        set_strings(name, v);
    }
    void set(const char* name, const std::vector<int32_t>& v) {
        const GgufKeyInfo& k = table_entry(name);
        if (k.type != GGUF_ARRAY || k.element_type != GGUF_INT32) misuse(name, "int32s for a key of another type");
        set_i32s(name, v);
    }

private:
    void set_unsigned(const char* name, uint64_t v) {
        const GgufKeyInfo& k = table_entry(name);
        if (k.type == GGUF_UINT32 && v <= UINT32_MAX) set_u32(name, (uint32_t)v);
        else if (k.type == GGUF_UINT64) set_u64(name, v);
        else misuse(name, "an integer that does not fit the key's type");
    }
    static std::vector<uint8_t> encode(const void* p, size_t n) { return std::vector<uint8_t>((const uint8_t*)p, (const uint8_t*)p + n); }
    [[noreturn]] static void misuse(const char* name, const char* what) {
        const GgufKeyInfo* k = gguf_key_info(name);
        std::fprintf(stderr, "gguf_write.h: key '%s': %s (gguf_keys[] gives it type %s)\n", name, what,
                     k ? gguf_type_name(k->type) : "none: it is not in the table");
        std::abort();
    }
    static const GgufKeyInfo& table_entry(const char* name) {
        const GgufKeyInfo* k = gguf_key_info(name);
        if (!k) misuse(name, "not a key of gguf_keys[]");
        return *k;
    }
};

// ---- the file -------------------------------------------------------------------------------

struct GgufWriter : GgufKeyValues {
    struct Tensor {
        std::string name;
        std::vector<uint64_t> ne; // ne[0] is the row length
        uint32_t type;            // ggml's numbering, as gpt2_type
        uint64_t n_bytes;
        uint64_t offset;          // from the start of the tensor data; set by layout()
    };
    uint32_t version = 3;
    uint64_t alignment = 32;      // of the tensor data (set general.alignment too when it is not 32)
    std::vector<Tensor> tensors;

    void add_tensor(const std::string& name, std::vector<uint64_t> ne, uint32_t type, uint64_t n_bytes) {
        tensors.push_back({name, std::move(ne), type, n_bytes, 0});
    }
    static uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }
    // Places the tensors in order, each at a multiple of the alignment; returns the bytes of the
    // whole file (the last tensor padded too).
    uint64_t layout() {
        uint64_t offset = 0;
        for (Tensor& t : tensors) {
            t.offset = offset;
            offset = align_up(offset + t.n_bytes, alignment);
        }
        return data_start() + offset;
    }
    uint64_t header_bytes() const {
        uint64_t n = 4 + 4 + 8 + 8;
        for (const Key& k : keys) n += 8 + k.name.size() + 4 + k.value.size();
        for (const Tensor& t : tensors) n += 8 + t.name.size() + 4 + 8 * t.ne.size() + 4 + 8;
        return n;
    }
    uint64_t data_start() const { return align_up(header_bytes(), alignment); }
    // Writes everything before the tensor data into buf (layout() bytes, zeroed by the caller).
    void write_header(uint8_t* buf) const {
        uint8_t* p = buf;
        auto w = [&](const void* src, size_t n) {
            if (n) std::memcpy(p, src, n);
            p += n;
        };
        const uint64_t n_tensors = tensors.size(), n_keys = keys.size();
        w(&GGUF_MAGIC, 4); w(&version, 4); w(&n_tensors, 8); w(&n_keys, 8);
        for (const Key& k : keys) {
            const uint64_t len = k.name.size();
            w(&len, 8); w(k.name.data(), len); w(&k.type, 4); w(k.value.data(), k.value.size());
        }
        for (const Tensor& t : tensors) {
            const uint64_t len = t.name.size();
            const uint32_t n_dims = (uint32_t)t.ne.size();
            w(&len, 8); w(t.name.data(), len); w(&n_dims, 4); w(t.ne.data(), 8 * t.ne.size());
            w(&t.type, 4); w(&t.offset, 8);
        }
    }
    uint8_t* tensor_data(uint8_t* buf, size_t i) const { return buf + data_start() + tensors[i].offset; }
};

// ---- a GPT-2 model, as tools/convert.py writes it ---------------------------------------------

struct GgufGpt2Shape {
    uint64_t n_layer, n_embd, n_head, n_ctx;
    uint64_t n_vocab_rows; // rows of token_embd.weight
};

// The keys every model has: the architecture, its name and the hyper-parameters (feed-forward
// width 4 n_embd, LayerNorm epsilon 1e-5, as nanoGPT); gelu is "erf" or "tanh".
inline void gguf_set_gpt2_keys(GgufKeyValues& kv, const std::string& name, const GgufGpt2Shape& s, const std::string& gelu) {
    kv.set("general.architecture", "gpt2");
    kv.set("general.name", name);
    kv.set("gpt2.context_length", s.n_ctx);
    kv.set("gpt2.embedding_length", s.n_embd);
    kv.set("gpt2.feed_forward_length", 4 * s.n_embd);
    kv.set("gpt2.block_count", s.n_layer);
    kv.set("gpt2.attention.head_count", s.n_head);
    kv.set("gpt2.attention.layer_norm_epsilon", 1e-5f);
    kv.set("gpt2h.gelu", gelu);
}

// GPT-2's BPE vocabulary (tokens in id order, merges "a b" in rank order, as load_gpt2_bpe_files
// in tests/test_files.h reads them) with the keys and values tools/convert.py writes, so that
// llama.cpp loads the file too: model "gpt2", pre-tokenizer "gpt-2", token types normal (1) but
// <|endoftext|> control (3), and <|endoftext|> as both BOS and EOS.
inline void gguf_set_gpt2_bpe_keys(GgufKeyValues& kv, const std::vector<std::string>& tokens, const std::vector<std::string>& merges) {
    const auto eos = std::find(tokens.begin(), tokens.end(), "<|endoftext|>");
    std::vector<int32_t> types(tokens.size(), 1);
    if (eos != tokens.end()) types[(size_t)(eos - tokens.begin())] = 3;
    kv.set("tokenizer.ggml.model", std::string("gpt2"));
    kv.set("tokenizer.ggml.pre", std::string("gpt-2"));
    kv.set("tokenizer.ggml.tokens", tokens);
    kv.set("tokenizer.ggml.token_type", types);
    kv.set("tokenizer.ggml.merges", merges);
    if (eos != tokens.end()) {
        kv.set("tokenizer.ggml.bos_token_id", (uint64_t)(eos - tokens.begin()));
        kv.set("tokenizer.ggml.eos_token_id", (uint64_t)(eos - tokens.begin()));
    }
}

struct GgufTensorShape {
    std::string name;
    std::vector<uint64_t> ne; // ne[0] is the row length
};

// Every tensor of a model with biases and a tied head, in the converter's order.
inline std::vector<GgufTensorShape> gguf_gpt2_tensors(const GgufGpt2Shape& s) {
    const uint64_t C = s.n_embd, F = 4 * C;
    std::vector<GgufTensorShape> t = {{"token_embd.weight", {C, s.n_vocab_rows}}, {"position_embd.weight", {C, s.n_ctx}}};
    for (uint64_t l = 0; l < s.n_layer; l++) {
        const std::string b = "blk." + std::to_string(l) + ".";
        t.push_back({b + "attn_norm.weight", {C}});
        t.push_back({b + "attn_norm.bias", {C}});
        t.push_back({b + "attn_qkv.weight", {C, 3 * C}});
        t.push_back({b + "attn_qkv.bias", {3 * C}});
        t.push_back({b + "attn_output.weight", {C, C}});
        t.push_back({b + "attn_output.bias", {C}});
        t.push_back({b + "ffn_norm.weight", {C}});
        t.push_back({b + "ffn_norm.bias", {C}});
        t.push_back({b + "ffn_up.weight", {C, F}});
        t.push_back({b + "ffn_up.bias", {F}});
        t.push_back({b + "ffn_down.weight", {F, C}});
        t.push_back({b + "ffn_down.bias", {C}});
    }
    t.push_back({"output_norm.weight", {C}});
    t.push_back({"output_norm.bias", {C}});
    return t;
}

#if defined(GPT2_IMPLEMENTATION)
// ---- weight types (gpt2.h's implementation) ---------------------------------------------------

// Bytes of a tensor of `type` and shape `ne`; 0 when gpt2.h does not know the type or the row
// length does not fit its blocks.
inline uint64_t gguf_tensor_bytes(uint32_t type, const std::vector<uint64_t>& ne) {
    uint64_t row_bytes = 0;
    gpt2__type_row_bytes(type, ne[0], &row_bytes);
    return row_bytes * (gguf_elements(ne) / ne[0]);
}

// llama.cpp's general.file_type (enum llama_ftype) of a file whose weights are mostly `type`.
inline uint32_t gguf_file_type(uint32_t type) {
    switch (type) {
    case GPT2_TYPE_F16: return 1;   // LLAMA_FTYPE_MOSTLY_F16
    case GPT2_TYPE_Q4_0: return 2;  // LLAMA_FTYPE_MOSTLY_Q4_0
    case GPT2_TYPE_Q8_0: return 7;  // LLAMA_FTYPE_MOSTLY_Q8_0
    case GPT2_TYPE_BF16: return 32; // LLAMA_FTYPE_MOSTLY_BF16
    default: return 0;              // LLAMA_FTYPE_ALL_F32
    }
}

// The weight type that holds the most values of the file.
inline uint32_t gguf_dominant_type(const GgufWriter& w) {
    uint32_t best = GPT2_TYPE_F32;
    uint64_t best_values = 0;
    for (uint32_t type : {GPT2_TYPE_F32, GPT2_TYPE_F16, GPT2_TYPE_BF16, GPT2_TYPE_Q8_0, GPT2_TYPE_Q4_0}) {
        uint64_t values = 0;
        for (const GgufWriter::Tensor& t : w.tensors)
            if (t.type == type) values += gguf_elements(t.ne);
        if (values > best_values) {
            best = type;
            best_values = values;
        }
    }
    return best;
}

// The type of the matrix `name` in a file whose matrices are to be `type`. As llama-quantize does
// for a q4_0 file, the output head (output.weight, or token_embd.weight when the file has no
// output.weight and the embedding is the head too) keeps more bits: llama.cpp gives it q6_K,
// which gpt2.h does not run, or q8_0 when its rows are not whole q6_K blocks; q8_0 here.
inline uint32_t gguf_matrix_type(const std::string& name, uint32_t type, bool has_output) {
    const bool head = name == "output.weight" || (!has_output && name == "token_embd.weight");
    return type == GPT2_TYPE_Q4_0 && head ? (uint32_t)GPT2_TYPE_Q8_0 : type;
}

// One row of n floats in a weight type (q8_0, q4_0: n a multiple of 32), as ggml's reference
// quantizers do: q8_0 scale = max|x| / 127 stored in f16, q = round(x / scale); q4_0 scale
// d = m / -8 for m the value of largest magnitude (its sign kept), stored in f16, and
// nibble = min(15, trunc(x / d + 8.5)), so m itself is nibble 0 and decodes to m exactly up to
// d's f16 rounding.
inline void gguf_quantize_row(uint32_t type, const float* x, uint8_t* out, int64_t n) {
    switch (type) {
    case GPT2_TYPE_F32: std::memcpy(out, x, (size_t)n * 4); break;
    case GPT2_TYPE_F16:
        for (int64_t i = 0; i < n; i++) { uint16_t h = gpt2__f32_to_f16(x[i]); std::memcpy(out + 2 * i, &h, 2); }
        break;
    case GPT2_TYPE_BF16:
        for (int64_t i = 0; i < n; i++) {
            const uint16_t b = gpt2__f32_to_bf16(x[i]);
            std::memcpy(out + 2 * i, &b, 2);
        }
        break;
    case GPT2_TYPE_Q8_0: {
        const int QK = gpt2__q8_block_values;
        for (int64_t b = 0; b < n / QK; b++) {
            const float* xb = x + QK * b;
            float amax = 0.0f;
            for (int i = 0; i < QK; i++) amax = std::max(amax, std::fabs(xb[i]));
            const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
            const uint16_t h = gpt2__f32_to_f16(d);
            uint8_t* block = out + gpt2__q8_block_bytes * b;
            std::memcpy(block, &h, 2);
            for (int i = 0; i < QK; i++) block[2 + i] = (uint8_t)(int8_t)std::lround(xb[i] * id);
        }
        break;
    }
    case GPT2_TYPE_Q4_0: {
        const int QK = gpt2__q4_block_values;
        for (int64_t b = 0; b < n / QK; b++) {
            const float* xb = x + QK * b;
            float amax = 0.0f, m = 0.0f;
            for (int i = 0; i < QK; i++)
                if (std::fabs(xb[i]) > amax) amax = std::fabs(xb[i]), m = xb[i];
            const float d = m / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
            const uint16_t h = gpt2__f32_to_f16(d);
            uint8_t* block = out + gpt2__q4_block_bytes * b;
            std::memcpy(block, &h, 2);
            for (int j = 0; j < QK / 2; j++) {
                const int lo = std::min(15, (int)(int8_t)(xb[j] * id + 8.5f)), hi = std::min(15, (int)(int8_t)(xb[j + QK / 2] * id + 8.5f));
                block[2 + j] = (uint8_t)(lo | hi << 4);
            }
        }
        break;
    }
    }
}

// gpt2-quantize: rewrites the 2-D tensors of the GGUF file `in` in `type` (q8_0, q4_0: those with
// rows of a multiple of 32; q4_0: the head in q8_0, gguf_matrix_type) and writes `out`; keys, 1-D
// tensors and alignment are kept, but general.file_type, which names the type that now holds
// most of the weights. False with a message on error.
inline bool gguf_quantize_file(const char* in, const char* out, uint32_t type, size_t* out_bytes, std::string* error) {
    gpt2__file file;
    gpt2__gguf g;
    gpt2_error err;
    if (gpt2__file_open(in, true, &file, &err) != GPT2_OK || gpt2__gguf_parse(file.data, file.size, &g, &err) != GPT2_OK) {
        *error = std::string(in) + ": " + err.message;
        gpt2__file_close(&file);
        return false;
    }
    GgufWriter w;
    w.alignment = g.alignment;
    for (const gpt2__gguf_kv& kv : g.kvs) {
        std::vector<uint8_t> value;
        if (kv.type == GPT2__GGUF_ARRAY) { // element type and count precede the elements
            GgufKeyValues::put_u32(value, kv.array_type);
            GgufKeyValues::put_u64(value, kv.array_count);
        }
        GgufKeyValues::put(value, kv.value, kv.value_size);
        w.add_raw(std::string(kv.key), kv.type, std::move(value));
    }
    const bool has_output = gpt2__gguf_find_tensor(&g, "output.weight") != nullptr;
    for (const gpt2__gguf_tensor& t : g.tensors) {
        const uint32_t matrix_type = gguf_matrix_type(std::string(t.name), type, has_output);
        const bool convertible = t.n_dims == 2 && t.n_bytes != 0 && (!gpt2__int8_weights(matrix_type) || t.ne[0] % 32 == 0);
        const uint32_t new_type = convertible ? matrix_type : t.type;
        std::vector<uint64_t> ne(t.ne, t.ne + t.n_dims);
        const uint64_t n_bytes = gguf_tensor_bytes(new_type, ne);
        w.add_tensor(std::string(t.name), std::move(ne), new_type, n_bytes);
    }
    w.set("general.file_type", gguf_file_type(gguf_dominant_type(w)));
    std::vector<uint8_t> buf((size_t)w.layout(), 0);
    w.write_header(buf.data());
    std::vector<float> row;
    for (size_t i = 0; i < g.tensors.size(); i++) {
        const gpt2__gguf_tensor& t = g.tensors[i];
        uint8_t* dst = w.tensor_data(buf.data(), i);
        if (w.tensors[i].type == t.type) {
            std::memcpy(dst, t.data, (size_t)t.n_bytes);
            continue;
        }
        const uint64_t rows = t.ne[1], in_row = t.n_bytes / rows, out_row = w.tensors[i].n_bytes / rows;
        row.resize((size_t)t.ne[0]);
        for (uint64_t r = 0; r < rows; r++) {
            gpt2__dequantize_row(t.type, t.data + r * in_row, row.data(), (int64_t)t.ne[0]);
            gguf_quantize_row(w.tensors[i].type, row.data(), dst + r * out_row, (int64_t)t.ne[0]);
        }
    }
    gpt2__file_close(&file);
    // Written beside `out` under a name of its own, then renamed over it: a program that has the
    // old file mapped keeps reading the old bytes (rewriting it in place truncates it under the
    // mapping, and reads past the new end fault: SIGBUS), and a failed write leaves `out` as it was.
    // Windows refuses to replace a file some program has mapped: then this fails, naming `out`.
    const std::string temp = std::string(out) + "." + std::to_string(std::random_device()()) + ".tmp";
    FILE* f = std::fopen(temp.c_str(), "wb");
    if (!f) {
        *error = temp + ": cannot open for writing";
        return false;
    }
    const bool ok = std::fwrite(buf.data(), 1, buf.size(), f) == buf.size();
    if (std::fclose(f) != 0 || !ok) {
        std::remove(temp.c_str());
        *error = std::string(out) + ": write failed";
        return false;
    }
    std::error_code replaced; // std::filesystem::rename replaces `out` on Windows too, where std::rename does not
    std::filesystem::rename(temp, out, replaced);
    if (replaced) {
        std::remove(temp.c_str());
        *error = std::string(out) + ": cannot replace it with the new file (" + replaced.message() + ")";
        return false;
    }
    *out_bytes = buf.size();
    return true;
}
#endif
