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
     GPT2_FORCE_KERNELS "avx2"  use this kernel set ("scalar", "avx2", "avx512", "neon") when the
                             CPU has it; by default the best one is picked at run time (cpuid)
     GPT2_SPIN_MICROSECONDS  how long idle worker threads spin before sleeping (default 50)
     GPT2_PREFETCH_BYTES     software prefetch distance of the q8_0 decode kernel (default 16384)
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
#define GPT2_DEF [[maybe_unused]] static /* a program need not call every function */
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

/* The arguments of one matrix multiplication, y (T, W.rows) = x (T, W.cols) W^T + bias.
   A kernel computes the output columns [o_begin, o_end) of every token; the threads of a
   session split the rows of W between them. Every output is computed in the same order
   whichever range it falls in, so results never depend on the number of threads. */
struct gpt2__matmul_args {
    float* y;                  /* (T, W->rows) */
    const float* x;            /* (T, W->cols) */
    const int8_t* xq;          /* x quantized in blocks of 32 (gpt2__quantize_q8): when set and W is q8_0, */
    const float* xq_scale;     /*   the kernel uses integer dot products (decode); else it reads x */
    const gpt2__weight* W;
    const float* bias;         /* (W->rows) or NULL */
    int T;
    bool accumulate;           /* y += x W^T + bias (the residual connection) instead of y = */
};

/* Quantizes n values (n a multiple of 32) to blocks of 32 int8 with one float scale each,
   q = round(x * 127 / max|x|), the activation side of q8_0 x q8_0 dot products. Every kernel
   set quantizes with these same float operations, so the result is identical everywhere. */
static void gpt2__quantize_q8_scalar(int8_t* q, float* scale, const float* x, int64_t n) {
    for (int64_t b = 0; b < n / 32; b++) {
        float amax = 0.0f;
        for (int i = 0; i < 32; i++) amax = std::max(amax, std::fabs(x[32 * b + i]));
        const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
        scale[b] = amax / 127.0f;
        for (int i = 0; i < 32; i++) q[32 * b + i] = (int8_t)std::nearbyint(x[32 * b + i] * inv);
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

/* A q8_0 weight row against activations quantized by gpt2__quantize_q8: exact integer sums
   per block of 32, scaled by both blocks' scales. */
static float gpt2__dot_q8_scalar(const uint8_t* row, const int8_t* xq, const float* xscale, int64_t n) {
    float sum = 0.0f;
    for (int64_t b = 0; b < n / 32; b++) {
        gpt2__block_q8_0 block;
        std::memcpy(&block, row + 34 * b, 34);
        int32_t isum = 0;
        for (int i = 0; i < 32; i++) isum += (int32_t)block.q[i] * (int32_t)xq[32 * b + i];
        sum += (float)isum * (gpt2__f16_to_f32(block.scale) * xscale[b]);
    }
    return sum;
}

static void gpt2__matmul_scalar(const gpt2__matmul_args& a, int64_t o_begin, int64_t o_end, float* panel) {
    (void)panel;
    const gpt2__weight* W = a.W;
    const bool int8 = W->type == GPT2_TYPE_Q8_0 && a.xq;
    for (int64_t o = o_begin; o < o_end; o++) {
        const uint8_t* row = W->data + (size_t)o * W->row_bytes;
        for (int t = 0; t < a.T; t++) {
            float v = (a.bias ? a.bias[o] : 0.0f);
            v += int8 ? gpt2__dot_q8_scalar(row, a.xq + (size_t)t * W->cols, a.xq_scale + (size_t)t * (W->cols / 32), W->cols)
                      : gpt2__dot_row_scalar(W->type, row, a.x + (size_t)t * W->cols, W->cols);
            float* y = a.y + (size_t)t * W->rows + o;
            *y = a.accumulate ? *y + v : v;
        }
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

static void gpt2__gelu_scalar(float* x, size_t n, bool tanh_form) {
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
static void gpt2__attend_scalar(float* out, const float* q, const KV* k, const KV* v, size_t stride, int n_keys, int head_dim, float* scores) {
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

static void gpt2__attend_f32_scalar(float* out, const float* q, const float* k, const float* v, size_t stride, int n_keys, int head_dim, float* scores) {
    gpt2__attend_scalar(out, q, k, v, stride, n_keys, head_dim, scores);
}
static void gpt2__attend_f16_scalar(float* out, const float* q, const uint16_t* k, const uint16_t* v, size_t stride, int n_keys, int head_dim, float* scores) {
    gpt2__attend_scalar(out, q, k, v, stride, n_keys, head_dim, scores);
}

/* ---- src/kernels_x86.h ---- */
/* x86 kernels: AVX2 + FMA + F16C, and AVX-512 (F, BW, VL, DQ, VNNI). Each function carries its
   instruction set in a target attribute, so the library builds without -m flags and the
   dispatcher (dispatch.h) runs only what the CPU has.

   Matrix products come in two shapes:
   - decode (few tokens): every weight is read once, straight from the (mapped) file, in its own
     type: memory bandwidth is the limit. q8_0 rows meet activations quantized to int8 in
     blocks of 32 and use integer dot products (vpdpbusd / pmaddubsw), as ggml's q8_0 x q8_0.
   - prefill (many tokens): a panel of MR rows is converted to float once (in L1) and multiplied
     with tiles of NT tokens held in registers, so each weight load feeds NT FMAs: arithmetic is
     the limit.
   Every output is one accumulator reduced the same way in both shapes and in every tile, so a
   result does not depend on where its row falls in a thread's range. */

#if !defined(GPT2_NO_SIMD) && (defined(__x86_64__) || defined(_M_X64))
#define GPT2__X86 1
#include <immintrin.h>
#if defined(_MSC_VER) && !defined(__clang__)
#include <intrin.h>
#define GPT2__AVX2
#define GPT2__AVX512
#else
#include <cpuid.h>
#define GPT2__AVX2 __attribute__((target("avx2,fma,f16c")))
#define GPT2__AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))
/* GCC 12 warns inside its own AVX-512 intrinsics (their _mm512_undefined_ps() pass-through). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#endif

/* Fully unrolled loops over the accumulators keep them in registers. */
#if defined(__clang__)
#define GPT2__UNROLL _Pragma("unroll")
#elif defined(__GNUC__)
#define GPT2__UNROLL _Pragma("GCC unroll 16")
#else
#define GPT2__UNROLL
#endif

/* The q8_0 decode kernel does enough work per byte that the hardware prefetcher alone leaves
   DRAM idle part of the time: it prefetches this far ahead in every row (measured on Zen 4 from
   DRAM, one thread: 8.3 GB/s without, 10.7 GB/s at 16 KiB). The float kernels stream faster
   without it. */
#ifndef GPT2_PREFETCH_BYTES
#define GPT2_PREFETCH_BYTES 16384
#endif
static const int GPT2__PREFETCH = GPT2_PREFETCH_BYTES;

#ifndef GPT2__DR
#define GPT2__DR 8 /* rows per step of the decode kernels */
#endif

static const int GPT2__MR = 4, GPT2__NT = 4, GPT2__TOKEN_CHUNK = 64;

/* ---- AVX-512 -------------------------------------------------------------------------- */

/* 16 weights of a row from element k, as floats; lanes outside mask m are zero. */
template <uint32_t TYPE>
GPT2__AVX512 static inline __m512 gpt2__w16_avx512(const uint8_t* row, int64_t k, __mmask16 m) {
    if constexpr (TYPE == GPT2_TYPE_F32) {
        return _mm512_maskz_loadu_ps(m, (const float*)row + k);
    } else if constexpr (TYPE == GPT2_TYPE_F16) {
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, row + 2 * k));
    } else {
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, row + 2 * k)), 16));
    }
}

GPT2__AVX512 static inline __mmask16 gpt2__mask16(int64_t k, int64_t n) {
    return n - k >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - k)) - 1);
}

/* out[r] = row r . x for R rows of a float/f16/bf16 matrix. */
template <uint32_t TYPE, int R>
GPT2__AVX512 static void gpt2__rows_avx512(float* out, const uint8_t* w, size_t row_bytes, const float* x, int64_t K) {
    __m512 acc[R];
    GPT2__UNROLL
    for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_ps();
    for (int64_t k = 0; k < K; k += 16) {
        const __mmask16 m = gpt2__mask16(k, K);
        const __m512 xv = _mm512_maskz_loadu_ps(m, x + k);
        GPT2__UNROLL
        for (int r = 0; r < R; r++) acc[r] = _mm512_fmadd_ps(gpt2__w16_avx512<TYPE>(w + r * row_bytes, k, m), xv, acc[r]);
    }
    GPT2__UNROLL
    for (int r = 0; r < R; r++) out[r] = _mm512_reduce_add_ps(acc[r]);
}

