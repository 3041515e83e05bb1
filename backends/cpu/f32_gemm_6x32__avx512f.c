/*
 * f32_gemm_6x32__avx512f.c — em_f32_gemm_minmax_ukernel_6x32__avx512f.
 *
 * 6 rows x 32 columns = 12 zmm accumulators: enough independent FMA chains to
 * hide the 4-cycle FMA latency on Zen 4's double-pumped 512-bit units and on
 * Intel's two FMA ports. A is broadcast one element per row and k; B is two
 * masked 16-float loads per k, so column tails (nc < 32) never read past a row.
 * Rows past mr alias the previous row (same inputs, same results), so every
 * row can be computed unconditionally.
 */
#include <immintrin.h>

#include "cpu_ukernels.h"

__attribute__((target("avx512f"))) EM_GEMM_UKERNEL_DECL(em_f32_gemm_minmax_ukernel_6x32__avx512f) {
  (void)a_pf; /* only the 6x64 kernel prefetches the next A panel */
  const float *a0 = a;
  const float *a1 = mr > 1 ? a0 + a_rs : a0;
  const float *a2 = mr > 2 ? a1 + a_rs : a1;
  const float *a3 = mr > 3 ? a2 + a_rs : a2;
  const float *a4 = mr > 4 ? a3 + a_rs : a3;
  const float *a5 = mr > 5 ? a4 + a_rs : a4;
  float *c0 = c;
  float *c1 = mr > 1 ? c0 + ldc : c0;
  float *c2 = mr > 2 ? c1 + ldc : c1;
  float *c3 = mr > 3 ? c2 + ldc : c2;
  float *c4 = mr > 4 ? c3 + ldc : c3;
  float *c5 = mr > 5 ? c4 + ldc : c4;
  const __mmask16 k0 = nc >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << nc) - 1u);
  const __mmask16 k1 = nc >= 32  ? (__mmask16)0xFFFF
                       : nc > 16 ? (__mmask16)((1u << (nc - 16)) - 1u)
                                 : (__mmask16)0;
  __m512 v00, v01, v10, v11, v20, v21, v30, v31, v40, v41, v50, v51;
  if (accumulate) {
    v00 = _mm512_maskz_loadu_ps(k0, c0), v01 = _mm512_maskz_loadu_ps(k1, c0 + 16);
    v10 = _mm512_maskz_loadu_ps(k0, c1), v11 = _mm512_maskz_loadu_ps(k1, c1 + 16);
    v20 = _mm512_maskz_loadu_ps(k0, c2), v21 = _mm512_maskz_loadu_ps(k1, c2 + 16);
    v30 = _mm512_maskz_loadu_ps(k0, c3), v31 = _mm512_maskz_loadu_ps(k1, c3 + 16);
    v40 = _mm512_maskz_loadu_ps(k0, c4), v41 = _mm512_maskz_loadu_ps(k1, c4 + 16);
    v50 = _mm512_maskz_loadu_ps(k0, c5), v51 = _mm512_maskz_loadu_ps(k1, c5 + 16);
  } else {
    __m512 n0 = _mm512_setzero_ps(), n1 = _mm512_setzero_ps();
    if (bias_n) n0 = _mm512_maskz_loadu_ps(k0, bias_n), n1 = _mm512_maskz_loadu_ps(k1, bias_n + 16);
    __m512 b0 = n0, b1 = n1, b2 = n0, b3 = n0, b4 = n0, b5 = n0;
    if (bias_m) {
      size_t last = mr - 1;
      b0 = _mm512_add_ps(n0, _mm512_set1_ps(bias_m[0]));
      b1 = _mm512_add_ps(n0, _mm512_set1_ps(bias_m[last < 1 ? last : 1]));
      b2 = _mm512_add_ps(n0, _mm512_set1_ps(bias_m[last < 2 ? last : 2]));
      b3 = _mm512_add_ps(n0, _mm512_set1_ps(bias_m[last < 3 ? last : 3]));
      b4 = _mm512_add_ps(n0, _mm512_set1_ps(bias_m[last < 4 ? last : 4]));
      b5 = _mm512_add_ps(n0, _mm512_set1_ps(bias_m[last < 5 ? last : 5]));
      v00 = b0, v10 = b1, v20 = b2, v30 = b3, v40 = b4, v50 = b5;
      v01 = _mm512_add_ps(n1, _mm512_set1_ps(bias_m[0]));
      v11 = _mm512_add_ps(n1, _mm512_set1_ps(bias_m[last < 1 ? last : 1]));
      v21 = _mm512_add_ps(n1, _mm512_set1_ps(bias_m[last < 2 ? last : 2]));
      v31 = _mm512_add_ps(n1, _mm512_set1_ps(bias_m[last < 3 ? last : 3]));
      v41 = _mm512_add_ps(n1, _mm512_set1_ps(bias_m[last < 4 ? last : 4]));
      v51 = _mm512_add_ps(n1, _mm512_set1_ps(bias_m[last < 5 ? last : 5]));
    } else {
      v00 = v10 = v20 = v30 = v40 = v50 = b0;
      v01 = v11 = v21 = v31 = v41 = v51 = n1;
    }
  }
  for (size_t k = 0; k < kc; k++) {
    const __m512 w0 = _mm512_maskz_loadu_ps(k0, b);
    const __m512 w1 = _mm512_maskz_loadu_ps(k1, b + b_next);
    b += ldb;
    __m512 x;
    x = _mm512_set1_ps(*a0), a0 += a_ks;
    v00 = _mm512_fmadd_ps(x, w0, v00), v01 = _mm512_fmadd_ps(x, w1, v01);
    x = _mm512_set1_ps(*a1), a1 += a_ks;
    v10 = _mm512_fmadd_ps(x, w0, v10), v11 = _mm512_fmadd_ps(x, w1, v11);
    x = _mm512_set1_ps(*a2), a2 += a_ks;
    v20 = _mm512_fmadd_ps(x, w0, v20), v21 = _mm512_fmadd_ps(x, w1, v21);
    x = _mm512_set1_ps(*a3), a3 += a_ks;
    v30 = _mm512_fmadd_ps(x, w0, v30), v31 = _mm512_fmadd_ps(x, w1, v31);
    x = _mm512_set1_ps(*a4), a4 += a_ks;
    v40 = _mm512_fmadd_ps(x, w0, v40), v41 = _mm512_fmadd_ps(x, w1, v41);
    x = _mm512_set1_ps(*a5), a5 += a_ks;
    v50 = _mm512_fmadd_ps(x, w0, v50), v51 = _mm512_fmadd_ps(x, w1, v51);
  }
  const __m512 lo = _mm512_set1_ps(p->min), hi = _mm512_set1_ps(p->max);
