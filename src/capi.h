#ifndef GPT2__PART_CAPI_H
#define GPT2__PART_CAPI_H
#include "generate.h"
#include "state.h"
#include "cpu/backend_cpu.h"
#include "grammar/json_schema.h"

/* The C API: argument checks, then the parts above. */

/* No exception may cross the C boundary: with exceptions enabled, a failed allocation inside a
   container becomes GPT2_ERROR_OUT_OF_MEMORY. */
#if defined(__cpp_exceptions)
#define GPT2__GUARD_BEGIN try {
#define GPT2__GUARD_END(err)                                                                       \
    }                                                                                              \
    catch (const std::bad_alloc&) { return gpt2__fail(err, GPT2_ERROR_OUT_OF_MEMORY, "out of memory"); } \
    catch (...) { return gpt2__fail(err, GPT2_ERROR_INTERNAL, "internal error (an unexpected exception); please report it"); }
#else
#define GPT2__GUARD_BEGIN
#define GPT2__GUARD_END(err)
#endif

GPT2_DEF const char* gpt2_result_string(gpt2_result result) {
    switch (result) {
    case GPT2_OK: return "ok";
    case GPT2_ERROR_INVALID_ARGUMENT: return "invalid argument";
    case GPT2_ERROR_IO: return "input/output error";
    case GPT2_ERROR_BAD_FILE: return "bad model file";
    case GPT2_ERROR_UNSUPPORTED: return "unsupported";
    case GPT2_ERROR_OUT_OF_MEMORY: return "out of memory";
    case GPT2_ERROR_BAD_TOKEN: return "token out of range";
    case GPT2_ERROR_CONTEXT_FULL: return "context full";
    case GPT2_ERROR_NO_VOCABULARY: return "model has no vocabulary";
    case GPT2_ERROR_BAD_TEXT: return "text cannot be encoded";
    case GPT2_ERROR_DEVICE: return "device error";
    case GPT2_ERROR_ABORTED: return "aborted";
    case GPT2_ERROR_INTERNAL: return "internal error";
    case GPT2_ERROR_BUSY: return "session busy";
    case GPT2_ERROR_BAD_GRAMMAR: return "bad grammar";
    case GPT2_ERROR_BAD_STATE: return "bad session state";
    case GPT2__RESULT_RANGE: break;
    }
    return "unknown result";
}

GPT2_DEF const char* gpt2_end_string(gpt2_end end) {
    switch (end) {
    case GPT2_END_MAX_TOKENS: return "max_tokens";
    case GPT2_END_GRAMMAR: return "grammar";
    case GPT2_END_STOP: return "stop";
    case GPT2_END_EOS: return "eos";
    case GPT2_END_CALLBACK: return "callback";
    case GPT2_END_ABORTED: return "aborted";
    case GPT2_END_ERROR: return "error";
    }
    return "unknown end";
}

#define GPT2__STRINGIFY2(x) #x
#define GPT2__STRINGIFY(x) GPT2__STRINGIFY2(x)

GPT2_DEF int gpt2_version(void) { return GPT2_VERSION; }

GPT2_DEF const char* gpt2_version_string(void) {
    return GPT2__STRINGIFY(GPT2_VERSION_MAJOR) "." GPT2__STRINGIFY(GPT2_VERSION_MINOR) "." GPT2__STRINGIFY(GPT2_VERSION_PATCH);
}

GPT2_DEF gpt2_result gpt2_check_abi(int version, size_t model_params_size, size_t session_params_size,
                                    size_t generate_params_size, size_t model_info_size, gpt2_error* err) {
    const int major = version / 10000, minor = version / 100 % 100;
    if (version < 0 || major != GPT2_VERSION_MAJOR || (major == 0 && minor != GPT2_VERSION_MINOR))
        return gpt2__fail(err, GPT2_ERROR_UNSUPPORTED,
                          "the caller was written for gpt2.h %d.%d.%d, this library is %s: use a binding or header of version %d.%d",
                          major, minor, version % 100, gpt2_version_string(), GPT2_VERSION_MAJOR, GPT2_VERSION_MINOR);
    const struct {
        const char* name;
        size_t caller, ours;
    } sizes[] = {{"gpt2_model_params", model_params_size, sizeof(gpt2_model_params)},
                 {"gpt2_session_params", session_params_size, sizeof(gpt2_session_params)},
                 {"gpt2_generate_params", generate_params_size, sizeof(gpt2_generate_params)},
                 {"gpt2_model_info", model_info_size, sizeof(gpt2_model_info)}};
    for (const auto& s : sizes) {
        if (s.caller != s.ours)
            return gpt2__fail(err, GPT2_ERROR_UNSUPPORTED,
                              "sizeof(%s) is %zu bytes in the caller, %zu in this library (gpt2.h %s): the caller's declaration does not match this version's",
                              s.name, s.caller, s.ours, gpt2_version_string());
    }
    return gpt2__ok(err);
}

