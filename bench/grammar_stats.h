// What a grammar costs, as both benchmarks report it (gpt2-bench-grammar over documents,
// gpt2-bench --grammar over a sampled decode): the grammar's make, timed, and the statistics of
// its token masks. Include after gpt2.h.
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

inline double grammar_now_us() { return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

inline double percentile(std::vector<double> v, double p) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[std::min(v.size() - 1, (size_t)(p * (double)v.size()))];
}

// Makes `gbnf` for the model, then 20 more times to time the make: first_ms is the first make
// (with the vocabulary's trie when it is the model's first grammar), compile_ms the median of
// the 20 (grammar_compile_ms).
inline gpt2_result make_grammar_timed(gpt2_model* model, const char* gbnf, gpt2_grammar** grammar, double* first_ms, double* compile_ms, gpt2_error* err) {
    double t0 = grammar_now_us();
    if (gpt2_grammar_from_gbnf(model, gbnf, nullptr, grammar, err) != GPT2_OK) return err->code;
    *first_ms = (grammar_now_us() - t0) / 1e3;
    std::vector<double> us;
    for (int i = 0; i < 20; i++) {
        gpt2_grammar* again = nullptr;
        t0 = grammar_now_us();
        gpt2_grammar_from_gbnf(model, gbnf, nullptr, &again, err);
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
