// f16, bf16, q8_0 and q4_0 weights against the float32 model they are made from: the shakespeare_char
// fixture is converted at test time with the same code as gpt2-quantize. This file holds a
// private copy of the implementation to reach that converter and the reference forward pass.
#define GPT2_IMPLEMENTATION
#define GPT2_STATIC
#include "helpers.h"
#include "tools/gguf_write.h"
#include <doctest/doctest.h>
#include <fstream>
#include <sstream>

static std::string quantized_model(const char* type_name, uint32_t type) {
    const std::string in = test_model("shakespeare_char.gguf");
    const std::string out = test_model(std::string("shakespeare_char_") + type_name + ".gguf");
    std::string error;
    size_t bytes = 0;
    REQUIRE_MESSAGE(gguf_quantize_file(in.c_str(), out.c_str(), type, &bytes, &error), error);
    return out;
}

static const Json& reference() {
    static const Json ref = read_json(test_data("shakespeare_char/reference.json"));
    return ref;
}

// Each reference prompt's logits at every position, by `m`'s reference forward pass.
static std::vector<std::vector<float>> reference_of_prompts(const Model& m) {
    std::vector<std::vector<float>> logits;
    for (const Json& prompt : reference()["prompts"].array) {
        const std::vector<int32_t> ids = prompt["ids"].ints();
        logits.emplace_back(ids.size() * (size_t)m.info().n_vocab);
        gpt2__forward_reference(m.model, ids.data(), (int)ids.size(), logits.back().data());
    }
    return logits;
}

static int argmax(const float* v, int n) { return (int)(std::max_element(v, v + n) - v); }

// Mean cross-entropy (nats per character) of `ids`, each predicted from the ones before it in
// windows of n_ctx characters (the first of a window is not scored), one token per eval.
static double cross_entropy(const Model& m, const std::vector<int32_t>& ids) {
    const int n_ctx = m.info().n_ctx, n_vocab = m.info().n_vocab;
    Session s(m, 1);
    double sum = 0;
    int scored = 0;
    for (size_t i = 0; i < ids.size(); i++) {
        if (i % (size_t)n_ctx == 0) gpt2_session_reset(s.session);
        else {
            sum -= gpt2__log_prob(gpt2_session_logits(s.session), n_vocab, ids[i]);
            scored++;
        }
        REQUIRE(gpt2_session_eval(s.session, &ids[i], 1, nullptr) == GPT2_OK);
    }
    return sum / scored;
}