/* out[r] = row r . x for R <= 8 rows of q8_0 against x quantized by gpt2__quantize_q8: two
   blocks per 512-bit register, |w| (unsigned) times x with w's sign, summed in int32 per block
   (vpdpbusd), then scaled. The 2R block scales of a step come in one gather. */
template <int R>
GPT2__AVX512 static void gpt2__rows_q8_avx512(float* out, const uint8_t* w, size_t row_bytes, const int8_t* xq, const float* xs, int64_t K) {
    static_assert(R >= 1 && R <= 8, "one gather holds the scales of 8 rows");
    const int64_t nb = K / 32;
    __m512 acc[R];
    GPT2__UNROLL
    for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_ps();
    const __m512i zero = _mm512_setzero_si512();
    /* lane 2r + j: offset of row r's block b + j from block b of row 0 */
    const __m512i lane = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    const __m512i offsets = _mm512_add_epi32(_mm512_mullo_epi32(lane, _mm512_set1_epi32((int)row_bytes)), _mm512_setr_epi32(0, 34, 0, 34, 0, 34, 0, 34, 0, 34, 0, 34, 0, 34, 0, 34));
    const __mmask16 rows_mask = (__mmask16)((1u << (2 * R)) - 1);
    const __m512i pick_x = _mm512_setr_epi32(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1);
    const __m512i half = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
        const __m512i xv = _mm512_loadu_si512(xq + 32 * b);
        /* 4 bytes at each scale: the f16 scale and 2 bytes of weights, dropped by the narrowing */
        const __m512i raw = _mm512_mask_i32gather_epi32(zero, rows_mask, offsets, w + 34 * b, 1);
        const __m512 xs2 = _mm512_permutexvar_ps(pick_x, _mm512_castps128_ps512(_mm_castpd_ps(_mm_load_sd((const double*)(xs + b)))));
        const __m512 scales = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_cvtepi32_epi16(raw)), xs2);
        GPT2__UNROLL
        for (int r = 0; r < R; r++) {
            const uint8_t* p = w + r * row_bytes + 34 * b;
            _mm_prefetch((const char*)(p + GPT2__PREFETCH), _MM_HINT_T0);
            const __m512i wv = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i*)(p + 2))), _mm256_loadu_si256((const __m256i*)(p + 36)), 1);
            const __m512i sx = _mm512_mask_sub_epi8(xv, _mm512_movepi8_mask(wv), zero, xv);
            const __m512i dot = _mm512_dpbusd_epi32(zero, _mm512_abs_epi8(wv), sx);
            const __m512 sc = _mm512_permutexvar_ps(_mm512_add_epi32(_mm512_set1_epi32(2 * r), half), scales);
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), sc, acc[r]);
        }
    }
    if (b < nb) { /* an odd last block */
        const __m512i xv = _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i*)(xq + 32 * b)));
        GPT2__UNROLL
        for (int r = 0; r < R; r++) {
            const uint8_t* p = w + r * row_bytes + 34 * b;
            const __m512i wv = _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i*)(p + 2)));
            uint16_t h;
            std::memcpy(&h, p, 2);
            const __m512i sx = _mm512_mask_sub_epi8(xv, _mm512_movepi8_mask(wv), zero, xv);
            const __m512i dot = _mm512_dpbusd_epi32(zero, _mm512_abs_epi8(wv), sx);
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_set1_ps(_cvtsh_ss(h) * xs[b]), acc[r]);
        }
    }
    GPT2__UNROLL
    for (int r = 0; r < R; r++) out[r] = _mm512_reduce_add_ps(acc[r]);
}

/* Converts `rows` rows of any weight type to a float panel (rows x K). */
GPT2__AVX512 static void gpt2__panel_avx512(float* panel, const gpt2__weight* W, int64_t o, int rows) {
    const int64_t K = W->cols;
    for (int r = 0; r < rows; r++) {
        const uint8_t* row = W->data + (size_t)(o + r) * W->row_bytes;
        float* dst = panel + (size_t)r * K;
        if (W->type == GPT2_TYPE_Q8_0) {
            for (int64_t b = 0; b < K / 32; b++) {
                uint16_t h;
                std::memcpy(&h, row + 34 * b, 2);
                const __m512 scale = _mm512_set1_ps(_cvtsh_ss(h));
                const __m128i* q = (const __m128i*)(row + 34 * b + 2);
                _mm512_storeu_ps(dst + 32 * b, _mm512_mul_ps(scale, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(q)))));
                _mm512_storeu_ps(dst + 32 * b + 16, _mm512_mul_ps(scale, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(q + 1)))));
            }
        } else {
            for (int64_t k = 0; k < K; k += 16) {
                const __mmask16 m = gpt2__mask16(k, K);
                const __m512 v = W->type == GPT2_TYPE_F16 ? gpt2__w16_avx512<GPT2_TYPE_F16>(row, k, m) : gpt2__w16_avx512<GPT2_TYPE_BF16>(row, k, m);
                _mm512_mask_storeu_ps(dst + k, m, v);
            }
        }
    }
}

/* The sums of 16 vectors at once, lane i = sum of v[i]: a tree of shuffles and adds that
   treats every input alike, so each sum is the same whatever the other 15 hold. */
GPT2__AVX512 static inline __m512 gpt2__hsum16_avx512(const __m512* v) {
    __m512 s1[8], s2[4], s3[2];
    for (int i = 0; i < 8; i++) /* halves: lo 8 lanes = v[2i], hi = v[2i+1] */
        s1[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x44), _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xee));
    for (int i = 0; i < 4; i++) /* 128-bit lane k = v[4i + k] */
        s2[i] = _mm512_add_ps(_mm512_shuffle_f32x4(s1[2 * i], s1[2 * i + 1], 0x88), _mm512_shuffle_f32x4(s1[2 * i], s1[2 * i + 1], 0xdd));
    for (int i = 0; i < 2; i++) /* lane k: v[8i + k] twice, then v[8i + 4 + k] twice */
        s3[i] = _mm512_add_ps(_mm512_shuffle_ps(s2[2 * i], s2[2 * i + 1], 0x44), _mm512_shuffle_ps(s2[2 * i], s2[2 * i + 1], 0xee));
    const __m512 t = _mm512_add_ps(_mm512_shuffle_ps(s3[0], s3[1], 0x88), _mm512_shuffle_ps(s3[0], s3[1], 0xdd)); /* element 4k + m = v[4m + k] */
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), t);
}

/* out[r * NT + t] = w_r . x_t for an R x N tile: R weight rows (ldw apart) and N tokens (ldx apart). */
template <int R, int N>
GPT2__AVX512 static void gpt2__tile_avx512(float* out, const float* w, size_t ldw, const float* x, size_t ldx, int64_t K) {
    static_assert(R * N <= 16 && GPT2__MR * GPT2__NT == 16, "one tile is reduced by one 16-way sum");
    __m512 acc[16];
    GPT2__UNROLL
    for (int i = 0; i < 16; i++) acc[i] = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 16 <= K; k += 16) {
        __m512 xv[N];
        GPT2__UNROLL
        for (int t = 0; t < N; t++) xv[t] = _mm512_loadu_ps(x + t * ldx + k);
        GPT2__UNROLL
        for (int r = 0; r < R; r++) {
            const __m512 wv = _mm512_loadu_ps(w + r * ldw + k);
            GPT2__UNROLL
            for (int t = 0; t < N; t++) acc[r * GPT2__NT + t] = _mm512_fmadd_ps(wv, xv[t], acc[r * GPT2__NT + t]);
        }
    }
    if (k < K) {
        const __mmask16 m = gpt2__mask16(k, K);
        __m512 xv[N];
        GPT2__UNROLL
        for (int t = 0; t < N; t++) xv[t] = _mm512_maskz_loadu_ps(m, x + t * ldx + k);
        GPT2__UNROLL
        for (int r = 0; r < R; r++) {
            const __m512 wv = _mm512_maskz_loadu_ps(m, w + r * ldw + k);
            GPT2__UNROLL
            for (int t = 0; t < N; t++) acc[r * GPT2__NT + t] = _mm512_fmadd_ps(wv, xv[t], acc[r * GPT2__NT + t]);
        }
    }
    _mm512_storeu_ps(out, gpt2__hsum16_avx512(acc));
}

