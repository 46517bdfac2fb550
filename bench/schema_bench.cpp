// gpt2-bench-schema: MaskBench (guidance-ai/jsonschemabench) the way its runner measures an
// engine, with GPT-2's tokenizer, on one core. Each schema is made into a grammar
// (gpt2_grammar_from_json_schema) and its first mask computed: the time to first mask, TTFM.
// Each test instance is tokenized and fed token by token, the mask computed before each token
// and the token checked allowed by it: the time between masks, TBM (a mask and the token's
// commit, as MaskBench times them). A valid instance must pass every token; an invalid one must
// be refused at some token (MaskBench does not ask for the end of the text to be complete: an
// invalid instance that is a prefix of a valid one counts as accepted).
//
//   python3 tools/maskbench_prepare.py ../shared/data/maskbench/sample1000.json > /tmp/mb.lines
//   build/bench/gpt2-bench-schema -m MODEL.gguf /tmp/mb.lines [--json] [--failures] [--warm] [--any-order]
//
// MODEL gives the vocabulary (a GPT-2 BPE model: its 50,257 tokens; the weights are not used).
// The vocabulary's trie is built once per model, before the first schema, and reported apart.
// Printed: MaskBench's table (schemas passing, compile errors, validation errors — a valid
// instance refused —, invalidation errors — an invalid instance accepted —, TBM and TTFM
// percentiles), and the keywords compile errors name. --failures lists the failing schemas.
// --warm feeds each schema's instances once, untimed, before the timed pass: the masks of a
// program that has generated with the schema before (MaskBench times the first pass).
// --any-order makes the grammars with gpt2_json_schema_params' any_order and integer_fraction
// (objects in any key order, 1.0 an integer, as JSON Schema reads them).
#if defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wunused-function"
#endif
#define GPT2_IMPLEMENTATION
#define GPT2_STATIC
#include "gpt2.h"

#include "bench/grammar_stats.h"
#include "tests/test_files.h"

#include <cstdio>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct Totals {
    size_t schemas = 0, passing = 0, compile_errors = 0, validation_errors = 0, invalidation_errors = 0, mask_errors = 0;
    size_t valid = 0, valid_accepted = 0, valid_incomplete = 0, invalid = 0, invalid_refused = 0;
    std::vector<double> tbm_us, ttfm_us;
    std::map<std::string, size_t> refused_keywords; // compile errors by the keyword they name
};

// The keyword a refusal names ("json schema: /a/b: 'pattern' is not ..." -> "pattern").
std::string refused_keyword(const char* message) {
    const std::string m = message;
    const size_t open = m.find('\'');
    const size_t close = open == std::string::npos ? std::string::npos : m.find('\'', open + 1);
    return close == std::string::npos ? m.substr(0, 48) : m.substr(open + 1, close - open - 1);
}

} // namespace

