/* ---- src/api.h ---- */
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
                   pass over n_ctx tokens instead of one token. For long chats,
                   GPT2_CONTEXT_DISCARD drops many old tokens at once instead (see
                   gpt2_session_params), so most steps cost one token.
     state         gpt2_session_save / _load / _copy / _truncate: a conversation as bytes (for
                   a save game), forked (one evaluated preamble shared by many characters) or
                   rewound (undo the last answer), continuing exactly as if never interrupted.

   THREADS
     A model is read-only once loaded: any thread may use it. A session takes one call at a
     time: a call on a session that another call is using (another thread's, or a callback
     asking its own session to generate) fails at once with GPT2_ERROR_BUSY and changes nothing
     (a batch: when any of its sessions is in use); inside a callback the session may still be
     read (gpt2_session_logits, gpt2_session_save, gpt2_session_tokens). gpt2_session_reset
     does nothing while another call uses the session; gpt2_session_free and the readers that
     return no result (gpt2_session_tokens, gpt2_session_n_tokens) do not check: call them when
     no call runs. Different sessions, even on one model, run in parallel. Each session has its
     own worker threads (gpt2_session_params.n_threads; 1 = only the caller's). Free every
     session before its model. Callbacks (on_token, log) run on the calling thread.

   GENERATION
     gpt2_generate samples as nanoGPT's sample.py does: logits / temperature, keep the top_k
     (a top_k above the vocabulary keeps all, like nanoGPT's min(top_k, vocab_size)), softmax,
     draw. Defaults: temperature 0.8, top_k 200, seed 1337. The RNG restarts from `seed` at each
     call, so the same context and parameters give the same tokens on every platform.
     Generation runs for max_new_tokens (it does not stop at <|endoftext|>, like nanoGPT) unless
     on_token returns nonzero, the text reaches one of the `stop` strings, or (stop_at_eos) the
     model emits its end-of-text token. The tokens made so far stay in the context, a stop
     string's and the end-of-text token too (gpt2_session_truncate removes them).
     More controls, each off when zero, form one chain, applied in this order:
         logit_bias, penalties (repeat, frequency, presence), grammar, on_logits, top_k, top_p, min_p,
         temperature, draw
     That is llama.cpp's default chain (which users know) without its DRY, typical and XTC
     steps. With every added control off the tokens are exactly nanoGPT's, as before. Where
     ours differs, and why:
       - top_k keeps every token tied with the k-th (nanoGPT's rule), and top_p every token
         tied with the last one it needs; llama.cpp cuts ties by sort order, which is not
         reproducible across platforms.
       - the penalties look at the last repeat_last_n tokens of the session's context, the
         prompt included (the session knows its context; llama.cpp counts what its sampler saw).
       - on_logits is a hook of ours, for rules the chain lacks.
       - off by default: nanoGPT's defaults stay (llama.cpp turns top_p 0.95, min_p 0.05 on).
       - the RNG is ours (SplitMix64), so a seed gives other tokens than in llama.cpp.

   PARAMETERS
     Each *_params struct is filled by its *_default_params() function; a struct set to zero
     (`gpt2_model_params p = {0};`) is valid too and means the same for every field but the
     sampling ones: zero temperature is greedy decoding, zero top_k keeps every token and zero
     seed is seed 0 (the defaults are nanoGPT's 0.8, 200 and 1337). New fields are added so that
     zero keeps today's behaviour.

   ERRORS
     Every function that can fail returns a gpt2_result and, when `err` is not NULL, fills it
     with the code and a sentence naming the problem. No function throws, exits or aborts.
     Nothing is printed unless gpt2_model_params.log is set.

   GPU
     GPT2_DEVICE_CUDA needs gpt2_cuda.cuh compiled into the program (see the top of that file);
     otherwise loading with it fails with GPT2_ERROR_UNSUPPORTED.

   SHARED LIBRARY AND BINDINGS
     CMake's GPT2_BUILD_SHARED builds libgpt2.so / gpt2.dll / libgpt2.dylib (target
     gpt2::gpt2_shared), for other languages (bindings/csharp/) and engines that load plugins.
     The API crosses the library boundary safely: only C types; what the library allocates it
     frees (gpt2_model_free, gpt2_session_free; every other pointer it returns belongs to a
     model or a session and is never freed by the caller); struct fields whose sizes the
     platform's C ABI fixes (int and enums 4 bytes, pointers and size_t 4 or 8, callbacks
     cdecl). A binding declares the structs again in its own language, so it calls
     gpt2_check_abi once, first: a library of another version, or whose structs have other
     sizes, then fails with a message instead of corrupting memory.

   OPTIONS (define before including the implementation)
     GPT2_STATIC             make every function static (private to one translation unit)
     GPT2_SHARED             the functions are in a shared library (define GPT2_BUILD as well
                             when compiling that library); see SHARED LIBRARY
     GPT2_MALLOC / GPT2_FREE replace the allocator (both or neither)
     GPT2_ASSERT             replace assert() for internal invariants
     GPT2_NO_SIMD            use the portable kernels only
     GPT2_FORCE_KERNELS "avx2"  use this kernel set ("scalar", "avx2", "avx512", "avx512_bf16",
                             "neon", "wasm_simd128") when the CPU has it; by default the best
                             one is picked at run time (cpuid); WebAssembly's by the compiler flag
                             (Emscripten's -msimd128 gives "wasm_simd128")
     GPT2_SPIN_MICROSECONDS  how long idle worker threads spin before sleeping (default 50)
     GPT2_REFERENCE_FORWARD  compile gpt2__forward_reference, the plain forward pass the tests
                             compare every kernel set with (not for programs)
*/
#ifndef GPT2_H
#define GPT2_H

#include <stddef.h>
#include <stdint.h>

/* GPT2_API marks the public functions. A shared library (CMake: GPT2_BUILD_SHARED) is built
   with GPT2_SHARED and GPT2_BUILD, and used with GPT2_SHARED alone (the gpt2::gpt2_shared
   target defines it): on Windows that exports and imports the functions; elsewhere it keeps
   them visible in a library compiled with -fvisibility=hidden, which hides everything else. */
#if defined(GPT2_STATIC) && defined(GPT2_SHARED)
#error "GPT2_STATIC and GPT2_SHARED exclude each other"
#elif defined(GPT2_STATIC)
#define GPT2_API static
#elif defined(GPT2_SHARED) && (defined(_WIN32) || defined(__CYGWIN__))
#ifdef GPT2_BUILD
#define GPT2_API __declspec(dllexport)
#else
#define GPT2_API __declspec(dllimport)
#endif
#elif defined(GPT2_SHARED)
#define GPT2_API __attribute__((visibility("default")))
#else
#define GPT2_API extern
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define GPT2_VERSION_MAJOR 0
#define GPT2_VERSION_MINOR 3
#define GPT2_VERSION_PATCH 0

typedef enum gpt2_result {
    GPT2_OK = 0,
    GPT2_ERROR_INVALID_ARGUMENT, /* a NULL pointer, a value out of its range */
    GPT2_ERROR_IO,               /* the file could not be opened, read or mapped */
    GPT2_ERROR_BAD_FILE,         /* the file is not a valid model: truncated, corrupt, inconsistent */
    GPT2_ERROR_UNSUPPORTED,      /* a valid file using something this build cannot run */
    GPT2_ERROR_OUT_OF_MEMORY,
    GPT2_ERROR_BAD_TOKEN,        /* a token id outside the vocabulary */
    GPT2_ERROR_CONTEXT_FULL,     /* a session state or copy holds more tokens than the session's context, or a gpt2_choose option does not fit in it */
    GPT2_ERROR_NO_VOCABULARY,    /* text was given to a model that has no tokenizer */
    GPT2_ERROR_BAD_TEXT,         /* text that cannot be encoded */
    GPT2_ERROR_DEVICE,           /* the GPU or its driver failed */
    GPT2_ERROR_ABORTED,          /* the session's abort_fn asked to stop; the session is as before the call */
    GPT2_ERROR_INTERNAL,         /* a bug in gpt2.h (an unexpected internal exception): please report it */
    GPT2_ERROR_BUSY,             /* the session is in use by another call (another thread's, or the callback's own call); nothing changed */
    GPT2_ERROR_BAD_GRAMMAR,      /* a grammar that cannot be read or used: the message says where and why */
    GPT2_ERROR_BAD_STATE,        /* a session state (gpt2_session_load) that is truncated, damaged or not a state */
    /* Not a result. It makes every non-negative int32 a valid gpt2_result in C++, so a code
       from a newer version (and the library's internal ones) can be held without undefined behaviour. */
    GPT2__RESULT_RANGE = 0x7FFFFFFF
} gpt2_result;

/* A short English name for a result code ("bad file"); never NULL. */
GPT2_API const char* gpt2_result_string(gpt2_result result);

typedef struct gpt2_error {
    gpt2_result code;
    char message[512];
} gpt2_error;

/* ---- Version and ABI ------------------------------------------------------------------ */
#define GPT2_VERSION (GPT2_VERSION_MAJOR * 10000 + GPT2_VERSION_MINOR * 100 + GPT2_VERSION_PATCH)
/* The library's GPT2_VERSION: with a shared library, that of the library, not of the header. */
GPT2_API int gpt2_version(void);
/* The same as "MAJOR.MINOR.PATCH". */
GPT2_API const char* gpt2_version_string(void);
/* Call once before anything else when the functions are in a shared library (bindings: with
   the version they were written for and the sizes of their own declarations of the structs).
   GPT2_OK when the library's major version is `version`'s (before 1.0: the minor version
   too) and every size equals the library's; otherwise GPT2_ERROR_UNSUPPORTED and a message
   naming the versions or the struct. gpt2_error and gpt2_logit_bias never change. */
GPT2_API gpt2_result gpt2_check_abi(int version, size_t model_params_size, size_t session_params_size,
                                    size_t generate_params_size, size_t model_info_size, gpt2_error* err);
/* gpt2_check_abi with this header's version and sizes (C and C++). */
#define GPT2_CHECK_ABI(err)                                                                        \
    gpt2_check_abi(GPT2_VERSION, sizeof(gpt2_model_params), sizeof(gpt2_session_params),           \
                   sizeof(gpt2_generate_params), sizeof(gpt2_model_info), (err))

typedef enum gpt2_log_level { GPT2_LOG_ERROR, GPT2_LOG_WARNING, GPT2_LOG_INFO, GPT2_LOG_DEBUG } gpt2_log_level;
typedef void (*gpt2_log_fn)(void* user, gpt2_log_level level, const char* message);

/* Weight storage types, numbered as in GGUF. */
typedef enum gpt2_type {
    GPT2_TYPE_F32 = 0,
    GPT2_TYPE_F16 = 1,
    GPT2_TYPE_Q4_0 = 2,
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
    int no_mmap;           /* 1: read the file into memory; 0 (default): map it (weights are not copied,
                              but see gpt2_model_load_memory for q8_0, q4_0, f16 and bf16) */
    gpt2_device device;    /* where sessions of this model run */
    int cuda_device_index; /* with GPT2_DEVICE_CUDA */
    gpt2_log_fn log;       /* silent when NULL */
    void* log_user;
} gpt2_model_params;

GPT2_API gpt2_model_params gpt2_model_default_params(void);

/* Loads a GGUF model file. params may be NULL (defaults). path is UTF-8, on Windows too. */
GPT2_API gpt2_result gpt2_model_load_file(const char* path, const gpt2_model_params* params,
                                          gpt2_model** out_model, gpt2_error* err);
/* Loads from a buffer holding a whole GGUF file. A buffer aligned to 64 bytes is used in place
   (not copied) and must outlive the model; any other buffer is copied once. Decoding streams
   the weights: on Linux a buffer on huge pages (madvise MADV_HUGEPAGE) reads about 25% faster
   than 4 KiB pages; a file mapped by gpt2_model_load_file is nearly as fast.
   On a CPU with AVX-512 VNNI, q8_0, q4_0, f16 and bf16 matrices are packed once, at load, into
   a copy of the same size laid out for its vector units (docs/PERFORMANCE.md, "lanes"; about
   75-100 ms for a 124M f16 or bf16 model): a mapped file's pages of those matrices are handed
   back to the OS, a buffer's stay as they are. */
GPT2_API gpt2_result gpt2_model_load_memory(const void* data, size_t size, const gpt2_model_params* params,
                                            gpt2_model** out_model, gpt2_error* err);
/* Free a model's sessions, grammars and stages first. One freed before them stays in memory until
   the last of them is freed (a warning to `log`), and every call on them fails naming the
   model's free. A model freed twice, or used after its free, is refused while its memory is not
   reused (docs/ERRORS.md). NULL does nothing. */
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

typedef enum gpt2_context_policy { GPT2_CONTEXT_EXACT = 0, GPT2_CONTEXT_DISCARD = 1 } gpt2_context_policy;

typedef struct gpt2_session_params {
    int n_threads;  /* worker threads for this session, including the caller; 0 = all cores.
                       WebAssembly built without Emscripten's -pthread runs on the caller alone */
    int n_ctx;      /* the longest context the session holds; 0 = the model's, at most the
                       model's. On the CPU the KV cache takes blocks of 16 positions as the
                       context fills (from slabs on huge pages where the OS gives them: faster
                       to stream), so a large n_ctx costs memory only once used; on CUDA the
                       whole cache is allocated with the session. */
    int kv_f16;     /* store the KV cache in 16-bit floats (half the memory) */
    /* What happens when the context is full (see CONCEPTS): GPT2_CONTEXT_EXACT keeps the last
       n_ctx tokens and recomputes them for every new token, exactly as nanoGPT; with
       GPT2_CONTEXT_DISCARD the first n_keep tokens (a persona, a preamble) always stay and the
       n_discard oldest of the others go at once, so only one pass in n_discard recomputes.
       A call may give more tokens than n_ctx (a long prompt): they are cropped the same way,
       EXACT keeping the last n_ctx of the context and the new tokens (nanoGPT crops its input
       so), DISCARD the first n_keep and the last that fill the rest. */
    gpt2_context_policy context_policy;
    int n_keep;     /* with GPT2_CONTEXT_DISCARD: tokens at the start that never go; < n_ctx */
    int n_discard;  /* with GPT2_CONTEXT_DISCARD: tokens dropped at once; 0 = half of those not kept */
    /* Polled between layers of every pass on the CPU, before each pass on a GPU (where a pass,
       a whole prompt's included, takes milliseconds): returning nonzero ends gpt2_session_eval or
       gpt2_generate with GPT2_ERROR_ABORTED and leaves the session as it was before the call
       (a player left: stop the long prompt). Called on the calling thread; NULL = never. */
    int (*abort_fn)(void* user);
    void* abort_user;
} gpt2_session_params;

GPT2_API gpt2_session_params gpt2_session_default_params(void);
/* params may be NULL (defaults). */
GPT2_API gpt2_result gpt2_session_create(const gpt2_model* model, const gpt2_session_params* params,
                                         gpt2_session** out_session, gpt2_error* err);
/* NULL, or a session freed already, does nothing (while its memory is not reused: a session
   handed to any call after its free is refused with an error that says so). */
GPT2_API void gpt2_session_free(gpt2_session* session);
/* Forgets the context (the conversation); keeps the memory. */
GPT2_API void gpt2_session_reset(gpt2_session* session);
/* Tokens in the session's context (after cropping to n_ctx). */
GPT2_API size_t gpt2_session_n_tokens(const gpt2_session* session);
/* The gpt2_session_n_tokens() ids in context, oldest first; valid until the session changes. */
GPT2_API const int32_t* gpt2_session_tokens(const gpt2_session* session);

/* The session's state as bytes: tokens, the KV cache rows in use (in the session's cache type),
   the logits, the RNG and the UTF-8 stream, with the model's fingerprint, a version and
   checksums. With capacity 0 (buf may be NULL), *n_bytes receives the size needed; otherwise
   buf must hold that many. The first save of a model reads all its weights once (the
   fingerprint). The bytes are for this library's version and this model only. */
GPT2_API gpt2_result gpt2_session_save(const gpt2_session* session, void* buf, size_t capacity, size_t* n_bytes,
                                       gpt2_error* err);
/* Makes the session continue exactly where the saved one was. Every check comes first - a
   truncated or damaged buffer, another version, another model, more tokens than this session's
   n_ctx - and a failed load leaves the session as it was. A state saved with the other KV cache
   type is converted (f16 to f32 exactly; f32 to f16 rounds as an f16 cache would). */
GPT2_API gpt2_result gpt2_session_load(gpt2_session* session, const void* buf, size_t n_bytes, gpt2_error* err);
/* Makes dst a copy of src (a fork: the same context, logits and RNG), as save + load. Both
   sessions belong to one model; dst's n_ctx must hold src's tokens. On the CPU, with the same
   kv_f16, dst shares src's full blocks of the KV cache instead of copying them (copy on write:
   the tokens either adds later stay its own), so 32 characters forked from one scene hold it
   once and a fork costs the time and memory of at most one block; otherwise the rows are copied. */
GPT2_API gpt2_result gpt2_session_copy(gpt2_session* dst, const gpt2_session* src, gpt2_error* err);
/* Keeps the first n_tokens of the context (rewind: undo the last answer); the logits become the
   prediction after the last one kept (one token is recomputed). n_tokens 0 resets. */
GPT2_API gpt2_result gpt2_session_truncate(gpt2_session* session, size_t n_tokens, gpt2_error* err);

/* Appends tokens to the context and runs the model over them (all new tokens in one pass).
   Afterwards gpt2_session_logits() holds the prediction after the last token. When the context
   would exceed n_ctx, tokens are dropped under the session's context policy (any number of
   tokens may be given; see gpt2_session_params). */
GPT2_API gpt2_result gpt2_session_eval(gpt2_session* session, const int32_t* tokens, size_t n_tokens,
                                       gpt2_error* err);
/* The same with text in the model's vocabulary (a persona, a scene, the player's line before the
   answer is asked for): tokenized as gpt2_generate_text tokenizes a prompt, then evaluated. An
   empty text is refused; a model without a vocabulary gives GPT2_ERROR_NO_VOCABULARY. */
GPT2_API gpt2_result gpt2_session_eval_text(gpt2_session* session, const char* text, gpt2_error* err);
/* n_vocab logits of the last evaluated position; NULL before the first eval. */
GPT2_API const float* gpt2_session_logits(const gpt2_session* session);

/* Log-probability (natural log) of tokens[1..n-1], each given the ones before it; the first
   token is not scored. Evaluated from an empty context, as nanoGPT scores a sequence (so the
   score does not depend on what the session held); the session is reset afterwards. To score
   continuations of a context and keep it, use gpt2_choose, which leaves the session as it was.
   Sequences longer than n_ctx use nanoGPT's sliding window. */
GPT2_API gpt2_result gpt2_score(gpt2_session* session, const int32_t* tokens, size_t n_tokens,
                                double* out_logprob_sum, gpt2_error* err);
/* Scores each option as a continuation of the session's context; logprobs[i] (may be NULL) gets
   the sum of the log-probabilities of option i's tokens (the option tokenized on its own, as
   gpt2_tokenize gives it, after the context), *best the index of the most likely (a tie: the
   lower index). The options' shared prefixes run once (a trie of their tokens): N options cost
   a run per distinct token, not N generations. Each equals gpt2_score of the context's tokens
   and the option's less gpt2_score of the context's alone. Needs a context (evaluate a prompt
   first). Where the longest option does not fit in n_ctx after the context, every option is
   scored after the context cut as evaluating that option would cut it (the session's context
   policy), and the session's next evaluation recomputes the cache from the cut on. The session
   is left as it was (tokens, logits, RNG), on every error and when abort_fn stops it too. */
GPT2_API gpt2_result gpt2_choose(gpt2_session* session, const char* const* options, size_t n_options,
                                 float* logprobs, size_t* best, gpt2_error* err);

/* ---- Generation ----------------------------------------------------------------------- */
/* Called once per new token, in order, with the text that token releases (NULL and 0 for a model
   without vocabulary). Text is released as soon as it is certain: never ending inside a UTF-8
   character (incomplete bytes wait for the rest), and never part of a stop string (text that
   could still be the start of one waits until a later token shows it is not - then it comes
   with that later token - or completes the stop string - then it is never delivered, nor
   anything after it). So `text` may be empty, or carry text of earlier tokens. When generation
   ends, what is still held (bytes that never formed a character, text that did not become a
   stop string) comes in one last call with token -1. All the `text` together is the generated
   text up to the first stop string, without the end-of-text token's text when stop_at_eos
   ended generation. Return nonzero to stop. */
typedef int (*gpt2_token_fn)(void* user, int32_t token, const char* text, size_t text_len);

typedef struct gpt2_logit_bias {
    int32_t token;
    float bias; /* added to the token's logit; -INFINITY bans the token */
} gpt2_logit_bias;

/* Custom rules: gets the n_vocab logits after logit_bias and the penalties, before top_k, and
   edits them in place (a copy: gpt2_session_logits is unchanged); -INFINITY removes a token.
   At least one token must stay finite, and none may become NaN or +INFINITY. */
typedef void (*gpt2_logits_fn)(void* user, float* logits, int n_vocab);

/* ---- Grammars (structured output) ----------------------------------------------------------
   A grammar makes generation follow a form the program can parse: an NPC's `ACTION: wave`, one
   of a list of choices, a JSON object. With params.grammar set, every token drawn keeps the
   generated text the beginning of a sentence of the grammar (tokens that would leave it are
   removed before the draw), the end-of-text token is allowed exactly when the text is a whole
   sentence, and generation ends when the text is a whole sentence the grammar lets nothing
   extend, at the end-of-text token, at a stop string, or at max_new_tokens (then
   params.grammar_match says PREFIX). The check is on the text's bytes, so a token may cross
   the grammar's literals and classes, and a token may end inside a UTF-8 character. Where the
   grammar allows only one text next, its tokens (as gpt2_tokenize writes it, but the last) are
   not drawn: they join the context in one pass, delivered and counted as generated tokens.
   Grammars are written in llama.cpp's GBNF (docs/GRAMMARS.md):
       root   ::= "ACTION: " action "\n" line
       action ::= "wave" | "attack" | "flee"
       line   ::= [^\n]+
   rules, alternatives |, groups ( ), x* x+ x? x{m} x{m,} x{m,n}, "literals" and [classes]
   (ranges a-z, negated [^...]) with the escapes \n \r \t \\ \" \xHH \uHHHH \UHHHHHHHH,
   . (any character), # comments. Left recursion (expr ::= expr "+" term) is refused. */
typedef struct gpt2_grammar gpt2_grammar; /* immutable once made: share it between sessions and threads */

/* Makes a grammar for `model`'s vocabulary from GBNF text (UTF-8, NUL-terminated). root: the
   start rule's name; NULL = "root". A malformed grammar gives GPT2_ERROR_BAD_GRAMMAR and a
   message with the line, the column and what was expected; so does a grammar none of whose
   sentences the vocabulary can write (JSON for a character model without braces), naming the
   characters no token holds. Free it before the model. */
GPT2_API gpt2_result gpt2_grammar_from_gbnf(const gpt2_model* model, const char* gbnf, const char* root,
                                            gpt2_grammar** out_grammar, gpt2_error* err);
GPT2_API void gpt2_grammar_free(gpt2_grammar* grammar);

typedef enum gpt2_match { GPT2_MATCH_NONE = 0, GPT2_MATCH_PREFIX = 1, GPT2_MATCH_COMPLETE = 2 } gpt2_match;
/* Is this text (len UTF-8 bytes) a whole sentence of the grammar (COMPLETE), the beginning of
   one (PREFIX), or neither (NONE; text that is not UTF-8 too)? */
GPT2_API gpt2_result gpt2_grammar_match(const gpt2_grammar* grammar, const char* text, size_t len, gpt2_match* out_match,
                                        gpt2_error* err);

/* JSON Schema (draft 2020-12 and the older drafts people still write) to a grammar: the text
   generated is a JSON value the schema accepts. A keyword that constrains and is not enforced
   (docs/GRAMMARS.md has the table) is refused with GPT2_ERROR_BAD_GRAMMAR and a message naming
   it and its JSON pointer ("json schema: /properties/age/multipleOf: ..."), never ignored;
   annotations (title, description, default, examples, ...) are ignored. The grammar may accept
   less than the schema: properties in the order the schema defines them (unless any_order), const
   and enum strings without escapes the schema does not write. */
typedef struct gpt2_json_schema_params {
    int compact;             /* nonzero: no whitespace between JSON's tokens (what a model should
                                write unless it was trained on indented JSON); 0 = whitespace allowed */
    uint32_t max_whitespace; /* the longest run of whitespace between tokens; 0 = 20 (so that a
                                model cannot loop on whitespace, as in llama.cpp's converter) */
    int any_order;           /* nonzero: an object's properties in any order, each at most once, the
                                required ones all there (as JSON Schema reads objects), where the
                                states that takes are few (up to 1,024: about 9 properties; past
                                that, definition order); 0 = the order the schema defines them */
    int integer_fraction;    /* nonzero: "type": "integer" also takes an integer written with a
                                fraction of zeros (1.0, as JSON Schema counts it since draft 6; not
                                in a draft 4 schema, whose integers have none); 0 = digits only */
} gpt2_json_schema_params;

GPT2_API gpt2_json_schema_params gpt2_json_schema_default_params(void);

/* Makes a grammar for `model` from a JSON Schema (len bytes of UTF-8 JSON). params NULL = the
   defaults. Malformed JSON gives the line and column; a schema that is not an object or a
   boolean, an unresolved $ref, contradictory bounds and nesting deeper than 256 levels are
   refused with a message. Free it with gpt2_grammar_free, before the model. */
GPT2_API gpt2_result gpt2_grammar_from_json_schema(const gpt2_model* model, const char* schema, size_t len,
                                                   const gpt2_json_schema_params* params, gpt2_grammar** out_grammar,
                                                   gpt2_error* err);

/* Why a generation ended (gpt2_generate_params.end and on_end). */
typedef enum gpt2_end {
    GPT2_END_MAX_TOKENS = 0, /* max_new_tokens tokens were generated (with 0: the prompt was evaluated) */
    GPT2_END_GRAMMAR = 1,    /* the grammar's sentence is whole and nothing may extend it */
    GPT2_END_STOP = 2,       /* the text contains one of the stop strings */
    GPT2_END_EOS = 3,        /* the end-of-text token, with stop_at_eos */
    GPT2_END_CALLBACK = 4,   /* on_token returned nonzero */
    GPT2_END_ABORTED = 5,    /* abort_fn asked to stop, or the line was cancelled on a stage: the
                                session is as it was before the call */
    GPT2_END_ERROR = 6       /* the generation failed: its result and message say why (a grammar
                                the vocabulary cannot continue, a device error) */
} gpt2_end;

/* The name of an end ("max_tokens", "grammar", "stop", "eos", "callback", "aborted", "error"). */
GPT2_API const char* gpt2_end_string(gpt2_end end);

/* A generation is over (gpt2_generate_params.on_end): once, after its last on_token, however it
   ended. `end` says why; `result` is GPT2_OK, or the failure (GPT2_ERROR_ABORTED with
   GPT2_END_ABORTED; another with GPT2_END_ERROR) and `message` its sentence ("" for GPT2_OK).
   Runs where the generation ends: in gpt2_generate and gpt2_generate_batch before they return, on
   the calling thread; for a stage's line on the thread that steps, cancels or frees the stage,
   after its session is free again (on_end may give it its next line with gpt2_stage_add). */
typedef void (*gpt2_end_fn)(void* user, gpt2_end end, gpt2_result result, const char* message);

typedef struct gpt2_generate_params {
    int max_new_tokens;  /* tokens to generate, default 256; 0 = none: the prompt is only evaluated */
    float temperature;   /* 0 = greedy (argmax); default 0.8 */
    int top_k;           /* keep the k most likely tokens; 0 = all; default 200 */
    uint64_t seed;       /* the RNG restarts from it at each call; default 1337 */
    gpt2_token_fn on_token;
    void* user;          /* passed to on_token, on_logits and on_end */
    /* The chain's other controls (see GENERATION at the top); zero = off. */
    float top_p;         /* keep the fewest most likely tokens whose probabilities (at temperature 1,
                            after top_k) add up to top_p; 0 or 1 = off */
    float min_p;         /* drop tokens less than min_p times as likely as the most likely (at
                            temperature 1); 0 = off */
    float repeat_penalty;    /* for each token in the window: a logit > 0 is divided by it, others are
                                multiplied (llama.cpp's rule); > 1 discourages repeats; 0 or 1 = off */
    int repeat_last_n;       /* the window of the three penalties: the last N tokens of the context,
                                the prompt included; 0 = 64 (llama.cpp's), -1 = the whole context */
    float presence_penalty;  /* subtracted from the logit of each token in the window, once
                                (negative: encourages repeats) */
    float frequency_penalty; /* subtracted from a token's logit once per time it is in the window */
    const gpt2_logit_bias* logit_bias; /* n_logit_bias biases; a token listed twice gets both */
    size_t n_logit_bias;
    gpt2_logits_fn on_logits;
    const char* const* stop; /* n_stop non-empty UTF-8 strings (needs a vocabulary): generation ends
                                at the token after which the generated text contains one; from
                                the one that starts first on, nothing is delivered (gpt2_token_fn) */
    size_t n_stop;
    int stop_at_eos;         /* 1: end at the end-of-text token (gpt2_model_info.eos_token; never, for
                                a model without one) */
    const gpt2_grammar* grammar; /* the form the text must take (see Grammars above); NULL = free text.
                                    Applied after logit_bias and the penalties, before on_logits and
                                    top_k: top_k then keeps the k most likely of the allowed tokens */
    gpt2_match* grammar_match;   /* may be NULL; with a grammar, receives COMPLETE when the generated
                                    text is a whole sentence, PREFIX when generation ended before */
    gpt2_end* end;               /* may be NULL; receives why generation ended. A grammar's answer
                                    cut by max_new_tokens (GPT2_END_MAX_TOKENS, grammar_match PREFIX)
                                    is incomplete: not yet a sentence of the grammar */
    gpt2_end_fn on_end;          /* may be NULL; called once when the generation is over, however
                                    it ended: a stage's line tells the game here that its character
                                    has finished (see gpt2_end_fn) */
} gpt2_generate_params;

GPT2_API gpt2_generate_params gpt2_generate_default_params(void);

/* Appends `prompt` to the session's context, then samples up to max_new_tokens tokens, nanoGPT's
   way: logits / temperature, keep the top_k, softmax, draw one (with the chain of GENERATION
   when more controls are on). The new tokens stay in the context, so a further call continues
   the conversation. out_tokens (may be NULL) receives up to `capacity` new ids; *n_generated
   (may be NULL) how many were generated, the token that completed a stop string included. */
GPT2_API gpt2_result gpt2_generate(gpt2_session* session, const int32_t* prompt, size_t n_prompt,
                                   const gpt2_generate_params* params, int32_t* out_tokens, size_t capacity,
                                   size_t* n_generated, gpt2_error* err);
/* gpt2_generate with a UTF-8 prompt, encoded with the model's tokenizer (no special tokens). */
GPT2_API gpt2_result gpt2_generate_text(gpt2_session* session, const char* prompt, const gpt2_generate_params* params,
                                        gpt2_error* err);

/* ---- Many sessions in one pass ------------------------------------------------------------ */
/* Appends n_tokens[i] tokens to sessions[i] for every i and runs them all in one pass over the
   weights; afterwards gpt2_session_logits(sessions[i]) holds each one's prediction. All sessions
   share one model; no session appears twice. Runs on the worker threads of sessions[0].
   Each session makes room under its own context policy and gets the logits it would get alone,
   to rounding (the products of 4 or more sessions are summed in another order; the tests bound
   the difference at 1e-4; CUDA's 16-bit batched pass at 2^-10 of the largest logit), so the
   same tokens when sampled unless a draw falls within that rounding of a boundary. Every session
   and token is checked first: on an error nothing changes, and the message names the session
   ("sessions[2]: token 0 is ..."). sessions[0]'s abort_fn is polled; an aborted batch leaves
   every session as it was. The CPU runs the batch in one pass; CUDA does when built with
   GPT2_CUDA_BATCH (see gpt2_cuda.cuh), else it runs the sessions one after another. */
GPT2_API gpt2_result gpt2_batch_eval(gpt2_session* const* sessions, const int32_t* const* tokens,
                                     const size_t* n_tokens, size_t n_sessions, gpt2_error* err);
/* Generates for every session at once, each with its own parameters (temperature, seed, stops,
   callback...), one token per unfinished session per pass, until all are done. prompts[i] (UTF-8;
   prompts or an entry may be NULL or empty: continue the context) and params[i] (params may be
   NULL: the defaults for all) as gpt2_generate_text's; each session's tokens and callbacks are
   those gpt2_generate_text would give it alone. A session whose on_token returns nonzero, or
   that reaches a stop or max_new_tokens, finishes while the others go on. */
GPT2_API gpt2_result gpt2_generate_batch(gpt2_session* const* sessions, const char* const* prompts,
                                         const gpt2_generate_params* params, size_t n_sessions, gpt2_error* err);

/* ---- The stage: lines asked at any time, one pass for all ------------------------------- */
/* A game's characters do not speak at once: the guard is asked now, the merchant two seconds
   later. A stage runs every line under way in one pass over the weights per step (continuous
   batching): a line added between steps joins the next pass (its prompt prefilled in it beside
   the others' single tokens), and a line that ends leaves at once, its session free again.

       gpt2_stage* stage;  gpt2_stage_create(model, NULL, &stage, &err);
       gpt2_stage_add(stage, guard, "Who goes there?", &guard_params, &err);   // any time
       size_t n_active;                                                         // each frame:
       gpt2_stage_step(stage, 0, &n_active, &err);   // every line one token further, on_token called

   Each line's tokens and text are those gpt2_generate_text gives its session alone with the same
   params (to the rounding of a batched pass: see gpt2_batch_eval). While a session is on the
   stage every other call on it returns GPT2_ERROR_BUSY and changes nothing.
   Without a thread to spare (a page without Workers, a game's one script thread), step with a
   frame budget: gpt2_stage_step(stage, 4000, ...) each frame does at most ~4 ms of the work.
   Threads: gpt2_stage_add and gpt2_stage_cancel may be called from any thread, also from a
   line's on_token; gpt2_stage_step from one thread at a time (a second concurrent call returns
   GPT2_ERROR_BUSY); gpt2_stage_free when no other call on the stage runs. The stage runs its
   passes on its own worker threads (gpt2_stage_params.n_threads), not the sessions'.
   The CPU runs the lines in one pass; CUDA runs them one after another unless built with
   GPT2_CUDA_BATCH. */
typedef struct gpt2_stage gpt2_stage;

typedef struct gpt2_stage_params {
    int n_threads; /* worker threads of the stage's passes; 0 = one per core */
} gpt2_stage_params;

GPT2_API gpt2_stage_params gpt2_stage_default_params(void);
/* A stage for sessions of `model` (params may be NULL: the defaults). Free it with
   gpt2_stage_free, before the model. */
GPT2_API gpt2_result gpt2_stage_create(const gpt2_model* model, const gpt2_stage_params* params, gpt2_stage** out_stage,
                                       gpt2_error* err);
/* Lines still on the stage end as aborted ones do (each session as before its gpt2_stage_add,
   free for other calls; no more callbacks). NULL is ignored. */
GPT2_API void gpt2_stage_free(gpt2_stage* stage);
/* Queues a generation for `session` (a session of the stage's model, on no stage and in no other
   call): `prompt` (UTF-8; NULL or "" continues the context) and params (NULL: the defaults) as
   gpt2_generate_text's, callbacks, stops and grammar included; params' pointers (stop strings,
   biases, grammar, grammar_match) must stay valid until the line ends. The line starts at the
   next gpt2_stage_step. Checked here: on an error nothing changes. */
GPT2_API gpt2_result gpt2_stage_add(gpt2_stage* stage, gpt2_session* session, const char* prompt, const gpt2_generate_params* params,
                                    gpt2_error* err);
/* Ends session's line early (the player walked away): the session is left as abort_fn leaves one
   (as before its gpt2_stage_add) and is free again once no step runs (at once when none does,
   else when the running step returns). GPT2_ERROR_INVALID_ARGUMENT when it is not on the stage.
   A session's own abort_fn, when set, is polled before each step: asking to stop ends its line
   the same way. */
GPT2_API gpt2_result gpt2_stage_cancel(gpt2_stage* stage, gpt2_session* session, gpt2_error* err);
/* Takes every line one token further in one pass (a line that has just joined: its prompt) and
   ends the lines that are done (their stop, max_new_tokens, the grammar's sentence, on_token
   returning nonzero). *n_active (may be NULL) receives the lines on the stage after the call.
   budget_us, a frame budget: 0 runs the whole step on the stage's threads. > 0 runs it on the
   calling thread alone, a slice at a time, and returns once about budget_us microseconds are
   spent (a slice past the budget is one row panel of a product or one attention task: well
   under a millisecond for GPT-2 124M's decode); the next call goes on where it stopped, and a
   step's tokens reach on_token when it begins. The tokens do not depend on the budget (the
   same bits as whole steps). On CUDA a budgeted step runs its pass whole. < 0 is refused.
   A line that fails alone (a grammar its vocabulary cannot continue) ends with its session as
   before its add, and the step returns that error (naming the line) after the others moved on;
   a pass that fails (the device) ends every line so. */
GPT2_API gpt2_result gpt2_stage_step(gpt2_stage* stage, int64_t budget_us, size_t* n_active, gpt2_error* err);

/* Draws one token from `logits` (n entries) with the given temperature/top_k; *rng_state is
   advanced. Exposed so callers can sample from gpt2_session_logits() themselves. */
GPT2_API gpt2_result gpt2_sample(const float* logits, int n, float temperature, int top_k, uint64_t* rng_state,
                                 int32_t* out_token, gpt2_error* err);

#ifdef __cplusplus
}
#endif
#endif /* GPT2_H */

/* ---- src/implementation.h ---- */
/* ======================================================================================== */
/*                                     IMPLEMENTATION                                       */
/* ======================================================================================== */
#if defined(GPT2_IMPLEMENTATION) && !defined(GPT2_IMPLEMENTATION_DONE)
#define GPT2_IMPLEMENTATION_DONE

/* The implementation is C++17 (the API above is C): say so before a compiler in an older mode
   (clang's and MSVC's default, C++14) fails on what it cannot parse. MSVC reports the standard
   in _MSVC_LANG; __cplusplus only with /Zc:__cplusplus. */
#if !defined(__cplusplus)
#error "gpt2.h: the file that defines GPT2_IMPLEMENTATION must be compiled as C++17 or later (e.g. g++ -std=c++17); the API alone compiles as C"
#elif (defined(_MSVC_LANG) && _MSVC_LANG < 201703L) || (!defined(_MSVC_LANG) && __cplusplus < 201703L)
#error "gpt2.h: the implementation needs C++17 or later: compile with -std=c++17 (MSVC: /std:c++17)"
#endif

/* Without optimisation the model runs about ten times slower (a 200-token answer from the shipped
   model: 28 s against 2.4 s with -O2). GCC and Clang say whether they optimise (__OPTIMIZE__):
   tell the user at compile time, and in a warning at every model load (gpt2__model_init). Define
   GPT2_UNOPTIMISED_OK to build a debug build in silence. */
#if (defined(__GNUC__) || defined(__clang__)) && !defined(__OPTIMIZE__)
#define GPT2__UNOPTIMISED 1
#if !defined(GPT2_UNOPTIMISED_OK)
#pragma message("gpt2.h: the implementation is compiled without optimisation and runs about 10x slower; compile it with -O2 (define GPT2_UNOPTIMISED_OK to silence this)")
#endif
#endif

/* ---- src/common.h ---- */
/* What every part of the implementation uses: the standard headers, the allocator and assert
   macros, aligned buffers, errors as values, f16 and bf16. */

#ifndef __cplusplus
#error "GPT2_IMPLEMENTATION needs C++17: define it in a .cpp file"
#endif

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
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
#define GPT2__DEFAULT_ALLOCATOR 1
#endif
#if defined(__linux__)
#include <sys/mman.h>
#endif
#ifndef GPT2_ASSERT
#include <cassert>
#define GPT2_ASSERT(x) assert(x)
#endif

/* printf-style checking of our message formats. MinGW's C++ runtime formats with its own
   C99-conforming printf (libstdc++ turns on __USE_MINGW_ANSI_STDIO), which takes %zu; the plain
   `printf` archetype there would mean msvcrt's, which does not. */
#if defined(__MINGW32__) && defined(__MINGW_PRINTF_FORMAT)
#define GPT2__PRINTF_LIKE(fmt, first) __attribute__((format(__MINGW_PRINTF_FORMAT, fmt, first)))
#elif defined(__GNUC__)
#define GPT2__PRINTF_LIKE(fmt, first) __attribute__((format(printf, fmt, first)))
#else
#define GPT2__PRINTF_LIKE(fmt, first)
#endif

#ifdef GPT2_STATIC
#define GPT2_DEF [[maybe_unused]] static /* a program need not call every function */
#else
#define GPT2_DEF
#endif

/* GPT2_MALLOC memory aligned to a cache line, so no vector load of the kernels straddles two
   lines (docs/PERFORMANCE.md, Kernel notes), or to `alignment` (a power of two: 2 MiB for huge
   pages). The pointer malloc gave sits just below. */
static void* gpt2__malloc_aligned(size_t bytes, size_t alignment = 64) {
    void* raw = GPT2_MALLOC(bytes + alignment + sizeof(void*));
    if (!raw) return nullptr;
    void* p = (void*)(((uintptr_t)raw + sizeof(void*) + alignment - 1) & ~(uintptr_t)(alignment - 1));
    std::memcpy((char*)p - sizeof(void*), &raw, sizeof(void*));
    return p;
}

static void gpt2__free_aligned(void* p) {
    if (!p) return;
    void* raw;
    std::memcpy(&raw, (char*)p - sizeof(void*), sizeof(void*));
    GPT2_FREE(raw);
}

/* Asks for transparent huge pages on the 2 MiB-aligned part of a large buffer the kernels
   stream through (the KV cache): from 4 KiB pages a core streams slower (docs/PERFORMANCE.md,
   Kernel notes). Only for the default allocator's memory,
   on Linux; the OS may ignore the advice. */
#if defined(__linux__) && defined(MADV_HUGEPAGE) && defined(GPT2__DEFAULT_ALLOCATOR)
#define GPT2__HUGE_PAGES 1
#endif
static void gpt2__advise_huge_pages(void* p, size_t bytes) {
#if defined(GPT2__HUGE_PAGES)
    const uintptr_t huge = (uintptr_t)2 << 20;
    const uintptr_t begin = ((uintptr_t)p + huge - 1) & ~(huge - 1), end = ((uintptr_t)p + bytes) & ~(huge - 1);
    if (end > begin) madvise((void*)begin, end - begin, MADV_HUGEPAGE);
#else
    (void)p;
    (void)bytes;
#endif
}

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
static gpt2_result gpt2__fail(gpt2_error* err, gpt2_result code, const char* fmt, ...) GPT2__PRINTF_LIKE(3, 4);
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

/* Every object the C API hands out (model, session, grammar, stage) carries a tag: its kind's
   while it lives, GPT2__TAG_FREED once freed. Each call checks it on entry (gpt2__check_tag), so
   an object handed back after its free (a use after free, a second free) is refused with a
   sentence that says so, in release builds too, for as long as the allocator has not given its
   memory to something else: what reuse or a wild pointer make look live cannot be told apart
   (docs/GUIDE.md, Errors). No tag is a struct's first field: free() keeps its own list pointers
   in a freed block's first 16 bytes. A model outlives its free while its sessions and grammars
   hold it (gpt2__model_unref), so theirs is always read from live memory. */
enum : uint64_t {
    GPT2__TAG_MODEL = 0x677074326d6f6465ull,   /* "gpt2mode" */
    GPT2__TAG_SESSION = 0x6770743273657373ull, /* "gpt2sess" */
    GPT2__TAG_GRAMMAR = 0x677074326772616dull, /* "gpt2gram" */
    GPT2__TAG_STAGE = 0x6770743273746167ull,   /* "gpt2stag" */
    GPT2__TAG_FREED = 0x6770743266726565ull,   /* "gpt2free" */
};
using gpt2__tag = std::atomic<uint64_t>; /* atomic: a model's is written by its free while its sessions' calls read it */

/* GPT2_OK when `object` is not NULL and its tag is `live`; else an error naming `what` ("session")
   NULL, freed (by `free_fn`), or not made by `make_fn`. */
template <class T>
static gpt2_result gpt2__check_tag(const T* object, uint64_t live, const char* what, const char* make_fn, const char* free_fn, gpt2_error* err) {
    if (!object) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "%s is NULL", what);
    const uint64_t value = object->tag.load(std::memory_order_relaxed);
    if (value == live) return GPT2_OK;
    if (value == GPT2__TAG_FREED) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "%s was freed (%s) and cannot be used", what, free_fn);
    return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "%s is not a live object made by %s (freed and its memory reused, or a wrong pointer)", what, make_fn);
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
    if (abs > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | (abs & 0x7fffffu) >> 13); /* NaN: quiet, the payload's top bits, as F16C and NEON */
    if (abs == 0x7f800000u) return (uint16_t)(sign | 0x7c00u);
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

/* Float to bf16, rounded to nearest even (as PyTorch and CUDA's __float2bfloat16_rn); a NaN stays
   a quiet NaN. */
static inline uint16_t gpt2__f32_to_bf16(float x) {
    uint32_t bits;
    std::memcpy(&bits, &x, 4);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((bits >> 16) | 0x40);
    return (uint16_t)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

/* ---- src/model/unicode_tables.h ---- */
/* GENERATED by tools/gen_unicode_tables.py from Python's unicodedata (Unicode 14.0.0). Do not edit;
   rerun the script (python3 tools/gen_unicode_tables.py) instead.
   Character classes of GPT-2's pre-tokenizer: ranges of code points, each entry
   (first code point << 2) | class, sorted; a range ends where the next one starts. */
#define GPT2__UNICODE_VERSION "14.0.0"
enum gpt2__char_class { GPT2__CC_OTHER = 0, GPT2__CC_LETTER = 1, GPT2__CC_NUMBER = 2, GPT2__CC_SPACE = 3 };
static const uint32_t gpt2__unicode_ranges[1534] = {
    0x0, 0x27, 0x38, 0x83, 0x84, 0xc2, 0xe8, 0x105, 0x16c, 0x185,
    0x1ec, 0x217, 0x218, 0x283, 0x284, 0x2a9, 0x2ac, 0x2ca, 0x2d0, 0x2d5,
    0x2d8, 0x2e6, 0x2e9, 0x2ec, 0x2f2, 0x2fc, 0x301, 0x35c, 0x361, 0x3dc,
    0x3e1, 0xb08, 0xb19, 0xb48, 0xb81, 0xb94, 0xbb1, 0xbb4, 0xbb9, 0xbbc,
    0xdc1, 0xdd4, 0xdd9, 0xde0, 0xde9, 0xdf8, 0xdfd, 0xe00, 0xe19, 0xe1c,
    0xe21, 0xe2c, 0xe31, 0xe34, 0xe39, 0xe88, 0xe8d, 0xfd8, 0xfdd, 0x1208,
    0x1229, 0x14c0, 0x14c5, 0x155c, 0x1565, 0x1568, 0x1581, 0x1624, 0x1741, 0x17ac,
    0x17bd, 0x17cc, 0x1881, 0x192c, 0x1982, 0x19a8, 0x19b9, 0x19c0, 0x19c5, 0x1b50,
    0x1b55, 0x1b58, 0x1b95, 0x1b9c, 0x1bb9, 0x1bc2, 0x1be9, 0x1bf4, 0x1bfd, 0x1c00,
    0x1c41, 0x1c44, 0x1c49, 0x1cc0, 0x1d35, 0x1e98, 0x1ec5, 0x1ec8, 0x1f02, 0x1f29,
    0x1fac, 0x1fd1, 0x1fd8, 0x1fe9, 0x1fec, 0x2001, 0x2058, 0x2069, 0x206c, 0x2091,
    0x2094, 0x20a1, 0x20a4, 0x2101, 0x2164, 0x2181, 0x21ac, 0x21c1, 0x2220, 0x2225,
    0x223c, 0x2281, 0x2328, 0x2411, 0x24e8, 0x24f5, 0x24f8, 0x2541, 0x2544, 0x2561,
    0x2588, 0x259a, 0x25c0, 0x25c5, 0x2604, 0x2615, 0x2634, 0x263d, 0x2644, 0x264d,
    0x26a4, 0x26a9, 0x26c4, 0x26c9, 0x26cc, 0x26d9, 0x26e8, 0x26f5, 0x26f8, 0x2739,
    0x273c, 0x2771, 0x2778, 0x277d, 0x2788, 0x279a, 0x27c1, 0x27c8, 0x27d2, 0x27e8,
    0x27f1, 0x27f4, 0x2815, 0x282c, 0x283d, 0x2844, 0x284d, 0x28a4, 0x28a9, 0x28c4,
    0x28c9, 0x28d0, 0x28d5, 0x28dc, 0x28e1, 0x28e8, 0x2965, 0x2974, 0x2979, 0x297c,
    0x299a, 0x29c0, 0x29c9, 0x29d4, 0x2a15, 0x2a38, 0x2a3d, 0x2a48, 0x2a4d, 0x2aa4,
    0x2aa9, 0x2ac4, 0x2ac9, 0x2ad0, 0x2ad5, 0x2ae8, 0x2af5, 0x2af8, 0x2b41, 0x2b44,
    0x2b81, 0x2b88, 0x2b9a, 0x2bc0, 0x2be5, 0x2be8, 0x2c15, 0x2c34, 0x2c3d, 0x2c44,
    0x2c4d, 0x2ca4, 0x2ca9, 0x2cc4, 0x2cc9, 0x2cd0, 0x2cd5, 0x2ce8, 0x2cf5, 0x2cf8,
    0x2d71, 0x2d78, 0x2d7d, 0x2d88, 0x2d9a, 0x2dc0, 0x2dc5, 0x2dca, 0x2de0, 0x2e0d,
    0x2e10, 0x2e15, 0x2e2c, 0x2e39, 0x2e44, 0x2e49, 0x2e58, 0x2e65, 0x2e6c, 0x2e71,
    0x2e74, 0x2e79, 0x2e80, 0x2e8d, 0x2e94, 0x2ea1, 0x2eac, 0x2eb9, 0x2ee8, 0x2f41,
    0x2f44, 0x2f9a, 0x2fcc, 0x3015, 0x3034, 0x3039, 0x3044, 0x3049, 0x30a4, 0x30a9,
    0x30e8, 0x30f5, 0x30f8, 0x3161, 0x316c, 0x3175, 0x3178, 0x3181, 0x3188, 0x319a,
    0x31c0, 0x31e2, 0x31fc, 0x3201, 0x3204, 0x3215, 0x3234, 0x3239, 0x3244, 0x3249,
    0x32a4, 0x32a9, 0x32d0, 0x32d5, 0x32e8, 0x32f5, 0x32f8, 0x3375, 0x337c, 0x3381,
    0x3388, 0x339a, 0x33c0, 0x33c5, 0x33cc, 0x3411, 0x3434, 0x3439, 0x3444, 0x3449,
    0x34ec, 0x34f5, 0x34f8, 0x3539, 0x353c, 0x3551, 0x355c, 0x3562, 0x357d, 0x3588,
    0x359a, 0x35e4, 0x35e9, 0x3600, 0x3615, 0x365c, 0x3669, 0x36c8, 0x36cd, 0x36f0,
    0x36f5, 0x36f8, 0x3701, 0x371c, 0x379a, 0x37c0, 0x3805, 0x38c4, 0x38c9, 0x38d0,
    0x3901, 0x391c, 0x3942, 0x3968, 0x3a05, 0x3a0c, 0x3a11, 0x3a14, 0x3a19, 0x3a2c,
    0x3a31, 0x3a90, 0x3a95, 0x3a98, 0x3a9d, 0x3ac4, 0x3ac9, 0x3ad0, 0x3af5, 0x3af8,
    0x3b01, 0x3b14, 0x3b19, 0x3b1c, 0x3b42, 0x3b68, 0x3b71, 0x3b80, 0x3c01, 0x3c04,
    0x3c82, 0x3cd0, 0x3d01, 0x3d20, 0x3d25, 0x3db4, 0x3e21, 0x3e34, 0x4001, 0x40ac,
    0x40fd, 0x4102, 0x4128, 0x4141, 0x4158, 0x4169, 0x4178, 0x4185, 0x4188, 0x4195,
    0x419c, 0x41b9, 0x41c4, 0x41d5, 0x4208, 0x4239, 0x423c, 0x4242, 0x4268, 0x4281,
    0x4318, 0x431d, 0x4320, 0x4335, 0x4338, 0x4341, 0x43ec, 0x43f1, 0x4924, 0x4929,
    0x4938, 0x4941, 0x495c, 0x4961, 0x4964, 0x4969, 0x4978, 0x4981, 0x4a24, 0x4a29,
    0x4a38, 0x4a41, 0x4ac4, 0x4ac9, 0x4ad8, 0x4ae1, 0x4afc, 0x4b01, 0x4b04, 0x4b09,
    0x4b18, 0x4b21, 0x4b5c, 0x4b61, 0x4c44, 0x4c49, 0x4c58, 0x4c61, 0x4d6c, 0x4da6,
    0x4df4, 0x4e01, 0x4e40, 0x4e81, 0x4fd8, 0x4fe1, 0x4ff8, 0x5005, 0x59b4, 0x59bd,
    0x5a03, 0x5a05, 0x5a6c, 0x5a81, 0x5bac, 0x5bba, 0x5bc5, 0x5be4, 0x5c01, 0x5c48,
    0x5c7d, 0x5cc8, 0x5d01, 0x5d48, 0x5d81, 0x5db4, 0x5db9, 0x5dc4, 0x5e01, 0x5ed0,
    0x5f5d, 0x5f60, 0x5f71, 0x5f74, 0x5f82, 0x5fa8, 0x5fc2, 0x5fe8, 0x6042, 0x6068,
    0x6081, 0x61e4, 0x6201, 0x6214, 0x621d, 0x62a4, 0x62a9, 0x62ac, 0x62c1, 0x63d8,
    0x6401, 0x647c, 0x651a, 0x6541, 0x65b8, 0x65c1, 0x65d4, 0x6601, 0x66b0, 0x66c1,
    0x6728, 0x6742, 0x676c, 0x6801, 0x685c, 0x6881, 0x6954, 0x6a02, 0x6a28, 0x6a42,
    0x6a68, 0x6a9d, 0x6aa0, 0x6c15, 0x6cd0, 0x6d15, 0x6d34, 0x6d42, 0x6d68, 0x6e0d,
    0x6e84, 0x6eb9, 0x6ec2, 0x6ee9, 0x6f98, 0x7001, 0x7090, 0x7102, 0x7128, 0x7135,
    0x7142, 0x7169, 0x71f8, 0x7201, 0x7224, 0x7241, 0x72ec, 0x72f5, 0x7300, 0x73a5,
    0x73b4, 0x73b9, 0x73d0, 0x73d5, 0x73dc, 0x73e9, 0x73ec, 0x7401, 0x7700, 0x7801,
    0x7c58, 0x7c61, 0x7c78, 0x7c81, 0x7d18, 0x7d21, 0x7d38, 0x7d41, 0x7d60, 0x7d65,
    0x7d68, 0x7d6d, 0x7d70, 0x7d75, 0x7d78, 0x7d7d, 0x7df8, 0x7e01, 0x7ed4, 0x7ed9,
    0x7ef4, 0x7ef9, 0x7efc, 0x7f09, 0x7f14, 0x7f19, 0x7f34, 0x7f41, 0x7f50, 0x7f59,
    0x7f70, 0x7f81, 0x7fb4, 0x7fc9, 0x7fd4, 0x7fd9, 0x7ff4, 0x8003, 0x802c, 0x80a3,
    0x80a8, 0x80bf, 0x80c0, 0x817f, 0x8180, 0x81c2, 0x81c5, 0x81c8, 0x81d2, 0x81e8,
    0x81fd, 0x8202, 0x8228, 0x8241, 0x8274, 0x8409, 0x840c, 0x841d, 0x8420, 0x8429,
    0x8450, 0x8455, 0x8458, 0x8465, 0x8478, 0x8491, 0x8494, 0x8499, 0x849c, 0x84a1,
    0x84a4, 0x84a9, 0x84b8, 0x84bd, 0x84e8, 0x84f1, 0x8500, 0x8515, 0x8528, 0x8539,
    0x853c, 0x8542, 0x860d, 0x8616, 0x8628, 0x9182, 0x9270, 0x93aa, 0x9400, 0x9dda,
    0x9e50, 0xb001, 0xb394, 0xb3ad, 0xb3bc, 0xb3c9, 0xb3d0, 0xb3f6, 0xb3f8, 0xb401,
    0xb498, 0xb49d, 0xb4a0, 0xb4b5, 0xb4b8, 0xb4c1, 0xb5a0, 0xb5bd, 0xb5c0, 0xb601,
    0xb65c, 0xb681, 0xb69c, 0xb6a1, 0xb6bc, 0xb6c1, 0xb6dc, 0xb6e1, 0xb6fc, 0xb701,
    0xb71c, 0xb721, 0xb73c, 0xb741, 0xb75c, 0xb761, 0xb77c, 0xb8bd, 0xb8c0, 0xc003,
    0xc004, 0xc015, 0xc01e, 0xc020, 0xc086, 0xc0a8, 0xc0c5, 0xc0d8, 0xc0e2, 0xc0ed,
    0xc0f4, 0xc105, 0xc25c, 0xc275, 0xc280, 0xc285, 0xc3ec, 0xc3f1, 0xc400, 0xc415,
    0xc4c0, 0xc4c5, 0xc63c, 0xc64a, 0xc658, 0xc681, 0xc700, 0xc7c1, 0xc800, 0xc882,
    0xc8a8, 0xc922, 0xc940, 0xc946, 0xc980, 0xca02, 0xca28, 0xcac6, 0xcb00, 0xd001,
    0x13700, 0x13801, 0x29234, 0x29341, 0x293f8, 0x29401, 0x29834, 0x29841, 0x29882, 0x298a9,
    0x298b0, 0x29901, 0x299bc, 0x299fd, 0x29a78, 0x29a81, 0x29b9a, 0x29bc0, 0x29c5d, 0x29c80,
    0x29c89, 0x29e24, 0x29e2d, 0x29f2c, 0x29f41, 0x29f48, 0x29f4d, 0x29f50, 0x29f55, 0x29f68,
    0x29fc9, 0x2a008, 0x2a00d, 0x2a018, 0x2a01d, 0x2a02c, 0x2a031, 0x2a08c, 0x2a0c2, 0x2a0d8,
    0x2a101, 0x2a1d0, 0x2a209, 0x2a2d0, 0x2a342, 0x2a368, 0x2a3c9, 0x2a3e0, 0x2a3ed, 0x2a3f0,
    0x2a3f5, 0x2a3fc, 0x2a402, 0x2a429, 0x2a498, 0x2a4c1, 0x2a51c, 0x2a581, 0x2a5f4, 0x2a611,
    0x2a6cc, 0x2a73d, 0x2a742, 0x2a768, 0x2a781, 0x2a794, 0x2a799, 0x2a7c2, 0x2a7e9, 0x2a7fc,
    0x2a801, 0x2a8a4, 0x2a901, 0x2a90c, 0x2a911, 0x2a930, 0x2a942, 0x2a968, 0x2a981, 0x2a9dc,
    0x2a9e9, 0x2a9ec, 0x2a9f9, 0x2aac0, 0x2aac5, 0x2aac8, 0x2aad5, 0x2aadc, 0x2aae5, 0x2aaf8,
    0x2ab01, 0x2ab04, 0x2ab09, 0x2ab0c, 0x2ab6d, 0x2ab78, 0x2ab81, 0x2abac, 0x2abc9, 0x2abd4,
    0x2ac05, 0x2ac1c, 0x2ac25, 0x2ac3c, 0x2ac45, 0x2ac5c, 0x2ac81, 0x2ac9c, 0x2aca1, 0x2acbc,
    0x2acc1, 0x2ad6c, 0x2ad71, 0x2ada8, 0x2adc1, 0x2af8c, 0x2afc2, 0x2afe8, 0x2b001, 0x35e90,
    0x35ec1, 0x35f1c, 0x35f2d, 0x35ff0, 0x3e401, 0x3e9b8, 0x3e9c1, 0x3eb68, 0x3ec01, 0x3ec1c,
    0x3ec4d, 0x3ec60, 0x3ec75, 0x3ec78, 0x3ec7d, 0x3eca4, 0x3eca9, 0x3ecdc, 0x3ece1, 0x3ecf4,
    0x3ecf9, 0x3ecfc, 0x3ed01, 0x3ed08, 0x3ed0d, 0x3ed14, 0x3ed19, 0x3eec8, 0x3ef4d, 0x3f4f8,
    0x3f541, 0x3f640, 0x3f649, 0x3f720, 0x3f7c1, 0x3f7f0, 0x3f9c1, 0x3f9d4, 0x3f9d9, 0x3fbf4,
    0x3fc42, 0x3fc68, 0x3fc85, 0x3fcec, 0x3fd05, 0x3fd6c, 0x3fd99, 0x3fefc, 0x3ff09, 0x3ff20,
    0x3ff29, 0x3ff40, 0x3ff49, 0x3ff60, 0x3ff69, 0x3ff74, 0x40001, 0x40030, 0x40035, 0x4009c,
    0x400a1, 0x400ec, 0x400f1, 0x400f8, 0x400fd, 0x40138, 0x40141, 0x40178, 0x40201, 0x403ec,
    0x4041e, 0x404d0, 0x40502, 0x405e4, 0x4062a, 0x40630, 0x40a01, 0x40a74, 0x40a81, 0x40b44,
    0x40b86, 0x40bf0, 0x40c01, 0x40c82, 0x40c90, 0x40cb5, 0x40d06, 0x40d09, 0x40d2a, 0x40d2c,
    0x40d41, 0x40dd8, 0x40e01, 0x40e78, 0x40e81, 0x40f10, 0x40f21, 0x40f40, 0x40f46, 0x40f58,
    0x41001, 0x41278, 0x41282, 0x412a8, 0x412c1, 0x41350, 0x41361, 0x413f0, 0x41401, 0x414a0,
    0x414c1, 0x41590, 0x415c1, 0x415ec, 0x415f1, 0x4162c, 0x41631, 0x4164c, 0x41651, 0x41658,
    0x4165d, 0x41688, 0x4168d, 0x416c8, 0x416cd, 0x416e8, 0x416ed, 0x416f4, 0x41801, 0x41cdc,
    0x41d01, 0x41d58, 0x41d81, 0x41da0, 0x41e01, 0x41e18, 0x41e1d, 0x41ec4, 0x41ec9, 0x41eec,
    0x42001, 0x42018, 0x42021, 0x42024, 0x42029, 0x420d8, 0x420dd, 0x420e4, 0x420f1, 0x420f4,
    0x420fd, 0x42158, 0x42162, 0x42181, 0x421dc, 0x421e6, 0x42201, 0x4227c, 0x4229e, 0x422c0,
    0x42381, 0x423cc, 0x423d1, 0x423d8, 0x423ee, 0x42401, 0x4245a, 0x42470, 0x42481, 0x424e8,
    0x42601, 0x426e0, 0x426f2, 0x426f9, 0x42702, 0x42740, 0x4274a, 0x42801, 0x42804, 0x42841,
    0x42850, 0x42855, 0x42860, 0x42865, 0x428d8, 0x42902, 0x42924, 0x42981, 0x429f6, 0x429fc,
    0x42a01, 0x42a76, 0x42a80, 0x42b01, 0x42b20, 0x42b25, 0x42b94, 0x42bae, 0x42bc0, 0x42c01,
    0x42cd8, 0x42d01, 0x42d58, 0x42d62, 0x42d81, 0x42dcc, 0x42de2, 0x42e01, 0x42e48, 0x42ea6,
    0x42ec0, 0x43001, 0x43124, 0x43201, 0x432cc, 0x43301, 0x433cc, 0x433ea, 0x43401, 0x43490,
    0x434c2, 0x434e8, 0x43982, 0x439fc, 0x43a01, 0x43aa8, 0x43ac1, 0x43ac8, 0x43c01, 0x43c76,
    0x43c9d, 0x43ca0, 0x43cc1, 0x43d18, 0x43d46, 0x43d54, 0x43dc1, 0x43e08, 0x43ec1, 0x43f16,
    0x43f30, 0x43f81, 0x43fdc, 0x4400d, 0x440e0, 0x4414a, 0x441c0, 0x441c5, 0x441cc, 0x441d5,
    0x441d8, 0x4420d, 0x442c0, 0x44341, 0x443a4, 0x443c2, 0x443e8, 0x4440d, 0x4449c, 0x444da,
    0x44500, 0x44511, 0x44514, 0x4451d, 0x44520, 0x44541, 0x445cc, 0x445d9, 0x445dc, 0x4460d,
    0x446cc, 0x44705, 0x44714, 0x44742, 0x44769, 0x4476c, 0x44771, 0x44774, 0x44786, 0x447d4,
    0x44801, 0x44848, 0x4484d, 0x448b0, 0x44a01, 0x44a1c, 0x44a21, 0x44a24, 0x44a29, 0x44a38,
    0x44a3d, 0x44a78, 0x44a7d, 0x44aa4, 0x44ac1, 0x44b7c, 0x44bc2, 0x44be8, 0x44c15, 0x44c34,
    0x44c3d, 0x44c44, 0x44c4d, 0x44ca4, 0x44ca9, 0x44cc4, 0x44cc9, 0x44cd0, 0x44cd5, 0x44ce8,
    0x44cf5, 0x44cf8, 0x44d41, 0x44d44, 0x44d75, 0x44d88, 0x45001, 0x450d4, 0x4511d, 0x4512c,
    0x45142, 0x45168, 0x4517d, 0x45188, 0x45201, 0x452c0, 0x45311, 0x45318, 0x4531d, 0x45320,
    0x45342, 0x45368, 0x45601, 0x456bc, 0x45761, 0x45770, 0x45801, 0x458c0, 0x45911, 0x45914,
    0x45942, 0x45968, 0x45a01, 0x45aac, 0x45ae1, 0x45ae4, 0x45b02, 0x45b28, 0x45c01, 0x45c6c,
    0x45cc2, 0x45cf0, 0x45d01, 0x45d1c, 0x46001, 0x460b0, 0x46281, 0x46382, 0x463cc, 0x463fd,
    0x4641c, 0x46425, 0x46428, 0x46431, 0x46450, 0x46455, 0x4645c, 0x46461, 0x464c0, 0x464fd,
    0x46500, 0x46505, 0x46508, 0x46542, 0x46568, 0x46681, 0x466a0, 0x466a9, 0x46744, 0x46785,
    0x46788, 0x4678d, 0x46790, 0x46801, 0x46804, 0x4682d, 0x468cc, 0x468e9, 0x468ec, 0x46941,
    0x46944, 0x46971, 0x46a28, 0x46a75, 0x46a78, 0x46ac1, 0x46be4, 0x47001, 0x47024, 0x47029,
    0x470bc, 0x47101, 0x47104, 0x47142, 0x471b4, 0x471c9, 0x47240, 0x47401, 0x4741c, 0x47421,
    0x47428, 0x4742d, 0x474c4, 0x47519, 0x4751c, 0x47542, 0x47568, 0x47581, 0x47598, 0x4759d,
    0x475a4, 0x475a9, 0x47628, 0x47661, 0x47664, 0x47682, 0x476a8, 0x47b81, 0x47bcc, 0x47ec1,
    0x47ec4, 0x47f02, 0x47f54, 0x48001, 0x48e68, 0x49002, 0x491bc, 0x49201, 0x49510, 0x4be41,
    0x4bfc4, 0x4c001, 0x4d0bc, 0x51001, 0x5191c, 0x5a001, 0x5a8e4, 0x5a901, 0x5a97c, 0x5a982,
    0x5a9a8, 0x5a9c1, 0x5aafc, 0x5ab02, 0x5ab28, 0x5ab41, 0x5abb8, 0x5ac01, 0x5acc0, 0x5ad01,
    0x5ad10, 0x5ad42, 0x5ad68, 0x5ad6e, 0x5ad88, 0x5ad8d, 0x5ade0, 0x5adf5, 0x5ae40, 0x5b901,
    0x5ba02, 0x5ba5c, 0x5bc01, 0x5bd2c, 0x5bd41, 0x5bd44, 0x5be4d, 0x5be80, 0x5bf81, 0x5bf88,
    0x5bf8d, 0x5bf90, 0x5c001, 0x61fe0, 0x62001, 0x63358, 0x63401, 0x63424, 0x6bfc1, 0x6bfd0,
    0x6bfd5, 0x6bff0, 0x6bff5, 0x6bffc, 0x6c001, 0x6c48c, 0x6c541, 0x6c54c, 0x6c591, 0x6c5a0,
    0x6c5c1, 0x6cbf0, 0x6f001, 0x6f1ac, 0x6f1c1, 0x6f1f4, 0x6f201, 0x6f224, 0x6f241, 0x6f268,
    0x74b82, 0x74bd0, 0x74d82, 0x74de4, 0x75001, 0x75154, 0x75159, 0x75274, 0x75279, 0x75280,
    0x75289, 0x7528c, 0x75295, 0x7529c, 0x752a5, 0x752b4, 0x752b9, 0x752e8, 0x752ed, 0x752f0,
    0x752f5, 0x75310, 0x75315, 0x75418, 0x7541d, 0x7542c, 0x75435, 0x75454, 0x75459, 0x75474,
    0x75479, 0x754e8, 0x754ed, 0x754fc, 0x75501, 0x75514, 0x75519, 0x7551c, 0x75529, 0x75544,
    0x75549, 0x75a98, 0x75aa1, 0x75b04, 0x75b09, 0x75b6c, 0x75b71, 0x75bec, 0x75bf1, 0x75c54,
    0x75c59, 0x75cd4, 0x75cd9, 0x75d3c, 0x75d41, 0x75dbc, 0x75dc1, 0x75e24, 0x75e29, 0x75ea4,
    0x75ea9, 0x75f0c, 0x75f11, 0x75f30, 0x75f3a, 0x76000, 0x77c01, 0x77c7c, 0x78401, 0x784b4,
    0x784dd, 0x784f8, 0x78502, 0x78528, 0x78539, 0x7853c, 0x78a41, 0x78ab8, 0x78b01, 0x78bb0,
    0x78bc2, 0x78be8, 0x79f81, 0x79f9c, 0x79fa1, 0x79fb0, 0x79fb5, 0x79fbc, 0x79fc1, 0x79ffc,
    0x7a001, 0x7a314, 0x7a31e, 0x7a340, 0x7a401, 0x7a510, 0x7a52d, 0x7a530, 0x7a542, 0x7a568,
    0x7b1c6, 0x7b2b0, 0x7b2b6, 0x7b2c0, 0x7b2c6, 0x7b2d4, 0x7b406, 0x7b4b8, 0x7b4be, 0x7b4f8,
    0x7b801, 0x7b810, 0x7b815, 0x7b880, 0x7b885, 0x7b88c, 0x7b891, 0x7b894, 0x7b89d, 0x7b8a0,
    0x7b8a5, 0x7b8cc, 0x7b8d1, 0x7b8e0, 0x7b8e5, 0x7b8e8, 0x7b8ed, 0x7b8f0, 0x7b909, 0x7b90c,
    0x7b91d, 0x7b920, 0x7b925, 0x7b928, 0x7b92d, 0x7b930, 0x7b935, 0x7b940, 0x7b945, 0x7b94c,
    0x7b951, 0x7b954, 0x7b95d, 0x7b960, 0x7b965, 0x7b968, 0x7b96d, 0x7b970, 0x7b975, 0x7b978,
    0x7b97d, 0x7b980, 0x7b985, 0x7b98c, 0x7b991, 0x7b994, 0x7b99d, 0x7b9ac, 0x7b9b1, 0x7b9cc,
    0x7b9d1, 0x7b9e0, 0x7b9e5, 0x7b9f4, 0x7b9f9, 0x7b9fc, 0x7ba01, 0x7ba28, 0x7ba2d, 0x7ba70,
    0x7ba85, 0x7ba90, 0x7ba95, 0x7baa8, 0x7baad, 0x7baf0, 0x7c402, 0x7c434, 0x7efc2, 0x7efe8,
    0x80001, 0xa9b80, 0xa9c01, 0xadce4, 0xadd01, 0xae078, 0xae081, 0xb3a88, 0xb3ac1, 0xbaf84,
    0xbe001, 0xbe878, 0xc0001, 0xc4d2c,
};
static const uint8_t gpt2__ascii_class[128] = {
    0,0,0,0,0,0,0,0,0,3,3,3,3,3,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,
    3,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,2,2,2,2,2,2,2,2,2,2,0,0,0,0,0,0,
    0,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,0,0,0,0,0,
    0,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,0,0,0,0,0,
};

/* ---- src/model/tokenizer.h ---- */
/* Tokenizers: GPT-2's byte-level BPE (exactly OpenAI's encoder.py / tiktoken "gpt2") and nanoGPT's
   character vocabulary (meta.pkl). See docs/TOKENIZER.md.

   BPE encoding is encoder.py's algorithm:
     1. split the text with the pattern
          's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
        (matched by hand below, with the regex's exact leftmost-alternative semantics);
     2. map each word's UTF-8 bytes to their single-byte tokens;
     3. repeatedly take the adjacent pair with the lowest merge rank and merge all its
        occurrences left to right, until no pair has a rank.
   Text that is not valid UTF-8 is still encoded: each byte that does not start a valid
   sequence counts as one character of class OTHER (punctuation-like), so any bytes round-trip. */

/* ---- UTF-8 ------------------------------------------------------------------------------ */
#define GPT2__INVALID_CP 0xFFFFFFFFu

/* Decodes the code point at s[0..n) (n >= 1) into *cp and returns its length in bytes. A byte that
   does not begin a valid, complete, shortest-form sequence (no surrogates, <= U+10FFFF) gives
   GPT2__INVALID_CP and length 1. Never reads past s[n-1]. */
static inline size_t gpt2__utf8_decode(const unsigned char* s, size_t n, uint32_t* cp) {
    unsigned b0 = s[0];
    if (b0 < 0x80) {
        *cp = b0;
        return 1;
    }
    size_t len;
    unsigned lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    uint32_t c;
    if (b0 >= 0xC2 && b0 <= 0xDF) {
        len = 2;
        c = b0 & 0x1F;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
        len = 3;
        c = b0 & 0x0F;
        if (b0 == 0xE0) lo = 0xA0;      /* overlong */
        else if (b0 == 0xED) hi = 0x9F; /* surrogates */
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        len = 4;
        c = b0 & 0x07;
        if (b0 == 0xF0) lo = 0x90;      /* overlong */
        else if (b0 == 0xF4) hi = 0x8F; /* > U+10FFFF */
    } else {
        *cp = GPT2__INVALID_CP;
        return 1;
    }
    if (n < len || s[1] < lo || s[1] > hi) {
        *cp = GPT2__INVALID_CP;
        return 1;
    }
    c = (c << 6) | (s[1] & 0x3F);
    for (size_t k = 2; k < len; k++) {
        if ((s[k] & 0xC0) != 0x80) {
            *cp = GPT2__INVALID_CP;
            return 1;
        }
        c = (c << 6) | (s[k] & 0x3F);
    }
    *cp = c;
    return len;
}

/* Class of a code point for the pre-tokenizer (GPT2__CC_*); invalid bytes are OTHER. */
static inline int gpt2__char_class(uint32_t cp) {
    if (cp < 128) return gpt2__ascii_class[cp];
    if (cp > 0x10FFFF) return GPT2__CC_OTHER;
    const uint32_t* end = gpt2__unicode_ranges + sizeof gpt2__unicode_ranges / sizeof gpt2__unicode_ranges[0];
    const uint32_t* r = std::upper_bound(gpt2__unicode_ranges, end, (cp << 2) | 3u);
    return (int)(r[-1] & 3u);
}

/* Streaming decoder: bytes in, complete UTF-8 characters out. */
struct gpt2__utf8_stream {
    unsigned char held[4] = {0, 0, 0, 0};
    size_t n_held = 0;
};

/* Length of the incomplete-but-valid character at the end of b[0..m) (0..3), i.e. the bytes that
   a later byte could still complete. */
static inline size_t gpt2__utf8_incomplete_tail(const unsigned char* b, size_t m) {
    for (size_t back = 1; back <= 3 && back <= m; back++) {
        unsigned c = b[m - back];
        if ((c & 0xC0) == 0x80) continue; /* continuation: keep looking for the lead byte */
        size_t need = (c >= 0xC2 && c <= 0xDF) ? 2 : (c >= 0xE0 && c <= 0xEF) ? 3 : (c >= 0xF0 && c <= 0xF4) ? 4 : 0;
        if (need <= back) return 0; /* ASCII, invalid lead, or a complete/overlong sequence */
        if (back >= 2) {
            unsigned s1 = b[m - back + 1];
            unsigned lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80;
            unsigned hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
            if (s1 < lo || s1 > hi) return 0; /* can never become valid: pass it through */
        }
        return back; /* the bytes after the lead are continuations (checked by the loop) */
    }
    return 0;
}

/* Appends the complete UTF-8 prefix of (held bytes + bytes) to *out and holds an incomplete valid
   tail (at most 3 bytes). Invalid sequences are passed through as they are. */
static inline void gpt2__utf8_stream_push(gpt2__utf8_stream* s, std::string_view bytes, gpt2__string* out) {
    size_t start = out->size();
    out->append(reinterpret_cast<const char*>(s->held), s->n_held);
    out->append(bytes.data(), bytes.size());
    const unsigned char* b = reinterpret_cast<const unsigned char*>(out->data()) + start;
    size_t m = out->size() - start;
    size_t tail = gpt2__utf8_incomplete_tail(b, m);
    std::memcpy(s->held, b + m - tail, tail);
    s->n_held = tail;
    out->resize(out->size() - tail);
}

/* End of the stream: emits whatever is held. */
static inline void gpt2__utf8_stream_flush(gpt2__utf8_stream* s, gpt2__string* out) {
    out->append(reinterpret_cast<const char*>(s->held), s->n_held);
    s->n_held = 0;
}

/* ---- Pre-tokenizer ---------------------------------------------------------------------- */
/* End of the pre-token (regex match) that starts at s[i] (i < n). */
static inline size_t gpt2__pretoken_end(const unsigned char* s, size_t n, size_t i) {
    /* 's|'t|'re|'ve|'m|'ll|'d  (case-sensitive) */
    if (s[i] == '\'' && i + 1 < n) {
        unsigned char a = s[i + 1];
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
        if (i + 2 < n) {
            unsigned char b = s[i + 2];
            if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
        }
    }
    uint32_t cp;
    size_t j = i + gpt2__utf8_decode(s + i, n - i, &cp);
    int cls = gpt2__char_class(cp);
    if (cp == ' ' && j < n) {
        /* ' ?\p{L}+' , ' ?\p{N}+' , ' ?[^\s\p{L}\p{N}]+' with the optional space */
        uint32_t cp2;
        size_t j2 = j + gpt2__utf8_decode(s + j, n - j, &cp2);
        int cls2 = gpt2__char_class(cp2);
        if (cls2 != GPT2__CC_SPACE) {
            cls = cls2;
            j = j2;
        }
    }
    if (cls != GPT2__CC_SPACE) {
        while (j < n) {
            size_t l;
            if (s[j] < 128) {
                if (gpt2__ascii_class[s[j]] != cls) break;
                l = 1;
            } else {
                l = gpt2__utf8_decode(s + j, n - j, &cp);
                if (gpt2__char_class(cp) != cls) break;
            }
            j += l;
        }
        return j;
    }
    /* A run of whitespace. '\s+(?!\S)': at the end of the text, all of it; before a non-space,
       all but its last character (which then joins the next word, e.g. " world"), unless that
       leaves nothing, in which case '\s+' takes the single character. */
    size_t last = i;
    while (j < n) {
        size_t l = gpt2__utf8_decode(s + j, n - j, &cp);
        if (gpt2__char_class(cp) != GPT2__CC_SPACE) break;
        last = j;
        j += l;
    }
    if (j == n || last == i) return j;
    return last;
}

/* ---- Tokenizer -------------------------------------------------------------------------- */
/* One slot of the merge table: open addressing keyed by the pair of token ids. */
struct gpt2__merge_slot {
    uint64_t key; /* (left << 32) | right, or GPT2__EMPTY_PAIR */
    int32_t rank;
    int32_t result;
};
#define GPT2__EMPTY_PAIR 0xFFFFFFFFFFFFFFFFull

static inline uint64_t gpt2__mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

/* Word -> ids cache, shared by every thread encoding with one tokenizer. Sharded by hash, each
   shard behind its own mutex; a full shard is simply emptied (words repeat, so it refills with
   the common ones). Only short words are cached. */
#define GPT2__CACHE_SHARDS 16
#define GPT2__CACHE_SLOTS 8192 /* per shard; at most half are used */
#define GPT2__CACHE_MAX_WORD 64

struct gpt2__cache_entry {
    uint64_t hash;
    uint32_t key_offset, ids_offset;
    uint16_t key_len, n_ids;
};

struct gpt2__cache_shard {
    std::mutex mutex;
    gpt2__vector<uint32_t> slots; /* entry index + 1, or 0 */
    gpt2__vector<gpt2__cache_entry> entries;
    gpt2__string keys;
    gpt2__vector<int32_t> ids;
};

struct gpt2__bpe_cache {
    gpt2__cache_shard shards[GPT2__CACHE_SHARDS];
};

static inline uint64_t gpt2__hash_bytes(const unsigned char* s, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
    while (n >= 8) {
        uint64_t w;
        std::memcpy(&w, s, 8);
        h = gpt2__mix64(h ^ w) * 0x9E3779B97F4A7C15ull;
        s += 8;
        n -= 8;
    }
    uint64_t w = 0;
    std::memcpy(&w, s, n);
    return gpt2__mix64(h ^ w ^ ((uint64_t)n << 56)); /* uint64_t: size_t is 32 bits on wasm32 */
}

struct gpt2__tokenizer {
    gpt2_tokenizer_kind kind = GPT2_TOKENIZER_NONE;
    int32_t eos = -1;
    gpt2__string bytes;             /* every token's bytes, concatenated */
    gpt2__vector<uint32_t> offsets; /* token i is bytes[offsets[i], offsets[i + 1]) */
    /* char vocabulary */
    int32_t ascii_id[128];
    gpt2__vector<uint64_t> char_ids; /* (code point << 32) | id for code points >= 128, sorted */
    /* BPE */
    int32_t byte_id[256];                 /* token of each single byte */
    gpt2__vector<gpt2__merge_slot> merges; /* power-of-two size */
    gpt2__bpe_cache* cache = nullptr;
    bool use_cache = true; /* the benchmark turns it off to measure what it brings */

    gpt2__tokenizer() { reset_tables(); }
    ~gpt2__tokenizer();
    gpt2__tokenizer(const gpt2__tokenizer&) = delete;
    gpt2__tokenizer& operator=(const gpt2__tokenizer&) = delete;
    gpt2__tokenizer(gpt2__tokenizer&& o) noexcept { *this = std::move(o); }
    gpt2__tokenizer& operator=(gpt2__tokenizer&& o) noexcept;
    void reset_tables() {
        for (int32_t& v : ascii_id) v = -1;
        for (int32_t& v : byte_id) v = -1;
    }
};

static inline void gpt2__tokenizer_free(gpt2__tokenizer* tok) {
    if (tok->cache) {
        tok->cache->~gpt2__bpe_cache();
        GPT2_FREE(tok->cache);
    }
    tok->cache = nullptr;
    tok->kind = GPT2_TOKENIZER_NONE;
    tok->eos = -1;
    tok->bytes = gpt2__string();
    tok->offsets = gpt2__vector<uint32_t>();
    tok->char_ids = gpt2__vector<uint64_t>();
    tok->merges = gpt2__vector<gpt2__merge_slot>();
    tok->reset_tables();
}

inline gpt2__tokenizer::~gpt2__tokenizer() { gpt2__tokenizer_free(this); }

inline gpt2__tokenizer& gpt2__tokenizer::operator=(gpt2__tokenizer&& o) noexcept {
    if (this != &o) {
        gpt2__tokenizer_free(this);
        kind = o.kind;
        eos = o.eos;
        bytes = std::move(o.bytes);
        offsets = std::move(o.offsets);
        std::memcpy(ascii_id, o.ascii_id, sizeof ascii_id);
        char_ids = std::move(o.char_ids);
        std::memcpy(byte_id, o.byte_id, sizeof byte_id);
        merges = std::move(o.merges);
        cache = o.cache;
        use_cache = o.use_cache;
        o.cache = nullptr;
        gpt2__tokenizer_free(&o);
    }
    return *this;
}

static inline size_t gpt2__tokenizer_size(const gpt2__tokenizer* tok) {
    return tok->offsets.empty() ? 0 : tok->offsets.size() - 1;
}

/* Exact bytes of token `id` (0 <= id < size). */
static inline std::string_view gpt2__tokenizer_token_bytes(const gpt2__tokenizer* tok, int32_t id) {
    GPT2_ASSERT(id >= 0 && (size_t)id < gpt2__tokenizer_size(tok));
    uint32_t a = tok->offsets[(size_t)id], b = tok->offsets[(size_t)id + 1];
    return std::string_view(tok->bytes.data() + a, b - a);
}

/* A printable, shortened rendering of an init entry for error messages. */
#define GPT2__SHOW(sv) (int)((sv).size() < 40 ? (sv).size() : 40), (sv).data()

/* ---- Character vocabulary --------------------------------------------------------------- */
static inline gpt2_result gpt2__tokenizer_init_char(gpt2__tokenizer* tok, const std::string_view* chars, size_t n,
                                             gpt2_error* err) {
    gpt2__tokenizer_free(tok);
    if (n == 0 || n > (size_t)INT32_MAX) {
        return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "character vocabulary: %zu entries (expected 1 to %d)", n,
                          INT32_MAX);
    }
    gpt2__tokenizer t;
    t.kind = GPT2_TOKENIZER_CHAR;
    t.offsets.reserve(n + 1);
    t.offsets.push_back(0);
    for (size_t i = 0; i < n; i++) {
        std::string_view c = chars[i];
        uint32_t cp = GPT2__INVALID_CP;
        size_t len = c.empty() ? 0 : gpt2__utf8_decode(reinterpret_cast<const unsigned char*>(c.data()), c.size(), &cp);
        if (c.empty() || cp == GPT2__INVALID_CP || len != c.size()) {
            return gpt2__fail(err, GPT2_ERROR_BAD_FILE,
                              "character vocabulary entry %zu (\"%.*s\", %zu bytes) is not one UTF-8 character", i,
                              GPT2__SHOW(c), c.size());
        }
        if (cp < 128) {
            if (t.ascii_id[cp] >= 0) {
                return gpt2__fail(err, GPT2_ERROR_BAD_FILE,
                                  "character vocabulary entry %zu (U+%04X) duplicates entry %d", i, (unsigned)cp,
                                  (int)t.ascii_id[cp]);
            }
            t.ascii_id[cp] = (int32_t)i;
        } else {
            t.char_ids.push_back(((uint64_t)cp << 32) | (uint64_t)i);
        }
        t.bytes.append(c.data(), c.size());
        t.offsets.push_back((uint32_t)t.bytes.size());
    }
    std::sort(t.char_ids.begin(), t.char_ids.end());
    for (size_t k = 1; k < t.char_ids.size(); k++) {
        if ((t.char_ids[k] >> 32) == (t.char_ids[k - 1] >> 32)) {
            return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "character vocabulary entry %u (U+%04X) duplicates entry %u",
                              (unsigned)(uint32_t)t.char_ids[k], (unsigned)(t.char_ids[k] >> 32),
                              (unsigned)(uint32_t)t.char_ids[k - 1]);
        }
    }
    *tok = std::move(t);
    return gpt2__ok(err);
}

static inline gpt2_result gpt2__encode_char(const gpt2__tokenizer* tok, const unsigned char* s, size_t n,
                                     gpt2__vector<int32_t>* out, gpt2_error* err) {
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        size_t len = gpt2__utf8_decode(s + i, n - i, &cp);
        int32_t id = -1;
        if (cp == GPT2__INVALID_CP) {
            return gpt2__fail(err, GPT2_ERROR_BAD_TEXT, "invalid UTF-8 byte 0x%02X at byte offset %zu", (unsigned)s[i],
                              i);
        } else if (cp < 128) {
            id = tok->ascii_id[cp];
        } else {
            auto it = std::lower_bound(tok->char_ids.begin(), tok->char_ids.end(), (uint64_t)cp << 32);
            if (it != tok->char_ids.end() && (*it >> 32) == cp) id = (int32_t)(uint32_t)*it;
        }
        if (id < 0) {
            return gpt2__fail(err, GPT2_ERROR_BAD_TEXT,
                              "character U+%04X (\"%.*s\") at byte offset %zu is not in the model's vocabulary",
                              (unsigned)cp, (int)len, reinterpret_cast<const char*>(s + i), i);
        }
        out->push_back(id);
        i += len;
    }
    return GPT2_OK;
}

/* ---- Byte-level BPE --------------------------------------------------------------------- */
/* encoder.py's bytes_to_unicode(): byte b is written as code point byte_char[b]. */
static inline void gpt2__bytes_to_unicode(uint32_t byte_char[256]) {
    uint32_t extra = 0;
    for (uint32_t b = 0; b < 256; b++) {
        bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        byte_char[b] = printable ? b : 256 + extra++;
    }
}

static inline const gpt2__merge_slot* gpt2__find_merge(const gpt2__tokenizer* tok, int32_t a, int32_t b) {
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    size_t mask = tok->merges.size() - 1;
    for (size_t k = (size_t)gpt2__mix64(key) & mask;; k = (k + 1) & mask) {
        const gpt2__merge_slot* slot = &tok->merges[k];
        if (slot->key == key) return slot;
        if (slot->key == GPT2__EMPTY_PAIR) return nullptr;
    }
}

static inline gpt2_result gpt2__tokenizer_init_bpe(gpt2__tokenizer* tok, const std::string_view* tokens, size_t n_tokens,
                                            const std::string_view* merges, size_t n_merges, int32_t eos,
                                            gpt2_error* err) {
    gpt2__tokenizer_free(tok);
    if (n_tokens < 256 || n_tokens > (size_t)INT32_MAX || n_merges > (size_t)INT32_MAX) {
        return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "BPE vocabulary: %zu tokens and %zu merges (expected 256 or more tokens)",
                          n_tokens, n_merges);
    }
    if (eos < -1 || (eos >= 0 && (size_t)eos >= n_tokens)) {
        return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "BPE vocabulary: end-of-text token %d outside 0..%zu", (int)eos,
                          n_tokens - 1);
    }
    uint32_t byte_char[256];
    gpt2__bytes_to_unicode(byte_char);
    int16_t char_byte[324]; /* inverse of byte_char; the alphabet ends at U+0143 */
    for (int16_t& v : char_byte) v = -1;
    for (int b = 0; b < 256; b++) char_byte[byte_char[b]] = (int16_t)b;

    gpt2__tokenizer t;
    t.kind = GPT2_TOKENIZER_BPE;
    t.eos = eos;
    t.offsets.reserve(n_tokens + 1);
    t.offsets.push_back(0);
    using map_alloc = gpt2__allocator<std::pair<const std::string_view, int32_t>>;
    std::unordered_map<std::string_view, int32_t, std::hash<std::string_view>, std::equal_to<std::string_view>,
                       map_alloc>
        ids;
    ids.reserve(n_tokens);
    for (size_t i = 0; i < n_tokens; i++) {
        std::string_view s = tokens[i];
        const unsigned char* u = reinterpret_cast<const unsigned char*>(s.data());
        if (s.empty()) return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "BPE token %zu is empty", i);
        size_t start = t.bytes.size();
        for (size_t k = 0; k < s.size();) {
            uint32_t cp;
            k += gpt2__utf8_decode(u + k, s.size() - k, &cp);
            if (cp >= 324 || char_byte[cp] < 0) {
                return gpt2__fail(err, GPT2_ERROR_BAD_FILE,
                                  "BPE token %zu (\"%.*s\") has a character outside GPT-2's byte alphabet", i,
                                  GPT2__SHOW(s));
            }
            t.bytes.push_back((char)char_byte[cp]);
        }
        if (t.bytes.size() - start == 1) {
            unsigned char b = (unsigned char)t.bytes[start];
            if (t.byte_id[b] < 0) t.byte_id[b] = (int32_t)i;
        }
        t.offsets.push_back((uint32_t)t.bytes.size());
        auto ins = ids.emplace(s, (int32_t)i);
        if (!ins.second) {
            return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "BPE token %zu (\"%.*s\") duplicates token %d", i,
                              GPT2__SHOW(s), (int)ins.first->second);
        }
    }
    for (int b = 0; b < 256; b++) {
        if (t.byte_id[b] < 0) {
            return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "BPE vocabulary has no token for the single byte 0x%02X", b);
        }
    }
    size_t cap = 16;
    while (cap < 2 * n_merges) cap *= 2;
    t.merges.assign(cap, gpt2__merge_slot{GPT2__EMPTY_PAIR, 0, 0});
    gpt2__string joined;
    for (size_t r = 0; r < n_merges; r++) {
        std::string_view m = merges[r];
        size_t sp = m.find(' ');
        if (sp == std::string_view::npos || sp == 0 || sp + 1 == m.size() ||
            m.find(' ', sp + 1) != std::string_view::npos) {
            return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "BPE merge %zu (\"%.*s\") is not two tokens separated by a space",
                              r, GPT2__SHOW(m));
        }
        std::string_view a = m.substr(0, sp), b = m.substr(sp + 1);
        joined.assign(a.data(), a.size());
        joined.append(b.data(), b.size());
        auto ia = ids.find(a), ib = ids.find(b), iab = ids.find(std::string_view(joined.data(), joined.size()));
        if (ia == ids.end() || ib == ids.end()) {
            return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "BPE merge %zu (\"%.*s\"): \"%.*s\" is not a token", r,
                              GPT2__SHOW(m), GPT2__SHOW(ia == ids.end() ? a : b));
        }
        if (iab == ids.end()) {
            return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "BPE merge %zu (\"%.*s\"): the result is not a token", r,
                              GPT2__SHOW(m));
        }
        uint64_t key = ((uint64_t)(uint32_t)ia->second << 32) | (uint32_t)ib->second;
        size_t mask = cap - 1;
        size_t k = (size_t)gpt2__mix64(key) & mask;
        while (t.merges[k].key != GPT2__EMPTY_PAIR && t.merges[k].key != key) k = (k + 1) & mask;
        if (t.merges[k].key == key) {
            return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "BPE merge %zu (\"%.*s\") duplicates merge %d", r, GPT2__SHOW(m),
                              (int)t.merges[k].rank);
        }
        t.merges[k] = gpt2__merge_slot{key, (int32_t)r, iab->second};
    }
    void* mem = GPT2_MALLOC(sizeof(gpt2__bpe_cache));
    if (!mem) return gpt2__fail(err, GPT2_ERROR_OUT_OF_MEMORY, "out of memory for the BPE cache");
    t.cache = new (mem) gpt2__bpe_cache();
    for (gpt2__cache_shard& shard : t.cache->shards) shard.slots.assign(GPT2__CACHE_SLOTS, 0);
    *tok = std::move(t);
    return gpt2__ok(err);
}

/* Scratch memory of one encode call, reused for every word. */
struct gpt2__bpe_scratch {
    gpt2__vector<int32_t> sym;  /* token of each symbol, by original byte position */
    gpt2__vector<int32_t> next; /* linked list of live symbols; -1 ends it */
    gpt2__vector<int32_t> prev;
    gpt2__vector<uint64_t> heap;  /* (rank << 32) | left position; min-heap */
    gpt2__vector<uint32_t> batch; /* positions of the pair being merged */
};

static inline bool gpt2__cache_get(const gpt2__tokenizer* tok, const unsigned char* w, size_t n, uint64_t h,
                            gpt2__vector<int32_t>* out) {
    gpt2__cache_shard& shard = tok->cache->shards[h % GPT2__CACHE_SHARDS];
    std::lock_guard<std::mutex> lock(shard.mutex);
    const size_t mask = GPT2__CACHE_SLOTS - 1;
    for (size_t k = (size_t)(h >> 8) & mask;; k = (k + 1) & mask) {
        uint32_t e = shard.slots[k];
        if (e == 0) return false;
        const gpt2__cache_entry& entry = shard.entries[e - 1];
        if (entry.hash == h && entry.key_len == n && std::memcmp(shard.keys.data() + entry.key_offset, w, n) == 0) {
            const int32_t* ids = shard.ids.data() + entry.ids_offset;
            out->insert(out->end(), ids, ids + entry.n_ids);
            return true;
        }
    }
}

static inline void gpt2__cache_put(const gpt2__tokenizer* tok, const unsigned char* w, size_t n, uint64_t h,
                            const int32_t* ids, size_t n_ids) {
    gpt2__cache_shard& shard = tok->cache->shards[h % GPT2__CACHE_SHARDS];
    std::lock_guard<std::mutex> lock(shard.mutex);
    if (shard.entries.size() >= GPT2__CACHE_SLOTS / 2) { /* full: start over */
        std::fill(shard.slots.begin(), shard.slots.end(), 0u);
        shard.entries.clear();
        shard.keys.clear();
        shard.ids.clear();
    }
    const size_t mask = GPT2__CACHE_SLOTS - 1;
    size_t k = (size_t)(h >> 8) & mask;
    for (;; k = (k + 1) & mask) {
        uint32_t e = shard.slots[k];
        if (e == 0) break;
        const gpt2__cache_entry& entry = shard.entries[e - 1];
        if (entry.hash == h && entry.key_len == n && std::memcmp(shard.keys.data() + entry.key_offset, w, n) == 0) {
            return; /* another thread got there first */
        }
    }
    gpt2__cache_entry entry{h, (uint32_t)shard.keys.size(), (uint32_t)shard.ids.size(), (uint16_t)n, (uint16_t)n_ids};
    shard.keys.append(reinterpret_cast<const char*>(w), n);
    shard.ids.insert(shard.ids.end(), ids, ids + n_ids);
    shard.entries.push_back(entry);
    shard.slots[k] = (uint32_t)shard.entries.size();
}

/* BPE of one pre-token `w` (n >= 1 bytes): appends its ids to *out. */
static inline void gpt2__bpe_word(const gpt2__tokenizer* tok, const unsigned char* w, size_t n, gpt2__bpe_scratch* s,
                           gpt2__vector<int32_t>* out) {
    if (n == 1) {
        out->push_back(tok->byte_id[w[0]]);
        return;
    }
    bool cacheable = tok->use_cache && tok->cache && n <= GPT2__CACHE_MAX_WORD;
    uint64_t h = 0;
    if (cacheable) {
        h = gpt2__hash_bytes(w, n);
        if (gpt2__cache_get(tok, w, n, h, out)) return;
    }
    s->sym.resize(n);
    s->next.resize(n);
    s->prev.resize(n);
    s->heap.clear();
    for (size_t i = 0; i < n; i++) {
        s->sym[i] = tok->byte_id[w[i]];
        s->next[i] = i + 1 < n ? (int32_t)(i + 1) : -1;
        s->prev[i] = (int32_t)i - 1;
    }
    auto push_pair = [&](int32_t left) {
        if (left < 0) return;
        int32_t right = s->next[(size_t)left];
        if (right < 0) return;
        const gpt2__merge_slot* m = gpt2__find_merge(tok, s->sym[(size_t)left], s->sym[(size_t)right]);
        if (!m) return;
        s->heap.push_back(((uint64_t)(uint32_t)m->rank << 32) | (uint32_t)left);
        std::push_heap(s->heap.begin(), s->heap.end(), std::greater<uint64_t>());
    };
    for (size_t i = 0; i + 1 < n; i++) push_pair((int32_t)i);
    while (!s->heap.empty()) {
        /* All queued occurrences of the lowest-ranked pair, merged left to right in one pass as
           encoder.py does (pairs created by this pass wait for the next one). */
        uint32_t rank = (uint32_t)(s->heap.front() >> 32);
        s->batch.clear();
        while (!s->heap.empty() && (uint32_t)(s->heap.front() >> 32) == rank) {
            s->batch.push_back((uint32_t)s->heap.front());
            std::pop_heap(s->heap.begin(), s->heap.end(), std::greater<uint64_t>());
            s->heap.pop_back();
        }
        std::sort(s->batch.begin(), s->batch.end());
        for (uint32_t left : s->batch) {
            int32_t right = s->next[left];
            if (s->sym[left] < 0 || right < 0) continue; /* consumed or last */
            const gpt2__merge_slot* m = gpt2__find_merge(tok, s->sym[left], s->sym[(size_t)right]);
            if (!m || (uint32_t)m->rank != rank) continue; /* stale: the pair has changed */
            s->sym[left] = m->result;
            s->sym[(size_t)right] = -1;
            int32_t after = s->next[(size_t)right];
            s->next[left] = after;
            if (after >= 0) s->prev[(size_t)after] = (int32_t)left;
            push_pair(s->prev[left]);
            push_pair((int32_t)left);
        }
    }
    size_t first = out->size();
    for (int32_t i = 0; i >= 0; i = s->next[(size_t)i]) out->push_back(s->sym[(size_t)i]);
    if (cacheable) gpt2__cache_put(tok, w, n, h, out->data() + first, out->size() - first);
}

static inline void gpt2__encode_bpe_text(const gpt2__tokenizer* tok, const unsigned char* s, size_t n, gpt2__bpe_scratch* scratch,
                                  gpt2__vector<int32_t>* out) {
    for (size_t i = 0; i < n;) {
        size_t end = gpt2__pretoken_end(s, n, i);
        gpt2__bpe_word(tok, s + i, end - i, scratch, out);
        i = end;
    }
}

/* Appends the ids of text[0..len) to *out (nothing on failure). Thread-safe on a const tokenizer.
   With allow_special, "<|endoftext|>" becomes the end-of-text token (BPE with an eos only). */
static inline gpt2_result gpt2__tokenizer_encode(const gpt2__tokenizer* tok, const char* text, size_t len, bool allow_special,
                                          gpt2__vector<int32_t>* out, gpt2_error* err) {
    const unsigned char* s = reinterpret_cast<const unsigned char*>(text);
    if (len > 0 && !text) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "text is NULL");
    size_t start = out->size();
    if (tok->kind == GPT2_TOKENIZER_CHAR) {
        gpt2_result r = gpt2__encode_char(tok, s, len, out, err);
        if (r != GPT2_OK) {
            out->resize(start);
            return r;
        }
        return gpt2__ok(err);
    }
    if (tok->kind != GPT2_TOKENIZER_BPE) {
        return gpt2__fail(err, GPT2_ERROR_NO_VOCABULARY, "the model has no tokenizer; give token ids");
    }
    gpt2__bpe_scratch scratch;
    if (allow_special && tok->eos >= 0) {
        static const char special[] = "<|endoftext|>";
        std::string_view all(text, len);
        size_t i = 0;
        for (;;) {
            size_t at = all.find(special, i, sizeof special - 1);
            size_t seg_end = at == std::string_view::npos ? len : at;
            gpt2__encode_bpe_text(tok, s + i, seg_end - i, &scratch, out);
            if (at == std::string_view::npos) break;
            out->push_back(tok->eos);
            i = at + sizeof special - 1;
        }
    } else {
        gpt2__encode_bpe_text(tok, s, len, &scratch, out);
    }
    return gpt2__ok(err);
}

/* ---- src/model/token_trie.h ---- */
/* The vocabulary as a trie of its tokens' bytes, for the grammar's token masks: a walk visits
   each prefix shared by several tokens once, and leaves a whole subtree the moment its prefix
   cannot continue the text. The nodes are stored in depth-first order, so a walk is a loop over
   an array: node i's subtree is [i, skip[i]); its parent is the last node before it one level up.
   Built once per model, on first use (gpt2_grammar_from_gbnf), and shared by every grammar. */
struct gpt2__token_trie {
    gpt2__vector<uint8_t> byte;    /* the byte that leads from the parent to node i */
    gpt2__vector<uint16_t> depth;  /* 1 for the first byte of a token */
    gpt2__vector<uint32_t> skip;   /* the first node after node i's subtree */
    gpt2__vector<uint32_t> tokens_begin; /* the tokens whose bytes end at node i: */
    gpt2__vector<int32_t> tokens;        /* tokens[tokens_begin[i], tokens_begin[i + 1]) */
    /* 1 when every byte below node i (its subtree but itself) is printable ASCII but '"' and '\\':
       text a JSON string holds as it is, so a walk in a string's body can take the whole subtree
       at once (gpt2__context_tokens_make) */
    gpt2__vector<uint8_t> plain_below;
    uint16_t max_depth = 0;
};

static bool gpt2__plain_byte(uint8_t b) { return b >= 0x20 && b < 0x7F && b != '"' && b != '\\'; }

/* Every token with bytes, but `excluded` (the end-of-text token, which the grammar treats on
   its own; -1 = none). Tokens with no bytes are left out: they would change nothing. */
static void gpt2__token_trie_build(gpt2__token_trie* trie, const gpt2__tokenizer* tok, int32_t excluded) {
    const size_t V = gpt2__tokenizer_size(tok);
    gpt2__vector<int32_t> order;
    for (size_t id = 0; id < V; id++)
        if ((int32_t)id != excluded && !gpt2__tokenizer_token_bytes(tok, (int32_t)id).empty()) order.push_back((int32_t)id);
    std::sort(order.begin(), order.end(), [tok](int32_t a, int32_t b) {
        return gpt2__tokenizer_token_bytes(tok, a) < gpt2__tokenizer_token_bytes(tok, b);
    });
    *trie = gpt2__token_trie();
    gpt2__vector<uint32_t> open; /* the nodes on the path to the last one added, one per depth */
    std::string_view previous;
    for (int32_t id : order) {
        const std::string_view bytes = gpt2__tokenizer_token_bytes(tok, id);
        size_t shared = 0;
        while (shared < bytes.size() && shared < previous.size() && bytes[shared] == previous[shared]) shared++;
        if (shared == bytes.size() && shared == previous.size()) { /* the same bytes as the last token */
            trie->tokens.push_back(id);
            continue;
        }
        for (size_t d = open.size(); d > shared; d--) trie->skip[open[d - 1]] = (uint32_t)trie->byte.size();
        open.resize(shared);
        for (size_t d = shared; d < bytes.size(); d++) {
            open.push_back((uint32_t)trie->byte.size());
            trie->byte.push_back((uint8_t)bytes[d]);
            trie->depth.push_back((uint16_t)std::min<size_t>(d + 1, UINT16_MAX));
            trie->skip.push_back(0);
            trie->tokens_begin.push_back((uint32_t)trie->tokens.size());
        }
        trie->tokens.push_back(id);
        trie->max_depth = std::max(trie->max_depth, trie->depth.back());
        previous = bytes;
    }
    for (uint32_t node : open) trie->skip[node] = (uint32_t)trie->byte.size();
    trie->tokens_begin.push_back((uint32_t)trie->tokens.size());
    /* the bytes that are not plain before each node, counted: a subtree's count is a difference */
    gpt2__vector<uint32_t> not_plain_before(trie->byte.size() + 1, 0);
    for (size_t i = 0; i < trie->byte.size(); i++) not_plain_before[i + 1] = not_plain_before[i] + !gpt2__plain_byte(trie->byte[i]);
    trie->plain_below.resize(trie->byte.size());
    for (size_t i = 0; i < trie->byte.size(); i++) trie->plain_below[i] = not_plain_before[trie->skip[i]] == not_plain_before[i + 1];
}

/* ---- src/model/gguf.h ---- */
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

/* A q8_0 block: one f16 scale, then 32 signed bytes (gpt2__block_q8_0 in cpu/kernels/contract.h). */
static const int gpt2__q8_block_values = 32, gpt2__q8_block_bytes = 34;
/* A q4_0 block: one f16 scale, then 16 bytes of two 4-bit values each (gpt2__block_q4_0). */
static const int gpt2__q4_block_values = 32, gpt2__q4_block_bytes = 18;

/* Size in bytes of `n_elements` of a weight type, laid out in rows of `row_length`; false when
   the type is unknown or the row length does not fit its blocks. */
static bool gpt2__type_row_bytes(uint32_t type, uint64_t row_length, uint64_t* out) {
    switch (type) {
    case GPT2_TYPE_F32: *out = row_length * 4; return true;
    case GPT2_TYPE_F16: case GPT2_TYPE_BF16: *out = row_length * 2; return true;
    case GPT2_TYPE_Q8_0:
        if (row_length % gpt2__q8_block_values != 0) return false;
        *out = row_length / gpt2__q8_block_values * gpt2__q8_block_bytes;
        return true;
    case GPT2_TYPE_Q4_0:
        if (row_length % gpt2__q4_block_values != 0) return false;
        *out = row_length / gpt2__q4_block_values * gpt2__q4_block_bytes;
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
    case GPT2_TYPE_Q4_0: return "q4_0";
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

/* "key 'K' has type T, expected E": the one wording for a key of the wrong type. */
static gpt2_result gpt2__gguf_wrong_type(const gpt2__gguf_kv* kv, const char* expected, gpt2_error* err) {
    const int len = (int)std::min<size_t>(kv->key.size(), 200);
    if (kv->type == GPT2__GGUF_ARRAY)
        return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "key '%.*s' has type array of %s, expected %s", len, kv->key.data(), gpt2__gguf_type_name(kv->array_type), expected);
    return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "key '%.*s' has type %s, expected %s", len, kv->key.data(), gpt2__gguf_type_name(kv->type), expected);
}

static gpt2_result gpt2__gguf_parse(const uint8_t* data, size_t size, gpt2__gguf* out, gpt2_error* err) {
    gpt2__reader r{data, size, 0};
    uint32_t magic;
    if (!gpt2__read_u32(&r, &magic)) return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "file is %zu bytes, too short for a GGUF header", size);
    if (magic == 0x04034b50u) /* "PK\3\4": a zip, as torch.save writes checkpoints */
        return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "not a GGUF file: this is a zip archive, probably a PyTorch checkpoint; convert it with tools/convert.py");
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
            if (kv.type != GPT2__GGUF_UINT32) return gpt2__gguf_wrong_type(&kv, "uint32", err);
            std::memcpy(&alignment, kv.value, 4);
            /* at least 4: float tensors are read in place, and an offset that is a multiple of 1 or 2 could misalign them */
            if (alignment < 4 || (alignment & (alignment - 1)) != 0 || alignment > 65536)
                return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "general.alignment is %u, expected a power of two from 4 to 65536", alignment);
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

/* The key getters share one convention. gpt2__gguf_get_X(g, key, required, [range,] out, err):
   - the key is present with the expected type: *out = its value, GPT2_OK;
   - absent and required: GPT2_ERROR_BAD_FILE "missing key 'K'";
   - absent and optional: GPT2_OK with *out untouched, so the caller's initial value is the default;
   - present with another type: GPT2_ERROR_BAD_FILE "key 'K' has type T, expected E".
   Strings are views into the file. */

/* *kv = the key, or NULL when it is absent and optional. */
static gpt2_result gpt2__gguf_lookup(const gpt2__gguf* g, const char* key, bool required, const gpt2__gguf_kv** kv, gpt2_error* err) {
    *kv = gpt2__gguf_find_kv(g, key);
    if (!*kv && required) return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "missing key '%s'", key);
    return GPT2_OK;
}

/* An integer of any integer type, within [min, max]. */
static gpt2_result gpt2__gguf_get_int(const gpt2__gguf* g, const char* key, bool required, int64_t min, int64_t max, int64_t* out, gpt2_error* err) {
    const gpt2__gguf_kv* kv;
    gpt2_result res = gpt2__gguf_lookup(g, key, required, &kv, err);
    if (res != GPT2_OK || !kv) return res;
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
    default: return gpt2__gguf_wrong_type(kv, "an integer", err);
    }
    if (v < min || v > max)
        return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "key '%s' is %lld, expected %lld to %lld", key, (long long)v, (long long)min, (long long)max);
    *out = v;
    return GPT2_OK;
}

/* float32 (float64 is narrowed). */
static gpt2_result gpt2__gguf_get_float(const gpt2__gguf* g, const char* key, bool required, float* out, gpt2_error* err) {
    const gpt2__gguf_kv* kv;
    gpt2_result res = gpt2__gguf_lookup(g, key, required, &kv, err);
    if (res != GPT2_OK || !kv) return res;
    if (kv->type == GPT2__GGUF_FLOAT32) {
        std::memcpy(out, kv->value, 4);
    } else if (kv->type == GPT2__GGUF_FLOAT64) {
        double d;
        std::memcpy(&d, kv->value, 8);
        *out = (float)d;
    } else {
        return gpt2__gguf_wrong_type(kv, "float32", err);
    }
    return GPT2_OK;
}

static gpt2_result gpt2__gguf_get_string(const gpt2__gguf* g, const char* key, bool required, std::string_view* out, gpt2_error* err) {
    const gpt2__gguf_kv* kv;
    gpt2_result res = gpt2__gguf_lookup(g, key, required, &kv, err);
    if (res != GPT2_OK || !kv) return res;
    if (kv->type != GPT2__GGUF_STRING) return gpt2__gguf_wrong_type(kv, "string", err);
    gpt2__reader r{kv->value, kv->value_size, 0};
    gpt2__read_string(&r, out);
    return GPT2_OK;
}

/* An array of strings. */
static gpt2_result gpt2__gguf_get_strings(const gpt2__gguf* g, const char* key, bool required, gpt2__vector<std::string_view>* out, gpt2_error* err) {
    const gpt2__gguf_kv* kv;
    gpt2_result res = gpt2__gguf_lookup(g, key, required, &kv, err);
    if (res != GPT2_OK || !kv) return res;
    if (kv->type != GPT2__GGUF_ARRAY || kv->array_type != GPT2__GGUF_STRING) return gpt2__gguf_wrong_type(kv, "an array of strings", err);
    out->resize((size_t)kv->array_count);
    gpt2__reader r{kv->value, kv->value_size, 0};
    for (std::string_view& s : *out) gpt2__read_string(&r, &s);
    return GPT2_OK;
}

/* ---- src/model/model.h ---- */
/* The model: hyper-parameters, weights bound to the tensors of a GGUF file, and the vocabulary.
   Immutable once loaded, so any number of sessions and threads may share it. */

#if defined(_WIN32)
#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
/* MSVC's windows.h defines min and max as macros, which would break every std::min( and
   std::max( below (MinGW's does not in C++, so only an MSVC build would show it). A file that
   includes windows.h before the implementation must define NOMINMAX itself. */
#ifndef NOMINMAX
#define NOMINMAX
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
    const uint8_t* lanes = nullptr; /* q8_0 rows packed at load for the CPU's kernels, or NULL (src/cpu/kernels/contract.h) */
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
    gpt2__tag tag{GPT2__TAG_MODEL}; /* GPT2__TAG_FREED from gpt2_model_free on, while its sessions and grammars keep it */
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
    mutable std::atomic<int> n_refs{1}; /* the caller's until gpt2_model_free, and one for each session and grammar of it */
    struct gpt2__kv_pool* kv_pool = nullptr; /* the CPU sessions' KV cache blocks (src/cpu/kv_cache.h), made by its model_attach */
    const struct gpt2__backend* backend = nullptr; /* the device its sessions run on (src/backend.h) */
    void* device_weights = nullptr;          /* the backend's copy of the weights, if it keeps one */
    mutable std::once_flag fingerprint_once; /* gpt2__model_fingerprint (src/state.h), computed once */
    mutable uint64_t fingerprint = 0;
    mutable std::once_flag token_trie_once; /* the vocabulary's trie, built for the first grammar */
    mutable gpt2__token_trie token_trie;
};

static void gpt2__log(const gpt2_model_params& params, gpt2_log_level level, const char* fmt, ...) GPT2__PRINTF_LIKE(3, 4);
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

/* Reads the f->size bytes of an open file that is not mapped into memory of its own: read_some(into,
   most) reads up to `most` bytes and returns how many, 0 or less when it fails. The caller closes
   the file. */
template <class ReadSome>
static gpt2_result gpt2__file_read_whole(gpt2__file* f, const char* path, ReadSome read_some, gpt2_error* err) {
    f->owned = GPT2_MALLOC(f->size);
    if (!f->owned) return gpt2__fail(err, GPT2_ERROR_OUT_OF_MEMORY, "%s: cannot allocate %zu bytes to read it", path, f->size);
    size_t done = 0;
    while (done < f->size) {
        const int64_t got = read_some((uint8_t*)f->owned + done, f->size - done);
        if (got <= 0) {
            gpt2__file_close(f);
            return gpt2__fail(err, GPT2_ERROR_IO, "%s: read failed after %zu bytes", path, done);
        }
        done += (size_t)got;
    }
    f->data = (const uint8_t*)f->owned;
    return GPT2_OK;
}

/* Hands the whole pages of [p, p + bytes) of a mapped file back to the OS: the process stops
   holding them, and a later read maps them again from the file. For weights that have a copy
   of their own (the CPU's lanes). Windows keeps them until it needs the memory. */
static void gpt2__file_release_pages(const gpt2__file& f, const uint8_t* p, size_t bytes) {
#if defined(_WIN32) || !defined(MADV_DONTNEED)
    (void)f;
    (void)p;
    (void)bytes;
#else
    if (!f.mapped || p < f.data || p + bytes > f.data + f.size) return;
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t begin = ((uintptr_t)p + page - 1) & ~(page - 1), end = ((uintptr_t)p + bytes) & ~(page - 1);
    if (end > begin) madvise((void*)begin, end - begin, MADV_DONTNEED);
#endif
}

#if defined(_WIN32)
/* Why a Windows call failed, in the words docs/ERRORS.md gives for POSIX where those exist. */
static void gpt2__windows_reason(DWORD code, char* out, size_t size) {
    if (code == ERROR_FILE_NOT_FOUND || code == ERROR_PATH_NOT_FOUND) {
        std::snprintf(out, size, "No such file or directory");
        return;
    }
    DWORD n = FormatMessageA(FORMAT_MESSAGE_FROM_SYSTEM | FORMAT_MESSAGE_IGNORE_INSERTS, nullptr, code, 0, out, (DWORD)size, nullptr);
    while (n > 0 && (out[n - 1] == '\r' || out[n - 1] == '\n' || out[n - 1] == '.')) out[--n] = '\0';
    if (n == 0) std::snprintf(out, size, "error %lu", (unsigned long)code);
}

/* Paths are UTF-8, as everywhere else in the API; the ANSI code page is the fallback for a path
   that is not valid UTF-8. */
static HANDLE gpt2__windows_open(const char* path, DWORD* attributes) {
    wchar_t wide[4096];
    if (MultiByteToWideChar(CP_UTF8, MB_ERR_INVALID_CHARS, path, -1, wide, 4096) > 0) {
        *attributes = GetFileAttributesW(wide);
        return CreateFileW(wide, GENERIC_READ, FILE_SHARE_READ, nullptr, OPEN_EXISTING, FILE_ATTRIBUTE_NORMAL, nullptr);
    }
    *attributes = GetFileAttributesA(path);
    return CreateFileA(path, GENERIC_READ, FILE_SHARE_READ, nullptr, OPEN_EXISTING, FILE_ATTRIBUTE_NORMAL, nullptr);
}
#endif

static gpt2_result gpt2__file_open(const char* path, bool use_mmap, gpt2__file* f, gpt2_error* err) {
#if defined(_WIN32)
    DWORD attributes = INVALID_FILE_ATTRIBUTES;
    HANDLE h = gpt2__windows_open(path, &attributes);
    if (h == INVALID_HANDLE_VALUE) {
        const DWORD code = GetLastError();
        /* a directory cannot be opened as a file: say what it is, as on POSIX */
        if (attributes != INVALID_FILE_ATTRIBUTES && (attributes & FILE_ATTRIBUTE_DIRECTORY)) return gpt2__fail(err, GPT2_ERROR_IO, "%s: not a regular file", path);
        char reason[256];
        gpt2__windows_reason(code, reason, sizeof reason);
        return gpt2__fail(err, GPT2_ERROR_IO, "%s: cannot open: %s", path, reason);
    }
    LARGE_INTEGER size;
    if (GetFileType(h) != FILE_TYPE_DISK || !GetFileSizeEx(h, &size)) {
        CloseHandle(h);
        return gpt2__fail(err, GPT2_ERROR_IO, "%s: not a regular file", path);
    }
    if (size.QuadPart == 0) {
        CloseHandle(h);
        return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "%s: file is empty (0 bytes)", path);
    }
    if ((unsigned long long)size.QuadPart > (unsigned long long)SIZE_MAX) {
        CloseHandle(h);
        return gpt2__fail(err, GPT2_ERROR_OUT_OF_MEMORY, "%s: %llu bytes do not fit in this process's address space", path, (unsigned long long)size.QuadPart);
    }
    f->size = (size_t)size.QuadPart;
    if (use_mmap) {
        f->mapping = CreateFileMappingA(h, nullptr, PAGE_READONLY, 0, 0, nullptr);
        if (f->mapping) f->data = (const uint8_t*)MapViewOfFile(f->mapping, FILE_MAP_READ, 0, 0, 0);
        if (f->data) {
            CloseHandle(h);
            f->mapped = true;
            return GPT2_OK;
        }
        if (f->mapping) CloseHandle(f->mapping); /* as on POSIX, a file that cannot be mapped is read */
        f->mapping = nullptr;
    }
    const gpt2_result result = gpt2__file_read_whole(f, path, [h](uint8_t* into, size_t most) -> int64_t {
        DWORD got = 0;
        return ReadFile(h, into, (DWORD)std::min<size_t>(most, (size_t)1 << 30), &got, nullptr) ? (int64_t)got : -1;
    }, err);
    CloseHandle(h);
    return result;
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
    const gpt2_result result = gpt2__file_read_whole(f, path, [fd](uint8_t* into, size_t most) -> int64_t { return (int64_t)read(fd, into, most); }, err);
    close(fd);
    return result;
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
    if (t->n_bytes == 0 && std::strcmp(gpt2__type_name(t->type), "unknown") != 0) /* a block type, rows not whole blocks */
        return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "%s: rows of %llu values are not whole %s blocks of 32", name, (unsigned long long)t->ne[0], gpt2__type_name(t->type));
    if (t->n_bytes == 0)
        return gpt2__fail(err, GPT2_ERROR_UNSUPPORTED, "%s: tensor type %u is not supported (f32, f16, bf16, q8_0, q4_0 are)", name, t->type);
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
    GPT2__TRY(gpt2__gguf_get_string(g, "general.architecture", true, &arch, err));
    if (arch != "gpt2")
        return gpt2__fail(err, GPT2_ERROR_UNSUPPORTED, "general.architecture is '%.*s', expected 'gpt2'", (int)std::min<size_t>(arch.size(), 64), arch.data());
    std::string_view name;
    GPT2__TRY(gpt2__gguf_get_string(g, "general.name", false, &name, err));
    m->name.assign(name.data(), name.size());
    int64_t v;
    GPT2__TRY(gpt2__gguf_get_int(g, "gpt2.context_length", true, 1, 1 << 20, &v, err)); m->n_ctx = (int)v;
    GPT2__TRY(gpt2__gguf_get_int(g, "gpt2.embedding_length", true, 1, 1 << 16, &v, err)); m->n_embd = (int)v;
    GPT2__TRY(gpt2__gguf_get_int(g, "gpt2.block_count", true, 1, 1024, &v, err)); m->n_layer = (int)v;
    GPT2__TRY(gpt2__gguf_get_int(g, "gpt2.attention.head_count", true, 1, 1024, &v, err)); m->n_head = (int)v;
    v = 4 * (int64_t)m->n_embd; /* absent: nanoGPT's 4 n_embd */
    GPT2__TRY(gpt2__gguf_get_int(g, "gpt2.feed_forward_length", false, 1, 1 << 18, &v, err)); m->n_ff = (int)v;
    GPT2__TRY(gpt2__gguf_get_float(g, "gpt2.attention.layer_norm_epsilon", false, &m->layer_norm_eps, err));
    if (!(m->layer_norm_eps > 0.0f && m->layer_norm_eps < 1.0f))
        return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "gpt2.attention.layer_norm_epsilon is %g, expected a small positive number", (double)m->layer_norm_eps);
    if (m->n_embd % m->n_head != 0)
        return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "gpt2.attention.head_count %d does not divide gpt2.embedding_length %d", m->n_head, m->n_embd);
    /* GPT-2 files from other converters carry no gpt2h.gelu: OpenAI's GPT-2 uses the tanh form. */
    std::string_view gelu = "tanh";
    GPT2__TRY(gpt2__gguf_get_string(g, "gpt2h.gelu", false, &gelu, err));
    if (gelu != "erf" && gelu != "tanh")
        return gpt2__fail(err, GPT2_ERROR_BAD_FILE, "gpt2h.gelu is '%.*s', expected 'erf' or 'tanh'", (int)std::min<size_t>(gelu.size(), 64), gelu.data());
    m->gelu_tanh = gelu == "tanh";
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
    GPT2__TRY(gpt2__gguf_get_string(g, "gpt2h.tokenizer.kind", false, &kind, err));
    GPT2__TRY(gpt2__gguf_get_string(g, "tokenizer.ggml.model", false, &bpe_model, err));
    if (kind == "char") {
        gpt2__vector<std::string_view> chars;
        GPT2__TRY(gpt2__gguf_get_strings(g, "gpt2h.tokenizer.chars", true, &chars, err));
        GPT2__TRY(gpt2__tokenizer_init_char(&m->tokenizer, chars.data(), chars.size(), err));
    } else if (!kind.empty()) {
        return gpt2__fail(err, GPT2_ERROR_UNSUPPORTED, "gpt2h.tokenizer.kind is '%.*s', expected 'char'", (int)std::min<size_t>(kind.size(), 64), kind.data());
    } else if (bpe_model == "gpt2") {
        gpt2__vector<std::string_view> tokens, merges;
        GPT2__TRY(gpt2__gguf_get_strings(g, "tokenizer.ggml.tokens", true, &tokens, err));
        GPT2__TRY(gpt2__gguf_get_strings(g, "tokenizer.ggml.merges", true, &merges, err));
        int64_t eos = -1;
        GPT2__TRY(gpt2__gguf_get_int(g, "tokenizer.ggml.eos_token_id", false, 0, (int64_t)tokens.size() - 1, &eos, err));
        GPT2__TRY(gpt2__tokenizer_init_bpe(&m->tokenizer, tokens.data(), tokens.size(), merges.data(), merges.size(), (int32_t)eos, err));
    } else if (!bpe_model.empty() && bpe_model != "none" && bpe_model != "no_vocab") { /* llama.cpp's names for no vocabulary: token ids only */
        return gpt2__fail(err, GPT2_ERROR_UNSUPPORTED, "tokenizer.ggml.model is '%.*s', expected 'gpt2' or 'none'", (int)std::min<size_t>(bpe_model.size(), 64), bpe_model.data());
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
#if defined(GPT2__UNOPTIMISED) && !defined(GPT2_UNOPTIMISED_OK)
    gpt2__log(m->params, GPT2_LOG_WARNING, "this program's copy of gpt2.h was compiled without optimisation and runs about 10x slower: compile it with -O2");
#endif
    return GPT2_OK;
}

static void gpt2__model_destroy(gpt2_model* m) {
    gpt2__file_close(&m->file);
    m->~gpt2_model();
    GPT2_FREE(m);
}

static gpt2_result gpt2__check_model(const gpt2_model* m, gpt2_error* err) {
    return gpt2__check_tag(m, GPT2__TAG_MODEL, "model", "gpt2_model_load_file or gpt2_model_load_memory", "gpt2_model_free", err);
}

/* The model that `what` (a live session, grammar or stage) holds was not freed before it. */
static gpt2_result gpt2__check_model_of(const gpt2_model* m, const char* what, gpt2_error* err) {
    if (m->tag.load(std::memory_order_relaxed) == GPT2__TAG_MODEL) return GPT2_OK;
    return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT,
                      "%s's model was freed (gpt2_model_free) before it: free a model's sessions, grammars and stages first (their own free still works)", what);
}

static gpt2_model* gpt2__model_new(const gpt2_model_params* params) {
    void* memory = GPT2_MALLOC(sizeof(gpt2_model));
    if (!memory) return nullptr;
    gpt2_model* m = new (memory) gpt2_model();
    m->params = params ? *params : gpt2_model_default_params();
    return m;
}

/* ---- src/model/sampler.h ---- */
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

/* A float as the messages below print it: %g, but every NaN as "NaN". printf spells NaN by
   platform and sign ("nan", "-nan", "-nan(ind)"), and C#'s float.NaN has its sign bit set. */
struct gpt2__float_text {
    char text[32];
    explicit gpt2__float_text(double v) {
        if (std::isnan(v)) std::snprintf(text, sizeof text, "NaN");
        else std::snprintf(text, sizeof text, "%g", v);
    }
};

static gpt2_result gpt2__check_sampling(float temperature, int top_k, gpt2_error* err) {
    if (!std::isfinite(temperature) || temperature < 0.0f)
        return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "temperature is %s; expected a finite number >= 0 (0 = greedy)", gpt2__float_text(temperature).text);
    if (top_k < 0) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "top_k is %d; expected >= 0 (0 = no limit)", top_k);
    return GPT2_OK;
}

static int32_t gpt2__argmax(const float* logits, int n) {
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

/* The k-th largest of x[0..n), 1 <= k < n (nth_element's answer), in one pass that keeps the k
   largest seen so far in a min-heap (`heap`: k floats): after the first few thousand values few
   enter it, so it costs about a comparison per value (docs/PERFORMANCE.md, Kernel notes). */
static float gpt2__kth_largest(const float* x, int n, int k, float* heap) {
    std::copy(x, x + k, heap);
    std::make_heap(heap, heap + k, std::greater<float>());
    for (int i = k; i < n; i++)
        if (x[i] > heap[0]) {
            std::pop_heap(heap, heap + k, std::greater<float>());
            heap[k - 1] = x[i];
            std::push_heap(heap, heap + k, std::greater<float>());
        }
    return heap[0];
}

/* `scratch` holds n floats. top_k larger than n keeps all (nanoGPT: min(top_k, vocab_size)). */
static int32_t gpt2__sample(const float* logits, int n, float temperature, int top_k, uint64_t* rng, float* scratch) {
    if (temperature == 0.0f || top_k == 1) return gpt2__argmax(logits, n);
    float threshold = -INFINITY, max_logit;
    if (top_k > 0 && top_k < n) { /* nanoGPT keeps every logit >= the k-th largest */
        threshold = gpt2__kth_largest(logits, n, top_k, scratch);
        max_logit = *std::max_element(scratch, scratch + top_k); /* the largest is one of the k */
    } else {
        max_logit = logits[gpt2__argmax(logits, n)];
    }
    const double inv_t = 1.0 / temperature;
    double total = 0.0;
    for (int i = 0; i < n; i++) {
        scratch[i] = logits[i] >= threshold && logits[i] > -INFINITY ? (float)std::exp(((double)logits[i] - max_logit) * inv_t) : 0.0f; /* exp(-inf) is 0: not worth a call where a grammar removed most tokens */
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

/* log softmax(logits)[id], in double. */
static double gpt2__log_prob(const float* logits, int n, int32_t id) {
    double max_logit = logits[0];
    for (int i = 1; i < n; i++) max_logit = std::max(max_logit, (double)logits[i]);
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += std::exp((double)logits[i] - max_logit);
    return (double)logits[id] - max_logit - std::log(sum);
}

/* ---- The chain ---------------------------------------------------------------------------
   The controls beyond nanoGPT's, in llama.cpp's order (GENERATION in the API): logit_bias, the
   penalties, on_logits, top_k, top_p, min_p, then temperature and the draw of gpt2__sample.
   They edit a copy of the logits and run only when one of them is on, so that with all of
   them off the tokens are exactly gpt2__sample's. */

enum { GPT2__DEFAULT_REPEAT_LAST_N = 64 }; /* llama.cpp's penalty_last_n */

static bool gpt2__penalties_on(const gpt2_generate_params& p) {
    return (p.repeat_penalty != 0.0f && p.repeat_penalty != 1.0f) || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
}

/* Whether any control beyond temperature and top_k is on. */
static bool gpt2__chain_on(const gpt2_generate_params& p) {
    return (p.top_p > 0.0f && p.top_p < 1.0f) || p.min_p > 0.0f || gpt2__penalties_on(p) || p.n_logit_bias > 0 || p.on_logits || p.grammar;
}

static gpt2_result gpt2__check_chain(const gpt2_generate_params& p, int n_vocab, gpt2_error* err) {
    if (!(p.top_p >= 0.0f && p.top_p <= 1.0f)) /* written so that NaN fails too */
        return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "top_p is %s; expected 0 to 1 (0 or 1 = off)", gpt2__float_text(p.top_p).text);
    if (!(p.min_p >= 0.0f && p.min_p <= 1.0f))
        return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "min_p is %s; expected 0 to 1 (0 = off)", gpt2__float_text(p.min_p).text);
    if (!std::isfinite(p.repeat_penalty) || p.repeat_penalty < 0.0f)
        return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "repeat_penalty is %s; expected a finite number >= 0 (0 or 1 = off)", gpt2__float_text(p.repeat_penalty).text);
    if (p.repeat_last_n < -1)
        return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "repeat_last_n is %d; expected -1 (the whole context), 0 (the default, %d) or more",
                          p.repeat_last_n, (int)GPT2__DEFAULT_REPEAT_LAST_N);
    if (!std::isfinite(p.presence_penalty))
        return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "presence_penalty is %s; expected a finite number (0 = off)", gpt2__float_text(p.presence_penalty).text);
    if (!std::isfinite(p.frequency_penalty))
        return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "frequency_penalty is %s; expected a finite number (0 = off)", gpt2__float_text(p.frequency_penalty).text);
    if (!p.logit_bias && p.n_logit_bias)
        return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "logit_bias is NULL but n_logit_bias is %zu", p.n_logit_bias);
    for (size_t i = 0; i < p.n_logit_bias; i++) {
        const gpt2_logit_bias& b = p.logit_bias[i];
        if (b.token < 0 || b.token >= n_vocab)
            return gpt2__fail(err, GPT2_ERROR_BAD_TOKEN, "logit_bias[%zu].token is %d, outside the vocabulary [0, %d)", i, (int)b.token, n_vocab);
        if (std::isnan(b.bias) || b.bias == INFINITY)
            return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "logit_bias[%zu].bias is %s; expected a finite number, or -INFINITY to ban the token", i,
                              gpt2__float_text(b.bias).text);
    }
    return GPT2_OK;
}

/* llama.cpp's penalties: for each distinct token of window[0..n_window), which occurs `count`
   times there, a logit > 0 is divided by `repeat` and any other multiplied by it (dividing a
   negative logit would make the token more likely), then count * frequency + presence is
   subtracted. `counts` holds n_vocab zeros, and holds zeros again on return. */
static void gpt2__apply_penalties(float* logits, const int32_t* window, size_t n_window, float repeat, float presence, float frequency, int* counts) {
    if (repeat == 0.0f) repeat = 1.0f; /* off */
    for (size_t i = 0; i < n_window; i++) counts[window[i]]++;
    for (size_t i = 0; i < n_window; i++) {
        const int32_t t = window[i];
        const int count = counts[t];
        if (count == 0) continue; /* an earlier occurrence of the same token did it */
        counts[t] = 0;
        logits[t] = logits[t] <= 0.0f ? logits[t] * repeat : logits[t] / repeat;
        logits[t] -= (float)count * frequency + presence;
    }
}

/* top_k, then top_p, then min_p: the tokens they drop become -INFINITY. Probabilities are those
   at temperature 1 (llama.cpp applies the temperature after them). scratch: n floats. */
static void gpt2__truncate(float* logits, int n, int top_k, float top_p, float min_p, float* scratch) {
    if (top_k > 0 && top_k < n) { /* gpt2__sample's rule: keep every logit >= the k-th largest */
        const float threshold = gpt2__kth_largest(logits, n, top_k, scratch);
        for (int i = 0; i < n; i++)
            if (logits[i] < threshold) logits[i] = -INFINITY;
    }
    if (top_p > 0.0f && top_p < 1.0f) { /* the fewest most likely whose probabilities reach top_p, and their ties */
        int m = 0;
        for (int i = 0; i < n; i++)
            if (logits[i] > -INFINITY) scratch[m++] = logits[i];
        const int head = std::min(m, 256); /* top_p usually needs few tokens: sort the rest only when it does not */
        std::partial_sort(scratch, scratch + head, scratch + m, std::greater<float>());
        const double max_logit = scratch[0];
        double total = 0.0;
        for (int j = 0; j < m; j++) total += std::exp((double)scratch[j] - max_logit);
        const double target = (double)top_p * total;
        double running = 0.0;
        float threshold = -INFINITY;
        for (int j = 0; j < m; j++) {
            if (j == head) std::sort(scratch + head, scratch + m, std::greater<float>());
            running += std::exp((double)scratch[j] - max_logit);
            if (running >= target) {
                threshold = scratch[j];
                break;
            }
        }
        for (int i = 0; i < n; i++)
            if (logits[i] < threshold) logits[i] = -INFINITY;
    }
    if (min_p > 0.0f) { /* p / p_max >= min_p, i.e. logit - max >= log(min_p) */
        const double lowest = (double)logits[gpt2__argmax(logits, n)] + std::log((double)min_p);
        for (int i = 0; i < n; i++)
            if ((double)logits[i] < lowest) logits[i] = -INFINITY;
    }
}

/* The chain up to the draw, in place on `logits` (n_vocab entries, a copy of the model's).
   context: the session's tokens; the penalties look at the last repeat_last_n of them.
   Afterwards the tokens that may be drawn have finite logits, the others -INFINITY (when the
   draw is greedy, top_k/top_p/min_p are skipped: they always keep the most likely token).
   Fails when on_logits leaves NaN, +INFINITY or no finite logit. scratch: n floats; counts: n
   zeros. */
static gpt2_result gpt2__chain_filter(float* logits, int n, const gpt2_generate_params& p, const int32_t* context, size_t n_context, const uint32_t* allowed,
                                      float* scratch, int* counts, gpt2_error* err) {
    for (size_t i = 0; i < p.n_logit_bias; i++) logits[p.logit_bias[i].token] += p.logit_bias[i].bias;
    if (gpt2__penalties_on(p)) {
        const size_t last_n = p.repeat_last_n < 0 ? n_context : p.repeat_last_n == 0 ? (size_t)GPT2__DEFAULT_REPEAT_LAST_N : (size_t)p.repeat_last_n;
        const size_t n_window = std::min(n_context, last_n);
        gpt2__apply_penalties(logits, context + (n_context - n_window), n_window, p.repeat_penalty, p.presence_penalty, p.frequency_penalty, counts);
    }
    /* the grammar's mask after the penalties (they never bring a removed token back) and before
       on_logits and top_k (which see only what the grammar allows) */
    if (allowed)
        for (int w = 0; w < (n + 31) / 32; w++) {
            if (allowed[w] == UINT32_MAX) continue;
            for (int i = w * 32; i < std::min(n, w * 32 + 32); i++)
                if (!((allowed[w] >> (i & 31)) & 1)) logits[i] = -INFINITY;
        }
    if (p.on_logits) p.on_logits(p.user, logits, n);
    /* logit_bias, the penalties (a huge negative one overflows to +inf) and the caller's code may
       leave what no draw can take; the mask cannot (it leaves a token: gpt2__generator_mask), so
       with the mask alone the pass over every logit is skipped */
    const bool caller_edited = p.n_logit_bias > 0 || p.on_logits || gpt2__penalties_on(p);
    bool any = !caller_edited;
    for (int i = 0; caller_edited && i < n; i++) {
        if (std::isnan(logits[i]) || logits[i] == INFINITY)
            return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "the logit of token %d is %s after logit_bias, the penalties and on_logits; expected a finite number or -INFINITY", i,
                              gpt2__float_text(logits[i]).text);
        any = any || logits[i] > -INFINITY;
    }
    if (!any)
        return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "no token left to sample: logit_bias or on_logits set every logit to -INFINITY%s",
                          allowed ? " that the grammar allows" : "");
    if (p.temperature != 0.0f && p.top_k != 1) gpt2__truncate(logits, n, p.top_k, p.top_p, p.min_p, scratch);
    return GPT2_OK;
}

/* The end of the chain: temperature, softmax and the draw over what gpt2__chain_filter left (its
   top_k already applied; top_k 1 stays greedy). scratch: n floats. */
static int32_t gpt2__chain_draw(const float* filtered, int n, const gpt2_generate_params& p, uint64_t* rng, float* scratch) {
    return gpt2__sample(filtered, n, p.temperature, p.top_k == 1 ? 1 : 0, rng, scratch);
}

/* ---- src/grammar/gbnf.h ---- */
/* Grammars in llama.cpp's GBNF, made into the form the matcher (matcher.h) walks: every rule a
   list of alternatives, every alternative a sequence of elements - a character class (a set of
   code points), a reference to a rule, and an end. A literal is a sequence of one-character
   classes; a group, `x*`, `x+`, `x?` and `x{m,n}` become rules of their own, as llama.cpp
   makes them (x* is r ::= x r | empty), named after the rule they are written in ("value_2"),
   so that an error can name them. */

enum gpt2__gkind : uint8_t { GPT2__G_END, GPT2__G_CHARS, GPT2__G_RULE };

struct gpt2__gelem {
    gpt2__gkind kind;
    uint32_t value; /* CHARS: an index into gpt2_grammar::classes; RULE: a rule's index */
};

/* A set of code points: sorted, disjoint, inclusive ranges, and the ASCII ones as bits too
   (most text a grammar checks is ASCII). */
struct gpt2__code_points {
    uint64_t ascii[2] = {0, 0};
    gpt2__vector<std::pair<uint32_t, uint32_t>> ranges;
};

static bool gpt2__class_has(const gpt2__code_points& c, uint32_t cp) {
    if (cp < 128) return (c.ascii[cp >> 6] >> (cp & 63)) & 1;
    auto it = std::upper_bound(c.ranges.begin(), c.ranges.end(), std::make_pair(cp, UINT32_MAX));
    return it != c.ranges.begin() && std::prev(it)->second >= cp;
}

/* Whether the class holds any code point of [lo, hi]. */
static bool gpt2__class_meets(const gpt2__code_points& c, uint32_t lo, uint32_t hi) {
    auto it = std::upper_bound(c.ranges.begin(), c.ranges.end(), std::make_pair(hi, UINT32_MAX));
    return it != c.ranges.begin() && std::prev(it)->second >= lo;
}

struct gpt2__grule {
    gpt2__string name;
    uint32_t alts_begin = 0, alts_end = 0; /* its alternatives: gpt2_grammar::alt_starts[begin, end) */
};

/* What a stack's top decides about the vocabulary, given the positions of the stack's first
   GPT2__CONTEXT_DEPTH nodes, `context` (from the top down; below them the stack is unknown, or
   empty when there are fewer). Made by matcher.h on first use: `accepted`, a bit per token, the
   tokens read whole inside the context; `uncertain`, the nodes of the vocabulary's trie whose
   tokens reach past it, where the stack below decides (a node, or with GPT2__WHOLE_SUBTREE its
   whole subtree). The deeper the context, the fewer tokens are left to the stack below (at depth
   1, every token longer than one character of JSON's `char` rule) and the more contexts a
   grammar makes. */
enum : uint32_t { GPT2__WHOLE_SUBTREE = 1u << 31 };
/* A grammar keeps contexts up to both limits (a schema of hundreds of optional properties makes
   a context per character of every key it meets: tens of thousands); past them a mask walks the
   whole trie from the state. */
enum { GPT2__CONTEXT_DEPTH = 4, GPT2__MAX_CONTEXTS = 1 << 16, GPT2__CONTEXTS_MAX_BYTES = 32 << 20, GPT2__CLIP_BYTES = 16 };
struct gpt2__context_tokens {
    gpt2__vector<uint32_t> context;
    bool clipped = false; /* some position stood for a farther copy of a repetition (gpt2_grammar::stands_for) */
    /* every word of the bitmap; or, where most words are 0 (a position in a key's literal accepts a
       handful of tokens), only the others: word accepted_at[k] of the bitmap is accepted[k] */
    gpt2__vector<uint32_t> accepted;
    gpt2__vector<uint32_t> accepted_at;
    gpt2__vector<uint32_t> uncertain;
};

struct gpt2__context_maker;

struct gpt2_grammar {
    const gpt2_model* model = nullptr; /* held (gpt2_model::n_refs) until the grammar is freed */
    gpt2__vector<gpt2__gelem> elems; /* every alternative's elements, each ending with GPT2__G_END */
    gpt2__vector<uint32_t> alt_starts;
    gpt2__vector<gpt2__grule> rules;
    gpt2__vector<gpt2__code_points> classes;
    uint32_t root = 0;
    gpt2__tag tag{GPT2__TAG_GRAMMAR}; /* GPT2__TAG_FREED once freed (src/common.h) */
    /* per element: UINT32_MAX, or in a copy of a repetition x{m,n} more than GPT2__CLIP_BYTES
       copies from the end, the same element in the copy that many from the end, where x is a
       character class or a rule that cannot match the empty text. A token of at most that many
       bytes cannot tell them apart (each copy reads a character at least), so their contexts
       share the tokens they decide, and the longer tokens are left to the walk from the state:
       [^\n]{1,120}, or a JSON string's char{0,500} (maxLength), would otherwise make a context for
       every character. */
    gpt2__vector<uint32_t> stands_for;
    /* the contexts met so far (at most GPT2__MAX_CONTEXTS, holding GPT2__CONTEXTS_MAX_BYTES),
       under the mutex: grammars are shared; a deque keeps them where they are while more are added */
    mutable std::mutex contexts_mutex;
    mutable std::deque<gpt2__context_tokens, gpt2__allocator<gpt2__context_tokens>> contexts;
    mutable size_t contexts_bytes = 0;
    mutable gpt2__context_maker* context_maker = nullptr; /* the scratch of making them, kept between them (matcher.h) */
    mutable std::unordered_multimap<uint64_t, uint32_t, std::hash<uint64_t>, std::equal_to<uint64_t>, gpt2__allocator<std::pair<const uint64_t, uint32_t>>> context_index;
};

enum { GPT2__GRAMMAR_MAX_ELEMS = 1 << 20, GPT2__GRAMMAR_MAX_REPEAT = 1 << 16 };

/* The parser: recursive descent over the text, one rule at a time. Rules are built as nested
   vectors (a group's rule is made while its parent's alternative is open), then laid flat. */
struct gpt2__gbnf_parser {
    const char* text = nullptr;
    size_t n = 0, pos = 0;
    gpt2_error* err = nullptr;
    gpt2__vector<gpt2__vector<gpt2__vector<gpt2__gelem>>> alts; /* per rule */
    gpt2__vector<gpt2__string> names;
    std::unordered_map<std::string_view, uint32_t> written; /* the rules the text names (views into it), by name */
    gpt2__vector<size_t> defined_at, used_at; /* text offsets; SIZE_MAX = not yet */
    gpt2__vector<uint32_t> n_children;        /* groups and repetitions made inside each rule */
    gpt2__vector<uint32_t> stands_for;        /* per rule: see gpt2_grammar::stands_for */
    gpt2__vector<gpt2__code_points> classes;
    size_t n_elems = 0;
};

/* "line 3, column 14" of a text offset (columns count bytes, from 1). */
static void gpt2__gbnf_where(const gpt2__gbnf_parser& ps, size_t at, int* line, int* column) {
    *line = 1;
    size_t line_start = 0;
    for (size_t i = 0; i < at && i < ps.n; i++)
        if (ps.text[i] == '\n') {
            (*line)++;
            line_start = i + 1;
        }
    *column = (int)(at - line_start) + 1;
}

/* A syntax error at `at`: "line L, column C: <what>". */
static gpt2_result gpt2__gbnf_fail(const gpt2__gbnf_parser& ps, size_t at, const char* fmt, ...) GPT2__PRINTF_LIKE(3, 4);
static gpt2_result gpt2__gbnf_fail(const gpt2__gbnf_parser& ps, size_t at, const char* fmt, ...) {
    char what[400];
    va_list args;
    va_start(args, fmt);
    std::vsnprintf(what, sizeof what, fmt, args);
    va_end(args);
    int line, column;
    gpt2__gbnf_where(ps, at, &line, &column);
    return gpt2__fail(ps.err, GPT2_ERROR_BAD_GRAMMAR, "grammar, line %d, column %d: %s", line, column, what);
}

/* What is at the parser's position, for "found ..." in messages. */
static const char* gpt2__gbnf_found(const gpt2__gbnf_parser& ps, char* buf, size_t size) {
    if (ps.pos >= ps.n) return "the end of the grammar";
    const unsigned char c = (unsigned char)ps.text[ps.pos];
    if (c == '\n') return "the end of the line";
    if (c >= 0x20 && c < 0x7F) std::snprintf(buf, size, "'%c'", c);
    else std::snprintf(buf, size, "byte 0x%02X", c);
    return buf;
}

static bool gpt2__gbnf_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

/* Spaces, newlines and # comments. A rule ends where the next `name ::=` begins, so newlines
   need no special meaning (llama.cpp allows them only inside groups and after ::= and |; every
   grammar it reads reads the same here). */
static size_t gpt2__gbnf_after_space(const gpt2__gbnf_parser& ps, size_t pos) {
    while (pos < ps.n) {
        const char c = ps.text[pos];
        if (c == ' ' || c == '\t' || c == '\r' || c == '\n') pos++;
        else if (c == '#')
            while (pos < ps.n && ps.text[pos] != '\n') pos++;
        else break;
    }
    return pos;
}

static void gpt2__gbnf_skip_space(gpt2__gbnf_parser* ps) { ps->pos = gpt2__gbnf_after_space(*ps, ps->pos); }

static std::string_view gpt2__gbnf_name_at(const gpt2__gbnf_parser& ps, size_t at) {
    size_t end = at;
    while (end < ps.n && gpt2__gbnf_name_char(ps.text[end])) end++;
    return std::string_view(ps.text + at, end - at);
}

/* Whether a rule's definition (`name ::=`) starts at `at`. */
static bool gpt2__gbnf_definition_at(const gpt2__gbnf_parser& ps, size_t at) {
    const size_t name_end = at + gpt2__gbnf_name_at(ps, at).size();
    if (name_end == at) return false;
    const size_t next = gpt2__gbnf_after_space(ps, name_end);
    return ps.n - next >= 3 && std::memcmp(ps.text + next, "::=", 3) == 0;
}

static uint32_t gpt2__gbnf_new_rule(gpt2__gbnf_parser* ps, std::string_view name) {
    ps->alts.emplace_back();
    ps->names.emplace_back(name);
    ps->defined_at.push_back(SIZE_MAX);
    ps->used_at.push_back(SIZE_MAX);
    ps->n_children.push_back(0);
    ps->stands_for.push_back(UINT32_MAX);
    return (uint32_t)(ps->alts.size() - 1);
}

/* A rule of its own for a group or a repetition inside `parent`: "parent_1", "parent_2", ... */
static uint32_t gpt2__gbnf_child_rule(gpt2__gbnf_parser* ps, uint32_t parent, size_t at) {
    char suffix[16];
    std::snprintf(suffix, sizeof suffix, "_%u", (unsigned)++ps->n_children[parent]);
    gpt2__string name = ps->names[parent];
    name += suffix;
    const uint32_t id = gpt2__gbnf_new_rule(ps, name);
    ps->defined_at[id] = at;
    return id;
}

/* The rule the text calls `name` (a view into the text, which outlives the parser), made at its
   first mention. Rules made for groups and repetitions are not looked up by name: a rule the
   text calls "value_2" is its own, whatever a group of "value" is named. */
static uint32_t gpt2__gbnf_rule_named(gpt2__gbnf_parser* ps, std::string_view name) {
    const auto found = ps->written.find(name);
    if (found != ps->written.end()) return found->second;
    const uint32_t id = gpt2__gbnf_new_rule(ps, name);
    ps->written.emplace(name, id);
    return id;
}

static gpt2_result gpt2__gbnf_hex(gpt2__gbnf_parser* ps, int digits, uint32_t* cp) {
    const size_t at = ps->pos;
    *cp = 0;
    for (int i = 0; i < digits; i++) {
        const char c = ps->pos < ps->n ? ps->text[ps->pos] : 0;
        const int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (v < 0) return gpt2__gbnf_fail(*ps, at, "expected %d hexadecimal digits after \\%c", digits, digits == 2 ? 'x' : digits == 4 ? 'u' : 'U');
        *cp = *cp * 16 + (uint32_t)v;
        ps->pos++;
    }
    if (*cp > 0x10FFFF || (*cp >= 0xD800 && *cp <= 0xDFFF))
        return gpt2__gbnf_fail(*ps, at, "U+%X is not a character (a surrogate, or above U+10FFFF)", (unsigned)*cp);
    return GPT2_OK;
}

/* One character of a literal or a class: UTF-8, or an escape. */
static gpt2_result gpt2__gbnf_char(gpt2__gbnf_parser* ps, uint32_t* cp) {
    const size_t at = ps->pos;
    const unsigned char* s = (const unsigned char*)ps->text;
    if (s[at] != '\\') {
        ps->pos += gpt2__utf8_decode(s + at, ps->n - at, cp);
        if (*cp == GPT2__INVALID_CP) return gpt2__gbnf_fail(*ps, at, "byte 0x%02X is not UTF-8 text", s[at]);
        return GPT2_OK;
    }
    if (at + 1 >= ps->n) return gpt2__gbnf_fail(*ps, at, "the grammar ends inside an escape");
    ps->pos += 2;
    switch (s[at + 1]) {
    case 'x': return gpt2__gbnf_hex(ps, 2, cp);
    case 'u': return gpt2__gbnf_hex(ps, 4, cp);
    case 'U': return gpt2__gbnf_hex(ps, 8, cp);
    case 'n': *cp = '\n'; return GPT2_OK;
    case 'r': *cp = '\r'; return GPT2_OK;
    case 't': *cp = '\t'; return GPT2_OK;
    case '\\': case '"': case '\'': case '[': case ']': case '-': case '^': case '/': *cp = s[at + 1]; return GPT2_OK;
    }
    const unsigned char c = s[at + 1];
    if (c >= 0x20 && c < 0x7F)
        return gpt2__gbnf_fail(*ps, at, "invalid escape \\%c; expected one of \\n \\r \\t \\\\ \\\" \\[ \\] \\- \\^ \\xHH \\uHHHH \\UHHHHHHHH", c);
    return gpt2__gbnf_fail(*ps, at, "invalid escape: byte 0x%02X after the backslash", c);
}

/* Adds a class made of `ranges` (any order, may overlap; `negated`: every other code point). */
static gpt2_result gpt2__gbnf_add_class(gpt2__gbnf_parser* ps, gpt2__vector<std::pair<uint32_t, uint32_t>> ranges, bool negated, size_t at,
                                        gpt2__gelem* out) {
    std::sort(ranges.begin(), ranges.end());
    gpt2__code_points c;
    for (const auto& r : ranges)
        if (!c.ranges.empty() && r.first <= c.ranges.back().second + 1) c.ranges.back().second = std::max(c.ranges.back().second, r.second);
        else c.ranges.push_back(r);
    if (negated) {
        gpt2__vector<std::pair<uint32_t, uint32_t>> rest;
        uint32_t next = 0;
        for (const auto& r : c.ranges) {
            if (r.first > next) rest.push_back({next, r.first - 1});
            next = r.second + 1;
        }
        if (next <= 0x10FFFF) rest.push_back({next, 0x10FFFF});
        c.ranges = rest;
    }
    if (c.ranges.empty()) return gpt2__gbnf_fail(*ps, at, "this character class matches no character");
    for (const auto& r : c.ranges)
        for (uint32_t cp = r.first; cp <= std::min<uint32_t>(r.second, 127); cp++) c.ascii[cp >> 6] |= 1ull << (cp & 63);
    ps->classes.push_back(std::move(c));
    *out = {GPT2__G_CHARS, (uint32_t)(ps->classes.size() - 1)};
    return GPT2_OK;
}

/* [a-z_] or [^"\\]: after the '['. */
static gpt2_result gpt2__gbnf_class(gpt2__gbnf_parser* ps, gpt2__gelem* out) {
    const size_t at = ps->pos - 1;
    const bool negated = ps->pos < ps->n && ps->text[ps->pos] == '^';
    if (negated) ps->pos++;
    gpt2__vector<std::pair<uint32_t, uint32_t>> ranges;
    for (;;) {
        if (ps->pos >= ps->n) return gpt2__gbnf_fail(*ps, at, "this character class has no closing ']'");
        if (ps->text[ps->pos] == ']') break;
        const size_t item_at = ps->pos;
        uint32_t lo, hi;
        GPT2__TRY(gpt2__gbnf_char(ps, &lo));
        hi = lo;
        if (ps->n - ps->pos >= 2 && ps->text[ps->pos] == '-' && ps->text[ps->pos + 1] != ']') {
            ps->pos++;
            GPT2__TRY(gpt2__gbnf_char(ps, &hi));
            if (hi < lo) return gpt2__gbnf_fail(*ps, item_at, "the range U+%04X-U+%04X runs backwards", (unsigned)lo, (unsigned)hi);
        }
        ranges.push_back({lo, hi});
    }
    ps->pos++;
    if (ranges.empty()) return gpt2__gbnf_fail(*ps, at, "empty character class []");
    return gpt2__gbnf_add_class(ps, std::move(ranges), negated, at, out);
}

static gpt2_result gpt2__gbnf_count_elems(gpt2__gbnf_parser* ps, size_t more, size_t at) {
    ps->n_elems += more;
    if (ps->n_elems > GPT2__GRAMMAR_MAX_ELEMS)
        return gpt2__gbnf_fail(*ps, at, "the grammar grows past %d elements here (repetitions are expanded: x{m,n} is n copies of x)", (int)GPT2__GRAMMAR_MAX_ELEMS);
    return GPT2_OK;
}

static gpt2_result gpt2__gbnf_alternatives(gpt2__gbnf_parser* ps, uint32_t rule);

/* Appends `atom` repeated min to max times (max UINT32_MAX: unbounded) to `seq`. */
static gpt2_result gpt2__gbnf_repeat(gpt2__gbnf_parser* ps, uint32_t rule, gpt2__vector<gpt2__gelem> atom, uint32_t min, uint32_t max, size_t at,
                                     gpt2__vector<gpt2__gelem>* seq) {
    if (atom.size() != 1) { /* a literal of several characters: one rule, so that a repetition is one element */
        const uint32_t wrapped = gpt2__gbnf_child_rule(ps, rule, at);
        ps->alts[wrapped].push_back(atom);
        atom = {{GPT2__G_RULE, wrapped}};
    }
    const gpt2__gelem x = atom[0];
    const size_t optional = max == UINT32_MAX ? 1 : max - min;
    GPT2__TRY(gpt2__gbnf_count_elems(ps, min + 4 * optional + 1, at)); /* each optional copy: a rule of two alternatives, 4 elements */
    for (uint32_t i = 0; i < min; i++) seq->push_back(x);
    if (max == UINT32_MAX) { /* r ::= x r | empty */
        const uint32_t r = gpt2__gbnf_child_rule(ps, rule, at);
        ps->alts[r].push_back({x, {GPT2__G_RULE, r}});
        ps->alts[r].emplace_back();
        seq->push_back({GPT2__G_RULE, r});
        return GPT2_OK;
    }
    /* (x (x (x)?)?)? for max - min = 3: each optional copy only after the one before it */
    gpt2__gelem inner{GPT2__G_END, 0};
    uint32_t clip_copy = UINT32_MAX; /* the copy GPT2__CLIP_BYTES from the end */
    for (size_t i = 0; i < optional; i++) {
        const uint32_t r = gpt2__gbnf_child_rule(ps, rule, at);
        ps->alts[r].push_back({x});
        if (inner.kind == GPT2__G_RULE) ps->alts[r].back().push_back(inner);
        ps->alts[r].emplace_back();
        inner = {GPT2__G_RULE, r};
        if (i + 1 == GPT2__CLIP_BYTES) clip_copy = r;
        if (i + 1 > GPT2__CLIP_BYTES) ps->stands_for[r] = clip_copy; /* kept where x cannot be empty (gpt2__gbnf_parse) */
    }
    if (inner.kind == GPT2__G_RULE) seq->push_back(inner);
    return GPT2_OK;
}

static gpt2_result gpt2__gbnf_number(gpt2__gbnf_parser* ps, uint32_t* value) {
    const size_t at = ps->pos;
    uint64_t v = 0;
    while (ps->pos < ps->n && ps->text[ps->pos] >= '0' && ps->text[ps->pos] <= '9') {
        v = v * 10 + (uint64_t)(ps->text[ps->pos++] - '0');
        if (v > GPT2__GRAMMAR_MAX_REPEAT) return gpt2__gbnf_fail(*ps, at, "a repetition count above %d", (int)GPT2__GRAMMAR_MAX_REPEAT);
    }
    if (ps->pos == at) {
        char buf[16];
        return gpt2__gbnf_fail(*ps, at, "expected a number in {m,n}, found %s", gpt2__gbnf_found(*ps, buf, sizeof buf));
    }
    *value = (uint32_t)v;
    return GPT2_OK;
}

/* {m}, {m,}, {m,n}: after the '{'. */
static gpt2_result gpt2__gbnf_braces(gpt2__gbnf_parser* ps, uint32_t* min, uint32_t* max) {
    char buf[16];
    gpt2__gbnf_skip_space(ps);
    GPT2__TRY(gpt2__gbnf_number(ps, min));
    gpt2__gbnf_skip_space(ps);
    *max = *min;
    if (ps->pos < ps->n && ps->text[ps->pos] == ',') {
        ps->pos++;
        gpt2__gbnf_skip_space(ps);
        *max = UINT32_MAX;
        if (ps->pos < ps->n && ps->text[ps->pos] != '}') {
            const size_t at = ps->pos;
            GPT2__TRY(gpt2__gbnf_number(ps, max));
            if (*max < *min) return gpt2__gbnf_fail(*ps, at, "{%u,%u}: the most is below the least", (unsigned)*min, (unsigned)*max);
            gpt2__gbnf_skip_space(ps);
        }
    }
    if (ps->pos >= ps->n || ps->text[ps->pos] != '}') return gpt2__gbnf_fail(*ps, ps->pos, "expected '}', found %s", gpt2__gbnf_found(*ps, buf, sizeof buf));
    ps->pos++;
    return GPT2_OK;
}

/* One alternative of `rule`: terms until '|', ')', the next rule or the end. */
static gpt2_result gpt2__gbnf_sequence(gpt2__gbnf_parser* ps, uint32_t rule, gpt2__vector<gpt2__gelem>* seq) {
    char buf[16];
    for (;;) {
        gpt2__gbnf_skip_space(ps);
        if (ps->pos >= ps->n) return GPT2_OK;
        const size_t at = ps->pos;
        const char c = ps->text[at];
        if (c == '|' || c == ')' || gpt2__gbnf_definition_at(*ps, at)) return GPT2_OK;
        gpt2__vector<gpt2__gelem> atom;
        if (c == '"') {
            ps->pos++;
            while (ps->pos < ps->n && ps->text[ps->pos] != '"') {
                uint32_t cp;
                GPT2__TRY(gpt2__gbnf_char(ps, &cp));
                gpt2__gelem e;
                GPT2__TRY(gpt2__gbnf_add_class(ps, {{cp, cp}}, false, at, &e));
                atom.push_back(e);
            }
            if (ps->pos >= ps->n) return gpt2__gbnf_fail(*ps, at, "this literal has no closing '\"'");
            ps->pos++;
        } else if (c == '[') {
            ps->pos++;
            gpt2__gelem e;
            GPT2__TRY(gpt2__gbnf_class(ps, &e));
            atom.push_back(e);
        } else if (c == '.') {
            ps->pos++;
            gpt2__gelem e;
            GPT2__TRY(gpt2__gbnf_add_class(ps, {{0, 0x10FFFF}}, false, at, &e));
            atom.push_back(e);
        } else if (c == '(') {
            ps->pos++;
            const uint32_t group = gpt2__gbnf_child_rule(ps, rule, at);
            GPT2__TRY(gpt2__gbnf_alternatives(ps, group));
            if (ps->pos >= ps->n || ps->text[ps->pos] != ')')
                return gpt2__gbnf_fail(*ps, at, "this group has no closing ')'");
            ps->pos++;
            atom.push_back({GPT2__G_RULE, group});
        } else if (gpt2__gbnf_name_char(c)) {
            const std::string_view name = gpt2__gbnf_name_at(*ps, at);
            ps->pos += name.size();
            const uint32_t ref = gpt2__gbnf_rule_named(ps, name);
            if (ps->used_at[ref] == SIZE_MAX) ps->used_at[ref] = at;
            atom.push_back({GPT2__G_RULE, ref});
        } else {
            return gpt2__gbnf_fail(*ps, at, "expected a rule name, a \"literal\", a [class], '.' or '(', found %s", gpt2__gbnf_found(*ps, buf, sizeof buf));
        }
        GPT2__TRY(gpt2__gbnf_count_elems(ps, atom.size(), at));
        const size_t after_atom = ps->pos;
        gpt2__gbnf_skip_space(ps);
        const char op = ps->pos < ps->n ? ps->text[ps->pos] : 0;
        uint32_t min = 1, max = 1;
        if (op == '*' || op == '+' || op == '?' || op == '{') {
            ps->pos++;
            if (op == '*') min = 0, max = UINT32_MAX;
            else if (op == '+') max = UINT32_MAX;
            else if (op == '?') min = 0;
            else GPT2__TRY(gpt2__gbnf_braces(ps, &min, &max));
        } else {
            ps->pos = after_atom;
        }
        if (min == 1 && max == 1) seq->insert(seq->end(), atom.begin(), atom.end());
        else GPT2__TRY(gpt2__gbnf_repeat(ps, rule, std::move(atom), min, max, at, seq));
    }
}

static gpt2_result gpt2__gbnf_alternatives(gpt2__gbnf_parser* ps, uint32_t rule) {
    for (;;) {
        gpt2__vector<gpt2__gelem> seq;
        GPT2__TRY(gpt2__gbnf_sequence(ps, rule, &seq));
        ps->alts[rule].push_back(std::move(seq));
        if (ps->pos >= ps->n || ps->text[ps->pos] != '|') return GPT2_OK;
        ps->pos++;
    }
}

/* Per rule: whether it can match the empty text. */
static gpt2__vector<char> gpt2__gbnf_nullable(const gpt2__gbnf_parser& ps) {
    const size_t R = ps.alts.size();
    gpt2__vector<char> nullable(R, 0);
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t r = 0; r < R; r++) {
            if (nullable[r]) continue;
            for (const auto& alt : ps.alts[r]) {
                bool all = true;
                for (const gpt2__gelem& e : alt) all = all && e.kind == GPT2__G_RULE && nullable[e.value];
                if (all) {
                    nullable[r] = changed = true;
                    break;
                }
            }
        }
    }
    return nullable;
}

/* Left recursion: a rule that can reach itself before reading a character. Where the way back
   passes only through references that end their alternatives (tail calls: `r ::= x* r | ""`,
   `( [x]* )*`, whose inner repetition may read nothing), the matcher returns to the same node
   below and meets it again, so it stops (gpt2__gss_closure marks the nodes it met): that
   repetition of an empty iteration is accepted, as llama.cpp accepts it. Where the way back has
   a reference followed by more (`expr ::= expr "+" term`), every turn would push a node and the
   matcher would expand forever: refused, naming the cycle. Found as the strongly connected
   components of "r can begin with s" (Tarjan's, without recursion): a cycle with a reference
   that is not a tail call is an edge of that kind inside one component. */
struct gpt2__gbnf_edge {
    uint32_t to;
    bool tail; /* nothing follows the reference in its alternative */
};

static gpt2_result gpt2__gbnf_check_left_recursion(const gpt2__gbnf_parser& ps, const gpt2__vector<char>& nullable, gpt2_error* err) {
    const size_t R = ps.alts.size();
    gpt2__vector<gpt2__vector<gpt2__gbnf_edge>> edges(R);
    for (size_t r = 0; r < R; r++)
        for (const auto& alt : ps.alts[r])
            for (size_t k = 0; k < alt.size() && alt[k].kind == GPT2__G_RULE; k++) {
                edges[r].push_back({alt[k].value, k + 1 == alt.size()});
                if (!nullable[alt[k].value]) break;
            }
    const uint32_t none = UINT32_MAX;
    gpt2__vector<uint32_t> index(R, none), low(R, 0), component(R, none), stack;
    gpt2__vector<char> on_stack(R, 0);
    gpt2__vector<std::pair<uint32_t, size_t>> path; /* rule, next edge to follow */
    uint32_t next_index = 0, n_components = 0;
    for (uint32_t start = 0; start < R; start++) {
        if (index[start] != none) continue;
        path.push_back({start, 0});
        while (!path.empty()) {
            const uint32_t r = path.back().first;
            if (path.back().second == 0 && index[r] == none) {
                index[r] = low[r] = next_index++;
                stack.push_back(r);
                on_stack[r] = 1;
            }
            if (path.back().second < edges[r].size()) {
                const uint32_t s = edges[r][path.back().second++].to;
                if (index[s] == none) path.push_back({s, 0});
                else if (on_stack[s]) low[r] = std::min(low[r], index[s]);
                continue;
            }
            if (low[r] == index[r]) {
                for (uint32_t s = none; s != r;) {
                    s = stack.back();
                    stack.pop_back();
                    on_stack[s] = 0;
                    component[s] = n_components;
                }
                n_components++;
            }
            path.pop_back();
            if (!path.empty()) low[path.back().first] = std::min(low[path.back().first], low[r]);
        }
    }
    for (uint32_t r = 0; r < R; r++)
        for (const gpt2__gbnf_edge& e : edges[r]) {
            if (e.tail || component[e.to] != component[r]) continue;
            /* the cycle: r, then a shortest way back from e.to to r within the component */
            gpt2__vector<uint32_t> came_from(R, none), queue(1, e.to);
            came_from[e.to] = e.to;
            for (size_t q = 0; q < queue.size() && came_from[r] == none; q++)
                for (const gpt2__gbnf_edge& f : edges[queue[q]])
                    if (component[f.to] == component[r] && came_from[f.to] == none) came_from[f.to] = queue[q], queue.push_back(f.to);
            gpt2__vector<uint32_t> way; /* from r back to e.to */
            for (uint32_t s = r; s != e.to; s = came_from[s]) way.push_back(s);
            gpt2__string cycle = ps.names[r];
            cycle += " -> " + ps.names[e.to];
            for (size_t i = way.size(); i-- > 0;) cycle += " -> " + ps.names[way[i]];
            return gpt2__fail(err, GPT2_ERROR_BAD_GRAMMAR, "grammar: rule '%s' is left-recursive (%s); write the repetition as x* or recurse on the right",
                              ps.names[r].c_str(), cycle.c_str());
        }
    return GPT2_OK;
}

/* Parses `text` into *g (its model is set by the caller). root: the start rule's name. */
static gpt2_result gpt2__gbnf_parse(const char* text, size_t n, const char* root, gpt2_grammar* g, gpt2_error* err) {
    gpt2__gbnf_parser ps;
    ps.text = text;
    ps.n = n;
    ps.err = err;
    char buf[16];
    for (gpt2__gbnf_skip_space(&ps); ps.pos < ps.n; gpt2__gbnf_skip_space(&ps)) {
        const size_t at = ps.pos;
        const std::string_view name = gpt2__gbnf_name_at(ps, at);
        if (name.empty()) return gpt2__gbnf_fail(ps, at, "expected a rule name, found %s", gpt2__gbnf_found(ps, buf, sizeof buf));
        ps.pos += name.size();
        gpt2__gbnf_skip_space(&ps);
        if (ps.n - ps.pos < 3 || std::memcmp(ps.text + ps.pos, "::=", 3) != 0)
            return gpt2__gbnf_fail(ps, ps.pos, "expected '::=' after the rule name '%.*s', found %s", (int)name.size(), name.data(), gpt2__gbnf_found(ps, buf, sizeof buf));
        ps.pos += 3;
        const uint32_t rule = gpt2__gbnf_rule_named(&ps, name);
        if (ps.defined_at[rule] != SIZE_MAX) {
            int line, column;
            gpt2__gbnf_where(ps, ps.defined_at[rule], &line, &column);
            return gpt2__gbnf_fail(ps, at, "rule '%.*s' is defined twice (first at line %d)", (int)name.size(), name.data(), line);
        }
        ps.defined_at[rule] = at;
        GPT2__TRY(gpt2__gbnf_alternatives(&ps, rule));
        if (ps.pos < ps.n && !gpt2__gbnf_definition_at(ps, ps.pos))
            return gpt2__gbnf_fail(ps, ps.pos, "unexpected %s", gpt2__gbnf_found(ps, buf, sizeof buf));
    }
    if (ps.alts.empty()) return gpt2__fail(err, GPT2_ERROR_BAD_GRAMMAR, "grammar: no rules (expected `root ::= ...`)");
    for (size_t r = 0; r < ps.alts.size(); r++)
        if (ps.defined_at[r] == SIZE_MAX) return gpt2__gbnf_fail(ps, ps.used_at[r], "rule '%s' is used but never defined", ps.names[r].c_str());
    const char* root_name = root ? root : "root";
    const auto root_rule = ps.written.find(root_name);
    if (root_rule == ps.written.end())
        return gpt2__fail(err, GPT2_ERROR_BAD_GRAMMAR, "grammar: no rule named '%s', the start rule%s", root_name, root ? "" : " (root = NULL means \"root\")");
    const gpt2__vector<char> nullable = gpt2__gbnf_nullable(ps);
    GPT2__TRY(gpt2__gbnf_check_left_recursion(ps, nullable, err));
    g->classes = std::move(ps.classes);
    g->root = root_rule->second;
    g->rules.resize(ps.alts.size());
    for (size_t r = 0; r < ps.alts.size(); r++) {
        g->rules[r].name = ps.names[r];
        g->rules[r].alts_begin = (uint32_t)g->alt_starts.size();
        for (const auto& alt : ps.alts[r]) {
            g->alt_starts.push_back((uint32_t)g->elems.size());
            g->elems.insert(g->elems.end(), alt.begin(), alt.end());
            g->elems.push_back({GPT2__G_END, 0});
        }
        g->rules[r].alts_end = (uint32_t)g->alt_starts.size();
    }
    g->stands_for.assign(g->elems.size(), UINT32_MAX);
    for (size_t r = 0; r < ps.alts.size(); r++) { /* a copy and the one it stands for have the same alternatives, element for element */
        if (ps.stands_for[r] == UINT32_MAX) continue;
        const gpt2__gelem x = ps.alts[r][0][0]; /* what the copy repeats */
        if (x.kind == GPT2__G_RULE && nullable[x.value]) continue;
        for (uint32_t a = 0; a < g->rules[r].alts_end - g->rules[r].alts_begin; a++)
            for (uint32_t e = g->alt_starts[g->rules[r].alts_begin + a], k = 0; g->elems[e].kind != GPT2__G_END; e++, k++)
                g->stands_for[e] = g->alt_starts[g->rules[ps.stands_for[r]].alts_begin + a] + k;
    }
    return GPT2_OK;
}

/* A code point for a message: 'c' when printable ASCII, else U+XXXX. */
static gpt2__string gpt2__code_point_text(uint32_t cp) {
    char buf[16];
    if (cp >= 0x20 && cp < 0x7F) std::snprintf(buf, sizeof buf, "'%c'", (char)cp);
    else std::snprintf(buf, sizeof buf, "U+%04X", (unsigned)cp);
    return buf;
}

/* A character class for a message: the one code point, or its ranges in brackets. */
static gpt2__string gpt2__class_text(const gpt2__code_points& c) {
    if (c.ranges.size() == 1 && c.ranges[0].first == c.ranges[0].second) return gpt2__code_point_text(c.ranges[0].first);
    gpt2__string text = "[";
    for (const auto& r : c.ranges) {
        if (text.size() > 40) return text + "...]";
        text += gpt2__code_point_text(r.first);
        if (r.second != r.first) text += "-" + gpt2__code_point_text(r.second);
        text += r.first == c.ranges.back().first ? "" : " ";
    }
    return text + "]";
}

/* Whether some finite text of the writable classes matches the start rule (class_writable: a
   flag per class; NULL, every class). The rules that can produce one are found as a fixed point.
   A $ref cycle with no way out ({"properties": {"a": {"$ref": "#"}}, "required": ["a"]}) makes a
   grammar nothing completes. */
static bool gpt2__grammar_root_productive(const gpt2_grammar& g, const gpt2__vector<char>* class_writable) {
    gpt2__vector<char> productive(g.rules.size(), 0);
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t r = 0; r < g.rules.size(); r++) {
            for (uint32_t a = g.rules[r].alts_begin; a < g.rules[r].alts_end && !productive[r]; a++) {
                bool all = true;
                for (uint32_t e = g.alt_starts[a]; all && g.elems[e].kind != GPT2__G_END; e++)
                    all = g.elems[e].kind == GPT2__G_RULE ? productive[g.elems[e].value] != 0 : !class_writable || (*class_writable)[g.elems[e].value];
                if (all) productive[r] = changed = true;
            }
        }
    }
    return productive[g.root] != 0;
}

/* A grammar whose every sentence needs a character no token holds (a JSON Schema's '{' for a
   model trained on plays, whose vocabulary has no braces) would let generation run until the
   mask is empty, and fail there; it is refused when it is made instead ("what: ..."), naming the
   characters no token holds among those the start rule reaches. A character counts as writable
   when some token holds it: a vocabulary of every byte (GPT-2's) writes everything. A grammar
   with no finite sentence at all (root ::= "a" root) is not the vocabulary's doing: it passes. */
static gpt2_result gpt2__grammar_check_writable(const gpt2_grammar& g, const gpt2__tokenizer& tok, const char* what, gpt2_error* err) {
    bool every_byte = true;
    for (int32_t id : tok.byte_id) every_byte = every_byte && id >= 0;
    if (every_byte) return GPT2_OK;
    gpt2__vector<uint32_t> writable; /* the code points the tokens hold */
    for (size_t i = 0; i + 1 < tok.offsets.size(); i++)
        for (size_t at = tok.offsets[i], end = tok.offsets[i + 1]; at < end;) {
            uint32_t cp;
            at += gpt2__utf8_decode((const unsigned char*)tok.bytes.data() + at, end - at, &cp);
            if (cp != GPT2__INVALID_CP) writable.push_back(cp);
        }
    gpt2__vector<char> class_writable(g.classes.size(), 0);
    for (size_t c = 0; c < g.classes.size(); c++)
        for (size_t i = 0; i < writable.size() && !class_writable[c]; i++) class_writable[c] = gpt2__class_has(g.classes[c], writable[i]);
    if (gpt2__grammar_root_productive(g, &class_writable) || !gpt2__grammar_root_productive(g, nullptr)) return GPT2_OK;
    gpt2__vector<char> reached(g.rules.size(), 0);
    gpt2__vector<uint32_t> queue(1, g.root);
    reached[g.root] = 1;
    gpt2__vector<gpt2__string> lacking;
    for (size_t q = 0; q < queue.size(); q++)
        for (uint32_t a = g.rules[queue[q]].alts_begin; a < g.rules[queue[q]].alts_end; a++)
            for (uint32_t e = g.alt_starts[a]; g.elems[e].kind != GPT2__G_END; e++) {
                const uint32_t v = g.elems[e].value;
                if (g.elems[e].kind == GPT2__G_RULE) {
                    if (!reached[v]) reached[v] = 1, queue.push_back(v);
                } else if (!class_writable[v]) {
                    const gpt2__string text = gpt2__class_text(g.classes[v]);
                    if (std::find(lacking.begin(), lacking.end(), text) == lacking.end()) lacking.push_back(text);
                }
            }
    gpt2__string named;
    for (size_t i = 0; i < lacking.size() && i < 4; i++) named += (i ? ", " : "") + lacking[i];
    return gpt2__fail(err, GPT2_ERROR_BAD_GRAMMAR, "%s: this model's vocabulary cannot write any text the %s accepts: no token holds %s%s", what,
                      what, named.c_str(), lacking.size() > 4 ? ", ..." : "");
}

/* ---- src/grammar/matcher.h ---- */
/* Matching text against a grammar, a character at a time, and the token masks built on it.

   The parser's state is the set of every way the text so far can continue: a set of stacks, as
   in llama.cpp's grammar sampler. A stack's top is a character class the next character may
   match; below it, where to return to when the rule it is in ends. The stacks share their
   tails: a stack is a node (a position in the grammar, the node below it), nodes are interned
   (one node per position and node below), so a state is a sorted list of node ids and two
   states are equal exactly when their lists are. An ambiguous grammar keeps many stacks alive;
   their number is bounded (GPT2__GRAMMAR_MAX_STACKS, an error beyond it), and a call that
   returns to a rule's end pops at once (x* is r ::= x r | empty: its stack does not grow).

   Text is bytes and the grammar reads code points: a state carries the UTF-8 character it is
   inside, and a byte that starts or continues one is kept only when some top's class holds a
   code point beginning with those bytes. */

enum { GPT2__GRAMMAR_MAX_STACKS = 1 << 12, GPT2__CLOSURE_MAX_STEPS = 1 << 20, GPT2__GSS_MAX_NODES = 1 << 24, GPT2__GSS_COMPACT_AT = 1 << 18 };

struct gpt2__gnode {
    uint32_t pos;    /* an index into gpt2_grammar::elems */
    uint32_t parent; /* the node below; 0 is the empty stack (the sentence ends there) */
};

struct gpt2__gstate {
    gpt2__vector<uint32_t> tops; /* node ids whose pos is a character class, sorted */
    bool complete = false;       /* the text so far is a whole sentence */
    bool escaped = false;        /* a rule ended over gpt2__gss::unknown (gpt2__context_tokens_make) */
    uint8_t lead = 0;            /* inside a UTF-8 character: its first byte; 0 = between characters */
    uint8_t need = 0;            /* its bytes still to come */
    uint32_t partial = 0;        /* its bits so far */
};

/* A closure gpt2__gstate_advance made: from the stacks a code point continued (`continued`,
   the work it started from) to the state's tops. */
struct gpt2__advanced {
    uint32_t continued_begin, continued_end; /* in gpt2__gss::advanced_continued */
    uint32_t tops_begin, tops_end;           /* in gpt2__gss::advanced_tops */
    bool complete, escaped;
};

/* The nodes (graph-structured stack) and the scratch of the closure. */
struct gpt2__gss {
    const gpt2_grammar* g = nullptr;
    gpt2__vector<gpt2__gnode> nodes;
    gpt2__vector<uint32_t> slots; /* open addressing: node ids by (pos, parent); 0 = free */
    gpt2__vector<uint32_t> seen;  /* per node: the closure that last met it */
    uint32_t epoch = 0;
    gpt2__vector<gpt2__gnode> work;
    bool overflow = false; /* too many stacks or nodes: the grammar is too ambiguous */
    uint32_t unknown = UINT32_MAX; /* a node standing for a stack not known (gpt2__context_tokens_make) */
    /* gpt2__gstate_advance's closures by the stacks the code point continued: every code point
       a state's classes take alike (each letter, each CJK character inside a JSON string) leads
       to the state one closure found. Forgotten when full and when nodes are renumbered. */
    std::unordered_map<uint64_t, uint32_t, std::hash<uint64_t>, std::equal_to<uint64_t>, gpt2__allocator<std::pair<const uint64_t, uint32_t>>> advanced_index;
    gpt2__vector<gpt2__advanced> advanced;
    gpt2__vector<gpt2__gnode> advanced_continued;
    gpt2__vector<uint32_t> advanced_tops;
};

enum { GPT2__ADVANCED_MAX = 1 << 12 };

static void gpt2__gss_forget_advanced(gpt2__gss* s) {
    s->advanced_index.clear();
    s->advanced.clear();
    s->advanced_continued.clear();
    s->advanced_tops.clear();
}

static uint32_t gpt2__gss_hash(uint32_t pos, uint32_t parent) {
    uint64_t h = ((uint64_t)pos << 32 | parent) * 0x9e3779b97f4a7c15ull;
    return (uint32_t)(h >> 32);
}

static void gpt2__gss_rehash(gpt2__gss* s, size_t n_slots) {
    s->slots.assign(n_slots, 0);
    const uint32_t mask = (uint32_t)n_slots - 1;
    for (uint32_t id = 1; id < s->nodes.size(); id++) {
        uint32_t i = gpt2__gss_hash(s->nodes[id].pos, s->nodes[id].parent) & mask;
        while (s->slots[i]) i = (i + 1) & mask;
        s->slots[i] = id;
    }
}

/* The stacks of no text, whatever `s` held before (its memory is kept). */
static void gpt2__gss_init(gpt2__gss* s, const gpt2_grammar* g) {
    s->g = g;
    s->nodes.assign(1, gpt2__gnode{UINT32_MAX, 0});
    s->seen.assign(1, 0);
    s->work.clear();
    s->overflow = false;
    s->unknown = UINT32_MAX;
    gpt2__gss_rehash(s, 1024);
    gpt2__gss_forget_advanced(s);
}

static uint32_t gpt2__gss_intern(gpt2__gss* s, uint32_t pos, uint32_t parent) {
    uint32_t mask = (uint32_t)s->slots.size() - 1;
    uint32_t i = gpt2__gss_hash(pos, parent) & mask;
    for (; s->slots[i]; i = (i + 1) & mask) {
        const gpt2__gnode& n = s->nodes[s->slots[i]];
        if (n.pos == pos && n.parent == parent) return s->slots[i];
    }
    if (s->nodes.size() >= GPT2__GSS_MAX_NODES) {
        s->overflow = true;
        return 0;
    }
    const uint32_t id = (uint32_t)s->nodes.size();
    s->nodes.push_back({pos, parent});
    s->seen.push_back(0);
    if (s->nodes.size() * 2 > s->slots.size()) gpt2__gss_rehash(s, s->slots.size() * 2);
    else s->slots[i] = id;
    return id;
}

/* Follows every way from the positions in s->work (each with the node below it) to the next
   character class, into `out`: a rule reference opens each of its alternatives, an
   alternative's end returns to the node below. */
static void gpt2__gss_closure(gpt2__gss* s, gpt2__gstate* out) {
    const gpt2_grammar& g = *s->g;
    if (++s->epoch == 0) { /* wrapped: forget every mark */
        std::fill(s->seen.begin(), s->seen.end(), 0);
        s->epoch = 1;
    }
    out->tops.clear();
    out->complete = out->escaped = false;
    for (size_t steps = 0; !s->work.empty() && !s->overflow; steps++) {
        if (steps > GPT2__CLOSURE_MAX_STEPS) { /* ambiguity that makes no stacks yet: bounded work all the same */
            s->overflow = true;
            break;
        }
        gpt2__gnode at = s->work.back();
        s->work.pop_back();
        while (g.elems[at.pos].kind == GPT2__G_END) {
            if (at.parent == 0 || at.parent == s->unknown) break;
            at = s->nodes[at.parent];
        }
        const gpt2__gelem e = g.elems[at.pos];
        if (e.kind == GPT2__G_END) {
            (at.parent == 0 ? out->complete : out->escaped) = true;
            continue;
        }
        const uint32_t id = gpt2__gss_intern(s, at.pos, at.parent);
        if (s->seen[id] == s->epoch) continue;
        s->seen[id] = s->epoch;
        if (e.kind == GPT2__G_CHARS) {
            out->tops.push_back(id);
            if (out->tops.size() > GPT2__GRAMMAR_MAX_STACKS) s->overflow = true; /* before the work grows further */
            continue;
        }
        /* the rule's alternatives, returning after the reference (or straight to the node
           below when nothing follows it there: tail calls keep repetitions flat) */
        const uint32_t ret = g.elems[at.pos + 1].kind == GPT2__G_END ? at.parent : gpt2__gss_intern(s, at.pos + 1, at.parent);
        const gpt2__grule& r = g.rules[e.value];
        for (uint32_t a = r.alts_begin; a < r.alts_end; a++) s->work.push_back({g.alt_starts[a], ret});
    }
    std::sort(out->tops.begin(), out->tops.end());
    if (s->overflow) { /* dead: the caller reports it */
        out->tops.clear();
        out->complete = out->escaped = false;
        s->work.clear();
    }
}

/* The state before any text: the start rule's alternatives. */
static void gpt2__gstate_start(gpt2__gss* s, gpt2__gstate* out) {
    const gpt2__grule& r = s->g->rules[s->g->root];
    for (uint32_t a = r.alts_begin; a < r.alts_end; a++) s->work.push_back({s->g->alt_starts[a], 0});
    gpt2__gss_closure(s, out);
    out->lead = out->need = 0;
    out->partial = 0;
}

/* The state after one more code point; false when the text cannot continue with it. */
static bool gpt2__gstate_advance(gpt2__gss* s, const gpt2__gstate& from, uint32_t cp, gpt2__gstate* to) {
    uint64_t h = 0x9e3779b97f4a7c15ull;
    for (uint32_t id : from.tops) {
        const gpt2__gnode n = s->nodes[id];
        if (gpt2__class_has(s->g->classes[s->g->elems[n.pos].value], cp)) {
            s->work.push_back({n.pos + 1, n.parent});
            h = (h ^ id) * 0x100000001b3ull;
        }
    }
    const auto found = s->advanced_index.find(h);
    if (found != s->advanced_index.end()) {
        const gpt2__advanced& a = s->advanced[found->second];
        const size_t n = a.continued_end - a.continued_begin;
        bool same = n == s->work.size();
        for (size_t k = 0; same && k < n; k++) {
            const gpt2__gnode& was = s->advanced_continued[a.continued_begin + k];
            same = was.pos == s->work[k].pos && was.parent == s->work[k].parent;
        }
        if (same) {
            s->work.clear();
            to->tops.assign(s->advanced_tops.begin() + a.tops_begin, s->advanced_tops.begin() + a.tops_end);
            to->complete = a.complete;
            to->escaped = a.escaped;
            return !to->tops.empty() || to->complete || to->escaped;
        }
    }
    const bool remember = found == s->advanced_index.end(); /* else another set of stacks has the hash: not kept */
    if (remember && s->advanced.size() >= GPT2__ADVANCED_MAX) gpt2__gss_forget_advanced(s);
    gpt2__advanced a{(uint32_t)s->advanced_continued.size(), 0, 0, 0, false, false};
    if (remember) s->advanced_continued.insert(s->advanced_continued.end(), s->work.begin(), s->work.end());
    gpt2__gss_closure(s, to);
    if (remember && !s->overflow) {
        a.continued_end = (uint32_t)s->advanced_continued.size();
        a.tops_begin = (uint32_t)s->advanced_tops.size();
        s->advanced_tops.insert(s->advanced_tops.end(), to->tops.begin(), to->tops.end());
        a.tops_end = (uint32_t)s->advanced_tops.size();
        a.complete = to->complete;
        a.escaped = to->escaped;
        s->advanced_index.emplace(h, (uint32_t)s->advanced.size());
        s->advanced.push_back(a);
    } else if (remember) {
        s->advanced_continued.resize(a.continued_begin);
    }
    return !to->tops.empty() || to->complete || to->escaped;
}

/* Whether some top's class holds a code point in [lo, hi]. */
static bool gpt2__gstate_meets(const gpt2__gss* s, const gpt2__gstate& st, uint32_t lo, uint32_t hi) {
    for (uint32_t id : st.tops)
        if (gpt2__class_meets(s->g->classes[s->g->elems[s->nodes[id].pos].value], lo, hi)) return true;
    return false;
}

/* The state after one more byte; false when no sentence continues the text with it. */
static bool gpt2__gstate_advance_byte(gpt2__gss* s, const gpt2__gstate& from, uint8_t b, gpt2__gstate* to) {
    uint32_t partial;
    uint8_t need, lead;
    if (from.need == 0) {
        if (b < 0x80) {
            to->lead = to->need = 0;
            to->partial = 0;
            return gpt2__gstate_advance(s, from, b, to);
        }
        if (b >= 0xC2 && b <= 0xDF) need = 1, partial = b & 0x1Fu;
        else if (b >= 0xE0 && b <= 0xEF) need = 2, partial = b & 0x0Fu;
        else if (b >= 0xF0 && b <= 0xF4) need = 3, partial = b & 0x07u;
        else return false;
        lead = b;
    } else {
        /* the second byte's range is narrower after E0 (overlong), ED (surrogates), F0 (overlong), F4 (> U+10FFFF) */
        const bool second = (from.lead >= 0xE0 && from.need == (from.lead >= 0xF0 ? 3 : 2));
        const uint8_t lo = second && from.lead == 0xE0 ? 0xA0 : second && from.lead == 0xF0 ? 0x90 : 0x80;
        const uint8_t hi = second && from.lead == 0xED ? 0x9F : second && from.lead == 0xF4 ? 0x8F : 0xBF;
        if (b < lo || b > hi) return false;
        need = (uint8_t)(from.need - 1);
        partial = from.partial << 6 | (b & 0x3Fu);
        lead = from.lead;
        if (need == 0) {
            to->lead = to->need = 0;
            to->partial = 0;
            return gpt2__gstate_advance(s, from, partial, to);
        }
    }
    /* inside a character: the same stacks, kept while some class holds a code point it can become
       (no shorter sequence could write it: the lead's length sets the least) */
    const uint32_t least = lead < 0xE0 ? 0x80 : lead < 0xF0 ? 0x800 : 0x10000;
    const uint32_t lo = std::max(partial << (6 * need), least), hi = std::min((partial << (6 * need)) | ((1u << (6 * need)) - 1), 0x10FFFFu);
    if (!gpt2__gstate_meets(s, from, lo, hi)) return false;
    to->tops = from.tops;
    to->complete = to->escaped = false;
    to->lead = lead;
    to->need = need;
    to->partial = partial;
    return true;
}

/* Keeps only the nodes `st` reaches (renumbered, in the same order): a long generation makes
   nodes for every prefix the masks tried. */
static void gpt2__gss_compact(gpt2__gss* s, gpt2__gstate* st) {
    gpt2__vector<uint32_t> new_id(s->nodes.size(), 0);
    for (uint32_t id : st->tops)
        for (uint32_t n = id; n && !new_id[n]; n = s->nodes[n].parent) new_id[n] = 1;
    gpt2__vector<gpt2__gnode> kept(1, s->nodes[0]);
    for (uint32_t id = 1; id < s->nodes.size(); id++)
        if (new_id[id]) { /* a node's parent is older than it, so it is renumbered already */
            new_id[id] = (uint32_t)kept.size();
            kept.push_back({s->nodes[id].pos, new_id[s->nodes[id].parent]});
        }
    for (uint32_t& id : st->tops) id = new_id[id];
    gpt2__gss_forget_advanced(s);
    s->nodes = std::move(kept);
    s->seen.assign(s->nodes.size(), 0);
    s->epoch = 0;
    size_t n_slots = 1024;
    while (n_slots < s->nodes.size() * 2) n_slots *= 2;
    gpt2__gss_rehash(s, n_slots);
}

static bool gpt2__gstate_equal(const gpt2__gstate& a, const gpt2__gstate& b) {
    return a.tops == b.tops && a.complete == b.complete && a.escaped == b.escaped && a.lead == b.lead && a.need == b.need && a.partial == b.partial;
}

static uint64_t gpt2__gstate_hash(const gpt2__gstate& s) {
    uint64_t h = 0x9e3779b97f4a7c15ull ^ ((uint64_t)s.escaped << 41 | (uint64_t)s.complete << 40 | (uint64_t)s.lead << 32 | (uint64_t)s.need << 24) ^ s.partial;
    for (uint32_t id : s.tops) h = (h ^ id) * 0x100000001b3ull;
    return h ^ (h >> 29);
}

/* The states met in this generation, each stored once, with the steps between them and the
   masks made for them. A mask walks the vocabulary's trie a byte per node, and most nodes take a
   step taken before (inside a JSON string every ordinary byte leads back to the same state):
   read from the table, it costs no closure. A state's mask never changes, so a state the text
   comes back to costs a copy of its mask. Cleared when full, and when the nodes are renumbered
   (gpt2__gss_compact). */
enum { GPT2__STATE_TABLE_SIZE = 4096, GPT2__MASK_CACHE_SIZE = 256 };
enum : int32_t { GPT2__STEP_UNKNOWN = -1, GPT2__STEP_DEAD = -2 };
struct gpt2__state_table {
    std::unordered_map<uint64_t, int32_t, std::hash<uint64_t>, std::equal_to<uint64_t>, gpt2__allocator<std::pair<const uint64_t, int32_t>>> id_of;
    gpt2__vector<gpt2__gstate> states;
    gpt2__vector<int32_t> next;      /* 256 per state: the state after each byte, or a GPT2__STEP_ */
    gpt2__vector<int32_t> mask_slot; /* per state: where its mask is in `masks`, or -1 */
    gpt2__vector<uint32_t> masks;
    int32_t n_masks = 0;
};

static void gpt2__state_table_clear(gpt2__state_table* t) {
    t->id_of.clear();
    t->states.clear();
    t->next.clear();
    t->mask_slot.clear();
    t->masks.clear();
    t->n_masks = 0;
}

/* The id of `s`, added if new; -1 when the table is full or another state has its hash (the
   walk then goes on without the table below it). */
static int32_t gpt2__state_table_id(gpt2__state_table* t, const gpt2__gstate& s) {
    const uint64_t h = gpt2__gstate_hash(s);
    const auto found = t->id_of.find(h);
    if (found != t->id_of.end()) return gpt2__gstate_equal(t->states[(size_t)found->second], s) ? found->second : -1;
    if (t->states.size() >= GPT2__STATE_TABLE_SIZE) return -1;
    const int32_t id = (int32_t)t->states.size();
    t->id_of.emplace(h, id);
    t->states.push_back(s);
    t->next.resize(t->next.size() + 256, GPT2__STEP_UNKNOWN);
    t->mask_slot.push_back(-1);
    return id;
}

/* A state on the trie walk's path: its id in the table, or (id -1) the state itself. */
struct gpt2__walk_level {
    int32_t id = -1;
    gpt2__gstate state;
};

/* One generation's grammar: the state after the text generated so far, the scratch of the
   mask's walk over the vocabulary's trie (a state per depth), and the table of states. */
struct gpt2__grammar_matcher {
    const gpt2_grammar* g = nullptr;
    gpt2__gss gss;
    gpt2__gstate state;
    gpt2__vector<gpt2__walk_level> levels;
    gpt2__vector<const gpt2__context_tokens*> decided; /* what the contexts of the state's stacks decide */
    gpt2__vector<uint32_t> entries; /* the trie nodes they leave uncertain */
    gpt2__gstate next;              /* gpt2__matcher_feed's state after a byte */
    gpt2__state_table table;
};

/* The matcher at the start of a sentence, whatever it held: the table's states name nodes of the
   stacks made before, so they go with them. */
static void gpt2__matcher_begin(gpt2__grammar_matcher* m, const gpt2_grammar* g) {
    m->g = g;
    gpt2__gss_init(&m->gss, g);
    gpt2__state_table_clear(&m->table);
    gpt2__gstate_start(&m->gss, &m->state);
}

static gpt2_result gpt2__matcher_overflow(gpt2_error* err) {
    return gpt2__fail(err, GPT2_ERROR_BAD_GRAMMAR, "grammar: the text so far can be read in more than %d ways at once (or needs more than %d steps "
                      "or %d stack nodes to follow); the grammar is too ambiguous: make its alternatives start differently",
                      (int)GPT2__GRAMMAR_MAX_STACKS, (int)GPT2__CLOSURE_MAX_STEPS, (int)GPT2__GSS_MAX_NODES);
}

/* Moves the state over `bytes`; *alive false when the text leaves the grammar (the state is
   then not to be used). */
static gpt2_result gpt2__matcher_feed(gpt2__grammar_matcher* m, std::string_view bytes, bool* alive, gpt2_error* err) {
    *alive = true;
    for (char c : bytes) {
        *alive = gpt2__gstate_advance_byte(&m->gss, m->state, (uint8_t)c, &m->next);
        if (m->gss.overflow) return gpt2__matcher_overflow(err);
        if (!*alive) return GPT2_OK;
        std::swap(m->state, m->next);
    }
    if (m->gss.nodes.size() > GPT2__GSS_COMPACT_AT) {
        gpt2__gss_compact(&m->gss, &m->state);
        gpt2__state_table_clear(&m->table);
    }
    return GPT2_OK;
}

/* The text so far is a whole sentence that nothing may extend. */
static bool gpt2__matcher_finished(const gpt2__grammar_matcher& m) {
    return m.state.complete && m.state.tops.empty();
}

/* The id of a state the walk reaches: none for a state inside a UTF-8 character. Those are
   many (a state per distinct start of a character in the vocabulary: hundreds, each 256 steps
   in the table) and cheap to step from (no closure: the same stacks), and the character's end
   finds its state in gpt2__gss::advanced. */
static int32_t gpt2__walk_id(gpt2__state_table* t, const gpt2__gstate& s) {
    return s.need ? -1 : gpt2__state_table_id(t, s);
}

/* The walk's step from `from` over byte b, through the table where it can; false when no
   sentence continues the text with it. */
static bool gpt2__walk_step(gpt2__grammar_matcher* m, const gpt2__walk_level& from, uint8_t b, gpt2__walk_level* to) {
    gpt2__state_table& t = m->table;
    if (from.id < 0) {
        if (!gpt2__gstate_advance_byte(&m->gss, from.state, b, &to->state)) return false;
        to->id = gpt2__walk_id(&t, to->state);
        return true;
    }
    const size_t step = (size_t)from.id * 256 + b;
    if (t.next[step] != GPT2__STEP_UNKNOWN) {
        to->id = t.next[step];
        return to->id != GPT2__STEP_DEAD;
    }
    if (!gpt2__gstate_advance_byte(&m->gss, t.states[(size_t)from.id], b, &to->state)) {
        if (!m->gss.overflow) t.next[step] = GPT2__STEP_DEAD;
        return false;
    }
    to->id = gpt2__walk_id(&t, to->state);
    if (to->id >= 0) t.next[step] = to->id;
    return true;
}

/* Sets the bit of every token of trie nodes [begin, end) (whole subtrees) whose bytes keep the
   text in the grammar, walking through the table from levels[depth - 1] of the first node (the
   state, for the whole trie). */
static gpt2_result gpt2__matcher_walk(gpt2__grammar_matcher* m, size_t begin, size_t end, uint32_t* allowed, gpt2_error* err) {
    const gpt2__token_trie& trie = m->g->model->token_trie;
    for (size_t i = begin; i < end;) {
        const size_t d = trie.depth[i];
        if (!gpt2__walk_step(m, m->levels[d - 1], trie.byte[i], &m->levels[d])) {
            if (m->gss.overflow) return gpt2__matcher_overflow(err);
            i = trie.skip[i];
            continue;
        }
        for (uint32_t k = trie.tokens_begin[i]; k < trie.tokens_begin[i + 1]; k++) {
            const int32_t token = trie.tokens[k];
            allowed[token >> 5] |= 1u << (token & 31);
        }
        i++;
    }
    return GPT2_OK;
}

/* A walk level's state: the table's copy when it has one (a step read from the table leaves
   `state` as it was). */
static const gpt2__gstate& gpt2__walk_state(const gpt2__grammar_matcher& m, const gpt2__walk_level& level) {
    return level.id >= 0 ? m.table.states[(size_t)level.id] : level.state;
}

/* Whether every plain byte (gpt2__plain_byte) leads from the level's state back to it, as in a
   JSON string's body: then a subtree of plain bytes stays inside. Cached per state id. */
static bool gpt2__loops_on_plain(gpt2__grammar_matcher* mk, gpt2__vector<int8_t>* cache, const gpt2__walk_level& level) {
    if (level.id < 0) return false;
    if (cache->size() <= (size_t)level.id) cache->resize((size_t)level.id + 1, -1);
    int8_t& known = (*cache)[(size_t)level.id];
    if (known < 0) {
        known = 1;
        gpt2__walk_level next;
        for (int b = 0x20; b < 0x7F && known; b++)
            known = !gpt2__plain_byte((uint8_t)b) || (gpt2__walk_step(mk, level, (uint8_t)b, &next) && next.id == level.id);
    }
    return known == 1;
}

/* The scratch of gpt2__context_tokens_make: a matcher over the context's stack, its table, the
   walk's levels. A grammar keeps one (under its contexts' mutex), so that a schema making tens of
   thousands of contexts does not allocate each one's anew. */
struct gpt2__context_maker {
    gpt2__grammar_matcher matcher;
    gpt2__vector<char> inside, escaped; /* per walk depth; escaped: a path passed the context's end */
    gpt2__vector<int8_t> loops;         /* gpt2__loops_on_plain's, per state id */
};

/* The grammar's maker, made on first use; NULL when out of memory. Called under g->contexts_mutex. */
static gpt2__context_maker* gpt2__context_maker_of(const gpt2_grammar* g) {
    if (!g->context_maker) {
        void* memory = GPT2_MALLOC(sizeof(gpt2__context_maker));
        if (memory) g->context_maker = new (memory) gpt2__context_maker();
    }
    return g->context_maker;
}

static void gpt2__context_maker_free(gpt2__context_maker* maker) {
    if (!maker) return;
    maker->~gpt2__context_maker();
    GPT2_FREE(maker);
}

/* Leaves every token to the walk from the state. */
static void gpt2__context_tokens_undecided(const gpt2__token_trie& trie, gpt2__context_tokens* out) {
    out->accepted.clear();
    out->uncertain.clear();
    for (size_t first = 0; first < trie.byte.size(); first = trie.skip[first]) out->uncertain.push_back((uint32_t)first | GPT2__WHOLE_SUBTREE);
}

/* The tokens a context decides alone (XGrammar's context-independent tokens, with a few nodes of
   the stack known): a walk of the trie from the stack of the context's positions over a node that
   stands for the rest of the stack, unknown. A token read whole inside the context is accepted
   whatever the rest; one refused before the context ends is refused whatever it is; the others
   pass its end, and the rest decides: uncertain. Too ambiguous to follow here: every token is
   left to the walk from the state (which then reports it). */
static void gpt2__context_tokens_make(const gpt2_grammar* g, gpt2__context_maker* maker, gpt2__context_tokens* out) {
    const gpt2_model& model = *g->model;
    const gpt2__token_trie& trie = model.token_trie;
    gpt2__grammar_matcher& mk = maker->matcher;
    mk.g = g;
    gpt2__gss& gss = mk.gss;
    gpt2__gss_init(&gss, g);
    gpt2__state_table_clear(&mk.table);
    uint32_t below = 0;
    if (out->context.size() == GPT2__CONTEXT_DEPTH) {
        gss.unknown = below = (uint32_t)gss.nodes.size();
        gss.nodes.push_back({UINT32_MAX, 0});
        gss.seen.push_back(0);
    }
    for (size_t k = out->context.size(); k-- > 0;) below = gpt2__gss_intern(&gss, out->context[k], below);
    mk.levels.resize((size_t)trie.max_depth + 1);
    mk.levels[0].state.tops.assign(1, below);
    mk.levels[0].id = gpt2__state_table_id(&mk.table, mk.levels[0].state);
    gpt2__vector<char>& inside = maker->inside;
    gpt2__vector<char>& escaped = maker->escaped;
    inside.assign((size_t)trie.max_depth + 1, 1);
    escaped.assign((size_t)trie.max_depth + 1, 0);
    gpt2__vector<int8_t>& loops = maker->loops;
    loops.clear();
    out->accepted.assign(((size_t)model.n_vocab + 31) / 32, 0);
    out->uncertain.clear();
    for (size_t i = 0; i < trie.byte.size();) {
        const size_t d = trie.depth[i];
        if (!inside[d - 1] || (out->clipped && d > GPT2__CLIP_BYTES)) { /* only paths past the context's end got here, or a
                                                                              token a clipped context cannot judge: all of the subtree is uncertain */
            out->uncertain.push_back((uint32_t)i | GPT2__WHOLE_SUBTREE);
            i = trie.skip[i];
            continue;
        }
        const bool ok = gpt2__walk_step(&mk, mk.levels[d - 1], trie.byte[i], &mk.levels[d]);
        if (gss.overflow) {
            gpt2__context_tokens_undecided(trie, out);
            return;
        }
        const gpt2__gstate* st = ok ? &gpt2__walk_state(mk, mk.levels[d]) : nullptr;
        inside[d] = ok && (!st->tops.empty() || st->complete); /* complete: the stack was known to its end, and the text is a sentence */
        escaped[d] = escaped[d - 1] || (ok && st->escaped);
        if (!inside[d] && !escaped[d]) {
            i = trie.skip[i];
            continue;
        }
        if (!inside[d] && trie.tokens_begin[i] < trie.tokens_begin[i + 1]) out->uncertain.push_back((uint32_t)i);
        /* inside a string's body, a subtree of plain bytes is accepted whole (a clipped context
           judges no token past GPT2__CLIP_BYTES) */
        const bool whole = inside[d] && !out->clipped && trie.skip[i] > i + 1 && trie.plain_below[i] && gpt2__loops_on_plain(&mk, &loops, mk.levels[d]);
        const size_t next = whole ? trie.skip[i] : i + 1;
        for (uint32_t k = trie.tokens_begin[i]; inside[d] && k < trie.tokens_begin[next]; k++) {
            const int32_t token = trie.tokens[k];
            out->accepted[token >> 5] |= 1u << (token & 31);
        }
        i = next;
    }
}

/* Keeps only the nonzero words of `accepted` where they are fewer than half, and returns the
   bytes the context holds. */
static size_t gpt2__context_tokens_compact(gpt2__context_tokens* c) {
    size_t nonzero = 0;
    for (uint32_t word : c->accepted) nonzero += word != 0;
    if (nonzero * 2 < c->accepted.size()) {
        gpt2__vector<uint32_t> bits, at;
        bits.reserve(nonzero);
        at.reserve(nonzero);
        for (size_t w = 0; w < c->accepted.size(); w++)
            if (c->accepted[w]) bits.push_back(c->accepted[w]), at.push_back((uint32_t)w);
        c->accepted = std::move(bits);
        c->accepted_at = std::move(at);
    }
    c->uncertain.shrink_to_fit();
    return sizeof *c + (c->context.capacity() + c->accepted.capacity() + c->accepted_at.capacity() + c->uncertain.capacity()) * sizeof(uint32_t);
}

/* Sets the bits of the tokens context `c` accepts. */
static void gpt2__context_tokens_add(const gpt2__context_tokens& c, uint32_t* allowed) {
    if (c.accepted_at.empty())
        for (size_t w = 0; w < c.accepted.size(); w++) allowed[w] |= c.accepted[w];
    else
        for (size_t k = 0; k < c.accepted_at.size(); k++) allowed[c.accepted_at[k]] |= c.accepted[k];
}

/* The tokens decided by the context of stack `top` (its first GPT2__CONTEXT_DEPTH positions),
   made on first use; NULL when the grammar holds as many contexts, or bytes of them, as it may. */
static const gpt2__context_tokens* gpt2__context_tokens_find(const gpt2_grammar* g, const gpt2__gss& gss, uint32_t top) {
    uint32_t context[GPT2__CONTEXT_DEPTH];
    size_t n = 0;
    bool clipped = false;
    uint64_t h = 0x9e3779b97f4a7c15ull;
    for (uint32_t id = top; id && n < GPT2__CONTEXT_DEPTH; id = gss.nodes[id].parent) {
        const uint32_t pos = gss.nodes[id].pos, stands_for = g->stands_for[pos];
        clipped = clipped || stands_for != UINT32_MAX;
        context[n++] = stands_for != UINT32_MAX ? stands_for : pos;
        h = (h ^ context[n - 1]) * 0x100000001b3ull;
    }
    h ^= clipped;
    std::lock_guard<std::mutex> lock(g->contexts_mutex);
    const auto found = g->context_index.equal_range(h);
    for (auto it = found.first; it != found.second; ++it) {
        const gpt2__context_tokens& p = g->contexts[it->second];
        if (p.clipped == clipped && p.context.size() == n && std::equal(context, context + n, p.context.begin())) return &p;
    }
    if (g->contexts.size() >= GPT2__MAX_CONTEXTS || g->contexts_bytes >= GPT2__CONTEXTS_MAX_BYTES) return nullptr;
    g->context_index.emplace(h, (uint32_t)g->contexts.size());
    g->contexts.emplace_back();
    gpt2__context_tokens* made = &g->contexts.back();
    made->context.assign(context, context + n);
    made->clipped = clipped;
    gpt2__context_maker* maker = gpt2__context_maker_of(g);
    if (maker) gpt2__context_tokens_make(g, maker, made);
    else gpt2__context_tokens_undecided(g->model->token_trie, made); /* out of memory */
    g->contexts_bytes += gpt2__context_tokens_compact(made);
    return made;
}

/* Walks trie node `entry` (a gpt2__context_tokens::uncertain entry) from the state: the path to
   it first, then its tokens, or its whole subtree's. */
static gpt2_result gpt2__matcher_walk_entry(gpt2__grammar_matcher* m, uint32_t entry, uint32_t* allowed, gpt2_error* err) {
    const gpt2__token_trie& trie = m->g->model->token_trie;
    const size_t node = entry & ~GPT2__WHOLE_SUBTREE, d = trie.depth[node];
    const std::string_view path = gpt2__tokenizer_token_bytes(&m->g->model->tokenizer, trie.tokens[trie.tokens_begin[node]]);
    const size_t end = entry & GPT2__WHOLE_SUBTREE ? trie.skip[node] : node + 1;
    for (size_t k = 1; k < (entry & GPT2__WHOLE_SUBTREE ? d : d + 1); k++)
        if (!gpt2__walk_step(m, m->levels[k - 1], (uint8_t)path[k - 1], &m->levels[k]))
            return m->gss.overflow ? gpt2__matcher_overflow(err) : GPT2_OK;
    if (!(entry & GPT2__WHOLE_SUBTREE)) {
        for (uint32_t k = trie.tokens_begin[node]; k < trie.tokens_begin[node + 1]; k++) allowed[trie.tokens[k] >> 5] |= 1u << (trie.tokens[k] & 31);
        return GPT2_OK;
    }
    return gpt2__matcher_walk(m, node, end, allowed, err);
}

/* Sets bit t of `allowed` (n_vocab bits) for every token t whose bytes keep the text a prefix
   of a sentence, and the end-of-text token's when the text is complete: the tokens each top's
   position accepts alone, and those of its uncertain ones that a walk from the state allows (a
   state inside a UTF-8 character walks the whole trie). */
static gpt2_result gpt2__matcher_mask(gpt2__grammar_matcher* m, uint32_t* allowed, gpt2_error* err) {
    const gpt2_grammar& g = *m->g;
    const gpt2_model& model = *g.model;
    const size_t words = ((size_t)model.n_vocab + 31) / 32;
    gpt2__state_table& t = m->table;
    if (t.states.size() >= GPT2__STATE_TABLE_SIZE) gpt2__state_table_clear(&t);
    m->levels.resize((size_t)model.token_trie.max_depth + 1);
    gpt2__walk_level& root = m->levels[0];
    root.id = gpt2__state_table_id(&t, m->state);
    root.state = m->state;
    if (root.id >= 0 && t.mask_slot[(size_t)root.id] >= 0) {
        std::memcpy(allowed, t.masks.data() + (size_t)t.mask_slot[(size_t)root.id] * words, words * sizeof(uint32_t));
        return GPT2_OK;
    }
    std::memset(allowed, 0, words * sizeof(uint32_t));
    if (m->gss.overflow) return gpt2__matcher_overflow(err); /* already at the start */
    gpt2__vector<const gpt2__context_tokens*>& decided = m->decided;
    decided.clear();
    for (size_t k = 0; m->state.need == 0 && k < m->state.tops.size(); k++) {
        const gpt2__context_tokens* p = gpt2__context_tokens_find(&g, m->gss, m->state.tops[k]);
        if (!p) break;
        decided.push_back(p);
    }
    if (decided.size() < m->state.tops.size()) { /* inside a UTF-8 character, or no room for more contexts */
        GPT2__TRY(gpt2__matcher_walk(m, 0, model.token_trie.byte.size(), allowed, err));
    } else {
        std::sort(decided.begin(), decided.end());
        decided.erase(std::unique(decided.begin(), decided.end()), decided.end());
        for (const gpt2__context_tokens* p : decided) gpt2__context_tokens_add(*p, allowed);
        m->entries.clear();
        for (const gpt2__context_tokens* p : decided) m->entries.insert(m->entries.end(), p->uncertain.begin(), p->uncertain.end());
        std::sort(m->entries.begin(), m->entries.end());
        m->entries.erase(std::unique(m->entries.begin(), m->entries.end()), m->entries.end());
        for (uint32_t entry : m->entries) GPT2__TRY(gpt2__matcher_walk_entry(m, entry, allowed, err));
    }
    const int32_t eos = model.tokenizer.eos;
    if (eos >= 0 && eos < model.n_vocab && m->state.complete && m->state.need == 0) allowed[eos >> 5] |= 1u << (eos & 31);
    if (root.id >= 0 && t.n_masks < GPT2__MASK_CACHE_SIZE) {
        t.mask_slot[(size_t)root.id] = t.n_masks++;
        t.masks.insert(t.masks.end(), allowed, allowed + words);
    }
    return GPT2_OK;
}

/* The text the grammar allows alone after the state, up to `limit` bytes: while the text is not
   a sentence and every stack's top holds one and the same code point, that code point comes next
   (`"action": "` in a template). *finishes: the text then ends a sentence nothing may extend. */
static void gpt2__matcher_forced_text(gpt2__grammar_matcher* m, size_t limit, gpt2__string* out, bool* finishes) {
    out->clear();
    gpt2__gstate st = m->state;
    for (;;) {
        *finishes = st.complete && st.tops.empty();
        if (st.complete || st.escaped || st.need != 0 || st.tops.empty()) return;
        uint32_t cp = UINT32_MAX;
        for (uint32_t id : st.tops) {
            const gpt2__code_points& c = m->g->classes[m->g->elems[m->gss.nodes[id].pos].value];
            if (c.ranges.size() != 1 || c.ranges[0].first != c.ranges[0].second || (cp != UINT32_MAX && cp != c.ranges[0].first)) return;
            cp = c.ranges[0].first;
        }
        char bytes[4];
        const size_t n = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
        if (out->size() + n > limit) return;
        static const uint8_t lead[5] = {0, 0x00, 0xC0, 0xE0, 0xF0}; /* UTF-8's first byte, by length */
        bytes[0] = (char)(lead[n] | (cp >> (6 * (n - 1))));
        for (size_t k = 1; k < n; k++) bytes[k] = (char)(0x80u | ((cp >> (6 * (n - 1 - k))) & 0x3Fu));
        for (size_t k = 0; k < n; k++) {
            if (!gpt2__gstate_advance_byte(&m->gss, st, (uint8_t)bytes[k], &m->next)) return; /* only when too ambiguous: the mask reports it */
            std::swap(st, m->next);
        }
        out->append(bytes, n);
    }
}

/* gpt2_grammar_match's answer for `text`. */
static gpt2_result gpt2__grammar_match_text(const gpt2_grammar* g, std::string_view text, gpt2_match* match, gpt2_error* err) {
    gpt2__grammar_matcher m;
    gpt2__matcher_begin(&m, g);
    if (m.gss.overflow) return gpt2__matcher_overflow(err);
    bool alive;
    GPT2__TRY(gpt2__matcher_feed(&m, text, &alive, err));
    *match = !alive ? GPT2_MATCH_NONE : m.state.complete && m.state.need == 0 ? GPT2_MATCH_COMPLETE : GPT2_MATCH_PREFIX;
    return GPT2_OK;
}

/* ---- src/grammar/regex.h ---- */
/* JSON Schema's "pattern" to GBNF: the ECMAScript regular expressions schemas write (classes,
   groups, alternatives, greedy and lazy quantifiers, ^ and $ at the ends) as an expression over
   the JSON text of a string's contents. A character the string holds is matched as JSON writes
   it: '"', '\\' and the controls only escaped, every other one only as itself (an escape such as
   \u0041 for 'A' is not accepted: fewer texts, never more). What a grammar cannot hold
   (lookaround, backreferences, \b, Unicode property classes) is refused, with the reason. */

enum { GPT2__REGEX_MAX_REPEAT = 1000, GPT2__REGEX_MAX_DEPTH = 64 };

using gpt2__regex_set = gpt2__vector<std::pair<uint32_t, uint32_t>>; /* code point ranges */

struct gpt2__regex_reader {
    std::string_view s;
    size_t at = 0;
    const char* any = "";          /* a GBNF rule of one JSON character, for unanchored ends */
    const char* refused = nullptr; /* why, once the pattern is refused */
    bool start_anchor = false, end_anchor = false; /* of the top-level alternative being read */
};

static bool gpt2__regex_refuse(gpt2__regex_reader* r, const char* why) {
    if (!r->refused) r->refused = why;
    return false;
}

/* Sorted, overlaps and neighbours merged. */
static void gpt2__regex_set_normalize(gpt2__regex_set* set) {
    std::sort(set->begin(), set->end());
    gpt2__regex_set merged;
    for (const auto& range : *set) {
        if (!merged.empty() && range.first <= merged.back().second + 1) merged.back().second = std::max(merged.back().second, range.second);
        else merged.push_back(range);
    }
    *set = merged;
}

static gpt2__regex_set gpt2__regex_set_complement(gpt2__regex_set set) {
    gpt2__regex_set_normalize(&set);
    gpt2__regex_set out;
    uint32_t next = 0;
    for (const auto& range : set) {
        if (range.first > next) out.push_back({next, range.first - 1});
        next = range.second + 1;
    }
    if (next <= 0x10FFFF) out.push_back({next, 0x10FFFF});
    return out;
}

/* \d \w \s and their complements (ECMAScript's sets: \s is Unicode's white space). */
static bool gpt2__regex_class_escape(char c, gpt2__regex_set* out) {
    gpt2__regex_set set;
    switch (c | 0x20) {
    case 'd': set = {{'0', '9'}}; break;
    case 'w': set = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}; break;
    case 's': set = {{0x09, 0x0D}, {0x20, 0x20}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A}, {0x2028, 0x2029},
                     {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}}; break;
    default: return false;
    }
    if (c >= 'A' && c <= 'Z') set = gpt2__regex_set_complement(set);
    out->insert(out->end(), set.begin(), set.end());
    return true;
}

static int gpt2__regex_hex(std::string_view s, size_t at, size_t digits) {
    if (at + digits > s.size()) return -1;
    int v = 0;
    for (size_t i = 0; i < digits; i++) {
        const char c = s[at + i];
        const int d = c >= '0' && c <= '9' ? c - '0' : (c | 0x20) >= 'a' && (c | 0x20) <= 'f' ? (c | 0x20) - 'a' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* One code point of the pattern (UTF-8, as the JSON reader decoded it). */
static uint32_t gpt2__regex_code_point(gpt2__regex_reader* r) {
    const unsigned char c = (unsigned char)r->s[r->at];
    const size_t n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    uint32_t cp = n == 1 ? c : c & (0x3F >> (n - 1));
    for (size_t i = 1; i < n && r->at + i < r->s.size(); i++) cp = cp << 6 | ((unsigned char)r->s[r->at + i] & 0x3F);
    r->at = std::min(r->s.size(), r->at + n);
    return cp;
}

/* The escape at r->at (just after its backslash) into `set`: one code point, or a class when
   *is_class. In a class, \b is the backspace; outside, a word boundary (refused). */
static bool gpt2__regex_escape(gpt2__regex_reader* r, bool in_class, gpt2__regex_set* set, bool* is_class) {
    *is_class = false;
    if (r->at >= r->s.size()) return gpt2__regex_refuse(r, "it ends with a lone backslash");
    const char c = r->s[r->at];
    if (gpt2__regex_class_escape(c, set)) {
        r->at++;
        *is_class = true;
        return true;
    }
    uint32_t cp = 0;
    switch (c) {
    case 'n': cp = '\n'; break;
    case 'r': cp = '\r'; break;
    case 't': cp = '\t'; break;
    case 'f': cp = '\f'; break;
    case 'v': cp = '\v'; break;
    case 'b':
        if (!in_class) return gpt2__regex_refuse(r, "word boundaries (\\b) are not enforced");
        cp = '\b';
        break;
    case '0':
        if (r->at + 1 < r->s.size() && r->s[r->at + 1] >= '0' && r->s[r->at + 1] <= '9') return gpt2__regex_refuse(r, "octal escapes are not enforced");
        cp = 0;
        break;
    case 'x':
    case 'u': {
        const size_t digits = c == 'x' ? 2 : 4;
        const int v = gpt2__regex_hex(r->s, r->at + 1, digits);
        if (v < 0) return gpt2__regex_refuse(r, c == 'x' ? "\\x needs two hexadecimal digits" : "\\u needs four hexadecimal digits (\\u{...} is not enforced)");
        if (v >= 0xD800 && v <= 0xDFFF) return gpt2__regex_refuse(r, "escaped surrogates are not enforced");
        r->at += digits;
        cp = (uint32_t)v;
        break;
    }
    default:
        if ((c >= '1' && c <= '9') || c == 'k') return gpt2__regex_refuse(r, "backreferences are not enforced");
        if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return gpt2__regex_refuse(r, "an escape the pattern subset lacks (\\p, \\c, \\B, ...)");
        if ((unsigned char)c >= 0x80) return gpt2__regex_refuse(r, "an escaped non-ASCII character");
        cp = (unsigned char)c; /* \. \- \/ ...: the character itself */
    }
    r->at++;
    set->push_back({cp, cp});
    return true;
}

/* A GBNF class item: the code point as itself where that reads plainly. */
static void gpt2__regex_class_item(gpt2__string* out, uint32_t cp) {
    char buf[16];
    if ((cp >= '0' && cp <= '9') || ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z')) out->push_back((char)cp);
    else std::snprintf(buf, sizeof buf, cp < 0x80 ? "\\x%02X" : cp < 0x10000 ? "\\u%04X" : "\\U%08X", cp), out->append(buf);
}

/* The JSON text of one character of `set`: a GBNF expression. */
static void gpt2__regex_write_set(gpt2__regex_set set, gpt2__string* out) {
    gpt2__regex_set_normalize(&set);
    auto has = [&](uint32_t cp) {
        for (const auto& range : set)
            if (range.first <= cp && cp <= range.second) return true;
        return false;
    };
    if (set.size() == 1 && set[0].first == set[0].second && set[0].first >= 0x20 && set[0].first < 0x7F && set[0].first != '"' && set[0].first != '\\') {
        *out += gpt2__string("\"") + (char)set[0].first + "\"";
        return;
    }
    gpt2__vector<gpt2__string> parts;
    gpt2__string plain = "[";
    for (const auto& range : set) { /* written as themselves: all but '"', '\\', the controls and the surrogates */
        const uint32_t cut[][2] = {{0x20, '"' - 1}, {'"' + 1, '\\' - 1}, {'\\' + 1, 0xD7FF}, {0xE000, 0x10FFFF}};
        for (const auto& c : cut) {
            const uint32_t lo = std::max(range.first, c[0]), hi = std::min(range.second, c[1]);
            if (lo > hi) continue;
            gpt2__regex_class_item(&plain, lo);
            if (hi > lo) plain.push_back('-'), gpt2__regex_class_item(&plain, hi);
        }
    }
    if (plain.size() > 1) parts.push_back(plain + "]");
    if (has('"')) parts.push_back("\"\\\\\\\"\"");
    if (has('\\')) parts.push_back("\"\\\\\\\\\"");
    /* the controls: \n and its kind, and \u00XX (either case of hex digit) */
    gpt2__string short_forms;
    for (const char* f = "b\bf\fn\nr\rt\t"; *f; f += 2)
        if (has((unsigned char)f[1])) short_forms.push_back(f[0]);
    if (!short_forms.empty()) parts.push_back("\"\\\\\" [" + short_forms + "]");
    for (uint32_t high = 0; high < 2; high++) {
        gpt2__string digits;
        for (uint32_t low = 0; low < 16; low++) {
            if (!has(high * 16 + low)) continue;
            digits.push_back("0123456789ABCDEF"[low]);
            if (low >= 10) digits.push_back("abcdef"[low - 10]);
        }
        if (!digits.empty()) parts.push_back("\"\\\\u00" + gpt2__string(1, (char)('0' + high)) + "\" [" + digits + "]");
    }
    if (parts.size() == 1) {
        *out += parts[0];
        return;
    }
    *out += "(";
    for (size_t i = 0; i < parts.size(); i++) *out += (i ? " | " : " ") + parts[i];
    *out += " )";
}

static bool gpt2__regex_alternatives(gpt2__regex_reader* r, gpt2__string* out, int depth, bool* nullable);

/* One member of a class at r->at: an escape (a class itself when *is_class) or a code point. */
static bool gpt2__regex_class_member(gpt2__regex_reader* r, gpt2__regex_set* set, bool* is_class) {
    *is_class = false;
    if (r->s[r->at] == '\\') {
        r->at++;
        return gpt2__regex_escape(r, true, set, is_class);
    }
    const uint32_t cp = gpt2__regex_code_point(r);
    set->push_back({cp, cp});
    return true;
}

/* A class: [...] or [^...]. */
static bool gpt2__regex_bracket(gpt2__regex_reader* r, gpt2__string* out) {
    const bool negated = r->at < r->s.size() && r->s[r->at] == '^';
    if (negated) r->at++;
    gpt2__regex_set set;
    while (true) {
        if (r->at >= r->s.size()) return gpt2__regex_refuse(r, "a '[' without its ']'");
        if (r->s[r->at] == ']') break;
        gpt2__regex_set item;
        bool item_is_class = false;
        if (!gpt2__regex_class_member(r, &item, &item_is_class)) return false;
        /* a range a-b; a '-' beside a class escape or before ']' is itself */
        if (!item_is_class && r->at + 1 < r->s.size() && r->s[r->at] == '-' && r->s[r->at + 1] != ']') {
            r->at++;
            gpt2__regex_set end;
            bool end_is_class = false;
            if (!gpt2__regex_class_member(r, &end, &end_is_class)) return false;
            if (end_is_class) {
                item.push_back({'-', '-'});
                item.insert(item.end(), end.begin(), end.end());
            } else {
                if (end[0].first < item[0].first) return gpt2__regex_refuse(r, "a class range out of order");
                item[0].second = end[0].first;
            }
        }
        set.insert(set.end(), item.begin(), item.end());
    }
    r->at++;
    if (negated) set = gpt2__regex_set_complement(set);
    if (set.empty()) return gpt2__regex_refuse(r, "an empty class, which matches nothing");
    gpt2__regex_write_set(set, out);
    return true;
}

/* A quantifier's {n}, {n,} or {n,m} at r->at (on '{'); false, r->at kept, when it is not one
   (then '{' is itself, as ECMAScript reads it outside Unicode mode). */
static bool gpt2__regex_braces(gpt2__regex_reader* r, long* lo, long* hi) {
    size_t i = r->at + 1;
    auto number = [&](long* v) {
        const size_t begin = i;
        *v = 0;
        while (i < r->s.size() && r->s[i] >= '0' && r->s[i] <= '9' && i - begin < 9) *v = *v * 10 + (r->s[i++] - '0');
        return i > begin;
    };
    if (!number(lo)) return false;
    *hi = *lo;
    if (i < r->s.size() && r->s[i] == ',') {
        i++;
        if (!number(hi)) *hi = -1;
    }
    if (i >= r->s.size() || r->s[i] != '}') return false;
    r->at = i + 1;
    return true;
}

/* A sequence: atoms, each with its quantifier, up to '|', ')' or the end. *nullable: it can
   match the empty string. */
static bool gpt2__regex_sequence(gpt2__regex_reader* r, gpt2__string* out, int depth, bool* nullable) {
    gpt2__string seq;
    bool first = true;
    *nullable = true;
    while (r->at < r->s.size() && r->s[r->at] != '|' && r->s[r->at] != ')') {
        const char c = r->s[r->at];
        if (c == '^' || c == '$') { /* only at the ends of a top-level alternative */
            r->at++;
            const bool at_end = r->at >= r->s.size() || r->s[r->at] == '|';
            if (depth == 0 && c == '^' && first) r->start_anchor = true;
            else if (depth == 0 && c == '$' && at_end) r->end_anchor = true;
            else return gpt2__regex_refuse(r, "'^' and '$' are enforced only at the ends of the pattern");
            continue;
        }
        gpt2__string atom;
        bool atom_nullable = false;
        r->at++;
        if (c == '(') {
            if (r->s.substr(r->at, 2) == "?:") r->at += 2;
            else if (r->s.substr(r->at, 2) == "?=" || r->s.substr(r->at, 2) == "?!" || r->s.substr(r->at, 3) == "?<=" || r->s.substr(r->at, 3) == "?<!")
                return gpt2__regex_refuse(r, "lookaround is not enforced");
            else if (r->s.substr(r->at, 2) == "?<") {
                const size_t close = r->s.find('>', r->at);
                if (close == std::string_view::npos) return gpt2__regex_refuse(r, "a group name without its '>'");
                r->at = close + 1;
            } else if (r->s.substr(r->at, 1) == "?") return gpt2__regex_refuse(r, "a group modifier the pattern subset lacks");
            if (depth + 1 > GPT2__REGEX_MAX_DEPTH) return gpt2__regex_refuse(r, "groups nest too deep");
            gpt2__string inner;
            if (!gpt2__regex_alternatives(r, &inner, depth + 1, &atom_nullable)) return false;
            if (r->at >= r->s.size() || r->s[r->at] != ')') return gpt2__regex_refuse(r, "a '(' without its ')'");
            r->at++;
            atom = "(" + inner + ")";
        } else if (c == '[') {
            if (!gpt2__regex_bracket(r, &atom)) return false;
        } else if (c == '.') {
            gpt2__regex_write_set(gpt2__regex_set_complement({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}), &atom);
        } else if (c == '\\') {
            gpt2__regex_set set;
            bool is_class;
            if (!gpt2__regex_escape(r, false, &set, &is_class)) return false;
            gpt2__regex_write_set(set, &atom);
        } else if (c == '*' || c == '+' || c == '?') {
            return gpt2__regex_refuse(r, "a quantifier with nothing to repeat");
        } else {
            r->at--;
            const uint32_t cp = gpt2__regex_code_point(r);
            gpt2__regex_write_set({{cp, cp}}, &atom);
        }
        /* its quantifier; a lazy one (a trailing '?') matches the same strings */
        long lo = 1, hi = 1;
        if (r->at < r->s.size()) {
            const char q = r->s[r->at];
            if (q == '*') lo = 0, hi = -1, r->at++;
            else if (q == '+') lo = 1, hi = -1, r->at++;
            else if (q == '?') lo = 0, hi = 1, r->at++;
            else if (q == '{' && !gpt2__regex_braces(r, &lo, &hi)) lo = hi = 1;
            if ((lo != 1 || hi != 1) && r->at < r->s.size() && r->s[r->at] == '?') r->at++;
        }
        if (lo > GPT2__REGEX_MAX_REPEAT || hi > GPT2__REGEX_MAX_REPEAT) return gpt2__regex_refuse(r, "a repetition count above 1000");
        if (hi >= 0 && hi < lo) return gpt2__regex_refuse(r, "a repetition {n,m} with m < n");
        /* (x*)* would be a rule that calls itself before reading anything */
        if (atom_nullable && hi < 0) return gpt2__regex_refuse(r, "an unbounded repetition of a group that can match the empty string (write (x*)* as x*)");
        *nullable = *nullable && (lo == 0 || hi == 0 || atom_nullable);
        char q[48] = "";
        if (lo == 0 && hi == -1) std::snprintf(q, sizeof q, "*");
        else if (lo == 1 && hi == -1) std::snprintf(q, sizeof q, "+");
        else if (lo == 0 && hi == 1) std::snprintf(q, sizeof q, "?");
        else if (hi == -1) std::snprintf(q, sizeof q, "{%ld,}", lo);
        else if (lo == hi && lo != 1) std::snprintf(q, sizeof q, "{%ld}", lo);
        else if (lo != hi) std::snprintf(q, sizeof q, "{%ld,%ld}", lo, hi);
        if (hi != 0) seq += (seq.empty() ? "" : " ") + atom + q; /* x{0} matches the empty text */
        first = false;
    }
    *out += seq.empty() ? "\"\"" : seq;
    return true;
}

/* Alternatives a | b | ..., up to ')' or the end. At the top level each may have its anchors;
   an unanchored end matches any text there. */
static bool gpt2__regex_alternatives(gpt2__regex_reader* r, gpt2__string* out, int depth, bool* nullable) {
    *nullable = false;
    while (true) {
        if (depth == 0) r->start_anchor = r->end_anchor = false;
        gpt2__string seq;
        bool seq_nullable = false;
        if (!gpt2__regex_sequence(r, &seq, depth, &seq_nullable)) return false;
        *nullable = *nullable || seq_nullable;
        if (depth == 0) {
            if (!r->start_anchor) seq = gpt2__string(r->any) + "* " + seq;
            if (!r->end_anchor) seq += gpt2__string(" ") + r->any + "*";
        }
        *out += seq;
        if (r->at >= r->s.size() || r->s[r->at] != '|') return true;
        r->at++;
        *out += " | ";
    }
}

/* `pattern` as a GBNF expression of the JSON text of the strings it matches (their contents,
   between the quotes); `any` names a rule of one JSON character, for unanchored ends. Returns
   nullptr, or why the pattern is refused. */
static const char* gpt2__regex_to_gbnf(std::string_view pattern, const char* any, gpt2__string* out) {
    gpt2__regex_reader r;
    r.s = pattern;
    r.any = any;
    gpt2__string body;
    bool nullable = false;
    if (!gpt2__regex_alternatives(&r, &body, 0, &nullable)) return r.refused;
    if (r.at < pattern.size()) return "a ')' without its '('";
    *out = "(" + body + ")";
    return nullptr;
}

/* ---- src/grammar/json_schema.h ---- */
/* JSON Schema to a grammar: a strict JSON reader, then a converter that writes GBNF text (the
   design of llama.cpp's json_schema_to_grammar) for gbnf.h's parser. A schema is read as a view:
   its keywords and those its allOf parts and $ref targets add (each with where it is written);
   its applicators (anyOf, oneOf, not, if, the dependencies) become unions of views, written with
   complements where a branch must not hold; then each type its keywords allow is an alternative.
   The converter never accepts more than the schema does: a keyword that constrains and is not
   enforced here is refused, naming its JSON pointer; it may accept less (properties in definition
   order unless any_order, extra keys and complements' strings without escapes, numbers of bounds
   without an exponent). tests/test_json_schema_suite.cpp holds it to the JSON-Schema-Test-Suite. */

/* ---- The JSON reader ---------------------------------------------------------------------- */

enum gpt2__json_kind : uint8_t { GPT2__JSON_NULL, GPT2__JSON_BOOL, GPT2__JSON_NUMBER, GPT2__JSON_STRING, GPT2__JSON_ARRAY, GPT2__JSON_OBJECT };

struct gpt2__json {
    gpt2__json_kind kind = GPT2__JSON_NULL;
    bool boolean = false;
    gpt2__string text;                 /* STRING: the decoded UTF-8; NUMBER: the number as written */
    gpt2__vector<gpt2__json> items;    /* ARRAY's items; OBJECT's values */
    gpt2__vector<gpt2__string> keys;   /* OBJECT's keys, in the order written */

    const gpt2__json* get(std::string_view key) const {
        for (size_t i = 0; i < keys.size(); i++)
            if (std::string_view(keys[i]) == key) return &items[i];
        return nullptr;
    }
};

enum { GPT2__JSON_MAX_DEPTH = 256 };

struct gpt2__json_reader {
    const char* s = nullptr;
    size_t n = 0, pos = 0;
    gpt2_error* err = nullptr;
};

/* The code points of UTF-8 text (its bytes that do not continue a character). */
static size_t gpt2__utf8_code_points(std::string_view text) {
    size_t n = 0;
    for (unsigned char c : text) n += (c & 0xC0) != 0x80;
    return n;
}

static gpt2_result gpt2__json_fail(const gpt2__json_reader& r, const char* what) {
    const std::string_view before(r.s, std::min(r.pos, r.n));
    const size_t line_start = before.rfind('\n') + 1; /* npos + 1: the first line */
    const size_t line = 1 + (size_t)std::count(before.begin(), before.end(), '\n'), column = 1 + gpt2__utf8_code_points(before.substr(line_start));
    return gpt2__fail(r.err, GPT2_ERROR_BAD_GRAMMAR, "json schema: malformed JSON at line %zu, column %zu: %s", line, column, what);
}

static void gpt2__json_space(gpt2__json_reader* r) {
    while (r->pos < r->n && (r->s[r->pos] == ' ' || r->s[r->pos] == '\t' || r->s[r->pos] == '\n' || r->s[r->pos] == '\r')) r->pos++;
}

static void gpt2__utf8_append(gpt2__string* out, uint32_t cp) {
    if (cp < 0x80) out->push_back((char)cp);
    else if (cp < 0x800) out->push_back((char)(0xC0 | (cp >> 6))), out->push_back((char)(0x80 | (cp & 0x3F)));
    else if (cp < 0x10000) out->push_back((char)(0xE0 | (cp >> 12))), out->push_back((char)(0x80 | ((cp >> 6) & 0x3F))), out->push_back((char)(0x80 | (cp & 0x3F)));
    else out->push_back((char)(0xF0 | (cp >> 18))), out->push_back((char)(0x80 | ((cp >> 12) & 0x3F))), out->push_back((char)(0x80 | ((cp >> 6) & 0x3F))), out->push_back((char)(0x80 | (cp & 0x3F)));
}

static bool gpt2__json_hex4(gpt2__json_reader* r, uint32_t* v) {
    if (r->n - r->pos < 4) return false;
    *v = 0;
    for (int i = 0; i < 4; i++) {
        const char c = r->s[r->pos + i];
        const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return false;
        *v = *v * 16 + (uint32_t)d;
    }
    r->pos += 4;
    return true;
}

static gpt2_result gpt2__json_string(gpt2__json_reader* r, gpt2__string* out) {
    r->pos++; /* the opening quote */
    for (;;) {
        if (r->pos >= r->n) return gpt2__json_fail(*r, "unterminated string");
        const unsigned char c = (unsigned char)r->s[r->pos];
        if (c == '"') {
            r->pos++;
            return GPT2_OK;
        }
        if (c < 0x20) return gpt2__json_fail(*r, "a control character in a string (write it escaped)");
        if (c != '\\') {
            /* UTF-8, checked */
            const int len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
            if (!len || r->n - r->pos < (size_t)len) return gpt2__json_fail(*r, "bytes that are not UTF-8");
            uint32_t cp = len == 1 ? c : len == 2 ? c & 0x1F : len == 3 ? c & 0x0F : c & 0x07;
            for (int i = 1; i < len; i++) {
                const unsigned char b = (unsigned char)r->s[r->pos + i];
                if ((b & 0xC0) != 0x80) return gpt2__json_fail(*r, "bytes that are not UTF-8");
                cp = cp << 6 | (b & 0x3F);
            }
            if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF))
                return gpt2__json_fail(*r, "bytes that are not UTF-8");
            out->append(r->s + r->pos, (size_t)len);
            r->pos += (size_t)len;
            continue;
        }
        r->pos++;
        if (r->pos >= r->n) return gpt2__json_fail(*r, "unterminated string");
        const char e = r->s[r->pos++];
        switch (e) {
        case '"': out->push_back('"'); break;
        case '\\': out->push_back('\\'); break;
        case '/': out->push_back('/'); break;
        case 'b': out->push_back('\b'); break;
        case 'f': out->push_back('\f'); break;
        case 'n': out->push_back('\n'); break;
        case 'r': out->push_back('\r'); break;
        case 't': out->push_back('\t'); break;
        case 'u': {
            uint32_t cp;
            if (!gpt2__json_hex4(r, &cp)) return gpt2__json_fail(*r, "\\u must be followed by 4 hex digits");
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                uint32_t lo;
                if (r->n - r->pos < 6 || r->s[r->pos] != '\\' || r->s[r->pos + 1] != 'u') return gpt2__json_fail(*r, "a lone surrogate \\u escape");
                r->pos += 2;
                if (!gpt2__json_hex4(r, &lo) || lo < 0xDC00 || lo > 0xDFFF) return gpt2__json_fail(*r, "a lone surrogate \\u escape");
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                return gpt2__json_fail(*r, "a lone surrogate \\u escape");
            }
            gpt2__utf8_append(out, cp);
            break;
        }
        default: r->pos--; return gpt2__json_fail(*r, "an invalid escape in a string");
        }
    }
}

static gpt2_result gpt2__json_number(gpt2__json_reader* r, gpt2__string* out) {
    const size_t start = r->pos;
    auto digits = [r] {
        size_t k = 0;
        while (r->pos < r->n && r->s[r->pos] >= '0' && r->s[r->pos] <= '9') r->pos++, k++;
        return k;
    };
    if (r->s[r->pos] == '-') r->pos++;
    if (r->pos < r->n && r->s[r->pos] == '0') r->pos++;
    else if (!digits()) return gpt2__json_fail(*r, "a number without digits");
    if (r->pos < r->n && r->s[r->pos] == '.') {
        r->pos++;
        if (!digits()) return gpt2__json_fail(*r, "a number without digits after '.'");
    }
    if (r->pos < r->n && (r->s[r->pos] == 'e' || r->s[r->pos] == 'E')) {
        r->pos++;
        if (r->pos < r->n && (r->s[r->pos] == '+' || r->s[r->pos] == '-')) r->pos++;
        if (!digits()) return gpt2__json_fail(*r, "a number without digits in its exponent");
    }
    out->assign(r->s + start, r->pos - start);
    return GPT2_OK;
}

/* Recursive, with the depth bounded: a document nested deeper is refused before the stack is. */
static gpt2_result gpt2__json_value(gpt2__json_reader* r, gpt2__json* v, int depth) {
    gpt2__json_space(r);
    if (r->pos >= r->n) return gpt2__json_fail(*r, "unexpected end of the text, expected a value");
    const char c = r->s[r->pos];
    auto word = [r](const char* w) {
        const size_t k = std::strlen(w);
        if (r->n - r->pos < k || std::memcmp(r->s + r->pos, w, k) != 0) return false;
        r->pos += k;
        return true;
    };
    if (c == '{' || c == '[') {
        if (depth >= GPT2__JSON_MAX_DEPTH) {
            char what[96];
            std::snprintf(what, sizeof what, "nested deeper than %d arrays and objects", (int)GPT2__JSON_MAX_DEPTH);
            return gpt2__json_fail(*r, what);
        }
        const bool object = c == '{';
        v->kind = object ? GPT2__JSON_OBJECT : GPT2__JSON_ARRAY;
        r->pos++;
        gpt2__json_space(r);
        if (r->pos < r->n && r->s[r->pos] == (object ? '}' : ']')) {
            r->pos++;
            return GPT2_OK;
        }
        for (;;) {
            gpt2__json_space(r);
            if (object) {
                if (r->pos >= r->n || r->s[r->pos] != '"') return gpt2__json_fail(*r, "expected a key (a string in double quotes)");
                gpt2__string key;
                GPT2__TRY(gpt2__json_string(r, &key));
                for (const auto& k : v->keys)
                    if (k == key) return gpt2__json_fail(*r, "a key written twice in one object");
                v->keys.push_back(std::move(key));
                gpt2__json_space(r);
                if (r->pos >= r->n || r->s[r->pos] != ':') return gpt2__json_fail(*r, "expected ':' after the key");
                r->pos++;
            }
            v->items.emplace_back();
            GPT2__TRY(gpt2__json_value(r, &v->items.back(), depth + 1));
            gpt2__json_space(r);
            if (r->pos < r->n && r->s[r->pos] == ',') {
                r->pos++;
                continue;
            }
            if (r->pos < r->n && r->s[r->pos] == (object ? '}' : ']')) {
                r->pos++;
                return GPT2_OK;
            }
            return gpt2__json_fail(*r, object ? "expected ',' or '}'" : "expected ',' or ']'");
        }
    }
    if (c == '"') {
        v->kind = GPT2__JSON_STRING;
        return gpt2__json_string(r, &v->text);
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        v->kind = GPT2__JSON_NUMBER;
        return gpt2__json_number(r, &v->text);
    }
    if (word("true") || word("false")) {
        v->kind = GPT2__JSON_BOOL;
        v->boolean = c == 't';
        return GPT2_OK;
    }
    if (word("null")) {
        v->kind = GPT2__JSON_NULL;
        return GPT2_OK;
    }
    return gpt2__json_fail(*r, "expected a value (an object, array, string, number, true, false or null)");
}

static gpt2_result gpt2__json_parse(const char* s, size_t n, gpt2__json* out, gpt2_error* err) {
    gpt2__json_reader r;
    r.s = s;
    r.n = n;
    r.err = err;
    GPT2__TRY(gpt2__json_value(&r, out, 0));
    gpt2__json_space(&r);
    if (r.pos != r.n) return gpt2__json_fail(r, "text after the end of the document");
    return GPT2_OK;
}

/* ---- Schema to GBNF ----------------------------------------------------------------------- */

/* A schema as the converter reads it: its keywords, each with the JSON pointer it was written
   at, so that a schema merged from allOf's parts still names where a keyword came from. */
struct gpt2__schema_kw {
    std::string_view key;
    const gpt2__json* value;
    gpt2__string pointer;              /* of the keyword itself: "/properties/age/minimum" */
    const gpt2__json* owner = nullptr; /* the schema object it is written in: keywords that read each other
                                          (properties and additionalProperties, if and then) read their own */
    uint16_t level = 0;                /* 0: the schema's own keyword; more: merged in from an in-place
                                          applicator (allOf's part, a $ref's target, anyOf's branch) */
    bool evaluates = true;             /* false: a keyword of a complement (inside `not`, a failed `if`),
                                          whose properties and items count as evaluated for no one */
    bool made = false;                 /* written in a schema the converter made (gpt2__schema_converter::made),
                                          not in the document: named inside a made schema by a copy */
};
using gpt2__schema_view = gpt2__vector<gpt2__schema_kw>;

/* The converter's recursion: schemas within schemas, and merges (a few frames a level). */
enum { GPT2__SCHEMA_MAX_DEPTH = 128 };

/* Unions the converter writes for anyOf, oneOf, not, if/then/else and the dependencies, counted
   over the whole schema: past the limit it is refused (each is a copy of the schema around it). */
enum { GPT2__SCHEMA_MAX_BRANCHES = 4096 };

enum : unsigned {
    GPT2__T_NULL = 1, GPT2__T_BOOL = 2, GPT2__T_INTEGER = 4, GPT2__T_NUMBER = 8, GPT2__T_STRING = 16,
    GPT2__T_ARRAY = 32, GPT2__T_OBJECT = 64, GPT2__T_ALL = 127
};

/* Which draft's rules read the schema: its root "$schema" says; without one, where the drafts
   disagree (an $id beside a $ref), the schema is refused. */
enum gpt2__schema_draft : uint8_t { GPT2__DRAFT_UNKNOWN, GPT2__DRAFT_7_OR_OLDER, GPT2__DRAFT_2019_OR_NEWER };

/* A name the document gives a schema: an $id's absolute URI, or one with an anchor's fragment
   ("http://x/a.json#foo"), and where the schema is (a JSON pointer from the document's root). */
struct gpt2__schema_name {
    gpt2__string uri, pointer;
    bool dynamic = false; /* a $dynamicAnchor (also a plain anchor) */
};

struct gpt2__schema_converter {
    const gpt2__json* root = nullptr;
    bool compact = false;
    bool any_order = false;         /* objects' declared properties in any order */
    bool integer_fraction = false;  /* "type": "integer" takes 1.0 (a fraction of zeros) */
    uint32_t max_ws = 20;
    gpt2_error* err = nullptr;
    gpt2__string rules;   /* the GBNF written so far, rule by rule */
    uint32_t next_rule = 0;
    /* $refs: the target's pointer -> its rule; targets still to be written */
    gpt2__vector<std::pair<gpt2__string, gpt2__string>> refs;
    gpt2__vector<std::pair<gpt2__string, const gpt2__json*>> pending;
    gpt2__schema_draft draft = GPT2__DRAFT_UNKNOWN;
    bool draft4 = false; /* draft 4 or 3: "integer" is a number without a fraction or exponent (2.0 is none) */
    gpt2__vector<gpt2__schema_name> names; /* the document's $ids and anchors (gpt2__schema_index) */
    gpt2__string ambiguous_id; /* an $id whose meaning depends on the draft, which the schema does not name */
    /* schemas the converter writes itself (a complement, a branch of a dependency): kept here,
       where they do not move, for as long as the views that point into them */
    std::deque<gpt2__json, gpt2__allocator<gpt2__json>> made;
    size_t branches = 0; /* the unions' branches so far (GPT2__SCHEMA_MAX_BRANCHES) */
    gpt2__string contradiction; /* the first keyword met that leaves no value ("/maxLength: ..."), for the message of a schema nothing matches */
    unsigned used_formats = 0; /* GPT2__FORMAT_ bits: the formats' helper rules to write */
    bool used_string = false, used_value = false, used_number = false, used_integer = false, used_char = false;
};

static gpt2__string gpt2__schema_escape_pointer(std::string_view key) {
    gpt2__string out;
    for (char c : key) {
        if (c == '~') out += "~0";
        else if (c == '/') out += "~1";
        else out.push_back(c);
    }
    return out;
}

static gpt2_result gpt2__schema_refuse(gpt2__schema_converter* cv, std::string_view pointer, const char* why) {
    return gpt2__fail(cv->err, GPT2_ERROR_BAD_GRAMMAR, "json schema: %.*s: %s", (int)pointer.size(), pointer.data(), why);
}

/* Keywords that leave no value of their type (minLength above maxLength): that type, or the
   branch, has none; the first is named where the whole schema has none. */
static gpt2_result gpt2__schema_contradiction(gpt2__schema_converter* cv, std::string_view pointer, const char* why, bool* impossible) {
    if (cv->contradiction.empty()) cv->contradiction = (pointer.empty() ? gpt2__string("(root)") : gpt2__string(pointer)) + ": contradictory bounds: " + why + ", so no value matches the schema";
    *impossible = true;
    return GPT2_OK;
}

/* A keyword the grammar holds only in part, where that part leaves no value here: the type or
   branch is left out (fewer values, never more), and named where the whole schema has none. */
static gpt2_result gpt2__schema_held_in_part(gpt2__schema_converter* cv, std::string_view pointer, const char* why, bool* impossible) {
    if (cv->contradiction.empty()) cv->contradiction = gpt2__string(pointer) + ": " + why + ", so the grammar holds no value of the schema";
    *impossible = true;
    return GPT2_OK;
}

static gpt2__string gpt2__schema_rule_name(gpt2__schema_converter* cv) {
    char name[24];
    std::snprintf(name, sizeof name, "s%u", (unsigned)cv->next_rule++);
    return gpt2__string(name);
}

static gpt2__string gpt2__schema_add_rule(gpt2__schema_converter* cv, std::string_view body) {
    gpt2__string name = gpt2__schema_rule_name(cv);
    cv->rules += name;
    cv->rules += " ::= ";
    cv->rules += body;
    cv->rules += "\n";
    return name;
}

/* Whitespace between tokens: nothing when compact, else a capped run. */
static const char* gpt2__schema_ws(const gpt2__schema_converter* cv) { return cv->compact ? "" : " ws "; }

/* A GBNF literal of UTF-8 text. */
static void gpt2__schema_literal(gpt2__string* out, std::string_view text) {
    out->push_back('"');
    for (unsigned char c : text) {
        char buf[8];
        if (c == '"' || c == '\\') out->push_back('\\'), out->push_back((char)c);
        else if (c < 0x20 || c == 0x7F) std::snprintf(buf, sizeof buf, "\\x%02X", c), out->append(buf);
        else out->push_back((char)c);
    }
    out->push_back('"');
}

/* A number bound, exactly: the sign, the whole part (at most 18 digits) and the fraction's
   digits, trailing zeros dropped ("0.50" and "5e-1" alike). */
struct gpt2__schema_decimal {
    bool negative = false; /* never for zero */
    long long whole = 0;
    gpt2__string fraction;
    bool zero() const { return whole == 0 && fraction.empty(); }
};

/* One end of an interval of magnitudes (gpt2__schema_magnitudes): absent, or a value that the
   end takes in (or, strict, leaves out). */
struct gpt2__schema_end {
    bool present = false, strict = false;
    gpt2__schema_decimal at;
};

/* A number as JSON writes it, with an exponent or not, as a decimal; false when it is not a
   number or is too large or too fine to hold (18 whole digits, 64 fraction digits). */
static bool gpt2__schema_decimal_of(const gpt2__json& j, gpt2__schema_decimal* d) {
    if (j.kind != GPT2__JSON_NUMBER) return false;
    const gpt2__string& t = j.text;
    size_t i = 0;
    const bool negative = i < t.size() && t[i] == '-';
    i += negative;
    gpt2__string digits; /* the mantissa's digits; the point after `point` of them */
    while (i < t.size() && t[i] >= '0' && t[i] <= '9') digits += t[i++];
    long long point = (long long)digits.size();
    if (i < t.size() && t[i] == '.')
        for (i++; i < t.size() && t[i] >= '0' && t[i] <= '9';) digits += t[i++];
    if (i < t.size() && (t[i] == 'e' || t[i] == 'E')) {
        i++;
        const bool down = i < t.size() && t[i] == '-';
        if (i < t.size() && (t[i] == '-' || t[i] == '+')) i++;
        long long e = 0;
        for (; i < t.size() && t[i] >= '0' && t[i] <= '9'; i++)
            if ((e = e * 10 + (t[i] - '0')) > 64) return false;
        point += down ? -e : e;
    }
    if (i != t.size() || digits.empty()) return false;
    if (point < 0) digits.insert(0, (size_t)-point, '0'), point = 0;
    if ((long long)digits.size() < point) digits.append((size_t)(point - (long long)digits.size()), '0');
    gpt2__string whole = digits.substr(0, (size_t)point), fraction = digits.substr((size_t)point);
    whole.erase(0, std::min(whole.find_first_not_of('0'), whole.size()));
    fraction.erase(fraction.find_last_not_of('0') + 1);
    if (whole.size() > 18 || fraction.size() > 64) return false;
    d->whole = whole.empty() ? 0 : std::strtoll(whole.c_str(), nullptr, 10);
    d->fraction = fraction;
    d->negative = negative && !d->zero();
    return true;
}

/* Whether x < y, as signed decimals. */
static bool gpt2__schema_decimal_less(const gpt2__schema_decimal& x, const gpt2__schema_decimal& y) {
    if (x.negative != y.negative) return x.negative;
    if (x.whole == y.whole && x.fraction == y.fraction) return false;
    const bool smaller_magnitude = x.whole != y.whole ? x.whole < y.whole : x.fraction < y.fraction; /* digit strings: no trailing zeros */
    return x.negative ? !smaller_magnitude : smaller_magnitude;
}

/* A decimal as JSON writes it most briefly without an exponent: "-12.5", "100", "0". */
static gpt2__string gpt2__schema_decimal_text(const gpt2__schema_decimal& d) {
    gpt2__string text = d.negative ? "-" : "";
    text += std::to_string(d.whole).c_str();
    if (!d.fraction.empty()) text += "." + d.fraction;
    return text;
}

/* A number value of const or enum as GBNF: each way JSON writes it without an exponent (2, 2.0
   and 2.00 are one value, -0 is 0), and the schema's own text; `digits_only`: an integer of draft
   4, which counts 2.0 as no integer, written with its digits alone. */
static void gpt2__schema_number_literal(gpt2__string* out, const gpt2__json& v, bool digits_only = false) {
    gpt2__schema_decimal d;
    if (!gpt2__schema_decimal_of(v, &d)) return gpt2__schema_literal(out, v.text);
    *out += d.zero() ? "(\"-\"? " : "(";
    gpt2__schema_literal(out, gpt2__schema_decimal_text(d));
    if (digits_only) {
        *out += ")";
        return;
    }
    *out += d.fraction.empty() ? " (\".\" \"0\"+)?" : " \"0\"*";
    if (v.text.find_first_of("eE") != gpt2__string::npos) *out += " | ", gpt2__schema_literal(out, v.text);
    *out += ")";
}

enum { GPT2__SCHEMA_MAX_ANY_ORDER_KEYS = 6 };

/* A JSON value written as JSON (strings with the fewest escapes), for const and enum: as GBNF
   elements, with whitespace where JSON allows it. An object's members in any order (JSON Schema
   compares objects whatever their order), where it has at most GPT2__SCHEMA_MAX_ANY_ORDER_KEYS
   (a rule per set of members written); past that, in the order written. */
static void gpt2__schema_json_literal(gpt2__schema_converter* cv, const gpt2__json& v, gpt2__string* out) {
    switch (v.kind) {
    case GPT2__JSON_NULL: *out += "\"null\""; break;
    case GPT2__JSON_BOOL: *out += v.boolean ? "\"true\"" : "\"false\""; break;
    case GPT2__JSON_NUMBER: gpt2__schema_number_literal(out, v); break;
    case GPT2__JSON_STRING: {
        gpt2__string json = "\"";
        for (unsigned char c : v.text) {
            char buf[8];
            if (c == '"' || c == '\\') json.push_back('\\'), json.push_back((char)c);
            else if (c == '\n') json += "\\n";
            else if (c == '\t') json += "\\t";
            else if (c == '\r') json += "\\r";
            else if (c == '\b') json += "\\b";
            else if (c == '\f') json += "\\f";
            else if (c < 0x20) std::snprintf(buf, sizeof buf, "\\u%04x", c), json += buf;
            else json.push_back((char)c);
        }
        json.push_back('"');
        gpt2__schema_literal(out, json);
        break;
    }
    case GPT2__JSON_ARRAY:
    case GPT2__JSON_OBJECT: {
        const bool object = v.kind == GPT2__JSON_OBJECT;
        const char* ws = gpt2__schema_ws(cv);
        gpt2__vector<gpt2__string> members;
        for (size_t i = 0; i < v.items.size(); i++) {
            gpt2__string m;
            if (object) {
                gpt2__json key;
                key.kind = GPT2__JSON_STRING;
                key.text = v.keys[i];
                gpt2__schema_json_literal(cv, key, &m);
                m += ws, m += " \":\" ", m += ws;
            }
            m += " ";
            gpt2__schema_json_literal(cv, v.items[i], &m);
            m += ws;
            members.push_back(std::move(m));
        }
        *out += object ? "\"{\"" : "\"[\"";
        *out += ws;
        const size_t n = members.size();
        if (object && n > 1 && n <= GPT2__SCHEMA_MAX_ANY_ORDER_KEYS) {
            gpt2__vector<gpt2__string> name((size_t)1 << n), member(n);
            for (size_t i = 0; i < n; i++) member[i] = gpt2__schema_add_rule(cv, members[i]);
            for (auto& r : name) r = gpt2__schema_rule_name(cv);
            for (size_t set = 0; set < name.size(); set++) {
                gpt2__string alts;
                for (size_t i = 0; i < n; i++)
                    if (!(set >> i & 1)) (alts += alts.empty() ? "" : " | ") += (set ? "\",\" " + gpt2__string(ws) + " " : gpt2__string()) + member[i] + " " + name[set | (size_t)1 << i];
                cv->rules += name[set] + " ::= " + (alts.empty() ? gpt2__string("\"\"") : alts) + "\n";
            }
            *out += " " + name[0];
        } else {
            for (size_t i = 0; i < n; i++) {
                if (i) *out += " \",\" ", *out += ws;
                *out += members[i];
            }
        }
        *out += object ? " \"}\"" : " \"]\"";
        break;
    }
    }
}

/* The JSON types a value has (an integer-valued number is both integer and number). */
static unsigned gpt2__json_types(const gpt2__json& v) {
    switch (v.kind) {
    case GPT2__JSON_NULL: return GPT2__T_NULL;
    case GPT2__JSON_BOOL: return GPT2__T_BOOL;
    case GPT2__JSON_STRING: return GPT2__T_STRING;
    case GPT2__JSON_ARRAY: return GPT2__T_ARRAY;
    case GPT2__JSON_OBJECT: return GPT2__T_OBJECT;
    case GPT2__JSON_NUMBER: return v.text.find_first_of(".eE") == gpt2__string::npos ? GPT2__T_NUMBER | GPT2__T_INTEGER : GPT2__T_NUMBER;
    }
    return 0;
}

static gpt2_result gpt2__schema_types(gpt2__schema_converter* cv, const gpt2__schema_kw& kw, unsigned* types) {
    static const char* const names[] = {"null", "boolean", "integer", "number", "string", "array", "object"};
    auto one = [&](const gpt2__json& t, unsigned* bit) {
        if (t.kind == GPT2__JSON_STRING)
            for (unsigned i = 0; i < 7; i++)
                if (t.text == names[i]) {
                    *bit = 1u << i;
                    return GPT2_OK;
                }
        return gpt2__schema_refuse(cv, kw.pointer, "expected a type name (null, boolean, integer, number, string, array, object) or an array of them");
    };
    *types = 0;
    if (kw.value->kind == GPT2__JSON_ARRAY) {
        for (const auto& t : kw.value->items) {
            unsigned bit = 0;
            GPT2__TRY(one(t, &bit));
            *types |= bit;
        }
        return GPT2_OK;
    }
    return one(*kw.value, types);
}

static bool gpt2__schema_annotation(std::string_view k) {
    static const char* const words[] = {"title", "description", "$schema", "$id", "id", "examples", "example", "default", "$comment",
                                        "deprecated", "readOnly", "writeOnly", "$defs", "definitions", "$anchor", "$vocabulary",
                                        "contentMediaType", "contentEncoding", "contentSchema", "$dynamicAnchor", "$recursiveAnchor"};
    for (const char* w : words)
        if (k == w) return true;
    return false;
}

/* Keywords the converter writes into the schemas it makes itself (complements): no draft has
   them. A document that writes one gets a stricter grammar, never a looser one. */
#define GPT2__KW_NOT_IN "\x01notIn"               /* none of these values (strings, arrays, objects) */
#define GPT2__KW_FRACTION "\x01fraction"          /* numbers: with a fraction that is not zero (no integer) */
#define GPT2__KW_NOT_MULTIPLE "\x01notMultipleOf" /* numbers: not a multiple of this */
#define GPT2__KW_AT "\x01at"                     /* the schema at this JSON pointer of the document */

/* Keywords that constrain and that the converter enforces (the rest of the constraining ones
   are refused; unknown keywords are ignored, as JSON Schema ignores them). `then` and `else` are
   read with their `if`, `minContains` and `maxContains` with their `contains` (in the same
   schema object), so they are not keywords of a view of their own. */
static bool gpt2__schema_known(std::string_view k) {
    static const char* const words[] = {
        "type", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "properties", "required", "additionalProperties", "items",
        "prefixItems", "additionalItems", "minItems", "maxItems", "minLength", "maxLength", "minimum", "maximum",
        "exclusiveMinimum", "exclusiveMaximum", "uniqueItems", "multipleOf", "pattern", "patternProperties", "propertyNames",
        "minProperties", "maxProperties", "dependencies", "dependentRequired", "dependentSchemas", "if", "not",
        "contains", "unevaluatedProperties", "unevaluatedItems", "format", "$dynamicRef", "$recursiveRef",
        GPT2__KW_NOT_IN, GPT2__KW_FRACTION, GPT2__KW_NOT_MULTIPLE, GPT2__KW_AT};
    for (const char* w : words)
        if (k == w) return true;
    return false;
}

/* A schema's keywords as a view; `pointer` is the schema's own. */
static void gpt2__schema_view_of(const gpt2__json& schema, std::string_view pointer, gpt2__schema_view* view, uint16_t level = 0, bool evaluates = true,
                                 bool made = false) {
    for (size_t i = 0; i < schema.keys.size(); i++) {
        if (gpt2__schema_annotation(schema.keys[i]) || !gpt2__schema_known(schema.keys[i])) continue;
        gpt2__schema_kw kw;
        kw.key = schema.keys[i];
        kw.value = &schema.items[i];
        kw.pointer = gpt2__string(pointer) + "/" + gpt2__schema_escape_pointer(schema.keys[i]);
        kw.owner = &schema;
        kw.level = level;
        kw.evaluates = evaluates;
        kw.made = made;
        view->push_back(std::move(kw));
    }
}

static const gpt2__schema_kw* gpt2__schema_find(const gpt2__schema_view& view, std::string_view key) {
    for (const auto& kw : view)
        if (kw.key == key) return &kw;
    return nullptr;
}

/* ---- Where $refs point: URIs, $ids and anchors ------------------------------------------- */

/* A URI reference split as RFC 3986 (appendix B) splits it. */
struct gpt2__uri {
    std::string_view scheme, authority, path, query, fragment;
    bool has_scheme = false, has_authority = false, has_query = false, has_fragment = false;
};

static gpt2__uri gpt2__uri_split(std::string_view s) {
    gpt2__uri u;
    const size_t hash = s.find('#');
    if (hash != std::string_view::npos) u.has_fragment = true, u.fragment = s.substr(hash + 1), s = s.substr(0, hash);
    const size_t question = s.find('?');
    if (question != std::string_view::npos) u.has_query = true, u.query = s.substr(question + 1), s = s.substr(0, question);
    const size_t colon = s.find(':');
    if (colon != std::string_view::npos && colon > 0 && s.substr(0, colon).find('/') == std::string_view::npos) u.has_scheme = true, u.scheme = s.substr(0, colon), s = s.substr(colon + 1);
    if (s.size() >= 2 && s[0] == '/' && s[1] == '/') {
        const size_t end = s.find('/', 2);
        u.has_authority = true;
        u.authority = s.substr(2, end == std::string_view::npos ? std::string_view::npos : end - 2);
        s = end == std::string_view::npos ? std::string_view() : s.substr(end);
    }
    u.path = s;
    return u;
}

/* RFC 3986's remove_dot_segments. */
static gpt2__string gpt2__uri_remove_dots(std::string_view in) {
    gpt2__string out;
    while (!in.empty()) {
        if (in.substr(0, 3) == "../") in.remove_prefix(3);
        else if (in.substr(0, 2) == "./") in.remove_prefix(2);
        else if (in.substr(0, 3) == "/./") in.remove_prefix(2);
        else if (in == "/.") in = "/";
        else if (in.substr(0, 4) == "/../" || in == "/..") {
            in = in.size() == 3 ? std::string_view("/") : in.substr(3);
            const size_t last = out.rfind('/');
            out.erase(last == gpt2__string::npos ? 0 : last);
        } else if (in == "." || in == "..") in = std::string_view();
        else {
            const size_t next = in.find('/', in[0] == '/' ? 1 : 0);
            out.append(in.substr(0, next));
            in = next == std::string_view::npos ? std::string_view() : in.substr(next);
        }
    }
    return out;
}

/* `ref` resolved against the absolute URI `base` (RFC 3986, 5.2.2). */
static gpt2__string gpt2__uri_resolve(std::string_view base_text, std::string_view ref_text) {
    const gpt2__uri base = gpt2__uri_split(base_text), ref = gpt2__uri_split(ref_text);
    gpt2__string scheme, authority, path, query;
    bool has_authority = false, has_query = false;
    if (ref.has_scheme) {
        scheme = ref.scheme, has_authority = ref.has_authority, authority = ref.authority, path = gpt2__uri_remove_dots(ref.path);
        has_query = ref.has_query, query = ref.query;
    } else {
        scheme = base.scheme;
        if (ref.has_authority) {
            has_authority = true, authority = ref.authority, path = gpt2__uri_remove_dots(ref.path), has_query = ref.has_query, query = ref.query;
        } else {
            has_authority = base.has_authority, authority = base.authority;
            if (ref.path.empty()) {
                path = base.path;
                has_query = ref.has_query || base.has_query, query = ref.has_query ? ref.query : base.query;
            } else {
                if (ref.path[0] == '/') path = gpt2__uri_remove_dots(ref.path);
                else {
                    gpt2__string merged;
                    if (base.has_authority && base.path.empty()) merged = "/" + gpt2__string(ref.path);
                    else {
                        const size_t slash = base.path.rfind('/');
                        merged = gpt2__string(slash == std::string_view::npos ? std::string_view() : base.path.substr(0, slash + 1)) + gpt2__string(ref.path);
                    }
                    path = gpt2__uri_remove_dots(merged);
                }
                has_query = ref.has_query, query = ref.query;
            }
        }
    }
    gpt2__string out;
    if (!scheme.empty() || base.has_scheme || ref.has_scheme) out += scheme + ":";
    if (has_authority) out += "//" + authority;
    out += path;
    if (has_query) out += "?" + query;
    if (ref.has_fragment) out += "#" + gpt2__string(ref.fragment);
    return out;
}

/* %XX escapes decoded (a fragment's JSON pointer or anchor). */
static gpt2__string gpt2__uri_decode(std::string_view s) {
    gpt2__string out;
    for (size_t i = 0; i < s.size(); i++) {
        if (s[i] == '%' && i + 2 < s.size() && std::isxdigit((unsigned char)s[i + 1]) && std::isxdigit((unsigned char)s[i + 2])) {
            out.push_back((char)std::strtol(gpt2__string(s.substr(i + 1, 2)).c_str(), nullptr, 16));
            i += 2;
        } else out.push_back(s[i]);
    }
    return out;
}

/* How a keyword holds schemas: 1 its value is one, 2 an object of them, 3 an array of them, 4
   one or an array (items, draft 4-7's dependencies: one or a list of names); 0 none. */
static int gpt2__schema_holds(std::string_view k) {
    static const char* const one[] = {"additionalItems", "additionalProperties", "contains", "propertyNames", "not", "if", "then", "else",
                                      "unevaluatedItems", "unevaluatedProperties", "contentSchema"};
    static const char* const object[] = {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies"};
    static const char* const array[] = {"allOf", "anyOf", "oneOf", "prefixItems"};
    for (const char* w : one)
        if (k == w) return 1;
    for (const char* w : object)
        if (k == w) return 2;
    for (const char* w : array)
        if (k == w) return 3;
    return k == "items" ? 4 : 0;
}

/* The value at a JSON pointer ("/a/0/b~1c") of the document; NULL where there is none. */
static const gpt2__json* gpt2__json_at(const gpt2__json* at, std::string_view pointer) {
    size_t i = 0;
    while (at && i < pointer.size()) {
        if (pointer[i] != '/') return nullptr;
        size_t end = pointer.find('/', i + 1);
        if (end == std::string_view::npos) end = pointer.size();
        gpt2__string token;
        for (size_t j = i + 1; j < end; j++) {
            if (pointer[j] == '~' && j + 1 < end && (pointer[j + 1] == '0' || pointer[j + 1] == '1')) token.push_back(pointer[++j] == '0' ? '~' : '/');
            else token.push_back(pointer[j]);
        }
        const gpt2__json* next = nullptr;
        if (at->kind == GPT2__JSON_OBJECT) next = at->get(token);
        else if (at->kind == GPT2__JSON_ARRAY && !token.empty() && token.find_first_not_of("0123456789") == gpt2__string::npos && token.size() < 9 && (token == "0" || token[0] != '0')) {
            const size_t index = (size_t)std::strtoul(token.c_str(), nullptr, 10);
            if (index < at->items.size()) next = &at->items[index];
        }
        at = next;
        i = end;
    }
    return at;
}

/* Names every schema of the document (those at the places the keywords that hold schemas give):
   an $id makes a resource, its URI resolved against the base around it; an $anchor (draft 7: an
   $id that is a fragment) a name within it. Draft 7 and before ignore every keyword beside a
   $ref, its $id too; where the draft is not known and an $id stands beside a $ref, a $ref is
   not resolved (*ambiguous names where). */
static gpt2_result gpt2__schema_index(gpt2__schema_converter* cv, const gpt2__json& schema, const gpt2__string& pointer, const gpt2__string& base_in, int depth,
                                      gpt2__string* ambiguous) {
    if (schema.kind != GPT2__JSON_OBJECT) return GPT2_OK;
    if (depth > GPT2__JSON_MAX_DEPTH) return gpt2__schema_refuse(cv, pointer, "schemas nest too deep");
    gpt2__string base = base_in;
    const bool old_draft = cv->draft == GPT2__DRAFT_7_OR_OLDER;
    const gpt2__json* ref = schema.get("$ref");
    const gpt2__json* id = schema.get("$id");
    if (!id && old_draft) id = schema.get("id");
    if (!id && cv->draft == GPT2__DRAFT_UNKNOWN && !pointer.empty() && schema.get("id") && schema.get("id")->kind == GPT2__JSON_STRING &&
        !schema.get("id")->text.empty() && schema.get("id")->text[0] != '#' && ambiguous->empty())
        *ambiguous = pointer + "/id"; /* draft 4's $id, or an unknown keyword: the draft decides */
    bool resource = false;
    if (id && id->kind == GPT2__JSON_STRING && !(old_draft && ref)) {
        if (ref && cv->draft == GPT2__DRAFT_UNKNOWN && (id->text.empty() || id->text[0] != '#') && ambiguous->empty()) *ambiguous = pointer + "/$id";
        const gpt2__string resolved = gpt2__uri_resolve(base, id->text);
        const size_t hash = resolved.find('#');
        if (hash != gpt2__string::npos && hash + 1 < resolved.size() && cv->draft != GPT2__DRAFT_2019_OR_NEWER) {
            cv->names.push_back({resolved, pointer, false}); /* draft 7's anchor: "$id": "#foo" */
        } else {
            base = resolved.substr(0, hash);
            cv->names.push_back({base, pointer, false});
            resource = true;
        }
    }
    if (pointer.empty() && !resource) cv->names.push_back({base, pointer, false}); /* the document itself */
    for (const char* anchor : {"$anchor", "$dynamicAnchor"})
        if (const gpt2__json* a = schema.get(anchor); a && a->kind == GPT2__JSON_STRING)
            cv->names.push_back({base + "#" + a->text, pointer, anchor[1] == 'd'});
    for (size_t i = 0; i < schema.keys.size(); i++) {
        const int holds = gpt2__schema_holds(schema.keys[i]);
        const gpt2__json& v = schema.items[i];
        const gpt2__string at = pointer + "/" + gpt2__schema_escape_pointer(schema.keys[i]);
        if (holds == 1 || (holds == 4 && v.kind == GPT2__JSON_OBJECT)) GPT2__TRY(gpt2__schema_index(cv, v, at, base, depth + 1, ambiguous));
        else if (holds == 2 && v.kind == GPT2__JSON_OBJECT)
            for (size_t k = 0; k < v.keys.size(); k++) GPT2__TRY(gpt2__schema_index(cv, v.items[k], at + "/" + gpt2__schema_escape_pointer(v.keys[k]), base, depth + 1, ambiguous));
        else if ((holds == 3 || holds == 4) && v.kind == GPT2__JSON_ARRAY)
            for (size_t k = 0; k < v.items.size(); k++) {
                char index[24];
                std::snprintf(index, sizeof index, "/%zu", k);
                GPT2__TRY(gpt2__schema_index(cv, v.items[k], at + index, base, depth + 1, ambiguous));
            }
    }
    return GPT2_OK;
}

/* The base URI at a place of the document: that of the innermost resource around it. */
static const gpt2__string& gpt2__schema_base_at(const gpt2__schema_converter* cv, std::string_view pointer) {
    const gpt2__schema_name* best = nullptr;
    for (const auto& n : cv->names) {
        if (n.uri.find('#') != gpt2__string::npos) continue; /* an anchor */
        const bool around = pointer.substr(0, n.pointer.size()) == n.pointer && (pointer.size() == n.pointer.size() || pointer[n.pointer.size()] == '/');
        if (around && (!best || n.pointer.size() >= best->pointer.size())) best = &n;
    }
    return best->uri; /* the document's own name is always there */
}

static gpt2_result gpt2__schema_unresolved(gpt2__schema_converter* cv, const gpt2__schema_kw& kw, const char* why) {
    return gpt2__fail(cv->err, GPT2_ERROR_BAD_GRAMMAR, "json schema: %s: unresolved %.*s '%s'%s", kw.pointer.c_str(), (int)kw.key.size(), kw.key.data(), kw.value->text.c_str(), why);
}

/* Resolves a $ref (also $dynamicRef and $recursiveRef, read statically where that is exact):
   against the base URI where it is written, to a schema of this document by its resource and a
   JSON pointer or an anchor. A schema of another document is not read. */
static gpt2_result gpt2__schema_resolve(gpt2__schema_converter* cv, const gpt2__schema_kw& kw, const gpt2__json** target, gpt2__string* target_pointer) {
    if (kw.value->kind != GPT2__JSON_STRING) return gpt2__schema_refuse(cv, kw.pointer, "$ref must be a string");
    if (kw.key == GPT2__KW_AT) {
        *target_pointer = kw.value->text;
        *target = gpt2__json_at(cv->root, *target_pointer);
        if (!*target) return gpt2__schema_unresolved(cv, kw, "");
        return GPT2_OK;
    }
    if (!cv->ambiguous_id.empty())
        return gpt2__schema_refuse(cv, cv->ambiguous_id, "where this $id points the $refs under it depends on the draft (draft 7 ignores an $id beside a $ref, draft 4 calls it \"id\"): name the draft with \"$schema\"");
    const std::string_view location = std::string_view(kw.pointer).substr(0, kw.pointer.rfind('/'));
    const gpt2__string full = gpt2__uri_resolve(gpt2__schema_base_at(cv, location), kw.value->text);
    const size_t hash = full.find('#');
    const gpt2__string resource = full.substr(0, hash), fragment = hash == gpt2__string::npos ? gpt2__string() : gpt2__uri_decode(std::string_view(full).substr(hash + 1));
    const gpt2__schema_name* found = nullptr;
    for (const auto& n : cv->names)
        if (n.uri == resource) found = &n;
    if (!found) return gpt2__schema_unresolved(cv, kw, " (a schema of another document: only this document's schemas are read)");
    *target_pointer = found->pointer;
    if (!fragment.empty() && fragment[0] != '/') { /* an anchor */
        found = nullptr;
        for (const auto& n : cv->names)
            if (n.uri == resource + "#" + fragment) found = &n;
        if (!found) return gpt2__schema_unresolved(cv, kw, " (no schema of the document has this anchor)");
        *target_pointer = found->pointer;
    } else {
        *target_pointer += fragment;
    }
    *target = gpt2__json_at(cv->root, *target_pointer);
    if (!*target) return gpt2__schema_unresolved(cv, kw, kw.value->text.find('/') != gpt2__string::npos ? "" : " (not a JSON pointer)");
    if (kw.key == "$dynamicRef" && found && found->dynamic && !fragment.empty() && fragment[0] != '/') {
        /* the outermost resource of the dynamic scope with this $dynamicAnchor: the document's
           own resource where it has one, else the one resource that has it */
        const gpt2__schema_name* outer = nullptr;
        size_t n_dynamic = 0;
        for (const auto& n : cv->names)
            if (n.dynamic && n.uri.size() > fragment.size() && n.uri.compare(n.uri.size() - fragment.size() - 1, gpt2__string::npos, "#" + fragment) == 0) {
                n_dynamic++;
                if (n.uri == gpt2__schema_base_at(cv, "") + "#" + fragment) outer = &n;
            }
        if (!outer && n_dynamic > 1)
            return gpt2__schema_refuse(cv, kw.pointer, "'$dynamicRef' is enforced where its anchor names one schema or the document's own (here the dynamic scope decides)");
        if (outer) *target_pointer = outer->pointer, *target = gpt2__json_at(cv->root, outer->pointer);
    }
    if (kw.key == "$recursiveRef") {
        const gpt2__json* anchor = (*target)->kind == GPT2__JSON_OBJECT ? (*target)->get("$recursiveAnchor") : nullptr;
        const gpt2__json* root_anchor = cv->root->kind == GPT2__JSON_OBJECT ? cv->root->get("$recursiveAnchor") : nullptr;
        if (anchor && anchor->kind == GPT2__JSON_BOOL && anchor->boolean && root_anchor && root_anchor->kind == GPT2__JSON_BOOL && root_anchor->boolean)
            *target_pointer = "", *target = cv->root;
    }
    return GPT2_OK;
}

/* The rule of a $ref's target: made once, written later (so recursion through refs is a rule
   that names itself, not a recursion of the converter). */
static gpt2_result gpt2__schema_ref_rule(gpt2__schema_converter* cv, const gpt2__schema_kw& kw, gpt2__string* rule) {
    const gpt2__json* target;
    gpt2__string pointer;
    GPT2__TRY(gpt2__schema_resolve(cv, kw, &target, &pointer));
    for (const auto& r : cv->refs)
        if (r.first == pointer) {
            *rule = r.second;
            return GPT2_OK;
        }
    *rule = gpt2__schema_rule_name(cv);
    cv->refs.emplace_back(pointer, *rule);
    cv->pending.emplace_back(pointer, target);
    return GPT2_OK;
}

static gpt2_result gpt2__schema_expr(gpt2__schema_converter* cv, const gpt2__json& schema, std::string_view pointer, gpt2__string* out, bool* impossible, int depth);
static gpt2_result gpt2__schema_view_expr(gpt2__schema_converter* cv, gpt2__schema_view view, std::string_view pointer, gpt2__string* out, bool* impossible, int depth);

static bool gpt2__schema_is_ref(std::string_view key) { return key == "$ref" || key == "$dynamicRef" || key == "$recursiveRef" || key == GPT2__KW_AT; }

/* A view with allOf's parts and the targets of its $refs (where other keywords stand beside
   them) merged in: every part's keywords hold, each read where it was written. The parts' and
   targets' keywords come before those of the schema they are written in (in their order), so
   their properties come before the schema's own in the objects written, as a base class's fields
   come before a subclass's. A target merged twice is merged
   once (A and A is A), which also ends a cycle of $refs. *impossible: a part is false. */
static gpt2_result gpt2__schema_normalize(gpt2__schema_converter* cv, gpt2__schema_view* view, bool* impossible) {
    gpt2__vector<gpt2__string> merged_targets;
    for (size_t steps = 0;; steps++) {
        size_t at = 0;
        while (at < view->size() && (*view)[at].key != "allOf" && !(gpt2__schema_is_ref((*view)[at].key) && view->size() > 1)) at++;
        if (at == view->size()) return GPT2_OK;
        const gpt2__schema_kw kw = (*view)[at];
        if (steps > 4 * GPT2__SCHEMA_MAX_DEPTH) return gpt2__schema_refuse(cv, kw.pointer, "allOf and $ref nest too deep to merge");
        size_t first = 0; /* where the keywords of its schema begin: the parts go before them */
        while ((*view)[first].owner != kw.owner) first++;
        view->erase(view->begin() + (ptrdiff_t)at);
        gpt2__schema_view parts;
        if (kw.key == "allOf") {
            if (kw.value->kind != GPT2__JSON_ARRAY || kw.value->items.empty()) return gpt2__schema_refuse(cv, kw.pointer, "allOf must be a non-empty array of schemas");
            for (size_t i = 0; i < kw.value->items.size(); i++) {
                const gpt2__json& part = kw.value->items[i];
                char index[24];
                std::snprintf(index, sizeof index, "/%zu", i);
                if (part.kind == GPT2__JSON_BOOL) {
                    if (part.boolean) continue;
                    *impossible = true;
                    return GPT2_OK;
                }
                if (part.kind != GPT2__JSON_OBJECT) return gpt2__schema_refuse(cv, kw.pointer + index, "a schema must be an object or a boolean");
                gpt2__schema_view_of(part, kw.pointer + index, &parts, (uint16_t)(kw.level + 1), kw.evaluates, kw.made);
            }
        } else {
            const gpt2__json* target;
            gpt2__string target_pointer;
            GPT2__TRY(gpt2__schema_resolve(cv, kw, &target, &target_pointer));
            if (std::find(merged_targets.begin(), merged_targets.end(), target_pointer) != merged_targets.end()) continue;
            merged_targets.push_back(target_pointer);
            if (target->kind == GPT2__JSON_BOOL) {
                if (target->boolean) continue;
                *impossible = true;
                return GPT2_OK;
            }
            if (target->kind != GPT2__JSON_OBJECT) return gpt2__schema_refuse(cv, kw.pointer, "a $ref must point to a schema (an object or a boolean)");
            gpt2__schema_view_of(*target, target_pointer, &parts, (uint16_t)(kw.level + 1), kw.evaluates);
        }
        view->insert(view->begin() + (ptrdiff_t)first, parts.begin(), parts.end());
    }
}

/* A count (minLength, maxItems, ...): a whole number from 0 to 65536, written as an integer or
   with a fraction of zeros (2.0). */
static gpt2_result gpt2__schema_uint(gpt2__schema_converter* cv, const gpt2__schema_kw& kw, uint32_t* v) {
    gpt2__schema_decimal d;
    if (!gpt2__schema_decimal_of(*kw.value, &d) || d.negative || !d.fraction.empty() || d.whole > GPT2__GRAMMAR_MAX_REPEAT)
        return gpt2__schema_refuse(cv, kw.pointer, "expected a whole number from 0 to 65536");
    *v = (uint32_t)d.whole;
    return GPT2_OK;
}

/* Every keyword of the view named `key` (several where allOf's parts or branches each have one). */
static gpt2__vector<const gpt2__schema_kw*> gpt2__schema_all(const gpt2__schema_view& view, std::string_view key) {
    gpt2__vector<const gpt2__schema_kw*> out;
    for (const auto& kw : view)
        if (kw.key == key) out.push_back(&kw);
    return out;
}

/* The tightest of a count keyword written one or more times: the greatest minimum, the least
   maximum. *present: whether there is one; *which: the one that holds it. */
static gpt2_result gpt2__schema_count(gpt2__schema_converter* cv, const gpt2__schema_view& view, std::string_view key, bool at_least, uint32_t* v, bool* present,
                                      const gpt2__schema_kw** which = nullptr) {
    *present = false;
    for (const gpt2__schema_kw* kw : gpt2__schema_all(view, key)) {
        uint32_t x = 0;
        GPT2__TRY(gpt2__schema_uint(cv, *kw, &x));
        if (!*present || (at_least ? x > *v : x < *v)) {
            *v = x;
            if (which) *which = kw;
        }
        *present = true;
    }
    return GPT2_OK;
}

/* The integers of [lo, hi] (lo <= hi, both >= 0; hi < 0: no bound) as digits without leading
   zeros: one alternative per digit count, and within a count the classic split on the first
   digit that differs. */
static void gpt2__schema_digits(gpt2__string* out, const char* lo, const char* hi, size_t n) {
    if (n == 0) return;
    bool lo_zeros = true, hi_nines = true;
    for (size_t i = 1; i < n; i++) lo_zeros &= lo[i] == '0', hi_nines &= hi[i] == '9';
    char buf[64];
    if (lo_zeros && hi_nines) {
        std::snprintf(buf, sizeof buf, "[%c-%c]", lo[0], hi[0]);
        *out += buf;
        if (n > 1) std::snprintf(buf, sizeof buf, " [0-9]{%zu}", n - 1), *out += buf;
        return;
    }
    if (lo[0] == hi[0]) {
        std::snprintf(buf, sizeof buf, "\"%c\" ", lo[0]);
        *out += buf;
        gpt2__schema_digits(out, lo + 1, hi + 1, n - 1);
        return;
    }
    char nines[24], zeros[24];
    std::memset(nines, '9', sizeof nines), std::memset(zeros, '0', sizeof zeros);
    *out += "(\"";
    out->push_back(lo[0]);
    *out += "\" ";
    gpt2__schema_digits(out, lo + 1, nines, n - 1);
    if (hi[0] - lo[0] > 1) {
        std::snprintf(buf, sizeof buf, " | [%c-%c]", lo[0] + 1, hi[0] - 1);
        *out += buf;
        if (n > 1) std::snprintf(buf, sizeof buf, " [0-9]{%zu}", n - 1), *out += buf;
    }
    *out += " | \"";
    out->push_back(hi[0]);
    *out += "\" ";
    gpt2__schema_digits(out, zeros, hi + 1, n - 1);
    *out += ")";
}

static void gpt2__schema_natural_range(gpt2__string* out, long long lo, long long hi) {
    char los[24], his[24];
    const int lo_len = std::snprintf(los, sizeof los, "%lld", lo);
    const int hi_len = hi < 0 ? 19 : std::snprintf(his, sizeof his, "%lld", hi);
    *out += "(";
    bool first = true;
    for (int len = lo_len; len <= hi_len; len++) {
        char a[24], b[24];
        if (len == lo_len) std::memcpy(a, los, (size_t)len);
        else a[0] = '1', std::memset(a + 1, '0', (size_t)len - 1);
        if (hi >= 0 && len == hi_len) std::memcpy(b, his, (size_t)len);
        else std::memset(b, '9', (size_t)len);
        if (!first) *out += " | ";
        first = false;
        gpt2__schema_digits(out, a, b, (size_t)len);
    }
    if (hi < 0) *out += " | [1-9] [0-9]{19,}";
    *out += ")";
}

/* The four keywords gpt2__schema_bounds reads. */
static bool gpt2__schema_is_bound(std::string_view key) {
    return key == "minimum" || key == "maximum" || key == "exclusiveMinimum" || key == "exclusiveMaximum";
}

/* The value's bounds from minimum, maximum, exclusiveMinimum and exclusiveMaximum (draft 4's
   boolean exclusives too, read with the minimum or maximum of their own schema), the tightest of
   all of them on each side. */
static gpt2_result gpt2__schema_bounds(gpt2__schema_converter* cv, const gpt2__schema_view& view, gpt2__schema_end* lower, gpt2__schema_end* upper) {
    auto take = [&](const gpt2__schema_kw& kw, bool strict, gpt2__schema_end* end) {
        gpt2__schema_decimal v;
        if (!gpt2__schema_decimal_of(*kw.value, &v))
            return gpt2__schema_refuse(cv, kw.pointer, "a number bound must be a number with at most 18 digits before its point and 64 after");
        const bool tighter = !end->present || (end == lower ? gpt2__schema_decimal_less(end->at, v) : gpt2__schema_decimal_less(v, end->at)) ||
                             (!gpt2__schema_decimal_less(end->at, v) && !gpt2__schema_decimal_less(v, end->at) && strict);
        if (tighter) end->present = true, end->strict = strict, end->at = v;
        return GPT2_OK;
    };
    for (const auto& kw : view) {
        const bool is_min = kw.key == "minimum", is_max = kw.key == "maximum";
        if (is_min || is_max) {
            const gpt2__json* ex = kw.owner ? kw.owner->get(is_min ? "exclusiveMinimum" : "exclusiveMaximum") : nullptr;
            GPT2__TRY(take(kw, ex && ex->kind == GPT2__JSON_BOOL && ex->boolean, is_min ? lower : upper));
        } else if ((kw.key == "exclusiveMinimum" || kw.key == "exclusiveMaximum") && kw.value->kind != GPT2__JSON_BOOL) {
            GPT2__TRY(take(kw, true, kw.key == "exclusiveMinimum" ? lower : upper));
        }
    }
    return GPT2_OK;
}

/* Whether a number lies between two ends (each absent, inclusive or strict). */
static bool gpt2__schema_between(const gpt2__schema_end& lower, const gpt2__schema_end& upper, const gpt2__schema_decimal& d) {
    const bool above_lower = !lower.present || (lower.strict ? gpt2__schema_decimal_less(lower.at, d) : !gpt2__schema_decimal_less(d, lower.at));
    const bool below_upper = !upper.present || (upper.strict ? gpt2__schema_decimal_less(d, upper.at) : !gpt2__schema_decimal_less(upper.at, d));
    return above_lower && below_upper;
}

/* The least integer that a lower end lets in, or the greatest that an upper end does. */
static long long gpt2__schema_integer_end(const gpt2__schema_end& end, bool is_lower) {
    const gpt2__schema_decimal& d = end.at;
    const long long toward_zero = d.negative ? -d.whole : d.whole;
    const bool whole = d.fraction.empty();
    const long long floor = toward_zero - (!whole && d.negative), ceil = toward_zero + (!whole && !d.negative);
    return is_lower ? (end.strict ? floor + 1 : ceil) : (end.strict ? ceil - 1 : floor);
}

/* The integers between the view's bounds (none: *impossible). */
static gpt2_result gpt2__schema_integer(gpt2__schema_converter* cv, const gpt2__schema_view& view, std::string_view pointer, gpt2__string* out, bool* impossible) {
    gpt2__schema_end lower, upper;
    GPT2__TRY(gpt2__schema_bounds(cv, view, &lower, &upper));
    const bool has_lo = lower.present, has_hi = upper.present;
    const long long lo = has_lo ? gpt2__schema_integer_end(lower, true) : 0, hi = has_hi ? gpt2__schema_integer_end(upper, false) : 0;
    const char* zeros = cv->integer_fraction ? " (\".\" \"0\"+)?" : ""; /* 1.0 is the integer 1 */
    if (!has_lo && !has_hi) {
        cv->used_integer = true;
        *out = cv->integer_fraction ? gpt2__schema_add_rule(cv, gpt2__string("integer") + zeros) : "integer";
        return GPT2_OK;
    }
    if (has_lo && has_hi && lo > hi) {
        char why[128];
        std::snprintf(why, sizeof why, "no integer is at least %lld and at most %lld", lo, hi);
        return gpt2__schema_contradiction(cv, pointer, why, impossible);
    }
    gpt2__string alts;
    /* negatives: "-" and |x| in [max(1, -hi), -lo] */
    if (!has_lo || lo < 0) {
        const long long a = has_hi ? (hi < 0 ? -hi : 1) : 1;
        alts += "\"-\" ";
        gpt2__schema_natural_range(&alts, a, has_lo ? -lo : -1);
    }
    if (!has_hi || hi >= 0) {
        if (!alts.empty()) alts += " | ";
        const long long a = has_lo && lo > 0 ? lo : 0;
        gpt2__schema_natural_range(&alts, a, has_hi ? hi : -1);
    }
    *out = gpt2__schema_add_rule(cv, *zeros ? "(" + alts + ")" + zeros : alts);
    return GPT2_OK;
}

/* The digits after a number's point whose value f lies between two ends' fractions (each
   absent, or f compared with its fraction digits), made a digit at a time as a comparison
   reads them: a position, and whether the digits so far still equal each end's. */
struct gpt2__schema_fraction {
    gpt2__schema_converter* cv;
    const gpt2__schema_end* lower;
    const gpt2__schema_end* upper;
};

/* Whether the digits may stop at position i (the rest being zeros). */
static bool gpt2__schema_fraction_may_stop(const gpt2__schema_fraction& f, size_t i, bool on_lower, bool on_upper) {
    const bool above = !on_lower || (i >= f.lower->at.fraction.size() && !f.lower->strict); /* before its end, an end's digits left are not all zero */
    const bool below = !on_upper || i < f.upper->at.fraction.size() || !f.upper->strict;
    return above && below;
}

/* The digits from position i on (none allowed where may_be_empty), as a GBNF expression; ""
   when no digits can follow. */
static gpt2__string gpt2__schema_fraction_from(const gpt2__schema_fraction& f, size_t i, bool on_lower, bool on_upper, bool may_be_empty) {
    const gpt2__string& c = f.lower->at.fraction;
    const gpt2__string& d = f.upper->at.fraction;
    if (!on_lower && !on_upper) return may_be_empty ? "[0-9]*" : "[0-9]+";
    if (i >= c.size() && i >= d.size()) { /* the ends' digits are used up: zeros from here on */
        if (on_lower && on_upper) return f.lower->strict || f.upper->strict ? "" : may_be_empty ? "\"0\"*" : "\"0\"+";
        if (on_lower) return f.lower->strict ? "\"0\"* [1-9] [0-9]*" : may_be_empty ? "[0-9]*" : "[0-9]+";
        return f.upper->strict ? "" : may_be_empty ? "\"0\"*" : "\"0\"+";
    }
    gpt2__string alts;
    auto add = [&](const gpt2__string& a) { alts += alts.empty() ? "" : " | ", alts += a; };
    if (may_be_empty && gpt2__schema_fraction_may_stop(f, i, on_lower, on_upper)) add("\"\"");
    const char lo = on_lower && i < c.size() ? c[i] : '0', hi = !on_upper ? '9' : i < d.size() ? d[i] : '0';
    char buf[16];
    for (char x = lo; x <= hi; x++) {
        const bool still_lower = on_lower && x == lo, still_upper = on_upper && x == hi;
        if (!still_lower && !still_upper) { /* between the ends' digits: any digits after */
            const char last = on_upper ? (char)(hi - 1) : hi;
            std::snprintf(buf, sizeof buf, x == last ? "\"%c\"" : "[%c-%c]", x, last);
            add(gpt2__string(buf) + " [0-9]*");
            x = last;
            continue;
        }
        const gpt2__string rest = gpt2__schema_fraction_from(f, i + 1, still_lower, still_upper, true);
        if (rest.empty()) continue;
        std::snprintf(buf, sizeof buf, "\"%c\" ", x);
        add(gpt2__string(buf) + gpt2__schema_add_rule(f.cv, rest));
    }
    return alts;
}

/* Appends to `out` the fraction (none, or "." and digits) between the ends' fractions; false
   when there is none. */
static bool gpt2__schema_fraction_digits(gpt2__schema_converter* cv, const gpt2__schema_end& lower, const gpt2__schema_end& upper, gpt2__string* out) {
    const gpt2__schema_fraction f{cv, &lower, &upper};
    const gpt2__string digits = gpt2__schema_fraction_from(f, 0, lower.present, upper.present, false);
    const bool may_be_none = gpt2__schema_fraction_may_stop(f, 0, lower.present, upper.present);
    if (digits.empty()) return may_be_none;
    const gpt2__string rule = gpt2__schema_add_rule(cv, digits);
    *out += may_be_none ? " (\".\" " + rule + ")?" : " \".\" " + rule;
    return true;
}

/* Magnitudes (a number without its sign, without an exponent) between `lower` (present, at
   least zero) and `upper` (absent: no bound), as alternatives appended to `alts`; false when
   there are none. */
static bool gpt2__schema_magnitudes(gpt2__schema_converter* cv, const gpt2__schema_end& lower, const gpt2__schema_end& upper, gpt2__string* alts) {
    const long long a = lower.at.whole, b = upper.at.whole;
    const size_t before = alts->size();
    auto add = [&](long long lo, long long hi, const gpt2__schema_end& frac_lower, const gpt2__schema_end& frac_upper) {
        gpt2__string e;
        gpt2__schema_natural_range(&e, lo, hi);
        if (!gpt2__schema_fraction_digits(cv, frac_lower, frac_upper, &e)) return;
        *alts += alts->size() == before ? "" : " | ";
        *alts += e;
    };
    const gpt2__schema_end none;
    if (upper.present && a == b) {
        add(a, a, lower, upper);
    } else if (!upper.present || a < b) {
        add(a, a, lower, none);
        if (!upper.present || a + 1 <= b - 1) add(a + 1, upper.present ? b - 1 : -1, none, none);
        if (upper.present) add(b, b, none, upper);
    }
    return alts->size() != before;
}

/* A number between the schema's bounds. Without bounds, JSON's number; with "minimum": 0
   alone, any number without a minus sign; with other bounds, the numbers written without an
   exponent between them, exactly (a grammar cannot compare 1e3 with 999 as it reads it). */
static gpt2_result gpt2__schema_number(gpt2__schema_converter* cv, const gpt2__schema_view& view, std::string_view pointer, gpt2__string* out, bool* impossible) {
    gpt2__schema_end lo, hi; /* the value's bounds, signed */
    GPT2__TRY(gpt2__schema_bounds(cv, view, &lo, &hi));
    if (!lo.present && !hi.present) {
        cv->used_number = true;
        *out = "number";
        return GPT2_OK;
    }
    if (lo.present && !lo.strict && lo.at.zero() && !hi.present) { /* the sign alone decides: exponents too ("-0" is zero) */
        *out = gpt2__schema_add_rule(cv, "((\"0\" | [1-9] [0-9]*) (\".\" [0-9]+)? | \"-0\" (\".\" \"0\"+)?) ([eE] [-+]? [0-9]+)?");
        return GPT2_OK;
    }
    gpt2__string alts;
    /* zero and above: magnitudes from max(lo, 0) to hi */
    if (!hi.present || !hi.at.negative) {
        gpt2__schema_end from = lo;
        if (!lo.present || lo.at.negative) from = gpt2__schema_end(), from.present = true;
        gpt2__schema_magnitudes(cv, from, hi, &alts);
    }
    /* "-" and magnitudes from max(-hi, 0) to -lo ("-0" is zero: in only where zero is) */
    if (!lo.present || lo.at.negative || lo.at.zero()) {
        gpt2__schema_end from, to = lo;
        from.present = true;
        if (hi.present && (hi.at.negative || hi.at.zero())) from = hi;
        from.at.negative = false;
        to.at.negative = false;
        gpt2__string negative;
        if (gpt2__schema_magnitudes(cv, from, to, &negative)) {
            alts += alts.empty() ? "" : " | ";
            alts += "\"-\" (" + negative + ")";
        }
    }
    if (alts.empty()) return gpt2__schema_contradiction(cv, pointer, "no number lies between minimum and maximum", impossible);
    *out = gpt2__schema_add_rule(cv, alts);
    return GPT2_OK;
}

/* multipleOf as a decimal fraction a / 10^b (0.5 is 5 / 10^1, 12 is 12 / 10^0). */
struct gpt2__schema_multiple {
    uint64_t a = 1;
    uint32_t b = 0;
};

enum { GPT2__SCHEMA_MAX_MULTIPLE_STATES = 2048, GPT2__SCHEMA_MAX_ENUMERATED = 1024 };

static uint64_t gpt2__gcd(uint64_t x, uint64_t y) {
    while (y) x %= y, std::swap(x, y);
    return x;
}

/* The view's multipleOf (several: their least common multiple), or the one of `key`
   (GPT2__KW_NOT_MULTIPLE). *present false where there is none. */
static gpt2_result gpt2__schema_multiple_of(gpt2__schema_converter* cv, const gpt2__schema_view& view, const char* key, gpt2__schema_multiple* m, bool* present) {
    *present = false;
    for (const gpt2__schema_kw* kw : gpt2__schema_all(view, key)) {
        gpt2__schema_decimal d;
        if (!gpt2__schema_decimal_of(*kw->value, &d) || d.negative || d.zero())
            return gpt2__schema_refuse(cv, kw->pointer, "multipleOf must be a number greater than 0 with at most 18 digits before its point and 64 after");
        gpt2__schema_multiple x;
        x.b = (uint32_t)d.fraction.size();
        const gpt2__string digits = std::to_string(d.whole).c_str() + d.fraction;
        if (digits.size() > 15 || x.b > 12) return gpt2__schema_refuse(cv, kw->pointer, "'multipleOf' is enforced for values of at most 15 digits");
        x.a = std::strtoull(digits.c_str(), nullptr, 10);
        if (*present) { /* the least common multiple, over a common denominator */
            const uint32_t b = std::max(m->b, x.b);
            uint64_t p = m->a, q = x.a;
            for (uint32_t i = m->b; i < b; i++) p *= 10;
            for (uint32_t i = x.b; i < b; i++) q *= 10;
            const uint64_t g = gpt2__gcd(p, q);
            if (p / g > UINT64_C(1000000000000000) / q) return gpt2__schema_refuse(cv, kw->pointer, "'multipleOf's written together have a least common multiple too large to enforce");
            x.a = p / g * q, x.b = b;
            while (x.b > 0 && x.a % 10 == 0) x.a /= 10, x.b--;
        }
        *m = x;
        *present = true;
    }
    return GPT2_OK;
}

/* Whether the decimal d is a multiple of m: d * 10^b is a whole number that a divides. */
static bool gpt2__schema_is_multiple(const gpt2__schema_decimal& d, const gpt2__schema_multiple& m) {
    if (d.fraction.size() > m.b) return false;
    gpt2__string digits = std::to_string(d.whole).c_str() + d.fraction;
    digits.append(m.b - d.fraction.size(), '0');
    uint64_t r = 0;
    for (char c : digits) r = (r * 10 + (uint64_t)(c - '0')) % m.a;
    return r == 0;
}

/* The numbers written without an exponent that are multiples of m (or, negated, that are not),
   as a machine reading the digits: the remainder of the value times 10^b by a, and how many
   digits of the fraction were read. `integers`: without a fraction (or, where 1.0 is an
   integer, with zeros after the point). `no_sign`: zero and above. */
static gpt2_result gpt2__schema_multiples(gpt2__schema_converter* cv, const gpt2__schema_multiple& m, bool integers, bool negate, bool no_sign, const gpt2__schema_kw& where,
                                          gpt2__string* out, bool* impossible) {
    const uint64_t a = m.a;
    const uint32_t b = m.b;
    const bool fraction = !integers || cv->integer_fraction;
    if ((uint64_t)a * (fraction ? b + 3 : 1) > GPT2__SCHEMA_MAX_MULTIPLE_STATES) {
        char why[160];
        std::snprintf(why, sizeof why, "'multipleOf' is enforced where its digits make at most %d states (this one makes %llu)", (int)GPT2__SCHEMA_MAX_MULTIPLE_STATES,
                      (unsigned long long)(a * (fraction ? b + 3 : 1)));
        return gpt2__schema_refuse(cv, where.pointer, why);
    }
    if (negate && integers && a == 1) { /* every integer is a multiple */
        *impossible = true;
        return GPT2_OK;
    }
    uint64_t scale[40]; /* 10^k mod a */
    scale[0] = 1 % a;
    for (uint32_t k = 1; k < 40; k++) scale[k] = scale[k - 1] * 10 % a;
    auto accepts = [&](uint64_t r, uint32_t f) { return ((r * scale[b - std::min(f, b)]) % a == 0) != negate; };
    /* the states' rules: whole(r) after the integer part's digits (the first not 0), frac(j, r)
       after the point and j of the fraction's digits (j = b + 1: more than b, the rest zeros,
       which keep it a multiple), and `rest` after a digit that makes it no multiple (negated only) */
    const size_t levels = (size_t)b + 2;
    gpt2__vector<gpt2__string> whole(a), frac(levels * a);
    for (auto& n : whole) n = gpt2__schema_rule_name(cv);
    if (fraction)
        for (auto& n : frac) n = gpt2__schema_rule_name(cv);
    const gpt2__string rest = gpt2__schema_rule_name(cv);
    bool used_rest = false;
    /* digits from state remainder r with the next remainder (10r + d) mod a, grouped by target */
    auto digit_steps = [&](uint64_t r, char lowest, const gpt2__vector<gpt2__string>& to, size_t to_base, gpt2__string* body) {
        for (uint64_t target = 0; target < a; target++) {
            gpt2__string set;
            for (char d = lowest; d <= '9'; d++)
                if ((r * 10 + (uint64_t)(d - '0')) % a == target) set.push_back(d);
            if (set.empty()) continue;
            *body += body->empty() ? "" : " | ";
            *body += "[" + set + "] " + to[to_base + target];
        }
    };
    for (uint64_t r = 0; r < a; r++) {
        gpt2__string body;
        digit_steps(r, '0', whole, 0, &body);
        if (fraction) body += " | \".\" " + frac[r];
        if (accepts(r, 0)) body += " | \"\"";
        cv->rules += whole[r] + " ::= " + body + "\n";
    }
    for (size_t j = 0; fraction && j < levels; j++)
        for (uint64_t r = 0; r < a; r++) {
            gpt2__string body;
            if (j < b && !integers) digit_steps(r, '0', frac, (j + 1) * a, &body);
            else if (j < b) body = "\"0\" " + frac[(j + 1) * a + r * 10 % a];
            else body = "\"0\" " + frac[(size_t)(b + 1) * a + r];
            if (j >= b && negate && !integers) body += " | [1-9] " + rest, used_rest = true;
            if (j > 0 && accepts(r, (uint32_t)j)) body += " | \"\"";
            cv->rules += frac[j * a + r] + " ::= " + body + "\n";
        }
    if (used_rest) cv->rules += rest + " ::= [0-9]*\n";
    /* zero ("0", its fraction) and the others from their first digit */
    gpt2__string starts;
    if (fraction || accepts(0, 0)) {
        gpt2__string zero = fraction ? "\".\" " + frac[0] : gpt2__string();
        if (accepts(0, 0)) zero += zero.empty() ? "\"\"" : " | \"\"";
        starts = "\"0\" (" + zero + ")";
    }
    gpt2__string first;
    digit_steps(0, '1', whole, 0, &first);
    starts += (starts.empty() ? "" : " | ") + first;
    *out = gpt2__schema_add_rule(cv, (no_sign ? "" : "\"-\"? ") + gpt2__string("(") + starts + ")");
    return GPT2_OK;
}

/* The multiples of m between two bounds, each value as a literal, where they are at most
   GPT2__SCHEMA_MAX_ENUMERATED; false where there would be more (or the bounds are too large). */
static bool gpt2__schema_enumerate_multiples(const gpt2__schema_multiple& m, const gpt2__schema_end& lower, const gpt2__schema_end& upper, bool integers,
                                             gpt2__vector<gpt2__string>* values) {
    /* each bound times 10^b / a, rounded inward: k from k_lo to k_hi */
    auto scaled = [&](const gpt2__schema_decimal& d, bool up, bool strict, long long* k) {
        if (d.whole > 999999999999LL || m.b > 6) return false;
        long long v = d.whole;
        for (uint32_t i = 0; i < m.b; i++) v = v * 10 + (i < d.fraction.size() ? d.fraction[i] - '0' : 0);
        const bool inexact = d.fraction.size() > m.b && d.fraction.find_first_not_of('0', m.b) != gpt2__string::npos;
        /* the signed value times 10^b lies in [v, v + 1) in magnitude */
        const long long a = (long long)m.a;
        long long q;
        if (!d.negative) {
            q = up ? (v + a - 1 + (inexact ? 1 : 0)) / a : v / a; /* ceil or floor of (v or a bit more) / a */
            if (up && !inexact && v % a == 0 && strict) q++;
            if (!up && !inexact && v % a == 0 && strict) q--;
        } else {
            q = up ? -(v / a) : -((v + a - 1 + (inexact ? 1 : 0)) / a);
            if (up && !inexact && v % a == 0 && strict) q++;
            if (!up && !inexact && v % a == 0 && strict) q--;
        }
        *k = q;
        return true;
    };
    long long k_lo, k_hi;
    if (!lower.present || !upper.present || !scaled(lower.at, true, lower.strict, &k_lo) || !scaled(upper.at, false, upper.strict, &k_hi)) return false;
    if (k_hi - k_lo >= GPT2__SCHEMA_MAX_ENUMERATED) return false;
    for (long long k = k_lo; k <= k_hi; k++) {
        const long long v = k * (long long)m.a; /* the value times 10^b */
        gpt2__string digits = std::to_string(v < 0 ? -v : v).c_str();
        if (digits.size() <= m.b) digits.insert(0, m.b + 1 - digits.size(), '0');
        gpt2__string text = (v < 0 ? "-" : "") + digits.substr(0, digits.size() - m.b);
        gpt2__string frac = digits.substr(digits.size() - m.b);
        frac.erase(frac.find_last_not_of('0') + 1);
        if (!frac.empty()) {
            if (integers) continue;
            text += "." + frac;
        }
        values->push_back(text);
    }
    return true;
}

/* A number or an integer (`integers`) of the view: its bounds, multipleOf (and the complements'
   GPT2__KW_NOT_MULTIPLE and GPT2__KW_FRACTION). */
static gpt2_result gpt2__schema_numeric(gpt2__schema_converter* cv, const gpt2__schema_view& view, std::string_view pointer, bool integers, gpt2__string* out, bool* impossible) {
    gpt2__schema_multiple m, not_m;
    bool multiple = false, not_multiple = false;
    GPT2__TRY(gpt2__schema_multiple_of(cv, view, "multipleOf", &m, &multiple));
    const gpt2__vector<const gpt2__schema_kw*> not_multiples = gpt2__schema_all(view, GPT2__KW_NOT_MULTIPLE);
    if (not_multiples.size() > 1) /* not a multiple of a nor of b is not "not a multiple of their least common multiple" */
        return gpt2__schema_refuse(cv, not_multiples[1]->pointer, "the complements of two 'multipleOf' at once are not enforced");
    GPT2__TRY(gpt2__schema_multiple_of(cv, view, GPT2__KW_NOT_MULTIPLE, &not_m, &not_multiple));
    const gpt2__schema_kw* fraction = gpt2__schema_find(view, GPT2__KW_FRACTION);
    gpt2__schema_end lower, upper;
    GPT2__TRY(gpt2__schema_bounds(cv, view, &lower, &upper));
    const bool bounded = lower.present || upper.present;
    if (fraction) { /* numbers that are no integers, written without an exponent: alone only (else none: fewer values) */
        if (integers || bounded || multiple || not_multiple) *impossible = true;
        else *out = gpt2__schema_add_rule(cv, "\"-\"? (\"0\" | [1-9] [0-9]*) \".\" [0-9]* [1-9] [0-9]*");
        return GPT2_OK;
    }
    if (!multiple && !not_multiple) return integers ? gpt2__schema_integer(cv, view, pointer, out, impossible) : gpt2__schema_number(cv, view, pointer, out, impossible);
    const gpt2__schema_kw& where = *gpt2__schema_find(view, multiple ? "multipleOf" : GPT2__KW_NOT_MULTIPLE);
    if (multiple && not_multiple) return gpt2__schema_refuse(cv, where.pointer, "'multipleOf' beside the complement of another is not enforced");
    const bool from_zero = lower.present && lower.at.zero() && !lower.strict && !upper.present;
    if (!bounded || from_zero) return gpt2__schema_multiples(cv, multiple ? m : not_m, integers, not_multiple, from_zero, where, out, impossible);
    gpt2__vector<gpt2__string> values;
    if (not_multiple || !gpt2__schema_enumerate_multiples(m, lower, upper, integers, &values))
        return gpt2__schema_refuse(cv, where.pointer, "'multipleOf' beside minimum or maximum is enforced where the bounds hold at most 1024 multiples, or the minimum is 0 alone");
    if (values.empty()) {
        *impossible = true;
        return GPT2_OK;
    }
    gpt2__string alts;
    for (const gpt2__string& v : values) {
        gpt2__json j;
        j.kind = GPT2__JSON_NUMBER;
        j.text = v;
        alts += alts.empty() ? "" : " | ";
        gpt2__schema_number_literal(&alts, j, integers && cv->draft4);
    }
    *out = gpt2__schema_add_rule(cv, alts);
    return GPT2_OK;
}

/* The helper rules a format's body uses, written once into a grammar that uses them
   (gpt2__schema_format_helpers). */
enum : unsigned { GPT2__FORMAT_DATETIME = 1, GPT2__FORMAT_HOST = 2, GPT2__FORMAT_EMAIL = 4, GPT2__FORMAT_URI = 8, GPT2__FORMAT_IPV6 = 16 };

struct gpt2__schema_format_rule {
    const char* name;
    const char* body; /* the string's JSON text, quotes included: none of these needs an escape */
    unsigned helpers;
};

/* The formats a grammar holds. date, time, date-time (RFC 3339), uuid (RFC 4122), ipv4 and ipv6
   exactly, stricter where exactness would cost much (February has 28 days, no leap second). The
   others are subsets every validator accepts: hostname and email's domain 1 to 3 labels of at
   most 62 characters, the last starting with a letter (so no all-numeric top-level name), within
   RFC 1034's 253; email's local part dot-atoms (RFC 5321) of at most 4 words of 15, 254
   characters in all at most; uri (RFC 3986) without userinfo or an IP-literal host,
   uri-reference that or a relative reference. */
static const gpt2__schema_format_rule gpt2__schema_formats[] = {
    {"date", "\"\\\"\" fdate \"\\\"\"", GPT2__FORMAT_DATETIME},
    {"time", "\"\\\"\" ftime \"\\\"\"", GPT2__FORMAT_DATETIME},
    {"date-time", "\"\\\"\" fdate \"T\" ftime \"\\\"\"", GPT2__FORMAT_DATETIME},
    {"uuid", "\"\\\"\" [0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{12} \"\\\"\"", 0},
    {"ipv4", "\"\\\"\" fbyte \".\" fbyte \".\" fbyte \".\" fbyte \"\\\"\"", GPT2__FORMAT_HOST},
    /* RFC 3986's IPv6address: 8 groups, or fewer around one "::", the last two maybe an IPv4 address */
    {"ipv6",
     "\"\\\"\" ((fh16 \":\"){6} fls32 | \"::\" (fh16 \":\"){5} fls32 | fh16? \"::\" (fh16 \":\"){4} fls32 | ((fh16 \":\")? fh16)? \"::\" (fh16 \":\"){3} fls32 | "
     "((fh16 \":\"){0,2} fh16)? \"::\" (fh16 \":\"){2} fls32 | ((fh16 \":\"){0,3} fh16)? \"::\" fh16 \":\" fls32 | ((fh16 \":\"){0,4} fh16)? \"::\" fls32 | "
     "((fh16 \":\"){0,5} fh16)? \"::\" fh16 | ((fh16 \":\"){0,6} fh16)? \"::\") \"\\\"\"",
     GPT2__FORMAT_HOST | GPT2__FORMAT_IPV6},
    {"hostname", "\"\\\"\" (flabel \".\"){0,2} ftld \"\\\"\"", GPT2__FORMAT_HOST},
    {"email", "\"\\\"\" fatom (\".\" fatom){0,3} \"@\" (flabel \".\"){1,2} ftld \"\\\"\"", GPT2__FORMAT_HOST | GPT2__FORMAT_EMAIL},
    {"uri", "\"\\\"\" furi \"\\\"\"", GPT2__FORMAT_URI},
    {"uri-reference", "\"\\\"\" (furi | (fauthority | \"/\" (fpchar+ fpath)? | fnocolon+ fpath)? fafter) \"\\\"\"", GPT2__FORMAT_URI}};

static const gpt2__schema_format_rule* gpt2__schema_format(std::string_view name) {
    for (const auto& f : gpt2__schema_formats)
        if (name == f.name) return &f;
    return nullptr;
}

/* "date, time, ... and uri-reference": the formats of the table, for the refusal of the others. */
static gpt2__string gpt2__schema_format_names() {
    gpt2__string names;
    const size_t n = std::size(gpt2__schema_formats);
    for (size_t i = 0; i < n; i++) (names += i == 0 ? "" : i + 1 < n ? ", " : " and ") += gpt2__schema_formats[i].name;
    return names;
}

/* The helper rules of the formats whose bits are in `used`. */
static void gpt2__schema_format_helpers(unsigned used, gpt2__string* gbnf) {
    if (used & GPT2__FORMAT_DATETIME) {
        *gbnf += "fdate ::= ([1-9] [0-9]{3} | \"0\" [1-9] [0-9]{2} | \"00\" [1-9] [0-9] | \"000\" [1-9]) \"-\" ((\"01\" | \"03\" | \"05\" | \"07\" | \"08\" | \"10\" | \"12\") \"-\" (\"0\" [1-9] | [12] [0-9] | \"3\" [01]) | "
                 "(\"04\" | \"06\" | \"09\" | \"11\") \"-\" (\"0\" [1-9] | [12] [0-9] | \"30\") | \"02\" \"-\" (\"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8]))" "\n";
        *gbnf += "ftime ::= ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{1,9})? (\"Z\" | [+-] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])" "\n";
    }
    if (used & GPT2__FORMAT_HOST) {
        *gbnf += "fbyte ::= \"25\" [0-5] | \"2\" [0-4] [0-9] | \"1\" [0-9] [0-9] | [1-9] [0-9] | [0-9]" "\n";
        /* a label of 1 to 62 characters, not "--" at its third and fourth (an IDNA A-label, "xn--",
           or a reserved prefix: left out, as a validator may check its Punycode) */
        *gbnf += "flabel ::= [A-Za-z0-9] flabelrest" "\n";
        *gbnf += "ftld ::= [A-Za-z] flabelrest" "\n";
        *gbnf += "flabelrest ::= ([A-Za-z0-9] | [A-Za-z0-9-] [A-Za-z0-9] | [A-Za-z0-9-] [A-Za-z0-9-] [A-Za-z0-9] | "
                 "[A-Za-z0-9-] ([A-Za-z0-9] [A-Za-z0-9-] | \"-\" [A-Za-z0-9]) [A-Za-z0-9-]{0,57} [A-Za-z0-9])?" "\n";
    }
    if (used & GPT2__FORMAT_IPV6) {
        *gbnf += "fh16 ::= [0-9a-fA-F]{1,4}" "\n";
        *gbnf += "fls32 ::= fh16 \":\" fh16 | fbyte \".\" fbyte \".\" fbyte \".\" fbyte" "\n";
    }
    if (used & GPT2__FORMAT_EMAIL) *gbnf += "fatom ::= [A-Za-z0-9!#$%&'*+/=?^_`{|}~-]{1,15}" "\n";
    if (used & GPT2__FORMAT_URI) {
        /* RFC 3986's pchar, a path of segments, an authority without userinfo, the query and fragment */
        *gbnf += "fpchar ::= [A-Za-z0-9._~!$&'()*+,;=:@-] | \"%\" [0-9A-Fa-f]{2}" "\n";
        *gbnf += "fnocolon ::= [A-Za-z0-9._~!$&'()*+,;=@-] | \"%\" [0-9A-Fa-f]{2}" "\n";
        *gbnf += "fpath ::= (\"/\" fpchar*)*" "\n";
        *gbnf += "fauthority ::= \"//\" ([A-Za-z0-9._~!$&'()*+,;=-] | \"%\" [0-9A-Fa-f]{2})* (\":\" [0-9]*)? fpath" "\n";
        *gbnf += "fafter ::= (\"?\" (fpchar | [/?])*)? (\"#\" (fpchar | [/?])*)?" "\n";
        *gbnf += "furi ::= [A-Za-z] [A-Za-z0-9+.-]* \":\" (fauthority | \"/\" (fpchar+ fpath)? | fpchar+ fpath)? fafter" "\n";
    }
}

/* The formats JSON Schema defines (draft 2020-12's, and the older drafts' names): one the
   grammar does not hold is refused. A name no draft defines ("int32", "slug") is an annotation,
   as validators read it. */
static bool gpt2__schema_format_defined(std::string_view name) {
    static const char* const names[] = {"date-time", "date", "time", "duration", "email", "idn-email", "hostname", "idn-hostname", "ipv4",
                                        "ipv6", "uri", "uri-reference", "iri", "iri-reference", "uuid", "uri-template", "json-pointer",
                                        "relative-json-pointer", "regex", "host-name", "ip-address", "utc-millisec", "color", "style", "phone"};
    for (const char* n : names)
        if (name == n) return true;
    return false;
}

/* The rule of a JSON string whose contents `regex` matches (as `pattern` reads it); a regex
   outside the subset is refused at `pointer`, naming `keyword` ("pattern", "patternProperties"). */
static gpt2_result gpt2__schema_pattern_string(gpt2__schema_converter* cv, const gpt2__string& regex, std::string_view pointer, const char* keyword, gpt2__string* out) {
    gpt2__string contents;
    if (const char* why = gpt2__regex_to_gbnf(regex, "char", &contents)) {
        char msg[160];
        std::snprintf(msg, sizeof msg, "'%s' is not enforced: %s", keyword, why);
        return gpt2__schema_refuse(cv, pointer, msg);
    }
    cv->used_char = true;
    *out = gpt2__schema_add_rule(cv, "\"\\\"\" " + contents + " \"\\\"\"");
    return GPT2_OK;
}

static void gpt2__schema_other_key(gpt2__schema_converter* cv, const gpt2__vector<gpt2__string>& names, size_t at, gpt2__string* out);

/* The one value of a keyword written one or more times (pattern, format): a second, different one
   is refused (two patterns at once are not enforced). */
static gpt2_result gpt2__schema_single(gpt2__schema_converter* cv, const gpt2__schema_view& view, std::string_view key, const gpt2__schema_kw** out) {
    *out = nullptr;
    for (const gpt2__schema_kw* kw : gpt2__schema_all(view, key)) {
        if (*out && !((*out)->value->kind == GPT2__JSON_STRING && kw->value->kind == GPT2__JSON_STRING && (*out)->value->text == kw->value->text)) {
            char why[160];
            std::snprintf(why, sizeof why, "'%.*s' is written here and at %s with another value; both at once are not enforced", (int)key.size(), key.data(), (*out)->pointer.c_str());
            return gpt2__schema_refuse(cv, kw->pointer, why);
        }
        if (!*out) *out = kw;
    }
    return GPT2_OK;
}

static gpt2_result gpt2__schema_string(gpt2__schema_converter* cv, const gpt2__schema_view& view, gpt2__string* out, bool* impossible) {
    uint32_t lo = 0, hi = 0;
    bool has_lo = false, has_hi = false;
    const gpt2__schema_kw *min_kw = nullptr, *max_kw = nullptr, *format, *pattern;
    GPT2__TRY(gpt2__schema_count(cv, view, "minLength", true, &lo, &has_lo, &min_kw));
    GPT2__TRY(gpt2__schema_count(cv, view, "maxLength", false, &hi, &has_hi, &max_kw));
    GPT2__TRY(gpt2__schema_single(cv, view, "format", &format));
    GPT2__TRY(gpt2__schema_single(cv, view, "pattern", &pattern));
    if (format && format->value->kind == GPT2__JSON_STRING && !gpt2__schema_format_defined(format->value->text)) format = nullptr;
    /* strings that are none of some values (a complement of enum or const), written without escapes */
    gpt2__vector<gpt2__string> excluded;
    const gpt2__schema_kw* not_in = nullptr;
    for (const gpt2__schema_kw* kw : gpt2__schema_all(view, GPT2__KW_NOT_IN)) {
        not_in = kw;
        if (kw->value->kind != GPT2__JSON_ARRAY) return gpt2__schema_refuse(cv, kw->pointer, "expected an array of strings");
        for (const auto& v : kw->value->items)
            if (v.kind == GPT2__JSON_STRING) excluded.push_back(v.text);
    }
    if (has_lo && has_hi && lo > hi) return gpt2__schema_contradiction(cv, max_kw->pointer, "maxLength is less than minLength", impossible);
    if (not_in) {
        if (const gpt2__schema_kw* other = pattern ? pattern : format ? format : min_kw ? min_kw : max_kw)
            return gpt2__schema_refuse(cv, other->pointer, "a complement of string values (not, oneOf, if) beside a length, a pattern or a format is not enforced");
        gpt2__string rest;
        gpt2__schema_other_key(cv, excluded, 0, &rest);
        cv->used_char = true;
        *out = gpt2__schema_add_rule(cv, "\"\\\"\" " + rest);
        return GPT2_OK;
    }
    if (pattern) {
        if (pattern->value->kind != GPT2__JSON_STRING) return gpt2__schema_refuse(cv, pattern->pointer, "'pattern' must be a string");
        if (const gpt2__schema_kw* other = min_kw ? min_kw : max_kw ? max_kw : format)
            return gpt2__schema_refuse(cv, other->pointer, "a length or a format beside 'pattern' is not enforced");
        return gpt2__schema_pattern_string(cv, pattern->value->text, pattern->pointer, "pattern", out);
    }
    if (format) {
        const gpt2__schema_format_rule* rule = format->value->kind == GPT2__JSON_STRING ? gpt2__schema_format(format->value->text) : nullptr;
        if (!rule)
            return gpt2__schema_refuse(cv, format->pointer,
                                       ("'format' is enforced only for " + gpt2__schema_format_names() + " (formats no draft defines are annotations)").c_str());
        if (min_kw || max_kw) return gpt2__schema_refuse(cv, (min_kw ? min_kw : max_kw)->pointer, "a length beside 'format' is not enforced");
        cv->used_formats |= rule->helpers;
        *out = gpt2__schema_add_rule(cv, rule->body);
        return GPT2_OK;
    }
    if (!has_lo && !has_hi) {
        cv->used_string = true;
        *out = "string";
        return GPT2_OK;
    }
    cv->used_char = true;
    char body[96];
    if (has_hi) std::snprintf(body, sizeof body, "\"\\\"\" char{%u,%u} \"\\\"\"", lo, hi);
    else std::snprintf(body, sizeof body, "\"\\\"\" char{%u,} \"\\\"\"", lo);
    *out = gpt2__schema_add_rule(cv, body);
    return GPT2_OK;
}

/* The rest of a key (after the code points the names share before `at`) and its closing quote,
   such that the whole key is none of `names`; written without escapes, so that no escape spells
   a known key. A rule per node of the names' trie. */
static void gpt2__schema_other_key(gpt2__schema_converter* cv, const gpt2__vector<gpt2__string>& names, size_t at, gpt2__string* out) {
    bool ends_here = false;
    gpt2__vector<std::pair<uint32_t, gpt2__vector<gpt2__string>>> next;
    for (const auto& name : names) {
        if (name.size() == at) {
            ends_here = true;
            continue;
        }
        const unsigned char c = (unsigned char)name[at];
        const size_t len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : 4;
        uint32_t cp = len == 1 ? c : len == 2 ? c & 0x1F : len == 3 ? c & 0x0F : c & 0x07;
        for (size_t i = 1; i < len && at + i < name.size(); i++) cp = cp << 6 | ((unsigned char)name[at + i] & 0x3F);
        if (cp < 0x20 || cp == '"' || cp == '\\') continue; /* not writable without an escape */
        size_t k = 0;
        while (k < next.size() && next[k].first != cp) k++;
        if (k == next.size()) next.emplace_back(cp, gpt2__vector<gpt2__string>());
        next[k].second.push_back(name);
    }
    gpt2__string body;
    if (!ends_here) body = "\"\\\"\"";
    char buf[32];
    gpt2__string diverge = "[^\"\\\\\\x00-\\x1F";
    for (const auto& branch : next) {
        std::snprintf(buf, sizeof buf, "\\U%08X", (unsigned)branch.first);
        diverge += buf;
        const size_t len = branch.first < 0x80 ? 1 : branch.first < 0x800 ? 2 : branch.first < 0x10000 ? 3 : 4;
        gpt2__string child;
        gpt2__schema_other_key(cv, branch.second, at + len, &child);
        if (!body.empty()) body += " | ";
        std::snprintf(buf, sizeof buf, "[\\U%08X] ", (unsigned)branch.first);
        body += buf;
        body += child;
    }
    diverge += "] keychar* \"\\\"\"";
    if (!body.empty()) body += " | ";
    body += diverge;
    *out = gpt2__schema_add_rule(cv, body);
}

/* The string values a oneOf branch allows for property `name`, when the branch is `"type":
   "object"` with `name` required and its schema a string const or an enum of strings (read in
   the branch, or in its $ref's target when the branch has no properties of its own). */
static bool gpt2__schema_tag_values(gpt2__schema_converter* cv, const gpt2__json& branch, std::string_view pointer, std::string_view name, gpt2__vector<gpt2__string>* values) {
    const gpt2__json* b = &branch;
    if (b->kind != GPT2__JSON_OBJECT) return false;
    if (!b->get("properties") && b->get("$ref")) {
        gpt2__schema_kw ref{"$ref", b->get("$ref"), gpt2__string(pointer) + "/$ref"};
        gpt2__string target_pointer;
        gpt2_error quiet{};
        gpt2_error* err = cv->err;
        cv->err = &quiet; /* a ref that does not resolve is reported where it is converted */
        const gpt2_result res = gpt2__schema_resolve(cv, ref, &b, &target_pointer);
        cv->err = err;
        if (res != GPT2_OK || b->kind != GPT2__JSON_OBJECT) return false;
    }
    /* beside a $ref, draft 7 ignores the keywords that would tell the branches apart */
    if (b->get("$ref")) return false;
    const gpt2__json* type = b->get("type");
    const gpt2__json* required = b->get("required");
    const gpt2__json* props = b->get("properties");
    if (!type || type->kind != GPT2__JSON_STRING || type->text != "object" || !required || required->kind != GPT2__JSON_ARRAY || !props || props->kind != GPT2__JSON_OBJECT) return false;
    bool is_required = false;
    for (const auto& r : required->items) is_required |= r.kind == GPT2__JSON_STRING && std::string_view(r.text) == name;
    const gpt2__json* prop = props->get(name);
    if (!is_required || !prop || prop->kind != GPT2__JSON_OBJECT) return false;
    values->clear();
    if (const gpt2__json* c = prop->get("const")) {
        if (c->kind != GPT2__JSON_STRING) return false;
        values->push_back(c->text);
    } else if (const gpt2__json* e = prop->get("enum")) {
        if (e->kind != GPT2__JSON_ARRAY) return false;
        for (const auto& v : e->items) {
            if (v.kind != GPT2__JSON_STRING) return false;
            values->push_back(v.text);
        }
    } else {
        return false;
    }
    return true;
}

/* Whether no value can match two of oneOf's branches because each is an object whose required
   property `name` takes string values no other branch allows (a tagged union). */
static bool gpt2__schema_discriminated(gpt2__schema_converter* cv, const gpt2__schema_kw& one_of) {
    const gpt2__json& branches = *one_of.value;
    if (branches.items.empty() || branches.items[0].kind != GPT2__JSON_OBJECT) return false;
    const gpt2__json* first = &branches.items[0];
    gpt2__vector<gpt2__string> candidates;
    for (int hop = 0; hop < 2 && first && first->kind == GPT2__JSON_OBJECT; hop++) {
        if (const gpt2__json* props = first->get("properties")) {
            for (const auto& k : props->keys) candidates.push_back(k);
            break;
        }
        const gpt2__json* ref = first->get("$ref");
        if (!ref) break;
        gpt2__schema_kw kw{"$ref", ref, one_of.pointer + "/0/$ref"};
        gpt2__string target_pointer;
        gpt2_error quiet{};
        gpt2_error* err = cv->err;
        cv->err = &quiet;
        const gpt2_result res = gpt2__schema_resolve(cv, kw, &first, &target_pointer);
        cv->err = err;
        if (res != GPT2_OK) return false;
    }
    for (const auto& name : candidates) {
        gpt2__vector<gpt2__string> all, values;
        bool ok = true;
        for (size_t i = 0; i < branches.items.size() && ok; i++) {
            char index[24];
            std::snprintf(index, sizeof index, "/%zu", i);
            ok = gpt2__schema_tag_values(cv, branches.items[i], one_of.pointer + index, name, &values);
            for (size_t v = 0; ok && v < values.size(); v++) {
                ok = std::find(all.begin(), all.end(), values[v]) == all.end();
                all.push_back(values[v]);
            }
        }
        if (ok) return true;
    }
    return false;
}

/* Whether no value can match two of oneOf's branches because each allows only the values of
   its `const` or `enum` (strings, numbers, booleans, null) and no two branches share one
   ("oneOf": [{"const": "auto"}, {"const": "lf"}]). */
static bool gpt2__schema_disjoint_values(const gpt2__json& branches) {
    gpt2__vector<gpt2__string> taken; /* each value as a kind letter and its text */
    for (const auto& b : branches.items) {
        if (b.kind != GPT2__JSON_OBJECT) return false;
        gpt2__vector<const gpt2__json*> values;
        if (const gpt2__json* c = b.get("const")) values.push_back(c);
        else if (const gpt2__json* e = b.get("enum"); e && e->kind == GPT2__JSON_ARRAY)
            for (const auto& v : e->items) values.push_back(&v);
        if (values.empty()) return false;
        const size_t before = taken.size();
        for (const gpt2__json* v : values) {
            gpt2__string key;
            if (v->kind == GPT2__JSON_STRING) key = "s" + v->text;
            else if (v->kind == GPT2__JSON_BOOL) key = v->boolean ? "t" : "f";
            else if (v->kind == GPT2__JSON_NULL) key = "n";
            else if (gpt2__schema_decimal d; v->kind == GPT2__JSON_NUMBER && gpt2__schema_decimal_of(*v, &d)) /* 2, 2.0 and 2e0 alike */
                key = "d" + gpt2__schema_decimal_text(d);
            else return false; /* arrays, objects, numbers too long to compare */
            if (std::find(taken.begin(), taken.begin() + (ptrdiff_t)before, key) != taken.begin() + (ptrdiff_t)before) return false;
            taken.push_back(key);
        }
    }
    return true;
}

/* One of several schemas that all hold for one value (a property several schemas name, the
   items of a tuple and of the items after it), with where it is written. */
struct gpt2__schema_part {
    const gpt2__json* schema;
    gpt2__string pointer;
    bool evaluates = true;
    bool made = false; /* a schema the converter made (gpt2__schema_kw::made) */
};

/* The expression of the values every part holds for (none: any value), or *impossible. Parts of
   different schemas are merged as allOf's are, a level down, so that an unevaluatedProperties of
   one does not count another's properties as its own. */
static gpt2_result gpt2__schema_all_expr(gpt2__schema_converter* cv, const gpt2__vector<gpt2__schema_part>& parts, gpt2__string* out, bool* impossible, int depth) {
    *impossible = false;
    if (parts.size() == 1 && parts[0].evaluates && !parts[0].made) return gpt2__schema_expr(cv, *parts[0].schema, parts[0].pointer, out, impossible, depth + 1);
    gpt2__schema_view view;
    for (const gpt2__schema_part& p : parts) {
        if (p.schema->kind == GPT2__JSON_BOOL) {
            if (p.schema->boolean) continue;
            *impossible = true;
            return GPT2_OK;
        }
        if (p.schema->kind != GPT2__JSON_OBJECT) return gpt2__schema_refuse(cv, p.pointer, "a schema must be an object or a boolean");
        gpt2__schema_view_of(*p.schema, p.pointer, &view, parts.size() > 1 ? 1 : 0, p.evaluates, p.made);
    }
    if (view.empty()) { /* each of them true */
        cv->used_value = true;
        *out = "value";
        return GPT2_OK;
    }
    return gpt2__schema_view_expr(cv, std::move(view), parts[0].pointer, out, impossible, depth + 1);
}

/* Whether `name` is one of the schema's strings (an enum's or const's), for propertyNames: 1 yes,
   0 no, -1 the schema is not of that form (or allows no string: 0). */
static int gpt2__schema_name_allowed(const gpt2__json& names, std::string_view name) {
    if (names.kind == GPT2__JSON_BOOL) return names.boolean ? 1 : 0;
    if (names.kind != GPT2__JSON_OBJECT) return -1;
    bool has_values = false, found = false;
    for (size_t i = 0; i < names.keys.size(); i++) {
        const gpt2__json& v = names.items[i];
        if (names.keys[i] == "const") has_values = true, found = found || (v.kind == GPT2__JSON_STRING && v.text == name);
        else if (names.keys[i] == "enum" && v.kind == GPT2__JSON_ARRAY) {
            has_values = true;
            for (const auto& e : v.items) found = found || (e.kind == GPT2__JSON_STRING && e.text == name);
        } else if (names.keys[i] == "maxLength" || names.keys[i] == "minLength") {
            gpt2__schema_decimal d;
            if (!gpt2__schema_decimal_of(v, &d) || !d.fraction.empty() || d.negative) return -1;
            const long long n = (long long)gpt2__utf8_code_points(name);
            if (names.keys[i] == "maxLength" ? n > d.whole : n < d.whole) return 0;
        } else if (gpt2__schema_known(names.keys[i]) && names.keys[i] != "type") {
            return -1;
        }
    }
    if (const gpt2__json* t = names.get("type")) {
        bool string = t->kind == GPT2__JSON_STRING && t->text == "string";
        if (t->kind == GPT2__JSON_ARRAY)
            for (const auto& x : t->items) string = string || (x.kind == GPT2__JSON_STRING && x.text == "string");
        if (!string) return 0;
    }
    return has_values ? found : 1;
}

/* An object's members: where they go and what they are. */
struct gpt2__schema_member {
    gpt2__string kv; /* the key, ':' and the value's rule, with whitespace */
    bool required;
};

enum { GPT2__SCHEMA_MAX_OBJECT_STATES = 1 << 14, GPT2__SCHEMA_MAX_ANY_ORDER_STATES = 1 << 10 };

/* The members in the order given (each may be absent unless required), then any number of
   extras (extra_kv, where not empty), with at most max_count members in all and at least
   min_count distinct keys (the extras count one at most: two may be one key written twice, which
   a JSON reader keeps once): a rule per member position and count written so far (capped where
   more makes no difference), the first written without a comma. false where no object is possible. */
static gpt2_result gpt2__schema_members_in_order(gpt2__schema_converter* cv, const gpt2__vector<gpt2__schema_member>& list, const gpt2__string& extra_kv,
                                                 uint32_t min_count, uint32_t max_count, gpt2__string* body, bool* possible, const gpt2__schema_kw* where) {
    const char* ws = gpt2__schema_ws(cv);
    const size_t n = list.size();
    const bool bounded = max_count != UINT32_MAX;
    const size_t cap = bounded ? max_count : std::max<uint32_t>(min_count, 1); /* counts past it: as it */
    if ((n + 1) * (cap + 1) > GPT2__SCHEMA_MAX_OBJECT_STATES)
        return gpt2__schema_refuse(cv, where ? where->pointer : "(root)", "minProperties or maxProperties with these properties would need too many rules");
    gpt2__vector<gpt2__string> rule((n + 1) * (cap + 1)); /* empty: no object completes from there */
    char buf[64];
    for (size_t i = n + 1; i-- > 0;)
        for (size_t c = 0; c <= cap; c++) {
            const char* comma = c > 0 ? "\",\" " : "";
            gpt2__string alts;
            auto add = [&](const gpt2__string& a) { alts += alts.empty() ? "" : " | ", alts += a; };
            if (i == n) {
                /* e more extras: c + e at most max_count, and c + (e > 0) at least min_count (two
                   extras may be one key written twice, which a JSON reader keeps once) */
                const uint32_t least = c >= min_count ? 0 : (uint32_t)(min_count - c);
                if (least > 1) continue;
                const bool any_more = !bounded;
                const uint32_t most = bounded ? (uint32_t)(max_count - std::min<size_t>(c, max_count)) : 0;
                if (least == 0) add("\"\"");
                if (!extra_kv.empty() && (any_more || most > 0)) {
                    if (c > 0) {
                        if (any_more) std::snprintf(buf, sizeof buf, "{%u,}", least ? least : 1);
                        else std::snprintf(buf, sizeof buf, "{%u,%u}", least ? least : 1, most);
                        add("(\",\" " + gpt2__string(ws) + " " + extra_kv + ")" + buf);
                    } else {
                        const uint32_t l = least ? least - 1 : 0;
                        if (any_more) std::snprintf(buf, sizeof buf, "{%u,}", l);
                        else std::snprintf(buf, sizeof buf, "{%u,%u}", l, most - 1);
                        add(extra_kv + " (\",\" " + gpt2__string(ws) + " " + extra_kv + ")" + buf);
                    }
                }
            } else {
                const size_t next = std::min(c + 1, cap);
                if ((!bounded || c + 1 <= max_count) && !rule[(i + 1) * (cap + 1) + next].empty())
                    add(gpt2__string(comma) + (c > 0 ? gpt2__string(ws) + " " : "") + list[i].kv + " " + rule[(i + 1) * (cap + 1) + next]);
                if (!list[i].required && !rule[(i + 1) * (cap + 1) + c].empty()) add(rule[(i + 1) * (cap + 1) + c]);
            }
            if (!alts.empty()) rule[i * (cap + 1) + c] = gpt2__schema_add_rule(cv, alts);
        }
    *possible = !rule[0].empty();
    *body = rule[0];
    return GPT2_OK;
}

/* The members in any order, each at most once, the required ones all, extras anywhere among
   them: a rule per set of members written and count of extras (2^n sets: for a few members only).
   Extras count for maxProperties as written, and for minProperties as one at most (two extras
   may be one key written twice, which a JSON reader keeps once). */
static void gpt2__schema_members_any_order(gpt2__schema_converter* cv, const gpt2__vector<gpt2__schema_member>& list, const gpt2__string& extra_kv,
                                           uint32_t min_count, uint32_t max_count, gpt2__string* body, bool* possible) {
    const char* ws = gpt2__schema_ws(cv);
    const size_t n = list.size(), sets = (size_t)1 << n;
    const bool bounded = max_count != UINT32_MAX;
    const size_t cap = bounded ? max_count : 1; /* extras written, as far as they matter */
    uint32_t required = 0;
    for (size_t i = 0; i < n; i++) required |= list[i].required ? 1u << i : 0;
    auto members = [](size_t set) {
        size_t k = 0;
        for (; set; set &= set - 1) k++;
        return k;
    };
    auto at = [&](size_t set, size_t e) { return set * (cap + 1) + e; };
    auto may_end = [&](size_t set, size_t e) { return (set & required) == required && members(set) + std::min<size_t>(e, 1) >= min_count; };
    auto room = [&](size_t set, size_t e) { return !bounded || members(set) + e + 1 <= max_count; };
    /* live states found from the end: a state lives when it may end or steps to a living one */
    gpt2__vector<char> live(sets * (cap + 1), 0);
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t set = sets; set-- > 0;)
            for (size_t e = 0; e <= cap; e++) {
                char& l = live[at(set, e)];
                if (l) continue;
                bool any = may_end(set, e);
                for (size_t i = 0; i < n && !any && room(set, e); i++)
                    if (!(set >> i & 1)) any = live[at(set | (size_t)1 << i, e)];
                if (!any && room(set, e) && !extra_kv.empty()) any = live[at(set, std::min(e + 1, cap))];
                if (any) l = 1, changed = true;
            }
    }
    gpt2__vector<gpt2__string> name(sets * (cap + 1));
    for (size_t k = 0; k < name.size(); k++)
        if (live[k]) name[k] = gpt2__schema_rule_name(cv);
    for (size_t set = 0; set < sets; set++)
        for (size_t e = 0; e <= cap; e++) {
            if (!live[at(set, e)]) continue;
            const gpt2__string comma = members(set) + e > 0 ? "\",\" " + gpt2__string(ws) + " " : gpt2__string();
            gpt2__string alts;
            auto add = [&](const gpt2__string& a) { alts += alts.empty() ? "" : " | ", alts += a; };
            for (size_t i = 0; i < n && room(set, e); i++)
                if (!(set >> i & 1) && live[at(set | (size_t)1 << i, e)]) add(comma + list[i].kv + " " + name[at(set | (size_t)1 << i, e)]);
            const size_t more = at(set, std::min(e + 1, cap));
            if (room(set, e) && !extra_kv.empty() && live[more]) add(comma + extra_kv + " " + name[more]);
            if (may_end(set, e)) add("\"\"");
            cv->rules += name[at(set, e)] + " ::= " + alts + "\n";
        }
    *possible = live[0] != 0;
    *body = name[0];
}

static gpt2_result gpt2__schema_object(gpt2__schema_converter* cv, const gpt2__schema_view& view, gpt2__string* out, bool* impossible, int depth) {
    gpt2__vector<const gpt2__schema_kw*> props = gpt2__schema_all(view, "properties"), additional = gpt2__schema_all(view, "additionalProperties");
    const gpt2__vector<const gpt2__schema_kw*> names_kws = gpt2__schema_all(view, "propertyNames"), uneval = gpt2__schema_all(view, "unevaluatedProperties");
    bool named = false;
    for (const gpt2__schema_kw* kw : props) {
        if (kw->value->kind != GPT2__JSON_OBJECT) return gpt2__schema_refuse(cv, kw->pointer, "properties must be an object");
        named = named || !kw->value->keys.empty();
    }
    gpt2__vector<gpt2__string> req;
    for (const gpt2__schema_kw* kw : gpt2__schema_all(view, "required")) {
        if (kw->value->kind != GPT2__JSON_ARRAY) return gpt2__schema_refuse(cv, kw->pointer, "required must be an array of strings");
        for (const auto& r : kw->value->items) {
            if (r.kind != GPT2__JSON_STRING) return gpt2__schema_refuse(cv, kw->pointer, "required must be an array of strings");
            if (std::find(req.begin(), req.end(), r.text) == req.end()) req.push_back(r.text);
        }
    }
    uint32_t min_count = 0, max_count = UINT32_MAX;
    bool has_min = false, has_max = false;
    const gpt2__schema_kw *min_kw = nullptr, *max_kw = nullptr;
    GPT2__TRY(gpt2__schema_count(cv, view, "minProperties", true, &min_count, &has_min, &min_kw));
    GPT2__TRY(gpt2__schema_count(cv, view, "maxProperties", false, &max_count, &has_max, &max_kw));
    if (!has_max) max_count = UINT32_MAX;
    if (min_count > max_count) return gpt2__schema_contradiction(cv, max_kw->pointer, "maxProperties is less than minProperties", impossible);
    if (has_max && req.size() > max_count) return gpt2__schema_contradiction(cv, max_kw->pointer, "maxProperties is less than the properties required", impossible);
    /* unevaluatedProperties: the keys no properties, patternProperties or additionalProperties of
       the schema (its in-place applicators' too) evaluated must meet its schema. Held where it is
       the schema's own keyword (the one of a part sees only its part) and the evaluated keys are
       known as the grammar is made; keywords of a complement evaluate nothing. */
    const gpt2__schema_kw* unevaluated = nullptr;
    for (const gpt2__schema_kw* kw : uneval) {
        if (kw->value->kind == GPT2__JSON_BOOL && kw->value->boolean) continue; /* true: every key may be there */
        if (unevaluated || kw->level != 0)
            return gpt2__schema_refuse(cv, kw->pointer, "'unevaluatedProperties' is enforced where it is the schema's own keyword (one inside allOf's part, a branch or a $ref's target sees only its part)");
        unevaluated = kw;
    }
    for (const gpt2__schema_kw* kw : additional)
        if (unevaluated && kw->evaluates) unevaluated = nullptr; /* additionalProperties evaluates every key its properties do not */
    const gpt2__vector<const gpt2__schema_kw*> pattern_kws = gpt2__schema_all(view, "patternProperties");
    if (unevaluated && !pattern_kws.empty())
        return gpt2__schema_refuse(cv, unevaluated->pointer, "'unevaluatedProperties' beside 'patternProperties' is not enforced");
    const gpt2__schema_part unevaluated_part = unevaluated ? gpt2__schema_part{unevaluated->value, unevaluated->pointer, true, unevaluated->made} : gpt2__schema_part{nullptr, "", true, false};
    /* patternProperties: one pattern, held exactly in two forms. With additionalProperties false
       and no named properties, the keys are those the pattern matches, each value its schema;
       with a pattern that matches every name ("" or ".*", unanchored), every extra value has its
       schema. Elsewhere a key could meet both the pattern and a name or the additional
       properties, whose schemas it must then both meet: refused. */
    const gpt2__schema_kw* patterns = pattern_kws.empty() ? nullptr : pattern_kws[0];
    if (patterns && patterns->value->kind != GPT2__JSON_OBJECT) return gpt2__schema_refuse(cv, patterns->pointer, "patternProperties must be an object");
    if (patterns && (patterns->value->keys.size() > 1 || pattern_kws.size() > 1)) return gpt2__schema_refuse(cv, patterns->pointer, "'patternProperties' is enforced only with one pattern");
    if (patterns && patterns->value->keys.empty()) patterns = nullptr;
    const char* ws = gpt2__schema_ws(cv);
    gpt2__string extra_value, extra_key; /* extra_key: the keys' rule where a pattern or propertyNames gives it; else any name but the named ones */
    bool extra_allowed = true;
    if (patterns) {
        const gpt2__schema_kw* additional_kw = additional.empty() ? nullptr : additional[0];
        const gpt2__string& regex = patterns->value->keys[0];
        const bool every_name = regex.empty() || regex == ".*";
        const bool open = !additional_kw || (additional_kw->value->kind == GPT2__JSON_BOOL && additional_kw->value->boolean);
        const bool closed = additional_kw && additional_kw->value->kind == GPT2__JSON_BOOL && !additional_kw->value->boolean;
        if (additional.size() > 1 || (additional_kw && additional_kw->owner != patterns->owner) || !(every_name ? open || closed : closed))
            return gpt2__schema_refuse(cv, patterns->pointer, "'patternProperties' is enforced only with additionalProperties false, or with a pattern that matches every name (\"\" or \".*\")");
        if (every_name ? named : named || !req.empty())
            return gpt2__schema_refuse(cv, patterns->pointer, every_name ? "'patternProperties' beside 'properties' is not enforced"
                                                                        : "'patternProperties' with additionalProperties false is enforced only without 'properties' and 'required'");
        if (const gpt2__schema_kw* other = !names_kws.empty() ? names_kws[0] : has_min ? min_kw : has_max ? max_kw : nullptr)
            return gpt2__schema_refuse(cv, other->pointer, "'patternProperties' beside propertyNames, minProperties or maxProperties is not enforced");
        if (!every_name) GPT2__TRY(gpt2__schema_pattern_string(cv, regex, patterns->pointer, "patternProperties", &extra_key));
        bool none = false;
        GPT2__TRY(gpt2__schema_expr(cv, patterns->value->items[0], patterns->pointer + "/" + gpt2__schema_escape_pointer(regex), &extra_value, &none, depth + 1));
        extra_allowed = !none;
    } else {
        /* an extra key meets every additionalProperties (none of their schemas names it), and
           unevaluatedProperties where it holds */
        gpt2__vector<gpt2__schema_part> parts;
        for (const gpt2__schema_kw* kw : additional) parts.push_back({kw->value, kw->pointer, kw->evaluates, kw->made});
        if (unevaluated) parts.push_back(unevaluated_part);
        bool none = false;
        GPT2__TRY(gpt2__schema_all_expr(cv, parts, &extra_value, &none, depth));
        extra_allowed = !none;
    }
    /* propertyNames: every key is a string its schemas take. Known names are checked here (an
       enum, a const, lengths); the extra keys are the strings of its schemas, where no known
       name could be one of them too */
    if (!names_kws.empty() && extra_allowed) {
        gpt2__vector<gpt2__schema_part> parts;
        for (const gpt2__schema_kw* kw : names_kws) parts.push_back({kw->value, kw->pointer, false, kw->made});
        if (named || !req.empty()) {
            /* the extra keys: the names an enum or const allows, but the known ones */
            gpt2__string alts;
            for (const gpt2__schema_kw* kw : names_kws) {
                const gpt2__json* values = kw->value->kind == GPT2__JSON_OBJECT ? kw->value->get("enum") : nullptr;
                const gpt2__json* single = kw->value->kind == GPT2__JSON_OBJECT ? kw->value->get("const") : nullptr;
                if (names_kws.size() > 1 || (!values && !single) || (values && values->kind != GPT2__JSON_ARRAY))
                    return gpt2__schema_refuse(cv, kw->pointer, "'propertyNames' beside 'properties' or 'required' is enforced only as an enum or a const");
                gpt2__vector<const gpt2__json*> candidates;
                if (single) candidates.push_back(single);
                else
                    for (const auto& v : values->items) candidates.push_back(&v);
                for (const gpt2__json* v : candidates) {
                    if (v->kind != GPT2__JSON_STRING || gpt2__schema_name_allowed(*kw->value, v->text) != 1) continue;
                    bool known = std::find(req.begin(), req.end(), v->text) != req.end();
                    for (const gpt2__schema_kw* p : props) known = known || p->value->get(v->text);
                    if (known) continue;
                    gpt2__json key;
                    key.kind = GPT2__JSON_STRING;
                    key.text = v->text;
                    alts += alts.empty() ? "" : " | ";
                    gpt2__schema_json_literal(cv, key, &alts);
                }
            }
            if (alts.empty()) extra_allowed = false;
            else extra_key = gpt2__schema_add_rule(cv, alts);
        } else {
            gpt2__json* string_type = &cv->made.emplace_back();
            string_type->kind = GPT2__JSON_OBJECT;
            string_type->keys.push_back("type");
            string_type->items.emplace_back();
            string_type->items.back().kind = GPT2__JSON_STRING;
            string_type->items.back().text = "string";
            parts.push_back({string_type, names_kws[0]->pointer, false, true});
            bool none = false;
            GPT2__TRY(gpt2__schema_all_expr(cv, parts, &extra_key, &none, depth));
            extra_allowed = !none;
        }
    }
    /* the members: every named property (its schemas all, with each additionalProperties whose
       schema does not name it, and unevaluatedProperties where no evaluating properties names it),
       then the required names no properties gives (extra properties that must be there) */
    gpt2__vector<gpt2__schema_member> list;
    gpt2__vector<gpt2__string> names;
    auto member = [&](const gpt2__string& name, const gpt2__string& value, bool required) { /* "name": value */
        gpt2__json key;
        key.kind = GPT2__JSON_STRING;
        key.text = name;
        gpt2__string kv;
        gpt2__schema_json_literal(cv, key, &kv);
        kv += gpt2__string(ws) + " \":\" " + ws + " " + value + ws;
        list.push_back({kv, required});
    };
    auto key_allowed = [&](const gpt2__string& name, bool* allowed) {
        *allowed = true;
        for (const gpt2__schema_kw* kw : names_kws) {
            const int verdict = gpt2__schema_name_allowed(*kw->value, name);
            if (verdict < 0) return gpt2__schema_refuse(cv, kw->pointer, "'propertyNames' beside 'properties' or 'required' is enforced only as an enum or a const");
            *allowed = *allowed && verdict == 1;
        }
        return GPT2_OK;
    };
    for (const gpt2__schema_kw* kw : props)
        for (const gpt2__string& name : kw->value->keys) {
            if (std::find(names.begin(), names.end(), name) != names.end()) continue; /* made where first named */
            names.push_back(name);
            const bool required = std::find(req.begin(), req.end(), name) != req.end();
            gpt2__vector<gpt2__schema_part> parts;
            bool evaluated = false;
            for (const gpt2__schema_kw* p : props)
                for (size_t i = 0; i < p->value->keys.size(); i++)
                    if (p->value->keys[i] == name) {
                        parts.push_back({&p->value->items[i], p->pointer + "/" + gpt2__schema_escape_pointer(name), p->evaluates, p->made});
                        evaluated = evaluated || p->evaluates;
                    }
            for (const gpt2__schema_kw* a : additional) {
                const gpt2__json* own = a->owner ? a->owner->get("properties") : nullptr;
                if (!(own && own->kind == GPT2__JSON_OBJECT && own->get(name))) parts.push_back({a->value, a->pointer, a->evaluates, a->made});
            }
            if (unevaluated && !evaluated) parts.push_back(unevaluated_part);
            bool allowed = false;
            GPT2__TRY(key_allowed(name, &allowed));
            gpt2__string value;
            bool none = !allowed;
            if (!none) GPT2__TRY(gpt2__schema_all_expr(cv, parts, &value, &none, depth));
            if (none) {
                if (required) {
                    *impossible = true;
                    return GPT2_OK;
                }
                continue;
            }
            member(name, value, required);
        }
    for (const auto& r : req) {
        if (std::find(names.begin(), names.end(), r) != names.end()) continue;
        bool allowed = false;
        GPT2__TRY(key_allowed(r, &allowed));
        if (!extra_allowed || !allowed) {
            *impossible = true;
            return GPT2_OK;
        }
        names.push_back(r);
        member(r, extra_value, true);
    }
    gpt2__string extra_kv;
    if (extra_allowed && !extra_key.empty()) {
        extra_kv = extra_key + ws + " \":\" " + ws + " " + extra_value + ws;
    } else if (extra_allowed) {
        gpt2__string key;
        gpt2__schema_other_key(cv, names, 0, &key);
        cv->used_char = true;
        extra_kv = "\"\\\"\" " + key + ws + " \":\" " + ws + " " + extra_value + ws;
    }
    /* minProperties counts the distinct keys: the named and required ones written, and one extra at
       most (two extras may be one key written twice, which a JSON reader keeps once) */
    if (has_min && min_count > list.size() + (extra_allowed ? 1 : 0)) {
        char why[200];
        std::snprintf(why, sizeof why, "'minProperties' is held up to the properties the schema names and one more (two other keys may be one written twice): here %zu",
                      list.size() + (extra_allowed ? 1 : 0));
        if (extra_allowed) return gpt2__schema_held_in_part(cv, min_kw->pointer, why, impossible);
        return gpt2__schema_contradiction(cv, min_kw->pointer, "minProperties is more than the properties the object may have", impossible);
    }
    extra_kv = extra_kv.empty() ? extra_kv : gpt2__schema_add_rule(cv, extra_kv);
    for (auto& m : list) m.kv = gpt2__schema_add_rule(cv, m.kv);
    gpt2__string members;
    bool possible = false;
    size_t states = (size_t)(has_max ? max_count : 1) + 1;
    for (size_t i = 0; i < list.size() && states <= GPT2__SCHEMA_MAX_ANY_ORDER_STATES; i++) states *= 2;
    if (cv->any_order && list.size() > 1 && states <= GPT2__SCHEMA_MAX_ANY_ORDER_STATES)
        gpt2__schema_members_any_order(cv, list, extra_kv, min_count, max_count, &members, &possible);
    else
        GPT2__TRY(gpt2__schema_members_in_order(cv, list, extra_kv, min_count, max_count, &members, &possible, has_min ? min_kw : max_kw));
    if (!possible) {
        *impossible = true;
        return GPT2_OK;
    }
    *out = gpt2__schema_add_rule(cv, "\"{\" " + gpt2__string(ws) + " " + members + " \"}\"");
    return GPT2_OK;
}

static gpt2_result gpt2__schema_complement(gpt2__schema_converter* cv, const gpt2__json& schema, const gpt2__string& pointer, bool made, int depth, gpt2__vector<gpt2__schema_part>* out,
                                           unsigned within = GPT2__T_ALL);
static const gpt2__json* gpt2__schema_made_any_of(gpt2__schema_converter* cv, const gpt2__vector<gpt2__schema_part>& branches);

/* An array's items: each position meets the schemas every schema of the view gives it (its
   tuple's, prefixItems or draft 4-7's items array, for the first ones; the items after the tuple,
   items or additionalItems, for the rest), with minItems and maxItems, contains (minContains,
   maxContains) and unevaluatedItems. */
static gpt2_result gpt2__schema_array(gpt2__schema_converter* cv, const gpt2__schema_view& view, gpt2__string* out, bool* impossible, int depth) {
    uint32_t lo = 0, hi = UINT32_MAX;
    bool has_lo = false, has_hi = false;
    const gpt2__schema_kw* max_kw = nullptr;
    GPT2__TRY(gpt2__schema_count(cv, view, "minItems", true, &lo, &has_lo));
    GPT2__TRY(gpt2__schema_count(cv, view, "maxItems", false, &hi, &has_hi, &max_kw));
    if (!has_hi) hi = UINT32_MAX;
    if (lo > hi) return gpt2__schema_contradiction(cv, max_kw->pointer, "maxItems is less than minItems", impossible);
    for (const gpt2__schema_kw* unique : gpt2__schema_all(view, "uniqueItems"))
        if (!(unique->value->kind == GPT2__JSON_BOOL && !unique->value->boolean) && hi > 1) return gpt2__schema_refuse(cv, unique->pointer, "'uniqueItems' is not enforced");
    /* each schema object's tuple and the schema of the items after it */
    struct owner_items {
        const gpt2__json* owner;
        const gpt2__schema_kw *tuple = nullptr, *rest = nullptr;
        bool evaluates = true;
    };
    gpt2__vector<owner_items> owners;
    for (const auto& kw : view) {
        if (kw.key != "items" && kw.key != "prefixItems" && kw.key != "additionalItems") continue;
        size_t o = 0;
        while (o < owners.size() && owners[o].owner != kw.owner) o++;
        if (o == owners.size()) owners.push_back({kw.owner});
        owners[o].evaluates = kw.evaluates;
    }
    size_t k = 0; /* the longest tuple */
    for (owner_items& o : owners) {
        const gpt2__schema_kw *items = nullptr, *prefix = nullptr, *additional = nullptr;
        for (const auto& kw : view) {
            if (kw.owner != o.owner) continue;
            if (kw.key == "items") items = &kw;
            else if (kw.key == "prefixItems") prefix = &kw;
            else if (kw.key == "additionalItems") additional = &kw;
        }
        if (prefix && additional) return gpt2__schema_refuse(cv, additional->pointer, "'additionalItems' beside prefixItems is not enforced");
        if (prefix && items && items->value->kind == GPT2__JSON_ARRAY) return gpt2__schema_refuse(cv, items->pointer, "'items' must be a schema beside prefixItems");
        o.tuple = prefix ? prefix : items && items->value->kind == GPT2__JSON_ARRAY ? items : nullptr;
        o.rest = o.tuple == prefix ? items : additional;
        if (o.tuple && o.tuple->value->kind != GPT2__JSON_ARRAY) return gpt2__schema_refuse(cv, o.tuple->pointer, "expected an array of schemas");
        if (o.tuple) k = std::max(k, o.tuple->value->items.size());
    }
    /* unevaluatedItems: the items past every evaluating tuple, where no evaluating schema gives the
       rest a schema and no contains evaluates some of them */
    const gpt2__schema_kw* unevaluated = nullptr;
    for (const gpt2__schema_kw* kw : gpt2__schema_all(view, "unevaluatedItems")) {
        if (kw->value->kind == GPT2__JSON_BOOL && kw->value->boolean) continue;
        if (unevaluated || kw->level != 0)
            return gpt2__schema_refuse(cv, kw->pointer, "'unevaluatedItems' is enforced where it is the schema's own keyword (one inside allOf's part, a branch or a $ref's target sees only its part)");
        unevaluated = kw;
    }
    const gpt2__vector<const gpt2__schema_kw*> contains_kws = gpt2__schema_all(view, "contains");
    size_t evaluated = 0; /* the items the evaluating tuples reach */
    for (const owner_items& o : owners) {
        if (!o.evaluates) continue;
        if (o.rest) unevaluated = nullptr;
        if (o.tuple) evaluated = std::max(evaluated, o.tuple->value->items.size());
    }
    if (unevaluated && !contains_kws.empty()) return gpt2__schema_refuse(cv, unevaluated->pointer, "'unevaluatedItems' beside 'contains' is not enforced");
    auto parts_at = [&](size_t i, gpt2__vector<gpt2__schema_part>* parts) { /* position i's schemas; i = k: the rest's */
        parts->clear();
        for (const owner_items& o : owners) {
            const size_t n = o.tuple ? o.tuple->value->items.size() : 0;
            if (i < n) {
                char index[24];
                std::snprintf(index, sizeof index, "/%zu", i);
                parts->push_back({&o.tuple->value->items[i], o.tuple->pointer + index, o.evaluates, o.tuple->made});
            } else if (o.rest) {
                parts->push_back({o.rest->value, o.rest->pointer, o.evaluates, o.rest->made});
            }
        }
        if (unevaluated && i >= evaluated) parts->push_back({unevaluated->value, unevaluated->pointer, true, unevaluated->made});
    };
    gpt2__vector<gpt2__string> first;
    gpt2__vector<gpt2__schema_part> parts;
    for (size_t i = 0; i < k; i++) {
        gpt2__string e;
        bool none = false;
        parts_at(i, &parts);
        GPT2__TRY(gpt2__schema_all_expr(cv, parts, &e, &none, depth));
        if (none) break; /* no array reaches past item i */
        first.push_back(e);
    }
    if (first.size() < k) hi = std::min<uint32_t>(hi, (uint32_t)first.size()), k = first.size();
    gpt2__string rest_expr;
    bool rest_allowed = true;
    {
        bool none = false;
        parts_at(k, &parts);
        GPT2__TRY(gpt2__schema_all_expr(cv, parts, &rest_expr, &none, depth));
        rest_allowed = !none;
    }
    if (!rest_allowed) hi = std::min<uint32_t>(hi, (uint32_t)k);
    if (lo > hi) {
        *impossible = true;
        return GPT2_OK;
    }
    const char* ws = gpt2__schema_ws(cv);
    char buf[64];
    if (!contains_kws.empty()) {
        /* contains: between minContains (1 unless written) and maxContains items meet its schema.
           Written as "[" (U ",")* M ("," (U ",")* M){min-1, max-1} ("," U)* "]", where M is an item
           that meets it and U any item, or (with maxContains) one that does not */
        const gpt2__schema_kw* c = contains_kws[0];
        if (contains_kws.size() > 1) return gpt2__schema_refuse(cv, contains_kws[1]->pointer, "two 'contains' at once are not enforced");
        if (k > 0) return gpt2__schema_refuse(cv, c->pointer, "'contains' beside a tuple (prefixItems) is not enforced");
        if (has_lo || has_hi) return gpt2__schema_refuse(cv, c->pointer, "'contains' beside minItems or maxItems is not enforced");
        uint32_t min_c = 1, max_c = UINT32_MAX;
        for (const char* key : {"minContains", "maxContains"})
            if (const gpt2__json* v = c->owner ? c->owner->get(key) : nullptr) {
                const gpt2__schema_kw count{key, v, c->pointer.substr(0, c->pointer.rfind('/')) + "/" + key, c->owner};
                GPT2__TRY(gpt2__schema_uint(cv, count, key[1] == 'i' ? &min_c : &max_c));
            }
        if (min_c > max_c) {
            *impossible = true;
            return GPT2_OK;
        }
        if (min_c == 0 && max_c == UINT32_MAX) { /* no item need meet it */
            if (!rest_allowed) {
                *out = gpt2__schema_add_rule(cv, "\"[\" " + gpt2__string(ws) + " \"]\"");
                return GPT2_OK;
            }
            *out = gpt2__schema_add_rule(cv, "\"[\" " + gpt2__string(ws) + " (" + rest_expr + ws + " (\",\" " + ws + " " + rest_expr + ws + ")*)? \"]\"");
            return GPT2_OK;
        }
        gpt2__vector<gpt2__schema_part> matched = parts;
        matched.push_back({c->value, c->pointer, c->evaluates, c->made});
        gpt2__string m_expr, u_expr = rest_expr;
        bool m_none = false, u_none = !rest_allowed;
        GPT2__TRY(gpt2__schema_all_expr(cv, matched, &m_expr, &m_none, depth));
        if (max_c != UINT32_MAX && rest_allowed) {
            gpt2__vector<gpt2__schema_part> complement;
            GPT2__TRY(gpt2__schema_complement(cv, *c->value, c->pointer, c->made, 0, &complement));
            gpt2__vector<gpt2__schema_part> unmatched = parts;
            if (complement.empty()) u_none = true;
            else {
                unmatched.push_back({gpt2__schema_made_any_of(cv, complement), c->pointer, false, true});
                GPT2__TRY(gpt2__schema_all_expr(cv, unmatched, &u_expr, &u_none, depth));
            }
        }
        gpt2__string alts;
        if (min_c == 0) alts = u_none ? "" : "(" + u_expr + ws + " (\",\" " + ws + " " + u_expr + ws + ")*)?"; /* none of them */
        if (!m_none && max_c > 0) {
            const uint32_t from = min_c ? min_c : 1;
            const gpt2__string us = u_none ? gpt2__string() : "(" + u_expr + ws + " \",\" " + ws + ")* ";
            if (max_c == UINT32_MAX) std::snprintf(buf, sizeof buf, "{%u,}", from - 1);
            else std::snprintf(buf, sizeof buf, "{%u,%u}", from - 1, max_c - 1);
            gpt2__string some = us + m_expr + ws + " (\",\" " + ws + " " + us + m_expr + ws + ")" + buf;
            if (!u_none) some += " (\",\" " + gpt2__string(ws) + " " + u_expr + ws + ")*";
            alts += alts.empty() ? "" : " | ";
            alts += "(" + some + ")";
        }
        if (alts.empty()) {
            if (min_c > 0) {
                *impossible = true;
                return GPT2_OK;
            }
            alts = "\"\"";
        }
        *out = gpt2__schema_add_rule(cv, "\"[\" " + gpt2__string(ws) + " (" + alts + ") \"]\"");
        return GPT2_OK;
    }
    /* after(j): the items from j on (j >= 1 written, each before a ","); j reaches k, then the rest */
    gpt2__string tail_rest;
    if (hi > k && rest_allowed) {
        const uint32_t more_lo = lo > k ? lo - (uint32_t)k : 0;
        if (hi == UINT32_MAX) std::snprintf(buf, sizeof buf, "{%u,}", more_lo);
        else std::snprintf(buf, sizeof buf, "{%u,%u}", more_lo, hi - (uint32_t)k);
        if (k == 0) {
            /* no tuple: item ("," item){lo-1, hi-1}, or nothing when lo is 0 */
            gpt2__string item = rest_expr + ws;
            if (hi == UINT32_MAX) std::snprintf(buf, sizeof buf, "{%u,}", lo > 0 ? lo - 1 : 0);
            else std::snprintf(buf, sizeof buf, "{%u,%u}", lo > 0 ? lo - 1 : 0, hi - 1);
            gpt2__string body = "\"[\" " + gpt2__string(ws) + " (" + item + " (\",\" " + ws + " " + item + ")" + buf + ")" + (lo == 0 ? "?" : "") + " \"]\"";
            *out = gpt2__schema_add_rule(cv, body);
            return GPT2_OK;
        }
        tail_rest = "(\",\" " + gpt2__string(ws) + " " + rest_expr + ws + ")" + buf;
    }
    gpt2__string next = tail_rest.empty() ? gpt2__string("\"\"") : tail_rest;
    for (size_t j = k; j-- > 1;) {
        /* after item j-1: item j (and what follows), or the end when j items are enough */
        gpt2__string body = "\",\" " + gpt2__string(ws) + " " + first[j] + ws + " " + next;
        if (j >= lo) body = "(" + body + ") | \"\"";
        if (j + 1 > hi) body = "\"\"";
        next = gpt2__schema_add_rule(cv, body);
    }
    gpt2__string body;
    if (k == 0 || hi == 0) body = "\"[\" " + gpt2__string(ws) + " \"]\"";
    else {
        body = "\"[\" " + gpt2__string(ws) + " " + first[0] + ws + " " + (hi >= 2 || k == 1 ? next : gpt2__string("\"\"")) + " \"]\"";
        if (lo == 0) body += " | \"[\" " + gpt2__string(ws) + " \"]\"";
    }
    *out = gpt2__schema_add_rule(cv, body);
    return GPT2_OK;
}

/* ---- Schemas the converter makes itself ---------------------------------------------------- */

/* Keeps a schema the converter made where it does not move (views point into it). */
static const gpt2__json* gpt2__schema_keep(gpt2__schema_converter* cv, gpt2__json&& schema) {
    cv->made.push_back(std::move(schema));
    return &cv->made.back();
}

static void gpt2__json_put(gpt2__json* object, std::string_view key, gpt2__json value) {
    object->kind = GPT2__JSON_OBJECT;
    object->keys.emplace_back(key);
    object->items.push_back(std::move(value));
}

static gpt2__json gpt2__json_scalar(gpt2__json_kind kind, std::string_view text, bool boolean = false) {
    gpt2__json j;
    j.kind = kind;
    j.text = gpt2__string(text);
    j.boolean = boolean;
    return j;
}

/* "type": the names of the types in `types` ("integer" only where "number" is not). */
static gpt2__json gpt2__json_type_names(unsigned types) {
    static const char* const names[] = {"null", "boolean", "integer", "number", "string", "array", "object"};
    gpt2__json a;
    a.kind = GPT2__JSON_ARRAY;
    for (unsigned i = 0; i < 7; i++)
        if ((types >> i & 1) && !(i == 2 && (types & GPT2__T_NUMBER))) a.items.push_back(gpt2__json_scalar(GPT2__JSON_STRING, names[i]));
    return a;
}

/* A part as a schema to write inside a made one: a made schema is copied, a schema of the
   document named by where it is (GPT2__KW_AT), so that its $refs and messages stay its own. */
static gpt2__json gpt2__schema_part_json(const gpt2__schema_part& p) {
    if (p.made) return *p.schema;
    gpt2__json at;
    gpt2__json_put(&at, GPT2__KW_AT, gpt2__json_scalar(GPT2__JSON_STRING, p.pointer));
    return at;
}

/* The union of parts as one schema: the part, or {"anyOf": [...]}. */
static gpt2__json gpt2__schema_any_of_json(const gpt2__vector<gpt2__schema_part>& parts) {
    if (parts.size() == 1) return gpt2__schema_part_json(parts[0]);
    gpt2__json list, any;
    list.kind = GPT2__JSON_ARRAY;
    for (const auto& p : parts) list.items.push_back(gpt2__schema_part_json(p));
    gpt2__json_put(&any, "anyOf", std::move(list));
    return any;
}

static const gpt2__json* gpt2__schema_made_any_of(gpt2__schema_converter* cv, const gpt2__vector<gpt2__schema_part>& branches) {
    return gpt2__schema_keep(cv, gpt2__schema_any_of_json(branches));
}

/* The types the view's `type` keywords all allow (a number type takes the integers in). */
static gpt2_result gpt2__schema_view_types(gpt2__schema_converter* cv, const gpt2__schema_view& view, unsigned* types) {
    *types = GPT2__T_ALL;
    for (const auto& kw : view)
        if (kw.key == "type") {
            unsigned t = 0;
            GPT2__TRY(gpt2__schema_types(cv, kw, &t));
            if (t & GPT2__T_NUMBER) t |= GPT2__T_INTEGER;
            *types &= t;
        }
    return GPT2_OK;
}

/* The types a view's values can have: its `type` keywords', and its enum's or const's values'
   (through a lone $ref, a few targets deep). For complements, which need only those. */
static unsigned gpt2__schema_possible_types(gpt2__schema_converter* cv, const gpt2__schema_view& view, int hops = 0) {
    if (view.size() == 1 && gpt2__schema_is_ref(view[0].key) && hops < 8) {
        const gpt2__json* target;
        gpt2__string target_pointer;
        gpt2_error quiet{};
        gpt2_error* err = cv->err;
        cv->err = &quiet; /* a $ref that does not resolve is reported where it is converted */
        const gpt2_result res = gpt2__schema_resolve(cv, view[0], &target, &target_pointer);
        cv->err = err;
        if (res != GPT2_OK) return GPT2__T_ALL;
        if (target->kind == GPT2__JSON_BOOL) return target->boolean ? (unsigned)GPT2__T_ALL : 0u;
        if (target->kind != GPT2__JSON_OBJECT) return GPT2__T_ALL;
        gpt2__schema_view v;
        gpt2__schema_view_of(*target, target_pointer, &v);
        return gpt2__schema_possible_types(cv, v, hops + 1);
    }
    unsigned types = GPT2__T_ALL;
    for (const auto& kw : view) {
        unsigned t = GPT2__T_ALL;
        if (kw.key == "type") {
            gpt2_error quiet{};
            gpt2_error* err = cv->err;
            cv->err = &quiet;
            if (gpt2__schema_types(cv, kw, &t) != GPT2_OK) t = GPT2__T_ALL;
            cv->err = err;
        } else if (kw.key == "const") {
            t = gpt2__json_types(*kw.value);
        } else if (kw.key == "enum" && kw.value->kind == GPT2__JSON_ARRAY) {
            t = 0;
            for (const auto& v : kw.value->items) t |= gpt2__json_types(v);
        }
        if (t & (GPT2__T_INTEGER | GPT2__T_NUMBER)) t |= GPT2__T_INTEGER | GPT2__T_NUMBER;
        types &= t;
    }
    return types;
}

/* The types a schema merged with `rest` can have (its allOf and $refs merged in). */
static unsigned gpt2__schema_types_with(gpt2__schema_converter* cv, const gpt2__json& schema, const gpt2__string& pointer, bool made, const gpt2__schema_view& rest) {
    if (schema.kind == GPT2__JSON_BOOL) return schema.boolean ? gpt2__schema_possible_types(cv, rest) : 0u;
    if (schema.kind != GPT2__JSON_OBJECT) return GPT2__T_ALL;
    gpt2__schema_view v;
    gpt2__schema_view_of(schema, pointer, &v, 1, true, made);
    v.insert(v.end(), rest.begin(), rest.end());
    bool none = false;
    gpt2_error quiet{};
    gpt2_error* err = cv->err;
    cv->err = &quiet;
    const gpt2_result res = gpt2__schema_normalize(cv, &v, &none);
    cv->err = err;
    if (res != GPT2_OK) return GPT2__T_ALL;
    return none ? 0 : gpt2__schema_possible_types(cv, v);
}

/* The type a keyword constrains (the others pass it), or 0 for every type. */
static unsigned gpt2__schema_keyword_types(std::string_view k) {
    static const char* const number[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", GPT2__KW_NOT_MULTIPLE, GPT2__KW_FRACTION};
    static const char* const string[] = {"minLength", "maxLength", "pattern", "format", GPT2__KW_NOT_IN};
    static const char* const array[] = {"items", "prefixItems", "additionalItems", "minItems", "maxItems", "contains", "uniqueItems", "unevaluatedItems"};
    static const char* const object[] = {"properties", "required", "additionalProperties", "patternProperties", "minProperties", "maxProperties", "propertyNames",
                                         "dependentRequired", "dependentSchemas", "dependencies", "unevaluatedProperties"};
    for (const char* w : number)
        if (k == w) return GPT2__T_INTEGER | GPT2__T_NUMBER;
    for (const char* w : string)
        if (k == w) return GPT2__T_STRING;
    for (const char* w : array)
        if (k == w) return GPT2__T_ARRAY;
    for (const char* w : object)
        if (k == w) return GPT2__T_OBJECT;
    return 0;
}

static void gpt2__schema_not_value(const gpt2__json& v, gpt2__vector<gpt2__json>* out);

/* Schemas whose union is every value but v: the other types, and of v's, the other values. */
static void gpt2__schema_not_equal(const gpt2__json& v, gpt2__vector<gpt2__json>* out) {
    const unsigned own = v.kind == GPT2__JSON_NUMBER ? GPT2__T_INTEGER | GPT2__T_NUMBER : gpt2__json_types(v);
    gpt2__json others;
    gpt2__json_put(&others, "type", gpt2__json_type_names(GPT2__T_ALL & ~own));
    out->push_back(std::move(others));
    gpt2__schema_not_value(v, out);
}

/* Schemas whose union is every value of v's type but v (written without an exponent, for a
   number): a string none of [v]; a number below or above it; the other boolean; an array of
   another length, or with an item that is not v's; an object without one of v's keys, with
   one whose value is not v's, or with a key more. */
static void gpt2__schema_not_value(const gpt2__json& v, gpt2__vector<gpt2__json>* out) {
    auto typed = [](const char* type) {
        gpt2__json j;
        gpt2__json_put(&j, "type", gpt2__json_scalar(GPT2__JSON_STRING, type));
        return j;
    };
    auto number = [](size_t n) { return gpt2__json_scalar(GPT2__JSON_NUMBER, std::to_string(n).c_str()); };
    auto any_of = [](gpt2__vector<gpt2__json>&& schemas) {
        gpt2__json any, list;
        list.kind = GPT2__JSON_ARRAY;
        list.items = std::move(schemas);
        gpt2__json_put(&any, "anyOf", std::move(list));
        return any;
    };
    switch (v.kind) {
    case GPT2__JSON_NULL: break;
    case GPT2__JSON_BOOL: {
        gpt2__json j, other;
        other.kind = GPT2__JSON_ARRAY;
        other.items.push_back(gpt2__json_scalar(GPT2__JSON_BOOL, "", !v.boolean));
        gpt2__json_put(&j, "enum", std::move(other));
        out->push_back(std::move(j));
        break;
    }
    case GPT2__JSON_STRING: {
        gpt2__json j = typed("string"), list;
        list.kind = GPT2__JSON_ARRAY;
        list.items.push_back(v);
        gpt2__json_put(&j, GPT2__KW_NOT_IN, std::move(list));
        out->push_back(std::move(j));
        break;
    }
    case GPT2__JSON_NUMBER:
        for (const char* side : {"exclusiveMaximum", "exclusiveMinimum"}) {
            gpt2__json j = typed("number");
            gpt2__json_put(&j, side, v);
            out->push_back(std::move(j));
        }
        break;
    case GPT2__JSON_ARRAY: {
        const size_t n = v.items.size();
        if (n > 0) {
            gpt2__json shorter = typed("array");
            gpt2__json_put(&shorter, "maxItems", number(n - 1));
            out->push_back(std::move(shorter));
        }
        gpt2__json longer = typed("array");
        gpt2__json_put(&longer, "minItems", number(n + 1));
        out->push_back(std::move(longer));
        for (size_t i = 0; i < n; i++) {
            gpt2__json j = typed("array"), prefix;
            gpt2__json_put(&j, "minItems", number(n));
            gpt2__json_put(&j, "maxItems", number(n));
            prefix.kind = GPT2__JSON_ARRAY;
            for (size_t k = 0; k < i; k++) prefix.items.push_back(gpt2__json_scalar(GPT2__JSON_BOOL, "", true));
            gpt2__vector<gpt2__json> differs;
            gpt2__schema_not_equal(v.items[i], &differs);
            prefix.items.push_back(any_of(std::move(differs)));
            gpt2__json_put(&j, "prefixItems", std::move(prefix));
            out->push_back(std::move(j));
        }
        break;
    }
    case GPT2__JSON_OBJECT: {
        gpt2__json all = typed("object"), keys;
        keys.kind = GPT2__JSON_ARRAY;
        for (size_t i = 0; i < v.keys.size(); i++) {
            keys.items.push_back(gpt2__json_scalar(GPT2__JSON_STRING, v.keys[i]));
            gpt2__json lacking = typed("object"), absent;
            gpt2__json_put(&absent, v.keys[i], gpt2__json_scalar(GPT2__JSON_BOOL, "", false));
            gpt2__json_put(&lacking, "properties", std::move(absent));
            out->push_back(std::move(lacking));
            gpt2__json differing = typed("object"), required, property;
            required.kind = GPT2__JSON_ARRAY;
            required.items.push_back(gpt2__json_scalar(GPT2__JSON_STRING, v.keys[i]));
            gpt2__vector<gpt2__json> differs;
            gpt2__schema_not_equal(v.items[i], &differs);
            gpt2__json_put(&property, v.keys[i], any_of(std::move(differs)));
            gpt2__json_put(&differing, "required", std::move(required));
            gpt2__json_put(&differing, "properties", std::move(property));
            out->push_back(std::move(differing));
        }
        gpt2__json_put(&all, "required", std::move(keys)); /* all of v's keys and one more */
        gpt2__json_put(&all, "minProperties", number(v.keys.size() + 1));
        out->push_back(std::move(all));
        break;
    }
    }
}

/* The values the schema refuses, as a union of schemas the converter can write (each of
   `out`'s parts; none: the schema takes every value). De Morgan's: a value is refused by the
   types the schema does not allow, or, of a type it allows, by one of its keywords, each
   complemented (minimum 5: exclusiveMaximum 5 among the numbers; required ["a"]: objects without
   "a"; properties {"a": S}: objects whose "a" meets the complement of S; enum: the values of its
   types that are none of them, numbers as the intervals between). A keyword whose complement a
   grammar cannot write is refused (a pattern, a format, uniqueItems). Where the exact complement
   would cost much, a part of it is written (numbers with an exponent): fewer values, never more.
   Complements' keywords evaluate nothing. `within`: the types the caller will keep (those of the
   schema the complement meets): a keyword of other types is not complemented (nor refused). */
static gpt2_result gpt2__schema_complement(gpt2__schema_converter* cv, const gpt2__json& schema, const gpt2__string& pointer, bool made_schema, int depth, gpt2__vector<gpt2__schema_part>* out,
                                           unsigned within) {
    if (depth > 32) return gpt2__schema_refuse(cv, pointer, "complements (not, if, oneOf) nest too deep (32 levels at most)");
    auto emit = [&](gpt2__json&& made) { out->push_back({gpt2__schema_keep(cv, std::move(made)), pointer, false, true}); };
    if (schema.kind == GPT2__JSON_BOOL) {
        if (!schema.boolean) emit(gpt2__json_scalar(GPT2__JSON_BOOL, "", true));
        return GPT2_OK;
    }
    if (schema.kind != GPT2__JSON_OBJECT) return gpt2__schema_refuse(cv, pointer, "a schema must be an object or a boolean");
    gpt2__schema_view view;
    gpt2__schema_view_of(schema, pointer, &view, 0, false, made_schema);
    bool none = false;
    GPT2__TRY(gpt2__schema_normalize(cv, &view, &none));
    if (none) {
        emit(gpt2__json_scalar(GPT2__JSON_BOOL, "", true));
        return GPT2_OK;
    }
    if (view.size() == 1 && (gpt2__schema_is_ref(view[0].key) || view[0].key == GPT2__KW_AT)) {
        const gpt2__json* target;
        gpt2__string target_pointer;
        GPT2__TRY(gpt2__schema_resolve(cv, view[0], &target, &target_pointer));
        return gpt2__schema_complement(cv, *target, target_pointer, false, depth + 1, out, within);
    }
    unsigned types = 0;
    GPT2__TRY(gpt2__schema_view_types(cv, view, &types));
    if (within & (GPT2__T_INTEGER | GPT2__T_NUMBER)) within |= GPT2__T_INTEGER | GPT2__T_NUMBER;
    /* with a type: the complement of each keyword among the allowed types it constrains */
    auto typed = [&](unsigned t) {
        gpt2__json made;
        if (t != GPT2__T_ALL) gpt2__json_put(&made, "type", gpt2__json_type_names(t));
        else made.kind = GPT2__JSON_OBJECT;
        return made;
    };
    unsigned others = GPT2__T_ALL & ~types & within;
    if ((types & GPT2__T_INTEGER) && !(types & GPT2__T_NUMBER) && (within & GPT2__T_NUMBER)) { /* the numbers that are no integers (written without an exponent) */
        others &= ~(GPT2__T_INTEGER | GPT2__T_NUMBER);
        gpt2__json made = typed(GPT2__T_NUMBER);
        gpt2__json_put(&made, GPT2__KW_FRACTION, gpt2__json_scalar(GPT2__JSON_BOOL, "", true));
        emit(std::move(made));
    }
    if (others) emit(typed(others));
    const unsigned numbers = types & within & (GPT2__T_INTEGER | GPT2__T_NUMBER);
    gpt2__schema_end lower, upper;
    GPT2__TRY(gpt2__schema_bounds(cv, view, &lower, &upper));
    for (const gpt2__schema_end* end : {&lower, &upper})
        if (end->present && numbers) {
            gpt2__json made = typed(numbers);
            const bool is_lower = end == &lower;
            gpt2__json_put(&made, is_lower ? (end->strict ? "maximum" : "exclusiveMaximum") : (end->strict ? "minimum" : "exclusiveMinimum"),
                           gpt2__json_scalar(GPT2__JSON_NUMBER, gpt2__schema_decimal_text(end->at)));
            emit(std::move(made));
        }
    for (const gpt2__schema_kw& kw : view) {
        const std::string_view k = kw.key;
        const unsigned applies = (gpt2__schema_keyword_types(k) ? gpt2__schema_keyword_types(k) & types : types) & within;
        if (!applies || k == "type" || gpt2__schema_is_bound(k)) continue; /* no value of the types asked for fails it */
        char why[160];
        std::snprintf(why, sizeof why, "the complement of '%.*s' (inside not, if or oneOf) is not enforced", (int)k.size(), k.data());
        if (k == "multipleOf" || k == GPT2__KW_NOT_MULTIPLE) {
            gpt2__json made = typed(applies);
            gpt2__json_put(&made, k == "multipleOf" ? GPT2__KW_NOT_MULTIPLE : "multipleOf", *kw.value);
            emit(std::move(made));
        } else if (k == GPT2__KW_FRACTION) {
            emit(typed(GPT2__T_INTEGER));
        } else if (k == "minLength" || k == "maxLength" || k == "minItems" || k == "maxItems" || k == "minProperties" || k == "maxProperties") {
            uint32_t n = 0;
            GPT2__TRY(gpt2__schema_uint(cv, kw, &n));
            const bool at_least = k.substr(0, 3) == "min";
            if (at_least && n == 0) continue; /* every value has at least 0 */
            if (!at_least && n >= GPT2__GRAMMAR_MAX_REPEAT) return gpt2__schema_refuse(cv, kw.pointer, why);
            gpt2__string other = gpt2__string(at_least ? "max" : "min") + gpt2__string(k.substr(3));
            gpt2__json made = typed(applies);
            gpt2__json_put(&made, other, gpt2__json_scalar(GPT2__JSON_NUMBER, std::to_string(at_least ? n - 1 : n + 1).c_str()));
            emit(std::move(made));
        } else if (k == GPT2__KW_NOT_IN) {
            gpt2__json made = typed(applies);
            gpt2__json_put(&made, "enum", *kw.value);
            emit(std::move(made));
        } else if (k == "required") {
            if (kw.value->kind != GPT2__JSON_ARRAY) return gpt2__schema_refuse(cv, kw.pointer, "required must be an array of strings");
            for (const auto& r : kw.value->items) {
                if (r.kind != GPT2__JSON_STRING) return gpt2__schema_refuse(cv, kw.pointer, "required must be an array of strings");
                gpt2__json absent, made = typed(applies);
                gpt2__json_put(&absent, r.text, gpt2__json_scalar(GPT2__JSON_BOOL, "", false));
                gpt2__json_put(&made, "properties", std::move(absent));
                emit(std::move(made));
            }
        } else if (k == "properties") {
            if (kw.value->kind != GPT2__JSON_OBJECT) return gpt2__schema_refuse(cv, kw.pointer, "properties must be an object");
            for (size_t i = 0; i < kw.value->keys.size(); i++) {
                gpt2__vector<gpt2__schema_part> c;
                GPT2__TRY(gpt2__schema_complement(cv, kw.value->items[i], kw.pointer + "/" + gpt2__schema_escape_pointer(kw.value->keys[i]), kw.made, depth + 1, &c));
                if (c.empty()) continue;
                gpt2__json made = typed(applies), required, property;
                required.kind = GPT2__JSON_ARRAY;
                required.items.push_back(gpt2__json_scalar(GPT2__JSON_STRING, kw.value->keys[i]));
                gpt2__json_put(&made, "required", std::move(required));
                gpt2__json_put(&property, kw.value->keys[i], gpt2__schema_any_of_json(c));
                gpt2__json_put(&made, "properties", std::move(property));
                emit(std::move(made));
            }
        } else if (k == "items" && kw.value->kind != GPT2__JSON_ARRAY && !(kw.owner && kw.owner->get("prefixItems"))) {
            gpt2__vector<gpt2__schema_part> c; /* an item that meets the complement */
            GPT2__TRY(gpt2__schema_complement(cv, *kw.value, kw.pointer, kw.made, depth + 1, &c));
            if (c.empty()) continue;
            gpt2__json made = typed(applies);
            gpt2__json_put(&made, "contains", gpt2__schema_any_of_json(c));
            emit(std::move(made));
        } else if (k == "contains") {
            /* fewer than minContains, or more than maxContains */
            uint32_t bounds[2] = {1, UINT32_MAX};
            for (int b = 0; b < 2; b++)
                if (const gpt2__json* v = kw.owner ? kw.owner->get(b ? "maxContains" : "minContains") : nullptr) {
                    const gpt2__schema_kw count{b ? "maxContains" : "minContains", v, kw.pointer.substr(0, kw.pointer.rfind('/')) + (b ? "/maxContains" : "/minContains"), kw.owner};
                    GPT2__TRY(gpt2__schema_uint(cv, count, &bounds[b]));
                }
            const gpt2__json inner = gpt2__schema_part_json({kw.value, kw.pointer, false, kw.made});
            if (bounds[0] > 0) {
                gpt2__json made = typed(applies);
                gpt2__json_put(&made, "contains", inner);
                gpt2__json_put(&made, "minContains", gpt2__json_scalar(GPT2__JSON_NUMBER, "0"));
                gpt2__json_put(&made, "maxContains", gpt2__json_scalar(GPT2__JSON_NUMBER, std::to_string(bounds[0] - 1).c_str()));
                emit(std::move(made));
            }
            if (bounds[1] != UINT32_MAX) {
                gpt2__json made = typed(applies);
                gpt2__json_put(&made, "contains", inner);
                gpt2__json_put(&made, "minContains", gpt2__json_scalar(GPT2__JSON_NUMBER, std::to_string((unsigned long long)bounds[1] + 1).c_str()));
                emit(std::move(made));
            }
        } else if (k == "enum" || k == "const") {
            gpt2__vector<const gpt2__json*> values;
            if (k == "const") values.push_back(kw.value);
            else if (kw.value->kind != GPT2__JSON_ARRAY) return gpt2__schema_refuse(cv, kw.pointer, "enum must be an array");
            else
                for (const auto& v : kw.value->items) values.push_back(&v);
            bool has_null = false, has_true = false, has_false = false;
            gpt2__vector<gpt2__schema_decimal> numbers_in;
            gpt2__json strings;
            strings.kind = GPT2__JSON_ARRAY;
            for (const gpt2__json* v : values) {
                switch (v->kind) {
                case GPT2__JSON_NULL: has_null = true; break;
                case GPT2__JSON_BOOL: (v->boolean ? has_true : has_false) = true; break;
                case GPT2__JSON_STRING: strings.items.push_back(*v); break;
                case GPT2__JSON_ARRAY:
                case GPT2__JSON_OBJECT: break; /* below */
                case GPT2__JSON_NUMBER: {
                    gpt2__schema_decimal d;
                    if (!gpt2__schema_decimal_of(*v, &d)) return gpt2__schema_refuse(cv, kw.pointer, "the complement of a number with more than 18 digits before its point or 64 after is not enforced");
                    numbers_in.push_back(d);
                    break;
                }
                }
            }
            if ((applies & GPT2__T_NULL) && !has_null) emit(typed(GPT2__T_NULL));
            if ((applies & GPT2__T_BOOL) && !(has_true && has_false)) {
                gpt2__json made;
                if (has_true || has_false) {
                    gpt2__json other;
                    other.kind = GPT2__JSON_ARRAY;
                    other.items.push_back(gpt2__json_scalar(GPT2__JSON_BOOL, "", !has_true));
                    gpt2__json_put(&made, "enum", std::move(other));
                } else made = typed(GPT2__T_BOOL);
                emit(std::move(made));
            }
            if (applies & GPT2__T_STRING) {
                gpt2__json made = typed(GPT2__T_STRING);
                if (!strings.items.empty()) gpt2__json_put(&made, GPT2__KW_NOT_IN, std::move(strings));
                emit(std::move(made));
            }
            for (unsigned t : {GPT2__T_ARRAY, GPT2__T_OBJECT}) { /* the arrays or objects that are none of the values */
                if (!(applies & t)) continue;
                gpt2__json made = typed(t), list;
                list.kind = GPT2__JSON_ARRAY;
                for (const gpt2__json* v : values)
                    if (v->kind == (t == GPT2__T_ARRAY ? GPT2__JSON_ARRAY : GPT2__JSON_OBJECT)) list.items.push_back(*v);
                if (!list.items.empty()) gpt2__json_put(&made, GPT2__KW_NOT_IN, std::move(list));
                emit(std::move(made));
            }
            if (const unsigned nt = applies & (GPT2__T_INTEGER | GPT2__T_NUMBER)) { /* the intervals between the numbers */
                std::sort(numbers_in.begin(), numbers_in.end(), gpt2__schema_decimal_less);
                for (size_t i = 0; i <= numbers_in.size(); i++) {
                    if (i > 0 && i < numbers_in.size() && !gpt2__schema_decimal_less(numbers_in[i - 1], numbers_in[i])) continue; /* a value twice */
                    gpt2__json made = typed(nt);
                    if (i > 0) gpt2__json_put(&made, "exclusiveMinimum", gpt2__json_scalar(GPT2__JSON_NUMBER, gpt2__schema_decimal_text(numbers_in[i - 1])));
                    if (i < numbers_in.size()) gpt2__json_put(&made, "exclusiveMaximum", gpt2__json_scalar(GPT2__JSON_NUMBER, gpt2__schema_decimal_text(numbers_in[i])));
                    emit(std::move(made));
                }
            }
        } else if (k == "anyOf") {
            if (kw.value->kind != GPT2__JSON_ARRAY || kw.value->items.empty()) return gpt2__schema_refuse(cv, kw.pointer, "expected a non-empty array of schemas");
            gpt2__json all, list;
            list.kind = GPT2__JSON_ARRAY;
            bool empty = false;
            for (size_t i = 0; i < kw.value->items.size() && !empty; i++) {
                char index[24];
                std::snprintf(index, sizeof index, "/%zu", i);
                gpt2__vector<gpt2__schema_part> c;
                GPT2__TRY(gpt2__schema_complement(cv, kw.value->items[i], kw.pointer + index, kw.made, depth + 1, &c));
                empty = c.empty();
                if (!empty) list.items.push_back(gpt2__schema_any_of_json(c));
            }
            if (empty) continue; /* a branch takes every value */
            gpt2__json_put(&all, "allOf", std::move(list));
            emit(std::move(all));
        } else if (k == "not") {
            out->push_back({kw.value, kw.pointer, false, kw.made});
        } else if (k == "if") {
            const gpt2__json* then_schema = kw.owner ? kw.owner->get("then") : nullptr;
            const gpt2__json* else_schema = kw.owner ? kw.owner->get("else") : nullptr;
            const gpt2__string at = kw.pointer.substr(0, kw.pointer.rfind('/'));
            if (then_schema) { /* if holds and then does not */
                gpt2__vector<gpt2__schema_part> c;
                GPT2__TRY(gpt2__schema_complement(cv, *then_schema, at + "/then", kw.made, depth + 1, &c));
                if (!c.empty()) {
                    gpt2__json all, list;
                    list.kind = GPT2__JSON_ARRAY;
                    list.items.push_back(gpt2__schema_part_json({kw.value, kw.pointer, false, kw.made}));
                    list.items.push_back(gpt2__schema_any_of_json(c));
                    gpt2__json_put(&all, "allOf", std::move(list));
                    emit(std::move(all));
                }
            }
            if (else_schema) { /* neither if nor else holds */
                gpt2__vector<gpt2__schema_part> c_if, c_else;
                GPT2__TRY(gpt2__schema_complement(cv, *kw.value, kw.pointer, kw.made, depth + 1, &c_if));
                GPT2__TRY(gpt2__schema_complement(cv, *else_schema, at + "/else", kw.made, depth + 1, &c_else));
                if (!c_if.empty() && !c_else.empty()) {
                    gpt2__json all, list;
                    list.kind = GPT2__JSON_ARRAY;
                    list.items.push_back(gpt2__schema_any_of_json(c_if));
                    list.items.push_back(gpt2__schema_any_of_json(c_else));
                    gpt2__json_put(&all, "allOf", std::move(list));
                    emit(std::move(all));
                }
            }
        } else if (k == "uniqueItems" && kw.value->kind == GPT2__JSON_BOOL && !kw.value->boolean) {
            continue;
        } else {
            return gpt2__schema_refuse(cv, kw.pointer, why);
        }
    }
    return GPT2_OK;
}

/* ---- Values: equality, and the keywords an enum's values are kept by ------------------------ */

/* Whether two JSON values are equal as JSON Schema compares them: numbers by value (2 and 2.0
   alike), objects whatever their keys' order. */
static bool gpt2__json_equal(const gpt2__json& a, const gpt2__json& b) {
    if (a.kind != b.kind) return false;
    switch (a.kind) {
    case GPT2__JSON_NULL: return true;
    case GPT2__JSON_BOOL: return a.boolean == b.boolean;
    case GPT2__JSON_STRING: return a.text == b.text;
    case GPT2__JSON_NUMBER: {
        gpt2__schema_decimal x, y;
        if (!gpt2__schema_decimal_of(a, &x) || !gpt2__schema_decimal_of(b, &y)) return a.text == b.text;
        return !gpt2__schema_decimal_less(x, y) && !gpt2__schema_decimal_less(y, x);
    }
    case GPT2__JSON_ARRAY:
        if (a.items.size() != b.items.size()) return false;
        for (size_t i = 0; i < a.items.size(); i++)
            if (!gpt2__json_equal(a.items[i], b.items[i])) return false;
        return true;
    case GPT2__JSON_OBJECT:
        if (a.keys.size() != b.keys.size()) return false;
        for (size_t i = 0; i < a.keys.size(); i++) {
            const gpt2__json* other = b.get(a.keys[i]);
            if (!other || !gpt2__json_equal(a.items[i], *other)) return false;
        }
        return true;
    }
    return false;
}

/* Whether the view's keyword `kw` keeps the value v of an enum or const beside it; a keyword that
   cannot be checked on a value here is refused. */
static gpt2_result gpt2__schema_keeps(gpt2__schema_converter* cv, const gpt2__schema_kw& kw, const gpt2__json& v, const gpt2__schema_kw& values, bool* keep) {
    const std::string_view k = kw.key;
    *keep = true;
    if (k == "type") {
        unsigned t = 0;
        GPT2__TRY(gpt2__schema_types(cv, kw, &t));
        if (t & GPT2__T_NUMBER) t |= GPT2__T_INTEGER;
        const unsigned vt = gpt2__json_types(v);
        gpt2__schema_decimal d; /* 2.0 is an integer (since draft 6) */
        *keep = (vt & t) || (!cv->draft4 && (t & GPT2__T_INTEGER) && v.kind == GPT2__JSON_NUMBER && gpt2__schema_decimal_of(v, &d) && d.fraction.empty());
    } else if (k == "enum" || k == "const") {
        if (k == "enum" && kw.value->kind != GPT2__JSON_ARRAY) return gpt2__schema_refuse(cv, kw.pointer, "enum must be an array");
        *keep = k == "const" && gpt2__json_equal(*kw.value, v);
        for (size_t i = 0; k == "enum" && i < kw.value->items.size() && !*keep; i++) *keep = gpt2__json_equal(kw.value->items[i], v);
    } else if (k == GPT2__KW_NOT_IN) {
        for (size_t i = 0; kw.value->kind == GPT2__JSON_ARRAY && i < kw.value->items.size(); i++) *keep = *keep && !gpt2__json_equal(kw.value->items[i], v);
    } else if (k == "minLength" || k == "maxLength" || k == "minItems" || k == "maxItems" || k == "minProperties" || k == "maxProperties") {
        uint32_t n = 0;
        GPT2__TRY(gpt2__schema_uint(cv, kw, &n));
        const gpt2__json_kind kind = k.find("Length") != std::string_view::npos ? GPT2__JSON_STRING : k.find("Items") != std::string_view::npos ? GPT2__JSON_ARRAY : GPT2__JSON_OBJECT;
        if (v.kind == kind) {
            const size_t size = kind == GPT2__JSON_STRING ? gpt2__utf8_code_points(v.text) : kind == GPT2__JSON_ARRAY ? v.items.size() : v.keys.size();
            *keep = k.substr(0, 3) == "min" ? size >= n : size <= n;
        }
    } else if (gpt2__schema_is_bound(k) || k == "multipleOf" || k == GPT2__KW_NOT_MULTIPLE || k == GPT2__KW_FRACTION) {
        if (v.kind != GPT2__JSON_NUMBER) return GPT2_OK;
        gpt2__schema_decimal d;
        if (!gpt2__schema_decimal_of(v, &d)) return gpt2__schema_refuse(cv, values.pointer, "a number beside bounds must have at most 18 digits before its point and 64 after");
        if (k == GPT2__KW_FRACTION) {
            *keep = !d.fraction.empty();
        } else if (gpt2__schema_is_bound(k)) {
            gpt2__schema_view one(1, kw);
            gpt2__schema_end lower, upper;
            GPT2__TRY(gpt2__schema_bounds(cv, one, &lower, &upper));
            *keep = gpt2__schema_between(lower, upper, d);
        } else {
            gpt2__schema_view one(1, kw);
            gpt2__schema_multiple m;
            bool present = false;
            GPT2__TRY(gpt2__schema_multiple_of(cv, one, gpt2__string(k).c_str(), &m, &present));
            *keep = gpt2__schema_is_multiple(d, m) == (k == "multipleOf");
        }
    } else if (k == "required") {
        if (kw.value->kind != GPT2__JSON_ARRAY) return gpt2__schema_refuse(cv, kw.pointer, "required must be an array of strings");
        for (size_t i = 0; v.kind == GPT2__JSON_OBJECT && i < kw.value->items.size(); i++)
            *keep = *keep && kw.value->items[i].kind == GPT2__JSON_STRING && v.get(kw.value->items[i].text);
    } else if (k == "uniqueItems") {
        const bool unique = !(kw.value->kind == GPT2__JSON_BOOL && !kw.value->boolean);
        for (size_t i = 0; unique && v.kind == GPT2__JSON_ARRAY && i < v.items.size(); i++)
            for (size_t j = i + 1; j < v.items.size(); j++) *keep = *keep && !gpt2__json_equal(v.items[i], v.items[j]);
    } else {
        char msg[200];
        std::snprintf(msg, sizeof msg, "'%.*s' beside %.*s is not enforced (only the keywords that keep or drop each value: type, lengths, bounds, multipleOf, counts, required, enum, const)",
                      (int)k.size(), k.data(), (int)values.key.size(), values.key.data());
        return gpt2__schema_refuse(cv, kw.pointer, msg);
    }
    return GPT2_OK;
}

/* ---- Views to GBNF: unions, then each type ------------------------------------------------- */

/* The union of the branches (views), each made alone; *impossible where none has a value. */
static gpt2_result gpt2__schema_union(gpt2__schema_converter* cv, gpt2__vector<gpt2__schema_view>& branches, const gpt2__schema_kw& applicator, std::string_view pointer,
                                      gpt2__string* out, bool* impossible, int depth) {
    cv->branches += branches.size();
    if (cv->branches > GPT2__SCHEMA_MAX_BRANCHES) {
        char why[200];
        std::snprintf(why, sizeof why, "anyOf, oneOf, not, if and the dependencies make more than %d branches in all (each a copy of the schema around it); not enforced",
                      (int)GPT2__SCHEMA_MAX_BRANCHES);
        return gpt2__schema_refuse(cv, applicator.pointer, why);
    }
    gpt2__string alts;
    for (auto& branch : branches) {
        gpt2__string e;
        bool none = false;
        GPT2__TRY(gpt2__schema_view_expr(cv, std::move(branch), pointer, &e, &none, depth + 1));
        if (none) continue;
        alts += alts.empty() ? "" : " | ";
        alts += e;
    }
    if (alts.empty()) {
        *impossible = true;
        return GPT2_OK;
    }
    *out = gpt2__schema_add_rule(cv, alts);
    return GPT2_OK;
}

/* A branch: `schema`'s keywords (a level down from `applicator`'s) and then `rest`'s; none where
   the schema is false. */
static gpt2_result gpt2__schema_branch(gpt2__schema_converter* cv, const gpt2__schema_view& rest, const gpt2__json& schema, const gpt2__string& pointer,
                                       const gpt2__schema_kw& applicator, bool evaluates, bool made, gpt2__vector<gpt2__schema_view>* branches) {
    if (schema.kind == GPT2__JSON_BOOL) {
        if (schema.boolean) branches->push_back(rest);
        return GPT2_OK;
    }
    if (schema.kind != GPT2__JSON_OBJECT) return gpt2__schema_refuse(cv, pointer, "a schema must be an object or a boolean");
    gpt2__schema_view v;
    gpt2__schema_view_of(schema, pointer, &v, (uint16_t)(applicator.level + 1), evaluates && applicator.evaluates, made);
    v.insert(v.end(), rest.begin(), rest.end());
    branches->push_back(std::move(v));
    return GPT2_OK;
}

/* Whether no value can match two of oneOf's branches, by their types (what each branch's `type`,
   `const` or `enum` allows, its allOf and $ref targets' too), their values, or a tag property. */
static bool gpt2__schema_one_of_disjoint(gpt2__schema_converter* cv, const gpt2__schema_kw& kw) {
    unsigned seen = 0;
    for (size_t i = 0; i < kw.value->items.size(); i++) {
        char index[24];
        std::snprintf(index, sizeof index, "/%zu", i);
        const unsigned t = gpt2__schema_types_with(cv, kw.value->items[i], kw.pointer + index, kw.made, gpt2__schema_view());
        if ((seen & t) && !gpt2__schema_discriminated(cv, kw) && !gpt2__schema_disjoint_values(*kw.value)) return false;
        seen |= t;
    }
    return true;
}

/* An applicator (anyOf, oneOf, not, if, the dependencies) as the union of the views it allows,
   each with the rest of the view: anyOf a branch per schema; oneOf the same where its branches
   cannot overlap, else each branch with the complements of the others; not the complement's
   parts; if (if and then) or (the complement of if, and else); dependentRequired and
   dependentSchemas (draft 4-7's dependencies) the objects without the property, and those with
   it and what it asks for (one property at a time). */
static gpt2_result gpt2__schema_expand(gpt2__schema_converter* cv, gpt2__schema_view view, size_t at, std::string_view pointer, gpt2__string* out, bool* impossible, int depth) {
    const gpt2__schema_kw kw = view[at];
    view.erase(view.begin() + (ptrdiff_t)at);
    const gpt2__schema_view& rest = view;
    gpt2__vector<gpt2__schema_view> branches;
    char index[24];
    if (kw.key == "anyOf" || kw.key == "oneOf") {
        if (kw.value->kind != GPT2__JSON_ARRAY || kw.value->items.empty()) return gpt2__schema_refuse(cv, kw.pointer, "expected a non-empty array of schemas");
        const size_t n = kw.value->items.size();
        if (kw.key == "oneOf" && !gpt2__schema_one_of_disjoint(cv, kw)) {
            /* exactly one: branch i and the complement of every other, among the types branch i
               allows (a branch of other types needs none) */
            for (size_t i = 0; i < n; i++) {
                std::snprintf(index, sizeof index, "/%zu", i);
                gpt2__vector<gpt2__schema_view> with;
                GPT2__TRY(gpt2__schema_branch(cv, rest, kw.value->items[i], kw.pointer + index, kw, true, kw.made, &with));
                if (with.empty()) continue;
                const unsigned types_i = gpt2__schema_types_with(cv, kw.value->items[i], kw.pointer + index, kw.made, rest);
                bool dead = types_i == 0;
                for (size_t j = 0; j < n && !dead; j++) {
                    if (j == i) continue;
                    std::snprintf(index, sizeof index, "/%zu", j);
                    if (!(gpt2__schema_types_with(cv, kw.value->items[j], kw.pointer + index, kw.made, gpt2__schema_view()) & types_i)) continue;
                    gpt2__vector<gpt2__schema_part> complement;
                    gpt2_error quiet{};
                    gpt2_error* err = cv->err;
                    cv->err = &quiet;
                    const gpt2_result res = gpt2__schema_complement(cv, kw.value->items[j], kw.pointer + index, kw.made, 0, &complement, types_i);
                    cv->err = err;
                    if (res != GPT2_OK) {
                        char why[sizeof quiet.message + 200];
                        std::snprintf(why, sizeof why, "'oneOf' is enforced where its branches cannot overlap (types, values, a tag property) or each branch's complement can be written (%s)",
                                      quiet.message);
                        return gpt2__schema_refuse(cv, kw.pointer, why);
                    }
                    if (complement.empty()) { /* branch j takes every value branch i does: i never holds alone */
                        dead = true;
                        continue;
                    }
                    gpt2__json list;
                    list.kind = GPT2__JSON_ARRAY;
                    for (const auto& p : complement) list.items.push_back(gpt2__schema_part_json(p));
                    const gpt2__schema_kw not_j{"anyOf", gpt2__schema_keep(cv, std::move(list)), kw.pointer + index, nullptr, (uint16_t)(kw.level + 1), false, true};
                    with[0].push_back(not_j);
                }
                if (!dead) branches.push_back(std::move(with[0]));
            }
        } else {
            for (size_t i = 0; i < n; i++) {
                std::snprintf(index, sizeof index, "/%zu", i);
                GPT2__TRY(gpt2__schema_branch(cv, rest, kw.value->items[i], kw.pointer + index, kw, true, kw.made, &branches));
            }
        }
    } else if (kw.key == "not") {
        gpt2__vector<gpt2__schema_part> c;
        GPT2__TRY(gpt2__schema_complement(cv, *kw.value, kw.pointer, kw.made, 0, &c, gpt2__schema_possible_types(cv, rest)));
        for (const auto& p : c) GPT2__TRY(gpt2__schema_branch(cv, rest, *p.schema, p.pointer, kw, false, p.made, &branches));
    } else if (kw.key == "if") {
        const gpt2__json* then_schema = kw.owner ? kw.owner->get("then") : nullptr;
        const gpt2__json* else_schema = kw.owner ? kw.owner->get("else") : nullptr;
        const gpt2__string owner_pointer = kw.pointer.substr(0, kw.pointer.rfind('/'));
        if (!then_schema && !else_schema) { /* no then and no else: if only annotates */
            branches.push_back(rest);
        } else if (!then_schema) { /* if, or else: (if) or (not if and else) is the same */
            GPT2__TRY(gpt2__schema_branch(cv, rest, *kw.value, kw.pointer, kw, true, kw.made, &branches));
            GPT2__TRY(gpt2__schema_branch(cv, rest, *else_schema, owner_pointer + "/else", kw, true, kw.made, &branches));
        } else {
            gpt2__vector<gpt2__schema_view> with_if;
            GPT2__TRY(gpt2__schema_branch(cv, rest, *kw.value, kw.pointer, kw, true, kw.made, &with_if));
            for (auto& v : with_if) GPT2__TRY(gpt2__schema_branch(cv, v, *then_schema, owner_pointer + "/then", kw, true, kw.made, &branches));
            gpt2__vector<gpt2__schema_part> c;
            GPT2__TRY(gpt2__schema_complement(cv, *kw.value, kw.pointer, kw.made, 0, &c, gpt2__schema_possible_types(cv, rest)));
            for (const auto& p : c) {
                gpt2__vector<gpt2__schema_view> with_not_if;
                GPT2__TRY(gpt2__schema_branch(cv, rest, *p.schema, p.pointer, kw, false, p.made, &with_not_if));
                for (auto& v : with_not_if) {
                    if (else_schema) GPT2__TRY(gpt2__schema_branch(cv, v, *else_schema, owner_pointer + "/else", kw, true, kw.made, &branches));
                    else branches.push_back(std::move(v));
                }
            }
        }
    } else { /* dependentRequired, dependentSchemas, dependencies: one property at a time */
        if (kw.value->kind != GPT2__JSON_OBJECT) return gpt2__schema_refuse(cv, kw.pointer, "expected an object");
        if (kw.value->keys.empty()) {
            branches.push_back(rest);
        } else {
            const gpt2__string& name = kw.value->keys[0];
            const gpt2__json& wants = kw.value->items[0];
            const gpt2__string where = kw.pointer + "/" + gpt2__schema_escape_pointer(name);
            const bool names = kw.key == "dependentRequired" || (kw.key == "dependencies" && wants.kind == GPT2__JSON_ARRAY);
            gpt2__json required_names;
            required_names.kind = GPT2__JSON_ARRAY;
            required_names.items.push_back(gpt2__json_scalar(GPT2__JSON_STRING, name));
            if (names) {
                if (wants.kind != GPT2__JSON_ARRAY) return gpt2__schema_refuse(cv, where, "expected an array of property names");
                for (const auto& w : wants.items) {
                    if (w.kind != GPT2__JSON_STRING) return gpt2__schema_refuse(cv, where, "expected an array of property names");
                    required_names.items.push_back(w);
                }
            }
            /* the rest of the keyword's properties, for the next step */
            gpt2__schema_view next = rest;
            if (kw.value->keys.size() > 1) {
                gpt2__json more;
                more.kind = GPT2__JSON_OBJECT;
                more.keys.assign(kw.value->keys.begin() + 1, kw.value->keys.end());
                more.items.assign(kw.value->items.begin() + 1, kw.value->items.end());
                gpt2__schema_kw later = kw;
                later.value = gpt2__schema_keep(cv, std::move(more));
                later.made = true;
                next.push_back(later);
            }
            /* non-objects pass: a branch of their own, so that the others are objects only */
            gpt2__json others, without, with;
            gpt2__json_put(&others, "type", gpt2__json_type_names(GPT2__T_ALL & ~GPT2__T_OBJECT));
            gpt2__json absent;
            gpt2__json_put(&absent, name, gpt2__json_scalar(GPT2__JSON_BOOL, "", false));
            gpt2__json_put(&without, "type", gpt2__json_scalar(GPT2__JSON_STRING, "object"));
            gpt2__json_put(&without, "properties", std::move(absent));
            gpt2__json_put(&with, "type", gpt2__json_scalar(GPT2__JSON_STRING, "object"));
            gpt2__json_put(&with, "required", std::move(required_names));
            GPT2__TRY(gpt2__schema_branch(cv, rest, *gpt2__schema_keep(cv, std::move(others)), where, kw, false, true, &branches));
            GPT2__TRY(gpt2__schema_branch(cv, next, *gpt2__schema_keep(cv, std::move(without)), where, kw, false, true, &branches));
            gpt2__vector<gpt2__schema_view> with_name;
            GPT2__TRY(gpt2__schema_branch(cv, next, *gpt2__schema_keep(cv, std::move(with)), where, kw, false, true, &with_name));
            for (auto& v : with_name) {
                if (names) branches.push_back(std::move(v));
                else GPT2__TRY(gpt2__schema_branch(cv, v, wants, where, kw, true, kw.made, &branches));
            }
        }
    }
    return gpt2__schema_union(cv, branches, kw, pointer, out, impossible, depth);
}

/* The expression of a schema as a view: its allOf and $refs merged in, its applicators made
   unions, then an alternative per type. */
static gpt2_result gpt2__schema_view_expr(gpt2__schema_converter* cv, gpt2__schema_view view, std::string_view pointer, gpt2__string* out, bool* impossible, int depth) {
    *impossible = false;
    if (depth > GPT2__SCHEMA_MAX_DEPTH) return gpt2__schema_refuse(cv, pointer, "schemas nest too deep (128 levels at most)");
    GPT2__TRY(gpt2__schema_normalize(cv, &view, impossible));
    if (*impossible) return GPT2_OK;
    if (view.size() == 1 && gpt2__schema_is_ref(view[0].key)) return gpt2__schema_ref_rule(cv, view[0], out);
    if (view.empty()) {
        cv->used_value = true;
        *out = "value";
        return GPT2_OK;
    }
    for (size_t i = 0; i < view.size(); i++) {
        const std::string_view k = view[i].key;
        if (k == "anyOf" || k == "oneOf" || k == "not" || k == "if" || k == "dependentRequired" || k == "dependentSchemas" || k == "dependencies")
            return gpt2__schema_expand(cv, std::move(view), i, pointer, out, impossible, depth);
    }
    unsigned types = 0;
    GPT2__TRY(gpt2__schema_view_types(cv, view, &types));
    const gpt2__schema_kw* values_kw = nullptr;
    for (const auto& kw : view)
        if ((kw.key == "enum" || kw.key == "const") && !values_kw) values_kw = &kw;
    if (!values_kw)
        for (size_t i = 0; i < view.size(); i++) {
            /* an array or object none of some values (a complement): each such value as the union of
               every value but it (gpt2__schema_not_equal), one anyOf for each */
            if (view[i].key != GPT2__KW_NOT_IN || view[i].value->kind != GPT2__JSON_ARRAY) continue;
            gpt2__json strings;
            strings.kind = GPT2__JSON_ARRAY;
            gpt2__schema_view others;
            for (const auto& v : view[i].value->items) {
                if (v.kind != GPT2__JSON_ARRAY && v.kind != GPT2__JSON_OBJECT) {
                    strings.items.push_back(v);
                    continue;
                }
                gpt2__json list;
                list.kind = GPT2__JSON_ARRAY;
                gpt2__vector<gpt2__json> differ;
                gpt2__schema_not_equal(v, &differ);
                list.items = std::move(differ);
                gpt2__schema_kw any = view[i];
                any.key = "anyOf";
                any.value = gpt2__schema_keep(cv, std::move(list));
                any.made = true;
                others.push_back(std::move(any));
            }
            if (others.empty()) continue;
            view[i].value = gpt2__schema_keep(cv, std::move(strings));
            view.insert(view.end(), others.begin(), others.end());
            return gpt2__schema_view_expr(cv, std::move(view), pointer, out, impossible, depth + 1);
        }
    if (values_kw) {
        /* the values of the enum or const that every other keyword keeps */
        const bool is_enum = values_kw->key == "enum";
        if (is_enum && values_kw->value->kind != GPT2__JSON_ARRAY) return gpt2__schema_refuse(cv, values_kw->pointer, "enum must be an array");
        gpt2__vector<const gpt2__json*> values;
        if (!is_enum) values.push_back(values_kw->value);
        else
            for (const auto& v : values_kw->value->items) values.push_back(&v);
        gpt2__string alts;
        for (const gpt2__json* v : values) {
            bool keep = true;
            for (const auto& other : view)
                if (&other != values_kw && keep) GPT2__TRY(gpt2__schema_keeps(cv, other, *v, *values_kw, &keep));
            if (!keep) continue;
            if (!alts.empty()) alts += " | ";
            if (v->kind == GPT2__JSON_NUMBER && cv->draft4 && (types & GPT2__T_INTEGER) && !(types & GPT2__T_NUMBER)) gpt2__schema_number_literal(&alts, *v, true);
            else gpt2__schema_json_literal(cv, *v, &alts);
        }
        if (alts.empty()) {
            *impossible = true;
            return GPT2_OK;
        }
        *out = gpt2__schema_add_rule(cv, alts);
        return GPT2_OK;
    }
    gpt2__string alts;
    auto add = [&](const gpt2__string& e) {
        if (!alts.empty()) alts += " | ";
        alts += e;
    };
    if (types & GPT2__T_NULL) add("\"null\"");
    if (types & GPT2__T_BOOL) add("(\"true\" | \"false\")");
    if (types & (GPT2__T_NUMBER | GPT2__T_INTEGER)) {
        gpt2__string e;
        bool none = false;
        GPT2__TRY(gpt2__schema_numeric(cv, view, pointer, !(types & GPT2__T_NUMBER), &e, &none));
        if (!none) add(e);
    }
    if (types & GPT2__T_STRING) {
        gpt2__string e;
        bool none = false;
        GPT2__TRY(gpt2__schema_string(cv, view, &e, &none));
        if (!none) add(e);
    }
    if (types & GPT2__T_ARRAY) {
        gpt2__string e;
        bool none = false;
        GPT2__TRY(gpt2__schema_array(cv, view, &e, &none, depth));
        if (!none) add(e);
    }
    if (types & GPT2__T_OBJECT) {
        gpt2__string e;
        bool none = false;
        GPT2__TRY(gpt2__schema_object(cv, view, &e, &none, depth));
        if (!none) add(e);
    }
    if (alts.empty()) {
        *impossible = true;
        return GPT2_OK;
    }
    *out = gpt2__schema_add_rule(cv, alts);
    return GPT2_OK;
}

/* A schema's GBNF expression (a rule's name), or *impossible when no value matches it. */
static gpt2_result gpt2__schema_expr(gpt2__schema_converter* cv, const gpt2__json& schema, std::string_view pointer, gpt2__string* out, bool* impossible, int depth) {
    *impossible = false;
    if (schema.kind == GPT2__JSON_BOOL) {
        if (!schema.boolean) *impossible = true;
        else cv->used_value = true, *out = "value";
        return GPT2_OK;
    }
    if (schema.kind != GPT2__JSON_OBJECT) return gpt2__schema_refuse(cv, pointer.empty() ? "(root)" : pointer, "a schema must be an object or a boolean");
    gpt2__schema_view view;
    gpt2__schema_view_of(schema, pointer, &view);
    return gpt2__schema_view_expr(cv, std::move(view), pointer, out, impossible, depth);
}

/* The schema (JSON text) as GBNF text, its start rule `root`. */
static gpt2_result gpt2__json_schema_to_gbnf(const char* text, size_t len, const gpt2_json_schema_params& params, gpt2__string* gbnf, gpt2_error* err) {
    gpt2__json root;
    GPT2__TRY(gpt2__json_parse(text, len, &root, err));
    if (root.kind != GPT2__JSON_OBJECT && root.kind != GPT2__JSON_BOOL)
        return gpt2__fail(err, GPT2_ERROR_BAD_GRAMMAR, "json schema: the schema must be an object or a boolean, not %s",
                          root.kind == GPT2__JSON_ARRAY ? "an array" : root.kind == GPT2__JSON_STRING ? "a string" : root.kind == GPT2__JSON_NUMBER ? "a number" : "null");
    const bool compact = params.compact != 0;
    const uint32_t max_ws = params.max_whitespace ? params.max_whitespace : 20;
    gpt2__schema_converter cv;
    cv.root = &root;
    cv.compact = compact;
    cv.any_order = params.any_order != 0;
    cv.integer_fraction = params.integer_fraction != 0; /* not for draft 4, below */
    cv.max_ws = max_ws;
    cv.err = err;
    if (const gpt2__json* draft = root.kind == GPT2__JSON_OBJECT ? root.get("$schema") : nullptr; draft && draft->kind == GPT2__JSON_STRING) {
        const gpt2__string& d = draft->text;
        if (d.find("draft-0") != gpt2__string::npos) cv.draft = GPT2__DRAFT_7_OR_OLDER;
        else if (d.find("2019-09") != gpt2__string::npos || d.find("2020-12") != gpt2__string::npos) cv.draft = GPT2__DRAFT_2019_OR_NEWER;
        cv.draft4 = d.find("draft-04") != gpt2__string::npos || d.find("draft-03") != gpt2__string::npos;
    }
    if (cv.draft4) cv.integer_fraction = false;
    GPT2__TRY(gpt2__schema_index(&cv, root, "", "", 0, &cv.ambiguous_id));
    gpt2__string top;
    bool none = false;
    GPT2__TRY(gpt2__schema_expr(&cv, root, "", &top, &none, 0));
    if (none && !cv.contradiction.empty()) return gpt2__fail(err, GPT2_ERROR_BAD_GRAMMAR, "json schema: %s", cv.contradiction.c_str());
    if (none) return gpt2__fail(err, GPT2_ERROR_BAD_GRAMMAR, "json schema: no value matches the schema (false, or its constraints contradict each other)");
    /* $ref targets, each written once, as they were met */
    for (size_t i = 0; i < cv.pending.size(); i++) {
        const gpt2__string pointer = cv.pending[i].first;
        const gpt2__json* target = cv.pending[i].second;
        gpt2__string rule;
        for (const auto& r : cv.refs)
            if (r.first == pointer) rule = r.second;
        gpt2__string e;
        bool target_none = false;
        GPT2__TRY(gpt2__schema_expr(&cv, *target, pointer, &e, &target_none, 0));
        if (target_none)
            return gpt2__fail(err, GPT2_ERROR_BAD_GRAMMAR, "json schema: %s: no value matches this $ref's target (false, or its constraints contradict each other)",
                              pointer.empty() ? "(root)" : pointer.c_str());
        cv.rules += rule + " ::= " + e + "\n";
    }
    char ws[64];
    std::snprintf(ws, sizeof ws, "ws ::= [ \\t\\n\\r]{0,%u}\n", (unsigned)max_ws);
    gbnf->clear();
    *gbnf += "root ::= " + gpt2__string(compact ? "" : "ws ") + top + "\n"; /* ends at the value: whitespace after it would only delay the end */
    *gbnf += cv.rules;
    if (!compact) *gbnf += ws;
    const char* w = compact ? "" : " ws ";
    const bool value = cv.used_value;
    if (cv.used_string || value) *gbnf += "string ::= \"\\\"\" ( [^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4}) )* \"\\\"\"\n";
    if (cv.used_number || value) *gbnf += "number ::= \"-\"? (\"0\" | [1-9] [0-9]*) (\".\" [0-9]+)? ([eE] [-+]? [0-9]+)?\n";
    if (cv.used_integer) *gbnf += "integer ::= \"-\"? (\"0\" | [1-9] [0-9]*)\n";
    /* a character of a length-bounded string: a code point, so an escaped surrogate pair is one */
    if (cv.used_char) {
        *gbnf += "char ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" ([0-9a-cA-Ce-fE-F] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2}) | \"u\" [dD] [89abAB] [0-9a-fA-F]{2} \"\\\\u\" [dD] [c-fC-F] [0-9a-fA-F]{2})\n";
        *gbnf += "keychar ::= [^\"\\\\\\x00-\\x1F]\n";
    }
    gpt2__schema_format_helpers(cv.used_formats, gbnf);
    if (value) {
        *gbnf += gpt2__string("value ::= \"null\" | \"true\" | \"false\" | number | string | \"[\"") + w + "(value" + w + "(\",\"" + w + "value" + w + ")*)? \"]\" | \"{\"" + w +
                 "(string" + w + "\":\"" + w + "value" + w + "(\",\"" + w + "string" + w + "\":\"" + w + "value" + w + ")*)? \"}\"\n";
    }
    return GPT2_OK;
}

/* ---- src/backend.h ---- */
/* The backend table: what a device must do for the C API. One table per device (the CPU's in
   src/cpu/backend_cpu.h, CUDA's in src/cuda/backend_cuda.cuh); a model picks its table once,
   when it loads, and every session of the model goes through it. A new backend is a new file
   that fills a table and registers it (gpt2__register_backend). */

struct gpt2__backend {
    const char* name;
    /* Loading done: give the device its copy of the weights (model->device_weights). */
    gpt2_result (*model_attach)(gpt2_model* m, gpt2_error* err);
    void (*model_release)(gpt2_model* m);
    /* A session of the backend's own type; its shared part filled by gpt2__session_init. */
    gpt2_result (*session_create)(const gpt2_model* m, const gpt2_session_params& p, gpt2_session** out, gpt2_error* err);
    void (*session_free)(gpt2_session* s);
    /* Runs tokens[n_cached..) at positions n_cached.. (the cache holds the positions before);
       afterwards logits() gives the prediction after the last token. Polls
       gpt2__abort_requested between layers; an aborted run returns GPT2_ERROR_ABORTED with the
       logits unchanged. */
    gpt2_result (*run)(gpt2_session* s, gpt2_error* err);
    /* The n_vocab logits after the last run, in host memory; NULL when the device failed. */
    const float* (*logits)(gpt2_session* s);
    /* Draws the next token from the last run's logits with the session's RNG. */
    gpt2_result (*sample)(gpt2_session* s, float temperature, int top_k, int32_t* token, gpt2_error* err);
    /* After a run over exactly tokens[0..n): the sum of log p(tokens[t] | tokens[..t]), t = 1..n-1. */
    gpt2_result (*window_logprob)(gpt2_session* s, const int32_t* tokens, size_t n, double* sum, gpt2_error* err);
    /* The KV cache rows [0, n) of every layer to host memory, packed: the keys (n_layer, n,
       n_embd), then the values likewise; f16 when kv_f16, else f32. */
    gpt2_result (*save_cache)(gpt2_session* s, int n, void* rows, gpt2_error* err);
    /* The reverse: rows [0, n) from host memory (n may be 0), and the logits when not NULL. */
    gpt2_result (*load_cache)(gpt2_session* s, int n, const void* rows, const float* logits, gpt2_error* err);
    /* Optional (NULL: gpt2_batch_eval runs the sessions one after another through run): run for
       every session of sessions[0..n), distinct sessions of one model, in one pass over the
       weights, on the device resources (threads, scratch) of `runner`, a session of the same
       model that need not be among them (a generation of one session is a batch of the runner
       alone). Polls runner's abort_fn between layers; an aborted pass returns
       GPT2_ERROR_ABORTED with every session's logits unchanged. */
    gpt2_result (*run_batch)(gpt2_session* runner, gpt2_session* const* sessions, size_t n, gpt2_error* err);
    /* Optional (NULL: sample for each session in turn): sample, as sample does, for every session
       of sessions[0..n) (distinct, one model) with temperature[i] and top_k[i] into tokens[i], on
       the device resources of `runner`. */
    gpt2_result (*sample_batch)(gpt2_session* runner, gpt2_session* const* sessions, size_t n, const float* temperature, const int* top_k, int32_t* tokens,
                                gpt2_error* err);
    /* Optional (NULL: a pass always runs whole): with budget_us > 0, runner's next run_batch runs
       on the calling thread and returns GPT2__PAUSED once about budget_us microseconds are spent,
       the sessions' logits unchanged; the next run_batch on the same sessions (nothing else run
       on runner between) goes on where it stopped, with the budget then set (0: on runner's
       threads, to the end). The results are the same bits as an unpaused pass's. */
    void (*set_budget)(gpt2_session* runner, int64_t budget_us);
    /* Optional (NULL: the host's chain draws from logits()): draws the next token from the last
       run's logits as gpt2__chain_filter then gpt2__chain_draw would for a chain of temperature,
       top_k, top_p (0 or >= 1: off) and `allowed` (the grammar's mask, a bit per token, or
       NULL) alone, with the session's RNG. Returns GPT2__NOT_HANDLED, the RNG untouched, where
       it cannot for these parameters. */
    gpt2_result (*sample_chain)(gpt2_session* s, float temperature, int top_k, float top_p, const uint32_t* allowed, int32_t* token, gpt2_error* err);
    /* Optional (NULL: gpt2_session_copy goes through save_cache and load_cache): dst's KV cache
       rows [0, n) and logits become src's (a session of the same model and cache type, n at most
       its cached rows), sharing src's memory where the device can (the CPU's blocks, copy on
       write); dst's other rows are gone. Out of memory, dst is unchanged. */
    gpt2_result (*share_cache)(gpt2_session* dst, gpt2_session* src, int n, gpt2_error* err);
};

/* run_batch's answer when its budget was spent before the pass's end (set_budget), and
   sample_chain's for parameters it leaves to the host: not errors, never returned by the C API.
   Values no code of the C API has, inside the enum's range (GPT2__RESULT_RANGE makes it every
   non-negative int32; a negative value would be undefined behaviour, which UBSan's
   -fsanitize=enum reports). */
static const gpt2_result GPT2__PAUSED = (gpt2_result)1000;
static const gpt2_result GPT2__NOT_HANDLED = (gpt2_result)1001;
static_assert(GPT2_ERROR_BAD_STATE < 1000, "the internal answers above must stay apart from the C API's codes");

enum { GPT2__MAX_DEVICES = 8 };

static const gpt2__backend* gpt2__cpu_backend(); /* src/cpu/backend_cpu.h */

/* The table of each device this program was built with; NULL for the others. The CPU's is
   always there; others register themselves (a function-local table, so a model loaded from
   any static initialiser still finds the CPU). */
static const gpt2__backend*& gpt2__device_backend(gpt2_device device) {
    static const gpt2__backend* tables[GPT2__MAX_DEVICES] = {gpt2__cpu_backend()};
    static const gpt2__backend* none;
    if ((unsigned)device >= GPT2__MAX_DEVICES) return none = nullptr;
    return tables[(unsigned)device];
}

/* Called from a backend file's static initialiser: the table serves `device` from then on. */
[[maybe_unused]] static bool gpt2__register_backend(gpt2_device device, const gpt2__backend* table) {
    gpt2__device_backend(device) = table;
    return true;
}

/* Lets go of one reference to m (gpt2_model_free's, a session's, a grammar's); the last one
   releases the backend's copy of the weights and frees the model. */
static void gpt2__model_unref(const gpt2_model* model) {
    gpt2_model* m = const_cast<gpt2_model*>(model);
    if (m->n_refs.fetch_sub(1) != 1) return;
    m->backend->model_release(m);
    gpt2__model_destroy(m);
}

/* ---- src/session.h ---- */
/* The session: one conversation. This part is what every backend shares (the tokens in context,
   the RNG, the UTF-8 stream of the text being delivered); a backend's own session type derives
   from it and adds its KV cache and scratch (gpt2__cpu_session, gpt2__cuda_session). */

struct gpt2_session {
    const gpt2_model* model = nullptr; /* held (gpt2_model::n_refs) until the session is freed */
    const gpt2__backend* backend = nullptr;
    gpt2__tag tag{GPT2__TAG_SESSION}; /* GPT2__TAG_FREED once freed (src/common.h) */
    int n_ctx = 0;
    bool kv_f16 = false;
    gpt2__vector<int32_t> tokens; /* the context window: at most n_ctx ids */
    int n_cached = 0;             /* tokens[0..n_cached) have their keys and values in the cache */
    bool has_logits = false;
    uint64_t rng_state = 0;
    gpt2__utf8_stream stream;
    gpt2__string text;            /* the text of the token being delivered to the callback */
    gpt2_context_policy context_policy = GPT2_CONTEXT_EXACT;
    int n_keep = 0, n_discard = 0; /* GPT2_CONTEXT_DISCARD's: n_discard already resolved */
    int (*abort_fn)(void* user) = nullptr;
    void* abort_user = nullptr;
    int first_written_row = 0;    /* the lowest cache row a pass wrote since gpt2__checkpoint_take */
    std::atomic<std::thread::id> user{}; /* the thread of the call using the session (gpt2__session_use); none when idle */
};

/* One call at a time on a session: the C API's functions hold a gpt2__session_use for as long
   as they run. A second call finds it taken and fails with GPT2_ERROR_BUSY, changing nothing,
   whether it comes from another thread or from a callback of the first call that would change
   the session; a callback may still read its session (`read_only`: the logits, a save). */
/* Takes s for the calling thread; false when a call holds it, *holder then its thread. */
static bool gpt2__session_take(gpt2_session* s, std::thread::id* holder) {
    *holder = std::thread::id();
    return s->user.compare_exchange_strong(*holder, std::this_thread::get_id());
}
static void gpt2__session_release(gpt2_session* s) { s->user.store(std::thread::id()); }

class gpt2__session_use {
  public:
    gpt2__session_use(const gpt2_session* s, bool read_only) : s_(const_cast<gpt2_session*>(s)) {
        std::thread::id holder;
        held_ = gpt2__session_take(s_, &holder);
        allowed_ = held_ || (read_only && holder == std::this_thread::get_id());
    }
    ~gpt2__session_use() {
        if (held_) gpt2__session_release(s_);
    }
    gpt2__session_use(const gpt2__session_use&) = delete;
    gpt2__session_use& operator=(const gpt2__session_use&) = delete;
    bool allowed() const { return allowed_; }

  private:
    gpt2_session* s_;
    bool held_ = false, allowed_ = false;
};

static gpt2_result gpt2__busy(gpt2_error* err, const char* which) {
    return gpt2__fail(err, GPT2_ERROR_BUSY, "%s is in use by another call (one call at a time on a session: wait for it, or give each thread its own session); nothing changed", which);
}

/* Holds session s for the rest of the calling C API function (gpt2__session_use), or returns
   GPT2_ERROR_BUSY through err. */
#define GPT2__USE_SESSION(s, read_only, err)            \
    gpt2__session_use gpt2__use((s), (read_only));      \
    if (!gpt2__use.allowed()) return gpt2__busy((err), "the session")

/* gpt2__session_use for every session of a batch: all of them taken, or none (the first in use
   named in the error). Released when it goes. */
struct gpt2__batch_use {
    gpt2__vector<gpt2_session*> held;
    ~gpt2__batch_use() {
        for (gpt2_session* s : held) gpt2__session_release(s);
    }
};

static gpt2_result gpt2__use_batch(gpt2_session* const* sessions, size_t n, gpt2__batch_use* use, gpt2_error* err) {
    use->held.reserve(n);
    for (size_t i = 0; i < n; i++) {
        std::thread::id holder;
        if (!gpt2__session_take(sessions[i], &holder)) {
            char which[48];
            std::snprintf(which, sizeof which, "sessions[%zu]", i);
            return gpt2__busy(err, which);
        }
        use->held.push_back(sessions[i]);
    }
    return GPT2_OK;
}

/* True when the caller's abort_fn asks to stop; backends poll it between layers. */
static bool gpt2__abort_requested(const gpt2_session* s) { return s->abort_fn && s->abort_fn(s->abort_user) != 0; }

static gpt2_result gpt2__aborted(gpt2_error* err) { return gpt2__fail(err, GPT2_ERROR_ABORTED, "aborted by abort_fn; the session is as it was before the call"); }

/* A backend's new session of its type S, the shared part filled; NULL when out of memory. */
template <class S>
static S* gpt2__session_new(const gpt2_model* m, const gpt2_session_params& p) {
    void* memory = GPT2_MALLOC(sizeof(S));
    if (!memory) return nullptr;
    S* s = new (memory) S();
    s->model = m;
    s->backend = m->backend;
    m->n_refs++;
    s->n_ctx = p.n_ctx ? p.n_ctx : m->n_ctx;
    s->kv_f16 = p.kv_f16 != 0;
    s->context_policy = p.context_policy;
    s->n_keep = p.n_keep;
    s->n_discard = p.n_discard ? p.n_discard : std::max(1, (s->n_ctx - p.n_keep) / 2);
    s->abort_fn = p.abort_fn;
    s->abort_user = p.abort_user;
    s->tokens.reserve((size_t)s->n_ctx);
    return s;
}

/* Ends a session made by gpt2__session_new, once its backend has released what it holds. */
template <class S>
static void gpt2__session_delete(S* s) {
    const gpt2_model* m = s->model;
    s->tag = GPT2__TAG_FREED;
    s->~S();
    GPT2_FREE(s);
    gpt2__model_unref(m);
}

/* The checks every call on a session starts with: not NULL, not freed, its model not freed
   (src/common.h's tags); `what` names the argument ("session", "dst", "sessions[2]"). */
static gpt2_result gpt2__check_session(const gpt2_session* s, const char* what, gpt2_error* err) {
    GPT2__TRY(gpt2__check_tag(s, GPT2__TAG_SESSION, what, "gpt2_session_create", "gpt2_session_free", err));
    return gpt2__check_model_of(s->model, what, err);
}

static gpt2_result gpt2__check_tokens(const gpt2_model* m, const int32_t* ids, size_t n, gpt2_error* err) {
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= m->n_vocab)
            return gpt2__fail(err, GPT2_ERROR_BAD_TOKEN, "token %zu is %d, outside the vocabulary [0, %d)", i, (int)ids[i], m->n_vocab);
    return GPT2_OK;
}

/* Makes room for n more tokens when the context would overflow (n fits: gpt2__crop_overlong).
   GPT2_CONTEXT_EXACT keeps the last n_ctx - n tokens, as nanoGPT's generate() crops its input
   (every position moves: the whole window is recomputed); GPT2_CONTEXT_DISCARD drops at least
   n_discard tokens after the first n_keep (whose cache rows stay valid). */
static void gpt2__make_room(gpt2_session* s, size_t n) {
    const size_t total = s->tokens.size() + n, ctx = (size_t)s->n_ctx;
    if (total <= ctx) return;
    const size_t needed = total - ctx;
    if (s->context_policy == GPT2_CONTEXT_EXACT) {
        s->tokens.erase(s->tokens.begin(), s->tokens.begin() + (ptrdiff_t)needed);
        s->n_cached = 0;
        return;
    }
    const size_t keep = std::min((size_t)s->n_keep, s->tokens.size());
    const size_t drop = std::min(s->tokens.size() - keep, std::max(needed, (size_t)s->n_discard));
    s->tokens.erase(s->tokens.begin() + (ptrdiff_t)keep, s->tokens.begin() + (ptrdiff_t)(keep + drop));
    s->n_cached = std::min(s->n_cached, (int)keep);
}

/* More new tokens than the context can take beside what the policy keeps (a prompt longer than
   the context) are cropped as the policy crops a context, so the window after the call is what
   it keeps of the old tokens and the new: GPT2_CONTEXT_EXACT the last n_ctx (nanoGPT's generate()
   crops its input to the last block_size tokens), GPT2_CONTEXT_DISCARD the first n_keep and the
   last that fill the rest. *ids and *n become the new tokens that stay (in `kept` where they are
   not one run of the given ones), and the old tokens past the kept ones go. */
static void gpt2__crop_overlong(gpt2_session* s, const int32_t** ids, size_t* n, gpt2__vector<int32_t>* kept) {
    const size_t ctx = (size_t)s->n_ctx;
    if (s->context_policy == GPT2_CONTEXT_EXACT) {
        if (*n <= ctx) return;
        gpt2__log(s->model->params, GPT2_LOG_WARNING, "%zu new tokens are more than the context holds (n_ctx %zu): the first %zu of them were dropped", *n, ctx, *n - ctx);
        *ids += *n - ctx;
        *n = ctx; /* gpt2__make_room then drops every old token */
        return;
    }
    const size_t keep_old = std::min((size_t)s->n_keep, s->tokens.size());
    if (keep_old + *n <= ctx) return;
    const size_t head = std::min(*n, (size_t)s->n_keep - keep_old); /* new tokens among the first n_keep */
    const size_t tail = ctx - keep_old - head;
    gpt2__log(s->model->params, GPT2_LOG_WARNING, "%zu new tokens are more than the context holds beside the %zu it keeps (n_ctx %zu, n_keep %d): %zu of them were dropped", *n,
              keep_old, ctx, s->n_keep, *n - head - tail);
    kept->assign(*ids, *ids + head);
    kept->insert(kept->end(), *ids + *n - tail, *ids + *n);
    s->tokens.resize(keep_old);
    s->n_cached = std::min(s->n_cached, (int)keep_old);
    *ids = kept->data();
    *n = kept->size();
}

/* What appending tokens changed, kept to undo it when the pass is aborted. */
struct gpt2__append_undo {
    gpt2__vector<int32_t> tokens; /* the context before, only when making room dropped some and an abort may need them */
    size_t n_tokens = 0;          /* else its length: the new tokens are cut off again */
    int n_cached = 0, first_row = 0; /* n_cached before, and the first cache row the pass writes */
};

/* Makes room for n tokens (gpt2__make_room) and appends them, so that tokens[n_cached..) is what
   the pass runs; *undo keeps what an aborted pass needs put back (`abortable`: an abort_fn will
   be polled). */
static void gpt2__append_begin(gpt2_session* s, const int32_t* ids, size_t n, bool abortable, gpt2__append_undo* undo) {
    if (abortable && s->tokens.size() + n > (size_t)s->n_ctx) undo->tokens = s->tokens;
    undo->n_tokens = s->tokens.size();
    undo->n_cached = s->n_cached;
    gpt2__vector<int32_t> kept;
    gpt2__crop_overlong(s, &ids, &n, &kept);
    gpt2__make_room(s, n);
    s->tokens.insert(s->tokens.end(), ids, ids + n);
    undo->first_row = s->n_cached;
    s->first_written_row = std::min(s->first_written_row, s->n_cached);
}

/* The pass's result on the session: aborted, the tokens as they were (the cache rows it wrote are
   no longer counted); failed otherwise, an empty context (a device may hold part of a pass); done,
   every token cached and the logits valid. */
static void gpt2__append_end(gpt2_session* s, gpt2_result res, gpt2__append_undo* undo) {
    if (res == GPT2_ERROR_ABORTED) {
        if (undo->tokens.empty()) s->tokens.resize(undo->n_tokens);
        else s->tokens.swap(undo->tokens);
        s->n_cached = std::min(undo->n_cached, undo->first_row);
    } else if (res != GPT2_OK) {
        s->tokens.clear();
        s->n_cached = 0;
        s->has_logits = false;
    } else {
        s->n_cached = (int)s->tokens.size();
        s->has_logits = true;
    }
}

/* Appends tokens to the context window (any number: gpt2__crop_overlong) and runs the model over
   what the cache lacks, with gpt2__append_begin and gpt2__append_end. */
static gpt2_result gpt2__session_append(gpt2_session* s, const int32_t* ids, size_t n, gpt2_error* err) {
    GPT2__TRY(gpt2__check_tokens(s->model, ids, n, err));
    if (n == 0) return GPT2_OK;
    gpt2__append_undo undo;
    gpt2__append_begin(s, ids, n, s->abort_fn != nullptr, &undo);
    const gpt2_result res = s->backend->run(s, err);
    gpt2__append_end(s, res, &undo);
    return res;
}

/* Puts "sessions[i]: " before the message of a failure about one session of a batch. */
static gpt2_result gpt2__in_batch(gpt2_result res, size_t i, gpt2_error* err) {
    if (res != GPT2_OK && err) {
        char prefix[48];
        std::snprintf(prefix, sizeof prefix, "sessions[%zu]: ", i);
        const gpt2__string message = gpt2__string(prefix) + err->message;
        std::snprintf(err->message, sizeof err->message, "%s", message.c_str());
    }
    return res;
}

/* gpt2__batch_append's three parts, apart for the stage, whose pass may pause (set_budget) and
   go on at a later call: the tokens appended (`undo` as gpt2__append_begin keeps it, per
   session), the pass run, and its result on the sessions. */
static void gpt2__batch_append_begin(gpt2_session* runner, gpt2_session* const* sessions, const int32_t* const* ids, const size_t* n, size_t n_sessions,
                                     gpt2__vector<gpt2__append_undo>* undo) {
    undo->assign(n_sessions, gpt2__append_undo());
    for (size_t i = 0; i < n_sessions; i++) gpt2__append_begin(sessions[i], ids[i], n[i], runner->abort_fn != nullptr, &(*undo)[i]);
}

/* The pass: the backend's run_batch, or where it has none, the sessions one after another through
   run, with runner's abort_fn (an aborted one puts back the logits the runs before replaced). */
static gpt2_result gpt2__batch_run(gpt2_session* runner, gpt2_session* const* sessions, size_t n_sessions, gpt2_error* err) {
    if (runner->backend->run_batch) return runner->backend->run_batch(runner, sessions, n_sessions, err);
    const bool abortable = runner->abort_fn != nullptr;
    gpt2_result res = GPT2_OK;
    size_t ran = 0;
    gpt2__vector<gpt2__vector<float>> replaced(n_sessions); /* the logits a finished run replaced */
    for (; ran < n_sessions && res == GPT2_OK; ran++) {
        gpt2_session* s = sessions[ran];
        if (abortable && s->has_logits && ran + 1 < n_sessions) { /* kept only where a later session's abort needs them */
            const float* logits = s->backend->logits(s);
            if (logits) replaced[ran].assign(logits, logits + s->model->n_vocab);
        }
        int (*abort_fn)(void*) = s->abort_fn;
        void* abort_user = s->abort_user;
        s->abort_fn = runner->abort_fn;
        s->abort_user = runner->abort_user;
        res = s->backend->run(s, err);
        s->abort_fn = abort_fn;
        s->abort_user = abort_user;
    }
    if (res == GPT2_ERROR_ABORTED)
        for (size_t i = 0; i + 1 < ran; i++)
            if (!replaced[i].empty()) sessions[i]->backend->load_cache(sessions[i], 0, nullptr, replaced[i].data(), nullptr);
    return res;
}

static void gpt2__batch_append_end(gpt2_session* const* sessions, size_t n_sessions, gpt2_result res, gpt2__vector<gpt2__append_undo>* undo) {
    for (size_t i = 0; i < n_sessions; i++) gpt2__append_end(sessions[i], res, &(*undo)[i]);
}

/* gpt2__session_append for several sessions at once (gpt2_batch_eval; the caller has checked
   the sessions and the tokens): each makes room under its own context policy, then one pass
   through the backend's run_batch on runner's threads, or, where it has none, the sessions one
   after another through run (the same results, slower); runner's abort_fn is polled either
   way. An aborted pass leaves every session as it was; a pass that fails otherwise leaves every
   context empty. */
static gpt2_result gpt2__batch_append(gpt2_session* runner, gpt2_session* const* sessions, const int32_t* const* ids, const size_t* n, size_t n_sessions, gpt2_error* err) {
    gpt2__vector<gpt2__append_undo> undo;
    gpt2__batch_append_begin(runner, sessions, ids, n, n_sessions, &undo);
    const gpt2_result res = gpt2__batch_run(runner, sessions, n_sessions, err);
    gpt2__batch_append_end(sessions, n_sessions, res, &undo);
    return res;
}

/* What gpt2_generate needs to undo itself when aborted: the context, the logits, the streams. */
struct gpt2__checkpoint {
    gpt2__vector<int32_t> tokens;
    gpt2__vector<float> logits;
    int n_cached = 0;
    bool has_logits = false;
    uint64_t rng_state = 0;
    gpt2__utf8_stream stream;
};

static gpt2_result gpt2__checkpoint_take(gpt2_session* s, gpt2__checkpoint* c, gpt2_error* err) {
    c->tokens = s->tokens;
    c->n_cached = s->n_cached;
    c->has_logits = s->has_logits;
    c->rng_state = s->rng_state;
    c->stream = s->stream;
    s->first_written_row = s->n_ctx;
    if (!s->has_logits) return GPT2_OK;
    const float* logits = s->backend->logits(s);
    if (!logits) return gpt2__fail(err, GPT2_ERROR_DEVICE, "the %s backend could not return the logits", s->backend->name);
    c->logits.assign(logits, logits + s->model->n_vocab);
    return GPT2_OK;
}

/* Puts the checkpoint back; the cache rows written since stay uncounted. Returns ABORTED. */
static gpt2_result gpt2__checkpoint_restore(gpt2_session* s, gpt2__checkpoint* c, gpt2_error* err) {
    if (c->has_logits) GPT2__TRY(s->backend->load_cache(s, 0, nullptr, c->logits.data(), err));
    s->tokens.swap(c->tokens);
    s->n_cached = std::min(c->n_cached, s->first_written_row);
    s->has_logits = c->has_logits;
    s->rng_state = c->rng_state;
    s->stream = c->stream;
    return gpt2__aborted(err);
}

/* The checkpoints of a call on sessions[0..n) (a generation: one session, or a batch run by
   sessions[0]), taken where sessions[0]'s abort_fn may stop it. */
static gpt2_result gpt2__checkpoints_take(gpt2_session* const* sessions, size_t n, gpt2__vector<gpt2__checkpoint>* before, gpt2_error* err) {
    if (!sessions[0]->abort_fn) return GPT2_OK;
    before->resize(n);
    for (size_t i = 0; i < n; i++) GPT2__TRY(gpt2__checkpoint_take(sessions[i], &(*before)[i], err));
    return GPT2_OK;
}

/* The call's result res; where it was aborted, every session restored from its checkpoint first. */
static gpt2_result gpt2__undo_if_aborted(gpt2_result res, gpt2_session* const* sessions, size_t n, gpt2__vector<gpt2__checkpoint>* before, gpt2_error* err) {
    if (res != GPT2_ERROR_ABORTED) return res;
    for (size_t i = 0; i < n; i++) {
        const gpt2_result restored = gpt2__checkpoint_restore(sessions[i], &(*before)[i], err);
        if (restored != GPT2_ERROR_ABORTED) return restored;
    }
    return GPT2_ERROR_ABORTED;
}

/* ---- src/state.h ---- */
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

/* ---- src/cpu/kernels/contract.h ---- */
/* The kernel contract: what every kernel set (scalar.h, avx2.h, avx512.h, avx512_bf16.h, neon.h)
   shares and what the forward pass may rely on. A set is a table of the functions below
   (gpt2__kernels) that gives the scalar set's results, to rounding (bit for bit where a comment
   says so; avx512_bf16.h rounds a bf16 prompt's activations to bf16 first); dispatch.h picks one
   per process. Adding a set: write its functions, fill one table, list it in dispatch.h. */

/* Fully unrolled loops over accumulators keep them in registers. */
#if defined(__CUDACC__) /* nvcc's front end rejects "GCC unroll" in host code */
#define GPT2__UNROLL
#elif defined(__clang__)
#define GPT2__UNROLL _Pragma("unroll")
#elif defined(__GNUC__)
#define GPT2__UNROLL _Pragma("GCC unroll 16")
#else
#define GPT2__UNROLL
#endif

/* ---- Decode and prefill ---------------------------------------------------------------- */

/* A pass over T new tokens is decode when T <= gpt2__decode_max_tokens, else prefill; this is the
   one place that says so. Decode reads every weight for a handful of tokens, so memory is the
   limit: matmuls stream W row by row in its own type, attention takes all heads of one query at
   once over ranges of its keys, layer norms run on the calling thread. Prefill has arithmetic to
   spare: the x86 sets' matmuls multiply float panels of W with tiles of tokens, attention takes
   blocks of gpt2__query_block queries head by head. */
static const int gpt2__decode_max_tokens = 3;
static inline bool gpt2__is_decode(int T) { return T <= gpt2__decode_max_tokens; }

/* Weights in blocks of 32 integers with one f16 scale each (q8_0, q4_0) meet int8 activations in
   blocks of the same 32 (gpt2__quantize_q8): a block's dot product is an exact integer sum. */
static inline bool gpt2__int8_weights(uint32_t weight_type) { return weight_type == GPT2_TYPE_Q8_0 || weight_type == GPT2_TYPE_Q4_0; }

/* A q8_0 or q4_0 matmul over a single token first quantizes its activations to int8
   (gpt2__matmul_args.xq) for integer dot products; the session holds one quantized row. With 2 or
   3 tokens, such rows take the prefill path. */
static inline bool gpt2__int8_activations(int T, uint32_t weight_type) { return gpt2__int8_weights(weight_type) && T == 1; }

/* ---- Matrix products ------------------------------------------------------------------- */

/* A q8_0 block as GGUF lays it out: one f16 scale, then gpt2__q8_block_values signed bytes;
   value = scale * q. Activations quantized for q8_0 weights (gpt2__quantize_q8) come in blocks
   of the same length, with a float scale each. */
struct gpt2__block_q8_0 {
    uint16_t scale;
    int8_t q[gpt2__q8_block_values];
};
static_assert(sizeof(gpt2__block_q8_0) == gpt2__q8_block_bytes, "q8_0 blocks are 34 bytes");

/* The f16 bits of the scale of the q8_0 block at `block`, and its quantized values. */
static inline uint16_t gpt2__q8_scale_f16(const uint8_t* block) {
    uint16_t h;
    std::memcpy(&h, block, 2);
    return h;
}
static inline const int8_t* gpt2__q8_values(const uint8_t* block) { return (const int8_t*)(block + 2); }

/* A q4_0 block as GGUF (ggml's block_q4_0) lays it out: one f16 scale d, then 16 bytes; byte j
   holds value j in its low nibble and value j + 16 in its high one; value = d * (nibble - 8).
   Its scale is read with gpt2__q8_scale_f16, as both blocks start with it. */
struct gpt2__block_q4_0 {
    uint16_t scale;
    uint8_t q[gpt2__q4_block_values / 2];
};
static_assert(sizeof(gpt2__block_q4_0) == gpt2__q4_block_bytes, "q4_0 blocks are 18 bytes");
static inline const uint8_t* gpt2__q4_nibbles(const uint8_t* block) { return block + 2; }
/* Int8 panels: a set that has them (gpt2__kernels.quantize_q8_packed) multiplies q8_0 and q4_0
   weights with many rows of int8 activations in integer dot products, the products of a whole
   block adding up in one 32-bit lane before they meet their scales. It packs up to
   gpt2__panel_rows rows of W at a time into its panel scratch, gpt2__q8_panel_row_block_bytes
   per row and block, and the activation rows with quantize_q8_packed, gpt2__q8_packed_row_bytes
   each: the values, a float scale and an int32 per block. The layouts are the set's own. */
static const int gpt2__panel_rows = 32;
static const size_t gpt2__q8_panel_row_block_bytes = gpt2__q8_block_bytes; /* a row's 32 values and its f16 scale, packed */

/* Lanes: a set with int8 panels may also have pack_lanes, which packs a whole q8_0, q4_0, f16 or
   bf16 matrix into its panels' layout once, when the model loads (the CPU backend keeps the copy:
   gpt2__weight.lanes). Every product of that matrix, a single token's included, then multiplies
   the lanes in place (int8 activations for q8_0 and q4_0, x as it is for f16 and bf16, or x
   rounded to bf16 for a bf16 prompt on the bf16 unit): no packing per product, and the same bytes
   per weight as the file (gpt2__lanes_bytes: the rows rounded up to gpt2__panel_rows, bf16's
   columns to an even count). Lanes are made only by the
   process's own set (gpt2__cpu_kernels), and every set with pack_lanes shares its layout. */
static const int gpt2__lane_rows = 16;
/* Whether pack_lanes takes matrices of this type: q8_0, q4_0, and the 16-bit floats f16 and bf16
   (whose lanes hold their values column by column, or bf16's by pairs of columns). */
static constexpr bool gpt2__float16_lanes(uint32_t type) { return type == GPT2_TYPE_F16 || type == GPT2_TYPE_BF16; }
static inline bool gpt2__lanes_type(uint32_t type) { return gpt2__int8_weights(type) || gpt2__float16_lanes(type); }
/* Columns of a 16-bit matrix's lanes: bf16's go in pairs, an odd count padded with a zero. */
static inline int64_t gpt2__lanes_columns(const gpt2__weight& W) { return W.type == GPT2_TYPE_BF16 ? (W.cols + 1) / 2 * 2 : W.cols; }
static inline size_t gpt2__lanes_bytes(const gpt2__weight& W) {
    const size_t rows = (size_t)(W.rows + gpt2__panel_rows - 1) / gpt2__panel_rows * gpt2__panel_rows;
    if (gpt2__float16_lanes(W.type)) return rows * (size_t)gpt2__lanes_columns(W) * 2;
    const size_t block_bytes = W.type == GPT2_TYPE_Q4_0 ? gpt2__q4_block_bytes : gpt2__q8_block_bytes;
    return rows * (size_t)(W.cols / gpt2__q8_block_values) * block_bytes;
}
/* Bytes of one activation row of `cols` values packed by quantize_q8_packed. */
static inline size_t gpt2__q8_packed_row_bytes(int64_t cols) { return (size_t)cols + (size_t)cols / gpt2__q8_block_values * 8; }

/* How one product multiplies. gpt2__strategy_for (forward.h) chooses it, once per product, from
   W's type, the rows and what the kernel set has; a set reads it and infers nothing. A set that
   lacks a strategy is never handed it (its kernel in gpt2__kernels.matmul is NULL). */
enum gpt2__strategy : uint8_t {
    GPT2__STREAM_ROWS,   /* decode: W read row by row in its own type, each row's dot products with every token of x */
    GPT2__STREAM_INT8,   /* decode: q8_0 or q4_0 rows the same way against xq, the tokens quantized per block (integer dot products) */
    GPT2__FLOAT_TILES,   /* prefill: W converted to floats a panel at a time, multiplied with tiles of tokens (x86; SIMD128, NEON and scalar widen a row at a time) */
    GPT2__INT8_PANELS,   /* q8_0 or q4_0 W in int8 panels (its lanes, or packed per product) times xq_packed, any number of tokens */
    GPT2__FLOAT16_LANES, /* f16 or bf16 W's lanes, in place, times x, any number of tokens */
    GPT2__BF16_UNIT,     /* bf16 W's lanes times x rounded to bf16 (x_bf16) on the bf16 unit: a prompt */
    GPT2__FLOAT16_PROMPT, /* f16 or bf16 W's lanes times a prompt's x: one sum per output, wider tiles */
    gpt2__strategies
};

/* The arguments of one matrix multiplication, y (T, W.rows) = x (T, W.cols) W^T + bias.
   A kernel computes the output columns [o_begin, o_end) of every token; the threads of a
   session split the rows of W between them. Every output is computed in the same order
   whichever range it falls in, so results never depend on the number of threads. */
struct gpt2__matmul_args {
    float* y;                  /* (T, W->rows) */
    const float* x;            /* (T, W->cols) */
    const int8_t* xq;          /* GPT2__STREAM_INT8: x quantized by gpt2__quantize_q8 */
    const float* xq_scale;     /*   and its blocks' scales */
    const gpt2__weight* W;
    const float* bias;         /* (W->rows) or NULL */
    int T;
    bool accumulate;           /* y += x W^T + bias (the residual connection) instead of y = */
    gpt2__strategy strategy = GPT2__STREAM_ROWS;
    const uint8_t* xq_packed = nullptr; /* GPT2__INT8_PANELS: x packed by the set's quantize_q8_packed */
    const uint16_t* x_bf16 = nullptr; /* GPT2__BF16_UNIT: x rounded to bf16, rows of gpt2__lanes_columns(*W) values */
    const float* x_tiles = nullptr;   /* GPT2__FLOAT16_LANES: x packed by the set's pack_tile_rows, where it packs them */
};

/* A batch's decode rows share panels, as a prompt's tokens do, once there are this many of them:
   each panel converted once serves them all, where streamed rows convert and re-read every
   weight row once per session (docs/PERFORMANCE.md, Kernel notes). Fewer stream W together, each weight row
   read from memory once for all of them and its dot products with every row those a lone
   session computes, so bit for bit the lone results. */
static const int gpt2__panel_min_rows = 4;

/* Prefill multiplies gpt2__tile_rows rows of W at a time (converted to a float panel unless f32)
   with tiles of a few tokens, whose products stay in registers, over chunks of about
   gpt2__chunk_tokens tokens. */
static const int gpt2__tile_rows = 4, gpt2__chunk_tokens = 64;

/* Floats of per-thread scratch a matmul kernel may use as its weight panel, for rows of `cols`:
   gpt2__tile_rows rows as floats, gpt2__panel_rows rows as an int8 panel, or a chunk of tokens
   rounded to bf16 (the bf16 unit's activations, avx512_bf16.h). */
static size_t gpt2__panel_floats(int64_t cols) {
    const size_t int8_panel = (size_t)cols / gpt2__q8_block_values * gpt2__q8_panel_row_block_bytes * gpt2__panel_rows / 4;
    return std::max({(size_t)cols * gpt2__tile_rows, int8_panel, (size_t)(cols + 1) * gpt2__chunk_tokens / 2});
}

/* ---- Attention --------------------------------------------------------------------------- */

/* Prefill attention (attend) takes up to gpt2__query_block queries of one head per call (the
   AVX-512 set a query per vector lane); its `scores` hold gpt2__query_scratch(n_keys + n_queries
   - 1) floats: a row per query, or a vector of the block's queries per key, rounded up to a
   multiple of 4 keys. */
static const int gpt2__query_block = 16;
static size_t gpt2__query_scratch(int n_keys) { return (size_t)gpt2__query_block * ((size_t)n_keys + 3); }

/* Decode attention (attend_rows) covers one range of a query's keys; gpt2__merge_attention joins
   up to gpt2__max_key_ranges of them. */
static const int gpt2__max_key_ranges = 4;

/* The KV cache is held in blocks of gpt2__kv_block_rows positions (src/cpu/kv_cache.h), and the
   attention kernels read one layer's keys or values through this view of them: the row of
   position j at blocks[j / gpt2__kv_block_rows] + offset + (j % gpt2__kv_block_rows) * stride
   values. A block's rows are contiguous, so the gpt2__kv_row_group rows from a multiple of it lie
   one after another: decode attention's ranges start at such a multiple (gpt2__key_range), and
   a kernel may address a group of 8 keys (or 4, or 2) from its first. 64 rows: decode at 1,000
   positions reads 16- and 32-row blocks ~4% slower (docs/PERFORMANCE.md). */
static const int gpt2__kv_block_rows = 64, gpt2__kv_row_group = 8;
static_assert(gpt2__kv_block_rows % gpt2__kv_row_group == 0, "a group of rows lies in one block");
template <class KV>
struct gpt2__kv_rows {
    const uint8_t* const* blocks;
    size_t offset; /* in values: the layer's keys or values within a block, and a head's within a row */
    size_t stride; /* values from a row to the next */
    const KV* row(int j) const {
        return (const KV*)blocks[(unsigned)j / gpt2__kv_block_rows] + offset + (size_t)((unsigned)j % gpt2__kv_block_rows) * stride;
    }
    gpt2__kv_rows at(size_t values) const { return {blocks, offset + values, stride}; } /* e.g. a head's */
};

/* The view of n_rows rows laid out one after another from `rows` (the kernels' tests and
   benchmarks): `table` receives a pointer per gpt2__kv_block_rows rows. */
template <class KV>
static gpt2__kv_rows<KV> gpt2__kv_rows_contiguous(const KV* rows, int n_rows, size_t stride, gpt2__vector<const uint8_t*>* table) {
    table->clear();
    for (int b = 0; b * gpt2__kv_block_rows < n_rows; b++) table->push_back((const uint8_t*)(rows + (size_t)b * gpt2__kv_block_rows * stride));
    return {table->data(), 0, stride};
}

/* ---- Constants of exp and GELU, one definition for every set ------------------------------ */

/* GELU, both of GPT-2's forms: 0.5 x (1 + erf(x / sqrt 2)), or the tanh form
   0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))). */
static constexpr float gpt2__sqrt_half = 0.7071067811865476f, gpt2__sqrt_2_over_pi = 0.7978845608028654f, gpt2__gelu_cubic = 0.044715f;

/* erf(z), z >= 0, as 1 - t P(t) e^(-z^2) with t = 1 / (1 + gpt2__erf_p z) (Abramowitz & Stegun
   7.1.26, absolute error < 1.5e-7); P's coefficients from the highest power down, P(0) = 0. */
static constexpr float gpt2__erf_p = 0.3275911f;
static constexpr float gpt2__erf_poly[5] = {1.061405429f, -1.453152027f, 1.421413741f, -0.284496736f, 0.254829592f};

/* e^x for x clamped to [gpt2__exp_min, gpt2__exp_max], to about 2 ulp (Cephes' expf): 2^n e^r
   with n = round(x log2 e) and r = x - n ln 2 (ln 2 in two parts, the first exact in float),
   e^r = 1 + r + r^2 P(r); P's coefficients from the highest power down. */
static constexpr float gpt2__exp_min = -87.3f, gpt2__exp_max = 88.3f, gpt2__log2e = 1.44269504088896341f;
static constexpr float gpt2__ln2_hi = 0.693359375f, gpt2__ln2_lo = -2.12194440e-4f;
static constexpr float gpt2__exp_poly[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f, 4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};

/* ---- The table a kernel set fills --------------------------------------------------------- */

/* Attention kernels for a KV cache of floats or f16 (uint16_t), each set's one template
   instantiated for both. */
template <class KV>
using gpt2__attend_fn = void (*)(float* out, size_t out_stride, const float* q, size_t q_stride, gpt2__kv_rows<KV> k, gpt2__kv_rows<KV> v, int n_keys, int n_queries, int head_dim, float* scores);
template <class KV>
using gpt2__attend_rows_fn = void (*)(float* out, float* stats, const float* q, gpt2__kv_rows<KV> k, gpt2__kv_rows<KV> v, int first, int n_keys, int n_head, int head_dim, float* scratch);

/* A matmul kernel: the output columns [o_begin, o_end) of a.y; `panel` holds
   gpt2__panel_floats(a.W->cols). */
typedef void (*gpt2__matmul_fn)(const gpt2__matmul_args& a, int64_t o_begin, int64_t o_end, float* panel);

struct gpt2__kernels {
    const char* name;
    /* the kernel of each strategy, in gpt2__strategy's order; NULL where the set lacks it. Every
       set streams rows; GPT2__INT8_PANELS comes with quantize_q8_packed, GPT2__FLOAT16_LANES
       with pack_lanes. */
    gpt2__matmul_fn matmul[gpt2__strategies];
    /* x (n, a multiple of gpt2__q8_block_values) to int8 blocks q and their scales, bit for bit
       as gpt2__quantize_q8_scalar */
    void (*quantize_q8)(int8_t* q, float* scale, const float* x, int64_t n);
    /* NULL, or `rows` rows of x (rows, cols) quantized as quantize_q8 does and packed for the
       set's int8 panels (gpt2__q8_packed_row_bytes each) */
    void (*quantize_q8_packed)(uint8_t* dst, const float* x, int rows, int64_t cols);
    /* prefill attention, as gpt2__attend_scalar */
    gpt2__attend_fn<float> attend_f32;
    gpt2__attend_fn<uint16_t> attend_f16;
    /* decode attention, as gpt2__attend_rows_scalar */
    gpt2__attend_rows_fn<float> attend_rows_f32;
    gpt2__attend_rows_fn<uint16_t> attend_rows_f16;
    /* GELU in place on n values */
    void (*gelu)(float* x, size_t n, bool tanh_form);
    /* nanoGPT's LayerNorm of n values, as gpt2__layer_norm */
    void (*layer_norm)(float* out, const float* x, const float* weight, const float* bias, int n, float eps);
    /* n floats to f16 bit for bit as gpt2__f32_to_f16 (the f16 KV cache's writes) */
    void (*to_f16)(uint16_t* dst, const float* x, size_t n);
    /* NULL, or W (gpt2__lanes_type) packed into its lanes at dst (gpt2__lanes_bytes(W), 64-byte aligned) */
    void (*pack_lanes)(uint8_t* dst, const gpt2__weight& W);
    /* NULL, or whether the set's kernel for a.strategy reads the activations of `a` packed
       (x_tiles; only GPT2__FLOAT16_LANES may), and if so they packed at dst (a.T x W->cols floats) */
    bool (*pack_tile_rows)(float* dst, const gpt2__matmul_args& a);
};

/* Whether a product of W on `kernels` multiplies W's lanes (made at load), for any number of rows. */
static inline bool gpt2__uses_lanes(const gpt2__kernels* kernels, const gpt2__weight& W) { return W.lanes && kernels->pack_lanes; }

/* ---- src/cpu/kernels/scalar.h ---- */
/* Portable kernels: small pure functions over pointers and sizes. They define the results the
   SIMD kernels must reproduce, and run wherever no SIMD kernel applies. */

/* Converts n 16-bit values (f16 or bf16, by `to_f32`) to float. */
static void gpt2__widen_row(const uint8_t* row, float* out, int64_t n, float (*to_f32)(uint16_t)) {
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        std::memcpy(&h, row + 2 * i, 2);
        out[i] = to_f32(h);
    }
}

/* Value i of a q8_0 or q4_0 block, before its scale: q8_0's byte, or q4_0's nibble - 8 (value j in
   byte j's low nibble, value j + 16 in its high one). */
static inline int gpt2__block_value(uint32_t type, const uint8_t* block, int i) {
    if (type == GPT2_TYPE_Q8_0) return gpt2__q8_values(block)[i];
    const uint8_t byte = gpt2__q4_nibbles(block)[i % (gpt2__q4_block_values / 2)];
    return (i < gpt2__q4_block_values / 2 ? byte & 15 : byte >> 4) - 8;
}

/* Converts one row of `n` values of any weight type to float. */
static void gpt2__dequantize_row(uint32_t type, const uint8_t* row, float* out, int64_t n) {
    switch (type) {
    case GPT2_TYPE_F32:
        std::memcpy(out, row, (size_t)n * 4);
        break;
    case GPT2_TYPE_F16:
        gpt2__widen_row(row, out, n, gpt2__f16_to_f32);
        break;
    case GPT2_TYPE_BF16:
        gpt2__widen_row(row, out, n, gpt2__bf16_to_f32);
        break;
    case GPT2_TYPE_Q8_0:
    case GPT2_TYPE_Q4_0: { /* both blocks: 32 values after one f16 scale */
        const size_t block_bytes = type == GPT2_TYPE_Q8_0 ? gpt2__q8_block_bytes : gpt2__q4_block_bytes;
        for (int64_t b = 0; b < n / gpt2__q8_block_values; b++) {
            const uint8_t* block = row + block_bytes * b;
            const float scale = gpt2__f16_to_f32(gpt2__q8_scale_f16(block));
            for (int i = 0; i < gpt2__q8_block_values; i++) out[gpt2__q8_block_values * b + i] = scale * (float)gpt2__block_value(type, block, i);
        }
        break;
    }
    default:
        GPT2_ASSERT(!"unknown weight type");
    }
}

/* Quantizes n values (n a multiple of gpt2__q8_block_values) to blocks of int8 with one float
   scale each, q = round(x * 127 / max|x|), the activation side of q8_0 x q8_0 dot products. Every
   kernel set quantizes with these same float operations, so the result is identical everywhere. */
static void gpt2__quantize_q8_scalar(int8_t* q, float* scale, const float* x, int64_t n) {
    const int B = gpt2__q8_block_values;
    for (int64_t b = 0; b < n / B; b++) {
        float amax = 0.0f;
        for (int i = 0; i < B; i++) amax = std::max(amax, std::fabs(x[B * b + i]));
        const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
        scale[b] = amax / 127.0f;
        for (int i = 0; i < B; i++) q[B * b + i] = (int8_t)std::nearbyint(x[B * b + i] * inv);
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
    case GPT2_TYPE_Q8_0:
    case GPT2_TYPE_Q4_0: {
        float buffer[256];
        for (int64_t start = 0; start < n; start += 256) {
            const int64_t len = std::min<int64_t>(256, n - start);
            const size_t offset = type == GPT2_TYPE_Q8_0   ? (size_t)start / gpt2__q8_block_values * gpt2__q8_block_bytes
                                  : type == GPT2_TYPE_Q4_0 ? (size_t)start / gpt2__q4_block_values * gpt2__q4_block_bytes
                                                           : (size_t)start * 2;
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

/* A q8_0 or q4_0 (TYPE) weight row against activations quantized by gpt2__quantize_q8: exact
   integer sums per block of value x, scaled by both blocks' scales. */
template <uint32_t TYPE>
static float gpt2__dot_int8_scalar(const uint8_t* row, const int8_t* xq, const float* xscale, int64_t n) {
    const int B = gpt2__q8_block_values;
    const size_t block_bytes = TYPE == GPT2_TYPE_Q8_0 ? gpt2__q8_block_bytes : gpt2__q4_block_bytes;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / B; b++) {
        const uint8_t* block = row + block_bytes * b;
        int32_t isum = 0;
        for (int i = 0; i < B; i++) isum += gpt2__block_value(TYPE, block, i) * (int32_t)xq[B * b + i];
        sum += (float)isum * (gpt2__f16_to_f32(gpt2__q8_scale_f16(block)) * xscale[b]);
    }
    return sum;
}
static float gpt2__dot_q8_scalar(const uint8_t* row, const int8_t* xq, const float* xscale, int64_t n) { return gpt2__dot_int8_scalar<GPT2_TYPE_Q8_0>(row, xq, xscale, n); }
static float gpt2__dot_q4_scalar(const uint8_t* row, const int8_t* xq, const float* xscale, int64_t n) { return gpt2__dot_int8_scalar<GPT2_TYPE_Q4_0>(row, xq, xscale, n); }

/* The streamed strategies (GPT2__STREAM_ROWS, GPT2__STREAM_INT8) of any row dot kernels (q8_0 and
   q4_0 rows against int8 activations, any row against floats), one output row at a time: the
   portable set below, and the NEON set, whose speed lies in its dot kernels alone. */
template <float (*DotQ8)(const uint8_t*, const int8_t*, const float*, int64_t), float (*DotQ4)(const uint8_t*, const int8_t*, const float*, int64_t),
          float (*DotRow)(uint32_t, const uint8_t*, const float*, int64_t)>
static void gpt2__matmul_by_rows(const gpt2__matmul_args& a, int64_t o_begin, int64_t o_end) {
    /* a's fields copied once: the stores to y may alias them, so read through `a` they would be
       reloaded every row */
    const gpt2__weight W = *a.W;
    const float *x = a.x, *bias = a.bias, *xq_scale = a.xq_scale;
    const int8_t* xq = a.xq;
    float* y = a.y;
    const int T = a.T;
    const bool accumulate = a.accumulate, int8 = a.strategy == GPT2__STREAM_INT8;
    float (*const dot_int8)(const uint8_t*, const int8_t*, const float*, int64_t) = W.type == GPT2_TYPE_Q4_0 ? DotQ4 : DotQ8;
    for (int64_t o = o_begin; o < o_end; o++) {
        const uint8_t* row = W.data + (size_t)o * W.row_bytes;
        for (int t = 0; t < T; t++) {
            float v = (bias ? bias[o] : 0.0f);
            v += int8 ? dot_int8(row, xq + (size_t)t * W.cols, xq_scale + (size_t)t * (W.cols / gpt2__q8_block_values), W.cols)
                      : DotRow(W.type, row, x + (size_t)t * W.cols, W.cols);
            float* out = y + (size_t)t * W.rows + o;
            *out = accumulate ? *out + v : v;
        }
    }
}

static void gpt2__matmul_rows_scalar(const gpt2__matmul_args& a, int64_t o_begin, int64_t o_end, float* panel) {
    (void)panel;
    gpt2__matmul_by_rows<gpt2__dot_q8_scalar, gpt2__dot_q4_scalar, gpt2__dot_row_scalar>(a, o_begin, o_end);
}

/* GPT2__FLOAT_TILES of the sets without tiles (scalar, NEON, WebAssembly): a row that is not f32
   converted to floats once (Widen, exact), into `panel` (gpt2__panel_floats), for all the prompt's
   tokens, instead of once a token. DotRow's products of the floats are those it makes of the row
   in its own type, in the same order, so a prompt gives the streamed rows' bits. */
template <float (*DotRow)(uint32_t, const uint8_t*, const float*, int64_t), void (*Widen)(uint32_t, const uint8_t*, float*, int64_t) = gpt2__dequantize_row>
static void gpt2__matmul_widened_rows(const gpt2__matmul_args& a, int64_t o_begin, int64_t o_end, float* panel) {
    const gpt2__weight W = *a.W; /* copied: the stores to y may alias a's fields (gpt2__matmul_by_rows) */
    const float *x = a.x, *bias = a.bias;
    float* y = a.y;
    const int T = a.T;
    const bool accumulate = a.accumulate;
    for (int64_t o = o_begin; o < o_end; o++) {
        const uint8_t* row = W.data + (size_t)o * W.row_bytes;
        if (W.type != GPT2_TYPE_F32) {
            Widen(W.type, row, panel, W.cols);
            row = (const uint8_t*)panel;
        }
        for (int t = 0; t < T; t++) {
            const float v = (bias ? bias[o] : 0.0f) + DotRow(GPT2_TYPE_F32, row, x + (size_t)t * W.cols, W.cols);
            float* out = y + (size_t)t * W.rows + o;
            *out = accumulate ? *out + v : v;
        }
    }
}

/* The sum of f(x[i]) in double, in 8 chains added at the end: one chain waits on each add's
   latency (docs/PERFORMANCE.md, Kernel notes). */
template <class F>
static double gpt2__sum_double(const float* x, int n, const F& f) {
    double chain[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) chain[j] += f(x[i + j]);
    for (; i < n; i++) chain[i % 8] += f(x[i]);
    return ((chain[0] + chain[1]) + (chain[2] + chain[3])) + ((chain[4] + chain[5]) + (chain[6] + chain[7]));
}

/* nanoGPT's LayerNorm: (x - mean) / sqrt(var + eps) * weight + bias, biased variance. */
static void gpt2__layer_norm(float* out, const float* x, const float* weight, const float* bias, int n, float eps) {
    const double mean = gpt2__sum_double(x, n, [](float v) { return (double)v; }) / n;
    const double var = gpt2__sum_double(x, n, [mean](float v) { return (v - mean) * (v - mean); }) / n;
    const float inv_std = (float)(1.0 / std::sqrt(var + eps));
    if (bias) /* apart, so the compiler vectorizes each */
        for (int i = 0; i < n; i++) out[i] = (float)(x[i] - mean) * inv_std * weight[i] + bias[i];
    else
        for (int i = 0; i < n; i++) out[i] = (float)(x[i] - mean) * inv_std * weight[i] + 0.0f; /* a zero bias's sum: -0 as +0 */
}

static void gpt2__gelu_scalar(float* x, size_t n, bool tanh_form) {
    if (tanh_form) {
        for (size_t i = 0; i < n; i++) x[i] = 0.5f * x[i] * (1.0f + std::tanh(gpt2__sqrt_2_over_pi * (x[i] + gpt2__gelu_cubic * x[i] * x[i] * x[i])));
    } else {
        for (size_t i = 0; i < n; i++) x[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * gpt2__sqrt_half));
    }
}

static void gpt2__add(float* y, const float* x, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] += x[i];
}

/* KV cache entries are float or f16; attention reads both through these. */
static inline float gpt2__load_kv(const float* p, size_t i) { return p[i]; }
static inline float gpt2__load_kv(const uint16_t* p, size_t i) { return gpt2__f16_to_f32(p[i]); }

static void gpt2__to_f16_scalar(uint16_t* dst, const float* x, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = gpt2__f32_to_f16(x[i]);
}

/* Attention has two kernels, as the matrix products have two shapes: one head at a time for
   prefill, whose keys were just written and sit in cache, so the arithmetic counts (a block of
   up to gpt2__query_block queries shares each key it loads); and all heads at once for decode,
   whose keys come from memory, so the order of the reads counts (gpt2__attend_rows_scalar).

   One head of causal attention for one query: softmax(q . k_j / sqrt(d)) over the rows j of
   [first, first + n_keys), then the weighted sum of v_j; `scores` has n_keys entries. */
template <class KV>
static void gpt2__attend_query_scalar(float* out, const float* q, gpt2__kv_rows<KV> k, gpt2__kv_rows<KV> v, int first, int n_keys, int head_dim, float* scores,
                                      float* stats = nullptr) {
    const float scale = 1.0f / std::sqrt((float)head_dim);
    float max_score = -INFINITY;
    for (int j = 0; j < n_keys; j++) {
        const KV* kj = k.row(first + j);
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
    if (stats) stats[0] = max_score, stats[1] = sum; /* for gpt2__attend_rows_scalar */
    const float inv_sum = 1.0f / sum;
    for (int d = 0; d < head_dim; d++) out[d] = 0.0f;
    for (int j = 0; j < n_keys; j++) {
        const KV* vj = v.row(first + j);
        const float p = scores[j] * inv_sum;
        for (int d = 0; d < head_dim; d++) out[d] += p * gpt2__load_kv(vj, (size_t)d);
    }
}

/* Causal attention of one head for n_queries <= gpt2__query_block consecutive queries: query i
   (at q + i * q_stride) attends rows 0 .. n_keys + i - 1 of k and v and writes out + i *
   out_stride. `scores` holds gpt2__query_scratch(n_keys + n_queries - 1) floats. */
template <class KV>
static void gpt2__attend_scalar(float* out, size_t out_stride, const float* q, size_t q_stride, gpt2__kv_rows<KV> k, gpt2__kv_rows<KV> v, int n_keys, int n_queries,
                                int head_dim, float* scores) {
    for (int i = 0; i < n_queries; i++) gpt2__attend_query_scalar(out + i * out_stride, q + i * q_stride, k, v, 0, n_keys + i, head_dim, scores);
}

/* All heads of one query, over rows [first, first + n_keys) of one layer's cache, each row
   holding its key's (or value's) n_head heads side by side (n_head * head_dim values), as q and
   out do. For each head h: out[h] = sum_j p_j v_j[h], p = softmax_j(q[h] . k_j[h] /
   sqrt(head_dim)); stats[2h] = the largest score and stats[2h + 1] = sum_j exp(score_j -
   largest), with which gpt2__merge_attention joins consecutive key ranges. `scratch` holds
   n_keys * n_head floats. */
template <class KV>
static void gpt2__attend_rows_scalar(float* out, float* stats, const float* q, gpt2__kv_rows<KV> k, gpt2__kv_rows<KV> v, int first, int n_keys, int n_head, int head_dim,
                                     float* scratch) {
    for (int h = 0; h < n_head; h++) {
        const size_t at = (size_t)h * head_dim;
        gpt2__attend_query_scalar(out + at, q + at, k.at(at), v.at(at), first, n_keys, head_dim, scratch, stats + 2 * h);
    }
}

/* Attention over up to gpt2__max_key_ranges consecutive key ranges, joined: `parts` holds
   n_parts blocks of the n_head * head_dim outputs and 2 * n_head stats of gpt2__attend_rows_scalar;
   each range's output counts by its share of the whole softmax denominator. */
static void gpt2__merge_attention(float* out, const float* parts, int n_parts, int n_head, int head_dim) {
    const size_t row = (size_t)n_head * head_dim, part = row + 2 * (size_t)n_head;
    for (int h = 0; h < n_head; h++) {
        float max_score = -INFINITY, denominator = 0.0f, weight[gpt2__max_key_ranges];
        for (int p = 0; p < n_parts; p++) max_score = std::max(max_score, parts[p * part + row + 2 * h]);
        for (int p = 0; p < n_parts; p++) denominator += weight[p] = std::exp(parts[p * part + row + 2 * h] - max_score) * parts[p * part + row + 2 * h + 1];
        float* o = out + (size_t)h * head_dim;
        for (int d = 0; d < head_dim; d++) o[d] = 0.0f;
        for (int p = 0; p < n_parts; p++) {
            const float share = weight[p] / denominator;
            for (int d = 0; d < head_dim; d++) o[d] += share * parts[p * part + (size_t)h * head_dim + d];
        }
    }
}

/* ---- src/cpu/kernels/x86_prefill.h ---- */
/* What the x86 kernel sets, avx2.h (AVX2 + FMA + F16C), avx512.h (AVX-512 F, BW, VL, DQ, VNNI)
   and avx512_bf16.h (those and AVX512_BF16), share: the target macros and the prefill matmul
   driver. Each kernel carries its instruction set in a target
   attribute, so the library builds without -m flags and the dispatcher (dispatch.h) runs only
   what the CPU has.

   A matrix product takes one of two shapes (its gpt2__strategy):
   - decode (GPT2__STREAM_ROWS, GPT2__STREAM_INT8): every weight is read once, straight from the (mapped) file, in its own type, one row
     after the other (gpt2__matmul_by_rows): memory bandwidth is the limit. q8_0 rows meet
     activations quantized to int8 and use integer dot products (vpdpbusd / pmaddubsw), as ggml's
     q8_0 x q8_0.
   - prefill (GPT2__FLOAT_TILES): a panel of gpt2__tile_rows rows is converted to float once (in L1) and multiplied
     with tiles of tokens held in registers, so each weight load feeds several FMAs: arithmetic is
     the limit. (q8_0 on the AVX-512 set: int8 panels instead, avx512.h.)
   A result never depends on where its row falls in a thread's range: decode computes each row
   with the same instructions whatever rows it goes with, and prefill reduces every tile the
   same way. */

#if !defined(GPT2_NO_SIMD) && (defined(__x86_64__) || defined(_M_X64))
#define GPT2__X86 1
#include <immintrin.h>
#if defined(_MSC_VER) && !defined(__clang__)
#include <intrin.h>
#define GPT2__AVX2
#define GPT2__AVX512
#define GPT2__AVX512_BF16
#else
#include <cpuid.h>
#define GPT2__AVX2 __attribute__((target("avx2,fma,f16c")))
#define GPT2__AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))
#define GPT2__AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512bf16,avx2,fma,f16c")))
/* GCC 12 warns inside its own AVX-512 intrinsics (their _mm512_undefined_ps() pass-through), which
   this driver's AVX-512 instances inline too; popped at the end of amx.h, the last x86 part. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#endif

/* cpuid's EAX, EBX, ECX and EDX for a leaf and sub-leaf. */
static inline void gpt2__cpuid(unsigned leaf, unsigned subleaf, unsigned r[4]) {
#if defined(_MSC_VER) && !defined(__clang__)
    int regs[4];
    __cpuidex(regs, (int)leaf, (int)subleaf);
    for (int i = 0; i < 4; i++) r[i] = (unsigned)regs[i];
#else
    __cpuid_count(leaf, subleaf, r[0], r[1], r[2], r[3]);
#endif
}

/* Whether the CPU is Intel's ("GenuineIntel" in leaf 0's EBX, EDX, ECX), asked once per process:
   a few choices measured to differ between Intel's cores and AMD's follow it (docs/
   PERFORMANCE.md, Kernel notes). */
static bool gpt2__intel_cpu() {
    static const bool intel = [] {
        unsigned r[4];
        gpt2__cpuid(0, 0, r);
        return r[1] == 0x756e6547u && r[3] == 0x49656e69u && r[2] == 0x6c65746eu;
    }();
    return intel;
}

/* Keeps a vector that several FMAs share in a register. GCC tuned for Zen (-march=native on
   AMD, -mtune=znver3) otherwise folds its load into every FMA that uses it, loading it again
   each time: the float tiles ran at half speed (docs/PERFORMANCE.md, Kernel notes).
   Applied to a local, not to an array's element: GCC then kept the whole array in memory. */
#if defined(_MSC_VER) && !defined(__clang__)
#define GPT2__IN_REGISTER(v) ((void)0)
#define GPT2__IN_REGISTERS(v, w) ((void)0)
#else
#define GPT2__IN_REGISTER(v) __asm__("" : "+v"(v))
#define GPT2__IN_REGISTERS(v, w) __asm__("" : "+v"(v), "+v"(w))
#endif

/* Stores an output with the bias and the residual, as gpt2__matmul_rows_scalar does. */
static inline void gpt2__store_out(const gpt2__matmul_args& a, int t, int64_t o, float dot) {
    const float v = (a.bias ? a.bias[o] : 0.0f) + dot;
    float* y = a.y + (size_t)t * a.W->rows + o;
    *y = a.accumulate ? *y + v : v;
}

/* Runs Set::tile<R, N> (a kernel set's tile of R rows and N tokens) for 1 <= rows <=
   gpt2__tile_rows and 1 <= n <= Set::NT, which are known only at run time. */
template <class Set, int R>
static void gpt2__tile_tokens(float* out, int n, const typename Set::Panel& w, const gpt2__matmul_args& a, int t, int64_t k0, int64_t kn) {
    switch (n) {
    case 1: Set::template tile<R, 1>(out, w, a, t, k0, kn); break;
    case 2: Set::template tile<R, 2>(out, w, a, t, k0, kn); break;
    case 3: Set::template tile<R, 3>(out, w, a, t, k0, kn); break;
    default: Set::template tile<R, Set::NT>(out, w, a, t, k0, kn); break;
    }
}

template <class Set>
static void gpt2__tile_any(float* out, int rows, int n, const typename Set::Panel& w, const gpt2__matmul_args& a, int t, int64_t k0, int64_t kn) {
    switch (rows) {
    case 1: gpt2__tile_tokens<Set, 1>(out, n, w, a, t, k0, kn); break;
    case 2: gpt2__tile_tokens<Set, 2>(out, n, w, a, t, k0, kn); break;
    case 3: gpt2__tile_tokens<Set, 3>(out, n, w, a, t, k0, kn); break;
    default: gpt2__tile_tokens<Set, gpt2__tile_rows>(out, n, w, a, t, k0, kn); break;
    }
}

/* A converted panel's rows come from DRAM in bursts (a panel's rows, then tiles that touch no
   weight memory for a while), which neither the hardware prefetcher nor the driver's prefetch of
   the next panel runs far enough ahead of: on the AVX-512 set each row converted also prefetches
   the row gpt2__prefill_prefetch_bytes after it. The AVX2 set goes without (its tiles, not
   memory, are its limit there), and panels read in place (f32) gained nothing over the driver's
   prefetch (docs/PERFORMANCE.md, Kernel notes). */
static const int64_t gpt2__prefill_prefetch_bytes = 24576;

/* Always inlined: left a function of its own, GCC 12 finds it has no side effects (a prefetch
   has none to it) and deletes every call. */
#if defined(_MSC_VER) && !defined(__clang__)
#define GPT2__ALWAYS_INLINE __forceinline
#else
#define GPT2__ALWAYS_INLINE __attribute__((always_inline)) inline
#endif
GPT2__ALWAYS_INLINE static void gpt2__prefetch_row_ahead(const gpt2__weight* W, int64_t row) {
    const int64_t ahead = row + std::max<int64_t>(1, gpt2__prefill_prefetch_bytes / (int64_t)W->row_bytes);
    if (ahead >= W->rows) return;
    const char* p = (const char*)(W->data + (size_t)ahead * W->row_bytes);
    for (size_t line = 0; line < W->row_bytes; line += 64) _mm_prefetch(p + line, _MM_HINT_T0);
}

/* A float panel: gpt2__tile_rows rows of W from row o, ldw floats apart: the f32 rows in place,
   else the rows converted by RowToFloat(dst, type, row, K) into `scratch`. */
struct gpt2__float_panel {
    const float* w;
    size_t ldw;
};

template <void (*RowToFloat)(float*, uint32_t, const uint8_t*, int64_t), bool PrefetchAhead>
static gpt2__float_panel gpt2__float_panel_of(const gpt2__matmul_args& a, int64_t o, int rows, float* scratch) {
    const gpt2__weight* W = a.W;
    if (W->type == GPT2_TYPE_F32) return {(const float*)(W->data + (size_t)o * W->row_bytes), W->row_bytes / 4};
    for (int r = 0; r < rows; r++) {
        if (PrefetchAhead) gpt2__prefetch_row_ahead(W, o + r);
        RowToFloat(scratch + (size_t)r * W->cols, W->type, W->data + (size_t)(o + r) * W->row_bytes, W->cols);
    }
    return {scratch, (size_t)W->cols};
}

/* Prefill, shared by the x86 kernel sets and their panel types: for each group of
   gpt2__tile_rows rows (Set::panel: a float panel), tiles of Set::NT tokens, over the tokens in
   chunks of about gpt2__chunk_tokens. K goes in blocks of at most gpt2__k_block (starting at
   multiples of gpt2__k_align floats, a 512-bit vector), so a tile's rows and
   tokens stay in L1, the partial sums of the chunk's tiles adding up in `sums`.
   Set::panel(a, o, rows, scratch) makes the panel of rows [o, o + rows) in `scratch`;
   Set::tile<R, N>(out, panel, a, t, k0, kn) adds the products of R rows and tokens t.. t + N - 1
   over k0 <= k < k0 + kn to out[j * gpt2__tile_rows + r]. */
static const int gpt2__k_block = 1024, gpt2__k_align = 16;
/* A chunk takes more tokens than gpt2__chunk_tokens, up to gpt2__chunk_tokens_most, while their
   rows of x stay within gpt2__chunk_x_bytes (in L2 with the panel, where the tiles re-read them for
   every panel): each panel is then converted once for all of them, where a prompt of 128 tokens
   on rows of 768 converted every panel twice (docs/PERFORMANCE.md, Kernel notes). The tokens of
   a chunk of rows of K values, in whole tiles of NT. */
static const int gpt2__chunk_tokens_most = 192;
static const int64_t gpt2__chunk_x_bytes = 400 * 1024;
static inline int gpt2__prefill_chunk(int64_t K, int NT) { return (int)std::clamp<int64_t>(gpt2__chunk_x_bytes / (4 * K), gpt2__chunk_tokens, gpt2__chunk_tokens_most) / NT * NT; }

template <class Set>
static void gpt2__prefill_x86(const gpt2__matmul_args& a, int64_t o_begin, int64_t o_end, float* panel) {
    constexpr int MR = gpt2__tile_rows, NT = Set::NT, most = gpt2__chunk_tokens_most / NT * NT;
    static_assert(MR == 4, "a full tile stores its 4 rows of a token as one 128-bit vector");
    const gpt2__weight* W = a.W;
    const int64_t K = W->cols;
    const int chunk = gpt2__prefill_chunk(K, NT);
    const int64_t k_blocks = (K + gpt2__k_block - 1) / gpt2__k_block;
    const int64_t k_step = ((K + k_blocks - 1) / k_blocks + gpt2__k_align - 1) / gpt2__k_align * gpt2__k_align;
    float sums[most / NT][MR * NT];
    for (int t0 = 0; t0 < a.T; t0 += chunk) {
        const int t_end = std::min(a.T, t0 + chunk);
        const int n_tiles = (t_end - t0 + NT - 1) / NT;
        for (int64_t o = o_begin; o < o_end; o += MR) {
            const int rows = (int)std::min<int64_t>(MR, o_end - o);
            const typename Set::Panel w = Set::panel(a, o, rows, panel);
            /* The next rows come from DRAM, and the tiles touch no weight memory for a while:
               spread prefetches of the next group's bytes over them. */
            const char* next = (const char*)(W->data + (size_t)(o + rows) * W->row_bytes);
            const size_t next_lines = (size_t)std::min<int64_t>(MR, o_end - o - rows) * W->row_bytes / 64;
            const size_t steps = (size_t)(n_tiles * k_blocks), lines_per_step = (next_lines + steps - 1) / steps;
            size_t line = 0;
            std::memset(sums, 0, sizeof(float) * MR * NT * (size_t)n_tiles);
            for (int64_t k0 = 0; k0 < K; k0 += k_step) {
                const int64_t kn = std::min(k_step, K - k0);
                for (int i = 0; i < n_tiles; i++) {
                    for (size_t end = std::min(next_lines, line + lines_per_step); line < end; line++) _mm_prefetch(next + 64 * line, _MM_HINT_T1);
                    const int t = t0 + i * NT;
                    gpt2__tile_any<Set>(sums[i], rows, std::min(NT, t_end - t), w, a, t, k0, kn);
                }
            }
            for (int i = 0; i < n_tiles; i++) {
                const int t = t0 + i * NT, n = std::min(NT, t_end - t);
                if (rows == MR && n == NT) { /* gpt2__store_out, 4 rows at once */
                    const __m128 bias = a.bias ? _mm_loadu_ps(a.bias + o) : _mm_setzero_ps();
                    for (int j = 0; j < NT; j++) {
                        float* y = a.y + (size_t)(t + j) * W->rows + o;
                        const __m128 v = _mm_add_ps(bias, _mm_loadu_ps(sums[i] + j * MR));
                        _mm_storeu_ps(y, a.accumulate ? _mm_add_ps(_mm_loadu_ps(y), v) : v);
                    }
                } else {
                    for (int r = 0; r < rows; r++)
                        for (int j = 0; j < n; j++) gpt2__store_out(a, t + j, o + r, sums[i][j * MR + r]);
                }
            }
        }
    }
}

#endif /* GPT2__X86 */

/* ---- src/cpu/kernels/avx2.h ---- */
/* AVX2 + FMA + F16C kernels; x86_prefill.h has the target macros and the prefill pieces shared
   with AVX-512. */

#if defined(GPT2__X86)

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

/* How far ahead of its reads an int8 decode row (q8_0, q4_0) prefetches its weights. Their
   arithmetic takes most of the time their bytes take from DRAM, and the hardware prefetcher
   alone fell behind (docs/PERFORMANCE.md, Kernel notes). */
static const int gpt2__decode_ahead_bytes = 4096;

/* Prefetches the 64-byte lines from `at` + AHEAD on that cover the next BYTES, into L1, or with
   IntoL2 into L2. */
template <int BYTES, bool IntoL2 = false, int AHEAD = gpt2__decode_ahead_bytes>
GPT2__ALWAYS_INLINE static void gpt2__prefetch_decode_ahead(const uint8_t* at) {
    GPT2__UNROLL
    for (int line = 0; line < (BYTES + 63) / 64; line++) {
        if constexpr (IntoL2) _mm_prefetch((const char*)at + AHEAD + 64 * line, _MM_HINT_T1);
        else _mm_prefetch((const char*)at + AHEAD + 64 * line, _MM_HINT_T0);
    }
}

/* How far ahead float decode rows (f32, f16, bf16) of `cols` values prefetch into L2; 0: not at
   all. On Intel's cores gpt2__decode_ahead_bytes, where the hardware prefetcher alone streamed
   them at 0.65-0.85x the speed (Emerald Rapids, one thread from DRAM: f32 14.1 -> 17 GB/s, the
   AVX2 set's f16 11 -> 15.7). On Zen 4 the hardware prefetcher alone streams rows of up to 4096
   values at the limit, and is slower with a prefetch; past that the row's activations (4 bytes a
   value, read again for every row) no longer stay in L1 beside the weights, and f16 and bf16 rows
   fell to 13-18 GB/s, which a prefetch 16 KB ahead brings back to 23-32 (f32 rows gained
   nothing; docs/PERFORMANCE.md, Kernel notes). */
static const int gpt2__wide_rows_ahead_bytes = 16384;
static const int64_t gpt2__rows_streamed_alone_values = 4096; /* the longest row Zen 4 streams at the limit unaided */
/* On AMD, rows longer than that: f16 and bf16 16 KB ahead, f32 not at all (also the prefetch of
   the rows that go together, gpt2__matmul_rows_together_avx2, which are all that long where the
   L1 data cache holds 24 KB or more). */
static constexpr int gpt2__long_rows_ahead(uint32_t type) { return type == GPT2_TYPE_F32 ? 0 : gpt2__wide_rows_ahead_bytes; }
static int gpt2__float_rows_ahead(uint32_t type, int64_t cols) {
    if (gpt2__intel_cpu()) return gpt2__decode_ahead_bytes;
    return cols > gpt2__rows_streamed_alone_values ? gpt2__long_rows_ahead(type) : 0;
}

/* Decode reads the weights one row at a time, so each thread's rows are one sequential stream,
   which the hardware prefetcher follows across row ends (with AHEAD bytes > 0, prefetched that far
   ahead too). */
template <uint32_t TYPE, int AHEAD>
GPT2__AVX2 static float gpt2__row_avx2(const uint8_t* w, const float* x, int64_t K) {
    constexpr int value_bytes = TYPE == GPT2_TYPE_F32 ? 4 : 2;
    __m256 acc[4];
    GPT2__UNROLL
    for (int i = 0; i < 4; i++) acc[i] = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 32 <= K; k += 32) {
        if constexpr (AHEAD > 0) gpt2__prefetch_decode_ahead<32 * value_bytes, true, AHEAD>(w + value_bytes * k);
        GPT2__UNROLL
        for (int i = 0; i < 4; i++) acc[i] = _mm256_fmadd_ps(gpt2__w8_avx2<TYPE>(w, k + 8 * i), _mm256_loadu_ps(x + k + 8 * i), acc[i]);
    }
    for (; k + 8 <= K; k += 8) acc[0] = _mm256_fmadd_ps(gpt2__w8_avx2<TYPE>(w, k), _mm256_loadu_ps(x + k), acc[0]);
    float tail = 0.0f;
    for (; k < K; k++) tail += gpt2__w_scalar(TYPE, w, k) * x[k];
    return gpt2__hsum_avx2(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]))) + tail;
}

/* R rows of TYPE (gpt2__rows_together) at once, their 32-value steps in turn, each prefetched
   AHEAD bytes ahead as alone, each row's sums over the same steps in the same order as
   gpt2__row_avx2's: the same bits. Kept apart from it: gpt2__row_avx2 written as this with R = 1
   streamed f16 and bf16 rows of 768 values at 0.83-0.94x the speed (kernel bench, Zen 4, 3
   alternated rounds). The dot products go to dots[0..R). */
template <uint32_t TYPE, int R, int AHEAD>
GPT2__AVX2 static void gpt2__rows_avx2(const uint8_t* const* w, const float* x, int64_t K, float* dots) {
    constexpr int value_bytes = TYPE == GPT2_TYPE_F32 ? 4 : 2;
    __m256 acc[R][4];
    GPT2__UNROLL
    for (int r = 0; r < R; r++)
        GPT2__UNROLL
        for (int i = 0; i < 4; i++) acc[r][i] = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 32 <= K; k += 32)
        GPT2__UNROLL
        for (int r = 0; r < R; r++) {
            if constexpr (AHEAD > 0) gpt2__prefetch_decode_ahead<32 * value_bytes, true, AHEAD>(w[r] + value_bytes * k);
            GPT2__UNROLL
            for (int i = 0; i < 4; i++) acc[r][i] = _mm256_fmadd_ps(gpt2__w8_avx2<TYPE>(w[r], k + 8 * i), _mm256_loadu_ps(x + k + 8 * i), acc[r][i]);
        }
    for (int r = 0; r < R; r++) {
        int64_t j = k;
        for (; j + 8 <= K; j += 8) acc[r][0] = _mm256_fmadd_ps(gpt2__w8_avx2<TYPE>(w[r], j), _mm256_loadu_ps(x + j), acc[r][0]);
        float tail = 0.0f;
        for (; j < K; j++) tail += gpt2__w_scalar(TYPE, w[r], j) * x[j];
        dots[r] = gpt2__hsum_avx2(_mm256_add_ps(_mm256_add_ps(acc[r][0], acc[r][1]), _mm256_add_ps(acc[r][2], acc[r][3]))) + tail;
    }
}

template <int AHEAD>
GPT2__AVX2 static float gpt2__dot_row_avx2(uint32_t type, const uint8_t* row, const float* x, int64_t K) {
    switch (type) {
    case GPT2_TYPE_F32: return gpt2__row_avx2<GPT2_TYPE_F32, AHEAD>(row, x, K);
    case GPT2_TYPE_F16: return gpt2__row_avx2<GPT2_TYPE_F16, AHEAD>(row, x, K);
    default: return gpt2__row_avx2<GPT2_TYPE_BF16, AHEAD>(row, x, K);
    }
}

/* One q8_0 block (at p) times its 32 quantized activations, as 8 exact integer partial sums. */
GPT2__AVX2 static inline __m256i gpt2__block_dot_q8_avx2(const uint8_t* p, const int8_t* xq) {
    const __m256i w = _mm256_loadu_si256((const __m256i*)gpt2__q8_values(p)), x = _mm256_loadu_si256((const __m256i*)xq);
    const __m256i dot16 = _mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(x, w));
    return _mm256_madd_epi16(dot16, _mm256_set1_epi16(1));
}

/* One q4_0 block (at p) times its 32 quantized activations, as 8 exact integer partial sums. The
   nibbles are unsigned bytes, as pmaddubsw takes its first operand, so it multiplies them as they
   are and 8 times the sums of x come off after (the pairs' sums fit in 16 bits: |15 x| + |15 x| < 2^15). */
GPT2__AVX2 static inline __m256i gpt2__block_dot_q4_avx2(const uint8_t* p, const int8_t* xq) {
    const __m128i packed = _mm_loadu_si128((const __m128i*)gpt2__q4_nibbles(p));
    const __m256i w = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(packed, 4), packed), _mm256_set1_epi8(15)); /* values 0-15, then 16-31 */
    const __m256i x = _mm256_loadu_si256((const __m256i*)xq);
    const __m256i dot16 = _mm256_sub_epi16(_mm256_maddubs_epi16(w, x), _mm256_maddubs_epi16(_mm256_set1_epi8(8), x));
    return _mm256_madd_epi16(dot16, _mm256_set1_epi16(1));
}

/* row . x for one row of int8-dot blocks (q8_0 or q4_0, BYTES each, BlockDot giving one block's
   8 integer partial sums) against x quantized by gpt2__quantize_q8 (xs: its block scales). Four
   blocks a step: two rounds of horizontal adds leave each block's two 128-bit halves summed in
   one lane of a half (block i in lanes i and 4 + i), so one conversion and one FMA with the four
   scales (weight times activation) serve the four blocks. The integer sums are exact (at most
   16 x 127 x 128 a lane), so only the float adds' order differs from a block at a time; `first`
   blocks on, the rest of the row. */
template <int BYTES, __m256i (*BlockDot)(const uint8_t*, const int8_t*)>
GPT2__AVX2 static __m256 gpt2__dot_blocks_from_avx2(__m256 acc, const uint8_t* w, const int8_t* xq, const float* xs, int64_t first, int64_t nb) {
    const int B = gpt2__q8_block_values;
    static_assert(gpt2__q8_block_values == 32 && gpt2__q4_block_values == 32, "a block's values fill one 256-bit register");
    int64_t b = first;
    for (; b + 4 <= nb; b += 4) {
        const uint8_t* p = w + BYTES * b;
        gpt2__prefetch_decode_ahead<4 * BYTES>(p);
        uint16_t h[4];
        for (int i = 0; i < 4; i++) h[i] = gpt2__q8_scale_f16(p + BYTES * i);
        const __m128 scales = _mm_mul_ps(_mm_cvtph_ps(_mm_loadl_epi64((const __m128i*)h)), _mm_loadu_ps(xs + b));
        const __m256i pairs01 = _mm256_hadd_epi32(BlockDot(p, xq + B * b), BlockDot(p + BYTES, xq + B * (b + 1)));
        const __m256i pairs23 = _mm256_hadd_epi32(BlockDot(p + 2 * BYTES, xq + B * (b + 2)), BlockDot(p + 3 * BYTES, xq + B * (b + 3)));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_hadd_epi32(pairs01, pairs23)), _mm256_set_m128(scales, scales), acc);
    }
    for (; b < nb; b++) {
        const uint8_t* p = w + BYTES * b;
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(BlockDot(p, xq + B * b)), _mm256_set1_ps(_cvtsh_ss(gpt2__q8_scale_f16(p)) * xs[b]), acc);
    }
    return acc;
}
template <int BYTES, __m256i (*BlockDot)(const uint8_t*, const int8_t*)>
GPT2__AVX2 static float gpt2__dot_blocks_avx2(const uint8_t* w, const int8_t* xq, const float* xs, int64_t K) {
    return gpt2__hsum_avx2(gpt2__dot_blocks_from_avx2<BYTES, BlockDot>(_mm256_setzero_ps(), w, xq, xs, 0, K / gpt2__q8_block_values));
}

/* q4_0 decode rows, two blocks to a register. A block's 16 bytes hold its values 0-15 in their
   low nibbles and 16-31 in their high ones, so two blocks' bytes side by side give, masked, the
   low halves of both in one register and, shifted and masked, the high halves in another, with x
   rearranged to match once per call and token (gpt2__prepare_q4_x_avx2): a shift and two masks
   per two blocks, where a block alone takes a shift, an insert and a mask. A value is nibble - 8:
   the nibbles are multiplied as the unsigned bytes pmaddubsw takes, and 8 times each block's sum
   of x, the same for every row, comes off once per 8 blocks (prepared with x). Eight blocks a
   step: three rounds of horizontal adds leave blocks 0, 2, 4, 6 in the low half's lanes and 1,
   3, 5, 7 in the high half's, and their scales are taken in that order. Integer sums exact as
   above (a 16-bit lane holds at most 4 x 15 x 127), so only the float adds' order differs from
   the scalar set's; the blocks after the last 8 go as above (gpt2__dot_blocks_from_avx2). */
static const int gpt2__q4_step_blocks = 8;
/* Per step of 8 blocks, the prepared x: for each pair of blocks their values 0-15 side by side,
   then their values 16-31 (64 bytes a pair), then 8 x each block's sum of x (8 int32) and the
   blocks' activation scales (8 floats), both in the lanes' order. */
static const size_t gpt2__q4_step_offsets = 4 * 64, gpt2__q4_step_scales = gpt2__q4_step_offsets + 8 * 4, gpt2__q4_step_bytes = gpt2__q4_step_scales + 8 * 4;

/* The int32 sums of a step's 4 pairs of blocks, each pair's low and high halves of w (unsigned
   bytes) against the prepared x's: blocks 0, 2, 4, 6 in the low half's lanes, 1, 3, 5, 7 in the
   high half's. The x preparation sums x through this too (w all ones), so both agree on the
   lanes by construction. */
GPT2__AVX2 static inline __m256i gpt2__q4_step_sums_avx2(const __m256i* w_low, const __m256i* w_high, const uint8_t* prepared) {
    __m256i pair_sums[gpt2__q4_step_blocks / 2];
    for (int pair = 0; pair < gpt2__q4_step_blocks / 2; pair++) {
        const __m256i x_low = _mm256_loadu_si256((const __m256i*)(prepared + 64 * pair)), x_high = _mm256_loadu_si256((const __m256i*)(prepared + 64 * pair + 32));
        const __m256i sums16 = _mm256_add_epi16(_mm256_maddubs_epi16(w_low[pair], x_low), _mm256_maddubs_epi16(w_high[pair], x_high));
        pair_sums[pair] = _mm256_madd_epi16(sums16, _mm256_set1_epi16(1));
    }
    return _mm256_hadd_epi32(_mm256_hadd_epi32(pair_sums[0], pair_sums[1]), _mm256_hadd_epi32(pair_sums[2], pair_sums[3]));
}

GPT2__AVX2 static void gpt2__prepare_q4_x_avx2(uint8_t* dst, const int8_t* xq, const float* xs, int64_t steps) {
    const int B = gpt2__q8_block_values, S = gpt2__q4_step_blocks;
    const __m256i ones[S / 2] = {_mm256_set1_epi8(1), _mm256_set1_epi8(1), _mm256_set1_epi8(1), _mm256_set1_epi8(1)};
    for (int64_t g = 0; g < steps; g++, dst += gpt2__q4_step_bytes) {
        const int8_t* x = xq + (size_t)B * S * g;
        for (int pair = 0; pair < S / 2; pair++) {
            const __m256i first = _mm256_loadu_si256((const __m256i*)(x + 2 * B * pair)), second = _mm256_loadu_si256((const __m256i*)(x + 2 * B * pair + B));
            _mm256_storeu_si256((__m256i*)(dst + 64 * pair), _mm256_permute2x128_si256(first, second, 0x20));
            _mm256_storeu_si256((__m256i*)(dst + 64 * pair + 32), _mm256_permute2x128_si256(first, second, 0x31));
        }
        _mm256_storeu_si256((__m256i*)(dst + gpt2__q4_step_offsets), _mm256_slli_epi32(gpt2__q4_step_sums_avx2(ones, ones, dst), 3));
        _mm256_storeu_ps((float*)(dst + gpt2__q4_step_scales), _mm256_permutevar8x32_ps(_mm256_loadu_ps(xs + S * g), _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7)));
    }
}

/* The f16 scales of the 8 q4_0 blocks at p as floats, in the lanes' order (blocks 0, 2, 4, 6,
   1, 3, 5, 7). Block k's scale lies at byte 18 k: in the 32 bytes from 32 (k / 2) on, it is
   32-bit word k / 2 of the low half when k is even (its low 16 bits), of the high half when odd
   (its high 16 bits), so three blends of 4 loads hold all 8, and one byte shuffle and one permute
   line them up. (From 8 scalar loads GCC assembled the words with a dozen shuffles; a gather was
   slower still on Zen 4.) */
GPT2__AVX2 static inline __m256 gpt2__q4_scales8_avx2(const uint8_t* p) {
    __m256i words = _mm256_loadu_si256((const __m256i*)p);
    words = _mm256_blend_epi32(words, _mm256_loadu_si256((const __m256i*)(p + 32)), 0x22);
    words = _mm256_blend_epi32(words, _mm256_loadu_si256((const __m256i*)(p + 64)), 0x44);
    words = _mm256_blend_epi32(words, _mm256_loadu_si256((const __m256i*)(p + 96)), 0x88);
    const __m256i pick = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1, 2, 3, 6, 7, 10, 11, 14, 15, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m256i lined = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(words, pick), _MM_SHUFFLE(3, 1, 2, 0));
    return _mm256_cvtph_ps(_mm256_castsi256_si128(lined));
}

GPT2__AVX2 static float gpt2__dot_q4_row_avx2(const uint8_t* w, const int8_t* xq, const float* xs, const uint8_t* prepared, int64_t nb) {
    const int S = gpt2__q4_step_blocks, BYTES = gpt2__q4_block_bytes;
    const __m256i low = _mm256_set1_epi8(15);
    __m256 acc = _mm256_setzero_ps();
    int64_t b = 0;
    for (; b + S <= nb; b += S, prepared += gpt2__q4_step_bytes) {
        const uint8_t* p = w + BYTES * b;
        gpt2__prefetch_decode_ahead<S * BYTES>(p);
        __m256i w_low[S / 2], w_high[S / 2];
        for (int pair = 0; pair < S / 2; pair++) {
            const uint8_t* first = p + 2 * BYTES * pair;
            const __m256i both = _mm256_loadu2_m128i((const __m128i*)gpt2__q4_nibbles(first + BYTES), (const __m128i*)gpt2__q4_nibbles(first));
            w_low[pair] = _mm256_and_si256(both, low);
            w_high[pair] = _mm256_and_si256(_mm256_srli_epi16(both, 4), low);
        }
        const __m256i sums = gpt2__q4_step_sums_avx2(w_low, w_high, prepared);
        const __m256i offsets = _mm256_loadu_si256((const __m256i*)(prepared + gpt2__q4_step_offsets));
        const __m256 scales = _mm256_mul_ps(gpt2__q4_scales8_avx2(p), _mm256_loadu_ps((const float*)(prepared + gpt2__q4_step_scales)));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(sums, offsets)), scales, acc);
    }
    return gpt2__hsum_avx2(gpt2__dot_blocks_from_avx2<gpt2__q4_block_bytes, gpt2__block_dot_q4_avx2>(acc, w, xq, xs, b, nb));
}

/* GPT2__STREAM_INT8 on q4_0 rows: x prepared for as many tokens as `scratch` (the panel) holds,
   then every row's dot products with those tokens, stored as gpt2__store_out does. */
GPT2__AVX2 static void gpt2__matmul_q4_rows_avx2(const gpt2__matmul_args& a, int64_t o_begin, int64_t o_end, uint8_t* scratch) {
    const gpt2__weight& W = *a.W;
    const int64_t nb = W.cols / gpt2__q8_block_values, steps = nb / gpt2__q4_step_blocks;
    const size_t per_token = std::max<size_t>((size_t)steps * gpt2__q4_step_bytes, 1);
    const int tokens_per_pass = (int)std::min<size_t>((size_t)a.T, gpt2__panel_floats(W.cols) * 4 / per_token);
    for (int t0 = 0; t0 < a.T; t0 += tokens_per_pass) {
        const int n = std::min(tokens_per_pass, a.T - t0);
        for (int t = 0; t < n; t++) gpt2__prepare_q4_x_avx2(scratch + t * per_token, a.xq + (size_t)(t0 + t) * W.cols, a.xq_scale + (size_t)(t0 + t) * nb, steps);
        for (int64_t o = o_begin; o < o_end; o++)
            for (int t = t0; t < t0 + n; t++)
                gpt2__store_out(a, t, o, gpt2__dot_q4_row_avx2(W.data + (size_t)o * W.row_bytes, a.xq + (size_t)t * W.cols, a.xq_scale + (size_t)t * nb, scratch + (t - t0) * per_token, nb));
    }
}

/* One q4_0 row of K weights to floats, d * (nibble - 8) as gpt2__dequantize_row. */
GPT2__AVX2 static void gpt2__q4_to_float_avx2(float* dst, const uint8_t* row, int64_t K) {
    const int B = gpt2__q4_block_values;
    for (int64_t b = 0; b < K / B; b++) {
        const uint8_t* block = row + gpt2__q4_block_bytes * b;
        const __m256 scale = _mm256_set1_ps(_cvtsh_ss(gpt2__q8_scale_f16(block)));
        const __m128i packed = _mm_loadu_si128((const __m128i*)gpt2__q4_nibbles(block)), low4 = _mm_set1_epi8(15), eight = _mm_set1_epi8(8);
        const __m128i half[2] = {_mm_sub_epi8(_mm_and_si128(packed, low4), eight), _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(packed, 4), low4), eight)};
        for (int i = 0; i < 4; i++) {
            const __m128i q = i & 1 ? _mm_srli_si128(half[i / 2], 8) : half[i / 2];
            _mm256_storeu_ps(dst + B * b + 8 * i, _mm256_mul_ps(scale, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q))));
        }
    }
}

/* One row of K weights (f16, bf16, q8_0 or q4_0) to floats, for a prefill panel. */
GPT2__AVX2 static void gpt2__row_to_float_avx2(float* dst, uint32_t type, const uint8_t* row, int64_t K) {
    if (type == GPT2_TYPE_Q4_0) return gpt2__q4_to_float_avx2(dst, row, K);
    if (type == GPT2_TYPE_Q8_0) {
        const int B = gpt2__q8_block_values;
        for (int64_t b = 0; b < K / B; b++) {
            const uint8_t* block = row + gpt2__q8_block_bytes * b;
            const __m256 scale = _mm256_set1_ps(_cvtsh_ss(gpt2__q8_scale_f16(block)));
            for (int i = 0; i < B / 8; i++) {
                const __m128i q = _mm_loadl_epi64((const __m128i*)(gpt2__q8_values(block) + 8 * i));
                _mm256_storeu_ps(dst + B * b + 8 * i, _mm256_mul_ps(scale, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q))));
            }
        }
        return;
    }
    int64_t k = 0;
    for (; k + 8 <= K; k += 8)
        _mm256_storeu_ps(dst + k, type == GPT2_TYPE_F16 ? gpt2__w8_avx2<GPT2_TYPE_F16>(row, k) : gpt2__w8_avx2<GPT2_TYPE_BF16>(row, k));
    for (; k < K; k++) dst[k] = gpt2__w_scalar(type, row, k);
}

/* The 8 sums of 8 vectors, in order, by a tree of horizontal adds. */
GPT2__AVX2 static inline __m256 gpt2__hsum8_avx2(const __m256* v) {
    const __m256 g0 = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
    const __m256 g1 = _mm256_hadd_ps(_mm256_hadd_ps(v[4], v[5]), _mm256_hadd_ps(v[6], v[7]));
    return _mm256_add_ps(_mm256_permute2f128_ps(g0, g1, 0x20), _mm256_permute2f128_ps(g0, g1, 0x31));
}

/* 8 rows of 8 floats transposed in place: afterwards v[c] lane i is row i's value c. */
GPT2__AVX2 GPT2__ALWAYS_INLINE static void gpt2__transpose8_avx2(__m256* v) {
    __m256 t[8];
    GPT2__UNROLL
    for (int i = 0; i < 8; i += 2) { /* rows i and i + 1 interleaved */
        t[i] = _mm256_unpacklo_ps(v[i], v[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(v[i], v[i + 1]);
    }
    GPT2__UNROLL
    for (int i = 0; i < 8; i += 4) { /* each 128-bit lane: one column of rows i.. i + 3 */
        v[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        v[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        v[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        v[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    GPT2__UNROLL
    for (int c = 0; c < 4; c++) { /* rows 0-3 with rows 4-7 */
        t[c] = _mm256_permute2f128_ps(v[c], v[4 + c], 0x20);
        t[4 + c] = _mm256_permute2f128_ps(v[c], v[4 + c], 0x31);
    }
    GPT2__UNROLL
    for (int c = 0; c < 8; c++) v[c] = t[c];
}

/* out[t * gpt2__tile_rows + r] += w_r . x_t for R rows and NP <= 3 tokens, in one pass over K. Both FMA
   pipes stay busy only with enough independent accumulators in flight: 3 tokens x 4 rows give
   12 (with the 3 token vectors and a weight vector, the 16 ymm registers); a single token takes
   two steps of K at a time instead. */
template <int R, int NP>
GPT2__AVX2 static void gpt2__tokens_avx2(float* out, const float* w, size_t ldw, const float* x, size_t ldx, int64_t K) {
    constexpr int U = NP == 1 ? 2 : 1; /* steps of 8 per iteration */
    __m256 acc[U][NP][R];
    GPT2__UNROLL
    for (int u = 0; u < U; u++)
        GPT2__UNROLL
        for (int t = 0; t < NP; t++)
            GPT2__UNROLL
            for (int r = 0; r < R; r++) acc[u][t][r] = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 8 * U <= K; k += 8 * U)
        GPT2__UNROLL
        for (int u = 0; u < U; u++) {
            __m256 xv[NP];
            GPT2__UNROLL
            for (int t = 0; t < NP; t++) {
                __m256 v = _mm256_loadu_ps(x + t * ldx + k + 8 * u);
                GPT2__IN_REGISTER(v);
                xv[t] = v;
            }
            GPT2__UNROLL
            for (int r = 0; r < R; r++) {
                __m256 wv = _mm256_loadu_ps(w + r * ldw + k + 8 * u);
                GPT2__IN_REGISTER(wv);
                GPT2__UNROLL
                for (int t = 0; t < NP; t++) acc[u][t][r] = _mm256_fmadd_ps(wv, xv[t], acc[u][t][r]);
            }
        }
    for (; k + 8 <= K; k += 8)
        GPT2__UNROLL
        for (int r = 0; r < R; r++) {
            const __m256 wv = _mm256_loadu_ps(w + r * ldw + k);
            GPT2__UNROLL
            for (int t = 0; t < NP; t++) acc[0][t][r] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + t * ldx + k), acc[0][t][r]);
        }
    for (int t = 0; t < NP; t++)
        for (int r = 0; r < R; r++) {
            float tail = 0.0f;
            for (int64_t i = k; i < K; i++) tail += w[r * ldw + i] * x[t * ldx + i];
            out[t * gpt2__tile_rows + r] += gpt2__hsum_avx2(U == 2 ? _mm256_add_ps(acc[0][t][r], acc[U - 1][t][r]) : acc[0][t][r]) + tail;
        }
}

/* out[t * gpt2__tile_rows + r] += w_r . x_t for R rows and N tokens: passes of 3, 2 or 1 tokens. */
template <int R, int N>
GPT2__AVX2 static void gpt2__tile_avx2(float* out, const float* w, size_t ldw, const float* x, size_t ldx, int64_t K) {
    int t = 0;
    for (; t + 3 <= N; t += 3) gpt2__tokens_avx2<R, 3>(out + t * gpt2__tile_rows, w, ldw, x + (size_t)t * ldx, ldx, K);
    if (N - t == 2) gpt2__tokens_avx2<R, 2>(out + t * gpt2__tile_rows, w, ldw, x + (size_t)t * ldx, ldx, K);
    if (N - t == 1) gpt2__tokens_avx2<R, 1>(out + t * gpt2__tile_rows, w, ldw, x + (size_t)t * ldx, ldx, K);
}

struct gpt2__prefill_avx2 {
    /* tiles of 3 tokens, one pass of gpt2__tokens_avx2 each: a tile of 4 would take a pass of 3
       and one of 1, whose single token loads 5 vectors per 4 FMAs */
    static constexpr int NT = 3;
    using Panel = gpt2__float_panel;
    static Panel panel(const gpt2__matmul_args& a, int64_t o, int rows, float* scratch) { return gpt2__float_panel_of<gpt2__row_to_float_avx2, false>(a, o, rows, scratch); }
    template <int R, int N>
    static void tile(float* out, const Panel& w, const gpt2__matmul_args& a, int t, int64_t k0, int64_t kn) {
        const size_t K = (size_t)a.W->cols;
        gpt2__tile_avx2<R, N>(out, w.w + k0, w.ldw, a.x + t * K + k0, K, kn);
    }
};

/* The AVX2 set's prefill (GPT2__FLOAT_TILES) of gpt2__avx2_column_tokens tokens or more: W's rows
   gpt2__avx2_panel_rows at a time widened to floats column by column (a panel: per column the 16
   rows' values, two vectors), multiplied with tiles of up to gpt2__avx2_tile_tokens tokens: per
   column the two weight vectors are loaded once for 6 tokens and each token's value broadcast once
   for both, the 12 sums in registers (15 of the 16). Each output is one sum over the columns in
   order, whatever its tile, chunk, thread or row range, and no sum is reduced across lanes, where
   the tiles of 4 rows x 3 tokens above sum 8 columns a lane and reduce every output at the end of
   each block of K. Moving a panel's values into columns (8 x 8 transposes) costs more than those
   reductions save below 32 tokens, which take the 4 x 3 tiles (docs/PERFORMANCE.md, Kernel
   notes). The panel is converted once per chunk of tokens (gpt2__prefill_chunk), a prompt of 128
   on rows of 768 in one. */
static const int gpt2__avx2_panel_rows = 16, gpt2__avx2_tile_tokens = 6, gpt2__avx2_column_tokens = 32;

/* 8 values of a q8_0 or q4_0 row from element k (a multiple of 8) as floats, d times the value
   (q4_0: nibble - 8), as gpt2__row_to_float_avx2 gives them. */
template <uint32_t TYPE>
GPT2__AVX2 static inline __m256 gpt2__w8_block_avx2(const uint8_t* row, int64_t k) {
    const int m = (int)(k % gpt2__q8_block_values);
    const uint8_t* block = row + (size_t)(k / gpt2__q8_block_values) * (TYPE == GPT2_TYPE_Q4_0 ? gpt2__q4_block_bytes : gpt2__q8_block_bytes);
    __m128i q;
    if constexpr (TYPE == GPT2_TYPE_Q4_0) { /* byte j holds value j low, value j + 16 high */
        const __m128i bytes = _mm_loadl_epi64((const __m128i*)(gpt2__q4_nibbles(block) + m % 16));
        q = _mm_sub_epi8(_mm_and_si128(m >= 16 ? _mm_srli_epi16(bytes, 4) : bytes, _mm_set1_epi8(15)), _mm_set1_epi8(8));
    } else {
        q = _mm_loadl_epi64((const __m128i*)(gpt2__q8_values(block) + m));
    }
    return _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(gpt2__q8_scale_f16(block))), _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)));
}

/* Rows [o, o + rows) of W (rows <= 16) as a panel at dst: dst[16 k + r] = row r's value k (rows
   past the range repeat its last: their outputs are not stored). Each half's 8 rows are widened
   8 columns at a time and moved into columns by an 8 x 8 transpose. */
GPT2__AVX2 static void gpt2__panel16_avx2(float* dst, const gpt2__weight* W, int64_t o, int rows) {
    const int64_t K = W->cols, k8 = K / 8 * 8;
    for (int h = 0; h < 2; h++) {
        const uint8_t* row[8];
        for (int r = 0; r < 8; r++) row[r] = W->data + (size_t)(o + std::min(8 * h + r, rows - 1)) * W->row_bytes;
        for (int64_t k = 0; k < k8; k += 8) {
            __m256 v[8];
            if (W->type == GPT2_TYPE_Q8_0) {
                GPT2__UNROLL
                for (int r = 0; r < 8; r++) v[r] = gpt2__w8_block_avx2<GPT2_TYPE_Q8_0>(row[r], k);
            } else if (W->type == GPT2_TYPE_Q4_0) {
                GPT2__UNROLL
                for (int r = 0; r < 8; r++) v[r] = gpt2__w8_block_avx2<GPT2_TYPE_Q4_0>(row[r], k);
            } else if (W->type == GPT2_TYPE_F32) {
                GPT2__UNROLL
                for (int r = 0; r < 8; r++) v[r] = gpt2__w8_avx2<GPT2_TYPE_F32>(row[r], k);
            } else if (W->type == GPT2_TYPE_F16) {
                GPT2__UNROLL
                for (int r = 0; r < 8; r++) v[r] = gpt2__w8_avx2<GPT2_TYPE_F16>(row[r], k);
            } else {
                GPT2__UNROLL
                for (int r = 0; r < 8; r++) v[r] = gpt2__w8_avx2<GPT2_TYPE_BF16>(row[r], k);
            }
            gpt2__transpose8_avx2(v);
            GPT2__UNROLL
            for (int c = 0; c < 8; c++) _mm256_storeu_ps(dst + 16 * (k + c) + 8 * h, v[c]);
        }
        for (int64_t k = k8; k < K; k++) /* float rows' last columns (a block row's K is a multiple of 32) */
            for (int r = 0; r < 8; r++) dst[16 * k + 8 * h + r] = gpt2__w_scalar(W->type, row[r], k);
    }
}

/* Stores 8 outputs (rows r.. r + n - 1 of token t) as gpt2__store_out does: the bias added, and
   with `accumulate` y added to. */
GPT2__AVX2 static inline void gpt2__store8_avx2(const gpt2__matmul_args& a, int t, int64_t r, int n, __m256 sums) {
    float* y = a.y + (size_t)t * a.W->rows + r;
    if (n == 8) {
        const __m256 v = a.bias ? _mm256_add_ps(_mm256_loadu_ps(a.bias + r), sums) : _mm256_add_ps(_mm256_setzero_ps(), sums);
        _mm256_storeu_ps(y, a.accumulate ? _mm256_add_ps(_mm256_loadu_ps(y), v) : v);
        return;
    }
    alignas(32) float s[8];
    _mm256_store_ps(s, sums);
    for (int i = 0; i < n; i++) gpt2__store_out(a, t, r + i, s[i]);
}

/* N tokens from t0 on times the panel of rows [o, o + rows). */
template <int N>
GPT2__AVX2 static void gpt2__tile16_avx2(const gpt2__matmul_args& a, const float* panel, int64_t o, int rows, int t0) {
    const int64_t K = a.W->cols;
    const float* x[N];
    for (int t = 0; t < N; t++) x[t] = a.x + (size_t)(t0 + t) * K;
    __m256 acc[2][N];
    GPT2__UNROLL
    for (int t = 0; t < N; t++) acc[0][t] = acc[1][t] = _mm256_setzero_ps();
    for (int64_t k = 0; k < K; k++) {
        __m256 w0 = _mm256_loadu_ps(panel + 16 * k), w1 = _mm256_loadu_ps(panel + 16 * k + 8);
        GPT2__IN_REGISTERS(w0, w1); /* one statement: GCC split the loop in two halves, each broadcasting every token's value */
        GPT2__UNROLL
        for (int t = 0; t < N; t++) {
            const __m256 xv = _mm256_broadcast_ss(x[t] + k);
            acc[0][t] = _mm256_fmadd_ps(w0, xv, acc[0][t]);
            acc[1][t] = _mm256_fmadd_ps(w1, xv, acc[1][t]);
        }
    }
    GPT2__UNROLL
    for (int t = 0; t < N; t++)
        GPT2__UNROLL
        for (int h = 0; h < 2; h++)
            if (rows > 8 * h) gpt2__store8_avx2(a, t0 + t, o + 8 * h, std::min(8, rows - 8 * h), acc[h][t]);
}

GPT2__AVX2 static void gpt2__matmul_float_tiles_avx2(const gpt2__matmul_args& a, int64_t o_begin, int64_t o_end, float* panel) {
    if (a.T < gpt2__avx2_column_tokens) return gpt2__prefill_x86<gpt2__prefill_avx2>(a, o_begin, o_end, panel);
    constexpr int NT = gpt2__avx2_tile_tokens, PR = gpt2__avx2_panel_rows;
    const gpt2__weight* W = a.W;
    const int64_t K = W->cols;
    float* w = panel;
    const int chunk = gpt2__prefill_chunk(K, NT);
    for (int t0 = 0; t0 < a.T; t0 += chunk) {
        const int tokens = std::min(chunk, a.T - t0), n_tiles = (tokens + NT - 1) / NT;
        for (int64_t o = o_begin; o < o_end; o += PR) {
            const int rows = (int)std::min<int64_t>(PR, o_end - o);
            gpt2__panel16_avx2(w, W, o, rows);
            /* the next rows come from DRAM while the tiles touch no weight memory: their lines
               prefetched, spread over the tiles */
            const char* next = (const char*)(W->data + (size_t)(o + rows) * W->row_bytes);
            const size_t next_lines = (size_t)std::min<int64_t>(PR, o_end - o - rows) * W->row_bytes / 64, per_tile = (next_lines + n_tiles - 1) / n_tiles;
            for (int i = 0; i < n_tiles; i++) {
                for (size_t l = (size_t)i * per_tile, end = std::min(next_lines, l + per_tile); l < end; l++) _mm_prefetch(next + 64 * l, _MM_HINT_T1);
                const int t = t0 + i * (tokens / n_tiles) + std::min(i, tokens % n_tiles), n = tokens / n_tiles + (i < tokens % n_tiles); /* tiles of even sizes */
                switch (n) {
                case 1: gpt2__tile16_avx2<1>(a, w, o, rows, t); break;
                case 2: gpt2__tile16_avx2<2>(a, w, o, rows, t); break;
                case 3: gpt2__tile16_avx2<3>(a, w, o, rows, t); break;
                case 4: gpt2__tile16_avx2<4>(a, w, o, rows, t); break;
                case 5: gpt2__tile16_avx2<5>(a, w, o, rows, t); break;
                default: gpt2__tile16_avx2<NT>(a, w, o, rows, t); break;
                }
            }
        }
    }
}

/* Decode's rows streamed on both x86 sets: float rows by gpt2__row_avx2, prefetched as far ahead
   as gpt2__float_rows_ahead says; q8_0 and q4_0 rows against int8 activations. */
template <int AHEAD>
static void gpt2__matmul_streamed_x86(const gpt2__matmul_args& a, int64_t o_begin, int64_t o_end) {
    gpt2__matmul_by_rows<gpt2__dot_blocks_avx2<gpt2__q8_block_bytes, gpt2__block_dot_q8_avx2>, gpt2__dot_blocks_avx2<gpt2__q4_block_bytes, gpt2__block_dot_q4_avx2>,
                         gpt2__dot_row_avx2<AHEAD>>(a, o_begin, o_end);
}
/* Float decode rows whose values and activations (4 bytes a value more) overflow AMD's L1 data
   cache go gpt2__rows_together at a time: alone, each row's activations, read again for every
   row, left L1 to the row's weights, and the rows streamed at 19-20 GB/s against 31-33 for rows
   that fit (Zen 4, one thread from DRAM: f32 rows of 5120 and 6400 values; f16 and bf16 rows of
   6400, prefetched 16 KB ahead, 21 GB/s). Together the activations are read from L2 once for
   all the rows: f32 rows three at a time stream at 23-26 GB/s, f16 and bf16 rows two at a time
   (with the same prefetch) at 25-26 (three: 22). Rows that fit stream slower this way (f32 1280
   values: 16 GB/s; f16 5120: 0.95-1.0x). Six f32 rows gave a little more (26.5 GB/s) but need
   AVX-512's 32 registers. Intel's cores are not measured: they keep the rows alone
   (docs/PERFORMANCE.md, Kernel notes). */
static constexpr int gpt2__rows_together(uint32_t type) { return type == GPT2_TYPE_F32 ? 3 : 2; }
static bool gpt2__rows_go_together(uint32_t type, int64_t cols) {
    static const int64_t l1_data_bytes = [] {
        unsigned r[4];
        gpt2__cpuid(0x80000000u, 0, r);
        if (gpt2__intel_cpu() || r[0] < 0x80000005u) return (int64_t)0;
        gpt2__cpuid(0x80000005u, 0, r); /* AMD: ECX bits 31-24, the L1 data cache in KB */
        return (int64_t)(r[2] >> 24) * 1024;
    }();
    const bool float_row = type == GPT2_TYPE_F32 || type == GPT2_TYPE_F16 || type == GPT2_TYPE_BF16;
    return float_row && l1_data_bytes > 0 && ((type == GPT2_TYPE_F32 ? 4 : 2) + 4) * cols > l1_data_bytes;
}
template <uint32_t TYPE>
GPT2__AVX2 static void gpt2__matmul_rows_together_avx2(const gpt2__matmul_args& a, int64_t o_begin, int64_t o_end) {
    constexpr int R = gpt2__rows_together(TYPE), AHEAD = gpt2__long_rows_ahead(TYPE);
    const int64_t K = a.W->cols;
    for (int64_t o = o_begin; o < o_end; o += R) {
        const int n = (int)std::min<int64_t>(R, o_end - o);
        const uint8_t* rows[R];
        for (int r = 0; r < n; r++) rows[r] = a.W->data + (size_t)(o + r) * a.W->row_bytes;
        float dots[R];
        if (n == R) gpt2__rows_avx2<TYPE, R, AHEAD>(rows, a.x, K, dots);
        else
            for (int r = 0; r < n; r++) dots[r] = gpt2__row_avx2<TYPE, AHEAD>(rows[r], a.x, K);
        for (int r = 0; r < n; r++) gpt2__store_out(a, 0, o + r, dots[r]);
    }
}
static void gpt2__matmul_streamed_x86(const gpt2__matmul_args& a, int64_t o_begin, int64_t o_end) {
    if (a.T == 1 && gpt2__rows_go_together(a.W->type, a.W->cols)) switch (a.W->type) {
        case GPT2_TYPE_F32: return gpt2__matmul_rows_together_avx2<GPT2_TYPE_F32>(a, o_begin, o_end);
        case GPT2_TYPE_F16: return gpt2__matmul_rows_together_avx2<GPT2_TYPE_F16>(a, o_begin, o_end);
        default: return gpt2__matmul_rows_together_avx2<GPT2_TYPE_BF16>(a, o_begin, o_end);
        }
    switch (gpt2__float_rows_ahead(a.W->type, a.W->cols)) {
    case gpt2__decode_ahead_bytes: return gpt2__matmul_streamed_x86<gpt2__decode_ahead_bytes>(a, o_begin, o_end);
    case gpt2__wide_rows_ahead_bytes: return gpt2__matmul_streamed_x86<gpt2__wide_rows_ahead_bytes>(a, o_begin, o_end);
    default: return gpt2__matmul_streamed_x86<0>(a, o_begin, o_end);
    }
}
GPT2__AVX2 static void gpt2__matmul_rows_avx2(const gpt2__matmul_args& a, int64_t o_begin, int64_t o_end, float* panel) {
    if (a.strategy == GPT2__STREAM_INT8 && a.W->type == GPT2_TYPE_Q4_0) return gpt2__matmul_q4_rows_avx2(a, o_begin, o_end, (uint8_t*)panel);
    gpt2__matmul_streamed_x86(a, o_begin, o_end);
}

GPT2__AVX2 static void gpt2__quantize_q8_avx2(int8_t* q, float* scale, const float* x, int64_t n) {
    const int B = gpt2__q8_block_values;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t b = 0; b < n / B; b++) {
        __m256 v[4], m = _mm256_setzero_ps();
        for (int i = 0; i < 4; i++) {
            v[i] = _mm256_loadu_ps(x + B * b + 8 * i);
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
        _mm256_storeu_si256((__m256i*)(q + B * b), i8);
    }
}

/* e^x as contract.h describes it (gpt2__exp_poly), 8 lanes; 2^n built in the exponent bits. */
GPT2__AVX2 static inline __m256 gpt2__exp_avx2(__m256 x) {
    x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(gpt2__exp_max)), _mm256_set1_ps(gpt2__exp_min));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(gpt2__log2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(gpt2__ln2_hi), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(gpt2__ln2_lo), r);
    __m256 p = _mm256_set1_ps(gpt2__exp_poly[0]);
    GPT2__UNROLL
    for (size_t i = 1; i < std::size(gpt2__exp_poly); i++) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(gpt2__exp_poly[i]));
    p = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

GPT2__AVX2 static inline __m256 gpt2__gelu8_avx2(__m256 v, bool tanh_form) {
    __m256 g;
    if (tanh_form) {
        const __m256 u = _mm256_mul_ps(_mm256_set1_ps(gpt2__sqrt_2_over_pi), _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(gpt2__gelu_cubic), v), _mm256_mul_ps(v, v), v));
        const __m256 e = gpt2__exp_avx2(_mm256_add_ps(u, u));
        g = _mm256_sub_ps(_mm256_set1_ps(1.0f), _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, _mm256_set1_ps(1.0f))));
    } else {
        const __m256 sign = _mm256_and_ps(v, _mm256_set1_ps(-0.0f));
        const __m256 z = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), _mm256_mul_ps(v, _mm256_set1_ps(gpt2__sqrt_half)));
        const __m256 t = _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_fmadd_ps(_mm256_set1_ps(gpt2__erf_p), z, _mm256_set1_ps(1.0f)));
        __m256 p = _mm256_set1_ps(gpt2__erf_poly[0]);
        GPT2__UNROLL
        for (size_t i = 1; i < std::size(gpt2__erf_poly); i++) p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(gpt2__erf_poly[i]));
        p = _mm256_mul_ps(p, t);
        const __m256 e = gpt2__exp_avx2(_mm256_sub_ps(_mm256_setzero_ps(), _mm256_mul_ps(z, z)));
        g = _mm256_or_ps(_mm256_fnmadd_ps(p, e, _mm256_set1_ps(1.0f)), sign); /* erf is odd */
    }
    const __m256 half_v = _mm256_mul_ps(_mm256_set1_ps(0.5f), v);
    return _mm256_fmadd_ps(half_v, g, half_v);
}

/* F16C's conversion rounds to nearest even, as gpt2__f32_to_f16. */
GPT2__AVX2 static void gpt2__to_f16_avx2(uint16_t* dst, const float* x, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm_storeu_si128((__m128i*)(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    gpt2__to_f16_scalar(dst + i, x + i, n - i);
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

/* gpt2__layer_norm with the sums' 8 chains in two vectors of 4 doubles, in the same order, and
   the same arithmetic per value (no fused multiply-adds): the scalar results bit for bit where
   the scalar code is not contracted into FMAs. */
GPT2__AVX2 static void gpt2__layer_norm_avx2(float* out, const float* x, const float* weight, const float* bias, int n, float eps) {
    const int n8 = n / 8 * 8;
    alignas(32) double chain[8];
    __m256d lo = _mm256_setzero_pd(), hi = lo;
    for (int i = 0; i < n8; i += 8) {
        lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm_loadu_ps(x + i)));
        hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm_loadu_ps(x + i + 4)));
    }
    _mm256_store_pd(chain, lo);
    _mm256_store_pd(chain + 4, hi);
    for (int i = n8; i < n; i++) chain[i % 8] += (double)x[i];
    const double mean = (((chain[0] + chain[1]) + (chain[2] + chain[3])) + ((chain[4] + chain[5]) + (chain[6] + chain[7]))) / n;
    const __m256d m = _mm256_set1_pd(mean);
    lo = hi = _mm256_setzero_pd();
    for (int i = 0; i < n8; i += 8) {
        const __m256d a = _mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(x + i)), m), b = _mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(x + i + 4)), m);
        lo = _mm256_add_pd(lo, _mm256_mul_pd(a, a));
        hi = _mm256_add_pd(hi, _mm256_mul_pd(b, b));
    }
    _mm256_store_pd(chain, lo);
    _mm256_store_pd(chain + 4, hi);
    for (int i = n8; i < n; i++) chain[i % 8] += (x[i] - mean) * (x[i] - mean);
    const double var = (((chain[0] + chain[1]) + (chain[2] + chain[3])) + ((chain[4] + chain[5]) + (chain[6] + chain[7]))) / n;
    const float inv_std = (float)(1.0 / std::sqrt(var + eps));
    const __m256 s = _mm256_set1_ps(inv_std);
    for (int i = 0; i < n8; i += 8) {
        const __m256 centered = _mm256_set_m128(_mm256_cvtpd_ps(_mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(x + i + 4)), m)),
                                                _mm256_cvtpd_ps(_mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(x + i)), m)));
        const __m256 scaled = _mm256_mul_ps(_mm256_mul_ps(centered, s), _mm256_loadu_ps(weight + i));
        _mm256_storeu_ps(out + i, _mm256_add_ps(scaled, bias ? _mm256_loadu_ps(bias + i) : _mm256_setzero_ps()));
    }
    for (int i = n8; i < n; i++) out[i] = (float)(x[i] - mean) * inv_std * weight[i] + (bias ? bias[i] : 0.0f);
}

GPT2__AVX2 static inline __m256 gpt2__kv8_avx2(const float* p) { return _mm256_loadu_ps(p); }
GPT2__AVX2 static inline __m256 gpt2__kv8_avx2(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)p)); }

/* scores[j] = exp(scores[j] - max) in place, for j < n; *max_score and *sum receive the max and
   the sum of the exponentials (the softmax's two statistics). */
GPT2__AVX2 static void gpt2__exp_scores_avx2(float* scores, int n, float* max_score, float* sum) {
    float m = -INFINITY;
    for (int j = 0; j < n; j++) m = std::max(m, scores[j]);
    const __m256 vmax = _mm256_set1_ps(m);
    __m256 vsum = _mm256_setzero_ps();
    int j = 0;
    for (; j + 8 <= n; j += 8) {
        const __m256 e = gpt2__exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(scores + j), vmax));
        _mm256_storeu_ps(scores + j, e);
        vsum = _mm256_add_ps(vsum, e);
    }
    float total = gpt2__hsum_avx2(vsum);
    if (j < n) {
        float tail[8];
        for (int i = 0; i < 8; i++) tail[i] = j + i < n ? scores[j + i] - m : -INFINITY;
        _mm256_storeu_ps(tail, gpt2__exp_avx2(_mm256_loadu_ps(tail)));
        for (int i = 0; j + i < n; i++) {
            scores[j + i] = tail[i];
            total += tail[i];
        }
    }
    *max_score = m;
    *sum = total;
}

/* Dimensions of the queries transposed at a time, and keys whose scores are summed at a time, in
   the x86 sets' prefill attention. */
static const int gpt2__attend_dims = 128, gpt2__attend_keys = 8;

/* A key's values from p (floats, or an f16 cache's) into dst as floats, n of them. */
template <class KV>
GPT2__AVX2 static inline void gpt2__kv_to_float_avx2(float* dst, const KV* p, int n) {
    int d = 0;
    for (; d + 8 <= n; d += 8) _mm256_storeu_ps(dst + d, gpt2__kv8_avx2(p + d));
    for (; d < n; d++) dst[d] = gpt2__load_kv(p, (size_t)d);
}

/* gpt2__attend_scalar's block of queries, 8 at a time, a query in each vector lane (lanes past
   n_queries idle), as the AVX-512 set's gpt2__attend_avx512 (which says why) with 8 lanes: the
   scores of 8 keys from the transposed queries and each key's values broadcast; the softmax lane
   by lane; the values weighted for 4 queries at a time, 16 dimensions a pass, those past a
   multiple of 8 in scalar. */
template <class KV>
GPT2__AVX2 static void gpt2__attend_avx2(float* out, size_t out_stride, const float* q, size_t q_stride, gpt2__kv_rows<KV> k, gpt2__kv_rows<KV> v, int n_keys, int n_queries, int head_dim, float* scores) {
    constexpr int DC = gpt2__attend_dims, KB = gpt2__attend_keys;
    const int D = head_dim, d8 = D / 8 * 8;
    alignas(32) float qt[DC * 8]; /* qt[8 d + i]: query i's dimension d0 + d */
    alignas(32) float kf[sizeof(KV) == 2 ? KB * DC : 1];
    for (int h = 0; h < n_queries; h += 8) {
        const int nq = std::min(8, n_queries - h), first = n_keys + h, keys = first + nq - 1; /* the keys of the half's first and last query */
        const float* qh = q + (size_t)h * q_stride;
        for (int d0 = 0; d0 < D; d0 += DC) {
            const int dn = std::min(DC, D - d0);
            for (int c = 0; c < dn; c += 8) {
                __m256 rows[8];
                GPT2__UNROLL
                for (int i = 0; i < 8; i++) {
                    alignas(32) float row[8] = {0, 0, 0, 0, 0, 0, 0, 0};
                    if (i < nq) std::memcpy(row, qh + (size_t)i * q_stride + d0 + c, (size_t)std::min(8, dn - c) * 4);
                    rows[i] = _mm256_load_ps(row);
                }
                gpt2__transpose8_avx2(rows);
                GPT2__UNROLL
                for (int d = 0; d < 8; d++)
                    if (c + d < dn) _mm256_store_ps(qt + 8 * (c + d), rows[d]);
            }
            for (int j0 = 0; j0 < keys; j0 += KB) {
                const float* kr[KB];
                for (int r = 0; r < KB; r++) {
                    const KV* key = k.row(std::min(j0 + r, keys - 1)) + d0;
                    if constexpr (sizeof(KV) == 4) {
                        kr[r] = key;
                    } else {
                        gpt2__kv_to_float_avx2(kf + r * DC, key, dn);
                        kr[r] = kf + r * DC;
                    }
                }
                __m256 acc[KB];
                GPT2__UNROLL
                for (int r = 0; r < KB; r++) acc[r] = _mm256_setzero_ps();
                for (int d = 0; d < dn; d++) {
                    const __m256 qv = _mm256_load_ps(qt + 8 * d);
                    GPT2__UNROLL
                    for (int r = 0; r < KB; r++) acc[r] = _mm256_fmadd_ps(qv, _mm256_broadcast_ss(kr[r] + d), acc[r]);
                }
                GPT2__UNROLL /* a fixed count, so the accumulators stay in registers */
                for (int r = 0; r < KB; r++) {
                    float* row = scores + 8 * (size_t)(j0 + r);
                    if (j0 + r < keys) _mm256_storeu_ps(row, d0 == 0 ? acc[r] : _mm256_add_ps(_mm256_loadu_ps(row), acc[r]));
                }
            }
        }
        /* the softmax, lane by lane: query h + i sees keys j < first + i */
        const __m256 scale = _mm256_set1_ps(1.0f / std::sqrt((float)D));
        const __m256i seen = _mm256_add_epi32(_mm256_set1_epi32(first), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        __m256 vmax = _mm256_set1_ps(-INFINITY), vsum = _mm256_setzero_ps();
        for (int j = 0; j < keys; j++) {
            const __m256 s = _mm256_mul_ps(_mm256_loadu_ps(scores + 8 * (size_t)j), scale);
            _mm256_storeu_ps(scores + 8 * (size_t)j, s);
            vmax = _mm256_blendv_ps(vmax, _mm256_max_ps(vmax, s), _mm256_castsi256_ps(_mm256_cmpgt_epi32(seen, _mm256_set1_epi32(j))));
        }
        for (int j = 0; j < keys; j++) {
            const __m256 m = _mm256_castsi256_ps(_mm256_cmpgt_epi32(seen, _mm256_set1_epi32(j)));
            const __m256 e = _mm256_and_ps(m, gpt2__exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(scores + 8 * (size_t)j), vmax)));
            _mm256_storeu_ps(scores + 8 * (size_t)j, e);
            vsum = _mm256_add_ps(vsum, e);
        }
        alignas(32) float inv_sum[8];
        _mm256_store_ps(inv_sum, _mm256_div_ps(_mm256_set1_ps(1.0f), vsum));
        for (int g = 0; g < nq; g += 4) {
            const int g_keys = first + std::min(g + 3, nq - 1); /* the group's last query's keys */
            float* o = out + (size_t)(h + g) * out_stride;
            for (int d0 = 0; d0 < d8; d0 += 16) {
                const bool both = d0 + 16 <= d8;
                __m256 acc[4][2]; /* query g + i, dimensions d0 + 8c .. */
                GPT2__UNROLL
                for (int i = 0; i < 4; i++) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
                for (int j = 0; j < g_keys; j++) {
                    const KV* vj = v.row(j) + d0;
                    const __m256 v0 = gpt2__kv8_avx2(vj), v1 = both ? gpt2__kv8_avx2(vj + 8) : _mm256_setzero_ps();
                    const float* p = scores + 8 * (size_t)j + g;
                    GPT2__UNROLL
                    for (int i = 0; i < 4; i++) {
                        const __m256 pi = _mm256_broadcast_ss(p + i);
                        acc[i][0] = _mm256_fmadd_ps(pi, v0, acc[i][0]);
                        acc[i][1] = _mm256_fmadd_ps(pi, v1, acc[i][1]);
                    }
                }
                GPT2__UNROLL /* a fixed count, so the accumulators stay in registers */
                for (int i = 0; i < 4; i++)
                    if (g + i < nq) {
                        const __m256 inv = _mm256_broadcast_ss(inv_sum + g + i);
                        _mm256_storeu_ps(o + (size_t)i * out_stride + d0, _mm256_mul_ps(acc[i][0], inv));
                        if (both) _mm256_storeu_ps(o + (size_t)i * out_stride + d0 + 8, _mm256_mul_ps(acc[i][1], inv));
                    }
            }
            for (int i = 0; i < 4 && g + i < nq; i++) /* the last dimensions */
                for (int d = d8; d < D; d++) {
                    float sum = 0.0f;
                    for (int j = 0; j < g_keys; j++) sum += scores[8 * (size_t)j + g + i] * gpt2__load_kv(v.row(j), (size_t)d);
                    o[(size_t)i * out_stride + d] = sum * inv_sum[g + i];
                }
        }
    }
}

/* Decode attention takes the keys in blocks of this many: per head, a block's dot products
   share each load of the query (one reduction of 8), and its values are added to the head's
   outputs held in registers; meanwhile the next block of the cache is prefetched. */
static const int gpt2__attend_block_keys = 8;
static_assert(gpt2__kv_row_group % gpt2__attend_block_keys == 0, "a block of keys lies in one of the KV cache's blocks");

/* Prefetches share h of H of the rows of the block after the one from key j0 of rows [first,
   first + n_keys) of `cache` (rows one after another: `first` is a multiple of gpt2__kv_row_group,
   contract.h), into L2. A block's rows are read head by head, across
   its rows, an order the hardware prefetcher does not follow from DRAM: each head's turn fetches
   a twelfth of the next block. Into L1 the same prefetches ran 1.6x slower: a core tracks fewer
   misses to L1 than to L2 (docs/PERFORMANCE.md, Kernel notes). Always inlined, as
   gpt2__prefetch_row_ahead is, or GCC deletes the calls. */
template <class KV>
GPT2__ALWAYS_INLINE static void gpt2__prefetch_next_block(gpt2__kv_rows<KV> cache, int first, int j0, int n_keys, int h, int H) {
    const int next = j0 + gpt2__attend_block_keys, end = std::min(next + gpt2__attend_block_keys, n_keys);
    if (next >= end) return;
    const char* from = (const char*)cache.row(first + next);
    const size_t lines = ((size_t)(end - next) * cache.stride * sizeof(KV) + 63) / 64;
    for (size_t l = lines * h / H, last = lines * (h + 1) / H; l < last; l++) _mm_prefetch(from + 64 * l, _MM_HINT_T1);
}

/* gpt2__attend_rows_scalar in blocks of gpt2__attend_block_keys keys, each head's scores and
   then its values key by key within a block, so every output's sum runs in key order, as one
   stream of the cache would; the dimensions past a multiple of 8 in scalar. The AVX-512 set uses
   this kernel too: it streams the cache faster than 512-bit loads (docs/PERFORMANCE.md). */
template <class KV>
GPT2__AVX2 static void gpt2__attend_rows_avx2(float* out, float* stats, const float* q, gpt2__kv_rows<KV> k, gpt2__kv_rows<KV> v, int first, int n_keys, int n_head,
                                             int head_dim, float* scratch) {
    constexpr int B = gpt2__attend_block_keys;
    const int H = n_head, D = head_dim, d8 = D / 8 * 8;
    const size_t row = (size_t)H * D, stride = k.stride;
    const float scale = 1.0f / std::sqrt((float)D);
    float* probs = scratch; /* head h's scores, then probabilities, at probs + h * n_keys */
    for (int j0 = 0; j0 < n_keys; j0 += B) {
        const int n = std::min(B, n_keys - j0);
        const KV* block = k.row(first + j0); /* its n rows, one after another */
        for (int h = 0; h < H; h++) {
            if (j0 + B < n_keys) gpt2__prefetch_next_block(k, first, j0, n_keys, h, H);
            else gpt2__prefetch_next_block(v, first, -B, n_keys, h, H); /* the last block of keys fetches the first of values */
            const float* qh = q + (size_t)h * D;
            const KV* key[B]; /* past the last key, copies of it (results unused) */
            for (int i = 0; i < B; i++) key[i] = block + (size_t)std::min(i, n - 1) * stride + (size_t)h * D;
            __m256 acc[B];
            GPT2__UNROLL
            for (int i = 0; i < B; i++) acc[i] = _mm256_setzero_ps();
            for (int d = 0; d < d8; d += 8) {
                const __m256 qv = _mm256_loadu_ps(qh + d);
                GPT2__UNROLL
                for (int i = 0; i < B; i++) acc[i] = _mm256_fmadd_ps(qv, gpt2__kv8_avx2(key[i] + d), acc[i]);
            }
            float s[B];
            _mm256_storeu_ps(s, gpt2__hsum8_avx2(acc));
            for (int i = 0; i < n; i++) {
                for (int d = d8; d < D; d++) s[i] += qh[d] * gpt2__load_kv(key[i], (size_t)d);
                probs[(size_t)h * n_keys + j0 + i] = s[i] * scale;
            }
        }
    }
    for (int h = 0; h < H; h++) { /* softmax of each head's scores, in place */
        float* p = probs + (size_t)h * n_keys;
        gpt2__exp_scores_avx2(p, n_keys, &stats[2 * h], &stats[2 * h + 1]);
        const float inv_sum = 1.0f / stats[2 * h + 1];
        for (int j = 0; j < n_keys; j++) p[j] *= inv_sum;
    }
    for (size_t i = 0; i < row; i++) out[i] = 0.0f;
    for (int j0 = 0; j0 < n_keys; j0 += B) {
        const int n = std::min(B, n_keys - j0);
        const KV* block = v.row(first + j0);
        for (int h = 0; h < H; h++) {
            gpt2__prefetch_next_block(v, first, j0, n_keys, h, H);
            const float* p = probs + (size_t)h * n_keys + j0;
            const KV* vh = block + (size_t)h * D;
            float* oh = out + (size_t)h * D;
            int d = 0;
            for (; d + 32 <= d8; d += 32) { /* 32 dimensions in registers through the block */
                __m256 acc[4];
                GPT2__UNROLL
                for (int c = 0; c < 4; c++) acc[c] = _mm256_loadu_ps(oh + d + 8 * c);
                for (int i = 0; i < n; i++) {
                    const __m256 pi = _mm256_set1_ps(p[i]);
                    GPT2__UNROLL
                    for (int c = 0; c < 4; c++) acc[c] = _mm256_fmadd_ps(pi, gpt2__kv8_avx2(vh + (size_t)i * stride + d + 8 * c), acc[c]);
                }
                GPT2__UNROLL
                for (int c = 0; c < 4; c++) _mm256_storeu_ps(oh + d + 8 * c, acc[c]);
            }
            for (; d < d8; d += 8) {
                __m256 acc = _mm256_loadu_ps(oh + d);
                for (int i = 0; i < n; i++) acc = _mm256_fmadd_ps(_mm256_set1_ps(p[i]), gpt2__kv8_avx2(vh + (size_t)i * stride + d), acc);
                _mm256_storeu_ps(oh + d, acc);
            }
            for (; d < D; d++)
                for (int i = 0; i < n; i++) oh[d] += p[i] * gpt2__load_kv(vh + (size_t)i * stride, (size_t)d);
        }
    }
}

#endif /* GPT2__X86 */

/* ---- src/cpu/kernels/avx512_rows.h ---- */
/* The AVX-512 set (F, BW, VL, DQ, VNNI), part 1 of 4: loads every part shares, and decode's
   streamed q8_0 and q4_0 rows against int8 activations (GPT2__STREAM_INT8). avx512.h is the
   set's entry; x86_prefill.h has the target macros and the prefill driver shared with AVX2. */

#if defined(GPT2__X86)

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

/* ---- Decode: q8_0 and q4_0 rows against one row of int8 activations --------------------------

   vpdpbusd multiplies unsigned bytes by signed ones, 4 products into each int32 lane. The weights
   go in as unsigned w + offset (q8_0's values xor 0x80: offset 128; q4_0's nibbles as they are:
   offset 8) and x as it is, so a lane's sum is offset x (the sum of its 4 x) too high: a term of
   x alone, computed once per call (gpt2__prepare_x_avx512) and the lane's starting value, so the
   sum stays exact in int32 and a row pays nothing for it. Blocks go 4 at a time: the 8 lanes a
   block fills are added in pairs (exactly) into one vector of 4 lanes a block, which is
   converted, scaled and accumulated once. */

/* Rows a decode step takes together, each group's activations loaded once for all of them: 4
   q4_0 rows, 1 q8_0 row. From DRAM, interleaved rows defeat the hardware prefetcher, so each row
   prefetches the bytes gpt2__decode_prefetch_bytes ahead of it (docs/PERFORMANCE.md, Kernel
   notes). */
template <uint32_t TYPE>
static constexpr int gpt2__decode_rows = TYPE == GPT2_TYPE_Q4_0 ? 4 : 1;
static const int gpt2__decode_prefetch_bytes = 8192;

/* The block (0-3) of each lane of a group's sums, after gpt2__dot4_avx512's pairing. */
GPT2__AVX512 static inline __m512i gpt2__lane_blocks_avx512() { return _mm512_setr_epi32(0, 0, 2, 2, 0, 0, 2, 2, 1, 1, 3, 3, 1, 1, 3, 3); }

/* Bytes of the activations' part of one group of 4 blocks: the two vectors of lane offsets
   (-offset x the lane's 4 x), then the 4 activation scales in the lanes' order. */
static const size_t gpt2__x4_bytes = 192;

template <uint32_t TYPE>
GPT2__AVX512 static void gpt2__prepare_x_avx512(uint8_t* dst, const int8_t* xq, const float* xs, int64_t groups) {
    const __m512i offset = _mm512_set1_epi8(TYPE == GPT2_TYPE_Q4_0 ? 8 : (char)0x80), zero = _mm512_setzero_si512();
    for (int64_t g = 0; g < groups; g++, dst += gpt2__x4_bytes) {
        for (int half = 0; half < 2; half++)
            _mm512_storeu_si512(dst + 64 * half, _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, offset, _mm512_loadu_si512(xq + 128 * g + 64 * half))));
        _mm512_storeu_ps(dst + 128, _mm512_permutexvar_ps(gpt2__lane_blocks_avx512(), _mm512_castps128_ps512(_mm_loadu_ps(xs + 4 * g))));
    }
}

/* Two consecutive blocks' 64 weights at p as unsigned bytes (w + offset), first block low. */
template <uint32_t TYPE>
GPT2__AVX512 static inline __m512i gpt2__w64_avx512(const uint8_t* p) {
    if constexpr (TYPE == GPT2_TYPE_Q4_0) { /* each block's 16 bytes in two 128-bit lanes, the second shifted to its high nibbles */
        const __m512i both = _mm512_mask_broadcast_i32x4(_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i*)gpt2__q4_nibbles(p))), (__mmask16)0xff00,
                                                         _mm_loadu_si128((const __m128i*)gpt2__q4_nibbles(p + gpt2__q4_block_bytes)));
        return _mm512_and_si512(_mm512_mask_srli_epi16(both, (__mmask32)0xff00ff00u, both, 4), _mm512_set1_epi8(15));
    } else {
        const __m512i w = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i*)gpt2__q8_values(p))),
                                             _mm256_loadu_si256((const __m256i*)gpt2__q8_values(p + gpt2__q8_block_bytes)), 1);
        return _mm512_xor_si512(w, _mm512_set1_epi8((char)0x80));
    }
}

/* The exact int32 sums of 4 blocks at p times their 128 activations (x01, x23), 4 lanes a block
   (lane i: block gpt2__lane_blocks_avx512); start01, start23: the lanes' offsets. */
template <uint32_t TYPE>
GPT2__AVX512 static inline __m512i gpt2__dot4_avx512(const uint8_t* p, __m512i x01, __m512i x23, __m512i start01, __m512i start23) {
    const int BYTES = TYPE == GPT2_TYPE_Q4_0 ? gpt2__q4_block_bytes : gpt2__q8_block_bytes;
    const __m512 d01 = _mm512_castsi512_ps(_mm512_dpbusd_epi32(start01, gpt2__w64_avx512<TYPE>(p), x01));
    const __m512 d23 = _mm512_castsi512_ps(_mm512_dpbusd_epi32(start23, gpt2__w64_avx512<TYPE>(p + 2 * BYTES), x23));
    return _mm512_add_epi32(_mm512_castps_si512(_mm512_shuffle_ps(d01, d23, 0x88)), _mm512_castps_si512(_mm512_shuffle_ps(d01, d23, 0xdd)));
}

/* The weight scales of the 4 blocks at p in the lanes' order: picked from the block bytes by
   one word permutation (q4_0's 4 blocks, 72 bytes, hold all 4 in their first 64; q8_0's 136 in
   their first 128). */
template <uint32_t TYPE>
GPT2__AVX512 static inline __m512 gpt2__scales4_avx512(const uint8_t* p) {
    const int BYTES = TYPE == GPT2_TYPE_Q4_0 ? gpt2__q4_block_bytes : gpt2__q8_block_bytes;
    const __m512i words = _mm512_castsi256_si512(_mm512_cvtepi32_epi16(_mm512_mullo_epi32(gpt2__lane_blocks_avx512(), _mm512_set1_epi32(BYTES / 2))));
    const __m512i first = _mm512_loadu_si512(p);
    if constexpr (TYPE == GPT2_TYPE_Q4_0) return _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(words, first)));
    else return _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutex2var_epi16(first, words, _mm512_loadu_si512(p + 64))));
}

/* The int32 sums of one q8_0 block times its 32 quantized activations, 8 lanes. */
GPT2__AVX512 static inline __m256i gpt2__dot1_q8_avx512(const uint8_t* p, const int8_t* xq) {
    const __m256i x = _mm256_loadu_si256((const __m256i*)xq), w = _mm256_loadu_si256((const __m256i*)gpt2__q8_values(p)), zero = _mm256_setzero_si256();
    return _mm256_dpbusd_epi32(zero, _mm256_abs_epi8(w), _mm256_mask_sub_epi8(x, _mm256_movepi8_mask(w), zero, x));
}

/* The int32 sums of one q4_0 block times its 32 quantized activations, 8 lanes. */
GPT2__AVX512 static inline __m256i gpt2__dot1_q4_avx512(const uint8_t* p, const int8_t* xq) {
    const __m128i packed = _mm_loadu_si128((const __m128i*)gpt2__q4_nibbles(p));
    const __m256i w = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(packed, 4), packed), _mm256_set1_epi8(15));
    const __m256i x = _mm256_loadu_si256((const __m256i*)xq), zero = _mm256_setzero_si256();
    return _mm256_sub_epi32(_mm256_dpbusd_epi32(zero, w, x), _mm256_dpbusd_epi32(zero, _mm256_set1_epi8(8), x));
}

/* acc[r] + the 4 blocks from block b of R rows (ld bytes apart) times x, scaled; x4: the
   group's prepared activations, loaded once for the R rows. */
template <uint32_t TYPE, int R>
GPT2__AVX512 static inline void gpt2__group_int8_avx512(__m512* acc, const uint8_t* row, size_t ld, int64_t b, const int8_t* xq, const uint8_t* x4) {
    const int BYTES = TYPE == GPT2_TYPE_Q4_0 ? gpt2__q4_block_bytes : gpt2__q8_block_bytes;
    const __m512i x01 = _mm512_loadu_si512(xq + gpt2__q8_block_values * b), x23 = _mm512_loadu_si512(xq + gpt2__q8_block_values * b + 64);
    const __m512i start01 = _mm512_loadu_si512(x4), start23 = _mm512_loadu_si512(x4 + 64);
    const __m512 x_scales = _mm512_loadu_ps(x4 + 128);
    GPT2__UNROLL
    for (int r = 0; r < R; r++) {
        const uint8_t* p = row + r * ld + BYTES * b;
        for (int l = 0; l < 4 * BYTES; l += 64) _mm_prefetch((const char*)p + gpt2__decode_prefetch_bytes + l, _MM_HINT_T0);
        const __m512 scales = _mm512_mul_ps(gpt2__scales4_avx512<TYPE>(p), x_scales);
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(gpt2__dot4_avx512<TYPE>(p, x01, x23, start01, start23)), scales, acc[r]);
    }
}

/* out[r] = row r . x for R rows of nb blocks (ld bytes apart); x: quantized by gpt2__quantize_q8
   (xs its scales), its groups of 4 blocks prepared in `prepared`. Each row runs the same
   instructions whatever R is: groups alternate between its two accumulators, up to 3 last
   blocks go one by one. */
template <uint32_t TYPE, int R>
GPT2__AVX512 static void gpt2__dot_int8_rows_avx512(float* out, const uint8_t* row, size_t ld, const int8_t* xq, const float* xs, const uint8_t* prepared, int64_t nb) {
    const int B = gpt2__q8_block_values, BYTES = TYPE == GPT2_TYPE_Q4_0 ? gpt2__q4_block_bytes : gpt2__q8_block_bytes;
    __m512 acc0[R], acc1[R];
    GPT2__UNROLL
    for (int r = 0; r < R; r++) acc0[r] = acc1[r] = _mm512_setzero_ps();
    int64_t b = 0;
    for (; b + 8 <= nb; b += 8) {
        gpt2__group_int8_avx512<TYPE, R>(acc0, row, ld, b, xq, prepared + gpt2__x4_bytes * (b / 4));
        gpt2__group_int8_avx512<TYPE, R>(acc1, row, ld, b + 4, xq, prepared + gpt2__x4_bytes * (b / 4 + 1));
    }
    if (b + 4 <= nb) {
        gpt2__group_int8_avx512<TYPE, R>(acc0, row, ld, b, xq, prepared + gpt2__x4_bytes * (b / 4));
        b += 4;
    }
    GPT2__UNROLL
    for (int r = 0; r < R; r++) {
        float sum = _mm512_reduce_add_ps(_mm512_add_ps(acc0[r], acc1[r]));
        for (int64_t k = b; k < nb; k++) {
            const uint8_t* p = row + r * ld + BYTES * k;
            const __m256i d = TYPE == GPT2_TYPE_Q4_0 ? gpt2__dot1_q4_avx512(p, xq + B * k) : gpt2__dot1_q8_avx512(p, xq + B * k);
            sum += (float)_mm512_reduce_add_epi32(_mm512_zextsi256_si512(d)) * (_cvtsh_ss(gpt2__q8_scale_f16(p)) * xs[k]);
        }
        out[r] = sum;
    }
}

/* Decode's q8_0 and q4_0 rows against the T quantized rows of a.xq: the activations of as many
   tokens as `scratch` (the panel) holds are prepared at once, then every gpt2__decode_rows<TYPE>
   rows meet them together (fewer at the end of the range: each row computed alone the same way). */
template <uint32_t TYPE>
GPT2__AVX512 static void gpt2__matmul_int8_rows_avx512(const gpt2__matmul_args& a, int64_t o_begin, int64_t o_end, uint8_t* scratch) {
    constexpr int rows_per_step = gpt2__decode_rows<TYPE>;
    const gpt2__weight& W = *a.W;
    const int64_t nb = W.cols / gpt2__q8_block_values;
    const size_t prepared = (size_t)(nb / 4) * gpt2__x4_bytes;
    const int tokens_per_pass = prepared ? (int)std::min<size_t>((size_t)a.T, gpt2__panel_floats(W.cols) * 4 / prepared) : a.T;
    for (int t0 = 0; t0 < a.T; t0 += tokens_per_pass) {
        const int n = std::min(tokens_per_pass, a.T - t0);
        for (int t = 0; t < n; t++)
            gpt2__prepare_x_avx512<TYPE>(scratch + t * prepared, a.xq + (size_t)(t0 + t) * W.cols, a.xq_scale + (size_t)(t0 + t) * nb, nb / 4);
        for (int64_t o = o_begin; o < o_end; o += rows_per_step) {
            const int rows = (int)std::min<int64_t>(rows_per_step, o_end - o);
            const uint8_t* row = W.data + (size_t)o * W.row_bytes;
            for (int t = t0; t < t0 + n; t++) {
                const int8_t* xq = a.xq + (size_t)t * W.cols;
                const float* xs = a.xq_scale + (size_t)t * nb;
                const uint8_t* x4 = scratch + (t - t0) * prepared;
                float dots[rows_per_step];
                if (rows == rows_per_step) gpt2__dot_int8_rows_avx512<TYPE, rows_per_step>(dots, row, W.row_bytes, xq, xs, x4, nb);
                else
                    for (int r = 0; r < rows; r++) gpt2__dot_int8_rows_avx512<TYPE, 1>(dots + r, row + r * W.row_bytes, W.row_bytes, xq, xs, x4, nb);
                for (int r = 0; r < rows; r++) gpt2__store_out(a, t, o + r, dots[r]);
            }
        }
    }
}

GPT2__AVX512 static void gpt2__quantize_q8_avx512(int8_t* q, float* scale, const float* x, int64_t n) {
    const int B = gpt2__q8_block_values;
    for (int64_t b = 0; b < n / B; b++) {
        const __m512 v0 = _mm512_loadu_ps(x + B * b), v1 = _mm512_loadu_ps(x + B * b + 16);
        const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
        const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
        scale[b] = amax / 127.0f;
        const __m512 vi = _mm512_set1_ps(inv);
        _mm_storeu_si128((__m128i*)(q + B * b), _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v0, vi))));
        _mm_storeu_si128((__m128i*)(q + B * b + 16), _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v1, vi))));
    }
}

#endif /* GPT2__X86 */

/* ---- src/cpu/kernels/avx512_float_tiles.h ---- */
/* The AVX-512 set, part 2 of 4: prefill's float tiles (GPT2__FLOAT_TILES): rows converted to
   float panels, multiplied with tiles of tokens by x86_prefill.h's driver. */

#if defined(GPT2__X86)

/* One row of K weights (f16, bf16, q8_0 or q4_0) to floats, for a prefill panel. */
GPT2__AVX512 static void gpt2__row_to_float_avx512(float* dst, uint32_t type, const uint8_t* row, int64_t K) {
    /* q8_0 and q4_0 prompts multiply int8 panels on this set (gpt2__strategy_for): their float
       panels are converted only when a test asks for them, by the AVX2 code, to the same floats */
    if (gpt2__int8_weights(type)) return gpt2__row_to_float_avx2(dst, type, row, K);
    for (int64_t k = 0; k < K; k += 16) {
        const __mmask16 m = gpt2__mask16(k, K);
        const __m512 v = type == GPT2_TYPE_F16 ? gpt2__w16_avx512<GPT2_TYPE_F16>(row, k, m) : gpt2__w16_avx512<GPT2_TYPE_BF16>(row, k, m);
        _mm512_mask_storeu_ps(dst + k, m, v);
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

/* out[t * gpt2__tile_rows + r] += w_r . x_t for an R x N tile: R weight rows (ldw apart) and N tokens (ldx
   apart). Token-major, so a full tile's outputs for one token are 4 adjacent floats of y. */
template <int R, int N>
GPT2__AVX512 static void gpt2__tile_avx512(float* out, const float* w, size_t ldw, const float* x, size_t ldx, int64_t K) {
    static_assert(R * N <= 16, "one tile is reduced by one 16-way sum");
    __m512 acc[16];
    GPT2__UNROLL
    for (int i = 0; i < 16; i++) acc[i] = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 16 <= K; k += 16) {
        __m512 xv[N];
        GPT2__UNROLL
        for (int t = 0; t < N; t++) {
            __m512 v = _mm512_loadu_ps(x + t * ldx + k);
            GPT2__IN_REGISTER(v);
            xv[t] = v;
        }
        GPT2__UNROLL
        for (int r = 0; r < R; r++) {
            __m512 wv = _mm512_loadu_ps(w + r * ldw + k);
            GPT2__IN_REGISTER(wv);
            GPT2__UNROLL
            for (int t = 0; t < N; t++) acc[t * gpt2__tile_rows + r] = _mm512_fmadd_ps(wv, xv[t], acc[t * gpt2__tile_rows + r]);
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
            for (int t = 0; t < N; t++) acc[t * gpt2__tile_rows + r] = _mm512_fmadd_ps(wv, xv[t], acc[t * gpt2__tile_rows + r]);
        }
    }
    _mm512_storeu_ps(out, _mm512_add_ps(_mm512_loadu_ps(out), gpt2__hsum16_avx512(acc)));
}

struct gpt2__prefill_avx512 {
    static constexpr int NT = 4; /* 4 rows x 4 tokens: 16 accumulators, one 16-way reduction */
    static_assert(gpt2__tile_rows * NT == 16, "a full tile fills gpt2__hsum16_avx512");
    using Panel = gpt2__float_panel;
    static Panel panel(const gpt2__matmul_args& a, int64_t o, int rows, float* scratch) { return gpt2__float_panel_of<gpt2__row_to_float_avx512, true>(a, o, rows, scratch); }
    template <int R, int N>
    static void tile(float* out, const Panel& w, const gpt2__matmul_args& a, int t, int64_t k0, int64_t kn) {
        const size_t K = (size_t)a.W->cols;
        gpt2__tile_avx512<R, N>(out, w.w + k0, w.ldw, a.x + t * K + k0, K, kn);
    }
};

#endif /* GPT2__X86 */

/* ---- src/cpu/kernels/avx512_panels.h ---- */
/* The AVX-512 set, part 3 of 4: int8 panels (GPT2__INT8_PANELS) and lanes (GPT2__FLOAT16_LANES;
   the bf16 unit's tile is avx512_bf16.h's): the packed layouts, their tiles, and the packing of
   a whole matrix into lanes at load. */

#if defined(GPT2__X86)

/* ---- Int8 panels: q8_0 and q4_0 weights times many rows of int8 activations (contract.h) -----

   vpdpbusd adds 4 byte products into each of 16 int32 lanes. A lane per weight row and an
   activation's 4 bytes broadcast to all, 8 of them give the dot products of 16 rows with one
   32-value block of a token, exact in int32; one conversion, one product of scales and one FMA
   bring the 16 sums to float. A panel of 32 rows (two vectors) times a tile of 6 tokens keeps
   24 block sums and 24 float sums in registers, each weight vector loaded once for 6 tokens and
   each broadcast once for 2 vectors (tiles of 8 on Intel's cores: gpt2__int8_tile_tokens).
   vpdpbusd multiplies unsigned by signed bytes: the weights are stored as w + 128 (a q4_0
   value, nibble - 8, as nibble + 120), and a token's block sum starts from -128 times the sum
   of its values (gpt2__quantize_q8_packed_avx512). Every output is its own lane and its own sum
   over the blocks in order, so no result depends on the panel or tile it falls in, nor on how
   many tokens the tile has.
   A panel: 32 rows, two groups of 16 (a vector's lanes each); per block, the two groups' 8
   vectors of words, interleaved line by line, then the 16 f16 scales of each: 1,088 bytes, 17
   cache lines, the same bytes as the rows' q8_0 blocks, and one stream through memory. A matrix's
   lanes (gpt2__pack_lanes_avx512) are its panels in order, the last one's missing rows repeating
   its last row. A q4_0 matrix's lanes keep its nibbles: 4 vectors a group, vector k's bytes
   holding word k in their low nibbles and word k + 4 in their high ones (a q4_0 block's bytes
   4k..4k+3 as they are), as unsigned values 0-15 whose block sums start from -8 times the sum of
   x: 576 bytes a block, again the rows' own bytes. (A q4_0 product's per-product panel is packed
   as q8_0's, each value as nibble + 120.) */
static const int gpt2__int8_tile_tokens_most = 8; /* the widest int8 tile */
/* Tokens in an int8 tile on this CPU, at most. 2 groups x 6 tokens fit the 32 registers, and
   AMD's cores were measured with them. On Intel's a tile of 8 is faster although GCC then keeps a
   few sums in memory: each weight vector (and each q4_0 vector's nibbles, spread) serves 8
   tokens, and 8 sessions' decode rows go as one tile, not as 4 + 4 (Emerald Rapids, one thread,
   3072 x 768 in cache: q4_0 8 rows 228 -> 278 GMAC/s, 128 rows 259 -> 269; q8_0 16 rows 293 ->
   312, 128 rows 296 -> 314; docs/PERFORMANCE.md, Kernel notes). */
static inline int gpt2__int8_tile_tokens() { return gpt2__intel_cpu() ? gpt2__int8_tile_tokens_most : 6; }
/* How far ahead in its lanes a product of one or two tokens prefetches (Zen 5, from DRAM): a
   lone token streams fastest 4 KB ahead, non-temporally (docs/PERFORMANCE.md, Kernel notes).
   More tokens prefetch the next panel (gpt2__matmul_lanes_avx512). */
static const size_t gpt2__lanes_stream_ahead = 4096;

/* What a tile prefetches of the weights ahead of it: `lines` cache lines from `at` on, spread
   over its steps (blocks, or pairs of columns). Non-temporally, except on Intel's cores: there a
   non-temporal prefetch fills L1 alone (nor is the line kept in L2 or the L3 after it), and
   every tile ran at 0.4-0.5x the speed it has with prefetches into L2 (Emerald Rapids: one
   token's q8_0 lanes from DRAM 7.6 -> 17 GB/s; docs/PERFORMANCE.md, Kernel notes). On Zen 4 and
   5 the two hints decode alike, and non-temporal ones feed tiles of several tokens faster. */
struct gpt2__prefetch_span {
    const char* at;
    size_t lines;
    bool to_l2;
};
static bool gpt2__lanes_prefetch_to_l2() { return gpt2__intel_cpu(); }
/* Lines of span s each of `steps` steps prefetches. */
static inline size_t gpt2__prefetch_per_step(const gpt2__prefetch_span& s, int64_t steps) { return steps ? (s.lines + (size_t)steps - 1) / (size_t)steps : 0; }
/* Step i's lines of span s, per_step of them. */
GPT2__ALWAYS_INLINE static void gpt2__prefetch_step(const gpt2__prefetch_span& s, size_t per_step, int64_t i) {
    for (size_t l = (size_t)i * per_step, end = std::min(s.lines, l + per_step); l < end; l++) {
        if (s.to_l2) _mm_prefetch(s.at + 64 * l, _MM_HINT_T1);
        else _mm_prefetch(s.at + 64 * l, _MM_HINT_NTA);
    }
}
static const size_t gpt2__q8_scales_bytes = 2 * gpt2__lane_rows; /* a group's 16 f16 scales */
/* Vectors of a group's block, and bytes of a panel's block, in the layout of TYPE. */
template <uint32_t TYPE>
static constexpr size_t gpt2__lane_vectors = TYPE == GPT2_TYPE_Q4_0 ? 4 : 8;
template <uint32_t TYPE>
static constexpr size_t gpt2__panel_block_bytes = 2 * (64 * gpt2__lane_vectors<TYPE> + gpt2__q8_scales_bytes);
static_assert(gpt2__panel_rows == 2 * gpt2__lane_rows && gpt2__panel_block_bytes<GPT2_TYPE_Q8_0> == gpt2__panel_rows * (size_t)gpt2__q8_block_bytes &&
                  gpt2__panel_block_bytes<GPT2_TYPE_Q4_0> == gpt2__panel_rows * (size_t)gpt2__q4_block_bytes,
              "a panel is two groups of 16 rows, the rows' own bytes");
/* Where group j (0 or 1) of the panel at p keeps its vectors (128 bytes apart) and its scales. */
static inline const uint8_t* gpt2__q8_group_words(const uint8_t* p, int j) { return p + 64 * j; }
template <uint32_t TYPE>
static inline const uint8_t* gpt2__q8_group_scales(const uint8_t* p, int j) { return p + 128 * gpt2__lane_vectors<TYPE> + gpt2__q8_scales_bytes * j; }
/* The lane that holds row i of a group (gpt2__lane_order's order). */
static inline int gpt2__lane_of_row(int i) { return 4 * (i / 4 == 1 ? 2 : i / 4 == 2 ? 1 : i / 4) + i % 4; }

/* A transpose with in-lane shuffles leaves the rows in lanes 0-3, 8-11, 4-7, 12-15: this turns
   a vector of 16 rows in order into that order, and back. */
GPT2__AVX512 static inline __m512 gpt2__lane_order(__m512 v) { return _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(3, 1, 2, 0)); }

/* The 32 values of the block at p and of the block at q (a q8_0 or a q4_0 block: nibble - 8) as
   signed bytes, p's low. */
template <uint32_t TYPE>
GPT2__AVX512 static inline __m512i gpt2__two_blocks_avx512(const uint8_t* p, const uint8_t* q) {
    if constexpr (TYPE == GPT2_TYPE_Q4_0) { /* each block's 16 bytes in two 128-bit lanes, the second shifted to its high nibbles */
        const __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i*)gpt2__q4_nibbles(p)))),
                                                _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i*)gpt2__q4_nibbles(q))), 1);
        const __m512i nibbles = _mm512_and_si512(_mm512_mask_srli_epi16(both, (__mmask32)0xff00ff00u, both, 4), _mm512_set1_epi8(15));
        return _mm512_sub_epi8(nibbles, _mm512_set1_epi8(8));
    } else {
        return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i*)gpt2__q8_values(p))), _mm256_loadu_si256((const __m256i*)gpt2__q8_values(q)), 1);
    }
}

/* 16 q8_0 or q4_0 rows (row[i]) of nb blocks into group j of the panel at p: per block, vector s
   lane i holds 4-byte word s of the block of row i (in gpt2__lane_order) as w + 128; the
   scales in the same order. Both types' blocks begin with their f16 scale. With `ahead` (else 0),
   the same block of the rows that many bytes on (the next panel's) is prefetched. */
template <uint32_t TYPE>
GPT2__AVX512 static void gpt2__pack_int8_group_avx512(uint8_t* p, int j, const uint8_t* const* row, int64_t nb, size_t ahead) {
    const __m512i to_unsigned = _mm512_set1_epi8((char)0x80);
    uint8_t* dst = (uint8_t*)gpt2__q8_group_words(p, j);
    uint8_t* scales = (uint8_t*)gpt2__q8_group_scales<GPT2_TYPE_Q8_0>(p, j);
    const size_t block_bytes = gpt2__panel_block_bytes<GPT2_TYPE_Q8_0>;
    for (int64_t b = 0; b < nb; b++, dst += block_bytes, scales += block_bytes) {
        const size_t at = (size_t)b * (TYPE == GPT2_TYPE_Q4_0 ? gpt2__q4_block_bytes : gpt2__q8_block_bytes);
        if (ahead)
            for (int i = 0; i < gpt2__lane_rows; i++) _mm_prefetch((const char*)row[i] + at + ahead, _MM_HINT_T1);
        __m128i low = _mm_setzero_si128(), high = _mm_setzero_si128(); /* the scales of lanes 0-7 (rows 0-3, 8-11) and 8-15 (rows 4-7, 12-15) */
        low = _mm_insert_epi16(low, gpt2__q8_scale_f16(row[0] + at), 0); /* immediates: a loop's index is not one for every compiler */
        low = _mm_insert_epi16(low, gpt2__q8_scale_f16(row[1] + at), 1);
        low = _mm_insert_epi16(low, gpt2__q8_scale_f16(row[2] + at), 2);
        low = _mm_insert_epi16(low, gpt2__q8_scale_f16(row[3] + at), 3);
        low = _mm_insert_epi16(low, gpt2__q8_scale_f16(row[8] + at), 4);
        low = _mm_insert_epi16(low, gpt2__q8_scale_f16(row[9] + at), 5);
        low = _mm_insert_epi16(low, gpt2__q8_scale_f16(row[10] + at), 6);
        low = _mm_insert_epi16(low, gpt2__q8_scale_f16(row[11] + at), 7);
        high = _mm_insert_epi16(high, gpt2__q8_scale_f16(row[4] + at), 0);
        high = _mm_insert_epi16(high, gpt2__q8_scale_f16(row[5] + at), 1);
        high = _mm_insert_epi16(high, gpt2__q8_scale_f16(row[6] + at), 2);
        high = _mm_insert_epi16(high, gpt2__q8_scale_f16(row[7] + at), 3);
        high = _mm_insert_epi16(high, gpt2__q8_scale_f16(row[12] + at), 4);
        high = _mm_insert_epi16(high, gpt2__q8_scale_f16(row[13] + at), 5);
        high = _mm_insert_epi16(high, gpt2__q8_scale_f16(row[14] + at), 6);
        high = _mm_insert_epi16(high, gpt2__q8_scale_f16(row[15] + at), 7);
        _mm256_storeu_si256((__m256i*)scales, _mm256_set_m128i(high, low));
        __m512i z[8], t[8], u[8]; /* z[i]: the block of row i, then of row i + 8 */
        for (int i = 0; i < 8; i++) z[i] = gpt2__two_blocks_avx512<TYPE>(row[i] + at, row[i + 8] + at);
        for (int i = 0; i < 8; i += 2) {
            t[i] = _mm512_unpacklo_epi32(z[i], z[i + 1]);
            t[i + 1] = _mm512_unpackhi_epi32(z[i], z[i + 1]);
        }
        for (int h = 0; h < 8; h += 4) { /* u[h + k], 128-bit lanes: word k, 4 + k of rows h.., then of rows h + 8.. */
            u[h] = _mm512_unpacklo_epi64(t[h], t[h + 2]);
            u[h + 1] = _mm512_unpackhi_epi64(t[h], t[h + 2]);
            u[h + 2] = _mm512_unpacklo_epi64(t[h + 1], t[h + 3]);
            u[h + 3] = _mm512_unpackhi_epi64(t[h + 1], t[h + 3]);
        }
        for (int k = 0; k < 4; k++) {
            _mm512_storeu_si512(dst + 128 * k, _mm512_xor_si512(_mm512_shuffle_i32x4(u[k], u[4 + k], _MM_SHUFFLE(2, 0, 2, 0)), to_unsigned));
            _mm512_storeu_si512(dst + 128 * (4 + k), _mm512_xor_si512(_mm512_shuffle_i32x4(u[k], u[4 + k], _MM_SHUFFLE(3, 1, 3, 1)), to_unsigned));
        }
    }
}

/* 64 bytes at p; with `halves`, as two 256-bit loads, which Zen 4 and 5 stream from DRAM faster
   than one 512-bit load (it splits those anyway): a tile of few tokens waits on memory, where
   tiles of 5 or 6 are busy enough that the extra load costs (docs/PERFORMANCE.md, Kernel notes). */
template <bool halves>
GPT2__AVX512 static inline __m512i gpt2__load_streamed_avx512(const uint8_t* p) {
    if constexpr (halves) return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i*)p)), _mm256_loadu_si256((const __m256i*)(p + 32)), 1);
    else return _mm512_loadu_si512(p);
}

/* Tokens t0.. t0 + N - 1's sums of a group of 16 rows from row r (row r + i in lane i), stored
   for the rows in [lo, hi) as gpt2__store_out does: the bias added, and with `accumulate` y
   added to. */
template <int N>
GPT2__AVX512 static inline void gpt2__store_group_avx512(const gpt2__matmul_args& a, int64_t r, int64_t lo, int64_t hi, int t0, const __m512* sums) {
    const int64_t from = std::max<int64_t>(lo - r, 0), to = std::min<int64_t>(hi - r, gpt2__lane_rows);
    if (from >= to) return;
    const __mmask16 m = (__mmask16)(((1u << to) - 1) & ~((1u << from) - 1));
    const __m512 bias = a.bias ? _mm512_maskz_loadu_ps(m, a.bias + r) : _mm512_setzero_ps();
    GPT2__UNROLL
    for (int t = 0; t < N; t++) {
        float* y = a.y + (size_t)(t0 + t) * a.W->rows + r;
        const __m512 out = _mm512_add_ps(bias, sums[t]);
        _mm512_mask_storeu_ps(y, m, a.accumulate ? _mm512_add_ps(_mm512_maskz_loadu_ps(m, y), out) : out);
    }
}

/* Tokens t0.. t0 + N - 1: V groups of a panel from group j (lane 0 of the first is row
   first_row) times N packed activation rows, the panel in the layout of LAYOUT (q8_0's, or q4_0
   lanes'); the outputs of rows [lo, hi) stored as gpt2__store_out does; `ahead` prefetched
   along the blocks. */
template <uint32_t LAYOUT, int V, int N>
GPT2__AVX512 static void gpt2__tile_int8_avx512(const gpt2__matmul_args& a, const uint8_t* p, int j, int64_t first_row, int64_t lo, int64_t hi, int t0,
                                              const gpt2__prefetch_span& ahead) {
    constexpr bool nibbles = LAYOUT == GPT2_TYPE_Q4_0;
    constexpr size_t block_bytes = gpt2__panel_block_bytes<LAYOUT>;
    const int64_t K = a.W->cols, nb = K / gpt2__q8_block_values;
    const size_t ldx = gpt2__q8_packed_row_bytes(K);
    const uint8_t *w = gpt2__q8_group_words(p, j), *scales = gpt2__q8_group_scales<LAYOUT>(p, j);
    const int8_t* xq[N];
    const float* xs[N];
    const int32_t* start[N];
    for (int t = 0; t < N; t++) {
        const uint8_t* row = a.xq_packed + (size_t)(t0 + t) * ldx;
        xq[t] = (const int8_t*)row;
        xs[t] = (const float*)(row + K);
        start[t] = (const int32_t*)(xs[t] + nb);
    }
    __m512 f[V][N];
    GPT2__UNROLL
    for (int v = 0; v < V; v++)
        GPT2__UNROLL
        for (int t = 0; t < N; t++) f[v][t] = _mm512_setzero_ps();
    const size_t lines_per_block = gpt2__prefetch_per_step(ahead, nb);
    for (int64_t b = 0; b < nb; b++) {
        gpt2__prefetch_step(ahead, lines_per_block, b);
        const uint8_t* wb = w + (size_t)b * block_bytes;
        __m512i d[V][N];
        GPT2__UNROLL
        for (int t = 0; t < N; t++) {
            const __m512i s = _mm512_set1_epi32(nibbles ? start[t][b] / 16 : start[t][b]); /* -8 or -128 times the sum of x: exact */
            GPT2__UNROLL
            for (int v = 0; v < V; v++) d[v][t] = s;
        }
        __m512i packed[V];
        GPT2__UNROLL
        for (int i = 0; i < 8; i++) {
            const int s = nibbles ? (i % 2 ? i / 2 + 4 : i / 2) : i; /* nibbles: words 0, 4, 1, 5, ..., two from each vector */
            __m512i wv[V];
            GPT2__UNROLL
            for (int v = 0; v < V; v++) {
                if constexpr (!nibbles) {
                    wv[v] = gpt2__load_streamed_avx512<N <= 4>(wb + 64 * v + 128 * s);
                } else if (i % 2 == 0) {
                    packed[v] = gpt2__load_streamed_avx512<N <= 4>(wb + 64 * v + 128 * s);
                    wv[v] = _mm512_and_si512(packed[v], _mm512_set1_epi8(15));
                } else {
                    wv[v] = _mm512_and_si512(_mm512_srli_epi16(packed[v], 4), _mm512_set1_epi8(15));
                }
            }
            GPT2__UNROLL
            for (int t = 0; t < N; t++) {
                int32_t word;
                std::memcpy(&word, xq[t] + gpt2__q8_block_values * b + 4 * s, 4);
                const __m512i x = _mm512_set1_epi32(word);
                GPT2__UNROLL
                for (int v = 0; v < V; v++) d[v][t] = _mm512_dpbusd_epi32(d[v][t], wv[v], x);
            }
        }
        __m512 w_scale[V];
        GPT2__UNROLL
        for (int v = 0; v < V; v++) w_scale[v] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(scales + (size_t)b * block_bytes + v * gpt2__q8_scales_bytes)));
        GPT2__UNROLL
        for (int t = 0; t < N; t++) {
            const __m512 x_scale = _mm512_set1_ps(xs[t][b]);
            GPT2__UNROLL
            for (int v = 0; v < V; v++) f[v][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d[v][t]), _mm512_mul_ps(w_scale[v], x_scale), f[v][t]);
        }
    }
    GPT2__UNROLL
    for (int v = 0; v < V; v++) {
        __m512 sums[N];
        GPT2__UNROLL
        for (int t = 0; t < N; t++) sums[t] = gpt2__lane_order(f[v][t]);
        gpt2__store_group_avx512<N>(a, first_row + gpt2__lane_rows * v, lo, hi, t0, sums);
    }
}

/* f16 lanes: an f16 matrix's panels of 32 rows, column by column: per column a cache line of
   the 32 rows' values there (group 0's 16, then group 1's), the last panel's missing rows
   repeating its last row: 64 bytes a column, the rows' own bytes. bf16 lanes hold pairs of
   columns instead: per pair two cache lines, group 0's then group 1's, each row's two values in
   its 32-bit lane (the even column low), as the bf16 unit multiplies them; an odd last column
   is paired with a zero. A tile widens a group's 16 values of a column at once (bf16: a shift
   and a mask of the pair) and multiplies them with each token's value there, broadcast, so each
   output is its own lane: summed over the even and the odd columns apart (two chains, which a
   lone token needs to keep up with memory) and then together, the same for every tile width and
   row range. */
static const size_t gpt2__f16_column_bytes = 2 * gpt2__panel_rows;
/* Tokens in a tile of LAYOUT, at most: 8 for int8 panels (gpt2__int8_tile_tokens); 16-bit tiles
   keep two sums per output and run out of registers at 6 (docs/PERFORMANCE.md, Kernel notes). */
template <uint32_t LAYOUT>
static constexpr int gpt2__lanes_tile_tokens = gpt2__float16_lanes(LAYOUT) ? 5 : gpt2__int8_tile_tokens_most;
/* More f16 tokens than that go through one group of 16 rows at a time, in tiles of up to 16
   tokens x 2 sums: each column widened serves up to 16 tokens, where 2 groups x 4 tokens widened
   it for 4 (8 tokens as one tile of 8: 8 sessions' decode rows 45.6 -> 56.3 GMAC/s in cache, 41.2
   -> 50.7 from DRAM, one thread, Zen 4). Tiles of up to 16 instead of 8 widen a column half as
   often for 16 and 32 tokens: 32 tokens 88 -> 101 GMAC/s, one thread, Emerald Rapids. Their 32
   sums and two weights outnumber the 32 registers, so GCC keeps two sums in memory; 15 tokens
   would fit, but 32 tokens would then go as 11 + 11 + 10 (95 GMAC/s) and 16 as 8 + 8 (86). bf16,
   whose widening is a shift, keeps the two groups: its gain in the Zen 4 timings (2-6%) did not
   show at two threads (docs/PERFORMANCE.md, Kernel notes). */
static const int gpt2__float16_group_tile_tokens = 16;
static constexpr bool gpt2__goes_by_group(uint32_t layout) { return layout == GPT2_TYPE_F16; }

/* Group v's 16 values of columns 2i and 2i + 1 of a 16-bit panel (TYPE: f16 or bf16) as floats;
   w points at the tile's first group. Without `odd`, column 2i alone (an odd count's last). */
template <uint32_t TYPE>
GPT2__AVX512 static inline void gpt2__column_pair_avx512(const uint8_t* w, int64_t i, int v, __m512* even, __m512* odd) {
    const uint8_t* pair = w + gpt2__f16_column_bytes * 2 * (size_t)i;
    if constexpr (TYPE == GPT2_TYPE_F16) {
        *even = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(pair + 32 * v)));
        if (odd) *odd = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(pair + gpt2__f16_column_bytes + 32 * v)));
    } else {
        const __m512i both = _mm512_loadu_si512(pair + 64 * v);
        *even = _mm512_castsi512_ps(_mm512_slli_epi32(both, 16));
        if (odd) *odd = _mm512_castsi512_ps(_mm512_and_si512(both, _mm512_set1_epi32((int)0xffff0000u)));
    }
}

/* The tile of N tokens and V groups. A prompt (GPT2__FLOAT16_PROMPT) needs no second chain, nor to
   give a lone token's bits: its tile (TwoSums false) keeps one sum per output, the columns in
   order, so 12 tokens x 2 groups fit in 24 sums (with 4 widened weights and a broadcast, 29 of the
   32 registers), each group's values of a column widened once for 12 tokens instead of 5: 8
   tokens widened them half again as often, and f16 prompts ran 4-8% slower (Emerald Rapids; 13
   tokens no faster, GCC keeps some sums in memory; docs/PERFORMANCE.md, Kernel notes). Each
   output is still its own lane summed in the same order for every tile width and row range. */
static const int gpt2__float16_prompt_tile_tokens = 12;
template <uint32_t TYPE, int V, int N, bool TwoSums = true, bool Packed = false>
GPT2__AVX512 static void gpt2__tile_float16_avx512(const gpt2__matmul_args& a, const uint8_t* p, int j, int64_t first_row, int64_t lo, int64_t hi, int t0,
                                                   const gpt2__prefetch_span& ahead) {
    const int64_t K = a.W->cols;
    const uint8_t* w = p + (TYPE == GPT2_TYPE_F16 ? 32 : 64) * j;
    const float* x[N] = {}; /* the tokens' rows, or (Packed) per pair of columns the N tokens' two values at xp */
    const float* xp = nullptr;
    if constexpr (Packed) xp = a.x_tiles + (size_t)t0 * K;
    else
        for (int t = 0; t < N; t++) x[t] = a.x + (size_t)(t0 + t) * K;
    __m512 even[V][N], odd[V][N];
    GPT2__UNROLL
    for (int v = 0; v < V; v++)
        GPT2__UNROLL
        for (int t = 0; t < N; t++) even[v][t] = odd[v][t] = _mm512_setzero_ps();
    const int64_t pairs = K / 2;
    const size_t lines_per_pair = gpt2__prefetch_per_step(ahead, pairs);
    for (int64_t i = 0; i < pairs; i++) {
        gpt2__prefetch_step(ahead, lines_per_pair, i);
        __m512 w0[V], w1[V];
        GPT2__UNROLL
        for (int v = 0; v < V; v++) gpt2__column_pair_avx512<TYPE>(w, i, v, &w0[v], &w1[v]);
        /* The even column's products, then the odd one's, one broadcast live at a time (26
           registers in all). Interleaved token by token, GCC tuned for Zen (-march=native on
           AMD) spilled a weight; group by group, with a token's broadcast kept for both, plain
           builds did (docs/PERFORMANCE.md, Kernel notes). */
        GPT2__UNROLL
        for (int t = 0; t < N; t++) {
            const __m512 x0 = _mm512_set1_ps(Packed ? xp[2 * t] : x[t][2 * i]);
            GPT2__UNROLL
            for (int v = 0; v < V; v++) even[v][t] = _mm512_fmadd_ps(w0[v], x0, even[v][t]);
        }
        GPT2__UNROLL
        for (int t = 0; t < N; t++) {
            const __m512 x1 = _mm512_set1_ps(Packed ? xp[2 * t + 1] : x[t][2 * i + 1]);
            GPT2__UNROLL
            for (int v = 0; v < V; v++) {
                if constexpr (TwoSums) odd[v][t] = _mm512_fmadd_ps(w1[v], x1, odd[v][t]);
                else even[v][t] = _mm512_fmadd_ps(w1[v], x1, even[v][t]);
            }
        }
        if constexpr (Packed) xp += 2 * N;
    }
    if (K % 2) { /* the last column, to the even sums */
        GPT2__UNROLL
        for (int v = 0; v < V; v++) {
            __m512 wv;
            gpt2__column_pair_avx512<TYPE>(w, K / 2, v, &wv, nullptr);
            GPT2__UNROLL
            for (int t = 0; t < N; t++) even[v][t] = _mm512_fmadd_ps(wv, _mm512_set1_ps(Packed ? xp[t] : x[t][K - 1]), even[v][t]);
        }
    }
    GPT2__UNROLL
    for (int v = 0; v < V; v++) {
        __m512 sums[N];
        GPT2__UNROLL
        for (int t = 0; t < N; t++) sums[t] = TwoSums ? _mm512_add_ps(even[v][t], odd[v][t]) : even[v][t];
        gpt2__store_group_avx512<N>(a, first_row + gpt2__lane_rows * v, lo, hi, t0, sums);
    }
}

/* The bf16 unit's tile on bf16 lanes (avx512_bf16.h), for GPT2__BF16_UNIT: one sum per output,
   so wider than the FMA tiles (8 x 2 sums fill half the registers; docs/PERFORMANCE.md, Kernel
   notes). */
static const int gpt2__bf16_unit_tile_tokens = 8;
template <int V, int N>
GPT2__AVX512_BF16 static void gpt2__tile_bf16_unit_avx512(const gpt2__matmul_args& a, const uint8_t* p, int j, int64_t first_row, int64_t lo, int64_t hi, int t0,
                                                          const gpt2__prefetch_span& ahead);

/* A tile: N tokens from t0 on through V groups of the panel at p (group j alone when V is 1),
   the outputs of rows [lo, hi) stored, prefetching `ahead` along its blocks. */
typedef void (*gpt2__tile_fn_avx512)(const gpt2__matmul_args& a, const uint8_t* p, int j, int64_t first_row, int64_t lo, int64_t hi, int t0,
                                     const gpt2__prefetch_span& ahead);

/* The tile of N tokens and V groups of strategy S in the layout of LAYOUT (f16 or bf16 lanes, or
   an int8 panel: q8_0's, or q4_0 lanes'): a prompt's on 16-bit lanes, the bf16 unit's, or the
   lanes' tile of any rows; NULL past the widest tile. */
template <uint32_t LAYOUT, gpt2__strategy S, int V, int N>
static constexpr gpt2__tile_fn_avx512 gpt2__tile_avx512() {
    if constexpr (S == GPT2__BF16_UNIT) {
        if constexpr (N > gpt2__bf16_unit_tile_tokens) return nullptr;
        else return gpt2__tile_bf16_unit_avx512<V, N>;
    }
    else if constexpr (S == GPT2__FLOAT16_PROMPT) return gpt2__tile_float16_avx512<LAYOUT, V, N, false>;
    else if constexpr (N > gpt2__lanes_tile_tokens<LAYOUT>) return nullptr;
    else if constexpr (gpt2__float16_lanes(LAYOUT)) return gpt2__tile_float16_avx512<LAYOUT, V, N>;
    else return gpt2__tile_int8_avx512<LAYOUT, V, N>;
}

/* Every tile of a layout, by [V - 1][N - 1]: a row of gpt2__widest_tile widths per V. */
static const int gpt2__widest_tile = gpt2__float16_prompt_tile_tokens;
static_assert(gpt2__widest_tile >= gpt2__int8_tile_tokens_most && gpt2__widest_tile >= gpt2__bf16_unit_tile_tokens, "a column per tile width");
template <uint32_t LAYOUT, gpt2__strategy S, int V, int... I>
static constexpr std::array<gpt2__tile_fn_avx512, sizeof...(I)> gpt2__tile_widths_avx512(std::integer_sequence<int, I...>) {
    return {{gpt2__tile_avx512<LAYOUT, S, V, I + 1>()...}};
}
using gpt2__tiles_avx512 = std::array<std::array<gpt2__tile_fn_avx512, gpt2__widest_tile>, 2>;
template <uint32_t LAYOUT, gpt2__strategy S = GPT2__FLOAT16_LANES>
static constexpr gpt2__tiles_avx512 gpt2__tiles_of_avx512 = {{gpt2__tile_widths_avx512<LAYOUT, S, 1>(std::make_integer_sequence<int, gpt2__widest_tile>()),
                                                              gpt2__tile_widths_avx512<LAYOUT, S, 2>(std::make_integer_sequence<int, gpt2__widest_tile>())}};

/* The tiles of f16 decode rows by group (gpt2__goes_by_group), which read their tokens packed
   (gpt2__pack_tile_rows_avx512), by [N - 1]. */
template <int... I>
static constexpr std::array<gpt2__tile_fn_avx512, sizeof...(I)> gpt2__f16_group_tiles_of(std::integer_sequence<int, I...>) {
    return {{gpt2__tile_float16_avx512<GPT2_TYPE_F16, 1, I + 1, true, true>...}};
}
static constexpr auto gpt2__f16_group_tiles = gpt2__f16_group_tiles_of(std::make_integer_sequence<int, gpt2__float16_group_tile_tokens>());

/* Tile i of `tiles`, among which a.T tokens are shared evenly (8 tokens as 4 + 4, not 6 + 2: a
   small tile costs about what a full one does; docs/PERFORMANCE.md, Kernel notes), and its
   share of `lines` prefetched lines: its first token, its tokens and its lines [from, to). */
struct gpt2__tile_share {
    int t0, n;
    size_t from, to;
};
static inline gpt2__tile_share gpt2__share_tile(int T, int tiles, int i, size_t lines) {
    return {i * (T / tiles) + std::min(i, T % tiles), T / tiles + (i < T % tiles), lines * i / tiles, lines * (i + 1) / tiles};
}

/* Whether f16 decode rows go by group (more than gpt2__lanes_tile_tokens of them). */
static inline bool gpt2__f16_rows_by_group(const gpt2__matmul_args& a) {
    return a.strategy == GPT2__FLOAT16_LANES && gpt2__goes_by_group(a.W->type) && a.T > gpt2__lanes_tile_tokens<GPT2_TYPE_F16>;
}

/* The set's pack_tile_rows: f16 decode rows by group have their activations packed as their tiles
   read them: per tile (gpt2__share_tile), per pair of columns its n tokens' two values, then an
   odd K's last column's n values. A tile then reads one stream, each value at a constant offset
   from one pointer, where it read n rows K apart, each broadcast at an indexed address (which
   Intel cores split into two micro-operations): on Emerald Rapids 6 to 64 rows' products
   1.07-1.14x as fast, packing included, where a pointer a row (no indexed address) gave 1.02-1.03x
   (docs/PERFORMANCE.md, Kernel notes). Packed once per product for all threads: packed by the
   kernel, per call, it cost about 13% of a call of 64 rows at K = 3072. */
static inline bool gpt2__pack_tile_rows_avx512(float* dst, const gpt2__matmul_args& a) {
    if (!gpt2__f16_rows_by_group(a)) return false;
    const int64_t K = a.W->cols;
    const int n_tiles = (a.T + gpt2__float16_group_tile_tokens - 1) / gpt2__float16_group_tile_tokens;
    for (int i = 0; i < n_tiles; i++) {
        const gpt2__tile_share t = gpt2__share_tile(a.T, n_tiles, i, 0);
        const float* rows = a.x + (size_t)t.t0 * K;
        for (int64_t q = 0; q < K / 2; q++)
            for (int u = 0; u < t.n; u++, dst += 2) std::memcpy(dst, rows + (size_t)u * K + 2 * q, 8);
        for (int u = 0; u < t.n && K % 2; u++) *dst++ = rows[(size_t)u * K + K - 1];
    }
    return true;
}

/* W (q8_0, q4_0, f16 or bf16) on its lanes, in place, two groups at a time (f16 decode rows of
   more than gpt2__lanes_tile_tokens: one, each prefetching half the next panel), times a.xq_packed
   (int8), a.x (f16, bf16) or a.x_bf16 (bf16 on the bf16 unit); a range may begin or end half-way
   through a panel: that group alone. All of a.T's tokens go through each pair of groups in tiles
   (the pair stays in L1 or L2, each tile's activations in L1). A lone token or two prefetch
   gpt2__lanes_stream_ahead ahead, on past the range's end too: gpt2__parallel_for's next chunk for
   this thread starts there. More tokens spend long enough on a panel to fetch the whole next one
   meanwhile, where 16 KB ahead fell behind the tiles that re-read the panel; those prefetches go
   to L2, where the later tiles and the second group find it (non-temporal ones left q8_0's tiles
   of 3-12 tokens waiting for DRAM on Zen 4: 1.3-2.2x slower). A lone token or two prefetch
   non-temporally on AMD, where a lone token streams faster so (Zen 4: 33 against 24 GB/s;
   docs/PERFORMANCE.md, Kernel notes), into L2 on Intel (gpt2__prefetch_span). f16 decode rows go
   by group where their activations come packed (x_tiles), else (a caller that did not pack them)
   two groups at a time, the same bits. The kernel of GPT2__FLOAT16_LANES. */
GPT2__AVX512 static void gpt2__matmul_lanes_avx512(const gpt2__matmul_args& a, int64_t o_begin, int64_t o_end, float* panel) {
    (void)panel;
    const uint32_t type = a.W->type;
    const bool bf16_unit = a.strategy == GPT2__BF16_UNIT, prompt = a.strategy == GPT2__FLOAT16_PROMPT;
    const bool by_group = a.x_tiles && gpt2__f16_rows_by_group(a);
    const gpt2__tiles_avx512& tiles = bf16_unit                 ? gpt2__tiles_of_avx512<GPT2_TYPE_BF16, GPT2__BF16_UNIT>
                                      : prompt                  ? (type == GPT2_TYPE_BF16 ? gpt2__tiles_of_avx512<GPT2_TYPE_BF16, GPT2__FLOAT16_PROMPT>
                                                                                          : gpt2__tiles_of_avx512<GPT2_TYPE_F16, GPT2__FLOAT16_PROMPT>)
                                      : type == GPT2_TYPE_BF16 ? gpt2__tiles_of_avx512<GPT2_TYPE_BF16>
                                      : type == GPT2_TYPE_F16  ? gpt2__tiles_of_avx512<GPT2_TYPE_F16>
                                      : type == GPT2_TYPE_Q4_0 ? gpt2__tiles_of_avx512<GPT2_TYPE_Q4_0>
                                                               : gpt2__tiles_of_avx512<GPT2_TYPE_Q8_0>;
    const bool streams = a.T <= 2; /* a lone token or two stream ahead; more re-read each panel */
    const int widest = bf16_unit  ? gpt2__bf16_unit_tile_tokens
                       : prompt   ? gpt2__float16_prompt_tile_tokens
                       : by_group ? gpt2__float16_group_tile_tokens
                                  : gpt2__float16_lanes(type) ? gpt2__lanes_tile_tokens<GPT2_TYPE_F16> : gpt2__int8_tile_tokens();
    const int n_tiles = (a.T + widest - 1) / widest;
    const size_t panel_bytes = gpt2__float16_lanes(type) ? gpt2__f16_column_bytes * (size_t)gpt2__lanes_columns(*a.W)
                               : (size_t)(a.W->cols / gpt2__q8_block_values) *
                                     (type == GPT2_TYPE_Q4_0 ? gpt2__panel_block_bytes<GPT2_TYPE_Q4_0> : gpt2__panel_block_bytes<GPT2_TYPE_Q8_0>);
    const bool to_l2 = !streams || gpt2__lanes_prefetch_to_l2(); /* later tiles re-read the panel from L2 */
    for (int64_t first = o_begin / gpt2__lane_rows * gpt2__lane_rows; first < o_end;) {
        const uint8_t* p = a.W->lanes + (size_t)(first / gpt2__panel_rows) * panel_bytes;
        const int j = (int)(first / gpt2__lane_rows % 2);
        const bool both = !by_group && j == 0 && first + gpt2__lane_rows < o_end;
        const char* next = (const char*)p + (streams ? gpt2__lanes_stream_ahead : panel_bytes) + (by_group ? j * panel_bytes / 2 : 0);
        const size_t next_lines = first + gpt2__panel_rows < o_end || streams ? panel_bytes / (by_group ? 128 : 64) : 0;
        for (int i = 0; i < n_tiles; i++) {
            const gpt2__tile_share t = gpt2__share_tile(a.T, n_tiles, i, next_lines);
            (by_group ? gpt2__f16_group_tiles[t.n - 1] : tiles[both][t.n - 1])(a, p, j, first, o_begin, o_end, t.t0, {next + 64 * t.from, t.to - t.from, to_l2});
        }
        first += gpt2__lane_rows * (both ? 2 : 1);
    }
}

/* q8_0 or q4_0 W times a.xq_packed. With lanes (made at load), the tokens go through them in
   place, two groups at a time. Else each panel of up to 32 rows is packed first, then all tokens
   go through it in tiles (the panel stays in L2, a tile's activations in L1). A last panel of
   16 rows or fewer takes one group; lanes past the last row repeat it and are not stored. */
GPT2__AVX512 static void gpt2__matmul_int8_panels_avx512(const gpt2__matmul_args& a, int64_t o_begin, int64_t o_end, float* panel) {
    const gpt2__weight* W = a.W;
    if (W->lanes) return gpt2__matmul_lanes_avx512(a, o_begin, o_end, panel);
    const int64_t nb = W->cols / gpt2__q8_block_values;
    const gpt2__tiles_avx512& tiles = gpt2__tiles_of_avx512<GPT2_TYPE_Q8_0>;
    const int widest = gpt2__int8_tile_tokens(), n_tiles = (a.T + widest - 1) / widest;
    const bool to_l2 = gpt2__lanes_prefetch_to_l2();
    uint8_t* w = (uint8_t*)panel;
    for (int64_t o = o_begin; o < o_end; o += gpt2__panel_rows) {
        const int rows = (int)std::min<int64_t>(gpt2__panel_rows, o_end - o), V = rows > gpt2__lane_rows ? 2 : 1;
        for (int v = 0; v < V; v++) {
            const uint8_t* row[gpt2__lane_rows];
            for (int i = 0; i < gpt2__lane_rows; i++) row[i] = W->data + (size_t)(o + std::min(gpt2__lane_rows * v + i, rows - 1)) * W->row_bytes;
            const size_t ahead = o + gpt2__panel_rows < o_end ? gpt2__panel_rows * W->row_bytes : 0;
            if (W->type == GPT2_TYPE_Q4_0) gpt2__pack_int8_group_avx512<GPT2_TYPE_Q4_0>(w, v, row, nb, ahead);
            else gpt2__pack_int8_group_avx512<GPT2_TYPE_Q8_0>(w, v, row, nb, ahead);
        }
        /* The next panel's rows come from DRAM, 32 streams the hardware prefetcher does not all
           follow: prefetched along the pack (with few tokens there are few tiles; docs/
           PERFORMANCE.md, Kernel notes) and spread over the tiles, which touch no weight memory. */
        const char* next = (const char*)(W->data + (size_t)(o + rows) * W->row_bytes);
        const size_t next_lines = (size_t)std::min<int64_t>(gpt2__panel_rows, o_end - o - rows) * W->row_bytes / 64;
        for (int i = 0; i < n_tiles; i++) {
            const gpt2__tile_share t = gpt2__share_tile(a.T, n_tiles, i, next_lines);
            tiles[V - 1][t.n - 1](a, w, 0, o, o, o + rows, t.t0, {next + 64 * t.from, t.to - t.from, to_l2});
        }
    }
}

/* A q8_0, q4_0, f16 or bf16 matrix's lanes (contract.h): its panels in order, q8_0's packed as a
   product's are, q4_0's bytes moved into their lanes as 4-byte words, nibbles as they are, f16's
   values column by column, bf16's by pairs of columns. */
GPT2__AVX512 static void gpt2__pack_lanes_avx512(uint8_t* dst, const gpt2__weight& W) {
    if (gpt2__float16_lanes(W.type)) {
        const bool pairs = W.type == GPT2_TYPE_BF16;
        uint16_t* out = (uint16_t*)dst;
        for (int64_t first = 0; first < W.rows; first += gpt2__panel_rows) {
            const uint16_t* row[gpt2__panel_rows];
            for (int i = 0; i < gpt2__panel_rows; i++) row[i] = (const uint16_t*)(W.data + (size_t)std::min<int64_t>(first + i, W.rows - 1) * W.row_bytes);
            for (int64_t k = 0; k < W.cols; k += pairs ? 2 : 1)
                for (int i = 0; i < gpt2__panel_rows; i++) {
                    *out++ = row[i][k];
                    if (pairs) *out++ = k + 1 < W.cols ? row[i][k + 1] : 0;
                }
        }
        return;
    }
    const int64_t nb = W.cols / gpt2__q8_block_values;
    const bool q4 = W.type == GPT2_TYPE_Q4_0;
    const size_t block_bytes = q4 ? gpt2__panel_block_bytes<GPT2_TYPE_Q4_0> : gpt2__panel_block_bytes<GPT2_TYPE_Q8_0>;
    for (int64_t first = 0; first < W.rows; first += gpt2__panel_rows, dst += (size_t)nb * block_bytes)
        for (int j = 0; j < 2; j++) {
            const uint8_t* row[gpt2__lane_rows];
            for (int i = 0; i < gpt2__lane_rows; i++) row[i] = W.data + (size_t)std::min<int64_t>(first + gpt2__lane_rows * j + i, W.rows - 1) * W.row_bytes;
            if (!q4) {
                gpt2__pack_int8_group_avx512<GPT2_TYPE_Q8_0>(dst, j, row, nb, 0);
                continue;
            }
            for (int64_t b = 0; b < nb; b++) {
                uint8_t* words = dst + (size_t)b * block_bytes + 64 * j;
                uint8_t* scales = (uint8_t*)gpt2__q8_group_scales<GPT2_TYPE_Q4_0>(dst + (size_t)b * block_bytes, j);
                for (int i = 0; i < gpt2__lane_rows; i++) {
                    const uint8_t* block = row[i] + (size_t)b * gpt2__q4_block_bytes;
                    const int lane = gpt2__lane_of_row(i);
                    for (int k = 0; k < 4; k++) std::memcpy(words + 128 * k + 4 * lane, gpt2__q4_nibbles(block) + 4 * k, 4);
                    std::memcpy(scales + 2 * lane, block, 2);
                }
            }
        }
}

/* Rows of x quantized as gpt2__quantize_q8_avx512 does, packed for gpt2__tile_int8_avx512: per
   row the int8 values, the block scales, and per block -128 times the sum of its values (the
   start of its sums against weights stored as w + 128). */
GPT2__AVX512 static void gpt2__quantize_q8_packed_avx512(uint8_t* dst, const float* x, int rows, int64_t cols) {
    const int B = gpt2__q8_block_values;
    const int64_t nb = cols / B;
    for (int t = 0; t < rows; t++, dst += gpt2__q8_packed_row_bytes(cols)) {
        int8_t* q = (int8_t*)dst;
        float* scale = (float*)(dst + cols);
        int32_t* start = (int32_t*)(scale + nb);
        gpt2__quantize_q8_avx512(q, scale, x + (size_t)t * cols, cols);
        for (int64_t b = 0; b < nb; b++) {
            const __m128i* v = (const __m128i*)(q + B * b);
            start[b] = -128 * _mm512_reduce_add_epi32(_mm512_add_epi32(_mm512_cvtepi8_epi32(_mm_loadu_si128(v)), _mm512_cvtepi8_epi32(_mm_loadu_si128(v + 1))));
        }
    }
}

#endif /* GPT2__X86 */

/* ---- src/cpu/kernels/avx512.h ---- */
/* The AVX-512 set, part 4 of 4, its entry: exp and GELU, prefill attention, and the matmul that
   runs the strategy it is handed (parts 1-3: avx512_rows.h, avx512_float_tiles.h,
   avx512_panels.h). Decode attention and float matrix rows use the AVX2 kernels (avx2.h). */

#if defined(GPT2__X86)

/* e^x as contract.h describes it (gpt2__exp_poly), 16 lanes; 0 below gpt2__exp_min. */
GPT2__AVX512 static inline __m512 gpt2__exp_avx512(__m512 x) {
    x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(gpt2__exp_max)), _mm512_set1_ps(gpt2__exp_min));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(gpt2__log2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(gpt2__ln2_hi), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(gpt2__ln2_lo), r);
    __m512 p = _mm512_set1_ps(gpt2__exp_poly[0]);
    GPT2__UNROLL
    for (size_t i = 1; i < std::size(gpt2__exp_poly); i++) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(gpt2__exp_poly[i]));
    p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(p, n);
}

/* GELU: the erf form with erf as contract.h gives it (gpt2__erf_poly), or the tanh form with
   tanh(u) = 1 - 2 / (e^2u + 1). */
GPT2__AVX512 static void gpt2__gelu_avx512(float* x, size_t n, bool tanh_form) {
    for (size_t i = 0; i < n; i += 16) {
        const __mmask16 m = gpt2__mask16((int64_t)i, (int64_t)n);
        const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
        __m512 g; /* erf(v / sqrt 2) or tanh(...) */
        if (tanh_form) {
            const __m512 u = _mm512_mul_ps(_mm512_set1_ps(gpt2__sqrt_2_over_pi), _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(gpt2__gelu_cubic), v), _mm512_mul_ps(v, v), v));
            const __m512 e = gpt2__exp_avx512(_mm512_add_ps(u, u));
            g = _mm512_sub_ps(_mm512_set1_ps(1.0f), _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(e, _mm512_set1_ps(1.0f))));
        } else {
            const __m512 z = _mm512_abs_ps(_mm512_mul_ps(v, _mm512_set1_ps(gpt2__sqrt_half)));
            const __m512 t = _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_fmadd_ps(_mm512_set1_ps(gpt2__erf_p), z, _mm512_set1_ps(1.0f)));
            __m512 p = _mm512_set1_ps(gpt2__erf_poly[0]);
            GPT2__UNROLL
            for (size_t k = 1; k < std::size(gpt2__erf_poly); k++) p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(gpt2__erf_poly[k]));
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

/* 16 rows of 16 floats transposed in place: afterwards v[c] lane i is row i's value c. */
GPT2__AVX512 GPT2__ALWAYS_INLINE static void gpt2__transpose16_avx512(__m512* v) {
    __m512 t[16];
    GPT2__UNROLL
    for (int i = 0; i < 16; i += 2) { /* rows i and i + 1 interleaved */
        t[i] = _mm512_unpacklo_ps(v[i], v[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(v[i], v[i + 1]);
    }
    GPT2__UNROLL
    for (int i = 0; i < 16; i += 4) { /* each 128-bit lane: one column of rows i.. i + 3 */
        v[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
        v[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
        v[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
        v[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
    }
    GPT2__UNROLL
    for (int h = 0; h < 16; h += 8) /* the 128-bit lanes gathered, in two steps */
        GPT2__UNROLL
        for (int c = 0; c < 4; c++) {
            t[h + c] = _mm512_shuffle_f32x4(v[h + c], v[h + 4 + c], 0x88);
            t[h + 4 + c] = _mm512_shuffle_f32x4(v[h + c], v[h + 4 + c], 0xdd);
        }
    GPT2__UNROLL
    for (int c = 0; c < 8; c++) {
        v[c] = _mm512_shuffle_f32x4(t[c], t[8 + c], 0x88);
        v[8 + c] = _mm512_shuffle_f32x4(t[c], t[8 + c], 0xdd);
    }
}

/* gpt2__attend_scalar's block of queries at once, a query in each vector lane (lanes past
   n_queries idle): the queries transposed once (16 dimensions at a time), so a key's scores for
   all 16 are sums of FMAs of the queries' vector of a dimension with the key's value there,
   broadcast, 8 keys at a time, with no reduction across lanes; `scores` keeps a vector per key
   (its 16 queries), so the causal mask, the maxima, exponentials and sums of the softmax are
   lane by lane too. The values are then weighted for 4 queries at a time, each key's values
   loaded once for the 4 (64 dimensions a pass), each query's weights broadcast from its lane;
   every output is divided by its query's sum at the end. A query's outputs do not depend on the
   others of its block. */
template <class KV>
GPT2__AVX512 static void gpt2__attend_avx512(float* out, size_t out_stride, const float* q, size_t q_stride, gpt2__kv_rows<KV> k, gpt2__kv_rows<KV> v, int n_keys, int n_queries, int head_dim, float* scores) {
    static_assert(gpt2__query_block == 16, "a query per lane");
    constexpr int DC = gpt2__attend_dims, KB = gpt2__attend_keys;
    const int D = head_dim, keys = n_keys + n_queries - 1; /* the last query's */
    alignas(64) float qt[DC * 16];                         /* qt[16 d + i]: query i's dimension d0 + d */
    alignas(64) float kf[sizeof(KV) == 2 ? KB * DC : 1];   /* an f16 cache's keys as floats */
    for (int d0 = 0; d0 < D; d0 += DC) {
        const int dn = std::min(DC, D - d0);
        for (int c = 0; c < dn; c += 16) {
            const __mmask16 m = gpt2__mask16(c, dn);
            __m512 rows[16];
            GPT2__UNROLL
            for (int i = 0; i < 16; i++) rows[i] = i < n_queries ? _mm512_maskz_loadu_ps(m, q + (size_t)i * q_stride + d0 + c) : _mm512_setzero_ps();
            gpt2__transpose16_avx512(rows);
            GPT2__UNROLL
            for (int d = 0; d < 16; d++)
                if (c + d < dn) _mm512_store_ps(qt + 16 * (c + d), rows[d]);
        }
        for (int j0 = 0; j0 < keys; j0 += KB) {
            const float* kr[KB];
            for (int r = 0; r < KB; r++) {
                const KV* key = k.row(std::min(j0 + r, keys - 1)) + d0;
                if constexpr (sizeof(KV) == 4) {
                    kr[r] = key;
                } else {
                    for (int c = 0; c < dn; c += 16) _mm512_storeu_ps(kf + r * DC + c, gpt2__kv16_avx512(key + c, gpt2__mask16(c, dn)));
                    kr[r] = kf + r * DC;
                }
            }
            __m512 acc[KB];
            GPT2__UNROLL
            for (int r = 0; r < KB; r++) acc[r] = _mm512_setzero_ps();
            for (int d = 0; d < dn; d++) {
                const __m512 qv = _mm512_load_ps(qt + 16 * d);
                GPT2__UNROLL
                for (int r = 0; r < KB; r++) acc[r] = _mm512_fmadd_ps(qv, _mm512_set1_ps(kr[r][d]), acc[r]);
            }
            GPT2__UNROLL /* a fixed count, so the accumulators stay in registers */
            for (int r = 0; r < KB; r++) {
                float* row = scores + 16 * (size_t)(j0 + r);
                if (j0 + r < keys) _mm512_storeu_ps(row, d0 == 0 ? acc[r] : _mm512_add_ps(_mm512_loadu_ps(row), acc[r]));
            }
        }
    }
    /* the softmax, lane by lane: query i sees keys j < n_keys + i */
    const __m512 scale = _mm512_set1_ps(1.0f / std::sqrt((float)D));
    const __m512i seen = _mm512_add_epi32(_mm512_set1_epi32(n_keys), _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
    __m512 vmax = _mm512_set1_ps(-INFINITY), vsum = _mm512_setzero_ps();
    for (int j = 0; j < keys; j++) {
        const __m512 s = _mm512_mul_ps(_mm512_loadu_ps(scores + 16 * (size_t)j), scale);
        _mm512_storeu_ps(scores + 16 * (size_t)j, s);
        vmax = _mm512_mask_max_ps(vmax, _mm512_cmpgt_epi32_mask(seen, _mm512_set1_epi32(j)), vmax, s);
    }
    for (int j = 0; j < keys; j++) {
        const __mmask16 m = _mm512_cmpgt_epi32_mask(seen, _mm512_set1_epi32(j));
        const __m512 e = _mm512_maskz_mov_ps(m, gpt2__exp_avx512(_mm512_sub_ps(_mm512_loadu_ps(scores + 16 * (size_t)j), vmax)));
        _mm512_storeu_ps(scores + 16 * (size_t)j, e);
        vsum = _mm512_add_ps(vsum, e);
    }
    alignas(64) float inv_sum[16];
    _mm512_store_ps(inv_sum, _mm512_div_ps(_mm512_set1_ps(1.0f), vsum));
    for (int g = 0; g < n_queries; g += 4) {
        const int last = std::min(g + 3, n_queries - 1), g_keys = n_keys + last; /* the group's last query's keys */
        for (int d0 = 0; d0 < D; d0 += 64) {
            __mmask16 m[4];
            __m512 acc[4][4]; /* query g + i, dimensions d0 + 16c .. */
            GPT2__UNROLL
            for (int c = 0; c < 4; c++) {
                m[c] = d0 + 16 * c < D ? gpt2__mask16(d0 + 16 * c, D) : (__mmask16)0;
                GPT2__UNROLL
                for (int i = 0; i < 4; i++) acc[i][c] = _mm512_setzero_ps();
            }
            for (int j = 0; j < g_keys; j++) {
                const KV* vj = v.row(j) + d0;
                const float* p = scores + 16 * (size_t)j + g;
                GPT2__UNROLL
                for (int c = 0; c < 4; c++) {
                    const __m512 vv = gpt2__kv16_avx512(vj + 16 * c, m[c]);
                    GPT2__UNROLL
                    for (int i = 0; i < 4; i++) acc[i][c] = _mm512_fmadd_ps(_mm512_set1_ps(p[i]), vv, acc[i][c]);
                }
            }
            GPT2__UNROLL /* a fixed count, so the accumulators stay in registers */
            for (int i = 0; i < 4; i++)
                GPT2__UNROLL
                for (int c = 0; c < 4; c++)
                    if (g + i < n_queries) _mm512_mask_storeu_ps(out + (size_t)(g + i) * out_stride + d0 + 16 * c, m[c], _mm512_mul_ps(acc[i][c], _mm512_set1_ps(inv_sum[g + i])));
        }
    }
}

/* The set's matmul kernels besides the panels' and lanes' (dispatch.h). Decode streams the
   weights row by row in their own type: float rows with the AVX2 set's 256-bit row kernel
   (gpt2__matmul_streamed_x86), which Zen 4 feeds from DRAM faster than 512-bit loads (it splits
   those in two anyway); q8_0 and q4_0 rows with 512-bit integer dot products, gpt2__decode_rows<TYPE> at a
   time. Prefill multiplies int8 panels (avx512_panels.h) or float panels. */
GPT2__AVX512 static void gpt2__matmul_rows_avx512(const gpt2__matmul_args& a, int64_t o_begin, int64_t o_end, float* panel) {
    (void)panel;
    gpt2__matmul_streamed_x86(a, o_begin, o_end);
}
GPT2__AVX512 static void gpt2__matmul_stream_int8_avx512(const gpt2__matmul_args& a, int64_t o_begin, int64_t o_end, float* panel) {
    if (a.W->type == GPT2_TYPE_Q4_0) return gpt2__matmul_int8_rows_avx512<GPT2_TYPE_Q4_0>(a, o_begin, o_end, (uint8_t*)panel);
    gpt2__matmul_int8_rows_avx512<GPT2_TYPE_Q8_0>(a, o_begin, o_end, (uint8_t*)panel);
}
GPT2__AVX512 static void gpt2__matmul_float_tiles_avx512(const gpt2__matmul_args& a, int64_t o_begin, int64_t o_end, float* panel) {
    gpt2__prefill_x86<gpt2__prefill_avx512>(a, o_begin, o_end, panel);
}

#endif /* GPT2__X86 */

/* ---- src/cpu/kernels/avx512_bf16.h ---- */
/* The AVX-512 set with the bf16 unit (AVX512_BF16, an extra runtime check: dispatch.h): bf16
   weights' products over a prompt's tokens run on vdpbf16ps; everything else is the AVX-512
   set's, a batch's decode rows too (gpt2__matmul_bf16_unit_avx512 says why).

   vdpbf16ps adds the products of 16 pairs of bf16 values into 16 float lanes: 32 multiply-adds
   per instruction where an fp32 FMA does 16. bf16 lanes (avx512.h) hold each row's pairs of
   columns in its 32-bit lane, so a tile multiplies a group of 16 rows by a token's pair,
   broadcast, in one instruction, each output summed in its own lane. Each thread rounds a chunk
   of tokens to bf16 once (to nearest even) and runs the lanes' driver over its rows. The
   activations so lose their low 16 bits, as the weights already have: see docs/PERFORMANCE.md
   for what that costs in accuracy. */

#if defined(GPT2__X86)

template <int V, int N>
GPT2__AVX512_BF16 static void gpt2__tile_bf16_unit_avx512(const gpt2__matmul_args& a, const uint8_t* p, int j, int64_t first_row, int64_t lo, int64_t hi, int t0,
                                                          const gpt2__prefetch_span& ahead) {
    const int64_t pairs = gpt2__lanes_columns(*a.W) / 2;
    const uint8_t* w = p + 64 * j;
    const uint16_t* x[N];
    for (int t = 0; t < N; t++) x[t] = a.x_bf16 + (size_t)(t0 + t) * 2 * (size_t)pairs;
    __m512 acc[V][N];
    GPT2__UNROLL
    for (int v = 0; v < V; v++)
        GPT2__UNROLL
        for (int t = 0; t < N; t++) acc[v][t] = _mm512_setzero_ps();
    const size_t lines_per_pair = gpt2__prefetch_per_step(ahead, pairs);
    for (int64_t i = 0; i < pairs; i++) {
        gpt2__prefetch_step(ahead, lines_per_pair, i);
        __m512bh wv[V];
        GPT2__UNROLL
        for (int v = 0; v < V; v++) wv[v] = (__m512bh)_mm512_loadu_si512(w + gpt2__f16_column_bytes * 2 * (size_t)i + 64 * v);
        GPT2__UNROLL
        for (int t = 0; t < N; t++) {
            int32_t pair;
            std::memcpy(&pair, x[t] + 2 * i, 4);
            const __m512bh xv = (__m512bh)_mm512_set1_epi32(pair);
            GPT2__UNROLL
            for (int v = 0; v < V; v++) acc[v][t] = _mm512_dpbf16_ps(acc[v][t], wv[v], xv);
        }
    }
    GPT2__UNROLL
    for (int v = 0; v < V; v++) gpt2__store_group_avx512<N>(a, first_row + gpt2__lane_rows * v, lo, hi, t0, acc[v]);
}

/* n rows of K floats (x) rounded to bf16, to nearest even, into dst as rows of `width` (K or K +
   1: the pad is zero). */
GPT2__AVX512_BF16 static void gpt2__round_bf16_avx512(uint16_t* dst, const float* x, int n, int64_t K, int64_t width) {
    for (int t = 0; t < n; t++) {
        for (int64_t k = 0; k < K; k += 16) {
            const __mmask16 m = gpt2__mask16(k, K);
            _mm256_mask_storeu_epi16(dst + (size_t)t * width + k, m, (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, x + (size_t)t * K + k)));
        }
        if (width > K) dst[(size_t)t * width + K] = 0;
    }
}

/* bf16 weights' products over a prompt's tokens on the bf16 unit (GPT2__BF16_UNIT; the set's other
   kernels are the AVX-512 set's): per chunk of gpt2__chunk_tokens tokens, the thread rounds them to bf16 in
   `panel` once, then runs the lanes' driver over its rows. A token's sums do not depend on its
   chunk or tile. A batch's decode rows stay on the fp32 FMAs: they must give what each session
   gets alone, where a single token streams with float activations, to rounding
   (tests/test_batch.cpp: 1e-4; on the bf16 unit they differ by 0.05). */
GPT2__AVX512_BF16 static void gpt2__matmul_bf16_unit_avx512(const gpt2__matmul_args& a, int64_t o_begin, int64_t o_end, float* panel) {
    const int64_t K = a.W->cols, width = gpt2__lanes_columns(*a.W);
    for (int t0 = 0; t0 < a.T; t0 += gpt2__chunk_tokens) {
        gpt2__matmul_args chunk = a;
        chunk.T = std::min(gpt2__chunk_tokens, a.T - t0);
        chunk.x = a.x + (size_t)t0 * K;
        chunk.y = a.y + (size_t)t0 * a.W->rows;
        gpt2__round_bf16_avx512((uint16_t*)panel, chunk.x, chunk.T, K, width);
        chunk.x_bf16 = (const uint16_t*)panel;
        gpt2__matmul_lanes_avx512(chunk, o_begin, o_end, panel);
    }
}

#endif /* GPT2__X86 */

/* ---- src/cpu/kernels/amx.h ---- */
/* The AMX set: the AVX-512 set with the bf16 unit, whose products of many rows multiply AMX tiles
   (Intel's Advanced Matrix Extensions, since Sapphire Rapids): q8_0 and q4_0 lanes times int8
   activations quantized as the AVX-512 int8 panels quantize them (TDPBSUD), and bf16 lanes times a
   prompt's activations rounded to bf16 (TDPBF16PS). A lone token, and 2 or 3 rows, stay on the
   AVX-512 kernels (streaming W is memory's work, not the multiplier's); f16 prompts stay on the
   AVX-512 FMAs (AMX multiplies bf16, whose 8-bit mantissa would round f16's 11 bits).

   Run on AMX hardware on one host so far (Intel Xeon, Emerald Rapids, 2026-12-07): the tests pass
   on the tiles; bf16 prompts run 4-5x the avx512_bf16 set, q8_0 ones 0.8-1.0x its int8 tiles
   (docs/PERFORMANCE.md), so the set stays off by default. Its arithmetic, layouts and blocking
   run in the tests everywhere through gpt2__amx_model, a plain C++ model of the tile operations
   (the kernel set "amx_model", compiled with GPT2_AMX_MODEL); the same kernels over the
   instructions (gpt2__amx_hardware, the set "amx") are compiled only with GPT2_AMX and chosen only
   where the CPU has AMX and the OS grants the process its tile data (dispatch.h).

   A tile is up to 16 rows of 64 bytes. TDPBSUD adds to C (rows x 16 int32) the dot products of
   A's rows (signed bytes) with B's columns (unsigned bytes, 4 to a 32-bit column of a row of B:
   B's row k holds bytes 4k..4k+3 of every column). The lanes of a q8_0 matrix are already B
   tiles: per block and group, vector s holds word s (bytes 4s..4s+3) of each of the 16 rows'
   blocks as w + 128 (avx512_panels.h), so a block's 8 vectors, 128 bytes apart, are the 8 rows of
   B for K = 32; A is 16 tokens' int8 values of that block, as quantize_q8_packed wrote them. C is
   then sum x (w + 128): the token's start (-128 times its sum of x) makes it sum x w, exactly the
   integer the AVX-512 tile sums, and the same float arithmetic scales it, so the outputs are the
   AVX-512 lanes' bits, a batch's decode rows the lone token's. A q4_0 panel's nibbles are spread
   per product into that layout (values 0-15; the start divided by 16: -8 times the sum). bf16
   lanes are B tiles for TDPBF16PS as they are: per pair of columns a row of the group's 16 rows'
   pairs, 128 bytes apart; C sums a prompt's products over all of K in fp32. */

#if defined(GPT2__X86)

/* What LDTILECFG reads: palette 1, then per tile its bytes per row and rows. */
struct gpt2__amx_config {
    uint8_t palette = 1, start_row = 0, reserved[14] = {};
    uint16_t colsb[16] = {};
    uint8_t rows[16] = {};
};
static_assert(sizeof(gpt2__amx_config) == 64, "LDTILECFG reads 64 bytes");

/* The tiles the kernels use: C, A and B of a product, and A and B of a bf16 product's last
   columns when K is not a multiple of 32. */
enum { gpt2__tile_c = 0, gpt2__tile_a = 1, gpt2__tile_b = 2, gpt2__tile_a_last = 3, gpt2__tile_b_last = 4 };

/* A configuration for n tokens (rows of A and C): int8 A of 32 bytes (a block) and B of 8 rows,
   or bf16 A of 64 bytes (32 values) and B of 16 rows (pairs), and for bf16 the last `last_pairs`
   pairs of columns (A of 4 bytes each, B of a row each). */
static inline gpt2__amx_config gpt2__amx_shapes(int n, bool int8, int last_pairs) {
    gpt2__amx_config c;
    c.rows[gpt2__tile_c] = (uint8_t)n;
    c.colsb[gpt2__tile_c] = 64;
    c.rows[gpt2__tile_a] = (uint8_t)n;
    c.colsb[gpt2__tile_a] = int8 ? 32 : 64;
    c.rows[gpt2__tile_b] = int8 ? 8 : 16;
    c.colsb[gpt2__tile_b] = 64;
    if (last_pairs) {
        c.rows[gpt2__tile_a_last] = (uint8_t)n;
        c.colsb[gpt2__tile_a_last] = (uint16_t)(4 * last_pairs);
        c.rows[gpt2__tile_b_last] = (uint8_t)last_pairs;
        c.colsb[gpt2__tile_b_last] = 64;
    }
    return c;
}

/* A bf16 product's 2 x 2 block: the sums of 2 groups of 16 rows and 2 tiles of 16 tokens in C
   tiles 0-3 (group g, tokens u: tile 2u + g), the tokens' A tiles 4 and 5, the groups' B tiles 6
   and 7, so each tile loaded serves two products. (A tile of each a product, from L2, held a
   product to about 70 cycles where TDPBF16PS takes 16: the block ran the product 1.5-1.7x as
   fast on Emerald Rapids.) */
enum { gpt2__tile_block_c = 0, gpt2__tile_block_a = 4, gpt2__tile_block_b = 6 };
static inline gpt2__amx_config gpt2__amx_block_shapes() {
    gpt2__amx_config c;
    for (int t = 0; t < 8; t++) c.rows[t] = 16, c.colsb[t] = 64;
    return c;
}

/* The tile operations in plain C++, as Intel's manual defines them (TILELOADD, TILESTORED,
   TILEZERO, TDPBSUD, TDPBF16PS: bf16 inputs that are subnormal read as zero, each product exact
   in fp32, added to the sum in turn, rounded to nearest even, a subnormal sum flushed to zero).
   Each thread has its own tiles, as each core has; a tile's bytes past its shape are zero. */
struct gpt2__amx_model {
    struct State {
        gpt2__amx_config config;
        alignas(64) uint8_t tile[8][16][64];
    };
    static State& state() {
        static thread_local State s;
        return s;
    }
    static void configure(const gpt2__amx_config& c) {
        State& s = state();
        s.config = c;
        std::memset(s.tile, 0, sizeof(s.tile));
    }
    static void release() { configure(gpt2__amx_config()); }
    template <int T>
    static void zero() {
        std::memset(state().tile[T], 0, sizeof(state().tile[T]));
    }
    template <int T>
    static void load(const void* base, size_t stride) {
        State& s = state();
        std::memset(s.tile[T], 0, sizeof(s.tile[T]));
        for (int r = 0; r < s.config.rows[T]; r++) std::memcpy(s.tile[T][r], (const uint8_t*)base + (size_t)r * stride, s.config.colsb[T]);
    }
    template <int T>
    static void store(void* base, size_t stride) {
        const State& s = state();
        for (int r = 0; r < s.config.rows[T]; r++) std::memcpy((uint8_t*)base + (size_t)r * stride, s.tile[T][r], s.config.colsb[T]);
    }
    /* C (int32) += A (signed bytes) . B (unsigned bytes) */
    template <int C, int A, int B>
    static void dpbsud() {
        State& s = state();
        const int M = s.config.rows[C], N = s.config.colsb[C] / 4, K = s.config.colsb[A] / 4;
        for (int m = 0; m < M; m++)
            for (int n = 0; n < N; n++) {
                int32_t sum;
                std::memcpy(&sum, s.tile[C][m] + 4 * n, 4);
                for (int k = 0; k < K; k++)
                    for (int i = 0; i < 4; i++) sum += (int32_t)(int8_t)s.tile[A][m][4 * k + i] * (int32_t)s.tile[B][k][4 * n + i];
                std::memcpy(s.tile[C][m] + 4 * n, &sum, 4);
            }
    }
    static float bf16_input(const uint8_t* p) {
        uint16_t h;
        std::memcpy(&h, p, 2);
        if ((h & 0x7f80) == 0) h &= 0x8000; /* subnormal inputs as zero */
        return gpt2__bf16_to_f32(h);
    }
    static float flushed(float v) { return std::fabs(v) < std::numeric_limits<float>::min() ? std::copysign(0.0f, v) : v; }
    /* C (fp32) += A (bf16 pairs) . B (bf16 pairs) */
    template <int C, int A, int B>
    static void dpbf16ps() {
        State& s = state();
        const int M = s.config.rows[C], N = s.config.colsb[C] / 4, K = s.config.colsb[A] / 4;
        for (int m = 0; m < M; m++)
            for (int n = 0; n < N; n++) {
                float sum;
                std::memcpy(&sum, s.tile[C][m] + 4 * n, 4);
                for (int k = 0; k < K; k++)
                    for (int i = 0; i < 2; i++) sum = flushed(sum + bf16_input(s.tile[A][m] + 4 * k + 2 * i) * bf16_input(s.tile[B][k] + 4 * n + 2 * i));
                std::memcpy(s.tile[C][m] + 4 * n, &sum, 4);
            }
    }
};

#if defined(GPT2_AMX)
#if defined(_MSC_VER) && !defined(__clang__)
#error "GPT2_AMX: the AMX tiles are written with GCC and clang inline assembly"
#endif
/* The same operations on the CPU's tiles (GCC and clang; the assembler must know AMX). The tile
   number is an immediate: a template argument printed with %c. */
struct gpt2__amx_hardware {
    static void configure(const gpt2__amx_config& c) { __asm__ volatile("ldtilecfg %0" ::"m"(c)); }
    static void release() { __asm__ volatile("tilerelease" ::); }
    template <int T>
    static void zero() {
        __asm__ volatile("tilezero %%tmm%c0" ::"i"(T));
    }
    template <int T>
    static void load(const void* base, size_t stride) {
        __asm__ volatile("tileloadd (%0,%1,1), %%tmm%c2" ::"r"(base), "r"(stride), "i"(T) : "memory");
    }
    template <int T>
    static void store(void* base, size_t stride) {
        __asm__ volatile("tilestored %%tmm%c2, (%0,%1,1)" ::"r"(base), "r"(stride), "i"(T) : "memory");
    }
    template <int C, int A, int B>
    static void dpbsud() {
        __asm__ volatile("tdpbsud %%tmm%c2, %%tmm%c1, %%tmm%c0" ::"i"(C), "i"(A), "i"(B));
    }
    template <int C, int A, int B>
    static void dpbf16ps() {
        __asm__ volatile("tdpbf16ps %%tmm%c2, %%tmm%c1, %%tmm%c0" ::"i"(C), "i"(A), "i"(B));
    }
};
#endif

/* Rows a product needs for the tiles; fewer stay on the AVX-512 kernels (a lone token's decode
   streams its lanes there, as 2 or 3 rows do). */
static const int gpt2__amx_min_rows = gpt2__panel_min_rows;

/* The spread of group j of a q4_0 panel at p into q8_0's layout of B tiles, nibbles as they are
   (0-15): per block 8 rows of 64 bytes, row s lane i the nibbles of word s of row i's block. */
GPT2__AVX512 static inline void gpt2__spread_nibbles_avx512(uint8_t* dst, const uint8_t* p, int j, int64_t nb) {
    const __m512i low = _mm512_set1_epi8(15);
    for (int64_t b = 0; b < nb; b++, dst += 8 * 64) {
        const uint8_t* block = p + (size_t)b * gpt2__panel_block_bytes<GPT2_TYPE_Q4_0> + 64 * j;
        for (int k = 0; k < 4; k++) {
            const __m512i packed = _mm512_loadu_si512(block + 128 * k);
            _mm512_storeu_si512(dst + 64 * k, _mm512_and_si512(packed, low));
            _mm512_storeu_si512(dst + 64 * (k + 4), _mm512_and_si512(_mm512_srli_epi16(packed, 4), low));
        }
    }
}

/* q8_0 or q4_0 lanes (LAYOUT) times a.xq_packed on tiles, a group of 16 rows at a time, 16 tokens
   at a time: per block one TDPBSUD, then the int32 sums scaled in 16 float vectors as the AVX-512
   tile scales them (gpt2__tile_int8_avx512), the same bits. `scratch` holds a q4_0 group spread. */
template <class Tiles, uint32_t LAYOUT>
GPT2__AVX512 static void gpt2__matmul_int8_amx_layout(const gpt2__matmul_args& a, int64_t o_begin, int64_t o_end, uint8_t* scratch) {
    constexpr bool nibbles = LAYOUT == GPT2_TYPE_Q4_0;
    constexpr size_t block_bytes = gpt2__panel_block_bytes<LAYOUT>;
    const int64_t K = a.W->cols, nb = K / gpt2__q8_block_values;
    const size_t ldx = gpt2__q8_packed_row_bytes(K), panel_bytes = (size_t)nb * block_bytes;
    alignas(64) int32_t c[16][16];
    int configured = 0;
    for (int64_t first = o_begin / gpt2__lane_rows * gpt2__lane_rows; first < o_end; first += gpt2__lane_rows) {
        const uint8_t* p = a.W->lanes + (size_t)(first / gpt2__panel_rows) * panel_bytes;
        const int j = (int)(first / gpt2__lane_rows % 2);
        const uint8_t* scales = gpt2__q8_group_scales<LAYOUT>(p, j);
        const uint8_t* words = p + 64 * j; /* block b's B tile: 8 rows 128 bytes apart */
        size_t words_step = block_bytes, words_stride = 128;
        if constexpr (nibbles) {
            gpt2__spread_nibbles_avx512(scratch, p, j, nb);
            words = scratch, words_step = 8 * 64, words_stride = 64;
        }
        for (int t0 = 0; t0 < a.T; t0 += 16) {
            const int n = std::min(16, a.T - t0);
            if (n != configured) Tiles::configure(gpt2__amx_shapes(configured = n, true, 0));
            const uint8_t* x = a.xq_packed + (size_t)t0 * ldx;
            __m512 f[16];
            GPT2__UNROLL
            for (int t = 0; t < 16; t++) f[t] = _mm512_setzero_ps();
            for (int64_t b = 0; b < nb; b++) {
                Tiles::template zero<gpt2__tile_c>();
                Tiles::template load<gpt2__tile_a>(x + gpt2__q8_block_values * b, ldx);
                Tiles::template load<gpt2__tile_b>(words + (size_t)b * words_step, words_stride);
                Tiles::template dpbsud<gpt2__tile_c, gpt2__tile_a, gpt2__tile_b>();
                Tiles::template store<gpt2__tile_c>(c, 64);
                const __m512 w_scale = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(scales + (size_t)b * block_bytes)));
                GPT2__UNROLL /* a fixed count, so the sums stay in registers */
                for (int t = 0; t < 16; t++) {
                    if (t >= n) continue;
                    const uint8_t* row = x + (size_t)t * ldx;
                    const float x_scale = ((const float*)(row + K))[b];
                    const int32_t start = ((const int32_t*)(row + K + 4 * nb))[b]; /* -8 or -128 times the sum of x: exact */
                    const __m512i d = _mm512_add_epi32(_mm512_load_si512(c[t]), _mm512_set1_epi32(nibbles ? start / 16 : start));
                    f[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_mul_ps(w_scale, _mm512_set1_ps(x_scale)), f[t]);
                }
            }
            GPT2__UNROLL
            for (int t = 0; t < 16; t++)
                if (t < n) {
                    const __m512 sums = gpt2__lane_order(f[t]);
                    gpt2__store_group_avx512<1>(a, first, o_begin, o_end, t0 + t, &sums);
                }
        }
    }
    if (configured) Tiles::release();
}

/* The set's GPT2__INT8_PANELS: q8_0 and q4_0 lanes on the tiles; fewer than gpt2__amx_min_rows
   rows, or a matrix without lanes, on the AVX-512 kernel. */
template <class Tiles>
GPT2__AVX512 static void gpt2__matmul_int8_amx(const gpt2__matmul_args& a, int64_t o_begin, int64_t o_end, float* panel) {
    if (!a.W->lanes || a.T < gpt2__amx_min_rows) return gpt2__matmul_int8_panels_avx512(a, o_begin, o_end, panel);
    if (a.W->type == GPT2_TYPE_Q4_0) return gpt2__matmul_int8_amx_layout<Tiles, GPT2_TYPE_Q4_0>(a, o_begin, o_end, (uint8_t*)panel);
    gpt2__matmul_int8_amx_layout<Tiles, GPT2_TYPE_Q8_0>(a, o_begin, o_end, (uint8_t*)panel);
}

/* A stored C tile's first n rows (a token each) as the sums of the group of 16 rows from row g for
   tokens t.., the outputs of rows [lo, hi) stored as gpt2__store_out does. */
GPT2__AVX512 static inline void gpt2__store_tile_rows(const gpt2__matmul_args& a, const float (*sums)[16], int64_t g, int64_t lo, int64_t hi, int t, int n) {
    for (int i = 0; i < n; i++) {
        const __m512 row = _mm512_load_ps(sums[i]);
        gpt2__store_group_avx512<1>(a, g, lo, hi, t + i, &row);
    }
}

/* A bf16 prompt on the tiles (GPT2__BF16_UNIT): per chunk of gpt2__chunk_tokens tokens, the thread
   rounds them to bf16 in `panel` (as the bf16 unit does), then per pair of groups of 16 rows and
   32 tokens a 2 x 2 block of C tiles, and per group and 16 tokens the blocks leave (and every
   group where K is not a multiple of 32) one C tile, sums the TDPBF16PS of every 32 columns (the
   last fewer), and their rows are stored. Each output is its own row of a C tile, summed over the
   same products in the same order in either: the same bits. */
template <class Tiles>
GPT2__AVX512_BF16 static void gpt2__matmul_bf16_amx(const gpt2__matmul_args& a, int64_t o_begin, int64_t o_end, float* panel) {
    const int64_t K = a.W->cols, width = gpt2__lanes_columns(*a.W), pairs = width / 2, full = pairs / 16 * 16;
    const int last = (int)(pairs - full);
    const size_t panel_bytes = gpt2__f16_column_bytes * (size_t)width, ldx = 2 * (size_t)width;
    const uint16_t* x_bf16 = (const uint16_t*)panel;
    const auto group_at = [&](int64_t first) { /* pair i's row: 128 i on */
        return a.W->lanes + (size_t)(first / gpt2__panel_rows) * panel_bytes + 64 * (first / gpt2__lane_rows % 2);
    };
    alignas(64) float c[4][16][16];
    int configured = 0; /* the single tiles' rows, or -1: the blocks' shapes */
    for (int t0 = 0; t0 < a.T; t0 += gpt2__chunk_tokens) {
        const int chunk = std::min(gpt2__chunk_tokens, a.T - t0);
        gpt2__round_bf16_avx512((uint16_t*)panel, a.x + (size_t)t0 * K, chunk, K, width);
        for (int64_t first = o_begin / gpt2__lane_rows * gpt2__lane_rows; first < o_end; first += 2 * gpt2__lane_rows) {
            const bool blocks = !last && first + gpt2__lane_rows < o_end; /* both groups, K in whole tiles */
            const uint8_t *g0 = group_at(first), *g1 = group_at(first + gpt2__lane_rows);
            int u0 = 0;
            for (; blocks && u0 + 32 <= chunk; u0 += 32) {
                if (configured != -1) Tiles::configure(gpt2__amx_block_shapes()), configured = -1;
                constexpr int C = gpt2__tile_block_c, A = gpt2__tile_block_a, B = gpt2__tile_block_b;
                const uint8_t* x = (const uint8_t*)(x_bf16 + (size_t)u0 * width);
                Tiles::template zero<C>(), Tiles::template zero<C + 1>(), Tiles::template zero<C + 2>(), Tiles::template zero<C + 3>();
                for (int64_t i = 0; i < full; i += 16) {
                    Tiles::template load<A>(x + 4 * i, ldx);
                    Tiles::template load<B>(g0 + 128 * i, 128);
                    Tiles::template dpbf16ps<C, A, B>();
                    Tiles::template load<B + 1>(g1 + 128 * i, 128);
                    Tiles::template dpbf16ps<C + 1, A, B + 1>();
                    Tiles::template load<A + 1>(x + 16 * ldx + 4 * i, ldx);
                    Tiles::template dpbf16ps<C + 2, A + 1, B>();
                    Tiles::template dpbf16ps<C + 3, A + 1, B + 1>();
                }
                Tiles::template store<C>(c[0], 64), Tiles::template store<C + 1>(c[1], 64);
                Tiles::template store<C + 2>(c[2], 64), Tiles::template store<C + 3>(c[3], 64);
                for (int q = 0; q < 4; q++) gpt2__store_tile_rows(a, c[q], first + gpt2__lane_rows * (q % 2), o_begin, o_end, t0 + u0 + 16 * (q / 2), 16);
            }
            for (int64_t g = first; g < std::min(first + 2 * gpt2__lane_rows, o_end); g += gpt2__lane_rows)
                for (int u = u0; u < chunk; u += 16) {
                    const int n = std::min(16, chunk - u);
                    if (n != configured) Tiles::configure(gpt2__amx_shapes(configured = n, false, last));
                    const uint8_t *x = (const uint8_t*)(x_bf16 + (size_t)u * width), *group = group_at(g);
                    Tiles::template zero<gpt2__tile_c>();
                    for (int64_t i = 0; i < full; i += 16) {
                        Tiles::template load<gpt2__tile_a>(x + 4 * i, ldx);
                        Tiles::template load<gpt2__tile_b>(group + 128 * i, 128);
                        Tiles::template dpbf16ps<gpt2__tile_c, gpt2__tile_a, gpt2__tile_b>();
                    }
                    if (last) {
                        Tiles::template load<gpt2__tile_a_last>(x + 4 * full, ldx);
                        Tiles::template load<gpt2__tile_b_last>(group + 128 * full, 128);
                        Tiles::template dpbf16ps<gpt2__tile_c, gpt2__tile_a_last, gpt2__tile_b_last>();
                    }
                    Tiles::template store<gpt2__tile_c>(c[0], 64);
                    gpt2__store_tile_rows(a, c[0], g, o_begin, o_end, t0 + u, n);
                }
        }
    }
    if (configured) Tiles::release();
}

#if !defined(_MSC_VER) || defined(__clang__)
#pragma GCC diagnostic pop /* pushed in x86_prefill.h */
#endif
#endif /* GPT2__X86 */

/* ---- src/cpu/kernels/neon.h ---- */
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
        const int B = gpt2__q8_block_values;
        for (int64_t b = 0; b < n / B; b++) {
            const uint8_t* block = row + gpt2__q8_block_bytes * b;
            const float32x4_t scale = vdupq_n_f32(gpt2__f16_to_f32(gpt2__q8_scale_f16(block)));
            const int8_t* q = gpt2__q8_values(block);
            for (int i = 0; i < B; i += 8) {
                const int16x8_t q16 = vmovl_s8(vld1_s8(q + i));
                const float32x4_t lo = vmulq_f32(scale, vcvtq_f32_s32(vmovl_s16(vget_low_s16(q16))));
                const float32x4_t hi = vmulq_f32(scale, vcvtq_f32_s32(vmovl_s16(vget_high_s16(q16))));
                acc = vfmaq_f32(acc, lo, vld1q_f32(x + B * b + i));
                acc = vfmaq_f32(acc, hi, vld1q_f32(x + B * b + i + 4));
            }
        }
        return vaddvq_f32(acc);
    }
    if (type == GPT2_TYPE_Q4_0) { /* a block at a time through the portable conversion */
        const int B = gpt2__q4_block_values;
        float w[gpt2__q4_block_values];
        for (int64_t b = 0; b < n / B; b++) {
            gpt2__dequantize_row(type, row + gpt2__q4_block_bytes * b, w, B);
            for (int i = 0; i < B; i += 4) acc = vfmaq_f32(acc, vld1q_f32(w + i), vld1q_f32(x + B * b + i));
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
        float w[1] = {0.0f}; /* set: gcc cannot see that every type reaching here fills it */
        gpt2__dequantize_row(type, row + (type == GPT2_TYPE_F32 ? 4 : 2) * k, w, 1);
        sum += w[0] * x[k];
    }
    return sum;
}

/* One q8_0 block (at p) times its 32 quantized activations, as 4 int32 partial sums. */
static inline int32x4_t gpt2__block_dot_q8_neon(const uint8_t* p, const int8_t* xq) {
    const int8_t* q = gpt2__q8_values(p);
    int32x4_t isum = vdupq_n_s32(0);
    for (int i = 0; i < gpt2__q8_block_values; i += 16) {
        const int8x16_t w = vld1q_s8(q + i), xv = vld1q_s8(xq + i);
        isum = vpadalq_s16(isum, vmull_s8(vget_low_s8(w), vget_low_s8(xv)));
        isum = vpadalq_s16(isum, vmull_s8(vget_high_s8(w), vget_high_s8(xv)));
    }
    return isum;
}

/* One q4_0 block (at p) times its 32 quantized activations: the nibbles less 8 as signed bytes. */
static inline int32x4_t gpt2__block_dot_q4_neon(const uint8_t* p, const int8_t* xq) {
    const uint8x16_t packed = vld1q_u8(gpt2__q4_nibbles(p));
    const int8x16_t lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(packed, vdupq_n_u8(15))), vdupq_n_s8(8));
    const int8x16_t hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(packed, 4)), vdupq_n_s8(8));
    const int8x16_t x0 = vld1q_s8(xq), x1 = vld1q_s8(xq + 16);
    int32x4_t isum = vpaddlq_s16(vmull_s8(vget_low_s8(lo), vget_low_s8(x0)));
    isum = vpadalq_s16(isum, vmull_s8(vget_high_s8(lo), vget_high_s8(x0)));
    isum = vpadalq_s16(isum, vmull_s8(vget_low_s8(hi), vget_low_s8(x1)));
    return vpadalq_s16(isum, vmull_s8(vget_high_s8(hi), vget_high_s8(x1)));
}

/* row . x for one row of int8-dot blocks (q8_0 or q4_0, BYTES each) against x quantized by
   gpt2__quantize_q8 (xscale: its block scales): exact integer sums per block, scaled by both
   blocks' scales. */
template <int BYTES, int32x4_t (*BlockDot)(const uint8_t*, const int8_t*)>
static float gpt2__dot_blocks_neon(const uint8_t* row, const int8_t* xq, const float* xscale, int64_t n) {
    const int B = gpt2__q8_block_values;
    float32x4_t acc = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < n / B; b++) {
        const uint8_t* block = row + BYTES * b;
        acc = vfmaq_n_f32(acc, vcvtq_f32_s32(BlockDot(block, xq + B * b)), gpt2__f16_to_f32(gpt2__q8_scale_f16(block)) * xscale[b]);
    }
    return vaddvq_f32(acc);
}

static void gpt2__matmul_rows_neon(const gpt2__matmul_args& a, int64_t o_begin, int64_t o_end, float* panel) {
    (void)panel;
    gpt2__matmul_by_rows<gpt2__dot_blocks_neon<gpt2__q8_block_bytes, gpt2__block_dot_q8_neon>,
                         gpt2__dot_blocks_neon<gpt2__q4_block_bytes, gpt2__block_dot_q4_neon>, gpt2__dot_row_neon>(a, o_begin, o_end);
}

/* NEON's conversion rounds as the FPCR says, to nearest even unless a caller changed it, as
   gpt2__f32_to_f16. */
static void gpt2__to_f16_neon(uint16_t* dst, const float* x, size_t n) {
    size_t i = 0;
    for (; i + 4 <= n; i += 4) vst1_u16(dst + i, vreinterpret_u16_f16(vcvt_f16_f32(vld1q_f32(x + i))));
    gpt2__to_f16_scalar(dst + i, x + i, n - i);
}

#endif /* GPT2__NEON */

/* ---- src/cpu/kernels/wasm_simd128.h ---- */
/* WebAssembly SIMD128 kernels (Emscripten with -msimd128, which defines __wasm_simd128__). A
   browser has no run-time query for SIMD support, so the set is chosen when compiling: a build
   without -msimd128 runs the portable kernels. Kept plain as the NEON set is: matmuls row by row,
   decode widening the weights to float on the fly and prefill once per row; GELU in four lanes;
   attention and the activation quantization use the portable code. SIMD128 has no fused multiply-add, so products and sums
   round separately, as the scalar set's do. */

#if !defined(GPT2_NO_SIMD) && defined(__wasm_simd128__)
#define GPT2__WASM_SIMD128 1
#include <wasm_simd128.h>

/* Eight f16 values to float, exactly as gpt2__f16_to_f32: the exponent and mantissa shifted into
   float's fields and multiplied by 2^112 (the difference of the exponent biases), which is exact
   for normal and subnormal values alike; the sign, and float's all-ones exponent for infinities
   and NaNs, are made in 16-bit lanes and put in the high halves of the floats. */
static inline void gpt2__f16x8_to_f32_wasm(const uint8_t* p, v128_t* lo, v128_t* hi) {
    const v128_t h = wasm_v128_load(p);
    const v128_t magnitude = wasm_v128_and(h, wasm_i16x8_splat(0x7fff));
    const v128_t inf_or_nan = wasm_i16x8_gt(magnitude, wasm_i16x8_splat(0x7bff));
    const v128_t high = wasm_v128_or(wasm_v128_and(h, wasm_i16x8_splat((int16_t)0x8000)), wasm_v128_and(inf_or_nan, wasm_i16x8_splat(0x7f80)));
    const v128_t rebias = wasm_f32x4_splat(0x1p112f), zero = wasm_i16x8_splat(0);
    *lo = wasm_f32x4_mul(wasm_i32x4_shl(wasm_u32x4_extend_low_u16x8(magnitude), 13), rebias);
    *hi = wasm_f32x4_mul(wasm_i32x4_shl(wasm_u32x4_extend_high_u16x8(magnitude), 13), rebias);
    *lo = wasm_v128_or(*lo, wasm_i16x8_shuffle(zero, high, 0, 8, 1, 9, 2, 10, 3, 11));
    *hi = wasm_v128_or(*hi, wasm_i16x8_shuffle(zero, high, 4, 12, 5, 13, 6, 14, 7, 15));
}

static inline float gpt2__sum_f32x4_wasm(v128_t v) {
    return (wasm_f32x4_extract_lane(v, 0) + wasm_f32x4_extract_lane(v, 1)) + (wasm_f32x4_extract_lane(v, 2) + wasm_f32x4_extract_lane(v, 3));
}

/* Eight weights of a row of type TYPE, starting at value k, as floats. */
template <uint32_t TYPE>
static inline void gpt2__load_weights8_wasm(const uint8_t* row, int64_t k, v128_t* lo, v128_t* hi) {
    if constexpr (TYPE == GPT2_TYPE_F32) {
        *lo = wasm_v128_load(row + 4 * k);
        *hi = wasm_v128_load(row + 4 * k + 16);
    } else if constexpr (TYPE == GPT2_TYPE_F16) {
        gpt2__f16x8_to_f32_wasm(row + 2 * k, lo, hi);
    } else { /* bf16: the high half of a float */
        const v128_t h = wasm_v128_load(row + 2 * k), zero = wasm_i16x8_splat(0);
        *lo = wasm_i16x8_shuffle(zero, h, 0, 8, 1, 9, 2, 10, 3, 11);
        *hi = wasm_i16x8_shuffle(zero, h, 4, 12, 5, 13, 6, 14, 7, 15);
    }
}

/* Dot product of a row of f32, f16 or bf16 with x (n values): eight values per step in two
   accumulators of four lanes (which hide the latency of the adds); the tail runs in scalar. */
template <uint32_t TYPE>
static float gpt2__dot_row16_wasm(const uint8_t* row, const float* x, int64_t n) {
    v128_t acc0 = wasm_f32x4_splat(0.0f), acc1 = wasm_f32x4_splat(0.0f);
    int64_t k = 0;
    for (; k + 8 <= n; k += 8) {
        v128_t lo, hi;
        gpt2__load_weights8_wasm<TYPE>(row, k, &lo, &hi);
        acc0 = wasm_f32x4_add(acc0, wasm_f32x4_mul(lo, wasm_v128_load(x + k)));
        acc1 = wasm_f32x4_add(acc1, wasm_f32x4_mul(hi, wasm_v128_load(x + k + 4)));
    }
    float sum = gpt2__sum_f32x4_wasm(wasm_f32x4_add(acc0, acc1));
    for (; k < n; k++) {
        float w;
        gpt2__dequantize_row(TYPE, row + (TYPE == GPT2_TYPE_F32 ? 4 : 2) * k, &w, 1);
        sum += w * x[k];
    }
    return sum;
}

/* A q8_0 row against float activations (the prefill path): each weight is scale * q in float,
   as gpt2__dequantize_row makes it, then multiplied by x. */
static float gpt2__dot_q8_float_wasm(const uint8_t* row, const float* x, int64_t n) {
    const int B = gpt2__q8_block_values;
    v128_t acc0 = wasm_f32x4_splat(0.0f), acc1 = wasm_f32x4_splat(0.0f);
    for (int64_t b = 0; b < n / B; b++) {
        const uint8_t* block = row + gpt2__q8_block_bytes * b;
        const v128_t scale = wasm_f32x4_splat(gpt2__f16_to_f32(gpt2__q8_scale_f16(block)));
        const int8_t* q = gpt2__q8_values(block);
        for (int i = 0; i < B; i += 8) {
            const v128_t q16 = wasm_i16x8_load8x8(q + i);
            const v128_t lo = wasm_f32x4_mul(scale, wasm_f32x4_convert_i32x4(wasm_i32x4_extend_low_i16x8(q16)));
            const v128_t hi = wasm_f32x4_mul(scale, wasm_f32x4_convert_i32x4(wasm_i32x4_extend_high_i16x8(q16)));
            acc0 = wasm_f32x4_add(acc0, wasm_f32x4_mul(lo, wasm_v128_load(x + B * b + i)));
            acc1 = wasm_f32x4_add(acc1, wasm_f32x4_mul(hi, wasm_v128_load(x + B * b + i + 4)));
        }
    }
    return gpt2__sum_f32x4_wasm(wasm_f32x4_add(acc0, acc1));
}

/* Dot product of one weight row with float x. A weight type this set has no loop for (q4_0, and
   any added later) takes the portable dot product, so every type the loader accepts runs; q4_0
   rows against int8 activations take gpt2__dot_q4_scalar (gpt2__matmul_rows_wasm). */
static float gpt2__dot_row_wasm(uint32_t type, const uint8_t* row, const float* x, int64_t n) {
    switch (type) {
    case GPT2_TYPE_F32: return gpt2__dot_row16_wasm<GPT2_TYPE_F32>(row, x, n);
    case GPT2_TYPE_F16: return gpt2__dot_row16_wasm<GPT2_TYPE_F16>(row, x, n);
    case GPT2_TYPE_BF16: return gpt2__dot_row16_wasm<GPT2_TYPE_BF16>(row, x, n);
    case GPT2_TYPE_Q8_0: return gpt2__dot_q8_float_wasm(row, x, n);
    default: return gpt2__dot_row_scalar(type, row, x, n);
    }
}

/* A q8_0 row against int8 activations: each block's integer sum from 16-bit products added in
   pairs (i32x4.dot_i16x8), exact; then the blocks are scaled and summed in gpt2__dot_q8_scalar's
   order, so the result equals the scalar set's bit for bit. */
static float gpt2__dot_q8_wasm(const uint8_t* row, const int8_t* xq, const float* xscale, int64_t n) {
    const int B = gpt2__q8_block_values;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / B; b++) {
        const uint8_t* block = row + gpt2__q8_block_bytes * b;
        const int8_t* q = gpt2__q8_values(block);
        v128_t isum = wasm_i32x4_splat(0);
        for (int i = 0; i < B; i += 16) {
            const v128_t w = wasm_v128_load(q + i), xv = wasm_v128_load(xq + B * b + i);
            isum = wasm_i32x4_add(isum, wasm_i32x4_dot_i16x8(wasm_i16x8_extend_low_i8x16(w), wasm_i16x8_extend_low_i8x16(xv)));
            isum = wasm_i32x4_add(isum, wasm_i32x4_dot_i16x8(wasm_i16x8_extend_high_i8x16(w), wasm_i16x8_extend_high_i8x16(xv)));
        }
        const int32_t total = wasm_i32x4_extract_lane(isum, 0) + wasm_i32x4_extract_lane(isum, 1) + wasm_i32x4_extract_lane(isum, 2) + wasm_i32x4_extract_lane(isum, 3);
        sum += (float)total * (gpt2__f16_to_f32(gpt2__q8_scale_f16(block)) * xscale[b]);
    }
    return sum;
}

/* One row of f16, bf16 or q8_0 weights to float (exact), f16 eight values at a time. */
static void gpt2__widen_row_wasm(uint32_t type, const uint8_t* row, float* out, int64_t n) {
    if (type != GPT2_TYPE_F16) return gpt2__dequantize_row(type, row, out, n);
    int64_t k = 0;
    for (; k + 8 <= n; k += 8) {
        v128_t lo, hi;
        gpt2__f16x8_to_f32_wasm(row + 2 * k, &lo, &hi);
        wasm_v128_store(out + k, lo);
        wasm_v128_store(out + k + 4, hi);
    }
    gpt2__dequantize_row(type, row + 2 * k, out + k, n - k);
}

/* Decode streams each row of W in its own type (GPT2__STREAM_ROWS, GPT2__STREAM_INT8). A prefill row of f16, bf16
   or q8_0 weights is widened to float once, in `panel`, and every token's dot product reads the
   floats: widening f16 costs more than the multiply-adds, and is paid once per row instead of
   once per token. Widening is exact and the dot products add in the order of the streamed ones
   (gpt2__dot_q8_float_wasm's pairs of four lanes are those of gpt2__dot_row16_wasm), so prefill
   and decode give the same bits. Other types stream in prefill too. */
static void gpt2__matmul_rows_wasm(const gpt2__matmul_args& a, int64_t o_begin, int64_t o_end, float* panel) {
    (void)panel;
    gpt2__matmul_by_rows<gpt2__dot_q8_wasm, gpt2__dot_q4_scalar, gpt2__dot_row_wasm>(a, o_begin, o_end);
}
/* GPT2__FLOAT_TILES: widened rows of f16, bf16 and q8_0; other types stream as in decode. */
static void gpt2__matmul_widened_wasm(const gpt2__matmul_args& a, int64_t o_begin, int64_t o_end, float* panel) {
    const uint32_t type = a.W->type;
    if (type != GPT2_TYPE_F16 && type != GPT2_TYPE_BF16 && type != GPT2_TYPE_Q8_0) return gpt2__matmul_rows_wasm(a, o_begin, o_end, panel);
    gpt2__matmul_widened_rows<gpt2__dot_row_wasm, gpt2__widen_row_wasm>(a, o_begin, o_end, panel);
}

/* e^x as contract.h describes it (gpt2__exp_poly), four lanes; 2^n built in the exponent bits. */
static inline v128_t gpt2__exp_wasm(v128_t x) {
    x = wasm_f32x4_max(wasm_f32x4_min(x, wasm_f32x4_splat(gpt2__exp_max)), wasm_f32x4_splat(gpt2__exp_min));
    const v128_t n = wasm_f32x4_nearest(wasm_f32x4_mul(x, wasm_f32x4_splat(gpt2__log2e)));
    v128_t r = wasm_f32x4_sub(x, wasm_f32x4_mul(n, wasm_f32x4_splat(gpt2__ln2_hi)));
    r = wasm_f32x4_sub(r, wasm_f32x4_mul(n, wasm_f32x4_splat(gpt2__ln2_lo)));
    v128_t p = wasm_f32x4_splat(gpt2__exp_poly[0]);
    GPT2__UNROLL
    for (size_t i = 1; i < std::size(gpt2__exp_poly); i++) p = wasm_f32x4_add(wasm_f32x4_mul(p, r), wasm_f32x4_splat(gpt2__exp_poly[i]));
    p = wasm_f32x4_add(wasm_f32x4_mul(wasm_f32x4_mul(p, r), r), wasm_f32x4_add(r, wasm_f32x4_splat(1.0f)));
    const v128_t e = wasm_i32x4_shl(wasm_i32x4_add(wasm_i32x4_trunc_sat_f32x4(n), wasm_i32x4_splat(127)), 23);
    return wasm_f32x4_mul(p, e);
}

/* GELU of four values, both forms, with the constants and approximations of contract.h (as
   gpt2__gelu8_avx2). */
static inline v128_t gpt2__gelu4_wasm(v128_t v, bool tanh_form) {
    const v128_t one = wasm_f32x4_splat(1.0f);
    v128_t g;
    if (tanh_form) {
        const v128_t cubic = wasm_f32x4_mul(wasm_f32x4_mul(wasm_f32x4_splat(gpt2__gelu_cubic), v), wasm_f32x4_mul(v, v));
        const v128_t u = wasm_f32x4_mul(wasm_f32x4_splat(gpt2__sqrt_2_over_pi), wasm_f32x4_add(cubic, v));
        const v128_t e = gpt2__exp_wasm(wasm_f32x4_add(u, u));
        g = wasm_f32x4_sub(one, wasm_f32x4_div(wasm_f32x4_splat(2.0f), wasm_f32x4_add(e, one))); /* tanh u */
    } else {
        const v128_t sign_bit = wasm_f32x4_splat(-0.0f);
        const v128_t sign = wasm_v128_and(v, sign_bit);
        const v128_t z = wasm_v128_andnot(wasm_f32x4_mul(v, wasm_f32x4_splat(gpt2__sqrt_half)), sign_bit);
        const v128_t t = wasm_f32x4_div(one, wasm_f32x4_add(wasm_f32x4_mul(wasm_f32x4_splat(gpt2__erf_p), z), one));
        v128_t p = wasm_f32x4_splat(gpt2__erf_poly[0]);
        GPT2__UNROLL
        for (size_t i = 1; i < std::size(gpt2__erf_poly); i++) p = wasm_f32x4_add(wasm_f32x4_mul(p, t), wasm_f32x4_splat(gpt2__erf_poly[i]));
        p = wasm_f32x4_mul(p, t);
        const v128_t e = gpt2__exp_wasm(wasm_f32x4_neg(wasm_f32x4_mul(z, z)));
        g = wasm_v128_or(wasm_f32x4_sub(one, wasm_f32x4_mul(p, e)), sign); /* erf is odd */
    }
    const v128_t half_v = wasm_f32x4_mul(wasm_f32x4_splat(0.5f), v);
    return wasm_f32x4_add(wasm_f32x4_mul(half_v, g), half_v);
}

/* The tail goes through a padded copy, so every value takes the same arithmetic. */
static void gpt2__gelu_wasm(float* x, size_t n, bool tanh_form) {
    size_t i = 0;
    for (; i + 4 <= n; i += 4) wasm_v128_store(x + i, gpt2__gelu4_wasm(wasm_v128_load(x + i), tanh_form));
    if (i < n) {
        float tail[4] = {0};
        std::memcpy(tail, x + i, (n - i) * 4);
        wasm_v128_store(tail, gpt2__gelu4_wasm(wasm_v128_load(tail), tanh_form));
        std::memcpy(x + i, tail, (n - i) * 4);
    }
}

#endif /* GPT2__WASM_SIMD128 */

/* ---- src/cpu/dispatch.h ---- */
#if defined(GPT2_AMX) && defined(__linux__)
#include <sys/syscall.h> /* arch_prctl, for the AMX tile data */
#include <unistd.h>
#endif

/* Kernel dispatch: the one place that decides which implementation runs on this CPU.

   One binary carries every kernel set its target allows (scalar everywhere; AVX2, AVX-512 and
   AVX-512 with the bf16 unit on x86-64, and AMX where built for it; NEON on AArch64; SIMD128 on
   WebAssembly built with -msimd128) and picks the best one the CPU and OS support, once per
   process: cpuid for the instructions, xgetbv for the OS saving the wide registers (and for AMX,
   Linux's permission to use the tile data, asked once). WebAssembly cannot ask: its set is
   chosen by the compiler flag.
     GPT2_NO_SIMD                     compile the scalar kernels only
     GPT2_FORCE_KERNELS "avx2"        use this set ("scalar", "avx2", "avx512", "avx512_bf16",
                                      "amx", "neon", "wasm_simd128") when the CPU supports it, else
                                      the best one it does
     GPT2_AMX                         compile the AMX set ("amx", amx.h), chosen first where the CPU
                                      has AMX and Linux grants it; off by default (GCC or clang):
                                      on the one AMX host measured, bf16 prompts gain 4-5x and
                                      q8_0 ones nothing (docs/PERFORMANCE.md)
     GPT2_AMX_MODEL                   list "amx_model" after the AVX-512 sets: the AMX set's kernels
                                      on a C++ model of the tiles (slow; the tests' way to run them
                                      on any CPU with AVX-512 and its bf16 unit) */

/* Each set's table (gpt2__kernels, contract.h); attention templates instantiated for both cache types. */
static constexpr gpt2__kernels gpt2__kernels_scalar = {"scalar",
                                                   /* matmul by strategy: STREAM_ROWS, STREAM_INT8, FLOAT_TILES, INT8_PANELS, FLOAT16_LANES, BF16_UNIT, FLOAT16_PROMPT */
                                                   {gpt2__matmul_rows_scalar, gpt2__matmul_rows_scalar, gpt2__matmul_widened_rows<gpt2__dot_row_scalar>, nullptr, nullptr, nullptr, nullptr},
                                                   gpt2__quantize_q8_scalar, nullptr, gpt2__attend_scalar<float>, gpt2__attend_scalar<uint16_t>,
                                                   gpt2__attend_rows_scalar<float>, gpt2__attend_rows_scalar<uint16_t>, gpt2__gelu_scalar, gpt2__layer_norm, gpt2__to_f16_scalar, nullptr, nullptr};
#if defined(GPT2__X86)
static const gpt2__kernels gpt2__kernels_avx2 = {"avx2",
                                                 {gpt2__matmul_rows_avx2, gpt2__matmul_rows_avx2, gpt2__matmul_float_tiles_avx2, nullptr, nullptr, nullptr, nullptr},
                                                 gpt2__quantize_q8_avx2, nullptr, gpt2__attend_avx2<float>, gpt2__attend_avx2<uint16_t>,
                                                 gpt2__attend_rows_avx2<float>, gpt2__attend_rows_avx2<uint16_t>, gpt2__gelu_avx2, gpt2__layer_norm_avx2, gpt2__to_f16_avx2, nullptr, nullptr};
static constexpr gpt2__kernels gpt2__kernels_avx512 = {"avx512",
                                                   {gpt2__matmul_rows_avx512, gpt2__matmul_stream_int8_avx512, gpt2__matmul_float_tiles_avx512,
                                                    gpt2__matmul_int8_panels_avx512, gpt2__matmul_lanes_avx512, nullptr, gpt2__matmul_lanes_avx512},
                                                   gpt2__quantize_q8_avx512, gpt2__quantize_q8_packed_avx512, gpt2__attend_avx512<float>, gpt2__attend_avx512<uint16_t>,
                                                   gpt2__attend_rows_avx2<float>, gpt2__attend_rows_avx2<uint16_t>, gpt2__gelu_avx512, gpt2__layer_norm_avx2, gpt2__to_f16_avx2,
                                                   gpt2__pack_lanes_avx512, gpt2__pack_tile_rows_avx512};
/* the AVX-512 set with bf16 prompts on the bf16 unit */
static constexpr gpt2__kernels gpt2__with_bf16_unit(gpt2__kernels k) {
    k.name = "avx512_bf16";
    k.matmul[GPT2__BF16_UNIT] = gpt2__matmul_bf16_unit_avx512;
    return k;
}
static constexpr gpt2__kernels gpt2__kernels_avx512_bf16 = gpt2__with_bf16_unit(gpt2__kernels_avx512);
/* the AVX-512 set with the bf16 unit whose q8_0, q4_0 and bf16 products of many rows multiply
   tiles (amx.h), through the tile operations of Tiles */
template <class Tiles>
static constexpr gpt2__kernels gpt2__with_amx(gpt2__kernels k, const char* name) {
    k.name = name;
    k.matmul[GPT2__INT8_PANELS] = gpt2__matmul_int8_amx<Tiles>;
    k.matmul[GPT2__BF16_UNIT] = gpt2__matmul_bf16_amx<Tiles>;
    return k;
}
#if defined(GPT2_AMX)
static constexpr gpt2__kernels gpt2__kernels_amx = gpt2__with_amx<gpt2__amx_hardware>(gpt2__kernels_avx512_bf16, "amx");
#endif
#if defined(GPT2_AMX_MODEL)
static constexpr gpt2__kernels gpt2__kernels_amx_model = gpt2__with_amx<gpt2__amx_model>(gpt2__kernels_avx512_bf16, "amx_model");
#endif

struct gpt2__x86_features {
    bool avx2 = false, avx512 = false, avx512_bf16 = false, amx = false;
};

static gpt2__x86_features gpt2__detect_x86() {
    gpt2__x86_features f;
    unsigned r0[4], r1[4], r7[4] = {0, 0, 0, 0}, r7_1[4] = {0, 0, 0, 0};
    gpt2__cpuid(0, 0, r0);
    gpt2__cpuid(1, 0, r1);
    if (r0[0] >= 7) { /* the highest leaf */
        gpt2__cpuid(7, 0, r7);
        gpt2__cpuid(7, 1, r7_1);
    }
    const unsigned ecx1 = r1[2], ebx7 = r7[1], ecx7 = r7[2], edx7 = r7[3];
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
    f.avx512_bf16 = f.avx512 && ((r7_1[0] >> 5) & 1); /* leaf 7, sub-leaf 1, EAX */
    const bool amx_bf16 = (edx7 >> 22) & 1, amx_tile = (edx7 >> 24) & 1, amx_int8 = (edx7 >> 25) & 1, tiles = (xcr0 & 0x60000) == 0x60000; /* XTILECFG, XTILEDATA */
    /* The tile data needs the OS's permission, and only Linux's is asked for (gpt2__amx_granted):
       elsewhere the set is not offered, so nothing is refused or logged. */
#if defined(__linux__)
    const bool os_asked = true;
#else
    const bool os_asked = false;
#endif
    f.amx = os_asked && f.avx512_bf16 && amx_bf16 && amx_tile && amx_int8 && tiles;
    return f;
}

#if defined(GPT2_AMX)
/* Whether this process may use the AMX tile data: Linux (5.16 on) makes a process ask first, with
   arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA); asked once. Else `why` says what refused. */
static bool gpt2__amx_granted(const char** why) {
    static const char* refused = [] () -> const char* {
#if defined(__linux__)
        const long arch_req_xcomp_perm = 0x1023, xfeature_xtiledata = 18;
        if (syscall(SYS_arch_prctl, arch_req_xcomp_perm, xfeature_xtiledata) == 0) return nullptr;
        return errno == EINVAL ? "the kernel does not grant it (arch_prctl ARCH_REQ_XCOMP_PERM: EINVAL; Linux before 5.16?)"
                               : "the kernel refused it (arch_prctl ARCH_REQ_XCOMP_PERM failed)";
#else
        return nullptr; /* nothing to ask: gpt2__detect_x86 finds AMX on Linux alone */
#endif
    }();
    if (why) *why = refused;
    return !refused;
}
#endif
#endif
#if defined(GPT2__NEON)
/* the scalar set with NEON's row dot products (streamed and widened) and f16 conversion */
static constexpr gpt2__kernels gpt2__with_neon(gpt2__kernels k) {
    k.name = "neon";
    k.matmul[GPT2__STREAM_ROWS] = k.matmul[GPT2__STREAM_INT8] = gpt2__matmul_rows_neon;
    k.matmul[GPT2__FLOAT_TILES] = gpt2__matmul_widened_rows<gpt2__dot_row_neon>;
    k.to_f16 = gpt2__to_f16_neon;
    return k;
}
static constexpr gpt2__kernels gpt2__kernels_neon = gpt2__with_neon(gpt2__kernels_scalar);
#endif
#if defined(GPT2__WASM_SIMD128)
/* the scalar set with SIMD128's dot products, widened prefill rows and GELU */
static constexpr gpt2__kernels gpt2__with_simd128(gpt2__kernels k) {
    k.name = "wasm_simd128";
    k.matmul[GPT2__STREAM_ROWS] = k.matmul[GPT2__STREAM_INT8] = gpt2__matmul_rows_wasm;
    k.matmul[GPT2__FLOAT_TILES] = gpt2__matmul_widened_wasm;
    k.gelu = gpt2__gelu_wasm;
    return k;
}
static constexpr gpt2__kernels gpt2__kernels_wasm_simd128 = gpt2__with_simd128(gpt2__kernels_scalar);
#endif

/* Room gpt2__supported_kernels needs: the most sets one target carries (x86-64: amx,
   avx512_bf16, avx512, amx_model, avx2 and scalar). */
static const int gpt2__max_kernel_sets = 6;

/* The kernel sets this CPU can run, best first. */
static int gpt2__supported_kernels(const gpt2__kernels** out) {
    int n = 0;
#if defined(GPT2__X86)
    const gpt2__x86_features f = gpt2__detect_x86();
#if defined(GPT2_AMX)
    if (f.amx && gpt2__amx_granted(nullptr)) out[n++] = &gpt2__kernels_amx;
#endif
    if (f.avx512_bf16) out[n++] = &gpt2__kernels_avx512_bf16;
    if (f.avx512) out[n++] = &gpt2__kernels_avx512;
#if defined(GPT2_AMX_MODEL)
    if (f.avx512_bf16) out[n++] = &gpt2__kernels_amx_model;
#endif
    if (f.avx2) out[n++] = &gpt2__kernels_avx2;
#endif
#if defined(GPT2__NEON)
    out[n++] = &gpt2__kernels_neon;
#endif
#if defined(GPT2__WASM_SIMD128)
    out[n++] = &gpt2__kernels_wasm_simd128;
#endif
    out[n++] = &gpt2__kernels_scalar;
    return n;
}

/* The set named `name` if this CPU supports it, else NULL. */
[[maybe_unused]] static const gpt2__kernels* gpt2__kernels_by_name(const char* name) {
    const gpt2__kernels* sets[gpt2__max_kernel_sets];
    const int n = gpt2__supported_kernels(sets);
    for (int i = 0; i < n; i++)
        if (std::strcmp(sets[i]->name, name) == 0) return sets[i];
    return nullptr;
}

static const gpt2__kernels* gpt2__select_kernels() {
#if defined(GPT2_FORCE_KERNELS)
    if (const gpt2__kernels* forced = gpt2__kernels_by_name(GPT2_FORCE_KERNELS)) return forced;
#endif
    const gpt2__kernels* sets[gpt2__max_kernel_sets];
    gpt2__supported_kernels(sets);
    return sets[0];
}

/* Chosen once per process; constant afterwards (thread-safe static initialisation). */
static const gpt2__kernels& gpt2__cpu_kernels() {
    static const gpt2__kernels* kernels = gpt2__select_kernels();
    return *kernels;
}

/* ---- src/cpu/kv_cache.h ---- */
/* A CPU session's KV cache, in blocks of gpt2__kv_block_rows positions, taken as the context
   fills (nothing for n_ctx up front) and shared by forks (gpt2_session_copy). A block holds its
   positions' keys and values in every layer, (n_layer, 2, gpt2__kv_block_rows, C) values of the
   cache's type (f32 or f16), after a header that counts the caches holding it.

   The one rule: a block held by more than one cache is never written. A cache shares another's
   full blocks below the rows it has cached (gpt2__kv_share), which no pass writes again unless the
   context is cut back into them (gpt2_session_truncate, GPT2_CONTEXT_DISCARD); a pass makes
   every block it writes its own first (gpt2__kv_prepare: copy on write), so no session ever sees
   another's tokens. The count goes up only from a holder (the source of a fork), so a cache that
   finds itself the only holder stays so, and may write; it goes down from any thread (sessions
   of a model may run and be freed on different threads), atomically, and the holder that takes
   it to zero gives the block back: each block once, in whatever order the sessions go.

   Blocks come from the model's pool (gpt2__kv_pool): where huge pages can be asked for (Linux,
   the default allocator), slabs of about 32 MiB, 2 MiB aligned with transparent huge pages asked
   for, as the contiguous cache before them did (decode reads the cache faster from them:
   docs/PERFORMANCE.md); elsewhere a slab is one block. A block given back is handed out again
   first; a slab whose blocks are all back is freed, but for one kept per size (a context that
   crosses a slab's end back and forth does not allocate each time). */

struct gpt2__kv_slab;

/* A block's header: 64 bytes, so that the values after it stay 64-byte aligned. */
struct alignas(64) gpt2__kv_block_header {
    std::atomic<int> holders{0};
    gpt2__kv_slab* slab = nullptr;
};

struct gpt2__kv_slab {
    uint8_t* memory = nullptr; /* slots_per_slab slots of a block and its header */
    int used = 0;              /* its blocks handed out */
};

/* The blocks of one size (a cache of f32 or of f16 values). */
struct gpt2__kv_size {
    size_t slot_bytes = 0; /* a header and a block */
    int slots_per_slab = 0;
    gpt2__vector<gpt2__kv_slab*> slabs;
    gpt2__vector<uint8_t*> free; /* the slots not handed out: a stack, the last given back handed out first */
};

/* A model's blocks (gpt2_model.kv_pool, made with the model by the CPU backend's model_attach). */
struct gpt2__kv_pool {
    std::mutex mutex;          /* guards `sizes` */
    gpt2__kv_size sizes[2];    /* f32, f16 */
    std::atomic<int64_t> block_bytes{0}; /* of the blocks handed out: the caches' memory, a shared block once */
};

struct gpt2__kv_cache {
    const gpt2_model* model = nullptr;
    size_t row_bytes = 0;          /* one position's keys (or values) in one layer: C values */
    bool f16 = false;
    gpt2__vector<uint8_t*> blocks; /* blocks[b] holds positions [b B, (b + 1) B): its values (the header is before them) */
};

static size_t gpt2__kv_block_bytes(const gpt2__kv_cache* c) { return 2 * (size_t)c->model->n_layer * gpt2__kv_block_rows * c->row_bytes; }

static gpt2__kv_block_header* gpt2__kv_header(uint8_t* block) { return (gpt2__kv_block_header*)(block - sizeof(gpt2__kv_block_header)); }

/* Where the rows of `layer`'s keys (kv 0) or values (kv 1) start in a block. */
static size_t gpt2__kv_part_offset(const gpt2__kv_cache* c, int layer, int kv) { return (size_t)(2 * layer + kv) * gpt2__kv_block_rows * c->row_bytes; }

#if defined(GPT2__HUGE_PAGES)
static const size_t gpt2__kv_slab_align = (size_t)2 << 20, gpt2__kv_slab_target = (size_t)32 << 20; /* huge pages */
#else
static const size_t gpt2__kv_slab_align = 64, gpt2__kv_slab_target = 0; /* a block a slab */
#endif

/* A new slab of `size`'s blocks, its slots free; false when out of memory. The caller holds the
   pool's mutex. */
static bool gpt2__kv_slab_new(gpt2__kv_size* size) {
    const size_t bytes = (size_t)size->slots_per_slab * size->slot_bytes;
    size->slabs.reserve(size->slabs.size() + 1);
    size->free.reserve(size->free.size() + (size_t)size->slots_per_slab); /* so that giving back never allocates */
    void* slab = GPT2_MALLOC(sizeof(gpt2__kv_slab));
    uint8_t* memory = (uint8_t*)gpt2__malloc_aligned(bytes, gpt2__kv_slab_align);
    if (!slab || !memory) {
        GPT2_FREE(slab);
        gpt2__free_aligned(memory);
        return false;
    }
    gpt2__advise_huge_pages(memory, bytes);
    gpt2__kv_slab* s = new (slab) gpt2__kv_slab();
    s->memory = memory;
    size->slabs.push_back(s);
    for (int i = size->slots_per_slab - 1; i >= 0; i--) { /* handed out from the slab's start */
        uint8_t* slot = memory + (size_t)i * size->slot_bytes;
        (new (slot) gpt2__kv_block_header())->slab = s;
        size->free.push_back(slot);
    }
    return true;
}

/* Frees slab `s`, none of its blocks handed out; the caller holds the pool's mutex. */
static void gpt2__kv_slab_free(gpt2__kv_size* size, gpt2__kv_slab* s) {
    const uint8_t *begin = s->memory, *end = s->memory + (size_t)size->slots_per_slab * size->slot_bytes;
    size->free.erase(std::remove_if(size->free.begin(), size->free.end(), [&](const uint8_t* slot) { return slot >= begin && slot < end; }), size->free.end());
    size->slabs.erase(std::find(size->slabs.begin(), size->slabs.end(), s));
    gpt2__free_aligned(s->memory);
    s->~gpt2__kv_slab();
    GPT2_FREE(s);
}

/* The pool of model m, its sizes set from m's shape; NULL when out of memory. */
static gpt2__kv_pool* gpt2__kv_pool_new(const gpt2_model* m) {
    void* memory = GPT2_MALLOC(sizeof(gpt2__kv_pool));
    if (!memory) return nullptr;
    gpt2__kv_pool* pool = new (memory) gpt2__kv_pool();
    for (int f16 = 0; f16 < 2; f16++) {
        gpt2__kv_size& size = pool->sizes[f16];
        size.slot_bytes = sizeof(gpt2__kv_block_header) + 2 * (size_t)m->n_layer * gpt2__kv_block_rows * (size_t)m->n_embd * (f16 ? 2 : 4);
        /* about gpt2__kv_slab_target bytes (one block, where a block is more), in whole huge pages */
        const size_t slots = std::max<size_t>(1, gpt2__kv_slab_target / size.slot_bytes);
        const size_t slab = (slots * size.slot_bytes + gpt2__kv_slab_align - 1) / gpt2__kv_slab_align * gpt2__kv_slab_align;
        size.slots_per_slab = (int)(slab / size.slot_bytes);
    }
    return pool;
}

/* Frees the pool of a model whose sessions are all gone. */
static void gpt2__kv_pool_free(gpt2__kv_pool* pool) {
    if (!pool) return;
    for (gpt2__kv_size& size : pool->sizes)
        while (!size.slabs.empty()) gpt2__kv_slab_free(&size, size.slabs.back());
    pool->~gpt2__kv_pool();
    GPT2_FREE(pool);
}

/* The bytes of model m's blocks held by its sessions, a shared block once (tests, gpt2-bench). */
[[maybe_unused]] static int64_t gpt2__kv_bytes(const gpt2_model* m) { return m->kv_pool ? m->kv_pool->block_bytes.load() : 0; }

/* A new block, held by one cache; NULL when out of memory. */
static uint8_t* gpt2__kv_block_new(const gpt2__kv_cache* c) {
    gpt2__kv_pool* pool = c->model->kv_pool;
    gpt2__kv_size& size = pool->sizes[c->f16];
    uint8_t* slot;
    {
        std::lock_guard<std::mutex> lock(pool->mutex);
        if (size.free.empty() && !gpt2__kv_slab_new(&size)) return nullptr;
        slot = size.free.back();
        size.free.pop_back();
        ((gpt2__kv_block_header*)slot)->slab->used++;
    }
    ((gpt2__kv_block_header*)slot)->holders.store(1, std::memory_order_relaxed);
    pool->block_bytes.fetch_add((int64_t)gpt2__kv_block_bytes(c), std::memory_order_relaxed);
    return slot + sizeof(gpt2__kv_block_header);
}

/* Lets go of a block; the last holder gives it back. acq_rel: every holder's reads of the block
   come before it is handed out again. */
static void gpt2__kv_block_release(const gpt2__kv_cache* c, uint8_t* block) {
    gpt2__kv_block_header* h = gpt2__kv_header(block);
    if (h->holders.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    gpt2__kv_pool* pool = c->model->kv_pool;
    gpt2__kv_size& size = pool->sizes[c->f16];
    pool->block_bytes.fetch_sub((int64_t)gpt2__kv_block_bytes(c), std::memory_order_relaxed);
    std::lock_guard<std::mutex> lock(pool->mutex);
    size.free.push_back((uint8_t*)h); /* within the capacity reserved with its slab */
    if (--h->slab->used > 0) return;
    for (gpt2__kv_slab* other : size.slabs)
        if (other != h->slab && other->used == 0) { /* one empty slab is kept: free this one */
            gpt2__kv_slab_free(&size, h->slab);
            return;
        }
}

/* gpt2__kv_block_new found no free block and could not allocate a slab. */
static gpt2_result gpt2__kv_out_of_memory(const gpt2__kv_cache* c, gpt2_error* err) {
    const gpt2__kv_size& size = c->model->kv_pool->sizes[c->f16];
    return gpt2__fail(err, GPT2_ERROR_OUT_OF_MEMORY, "cannot allocate %zu bytes for %d blocks of the KV cache", (size_t)size.slots_per_slab * size.slot_bytes,
                      size.slots_per_slab);
}

/* Copies rows [0, n) of every layer's keys and values from block `from` into block `to`. */
static void gpt2__kv_copy_block_rows(const gpt2__kv_cache* c, uint8_t* to, const uint8_t* from, int n) {
    if (n <= 0) return;
    for (int l = 0; l < c->model->n_layer; l++)
        for (int kv = 0; kv < 2; kv++) std::memcpy(to + gpt2__kv_part_offset(c, l, kv), from + gpt2__kv_part_offset(c, l, kv), (size_t)n * c->row_bytes);
}

/* Keeps the first n_blocks blocks and lets go of the others. */
static void gpt2__kv_keep_blocks(gpt2__kv_cache* c, size_t n_blocks) {
    for (size_t b = n_blocks; b < c->blocks.size(); b++) gpt2__kv_block_release(c, c->blocks[b]);
    if (n_blocks < c->blocks.size()) c->blocks.resize(n_blocks);
}

static void gpt2__kv_free(gpt2__kv_cache* c) { gpt2__kv_keep_blocks(c, 0); }

static size_t gpt2__kv_blocks_for(int n_rows) { return ((size_t)n_rows + gpt2__kv_block_rows - 1) / gpt2__kv_block_rows; }

/* Readies the cache for a pass that writes rows [first, end) (the rows before first hold the
   context): blocks up to `end`, each that holds rows of [first, end) its own (a shared one
   replaced by a copy of its rows before first), and none past `end` (the rows there are no
   longer in the context). Running it again changes nothing (a pass resumed after a pause calls
   it again). Out of memory, every block held is still valid and the context unchanged. */
static gpt2_result gpt2__kv_prepare(gpt2__kv_cache* c, int first, int end, gpt2_error* err) {
    const size_t n_blocks = gpt2__kv_blocks_for(end);
    gpt2__kv_keep_blocks(c, n_blocks);
    c->blocks.reserve(n_blocks);
    while (c->blocks.size() < n_blocks) {
        uint8_t* block = gpt2__kv_block_new(c);
        if (!block) return gpt2__kv_out_of_memory(c, err);
        c->blocks.push_back(block);
    }
    for (size_t b = (size_t)first / gpt2__kv_block_rows; b < n_blocks; b++) {
        uint8_t* held = c->blocks[b];
        if (gpt2__kv_header(held)->holders.load(std::memory_order_acquire) == 1) continue;
        uint8_t* own = gpt2__kv_block_new(c);
        if (!own) return gpt2__kv_out_of_memory(c, err);
        gpt2__kv_copy_block_rows(c, own, held, first - (int)b * gpt2__kv_block_rows);
        gpt2__kv_block_release(c, held);
        c->blocks[b] = own;
    }
    return GPT2_OK;
}

/* Makes `dst` hold rows [0, n) of `src` (a cache of the same model and type, n within the rows
   it has cached) and nothing else: src's full blocks among them shared, the rows of a last
   partial one copied into a block of dst's own (a block not full may be written by src's next
   pass, which may be under way: the stage pauses a pass between frames). Out of memory, dst is
   unchanged. */
static gpt2_result gpt2__kv_share(gpt2__kv_cache* dst, const gpt2__kv_cache* src, int n, gpt2_error* err) {
    const size_t full = (size_t)n / gpt2__kv_block_rows;
    const int partial = n % gpt2__kv_block_rows;
    gpt2__vector<uint8_t*> blocks;
    blocks.reserve(full + 1);
    uint8_t* last = nullptr;
    if (partial) {
        last = gpt2__kv_block_new(dst);
        if (!last) return gpt2__kv_out_of_memory(dst, err);
        gpt2__kv_copy_block_rows(dst, last, src->blocks[full], partial);
    }
    for (size_t b = 0; b < full; b++) {
        gpt2__kv_header(src->blocks[b])->holders.fetch_add(1, std::memory_order_relaxed); /* src holds it meanwhile */
        blocks.push_back(src->blocks[b]);
    }
    if (last) blocks.push_back(last);
    gpt2__kv_keep_blocks(dst, 0);
    dst->blocks.swap(blocks);
    return GPT2_OK;
}

/* The row of position `pos` of `layer`'s keys (kv 0) or values (kv 1); its block is held. */
static uint8_t* gpt2__kv_row(const gpt2__kv_cache* c, int layer, int kv, int pos) {
    return c->blocks[(size_t)pos / gpt2__kv_block_rows] + gpt2__kv_part_offset(c, layer, kv) + (size_t)(pos % gpt2__kv_block_rows) * c->row_bytes;
}

/* The view of `layer`'s keys (kv 0) or values (kv 1) that the attention kernels read. */
template <class KV>
static gpt2__kv_rows<KV> gpt2__kv_view(const gpt2__kv_cache* c, int layer, int kv) {
    return {c->blocks.data(), gpt2__kv_part_offset(c, layer, kv) / sizeof(KV), c->row_bytes / sizeof(KV)};
}

/* Copies rows [0, n) of every layer (held) between the cache and `packed`: the keys (n_layer, n,
   C), then the values likewise, as a session's state stores them. */
static void gpt2__kv_copy_rows(const gpt2__kv_cache* c, int n, uint8_t* packed, bool to_cache) {
    for (int kv = 0; kv < 2; kv++)
        for (int l = 0; l < c->model->n_layer; l++)
            for (int pos = 0; pos < n;) {
                const int rows = std::min(n - pos, gpt2__kv_block_rows - pos % gpt2__kv_block_rows); /* the rest of pos's block */
                uint8_t* row = gpt2__kv_row(c, l, kv, pos);
                const size_t bytes = (size_t)rows * c->row_bytes;
                if (to_cache) std::memcpy(row, packed, bytes);
                else std::memcpy(packed, row, bytes);
                packed += bytes;
                pos += rows;
            }
}

/* ---- src/cpu/threadpool.h ---- */
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
    typedef void (*job_fn)(void* context, int thread_index);
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
    /* gpt2__parallel_for's chunks still to run in each thread's region: the first in the low 32
       bits, the end in the high 32, one word, so that its owner (from the front) and a thief
       (from the back) each take a chunk by one compare-and-swap; a cache line each */
    struct alignas(64) region {
        std::atomic<uint64_t> chunks{0};
    };
    region* regions = nullptr; /* n_threads of them when there are workers (gpt2__pool_start) */
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
        pool->job(pool->context, index);
        if (pool->pending.fetch_sub(1) == 1 && pool->caller_sleeping.load()) {
            std::lock_guard<std::mutex> lock(pool->mutex);
            pool->done.notify_one();
        }
    }
}

/* WebAssembly built by Emscripten without -pthread has no threads: a std::thread would abort,
   and threads there need a SharedArrayBuffer, which browsers give only to pages served with
   cross-origin isolation headers (COOP/COEP) that a plain static server does not send. There
   every session runs on the calling thread alone, whatever n_threads asks for (results do not
   depend on the thread count). */
#if defined(__EMSCRIPTEN__) && !defined(__EMSCRIPTEN_PTHREADS__)
#define GPT2__SINGLE_THREADED 1
#endif

/* Returns false when threads could not be started (the pool then runs everything inline). */
static bool gpt2__pool_start(gpt2__pool* pool, int n_threads) {
    pool->n_threads = 1;
#if defined(GPT2__SINGLE_THREADED)
    n_threads = 1;
#endif
    if (n_threads > 1 && !(pool->regions = new (std::nothrow) gpt2__pool::region[(size_t)n_threads])) return false;
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
    delete[] pool->regions;
    pool->regions = nullptr;
}

/* Hands job(context, i) to every worker i (1 ..); the caller does its own share, then waits. */
static void gpt2__pool_begin(gpt2__pool* pool, gpt2__pool::job_fn job, void* context) {
    pool->job = job;
    pool->context = context;
    pool->pending.store(pool->n_threads - 1, std::memory_order_relaxed);
    pool->generation.fetch_add(1);
    gpt2__pool_wake(pool);
}

/* Returns when every worker has finished the job of gpt2__pool_begin. */
static void gpt2__pool_wait(gpt2__pool* pool) {
    if (gpt2__spin_until([&] { return pool->pending.load(std::memory_order_acquire) == 0; })) return;
    std::unique_lock<std::mutex> lock(pool->mutex);
    /* an exchange, not a store: as a read-modify-write it is ordered before the load of
       `pending` on every target, emulators included (qemu-user runs an AArch64 store-release
       and a later load-acquire as plain x86 moves, which the store buffer reorders: the last
       worker then misses the flag, and both sides sleep for ever) */
    pool->caller_sleeping.exchange(true);
    pool->done.wait(lock, [&] { return pool->pending.load() == 0; });
    pool->caller_sleeping.store(false);
}

/* Splits [0, n) into chunks that start at multiples of `align` and calls body(begin, end,
   thread_index) on each, the calling thread being thread 0. Each thread owns a contiguous region
   of about 8 chunks and runs them in order, so its share of a matrix is one stream through
   memory that the prefetchers (the hardware's, and the kernels' own, which run on past a chunk's
   end) follow from chunk to chunk; a thread out of chunks takes the last chunk left in another's
   region, so a thread the OS preempts (a busy machine, a game's own threads) delays only its
   current chunk instead of a whole 1/n share. Chunks handed out from one shared counter, a
   thread's next chunk n chunks on from its last, decoded slower (docs/PERFORMANCE.md, Kernel
   notes). The caller runs its chunks here, so a body is one call below the parallel region. */
template <class Body>
static void gpt2__parallel_for(gpt2__pool* pool, int64_t n, int64_t align, const Body& body) {
    struct Job {
        const Body* body;
        gpt2__pool* pool;
        int64_t n, chunk;
        /* the next chunk of thread `index`: the first left in its region, else the last left in another's */
        bool take(int index, int64_t* begin, int64_t* end) {
            const int threads = pool->n_threads;
            for (int i = 0; i < threads; i++) {
                const bool own = i == 0;
                std::atomic<uint64_t>& chunks = pool->regions[(index + i) % threads].chunks;
                uint64_t left = chunks.load(std::memory_order_relaxed);
                for (;;) {
                    const uint64_t first = left & 0xffffffffu, last = left >> 32;
                    if (first >= last) break;
                    const uint64_t c = own ? first : last - 1, rest = own ? (last << 32 | (first + 1)) : ((last - 1) << 32 | first);
                    if (chunks.compare_exchange_weak(left, rest, std::memory_order_relaxed)) {
                        *begin = (int64_t)c * chunk;
                        *end = std::min(n, *begin + chunk);
                        return true;
                    }
                }
            }
            return false;
        }
        static void run(void* context, int index) {
            Job* job = (Job*)context;
            for (int64_t begin, end; job->take(index, &begin, &end);) (*job->body)(begin, end, index);
        }
    };
    const int threads = pool->n_threads;
    const int64_t units = (n + align - 1) / align;
    const int64_t chunk = align * std::max<int64_t>(1, units / ((int64_t)threads * 8));
    if (threads == 1) {
        for (int64_t begin = 0; begin < n; begin += chunk) body(begin, std::min(n, begin + chunk), 0);
        return;
    }
    const int64_t n_chunks = (n + chunk - 1) / chunk; /* about 8 per thread, or n / align: far below 2^32 */
    for (int i = 0; i < threads; i++)
        pool->regions[i].chunks.store((uint64_t)(n_chunks * (i + 1) / threads) << 32 | (uint64_t)(n_chunks * i / threads), std::memory_order_relaxed);
    Job job{&body, pool, n, chunk};
    gpt2__pool_begin(pool, Job::run, &job); /* its generation's increment publishes the regions */
    for (int64_t begin, end; job.take(0, &begin, &end);) body(begin, end, 0);
    gpt2__pool_wait(pool);
}

/* ---- src/cpu/forward.h ---- */
/* The CPU forward pass: nanoGPT's model.py over plain arrays, with a KV cache.
   Shapes in comments: T new tokens, C = n_embd, F = n_ff, V = n_vocab. */

/* The activations of a pass (gpt2__pass) over R rows, the new tokens of all its sessions, of
   which the first D are decode rows (sessions adding at most gpt2__decode_max_tokens), and B
   sessions. A session's own is made with it, for a prompt of n_ctx tokens, so a session that
   could be made never runs out of memory alone; a batch grows its runner's on demand. */
struct gpt2__activations {
    size_t rows = 0, decode_rows = 0, sessions = 0; /* R, D and B it has room for */
    float* x = nullptr;        /* (R, C) residual stream */
    float* xn = nullptr;       /* (R, C) normalised input of a sub-block; after the pass, ln_f output */
    float* qkv = nullptr;      /* (R, 3C) */
    float* att = nullptr;      /* (R, C) attention output, then any (R, C) temporary */
    float* fc = nullptr;       /* (R, F) */
    float* parts = nullptr;    /* (D, gpt2__max_key_ranges, C + 2 * n_head) decode attention of key ranges */
    int8_t* xq = nullptr;      /* (D, max(C, F)) single tokens quantized for q8_0 and q4_0 weights */
    float* xq_scale = nullptr; /* (D, max(C, F) / gpt2__q8_block_values) */
    uint8_t* xq_packed = nullptr; /* (R, gpt2__q8_packed_row_bytes(max(C, F))) rows packed for int8 panels, where the kernels have them */
    float* x_tiles = nullptr;  /* (max(D, B), max(C, F)) decode rows packed for f16 tiles (pack_tile_rows), where the kernels have them */
    float* scores = nullptr;   /* (n_threads, gpt2__attention_scratch at the model's n_ctx) */
    float* logits = nullptr;   /* (B, V) */
};

struct gpt2__cpu_session;

/* One session's causal self-attention in a pass: T new queries at positions pos0.. against the
   cache of one layer, cut into tasks for the threads. A lone session runs its own tasks; a batch
   (gpt2__pass) runs every session's tasks in one parallel region. */
struct gpt2__attention_job {
    gpt2__cpu_session* s;
    const float* qkv;  /* (T, 3C) */
    float* att;        /* (T, C) */
    float* parts;      /* decode: (T, gpt2__max_key_ranges, C + 2 * n_head) attention of key ranges */
    int layer, T, pos0;
    int ranges[gpt2__decode_max_tokens]; /* decode: the key ranges of each query */
    int tasks;
};

/* The rows of a pass, in this order: n_one rows of sessions adding one token, n_few rows of
   sessions adding 2 to gpt2__decode_max_tokens, then the prompts' rows, n_rows in all. */
struct gpt2__pass_rows {
    int n_one = 0, n_few = 0, n_rows = 0;
    gpt2__vector<std::pair<int, int>> several; /* (first row, T) of each session adding more than one token, in row order */
    int share_rows = 0; /* gpt2__share_rows */
};

/* One session's new tokens in a pass: rows [row, row + T) at positions pos0.. */
struct gpt2__pass_item {
    gpt2__cpu_session* s;
    int row, T, pos0;
};

/* What a pass plans before it runs, kept by the session that runs it so that once these have
   grown a pass allocates nothing. */
struct gpt2__pass_plan {
    gpt2__pass_rows rows;
    gpt2__vector<gpt2__pass_item> items;       /* in row order */
    gpt2__vector<gpt2__attention_job> jobs;    /* an item's attention in the current layer */
    gpt2__vector<int> first_task;              /* jobs[i]'s tasks are [first_task[i], first_task[i + 1]) */
    gpt2__vector<gpt2__matmul_args> parts;     /* the current product's parts (gpt2__matmul) */
};

/* The executor of a pass: the pass is a sequence of steps (a parallel loop over rows, tasks or
   tokens, or a short serial piece) that runs either on the runner's threads, or, with a budget
   (gpt2__cpu_set_budget), a slice at a time on the calling thread, pausing once the budget is
   spent (gpt2__pass returns GPT2__PAUSED) and resuming where it stopped at the next call. A
   resumed pass runs its code from the top again: the steps already done are skipped (only their
   set-up, which writes nothing a step reads, runs again), and the step it paused in goes on at
   its next slice. Slices are whole shares of the loop (`align`), so every output is computed
   as one call computes it: the same bits whatever the budget and the thread count. */
struct gpt2__executor {
    bool budgeted = false; /* the next passes run on the calling thread until `deadline` */
    std::chrono::steady_clock::time_point deadline;
    bool in_flight = false; /* a pass paused: the next resumes it */
    int step = 0;           /* the steps met so far in this call of the pass */
    int done = 0;           /* the steps finished, in this call or earlier ones */
    int64_t done_items = 0; /* of step `done`: the items finished */
    bool paused = false;    /* this call's budget is spent: the rest of the pass is skipped */
};

/* A CPU session: the shared part, plus the KV cache, the activations of a pass and the threads. */
struct gpt2__cpu_session : gpt2_session {
    gpt2__pool pool;
    const gpt2__kernels* kernels = nullptr;
    gpt2__kv_cache kv;        /* in blocks (kv_cache.h), float or f16: a key's heads side by side */
    float* panel = nullptr;   /* (n_threads, gpt2__panel_floats(F)) weight panels of the matmul kernels */
    float* logits = nullptr;  /* (V) */
    float* probs = nullptr;   /* (V) sampling scratch */
    gpt2__activations act;    /* the passes run on this session's threads: its own, and batches it runs */
    gpt2__pass_plan plan;     /* and their plans */
    gpt2__executor exec;      /* and the steps of the one under way */
};

static gpt2__cpu_session* gpt2__cpu(gpt2_session* s) { return static_cast<gpt2__cpu_session*>(s); }

/* A step of the pass begins: false when it is to be skipped (done in an earlier call, or this
   call has paused). Every step calls it once, then gpt2__step_for or gpt2__step_end. */
static bool gpt2__step_begin(gpt2__executor* ex) { return !ex->paused && ex->step++ >= ex->done; }

/* The step has finished; with a budget, the pass pauses here when the budget is spent. */
static void gpt2__step_end(gpt2__executor* ex) {
    ex->done = ex->step;
    ex->done_items = 0;
    if (ex->budgeted && std::chrono::steady_clock::now() >= ex->deadline) ex->paused = true;
}

/* The step's loop over items [0, n) in chunks of `align` (gpt2__parallel_for's contract), from
   where an earlier call paused: on the threads, or with a budget a chunk at a time on this
   thread (as thread 0), pausing between two chunks once the budget is spent. */
template <class Body>
static void gpt2__step_for(gpt2__cpu_session* s, int64_t n, int64_t align, const Body& body) {
    gpt2__executor* ex = &s->exec;
    const int64_t first = ex->done_items;
    if (!ex->budgeted) {
        if (first == 0) gpt2__parallel_for(&s->pool, n, align, body);
        else gpt2__parallel_for(&s->pool, n - first, align, [&](int64_t begin, int64_t end, int thread) { body(first + begin, first + end, thread); });
    } else {
        for (int64_t begin = first; begin < n;) {
            const int64_t end = std::min(n, begin + align);
            body(begin, end, 0);
            begin = end;
            if (begin < n && std::chrono::steady_clock::now() >= ex->deadline) {
                ex->done_items = begin;
                ex->paused = true;
                return;
            }
        }
    }
    gpt2__step_end(ex);
}

/* Decode attention (gpt2__is_decode) takes all heads of a query at once (gpt2__attend_rows_scalar)
   and splits its keys into up to gpt2__max_key_ranges ranges of at least gpt2__min_key_range
   keys, so threads share one query's attention and each reads whole rows of the cache (each
   range costs a single thread a little, hence the minimum). A range is whole groups of
   gpt2__kv_row_group rows (the kernels' contract), the last perhaps cut short. Ranges depend on
   the number of keys only, so no result depends on the thread count. */
static const int gpt2__min_key_range = 64;
static_assert(gpt2__min_key_range % gpt2__kv_row_group == 0, "a key range is whole groups of rows");

static int gpt2__key_range(int n_keys) {
    const int share = (n_keys + gpt2__max_key_ranges - 1) / gpt2__max_key_ranges;
    return std::max(gpt2__min_key_range, (share + gpt2__kv_row_group - 1) / gpt2__kv_row_group * gpt2__kv_row_group);
}

/* Floats of per-thread attention scratch: what gpt2__attend_rows_scalar asks for at n_ctx keys,
   or a block of queries' scores (gpt2__query_scratch). */
static size_t gpt2__attention_scratch(int n_head, int n_ctx) { return std::max((size_t)n_head * n_ctx, gpt2__query_scratch(n_ctx)); }

/* Whether a session of m may pack rows for its products: one of its matrices has a type that
   `takes` and a kernel set this CPU runs `packs` (a session's set may be swapped for another
   after it is made: tests, gpt2-bench --kernels), so the packed rows' buffers (a session's, a
   batch's) are made only where they can be used. */
template <class Takes, class Packs>
static bool gpt2__cpu_may_pack(const gpt2_model* m, Takes takes, Packs packs) {
    bool has_type = takes(m->lm_head.type);
    for (const gpt2__layer& L : m->layers)
        for (const gpt2__weight* W : {&L.c_attn, &L.c_proj, &L.c_fc, &L.mlp_proj}) has_type = has_type || takes(W->type);
    if (!has_type) return false;
    const gpt2__kernels* sets[gpt2__max_kernel_sets];
    const int n = gpt2__supported_kernels(sets);
    for (int i = 0; i < n; i++)
        if (packs(*sets[i])) return true;
    return false;
}

static void gpt2__layer_norm_rows(gpt2__cpu_session* s, float* out, const float* x, const float* weight, const float* bias, int T) {
    const int C = s->model->n_embd;
    const float eps = s->model->layer_norm_eps;
    if (!gpt2__step_begin(&s->exec)) return;
    if (gpt2__is_decode(T)) { /* not worth waking the workers */
        for (int t = 0; t < T; t++) s->kernels->layer_norm(out + (size_t)t * C, x + (size_t)t * C, weight, bias, C, eps);
        gpt2__step_end(&s->exec);
        return;
    }
    gpt2__step_for(s, T, 1, [&](int64_t begin, int64_t end, int) {
        for (int64_t t = begin; t < end; t++) s->kernels->layer_norm(out + t * C, x + t * C, weight, bias, C, eps);
    });
}

/* Writes the job's keys and values to the cache (whose blocks gpt2__kv_prepare made the
   session's own). */
template <class KV>
static void gpt2__attention_store(const gpt2__attention_job& j) {
    gpt2__cpu_session* s = j.s;
    const int C = s->model->n_embd;
    for (int t = 0; t < j.T; t++) {
        const float* row = j.qkv + (size_t)t * 3 * C;
        KV* key = (KV*)gpt2__kv_row(&s->kv, j.layer, 0, j.pos0 + t);
        KV* value = (KV*)gpt2__kv_row(&s->kv, j.layer, 1, j.pos0 + t);
        if constexpr (sizeof(KV) == 4) {
            std::memcpy(key, row + C, (size_t)C * 4);
            std::memcpy(value, row + 2 * C, (size_t)C * 4);
        } else {
            s->kernels->to_f16(key, row + C, (size_t)C);
            s->kernels->to_f16(value, row + 2 * C, (size_t)C);
        }
    }
}

/* Counts the job's tasks (and, in decode, each query's key ranges); writes nothing a pass reads
   but the job itself, so a resumed pass may plan a layer again. */
static void gpt2__attention_plan(gpt2__attention_job* j) {
    if (!gpt2__is_decode(j->T)) {
        /* a task per (head, block of queries), as later queries have more keys; head by head, so
           consecutive tasks read the same head's keys and values, from L2 */
        j->tasks = (j->T + gpt2__query_block - 1) / gpt2__query_block * j->s->model->n_head;
        return;
    }
    j->tasks = 0;
    for (int t = 0; t < j->T; t++) {
        const int n_keys = j->pos0 + t + 1;
        j->tasks += j->ranges[t] = (n_keys + gpt2__key_range(n_keys) - 1) / gpt2__key_range(n_keys);
    }
}

template <class KV>
static void gpt2__attention_task(const gpt2__attention_job& j, int task, float* scores) {
    const gpt2__cpu_session* s = j.s;
    const int C = s->model->n_embd, H = s->model->n_head, D = C / H, T = j.T, pos0 = j.pos0;
    const gpt2__kv_rows<KV> keys = gpt2__kv_view<KV>(&s->kv, j.layer, 0), values = gpt2__kv_view<KV>(&s->kv, j.layer, 1);
    if (!gpt2__is_decode(T)) {
        const int blocks = (T + gpt2__query_block - 1) / gpt2__query_block;
        const int h = task / blocks, t = task % blocks * gpt2__query_block;
        gpt2__attend_fn<KV> attend;
        if constexpr (sizeof(KV) == 4) attend = s->kernels->attend_f32;
        else attend = s->kernels->attend_f16;
        attend(j.att + (size_t)t * C + (size_t)h * D, (size_t)C, j.qkv + (size_t)t * 3 * C + (size_t)h * D, 3 * (size_t)C, keys.at((size_t)h * D),
               values.at((size_t)h * D), pos0 + t + 1, std::min(gpt2__query_block, T - t), D, scores);
        return;
    }
    gpt2__attend_rows_fn<KV> attend_rows;
    if constexpr (sizeof(KV) == 4) attend_rows = s->kernels->attend_rows_f32;
    else attend_rows = s->kernels->attend_rows_f16;
    int t = 0, r = task;
    while (r >= j.ranges[t]) r -= j.ranges[t++];
    const int range = gpt2__key_range(pos0 + t + 1), first = r * range, n_keys = std::min(range, pos0 + t + 1 - first);
    float* dst = j.parts + ((size_t)t * gpt2__max_key_ranges + r) * ((size_t)C + 2 * H);
    attend_rows(dst, dst + C, j.qkv + (size_t)t * 3 * C, keys, values, first, n_keys, H, D, scores);
}

static void gpt2__attention_store(const gpt2__attention_job& j) {
    if (j.s->kv_f16) gpt2__attention_store<uint16_t>(j);
    else gpt2__attention_store<float>(j);
}

static void gpt2__attention_task(const gpt2__attention_job& j, int task, float* scores) {
    if (j.s->kv_f16) gpt2__attention_task<uint16_t>(j, task, scores);
    else gpt2__attention_task<float>(j, task, scores);
}

/* After the tasks: decode joins the key ranges of each query. */
static void gpt2__attention_merge(const gpt2__attention_job& j) {
    if (!gpt2__is_decode(j.T)) return;
    const int C = j.s->model->n_embd, H = j.s->model->n_head;
    const size_t part = (size_t)C + 2 * H;
    for (int t = 0; t < j.T; t++) gpt2__merge_attention(j.att + (size_t)t * C, j.parts + (size_t)t * gpt2__max_key_ranges * part, j.ranges[t], H, C / H);
}

/* ---- The pass: every session's new tokens through the model at once ------------------------- */

static void gpt2__activations_free(gpt2__activations* w) {
    void* buffers[] = {w->x, w->xn, w->qkv, w->att, w->fc, w->parts, w->xq, w->xq_scale, w->xq_packed, w->x_tiles, w->scores, w->logits};
    for (void* b : buffers) gpt2__free_aligned(b);
    *w = gpt2__activations();
}

/* Room in s->act for a pass over `rows` rows, `decode_rows` of them decode rows, of `sessions`
   sessions. Where it cannot grow, the activations stay as they were (a batch too large for memory
   leaves its runner able to run alone). */
static gpt2_result gpt2__activations_reserve(gpt2__cpu_session* s, size_t rows, size_t decode_rows, size_t sessions, gpt2_error* err) {
    const gpt2__activations& had = s->act;
    if (rows <= had.rows && decode_rows <= had.decode_rows && sessions <= had.sessions) return GPT2_OK;
    rows = std::max(rows, had.rows);
    decode_rows = std::max(decode_rows, had.decode_rows);
    sessions = std::max(sessions, had.sessions);
    gpt2__activations grown;
    gpt2__activations* w = &grown;
    const gpt2_model* m = s->model;
    const size_t C = (size_t)m->n_embd, widest = (size_t)std::max(m->n_embd, m->n_ff);
    const bool int8_panels = gpt2__cpu_may_pack(m, gpt2__int8_weights, [](const gpt2__kernels& k) { return k.quantize_q8_packed != nullptr; });
    const bool f16_tiles = gpt2__cpu_may_pack(m, [](uint32_t type) { return type == GPT2_TYPE_F16; }, [](const gpt2__kernels& k) { return k.pack_tile_rows != nullptr; });
    struct { void** p; size_t bytes; } plan[] = {
        {(void**)&w->x, rows * C * 4}, {(void**)&w->xn, rows * C * 4}, {(void**)&w->qkv, rows * 3 * C * 4}, {(void**)&w->att, rows * C * 4},
        {(void**)&w->fc, rows * (size_t)m->n_ff * 4}, {(void**)&w->parts, decode_rows * gpt2__max_key_ranges * (C + 2 * (size_t)m->n_head) * 4},
        {(void**)&w->xq, decode_rows * widest}, {(void**)&w->xq_scale, (decode_rows * widest / gpt2__q8_block_values + 1) * 4},
        {(void**)&w->xq_packed, int8_panels ? rows * gpt2__q8_packed_row_bytes((int64_t)widest) : 0},
        {(void**)&w->x_tiles, f16_tiles ? std::max(decode_rows, sessions) * widest * 4 : 0}, /* decode rows, or the head's rows */
        {(void**)&w->scores, (size_t)s->pool.n_threads * gpt2__attention_scratch(m->n_head, m->n_ctx) * 4},
        {(void**)&w->logits, sessions * (size_t)m->n_vocab * 4},
    };
    for (auto& b : plan) {
        if (!b.bytes) continue; /* a buffer no kernel set of this CPU uses */
        *b.p = gpt2__malloc_aligned(b.bytes);
        if (!*b.p) {
            gpt2__activations_free(w);
            return gpt2__fail(err, GPT2_ERROR_OUT_OF_MEMORY, "cannot allocate %zu bytes for a pass over %zu new tokens of %zu session(s)", b.bytes, rows, sessions);
        }
    }
    w->rows = rows;
    w->decode_rows = decode_rows;
    w->sessions = sessions;
    gpt2__activations_free(&s->act);
    s->act = grown;
    return GPT2_OK;
}

/* The threads' shares of W's rows in a pass of `sessions` sessions are multiples of this: a lone
   session's in whole panels, so that no share ends half-way through a panel (in tiles of one
   group, half the rows per activation broadcast); a batch's in two panels or more, so each share
   starts a panel's tiles and prefetches the next (docs/PERFORMANCE.md, Kernel notes). */
static int gpt2__share_rows(size_t sessions) { return sessions > 1 ? 2 * gpt2__panel_rows : gpt2__panel_rows; }

/* The one decision of how a product multiplies (gpt2__strategy, contract.h), from W's type, what
   the kernel set has, and the T rows: a lone session's tokens, or a batch's `decode_rows` (single
   tokens of several sessions, or 2 to gpt2__decode_max_tokens of one on float weights) streamed
   together while they are fewer than gpt2__panel_min_rows.
   - q8_0 and q4_0: int8 panels where the set has them, for every product of more than one row, a
     prompt's tokens quantized per block as a lone token is (as ggml's q8_0 x q8_0 and q4_0 x
     q8_0), and for any product of W's lanes; else a batch's single tokens stream against int8
     activations, and other rows multiply float panels of the dequantized rows.
   - f16 and bf16 with lanes: the lanes, any number of rows (a prompt in the set's wider prompt
     tiles, or a bf16 prompt on the bf16 unit).
   - otherwise: decode streams, prefill multiplies float panels; sets without them stream. */
static gpt2__strategy gpt2__strategy_for(const gpt2__kernels* kernels, const gpt2__weight& W, int T, bool decode_rows) {
    const bool streams = decode_rows ? T < gpt2__panel_min_rows : gpt2__is_decode(T);
    if (gpt2__int8_weights(W.type)) {
        if (kernels->quantize_q8_packed && (gpt2__uses_lanes(kernels, W) || !decode_rows || !streams)) return GPT2__INT8_PANELS;
        if (decode_rows) return GPT2__STREAM_INT8;
    } else if (gpt2__uses_lanes(kernels, W)) {
        const bool prompt = !decode_rows && !gpt2__is_decode(T);
        if (prompt && W.type == GPT2_TYPE_BF16 && kernels->matmul[GPT2__BF16_UNIT]) return GPT2__BF16_UNIT;
        return prompt && kernels->matmul[GPT2__FLOAT16_PROMPT] ? GPT2__FLOAT16_PROMPT : GPT2__FLOAT16_LANES;
    } else if (streams) {
        return GPT2__STREAM_ROWS;
    }
    return kernels->matmul[GPT2__FLOAT_TILES] ? GPT2__FLOAT_TILES : GPT2__STREAM_ROWS;
}

/* y (R, W.rows) = x (R, W.cols) W^T + bias over the rows of a pass, split over the rows of W;
   with `accumulate`, y += instead (the residual connection); with `gelu`, GELU on the result
   (the MLP's c_fc). The decode rows go together (on q8_0 and q4_0 weights only single tokens),
   each weight row read from memory once for all of them; every other session multiplies its own
   rows (a float tile's sums depend on where its tokens start). Each part's strategy from
   gpt2__strategy_for; its activations quantized or packed here as the strategy takes them. One
   parallel region for all of it. */
static void gpt2__matmul(gpt2__cpu_session* s, float* y, const float* x, const gpt2__weight& W, const float* bias, const gpt2__pass_rows& r,
                         bool accumulate = false, bool gelu = false) {
    if (!gpt2__step_begin(&s->exec)) return;
    const gpt2__kernels* kernels = s->kernels;
    gpt2__activations* w = &s->act;
    const int n_streamed = gpt2__int8_weights(W.type) ? r.n_one : r.n_one + r.n_few;
    gpt2__vector<gpt2__matmul_args>& parts = s->plan.parts;
    parts.clear();
    /* int8 panels' activations are packed in one call for all the parts that take them, which
       are the last rows of the pass */
    const size_t ldx = gpt2__q8_packed_row_bytes(W.cols);
    int first_packed = r.n_rows;
    if (n_streamed) {
        gpt2__matmul_args a{y, x, nullptr, nullptr, &W, bias, n_streamed, accumulate, gpt2__strategy_for(kernels, W, n_streamed, true)};
        if (a.strategy == GPT2__INT8_PANELS) {
            first_packed = 0;
            a.xq_packed = w->xq_packed;
        } else if (a.strategy == GPT2__STREAM_INT8) {
            kernels->quantize_q8(w->xq, w->xq_scale, x, (int64_t)n_streamed * W.cols);
            a.xq = w->xq;
            a.xq_scale = w->xq_scale;
        } else if (kernels->pack_tile_rows && kernels->pack_tile_rows(w->x_tiles, a)) { /* where the set's kernel for a reads them packed */
            a.x_tiles = w->x_tiles;
        }
        parts.push_back(a);
    }
    for (const auto& [row, T] : r.several)
        if (row >= n_streamed) {
            gpt2__matmul_args a{y + (size_t)row * W.rows, x + (size_t)row * W.cols, nullptr, nullptr, &W, bias, T, accumulate, gpt2__strategy_for(kernels, W, T, false)};
            if (a.strategy == GPT2__INT8_PANELS) {
                first_packed = std::min(first_packed, row);
                a.xq_packed = w->xq_packed + row * ldx;
            }
            parts.push_back(a);
        }
    if (first_packed < r.n_rows) kernels->quantize_q8_packed(w->xq_packed + first_packed * ldx, x + (size_t)first_packed * W.cols, r.n_rows - first_packed, W.cols);
    const size_t panel = gpt2__panel_floats(std::max(s->model->n_embd, s->model->n_ff));
    const bool gelu_tanh = s->model->gelu_tanh;
    gpt2__step_for(s, W.rows, r.share_rows, [&](int64_t begin, int64_t end, int thread) {
        for (const gpt2__matmul_args& a : parts) kernels->matmul[a.strategy](a, begin, end, s->panel + (size_t)thread * panel);
        if (gelu)
            for (int t = 0; t < r.n_rows; t++) kernels->gelu(y + (size_t)t * W.rows + begin, (size_t)(end - begin), gelu_tanh);
    });
}

/* logits (n, V) = lm_head (V, C) h (n, C), each row as a lone token's; padding rows past n_vocab
   are never computed. */
static void gpt2__head(gpt2__cpu_session* s, float* logits, const float* h, int n) {
    gpt2__weight head = s->model->lm_head;
    head.rows = s->model->n_vocab;
    gpt2__pass_rows last;
    last.n_one = last.n_rows = n;
    last.share_rows = gpt2__share_rows((size_t)n);
    gpt2__matmul(s, logits, h, head, nullptr, last);
}

/* The model's layer sequence, nanoGPT's GPT.forward, over the new tokens of `sessions`
   (tokens[n_cached..) of each, at positions n_cached..; its cache holds the positions before),
   on the threads and in the activations of `runner`, whose abort_fn it polls between layers.
   The products run over the new rows of all sessions together (gpt2__matmul); attention runs
   per session against its own cache, every session's tasks in one parallel region. Leaves the
   final LayerNorm of every new row in runner->act.xn and each session's prediction after its
   last token in its logits. The backend's run is a pass of one session; this is its run_batch. */
static gpt2_result gpt2__pass(gpt2_session* runner_session, gpt2_session* const* sessions, size_t n, gpt2_error* err) {
    gpt2__cpu_session* runner = gpt2__cpu(runner_session);
    const gpt2_model* m = runner->model;
    const int C = m->n_embd, V = m->n_vocab;
    gpt2__pass_plan& plan = runner->plan;
    gpt2__vector<gpt2__pass_item>& items = plan.items;
    items.clear();
    gpt2__pass_rows& r = plan.rows;
    r.n_one = r.n_few = r.n_rows = 0;
    r.several.clear();
    int& rows = r.n_rows;
    for (int kind = 0; kind < 3; kind++) /* the order of gpt2__matmul: one token, a few, prompts */
        for (size_t i = 0; i < n; i++) {
            gpt2__cpu_session* s = gpt2__cpu(sessions[i]);
            const int T = (int)s->tokens.size() - s->n_cached;
            if ((T == 1 ? 0 : gpt2__is_decode(T) ? 1 : 2) != kind) continue;
            items.push_back({s, rows, T, s->n_cached});
            rows += T;
            if (kind == 0) r.n_one += T;
            else if (kind == 1) r.n_few += T;
            if (T > 1) r.several.push_back({rows - T, T});
        }
    r.share_rows = gpt2__share_rows(n);
    gpt2__executor* ex = &runner->exec;
    /* a lone session's logits go straight to it unless the pass may pause (a paused pass leaves
       every session's logits as they were) */
    const bool direct = n == 1 && !ex->budgeted && !ex->in_flight;
    if (!ex->in_flight) ex->done = 0, ex->done_items = 0;
    ex->step = 0;
    ex->paused = false;
    ex->in_flight = false; /* until it pauses again */
    GPT2__TRY(gpt2__activations_reserve(runner, (size_t)rows, (size_t)(r.n_one + r.n_few), n, err));
    for (const gpt2__pass_item& it : items) GPT2__TRY(gpt2__kv_prepare(&it.s->kv, it.pos0, it.pos0 + it.T, err));
    gpt2__activations* w = &runner->act;
    if (gpt2__step_begin(ex)) {
        for (const gpt2__pass_item& it : items) /* x = wte[id] + wpe[pos] */
            for (int t = 0; t < it.T; t++) {
                float* x = w->x + (size_t)(it.row + t) * C;
                gpt2__dequantize_row(m->wte.type, m->wte.data + (size_t)it.s->tokens[(size_t)(it.pos0 + t)] * m->wte.row_bytes, x, C);
                gpt2__dequantize_row(m->wpe.type, m->wpe.data + (size_t)(it.pos0 + t) * m->wpe.row_bytes, w->att, C);
                gpt2__add(x, w->att, (size_t)C);
            }
        gpt2__step_end(ex);
    }
    gpt2__vector<gpt2__attention_job>& jobs = plan.jobs;
    gpt2__vector<int>& first_task = plan.first_task;
    jobs.resize(items.size());
    first_task.assign(items.size() + 1, 0);
    const size_t part = gpt2__max_key_ranges * ((size_t)C + 2 * m->n_head), scratch = gpt2__attention_scratch(m->n_head, m->n_ctx);
    for (int l = 0; l < m->n_layer; l++) {
        if (gpt2__abort_requested(runner)) return gpt2__aborted(err);
        const gpt2__layer& L = m->layers[(size_t)l];
        /* x = x + attn(ln_1(x)) */
        gpt2__layer_norm_rows(runner, w->xn, w->x, L.ln_1_weight, L.ln_1_bias, rows);
        gpt2__matmul(runner, w->qkv, w->xn, L.c_attn, L.c_attn_bias, r);
        for (size_t i = 0; i < items.size(); i++) {
            const gpt2__pass_item& it = items[i];
            float* parts = gpt2__is_decode(it.T) ? w->parts + (size_t)it.row * part : nullptr; /* decode rows come first */
            jobs[i] = {it.s, w->qkv + (size_t)it.row * 3 * C, w->att + (size_t)it.row * C, parts, l, it.T, it.pos0, {}, 0};
            gpt2__attention_plan(&jobs[i]);
            first_task[i + 1] = first_task[i] + jobs[i].tasks;
        }
        if (gpt2__step_begin(ex)) {
            for (const gpt2__attention_job& j : jobs) gpt2__attention_store(j);
            gpt2__step_end(ex);
        }
        if (gpt2__step_begin(ex))
            gpt2__step_for(runner, first_task.back(), 1, [&](int64_t begin, int64_t end, int thread) {
                size_t i = (size_t)(std::upper_bound(first_task.begin(), first_task.end(), (int)begin) - first_task.begin()) - 1;
                for (int64_t task = begin; task < end; task++) {
                    while (task >= first_task[i + 1]) i++;
                    gpt2__attention_task(jobs[i], (int)task - first_task[i], w->scores + (size_t)thread * scratch);
                }
            });
        if (gpt2__step_begin(ex)) {
            for (const gpt2__attention_job& j : jobs) gpt2__attention_merge(j);
            gpt2__step_end(ex);
        }
        gpt2__matmul(runner, w->x, w->att, L.c_proj, L.c_proj_bias, r, true);
        /* x = x + mlp(ln_2(x)) */
        gpt2__layer_norm_rows(runner, w->xn, w->x, L.ln_2_weight, L.ln_2_bias, rows);
        gpt2__matmul(runner, w->fc, w->xn, L.c_fc, L.c_fc_bias, r, false, true);
        gpt2__matmul(runner, w->x, w->fc, L.mlp_proj, L.mlp_proj_bias, r, true);
    }
    gpt2__layer_norm_rows(runner, w->xn, w->x, m->ln_f_weight, m->ln_f_bias, rows);
    /* the head over each session's last row, gathered into att */
    if (gpt2__step_begin(ex)) {
        for (size_t i = 0; i < items.size(); i++) std::memcpy(w->att + i * C, w->xn + (size_t)(items[i].row + items[i].T - 1) * C, (size_t)C * 4);
        gpt2__step_end(ex);
    }
    gpt2__head(runner, direct ? items[0].s->logits : w->logits, w->att, (int)items.size());
    if (!direct && gpt2__step_begin(ex)) {
        for (size_t i = 0; i < items.size(); i++) std::memcpy(items[i].s->logits, w->logits + i * V, (size_t)V * 4);
        gpt2__step_end(ex);
    }
    if (ex->paused) {
        ex->in_flight = true;
        return GPT2__PAUSED;
    }
    return GPT2_OK;
}

/* The backend's run; its run_batch is gpt2__pass. */
static gpt2_result gpt2__forward(gpt2_session* session, gpt2_error* err) { return gpt2__pass(session, &session, 1, err); }

/* ---- src/cpu/forward_reference.h ---- */
/* The reference forward pass: nanoGPT's model.py as plain loops over f32 arrays. One thread,
   no SIMD, no KV cache, no session: every call computes all T positions from scratch. The
   tests check every kernel set, the prefill and decode paths and the GPU against it, so it
   is written to be read, not to be fast. Compiled only under GPT2_REFERENCE_FORWARD.
   Shapes in comments: T tokens, C = n_embd, H heads of D = C / H, F = n_ff, V = n_vocab. */
#if defined(GPT2_REFERENCE_FORWARD)

/* y (T, n_out) = x (T, W.cols) W[0..n_out)^T + bias, W turned into f32 one row at a time. */
static void gpt2__reference_linear(float* y, const float* x, const gpt2__weight& W, const float* bias, int T, int64_t n_out) {
    const int64_t n_in = W.cols;
    gpt2__vector<float> w((size_t)n_in);
    for (int64_t o = 0; o < n_out; o++) {
        gpt2__dequantize_row(W.type, W.data + o * W.row_bytes, w.data(), n_in);
        for (int t = 0; t < T; t++) {
            float sum = bias ? bias[o] : 0.0f;
            for (int64_t i = 0; i < n_in; i++) sum += x[t * n_in + i] * w[i];
            y[t * n_out + o] = sum;
        }
    }
}

/* out (T, C) = (x - mean) / sqrt(var + eps) * weight + bias, row by row, biased variance. */
static void gpt2__reference_layer_norm(const gpt2_model* m, float* out, const float* x, const float* weight, const float* bias, int T) {
    const int C = m->n_embd;
    for (int t = 0; t < T; t++) {
        const float* xt = x + t * C;
        float mean = 0.0f, var = 0.0f;
        for (int i = 0; i < C; i++) mean += xt[i];
        mean /= C;
        for (int i = 0; i < C; i++) var += (xt[i] - mean) * (xt[i] - mean);
        var /= C;
        const float inv_std = 1.0f / std::sqrt(var + m->layer_norm_eps);
        for (int i = 0; i < C; i++) out[t * C + i] = (xt[i] - mean) * inv_std * weight[i] + (bias ? bias[i] : 0.0f);
    }
}

/* CausalSelfAttention: x (T, C) -> y (T, C). */
static void gpt2__reference_attn(const gpt2_model* m, const gpt2__layer& L, float* y, const float* x, int T) {
    const int C = m->n_embd, H = m->n_head, D = C / H;
    gpt2__vector<float> qkv((size_t)T * 3 * C), att((size_t)T * C), p((size_t)T);
    gpt2__reference_linear(qkv.data(), x, L.c_attn, L.c_attn_bias, T, 3 * C); /* (T, 3C): q, k, v side by side */
    for (int h = 0; h < H; h++) {
        for (int t = 0; t < T; t++) {
            const float* q = &qkv[t * 3 * C + h * D];
            /* p (t + 1) = softmax(q k^T / sqrt(D)) over keys 0..t: the causal mask */
            float max_score = -INFINITY, sum = 0.0f;
            for (int j = 0; j <= t; j++) {
                const float* k = &qkv[j * 3 * C + C + h * D];
                float score = 0.0f;
                for (int d = 0; d < D; d++) score += q[d] * k[d];
                p[j] = score / std::sqrt((float)D);
                max_score = std::max(max_score, p[j]);
            }
            for (int j = 0; j <= t; j++) sum += p[j] = std::exp(p[j] - max_score);
            for (int j = 0; j <= t; j++) p[j] /= sum;
            /* att (D) of query t, head h = p v */
            float* out = &att[t * C + h * D];
            for (int d = 0; d < D; d++) out[d] = 0.0f;
            for (int j = 0; j <= t; j++) {
                const float* v = &qkv[j * 3 * C + 2 * C + h * D];
                for (int d = 0; d < D; d++) out[d] += p[j] * v[d];
            }
        }
    }
    gpt2__reference_linear(y, att.data(), L.c_proj, L.c_proj_bias, T, C);
}

/* MLP: x (T, C) -> y (T, C) = c_proj(gelu(c_fc(x))), GELU in the model's form. */
static void gpt2__reference_mlp(const gpt2_model* m, const gpt2__layer& L, float* y, const float* x, int T) {
    gpt2__vector<float> h((size_t)T * m->n_ff); /* (T, F) */
    gpt2__reference_linear(h.data(), x, L.c_fc, L.c_fc_bias, T, m->n_ff);
    for (float& v : h) {
        if (m->gelu_tanh) v = 0.5f * v * (1.0f + std::tanh(0.7978845608028654f * (v + 0.044715f * v * v * v))); /* sqrt(2 / pi) */
        else v = 0.5f * v * (1.0f + std::erf(v * 0.7071067811865476f));                                       /* 1 / sqrt(2) */
    }
    gpt2__reference_linear(y, h.data(), L.mlp_proj, L.mlp_proj_bias, T, m->n_embd);
}

/* logits (T, V) of ids[0..T) at positions 0..T-1, T <= n_ctx. */
[[maybe_unused]] static void gpt2__forward_reference(const gpt2_model* m, const int32_t* ids, int T, float* logits) {
    GPT2_ASSERT(T >= 1 && T <= m->n_ctx);
    const int C = m->n_embd;
    gpt2__vector<float> x((size_t)T * C), xn((size_t)T * C), y((size_t)T * C), position((size_t)C);
    for (int t = 0; t < T; t++) { /* x (T, C) = wte[ids] + wpe[0..T) */
        gpt2__dequantize_row(m->wte.type, m->wte.data + ids[t] * m->wte.row_bytes, &x[t * C], C);
        gpt2__dequantize_row(m->wpe.type, m->wpe.data + t * m->wpe.row_bytes, position.data(), C);
        for (int i = 0; i < C; i++) x[t * C + i] += position[i];
    }
    for (const gpt2__layer& L : m->layers) {
        gpt2__reference_layer_norm(m, xn.data(), x.data(), L.ln_1_weight, L.ln_1_bias, T); /* x = x + attn(ln_1(x)) */
        gpt2__reference_attn(m, L, y.data(), xn.data(), T);
        for (size_t i = 0; i < x.size(); i++) x[i] += y[i];
        gpt2__reference_layer_norm(m, xn.data(), x.data(), L.ln_2_weight, L.ln_2_bias, T); /* x = x + mlp(ln_2(x)) */
        gpt2__reference_mlp(m, L, y.data(), xn.data(), T);
        for (size_t i = 0; i < x.size(); i++) x[i] += y[i];
    }
    gpt2__reference_layer_norm(m, xn.data(), x.data(), m->ln_f_weight, m->ln_f_bias, T);
    /* lm_head is wte when the head is tied; rows past n_vocab are padding, never computed */
    gpt2__reference_linear(logits, xn.data(), m->lm_head, nullptr, T, m->n_vocab);
}

#endif /* GPT2_REFERENCE_FORWARD */

/* ---- src/cpu/backend_cpu.h ---- */
/* The CPU backend: sessions of gpt2__cpu_session, run by gpt2__pass on this CPU's kernels. */

static void gpt2__cpu_session_free(gpt2_session* session) {
    gpt2__cpu_session* s = gpt2__cpu(session);
    gpt2__pool_stop(&s->pool);
    gpt2__kv_free(&s->kv);
    void* buffers[] = {s->panel, s->logits, s->probs};
    for (void* b : buffers) gpt2__free_aligned(b);
    gpt2__activations_free(&s->act);
    gpt2__session_delete(s);
}

/* A new session's buffers; its KV cache takes blocks as it fills (kv_cache.h). */
static gpt2_result gpt2__cpu_session_alloc(gpt2__cpu_session* s, gpt2_error* err) {
    const gpt2_model* m = s->model;
    s->kv.model = m;
    s->kv.row_bytes = (size_t)m->n_embd * (s->kv_f16 ? 2 : 4);
    s->kv.f16 = s->kv_f16;
    struct { void** p; size_t bytes; } plan[] = {
        {(void**)&s->panel, (size_t)s->pool.n_threads * gpt2__panel_floats(std::max(m->n_embd, m->n_ff)) * 4},
        {(void**)&s->logits, (size_t)m->n_vocab * 4}, {(void**)&s->probs, (size_t)m->n_vocab * 4},
    };
    for (auto& b : plan) {
        *b.p = gpt2__malloc_aligned(b.bytes);
        if (!*b.p) return gpt2__fail(err, GPT2_ERROR_OUT_OF_MEMORY, "cannot allocate %zu bytes for the session (n_ctx %d)", b.bytes, s->n_ctx);
    }
    /* a prompt that fills the context runs in the session's own activations */
    return gpt2__activations_reserve(s, (size_t)s->n_ctx, (size_t)gpt2__decode_max_tokens, 1, err);
}

static gpt2_result gpt2__cpu_session_create(const gpt2_model* m, const gpt2_session_params& p, gpt2_session** out, gpt2_error* err) {
    gpt2__cpu_session* s = gpt2__session_new<gpt2__cpu_session>(m, p);
    if (!s) return gpt2__fail(err, GPT2_ERROR_OUT_OF_MEMORY, "out of memory");
    s->kernels = &gpt2__cpu_kernels();
    gpt2__pool_start(&s->pool, p.n_threads ? p.n_threads : (int)std::max(1u, std::thread::hardware_concurrency()));
    const gpt2_result res = gpt2__cpu_session_alloc(s, err);
    if (res != GPT2_OK) {
        gpt2__cpu_session_free(s);
        return res;
    }
    *out = s;
    return GPT2_OK;
}

static const float* gpt2__cpu_logits(gpt2_session* s) { return gpt2__cpu(s)->logits; }

static gpt2_result gpt2__cpu_sample(gpt2_session* session, float temperature, int top_k, int32_t* token, gpt2_error*) {
    gpt2__cpu_session* s = gpt2__cpu(session);
    *token = gpt2__sample(s->logits, s->model->n_vocab, temperature, top_k, &s->rng_state, s->probs);
    return GPT2_OK;
}

/* The sessions' draws shared among the runner's threads: each reads only its own session's
   logits, RNG and scratch. */
static gpt2_result gpt2__cpu_sample_batch(gpt2_session* runner, gpt2_session* const* sessions, size_t n, const float* temperature, const int* top_k, int32_t* tokens,
                                          gpt2_error*) {
    gpt2__parallel_for(&gpt2__cpu(runner)->pool, (int64_t)n, 1, [&](int64_t begin, int64_t end, int) {
        for (int64_t i = begin; i < end; i++) gpt2__cpu_sample(sessions[i], temperature[i], top_k[i], &tokens[i], nullptr); /* cannot fail */
    });
    return GPT2_OK;
}

/* Every position of the window from the one pass: act.xn holds their final hidden states. */
static gpt2_result gpt2__cpu_window_logprob(gpt2_session* session, const int32_t* tokens, size_t n, double* sum, gpt2_error*) {
    gpt2__cpu_session* s = gpt2__cpu(session);
    const int V = s->model->n_vocab, C = s->model->n_embd;
    *sum = 0.0;
    for (size_t t = 1; t < n; t++) {
        gpt2__head(s, s->probs, s->act.xn + (t - 1) * C, 1);
        *sum += gpt2__log_prob(s->probs, V, tokens[t]);
    }
    return GPT2_OK;
}

static gpt2_result gpt2__cpu_save_cache(gpt2_session* s, int n, void* rows, gpt2_error*) {
    gpt2__kv_copy_rows(&gpt2__cpu(s)->kv, n, (uint8_t*)rows, false);
    return GPT2_OK;
}

static gpt2_result gpt2__cpu_load_cache(gpt2_session* session, int n, const void* rows, const float* logits, gpt2_error* err) {
    gpt2__cpu_session* s = gpt2__cpu(session);
    if (n > 0) { /* 0: the logits alone, the cache as it is (gpt2__checkpoint_restore) */
        GPT2__TRY(gpt2__kv_prepare(&s->kv, 0, n, err));
        gpt2__kv_copy_rows(&s->kv, n, (uint8_t*)const_cast<void*>(rows), true);
    }
    if (logits) std::memcpy(s->logits, logits, (size_t)s->model->n_vocab * 4);
    return GPT2_OK;
}

/* dst's cache becomes src's rows [0, n), sharing src's full blocks (kv_cache.h). */
static gpt2_result gpt2__cpu_share_cache(gpt2_session* dst, gpt2_session* src, int n, gpt2_error* err) {
    GPT2__TRY(gpt2__kv_share(&gpt2__cpu(dst)->kv, &gpt2__cpu(src)->kv, n, err));
    std::memcpy(gpt2__cpu(dst)->logits, gpt2__cpu(src)->logits, (size_t)dst->model->n_vocab * 4);
    return GPT2_OK;
}

/* The CPU reads the file's weights in place, except where its kernels have lanes (contract.h):
   there every q8_0, q4_0, f16 and bf16 matrix is packed into them once, in one buffer (model->device_weights), and
   the matrices' pages of a mapped file are handed back to the OS (read again only if a session
   runs another kernel set), so the process keeps one copy of those weights, not two. */
static gpt2_result gpt2__cpu_pack_lanes(gpt2_model* m, gpt2_error* err) {
    const gpt2__kernels& kernels = gpt2__cpu_kernels();
#if defined(GPT2_AMX) && defined(GPT2__X86)
    const char* refused = nullptr;
    if (gpt2__detect_x86().amx && !gpt2__amx_granted(&refused))
        gpt2__log(m->params, GPT2_LOG_WARNING, "AMX: the CPU has it but %s; products multiply on the %s kernels", refused, kernels.name);
#endif
    if (!kernels.pack_lanes) return GPT2_OK;
    gpt2__vector<gpt2__weight*> packed;
    for (gpt2__layer& L : m->layers)
        for (gpt2__weight* W : {&L.c_attn, &L.c_proj, &L.c_fc, &L.mlp_proj})
            if (gpt2__lanes_type(W->type)) packed.push_back(W);
    if (gpt2__lanes_type(m->lm_head.type)) packed.push_back(&m->lm_head);
    size_t total = 0;
    for (const gpt2__weight* W : packed) total += gpt2__lanes_bytes(*W);
    if (total == 0) return GPT2_OK;
    uint8_t* lanes = (uint8_t*)gpt2__malloc_aligned(total);
    if (!lanes) return gpt2__fail(err, GPT2_ERROR_OUT_OF_MEMORY, "cannot allocate %zu bytes for the matrices packed for this CPU", total);
    gpt2__advise_huge_pages(lanes, total);
    m->device_weights = lanes;
    for (gpt2__weight* W : packed) {
        kernels.pack_lanes(lanes, *W);
        W->lanes = lanes;
        lanes += gpt2__lanes_bytes(*W);
        gpt2__file_release_pages(m->file, W->data, (size_t)W->rows * W->row_bytes);
    }
    return GPT2_OK;
}

/* Loading done: the model's pool of KV cache blocks (kv_cache.h), and its lanes. */
static gpt2_result gpt2__cpu_model_attach(gpt2_model* m, gpt2_error* err) {
    m->kv_pool = gpt2__kv_pool_new(m);
    if (!m->kv_pool) return gpt2__fail(err, GPT2_ERROR_OUT_OF_MEMORY, "out of memory");
    const gpt2_result res = gpt2__cpu_pack_lanes(m, err);
    if (res != GPT2_OK) gpt2__kv_pool_free(m->kv_pool); /* the model is destroyed without model_release */
    return res;
}
static void gpt2__cpu_model_release(gpt2_model* m) {
    gpt2__free_aligned(m->device_weights);
    gpt2__kv_pool_free(m->kv_pool);
}

static void gpt2__cpu_set_budget(gpt2_session* runner, int64_t budget_us) {
    gpt2__executor* ex = &gpt2__cpu(runner)->exec;
    ex->budgeted = budget_us > 0;
    ex->deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(budget_us);
}

static const gpt2__backend* gpt2__cpu_backend() {
    static const gpt2__backend table = {"cpu", gpt2__cpu_model_attach, gpt2__cpu_model_release, gpt2__cpu_session_create, gpt2__cpu_session_free,
                                        gpt2__forward, gpt2__cpu_logits, gpt2__cpu_sample, gpt2__cpu_window_logprob, gpt2__cpu_save_cache,
                                        gpt2__cpu_load_cache, gpt2__pass, gpt2__cpu_sample_batch, gpt2__cpu_set_budget,
                                        nullptr, /* sample_chain: the chain runs on the logits where they are */
                                        gpt2__cpu_share_cache};
    return &table;
}

/* ---- src/generate.h ---- */
/* The generation engine: gpt2_generate, gpt2_generate_batch and the stage after their checks.
   One step (gpt2__lines_step) takes every unfinished line a token further: each picks its next
   token from its logits (the sampling chain of sampler.h on the host, with the grammar's mask
   when it has one, or the backend's own draw), delivers its text (stop strings held back until they are sure, UTF-8 characters
   whole), and every picked token joins its context in one pass (gpt2__batch_append). Where the
   grammar then allows only one text, that text's tokens join in the same pass, as a prompt's do,
   and so does the prompt of a line that has just joined. A lone generation is a batch of one. */

/* Where the first stop string in `text` starts (the earliest, when several are there), or npos. */
static size_t gpt2__find_stop(std::string_view text, const gpt2_generate_params& p) {
    size_t first = std::string_view::npos;
    for (size_t i = 0; i < p.n_stop; i++) first = std::min(first, text.find(p.stop[i]));
    return first;
}

/* Length of the longest end of `text` that is the beginning of a stop string: the text a later
   token may still complete into one. */
static size_t gpt2__stop_tail(std::string_view text, const gpt2_generate_params& p) {
    size_t longest = 0;
    for (size_t i = 0; i < p.n_stop; i++) {
        const std::string_view stop = p.stop[i];
        for (size_t len = std::min(text.size(), stop.size() - 1); len > longest; len--)
            if (text.substr(text.size() - len) == stop.substr(0, len)) {
                longest = len;
                break;
            }
    }
    return longest;
}

/* Hands on_token the text that `token` releases (gpt2_token_fn says which). `held` is the text
   not delivered yet, waiting on the stop strings. True when generation ends here, and *why says
   why: the token completes a stop string (*at_stop, and what follows it is dropped), on_token
   asks to, or it is the end-of-text token with stop_at_eos or a grammar, whose sentence ends
   there (its text is not delivered). */
static bool gpt2__deliver(gpt2_session* s, const gpt2_generate_params& p, int32_t token, gpt2__string* held, bool* at_stop, gpt2_end* why) {
    const gpt2__tokenizer& tok = s->model->tokenizer;
    const bool at_eos = (p.stop_at_eos || p.grammar) && token == tok.eos; /* a grammar's sentence ends there */
    const gpt2_end eos_end = p.grammar ? GPT2_END_GRAMMAR : GPT2_END_EOS;
    if (tok.kind == GPT2_TOKENIZER_NONE || (!p.on_token && p.n_stop == 0)) {
        const bool caller_stops = p.on_token && p.on_token(p.user, token, nullptr, 0) != 0;
        *why = caller_stops ? GPT2_END_CALLBACK : eos_end;
        return caller_stops || at_eos;
    }
    size_t release = 0;
    if (!at_eos) {
        gpt2__utf8_stream_push(&s->stream, gpt2__tokenizer_token_bytes(&tok, token), held);
        release = gpt2__find_stop(*held, p);
        *at_stop = release != std::string_view::npos;
        if (!*at_stop) release = held->size() - gpt2__stop_tail(*held, p);
    }
    s->text.assign(held->data(), release);
    held->erase(0, release);
    if (*at_stop) {
        held->clear();
        s->stream = gpt2__utf8_stream();
    }
    const bool caller_stops = p.on_token && p.on_token(p.user, token, s->text.c_str(), s->text.size()) != 0;
    *why = *at_stop ? GPT2_END_STOP : caller_stops ? GPT2_END_CALLBACK : eos_end;
    return caller_stops || at_eos || *at_stop;
}

/* The chain's draw: the backend's own (sample_chain) where it serves the parameters, else the
   host's: the backend's logits, copied, filtered and drawn with the session's RNG. */
struct gpt2__chain_buffers {
    gpt2__vector<float> logits, scratch;
    gpt2__vector<int> counts;
    gpt2__vector<uint32_t> allowed; /* with a grammar: its mask, a bit per token */
};

static gpt2_result gpt2__sample_chain(gpt2_session* s, const gpt2_generate_params& p, gpt2__chain_buffers* b, int32_t* token, gpt2_error* err) {
    const int V = s->model->n_vocab;
    const uint32_t* allowed = p.grammar ? b->allowed.data() : nullptr;
    /* a chain of the grammar's mask, top_k, top_p and temperature alone may run where the logits are */
    if (s->backend->sample_chain && !gpt2__penalties_on(p) && p.n_logit_bias == 0 && !p.on_logits && p.min_p <= 0.0f) {
        const gpt2_result r = s->backend->sample_chain(s, p.temperature, p.top_k, p.top_p, allowed, token, err);
        if (r != GPT2__NOT_HANDLED) return r;
    }
    const float* logits = s->backend->logits(s);
    if (!logits) return gpt2__fail(err, GPT2_ERROR_DEVICE, "the %s backend could not return the logits", s->backend->name);
    std::memcpy(b->logits.data(), logits, (size_t)V * sizeof(float));
    GPT2__TRY(gpt2__chain_filter(b->logits.data(), V, p, s->tokens.data(), s->tokens.size(), allowed, b->scratch.data(), b->counts.data(), err));
    *token = gpt2__chain_draw(b->logits.data(), V, p, &s->rng_state, b->scratch.data());
    return GPT2_OK;
}

/* One session's generation, a step at a time, driven by gpt2__generate: begin, then per step
   pick (sample a token, and with a grammar add the tokens of the text it then forces), deliver
   each (hand its text on; true when generation ends with it) and append them to the context,
   and end (what is still held back for the stop strings). */
enum { GPT2__STEP_COMPLETE = 1, GPT2__STEP_FINISHED = 2, GPT2__MAX_FORCED_BYTES = 256 };
struct gpt2__generator {
    gpt2_session* s = nullptr;
    gpt2_generate_params p;
    bool chain = false; /* off: the backend samples as nanoGPT does, on its device */
    gpt2__chain_buffers buffers;
    gpt2__grammar_matcher grammar; /* with p.grammar: where the text generated so far stands */
    gpt2__vector<int32_t> step;       /* this step's tokens: the one drawn, then any forced */
    gpt2__vector<uint8_t> step_match; /* with a grammar, after each of them: GPT2__STEP_ bits */
    bool complete = false;            /* with a grammar: the text delivered so far is a sentence */
    int n_forced = 0;                 /* tokens the grammar forced (not drawn) */
    gpt2__string forced_text;
    gpt2__vector<int32_t> forced_ids;
    gpt2__string held; /* text not delivered yet: see gpt2_token_fn */
    bool at_stop = false;
    gpt2_end end = GPT2_END_MAX_TOKENS; /* why it ended, once it has */
    int n_new = 0;     /* tokens delivered */
    int32_t* out_tokens = nullptr;
    size_t capacity = 0;
    size_t* n_generated = nullptr;
};

static void gpt2__generator_begin(gpt2__generator* g, gpt2_session* s, const gpt2_generate_params& p, int32_t* out_tokens, size_t capacity, size_t* n_generated) {
    g->s = s;
    g->p = p;
    g->out_tokens = out_tokens;
    g->capacity = capacity;
    g->n_generated = n_generated;
    s->rng_state = p.seed;
    g->chain = gpt2__chain_on(p);
    if (g->chain) {
        const size_t V = (size_t)s->model->n_vocab;
        g->buffers.logits.resize(V);
        g->buffers.scratch.resize(V);
        g->buffers.counts.assign(V, 0);
        if (p.grammar) {
            g->buffers.allowed.resize((V + 31) / 32);
            gpt2__matcher_begin(&g->grammar, p.grammar);
            g->complete = g->grammar.state.complete;
        }
    }
}

/* The grammar's part of a pick: the mask before the draw, then the state after the token. */
static gpt2_result gpt2__generator_mask(gpt2__generator* g, gpt2_error* err) {
    GPT2__TRY(gpt2__matcher_mask(&g->grammar, g->buffers.allowed.data(), err));
    for (uint32_t word : g->buffers.allowed)
        if (word) return GPT2_OK;
    return gpt2__fail(err, GPT2_ERROR_BAD_GRAMMAR, "grammar: no token of the model's vocabulary continues the text generated so far (%d tokens) "
                      "as the grammar asks: it needs characters the vocabulary lacks", g->n_new);
}

/* Moves the grammar over `token` and adds it to the step. */
static gpt2_result gpt2__generator_follow(gpt2__generator* g, int32_t token, gpt2_error* err) {
    g->step.push_back(token);
    if (!g->p.grammar) return GPT2_OK;
    if (token != g->s->model->tokenizer.eos) {
        bool alive;
        GPT2__TRY(gpt2__matcher_feed(&g->grammar, gpt2__tokenizer_token_bytes(&g->s->model->tokenizer, token), &alive, err));
        if (!alive) return gpt2__fail(err, GPT2_ERROR_INTERNAL, "grammar: token %d was drawn but leaves the grammar (a bug in the mask)", (int)token);
    }
    const gpt2__gstate& st = g->grammar.state;
    g->step_match.push_back((uint8_t)((st.complete && st.need == 0 ? GPT2__STEP_COMPLETE : 0) | (gpt2__matcher_finished(g->grammar) ? GPT2__STEP_FINISHED : 0)));
    return GPT2_OK;
}

/* Forced text: where the grammar allows only one text next, its tokens, as the tokenizer writes
   that text, join the step (a sampled token would have no other choice, one by one). The last
   is left to the next draw, which may extend it (`"` before a value: the model may write `"a`),
   unless the text ends the sentence. A text the vocabulary cannot write is left to the draws,
   whose mask then says what is missing. */
static gpt2_result gpt2__generator_force(gpt2__generator* g, gpt2_error* err) {
    const int room = g->p.max_new_tokens - g->n_new - (int)g->step.size();
    if (room <= 0 || gpt2__matcher_finished(g->grammar)) return GPT2_OK;
    bool finishes = false;
    gpt2__matcher_forced_text(&g->grammar, GPT2__MAX_FORCED_BYTES, &g->forced_text, &finishes);
    if (g->forced_text.empty()) return GPT2_OK;
    gpt2_error ignored;
    g->forced_ids.clear();
    if (gpt2__tokenizer_encode(&g->s->model->tokenizer, g->forced_text.data(), g->forced_text.size(), false, &g->forced_ids, &ignored) != GPT2_OK) return GPT2_OK;
    size_t n = std::min(g->forced_ids.size() - (finishes ? 0 : 1), (size_t)room);
    for (size_t k = 0; k < n; k++) GPT2__TRY(gpt2__generator_follow(g, g->forced_ids[k], err));
    g->n_forced += (int)n;
    return GPT2_OK;
}

/* This step's tokens: drawn (on the host's chain or the backend), then with a grammar the
   forced text's; at the start, the forced text alone when there is some. */
static gpt2_result gpt2__generator_pick(gpt2__generator* g, gpt2_error* err) {
    g->step.clear();
    g->step_match.clear();
    int32_t token;
    if (!g->chain) {
        GPT2__TRY(g->s->backend->sample(g->s, g->p.temperature, g->p.top_k, &token, err));
        return gpt2__generator_follow(g, token, err);
    }
    if (g->p.grammar && g->n_new == 0 && g->n_forced == 0) {
        GPT2__TRY(gpt2__generator_force(g, err));
        if (!g->step.empty()) return GPT2_OK;
    }
    if (g->p.grammar) GPT2__TRY(gpt2__generator_mask(g, err));
    GPT2__TRY(gpt2__sample_chain(g->s, g->p, &g->buffers, &token, err));
    GPT2__TRY(gpt2__generator_follow(g, token, err));
    return g->p.grammar && token != g->s->model->tokenizer.eos ? gpt2__generator_force(g, err) : GPT2_OK;
}

/* Delivers the step's token k. True when generation ends with it: the caller's on_token, a stop,
   max_new_tokens, or a sentence of the grammar that nothing may extend. */
static bool gpt2__generator_deliver(gpt2__generator* g, size_t k) {
    const int32_t token = g->step[k];
    const int i = g->n_new++;
    if (g->out_tokens && (size_t)i < g->capacity) g->out_tokens[i] = token;
    if (g->n_generated) *g->n_generated = (size_t)i + 1;
    bool sentence_ends = false;
    if (g->p.grammar) {
        g->complete = g->step_match[k] & GPT2__STEP_COMPLETE;
        sentence_ends = g->step_match[k] & GPT2__STEP_FINISHED;
    }
    if (gpt2__deliver(g->s, g->p, token, &g->held, &g->at_stop, &g->end)) return true;
    g->end = sentence_ends ? GPT2_END_GRAMMAR : GPT2_END_MAX_TOKENS;
    return g->n_new >= g->p.max_new_tokens || sentence_ends;
}

static void gpt2__generator_end(gpt2__generator* g) {
    gpt2_session* s = g->s;
    const gpt2_generate_params& p = g->p;
    if (p.grammar && p.grammar_match) *p.grammar_match = g->complete ? GPT2_MATCH_COMPLETE : GPT2_MATCH_PREFIX;
    if (p.end) *p.end = g->end;
    if (s->model->tokenizer.kind == GPT2_TOKENIZER_NONE || g->at_stop) return;
    /* what is still held: bytes that never formed a character, text that did not become a stop string */
    gpt2__utf8_stream_flush(&s->stream, &g->held);
    g->held.resize(std::min(g->held.size(), gpt2__find_stop(g->held, p))); /* a stop string that is not UTF-8 text */
    if (p.on_token && !g->held.empty()) {
        s->text.assign(g->held);
        p.on_token(p.user, -1, s->text.c_str(), s->text.size());
    }
}

/* A generation on its way (gpt2_generate's, one of gpt2_generate_batch's, a line of a
   gpt2_stage): its generator, and the prompt the next pass prefills beside the other lines'
   tokens. A line that fails alone (its grammar's mask) ends with `result` and `error`; a pass
   that fails fails them all (gpt2__lines_step's result). */
struct gpt2__line {
    gpt2__generator g;
    gpt2__vector<int32_t> prompt; /* not in the context yet */
    bool ends = false;            /* this step was its last */
    gpt2_result result = GPT2_OK;
    gpt2_error error{};
};

/* What a step reuses from one to the next. */
struct gpt2__step_work {
    gpt2__vector<gpt2__line*> plain;
    gpt2__vector<gpt2_session*> batch, plain_sessions;
    gpt2__vector<const int32_t*> ids;
    gpt2__vector<size_t> counts;
    gpt2__vector<int32_t> plain_tokens;
    gpt2__vector<float> temperatures;
    gpt2__vector<int> top_ks;
    gpt2__vector<gpt2__append_undo> undo; /* the pass's, between its begin and its end */
};

/* Sessions that sample as nanoGPT does draw together on the runner's threads where the backend
   can (sample_batch); the others, which may run the caller's on_logits, pick on the calling
   thread. A pick that fails ends its line alone. */
static gpt2_result gpt2__lines_pick(gpt2_session* runner, gpt2__line* const* lines, size_t n, size_t n_picking, gpt2__step_work* w, gpt2_error* err) {
    w->plain.clear();
    for (size_t i = 0; i < n; i++) {
        gpt2__line* line = lines[i];
        if (!line->prompt.empty() || line->g.p.max_new_tokens == 0) continue;
        if (!line->g.chain && runner->backend->sample_batch && n_picking > 1) {
            w->plain.push_back(line);
        } else if ((line->result = gpt2__generator_pick(&line->g, &line->error)) != GPT2_OK) {
            line->ends = true;
            line->g.step.clear();
        }
    }
    if (w->plain.empty()) return GPT2_OK;
    w->plain_sessions.clear();
    w->temperatures.clear();
    w->top_ks.clear();
    for (gpt2__line* line : w->plain) {
        w->plain_sessions.push_back(line->g.s);
        w->temperatures.push_back(line->g.p.temperature);
        w->top_ks.push_back(line->g.p.top_k);
    }
    w->plain_tokens.resize(w->plain.size());
    GPT2__TRY(runner->backend->sample_batch(runner, w->plain_sessions.data(), w->plain.size(), w->temperatures.data(), w->top_ks.data(), w->plain_tokens.data(), err));
    for (size_t j = 0; j < w->plain.size(); j++) {
        w->plain[j]->g.step.assign(1, w->plain_tokens[j]);
        w->plain[j]->g.step_match.clear();
    }
    return GPT2_OK;
}

/* One step of every line, in one pass over the weights on the threads of `runner`: a line with
   a prompt prefills it; the others pick their next token (and any the grammar forces), deliver
   it, and append it to their context (the token that ends a generation joins its context too;
   forced ones after it do not). Afterwards `ends` marks the lines that are done; their
   generators are ended. An error of the pass itself (aborted by runner's abort_fn, the device)
   is returned, and the sessions are as gpt2__batch_append leaves them. In three parts for the
   stage, whose pass may pause between its begin and its end (gpt2__batch_run, GPT2__PAUSED). */
static gpt2_result gpt2__lines_step_begin(gpt2_session* runner, gpt2__line* const* lines, size_t n, gpt2__step_work* w, gpt2_error* err) {
    size_t n_picking = 0;
    for (size_t i = 0; i < n; i++) n_picking += lines[i]->prompt.empty() && lines[i]->g.p.max_new_tokens > 0;
    GPT2__TRY(gpt2__lines_pick(runner, lines, n, n_picking, w, err));
    w->batch.clear();
    w->ids.clear();
    w->counts.clear();
    for (size_t i = 0; i < n; i++) {
        gpt2__line* line = lines[i];
        gpt2__generator& g = line->g;
        size_t count = line->prompt.size();
        const int32_t* ids = line->prompt.data();
        if (g.p.max_new_tokens == 0) line->ends = true; /* its prompt, if any, is all this step does */
        if (count == 0 && line->result == GPT2_OK) {
            while (!line->ends && count < g.step.size()) line->ends = gpt2__generator_deliver(&g, count++);
            ids = g.step.data();
        }
        if (count == 0) continue;
        w->batch.push_back(g.s);
        w->ids.push_back(ids);
        w->counts.push_back(count);
    }
    gpt2__batch_append_begin(runner, w->batch.data(), w->ids.data(), w->counts.data(), w->batch.size(), &w->undo);
    return GPT2_OK;
}

/* The pass's result `res` on the sessions; when it ran, the prompts are in and the lines that
   ended are ended. */
static void gpt2__lines_step_end(gpt2__line* const* lines, size_t n, gpt2__step_work* w, gpt2_result res) {
    gpt2__batch_append_end(w->batch.data(), w->batch.size(), res, &w->undo);
    if (res != GPT2_OK) return;
    for (size_t i = 0; i < n; i++) {
        lines[i]->prompt.clear();
        if (lines[i]->ends && lines[i]->result == GPT2_OK) gpt2__generator_end(&lines[i]->g);
    }
}

static gpt2_result gpt2__lines_step(gpt2_session* runner, gpt2__line* const* lines, size_t n, gpt2__step_work* w, gpt2_error* err) {
    GPT2__TRY(gpt2__lines_step_begin(runner, lines, n, w, err));
    const gpt2_result res = w->batch.empty() ? GPT2_OK : gpt2__batch_run(runner, w->batch.data(), w->batch.size(), err);
    gpt2__lines_step_end(lines, n, w, res);
    return res;
}

/* A line is over with `res`: GPT2_OK when it ended (gpt2__generator_end said why), else why it
   failed (`message`): its end becomes GPT2_END_ABORTED or GPT2_END_ERROR. Its on_end hears it. */
static void gpt2__line_over(gpt2__line* line, gpt2_result res, const char* message) {
    gpt2__generator* g = &line->g;
    if (res != GPT2_OK) {
        g->end = res == GPT2_ERROR_ABORTED ? GPT2_END_ABORTED : GPT2_END_ERROR;
        if (g->p.end) *g->p.end = g->end;
    }
    if (g->p.on_end) g->p.on_end(g->p.user, g->end, res, res == GPT2_OK ? "" : message);
}

/* Steps every line until all are done (gpt2_generate: one line; gpt2_generate_batch: many). The
   first line that fails fails the call, with its message. */
static gpt2_result gpt2__generate(gpt2_session* runner, gpt2__line* lines, size_t n, gpt2_error* err) {
    gpt2__vector<gpt2__line*> active;
    for (size_t i = 0; i < n; i++) active.push_back(&lines[i]);
    gpt2__step_work work;
    while (!active.empty()) {
        GPT2__TRY(gpt2__lines_step(runner, active.data(), active.size(), &work, err));
        size_t kept = 0;
        for (gpt2__line* line : active) {
            if (line->result != GPT2_OK) {
                if (err) *err = line->error;
                return line->result;
            }
            if (!line->ends) active[kept++] = line;
        }
        active.resize(kept);
    }
    return GPT2_OK;
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

/* ---- src/stage.h ---- */
/* The stage (gpt2_stage_*): lines that join and leave between steps, stepped by the engine of
   generate.h (gpt2__lines_step) on the stage's own runner session, whose threads run the passes.
   A line holds its session (gpt2__session_take) from gpt2_stage_add until it ends, and keeps the
   session's state from before the add, to put back when the line is cancelled or fails. */

struct gpt2__stage_line {
    gpt2__line line;
    gpt2__checkpoint before;
    bool cancelled = false; /* guarded by the stage's mutex */
    /* once it has left: how it ended (GPT2_OK, or why it failed), for its on_end */
    gpt2_result result = GPT2_OK;
    gpt2_error why{};
    gpt2__stage_line* next_ended = nullptr; /* the stage's `ended` list */
};

struct gpt2_stage {
    const gpt2_model* model = nullptr;
    gpt2_session* runner = nullptr; /* its threads and scratch run the passes; it holds no context */
    gpt2__tag tag{GPT2__TAG_STAGE}; /* GPT2__TAG_FREED once freed (src/common.h) */
    std::mutex mutex;               /* guards `joining` and every line's `cancelled` */
    gpt2__vector<gpt2__stage_line*> joining; /* added since the last step began */
    gpt2__vector<gpt2__stage_line*> lines;   /* on the stage: only the stepping thread touches them */
    gpt2__vector<gpt2_session*> members;     /* the sessions of `joining` and `lines`; guarded by `mutex` */
    gpt2__stage_line* ended = nullptr;       /* lines that left, their on_end still to call (gpt2__stage_report); guarded by `mutex` */
    std::atomic<bool> stepping{false};       /* a step (or a cancel's clean-up) holds the lines */
    bool in_flight = false;                  /* a budgeted step's pass paused: the lines are in it */
    gpt2__step_work work;
    gpt2__vector<gpt2__line*> active;        /* the lines of the step under way */
};

static gpt2_result gpt2__stage_check(const gpt2_stage* stage, gpt2_error* err) {
    GPT2__TRY(gpt2__check_tag(stage, GPT2__TAG_STAGE, "stage", "gpt2_stage_create", "gpt2_stage_free", err));
    return gpt2__check_model_of(stage->model, "stage", err);
}

/* A line leaves the stage and its session is free: ended (GPT2_OK), it keeps what it generated;
   cancelled or failed (`res`, and `message` why), it is as before gpt2_stage_add. The line waits
   in `ended` for its on_end (gpt2__stage_report). The caller holds `mutex`. */
static void gpt2__stage_line_leave(gpt2_stage* st, gpt2__stage_line* l, gpt2_result res, const char* message) {
    gpt2_session* s = l->line.g.s;
    if (res != GPT2_OK) {
        gpt2_error ignored;
        gpt2__checkpoint_restore(s, &l->before, &ignored);
        gpt2__fail(&l->why, res, "%s", message);
    }
    l->result = res;
    st->members.erase(std::find(st->members.begin(), st->members.end(), s));
    gpt2__session_release(s);
    l->next_ended = st->ended;
    st->ended = l;
}

/* The lines that left hear it (on_end), in the order they left, on this thread and outside the
   mutex: an on_end may add its session's next line. Then they go. */
static void gpt2__stage_report(gpt2_stage* st) {
    gpt2__stage_line* newest_first;
    {
        std::lock_guard<std::mutex> lock(st->mutex);
        newest_first = st->ended;
        st->ended = nullptr;
    }
    gpt2__stage_line* oldest_first = nullptr;
    while (newest_first) {
        gpt2__stage_line* l = newest_first;
        newest_first = l->next_ended;
        l->next_ended = oldest_first;
        oldest_first = l;
    }
    while (oldest_first) {
        gpt2__stage_line* l = oldest_first;
        oldest_first = l->next_ended;
        gpt2__line_over(&l->line, l->result, l->why.message);
        l->~gpt2__stage_line();
        GPT2_FREE(l);
    }
}

static const char* const gpt2__line_cancelled = "the line was cancelled (gpt2_stage_cancel, its session's abort_fn, or gpt2_stage_free): its session is as before gpt2_stage_add";

/* Takes the lines that joined, and drops the cancelled ones; the caller holds `stepping`. */
static void gpt2__stage_gather(gpt2_stage* st) {
    std::lock_guard<std::mutex> lock(st->mutex);
    st->lines.insert(st->lines.end(), st->joining.begin(), st->joining.end());
    st->joining.clear();
    size_t kept = 0;
    for (gpt2__stage_line* l : st->lines)
        if (l->cancelled) gpt2__stage_line_leave(st, l, GPT2_ERROR_ABORTED, gpt2__line_cancelled);
        else st->lines[kept++] = l;
    st->lines.resize(kept);
}

/* A step begins: the lines that joined come in, those cancelled or whose session's abort_fn asks
   go, and the others pick and append their tokens (gpt2__lines_step_begin). */
static gpt2_result gpt2__stage_step_begin(gpt2_stage* st, gpt2_error* err) {
    gpt2__stage_gather(st);
    const std::thread::id stepper = std::this_thread::get_id();
    for (gpt2__stage_line* l : st->lines) {
        gpt2_session* s = l->line.g.s;
        s->user.store(stepper); /* its callbacks, on this thread, may read their session */
        if (gpt2__abort_requested(s)) { /* polled outside the mutex: abort_fn is the caller's code */
            std::lock_guard<std::mutex> lock(st->mutex);
            l->cancelled = true;
        }
    }
    gpt2__stage_gather(st);
    st->active.clear();
    for (gpt2__stage_line* l : st->lines) st->active.push_back(&l->line);
    if (st->active.empty()) return GPT2_OK;
    return gpt2__lines_step_begin(st->runner, st->active.data(), st->active.size(), &st->work, err);
}

/* The step's end: the pass's result `pass` on the sessions, and the lines that ended or failed
   leave (a failed pass: every line). */
static gpt2_result gpt2__stage_step_end(gpt2_stage* st, gpt2_result pass, gpt2_error* err) {
    gpt2__lines_step_end(st->active.data(), st->active.size(), &st->work, pass);
    gpt2_result res = pass;
    std::lock_guard<std::mutex> lock(st->mutex);
    size_t kept = 0;
    for (gpt2__stage_line* l : st->lines) {
        const gpt2__line& line = l->line;
        if (res == GPT2_OK && line.result != GPT2_OK) {
            res = line.result;
            gpt2__fail(err, res, "the line of a session ended (its session is as before gpt2_stage_add): %s", line.error.message);
        }
        if (line.result != GPT2_OK) gpt2__stage_line_leave(st, l, line.result, line.error.message);
        else if (pass != GPT2_OK) gpt2__stage_line_leave(st, l, pass, err->message);
        else if (line.ends) gpt2__stage_line_leave(st, l, GPT2_OK, "");
        else st->lines[kept++] = l;
    }
    st->lines.resize(kept);
    return res;
}

/* One step of the lines on the stage, or, with a budget, as much of it as the budget allows
   (the pass paused in between: in_flight); the caller holds `stepping`. */
static gpt2_result gpt2__stage_advance(gpt2_stage* st, int64_t budget_us, gpt2_error* err) {
    GPT2__GUARD_BEGIN
    gpt2_session* runner = st->runner;
    gpt2__step_work& w = st->work;
    if (runner->backend->set_budget) runner->backend->set_budget(runner, budget_us); /* the picks count too */
    if (!st->in_flight) {
        const gpt2_result begun = gpt2__stage_step_begin(st, err);
        if (st->active.empty()) return gpt2__ok(err);
        if (begun != GPT2_OK) return gpt2__stage_step_end(st, begun, err);
    }
    const gpt2_result pass = w.batch.empty() ? GPT2_OK : gpt2__batch_run(runner, w.batch.data(), w.batch.size(), err);
    if (runner->backend->set_budget) runner->backend->set_budget(runner, 0);
    st->in_flight = pass == GPT2__PAUSED;
    if (st->in_flight) return gpt2__ok(err);
    const gpt2_result res = gpt2__stage_step_end(st, pass, err);
    return res == GPT2_OK ? gpt2__ok(err) : res;
    GPT2__GUARD_END(err)
}

GPT2_DEF gpt2_stage_params gpt2_stage_default_params(void) {
    gpt2_stage_params p;
    p.n_threads = 0;
    return p;
}

GPT2_DEF gpt2_result gpt2_stage_create(const gpt2_model* model, const gpt2_stage_params* params, gpt2_stage** out, gpt2_error* err) {
    if (out) *out = nullptr;
    GPT2__TRY(gpt2__check_model(model, err));
    if (!out) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "out_stage is NULL");
    const gpt2_stage_params p = params ? *params : gpt2_stage_default_params();
    if (p.n_threads < 0) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "n_threads is %d; expected 0 (one per core) or more", p.n_threads);
    GPT2__GUARD_BEGIN
    gpt2_session_params runner_params = gpt2_session_default_params();
    runner_params.n_ctx = 1; /* the runner holds no context, only threads and scratch */
    runner_params.n_threads = p.n_threads;
    gpt2_session* runner;
    GPT2__TRY(gpt2_session_create(model, &runner_params, &runner, err));
    void* memory = GPT2_MALLOC(sizeof(gpt2_stage));
    if (!memory) {
        gpt2_session_free(runner);
        return gpt2__fail(err, GPT2_ERROR_OUT_OF_MEMORY, "out of memory");
    }
    gpt2_stage* st = new (memory) gpt2_stage();
    st->model = model;
    st->runner = runner;
    *out = st;
    return gpt2__ok(err);
    GPT2__GUARD_END(err)
}

GPT2_DEF void gpt2_stage_free(gpt2_stage* stage) {
    if (!stage || stage->tag != GPT2__TAG_STAGE) return; /* NULL, or freed already */
    gpt2__stage_gather(stage);
    {
        std::lock_guard<std::mutex> lock(stage->mutex);
        for (gpt2__stage_line* l : stage->lines) gpt2__stage_line_leave(stage, l, GPT2_ERROR_ABORTED, gpt2__line_cancelled);
    }
    gpt2__stage_report(stage);
    gpt2_session_free(stage->runner);
    stage->tag = GPT2__TAG_FREED;
    stage->~gpt2_stage();
    GPT2_FREE(stage);
}

GPT2_DEF gpt2_result gpt2_stage_add(gpt2_stage* stage, gpt2_session* s, const char* prompt, const gpt2_generate_params* params, gpt2_error* err) {
    GPT2__TRY(gpt2__stage_check(stage, err));
    GPT2__TRY(gpt2__check_session(s, "session", err));
    if (s->model != stage->model) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "session is a session of another model than the stage's");
    gpt2_generate_params p;
    GPT2__TRY(gpt2__check_generate(s, params, &p, err));
    GPT2__GUARD_BEGIN
    gpt2__vector<int32_t> ids;
    if (prompt && *prompt) GPT2__TRY(gpt2__tokenize(s->model, prompt, std::strlen(prompt), false, &ids, err));
    {
        std::lock_guard<std::mutex> lock(stage->mutex);
        if (std::find(stage->members.begin(), stage->members.end(), s) != stage->members.end())
            return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "session is already on this stage (a session speaks one line at a time)");
    }
    std::thread::id holder;
    if (!gpt2__session_take(s, &holder)) return gpt2__busy(err, "the session");
    gpt2_result res = GPT2_OK;
    if (ids.empty() && s->tokens.empty())
        res = gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "empty prompt: generation needs at least one token of context");
    gpt2__stage_line* l = nullptr;
    if (res == GPT2_OK) {
        void* memory = GPT2_MALLOC(sizeof(gpt2__stage_line));
        if (memory) l = new (memory) gpt2__stage_line();
        else res = gpt2__fail(err, GPT2_ERROR_OUT_OF_MEMORY, "out of memory");
    }
    if (res == GPT2_OK) res = gpt2__checkpoint_take(s, &l->before, err);
    if (res != GPT2_OK) {
        if (l) {
            l->~gpt2__stage_line();
            GPT2_FREE(l);
        }
        gpt2__session_release(s);
        return res;
    }
    l->line.prompt.swap(ids);
    gpt2__generator_begin(&l->line.g, s, p, nullptr, 0, nullptr);
    std::lock_guard<std::mutex> lock(stage->mutex);
    stage->joining.push_back(l);
    stage->members.push_back(s);
    return gpt2__ok(err);
    GPT2__GUARD_END(err)
}

GPT2_DEF gpt2_result gpt2_stage_cancel(gpt2_stage* stage, gpt2_session* s, gpt2_error* err) {
    GPT2__TRY(gpt2__stage_check(stage, err));
    GPT2__TRY(gpt2__check_session(s, "session", err));
    bool found = false;
    {
        std::lock_guard<std::mutex> lock(stage->mutex);
        for (const gpt2__vector<gpt2__stage_line*>* lines : {&stage->joining, &stage->lines})
            for (gpt2__stage_line* l : *lines)
                if (l->line.g.s == s) {
                    l->cancelled = true;
                    found = true;
                }
    }
    if (!found) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "session is not on this stage (its line may have ended already)");
    bool idle = false;
    if (stage->stepping.compare_exchange_strong(idle, true)) { /* no step runs: the line goes now, unless a paused pass holds it */
        if (!stage->in_flight) gpt2__stage_gather(stage);
        stage->stepping.store(false);
        gpt2__stage_report(stage);
    }
    return gpt2__ok(err);
}

GPT2_DEF gpt2_result gpt2_stage_step(gpt2_stage* stage, int64_t budget_us, size_t* n_active, gpt2_error* err) {
    if (n_active) *n_active = 0;
    GPT2__TRY(gpt2__stage_check(stage, err));
    if (budget_us < 0) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "budget_us is %lld; expected 0 (a whole step) or more", (long long)budget_us);
    bool idle = false;
    if (!stage->stepping.compare_exchange_strong(idle, true)) return gpt2__busy(err, "the stage (another thread is stepping it)");
    gpt2_error own; /* the lines' on_end hear a failed pass's message when the caller passes no err */
    if (!err) err = &own;
    const gpt2_result res = gpt2__stage_advance(stage, budget_us, err);
    stage->stepping.store(false);
    gpt2__stage_report(stage);
    if (n_active) { /* after the lines that ended were heard: a line their on_end added counts */
        std::lock_guard<std::mutex> lock(stage->mutex);
        *n_active = stage->members.size();
    }
    return res;
}

/* ---- src/choose.h ---- */
/* gpt2_choose: options scored as continuations of the session's context. The options' tokens
   make a trie; the model runs once per node that has children (the logits after that node's
   path), with the cache rows of the context and of the path above it reused, so options that
   share a prefix share its cost and N options cost one token's run per distinct token, not N
   generations. A node's log-probability is read from its parent's logits, as gpt2_score reads
   each position's; an option's is the sum along its path. */

struct gpt2__choice_node {
    int32_t token = -1;
    int parent = -1, depth = 0; /* depth: the tokens of the path, this node's included */
    double logprob = 0.0;       /* log p(token | context, the path above) */
    gpt2__vector<int> children;
};

/* The trie of the options' token lists; end[i] the node where option i ends. Node 0 is the root
   (the context). */
static void gpt2__choice_trie(const gpt2__vector<gpt2__vector<int32_t>>& options, gpt2__vector<gpt2__choice_node>* nodes, gpt2__vector<int>* end) {
    nodes->assign(1, gpt2__choice_node());
    end->assign(options.size(), 0);
    for (size_t i = 0; i < options.size(); i++) {
        int at = 0;
        for (int32_t id : options[i]) {
            int next = -1;
            for (int c : (*nodes)[(size_t)at].children)
                if ((*nodes)[(size_t)c].token == id) next = c;
            if (next < 0) {
                next = (int)nodes->size();
                gpt2__choice_node n;
                n.token = id;
                n.parent = at;
                n.depth = (*nodes)[(size_t)at].depth + 1;
                nodes->push_back(n);
                (*nodes)[(size_t)at].children.push_back(next);
            }
            at = next;
        }
        (*end)[i] = at;
    }
}

/* The log-probabilities of node's children from the logits after node's path. */
static gpt2_result gpt2__choice_children(gpt2_session* s, gpt2__vector<gpt2__choice_node>* nodes, int node, gpt2_error* err) {
    const float* logits = s->backend->logits(s);
    if (!logits) return gpt2__fail(err, GPT2_ERROR_DEVICE, "the %s backend could not return the logits", s->backend->name);
    for (int c : (*nodes)[(size_t)node].children) (*nodes)[(size_t)c].logprob = gpt2__log_prob(logits, s->model->n_vocab, (*nodes)[(size_t)c].token);
    return GPT2_OK;
}

/* Every node's log-probability (the session's context and logits as the caller left them; the
   caller restores them). The walk is depth first: the context is cut back to the node's parent's
   path, which it holds, and the node's token runs on the cache rows of everything before it. */
static gpt2_result gpt2__choice_score(gpt2_session* s, gpt2__vector<gpt2__choice_node>* nodes, gpt2_error* err) {
    GPT2__TRY(gpt2__choice_children(s, nodes, 0, err));
    const size_t n_context = s->tokens.size();
    gpt2__vector<int> order, stack((*nodes)[0].children.rbegin(), (*nodes)[0].children.rend());
    while (!stack.empty()) { /* depth first, so that the context holds each node's parent's path when it comes */
        const int at = stack.back();
        stack.pop_back();
        const gpt2__choice_node& n = (*nodes)[(size_t)at];
        if (n.children.empty()) continue; /* a leaf: nothing is read after it */
        order.push_back(at);
        stack.insert(stack.end(), n.children.rbegin(), n.children.rend());
    }
    gpt2__vector<int32_t> path;
    for (int i : order) {
        const gpt2__choice_node& n = (*nodes)[(size_t)i];
        path.assign((size_t)n.depth, 0);
        for (int at = i; at > 0; at = (*nodes)[(size_t)at].parent) path[(size_t)(*nodes)[(size_t)at].depth - 1] = (*nodes)[(size_t)at].token;
        size_t shared = 0; /* of path[0..depth-1), the tokens the context already holds after n_context */
        while (shared + 1 < path.size() && n_context + shared < s->tokens.size() && s->tokens[n_context + shared] == path[shared]) shared++;
        s->tokens.resize(n_context + shared);
        s->n_cached = std::min(s->n_cached, (int)s->tokens.size());
        GPT2__TRY(gpt2__session_append(s, path.data() + shared, path.size() - shared, err));
        GPT2__TRY(gpt2__choice_children(s, nodes, i, err));
    }
    return GPT2_OK;
}

/* Where the longest option does not fit after the context, the context is cut as evaluating
   that option would cut it (gpt2__make_room under the session's policy; where that takes every
   token, DISCARD with n_keep 0, the last one stays), and its last token runs again for the
   logits after the cut context. The caller's checkpoint puts the context back. */
static gpt2_result gpt2__choice_make_room(gpt2_session* s, size_t longest, gpt2_error* err) {
    if (s->tokens.size() + longest <= (size_t)s->n_ctx) return GPT2_OK;
    const int32_t last = s->tokens.back();
    gpt2__make_room(s, longest);
    if (s->tokens.empty()) s->tokens.push_back(last);
    const int32_t end = s->tokens.back();
    s->tokens.pop_back();
    s->n_cached = std::min(s->n_cached, (int)s->tokens.size());
    return gpt2__session_append(s, &end, 1, err);
}

GPT2_DEF gpt2_result gpt2_choose(gpt2_session* s, const char* const* options, size_t n_options, float* logprobs, size_t* best, gpt2_error* err) {
    GPT2__TRY(gpt2__check_session(s, "session", err));
    if (!best) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "best is NULL: nowhere to put the chosen option's index");
    if (!options || n_options == 0)
        return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "no options: options is %s and n_options is %zu; expected at least one", options ? "set" : "NULL", n_options);
    for (size_t i = 0; i < n_options; i++)
        if (!options[i] || !*options[i]) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "options[%zu] is %s; expected a string of at least one byte", i, options[i] ? "empty" : "NULL");
    if (s->model->tokenizer.kind == GPT2_TOKENIZER_NONE)
        return gpt2__fail(err, GPT2_ERROR_NO_VOCABULARY, "options are text and this model has no vocabulary: score token ids with gpt2_score instead");
    GPT2__USE_SESSION(s, false, err);
    if (s->tokens.empty() || !s->has_logits)
        return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "the session's context is empty: evaluate a prompt first (the options are scored as its continuation)");
    GPT2__GUARD_BEGIN
    /* The context tokens that stay when room is made: the policy's n_keep, and at least one (the
       options are scored after something). */
    const size_t kept = std::max<size_t>(1, s->context_policy == GPT2_CONTEXT_DISCARD ? (size_t)s->n_keep : 0);
    gpt2__vector<gpt2__vector<int32_t>> ids(n_options);
    size_t longest = 0;
    for (size_t i = 0; i < n_options; i++) {
        const gpt2_result res = gpt2__tokenize(s->model, options[i], std::strlen(options[i]), false, &ids[i], err);
        if (res != GPT2_OK) return gpt2__fail(err, res, "options[%zu]: %s", i, gpt2__string(err ? err->message : "").c_str());
        if (kept + ids[i].size() > (size_t)s->n_ctx)
            return gpt2__fail(err, GPT2_ERROR_CONTEXT_FULL, "options[%zu] is %zu tokens; beside the %zu context token%s the context policy keeps that is %zu, more than n_ctx %d",
                              i, ids[i].size(), kept, kept == 1 ? "" : "s", kept + ids[i].size(), s->n_ctx);
        longest = std::max(longest, ids[i].size());
    }
    gpt2__vector<gpt2__choice_node> nodes;
    gpt2__vector<int> end;
    gpt2__choice_trie(ids, &nodes, &end);
    gpt2__checkpoint before; /* the session as it was: put back however the scoring ends */
    GPT2__TRY(gpt2__checkpoint_take(s, &before, err));
    gpt2_result res = gpt2__choice_make_room(s, longest, err);
    if (res == GPT2_OK) res = gpt2__choice_score(s, &nodes, err);
    gpt2_error restore_err;
    const gpt2_result restored = gpt2__checkpoint_restore(s, &before, &restore_err); /* ABORTED when it worked */
    if (restored != GPT2_ERROR_ABORTED) {
        if (err) *err = restore_err;
        return restored;
    }
    if (res != GPT2_OK) return res == GPT2_ERROR_ABORTED ? gpt2__aborted(err) : res;
    size_t chosen = 0;
    double chosen_sum = 0.0;
    for (size_t i = 0; i < n_options; i++) {
        double sum = 0.0;
        for (int at = end[i]; at > 0; at = nodes[(size_t)at].parent) sum += nodes[(size_t)at].logprob;
        if (logprobs) logprobs[i] = (float)sum;
        if (i == 0 || sum > chosen_sum) { /* a tie keeps the lower index */
            chosen = i;
            chosen_sum = sum;
        }
    }
    *best = chosen;
    return gpt2__ok(err);
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
