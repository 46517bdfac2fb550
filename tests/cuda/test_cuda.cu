// The CUDA path against the reference forward pass (src/cpu/forward_reference.h, compiled in by
// GPT2_REFERENCE_FORWARD in tests/cuda/CMakeLists.txt) and the CPU's sampler and greedy tokens.
// This file is also the example of the one CUDA translation unit a program needs: it defines
// GPT2_IMPLEMENTATION and includes gpt2_cuda.cuh. Every test that needs a GPU skips with a
// message when there is none.
#define GPT2_IMPLEMENTATION
#include "gpt2_cuda.cuh"
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "../../bench/cuda_random_model.h"
#include "fused_twin.h"
#include "q8_twin.h"
#include "sampler_twin.h"
#include "../batch_helpers.h"
#include "../../tools/gguf_write.h"
#include <filesystem>
#include <map>
#include <cstdlib>
#include <thread>

// GPT2_CUDA_TEST_QUICK set: the cases that run many draws or tokens run a few (the device run's
// compute-sanitizer steps, where every kernel runs many times slower).
static bool quick() { return std::getenv("GPT2_CUDA_TEST_QUICK") != nullptr; }

static bool have_gpu() {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        cudaGetLastError();
        return false;
    }
    return true;
}

#define REQUIRE_GPU()                                          \
    do {                                                       \
        if (!have_gpu()) {                                     \
            MESSAGE("no CUDA GPU on this machine: test skipped"); \
            return;                                            \
        }                                                      \
    } while (0)

static gpt2_model_params cuda_params() {
    gpt2_model_params p = gpt2_model_default_params();
    p.device = GPT2_DEVICE_CUDA;
    return p;
}

// The converted shakespeare_char model: the CTest fixture's, or GPT2_SC_GGUF.
static std::string sc_path() {
    const char* env = std::getenv("GPT2_SC_GGUF");
    return env && *env ? env : test_model("shakespeare_char.gguf");
}

// nanoGPT's reference prompts: from the source tree, or GPT2_TEST_DATA_DIR (binaries run elsewhere).
static const Json& reference() {
    const char* dir = std::getenv("GPT2_TEST_DATA_DIR");
    static const Json ref = read_json((dir && *dir ? std::string(dir) : std::string(GPT2_TEST_DATA)) + "/shakespeare_char/reference.json");
    return ref;
}

// A model file held in memory, loaded on the CPU and on the GPU.
struct LoadedFile {
    gpt2_model* model = nullptr;
    gpt2_error err{};
    LoadedFile(const random_gguf& file, gpt2_model_params params) { gpt2_model_load_memory(file.data, file.size, &params, &model, &err); }
    ~LoadedFile() { gpt2_model_free(model); }
};

// One model loaded on the CPU and on the GPU, both checked: from a path (Loader Model) or from
// memory (LoadedFile).
template <class Loader>
struct OnBoth {
    Loader cpu, gpu;
    template <class Source>
    explicit OnBoth(const Source& source) : cpu(source, gpt2_model_default_params()), gpu(source, cuda_params()) {
        REQUIRE_MESSAGE(cpu.model, cpu.err.message);
        REQUIRE_MESSAGE(gpu.model, gpu.err.message);
    }
};

static const random_gguf& random_124m() {
    static random_gguf file;
    static bool built = random_gpt2_gguf(*random_gpt2_find_shape("124M"), 1, 7, &file);
    (void)built;
    return file;
}

// The gap between the two largest of n logits: a greedy pick closer than rounding may go either way.
static float top2_gap(const float* l, int n) {
    float best = -INFINITY, second = -INFINITY;
    for (int j = 0; j < n; j++) {
        if (l[j] > best) { second = best; best = l[j]; }
        else if (l[j] > second) second = l[j];
    }
    return best - second;
}

// Greedy steps through gpt2_session_eval (on the model's device), recording each step's top-2 logit gap.
static std::vector<int32_t> greedy(gpt2_model* model, const std::vector<int32_t>& prompt, int n, std::vector<float>* gaps) {
    gpt2_session* s = nullptr;
    gpt2_session_params sp = gpt2_session_default_params();
    sp.n_threads = 0;
    REQUIRE(gpt2_session_create(model, &sp, &s, nullptr) == GPT2_OK);
    const int V = gpt2_model_get_info(model).n_vocab;
    std::vector<int32_t> out;
    REQUIRE(gpt2_session_eval(s, prompt.data(), prompt.size(), nullptr) == GPT2_OK);
    for (int i = 0; i < n; i++) {
        const float* l = gpt2_session_logits(s);
        gaps->push_back(top2_gap(l, V));
        out.push_back((int32_t)(std::max_element(l, l + V) - l));
        REQUIRE(gpt2_session_eval(s, &out.back(), 1, nullptr) == GPT2_OK);
    }
    gpt2_session_free(s);
    return out;
}

// Identical, or the first difference comes where the CPU's two best logits were within
// `tie` of each other (16-bit weights and activations may order a near-tie either way).
// (Lengths may differ only after a difference: a stop string ends one stream earlier.)
static void check_greedy_agrees(const std::vector<int32_t>& gpu, const std::vector<int32_t>& cpu, const std::vector<float>& gaps, float tie) {
    size_t first = 0;
    while (first < gpu.size() && first < cpu.size() && gpu[first] == cpu[first]) first++;
    if (first == gpu.size() || first == cpu.size()) {
        CHECK(gpu.size() == cpu.size());
        return;
    }
    REQUIRE(first < gaps.size());
    MESSAGE("first difference at step " << first << " of " << gpu.size() << "; CPU top-2 gap there " << gaps[first]);
    CHECK(gaps[first] < tie);
}

TEST_CASE("without a GPU, asking for CUDA fails with GPT2_ERROR_DEVICE and a message") {
    if (have_gpu()) {
        MESSAGE("a GPU is present: nothing to check");
        return;
    }
    gpt2_model_params p = cuda_params();
    gpt2_model* m = nullptr;
    gpt2_error err{};
    const random_gpt2_shape tiny{"tiny", 1, 2, 64, 32, 100};
    random_gguf file;
    REQUIRE(random_gpt2_gguf(tiny, 1, 1, &file));
    CHECK(gpt2_model_load_memory(file.data, file.size, &p, &m, &err) == GPT2_ERROR_DEVICE);
    CHECK(m == nullptr);
    MESSAGE(err.message);
    CHECK(std::string(err.message).find("CUDA") != std::string::npos);
}

TEST_CASE("a device index past the last GPU is GPT2_ERROR_DEVICE") {
    REQUIRE_GPU();
    gpt2_model_params p = cuda_params();
    p.cuda_device_index = 1000;
    Model m(sc_path(), p);
    CHECK(m.model == nullptr);
    CHECK(m.err.code == GPT2_ERROR_DEVICE);
    MESSAGE(m.err.message);
}

TEST_CASE("shakespeare_char: logits within 2e-2 of the reference forward pass, prompt pass and token by token") {
    REQUIRE_GPU();
    const OnBoth<Model> both(sc_path());
    const Model &cpu = both.cpu, &gpu = both.gpu;
    const int V = cpu.info().n_vocab;
    float worst_prompt = 0, worst_step = 0;
    for (const Json& prompt : reference()["prompts"].array) {
        std::vector<int32_t> ids = prompt["ids"].ints();
        const std::vector<float> want = reference_logits(cpu.model, ids);
        Session g(gpu);
        REQUIRE(gpt2_session_eval(g.session, ids.data(), ids.size(), nullptr) == GPT2_OK);
        worst_prompt = std::max(worst_prompt, max_abs_diff(gpt2_session_logits(g.session), &want[(ids.size() - 1) * V], (size_t)V));
        Session g1(gpu);
        for (size_t t = 0; t < ids.size(); t++) {
            REQUIRE(gpt2_session_eval(g1.session, &ids[t], 1, nullptr) == GPT2_OK);
            worst_step = std::max(worst_step, max_abs_diff(gpt2_session_logits(g1.session), &want[t * V], (size_t)V));
        }
    }
    MESSAGE("max |logit difference|: prompt pass " << worst_prompt << ", token by token " << worst_step);
    CHECK(worst_prompt <= 2e-2f);
    CHECK(worst_step <= 2e-2f);
}

TEST_CASE("shakespeare_char: greedy continuations equal the CPU's for 200 tokens, also past n_ctx") {
    REQUIRE_GPU();
    const OnBoth<Model> both(sc_path());
    const Model &cpu = both.cpu, &gpu = both.gpu;
    for (const Json& prompt : reference()["prompts"].array) {
        CAPTURE(prompt["name"].string);
        std::vector<int32_t> ids = prompt["ids"].ints();
        std::vector<float> gaps;
        std::vector<int32_t> want = greedy(cpu.model, ids, 200, &gaps);
        Session g(gpu);
        std::vector<int32_t> got = generate(g.session, ids, 200, 0.0f, 0, 0);
        check_greedy_agrees(got, want, gaps, 1e-3f);
    }
}

