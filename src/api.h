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
