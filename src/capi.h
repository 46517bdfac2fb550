/* The C API: argument checks, then the parts above. */

/* No exception may cross the C boundary: with exceptions enabled, a failed allocation inside a
   container becomes GPT2_ERROR_OUT_OF_MEMORY. */
#if defined(__cpp_exceptions)
#define GPT2__GUARD_BEGIN try {
#define GPT2__GUARD_END(err)                                                                       \
    }                                                                                              \
    catch (const std::bad_alloc&) { return gpt2__fail(err, GPT2_ERROR_OUT_OF_MEMORY, "out of memory"); } \
    catch (...) { return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "unexpected internal error"); }
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
    }
    return "unknown result";
}

GPT2_DEF gpt2_model_params gpt2_model_default_params(void) {
    gpt2_model_params p;
    p.use_mmap = 1;
    p.device = GPT2_DEVICE_CPU;
    p.cuda_device_index = 0;
    p.log = nullptr;
    p.log_user = nullptr;
    return p;
}

GPT2_DEF gpt2_session_params gpt2_session_default_params(void) {
    gpt2_session_params p;
    p.n_threads = 0;
    p.n_ctx = 0;
    p.kv_f16 = 0;
    return p;
}

GPT2_DEF gpt2_generate_params gpt2_generate_default_params(void) {
    gpt2_generate_params p;
    p.max_new_tokens = 256;
    p.temperature = 0.8f; /* nanoGPT sample.py's defaults */
    p.top_k = 200;
    p.seed = 1337;
    p.on_token = nullptr;
    p.user = nullptr;
    return p;
}

/* ---- Devices ---------------------------------------------------------------------------
   The one place where the C API hands work to a device other than the CPU. gpt2_cuda.cuh
   defines GPT2__CUDA_BACKEND before it includes this file and defines these functions after
   it; without it every hook below compiles away and CUDA is refused as unsupported. */
#ifdef GPT2__CUDA_BACKEND
static gpt2_result gpt2__cuda_model_upload(gpt2_model* m, gpt2_error* err);
static void gpt2__cuda_model_release(gpt2_model* m);
static gpt2_result gpt2__cuda_session_create(const gpt2_model* m, const gpt2_session_params* p, gpt2_session** out, gpt2_error* err);
static void gpt2__cuda_session_free(gpt2_session* s);
static gpt2_result gpt2__cuda_append(gpt2_session* s, const int32_t* ids, size_t n, gpt2_error* err);
static const float* gpt2__cuda_logits(gpt2_session* s);
static gpt2_result gpt2__cuda_sample(gpt2_session* s, float temperature, int top_k, int32_t* token, gpt2_error* err);
static gpt2_result gpt2__cuda_window_logprob(gpt2_session* s, const int32_t* tokens, size_t n, double* sum, gpt2_error* err);
static bool gpt2__on_cuda(const gpt2_model* m) { return m->params.device == GPT2_DEVICE_CUDA; }
#else
static bool gpt2__on_cuda(const gpt2_model*) { return false; }
#endif

static gpt2_result gpt2__check_device(const gpt2_model_params* params, gpt2_error* err) {
    if (!params || params->device == GPT2_DEVICE_CPU) return GPT2_OK;
#ifdef GPT2__CUDA_BACKEND
    if (params->device == GPT2_DEVICE_CUDA) return GPT2_OK;
#endif
    return gpt2__fail(err, GPT2_ERROR_UNSUPPORTED, "device %d is not available in this build (include gpt2_cuda.cuh for CUDA)", (int)params->device);
}

/* Loading done: give a device its copy of the weights (frees the model on failure). */
static gpt2_result gpt2__model_attach_device(gpt2_model* m, gpt2_error* err) {
#ifdef GPT2__CUDA_BACKEND
    if (gpt2__on_cuda(m)) {
        gpt2_result res = gpt2__cuda_model_upload(m, err);
        if (res != GPT2_OK) gpt2__model_destroy(m);
        return res;
    }
#endif
    (void)m;
    return gpt2__ok(err);
}

/* Appends tokens and runs the model; on a device the logits stay there until asked for. */
static gpt2_result gpt2__append(gpt2_session* s, const int32_t* ids, size_t n, gpt2_error* err) {
#ifdef GPT2__CUDA_BACKEND
    if (gpt2__on_cuda(s->model)) return gpt2__cuda_append(s, ids, n, err);
#endif
    return gpt2__session_append(s, ids, n, err);
}

static const float* gpt2__host_logits(gpt2_session* s) {
#ifdef GPT2__CUDA_BACKEND
    if (gpt2__on_cuda(s->model)) return gpt2__cuda_logits(s);
#endif
    return s->logits;
}

/* The next token from the current logits; on a device only the token id comes back. */
static gpt2_result gpt2__next_token(gpt2_session* s, const gpt2_generate_params& p, int32_t* token, gpt2_error* err) {
#ifdef GPT2__CUDA_BACKEND
    if (gpt2__on_cuda(s->model)) return gpt2__cuda_sample(s, p.temperature, p.top_k, token, err);
#endif
    *token = gpt2__sample(s->logits, s->model->n_vocab, p.temperature, p.top_k, &s->rng_state, s->probs);
    (void)err;
    return GPT2_OK;
}

