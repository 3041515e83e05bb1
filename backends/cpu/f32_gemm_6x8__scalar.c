/*
 * f32_gemm_6x8__scalar.c — em_f32_gemm_minmax_ukernel_6x8__scalar, the
 * portable micro-kernel (any CPU) and the reference the SIMD ones are tested
 * against.
 */
#include "cpu_ukernels.h"

EM_GEMM_UKERNEL_DECL(em_f32_gemm_minmax_ukernel_6x8__scalar) {
  (void)a_pf; /* only the 6x64 kernel prefetches the next A panel */
  (void)b_next;
  float acc[6][8];
  for (size_t r = 0; r < mr; r++)
    for (size_t j = 0; j < nc; j++)
      acc[r][j] =
          accumulate ? c[r * ldc + j] : (bias_m ? bias_m[r] : 0.0f) + (bias_n ? bias_n[j] : 0.0f);
  for (size_t k = 0; k < kc; k++) {
    const float *brow = b + k * ldb;
    for (size_t r = 0; r < mr; r++) {
      const float x = a[r * a_rs + k * a_ks];
      for (size_t j = 0; j < nc; j++) acc[r][j] += x * brow[j];
    }
  }
  for (size_t r = 0; r < mr; r++)
    for (size_t j = 0; j < nc; j++) {
      float y = acc[r][j];
      y = y < p->min ? p->min : y;
      y = y > p->max ? p->max : y;
      c[r * ldc + j] = y;
    }
}
