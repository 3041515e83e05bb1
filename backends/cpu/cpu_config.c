/*
 * cpu_config.c — the one place the CPU backend picks its ISA.
 *
 * The micro-kernel families are compiled for AVX-512F, AVX2+FMA (x86), NEON
 * (AArch64) and plain C (per-file flags in CMakeLists.txt; never
 * -march=native). On x86 the CPU is probed once with __builtin_cpu_supports;
 * on AArch64 NEON is baseline, so it is chosen without a probe. Every operator
 * then calls through the chosen table. em_cpu_backend_configure (an options
 * struct; the CLIs map EMBER_CPU_ISA=avx2|scalar onto it) forces a lower ISA (tests and
 * benchmarks). "amx" is "avx512f" plus the AMX bf16x3 GEMM path (f32_gemm_32x32__amx.c), chosen
 * first where the CPU and OS allow it; isa "avx512f" keeps every product in f32 FMAs. The library
 * reads no environment variable.
 */
#include <stdatomic.h>
#include <string.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "cpu_ukernels.h"
#include "ember/platform.h"

#define EM_VOPS_TABLE(dwconv, isa)                                                                 \
  dwconv,                                                                                          \
      {em_f32_vadd_minmax_ukernel__##isa, em_f32_vsub_minmax_ukernel__##isa,                       \
       em_f32_vmul_minmax_ukernel__##isa, em_f32_vdiv_minmax_ukernel__##isa},                      \
      {em_f32_vaddc_minmax_ukernel__##isa, em_f32_vsubc_minmax_ukernel__##isa,                     \
       em_f32_vmulc_minmax_ukernel__##isa, em_f32_vdivc_minmax_ukernel__##isa},                    \
      em_f32_vact_ukernel__##isa, em_f32_vaffine_minmax_ukernel__##isa,                            \
      em_f32_softmax_ukernel__##isa, em_f32_norm_ukernel__##isa,                                   \
      em_f32_gemv16_minmax_ukernel__##isa, em_f32_gemv6_minmax_ukernel__##isa,                     \
      em_f32_copy_stride2_ukernel__##isa, em_f32_maxpool2d_ukernel__##isa,                         \
      em_f32_wino_in_ukernel__##isa, em_f32_wino_out_ukernel__##isa

static const em_cpu_config configs[] = {
#if defined(__x86_64__)
    {"amx", 64, 1, em_f32_gemm_minmax_ukernel_6x64__avx512f,
     EM_VOPS_TABLE(em_f32_dwconv2d_chw_minmax_ukernel__avx512f, avx512f),
     em_f32_conv2d_smallc_minmax_ukernel__avx512f, em_f32_dwconv2d_c16_minmax_ukernel__avx512f,
     em_f32_transpose_ukernel__avx512f},
#endif
#if defined(__x86_64__) || defined(__i386__)
    {"avx512f", 64, 0, em_f32_gemm_minmax_ukernel_6x64__avx512f,
     EM_VOPS_TABLE(em_f32_dwconv2d_chw_minmax_ukernel__avx512f, avx512f),
     em_f32_conv2d_smallc_minmax_ukernel__avx512f, em_f32_dwconv2d_c16_minmax_ukernel__avx512f,
     em_f32_transpose_ukernel__avx512f},
    {"avx2", 16, 0, em_f32_gemm_minmax_ukernel_6x16__avx2,
     EM_VOPS_TABLE(em_f32_dwconv2d_minmax_ukernel__avx2, avx2), NULL, NULL,
     em_f32_transpose_ukernel__avx2},
#endif
#if defined(__aarch64__)
    {"neon", 16, 0, em_f32_gemm_minmax_ukernel_6x16__neon,
     EM_VOPS_TABLE(em_f32_dwconv2d_minmax_ukernel__neon, neon), NULL, NULL,
     em_f32_transpose_ukernel__neon},
#endif
    {"scalar", 8, 0, em_f32_gemm_minmax_ukernel_6x8__scalar,
     EM_VOPS_TABLE(em_f32_dwconv2d_minmax_ukernel__scalar, scalar), NULL, NULL,
     em_f32_transpose_ukernel__scalar},
};

#if defined(__x86_64__)
/* AMX tiles with bf16 products (CPUID.(7,0):EDX bits 22 and 24), AVX-512 BF16 for the operand
 * split (CPUID.(7,1):EAX bit 5) and BW, and the OS's leave. Read from CPUID directly: not every
 * compiler's __builtin_cpu_supports knows these names (clang 14 does not). */
static int amx_usable(void) {
  static atomic_int cached; /* 0 unknown, 1 yes, 2 no (every first caller finds the same) */
  int state = atomic_load_explicit(&cached, memory_order_relaxed);
  if (!state) {
    unsigned a0, b0, c0, d0, a1, b1, c1, d1;
    const int leaf7 =
        __get_cpuid_count(7, 0, &a0, &b0, &c0, &d0) && __get_cpuid_count(7, 1, &a1, &b1, &c1, &d1);
    const int cpu = leaf7 && (d0 >> 22 & 1) && (d0 >> 24 & 1) && (a1 >> 5 & 1);
    state = cpu && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                    em_platform_enable_amx()
                ? 1
                : 2;
    atomic_store_explicit(&cached, state, memory_order_relaxed);
  }
  return state == 1;
}
#endif

static int isa_supported(const char *isa) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
#endif
#if defined(__x86_64__)
  if (strcmp(isa, "amx") == 0) return amx_usable();
#endif
#if defined(__x86_64__) || defined(__i386__)
  if (strcmp(isa, "avx512f") == 0) return __builtin_cpu_supports("avx512f");
  if (strcmp(isa, "avx2") == 0)
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
#if defined(__aarch64__)
  if (strcmp(isa, "neon") == 0) return 1; /* Advanced SIMD is mandatory in AArch64 */
#endif
  return strcmp(isa, "scalar") == 0;
}

const em_cpu_config *em_cpu_config_for(const char *isa) {
  for (size_t i = 0; i < sizeof configs / sizeof configs[0]; i++)
    if (strcmp(configs[i].isa, isa) == 0) return isa_supported(isa) ? &configs[i] : NULL;
  return NULL;
}

/* The chosen table: NULL until first asked or configured; set with one atomic store. */
static _Atomic(const em_cpu_config *) chosen;

static const em_cpu_config *best_config(void) {
  for (size_t i = 0; i < sizeof configs / sizeof configs[0]; i++)
    if (isa_supported(configs[i].isa)) return &configs[i];
  return NULL;
}

const em_cpu_config *em_cpu_config_get(void) {
  const em_cpu_config *c = atomic_load_explicit(&chosen, memory_order_acquire);
  if (c) return c;
  const em_cpu_config *none = NULL;
  c = best_config();
  /* Two first callers compute the same table; the first store wins, a configure() wins over
     both. */
  if (!atomic_compare_exchange_strong_explicit(&chosen, &none, c, memory_order_acq_rel,
                                               memory_order_acquire))
    c = none;
  return c;
}

em_status em_cpu_config_force(const char *isa) {
  const em_cpu_config *c = (isa && isa[0]) ? em_cpu_config_for(isa) : best_config();
  if (!c) {
    EM_LOG_ERROR("EmberCpuBackend: ISA '%s' is unknown or this CPU lacks it", isa);
    return EM_ERR_NOT_SUPPORTED;
  }
  atomic_store_explicit(&chosen, c, memory_order_release);
  return EM_OK;
}
