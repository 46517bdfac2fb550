#ifndef GPT2__PART_STATE_H
#define GPT2__PART_STATE_H
#include "session.h"

/* A session's state as bytes (gpt2_session_save / gpt2_session_load / gpt2_session_copy):
   everything needed to continue exactly. Little-endian, in this order:

     header       magic "GPT2SESS", u32 version, u32 header bytes, u64 model fingerprint,
                  u32 n_layer, n_embd, n_vocab, u32 cache type (0 f32, 1 f16),
                  u32 n_tokens, u32 n_cached, u32 has_logits, u64 rng_state,
                  u32 utf8 bytes held, 4 held bytes, u64 gpt2__hash64 of the header before it
     tokens       n_tokens x i32
     logits       n_vocab x f32, when has_logits
     keys, values (n_layer, n_cached, n_embd) each, in the cache type
     checksum     u64: gpt2__hash64 of every byte before it

   Only the cache rows in use are stored. The header has its own checksum, so a damaged header is
   told from a truncated buffer; nothing is used before the checksums agree. */

static const char gpt2__state_magic[8] = {'G', 'P', 'T', '2', 'S', 'E', 'S', 'S'};
enum { GPT2__STATE_VERSION = 1, GPT2__STATE_HEADER_BYTES = 8 + 4 + 4 + 8 + 4 * 4 + 3 * 4 + 8 + 4 + 4 + 8 };

/* 64-bit FNV-1a over 8-byte words (then the tail bytes), finished by a mixer. Each step is a
   bijection of the running value, so changing any one word always changes the result. */
static uint64_t gpt2__hash64(const void* data, size_t n, uint64_t h = 0xcbf29ce484222325ull) {
    const uint8_t* p = (const uint8_t*)data;
    const uint64_t prime = 0x100000001b3ull;
    for (; n >= 8; p += 8, n -= 8) {
        uint64_t w;
        std::memcpy(&w, p, 8);
        h = (h ^ w) * prime;
    }
    for (; n; p++, n--) h = (h ^ *p) * prime;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    return h ^ (h >> 33);
}

/* What a saved state must match: the weights (every tensor's name, type, shape and bytes), the
   shape and the vocabulary. Computed once per model, on first use (a pass over the weights). */
static uint64_t gpt2__model_fingerprint(const gpt2_model* m) {
    std::call_once(m->fingerprint_once, [m] {
        const int32_t shape[] = {m->n_vocab, m->n_vocab_rows, m->n_ctx, m->n_embd, m->n_layer, m->n_head, m->n_ff, (int32_t)m->gelu_tanh};
        uint64_t h = gpt2__hash64(shape, sizeof shape);
        h = gpt2__hash64(&m->layer_norm_eps, sizeof m->layer_norm_eps, h);
        for (const gpt2__gguf_tensor& t : m->gguf.tensors) {
            h = gpt2__hash64(t.name.data(), t.name.size(), h);
            h = gpt2__hash64(&t.type, sizeof t.type, h);
            h = gpt2__hash64(t.ne, sizeof t.ne, h);
            h = gpt2__hash64(t.data, (size_t)t.n_bytes, h);
        }
        const gpt2__tokenizer& tok = m->tokenizer;
        h = gpt2__hash64(&tok.kind, sizeof tok.kind, h);
        h = gpt2__hash64(tok.bytes.data(), tok.bytes.size(), h);
        h = gpt2__hash64(tok.offsets.data(), tok.offsets.size() * sizeof(uint32_t), h);
        m->fingerprint = h;
    });
    return m->fingerprint;
}

static size_t gpt2__state_cache_bytes(const gpt2_model* m, bool f16, size_t n_rows) { return 2 * (size_t)m->n_layer * n_rows * (size_t)m->n_embd * (f16 ? 2 : 4); }

