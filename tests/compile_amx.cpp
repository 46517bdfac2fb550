// The AMX set's tiles on the instructions (GPT2_AMX, off by default, amx.h) must compile and
// assemble on every build, though most machines that build here cannot run them (a build with
// GPT2_AMX on the command line runs them in the tests where the CPU has AMX).
#define GPT2_IMPLEMENTATION
#define GPT2_STATIC
#ifndef GPT2_AMX
#define GPT2_AMX
#endif
#include "gpt2.h"

int gpt2_amx_check() { return gpt2__kernels_by_name("amx") != nullptr; }
