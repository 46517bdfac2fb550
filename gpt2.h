/* ---- src/api.h ---- */
/* gpt2.h - run GPT-2-class models (nanoGPT, OpenAI GPT-2) inside your program.
   Single-file library: https://github.com/ (see README.md). MIT license at the end of this file.

   THIS FILE IS GENERATED from src/ by tools/amalgamate.py. Edit the parts under src/.

   USAGE
     In exactly one C++ translation unit:
         #define GPT2_IMPLEMENTATION
         #include "gpt2.h"
     Everywhere else (C or C++) just #include "gpt2.h". The implementation needs C++17.

     #include "gpt2.h"
     #include <stdio.h>
     static int print_token(void* user, int32_t token, const char* text, size_t len) {
         (void)user; (void)token;
         fwrite(text, 1, len, stdout);
         return 0;                                  // nonzero stops generation
     }
     int main(void) {
         gpt2_error err;
         gpt2_model* model;
         if (gpt2_model_load_file("model.gguf", NULL, &model, &err) != GPT2_OK) {
             fprintf(stderr, "%s\n", err.message);
             return 1;
         }
         gpt2_session* session;
         gpt2_session_create(model, NULL, &session, &err);
         gpt2_generate_params gen = gpt2_generate_default_params();
         gen.max_new_tokens = 200;
         gen.on_token = print_token;
         gpt2_generate_text(session, "ROMEO:", &gen, &err);
         gpt2_session_free(session);
         gpt2_model_free(model);
     }

   CONCEPTS
     gpt2_model    immutable after loading: weights (memory-mapped from the file) and vocabulary.
                   Share one model between any number of sessions and threads.
     gpt2_session  one conversation: KV cache, scratch memory, worker threads, RNG. A session is
                   used by one thread at a time; sessions on one model run in parallel.
                   Free every session before its model.
     n_ctx         the longest context the model was trained for (nanoGPT's block_size). When a
                   sequence grows past n_ctx, the session keeps its last n_ctx tokens and
                   recomputes them (exactly nanoGPT's generate()); each such step costs a prompt
                   pass over n_ctx tokens instead of one token.

   ERRORS
     Every function that can fail returns a gpt2_result and, when `err` is not NULL, fills it
     with the code and a sentence naming the problem. No function throws, exits or aborts.

   OPTIONS (define before including the implementation)
     GPT2_STATIC             make every function static (private to one translation unit)
     GPT2_MALLOC / GPT2_FREE replace the allocator (both or neither)
     GPT2_ASSERT             replace assert() for internal invariants
     GPT2_NO_SIMD            use the portable kernels only
*/
#ifndef GPT2_H
#define GPT2_H

#include <stddef.h>
#include <stdint.h>

#ifdef GPT2_STATIC
#define GPT2_API static
#else
#define GPT2_API extern
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define GPT2_VERSION_MAJOR 0
#define GPT2_VERSION_MINOR 1
#define GPT2_VERSION_PATCH 0

typedef enum gpt2_result {
    GPT2_OK = 0,
    GPT2_ERROR_INVALID_ARGUMENT, /* a NULL pointer, a value out of its range */
    GPT2_ERROR_IO,               /* the file could not be opened, read or mapped */
    GPT2_ERROR_BAD_FILE,         /* the file is not a valid model: truncated, corrupt, inconsistent */
    GPT2_ERROR_UNSUPPORTED,      /* a valid file using something this build cannot run */
    GPT2_ERROR_OUT_OF_MEMORY,
    GPT2_ERROR_BAD_TOKEN,        /* a token id outside the vocabulary */
    GPT2_ERROR_CONTEXT_FULL,     /* more tokens than the session's context holds */
    GPT2_ERROR_NO_VOCABULARY,    /* text was given to a model that has no tokenizer */
    GPT2_ERROR_BAD_TEXT,         /* text that cannot be encoded */
    GPT2_ERROR_DEVICE            /* the GPU or its driver failed */
} gpt2_result;

/* A short English name for a result code ("bad file"); never NULL. */
GPT2_API const char* gpt2_result_string(gpt2_result result);

typedef struct gpt2_error {
    gpt2_result code;
    char message[512];
} gpt2_error;

typedef enum gpt2_log_level { GPT2_LOG_ERROR, GPT2_LOG_WARNING, GPT2_LOG_INFO, GPT2_LOG_DEBUG } gpt2_log_level;
typedef void (*gpt2_log_fn)(void* user, gpt2_log_level level, const char* message);

/* Weight storage types, numbered as in GGUF. */
typedef enum gpt2_type {
    GPT2_TYPE_F32 = 0,
    GPT2_TYPE_F16 = 1,
    GPT2_TYPE_Q8_0 = 8,
    GPT2_TYPE_BF16 = 30
} gpt2_type;

typedef enum gpt2_device { GPT2_DEVICE_CPU = 0, GPT2_DEVICE_CUDA = 1 } gpt2_device;

typedef enum gpt2_tokenizer_kind {
    GPT2_TOKENIZER_NONE = 0, /* token ids only */
    GPT2_TOKENIZER_CHAR,     /* nanoGPT meta.pkl character vocabulary */
    GPT2_TOKENIZER_BPE       /* GPT-2 byte-level BPE */
} gpt2_tokenizer_kind;

/* ---- Model ---------------------------------------------------------------------------- */
typedef struct gpt2_model gpt2_model;

typedef struct gpt2_model_params {
    int use_mmap;          /* 1: map the file (weights are not copied); 0: read it into memory */
    gpt2_device device;    /* where sessions of this model run */
    int cuda_device_index; /* with GPT2_DEVICE_CUDA */
    gpt2_log_fn log;       /* silent when NULL */
    void* log_user;
} gpt2_model_params;

GPT2_API gpt2_model_params gpt2_model_default_params(void);

/* Loads a GGUF model file. params may be NULL (defaults). */
GPT2_API gpt2_result gpt2_model_load_file(const char* path, const gpt2_model_params* params,
                                          gpt2_model** out_model, gpt2_error* err);
/* Loads from a buffer holding a whole GGUF file. The buffer is used in place (not copied) and
   must outlive the model. */
GPT2_API gpt2_result gpt2_model_load_memory(const void* data, size_t size, const gpt2_model_params* params,
                                            gpt2_model** out_model, gpt2_error* err);
GPT2_API void gpt2_model_free(gpt2_model* model);

typedef struct gpt2_model_info {
    const char* name;       /* general.name, "" when absent */
    int n_vocab;            /* tokens that can be fed and sampled */
    int n_vocab_rows;       /* rows of the embedding matrix (>= n_vocab; more when padded) */
    int n_ctx;              /* context length (block_size) */
    int n_embd;
    int n_layer;
    int n_head;
    gpt2_type weight_type;  /* type of the large matrices */
    gpt2_tokenizer_kind tokenizer;
    int32_t eos_token;      /* <|endoftext|>, or -1 */
    size_t weight_bytes;    /* bytes of tensor data */
} gpt2_model_info;

GPT2_API gpt2_model_info gpt2_model_get_info(const gpt2_model* model);

/* ---- Tokenizer ------------------------------------------------------------------------ */
/* Encodes `len` bytes of UTF-8 text. Writes up to `capacity` ids; `*n_tokens` receives the
   number the text needs (call with capacity 0 to size the buffer). With allow_special,
   "<|endoftext|>" becomes the end-of-text token; otherwise it is ordinary text. */
GPT2_API gpt2_result gpt2_tokenize(const gpt2_model* model, const char* text, size_t len, int allow_special,
                                   int32_t* tokens, size_t capacity, size_t* n_tokens, gpt2_error* err);
/* Decodes ids to bytes. Writes up to `capacity` bytes; `*n_bytes` receives the length needed.
   The result may end inside a UTF-8 character if the ids do; see gpt2_generate's streaming. */
GPT2_API gpt2_result gpt2_detokenize(const gpt2_model* model, const int32_t* tokens, size_t n_tokens,
                                     char* text, size_t capacity, size_t* n_bytes, gpt2_error* err);

/* ---- Session -------------------------------------------------------------------------- */
typedef struct gpt2_session gpt2_session;

typedef struct gpt2_session_params {
    int n_threads;  /* worker threads for this session, including the caller; 0 = all cores */
    int n_ctx;      /* context to allocate the KV cache for; 0 = the model's, at most the model's */
    int kv_f16;     /* store the KV cache in 16-bit floats (half the memory) */
} gpt2_session_params;

GPT2_API gpt2_session_params gpt2_session_default_params(void);
/* params may be NULL (defaults). */
GPT2_API gpt2_result gpt2_session_create(const gpt2_model* model, const gpt2_session_params* params,
                                         gpt2_session** out_session, gpt2_error* err);
GPT2_API void gpt2_session_free(gpt2_session* session);
/* Forgets the context (the conversation); keeps the memory. */
GPT2_API void gpt2_session_reset(gpt2_session* session);
/* Tokens in the session's context (after cropping to n_ctx). */
GPT2_API size_t gpt2_session_n_tokens(const gpt2_session* session);

/* Appends tokens to the context and runs the model over them (all new tokens in one pass).
   Afterwards gpt2_session_logits() holds the prediction after the last token. When the context
   would exceed n_ctx, the oldest tokens are dropped and the last n_ctx are recomputed. */
GPT2_API gpt2_result gpt2_session_eval(gpt2_session* session, const int32_t* tokens, size_t n_tokens,
                                       gpt2_error* err);
/* n_vocab logits of the last evaluated position; NULL before the first eval. */
GPT2_API const float* gpt2_session_logits(const gpt2_session* session);

/* Log-probability (natural log) of tokens[1..n-1], each given the ones before it; the first
   token is not scored. Evaluated from an empty context; the session is reset afterwards.
   Sequences longer than n_ctx use nanoGPT's sliding window. */
GPT2_API gpt2_result gpt2_score(gpt2_session* session, const int32_t* tokens, size_t n_tokens,
                                double* out_logprob_sum, gpt2_error* err);

/* ---- Generation ----------------------------------------------------------------------- */
/* Called once per new token. `text` is that token's decoded text (NULL and 0 for a model without
   vocabulary); it never ends inside a UTF-8 character: incomplete bytes are held until they are
   complete; if generation ends with bytes that never formed a character, they come in one last
   call with token -1. Return nonzero to stop. */
