// Text in and out of generation: tokenizing through the model, and the streamed callback text.
#include "helpers.h"
#include <doctest/doctest.h>
#include <cstring>
#include <set>

struct Collected {
    std::vector<int32_t> ids;
    std::string text;
    std::vector<size_t> piece_ends; // byte offset in `text` where each callback's piece ends
};

// Length of the valid UTF-8 character at s[i], or 0 when the bytes there are not one.
static size_t utf8_char_length(const std::string& s, size_t i) {
    const unsigned char c = (unsigned char)s[i];
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return 0;
    for (size_t k = 1; k < n; k++)
        if (((unsigned char)s[i + k] & 0xc0) != 0x80) return 0;
    return n;
}

// Offsets between characters of s; a byte that starts no valid character stands alone.
static std::vector<bool> character_boundaries(const std::string& s) {
    std::vector<bool> boundary(s.size() + 1, false);
    boundary[0] = true;
    for (size_t i = 0; i < s.size();) {
        size_t n = utf8_char_length(s, i);
        i += n ? n : 1;
        boundary[i] = true;
    }
    return boundary;
}

static int collect(void* user, int32_t token, const char* text, size_t len) {
    Collected* c = (Collected*)user;
    if (token >= 0) c->ids.push_back(token);
    c->text.append(text, len);
    c->piece_ends.push_back(c->text.size());
    return 0;
}

static std::string detokenize(const gpt2_model* m, const std::vector<int32_t>& ids) {
    size_t n = 0;
    REQUIRE(gpt2_detokenize(m, ids.data(), ids.size(), nullptr, 0, &n, nullptr) == GPT2_OK);
    std::string text(n, '\0');
    REQUIRE(gpt2_detokenize(m, ids.data(), ids.size(), &text[0], text.size(), &n, nullptr) == GPT2_OK);
    return text;
}

TEST_CASE("streamed BPE text equals the decoded ids and every piece is whole UTF-8 characters") {
    // A random-weight model emits byte tokens that split multi-byte characters across tokens.
    Model m(test_model("padded_gpt2.gguf"));
    REQUIRE(m.model);
    Session s(m);
    Collected c;
    gpt2_generate_params p = gpt2_generate_default_params();
    p.max_new_tokens = 400;
    p.temperature = 1.5f;
    p.top_k = 0;
    p.on_token = collect;
    p.user = &c;
    REQUIRE(gpt2_generate_text(s.session, "Hello", &p, nullptr) == GPT2_OK);
    REQUIRE(c.ids.size() == 400);
    CHECK(c.text == detokenize(m.model, c.ids));
    std::vector<bool> boundary = character_boundaries(c.text);
    size_t split = 0, inside_characters = 0;
    for (size_t end : c.piece_ends) split += !boundary[end];
    for (bool b : boundary) inside_characters += !b;
    CHECK(split == 0);
    CHECK(inside_characters > 0); // the text has multi-byte characters a careless stream could cut
}

TEST_CASE("generate_text on a char model continues the text like generate on its ids") {
    Model m(test_model("shakespeare_char.gguf"));
    REQUIRE(m.model);
    size_t n = 0;
    int32_t ids[16];
    REQUIRE(gpt2_tokenize(m.model, "ROMEO:", 6, 0, ids, 16, &n, nullptr) == GPT2_OK);
    REQUIRE(n == 6);
    Session a(m), b(m);
    std::vector<int32_t> expected = generate(a.session, std::vector<int32_t>(ids, ids + n), 30, 0.0f, 0, 0);
    Collected c;
    gpt2_generate_params p = gpt2_generate_default_params();
    p.max_new_tokens = 30;
    p.temperature = 0.0f;
    p.on_token = collect;
    p.user = &c;
    REQUIRE(gpt2_generate_text(b.session, "ROMEO:", &p, nullptr) == GPT2_OK);
    CHECK(c.ids == expected);
    CHECK(c.text == detokenize(m.model, expected));
}

