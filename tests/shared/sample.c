/* sample.c - the C twin of bindings/csharp/Samples~/Console/Sample.cs, through the shared library: the same calls
   (the ABI check, load, session, generate_text with seed 7) print the same text.
       sample MODEL.gguf [N_TOKENS [SEED]]        (defaults: 100 tokens, seed 7) */
#include "gpt2.h"

#include <stdio.h>
#include <stdlib.h>

static int print_token(void* user, int32_t token, const char* text, size_t len) {
    (void)user;
    (void)token;
    fwrite(text, 1, len, stdout);
    return 0;
}

int main(int argc, char** argv) {
    gpt2_error err;
    gpt2_model* model = NULL;
    gpt2_session* session = NULL;
    gpt2_generate_params params;
    gpt2_result result;
    const char* prompt = "ROMEO:";

    if (argc < 2) {
        fprintf(stderr, "usage: sample MODEL.gguf [N_TOKENS [SEED]]\n");
        return 2;
    }
    if (GPT2_CHECK_ABI(&err) != GPT2_OK || gpt2_model_load_file(argv[1], NULL, &model, &err) != GPT2_OK ||
        gpt2_session_create(model, NULL, &session, &err) != GPT2_OK) {
        fprintf(stderr, "%s\n", err.message);
        gpt2_model_free(model);
        return 1;
    }
    params = gpt2_generate_default_params();
    params.max_new_tokens = argc > 2 ? atoi(argv[2]) : 100;
    params.seed = argc > 3 ? strtoull(argv[3], NULL, 10) : 7;
    params.on_token = print_token;

    printf("%s", prompt);
    result = gpt2_generate_text(session, prompt, &params, &err);
    printf("\n");
    if (result != GPT2_OK) fprintf(stderr, "%s\n", err.message);
    gpt2_session_free(session);
    gpt2_model_free(model);
    return result == GPT2_OK ? 0 : 1;
}
