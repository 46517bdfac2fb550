#ifndef GPT2__PART_COMMON_H
#define GPT2__PART_COMMON_H
#include "api.h"

/* What every part of the implementation uses: the standard headers, the allocator and assert
   macros, aligned buffers, errors as values, f16 and bf16. */

#ifndef __cplusplus
#error "GPT2_IMPLEMENTATION needs C++17: define it in a .cpp file"
#endif

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <limits>
#include <mutex>
#include <new>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#if defined(GPT2_MALLOC) != defined(GPT2_FREE)
#error "define both GPT2_MALLOC and GPT2_FREE, or neither"
#endif
#ifndef GPT2_MALLOC
#define GPT2_MALLOC(size) std::malloc(size)
#define GPT2_FREE(ptr) std::free(ptr)
#define GPT2__DEFAULT_ALLOCATOR 1
#endif
#if defined(__linux__)
#include <sys/mman.h>
#endif
#ifndef GPT2_ASSERT
#include <cassert>
#define GPT2_ASSERT(x) assert(x)
#endif

/* printf-style checking of our message formats. MinGW's C++ runtime formats with its own
   C99-conforming printf (libstdc++ turns on __USE_MINGW_ANSI_STDIO), which takes %zu; the plain
   `printf` archetype there would mean msvcrt's, which does not. */
#if defined(__MINGW32__) && defined(__MINGW_PRINTF_FORMAT)
#define GPT2__PRINTF_LIKE(fmt, first) __attribute__((format(__MINGW_PRINTF_FORMAT, fmt, first)))
#elif defined(__GNUC__)
#define GPT2__PRINTF_LIKE(fmt, first) __attribute__((format(printf, fmt, first)))
#else
#define GPT2__PRINTF_LIKE(fmt, first)
#endif

#ifdef GPT2_STATIC
#define GPT2_DEF [[maybe_unused]] static /* a program need not call every function */
#else
#define GPT2_DEF
#endif

/* GPT2_MALLOC memory aligned to a cache line, so no vector load of the kernels straddles two
   lines (docs/PERFORMANCE.md, Kernel notes), or to `alignment` (a power of two: 2 MiB for huge
   pages). The pointer malloc gave sits just below. */
static void* gpt2__malloc_aligned(size_t bytes, size_t alignment = 64) {
    void* raw = GPT2_MALLOC(bytes + alignment + sizeof(void*));
    if (!raw) return nullptr;
    void* p = (void*)(((uintptr_t)raw + sizeof(void*) + alignment - 1) & ~(uintptr_t)(alignment - 1));
    std::memcpy((char*)p - sizeof(void*), &raw, sizeof(void*));
    return p;
}

static void gpt2__free_aligned(void* p) {
    if (!p) return;
    void* raw;
    std::memcpy(&raw, (char*)p - sizeof(void*), sizeof(void*));
    GPT2_FREE(raw);
}

/* Asks for transparent huge pages on the 2 MiB-aligned part of a large buffer the kernels
   stream through (the KV cache): from 4 KiB pages a core streams slower (docs/PERFORMANCE.md,
   Kernel notes). Only for the default allocator's memory,
   on Linux; the OS may ignore the advice. */
#if defined(__linux__) && defined(MADV_HUGEPAGE) && defined(GPT2__DEFAULT_ALLOCATOR)
#define GPT2__HUGE_PAGES 1
#endif
static void gpt2__advise_huge_pages(void* p, size_t bytes) {
#if defined(GPT2__HUGE_PAGES)
    const uintptr_t huge = (uintptr_t)2 << 20;
    const uintptr_t begin = ((uintptr_t)p + huge - 1) & ~(huge - 1), end = ((uintptr_t)p + bytes) & ~(huge - 1);
    if (end > begin) madvise((void*)begin, end - begin, MADV_HUGEPAGE);
#else
    (void)p;
    (void)bytes;
#endif
}

/* Containers allocate through GPT2_MALLOC too, so a host's allocator sees every byte. */
template <class T>
struct gpt2__allocator {
    using value_type = T;
    gpt2__allocator() = default;
    template <class U>
    gpt2__allocator(const gpt2__allocator<U>&) {}
    T* allocate(size_t n) {
        if (n > std::numeric_limits<size_t>::max() / sizeof(T)) return nullptr;
        void* p = GPT2_MALLOC(n * sizeof(T));
#if defined(__cpp_exceptions)
        if (!p) throw std::bad_alloc();
#endif
        return static_cast<T*>(p);
    }
    void deallocate(T* p, size_t) { GPT2_FREE(p); }
    template <class U>
    bool operator==(const gpt2__allocator<U>&) const { return true; }
    template <class U>
    bool operator!=(const gpt2__allocator<U>&) const { return false; }
};
template <class T>
using gpt2__vector = std::vector<T, gpt2__allocator<T>>;
using gpt2__string = std::basic_string<char, std::char_traits<char>, gpt2__allocator<char>>;

