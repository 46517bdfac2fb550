// The sampler chain and stop strings: each control against a float64 reference written here,
// every control off gives nanoGPT's tokens as before, and the text on_token receives around
// stop strings and the end-of-text token.
//
// The chain tests call the internal gpt2__chain_filter, so this file compiles its own private
// (GPT2_STATIC) copy of the implementation, as tests/test_tokenizer.cpp does; it does not use
// tests/helpers.h, whose inline helpers call the public copy.
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
#include <tuple>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace {

struct TestModel {
    gpt2_model* model = nullptr;
    explicit TestModel(const char* name) {
        const std::string path = std::string(GPT2_TEST_OUT) + "/" + name;
        gpt2_model_load_file(path.c_str(), nullptr, &model, nullptr);
    }
    ~TestModel() { gpt2_model_free(model); }
    TestModel(const TestModel&) = delete;
    TestModel& operator=(const TestModel&) = delete;
    int n_vocab() const { return gpt2_model_get_info(model).n_vocab; }
};

struct TestSession {
    gpt2_session* session = nullptr;
    explicit TestSession(const TestModel& m) {
        gpt2_session_params p = gpt2_session_default_params();
        p.n_threads = 1;
        gpt2_session_create(m.model, &p, &session, nullptr);
    }
    ~TestSession() { gpt2_session_free(session); }
    TestSession(const TestSession&) = delete;
    TestSession& operator=(const TestSession&) = delete;
};

std::vector<int32_t> tokenize(const gpt2_model* m, const std::string& text) {
    size_t n = 0;
    REQUIRE(gpt2_tokenize(m, text.data(), text.size(), 0, nullptr, 0, &n, nullptr) == GPT2_OK);
    std::vector<int32_t> ids(n);
    REQUIRE(gpt2_tokenize(m, text.data(), text.size(), 0, ids.data(), n, &n, nullptr) == GPT2_OK);
    return ids;
}

std::string detokenize(const gpt2_model* m, const std::vector<int32_t>& ids) {
    size_t n = 0;
    REQUIRE(gpt2_detokenize(m, ids.data(), ids.size(), nullptr, 0, &n, nullptr) == GPT2_OK);
    std::string text(n, '\0');
    if (n) REQUIRE(gpt2_detokenize(m, ids.data(), ids.size(), &text[0], n, &n, nullptr) == GPT2_OK);
    return text;
}

// ---- The chain against a float64 reference -----------------------------------------------------

// What GENERATION in gpt2.h documents, in double: which tokens may be drawn and with what
// probability. Written from the description (and llama.cpp's formulas), not from the code.
struct Reference {
    std::vector<bool> kept;
    std::vector<double> prob;
};

std::vector<double> softmax_over(const std::vector<double>& l, const std::vector<bool>& kept, double temperature) {
    double max_l = -INFINITY;
    for (size_t i = 0; i < l.size(); i++)
        if (kept[i]) max_l = std::max(max_l, l[i]);
    std::vector<double> p(l.size(), 0.0);
    double sum = 0.0;
    for (size_t i = 0; i < l.size(); i++)
        if (kept[i]) sum += p[i] = std::exp((l[i] - max_l) / temperature);
    for (double& x : p) x /= sum;
    return p;
}

Reference reference_chain(const std::vector<float>& logits, const std::vector<int32_t>& context, const gpt2_generate_params& p) {
    const size_t n = logits.size();
    std::vector<double> l(logits.begin(), logits.end());
    for (size_t i = 0; i < p.n_logit_bias; i++) l[p.logit_bias[i].token] += p.logit_bias[i].bias;
    // penalties over the last repeat_last_n tokens of the context (0 = 64, -1 = all)
    size_t last_n = p.repeat_last_n == -1 ? context.size() : p.repeat_last_n == 0 ? 64 : (size_t)p.repeat_last_n;
    last_n = std::min(last_n, context.size());
    std::map<int32_t, int> count;
    for (size_t i = context.size() - last_n; i < context.size(); i++) count[context[i]]++;
    const double repeat = p.repeat_penalty == 0.0f ? 1.0 : p.repeat_penalty;
    for (const auto& [token, c] : count) {
        l[token] = l[token] <= 0 ? l[token] * repeat : l[token] / repeat;
        l[token] -= c * (double)p.frequency_penalty + (double)p.presence_penalty;
    }
    Reference r;
    r.kept.assign(n, false);
    for (size_t i = 0; i < n; i++) r.kept[i] = l[i] > -INFINITY;
    if (p.temperature == 0.0f || p.top_k == 1) { // greedy: the most likely token
        r.prob.assign(n, 0.0);
        const size_t best = std::max_element(l.begin(), l.end()) - l.begin();
        r.kept.assign(n, false);
        r.kept[best] = true;
        r.prob[best] = 1.0;
        return r;
    }
    if (p.top_k > 0 && (size_t)p.top_k < n) { // every token at least as likely as the k-th
        std::vector<double> sorted = l;
        std::sort(sorted.begin(), sorted.end(), std::greater<double>());
        for (size_t i = 0; i < n; i++) r.kept[i] = r.kept[i] && l[i] >= sorted[(size_t)p.top_k - 1];
    }
    if (p.top_p > 0.0f && p.top_p < 1.0f) { // most likely first until the mass reaches top_p, plus ties
        const std::vector<double> prob = softmax_over(l, r.kept, 1.0);
        std::vector<double> sorted;
        for (size_t i = 0; i < n; i++)
            if (r.kept[i]) sorted.push_back(prob[i]);
        std::sort(sorted.begin(), sorted.end(), std::greater<double>());
        double mass = 0.0, last = 0.0;
        for (double q : sorted) {
            mass += q;
            last = q;
            if (mass >= p.top_p) break;
        }
        for (size_t i = 0; i < n; i++) r.kept[i] = r.kept[i] && prob[i] >= last;
    }
    if (p.min_p > 0.0f) { // at least min_p times the most likely token's probability
        const std::vector<double> prob = softmax_over(l, r.kept, 1.0);
        const double best = *std::max_element(prob.begin(), prob.end());
        for (size_t i = 0; i < n; i++) r.kept[i] = r.kept[i] && prob[i] >= p.min_p * best;
    }
    r.prob = softmax_over(l, r.kept, p.temperature);
    return r;
}

// The chain of the library on a copy of `logits`; the probabilities its draw uses.
struct Filtered {
    std::vector<float> logits;
    std::vector<double> prob;
};

