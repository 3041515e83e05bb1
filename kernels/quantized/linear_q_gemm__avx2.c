/*
 * linear_q_gemm__avx2.c — AVX2 micro-kernels of ember::linear_q4 / linear_q8 (linear_q.h): a tile
 * of up to 4 activation rows x 4 weight rows per call (1x4 for decode, two 4x2 halves otherwise).
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
#include <math.h>
#include <string.h>

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

/* Weight row wr's 32-byte chunk (16 bytes when short) decoded: q4 -> low/high nibbles (q + 8);
 * q8 -> |w| and w itself (the sign source). */
static inline __attribute__((always_inline)) void decode(int bits, const uint8_t *wr, size_t bytes,
                                                         __m256i *w0, __m256i *w1) {
  __m256i v = bytes == 32 ? _mm256_loadu_si256((const __m256i *)wr)
                          : _mm256_zextsi128_si256(_mm_loadu_si128((const __m128i *)wr));
  if (bits == 4) {
    *w0 = _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
    *w1 = _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0F));
  } else {
    *w0 = _mm256_abs_epi8(v);
    *w1 = v;
  }
}

/* acc + f32(exact lane dots of packed row ar with w0/w1) * a_scale * w_scale, for chunk c. */
static inline __attribute__((always_inline)) __m256 mac(int bits, __m256 acc, const uint8_t *ar,
                                                        size_t c, __m256i w0, __m256i w1, __m256 sw,
                                                        const em_qgemm_params *p) {
  size_t off = c * 32;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i a0 = _mm256_load_si256((const __m256i *)(ar + off)), d;
  if (bits == 4) {
    __m256i a1 = _mm256_load_si256((const __m256i *)(ar + p->off_a1 + off));
    __m256i s16 = _mm256_add_epi16(_mm256_maddubs_epi16(w0, a0), _mm256_maddubs_epi16(w1, a1));
    d = _mm256_add_epi32(_mm256_madd_epi16(s16, ones),
                         _mm256_load_si256((const __m256i *)(ar + p->off_corr + off)));
  } else {
    d = _mm256_madd_epi16(_mm256_maddubs_epi16(w0, _mm256_sign_epi8(a0, w1)), ones);
  }
  __m256 sl = _mm256_load_ps((const float *)(ar + p->off_sl) + c * 8);
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), _mm256_mul_ps(sl, sw), acc);
}

/* Writes y[0..nc) = the sums of c0..c3 (+ bias). */
static inline void store4(__m256 c0, __m256 c1, __m256 c2, __m256 c3, size_t nc, const float *bias,
                          float *y) {
  __m256 h01 = _mm256_hadd_ps(c0, c1), h23 = _mm256_hadd_ps(c2, c3);
  __m256 h = _mm256_hadd_ps(h01, h23); /* [c0 c1 c2 c3] per 128-bit half */
  __m128 v = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  float t[4];
  _mm_storeu_ps(t, v);
  for (size_t j = 0; j < nc; j++) y[j] = bias ? t[j] + bias[j] : t[j];
}

static inline size_t chunk_bytes(size_t c, const em_qgemm_params *p) {
  size_t off = c * 32;
  return p->kbytes - off < 32 ? p->kbytes - off : 32;
}

/* ---- activation quantization straight into the packed row ---- */

/* One block of 32: int8 values (elements 0-15 in *b0, 16-31 in *b1) and its scale, exactly as
 * linear_q.c's quantize_row (f32 scale and reciprocal, round half to even by the MXCSR default). */
static inline float quantize_block(const float *x, __m128i *b0, __m128i *b1) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  __m256 x0 = _mm256_loadu_ps(x), x1 = _mm256_loadu_ps(x + 8);
  __m256 x2 = _mm256_loadu_ps(x + 16), x3 = _mm256_loadu_ps(x + 24);
  __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_and_ps(x0, abs_mask), _mm256_and_ps(x1, abs_mask)),
                           _mm256_max_ps(_mm256_and_ps(x2, abs_mask), _mm256_and_ps(x3, abs_mask)));
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  float amax = _mm_cvtss_f32(h);
  __m256 nan = _mm256_or_ps(
      _mm256_or_ps(_mm256_cmp_ps(x0, x0, _CMP_UNORD_Q), _mm256_cmp_ps(x1, x1, _CMP_UNORD_Q)),
      _mm256_or_ps(_mm256_cmp_ps(x2, x2, _CMP_UNORD_Q), _mm256_cmp_ps(x3, x3, _CMP_UNORD_Q)));
  if (_mm256_movemask_ps(nan)) amax = NAN; /* NaN propagates to the scale, as in torch.amax */
  float s = amax / 127.0f, inv = s > 0.0f ? 1.0f / s : 0.0f;
  __m256 vi = _mm256_set1_ps(inv);
  __m256i q0 = _mm256_cvtps_epi32(_mm256_mul_ps(x0, vi)),
          q1 = _mm256_cvtps_epi32(_mm256_mul_ps(x1, vi));
  __m256i q2 = _mm256_cvtps_epi32(_mm256_mul_ps(x2, vi)),
          q3 = _mm256_cvtps_epi32(_mm256_mul_ps(x3, vi));
  /* the packs work per 128-bit half: restore element order with one dword permutation */
  __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(q0, q1), _mm256_packs_epi32(q2, q3));
  b = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  *b0 = _mm256_castsi256_si128(b);
  *b1 = _mm256_extracti128_si256(b, 1);
  return s;
}

