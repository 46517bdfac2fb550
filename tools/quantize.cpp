// gpt2-quantize: rewrites the 2-D weight tensors of a GGUF model in another type.
//
//   gpt2-quantize IN.gguf OUT.gguf --type f16|bf16|q8_0|f32
//
// Every key is copied unchanged; 1-D tensors (biases, norms) stay float32; matrices are
// converted row by row (q8_0 needs rows of a multiple of 32 values; others stay as they are).
// The output keeps the input's alignment. Reads with gpt2.h's own GGUF reader.
#define GPT2_IMPLEMENTATION
#include "gpt2.h"
#include "tools/gguf_write.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

static int fail(const char* fmt, const char* a = "", const char* b = "") {
    std::fprintf(stderr, "gpt2-quantize: ");
    std::fprintf(stderr, fmt, a, b);
    std::fprintf(stderr, "\n");
    return 1;
}

int main(int argc, char** argv) {
    const char* in = nullptr;
    const char* out = nullptr;
    const char* type_name = nullptr;
    for (int i = 1; i < argc; i++) {
        if (std::strcmp(argv[i], "--type") == 0 && i + 1 < argc) type_name = argv[++i];
        else if (std::strcmp(argv[i], "-h") == 0 || std::strcmp(argv[i], "--help") == 0) in = out = nullptr, type_name = nullptr, i = argc;
        else if (!in) in = argv[i];
        else if (!out) out = argv[i];
        else return fail("unexpected argument '%s' (usage: gpt2-quantize IN.gguf OUT.gguf --type f16|bf16|q8_0|f32)", argv[i]);
    }
    if (!in || !out || !type_name) {
        std::puts("usage: gpt2-quantize IN.gguf OUT.gguf --type f16|bf16|q8_0|f32\n"
                  "  rewrites the 2-D weight tensors in the given type; keys, 1-D tensors and alignment are kept");
        return argc > 1 ? 2 : 0;
    }
    uint32_t type;
    if (!std::strcmp(type_name, "f32")) type = GPT2_TYPE_F32;
    else if (!std::strcmp(type_name, "f16")) type = GPT2_TYPE_F16;
    else if (!std::strcmp(type_name, "bf16")) type = GPT2_TYPE_BF16;
    else if (!std::strcmp(type_name, "q8_0")) type = GPT2_TYPE_Q8_0;
    else return fail("--type %s: expected f16, bf16, q8_0 or f32", type_name);

    gpt2__file file;
    gpt2__gguf g;
    gpt2_error err;
    if (gpt2__file_open(in, true, &file, &err) != GPT2_OK || gpt2__gguf_parse(file.data, file.size, &g, &err) != GPT2_OK)
        return fail("%s: %s", in, err.message);

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
        uint32_t nt = t.type;
        const bool convertible = t.n_dims == 2 && t.n_bytes != 0 && (type != GPT2_TYPE_Q8_0 || t.ne[0] % 32 == 0);
        if (convertible) nt = type;
        w.tensor(std::string(t.name), t.n_dims, t.ne, nt);
        new_types.push_back(nt);
    }
    const uint64_t total = w.layout();
    std::vector<uint8_t> buf((size_t)total, 0);
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
    FILE* f = std::fopen(out, "wb");
    if (!f) return fail("%s: cannot open for writing", out);
    const bool ok = std::fwrite(buf.data(), 1, buf.size(), f) == buf.size();
    if (std::fclose(f) != 0 || !ok) return fail("%s: write failed", out);
    gpt2__file_close(&file);
    std::printf("%s -> %s: %s, %zu bytes\n", in, out, type_name, buf.size());
    return 0;
}