Filtered library_chain(const std::vector<float>& logits, const std::vector<int32_t>& context, const gpt2_generate_params& p) {
    const int n = (int)logits.size();
    Filtered f;
    f.logits = logits;
    std::vector<float> scratch((size_t)n);
    std::vector<int> counts((size_t)n, 0);
    gpt2_error err;
    REQUIRE(gpt2__chain_filter(f.logits.data(), n, p, context.data(), context.size(), nullptr, scratch.data(), counts.data(), &err) == GPT2_OK);
    CHECK(std::count(counts.begin(), counts.end(), 0) == n); // handed back as zeros
    std::vector<bool> finite((size_t)n);
    for (int i = 0; i < n; i++) finite[(size_t)i] = f.logits[(size_t)i] > -INFINITY;
    if (p.temperature == 0.0f || p.top_k == 1) {
        f.prob.assign((size_t)n, 0.0);
        f.prob[(size_t)gpt2__argmax(f.logits.data(), n)] = 1.0;
    } else {
        f.prob = softmax_over(std::vector<double>(f.logits.begin(), f.logits.end()), finite, p.temperature);
    }
    return f;
}

// Random logits (both signs) and a context of 100 tokens that repeat, over the first 12 ids.
struct Case {
    std::vector<float> logits;
    std::vector<int32_t> context;
};

Case random_case(uint32_t seed, int n = 48, float spread = 2.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, spread);
    std::uniform_int_distribution<int32_t> recent(0, 11);
    Case c;
    for (int i = 0; i < n; i++) c.logits.push_back(normal(rng));
    for (int i = 0; i < 100; i++) c.context.push_back(recent(rng));
    return c;
}

gpt2_generate_params temperature_one() {
    gpt2_generate_params p = gpt2_generate_default_params();
    p.temperature = 1.0f;
    p.top_k = 0;
    return p;
}

// The kept set is the reference's exactly; the probabilities agree to float rounding.
void check_against_reference(const gpt2_generate_params& p, int n_cases = 40) {
    for (uint32_t seed = 1; seed <= (uint32_t)n_cases; seed++) {
        CAPTURE(seed);
        const Case c = random_case(seed);
        const Reference want = reference_chain(c.logits, c.context, p);
        const Filtered got = library_chain(c.logits, c.context, p);
        size_t kept = 0, wrong_set = 0;
        double worst = 0.0;
        for (size_t i = 0; i < c.logits.size(); i++) {
            kept += want.kept[i];
            wrong_set += want.kept[i] != (got.prob[i] > 0.0);
            worst = std::max(worst, std::fabs(want.prob[i] - got.prob[i]));
        }
        CHECK(wrong_set == 0);
        CHECK(worst < 1e-6);
        CHECK(kept >= 1);
    }
}

} // namespace

TEST_CASE("the k-th largest logit (top_k's threshold) is nth_element's, with ties and -INFINITY among them") {
    std::mt19937 rng(4242);
    int checked = 0;
    for (int n : {2, 3, 17, 1000, 50257}) {
        for (int levels : {3, 50, 1 << 20}) { // few distinct values: many ties at the k-th
            std::uniform_int_distribution<int> level(0, levels - 1);
            std::vector<float> x((size_t)n);
            for (float& v : x) v = level(rng) == 0 ? -INFINITY : (float)level(rng) * 0.25f - 3.0f;
            for (int k : {1, 2, n / 2, 200, n - 1}) {
                if (k < 1 || k >= n) continue;
                CAPTURE(n); CAPTURE(levels); CAPTURE(k);
                std::vector<float> sorted = x, heap((size_t)k);
                std::nth_element(sorted.begin(), sorted.begin() + (k - 1), sorted.end(), std::greater<float>());
                const float got = gpt2__kth_largest(x.data(), n, k, heap.data());
                CHECK(std::memcmp(&got, &sorted[(size_t)k - 1], sizeof(float)) == 0);
                checked++;
            }
        }
    }
    CHECK(checked == 63);
}

TEST_CASE("top_p keeps the fewest most likely tokens whose probability reaches top_p, and their ties") {
    for (float top_p : {0.1f, 0.5f, 0.9f, 0.99f}) {
        CAPTURE(top_p);
        gpt2_generate_params p = temperature_one();
        p.top_p = top_p;
        check_against_reference(p);
    }
}

TEST_CASE("min_p drops tokens less than min_p times as likely as the most likely") {
    for (float min_p : {0.01f, 0.2f, 0.7f, 1.0f}) {
        CAPTURE(min_p);
        gpt2_generate_params p = temperature_one();
        p.min_p = min_p;
        check_against_reference(p);
    }
}

TEST_CASE("repeat_penalty divides positive logits and multiplies negative ones of the last repeat_last_n tokens") {
    for (float repeat : {1.3f, 0.8f, 3.0f})
        for (int last_n : {0, 5, 80, -1}) { // 0 = 64 of the 100 tokens of context, -1 = all 100
            CAPTURE(repeat);
            CAPTURE(last_n);
            gpt2_generate_params p = temperature_one();
            p.repeat_penalty = repeat;
            p.repeat_last_n = last_n;
            check_against_reference(p, 10);
        }
}

TEST_CASE("presence_penalty subtracts once per distinct token, frequency_penalty once per occurrence") {
    for (float presence : {0.0f, 0.7f, -0.5f})
        for (float frequency : {0.0f, 0.3f, -0.2f}) {
            CAPTURE(presence);
            CAPTURE(frequency);
            gpt2_generate_params p = temperature_one();
            p.presence_penalty = presence;
            p.frequency_penalty = frequency;
            p.repeat_last_n = 30;
            check_against_reference(p, 10);
        }
}

TEST_CASE("logit_bias adds to the logits, twice for a token listed twice, and -INFINITY removes the token") {
    const gpt2_logit_bias bias[] = {{3, 2.5f}, {7, -INFINITY}, {3, 1.0f}, {20, -4.0f}, {40, 6.0f}};
    gpt2_generate_params p = temperature_one();
    p.logit_bias = bias;
    p.n_logit_bias = 5;
    check_against_reference(p);
    const Case c = random_case(1);
    CHECK(library_chain(c.logits, c.context, p).prob[7] == 0.0);
}

TEST_CASE("the chain's order: logit_bias, penalties, top_k, top_p, min_p, temperature") {
    // Each pair of neighbours gives another result when swapped: bias then penalty on the same
    // token, top_p over what top_k kept, min_p after both, the temperature last.
    const gpt2_logit_bias bias[] = {{2, 1.5f}, {5, -1.5f}, {9, 3.0f}, {30, -INFINITY}};
    gpt2_generate_params p = gpt2_generate_default_params();
    p.temperature = 0.7f;
    p.top_k = 20;
    p.top_p = 0.8f;
    p.min_p = 0.05f;
    p.repeat_penalty = 1.4f;
    p.repeat_last_n = 40;
    p.presence_penalty = 0.3f;
    p.frequency_penalty = 0.1f;
    p.logit_bias = bias;
    p.n_logit_bias = 4;
    check_against_reference(p);
    p.temperature = 1.6f;
    check_against_reference(p);
}

