#ifndef GPT2__PART_MODEL_SAMPLER_H
#define GPT2__PART_MODEL_SAMPLER_H
#include "../common.h"

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

/* A float as the messages below print it: %g, but every NaN as "NaN". printf spells NaN by
   platform and sign ("nan", "-nan", "-nan(ind)"), and C#'s float.NaN has its sign bit set. */
struct gpt2__float_text {
    char text[32];
    explicit gpt2__float_text(double v) {
        if (std::isnan(v)) std::snprintf(text, sizeof text, "NaN");
        else std::snprintf(text, sizeof text, "%g", v);
    }
};

static gpt2_result gpt2__check_sampling(float temperature, int top_k, gpt2_error* err) {
    if (!std::isfinite(temperature) || temperature < 0.0f)
        return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "temperature is %s; expected a finite number >= 0 (0 = greedy)", gpt2__float_text(temperature).text);
    if (top_k < 0) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "top_k is %d; expected >= 0 (0 = no limit)", top_k);
    return GPT2_OK;
}

static int32_t gpt2__argmax(const float* logits, int n) {
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

/* The k-th largest of x[0..n), 1 <= k < n (nth_element's answer), in one pass that keeps the k
   largest seen so far in a min-heap (`heap`: k floats): after the first few thousand values few
   enter it, so it costs about a comparison per value (docs/PERFORMANCE.md, Kernel notes). */
static float gpt2__kth_largest(const float* x, int n, int k, float* heap) {
    std::copy(x, x + k, heap);
    std::make_heap(heap, heap + k, std::greater<float>());
    for (int i = k; i < n; i++)
        if (x[i] > heap[0]) {
            std::pop_heap(heap, heap + k, std::greater<float>());
            heap[k - 1] = x[i];
            std::push_heap(heap, heap + k, std::greater<float>());
        }
    return heap[0];
}

/* `scratch` holds n floats. top_k larger than n keeps all (nanoGPT: min(top_k, vocab_size)). */
static int32_t gpt2__sample(const float* logits, int n, float temperature, int top_k, uint64_t* rng, float* scratch) {
    if (temperature == 0.0f || top_k == 1) return gpt2__argmax(logits, n);
    float threshold = -INFINITY, max_logit;
    if (top_k > 0 && top_k < n) { /* nanoGPT keeps every logit >= the k-th largest */
        threshold = gpt2__kth_largest(logits, n, top_k, scratch);
        max_logit = *std::max_element(scratch, scratch + top_k); /* the largest is one of the k */
    } else {
        max_logit = logits[gpt2__argmax(logits, n)];
    }
    const double inv_t = 1.0 / temperature;
    double total = 0.0;
    for (int i = 0; i < n; i++) {
        scratch[i] = logits[i] >= threshold && logits[i] > -INFINITY ? (float)std::exp(((double)logits[i] - max_logit) * inv_t) : 0.0f; /* exp(-inf) is 0: not worth a call where a grammar removed most tokens */
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

/* log softmax(logits)[id], in double. */
static double gpt2__log_prob(const float* logits, int n, int32_t id) {
    double max_logit = logits[0];
    for (int i = 1; i < n; i++) max_logit = std::max(max_logit, (double)logits[i]);
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += std::exp((double)logits[i] - max_logit);
    return (double)logits[id] - max_logit - std::log(sum);
}

/* ---- The chain ---------------------------------------------------------------------------
   The controls beyond nanoGPT's, in llama.cpp's order (GENERATION in the API): logit_bias, the
   penalties, on_logits, top_k, top_p, min_p, then temperature and the draw of gpt2__sample.
   They edit a copy of the logits and run only when one of them is on, so that with all of
   them off the tokens are exactly gpt2__sample's. */

enum { GPT2__DEFAULT_REPEAT_LAST_N = 64 }; /* llama.cpp's penalty_last_n */

static bool gpt2__penalties_on(const gpt2_generate_params& p) {
    return (p.repeat_penalty != 0.0f && p.repeat_penalty != 1.0f) || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
}

/* Whether any control beyond temperature and top_k is on. */
static bool gpt2__chain_on(const gpt2_generate_params& p) {
    return (p.top_p > 0.0f && p.top_p < 1.0f) || p.min_p > 0.0f || gpt2__penalties_on(p) || p.n_logit_bias > 0 || p.on_logits || p.grammar;
}

static gpt2_result gpt2__check_chain(const gpt2_generate_params& p, int n_vocab, gpt2_error* err) {
    if (!(p.top_p >= 0.0f && p.top_p <= 1.0f)) /* written so that NaN fails too */
        return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "top_p is %s; expected 0 to 1 (0 or 1 = off)", gpt2__float_text(p.top_p).text);
    if (!(p.min_p >= 0.0f && p.min_p <= 1.0f))
        return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "min_p is %s; expected 0 to 1 (0 = off)", gpt2__float_text(p.min_p).text);
    if (!std::isfinite(p.repeat_penalty) || p.repeat_penalty < 0.0f)
        return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "repeat_penalty is %s; expected a finite number >= 0 (0 or 1 = off)", gpt2__float_text(p.repeat_penalty).text);
    if (p.repeat_last_n < -1)
        return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "repeat_last_n is %d; expected -1 (the whole context), 0 (the default, %d) or more",
                          p.repeat_last_n, (int)GPT2__DEFAULT_REPEAT_LAST_N);
    if (!std::isfinite(p.presence_penalty))
        return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "presence_penalty is %s; expected a finite number (0 = off)", gpt2__float_text(p.presence_penalty).text);
    if (!std::isfinite(p.frequency_penalty))
        return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "frequency_penalty is %s; expected a finite number (0 = off)", gpt2__float_text(p.frequency_penalty).text);
    if (!p.logit_bias && p.n_logit_bias)
        return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "logit_bias is NULL but n_logit_bias is %zu", p.n_logit_bias);
    for (size_t i = 0; i < p.n_logit_bias; i++) {
        const gpt2_logit_bias& b = p.logit_bias[i];
        if (b.token < 0 || b.token >= n_vocab)
            return gpt2__fail(err, GPT2_ERROR_BAD_TOKEN, "logit_bias[%zu].token is %d, outside the vocabulary [0, %d)", i, (int)b.token, n_vocab);
        if (std::isnan(b.bias) || b.bias == INFINITY)
            return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "logit_bias[%zu].bias is %s; expected a finite number, or -INFINITY to ban the token", i,
                              gpt2__float_text(b.bias).text);
    }
    return GPT2_OK;
}

