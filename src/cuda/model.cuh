#ifndef GPT2__PART_CUDA_MODEL_CUH
#define GPT2__PART_CUDA_MODEL_CUH
#include "decode_q8.cuh"

/* The weights uploaded once, as 16-bit floats. */

/* ---- Model upload ------------------------------------------------------------------------- */

/* cudaMalloc, failing with a message that says what for and how much the device has left. */
static gpt2_result gpt2__cuda_malloc(void** out, size_t bytes, int device, const char* what, gpt2_error* err) {
    const cudaError_t e = cudaMalloc(out, bytes);
    if (e == cudaSuccess) return GPT2_OK;
    *out = nullptr;
    cudaGetLastError();
    size_t free_bytes = 0, total = 0;
    cudaMemGetInfo(&free_bytes, &total);
    return gpt2__fail(err, e == cudaErrorMemoryAllocation ? GPT2_ERROR_OUT_OF_MEMORY : GPT2_ERROR_DEVICE,
                      "CUDA: cannot allocate %zu bytes for %s on device %d (%zu of %zu bytes free): %s", bytes, what, device, free_bytes, total,
                      cudaGetErrorString(e));
}

static gpt2_result gpt2__cuda_alloc(gpt2__cuda_model* dm, size_t bytes, void** out, const char* what, gpt2_error* err) {
    GPT2__TRY(gpt2__cuda_malloc(out, bytes, dm->device, what, err));
    dm->allocations.push_back(*out);
    dm->bytes += bytes;
    return GPT2_OK;
}

static gpt2_result gpt2__cuda_upload_vector(gpt2__cuda_model* dm, const float* v, int64_t n, float** out, gpt2_error* err) {
    *out = nullptr;
    if (!v) return GPT2_OK;
    GPT2__TRY(gpt2__cuda_alloc(dm, (size_t)n * 4, (void**)out, "a vector", err));
    GPT2__CUDA_TRY(cudaMemcpy(*out, v, (size_t)n * 4, cudaMemcpyHostToDevice));
    return GPT2_OK;
}

/* Rows [0, rows) of W as 16-bit floats: copied as they are when the file has that type, else
   dequantized to f32 on the host a slice at a time and converted on the GPU. */
static gpt2_result gpt2__cuda_upload_matrix(gpt2__cuda_model* dm, const gpt2__weight& W, int64_t rows, void** out, gpt2__vector<float>& host, float* staging,
                                            size_t staging_floats, gpt2_error* err) {
    const size_t cols = (size_t)W.cols, bytes = (size_t)rows * cols * 2;
    GPT2__TRY(gpt2__cuda_alloc(dm, bytes, out, "a weight matrix", err));
    const uint32_t target = dm->bf16 ? GPT2_TYPE_BF16 : GPT2_TYPE_F16;
    if (W.type == target) {
        GPT2__CUDA_TRY(cudaMemcpy(*out, W.data, bytes, cudaMemcpyHostToDevice));
        return GPT2_OK;
    }
    const int64_t slice = std::max<int64_t>(1, (int64_t)(staging_floats / cols));
    for (int64_t r0 = 0; r0 < rows; r0 += slice) {
        const int64_t n_rows = std::min(slice, rows - r0);
        const size_t n = (size_t)n_rows * cols;
        const float* src = (const float*)(W.data + (size_t)r0 * W.row_bytes);
        if (W.type != GPT2_TYPE_F32) {
            for (int64_t r = 0; r < n_rows; r++) gpt2__dequantize_row(W.type, W.data + (size_t)(r0 + r) * W.row_bytes, host.data() + (size_t)r * cols, (int64_t)cols);
            src = host.data();
        }
        GPT2__CUDA_TRY(cudaMemcpy(staging, src, n * 4, cudaMemcpyHostToDevice));
        const size_t offset = (size_t)r0 * cols;
        if (dm->bf16) gpt2__convert_kernel<__nv_bfloat16><<<1024, 256>>>((__nv_bfloat16*)*out + offset, staging, n);
        else gpt2__convert_kernel<__half><<<1024, 256>>>((__half*)*out + offset, staging, n);
        GPT2__LAUNCHED("convert");
        GPT2__CUDA_TRY(cudaDeviceSynchronize());
    }
    return GPT2_OK;
}

/* Rows [0, rows) of a q8_0 matrix W as the one-token products' 8-bit copy (decode_q8.cuh): its
   GGUF blocks split into values and scales on the host a slice at a time. */