TEST_CASE("greedy decoding with controls picks the most likely token after bias and penalties") {
    const gpt2_logit_bias bias[] = {{1, 0.75f}, {4, -2.0f}};
    gpt2_generate_params p = gpt2_generate_default_params();
    p.temperature = 0.0f;
    p.top_p = 0.3f;
    p.min_p = 0.5f;
    p.repeat_penalty = 2.0f;
    p.logit_bias = bias;
    p.n_logit_bias = 2;
    check_against_reference(p);
    p.temperature = 1.0f;
    p.top_k = 1;
    check_against_reference(p);
}

TEST_CASE("the chain's draws follow the reference probabilities") {
    const gpt2_logit_bias bias[] = {{0, 1.0f}, {6, -INFINITY}};
    gpt2_generate_params p = gpt2_generate_default_params();
    p.temperature = 1.3f;
    p.top_k = 25;
    p.top_p = 0.95f;
    p.min_p = 0.02f;
    p.repeat_penalty = 1.2f;
    p.presence_penalty = 0.2f;
    p.logit_bias = bias;
    p.n_logit_bias = 2;
    const Case c = random_case(7, 16, 0.7f);
    const Reference want = reference_chain(c.logits, c.context, p);
    const Filtered f = library_chain(c.logits, c.context, p);
    const int draws = 200000;
    std::vector<int> seen(c.logits.size(), 0);
    std::vector<float> scratch(c.logits.size());
    uint64_t rng = 42;
    for (int i = 0; i < draws; i++) seen[(size_t)gpt2__chain_draw(f.logits.data(), (int)c.logits.size(), p, &rng, scratch.data())]++;
    size_t possible = 0;
    for (size_t i = 0; i < c.logits.size(); i++) {
        CAPTURE(i);
        const double q = want.prob[i], freq = (double)seen[i] / draws;
        possible += q > 0;
        if (q == 0.0) CHECK(seen[i] == 0);
        else CHECK(std::fabs(freq - q) <= 5.0 * std::sqrt(q * (1 - q) / draws) + 1e-9);
    }
    CHECK(possible >= 3); // a real draw, not a forced one
}

TEST_CASE("the penalties window is the last tokens of the context, the prompt included") {
    // A huge presence penalty over the whole context and greedy decoding: no token may repeat,
    // neither one of the prompt nor one generated before, while the vocabulary lasts.
    TestModel m("shakespeare_char.gguf");
    REQUIRE(m.model);
    TestSession s(m);
    const std::vector<int32_t> prompt = tokenize(m.model, "ROMEO:");
    gpt2_generate_params p = gpt2_generate_default_params();
    p.max_new_tokens = 40;
    p.temperature = 0.0f;
    p.presence_penalty = 1e6f;
    p.repeat_last_n = -1;
    std::vector<int32_t> out(40);
    size_t n = 0;
    REQUIRE(gpt2_generate(s.session, prompt.data(), prompt.size(), &p, out.data(), out.size(), &n, nullptr) == GPT2_OK);
    std::vector<int32_t> all = prompt;
    all.insert(all.end(), out.begin(), out.begin() + (ptrdiff_t)n);
    std::sort(all.begin(), all.end());
    const std::vector<int32_t> distinct(all.begin(), std::unique(all.begin(), all.end()));
    CHECK(distinct.size() == 6 - 1 + 40); // "ROMEO:" repeats only its own O
}

// ---- Every control off: nanoGPT's tokens, as before ---------------------------------------------

namespace {

// The old way, one step at a time: gpt2_sample on the session's logits, then eval the token.
std::vector<int32_t> sample_by_hand(const TestModel& m, gpt2_session* s, const std::vector<int32_t>& prompt, int n, float temperature, int top_k,
                                    uint64_t seed) {
    gpt2_session_reset(s);
    REQUIRE(gpt2_session_eval(s, prompt.data(), prompt.size(), nullptr) == GPT2_OK);
    std::vector<int32_t> out;
    uint64_t rng = seed;
    for (int i = 0; i < n; i++) {
        int32_t token;
        REQUIRE(gpt2_sample(gpt2_session_logits(s), m.n_vocab(), temperature, top_k, &rng, &token, nullptr) == GPT2_OK);
        out.push_back(token);
        REQUIRE(gpt2_session_eval(s, &token, 1, nullptr) == GPT2_OK);
    }
    return out;
}

std::vector<int32_t> generate(gpt2_session* s, const std::vector<int32_t>& prompt, gpt2_generate_params p) {
    gpt2_session_reset(s);
    std::vector<int32_t> out((size_t)p.max_new_tokens);
    size_t n = 0;
    gpt2_error err;
    REQUIRE_MESSAGE(gpt2_generate(s, prompt.data(), prompt.size(), &p, out.data(), out.size(), &n, &err) == GPT2_OK, err.message);
    out.resize(n);
    return out;
}

void leave_alone(void*, float*, int) {}

} // namespace

TEST_CASE("with every added control off, or set to its neutral value, the tokens are exactly gpt2_sample's") {
    TestModel m("shakespeare_char.gguf");
    REQUIRE(m.model);
    TestSession s(m);
    const std::vector<int32_t> prompt = tokenize(m.model, "KING:");
    struct Sampling {
        float temperature;
        int top_k;
    };
    for (Sampling sampling : {Sampling{0.8f, 200}, Sampling{1.3f, 5}, Sampling{1.0f, 0}, Sampling{0.0f, 0}})
        for (uint64_t seed = 0; seed < 12; seed++) {
            CAPTURE(sampling.temperature);
            CAPTURE(sampling.top_k);
            CAPTURE(seed);
            const std::vector<int32_t> want = sample_by_hand(m, s.session, prompt, 30, sampling.temperature, sampling.top_k, seed);
            gpt2_generate_params p = gpt2_generate_default_params();
            p.max_new_tokens = 30;
            p.temperature = sampling.temperature;
            p.top_k = sampling.top_k;
            p.seed = seed;
            CHECK(generate(s.session, prompt, p) == want); // the backend's own sampler
            p.top_p = 1.0f;                                // neutral values: still off
            p.repeat_penalty = 1.0f;
            p.repeat_last_n = 10;
            CHECK(generate(s.session, prompt, p) == want);
            p.on_logits = leave_alone; // the chain on the host, changing nothing
            CHECK(generate(s.session, prompt, p) == want);
        }
}