template <int R>
GPT2__AVX512 static void gpt2__tile_n_avx512(float* out, const float* w, size_t ldw, const float* x, size_t ldx, int64_t K, int n) {
    switch (n) {
    case 1: gpt2__tile_avx512<R, 1>(out, w, ldw, x, ldx, K); break;
    case 2: gpt2__tile_avx512<R, 2>(out, w, ldw, x, ldx, K); break;
    case 3: gpt2__tile_avx512<R, 3>(out, w, ldw, x, ldx, K); break;
    default: gpt2__tile_avx512<R, GPT2__NT>(out, w, ldw, x, ldx, K); break;
    }
}

/* Stores an output with the bias and the residual, as gpt2__matmul_scalar does. */
static inline void gpt2__store_out(const gpt2__matmul_args& a, int t, int64_t o, float dot) {
    const float v = (a.bias ? a.bias[o] : 0.0f) + dot;
    float* y = a.y + (size_t)t * a.W->rows + o;
    *y = a.accumulate ? *y + v : v;
}

template <uint32_t TYPE>
GPT2__AVX512 static void gpt2__decode_avx512(const gpt2__matmul_args& a, int64_t o_begin, int64_t o_end) {
    const gpt2__weight* W = a.W;
    const int64_t K = W->cols;
    for (int t = 0; t < a.T; t++) {
        const float* x = a.x + (size_t)t * K;
        const int8_t* xq = a.xq ? a.xq + (size_t)t * K : nullptr;
        const float* xs = a.xq ? a.xq_scale + (size_t)t * (K / 32) : nullptr;
        int64_t o = o_begin;
        float out[GPT2__DR];
        for (; o < o_end; o += GPT2__DR) {
            const uint8_t* w = W->data + (size_t)o * W->row_bytes;
            const int n = (int)std::min<int64_t>(GPT2__DR, o_end - o);
            if constexpr (TYPE == GPT2_TYPE_Q8_0) {
                if (n == GPT2__DR) gpt2__rows_q8_avx512<GPT2__DR>(out, w, W->row_bytes, xq, xs, K);
                else for (int r = 0; r < n; r++) gpt2__rows_q8_avx512<1>(out + r, w + r * W->row_bytes, W->row_bytes, xq, xs, K);
            } else {
                if (n == GPT2__DR) gpt2__rows_avx512<TYPE, GPT2__DR>(out, w, W->row_bytes, x, K);
                else for (int r = 0; r < n; r++) gpt2__rows_avx512<TYPE, 1>(out + r, w + r * W->row_bytes, W->row_bytes, x, K);
            }
            for (int r = 0; r < n; r++) gpt2__store_out(a, t, o + r, out[r]);
        }
    }
}

GPT2__AVX512 static void gpt2__prefill_avx512(const gpt2__matmul_args& a, int64_t o_begin, int64_t o_end, float* panel) {
    const gpt2__weight* W = a.W;
    const int64_t K = W->cols;
    float out[GPT2__MR * GPT2__NT];
    for (int t0 = 0; t0 < a.T; t0 += GPT2__TOKEN_CHUNK) {
        const int t_end = std::min(a.T, t0 + GPT2__TOKEN_CHUNK);
        for (int64_t o = o_begin; o < o_end; o += GPT2__MR) {
            const int rows = (int)std::min<int64_t>(GPT2__MR, o_end - o);
            const float* w = panel;
            size_t ldw = (size_t)K;
            if (W->type == GPT2_TYPE_F32) {
                w = (const float*)(W->data + (size_t)o * W->row_bytes);
                ldw = W->row_bytes / 4;
            } else {
                gpt2__panel_avx512(panel, W, o, rows);
            }
            for (int t = t0; t < t_end; t += GPT2__NT) {
                const int n = std::min(GPT2__NT, t_end - t);
                const float* x = a.x + (size_t)t * K;
                switch (rows) {
                case 1: gpt2__tile_n_avx512<1>(out, w, ldw, x, (size_t)K, K, n); break;
                case 2: gpt2__tile_n_avx512<2>(out, w, ldw, x, (size_t)K, K, n); break;
                case 3: gpt2__tile_n_avx512<3>(out, w, ldw, x, (size_t)K, K, n); break;
                default: gpt2__tile_n_avx512<GPT2__MR>(out, w, ldw, x, (size_t)K, K, n); break;
                }
                for (int r = 0; r < rows; r++)
                    for (int i = 0; i < n; i++) gpt2__store_out(a, t + i, o + r, out[r * GPT2__NT + i]);
            }
        }
    }
}

/* Few tokens: stream the weights once per token in their own type. Many: float panels. */
GPT2__AVX512 static void gpt2__matmul_avx512(const gpt2__matmul_args& a, int64_t o_begin, int64_t o_end, float* panel) {
    if (a.T >= GPT2__NT) return gpt2__prefill_avx512(a, o_begin, o_end, panel);
    switch (a.W->type) {
    case GPT2_TYPE_F32: gpt2__decode_avx512<GPT2_TYPE_F32>(a, o_begin, o_end); break;
    case GPT2_TYPE_F16: gpt2__decode_avx512<GPT2_TYPE_F16>(a, o_begin, o_end); break;
    case GPT2_TYPE_BF16: gpt2__decode_avx512<GPT2_TYPE_BF16>(a, o_begin, o_end); break;
    case GPT2_TYPE_Q8_0:
        if (a.xq) gpt2__decode_avx512<GPT2_TYPE_Q8_0>(a, o_begin, o_end);
        else gpt2__prefill_avx512(a, o_begin, o_end, panel);
        break;
    }
}

GPT2__AVX512 static void gpt2__quantize_q8_avx512(int8_t* q, float* scale, const float* x, int64_t n) {
    for (int64_t b = 0; b < n / 32; b++) {
        const __m512 v0 = _mm512_loadu_ps(x + 32 * b), v1 = _mm512_loadu_ps(x + 32 * b + 16);
        const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
        const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
        scale[b] = amax / 127.0f;
        const __m512 vi = _mm512_set1_ps(inv);
        _mm_storeu_si128((__m128i*)(q + 32 * b), _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v0, vi))));
        _mm_storeu_si128((__m128i*)(q + 32 * b + 16), _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v1, vi))));
    }
}

/* e^x to about 2 ulp (Cephes' expf polynomial); 0 below -87.3. */
GPT2__AVX512 static inline __m512 gpt2__exp_avx512(__m512 x) {
    x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(88.3f)), _mm512_set1_ps(-87.3f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(p, n);
}

/* GELU: exact form with erf from Abramowitz & Stegun 7.1.26 (absolute error < 1.5e-7), or
   the tanh form as 1 - 2 / (e^2u + 1). */
GPT2__AVX512 static void gpt2__gelu_avx512(float* x, size_t n, bool tanh_form) {
    for (size_t i = 0; i < n; i += 16) {
        const __mmask16 m = gpt2__mask16((int64_t)i, (int64_t)n);
        const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
        __m512 g; /* erf(v / sqrt 2) or tanh(...) */
        if (tanh_form) {
            const __m512 u = _mm512_mul_ps(_mm512_set1_ps(0.7978845608028654f), _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(0.044715f), v), _mm512_mul_ps(v, v), v));
            const __m512 e = gpt2__exp_avx512(_mm512_add_ps(u, u));
            g = _mm512_sub_ps(_mm512_set1_ps(1.0f), _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(e, _mm512_set1_ps(1.0f))));
        } else {
            const __m512 z = _mm512_abs_ps(_mm512_mul_ps(v, _mm512_set1_ps(0.7071067811865476f)));
            const __m512 t = _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_fmadd_ps(_mm512_set1_ps(0.3275911f), z, _mm512_set1_ps(1.0f)));
            __m512 p = _mm512_set1_ps(1.061405429f);
            p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-1.453152027f));
            p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(1.421413741f));
            p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-0.284496736f));
            p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0.254829592f));
            p = _mm512_mul_ps(p, t);
            const __m512 e = gpt2__exp_avx512(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_mul_ps(z, z)));
            const __m512 erf_abs = _mm512_fnmadd_ps(p, e, _mm512_set1_ps(1.0f));
            g = _mm512_mask_sub_ps(erf_abs, _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LT_OQ), _mm512_setzero_ps(), erf_abs);
        }
        const __m512 half_v = _mm512_mul_ps(_mm512_set1_ps(0.5f), v);
        _mm512_mask_storeu_ps(x + i, m, _mm512_fmadd_ps(half_v, g, half_v));
    }
}

template <class KV>
GPT2__AVX512 static inline __m512 gpt2__kv16_avx512(const KV* p, __mmask16 m) {
    if constexpr (sizeof(KV) == 4) return _mm512_maskz_loadu_ps(m, p);
    else return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
}

