/*
 * q8_store8__avx512.h — a store the int8 tiles with AVX-512 share (q8_pw__avx512vnni.c: an
 * int8 conv's f32 planes; q8_dq__avx512vnni.c: a dynamic int8 linear's transposed heads): eight
 * rows of 16 channel values written channel-major. Include only from files compiled with
 * AVX-512F.
 */
#ifndef EMBER_BACKENDS_CPU_Q8_STORE8_AVX512_H
#define EMBER_BACKENDS_CPU_Q8_STORE8_AVX512_H

#include <immintrin.h>
#include <stddef.h>

/* Row i's 16 channels (v[i], i < 8) stored planar: channel c < nc of row i at y[c * ys + i], for
 * i < np. Eight rows by a transpose in registers (two rounds of in-lane shuffles, then each
 * channel's two 4-row halves out of its 128-bit lanes); fewer through a block on the stack. */
static inline __attribute__((always_inline)) void q8_store8_planes(const __m512 v[8], size_t np,
                                                                   size_t nc, float *y, size_t ys) {
  if (np < 8) {
    float blk[8][16];
    for (size_t i = 0; i < 8; i++) _mm512_storeu_ps(blk[i], v[i]);
    for (size_t c = 0; c < nc; c++)
      for (size_t i = 0; i < np; i++) y[c * ys + i] = blk[i][c];
    return;
  }
  const __m512 t0 = _mm512_unpacklo_ps(v[0], v[1]), t1 = _mm512_unpackhi_ps(v[0], v[1]);
  const __m512 t2 = _mm512_unpacklo_ps(v[2], v[3]), t3 = _mm512_unpackhi_ps(v[2], v[3]);
  const __m512 t4 = _mm512_unpacklo_ps(v[4], v[5]), t5 = _mm512_unpackhi_ps(v[4], v[5]);
  const __m512 t6 = _mm512_unpacklo_ps(v[6], v[7]), t7 = _mm512_unpackhi_ps(v[6], v[7]);
  /* u[k] (u[4 + k]): in lane l, rows 0-3 (4-7) of channel 4 l + k */
  const __m512 u[8] = {_mm512_shuffle_ps(t0, t2, 0x44), _mm512_shuffle_ps(t0, t2, 0xEE),
                       _mm512_shuffle_ps(t1, t3, 0x44), _mm512_shuffle_ps(t1, t3, 0xEE),
                       _mm512_shuffle_ps(t4, t6, 0x44), _mm512_shuffle_ps(t4, t6, 0xEE),
                       _mm512_shuffle_ps(t5, t7, 0x44), _mm512_shuffle_ps(t5, t7, 0xEE)};
  for (size_t k = 0; k < 4 && k < nc; k++) {
    float *r = y + k * ys;
    _mm_storeu_ps(r, _mm512_castps512_ps128(u[k]));
    _mm_storeu_ps(r + 4, _mm512_castps512_ps128(u[4 + k]));
    if (4 + k < nc) {
      _mm_storeu_ps(r + 4 * ys, _mm512_extractf32x4_ps(u[k], 1));
      _mm_storeu_ps(r + 4 * ys + 4, _mm512_extractf32x4_ps(u[4 + k], 1));
    }
    if (8 + k < nc) {
      _mm_storeu_ps(r + 8 * ys, _mm512_extractf32x4_ps(u[k], 2));
      _mm_storeu_ps(r + 8 * ys + 4, _mm512_extractf32x4_ps(u[4 + k], 2));
    }
    if (12 + k < nc) {
      _mm_storeu_ps(r + 12 * ys, _mm512_extractf32x4_ps(u[k], 3));
      _mm_storeu_ps(r + 12 * ys + 4, _mm512_extractf32x4_ps(u[4 + k], 3));
    }
  }
}

#endif /* EMBER_BACKENDS_CPU_Q8_STORE8_AVX512_H */
