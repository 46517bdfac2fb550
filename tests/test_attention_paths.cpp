// The same bits whatever the thread count, on a model with a context long enough for several key
// ranges: decode (1-3 new tokens: all heads at once, keys split into ranges and merged) and
// prefill (4 or more: one head at a time). That both paths give the right logits, with f32 and
// f16 caches, tests/test_reference_forward.cpp checks against the reference forward pass.
#include "gguf_builder.h"
#include "helpers.h"
#include <doctest/doctest.h>

static TinyModelShape long_context() {
    TinyModelShape shape;
    shape.n_layer = 2;
    shape.n_embd = 64;
    shape.n_head = 4; // head_dim 16
    shape.n_ctx = 300; // up to 4 key ranges of 75
    return shape;
}

static std::vector<int32_t> token_ids(int n) {
    std::vector<int32_t> ids;
    for (int i = 0; i < n; i++) ids.push_back((int32_t)((i * 7 + 3) % 10));
    return ids;
}

TEST_CASE("logits do not depend on the thread count, prefill and decode") {
    Loaded m(tiny_model(long_context()).build());
    REQUIRE_MESSAGE(m.model, m.err.message);
    const std::vector<int32_t> ids = token_ids(300);
    std::vector<float> first; // the logits after every step, at one thread
    for (int threads : {1, 2, 3}) {
        CAPTURE(threads);
        Session s(m.model, threads);
        REQUIRE(s.session);
        std::vector<float> all;
        REQUIRE(gpt2_session_eval(s.session, ids.data(), 40, nullptr) == GPT2_OK); // prefill
        for (size_t t = 40; t <= ids.size(); t++) {
            const float* logits = gpt2_session_logits(s.session);
            all.insert(all.end(), logits, logits + 10);
            if (t < ids.size()) REQUIRE(gpt2_session_eval(s.session, &ids[t], 1, nullptr) == GPT2_OK);
        }
        if (first.empty()) first = all;
        else CHECK(all == first);
    }
}
