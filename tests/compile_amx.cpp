// The AMX set's tiles on the instructions (GPT2_AMX, off by default: untested on hardware, amx.h)
// must compile and assemble, though no machine that builds here runs them.
#define GPT2_IMPLEMENTATION
#define GPT2_STATIC
#define GPT2_AMX
#include "gpt2.h"

int gpt2_amx_check() { return gpt2__kernels_by_name("amx") != nullptr; }
