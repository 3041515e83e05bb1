/*
 * linear_q_pack_impl.h — activation rows quantized straight into the packed layout of linear_q.h,
 * shared by the x86 micro-kernel files (linear_q_gemm__avx2.c, linear_q_gemm__avx512vnni.c).
 *
 * Included by one ISA file each, after it defines
 *     static inline float quantize_block(const float *x, __m128i *b0, __m128i *b1);
 * (one block of 32 values to int8, elements 0-15 in *b0 and 16-31 in *b1, returning the block's
 * scale exactly as linear_q.c's quantize_row), so the shuffles below compile with that file's
 * target flags. Defines pack_q4_row and pack_q8_row (the em_qpack_fn bodies) and zero_padding.
 */
#ifndef EMBER_KERNELS_QUANTIZED_LINEAR_Q_PACK_IMPL_H
#define EMBER_KERNELS_QUANTIZED_LINEAR_Q_PACK_IMPL_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "quantized/linear_q.h"

/* Zeroes a packed row's padding: a0/a1 past kbytes, corr/sl past the used lanes. */
static void zero_padding(uint8_t *row, int bits, const em_qgemm_params *p) {
  size_t kbp = p->off_sl - p->off_corr, used_lanes = (p->kbytes + 3) / 4;
  memset(row + p->kbytes, 0, kbp - p->kbytes);
  if (bits == 4) memset(row + p->off_a1 + p->kbytes, 0, kbp - p->kbytes);
  memset(row + p->off_corr + 4 * used_lanes, 0, kbp - 4 * used_lanes);
  memset(row + p->off_sl + 4 * used_lanes, 0, kbp - 4 * used_lanes);
}

static inline void pack_q4_row(const float *x, size_t k, uint8_t *row, const em_qgemm_params *p) {
  /* byte j of a block pairs with elements 2j+1 (low nibble, a0) and 2j (high nibble, a1) */
  const __m128i odd_even = _mm_setr_epi8(1, 3, 5, 7, 9, 11, 13, 15, 0, 2, 4, 6, 8, 10, 12, 14);
  const __m128i flip = _mm_set1_epi8((char)0x80), zero = _mm_setzero_si128();
  int32_t *corr = (int32_t *)(row + p->off_corr);
  float *sl = (float *)(row + p->off_sl);
  for (size_t b = 0; b < k / EM_QA_BLOCK; b++) {
    __m128i b0, b1;
    float s = quantize_block(x + b * EM_QA_BLOCK, &b0, &b1);
    __m128i s0 = _mm_shuffle_epi8(b0, odd_even), s1 = _mm_shuffle_epi8(b1, odd_even);
    _mm_storeu_si128((__m128i *)(row + 16 * b), _mm_unpacklo_epi64(s0, s1));
    _mm_storeu_si128((__m128i *)(row + p->off_a1 + 16 * b), _mm_unpackhi_epi64(s0, s1));
    /* lane l of the block covers elements 8l..8l+7: sums of 8 bytes by SAD on q + 128 */
    __m128i t0 = _mm_sad_epu8(_mm_xor_si128(b0, flip), zero);
    __m128i t1 = _mm_sad_epu8(_mm_xor_si128(b1, flip), zero);
    __m128i t = _mm_castps_si128(
        _mm_shuffle_ps(_mm_castsi128_ps(t0), _mm_castsi128_ps(t1), _MM_SHUFFLE(2, 0, 2, 0)));
    __m128i c = _mm_slli_epi32(_mm_sub_epi32(_mm_set1_epi32(8 * 128), t), 3); /* -8 * sum */
    _mm_storeu_si128((__m128i *)(corr + 4 * b), c);
    _mm_storeu_ps(sl + 4 * b, _mm_set1_ps(s));
  }
  zero_padding(row, 4, p);
}

static inline void pack_q8_row(const float *x, size_t k, uint8_t *row, const em_qgemm_params *p) {
  const __m128i ones8 = _mm_set1_epi8(1), ones16 = _mm_set1_epi16(1);
  int32_t *corr = (int32_t *)(row + p->off_corr);
  float *sl = (float *)(row + p->off_sl);
  for (size_t b = 0; b < k / EM_QA_BLOCK; b++) {
    __m128i b0, b1;
    float s = quantize_block(x + b * EM_QA_BLOCK, &b0, &b1);
    _mm_storeu_si128((__m128i *)(row + 32 * b), b0);
    _mm_storeu_si128((__m128i *)(row + 32 * b + 16), b1);
    /* lane l covers elements 4l..4l+3 */
    __m128i c0 = _mm_madd_epi16(_mm_maddubs_epi16(ones8, b0), ones16);
    __m128i c1 = _mm_madd_epi16(_mm_maddubs_epi16(ones8, b1), ones16);
    _mm_storeu_si128((__m128i *)(corr + 8 * b),
                     _mm_sub_epi32(_mm_setzero_si128(), _mm_slli_epi32(c0, 7)));
    _mm_storeu_si128((__m128i *)(corr + 8 * b + 4),
                     _mm_sub_epi32(_mm_setzero_si128(), _mm_slli_epi32(c1, 7)));
    _mm_storeu_ps(sl + 8 * b, _mm_set1_ps(s));
    _mm_storeu_ps(sl + 8 * b + 4, _mm_set1_ps(s));
  }
  zero_padding(row, 8, p);
}

#endif /* EMBER_KERNELS_QUANTIZED_LINEAR_Q_PACK_IMPL_H */
