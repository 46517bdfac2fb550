// Every SIMD kernel set this CPU runs against the portable scalar kernels (or float64), on
// random inputs with odd sizes, for every weight type. This file holds a private copy of the
// implementation to reach the kernels directly.
#define GPT2_IMPLEMENTATION
#define GPT2_STATIC
#include "gpt2.h"
#include "tools/gguf_write.h"
#include <doctest/doctest.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

static std::vector<const gpt2__kernels*> simd_kernels() {
    const gpt2__kernels* sets[gpt2__max_kernel_sets];
    const int n = gpt2__supported_kernels(sets);
    std::vector<const gpt2__kernels*> out;
    for (int i = 0; i < n; i++)
        if (sets[i] != &gpt2__kernels_scalar) out.push_back(sets[i]);
    return out;
}

// x rounded to bf16 (to nearest even) and back, as the bf16 unit takes a prompt's activations.
static std::vector<float> rounded_to_bf16(const std::vector<float>& x) {
    std::vector<uint16_t> b(x.size());
    gguf_quantize_row(GPT2_TYPE_BF16, x.data(), (uint8_t*)b.data(), (int64_t)x.size());
    std::vector<float> out(x.size());
    for (size_t i = 0; i < x.size(); i++) out[i] = gpt2__bf16_to_f32(b[i]);
    return out;
}

static std::vector<float> random_floats(std::mt19937& rng, size_t n, float scale) {
    std::uniform_real_distribution<float> u(-scale, scale);
    std::vector<float> v(n);
    for (float& x : v) x = u(rng);
    return v;
}

// A rows x cols matrix of random values stored in `type`.
struct Matrix {
    std::vector<uint8_t> bytes;
    gpt2__weight w;
    Matrix(std::mt19937& rng, uint32_t type, int64_t rows, int64_t cols) {
        uint64_t row_bytes = 0;
        gpt2__type_row_bytes(type, (uint64_t)cols, &row_bytes);
        bytes.resize((size_t)(row_bytes * rows) + 64);
        for (int64_t r = 0; r < rows; r++) {
            std::vector<float> row = random_floats(rng, (size_t)cols, 1.0f);
            gguf_quantize_row(type, row.data(), bytes.data() + r * row_bytes, cols);
        }
        w.data = bytes.data();
        w.type = type;
        w.rows = rows;
        w.cols = cols;
        w.row_bytes = (size_t)row_bytes;
    }
};

// m's weight with lanes packed by k into `storage` (64-byte aligned within it), as a model's are at load.
static gpt2__weight with_lanes(const gpt2__kernels* k, const Matrix& m, std::vector<uint8_t>& storage) {
    storage.assign(gpt2__lanes_bytes(m.w) + 64, 0);
    gpt2__weight w = m.w;
    w.lanes = storage.data() + (64 - (uintptr_t)storage.data() % 64) % 64;
    k->pack_lanes((uint8_t*)w.lanes, m.w);
    return w;
}

TEST_CASE("dispatch picks a kernel set this CPU supports, and the scalar set always exists") {
    MESSAGE("kernels chosen for this CPU: " << std::string(gpt2__cpu_kernels().name));
    CHECK(gpt2__kernels_by_name("scalar") == &gpt2__kernels_scalar);
    CHECK(gpt2__kernels_by_name(gpt2__cpu_kernels().name) == &gpt2__cpu_kernels());
    CHECK(gpt2__kernels_by_name("no-such-kernels") == nullptr);
#if defined(__wasm_simd128__) && !defined(GPT2_NO_SIMD)
    CHECK(gpt2__kernels_by_name("wasm_simd128") == &gpt2__cpu_kernels()); // -msimd128 builds run it, so the tests below compare it
#endif
}

#if defined(GPT2__WASM_SIMD128)
TEST_CASE("WASM SIMD128 widens every f16 bit pattern exactly as the scalar conversion: subnormals, infinities, NaNs") {
    for (uint32_t h = 0; h < 0x10000; h += 8) {
        uint16_t eight[8];
        for (int i = 0; i < 8; i++) eight[i] = (uint16_t)(h + i);
        uint32_t got[8];
        v128_t lo, hi;
        gpt2__f16x8_to_f32_wasm((const uint8_t*)eight, &lo, &hi);
        wasm_v128_store(got, lo);
        wasm_v128_store(got + 4, hi);
        for (int i = 0; i < 8; i++) {
            const float want = gpt2__f16_to_f32(eight[i]);
            uint32_t want_bits;
            std::memcpy(&want_bits, &want, 4);
            CAPTURE(eight[i]);
            REQUIRE(got[i] == want_bits);
        }
    }
}

TEST_CASE("WASM SIMD128 prefill, which widens each weight row once, gives the streamed dot products bit for bit") {
    std::mt19937 rng(11);
    for (uint32_t type : {GPT2_TYPE_F16, GPT2_TYPE_BF16, GPT2_TYPE_Q8_0}) {
        for (int64_t n : {96, 123}) { // 123: a tail past the steps of eight
            if (type == GPT2_TYPE_Q8_0 && n % 32 != 0) continue;
            CAPTURE(gpt2__type_name(type)); CAPTURE(n);
            const int64_t rows = 9;
            Matrix m(rng, type, rows, n);
            const int T = 6;
            std::vector<float> x = random_floats(rng, (size_t)(T * n), 1.0f), bias = random_floats(rng, rows, 1.0f);
            std::vector<float> y((size_t)(T * rows)), panel(gpt2__panel_floats(n));
            gpt2__matmul_args a{y.data(), x.data(), nullptr, nullptr, &m.w, bias.data(), T, false, GPT2__FLOAT_TILES};
            gpt2__matmul_widened_wasm(a, 0, rows, panel.data());
            for (int t = 0; t < T; t++)
                for (int64_t o = 0; o < rows; o++)
                    CHECK(y[(size_t)(t * rows + o)] == bias[(size_t)o] + gpt2__dot_row_wasm(type, m.w.data + o * m.w.row_bytes, x.data() + t * n, n));
        }
    }
}
#endif

