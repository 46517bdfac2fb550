/* The public API must compile as strict C99 (no implementation here). */
#include "gpt2.h"

int gpt2_c99_check(void) {
    gpt2_generate_params params = gpt2_generate_default_params();
    return params.top_k;
}
