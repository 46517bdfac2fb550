/* gpt2.h - run GPT-2-class models (nanoGPT, OpenAI GPT-2) inside your program.
   Single-file library, C API, C++17 implementation, no dependencies. See README.md.
   MIT license at the end of this file.

   THIS FILE IS GENERATED from src/ by tools/amalgamate.py. Edit the parts under src/.

   USAGE
     In exactly one C++ translation unit:
         #define GPT2_IMPLEMENTATION
         #include "gpt2.h"
     Everywhere else (C or C++) just #include "gpt2.h". The implementation needs C++17 and
     threads (link with -pthread). Models are GGUF files made by tools/convert.py from a nanoGPT
     checkpoint. The program below is examples/minimal.cpp, shortened:

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
         if (gpt2_session_create(model, NULL, &session, &err) != GPT2_OK) return 1;
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
     gpt2_session  one conversation: KV cache, scratch memory, worker threads, RNG.
     n_ctx         the longest context the model was trained for (nanoGPT's block_size). When a
                   sequence grows past n_ctx, the session keeps its last n_ctx tokens and
                   recomputes them (exactly nanoGPT's generate()); each such step costs a prompt
                   pass over n_ctx tokens instead of one token.

   THREADS
     A model is read-only once loaded: any thread may use it. A session is used by one thread at
     a time (no locks inside); different sessions, even on one model, run in parallel. Each
     session has its own worker threads (gpt2_session_params.n_threads; 1 = only the caller's).
     Free every session before its model. Callbacks (on_token, log) run on the calling thread.

   GENERATION
     gpt2_generate samples as nanoGPT's sample.py does: logits / temperature, keep the top_k
     (a top_k above the vocabulary keeps all, like nanoGPT's min(top_k, vocab_size)), softmax,
     draw. Defaults: temperature 0.8, top_k 200, seed 1337. The RNG restarts from `seed` at each
     call, so the same context and parameters give the same tokens on every platform.
     Generation runs for max_new_tokens (it does not stop at <|endoftext|>, like nanoGPT) unless
     on_token returns nonzero; the tokens made so far stay in the context.

   ERRORS
     Every function that can fail returns a gpt2_result and, when `err` is not NULL, fills it
     with the code and a sentence naming the problem. No function throws, exits or aborts.
     Nothing is printed unless gpt2_model_params.log is set.

   GPU
     GPT2_DEVICE_CUDA needs gpt2_cuda.cuh compiled into the program (see the top of that file);
     otherwise loading with it fails with GPT2_ERROR_UNSUPPORTED.

   OPTIONS (define before including the implementation)
     GPT2_STATIC             make every function static (private to one translation unit)
     GPT2_MALLOC / GPT2_FREE replace the allocator (both or neither)
     GPT2_ASSERT             replace assert() for internal invariants
     GPT2_NO_SIMD            use the portable kernels only
     GPT2_FORCE_KERNELS "avx2"  use this kernel set ("scalar", "avx2", "avx512", "neon") when the
                             CPU has it; by default the best one is picked at run time (cpuid)
     GPT2_SPIN_MICROSECONDS  how long idle worker threads spin before sleeping (default 50)
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
/* Loads from a buffer holding a whole GGUF file. A buffer aligned to 64 bytes is used in place
   (not copied) and must outlive the model; any other buffer is copied once. Decoding streams
   the weights: on Linux a buffer on huge pages (madvise MADV_HUGEPAGE) reads about 25% faster
   than 4 KiB pages; a file mapped by gpt2_model_load_file is nearly as fast. */
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
    int n_ctx;      /* context to allocate the KV cache for; 0 = the model's, at most the model's.
                       On Linux, with the default allocator, the cache sits on huge pages
                       (faster to stream) and is resident from the first token: ask for less
                       when contexts stay short. */
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
    uint64_t seed;       /* the RNG restarts from it at each call; default 1337 */
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