TEST_CASE("SIMD matmul equals the scalar matmul for every weight type, token count and row range") {
    std::mt19937 rng(1234);
    const uint32_t types[] = {GPT2_TYPE_F32, GPT2_TYPE_F16, GPT2_TYPE_BF16, GPT2_TYPE_Q8_0, GPT2_TYPE_Q4_0};
    const int token_counts[] = {1, 2, 3, 4, 5, 9, 70, 197}; // 197: past a chunk of tokens (x86_prefill.h), its last tiles short
    for (const gpt2__kernels* k : simd_kernels()) {
        for (uint32_t type : types) {
            for (int64_t cols : {32, 96, 77, 163, 416, 800}) { // int8: 1, 3, 13 and 25 blocks (AVX2 q4_0 steps of 8 and the blocks after)
                if (gpt2__int8_weights(type) && cols % 32 != 0) continue;
                const int64_t rows = 37;
                Matrix m(rng, type, rows, cols);
                std::vector<float> bias = random_floats(rng, (size_t)rows, 1.0f);
                for (int T : token_counts) {
                    CAPTURE(k->name); CAPTURE(gpt2__type_name(type)); CAPTURE(cols); CAPTURE(T);
                    std::vector<float> x = random_floats(rng, (size_t)(T * cols), 1.0f);
                    std::vector<int8_t> xq((size_t)cols);
                    std::vector<float> xs((size_t)cols / 32 + 1);
                    const bool quantized = gpt2__int8_activations(T, type); // as the forward pass does
                    // the matrix has no lanes and no int8 panels are made: one token's int8 rows, else decode's rows or prefill's tiles
                    const bool streams = quantized || (gpt2__is_decode(T) && !gpt2__int8_weights(type)) || !k->matmul[GPT2__FLOAT_TILES];
                    const gpt2__strategy strategy = quantized ? GPT2__STREAM_INT8 : streams ? GPT2__STREAM_ROWS : GPT2__FLOAT_TILES;
                    if (quantized) gpt2__quantize_q8_scalar(xq.data(), xs.data(), x.data(), cols);
                    for (bool accumulate : {false, true}) {
                        std::vector<float> start = random_floats(rng, (size_t)(T * rows), 1.0f);
                        std::vector<float> want = start, got = start, split = start;
                        std::vector<float> panel(gpt2__panel_floats(cols));
                        gpt2__matmul_args a{want.data(), x.data(), quantized ? xq.data() : nullptr, quantized ? xs.data() : nullptr, &m.w, bias.data(), T, accumulate, strategy};
                        a.strategy = quantized ? GPT2__STREAM_INT8 : GPT2__STREAM_ROWS; // the scalar set streams every product
                        gpt2__matmul_rows_scalar(a, 0, rows, panel.data());
                        a.strategy = strategy;
                        a.y = got.data();
                        k->matmul[a.strategy](a, 0, rows, panel.data());
                        a.y = split.data(); // two threads' ranges at an odd boundary give the same bits
                        k->matmul[a.strategy](a, 0, 13, panel.data());
                        k->matmul[a.strategy](a, 13, rows, panel.data());
                        CHECK(split == got);
                        float worst = 0;
                        for (size_t i = 0; i < want.size(); i++) {
                            const float scale = 1.0f + (float)cols * 0.05f; // |w x| sums stay below ~cols/4
                            worst = std::max(worst, std::fabs(want[i] - got[i]) / scale);
                        }
                        CHECK(worst < 1e-5f);
                    }
                }
            }
        }
    }
}

TEST_CASE("int8 panels (q8_0 and q4_0 prompts, many decode rows of a batch) equal the scalar set's rows against the same quantized activations") {
    std::mt19937 rng(4321);
    int tested = 0;
    for (const gpt2__kernels* k : simd_kernels()) {
        if (!k->quantize_q8_packed) continue;
        for (uint32_t type : {GPT2_TYPE_Q8_0, GPT2_TYPE_Q4_0}) {
            for (int64_t cols : {32, 256, 800, 3072}) {
                const int64_t rows = 37; // a panel of 32 rows and one of 5; split at 13: one of 13, one of 24
                Matrix m(rng, type, rows, cols);
                std::vector<float> bias = random_floats(rng, (size_t)rows, 1.0f);
                for (int T : {2, gpt2__panel_min_rows, 5, 6, 9, 16, 70}) { // tiles of up to 6 or 8 tokens (gpt2__int8_tile_tokens): 9 as 5 + 4, 16 as 8 + 8 or 6 + 5 + 5
                    CAPTURE(std::string(k->name)); CAPTURE(std::string(gpt2__type_name(type))); CAPTURE(cols); CAPTURE(T);
                    std::vector<float> x = random_floats(rng, (size_t)(T * cols), 1.0f);
                    x[3] = 40.0f; // a block whose scale is set by one large value
                    std::vector<int8_t> xq((size_t)(T * cols));
                    std::vector<float> xs((size_t)(T * cols) / 32);
                    std::vector<uint8_t> packed((size_t)T * gpt2__q8_packed_row_bytes(cols));
                    gpt2__quantize_q8_scalar(xq.data(), xs.data(), x.data(), T * cols);
                    k->quantize_q8_packed(packed.data(), x.data(), T, cols);
                    for (bool accumulate : {false, true}) {
                        std::vector<float> start = random_floats(rng, (size_t)(T * rows), 1.0f);
                        std::vector<float> want = start, got = start, split = start;
                        std::vector<float> panel(gpt2__panel_floats(cols));
                        gpt2__matmul_args a{want.data(), x.data(), xq.data(), xs.data(), &m.w, bias.data(), T, accumulate, GPT2__STREAM_INT8};
                        gpt2__matmul_rows_scalar(a, 0, rows, panel.data());
                        gpt2__matmul_args p{got.data(), x.data(), nullptr, nullptr, &m.w, bias.data(), T, accumulate, GPT2__INT8_PANELS, packed.data()};
                        k->matmul[p.strategy](p, 0, rows, panel.data());
                        p.y = split.data();
                        k->matmul[p.strategy](p, 0, 13, panel.data());
                        k->matmul[p.strategy](p, 13, rows, panel.data());
                        CHECK(split == got);
                        float worst = 0;
                        for (size_t i = 0; i < want.size(); i++) worst = std::max(worst, std::fabs(want[i] - got[i]) / (1.0f + (float)cols * 0.05f)); // as above
                        CHECK(worst < 1e-5f);
                        tested++;
                    }
                }
            }
        }
    }
    MESSAGE(tested << " int8 panel products checked");
}

TEST_CASE("q8_0 and q4_0 lanes packed once give the int8 panels' results bit for bit, for any number of tokens and any row range") {
    std::mt19937 rng(97531);
    int tested = 0;
    for (const gpt2__kernels* k : simd_kernels()) {
        if (!k->pack_lanes) continue;
        for (uint32_t type : {GPT2_TYPE_Q8_0, GPT2_TYPE_Q4_0}) {
            for (int64_t cols : {32, 800}) {
                for (int64_t rows : {37, 16, 5}) { // groups of 16 with 5 rows left; exactly one group; a group of 5
                    Matrix m(rng, type, rows, cols);
                    std::vector<uint8_t> storage;
                    const gpt2__weight lane_weight = with_lanes(k, m, storage);
                    std::vector<float> bias = random_floats(rng, (size_t)rows, 1.0f);
                    for (int T : {1, 2, 5, 6, 8, 16, 70}) {
                        CAPTURE(std::string(k->name)); CAPTURE(std::string(gpt2__type_name(type))); CAPTURE(cols); CAPTURE(rows); CAPTURE(T);
                        std::vector<float> x = random_floats(rng, (size_t)(T * cols), 1.0f);
                        x[3] = 40.0f; // a block whose scale is set by one large value
                        std::vector<uint8_t> packed((size_t)T * gpt2__q8_packed_row_bytes(cols));
                        k->quantize_q8_packed(packed.data(), x.data(), T, cols);
                        std::vector<int8_t> xq((size_t)(T * cols));
                        std::vector<float> xs((size_t)(T * cols) / 32);
                        gpt2__quantize_q8_scalar(xq.data(), xs.data(), x.data(), T * cols);
                        std::vector<float> start = random_floats(rng, (size_t)(T * rows), 1.0f);
                        std::vector<float> panels = start, in_lanes = start, split = start, want = start, panel(gpt2__panel_floats(cols));
                        gpt2__matmul_args p{panels.data(), x.data(), nullptr, nullptr, &m.w, bias.data(), T, true, GPT2__INT8_PANELS, packed.data()};
                        k->matmul[p.strategy](p, 0, rows, panel.data());
                        p.W = &lane_weight;
                        p.y = in_lanes.data();
                        k->matmul[p.strategy](p, 0, rows, panel.data());
                        CHECK(in_lanes == panels);
                        p.y = split.data(); // ranges that start and end inside a group of 16
                        for (int64_t from = 0; from < rows; from += 13) k->matmul[p.strategy](p, from, std::min(rows, from + 13), panel.data());
                        CHECK(split == panels);
                        if (T == 1) { // a lone token: as the scalar set's row against the same quantized activations
                            gpt2__matmul_args a{want.data(), x.data(), xq.data(), xs.data(), &m.w, bias.data(), T, true, GPT2__STREAM_INT8};
                            gpt2__matmul_rows_scalar(a, 0, rows, panel.data());
                            float worst = 0;
                            for (size_t i = 0; i < want.size(); i++) worst = std::max(worst, std::fabs(want[i] - in_lanes[i]) / (1.0f + (float)cols * 0.05f));
                            CHECK(worst < 1e-5f);
                        }
                        tested++;
                    }
                }
            }
        }
    }
    MESSAGE(tested << " products on lanes checked");
}

