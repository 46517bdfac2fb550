// Token masks made from a grammar's contexts (src/grammar/matcher.h) against gpt2_grammar_match
// of the text with each token appended, which follows the text byte by byte with no trie and no
// context: contexts kept as a few words where they accept few tokens (a position in a key) and as
// a whole bitmap where they accept many (a new key's body); once a grammar holds as many bytes of
// contexts as it may, masks walked from the state alone; and a matcher begun again. This file
// holds a private copy of the implementation to reach the grammar's contexts.
#define GPT2_IMPLEMENTATION
#define GPT2_STATIC
#include "helpers.h"
#include "grammar_helpers.h"
#include "test_files.h"
#include <doctest/doctest.h>
#include <random>

namespace {

struct SchemaGrammar {
    gpt2_grammar* grammar = nullptr;
    SchemaGrammar(const gpt2_model* model, const char* schema) {
        gpt2_error err;
        REQUIRE_MESSAGE(gpt2_grammar_from_json_schema(model, schema, std::strlen(schema), nullptr, &grammar, &err) == GPT2_OK, err.message);
    }
    ~SchemaGrammar() { gpt2_grammar_free(grammar); }
    SchemaGrammar(const SchemaGrammar&) = delete;
    SchemaGrammar& operator=(const SchemaGrammar&) = delete;
};

// Begins `m` and feeds it `text`, as gpt2_tokenize writes it, a token at a time; before each token
// and after the last, every token's bit in the mask must say whether the text with it appended is
// still a sentence or the start of one (the end-of-text token: whether the text is a sentence).
// Returns how many bits were wrong.
int mask_mismatches(const gpt2_model* model, const gpt2_grammar* g, const std::string& text, gpt2__grammar_matcher* m) {
    const gpt2_model_info info = gpt2_model_get_info(model);
    std::vector<int32_t> ids(text.size() + 1);
    size_t n_ids = 0;
    gpt2_error err;
    REQUIRE(gpt2_tokenize(model, text.data(), text.size(), 0, ids.data(), ids.size(), &n_ids, &err) == GPT2_OK);
    std::vector<std::string> pieces((size_t)info.n_vocab);
    for (int32_t t = 0; t < info.n_vocab; t++) pieces[(size_t)t] = token_text(model, t);
    gpt2__matcher_begin(m, g);
    std::vector<uint32_t> allowed(((size_t)info.n_vocab + 31) / 32);
    std::string so_far;
    int mismatches = 0;
    for (size_t step = 0;; step++) {
        REQUIRE_MESSAGE(gpt2__matcher_mask(m, allowed.data(), &err) == GPT2_OK, err.message);
        for (int32_t t = 0; t < info.n_vocab; t++) {
            const bool expected = t == info.eos_token ? grammar_match(g, so_far) == GPT2_MATCH_COMPLETE
                                                      : !pieces[(size_t)t].empty() && grammar_match(g, so_far + pieces[(size_t)t]) != GPT2_MATCH_NONE;
            const bool got = allowed[(size_t)t >> 5] >> (t & 31) & 1;
            if (got != expected && mismatches++ < 5) FAIL_CHECK("token " << t << " (\"" << pieces[(size_t)t] << "\") is " << std::string(got ? "allowed" : "masked") << " after \"" << so_far << "\"");
        }
        if (step == n_ids) break;
        bool alive = false;
        REQUIRE(gpt2__matcher_feed(m, pieces[(size_t)ids[step]], &alive, &err) == GPT2_OK);
        REQUIRE(alive);
        so_far += pieces[(size_t)ids[step]];
    }
    CHECK(grammar_match(g, so_far) == GPT2_MATCH_COMPLETE);
    return mismatches;
}

// Optional properties whose names share their first letters, and other keys allowed: inside a key
// the state holds each name's next letter (a context each, accepting a handful of tokens) and a
// new key's body (contexts accepting most of the vocabulary); "nap" leaves the names at its third
// letter.
const char* const keys_schema = R"({"type": "object", "properties": {"name": {"type": "string"}, "nickname": {"type": "string"},
    "nature": {"enum": ["calm", "wild"]}, "level": {"type": "integer"}}, "additionalProperties": {"type": "integer"}})";