#include "quantized/linear_q_pack_impl.h"

/* 8 f16 values to f32 without F16C: the exponent and mantissa shifted into f32's places and
 * multiplied by 2^112 (rebiases normals, turns f16 subnormals into the f32 normals they are,
 * exactly), infinities and NaNs given f32's all-ones exponent, then the sign. */
static inline __m256 f16_to_f32(__m128i h8) {
  const __m256i h = _mm256_cvtepu16_epi32(h8);
  const __m256i em = _mm256_slli_epi32(_mm256_and_si256(h, _mm256_set1_epi32(0x7fff)), 13);
  const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(h, _mm256_set1_epi32(0x8000)), 16);
  __m256 f =
      _mm256_mul_ps(_mm256_castsi256_ps(em), _mm256_castsi256_ps(_mm256_set1_epi32(0x77800000)));
  const __m256i inf_nan =
      _mm256_cmpeq_epi32(_mm256_and_si256(h, _mm256_set1_epi32(0x7c00)), _mm256_set1_epi32(0x7c00));
  const __m256 special = _mm256_castsi256_ps(_mm256_or_si256(em, _mm256_set1_epi32(0x7f800000)));
  f = _mm256_blendv_ps(f, special, _mm256_castsi256_ps(inf_nan));
  return _mm256_or_ps(f, _mm256_castsi256_ps(sign));
}

void em_qd8_cvt_f16__avx2(const uint16_t *src, float *dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, f16_to_f32(_mm_loadu_si128((const __m128i *)(src + i))));
  if (i < n) {
    uint16_t t[8] = {0};
    float o[8];
    memcpy(t, src + i, (n - i) * sizeof *t);
    _mm256_storeu_ps(o, f16_to_f32(_mm_loadu_si128((const __m128i *)t)));
    memcpy(dst + i, o, (n - i) * sizeof *o);
  }
}

void em_qd8_q4_pack_ukernel__avx2(const float *x, size_t k, uint8_t *row,
                                  const em_qgemm_params *p) {
  pack_q4_row(x, k, row, p);
}

void em_qd8_q8_pack_ukernel__avx2(const float *x, size_t k, uint8_t *row,
                                  const em_qgemm_params *p) {
  pack_q8_row(x, k, row, p);
}

/* One activation row x 4 weight rows (decode); columns past nc repeat the last one. */
static inline __attribute__((always_inline)) void tile_1x4(int bits, size_t nc, const uint8_t *a,
                                                           const uint8_t *w, const float *ws,
                                                           const float *bias, float *y,
                                                           const em_qgemm_params *p) {
  const uint8_t *wr[4];
  const float *sr[4];
  for (size_t j = 0; j < 4; j++) {
    size_t jj = j < nc ? j : nc - 1;
    wr[j] = w + jj * p->w_stride;
    sr[j] = ws + jj * p->ws_stride;
  }
  __m256 c0 = _mm256_setzero_ps(), c1 = c0, c2 = c0, c3 = c0;
  size_t n_chunks = (p->kbytes + 31) / 32;
  /* Each chunk also prefetches the next tile's rows (4 weight rows on): the hardware prefetcher
   * alone kept the GEMV well below the bandwidth a plain stream gets. */
  for (size_t c = 0; c < n_chunks; c++) {
    size_t bytes = chunk_bytes(c, p), lanes = (bytes + 3) / 4;
    __m256i w0, w1;
    _mm_prefetch((const char *)(wr[0] + 4 * p->w_stride + c * 32), _MM_HINT_T0);
    decode(bits, wr[0] + c * 32, bytes, &w0, &w1);
    c0 = mac(bits, c0, a, c, w0, w1, wscale(sr[0], c, lanes, p), p);
    _mm_prefetch((const char *)(wr[1] + 4 * p->w_stride + c * 32), _MM_HINT_T0);
    decode(bits, wr[1] + c * 32, bytes, &w0, &w1);
    c1 = mac(bits, c1, a, c, w0, w1, wscale(sr[1], c, lanes, p), p);
    _mm_prefetch((const char *)(wr[2] + 4 * p->w_stride + c * 32), _MM_HINT_T0);
    decode(bits, wr[2] + c * 32, bytes, &w0, &w1);
    c2 = mac(bits, c2, a, c, w0, w1, wscale(sr[2], c, lanes, p), p);
    _mm_prefetch((const char *)(wr[3] + 4 * p->w_stride + c * 32), _MM_HINT_T0);
    decode(bits, wr[3] + c * 32, bytes, &w0, &w1);
    c3 = mac(bits, c3, a, c, w0, w1, wscale(sr[3], c, lanes, p), p);
  }
  store4(c0, c1, c2, c3, nc, bias, y);
}

