// Objects used after their free, freed twice, or outliving their model, in a release build: each
// call refuses them with an error that names what was freed, and nothing crashes (src/common.h's
// tags). This file holds a private copy of the implementation over an allocator that keeps freed
// blocks (as ASan's quarantine does, so the reads below stay defined) after scribbling over their
// first 16 bytes (as glibc's free writes its list pointers there), and that counts the blocks
// alive, so a test can tell that a model freed before its sessions was freed after them. It is a
// program of its own (gpt2-freed-objects-test): the suite's other copies of the implementation
// allocate with malloc, and the linker would merge their allocator templates with this one's.
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace quarantine {
bool keeping = false;           // freed blocks are kept (scribbled) instead of returned
long blocks_alive = 0;          // allocated and not yet freed
std::vector<void*> kept;        // the raw blocks kept; returned by release()
constexpr size_t prefix = 16;   // holds the block's size; keeps malloc's 16-byte alignment

void* allocate(size_t n) {
    char* raw = static_cast<char*>(std::malloc(n + prefix));
    if (!raw) return nullptr;
    std::memcpy(raw, &n, sizeof n);
    blocks_alive++;
    return raw + prefix;
}
void deallocate(void* p) {
    if (!p) return;
    char* raw = static_cast<char*>(p) - prefix;
    size_t n;
    std::memcpy(&n, raw, sizeof n);
    std::memset(p, 0xDB, n < 16 ? n : 16);
    blocks_alive--;
    if (keeping) kept.push_back(raw);
    else std::free(raw);
}
void release() {
    for (void* raw : kept) std::free(raw);
    kept.clear();
}
// Keeps freed blocks for the life of a test case.
struct Scope {
    Scope() { keeping = true; }
    ~Scope() {
        keeping = false;
        release();
    }
};
} // namespace quarantine

#define GPT2_MALLOC(size) quarantine::allocate(size)
#define GPT2_FREE(ptr) quarantine::deallocate(ptr)
#define GPT2_IMPLEMENTATION
#define GPT2_STATIC
#include "helpers.h"
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
#include <string>

namespace {
struct Log {
    std::vector<std::string> warnings;
    static void record(void* user, gpt2_log_level level, const char* message) {
        if (level == GPT2_LOG_WARNING) static_cast<Log*>(user)->warnings.push_back(message);
    }
};

gpt2_model* load_model(Log* log = nullptr) {
    gpt2_model_params params = gpt2_model_default_params();
    if (log) params.log = Log::record, params.log_user = log;
    gpt2_model* model = nullptr;
    gpt2_error err;
    REQUIRE(gpt2_model_load_file(test_model("shakespeare_char.gguf").c_str(), &params, &model, &err) == GPT2_OK);
    return model;
}

gpt2_session* new_session(gpt2_model* model) {
    gpt2_session_params params = gpt2_session_default_params();
    params.n_threads = 1;
    gpt2_session* session = nullptr;
    gpt2_error err;
    REQUIRE(gpt2_session_create(model, &params, &session, &err) == GPT2_OK);
    return session;
}

// The call returns `code`, and `e` holds it with a message containing `text`.
#define CHECK_ERROR_CALL(call, e, code, text) \
    do {                                       \
        CHECK((call) == (code));               \
        CHECK_ERROR(e, code, text);            \
    } while (0)

const char* const action_gbnf = "root ::= \"ACTION: \" (\"wave\" | \"flee\")";
} // namespace

TEST_CASE("a session used after gpt2_session_free is refused, and a second free does nothing") {
    quarantine::Scope scope;
    gpt2_model* model = load_model();
    gpt2_session* session = new_session(model);
    gpt2_error err;
    REQUIRE(gpt2_session_eval_text(session, "ROMEO:", &err) == GPT2_OK);
    gpt2_session_free(session);

    CHECK(gpt2_session_eval_text(session, "ROMEO:", &err) == GPT2_ERROR_INVALID_ARGUMENT);
    CHECK_ERROR(err, GPT2_ERROR_INVALID_ARGUMENT, "session was freed (gpt2_session_free) and cannot be used");
    gpt2_generate_params gen = gpt2_generate_default_params();
    gen.max_new_tokens = 4;
    CHECK_ERROR_CALL(gpt2_generate_text(session, "A", &gen, &err), err, GPT2_ERROR_INVALID_ARGUMENT, "session was freed");
    size_t n_bytes;
    CHECK_ERROR_CALL(gpt2_session_save(session, nullptr, 0, &n_bytes, &err), err, GPT2_ERROR_INVALID_ARGUMENT, "session was freed");
    gpt2_session* live = new_session(model);
    CHECK_ERROR_CALL(gpt2_session_copy(live, session, &err), err, GPT2_ERROR_INVALID_ARGUMENT, "src was freed");
    gpt2_session* batch[2] = {live, session};
    const int32_t one = 1;
    const int32_t* tokens[2] = {&one, &one};
    const size_t counts[2] = {1, 1};
    CHECK_ERROR_CALL(gpt2_batch_eval(batch, tokens, counts, 2, &err), err, GPT2_ERROR_INVALID_ARGUMENT, "sessions[1] was freed");
    CHECK(gpt2_session_n_tokens(session) == 0);
    CHECK(gpt2_session_tokens(session) == nullptr);
    CHECK(gpt2_session_logits(session) == nullptr);
    gpt2_session_reset(session);
    gpt2_session_free(session); // the second free: nothing

    gpt2_session_free(live);
    gpt2_model_free(model);
    CHECK(quarantine::blocks_alive == 0);
}

