#ifndef GPT2__PART_CUDA_SAMPLER_CUH
#define GPT2__PART_CUDA_SAMPLER_CUH
#include "kernels.cuh"

/* The many-block sampler: the draw of the host's chain (sampler.h: the grammar's mask, top_k,
   top_p, temperature, the SplitMix64 draw) in one launch of a block per 4,096 logits. The
   backend uses it only in a build with GPT2_CUDA_FAST_SAMPLER (not yet run on a GPU:
   bench/cuda_results.md); without it each token is drawn by gpt2__sample_kernel (one block) and
   a chain with top_p or a grammar runs on the host. tests/cuda/sampler_twin.h is the same
   algorithm in plain C++, which the CPU tests compare with the host's chain and the CUDA tests
   with this kernel.

   The algorithm. Every block takes a slice of the logits (thread t its 4 consecutive logits),
   applies the mask (a banned token's logit is -inf) and finds the slice's largest logit (its
   first index); with top_k (1 < k < n, k <= GPT2__FS_MAX_K) also the slice's k-th largest b
   (radix select), and stores as candidates, in index order, the finite logits >= b, or, when
   ties at b leave no room for all (more than GPT2__FS_CAP), those > b and a count of the ties.
   The last block to finish (a ticket) merges:
   - the largest logit M over the slices (the first on ties): the greedy token;
   - the k-th largest v over the candidates (the tie counts standing in for their logits): a
     slice's b is never above v, so every logit >= v is a candidate or one of those ties;
   - K = the candidates >= v, in index order. When it holds at most GPT2__FS_EXACT_MAX tokens:
     top_p sorts K, adds exp(l - M) in double one by one from the largest and keeps the logits >=
     the first whose running sum reaches top_p * total; the draw adds the weights
     (float)exp((l - M) / t) in index order one by one and takes the first token whose running
     sum passes u * total (u the uniform of the RNG). These are the host chain's operations in its
     order, so the draws are the CPU's bit for bit while K holds at most 256 tokens (beyond, the
     host adds top_p's total in partial_sort's order: rounding apart).
   - Else (no top_k, or ties at v that a slice could not store, or K too large) the draw runs over
     every slice in a fixed tree of sums, each a plain running sum: a thread's 4 weights, a warp's
     32 threads, a slice's 32 warps, the slices; the token is found level by level (the first unit
     whose running sum passes what is left of u * total). The same draws as the host's to
     rounding of the total (a token's odds moved by about 1e-16). top_p with such a K is left to
     the host's chain (the token is -1). */

enum {
    GPT2__FS_THREADS = 1024,                                       /* threads of a block */
    GPT2__FS_PER_THREAD = 4,                                       /* consecutive logits per thread */
    GPT2__FS_SLICE = GPT2__FS_THREADS * GPT2__FS_PER_THREAD,       /* logits per block */
    GPT2__FS_MAX_SLICES = 64,                                      /* vocabularies up to 262,144 */
    GPT2__FS_MAX_K = 256,                                          /* top_k the candidates serve */
    GPT2__FS_CAP = 256,                                            /* candidates a slice stores (>= GPT2__FS_MAX_K) */
    GPT2__FS_EXACT_MAX = 1024,                                     /* tokens the merge draws from with the host's sums */
};
static_assert(GPT2__FS_CAP >= GPT2__FS_MAX_K, "a slice must store the logits above its k-th largest");

/* Which way a draw went (tests and the benchmark read it). */
enum { GPT2__FS_GREEDY = 0, GPT2__FS_EXACT = 1, GPT2__FS_TREE = 2, GPT2__FS_HOST = 3 };

/* What a slice leaves for the merge. */
struct gpt2__fs_slice {
    float max;  /* its largest logit after the mask (-inf when all are banned) */
    int argmax; /* the first index holding it */
    float kth;  /* with top_k: its k-th largest */
    int stored; /* candidates stored */
    int ties;   /* logits equal to kth that did not fit (then only those > kth are stored), else 0 */
};

