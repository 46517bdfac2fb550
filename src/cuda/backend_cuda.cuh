#ifndef GPT2__PART_CUDA_BACKEND_CUDA_CUH
#define GPT2__PART_CUDA_BACKEND_CUDA_CUH
#include "batch.cuh"

/* The CUDA backend's table: the model's attach and release, and the functions of the parts. */

static gpt2_result gpt2__cuda_model_attach(gpt2_model* m, gpt2_error* err) {
    void* memory = GPT2_MALLOC(sizeof(gpt2__cuda_model));
    if (!memory) return gpt2__fail(err, GPT2_ERROR_OUT_OF_MEMORY, "out of memory");
    gpt2__cuda_model* dm = new (memory) gpt2__cuda_model();
    dm->device = m->params.cuda_device_index;
    gpt2_result res = gpt2__cuda_upload(m, dm, err);
#if defined(GPT2_CUDA_PERSISTENT_DECODE)
    if (res == GPT2_OK) res = gpt2__cuda_persistent_setup(m, dm, err);
#endif
    if (res != GPT2_OK) {
        gpt2__cuda_model_free_memory(dm);
        return res;
    }
    m->device_weights = dm;
    return GPT2_OK;
}

static void gpt2__cuda_model_release(gpt2_model* m) {
    if (m->device_weights) gpt2__cuda_model_free_memory(gpt2__cuda_model_of(m));
    m->device_weights = nullptr;
}

static const gpt2__backend gpt2__cuda_backend = {"cuda", gpt2__cuda_model_attach, gpt2__cuda_model_release, gpt2__cuda_session_create, gpt2__cuda_session_free,
                                                 gpt2__cuda_run_session, gpt2__cuda_logits, gpt2__cuda_sample, gpt2__cuda_window_logprob,
                                                 gpt2__cuda_save_cache, gpt2__cuda_load_cache,
/* run_batch is opt-in until a GPU has run tests/cuda/test_cuda.cu's batch cases; without it
   gpt2_batch_eval runs the sessions one by one */
#ifdef GPT2_CUDA_BATCH
                                                 gpt2__cuda_run_batch,
#else
                                                 nullptr,
#endif
                                                 nullptr,  /* sample_batch: each session samples on the GPU in turn */
                                                 nullptr,  /* set_budget: a GPU's pass runs whole (the host only waits on it) */
/* sample_chain is opt-in until a GPU has run the many-block sampler's tests; without it a chain
   with top_p or a grammar copies the logits to the host and draws there */
#ifdef GPT2_CUDA_FAST_SAMPLER
                                                 gpt2__cuda_sample_chain,
#else
                                                 nullptr,
#endif
                                                 nullptr}; /* share_cache: a copy copies the contiguous cache (save_cache, load_cache) */
[[maybe_unused]] static const bool gpt2__cuda_registered = gpt2__register_backend(GPT2_DEVICE_CUDA, &gpt2__cuda_backend);

#endif /* GPT2__PART_CUDA_BACKEND_CUDA_CUH */
