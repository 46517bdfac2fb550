// What a grammar costs, as the benchmarks report it (gpt2-bench-grammar over documents,
// gpt2-bench-schema over MaskBench, gpt2-bench --grammar over a sampled decode): the grammar's
// make, timed, a text fed through its masks, and the statistics of the masks. Include after
// gpt2.h (with its implementation: the text is fed through the matcher itself).
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

inline double grammar_now_us() { return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

inline double percentile(std::vector<double> v, double p) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[std::min(v.size() - 1, (size_t)(p * (double)v.size()))];
}

// The grammar of `text`: GBNF, or a JSON Schema when `json_schema` (compact output, as a model
// not trained on indented JSON should write it).
inline gpt2_result make_grammar(gpt2_model* model, const std::string& text, bool json_schema, gpt2_grammar** grammar, gpt2_error* err) {
    if (!json_schema) return gpt2_grammar_from_gbnf(model, text.c_str(), nullptr, grammar, err);
    gpt2_json_schema_params params = gpt2_json_schema_default_params();
    params.compact = 1;
    return gpt2_grammar_from_json_schema(model, text.data(), text.size(), &params, grammar, err);
}

// Makes the grammar of `text` (make_grammar) for the model, then 20 more times to time the make:
// first_ms is the first make (with the vocabulary's trie when it is the model's first grammar),
// compile_ms the median of the 20 (grammar_compile_ms).
inline gpt2_result make_grammar_timed(gpt2_model* model, const std::string& text, bool json_schema, gpt2_grammar** grammar, double* first_ms, double* compile_ms,
                                      gpt2_error* err) {
    double t0 = grammar_now_us();
    if (make_grammar(model, text, json_schema, grammar, err) != GPT2_OK) return err->code;
    *first_ms = (grammar_now_us() - t0) / 1e3;
    std::vector<double> us;
    for (int i = 0; i < 20; i++) {
        gpt2_grammar* again = nullptr;
        t0 = grammar_now_us();
        make_grammar(model, text, json_schema, &again, err);
        us.push_back(grammar_now_us() - t0);
        gpt2_grammar_free(again);
    }
    *compile_ms = percentile(us, 0.5) / 1e3;
    return GPT2_OK;
}

// Every step's mask time and whether the grammar allowed exactly one token there (a forced
// token: the share of those is forced_tokens_share).
struct GrammarMaskStats {
    std::vector<double> mask_us;
    size_t forced = 0;

    // `allowed`: the mask, a bit per token, in `words` words
    void add(double us, const uint32_t* allowed, size_t words) {
        mask_us.push_back(us);
        size_t n_allowed = 0;
        for (size_t i = 0; i < words; i++) n_allowed += (size_t)__builtin_popcount(allowed[i]);
        forced += n_allowed == 1;
    }
    size_t steps() const { return mask_us.size(); }
    double p50() const { return percentile(mask_us, 0.5); }
    double p99() const { return percentile(mask_us, 0.99); }
    double max() const { return percentile(mask_us, 1.0); }
    double forced_share() const { return mask_us.empty() ? 0 : (double)forced / (double)mask_us.size(); }
};

// How a text went through a grammar's masks (feed_text).
struct FedText {
    bool failed = false;   // a mask could not be made, or the text not tokenized (the error says why)
    bool followed = false; // every token was allowed
    size_t refused_at = 0; // else the token the mask refused
    bool complete = false; // followed, and the text ends a sentence of the grammar
};

// Feeds text's tokens through a matcher of `grammar` as constrained generation meets them: at
// each step the mask, then the token where the mask allows it. on_step(mask_us, step_us,
// allowed, words) sees every step: the mask's time alone and with the token's feed (MaskBench's
// time between masks), and the mask, a bit per token in `words` words.
template <class OnStep>
FedText feed_text(gpt2_model* model, const gpt2_grammar* grammar, const std::string& text, OnStep on_step, gpt2_error* err) {
    FedText fed;
    std::vector<int32_t> ids(text.size() + 1);
    size_t n = 0;
    if (gpt2_tokenize(model, text.data(), text.size(), 0, ids.data(), ids.size(), &n, err) != GPT2_OK) return fed.failed = true, fed;
    std::vector<uint32_t> allowed(((size_t)model->n_vocab + 31) / 32);
    gpt2__grammar_matcher m;
    gpt2__matcher_begin(&m, grammar);
    for (size_t i = 0; i < n; i++) {
        const double t0 = grammar_now_us();
        if (gpt2__matcher_mask(&m, allowed.data(), err) != GPT2_OK) return fed.failed = true, fed;
        const double mask_us = grammar_now_us() - t0;
        const bool ok = (allowed[(size_t)ids[i] >> 5] >> (ids[i] & 31)) & 1;
        bool alive = false;
        if (ok) gpt2__matcher_feed(&m, gpt2__tokenizer_token_bytes(&model->tokenizer, ids[i]), &alive, err);
        on_step(mask_us, grammar_now_us() - t0, allowed.data(), allowed.size());
        if (!ok) return fed.refused_at = i, fed;
    }
    fed.followed = true;
    fed.complete = m.state.complete;
    return fed;
}
