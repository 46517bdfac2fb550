#ifndef GPT2__PART_SESSION_H
#define GPT2__PART_SESSION_H
#include "backend.h"
#include "model/sampler.h"

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

#endif /* GPT2__PART_SESSION_H */
