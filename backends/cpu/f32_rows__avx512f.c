/*
 * f32_rows__avx512f.c — rows written in intrinsics for avx512f, with the
 * 16-lane exp of include/ember/vmath_exp.h (relative error < 3e-7):
 *
 * - softmax / log-softmax: three passes (max; exp with the running sum, into
 *   y; scale) instead of the four the plain-C row in f32_vops_impl.h makes; and attention's
 *   softmax(x * scale + mask) in the same three, the first also scaling and masking (the
 *   operator's separate multiply and add passes before the row: the same bits, -19 % on
 *   1536 rows of 128, Zen 4); rows of up to 128 held in registers through the three;
 * - GELU (erf form): x Phi(x), Phi(|x|) from a table of degree-5 polynomials, one per 0.375 of
 *   |x| (16 intervals, each coefficient one permute of a 16-lane table), Phi(x) = 1 - Phi(|x|)
 *   for x < 0; |error| <= 1.2e-7 max(1, |x|) against x Phi(x) in f64 (eager f32 GELU: up to
 *   1.2e-6 at x ~ 3.5). Seven multiplies and FMAs per 16 values where the erf of Abramowitz &
 *   Stegun 7.1.26 (the plain-C row's) with its exp took 25: 0.55 -> 0.2 ns per value (Zen 4);
 * - a 6-row weight panel times a vector (N = 1 convs: squeeze-and-excitation
 *   FCs), every lane busy: 8 k steps of the panel are 48 floats, 3 vectors,
 *   each multiplied by x[k] spread to its lanes by one permute;
 * - hardswish then fake-quant (EMC_ACT_HARDSWISH_FQ): its division by 6 as a product refined
 *   by two FMAs (vx_div6f in f32_vops_impl.h), the clamps as min / max in the plain-C NaN rule:
 *   -20 % per element against the plain-C row with the division (Zen 4, in L1).
 */
#include <immintrin.h>
#include <math.h>
#include <stdbool.h>

#include "ember/vmath_exp.h"
#include "cpu_ukernels.h"

static inline __mmask16 tail_mask(size_t n) {
  return n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1u);
}

/* Whether a softmax row's maximum is finite: with no NaN in the row, x - max is then in
 * [-inf, 0] everywhere and exp_nonpos512 gives exp_recipe512's bits. */
static inline bool finite_max(float mx) { return mx > -INFINITY && mx < INFINITY; }

__attribute__((target("avx512f"))) void em_f32_softmax_ukernel__avx512f(size_t n, const float *x,
                                                                        float *y, int log) {
  if (n == 0) return;
  __m512 vmax = _mm512_set1_ps(-INFINITY);
  __mmask16 nan = 0;
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 k = tail_mask(n - i);
    const __m512 t = _mm512_mask_loadu_ps(vmax, k, x + i);
    nan |= _mm512_cmp_ps_mask(t, t, _CMP_UNORD_Q);
    vmax = _mm512_max_ps(vmax, t);
  }
  const float mx = _mm512_reduce_max_ps(vmax);
  const __m512 m = _mm512_set1_ps(mx);
  const bool nonpos = !nan && finite_max(mx); /* every x - m in [-inf, 0] */
  __m512 vsum = _mm512_setzero_ps();
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 k = tail_mask(n - i);
    const __m512 d = _mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), m);
    const __m512 e = nonpos ? exp_nonpos512(d) : exp_recipe512(d);
    vsum = _mm512_add_ps(vsum, _mm512_maskz_mov_ps(k, e));
    if (!log) _mm512_mask_storeu_ps(y + i, k, e);
  }
  const float sum = _mm512_reduce_add_ps(vsum);
  if (log) {
    const __m512 lse = _mm512_set1_ps(mx + logf(sum));
    for (size_t i = 0; i < n; i += 16) {
      const __mmask16 k = tail_mask(n - i);
      _mm512_mask_storeu_ps(y + i, k, _mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), lse));
    }
    return;
  }
  const __m512 inv = _mm512_set1_ps(1.0f / sum);
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 k = tail_mask(n - i);
    _mm512_mask_storeu_ps(y + i, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, y + i), inv));
  }
}

