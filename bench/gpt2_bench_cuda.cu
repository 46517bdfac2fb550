// gpt2-bench-cuda: prompt and decode speed of the CUDA path, against the GPU's own limits
// measured in the same run (device-to-device copy bandwidth, a large f16 cuBLAS product).
//
//   gpt2-bench-cuda --random 124M [--type q8_0] [--prompt 1024] [--decode 256] [--json]
//   gpt2-bench-cuda -m model.gguf [...]
//   gpt2-bench-cuda-next --random 124M --paths default   (the opt-in paths switched off again)
//   gpt2-bench-cuda --random 124M --batch 8,32,64 --json  (B sessions decoding together)
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
                 "  --type T        the random model's matrices: f16 (default) or q8_0\n"
                 "  --paths LIST    the opt-in paths to use, of those this program was built with: 'default'\n"
                 "                  (none: the shipped path) or a comma list of sampler (GPT2_CUDA_FAST_SAMPLER),\n"
                 "                  q8 (GPT2_CUDA_Q8), attn-proj (GPT2_CUDA_FUSED_ATTN_PROJ); without it, every\n"
                 "                  one built in\n"
                 "  --batch LIST    instead: for each B of the comma list, B sessions after a 16-token prompt\n"
                 "                  decode --decode tokens together, through gpt2_batch_eval (one token each a\n"
                 "                  step) and gpt2_generate_batch (nanoGPT's sampling); one JSON line per B\n"
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

// --paths: switches the opt-in paths of this build off again (or keeps them), before any
// session exists; false with a message when a path asked for is not built in.
static bool set_paths(gpt2_model* model, const std::string& paths, std::string* used) {
    gpt2__cuda_model* dm = gpt2__cuda_model_of(model);
    const bool sampler_built = dm->fast_sampler, q8_built = dm->q8_decode, fused_built = dm->fused_attn_proj;
    if (!paths.empty()) {
        const std::string list = "," + paths + ",";
        const auto want = [&](const char* name) { return list.find("," + std::string(name) + ",") != std::string::npos; };
        for (size_t at = 1; at < list.size();) {
            const size_t end = list.find(',', at);
            const std::string name = list.substr(at, end - at);
            if (name != "default" && name != "sampler" && name != "q8" && name != "attn-proj") {
                std::fprintf(stderr, "gpt2-bench-cuda: --paths: unknown path '%s' (default, sampler, q8, attn-proj)\n", name.c_str());
                return false;
            }
            at = end + 1;
        }
        if ((want("sampler") && !sampler_built) || (want("q8") && !q8_built) || (want("attn-proj") && !fused_built)) {
            std::fprintf(stderr, "gpt2-bench-cuda: --paths %s: this program lacks one (sampler needs GPT2_CUDA_FAST_SAMPLER; q8 GPT2_CUDA_Q8 and a q8_0 model; "
                                 "attn-proj GPT2_CUDA_FUSED_ATTN_PROJ)\n", paths.c_str());
            return false;
        }
        dm->fast_sampler = want("sampler");
        dm->q8_decode = want("q8");
        dm->fused_attn_proj = want("attn-proj");
    }
    *used = std::string(dm->fast_sampler ? "sampler," : "") + (dm->q8_decode ? "q8," : "") + (dm->fused_attn_proj ? "attn-proj," : "");
    if (used->empty()) *used = "default";
    else used->pop_back();
    return true;
}

