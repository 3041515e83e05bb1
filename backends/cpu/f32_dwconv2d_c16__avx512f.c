/*
 * f32_dwconv2d_c16__avx512f.c — em_f32_dwconv2d_c16_minmax_ukernel__avx512f: a depthwise
 * conv2d over 16 NCHW channel planes at once, the channels in the vector lanes.
 *
 * On small maps (MobileNets' 7x7 layers) the one-plane kernel (f32_dwconv2d_chw__avx512f.c)
 * fills 7 of 16 lanes a row, or 49 of 64 pixels as a flat plane under a mask per tap, and
 * spends about as long on each plane's set-up as on its products. Here the 16 planes are
 * transposed (16 x 16 blocks: unpacks and lane shuffles) into a zero-padded [rows][columns][16]
 * buffer on the stack, every tap is one FMA of a 16-channel weight vector into a 16-channel
 * accumulator with no mask, and the outputs go back to the planes by the same transpose.
 * Per output row, NB (4, 7 or 14) accumulators; each input vector of the K rows the row's
 * windows cover is loaded once and feeds the K (stride 2: up to K / 2 + 1) accumulators that
 * read it. Measured on 576 planes of 7x7, 5x5 taps: 25 us against 47 us one plane at a time;
 * on 14x14 planes the transposes cost more than the lanes save (0.5-0.8x), so the caller keeps
 * this to small output planes (cpu_op_dwconv.c).
 *
 * Products are summed in the one-plane kernel's order (bias, then taps row by row, column by
 * column), so both give the same bits.
 */
#include <immintrin.h>
#include <string.h>

#include "cpu_ukernels.h"
#include "f32_hswish__avx512f.h"
#include "f32_transpose16__avx512f.h"

static inline __mmask16 lanes(int64_t n) {
  return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1u);
}

/* t[(y + ph) * tw + x + pw][0, 16) = the nc planes' pixel (y, x) (channels past nc zero). */
static void planes_in(const float *in, size_t is, size_t nc, int64_t h, int64_t w, float *t,
                      int64_t tw, int64_t ph, int64_t pw) {
  const int64_t hw = h * w;
  for (int64_t p0 = 0; p0 < hw; p0 += 16) {
    const __mmask16 m = lanes(hw - p0);
    __m512 r[16];
#pragma GCC unroll 16
    for (int c = 0; c < 16; c++)
      r[c] = (size_t)c < nc ? _mm512_maskz_loadu_ps(m, in + c * is + p0) : _mm512_setzero_ps();
    transpose16(r);
    const int64_t n = hw - p0 < 16 ? hw - p0 : 16;
    int64_t y = p0 / w, x = p0 % w;
    for (int64_t i = 0; i < n; i++) {
      _mm512_store_ps(t + ((y + ph) * tw + x + pw) * 16, r[i]);
      if (++x == w) x = 0, y++;
    }
  }
}

/* The nc planes' outputs (n pixels each, os floats apart) from u[n][16]. */
static void planes_out(const float *u, int64_t n, float *out, size_t os, size_t nc) {
  for (int64_t p0 = 0; p0 < n; p0 += 16) {
    const int64_t k = n - p0 < 16 ? n - p0 : 16;
    __m512 r[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++)
      r[i] = i < k ? _mm512_load_ps(u + (p0 + i) * 16) : _mm512_setzero_ps();
    transpose16(r);
    const __mmask16 m = lanes(k);
    for (size_t c = 0; c < nc; c++) _mm512_mask_storeu_ps(out + c * os + p0, m, r[c]);
  }
}

/*
 * Every output row in runs of NB pixels (a last partial run moved back to end at the row's end,
 * recomputing a few pixels with the same values; ow >= NB), K x K taps, stride S; K, S and NB
 * literals after inlining, so the accumulators stay in registers.
 */
