#ifndef GPT2__PART_CPU_DISPATCH_H
#define GPT2__PART_CPU_DISPATCH_H
#include "kernels/amx.h"
#if defined(GPT2_AMX) && defined(__linux__)
#include <sys/syscall.h> /* arch_prctl, for the AMX tile data */
#include <unistd.h>
#endif
#include "kernels/neon.h"
#include "kernels/wasm_simd128.h"

/* Kernel dispatch: the one place that decides which implementation runs on this CPU.

   One binary carries every kernel set its target allows (scalar everywhere; AVX2, AVX-512 and
   AVX-512 with the bf16 unit on x86-64, and AMX where built for it; NEON on AArch64; SIMD128 on
   WebAssembly built with -msimd128) and picks the best one the CPU and OS support, once per
   process: cpuid for the instructions, xgetbv for the OS saving the wide registers (and for AMX,
   Linux's permission to use the tile data, asked once). WebAssembly cannot ask: its set is
   chosen by the compiler flag.
     GPT2_NO_SIMD                     compile the scalar kernels only
     GPT2_FORCE_KERNELS "avx2"        use this set ("scalar", "avx2", "avx512", "avx512_bf16",
                                      "amx", "neon", "wasm_simd128") when the CPU supports it, else
                                      the best one it does
     GPT2_AMX                         compile the AMX set ("amx", amx.h), chosen first where the CPU
                                      has AMX and Linux grants it; off by default (GCC or clang):
                                      on the one AMX host measured, bf16 prompts gain 4-5x and
                                      q8_0 ones nothing (docs/PERFORMANCE.md)
     GPT2_AMX_MODEL                   list "amx_model" after the AVX-512 sets: the AMX set's kernels
                                      on a C++ model of the tiles (slow; the tests' way to run them
                                      on any CPU with AVX-512 and its bf16 unit) */

/* Each set's table (gpt2__kernels, contract.h); attention templates instantiated for both cache types. */
static constexpr gpt2__kernels gpt2__kernels_scalar = {"scalar",
                                                   /* matmul by strategy: STREAM_ROWS, STREAM_INT8, FLOAT_TILES, INT8_PANELS, FLOAT16_LANES, BF16_UNIT, FLOAT16_PROMPT */
                                                   {gpt2__matmul_rows_scalar, gpt2__matmul_rows_scalar, gpt2__matmul_widened_rows<gpt2__dot_row_scalar>, nullptr, nullptr, nullptr, nullptr},
                                                   gpt2__quantize_q8_scalar, nullptr, gpt2__attend_scalar<float>, gpt2__attend_scalar<uint16_t>,
                                                   gpt2__attend_rows_scalar<float>, gpt2__attend_rows_scalar<uint16_t>, gpt2__gelu_scalar, gpt2__layer_norm, gpt2__to_f16_scalar, nullptr, nullptr};
#if defined(GPT2__X86)
static const gpt2__kernels gpt2__kernels_avx2 = {"avx2",
                                                 {gpt2__matmul_rows_avx2, gpt2__matmul_rows_avx2, gpt2__matmul_float_tiles_avx2, nullptr, nullptr, nullptr, nullptr},
                                                 gpt2__quantize_q8_avx2, nullptr, gpt2__attend_avx2<float>, gpt2__attend_avx2<uint16_t>,
                                                 gpt2__attend_rows_avx2<float>, gpt2__attend_rows_avx2<uint16_t>, gpt2__gelu_avx2, gpt2__layer_norm_avx2, gpt2__to_f16_avx2, nullptr, nullptr};
static constexpr gpt2__kernels gpt2__kernels_avx512 = {"avx512",
                                                   {gpt2__matmul_rows_avx512, gpt2__matmul_stream_int8_avx512, gpt2__matmul_float_tiles_avx512,
                                                    gpt2__matmul_int8_panels_avx512, gpt2__matmul_lanes_avx512, nullptr, gpt2__matmul_lanes_avx512},
                                                   gpt2__quantize_q8_avx512, gpt2__quantize_q8_packed_avx512, gpt2__attend_avx512<float>, gpt2__attend_avx512<uint16_t>,
                                                   gpt2__attend_rows_avx2<float>, gpt2__attend_rows_avx2<uint16_t>, gpt2__gelu_avx512, gpt2__layer_norm_avx2, gpt2__to_f16_avx2,
                                                   gpt2__pack_lanes_avx512, gpt2__pack_tile_rows_avx512};