/* Device memory a draw uses: a session's (GPT2_CUDA_FAST_SAMPLER) or a test's. */
struct gpt2__fs_work {
    gpt2__fs_slice* slices; /* GPT2__FS_MAX_SLICES */
    float* cand_v;          /* GPT2__FS_CAP per slice */
    int32_t* cand_i;
    unsigned* ticket; /* zero between launches (the merge resets it) */
    int* path;        /* one int: which way the draw went (GPT2__FS_...) */
};

struct gpt2__fs_args {
    const float* logits;
    int n;
    const uint32_t* allowed; /* the grammar's mask, a bit per token; NULL: every token */
    float temperature;
    int top_k;
    float top_p; /* 0 or >= 1: off */
    uint64_t rng;
    int32_t* token_out; /* the token, or -1 where the host's chain must draw */
    int* step;          /* when not NULL: step[0] = next_pos, step[1] = the token */
    int next_pos;
};

/* The shared memory of a block: phase one's and the merge's. */
struct gpt2__fs_shared {
    unsigned hist[256];
    int scan[32];
    float best_v[32];
    int best_i[32];
    uint32_t prefix;
    int k, count, last, pick, last_kept, big;
    float kth, threshold;
    double wsum[32];                      /* a slice's warp sums */
    double dsum[GPT2__FS_THREADS];        /* its threads' sums; the merge's running sums */
    double slice_sum[GPT2__FS_MAX_SLICES];
    float kv[GPT2__FS_EXACT_MAX];         /* K: logits, */
    int32_t ki[GPT2__FS_EXACT_MAX];       /* their tokens */
    float sorted[GPT2__FS_EXACT_MAX];     /* K's logits sorted (top_p), then the weights */
};

__device__ __forceinline__ float gpt2__fs_logit(const gpt2__fs_args& a, int i) {
    if (a.allowed && !((a.allowed[i >> 5] >> (i & 31)) & 1u)) return -INFINITY;
    return a.logits[i];
}

/* Exclusive prefix sum of v over the block, in thread order; *total gets the sum. */
__device__ int gpt2__fs_scan(int v, gpt2__fs_shared& sh, int* total) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int x = v;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int y = __shfl_up_sync(0xffffffffu, x, o);
        if (lane >= o) x += y;
    }
    __syncthreads();
    if (lane == 31) sh.scan[warp] = x;
    __syncthreads();
    if (warp == 0) {
        int s = sh.scan[lane];
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const int y = __shfl_up_sync(0xffffffffu, s, o);
            if (lane >= o) s += y;
        }
        sh.scan[lane] = s;
    }
    __syncthreads();
    *total = sh.scan[31];
    return x - v + (warp ? sh.scan[warp - 1] : 0);
}

/* One digit of a radix select over the block's histogram (warp 0): the digit holding the k-th
   largest key with the current prefix; k becomes its rank within that digit. */
__device__ void gpt2__fs_pick_digit(gpt2__fs_shared& sh, int shift) {
    const int lane = threadIdx.x & 31;
    const int k = sh.k; /* every lane reads it before one of them writes it */
    __syncwarp();
    unsigned cnt[8], mine = 0;
#pragma unroll
    for (int b = 0; b < 8; b++) mine += cnt[b] = sh.hist[8 * lane + b];
    unsigned at_or_above = mine; /* keys in this lane's bins and every higher one */
    for (int off = 1; off < 32; off <<= 1) {
        const unsigned t = __shfl_down_sync(0xffffffffu, at_or_above, off);
        if (lane + off < 32) at_or_above += t;
    }
    const unsigned above = at_or_above - mine;
    if ((int)above < k && k <= (int)at_or_above) {
        int kk = k - (int)above, d = 8 * lane;
        for (int b = 7; b >= 0; b--) {
            if ((int)cnt[b] >= kk) { d = 8 * lane + b; break; }
            kk -= (int)cnt[b];
        }
        sh.k = kk;
        sh.prefix |= (uint32_t)d << shift;
    }
}

