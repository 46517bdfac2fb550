// minimal.cpp - load a model, generate 200 tokens after a prompt, print them as they come.
//     minimal [MODEL.gguf]        (default: the model the repo ships)
#define GPT2_IMPLEMENTATION // in exactly one .cpp file of your program
#include "gpt2.h"

#include "default_model.h"
#include <cstdio>

// Called with each new token's text; return nonzero to stop early.
static int print_token(void*, int32_t, const char* text, size_t len) {
    std::fwrite(text, 1, len, stdout);
    std::fflush(stdout);
    return 0;
}

int main(int argc, char** argv) {
    const char* path = example_model_path(argc, argv);
    if (!path) {
        std::fprintf(stderr, "usage: minimal MODEL.gguf\n");
        return 1;
    }
    gpt2_error err;
    gpt2_model* model = nullptr;
    if (gpt2_model_load_file(path, nullptr, &model, &err) != GPT2_OK) {
        std::fprintf(stderr, "%s\n", err.message); // names the file and what is wrong with it
        return 1;
    }
    gpt2_session* session = nullptr;
    if (gpt2_session_create(model, nullptr, &session, &err) != GPT2_OK) {
        std::fprintf(stderr, "%s\n", err.message);
        gpt2_model_free(model);
        return 1;
    }
    gpt2_generate_params params = gpt2_generate_default_params(); // temperature 0.8, top-k 200
    params.max_new_tokens = 200;
    params.on_token = print_token;

    const char* prompt = "ROMEO:";
    std::printf("%s", prompt);
    gpt2_result result = gpt2_generate_text(session, prompt, &params, &err);
    std::printf("\n");
    if (result != GPT2_OK) std::fprintf(stderr, "%s\n", err.message);

    gpt2_session_free(session); // sessions first, then their model
    gpt2_model_free(model);
    return result == GPT2_OK ? 0 : 1;
}
