/*
 * f32_gemm_6x16__neon.c — em_f32_gemm_minmax_ukernel_6x16__neon (AArch64 Advanced SIMD).
 *
 * 6 rows x 16 columns = 24 q-register accumulators, 4 more for a B row and 2 for the A column:
 * 30 of AArch64's 32 vector registers. NR = 16 is exactly one packed B panel (EMC_NR_PANEL), so
 * files exported on x86 run unchanged and b_next is never needed. A 6-row packed A panel
 * (a_rs = 1, the conv weights) is read as one 4 + 2 float load per k with by-lane FMAs; a
 * strided A (activations) one float per row. NEON has no masked loads: a column tail (nc < 16)
 * goes through a zero-padded copy of each B row, C row and bias, so nothing past nc is read or
 * written. Rows past mr alias the previous row (computed twice, stored once with equal values).
 * Compiles to nothing except on AArch64, where NEON is part of the baseline.
 */
#include "cpu_ukernels.h"

#if defined(__aarch64__)
#include <arm_neon.h>
#include <string.h>

/* Loads n <= 16 floats into four vectors, zero past n (reads nothing past p + n). */
static inline void load_16(const float *p, size_t n, float32x4_t v[4]) {
  float t[16];
  if (n < 16) {
    memset(t, 0, sizeof t);
    memcpy(t, p, n * sizeof *p);
    p = t;
  }
  v[0] = vld1q_f32(p), v[1] = vld1q_f32(p + 4), v[2] = vld1q_f32(p + 8), v[3] = vld1q_f32(p + 12);
}

/* Stores the first n <= 16 lanes of four vectors to p. */
static inline void store_16(float *p, size_t n, const float32x4_t v[4]) {
  if (n == 16) {
    vst1q_f32(p, v[0]), vst1q_f32(p + 4, v[1]), vst1q_f32(p + 8, v[2]), vst1q_f32(p + 12, v[3]);
    return;
  }
  float t[16];
  vst1q_f32(t, v[0]), vst1q_f32(t + 4, v[1]), vst1q_f32(t + 8, v[2]), vst1q_f32(t + 12, v[3]);
  memcpy(p, t, n * sizeof *p);
}

/* Row r's four accumulators += x * (w0 | w1 | w2 | w3), x a scalar. */
#define ROW_N(r, x)                                                                                \
  v##r##0 = vfmaq_n_f32(v##r##0, w0, x), v##r##1 = vfmaq_n_f32(v##r##1, w1, x),                    \
  v##r##2 = vfmaq_n_f32(v##r##2, w2, x), v##r##3 = vfmaq_n_f32(v##r##3, w3, x)
/* The same with x = lane l of vector xv (laneq: 4 lanes, lane: 2 lanes). */
#define ROW_LANE(r, fma, xv, l)                                                                    \
  v##r##0 = fma(v##r##0, w0, xv, l), v##r##1 = fma(v##r##1, w1, xv, l),                            \
  v##r##2 = fma(v##r##2, w2, xv, l), v##r##3 = fma(v##r##3, w3, xv, l)

