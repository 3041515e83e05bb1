/*
 * cpu_config.c — the one place the CPU backend picks its ISA.
 *
 * The micro-kernel families are compiled for AVX-512F, AVX2+FMA (x86), NEON
 * (AArch64) and plain C (per-file flags in CMakeLists.txt; never
 * -march=native). The CPU's features come from the library's one probe
 * (include/ember/cpu.h, src/cpu_features.c) under its one cap; the best table
 * those features allow is chosen at each delegate's init. Every operator then
 * calls through the chosen table. em_cpu_backend_configure (an options
 * struct; the CLIs map EMBER_CPU_ISA=avx2|scalar onto it) forces a lower ISA (tests and
 * benchmarks). "amx" is "avx512f" plus the AMX bf16x3 GEMM path (f32_gemm_32x32__amx.c), chosen
 * first where the CPU and OS allow it; isa "avx512f" keeps every product in f32 FMAs. The library
 * reads no environment variable.
 */
#include <string.h>

#include "cpu_ukernels.h"
#include "ember/cpu.h"
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
    {"amx", 64, 1, em_f32_gemm_minmax_ukernel_6x64__avx512f, 1,
     EM_VOPS_TABLE(em_f32_dwconv2d_chw_minmax_ukernel__avx512f, avx512f),
     em_f32_conv2d_smallc_minmax_ukernel__avx512f, em_f32_dwconv2d_c16_minmax_ukernel__avx512f,
     em_f32_transpose_ukernel__avx512f, em_f32_softmax_sm_ukernel__avx512f,
     em_f32_gemm_col_ukernel__avx512f, em_f32_gelu_rows__avx512f},
#endif
#if defined(__x86_64__) || defined(__i386__)
    {"avx512f", 64, 0, em_f32_gemm_minmax_ukernel_6x64__avx512f, 1,
     EM_VOPS_TABLE(em_f32_dwconv2d_chw_minmax_ukernel__avx512f, avx512f),
     em_f32_conv2d_smallc_minmax_ukernel__avx512f, em_f32_dwconv2d_c16_minmax_ukernel__avx512f,
     em_f32_transpose_ukernel__avx512f, em_f32_softmax_sm_ukernel__avx512f,
     em_f32_gemm_col_ukernel__avx512f, em_f32_gelu_rows__avx512f},
    {"avx2", 16, 0, em_f32_gemm_minmax_ukernel_6x16__avx2, 0,
     EM_VOPS_TABLE(em_f32_dwconv2d_minmax_ukernel__avx2, avx2), NULL, NULL,
     em_f32_transpose_ukernel__avx2, NULL, NULL, NULL},
#endif
#if defined(__aarch64__)
    {"neon", 16, 0, em_f32_gemm_minmax_ukernel_6x16__neon, 0,
     EM_VOPS_TABLE(em_f32_dwconv2d_minmax_ukernel__neon, neon), NULL, NULL,
     em_f32_transpose_ukernel__neon, NULL, NULL, NULL},
#endif
    {"scalar", 8, 0, em_f32_gemm_minmax_ukernel_6x8__scalar, 0,
     EM_VOPS_TABLE(em_f32_dwconv2d_minmax_ukernel__scalar, scalar), NULL, NULL,
     em_f32_transpose_ukernel__scalar, NULL, NULL, NULL},
};

/* Whether `isa`'s table may run with features `f` (include/ember/cpu.h: the one CPU probe). */
static int isa_supported(const char *isa, const em_cpu_features *f) {
  if (strcmp(isa, "amx") == 0) return f->amx_bf16;
  if (strcmp(isa, "avx512f") == 0) return f->avx512f;
  if (strcmp(isa, "avx2") == 0) return f->avx2_fma;
  if (strcmp(isa, "neon") == 0) return f->neon;
  return strcmp(isa, "scalar") == 0;
}

const em_cpu_config *em_cpu_config_for(const char *isa) {
  for (size_t i = 0; i < sizeof configs / sizeof configs[0]; i++)
    if (strcmp(configs[i].isa, isa) == 0)
      return isa_supported(isa, em_cpu_features_detected()) ? &configs[i] : NULL;
  return NULL;
}

const em_cpu_config *em_cpu_config_get(void) {
  const em_cpu_features *f = em_cpu_features_get(); /* under the cap */
  for (size_t i = 0; i < sizeof configs / sizeof configs[0]; i++)
    if (isa_supported(configs[i].isa, f)) return &configs[i];
  return NULL;
}