// Past position 1,000 every attention split of the one-token kernel holds keys, and the 1,024th
// position's embedding row is read; past it the window is recomputed (GPT2_CONTEXT_EXACT).
TEST_CASE("124M-shaped random model (f16): greedy 200 tokens as on the CPU, logits within 2e-2 of the reference forward pass, greedy near and past 1,024 positions") {
    REQUIRE_GPU();
    const OnBoth<LoadedFile> both(random_124m());
    const LoadedFile &cpu = both.cpu, &gpu = both.gpu;
    std::vector<int32_t> prompt;
    for (int i = 0; i < 32; i++) prompt.push_back((i * 7919 + 13) % 50257);
    std::vector<float> gaps;
    std::vector<int32_t> want = greedy(cpu.model, prompt, 200, &gaps);
    gpt2_session* g = nullptr;
    REQUIRE(gpt2_session_create(gpu.model, nullptr, &g, nullptr) == GPT2_OK);
    std::vector<int32_t> got = generate(g, prompt, 200, 0.0f, 0, 0);
    check_greedy_agrees(got, want, gaps, 1e-3f);
    // logits after the prompt, and after 8 more tokens, each through the one-token path (graph or
    // persistent kernel), against the reference's rows of those positions
    std::vector<int32_t> ids = prompt;
    for (int i = 0; i < 8; i++) ids.push_back((i * 104729 + 7) % 50257);
    const std::vector<float> reference = reference_logits(cpu.model, ids);
    gpt2_session_reset(g);
    REQUIRE(gpt2_session_eval(g, prompt.data(), prompt.size(), nullptr) == GPT2_OK);
    const float diff = max_abs_diff(gpt2_session_logits(g), &reference[(prompt.size() - 1) * 50257], 50257);
    MESSAGE("max |logit difference| after the prompt: " << diff);
    CHECK(diff <= 2e-2f);
    for (size_t t = prompt.size(); t < ids.size(); t++) REQUIRE(gpt2_session_eval(g, &ids[t], 1, nullptr) == GPT2_OK);
    const float step_diff = max_abs_diff(gpt2_session_logits(g), &reference[(ids.size() - 1) * 50257], 50257);
    MESSAGE("max |logit difference| after 8 one-token steps (" << std::string(gpt2__cuda_model_of(gpu.model)->persistent ? "persistent kernel" : "graph") << "): " << step_diff);
    CHECK(step_diff <= 2e-2f);
    std::vector<int32_t> long_prompt;
    for (int i = 0; i < 1000; i++) long_prompt.push_back((i * 7919 + 13) % 50257);
    gaps.clear();
    want = greedy(cpu.model, long_prompt, 30, &gaps);
    gpt2_session_reset(g);
    check_greedy_agrees(generate(g, long_prompt, 30, 0.0f, 0, 0), want, gaps, 2e-2f);
    CHECK(gpt2_session_n_tokens(g) == 1024);
    gpt2_session_free(g);
}

TEST_CASE("the GPU sampler picks the CPU sampler's token from the same logits") {
    REQUIRE_GPU();
    const int n = 50257;
    std::vector<float> logits(n);
    uint64_t r = 99;
    float* d_logits = nullptr;
    int32_t* d_token = nullptr;
    int* d_step = nullptr;
    REQUIRE(cudaMalloc((void**)&d_logits, n * 4) == cudaSuccess);
    REQUIRE(cudaMalloc((void**)&d_token, 16) == cudaSuccess);
    REQUIRE(cudaMalloc((void**)&d_step, 16) == cudaSuccess);
    std::vector<float> scratch(n);
    const float temperatures[] = {0.0f, 0.5f, 0.8f, 1.0f, 1.7f};
    const int top_ks[] = {0, 1, 5, 200, 50257, 60000};
    int checked = 0, same = 0;
    for (int trial = 0; trial < 40; trial++) {
        for (int i = 0; i < n; i++) logits[i] = (float)((gpt2__rng_next(&r) >> 40) % 20000) / 2000.0f - 5.0f; /* ties happen */
        REQUIRE(cudaMemcpy(d_logits, logits.data(), n * 4, cudaMemcpyHostToDevice) == cudaSuccess);
        for (float t : temperatures)
            for (int k : top_ks) {
                uint64_t state = 1000 + trial, state_gpu = state;
                const int32_t want = gpt2__sample(logits.data(), n, t, k, &state, scratch.data());
                gpt2__sample_kernel<<<1, GPT2__SAMPLE_THREADS>>>(d_logits, n, t, k, state_gpu, d_token, d_step, 0);
                int32_t got = -1;
                REQUIRE(cudaMemcpy(&got, d_token, 4, cudaMemcpyDeviceToHost) == cudaSuccess);
                checked++;
                same += got == want;
                if (got != want) MESSAGE("t " << t << " top_k " << k << " trial " << trial << ": CPU " << want << " GPU " << got);
            }
    }
    cudaFree(d_logits);
    cudaFree(d_token);
    cudaFree(d_step);
    MESSAGE(same << " of " << checked << " draws identical");
    CHECK(same == checked);
}

static_assert((int)sampler_twin::THREADS == GPT2__FS_THREADS && (int)sampler_twin::PER_THREAD == GPT2__FS_PER_THREAD &&
                  (int)sampler_twin::MAX_SLICES == GPT2__FS_MAX_SLICES && (int)sampler_twin::MAX_K == GPT2__FS_MAX_K && (int)sampler_twin::CAP == GPT2__FS_CAP &&
                  (int)sampler_twin::EXACT_MAX == GPT2__FS_EXACT_MAX && (int)sampler_twin::GREEDY == GPT2__FS_GREEDY && (int)sampler_twin::EXACT == GPT2__FS_EXACT &&
                  (int)sampler_twin::TREE == GPT2__FS_TREE && (int)sampler_twin::HOST == GPT2__FS_HOST,
              "tests/cuda/sampler_twin.h has the kernel's sizes");

// The many-block sampler launched directly, on device memory of its own.
struct FastSampler {
    gpt2__fs_work w{};
    float* logits = nullptr;
    uint32_t* allowed = nullptr;
    int32_t* token = nullptr;
    std::vector<void*> owned;
    explicit FastSampler(int n) {
        const auto alloc = [&](void** p, size_t bytes) {
            REQUIRE(cudaMalloc(p, bytes) == cudaSuccess);
            owned.push_back(*p);
        };
        alloc((void**)&w.slices, GPT2__FS_MAX_SLICES * sizeof(gpt2__fs_slice));
        alloc((void**)&w.cand_v, GPT2__FS_MAX_SLICES * GPT2__FS_CAP * 4);
        alloc((void**)&w.cand_i, GPT2__FS_MAX_SLICES * GPT2__FS_CAP * 4);
        alloc((void**)&w.ticket, 16);
        alloc((void**)&w.path, 16);
        alloc((void**)&logits, (size_t)n * 4);
        alloc((void**)&allowed, ((size_t)n + 31) / 32 * 4);
        alloc((void**)&token, 16);
        REQUIRE(cudaMemset(w.ticket, 0, 16) == cudaSuccess);
    }
    ~FastSampler() {
        for (void* p : owned) cudaFree(p);
    }
    void set_logits(const std::vector<float>& l) { REQUIRE(cudaMemcpy(logits, l.data(), l.size() * 4, cudaMemcpyHostToDevice) == cudaSuccess); }
    sampler_twin::Draw draw(int n, const uint32_t* mask, float t, int k, float p, uint64_t rng) {
        if (mask) REQUIRE(cudaMemcpy(allowed, mask, ((size_t)n + 31) / 32 * 4, cudaMemcpyHostToDevice) == cudaSuccess);
        gpt2__fs_args a{};
        a.logits = logits;
        a.n = n;
        a.allowed = mask ? allowed : nullptr;
        a.temperature = t;
        a.top_k = k;
        a.top_p = p;
        a.rng = rng;
        a.token_out = token;
        REQUIRE(gpt2__fs_launch(a, w, 0) == cudaSuccess);
        REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
        sampler_twin::Draw d{-2, -1};
        REQUIRE(cudaMemcpy(&d.token, token, 4, cudaMemcpyDeviceToHost) == cudaSuccess);
        REQUIRE(cudaMemcpy(&d.path, w.path, 4, cudaMemcpyDeviceToHost) == cudaSuccess);
        return d;
    }
};

