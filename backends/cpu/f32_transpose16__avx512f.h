/*
 * f32_transpose16__avx512f.h — an in-register 16 x 16 f32 transpose for AVX-512 kernels: the
 * depthwise c16 kernel's planes in and out, and em_f32_transpose_ukernel__avx512f. Include only
 * from files compiled with -mavx512f.
 */
#ifndef EMBER_F32_TRANSPOSE16_AVX512F_H
#define EMBER_F32_TRANSPOSE16_AVX512F_H

#include <immintrin.h>

/* Transposes the 16 x 16 block r in place: r[i][j] <- r[j][i]. */
static inline __attribute__((always_inline)) void transpose16(__m512 r[16]) {
  __m512 a[16], b[16];
#pragma GCC unroll 8
  for (int i = 0; i < 8; i++) { /* 32-bit pairs of rows 2i, 2i+1 */
    a[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    a[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
#pragma GCC unroll 4
  for (int i = 0; i < 4; i++) { /* b[4i + m]: column 4 l + m of rows 4i..4i+3, in lane l */
    const __m512d a0 = _mm512_castps_pd(a[4 * i]), a1 = _mm512_castps_pd(a[4 * i + 1]);
    const __m512d a2 = _mm512_castps_pd(a[4 * i + 2]), a3 = _mm512_castps_pd(a[4 * i + 3]);
    b[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a0, a2));
    b[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a0, a2));
    b[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(a1, a3));
    b[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(a1, a3));
  }
#pragma GCC unroll 4
  for (int m = 0; m < 4; m++) { /* gather lane l of b[m], b[4 + m], b[8 + m], b[12 + m] */
    const __m512 c0 = _mm512_shuffle_f32x4(b[m], b[4 + m], 0x88);
    const __m512 c1 = _mm512_shuffle_f32x4(b[m], b[4 + m], 0xDD);
    const __m512 d0 = _mm512_shuffle_f32x4(b[8 + m], b[12 + m], 0x88);
    const __m512 d1 = _mm512_shuffle_f32x4(b[8 + m], b[12 + m], 0xDD);
    r[m] = _mm512_shuffle_f32x4(c0, d0, 0x88);
    r[4 + m] = _mm512_shuffle_f32x4(c1, d1, 0x88);
    r[8 + m] = _mm512_shuffle_f32x4(c0, d0, 0xDD);
    r[12 + m] = _mm512_shuffle_f32x4(c1, d1, 0xDD);
  }
}

#endif
