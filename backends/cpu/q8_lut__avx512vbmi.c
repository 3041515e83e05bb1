/*
 * q8_lut__avx512vbmi.c — the int8 table lookups (EMC_UNARY_Q8: em_q8_lut_fn into u8 levels,
 * em_q8_lutf_fn into f32 planes) with AVX-512 VBMI: 64 bytes at a time, two vpermi2b over the
 * table's halves (bit 6 of each byte picks the 64-byte quarter within a half, bits 0-5 the
 * byte), bit 7 picking the half. Compiled with -mavx512vbmi and -mavx512vl (CMakeLists.txt);
 * chosen at run time (em_q8_lut_for) where the CPU has them.
 */
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
#endif
