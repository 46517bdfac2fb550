// The one C++ translation unit that compiles gpt2.h's implementation, for programs written in C
// (examples/minimal.c). Link it with your C objects; link with a C++ compiler or add libstdc++.
#define GPT2_IMPLEMENTATION
#include "gpt2.h"
