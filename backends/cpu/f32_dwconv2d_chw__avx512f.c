/*
 * f32_dwconv2d_chw__avx512f.c — em_f32_dwconv2d_chw_minmax_ukernel__avx512f:
 * depthwise conv2d over one NCHW channel plane with AVX-512.
 *
 * The plane is first copied into a zero-padded buffer on the stack (for
 * stride 2, split into even and odd columns), so every tap of a 16-wide run
 * of outputs is one unaligned (masked at the row's end) load and one FMA into
 * a register that holds the run across all kh * kw taps: no bounds checks and
 * no output round trips. Planes too big for the stack buffer, and strides
 * above 2, go to the generic kernel.
 */
#include <immintrin.h>
#include <string.h>

#include "cpu_ukernels.h"

#define PAD_FLOATS 24576 /* 96 KiB of stack */

__attribute__((target("avx512f"))) void
em_f32_dwconv2d_chw_minmax_ukernel__avx512f(const em_dw_params *q, const float *in, const float *w,
                                            float bias, float *out, const em_minmax_params *p) {
  const int64_t s = q->sw;
  const int64_t ph = q->h + 2 * q->ph, pw = q->w + 2 * q->pw;
  const int64_t cols = s == 2 ? (pw + 1) / 2 : pw; /* width of each (de-interleaved) plane */
  if (q->sh != s || s > 2 || ph * cols * s > PAD_FLOATS || q->kh * q->kw > 64) {
    em_f32_dwconv2d_minmax_ukernel__avx512f(q, in, w, bias, out, p);
    return;
  }
  float buf[PAD_FLOATS];
  float trow[2 * 2048 + 64];
  if (s == 2 && cols > 2048) {
    em_f32_dwconv2d_minmax_ukernel__avx512f(q, in, w, bias, out, p);
    return;
  }
  const __m512i ieven =
      _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i iodd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  float *even = buf, *odd = buf + ph * cols;
  memset(buf, 0, (size_t)(ph * cols * s) * sizeof *buf);
  for (int64_t y = 0; y < q->h; y++) {
    const float *src = in + y * q->w;
    if (s == 1) {
      memcpy(even + (y + q->ph) * cols + q->pw, src, (size_t)q->w * sizeof *src);
    } else {
      /* The padded row, then even / odd columns 16 at a time. */
      float *e = even + (y + q->ph) * cols, *o = odd + (y + q->ph) * cols;
      memset(trow, 0, (size_t)q->pw * sizeof *trow);
      memcpy(trow + q->pw, src, (size_t)q->w * sizeof *src);
      memset(trow + q->pw + q->w, 0, (size_t)(2 * cols + 32 - q->pw - q->w) * sizeof *trow);
      for (int64_t i = 0; i < cols; i += 16) {
        const int64_t n = cols - i < 16 ? cols - i : 16;
        const __mmask16 m = (__mmask16)((1u << n) - 1u);
        const __m512 a = _mm512_loadu_ps(trow + 2 * i), b = _mm512_loadu_ps(trow + 2 * i + 16);
        _mm512_mask_storeu_ps(e + i, m, _mm512_permutex2var_ps(a, ieven, b));
        _mm512_mask_storeu_ps(o + i, m, _mm512_permutex2var_ps(a, iodd, b));
      }
    }
  }
  __m512 wv[64];
  for (int64_t t = 0; t < q->kh * q->kw; t++) wv[t] = _mm512_set1_ps(w[t]);
  const __m512 lo = _mm512_set1_ps(p->min), hi = _mm512_set1_ps(p->max), b0 = _mm512_set1_ps(bias);
  for (int64_t oy = 0; oy < q->oh; oy++) {
    float *orow = out + oy * q->ow;
    for (int64_t ox = 0; ox < q->ow; ox += 16) {
      const int64_t n = q->ow - ox < 16 ? q->ow - ox : 16;
      const __mmask16 m = (__mmask16)((1u << n) - 1u);
      __m512 acc = b0, acc2 = _mm512_setzero_ps();
      for (int64_t ky = 0; ky < q->kh; ky++) {
        const int64_t row = (oy * s + ky * q->dh) * cols;
        for (int64_t kx = 0; kx < q->kw; kx++) {
          const int64_t c = kx * q->dw;
          const float *src =
              s == 1 ? even + row + ox + c : ((c & 1) ? odd : even) + row + ox + (c >> 1);
          const __m512 v = _mm512_maskz_loadu_ps(m, src);
          if (kx & 1)
            acc2 = _mm512_fmadd_ps(wv[ky * q->kw + kx], v, acc2);
          else
            acc = _mm512_fmadd_ps(wv[ky * q->kw + kx], v, acc);
        }
      }
      acc = _mm512_add_ps(acc, acc2);
      acc = _mm512_min_ps(_mm512_max_ps(acc, lo), hi);
      _mm512_mask_storeu_ps(orow + ox, m, acc);
    }
  }
}