// a's activations packed into `storage` where k's kernel for a.strategy reads them so (pack_tile_rows),
// as gpt2__matmul packs them; else (or without `pack`) a.x alone.
static void pack_tile_rows(const gpt2__kernels* k, gpt2__matmul_args& a, std::vector<float>& storage, bool pack = true) {
    storage.assign((size_t)a.T * a.W->cols, 0.0f);
    a.x_tiles = pack && k->pack_tile_rows && k->pack_tile_rows(storage.data(), a) ? storage.data() : nullptr;
}

TEST_CASE("f16 and bf16 lanes packed once give the scalar rows' results (a bf16 prompt on the bf16 unit: of the activations rounded to bf16), and each token the same bits whatever tokens and row range it comes with, a prompt's in its own tiles") {
    std::mt19937 rng(24680);
    int tested = 0;
    for (const gpt2__kernels* k : simd_kernels()) {
        if (!k->pack_lanes) continue;
        for (uint32_t type : {GPT2_TYPE_F16, GPT2_TYPE_BF16}) {
            // whether n tokens of a prompt (not a batch's decode rows) multiply on the bf16 unit
            const auto bf16_unit = [&](int n) { return k->matmul[GPT2__BF16_UNIT] && type == GPT2_TYPE_BF16 && !gpt2__is_decode(n); };
            // whether n tokens of a prompt multiply in the set's prompt tiles (one sum per output)
            const auto prompt_tiles = [&](int n) { return !bf16_unit(n) && !gpt2__is_decode(n) && k->matmul[GPT2__FLOAT16_PROMPT]; };
            const auto prompt_strategy = [&](int n) { return bf16_unit(n) ? GPT2__BF16_UNIT : prompt_tiles(n) ? GPT2__FLOAT16_PROMPT : GPT2__FLOAT16_LANES; };
            for (int64_t cols : {1, 2, 77, 800}) { // an odd column count ends on an unpaired column
                for (int64_t rows : {37, 16, 5}) {
                    Matrix m(rng, type, rows, cols);
                    std::vector<uint8_t> storage;
                    const gpt2__weight lane_weight = with_lanes(k, m, storage);
                    std::vector<float> bias = random_floats(rng, (size_t)rows, 1.0f);
                    const int T = 70;
                    const std::vector<float> x = random_floats(rng, (size_t)(T * cols), 1.0f);
                    for (bool accumulate : {false, true}) {
                        CAPTURE(std::string(k->name)); CAPTURE(gpt2__type_name(type)); CAPTURE(cols); CAPTURE(rows); CAPTURE(accumulate);
                        const std::vector<float> start = random_floats(rng, (size_t)(T * rows), 1.0f);
                        // all T tokens as a prompt, and as a batch's decode rows (on the FMAs, as a lone token)
                        std::vector<float> prompt = start, batch = start, panel(gpt2__panel_floats(cols)), tiles;
                        gpt2__matmul_args a{nullptr, x.data(), nullptr, nullptr, &lane_weight, bias.data(), T, accumulate};
                        for (bool decode_rows : {false, true}) {
                            const std::vector<float> x_scalar = bf16_unit(T) && !decode_rows ? rounded_to_bf16(x) : x;
                            std::vector<float> want = start;
                            gpt2__matmul_args s{want.data(), x_scalar.data(), nullptr, nullptr, &m.w, bias.data(), T, accumulate};
                            gpt2__matmul_rows_scalar(s, 0, rows, panel.data());
                            a.y = decode_rows ? batch.data() : prompt.data();
                            a.strategy = gpt2__strategy_for(k, lane_weight, T, decode_rows);
                            CHECK(a.strategy == (decode_rows ? GPT2__FLOAT16_LANES : prompt_strategy(T)));
                            pack_tile_rows(k, a, tiles);
                            k->matmul[a.strategy](a, 0, rows, panel.data());
                            float worst = 0;
                            for (size_t i = 0; i < want.size(); i++) worst = std::max(worst, std::fabs(want[i] - a.y[i]) / (1.0f + (float)cols * 0.05f));
                            CHECK(worst < 1e-5f);
                        }
                        if (prompt_strategy(T) == GPT2__FLOAT16_LANES) CHECK(prompt == batch);
                        // the first n tokens alone, as a prompt and as decode rows (more than 5 f16 ones go one
                        // group at a time, their activations packed, or two groups at a time for a caller that
                        // did not pack them; the AMX set's bf16 prompt of 32 in its 2 x 2 blocks of tiles), in
                        // ranges that start and end inside a group of 16
                        for (int n : {1, 2, 5, 6, 8, 9, 12, 13, 16, 17, 33})
                            for (int mode : {0, 1, 2}) { // a prompt; decode rows; decode rows not packed
                                const bool decode_rows = mode > 0;
                                CAPTURE(n); CAPTURE(mode);
                                std::vector<float> few(start.begin(), start.begin() + n * rows);
                                a.y = few.data();
                                a.T = n;
                                a.strategy = gpt2__strategy_for(k, lane_weight, n, decode_rows);
                                pack_tile_rows(k, a, tiles, mode != 2);
                                if (mode == 1 && k->pack_tile_rows && type == GPT2_TYPE_F16 && n > 5) CHECK(a.x_tiles); // the AVX-512 sets pack these
                                for (int64_t from = 0; from < rows; from += 13) k->matmul[a.strategy](a, from, std::min(rows, from + 13), panel.data());
                                const std::vector<float>& all = a.strategy != GPT2__FLOAT16_LANES ? prompt : batch;
                                CHECK(std::equal(few.begin(), few.end(), all.begin()));
                                tested++;
                            }
                        a.T = T;
                    }
                }
            }
        }
    }
    MESSAGE(tested << " f16 and bf16 products on lanes checked");
}

