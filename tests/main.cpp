// The one translation unit of the tests that holds the library's implementation and doctest's main.
#define GPT2_IMPLEMENTATION
#include "gpt2.h"
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