static gpt2_result gpt2__cuda_upload_q8(gpt2__cuda_model* dm, const gpt2__weight& W, int64_t rows, gpt2__cuda_q8* out, gpt2_error* err) {
    const size_t cols = (size_t)W.cols, nb = cols / gpt2__q8_block_values;
    GPT2__TRY(gpt2__cuda_alloc(dm, (size_t)rows * cols, (void**)&out->values, "a q8_0 matrix's values", err));
    GPT2__TRY(gpt2__cuda_alloc(dm, (size_t)rows * nb * 2, (void**)&out->scales, "a q8_0 matrix's scales", err));
    const int64_t slice = std::max<int64_t>(1, (int64_t)(((size_t)16 << 20) / cols));
    gpt2__vector<int8_t> values((size_t)std::min(slice, rows) * cols);
    gpt2__vector<uint16_t> scales((size_t)std::min(slice, rows) * nb);
    for (int64_t r0 = 0; r0 < rows; r0 += slice) {
        const int64_t n_rows = std::min(slice, rows - r0);
        gpt2__q8_split_rows(W.data + (size_t)r0 * W.row_bytes, W.row_bytes, n_rows, (int64_t)cols, values.data(), scales.data());
        GPT2__CUDA_TRY(cudaMemcpy(out->values + (size_t)r0 * cols, values.data(), (size_t)n_rows * cols, cudaMemcpyHostToDevice));
        GPT2__CUDA_TRY(cudaMemcpy(out->scales + (size_t)r0 * nb, scales.data(), (size_t)n_rows * nb * 2, cudaMemcpyHostToDevice));
    }
    return GPT2_OK;
}

static void gpt2__cuda_model_free_memory(gpt2__cuda_model* dm) {
    if (!dm->allocations.empty()) cudaSetDevice(dm->device);
    for (void* p : dm->allocations) cudaFree(p);
    cudaGetLastError(); /* leave no error behind for the next call */
    dm->~gpt2__cuda_model();
    GPT2_FREE(dm);
}

static gpt2_result gpt2__cuda_select_device(int index, gpt2_error* err) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return gpt2__fail(err, GPT2_ERROR_DEVICE, "CUDA: no usable GPU: cudaGetDeviceCount failed: %s (%s)", cudaGetErrorString(e), cudaGetErrorName(e));
    }
    if (count == 0) return gpt2__fail(err, GPT2_ERROR_DEVICE, "CUDA: no GPU found");
    if (index < 0 || index >= count)
        return gpt2__fail(err, GPT2_ERROR_DEVICE, "cuda_device_index is %d, but there %s %d GPU%s (0 to %d)", index, count == 1 ? "is" : "are", count, count == 1 ? "" : "s", count - 1);
    GPT2__CUDA_TRY(cudaSetDevice(index));
    return GPT2_OK;
}