static inline __attribute__((always_inline)) void
rows_c16(const float *t, int64_t tw, const __m512 *wv0, __m512 b0, __m512 lo, __m512 hi, float *u,
         int64_t oh, int64_t ow, const int K, const int S, const int NB) {
  for (int64_t oy = 0; oy < oh; oy++)
    for (int64_t ox0 = 0; ox0 < ow; ox0 += NB) {
      const int64_t ox = ox0 + NB <= ow ? ox0 : ow - NB;
      const __m512 *wv = wv0;
      /* the weights are loaded where used: hoisted out of the loops, 25 of them would push the
       * accumulators out of the registers */
      __asm__("" : "+r"(wv));
      __m512 acc[14];
#pragma GCC unroll 14
      for (int i = 0; i < NB; i++) acc[i] = b0;
#pragma GCC unroll 5
      for (int ky = 0; ky < K; ky++) {
        const float *row = t + ((oy * S + ky) * tw + ox * S) * 16;
        __m512 wk[5];
#pragma GCC unroll 5
        for (int kx = 0; kx < K; kx++) wk[kx] = wv[ky * K + kx];
#pragma GCC unroll 32
        for (int j = 0; j < (NB - 1) * S + K; j++) { /* input column j feeds output j - kx */
          const __m512 x = _mm512_load_ps(row + j * 16);
#pragma GCC unroll 5
          for (int kx = 0; kx < K; kx++) {
            const int d = j - kx;
            if (d >= 0 && d % S == 0 && d / S < NB)
              acc[d / S] = _mm512_fmadd_ps(wk[kx], x, acc[d / S]);
          }
        }
      }
#pragma GCC unroll 14
      for (int i = 0; i < NB; i++)
        _mm512_store_ps(u + (oy * ow + ox + i) * 16, _mm512_min_ps(hi, _mm512_max_ps(lo, acc[i])));
    }
}

void em_f32_dwconv2d_c16_minmax_ukernel__avx512f(const em_dw_params *q, size_t nc, const float *in,
                                                 size_t is, const float *w, const float *bias,
                                                 float *out, size_t os, const em_minmax_params *p) {
  _Alignas(64) float t[EM_DW_C16_IN_MAX * 16]; /* 32 KiB */
  _Alignas(64) float u[EM_DW_C16_OUT_MAX * 16];
  const int K = (int)q->kh, S = (int)q->sh, kk = K * K;
  /* The buffer holds the windows' span and the whole plane, whichever reaches further. */
  const int64_t th = (q->oh - 1) * S + K, tw0 = (q->ow - 1) * S + K;
  const int64_t rows = th > q->ph + q->h ? th : q->ph + q->h;
  const int64_t tw = tw0 > q->pw + q->w ? tw0 : q->pw + q->w;
  const __m512 z = _mm512_setzero_ps();
  for (int64_t y = 0; y < rows; y++) { /* zero what the plane does not cover */
    float *r = t + y * tw * 16;
    const int inside = y >= q->ph && y < q->ph + q->h;
    for (int64_t x = 0; x < tw; x++)
      if (!inside || x < q->pw || x >= q->pw + q->w) _mm512_store_ps(r + x * 16, z);
  }
  planes_in(in, is, nc, q->h, q->w, t, tw, q->ph, q->pw);
  __m512 wv[32]; /* tap t's 16 channel weights, from the planes' [K * K] rows */
  for (int half = 0; half * 16 < kk; half++) {
    __m512 r[16];
#pragma GCC unroll 16
    for (int c = 0; c < 16; c++)
      r[c] =
          (size_t)c < nc ? _mm512_maskz_loadu_ps(lanes(kk - 16 * half), w + c * kk + 16 * half) : z;
    transpose16(r);
    for (int i = 0; i < 16; i++) wv[16 * half + i] = r[i];
  }
  const __m512 b0 = bias ? _mm512_maskz_loadu_ps(lanes((int64_t)nc), bias) : z;
  const __m512 lo = _mm512_set1_ps(p->min), hi = _mm512_set1_ps(p->max);
#define EM_C16_ROWS(KK, SS)                                                                        \
  do {                                                                                             \
    if (q->ow >= 14)                                                                               \
      rows_c16(t, tw, wv, b0, lo, hi, u, q->oh, q->ow, KK, SS, 14);                                \
    else if (q->ow >= 7)                                                                           \
      rows_c16(t, tw, wv, b0, lo, hi, u, q->oh, q->ow, KK, SS, 7);                                 \
    else                                                                                           \
      rows_c16(t, tw, wv, b0, lo, hi, u, q->oh, q->ow, KK, SS, 4);                                 \
  } while (0)
  if (K == 3 && S == 1)
    EM_C16_ROWS(3, 1);
  else if (K == 3)
    EM_C16_ROWS(3, 2);
  else if (S == 1)
    EM_C16_ROWS(5, 1);
  else
    EM_C16_ROWS(5, 2);
#undef EM_C16_ROWS
  if (p->hswish) em_hswish_row_f32(u, (size_t)(q->oh * q->ow * 16));
  planes_out(u, q->oh * q->ow, out, os, nc);
}
