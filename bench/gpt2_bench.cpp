// gpt2-bench: prefill and decode speed next to this machine's limits, measured in the same run.
//
//   gpt2-bench --random 124M --type q8_0 -t 2 --prompt 128 --gen 32 --repeat 5 [--json]
//   gpt2-bench -m model.gguf -t 2 --context 1024
//   gpt2-bench --random 124M --type f16 -t 2 --batch 8 --json   (also B sessions decoding together)
//   gpt2-bench --random 124M --type q8_0 -t 2 --grammar examples/grammars/json.gbnf   (also a constrained decode)
//
// Limits: decode reads every weight once per token, so its floor is (bytes of weights read per
// token) / (read bandwidth); prefill is arithmetic, so its ceiling is the peak of the unit that
// multiplies: fp32 FMA (f16/bf16/q8_0/q4_0 rows are converted to float panels first), for a
// batch of q8_0 decode rows on a set with int8 panels the int8 dot-product unit (vpdpbusd), and
// for a bf16 prompt on the avx512_bf16 set the bf16 unit (vdpbf16ps; attention stays on FMAs).
// All are measured here with the same thread count: a streaming read over a buffer far larger
// than the caches (passes interleaved with the timed runs; their median), and register-only FMA,
// vpdpbusd and vdpbf16ps loops.
#define GPT2_IMPLEMENTATION
#include "gpt2.h"
#include "tools/gguf_write.h"
#include "bench/grammar_stats.h"
#include "tests/test_files.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cmath>
#include <string>
#include <thread>
#include <vector>
#if defined(__unix__) || defined(__APPLE__)
#include <sys/mman.h>
#include <sys/resource.h>
#endif

static double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// CPU time of the whole process: on a shared machine, wall time / CPU time shows how much of
// the run the threads actually got a core.
static double cpu_s() {
#if defined(CLOCK_PROCESS_CPUTIME_ID)
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
#else
    return 0.0;
#endif
}

static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
}

static double peak_rss_mb() {
#if defined(__unix__) || defined(__APPLE__)
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
#if defined(__APPLE__)
    return ru.ru_maxrss / 1048576.0;
#else
    return ru.ru_maxrss / 1024.0;
#endif
#else
    return 0.0;
#endif
}

#include "bench/stage_scene.h"

// ---- Machine limits -----------------------------------------------------------------------

#if defined(GPT2__X86)
template <bool Ahead>
GPT2__AVX2 static float read_sum_avx2(const float* p, size_t n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 32 <= n; i += 32) {
        if constexpr (Ahead) gpt2__prefetch_decode_ahead<128, true>((const uint8_t*)(p + i));
        a0 = _mm256_add_ps(a0, _mm256_load_ps(p + i));
        a1 = _mm256_add_ps(a1, _mm256_load_ps(p + i + 8));
        a2 = _mm256_add_ps(a2, _mm256_load_ps(p + i + 16));
        a3 = _mm256_add_ps(a3, _mm256_load_ps(p + i + 24));
    }
    return gpt2__hsum_avx2(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
}
GPT2__AVX512 static float fma_loop_avx512(long iterations) {
    __m512 acc[12];
    for (int i = 0; i < 12; i++) acc[i] = _mm512_set1_ps((float)i);
    const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
    for (long it = 0; it < iterations; it++)
        for (int i = 0; i < 12; i++) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
    float out[16], sum = 0;
    for (int i = 0; i < 12; i++) {
        _mm512_storeu_ps(out, acc[i]);
        for (float v : out) sum += v;
    }
    return sum;
}
// 12 independent vpdpbusd chains: 64 int8 multiply-adds each per instruction.
GPT2__AVX512 static unsigned dpbusd_loop_avx512(long iterations) {
    __m512i acc[12];
    for (int i = 0; i < 12; i++) acc[i] = _mm512_set1_epi32(i);
    const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-2);
    for (long it = 0; it < iterations; it++)
        for (int i = 0; i < 12; i++) acc[i] = _mm512_dpbusd_epi32(acc[i], a, b);
    int out[16];
    unsigned sum = 0; // the lanes wrap around, so their sum may too: unsigned, where that is defined
    for (int i = 0; i < 12; i++) {
        _mm512_storeu_si512(out, acc[i]);
        for (int v : out) sum += (unsigned)v;
    }
    return sum;
}
// 12 independent vdpbf16ps chains: 32 bf16 multiply-adds each per instruction.
GPT2__AVX512_BF16 static float dpbf16_loop_avx512(long iterations) {
    __m512 acc[12];
    for (int i = 0; i < 12; i++) acc[i] = _mm512_set1_ps((float)i);
    const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3380); // 1 and 6e-8
    for (long it = 0; it < iterations; it++)
        for (int i = 0; i < 12; i++) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
    float out[16], sum = 0;
    for (int i = 0; i < 12; i++) {
        _mm512_storeu_ps(out, acc[i]);
        for (float v : out) sum += v;
    }
    return sum;
}
#if defined(GPT2_AMX)
// The AMX tiles at their full shapes (16 rows of 64 bytes), 4 sums from one A and one B, so each
// tile product waits on none before it: TDPBSUD 16 x 16 x 64 int8 multiply-adds an instruction,
// TDPBF16PS 16 x 16 x 32 bf16 ones. One iteration is 4 instructions.
template <bool INT8>
GPT2__AVX512 static float amx_loop(long iterations) {
    using Tiles = gpt2__amx_hardware;
    gpt2__amx_config config;
    for (int t = 0; t < 6; t++) config.rows[t] = 16, config.colsb[t] = 64;
    Tiles::configure(config);
    alignas(64) static const uint8_t ones[16][64] = {};
    Tiles::load<4>(ones, 64);
    Tiles::load<5>(ones, 64);
    Tiles::zero<0>(), Tiles::zero<1>(), Tiles::zero<2>(), Tiles::zero<3>();
    for (long it = 0; it < iterations; it++) {
        if constexpr (INT8) {
            Tiles::dpbsud<0, 4, 5>(), Tiles::dpbsud<1, 4, 5>(), Tiles::dpbsud<2, 4, 5>(), Tiles::dpbsud<3, 4, 5>();
        } else {
            Tiles::dpbf16ps<0, 4, 5>(), Tiles::dpbf16ps<1, 4, 5>(), Tiles::dpbf16ps<2, 4, 5>(), Tiles::dpbf16ps<3, 4, 5>();
        }
    }
    alignas(64) float c[16][16];
    Tiles::store<0>(c, 64);
    Tiles::release();
    return c[0][0];
}
// A tile product takes about 16 cycles: a pass runs 1/64 of peak_iterations' iterations.
static const long amx_iterations_divisor = 64;
#endif
GPT2__AVX2 static float fma_loop_avx2(long iterations) {
    __m256 acc[12];
    for (int i = 0; i < 12; i++) acc[i] = _mm256_set1_ps((float)i);
    const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
    for (long it = 0; it < iterations; it++)
        for (int i = 0; i < 12; i++) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
    __m256 s = acc[0];
    for (int i = 1; i < 12; i++) s = _mm256_add_ps(s, acc[i]);
    return gpt2__hsum_avx2(s);
}
#endif

static float read_sum(const float* p, size_t n, bool ahead) {
#if defined(GPT2__X86)
    if (gpt2__detect_x86().avx2) return ahead ? read_sum_avx2<true>(p, n) : read_sum_avx2<false>(p, n);
#else
    (void)ahead;
#endif
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = 0; i + 4 <= n; i += 4) { s0 += p[i]; s1 += p[i + 1]; s2 += p[i + 2]; s3 += p[i + 3]; }
    return s0 + s1 + s2 + s3;
}