/* A zero-initialised struct means the defaults (src/api.h, PARAMETERS): these say so once. */
GPT2_DEF gpt2_model_params gpt2_model_default_params(void) {
    gpt2_model_params p;
    std::memset(&p, 0, sizeof p); /* mapped file, the CPU, no log */
    return p;
}

GPT2_DEF gpt2_session_params gpt2_session_default_params(void) {
    gpt2_session_params p;
    std::memset(&p, 0, sizeof p); /* all cores, the model's n_ctx, f32 cache, GPT2_CONTEXT_EXACT, no abort_fn */
    return p;
}

GPT2_DEF gpt2_generate_params gpt2_generate_default_params(void) {
    gpt2_generate_params p;
    std::memset(&p, 0, sizeof p); /* no callbacks; every control of the sampling chain off */
    p.max_new_tokens = 256;
    p.temperature = 0.8f; /* nanoGPT sample.py's defaults */
    p.top_k = 200;
    p.seed = 1337;
    return p;
}

static gpt2_result gpt2__check_device(const gpt2_model_params* params, gpt2_error* err) {
    if (!params || gpt2__device_backend(params->device)) return GPT2_OK;
    return gpt2__fail(err, GPT2_ERROR_UNSUPPORTED, "device %d is not available in this build (include gpt2_cuda.cuh for CUDA)", (int)params->device);
}

/* Loading done: give the model's backend its copy of the weights (frees the model on failure). */
static gpt2_result gpt2__model_attach_device(gpt2_model* m, gpt2_error* err) {
    const gpt2_result res = m->backend->model_attach(m, err);
    if (res != GPT2_OK) gpt2__model_destroy(m);
    return res;
}

GPT2_DEF gpt2_result gpt2_model_load_file(const char* path, const gpt2_model_params* params, gpt2_model** out_model, gpt2_error* err) {
    if (!out_model) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "out_model is NULL");
    *out_model = nullptr;
    if (!path || !*path) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "model path is %s", path ? "empty" : "NULL");
    GPT2__TRY(gpt2__check_device(params, err));
    GPT2__GUARD_BEGIN
    gpt2_model* m = gpt2__model_new(params);
    if (!m) return gpt2__fail(err, GPT2_ERROR_OUT_OF_MEMORY, "out of memory");
    m->backend = gpt2__device_backend(m->params.device);
    gpt2_result res = gpt2__file_open(path, m->params.no_mmap == 0, &m->file, err);
    if (res == GPT2_OK) res = gpt2__model_init(m, err);
    if (res != GPT2_OK) {
        if (err && res != GPT2_ERROR_IO && std::strncmp(err->message, path, std::strlen(path)) != 0) {
            gpt2__string message = gpt2__string(path) + ": " + err->message;
            std::snprintf(err->message, sizeof err->message, "%s", message.c_str());
        }
        gpt2__model_destroy(m);
        return res;
    }
    GPT2__TRY(gpt2__model_attach_device(m, err));
    *out_model = m;
    return gpt2__ok(err);
    GPT2__GUARD_END(err)
}

GPT2_DEF gpt2_result gpt2_model_load_memory(const void* data, size_t size, const gpt2_model_params* params, gpt2_model** out_model, gpt2_error* err) {
    if (!out_model) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "out_model is NULL");
    *out_model = nullptr;
    if (!data || size == 0) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "model buffer is %s", data ? "empty" : "NULL");
    GPT2__TRY(gpt2__check_device(params, err));
    GPT2__GUARD_BEGIN
    gpt2_model* m = gpt2__model_new(params);
    if (!m) return gpt2__fail(err, GPT2_ERROR_OUT_OF_MEMORY, "out of memory");
    m->backend = gpt2__device_backend(m->params.device);
    m->file.size = size;
    if ((uintptr_t)data % 64 == 0) {
        m->file.data = (const uint8_t*)data;
    } else { /* tensors must be aligned for float access: copy a misaligned buffer */
        m->file.owned = GPT2_MALLOC(size);
        if (!m->file.owned) {
            gpt2__model_destroy(m);
            return gpt2__fail(err, GPT2_ERROR_OUT_OF_MEMORY, "cannot allocate %zu bytes to align the model buffer", size);
        }
        std::memcpy(m->file.owned, data, size);
        m->file.data = (const uint8_t*)m->file.owned;
    }
    gpt2_result res = gpt2__model_init(m, err);
    if (res != GPT2_OK) {
        gpt2__model_destroy(m);
        return res;
    }
    GPT2__TRY(gpt2__model_attach_device(m, err));
    *out_model = m;
    return gpt2__ok(err);
    GPT2__GUARD_END(err)
}

GPT2_DEF void gpt2_model_free(gpt2_model* model) {
    if (!model || model->tag != GPT2__TAG_MODEL) return; /* NULL, or freed already */
    model->tag = GPT2__TAG_FREED;
    const int holders = model->n_refs.load() - 1;
    if (holders > 0) /* their calls now fail, naming the model's free; the last one's free frees the model */
        gpt2__log(model->params, GPT2_LOG_WARNING, "gpt2_model_free: %d sessions, grammars or stages of this model are not freed yet: it stays in memory until they are", holders);
    gpt2__model_unref(model);
}

