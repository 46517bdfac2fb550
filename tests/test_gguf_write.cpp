// The C++ GGUF writer (tools/gguf_write.h) against the loader: what it writes for a GPT-2 BPE
// vocabulary (gpt2-bench's random models, their --save'd files) loads, and tokenizes as OpenAI's
// encoder.py does.
#include "gguf_builder.h"
#include "helpers.h"
#include "test_files.h"
#include <doctest/doctest.h>
#include <cstring>
#include <string>
#include <vector>

TEST_CASE("gguf_set_gpt2_bpe_keys: a model with GPT-2's vocabulary loads and tokenizes every golden_dev.json text as encoder.py does") {
    std::vector<std::string> tokens, merges;
    REQUIRE(load_gpt2_bpe_files(std::string(GPT2_TEST_DATA) + "/gpt2-bpe", &tokens, &merges));
    REQUIRE(tokens.size() == 50257);
    TinyModelShape shape;
    shape.n_vocab_rows = 50257;
    shape.vocabulary = false;
    GgufBuilder g = tiny_model(shape);
    gguf_set_gpt2_bpe_keys(g, tokens, merges);

    // the keys tools/convert.py writes, in the key table's types; <|endoftext|> a control token
    for (const char* name : {"tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.tokens", "tokenizer.ggml.token_type",
                             "tokenizer.ggml.merges", "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"}) {
        CAPTURE(name);
        REQUIRE(g.key(name));
        CHECK(g.key(name)->type == gguf_key_info(name)->type);
    }
    const std::vector<uint8_t>& types = g.key("tokenizer.ggml.token_type")->value; // element type, count, int32s
    int32_t eos_type = 0, first_type = 0;
    std::memcpy(&first_type, types.data() + 12, 4);
    std::memcpy(&eos_type, types.data() + 12 + 4 * 50256, 4);
    CHECK(first_type == 1);
    CHECK(eos_type == 3);

    Loaded l(g.build());
    REQUIRE_MESSAGE(l.model, l.err.message);
    const gpt2_model_info info = gpt2_model_get_info(l.model);
    CHECK(info.tokenizer == GPT2_TOKENIZER_BPE);
    CHECK(info.n_vocab == 50257);
    CHECK(info.eos_token == 50256);
    const Json golden = read_json(std::string(GPT2_TEST_DATA) + "/gpt2-bpe/golden_dev.json");
    REQUIRE(golden.array.size() >= 40);
    for (const Json& c : golden.array) {
        const std::string& text = c["text"].string;
        CAPTURE(text);
        std::vector<int32_t> expected, got(text.size() + 1);
        for (const Json& id : c["ids"].array) expected.push_back((int32_t)id.number);
        size_t n = 0;
        gpt2_error err;
        REQUIRE(gpt2_tokenize(l.model, text.data(), text.size(), 0, got.data(), got.size(), &n, &err) == GPT2_OK);
        got.resize(n);
        CHECK(got == expected);
    }
}