TEST_CASE("streamed q8_0 and q4_0 decode rows of a batch give each row's lone result bit for bit, however many rows") {
    std::mt19937 rng(2468);
    for (const gpt2__kernels* k : simd_kernels()) {
        for (uint32_t type : {GPT2_TYPE_Q8_0, GPT2_TYPE_Q4_0}) {
            for (int64_t cols : {96, 800}) { // 3 blocks (no group of 4); 25 (6 groups and one left)
                const int64_t rows = 37;
                Matrix m(rng, type, rows, cols);
                for (int T : {2, 25}) { // 25 rows: more than a kernel's scratch may prepare at once
                    CAPTURE(k->name); CAPTURE(gpt2__type_name(type)); CAPTURE(cols); CAPTURE(T);
                    std::vector<float> x = random_floats(rng, (size_t)(T * cols), 1.0f);
                    std::vector<int8_t> xq((size_t)(T * cols));
                    std::vector<float> xs((size_t)(T * cols) / 32);
                    gpt2__quantize_q8_scalar(xq.data(), xs.data(), x.data(), T * cols);
                    std::vector<float> together((size_t)(T * rows)), lone((size_t)(T * rows)), panel(gpt2__panel_floats(cols));
                    gpt2__matmul_args a{together.data(), x.data(), xq.data(), xs.data(), &m.w, nullptr, T, false, GPT2__STREAM_INT8};
                    k->matmul[a.strategy](a, 0, rows, panel.data());
                    for (int t = 0; t < T; t++) {
                        gpt2__matmul_args one{lone.data() + t * rows, x.data() + t * cols, xq.data() + t * cols, xs.data() + t * (cols / 32), &m.w, nullptr, 1, false, GPT2__STREAM_INT8};
                        k->matmul[one.strategy](one, 0, 13, panel.data());
                        k->matmul[one.strategy](one, 13, rows, panel.data());
                    }
                    CHECK(together == lone);
                }
            }
        }
    }
}

// Floats around every f16 value: each one, the midpoint to the next (a tie), and the floats
// either side of it; overflow, infinities, float subnormals and NaNs with payloads; both signs.
static std::vector<float> f16_rounding_cases() {
    std::vector<float> x;
    for (uint16_t h = 0; h < 0x7bff; h++) {
        const float v = gpt2__f16_to_f32(h), mid = (v + gpt2__f16_to_f32((uint16_t)(h + 1))) / 2;
        for (float f : {v, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)}) x.push_back(f);
    }
    for (float f : {65504.0f, 65519.99f, 65520.0f, 1e6f, INFINITY, 1e-40f, 0x1p-25f, std::nextafter(0x1p-25f, 1.0f)}) x.push_back(f);
    for (uint32_t bits : {0x7fc00000u, 0x7f800001u, 0x7fa5a5a5u, 0x7fffe000u}) {
        float nan;
        std::memcpy(&nan, &bits, 4);
        x.push_back(nan);
    }
    const size_t n = x.size();
    for (size_t i = 0; i < n; i++) x.push_back(-x[i]);
    return x;
}

TEST_CASE("f32 to f16 rounds to the nearest f16 (ties to even, past 65520 infinity), and every set's to_f16 gives the scalar bits") {
    const std::vector<float> x = f16_rounding_cases();
    std::vector<uint16_t> scalar(x.size());
    gpt2__kernels_scalar.to_f16(scalar.data(), x.data(), x.size());
    std::vector<double> finite(0x7c00); // the positive f16 values, in order of their bits
    for (size_t h = 0; h < finite.size(); h++) finite[h] = gpt2__f16_to_f32((uint16_t)h);
    int wrong = 0;
    for (size_t i = 0; i < x.size(); i++) {
        const float got = gpt2__f16_to_f32(scalar[i]);
        if (std::isnan(x[i])) {
            wrong += !std::isnan(got);
            continue;
        }
        // float64 reference: the nearest of the two f16 values around |x|, the even one on a tie
        const double a = std::fabs((double)x[i]);
        const uint16_t below = (uint16_t)(std::upper_bound(finite.begin(), finite.end(), a) - finite.begin() - 1);
        const double lo = finite[below], hi = below < 0x7bff ? finite[below + 1] : 65536.0; // 65536: past 65504 by one step, so 65520 ties
        const uint16_t nearest = a - lo < hi - a || (a - lo == hi - a && below % 2 == 0) ? below : (uint16_t)(below + 1);
        const uint16_t expected = (uint16_t)(nearest | (std::signbit(x[i]) ? 0x8000 : 0));
        if (scalar[i] != expected) wrong++;
    }
    CHECK(wrong == 0);
    for (const gpt2__kernels* k : simd_kernels()) {
        CAPTURE(k->name);
        for (size_t n : {x.size(), x.size() - 5}) { // a tail past the vectors' width
            std::vector<uint16_t> simd(n);
            k->to_f16(simd.data(), x.data(), n);
            CHECK(std::equal(simd.begin(), simd.end(), scalar.begin()));
        }
    }
}

TEST_CASE("f32 to bf16 rounds to the nearest bf16 (ties to even, past the largest infinity), NaN to NaN") {
    std::mt19937 rng(5);
    std::vector<float> x = f16_rounding_cases();
    for (int i = 0; i < 20000; i++) { // every exponent: random bit patterns
        const uint32_t bits = (uint32_t)rng();
        float v;
        std::memcpy(&v, &bits, 4);
        x.push_back(v);
    }
    for (uint32_t tie : {0x3f808000u, 0x3f818000u, 0x7f7f8000u, 0x7f7fffffu}) { // ties both ways; past the largest bf16
        float v;
        std::memcpy(&v, &tie, 4);
        x.push_back(v);
    }
    int wrong = 0;
    for (float v : x) {
        const uint16_t got = gpt2__f32_to_bf16(v);
        if (std::isnan(v)) {
            wrong += !std::isnan(gpt2__bf16_to_f32(got));
            continue;
        }
        // float64 reference: the nearer of the two bf16 values around v (truncated, and one step
        // up in magnitude), the even one on a tie; one step past the largest finite is infinity
        uint32_t bits;
        std::memcpy(&bits, &v, 4);
        const uint16_t down = (uint16_t)(bits >> 16), up = (uint16_t)(down + 1);
        const double a = std::fabs((double)v), lo = std::fabs((double)gpt2__bf16_to_f32(down));
        const double hi = (down & 0x7fff) == 0x7f7f ? std::ldexp(1.0, 128) : std::fabs((double)gpt2__bf16_to_f32(up));
        const uint16_t expected = (down & 0x7fff) == 0x7f80 ? down // infinity stays
                                  : a - lo < hi - a || (a - lo == hi - a && down % 2 == 0) ? down : up;
        if (got != expected) wrong++;
    }
    CHECK(wrong == 0);
}

TEST_CASE("SIMD activation quantization gives the scalar bytes and scales exactly") {
    std::mt19937 rng(7);
    for (const gpt2__kernels* k : simd_kernels()) {
        CAPTURE(k->name);
        std::vector<float> x = random_floats(rng, 32 * 13, 3.0f);
        for (int i = 0; i < 32; i++) x[32 * 5 + (size_t)i] = 0.0f; // an all-zero block
        std::vector<int8_t> q1(x.size()), q2(x.size());
        std::vector<float> s1(13), s2(13);
        gpt2__quantize_q8_scalar(q1.data(), s1.data(), x.data(), (int64_t)x.size());
        k->quantize_q8(q2.data(), s2.data(), x.data(), (int64_t)x.size());
        CHECK(q1 == q2);
        CHECK(s1 == s2);
    }
}

