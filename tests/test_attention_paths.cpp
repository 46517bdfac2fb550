// The two attention paths against each other on a model with a context long enough for several
// key ranges: decode (1-3 new tokens: all heads at once, keys split into ranges and merged) and
// prefill (4 or more: one head at a time), with f32 and f16 caches; and the same bits whatever
// the thread count.
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

// Logits after feeding ids[0..n) in one pass (prefill, per-head attention).
static std::vector<float> prefill_logits(const gpt2_model* model, const std::vector<int32_t>& ids, size_t n, int kv_f16) {
    Session s(model, 1, 0, kv_f16);
    REQUIRE(s.session);
    REQUIRE(gpt2_session_eval(s.session, ids.data(), n, nullptr) == GPT2_OK);
    const float* logits = gpt2_session_logits(s.session);
    return std::vector<float>(logits, logits + 10);
}

TEST_CASE("decode attention in 1, 2 and 3 tokens a pass gives prefill's logits at every length, f32 and f16 caches") {
    Loaded m(tiny_model(long_context()).build());
    REQUIRE_MESSAGE(m.model, m.err.message);
    const std::vector<int32_t> ids = token_ids(300);
    for (int kv_f16 : {0, 1}) {
        for (int step : {1, 2, 3}) {
            CAPTURE(kv_f16); CAPTURE(step);
            Session s(m.model, 2, 0, kv_f16);
            REQUIRE(s.session);
            float worst = 0;
            int compared = 0;
            for (size_t fed = 0; fed < ids.size();) {
                const size_t n = std::min(ids.size() - fed, (size_t)step);
                REQUIRE(gpt2_session_eval(s.session, ids.data() + fed, n, nullptr) == GPT2_OK);
                fed += n;
                if (fed / 23 == (fed - n) / 23 && fed != ids.size()) continue; // a length past each multiple of 23
                const std::vector<float> want = prefill_logits(m.model, ids, fed, kv_f16);
                worst = std::max(worst, max_abs_diff(gpt2_session_logits(s.session), want.data(), want.size()));
                compared++;
            }
            CHECK(compared >= 13);
            CHECK(worst <= (kv_f16 ? 2e-4f : 2e-5f)); // measured 4.1e-5 and 3.8e-6
        }
    }
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