GPT2_DEF gpt2_result gpt2_model_load_file(const char* path, const gpt2_model_params* params, gpt2_model** out_model, gpt2_error* err) {
    if (!out_model) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "out_model is NULL");
    *out_model = nullptr;
    if (!path || !*path) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "model path is %s", path ? "empty" : "NULL");
    GPT2__TRY(gpt2__check_device(params, err));
    GPT2__GUARD_BEGIN
    gpt2_model* m = gpt2__model_new(params);
    if (!m) return gpt2__fail(err, GPT2_ERROR_OUT_OF_MEMORY, "out of memory");
    gpt2_result res = gpt2__file_open(path, m->params.use_mmap != 0, &m->file, err);
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
    if (!model) return;
    /* Freeing a model while sessions use it leaves them dangling: caught in debug builds. */
    GPT2_ASSERT(model->n_sessions.load() == 0 && "gpt2_model_free: free every session of this model first");
#ifdef GPT2__CUDA_BACKEND
    if (gpt2__on_cuda(model)) gpt2__cuda_model_release(model);
#endif
    gpt2__model_destroy(model);
}

GPT2_DEF gpt2_model_info gpt2_model_get_info(const gpt2_model* m) {
    gpt2_model_info info;
    std::memset(&info, 0, sizeof info);
    if (!m) return info;
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
    if (!m) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "model is NULL");
    if (!tokens && capacity) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "tokens is NULL but capacity is %zu", capacity);
    GPT2__GUARD_BEGIN
    gpt2__vector<int32_t> ids;
    GPT2__TRY(gpt2__tokenize(m, text, len, allow_special != 0, &ids, err));
    if (n_tokens) *n_tokens = ids.size();
    std::memcpy(tokens, ids.data(), std::min(capacity, ids.size()) * sizeof(int32_t));
    return gpt2__ok(err);
    GPT2__GUARD_END(err)
}

GPT2_DEF gpt2_result gpt2_detokenize(const gpt2_model* m, const int32_t* tokens, size_t n, char* text, size_t capacity, size_t* n_bytes, gpt2_error* err) {
    if (!m) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "model is NULL");
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
    if (!model) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "model is NULL");
    const gpt2_session_params p = params ? *params : gpt2_session_default_params();
    if (p.n_threads < 0 || p.n_threads > 1024) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "n_threads is %d; expected 0 (all cores) to 1024", p.n_threads);
    if (p.n_ctx < 0 || p.n_ctx > model->n_ctx)
        return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "n_ctx is %d; expected 0 (the model's) to the model's context length %d", p.n_ctx, model->n_ctx);
    GPT2__GUARD_BEGIN
#ifdef GPT2__CUDA_BACKEND
    if (gpt2__on_cuda(model)) return gpt2__cuda_session_create(model, &p, out_session, err);
#endif
    void* memory = GPT2_MALLOC(sizeof(gpt2_session));
    if (!memory) return gpt2__fail(err, GPT2_ERROR_OUT_OF_MEMORY, "out of memory");
    gpt2_session* s = new (memory) gpt2_session();
    s->model = model;
    model->n_sessions++;
    s->n_ctx = p.n_ctx ? p.n_ctx : model->n_ctx;
    s->kv_f16 = p.kv_f16 != 0;
    s->kernels = &gpt2__cpu_kernels();
    int n_threads = p.n_threads ? p.n_threads : (int)std::max(1u, std::thread::hardware_concurrency());
    gpt2__pool_start(&s->pool, n_threads);
    gpt2_result res = gpt2__session_alloc(s, err);
    if (res != GPT2_OK) {
        gpt2__session_destroy(s);
        return res;
    }
    s->tokens.reserve((size_t)s->n_ctx);
    *out_session = s;
    return gpt2__ok(err);
    GPT2__GUARD_END(err)
}

GPT2_DEF void gpt2_session_free(gpt2_session* session) {
    if (!session) return;
#ifdef GPT2__CUDA_BACKEND
    if (gpt2__on_cuda(session->model)) return gpt2__cuda_session_free(session);
#endif
    gpt2__session_destroy(session);
}

GPT2_DEF void gpt2_session_reset(gpt2_session* s) {
    if (!s) return;
    s->tokens.clear();
    s->n_cached = 0;
    s->has_logits = false;
    s->stream = gpt2__utf8_stream();
}

GPT2_DEF size_t gpt2_session_n_tokens(const gpt2_session* s) { return s ? s->tokens.size() : 0; }

GPT2_DEF gpt2_result gpt2_session_eval(gpt2_session* s, const int32_t* tokens, size_t n, gpt2_error* err) {
    if (!s) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "session is NULL");
    if (!tokens && n) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "tokens is NULL");
    if (n == 0) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "no tokens to evaluate");
    GPT2__GUARD_BEGIN
    GPT2__TRY(gpt2__append(s, tokens, n, err));
    return gpt2__ok(err);
    GPT2__GUARD_END(err)
}