/* llama.cpp's penalties: for each distinct token of window[0..n_window), which occurs `count`
   times there, a logit > 0 is divided by `repeat` and any other multiplied by it (dividing a
   negative logit would make the token more likely), then count * frequency + presence is
   subtracted. `counts` holds n_vocab zeros, and holds zeros again on return. */
static void gpt2__apply_penalties(float* logits, const int32_t* window, size_t n_window, float repeat, float presence, float frequency, int* counts) {
    if (repeat == 0.0f) repeat = 1.0f; /* off */
    for (size_t i = 0; i < n_window; i++) counts[window[i]]++;
    for (size_t i = 0; i < n_window; i++) {
        const int32_t t = window[i];
        const int count = counts[t];
        if (count == 0) continue; /* an earlier occurrence of the same token did it */
        counts[t] = 0;
        logits[t] = logits[t] <= 0.0f ? logits[t] * repeat : logits[t] / repeat;
        logits[t] -= (float)count * frequency + presence;
    }
}

/* top_k, then top_p, then min_p: the tokens they drop become -INFINITY. Probabilities are those
   at temperature 1 (llama.cpp applies the temperature after them). scratch: n floats. */
static void gpt2__truncate(float* logits, int n, int top_k, float top_p, float min_p, float* scratch) {
    if (top_k > 0 && top_k < n) { /* gpt2__sample's rule: keep every logit >= the k-th largest */
        const float threshold = gpt2__kth_largest(logits, n, top_k, scratch);
        for (int i = 0; i < n; i++)
            if (logits[i] < threshold) logits[i] = -INFINITY;
    }
    if (top_p > 0.0f && top_p < 1.0f) { /* the fewest most likely whose probabilities reach top_p, and their ties */
        int m = 0;
        for (int i = 0; i < n; i++)
            if (logits[i] > -INFINITY) scratch[m++] = logits[i];
        const int head = std::min(m, 256); /* top_p usually needs few tokens: sort the rest only when it does not */
        std::partial_sort(scratch, scratch + head, scratch + m, std::greater<float>());
        const double max_logit = scratch[0];
        double total = 0.0;
        for (int j = 0; j < m; j++) total += std::exp((double)scratch[j] - max_logit);
        const double target = (double)top_p * total;
        double running = 0.0;
        float threshold = -INFINITY;
        for (int j = 0; j < m; j++) {
            if (j == head) std::sort(scratch + head, scratch + m, std::greater<float>());
            running += std::exp((double)scratch[j] - max_logit);
            if (running >= target) {
                threshold = scratch[j];
                break;
            }
        }
        for (int i = 0; i < n; i++)
            if (logits[i] < threshold) logits[i] = -INFINITY;
    }
    if (min_p > 0.0f) { /* p / p_max >= min_p, i.e. logit - max >= log(min_p) */
        const double lowest = (double)logits[gpt2__argmax(logits, n)] + std::log((double)min_p);
        for (int i = 0; i < n; i++)
            if ((double)logits[i] < lowest) logits[i] = -INFINITY;
    }
}

