/*
 * linear_q_gemm__avx512vnni.c — AVX-512 VNNI micro-kernels of ember::linear_q4 / linear_q8
 * (linear_q.h): a tile of up to 4 activation rows x 4 weight rows per call.
 *
 * vpdpbusd multiplies unsigned by signed bytes, four per 32-bit lane. The weights become the
 * unsigned operand by their offset (q4: the stored nibble q + 8; q8: q ^ 0x80 = q + 128) and the
 * lane accumulator starts at the packed row's correction -off * sum(activations of the lane), so
 * each lane's integer is exact. A 64-byte chunk of a weight row is 16 lanes (q4: 128 elements in
 * 4 blocks; q8: 64 elements in 2 blocks); lanes are converted to f32 once per chunk and scaled by
 * a_scale(lane) * w_scale(lane) with one FMA. Tails (weight bytes per row not a multiple of 64)
 * use masked loads; the packed activations are zero-padded to 64 bytes.
 *
 * Compiled with -mavx512f -mavx512bw -mavx512vnni (CMakeLists.txt) and chosen at run time only
 * when CPUID reports them (linear_q.c). Elsewhere this file is empty.
 */
#include "quantized/linear_q.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
#include <immintrin.h>

/* w_scale for the 16 lanes of chunk c of one weight row (0 past the row's groups). */
static inline __m512 wscale(const float *ws, size_t c, size_t lanes_valid, const em_qgemm_params *p,
                            __m512i gidx) {
  size_t l0 = c * 16;
  unsigned sh = p->gl_shift;
  if (sh >= 4) return _mm512_set1_ps(ws[l0 >> sh]);
  size_t ng = (lanes_valid + ((size_t)1 << sh) - 1) >> sh;
  __m512 v = _mm512_maskz_loadu_ps((__mmask16)((1u << ng) - 1), ws + (l0 >> sh));
  return _mm512_permutexvar_ps(gidx, v);
}

/* Weight row wr's chunk decoded into the unsigned dpbusd operands lo (and hi, q4). */
static inline __attribute__((always_inline)) void decode(int bits, const uint8_t *wr,
                                                         __mmask64 mask, __m512i *lo, __m512i *hi) {
  __m512i v = _mm512_maskz_loadu_epi8(mask, wr);
  if (bits == 4) {
    *lo = _mm512_and_si512(v, _mm512_set1_epi8(0x0F));
    *hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), _mm512_set1_epi8(0x0F));
  } else {
    *lo = _mm512_xor_si512(v, _mm512_set1_epi8((char)0x80)); /* padding meets zero activations */
    *hi = *lo;
  }
}

/* acc + f32(exact lane dots of packed row ar with lo/hi) * a_scale * w_scale, for chunk c. */
static inline __attribute__((always_inline)) __m512 mac(int bits, __m512 acc, const uint8_t *ar,
                                                        size_t c, __m512i lo, __m512i hi, __m512 sw,
                                                        const em_qgemm_params *p) {
  size_t off = c * 64;
  __m512i d = _mm512_dpbusd_epi32(_mm512_load_si512(ar + p->off_corr + off), lo,
                                  _mm512_load_si512(ar + off));
  if (bits == 4) d = _mm512_dpbusd_epi32(d, hi, _mm512_load_si512(ar + p->off_a1 + off));
  __m512 sl = _mm512_load_ps((const float *)(ar + p->off_sl) + c * 16);
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_mul_ps(sl, sw), acc);
}

