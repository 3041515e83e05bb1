/*
 * q8_dwconv__avx512vnni.c — the int8 depthwise conv's output row (em_q8_dw_params in
 * cpu_ukernels.h) with AVX-512: 16 channels at a time, each tap's 16 inputs (u8 values widened
 * to f32 once, by the caller) multiply-added with the tap's int8 weights (exact: the products
 * and sums are integers below 2^24, so any order gives the same sum), then the scale, bias and
 * the output's quantization (em_q8_quant1's bytes, in em_q8_quant_bounds's short form), so the
 * bytes are the portable row's (q8_gemm_impl.h). 3x3 kernels keep their 9 weight vectors in
 * registers and sum each row of taps on its own chain; 5x5 ones widen each input column once
 * for four outputs. Also the int8 add's row (em_q8_add_params: each operand dequantized, the sum
 * quantized by the same epilogue). Compiled with the VNNI file's flags; uses AVX-512 F only.
 */
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include "cpu_ukernels.h"

/* 16 u8 values (under mask k; FULL: all 16, the load folded into the widening) widened to f32. */
static inline __attribute__((always_inline)) __m512 ld16(__mmask16 k, const uint8_t *p,
                                                         const int FULL) {
  if (FULL) return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const void *)p)));
  const __m512i u = _mm512_maskz_loadu_epi8((__mmask64)k, p);
  return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm512_castsi512_si128(u)));
}

typedef struct q8_out {
  __m512 corr, scale, bias, inv, flo, fhi; /* em_q8_quant_bounds */
  __m512i zp, lo;
} q8_out;

/* t quantized to em_q8_quant1's bytes (in em_q8_quant_bounds's short form; LOW 0 where the
 * lower clamp maps to lo: the last max takes it), 16 bytes stored under mask k. */
static inline __attribute__((always_inline)) void quant_q8(const q8_out *q, __m512 t, uint8_t *dst,
                                                           __mmask16 k, const int LOW) {
  t = _mm512_mul_ps(t, q->inv);
  if (LOW) t = _mm512_max_ps(q->flo, t);
  t = _mm512_min_ps(q->fhi, t); /* NaN stays */
  __m512i r = _mm512_cvt_roundps_epi32(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  r = _mm512_max_epi32(_mm512_add_epi32(r, q->zp), q->lo); /* NaN: lo */
  _mm512_mask_cvtepi32_storeu_epi8(dst, k, r);
}

/* y = (acc - corr) * scale + bias, quantized (quant_q8), 16 bytes stored under mask k. */
static inline __attribute__((always_inline)) void store_q8(const q8_out *q, __m512 acc,
                                                           uint8_t *dst, __mmask16 k) {
  quant_q8(q, _mm512_add_ps(_mm512_mul_ps(_mm512_sub_ps(acc, q->corr), q->scale), q->bias), dst, k,
           1);
}

/*
 * Outputs [0, ow) of 16 channels (lanes under k) four at a time: per tap row, the 4 windows'
 * KW + 3 S input columns (stride S columns) widened once and shared by their taps, instead of
 * each tap widening its own (5x5 windows: 45 instead of 75 operations an output). The last
 * block ends at ow, recomputing up to 3 outputs (the same bytes). KW and S are constants where
 * it is called, so the columns stay in registers. Needs ow >= 4.
 */
static inline __attribute__((always_inline)) void
dw_block4(const uint8_t *s, uint8_t *dst, size_t ow, size_t kh, size_t dy, size_t dx, size_t cpo,
          const float *w, size_t cw, const q8_out *q, __mmask16 k, const size_t KW, const size_t S,
          const int FULL) {
  for (size_t b = 0; b < ow; b += 4) {
    const size_t o = b + 4 <= ow ? b : ow - 4;
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                     _mm512_setzero_ps()};
    for (size_t ky = 0; ky < kh; ky++) {
      const uint8_t *sr = s + o * S * dx + ky * dy;
      __m512 col[3 * 2 + 7];
#pragma GCC unroll 16
      for (size_t i = 0; i < KW + 3 * S; i++) col[i] = ld16(k, sr + i * dx, FULL);
#pragma GCC unroll 8
      for (size_t kx = 0; kx < KW; kx++) {
        const __m512 wv = _mm512_loadu_ps(w + (ky * KW + kx) * cw);
#pragma GCC unroll 4
        for (size_t j = 0; j < 4; j++) acc[j] = _mm512_fmadd_ps(col[j * S + kx], wv, acc[j]);
      }
    }
    for (size_t j = 0; j < 4; j++) store_q8(q, acc[j], dst + (o + j) * cpo, k);
  }
}