/* gpt2__attend_scalar with vector dot products, exponentials and sums. */
template <class KV>
GPT2__AVX512 static void gpt2__attend_avx512(float* out, const float* q, const KV* k, const KV* v, size_t stride, int n_keys, int head_dim, float* scores) {
    const float scale = 1.0f / std::sqrt((float)head_dim);
    __m512 vmax = _mm512_set1_ps(-INFINITY);
    for (int j = 0; j < n_keys; j++) {
        const KV* kj = k + (size_t)j * stride;
        __m512 acc = _mm512_setzero_ps();
        for (int d = 0; d < head_dim; d += 16) {
            const __mmask16 m = gpt2__mask16(d, head_dim);
            acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q + d), gpt2__kv16_avx512(kj + d, m), acc);
        }
        scores[j] = _mm512_reduce_add_ps(acc) * scale;
    }
    for (int j = 0; j < n_keys; j += 16) vmax = _mm512_mask_max_ps(vmax, gpt2__mask16(j, n_keys), vmax, _mm512_maskz_loadu_ps(gpt2__mask16(j, n_keys), scores + j));
    const __m512 max_score = _mm512_set1_ps(_mm512_reduce_max_ps(vmax));
    __m512 vsum = _mm512_setzero_ps();
    for (int j = 0; j < n_keys; j += 16) {
        const __mmask16 m = gpt2__mask16(j, n_keys);
        const __m512 e = _mm512_maskz_mov_ps(m, gpt2__exp_avx512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, scores + j), max_score)));
        _mm512_mask_storeu_ps(scores + j, m, e);
        vsum = _mm512_add_ps(vsum, e);
    }
    const float inv_sum = 1.0f / _mm512_reduce_add_ps(vsum);
    for (int d = 0; d < head_dim; d++) out[d] = 0.0f;
    for (int j = 0; j < n_keys; j++) {
        const KV* vj = v + (size_t)j * stride;
        const __m512 p = _mm512_set1_ps(scores[j] * inv_sum);
        for (int d = 0; d < head_dim; d += 16) {
            const __mmask16 m = gpt2__mask16(d, head_dim);
            _mm512_mask_storeu_ps(out + d, m, _mm512_fmadd_ps(p, gpt2__kv16_avx512(vj + d, m), _mm512_maskz_loadu_ps(m, out + d)));
        }
    }
}

GPT2__AVX512 static void gpt2__attend_f32_avx512(float* out, const float* q, const float* k, const float* v, size_t stride, int n_keys, int head_dim, float* scores) {
    gpt2__attend_avx512(out, q, k, v, stride, n_keys, head_dim, scores);
}
GPT2__AVX512 static void gpt2__attend_f16_avx512(float* out, const float* q, const uint16_t* k, const uint16_t* v, size_t stride, int n_keys, int head_dim, float* scores) {
    gpt2__attend_avx512(out, q, k, v, stride, n_keys, head_dim, scores);
}

/* ---- AVX2 ----------------------------------------------------------------------------- */

GPT2__AVX2 static inline float gpt2__hsum_avx2(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* 8 weights from element k as floats (k + 8 <= row length). */
template <uint32_t TYPE>
GPT2__AVX2 static inline __m256 gpt2__w8_avx2(const uint8_t* row, int64_t k) {
    if constexpr (TYPE == GPT2_TYPE_F32) {
        return _mm256_loadu_ps((const float*)row + k);
    } else if constexpr (TYPE == GPT2_TYPE_F16) {
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(row + 2 * k)));
    } else {
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)(row + 2 * k))), 16));
    }
}

/* A row tail of fewer than 8 elements, in scalar float, added after the vector sum. */
static inline float gpt2__w_scalar(uint32_t type, const uint8_t* row, int64_t k) {
    uint16_t h;
    switch (type) {
    case GPT2_TYPE_F32: return ((const float*)row)[k];
    case GPT2_TYPE_F16: std::memcpy(&h, row + 2 * k, 2); return gpt2__f16_to_f32(h);
    default: std::memcpy(&h, row + 2 * k, 2); return gpt2__bf16_to_f32(h);
    }
}

template <uint32_t TYPE, int R>
GPT2__AVX2 static void gpt2__rows_avx2(float* out, const uint8_t* w, size_t row_bytes, const float* x, int64_t K) {
    __m256 acc[R];
    GPT2__UNROLL
    for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 8 <= K; k += 8) {
        const __m256 xv = _mm256_loadu_ps(x + k);
        GPT2__UNROLL
        for (int r = 0; r < R; r++) acc[r] = _mm256_fmadd_ps(gpt2__w8_avx2<TYPE>(w + r * row_bytes, k), xv, acc[r]);
    }
    GPT2__UNROLL
    for (int r = 0; r < R; r++) {
        float tail = 0.0f;
        for (int64_t i = k; i < K; i++) tail += gpt2__w_scalar(TYPE, w + r * row_bytes, i) * x[i];
        out[r] = gpt2__hsum_avx2(acc[r]) + tail;
    }
}

template <int R>
GPT2__AVX2 static void gpt2__rows_q8_avx2(float* out, const uint8_t* w, size_t row_bytes, const int8_t* xq, const float* xs, int64_t K) {
    __m256 acc[R];
    GPT2__UNROLL
    for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t b = 0; b < K / 32; b++) {
        const __m256i xv = _mm256_loadu_si256((const __m256i*)(xq + 32 * b));
        GPT2__UNROLL
        for (int r = 0; r < R; r++) {
            const uint8_t* p = w + r * row_bytes + 34 * b;
            _mm_prefetch((const char*)(p + GPT2__PREFETCH), _MM_HINT_T0);
            const __m256i wv = _mm256_loadu_si256((const __m256i*)(p + 2));
            uint16_t h;
            std::memcpy(&h, p, 2);
            const __m256i dot16 = _mm256_maddubs_epi16(_mm256_abs_epi8(wv), _mm256_sign_epi8(xv, wv));
            const __m256 dot = _mm256_cvtepi32_ps(_mm256_madd_epi16(dot16, ones));
            acc[r] = _mm256_fmadd_ps(dot, _mm256_set1_ps(_cvtsh_ss(h) * xs[b]), acc[r]);
        }
    }
    GPT2__UNROLL
    for (int r = 0; r < R; r++) out[r] = gpt2__hsum_avx2(acc[r]);
}

GPT2__AVX2 static void gpt2__panel_avx2(float* panel, const gpt2__weight* W, int64_t o, int rows) {
    const int64_t K = W->cols;
    for (int r = 0; r < rows; r++) {
        const uint8_t* row = W->data + (size_t)(o + r) * W->row_bytes;
        float* dst = panel + (size_t)r * K;
        if (W->type == GPT2_TYPE_Q8_0) {
            for (int64_t b = 0; b < K / 32; b++) {
                uint16_t h;
                std::memcpy(&h, row + 34 * b, 2);
                const __m256 scale = _mm256_set1_ps(_cvtsh_ss(h));
                for (int i = 0; i < 4; i++) {
                    const __m128i q = _mm_loadl_epi64((const __m128i*)(row + 34 * b + 2 + 8 * i));
                    _mm256_storeu_ps(dst + 32 * b + 8 * i, _mm256_mul_ps(scale, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q))));
                }
            }
        } else {
            int64_t k = 0;
            for (; k + 8 <= K; k += 8)
                _mm256_storeu_ps(dst + k, W->type == GPT2_TYPE_F16 ? gpt2__w8_avx2<GPT2_TYPE_F16>(row, k) : gpt2__w8_avx2<GPT2_TYPE_BF16>(row, k));
            for (; k < K; k++) dst[k] = gpt2__w_scalar(W->type, row, k);
        }
    }
}

template <int R, int N>
GPT2__AVX2 static void gpt2__tile_avx2(float* out, const float* w, size_t ldw, const float* x, size_t ldx, int64_t K) {
    __m256 acc[R][N];
    GPT2__UNROLL
    for (int r = 0; r < R; r++)
        GPT2__UNROLL
        for (int t = 0; t < N; t++) acc[r][t] = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 8 <= K; k += 8) {
        __m256 xv[N];
        GPT2__UNROLL
        for (int t = 0; t < N; t++) xv[t] = _mm256_loadu_ps(x + t * ldx + k);
        GPT2__UNROLL
        for (int r = 0; r < R; r++) {
            const __m256 wv = _mm256_loadu_ps(w + r * ldw + k);
            GPT2__UNROLL
            for (int t = 0; t < N; t++) acc[r][t] = _mm256_fmadd_ps(wv, xv[t], acc[r][t]);
        }
    }
    GPT2__UNROLL
    for (int r = 0; r < R; r++)
        GPT2__UNROLL
        for (int t = 0; t < N; t++) {
            float tail = 0.0f;
            for (int64_t i = k; i < K; i++) tail += w[r * ldw + i] * x[t * ldx + i];
            out[r * GPT2__NT + t] = gpt2__hsum_avx2(acc[r][t]) + tail;
        }
}

