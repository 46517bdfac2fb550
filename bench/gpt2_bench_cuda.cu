// gpt2-bench-cuda: prompt and decode speed of the CUDA path, against the GPU's own limits
// measured in the same run (device-to-device copy bandwidth, a large f16 cuBLAS product).
//
//   gpt2-bench-cuda --random 124M [--prompt 1024] [--decode 256] [--json]
//   gpt2-bench-cuda -m model.gguf [...]
//
// The --json keys are gpt2-bench's (bench/gpt2_bench.cpp), plus the GPU's measured limits.
#define GPT2_IMPLEMENTATION
#include "gpt2_cuda.cuh"

#include "cuda_random_model.h"
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

static double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

static void usage(const char* prog) {
    std::fprintf(stderr,
                 "usage: %s (--random 124M|355M|774M|1558M | -m MODEL.gguf) [options]\n"
                 "  --random SHAPE  GPT-2-shaped model with random f16 weights, built in memory\n"
                 "  -m MODEL        a GGUF model file\n"
                 "  --device cuda   the only device of this program (accepted for gpt2-bench's command line)\n"
                 "  --prompt N      prompt length for the prefill measurement (default: the model's n_ctx)\n"
                 "  --decode N      tokens generated for the decode measurement (default 256)\n"
                 "  --repeat N      timed repetitions of each measurement; the median is reported (default 5)\n"
                 "  --json          print one JSON object instead of a table\n",
                 prog);
}

