#ifndef GPT2__PART_STAGE_H
#define GPT2__PART_STAGE_H
#include "capi.h"

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

#endif /* GPT2__PART_STAGE_H */
