/*
 * q8_dq__avx512vnni.c — the dynamic int8 linear layers' kernels (EMC_OP_DQ_LINEAR;
 * cpu_ukernels.h has their contracts) with AVX-512 VNNI.
 *
 * The row quantizer finds the row's minimum and maximum 16 values at a time, then quantizes 16
 * at a time in f32, where that provably gives the integers of quantize_per_token's f64 steps,
 * else (values near a half-integer) in f64, and stores the u8 bytes. The tile is the
 * int8 convs' pixel-major one (q8_pw__avx512vnni.c) with rows for pixels: 8 rows by 32
 * channels, per group of 4 depths each row's 4 bytes broadcast and multiplied (vpdpbusd) with
 * two vectors of 16 channels' weights, so each row's channels are already side by side for an
 * f32 row-major store; its epilogue takes each row's zero point and scale. Same bits as
 * q8_dq_impl.h.
 */
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "cpu_ukernels.h"
#include "q8_tile8__avx512.h"

enum { DQ_MR = 8 }; /* rows per tile */

void em_q8_rowq_ukernel__avx512vnni(size_t k, const float *x, uint8_t *a, int32_t *za, float *s) {
  const size_t kp = (k + 3) / 4 * 4;
  __m512 mn = _mm512_set1_ps(INFINITY), mx = _mm512_set1_ps(-INFINITY);
  const __m512 zero = _mm512_setzero_ps();
  __mmask16 bad = 0;
  for (size_t j = 0; j < k; j += 16) {
    const __mmask16 m = (__mmask16)(k - j >= 16 ? 0xFFFFu : (1u << (k - j)) - 1u);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + j);
    bad |= _mm512_mask_cmp_ps_mask(m, _mm512_sub_ps(v, v), zero, _CMP_NEQ_UQ); /* inf, NaN */
    mn = _mm512_mask_min_ps(mn, m, mn, v);
    mx = _mm512_mask_max_ps(mx, m, mx, v);
  }
  if (bad) {
    memset(a, 0, kp);
    *za = 0, *s = NAN;
    return;
  }
  double scale, zp;
  em_q8_token_qparams(_mm512_reduce_min_ps(mn), _mm512_reduce_max_ps(mx), &scale, &zp);
  const double zr = nearbyint(zp);
  const __m512d inv = _mm512_set1_pd(1.0 / scale), zd = _mm512_set1_pd(zr);
  const __m512d lo = _mm512_set1_pd(-128.0), hi = _mm512_set1_pd(127.0);
  const __m512 inv32 = _mm512_set1_ps((float)(1.0 / scale)), z32 = _mm512_set1_ps((float)zr);
  const __m512 lo32 = _mm512_set1_ps(-128.0f), hi32 = _mm512_set1_ps(127.0f);
  const __m512 near = _mm512_set1_ps(0.4999f);
  const __m512i off = _mm512_set1_epi32(128);
  for (size_t j = 0; j < k; j += 16) {
    const size_t r = k - j >= 16 ? 16 : k - j;
    const __m512 v = _mm512_maskz_loadu_ps((__mmask16)((1u << r) - 1u), x + j);
    /* In f32: t = x * inv + zp is within 5e-5 of the f64 value where that can round to
     * [-128, 127] (|x * inv| <= 256.5: two roundings of 2^-24 relative, one of 2^-17
     * absolute), so t and the f64 value round to the same integer unless t lies within 1e-4
     * of a half-integer; such a block (one in ~300) takes the f64 steps. */
    const __m512 t = _mm512_add_ps(_mm512_mul_ps(v, inv32), z32);
    const __m512 rt = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 dist = _mm512_abs_ps(_mm512_sub_ps(t, rt)); /* inf - inf: NaN, not near */
    __m512i qi;
    if (!_mm512_cmp_ps_mask(dist, near, _CMP_GT_OQ)) {
      qi = _mm512_cvtps_epi32(_mm512_min_ps(hi32, _mm512_max_ps(lo32, rt)));
    } else {
      const __m512d d0 = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
      const __m512d d1 =
          _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
      __m512d q0 = _mm512_add_pd(_mm512_mul_pd(d0, inv), zd);
      __m512d q1 = _mm512_add_pd(_mm512_mul_pd(d1, inv), zd);
      q0 = _mm512_roundscale_pd(q0, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      q1 = _mm512_roundscale_pd(q1, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      q0 = _mm512_min_pd(hi, _mm512_max_pd(lo, q0));
      q1 = _mm512_min_pd(hi, _mm512_max_pd(lo, q1));
      qi = _mm512_castsi256_si512(_mm512_cvtpd_epi32(q0));
      qi = _mm512_inserti64x4(qi, _mm512_cvtpd_epi32(q1), 1);
    }
    const __m128i b = _mm512_cvtepi32_epi8(_mm512_add_epi32(qi, off));
    _mm512_mask_storeu_epi8(a + j, (__mmask64)((1ull << r) - 1u), _mm512_castsi128_si512(b));
  }
  for (size_t j = k; j < kp; j++) a[j] = (uint8_t)((int32_t)zr + 128);
  *za = (int32_t)zr + 128, *s = (float)scale;
}

void em_q8_rowt_ukernel__avx512vnni(size_t k, const float *x, uint8_t *a,
                                    const em_q8_rowt_params *p, float *mn, float *mx) {
  if (!a) {
    __m512 lo = _mm512_set1_ps(INFINITY), hi = _mm512_set1_ps(-INFINITY);
    __mmask16 nan = 0;
    for (size_t j = 0; j < k; j += 16) {
      const __mmask16 m = (__mmask16)(k - j >= 16 ? 0xFFFFu : (1u << (k - j)) - 1u);
      const __m512 v = _mm512_maskz_loadu_ps(m, x + j);
      nan |= _mm512_mask_cmp_ps_mask(m, v, v, _CMP_UNORD_Q);
      lo = _mm512_mask_min_ps(lo, m, lo, v);
      hi = _mm512_mask_max_ps(hi, m, hi, v);
    }
    *mn = nan ? NAN : _mm512_reduce_min_ps(lo), *mx = nan ? NAN : _mm512_reduce_max_ps(hi);
    return;
  }
  const __m512 inv = _mm512_set1_ps(p->inv), zp = _mm512_set1_ps(p->zp);
  const __m512 qmin = _mm512_set1_ps(p->qmin), qmax = _mm512_set1_ps(p->qmax);
  const __m512i off = _mm512_set1_epi32(128);
  for (size_t j = 0; j < k; j += 16) {
    const size_t r = k - j >= 16 ? 16 : k - j;
    const __m512 v = _mm512_maskz_loadu_ps((__mmask16)((1u << r) - 1u), x + j);
    __m512 t =
        _mm512_roundscale_ps(_mm512_mul_ps(v, inv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    t = _mm512_max_ps(_mm512_add_ps(t, zp), qmin); /* NaN: the second operand, qmin */
    const __m512i q = _mm512_add_epi32(_mm512_cvtps_epi32(_mm512_min_ps(t, qmax)), off);
    _mm512_mask_storeu_epi8(a + j, (__mmask64)((1ull << r) - 1u),
                            _mm512_castsi128_si512(_mm512_cvtepi32_epi8(q)));
  }
  for (size_t j = k; j < (k + 3) / 4 * 4; j++) a[j] = (uint8_t)((int32_t)p->zp + 128);
}

/* Row i's 16 channels: (acc - za * wsum) * (s * ws) (+ bias). */
static inline __attribute__((always_inline)) __m512
dq_value(__m512i acc, __m512i wsum, __m512 ws, const float *bias, __m512 bv, int32_t za, float s) {
  const __m512i t = _mm512_sub_epi32(acc, _mm512_mullo_epi32(_mm512_set1_epi32(za), wsum));
  __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(t), _mm512_mul_ps(_mm512_set1_ps(s), ws));
  return bias ? _mm512_add_ps(v, bv) : v;
}

/* One block of 16 channels (nc of them) of the tile's rows: row-major (cs 1, rows ys apart) or
 * transposed (channels cs apart, rows adjacent). */
static inline __attribute__((always_inline)) void
dq_block(const __m512i acc[DQ_MR], size_t np, size_t nc, const int32_t *wsum, const float *ws,
         const float *bias, const int32_t *za, const float *s, float *y, size_t ys, size_t cs) {
  const __mmask16 k = (__mmask16)(nc >= 16 ? 0xFFFFu : (1u << nc) - 1u);
  const __m512i sv = _mm512_maskz_loadu_epi32(k, wsum);
  const __m512 wv = _mm512_maskz_loadu_ps(k, ws);
  const __m512 bv = bias ? _mm512_maskz_loadu_ps(k, bias) : _mm512_setzero_ps();
  if (cs == 1) {
    for (size_t i = 0; i < np && i < DQ_MR; i++)
      _mm512_mask_storeu_ps(y + i * ys, k, dq_value(acc[i], sv, wv, bias, bv, za[i], s[i]));
    return;
  }
  __m512 v[DQ_MR];
  for (size_t i = 0; i < DQ_MR; i++) /* rows past np: the last row's (not stored) */
    v[i] = dq_value(acc[i], sv, wv, bias, bv, za[i < np ? i : np - 1], s[i < np ? i : np - 1]);
  q8_store8_planes(v, np, nc < 16 ? nc : 16, y, cs);
}

void em_q8_dq_ukernel__avx512vnni(size_t np, size_t nc, size_t kq, const uint8_t *a, size_t as,
                                  const int8_t *w, const int32_t *wsum, const float *ws,
                                  const float *bias, const int32_t *za, const float *s, float *y,
                                  size_t ys, size_t cs) {
  /* Rows past np read the last one (their results are not stored): the loop stays fixed. */
  const uint8_t *xp[DQ_MR];
  for (size_t i = 0; i < DQ_MR; i++) xp[i] = a + (i < np ? i : np - 1) * as;
  __m512i acc_a[DQ_MR], acc_b[DQ_MR];
  q8_tile8_sums(xp, NULL, kq, w, nc > 16, _mm512_setzero_si512(), _mm512_setzero_si512(), acc_a,
                acc_b);
  dq_block(acc_a, np, nc, wsum, ws, bias, za, s, y, ys, cs);
  if (nc > 16)
    dq_block(acc_b, np, nc - 16, wsum + 16, ws + 16, bias ? bias + 16 : NULL, za, s, y + 16 * cs,
             ys, cs);
}
#endif