TEST_CASE("tokenize reports the needed size when the buffer is too small") {
    Model m(test_model("padded_gpt2.gguf"));
    REQUIRE(m.model);
    const char* text = "The quick brown fox jumps over the lazy dog.";
    size_t n = 0;
    int32_t small[3];
    REQUIRE(gpt2_tokenize(m.model, text, std::strlen(text), 0, small, 3, &n, nullptr) == GPT2_OK);
    CHECK(n == 10); // OpenAI's encoder: 464, 2068, 7586, 21831, 18045, 625, 262, 16931, 3290, 13
    CHECK(small[0] == 464);
    CHECK(small[2] == 7586);
}

TEST_CASE("a model without vocabulary refuses text with a message naming the fix") {
    Model m(test_model("nobias.gguf"));
    REQUIRE(m.model);
    CHECK(m.info().tokenizer == GPT2_TOKENIZER_NONE);
    gpt2_error err;
    size_t n;
    CHECK(gpt2_tokenize(m.model, "hi", 2, 0, nullptr, 0, &n, &err) == GPT2_ERROR_NO_VOCABULARY);
    CHECK(std::string(err.message).find("--vocab") != std::string::npos);
}

TEST_CASE("zero-initialised params are valid: mapped file, all cores, model context; generate evaluates the prompt only") {
    gpt2_model_params mp{};
    gpt2_model* model = nullptr;
    REQUIRE(gpt2_model_load_file(test_model("shakespeare_char.gguf").c_str(), &mp, &model, nullptr) == GPT2_OK);
    gpt2_session_params sp{};
    gpt2_session *zero = nullptr, *defaults = nullptr;
    REQUIRE(gpt2_session_create(model, &sp, &zero, nullptr) == GPT2_OK);
    REQUIRE(gpt2_session_create(model, nullptr, &defaults, nullptr) == GPT2_OK);
    const int32_t prompt[] = {1, 2, 3};
    gpt2_generate_params gp{};
    Collected c;
    gp.on_token = collect;
    gp.user = &c;
    std::vector<int32_t> from_zero(300);
    size_t n_zero = 99;
    REQUIRE(gpt2_generate(zero, prompt, 3, &gp, from_zero.data(), from_zero.size(), &n_zero, nullptr) == GPT2_OK);
    CHECK(n_zero == 0);
    CHECK(c.piece_ends.empty());
    CHECK(gpt2_session_n_tokens(zero) == 3);
    REQUIRE(gpt2_session_eval(defaults, prompt, 3, nullptr) == GPT2_OK);
    const int V = gpt2_model_get_info(model).n_vocab;
    CHECK(std::vector<float>(gpt2_session_logits(zero), gpt2_session_logits(zero) + V) ==
          std::vector<float>(gpt2_session_logits(defaults), gpt2_session_logits(defaults) + V));
    // with a token count, zero sampling fields are greedy over every token, as the defaults' with them at zero
    gp.max_new_tokens = 40;
    REQUIRE(gpt2_generate(zero, nullptr, 0, &gp, from_zero.data(), from_zero.size(), &n_zero, nullptr) == GPT2_OK);
    from_zero.resize(n_zero);
    CHECK(n_zero == 40);
    gpt2_session_reset(defaults);
    CHECK(generate(defaults, std::vector<int32_t>(prompt, prompt + 3), 40, 0.0f, 0, 0) == from_zero);
    gpt2_session_free(zero);
    gpt2_session_free(defaults);
    gpt2_model_free(model);
}

