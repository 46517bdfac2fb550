// gpt2-kernel-bench: one matrix product of the dispatched kernels, timed alone (min of many runs).
//
//   gpt2-kernel-bench TYPE TOKENS [KERNELS [ROWS [COLS [float|rows|batch|lanes [COPIES]]]]]
//     TYPE 0 f32, 1 f16, 30 bf16, 8 q8_0, 2 q4_0; KERNELS scalar|avx2|avx512|neon (default: this CPU's best)
//     q8_0 with 2 or more tokens multiplies int8 panels where the set has them (as a prompt and a
//     batch's decode rows do, quantizing included), float panels with `float`; where the set has
//     lanes, q8_0, q4_0, f16 and bf16 are packed into them first (untimed, as a model is when it loads) and
//     every token count multiplies them, as the forward pass does; `rows` keeps the file's rows;
//     `batch`: the TOKENS are single tokens of as many sessions (gpt2_batch_eval's decode rows;
//     f16 ones packed for the set's tiles where it packs them, packing included);
//     `lanes`: as with no mode. COPIES (default 1): the product goes through that many copies of
//     the matrix in turn, so with enough of them (a forward pass's 300 MB) each call reads its
//     weights from memory, as a model's layers do, where one copy stays in the caches; the median
//     call is printed beside the fastest
//   e.g. gpt2-kernel-bench 8 1 avx512 50257 768   (q8_0 decode of the head's shape, from DRAM)
//        gpt2-kernel-bench 0 64 avx512 3072 768   (f32 prefill of 64 tokens, from cache)
//
//   gpt2-kernel-bench attend KEYS [KERNELS [COPIES [reversed]]]
//     one decoded token's attention in one layer of GPT-2 124M (12 heads x 64, an f32 cache) over
//     KEYS keys, the set's attend_rows_f32, median of 2,000 calls; the keys and values rotate over
//     COPIES copies (default: 256 MB of them, so every call reads from DRAM; 1: from cache), each
//     read through the KV cache's view of blocks of gpt2__kv_block_rows rows, laid out one after
//     another, or with `reversed` last block first (as a cache's blocks lie anywhere)
//
//   gpt2-kernel-bench prompt-attend TOKENS [KERNELS]
//     one layer's prefill attention of a TOKENS-token prompt in GPT-2 124M (12 heads x 64, an f32
//     cache), the set's attend_f32 over every block of gpt2__query_block queries, min of 200 runs
#define GPT2_IMPLEMENTATION
#define GPT2_STATIC
#include "gpt2.h"
#include "tools/gguf_write.h"
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