// Read bandwidth in GB/s over `n` floats split over the pool's threads: the faster of a pass of
// plain loads and one that also prefetches 4 KB ahead into L2 (x86), as the float decode rows do
// on Intel's CPUs, where plain loads alone read 0.9x as fast (docs/PERFORMANCE.md).
static double bandwidth_pass(gpt2__pool* pool, const float* buf, size_t n) {
    static volatile float sink = 0;
    double best = 0;
    for (bool ahead : {false, true}) {
        float sums[64] = {0};
        const double t0 = now_s();
        gpt2__parallel_for(pool, (int64_t)n, 1024, [&](int64_t begin, int64_t end, int thread) { sums[thread] = read_sum(buf + begin, (size_t)(end - begin), ahead); });
        const double dt = now_s() - t0;
        sink = sink + sums[0];
        best = std::max(best, n * 4.0 / dt / 1e9);
    }
    return best;
}

// Peaks are the best of many short passes (a few ms each): on a shared host, passes of tens of
// ms rarely run undisturbed and measured the peak up to 3x low.
static const long peak_iterations = 1000000;
static const int peak_passes = 100;

// The best of the passes of loop(peak_iterations) on every thread, in G operations per second
// at `ops` per iteration (a multiply-add is 2): a pass in which the host took a core away does
// not set the limit.
static double best_of_passes(gpt2__pool* pool, float (*loop)(long), double ops) {
    double best = 0;
    volatile float sink = 0;
    for (int pass = 0; pass < peak_passes; pass++) {
        const double t0 = now_s();
        float sums[64] = {0};
        gpt2__parallel_for(pool, pool->n_threads, 1, [&](int64_t, int64_t, int thread) { sums[thread] = loop(peak_iterations); });
        const double dt = now_s() - t0;
        sink = sink + sums[0];
        best = std::max(best, pool->n_threads * (double)peak_iterations * ops / dt / 1e9);
    }
    return best;
}

// fp32 FMA peak in GFLOP/s for the widest vectors the given kernel set uses (avx512 and
// avx512_bf16: 512 bits); 0 where there is no FMA loop for the set.
static double measure_fma_peak(gpt2__pool* pool, const char* kernels) {
#if defined(GPT2__X86)
    if (std::strncmp(kernels, "avx512", 6) == 0 || std::strncmp(kernels, "amx", 3) == 0) return best_of_passes(pool, fma_loop_avx512, 12 * 16 * 2);
    if (std::strcmp(kernels, "avx2") == 0) return best_of_passes(pool, fma_loop_avx2, 12 * 8 * 2);
#endif
    (void)kernels;
    return 0.0;
}

// Whether the set's q8_0, q4_0 and bf16 products run on AMX tiles (src/cpu/kernels/amx.h; not
// their model, amx_model).
static bool on_amx_tiles(const gpt2__kernels* kernels) {
#if defined(GPT2_AMX)
    return kernels == &gpt2__kernels_amx;
#else
    (void)kernels;
    return false;
#endif
}

// The int8 dot-product peak (vpdpbusd, AVX-512 VNNI) in GOP/s; 0 where the kernel set has no int8
// panels.
static double measure_int8_peak(gpt2__pool* pool, const gpt2__kernels* kernels) {
#if defined(GPT2_AMX)
    if (on_amx_tiles(kernels))
        return best_of_passes(pool, [](long n) { return amx_loop<true>(n / amx_iterations_divisor); }, 4.0 * 16 * 16 * 64 * 2 / amx_iterations_divisor);
#endif
#if defined(GPT2__X86)
    if (kernels->quantize_q8_packed) return best_of_passes(pool, [](long n) { return (float)dpbusd_loop_avx512(n); }, 12 * 64 * 2);
#endif
    (void)pool;
    (void)kernels;
    return 0.0;
}

// Whether the set multiplies bf16 weights' products over a prompt on the bf16 unit.
static bool uses_bf16_unit(const gpt2__kernels* kernels) { return kernels->matmul[GPT2__BF16_UNIT] != nullptr; }

// The bf16 dot-product peak (vdpbf16ps) in GFLOP/s; 0 where the set does not use the unit.
static double measure_bf16_peak(gpt2__pool* pool, const gpt2__kernels* kernels) {
#if defined(GPT2_AMX)
    if (on_amx_tiles(kernels))
        return best_of_passes(pool, [](long n) { return amx_loop<false>(n / amx_iterations_divisor); }, 4.0 * 16 * 16 * 32 * 2 / amx_iterations_divisor);
#endif
#if defined(GPT2__X86)
    if (uses_bf16_unit(kernels)) return best_of_passes(pool, dpbf16_loop_avx512, 12 * 32 * 2);
#endif
    (void)pool;
    (void)kernels;
    return 0.0;
}

// Large buffers (the random models, the bandwidth test) go on transparent huge pages where the
// OS grants them: a model file mapped by gpt2_model_load_file streams like huge pages, not like
// 4 KiB anonymous pages (measured here, one thread, plain read: 31 GB/s from a file mapping,
// 34 from huge pages, 24 from 4 KiB anonymous pages), and the limit must be the best a plain
// read gets.
struct PageBuffer {
    uint8_t* data = nullptr; // 2 MiB aligned when mapped
    void* mapping = nullptr;
    size_t mapping_bytes = 0;
};

static PageBuffer alloc_pages(size_t bytes) {
    PageBuffer b;
#if defined(__linux__)
    const size_t huge = 2u << 20, length = (bytes + huge - 1) / huge * huge + huge;
    void* p = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p != MAP_FAILED) {
        b.mapping = p;
        b.mapping_bytes = length;
        b.data = (uint8_t*)(((uintptr_t)p + huge - 1) & ~(uintptr_t)(huge - 1));
        madvise(b.data, length - huge, MADV_HUGEPAGE);
        return b;
    }
#endif
    b.data = (uint8_t*)std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    return b;
}

static void free_pages(PageBuffer& b) {
#if defined(__linux__)
    if (b.mapping) munmap(b.mapping, b.mapping_bytes);
    else
#endif
        std::free(b.data);
    b = PageBuffer();
}

// ---- Random models of GPT-2's shapes ------------------------------------------------------

struct Shape { const char* name; int n_layer, n_head, n_embd, n_ctx, n_vocab; };
static const Shape shapes[] = {
    {"tiny", 2, 2, 64, 128, 256},         {"124M", 12, 12, 768, 1024, 50257}, {"355M", 24, 16, 1024, 1024, 50257},
    {"774M", 36, 20, 1280, 1024, 50257}, {"1558M", 48, 25, 1600, 1024, 50257},
};

struct Rng {
    uint64_t s;
    float uniform() { // in [-1, 1)
        s ^= s >> 12; s ^= s << 25; s ^= s >> 27;
        return (float)((s * 0x2545F4914F6CDD1Dull) >> 40) / 8388608.0f - 1.0f;
    }
};

// GPT-2's BPE vocabulary (tests/data/gpt2-bpe: encoder.json and vocab.bpe), which random models
// of GPT-2's shapes carry, so that their text can be tokenized, a grammar made for them and a
// saved file loaded by llama.cpp.
struct BpeVocabulary {
    std::vector<std::string> tokens, merges;
};

#if !defined(GPT2_BENCH_VOCAB_DIR)
#define GPT2_BENCH_VOCAB_DIR "tests/data/gpt2-bpe"
#endif

// From `dir` when given; else from the source tree the program was built from, or the one it
// sits in (build/bench/gpt2-bench). False, with the folders tried in *tried, when none has it.
static bool load_bpe_vocabulary(const char* dir, const char* argv0, BpeVocabulary* v, std::string* tried) {
    std::vector<std::string> dirs;
    if (dir) {
        dirs.push_back(dir);
    } else {
        dirs.push_back(GPT2_BENCH_VOCAB_DIR);
        const std::string exe = argv0;
        const size_t slash = exe.find_last_of('/');
        dirs.push_back((slash == std::string::npos ? std::string(".") : exe.substr(0, slash)) + "/../../tests/data/gpt2-bpe");
    }
    for (const std::string& d : dirs) {
        *v = BpeVocabulary();
        if (load_gpt2_bpe_files(d, &v->tokens, &v->merges) && v->tokens.size() == 50257) return true;
        *tried += (tried->empty() ? "" : ", ") + d;
    }
    return false;
}