template <int R>
GPT2__AVX2 static void gpt2__tile_n_avx2(float* out, const float* w, size_t ldw, const float* x, size_t ldx, int64_t K, int n) {
    switch (n) {
    case 1: gpt2__tile_avx2<R, 1>(out, w, ldw, x, ldx, K); break;
    case 2: gpt2__tile_avx2<R, 2>(out, w, ldw, x, ldx, K); break;
    case 3: gpt2__tile_avx2<R, 3>(out, w, ldw, x, ldx, K); break;
    default: gpt2__tile_avx2<R, GPT2__NT>(out, w, ldw, x, ldx, K); break;
    }
}

template <uint32_t TYPE>
GPT2__AVX2 static void gpt2__decode_avx2(const gpt2__matmul_args& a, int64_t o_begin, int64_t o_end) {
    const gpt2__weight* W = a.W;
    const int64_t K = W->cols;
    for (int t = 0; t < a.T; t++) {
        const float* x = a.x + (size_t)t * K;
        const int8_t* xq = a.xq ? a.xq + (size_t)t * K : nullptr;
        const float* xs = a.xq ? a.xq_scale + (size_t)t * (K / 32) : nullptr;
        float out[4];
        for (int64_t o = o_begin; o < o_end; o += 4) {
            const uint8_t* w = W->data + (size_t)o * W->row_bytes;
            const int n = (int)std::min<int64_t>(4, o_end - o);
            if constexpr (TYPE == GPT2_TYPE_Q8_0) {
                if (n == 4) gpt2__rows_q8_avx2<4>(out, w, W->row_bytes, xq, xs, K);
                else for (int r = 0; r < n; r++) gpt2__rows_q8_avx2<1>(out + r, w + r * W->row_bytes, W->row_bytes, xq, xs, K);
            } else {
                if (n == 4) gpt2__rows_avx2<TYPE, 4>(out, w, W->row_bytes, x, K);
                else for (int r = 0; r < n; r++) gpt2__rows_avx2<TYPE, 1>(out + r, w + r * W->row_bytes, W->row_bytes, x, K);
            }
            for (int r = 0; r < n; r++) gpt2__store_out(a, t, o + r, out[r]);
        }
    }
}

GPT2__AVX2 static void gpt2__prefill_avx2(const gpt2__matmul_args& a, int64_t o_begin, int64_t o_end, float* panel) {
    const gpt2__weight* W = a.W;
    const int64_t K = W->cols;
    float out[GPT2__MR * GPT2__NT];
    for (int t0 = 0; t0 < a.T; t0 += GPT2__TOKEN_CHUNK) {
        const int t_end = std::min(a.T, t0 + GPT2__TOKEN_CHUNK);
        for (int64_t o = o_begin; o < o_end; o += GPT2__MR) {
            const int rows = (int)std::min<int64_t>(GPT2__MR, o_end - o);
            const float* w = panel;
            size_t ldw = (size_t)K;
            if (W->type == GPT2_TYPE_F32) {
                w = (const float*)(W->data + (size_t)o * W->row_bytes);
                ldw = W->row_bytes / 4;
            } else {
                gpt2__panel_avx2(panel, W, o, rows);
            }
            for (int t = t0; t < t_end; t += GPT2__NT) {
                const int n = std::min(GPT2__NT, t_end - t);
                const float* x = a.x + (size_t)t * K;
                switch (rows) {
                case 1: gpt2__tile_n_avx2<1>(out, w, ldw, x, (size_t)K, K, n); break;
                case 2: gpt2__tile_n_avx2<2>(out, w, ldw, x, (size_t)K, K, n); break;
                case 3: gpt2__tile_n_avx2<3>(out, w, ldw, x, (size_t)K, K, n); break;
                default: gpt2__tile_n_avx2<GPT2__MR>(out, w, ldw, x, (size_t)K, K, n); break;
                }
                for (int r = 0; r < rows; r++)
                    for (int i = 0; i < n; i++) gpt2__store_out(a, t + i, o + r, out[r * GPT2__NT + i]);
            }
        }
    }
}

GPT2__AVX2 static void gpt2__matmul_avx2(const gpt2__matmul_args& a, int64_t o_begin, int64_t o_end, float* panel) {
    if (a.T >= GPT2__NT) return gpt2__prefill_avx2(a, o_begin, o_end, panel);
    switch (a.W->type) {
    case GPT2_TYPE_F32: gpt2__decode_avx2<GPT2_TYPE_F32>(a, o_begin, o_end); break;
    case GPT2_TYPE_F16: gpt2__decode_avx2<GPT2_TYPE_F16>(a, o_begin, o_end); break;
    case GPT2_TYPE_BF16: gpt2__decode_avx2<GPT2_TYPE_BF16>(a, o_begin, o_end); break;
    case GPT2_TYPE_Q8_0:
        if (a.xq) gpt2__decode_avx2<GPT2_TYPE_Q8_0>(a, o_begin, o_end);
        else gpt2__prefill_avx2(a, o_begin, o_end, panel);
        break;
    }
}

GPT2__AVX2 static void gpt2__quantize_q8_avx2(int8_t* q, float* scale, const float* x, int64_t n) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t b = 0; b < n / 32; b++) {
        __m256 v[4], m = _mm256_setzero_ps();
        for (int i = 0; i < 4; i++) {
            v[i] = _mm256_loadu_ps(x + 32 * b + 8 * i);
            m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[i]));
        }
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        const float amax = _mm_cvtss_f32(m4);
        const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
        scale[b] = amax / 127.0f;
        const __m256 vi = _mm256_set1_ps(inv);
        __m256i i32[4];
        for (int i = 0; i < 4; i++) i32[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], vi));
        /* pack 32-bit -> 16 -> 8 (saturating) and undo the lane interleaving of the packs */
        const __m256i i16a = _mm256_packs_epi32(i32[0], i32[1]), i16b = _mm256_packs_epi32(i32[2], i32[3]);
        const __m256i i8 = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(i16a, i16b), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((__m256i*)(q + 32 * b), i8);
    }
}

/* e^x as gpt2__exp_avx512, 8 lanes; 2^n built in the exponent bits. */
GPT2__AVX2 static inline __m256 gpt2__exp_avx2(__m256 x) {
    x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(88.3f)), _mm256_set1_ps(-87.3f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

GPT2__AVX2 static inline __m256 gpt2__gelu8_avx2(__m256 v, bool tanh_form) {
    __m256 g;
    if (tanh_form) {
        const __m256 u = _mm256_mul_ps(_mm256_set1_ps(0.7978845608028654f), _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(0.044715f), v), _mm256_mul_ps(v, v), v));
        const __m256 e = gpt2__exp_avx2(_mm256_add_ps(u, u));
        g = _mm256_sub_ps(_mm256_set1_ps(1.0f), _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, _mm256_set1_ps(1.0f))));
    } else {
        const __m256 sign = _mm256_and_ps(v, _mm256_set1_ps(-0.0f));
        const __m256 z = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), _mm256_mul_ps(v, _mm256_set1_ps(0.7071067811865476f)));
        const __m256 t = _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_fmadd_ps(_mm256_set1_ps(0.3275911f), z, _mm256_set1_ps(1.0f)));
        __m256 p = _mm256_set1_ps(1.061405429f);
        p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-1.453152027f));
        p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(1.421413741f));
        p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-0.284496736f));
        p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.254829592f));
        p = _mm256_mul_ps(p, t);
        const __m256 e = gpt2__exp_avx2(_mm256_sub_ps(_mm256_setzero_ps(), _mm256_mul_ps(z, z)));
        g = _mm256_or_ps(_mm256_fnmadd_ps(p, e, _mm256_set1_ps(1.0f)), sign); /* erf is odd */
    }
    const __m256 half_v = _mm256_mul_ps(_mm256_set1_ps(0.5f), v);
    return _mm256_fmadd_ps(half_v, g, half_v);
}

/* gpt2__gelu_avx512 in 8 lanes; the tail goes through a padded copy, so every value takes the
   same arithmetic. */
GPT2__AVX2 static void gpt2__gelu_avx2(float* x, size_t n, bool tanh_form) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, gpt2__gelu8_avx2(_mm256_loadu_ps(x + i), tanh_form));
    if (i < n) {
        float tail[8] = {0};
        std::memcpy(tail, x + i, (n - i) * 4);
        _mm256_storeu_ps(tail, gpt2__gelu8_avx2(_mm256_loadu_ps(tail), tanh_form));
        std::memcpy(x + i, tail, (n - i) * 4);
    }
}

