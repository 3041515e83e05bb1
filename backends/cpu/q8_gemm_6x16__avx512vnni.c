/*
 * q8_gemm_6x16__avx512vnni.c — the int8 GEMM tile of the int8 convs (EMC_CONV_Q8) with AVX-512
 * VNNI: per group of 4 depths one 64-byte load of the u8 column panel (16 pixels x 4) and, for
 * each of the 6 rows, vpdpbusd with that row's 4 int8 weights broadcast. Two sets of
 * accumulators (even and odd groups) give 12 independent chains, enough to keep both vector
 * pipes busy on Zen 4 (512-bit ops as two halves) and on Intel. Same contract and results as
 * q8_gemm_impl.h (exact int32 sums, then (acc - corr) * scale + bias).
 *
 * The 6x32 tile (em_q8_gemm_6x32_ukernel__avx512vnni, what the int8 convs use with VNNI) runs
 * two consecutive column panels at once, so each broadcast of a row's weights feeds two
 * vpdpbusd: one broadcast per 2 multiply-adds instead of one per 1. On Zen 5 (two full 512-bit
 * VNNI pipes) the 6x16 tile is bound by the broadcasts at 53-56 % of the VNNI peak and the 6x32
 * one reaches 86-90 % (bench/gemm/q8_tile_bench.c); on Zen 4 both have the pipes' throughput.
 */
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#include <string.h>

#include "cpu_ukernels.h"

#define EM_ISA        avx512vnni
#define EM_Q8_NO_TILE 1
#include "q8_gemm_impl.h" /* the input quantizer, vectorized with this file's flags */

static inline __m512i bcast4(const int8_t *p) {
  int32_t v;
  memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

void em_q8_gemm_6x16_ukernel__avx512vnni(size_t mr, size_t nr, size_t kq, const int8_t *a,
                                         const uint8_t *b, const int32_t *corr, const float *scale,
                                         const float *bias, float *c, size_t ldc) {
  __m512i e0 = _mm512_setzero_si512(), e1 = e0, e2 = e0, e3 = e0, e4 = e0, e5 = e0;
  __m512i o0 = e0, o1 = e0, o2 = e0, o3 = e0, o4 = e0, o5 = e0;
  size_t q = 0;
  for (; q + 2 <= kq; q += 2) {
    const int8_t *ap = a + q * 24;
    const __m512i b0 = _mm512_loadu_si512((const void *)(b + q * 64));
    const __m512i b1 = _mm512_loadu_si512((const void *)(b + q * 64 + 64));
    _mm_prefetch((const char *)(b + q * 64 + 512), _MM_HINT_T0);
    e0 = _mm512_dpbusd_epi32(e0, b0, bcast4(ap + 0));
    e1 = _mm512_dpbusd_epi32(e1, b0, bcast4(ap + 4));
    e2 = _mm512_dpbusd_epi32(e2, b0, bcast4(ap + 8));
    e3 = _mm512_dpbusd_epi32(e3, b0, bcast4(ap + 12));
    e4 = _mm512_dpbusd_epi32(e4, b0, bcast4(ap + 16));
    e5 = _mm512_dpbusd_epi32(e5, b0, bcast4(ap + 20));
    o0 = _mm512_dpbusd_epi32(o0, b1, bcast4(ap + 24));
    o1 = _mm512_dpbusd_epi32(o1, b1, bcast4(ap + 28));
    o2 = _mm512_dpbusd_epi32(o2, b1, bcast4(ap + 32));
    o3 = _mm512_dpbusd_epi32(o3, b1, bcast4(ap + 36));
    o4 = _mm512_dpbusd_epi32(o4, b1, bcast4(ap + 40));
    o5 = _mm512_dpbusd_epi32(o5, b1, bcast4(ap + 44));
  }
  if (q < kq) {
    const int8_t *ap = a + q * 24;
    const __m512i b0 = _mm512_loadu_si512((const void *)(b + q * 64));
    e0 = _mm512_dpbusd_epi32(e0, b0, bcast4(ap + 0));
    e1 = _mm512_dpbusd_epi32(e1, b0, bcast4(ap + 4));
    e2 = _mm512_dpbusd_epi32(e2, b0, bcast4(ap + 8));
    e3 = _mm512_dpbusd_epi32(e3, b0, bcast4(ap + 12));
    e4 = _mm512_dpbusd_epi32(e4, b0, bcast4(ap + 16));
    e5 = _mm512_dpbusd_epi32(e5, b0, bcast4(ap + 20));
  }
  __m512i acc[6] = {_mm512_add_epi32(e0, o0), _mm512_add_epi32(e1, o1), _mm512_add_epi32(e2, o2),
                    _mm512_add_epi32(e3, o3), _mm512_add_epi32(e4, o4), _mm512_add_epi32(e5, o5)};
  const __mmask16 m = (__mmask16)(nr >= 16 ? 0xFFFFu : ((1u << nr) - 1u));
  for (size_t r = 0; r < mr; r++) {
    const __m512i v = _mm512_sub_epi32(acc[r], _mm512_set1_epi32(corr[r])); /* wraps, no UB */
    __m512 f = _mm512_cvtepi32_ps(v);
    /* multiply then add, two roundings, as the portable tile (bit-identical results) */
    f = _mm512_add_ps(_mm512_mul_ps(f, _mm512_set1_ps(scale[r])),
                      _mm512_set1_ps(bias ? bias[r] : 0.0f));
    _mm512_mask_storeu_ps(c + r * ldc, m, f);
  }
}

/* (acc - corr) * scale + bias of one row's 16 columns (mask m), as the 6x16 tile's epilogue. */
static inline void store_row(__m512i acc, int32_t corr, float scale, float bias, float *c,
                             __mmask16 m) {
  __m512 f = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc, _mm512_set1_epi32(corr)));
  f = _mm512_add_ps(_mm512_mul_ps(f, _mm512_set1_ps(scale)), _mm512_set1_ps(bias));
  _mm512_mask_storeu_ps(c, m, f);
}