// The twin's case above (tests/test_cuda_twins.cpp) ties the twin to the host's chain on the CPU;
// this one ties the kernel to the twin, draw by draw.
TEST_CASE("the many-block sampler draws its CPU twin's token the same way, over masks, top_k, top_p, temperatures and ties") {
    REQUIRE_GPU();
    const float temperatures[] = {0.0f, 0.8f, 1.3f};
    const float top_ps[] = {0.0f, 0.5f, 0.95f};
    int checked = 0, same = 0, as_host = 0, host_checked = 0, paths[4] = {0, 0, 0, 0};
    uint64_t seed = 1;
    std::vector<sampler_twin::Logits> sets = sampler_twin::logit_sets();
    if (quick()) sets = {sets[0], sets[2]}; /* ties; four levels */
    for (const sampler_twin::Logits& set : sets) {
        const int n = (int)set.values.size();
        FastSampler fs(n);
        fs.set_logits(set.values);
        const std::vector<std::vector<uint32_t>> masks = sampler_twin::masks(n);
        const int top_ks[] = {0, 1, 5, 40, 200, 256, 300, n};
        for (size_t mi = 0; mi < (quick() ? 2 : masks.size()); mi++) {
            const uint32_t* mask = masks[mi].empty() ? nullptr : masks[mi].data();
            for (float t : temperatures)
                for (int k : top_ks)
                    for (float p : top_ps)
                        for (int repeat = 0; repeat < (quick() ? 1 : 2); repeat++) {
                            const uint64_t state = seed++ * 0x9e3779b97f4a7c15ull;
                            const sampler_twin::Draw want = sampler_twin::draw(set.values.data(), n, mask, t, k, p, state);
                            const sampler_twin::Draw got = fs.draw(n, mask, t, k, p, state);
                            checked++;
                            paths[std::min(3, std::max(0, got.path))]++;
                            const bool ok = got.token == want.token && got.path == want.path;
                            same += ok;
                            if (!ok)
                                MESSAGE(set.name << " mask " << mi << " t " << t << " top_k " << k << " top_p " << p << ": kernel " << got.token << " (way " << got.path
                                                 << "), twin " << want.token << " (way " << want.path << ")");
                            if (got.token >= 0) {
                                uint64_t host_state = state;
                                host_checked++;
                                as_host += got.token == sampler_twin::host_chain(set.values, mask, t, k, p, &host_state);
                            }
                        }
        }
    }
    MESSAGE(same << " of " << checked << " draws as the twin's (token and way), " << as_host << " of " << host_checked << " as the host chain's; ways: greedy "
                 << paths[0] << ", exact " << paths[1] << ", tree " << paths[2] << ", host " << paths[3]);
    CHECK(same == checked);
    CHECK(as_host == host_checked);
}

// With GPT2_CUDA_FAST_SAMPLER the backend's sample_chain draws with the mask, top_k and top_p on
// the GPU: on a model's real logits, draw by draw against the host's chain on the same logits, and
// whole generations against the same model with the many-block sampler switched off (the host's
// chain, the one-block kernel) — the same GPU logits, so the same tokens.
static std::vector<int32_t> generate_with(gpt2_model* model, const std::vector<int32_t>& prompt, const gpt2_generate_params& p) {
    Session s(model);
    std::vector<int32_t> out((size_t)p.max_new_tokens);
    size_t n = 0;
    gpt2_error err;
    REQUIRE_MESSAGE(gpt2_generate(s.session, prompt.data(), prompt.size(), &p, out.data(), out.size(), &n, &err) == GPT2_OK, err.message);
    out.resize(n);
    return out;
}

TEST_CASE("GPT2_CUDA_FAST_SAMPLER: the grammar's mask, top_k, top_p and temperature drawn on the GPU as the host's chain draws them") {
    REQUIRE_GPU();
    if (!gpt2__cuda_backend.sample_chain) {
        MESSAGE("built without GPT2_CUDA_FAST_SAMPLER: nothing to check");
        return;
    }
    {
        LoadedFile gpu(random_124m(), cuda_params());
        REQUIRE(gpu.model);
        Session s(gpu.model);
        std::vector<int32_t> prompt;
        for (int i = 0; i < 24; i++) prompt.push_back((i * 7919 + 13) % 50257);
        REQUIRE(gpt2_session_eval(s.session, prompt.data(), prompt.size(), nullptr) == GPT2_OK);
        const std::vector<float> logits(gpt2_session_logits(s.session), gpt2_session_logits(s.session) + 50257);
        const std::vector<std::vector<uint32_t>> masks = sampler_twin::masks(50257);
        int checked = 0, same = 0, host = 0;
        for (size_t mi = 0; mi < masks.size(); mi++)
            for (float t : {0.0f, 0.7f, 1.0f})
                for (int k : {0, 1, 40, 200})
                    for (float p : {0.0f, 0.9f}) {
                        const uint32_t* mask = masks[mi].empty() ? nullptr : masks[mi].data();
                        const uint64_t seed = 1000 + (uint64_t)checked;
                        s.session->rng_state = seed;
                        int32_t got = -1;
                        gpt2_error err;
                        const gpt2_result r = gpt2__cuda_sample_chain(s.session, t, k, p, mask, &got, &err);
                        checked++;
                        if (r == GPT2__NOT_HANDLED) {
                            host++;
                            CHECK(s.session->rng_state == seed);
                            continue;
                        }
                        REQUIRE_MESSAGE(r == GPT2_OK, err.message);
                        uint64_t state = seed;
                        const int32_t want = sampler_twin::host_chain(logits, mask, t, k, p, &state);
                        same += got == want;
                        CHECK(s.session->rng_state == state); /* one number drawn when the host draws one */
                    }
        MESSAGE(same << " of " << checked - host << " draws on 124M logits as the host chain's (" << host << " left to the host)");
        CHECK(same == checked - host);
    }
    Model gpu(sc_path(), cuda_params());
    REQUIRE(gpu.model);
    gpt2_grammar* grammar = nullptr;
    gpt2_error err;
    REQUIRE_MESSAGE(gpt2_grammar_from_gbnf(gpu.model, "root ::= [A-Z]+ \":\\n\" ([a-z ,.]+ \"\\n\"){3}", nullptr, &grammar, &err) == GPT2_OK, err.message);
    const std::vector<int32_t> prompt = reference()["prompts"][0]["ids"].ints();
    gpt2_generate_params p = gpt2_generate_default_params();
    p.max_new_tokens = quick() ? 20 : 150;
    struct Variant {
        const char* name;
        float temperature, top_p;
        int top_k;
        bool grammar;
    } variants[] = {{"nanoGPT's temperature 0.8, top_k 200", 0.8f, 0.0f, 200, false}, {"top_k 10, top_p 0.9", 1.0f, 0.9f, 10, false},
                    {"a grammar, top_k 20", 0.9f, 0.0f, 20, true}, {"a grammar, greedy", 0.0f, 0.0f, 0, true},
                    {"a grammar, top_k 30, top_p 0.8", 1.2f, 0.8f, 30, true}, {"top_k 0 (every token)", 1.0f, 0.0f, 0, false}};
    gpt2__cuda_model* dm = gpt2__cuda_model_of(gpu.model);
    for (const Variant& v : variants) {
        CAPTURE(v.name);
        p.temperature = v.temperature;
        p.top_p = v.top_p;
        p.top_k = v.top_k;
        p.grammar = v.grammar ? grammar : nullptr;
        const std::vector<int32_t> fast = generate_with(gpu.model, prompt, p);
        dm->fast_sampler = false;
        const std::vector<int32_t> host = generate_with(gpu.model, prompt, p);
        dm->fast_sampler = true;
        CHECK(fast.size() > 10);
        CHECK(fast == host);
    }
    gpt2_grammar_free(grammar);
}

TEST_CASE("sampling with a fixed seed repeats run to run; another seed differs; top_k 1 is greedy") {
    REQUIRE_GPU();
    Model gpu(sc_path(), cuda_params());
    REQUIRE(gpu.model);
    std::vector<int32_t> prompt = reference()["prompts"][0]["ids"].ints();
    Session a(gpu), b(gpu), c(gpu), d(gpu), e(gpu);
    std::vector<int32_t> first = generate(a.session, prompt, 300, 0.8f, 200, 42);
    std::vector<int32_t> again = generate(b.session, prompt, 300, 0.8f, 200, 42);
    std::vector<int32_t> other = generate(c.session, prompt, 300, 0.8f, 200, 43);
    CHECK(first.size() == 300);
    CHECK(first == again);
    CHECK(first != other);
    CHECK(generate(d.session, prompt, 100, 1.0f, 1, 5) == generate(e.session, prompt, 100, 0.0f, 0, 0));
}

TEST_CASE("several sessions on one model in threads give the tokens of one at a time") {
    REQUIRE_GPU();
    const random_gguf& file = random_124m();
    LoadedFile gpu(file, cuda_params());
    REQUIRE(gpu.model);
    const int n_threads = 4;
    std::vector<std::vector<int32_t>> prompts(n_threads), serial(n_threads), parallel(n_threads);
    for (int t = 0; t < n_threads; t++)
        for (int i = 0; i < 20 + 10 * t; i++) prompts[t].push_back((i * 31 + t * 1000 + 1) % 50257);
    for (int t = 0; t < n_threads; t++) {
        gpt2_session* s = nullptr;
        REQUIRE(gpt2_session_create(gpu.model, nullptr, &s, nullptr) == GPT2_OK);
        serial[t] = generate(s, prompts[t], 100, 0.9f, 40, 100 + t);
        gpt2_session_free(s);
    }
    std::vector<std::thread> threads;
    for (int t = 0; t < n_threads; t++)
        threads.emplace_back([&, t] {
            gpt2_session* s = nullptr;
            if (gpt2_session_create(gpu.model, nullptr, &s, nullptr) != GPT2_OK) return;
            parallel[t] = generate(s, prompts[t], 100, 0.9f, 40, 100 + t);
            gpt2_session_free(s);
        });
    for (std::thread& th : threads) th.join();
    for (int t = 0; t < n_threads; t++) CHECK(parallel[t] == serial[t]);
}

