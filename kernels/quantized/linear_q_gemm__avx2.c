/*
 * linear_q_gemm__avx2.c — AVX2 micro-kernels of ember::linear_q4 / linear_q8 (linear_q.h): a tile
 * of up to 4 activation rows x 2 weight rows per call.
 *
 * vpmaddubsw multiplies unsigned by signed bytes into saturating int16 pairs. q4 uses the stored
 * nibble q + 8 as the unsigned operand (15 * 127 * 2 cannot saturate) and starts each 32-bit lane
 * at the packed row's correction -8 * sum(activations); q8 uses |w| times sign(w) * qa, which
 * needs no correction (128 * 127 * 2 < 2^15). A 32-byte chunk of a weight row is 8 lanes, converted
 * to f32 once and scaled by a_scale(lane) * w_scale(lane). A 16-byte tail is zero-extended; the
 * packed activations are zero-padded to 64 bytes.
 *
 * Compiled with -mavx2 -mfma (CMakeLists.txt) and chosen at run time only when CPUID reports them
 * (linear_q.c). Elsewhere this file is empty.
 */
#include "quantized/linear_q.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

#define MR 4
#define NR 2

static inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

/* w_scale for the 8 lanes of chunk c of one weight row (0 past the row's groups). */
static inline __m256 wscale(const float *ws, size_t c, size_t lanes_valid,
                            const em_qgemm_params *p) {
  size_t l0 = c * 8;
  unsigned sh = p->gl_shift;
  if (sh >= 3) return _mm256_set1_ps(ws[l0 >> sh]);
  /* q4 with groups of 32: two groups of 4 lanes */
  float g1 = lanes_valid > 4 ? ws[(l0 >> sh) + 1] : 0.0f;
  return _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_set1_ps(ws[l0 >> sh])), _mm_set1_ps(g1),
                              1);
}

static inline __attribute__((always_inline)) void tile(int bits, size_t mr, size_t nc,
                                                       const uint8_t *a, const uint8_t *w,
                                                       const float *ws, const float *bias, float *y,
                                                       size_t ldy, const em_qgemm_params *p) {
  __m256 acc[MR][NR];
  for (size_t i = 0; i < mr; i++)
    for (size_t j = 0; j < nc; j++) acc[i][j] = _mm256_setzero_ps();
  const __m256i nib = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
  size_t n_chunks = (p->kbytes + 31) / 32;
  for (size_t c = 0; c < n_chunks; c++) {
    size_t off = c * 32, bytes = p->kbytes - off < 32 ? p->kbytes - off : 32;
    for (size_t j = 0; j < nc; j++) {
      const uint8_t *wp = w + j * p->w_stride + off;
      __m256i v = bytes == 32 ? _mm256_loadu_si256((const __m256i *)wp)
                              : _mm256_zextsi128_si256(_mm_loadu_si128((const __m128i *)wp));
      __m256i w0, w1;
      if (bits == 4) {
        w0 = _mm256_and_si256(v, nib);
        w1 = _mm256_and_si256(_mm256_srli_epi16(v, 4), nib);
      } else {
        w0 = _mm256_abs_epi8(v);
        w1 = v; /* sign source */
      }
      __m256 sw = wscale(ws + j * p->ws_stride, c, (bytes + 3) / 4, p);
      for (size_t i = 0; i < mr; i++) {
        const uint8_t *ar = a + i * p->a_stride;
        __m256i a0 = _mm256_load_si256((const __m256i *)(ar + off)), d;
        if (bits == 4) {
          __m256i a1 = _mm256_load_si256((const __m256i *)(ar + p->off_a1 + off));
          __m256i s16 =
              _mm256_add_epi16(_mm256_maddubs_epi16(w0, a0), _mm256_maddubs_epi16(w1, a1));
          d = _mm256_add_epi32(_mm256_madd_epi16(s16, ones),
                               _mm256_load_si256((const __m256i *)(ar + p->off_corr + off)));
        } else {
          d = _mm256_madd_epi16(_mm256_maddubs_epi16(w0, _mm256_sign_epi8(a0, w1)), ones);
        }
        __m256 sl = _mm256_load_ps((const float *)(ar + p->off_sl) + c * 8);
        acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), _mm256_mul_ps(sl, sw), acc[i][j]);
      }
    }
  }
  for (size_t i = 0; i < mr; i++)
    for (size_t j = 0; j < nc; j++) {
      float v = hsum(acc[i][j]);
      y[i * ldy + j] = bias ? v + bias[j] : v;
    }
}

#define TILE_CASE(BITS, M, N)                                                                      \
  case (M)*8 + (N):                                                                                \
    tile(BITS, M, N, a, w, ws, bias, y, ldy, p);                                                   \
    return;

#define TILE_SWITCH(BITS)                                                                          \
  switch (mr * 8 + nc) {                                                                           \
    TILE_CASE(BITS, 1, 1)                                                                          \
    TILE_CASE(BITS, 1, 2)                                                                          \
    TILE_CASE(BITS, 2, 1)                                                                          \
    TILE_CASE(BITS, 2, 2)                                                                          \
    TILE_CASE(BITS, 3, 1)                                                                          \
    TILE_CASE(BITS, 3, 2)                                                                          \
    TILE_CASE(BITS, 4, 1)                                                                          \
    TILE_CASE(BITS, 4, 2)                                                                          \
  default: return;                                                                                 \
  }

void em_qd8_qc4w_f32_gemm_ukernel_4x2__avx2(size_t mr, size_t nc, const uint8_t *a,
                                            const uint8_t *w, const float *ws, const float *bias,
                                            float *y, size_t ldy, const em_qgemm_params *p) {
  TILE_SWITCH(4)
}

void em_qd8_qc8w_f32_gemm_ukernel_4x2__avx2(size_t mr, size_t nc, const uint8_t *a,
                                            const uint8_t *w, const float *ws, const float *bias,
                                            float *y, size_t ldy, const em_qgemm_params *p) {
  TILE_SWITCH(8)
}

#else
typedef int em_linear_q_avx2_unavailable; /* ISO C forbids an empty translation unit */
#endif