// ---- Bans and the logits hook -------------------------------------------------------------------

TEST_CASE("a token banned with logit_bias -INFINITY is never sampled") {
    TestModel m("shakespeare_char.gguf");
    REQUIRE(m.model);
    TestSession s(m);
    const std::vector<int32_t> prompt = tokenize(m.model, "ROMEO:");
    gpt2_generate_params p = gpt2_generate_default_params();
    p.max_new_tokens = 300;
    p.temperature = 1.5f;
    p.top_k = 0;
    const std::vector<int32_t> free_run = generate(s.session, prompt, p);
    std::map<int32_t, int> uses;
    for (int32_t t : free_run) uses[t]++;
    std::vector<std::pair<int, int32_t>> by_use;
    for (const auto& [t, n] : uses) by_use.emplace_back(n, t);
    std::sort(by_use.rbegin(), by_use.rend());
    std::vector<gpt2_logit_bias> bans;
    for (size_t i = 0; i < 8 && i < by_use.size(); i++) bans.push_back({by_use[i].second, -INFINITY}); // the most used
    p.logit_bias = bans.data();
    p.n_logit_bias = bans.size();
    for (float temperature : {1.5f, 0.0f}) {
        p.temperature = temperature;
        const std::vector<int32_t> banned_run = generate(s.session, prompt, p);
        REQUIRE(banned_run.size() == 300);
        for (const gpt2_logit_bias& b : bans) CHECK(std::count(banned_run.begin(), banned_run.end(), b.token) == 0);
    }
}

namespace {

struct Hook {
    gpt2_session* session = nullptr;
    int32_t only = 0;
    int calls = 0;
    bool saw_session_logits = true;
    std::vector<gpt2_logit_bias> bias;
};

// Checks that it gets the session's logits plus the biases, then leaves one token possible.
void only_one_token(void* user, float* logits, int n) {
    Hook* h = (Hook*)user;
    h->calls++;
    std::vector<float> want(gpt2_session_logits(h->session), gpt2_session_logits(h->session) + n);
    for (const gpt2_logit_bias& b : h->bias) want[(size_t)b.token] += b.bias;
    h->saw_session_logits = h->saw_session_logits && std::equal(want.begin(), want.end(), logits);
    for (int i = 0; i < n; i++)
        if (i != h->only) logits[i] = -INFINITY;
}

void ban_everything(void*, float* logits, int n) { std::fill(logits, logits + n, -INFINITY); }
void write_nan(void*, float* logits, int) { logits[3] = NAN; }

} // namespace

TEST_CASE("on_logits sees the biased logits of the session and its edits decide the token") {
    TestModel m("shakespeare_char.gguf");
    REQUIRE(m.model);
    TestSession s(m);
    const std::vector<int32_t> prompt = tokenize(m.model, "ROMEO:");
    const int32_t z = tokenize(m.model, "z")[0];
    Hook hook;
    hook.session = s.session;
    hook.only = z;
    hook.bias = {{5, 2.0f}, {z, -1.0f}};
    gpt2_generate_params p = gpt2_generate_default_params();
    p.max_new_tokens = 25;
    p.temperature = 1.0f;
    p.top_k = 0;
    p.logit_bias = hook.bias.data();
    p.n_logit_bias = hook.bias.size();
    p.on_logits = only_one_token;
    p.user = &hook;
    const std::vector<int32_t> out = generate(s.session, prompt, p);
    CHECK(out == std::vector<int32_t>(25, z));
    CHECK(hook.calls == 25);
    CHECK(hook.saw_session_logits);

    gpt2_error err{};
    p.on_logits = ban_everything;
    CHECK(gpt2_generate(s.session, prompt.data(), prompt.size(), &p, nullptr, 0, nullptr, &err) == GPT2_ERROR_INVALID_ARGUMENT);
    CHECK(std::string(err.message).find("no token left to sample") != std::string::npos);
    p.on_logits = write_nan;
    CHECK(gpt2_generate(s.session, prompt.data(), prompt.size(), &p, nullptr, 0, nullptr, &err) == GPT2_ERROR_INVALID_ARGUMENT);
    CHECK(std::string(err.message).find("the logit of token 3 is NaN") != std::string::npos);
}

// ---- Bad parameters -----------------------------------------------------------------------------

