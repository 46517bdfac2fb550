// The same tokens on every kernel set and every platform. The cases below run on each kernel set
// of this CPU in one process (tests/test_same_tokens.cpp, against the scalar set) and are printed
// as lines of token ids by gpt2-same-tokens (tests/same_tokens.cpp), which tools/cross_test.sh
// runs under Wine and qemu (and a WebAssembly build under Node) to compare with the native ids.
// Needs the implementation (GPT2_IMPLEMENTATION) in the including file, to choose a kernel set.
#pragma once
#include "gpt2.h"
#include <string>
#include <vector>

struct SameTokensCase {
    const char* name;
    float temperature; // 0 = greedy
    int top_k;
    uint64_t seed;
};

// Seeded sampling at sample.py's temperature with a top-k that leaves many candidates, and greedy.
static const SameTokensCase same_tokens_cases[] = {{"sampled", 0.8f, 40, 1337}, {"greedy", 0.0f, 0, 1337}};
static const char same_tokens_prompt[] = "ROMEO:";
// Past the shipped model's context of 128 (and the fixture's 64), under the discard policy: the
// tokens take the decode path and, after each discard, the prefill path. (The exact policy
// would recompute the whole window for every token past the context: minutes with the scalar
// set, and longer under qemu.)
static const int same_tokens_count = 200;

// Generates the case's tokens after same_tokens_prompt in a new session of `model` that runs
// `kernels` on `n_threads` threads. Returns "" with the ids in *ids, or what failed.
inline std::string same_tokens_generate(const gpt2_model* model, const gpt2__kernels* kernels, int n_threads, const SameTokensCase& c,
                                        std::vector<int32_t>* ids) {
    gpt2_error err;
    size_t n_prompt = 0;
    if (gpt2_tokenize(model, same_tokens_prompt, sizeof same_tokens_prompt - 1, 0, nullptr, 0, &n_prompt, &err) != GPT2_OK) return err.message;
    std::vector<int32_t> prompt(n_prompt);
    gpt2_tokenize(model, same_tokens_prompt, sizeof same_tokens_prompt - 1, 0, prompt.data(), prompt.size(), &n_prompt, &err);
    gpt2_session_params sp = gpt2_session_default_params();
    sp.n_threads = n_threads;
    sp.context_policy = GPT2_CONTEXT_DISCARD;
    gpt2_session* session = nullptr;
    if (gpt2_session_create(model, &sp, &session, &err) != GPT2_OK) return err.message;
    static_cast<gpt2__cpu_session*>(session)->kernels = kernels;
    gpt2_generate_params gp = gpt2_generate_default_params();
    gp.max_new_tokens = same_tokens_count;
    gp.temperature = c.temperature;
    gp.top_k = c.top_k;
    gp.seed = c.seed;
    ids->assign((size_t)same_tokens_count, 0);
    size_t produced = 0;
    const gpt2_result r = gpt2_generate(session, prompt.data(), prompt.size(), &gp, ids->data(), ids->size(), &produced, &err);
    gpt2_session_free(session);
    ids->resize(produced);
    if (r != GPT2_OK) return err.message;
    if (produced != (size_t)same_tokens_count) return "generated " + std::to_string(produced) + " tokens, not " + std::to_string(same_tokens_count);
    return "";
}

// The exchange format: "MODEL CASE id id ...", one line per model and case. Lines starting with
// '#' are comments (which kernel set, how many threads) and are not compared.
inline std::string same_tokens_line(const char* model_name, const SameTokensCase& c, const std::vector<int32_t>& ids) {
    std::string line = std::string(model_name) + " " + c.name;
    for (int32_t id : ids) line += " " + std::to_string(id);
    return line;
}