TEST_CASE("prompt log-probability on the GPU within 1e-2 of the reference forward pass's") {
    REQUIRE_GPU();
    const OnBoth<Model> both(sc_path());
    const Model &cpu = both.cpu, &gpu = both.gpu;
    const int V = cpu.info().n_vocab;
    Session g(gpu);
    for (const Json& prompt : reference()["prompts"].array) {
        std::vector<int32_t> ids = prompt["ids"].ints(); // at most n_ctx: one window
        const std::vector<float> logits = reference_logits(cpu.model, ids);
        double want = 0, got = 0;
        for (size_t t = 1; t < ids.size(); t++) want += gpt2__log_prob(&logits[(t - 1) * V], V, ids[t]);
        REQUIRE(gpt2_score(g.session, ids.data(), ids.size(), &got, nullptr) == GPT2_OK);
        CHECK(std::fabs(want - got) <= 1e-2 * std::max(1.0, std::fabs(want) / 100));
    }
}

// ---- gpt2_batch_eval: the batched pass (run_batch; tests/cuda/CMakeLists.txt builds this file
// with GPT2_CUDA_BATCH, which switches it on) against the same sessions run one by one ----------

static void say_which_batch() {
    const std::string which = gpt2__cuda_backend.run_batch ? "gpt2_batch_eval runs the CUDA run_batch (GPT2_CUDA_BATCH)"
                                                     : "built without GPT2_CUDA_BATCH: gpt2_batch_eval runs the sessions one by one, so these cases compare that with itself";
    MESSAGE(which);
}

static std::vector<int32_t> ids(int n, int seed, int n_vocab) {
    std::vector<int32_t> v;
    for (int i = 0; i < n; i++) v.push_back((int32_t)((i * 31 + seed * 17 + 7) % n_vocab));
    return v;
}

// Five sessions: two of the model's context, one of 12 positions (GPT2_CONTEXT_EXACT: reaching it
// recomputes the whole window), one of 16 that discards after 3 kept tokens, one more of the
// model's; prompts, 2 or 3 tokens and single tokens in the same passes, at different context
// lengths; sessions[0] (the runner, whose stream and workspace run the pass) left out of some
// rounds, and one round that needs a larger workspace than the first.
static void check_ragged_batches(gpt2_model* model) {
    const int V = gpt2_model_get_info(model).n_vocab;
    /* one by one through the same cuBLAS path as the batch: no one-token kernels */
    gpt2__cuda_model_of(model)->fast_decode = false;
    const auto make = [&](std::vector<std::unique_ptr<Owned>>* owned) {
        owned->push_back(session(model, 0, 0));
        owned->push_back(session(model, 0, 0));
        owned->push_back(session(model, 0, 0, 12, GPT2_CONTEXT_EXACT));
        owned->push_back(session(model, 0, 0, 16, GPT2_CONTEXT_DISCARD, 3));
        owned->push_back(session(model, 0, 0));
        std::vector<gpt2_session*> v;
        for (auto& s : *owned) v.push_back(s->session);
        return v;
    };
    std::vector<std::unique_ptr<Owned>> a, b;
    const std::vector<gpt2_session*> batched = make(&a), alone = make(&b);
    Rounds rounds(24);
    rounds[0] = {ids(7, 1, V), ids(2, 2, V), ids(9, 3, V), ids(10, 4, V), ids(150, 5, V)};
    rounds[1] = {{}, ids(3, 6, V), ids(1, 7, V), ids(1, 8, V), ids(1, 9, V)};
    rounds[2] = {ids(1, 10, V), {}, ids(2, 11, V), ids(1, 12, V), ids(40, 13, V)};
    for (int r = 3; r < 24; r++)
        rounds[(size_t)r] = {ids(r == 9 ? 200 : 1, r, V), ids(1, r + 1, V), ids(r % 5 == 0 ? 3 : 1, r + 2, V), ids(1, r + 3, V), ids(r % 7 == 0 ? 2 : 1, r + 4, V)};
    float largest_logit = 0;
    const float worst = compare_rounds(batched, alone, rounds, V, &largest_logit);
    CHECK(gpt2_session_n_tokens(batched[2]) == 12);
    CHECK(gpt2_session_n_tokens(batched[3]) <= 16);
    MESSAGE("largest logit difference, batched against one by one: " << worst << " (largest |logit| " << largest_logit << ")");
    /* cuBLAS picks a product's kernel by its row count, so a batch sums in another order than one
       session's rows, and every product rounds its output to 16 bits (2^-11 relative): two such
       units of the largest logit (the CPU's bound, in f32, is 1e-4) */
    CHECK(worst <= 0x1p-10f * std::max(1.0f, largest_logit));
}

TEST_CASE("gpt2_batch_eval on the GPU: a ragged batch gets the logits of one by one through the same cuBLAS path, sessions at their context limit included") {
    REQUIRE_GPU();
    say_which_batch();
    {
        Model gpu(sc_path(), cuda_params());
        REQUIRE_MESSAGE(gpu.model, gpu.err.message);
        check_ragged_batches(gpu.model);
    }
    LoadedFile gpu(random_124m(), cuda_params());
    REQUIRE_MESSAGE(gpu.model, gpu.err.message);
    check_ragged_batches(gpu.model);
}

TEST_CASE("gpt2_batch_eval on the GPU: greedy decoding in batches gives one by one's tokens (one-token kernels alone), also past n_ctx") {
    REQUIRE_GPU();
    say_which_batch();
    Model gpu(sc_path(), cuda_params());
    REQUIRE_MESSAGE(gpu.model, gpu.err.message);
    const int V = gpu.info().n_vocab, steps = 100;
    std::vector<std::vector<int32_t>> prompts;
    for (const Json& prompt : reference()["prompts"].array) prompts.push_back(prompt["ids"].ints());
    prompts.push_back(ids(200, 1, V)); /* reaches the 256 positions of the model after 56 steps */
    std::vector<std::vector<int32_t>> want, got(prompts.size());
    std::vector<std::vector<float>> gaps(prompts.size());
    for (size_t i = 0; i < prompts.size(); i++) want.push_back(greedy(gpu.model, prompts[i], steps, &gaps[i]));
    std::vector<std::unique_ptr<Owned>> owned;
    std::vector<gpt2_session*> batch;
    std::vector<const int32_t*> tokens;
    std::vector<size_t> counts;
    for (const auto& p : prompts) {
        owned.push_back(session(gpu.model, 0, 0));
        batch.push_back(owned.back()->session);
        tokens.push_back(p.data());
        counts.push_back(p.size());
    }
    std::vector<int32_t> next(prompts.size());
    for (int step = 0; step <= steps; step++) {
        gpt2_error err;
        REQUIRE_MESSAGE(gpt2_batch_eval(batch.data(), tokens.data(), counts.data(), batch.size(), &err) == GPT2_OK, err.message);
        if (step == steps) break;
        for (size_t i = 0; i < batch.size(); i++) {
            const float* l = gpt2_session_logits(batch[i]);
            REQUIRE(l);
            next[i] = (int32_t)(std::max_element(l, l + V) - l);
            got[i].push_back(next[i]);
            tokens[i] = &next[i];
            counts[i] = 1;
        }
    }
    // the batch multiplies 16-bit activations where a lone token's kernels keep them f32: a
    // near-tie (each path is within 2e-2 of the reference forward pass) may go either way
    for (size_t i = 0; i < prompts.size(); i++) {
        CAPTURE(i);
        check_greedy_agrees(got[i], want[i], gaps[i], 4e-2f);
    }
}

static int abort_now(void* user) { return *(int*)user; }

