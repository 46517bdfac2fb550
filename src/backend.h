#ifndef GPT2__PART_BACKEND_H
#define GPT2__PART_BACKEND_H
#include "model/model.h"

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

#endif /* GPT2__PART_BACKEND_H */
