#ifndef GPT2__PART_CUDA_BATCH_CUH
#define GPT2__PART_CUDA_BATCH_CUH
#include "forward.cuh"

/* Many sessions in one pass (the backend's run_batch), compiled only with GPT2_CUDA_BATCH (not
   yet run on a GPU: bench/cuda_results.md). */

#if defined(GPT2_CUDA_BATCH)

/* Room in s->batch for a pass over `rows` rows of `sessions` sessions. */
static gpt2_result gpt2__cuda_batch_reserve(gpt2__cuda_session* s, size_t rows, size_t sessions, gpt2_error* err) {
    gpt2__cuda_batch_workspace* w = &s->batch;
    if (rows <= w->rows && sessions <= w->sessions) return GPT2_OK;
    rows = std::max(rows, w->rows);
    sessions = std::max(sessions, w->sessions);
    gpt2__cuda_batch_free(w);
    const size_t C = (size_t)s->model->n_embd, F = (size_t)s->model->n_ff, V = (size_t)s->model->n_vocab;
    gpt2__cuda_rows& a = w->a;
    struct { void** p; size_t bytes; } plan[] = {
        {(void**)&a.x, rows * C * 4}, {(void**)&a.qkv, rows * 3 * C * 4}, {(void**)&a.fc, rows * F * 4}, {&a.xn16, rows * C * 2}, {&a.q16, rows * C * 2},
        {&a.att16, rows * C * 2}, {&a.fc16, rows * F * 2}, {(void**)&a.ids, rows * 4}, {&w->last16, sessions * C * 2}, {(void**)&w->logits, sessions * V * 4},
    };
    char what[96];
    std::snprintf(what, sizeof what, "a batch of %zu sessions and %zu new tokens", sessions, rows);
    for (auto& b : plan) {
        GPT2__TRY(gpt2__cuda_malloc(b.p, b.bytes, s->dm->device, what, err));
        w->allocations.push_back(*b.p);
    }
    w->rows = rows;
    w->sessions = sessions;
    return GPT2_OK;
}

/* Queues the batched pass on r's stream: the parts' tokens `ids` through gpt2__cuda_forward_rows
   in r's batch workspace, then the head over each part's last row as one GEMM, and each
   session's logits to its logits_d. */
static gpt2_result gpt2__cuda_batch_pass(gpt2__cuda_session* r, const gpt2__vector<gpt2__cuda_part>& parts, const gpt2__vector<int32_t>& ids, gpt2_error* err) {
    const gpt2_model* m = r->model;
    gpt2__cuda_batch_workspace* w = &r->batch;
    const size_t C = (size_t)m->n_embd, V = (size_t)m->n_vocab, R = ids.size(), B = parts.size();
    cudaStream_t st = r->stream;
    GPT2__CUDA_TRY(cudaMemcpyAsync(w->a.ids, ids.data(), R * 4, cudaMemcpyHostToDevice, st));
    GPT2__TRY(r->dm->bf16 ? gpt2__cuda_forward_rows<__nv_bfloat16>(r, w->a, parts.data(), B, (int)R, err)
                          : gpt2__cuda_forward_rows<__half>(r, w->a, parts.data(), B, (int)R, err));
    for (size_t i = 0; i < B; i++) {
        const size_t last = (size_t)(parts[i].row + parts[i].T - 1);
        GPT2__CUDA_TRY(cudaMemcpyAsync((uint8_t*)w->last16 + i * C * 2, (const uint8_t*)w->a.xn16 + last * C * 2, C * 2, cudaMemcpyDeviceToDevice, st));
    }
    GPT2__TRY(gpt2__cuda_linear(r, r->dm->lm_head, w->last16, w->logits, false, (int)V, (int)B, (int)C, 0.0f, err));
    for (size_t i = 0; i < B; i++) GPT2__CUDA_TRY(cudaMemcpyAsync(parts[i].s->logits_d, w->logits + i * V, V * 4, cudaMemcpyDeviceToDevice, st));
    return GPT2_OK;
}

/* The backend's run_batch (only when built with GPT2_CUDA_BATCH: see the table): run for every
   session at once, on the stream, cuBLAS handle and batch workspace of `runner`. The new tokens
   of all sessions are the rows of one pass (gpt2__cuda_forward_rows, a part per session), so
   each weight product reads the weights once for all of them; attention goes session by
   session against its own cache. A session whose token the sampler's queued pass already
   computed takes that pass, as run does. Polls runner's abort_fn once, before the pass, as run
   does; the logits change only at the end. A batch of the runner alone is its run, the graph
   path. */
[[maybe_unused]] static gpt2_result gpt2__cuda_run_batch(gpt2_session* runner, gpt2_session* const* sessions, size_t n, gpt2_error* err) {
    if (n == 1 && sessions[0] == runner) return gpt2__cuda_run_session(runner, err);
    gpt2__cuda_session* r = gpt2__cuda(runner);
    GPT2__CUDA_TRY(cudaSetDevice(r->dm->device));
    cudaGetLastError();
    if (gpt2__abort_requested(r)) return gpt2__aborted(err);
    gpt2__vector<gpt2__cuda_part> parts;
    gpt2__vector<int32_t> ids; /* the new tokens of all sessions, in row order */
    for (size_t i = 0; i < n; i++) {
        gpt2__cuda_session* s = gpt2__cuda(sessions[i]);
        GPT2__CUDA_TRY(cudaStreamSynchronize(s->stream)); /* its own passes are done before r's stream uses its cache */
        s->logits_on_host = false;
        if (gpt2__cuda_take_pending(s)) continue;
        parts.push_back({s, (int)ids.size(), (int)s->tokens.size() - s->n_cached, s->n_cached});
        ids.insert(ids.end(), s->tokens.begin() + s->n_cached, s->tokens.end());
    }
    if (parts.empty()) return GPT2_OK;
    GPT2__TRY(gpt2__cuda_batch_reserve(r, ids.size(), parts.size(), err));
    const gpt2_result res = gpt2__cuda_batch_pass(r, parts, ids, err);
    const cudaError_t e = cudaStreamSynchronize(r->stream); /* after a failure too: nothing may write the caches once we return */
    if (res != GPT2_OK) return res;
    return e == cudaSuccess ? GPT2_OK : gpt2__cuda_fail(err, e, "the batched forward pass");
}

#endif /* defined(GPT2_CUDA_BATCH) */

#endif /* GPT2__PART_CUDA_BATCH_CUH */