/* A row of at most 128 values held in registers through the three passes (no stores and loads
 * between them): the same operations in the same order as the passes below, so the same bits;
 * 0.54 -> 0.44 ns a value on rows of 128 (Zen 4). */
__attribute__((target("avx512f"))) static inline __attribute__((always_inline)) void
softmax_sm_128(size_t n, const float *x, const float *scale, const float *mask, float *y) {
  const __m512 s = _mm512_set1_ps(scale ? *scale : 1.0f);
  __m512 v[8], vmax = _mm512_set1_ps(-INFINITY), vsum = _mm512_setzero_ps();
  __mmask16 nan = 0;
  for (size_t b = 0; b < 8; b++) v[b] = vmax; /* (the lanes past n are never read) */
#pragma GCC unroll 8
  for (size_t b = 0; b < 8; b++) {
    if (b * 16 >= n) break;
    const __mmask16 k = tail_mask(n - b * 16);
    __m512 t = _mm512_maskz_loadu_ps(k, x + b * 16);
    if (scale) t = _mm512_mul_ps(t, s);
    if (mask) t = _mm512_add_ps(t, _mm512_maskz_loadu_ps(k, mask + b * 16));
    v[b] = t;
    nan |= _mm512_mask_cmp_ps_mask(k, t, t, _CMP_UNORD_Q);
    vmax = _mm512_max_ps(vmax, _mm512_mask_mov_ps(vmax, k, t));
  }
  const float mx = _mm512_reduce_max_ps(vmax);
  const __m512 m = _mm512_set1_ps(mx);
  if (!nan && finite_max(mx)) {
#pragma GCC unroll 8
    for (size_t b = 0; b < 8; b++) {
      if (b * 16 >= n) break;
      v[b] = exp_nonpos512(_mm512_sub_ps(v[b], m));
      vsum = _mm512_add_ps(vsum, _mm512_maskz_mov_ps(tail_mask(n - b * 16), v[b]));
    }
  } else {
#pragma GCC unroll 8
    for (size_t b = 0; b < 8; b++) {
      if (b * 16 >= n) break;
      v[b] = exp_recipe512(_mm512_sub_ps(v[b], m));
      vsum = _mm512_add_ps(vsum, _mm512_maskz_mov_ps(tail_mask(n - b * 16), v[b]));
    }
  }
  const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(vsum));
#pragma GCC unroll 8
  for (size_t b = 0; b < 8; b++) {
    if (b * 16 >= n) break;
    _mm512_mask_storeu_ps(y + b * 16, tail_mask(n - b * 16), _mm512_mul_ps(v[b], inv));
  }
}

__attribute__((target("avx512f"))) void em_f32_softmax_sm_ukernel__avx512f(size_t n, const float *x,
                                                                           const float *scale,
                                                                           const float *mask,
                                                                           float *y) {
  if (n == 0) return;
  if (n <= 128) {
    softmax_sm_128(n, x, scale, mask, y);
    return;
  }
  const __m512 s = _mm512_set1_ps(scale ? *scale : 1.0f);
  __m512 vmax = _mm512_set1_ps(-INFINITY);
  __mmask16 nan = 0;
  for (size_t i = 0; i < n; i += 16) { /* x * scale + mask into y, and their maximum */
    const __mmask16 k = tail_mask(n - i);
    __m512 t = _mm512_maskz_loadu_ps(k, x + i);
    if (scale) t = _mm512_mul_ps(t, s);
    if (mask) t = _mm512_add_ps(t, _mm512_maskz_loadu_ps(k, mask + i));
    _mm512_mask_storeu_ps(y + i, k, t);
    nan |= _mm512_mask_cmp_ps_mask(k, t, t, _CMP_UNORD_Q);
    vmax = _mm512_max_ps(vmax, _mm512_mask_mov_ps(vmax, k, t)); /* the softmax row's order */
  }
  const float mx = _mm512_reduce_max_ps(vmax);
  const __m512 m = _mm512_set1_ps(mx);
  const bool nonpos = !nan && finite_max(mx);
  __m512 vsum = _mm512_setzero_ps();
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 k = tail_mask(n - i);
    const __m512 d = _mm512_sub_ps(_mm512_maskz_loadu_ps(k, y + i), m);
    const __m512 e = nonpos ? exp_nonpos512(d) : exp_recipe512(d);
    vsum = _mm512_add_ps(vsum, _mm512_maskz_mov_ps(k, e));
    _mm512_mask_storeu_ps(y + i, k, e);
  }
  const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(vsum));
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 k = tail_mask(n - i);
    _mm512_mask_storeu_ps(y + i, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, y + i), inv));
  }
}