TEST_CASE("a model freed before its session, grammar and stage stays until they go; every call on them names its free") {
    quarantine::Scope scope;
    const long before = quarantine::blocks_alive;
    Log log;
    gpt2_model* model = load_model(&log);
    gpt2_session* session = new_session(model);
    gpt2_error err;
    gpt2_grammar* grammar = nullptr;
    REQUIRE(gpt2_grammar_from_gbnf(model, action_gbnf, nullptr, &grammar, &err) == GPT2_OK);
    gpt2_stage_params stage_params = gpt2_stage_default_params();
    stage_params.n_threads = 1;
    gpt2_stage* stage = nullptr;
    REQUIRE(gpt2_stage_create(model, &stage_params, &stage, &err) == GPT2_OK);

    gpt2_model_free(model);
    REQUIRE(log.warnings.size() == 1);
    CHECK(log.warnings[0].find("3 sessions, grammars or stages of this model are not freed yet") != std::string::npos);

    const char* model_freed = "model was freed (gpt2_model_free) before it";
    CHECK_ERROR_CALL(gpt2_session_eval_text(session, "ROMEO:", &err), err, GPT2_ERROR_INVALID_ARGUMENT, model_freed);
    CHECK(err.message == std::string("session's model was freed (gpt2_model_free) before it: free a model's sessions, grammars and stages first (their own free still works)"));
    gpt2_match match;
    CHECK_ERROR_CALL(gpt2_grammar_match(grammar, "ACTION: wave", 12, &match, &err), err, GPT2_ERROR_INVALID_ARGUMENT, "grammar's model was freed");
    size_t n_active;
    CHECK_ERROR_CALL(gpt2_stage_step(stage, 0, &n_active, &err), err, GPT2_ERROR_INVALID_ARGUMENT, "stage's model was freed");
    gpt2_session* another = nullptr;
    CHECK_ERROR_CALL(gpt2_session_create(model, nullptr, &another, &err), err, GPT2_ERROR_INVALID_ARGUMENT, "model was freed (gpt2_model_free) and cannot be used");
    CHECK(another == nullptr);
    int32_t ids[4];
    size_t n_ids;
    CHECK_ERROR_CALL(gpt2_tokenize(model, "A", 1, 0, ids, 4, &n_ids, &err), err, GPT2_ERROR_INVALID_ARGUMENT, "model was freed");
    CHECK(gpt2_model_get_info(model).n_vocab == 0);
    gpt2_model_free(model); // a second free: nothing

    gpt2_stage_free(stage);
    gpt2_grammar_free(grammar);
    CHECK(quarantine::blocks_alive > before); // the session still holds the model
    gpt2_session_free(session);
    CHECK(quarantine::blocks_alive == before); // its free freed the model too
}

TEST_CASE("a grammar, a stage and a model used after their free are refused; freeing them twice does nothing") {
    quarantine::Scope scope;
    gpt2_model* model = load_model();
    gpt2_error err;
    gpt2_grammar* grammar = nullptr;
    REQUIRE(gpt2_grammar_from_gbnf(model, action_gbnf, nullptr, &grammar, &err) == GPT2_OK);
    gpt2_grammar_free(grammar);
    gpt2_match match;
    CHECK_ERROR_CALL(gpt2_grammar_match(grammar, "ACTION: wave", 12, &match, &err), err, GPT2_ERROR_INVALID_ARGUMENT,
                     "grammar was freed (gpt2_grammar_free) and cannot be used");
    gpt2_session* session = new_session(model);
    gpt2_generate_params gen = gpt2_generate_default_params();
    gen.grammar = grammar;
    CHECK_ERROR_CALL(gpt2_generate_text(session, "A", &gen, &err), err, GPT2_ERROR_INVALID_ARGUMENT, "grammar was freed");
    CHECK(gpt2_session_n_tokens(session) == 0); // nothing changed
    gpt2_grammar_free(grammar);

    gpt2_stage* stage = nullptr;
    REQUIRE(gpt2_stage_create(model, nullptr, &stage, &err) == GPT2_OK);
    gpt2_stage_free(stage);
    CHECK_ERROR_CALL(gpt2_stage_add(stage, session, "A", nullptr, &err), err, GPT2_ERROR_INVALID_ARGUMENT, "stage was freed (gpt2_stage_free)");
    gpt2_stage_free(stage);

    gpt2_session_free(session);
    gpt2_model_free(model);
    CHECK(quarantine::blocks_alive == 0);
    CHECK_ERROR_CALL(gpt2_session_create(model, nullptr, &session, &err), err, GPT2_ERROR_INVALID_ARGUMENT, "model was freed (gpt2_model_free)");
    gpt2_model_free(model);
}

TEST_CASE("a pointer that was never an object is refused by its kind's check") {
    // Memory that holds no tag: what a freed object whose first bytes were reused looks like.
    std::vector<unsigned char> junk(4096, 0x5A);
    gpt2_error err;
    CHECK_ERROR_CALL(gpt2_session_eval_text(reinterpret_cast<gpt2_session*>(junk.data()), "A", &err), err, GPT2_ERROR_INVALID_ARGUMENT,
                     "session is not a live object made by gpt2_session_create");
    CHECK_ERROR_CALL(gpt2_tokenize(reinterpret_cast<gpt2_model*>(junk.data()), "A", 1, 0, nullptr, 0, nullptr, &err), err, GPT2_ERROR_INVALID_ARGUMENT,
                     "model is not a live object made by gpt2_model_load_file");
}