const char* const keys_text = R"({"nickname": "Al", "nap": 2})";

} // namespace

TEST_CASE("grammar contexts: masks from contexts kept as a few words or as a bitmap allow exactly the tokens that keep the text in the grammar (GPT-2 BPE)") {
    const Model& m = bpe_model();
    REQUIRE(m.model);
    SchemaGrammar g(m.model, keys_schema);
    gpt2__grammar_matcher matcher;
    CHECK(mask_mismatches(m.model, g.grammar, keys_text, &matcher) == 0);
    size_t few_words = 0, bitmaps = 0;
    for (const gpt2__context_tokens& c : g.grammar->contexts) (c.accepted_at.empty() ? bitmaps : few_words)++;
    CHECK(few_words > 0); // both ways of keeping them were used
    CHECK(bitmaps > 0);
    CHECK(g.grammar->contexts_bytes < g.grammar->contexts.size() * ((size_t)m.info().n_vocab / 8)); // smaller than a bitmap each
}

TEST_CASE("grammar contexts: with the grammar's room for contexts spent, masks walked from the state allow exactly the same tokens (GPT-2 BPE)") {
    const Model& m = bpe_model();
    REQUIRE(m.model);
    SchemaGrammar g(m.model, keys_schema);
    g.grammar->contexts_bytes = GPT2__CONTEXTS_MAX_BYTES;
    gpt2__grammar_matcher matcher;
    CHECK(mask_mismatches(m.model, g.grammar, keys_text, &matcher) == 0);
    CHECK(g.grammar->contexts.empty());
}

TEST_CASE("grammar contexts: a matcher begun again at each sentence's end allows only tokens that keep the text in the grammar (GPT-2 BPE)") {
    // gpt2-bench's constrained decode begins its generator's matcher again at each sentence; the
    // states its table kept named stack nodes that the new start numbers anew. A walk of random
    // tokens, each drawn from the mask (examples/grammars/npc_state.schema.json: enums, a bounded
    // integer, a string of at most 60 characters), through several sentences.
    const Model& m = bpe_model();
    REQUIRE(m.model);
    std::string schema;
    REQUIRE(read_whole_file(std::string(GPT2_SOURCE_DIR) + "/examples/grammars/npc_state.schema.json", &schema));
    SchemaGrammar g(m.model, schema.c_str());
    const gpt2_model_info info = gpt2_model_get_info(m.model);
    gpt2__grammar_matcher matcher;
    gpt2__matcher_begin(&matcher, g.grammar);
    std::vector<uint32_t> allowed(((size_t)info.n_vocab + 31) / 32);
    std::mt19937 rng(7);
    std::string sentence;
    int sentences = 0;
    for (int step = 0; step < 400; step++) {
        gpt2_error err;
        REQUIRE_MESSAGE(gpt2__matcher_mask(&matcher, allowed.data(), &err) == GPT2_OK, err.message);
        std::vector<int32_t> choices;
        for (int32_t t = 0; t < info.n_vocab; t++)
            if (allowed[(size_t)t >> 5] >> (t & 31) & 1) choices.push_back(t);
        REQUIRE(!choices.empty());
        const int32_t token = choices[std::uniform_int_distribution<size_t>(0, choices.size() - 1)(rng)];
        bool alive = token == info.eos_token;
        if (token != info.eos_token) {
            const std::string piece = token_text(m.model, token);
            CAPTURE(sentence);
            CAPTURE(piece);
            REQUIRE(grammar_match(g.grammar, sentence + piece) != GPT2_MATCH_NONE);
            REQUIRE(gpt2__matcher_feed(&matcher, piece, &alive, &err) == GPT2_OK);
            REQUIRE(alive);
            sentence += piece;
        }
        if (token == info.eos_token || gpt2__matcher_finished(matcher)) {
            CHECK(grammar_match(g.grammar, sentence) == GPT2_MATCH_COMPLETE);
            gpt2__matcher_begin(&matcher, g.grammar);
            sentence.clear();
            sentences++;
        }
    }
    CHECK(sentences >= 3);
}
