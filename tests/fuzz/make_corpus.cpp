// Writes the seed corpus of fuzz_gguf (tests/fuzz/corpus_gguf/) with tests/gguf_builder.h:
// small valid models of each kind and a few edge cases. Run by hand after changing the builder:
//   c++ -std=c++17 -I . -I tests tests/fuzz/make_corpus.cpp -o /tmp/make_corpus && /tmp/make_corpus tests/fuzz/corpus_gguf
#include "gguf_builder.h"
#include <cstdio>
#include <string>

static void write(const std::string& dir, const char* name, const std::vector<uint8_t>& bytes) {
    const std::string path = dir + "/" + name;
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size() || std::fclose(f) != 0) {
        std::fprintf(stderr, "make_corpus: cannot write %s\n", path.c_str());
        std::exit(1);
    }
    std::printf("%s: %zu bytes\n", path.c_str(), bytes.size());
}

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: make_corpus DIR\n");
        return 2;
    }
    const std::string dir = argv[1];
    write(dir, "tiny_2layer_char.gguf", tiny_model().build());

    TinyModelShape small;
    small.n_layer = 1;
    small.n_embd = 4;
    small.n_head = 1;
    small.n_ctx = 4;
    small.n_vocab = 3;
    small.n_vocab_rows = 3;
    write(dir, "tiny_1layer.gguf", tiny_model(small).build());

    TinyModelShape ids_only = small;
    ids_only.vocabulary = false;
    write(dir, "tiny_ids_only.gguf", tiny_model(ids_only).build());

    TinyModelShape padded = small;
    padded.n_vocab_rows = 5;
    write(dir, "tiny_padded_vocab.gguf", tiny_model(padded).build());

    GgufBuilder nobias = tiny_model(small);
    for (size_t i = 0; i < nobias.tensors.size(); i++)
        if (nobias.tensors[i].name.find(".bias") != std::string::npos) nobias.tensors.erase(nobias.tensors.begin() + (long)i--);
    write(dir, "tiny_nobias.gguf", nobias.build());

    GgufBuilder f16 = tiny_model(small); // matrices in f16 (zeros), untied head, tanh GELU, v2
    for (GgufBuilder::Tensor& t : f16.tensors)
        if (t.ne.size() == 2) {
            t.type = 1;
            t.data.assign(t.data.size() / 2, 0);
        }
    f16.add_tensor("output.weight", {4, 3}, 1, std::vector<uint8_t>(24, 0x3c));
    f16.set("gpt2h.gelu", "tanh");
    f16.version = 2;
    write(dir, "tiny_f16_untied_v2.gguf", f16.build());

    GgufBuilder q8 = tiny_model(TinyModelShape{1, 32, 2, 2, 3, 3, true}); // q8_0 needs rows of 32
    for (GgufBuilder::Tensor& t : q8.tensors)
        if (t.ne.size() == 2) {
            t.type = 8;
            t.data.assign(t.data.size() / 4 / 32 * 34, 0);
        }
    q8.set("general.alignment", 64);
    q8.alignment = 64;
    write(dir, "tiny_q8_0_align64.gguf", q8.build());

    GgufBuilder header_only;
    write(dir, "header_only.gguf", header_only.build());

    GgufBuilder keys_only = tiny_model(small);
    keys_only.tensors.clear();
    write(dir, "keys_only.gguf", keys_only.build());
    return 0;
}