/*
 * Two output rows of a 5x5 stride-1 conv, outputs [0, ow) four at a time: the 6 input rows the
 * two windows span, each row's 8 columns widened once and shared by both rows' taps (the second
 * row's tap row r - 1), instead of widening the 4 shared rows again for the second output row.
 * Needs ow >= 4.
 */
static inline __attribute__((always_inline)) void
dw_block4x2(const uint8_t *s, uint8_t *dst, size_t orow, size_t ow, size_t dy, size_t dx,
            size_t cpo, const float *w, size_t cw, const q8_out *q, __mmask16 k, const int FULL) {
  for (size_t b = 0; b < ow; b += 4) {
    const size_t o = b + 4 <= ow ? b : ow - 4;
    __m512 a0[4], a1[4];
    for (size_t j = 0; j < 4; j++) a0[j] = _mm512_setzero_ps(), a1[j] = _mm512_setzero_ps();
#pragma GCC unroll 6
    for (size_t r = 0; r < 6; r++) {
      const uint8_t *sr = s + o * dx + r * dy;
      __m512 col[8];
#pragma GCC unroll 8
      for (size_t i = 0; i < 8; i++) col[i] = ld16(k, sr + i * dx, FULL);
      if (r < 5)
#pragma GCC unroll 5
        for (size_t kx = 0; kx < 5; kx++) {
          const __m512 wv = _mm512_loadu_ps(w + (r * 5 + kx) * cw);
#pragma GCC unroll 4
          for (size_t j = 0; j < 4; j++) a0[j] = _mm512_fmadd_ps(col[j + kx], wv, a0[j]);
        }
      if (r >= 1)
#pragma GCC unroll 5
        for (size_t kx = 0; kx < 5; kx++) {
          const __m512 wv = _mm512_loadu_ps(w + ((r - 1) * 5 + kx) * cw);
#pragma GCC unroll 4
          for (size_t j = 0; j < 4; j++) a1[j] = _mm512_fmadd_ps(col[j + kx], wv, a1[j]);
        }
    }
    for (size_t j = 0; j < 4; j++) {
      store_q8(q, a0[j], dst + (o + j) * cpo, k);
      store_q8(q, a1[j], dst + orow + (o + j) * cpo, k);
    }
  }
}

