/* Sampling, nanoGPT's way: logits / temperature, keep the top_k, softmax, draw one. The RNG is
   our own (SplitMix64) so a seed gives the same tokens on every platform and compiler. */

static uint64_t gpt2__rng_next(uint64_t* state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1) with 53 random bits. */
static double gpt2__rng_uniform(uint64_t* state) { return (double)(gpt2__rng_next(state) >> 11) * (1.0 / 9007199254740992.0); }

static gpt2_result gpt2__check_sampling(float temperature, int top_k, gpt2_error* err) {
    if (!std::isfinite(temperature) || temperature < 0.0f)
        return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "temperature is %g; expected a finite number >= 0 (0 = greedy)", (double)temperature);
    if (top_k < 0) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "top_k is %d; expected >= 0 (0 = no limit)", top_k);
    return GPT2_OK;
}

static int32_t gpt2__argmax(const float* logits, int n) {
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

/* `scratch` holds n floats. top_k larger than n keeps all (nanoGPT: min(top_k, vocab_size)). */
static int32_t gpt2__sample(const float* logits, int n, float temperature, int top_k, uint64_t* rng, float* scratch) {
    if (temperature == 0.0f || top_k == 1) return gpt2__argmax(logits, n);
    float threshold = -INFINITY;
    if (top_k > 0 && top_k < n) { /* nanoGPT keeps every logit >= the k-th largest */
        std::memcpy(scratch, logits, (size_t)n * sizeof(float));
        std::nth_element(scratch, scratch + (top_k - 1), scratch + n, std::greater<float>());
        threshold = scratch[top_k - 1];
    }
    const double inv_t = 1.0 / temperature;
    const float max_logit = logits[gpt2__argmax(logits, n)];
    double total = 0.0;
    for (int i = 0; i < n; i++) {
        scratch[i] = logits[i] >= threshold ? (float)std::exp(((double)logits[i] - max_logit) * inv_t) : 0.0f;
        total += scratch[i];
    }
    double target = gpt2__rng_uniform(rng) * total, running = 0.0;
    int32_t last_kept = 0;
    for (int i = 0; i < n; i++) {
        if (scratch[i] == 0.0f) continue;
        last_kept = i;
        running += scratch[i];
        if (target < running) return i;
    }
    return last_kept; /* rounding left target at the very top */
}