GPT2_DEF gpt2_model_info gpt2_model_get_info(const gpt2_model* m) {
    gpt2_model_info info;
    std::memset(&info, 0, sizeof info);
    if (gpt2__check_model(m, nullptr) != GPT2_OK) return info;
    info.name = m->name.c_str();
    info.n_vocab = m->n_vocab;
    info.n_vocab_rows = m->n_vocab_rows;
    info.n_ctx = m->n_ctx;
    info.n_embd = m->n_embd;
    info.n_layer = m->n_layer;
    info.n_head = m->n_head;
    info.weight_type = m->weight_type;
    info.tokenizer = m->tokenizer.kind;
    info.eos_token = m->tokenizer.eos;
    info.weight_bytes = m->weight_bytes;
    return info;
}

static gpt2_result gpt2__tokenize(const gpt2_model* m, const char* text, size_t len, bool allow_special, gpt2__vector<int32_t>* ids, gpt2_error* err) {
    if (m->tokenizer.kind == GPT2_TOKENIZER_NONE)
        return gpt2__fail(err, GPT2_ERROR_NO_VOCABULARY, "this model has no vocabulary: give token ids, or convert it with a vocabulary (tools/convert.py --meta or --vocab)");
    if (!text && len) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "text is NULL");
    return gpt2__tokenizer_encode(&m->tokenizer, text, len, allow_special, ids, err);
}

GPT2_DEF gpt2_result gpt2_tokenize(const gpt2_model* m, const char* text, size_t len, int allow_special, int32_t* tokens, size_t capacity, size_t* n_tokens, gpt2_error* err) {
    GPT2__TRY(gpt2__check_model(m, err));
    if (!tokens && capacity) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "tokens is NULL but capacity is %zu", capacity);
    GPT2__GUARD_BEGIN
    gpt2__vector<int32_t> ids;
    GPT2__TRY(gpt2__tokenize(m, text, len, allow_special != 0, &ids, err));
    if (n_tokens) *n_tokens = ids.size();
    if (capacity && !ids.empty()) std::memcpy(tokens, ids.data(), std::min(capacity, ids.size()) * sizeof(int32_t));
    return gpt2__ok(err);
    GPT2__GUARD_END(err)
}

GPT2_DEF gpt2_result gpt2_detokenize(const gpt2_model* m, const int32_t* tokens, size_t n, char* text, size_t capacity, size_t* n_bytes, gpt2_error* err) {
    GPT2__TRY(gpt2__check_model(m, err));
    if ((!tokens && n) || (!text && capacity)) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "tokens or text is NULL");
    if (m->tokenizer.kind == GPT2_TOKENIZER_NONE)
        return gpt2__fail(err, GPT2_ERROR_NO_VOCABULARY, "this model has no vocabulary to decode with");
    GPT2__TRY(gpt2__check_tokens(m, tokens, n, err));
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        std::string_view bytes = gpt2__tokenizer_token_bytes(&m->tokenizer, tokens[i]);
        if (total < capacity) std::memcpy(text + total, bytes.data(), std::min(bytes.size(), capacity - total));
        total += bytes.size();
    }
    if (n_bytes) *n_bytes = total;
    return gpt2__ok(err);
}

GPT2_DEF gpt2_result gpt2_session_create(const gpt2_model* model, const gpt2_session_params* params, gpt2_session** out_session, gpt2_error* err) {
    if (!out_session) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "out_session is NULL");
    *out_session = nullptr;
    GPT2__TRY(gpt2__check_model(model, err));
    const gpt2_session_params p = params ? *params : gpt2_session_default_params();
    if (p.n_threads < 0 || p.n_threads > 1024) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "n_threads is %d; expected 0 (all cores) to 1024", p.n_threads);
    if (p.n_ctx < 0 || p.n_ctx > model->n_ctx)
        return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "n_ctx is %d; expected 0 (the model's) to the model's context length %d", p.n_ctx, model->n_ctx);
    const int n_ctx = p.n_ctx ? p.n_ctx : model->n_ctx;
    static_assert(sizeof(gpt2_context_policy) == sizeof(int), "enums are ints in the C ABIs we support");
    int policy; /* read as an int: a C caller may pass any value, which is no valid C++ enum value */
    std::memcpy(&policy, &p.context_policy, sizeof policy);
    if (policy != GPT2_CONTEXT_EXACT && policy != GPT2_CONTEXT_DISCARD)
        return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "context_policy is %d; expected GPT2_CONTEXT_EXACT (0) or GPT2_CONTEXT_DISCARD (1)", policy);
    if (p.n_keep < 0 || p.n_keep >= n_ctx) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "n_keep is %d; expected 0 to n_ctx - 1 = %d", p.n_keep, n_ctx - 1);
    if (p.n_discard < 0 || p.n_discard > n_ctx - p.n_keep)
        return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "n_discard is %d; expected 0 (half) to n_ctx - n_keep = %d", p.n_discard, n_ctx - p.n_keep);
    GPT2__GUARD_BEGIN
    GPT2__TRY(model->backend->session_create(model, p, out_session, err));
    return gpt2__ok(err);
    GPT2__GUARD_END(err)
}