em_status em_cpu_config_force(const char *isa) { return em_cpu_set_isa_cap(isa); }

em_q8_gemm_fn em_q8_gemm_for(const char *isa) {
#if defined(__x86_64__) || defined(__i386__)
  const em_cpu_features *f = em_cpu_features_get(); /* under the cap */
  if ((strcmp(isa, "amx") == 0 || strcmp(isa, "avx512f") == 0) && f->avx512vnni && f->avx512bw)
    return em_q8_gemm_6x32_ukernel__avx512vnni;
  if (strcmp(isa, "amx") == 0 || strcmp(isa, "avx512f") == 0 || strcmp(isa, "avx2") == 0)
    return em_q8_gemm_6x16_ukernel__avx2;
#endif
  (void)isa;
  return em_q8_gemm_6x16_ukernel__scalar;
}

size_t em_q8_gemm_nr_for(const char *isa) {
#if defined(__x86_64__) || defined(__i386__)
  if (em_q8_gemm_for(isa) == em_q8_gemm_6x32_ukernel__avx512vnni) return 32;
#endif
  (void)isa;
  return 16;
}

em_q8_quant_fn em_q8_quant_for(const char *isa) {
#if defined(__x86_64__) || defined(__i386__)
  const em_q8_gemm_fn g = em_q8_gemm_for(isa);
  if (g == em_q8_gemm_6x32_ukernel__avx512vnni) return em_q8_quant_ukernel__avx512vnni;
  if (g == em_q8_gemm_6x16_ukernel__avx2) return em_q8_quant_ukernel__avx2;
#endif
  (void)isa;
  return em_q8_quant_ukernel__scalar;
}

em_q8_quant_scaled_fn em_q8_quant_scaled_for(const char *isa) {
#if defined(__x86_64__) || defined(__i386__)
  if (em_q8_gemm_for(isa) == em_q8_gemm_6x32_ukernel__avx512vnni)
    return em_q8_quant_scaled_ukernel__avx512vnni;
#endif
  (void)isa;
  return NULL;
}

em_q8_dw_fn em_q8_dw_for(const char *isa) {
#if defined(__x86_64__) || defined(__i386__)
  const em_q8_gemm_fn g = em_q8_gemm_for(isa);
  if (g == em_q8_gemm_6x32_ukernel__avx512vnni) return em_q8_dwconv_ukernel__avx512vnni;
  if (g == em_q8_gemm_6x16_ukernel__avx2) return em_q8_dwconv_ukernel__avx2;
#endif
  (void)isa;
  return em_q8_dwconv_ukernel__scalar;
}

em_q8_add_fn em_q8_add_for(const char *isa) {
#if defined(__x86_64__) || defined(__i386__)
  const em_q8_gemm_fn g = em_q8_gemm_for(isa);
  if (g == em_q8_gemm_6x32_ukernel__avx512vnni) return em_q8_add_ukernel__avx512vnni;
  if (g == em_q8_gemm_6x16_ukernel__avx2) return em_q8_add_ukernel__avx2;
#endif
  (void)isa;
  return em_q8_add_ukernel__scalar;
}

em_q8_lut_fn em_q8_lut_for(const char *isa) {
#if defined(__x86_64__) || defined(__i386__)
  if ((strcmp(isa, "amx") == 0 || strcmp(isa, "avx512f") == 0) && em_cpu_features_get()->avx512vbmi)
    return em_q8_lut_ukernel__avx512vbmi;
#endif
  (void)isa;
  return em_q8_lut_ukernel__scalar;
}

em_q8_lutf_fn em_q8_lutf_for(const char *isa) {
#if defined(__x86_64__) || defined(__i386__)
  if (em_q8_lut_for(isa) == em_q8_lut_ukernel__avx512vbmi) return em_q8_lutf_ukernel__avx512vbmi;
#endif
  (void)isa;
  return em_q8_lutf_ukernel__scalar;
}

em_q8_dw2_fn em_q8_dw2_for(const char *isa) {
#if defined(__x86_64__) || defined(__i386__)
  if (em_q8_dw_for(isa) == em_q8_dwconv_ukernel__avx512vnni)
    return em_q8_dwconv2_ukernel__avx512vnni;
#endif
  (void)isa;
  return NULL;
}