GPT2_DEF const float* gpt2_session_logits(const gpt2_session* s) {
    /* const for the caller; a device session may copy its logits into its host buffer here */
    return s && s->has_logits ? gpt2__host_logits(const_cast<gpt2_session*>(s)) : nullptr;
}

GPT2_DEF gpt2_result gpt2_score(gpt2_session* s, const int32_t* tokens, size_t n, double* out_logprob_sum, gpt2_error* err) {
    if (!s || !out_logprob_sum) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "session or out_logprob_sum is NULL");
    if (!tokens || n == 0) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "no tokens to score");
    GPT2__TRY(gpt2__check_tokens(s->model, tokens, n, err));
    GPT2__GUARD_BEGIN
    gpt2_session_reset(s);
    const int V = s->model->n_vocab, C = s->model->n_embd;
    const size_t first = std::min(n, (size_t)s->n_ctx);
    GPT2__TRY(gpt2__append(s, tokens, first, err));
    double sum = 0.0;
    if (gpt2__on_cuda(s->model)) {
#ifdef GPT2__CUDA_BACKEND
        GPT2__TRY(gpt2__cuda_window_logprob(s, tokens, first, &sum, err));
#endif
    } else {
        for (size_t t = 1; t < first; t++) { /* every position of the first window, from one pass */
            gpt2__head(s, s->xn + (t - 1) * C, s->probs);
            sum += gpt2__log_prob(s->probs, V, tokens[t]);
        }
    }
    for (size_t t = first; t < n; t++) { /* past n_ctx: nanoGPT's sliding window, one step each */
        sum += gpt2__log_prob(gpt2__host_logits(s), V, tokens[t]);
        if (t + 1 < n) GPT2__TRY(gpt2__append(s, tokens + t, 1, err));
    }
    gpt2_session_reset(s);
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

/* Hands one token (and its complete UTF-8 text) to the callback; true when it asks to stop. */
static bool gpt2__deliver(gpt2_session* s, const gpt2_generate_params& p, int32_t token) {
    if (!p.on_token) return false;
    if (s->model->tokenizer.kind == GPT2_TOKENIZER_NONE) return p.on_token(p.user, token, nullptr, 0) != 0;
    s->text.clear();
    gpt2__utf8_stream_push(&s->stream, gpt2__tokenizer_token_bytes(&s->model->tokenizer, token), &s->text);
    return p.on_token(p.user, token, s->text.c_str(), s->text.size()) != 0;
}

GPT2_DEF gpt2_result gpt2_generate(gpt2_session* s, const int32_t* prompt, size_t n_prompt, const gpt2_generate_params* params, int32_t* out_tokens, size_t capacity,
                                   size_t* n_generated, gpt2_error* err) {
    if (n_generated) *n_generated = 0;
    if (!s) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "session is NULL");
    if (!prompt && n_prompt) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "prompt is NULL");
    const gpt2_generate_params p = params ? *params : gpt2_generate_default_params();
    GPT2__TRY(gpt2__check_sampling(p.temperature, p.top_k, err));
    if (p.max_new_tokens <= 0 || p.max_new_tokens > GPT2__MAX_NEW_TOKENS)
        return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "max_new_tokens is %d; expected 1 to %d", p.max_new_tokens, (int)GPT2__MAX_NEW_TOKENS);
    if (n_prompt == 0 && s->tokens.empty())
        return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "empty prompt: generation needs at least one token of context");
    GPT2__GUARD_BEGIN
    if (n_prompt) GPT2__TRY(gpt2__append(s, prompt, n_prompt, err));
    s->rng_state = p.seed;
    const gpt2_model* m = s->model;
    for (int i = 0; i < p.max_new_tokens; i++) {
        int32_t token;
        GPT2__TRY(gpt2__next_token(s, p, &token, err));
        if (out_tokens && (size_t)i < capacity) out_tokens[i] = token;
        if (n_generated) *n_generated = (size_t)i + 1;
        const bool stop = gpt2__deliver(s, p, token);
        GPT2__TRY(gpt2__append(s, &token, 1, err)); /* the token joins the context either way */
        if (stop) break;
    }
    if (p.on_token && m->tokenizer.kind != GPT2_TOKENIZER_NONE) { /* bytes that never completed a character */
        s->text.clear();
        gpt2__utf8_stream_flush(&s->stream, &s->text);
        if (!s->text.empty()) p.on_token(p.user, -1, s->text.c_str(), s->text.size());
    }
    return gpt2__ok(err);
    GPT2__GUARD_END(err)
}

GPT2_DEF gpt2_result gpt2_generate_text(gpt2_session* s, const char* prompt, const gpt2_generate_params* params, gpt2_error* err) {
    if (!s || !prompt) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "session or prompt is NULL");
    GPT2__GUARD_BEGIN
    gpt2__vector<int32_t> ids;
    GPT2__TRY(gpt2__tokenize(s->model, prompt, std::strlen(prompt), false, &ids, err));
    return gpt2_generate(s, ids.data(), ids.size(), params, nullptr, 0, nullptr, err);
    GPT2__GUARD_END(err)
}