GPT2_DEF void gpt2_session_free(gpt2_session* session) {
    if (!session || session->tag != GPT2__TAG_SESSION) return; /* NULL, or freed already */
    /* Freeing a session that a call is using pulls its memory from under that call: caught in debug builds. */
    GPT2_ASSERT(session->user.load() == std::thread::id() && "gpt2_session_free: a call is still using this session");
    session->backend->session_free(session);
}

/* Empties the context: gpt2_session_reset, and the calls that start from nothing. */
static void gpt2__session_clear(gpt2_session* s) {
    s->tokens.clear();
    s->n_cached = 0;
    s->has_logits = false;
    s->stream = gpt2__utf8_stream();
}

GPT2_DEF void gpt2_session_reset(gpt2_session* s) {
    if (gpt2__check_session(s, "session", nullptr) != GPT2_OK) return;
    gpt2__session_use use(s, false);
    if (use.allowed()) gpt2__session_clear(s); /* else another call is using it: that call's result stands */
}

GPT2_DEF size_t gpt2_session_n_tokens(const gpt2_session* s) { return gpt2__check_session(s, "session", nullptr) == GPT2_OK ? s->tokens.size() : 0; }

GPT2_DEF const int32_t* gpt2_session_tokens(const gpt2_session* s) { return gpt2__check_session(s, "session", nullptr) == GPT2_OK ? s->tokens.data() : nullptr; }

GPT2_DEF gpt2_result gpt2_session_save(const gpt2_session* session, void* buf, size_t capacity, size_t* n_bytes, gpt2_error* err) {
    GPT2__TRY(gpt2__check_session(session, "session", err));
    if (!buf && capacity) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "buf is NULL but capacity is %zu", capacity);
    if (!n_bytes && !capacity) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "n_bytes is NULL: nowhere to put the size needed");
    GPT2__USE_SESSION(session, true, err);
    gpt2_session* s = const_cast<gpt2_session*>(session); /* a device may copy its logits to the host */
    const size_t size = gpt2__state_size(s);
    if (n_bytes) *n_bytes = size;
    if (capacity == 0) return gpt2__ok(err);
    if (capacity < size) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "buffer of %zu bytes; the state needs %zu (call with capacity 0 to ask)", capacity, size);
    GPT2__GUARD_BEGIN
    GPT2__TRY(gpt2__state_write(s, (uint8_t*)buf, err));
    return gpt2__ok(err);
    GPT2__GUARD_END(err)
}

GPT2_DEF gpt2_result gpt2_session_load(gpt2_session* s, const void* buf, size_t n_bytes, gpt2_error* err) {
    GPT2__TRY(gpt2__check_session(s, "session", err));
    if (!buf) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "buf is NULL");
    GPT2__USE_SESSION(s, false, err);
    GPT2__GUARD_BEGIN
    gpt2__state_view v;
    GPT2__TRY(gpt2__state_check(s, (const uint8_t*)buf, n_bytes, &v, err));
    GPT2__TRY(gpt2__state_apply(s, v, err));
    return gpt2__ok(err);
    GPT2__GUARD_END(err)
}

GPT2_DEF gpt2_result gpt2_session_copy(gpt2_session* dst, const gpt2_session* src, gpt2_error* err) {
    GPT2__TRY(gpt2__check_session(dst, "dst", err));
    GPT2__TRY(gpt2__check_session(src, "src", err));
    if (dst == src) return gpt2__ok(err);
    gpt2__session_use use_dst(dst, false), use_src(src, true);
    if (!use_dst.allowed()) return gpt2__busy(err, "dst");
    if (!use_src.allowed()) return gpt2__busy(err, "src");
    if (dst->model != src->model) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "dst and src are sessions of different models");
    if (src->tokens.size() > (size_t)dst->n_ctx)
        return gpt2__fail(err, GPT2_ERROR_CONTEXT_FULL, "src holds %zu tokens but dst's context is %d", src->tokens.size(), dst->n_ctx);
    GPT2__GUARD_BEGIN
    GPT2__TRY(gpt2__session_copy(dst, const_cast<gpt2_session*>(src), err)); /* a device may copy src's logits to the host */
    return gpt2__ok(err);
    GPT2__GUARD_END(err)
}