TEST_CASE("bad chain and stop parameters are refused with the field and the value, before anything runs") {
    TestModel m("shakespeare_char.gguf");
    REQUIRE(m.model);
    TestSession s(m);
    const int V = m.n_vocab();
    const int32_t prompt[] = {1, 2};
    const gpt2_logit_bias outside[] = {{0, 1.0f}, {V, 1.0f}};
    const gpt2_logit_bias negative[] = {{-1, 1.0f}};
    const gpt2_logit_bias nan_bias[] = {{4, NAN}};
    const gpt2_logit_bias plus_inf[] = {{4, INFINITY}};
    const char* null_stop[] = {"ok", nullptr};
    const char* empty_stop[] = {""};
    std::vector<std::pair<gpt2_generate_params, std::pair<gpt2_result, std::string>>> cases;
    auto add = [&](gpt2_result code, const std::string& message, auto edit) {
        gpt2_generate_params p = gpt2_generate_default_params();
        edit(p);
        cases.push_back({p, {code, message}});
    };
    const gpt2_result invalid = GPT2_ERROR_INVALID_ARGUMENT;
    add(invalid, "top_p is NaN", [](gpt2_generate_params& p) { p.top_p = NAN; });
    add(invalid, "top_p is -0.1", [](gpt2_generate_params& p) { p.top_p = -0.1f; });
    add(invalid, "top_p is 1.5", [](gpt2_generate_params& p) { p.top_p = 1.5f; });
    add(invalid, "min_p is NaN", [](gpt2_generate_params& p) { p.min_p = NAN; });
    add(invalid, "min_p is 2", [](gpt2_generate_params& p) { p.min_p = 2.0f; });
    add(invalid, "min_p is -1", [](gpt2_generate_params& p) { p.min_p = -1.0f; });
    add(invalid, "repeat_penalty is -1", [](gpt2_generate_params& p) { p.repeat_penalty = -1.0f; });
    add(invalid, "repeat_penalty is inf", [](gpt2_generate_params& p) { p.repeat_penalty = INFINITY; });
    add(invalid, "repeat_penalty is NaN", [](gpt2_generate_params& p) { p.repeat_penalty = NAN; });
    add(invalid, "repeat_last_n is -2", [](gpt2_generate_params& p) { p.repeat_last_n = -2; });
    add(invalid, "presence_penalty is NaN", [](gpt2_generate_params& p) { p.presence_penalty = NAN; });
    add(invalid, "frequency_penalty is -inf", [](gpt2_generate_params& p) { p.frequency_penalty = -INFINITY; });
    add(invalid, "logit_bias is NULL but n_logit_bias is 2", [](gpt2_generate_params& p) { p.n_logit_bias = 2; });
    add(GPT2_ERROR_BAD_TOKEN, "logit_bias[1].token is " + std::to_string(V) + ", outside the vocabulary [0, " + std::to_string(V) + ")",
        [&](gpt2_generate_params& p) { p.logit_bias = outside; p.n_logit_bias = 2; });
    add(GPT2_ERROR_BAD_TOKEN, "logit_bias[0].token is -1", [&](gpt2_generate_params& p) { p.logit_bias = negative; p.n_logit_bias = 1; });
    add(invalid, "logit_bias[0].bias is NaN", [&](gpt2_generate_params& p) { p.logit_bias = nan_bias; p.n_logit_bias = 1; });
    add(invalid, "logit_bias[0].bias is inf", [&](gpt2_generate_params& p) { p.logit_bias = plus_inf; p.n_logit_bias = 1; });
    add(invalid, "stop is NULL but n_stop is 1", [](gpt2_generate_params& p) { p.n_stop = 1; });
    add(invalid, "stop[1] is NULL", [&](gpt2_generate_params& p) { p.stop = null_stop; p.n_stop = 2; });
    add(invalid, "stop[0] is empty", [&](gpt2_generate_params& p) { p.stop = empty_stop; p.n_stop = 1; });
    for (auto& c : cases) { // no structured binding: clang does not let CAPTURE's lambda capture one
        gpt2_generate_params& p = c.first;
        const auto& expected = c.second;
        CAPTURE(expected.second);
        gpt2_error err{};
        size_t n = 99;
        CHECK(gpt2_generate(s.session, prompt, 2, &p, nullptr, 0, &n, &err) == expected.first);
        CHECK(err.code == expected.first);
        CHECK(std::string(err.message).find(expected.second) != std::string::npos);
        CHECK(n == 0);
        CHECK(gpt2_session_n_tokens(s.session) == 0); // refused before the prompt went in
    }
}

TEST_CASE("stop strings need a vocabulary, and stop_at_eos on a model without an end-of-text token never stops") {
    TestModel none("nobias.gguf");
    REQUIRE(none.model);
    TestSession s(none);
    const char* stops[] = {"x"};
    const int32_t prompt[] = {1};
    gpt2_generate_params p = gpt2_generate_default_params();
    p.max_new_tokens = 5;
    p.stop = stops;
    p.n_stop = 1;
    gpt2_error err{};
    CHECK(gpt2_generate(s.session, prompt, 1, &p, nullptr, 0, nullptr, &err) == GPT2_ERROR_NO_VOCABULARY);
    CHECK(std::string(err.message).find("stop strings need a vocabulary") != std::string::npos);
    p.n_stop = 0;
    p.stop_at_eos = 1;
    size_t n = 0;
    CHECK(gpt2_generate(s.session, prompt, 1, &p, nullptr, 0, &n, &err) == GPT2_OK);
    CHECK(n == 5);

    TestModel chars("shakespeare_char.gguf");
    REQUIRE(chars.model);
    CHECK(gpt2_model_get_info(chars.model).eos_token == -1);
    TestSession c(chars);
    CHECK(gpt2_generate(c.session, prompt, 1, &p, nullptr, 0, &n, &err) == GPT2_OK);
    CHECK(n == 5);
}

// ---- Stop strings and what on_token receives ----------------------------------------------------

namespace {

// A generation whose tokens are chosen by the test: on_logits leaves only script[step] possible.
struct Run {
    std::vector<int32_t> script;
    size_t step = 0;
    std::vector<std::pair<int32_t, std::string>> calls; // on_token's (token, text), in order
    gpt2_result result = GPT2_OK;
    size_t n_generated = 0;
    gpt2_end end = GPT2_END_ABORTED; // as no generation would leave it
    int stop_after = 0;              // > 0: on_token returns nonzero at that call
    std::string text() const {
        std::string all;
        for (const auto& c : calls) all += c.second;
        return all;
    }
};

void force_script(void* user, float* logits, int n) {
    Run* r = (Run*)user;
    const int32_t next = r->script[std::min(r->step++, r->script.size() - 1)];
    for (int i = 0; i < n; i++)
        if (i != next) logits[i] = -INFINITY;
}

int record(void* user, int32_t token, const char* text, size_t len) {
    Run* r = (Run*)user;
    r->calls.emplace_back(token, std::string(text ? text : "", len));
    return r->stop_after > 0 && (int)r->calls.size() == r->stop_after;
}

void run_script(gpt2_session* s, Run* r, const std::vector<const char*>& stops, int stop_at_eos = 0) {
    gpt2_session_reset(s);
    gpt2_generate_params p = gpt2_generate_default_params();
    p.max_new_tokens = (int)r->script.size();
    p.on_logits = force_script;
    p.on_token = record;
    p.user = r;
    p.stop = stops.data();
    p.n_stop = stops.size();
    p.stop_at_eos = stop_at_eos;
    p.end = &r->end;
    const int32_t prompt[] = {1};
    r->result = gpt2_generate(s, prompt, 1, &p, nullptr, 0, &r->n_generated, nullptr);
}

// The script of a character model: one token per character.
Run char_script(const gpt2_model* m, const std::string& text) {
    Run r;
    r.script = tokenize(m, text);
    REQUIRE(r.script.size() == text.size());
    return r;
}

using Calls = std::vector<std::pair<int32_t, std::string>>;

// The expected calls of a character script: token i of `text` releases pieces[i].
Calls expected_calls(const gpt2_model* m, const std::string& text, const std::vector<std::string>& pieces) {
    REQUIRE(pieces.size() <= text.size());
    Calls calls;
    for (size_t i = 0; i < pieces.size(); i++) calls.emplace_back(tokenize(m, text.substr(i, 1))[0], pieces[i]);
    return calls;
}

} // namespace