int main(int argc, char** argv) {
    const char *model_path = nullptr, *lines_path = nullptr;
    bool json = false, list_failures = false, warm = false, any_order = false;
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        if (a == "-m" && i + 1 < argc) model_path = argv[++i];
        else if (a == "--json") json = true;
        else if (a == "--failures") list_failures = true;
        else if (a == "--warm") warm = true;
        else if (a == "--any-order") any_order = true;
        else if (a[0] != '-' && !lines_path) lines_path = argv[i];
        else { std::fprintf(stderr, "usage: gpt2-bench-schema -m MODEL.gguf MASKBENCH.lines [--json] [--failures] [--warm] [--any-order]\n"); return 2; }
    }
    std::string lines_text;
    if (!model_path || !lines_path) { std::fprintf(stderr, "usage: gpt2-bench-schema -m MODEL.gguf MASKBENCH.lines [--json] [--failures] [--warm] [--any-order]\n"); return 2; }
    if (!read_whole_file(lines_path, &lines_text)) { std::fprintf(stderr, "gpt2-bench-schema: cannot read %s\n", lines_path); return 1; }
    gpt2_error err;
    gpt2_model* model = nullptr;
    if (gpt2_model_load_file(model_path, nullptr, &model, &err) != GPT2_OK) { std::fprintf(stderr, "gpt2-bench-schema: %s\n", err.message); return 1; }

    // the vocabulary's trie, built with the model's first grammar: timed apart from the schemas
    double t0 = grammar_now_us();
    gpt2_grammar* first = nullptr;
    if (gpt2_grammar_from_gbnf(model, "root ::= \"x\"", nullptr, &first, &err) != GPT2_OK) { std::fprintf(stderr, "gpt2-bench-schema: %s\n", err.message); return 1; }
    const double trie_ms = (grammar_now_us() - t0) / 1e3;
    gpt2_grammar_free(first);

    // the input: schemas, each with its instances
    struct Case {
        std::string name, schema;
        std::vector<std::pair<bool, std::string>> instances; // valid?, text
    };
    std::vector<Case> cases;
    std::istringstream lines(lines_text);
    for (std::string line; std::getline(lines, line);) {
        const size_t tab = line.find('\t');
        if (tab == std::string::npos) continue;
        const std::string kind = line.substr(0, tab);
        if (kind == "schema") {
            const size_t tab2 = line.find('\t', tab + 1);
            cases.push_back({line.substr(tab + 1, tab2 - tab - 1), line.substr(tab2 + 1), {}});
        } else if (!cases.empty() && (kind == "valid" || kind == "invalid")) {
            cases.back().instances.emplace_back(kind == "valid", line.substr(tab + 1));
        }
    }

    gpt2_json_schema_params params = gpt2_json_schema_default_params();
    params.any_order = params.integer_fraction = any_order;
    Totals t;
    for (const Case& c : cases) {
        t.schemas++;
        gpt2_grammar* grammar = nullptr;
        t0 = grammar_now_us();
        if (gpt2_grammar_from_json_schema(model, c.schema.data(), c.schema.size(), &params, &grammar, &err) != GPT2_OK) {
            t.compile_errors++;
            t.refused_keywords[refused_keyword(err.message)]++;
            if (list_failures) std::printf("compile error: %s: %s\n", c.name.c_str(), err.message);
            continue;
        }
        // the first mask, as the first step of a generation computes it
        std::string why_failing;
        std::vector<uint32_t> allowed(((size_t)model->n_vocab + 31) / 32);
        gpt2__grammar_matcher first_step;
        gpt2__matcher_begin(&first_step, grammar);
        const bool masked = gpt2__matcher_mask(&first_step, allowed.data(), &err) == GPT2_OK;
        t.ttfm_us.push_back(grammar_now_us() - t0);
        if (!masked) why_failing = err.message, t.mask_errors++;
        if (warm)
            for (const auto& instance : c.instances) feed_text(model, grammar, instance.second, [](double, double, const uint32_t*, size_t) {}, &err);
        for (const auto& instance : c.instances) {
            const std::string& text = instance.second;
            const FedText fed = feed_text(model, grammar, text, [&](double, double step_us, const uint32_t*, size_t) { t.tbm_us.push_back(step_us); }, &err);
            const bool accepted = fed.followed, incomplete = !fed.complete;
            if (fed.failed) {
                t.mask_errors++;
                if (why_failing.empty()) why_failing = "the grammar could not be followed: " + text.substr(0, 120);
            }
            if (instance.first) {
                t.valid++;
                t.valid_accepted += accepted;
                t.valid_incomplete += accepted && incomplete;
                if (!accepted) {
                    t.validation_errors++;
                    if (why_failing.empty()) why_failing = "valid instance refused: " + text.substr(0, 120);
                }
            } else {
                t.invalid++;
                t.invalid_refused += !accepted;
                if (accepted) {
                    t.invalidation_errors++;
                    if (why_failing.empty()) why_failing = "invalid instance accepted: " + text.substr(0, 120);
                }
            }
        }
        t.passing += why_failing.empty();
        if (!why_failing.empty() && list_failures) std::printf("failing: %s: %s\n", c.name.c_str(), why_failing.c_str());
        gpt2_grammar_free(grammar);
    }

    const double tbm50 = percentile(t.tbm_us, 0.5), tbm99 = percentile(t.tbm_us, 0.99), tbm_max = percentile(t.tbm_us, 1.0);
    const double ttfm50 = percentile(t.ttfm_us, 0.5), ttfm99 = percentile(t.ttfm_us, 0.99), ttfm_max = percentile(t.ttfm_us, 1.0);
    std::string keywords;
    std::vector<std::pair<size_t, std::string>> by_count;
    for (const auto& k : t.refused_keywords) by_count.emplace_back(k.second, k.first);
    std::sort(by_count.rbegin(), by_count.rend());
    for (size_t i = 0; i < by_count.size() && i < 10; i++) keywords += (i ? ", " : "") + by_count[i].second + " " + std::to_string(by_count[i].first);
    if (json) {
        std::printf("{\"schemas\": %zu, \"passing\": %zu, \"compile_errors\": %zu, \"validation_errors\": %zu, \"invalidation_errors\": %zu, "
                    "\"mask_errors\": %zu, \"valid_instances\": %zu, \"valid_accepted\": %zu, \"valid_accepted_incomplete\": %zu, "
                    "\"invalid_instances\": %zu, \"invalid_refused\": %zu, \"tokens\": %zu, \"tbm_us_p50\": %.2f, \"tbm_us_p99\": %.2f, "
                    "\"tbm_us_max\": %.1f, \"ttfm_us_p50\": %.1f, \"ttfm_us_p99\": %.1f, \"ttfm_us_max\": %.1f, \"token_trie_ms\": %.2f}\n",
                    t.schemas, t.passing, t.compile_errors, t.validation_errors, t.invalidation_errors, t.mask_errors, t.valid, t.valid_accepted,
                    t.valid_incomplete, t.invalid, t.invalid_refused, t.tbm_us.size(), tbm50, tbm99, tbm_max, ttfm50, ttfm99, ttfm_max, trie_ms);
    } else {
        std::printf("MaskBench: %zu schemas, GPT-2's vocabulary (trie built once: %.1f ms)\n", t.schemas, trie_ms);
        std::printf("  passing              %zu\n  compile errors       %zu (%s)\n", t.passing, t.compile_errors, keywords.c_str());
        std::printf("  validation errors    %zu (valid instances refused: %zu of %zu; accepted but not complete at their end: %zu)\n",
                    t.validation_errors, t.valid - t.valid_accepted, t.valid, t.valid_incomplete);
        std::printf("  invalidation errors  %zu (invalid instances accepted: %zu of %zu)\n", t.invalidation_errors, t.invalid - t.invalid_refused, t.invalid);
        std::printf("  grammars not followed (too ambiguous) %zu\n", t.mask_errors);
        std::printf("  TBM   p50 %.1f us, p99 %.1f us, max %.0f us over %zu tokens\n", tbm50, tbm99, tbm_max, t.tbm_us.size());
        std::printf("  TTFM  p50 %.0f us, p99 %.0f us, max %.0f us over %zu compiled schemas\n", ttfm50, ttfm99, ttfm_max, t.ttfm_us.size());
    }
    gpt2_model_free(model);
    return t.invalidation_errors == 0 && t.mask_errors == 0 ? 0 : 3;
}