typedef int (*gpt2_token_fn)(void* user, int32_t token, const char* text, size_t text_len);

typedef struct gpt2_generate_params {
    int max_new_tokens;  /* default 256 */
    float temperature;   /* 0 = greedy (argmax); default 0.8 */
    int top_k;           /* keep the k most likely tokens; 0 = all; default 200 */
    uint64_t seed;       /* same seed, same tokens, on every platform */
    gpt2_token_fn on_token;
    void* user;
} gpt2_generate_params;

GPT2_API gpt2_generate_params gpt2_generate_default_params(void);

/* Appends `prompt` to the session's context, then samples up to max_new_tokens tokens, nanoGPT's
   way: logits / temperature, keep the top_k, softmax, draw one. The new tokens stay in the
   context, so a further call continues the conversation. out_tokens (may be NULL) receives up
   to `capacity` new ids; *n_generated (may be NULL) how many were generated. */
GPT2_API gpt2_result gpt2_generate(gpt2_session* session, const int32_t* prompt, size_t n_prompt,
                                   const gpt2_generate_params* params, int32_t* out_tokens, size_t capacity,
                                   size_t* n_generated, gpt2_error* err);
/* gpt2_generate with a UTF-8 prompt, encoded with the model's tokenizer (no special tokens). */
GPT2_API gpt2_result gpt2_generate_text(gpt2_session* session, const char* prompt, const gpt2_generate_params* params,
                                        gpt2_error* err);

/* Draws one token from `logits` (n entries) with the given temperature/top_k; *rng_state is
   advanced. Exposed so callers can sample from gpt2_session_logits() themselves. */
GPT2_API gpt2_result gpt2_sample(const float* logits, int n, float temperature, int top_k, uint64_t* rng_state,
                                 int32_t* out_token, gpt2_error* err);

#ifdef __cplusplus
}
#endif
#endif /* GPT2_H */

/* ---- src/common.h ---- */
/* ======================================================================================== */
/*                                     IMPLEMENTATION                                       */
/* ======================================================================================== */
#if defined(GPT2_IMPLEMENTATION) && !defined(GPT2_IMPLEMENTATION_DONE)
#define GPT2_IMPLEMENTATION_DONE

#ifndef __cplusplus
#error "GPT2_IMPLEMENTATION needs C++17: define it in a .cpp file"
#endif

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <new>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#if defined(GPT2_MALLOC) != defined(GPT2_FREE)
#error "define both GPT2_MALLOC and GPT2_FREE, or neither"
#endif
#ifndef GPT2_MALLOC
#define GPT2_MALLOC(size) std::malloc(size)
#define GPT2_FREE(ptr) std::free(ptr)
#endif
#ifndef GPT2_ASSERT
#include <cassert>
#define GPT2_ASSERT(x) assert(x)
#endif

#ifdef GPT2_STATIC
#if defined(__GNUC__) || defined(__clang__)
#define GPT2_DEF static __attribute__((unused)) /* a program need not call every function */
#else
#define GPT2_DEF static
#endif
#else
#define GPT2_DEF
#endif

/* Containers allocate through GPT2_MALLOC too, so a host's allocator sees every byte. */
template <class T>
struct gpt2__allocator {
    using value_type = T;
    gpt2__allocator() = default;
    template <class U>
    gpt2__allocator(const gpt2__allocator<U>&) {}
    T* allocate(size_t n) {
        if (n > std::numeric_limits<size_t>::max() / sizeof(T)) return nullptr;
        void* p = GPT2_MALLOC(n * sizeof(T));
#if defined(__cpp_exceptions)
        if (!p) throw std::bad_alloc();
#endif
        return static_cast<T*>(p);
    }
    void deallocate(T* p, size_t) { GPT2_FREE(p); }
    template <class U>
    bool operator==(const gpt2__allocator<U>&) const { return true; }
    template <class U>
    bool operator!=(const gpt2__allocator<U>&) const { return false; }
};
template <class T>
using gpt2__vector = std::vector<T, gpt2__allocator<T>>;
using gpt2__string = std::basic_string<char, std::char_traits<char>, gpt2__allocator<char>>;

/* Fills `err` (when given) and returns its code, so call sites read `return gpt2__fail(...)`. */
static gpt2_result gpt2__fail(gpt2_error* err, gpt2_result code, const char* fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static gpt2_result gpt2__fail(gpt2_error* err, gpt2_result code, const char* fmt, ...) {
    if (err) {
        err->code = code;
        va_list args;
        va_start(args, fmt);
        std::vsnprintf(err->message, sizeof err->message, fmt, args);
        va_end(args);
    }
    return code;
}

static gpt2_result gpt2__ok(gpt2_error* err) {
    if (err) {
        err->code = GPT2_OK;
        err->message[0] = '\0';
    }
    return GPT2_OK;
}

/* IEEE half <-> float, exact in both directions (round to nearest even on the way down). */
static inline float gpt2__f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ffu, bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (mant << 13);
    } else if (exp != 0) {
        bits = sign | ((exp + 112) << 23) | (mant << 13);
    } else if (mant == 0) {
        bits = sign;
    } else { /* subnormal: normalise */
        int shift = 0;
        while (!(mant & 0x400u)) { mant <<= 1; shift++; }
        bits = sign | ((uint32_t)(113 - shift) << 23) | ((mant & 0x3ffu) << 13);
    }
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

static inline uint16_t gpt2__f32_to_f16(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t abs = x & 0x7fffffffu;
    if (abs >= 0x7f800000u) return (uint16_t)(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0));
    if (abs >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to inf */
    if (abs < 0x38800000u) { /* subnormal or zero in half */
        float a;
        std::memcpy(&a, &abs, 4);
        return (uint16_t)(sign | (uint32_t)std::nearbyint(a * 16777216.0f)); /* a / 2^-24 */
    }
    uint32_t mant = abs & 0x7fffffu, exp = (abs >> 23) - 112;
    uint32_t h = (exp << 10) | (mant >> 13);
    uint32_t rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1))) h++;
    return (uint16_t)(sign | h);
}

static inline float gpt2__bf16_to_f32(uint16_t b) {
    uint32_t bits = (uint32_t)b << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

/* ---- src/tokenizer.h ---- */
/* PLACEHOLDER until the tokenizer branch lands: character vocabularies only. */
struct gpt2__tokenizer {
    gpt2_tokenizer_kind kind = GPT2_TOKENIZER_NONE;
    int32_t eos = -1;
    gpt2__vector<std::string_view> tokens;
};
static gpt2_result gpt2__tokenizer_init_char(gpt2__tokenizer* tok, const std::string_view* chars, size_t n, gpt2_error*) {
    tok->kind = GPT2_TOKENIZER_CHAR;
    tok->tokens.assign(chars, chars + n);
    return GPT2_OK;
}
static gpt2_result gpt2__tokenizer_init_bpe(gpt2__tokenizer*, const std::string_view*, size_t, const std::string_view*, size_t, int32_t, gpt2_error* err) {
    return gpt2__fail(err, GPT2_ERROR_UNSUPPORTED, "BPE not yet");
}
static void gpt2__tokenizer_free(gpt2__tokenizer*) {}
static gpt2_result gpt2__tokenizer_encode(const gpt2__tokenizer* tok, const char* text, size_t len, bool, gpt2__vector<int32_t>* out, gpt2_error* err) {
    for (size_t i = 0; i < len; i++) {
        bool found = false;
        for (size_t id = 0; id < tok->tokens.size(); id++)
            if (tok->tokens[id] == std::string_view(text + i, 1)) { out->push_back((int32_t)id); found = true; break; }
        if (!found) return gpt2__fail(err, GPT2_ERROR_BAD_TEXT, "char not in vocab");
    }
    return GPT2_OK;
}
static std::string_view gpt2__tokenizer_token_bytes(const gpt2__tokenizer* tok, int32_t id) { return tok->tokens[(size_t)id]; }
static size_t gpt2__tokenizer_size(const gpt2__tokenizer* tok) { return tok->tokens.size(); }
struct gpt2__utf8_stream { gpt2__string held; };
static void gpt2__utf8_stream_push(gpt2__utf8_stream*, std::string_view bytes, gpt2__string* out) { out->append(bytes.data(), bytes.size()); }
static void gpt2__utf8_stream_flush(gpt2__utf8_stream*, gpt2__string*) {}

/* ---- src/gguf.h ---- */
/* GGUF reader: parses and validates the whole header of a file held in memory. Nothing is
   trusted: every count, length, shape and offset is checked against the bytes that exist. */

enum gpt2__gguf_type : uint32_t {
    GPT2__GGUF_UINT8 = 0, GPT2__GGUF_INT8, GPT2__GGUF_UINT16, GPT2__GGUF_INT16, GPT2__GGUF_UINT32,
    GPT2__GGUF_INT32, GPT2__GGUF_FLOAT32, GPT2__GGUF_BOOL, GPT2__GGUF_STRING, GPT2__GGUF_ARRAY,
    GPT2__GGUF_UINT64, GPT2__GGUF_INT64, GPT2__GGUF_FLOAT64, GPT2__GGUF_TYPE_COUNT
};

static const char* gpt2__gguf_type_name(uint32_t type) {
    static const char* names[] = {"uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
                                  "bool", "string", "array", "uint64", "int64", "float64"};
    return type < GPT2__GGUF_TYPE_COUNT ? names[type] : "unknown";
}

/* Bytes of one scalar value; 0 for string and array. */
static size_t gpt2__gguf_scalar_size(uint32_t type) {
    switch (type) {
    case GPT2__GGUF_UINT8: case GPT2__GGUF_INT8: case GPT2__GGUF_BOOL: return 1;
    case GPT2__GGUF_UINT16: case GPT2__GGUF_INT16: return 2;
    case GPT2__GGUF_UINT32: case GPT2__GGUF_INT32: case GPT2__GGUF_FLOAT32: return 4;
    case GPT2__GGUF_UINT64: case GPT2__GGUF_INT64: case GPT2__GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

struct gpt2__gguf_kv {
    std::string_view key;
    uint32_t type;          /* gpt2__gguf_type */
    uint32_t array_type;    /* element type when type is ARRAY */
    uint64_t array_count;
    const uint8_t* value;   /* the value's bytes (for arrays: the first element) */
    size_t value_size;      /* bytes from `value` to the end of the value */
};

struct gpt2__gguf_tensor {
    std::string_view name;
    uint32_t n_dims;
    uint64_t ne[4];         /* ne[0] is the row length (fastest dimension) */
    uint32_t type;          /* gpt2_type numbering (GGUF's ggml_type) */
    uint64_t offset;        /* from the start of the data section */
    uint64_t n_bytes;       /* 0 when the type is unknown to us */
    const uint8_t* data;
};

struct gpt2__gguf {
    uint32_t version;
    uint64_t alignment;
    gpt2__vector<gpt2__gguf_kv> kvs;
    gpt2__vector<gpt2__gguf_tensor> tensors;
};

/* Size in bytes of `n_elements` of a weight type, laid out in rows of `row_length`; false when
   the type is unknown or the row length does not fit its blocks. */
static bool gpt2__type_row_bytes(uint32_t type, uint64_t row_length, uint64_t* out) {
    switch (type) {
    case GPT2_TYPE_F32: *out = row_length * 4; return true;
    case GPT2_TYPE_F16: case GPT2_TYPE_BF16: *out = row_length * 2; return true;
    case GPT2_TYPE_Q8_0:
        if (row_length % 32 != 0) return false;
        *out = row_length / 32 * 34; /* 32 int8 + one f16 scale per block */
        return true;
    default: return false;
    }
}

static const char* gpt2__type_name(uint32_t type) {
    switch (type) {
    case GPT2_TYPE_F32: return "f32";
    case GPT2_TYPE_F16: return "f16";
    case GPT2_TYPE_BF16: return "bf16";
    case GPT2_TYPE_Q8_0: return "q8_0";
    default: return "unknown";
    }
}

struct gpt2__reader {
    const uint8_t* data;
    size_t size;
    size_t pos;
    bool need(uint64_t n) const { return n <= size - pos; }
};

static bool gpt2__read_u32(gpt2__reader* r, uint32_t* v) {
    if (!r->need(4)) return false;
    std::memcpy(v, r->data + r->pos, 4);
    r->pos += 4;
    return true;
}
static bool gpt2__read_u64(gpt2__reader* r, uint64_t* v) {
    if (!r->need(8)) return false;
    std::memcpy(v, r->data + r->pos, 8);
    r->pos += 8;
    return true;
}
static bool gpt2__read_string(gpt2__reader* r, std::string_view* s) {
    uint64_t len;
    if (!gpt2__read_u64(r, &len) || !r->need(len)) return false;
    *s = std::string_view((const char*)r->data + r->pos, (size_t)len);
    r->pos += (size_t)len;
    return true;
}

/* Skips over one value of `type`, checking that it lies inside the buffer. */
static gpt2_result gpt2__gguf_skip_value(gpt2__reader* r, uint32_t type, std::string_view key, gpt2_error* err) {
    size_t scalar = gpt2__gguf_scalar_size(type);
    if (scalar) {
        if (!r->need(scalar)) return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "key '%.*s': value runs past the end of the file", (int)key.size(), key.data());
        r->pos += scalar;
        return GPT2_OK;
    }
    if (type == GPT2__GGUF_STRING) {
        std::string_view s;
        if (!gpt2__read_string(r, &s)) return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "key '%.*s': string runs past the end of the file", (int)key.size(), key.data());
        return GPT2_OK;
    }
    return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "key '%.*s': unknown value type %u", (int)key.size(), key.data(), type);
}