em_q8_dw_fn em_q8_dwdot_for(const char *isa) {
#if defined(__x86_64__) || defined(__i386__)
  if (em_q8_dw_for(isa) == em_q8_dwconv_ukernel__avx512vnni) return em_q8_dwdot_ukernel__avx512vnni;
#endif
  (void)isa;
  return NULL;
}

em_q8_dwv_fn em_q8_dwdotv_for(const char *isa) {
#if defined(__x86_64__) || defined(__i386__)
  if (em_q8_dwdot_for(isa)) return em_q8_dwdotv_ukernel__avx512vnni;
#endif
  (void)isa;
  return NULL;
}

em_q8_dw2_fn em_q8_dwdot2_for(const char *isa) {
#if defined(__x86_64__) || defined(__i386__)
  if (em_q8_dwdot_for(isa)) return em_q8_dwdot2_ukernel__avx512vnni;
#endif
  (void)isa;
  return NULL;
}

em_q8_lutq_fn em_q8_lutq_for(const char *isa) {
#if defined(__x86_64__) || defined(__i386__)
  if (em_q8_lut_for(isa) == em_q8_lut_ukernel__avx512vbmi) return em_q8_lutq_ukernel__avx512vbmi;
#endif
  (void)isa;
  return em_q8_lutq_ukernel__scalar;
}

em_q8_lutm_fn em_q8_lutm_for(const char *isa) {
#if defined(__x86_64__) || defined(__i386__)
  if (em_q8_lut_for(isa) == em_q8_lut_ukernel__avx512vbmi) return em_q8_lutm_ukernel__avx512vbmi;
#endif
  (void)isa;
  return em_q8_lutm_ukernel__scalar;
}

em_q8_pw_fn em_q8_pw_for(const char *isa) {
#if defined(__x86_64__) || defined(__i386__)
  if (em_q8_gemm_for(isa) == em_q8_gemm_6x32_ukernel__avx512vnni)
    return em_cpu_features_get()->avx512_split ? em_q8_pw_ukernel__avx512vnni
                                               : em_q8_pw8_ukernel__avx512vnni;
#endif
  (void)isa;
  return NULL;
}

em_q8_pack_fn em_q8_pack_for(const char *isa) {
#if defined(__x86_64__) || defined(__i386__)
  const em_q8_gemm_fn g = em_q8_gemm_for(isa);
  if (g == em_q8_gemm_6x32_ukernel__avx512vnni) return em_q8_pack16_ukernel__avx512vnni;
  if (g == em_q8_gemm_6x16_ukernel__avx2) return em_q8_pack16_ukernel__avx2;
#endif
  (void)isa;
  return em_q8_pack16_ukernel__scalar;
}

em_q8_dq_fn em_q8_dq_for(const char *isa) {
#if defined(__x86_64__) || defined(__i386__)
  const em_q8_gemm_fn g = em_q8_gemm_for(isa);
  if (g == em_q8_gemm_6x32_ukernel__avx512vnni) return em_q8_dq_ukernel__avx512vnni;
  if (g == em_q8_gemm_6x16_ukernel__avx2) return em_q8_dq_ukernel__avx2;
#endif
  (void)isa;
  return em_q8_dq_ukernel__scalar;
}

em_q8_rowt_fn em_q8_rowt_for(const char *isa) {
#if defined(__x86_64__) || defined(__i386__)
  const em_q8_gemm_fn g = em_q8_gemm_for(isa);
  if (g == em_q8_gemm_6x32_ukernel__avx512vnni) return em_q8_rowt_ukernel__avx512vnni;
  if (g == em_q8_gemm_6x16_ukernel__avx2) return em_q8_rowt_ukernel__avx2;
#endif
  (void)isa;
  return em_q8_rowt_ukernel__scalar;
}

em_q8_rowq_fn em_q8_rowq_for(const char *isa) {
#if defined(__x86_64__) || defined(__i386__)
  const em_q8_gemm_fn g = em_q8_gemm_for(isa);
  if (g == em_q8_gemm_6x32_ukernel__avx512vnni) return em_q8_rowq_ukernel__avx512vnni;
  if (g == em_q8_gemm_6x16_ukernel__avx2) return em_q8_rowq_ukernel__avx2;
#endif
  (void)isa;
  return em_q8_rowq_ukernel__scalar;
}
