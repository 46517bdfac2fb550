// gpt2-same-tokens: prints the token ids of the same-tokens cases (tests/same_tokens.h) for each
// model given, one line per model and case, with one kernel set. tools/cross_test.sh compares
// what it prints under Wine and qemu with the native build's lines.
#define GPT2_IMPLEMENTATION
#include "same_tokens.h"
#include <cstdio>
#include <cstdlib>
#include <cstring>

static const char* usage =
    "usage: gpt2-same-tokens [--kernels NAME] [--threads N] MODEL.gguf...\n"
    "       gpt2-same-tokens --list-kernels\n"
    "\n"
    "Prints 'MODEL CASE id id ...' for each model and case of tests/same_tokens.h (200 tokens after\n"
    "\"ROMEO:\": seeded sampling and greedy), after a '#' line naming the kernel set and threads.\n"
    "\n"
    "  --kernels NAME   scalar, avx2, avx512, neon, ... (default: the one this CPU would use)\n"
    "  --threads N      worker threads (default 1; the ids do not depend on it)\n"
    "  --list-kernels   print the kernel sets this CPU runs, best first, one per line\n";

int main(int argc, char** argv) {
    const gpt2__kernels* kernels = &gpt2__cpu_kernels();
    int threads = 1;
    std::vector<const char*> models;
    for (int i = 1; i < argc; i++) {
        const bool has_value = i + 1 < argc;
        if (std::strcmp(argv[i], "--list-kernels") == 0) {
            const gpt2__kernels* sets[gpt2__max_kernel_sets];
            const int n = gpt2__supported_kernels(sets);
            for (int k = 0; k < n; k++) std::printf("%s\n", sets[k]->name);
            return 0;
        } else if (std::strcmp(argv[i], "--kernels") == 0 && has_value) {
            kernels = gpt2__kernels_by_name(argv[++i]);
            if (!kernels) return std::fprintf(stderr, "gpt2-same-tokens: kernel set '%s' is not available on this CPU/build (see --list-kernels)\n", argv[i]), 2;
        } else if (std::strcmp(argv[i], "--threads") == 0 && has_value) {
            threads = std::atoi(argv[++i]);
            if (threads < 1) return std::fprintf(stderr, "gpt2-same-tokens: --threads expects a number >= 1, got '%s'\n", argv[i]), 2;
        } else if (argv[i][0] == '-') {
            return std::fprintf(stderr, "%s", usage), 2;
        } else {
            models.push_back(argv[i]);
        }
    }
    if (models.empty()) return std::fprintf(stderr, "%s", usage), 2;
    std::printf("# gpt2-same-tokens: kernels %s, %d thread(s)\n", kernels->name, threads);
    for (const char* path : models) {
        gpt2_error err;
        gpt2_model* model = nullptr;
        if (gpt2_model_load_file(path, nullptr, &model, &err) != GPT2_OK) return std::fprintf(stderr, "gpt2-same-tokens: %s\n", err.message), 1;
        for (const SameTokensCase& c : same_tokens_cases) {
            std::vector<int32_t> ids;
            const std::string failure = same_tokens_generate(model, kernels, threads, c, &ids);
            if (!failure.empty()) {
                gpt2_model_free(model);
                return std::fprintf(stderr, "gpt2-same-tokens: %s, case %s: %s\n", path, c.name, failure.c_str()), 1;
            }
            std::printf("%s\n", same_tokens_line(gpt2_model_get_info(model).name, c, ids).c_str());
        }
        gpt2_model_free(model);
    }
    return 0;
}
