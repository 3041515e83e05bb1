/*
 * q8_dq__avx512vnni.c — the dynamic int8 linear layers' kernels (EMC_OP_DQ_LINEAR;
 * cpu_ukernels.h has their contracts) with AVX-512 VNNI.
 *
 * The row quantizer finds the row's minimum and maximum 16 values at a time, then quantizes 16
 * at a time in f32, where that provably gives the integers of quantize_per_token's f64 steps,
 * else (values near a half-integer) in f64, and stores the u8 bytes; rows go in blocks of 4,
 * each pass for all of the block's rows before the next. The tile is the
 * int8 convs' pixel-major one (q8_pw__avx512vnni.c) with rows for pixels: 8 rows by 32
 * channels, per group of 4 depths each row's 4 bytes broadcast and multiplied (vpdpbusd) with
 * two vectors of 16 channels' weights, so each row's channels are already side by side for an
 * f32 row-major store; its epilogue takes each row's zero point and scale. Same bits as
 * q8_dq_impl.h.
 */
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "cpu_ukernels.h"
#include "q8_tile8__avx512.h"

enum { DQ_MR = 8 }; /* rows per tile */

/* Row x's minimum and maximum (false: it holds an infinity or a NaN: a NaN by its own mask, an
 * infinity by the minimum or maximum it becomes). */
static bool rowq_minmax(size_t k, const float *x, float *mn, float *mx) {
  __m512 lo = _mm512_set1_ps(INFINITY), hi = _mm512_set1_ps(-INFINITY);
  __mmask16 nan = 0;
  size_t j = 0;
  for (; j + 16 <= k; j += 16) {
    const __m512 v = _mm512_loadu_ps(x + j);
    nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    lo = _mm512_min_ps(lo, v);
    hi = _mm512_max_ps(hi, v);
  }
  if (j < k) {
    const __mmask16 m = (__mmask16)((1u << (k - j)) - 1u);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + j);
    nan |= _mm512_mask_cmp_ps_mask(m, v, v, _CMP_UNORD_Q);
    lo = _mm512_mask_min_ps(lo, m, lo, v);
    hi = _mm512_mask_max_ps(hi, m, hi, v);
  }
  *mn = _mm512_reduce_min_ps(lo), *mx = _mm512_reduce_max_ps(hi);
  return !nan && *mn > -INFINITY && *mx < INFINITY;
}

/* 16 values of a row quantized in f64 (the reference's steps): clamp(nearbyint(x * inv + zr),
 * -128, 127) as int32. */