static int attend_bench(int argc, char** argv) {
    const int n_keys = argc > 2 ? std::atoi(argv[2]) : 150, H = 12, D = 64, C = H * D;
    const gpt2__kernels* k = argc > 3 ? gpt2__kernels_by_name(argv[3]) : &gpt2__cpu_kernels();
    const size_t blocks = gpt2__kv_blocks_for(std::max(n_keys, 1)), floats = blocks * gpt2__kv_block_rows * C;
    const size_t copies = argc > 4 ? (size_t)std::atol(argv[4]) : std::max<size_t>(1, (256u << 20) / (8 * floats));
    const bool reversed = argc > 5 && std::string(argv[5]) == "reversed";
    if (!k || n_keys < 1 || copies < 1 || (argc > 5 && !reversed)) {
        std::fprintf(stderr, "usage: gpt2-kernel-bench attend KEYS [KERNELS [COPIES [reversed]]]\n");
        return 2;
    }
    std::vector<float> keys(floats * copies), values(floats * copies), q(C), out(C), stats(2 * H), scratch((size_t)H * n_keys);
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(-1, 1);
    for (std::vector<float>* v : {&keys, &values, &q})
        for (float& x : *v) x = u(rng);
    std::vector<gpt2__vector<const uint8_t*>> tables(2 * copies); // each copy's blocks, keys then values
    for (size_t c = 0; c < copies; c++)
        for (size_t b = 0; b < blocks; b++) {
            const size_t at = c * floats + (reversed ? blocks - 1 - b : b) * gpt2__kv_block_rows * C;
            tables[2 * c].push_back((const uint8_t*)(keys.data() + at));
            tables[2 * c + 1].push_back((const uint8_t*)(values.data() + at));
        }
    std::vector<double> us;
    for (int it = 0; it < 2000; it++) {
        const size_t c = (size_t)it % copies;
        const gpt2__kv_rows<float> key_rows{tables[2 * c].data(), 0, (size_t)C}, value_rows{tables[2 * c + 1].data(), 0, (size_t)C};
        const auto t0 = std::chrono::steady_clock::now();
        k->attend_rows_f32(out.data(), stats.data(), q.data(), key_rows, value_rows, 0, n_keys, H, D, scratch.data());
        us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(us.begin(), us.end());
    const double median = us[us.size() / 2];
    std::printf("%s attend_rows_f32, %d keys x %d heads x %d, %zu copies%s: median %.1f us, %.2f GB/s of keys and values\n", k->name, n_keys, H, D, copies,
                reversed ? " (blocks reversed)" : "", median, 2.0 * (double)n_keys * C * 4 / median / 1e3);
    return 0;
}

static int prompt_attend_bench(int argc, char** argv) {
    const int T = argc > 2 ? std::atoi(argv[2]) : 128, H = 12, D = 64, C = H * D;
    const gpt2__kernels* k = argc > 3 ? gpt2__kernels_by_name(argv[3]) : &gpt2__cpu_kernels();
    if (!k || T < 1) {
        std::fprintf(stderr, "usage: gpt2-kernel-bench prompt-attend TOKENS [KERNELS]\n");
        return 2;
    }
    std::vector<float> qkv((size_t)T * 3 * C), keys((size_t)T * C), values((size_t)T * C), out((size_t)T * C), scores(gpt2__query_scratch(T));
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(-1, 1);
    for (std::vector<float>* v : {&qkv, &keys, &values})
        for (float& x : *v) x = u(rng);
    gpt2__vector<const uint8_t*> key_table, value_table;
    const gpt2__kv_rows<float> key_rows = gpt2__kv_rows_contiguous(keys.data(), T, (size_t)C, &key_table);
    const gpt2__kv_rows<float> value_rows = gpt2__kv_rows_contiguous(values.data(), T, (size_t)C, &value_table);
    double best = 1e9;
    for (int it = 0; it < 200; it++) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int h = 0; h < H; h++) // as gpt2__attention_task: a task per head and block of queries
            for (int t = 0; t < T; t += gpt2__query_block)
                k->attend_f32(out.data() + (size_t)t * C + h * D, C, qkv.data() + (size_t)t * 3 * C + h * D, 3 * (size_t)C, key_rows.at((size_t)h * D),
                              value_rows.at((size_t)h * D), t + 1, std::min(gpt2__query_block, T - t), D, scores.data());
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    const double flops = 4.0 * C * T * (T + 1) / 2.0; // q.k and p.v of every query's keys
    std::printf("%s attend_f32, a %d-token prompt, %d heads x %d, blocks of %d queries: %.1f us, %.1f GFLOP/s\n", k->name, T, H, D, gpt2__query_block, best * 1e6, flops / best / 1e9);
    return 0;
}