/* Counts key into the histogram bin of its digit at `shift` when it has the prefix; lanes of a
   warp that share a bin add once. Every lane of the warp calls it (bin 256: none). */
__device__ __forceinline__ void gpt2__fs_count(gpt2__fs_shared& sh, bool present, uint32_t key, uint32_t prefix, uint32_t mask, int shift) {
    const unsigned bin = present && (key & mask) == prefix ? (key >> shift) & 255u : 256u;
    const unsigned same = __match_any_sync(0xffffffffu, bin);
    if (bin < 256u && (int)(threadIdx.x & 31) == __ffs(same) - 1) atomicAdd(&sh.hist[bin], (unsigned)__popc(same));
}

/* The weight of a logit in the draw: the host's (float)exp((l - max) / t), 0 when not drawn from. */
__device__ __forceinline__ float gpt2__fs_weight(float l, float threshold, float max_logit, double inv_t) {
    return l >= threshold && l > -INFINITY ? (float)exp(((double)l - max_logit) * inv_t) : 0.0f;
}

/* The tree's sums of slice `b` (see the top of this part): dsum[t] thread t's, wsum[w] warp w's;
   returns the slice's (to every thread). */
__device__ double gpt2__fs_slice_sums(const gpt2__fs_args& a, int b, float threshold, float max_logit, double inv_t, gpt2__fs_shared& sh) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int i0 = b * GPT2__FS_SLICE + GPT2__FS_PER_THREAD * tid;
    double d = 0.0;
#pragma unroll
    for (int u = 0; u < GPT2__FS_PER_THREAD; u++)
        if (i0 + u < a.n) d += gpt2__fs_weight(gpt2__fs_logit(a, i0 + u), threshold, max_logit, inv_t);
    __syncthreads(); /* the previous slice's sums are read */
    sh.dsum[tid] = d;
    __syncthreads();
    if (lane == 0) {
        double s = 0.0;
        for (int l = 0; l < 32; l++) s += sh.dsum[32 * warp + l];
        sh.wsum[warp] = s;
    }
    __syncthreads();
    double s = 0.0;
    for (int w = 0; w < GPT2__FS_THREADS / 32; w++) s += sh.wsum[w];
    return s;
}

/* The first of `count` running sums (sums[0..count), kept in order) that target stays below: the
   unit where the draw lands; when rounding leaves target at the very top, the last unit with a
   positive part. *before gets the running sum before it. One thread. */