/* One block of 16 channels (c; lanes under k, all of them when FULL) of the output row. */
static inline __attribute__((always_inline)) void dw_chans(const uint8_t *in, uint8_t *out,
                                                           const em_q8_dw_params *p,
                                                           const q8_out *qo, size_t c, __mmask16 k,
                                                           const int FULL) {
  const size_t ow = p->ow, cpo = p->cpo, kh = p->kh, kw = p->kw, cw = p->cw;
  const size_t step = p->step, dy = p->dy, dx = p->dx;
  const float *w = p->w;
  q8_out q = *qo;
  q.corr = _mm512_loadu_ps(p->corr + c), q.scale = _mm512_loadu_ps(p->scale + c);
  q.bias = _mm512_loadu_ps(p->bias + c);
  if (kh == 3 && kw == 3 && (step == dx || step == 2 * dx)) {
    /* Windows that share input columns (stride 1 or 2 with dilation 1 across, or stride =
     * dilation): each column's three u8 rows are widened once and kept for the next window
     * (stride 1: two of its three columns, stride 2: one), not three times. */
    __m512 wv[9];
    for (int t = 0; t < 9; t++) wv[t] = _mm512_loadu_ps(w + (size_t)t * cw + c);
    const uint8_t *s = in + c;
    __m512 a0 = ld16(k, s, FULL), a1 = ld16(k, s + dy, FULL), a2 = ld16(k, s + 2 * dy, FULL);
    __m512 b0 = a0, b1 = a1, b2 = a2;
    if (step == dx)
      b0 = ld16(k, s + dx, FULL), b1 = ld16(k, s + dy + dx, FULL),
      b2 = ld16(k, s + 2 * dy + dx, FULL);
    for (size_t o = 0; o < ow; o++) {
      const uint8_t *sc = s + o * step + 2 * dx; /* the window's last column */
      if (step != dx) {
        const uint8_t *sb = sc - dx;
        b0 = ld16(k, sb, FULL), b1 = ld16(k, sb + dy, FULL), b2 = ld16(k, sb + 2 * dy, FULL);
      }
      const __m512 c0 = ld16(k, sc, FULL), c1 = ld16(k, sc + dy, FULL),
                   c2 = ld16(k, sc + 2 * dy, FULL);
      const __m512 r0 =
          _mm512_fmadd_ps(c0, wv[2], _mm512_fmadd_ps(b0, wv[1], _mm512_mul_ps(a0, wv[0])));
      const __m512 r1 =
          _mm512_fmadd_ps(c1, wv[5], _mm512_fmadd_ps(b1, wv[4], _mm512_mul_ps(a1, wv[3])));
      const __m512 r2 =
          _mm512_fmadd_ps(c2, wv[8], _mm512_fmadd_ps(b2, wv[7], _mm512_mul_ps(a2, wv[6])));
      store_q8(&q, _mm512_add_ps(_mm512_add_ps(r0, r1), r2), out + o * cpo + c, k);
      if (step == dx)
        a0 = b0, a1 = b1, a2 = b2, b0 = c0, b1 = c1, b2 = c2;
      else
        a0 = c0, a1 = c1, a2 = c2;
    }
    return;
  }
  if (kh == 3 && kw == 3) {
    __m512 wv[9];
    for (int t = 0; t < 9; t++) wv[t] = _mm512_loadu_ps(w + (size_t)t * cw + c);
    for (size_t o = 0; o < ow; o++) {
      const uint8_t *s = in + o * step + c;
      __m512 r[3];
      for (int ky = 0; ky < 3; ky++) {
        const uint8_t *sr = s + (size_t)ky * dy;
        __m512 a = _mm512_mul_ps(ld16(k, sr, FULL), wv[3 * ky]);
        a = _mm512_fmadd_ps(ld16(k, sr + dx, FULL), wv[3 * ky + 1], a);
        r[ky] = _mm512_fmadd_ps(ld16(k, sr + 2 * dx, FULL), wv[3 * ky + 2], a);
      }
      store_q8(&q, _mm512_add_ps(_mm512_add_ps(r[0], r[1]), r[2]), out + o * cpo + c, k);
    }
    return;
  }
  if (kw == 5 && ow >= 4 && (step == dx || step == 2 * dx)) { /* MobileNetV3's, EfficientNet's */
    if (step == dx)
      dw_block4(in + c, out + c, ow, kh, dy, dx, cpo, w + c, cw, &q, k, 5, 1, FULL);
    else
      dw_block4(in + c, out + c, ow, kh, dy, dx, cpo, w + c, cw, &q, k, 5, 2, FULL);
    return;
  }
  for (size_t o = 0; o < ow; o++) {
    const uint8_t *s = in + o * step + c;
    __m512 acc = _mm512_setzero_ps();
    for (size_t ky = 0; ky < kh; ky++)
      for (size_t kx = 0; kx < kw; kx++)
        acc = _mm512_fmadd_ps(ld16(k, s + ky * dy + kx * dx, FULL),
                              _mm512_loadu_ps(w + (ky * kw + kx) * cw + c), acc);
    store_q8(&q, acc, out + o * cpo + c, k);
  }
}

/* Two output rows of a 3x3 stride-1 conv: each window's last column of the 4 input rows the two
 * rows span widened once and kept for the next two windows (one column of 4 rows an output pair,
 * against one of 3 rows an output one row at a time). */
static inline __attribute__((always_inline)) void
dw3_rows2(const uint8_t *s, uint8_t *dst, size_t orow, size_t ow, size_t dy, size_t dx, size_t cpo,
          const float *w, size_t cw, const q8_out *q, __mmask16 k, const int FULL) {
  __m512 wv[9];
  for (int t = 0; t < 9; t++) wv[t] = _mm512_loadu_ps(w + (size_t)t * cw);
  __m512 a[4], b[4];
  for (size_t r = 0; r < 4; r++)
    a[r] = ld16(k, s + r * dy, FULL), b[r] = ld16(k, s + r * dy + dx, FULL);
  for (size_t o = 0; o < ow; o++) {
    const uint8_t *sc = s + (o + 2) * dx;
    __m512 c[4];
    for (size_t r = 0; r < 4; r++) c[r] = ld16(k, sc + r * dy, FULL);
    __m512 y0 = _mm512_mul_ps(a[0], wv[0]), y1 = _mm512_mul_ps(a[1], wv[0]);
    for (size_t r = 0; r < 3; r++) {
      if (r)
        y0 = _mm512_fmadd_ps(a[r], wv[3 * r], y0), y1 = _mm512_fmadd_ps(a[r + 1], wv[3 * r], y1);
      y0 = _mm512_fmadd_ps(b[r], wv[3 * r + 1], y0);
      y1 = _mm512_fmadd_ps(b[r + 1], wv[3 * r + 1], y1);
      y0 = _mm512_fmadd_ps(c[r], wv[3 * r + 2], y0);
      y1 = _mm512_fmadd_ps(c[r + 1], wv[3 * r + 2], y1);
    }
    store_q8(q, y0, dst + o * cpo, k);
    store_q8(q, y1, dst + orow + o * cpo, k);
    for (size_t r = 0; r < 4; r++) a[r] = b[r], b[r] = c[r];
  }
}

