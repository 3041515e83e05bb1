/*
 * f32_conv2d_chw_smallc__avx512f.c — em_f32_conv2d_smallc_minmax_ukernel__avx512f: a direct
 * NCHW conv2d for few input channels (a network's stem: 3 channels, 3x3 or 7x7, stride 2).
 *
 * Such a conv is a GEMM of depth cin * kh * kw = 27 or 147 and few rows (16-64 channels): the
 * im2col copy costs more than the products, and a 6-row tile wastes a third of its FMAs on 16
 * channels. Here 16 output pixels of one row are one vector and 16 output channels are 16
 * accumulators: every tap is loaded once per 16 pixels (stride 2: 32 columns, split into the
 * even ones by a permute), masked where it falls into the padding, and feeds 16 FMAs whose
 * weights are broadcast from a [depth][16] block the caller builds.
 */
#include <immintrin.h>

#include "cpu_ukernels.h"
#include "f32_hswish__avx512f.h"

/* Lanes [lo, hi) of n <= 32 set (lo, hi clamped to [0, n]). */
static inline uint32_t lane_range(int64_t lo, int64_t hi, int64_t n) {
  if (lo < 0) lo = 0;
  if (hi > n) hi = n;
  if (hi <= lo) return 0;
  const uint32_t upto = hi >= 32 ? 0xFFFFFFFFu : (1u << hi) - 1u;
  return upto & ~((1u << lo) - 1u);
}

/* Output row oy, the run of 16 columns from ox (lanes of them, m0 / m1 each kx's load masks); HS
 * (a constant where it is called): the hardswish after the clamp. */
static inline __attribute__((always_inline)) void
smallc_run(const em_dw_params *q, int64_t cin, int64_t oy, int64_t ox, int64_t lanes,
           const __mmask16 *m0, const __mmask16 *m1, const float *in, const float *wb,
           const float *bz, int64_t nco, float *out, __m512 lo, __m512 hi, const int HS) {
  const int64_t h = q->h, w = q->w, ow = q->ow, kh = q->kh, kw = q->kw, s = q->sw;
  const __m512i ieven = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  __m512 acc[16];
#pragma GCC unroll 16
  for (int c = 0; c < 16; c++) acc[c] = _mm512_set1_ps(bz[c]);
  /* the taps' rows inside the image: ky in [ky0, ky1) */
  const int64_t iy0 = oy * q->sh - q->ph;
  const int64_t ky0 = iy0 < 0 ? -iy0 : 0, ky1 = h - iy0 < kh ? h - iy0 : kh;
  for (int64_t ci = 0; ci < cin; ci++) {
    const float *wk = wb + (ci * kh + ky0) * kw * 16;
    for (int64_t ky = ky0; ky < ky1; ky++) {
      /* lane 0's column for kx = 0 (maybe left of the row: those lanes are masked) */
      const char *row = (const char *)(in + (ci * h + iy0 + ky) * w) + (ox * s - q->pw) * 4;
      for (int64_t kx = 0; kx < kw; kx++, wk += 16) {
        __m512 v;
        if (s == 1) {
          v = _mm512_maskz_loadu_ps(m0[kx], row + kx * 4);
        } else { /* lanes' columns ix + 2 j: the even ones of 32 */
          const __m512 a = _mm512_maskz_loadu_ps(m0[kx], row + kx * 4);
          const __m512 b = _mm512_maskz_loadu_ps(m1[kx], row + (kx + 16) * 4);
          v = _mm512_permutex2var_ps(a, ieven, b);
        }
#pragma GCC unroll 16
        for (int c = 0; c < 16; c++) acc[c] = _mm512_fmadd_ps(v, _mm512_set1_ps(wk[c]), acc[c]);
      }
    }
  }
  const __mmask16 sm = (__mmask16)lane_range(0, lanes, 16);
  float *o = out + oy * ow + ox;
#pragma GCC unroll 16
  for (int c = 0; c < 16; c++)
    if (c < nco) {
      const __m512 v = _mm512_min_ps(_mm512_max_ps(acc[c], lo), hi);
      _mm512_mask_storeu_ps(o + c * q->oh * ow, sm, HS ? em_hswish_f32x16(v) : v);
    }
}

void em_f32_conv2d_smallc_minmax_ukernel__avx512f(const em_dw_params *q, int64_t cin, int64_t oy0,
                                                  int64_t oy1, const float *in, const float *wb,
                                                  const float *bias, int64_t nco, float *out,
                                                  const em_minmax_params *p) {
  const int64_t w = q->w, ow = q->ow, kw = q->kw, s = q->sw;
  const __m512 lo = _mm512_set1_ps(p->min), hi = _mm512_set1_ps(p->max);
  const int hs = p->hswish != 0;
  float bz[16];
  for (int c = 0; c < 16; c++) bz[c] = bias && c < nco ? bias[c] : 0.0f;
  /* row by row (the band's input rows stay in L1 across its columns), 16 outputs at a time; the
   * taps' rows inside the image found once a run, not tested tap by tap, and the hardswish
   * choice made once, not in every store */
  for (int64_t oy = oy0; oy < oy1; oy++)
    for (int64_t ox = 0; ox < ow; ox += 16) {
      const int64_t lanes = ow - ox < 16 ? ow - ox : 16;
      /* each kx's load masks for this run of lanes (the padding columns masked off) */
      __mmask16 m0[EM_SMALLC_MAX_KW], m1[EM_SMALLC_MAX_KW];
      for (int64_t kx = 0; kx < kw; kx++) {
        const int64_t ix = ox * s + kx - q->pw; /* input column of lane 0 */
        const uint32_t m = lane_range(-ix, w - ix, s == 1 ? lanes : 2 * lanes - 1);
        m0[kx] = (__mmask16)(m & 0xFFFFu), m1[kx] = (__mmask16)(m >> 16);
      }
      if (hs)
        smallc_run(q, cin, oy, ox, lanes, m0, m1, in, wb, bz, nco, out, lo, hi, 1);
      else
        smallc_run(q, cin, oy, ox, lanes, m0, m1, in, wb, bz, nco, out, lo, hi, 0);
    }
}