static gpt2_result gpt2__gguf_parse(const uint8_t* data, size_t size, gpt2__gguf* out, gpt2_error* err) {
    gpt2__reader r{data, size, 0};
    uint32_t magic;
    if (!gpt2__read_u32(&r, &magic)) return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "file is %zu bytes, too short for a GGUF header", size);
    if (magic != 0x46554747u) /* "GGUF" */
        return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "not a GGUF file: magic is 0x%08x, expected 0x46554747 (\"GGUF\")", magic);
    uint64_t n_tensors, n_kv;
    if (!gpt2__read_u32(&r, &out->version) || !gpt2__read_u64(&r, &n_tensors) || !gpt2__read_u64(&r, &n_kv))
        return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "GGUF header truncated: file is %zu bytes", size);
    if (out->version != 2 && out->version != 3)
        return gpt2__fail(err, GPT2_ERROR_UNSUPPORTED, "GGUF version %u is not supported (versions 2 and 3 are)", out->version);
    /* Each key-value needs at least 12 bytes and each tensor info 24: reject absurd counts before looping. */
    if (n_kv > (size - r.pos) / 12) return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "header claims %llu keys, more than the file of %zu bytes can hold", (unsigned long long)n_kv, size);
    if (n_tensors > (size - r.pos) / 24) return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "header claims %llu tensors, more than the file of %zu bytes can hold", (unsigned long long)n_tensors, size);

    out->alignment = 32;
    out->kvs.reserve((size_t)n_kv);
    for (uint64_t i = 0; i < n_kv; i++) {
        gpt2__gguf_kv kv{};
        if (!gpt2__read_string(&r, &kv.key)) return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "key %llu: name runs past the end of the file", (unsigned long long)i);
        if (!gpt2__read_u32(&r, &kv.type)) return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "key '%.*s': type runs past the end of the file", (int)kv.key.size(), kv.key.data());
        for (const gpt2__gguf_kv& other : out->kvs)
            if (other.key == kv.key) return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "key '%.*s' appears twice", (int)kv.key.size(), kv.key.data());
        if (kv.type == GPT2__GGUF_ARRAY) {
            if (!gpt2__read_u32(&r, &kv.array_type) || !gpt2__read_u64(&r, &kv.array_count))
                return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "key '%.*s': array header runs past the end of the file", (int)kv.key.size(), kv.key.data());
            if (kv.array_type == GPT2__GGUF_ARRAY || kv.array_type >= GPT2__GGUF_TYPE_COUNT)
                return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "key '%.*s': arrays of type %u are not supported", (int)kv.key.size(), kv.key.data(), kv.array_type);
            size_t min_size = kv.array_type == GPT2__GGUF_STRING ? 8 : gpt2__gguf_scalar_size(kv.array_type);
            if (kv.array_count > (size - r.pos) / min_size)
                return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "key '%.*s': array of %llu elements runs past the end of the file", (int)kv.key.size(), kv.key.data(), (unsigned long long)kv.array_count);
            kv.value = data + r.pos;
            if (kv.array_type == GPT2__GGUF_STRING) {
                for (uint64_t j = 0; j < kv.array_count; j++) {
                    gpt2_result res = gpt2__gguf_skip_value(&r, GPT2__GGUF_STRING, kv.key, err);
                    if (res != GPT2_OK) return res;
                }
            } else {
                r.pos += (size_t)(kv.array_count * min_size);
            }
        } else {
            kv.value = data + r.pos;
            gpt2_result res = gpt2__gguf_skip_value(&r, kv.type, kv.key, err);
            if (res != GPT2_OK) return res;
        }
        kv.value_size = (size_t)(data + r.pos - kv.value);
        if (kv.key == "general.alignment") {
            uint32_t alignment;
            if (kv.type != GPT2__GGUF_UINT32) return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "key 'general.alignment' has type %s, expected uint32", gpt2__gguf_type_name(kv.type));
            std::memcpy(&alignment, kv.value, 4);
            if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > 65536)
                return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "general.alignment is %u, expected a power of two up to 65536", alignment);
            out->alignment = alignment;
        }
        out->kvs.push_back(kv);
    }

    out->tensors.reserve((size_t)n_tensors);
    for (uint64_t i = 0; i < n_tensors; i++) {
        gpt2__gguf_tensor t{};
        if (!gpt2__read_string(&r, &t.name)) return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "tensor %llu: name runs past the end of the file", (unsigned long long)i);
        const int name_len = (int)std::min<size_t>(t.name.size(), 200);
        if (!gpt2__read_u32(&r, &t.n_dims)) return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "tensor '%.*s': header truncated", name_len, t.name.data());
        if (t.n_dims == 0 || t.n_dims > 4) return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "tensor '%.*s': %u dimensions, expected 1 to 4", name_len, t.name.data(), t.n_dims);
        uint64_t n_elements = 1;
        for (uint32_t d = 0; d < 4; d++) t.ne[d] = 1;
        for (uint32_t d = 0; d < t.n_dims; d++) {
            if (!gpt2__read_u64(&r, &t.ne[d])) return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "tensor '%.*s': header truncated", name_len, t.name.data());
            if (t.ne[d] == 0 || t.ne[d] > (uint64_t)1 << 40 || n_elements > ((uint64_t)1 << 50) / t.ne[d])
                return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "tensor '%.*s': dimension %u is %llu, out of range", name_len, t.name.data(), d, (unsigned long long)t.ne[d]);
            n_elements *= t.ne[d];
        }
        if (!gpt2__read_u32(&r, &t.type) || !gpt2__read_u64(&r, &t.offset))
            return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "tensor '%.*s': header truncated", name_len, t.name.data());
        uint64_t row_bytes;
        if (gpt2__type_row_bytes(t.type, t.ne[0], &row_bytes)) t.n_bytes = row_bytes * (n_elements / t.ne[0]);
        for (const gpt2__gguf_tensor& other : out->tensors)
            if (other.name == t.name) return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "tensor '%.*s' appears twice", name_len, t.name.data());
        out->tensors.push_back(t);
    }

    uint64_t data_start = (r.pos + out->alignment - 1) / out->alignment * out->alignment;
    if (data_start > size) data_start = size;
    const uint64_t data_size = size - data_start;
    for (gpt2__gguf_tensor& t : out->tensors) {
        const int name_len = (int)std::min<size_t>(t.name.size(), 200);
        if (t.offset % out->alignment != 0)
            return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "tensor '%.*s': offset %llu is not a multiple of the alignment %llu", name_len, t.name.data(), (unsigned long long)t.offset, (unsigned long long)out->alignment);
        if (t.offset > data_size || t.n_bytes > data_size - t.offset)
            return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "tensor '%.*s': data at offset %llu + %llu bytes runs past the end of the file (%llu bytes of tensor data)", name_len, t.name.data(),
                              (unsigned long long)t.offset, (unsigned long long)t.n_bytes, (unsigned long long)data_size);
        t.data = data + data_start + t.offset;
    }
    return GPT2_OK;
}