TEST_CASE("a stop string over several tokens ends generation: the text before it is delivered and the tokens stay") {
    TestModel m("shakespeare_char.gguf");
    REQUIRE(m.model);
    TestSession s(m);
    Run r = char_script(m.model, "Hi PLAYER: more");
    run_script(s.session, &r, {"PLAYER:"});
    REQUIRE(r.result == GPT2_OK);
    CHECK(r.n_generated == 10); // up to the ':' that completed the stop string
    CHECK(gpt2_session_n_tokens(s.session) == 1 + 10);
    CHECK(r.calls == expected_calls(m.model, "Hi PLAYER:", {"H", "i", " ", "", "", "", "", "", "", ""}));
}

TEST_CASE("text held as a possible stop string is released with the token that shows it is not one") {
    TestModel m("shakespeare_char.gguf");
    REQUIRE(m.model);
    TestSession s(m);
    Run r = char_script(m.model, "PLAY ball PLAY");
    run_script(s.session, &r, {"PLAYER:"});
    REQUIRE(r.result == GPT2_OK);
    CHECK(r.n_generated == 14);
    Calls want = expected_calls(m.model, "PLAY ball PLAY", {"", "", "", "", "PLAY ", "b", "a", "l", "l", " ", "", "", "", ""});
    want.emplace_back(-1, "PLAY"); // held at the end, never a stop string: the last call
    CHECK(r.calls == want);
    CHECK(r.text() == "PLAY ball PLAY");
}

TEST_CASE("a stop string at the very start delivers no text at all") {
    TestModel m("shakespeare_char.gguf");
    REQUIRE(m.model);
    TestSession s(m);
    Run r = char_script(m.model, "PLAYER: go");
    run_script(s.session, &r, {"PLAYER:"});
    CHECK(r.n_generated == 7);
    CHECK(r.calls == expected_calls(m.model, "PLAYER:", std::vector<std::string>(7, "")));
}

TEST_CASE("stop strings sharing a prefix: the text is held for the longer, and the first one completed ends") {
    TestModel m("shakespeare_char.gguf");
    REQUIRE(m.model);
    TestSession s(m);
    const std::vector<const char*> stops = {"PLAYER 3:", "PLAYER:"};
    struct Want {
        const char* script;
        std::string text;
        size_t n_generated;
    };
    for (const Want& w : {Want{"xPLAYER 3: y", "x", 10}, Want{"xPLAYER: y", "x", 8}, Want{"xPLAYER Z y", "xPLAYER Z y", 11}}) {
        CAPTURE(w.script);
        Run r = char_script(m.model, w.script);
        run_script(s.session, &r, stops);
        CHECK(r.text() == w.text);
        CHECK(r.n_generated == w.n_generated);
    }
    // "bc" is complete before "abcd" can be: it ends generation, cutting at its own start.
    Run r = char_script(m.model, "zabcd");
    run_script(s.session, &r, {"abcd", "bc"});
    CHECK(r.text() == "za");
    CHECK(r.n_generated == 4);
    // Completed by the same token, the one that starts first cuts, whatever the list's order.
    Run both = char_script(m.model, "zabc");
    run_script(s.session, &both, {"bc", "abc"});
    CHECK(both.text() == "z");
    CHECK(both.n_generated == 4);
}

namespace {

// The ids of the BPE tokens whose text is exactly `text`, one per byte.
std::vector<int32_t> byte_tokens(const gpt2_model* m, const std::string& text) {
    std::map<unsigned char, int32_t> id_of;
    for (int32_t id = 0; id < gpt2_model_get_info(m).n_vocab; id++) {
        const std::string t = detokenize(m, {id});
        if (t.size() == 1 && !id_of.count((unsigned char)t[0])) id_of[(unsigned char)t[0]] = id;
    }
    std::vector<int32_t> ids;
    for (unsigned char b : text) {
        REQUIRE(id_of.count(b));
        ids.push_back(id_of[b]);
    }
    return ids;
}


// Offsets between characters of s; a byte that starts no valid character stands alone.
std::vector<bool> character_boundaries(const std::string& s) {
    std::vector<bool> boundary(s.size() + 1, false);
    boundary[0] = true;
    for (size_t i = 0; i < s.size();) {
        const unsigned char c = (unsigned char)s[i];
        size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
        if (i + n > s.size()) n = 1;
        for (size_t k = 1; k < n; k++)
            if (((unsigned char)s[i + k] & 0xc0) != 0x80) n = 1;
        i += n;
        boundary[i] = true;
    }
    return boundary;
}

// Whether every byte of s belongs to a whole character (a lone byte >= 0x80 is not one).
bool valid_utf8(const std::string& s) {
    const std::vector<bool> boundary = character_boundaries(s);
    for (size_t i = 0; i < s.size(); i++)
        if (boundary[i] && boundary[i + 1] && (unsigned char)s[i] >= 0x80) return false;
    return true;
}

bool pieces_are_whole_characters(const Run& r) {
    const std::string all = r.text();
    const std::vector<bool> boundary = character_boundaries(all);
    size_t end = 0;
    for (const auto& c : r.calls) {
        end += c.second.size();
        if (!boundary[end]) return false;
    }
    return true;
}

} // namespace

TEST_CASE("BPE: the text before a stop string inside one token is delivered with that token, the rest is not") {
    TestModel m("padded_gpt2.gguf");
    REQUIRE(m.model);
    TestSession s(m);
    Run r;
    for (const char* piece : {" Hello", " world"}) r.script.push_back(tokenize(m.model, piece).at(0));
    run_script(s.session, &r, {"ell"});
    CHECK(r.n_generated == 1);
    CHECK(r.calls == Calls{{r.script[0], " H"}});
    Run split = r;
    split.calls.clear();
    split.step = 0;
    run_script(s.session, &split, {"lo wo"});
    CHECK(split.n_generated == 2);
    CHECK(split.calls == Calls{{r.script[0], " Hel"}, {r.script[1], ""}});
}

TEST_CASE("BPE: multi-byte stop strings over byte tokens, and no piece ends inside a character") {
    TestModel m("padded_gpt2.gguf");
    REQUIRE(m.model);
    TestSession s(m);
    const std::string text = "a\xe4\xb8\x96\xe7\x95\x8c" "b"; // a世界b, one token per byte
    Run base;
    base.script = byte_tokens(m.model, text);
    struct Want {
        const char* stop;
        std::string text;
        size_t n_generated;
    };
    for (const Want& w : {Want{"\xe7\x95\x8c", "a\xe4\xb8\x96", 7}, Want{"\xe4\xb8\x96\xe7\x95\x8c", "a", 7}, Want{"\xe4\xb8\x96" "b", text, 8},
                          Want{"\xe7\x95\x8c" "b", "a\xe4\xb8\x96", 8}}) {
        CAPTURE(w.stop);
        Run r = base;
        run_script(s.session, &r, {w.stop});
        CHECK(r.text() == w.text);
        CHECK(r.n_generated == w.n_generated);
        CHECK(pieces_are_whole_characters(r));
    }
    // 世 waits for its last byte, then comes with that byte's token, as without stop strings.
    Run r = base;
    run_script(s.session, &r, {"\xe7\x95\x8c"});
    CHECK(r.calls[3] == std::make_pair(base.script[3], std::string("\xe4\xb8\x96")));
}