TEST_CASE("max_new_tokens 0 evaluates the prompt only, alone, in a batch and on a stage; with no prompt it changes nothing") {
    Model m(test_model("shakespeare_char.gguf"));
    REQUIRE(m.model);
    Session alone(m), batched(m), staged(m), evaluated(m);
    gpt2_generate_params p = gpt2_generate_default_params();
    p.max_new_tokens = 0;
    Collected c;
    p.on_token = collect;
    p.user = &c;
    REQUIRE(gpt2_generate_text(alone.session, "ROMEO:", &p, nullptr) == GPT2_OK);
    gpt2_session* both[] = {batched.session, evaluated.session};
    const char* prompts[] = {"ROMEO:", "ROMEO:"};
    gpt2_generate_params params[] = {p, gpt2_generate_default_params()};
    params[1].max_new_tokens = 5;
    REQUIRE(gpt2_generate_batch(both, prompts, params, 2, nullptr) == GPT2_OK);
    CHECK(gpt2_session_n_tokens(evaluated.session) == 6 + 5); // its neighbour in the batch generated
    gpt2_stage* stage = nullptr;
    REQUIRE(gpt2_stage_create(m.model, nullptr, &stage, nullptr) == GPT2_OK);
    REQUIRE(gpt2_stage_add(stage, staged.session, "ROMEO:", &p, nullptr) == GPT2_OK);
    size_t n_active = 1;
    REQUIRE(gpt2_stage_step(stage, 0, &n_active, nullptr) == GPT2_OK);
    CHECK(n_active == 0);
    gpt2_stage_free(stage);
    CHECK(c.piece_ends.empty());
    const int V = m.info().n_vocab;
    std::vector<float> expected;
    for (gpt2_session* s : {alone.session, batched.session, staged.session}) {
        CAPTURE(gpt2_session_n_tokens(s));
        CHECK(gpt2_session_n_tokens(s) == 6);
        std::vector<float> logits(gpt2_session_logits(s), gpt2_session_logits(s) + V);
        if (expected.empty()) expected = logits;
        for (int v = 0; v < V; v++) CHECK(logits[(size_t)v] == doctest::Approx(expected[(size_t)v]).epsilon(1e-4));
    }
    // nothing to evaluate and nothing to generate: the session as it was
    REQUIRE(gpt2_generate(alone.session, nullptr, 0, &p, nullptr, 0, nullptr, nullptr) == GPT2_OK);
    CHECK(gpt2_session_n_tokens(alone.session) == 6);
    CHECK(c.piece_ends.empty());
}

TEST_CASE("session_eval_text evaluates text as tokenize and session_eval do; empty, NULL and vocabulary-less text are refused") {
    Model m(test_model("shakespeare_char.gguf"));
    REQUIRE(m.model);
    Session by_text(m), by_ids(m);
    gpt2_error e{};
    REQUIRE(gpt2_session_eval_text(by_text.session, "ROMEO: a persona.\n", &e) == GPT2_OK);
    int32_t ids[32];
    size_t n = 0;
    REQUIRE(gpt2_tokenize(m.model, "ROMEO: a persona.\n", 18, 0, ids, 32, &n, nullptr) == GPT2_OK);
    REQUIRE(gpt2_session_eval(by_ids.session, ids, n, nullptr) == GPT2_OK);
    REQUIRE(gpt2_session_n_tokens(by_text.session) == n);
    CHECK(std::equal(ids, ids + n, gpt2_session_tokens(by_text.session)));
    const int V = m.info().n_vocab;
    CHECK(std::vector<float>(gpt2_session_logits(by_text.session), gpt2_session_logits(by_text.session) + V) ==
          std::vector<float>(gpt2_session_logits(by_ids.session), gpt2_session_logits(by_ids.session) + V));
    // then a generation continues from it as from the ids
    CHECK(generate(by_text.session, {}, 20, 0.0f, 0, 0) == generate(by_ids.session, {}, 20, 0.0f, 0, 0));
    CHECK(gpt2_session_eval_text(by_text.session, "", &e) == GPT2_ERROR_INVALID_ARGUMENT);
    CHECK(std::string(e.message) == "text is empty: nothing to evaluate");
    CHECK(gpt2_session_eval_text(by_text.session, nullptr, &e) == GPT2_ERROR_INVALID_ARGUMENT);
    CHECK(gpt2_session_eval_text(nullptr, "x", &e) == GPT2_ERROR_INVALID_ARGUMENT);
    CHECK(gpt2_session_n_tokens(by_text.session) == n + 20);
    Model none(test_model("nobias.gguf"));
    Session s(none);
    CHECK(gpt2_session_eval_text(s.session, "hi", &e) == GPT2_ERROR_NO_VOCABULARY);
    CHECK(gpt2_session_n_tokens(s.session) == 0);
}

TEST_CASE("every result code has its own name") {
    std::set<std::string> names;
    for (int r = GPT2_OK; r <= GPT2_ERROR_INTERNAL; r++) names.insert(gpt2_result_string((gpt2_result)r));
    CHECK(names.size() == (size_t)GPT2_ERROR_INTERNAL + 1);
    CHECK(std::string(gpt2_result_string(GPT2_ERROR_INTERNAL)) == "internal error");
}