/* The four sums of c0..c3 (one output row's tile), in order. */
static inline __m128 reduce4(__m512 c0, __m512 c1, __m512 c2, __m512 c3) {
  __m512 a = _mm512_add_ps(_mm512_unpacklo_ps(c0, c1), _mm512_unpackhi_ps(c0, c1));
  __m512 b = _mm512_add_ps(_mm512_unpacklo_ps(c2, c3), _mm512_unpackhi_ps(c2, c3));
  __m512 s = _mm512_add_ps(_mm512_shuffle_ps(a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                           _mm512_shuffle_ps(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
  __m256 h = _mm256_add_ps(_mm512_castps512_ps256(s),
                           _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(s), 1)));
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

/* Writes one row of the tile (nc <= 4 outputs, + bias). */
static inline void store_row(__m128 v, size_t nc, const float *bias, float *yr) {
  float t[4];
  _mm_storeu_ps(t, v);
  for (size_t j = 0; j < nc; j++) yr[j] = bias ? t[j] + bias[j] : t[j];
}

/* Chunk c's byte mask (the last chunk of a row may be short) and valid lane count. */
static inline __mmask64 chunk_mask(size_t c, const em_qgemm_params *p, size_t *lanes) {
  size_t off = c * 64, bytes = p->kbytes - off < 64 ? p->kbytes - off : 64;
  *lanes = (bytes + 3) / 4;
  return bytes == 64 ? ~(__mmask64)0 : (((__mmask64)1 << bytes) - 1);
}

/* Column pointers: columns past nc repeat the last one (computed, never stored). */
#define COLUMNS                                                                                    \
  const uint8_t *wr0 = w, *wr1 = nc > 1 ? wr0 + p->w_stride : wr0;                                 \
  const uint8_t *wr2 = nc > 2 ? wr1 + p->w_stride : wr1, *wr3 = nc > 3 ? wr2 + p->w_stride : wr2;  \
  const float *sr0 = ws, *sr1 = nc > 1 ? sr0 + p->ws_stride : sr0;                                 \
  const float *sr2 = nc > 2 ? sr1 + p->ws_stride : sr1, *sr3 = nc > 3 ? sr2 + p->ws_stride : sr2;  \
  const __m512i iota = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);     \
  const __m512i gidx = _mm512_srl_epi32(iota, _mm_cvtsi32_si128((int)(p->gl_shift & 31)));         \
  const size_t n_chunks = (p->kbytes + 63) / 64

/* Decodes column J of chunk c: lo##J, hi##J, sw##J. */
#define DECODE(J)                                                                                  \
  __m512i lo##J, hi##J;                                                                            \
  decode(bits, wr##J + c * 64, mask, &lo##J, &hi##J);                                              \
  const __m512 sw##J = wscale(sr##J, c, lanes, p, gidx)

/* One activation row x 4 weight rows (decode: a GEMV streaming the weights). */
static inline __attribute__((always_inline)) void tile_1x4(int bits, size_t nc, const uint8_t *a,
                                                           const uint8_t *w, const float *ws,
                                                           const float *bias, float *y,
                                                           const em_qgemm_params *p) {
  COLUMNS;
  __m512 c00 = _mm512_setzero_ps(), c01 = c00, c02 = c00, c03 = c00;
  for (size_t c = 0; c < n_chunks; c++) {
    size_t lanes;
    __mmask64 mask = chunk_mask(c, p, &lanes);
    DECODE(0);
    DECODE(1);
    DECODE(2);
    DECODE(3);
    c00 = mac(bits, c00, a, c, lo0, hi0, sw0, p);
    c01 = mac(bits, c01, a, c, lo1, hi1, sw1, p);
    c02 = mac(bits, c02, a, c, lo2, hi2, sw2, p);
    c03 = mac(bits, c03, a, c, lo3, hi3, sw3, p);
  }
  store_row(reduce4(c00, c01, c02, c03), nc, bias, y);
}

/* Up to 4 activation rows x 4 weight rows (prefill): each weight chunk is decoded once for the
 * four rows; rows past mr repeat the last one (computed, never stored). */
static inline __attribute__((always_inline)) void
tile_4x4(int bits, size_t mr, size_t nc, const uint8_t *a, const uint8_t *w, const float *ws,
         const float *bias, float *y, size_t ldy, const em_qgemm_params *p) {
  const uint8_t *a0 = a, *a1 = mr > 1 ? a0 + p->a_stride : a0;
  const uint8_t *a2 = mr > 2 ? a1 + p->a_stride : a1, *a3 = mr > 3 ? a2 + p->a_stride : a2;
  COLUMNS;
  __m512 c00 = _mm512_setzero_ps(), c01 = c00, c02 = c00, c03 = c00, c10 = c00, c11 = c00,
         c12 = c00, c13 = c00, c20 = c00, c21 = c00, c22 = c00, c23 = c00, c30 = c00, c31 = c00,
         c32 = c00, c33 = c00;
  for (size_t c = 0; c < n_chunks; c++) {
    size_t lanes;
    __mmask64 mask = chunk_mask(c, p, &lanes);
    DECODE(0);
    c00 = mac(bits, c00, a0, c, lo0, hi0, sw0, p);
    c10 = mac(bits, c10, a1, c, lo0, hi0, sw0, p);
    c20 = mac(bits, c20, a2, c, lo0, hi0, sw0, p);
    c30 = mac(bits, c30, a3, c, lo0, hi0, sw0, p);
    DECODE(1);
    c01 = mac(bits, c01, a0, c, lo1, hi1, sw1, p);
    c11 = mac(bits, c11, a1, c, lo1, hi1, sw1, p);
    c21 = mac(bits, c21, a2, c, lo1, hi1, sw1, p);
    c31 = mac(bits, c31, a3, c, lo1, hi1, sw1, p);
    DECODE(2);
    c02 = mac(bits, c02, a0, c, lo2, hi2, sw2, p);
    c12 = mac(bits, c12, a1, c, lo2, hi2, sw2, p);
    c22 = mac(bits, c22, a2, c, lo2, hi2, sw2, p);
    c32 = mac(bits, c32, a3, c, lo2, hi2, sw2, p);
    DECODE(3);
    c03 = mac(bits, c03, a0, c, lo3, hi3, sw3, p);
    c13 = mac(bits, c13, a1, c, lo3, hi3, sw3, p);
    c23 = mac(bits, c23, a2, c, lo3, hi3, sw3, p);
    c33 = mac(bits, c33, a3, c, lo3, hi3, sw3, p);
  }
  store_row(reduce4(c00, c01, c02, c03), nc, bias, y);
  if (mr > 1) store_row(reduce4(c10, c11, c12, c13), nc, bias, y + ldy);
  if (mr > 2) store_row(reduce4(c20, c21, c22, c23), nc, bias, y + 2 * ldy);
  if (mr > 3) store_row(reduce4(c30, c31, c32, c33), nc, bias, y + 3 * ldy);
}

void em_qd8_qc4w_f32_gemm_ukernel_4x4__avx512vnni(size_t mr, size_t nc, const uint8_t *a,
                                                  const uint8_t *w, const float *ws,
                                                  const float *bias, float *y, size_t ldy,
                                                  const em_qgemm_params *p) {
  if (mr == 1)
    tile_1x4(4, nc, a, w, ws, bias, y, p);
  else
    tile_4x4(4, mr, nc, a, w, ws, bias, y, ldy, p);
}

void em_qd8_qc8w_f32_gemm_ukernel_4x4__avx512vnni(size_t mr, size_t nc, const uint8_t *a,
                                                  const uint8_t *w, const float *ws,
                                                  const float *bias, float *y, size_t ldy,
                                                  const em_qgemm_params *p) {
  if (mr == 1)
    tile_1x4(8, nc, a, w, ws, bias, y, p);
  else
    tile_4x4(8, mr, nc, a, w, ws, bias, y, ldy, p);
}

#else
typedef int em_linear_q_avx512vnni_unavailable; /* ISO C forbids an empty translation unit */
#endif