TEST_CASE("BPE: the delivered text is the generated text up to the first stop string, for random text") {
    TestModel m("padded_gpt2.gguf");
    REQUIRE(m.model);
    TestSession s(m);
    const std::vector<int32_t> prompt = tokenize(m.model, "Hello");
    gpt2_generate_params p = gpt2_generate_default_params();
    p.max_new_tokens = 120;
    p.temperature = 1.5f;
    p.top_k = 0;
    p.on_token = record;
    size_t checked = 0;
    for (uint64_t seed = 1; seed <= 8; seed++) {
        CAPTURE(seed);
        p.seed = seed;
        Run free_run;
        p.user = &free_run;
        p.n_stop = 0;
        const std::vector<int32_t> ids = generate(s.session, prompt, p);
        const std::string full = detokenize(m.model, ids);
        REQUIRE(free_run.text() == full);
        // Two stop strings cut from the text: two characters from the middle, three near the end.
        const std::vector<bool> boundary = character_boundaries(full);
        std::vector<size_t> starts;
        for (size_t i = 0; i < full.size(); i++)
            if (boundary[i]) starts.push_back(i);
        if (starts.size() < 12) continue;
        // (valid UTF-8 ones: a stop string is text)
        auto cut_out = [&](size_t first, size_t n_chars) {
            for (size_t i = first; i + n_chars < starts.size(); i++) {
                const std::string t = full.substr(starts[i], starts[i + n_chars] - starts[i]);
                if (valid_utf8(t)) return t;
            }
            return std::string();
        };
        const std::string stop1 = cut_out(starts.size() / 2, 2), stop2 = cut_out(starts.size() - 5, 3);
        if (stop1.empty() || stop2.empty()) continue;
        const char* stops[] = {stop1.c_str(), stop2.c_str()};
        // Reference: the first token after which the text holds a stop string; the text up to it.
        size_t n_want = 0, cut = std::string::npos;
        for (size_t k = 1; k <= ids.size() && cut == std::string::npos; k++) {
            const std::string so_far = detokenize(m.model, std::vector<int32_t>(ids.begin(), ids.begin() + (ptrdiff_t)k));
            cut = std::min(so_far.find(stop1), so_far.find(stop2));
            n_want = k;
        }
        REQUIRE(cut != std::string::npos);
        Run stopped;
        p.user = &stopped;
        p.stop = stops;
        p.n_stop = 2;
        gpt2_session_reset(s.session);
        size_t n = 0;
        REQUIRE(gpt2_generate(s.session, prompt.data(), prompt.size(), &p, nullptr, 0, &n, nullptr) == GPT2_OK);
        p.stop = nullptr;
        p.n_stop = 0;
        CHECK(n == n_want);
        CHECK(stopped.text() == full.substr(0, cut));
        CHECK(pieces_are_whole_characters(stopped));
        for (size_t i = 0; i < stopped.calls.size(); i++) CHECK(stopped.calls[i].first == ids[i]); // one call per token, in order
        checked++;
    }
    CHECK(checked >= 6);
}

TEST_CASE("stop_at_eos ends at the end-of-text token without delivering its text, and held text comes last with -1") {
    TestModel m("padded_gpt2.gguf");
    REQUIRE(m.model);
    TestSession s(m);
    const int32_t eos = gpt2_model_get_info(m.model).eos_token;
    REQUIRE(eos == 50256);
    Run r;
    r.script = {tokenize(m.model, " Hi").at(0), eos, tokenize(m.model, " there").at(0)};
    Run plain = r;
    run_script(s.session, &r, {}, 1);
    CHECK(r.n_generated == 2);
    CHECK(gpt2_session_n_tokens(s.session) == 1 + 2); // the end-of-text token stays in the context
    CHECK(r.calls == Calls{{r.script[0], " Hi"}, {eos, ""}});

    run_script(s.session, &plain, {}, 0); // without stop_at_eos it is ordinary text, as before
    CHECK(plain.n_generated == 3);
    CHECK(plain.text() == " Hi<|endoftext|> there");

    Run held = plain;
    held.calls.clear();
    held.step = 0;
    run_script(s.session, &held, {"Hi!"}, 1);
    CHECK(held.calls == Calls{{r.script[0], " "}, {eos, ""}, {-1, "Hi"}});
}

TEST_CASE("end says why a generation ended: max_new_tokens, a stop string, end-of-text, on_token, the grammar, an abort") {
    TestModel m("padded_gpt2.gguf");
    REQUIRE(m.model);
    TestSession s(m);
    const int32_t eos = gpt2_model_get_info(m.model).eos_token;
    const int32_t hi = tokenize(m.model, " Hi").at(0), there = tokenize(m.model, " there").at(0);
    Run ran;
    ran.script = {hi, there, hi};
    run_script(s.session, &ran, {});
    CHECK(ran.end == GPT2_END_MAX_TOKENS);
    CHECK(std::string(gpt2_end_string(ran.end)) == "max_tokens");
    Run stopped;
    stopped.script = {hi, there, hi};
    run_script(s.session, &stopped, {"there"});
    CHECK(stopped.end == GPT2_END_STOP);
    Run at_eos;
    at_eos.script = {hi, eos, there};
    run_script(s.session, &at_eos, {}, 1);
    CHECK(at_eos.end == GPT2_END_EOS);
    Run called;
    called.script = {hi, there, hi};
    called.stop_after = 2;
    run_script(s.session, &called, {});
    CHECK(called.end == GPT2_END_CALLBACK);
    CHECK(called.n_generated == 2);
    Run none;
    none.script = {};
    run_script(s.session, &none, {}); // max_new_tokens 0: the prompt only
    CHECK(none.end == GPT2_END_MAX_TOKENS);
    CHECK(none.n_generated == 0);

    gpt2_grammar* yes_no = nullptr;
    REQUIRE(gpt2_grammar_from_gbnf(m.model, "root ::= \" yes\" | \" no\"", nullptr, &yes_no, nullptr) == GPT2_OK);
    gpt2_generate_params p = gpt2_generate_default_params();
    gpt2_end end = GPT2_END_ABORTED;
    gpt2_match match = GPT2_MATCH_NONE;
    p.grammar = yes_no;
    p.end = &end;
    p.grammar_match = &match;
    gpt2_session_reset(s.session);
    REQUIRE(gpt2_generate_text(s.session, "Answer:", &p, nullptr) == GPT2_OK);
    CHECK(end == GPT2_END_GRAMMAR);
    CHECK(match == GPT2_MATCH_COMPLETE);
    gpt2_grammar_free(yes_no);
}