#define CHECK_CUDA(call)                                                                      \
    do {                                                                                      \
        cudaError_t e_ = (call);                                                              \
        if (e_ != cudaSuccess) {                                                              \
            std::fprintf(stderr, "gpt2-bench-cuda: %s: %s\n", #call, cudaGetErrorString(e_)); \
            std::exit(1);                                                                     \
        }                                                                                     \
    } while (0)

// Device-to-device copy bandwidth (bytes read + written per second) of a 2 GiB copy.
static double copy_bandwidth() {
    const size_t bytes = (size_t)1 << 31;
    void *a = nullptr, *b = nullptr;
    CHECK_CUDA(cudaMalloc(&a, bytes));
    CHECK_CUDA(cudaMalloc(&b, bytes));
    CHECK_CUDA(cudaMemset(a, 1, bytes));
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    std::vector<float> ms;
    for (int i = 0; i < 8; i++) {
        cudaEventRecord(e0);
        CHECK_CUDA(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice));
        cudaEventRecord(e1);
        cudaEventSynchronize(e1);
        float t = 0;
        cudaEventElapsedTime(&t, e0, e1);
        if (i >= 2) ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    cudaFree(a);
    cudaFree(b);
    return 2.0 * bytes / (ms[ms.size() / 2] * 1e-3);
}

// f16 GEMM rate (FLOP/s) of an 8192^3 cuBLAS product on random data, f32 accumulate.
static double gemm_flops() {
    const int n = 8192;
    void *a = nullptr, *b = nullptr, *c = nullptr;
    CHECK_CUDA(cudaMalloc(&a, (size_t)n * n * 2));
    CHECK_CUDA(cudaMalloc(&b, (size_t)n * n * 2));
    CHECK_CUDA(cudaMalloc(&c, (size_t)n * n * 2));
    std::vector<uint16_t> host((size_t)n * n);
    uint64_t s = 1;
    for (uint16_t& h : host) h = random_gguf_detail::f32_to_f16((float)((random_gguf_detail::splitmix(&s) >> 40) % 2001) / 1000.0f - 1.0f);
    CHECK_CUDA(cudaMemcpy(a, host.data(), host.size() * 2, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(b, host.data(), host.size() * 2, cudaMemcpyHostToDevice));
    cublasHandle_t h;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return 0;
    const float alpha = 1, beta = 0;
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    std::vector<float> ms;
    for (int i = 0; i < 8; i++) {
        cudaEventRecord(e0);
        cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a, CUDA_R_16F, n, b, CUDA_R_16F, n, &beta, c, CUDA_R_16F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        cudaEventRecord(e1);
        cudaEventSynchronize(e1);
        float t = 0;
        cudaEventElapsedTime(&t, e0, e1);
        if (i >= 3) ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    cublasDestroy(h);
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);
    return 2.0 * n * n * (double)n / (ms[ms.size() / 2] * 1e-3);
}

static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

int main(int argc, char** argv) {
    std::string shape_name, model_path;
    int prompt_tokens = 0, decode_tokens = 256, repeat = 5;
    bool json = false;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "gpt2-bench-cuda: %s needs a value\n", a.c_str());
                std::exit(2);
            }
            return argv[++i];
        };
        if (a == "--random") shape_name = value();
        else if (a == "-m" || a == "--model") model_path = value();
        else if (a == "--device") {
            if (value() != "cuda") {
                std::fprintf(stderr, "gpt2-bench-cuda: only --device cuda; use gpt2-bench for the CPU\n");
                return 2;
            }
        } else if (a == "--prompt") prompt_tokens = std::atoi(value().c_str());
        else if (a == "--decode") decode_tokens = std::atoi(value().c_str());
        else if (a == "--repeat") repeat = std::max(1, std::atoi(value().c_str()));
        else if (a == "--json") json = true;
        else if (a == "-h" || a == "--help") { usage(argv[0]); return 0; }
        else {
            std::fprintf(stderr, "gpt2-bench-cuda: unknown option '%s'\n", a.c_str());
            usage(argv[0]);
            return 2;
        }
    }
    if (shape_name.empty() == model_path.empty()) {
        usage(argv[0]);
        return 2;
    }
    gpt2_model_params mp = gpt2_model_default_params();
    mp.device = GPT2_DEVICE_CUDA;
    gpt2_model* model = nullptr;
    gpt2_error err{};
    random_gguf file;
    if (!shape_name.empty()) {
        const random_gpt2_shape* shape = random_gpt2_find_shape(shape_name);
        if (!shape) {
            std::fprintf(stderr, "gpt2-bench-cuda: --random %s: expected 124M, 355M, 774M or 1558M\n", shape_name.c_str());
            return 2;
        }
        if (!random_gpt2_gguf(*shape, 1, 1234, &file)) {
            std::fprintf(stderr, "gpt2-bench-cuda: out of memory building the model\n");
            return 1;
        }
        if (gpt2_model_load_memory(file.data, file.size, &mp, &model, &err) != GPT2_OK) {
            std::fprintf(stderr, "gpt2-bench-cuda: %s\n", err.message);
            return 1;
        }
    } else if (gpt2_model_load_file(model_path.c_str(), &mp, &model, &err) != GPT2_OK) {
        std::fprintf(stderr, "gpt2-bench-cuda: %s\n", err.message);
        return 1;
    }
    const gpt2_model_info info = gpt2_model_get_info(model);
    if (prompt_tokens <= 0 || prompt_tokens > info.n_ctx) prompt_tokens = info.n_ctx;
    const int decode_prompt = 16;
    decode_tokens = std::max(1, std::min(decode_tokens, info.n_ctx - decode_prompt));
    gpt2_session* s = nullptr;
    if (gpt2_session_create(model, nullptr, &s, &err) != GPT2_OK) {
        std::fprintf(stderr, "gpt2-bench-cuda: %s\n", err.message);
        return 1;
    }
    std::vector<int32_t> prompt((size_t)prompt_tokens);
    for (int i = 0; i < prompt_tokens; i++) prompt[(size_t)i] = (int32_t)((i * 7919 + 11) % info.n_vocab);

    // Prefill: the whole prompt in one pass, logits of the last position on the device.
    std::vector<double> prefill;
    for (int r = 0; r < repeat + 2; r++) {
        gpt2_session_reset(s);
        const double t0 = now_s();
        if (gpt2_session_eval(s, prompt.data(), prompt.size(), &err) != GPT2_OK) {
            std::fprintf(stderr, "gpt2-bench-cuda: %s\n", err.message);
            return 1;
        }
        if (r >= 2) prefill.push_back(now_s() - t0);
    }
    // Decode: gpt2_generate with nanoGPT's sampling defaults (temperature 0.8, top_k 200),
    // after a 16-token prompt; per token: one graph replay and the GPU sampler.
    std::vector<double> decode;
    gpt2_generate_params gp = gpt2_generate_default_params();
    for (int r = 0; r < repeat + 1; r++) {
        gpt2_session_reset(s);
        if (gpt2_session_eval(s, prompt.data(), decode_prompt, &err) != GPT2_OK) {
            std::fprintf(stderr, "gpt2-bench-cuda: %s\n", err.message);
            return 1;
        }
        gp.max_new_tokens = decode_tokens;
        gp.seed = 1000 + r;
        size_t produced = 0;
        const double t0 = now_s();
        if (gpt2_generate(s, nullptr, 0, &gp, nullptr, 0, &produced, &err) != GPT2_OK) {
            std::fprintf(stderr, "gpt2-bench-cuda: %s\n", err.message);
            return 1;
        }
        if (r >= 1) decode.push_back((now_s() - t0) / (double)produced);
    }
    // Where a decode step's time goes: the forward graph alone, the sampler alone.
    double graph_ms = 0, sample_ms = 0;
    {
        gpt2__cuda_session* cs = gpt2__cuda(s);
        cudaEvent_t e0, e1;
        cudaEventCreate(&e0);
        cudaEventCreate(&e1);
        const int n = 200;
        float ms = 0;
        if (cs->graph_exec) {
            for (int i = 0; i < 3; i++) CHECK_CUDA(cudaGraphLaunch(cs->graph_exec, cs->stream));
            cudaEventRecord(e0, cs->stream);
            for (int i = 0; i < n; i++) CHECK_CUDA(cudaGraphLaunch(cs->graph_exec, cs->stream));
            cudaEventRecord(e1, cs->stream);
            CHECK_CUDA(cudaEventSynchronize(e1));
            cudaEventElapsedTime(&ms, e0, e1);
            graph_ms = ms / n;
        }
        cudaEventRecord(e0, cs->stream);
        for (int i = 0; i < n; i++)
            gpt2__sample_kernel<<<1, GPT2__SAMPLE_THREADS, 0, cs->stream>>>(cs->logits_d, info.n_vocab, 0.8f, 200, (uint64_t)i, cs->token_d, cs->step_d, cs->n_cached - 1);
        cudaEventRecord(e1, cs->stream);
        CHECK_CUDA(cudaEventSynchronize(e1));
        cudaEventElapsedTime(&ms, e0, e1);
        sample_ms = ms / n;
    }
    const bool pdl = gpt2__cuda_model_of(model)->pdl;
    const bool persistent = gpt2__cuda_model_of(model)->persistent;
    gpt2_session_free(s);

    const double bw = copy_bandwidth(), flops = gemm_flops();
    const double prefill_s = median(prefill), decode_s = median(decode);
    // Bytes one token must read: every 16-bit weight matrix once (the head only over n_vocab).
    const double C = info.n_embd, L = info.n_layer, V = info.n_vocab;
    const double weight_bytes = 2.0 * (L * 12.0 * C * C + V * C);
    const double prefill_flops = 2.0 * prompt_tokens * L * 12.0 * C * C + 2.0 * L * C * (double)prompt_tokens * prompt_tokens /* QK^T, PV (causal) */ + 2.0 * V * C;
    const double achieved = weight_bytes / decode_s;
    const char* type = info.weight_type == GPT2_TYPE_BF16 ? "bf16" : "f16";
    cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, 0);
    if (json) {
        std::printf("{\"model\": \"%s\", \"device\": \"cuda\", \"gpu\": \"%s\", \"type\": \"%s\", \"threads\": 1, \"prompt_tokens\": %d, \"prefill_ms\": %.4f, "
                    "\"prefill_tok_s\": %.1f, \"decode_tokens\": %d, \"decode_ms_per_token\": %.5f, \"decode_tok_s\": %.1f, \"bandwidth_gb_s\": %.1f, "
                    "\"decode_pct_of_limit\": %.1f, \"prefill_pct_of_limit\": %.1f, \"copy_bandwidth_gb_s\": %.1f, \"gemm_f16_tflop_s\": %.1f, "
                    "\"graph_replay_ms\": %.5f, \"sample_kernel_ms\": %.5f, \"pdl\": %s, \"decode\": \"%s\"}\n",
                    info.name, prop.name, type, prompt_tokens, prefill_s * 1e3, prompt_tokens / prefill_s, decode_tokens, decode_s * 1e3, 1.0 / decode_s, achieved / 1e9,
                    100.0 * achieved / bw, 100.0 * (prefill_flops / prefill_s) / flops, bw / 1e9, flops / 1e12, graph_ms, sample_ms, pdl ? "true" : "false",
                    persistent ? "persistent" : "graph");
    } else {
        std::printf("model            %s (%d layers, n_embd %d, %s weights) on %s\n", info.name, info.n_layer, info.n_embd, type, prop.name);
        std::printf("prefill          %d tokens in %.3f ms: %.0f tokens/s, %.1f%% of the measured f16 GEMM rate (%.0f TFLOP/s)\n", prompt_tokens, prefill_s * 1e3,
                    prompt_tokens / prefill_s, 100.0 * (prefill_flops / prefill_s) / flops, flops / 1e12);
        std::printf("decode           %.4f ms/token (%.0f tokens/s) over %d tokens: %.0f GB/s of weights, %.1f%% of the copy bandwidth (%.0f GB/s)\n", decode_s * 1e3,
                    1.0 / decode_s, decode_tokens, achieved / 1e9, 100.0 * achieved / bw, bw / 1e9);
        std::printf("per step         forward graph %.4f ms, sampler %.4f ms (programmatic dependent launch %s, %s decode)\n", graph_ms, sample_ms, pdl ? "on" : "off",
                    persistent ? "persistent" : "graph");
    }
    gpt2_model_free(model);
    return 0;
}