__device__ int gpt2__fs_descend(const double* parts, int count, double target, double* before) {
    double running = 0.0;
    int last = -1;
    double last_before = 0.0;
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

__global__ void __launch_bounds__(GPT2__FS_THREADS) gpt2__fast_sample_kernel(gpt2__fs_args a, gpt2__fs_work w) {
    __shared__ gpt2__fs_shared sh;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int n_slices = (a.n + GPT2__FS_SLICE - 1) / GPT2__FS_SLICE;
    const bool greedy = a.temperature == 0.0f || a.top_k == 1;
    const bool top_k = !greedy && a.top_k > 0 && a.top_k < a.n;
    const int b = blockIdx.x;

    /* ---- phase one: this block's slice ---- */
    const int i0 = b * GPT2__FS_SLICE + GPT2__FS_PER_THREAD * tid;
    float v[GPT2__FS_PER_THREAD];
    bool present[GPT2__FS_PER_THREAD];
#pragma unroll
    for (int u = 0; u < GPT2__FS_PER_THREAD; u++) {
        present[u] = i0 + u < a.n;
        v[u] = present[u] ? gpt2__fs_logit(a, i0 + u) : -INFINITY;
    }
    /* the largest logit, its first index */
    float bv = -INFINITY;
    int bi = INT_MAX;
#pragma unroll
    for (int u = 0; u < GPT2__FS_PER_THREAD; u++)
        if (present[u] && (v[u] > bv || bi == INT_MAX)) { bv = v[u]; bi = i0 + u; }
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (ov > bv || (ov == bv && oi < bi)) { bv = ov; bi = oi; }
    }
    if (lane == 0) { sh.best_v[warp] = bv; sh.best_i[warp] = bi; }
    __syncthreads();
    if (tid == 0) {
        for (int j = 1; j < GPT2__FS_THREADS / 32; j++)
            if (sh.best_v[j] > sh.best_v[0] || (sh.best_v[j] == sh.best_v[0] && sh.best_i[j] < sh.best_i[0])) { sh.best_v[0] = sh.best_v[j]; sh.best_i[0] = sh.best_i[j]; }
        w.slices[b].max = sh.best_v[0];
        w.slices[b].argmax = sh.best_i[0];
        w.slices[b].stored = 0;
        w.slices[b].ties = 0;
        w.slices[b].kth = -INFINITY;
    }
    if (top_k && a.top_k <= GPT2__FS_MAX_K) {
        /* the slice's k-th largest (counting banned tokens' -inf, as the host's nth_element does) */
        const int n_in = min(GPT2__FS_SLICE, a.n - b * GPT2__FS_SLICE);
        uint32_t key[GPT2__FS_PER_THREAD];
#pragma unroll
        for (int u = 0; u < GPT2__FS_PER_THREAD; u++) key[u] = gpt2__float_key(v[u]);
        if (tid == 0) { sh.prefix = 0; sh.k = min(a.top_k, n_in); }
        for (int shift = 24; shift >= 0; shift -= 8) {
            for (int j = tid; j < 256; j += GPT2__FS_THREADS) sh.hist[j] = 0;
            __syncthreads();
            const uint32_t prefix = sh.prefix, mask = shift == 24 ? 0u : 0xffffffffu << (shift + 8);
#pragma unroll
            for (int u = 0; u < GPT2__FS_PER_THREAD; u++) gpt2__fs_count(sh, present[u], key[u], prefix, mask, shift);
            __syncthreads();
            if (warp == 0) gpt2__fs_pick_digit(sh, shift);
            __syncthreads();
        }
        const float kth = gpt2__key_float(sh.prefix);
        /* the candidates: every finite logit >= kth when they fit, else those > kth */
        int strict = 0, tie = 0;
#pragma unroll
        for (int u = 0; u < GPT2__FS_PER_THREAD; u++) {
            strict += present[u] && v[u] > -INFINITY && v[u] > kth;
            tie += present[u] && v[u] > -INFINITY && v[u] == kth;
        }
        int n_strict = 0, n_tie = 0;
        gpt2__fs_scan(strict, sh, &n_strict);
        gpt2__fs_scan(tie, sh, &n_tie);
        const bool all_fit = n_strict + n_tie <= GPT2__FS_CAP;
        int mine = 0;
#pragma unroll
        for (int u = 0; u < GPT2__FS_PER_THREAD; u++) mine += present[u] && v[u] > -INFINITY && (v[u] > kth || (all_fit && v[u] == kth));
        int stored = 0;
        int at = gpt2__fs_scan(mine, sh, &stored);
#pragma unroll
        for (int u = 0; u < GPT2__FS_PER_THREAD; u++)
            if (present[u] && v[u] > -INFINITY && (v[u] > kth || (all_fit && v[u] == kth))) {
                w.cand_v[b * GPT2__FS_CAP + at] = v[u];
                w.cand_i[b * GPT2__FS_CAP + at] = i0 + u;
                at++;
            }
        if (tid == 0) {
            w.slices[b].kth = kth;
            w.slices[b].stored = stored;
            w.slices[b].ties = all_fit ? 0 : n_tie;
        }
    }

    /* ---- the last block to finish merges ---- */
    __threadfence();
    __syncthreads();
    if (tid == 0) sh.last = atomicAdd(w.ticket, 1u) == (unsigned)n_slices - 1;
    __syncthreads();
    if (!sh.last) return;
    __threadfence();
    if (tid == 0) {
        float m = -INFINITY;
        int mi = INT_MAX;
        for (int s = 0; s < n_slices; s++) {
            const float sm = __ldcg(&w.slices[s].max);
            const int si = __ldcg(&w.slices[s].argmax);
            if (sm > m || mi == INT_MAX) { m = sm; mi = si; }
        }
        sh.best_v[0] = m;
        sh.best_i[0] = mi;
        sh.big = !top_k; /* without top_k every token may be drawn: the tree */
        sh.threshold = -INFINITY;
        sh.pick = -1;
    }
    __syncthreads();
    const float max_logit = sh.best_v[0];
    int path = GPT2__FS_GREEDY;
    int32_t token = sh.best_i[0];
    if (!greedy && top_k && a.top_k > GPT2__FS_MAX_K) { /* the caller sends these to the one-block kernel or the host */
        path = GPT2__FS_HOST;
        token = -1;
    } else if (!greedy) {
        const double inv_t = 1.0 / a.temperature;
        const double u = gpt2__rng_uniform_device(a.rng);
        const bool top_p = a.top_p > 0.0f && a.top_p < 1.0f;
        int m = 0; /* |K| */
        if (top_k) {
            /* v: the k-th largest candidate, the ties that did not fit counted at their value */
            if (tid == 0) {
                int total = 0;
                for (int s = 0; s < n_slices; s++) total += __ldcg(&w.slices[s].stored) + __ldcg(&w.slices[s].ties);
                sh.count = total;
                sh.prefix = 0;
                sh.k = a.top_k;
            }
            __syncthreads();
            float kth = -INFINITY; /* fewer finite logits than k: every one is kept */
            if (sh.count >= a.top_k) {
                const int flat = n_slices * GPT2__FS_CAP;
                for (int shift = 24; shift >= 0; shift -= 8) {
                    for (int j = tid; j < 256; j += GPT2__FS_THREADS) sh.hist[j] = 0;
                    __syncthreads();
                    const uint32_t prefix = sh.prefix, mask = shift == 24 ? 0u : 0xffffffffu << (shift + 8);
                    for (int base = 0; base < flat; base += GPT2__FS_THREADS) {
                        const int j = base + tid, s = j / GPT2__FS_CAP;
                        const bool here = j < flat && j % GPT2__FS_CAP < __ldcg(&w.slices[min(s, n_slices - 1)].stored);
                        gpt2__fs_count(sh, here, here ? gpt2__float_key(__ldcg(&w.cand_v[j])) : 0u, prefix, mask, shift);
                    }
                    if (tid < n_slices) {
                        const int ties = __ldcg(&w.slices[tid].ties);
                        const uint32_t key = gpt2__float_key(__ldcg(&w.slices[tid].kth));
                        if (ties > 0 && (key & mask) == prefix) atomicAdd(&sh.hist[(key >> shift) & 255u], (unsigned)ties);
                    }
                    __syncthreads();
                    if (warp == 0) gpt2__fs_pick_digit(sh, shift);
                    __syncthreads();
                }
                kth = gpt2__key_float(sh.prefix);
            }
            /* ties at v that a slice could not store: K is not all in hand */
            if (tid < n_slices && __ldcg(&w.slices[tid].ties) > 0 && __ldcg(&w.slices[tid].kth) == kth) sh.big = 1;
            __syncthreads();
            /* K = the candidates >= v, in index order: the flat candidate array taken 4 at a time */
            if (!sh.big) {
                const int flat = n_slices * GPT2__FS_CAP;
                int base_out = 0;
                for (int base = 0; base < flat; base += GPT2__FS_SLICE) {
                    const int j0 = base + GPT2__FS_PER_THREAD * tid;
                    bool take[GPT2__FS_PER_THREAD];
                    int mine = 0;
#pragma unroll
                    for (int q = 0; q < GPT2__FS_PER_THREAD; q++) {
                        const int j = j0 + q, s = j / GPT2__FS_CAP;
                        take[q] = j < flat && j % GPT2__FS_CAP < __ldcg(&w.slices[min(s, n_slices - 1)].stored) && __ldcg(&w.cand_v[j]) >= kth;
                        mine += take[q];
                    }
                    int total = 0;
                    int at = base_out + gpt2__fs_scan(mine, sh, &total);
#pragma unroll
                    for (int q = 0; q < GPT2__FS_PER_THREAD; q++)
                        if (take[q]) {
                            if (at < GPT2__FS_EXACT_MAX) {
                                sh.kv[at] = __ldcg(&w.cand_v[j0 + q]);
                                sh.ki[at] = __ldcg(&w.cand_i[j0 + q]);
                            }
                            at++;
                        }
                    base_out += total;
                }
                m = base_out;
                if (tid == 0 && m > GPT2__FS_EXACT_MAX) sh.big = 1;
            }
            if (tid == 0) sh.threshold = kth;
            __syncthreads();
        }
        if (sh.big && top_p) { /* the host's chain sorts them */
            path = GPT2__FS_HOST;
            token = -1;
        } else if (!sh.big && m == 0) { /* no finite logit: the host's draw takes token 0 */
            path = GPT2__FS_EXACT;
            token = 0;
        } else if (!sh.big) {
            path = GPT2__FS_EXACT;
            float threshold = -INFINITY;
            if (top_p) {
                /* K's logits sorted, largest first (bitonic, padded with -inf) */
                int p2 = 1;
                while (p2 < m) p2 <<= 1;
                for (int j = tid; j < p2; j += GPT2__FS_THREADS) sh.sorted[j] = j < m ? sh.kv[j] : -INFINITY;
                __syncthreads();
                for (int size = 2; size <= p2; size <<= 1)
                    for (int stride = size >> 1; stride > 0; stride >>= 1) {
                        for (int j = tid; j < p2; j += GPT2__FS_THREADS) {
                            const int partner = j ^ stride;
                            if (partner > j) {
                                const bool descending = (j & size) == 0;
                                const float x = sh.sorted[j], y = sh.sorted[partner];
                                if (descending ? x < y : x > y) { sh.sorted[j] = y; sh.sorted[partner] = x; }
                            }
                        }
                        __syncthreads();
                    }
                /* the host's running sum of exp(l - max) at temperature 1, largest first */
                for (int j = tid; j < m; j += GPT2__FS_THREADS) sh.dsum[j] = exp((double)sh.sorted[j] - (double)sh.sorted[0]);
                __syncthreads();
                if (tid == 0) {
                    double running = 0.0;
                    for (int j = 0; j < m; j++) sh.dsum[j] = running += sh.dsum[j];
                    sh.pick = INT_MAX;
                }
                __syncthreads();
                const double target = (double)a.top_p * sh.dsum[m - 1];
                for (int j = tid; j < m; j += GPT2__FS_THREADS)
                    if (sh.dsum[j] >= target) atomicMin(&sh.pick, j);
                __syncthreads();
                threshold = sh.pick < m ? sh.sorted[sh.pick] : -INFINITY;
                __syncthreads();
            }
            /* the draw: weights in index order, the host's running sum */
            for (int j = tid; j < m; j += GPT2__FS_THREADS) sh.sorted[j] = gpt2__fs_weight(sh.kv[j], threshold, max_logit, inv_t);
            __syncthreads();
            if (tid == 0) {
                double running = 0.0;
                for (int j = 0; j < m; j++) sh.dsum[j] = running += sh.sorted[j];
                sh.pick = INT_MAX;
                sh.last_kept = -1;
            }
            __syncthreads();
            const double target = u * sh.dsum[m - 1];
            for (int j = tid; j < m; j += GPT2__FS_THREADS) {
                if (target < sh.dsum[j]) atomicMin(&sh.pick, j);
                if (sh.sorted[j] != 0.0f) atomicMax(&sh.last_kept, j);
            }
            __syncthreads();
            token = sh.ki[sh.pick < m ? sh.pick : max(sh.last_kept, 0)];
        } else {
            /* the tree over every slice */
            path = GPT2__FS_TREE;
            const float threshold = sh.threshold;
            for (int s = 0; s < n_slices; s++) {
                const double t = gpt2__fs_slice_sums(a, s, threshold, max_logit, inv_t, sh);
                if (tid == 0) sh.slice_sum[s] = t;
            }
            __syncthreads();
            double target = 0.0, before = 0.0;
            if (tid == 0) {
                double total = 0.0;
                for (int s = 0; s < n_slices; s++) total += sh.slice_sum[s];
                target = u * total;
                sh.pick = gpt2__fs_descend(sh.slice_sum, n_slices, target, &before);
                target -= before;
                sh.dsum[0] = target; /* read back below, after the slice's sums overwrite dsum */
            }
            __syncthreads();
            const int s = sh.pick;
            target = sh.dsum[0];
            if (s < 0) { /* no finite logit: the host's draw takes token 0 */
                token = 0;
            } else {
                gpt2__fs_slice_sums(a, s, threshold, max_logit, inv_t, sh);
                __syncthreads();
                if (tid == 0) {
                    const int wp = gpt2__fs_descend(sh.wsum, GPT2__FS_THREADS / 32, target, &before);
                    target -= before;
                    const int t = 32 * wp + gpt2__fs_descend(sh.dsum + 32 * wp, 32, target, &before);
                    target -= before;
                    double weights[GPT2__FS_PER_THREAD];
                    const int first = s * GPT2__FS_SLICE + GPT2__FS_PER_THREAD * t;
                    for (int q = 0; q < GPT2__FS_PER_THREAD; q++)
                        weights[q] = first + q < a.n ? gpt2__fs_weight(gpt2__fs_logit(a, first + q), threshold, max_logit, inv_t) : 0.0;
                    sh.pick = first + gpt2__fs_descend(weights, GPT2__FS_PER_THREAD, target, &before);
                }
                __syncthreads();
                token = sh.pick;
            }
        }
    }
    if (tid == 0) {
        *a.token_out = token;
        if (w.path) *w.path = path;
        if (a.step && token >= 0) {
            a.step[0] = a.next_pos;
            a.step[1] = token;
        }
        *w.ticket = 0; /* ready for the next launch */
    }
}

/* Whether the kernel serves these parameters with n logits; else the one-block kernel (or the
   host's chain) draws. */
static bool gpt2__fs_serves(int n, float temperature, int top_k) {
    if (n > GPT2__FS_SLICE * GPT2__FS_MAX_SLICES) return false;
    const bool greedy = temperature == 0.0f || top_k == 1;
    return greedy || top_k <= 0 || top_k >= n || top_k <= GPT2__FS_MAX_K;
}

/* Queues the draw on `stream`: n logits, so one block per GPT2__FS_SLICE of them. */
static cudaError_t gpt2__fs_launch(const gpt2__fs_args& a, const gpt2__fs_work& w, cudaStream_t stream) {
    gpt2__fast_sample_kernel<<<(a.n + GPT2__FS_SLICE - 1) / GPT2__FS_SLICE, GPT2__FS_THREADS, 0, stream>>>(a, w);
    return cudaGetLastError();
}

#endif /* GPT2__PART_CUDA_SAMPLER_CUH */
