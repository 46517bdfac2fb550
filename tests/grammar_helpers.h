// What the grammar and JSON Schema tests share: a grammar's answer for a text (the reference the
// masks are checked against). In an unnamed namespace: tests/test_grammar_contexts.cpp calls it on
// its private copy of the implementation, the other files on the public one.
#pragma once
#include "helpers.h"
#include <doctest/doctest.h>
#include <string>

namespace {
gpt2_match grammar_match(const gpt2_grammar* g, const std::string& text) {
    gpt2_match m = GPT2_MATCH_NONE;
    gpt2_error err{};
    REQUIRE(gpt2_grammar_match(g, text.data(), text.size(), &m, &err) == GPT2_OK);
    return m;
}
} // namespace