EM_GEMM_UKERNEL_DECL(em_f32_gemm_minmax_ukernel_6x16__neon) {
  (void)a_pf; /* only the 6x64 kernel prefetches the next A panel */
  (void)b_next;
  const float *ap[6];
  float *cp[6];
  em_gemm_tile_rows(mr, a, a_rs, c, ldc, ap, cp);
  float32x4_t v[6][4];
  if (accumulate) {
    for (int r = 0; r < 6; r++) load_16(cp[r], nc, v[r]);
  } else {
    float32x4_t bn[4] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f),
                         vdupq_n_f32(0.0f)};
    if (bias_n) load_16(bias_n, nc, bn);
    for (int r = 0; r < 6; r++) {
      const float32x4_t bm = vdupq_n_f32(bias_m ? bias_m[(size_t)r < mr ? (size_t)r : mr - 1] : 0);
      for (int j = 0; j < 4; j++) v[r][j] = vaddq_f32(bn[j], bm);
    }
  }
  float32x4_t v00 = v[0][0], v01 = v[0][1], v02 = v[0][2], v03 = v[0][3];
  float32x4_t v10 = v[1][0], v11 = v[1][1], v12 = v[1][2], v13 = v[1][3];
  float32x4_t v20 = v[2][0], v21 = v[2][1], v22 = v[2][2], v23 = v[2][3];
  float32x4_t v30 = v[3][0], v31 = v[3][1], v32 = v[3][2], v33 = v[3][3];
  float32x4_t v40 = v[4][0], v41 = v[4][1], v42 = v[4][2], v43 = v[4][3];
  float32x4_t v50 = v[5][0], v51 = v[5][1], v52 = v[5][2], v53 = v[5][3];
  float32x4_t w0, w1, w2, w3;
  if (nc == 16 && mr == 6 && a_rs == 1) {
    /* A packed panel: the 6 rows of column k are contiguous. */
    for (size_t k = 0; k < kc; k++) {
      w0 = vld1q_f32(b), w1 = vld1q_f32(b + 4), w2 = vld1q_f32(b + 8), w3 = vld1q_f32(b + 12);
      b += ldb;
      const float32x4_t x0123 = vld1q_f32(a);
      const float32x2_t x45 = vld1_f32(a + 4);
      a += a_ks;
      ROW_LANE(0, vfmaq_laneq_f32, x0123, 0);
      ROW_LANE(1, vfmaq_laneq_f32, x0123, 1);
      ROW_LANE(2, vfmaq_laneq_f32, x0123, 2);
      ROW_LANE(3, vfmaq_laneq_f32, x0123, 3);
      ROW_LANE(4, vfmaq_lane_f32, x45, 0);
      ROW_LANE(5, vfmaq_lane_f32, x45, 1);
    }
  } else {
    const float *a0 = ap[0], *a1 = ap[1], *a2 = ap[2], *a3 = ap[3], *a4 = ap[4], *a5 = ap[5];
    for (size_t k = 0; k < kc; k++) {
      if (nc == 16) {
        w0 = vld1q_f32(b), w1 = vld1q_f32(b + 4), w2 = vld1q_f32(b + 8), w3 = vld1q_f32(b + 12);
      } else {
        float32x4_t w[4];
        load_16(b, nc, w);
        w0 = w[0], w1 = w[1], w2 = w[2], w3 = w[3];
      }
      b += ldb;
      ROW_N(0, *a0), a0 += a_ks;
      ROW_N(1, *a1), a1 += a_ks;
      ROW_N(2, *a2), a2 += a_ks;
      ROW_N(3, *a3), a3 += a_ks;
      ROW_N(4, *a4), a4 += a_ks;
      ROW_N(5, *a5), a5 += a_ks;
    }
  }
  v[0][0] = v00, v[0][1] = v01, v[0][2] = v02, v[0][3] = v03;
  v[1][0] = v10, v[1][1] = v11, v[1][2] = v12, v[1][3] = v13;
  v[2][0] = v20, v[2][1] = v21, v[2][2] = v22, v[2][3] = v23;
  v[3][0] = v30, v[3][1] = v31, v[3][2] = v32, v[3][3] = v33;
  v[4][0] = v40, v[4][1] = v41, v[4][2] = v42, v[4][3] = v43;
  v[5][0] = v50, v[5][1] = v51, v[5][2] = v52, v[5][3] = v53;
  const float32x4_t lo = vdupq_n_f32(p->min), hi = vdupq_n_f32(p->max);
  for (int r = 5; r >= 0; r--) {
    for (int j = 0; j < 4; j++) v[r][j] = vminq_f32(vmaxq_f32(v[r][j], lo), hi);
    store_16(cp[r], nc, v[r]);
  }
}
#endif /* __aarch64__ */