GPT2__AVX2 static inline __m256 gpt2__kv8_avx2(const float* p) { return _mm256_loadu_ps(p); }
GPT2__AVX2 static inline __m256 gpt2__kv8_avx2(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)p)); }

/* gpt2__attend_scalar with 8-lane dot products, exponentials and sums; scalar tails. */
template <class KV>
GPT2__AVX2 static void gpt2__attend_avx2(float* out, const float* q, const KV* k, const KV* v, size_t stride, int n_keys, int head_dim, float* scores) {
    const float scale = 1.0f / std::sqrt((float)head_dim);
    float max_score = -INFINITY;
    for (int j = 0; j < n_keys; j++) {
        const KV* kj = k + (size_t)j * stride;
        __m256 acc = _mm256_setzero_ps();
        int d = 0;
        for (; d + 8 <= head_dim; d += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), gpt2__kv8_avx2(kj + d), acc);
        float s = gpt2__hsum_avx2(acc);
        for (; d < head_dim; d++) s += q[d] * gpt2__load_kv(kj, (size_t)d);
        scores[j] = s * scale;
        max_score = std::max(max_score, scores[j]);
    }
    const __m256 vmax = _mm256_set1_ps(max_score);
    __m256 vsum = _mm256_setzero_ps();
    int j = 0;
    for (; j + 8 <= n_keys; j += 8) {
        const __m256 e = gpt2__exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(scores + j), vmax));
        _mm256_storeu_ps(scores + j, e);
        vsum = _mm256_add_ps(vsum, e);
    }
    float sum = gpt2__hsum_avx2(vsum);
    if (j < n_keys) {
        float tail[8];
        for (int i = 0; i < 8; i++) tail[i] = j + i < n_keys ? scores[j + i] - max_score : -INFINITY;
        _mm256_storeu_ps(tail, gpt2__exp_avx2(_mm256_loadu_ps(tail)));
        for (int i = 0; j + i < n_keys; i++) {
            scores[j + i] = tail[i];
            sum += tail[i];
        }
    }
    const float inv_sum = 1.0f / sum;
    for (int d = 0; d < head_dim; d++) out[d] = 0.0f;
    for (j = 0; j < n_keys; j++) {
        const KV* vj = v + (size_t)j * stride;
        const float p = scores[j] * inv_sum;
        int d = 0;
        for (; d + 8 <= head_dim; d += 8) _mm256_storeu_ps(out + d, _mm256_fmadd_ps(_mm256_set1_ps(p), gpt2__kv8_avx2(vj + d), _mm256_loadu_ps(out + d)));
        for (; d < head_dim; d++) out[d] += p * gpt2__load_kv(vj, (size_t)d);
    }
}

GPT2__AVX2 static void gpt2__attend_f32_avx2(float* out, const float* q, const float* k, const float* v, size_t stride, int n_keys, int head_dim, float* scores) {
    gpt2__attend_avx2(out, q, k, v, stride, n_keys, head_dim, scores);
}
GPT2__AVX2 static void gpt2__attend_f16_avx2(float* out, const float* q, const uint16_t* k, const uint16_t* v, size_t stride, int n_keys, int head_dim, float* scores) {
    gpt2__attend_avx2(out, q, k, v, stride, n_keys, head_dim, scores);
}

#if !defined(_MSC_VER) || defined(__clang__)
#pragma GCC diagnostic pop
#undef GPT2__UNROLL
#endif
#endif /* GPT2__X86 */

/* ---- src/kernels_neon.h ---- */
/* Arm NEON kernels (AArch64, where NEON is always present). Kept plain: one vector accumulator
   per output, weights converted to float on the fly; attention and GELU use the portable code. */

#if !defined(GPT2_NO_SIMD) && (defined(__aarch64__) || defined(_M_ARM64))
#define GPT2__NEON 1
#include <arm_neon.h>

/* Dot product of one row of any type with x (n values); the tail runs in scalar. */
static float gpt2__dot_row_neon(uint32_t type, const uint8_t* row, const float* x, int64_t n) {
    float32x4_t acc = vdupq_n_f32(0.0f);
    int64_t k = 0;
    if (type == GPT2_TYPE_Q8_0) {
        for (int64_t b = 0; b < n / 32; b++) {
            uint16_t h;
            std::memcpy(&h, row + 34 * b, 2);
            const float32x4_t scale = vdupq_n_f32(gpt2__f16_to_f32(h));
            const int8_t* q = (const int8_t*)(row + 34 * b + 2);
            for (int i = 0; i < 32; i += 8) {
                const int16x8_t q16 = vmovl_s8(vld1_s8(q + i));
                const float32x4_t lo = vmulq_f32(scale, vcvtq_f32_s32(vmovl_s16(vget_low_s16(q16))));
                const float32x4_t hi = vmulq_f32(scale, vcvtq_f32_s32(vmovl_s16(vget_high_s16(q16))));
                acc = vfmaq_f32(acc, lo, vld1q_f32(x + 32 * b + i));
                acc = vfmaq_f32(acc, hi, vld1q_f32(x + 32 * b + i + 4));
            }
        }
        return vaddvq_f32(acc);
    }
    for (; k + 4 <= n; k += 4) {
        float32x4_t w;
        if (type == GPT2_TYPE_F32) w = vld1q_f32((const float*)row + k);
        else if (type == GPT2_TYPE_F16) w = vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16((const uint16_t*)(row + 2 * k))));
        else w = vreinterpretq_f32_u32(vshll_n_u16(vld1_u16((const uint16_t*)(row + 2 * k)), 16));
        acc = vfmaq_f32(acc, w, vld1q_f32(x + k));
    }
    float sum = vaddvq_f32(acc);
    for (; k < n; k++) {
        float w[1];
        gpt2__dequantize_row(type, row + (type == GPT2_TYPE_F32 ? 4 : 2) * k, w, 1);
        sum += w[0] * x[k];
    }
    return sum;
}

static float gpt2__dot_q8_neon(const uint8_t* row, const int8_t* xq, const float* xscale, int64_t n) {
    float32x4_t acc = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < n / 32; b++) {
        uint16_t h;
        std::memcpy(&h, row + 34 * b, 2);
        const int8_t* q = (const int8_t*)(row + 34 * b + 2);
        int32x4_t isum = vdupq_n_s32(0);
        for (int i = 0; i < 32; i += 16) {
            const int8x16_t w = vld1q_s8(q + i), xv = vld1q_s8(xq + 32 * b + i);
            isum = vpadalq_s16(isum, vmull_s8(vget_low_s8(w), vget_low_s8(xv)));
            isum = vpadalq_s16(isum, vmull_s8(vget_high_s8(w), vget_high_s8(xv)));
        }
        acc = vfmaq_n_f32(acc, vcvtq_f32_s32(isum), gpt2__f16_to_f32(h) * xscale[b]);
    }
    return vaddvq_f32(acc);
}

static void gpt2__matmul_neon(const gpt2__matmul_args& a, int64_t o_begin, int64_t o_end, float* panel) {
    (void)panel;
    const gpt2__weight* W = a.W;
    const bool int8 = W->type == GPT2_TYPE_Q8_0 && a.xq;
    for (int64_t o = o_begin; o < o_end; o++) {
        const uint8_t* row = W->data + (size_t)o * W->row_bytes;
        for (int t = 0; t < a.T; t++) {
            float v = (a.bias ? a.bias[o] : 0.0f);
            v += int8 ? gpt2__dot_q8_neon(row, a.xq + (size_t)t * W->cols, a.xq_scale + (size_t)t * (W->cols / 32), W->cols)
                      : gpt2__dot_row_neon(W->type, row, a.x + (size_t)t * W->cols, W->cols);
            float* y = a.y + (size_t)t * W->rows + o;
            *y = a.accumulate ? *y + v : v;
        }
    }
}

#endif /* GPT2__NEON */

/* ---- src/dispatch.h ---- */
/* Kernel dispatch: the one place that decides which implementation runs on this CPU.

   One binary carries every kernel set its target allows (scalar everywhere; AVX2 and AVX-512
   on x86-64; NEON on AArch64) and picks the best one the CPU and OS support, once per process:
   cpuid for the instructions, xgetbv for the OS saving the wide registers.
     GPT2_NO_SIMD                     compile the scalar kernels only
     GPT2_FORCE_KERNELS "avx2"        use this set ("scalar", "avx2", "avx512", "neon") when the
                                      CPU supports it, else the best one it does */