TEST_CASE("gpt2_batch_eval on the GPU: an aborted batch leaves every session as it was, and they go on") {
    REQUIRE_GPU();
    say_which_batch();
    Model gpu(sc_path(), cuda_params());
    REQUIRE_MESSAGE(gpu.model, gpu.err.message);
    const int V = gpu.info().n_vocab;
    gpt2__cuda_model_of(gpu.model)->fast_decode = false; /* the lone session below takes the batch's cuBLAS path */
    int stop = 0;
    gpt2_session_params p = gpt2_session_default_params();
    p.abort_fn = abort_now;
    p.abort_user = &stop;
    gpt2_session* runner = nullptr;
    REQUIRE(gpt2_session_create(gpu.model, &p, &runner, nullptr) == GPT2_OK);
    Session other(gpu);
    const std::vector<int32_t> prompt = ids(6, 1, V), one = ids(1, 2, V), more = ids(4, 3, V);
    for (gpt2_session* s : {runner, other.session}) REQUIRE(gpt2_session_eval(s, prompt.data(), prompt.size(), nullptr) == GPT2_OK);
    const std::vector<float> before(gpt2_session_logits(other.session), gpt2_session_logits(other.session) + V);
    gpt2_session* sessions[] = {runner, other.session};
    const int32_t* tokens[] = {one.data(), more.data()};
    const size_t n[] = {1, 4};
    gpt2_error err;
    stop = 1;
    CHECK(gpt2_batch_eval(sessions, tokens, n, 2, &err) == GPT2_ERROR_ABORTED);
    CHECK(gpt2_session_n_tokens(runner) == 6);
    CHECK(gpt2_session_n_tokens(other.session) == 6);
    CHECK(max_abs_diff(gpt2_session_logits(other.session), before.data(), (size_t)V) == 0.0f);
    stop = 0;
    REQUIRE_MESSAGE(gpt2_batch_eval(sessions, tokens, n, 2, &err) == GPT2_OK, err.message);
    Session lone(gpu);
    REQUIRE(gpt2_session_eval(lone.session, prompt.data(), prompt.size(), nullptr) == GPT2_OK);
    REQUIRE(gpt2_session_eval(lone.session, more.data(), more.size(), nullptr) == GPT2_OK);
    const float* want = gpt2_session_logits(lone.session);
    float largest_logit = 1;
    for (int v = 0; v < V; v++) largest_logit = std::max(largest_logit, std::fabs(want[v]));
    CHECK(gpt2_session_n_tokens(other.session) == 10);
    CHECK(max_abs_diff(gpt2_session_logits(other.session), want, (size_t)V) <= 1e-4f * largest_logit);
    gpt2_session_free(runner);
}

// ---- What a program does with GPU sessions beyond one greedy stream: other weight types,
// states moved between devices, contexts continued and cut, the host's sampling chain, abort,
// many generations at once. Each against the reference forward pass or the CPU. -----------------

// shakespeare_char rewritten in `type` by gpt2-quantize's code (gguf_quantize_file), in the
// temporary folder.
static std::string sc_as(uint32_t type) {
    static std::map<uint32_t, std::string> written; /* each type once (two cases use bf16) */
    if (written.count(type)) return written[type];
    const std::string out = (std::filesystem::temp_directory_path() / ("gpt2_cuda_sc_" + std::string(gpt2__type_name(type)) + ".gguf")).string();
    size_t bytes = 0;
    std::string error;
    REQUIRE_MESSAGE(gguf_quantize_file(sc_path().c_str(), out.c_str(), type, &bytes, &error), error);
    return written[type] = out;
}

// The largest difference, over the reference prompts, between the GPU's logits and the reference
// forward pass's at the last position: after the prompt in one pass, and after the prompt less
// its last token in one pass then that token alone (the one-token kernels).
static float worst_prompt_logits(const Model& cpu, const Model& gpu) {
    const int V = cpu.info().n_vocab;
    float worst = 0;
    for (const Json& prompt : reference()["prompts"].array) {
        const std::vector<int32_t> ids = prompt["ids"].ints();
        const std::vector<float> want = reference_logits(cpu.model, ids);
        const float* last = &want[(ids.size() - 1) * V];
        Session whole(gpu), split(gpu);
        REQUIRE(gpt2_session_eval(whole.session, ids.data(), ids.size(), nullptr) == GPT2_OK);
        worst = std::max(worst, max_abs_diff(gpt2_session_logits(whole.session), last, (size_t)V));
        if (ids.size() > 1) REQUIRE(gpt2_session_eval(split.session, ids.data(), ids.size() - 1, nullptr) == GPT2_OK);
        REQUIRE(gpt2_session_eval(split.session, &ids.back(), 1, nullptr) == GPT2_OK);
        worst = std::max(worst, max_abs_diff(gpt2_session_logits(split.session), last, (size_t)V));
    }
    return worst;
}

// bf16 stays bf16 on the GPU (8 bits of mantissa in the weights and the cache: on the H200, 2-3
// times f16's difference); q8_0 and q4_0 are dequantized once and held as f16. The CPU's q8_0/q4_0 kernels quantize the activations to int8,
// so its greedy picks carry their own error: a first difference at a gap under `tie` is rounding.
// With GPT2_CUDA_Q8 a q8_0 token's products quantize them too, as the CPU's do (0.073 from the
// reference on shakespeare_char, measured on the CPU): the next case compares those with the CPU.
TEST_CASE("bf16, q8_0 and q4_0 files on the GPU: logits near the reference forward pass of the same file, greedy 200 tokens as the CPU's") {
    REQUIRE_GPU();
    const struct {
        uint32_t type;
        float tolerance, tie;
    } types[] = {{GPT2_TYPE_F16, 2e-2f, 1e-3f}, {GPT2_TYPE_BF16, 5e-2f, 1e-1f}, {GPT2_TYPE_Q8_0, 2e-2f, 1e-1f}, {GPT2_TYPE_Q4_0, 2e-2f, 1e-1f}};
    for (const auto& t : types) {
        const std::string name = gpt2__type_name(t.type);
        CAPTURE(name);
        const std::string path = sc_as(t.type);
        const OnBoth<Model> both(path);
        const Model &cpu = both.cpu, &gpu = both.gpu;
        const bool int8_tokens = gpt2__cuda_model_of(gpu.model)->q8_decode;
        const float worst = worst_prompt_logits(cpu, gpu);
        MESSAGE(name << ": max |logit difference| " << worst << (int8_tokens ? " (tokens on 8-bit weights and int8 activations)" : ""));
        CHECK(worst <= (int8_tokens ? 1.5e-1f : t.tolerance));
        const std::vector<int32_t> prompt = reference()["prompts"][0]["ids"].ints();
        std::vector<float> gaps;
        const std::vector<int32_t> want = greedy(cpu.model, prompt, 200, &gaps);
        Session g(gpu);
        check_greedy_agrees(generate(g.session, prompt, 200, 0.0f, 0, 0), want, gaps, t.tie);
    }
}

// The q8_0 kernel launched directly on rows of random blocks against its twin: the same bits.
TEST_CASE("the q8_0 one-token product (8-bit weights, int8 input) gives its CPU twin's bits") {
    REQUIRE_GPU();
    uint64_t r = 9;
    int rows_checked = 0, same = 0;
    for (int K : {32, 96, 768, 1600, 3072, 6400}) {
        CAPTURE(K);
        const int N = 300, nb = K / 32;
        std::vector<float> x((size_t)K);
        for (float& v : x) v = (float)((int)(gpt2__rng_next(&r) % 20001) - 10000) / 1000.0f;
        for (int i = 0; i < 32; i++) x[(size_t)i] = 0.0f; /* a block of zeros: scale 0 */
        std::vector<int8_t> xq((size_t)K);
        std::vector<float> xscale((size_t)nb);
        gpt2__quantize_q8_scalar(xq.data(), xscale.data(), x.data(), K);
        std::vector<int8_t> values((size_t)N * K);
        std::vector<uint16_t> scales((size_t)N * nb);
        std::vector<float> want((size_t)N);
        for (int o = 0; o < N; o++) {
            std::vector<uint8_t> row((size_t)nb * gpt2__q8_block_bytes);
            for (int b = 0; b < nb; b++) {
                const uint16_t scale = gpt2__f32_to_f16((float)(gpt2__rng_next(&r) % 1000 + 1) * 1e-4f);
                std::memcpy(&row[(size_t)b * gpt2__q8_block_bytes], &scale, 2);
                for (int i = 0; i < 32; i++) row[(size_t)b * gpt2__q8_block_bytes + 2 + i] = (uint8_t)(gpt2__rng_next(&r) & 255);
            }
            gpt2__q8_split_rows(row.data(), row.size(), 1, K, &values[(size_t)o * K], &scales[(size_t)o * nb]); /* the upload's split */
            want[(size_t)o] = q8_twin::dot(q8_twin::split(row.data(), K), xq.data(), xscale.data(), K) + 0.0f;
        }
        int8_t* d_values = nullptr;
        uint16_t* d_scales = nullptr;
        float *d_x = nullptr, *d_y = nullptr;
        REQUIRE(cudaMalloc((void**)&d_values, values.size()) == cudaSuccess);
        REQUIRE(cudaMalloc((void**)&d_scales, scales.size() * 2) == cudaSuccess);
        REQUIRE(cudaMalloc((void**)&d_x, x.size() * 4) == cudaSuccess);
        REQUIRE(cudaMalloc((void**)&d_y, (size_t)N * 4) == cudaSuccess);
        REQUIRE(cudaMemcpy(d_values, values.data(), values.size(), cudaMemcpyHostToDevice) == cudaSuccess);
        REQUIRE(cudaMemcpy(d_scales, scales.data(), scales.size() * 2, cudaMemcpyHostToDevice) == cudaSuccess);
        REQUIRE(cudaMemcpy(d_x, x.data(), x.size() * 4, cudaMemcpyHostToDevice) == cudaSuccess);
        REQUIRE(cudaMemset(d_y, 0xff, (size_t)N * 4) == cudaSuccess); /* NaN until written */
        gpt2__gemv_args a{};
        a.W = d_values;
        a.scales = d_scales;
        a.N = N;
        a.K = K;
        a.in = d_x;
        a.out = d_y;
        gpt2__gemv_q8_kernel<__half, GPT2__EPI_STORE><<<7, 256, gpt2__gemv_q8_smem(K, false)>>>(a); /* 7 blocks: rows strided over the grid */
        REQUIRE(cudaGetLastError() == cudaSuccess);
        std::vector<float> got((size_t)N);
        REQUIRE(cudaMemcpy(got.data(), d_y, (size_t)N * 4, cudaMemcpyDeviceToHost) == cudaSuccess);
        for (int o = 0; o < N; o++) {
            rows_checked++;
            same += got[(size_t)o] == want[(size_t)o];
        }
        cudaFree(d_values);
        cudaFree(d_scales);
        cudaFree(d_x);
        cudaFree(d_y);
    }
    MESSAGE(same << " of " << rows_checked << " rows bit for bit as the twin's");
    CHECK(same == rows_checked);
}

