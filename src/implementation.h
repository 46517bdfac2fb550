/* ======================================================================================== */
/*                                     IMPLEMENTATION                                       */
/* ======================================================================================== */
#if defined(GPT2_IMPLEMENTATION) && !defined(GPT2_IMPLEMENTATION_DONE)
#define GPT2_IMPLEMENTATION_DONE

/* The implementation is C++17 (the API above is C): say so before a compiler in an older mode
   (clang's and MSVC's default, C++14) fails on what it cannot parse. MSVC reports the standard
   in _MSVC_LANG; __cplusplus only with /Zc:__cplusplus. */
#if !defined(__cplusplus)
#error "gpt2.h: the file that defines GPT2_IMPLEMENTATION must be compiled as C++17 or later (e.g. g++ -std=c++17); the API alone compiles as C"
#elif (defined(_MSVC_LANG) && _MSVC_LANG < 201703L) || (!defined(_MSVC_LANG) && __cplusplus < 201703L)
#error "gpt2.h: the implementation needs C++17 or later: compile with -std=c++17 (MSVC: /std:c++17)"
#endif

/* Without optimisation the model runs about ten times slower (a 200-token answer from the shipped
   model: 28 s against 2.4 s with -O2). GCC and Clang say whether they optimise (__OPTIMIZE__):
   tell the user at compile time, and in a warning at every model load (gpt2__model_init). Define
   GPT2_UNOPTIMISED_OK to build a debug build in silence. */
#if (defined(__GNUC__) || defined(__clang__)) && !defined(__OPTIMIZE__)
#define GPT2__UNOPTIMISED 1
#if !defined(GPT2_UNOPTIMISED_OK)
#pragma message("gpt2.h: the implementation is compiled without optimisation and runs about 10x slower; compile it with -O2 (define GPT2_UNOPTIMISED_OK to silence this)")
#endif
#endif
