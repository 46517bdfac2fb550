// Shared helpers of the tests: paths, owning wrappers, and comparisons.
#pragma once
#include "gpt2.h"
#include "json.h"
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

inline std::string test_data(const std::string& name) { return std::string(GPT2_TEST_DATA) + "/" + name; }
inline std::string test_model(const std::string& name) { return std::string(GPT2_TEST_OUT) + "/" + name; }

// Whether the suite runs under an emulator (tools/cross_test.sh sets GPT2_TEST_EMULATED=1 under
// qemu), where code runs 30-60 times slower: the heaviest instruction-set cases then take less
// text, and leave the scalar set, the same C++ as on the host, to the native run.
inline bool emulated() {
    const char* value = std::getenv("GPT2_TEST_EMULATED");
    return value && std::strcmp(value, "1") == 0;
}

struct Model {
    gpt2_model* model = nullptr;
    gpt2_error err{};
    explicit Model(const std::string& path, gpt2_model_params params = gpt2_model_default_params()) {
        gpt2_model_load_file(path.c_str(), &params, &model, &err);
    }
    ~Model() { gpt2_model_free(model); }
    Model(const Model&) = delete;
    Model& operator=(const Model&) = delete;
    gpt2_model_info info() const { return gpt2_model_get_info(model); }
};

// The test models the grammar, schema and choice cases share, each loaded once: nanoGPT's
// character vocabulary (shakespeare_char) and GPT-2's BPE one (a small padded GPT-2).
inline const Model& char_model() {
    static Model m(test_model("shakespeare_char.gguf"));
    return m;
}
inline const Model& bpe_model() {
    static Model m(test_model("padded_gpt2.gguf"));
    return m;
}

// Loads a model from bytes (kept alive as long as the model, as gpt2_model_load_memory requires).
struct Loaded {
    std::vector<uint8_t> bytes;
    gpt2_model* model = nullptr;
    gpt2_error err{};
    gpt2_result result = GPT2_OK;
    explicit Loaded(std::vector<uint8_t> b) : bytes(std::move(b)) {
        result = gpt2_model_load_memory(bytes.data(), bytes.size(), nullptr, &model, &err);
    }
    ~Loaded() { gpt2_model_free(model); }
    Loaded(const Loaded&) = delete;
    Loaded& operator=(const Loaded&) = delete;
};

struct Session {
    gpt2_session* session = nullptr;
    gpt2_error err{};
    explicit Session(const gpt2_model* model, int n_threads = 2, int n_ctx = 0, int kv_f16 = 0) {
        gpt2_session_params p = gpt2_session_default_params();
        p.n_threads = n_threads;
        p.n_ctx = n_ctx;
        p.kv_f16 = kv_f16;
        gpt2_session_create(model, &p, &session, &err);
    }
    explicit Session(const Model& m, int n_threads = 2, int n_ctx = 0, int kv_f16 = 0) : Session(m.model, n_threads, n_ctx, kv_f16) {}
    ~Session() { gpt2_session_free(session); }
    Session(const Session&) = delete;
    Session& operator=(const Session&) = delete;
};

inline bool has(const gpt2_error& e, const char* text) { return std::strstr(e.message, text) != nullptr; }

// Checks the code and that the message contains `text`, in a doctest test (the message is shown
// when either fails). `e` is evaluated once: INFO evaluates lazily, and a load_error() inside it
// asserted while doctest's reporter held its lock (a deadlock under -s).
#define CHECK_ERROR(e, expected_code, text)                                                   \
    do {                                                                                      \
        const gpt2_error checked_error = (e);                                                 \
        INFO("message: " << checked_error.message);                                           \
        CHECK(checked_error.code == (expected_code));                                         \
        CHECK(has(checked_error, (text)));                                                    \
    } while (0)

inline float max_abs_diff(const float* a, const float* b, size_t n) {
    float worst = 0;
    for (size_t i = 0; i < n; i++) worst = std::max(worst, std::fabs(a[i] - b[i]));
    return worst;
}

// Generates n tokens after `prompt`; returns the new ids.
inline std::vector<int32_t> generate(gpt2_session* s, const std::vector<int32_t>& prompt, int n, float temperature, int top_k, uint64_t seed,
                                     gpt2_result* result = nullptr) {
    gpt2_generate_params p = gpt2_generate_default_params();
    p.max_new_tokens = n;
    p.temperature = temperature;
    p.top_k = top_k;
    p.seed = seed;
    std::vector<int32_t> out((size_t)n);
    size_t produced = 0;
    gpt2_error err;
    gpt2_result r = gpt2_generate(s, prompt.data(), prompt.size(), &p, out.data(), out.size(), &produced, &err);
    if (result) *result = r;
    out.resize(produced);
    return out;
}

#if defined(GPT2_IMPLEMENTATION)
// Makes `session` run on `kernels` (one of gpt2__supported_kernels) instead of the set dispatch
// chose, for the files that hold a private copy of the implementation.
inline void use_kernels(gpt2_session* session, const gpt2__kernels* kernels) { static_cast<gpt2__cpu_session*>(session)->kernels = kernels; }

// The kernel sets a heavy case compares: every set this CPU runs (gpt2__supported_kernels), but
// under an emulator (emulated()) not the scalar set where another runs.
inline int kernel_sets_to_test(const gpt2__kernels* sets[gpt2__max_kernel_sets]) {
    int n = gpt2__supported_kernels(sets);
    if (!emulated() || n < 2) return n;
    int kept = 0;
    for (int i = 0; i < n; i++)
        if (std::strcmp(sets[i]->name, "scalar") != 0) sets[kept++] = sets[i];
    return kept;
}
#endif

#if defined(GPT2_IMPLEMENTATION) && defined(GPT2_REFERENCE_FORWARD)
// The reference's logits (T, V) of the T ids (src/cpu/forward_reference.h).
inline std::vector<float> reference_logits(const gpt2_model* m, const std::vector<int32_t>& ids) {
    std::vector<float> logits(ids.size() * (size_t)m->n_vocab);
    gpt2__forward_reference(m, ids.data(), (int)ids.size(), logits.data());
    return logits;
}

// The largest |got - want| of a row of logits, relative to the row's largest |logit| (at least 1).
inline float logit_error(const float* got, const float* want, int n) {
    float scale = 1.0f;
    for (int i = 0; i < n; i++) scale = std::max(scale, std::fabs(want[i]));
    return max_abs_diff(got, want, (size_t)n) / scale;
}
#endif
