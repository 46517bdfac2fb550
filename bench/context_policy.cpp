// gpt2-bench-context: tokens/s of a long generation, past the context, under each context policy.
// GPT2_CONTEXT_EXACT (nanoGPT's crop) recomputes the whole window for every token once the
// context is full; GPT2_CONTEXT_DISCARD drops half the window at once and recomputes once per
// discard. Medians of --repeat runs, the two policies alternated within each repeat.
//
//   gpt2-bench-context [-m MODEL] [-n TOKENS] [-t THREADS] [--repeat R] [--keep N]
#define GPT2_IMPLEMENTATION
#include "gpt2.h"

#include "../examples/cli.h"
#include "../examples/default_model.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// Seconds to generate n tokens after a one-token prompt, under `policy`.
static double run(const gpt2_model* model, gpt2_context_policy policy, int n_keep, int threads, int n, gpt2_error* err) {
    gpt2_session_params sp = gpt2_session_default_params();
    sp.n_threads = threads;
    sp.context_policy = policy;
    sp.n_keep = policy == GPT2_CONTEXT_DISCARD ? n_keep : 0;
    gpt2_session* s = nullptr;
    if (gpt2_session_create(model, &sp, &s, err) != GPT2_OK) return -1;
    gpt2_generate_params gp = gpt2_generate_default_params();
    gp.max_new_tokens = n;
    const int32_t prompt = 0;
    const auto t0 = std::chrono::steady_clock::now();
    const gpt2_result r = gpt2_generate(s, &prompt, 1, &gp, nullptr, 0, nullptr, err);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    gpt2_session_free(s);
    return r == GPT2_OK ? seconds : -1;
}

int main(int argc, char** argv) {
    const char* path = nullptr;
    int n = 2000, threads = 0, repeat = 3, keep = 0;
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        const bool has_value = i + 1 < argc;
        if (a == "-m" && has_value) path = argv[++i];
        else if (a == "-n" && has_value && cli_parse_int(argv[i + 1], 1, 1 << 24, &n)) i++;
        else if (a == "-t" && has_value && cli_parse_int(argv[i + 1], 0, 1024, &threads)) i++;
        else if (a == "--repeat" && has_value && cli_parse_int(argv[i + 1], 1, 1000, &repeat)) i++;
        else if (a == "--keep" && has_value && cli_parse_int(argv[i + 1], 0, 1 << 20, &keep)) i++;
        else {
            std::fprintf(stderr, "usage: gpt2-bench-context [-m MODEL] [-n TOKENS] [-t THREADS] [--repeat R] [--keep N]\n");
            return 2;
        }
    }
    if (!path) path = example_default_model(argv[0]);
    if (!path) { std::fprintf(stderr, "gpt2-bench-context: no model given and the shipped one was not found\n"); return 1; }
    gpt2_error err;
    gpt2_model* model = nullptr;
    if (gpt2_model_load_file(path, nullptr, &model, &err) != GPT2_OK) { std::fprintf(stderr, "gpt2-bench-context: %s\n", err.message); return 1; }
    const gpt2_model_info info = gpt2_model_get_info(model);
    std::vector<double> exact, discard;
    for (int r = 0; r < repeat; r++) {
        const double e = run(model, GPT2_CONTEXT_EXACT, keep, threads, n, &err), d = run(model, GPT2_CONTEXT_DISCARD, keep, threads, n, &err);
        if (e < 0 || d < 0) { std::fprintf(stderr, "gpt2-bench-context: %s\n", err.message); return 1; }
        exact.push_back(n / e);
        discard.push_back(n / d);
    }
    std::printf("{\"model\": \"%s\", \"n_ctx\": %d, \"tokens\": %d, \"threads\": %d, \"repeat\": %d, \"n_keep\": %d, "
                "\"exact_tok_s\": %.1f, \"discard_tok_s\": %.1f, \"discard_over_exact\": %.2f}\n",
                info.name, info.n_ctx, n, threads, repeat, keep, median(exact), median(discard), median(discard) / median(exact));
    gpt2_model_free(model);
    return 0;
}