GPT2_DEF gpt2_result gpt2_session_truncate(gpt2_session* s, size_t n_tokens, gpt2_error* err) {
    GPT2__TRY(gpt2__check_session(s, "session", err));
    GPT2__USE_SESSION(s, false, err);
    if (n_tokens > s->tokens.size())
        return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "n_tokens is %zu but the context holds %zu", n_tokens, s->tokens.size());
    if (n_tokens == 0) {
        gpt2__session_clear(s);
        return gpt2__ok(err);
    }
    if (n_tokens == s->tokens.size() && s->has_logits) return gpt2__ok(err);
    GPT2__GUARD_BEGIN
    /* the last token kept is run again for its logits (its cache row is rewritten, the same) */
    s->tokens.resize(n_tokens);
    s->n_cached = std::min(s->n_cached, (int)n_tokens - 1);
    s->stream = gpt2__utf8_stream();
    int (*abort_fn)(void*) = s->abort_fn;
    s->abort_fn = nullptr; /* a rewind is short and is not to be left half-done */
    const gpt2_result res = s->backend->run(s, err);
    s->abort_fn = abort_fn;
    if (res != GPT2_OK) {
        gpt2__session_clear(s);
        return res;
    }
    s->n_cached = (int)n_tokens;
    s->has_logits = true;
    return gpt2__ok(err);
    GPT2__GUARD_END(err)
}

GPT2_DEF gpt2_result gpt2_session_eval(gpt2_session* s, const int32_t* tokens, size_t n, gpt2_error* err) {
    GPT2__TRY(gpt2__check_session(s, "session", err));
    if (!tokens && n) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "tokens is NULL");
    if (n == 0) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "no tokens to evaluate");
    GPT2__USE_SESSION(s, false, err);
    GPT2__GUARD_BEGIN
    GPT2__TRY(gpt2__session_append(s, tokens, n, err));
    return gpt2__ok(err);
    GPT2__GUARD_END(err)
}

GPT2_DEF gpt2_result gpt2_session_eval_text(gpt2_session* s, const char* text, gpt2_error* err) {
    GPT2__TRY(gpt2__check_session(s, "session", err));
    if (!text) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "text is NULL");
    if (!*text) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "text is empty: nothing to evaluate");
    GPT2__GUARD_BEGIN
    gpt2__vector<int32_t> ids;
    GPT2__TRY(gpt2__tokenize(s->model, text, std::strlen(text), false, &ids, err));
    return gpt2_session_eval(s, ids.data(), ids.size(), err);
    GPT2__GUARD_END(err)
}

GPT2_DEF const float* gpt2_session_logits(const gpt2_session* s) {
    /* const for the caller; a device session may copy its logits into host memory here */
    if (gpt2__check_session(s, "session", nullptr) != GPT2_OK) return nullptr;
    gpt2__session_use use(s, true);
    return use.allowed() && s->has_logits ? s->backend->logits(const_cast<gpt2_session*>(s)) : nullptr;
}

GPT2_DEF gpt2_result gpt2_score(gpt2_session* s, const int32_t* tokens, size_t n, double* out_logprob_sum, gpt2_error* err) {
    GPT2__TRY(gpt2__check_session(s, "session", err));
    if (!out_logprob_sum) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "out_logprob_sum is NULL");
    if (!tokens || n == 0) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "no tokens to score");
    GPT2__TRY(gpt2__check_tokens(s->model, tokens, n, err));
    GPT2__USE_SESSION(s, false, err);
    GPT2__GUARD_BEGIN
    gpt2__session_clear(s);
    const size_t first = std::min(n, (size_t)s->n_ctx);
    GPT2__TRY(gpt2__session_append(s, tokens, first, err));
    double sum = 0.0;
    GPT2__TRY(s->backend->window_logprob(s, tokens, first, &sum, err)); /* every position of the first window, from one pass */
    for (size_t t = first; t < n; t++) { /* past n_ctx: nanoGPT's sliding window, one step each */
        const float* logits = s->backend->logits(s);
        if (!logits) return gpt2__fail(err, GPT2_ERROR_DEVICE, "the %s backend could not return the logits", s->backend->name);
        sum += gpt2__log_prob(logits, s->model->n_vocab, tokens[t]);
        if (t + 1 < n) GPT2__TRY(gpt2__session_append(s, tokens + t, 1, err));
    }
    gpt2__session_clear(s);
    *out_logprob_sum = sum;
    return gpt2__ok(err);
    GPT2__GUARD_END(err)
}

GPT2_DEF gpt2_result gpt2_sample(const float* logits, int n, float temperature, int top_k, uint64_t* rng_state, int32_t* out_token, gpt2_error* err) {
    if (!logits || !rng_state || !out_token || n <= 0) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "logits, rng_state or out_token is NULL, or n <= 0");
    GPT2__TRY(gpt2__check_sampling(temperature, top_k, err));
    GPT2__GUARD_BEGIN
    gpt2__vector<float> scratch((size_t)n);
    *out_token = gpt2__sample(logits, n, temperature, top_k, rng_state, scratch.data());
    return gpt2__ok(err);
    GPT2__GUARD_END(err)
}

enum { GPT2__MAX_NEW_TOKENS = 1 << 24 };

