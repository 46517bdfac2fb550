// What the grammar and JSON Schema tests share: a grammar's answer for a text (the reference the
// masks are checked against) and a token's text. In an unnamed namespace: test_grammar_contexts.cpp
// calls them on its private copy of the implementation, the other files on the public one
// (inline: a file need not use both).
#pragma once
#include "helpers.h"
#include <doctest/doctest.h>
#include <string>

namespace {
inline gpt2_match grammar_match(const gpt2_grammar* g, const std::string& text) {
    gpt2_match m = GPT2_MATCH_NONE;
    gpt2_error err{};
    REQUIRE(gpt2_grammar_match(g, text.data(), text.size(), &m, &err) == GPT2_OK);
    return m;
}

// The text of one token.
inline std::string token_text(const gpt2_model* model, int32_t token) {
    char piece[256];
    size_t len = 0;
    gpt2_error err{};
    REQUIRE(gpt2_detokenize(model, &token, 1, piece, sizeof piece, &len, &err) == GPT2_OK);
    return std::string(piece, len);
}
} // namespace
