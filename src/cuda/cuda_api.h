/* gpt2_cuda.cuh - the CUDA path of gpt2.h: GPT-2-class models on an NVIDIA GPU.
   MIT license at the end of gpt2.h.

   THIS FILE IS GENERATED from src/cuda/ by tools/amalgamate.py. Edit the parts under src/.

   USAGE
     In exactly one CUDA translation unit (a .cu file, compiled by nvcc with -std=c++17 and
     linked with -lcublas):
         #define GPT2_IMPLEMENTATION
         #include "gpt2_cuda.cuh"      // includes gpt2.h: this file holds the CPU path too
     Everywhere else (C or C++, any compiler) just #include "gpt2.h", and ask for the GPU:
         gpt2_model_params mp = gpt2_model_default_params();
         mp.device = GPT2_DEVICE_CUDA;
         mp.cuda_device_index = 0;
         gpt2_model_load_file("model.gguf", &mp, &model, &err);   // weights go to the GPU once
     Sessions, generation, scoring and sampling are then the same calls as on the CPU.
     Without this file in the program, GPT2_DEVICE_CUDA is refused with GPT2_ERROR_UNSUPPORTED.

   WHAT RUNS WHERE
     model    the weights as 16-bit floats on the GPU (bf16 when the file is bf16, else f16;
              f32, q8_0 and q4_0 files are converted while loading; with GPT2_CUDA_Q8 q8_0
              matrices also in 8 bits), biases and norms as f32.
     session  its own CUDA stream, cuBLAS handle, KV cache (16-bit) and scratch on the GPU, so
              sessions on one model run concurrently. A prompt runs as cuBLAS matrix products
              with our own kernels between them; each new token runs as one replay of a CUDA
              graph of our own kernels (matrix-vector products fused with their LayerNorm,
              bias, GELU and residual add; attention split over the cache). Sampling
              (temperature, top-k, the library's SplitMix64 RNG) runs on the GPU too: only the
              token id crosses to the host per step. gpt2_session_logits copies the logits
              to the host when asked. Inside a gpt2_generate callback the next step is
              already running, so there it returns the logits after the token just delivered.
     errors   no device, an unsupported GPU or driver, out of GPU memory, or a failed kernel
              come back as GPT2_ERROR_DEVICE / GPT2_ERROR_OUT_OF_MEMORY with a message.

   BUILD OPTIONS (define them where the implementation is compiled, e.g. nvcc -DGPT2_CUDA_BATCH;
   the library reads no environment variable)
     GPT2_CUDA_BATCH              gpt2_batch_eval and gpt2_generate_batch run all sessions in one
                                  pass: their new tokens as the rows of one activation matrix, so
                                  each weight product is one cuBLAS GEMM for all of them, attention
                                  per session against its own cache. Without it (the default) they
                                  run the sessions one by one. Passes the CUDA tests on an H200,
                                  not yet timed there (bench/cuda_results.md, run 3);
                                  gpt2-cuda-tests-batch is built with it.
     GPT2_CUDA_PERSISTENT_DECODE  decode each token with one cooperative kernel instead of the
                                  graph of one-token kernels (the default). Passes the CUDA tests
                                  on an H200 but decodes slower than the graph (0.49 against 0.45
                                  ms a token for 124M: bench/cuda_results.md, run 3);
                                  gpt2-bench-cuda-persistent and gpt2-cuda-tests-persistent are
                                  built with it.
     GPT2_CUDA_NO_PDL             no programmatic dependent launch between the one-token kernels
                                  (on by default on sm_90 and newer; measured no different).
     GPT2_CUDA_FAST_SAMPLER       draw each token with the many-block sampler (a block per 4,096
                                  logits, then one merges; src/cuda/sampler.cuh) instead of the
                                  one-block kernel, and draw gpt2_generate's chain of a grammar's
                                  mask, top_k, top_p and temperature on the GPU too (without it
                                  such a chain copies the logits to the host each step). The same
                                  draws as the host's chain for the same seed (its CPU twin is
                                  tested against it). NOT YET RUN ON A GPU (bench/cuda_results.md);
                                  gpt2-cuda-tests-next and gpt2-bench-cuda-next are built with it.
     GPT2_CUDA_Q8                 a q8_0 file's matrices also go to the GPU in 8 bits (34 bytes a
                                  block of 32 weights, values and scales apart), and each new token
                                  reads those: half the bytes of the 16-bit copy, which the prompt's
                                  cuBLAS products keep using. Each product quantizes its input to
                                  int8 as the CPU's q8_0 tokens do (src/cuda/decode_q8.cuh; its CPU
                                  twin is tested against the CPU's q8_0 rows). NOT YET RUN ON A GPU;
                                  in gpt2-cuda-tests-next and gpt2-bench-cuda-next.
     GPT2_CUDA_FUSED_ATTN_PROJ    each token's attention and its output projection (c_proj, with its
                                  bias and the residual add) run as one kernel: the block that
                                  combines a head also multiplies it by that head's columns, and
                                  the last head adds the parts (src/cuda/fused.cuh; its CPU twin
                                  is in the tests). 50 instead of 62 kernels a token for 124M. NOT
                                  YET RUN ON A GPU; in gpt2-cuda-tests-next and gpt2-bench-cuda-next.
*/
#ifndef GPT2_CUDA_CUH
#define GPT2_CUDA_CUH

#if defined(GPT2_IMPLEMENTATION)
#if defined(GPT2_IMPLEMENTATION_DONE) && !defined(GPT2__CUDA_BACKEND)
#error "gpt2.h's implementation was included before gpt2_cuda.cuh: in the implementation file include only gpt2_cuda.cuh"
#endif
#define GPT2__CUDA_BACKEND
#endif
#include "../capi.h" /* all of gpt2.h: in gpt2_cuda.cuh, #include "gpt2.h" */

#endif /* GPT2_CUDA_CUH */
