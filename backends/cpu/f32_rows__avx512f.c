/*
 * f32_rows__avx512f.c — rows written in intrinsics for avx512f, with the
 * 16-lane exp of include/ember/vmath_exp.h (relative error < 3e-7):
 *
 * - softmax / log-softmax: three passes (max; exp with the running sum, into
 *   y; scale) instead of the four the plain-C row in f32_vops_impl.h makes; and attention's
 *   softmax(x * scale + mask) in the same three, the first also scaling and masking (the
 *   operator's separate multiply and add passes before the row: the same bits, -19 % on
 *   1536 rows of 128, Zen 4);
 * - GELU (erf form): the same Abramowitz & Stegun 7.1.26 erf as the plain-C
 *   row (|abs err| <= 1.5e-7), its 1 / (1 + p|x|) from a 14-bit reciprocal and
 *   one Newton step (2^-28) instead of a division, which bounded the plain-C
 *   loop (about 1 ns per element: 15 % of a transformer's FFN-up GEMM);
 * - a 6-row weight panel times a vector (N = 1 convs: squeeze-and-excitation
 *   FCs), every lane busy: 8 k steps of the panel are 48 floats, 3 vectors,
 *   each multiplied by x[k] spread to its lanes by one permute;
 * - hardswish then fake-quant (EMC_ACT_HARDSWISH_FQ): its division by 6 as a product refined
 *   by two FMAs (vx_div6f in f32_vops_impl.h), the clamps as min / max in the plain-C NaN rule:
 *   -20 % per element against the plain-C row with the division (Zen 4, in L1).
 */
#include <immintrin.h>
#include <math.h>

#include "ember/vmath_exp.h"
#include "cpu_ukernels.h"

static inline __mmask16 tail_mask(size_t n) {
  return n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1u);
}

__attribute__((target("avx512f"))) void em_f32_softmax_ukernel__avx512f(size_t n, const float *x,
                                                                        float *y, int log) {
  if (n == 0) return;
  __m512 vmax = _mm512_set1_ps(-INFINITY);
  for (size_t i = 0; i < n; i += 16)
    vmax = _mm512_max_ps(vmax, _mm512_mask_loadu_ps(vmax, tail_mask(n - i), x + i));
  const float mx = _mm512_reduce_max_ps(vmax);
  const __m512 m = _mm512_set1_ps(mx);
  __m512 vsum = _mm512_setzero_ps();
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 k = tail_mask(n - i);
    const __m512 e = exp_recipe512(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), m));
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

__attribute__((target("avx512f"))) void em_f32_softmax_sm_ukernel__avx512f(size_t n, const float *x,
                                                                           const float *scale,
                                                                           const float *mask,
                                                                           float *y) {
  if (n == 0) return;
  const __m512 s = _mm512_set1_ps(scale ? *scale : 1.0f);
  __m512 vmax = _mm512_set1_ps(-INFINITY);
  for (size_t i = 0; i < n; i += 16) { /* x * scale + mask into y, and their maximum */
    const __mmask16 k = tail_mask(n - i);
    __m512 t = _mm512_maskz_loadu_ps(k, x + i);
    if (scale) t = _mm512_mul_ps(t, s);
    if (mask) t = _mm512_add_ps(t, _mm512_maskz_loadu_ps(k, mask + i));
    _mm512_mask_storeu_ps(y + i, k, t);
    vmax = _mm512_max_ps(vmax, _mm512_mask_mov_ps(vmax, k, t)); /* the softmax row's order */
  }
  const __m512 m = _mm512_set1_ps(_mm512_reduce_max_ps(vmax));
  __m512 vsum = _mm512_setzero_ps();
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 k = tail_mask(n - i);
    const __m512 e = exp_recipe512(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, y + i), m));
    vsum = _mm512_add_ps(vsum, _mm512_maskz_mov_ps(k, e));
    _mm512_mask_storeu_ps(y + i, k, e);
  }
  const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(vsum));
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 k = tail_mask(n - i);
    _mm512_mask_storeu_ps(y + i, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, y + i), inv));
  }
}

__attribute__((target("avx512f"))) void em_f32_gelu_row__avx512f(size_t n, const float *x,
                                                                 float *y) {
  const __m512 one = _mm512_set1_ps(1.0f), half = _mm512_set1_ps(0.5f);
  const __m512 two = _mm512_set1_ps(2.0f), rs2 = _mm512_set1_ps(0.70710678118654752f);
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 k = tail_mask(n - i);
    const __m512 v = _mm512_maskz_loadu_ps(k, x + i);
    const __m512 z = _mm512_mul_ps(v, rs2);
    const __m512 az = _mm512_abs_ps(z);
    const __m512 d = _mm512_fmadd_ps(_mm512_set1_ps(0.3275911f), az, one);
    __m512 t = _mm512_rcp14_ps(d);
    t = _mm512_mul_ps(t, _mm512_fnmadd_ps(d, t, two));
    __m512 p = _mm512_set1_ps(1.061405429f);
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-1.453152027f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(1.421413741f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-0.284496736f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0.254829592f));
    const __m512 e = exp_recipe512(_mm512_mul_ps(_mm512_sub_ps(_mm512_setzero_ps(), az), az));
    __m512 erf = _mm512_fnmadd_ps(_mm512_mul_ps(p, t), e, one);
    erf = _mm512_mask_sub_ps(erf, _mm512_cmp_ps_mask(z, _mm512_setzero_ps(), _CMP_LT_OQ),
                             _mm512_setzero_ps(), erf);
    _mm512_mask_storeu_ps(y + i, k, _mm512_mul_ps(_mm512_mul_ps(half, v), _mm512_add_ps(one, erf)));
  }
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
