// The one translation unit of the tests that holds the library's implementation and doctest's main.
#include <cstdio>
#include <cstdlib>
// Internal invariants stay checked in the tests' Release build: a failure prints and aborts.
#define GPT2_ASSERT(x) ((x) ? (void)0 : (std::fprintf(stderr, "%s:%d: GPT2_ASSERT(%s) failed\n", __FILE__, __LINE__, #x), std::abort()))
#define GPT2_IMPLEMENTATION
#include "gpt2.h"
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