static size_t gpt2__state_size(const gpt2_session* s) {
    const gpt2_model* m = s->model;
    return GPT2__STATE_HEADER_BYTES + s->tokens.size() * 4 + (s->has_logits ? (size_t)m->n_vocab * 4 : 0) +
           gpt2__state_cache_bytes(m, s->kv_f16, (size_t)s->n_cached) + 8;
}

struct gpt2__state_writer {
    uint8_t* p;
    void bytes(const void* src, size_t n) {
        if (n) std::memcpy(p, src, n); /* src may be an empty vector's NULL */
        p += n;
    }
    void u32(uint32_t v) { bytes(&v, 4); }
    void u64(uint64_t v) { bytes(&v, 8); }
};

/* Writes the state into out (gpt2__state_size(s) bytes). */
static gpt2_result gpt2__state_write(gpt2_session* s, uint8_t* out, gpt2_error* err) {
    const gpt2_model* m = s->model;
    gpt2__state_writer w{out};
    w.bytes(gpt2__state_magic, 8);
    w.u32(GPT2__STATE_VERSION);
    w.u32(GPT2__STATE_HEADER_BYTES);
    w.u64(gpt2__model_fingerprint(m));
    w.u32((uint32_t)m->n_layer);
    w.u32((uint32_t)m->n_embd);
    w.u32((uint32_t)m->n_vocab);
    w.u32(s->kv_f16 ? 1 : 0);
    w.u32((uint32_t)s->tokens.size());
    w.u32((uint32_t)s->n_cached);
    w.u32(s->has_logits ? 1 : 0);
    w.u64(s->rng_state);
    w.u32((uint32_t)s->stream.n_held);
    w.bytes(s->stream.held, 4);
    w.u64(gpt2__hash64(out, (size_t)(w.p - out)));
    w.bytes(s->tokens.data(), s->tokens.size() * 4);
    if (s->has_logits) {
        const float* logits = s->backend->logits(s);
        if (!logits) return gpt2__fail(err, GPT2_ERROR_DEVICE, "the %s backend could not return the logits", s->backend->name);
        w.bytes(logits, (size_t)m->n_vocab * 4);
    }
    GPT2__TRY(s->backend->save_cache(s, s->n_cached, w.p, err));
    w.p += gpt2__state_cache_bytes(m, s->kv_f16, (size_t)s->n_cached);
    w.u64(gpt2__hash64(out, (size_t)(w.p - out)));
    return GPT2_OK;
}

/* A parsed and checked state: what gpt2__state_apply needs. */
struct gpt2__state_view {
    bool f16 = false, has_logits = false;
    uint32_t n_tokens = 0, n_cached = 0, n_held = 0;
    uint64_t rng_state = 0;
    unsigned char held[4] = {0, 0, 0, 0};
    const uint8_t *tokens = nullptr, *logits = nullptr, *cache = nullptr; /* keys, then values */
};

/* Checks every byte of a state against this session before anything changes: size, magic,
   version, checksum, model, context. */
