/* abi_check.c - what a binding does first against the shared library: gpt2_check_abi accepts this
   header's version and struct sizes, and refuses another version or a struct of another size with
   a message naming it, before anything could be corrupted. C99, linked with libgpt2 only. */
#include "gpt2.h"

#include <stdio.h>
#include <string.h>

static int failures = 0;

static void expect_refused(const char* what, gpt2_result result, const gpt2_error* err, const char* named) {
    if (result != GPT2_ERROR_UNSUPPORTED || err->code != GPT2_ERROR_UNSUPPORTED || !strstr(err->message, named)) {
        printf("FAIL %s: result %d, message \"%s\" (expected unsupported, naming %s)\n", what, (int)result, err->message, named);
        failures++;
    } else {
        printf("ok   %s: %s\n", what, err->message);
    }
}

int main(void) {
    gpt2_error err;
    gpt2_result result;
    const size_t mp = sizeof(gpt2_model_params), sp = sizeof(gpt2_session_params);
    const size_t gp = sizeof(gpt2_generate_params), mi = sizeof(gpt2_model_info);

    if (gpt2_version() != GPT2_VERSION) {
        printf("FAIL gpt2_version() is %d, the header says %d\n", gpt2_version(), GPT2_VERSION);
        failures++;
    }
    printf("library version %s (%d)\n", gpt2_version_string(), gpt2_version());

    result = GPT2_CHECK_ABI(&err);
    if (result != GPT2_OK || err.code != GPT2_OK || err.message[0] != 0) {
        printf("FAIL this header's sizes: result %d, \"%s\"\n", (int)result, err.message);
        failures++;
    } else {
        printf("ok   this header's version and sizes are accepted\n");
    }
    if (GPT2_CHECK_ABI(NULL) != GPT2_OK) {
        printf("FAIL GPT2_CHECK_ABI(NULL) refused\n");
        failures++;
    }

    result = gpt2_check_abi(GPT2_VERSION, mp + 8, sp, gp, mi, &err);
    expect_refused("model params 8 bytes larger", result, &err, "gpt2_model_params");
    result = gpt2_check_abi(GPT2_VERSION, mp, sp - 4, gp, mi, &err);
    expect_refused("session params 4 bytes smaller", result, &err, "gpt2_session_params");
    result = gpt2_check_abi(GPT2_VERSION, mp, sp, gp - 16, mi, &err); /* a binding from before the stop strings */
    expect_refused("generate params 16 bytes smaller", result, &err, "gpt2_generate_params");
    result = gpt2_check_abi(GPT2_VERSION, mp, sp, gp, mi + 8, &err);
    expect_refused("model info 8 bytes larger", result, &err, "gpt2_model_info");
    result = gpt2_check_abi(GPT2_VERSION + 10000, mp, sp, gp, mi, &err);
    expect_refused("next major version", result, &err, gpt2_version_string());
    if (GPT2_VERSION_MAJOR == 0) {
        result = gpt2_check_abi(GPT2_VERSION + 100, mp, sp, gp, mi, &err);
        expect_refused("next minor version before 1.0", result, &err, gpt2_version_string());
    }
    result = gpt2_check_abi(GPT2_VERSION - GPT2_VERSION_PATCH + 99, mp, sp, gp, mi, &err);
    if (result != GPT2_OK) {
        printf("FAIL another patch version refused: %s\n", err.message);
        failures++;
    } else {
        printf("ok   another patch version is accepted\n");
    }

    printf("%s\n", failures ? "FAILED" : "passed");
    return failures ? 1 : 0;
}
