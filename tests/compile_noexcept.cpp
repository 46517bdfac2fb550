// The implementation must compile with exceptions and RTTI disabled (as many game engines build).
#define GPT2_IMPLEMENTATION
#define GPT2_STATIC
#include "gpt2.h"

int gpt2_noexcept_check() { return gpt2_model_default_params().no_mmap; }
