/*
 * f32_gemm_6x48__avx512f.c — em_f32_gemm_minmax_ukernel_6x48__avx512f.
 *
 * 6 rows x 48 columns = 18 zmm accumulators: three B vectors per k, each A
 * broadcast feeding three FMAs, so loads per FMA drop to 9/18 (6x32: 8/12).
 * Measured ~10-15 % faster than 6x32 on Sapphire Rapids-class Xeons. Columns
 * 16..31 are at b + b_next, 32..47 at b + 2 * b_next (16-column panels);
 * tails (nc < 48) use masked loads and stores; rows past mr alias the
 * previous row.
 */
#include <immintrin.h>

#include "cpu_ukernels.h"

static inline __mmask16 lane_mask(size_t nc, size_t from) {
  if (nc <= from) return 0;
  size_t n = nc - from;
  return n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1u);
}

__attribute__((target("avx512f"))) EM_GEMM_UKERNEL_DECL(em_f32_gemm_minmax_ukernel_6x48__avx512f) {
  const float *ap[6];
  float *cp[6];
  ap[0] = a, cp[0] = c;
  for (int r = 1; r < 6; r++) {
    ap[r] = (size_t)r < mr ? ap[r - 1] + a_rs : ap[r - 1];
    cp[r] = (size_t)r < mr ? cp[r - 1] + ldc : cp[r - 1];
  }
  const __mmask16 k0 = lane_mask(nc, 0), k1 = lane_mask(nc, 16), k2 = lane_mask(nc, 32);
  __m512 v[6][3];
  if (accumulate) {
    for (int r = 0; r < 6; r++) {
      v[r][0] = _mm512_maskz_loadu_ps(k0, cp[r]);
      v[r][1] = _mm512_maskz_loadu_ps(k1, cp[r] + 16);
      v[r][2] = _mm512_maskz_loadu_ps(k2, cp[r] + 32);
    }
  } else {
    __m512 n0 = _mm512_setzero_ps(), n1 = n0, n2 = n0;
    if (bias_n) {
      n0 = _mm512_maskz_loadu_ps(k0, bias_n);
      n1 = _mm512_maskz_loadu_ps(k1, bias_n + 16);
      n2 = _mm512_maskz_loadu_ps(k2, bias_n + 32);
    }
    for (int r = 0; r < 6; r++) {
      __m512 bm = _mm512_set1_ps(bias_m ? bias_m[(size_t)r < mr ? (size_t)r : mr - 1] : 0.0f);
      v[r][0] = _mm512_add_ps(n0, bm), v[r][1] = _mm512_add_ps(n1, bm),
      v[r][2] = _mm512_add_ps(n2, bm);
    }
  }
  __m512 a00 = v[0][0], a01 = v[0][1], a02 = v[0][2], a10 = v[1][0], a11 = v[1][1], a12 = v[1][2];
  __m512 a20 = v[2][0], a21 = v[2][1], a22 = v[2][2], a30 = v[3][0], a31 = v[3][1], a32 = v[3][2];
  __m512 a40 = v[4][0], a41 = v[4][1], a42 = v[4][2], a50 = v[5][0], a51 = v[5][1], a52 = v[5][2];
  const float *a0 = ap[0], *a1 = ap[1], *a2 = ap[2], *a3 = ap[3], *a4 = ap[4], *a5 = ap[5];
  const float *b1 = b + b_next, *b2 = b + 2 * b_next;
#define EM_ROW(r, xv)                                                                              \
  x = (xv);                                                                                        \
  a##r##0 = _mm512_fmadd_ps(x, w0, a##r##0), a##r##1 = _mm512_fmadd_ps(x, w1, a##r##1),            \
  a##r##2 = _mm512_fmadd_ps(x, w2, a##r##2)
  if (nc == 48 && mr == 6 && a_rs == 1 && a_ks == 6) {
    /* Full tile from a packed A panel: one A pointer, unmasked loads. */
    for (size_t k = 0; k < kc; k++) {
      const __m512 w0 = _mm512_loadu_ps(b + k * ldb);
      const __m512 w1 = _mm512_loadu_ps(b1 + k * ldb);
      const __m512 w2 = _mm512_loadu_ps(b2 + k * ldb);
      const float *ak = a + 6 * k;
      __m512 x;
      EM_ROW(0, _mm512_set1_ps(ak[0]));
      EM_ROW(1, _mm512_set1_ps(ak[1]));
      EM_ROW(2, _mm512_set1_ps(ak[2]));
      EM_ROW(3, _mm512_set1_ps(ak[3]));
      EM_ROW(4, _mm512_set1_ps(ak[4]));
      EM_ROW(5, _mm512_set1_ps(ak[5]));
    }
  } else {
    for (size_t k = 0; k < kc; k++) {
      const __m512 w0 = _mm512_maskz_loadu_ps(k0, b + k * ldb);
      const __m512 w1 = _mm512_maskz_loadu_ps(k1, b1 + k * ldb);
      const __m512 w2 = _mm512_maskz_loadu_ps(k2, b2 + k * ldb);
      __m512 x;
      EM_ROW(0, _mm512_set1_ps(a0[k * a_ks]));
      EM_ROW(1, _mm512_set1_ps(a1[k * a_ks]));
      EM_ROW(2, _mm512_set1_ps(a2[k * a_ks]));
      EM_ROW(3, _mm512_set1_ps(a3[k * a_ks]));
      EM_ROW(4, _mm512_set1_ps(a4[k * a_ks]));
      EM_ROW(5, _mm512_set1_ps(a5[k * a_ks]));
    }
  }
#undef EM_ROW
  v[0][0] = a00, v[0][1] = a01, v[0][2] = a02, v[1][0] = a10, v[1][1] = a11, v[1][2] = a12;
  v[2][0] = a20, v[2][1] = a21, v[2][2] = a22, v[3][0] = a30, v[3][1] = a31, v[3][2] = a32;
  v[4][0] = a40, v[4][1] = a41, v[4][2] = a42, v[5][0] = a50, v[5][1] = a51, v[5][2] = a52;
  const __m512 lo = _mm512_set1_ps(p->min), hi = _mm512_set1_ps(p->max);
  for (int r = 5; r >= 0; r--) {
    _mm512_mask_storeu_ps(cp[r], k0, _mm512_min_ps(_mm512_max_ps(v[r][0], lo), hi));
    _mm512_mask_storeu_ps(cp[r] + 16, k1, _mm512_min_ps(_mm512_max_ps(v[r][1], lo), hi));
    _mm512_mask_storeu_ps(cp[r] + 32, k2, _mm512_min_ps(_mm512_max_ps(v[r][2], lo), hi));
  }
}
