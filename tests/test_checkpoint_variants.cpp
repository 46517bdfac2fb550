// Every kind of nanoGPT checkpoint the converter handles, run by the library and compared with
// logits computed in float64 by torch from the same weights (tests/data/checkpoints/*.reference.json,
// written by tools/make_test_checkpoints.py).
#include "helpers.h"
#include <doctest/doctest.h>

static Json variant_reference(const std::string& name) { return read_json(test_data("checkpoints/" + name + ".reference.json")); }

// Feeds the reference ids one at a time and returns the worst logit difference over all positions.
static float worst_logit_error(const std::string& name) {
    Json ref = variant_reference(name);
    Model m(test_model(name + ".gguf"));
    REQUIRE_MESSAGE(m.model, m.err.message);
    CHECK(m.info().n_vocab == (int)ref["n_vocab"].number);
    Session s(m);
    std::vector<int32_t> ids = ref["ids"].ints();
    float worst = 0;
    for (size_t t = 0; t < ids.size(); t++) {
        REQUIRE(gpt2_session_eval(s.session, &ids[t], 1, nullptr) == GPT2_OK);
        std::vector<float> expected = ref["all_logits"][t].floats();
        worst = std::max(worst, max_abs_diff(gpt2_session_logits(s.session), expected.data(), expected.size()));
    }
    return worst;
}

TEST_CASE("bias=True checkpoint with a char vocabulary matches the float64 reference") { CHECK(worst_logit_error("bias_char") <= 1e-4f); }
TEST_CASE("bias=False checkpoint matches the float64 reference") { CHECK(worst_logit_error("nobias") <= 1e-4f); }
TEST_CASE("torch.compile checkpoint (_orig_mod. prefix) matches the float64 reference") { CHECK(worst_logit_error("compiled") <= 1e-4f); }
TEST_CASE("untied lm_head checkpoint matches the float64 reference") { CHECK(worst_logit_error("untied") <= 1e-4f); }
TEST_CASE("checkpoint stored in float16 matches the float64 reference") { CHECK(worst_logit_error("f16") <= 1e-4f); }
TEST_CASE("checkpoint stored in bfloat16 matches the float64 reference") { CHECK(worst_logit_error("bf16") <= 1e-4f); }

TEST_CASE("a padded GPT-2 vocabulary (50304 rows) runs over the 50257 real tokens only") {
    Json ref = variant_reference("padded_gpt2");
    Model m(test_model("padded_gpt2.gguf"));
    REQUIRE_MESSAGE(m.model, m.err.message);
    CHECK(m.info().n_vocab == 50257);
    CHECK(m.info().tokenizer == GPT2_TOKENIZER_BPE);
    Session s(m);
    std::vector<int32_t> ids = ref["ids"].ints();
    for (size_t t = 0; t < ids.size(); t++) {
        REQUIRE(gpt2_session_eval(s.session, &ids[t], 1, nullptr) == GPT2_OK);
        std::vector<float> expected = ref["all_logits_first_columns"][t].floats();
        CHECK(max_abs_diff(gpt2_session_logits(s.session), expected.data(), expected.size()) <= 1e-4f);
    }
    const float* logits = gpt2_session_logits(s.session);
    std::vector<int32_t> columns = ref["last_logits_columns"].ints();
    std::vector<float> values = ref["last_logits_values"].floats();
    for (size_t i = 0; i < columns.size(); i++) CHECK(std::fabs(logits[columns[i]] - values[i]) <= 1e-4f);
    double max_logit = logits[0], sum = 0;
    int32_t argmax = 0;
    for (int i = 0; i < 50257; i++)
        if (logits[i] > max_logit) { max_logit = logits[i]; argmax = i; }
    for (int i = 0; i < 50257; i++) sum += std::exp(logits[i] - max_logit);
    CHECK(argmax == (int32_t)ref["last_argmax"].number);
    CHECK(std::fabs(max_logit + std::log(sum) - ref["last_logsumexp"].number) <= 1e-4);
}

TEST_CASE("padding rows of the embedding are never sampled, even when their logits would be largest") {
    // padded_rows_gpt2.gguf keeps 47 padding rows filled with 100.0: their logits would dwarf the rest.
    Model m(test_model("padded_rows_gpt2.gguf"));
    REQUIRE_MESSAGE(m.model, m.err.message);
    CHECK(m.info().n_vocab_rows == 50304);
    CHECK(m.info().n_vocab == 50257);
    for (float temperature : {0.0f, 1.0f, 5.0f}) {
        Session s(m);
        std::vector<int32_t> tokens = generate(s.session, {464}, 300, temperature, 0, 99);
        REQUIRE(tokens.size() == 300);
        for (int32_t t : tokens) CHECK(t < 50257);
    }
}