static const gpt2__gguf_kv* gpt2__gguf_find_kv(const gpt2__gguf* g, std::string_view key) {
    for (const gpt2__gguf_kv& kv : g->kvs)
        if (kv.key == key) return &kv;
    return nullptr;
}

static const gpt2__gguf_tensor* gpt2__gguf_find_tensor(const gpt2__gguf* g, std::string_view name) {
    for (const gpt2__gguf_tensor& t : g->tensors)
        if (t.name == name) return &t;
    return nullptr;
}

/* Reads an integer key of any integer type; fails when absent (if required), negative or too large. */
static gpt2_result gpt2__gguf_get_int(const gpt2__gguf* g, const char* key, bool required, int64_t min, int64_t max, int64_t* out, gpt2_error* err) {
    const gpt2__gguf_kv* kv = gpt2__gguf_find_kv(g, key);
    if (!kv) {
        if (required) return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "missing key '%s'", key);
        return GPT2_OK;
    }
    int64_t v;
    switch (kv->type) {
    case GPT2__GGUF_UINT8: v = kv->value[0]; break;
    case GPT2__GGUF_INT8: v = (int8_t)kv->value[0]; break;
    case GPT2__GGUF_UINT16: { uint16_t x; std::memcpy(&x, kv->value, 2); v = x; break; }
    case GPT2__GGUF_INT16: { int16_t x; std::memcpy(&x, kv->value, 2); v = x; break; }
    case GPT2__GGUF_UINT32: { uint32_t x; std::memcpy(&x, kv->value, 4); v = x; break; }
    case GPT2__GGUF_INT32: { int32_t x; std::memcpy(&x, kv->value, 4); v = x; break; }
    case GPT2__GGUF_UINT64: { uint64_t x; std::memcpy(&x, kv->value, 8); v = x > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)x; break; }
    case GPT2__GGUF_INT64: std::memcpy(&v, kv->value, 8); break;
    default: return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "key '%s' has type %s, expected an integer", key, gpt2__gguf_type_name(kv->type));
    }
    if (v < min || v > max)
        return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "key '%s' is %lld, expected %lld to %lld", key, (long long)v, (long long)min, (long long)max);
    *out = v;
    return GPT2_OK;
}

static gpt2_result gpt2__gguf_get_string(const gpt2__gguf* g, const char* key, std::string_view* out, gpt2_error* err) {
    const gpt2__gguf_kv* kv = gpt2__gguf_find_kv(g, key);
    if (!kv) return GPT2_OK;
    if (kv->type != GPT2__GGUF_STRING) return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "key '%s' has type %s, expected string", key, gpt2__gguf_type_name(kv->type));
    gpt2__reader r{kv->value, kv->value_size, 0};
    gpt2__read_string(&r, out);
    return GPT2_OK;
}

/* The strings of an array-of-strings key (views into the file). */
static gpt2_result gpt2__gguf_get_string_array(const gpt2__gguf* g, const char* key, gpt2__vector<std::string_view>* out, gpt2_error* err) {
    const gpt2__gguf_kv* kv = gpt2__gguf_find_kv(g, key);
    if (!kv) return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "missing key '%s'", key);
    if (kv->type != GPT2__GGUF_ARRAY || kv->array_type != GPT2__GGUF_STRING)
        return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "key '%s' has type %s, expected an array of strings", key,
                          kv->type == GPT2__GGUF_ARRAY ? "array of other values" : gpt2__gguf_type_name(kv->type));
    out->resize((size_t)kv->array_count);
    gpt2__reader r{kv->value, kv->value_size, 0};
    for (std::string_view& s : *out) gpt2__read_string(&r, &s);
    return GPT2_OK;
}

static gpt2_result gpt2__gguf_get_float(const gpt2__gguf* g, const char* key, float* out, gpt2_error* err) {
    const gpt2__gguf_kv* kv = gpt2__gguf_find_kv(g, key);
    if (!kv) return GPT2_OK;
    if (kv->type == GPT2__GGUF_FLOAT32) {
        std::memcpy(out, kv->value, 4);
    } else if (kv->type == GPT2__GGUF_FLOAT64) {
        double d;
        std::memcpy(&d, kv->value, 8);
        *out = (float)d;
    } else {
        return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "key '%s' has type %s, expected float32", key, gpt2__gguf_type_name(kv->type));
    }
    return GPT2_OK;
}

/* ---- src/model.h ---- */
/* The model: hyper-parameters, weights bound to the tensors of a GGUF file, and the vocabulary.
   Immutable once loaded, so any number of sessions and threads may share it. */

#if defined(_WIN32)
#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#include <windows.h>
#else
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#endif

/* A matrix of `rows` rows of `cols` values each, row-major, in any weight type. nn.Linear's
   (out, in) weight is rows = out, cols = in. */
struct gpt2__weight {
    const uint8_t* data = nullptr;
    uint32_t type = GPT2_TYPE_F32;
    int64_t rows = 0, cols = 0;
    size_t row_bytes = 0;
};

struct gpt2__layer {
    const float *ln_1_weight, *ln_1_bias;       /* bias NULL when the model has none */
    gpt2__weight c_attn;  const float* c_attn_bias;   /* (3 n_embd, n_embd): q, k, v */
    gpt2__weight c_proj;  const float* c_proj_bias;   /* (n_embd, n_embd) */
    const float *ln_2_weight, *ln_2_bias;
    gpt2__weight c_fc;    const float* c_fc_bias;     /* (n_ff, n_embd) */
    gpt2__weight mlp_proj; const float* mlp_proj_bias; /* (n_embd, n_ff) */
};

/* The bytes of the model file: mapped, read into memory, or the caller's buffer. */
struct gpt2__file {
    const uint8_t* data = nullptr;
    size_t size = 0;
    void* owned = nullptr; /* GPT2_MALLOC'd copy */
    bool mapped = false;
#if defined(_WIN32)
    HANDLE mapping = nullptr;
#endif
};

struct gpt2_model {
    gpt2_model_params params;
    gpt2__file file;
    gpt2__gguf gguf;
    gpt2__string name;
    int n_vocab = 0, n_vocab_rows = 0, n_ctx = 0, n_embd = 0, n_layer = 0, n_head = 0, n_ff = 0;
    float layer_norm_eps = 1e-5f;
    bool gelu_tanh = false; /* false: exact erf GELU (nanoGPT's nn.GELU()) */
    gpt2__weight wte, wpe, lm_head; /* lm_head is wte when the head is tied */
    const float *ln_f_weight = nullptr, *ln_f_bias = nullptr;
    gpt2__vector<gpt2__layer> layers;
    gpt2__tokenizer tokenizer;
    gpt2_type weight_type = GPT2_TYPE_F32;
    size_t weight_bytes = 0;
    mutable std::atomic<int> n_sessions{0}; /* sessions alive; freeing the model before them is a bug */
};

static void gpt2__log(const gpt2_model_params& params, gpt2_log_level level, const char* fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static void gpt2__log(const gpt2_model_params& params, gpt2_log_level level, const char* fmt, ...) {
    if (!params.log) return;
    char message[1024];
    va_list args;
    va_start(args, fmt);
    std::vsnprintf(message, sizeof message, fmt, args);
    va_end(args);
    params.log(params.log_user, level, message);
}

static void gpt2__file_close(gpt2__file* f) {
#if defined(_WIN32)
    if (f->mapped) UnmapViewOfFile(f->data);
    if (f->mapping) CloseHandle(f->mapping);
#else
    if (f->mapped) munmap((void*)f->data, f->size);
#endif
    if (f->owned) GPT2_FREE(f->owned);
    *f = gpt2__file();
}

static gpt2_result gpt2__file_open(const char* path, bool use_mmap, gpt2__file* f, gpt2_error* err) {
#if defined(_WIN32)
    HANDLE h = CreateFileA(path, GENERIC_READ, FILE_SHARE_READ, nullptr, OPEN_EXISTING, FILE_ATTRIBUTE_NORMAL, nullptr);
    if (h == INVALID_HANDLE_VALUE) return gpt2__fail(err, GPT2_ERROR_IO, "%s: cannot open (error %lu)", path, (unsigned long)GetLastError());
    LARGE_INTEGER size;
    if (!GetFileSizeEx(h, &size) || size.QuadPart == 0) {
        CloseHandle(h);
        return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "%s: file is empty or not a regular file", path);
    }
    f->size = (size_t)size.QuadPart;
    (void)use_mmap; /* Windows always maps */
    f->mapping = CreateFileMappingA(h, nullptr, PAGE_READONLY, 0, 0, nullptr);
    CloseHandle(h);
    if (!f->mapping) return gpt2__fail(err, GPT2_ERROR_IO, "%s: cannot map (error %lu)", path, (unsigned long)GetLastError());
    f->data = (const uint8_t*)MapViewOfFile(f->mapping, FILE_MAP_READ, 0, 0, 0);
    if (!f->data) {
        gpt2__file_close(f);
        return gpt2__fail(err, GPT2_ERROR_IO, "%s: cannot map", path);
    }
    f->mapped = true;
    return GPT2_OK;
#else
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return gpt2__fail(err, GPT2_ERROR_IO, "%s: cannot open: %s", path, std::strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return gpt2__fail(err, GPT2_ERROR_IO, "%s: not a regular file", path);
    }
    if (st.st_size == 0) {
        close(fd);
        return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "%s: file is empty (0 bytes)", path);
    }
    f->size = (size_t)st.st_size;
    if (use_mmap) {
        void* p = mmap(nullptr, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p != MAP_FAILED) {
            close(fd);
            f->data = (const uint8_t*)p;
            f->mapped = true;
            return GPT2_OK;
        }
    }
    f->owned = GPT2_MALLOC(f->size);
    if (!f->owned) {
        close(fd);
        return gpt2__fail(err, GPT2_ERROR_OUT_OF_MEMORY, "%s: cannot allocate %zu bytes to read it", path, f->size);
    }
    size_t done = 0;
    while (done < f->size) {
        ssize_t n = read(fd, (uint8_t*)f->owned + done, f->size - done);
        if (n <= 0) {
            close(fd);
            gpt2__file_close(f);
            return gpt2__fail(err, GPT2_ERROR_IO, "%s: read failed after %zu bytes", path, done);
        }
        done += (size_t)n;
    }
    close(fd);
    f->data = (const uint8_t*)f->owned;
    return GPT2_OK;
