// A small GGUF writer for the tools, the benchmark and the tests (not part of gpt2.h): keys and
// tensor shapes first, then one buffer laid out like the file, whose tensor data the caller
// fills in place (so a multi-gigabyte model is never held twice). Also the row quantizers
// f32 -> f16 / bf16 / q8_0. Include after gpt2.h with GPT2_IMPLEMENTATION.
#pragma once
#include <cstdint>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <string>
#include <vector>

struct GgufWriter {
    struct Tensor {
        std::string name;
        uint32_t n_dims;
        uint64_t ne[4];
        uint32_t type;
        uint64_t offset, n_bytes;
    };
    std::string kvs; // encoded key-value section
    uint64_t n_kv = 0;
    uint64_t alignment = 32;
    std::vector<Tensor> tensors;

    void put(const void* p, size_t n) { kvs.append((const char*)p, n); }
    void put_u32(uint32_t v) { put(&v, 4); }
    void put_u64(uint64_t v) { put(&v, 8); }
    void put_str(const std::string& s) { put_u64(s.size()); kvs += s; }
    // A key with its value already encoded as GGUF lays it out after the type (arrays: element
    // type, count, elements).
    void kv_raw(const std::string& key, uint32_t type, const void* value, size_t n) {
        put_str(key);
        put_u32(type);
        put(value, n);
        n_kv++;
    }
    void kv_u32(const std::string& key, uint32_t v) { kv_raw(key, 4 /* UINT32 */, &v, 4); }
    void kv_f32(const std::string& key, float v) { kv_raw(key, 6 /* FLOAT32 */, &v, 4); }
    void kv_string(const std::string& key, const std::string& v) {
        put_str(key);
        put_u32(8 /* STRING */);
        put_str(v);
        n_kv++;
    }
    // Shape as GGUF writes it: ne[0] is the row length.
    void tensor(const std::string& name, uint32_t n_dims, const uint64_t* ne, uint32_t type) {
        Tensor t{name, n_dims, {1, 1, 1, 1}, type, 0, 0};
        for (uint32_t d = 0; d < n_dims; d++) t.ne[d] = ne[d];
        uint64_t rows = 1;
        for (uint32_t d = 1; d < n_dims; d++) rows *= t.ne[d];
        uint64_t row_bytes = 0;
        gpt2__type_row_bytes(type, t.ne[0], &row_bytes);
        t.n_bytes = row_bytes * rows;
        tensors.push_back(t);
    }
    static uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }
    // Bytes of the whole file; assigns the tensor offsets.
    uint64_t layout() {
        uint64_t offset = 0;
        for (Tensor& t : tensors) {
            t.offset = offset;
            offset = align_up(offset + t.n_bytes, alignment);
        }
        return data_start() + offset;
    }
    uint64_t header_bytes() const {
        uint64_t n = 4 + 4 + 8 + 8 + kvs.size();
        for (const Tensor& t : tensors) n += 8 + t.name.size() + 4 + 8 * t.n_dims + 4 + 8;
        return n;
    }
    uint64_t data_start() const { return align_up(header_bytes(), alignment); }
    // Writes the header into buf (layout() bytes, zeroed by the caller).
    void write_header(uint8_t* buf) const {
        uint8_t* p = buf;
        auto w = [&](const void* src, size_t n) { std::memcpy(p, src, n); p += n; };
        const uint32_t magic = 0x46554747u, version = 3;
        const uint64_t n_tensors = tensors.size();
        w(&magic, 4); w(&version, 4); w(&n_tensors, 8); w(&n_kv, 8);
        w(kvs.data(), kvs.size());
        for (const Tensor& t : tensors) {
            const uint64_t len = t.name.size();
            w(&len, 8); w(t.name.data(), len); w(&t.n_dims, 4);
            for (uint32_t d = 0; d < t.n_dims; d++) w(&t.ne[d], 8);
            w(&t.type, 4); w(&t.offset, 8);
        }
    }
    uint8_t* tensor_data(uint8_t* buf, size_t i) const { return buf + data_start() + tensors[i].offset; }
};

