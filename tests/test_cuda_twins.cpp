// The CPU twins of the CUDA kernels whose arithmetic is not the shipped path's (tests/cuda/*_twin.h)
// against the CPU's own code: here, without a GPU, in the normal suite. On a GPU,
// tests/cuda/test_cuda.cu compares each kernel with its twin, so the two steps together tie the
// kernel to the CPU's results.
//
// This file calls internal functions (the sampling chain, the scalar kernels), so it compiles its
// own private (GPT2_STATIC) copy of the implementation, as tests/test_sampling.cpp does.
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#endif
#define GPT2_IMPLEMENTATION
#define GPT2_STATIC
#include "gpt2.h"
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

#include <doctest/doctest.h>

#include "cuda/sampler_twin.h"

#include <string>
#include <vector>

using sampler_twin::host_chain;

TEST_CASE("the GPU sampler's twin draws the host chain's tokens: masks, top_k, top_p, temperature, ties, every way through the kernel") {
    const float temperatures[] = {0.0f, 0.8f, 1.3f};
    const float top_ps[] = {0.0f, 0.5f, 0.95f};
    int paths[4] = {0, 0, 0, 0}, checked = 0, same = 0, same_plain = 0, plain = 0;
    uint64_t seed = 1;
    for (const sampler_twin::Logits& set : sampler_twin::logit_sets()) {
        const int n = (int)set.values.size();
        const std::vector<std::vector<uint32_t>> masks = sampler_twin::masks(n);
        const int top_ks[] = {0, 1, 40, 200, 300, n};
        for (size_t mi = 0; mi < masks.size(); mi++) {
            const uint32_t* allowed = masks[mi].empty() ? nullptr : masks[mi].data();
            for (float t : temperatures)
                for (int k : top_ks)
                    for (float p : top_ps) {
                        CAPTURE(set.name);
                        CAPTURE(mi);
                        CAPTURE(t);
                        CAPTURE(k);
                        CAPTURE(p);
                        const uint64_t state = seed++ * 0x9e3779b97f4a7c15ull;
                        const sampler_twin::Draw d = sampler_twin::draw(set.values.data(), n, allowed, t, k, p, state);
                        paths[d.path]++;
                        if (d.path == sampler_twin::HOST) {
                            /* only top_k beyond the candidates' room, or top_p over a K too large to sort */
                            CHECK((k > sampler_twin::MAX_K || p > 0.0f));
                            continue;
                        }
                        uint64_t host_state = state;
                        const int32_t want = host_chain(set.values, allowed, t, k, p, &host_state);
                        checked++;
                        same += d.token == want;
                        if (d.token != want) MESSAGE("twin " << d.token << " (path " << d.path << "), host " << want);
                        if (!allowed && p == 0.0f) { /* gpt2_generate without the chain: gpt2__sample */
                            uint64_t sample_state = state;
                            std::vector<float> scratch((size_t)n);
                            plain++;
                            same_plain += d.token == gpt2__sample(set.values.data(), n, t, k, &sample_state, scratch.data());
                        }
                    }
        }
    }
    MESSAGE(same << " of " << checked << " draws as the host's chain, " << same_plain << " of " << plain << " as gpt2__sample; ways: greedy " << paths[0]
                 << ", exact " << paths[1] << ", tree " << paths[2] << ", left to the host " << paths[3]);
    CHECK(same == checked);
    CHECK(same_plain == plain);
    for (int way = 0; way < 4; way++) CHECK(paths[way] > 0); /* every way was taken */
}

TEST_CASE("the GPU sampler's twin: a slice whose ties at its k-th largest do not fit its candidates sends the draw to the tree, whose tokens are the host's") {
    // 4096 equal logits in the first slice and a few larger ones in the second: top_k 40 ends
    // inside the tie, which the first slice cannot store.
    std::vector<float> logits(8192, 0.0f);
    for (int i = 4096; i < 4096 + 10; i++) logits[(size_t)i] = 1.0f;
    for (uint64_t seed = 1; seed <= 50; seed++) {
        const sampler_twin::Draw d = sampler_twin::draw(logits.data(), 8192, nullptr, 1.0f, 40, 0.0f, seed);
        CHECK(d.path == sampler_twin::TREE);
        uint64_t state = seed;
        CHECK(d.token == host_chain(logits, nullptr, 1.0f, 40, 0.0f, &state));
    }
    // the same with the tie above the k-th largest: the slice's strict candidates do, exactly
    for (int i = 0; i < 4096; i++) logits[(size_t)i] = 2.0f;
    for (uint64_t seed = 1; seed <= 20; seed++) {
        const sampler_twin::Draw d = sampler_twin::draw(logits.data(), 8192, nullptr, 1.0f, 5000, 0.0f, seed);
        CHECK(d.path == sampler_twin::HOST); /* top_k beyond the candidates' room */
        const sampler_twin::Draw e = sampler_twin::draw(logits.data(), 8192, nullptr, 1.0f, 100, 0.3f, seed);
        CHECK(e.path == sampler_twin::HOST); /* top_p over 4096 tied tokens: the host sorts them */
    }
}
