// The same model, prompt, seed and parameters give the same token ids on every kernel set: 200
// tokens of seeded sampling and 200 greedy (tests/same_tokens.h), with the shipped model (f16)
// and the trained fixture (f32), each set against the scalar set. The sets round differently
// (their sums run in other orders): their logits differ by up to 1.1e-5 on these paths, so a
// token could only change where two candidates are that close (greedy: the closest top-2 gap
// here is 0.006; sampling: the closest draw is 5.5e-6 of the total from an edge between two
// tokens). On these cases no set differs, natively, under Wine or under qemu (README, "Same
// seed, same tokens"); tools/cross_test.sh compares the same lines across platforms
// (gpt2-same-tokens). This file holds a private copy of the implementation to choose the set.
#define GPT2_IMPLEMENTATION
#define GPT2_STATIC
#include "helpers.h"
#include "same_tokens.h"
#include <doctest/doctest.h>

// The first position where the ids differ, or -1.
static int first_difference(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
    for (size_t i = 0; i < std::min(a.size(), b.size()); i++)
        if (a[i] != b[i]) return (int)i;
    return a.size() == b.size() ? -1 : (int)std::min(a.size(), b.size());
}

TEST_CASE("every kernel set gives the scalar set's 200 tokens, seeded sampling and greedy, shipped model and fixture") {
    const std::string models[] = {std::string(GPT2_SOURCE_DIR) + "/models/shakespeare_char_medium.gguf", test_model("shakespeare_char.gguf")};
    const gpt2__kernels* sets[gpt2__max_kernel_sets];
    const int n_sets = gpt2__supported_kernels(sets);
    std::string compared;
    for (int i = 0; i < n_sets; i++) compared += std::string(" ") + sets[i]->name;
    MESSAGE("kernel sets on this CPU:" << compared); // scalar alone (GPT2_NO_SIMD) compares nothing
    for (const std::string& path : models) {
        CAPTURE(path);
        Model m(path);
        REQUIRE_MESSAGE(m.model, m.err.message);
        for (const SameTokensCase& c : same_tokens_cases) {
            const std::string name = c.name;
            CAPTURE(name);
            std::vector<int32_t> want;
            const std::string failure = same_tokens_generate(m.model, &gpt2__kernels_scalar, 2, c, &want);
            REQUIRE_MESSAGE(failure.empty(), failure);
            for (int i = 0; i < n_sets; i++) {
                if (sets[i] == &gpt2__kernels_scalar) continue;
                const std::string kernels = sets[i]->name;
                CAPTURE(kernels);
                std::vector<int32_t> got;
                const std::string failed = same_tokens_generate(m.model, sets[i], 2, c, &got);
                REQUIRE_MESSAGE(failed.empty(), failed);
                const int at = first_difference(got, want);
                CHECK_MESSAGE(at == -1, "first different token at position " << at << " of " << same_tokens_count
                                                << " (a kernel change can move a near-tie: see the README's \"Same seed, same tokens\")");
            }
        }
    }
}