// The fused attention + c_proj kernel launched directly on a random cache: x as its twin computes
// it from the heads' outputs the kernel wrote (bit for bit), and within rounding of the two kernels
// it replaces, attention then gpt2__gemv_kernel's residual product. Twice in a row: the tickets
// are left ready for the next launch.
TEST_CASE("attention fused with its output projection gives its CPU twin's bits and the unfused kernels' x to rounding") {
    REQUIRE_GPU();
    const struct {
        int C, H, n_ctx, pos;
    } shapes[] = {{768, 12, 256, 200}, {1600, 25, 128, 5}, {256, 8, 64, 63}, {1024, 8, 96, 40}}; /* D = 64, 64, 32, 128 */
    uint64_t r = 21;
    const auto uniform = [&] { return (float)((double)(gpt2__rng_next(&r) >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0); };
    for (const auto& sh : shapes) {
        CAPTURE(sh.C);
        const int C = sh.C, H = sh.H, D = C / H, n_splits = (sh.n_ctx + GPT2__ATTN_KEYS - 1) / GPT2__ATTN_KEYS;
        std::vector<uint16_t> W((size_t)C * C), kc((size_t)sh.n_ctx * C), vc((size_t)sh.n_ctx * C);
        std::vector<float> q((size_t)C), bias((size_t)C), x((size_t)C);
        for (uint16_t& w : W) w = gpt2__f32_to_f16(0.05f * uniform());
        for (uint16_t& k : kc) k = gpt2__f32_to_f16(uniform());
        for (uint16_t& v : vc) v = gpt2__f32_to_f16(uniform());
        for (int i = 0; i < C; i++) {
            q[(size_t)i] = uniform();
            bias[(size_t)i] = 0.1f * uniform();
            x[(size_t)i] = 3.0f * uniform();
        }
        std::vector<void*> owned;
        const auto upload = [&](const void* host, size_t bytes) {
            void* d = nullptr;
            REQUIRE(cudaMalloc(&d, std::max<size_t>(bytes, 16)) == cudaSuccess);
            if (host) REQUIRE(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice) == cudaSuccess);
            else REQUIRE(cudaMemset(d, 0, bytes) == cudaSuccess);
            owned.push_back(d);
            return d;
        };
        const int pos = sh.pos;
        __half* d_W = (__half*)upload(W.data(), W.size() * 2);
        const __half* d_k = (const __half*)upload(kc.data(), kc.size() * 2);
        const __half* d_v = (const __half*)upload(vc.data(), vc.size() * 2);
        const float* d_q = (const float*)upload(q.data(), q.size() * 4);
        const float* d_bias = (const float*)upload(bias.data(), bias.size() * 4);
        float* d_x = (float*)upload(x.data(), x.size() * 4);
        float* d_x2 = (float*)upload(x.data(), x.size() * 4);
        const int* d_pos = (const int*)upload(&pos, 4);
        float* d_part = (float*)upload(nullptr, (size_t)H * n_splits * (D + 2) * 4);
        unsigned* d_tickets = (unsigned*)upload(nullptr, (size_t)H * 4);
        float* d_att = (float*)upload(nullptr, (size_t)C * 4);
        float* d_proj = (float*)upload(nullptr, (size_t)H * C * 4);
        unsigned* d_ticket = (unsigned*)upload(nullptr, 16);
        const float scale = 1.0f / std::sqrt((float)D);
        std::vector<float> want = x, att((size_t)C), got((size_t)C);
        for (int launch = 0; launch < 2; launch++) {
            const gpt2__attn_proj_args p{d_W, d_bias, d_x, d_proj, d_ticket};
            gpt2__attn_proj_decode_kernel<__half><<<dim3(H, n_splits), GPT2__ATTN_THREADS>>>(d_q, d_k, d_v, d_pos, d_part, d_tickets, d_att, C, D, n_splits, scale, p);
            REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
            REQUIRE(cudaMemcpy(att.data(), d_att, (size_t)C * 4, cudaMemcpyDeviceToHost) == cudaSuccess);
            REQUIRE(cudaMemcpy(got.data(), d_x, (size_t)C * 4, cudaMemcpyDeviceToHost) == cudaSuccess);
            fused_twin::attn_proj(W.data(), false, att.data(), bias.data(), C, H, want.data());
            int same = 0;
            for (int o = 0; o < C; o++) same += got[(size_t)o] == want[(size_t)o];
            MESSAGE("C " << C << " launch " << launch << ": " << same << " of " << C << " outputs bit for bit as the twin's");
            CHECK(same == C);
        }
        /* the two kernels it replaces, twice, from the same x */
        for (int launch = 0; launch < 2; launch++) {
            gpt2__attn_decode_kernel<__half><<<dim3(H, n_splits), GPT2__ATTN_THREADS>>>(d_q, d_k, d_v, d_pos, d_part, d_tickets, d_att, C, D, n_splits, scale);
            gpt2__gemv_args a{};
            a.W = d_W;
            a.N = C;
            a.K = C;
            a.in = d_att;
            a.bias = d_bias;
            a.out = d_x2;
            gpt2__gemv_kernel<__half, GPT2__EPI_RESIDUAL><<<(C + 7) / 8, 256, (size_t)C * 4>>>(a);
            REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
        }
        std::vector<float> unfused((size_t)C);
        REQUIRE(cudaMemcpy(unfused.data(), d_x2, (size_t)C * 4, cudaMemcpyDeviceToHost) == cudaSuccess);
        const float diff = max_abs_diff(got.data(), unfused.data(), (size_t)C);
        MESSAGE("C " << C << ": max |x difference| from attention then c_proj " << diff);
        CHECK(diff <= 1e-4f);
        for (void* d : owned) cudaFree(d);
    }
}

// With GPT2_CUDA_Q8 the one-token products of a q8_0 file read its 8-bit copy and quantize their
// input to int8 as the CPU's q8_0 tokens do: their logits against the CPU's one token at a time.
TEST_CASE("GPT2_CUDA_Q8: q8_0 tokens on 8-bit weights give the CPU's q8_0 one-token logits within 2e-2, and its greedy tokens") {
    REQUIRE_GPU();
    const OnBoth<Model> both(sc_as(GPT2_TYPE_Q8_0));
    const Model &cpu = both.cpu, &gpu = both.gpu;
    if (!gpt2__cuda_model_of(gpu.model)->q8_decode) {
        MESSAGE("built without GPT2_CUDA_Q8 (or the shape does not fit): nothing to check");
        return;
    }
    const int V = cpu.info().n_vocab;
    float worst = 0;
    for (const Json& prompt : reference()["prompts"].array) {
        std::vector<int32_t> ids = prompt["ids"].ints();
        if (quick()) ids.resize(std::min<size_t>(ids.size(), 8));
        Session c(cpu), g(gpu);
        for (size_t t = 0; t < ids.size(); t++) { /* one token at a time on both: int8 activations on both */
            REQUIRE(gpt2_session_eval(c.session, &ids[t], 1, nullptr) == GPT2_OK);
            REQUIRE(gpt2_session_eval(g.session, &ids[t], 1, nullptr) == GPT2_OK);
            worst = std::max(worst, max_abs_diff(gpt2_session_logits(g.session), gpt2_session_logits(c.session), (size_t)V));
        }
    }
    MESSAGE("q8_0 in 8 bits: max |logit difference| from the CPU's q8_0 tokens " << worst);
    CHECK(worst <= 2e-2f);
    const std::vector<int32_t> prompt = reference()["prompts"][0]["ids"].ints();
    std::vector<float> gaps;
    const int n = quick() ? 20 : 200;
    const std::vector<int32_t> want = greedy(cpu.model, prompt, n, &gaps);
    Session g(gpu);
    check_greedy_agrees(generate(g.session, prompt, n, 0.0f, 0, 0), want, gaps, 2e-2f);
}