/* The chain up to the draw, in place on `logits` (n_vocab entries, a copy of the model's).
   context: the session's tokens; the penalties look at the last repeat_last_n of them.
   Afterwards the tokens that may be drawn have finite logits, the others -INFINITY (when the
   draw is greedy, top_k/top_p/min_p are skipped: they always keep the most likely token).
   Fails when on_logits leaves NaN, +INFINITY or no finite logit. scratch: n floats; counts: n
   zeros. */
static gpt2_result gpt2__chain_filter(float* logits, int n, const gpt2_generate_params& p, const int32_t* context, size_t n_context, const uint32_t* allowed,
                                      float* scratch, int* counts, gpt2_error* err) {
    for (size_t i = 0; i < p.n_logit_bias; i++) logits[p.logit_bias[i].token] += p.logit_bias[i].bias;
    if (gpt2__penalties_on(p)) {
        const size_t last_n = p.repeat_last_n < 0 ? n_context : p.repeat_last_n == 0 ? (size_t)GPT2__DEFAULT_REPEAT_LAST_N : (size_t)p.repeat_last_n;
        const size_t n_window = std::min(n_context, last_n);
        gpt2__apply_penalties(logits, context + (n_context - n_window), n_window, p.repeat_penalty, p.presence_penalty, p.frequency_penalty, counts);
    }
    /* the grammar's mask after the penalties (they never bring a removed token back) and before
       on_logits and top_k (which see only what the grammar allows) */
    if (allowed)
        for (int w = 0; w < (n + 31) / 32; w++) {
            if (allowed[w] == UINT32_MAX) continue;
            for (int i = w * 32; i < std::min(n, w * 32 + 32); i++)
                if (!((allowed[w] >> (i & 31)) & 1)) logits[i] = -INFINITY;
        }
    if (p.on_logits) p.on_logits(p.user, logits, n);
    /* logit_bias, the penalties (a huge negative one overflows to +inf) and the caller's code may
       leave what no draw can take; the mask cannot (it leaves a token: gpt2__generator_mask), so
       with the mask alone the pass over every logit is skipped */
    const bool caller_edited = p.n_logit_bias > 0 || p.on_logits || gpt2__penalties_on(p);
    bool any = !caller_edited;
    for (int i = 0; caller_edited && i < n; i++) {
        if (std::isnan(logits[i]) || logits[i] == INFINITY)
            return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "the logit of token %d is %s after logit_bias, the penalties and on_logits; expected a finite number or -INFINITY", i,
                              gpt2__float_text(logits[i]).text);
        any = any || logits[i] > -INFINITY;
    }
    if (!any)
        return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "no token left to sample: logit_bias or on_logits set every logit to -INFINITY%s",
                          allowed ? " that the grammar allows" : "");
    if (p.temperature != 0.0f && p.top_k != 1) gpt2__truncate(logits, n, p.top_k, p.top_p, p.min_p, scratch);
    return GPT2_OK;
}

/* The end of the chain: temperature, softmax and the draw over what gpt2__chain_filter left (its
   top_k already applied; top_k 1 stays greedy). scratch: n floats. */
static int32_t gpt2__chain_draw(const float* filtered, int n, const gpt2_generate_params& p, uint64_t* rng, float* scratch) {
    return gpt2__sample(filtered, n, p.temperature, p.top_k == 1 ? 1 : 0, rng, scratch);
}

#endif /* GPT2__PART_MODEL_SAMPLER_H */