TEST_CASE("attention of one head for a block of queries: SIMD equals scalar for f32 and f16 caches") {
    std::mt19937 rng(99);
    for (const gpt2__kernels* k : simd_kernels()) {
        for (int head_dim : {64, 24, 40, 20, 100, 200}) { // 20, 100: dimensions past the vector width; 200: past those transposed at a time
            for (int n_keys : {1, 17, 100}) {
                for (int n_queries = 1; n_queries <= gpt2__query_block; n_queries++) {
                    CAPTURE(k->name); CAPTURE(head_dim); CAPTURE(n_keys); CAPTURE(n_queries);
                    const size_t stride = (size_t)head_dim * 3, keys = (size_t)(n_keys + n_queries - 1);
                    const size_t q_stride = (size_t)head_dim * 5, out_stride = (size_t)head_dim * 2;
                    std::vector<float> q = random_floats(rng, q_stride * n_queries, 2.0f);
                    std::vector<float> kc = random_floats(rng, stride * keys, 2.0f), vc = random_floats(rng, stride * keys, 2.0f);
                    std::vector<uint16_t> kh(kc.size()), vh(vc.size());
                    for (size_t i = 0; i < kc.size(); i++) { kh[i] = gpt2__f32_to_f16(kc[i]); vh[i] = gpt2__f32_to_f16(vc[i]); }
                    std::vector<float> want(out_stride * n_queries, -1.0f), got = want, scores(gpt2__query_scratch((int)keys));
                    gpt2__vector<const uint8_t*> tables[4];
                    const gpt2__kv_rows<float> kf = gpt2__kv_rows_contiguous(kc.data(), (int)keys, stride, &tables[0]), vf = gpt2__kv_rows_contiguous(vc.data(), (int)keys, stride, &tables[1]);
                    const gpt2__kv_rows<uint16_t> k16 = gpt2__kv_rows_contiguous(kh.data(), (int)keys, stride, &tables[2]), v16 = gpt2__kv_rows_contiguous(vh.data(), (int)keys, stride, &tables[3]);
                    gpt2__attend_scalar<float>(want.data(), out_stride, q.data(), q_stride, kf, vf, n_keys, n_queries, head_dim, scores.data());
                    k->attend_f32(got.data(), out_stride, q.data(), q_stride, kf, vf, n_keys, n_queries, head_dim, scores.data());
                    for (size_t i = 0; i < want.size(); i++) CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-5).scale(1.0)); // the gaps untouched
                    gpt2__attend_scalar<uint16_t>(want.data(), out_stride, q.data(), q_stride, k16, v16, n_keys, n_queries, head_dim, scores.data());
                    k->attend_f16(got.data(), out_stride, q.data(), q_stride, k16, v16, n_keys, n_queries, head_dim, scores.data());
                    for (size_t i = 0; i < want.size(); i++) CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-5).scale(1.0));
                }
            }
        }
    }
}

// Attention of one query in float64; the cache's rows hold n_head * head_dim values.
static std::vector<double> attention_f64(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v, int n_keys, int n_head, int head_dim) {
    const size_t row = (size_t)n_head * head_dim;
    std::vector<double> out(row, 0.0);
    for (int h = 0; h < n_head; h++) {
        const size_t at = (size_t)h * head_dim;
        std::vector<double> p((size_t)n_keys);
        double max_score = -INFINITY, sum = 0.0;
        for (int j = 0; j < n_keys; j++) {
            for (int d = 0; d < head_dim; d++) p[(size_t)j] += (double)q[at + d] * k[j * row + at + d];
            p[(size_t)j] /= std::sqrt((double)head_dim);
            max_score = std::max(max_score, p[(size_t)j]);
        }
        for (double& x : p) sum += x = std::exp(x - max_score);
        for (int j = 0; j < n_keys; j++)
            for (int d = 0; d < head_dim; d++) out[at + d] += p[(size_t)j] / sum * v[j * row + at + d];
    }
    return out;
}

TEST_CASE("attention of all heads: scalar within 1e-5 of float64, also merged from key ranges, and SIMD equals scalar for f32 and f16 caches") {
    std::mt19937 rng(99);
    for (int n_head : {1, 3, 12}) {
        for (int head_dim : {64, 24, 40, 20, 100}) { // 20 and 100: dimensions past the vector width
            for (int n_keys : {1, 17, 100}) {
                CAPTURE(n_head); CAPTURE(head_dim); CAPTURE(n_keys);
                const size_t row = (size_t)n_head * head_dim, part = row + 2 * (size_t)n_head;
                std::vector<float> q = random_floats(rng, row, 2.0f);
                std::vector<float> kc = random_floats(rng, row * n_keys, 2.0f), vc = random_floats(rng, row * n_keys, 2.0f);
                std::vector<uint16_t> kh(kc.size()), vh(vc.size());
                for (size_t i = 0; i < kc.size(); i++) { kh[i] = gpt2__f32_to_f16(kc[i]); vh[i] = gpt2__f32_to_f16(vc[i]); }
                std::vector<float> want(part), got(part), scratch(row / head_dim * n_keys); // what attend_rows may use: n_keys * n_head
                gpt2__vector<const uint8_t*> tables[4];
                const gpt2__kv_rows<float> kf = gpt2__kv_rows_contiguous(kc.data(), n_keys, row, &tables[0]), vf = gpt2__kv_rows_contiguous(vc.data(), n_keys, row, &tables[1]);
                const gpt2__kv_rows<uint16_t> k16 = gpt2__kv_rows_contiguous(kh.data(), n_keys, row, &tables[2]), v16 = gpt2__kv_rows_contiguous(vh.data(), n_keys, row, &tables[3]);
                const std::vector<double> exact = attention_f64(q, kc, vc, n_keys, n_head, head_dim);
                gpt2__attend_rows_scalar<float>(want.data(), want.data() + row, q.data(), kf, vf, 0, n_keys, n_head, head_dim, scratch.data());
                for (size_t i = 0; i < row; i++) CHECK(want[i] == doctest::Approx(exact[i]).epsilon(1e-5).scale(1.0));
                // the keys in three ranges, attended apart and merged
                const int cut[] = {0, n_keys / 3, 2 * n_keys / 3 + 1, n_keys};
                std::vector<float> parts, merged(row);
                for (int r = 0; r < 3; r++) {
                    if (cut[r + 1] <= cut[r]) continue;
                    parts.resize(parts.size() + part);
                    float* dst = parts.data() + parts.size() - part;
                    gpt2__attend_rows_scalar<float>(dst, dst + row, q.data(), kf, vf, cut[r], cut[r + 1] - cut[r], n_head, head_dim, scratch.data());
                }
                gpt2__merge_attention(merged.data(), parts.data(), (int)(parts.size() / part), n_head, head_dim);
                for (size_t i = 0; i < row; i++) CHECK(merged[i] == doctest::Approx(exact[i]).epsilon(1e-5).scale(1.0));
                for (const gpt2__kernels* k : simd_kernels()) {
                    CAPTURE(k->name);
                    k->attend_rows_f32(got.data(), got.data() + row, q.data(), kf, vf, 0, n_keys, n_head, head_dim, scratch.data());
                    for (size_t i = 0; i < part; i++) CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-5).scale(1.0)); // outputs and stats
                    std::vector<float> f16_want(part), f16_got(part);
                    gpt2__attend_rows_scalar<uint16_t>(f16_want.data(), f16_want.data() + row, q.data(), k16, v16, 0, n_keys, n_head, head_dim, scratch.data());
                    k->attend_rows_f16(f16_got.data(), f16_got.data() + row, q.data(), k16, v16, 0, n_keys, n_head, head_dim, scratch.data());
                    for (size_t i = 0; i < part; i++) CHECK(f16_got[i] == doctest::Approx(f16_want[i]).epsilon(1e-5).scale(1.0));
                }
            }
        }
    }
}

