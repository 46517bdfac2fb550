// gpt2_web.cpp - the C API made callable from JavaScript (built by examples/web/build.sh with
// Emscripten). One model and one session per module instance; the page (in its Web Worker, or on
// its own thread a frame budget at a time: web_stage_start) and the Node driver
// (examples/web/node_generate.js) are its users. Each generated token's text goes to the
// JavaScript function Module.onToken(id, text) as soon as it is sampled.
#define GPT2_IMPLEMENTATION
#include "gpt2.h"
#include "examples/cli.h"

#include <emscripten.h>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

// Hands one token to JavaScript. `text` is whole UTF-8 characters (gpt2_token_fn's promise), so
// decoding each piece on its own never splits a character.
EM_JS(void, web_emit_token, (int32_t id, const char* text, size_t len), {
    if (Module.onToken) Module.onToken(id, UTF8ToString(text, len));
});

// Hands one option, its text and its score, to JavaScript (web_choose).
EM_JS(void, web_emit_option, (int index, const char* text, double logprob), {
    if (Module.onOption) Module.onOption(index, UTF8ToString(text), logprob);
});

static gpt2_model* web_model;
static gpt2_session* web_session;
static gpt2_stage* web_stage;          // the page-thread mode's: web_session's line, stepped under a frame budget
static gpt2_grammar* web_line_grammar; // the grammar of the line on the stage, freed when it ends
static void* web_model_bytes; // gpt2_model_load_memory reads the weights in place: kept while the model lives
static gpt2_error web_error;

static int web_on_token(void*, int32_t id, const char* text, size_t len) {
    web_emit_token(id, text, len);
    return 0;
}

static int web_no_model() {
    gpt2__fail(&web_error, GPT2_ERROR_INVALID_ARGUMENT, "no model loaded: call web_load_model first");
    return GPT2_ERROR_INVALID_ARGUMENT;
}

// Ends the line on the stage, if any (its session as before it), and frees its grammar.
static void web_stage_end() {
    if (web_stage) gpt2_stage_cancel(web_stage, web_session, nullptr); // not on it: nothing to do
    gpt2_grammar_free(web_line_grammar);
    web_line_grammar = nullptr;
}

// web_generate's parameters, checked, with the grammar made for them (*made; the caller frees it).
static gpt2_result web_params(int n_tokens, float temperature, int top_k, double seed, const char* grammar, const char* json_schema,
                              gpt2_generate_params* p, gpt2_grammar** made) {
    *made = nullptr;
    const bool has_grammar = grammar && *grammar, has_schema = json_schema && *json_schema;
    if (has_grammar && has_schema) return gpt2__fail(&web_error, GPT2_ERROR_INVALID_ARGUMENT, "give a grammar or a JSON Schema, not both");
    *p = gpt2_generate_default_params();
    p->max_new_tokens = n_tokens;
    p->temperature = temperature;
    p->top_k = top_k;
    p->seed = (uint64_t)seed;
    p->on_token = web_on_token;
    if (has_grammar || has_schema) {
        const gpt2_result r = has_grammar ? gpt2_grammar_from_gbnf(web_model, grammar, nullptr, made, &web_error)
                                          : gpt2_grammar_from_json_schema(web_model, json_schema, std::strlen(json_schema), nullptr, made, &web_error);
        if (r != GPT2_OK) return r;
        p->grammar = *made;
    }
    return GPT2_OK;
}

