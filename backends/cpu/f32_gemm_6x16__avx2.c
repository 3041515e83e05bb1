/*
 * f32_gemm_6x16__avx2.c — em_f32_gemm_minmax_ukernel_6x16__avx2 (AVX2 + FMA).
 *
 * 6 rows x 16 columns = 12 ymm accumulators, B loaded with masked loads so a
 * column tail never reads past nc; rows past mr alias the previous row.
 */
#include <immintrin.h>

#include "cpu_ukernels.h"

__attribute__((target("avx2,fma"))) EM_GEMM_UKERNEL_DECL(em_f32_gemm_minmax_ukernel_6x16__avx2) {
  (void)a_pf; /* only the 6x64 kernel prefetches the next A panel */
  (void)b_next;
  const float *ap[6];
  float *cp[6];
  em_gemm_tile_rows(mr, a, a_rs, c, ldc, ap, cp);
  const float *a0 = ap[0], *a1 = ap[1], *a2 = ap[2], *a3 = ap[3], *a4 = ap[4], *a5 = ap[5];
  int32_t lanes[16];
  for (int i = 0; i < 16; i++) lanes[i] = (size_t)i < nc ? -1 : 0;
  const __m256i k0 = _mm256_loadu_si256((const __m256i *)lanes);
  const __m256i k1 = _mm256_loadu_si256((const __m256i *)(lanes + 8));
  __m256 v[6][2];
  if (accumulate) {
    for (int r = 0; r < 6; r++) {
      v[r][0] = _mm256_maskload_ps(cp[r], k0);
      v[r][1] = _mm256_maskload_ps(cp[r] + 8, k1);
    }
  } else {
    __m256 n0 = _mm256_setzero_ps(), n1 = _mm256_setzero_ps();
    if (bias_n) n0 = _mm256_maskload_ps(bias_n, k0), n1 = _mm256_maskload_ps(bias_n + 8, k1);
    for (int r = 0; r < 6; r++) {
      __m256 bm = _mm256_set1_ps(bias_m ? bias_m[(size_t)r < mr ? (size_t)r : mr - 1] : 0.0f);
      v[r][0] = _mm256_add_ps(n0, bm);
      v[r][1] = _mm256_add_ps(n1, bm);
    }
  }
  __m256 v00 = v[0][0], v01 = v[0][1], v10 = v[1][0], v11 = v[1][1], v20 = v[2][0], v21 = v[2][1];
  __m256 v30 = v[3][0], v31 = v[3][1], v40 = v[4][0], v41 = v[4][1], v50 = v[5][0], v51 = v[5][1];
  const int full = nc == 16;
  for (size_t k = 0; k < kc; k++) {
    __m256 w0, w1;
    if (full) {
      w0 = _mm256_loadu_ps(b), w1 = _mm256_loadu_ps(b + 8);
    } else {
      w0 = _mm256_maskload_ps(b, k0), w1 = _mm256_maskload_ps(b + 8, k1);
    }
    b += ldb;
    __m256 x;
    x = _mm256_broadcast_ss(a0), a0 += a_ks;
    v00 = _mm256_fmadd_ps(x, w0, v00), v01 = _mm256_fmadd_ps(x, w1, v01);
    x = _mm256_broadcast_ss(a1), a1 += a_ks;
    v10 = _mm256_fmadd_ps(x, w0, v10), v11 = _mm256_fmadd_ps(x, w1, v11);
    x = _mm256_broadcast_ss(a2), a2 += a_ks;
    v20 = _mm256_fmadd_ps(x, w0, v20), v21 = _mm256_fmadd_ps(x, w1, v21);
    x = _mm256_broadcast_ss(a3), a3 += a_ks;
    v30 = _mm256_fmadd_ps(x, w0, v30), v31 = _mm256_fmadd_ps(x, w1, v31);
    x = _mm256_broadcast_ss(a4), a4 += a_ks;
    v40 = _mm256_fmadd_ps(x, w0, v40), v41 = _mm256_fmadd_ps(x, w1, v41);
    x = _mm256_broadcast_ss(a5), a5 += a_ks;
    v50 = _mm256_fmadd_ps(x, w0, v50), v51 = _mm256_fmadd_ps(x, w1, v51);
  }
  const __m256 lo = _mm256_set1_ps(p->min), hi = _mm256_set1_ps(p->max);
  v[0][0] = v00, v[0][1] = v01, v[1][0] = v10, v[1][1] = v11, v[2][0] = v20, v[2][1] = v21;
  v[3][0] = v30, v[3][1] = v31, v[4][0] = v40, v[4][1] = v41, v[5][0] = v50, v[5][1] = v51;
  for (int r = 5; r >= 0; r--) {
    __m256 x0 = _mm256_min_ps(hi, _mm256_max_ps(lo, v[r][0]));
    __m256 x1 = _mm256_min_ps(hi, _mm256_max_ps(lo, v[r][1]));
    _mm256_maskstore_ps(cp[r], k0, x0);
    _mm256_maskstore_ps(cp[r] + 8, k1, x1);
  }
}