struct gpt2__kernels {
    const char* name;
    void (*matmul)(const gpt2__matmul_args& a, int64_t o_begin, int64_t o_end, float* panel);
    void (*quantize_q8)(int8_t* q, float* scale, const float* x, int64_t n);
    void (*attend_f32)(float* out, const float* q, const float* k, const float* v, size_t stride, int n_keys, int head_dim, float* scores);
    void (*attend_f16)(float* out, const float* q, const uint16_t* k, const uint16_t* v, size_t stride, int n_keys, int head_dim, float* scores);
    void (*gelu)(float* x, size_t n, bool tanh_form);
};

/* Floats of per-thread scratch a matmul kernel may use as its weight panel, for rows of `cols`. */
static size_t gpt2__panel_floats(int64_t cols) { return (size_t)cols * 4; }

static const gpt2__kernels gpt2__kernels_scalar = {"scalar", gpt2__matmul_scalar, gpt2__quantize_q8_scalar, gpt2__attend_f32_scalar, gpt2__attend_f16_scalar, gpt2__gelu_scalar};
#if defined(GPT2__X86)
static const gpt2__kernels gpt2__kernels_avx2 = {"avx2", gpt2__matmul_avx2, gpt2__quantize_q8_avx2, gpt2__attend_f32_avx2, gpt2__attend_f16_avx2, gpt2__gelu_avx2};
static const gpt2__kernels gpt2__kernels_avx512 = {"avx512", gpt2__matmul_avx512, gpt2__quantize_q8_avx512, gpt2__attend_f32_avx512, gpt2__attend_f16_avx512, gpt2__gelu_avx512};

struct gpt2__x86_features {
    bool avx2 = false, avx512 = false;
};

static gpt2__x86_features gpt2__detect_x86() {
    gpt2__x86_features f;
    unsigned r1[4] = {0, 0, 0, 0}, r7[4] = {0, 0, 0, 0};
#if defined(_MSC_VER) && !defined(__clang__)
    int regs[4];
    __cpuidex(regs, 0, 0);
    const unsigned max_leaf = (unsigned)regs[0];
    __cpuidex(regs, 1, 0);
    for (int i = 0; i < 4; i++) r1[i] = (unsigned)regs[i];
    if (max_leaf >= 7) {
        __cpuidex(regs, 7, 0);
        for (int i = 0; i < 4; i++) r7[i] = (unsigned)regs[i];
    }
#else
    const unsigned max_leaf = __get_cpuid_max(0, nullptr);
    __cpuid_count(1, 0, r1[0], r1[1], r1[2], r1[3]);
    if (max_leaf >= 7) __cpuid_count(7, 0, r7[0], r7[1], r7[2], r7[3]);
#endif
    const unsigned ecx1 = r1[2], ebx7 = r7[1], ecx7 = r7[2];
    const bool osxsave = (ecx1 >> 27) & 1, avx = (ecx1 >> 28) & 1, fma = (ecx1 >> 12) & 1, f16c = (ecx1 >> 29) & 1;
    if (!osxsave) return f;
#if defined(_MSC_VER) && !defined(__clang__)
    const uint64_t xcr0 = _xgetbv(0);
#else
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    const uint64_t xcr0 = ((uint64_t)hi << 32) | lo;
#endif
    const bool ymm = (xcr0 & 0x6) == 0x6, zmm = (xcr0 & 0xe6) == 0xe6;
    f.avx2 = ymm && avx && fma && f16c && ((ebx7 >> 5) & 1);
    const bool avx512f = (ebx7 >> 16) & 1, dq = (ebx7 >> 17) & 1, bw = (ebx7 >> 30) & 1, vl = (ebx7 >> 31) & 1, vnni = (ecx7 >> 11) & 1;
    f.avx512 = f.avx2 && zmm && avx512f && dq && bw && vl && vnni;
    return f;
}
#endif
#if defined(GPT2__NEON)
static const gpt2__kernels gpt2__kernels_neon = {"neon", gpt2__matmul_neon, gpt2__quantize_q8_scalar, gpt2__attend_f32_scalar, gpt2__attend_f16_scalar, gpt2__gelu_scalar};
#endif

/* The kernel sets this CPU can run, best first. */
static int gpt2__supported_kernels(const gpt2__kernels** out) {
    int n = 0;
#if defined(GPT2__X86)
    const gpt2__x86_features f = gpt2__detect_x86();
    if (f.avx512) out[n++] = &gpt2__kernels_avx512;
    if (f.avx2) out[n++] = &gpt2__kernels_avx2;
#endif
#if defined(GPT2__NEON)
    out[n++] = &gpt2__kernels_neon;
#endif
    out[n++] = &gpt2__kernels_scalar;
    return n;
}

/* The set named `name` if this CPU supports it, else NULL. */
[[maybe_unused]] static const gpt2__kernels* gpt2__kernels_by_name(const char* name) {
    const gpt2__kernels* sets[4];
    const int n = gpt2__supported_kernels(sets);
    for (int i = 0; i < n; i++)
        if (std::strcmp(sets[i]->name, name) == 0) return sets[i];
    return nullptr;
}

static const gpt2__kernels* gpt2__select_kernels() {
#if defined(GPT2_FORCE_KERNELS)
    if (const gpt2__kernels* forced = gpt2__kernels_by_name(GPT2_FORCE_KERNELS)) return forced;
#endif
    const gpt2__kernels* sets[4];
    gpt2__supported_kernels(sets);
    return sets[0];
}

/* Chosen once per process; constant afterwards (thread-safe static initialisation). */
static const gpt2__kernels& gpt2__cpu_kernels() {
    static const gpt2__kernels* kernels = gpt2__select_kernels();
    return *kernels;
}

/* ---- src/threadpool.h ---- */
/* Worker threads of one session. They are started once, with the session, never per token.
   Between jobs a worker first spins for at most GPT2_SPIN_MICROSECONDS (default 50), because
   the parallel regions of one forward pass follow each other within microseconds and waking a
   sleeping thread costs more than that; then it sleeps on a condition variable, so an idle
   session costs the host application nothing and a game's own threads are never starved for
   longer than that bound. The calling thread does a share of every job. */

#ifndef GPT2_SPIN_MICROSECONDS
#define GPT2_SPIN_MICROSECONDS 50
#endif

#include <chrono>
#if defined(__x86_64__) || defined(_M_X64) || defined(__i386__) || defined(_M_IX86)
#include <emmintrin.h>
#define GPT2__CPU_RELAX() _mm_pause()
#elif defined(__aarch64__) && defined(__GNUC__)
#define GPT2__CPU_RELAX() __asm__ volatile("yield")
#else
#define GPT2__CPU_RELAX() ((void)0)
#endif

struct gpt2__pool {
    typedef void (*job_fn)(void* context, int thread_index, int n_threads);
    int n_threads = 1;
    std::vector<std::thread> workers;
    std::mutex mutex;
    std::condition_variable wake, done;
    std::atomic<uint64_t> generation{0}; /* bumped for each job */
    std::atomic<int> pending{0};         /* workers still running the current job */
    std::atomic<int> sleepers{0};        /* workers asleep (or falling asleep) on `wake` */
    std::atomic<bool> caller_sleeping{false};
    std::atomic<bool> stopping{false};
    job_fn job = nullptr;                /* published by the release of `generation` */
    void* context = nullptr;
};

/* Spins until ready() or the spin budget is spent; true when ready. */
template <class Ready>
static bool gpt2__spin_until(const Ready& ready) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 1;; i++) {
        if (ready()) return true;
        GPT2__CPU_RELAX();
        if ((i & 63) == 0 && std::chrono::steady_clock::now() - start > std::chrono::microseconds(GPT2_SPIN_MICROSECONDS)) return false;
    }
}

/* Sleeping and waking pair up through sequentially consistent operations on both sides (the
   sleeper announces itself, then re-checks; the waker publishes, then checks for sleepers), so
   a wake-up is never lost and the common, spinning case takes no lock. */