/* The 16 lanes of v added in lane order from 0 (the plain-C row's sum of its partial sums). */
static inline float lanes_sum(__m512 v) {
  float t[16], s = 0.0f;
  _mm512_storeu_ps(t, v);
  for (int j = 0; j < 16; j++) s += t[j];
  return s;
}

enum { NORM_ROWS = 4 }; /* rows whose passes overlap (8: no faster) */

/* Layer / RMS norm rows, NORM_ROWS at a time, each pass over the block's rows before the next:
 * one row's chain (sum, correction, variance, each reduced lane by lane, a division and a square
 * root) left the core idle; the rows' chains now overlap (MiniLM-L6's 128 rows of 384, Zen 4:
 * 19.7 -> 14.2 us).
 * Every operation of the plain-C row (f32_vops_impl.h) in its order (lane j's partial sums in
 * lane j, no fused multiply-adds), so the same bits. */
__attribute__((target("avx512f"))) void em_f32_norm_ukernel__avx512f(size_t rows, size_t n,
                                                                     const float *x, const float *w,
                                                                     const float *b, float eps,
                                                                     int rms, float *y) {
  if (n == 0) return;
  const size_t n16 = n / 16 * 16;
  for (size_t r0 = 0; r0 < rows; r0 += NORM_ROWS) {
    const size_t nr = rows - r0 < NORM_ROWS ? rows - r0 : NORM_ROWS;
    const float *xr[NORM_ROWS]; /* rows past nr: the last one again (never stored) */
    for (size_t q = 0; q < NORM_ROWS; q++) xr[q] = x + (r0 + (q < nr ? q : nr - 1)) * n;
    float mean[NORM_ROWS] = {0}, s[NORM_ROWS];
    __m512 acc[NORM_ROWS];
    if (!rms) {
      for (size_t q = 0; q < NORM_ROWS; q++) acc[q] = _mm512_setzero_ps();
      for (size_t i = 0; i < n16; i += 16)
        for (size_t q = 0; q < NORM_ROWS; q++)
          acc[q] = _mm512_add_ps(acc[q], _mm512_loadu_ps(xr[q] + i));
      for (size_t q = 0; q < NORM_ROWS; q++) {
        s[q] = lanes_sum(acc[q]);
        for (size_t i = n16; i < n; i++) s[q] += xr[q][i];
        mean[q] = s[q] / (float)n;
      }
      __m512 m[NORM_ROWS];
      for (size_t q = 0; q < NORM_ROWS; q++) m[q] = _mm512_set1_ps(mean[q]);
      for (size_t q = 0; q < NORM_ROWS; q++) acc[q] = _mm512_setzero_ps();
      for (size_t i = 0; i < n16; i += 16)
        for (size_t q = 0; q < NORM_ROWS; q++)
          acc[q] = _mm512_add_ps(acc[q], _mm512_sub_ps(_mm512_loadu_ps(xr[q] + i), m[q]));
      for (size_t q = 0; q < NORM_ROWS; q++) {
        s[q] = lanes_sum(acc[q]);
        for (size_t i = n16; i < n; i++) s[q] += xr[q][i] - mean[q];
        mean[q] += s[q] / (float)n;
      }
    }
    __m512 m[NORM_ROWS];
    for (size_t q = 0; q < NORM_ROWS; q++) m[q] = _mm512_set1_ps(mean[q]);
    for (size_t q = 0; q < NORM_ROWS; q++) acc[q] = _mm512_setzero_ps();
    for (size_t i = 0; i < n16; i += 16)
      for (size_t q = 0; q < NORM_ROWS; q++) {
        const __m512 d = _mm512_sub_ps(_mm512_loadu_ps(xr[q] + i), m[q]);
        acc[q] = _mm512_add_ps(acc[q], _mm512_mul_ps(d, d));
      }
    for (size_t q = 0; q < nr; q++) {
      float var = lanes_sum(acc[q]);
      for (size_t i = n16; i < n; i++) var += (xr[q][i] - mean[q]) * (xr[q][i] - mean[q]);
      const __m512 rstd = _mm512_set1_ps(1.0f / sqrtf(var / (float)n + eps));
      float *yq = y + (r0 + q) * n;
      for (size_t k = 0; k < n; k += 16) {
        const __mmask16 t = tail_mask(n - k);
        __m512 v = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(t, xr[q] + k), m[q]), rstd);
        if (w) v = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(t, w + k));
        if (b) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(t, b + k));
        _mm512_mask_storeu_ps(yq + k, t, v);
      }
    }
  }
}