static std::vector<int32_t> validation_ids(const Model& m) {
    std::ifstream f(test_data("shakespeare_char/val_4k.txt"), std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    const std::string text = ss.str();
    size_t n = 0;
    REQUIRE(gpt2_tokenize(m.model, text.data(), text.size(), 0, nullptr, 0, &n, nullptr) == GPT2_OK);
    std::vector<int32_t> ids(n);
    REQUIRE(gpt2_tokenize(m.model, text.data(), text.size(), 0, ids.data(), n, &n, nullptr) == GPT2_OK);
    return ids;
}

// bf16 keeps 8 significant bits, so its weights alone move this model's logits (up to ~15) by
// about 3e-2, whatever the kernels do (they convert bf16 to float exactly): its bound is 5e-2.
// q4_0 keeps 16 levels per block of 32: measured 0.69 on x86-64 (every set), bound 1.
TEST_CASE("f16 weights give the float32 model's logits within 1e-2, bf16 within 5e-2, q4_0 within 1") {
    Model f32(test_model("shakespeare_char.gguf"));
    REQUIRE_MESSAGE(f32.model, f32.err.message);
    const int n_vocab = f32.info().n_vocab;
    const std::vector<std::vector<float>> want = reference_of_prompts(f32);
    const struct { const char* name; uint32_t type; float bound; } types[] = {{"f16", GPT2_TYPE_F16, 1e-2f}, {"bf16", GPT2_TYPE_BF16, 5e-2f}, {"q4_0", GPT2_TYPE_Q4_0, 1.0f}};
    for (const auto& t : types) {
        CAPTURE(std::string(t.name));
        Model q(quantized_model(t.name, t.type));
        REQUIRE_MESSAGE(q.model, q.err.message);
        CHECK(q.info().weight_type == (gpt2_type)t.type);
        float worst = 0;
        for (size_t p = 0; p < want.size(); p++) {
            const std::vector<int32_t> ids = reference()["prompts"][p]["ids"].ints();
            Session s(q);
            for (size_t i = 0; i < ids.size(); i++) { // every position, through the decode kernels
                REQUIRE(gpt2_session_eval(s.session, &ids[i], 1, nullptr) == GPT2_OK);
                worst = std::max(worst, max_abs_diff(gpt2_session_logits(s.session), &want[p][i * n_vocab], (size_t)n_vocab));
            }
            gpt2_session_reset(s.session); // and the whole prompt at once, through the prefill kernels
            REQUIRE(gpt2_session_eval(s.session, ids.data(), ids.size(), nullptr) == GPT2_OK);
            worst = std::max(worst, max_abs_diff(gpt2_session_logits(s.session), &want[p][(ids.size() - 1) * n_vocab], (size_t)n_vocab));
        }
        MESSAGE(std::string(t.name) << ": largest logit difference from f32 " << worst);
        CHECK(worst <= t.bound);
    }
}

// The share of teacher-forced steps at which the quantized model `type_name` picks the float32
// model's greedy token: 1000 steps, 300 under an emulator.
static double greedy_agreement(const char* type_name, uint32_t type) {
    Model f32(test_model("shakespeare_char.gguf"));
    REQUIRE(f32.model);
    Model q(quantized_model(type_name, type));
    REQUIRE_MESSAGE(q.model, q.err.message);
    const int n_ctx = f32.info().n_ctx, n_vocab = f32.info().n_vocab, n_steps = emulated() ? 300 : 1000;
    const std::vector<int32_t> text = validation_ids(f32);
    int agree = 0, steps = 0;
    // Windows of n_ctx: a few characters of real text, then the f32 model's greedy tokens fed to both.
    for (size_t start = 0; steps < n_steps; start += 97) {
        Session a(f32, 1), b(q, 1);
        std::vector<int32_t> prompt(text.begin() + (long)start, text.begin() + (long)start + 8);
        REQUIRE(gpt2_session_eval(a.session, prompt.data(), prompt.size(), nullptr) == GPT2_OK);
        REQUIRE(gpt2_session_eval(b.session, prompt.data(), prompt.size(), nullptr) == GPT2_OK);
        for (int i = (int)prompt.size(); i < n_ctx && steps < n_steps; i++, steps++) {
            const int32_t want = argmax(gpt2_session_logits(a.session), n_vocab);
            agree += argmax(gpt2_session_logits(b.session), n_vocab) == want;
            REQUIRE(gpt2_session_eval(a.session, &want, 1, nullptr) == GPT2_OK);
            REQUIRE(gpt2_session_eval(b.session, &want, 1, nullptr) == GPT2_OK);
        }
    }
    MESSAGE(std::string(type_name) << " agrees with f32 on " << agree << " of " << steps << " greedy steps");
    return (double)agree / steps;
}

TEST_CASE("q8_0 picks the float32 model's greedy token at >= 95% of teacher-forced steps") {
    CHECK(greedy_agreement("q8_0", GPT2_TYPE_Q8_0) >= 0.95);
}

TEST_CASE("q4_0 picks the float32 model's greedy token at >= 97% of teacher-forced steps") {
    CHECK(greedy_agreement("q4_0", GPT2_TYPE_Q4_0) >= 0.97); // measured 989 of 1000
}

// A program may hold the file mapped while gpt2-quantize rewrites it (CI's parallel tests did:
// rewritten in place, the mapping lost its bytes and the reader died of SIGBUS).
TEST_CASE("gpt2-quantize replaces its output whole: a model loaded from the old file keeps its logits, and a failed write names the file") {
    const std::string in = test_model("shakespeare_char.gguf"), out = test_model("shakespeare_char_replaced.gguf");
    std::string error;
    size_t bytes = 0;
    REQUIRE_MESSAGE(gguf_quantize_file(in.c_str(), out.c_str(), GPT2_TYPE_Q8_0, &bytes, &error), error);
    {
        Model mapped(out);
        REQUIRE_MESSAGE(mapped.model, mapped.err.message);
        const std::vector<int32_t> ids = reference()["prompts"][0]["ids"].ints();
        const auto logits = [&]() {
            Session s(mapped);
            REQUIRE(gpt2_session_eval(s.session, ids.data(), ids.size(), nullptr) == GPT2_OK);
            return std::vector<float>(gpt2_session_logits(s.session), gpt2_session_logits(s.session) + mapped.info().n_vocab);
        };
        const std::vector<float> before = logits();
        const bool replaced = gguf_quantize_file(in.c_str(), out.c_str(), GPT2_TYPE_F16, &bytes, &error); // in place, this truncated the mapped file
#if defined(_WIN32)
        // Windows refuses to replace a file that is mapped: the old one stays, and the error says so.
        CHECK_FALSE(replaced);
        CHECK_MESSAGE(error.find("shakespeare_char_replaced.gguf: cannot replace it with the new file") != std::string::npos, error);
#else
        CHECK_MESSAGE(replaced, error);
#endif
        CHECK(logits() == before);
    }
    REQUIRE_MESSAGE(gguf_quantize_file(in.c_str(), out.c_str(), GPT2_TYPE_F16, &bytes, &error), error); // unmapped now, on Windows too
    Model now(out);
    REQUIRE_MESSAGE(now.model, now.err.message);
    CHECK(now.info().weight_type == GPT2_TYPE_F16);

    const std::string unwritable = test_model("no such folder/model.gguf");
    CHECK_FALSE(gguf_quantize_file(in.c_str(), unwritable.c_str(), GPT2_TYPE_Q8_0, &bytes, &error));
    CHECK_MESSAGE(error.find("no such folder/model.gguf.") != std::string::npos, error); // the temporary file beside it
    CHECK(error.find("cannot open for writing") != std::string::npos);
}

TEST_CASE("gpt2-quantize writes llama.cpp's general.file_type of the new weight type, and f32 to f32 changes nothing") {
    const std::string in = test_model("shakespeare_char.gguf");
    const struct { const char* name; uint32_t type; int64_t file_type; } types[] = {
        {"f32", GPT2_TYPE_F32, 0}, {"f16", GPT2_TYPE_F16, 1}, {"q8_0", GPT2_TYPE_Q8_0, 7}, {"bf16", GPT2_TYPE_BF16, 32}, {"q4_0", GPT2_TYPE_Q4_0, 2}};
    for (const auto& t : types) {
        CAPTURE(std::string(t.name));
        const std::string out = test_model(std::string("shakespeare_char_file_type_") + t.name + ".gguf");
        std::string error;
        size_t bytes = 0;
        REQUIRE_MESSAGE(gguf_quantize_file(in.c_str(), out.c_str(), t.type, &bytes, &error), error);
        gpt2__file file;
        gpt2__gguf g;
        gpt2_error err;
        REQUIRE(gpt2__file_open(out.c_str(), true, &file, &err) == GPT2_OK);
        REQUIRE_MESSAGE(gpt2__gguf_parse(file.data, file.size, &g, &err) == GPT2_OK, err.message);
        int64_t file_type = -1;
        CHECK(gpt2__gguf_get_int(&g, "general.file_type", true, 0, 1 << 10, &file_type, &err) == GPT2_OK);
        CHECK(file_type == t.file_type);
        // q4_0: the tied head (token_embd.weight) in q8_0, as llama-quantize keeps it at more bits
        const uint32_t head_type = t.type == GPT2_TYPE_Q4_0 ? (uint32_t)GPT2_TYPE_Q8_0 : t.type;
        CHECK(gpt2__gguf_find_tensor(&g, "output.weight") == nullptr);
        CHECK(gpt2__gguf_find_tensor(&g, "token_embd.weight")->type == head_type);
        CHECK(gpt2__gguf_find_tensor(&g, "blk.0.ffn_up.weight")->type == t.type);
        gpt2__file_close(&file);
    }
    std::ifstream a(in, std::ios::binary), b(test_model("shakespeare_char_file_type_f32.gguf"), std::ios::binary);
    std::stringstream bytes_in, bytes_out;
    bytes_in << a.rdbuf();
    bytes_out << b.rdbuf();
    CHECK(bytes_in.str() == bytes_out.str());
}

TEST_CASE("cross-entropy on held-out Shakespeare stays within 1% of float32 for f16, bf16 and q8_0, 0.6% for q4_0") {
    Model f32(test_model("shakespeare_char.gguf"));
    REQUIRE(f32.model);
    const std::vector<int32_t> ids = validation_ids(f32);
    REQUIRE(ids.size() >= 4000);
    const double base = cross_entropy(f32, ids);
    MESSAGE("f32 cross-entropy " << base << " nats/char");
    const struct { const char* name; uint32_t type; double bound; } types[] = {
        {"f16", GPT2_TYPE_F16, 0.01}, {"bf16", GPT2_TYPE_BF16, 0.01}, {"q8_0", GPT2_TYPE_Q8_0, 0.01}, {"q4_0", GPT2_TYPE_Q4_0, 0.006}}; // q4_0 measured +0.29%
    for (const auto& t : types) {
        CAPTURE(std::string(t.name));
        Model q(quantized_model(t.name, t.type));
        REQUIRE(q.model);
        const double ce = cross_entropy(q, ids);
        MESSAGE(std::string(t.name) << " cross-entropy " << ce << " (" << 100.0 * (ce - base) / base << "% from f32)");
        CHECK(std::fabs(ce - base) <= t.bound * base);
    }
}

// The held-out text the prompt cases score: all of it, or under an emulator its first 1,024
// characters (16 windows of the model's 64).
static std::vector<int32_t> prompt_case_text(const Model& m) {
    std::vector<int32_t> ids = validation_ids(m);
    if (emulated()) ids.resize(std::min<size_t>(ids.size(), 1024));
    return ids;
}

// Mean cross-entropy as cross_entropy() defines it, each window of n_ctx characters scored from
// one pass (gpt2_score: the prefill kernels).
static double cross_entropy_of_prompts(const Model& m, const std::vector<int32_t>& ids, const gpt2__kernels* kernels) {
    const size_t n_ctx = (size_t)m.info().n_ctx;
    Session s(m, 2);
    use_kernels(s.session, kernels);
    double sum = 0;
    size_t scored = 0;
    for (size_t start = 0; start + 1 < ids.size(); start += n_ctx) {
        const size_t n = std::min(n_ctx, ids.size() - start);
        double logprob = 0;
        REQUIRE(gpt2_score(s.session, &ids[start], n, &logprob, nullptr) == GPT2_OK);
        sum -= logprob;
        scored += n - 1;
    }
    return sum / (double)scored;
}

// The prefix lengths of an n_ids-token prompt the prompt cases evaluate as one prompt each, from
// `first`: every one, or under an emulator those up to 24 tokens (every remainder of the
// kernels' row tiles, decode and prefill alike) and the whole prompt - the prefixes' cost grows
// with the square of the prompt's length.
static std::vector<size_t> prefix_lengths(size_t n_ids, size_t first) {
    std::vector<size_t> lengths;
    for (size_t n = first; n <= n_ids; n++)
        if (!emulated() || n <= 24 || n == n_ids) lengths.push_back(n);
    return lengths;
}

// The float32 model's cross-entropy through prompts over prompt_case_text, the base the prompt
// cases compare with: computed once (under an emulator a prompt case's largest part).
static double f32_prompt_cross_entropy(const Model& f32) {
    static const double base = cross_entropy_of_prompts(f32, prompt_case_text(f32), &gpt2__cpu_kernels());
    return base;
}

// Prompts on bf16 weights: where the kernel set has the bf16 unit (avx512_bf16; amx: its bf16 tiles) their products
// round the activations to bf16, as the weights are; the other sets multiply float panels. Every
// prefix of every prompt that prefills (4 or more tokens) as one prompt, measured on x86-64
// (Zen 5): the bf16 unit 0.024 from the bf16 model's reference forward pass and 0.038 from the
// float32 one's (float panels 9.3e-6 and 0.029: the weights' own rounding), the float32 model's
// greedy token at all 60 prefixes, cross-entropy through prompts +0.0011% from float32 (float
// panels +0.0026%). Bounds: 2x the logit differences, 4x the larger cross-entropy change.
TEST_CASE("bf16 prompts give the float32 model's logits within 0.08 and its cross-entropy within 0.01%, on the bf16 unit or float panels") {
    Model f32(test_model("shakespeare_char.gguf"));
    REQUIRE_MESSAGE(f32.model, f32.err.message);
    Model q(quantized_model("bf16", GPT2_TYPE_BF16));
    REQUIRE_MESSAGE(q.model, q.err.message);
    const int n_vocab = q.info().n_vocab;
    const std::vector<int32_t> text = prompt_case_text(f32);
    const double base = f32_prompt_cross_entropy(f32);
    const std::vector<std::vector<float>> want = reference_of_prompts(q), want_f32 = reference_of_prompts(f32); // each model's reference forward pass
    const gpt2__kernels* sets[gpt2__max_kernel_sets];
    const int n_sets = kernel_sets_to_test(sets);
    for (int k = 0; k < n_sets; k++) {
        CAPTURE(std::string(sets[k]->name));
        float from_reference = 0, from_f32 = 0;
        int prefixes = 0, same_greedy = 0;
        for (size_t i = 0; i < reference()["prompts"].array.size(); i++) {
            const std::vector<int32_t> ids = reference()["prompts"][i]["ids"].ints();
            Session s(q);
            use_kernels(s.session, sets[k]);
            for (size_t n : prefix_lengths(ids.size(), gpt2__decode_max_tokens + 1)) { // every prefix that prefills, as one prompt
                prefixes++;
                gpt2_session_reset(s.session);
                REQUIRE(gpt2_session_eval(s.session, ids.data(), n, nullptr) == GPT2_OK);
                const float* got = gpt2_session_logits(s.session);
                from_reference = std::max(from_reference, max_abs_diff(got, &want[i][(n - 1) * n_vocab], (size_t)n_vocab));
                from_f32 = std::max(from_f32, max_abs_diff(got, &want_f32[i][(n - 1) * n_vocab], (size_t)n_vocab));
                same_greedy += argmax(got, n_vocab) == argmax(&want_f32[i][(n - 1) * n_vocab], n_vocab);
            }
        }
        const double ce = cross_entropy_of_prompts(q, text, sets[k]);
        MESSAGE(std::string(sets[k]->name) << ": largest logit difference from the bf16 reference forward " << from_reference << ", from the f32 one " << from_f32 << "; f32's greedy token at "
                              << same_greedy << " of " << prefixes << " prefixes; cross-entropy " << ce << " (" << 100.0 * (ce - base) / base << "% from f32 " << base << ")");
        CHECK(from_reference <= 0.05f);
        CHECK(from_f32 <= 0.08f);
        CHECK(same_greedy == prefixes);
        CHECK(std::fabs(ce - base) <= 1e-4 * base);
    }
}

// The largest logit differences of every prefix of every prompt as one prefill on `type` weights,
// each kernel set, from the model's reference forward pass and from nanoGPT's float32 logits, and
// the cross-entropy through prompts, against the bounds given.
static void check_int8_prompts(const char* type_name, uint32_t type, float max_from_reference, float max_from_nanogpt, double max_ce_change) {
    Model f32(test_model("shakespeare_char.gguf"));
    REQUIRE_MESSAGE(f32.model, f32.err.message);
    Model q(quantized_model(type_name, type));
    REQUIRE_MESSAGE(q.model, q.err.message);
    const int n_vocab = q.info().n_vocab;
    const std::vector<int32_t> text = prompt_case_text(f32);
    const double base = f32_prompt_cross_entropy(f32);
    const std::vector<std::vector<float>> want = reference_of_prompts(q); // the quantized model's reference forward pass
    const gpt2__kernels* sets[gpt2__max_kernel_sets];
    const int n_sets = kernel_sets_to_test(sets);
    for (int k = 0; k < n_sets; k++) {
        CAPTURE(std::string(sets[k]->name));
        float from_reference = 0, from_nanogpt = 0;
        for (size_t i = 0; i < reference()["prompts"].array.size(); i++) {
            const Json& prompt = reference()["prompts"][i];
            const std::vector<int32_t> ids = prompt["ids"].ints();
            Session s(q);
            use_kernels(s.session, sets[k]);
            for (size_t n : prefix_lengths(ids.size(), 2)) { // every prefix as one prompt
                gpt2_session_reset(s.session);
                REQUIRE(gpt2_session_eval(s.session, ids.data(), n, nullptr) == GPT2_OK);
                const float* got = gpt2_session_logits(s.session);
                from_reference = std::max(from_reference, max_abs_diff(got, &want[i][(n - 1) * n_vocab], (size_t)n_vocab));
                const std::vector<float> nanogpt = n == ids.size() ? prompt["last_logits"].floats()
                                                   : prompt.has("all_logits") ? prompt["all_logits"][n - 1].floats() : std::vector<float>();
                if (!nanogpt.empty()) from_nanogpt = std::max(from_nanogpt, max_abs_diff(got, nanogpt.data(), (size_t)n_vocab));
            }
        }
        const double ce = cross_entropy_of_prompts(q, text, sets[k]);
        MESSAGE(std::string(sets[k]->name) << std::string(sets[k]->quantize_q8_packed ? " (int8 panels)" : " (float panels)") << ": largest logit difference from the " << std::string(type_name)
                                           << " reference forward " << from_reference << ", from nanoGPT " << from_nanogpt << "; cross-entropy " << ce << " ("
                                           << 100.0 * (ce - base) / base << "% from f32 " << base << ")");
        CHECK(from_reference <= max_from_reference);
        CHECK(from_nanogpt <= max_from_nanogpt);
        CHECK(std::fabs(ce - base) <= max_ce_change * base);
    }
}

// Prompts on q8_0 weights: where the kernel set has int8 panels (AVX-512) the activations are
// quantized to int8 per block of 32, as a decode step's are (and as ggml's q8_0 products do); the
// other sets multiply float panels. Every prefix of every prompt as one prefill, measured on
// x86-64: int8 panels 0.094 from the q8_0 model's reference forward pass and 0.097 from nanoGPT's
// float32 logits (float panels 0.029 and 0.049: the head's one token is int8 in every set);
// cross-entropy through prompts -0.0060% from float32 (float panels -0.0053%); on the first 1,024
// characters (under an emulator) +0.014%, avx2 and neon alike. Bounds: about 2x the logit
// differences, 3x the cross-entropy change on the whole text.
TEST_CASE("q8_0 prompts give the float32 model's logits within 0.2 and its cross-entropy within 0.02%, with int8 panels or float ones") {
    check_int8_prompts("q8_0", GPT2_TYPE_Q8_0, 0.2f, 0.2f, 2e-4);
}

// Prompts on q4_0 weights, as on q8_0 ones: int8 panels where the set has them, else float panels.
// Measured on x86-64 (Zen 5): int8 panels 0.18 from the q4_0 model's reference forward pass and
// 0.69 from nanoGPT's float32 logits (float panels 0.036 and 0.67: the 4-bit weights' own
// rounding dominates); cross-entropy through prompts +0.29% from float32 (float panels +0.26%).
// Bounds: about 2x each.
TEST_CASE("q4_0 prompts give the float32 model's logits within 1.4 and its cross-entropy within 0.6%, with int8 panels or float ones") {
    check_int8_prompts("q4_0", GPT2_TYPE_Q4_0, 0.35f, 1.4f, 6e-3);
}
