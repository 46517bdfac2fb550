// libFuzzer target: gpt2_session_load on arbitrary bytes, into a session of a tiny model. Whatever
// the input, loading returns a result with a message; a refused state leaves the session as it
// was; an accepted one evaluates, generates and saves again (into the same bytes, when the input
// used the session's cache type). Built and run by tests/fuzz/run_fuzz.sh.
//
// Random bytes rarely pass the checksums, so the first input byte picks a mode: odd, the target
// writes both checksums into the rest of the input before loading it, and the fuzzer reaches the
// checks behind them (sizes, model, context, token ids). GPT2_FUZZ_WRITE_SEEDS=DIR writes valid
// states of the tiny model (with both modes' first byte) into DIR and exits: run_fuzz.sh's seeds.
#define GPT2_IMPLEMENTATION
#define GPT2_STATIC
#include "gpt2.h"
#include "gguf_builder.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

struct Fixture {
    std::vector<uint8_t> file = tiny_model().build();
    gpt2_model* model = nullptr;
    gpt2_session* session = nullptr;
    Fixture() {
        if (gpt2_model_load_memory(file.data(), file.size(), nullptr, &model, nullptr) != GPT2_OK) std::abort();
        gpt2_session_params sp = gpt2_session_default_params();
        sp.n_threads = 1;
        sp.n_ctx = 12; // smaller than the model's 16: a state of 13 to 16 tokens is refused
        if (gpt2_session_create(model, &sp, &session, nullptr) != GPT2_OK) std::abort();
    }
};

static Fixture& fixture() {
    static Fixture f;
    return f;
}

static std::vector<uint8_t> save(gpt2_session* s) {
    size_t n = 0;
    if (gpt2_session_save(s, nullptr, 0, &n, nullptr) != GPT2_OK) std::abort();
    std::vector<uint8_t> bytes(n);
    if (gpt2_session_save(s, bytes.data(), n, &n, nullptr) != GPT2_OK) std::abort();
    return bytes;
}

static void write_seeds(const char* dir) {
    gpt2_session* s = fixture().session;
    const int32_t ids[] = {1, 2, 3, 4, 5, 6};
    for (int n_tokens : {0, 1, 6}) {
        gpt2_session_reset(s);
        if (n_tokens && gpt2_session_eval(s, ids, (size_t)n_tokens, nullptr) != GPT2_OK) std::abort();
        const std::vector<uint8_t> state = save(s);
        for (uint8_t mode : {0, 1}) {
            const std::string path = std::string(dir) + "/state_" + std::to_string(n_tokens) + "_" + std::to_string(mode);
            FILE* f = std::fopen(path.c_str(), "wb");
            if (!f) std::abort();
            std::fwrite(&mode, 1, 1, f);
            std::fwrite(state.data(), 1, state.size(), f);
            std::fclose(f);
        }
    }
}

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    if (const char* dir = std::getenv("GPT2_FUZZ_WRITE_SEEDS")) {
        write_seeds(dir);
        std::exit(0);
    }
    return 0;
}

// Writes the header checksum (over the header's first 68 bytes, at 68) and the final one.
static void fix_checksums(std::vector<uint8_t>& b) {
    if (b.size() >= 76) {
        const uint64_t h = gpt2__hash64(b.data(), 68);
        std::memcpy(b.data() + 68, &h, 8);
    }
    if (b.size() >= 84) {
        const uint64_t h = gpt2__hash64(b.data(), b.size() - 8);
        std::memcpy(b.data() + b.size() - 8, &h, 8);
    }
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    Fixture& fx = fixture();
    std::vector<uint8_t> bytes(data + 1, data + size); // exactly sized: a read past the end is caught
    if (data[0] & 1) fix_checksums(bytes);
    const int32_t start[] = {7, 8};
    gpt2_session_reset(fx.session);
    if (gpt2_session_eval(fx.session, start, 2, nullptr) != GPT2_OK) std::abort();
    const std::vector<uint8_t> before = save(fx.session);
    gpt2_error err;
    if (gpt2_session_load(fx.session, bytes.data(), bytes.size(), &err) != GPT2_OK) {
        if (err.message[0] == '\0') std::abort();    // every refusal explains itself
        if (save(fx.session) != before) std::abort(); // and changes nothing
        return 0;
    }
    const bool same_type = bytes.size() > 40 && bytes[36] == 0; // cache type 0: f32, the session's
    if (same_type && save(fx.session) != bytes) std::abort();
    const int32_t next = 3;
    if (gpt2_session_eval(fx.session, &next, 1, &err) != GPT2_OK) std::abort();
    gpt2_generate_params gp = gpt2_generate_default_params();
    gp.max_new_tokens = 2;
    if (gpt2_generate(fx.session, nullptr, 0, &gp, nullptr, 0, nullptr, &err) != GPT2_OK) std::abort();
    return 0;
}