// One row of n floats in a weight type (q8_0: n a multiple of 32), as ggml quantizes:
// q8_0 scale = max|x| / 127 stored in f16, q = round(x / scale).
inline void gguf_quantize_row(uint32_t type, const float* x, uint8_t* out, int64_t n) {
    switch (type) {
    case GPT2_TYPE_F32: std::memcpy(out, x, (size_t)n * 4); break;
    case GPT2_TYPE_F16:
        for (int64_t i = 0; i < n; i++) { uint16_t h = gpt2__f32_to_f16(x[i]); std::memcpy(out + 2 * i, &h, 2); }
        break;
    case GPT2_TYPE_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint32_t bits;
            std::memcpy(&bits, &x[i], 4);
            uint16_t b = (bits & 0x7fffffffu) > 0x7f800000u ? (uint16_t)((bits >> 16) | 0x40) /* quiet NaN */
                                                           : (uint16_t)((bits + 0x7fffu + ((bits >> 16) & 1)) >> 16);
            std::memcpy(out + 2 * i, &b, 2);
        }
        break;
    case GPT2_TYPE_Q8_0:
        for (int64_t b = 0; b < n / 32; b++) {
            float amax = 0.0f;
            for (int i = 0; i < 32; i++) amax = std::max(amax, std::fabs(x[32 * b + i]));
            const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
            const uint16_t h = gpt2__f32_to_f16(d);
            uint8_t* block = out + 34 * b;
            std::memcpy(block, &h, 2);
            for (int i = 0; i < 32; i++) block[2 + i] = (uint8_t)(int8_t)std::lround(x[32 * b + i] * id);
        }
        break;
    }
}

// Rewrites the 2-D tensors of the GGUF file `in` in `type` (q8_0: those with rows of a multiple
// of 32) and writes `out`; keys, 1-D tensors and alignment are kept. False with a message on error.
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
        std::string value;
        if (kv.type == GPT2__GGUF_ARRAY) { // element type and count precede the elements
            value.append((const char*)&kv.array_type, 4);
            value.append((const char*)&kv.array_count, 8);
        }
        value.append((const char*)kv.value, kv.value_size);
        w.kv_raw(std::string(kv.key), kv.type, value.data(), value.size());
    }
    std::vector<uint32_t> new_types;
    for (const gpt2__gguf_tensor& t : g.tensors) {
        const bool convertible = t.n_dims == 2 && t.n_bytes != 0 && (type != GPT2_TYPE_Q8_0 || t.ne[0] % 32 == 0);
        new_types.push_back(convertible ? type : t.type);
        w.tensor(std::string(t.name), t.n_dims, t.ne, new_types.back());
    }
    std::vector<uint8_t> buf((size_t)w.layout(), 0);
    w.write_header(buf.data());
    std::vector<float> row;
    for (size_t i = 0; i < g.tensors.size(); i++) {
        const gpt2__gguf_tensor& t = g.tensors[i];
        uint8_t* dst = w.tensor_data(buf.data(), i);
        if (new_types[i] == t.type) {
            std::memcpy(dst, t.data, (size_t)t.n_bytes);
            continue;
        }
        const uint64_t rows = t.ne[1], in_row = t.n_bytes / rows, out_row = w.tensors[i].n_bytes / rows;
        row.resize((size_t)t.ne[0]);
        for (uint64_t r = 0; r < rows; r++) {
            gpt2__dequantize_row(t.type, t.data + r * in_row, row.data(), (int64_t)t.ne[0]);
            gguf_quantize_row(new_types[i], row.data(), dst + r * out_row, (int64_t)t.ne[0]);
        }
    }
    gpt2__file_close(&file);
    FILE* f = std::fopen(out, "wb");
    if (!f) {
        *error = std::string(out) + ": cannot open for writing";
        return false;
    }
    const bool ok = std::fwrite(buf.data(), 1, buf.size(), f) == buf.size();
    if (std::fclose(f) != 0 || !ok) {
        *error = std::string(out) + ": write failed";
        return false;
    }
    *out_bytes = buf.size();
    return true;
}