/* Up to 4 activation rows x 4 weight rows (prefill), as two 4x2 halves so that the 8 accumulators
 * and one column's decoded weights fit the 16 ymm registers; rows past mr repeat the last one. */
static inline __attribute__((always_inline)) void
tile_4x2(int bits, size_t mr, const uint8_t *a, const uint8_t *w0p, const uint8_t *w1p,
         const float *s0p, const float *s1p, __m256 out[4][2], const em_qgemm_params *p) {
  const uint8_t *a0 = a, *a1 = mr > 1 ? a0 + p->a_stride : a0;
  const uint8_t *a2 = mr > 2 ? a1 + p->a_stride : a1, *a3 = mr > 3 ? a2 + p->a_stride : a2;
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00,
         c30 = c00, c31 = c00;
  size_t n_chunks = (p->kbytes + 31) / 32;
  for (size_t c = 0; c < n_chunks; c++) {
    size_t bytes = chunk_bytes(c, p), lanes = (bytes + 3) / 4;
    __m256i w0, w1;
    decode(bits, w0p + c * 32, bytes, &w0, &w1);
    __m256 sw = wscale(s0p, c, lanes, p);
    c00 = mac(bits, c00, a0, c, w0, w1, sw, p);
    c10 = mac(bits, c10, a1, c, w0, w1, sw, p);
    c20 = mac(bits, c20, a2, c, w0, w1, sw, p);
    c30 = mac(bits, c30, a3, c, w0, w1, sw, p);
    decode(bits, w1p + c * 32, bytes, &w0, &w1);
    sw = wscale(s1p, c, lanes, p);
    c01 = mac(bits, c01, a0, c, w0, w1, sw, p);
    c11 = mac(bits, c11, a1, c, w0, w1, sw, p);
    c21 = mac(bits, c21, a2, c, w0, w1, sw, p);
    c31 = mac(bits, c31, a3, c, w0, w1, sw, p);
  }
  out[0][0] = c00, out[0][1] = c01, out[1][0] = c10, out[1][1] = c11;
  out[2][0] = c20, out[2][1] = c21, out[3][0] = c30, out[3][1] = c31;
}

static inline __attribute__((always_inline)) void
tile_4x4(int bits, size_t mr, size_t nc, const uint8_t *a, const uint8_t *w, const float *ws,
         const float *bias, float *y, size_t ldy, const em_qgemm_params *p) {
  const uint8_t *wr[4];
  const float *sr[4];
  for (size_t j = 0; j < 4; j++) {
    size_t jj = j < nc ? j : nc - 1;
    wr[j] = w + jj * p->w_stride;
    sr[j] = ws + jj * p->ws_stride;
  }
  __m256 lo[4][2], hi[4][2];
  tile_4x2(bits, mr, a, wr[0], wr[1], sr[0], sr[1], lo, p);
  if (nc > 2) tile_4x2(bits, mr, a, wr[2], wr[3], sr[2], sr[3], hi, p);
  for (size_t i = 0; i < mr; i++) {
    __m256 z = _mm256_setzero_ps();
    store4(lo[i][0], lo[i][1], nc > 2 ? hi[i][0] : z, nc > 2 ? hi[i][1] : z, nc, bias, y + i * ldy);
  }
}

void em_qd8_qc4w_f32_gemm_ukernel_4x4__avx2(size_t mr, size_t nc, const uint8_t *a,
                                            const uint8_t *w, const void *ws, const float *bias,
                                            float *y, size_t ldy, const em_qgemm_params *p) {
  if (mr == 1)
    tile_1x4(4, nc, a, w, ws, bias, y, p);
  else
    tile_4x4(4, mr, nc, a, w, ws, bias, y, ldy, p);
}

void em_qd8_qc8w_f32_gemm_ukernel_4x4__avx2(size_t mr, size_t nc, const uint8_t *a,
                                            const uint8_t *w, const void *ws, const float *bias,
                                            float *y, size_t ldy, const em_qgemm_params *p) {
  if (mr == 1)
    tile_1x4(8, nc, a, w, ws, bias, y, p);
  else
    tile_4x4(8, mr, nc, a, w, ws, bias, y, ldy, p);
}

#else
typedef int em_linear_q_avx2_unavailable; /* ISO C forbids an empty translation unit */
#endif