static inline __m512i rowq_f64(__m512 v, double inv, double zr) {
  const __m512d invd = _mm512_set1_pd(inv), zd = _mm512_set1_pd(zr);
  const __m512d lo = _mm512_set1_pd(-128.0), hi = _mm512_set1_pd(127.0);
  const __m512d d0 = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
  const __m512d d1 =
      _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  __m512d q0 = _mm512_add_pd(_mm512_mul_pd(d0, invd), zd);
  __m512d q1 = _mm512_add_pd(_mm512_mul_pd(d1, invd), zd);
  q0 = _mm512_roundscale_pd(q0, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  q1 = _mm512_roundscale_pd(q1, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  q0 = _mm512_min_pd(hi, _mm512_max_pd(lo, q0));
  q1 = _mm512_min_pd(hi, _mm512_max_pd(lo, q1));
  const __m512i qi = _mm512_castsi256_si512(_mm512_cvtpd_epi32(q0));
  return _mm512_inserti64x4(qi, _mm512_cvtpd_epi32(q1), 1);
}

/* Row x quantized with 1 / scale (inv) and the rounded zero point zr into a[0, k). In f32: t =
 * fma(x, inv, zp) is within 3e-5 of the f64 value where that can round to [-128, 127] (|x * inv|
 * <= 256.5: inv's rounding, 2^-24 relative, and t's, 2^-17 absolute), so t and the f64 value
 * round to the same integer unless t lies within 1e-4 of a half-integer; such a block (one in
 * ~300 of 16 values) takes the f64 steps. 64 values at a time: their clamp(q, -128, 127) by two
 * rounds of signed saturating packs (in 128-bit lanes, then one permute back to order), + 128 by
 * flipping the sign bits, one store (rows of 384 / 1536 in L1, Zen 4: 0.22 / 0.20 -> 0.18 / 0.16
 * ns a value with the minimum and maximum pass); the rest 16 at a time. */
static void rowq_store(size_t k, const float *x, uint8_t *a, double inv, double zr) {
  const __m512 inv32 = _mm512_set1_ps((float)inv), z32 = _mm512_set1_ps((float)zr);
  const __m512 near = _mm512_set1_ps(0.4999f);
  const __m512i off = _mm512_set1_epi8((char)0x80);
  /* after the packs, 32-bit group 4 l + u holds values 4 l..4 l + 3 of vector u */
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  size_t j = 0;
  for (; j + 64 <= k; j += 64) {
    __m512 rt[4];
    __mmask16 far = 0;
    for (int u = 0; u < 4; u++) {
      const __m512 t = _mm512_fmadd_ps(_mm512_loadu_ps(x + j + 16 * u), inv32, z32);
      rt[u] = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      far |= _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_sub_ps(t, rt[u])), near, _CMP_GT_OQ);
    }
    __m512i q[4];
    for (int u = 0; u < 4; u++) /* an integer: the clamp is the packs' saturation */
      q[u] = !far ? _mm512_cvtps_epi32(rt[u]) : rowq_f64(_mm512_loadu_ps(x + j + 16 * u), inv, zr);
    const __m512i p =
        _mm512_packs_epi16(_mm512_packs_epi32(q[0], q[1]), _mm512_packs_epi32(q[2], q[3]));
    _mm512_storeu_si512((void *)(a + j), _mm512_xor_si512(_mm512_permutexvar_epi32(order, p), off));
  }
  const __m128i off16 = _mm_set1_epi8((char)0x80);
  for (; j < k; j += 16) {
    const size_t r = k - j >= 16 ? 16 : k - j;
    const __m512 v = _mm512_maskz_loadu_ps((__mmask16)((1u << r) - 1u), x + j);
    const __m512 t = _mm512_fmadd_ps(v, inv32, z32);
    const __m512 rt = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 dist = _mm512_abs_ps(_mm512_sub_ps(t, rt));
    const __m512i qi =
        !_mm512_cmp_ps_mask(dist, near, _CMP_GT_OQ) ? _mm512_cvtps_epi32(rt) : rowq_f64(v, inv, zr);
    /* clamp(q, -128, 127) + 128: signed saturation to a byte, then its sign bit flipped */
    const __m128i b = _mm_xor_si128(_mm512_cvtsepi32_epi8(qi), off16);
    _mm512_mask_storeu_epi8(a + j, (__mmask64)((1ull << r) - 1u), _mm512_castsi128_si512(b));
  }
}

enum { RQ_ROWS = 4 }; /* rows whose scalar qparams steps overlap */

