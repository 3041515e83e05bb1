/*
 * q8_dq_impl.h — the portable kernels of the dynamic int8 linear layers (EMC_OP_DQ_LINEAR;
 * cpu_ukernels.h has their contracts): the row quantizer (em_q8_rowq_fn) and the tile
 * (em_q8_dq_fn), included by q8_dq__scalar.c and q8_dq__avx2.c, which the compiler vectorizes
 * with that ISA's flags (q8_dq__avx512vnni.c has its own). Define EM_ISA before including.
 *
 * The sums are exact int32 (the operator's check bounds K by 65536, so neither the sums nor
 * acc - za * wsum overflow), and the epilogue is three f32 operations in a fixed order, so
 * every ISA gives the same bits.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "cpu_ukernels.h"

#define EM_DQ_CAT2(a, b) a##b
#define EM_DQ_CAT(a, b)  EM_DQ_CAT2(a, b)

static void EM_DQ_CAT(rowq1_, EM_ISA)(size_t k, const float *x, uint8_t *a, int32_t *za, float *s) {
  const size_t kp = (k + 3) / 4 * 4;
  float mn = INFINITY, mx = -INFINITY;
  int finite = 1;
  for (size_t j = 0; j < k; j++) {
    const float v = x[j];
    finite &= v - v == 0.0f; /* an infinity or a NaN gives NaN */
    mn = v < mn ? v : mn;
    mx = v > mx ? v : mx;
  }
  if (!finite) {
    memset(a, 0, kp);
    *za = 0, *s = NAN;
    return;
  }
  double scale, zp;
  em_q8_token_qparams(mn, mx, &scale, &zp);
  const double inv = 1.0 / scale, zd = nearbyint(zp);
  for (size_t j = 0; j < k; j++) {
    double v = nearbyint((double)x[j] * inv + zd);
    v = v < -128.0 ? -128.0 : v > 127.0 ? 127.0 : v;
    a[j] = (uint8_t)((int32_t)v + 128);
  }
  for (size_t j = k; j < kp; j++) a[j] = (uint8_t)((int32_t)zd + 128);
  *za = (int32_t)zd + 128, *s = (float)scale;
}

void EM_DQ_CAT(em_q8_rowq_ukernel__, EM_ISA)(size_t rows, size_t k, const float *x, uint8_t *a,
                                             size_t as, int32_t *za, float *s) {
  for (size_t i = 0; i < rows; i++)
    EM_DQ_CAT(rowq1_, EM_ISA)(k, x + i * k, a + i * as, za + i, s + i);
}

void EM_DQ_CAT(em_q8_rowt_ukernel__, EM_ISA)(size_t k, const float *x, uint8_t *a,
                                             const em_q8_rowt_params *p, float *mn, float *mx) {
  if (!a) {
    float lo = INFINITY, hi = -INFINITY;
    int nan = 0;
    for (size_t j = 0; j < k; j++) {
      const float v = x[j];
      nan |= v != v;
      lo = v < lo ? v : lo;
      hi = v > hi ? v : hi;
    }
    *mn = nan ? NAN : lo, *mx = nan ? NAN : hi;
    return;
  }
  const float inv = p->inv, zp = p->zp, qmin = p->qmin, qmax = p->qmax;
  for (size_t j = 0; j < k; j++) {
    const float t = x[j] * inv;
    float v = nearbyintf(t) + zp;
    v = v != v ? qmin : v < qmin ? qmin : v > qmax ? qmax : v;
    a[j] = (uint8_t)((int32_t)v + 128);
  }
  for (size_t j = k; j < (k + 3) / 4 * 4; j++) a[j] = (uint8_t)((int32_t)zp + 128);
}

void EM_DQ_CAT(em_q8_dq_ukernel__, EM_ISA)(size_t np, size_t nc, size_t kq, const uint8_t *a,
                                           size_t as, const int8_t *w, const int32_t *wsum,
                                           const float *ws, const float *bias, const float *res,
                                           const int32_t *za, const float *s, float *y, size_t ys,
                                           size_t cs) {
  for (size_t i = 0; i < np; i++) {
    const uint8_t *ar = a + i * as;
    int32_t acc[32];
    memset(acc, 0, sizeof acc);
    for (size_t b = 0; b * 16 < nc; b++) {
      const int8_t *wb = w + b * kq * 64;
      int32_t *ab = acc + b * 16;
      for (size_t q = 0; q < kq; q++) {
        const int32_t a0 = ar[q * 4], a1 = ar[q * 4 + 1], a2 = ar[q * 4 + 2], a3 = ar[q * 4 + 3];
        const int8_t *wq = wb + q * 64;
        for (size_t c = 0; c < 16; c++)
          ab[c] += a0 * wq[c * 4] + a1 * wq[c * 4 + 1] + a2 * wq[c * 4 + 2] + a3 * wq[c * 4 + 3];
      }
    }
    const float si = s[i];
    const int64_t zi = za[i];
    for (size_t c = 0; c < nc; c++) {
      const float t = (float)((int64_t)acc[c] - zi * wsum[c]);
      float v = t * (si * ws[c]);
      if (bias) v += bias[c];
      if (res) v += res[i * ys + c];
      y[i * ys + c * cs] = v;
    }
  }
}
