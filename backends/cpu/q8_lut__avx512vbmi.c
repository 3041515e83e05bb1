/*
 * q8_lut__avx512vbmi.c — the int8 table lookups (EMC_UNARY_Q8: em_q8_lut_fn into u8 levels,
 * em_q8_lutf_fn into f32 planes) with AVX-512 VBMI: 64 bytes at a time, two vpermi2b over the
 * table's halves (bit 6 of each byte picks the 64-byte quarter within a half, bits 0-5 the
 * byte), bit 7 picking the half; and the readers of never-written lookup planes (em_q8_lutq_fn,
 * em_q8_lutm_fn) on the same lookups. Compiled with -mavx512vbmi and -mavx512vl (CMakeLists.txt);
 * chosen at run time (em_q8_lut_for) where the CPU has them.
 */
#include <math.h>

#include "cpu_ukernels.h"

#if defined(__AVX512VBMI__) && defined(__AVX512VL__)
#include "f32_transpose16__avx512f.h"

/* The 64 levels of the bytes v (t0..t3: the table's four quarters). */
static inline __attribute__((always_inline)) __m512i lookup(__m512i v, __m512i t0, __m512i t1,
                                                            __m512i t2, __m512i t3) {
  const __m512i lo = _mm512_permutex2var_epi8(t0, v, t1), hi = _mm512_permutex2var_epi8(t2, v, t3);
  return _mm512_mask_blend_epi8(_mm512_movepi8_mask(v), lo, hi);
}

void em_q8_lut_ukernel__avx512vbmi(size_t n, const uint8_t *x, uint8_t *y, const uint8_t *t) {
  const __m512i t0 = _mm512_loadu_si512(t), t1 = _mm512_loadu_si512(t + 64);
  const __m512i t2 = _mm512_loadu_si512(t + 128), t3 = _mm512_loadu_si512(t + 192);
  size_t i = 0;
  for (; i + 64 <= n; i += 64)
    _mm512_storeu_si512(y + i, lookup(_mm512_loadu_si512(x + i), t0, t1, t2, t3));
  if (i < n) {
    const __mmask64 m = ((__mmask64)1 << (n - i)) - 1;
    _mm512_mask_storeu_epi8(y + i, m, lookup(_mm512_maskz_loadu_epi8(m, x + i), t0, t1, t2, t3));
  }
}

/* Blocks of 16 pixels x 16 channels: four pixels' 16 bytes looked up per 64-byte operation, each
 * pixel's levels widened to f32 values (the exact subtraction, then the scale), the 16 x 16
 * block transposed in registers and stored plane by plane. */
void em_q8_lutf_ukernel__avx512vbmi(size_t c, size_t n, const uint8_t *x, size_t xs, float *y,
                                    size_t ys, const uint8_t *t, float zp, float s) {
  const __m512i t0 = _mm512_loadu_si512(t), t1 = _mm512_loadu_si512(t + 64);
  const __m512i t2 = _mm512_loadu_si512(t + 128), t3 = _mm512_loadu_si512(t + 192);
  const __m512 vzp = _mm512_set1_ps(zp), vs = _mm512_set1_ps(s);
  for (size_t p0 = 0; p0 < n; p0 += 16) {
    const size_t np = n - p0 < 16 ? n - p0 : 16;
    const __mmask16 pm = (__mmask16)((1u << np) - 1);
    for (size_t c0 = 0; c0 < c; c0 += 16) {
      const size_t nc = c - c0 < 16 ? c - c0 : 16;
      const __mmask16 cm = (__mmask16)((1u << nc) - 1);
      __m512 r[16];
      for (size_t q = 0; q < 16; q += 4) {
        __m128i b[4];
        for (size_t k = 0; k < 4; k++)
          b[k] = q + k < np ? _mm_maskz_loadu_epi8(cm, x + (p0 + q + k) * xs + c0)
                            : _mm_setzero_si128();
        __m512i v = _mm512_castsi128_si512(b[0]);
        v = _mm512_inserti32x4(v, b[1], 1);
        v = _mm512_inserti32x4(v, b[2], 2);
        v = _mm512_inserti32x4(v, b[3], 3);
        const __m512i lv = lookup(v, t0, t1, t2, t3);
        r[q] = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm512_castsi512_si128(lv)));
        r[q + 1] = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(lv, 1)));
        r[q + 2] = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(lv, 2)));
        r[q + 3] = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(lv, 3)));
      }
      for (size_t q = 0; q < 16; q++) r[q] = _mm512_mul_ps(_mm512_sub_ps(r[q], vzp), vs);
      transpose16(r);
      for (size_t ch = 0; ch < nc; ch++) _mm512_mask_storeu_ps(y + (c0 + ch) * ys + p0, pm, r[ch]);
    }
  }
}