// The view of rows laid out one after another, copied into blocks of gpt2__kv_block_rows rows
// placed in reverse order in `storage` (as a KV cache's blocks lie anywhere in memory).
template <class KV>
static gpt2__kv_rows<KV> scattered_rows(const std::vector<KV>& rows, int n_rows, size_t stride, std::vector<KV>* storage, gpt2__vector<const uint8_t*>* table) {
    const size_t block = (size_t)gpt2__kv_block_rows * stride, n_blocks = gpt2__kv_blocks_for(n_rows);
    storage->assign(n_blocks * block, KV());
    table->clear();
    for (size_t b = 0; b < n_blocks; b++) {
        KV* to = storage->data() + (n_blocks - 1 - b) * block;
        std::copy(rows.begin() + (ptrdiff_t)(b * block), rows.begin() + (ptrdiff_t)std::min(rows.size(), (b + 1) * block), to);
        table->push_back((const uint8_t*)to);
    }
    return {table->data(), 0, stride};
}

TEST_CASE("attention reads the KV cache through its blocks: blocks anywhere in memory give the contiguous rows' results bit for bit") {
    std::mt19937 rng(17);
    std::vector<const gpt2__kernels*> sets = simd_kernels();
    sets.push_back(&gpt2__kernels_scalar);
    const int n_head = 3, head_dim = 40, n_keys = 2 * gpt2__kv_block_rows + 11; // 3 blocks, the last not full
    const size_t row = (size_t)n_head * head_dim, part = row + 2 * (size_t)n_head;
    std::vector<float> q = random_floats(rng, row * gpt2__query_block, 2.0f), kc = random_floats(rng, row * n_keys, 2.0f), vc = random_floats(rng, row * n_keys, 2.0f);
    std::vector<float> k_storage, v_storage;
    gpt2__vector<const uint8_t*> tables[4];
    const gpt2__kv_rows<float> contiguous_k = gpt2__kv_rows_contiguous(kc.data(), n_keys, row, &tables[0]), contiguous_v = gpt2__kv_rows_contiguous(vc.data(), n_keys, row, &tables[1]);
    const gpt2__kv_rows<float> blocks_k = scattered_rows(kc, n_keys, row, &k_storage, &tables[2]), blocks_v = scattered_rows(vc, n_keys, row, &v_storage, &tables[3]);
    REQUIRE(blocks_k.row(n_keys - 1) != contiguous_k.row(n_keys - 1));
    std::vector<float> scratch(gpt2__attention_scratch(n_head, n_keys));
    for (const gpt2__kernels* k : sets) {
        CAPTURE(k->name);
        for (int first : {0, gpt2__kv_row_group, gpt2__kv_block_rows - gpt2__kv_row_group}) { // decode: a range from `first` (a multiple of the group) to the end, across blocks
            CAPTURE(first);
            std::vector<float> want(part), got(part);
            k->attend_rows_f32(want.data(), want.data() + row, q.data(), contiguous_k, contiguous_v, first, n_keys - first, n_head, head_dim, scratch.data());
            k->attend_rows_f32(got.data(), got.data() + row, q.data(), blocks_k, blocks_v, first, n_keys - first, n_head, head_dim, scratch.data());
            CHECK(got == want);
        }
        for (int h = 0; h < n_head; h++) { // prefill: the last block of queries, one head
            std::vector<float> want(row * gpt2__query_block), got(want.size());
            const int keys = n_keys - gpt2__query_block + 1;
            const size_t at = (size_t)h * head_dim;
            k->attend_f32(want.data() + at, row, q.data() + at, row, contiguous_k.at(at), contiguous_v.at(at), keys, gpt2__query_block, head_dim, scratch.data());
            k->attend_f32(got.data() + at, row, q.data() + at, row, blocks_k.at(at), blocks_v.at(at), keys, gpt2__query_block, head_dim, scratch.data());
            CHECK(got == want);
        }
    }
}

TEST_CASE("GELU kernels match float64 GELU within 2e-7 relative to max(1, |x|), both forms") {
    std::vector<float> x;
    for (int i = -4000; i <= 4000; i++) x.push_back((float)i * 0.003f); // -12 .. 12
    std::mt19937 rng(5);
    for (float v : random_floats(rng, 1001, 30.0f)) x.push_back(v);
    std::vector<const gpt2__kernels*> sets = simd_kernels();
    sets.push_back(&gpt2__kernels_scalar);
    for (const gpt2__kernels* k : sets) {
        for (bool tanh_form : {false, true}) {
            CAPTURE(k->name); CAPTURE(tanh_form);
            std::vector<float> y = x;
            k->gelu(y.data(), y.size(), tanh_form);
            double worst = 0;
            for (size_t i = 0; i < x.size(); i++) {
                const double v = x[i];
                const double want = tanh_form ? 0.5 * v * (1.0 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)))
                                              : 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
                worst = std::max(worst, std::fabs(y[i] - want) / std::max(1.0, std::fabs(v)));
            }
            CHECK(worst < 2e-7);
        }
    }
}

#if defined(GPT2__X86) && defined(GPT2_AMX_MODEL)
// The C++ model of the AMX tiles (src/cpu/kernels/amx.h), by which the AMX set's kernels run here,
// against Intel's definitions written out apart: a load takes `rows` rows of `colsb` bytes from
// its stride and zeroes the rest of the tile; TDPBSUD adds signed bytes of A times unsigned bytes of
// B (B's row k: bytes 4k..4k+3 of each 4-byte column) into int32; TDPBF16PS adds each exact product
// of bf16 pairs in turn into fp32, subnormal inputs read as zero.
TEST_CASE("the AMX tile model loads, stores and multiplies as Intel's manual defines the instructions") {
    using M = gpt2__amx_model;
    std::mt19937 rng(77);
    std::uniform_int_distribution<int> byte(0, 255);
    for (int n : {16, 5, 1}) { // rows of A and C: a full tile and the last tokens'
        CAPTURE(n);
        const size_t lda = 80, ldb = 128; // strides past the rows' bytes
        std::vector<uint8_t> a(16 * lda), b(16 * ldb);
        for (uint8_t& v : a) v = (uint8_t)byte(rng);
        for (uint8_t& v : b) v = (uint8_t)byte(rng);
        M::configure(gpt2__amx_shapes(n, true, 0)); // A: n x 32 bytes, B: 8 x 64, C: n x 64
        M::zero<gpt2__tile_c>();
        M::load<gpt2__tile_a>(a.data(), lda);
        M::load<gpt2__tile_b>(b.data(), ldb);
        M::dpbsud<gpt2__tile_c, gpt2__tile_a, gpt2__tile_b>();
        M::dpbsud<gpt2__tile_c, gpt2__tile_a, gpt2__tile_b>(); // accumulates
        std::vector<int32_t> c(16 * 16, 12345);
        M::store<gpt2__tile_c>(c.data(), 64);
        for (int m = 0; m < 16; m++)
            for (int col = 0; col < 16; col++) {
                int64_t want = 0;
                for (int k = 0; k < 32; k++) want += 2 * (int64_t)(int8_t)a[(size_t)m * lda + k] * b[(size_t)(k / 4) * ldb + 4 * col + k % 4];
                CHECK(c[(size_t)m * 16 + col] == (m < n ? want : 12345)); // rows past n not stored
            }
        CHECK(M::state().tile[gpt2__tile_a][0][40] == 0); // past colsb: zero
        CHECK(M::state().tile[gpt2__tile_b][9][0] == 0);  // past rows: zero
        // bf16: A n x 64 bytes (16 pairs), B 16 rows; the last 3 pairs through the tail tiles
        M::configure(gpt2__amx_shapes(n, false, 3));
        std::vector<uint16_t> x(16 * 40), w(19 * 64); // 19 rows of B: 16 pairs, then 3
        std::uniform_real_distribution<float> u(-2, 2);
        for (uint16_t& v : x) v = gpt2__f32_to_bf16(u(rng));
        for (uint16_t& v : w) v = gpt2__f32_to_bf16(u(rng));
        x[0] = 0x0001; // a subnormal input reads as zero
        M::zero<gpt2__tile_c>();
        M::load<gpt2__tile_a>(x.data(), 80);
        M::load<gpt2__tile_b>(w.data(), 128);
        M::dpbf16ps<gpt2__tile_c, gpt2__tile_a, gpt2__tile_b>();
        M::load<gpt2__tile_a_last>(x.data() + 32, 80);
        M::load<gpt2__tile_b_last>(w.data() + 16 * 64, 128);
        M::dpbf16ps<gpt2__tile_c, gpt2__tile_a_last, gpt2__tile_b_last>();
        std::vector<float> cf(16 * 16, -1.0f);
        M::store<gpt2__tile_c>(cf.data(), 64);
        for (int m = 0; m < n; m++)
            for (int col = 0; col < 16; col++) {
                float want = 0;
                for (int pair = 0; pair < 19; pair++) // 16 from the full tiles, then 3 from the tail's
                    for (int i = 0; i < 2; i++) {
                        const uint16_t xv = x[(size_t)m * 40 + 2 * pair + i], wv = w[(size_t)pair * 64 + 2 * col + i];
                        want += (xv == 0x0001 ? 0.0f : gpt2__bf16_to_f32(xv)) * gpt2__bf16_to_f32(wv);
                    }
                CHECK(cf[(size_t)m * 16 + col] == want);
            }
        M::release();
    }
}
#endif