void em_q8_rowq_ukernel__avx512vnni(size_t rows, size_t k, const float *x, uint8_t *a, size_t as,
                                    int32_t *za, float *s) {
  const size_t kp = (k + 3) / 4 * 4;
  /* In blocks of rows, each step for all of them before the next: the qparams' chain of f64
   * divisions (em_q8_token_qparams, 1 / scale) of one row may overlap the others'. With the
   * FMA and the saturating narrowing in rowq_store, rows of 384 / 1536 in L1 on Zen 4: 0.29 /
   * 0.25 -> 0.22 / 0.20 ns a value (rows arriving from L2 or L3 gain less); 64 values a store:
   * 0.18 / 0.16. */
  for (size_t r0 = 0; r0 < rows; r0 += RQ_ROWS) {
    const size_t nr = rows - r0 < RQ_ROWS ? rows - r0 : RQ_ROWS;
    float mn[RQ_ROWS], mx[RQ_ROWS];
    bool ok[RQ_ROWS];
    double inv[RQ_ROWS], zr[RQ_ROWS];
    for (size_t i = 0; i < nr; i++) ok[i] = rowq_minmax(k, x + (r0 + i) * k, &mn[i], &mx[i]);
    for (size_t i = 0; i < nr; i++) {
      double scale, zp;
      em_q8_token_qparams(mn[i], mx[i], &scale, &zp);
      zr[i] = nearbyint(zp), inv[i] = 1.0 / scale;
      za[r0 + i] = ok[i] ? (int32_t)zr[i] + 128 : 0;
      s[r0 + i] = ok[i] ? (float)scale : NAN;
    }
    for (size_t i = 0; i < nr; i++) {
      uint8_t *ar = a + (r0 + i) * as;
      if (!ok[i]) {
        memset(ar, 0, kp);
        continue;
      }
      rowq_store(k, x + (r0 + i) * k, ar, inv[i], zr[i]);
      for (size_t j = k; j < kp; j++) ar[j] = (uint8_t)((int32_t)zr[i] + 128);
    }
  }
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
         const float *bias, const float *res, const int32_t *za, const float *s, float *y,
         size_t ys, size_t cs) {
  const __mmask16 k = (__mmask16)(nc >= 16 ? 0xFFFFu : (1u << nc) - 1u);
  const __m512i sv = _mm512_maskz_loadu_epi32(k, wsum);
  const __m512 wv = _mm512_maskz_loadu_ps(k, ws);
  const __m512 bv = bias ? _mm512_maskz_loadu_ps(k, bias) : _mm512_setzero_ps();
  if (cs == 1) {
    /* a constant trip count: the accumulators stay in registers (a loop to np spilled all 16
     * to the stack and back) */
#pragma GCC unroll 8
    for (size_t i = 0; i < DQ_MR; i++)
      if (i < np) {
        __m512 v = dq_value(acc[i], sv, wv, bias, bv, za[i], s[i]);
        if (res) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(k, res + i * ys));
        _mm512_mask_storeu_ps(y + i * ys, k, v);
      }
    return;
  }
  __m512 v[DQ_MR];
  for (size_t i = 0; i < DQ_MR; i++) /* rows past np: the last row's (not stored) */
    v[i] = dq_value(acc[i], sv, wv, bias, bv, za[i < np ? i : np - 1], s[i < np ? i : np - 1]);
  q8_store8_planes(v, np, nc < 16 ? nc : 16, y, cs);
}

void em_q8_dq_ukernel__avx512vnni(size_t np, size_t nc, size_t kq, const uint8_t *a, size_t as,
                                  const int8_t *w, const int32_t *wsum, const float *ws,
                                  const float *bias, const float *res, const int32_t *za,
                                  const float *s, float *y, size_t ys, size_t cs) {
  /* Rows past np read the last one (their results are not stored): the loop stays fixed. */
  const uint8_t *xp[DQ_MR];
  for (size_t i = 0; i < DQ_MR; i++) xp[i] = a + (i < np ? i : np - 1) * as;
  __m512i acc_a[DQ_MR], acc_b[DQ_MR];
  q8_tile8_sums(xp, NULL, kq, w, nc > 16, _mm512_setzero_si512(), _mm512_setzero_si512(), acc_a,
                acc_b);
  dq_block(acc_a, np, nc, wsum, ws, bias, res, za, s, y, ys, cs);
  if (nc > 16)
    dq_block(acc_b, np, nc - 16, wsum + 16, ws + 16, bias ? bias + 16 : NULL, res ? res + 16 : NULL,
             za, s, y + 16 * cs, ys, cs);
}
#endif