// A whole GGUF file in memory (64-byte aligned, as gpt2_model_load_memory uses it in place),
// with `vocabulary` when given (tokenizer keys as tools/convert.py writes them).
static PageBuffer build_random_model(const Shape& sh, uint32_t type, const BpeVocabulary* vocabulary, size_t* size) {
    const GgufGpt2Shape s{(uint64_t)sh.n_layer, (uint64_t)sh.n_embd, (uint64_t)sh.n_head, (uint64_t)sh.n_ctx, (uint64_t)sh.n_vocab};
    GgufWriter w;
    gguf_set_gpt2_keys(w, std::string("random-") + sh.name, s, "tanh");
    if (vocabulary) gguf_set_gpt2_bpe_keys(w, vocabulary->tokens, vocabulary->merges);
    for (const GgufTensorShape& t : gguf_gpt2_tensors(s)) {
        // matrices in `type` (q4_0: the tied head in q8_0, as gpt2-quantize writes it), vectors f32
        const uint32_t t_type = t.ne.size() == 2 ? gguf_matrix_type(t.name, type, false) : (uint32_t)GPT2_TYPE_F32;
        w.add_tensor(t.name, t.ne, t_type, gguf_tensor_bytes(t_type, t.ne));
    }
    w.set("general.file_type", gguf_file_type(gguf_dominant_type(w)));
    const uint64_t total = (w.layout() + 63) / 64 * 64;
    PageBuffer page = alloc_pages(total);
    uint8_t* buf = page.data;
    if (!buf) return page;
    std::memset(buf, 0, total);
    w.write_header(buf);
    Rng rng{0x9E3779B97F4A7C15ull};
    std::vector<float> row;
    for (size_t i = 0; i < w.tensors.size(); i++) {
        const GgufWriter::Tensor& t = w.tensors[i];
        uint8_t* dst = w.tensor_data(buf, i);
        const bool is_norm_weight = t.name.find("norm.weight") != std::string::npos;
        row.resize(t.ne[0]);
        const uint64_t rows = gguf_elements(t.ne) / t.ne[0];
        const size_t row_bytes = (size_t)(t.n_bytes / rows);
        for (uint64_t r = 0; r < rows; r++) {
            for (float& v : row) v = is_norm_weight ? 1.0f : 0.04f * rng.uniform();
            gguf_quantize_row(t.type, row.data(), dst + r * row_bytes, (int64_t)t.ne[0]);
        }
    }
    *size = total;
    return page;
}

static bool parse_type(const char* s, uint32_t* type) {
    const struct { const char* name; uint32_t type; } types[] = {{"f32", GPT2_TYPE_F32}, {"f16", GPT2_TYPE_F16}, {"bf16", GPT2_TYPE_BF16}, {"q8_0", GPT2_TYPE_Q8_0}, {"q4_0", GPT2_TYPE_Q4_0}};
    for (const auto& t : types)
        if (std::strcmp(s, t.name) == 0) { *type = t.type; return true; }
    return false;
}

// f16 / bf16 / q8_0 / q4_0 against float32 on random weights of one shape (the same random values,
// converted): the f32 model's greedy tokens are fed to all five models for `steps` steps; per
// type: the largest logit difference, how often its argmax is the f32 token, and the mean
// cross-entropy of the fed tokens against f32's.
static int run_accuracy(const Shape& shape, int threads, int steps) {
    const uint32_t types[] = {GPT2_TYPE_F32, GPT2_TYPE_F16, GPT2_TYPE_BF16, GPT2_TYPE_Q8_0, GPT2_TYPE_Q4_0};
    constexpr int n_types = (int)(sizeof types / sizeof types[0]);
    PageBuffer buffers[n_types];
    gpt2_model* models[n_types];
    gpt2_session* sessions[n_types];
    gpt2_error err;
    gpt2_session_params sp = gpt2_session_default_params();
    sp.n_threads = threads;
    for (int i = 0; i < n_types; i++) {
        size_t size = 0;
        buffers[i] = build_random_model(shape, types[i], nullptr, &size);
        if (!buffers[i].data) { std::fprintf(stderr, "gpt2-bench: out of memory for the random model\n"); return 1; }
        if (gpt2_model_load_memory(buffers[i].data, size, nullptr, &models[i], &err) != GPT2_OK ||
            gpt2_session_create(models[i], &sp, &sessions[i], &err) != GPT2_OK) {
            std::fprintf(stderr, "gpt2-bench: %s\n", err.message);
            return 1;
        }
    }
    const int n_vocab = gpt2_model_get_info(models[0]).n_vocab;
    steps = std::min(steps, gpt2_model_get_info(models[0]).n_ctx - 1);
    double max_diff[n_types] = {0}, ce[n_types] = {0};
    int agree[n_types] = {0};
    int32_t token = 0;
    for (int step = 0; step < steps; step++) {
        for (int i = 0; i < n_types; i++) gpt2_session_eval(sessions[i], &token, 1, &err);
        const float* ref = gpt2_session_logits(sessions[0]);
        const int32_t next = (int32_t)(std::max_element(ref, ref + n_vocab) - ref);
        for (int i = 0; i < n_types; i++) {
            const float* l = gpt2_session_logits(sessions[i]);
            for (int v = 0; v < n_vocab; v++) max_diff[i] = std::max(max_diff[i], (double)std::fabs(l[v] - ref[v]));
            agree[i] += (int32_t)(std::max_element(l, l + n_vocab) - l) == next;
            ce[i] -= gpt2__log_prob(l, n_vocab, next);
        }
        token = next;
    }
    for (int i = 1; i < n_types; i++)
        std::printf("{\"accuracy\": \"%s\", \"model\": \"random-%s\", \"steps\": %d, \"max_abs_logit_diff\": %.5f, \"greedy_agreement_pct\": %.1f, "
                    "\"cross_entropy\": %.5f, \"cross_entropy_f32\": %.5f, \"cross_entropy_rel_diff_pct\": %.3f}\n",
                    gpt2__type_name(types[i]), shape.name, steps, max_diff[i], 100.0 * agree[i] / steps, ce[i] / steps, ce[0] / steps,
                    100.0 * (ce[i] - ce[0]) / ce[0]);
    for (int i = 0; i < n_types; i++) {
        gpt2_session_free(sessions[i]);
        gpt2_model_free(models[i]);
        free_pages(buffers[i]);
    }
    return 0;
}

// ---- A sampled decode, free or with a grammar -----------------------------------------------

// What one sampled decode took: wall ms per token, and of that the picks' share (the mask, the
// sampling chain and the grammar's steps over the tokens: llama.cpp's "sampling time").
struct SampledDecode {
    double ms_per_token = 0, sampling_ms_per_token = 0;
};

// At least `gen` tokens from the session's context, picked as gpt2_generate picks them
// (temperature 1, every token a candidate, `seed`): a step draws a token and, with a grammar,
// adds the tokens of any text the grammar forces next; the step's tokens join the context in one
// pass. The free decode is gpt2__generator_pick's; the constrained one is its grammar path
// spelled out (src/generate.h: force, mask, draw, follow, force), so that each mask's time and
// size go into *stats and the forced tokens into *forced. When the grammar's sentence is whole and
// nothing may extend it, or the end-of-text token is drawn, the grammar starts over (*documents
// counts the starts), so the decode is as long as the free one.
static gpt2_result sampled_decode(gpt2_session* s, const gpt2_grammar* grammar, int gen, uint64_t seed, GrammarMaskStats* stats, size_t* documents,
                                  size_t* forced, SampledDecode* out, gpt2_error* err) {
    gpt2_generate_params p = gpt2_generate_default_params();
    p.temperature = 1.0f;
    p.top_k = 0;
    p.seed = seed;
    p.max_new_tokens = gen;
    p.grammar = grammar;
    gpt2__generator g;
    gpt2__generator_begin(&g, s, p, nullptr, 0, nullptr);
    if (grammar) ++*documents;
    double pick_s = 0;
    int n = 0;
    const double t0 = now_s();
    while (n < gen) {
        const double p0 = now_s();
        if (!grammar) {
            GPT2__TRY(gpt2__generator_pick(&g, err));
        } else {
            g.step.clear();
            g.step_match.clear();
            if (g.n_new == 0 && g.n_forced == 0) GPT2__TRY(gpt2__generator_force(&g, err));
            if (g.step.empty()) {
                const double m0 = grammar_now_us();
                GPT2__TRY(gpt2__generator_mask(&g, err));
                stats->add(grammar_now_us() - m0, g.buffers.allowed.data(), g.buffers.allowed.size());
                int32_t token = 0;
                GPT2__TRY(gpt2__sample_chain(s, p, &g.buffers, &token, err));
                GPT2__TRY(gpt2__generator_follow(&g, token, err));
                if (token != s->model->tokenizer.eos) GPT2__TRY(gpt2__generator_force(&g, err));
                *forced += g.step.size() - 1;
            } else {
                *forced += g.step.size();
            }
            g.n_new += (int)g.step.size();
            if (g.step.back() == s->model->tokenizer.eos || (g.step_match.back() & GPT2__STEP_FINISHED)) {
                gpt2__matcher_begin(&g.grammar, grammar); // a new sentence, forced from its start again
                g.n_new = g.n_forced = 0;
                ++*documents;
            }
        }
        pick_s += now_s() - p0;
        GPT2__TRY(gpt2_session_eval(s, g.step.data(), g.step.size(), err));
        n += (int)g.step.size();
    }
    out->ms_per_token = 1e3 * (now_s() - t0) / n;
    out->sampling_ms_per_token = 1e3 * pick_s / n;
    return GPT2_OK;
}