static gpt2_result gpt2__check_stops(const gpt2_generate_params& p, const gpt2_model* m, gpt2_error* err) {
    if (!p.stop && p.n_stop) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "stop is NULL but n_stop is %zu", p.n_stop);
    for (size_t i = 0; i < p.n_stop; i++)
        if (!p.stop[i] || !*p.stop[i]) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "stop[%zu] is %s; expected a string of at least one byte", i, p.stop[i] ? "empty" : "NULL");
    if (p.n_stop && m->tokenizer.kind == GPT2_TOKENIZER_NONE)
        return gpt2__fail(err, GPT2_ERROR_NO_VOCABULARY, "stop strings need a vocabulary and this model has none: watch the token ids in on_token instead");
    return GPT2_OK;
}

static gpt2_result gpt2__check_grammar(const gpt2_grammar* g, gpt2_error* err) {
    GPT2__TRY(gpt2__check_tag(g, GPT2__TAG_GRAMMAR, "grammar", "gpt2_grammar_from_gbnf or gpt2_grammar_from_json_schema", "gpt2_grammar_free", err));
    return gpt2__check_model_of(g->model, "grammar", err);
}

/* gpt2_generate's checks of its parameters (NULL: the defaults), filled in: *out. */
static gpt2_result gpt2__check_generate(const gpt2_session* s, const gpt2_generate_params* params, gpt2_generate_params* out, gpt2_error* err) {
    gpt2_generate_params p = params ? *params : gpt2_generate_default_params();
    GPT2__TRY(gpt2__check_sampling(p.temperature, p.top_k, err));
    GPT2__TRY(gpt2__check_chain(p, s->model->n_vocab, err));
    GPT2__TRY(gpt2__check_stops(p, s->model, err));
    if (p.grammar) GPT2__TRY(gpt2__check_grammar(p.grammar, err));
    if (p.grammar && p.grammar->model != s->model)
        return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "grammar was made for another model than the session's (a grammar knows its model's vocabulary)");
    if (p.max_new_tokens < 0 || p.max_new_tokens > GPT2__MAX_NEW_TOKENS)
        return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "max_new_tokens is %d; expected 0 (only evaluate the prompt) to %d", p.max_new_tokens,
                          (int)GPT2__MAX_NEW_TOKENS);
    *out = p;
    return GPT2_OK;
}

GPT2_DEF gpt2_result gpt2_generate(gpt2_session* s, const int32_t* prompt, size_t n_prompt, const gpt2_generate_params* params, int32_t* out_tokens, size_t capacity,
                                   size_t* n_generated, gpt2_error* err) {
    if (n_generated) *n_generated = 0;
    GPT2__TRY(gpt2__check_session(s, "session", err));
    if (!prompt && n_prompt) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "prompt is NULL");
    gpt2_generate_params p;
    GPT2__TRY(gpt2__check_generate(s, params, &p, err));
    GPT2__USE_SESSION(s, false, err);
    if (n_prompt == 0 && s->tokens.empty())
        return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "empty prompt: generation needs at least one token of context");
    GPT2__GUARD_BEGIN
    gpt2__vector<gpt2__checkpoint> before; /* to undo the call when abort_fn stops it */
    GPT2__TRY(gpt2__checkpoints_take(&s, 1, &before, err));
    GPT2__TRY(gpt2__check_tokens(s->model, prompt, n_prompt, err));
    gpt2__line line;
    line.prompt.assign(prompt, prompt + n_prompt);
    gpt2__generator_begin(&line.g, s, p, out_tokens, capacity, n_generated);
    gpt2_error own; /* on_end hears the message when the caller passes no err */
    if (!err) err = &own;
    gpt2_result res = gpt2__generate(s, &line, 1, err);
    if (res == GPT2_ERROR_ABORTED && n_generated) *n_generated = 0;
    res = gpt2__undo_if_aborted(res, &s, 1, &before, err);
    gpt2__line_over(&line, res, err->message);
    return res == GPT2_OK ? gpt2__ok(err) : res;
    GPT2__GUARD_END(err)
}

GPT2_DEF gpt2_result gpt2_generate_text(gpt2_session* s, const char* prompt, const gpt2_generate_params* params, gpt2_error* err) {
    GPT2__TRY(gpt2__check_session(s, "session", err));
    if (!prompt) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "prompt is NULL");
    GPT2__GUARD_BEGIN
    gpt2__vector<int32_t> ids;
    GPT2__TRY(gpt2__tokenize(s->model, prompt, std::strlen(prompt), false, &ids, err));
    return gpt2_generate(s, ids.data(), ids.size(), params, nullptr, 0, nullptr, err);
    GPT2__GUARD_END(err)
}

/* ---- Grammars ---------------------------------------------------------------------------- */

GPT2_DEF void gpt2_grammar_free(gpt2_grammar* grammar) {
    if (!grammar || grammar->tag != GPT2__TAG_GRAMMAR) return; /* NULL, or freed already */
    const gpt2_model* model = grammar->model;
    grammar->tag = GPT2__TAG_FREED;
    gpt2__context_maker_free(grammar->context_maker);
    grammar->~gpt2_grammar();
    GPT2_FREE(grammar);
    gpt2__model_unref(model);
}

/* gpt2_grammar_from_gbnf; `what` begins the message of a grammar the vocabulary cannot write
   ("grammar", "json schema"). */
