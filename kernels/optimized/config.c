/*
 * config.c — the one place the portable kernels' optimized layer is chosen
 * (portable/fast_config.h): one constant table per feature set, picked from the library's one
 * CPU probe under its one cap (include/ember/cpu.h, src/cpu_features.c), so
 * em_cpu_set_isa_cap ("avx2", "scalar", ...; EMBER_CPU_ISA in the CLIs and bindings) limits
 * these paths as it limits EmberCpuBackend and the quantized linear kernels. The x86-64 bodies
 * (<family>__<isa>.c) are built only there (EMBER_OPTIMIZED_X86, set by CMakeLists.txt);
 * elsewhere every table is empty and the portable loops run.
 */
#include "ember/cpu.h"
#include "optimized/config.h"

#if !(defined(EMBER_OPTIMIZED_KERNELS) && EMBER_OPTIMIZED_KERNELS)
#error "kernels/optimized is built with EMBER_OPTIMIZED_KERNELS=1 (CMake's option of that name)"
#endif

#if defined(EMBER_OPTIMIZED_X86) && EMBER_OPTIMIZED_X86
/* Entries by family; an ISA the CPU lacks (under the cap) leaves its entries NULL. */
#define GEMM_AVX2 em_f32_gemm_ukernel_6x16__avx2, em_f32_dot__avx2, em_f32_gemv_rm_task__avx2
#define GATE_AVX512F                                                                               \
  em_f32_sigmoid__avx512f, em_f32_silu__avx512f, em_f32_sigmoid_row__avx512f,                      \
      em_f32_silu_row__avx512f
#define GEMM_NONE NULL, NULL, NULL
#define GATE_NONE NULL, NULL, NULL, NULL

/* Indexed by avx2_fma | avx512f << 1. */
static const em_portable_fast_config tables[4] = {
    {"none", GEMM_NONE, GATE_NONE, NULL, NULL, NULL},
    {"avx2", GEMM_AVX2, GATE_NONE, em_sdpa_heads__avx2, NULL, NULL},
    {"avx512f", GEMM_NONE, GATE_AVX512F, NULL, em_sdpa_heads_d16__avx512f, em_sdpa_split__avx512f},
    {"avx512f", GEMM_AVX2, GATE_AVX512F, em_sdpa_heads__avx2, em_sdpa_heads_d16__avx512f,
     em_sdpa_split__avx512f},
};

const em_portable_fast_config *em_portable_fast_config_get(void) {
  const em_cpu_features *f = em_cpu_features_get(); /* under the cap */
  return &tables[(f->avx2_fma ? 1 : 0) | (f->avx512f ? 2 : 0)];
}
#else
static const em_portable_fast_config none = {"none", NULL, NULL, NULL, NULL, NULL,
                                             NULL,   NULL, NULL, NULL, NULL};

const em_portable_fast_config *em_portable_fast_config_get(void) { return &none; }
#endif