TEST_CASE("layer norm kernels match float64 LayerNorm within 1e-6, and every set the scalar set's values, with and without a bias") {
    std::mt19937 rng(21);
    std::vector<const gpt2__kernels*> sets = simd_kernels();
    sets.push_back(&gpt2__kernels_scalar);
    for (int n : {768, 1, 7, 9, 100, 1600}) { // lengths past a multiple of 8 take the tail
        const std::vector<float> weight = random_floats(rng, (size_t)n, 2.0f), bias = random_floats(rng, (size_t)n, 1.0f);
        std::vector<float> x = random_floats(rng, (size_t)n, 3.0f);
        for (float& v : x) v += 5.0f; // a mean far from 0, as the residual stream has
        double mean = 0, var = 0;
        for (float v : x) mean += v;
        mean /= n;
        for (float v : x) var += (v - mean) * (v - mean);
        var /= n;
        for (bool with_bias : {true, false}) {
            std::vector<float> want((size_t)n);
            gpt2__layer_norm(want.data(), x.data(), weight.data(), with_bias ? bias.data() : nullptr, n, 1e-5f);
            for (const gpt2__kernels* k : sets) {
                CAPTURE(k->name); CAPTURE(n); CAPTURE(with_bias);
                std::vector<float> got((size_t)n, -1.0f);
                k->layer_norm(got.data(), x.data(), weight.data(), with_bias ? bias.data() : nullptr, n, 1e-5f);
                for (int i = 0; i < n; i++) {
                    const double exact = (x[(size_t)i] - mean) / std::sqrt(var + 1e-5) * weight[(size_t)i] + (with_bias ? bias[(size_t)i] : 0.0);
                    CHECK(std::fabs(got[(size_t)i] - exact) <= 1e-6 * std::max(1.0, std::fabs(exact)));
                    CHECK(got[(size_t)i] == doctest::Approx(want[(size_t)i]).epsilon(1e-6).scale(1.0)); // the same arithmetic: the scalar bits, but for contractions a build may make
                }
            }
        }
    }
}

// ggml's q4_0 rules (quantize_row_q4_0_ref), checked on the blocks gpt2-quantize writes: d = m / -8
// for m the value of largest magnitude, in f16; byte j holds value j in its low nibble, j + 16 in
// its high one; m is nibble 0; every other value is the nearest of d * (nibble - 8) for nibbles
// 0..15 (within float rounding), and dequantize_row gives d * (nibble - 8).
TEST_CASE("q4_0 blocks follow ggml's layout and rounding: the largest value is nibble 0, the others their nearest level") {
    std::mt19937 rng(11);
    const int64_t n = 32 * 40;
    std::vector<float> x = random_floats(rng, (size_t)n, 2.0f);
    for (int i = 0; i < 32; i++) x[32 * 3 + (size_t)i] = 0.0f; // an all-zero block
    x[32 * 4 + 7] = 5.0f;                                        // a positive largest value: d < 0
    std::vector<uint8_t> q((size_t)(n / 32 * gpt2__q4_block_bytes));
    gguf_quantize_row(GPT2_TYPE_Q4_0, x.data(), q.data(), n);
    std::vector<float> back((size_t)n);
    gpt2__dequantize_row(GPT2_TYPE_Q4_0, q.data(), back.data(), n);
    for (int64_t b = 0; b < n / 32; b++) {
        CAPTURE(b);
        const float* xb = x.data() + 32 * b;
        const uint8_t* block = q.data() + gpt2__q4_block_bytes * b;
        int largest = 0;
        for (int i = 1; i < 32; i++)
            if (std::fabs(xb[i]) > std::fabs(xb[largest])) largest = i;
        const float d = gpt2__f16_to_f32(gpt2__q8_scale_f16(block));
        CHECK(d == gpt2__f16_to_f32(gpt2__f32_to_f16(xb[largest] / -8.0f)));
        for (int i = 0; i < 32; i++) {
            const int nibble = i < 16 ? block[2 + i] & 15 : block[2 + i - 16] >> 4;
            CHECK(back[32 * b + i] == d * (float)(nibble - 8));
            if (d == 0.0f) continue;
            if (i == largest) CHECK(nibble == 0);
            // the nearest level to x / d_exact (d before its f16 rounding), up to the rounding of x / d
            const double t = (double)xb[i] / ((double)xb[largest] / -8.0) + 8.0;
            CHECK(std::fabs(t - (double)nibble) <= 0.5 + 1e-5 + (t > 15.5 ? t - 15.5 : 0.0));
        }
    }
}

TEST_CASE("q4_0 and q8_0 integer dot products (scalar set) equal the float64 sums of the dequantized blocks") {
    std::mt19937 rng(3);
    for (uint32_t type : {(uint32_t)GPT2_TYPE_Q4_0, (uint32_t)GPT2_TYPE_Q8_0}) {
        for (int64_t cols : {32, 96, 800}) {
            CAPTURE(gpt2__type_name(type)); CAPTURE(cols);
            Matrix m(rng, type, 1, cols);
            std::vector<float> x = random_floats(rng, (size_t)cols, 3.0f), w((size_t)cols), xs((size_t)cols / 32);
            std::vector<int8_t> xq((size_t)cols);
            gpt2__quantize_q8_scalar(xq.data(), xs.data(), x.data(), cols);
            gpt2__dequantize_row(type, m.w.data, w.data(), cols);
            double want = 0, magnitude = 0;
            for (int64_t i = 0; i < cols; i++) {
                want += (double)w[i] * xq[i] * xs[i / 32];
                magnitude += std::fabs((double)w[i] * xq[i] * xs[i / 32]);
            }
            const float got = type == GPT2_TYPE_Q4_0 ? gpt2__dot_q4_scalar(m.w.data, xq.data(), xs.data(), cols) : gpt2__dot_q8_scalar(m.w.data, xq.data(), xs.data(), cols);
            CHECK(std::fabs(got - want) <= 1e-6 * magnitude);
        }
    }
}