static void gpt2__pool_worker(gpt2__pool* pool, int index) {
    uint64_t seen = 0;
    for (;;) {
        if (!gpt2__spin_until([&] { return pool->generation.load(std::memory_order_acquire) != seen; })) {
            std::unique_lock<std::mutex> lock(pool->mutex);
            pool->sleepers.fetch_add(1);
            pool->wake.wait(lock, [&] { return pool->generation.load() != seen; });
            pool->sleepers.fetch_sub(1);
        }
        seen = pool->generation.load(std::memory_order_acquire);
        if (pool->stopping.load()) return;
        pool->job(pool->context, index, pool->n_threads);
        if (pool->pending.fetch_sub(1) == 1 && pool->caller_sleeping.load()) {
            std::lock_guard<std::mutex> lock(pool->mutex);
            pool->done.notify_one();
        }
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

static void gpt2__pool_wake(gpt2__pool* pool) {
    if (pool->sleepers.load() > 0) {
        std::lock_guard<std::mutex> lock(pool->mutex);
        pool->wake.notify_all();
    }
}

static void gpt2__pool_stop(gpt2__pool* pool) {
    pool->stopping.store(true);
    pool->generation.fetch_add(1);
    {
        std::lock_guard<std::mutex> lock(pool->mutex);
        pool->wake.notify_all();
    }
    for (std::thread& t : pool->workers) t.join();
    pool->workers.clear();
}

/* Runs job(context, i, n) on every thread i of the pool and returns when all are done. */
static void gpt2__pool_run(gpt2__pool* pool, gpt2__pool::job_fn job, void* context) {
    if (pool->n_threads == 1) return job(context, 0, 1);
    pool->job = job;
    pool->context = context;
    pool->pending.store(pool->n_threads - 1, std::memory_order_relaxed);
    pool->generation.fetch_add(1);
    gpt2__pool_wake(pool);
    job(context, 0, pool->n_threads);
    if (!gpt2__spin_until([&] { return pool->pending.load(std::memory_order_acquire) == 0; })) {
        std::unique_lock<std::mutex> lock(pool->mutex);
        pool->caller_sleeping.store(true);
        pool->done.wait(lock, [&] { return pool->pending.load() == 0; });
        pool->caller_sleeping.store(false);
    }
}

/* Splits [0, n) into chunks that start at multiples of `align` and calls body(begin, end,
   thread_index) on each; threads take chunks from a shared counter, so a thread the OS
   preempts (a busy machine, a game's own threads) delays only its current chunk instead of a
   whole 1/n share. About 8 chunks per thread keep the counter cheap. */
template <class Body>
static void gpt2__parallel_for(gpt2__pool* pool, int64_t n, int64_t align, const Body& body) {
    struct Job {
        const Body* body;
        int64_t n, chunk, n_chunks;
        std::atomic<int64_t> next{0};
        static void run(void* context, int index, int) {
            Job* job = (Job*)context;
            for (int64_t c = job->next.fetch_add(1, std::memory_order_relaxed); c < job->n_chunks; c = job->next.fetch_add(1, std::memory_order_relaxed)) {
                const int64_t begin = c * job->chunk, end = std::min(job->n, begin + job->chunk);
                (*job->body)(begin, end, index);
            }
        }
    };
    const int64_t units = (n + align - 1) / align;
    const int64_t chunk = align * std::max<int64_t>(1, units / ((int64_t)pool->n_threads * 8));
    Job job;
    job.body = &body;
    job.n = n;
    job.chunk = chunk;
    job.n_chunks = (n + chunk - 1) / chunk;
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
    float* panel = nullptr;   /* (n_threads, gpt2__panel_floats(F)) weight panels of the matmul kernels */
    int8_t* xq = nullptr;     /* (F) one activation row quantized for q8_0 weights */
    float* xq_scale = nullptr; /* (F / 32) */
    float* logits = nullptr;  /* (V) */
    float* probs = nullptr;   /* (V) sampling scratch */
    bool has_logits = false;
    uint64_t rng_state = 0;
    gpt2__utf8_stream stream;
    gpt2__string text;        /* the text of the token being delivered to the callback */
};

static void gpt2__session_destroy(gpt2_session* s) {
    gpt2__pool_stop(&s->pool);
    void* buffers[] = {s->k_cache, s->v_cache, s->x, s->xn, s->qkv, s->att, s->fc, s->scores, s->panel, s->xq, s->xq_scale, s->logits, s->probs};
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
        {(void**)&s->scores, (size_t)s->pool.n_threads * ctx * 4},
        {(void**)&s->panel, (size_t)s->pool.n_threads * gpt2__panel_floats(std::max(m->n_embd, m->n_ff)) * 4},
        {(void**)&s->xq, (size_t)std::max(m->n_embd, m->n_ff)}, {(void**)&s->xq_scale, (size_t)std::max(m->n_embd, m->n_ff) / 32 * 4 + 4},
        {(void**)&s->logits, (size_t)m->n_vocab * 4}, {(void**)&s->probs, (size_t)m->n_vocab * 4},
    };
    for (auto& b : plan) {
        *b.p = GPT2_MALLOC(b.bytes);
        if (!*b.p) return gpt2__fail(err, GPT2_ERROR_OUT_OF_MEMORY, "cannot allocate %zu bytes for the session (n_ctx %d)", b.bytes, s->n_ctx);
    }
    return GPT2_OK;
}

/* y (T, W.rows) = x (T, W.cols) W^T + bias, split over the rows of W; with `accumulate`,
   y += instead (the residual connection); with `gelu`, GELU on the result (the MLP's c_fc).
   One parallel region for all of it. A single token (decode) against q8_0 weights first
   quantizes x to int8, so the kernel can use integer dot products. */
static void gpt2__matmul(gpt2_session* s, float* y, const float* x, const gpt2__weight& W, const float* bias, int T, bool accumulate = false, bool gelu = false) {
    const gpt2__kernels* kernels = s->kernels;
    gpt2__matmul_args a{y, x, nullptr, nullptr, &W, bias, T, accumulate};
    if (W.type == GPT2_TYPE_Q8_0 && T == 1) {
        kernels->quantize_q8(s->xq, s->xq_scale, x, W.cols);
        a.xq = s->xq;
        a.xq_scale = s->xq_scale;
    }
    const size_t panel = gpt2__panel_floats(std::max(s->model->n_embd, s->model->n_ff));
    const bool gelu_tanh = s->model->gelu_tanh;
    gpt2__parallel_for(&s->pool, W.rows, 16, [&](int64_t begin, int64_t end, int thread) {
        kernels->matmul(a, begin, end, s->panel + (size_t)thread * panel);
        if (gelu)
            for (int t = 0; t < T; t++) kernels->gelu(y + (size_t)t * W.rows + begin, (size_t)(end - begin), gelu_tanh);
    });
}

static void gpt2__layer_norm_rows(gpt2_session* s, float* out, const float* x, const float* weight, const float* bias, int T) {
    const int C = s->model->n_embd;
    const float eps = s->model->layer_norm_eps;
    if (T < 4) { /* not worth waking the workers */
        for (int t = 0; t < T; t++) gpt2__layer_norm(out + (size_t)t * C, x + (size_t)t * C, weight, bias, C, eps);
        return;
    }
    gpt2__parallel_for(&s->pool, T, 1, [&](int64_t begin, int64_t end, int) {
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
    typedef void (*attend_fn)(float*, const float*, const KV*, const KV*, size_t, int, int, float*);
    attend_fn attend;
    if constexpr (sizeof(KV) == 4) attend = s->kernels->attend_f32;
    else attend = s->kernels->attend_f16;
    /* one task per (token, head), taken from a counter: later queries attend to more keys */
    gpt2__parallel_for(&s->pool, (int64_t)T * H, 1, [&](int64_t begin, int64_t end, int thread) {
        float* scores = s->scores + (size_t)thread * s->n_ctx;
        for (int64_t task = begin; task < end; task++) {
            const int t = (int)(task / H), h = (int)(task % H);
            const float* q = s->qkv + (size_t)t * 3 * C + (size_t)h * D;
            attend(s->att + (size_t)t * C + (size_t)h * D, q, k_cache + (size_t)h * D, v_cache + (size_t)h * D, (size_t)C, pos0 + t + 1, D, scores);
        }
    });
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
        gpt2__matmul(s, s->x, s->att, L.c_proj, L.c_proj_bias, T, true);
        /* x = x + mlp(ln_2(x)) */
        gpt2__layer_norm_rows(s, s->xn, s->x, L.ln_2_weight, L.ln_2_bias, T);
        gpt2__matmul(s, s->fc, s->xn, L.c_fc, L.c_fc_bias, T, false, true);
        gpt2__matmul(s, s->x, s->fc, L.mlp_proj, L.mlp_proj_bias, T, true);
    }
    gpt2__layer_norm_rows(s, s->xn, s->x, m->ln_f_weight, m->ln_f_bias, T);
}

/* logits (V) = lm_head (V, C) h (C); padding rows past n_vocab are never computed. */
static void gpt2__head(gpt2_session* s, const float* h, float* logits) {
    gpt2__weight head = s->model->lm_head;
    head.rows = s->model->n_vocab;
    gpt2__matmul(s, logits, h, head, nullptr, 1);
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