/* Lane k's 16 levels of lv as f32 values, ((float)level - zp) * ls. */
static inline __attribute__((always_inline)) __m512 value(__m512i lv, int k, __m512 zp, __m512 ls) {
  const __m128i b = k == 0   ? _mm512_castsi512_si128(lv)
                    : k == 1 ? _mm512_extracti32x4_epi32(lv, 1)
                    : k == 2 ? _mm512_extracti32x4_epi32(lv, 2)
                             : _mm512_extracti32x4_epi32(lv, 3);
  return _mm512_mul_ps(_mm512_sub_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(b)), zp), ls);
}

/* The mask of channels [c0, c0 + 64) below c, a byte each. */
static inline __mmask64 mask64(size_t c, size_t c0) {
  return c - c0 >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << (c - c0)) - 1u;
}

/* Channels last all the way: per pixel, 64 channels' bytes looked up in one operation, each 16
 * of them scaled, clamped and quantized (em_q8_quant_bounds's short form of em_q8_quant1, as the
 * f32 quantizers), the 64 bytes stored at once. With no clamp (mm's bounds infinite: the
 * product's fake-quant has none of its own) the clamp is left out: the same values. */
static inline __attribute__((always_inline)) void
lutq(size_t c, size_t n, const uint8_t *x, size_t xs, const uint8_t *t, float zp, float ls,
     const float *g, const em_minmax_params *mm, uint8_t *y, size_t ys, const em_q8_quant_params *p,
     const int CLAMP) {
  const __m512i t0 = _mm512_loadu_si512(t), t1 = _mm512_loadu_si512(t + 64);
  const __m512i t2 = _mm512_loadu_si512(t + 128), t3 = _mm512_loadu_si512(t + 192);
  const __m512 vzp = _mm512_set1_ps(zp), vls = _mm512_set1_ps(ls);
  const __m512 mn = _mm512_set1_ps(mm->min), mx = _mm512_set1_ps(mm->max);
  float fl, fh;
  em_q8_quant_bounds(p, &fl, &fh);
  const __m512 inv = _mm512_set1_ps(p->inv), flo = _mm512_set1_ps(fl), fhi = _mm512_set1_ps(fh);
  const __m512i qzp = _mm512_set1_epi32((int32_t)p->zp), lo = _mm512_set1_epi32((int32_t)p->lo);
  for (size_t c0 = 0; c0 < c; c0 += 64) {
    const __mmask64 cm = mask64(c, c0);
    const size_t nb = (c - c0 + 15) / 16 < 4 ? (c - c0 + 15) / 16 : 4;
    __m512 gv[4];
    for (size_t k = 0; k < 4; k++)
      gv[k] = k < nb ? _mm512_maskz_loadu_ps((__mmask16)(cm >> (16 * k)), g + c0 + 16 * k)
                     : _mm512_setzero_ps();
    for (size_t i = 0; i < n; i++) {
      const __m512i lv = lookup(_mm512_maskz_loadu_epi8(cm, x + i * xs + c0), t0, t1, t2, t3);
      __m512i out = _mm512_setzero_si512();
      for (int k = 0; k < 4 && (size_t)k < nb; k++) {
        __m512 v = _mm512_mul_ps(value(lv, k, vzp, vls), gv[k]);
        if (CLAMP) v = _mm512_min_ps(mx, _mm512_max_ps(mn, v)); /* NaN stays */
        v = _mm512_min_ps(fhi, _mm512_max_ps(flo, _mm512_mul_ps(v, inv)));
        __m512i q = _mm512_cvt_roundps_epi32(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        q = _mm512_max_epi32(_mm512_add_epi32(q, qzp), lo); /* NaN: INT32_MIN + zp -> lo */
        const __m128i b = _mm512_cvtepi32_epi8(q);
        out = k == 0   ? _mm512_castsi128_si512(b)
              : k == 1 ? _mm512_inserti32x4(out, b, 1)
              : k == 2 ? _mm512_inserti32x4(out, b, 2)
                       : _mm512_inserti32x4(out, b, 3);
      }
      _mm512_mask_storeu_epi8(y + i * ys + c0, cm, out);
    }
  }
}

void em_q8_lutq_ukernel__avx512vbmi(size_t c, size_t n, const uint8_t *x, size_t xs,
                                    const uint8_t *t, float zp, float ls, const float *g,
                                    const em_minmax_params *mm, uint8_t *y, size_t ys,
                                    const em_q8_quant_params *p) {
  if (mm->min == -INFINITY && mm->max == INFINITY)
    lutq(c, n, x, xs, t, zp, ls, g, mm, y, ys, p, 0);
  else
    lutq(c, n, x, xs, t, zp, ls, g, mm, y, ys, p, 1);
}

/* Per 64 channels the four partial sums of each 16 in vectors, a lane a channel: a pixel's 64
 * bytes looked up in one operation, pixel 4 j + r added to sum r; the last n % 4 pixels to sum 0.
 */
void em_q8_lutm_ukernel__avx512vbmi(size_t c, size_t n, const uint8_t *x, size_t xs,
                                    const uint8_t *t, float zp, float ls, float *mean) {
  const __m512i t0 = _mm512_loadu_si512(t), t1 = _mm512_loadu_si512(t + 64);
  const __m512i t2 = _mm512_loadu_si512(t + 128), t3 = _mm512_loadu_si512(t + 192);
  const __m512 vzp = _mm512_set1_ps(zp), vls = _mm512_set1_ps(ls);
  for (size_t c0 = 0; c0 < c; c0 += 64) {
    const __mmask64 cm = mask64(c, c0);
    const size_t nb = (c - c0 + 15) / 16 < 4 ? (c - c0 + 15) / 16 : 4;
    __m512 s[4][4]; /* [partial sum][16 channels] */
    for (int r = 0; r < 4; r++)
      for (int k = 0; k < 4; k++) s[r][k] = _mm512_setzero_ps();
    size_t i = 0;
    for (; i + 4 <= n; i += 4)
      for (int r = 0; r < 4; r++) {
        const __m512i lv =
            lookup(_mm512_maskz_loadu_epi8(cm, x + (i + (size_t)r) * xs + c0), t0, t1, t2, t3);
        for (int k = 0; k < 4; k++)
          if ((size_t)k < nb) s[r][k] = _mm512_add_ps(s[r][k], value(lv, k, vzp, vls));
      }
    for (; i < n; i++) {
      const __m512i lv = lookup(_mm512_maskz_loadu_epi8(cm, x + i * xs + c0), t0, t1, t2, t3);
      for (int k = 0; k < 4; k++)
        if ((size_t)k < nb) s[0][k] = _mm512_add_ps(s[0][k], value(lv, k, vzp, vls));
    }
    const __m512 fn = _mm512_set1_ps((float)n);
    for (int k = 0; k < 4 && c0 + 16 * (size_t)k < c; k++) {
      const __m512 m =
          _mm512_add_ps(_mm512_add_ps(s[0][k], s[1][k]), _mm512_add_ps(s[2][k], s[3][k]));
      _mm512_mask_storeu_ps(mean + c0 + 16 * k, (__mmask16)(cm >> (16 * k)), _mm512_div_ps(m, fn));
    }
  }
}
#endif