// The session's state as bytes (gpt2_session_save) into a fresh session of `model`.
static void move_state(gpt2_session* from, gpt2_session* to) {
    size_t n = 0;
    gpt2_error err;
    REQUIRE_MESSAGE(gpt2_session_save(from, nullptr, 0, &n, &err) == GPT2_OK, err.message);
    std::vector<uint8_t> bytes(n);
    REQUIRE_MESSAGE(gpt2_session_save(from, bytes.data(), bytes.size(), &n, &err) == GPT2_OK, err.message);
    REQUIRE_MESSAGE(gpt2_session_load(to, bytes.data(), n, &err) == GPT2_OK, err.message);
    REQUIRE(gpt2_session_n_tokens(to) == gpt2_session_n_tokens(from));
    CHECK(std::equal(gpt2_session_tokens(to), gpt2_session_tokens(to) + gpt2_session_n_tokens(to), gpt2_session_tokens(from)));
}

// f32 weights become f16 on the GPU, bf16 stay bf16: the two cache types a GPU state holds.
TEST_CASE("states move between the GPU and the CPU both ways (f16 and bf16 caches), copy and truncate on the GPU: the next logits as the reference's") {
    REQUIRE_GPU();
    const std::vector<int32_t> all = reference()["prompts"][2]["ids"].ints();
    const std::vector<int32_t> prompt(all.begin(), all.begin() + 40), next(all.begin() + 40, all.begin() + 44);
    const struct {
        std::string path;
        float tolerance;
    } files[] = {{sc_path(), 2e-2f}, {sc_as(GPT2_TYPE_BF16), 5e-2f}};
    for (const auto& f : files) {
        CAPTURE(f.path);
        const OnBoth<Model> both(f.path);
        const Model &cpu = both.cpu, &gpu = both.gpu;
        const int V = cpu.info().n_vocab;
        std::vector<int32_t> whole = prompt;
        whole.insert(whole.end(), next.begin(), next.end());
        const std::vector<float> want = reference_logits(cpu.model, whole);
        const float* after_prompt = &want[(prompt.size() - 1) * V];
        const float* after_next = &want[(whole.size() - 1) * V];
        const auto continue_and_check = [&](gpt2_session* s, const std::string& what) {
            CAPTURE(what);
            CHECK(max_abs_diff(gpt2_session_logits(s), after_prompt, (size_t)V) <= f.tolerance);
            REQUIRE(gpt2_session_eval(s, next.data(), next.size(), nullptr) == GPT2_OK);
            const float diff = max_abs_diff(gpt2_session_logits(s), after_next, (size_t)V);
            MESSAGE(what << ": max |logit difference| after 4 more tokens " << diff);
            CHECK(diff <= f.tolerance);
        };
        Session g(gpu), c(cpu);
        REQUIRE(gpt2_session_eval(g.session, prompt.data(), prompt.size(), nullptr) == GPT2_OK);
        move_state(g.session, c.session);
        CHECK(max_abs_diff(gpt2_session_logits(c.session), gpt2_session_logits(g.session), (size_t)V) == 0.0f);
        continue_and_check(c.session, "GPU state loaded on the CPU");
        Session c2(cpu), g2(gpu);
        REQUIRE(gpt2_session_eval(c2.session, prompt.data(), prompt.size(), nullptr) == GPT2_OK);
        move_state(c2.session, g2.session);
        CHECK(max_abs_diff(gpt2_session_logits(g2.session), gpt2_session_logits(c2.session), (size_t)V) == 0.0f);
        continue_and_check(g2.session, "CPU state loaded on the GPU");
        Session forked(gpu);
        gpt2_error err;
        REQUIRE_MESSAGE(gpt2_session_copy(forked.session, g.session, &err) == GPT2_OK, err.message);
        continue_and_check(forked.session, "a GPU session's copy");
        REQUIRE(gpt2_session_eval(g.session, next.data(), next.size(), nullptr) == GPT2_OK);
        REQUIRE_MESSAGE(gpt2_session_truncate(g.session, prompt.size(), &err) == GPT2_OK, err.message);
        CHECK(gpt2_session_n_tokens(g.session) == prompt.size());
        continue_and_check(g.session, "a GPU session truncated back to the prompt");
    }
}

// A chat continuation appends several tokens onto a cache that holds some; a session whose
// context fills up under GPT2_CONTEXT_DISCARD recomputes what it keeps. After each call, the
// logits are the reference's for the tokens the session then holds.
TEST_CASE("several tokens onto a non-empty GPU cache, and a discarding context's recompute: the reference's logits after each call") {
    REQUIRE_GPU();
    const OnBoth<Model> both(sc_path());
    const Model &cpu = both.cpu, &gpu = both.gpu;
    const int V = cpu.info().n_vocab;
    const std::vector<int32_t> text = reference()["prompts"][2]["ids"].ints();
    const size_t chunks[] = {20, 13, 1, 5, 1, 1, 9, 7, 3};
    for (gpt2_context_policy policy : {GPT2_CONTEXT_EXACT, GPT2_CONTEXT_DISCARD}) {
        CAPTURE(policy);
        /* 32 positions: the 60 tokens overflow it; DISCARD keeps the first 4 and drops 8 at once */
        std::unique_ptr<Owned> s = session(gpu.model, 0, 0, 32, policy, policy == GPT2_CONTEXT_DISCARD ? 4 : 0);
        size_t at = 0;
        float worst = 0;
        for (size_t n : chunks) {
            REQUIRE(gpt2_session_eval(s->session, &text[at], n, nullptr) == GPT2_OK);
            at += n;
            const std::vector<int32_t> held(gpt2_session_tokens(s->session), gpt2_session_tokens(s->session) + gpt2_session_n_tokens(s->session));
            CHECK(held.back() == text[at - 1]);
            const std::vector<float> want = reference_logits(cpu.model, held);
            worst = std::max(worst, max_abs_diff(gpt2_session_logits(s->session), &want[(held.size() - 1) * V], (size_t)V));
        }
        MESSAGE(std::string(policy == GPT2_CONTEXT_EXACT ? "EXACT" : "DISCARD") << ": max |logit difference| " << worst);
        CHECK(worst <= 2e-2f);
    }
}

// OpenAI's largest GPT-2 has 25 heads of 64 in 1,600 columns and 6,400-wide MLP rows; two of its
// layers check those shapes (the weights are random; the layer count changes no kernel).
TEST_CASE("1558M-shaped layers (1,600 columns, 25 heads): logits within 2e-2 of the reference forward pass, greedy 50 tokens as on the CPU") {
    REQUIRE_GPU();
    const random_gpt2_shape shape{"1558M-layers", 2, 25, 1600, 1024, 50257};
    random_gguf file;
    REQUIRE(random_gpt2_gguf(shape, 1, 11, &file));
    const OnBoth<LoadedFile> both(file);
    const LoadedFile &cpu = both.cpu, &gpu = both.gpu;
    std::vector<int32_t> ids;
    for (int i = 0; i < 24; i++) ids.push_back((i * 104729 + 5) % 50257);
    const std::vector<float> want = reference_logits(cpu.model, ids);
    gpt2_session* g = nullptr;
    REQUIRE(gpt2_session_create(gpu.model, nullptr, &g, nullptr) == GPT2_OK);
    REQUIRE(gpt2_session_eval(g, ids.data(), 16, nullptr) == GPT2_OK);
    float worst = max_abs_diff(gpt2_session_logits(g), &want[15 * 50257], 50257);
    for (size_t t = 16; t < ids.size(); t++) {
        REQUIRE(gpt2_session_eval(g, &ids[t], 1, nullptr) == GPT2_OK);
        worst = std::max(worst, max_abs_diff(gpt2_session_logits(g), &want[t * 50257], 50257));
    }
    MESSAGE("max |logit difference|: " << worst);
    CHECK(worst <= 2e-2f);
    std::vector<float> gaps;
    const std::vector<int32_t> prompt(ids.begin(), ids.begin() + 16);
    const std::vector<int32_t> greedy_cpu = greedy(cpu.model, prompt, 50, &gaps);
    gpt2_session_reset(g);
    check_greedy_agrees(generate(g, prompt, 50, 0.0f, 0, 0), greedy_cpu, gaps, 2e-2f);
    gpt2_session_free(g);
}

// One generation as its callbacks saw it: the tokens and text on_token got, and for each step the
// logits on_logits got (after the penalties and biases, before temperature and top_k) or their
// top-2 gap.
struct Trace {
    std::vector<int32_t> tokens;
    std::string text;
    std::vector<float> gaps;
    std::vector<std::vector<float>> logits; /* only with keep_logits */
    bool keep_logits = false;
};
static int trace_token(void* user, int32_t token, const char* text, size_t len) {
    Trace* t = (Trace*)user;
    if (token >= 0) t->tokens.push_back(token);
    if (text) t->text.append(text, len);
    return 0;
}
static void trace_logits(void* user, float* logits, int n) {
    Trace* t = (Trace*)user;
    t->gaps.push_back(top2_gap(logits, n));
    if (t->keep_logits) t->logits.emplace_back(logits, logits + n);
}
static gpt2_generate_params traced(gpt2_generate_params p, Trace* t) {
    p.on_token = trace_token;
    p.on_logits = trace_logits;
    p.user = t;
    return p;
}
static Trace generate_traced(gpt2_session* s, const char* prompt, const gpt2_generate_params& p, bool keep_logits = false) {
    Trace t;
    t.keep_logits = keep_logits;
    const gpt2_generate_params with = traced(p, &t);
    gpt2_error err;
    REQUIRE_MESSAGE(gpt2_generate_text(s, prompt, &with, &err) == GPT2_OK, err.message);
    return t;
}

