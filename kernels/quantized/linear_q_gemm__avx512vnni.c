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

#define MR 4
#define NR 4

/* w_scale for the 16 lanes of chunk c of one weight row (0 past the row's groups). */
static inline __m512 wscale(const float *ws, size_t c, size_t lanes_valid, const em_qgemm_params *p,
                            __m512i gidx) {
  size_t l0 = c * 16;
  if (p->group_lanes >= 16) return _mm512_set1_ps(ws[l0 / p->group_lanes]);
  size_t ng = (lanes_valid + p->group_lanes - 1) / p->group_lanes;
  __m512 v = _mm512_maskz_loadu_ps((__mmask16)((1u << ng) - 1), ws + l0 / p->group_lanes);
  return _mm512_permutexvar_ps(gidx, v);
}

/*
 * The tile body for constant mr x nc (inlined per shape, so the accumulators stay in registers).
 * BITS selects the weight decoding: 4 -> two operands (low and high nibbles), 8 -> one.
 */
static inline __attribute__((always_inline)) void tile(int bits, size_t mr, size_t nc,
                                                       const uint8_t *a, const uint8_t *w,
                                                       const float *ws, const float *bias, float *y,
                                                       size_t ldy, const em_qgemm_params *p) {
  __m512 acc[MR][NR];
  for (size_t i = 0; i < mr; i++)
    for (size_t j = 0; j < nc; j++) acc[i][j] = _mm512_setzero_ps();
  const __m512i nib = _mm512_set1_epi8(0x0F), flip = _mm512_set1_epi8((char)0x80);
  __m512i gidx = _mm512_setzero_si512();
  if (p->group_lanes < 16) {
    int32_t idx[16];
    for (int l = 0; l < 16; l++) idx[l] = (int32_t)((size_t)l / p->group_lanes);
    gidx = _mm512_loadu_si512(idx);
  }
  size_t n_chunks = (p->kbytes + 63) / 64;
  for (size_t c = 0; c < n_chunks; c++) {
    size_t off = c * 64, bytes = p->kbytes - off < 64 ? p->kbytes - off : 64;
    __mmask64 mask = bytes == 64 ? ~(__mmask64)0 : (((__mmask64)1 << bytes) - 1);
    __m512i w0[NR], w1[NR];
    __m512 sw[NR];
    for (size_t j = 0; j < nc; j++) {
      __m512i v = _mm512_maskz_loadu_epi8(mask, w + j * p->w_stride + off);
      if (bits == 4) {
        w0[j] = _mm512_and_si512(v, nib);
        w1[j] = _mm512_and_si512(_mm512_srli_epi16(v, 4), nib);
      } else {
        w0[j] = _mm512_xor_si512(v, flip); /* padding bytes meet zero activations */
        w1[j] = w0[j];
      }
      sw[j] = wscale(ws + j * p->ws_stride, c, (bytes + 3) / 4, p, gidx);
    }
    for (size_t i = 0; i < mr; i++) {
      const uint8_t *ar = a + i * p->a_stride;
      __m512i a0 = _mm512_load_si512(ar + off);
      __m512i a1 = bits == 4 ? _mm512_load_si512(ar + p->off_a1 + off) : a0;
      __m512i corr = _mm512_load_si512(ar + p->off_corr + off);
      __m512 sl = _mm512_load_ps((const float *)(ar + p->off_sl) + c * 16);
      for (size_t j = 0; j < nc; j++) {
        __m512i d = _mm512_dpbusd_epi32(corr, w0[j], a0);
        if (bits == 4) d = _mm512_dpbusd_epi32(d, w1[j], a1);
        acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_mul_ps(sl, sw[j]), acc[i][j]);
      }
    }
  }
  for (size_t i = 0; i < mr; i++)
    for (size_t j = 0; j < nc; j++) {
      float v = _mm512_reduce_add_ps(acc[i][j]);
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
    TILE_CASE(BITS, 1, 3)                                                                          \
    TILE_CASE(BITS, 1, 4)                                                                          \
    TILE_CASE(BITS, 2, 1)                                                                          \
    TILE_CASE(BITS, 2, 2)                                                                          \
    TILE_CASE(BITS, 2, 3)                                                                          \
    TILE_CASE(BITS, 2, 4)                                                                          \
    TILE_CASE(BITS, 3, 1)                                                                          \
    TILE_CASE(BITS, 3, 2)                                                                          \
    TILE_CASE(BITS, 3, 3)                                                                          \
    TILE_CASE(BITS, 3, 4)                                                                          \
    TILE_CASE(BITS, 4, 1)                                                                          \
    TILE_CASE(BITS, 4, 2)                                                                          \
    TILE_CASE(BITS, 4, 3)                                                                          \
    TILE_CASE(BITS, 4, 4)                                                                          \
  default: return;                                                                                 \
  }

void em_qd8_qc4w_f32_gemm_ukernel_4x4__avx512vnni(size_t mr, size_t nc, const uint8_t *a,
                                                  const uint8_t *w, const float *ws,
                                                  const float *bias, float *y, size_t ldy,
                                                  const em_qgemm_params *p) {
  TILE_SWITCH(4)
}

void em_qd8_qc8w_f32_gemm_ukernel_4x4__avx512vnni(size_t mr, size_t nc, const uint8_t *a,
                                                  const uint8_t *w, const float *ws,
                                                  const float *bias, float *y, size_t ldy,
                                                  const em_qgemm_params *p) {
  TILE_SWITCH(8)
}

#else
typedef int em_linear_q_avx512vnni_unavailable; /* ISO C forbids an empty translation unit */
#endif
