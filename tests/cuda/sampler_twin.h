// The CPU twin of the many-block GPU sampler (gpt2__fast_sample_kernel, src/cuda/sampler.cuh):
// the same slices, the same candidates and tie rules, the same sums in the same order, the same
// draw from the same RNG number, in plain C++. tests/test_cuda_twins.cpp compares it with the
// host's chain (src/model/sampler.h) on the CPU; tests/cuda/test_cuda.cu compares the kernel with
// it on a GPU. The selections (k-th largest, argmax) are exact values, so they are computed here
// by the plainest means; only the floating-point sums must follow the kernel step by step.
// Needs gpt2.h's implementation (gpt2__rng_uniform, the chain) before it.
#ifndef GPT2_TESTS_CUDA_SAMPLER_TWIN_H
#define GPT2_TESTS_CUDA_SAMPLER_TWIN_H

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

namespace sampler_twin {

// The kernel's sizes (test_cuda.cu checks that they are GPT2__FS_*).
enum { THREADS = 1024, PER_THREAD = 4, SLICE = THREADS * PER_THREAD, MAX_SLICES = 64, MAX_K = 256, CAP = 256, EXACT_MAX = 1024 };
// Which way a draw went: GPT2__FS_GREEDY, _EXACT, _TREE, _HOST.
enum { GREEDY = 0, EXACT = 1, TREE = 2, HOST = 3 };

struct Draw {
    int32_t token; // -1: the host's chain must draw (HOST)
    int path;
};

inline float logit(const float* logits, const uint32_t* allowed, int i) {
    return allowed && !((allowed[i >> 5] >> (i & 31)) & 1u) ? -INFINITY : logits[i];
}

inline float weight(float l, float threshold, float max_logit, double inv_t) {
    return l >= threshold && l > -INFINITY ? (float)std::exp(((double)l - max_logit) * inv_t) : 0.0f;
}

// The k-th largest (1 <= k <= size), duplicates counted.
inline float kth_largest(std::vector<float> v, int k) {
    std::nth_element(v.begin(), v.begin() + (k - 1), v.end(), std::greater<float>());
    return v[(size_t)k - 1];
}

// gpt2__fs_descend.
inline int descend(const double* parts, int count, double target, double* before) {
    double running = 0.0, last_before = 0.0;
    int last = -1;
    for (int j = 0; j < count; j++) {
        if (parts[j] > 0.0) {
            last = j;
            last_before = running;
        }
        const double next = running + parts[j];
        if (parts[j] > 0.0 && target < next) {
            *before = running;
            return j;
        }
        running = next;
    }
    *before = last_before;
    return last;
}

// gpt2__fs_slice_sums: dsum[t] (THREADS), wsum[w] (32); returns the slice's sum.
inline double slice_sums(const float* logits, const uint32_t* allowed, int n, int b, float threshold, float max_logit, double inv_t, double* dsum, double* wsum) {
    for (int t = 0; t < THREADS; t++) {
        double d = 0.0;
        for (int u = 0; u < PER_THREAD; u++) {
            const int i = b * SLICE + PER_THREAD * t + u;
            if (i < n) d += weight(logit(logits, allowed, i), threshold, max_logit, inv_t);
        }
        dsum[t] = d;
    }
    for (int w = 0; w < THREADS / 32; w++) {
        double s = 0.0;
        for (int l = 0; l < 32; l++) s += dsum[32 * w + l];
        wsum[w] = s;
    }
    double s = 0.0;
    for (int w = 0; w < THREADS / 32; w++) s += wsum[w];
    return s;
}

// Whether the kernel serves these parameters (gpt2__fs_serves).
inline bool serves(int n, float temperature, int top_k) {
    if (n > SLICE * MAX_SLICES) return false;
    return temperature == 0.0f || top_k == 1 || top_k <= 0 || top_k >= n || top_k <= MAX_K;
}

// The kernel's draw from logits[0..n) (n > 0) with the RNG state `rng` (not advanced).
inline Draw draw(const float* logits, int n, const uint32_t* allowed, float temperature, int top_k, float top_p, uint64_t rng) {
    const int n_slices = (n + SLICE - 1) / SLICE;
    const bool greedy = temperature == 0.0f || top_k == 1;
    const bool use_top_k = !greedy && top_k > 0 && top_k < n;
    float max_logit = -INFINITY;
    int argmax = 0;
    for (int i = 0; i < n; i++) {
        const float v = logit(logits, allowed, i);
        if (i == 0 || v > max_logit) {
            max_logit = v;
            argmax = i;
        }
    }
    if (greedy) return {argmax, GREEDY};
    if (use_top_k && top_k > MAX_K) return {-1, HOST};
    const double inv_t = 1.0 / temperature;
    uint64_t state = rng;
    const double u = gpt2__rng_uniform(&state);
    const bool top_p_on = top_p > 0.0f && top_p < 1.0f;
    bool big = !use_top_k;
    float threshold = -INFINITY;
    std::vector<float> kv;
    std::vector<int32_t> ki;
    if (use_top_k) {
        // each slice's candidates (index order), the ties it could not store, its k-th largest
        struct Slice {
            float kth;
            int ties;
            std::vector<float> v;
            std::vector<int32_t> i;
        };
        std::vector<Slice> slices((size_t)n_slices);
        std::vector<float> pool; // the merge's multiset: candidates, and each slice's unstored ties at its kth
        for (int b = 0; b < n_slices; b++) {
            Slice& s = slices[(size_t)b];
            const int begin = b * SLICE, end = std::min(n, begin + SLICE);
            std::vector<float> values;
            for (int i = begin; i < end; i++) values.push_back(logit(logits, allowed, i));
            s.kth = kth_largest(values, std::min(top_k, end - begin));
            int strict = 0, tie = 0;
            for (float v : values) {
                strict += v > -INFINITY && v > s.kth;
                tie += v > -INFINITY && v == s.kth;
            }
            const bool all_fit = strict + tie <= CAP;
            for (int i = begin; i < end; i++) {
                const float v = values[(size_t)(i - begin)];
                if (v > -INFINITY && (v > s.kth || (all_fit && v == s.kth))) {
                    s.v.push_back(v);
                    s.i.push_back(i);
                }
            }
            s.ties = all_fit ? 0 : tie;
            pool.insert(pool.end(), s.v.begin(), s.v.end());
            pool.insert(pool.end(), (size_t)s.ties, s.kth);
        }
        threshold = (int)pool.size() >= top_k ? kth_largest(pool, top_k) : -INFINITY;
        for (const Slice& s : slices) big = big || (s.ties > 0 && s.kth == threshold);
        if (!big) {
            for (const Slice& s : slices)
                for (size_t j = 0; j < s.v.size(); j++)
                    if (s.v[j] >= threshold) {
                        kv.push_back(s.v[j]);
                        ki.push_back(s.i[j]);
                    }
            big = kv.size() > (size_t)EXACT_MAX;
        }
    }
    if (big && top_p_on) return {-1, HOST};
    if (!big) {
        const int m = (int)kv.size();
        if (m == 0) return {0, EXACT};
        float p_threshold = -INFINITY;
        if (top_p_on) {
            std::vector<float> sorted = kv;
            std::sort(sorted.begin(), sorted.end(), std::greater<float>());
            std::vector<double> running((size_t)m);
            double sum = 0.0;
            for (int j = 0; j < m; j++) running[(size_t)j] = sum += std::exp((double)sorted[(size_t)j] - (double)sorted[0]);
            const double target = (double)top_p * running[(size_t)m - 1];
            for (int j = 0; j < m; j++)
                if (running[(size_t)j] >= target) {
                    p_threshold = sorted[(size_t)j];
                    break;
                }
        }
        std::vector<float> w((size_t)m);
        std::vector<double> running((size_t)m);
        double sum = 0.0;
        for (int j = 0; j < m; j++) {
            w[(size_t)j] = weight(kv[(size_t)j], p_threshold, max_logit, inv_t);
            running[(size_t)j] = sum += w[(size_t)j];
        }
        const double target = u * running[(size_t)m - 1];
        int last_kept = 0;
        for (int j = 0; j < m; j++) {
            if (target < running[(size_t)j]) return {ki[(size_t)j], EXACT};
            if (w[(size_t)j] != 0.0f) last_kept = j;
        }
        return {ki[(size_t)last_kept], EXACT};
    }
    // the tree over every slice
    std::vector<double> slice_sum((size_t)n_slices), dsum(THREADS), wsum(THREADS / 32);
    for (int b = 0; b < n_slices; b++) slice_sum[(size_t)b] = slice_sums(logits, allowed, n, b, threshold, max_logit, inv_t, dsum.data(), wsum.data());
    double total = 0.0, before = 0.0;
    for (double t : slice_sum) total += t;
    double target = u * total;
    const int s = descend(slice_sum.data(), n_slices, target, &before);
    if (s < 0) return {0, TREE};
    target -= before;
    slice_sums(logits, allowed, n, s, threshold, max_logit, inv_t, dsum.data(), wsum.data());
    const int wp = descend(wsum.data(), THREADS / 32, target, &before);
    target -= before;
    const int t = 32 * wp + descend(dsum.data() + 32 * wp, 32, target, &before);
    target -= before;
    double weights[PER_THREAD];
    const int first = s * SLICE + PER_THREAD * t;
    for (int q = 0; q < PER_THREAD; q++) weights[q] = first + q < n ? weight(logit(logits, allowed, first + q), threshold, max_logit, inv_t) : 0.0;
    return {first + descend(weights, PER_THREAD, target, &before), TREE};
}

// The host's chain (gpt2__chain_filter, then gpt2__chain_draw) with the grammar's mask (or none),
// top_k, top_p and temperature alone: what the kernel must draw. -1 if the chain refuses.
inline int32_t host_chain(const std::vector<float>& logits, const uint32_t* allowed, float temperature, int top_k, float top_p, uint64_t* rng) {
    const int n = (int)logits.size();
    gpt2_generate_params p = gpt2_generate_default_params();
    p.temperature = temperature;
    p.top_k = top_k;
    p.top_p = top_p;
    std::vector<float> l = logits, scratch((size_t)n);
    std::vector<int> counts((size_t)n, 0);
    gpt2_error err;
    if (gpt2__chain_filter(l.data(), n, p, nullptr, 0, allowed, scratch.data(), counts.data(), &err) != GPT2_OK) return -1;
    return gpt2__chain_draw(l.data(), n, p, rng, scratch.data());
}

// ---- The inputs both tests draw from ------------------------------------------------------

// Logits that exercise every way of the kernel: ties everywhere, few levels (ties that overflow
// a slice's candidates), all equal, a normal spread, one that stands out, and small vocabularies
// (one slice; a last slice of one logit).
struct Logits {
    const char* name;
    std::vector<float> values;
};

inline std::vector<Logits> logit_sets() {
    uint64_t r = 2024;
    const auto uniform = [&] { return (double)(gpt2__rng_next(&r) >> 11) * (1.0 / 9007199254740992.0); };
    const auto normal = [&](double sd) { return (float)(sd * std::sqrt(-2.0 * std::log(1.0 - uniform())) * std::cos(6.283185307179586 * uniform())); };
    std::vector<Logits> sets;
    const int V = 50257;
    sets.push_back({"ties", {}});
    for (int i = 0; i < V; i++) sets.back().values.push_back((float)((gpt2__rng_next(&r) >> 40) % 20000) / 2000.0f - 5.0f);
    sets.push_back({"normal", {}});
    for (int i = 0; i < V; i++) sets.back().values.push_back(normal(2.5));
    sets.push_back({"four levels", {}});
    for (int i = 0; i < V; i++) sets.back().values.push_back((float)(gpt2__rng_next(&r) % 4));
    sets.push_back({"all equal", std::vector<float>((size_t)V, 1.5f)});
    sets.push_back({"peaked", {}});
    for (int i = 0; i < V; i++) sets.back().values.push_back(normal(1.0));
    sets.back().values[31337] = 25.0f;
    sets.push_back({"65 tokens", {}});
    for (int i = 0; i < 65; i++) sets.back().values.push_back(normal(3.0));
    sets.push_back({"4097 tokens", {}});
    for (int i = 0; i < 4097; i++) sets.back().values.push_back(normal(2.0));
    return sets;
}

// Grammar masks (a bit per token) for n tokens: none (empty), half of them, every 997th, one.
inline std::vector<std::vector<uint32_t>> masks(int n) {
    uint64_t r = 77;
    const size_t words = ((size_t)n + 31) / 32;
    std::vector<std::vector<uint32_t>> out(4);
    out[1].resize(words);
    for (uint32_t& w : out[1]) w = (uint32_t)gpt2__rng_next(&r);
    out[2].assign(words, 0);
    for (int i = 5; i < n; i += 997) out[2][(size_t)i / 32] |= 1u << (i & 31);
    out[3].assign(words, 0);
    out[3][(size_t)(n / 2) / 32] |= 1u << ((n / 2) & 31);
    return out;
}

} // namespace sampler_twin

#endif