static gpt2_result gpt2__grammar_from_gbnf(const gpt2_model* model, const char* gbnf, const char* root, gpt2_grammar** out, const char* what, gpt2_error* err) {
    if (out) *out = nullptr;
    GPT2__TRY(gpt2__check_model(model, err));
    if (!gbnf || !out) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "gbnf or out_grammar is NULL");
    if (model->tokenizer.kind == GPT2_TOKENIZER_NONE)
        return gpt2__fail(err, GPT2_ERROR_NO_VOCABULARY, "a grammar needs the model's vocabulary and this model has none");
    GPT2__GUARD_BEGIN
    std::call_once(model->token_trie_once, [model] { gpt2__token_trie_build(&model->token_trie, &model->tokenizer, model->tokenizer.eos); });
    void* memory = GPT2_MALLOC(sizeof(gpt2_grammar));
    if (!memory) return gpt2__fail(err, GPT2_ERROR_OUT_OF_MEMORY, "out of memory");
    gpt2_grammar* g = new (memory) gpt2_grammar(); /* made in place: it holds a mutex */
    g->model = model;
    model->n_refs++;
    gpt2_result res = gpt2__gbnf_parse(gbnf, std::strlen(gbnf), root, g, err);
    if (res == GPT2_OK) res = gpt2__grammar_check_writable(*g, model->tokenizer, what, err);
    if (res != GPT2_OK) {
        gpt2_grammar_free(g);
        return res;
    }
    *out = g;
    return gpt2__ok(err);
    GPT2__GUARD_END(err)
}

GPT2_DEF gpt2_result gpt2_grammar_from_gbnf(const gpt2_model* model, const char* gbnf, const char* root, gpt2_grammar** out, gpt2_error* err) {
    return gpt2__grammar_from_gbnf(model, gbnf, root, out, "grammar", err);
}


GPT2_DEF gpt2_json_schema_params gpt2_json_schema_default_params(void) {
    gpt2_json_schema_params p;
    p.compact = 0;
    p.max_whitespace = 20;
    p.any_order = 0;
    p.integer_fraction = 0;
    return p;
}

GPT2_DEF gpt2_result gpt2_grammar_from_json_schema(const gpt2_model* model, const char* schema, size_t len, const gpt2_json_schema_params* params,
                                                   gpt2_grammar** out, gpt2_error* err) {
    if (out) *out = nullptr;
    GPT2__TRY(gpt2__check_model(model, err));
    if ((!schema && len) || !out) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "schema or out_grammar is NULL");
    if (model->tokenizer.kind == GPT2_TOKENIZER_NONE)
        return gpt2__fail(err, GPT2_ERROR_NO_VOCABULARY, "a grammar needs the model's vocabulary and this model has none");
    GPT2__GUARD_BEGIN
    const gpt2_json_schema_params p = params ? *params : gpt2_json_schema_default_params();
    if (p.max_whitespace > GPT2__GRAMMAR_MAX_REPEAT)
        return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "max_whitespace is %u, at most %d", (unsigned)p.max_whitespace, (int)GPT2__GRAMMAR_MAX_REPEAT);
    gpt2__string gbnf;
    GPT2__TRY(gpt2__json_schema_to_gbnf(schema ? schema : "", len, p, &gbnf, err));
    const gpt2_result res = gpt2__grammar_from_gbnf(model, gbnf.c_str(), "root", out, "json schema", err);
    if (res == GPT2_ERROR_BAD_GRAMMAR && err && std::strncmp(err->message, "json schema:", 12) != 0) {
        /* the schema's grammar is ours, and its rule names mean nothing to the caller: too large */
        char message[sizeof err->message];
        std::snprintf(message, sizeof message, "json schema: its grammar cannot be made: %.*s", (int)sizeof message - 48, err->message);
        std::memcpy(err->message, message, sizeof message);
    }
    if (res == GPT2_OK && !gpt2__grammar_root_productive(**out, nullptr)) {
        gpt2_grammar_free(*out);
        *out = nullptr;
        return gpt2__fail(err, GPT2_ERROR_BAD_GRAMMAR, "json schema: no finite value matches the schema (a $ref cycle with no way out: every value would nest without end)");
    }
    return res;
    GPT2__GUARD_END(err)
}


GPT2_DEF gpt2_result gpt2_grammar_match(const gpt2_grammar* grammar, const char* text, size_t len, gpt2_match* match, gpt2_error* err) {
    if (match) *match = GPT2_MATCH_NONE;
    GPT2__TRY(gpt2__check_grammar(grammar, err));
    if (!match || (!text && len)) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "text or out_match is NULL");
    GPT2__GUARD_BEGIN
    GPT2__TRY(gpt2__grammar_match_text(grammar, std::string_view(text ? text : "", len), match, err));
    return gpt2__ok(err);
    GPT2__GUARD_END(err)
}

/* ---- Many sessions in one pass ------------------------------------------------------------ */

