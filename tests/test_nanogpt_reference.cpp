// The forward pass and generation against nanoGPT's own model.py outputs (reference.json) for
// the checkpoint in tests/data/shakespeare_char, converted by tools/convert.py.
#include "helpers.h"
#include <doctest/doctest.h>
#include <thread>

static const Json& reference() {
    static const Json ref = read_json(test_data("shakespeare_char/reference.json"));
    return ref;
}

TEST_CASE("shakespeare_char model loads with nanoGPT's hyper-parameters") {
    Model m(test_model("shakespeare_char.gguf"));
    REQUIRE_MESSAGE(m.model, m.err.message);
    const Json& args = reference()["model_args"];
    gpt2_model_info info = m.info();
    CHECK(info.n_layer == (int)args["n_layer"].number);
    CHECK(info.n_head == (int)args["n_head"].number);
    CHECK(info.n_embd == (int)args["n_embd"].number);
    CHECK(info.n_ctx == (int)args["block_size"].number);
    CHECK(info.n_vocab == (int)args["vocab_size"].number);
    CHECK(info.tokenizer == GPT2_TOKENIZER_CHAR);
}

TEST_CASE("last-position logits match nanoGPT within 1e-4 for every reference prompt") {
    Model m(test_model("shakespeare_char.gguf"));
    REQUIRE(m.model);
    for (const Json& prompt : reference()["prompts"].array) {
        CAPTURE(prompt["name"].string);
        Session s(m);
        std::vector<int32_t> ids = prompt["ids"].ints();
        REQUIRE(gpt2_session_eval(s.session, ids.data(), ids.size(), nullptr) == GPT2_OK);
        std::vector<float> expected = prompt["last_logits"].floats();
        CHECK(max_abs_diff(gpt2_session_logits(s.session), expected.data(), expected.size()) <= 1e-4f);
    }
}

TEST_CASE("logits at every position match nanoGPT within 1e-4") {
    Model m(test_model("shakespeare_char.gguf"));
    REQUIRE(m.model);
    int checked = 0;
    for (const Json& prompt : reference()["prompts"].array) {
        if (!prompt.has("all_logits")) continue;
        CAPTURE(prompt["name"].string);
        std::vector<int32_t> ids = prompt["ids"].ints();
        // Feeding the prompt one token at a time gives every position's logits through the KV cache.
        Session s(m);
        for (size_t t = 0; t < ids.size(); t++) {
            REQUIRE(gpt2_session_eval(s.session, &ids[t], 1, nullptr) == GPT2_OK);
            std::vector<float> expected = prompt["all_logits"][t].floats();
            CHECK(max_abs_diff(gpt2_session_logits(s.session), expected.data(), expected.size()) <= 1e-4f);
            checked++;
        }
    }
    CHECK(checked >= 7);
}

// nanoGPT's 40 greedy tokens; under an emulator the first 12, still past block_size for the
// 60-character prompt (each token past it recomputes the whole window).
TEST_CASE("greedy continuations equal nanoGPT's token for token, also past block_size") {
    Model m(test_model("shakespeare_char.gguf"));
    REQUIRE(m.model);
    const size_t n_new = emulated() ? 12 : 40;
    bool crossed_context = false;
    for (const Json& prompt : reference()["prompts"].array) {
        CAPTURE(prompt["name"].string);
        Session s(m);
        const std::vector<int32_t> ids = prompt["ids"].ints(), want = prompt["greedy_new_ids"].ints();
        REQUIRE(want.size() == 40);
        std::vector<int32_t> got = generate(s.session, ids, (int)n_new, 0.0f, 0, 0);
        CHECK(got == std::vector<int32_t>(want.begin(), want.begin() + (long)n_new));
        crossed_context |= ids.size() + n_new > (size_t)m.info().n_ctx;
    }
    CHECK(crossed_context);
}

TEST_CASE("top_k = 1 sampling equals greedy") {
    Model m(test_model("shakespeare_char.gguf"));
    REQUIRE(m.model);
    for (const Json& prompt : reference()["prompts"].array) {
        Session s(m);
        std::vector<int32_t> got = generate(s.session, prompt["ids"].ints(), 40, 1.0f, 1, 1337);
        CHECK(got == prompt["topk1_sample_new_ids"].ints());
    }
}

TEST_CASE("prompt log-probability sums match nanoGPT within 1e-3") {
    Model m(test_model("shakespeare_char.gguf"));
    REQUIRE(m.model);
    Session s(m);
    for (const Json& prompt : reference()["prompts"].array) {
        CAPTURE(prompt["name"].string);
        std::vector<int32_t> ids = prompt["ids"].ints();
        double sum = 1.0;
        REQUIRE(gpt2_score(s.session, ids.data(), ids.size(), &sum, nullptr) == GPT2_OK);
        CHECK(std::fabs(sum - prompt["prompt_logprob_sum"].number) <= 1e-3);
    }
}

TEST_CASE("the same seed gives the same tokens and another seed other tokens") {
    Model m(test_model("shakespeare_char.gguf"));
    REQUIRE(m.model);
    std::vector<int32_t> prompt = reference()["prompts"][0]["ids"].ints();
    Session a(m), b(m), c(m);
    std::vector<int32_t> first = generate(a.session, prompt, 100, 1.0f, 0, 42);
    std::vector<int32_t> again = generate(b.session, prompt, 100, 1.0f, 0, 42);
    std::vector<int32_t> other = generate(c.session, prompt, 100, 1.0f, 0, 43);
    CHECK(first.size() == 100);
    CHECK(first == again);
    CHECK(first != other);
}

TEST_CASE("two sessions on one model in two threads produce the tokens of one at a time") {
    Model m(test_model("shakespeare_char.gguf"));
    REQUIRE(m.model);
    std::vector<int32_t> prompt_a = reference()["prompts"][0]["ids"].ints();
    std::vector<int32_t> prompt_b = reference()["prompts"][2]["ids"].ints();
    std::vector<int32_t> serial_a, serial_b, parallel_a, parallel_b;
    {
        Session s(m);
        serial_a = generate(s.session, prompt_a, 150, 0.9f, 20, 7);
        gpt2_session_reset(s.session);
        serial_b = generate(s.session, prompt_b, 150, 0.9f, 20, 8);
    }
    std::thread ta([&] { Session s(m, 1); parallel_a = generate(s.session, prompt_a, 150, 0.9f, 20, 7); });
    std::thread tb([&] { Session s(m, 1); parallel_b = generate(s.session, prompt_b, 150, 0.9f, 20, 8); });
    ta.join();
    tb.join();
    CHECK(parallel_a == serial_a);
    CHECK(parallel_b == serial_b);
}