/* the AVX-512 set with bf16 prompts on the bf16 unit */
static constexpr gpt2__kernels gpt2__with_bf16_unit(gpt2__kernels k) {
    k.name = "avx512_bf16";
    k.matmul[GPT2__BF16_UNIT] = gpt2__matmul_bf16_unit_avx512;
    return k;
}
static constexpr gpt2__kernels gpt2__kernels_avx512_bf16 = gpt2__with_bf16_unit(gpt2__kernels_avx512);
/* the AVX-512 set with the bf16 unit whose q8_0, q4_0 and bf16 products of many rows multiply
   tiles (amx.h), through the tile operations of Tiles */
template <class Tiles>
static constexpr gpt2__kernels gpt2__with_amx(gpt2__kernels k, const char* name) {
    k.name = name;
    k.matmul[GPT2__INT8_PANELS] = gpt2__matmul_int8_amx<Tiles>;
    k.matmul[GPT2__BF16_UNIT] = gpt2__matmul_bf16_amx<Tiles>;
    return k;
}
#if defined(GPT2_AMX)
static constexpr gpt2__kernels gpt2__kernels_amx = gpt2__with_amx<gpt2__amx_hardware>(gpt2__kernels_avx512_bf16, "amx");
#endif
#if defined(GPT2_AMX_MODEL)
static constexpr gpt2__kernels gpt2__kernels_amx_model = gpt2__with_amx<gpt2__amx_model>(gpt2__kernels_avx512_bf16, "amx_model");
#endif

struct gpt2__x86_features {
    bool avx2 = false, avx512 = false, avx512_bf16 = false, amx = false;
};

static gpt2__x86_features gpt2__detect_x86() {
    gpt2__x86_features f;
    unsigned r0[4], r1[4], r7[4] = {0, 0, 0, 0}, r7_1[4] = {0, 0, 0, 0};
    gpt2__cpuid(0, 0, r0);
    gpt2__cpuid(1, 0, r1);
    if (r0[0] >= 7) { /* the highest leaf */
        gpt2__cpuid(7, 0, r7);
        gpt2__cpuid(7, 1, r7_1);
    }
    const unsigned ecx1 = r1[2], ebx7 = r7[1], ecx7 = r7[2], edx7 = r7[3];
    const bool osxsave = (ecx1 >> 27) & 1, avx = (ecx1 >> 28) & 1, fma = (ecx1 >> 12) & 1, f16c = (ecx1 >> 29) & 1;
    if (!osxsave) return f;
#if defined(_MSC_VER) && !defined(__clang__)
    const uint64_t xcr0 = _xgetbv(0);
#else
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    const uint64_t xcr0 = ((uint64_t)hi << 32) | lo;
#endif
    const bool ymm = (xcr0 & 0x6) == 0x6, zmm = (xcr0 & 0xe6) == 0xe6;
    f.avx2 = ymm && avx && fma && f16c && ((ebx7 >> 5) & 1);
    const bool avx512f = (ebx7 >> 16) & 1, dq = (ebx7 >> 17) & 1, bw = (ebx7 >> 30) & 1, vl = (ebx7 >> 31) & 1, vnni = (ecx7 >> 11) & 1;
    f.avx512 = f.avx2 && zmm && avx512f && dq && bw && vl && vnni;
    f.avx512_bf16 = f.avx512 && ((r7_1[0] >> 5) & 1); /* leaf 7, sub-leaf 1, EAX */
    const bool amx_bf16 = (edx7 >> 22) & 1, amx_tile = (edx7 >> 24) & 1, amx_int8 = (edx7 >> 25) & 1, tiles = (xcr0 & 0x60000) == 0x60000; /* XTILECFG, XTILEDATA */
    /* The tile data needs the OS's permission, and only Linux's is asked for (gpt2__amx_granted):
       elsewhere the set is not offered, so nothing is refused or logged. */
#if defined(__linux__)
    const bool os_asked = true;
#else
    const bool os_asked = false;
#endif
    f.amx = os_asked && f.avx512_bf16 && amx_bf16 && amx_tile && amx_int8 && tiles;
    return f;
}

#if defined(GPT2_AMX)
/* Whether this process may use the AMX tile data: Linux (5.16 on) makes a process ask first, with
   arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA); asked once. Else `why` says what refused. */