static gpt2_result gpt2__state_check(const gpt2_session* s, const uint8_t* data, size_t n, gpt2__state_view* v, gpt2_error* err) {
    const gpt2_model* m = s->model;
    const size_t needed = GPT2__STATE_HEADER_BYTES + 8;
    if (n < 16) return gpt2__fail(err, GPT2_ERROR_BAD_STATE, "session state is %zu bytes: truncated (at least %zu expected)", n, needed);
    if (std::memcmp(data, gpt2__state_magic, 8) != 0) return gpt2__fail(err, GPT2_ERROR_BAD_STATE, "not a gpt2.h session state (no GPT2SESS magic)");
    gpt2__reader r{data, n, 8}; /* every read below lies inside the header, checked to fit in n */
    uint32_t version = 0, header = 0;
    gpt2__read_u32(&r, &version);
    gpt2__read_u32(&r, &header);
    if (header < 24 || header > n) return gpt2__fail(err, GPT2_ERROR_BAD_STATE, "session state is %zu bytes: truncated (its header alone is %u)", n, header);
    uint64_t header_hash;
    std::memcpy(&header_hash, data + header - 8, 8);
    if (header_hash != gpt2__hash64(data, header - 8)) return gpt2__fail(err, GPT2_ERROR_BAD_STATE, "session state is damaged: its header checksum does not match");
    if (version != GPT2__STATE_VERSION || header != GPT2__STATE_HEADER_BYTES)
        return gpt2__fail(err, GPT2_ERROR_UNSUPPORTED, "session state version %u; this build reads version %d", version, (int)GPT2__STATE_VERSION);
    uint64_t fingerprint = 0;
    uint32_t n_layer = 0, n_embd = 0, n_vocab = 0, cache_type = 0, has_logits = 0;
    gpt2__read_u64(&r, &fingerprint);
    for (uint32_t* field : {&n_layer, &n_embd, &n_vocab, &cache_type, &v->n_tokens, &v->n_cached, &has_logits}) gpt2__read_u32(&r, field);
    gpt2__read_u64(&r, &v->rng_state);
    gpt2__read_u32(&r, &v->n_held);
    std::memcpy(v->held, data + r.pos, 4);
    if (cache_type > 1 || has_logits > 1 || (has_logits && !v->n_tokens) || v->n_held > 3 || v->n_cached > v->n_tokens || n_layer > (1u << 16) || n_embd > (1u << 20) || n_vocab > (1u << 24))
        return gpt2__fail(err, GPT2_ERROR_BAD_STATE, "session state has impossible values in its header");
    /* in 64 bits: the counts are at most 2^32 and 2^20, so nothing wraps */
    const uint64_t total = GPT2__STATE_HEADER_BYTES + (uint64_t)v->n_tokens * 4 + (has_logits ? (uint64_t)n_vocab * 4 : 0) +
                           2ull * n_layer * v->n_cached * n_embd * (cache_type == 1 ? 2 : 4) + 8;
    if (n != total)
        return gpt2__fail(err, GPT2_ERROR_BAD_STATE, "session state is %zu bytes but its header describes %llu: %s", n, (unsigned long long)total,
                          n < total ? "truncated" : "trailing bytes");
    uint64_t stored;
    std::memcpy(&stored, data + n - 8, 8);
    if (stored != gpt2__hash64(data, n - 8)) return gpt2__fail(err, GPT2_ERROR_BAD_STATE, "session state is damaged: its checksum does not match its bytes");
    if (fingerprint != gpt2__model_fingerprint(m) || n_layer != (uint32_t)m->n_layer || n_embd != (uint32_t)m->n_embd || n_vocab != (uint32_t)m->n_vocab)
        return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "session state belongs to another model (%u layers, n_embd %u, %u tokens, fingerprint %016llx; this is '%s': %d, %d, %d, %016llx)",
                          n_layer, n_embd, n_vocab, (unsigned long long)fingerprint, m->name.c_str(), m->n_layer, m->n_embd, m->n_vocab,
                          (unsigned long long)gpt2__model_fingerprint(m));
    if (v->n_tokens > (uint32_t)s->n_ctx)
        return gpt2__fail(err, GPT2_ERROR_CONTEXT_FULL, "session state holds %u tokens but this session's context is %d (create it with a larger n_ctx)", v->n_tokens, s->n_ctx);
    v->f16 = cache_type == 1;
    v->has_logits = has_logits == 1;
    v->tokens = data + GPT2__STATE_HEADER_BYTES;
    v->logits = v->tokens + (size_t)v->n_tokens * 4;
    v->cache = v->logits + (v->has_logits ? (size_t)n_vocab * 4 : 0);
    for (uint32_t i = 0; i < v->n_tokens; i++) {
        int32_t id;
        std::memcpy(&id, v->tokens + (size_t)i * 4, 4);
        if (id < 0 || id >= m->n_vocab) return gpt2__fail(err, GPT2_ERROR_BAD_STATE, "session state: token %u is %d, outside the vocabulary [0, %d)", i, (int)id, m->n_vocab);
    }
    return GPT2_OK;
}

