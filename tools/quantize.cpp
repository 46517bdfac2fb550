// gpt2-quantize: rewrites the 2-D weight tensors of a GGUF model in another type.
//
//   gpt2-quantize IN.gguf OUT.gguf --type f16|bf16|q8_0|q4_0|f32
//
// Every key is copied unchanged but general.file_type, which becomes llama.cpp's file type of the
// weight type that now holds most values (f32 0, f16 1, q4_0 2, q8_0 7, bf16 32); 1-D tensors
// (biases, norms) stay float32; matrices are converted row by row (q8_0 and q4_0 need rows of a
// multiple of 32 values; others stay as they are). With q4_0 the output head (output.weight, or
// the tied token_embd.weight) becomes q8_0, as llama-quantize keeps it at more bits. The output
// keeps the input's alignment. Reads with gpt2.h's own GGUF reader, writes with
// tools/gguf_write.h.
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
        else return fail("unexpected argument '%s' (usage: gpt2-quantize IN.gguf OUT.gguf --type f16|bf16|q8_0|q4_0|f32)", argv[i]);
    }
    if (!in || !out || !type_name) {
        std::puts("usage: gpt2-quantize IN.gguf OUT.gguf --type f16|bf16|q8_0|q4_0|f32\n"
                  "  rewrites the 2-D weight tensors in the given type; keys (but general.file_type), 1-D tensors\n"
                  "  and alignment are kept; q4_0 keeps the output head (token_embd.weight when tied) in q8_0");
        return argc > 1 ? 2 : 0;
    }
    uint32_t type;
    if (!std::strcmp(type_name, "f32")) type = GPT2_TYPE_F32;
    else if (!std::strcmp(type_name, "f16")) type = GPT2_TYPE_F16;
    else if (!std::strcmp(type_name, "bf16")) type = GPT2_TYPE_BF16;
    else if (!std::strcmp(type_name, "q8_0")) type = GPT2_TYPE_Q8_0;
    else if (!std::strcmp(type_name, "q4_0")) type = GPT2_TYPE_Q4_0;
    else return fail("--type %s: expected f16, bf16, q8_0, q4_0 or f32", type_name);

    std::string error;
    size_t bytes = 0;
    if (!gguf_quantize_file(in, out, type, &bytes, &error)) return fail("%s", error.c_str());
    std::printf("%s -> %s: %s, %zu bytes\n", in, out, type_name, bytes);
    return 0;
}
