// gpt2-bench-grammar: what a grammar costs per token, as MaskBench measures it: the text of real
// documents is fed token by token (as if the model had drawn it) and each step's token mask is
// timed, on one core.
//
//   cmake --build build --target gpt2-bench-grammar
//   build/bench/gpt2-bench-grammar -m MODEL.gguf --grammar examples/grammars/json.gbnf bench/grammar_documents.jsonl [--json]
//
// MODEL gives the vocabulary (a GPT-2 BPE model: its 50,257 tokens; the weights are not used).
// Each line of the documents file is one document. Reported: grammar_compile_ms (the median of
// 20 makes; the vocabulary's trie is built once per model, before, and reported apart as
// token_trie_ms), grammar_mask_us_p50/p99/max over every step of every document, and
// forced_tokens_share, the steps where the grammar allowed exactly one token.
#if defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wunused-function"
#endif
#define GPT2_IMPLEMENTATION
#define GPT2_STATIC
#include "gpt2.h"

#include "bench/grammar_stats.h"
#include "tests/test_files.h"

#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

int main(int argc, char** argv) {
    const char *model_path = nullptr, *grammar_path = nullptr, *documents_path = nullptr;
    bool json = false;
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        if (a == "-m" && i + 1 < argc) model_path = argv[++i];
        else if (a == "--grammar" && i + 1 < argc) grammar_path = argv[++i];
        else if (a == "--json") json = true;
        else if (a[0] != '-' && !documents_path) documents_path = argv[i];
        else { std::fprintf(stderr, "usage: gpt2-bench-grammar -m MODEL.gguf --grammar FILE.gbnf DOCUMENTS [--json]\n"); return 2; }
    }
    std::string gbnf, documents;
    if (!model_path || !grammar_path || !documents_path) { std::fprintf(stderr, "usage: gpt2-bench-grammar -m MODEL.gguf --grammar FILE.gbnf DOCUMENTS [--json]\n"); return 2; }
    if (!read_whole_file(grammar_path, &gbnf) || !read_whole_file(documents_path, &documents)) { std::fprintf(stderr, "gpt2-bench-grammar: cannot read %s or %s\n", grammar_path, documents_path); return 1; }
    gpt2_error err;
    gpt2_model* model = nullptr;
    if (gpt2_model_load_file(model_path, nullptr, &model, &err) != GPT2_OK) { std::fprintf(stderr, "gpt2-bench-grammar: %s\n", err.message); return 1; }

    gpt2_grammar* grammar = nullptr;
    double first_ms = 0, compile_ms = 0; // first: the trie, and one make
    if (make_grammar_timed(model, gbnf, false, &grammar, &first_ms, &compile_ms, &err) != GPT2_OK) { std::fprintf(stderr, "gpt2-bench-grammar: %s\n", err.message); return 1; }

    GrammarMaskStats stats;
    size_t n_documents = 0;
    std::istringstream lines(documents);
    for (std::string doc; std::getline(lines, doc);) {
        if (doc.empty()) continue;
        const FedText fed = feed_text(model, grammar, doc, [&](double mask_us, double, const uint32_t* allowed, size_t words) { stats.add(mask_us, allowed, words); }, &err);
        if (fed.failed) { std::fprintf(stderr, "gpt2-bench-grammar: %s\n", err.message); return 1; }
        if (!fed.followed) {
            std::fprintf(stderr, "gpt2-bench-grammar: document %zu leaves the grammar at token %zu\n", n_documents + 1, fed.refused_at);
            return 1;
        }
        n_documents++;
    }
    const double p50 = stats.p50(), p99 = stats.p99(), max = stats.max(), share = stats.forced_share();
    if (json)
        std::printf("{\"documents\": %zu, \"steps\": %zu, \"grammar_compile_ms\": %.4f, \"first_grammar_ms\": %.3f, \"grammar_mask_us_p50\": %.2f, "
                    "\"grammar_mask_us_p99\": %.2f, \"grammar_mask_us_max\": %.2f, \"forced_tokens_share\": %.4f}\n",
                    n_documents, stats.steps(), compile_ms, first_ms, p50, p99, max, share);
    else
        std::printf("%zu documents, %zu steps: compile %.3f ms (first grammar of the model, with its trie: %.1f ms); mask p50 %.1f us, p99 %.1f us, "
                    "max %.1f us; forced %.1f%%\n",
                    n_documents, stats.steps(), compile_ms, first_ms, p50, p99, max, 100 * share);
    gpt2_grammar_free(grammar);
    gpt2_model_free(model);
    return 0;
}