/* A block of 16 channels of two output rows (em_q8_dw2_fn). */
static inline __attribute__((always_inline)) void dw_chans2(const uint8_t *in, uint8_t *out,
                                                            size_t orow, const em_q8_dw_params *p,
                                                            const q8_out *qo, size_t c, __mmask16 k,
                                                            const int FULL) {
  q8_out q = *qo;
  q.corr = _mm512_loadu_ps(p->corr + c), q.scale = _mm512_loadu_ps(p->scale + c);
  q.bias = _mm512_loadu_ps(p->bias + c);
  if (p->kh == 3)
    dw3_rows2(in + c, out + c, orow, p->ow, p->dy, p->dx, p->cpo, p->w + c, p->cw, &q, k, FULL);
  else
    dw_block4x2(in + c, out + c, orow, p->ow, p->dy, p->dx, p->cpo, p->w + c, p->cw, &q, k, FULL);
}

/* The output quantizer's constants (the corrections, scales and biases are set per block). */
static inline q8_out q8_out_of(em_q8_quant_params oq) {
  float flo, fhi;
  em_q8_quant_bounds(&oq, &flo, &fhi);
  return (q8_out){.inv = _mm512_set1_ps(oq.inv),
                  .flo = _mm512_set1_ps(flo),
                  .fhi = _mm512_set1_ps(fhi),
                  .zp = _mm512_set1_epi32((int32_t)oq.zp),
                  .lo = _mm512_set1_epi32((int32_t)oq.lo)};
}

/* The add's rows with LOW a constant (em_q8_add_ukernel__avx512vnni picks it once a call). */
static inline __attribute__((always_inline)) void add_rows(size_t n, const uint8_t *a,
                                                           const uint8_t *b, uint8_t *y,
                                                           const em_q8_add_params *p,
                                                           const q8_out *q, const int LOW) {
  const __m512 sa = _mm512_set1_ps(p->sa), za = _mm512_set1_ps(p->za);
  const __m512 sb = _mm512_set1_ps(p->sb), zb = _mm512_set1_ps(p->zb);
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 k = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1u);
    const __m512 ta = _mm512_mul_ps(_mm512_sub_ps(ld16(k, a + i, 0), za), sa);
    const __m512 tb = _mm512_mul_ps(_mm512_sub_ps(ld16(k, b + i, 0), zb), sb);
    quant_q8(q, _mm512_add_ps(ta, tb), y + i, k, LOW);
  }
}

void em_q8_add_ukernel__avx512vnni(size_t n, const uint8_t *a, const uint8_t *b, uint8_t *y,
                                   const em_q8_add_params *p) {
  const q8_out q = q8_out_of(p->oq);
  float flo, fhi;
  em_q8_quant_bounds(&p->oq, &flo, &fhi);
  if (flo + p->oq.zp != p->oq.lo) /* a clamp above the range's bottom */
    add_rows(n, a, b, y, p, &q, 1);
  else
    add_rows(n, a, b, y, p, &q, 0);
}

void em_q8_dwconv_ukernel__avx512vnni(const uint8_t *in, uint8_t *out, const em_q8_dw_params *p) {
  const q8_out q = q8_out_of(p->oq);
  /* (the byte stores could alias p's fields: each block reads them into locals first) */
  const size_t ch = p->ch;
  size_t c = 0;
  for (; c + 16 <= ch; c += 16) dw_chans(in, out, p, &q, c, (__mmask16)0xFFFF, 1);
  if (c < ch) dw_chans(in, out, p, &q, c, (__mmask16)((1u << (ch - c)) - 1u), 0);
}
void em_q8_dwconv2_ukernel__avx512vnni(const uint8_t *in, uint8_t *out, size_t orow,
                                       const em_q8_dw_params *p) {
  const q8_out q = q8_out_of(p->oq);
  const size_t ch = p->ch;
  size_t c = 0;
  for (; c + 16 <= ch; c += 16) dw_chans2(in, out, orow, p, &q, c, (__mmask16)0xFFFF, 1);
  if (c < ch) dw_chans2(in, out, orow, p, &q, c, (__mmask16)((1u << (ch - c)) - 1u), 0);
}
#endif
