// libFuzzer target: the GGUF loader on arbitrary bytes. Whatever the input, loading must return
// a result (no crash, no out-of-bounds read, no leak); when it loads, a 2-token evaluation and a
// 2-token generation must work too. Built and run by tests/fuzz/run_fuzz.sh.
#define GPT2_IMPLEMENTATION
#include "gpt2.h"

#include <cstring>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    // An exactly-sized heap copy, so a read past the end is caught whether or not the loader
    // copies (it copies buffers that are not 64-byte aligned).
    std::vector<uint8_t> bytes(data, data + size);
    gpt2_model* model = nullptr;
    gpt2_error err;
    if (gpt2_model_load_memory(bytes.data(), bytes.size(), nullptr, &model, &err) != GPT2_OK) {
        if (err.message[0] == '\0' || std::strlen(err.message) >= sizeof err.message) __builtin_trap(); // every failure explains itself
        return 0;
    }
    const gpt2_model_info info = gpt2_model_get_info(model);
    // Fuzzed hyper-parameters can describe a huge model backed by a small file only when its
    // tensors exist, so sessions are bounded by the input's size; still, keep each run quick.
    if ((double)info.n_ctx * info.n_embd * info.n_layer < 4e6) {
        gpt2_session_params sp = gpt2_session_default_params();
        sp.n_threads = 1;
        gpt2_session* session = nullptr;
        if (gpt2_session_create(model, &sp, &session, &err) == GPT2_OK) {
            const int32_t ids[2] = {0, info.n_vocab > 1 ? 1 : 0};
            gpt2_session_eval(session, ids, 2, &err);
            gpt2_generate_params gp = gpt2_generate_default_params();
            gp.max_new_tokens = 2;
            gpt2_generate(session, nullptr, 0, &gp, nullptr, 0, nullptr, &err);
            gpt2_session_free(session);
        }
    }
    gpt2_model_free(model);
    return 0;
}