/* Phi(16 |x| / 6 = j + t) for t in [0, 1): coefficient d of interval j's degree-5 polynomial in t
 * is gelu_c[d][j] (Chebyshev interpolants of the f64 normal CDF, one per 0.375 of |x|; the last
 * interval, |x| >= 5.625, the constant 1: Phi there rounds to 1 in f32). */
static const float gelu_c[6][16] __attribute__((aligned(64))) = {
    {5.000000000e-1f, 6.461697817e-1f, 7.733726501e-1f, 8.697054982e-1f, 9.331927896e-1f,
     9.696036577e-1f, 9.877755046e-1f, 9.956675768e-1f, 9.986500740e-1f, 9.996309280e-1f,
     9.999116063e-1f, 9.999814630e-1f, 9.999966025e-1f, 9.999994636e-1f, 9.999999404e-1f,
     1.000000000f},
    {1.496032178e-1f, 1.394453496e-1f, 1.129263043e-1f, 7.945370674e-2f, 4.856920987e-2f,
     2.579498105e-2f, 1.190243475e-2f, 4.771574866e-3f, 1.661925926e-3f, 5.029026652e-4f,
     1.322138123e-4f, 3.019870746e-5f, 5.992616479e-6f, 1.033139711e-6f, 1.547440434e-7f,
     0.000000000f},
    {1.478532567e-6f, -9.801220149e-3f, -1.587750949e-2f, -1.675934903e-2f, -1.366136037e-2f,
     -9.069993161e-3f, -5.022087600e-3f, -2.348594833e-3f, -9.346439620e-4f, -3.180554195e-4f,
     -9.285641863e-5f, -2.331280302e-5f, -5.041999884e-6f, -9.406049344e-7f, -1.515132055e-7f,
     0.000000000f},
    {-3.512259107e-3f, -2.823723946e-3f, -1.170034520e-3f, 4.925598041e-4f, 1.428357442e-3f,
     1.527265995e-3f, 1.136686769e-3f, 6.592085119e-4f, 3.107789671e-4f, 1.216219971e-4f,
     3.998796092e-5f, 1.113053986e-5f, 2.636467570e-6f, 5.334011917e-7f, 9.242786092e-8f,
     0.000000000f},
    {1.020589116e-5f, 3.572485293e-4f, 4.776075657e-4f, 3.455574624e-4f, 1.099846777e-4f,
     -6.727548316e-5f, -1.282367739e-4f, -1.081202427e-4f, -6.416931865e-5f, -2.962230792e-5f,
     -1.107076423e-5f, -3.419685299e-6f, -8.838740087e-7f, -1.926977689e-7f, -3.563430795e-8f,
     0.000000000f},
    {6.711822061e-5f, 2.522202340e-5f, -2.352955744e-5f, -4.516155241e-5f, -3.535360884e-5f,
     -1.308875835e-5f, 3.227452453e-6f, 8.482121302e-6f, 6.927985851e-6f, 3.814209776e-6f,
     1.605952434e-6f, 5.423017910e-7f, 1.504188845e-7f, 3.475392774e-8f, 6.749696801e-9f,
     0.000000000f},
};

