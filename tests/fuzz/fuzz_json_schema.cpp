// libFuzzer target for JSON Schemas: gpt2_grammar_from_json_schema on arbitrary text (the strict
// JSON reader, the converter, the regex subset of "pattern"), then gpt2_grammar_match on an
// instance, for a model whose vocabulary is printable ASCII and the newline. Built and run by
// tests/fuzz/run_fuzz.sh; seeds in tests/fuzz/corpus_json_schema/.
//
// The input is the schema, a NUL, the instance (at most 512 bytes are used). A finding is a
// crash, a sanitizer report, a timeout or an abort() below, on one of these rules:
// - from_json_schema returns GPT2_OK with a grammar, or GPT2_ERROR_BAD_GRAMMAR with NULL and a
//   message that is non-empty and ends within gpt2_error::message; compact and spaced agree on
//   whether the schema is refused.
// - gpt2_grammar_match returns GPT2_OK or GPT2_ERROR_BAD_GRAMMAR (too ambiguous) only.
// - A text the compact grammar accepts, the spaced one accepts too, and so does the grammar with
//   any_order and integer_fraction (objects in any order, 1.0 an integer: more values, never
//   fewer); a text any of them accepts whole is JSON (the strict reader reads it).
// tests/fuzz/json_schema.dict holds the keywords, for libFuzzer's -dict.
#define GPT2_IMPLEMENTATION
#define GPT2_STATIC
#include "gpt2.h"
#include "gguf_builder.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

enum { kMaxInput = 8192, kMaxInstance = 512 };

static void require(bool ok, const char* what) {
    if (ok) return;
    std::fprintf(stderr, "fuzz_json_schema: %s\n", what);
    std::abort();
}

static gpt2_model* ascii_model() {
    static std::vector<uint8_t> file;
    static gpt2_model* model = nullptr;
    if (model) return model;
    std::vector<std::string> chars{"\n"};
    for (char c = ' '; c <= '~'; c++) chars.push_back(std::string(1, c));
    TinyModelShape shape;
    shape.n_vocab = shape.n_vocab_rows = (int)chars.size();
    GgufBuilder g = tiny_model(shape);
    g.set_strings("gpt2h.tokenizer.chars", chars);
    file = g.build();
    gpt2_error err;
    require(gpt2_model_load_memory(file.data(), file.size(), nullptr, &model, &err) == GPT2_OK, "the model does not load");
    return model;
}

static void check_error(gpt2_result r, const gpt2_grammar* g, const gpt2_error& err) {
    if (r == GPT2_OK) return require(g != nullptr, "OK without a grammar");
    require(r == GPT2_ERROR_BAD_GRAMMAR, "an error other than BAD_GRAMMAR");
    require(g == nullptr, "an error with a grammar");
    require(err.message[0] != '\0' && std::memchr(err.message, '\0', sizeof err.message) != nullptr, "an empty or unterminated message");
}

/* The grammar's answer; *ambiguous where the text can be read in too many ways to follow. */
static gpt2_match match(const gpt2_grammar* g, const std::string& text, bool* ambiguous = nullptr) {
    gpt2_match m = GPT2_MATCH_NONE;
    gpt2_error err;
    const gpt2_result r = gpt2_grammar_match(g, text.data(), text.size(), &m, &err);
    require(r == GPT2_OK || r == GPT2_ERROR_BAD_GRAMMAR, "grammar_match failed other than by ambiguity");
    if (ambiguous) *ambiguous = r != GPT2_OK;
    return r == GPT2_OK ? m : GPT2_MATCH_NONE;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size > kMaxInput) return 0;
    const std::string input((const char*)data, size);
    const size_t nul = input.find('\0');
    const std::string schema = input.substr(0, nul);
    const std::string instance = nul == std::string::npos ? "" : input.substr(nul + 1, kMaxInstance);
    gpt2_model* model = ascii_model();

    gpt2_grammar *compact = nullptr, *spaced = nullptr, *loose = nullptr;
    gpt2_error err_compact, err_spaced, err_loose;
    gpt2_json_schema_params p = gpt2_json_schema_default_params();
    p.compact = 1;
    const gpt2_result r_compact = gpt2_grammar_from_json_schema(model, schema.data(), schema.size(), &p, &compact, &err_compact);
    const gpt2_result r_spaced = gpt2_grammar_from_json_schema(model, schema.data(), schema.size(), nullptr, &spaced, &err_spaced);
    p.any_order = p.integer_fraction = 1;
    const gpt2_result r_loose = gpt2_grammar_from_json_schema(model, schema.data(), schema.size(), &p, &loose, &err_loose);
    check_error(r_compact, compact, err_compact);
    check_error(r_spaced, spaced, err_spaced);
    check_error(r_loose, loose, err_loose);
    require((r_compact == GPT2_OK) == (r_spaced == GPT2_OK), "compact and spaced disagree on whether the schema is refused");
    if (compact && spaced) {
        const gpt2_match in_compact = match(compact, instance), in_spaced = match(spaced, instance);
        bool ambiguous = false;
        const gpt2_match in_loose = loose ? match(loose, instance, &ambiguous) : GPT2_MATCH_NONE;
        if (in_compact == GPT2_MATCH_COMPLETE) require(in_spaced == GPT2_MATCH_COMPLETE, "compact accepts what spaced does not");
        if (in_compact == GPT2_MATCH_COMPLETE && loose && !ambiguous) require(in_loose == GPT2_MATCH_COMPLETE, "any_order and integer_fraction refuse what the defaults accept");
        if (in_compact == GPT2_MATCH_COMPLETE || in_spaced == GPT2_MATCH_COMPLETE || in_loose == GPT2_MATCH_COMPLETE) {
            gpt2__json value;
            gpt2_error err;
            require(gpt2__json_parse(instance.data(), instance.size(), &value, &err) == GPT2_OK, "an accepted text is not JSON");
        }
    }
    gpt2_grammar_free(compact);
    gpt2_grammar_free(spaced);
    gpt2_grammar_free(loose);
    return 0;
}