#endif
}

/* Binds a tensor that must exist with the given shape (ne[0] = row length). 1-D tensors are
   float32; matrices may be any supported weight type. */
static gpt2_result gpt2__bind_matrix(const gpt2_model* m, const char* name, int64_t rows, int64_t cols, gpt2__weight* out, gpt2_error* err) {
    const gpt2__gguf_tensor* t = gpt2__gguf_find_tensor(&m->gguf, name);
    if (!t) return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "missing tensor '%s'", name);
    if (t->n_dims != 2 || (int64_t)t->ne[0] != cols || (int64_t)t->ne[1] != rows)
        return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "%s: shape [%llu, %llu%s] expected [%lld, %lld]", name, (unsigned long long)t->ne[0],
                          (unsigned long long)t->ne[1], t->n_dims > 2 ? ", ..." : "", (long long)cols, (long long)rows);
    if (t->n_bytes == 0)
        return gpt2__fail(err, GPT2_ERROR_UNSUPPORTED, "%s: tensor type %u is not supported (f32, f16, bf16, q8_0 are)", name, t->type);
    out->data = t->data;
    out->type = t->type;
    out->rows = rows;
    out->cols = cols;
    out->row_bytes = (size_t)(t->n_bytes / (uint64_t)rows);
    return GPT2_OK;
}

static gpt2_result gpt2__bind_vector(const gpt2_model* m, const char* name, int64_t n, bool required, const float** out, gpt2_error* err) {
    const gpt2__gguf_tensor* t = gpt2__gguf_find_tensor(&m->gguf, name);
    *out = nullptr;
    if (!t) return required ? gpt2__fail(err, GPT2_ERROR_BAD_FILE, "missing tensor '%s'", name) : GPT2_OK;
    if (t->n_dims != 1 || (int64_t)t->ne[0] != n)
        return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "%s: shape [%llu%s] expected [%lld]", name, (unsigned long long)t->ne[0], t->n_dims > 1 ? ", ..." : "", (long long)n);
    if (t->type != GPT2_TYPE_F32) return gpt2__fail(err, GPT2_ERROR_UNSUPPORTED, "%s: type %s, expected f32 for a vector", name, gpt2__type_name(t->type));
    *out = (const float*)t->data;
    return GPT2_OK;
}

#define GPT2__TRY(expr)                          \
    do {                                         \
        gpt2_result gpt2__res = (expr);          \
        if (gpt2__res != GPT2_OK) return gpt2__res; \
    } while (0)

static gpt2_result gpt2__load_hparams(gpt2_model* m, gpt2_error* err) {
    const gpt2__gguf* g = &m->gguf;
    std::string_view arch;
    GPT2__TRY(gpt2__gguf_get_string(g, "general.architecture", &arch, err));
    if (arch != "gpt2")
        return gpt2__fail(err, GPT2_ERROR_UNSUPPORTED, "general.architecture is '%.*s', expected 'gpt2'", (int)std::min<size_t>(arch.size(), 64), arch.data());
    std::string_view name;
    GPT2__TRY(gpt2__gguf_get_string(g, "general.name", &name, err));
    m->name.assign(name.data(), name.size());
    int64_t v;
    GPT2__TRY(gpt2__gguf_get_int(g, "gpt2.context_length", true, 1, 1 << 20, &v, err)); m->n_ctx = (int)v;
    GPT2__TRY(gpt2__gguf_get_int(g, "gpt2.embedding_length", true, 1, 1 << 16, &v, err)); m->n_embd = (int)v;
    GPT2__TRY(gpt2__gguf_get_int(g, "gpt2.block_count", true, 1, 1024, &v, err)); m->n_layer = (int)v;
    GPT2__TRY(gpt2__gguf_get_int(g, "gpt2.attention.head_count", true, 1, 1024, &v, err)); m->n_head = (int)v;
    v = 4 * (int64_t)m->n_embd;
    GPT2__TRY(gpt2__gguf_get_int(g, "gpt2.feed_forward_length", false, 1, 1 << 18, &v, err)); m->n_ff = (int)v;
    GPT2__TRY(gpt2__gguf_get_float(g, "gpt2.attention.layer_norm_epsilon", &m->layer_norm_eps, err));
    if (!(m->layer_norm_eps > 0.0f && m->layer_norm_eps < 1.0f))
        return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "gpt2.attention.layer_norm_epsilon is %g, expected a small positive number", (double)m->layer_norm_eps);
    if (m->n_embd % m->n_head != 0)
        return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "gpt2.attention.head_count %d does not divide gpt2.embedding_length %d", m->n_head, m->n_embd);
    std::string_view gelu = "erf";
    GPT2__TRY(gpt2__gguf_get_string(g, "gpt2h.gelu", &gelu, err));
    if (gelu != "erf" && gelu != "tanh")
        return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "gpt2h.gelu is '%.*s', expected 'erf' or 'tanh'", (int)std::min<size_t>(gelu.size(), 64), gelu.data());
    /* GPT-2 files from other converters carry no gpt2h.gelu: OpenAI's GPT-2 uses the tanh form. */
    m->gelu_tanh = gelu == "tanh" || !gpt2__gguf_find_kv(g, "gpt2h.gelu");
    return GPT2_OK;
}

static gpt2_result gpt2__load_weights(gpt2_model* m, gpt2_error* err) {
    const gpt2__gguf_tensor* wte = gpt2__gguf_find_tensor(&m->gguf, "token_embd.weight");
    if (!wte) return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "missing tensor 'token_embd.weight'");
    if (wte->n_dims != 2 || wte->ne[1] > (1u << 24))
        return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "token_embd.weight: expected 2 dimensions with at most 16777216 rows");
    m->n_vocab_rows = (int)wte->ne[1];
    const int64_t C = m->n_embd;
    GPT2__TRY(gpt2__bind_matrix(m, "token_embd.weight", m->n_vocab_rows, C, &m->wte, err));
    GPT2__TRY(gpt2__bind_matrix(m, "position_embd.weight", m->n_ctx, C, &m->wpe, err));
    m->lm_head = m->wte;
    if (gpt2__gguf_find_tensor(&m->gguf, "output.weight")) GPT2__TRY(gpt2__bind_matrix(m, "output.weight", m->n_vocab_rows, C, &m->lm_head, err));
    GPT2__TRY(gpt2__bind_vector(m, "output_norm.weight", C, true, &m->ln_f_weight, err));
    GPT2__TRY(gpt2__bind_vector(m, "output_norm.bias", C, false, &m->ln_f_bias, err));
    m->layers.resize((size_t)m->n_layer);
    m->weight_type = (gpt2_type)m->wte.type;
    for (int i = 0; i < m->n_layer; i++) {
        gpt2__layer& L = m->layers[(size_t)i];
        char name[96];
        auto tensor = [&](const char* suffix) {
            std::snprintf(name, sizeof name, "blk.%d.%s", i, suffix);
            return name;
        };
        GPT2__TRY(gpt2__bind_vector(m, tensor("attn_norm.weight"), C, true, &L.ln_1_weight, err));
        GPT2__TRY(gpt2__bind_vector(m, tensor("attn_norm.bias"), C, false, &L.ln_1_bias, err));
        GPT2__TRY(gpt2__bind_matrix(m, tensor("attn_qkv.weight"), 3 * C, C, &L.c_attn, err));
        GPT2__TRY(gpt2__bind_vector(m, tensor("attn_qkv.bias"), 3 * C, false, &L.c_attn_bias, err));
        GPT2__TRY(gpt2__bind_matrix(m, tensor("attn_output.weight"), C, C, &L.c_proj, err));
        GPT2__TRY(gpt2__bind_vector(m, tensor("attn_output.bias"), C, false, &L.c_proj_bias, err));
        GPT2__TRY(gpt2__bind_vector(m, tensor("ffn_norm.weight"), C, true, &L.ln_2_weight, err));
        GPT2__TRY(gpt2__bind_vector(m, tensor("ffn_norm.bias"), C, false, &L.ln_2_bias, err));
        GPT2__TRY(gpt2__bind_matrix(m, tensor("ffn_up.weight"), m->n_ff, C, &L.c_fc, err));
        GPT2__TRY(gpt2__bind_vector(m, tensor("ffn_up.bias"), m->n_ff, false, &L.c_fc_bias, err));
        GPT2__TRY(gpt2__bind_matrix(m, tensor("ffn_down.weight"), C, m->n_ff, &L.mlp_proj, err));
        GPT2__TRY(gpt2__bind_vector(m, tensor("ffn_down.bias"), C, false, &L.mlp_proj_bias, err));
        if (L.c_attn.type != m->weight_type) m->weight_type = (gpt2_type)L.c_attn.type;
    }
    for (const gpt2__gguf_tensor& t : m->gguf.tensors) m->weight_bytes += (size_t)t.n_bytes;
    return GPT2_OK;
}

