// The shared library libgpt2.so / gpt2.dll / libgpt2.dylib (CMake: GPT2_BUILD_SHARED): gpt2.h's
// implementation with the public functions exported and, compiled with -fvisibility=hidden,
// nothing else. By hand, on Linux:
//     g++ -std=c++17 -O2 -shared -fPIC -fvisibility=hidden -I. src/shared/gpt2_shared.cpp
//         -Wl,--version-script=src/shared/gpt2.map -o libgpt2.so -pthread
// Programs that use it define GPT2_SHARED before including gpt2.h (the CMake target does).
#ifndef GPT2_SHARED
#define GPT2_SHARED
#endif
#define GPT2_BUILD
#define GPT2_IMPLEMENTATION
#include "gpt2.h"