static gpt2_result gpt2__cuda_upload(gpt2_model* m, gpt2__cuda_model* dm, gpt2_error* err) {
    cudaGetLastError(); /* an error left by earlier calls of this thread is not ours */
    GPT2__TRY(gpt2__cuda_select_device(dm->device, err));
    cudaDeviceProp prop;
    GPT2__CUDA_TRY(cudaGetDeviceProperties(&prop, dm->device));
    dm->n_sm = prop.multiProcessorCount;
    cudaFuncAttributes attr;
    if (cudaFuncGetAttributes(&attr, gpt2__convert_kernel<__half>) != cudaSuccess) {
        cudaGetLastError();
        return gpt2__fail(err, GPT2_ERROR_DEVICE, "CUDA: %s (compute capability %d.%d) cannot run this build's kernels (built for sm_80, sm_89, sm_90 and PTX 9.0); rebuild for it",
                          prop.name, prop.major, prop.minor);
    }
    const int C = m->n_embd, F = m->n_ff, H = m->n_head, D = C / H;
    dm->bf16 = m->weight_type == GPT2_TYPE_BF16;
    dm->fast_decode = C % 8 == 0 && F % 8 == 0 && (D == 32 || D == 64 || D == 128) && (size_t)std::max(3 * C, F) * 4 <= 48 * 1024;
#if defined(GPT2_CUDA_FAST_SAMPLER)
    dm->fast_sampler = true;
#endif
#if defined(GPT2_CUDA_FUSED_ATTN_PROJ)
    dm->fused_attn_proj = dm->fast_decode;
#endif
#if defined(GPT2_CUDA_NO_PDL)
    dm->pdl = false;
#else
    dm->pdl = prop.major >= 9;
#endif
    const size_t staging_floats = std::min<size_t>((size_t)16 << 20, std::max((size_t)m->n_vocab_rows, (size_t)F) * (size_t)C);
    gpt2__vector<float> host(staging_floats);
    float* staging = nullptr;
    GPT2__CUDA_TRY(cudaMalloc((void**)&staging, staging_floats * 4));
    struct Free {
        float* p;
        ~Free() { cudaFree(p); }
    } free_staging{staging};
    auto matrix = [&](const gpt2__weight& W, int64_t rows, void** out) { return gpt2__cuda_upload_matrix(dm, W, rows, out, host, staging, staging_floats, err); };
    GPT2__TRY(matrix(m->wte, m->n_vocab_rows, &dm->wte));
    GPT2__TRY(matrix(m->wpe, m->n_ctx, &dm->wpe));
    dm->lm_head = dm->wte;
    if (m->lm_head.data != m->wte.data) GPT2__TRY(matrix(m->lm_head, m->n_vocab_rows, &dm->lm_head));
#if defined(GPT2_CUDA_Q8)
    /* the q8_0 matrices' 8-bit copies, for the one-token products, where their shared memory fits */
    const bool q8 = dm->fast_decode && C % 32 == 0 && F % 32 == 0 && std::max(gpt2__gemv_q8_smem(C, true), gpt2__gemv_q8_smem(F, false)) <= 48 * 1024;
    const auto matrix_q8 = [&](const gpt2__weight& W, int64_t rows, gpt2__cuda_q8* out) {
        if (!q8 || W.type != GPT2_TYPE_Q8_0) return GPT2_OK;
        dm->q8_decode = true;
        return gpt2__cuda_upload_q8(dm, W, rows, out, err);
    };
    GPT2__TRY(matrix_q8(m->lm_head, m->n_vocab_rows, &dm->lm_head_q8));
#endif
    GPT2__TRY(gpt2__cuda_upload_vector(dm, m->ln_f_weight, C, &dm->ln_f_w, err));
    GPT2__TRY(gpt2__cuda_upload_vector(dm, m->ln_f_bias, C, &dm->ln_f_b, err));
    dm->layers.resize((size_t)m->n_layer);
    for (int l = 0; l < m->n_layer; l++) {
        const gpt2__layer& L = m->layers[(size_t)l];
        gpt2__cuda_layer& G = dm->layers[(size_t)l];
        GPT2__TRY(matrix(L.c_attn, 3 * C, &G.c_attn));
        GPT2__TRY(matrix(L.c_proj, C, &G.c_proj));
        GPT2__TRY(matrix(L.c_fc, F, &G.c_fc));
        GPT2__TRY(matrix(L.mlp_proj, C, &G.mlp_proj));
#if defined(GPT2_CUDA_Q8)
        GPT2__TRY(matrix_q8(L.c_attn, 3 * C, &G.c_attn_q8));
        GPT2__TRY(matrix_q8(L.c_proj, C, &G.c_proj_q8));
        GPT2__TRY(matrix_q8(L.c_fc, F, &G.c_fc_q8));
        GPT2__TRY(matrix_q8(L.mlp_proj, C, &G.mlp_proj_q8));
#endif
        GPT2__TRY(gpt2__cuda_upload_vector(dm, L.ln_1_weight, C, &G.ln_1_w, err));
        GPT2__TRY(gpt2__cuda_upload_vector(dm, L.ln_1_bias, C, &G.ln_1_b, err));
        GPT2__TRY(gpt2__cuda_upload_vector(dm, L.c_attn_bias, 3 * C, &G.c_attn_b, err));
        GPT2__TRY(gpt2__cuda_upload_vector(dm, L.c_proj_bias, C, &G.c_proj_b, err));
        GPT2__TRY(gpt2__cuda_upload_vector(dm, L.ln_2_weight, C, &G.ln_2_w, err));
        GPT2__TRY(gpt2__cuda_upload_vector(dm, L.ln_2_bias, C, &G.ln_2_b, err));
        GPT2__TRY(gpt2__cuda_upload_vector(dm, L.c_fc_bias, F, &G.c_fc_b, err));
        GPT2__TRY(gpt2__cuda_upload_vector(dm, L.mlp_proj_bias, C, &G.mlp_proj_b, err));
    }
    GPT2__CUDA_TRY(cudaDeviceSynchronize());
    gpt2__log(m->params, GPT2_LOG_INFO, "CUDA: %s, %zu bytes of %s weights on device %d%s%s%s", prop.name, dm->bytes, dm->bf16 ? "bf16" : "f16", dm->device,
              dm->fast_decode ? "" : " (no fused one-token kernels for this shape)", dm->persistent ? ", one persistent kernel per token" : "",
              dm->q8_decode ? ", q8_0 matrices also in 8 bits for decode" : "");
    return GPT2_OK;
}

#endif /* GPT2__PART_CUDA_MODEL_CUH */