static bool gpt2__amx_granted(const char** why) {
    static const char* refused = [] () -> const char* {
#if defined(__linux__)
        const long arch_req_xcomp_perm = 0x1023, xfeature_xtiledata = 18;
        if (syscall(SYS_arch_prctl, arch_req_xcomp_perm, xfeature_xtiledata) == 0) return nullptr;
        return errno == EINVAL ? "the kernel does not grant it (arch_prctl ARCH_REQ_XCOMP_PERM: EINVAL; Linux before 5.16?)"
                               : "the kernel refused it (arch_prctl ARCH_REQ_XCOMP_PERM failed)";
#else
        return nullptr; /* nothing to ask: gpt2__detect_x86 finds AMX on Linux alone */
#endif
    }();
    if (why) *why = refused;
    return !refused;
}
#endif
#endif
#if defined(GPT2__NEON)
/* the scalar set with NEON's row dot products (streamed and widened) and f16 conversion */
static constexpr gpt2__kernels gpt2__with_neon(gpt2__kernels k) {
    k.name = "neon";
    k.matmul[GPT2__STREAM_ROWS] = k.matmul[GPT2__STREAM_INT8] = gpt2__matmul_rows_neon;
    k.matmul[GPT2__FLOAT_TILES] = gpt2__matmul_widened_rows<gpt2__dot_row_neon>;
    k.to_f16 = gpt2__to_f16_neon;
    return k;
}
static constexpr gpt2__kernels gpt2__kernels_neon = gpt2__with_neon(gpt2__kernels_scalar);
#endif
#if defined(GPT2__WASM_SIMD128)
/* the scalar set with SIMD128's dot products, widened prefill rows and GELU */
static constexpr gpt2__kernels gpt2__with_simd128(gpt2__kernels k) {
    k.name = "wasm_simd128";
    k.matmul[GPT2__STREAM_ROWS] = k.matmul[GPT2__STREAM_INT8] = gpt2__matmul_rows_wasm;
    k.matmul[GPT2__FLOAT_TILES] = gpt2__matmul_widened_wasm;
    k.gelu = gpt2__gelu_wasm;
    return k;
}
static constexpr gpt2__kernels gpt2__kernels_wasm_simd128 = gpt2__with_simd128(gpt2__kernels_scalar);
#endif

/* Room gpt2__supported_kernels needs: the most sets one target carries (x86-64: amx,
   avx512_bf16, avx512, amx_model, avx2 and scalar). */
static const int gpt2__max_kernel_sets = 6;

/* The kernel sets this CPU can run, best first. */
static int gpt2__supported_kernels(const gpt2__kernels** out) {
    int n = 0;
#if defined(GPT2__X86)
    const gpt2__x86_features f = gpt2__detect_x86();
#if defined(GPT2_AMX)
    if (f.amx && gpt2__amx_granted(nullptr)) out[n++] = &gpt2__kernels_amx;
#endif
    if (f.avx512_bf16) out[n++] = &gpt2__kernels_avx512_bf16;
    if (f.avx512) out[n++] = &gpt2__kernels_avx512;
#if defined(GPT2_AMX_MODEL)
    if (f.avx512_bf16) out[n++] = &gpt2__kernels_amx_model;
#endif
    if (f.avx2) out[n++] = &gpt2__kernels_avx2;
#endif
#if defined(GPT2__NEON)
    out[n++] = &gpt2__kernels_neon;
#endif
#if defined(GPT2__WASM_SIMD128)
    out[n++] = &gpt2__kernels_wasm_simd128;
#endif
    out[n++] = &gpt2__kernels_scalar;
    return n;
}

/* The set named `name` if this CPU supports it, else NULL. */
[[maybe_unused]] static const gpt2__kernels* gpt2__kernels_by_name(const char* name) {
    const gpt2__kernels* sets[gpt2__max_kernel_sets];
    const int n = gpt2__supported_kernels(sets);
    for (int i = 0; i < n; i++)
        if (std::strcmp(sets[i]->name, name) == 0) return sets[i];
    return nullptr;
}

static const gpt2__kernels* gpt2__select_kernels() {
#if defined(GPT2_FORCE_KERNELS)
    if (const gpt2__kernels* forced = gpt2__kernels_by_name(GPT2_FORCE_KERNELS)) return forced;
#endif
    const gpt2__kernels* sets[gpt2__max_kernel_sets];
    gpt2__supported_kernels(sets);
    return sets[0];
}

/* Chosen once per process; constant afterwards (thread-safe static initialisation). */
static const gpt2__kernels& gpt2__cpu_kernels() {
    static const gpt2__kernels* kernels = gpt2__select_kernels();
    return *kernels;
}

#endif /* GPT2__PART_CPU_DISPATCH_H */