/* The sessions of a batch: at least one, none NULL, one model, none twice. */
static gpt2_result gpt2__check_batch(gpt2_session* const* sessions, size_t n_sessions, gpt2_error* err) {
    if (!sessions || n_sessions == 0) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "no sessions: sessions is %s and n_sessions is %zu", sessions ? "set" : "NULL", n_sessions);
    for (size_t i = 0; i < n_sessions; i++) {
        char what[32];
        std::snprintf(what, sizeof what, "sessions[%zu]", i);
        GPT2__TRY(gpt2__check_session(sessions[i], what, err));
        if (sessions[i]->model != sessions[0]->model)
            return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "sessions[%zu] is a session of another model than sessions[0]; a batch runs one model", i);
        for (size_t j = 0; j < i; j++)
            if (sessions[j] == sessions[i])
                return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "sessions[%zu] and sessions[%zu] are the same session; a session appears once in a batch", j, i);
    }
    return GPT2_OK;
}

/* n tokens for session i of a batch: within the vocabulary. */
static gpt2_result gpt2__check_batch_tokens(const gpt2_session* s, size_t i, const int32_t* ids, size_t n, gpt2_error* err) {
    return gpt2__in_batch(gpt2__check_tokens(s->model, ids, n, err), i, err);
}

GPT2_DEF gpt2_result gpt2_batch_eval(gpt2_session* const* sessions, const int32_t* const* tokens, const size_t* n_tokens, size_t n_sessions, gpt2_error* err) {
    GPT2__TRY(gpt2__check_batch(sessions, n_sessions, err));
    if (!tokens || !n_tokens) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "tokens or n_tokens is NULL");
    for (size_t i = 0; i < n_sessions; i++) {
        if (n_tokens[i] == 0) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "n_tokens[%zu] is 0: every session of a batch evaluates at least one token", i);
        if (!tokens[i]) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "tokens[%zu] is NULL", i);
        GPT2__TRY(gpt2__check_batch_tokens(sessions[i], i, tokens[i], n_tokens[i], err));
    }
    GPT2__GUARD_BEGIN
    gpt2__batch_use use;
    GPT2__TRY(gpt2__use_batch(sessions, n_sessions, &use, err));
    GPT2__TRY(gpt2__batch_append(sessions[0], sessions, tokens, n_tokens, n_sessions, err));
    return gpt2__ok(err);
    GPT2__GUARD_END(err)
}

GPT2_DEF gpt2_result gpt2_generate_batch(gpt2_session* const* sessions, const char* const* prompts, const gpt2_generate_params* params, size_t n_sessions, gpt2_error* err) {
    GPT2__TRY(gpt2__check_batch(sessions, n_sessions, err));
    GPT2__GUARD_BEGIN
    gpt2__batch_use use;
    GPT2__TRY(gpt2__use_batch(sessions, n_sessions, &use, err));
    gpt2__vector<gpt2_generate_params> p(n_sessions);
    gpt2__vector<gpt2__vector<int32_t>> ids(n_sessions);
    for (size_t i = 0; i < n_sessions; i++) {
        gpt2_session* s = sessions[i];
        GPT2__TRY(gpt2__in_batch(gpt2__check_generate(s, params ? &params[i] : nullptr, &p[i], err), i, err));
        if (prompts && prompts[i] && *prompts[i]) {
            GPT2__TRY(gpt2__in_batch(gpt2__tokenize(s->model, prompts[i], std::strlen(prompts[i]), false, &ids[i], err), i, err));
            GPT2__TRY(gpt2__check_batch_tokens(s, i, ids[i].data(), ids[i].size(), err));
        }
        if (ids[i].empty() && s->tokens.empty())
            return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "sessions[%zu]: empty prompt: generation needs at least one token of context", i);
    }
    gpt2__vector<gpt2__checkpoint> before; /* to undo the call when sessions[0]'s abort_fn stops it */
    GPT2__TRY(gpt2__checkpoints_take(sessions, n_sessions, &before, err));
    /* the lines of one stage run by sessions[0]: the prompts prefill together in the first pass */
    gpt2__vector<gpt2__line> lines(n_sessions);
    for (size_t i = 0; i < n_sessions; i++) {
        lines[i].prompt.swap(ids[i]);
        gpt2__generator_begin(&lines[i].g, sessions[i], p[i], nullptr, 0, nullptr);
    }
    gpt2_error own; /* on_end hears the message when the caller passes no err */
    if (!err) err = &own;
    gpt2_result res = gpt2__generate(sessions[0], lines.data(), n_sessions, err);
    res = gpt2__undo_if_aborted(res, sessions, n_sessions, &before, err);
    for (gpt2__line& line : lines) /* a line that ended before another failed keeps its end, unless an abort undid it */
        gpt2__line_over(&line, line.ends && line.result == GPT2_OK && res != GPT2_ERROR_ABORTED ? GPT2_OK : res, err->message);
    return res == GPT2_OK ? gpt2__ok(err) : res;
    GPT2__GUARD_END(err)
}

#endif /* GPT2__PART_CAPI_H */