// --batch: for each B, B sessions after a 16-token prompt each decode `tokens` tokens together,
// one JSON line (or table line) per B: gpt2_batch_eval of one token per session per step, then
// gpt2_generate_batch with nanoGPT's sampling.
static int bench_batches(gpt2_model* model, const std::vector<int>& sizes, int tokens, int repeat, bool json, const char* gpu, const std::string& paths) {
    const gpt2_model_info info = gpt2_model_get_info(model);
    const bool batched_pass = gpt2__cuda_backend.run_batch != nullptr;
    gpt2_error err{};
    for (int B : sizes) {
        std::vector<gpt2_session*> sessions((size_t)B, nullptr);
        for (gpt2_session*& s : sessions)
            if (gpt2_session_create(model, nullptr, &s, &err) != GPT2_OK) {
                std::fprintf(stderr, "gpt2-bench-cuda: B %d: %s\n", B, err.message);
                return 1;
            }
        const int steps = std::max(1, std::min(tokens, info.n_ctx - 17));
        std::vector<double> eval_step, generate_step;
        for (int r = 0; r < repeat + 1; r++) {
            for (int i = 0; i < B; i++) {
                std::vector<int32_t> prompt(16);
                for (int t = 0; t < 16; t++) prompt[(size_t)t] = (int32_t)((t * 7919 + i * 104729 + 11) % info.n_vocab);
                gpt2_session_reset(sessions[(size_t)i]);
                if (gpt2_session_eval(sessions[(size_t)i], prompt.data(), prompt.size(), &err) != GPT2_OK) {
                    std::fprintf(stderr, "gpt2-bench-cuda: %s\n", err.message);
                    return 1;
                }
            }
            std::vector<int32_t> next((size_t)B);
            std::vector<const int32_t*> ids((size_t)B);
            const std::vector<size_t> ones((size_t)B, 1);
            double t0 = now_s();
            for (int step = 0; step < steps; step++) {
                for (int i = 0; i < B; i++) {
                    next[(size_t)i] = (int32_t)((step * 31 + i * 17 + 5) % info.n_vocab);
                    ids[(size_t)i] = &next[(size_t)i];
                }
                if (gpt2_batch_eval(sessions.data(), ids.data(), ones.data(), (size_t)B, &err) != GPT2_OK) {
                    std::fprintf(stderr, "gpt2-bench-cuda: %s\n", err.message);
                    return 1;
                }
            }
            if (r >= 1) eval_step.push_back((now_s() - t0) / steps);
            std::vector<gpt2_generate_params> params((size_t)B, gpt2_generate_default_params());
            for (int i = 0; i < B; i++) {
                gpt2_session_truncate(sessions[(size_t)i], 16, nullptr);
                params[(size_t)i].max_new_tokens = steps;
                params[(size_t)i].seed = 1000 + (uint64_t)i;
            }
            t0 = now_s();
            if (gpt2_generate_batch(sessions.data(), nullptr, params.data(), (size_t)B, &err) != GPT2_OK) {
                std::fprintf(stderr, "gpt2-bench-cuda: %s\n", err.message);
                return 1;
            }
            if (r >= 1) generate_step.push_back((now_s() - t0) / steps);
        }
        for (gpt2_session* s : sessions) gpt2_session_free(s);
        const double step_ms = 1e3 * median(eval_step), generate_ms = 1e3 * median(generate_step);
        if (json)
            std::printf("{\"model\": \"%s\", \"device\": \"cuda\", \"gpu\": \"%s\", \"paths\": \"%s\", \"batched_pass\": %s, \"batch\": %d, \"decode_tokens\": %d, "
                        "\"batch_ms_per_step\": %.4f, \"batch_tok_s\": %.1f, \"generate_batch_ms_per_step\": %.4f, \"generate_batch_tok_s\": %.1f}\n",
                        info.name, gpu, paths.c_str(), batched_pass ? "true" : "false", B, steps, step_ms, B / (step_ms / 1e3), generate_ms, B / (generate_ms / 1e3));
        else
            std::printf("B %3d  %s: gpt2_batch_eval %.3f ms a step (%.0f tokens/s), gpt2_generate_batch %.3f ms a step (%.0f tokens/s)\n", B,
                        batched_pass ? "one pass (GPT2_CUDA_BATCH)" : "one by one", step_ms, B / (step_ms / 1e3), generate_ms, B / (generate_ms / 1e3));
        std::fflush(stdout);
    }
    return 0;
}