static void usage() {
    std::puts(
        "usage: gpt2-bench (--random 124M|355M|774M|1558M|tiny | -m MODEL.gguf) [options]\n"
        "  --type f32|f16|bf16|q8_0|q4_0  weight type of the random model's matrices (default f32;\n"
        "                            q4_0 keeps the tied head in q8_0, as gpt2-quantize does)\n"
        "  -t, --threads N           threads of the session and of the limit measurements (default 2)\n"
        "  --prompt N                prompt tokens, timed as prefill (default 128)\n"
        "  --gen N                   decoded tokens per repeat (default 32)\n"
        "  --context N               context length before the decode is timed (default: --prompt)\n"
        "  --repeat N                timed repeats after one warm-up; medians are reported (default 5)\n"
        "  --kv-f16                  16-bit KV cache\n"
        "  --batch B                 also decode B sessions together (gpt2_batch_eval), each at the\n"
        "                            context, alternated with the single-session decode; adds the JSON keys\n"
        "                            batch, decode_tok_s (all sessions), decode_ms_per_step, decode_pct_of_fma_limit\n"
        "                            (of the unit that multiplies: batch_limit_unit, batch_limit_gops),\n"
        "                            batch_pct_of_roofline of batch_roofline_tok_s (a step reads the weights once\n"
        "                            and every session's KV cache at the read bandwidth, or multiplies at the\n"
        "                            units' peaks, whichever is slower: batch_roofline_bound); then the\n"
        "                            same sessions generate --gen tokens each with gpt2_generate_batch (nanoGPT's\n"
        "                            sampling, a seed each): generate_batch_tok_s, generate_batch_ms_per_step\n"
        "  --kernels NAME            scalar|avx2|avx512|avx512_bf16|amx|neon (also env GPT2_KERNELS); default: best for this CPU\n"
        "  --bandwidth-mb N          size of the bandwidth-test buffer (default 1024)\n"
        "  --grammar FILE            also, in each round, two sampled decodes of --gen tokens from the context\n"
        "                            (temperature 1, every token a candidate, a seed per round; the order\n"
        "                            alternates): free, and with the GBNF grammar's mask and forced text, as\n"
        "                            gpt2_generate (the grammar starts over when its sentence is whole). Adds\n"
        "                            constrained_decode_ms_per_token,\n"
        "                            sampled_decode_ms_per_token (free), constrained_overhead_pct, their picks'\n"
        "                            share (constrained_sampling_ms_per_token, sampled_sampling_ms_per_token;\n"
        "                            first_constrained_sampling_ms_per_token: the warm-up round's, the grammar's\n"
        "                            first generation, where each position's tokens are sorted on first use),\n"
        "                            and over every constrained step (warm-up round included; one core):\n"
        "                            grammar_mask_us_p50, grammar_mask_us_p99, grammar_mask_us_max,\n"
        "                            grammar_mask_steps (the draws), grammar_forced_tokens (the tokens of forced\n"
        "                            text), forced_tokens_share (those and the draws from a mask of one token,\n"
        "                            of all the tokens); grammar_compile_ms (median of 20\n"
        "                            makes). The model needs a vocabulary (--random 124M and up have GPT-2's)\n"
        "  --json-schema FILE        the same with the grammar of a JSON Schema (compact output: templated text\n"
        "                            whose keys and punctuation are forced)\n"
        "  --vocab DIR|none          GPT-2's encoder.json + vocab.bpe for the random models of 50,257 tokens\n"
        "                            (default: tests/data/gpt2-bpe of the source tree); none: no vocabulary\n"
        "  --json                    one JSON object per run instead of text\n"
        "  --save PATH               instead: write the random model as a GGUF file and exit (with GPT-2's\n"
        "                            vocabulary when it has 50,257 tokens: llama.cpp loads it)\n"
        "  --accuracy N              instead: f16/bf16/q8_0/q4_0 against f32 on the random shape over N\n"
        "                            teacher-forced greedy steps (logit difference, agreement, cross-entropy)\n"
        "  --stage N                 instead: a game's scene on a gpt2_stage (bench/stage_scene.h): N characters\n"
        "                            forked from one scene (--scene-tokens, default 400), the player's ~20-token\n"
        "                            lines at Poisson times (--arrival-ms apart on average, default 100; 0: all\n"
        "                            at once; --seed S), each answered with --answer-tokens (default 40) tokens\n"
        "                            on -t threads. JSON keys: stage_tok_s, stage_ttft_ms_p50, stage_ttft_ms_p99,\n"
        "                            stage_kv_bytes (the KV cache's blocks at the end, a block the forks share\n"
        "                            once), stage_rss_bytes (resident memory the forks and the scene added),\n"
        "                            stage_steps, stage_calls, stage_tokens, frame_overrun_us_p99/max\n"
        "  --stage-budget US         with --stage: the same scene stepped whole, then under a frame budget of US\n"
        "                            microseconds on the calling thread (keys prefixed budget_, and\n"
        "                            budget_vs_whole_tok_s: the ratio)\n"
        "  --forks N                 instead: the memory of N forks of one --scene-tokens scene (default 400)\n"
        "                            that then take --own-tokens tokens each (default 100), a token a pass for\n"
        "                            all together (gpt2_batch_eval), a 16-bit KV cache (bench/stage_scene.h).\n"
        "                            JSON keys: forks_rss_bytes (resident memory the forks added),\n"
        "                            forks_kv_bytes (the KV cache's blocks alive, each once), forks_own_cache_bytes\n"
        "                            (the cache of N x own tokens), forks_rss_vs_own_cache (the first over the last)");
}