int main(int argc, char** argv) {
    if (argc > 1 && std::string(argv[1]) == "attend") return attend_bench(argc, argv);
    if (argc > 1 && std::string(argv[1]) == "prompt-attend") return prompt_attend_bench(argc, argv);
    const uint32_t type = argc > 1 ? (uint32_t)std::atoi(argv[1]) : (uint32_t)GPT2_TYPE_Q8_0;
    const int T = argc > 2 ? std::atoi(argv[2]) : 1;
    const gpt2__kernels* k = argc > 3 ? gpt2__kernels_by_name(argv[3]) : &gpt2__cpu_kernels();
    const int64_t rows = argc > 4 ? std::atol(argv[4]) : 3072, cols = argc > 5 ? std::atol(argv[5]) : 768;
    uint64_t rb = 0;
    if (!k || T < 1 || rows < 1 || !gpt2__type_row_bytes(type, (uint64_t)cols, &rb)) {
        std::fprintf(stderr, "usage: gpt2-kernel-bench TYPE(0|1|30|8|2) TOKENS [KERNELS [ROWS [COLS [float|rows|batch]]]] (kernels available on this CPU; q8_0 and q4_0 need COLS %% 32 == 0)\n");
        return 2;
    }
    const std::string mode = argc > 6 ? argv[6] : "";
    const bool batch = mode == "batch"; // T sessions' single tokens, as gpt2_batch_eval multiplies them
    const bool lanes = gpt2__lanes_type(type) && k->pack_lanes && (mode.empty() || mode == "lanes" || batch);
    const int copies = argc > 7 ? std::atoi(argv[7]) : 1;
    if (copies < 1 || !(mode.empty() || mode == "float" || mode == "rows" || mode == "batch" || mode == "lanes")) {
        std::fprintf(stderr, "gpt2-kernel-bench: the mode is float, rows, batch or lanes, and COPIES 1 or more\n");
        return 2;
    }
    // On huge pages where the OS grants them, as a model's weights and lanes are (gpt2-bench).
    struct Buffer {
        uint8_t* p;
        explicit Buffer(size_t n) : p((uint8_t*)gpt2__malloc_aligned(n)) { gpt2__advise_huge_pages(p, n); }
        ~Buffer() { gpt2__free_aligned(p); }
        uint8_t* data() const { return p; }
    };
    const size_t matrix_bytes = (size_t)(rb * rows);
    Buffer W(matrix_bytes * copies);
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(-1, 1);
    std::vector<float> row((size_t)cols);
    for (int64_t r = 0; r < rows; r++) {
        for (float& v : row) v = u(rng);
        gguf_quantize_row(type, row.data(), W.data() + r * rb, cols);
    }
    for (int c = 1; c < copies; c++) std::memcpy(W.data() + c * matrix_bytes, W.data(), matrix_bytes);
    gpt2__weight w;
    w.data = W.data(); w.type = type; w.rows = rows; w.cols = cols; w.row_bytes = (size_t)rb;
    const size_t lanes_bytes = lanes ? gpt2__lanes_bytes(w) : 1;
    Buffer packed_lanes(lanes_bytes * copies);
    if (lanes) {
        w.lanes = packed_lanes.data();
        k->pack_lanes(packed_lanes.data(), w);
        for (int c = 1; c < copies; c++) std::memcpy(packed_lanes.data() + c * lanes_bytes, packed_lanes.data(), lanes_bytes);
    }
    std::vector<float> x((size_t)(T * cols)), y((size_t)(T * rows)), panel(gpt2__panel_floats(cols));
    for (float& v : x) v = u(rng);
    std::vector<int8_t> xq((size_t)cols);
    std::vector<float> xs((size_t)cols / 32 + 1);
    std::vector<uint8_t> packed((size_t)T * gpt2__q8_packed_row_bytes(cols));
    std::vector<float> x_tiles(x.size());
    // the strategy of a lone session's T tokens (src/cpu/forward.h: one token, or a few on float
    // weights, go as decode rows); "float": no lanes, no int8 panels
    const bool int8 = gpt2__int8_weights(type), decode_rows = batch || T == 1 || (!int8 && gpt2__is_decode(T));
    gpt2__strategy strategy = gpt2__strategy_for(k, w, T, decode_rows);
    if (mode == "float") strategy = int8 ? (T == 1 ? GPT2__STREAM_INT8 : GPT2__FLOAT_TILES) : gpt2__is_decode(T) ? GPT2__STREAM_ROWS : GPT2__FLOAT_TILES;
    const bool int8_panels = strategy == GPT2__INT8_PANELS;
    std::vector<double> seconds;
    const int iterations = rb * rows > (64u << 20) ? 10 : 200;
    for (int it = 0; it < iterations; it++) {
        w.data = W.data() + (size_t)(it % copies) * matrix_bytes;
        if (lanes) w.lanes = packed_lanes.data() + (size_t)(it % copies) * lanes_bytes;
        const auto t0 = std::chrono::steady_clock::now();
        gpt2__matmul_args a{y.data(), x.data(), nullptr, nullptr, &w, nullptr, T, false, strategy};
        if (strategy == GPT2__STREAM_INT8) {
            k->quantize_q8(xq.data(), xs.data(), x.data(), cols);
            a.xq = xq.data();
            a.xq_scale = xs.data();
        }
        if (int8_panels) {
            k->quantize_q8_packed(packed.data(), x.data(), T, cols);
            a.xq_packed = packed.data();
        }
        if (strategy == GPT2__FLOAT16_LANES && k->pack_tile_rows && k->pack_tile_rows(x_tiles.data(), a)) a.x_tiles = x_tiles.data();
        k->matmul[a.strategy](a, 0, rows, panel.data());
        seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(seconds.begin(), seconds.end());
    const double best = seconds.front(), median = seconds[seconds.size() / 2], macs = (double)rows * cols * T;
    std::printf("%s %s%s, %lld x %lld, %d token(s): %.1f us, %.2f GMAC/s, %.2f GB/s of weights", k->name, gpt2__type_name(type),
                lanes ? " (lanes)" : int8_panels ? " (int8 panels)" : "", (long long)rows,
                (long long)cols, T, best * 1e6, macs / best / 1e9, (double)matrix_bytes / best / 1e9);
    if (copies > 1) std::printf(" (%d copies in turn; median %.1f us, %.2f GMAC/s)", copies, median * 1e6, macs / median / 1e9);
    std::printf("\n");
    return 0;
}