int main(int argc, char** argv) {
    std::string shape_name, model_path, type_name = "f16", paths, batch_list;
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
        else if (a == "--type") type_name = value();
        else if (a == "--paths") paths = value();
        else if (a == "--batch") batch_list = value();
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
    if (type_name != "f16" && type_name != "q8_0") {
        std::fprintf(stderr, "gpt2-bench-cuda: --type %s: expected f16 or q8_0\n", type_name.c_str());
        return 2;
    }
    std::vector<int> batch_sizes;
    for (size_t at = 0; !batch_list.empty() && at <= batch_list.size();) {
        const size_t end = std::min(batch_list.find(',', at), batch_list.size());
        const int B = std::atoi(batch_list.substr(at, end - at).c_str());
        if (B < 1 || B > 1024) {
            std::fprintf(stderr, "gpt2-bench-cuda: --batch %s: expected sizes of 1 to 1024 sessions, comma-separated\n", batch_list.c_str());
            return 2;
        }
        batch_sizes.push_back(B);
        at = end + 1;
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
        if (!random_gpt2_gguf(*shape, type_name == "q8_0" ? random_gguf_q8_0 : random_gguf_f16, 1234, &file)) {
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
    std::string used_paths;
    if (!set_paths(model, paths, &used_paths)) return 2;
    cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, gpt2__cuda_model_of(model)->device);
    if (!batch_sizes.empty()) {
        const int rc = bench_batches(model, batch_sizes, decode_tokens, repeat, json, prop.name, used_paths);
        gpt2_model_free(model);
        return rc;
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
    // Where a decode step's time goes: the forward graph alone, the sampler alone (the one the
    // session draws with: the many-block one with --paths sampler); and the graph's kernels.
    double graph_ms = 0, sample_ms = 0;
    size_t graph_kernels = 0;
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
        for (int i = 0; i < n; i++) {
            cs->rng_state = (uint64_t)i;
            if (gpt2__cuda_queue_sample(cs, 0.8f, 200, &err) != GPT2_OK) {
                std::fprintf(stderr, "gpt2-bench-cuda: %s\n", err.message);
                return 1;
            }
        }
        cudaEventRecord(e1, cs->stream);
        CHECK_CUDA(cudaEventSynchronize(e1));
        cudaEventElapsedTime(&ms, e0, e1);
        sample_ms = ms / n;
        if (cs->graph) CHECK_CUDA(cudaGraphGetNodes(cs->graph, nullptr, &graph_kernels));
    }
    const bool pdl = gpt2__cuda_model_of(model)->pdl;
    const bool persistent = gpt2__cuda_model_of(model)->persistent;
    gpt2_session_free(s);

    const double bw = copy_bandwidth(), flops = gemm_flops();
    const double prefill_s = median(prefill), decode_s = median(decode);
    // Bytes one token must read: every weight matrix once (the head only over n_vocab), 16-bit, or
    // q8_0's 34 bytes per 32 weights when the tokens read the 8-bit copies.
    const double C = info.n_embd, L = info.n_layer, V = info.n_vocab;
    const bool q8 = gpt2__cuda_model_of(model)->q8_decode;
    const double weight_bytes = (q8 ? 34.0 / 32.0 : 2.0) * (L * 12.0 * C * C + V * C);
    const double prefill_flops = 2.0 * prompt_tokens * L * 12.0 * C * C + 2.0 * L * C * (double)prompt_tokens * prompt_tokens /* QK^T, PV (causal) */ + 2.0 * V * C;
    const double achieved = weight_bytes / decode_s;
    const char* type = gpt2__type_name(info.weight_type);
    if (json) {
        std::printf("{\"model\": \"%s\", \"device\": \"cuda\", \"gpu\": \"%s\", \"type\": \"%s\", \"threads\": 1, \"prompt_tokens\": %d, \"prefill_ms\": %.4f, "
                    "\"prefill_tok_s\": %.1f, \"decode_tokens\": %d, \"decode_ms_per_token\": %.5f, \"decode_tok_s\": %.1f, \"bandwidth_gb_s\": %.1f, "
                    "\"decode_pct_of_limit\": %.1f, \"prefill_pct_of_limit\": %.1f, \"copy_bandwidth_gb_s\": %.1f, \"gemm_f16_tflop_s\": %.1f, "
                    "\"graph_replay_ms\": %.5f, \"sample_kernel_ms\": %.5f, \"pdl\": %s, \"decode\": \"%s\", \"paths\": \"%s\", \"graph_kernels\": %zu}\n",
                    info.name, prop.name, type, prompt_tokens, prefill_s * 1e3, prompt_tokens / prefill_s, decode_tokens, decode_s * 1e3, 1.0 / decode_s, achieved / 1e9,
                    100.0 * achieved / bw, 100.0 * (prefill_flops / prefill_s) / flops, bw / 1e9, flops / 1e12, graph_ms, sample_ms, pdl ? "true" : "false",
                    persistent ? "persistent" : "graph", used_paths.c_str(), graph_kernels);
    } else {
        std::printf("model            %s (%d layers, n_embd %d, %s weights) on %s\n", info.name, info.n_layer, info.n_embd, type, prop.name);
        std::printf("prefill          %d tokens in %.3f ms: %.0f tokens/s, %.1f%% of the measured f16 GEMM rate (%.0f TFLOP/s)\n", prompt_tokens, prefill_s * 1e3,
                    prompt_tokens / prefill_s, 100.0 * (prefill_flops / prefill_s) / flops, flops / 1e12);
        std::printf("decode           %.4f ms/token (%.0f tokens/s) over %d tokens: %.0f GB/s of weights, %.1f%% of the copy bandwidth (%.0f GB/s)\n", decode_s * 1e3,
                    1.0 / decode_s, decode_tokens, achieved / 1e9, 100.0 * achieved / bw, bw / 1e9);
        std::printf("per step         forward graph %.4f ms (%zu kernels), sampler %.4f ms (programmatic dependent launch %s, %s decode; paths: %s)\n", graph_ms,
                    graph_kernels, sample_ms, pdl ? "on" : "off", persistent ? "persistent" : "graph", used_paths.c_str());
    }
    gpt2_model_free(model);
    return 0;
}