/* GELU over `rows` rows of n floats: row r from x + r * xs into y + r * ys. */
__attribute__((target("avx512f"))) static inline __attribute__((always_inline)) void
gelu_rows(size_t rows, size_t n, const float *x, size_t xs, float *y, size_t ys) {
  __m512 c[6];
  for (int d = 0; d < 6; d++) c[d] = _mm512_load_ps(gelu_c[d]);
  const __m512 scale = _mm512_set1_ps(16.0f / 6.0f), cap = _mm512_set1_ps(15.999f);
  const __m512 one = _mm512_set1_ps(1.0f), zero = _mm512_setzero_ps();
  for (size_t r = 0; r < rows; r++, x += xs, y += ys)
    for (size_t i = 0; i < n; i += 16) {
      const __mmask16 k = tail_mask(n - i);
      const __m512 v = _mm512_maskz_loadu_ps(k, x + i);
      /* u = 16 |x| / 6 below 16 (NaN: the cap, the second operand); interval j = floor(u) */
      const __m512 u = _mm512_min_ps(_mm512_mul_ps(_mm512_abs_ps(v), scale), cap);
      const __m512 f = _mm512_roundscale_ps(u, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
      const __m512i j = _mm512_cvttps_epi32(f);
      const __m512 t = _mm512_sub_ps(u, f);
      __m512 p = _mm512_permutexvar_ps(j, c[5]);
      for (int d = 4; d >= 0; d--) p = _mm512_fmadd_ps(p, t, _mm512_permutexvar_ps(j, c[d]));
      /* Phi(x) = 1 - Phi(|x|) for x < 0 */
      p = _mm512_mask_sub_ps(p, _mm512_cmp_ps_mask(v, zero, _CMP_LT_OQ), one, p);
      _mm512_mask_storeu_ps(y + i, k, _mm512_mul_ps(v, p));
    }
}

__attribute__((target("avx512f"))) void em_f32_gelu_row__avx512f(size_t n, const float *x,
                                                                 float *y) {
  gelu_rows(1, n, x, 0, y, 0);
}

__attribute__((target("avx512f"))) void em_f32_gelu_rows__avx512f(size_t rows, size_t n, float *y,
                                                                  size_t ys) {
  gelu_rows(rows, n, y, ys, y, ys);
}

/*
 * y[0, mr) = clamp(bias + a^T x), a one [kc][6] panel. Lane l of vector v (v = 0..2) of an 8-step
 * block holds a[k0 + (16 v + l) / 6][(16 v + l) % 6]: each vector is multiplied by x spread by
 * the same index, and accumulator v's lane l always sums row (16 v + l) % 6. Two blocks in
 * flight (six chains). The generic loop would issue an FMA per row per k (a 6x16 GEMM tile with
 * one column filled: one useful lane in 16).
 */
__attribute__((target("avx512f"))) void
em_f32_gemv6_minmax_ukernel__avx512f(size_t kc, size_t mr, const float *a, const float *x,
                                     const float *bias, float *y, const em_minmax_params *p) {
  const __m512i i0 = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2);
  const __m512i i1 = _mm512_setr_epi32(2, 2, 3, 3, 3, 3, 3, 3, 4, 4, 4, 4, 4, 4, 5, 5);
  const __m512i i2 = _mm512_setr_epi32(5, 5, 5, 5, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7);
  __m512 c0 = _mm512_setzero_ps(), c1 = c0, c2 = c0, d0 = c0, d1 = c0, d2 = c0;
  size_t k = 0;
  for (; k + 16 <= kc; k += 16) {
    const float *ak = a + k * 6;
    for (int l = 0; l < 6; l++) _mm_prefetch((const char *)(ak + 512 + 16 * l), _MM_HINT_T0);
    const __m512 xv = _mm512_castps256_ps512(_mm256_loadu_ps(x + k));
    const __m512 xw = _mm512_castps256_ps512(_mm256_loadu_ps(x + k + 8));
    c0 = _mm512_fmadd_ps(_mm512_loadu_ps(ak), _mm512_permutexvar_ps(i0, xv), c0);
    c1 = _mm512_fmadd_ps(_mm512_loadu_ps(ak + 16), _mm512_permutexvar_ps(i1, xv), c1);
    c2 = _mm512_fmadd_ps(_mm512_loadu_ps(ak + 32), _mm512_permutexvar_ps(i2, xv), c2);
    d0 = _mm512_fmadd_ps(_mm512_loadu_ps(ak + 48), _mm512_permutexvar_ps(i0, xw), d0);
    d1 = _mm512_fmadd_ps(_mm512_loadu_ps(ak + 64), _mm512_permutexvar_ps(i1, xw), d1);
    d2 = _mm512_fmadd_ps(_mm512_loadu_ps(ak + 80), _mm512_permutexvar_ps(i2, xw), d2);
  }
  for (; k < kc; k += 8) { /* the last blocks, the ragged one masked (its lanes past kc zero) */
    const size_t steps = kc - k < 8 ? kc - k : 8, n = steps * 6;
    const float *ak = a + k * 6;
    const __m512 xv = _mm512_maskz_loadu_ps((__mmask16)((1u << steps) - 1u), x + k);
    c0 =
        _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail_mask(n), ak), _mm512_permutexvar_ps(i0, xv), c0);
    if (n > 16)
      c1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail_mask(n - 16), ak + 16),
                           _mm512_permutexvar_ps(i1, xv), c1);
    if (n > 32)
      c2 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail_mask(n - 32), ak + 32),
                           _mm512_permutexvar_ps(i2, xv), c2);
  }
  float t[48];
  _mm512_storeu_ps(t, _mm512_add_ps(c0, d0));
  _mm512_storeu_ps(t + 16, _mm512_add_ps(c1, d1));
  _mm512_storeu_ps(t + 32, _mm512_add_ps(c2, d2));
  for (size_t r = 0; r < mr; r++) {
    const float s = ((t[r] + t[6 + r]) + (t[12 + r] + t[18 + r])) +
                    ((t[24 + r] + t[30 + r]) + (t[36 + r] + t[42 + r]));
    const float v = (bias ? bias[r] : 0.0f) + s;
    y[r] = v < p->min ? p->min : v > p->max ? p->max : v;
  }
}