/* Converts n cache values between f32 and f16 (the state's type to the session's). */
static void gpt2__convert_cache(const uint8_t* src, bool src_f16, uint8_t* dst, bool dst_f16, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float x;
        if (src_f16) {
            uint16_t h;
            std::memcpy(&h, src + i * 2, 2);
            x = gpt2__f16_to_f32(h);
        } else {
            std::memcpy(&x, src + i * 4, 4);
        }
        if (dst_f16) {
            const uint16_t h = gpt2__f32_to_f16(x);
            std::memcpy(dst + i * 2, &h, 2);
        } else {
            std::memcpy(dst + i * 4, &x, 4);
        }
    }
}

/* Makes the session hold a checked state. A state saved with the other cache type is converted
   (f16 to f32 exactly; f32 to f16 rounds, as evaluating with an f16 cache would). */
static gpt2_result gpt2__state_apply(gpt2_session* s, const gpt2__state_view& v, gpt2_error* err) {
    const gpt2_model* m = s->model;
    const uint8_t* cache = v.cache;
    gpt2__vector<uint8_t> converted;
    if (v.f16 != s->kv_f16) {
        converted.resize(gpt2__state_cache_bytes(m, s->kv_f16, v.n_cached));
        gpt2__convert_cache(v.cache, v.f16, converted.data(), s->kv_f16, 2 * (size_t)m->n_layer * v.n_cached * (size_t)m->n_embd);
        cache = converted.data();
    }
    gpt2__vector<int32_t> tokens(v.n_tokens);
    if (v.n_tokens) std::memcpy(tokens.data(), v.tokens, (size_t)v.n_tokens * 4);
    gpt2__vector<float> logits;
    if (v.has_logits) {
        logits.resize((size_t)m->n_vocab);
        std::memcpy(logits.data(), v.logits, logits.size() * 4);
    }
    const gpt2_result res = s->backend->load_cache(s, (int)v.n_cached, cache, v.has_logits ? logits.data() : nullptr, err);
    if (res != GPT2_OK) { /* a device failed half-way: what it holds is unknown */
        s->tokens.clear();
        s->n_cached = 0;
        s->has_logits = false;
        return res;
    }
    s->tokens.assign(tokens.begin(), tokens.end());
    s->n_cached = (int)v.n_cached;
    s->has_logits = v.has_logits;
    s->rng_state = v.rng_state;
    s->stream = gpt2__utf8_stream();
    s->stream.n_held = v.n_held;
    std::memcpy(s->stream.held, v.held, 4);
    return GPT2_OK;
}

/* gpt2_session_copy, its arguments checked (one model, dst's n_ctx holds src's tokens, both
   held): dst continues as src would, as after a save of src and a load. Where the backend can
   share a cache (share_cache: the CPU's blocks, copy on write) and the cache types agree, the
   state does not go through bytes: dst shares src's cache rows. */
static gpt2_result gpt2__session_copy(gpt2_session* dst, gpt2_session* src, gpt2_error* err) {
    if (!dst->backend->share_cache || dst->kv_f16 != src->kv_f16) {
        gpt2__vector<uint8_t> state(gpt2__state_size(src));
        GPT2__TRY(gpt2__state_write(src, state.data(), err));
        gpt2__state_view v;
        GPT2__TRY(gpt2__state_check(dst, state.data(), state.size(), &v, err));
        return gpt2__state_apply(dst, v, err);
    }
    GPT2__TRY(dst->backend->share_cache(dst, src, src->n_cached, err));
    dst->tokens.assign(src->tokens.begin(), src->tokens.end()); /* within the n_ctx reserved */
    dst->n_cached = src->n_cached;
    dst->has_logits = src->has_logits;
    dst->rng_state = src->rng_state;
    dst->stream = src->stream;
    return GPT2_OK;
}

#endif /* GPT2__PART_STATE_H */