void em_q8_gemm_6x32_ukernel__avx512vnni(size_t mr, size_t nr, size_t kq, const int8_t *a,
                                         const uint8_t *b, const int32_t *corr, const float *scale,
                                         const float *bias, float *c, size_t ldc) {
  if (nr <= 16) { /* one panel: the second may not exist */
    em_q8_gemm_6x16_ukernel__avx512vnni(mr, nr, kq, a, b, corr, scale, bias, c, ldc);
    return;
  }
  const uint8_t *b2 = b + kq * 64; /* the next column panel */
  __m512i l0 = _mm512_setzero_si512(), l1 = l0, l2 = l0, l3 = l0, l4 = l0, l5 = l0;
  __m512i h0 = l0, h1 = l0, h2 = l0, h3 = l0, h4 = l0, h5 = l0;
  for (size_t q = 0; q < kq; q++) {
    const int8_t *ap = a + q * 24;
    const __m512i b0 = _mm512_loadu_si512((const void *)(b + q * 64));
    const __m512i b1 = _mm512_loadu_si512((const void *)(b2 + q * 64));
    _mm_prefetch((const char *)(b + q * 64 + 256), _MM_HINT_T0);
    _mm_prefetch((const char *)(b2 + q * 64 + 256), _MM_HINT_T0);
    __m512i x = bcast4(ap + 0);
    l0 = _mm512_dpbusd_epi32(l0, b0, x), h0 = _mm512_dpbusd_epi32(h0, b1, x);
    x = bcast4(ap + 4);
    l1 = _mm512_dpbusd_epi32(l1, b0, x), h1 = _mm512_dpbusd_epi32(h1, b1, x);
    x = bcast4(ap + 8);
    l2 = _mm512_dpbusd_epi32(l2, b0, x), h2 = _mm512_dpbusd_epi32(h2, b1, x);
    x = bcast4(ap + 12);
    l3 = _mm512_dpbusd_epi32(l3, b0, x), h3 = _mm512_dpbusd_epi32(h3, b1, x);
    x = bcast4(ap + 16);
    l4 = _mm512_dpbusd_epi32(l4, b0, x), h4 = _mm512_dpbusd_epi32(h4, b1, x);
    x = bcast4(ap + 20);
    l5 = _mm512_dpbusd_epi32(l5, b0, x), h5 = _mm512_dpbusd_epi32(h5, b1, x);
  }
  const __m512i lo[6] = {l0, l1, l2, l3, l4, l5}, hi[6] = {h0, h1, h2, h3, h4, h5};
  const __mmask16 m = (__mmask16)(nr >= 32 ? 0xFFFFu : ((1u << (nr - 16)) - 1u));
  for (size_t r = 0; r < mr; r++) {
    const float bv = bias ? bias[r] : 0.0f;
    store_row(lo[r], corr[r], scale[r], bv, c + r * ldc, (__mmask16)0xFFFFu);
    store_row(hi[r], corr[r], scale[r], bv, c + r * ldc + 16, m);
  }
}
#endif