int main(int argc, char** argv) {
    const char* random = nullptr;
    const char* path = nullptr;
    const char* kernels_name = std::getenv("GPT2_KERNELS");
    uint32_t type = GPT2_TYPE_F32;
    int threads = 2, prompt = 128, gen = 32, context = -1, repeat = 5, kv_f16 = 0, batch = 0;
    size_t bandwidth_mb = 1024;
    bool json = false;
    int accuracy_steps = 0;
    const char* save = nullptr;
    const char* grammar_path = nullptr;
    bool json_schema = false; // grammar_path holds a JSON Schema (--json-schema), not GBNF
    const char* vocab_dir = nullptr;
    StageScene scene;
    int64_t stage_budget_us = 0;
    int forks = 0, own_tokens = 100;
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        const bool has_value = i + 1 < argc;
        if (a == "--random" && has_value) random = argv[++i];
        else if (a == "-m" && has_value) path = argv[++i];
        else if (a == "--type" && has_value) {
            if (!parse_type(argv[++i], &type)) { std::fprintf(stderr, "gpt2-bench: --type %s: expected f32, f16, bf16, q8_0 or q4_0\n", argv[i]); return 2; }
        } else if ((a == "-t" || a == "--threads") && has_value) threads = std::atoi(argv[++i]);
        else if (a == "--prompt" && has_value) prompt = std::atoi(argv[++i]);
        else if (a == "--gen" && has_value) gen = std::atoi(argv[++i]);
        else if (a == "--context" && has_value) context = std::atoi(argv[++i]);
        else if (a == "--repeat" && has_value) repeat = std::atoi(argv[++i]);
        else if (a == "--kernels" && has_value) kernels_name = argv[++i];
        else if (a == "--bandwidth-mb" && has_value) bandwidth_mb = (size_t)std::atol(argv[++i]);
        else if (a == "--kv-f16") kv_f16 = 1;
        else if (a == "--batch" && has_value) {
            batch = std::atoi(argv[++i]);
            if (batch < 1 || batch > 1024) { std::fprintf(stderr, "gpt2-bench: --batch %s: expected 1 to 1024 sessions\n", argv[i]); return 2; }
        }
        else if (a == "--json") json = true;
        else if (a == "--accuracy" && has_value) accuracy_steps = std::atoi(argv[++i]);
        else if (a == "--save" && has_value) save = argv[++i];
        else if ((a == "--grammar" || a == "--json-schema") && has_value) grammar_path = argv[++i], json_schema = a == "--json-schema";
        else if (a == "--vocab" && has_value) vocab_dir = argv[++i];
        else if (a == "--stage" && has_value) scene.characters = std::atoi(argv[++i]);
        else if (a == "--stage-budget" && has_value) stage_budget_us = std::atoll(argv[++i]);
        else if (a == "--forks" && has_value) forks = std::atoi(argv[++i]);
        else if (a == "--own-tokens" && has_value) own_tokens = std::atoi(argv[++i]);
        else if (a == "--scene-tokens" && has_value) scene.scene_tokens = std::atoi(argv[++i]);
        else if (a == "--answer-tokens" && has_value) scene.answer_tokens = std::atoi(argv[++i]);
        else if (a == "--arrival-ms" && has_value) scene.arrival_ms = std::atof(argv[++i]);
        else if (a == "--seed" && has_value) scene.seed = (uint64_t)std::atoll(argv[++i]);
        else if (a == "-h" || a == "--help") { usage(); return 0; }
        else { std::fprintf(stderr, "gpt2-bench: unknown or incomplete option '%s' (see --help)\n", a.c_str()); return 2; }
    }
    if (!random == !path) { usage(); return 2; }
    if (threads < 1 || threads > 64 || prompt < 1 || gen < 1 || repeat < 1 || bandwidth_mb < 1) { std::fprintf(stderr, "gpt2-bench: threads 1..64; prompt, gen, repeat and bandwidth-mb >= 1\n"); return 2; }
    if (context < prompt) context = prompt;
    if (scene.characters < 0 || scene.characters > 4096 || scene.scene_tokens < 1 || scene.answer_tokens < 1 || scene.arrival_ms < 0 || stage_budget_us < 0) {
        std::fprintf(stderr, "gpt2-bench: --stage 0..4096, --scene-tokens and --answer-tokens >= 1, --arrival-ms and --stage-budget >= 0\n");
        return 2;
    }
    if (forks < 0 || forks > 4096 || own_tokens < 1) {
        std::fprintf(stderr, "gpt2-bench: --forks %d: expected 0..4096 forks; --own-tokens %d: expected >= 1\n", forks, own_tokens);
        return 2;
    }

    gpt2_error err;
    gpt2_model* model = nullptr;
    PageBuffer buffer;
    if (random) {
        const Shape* shape = nullptr;
        for (const Shape& s : shapes)
            if (std::strcmp(s.name, random) == 0) shape = &s;
        if (!shape) { std::fprintf(stderr, "gpt2-bench: --random %s: expected tiny, 124M, 355M, 774M or 1558M\n", random); return 2; }
        if (accuracy_steps > 0) return run_accuracy(*shape, threads, accuracy_steps);
        BpeVocabulary vocabulary;
        const bool with_vocabulary = shape->n_vocab == 50257 && !(vocab_dir && std::strcmp(vocab_dir, "none") == 0);
        std::string tried;
        if (with_vocabulary && !load_bpe_vocabulary(vocab_dir, argv[0], &vocabulary, &tried)) {
            std::fprintf(stderr, "gpt2-bench: --random %s: GPT-2's vocabulary (encoder.json + vocab.bpe, 50,257 tokens) is not in %s; "
                         "give its folder with --vocab DIR, or --vocab none for a model without one\n", random, tried.c_str());
            return 1;
        }
        size_t size = 0;
        buffer = build_random_model(*shape, type, with_vocabulary ? &vocabulary : nullptr, &size);
        if (!buffer.data) { std::fprintf(stderr, "gpt2-bench: out of memory for the random model\n"); return 1; }
        if (save) {
            FILE* f = std::fopen(save, "wb");
            const bool ok = f && std::fwrite(buffer.data, 1, size, f) == size;
            if (!f || std::fclose(f) != 0 || !ok) { std::fprintf(stderr, "gpt2-bench: cannot write %s\n", save); return 1; }
            std::printf("wrote %s (%zu bytes)\n", save, size);
            return 0;
        }
        if (gpt2_model_load_memory(buffer.data, size, nullptr, &model, &err) != GPT2_OK) { std::fprintf(stderr, "gpt2-bench: %s\n", err.message); return 1; }
    } else if (gpt2_model_load_file(path, nullptr, &model, &err) != GPT2_OK) {
        std::fprintf(stderr, "gpt2-bench: %s\n", err.message);
        return 1;
    }
    const gpt2_model_info info = gpt2_model_get_info(model);
    if (forks > 0) {
        if (scene.scene_tokens + own_tokens > info.n_ctx) {
            std::fprintf(stderr, "gpt2-bench: --forks: --scene-tokens %d and --own-tokens %d exceed the model's context of %d\n", scene.scene_tokens, own_tokens, info.n_ctx);
            return 2;
        }
        if (kernels_name && *kernels_name && !(scene.kernels = gpt2__kernels_by_name(kernels_name))) {
            std::fprintf(stderr, "gpt2-bench: kernels '%s' are not available on this CPU/build\n", kernels_name);
            return 2;
        }
        scene.characters = forks;
        scene.threads = threads;
        scene.kv_f16 = 1;
        ForkResult r;
        if (!run_fork_scene(model, scene, own_tokens, &r, &err)) {
            std::fprintf(stderr, "gpt2-bench: --forks: %s\n", err.message);
            return 1;
        }
        const std::string name = random ? std::string("random-") + random : std::string(path);
        const double ratio = r.rss_growth_bytes / std::max(1.0, r.own_cache_bytes);
        if (json)
            std::printf("{\"model\": \"%s\", \"forks\": %d, \"threads\": %d, \"scene_tokens\": %d, \"own_tokens\": %d, \"forks_rss_bytes\": %.0f, "
                        "\"forks_kv_bytes\": %.0f, \"forks_own_cache_bytes\": %.0f, \"forks_rss_vs_own_cache\": %.3f}\n",
                        name.c_str(), forks, threads, scene.scene_tokens, own_tokens, r.rss_growth_bytes, r.kv_bytes, r.own_cache_bytes, ratio);
        else
            std::printf("%s: %d forks of a %d-token scene, then %d tokens each: resident memory +%.1f MB, %.2fx the KV cache of their own %d x %d tokens "
                        "(%.1f MB); the KV cache's blocks hold %.1f MB\n",
                        name.c_str(), forks, scene.scene_tokens, own_tokens, r.rss_growth_bytes / 1e6, ratio, forks, own_tokens, r.own_cache_bytes / 1e6, r.kv_bytes / 1e6);
        gpt2_model_free(model);
        free_pages(buffer);
        return 0;
    }
    if (scene.characters > 0) {
        if (info.tokenizer == GPT2_TOKENIZER_NONE) { std::fprintf(stderr, "gpt2-bench: --stage: the player's lines are text; the model needs a vocabulary (--random 124M and up have GPT-2's)\n"); return 2; }
        if (kernels_name && *kernels_name && !(scene.kernels = gpt2__kernels_by_name(kernels_name))) {
            std::fprintf(stderr, "gpt2-bench: kernels '%s' are not available on this CPU/build\n", kernels_name);
            return 2;
        }
        scene.threads = stage_budget_us > 0 ? 1 : threads; // a frame budget is for a host without a thread to spare
        scene.kv_f16 = 1;
        StageResult whole, budgeted;
        if (!run_stage_scene(model, scene, 0, &whole, &err) || (stage_budget_us > 0 && !run_stage_scene(model, scene, stage_budget_us, &budgeted, &err))) {
            std::fprintf(stderr, "gpt2-bench: --stage: %s\n", err.message);
            return 1;
        }
        const std::string name = random ? std::string("random-") + random : std::string(path);
        if (json) {
            std::printf("{\"model\": \"%s\", \"characters\": %d, \"threads\": %d, \"scene_tokens\": %d, \"answer_tokens\": %d, \"arrival_ms\": %.1f, \"kernels\": \"%s\", ",
                        name.c_str(), scene.characters, scene.threads, scene.scene_tokens, scene.answer_tokens, scene.arrival_ms,
                        scene.kernels ? scene.kernels->name : gpt2__cpu_kernels().name);
            print_stage("stage_", whole, true);
            if (stage_budget_us > 0) {
                std::printf(", \"budget_us\": %lld, ", (long long)stage_budget_us);
                print_stage("budget_", budgeted, true);
                std::printf(", \"budget_vs_whole_tok_s\": %.3f", budgeted.tok_s / std::max(1e-9, whole.tok_s));
            }
            std::printf("}\n");
        } else {
            std::printf("%s: %d characters, %d thread(s), a %d-token scene, answers of %d tokens, a line every %.0f ms on average\n", name.c_str(), scene.characters,
                        scene.threads, scene.scene_tokens, scene.answer_tokens, scene.arrival_ms);
            print_stage("whole steps: ", whole, false);
            if (stage_budget_us > 0) {
                std::printf("budget %lld us: ", (long long)stage_budget_us);
                print_stage("", budgeted, false);
                std::printf("tokens/s under the budget: %.2fx the whole steps'\n", budgeted.tok_s / std::max(1e-9, whole.tok_s));
            }
        }
        gpt2_model_free(model);
        free_pages(buffer);
        return 0;
    }
    gpt2_grammar* grammar = nullptr;
    double grammar_first_ms = 0, grammar_compile_ms = 0;
    if (grammar_path) {
        const char* option = json_schema ? "--json-schema" : "--grammar";
        std::string text;
        if (!read_whole_file(grammar_path, &text)) { std::fprintf(stderr, "gpt2-bench: %s %s: cannot read the file\n", option, grammar_path); return 1; }
        if (make_grammar_timed(model, text, json_schema, &grammar, &grammar_first_ms, &grammar_compile_ms, &err) != GPT2_OK) {
            std::fprintf(stderr, "gpt2-bench: %s %s: %s\n", option, grammar_path, err.message);
            return 1;
        }
    }
    if (context + gen > info.n_ctx) { std::fprintf(stderr, "gpt2-bench: context %d + gen %d exceeds n_ctx %d\n", context, gen, info.n_ctx); return 2; }

    gpt2_session_params sp = gpt2_session_default_params();
    sp.n_threads = threads;
    sp.kv_f16 = kv_f16;
    gpt2_session* session = nullptr;
    if (gpt2_session_create(model, &sp, &session, &err) != GPT2_OK) { std::fprintf(stderr, "gpt2-bench: %s\n", err.message); return 1; }
    gpt2__cpu_session* cpu = gpt2__cpu(session);
    if (kernels_name && *kernels_name) {
        const gpt2__kernels* k = gpt2__kernels_by_name(kernels_name);
        if (!k) { std::fprintf(stderr, "gpt2-bench: kernels '%s' are not available on this CPU/build\n", kernels_name); return 2; }
        cpu->kernels = k;
    }
    const char* kernels = cpu->kernels->name;
    // --batch: B more sessions, each a copy of the timed session at the context, decoding together
    std::vector<gpt2_session*> batch_sessions((size_t)batch);
    sp.n_ctx = context + gen; // the KV caches of what they decode, not of the model's whole context
    for (gpt2_session*& b : batch_sessions) {
        if (gpt2_session_create(model, &sp, &b, &err) != GPT2_OK) { std::fprintf(stderr, "gpt2-bench: %s\n", err.message); return 1; }
        gpt2__cpu(b)->kernels = cpu->kernels;
    }

    // What one decoded token reads: every matrix once (the head only its n_vocab rows).
    const gpt2_model* m = model;
    double weight_bytes = (double)m->n_vocab * m->lm_head.row_bytes;
    double matrix_params = 0;
    for (const gpt2__layer& L : m->layers)
        for (const gpt2__weight* W : {&L.c_attn, &L.c_proj, &L.c_fc, &L.mlp_proj}) {
            weight_bytes += (double)W->rows * W->row_bytes;
            matrix_params += (double)W->rows * W->cols;
        }
    const double C = m->n_embd;
    const double product_flops = 2.0 * matrix_params * prompt + 2.0 * C * m->n_vocab, attention_flops = m->n_layer * 4.0 * C * prompt * (prompt + 1) / 2.0;

    std::vector<int32_t> tokens((size_t)(context + gen));
    for (size_t i = 0; i < tokens.size(); i++) tokens[i] = (int32_t)((i * 7919 + 13) % (size_t)info.n_vocab);
    // One untimed warm-up run, then `repeat` timed runs. The machine's bandwidth drifts on a
    // shared host, so bandwidth passes are interleaved with the timed runs and the limit is
    // their median, the same statistic as the decode time it is compared with.
    std::vector<double> prefill_s, prefill_cpu_s, decode_s, decode_cpu_s, bandwidth_gb_s, batch_step_s, generate_step_s;
    std::vector<int32_t> step_tokens((size_t)batch);
    std::vector<const int32_t*> step_ids((size_t)batch);
    const std::vector<size_t> ones((size_t)batch, 1);
    std::vector<gpt2_generate_params> generate_params((size_t)batch, gpt2_generate_default_params());
    for (int i = 0; i < batch; i++) {
        generate_params[(size_t)i].max_new_tokens = gen;
        generate_params[(size_t)i].seed = 1337 + (uint64_t)i;
    }
    // --grammar: the free and the constrained sampled decodes, and the constrained steps' masks
    std::vector<double> sampled_ms, sampled_pick_ms, constrained_ms, constrained_pick_ms;
    GrammarMaskStats mask_stats;
    size_t grammar_documents = 0, grammar_forced = 0; // forced: tokens the grammar forced, not drawn
    double first_constrained_pick_ms = 0; // the warm-up round's: the grammar's first generation
    double peak_rss = 0;
    PageBuffer bandwidth_buffer;
    const size_t bandwidth_floats = bandwidth_mb * 1024 * 1024 / 4;
    for (int r = -1; r < repeat; r++) {
        gpt2_session_reset(session);
        double t0 = now_s();
        const double prefill_c0 = cpu_s();
        if (gpt2_session_eval(session, tokens.data(), (size_t)prompt, &err) != GPT2_OK) { std::fprintf(stderr, "gpt2-bench: %s\n", err.message); return 1; }
        const double prefill = now_s() - t0, prefill_cpu = cpu_s() - prefill_c0;
        if (context > prompt) gpt2_session_eval(session, tokens.data() + prompt, (size_t)(context - prompt), &err);
        t0 = now_s();
        const double c0 = cpu_s();
        for (int g = 0; g < gen; g++) gpt2_session_eval(session, &tokens[(size_t)(context + g)], 1, &err);
        const double decode = (now_s() - t0) / gen, decode_cpu = (cpu_s() - c0) / gen;
        if (batch) { // the same decode for B sessions at once, right after the single session's
            gpt2_session_truncate(session, (size_t)context, &err);
            for (gpt2_session* b : batch_sessions) {
                if (gpt2_session_copy(b, session, &err) != GPT2_OK) { std::fprintf(stderr, "gpt2-bench: %s\n", err.message); return 1; }
            }
            t0 = now_s();
            for (int g = 0; g < gen; g++) {
                for (int i = 0; i < batch; i++) {
                    step_tokens[(size_t)i] = tokens[(size_t)(context + (g + i) % gen)];
                    step_ids[(size_t)i] = &step_tokens[(size_t)i];
                }
                if (gpt2_batch_eval(batch_sessions.data(), step_ids.data(), ones.data(), (size_t)batch, &err) != GPT2_OK) { std::fprintf(stderr, "gpt2-bench: %s\n", err.message); return 1; }
            }
            if (r >= 0) batch_step_s.push_back((now_s() - t0) / gen);
            // the same sessions generate from the context: a pass and every session's draw a step
            for (gpt2_session* b : batch_sessions) {
                if (gpt2_session_copy(b, session, &err) != GPT2_OK) { std::fprintf(stderr, "gpt2-bench: %s\n", err.message); return 1; }
            }
            t0 = now_s();
            if (gpt2_generate_batch(batch_sessions.data(), nullptr, generate_params.data(), (size_t)batch, &err) != GPT2_OK) { std::fprintf(stderr, "gpt2-bench: %s\n", err.message); return 1; }
            if (r >= 0) generate_step_s.push_back((now_s() - t0) / gen);
        }
        if (grammar) { // free first in even rounds, constrained first in odd ones; both from the context, one seed
            for (int k = 0; k < 2; k++) {
                const bool constrained = (k == 1) == (r % 2 == 0);
                gpt2_session_truncate(session, (size_t)context, &err);
                SampledDecode d;
                size_t forced = 0;
                if (sampled_decode(session, constrained ? grammar : nullptr, gen, 1337 + (uint64_t)(r + 1), &mask_stats, &grammar_documents, &forced, &d, &err) != GPT2_OK) {
                    std::fprintf(stderr, "gpt2-bench: %s decode: %s\n", constrained ? "constrained" : "sampled", err.message);
                    return 1;
                }
                if (constrained) grammar_forced += forced;
                if (r < 0) {
                    if (constrained) first_constrained_pick_ms = d.sampling_ms_per_token;
                    continue;
                }
                (constrained ? constrained_ms : sampled_ms).push_back(d.ms_per_token);
                (constrained ? constrained_pick_ms : sampled_pick_ms).push_back(d.sampling_ms_per_token);
            }
        }
        if (r < 0) { // after the warm-up: everything the run needs is resident; then the test buffer
            peak_rss = peak_rss_mb();
            bandwidth_buffer = alloc_pages(bandwidth_floats * 4);
            if (!bandwidth_buffer.data) { std::fprintf(stderr, "gpt2-bench: cannot allocate the %zu MiB bandwidth buffer\n", bandwidth_mb); return 1; }
            std::memset(bandwidth_buffer.data, 0, bandwidth_floats * 4);
            continue;
        }
        prefill_s.push_back(prefill);
        prefill_cpu_s.push_back(prefill_cpu);
        decode_s.push_back(decode);
        decode_cpu_s.push_back(decode_cpu);
        for (int pass = 0; pass < 3; pass++) bandwidth_gb_s.push_back(bandwidth_pass(&cpu->pool, (const float*)bandwidth_buffer.data, bandwidth_floats));
    }
    free_pages(bandwidth_buffer);
    const double bandwidth = median(bandwidth_gb_s);
    const double fma_gflops = measure_fma_peak(&cpu->pool, kernels);
    // q8_0 and q4_0 products of many rows (a prompt, a batch of decode rows from
    // gpt2__panel_min_rows) multiply int8 panels where the set has them (src/cpu/forward.h)
    const bool int8_panels = gpt2__int8_weights(info.weight_type) && cpu->kernels->quantize_q8_packed;
    const bool prefill_int8 = int8_panels && prompt >= 2, batch_int8 = int8_panels && batch >= gpt2__panel_min_rows;
    const double int8_gops = prefill_int8 || batch_int8 ? measure_int8_peak(&cpu->pool, cpu->kernels) : 0.0;
    // a bf16 prompt's products run on the bf16 unit where the set has it (src/cpu/kernels/avx512_bf16.h)
    const bool prefill_bf16 = info.weight_type == GPT2_TYPE_BF16 && !gpt2__is_decode(prompt) && uses_bf16_unit(cpu->kernels);
    const double bf16_gflops = prefill_bf16 ? measure_bf16_peak(&cpu->pool, cpu->kernels) : 0.0;

    const double prefill_tok_s = prompt / median(prefill_s);
    const double decode_ms = 1e3 * median(decode_s);
    const double decode_limit_ms = 1e3 * weight_bytes / (bandwidth * 1e9);
    // prefill: the products at the peak of the unit that multiplies them, attention at the FMA peak
    // the AMX set's q8_0, q4_0 and bf16 products run on its tiles (src/cpu/kernels/amx.h); the
    // model of them (amx_model) has no peak: no share
    const bool amx_tiles = on_amx_tiles(cpu->kernels), amx_model = std::strcmp(kernels, "amx_model") == 0;
    const char* int8_unit = amx_tiles ? "int8 AMX tdpbsud" : "int8 vpdpbusd";
    const char* prefill_unit = prefill_int8 ? int8_unit : prefill_bf16 ? (amx_tiles ? "bf16 AMX tdpbf16ps" : "bf16 vdpbf16ps") : "fp32 FMA";
    const double prefill_unit_peak = prefill_int8 ? int8_gops : prefill_bf16 ? bf16_gflops : fma_gflops;
    const double prefill_limit_s = product_flops / (prefill_unit_peak * 1e9) + attention_flops / (fma_gflops * 1e9);
    const double prefill_limit_tok_s = fma_gflops > 0 && !amx_model ? prompt / prefill_limit_s : 0.0;
    const double kv_bytes = 2.0 * m->n_layer * context * C * (kv_f16 ? 2 : 4);
    const double decode_limit_with_kv_ms = 1e3 * (weight_bytes + kv_bytes) / (bandwidth * 1e9); // the cache must be read too
    const char* type_name = gpt2__type_name(info.weight_type);
    // --batch: tokens/s of all sessions, against the limit of the unit that multiplies (fp32 FMA,
    // or int8 dot products), 2 operations per parameter per token
    const double step_ms = batch ? 1e3 * median(batch_step_s) : 0.0, batch_tok_s = batch ? batch / (step_ms / 1e3) : 0.0;
    const double generate_step_ms = batch ? 1e3 * median(generate_step_s) : 0.0; // every session makes --gen tokens: no stop is set
    const double batch_unit_gops = batch_int8 ? int8_gops : fma_gflops;
    const char* batch_unit = batch_int8 ? int8_unit : "fp32 FMA";
    const double batch_limit_tok_s = batch_unit_gops * 1e9 / (2.0 * (matrix_params + C * m->n_vocab));
    // The roofline of a step that counts every byte it must read: each session's token multiplies
    // every weight (at the unit's peak) and attends over its context (4 C flops a key and layer, at
    // the FMA peak), and the step reads the weights once and every session's KV cache once (at the
    // read bandwidth); the step takes at least the longer of the two.
    const double batch_compute_s = batch * (2.0 * (matrix_params + C * m->n_vocab) / (batch_unit_gops * 1e9) + 4.0 * C * context * m->n_layer / (fma_gflops * 1e9));
    const double batch_memory_s = (weight_bytes + batch * kv_bytes) / (bandwidth * 1e9);
    const double batch_roofline_tok_s = batch && fma_gflops > 0 ? batch / std::max(batch_compute_s, batch_memory_s) : 0.0;
    const char* batch_roofline_bound = batch_memory_s > batch_compute_s ? "memory" : "compute";
    // --grammar: of the constrained decodes' tokens, those the grammar forced (not drawn, or drawn
    // from a mask of one token)
    const size_t grammar_tokens = mask_stats.steps() + grammar_forced;
    const double forced_share = grammar_tokens ? (double)(mask_stats.forced + grammar_forced) / (double)grammar_tokens : 0.0;
    if (json) {
        std::printf("{\"model\": \"%s\", \"type\": \"%s\", \"threads\": %d, \"kernels\": \"%s\", \"prompt_tokens\": %d, \"context\": %d, \"gen_tokens\": %d, "
                    "\"kv_f16\": %s, \"prefill_tok_s\": %.1f, \"decode_ms_per_token\": %.3f, \"bandwidth_gb_s\": %.1f, \"fma_gflops\": %.1f, "
                    "\"weight_bytes_per_token\": %.0f, \"kv_bytes_read_per_token\": %.0f, \"decode_limit_ms\": %.3f, \"decode_pct_of_limit\": %.1f, "
                    "\"decode_pct_of_limit_with_kv\": %.1f, \"prefill_limit_tok_s\": %.1f, \"prefill_pct_of_limit\": %.1f, \"prefill_limit_unit\": \"%s\", \"prefill_cpu_ms\": %.3f, "
                    "\"decode_cpu_ms_per_token\": %.3f, \"peak_rss_mb\": %.1f, \"model_bytes\": %zu",
                    info.name, type_name, threads, kernels, prompt, context, gen, kv_f16 ? "true" : "false", prefill_tok_s, decode_ms, bandwidth, fma_gflops,
                    weight_bytes, kv_bytes, decode_limit_ms, 100.0 * decode_limit_ms / decode_ms, 100.0 * decode_limit_with_kv_ms / decode_ms, prefill_limit_tok_s,
                    prefill_limit_tok_s > 0 ? 100.0 * prefill_tok_s / prefill_limit_tok_s : 0.0, prefill_unit, 1e3 * median(prefill_cpu_s), 1e3 * median(decode_cpu_s), peak_rss,
                    info.weight_bytes);
        if (batch)
            std::printf(", \"batch\": %d, \"decode_tok_s\": %.1f, \"decode_ms_per_step\": %.3f, \"decode_pct_of_fma_limit\": %.1f, \"batch_limit_unit\": \"%s\", "
                        "\"batch_limit_gops\": %.1f, \"batch_roofline_tok_s\": %.1f, \"batch_pct_of_roofline\": %.1f, \"batch_roofline_bound\": \"%s\", "
                        "\"generate_batch_tok_s\": %.1f, \"generate_batch_ms_per_step\": %.3f", batch, batch_tok_s, step_ms, 100.0 * batch_tok_s / batch_limit_tok_s, batch_unit,
                        batch_unit_gops, batch_roofline_tok_s, batch_roofline_tok_s > 0 ? 100.0 * batch_tok_s / batch_roofline_tok_s : 0.0, batch_roofline_bound,
                        batch / (generate_step_ms / 1e3), generate_step_ms);
        if (grammar)
            std::printf(", \"grammar\": \"%s\", \"sampled_decode_ms_per_token\": %.3f, \"constrained_decode_ms_per_token\": %.3f, \"constrained_overhead_pct\": %.2f, "
                        "\"sampled_sampling_ms_per_token\": %.4f, \"constrained_sampling_ms_per_token\": %.4f, \"first_constrained_sampling_ms_per_token\": %.4f, \"grammar_compile_ms\": %.4f, \"first_grammar_ms\": %.3f, "
                        "\"grammar_mask_us_p50\": %.2f, \"grammar_mask_us_p99\": %.2f, \"grammar_mask_us_max\": %.2f, \"forced_tokens_share\": %.4f, "
                        "\"grammar_mask_steps\": %zu, \"grammar_forced_tokens\": %zu, \"grammar_documents\": %zu",
                        grammar_path, median(sampled_ms), median(constrained_ms), 100.0 * (median(constrained_ms) / median(sampled_ms) - 1.0), median(sampled_pick_ms),
                        median(constrained_pick_ms), first_constrained_pick_ms, grammar_compile_ms, grammar_first_ms, mask_stats.p50(), mask_stats.p99(), mask_stats.max(),
                        forced_share, mask_stats.steps(), grammar_forced, grammar_documents);
        std::printf("}\n");
    } else {
        std::printf("%s  %s  %d thread(s)  kernels %s  KV cache %s\n", info.name, type_name, threads, kernels, kv_f16 ? "f16" : "f32");
        std::printf("  limits:  read bandwidth %.1f GB/s, fp32 FMA %.1f GFLOP/s", bandwidth, fma_gflops);
        if (prefill_bf16) std::printf(", %s %.1f GFLOP/s", prefill_unit, bf16_gflops);
        if (prefill_int8 || batch_int8) std::printf(", %s %.1f GOP/s", int8_unit, int8_gops);
        std::printf("\n");
        std::printf("  prefill: %d tokens  %.1f tok/s  (%s limit %.1f tok/s, %.1f%%)\n", prompt, prefill_tok_s, prefill_unit, prefill_limit_tok_s,
                    prefill_limit_tok_s > 0 ? 100.0 * prefill_tok_s / prefill_limit_tok_s : 0.0);
        std::printf("  decode:  at context %d  %.3f ms/token  (limit %.3f ms for %.1f MB of weights, %.1f%%; with the %.1f MB of KV cache read, %.1f%%)\n", context,
                    decode_ms, decode_limit_ms, weight_bytes / 1e6, 100.0 * decode_limit_ms / decode_ms, kv_bytes / 1e6, 100.0 * decode_limit_with_kv_ms / decode_ms);
        std::printf("  CPU time over all threads: prefill %.3f ms, decode %.3f ms/token\n", 1e3 * median(prefill_cpu_s), 1e3 * median(decode_cpu_s));
        std::printf("  peak RSS %.1f MB (model %.1f MB)\n", peak_rss, info.weight_bytes / 1e6);
        if (batch)
            std::printf("  batch:   %d sessions  %.3f ms/step  %.1f tok/s (single session %.1f tok/s, %.2fx)  %.1f%% of the %s limit %.1f tok/s (%.1f GOP/s)\n", batch,
                        step_ms, batch_tok_s, 1e3 / decode_ms, batch_tok_s * decode_ms / 1e3, 100.0 * batch_tok_s / batch_limit_tok_s, batch_unit, batch_limit_tok_s,
                        batch_unit_gops);
        if (batch)
            std::printf("  batch roofline (weights once and %d KV caches of %.1f MB read, or the products and attention at the units' peaks, the slower): "
                        "%.1f tok/s, %s-bound; %.1f%% of it\n", batch, kv_bytes / 1e6, batch_roofline_tok_s, batch_roofline_bound,
                        batch_roofline_tok_s > 0 ? 100.0 * batch_tok_s / batch_roofline_tok_s : 0.0);
        if (batch) std::printf("  generate_batch: %.3f ms/step  %.1f tok/s (sampling included)\n", generate_step_ms, batch / (generate_step_ms / 1e3));
        if (grammar) {
            std::printf("  grammar: %s  sampled decode %.3f ms/token free, %.3f constrained (%+.2f%%); sampling %.4f / %.4f ms/token "
                        "(%.4f in the grammar's first generation)\n", grammar_path, median(sampled_ms), median(constrained_ms),
                        100.0 * (median(constrained_ms) / median(sampled_ms) - 1.0), median(sampled_pick_ms), median(constrained_pick_ms), first_constrained_pick_ms);
            std::printf("           compile %.3f ms (first: %.1f ms); %zu masks: p50 %.1f us, p99 %.1f us, max %.1f us; %zu tokens forced, %.1f%% of the tokens "
                        "with those of masks of one token; %zu sentences begun\n", grammar_compile_ms, grammar_first_ms, mask_stats.steps(), mask_stats.p50(),
                        mask_stats.p99(), mask_stats.max(), grammar_forced, 100.0 * forced_share, grammar_documents);
        }
    }
    for (gpt2_session* b : batch_sessions) gpt2_session_free(b);
    gpt2_session_free(session);
    gpt2_grammar_free(grammar);
    gpt2_model_free(model);
    free_pages(buffer);
    return 0;
}