static gpt2_result gpt2__load_vocabulary(gpt2_model* m, gpt2_error* err) {
    const gpt2__gguf* g = &m->gguf;
    std::string_view kind, bpe_model;
    GPT2__TRY(gpt2__gguf_get_string(g, "gpt2h.tokenizer.kind", &kind, err));
    GPT2__TRY(gpt2__gguf_get_string(g, "tokenizer.ggml.model", &bpe_model, err));
    if (kind == "char") {
        gpt2__vector<std::string_view> chars;
        GPT2__TRY(gpt2__gguf_get_string_array(g, "gpt2h.tokenizer.chars", &chars, err));
        GPT2__TRY(gpt2__tokenizer_init_char(&m->tokenizer, chars.data(), chars.size(), err));
    } else if (!kind.empty()) {
        return gpt2__fail(err, GPT2_ERROR_UNSUPPORTED, "gpt2h.tokenizer.kind is '%.*s', expected 'char'", (int)std::min<size_t>(kind.size(), 64), kind.data());
    } else if (bpe_model == "gpt2") {
        gpt2__vector<std::string_view> tokens, merges;
        GPT2__TRY(gpt2__gguf_get_string_array(g, "tokenizer.ggml.tokens", &tokens, err));
        GPT2__TRY(gpt2__gguf_get_string_array(g, "tokenizer.ggml.merges", &merges, err));
        int64_t eos = -1;
        GPT2__TRY(gpt2__gguf_get_int(g, "tokenizer.ggml.eos_token_id", false, 0, (int64_t)tokens.size() - 1, &eos, err));
        GPT2__TRY(gpt2__tokenizer_init_bpe(&m->tokenizer, tokens.data(), tokens.size(), merges.data(), merges.size(), (int32_t)eos, err));
    } else if (!bpe_model.empty()) {
        return gpt2__fail(err, GPT2_ERROR_UNSUPPORTED, "tokenizer.ggml.model is '%.*s', expected 'gpt2'", (int)std::min<size_t>(bpe_model.size(), 64), bpe_model.data());
    }
    m->n_vocab = m->n_vocab_rows;
    if (m->tokenizer.kind != GPT2_TOKENIZER_NONE) {
        size_t n = gpt2__tokenizer_size(&m->tokenizer);
        if (n > (size_t)m->n_vocab_rows)
            return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "the vocabulary has %zu tokens but token_embd.weight only %d rows", n, m->n_vocab_rows);
        m->n_vocab = (int)n; /* rows past the vocabulary are padding: never fed, never sampled */
    }
    return GPT2_OK;
}

static gpt2_result gpt2__model_init(gpt2_model* m, gpt2_error* err) {
    GPT2__TRY(gpt2__gguf_parse(m->file.data, m->file.size, &m->gguf, err));
    GPT2__TRY(gpt2__load_hparams(m, err));
    GPT2__TRY(gpt2__load_weights(m, err));
    GPT2__TRY(gpt2__load_vocabulary(m, err));
    gpt2__log(m->params, GPT2_LOG_INFO, "loaded '%s': %d layers, %d heads, n_embd %d, n_ctx %d, vocabulary %d, %s weights, %zu bytes",
              m->name.c_str(), m->n_layer, m->n_head, m->n_embd, m->n_ctx, m->n_vocab, gpt2__type_name(m->weight_type), m->weight_bytes);
    return GPT2_OK;
}

static void gpt2__model_destroy(gpt2_model* m) {
    gpt2__tokenizer_free(&m->tokenizer);
    gpt2__file_close(&m->file);
    m->~gpt2_model();
    GPT2_FREE(m);
}

static gpt2_model* gpt2__model_new(const gpt2_model_params* params) {
    void* memory = GPT2_MALLOC(sizeof(gpt2_model));
    if (!memory) return nullptr;
    gpt2_model* m = new (memory) gpt2_model();
    m->params = params ? *params : gpt2_model_default_params();
    return m;
}

/* ---- src/kernels_scalar.h ---- */
/* Portable kernels: small pure functions over pointers and sizes. They define the results the
   SIMD kernels must reproduce, and run wherever no SIMD kernel applies. */

/* Q8_0 block as GGUF lays it out: one f16 scale, then 32 signed bytes; value = scale * q. */
struct gpt2__block_q8_0 {
    uint16_t scale;
    int8_t q[32];
};
static_assert(sizeof(gpt2__block_q8_0) == 34, "q8_0 blocks are 34 bytes");

/* Converts one row of `n` values of any weight type to float. */
static void gpt2__dequantize_row(uint32_t type, const uint8_t* row, float* out, int64_t n) {
    switch (type) {
    case GPT2_TYPE_F32:
        std::memcpy(out, row, (size_t)n * 4);
        break;
    case GPT2_TYPE_F16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            std::memcpy(&h, row + 2 * i, 2);
            out[i] = gpt2__f16_to_f32(h);
        }
        break;
    case GPT2_TYPE_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t b;
            std::memcpy(&b, row + 2 * i, 2);
            out[i] = gpt2__bf16_to_f32(b);
        }
        break;
    case GPT2_TYPE_Q8_0:
        for (int64_t b = 0; b < n / 32; b++) {
            gpt2__block_q8_0 block;
            std::memcpy(&block, row + 34 * b, 34);
            const float scale = gpt2__f16_to_f32(block.scale);
            for (int i = 0; i < 32; i++) out[32 * b + i] = scale * (float)block.q[i];
        }
        break;
    default:
        GPT2_ASSERT(!"unknown weight type");
    }
}

/* Dot product of one weight row (any type) with a float vector of length n. */
static float gpt2__dot_row_scalar(uint32_t type, const uint8_t* row, const float* x, int64_t n) {
    float sum = 0.0f;
    switch (type) {
    case GPT2_TYPE_F32: {
        const float* w = (const float*)row;
        for (int64_t i = 0; i < n; i++) sum += w[i] * x[i];
        break;
    }
    case GPT2_TYPE_F16:
    case GPT2_TYPE_BF16:
    case GPT2_TYPE_Q8_0: {
        float buffer[256];
        for (int64_t start = 0; start < n; start += 256) {
            const int64_t len = std::min<int64_t>(256, n - start);
            const size_t offset = type == GPT2_TYPE_Q8_0 ? (size_t)start / 32 * 34 : (size_t)start * 2;
            gpt2__dequantize_row(type, row + offset, buffer, len);
            for (int64_t i = 0; i < len; i++) sum += buffer[i] * x[start + i];
        }
        break;
    }
    default:
        GPT2_ASSERT(!"unknown weight type");
    }
    return sum;
}

/* y[t][o] = bias[o] + W[o] . x[t] for tokens t < T and output rows o in [o_begin, o_end).
   x is T x W.cols, y is T x W.rows. */
static void gpt2__matmul_scalar(float* y, const float* x, const gpt2__weight* W, const float* bias, int T, int64_t o_begin, int64_t o_end) {
    for (int64_t o = o_begin; o < o_end; o++) {
        const uint8_t* row = W->data + (size_t)o * W->row_bytes;
        for (int t = 0; t < T; t++)
            y[(size_t)t * W->rows + o] = (bias ? bias[o] : 0.0f) + gpt2__dot_row_scalar(W->type, row, x + (size_t)t * W->cols, W->cols);
    }
}

/* nanoGPT's LayerNorm: (x - mean) / sqrt(var + eps) * weight + bias, biased variance. */
static void gpt2__layer_norm(float* out, const float* x, const float* weight, const float* bias, int n, float eps) {
    double mean = 0.0, var = 0.0;
    for (int i = 0; i < n; i++) mean += x[i];
    mean /= n;
    for (int i = 0; i < n; i++) var += (x[i] - mean) * (x[i] - mean);
    var /= n;
    const float inv_std = (float)(1.0 / std::sqrt(var + eps));
    for (int i = 0; i < n; i++) out[i] = (float)(x[i] - mean) * inv_std * weight[i] + (bias ? bias[i] : 0.0f);
}

static void gpt2__gelu(float* x, size_t n, bool tanh_form) {
    if (tanh_form) {
        const float k = 0.7978845608028654f; /* sqrt(2 / pi) */
        for (size_t i = 0; i < n; i++) x[i] = 0.5f * x[i] * (1.0f + std::tanh(k * (x[i] + 0.044715f * x[i] * x[i] * x[i])));
    } else {
        for (size_t i = 0; i < n; i++) x[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * 0.7071067811865476f));
    }
}

static void gpt2__add(float* y, const float* x, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] += x[i];
}

/* KV cache entries are float or f16; attention reads both through these. */
static inline float gpt2__load_kv(const float* p, size_t i) { return p[i]; }
static inline float gpt2__load_kv(const uint16_t* p, size_t i) { return gpt2__f16_to_f32(p[i]); }
static inline void gpt2__store_kv(float* p, size_t i, float v) { p[i] = v; }
static inline void gpt2__store_kv(uint16_t* p, size_t i, float v) { p[i] = gpt2__f32_to_f16(v); }

/* One head of causal attention for one query: softmax(q . k_j / sqrt(d)) over j < n_keys,
   then the weighted sum of v_j. k and v rows are `stride` apart; `scores` has n_keys entries. */
template <class KV>
static void gpt2__attend(float* out, const float* q, const KV* k, const KV* v, size_t stride, int n_keys, int head_dim, float* scores) {
    const float scale = 1.0f / std::sqrt((float)head_dim);
    float max_score = -INFINITY;
    for (int j = 0; j < n_keys; j++) {
        const KV* kj = k + (size_t)j * stride;
        float s = 0.0f;
        for (int d = 0; d < head_dim; d++) s += q[d] * gpt2__load_kv(kj, (size_t)d);
        scores[j] = s * scale;
        max_score = std::max(max_score, scores[j]);
    }
    float sum = 0.0f;
    for (int j = 0; j < n_keys; j++) {
        scores[j] = std::exp(scores[j] - max_score);
        sum += scores[j];
    }
    const float inv_sum = 1.0f / sum;
    for (int d = 0; d < head_dim; d++) out[d] = 0.0f;
    for (int j = 0; j < n_keys; j++) {
        const KV* vj = v + (size_t)j * stride;
        const float p = scores[j] * inv_sum;
        for (int d = 0; d < head_dim; d++) out[d] += p * gpt2__load_kv(vj, (size_t)d);
    }
}

/* ---- src/dispatch.h ---- */
/* Kernel dispatch: the one place that decides which implementation runs on this CPU. */

typedef void (*gpt2__matmul_fn)(float* y, const float* x, const gpt2__weight* W, const float* bias, int T, int64_t o_begin, int64_t o_end);

struct gpt2__kernels {
    const char* name;
    gpt2__matmul_fn matmul;
};

static gpt2__kernels gpt2__select_kernels() {
    return gpt2__kernels{"scalar", gpt2__matmul_scalar};
}

/* Chosen once per process; constant afterwards (thread-safe static initialisation). */
static const gpt2__kernels& gpt2__cpu_kernels() {
    static const gpt2__kernels kernels = gpt2__select_kernels();
    return kernels;
}

