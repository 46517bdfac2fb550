// What the batch tests share (tests/test_batch.cpp on the CPU, tests/cuda/test_cuda.cu on the
// GPU): sessions with their own context, and rounds of evaluation run batched and one by one.
#pragma once
#include "helpers.h"
#include <doctest/doctest.h>
#include <algorithm>
#include <memory>

// A session with its own context length and policy (Session of helpers.h has neither).
struct Owned {
    gpt2_session* session = nullptr;
    Owned(const gpt2_model* m, int threads, int kv_f16, int n_ctx, gpt2_context_policy policy, int n_keep) {
        gpt2_session_params p = gpt2_session_default_params();
        p.n_threads = threads;
        p.kv_f16 = kv_f16;
        p.n_ctx = n_ctx;
        p.context_policy = policy;
        p.n_keep = n_keep;
        gpt2_error err;
        REQUIRE_MESSAGE(gpt2_session_create(m, &p, &session, &err) == GPT2_OK, err.message);
    }
    ~Owned() { gpt2_session_free(session); }
};

inline std::unique_ptr<Owned> session(const gpt2_model* m, int threads, int kv_f16, int n_ctx = 0, gpt2_context_policy policy = GPT2_CONTEXT_EXACT, int n_keep = 0) {
    return std::make_unique<Owned>(m, threads, kv_f16, n_ctx, policy, n_keep);
}

// Rounds of evaluation: round r gives session i the tokens rounds[r][i] (none: left out of the
// batch). `batched` runs each round as one gpt2_batch_eval, `alone` as gpt2_session_eval calls;
// returns the largest logit difference over all rounds and sessions, and checks the contexts.
// *largest_logit grows to the largest |logit| seen: the scale the differences are measured against.
using Rounds = std::vector<std::vector<std::vector<int32_t>>>;
inline float compare_rounds(const std::vector<gpt2_session*>& batched, const std::vector<gpt2_session*>& alone, const Rounds& rounds, int n_vocab, float* largest_logit) {
    float worst = 0;
    for (size_t r = 0; r < rounds.size(); r++) {
        CAPTURE(r);
        std::vector<gpt2_session*> in;
        std::vector<const int32_t*> tokens;
        std::vector<size_t> counts;
        for (size_t i = 0; i < batched.size(); i++) {
            if (rounds[r][i].empty()) continue;
            in.push_back(batched[i]);
            tokens.push_back(rounds[r][i].data());
            counts.push_back(rounds[r][i].size());
            gpt2_error err;
            REQUIRE_MESSAGE(gpt2_session_eval(alone[i], rounds[r][i].data(), rounds[r][i].size(), &err) == GPT2_OK, err.message);
        }
        gpt2_error err;
        REQUIRE_MESSAGE(gpt2_batch_eval(in.data(), tokens.data(), counts.data(), in.size(), &err) == GPT2_OK, err.message);
        for (size_t i = 0; i < batched.size(); i++) {
            CAPTURE(i);
            REQUIRE(gpt2_session_n_tokens(batched[i]) == gpt2_session_n_tokens(alone[i]));
            CHECK(std::equal(gpt2_session_tokens(batched[i]), gpt2_session_tokens(batched[i]) + gpt2_session_n_tokens(batched[i]), gpt2_session_tokens(alone[i])));
            const float* a = gpt2_session_logits(batched[i]);
            const float* b = gpt2_session_logits(alone[i]);
            if (!a || !b) {
                CHECK(a == b);
                continue;
            }
            worst = std::max(worst, max_abs_diff(a, b, (size_t)n_vocab));
            for (int v = 0; v < n_vocab; v++) *largest_logit = std::max(*largest_logit, std::fabs(b[v]));
        }
    }
    return worst;
}

// What on_token saw, for a session generating alone, in a batch or on a stage.
struct Heard {
    std::vector<int32_t> tokens;
    std::string text;
    int stop_after = -1; // return 1 (stop) once this many tokens have been heard
};

inline int hear(void* user, int32_t token, const char* text, size_t len) {
    Heard* h = (Heard*)user;
    if (token >= 0) h->tokens.push_back(token);
    h->text.append(text ? text : "", len);
    return h->stop_after >= 0 && (int)h->tokens.size() >= h->stop_after;
}