#define EM_CLAMP(v) v = _mm512_min_ps(hi, _mm512_max_ps(lo, v))
  EM_CLAMP(v00), EM_CLAMP(v01), EM_CLAMP(v10), EM_CLAMP(v11), EM_CLAMP(v20), EM_CLAMP(v21);
  EM_CLAMP(v30), EM_CLAMP(v31), EM_CLAMP(v40), EM_CLAMP(v41), EM_CLAMP(v50), EM_CLAMP(v51);
#undef EM_CLAMP
  _mm512_mask_storeu_ps(c5, k0, v50), _mm512_mask_storeu_ps(c5 + 16, k1, v51);
  _mm512_mask_storeu_ps(c4, k0, v40), _mm512_mask_storeu_ps(c4 + 16, k1, v41);
  _mm512_mask_storeu_ps(c3, k0, v30), _mm512_mask_storeu_ps(c3 + 16, k1, v31);
  _mm512_mask_storeu_ps(c2, k0, v20), _mm512_mask_storeu_ps(c2 + 16, k1, v21);
  _mm512_mask_storeu_ps(c1, k0, v10), _mm512_mask_storeu_ps(c1 + 16, k1, v11);
  _mm512_mask_storeu_ps(c0, k0, v00), _mm512_mask_storeu_ps(c0 + 16, k1, v01);
}