/* ---- src/threadpool.h ---- */
/* Worker threads of one session. Threads sleep on a condition variable between jobs, so an idle
   session costs the host application nothing; the calling thread does a share of every job. */

struct gpt2__pool {
    typedef void (*job_fn)(void* context, int thread_index, int n_threads);
    int n_threads = 1;
    std::vector<std::thread> workers;
    std::mutex mutex;
    std::condition_variable wake, done;
    uint64_t generation = 0; /* bumped for each job */
    int busy = 0;            /* workers still running the current job */
    bool stopping = false;
    job_fn job = nullptr;
    void* context = nullptr;
};

static void gpt2__pool_worker(gpt2__pool* pool, int index) {
    uint64_t seen = 0;
    for (;;) {
        gpt2__pool::job_fn job;
        void* context;
        {
            std::unique_lock<std::mutex> lock(pool->mutex);
            pool->wake.wait(lock, [&] { return pool->stopping || pool->generation != seen; });
            if (pool->stopping) return;
            seen = pool->generation;
            job = pool->job;
            context = pool->context;
        }
        job(context, index, pool->n_threads);
        std::lock_guard<std::mutex> lock(pool->mutex);
        if (--pool->busy == 0) pool->done.notify_one();
    }
}

/* Returns false when threads could not be started (the pool then runs everything inline). */
static bool gpt2__pool_start(gpt2__pool* pool, int n_threads) {
    pool->n_threads = 1;
#if defined(__cpp_exceptions)
    try {
#endif
        for (int i = 1; i < n_threads; i++) {
            pool->workers.emplace_back(gpt2__pool_worker, pool, i);
            pool->n_threads = i + 1;
        }
#if defined(__cpp_exceptions)
    } catch (...) {
        return false;
    }
#endif
    return true;
}

static void gpt2__pool_stop(gpt2__pool* pool) {
    {
        std::lock_guard<std::mutex> lock(pool->mutex);
        pool->stopping = true;
    }
    pool->wake.notify_all();
    for (std::thread& t : pool->workers) t.join();
    pool->workers.clear();
}

/* Runs job(context, i, n) on every thread i of the pool and returns when all are done. */
static void gpt2__pool_run(gpt2__pool* pool, gpt2__pool::job_fn job, void* context) {
    if (pool->n_threads > 1) {
        {
            std::lock_guard<std::mutex> lock(pool->mutex);
            pool->job = job;
            pool->context = context;
            pool->busy = pool->n_threads - 1;
            pool->generation++;
        }
        pool->wake.notify_all();
    }
    job(context, 0, pool->n_threads);
    if (pool->n_threads > 1) {
        std::unique_lock<std::mutex> lock(pool->mutex);
        pool->done.wait(lock, [&] { return pool->busy == 0; });
    }
}

/* Splits [0, n) into one contiguous range per thread and calls body(begin, end) on each. */
template <class Body>
static void gpt2__parallel_for(gpt2__pool* pool, int64_t n, const Body& body) {
    struct Job {
        const Body* body;
        int64_t n;
        static void run(void* context, int index, int n_threads) {
            const Job* job = (const Job*)context;
            const int64_t begin = job->n * index / n_threads, end = job->n * (index + 1) / n_threads;
            if (begin < end) (*job->body)(begin, end);
        }
    };
    Job job{&body, n};
    gpt2__pool_run(pool, Job::run, &job);
}

/* ---- src/forward.h ---- */
/* The session and the forward pass: nanoGPT's model.py over plain arrays, with a KV cache.
   Shapes in comments: T new tokens, C = n_embd, F = n_ff, V = n_vocab. */

struct gpt2_session {
    const gpt2_model* model = nullptr;
    int n_ctx = 0;
    bool kv_f16 = false;
    gpt2__pool pool;
    const gpt2__kernels* kernels = nullptr;
    gpt2__vector<int32_t> tokens; /* the context window: at most n_ctx ids */
    int n_cached = 0;             /* tokens[0..n_cached) have their keys and values in the cache */
    void* k_cache = nullptr;      /* (n_layer, n_ctx, C) float or f16 */
    void* v_cache = nullptr;
    float* x = nullptr;       /* (n_ctx, C) residual stream */
    float* xn = nullptr;      /* (n_ctx, C) normalised input of a sub-block; after the pass, ln_f output */
    float* qkv = nullptr;     /* (n_ctx, 3C) */
    float* att = nullptr;     /* (n_ctx, C) attention output, then any (T, C) temporary */
    float* fc = nullptr;      /* (n_ctx, F) */
    float* scores = nullptr;  /* (n_threads, n_ctx) attention weights */
    float* logits = nullptr;  /* (V) */
    float* probs = nullptr;   /* (V) sampling scratch */
    bool has_logits = false;
    uint64_t rng_state = 0;
    gpt2__utf8_stream stream;
    gpt2__string text;        /* the text of the token being delivered to the callback */
};

static void gpt2__session_destroy(gpt2_session* s) {
    gpt2__pool_stop(&s->pool);
    void* buffers[] = {s->k_cache, s->v_cache, s->x, s->xn, s->qkv, s->att, s->fc, s->scores, s->logits, s->probs};
    for (void* b : buffers) GPT2_FREE(b);
    if (s->model) s->model->n_sessions--;
    s->~gpt2_session();
    GPT2_FREE(s);
}

static gpt2_result gpt2__session_alloc(gpt2_session* s, gpt2_error* err) {
    const gpt2_model* m = s->model;
    const size_t ctx = (size_t)s->n_ctx, C = (size_t)m->n_embd;
    const size_t cache = (size_t)m->n_layer * ctx * C * (s->kv_f16 ? 2 : 4);
    struct { void** p; size_t bytes; } plan[] = {
        {&s->k_cache, cache}, {&s->v_cache, cache},
        {(void**)&s->x, ctx * C * 4}, {(void**)&s->xn, ctx * C * 4}, {(void**)&s->qkv, ctx * 3 * C * 4},
        {(void**)&s->att, ctx * C * 4}, {(void**)&s->fc, ctx * (size_t)m->n_ff * 4},
        {(void**)&s->scores, (size_t)s->pool.n_threads * ctx * 4}, {(void**)&s->logits, (size_t)m->n_vocab * 4}, {(void**)&s->probs, (size_t)m->n_vocab * 4},
    };
    for (auto& b : plan) {
        *b.p = GPT2_MALLOC(b.bytes);
        if (!*b.p) return gpt2__fail(err, GPT2_ERROR_OUT_OF_MEMORY, "cannot allocate %zu bytes for the session (n_ctx %d)", b.bytes, s->n_ctx);
    }
    return GPT2_OK;
}

/* y (T, W.rows) = x (T, W.cols) W^T + bias, split over the rows of W. */
static void gpt2__matmul(gpt2_session* s, float* y, const float* x, const gpt2__weight& W, const float* bias, int T) {
    const gpt2__matmul_fn matmul = s->kernels->matmul;
    gpt2__parallel_for(&s->pool, W.rows, [&](int64_t begin, int64_t end) { matmul(y, x, &W, bias, T, begin, end); });
}

static void gpt2__layer_norm_rows(gpt2_session* s, float* out, const float* x, const float* weight, const float* bias, int T) {
    const int C = s->model->n_embd;
    const float eps = s->model->layer_norm_eps;
    gpt2__parallel_for(&s->pool, T, [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; t++) gpt2__layer_norm(out + t * C, x + t * C, weight, bias, C, eps);
    });
}

/* Causal self-attention of T new queries at positions pos0.. against the cache of one layer. */
template <class KV>
static void gpt2__attention(gpt2_session* s, int layer, int T, int pos0) {
    const gpt2_model* m = s->model;
    const int C = m->n_embd, H = m->n_head, D = C / H;
    KV* k_cache = (KV*)s->k_cache + (size_t)layer * s->n_ctx * C;
    KV* v_cache = (KV*)s->v_cache + (size_t)layer * s->n_ctx * C;
    for (int t = 0; t < T; t++) {
        const float* row = s->qkv + (size_t)t * 3 * C;
        for (int i = 0; i < C; i++) {
            gpt2__store_kv(k_cache, (size_t)(pos0 + t) * C + i, row[C + i]);
            gpt2__store_kv(v_cache, (size_t)(pos0 + t) * C + i, row[2 * C + i]);
        }
    }
    struct Job {
        gpt2_session* s;
        const KV *k, *v;
        int T, pos0, C, H, D;
        static void run(void* context, int index, int n_threads) {
            const Job& j = *(const Job*)context;
            float* scores = j.s->scores + (size_t)index * j.s->n_ctx;
            const int64_t n = (int64_t)j.T * j.H;
            for (int64_t task = n * index / n_threads; task < n * (index + 1) / n_threads; task++) {
                const int t = (int)(task / j.H), h = (int)(task % j.H);
                const float* q = j.s->qkv + (size_t)t * 3 * j.C + (size_t)h * j.D;
                gpt2__attend(j.s->att + (size_t)t * j.C + (size_t)h * j.D, q, j.k + (size_t)h * j.D, j.v + (size_t)h * j.D, (size_t)j.C, j.pos0 + t + 1, j.D, scores);
            }
        }
    };
    Job job{s, k_cache, v_cache, T, pos0, C, H, D};
    gpt2__pool_run(&s->pool, Job::run, &job);
}

/* Runs tokens ids[0..T) at positions pos0..pos0+T-1 (the cache holds positions 0..pos0-1 of
   the same sequence). Leaves the final LayerNorm of every new position in s->xn (T, C). */