// The chain's options that are not the GPU sampler's (penalties, biases, top-p, stop strings,
// callbacks) make the GPU session hand its logits to the host's chain each step.
TEST_CASE("the host's sampling chain on GPU logits: penalties, biases and stop strings as on the CPU; top-p draws inside the nucleus") {
    REQUIRE_GPU();
    const OnBoth<Model> both(sc_path());
    const Model &cpu = both.cpu, &gpu = both.gpu;
    const int V = cpu.info().n_vocab;
    int32_t e = -1;
    size_t n_e = 0;
    REQUIRE(gpt2_tokenize(cpu.model, "e", 1, 0, &e, 1, &n_e, nullptr) == GPT2_OK);
    const gpt2_logit_bias bias[] = {{e, -1.5f}};
    gpt2_generate_params p = gpt2_generate_default_params();
    p.max_new_tokens = 150;
    p.temperature = 0.0f;
    p.repeat_penalty = 1.3f;
    p.repeat_last_n = 32;
    p.presence_penalty = 0.2f;
    p.frequency_penalty = 0.1f;
    p.logit_bias = bias;
    p.n_logit_bias = 1;
    {
        Session c(cpu), g(gpu);
        const Trace want = generate_traced(c.session, "ROMEO:", p), got = generate_traced(g.session, "ROMEO:", p);
        REQUIRE(want.tokens.size() == 150);
        check_greedy_agrees(got.tokens, want.tokens, want.gaps, 2e-2f);
        if (got.tokens == want.tokens) CHECK(got.text == want.text);
    }
    const char* stops[] = {"the", "\n\n"};
    p.stop = stops;
    p.n_stop = 2;
    p.max_new_tokens = 400;
    {
        Session c(cpu), g(gpu);
        const Trace want = generate_traced(c.session, "JULIET:", p), got = generate_traced(g.session, "JULIET:", p);
        MESSAGE("stopped after " << got.tokens.size() << " tokens: " << got.text);
        CHECK(got.tokens.size() < 400);
        CHECK(got.text.find("the") == std::string::npos);
        CHECK(got.text.find("\n\n") == std::string::npos);
        check_greedy_agrees(got.tokens, want.tokens, want.gaps, 2e-2f);
        if (got.tokens == want.tokens) CHECK(got.text == want.text);
    }
    gpt2_generate_params nucleus = gpt2_generate_default_params();
    nucleus.max_new_tokens = 120;
    nucleus.temperature = 0.9f;
    nucleus.top_k = 0;
    nucleus.top_p = 0.8f;
    nucleus.seed = 11;
    Session a(gpu), b(gpu);
    const Trace first = generate_traced(a.session, "KING:", nucleus, true), again = generate_traced(b.session, "KING:", nucleus);
    CHECK(first.tokens == again.tokens);
    REQUIRE(first.tokens.size() == first.logits.size());
    int outside = 0;
    for (size_t step = 0; step < first.tokens.size(); step++) {
        /* the nucleus of this step's logits at temperature 1: the fewest most likely tokens whose
           probabilities reach top_p (a little more, for rounding at its edge) */
        const std::vector<float>& l = first.logits[step];
        std::vector<int> order(V);
        for (int v = 0; v < V; v++) order[v] = v;
        std::sort(order.begin(), order.end(), [&](int x, int y) { return l[x] > l[y]; });
        double total = 0;
        for (int v = 0; v < V; v++) total += std::exp((double)l[v] - l[order[0]]);
        double sum = 0;
        bool inside = false;
        for (int k = 0; k < V && sum < nucleus.top_p + 1e-4; k++) {
            sum += std::exp((double)l[order[k]] - l[order[0]]) / total;
            inside |= order[k] == first.tokens[step];
        }
        outside += !inside;
    }
    MESSAGE(outside << " of " << first.tokens.size() << " top-p draws outside the nucleus");
    CHECK(outside == 0);
}

static int count_down(void* user) { return --*(int*)user < 0; }

TEST_CASE("abort during a GPU generation or prompt: the session as before the call, and it goes on as one never aborted") {
    REQUIRE_GPU();
    Model gpu(sc_path(), cuda_params());
    REQUIRE(gpu.model);
    const int V = gpu.info().n_vocab;
    int polls_left = 1 << 30;
    gpt2_session_params sp = gpt2_session_default_params();
    sp.abort_fn = count_down;
    sp.abort_user = &polls_left;
    gpt2_session* s = nullptr;
    REQUIRE(gpt2_session_create(gpu.model, &sp, &s, nullptr) == GPT2_OK);
    const std::unique_ptr<gpt2_session, void (*)(gpt2_session*)> owner(s, gpt2_session_free);
    const std::vector<int32_t> prompt = reference()["prompts"][0]["ids"].ints(), long_prompt = reference()["prompts"][2]["ids"].ints();
    REQUIRE(gpt2_session_eval(s, prompt.data(), prompt.size(), nullptr) == GPT2_OK);
    const std::vector<float> before(gpt2_session_logits(s), gpt2_session_logits(s) + V);
    const auto unchanged = [&] {
        REQUIRE(gpt2_session_n_tokens(s) == prompt.size());
        CHECK(std::equal(prompt.begin(), prompt.end(), gpt2_session_tokens(s)));
        CHECK(max_abs_diff(gpt2_session_logits(s), before.data(), (size_t)V) == 0.0f);
    };
    /* polled between layers (6 here): in the first token's pass, or several tokens in */
    for (int polls : {0, 3, 40, 200}) {
        CAPTURE(polls);
        polls_left = polls;
        gpt2_result r = GPT2_OK;
        generate(s, {}, 300, 0.0f, 0, 0, &r);
        CHECK(r == GPT2_ERROR_ABORTED);
        unchanged();
    }
    /* the GPU polls once before each pass (a prompt is one pass), the CPU between its layers */
    polls_left = 0;
    gpt2_error err;
    CHECK(gpt2_session_eval(s, long_prompt.data(), long_prompt.size(), &err) == GPT2_ERROR_ABORTED);
    unchanged();
    polls_left = 1 << 30;
    Session fresh(gpu);
    REQUIRE(gpt2_session_eval(fresh.session, prompt.data(), prompt.size(), nullptr) == GPT2_OK);
    CHECK(generate(s, {}, 100, 0.0f, 0, 0) == generate(fresh.session, {}, 100, 0.0f, 0, 0));
}

// gpt2_generate_batch runs GPU sessions one after another in the shipped build and in one pass
// with GPT2_CUDA_BATCH, whose 16-bit activations may turn a near-tie: there the greedy sessions
// agree to the tie and the sampled one is not compared.
TEST_CASE("gpt2_generate_batch on the GPU: each session's tokens and text as gpt2_generate_text gives it alone") {
    REQUIRE_GPU();
    say_which_batch();
    Model gpu(sc_path(), cuda_params());
    REQUIRE(gpu.model);
    const bool one_pass = gpt2__cuda_backend.run_batch != nullptr;
    const char* prompts[] = {"ROMEO:", "JULIET:\nO", "First Citizen:\n", "KING"};
    const char* stops[] = {"\n"};
    std::vector<gpt2_generate_params> params(4, gpt2_generate_default_params());
    params[0].temperature = 0.0f;
    params[0].max_new_tokens = 80;
    params[1].temperature = 0.0f;
    params[1].max_new_tokens = 120;
    params[1].stop = stops;
    params[1].n_stop = 1;
    params[2].temperature = 0.8f;
    params[2].top_k = 40;
    params[2].seed = 3;
    params[2].max_new_tokens = 100;
    params[3].temperature = 0.0f;
    params[3].max_new_tokens = 30;
    params[3].repeat_penalty = 1.2f;
    std::vector<Trace> alone(4), together(4);
    std::vector<std::unique_ptr<Owned>> owned;
    std::vector<gpt2_session*> sessions;
    std::vector<gpt2_generate_params> with(4);
    for (size_t i = 0; i < 4; i++) {
        Session s(gpu);
        alone[i] = generate_traced(s.session, prompts[i], params[i]);
        owned.push_back(session(gpu.model, 0, 0));
        sessions.push_back(owned.back()->session);
        with[i] = traced(params[i], &together[i]);
    }
    gpt2_error err;
    REQUIRE_MESSAGE(gpt2_generate_batch(sessions.data(), prompts, with.data(), 4, &err) == GPT2_OK, err.message);
    for (size_t i = 0; i < 4; i++) {
        CAPTURE(i);
        if (!one_pass) {
            CHECK(together[i].tokens == alone[i].tokens);
            CHECK(together[i].text == alone[i].text);
        } else if (params[i].temperature == 0.0f) {
            check_greedy_agrees(together[i].tokens, alone[i].tokens, alone[i].gaps, 4e-2f);
        }
    }
}