extern "C" {

// The message of the last failed call.
EMSCRIPTEN_KEEPALIVE const char* web_last_error(void) { return web_error.message; }

// The name of the kernel set the module runs: "wasm_simd128", or "scalar" when built without
// -msimd128. The C API does not say; this file holds the implementation, so it asks dispatch.h.
EMSCRIPTEN_KEEPALIVE const char* web_kernels(void) { return gpt2__cpu_kernels().name; }

// Takes ownership of `bytes` (a GGUF file, allocated with malloc by the caller) and loads the
// model from it with one session, replacing any loaded before. Returns a gpt2_result.
EMSCRIPTEN_KEEPALIVE int web_load_model(void* bytes, size_t size) {
    web_stage_end();
    gpt2_stage_free(web_stage);
    web_stage = nullptr;
    gpt2_session_free(web_session);
    gpt2_model_free(web_model);
    std::free(web_model_bytes);
    web_session = nullptr;
    web_model = nullptr;
    web_model_bytes = bytes;
    gpt2_result r = gpt2_model_load_memory(bytes, size, nullptr, &web_model, &web_error);
    // As the REPL does: when the context is full, drop its older half at once (one recomputing
    // pass per n_ctx / 2 tokens) instead of recomputing the whole window for every new token.
    // The CLI gives the same tokens with --context-policy discard.
    gpt2_session_params sp = gpt2_session_default_params();
    sp.context_policy = GPT2_CONTEXT_DISCARD;
    if (r == GPT2_OK) r = gpt2_session_create(web_model, &sp, &web_session, &web_error);
    return r;
}

// Forgets the conversation, then generates up to n_tokens after `prompt` (UTF-8), sampling with
// temperature, top_k and seed (a double: JavaScript numbers hold integers up to 2^53 exactly);
// the text follows `grammar` (GBNF) or `json_schema` (a JSON Schema; "" for both = free text),
// made for this call (a fraction of a millisecond; the first also builds the vocabulary's trie).
// Returns a gpt2_result; web_last_error() says why on failure (a bad grammar: its line and
// column; a schema's keyword that cannot be enforced: its JSON pointer).
EMSCRIPTEN_KEEPALIVE int web_generate(const char* prompt, int n_tokens, float temperature, int top_k, double seed,
                                      const char* grammar, const char* json_schema) {
    if (!web_session) return web_no_model();
    web_stage_end();
    gpt2_session_reset(web_session);
    gpt2_generate_params p;
    gpt2_grammar* made;
    gpt2_result r = web_params(n_tokens, temperature, top_k, seed, grammar, json_schema, &p, &made);
    if (r == GPT2_OK) r = gpt2_generate_text(web_session, prompt, &p, &web_error);
    gpt2_grammar_free(made);
    return r;
}

// web_generate for a page without a Worker: starts the same generation on a stage and returns at
// once; the page then calls web_stage_step once a frame until it returns 0. The same tokens as
// web_generate's. Returns a gpt2_result.
EMSCRIPTEN_KEEPALIVE int web_stage_start(const char* prompt, int n_tokens, float temperature, int top_k, double seed,
                                         const char* grammar, const char* json_schema) {
    if (!web_session) return web_no_model();
    web_stage_end();
    gpt2_session_reset(web_session);
    gpt2_stage_params sp = gpt2_stage_default_params();
    sp.n_threads = 1; // the page's own thread: WebAssembly here has no others
    gpt2_generate_params p;
    gpt2_result r = web_stage ? GPT2_OK : gpt2_stage_create(web_model, &sp, &web_stage, &web_error);
    if (r == GPT2_OK) r = web_params(n_tokens, temperature, top_k, seed, grammar, json_schema, &p, &web_line_grammar);
    if (r == GPT2_OK) r = gpt2_stage_add(web_stage, web_session, prompt, &p, &web_error);
    if (r != GPT2_OK) web_stage_end();
    return r;
}

// Runs at most about budget_us microseconds of the line's generation (tokens reach
// Module.onToken), then returns: 1 while the line goes on, 0 once it has ended, -1 on failure
// (web_last_error() says why).
EMSCRIPTEN_KEEPALIVE int web_stage_step(double budget_us) {
    if (!web_stage) {
        gpt2__fail(&web_error, GPT2_ERROR_INVALID_ARGUMENT, "no generation started: call web_stage_start first");
        return -1;
    }
    size_t n_active = 0;
    if (gpt2_stage_step(web_stage, (int64_t)budget_us, &n_active, &web_error) != GPT2_OK) {
        web_stage_end();
        return -1;
    }
    if (n_active == 0) web_stage_end();
    return n_active > 0;
}

// Stops the line on the stage (the page's Stop button): the conversation as before it started.
EMSCRIPTEN_KEEPALIVE void web_stage_stop(void) { web_stage_end(); }

// Forgets the conversation, reads `prompt`, and scores each of `options` (split at '|' by the
// CLI's cli_split_options) as its continuation (gpt2_choose): Module.onOption(index, text, logprob)
// for each in order, then returns the index of the most likely (ties: the lower), or -1 on failure
// (web_last_error() says why).
EMSCRIPTEN_KEEPALIVE int web_choose(const char* prompt, const char* options) {
    if (!web_session) {
        web_no_model();
        return -1;
    }
    gpt2_session_reset(web_session);
    const std::vector<std::string> texts = cli_split_options(options);
    std::vector<const char*> pointers;
    for (const std::string& text : texts) pointers.push_back(text.c_str());
    size_t n_prompt = 0;
    if (gpt2_tokenize(web_model, prompt, std::strlen(prompt), 0, nullptr, 0, &n_prompt, &web_error) != GPT2_OK) return -1;
    if (n_prompt == 0) {
        gpt2__fail(&web_error, GPT2_ERROR_INVALID_ARGUMENT, "the prompt is empty: the options are scored as its continuation, so give it some text");
        return -1;
    }
    std::vector<int32_t> ids(n_prompt);
    std::vector<float> logprobs(texts.size());
    size_t best = 0;
    if (gpt2_tokenize(web_model, prompt, std::strlen(prompt), 0, ids.data(), ids.size(), &n_prompt, &web_error) != GPT2_OK ||
        gpt2_session_eval(web_session, ids.data(), ids.size(), &web_error) != GPT2_OK ||
        gpt2_choose(web_session, pointers.data(), pointers.size(), logprobs.data(), &best, &web_error) != GPT2_OK)
        return -1;
    for (size_t i = 0; i < texts.size(); i++) web_emit_option((int)i, texts[i].c_str(), logprobs[i]);
    return (int)best;
}

} // extern "C"