__attribute__((target("avx512f,fma"))) void
em_f32_hardswish_fq_row__avx512f(size_t n, const float *x, float *y, const float k[5]) {
  const __m512 inv = _mm512_set1_ps(k[0]), s = _mm512_set1_ps(k[1]), flo = _mm512_set1_ps(k[2]);
  const __m512 fhi = _mm512_set1_ps(k[3]), rlo = _mm512_set1_ps(k[4]);
  const __m512 zero = _mm512_setzero_ps(), three = _mm512_set1_ps(3.0f);
  const __m512 six = _mm512_set1_ps(6.0f), c6 = _mm512_set1_ps(1.0f / 6.0f);
  const __m512 magic = _mm512_set1_ps(12582912.0f);
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    /* max(a, b) is a > b ? a : b, b when either is NaN: the plain-C clamps' NaN rule */
    const __m512 c = _mm512_min_ps(six, _mm512_max_ps(zero, _mm512_add_ps(v, three)));
    const __m512 p = _mm512_mul_ps(v, c);
    const __m512 q0 = _mm512_mul_ps(p, c6); /* p / 6: vx_div6f's refinement */
    __m512 q = _mm512_fmadd_ps(_mm512_fnmadd_ps(q0, six, p), c6, q0);
    q = _mm512_mask_mov_ps(q, _mm512_cmp_ps_mask(q, q, _CMP_UNORD_Q), p);     /* +inf: itself */
    __m512 t = _mm512_min_ps(fhi, _mm512_max_ps(flo, _mm512_mul_ps(q, inv))); /* NaN stays */
    t = _mm512_sub_ps(_mm512_add_ps(t, magic), magic);
    t = _mm512_max_ps(t, rlo); /* NaN: qmin - zp */
    _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(t, s));
  }
}
