#ifndef GPT2__PART_CPU_FORWARD_H
#define GPT2__PART_CPU_FORWARD_H
#include "../session.h"
#include "dispatch.h"
#include "kv_cache.h"
#include "threadpool.h"

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

#endif /* GPT2__PART_CPU_FORWARD_H */
