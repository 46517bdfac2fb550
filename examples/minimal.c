/* minimal.c - minimal.cpp in C: the public API of gpt2.h is plain C99.
   The implementation is C++17, compiled once in gpt2_impl.cpp and linked in.
       minimal-c [MODEL.gguf]        (default: the model the repo ships) */
#include "gpt2.h"

#include "default_model.h"
#include <stdio.h>

static int print_token(void* user, int32_t token, const char* text, size_t len) {
    (void)user;
    (void)token;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    return 0; /* nonzero stops generation */
}

int main(int argc, char** argv) {
    const char* path = example_model_path(argc, argv);
    gpt2_error err;
    gpt2_model* model = NULL;
    gpt2_session* session = NULL;
    gpt2_generate_params params;
    gpt2_result result;
    const char* prompt = "ROMEO:";

    if (!path) {
        fprintf(stderr, "usage: minimal-c MODEL.gguf\n");
        return 1;
    }
    if (gpt2_model_load_file(path, NULL, &model, &err) != GPT2_OK) {
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }
    if (gpt2_session_create(model, NULL, &session, &err) != GPT2_OK) {
        fprintf(stderr, "%s\n", err.message);
        gpt2_model_free(model);
        return 1;
    }
    params = gpt2_generate_default_params();
    params.max_new_tokens = 200;
    params.on_token = print_token;

    printf("%s", prompt);
    result = gpt2_generate_text(session, prompt, &params, &err);
    printf("\n");
    if (result != GPT2_OK) fprintf(stderr, "%s\n", err.message);

    gpt2_session_free(session);
    gpt2_model_free(model);
    return result == GPT2_OK ? 0 : 1;
}