static void gpt2__forward(gpt2_session* s, const int32_t* ids, int T, int pos0) {
    const gpt2_model* m = s->model;
    const int C = m->n_embd;
    float* position = s->att; /* scratch row */
    for (int t = 0; t < T; t++) { /* x = wte[id] + wpe[pos] */
        float* x = s->x + (size_t)t * C;
        gpt2__dequantize_row(m->wte.type, m->wte.data + (size_t)ids[t] * m->wte.row_bytes, x, C);
        gpt2__dequantize_row(m->wpe.type, m->wpe.data + (size_t)(pos0 + t) * m->wpe.row_bytes, position, C);
        gpt2__add(x, position, (size_t)C);
    }
    for (int l = 0; l < m->n_layer; l++) {
        const gpt2__layer& L = m->layers[(size_t)l];
        /* x = x + attn(ln_1(x)) */
        gpt2__layer_norm_rows(s, s->xn, s->x, L.ln_1_weight, L.ln_1_bias, T);
        gpt2__matmul(s, s->qkv, s->xn, L.c_attn, L.c_attn_bias, T);
        if (s->kv_f16) gpt2__attention<uint16_t>(s, l, T, pos0);
        else gpt2__attention<float>(s, l, T, pos0);
        gpt2__matmul(s, s->xn, s->att, L.c_proj, L.c_proj_bias, T);
        gpt2__add(s->x, s->xn, (size_t)T * C);
        /* x = x + mlp(ln_2(x)) */
        gpt2__layer_norm_rows(s, s->xn, s->x, L.ln_2_weight, L.ln_2_bias, T);
        gpt2__matmul(s, s->fc, s->xn, L.c_fc, L.c_fc_bias, T);
        gpt2__parallel_for(&s->pool, (int64_t)T * m->n_ff, [&](int64_t begin, int64_t end) {
            gpt2__gelu(s->fc + begin, (size_t)(end - begin), m->gelu_tanh);
        });
        gpt2__matmul(s, s->att, s->fc, L.mlp_proj, L.mlp_proj_bias, T);
        gpt2__add(s->x, s->att, (size_t)T * C);
    }
    gpt2__layer_norm_rows(s, s->xn, s->x, m->ln_f_weight, m->ln_f_bias, T);
}

/* logits (V) = lm_head (V, C) h (C); padding rows past n_vocab are never computed. */
static void gpt2__head(gpt2_session* s, const float* h, float* logits) {
    gpt2__weight head = s->model->lm_head;
    head.rows = s->model->n_vocab;
    const gpt2__matmul_fn matmul = s->kernels->matmul;
    gpt2__parallel_for(&s->pool, head.rows, [&](int64_t begin, int64_t end) { matmul(logits, h, &head, nullptr, 1, begin, end); });
}

static gpt2_result gpt2__check_tokens(const gpt2_model* m, const int32_t* ids, size_t n, gpt2_error* err) {
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= m->n_vocab)
            return gpt2__fail(err, GPT2_ERROR_BAD_TOKEN, "token %zu is %d, outside the vocabulary [0, %d)", i, (int)ids[i], m->n_vocab);
    return GPT2_OK;
}

/* Appends tokens to the context window and runs the model over what the cache lacks. When the
   window would exceed n_ctx, it keeps the last n_ctx tokens and recomputes them all, exactly
   as nanoGPT's generate() crops its input. Afterwards xn holds the new positions' final
   hidden states and s->logits the prediction after the last token. */
static gpt2_result gpt2__session_append(gpt2_session* s, const int32_t* ids, size_t n, gpt2_error* err) {
    GPT2__TRY(gpt2__check_tokens(s->model, ids, n, err));
    if (n > (size_t)s->n_ctx)
        return gpt2__fail(err, GPT2_ERROR_CONTEXT_FULL, "%zu tokens given at once, but the context holds %d; split them or use a shorter prompt", n, s->n_ctx);
    if (n == 0) return GPT2_OK;
    const size_t total = s->tokens.size() + n;
    if (total > (size_t)s->n_ctx) {
        const size_t drop = total - (size_t)s->n_ctx;
        s->tokens.erase(s->tokens.begin(), s->tokens.begin() + (ptrdiff_t)drop);
        s->n_cached = 0; /* every position moved: the cache is no longer valid */
    }
    s->tokens.insert(s->tokens.end(), ids, ids + n);
    const int T = (int)s->tokens.size() - s->n_cached;
    gpt2__forward(s, s->tokens.data() + s->n_cached, T, s->n_cached);
    s->n_cached = (int)s->tokens.size();
    gpt2__head(s, s->xn + (size_t)(T - 1) * s->model->n_embd, s->logits);
    s->has_logits = true;
    return GPT2_OK;
}

/* log softmax(logits)[id], in double. */
static double gpt2__log_prob(const float* logits, int n, int32_t id) {
    double max_logit = logits[0];
    for (int i = 1; i < n; i++) max_logit = std::max(max_logit, (double)logits[i]);
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += std::exp((double)logits[i] - max_logit);
    return (double)logits[id] - max_logit - std::log(sum);
}

/* ---- src/sampler.h ---- */
/* Sampling, nanoGPT's way: logits / temperature, keep the top_k, softmax, draw one. The RNG is
   our own (SplitMix64) so a seed gives the same tokens on every platform and compiler. */

static uint64_t gpt2__rng_next(uint64_t* state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1) with 53 random bits. */
static double gpt2__rng_uniform(uint64_t* state) { return (double)(gpt2__rng_next(state) >> 11) * (1.0 / 9007199254740992.0); }

static gpt2_result gpt2__check_sampling(float temperature, int top_k, gpt2_error* err) {
    if (!std::isfinite(temperature) || temperature < 0.0f)
        return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "temperature is %g; expected a finite number >= 0 (0 = greedy)", (double)temperature);
    if (top_k < 0) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "top_k is %d; expected >= 0 (0 = no limit)", top_k);
    return GPT2_OK;
}

static int32_t gpt2__argmax(const float* logits, int n) {
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

/* `scratch` holds n floats. top_k larger than n keeps all (nanoGPT: min(top_k, vocab_size)). */
static int32_t gpt2__sample(const float* logits, int n, float temperature, int top_k, uint64_t* rng, float* scratch) {
    if (temperature == 0.0f || top_k == 1) return gpt2__argmax(logits, n);
    float threshold = -INFINITY;
    if (top_k > 0 && top_k < n) { /* nanoGPT keeps every logit >= the k-th largest */
        std::memcpy(scratch, logits, (size_t)n * sizeof(float));
        std::nth_element(scratch, scratch + (top_k - 1), scratch + n, std::greater<float>());
        threshold = scratch[top_k - 1];
    }
    const double inv_t = 1.0 / temperature;
    const float max_logit = logits[gpt2__argmax(logits, n)];
    double total = 0.0;
    for (int i = 0; i < n; i++) {
        scratch[i] = logits[i] >= threshold ? (float)std::exp(((double)logits[i] - max_logit) * inv_t) : 0.0f;
        total += scratch[i];
    }
    double target = gpt2__rng_uniform(rng) * total, running = 0.0;
    int32_t last_kept = 0;
    for (int i = 0; i < n; i++) {
        if (scratch[i] == 0.0f) continue;
        last_kept = i;
        running += scratch[i];
        if (target < running) return i;
    }
    return last_kept; /* rounding left target at the very top */
}

/* ---- src/capi.h ---- */
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

static gpt2_result gpt2__check_device(const gpt2_model_params* params, gpt2_error* err) {
    if (params && params->device != GPT2_DEVICE_CPU)
        return gpt2__fail(err, GPT2_ERROR_UNSUPPORTED, "device %d is not available in this build (include gpt2_cuda.cuh for CUDA)", (int)params->device);
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
    *out_model = m;
    return gpt2__ok(err);
    GPT2__GUARD_END(err)
}

GPT2_DEF void gpt2_model_free(gpt2_model* model) {
    if (!model) return;
    /* Freeing a model while sessions use it leaves them dangling: caught in debug builds. */
    GPT2_ASSERT(model->n_sessions.load() == 0 && "gpt2_model_free: free every session of this model first");
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
    if (session) gpt2__session_destroy(session);
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
    GPT2__TRY(gpt2__session_append(s, tokens, n, err));
    return gpt2__ok(err);
    GPT2__GUARD_END(err)
}

GPT2_DEF const float* gpt2_session_logits(const gpt2_session* s) { return s && s->has_logits ? s->logits : nullptr; }

GPT2_DEF gpt2_result gpt2_score(gpt2_session* s, const int32_t* tokens, size_t n, double* out_logprob_sum, gpt2_error* err) {
    if (!s || !out_logprob_sum) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "session or out_logprob_sum is NULL");
    if (!tokens || n == 0) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "no tokens to score");
    GPT2__TRY(gpt2__check_tokens(s->model, tokens, n, err));
    GPT2__GUARD_BEGIN
    gpt2_session_reset(s);
    const int V = s->model->n_vocab, C = s->model->n_embd;
    const size_t first = std::min(n, (size_t)s->n_ctx);
    GPT2__TRY(gpt2__session_append(s, tokens, first, err));
    double sum = 0.0;
    for (size_t t = 1; t < first; t++) { /* every position of the first window, from one pass */
        gpt2__head(s, s->xn + (t - 1) * C, s->probs);
        sum += gpt2__log_prob(s->probs, V, tokens[t]);
    }
    for (size_t t = first; t < n; t++) { /* past n_ctx: nanoGPT's sliding window, one step each */
        sum += gpt2__log_prob(s->logits, V, tokens[t]);
        if (t + 1 < n) GPT2__TRY(gpt2__session_append(s, tokens + t, 1, err));
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
    if (n_prompt) GPT2__TRY(gpt2__session_append(s, prompt, n_prompt, err));
    s->rng_state = p.seed;
    const gpt2_model* m = s->model;
    for (int i = 0; i < p.max_new_tokens; i++) {
        const int32_t token = gpt2__sample(s->logits, m->n_vocab, p.temperature, p.top_k, &s->rng_state, s->probs);
        if (out_tokens && (size_t)i < capacity) out_tokens[i] = token;
        if (n_generated) *n_generated = (size_t)i + 1;
        const bool stop = gpt2__deliver(s, p, token);
        GPT2__TRY(gpt2__session_append(s, &token, 1, err)); /* the token joins the context either way */
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

/* ---- src/end.h ---- */
#endif /* GPT2_IMPLEMENTATION */

/*
MIT License - Copyright (c) 2026 The gpt2.h authors. Full text in LICENSE.

Permission is hereby granted, free of charge, to any person obtaining a copy of this software and
associated documentation files (the "Software"), to deal in the Software without restriction,
including without limitation the rights to use, copy, modify, merge, publish, distribute,
sublicense, and/or sell copies of the Software, and to permit persons to whom the Software is
furnished to do so, subject to the following conditions: The above copyright notice and this
permission notice shall be included in all copies or substantial portions of the Software.
THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED.
*/
