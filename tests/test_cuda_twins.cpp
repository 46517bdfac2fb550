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

#include "cuda/fused_twin.h"
#include "cuda/q8_twin.h"
#include "cuda/sampler_twin.h"

#include <cmath>
#include <cstring>
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

TEST_CASE("the q8_0 one-token product's twin (8-bit values and scales apart, a lane pair per block) gives the scalar kernels' q8_0 rows to float rounding") {
    uint64_t r = 5;
    const auto next = [&] { return gpt2__rng_next(&r); };
    int rows_checked = 0;
    float worst_ulps = 0;
    for (int K : {32, 64, 96, 768, 1600, 3072, 6400}) {
        CAPTURE(K);
        const int nb = K / 32;
        std::vector<float> x((size_t)K);
        for (float& v : x) v = (float)((int)(next() % 20001) - 10000) / 1000.0f;
        x[(size_t)(next() % (uint64_t)K)] = 0.0f;
        for (int b = 0; b < nb; b += 7) /* some all-zero input blocks (scale 0) */
            for (int i = 0; i < 32; i++) x[(size_t)(32 * b + i)] = 0.0f;
        std::vector<int8_t> xq((size_t)K);
        std::vector<float> xscale((size_t)nb);
        gpt2__quantize_q8_scalar(xq.data(), xscale.data(), x.data(), K);
        for (int row = 0; row < 20; row++) {
            std::vector<uint8_t> q8((size_t)nb * gpt2__q8_block_bytes);
            for (int b = 0; b < nb; b++) {
                uint8_t* block = q8.data() + (size_t)b * gpt2__q8_block_bytes;
                const uint16_t scale = gpt2__f32_to_f16((float)(next() % 1000 + 1) * 1e-4f);
                std::memcpy(block, &scale, 2);
                for (int i = 0; i < 32; i++) block[2 + i] = (uint8_t)(next() & 255); /* -128 too */
            }
            const q8_twin::Row split = q8_twin::split(q8.data(), K);
            const float twin = q8_twin::dot(split, xq.data(), xscale.data(), K);
            const float scalar = gpt2__dot_q8_scalar(q8.data(), xq.data(), xscale.data(), K);
            /* both add the same float terms isum * (w scale * x scale), in another order and
               rounding: within (blocks + 5) roundings of their magnitudes' sum of the exact sum */
            double exact = 0, magnitude = 0;
            for (int b = 0; b < nb; b++) {
                const uint8_t* block = q8.data() + (size_t)b * gpt2__q8_block_bytes;
                long isum = 0;
                for (int i = 0; i < 32; i++) isum += (long)gpt2__q8_values(block)[i] * xq[(size_t)(32 * b + i)];
                const double term = (double)isum * (double)(gpt2__f16_to_f32(gpt2__q8_scale_f16(block)) * xscale[(size_t)b]);
                exact += term;
                magnitude += std::fabs(term);
            }
            const double bound = (nb + 5) * std::ldexp(magnitude, -24);
            CHECK(std::fabs(twin - exact) <= bound);
            CHECK(std::fabs(scalar - exact) <= bound);
            worst_ulps = std::max(worst_ulps, (float)(std::fabs(twin - exact) / std::ldexp(magnitude, -24)));
            rows_checked++;
        }
    }
    MESSAGE(rows_checked << " rows; the twin's largest error " << worst_ulps << " units of 2^-24 of its terms' magnitudes");
}

TEST_CASE("the q8_0 twin reads the GGUF block layout: scales and values where gpt2__dequantize_row finds them") {
    const int K = 96;
    std::vector<uint8_t> q8(3 * gpt2__q8_block_bytes);
    for (size_t i = 0; i < q8.size(); i++) q8[i] = (uint8_t)(i * 37 + 11);
    for (int b = 0; b < 3; b++) { /* finite scales */
        const uint16_t scale = gpt2__f32_to_f16(0.01f * (float)(b + 1));
        std::memcpy(q8.data() + (size_t)b * gpt2__q8_block_bytes, &scale, 2);
    }
    std::vector<float> want((size_t)K);
    gpt2__dequantize_row(GPT2_TYPE_Q8_0, q8.data(), want.data(), K);
    const q8_twin::Row split = q8_twin::split(q8.data(), K);
    for (int i = 0; i < K; i++) CHECK(want[(size_t)i] == gpt2__f16_to_f32(split.scales[(size_t)i / 32]) * (float)split.values[(size_t)i]);
}

TEST_CASE("the fused attention + output projection's twin gives x + c_proj(att) + bias within float rounding of a float64 product") {
    uint64_t r = 3;
    const auto uniform = [&] { return (double)(gpt2__rng_next(&r) >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0; };
    const struct {
        int C, H;
    } shapes[] = {{768, 12}, {1600, 25}, {256, 8}, {1024, 8}}; /* D = 64, 64, 32, 128 */
    for (const auto& shape : shapes) {
        for (bool bf16 : {false, true}) {
            CAPTURE(shape.C);
            CAPTURE(bf16);
            const int C = shape.C, H = shape.H;
            std::vector<uint16_t> W((size_t)C * C);
            std::vector<float> att((size_t)C), bias((size_t)C), x((size_t)C);
            for (uint16_t& w : W) w = bf16 ? gpt2__f32_to_bf16((float)(0.05 * uniform())) : gpt2__f32_to_f16((float)(0.05 * uniform()));
            for (int i = 0; i < C; i++) {
                att[(size_t)i] = (float)uniform();
                bias[(size_t)i] = (float)(0.1 * uniform());
                x[(size_t)i] = (float)(3.0 * uniform());
            }
            std::vector<float> got = x;
            fused_twin::attn_proj(W.data(), bf16, att.data(), bias.data(), C, H, got.data());
            int bad = 0;
            for (int o = 0; o < C; o++) {
                double exact = 0, magnitude = std::fabs(x[(size_t)o]) + std::fabs(bias[(size_t)o]);
                for (int k = 0; k < C; k++) {
                    const uint16_t w = W[(size_t)o * C + (size_t)k];
                    const double term = (double)(bf16 ? gpt2__bf16_to_f32(w) : gpt2__f16_to_f32(w)) * att[(size_t)k];
                    exact += term;
                    magnitude += std::fabs(term);
                }
                exact += (double)bias[(size_t)o] + x[(size_t)o];
                /* 8 fma a lane, log2(D / 8) butterfly adds, H head adds, the bias and x: each one rounding */
                bad += std::fabs(got[(size_t)o] - exact) > (C / H + H + 8) * std::ldexp(magnitude, -24);
            }
            CHECK(bad == 0);
        }
    }
}