#if defined(GPT2__X86)
// A few prefetch choices follow the CPU's vendor (gpt2__intel_cpu): cpuid must name it as the OS does.
TEST_CASE("x86: the CPU's vendor from cpuid is the one /proc/cpuinfo names") {
    std::FILE* f = std::fopen("/proc/cpuinfo", "r");
    if (!f) {
        MESSAGE("no /proc/cpuinfo here: nothing to compare the vendor with");
        return;
    }
    std::string vendor;
    char line[512];
    while (vendor.empty() && std::fgets(line, sizeof line, f))
        if (std::strncmp(line, "vendor_id", 9) == 0) vendor = std::string(std::strchr(line, ':') + 2).substr(0, 12);
    std::fclose(f);
    CAPTURE(vendor);
    REQUIRE(!vendor.empty());
    CHECK(gpt2__intel_cpu() == (vendor == "GenuineIntel"));
}

// Float decode rows prefetch as far ahead as gpt2__float_rows_ahead says for the CPU and the row's
// length; every distance runs here, wherever the tests do, and must give the same bits.
TEST_CASE("x86: float decode rows give the same bits with their prefetches ahead and without") {
    if (!gpt2__kernels_by_name("avx2")) return;
    std::mt19937 rng(77);
    for (uint32_t type : {GPT2_TYPE_F32, GPT2_TYPE_F16, GPT2_TYPE_BF16})
        for (int64_t cols : {7, 77, 768, 801, 5120}) {
            CAPTURE(gpt2__type_name(type)); CAPTURE(cols);
            Matrix m(rng, type, 3, cols);
            const std::vector<float> x = random_floats(rng, (size_t)cols, 1.0f);
            for (int64_t r = 0; r < 3; r++) {
                const uint8_t* row = m.w.data + (size_t)r * m.w.row_bytes;
                const float plain = gpt2__dot_row_avx2<0>(type, row, x.data(), cols);
                CHECK(gpt2__dot_row_avx2<gpt2__decode_ahead_bytes>(type, row, x.data(), cols) == plain);
                CHECK(gpt2__dot_row_avx2<gpt2__wide_rows_ahead_bytes>(type, row, x.data(), cols) == plain);
            }
        }
}

// Long float decode rows go gpt2__rows_together at a time on AMD (gpt2__rows_go_together): each
// row's dot product must be the bits it has alone, whatever rows it goes with, and a matrix
// product taken through either path must store the same outputs.
template <uint32_t TYPE>
static void check_rows_together(std::mt19937& rng) {
    constexpr int R = gpt2__rows_together(TYPE), AHEAD = gpt2__long_rows_ahead(TYPE);
    for (int64_t cols : {7, 40, 801, 5120, 6421}) {
        CAPTURE(cols);
        Matrix m(rng, TYPE, 2 * R + 1, cols);
        const std::vector<float> x = random_floats(rng, (size_t)cols, 1.0f);
        std::vector<float> alone(2 * R + 1);
        for (int64_t r = 0; r < 2 * R + 1; r++) alone[(size_t)r] = gpt2__row_avx2<TYPE, AHEAD>(m.w.data + (size_t)r * m.w.row_bytes, x.data(), cols);
        for (int64_t first = 0; first + R <= 2 * R + 1; first++) {
            const uint8_t* rows[R];
            for (int r = 0; r < R; r++) rows[r] = m.w.data + (size_t)(first + r) * m.w.row_bytes;
            float dots[R];
            gpt2__rows_avx2<TYPE, R, AHEAD>(rows, x.data(), cols, dots);
            for (int r = 0; r < R; r++) CHECK(dots[r] == alone[(size_t)(first + r)]);
        }
        const std::vector<float> bias = random_floats(rng, 2 * R + 1, 1.0f);
        for (int64_t begin : {0, 1, 2}) { // row ranges of every length modulo R
            std::vector<float> together(2 * R + 1, 0.5f), streamed(2 * R + 1, 0.5f);
            gpt2__matmul_args a{};
            a.W = &m.w;
            a.x = x.data();
            a.bias = bias.data();
            a.T = 1;
            a.accumulate = true;
            a.y = together.data();
            gpt2__matmul_rows_together_avx2<TYPE>(a, begin, 2 * R + 1);
            a.y = streamed.data();
            gpt2__matmul_streamed_x86<AHEAD>(a, begin, 2 * R + 1);
            CHECK(together == streamed);
        }
    }
}
TEST_CASE("x86: float decode rows give the same bits together and alone") {
    if (!gpt2__kernels_by_name("avx2")) return;
    std::mt19937 rng(78);
    SUBCASE("f32") { check_rows_together<GPT2_TYPE_F32>(rng); }
    SUBCASE("f16") { check_rows_together<GPT2_TYPE_F16>(rng); }
    SUBCASE("bf16") { check_rows_together<GPT2_TYPE_BF16>(rng); }
}
#endif

// The threads of a product share its rows through gpt2__parallel_for: each thread's region of
// chunks in order, the last chunks of a region taken by the others when its thread falls behind.
TEST_CASE("gpt2__parallel_for runs every index once, in chunks on multiples of align, and the other threads take a stalled thread's chunks") {
    for (int threads : {1, 2, 3, 5}) {
        gpt2__pool pool;
        REQUIRE(gpt2__pool_start(&pool, threads));
        for (int64_t n : {0, 1, 7, 16, 100, 769, 50257})
            for (int64_t align : {1, 16, 32}) {
                CAPTURE(threads); CAPTURE(n); CAPTURE(align);
                std::unique_ptr<std::atomic<int>[]> runs(new std::atomic<int>[(size_t)n + 1]());
                std::atomic<int> bad_ranges{0};
                gpt2__parallel_for(&pool, n, align, [&](int64_t begin, int64_t end, int thread) {
                    if (begin % align != 0 || begin >= end || end > n || thread < 0 || thread >= threads) bad_ranges++;
                    for (int64_t i = begin; i < end; i++) runs[(size_t)i]++;
                });
                CHECK(bad_ranges.load() == 0);
                int64_t not_once = 0;
                for (int64_t i = 0; i < n; i++) not_once += runs[(size_t)i] != 1;
                CHECK(not_once == 0);
            }
        if (threads > 1) { // the last worker sleeps in its first chunk: the others run the rest of its region
            const int64_t n = 64;
            std::unique_ptr<std::atomic<int>[]> by_thread(new std::atomic<int>[(size_t)n]());
            std::atomic<int> stalled_chunks{0};
            gpt2__parallel_for(&pool, n, 1, [&](int64_t begin, int64_t end, int thread) {
                if (thread == threads - 1 && stalled_chunks++ == 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
                for (int64_t i = begin; i < end; i++) by_thread[(size_t)i] = thread + 1;
            });
            CAPTURE(threads);
            CHECK(stalled_chunks.load() <= 1);
            int64_t not_run = 0;
            for (int64_t i = 0; i < n; i++) not_run += by_thread[(size_t)i] == 0;
            CHECK(not_run == 0);
        }
        gpt2__pool_stop(&pool);
    }
}