/* Fills `err` (when given) and returns its code, so call sites read `return gpt2__fail(...)`. */
static gpt2_result gpt2__fail(gpt2_error* err, gpt2_result code, const char* fmt, ...) GPT2__PRINTF_LIKE(3, 4);
static gpt2_result gpt2__fail(gpt2_error* err, gpt2_result code, const char* fmt, ...) {
    if (err) {
        err->code = code;
        va_list args;
        va_start(args, fmt);
        std::vsnprintf(err->message, sizeof err->message, fmt, args);
        va_end(args);
    }
    return code;
}

/* Every object the C API hands out (model, session, grammar, stage) carries a tag: its kind's
   while it lives, GPT2__TAG_FREED once freed. Each call checks it on entry (gpt2__check_tag), so
   an object handed back after its free (a use after free, a second free) is refused with a
   sentence that says so, in release builds too, for as long as the allocator has not given its
   memory to something else: what reuse or a wild pointer make look live cannot be told apart
   (docs/GUIDE.md, Errors). No tag is a struct's first field: free() keeps its own list pointers
   in a freed block's first 16 bytes. A model outlives its free while its sessions and grammars
   hold it (gpt2__model_unref), so theirs is always read from live memory. */
enum : uint64_t {
    GPT2__TAG_MODEL = 0x677074326d6f6465ull,   /* "gpt2mode" */
    GPT2__TAG_SESSION = 0x6770743273657373ull, /* "gpt2sess" */
    GPT2__TAG_GRAMMAR = 0x677074326772616dull, /* "gpt2gram" */
    GPT2__TAG_STAGE = 0x6770743273746167ull,   /* "gpt2stag" */
    GPT2__TAG_FREED = 0x6770743266726565ull,   /* "gpt2free" */
};
using gpt2__tag = std::atomic<uint64_t>; /* atomic: a model's is written by its free while its sessions' calls read it */

/* GPT2_OK when `object` is not NULL and its tag is `live`; else an error naming `what` ("session")
   NULL, freed (by `free_fn`), or not made by `make_fn`. */
template <class T>
static gpt2_result gpt2__check_tag(const T* object, uint64_t live, const char* what, const char* make_fn, const char* free_fn, gpt2_error* err) {
    if (!object) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "%s is NULL", what);
    const uint64_t value = object->tag.load(std::memory_order_relaxed);
    if (value == live) return GPT2_OK;
    if (value == GPT2__TAG_FREED) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "%s was freed (%s) and cannot be used", what, free_fn);
    return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "%s is not a live object made by %s (freed and its memory reused, or a wrong pointer)", what, make_fn);
}

static gpt2_result gpt2__ok(gpt2_error* err) {
    if (err) {
        err->code = GPT2_OK;
        err->message[0] = '\0';
    }
    return GPT2_OK;
}

/* IEEE half <-> float, exact in both directions (round to nearest even on the way down). */
static inline float gpt2__f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ffu, bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (mant << 13);
    } else if (exp != 0) {
        bits = sign | ((exp + 112) << 23) | (mant << 13);
    } else if (mant == 0) {
        bits = sign;
    } else { /* subnormal: normalise */
        int shift = 0;
        while (!(mant & 0x400u)) { mant <<= 1; shift++; }
        bits = sign | ((uint32_t)(113 - shift) << 23) | ((mant & 0x3ffu) << 13);
    }
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

static inline uint16_t gpt2__f32_to_f16(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t abs = x & 0x7fffffffu;
    if (abs > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | (abs & 0x7fffffu) >> 13); /* NaN: quiet, the payload's top bits, as F16C and NEON */
    if (abs == 0x7f800000u) return (uint16_t)(sign | 0x7c00u);
    if (abs >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to inf */
    if (abs < 0x38800000u) { /* subnormal or zero in half */
        float a;
        std::memcpy(&a, &abs, 4);
        return (uint16_t)(sign | (uint32_t)std::nearbyint(a * 16777216.0f)); /* a / 2^-24 */
    }
    uint32_t mant = abs & 0x7fffffu, exp = (abs >> 23) - 112;
    uint32_t h = (exp << 10) | (mant >> 13);
    uint32_t rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1))) h++;
    return (uint16_t)(sign | h);
}

static inline float gpt2__bf16_to_f32(uint16_t b) {
    uint32_t bits = (uint32_t)b << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

/* Float to bf16, rounded to nearest even (as PyTorch and CUDA's __float2bfloat16_rn); a NaN stays
   a quiet NaN. */
static inline uint16_t gpt2__f32_to_bf16(float x) {
    uint32_t bits;
    std::memcpy(&bits, &x, 4);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((bits >> 16) | 0x40);
    return (uint16_t)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

#endif /* GPT2__PART_COMMON_H */