namespace {
int abort_now(void*) { return 1; }
} // namespace

namespace {
struct Ends {
    std::vector<std::tuple<gpt2_end, gpt2_result, std::string>> heard; // on_end's calls
    static void on_end(void* user, gpt2_end end, gpt2_result result, const char* message) {
        static_cast<Ends*>(user)->heard.emplace_back(end, result, message);
    }
};
} // namespace

TEST_CASE("on_end hears once how gpt2_generate and each line of gpt2_generate_batch ended, as end and the result say") {
    TestModel m("shakespeare_char.gguf");
    REQUIRE(m.model);
    TestSession a(m), b(m);
    gpt2_generate_params p = gpt2_generate_default_params();
    gpt2_end end = GPT2_END_ABORTED;
    Ends ends;
    p.user = &ends, p.on_end = Ends::on_end, p.end = &end, p.max_new_tokens = 5;
    REQUIRE(gpt2_generate_text(a.session, "ROMEO:", &p, nullptr) == GPT2_OK);
    CHECK(ends.heard == decltype(ends.heard){{GPT2_END_MAX_TOKENS, GPT2_OK, ""}});

    // a failure: after "a" the grammar wants '{', which no token of this vocabulary holds
    gpt2_grammar* dead_end = nullptr;
    REQUIRE(gpt2_grammar_from_gbnf(m.model, "root ::= \"a\" \"{\" | \"b\"", nullptr, &dead_end, nullptr) == GPT2_OK);
    const gpt2_logit_bias ban_b = {tokenize(m.model, "b").at(0), -INFINITY};
    gpt2_generate_params failing = p;
    failing.grammar = dead_end, failing.logit_bias = &ban_b, failing.n_logit_bias = 1;
    ends.heard.clear();
    gpt2_error err;
    REQUIRE(gpt2_generate_text(a.session, "", &failing, &err) == GPT2_ERROR_BAD_GRAMMAR);
    REQUIRE(ends.heard.size() == 1);
    CHECK(std::get<0>(ends.heard[0]) == GPT2_END_ERROR);
    CHECK(end == GPT2_END_ERROR);
    CHECK(std::string(gpt2_end_string(end)) == "error");
    CHECK(std::get<1>(ends.heard[0]) == GPT2_ERROR_BAD_GRAMMAR);
    CHECK(std::get<2>(ends.heard[0]) == err.message);
    ends.heard.clear();
    REQUIRE(gpt2_generate_text(a.session, "", &failing, nullptr) == GPT2_ERROR_BAD_GRAMMAR); // no err: on_end still hears why
    CHECK(std::get<2>(ends.heard.at(0)).find("no token of the model's vocabulary continues the text") != std::string::npos);

    // a batch: each line once, the one that ended first as it ended
    Ends first, second;
    gpt2_generate_params batch_params[2] = {p, p};
    batch_params[0].user = &first, batch_params[0].max_new_tokens = 2, batch_params[0].end = nullptr;
    batch_params[1].user = &second, batch_params[1].end = nullptr;
    gpt2_session* sessions[2] = {a.session, b.session};
    const char* prompts[2] = {"A", "ROMEO:"};
    REQUIRE(gpt2_generate_batch(sessions, prompts, batch_params, 2, nullptr) == GPT2_OK);
    CHECK(first.heard == decltype(first.heard){{GPT2_END_MAX_TOKENS, GPT2_OK, ""}});
    CHECK(second.heard == decltype(second.heard){{GPT2_END_MAX_TOKENS, GPT2_OK, ""}});
    first.heard.clear(), second.heard.clear();
    batch_params[1] = failing, batch_params[1].user = &second, batch_params[1].end = nullptr;
    REQUIRE(gpt2_generate_batch(sessions, prompts, batch_params, 2, &err) == GPT2_ERROR_BAD_GRAMMAR);
    CHECK(first.heard == decltype(first.heard){{GPT2_END_MAX_TOKENS, GPT2_OK, ""}}); // 2 tokens: done before the other failed
    REQUIRE(second.heard.size() == 1);
    CHECK(std::get<0>(second.heard[0]) == GPT2_END_ERROR);
    gpt2_grammar_free(dead_end);
}

TEST_CASE("end is GPT2_END_ABORTED when abort_fn stops a generation or a stage's line is cancelled") {
    TestModel m("shakespeare_char.gguf");
    REQUIRE(m.model);
    gpt2_session_params sp = gpt2_session_default_params();
    sp.abort_fn = abort_now;
    gpt2_session* aborting = nullptr;
    REQUIRE(gpt2_session_create(m.model, &sp, &aborting, nullptr) == GPT2_OK);
    gpt2_generate_params p = gpt2_generate_default_params();
    gpt2_end end = GPT2_END_MAX_TOKENS;
    p.end = &end;
    Ends ends;
    p.user = &ends, p.on_end = Ends::on_end;
    CHECK(gpt2_generate_text(aborting, "ROMEO:", &p, nullptr) == GPT2_ERROR_ABORTED);
    CHECK(end == GPT2_END_ABORTED);
    CHECK(ends.heard == decltype(ends.heard){{GPT2_END_ABORTED, GPT2_ERROR_ABORTED, "aborted by abort_fn; the session is as it was before the call"}});
    p.on_end = nullptr;
    gpt2_session_free(aborting);

    TestSession s(m);
    gpt2_stage* stage = nullptr;
    REQUIRE(gpt2_stage_create(m.model, nullptr, &stage, nullptr) == GPT2_OK);
    end = GPT2_END_MAX_TOKENS;
    p.max_new_tokens = 50;
    REQUIRE(gpt2_stage_add(stage, s.session, "ROMEO:", &p, nullptr) == GPT2_OK);
    size_t n_active = 0;
    REQUIRE(gpt2_stage_step(stage, 0, &n_active, nullptr) == GPT2_OK);
    REQUIRE(gpt2_stage_cancel(stage, s.session, nullptr) == GPT2_OK);
    REQUIRE(gpt2_stage_step(stage, 0, &n_active, nullptr) == GPT2_OK);
    CHECK(end == GPT2_END_ABORTED);
    CHECK(gpt2_session_n_tokens(s.session) == 0);
    gpt2_stage_free(stage);
}
