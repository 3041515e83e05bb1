/*
 * q8_tile8__avx512.h — what the 8-row int8 tiles with AVX-512 VNNI share (q8_pw__avx512vnni.c:
 * an int8 conv's pixels; q8_dq__avx512vnni.c: a dynamic int8 linear's rows): the products of 8
 * rows of u8 bytes by one or two blocks of 16 channels' int8 weights, and the store of eight
 * rows of 16 channel values channel-major. Include only from files compiled with AVX-512 VNNI.
 */
#ifndef EMBER_BACKENDS_CPU_Q8_TILE8_AVX512_H
#define EMBER_BACKENDS_CPU_Q8_TILE8_AVX512_H

#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* A row's 4 bytes at p, in every 32-bit lane. */
static inline __m512i q8_bcast4(const uint8_t *p) {
  int32_t v;
  memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

/*
 * For rows i < 8: acc[i] = a0 (each lane's start: 0, or minus a correction) plus the exact
 * int32 sums (wrapping) over groups q < kq of row xp[i]'s 4 bytes at
 * offset off(q) (qoff[q], or 4 q when qoff is NULL) times the 16 channels' 4 int8 weights of
 * group q (w: [kq][16][4]); with `two`, acc2[i] the same for the next block of 16 channels
 * (w + kq * 64), from b0. Per group one weight load a block and one broadcast a row: 8 or 16
 * chains.
 */
static inline __attribute__((always_inline)) void
q8_tile8_sums(const uint8_t *const xp[8], const int32_t *qoff, size_t kq, const int8_t *w, int two,
              __m512i a0, __m512i b0, __m512i acc[8], __m512i acc2[8]) {
  const int8_t *w2 = w + kq * 64;
  __m512i a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
  __m512i b1 = b0, b2 = b0, b3 = b0, b4 = b0, b5 = b0, b6 = b0, b7 = b0;
  if (two) {
    for (size_t q = 0; q < kq; q++) {
      const ptrdiff_t o = qoff ? qoff[q] : (ptrdiff_t)(q * 4);
      const __m512i u = _mm512_loadu_si512((const void *)(w + q * 64));
      const __m512i v = _mm512_loadu_si512((const void *)(w2 + q * 64));
      __m512i s = q8_bcast4(xp[0] + o);
      a0 = _mm512_dpbusd_epi32(a0, s, u), b0 = _mm512_dpbusd_epi32(b0, s, v);
      s = q8_bcast4(xp[1] + o);
      a1 = _mm512_dpbusd_epi32(a1, s, u), b1 = _mm512_dpbusd_epi32(b1, s, v);
      s = q8_bcast4(xp[2] + o);
      a2 = _mm512_dpbusd_epi32(a2, s, u), b2 = _mm512_dpbusd_epi32(b2, s, v);
      s = q8_bcast4(xp[3] + o);
      a3 = _mm512_dpbusd_epi32(a3, s, u), b3 = _mm512_dpbusd_epi32(b3, s, v);
      s = q8_bcast4(xp[4] + o);
      a4 = _mm512_dpbusd_epi32(a4, s, u), b4 = _mm512_dpbusd_epi32(b4, s, v);
      s = q8_bcast4(xp[5] + o);
      a5 = _mm512_dpbusd_epi32(a5, s, u), b5 = _mm512_dpbusd_epi32(b5, s, v);
      s = q8_bcast4(xp[6] + o);
      a6 = _mm512_dpbusd_epi32(a6, s, u), b6 = _mm512_dpbusd_epi32(b6, s, v);
      s = q8_bcast4(xp[7] + o);
      a7 = _mm512_dpbusd_epi32(a7, s, u), b7 = _mm512_dpbusd_epi32(b7, s, v);
    }
  } else {
    for (size_t q = 0; q < kq; q++) {
      const ptrdiff_t o = qoff ? qoff[q] : (ptrdiff_t)(q * 4);
      const __m512i u = _mm512_loadu_si512((const void *)(w + q * 64));
      a0 = _mm512_dpbusd_epi32(a0, q8_bcast4(xp[0] + o), u);
      a1 = _mm512_dpbusd_epi32(a1, q8_bcast4(xp[1] + o), u);
      a2 = _mm512_dpbusd_epi32(a2, q8_bcast4(xp[2] + o), u);
      a3 = _mm512_dpbusd_epi32(a3, q8_bcast4(xp[3] + o), u);
      a4 = _mm512_dpbusd_epi32(a4, q8_bcast4(xp[4] + o), u);
      a5 = _mm512_dpbusd_epi32(a5, q8_bcast4(xp[5] + o), u);
      a6 = _mm512_dpbusd_epi32(a6, q8_bcast4(xp[6] + o), u);
      a7 = _mm512_dpbusd_epi32(a7, q8_bcast4(xp[7] + o), u);
    }
  }
  acc[0] = a0, acc[1] = a1, acc[2] = a2, acc[3] = a3, acc[4] = a4, acc[5] = a5, acc[6] = a6;
  acc[7] = a7;
  acc2[0] = b0, acc2[1] = b1, acc2[2] = b2, acc2[3] = b3, acc2[4] = b4, acc2[5] = b5;
  acc2[6] = b6, acc2[7] = b7;
}

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

#endif /* EMBER_BACKENDS_CPU_Q8_TILE8_AVX512_H */
