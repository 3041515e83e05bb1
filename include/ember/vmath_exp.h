/*
 * vmath_exp.h — the vector math Ember's kernels share: e^x in single precision from one recipe
 * that a scalar (exp_recipe) and a 16-lane AVX-512 form (exp_recipe512) follow operation for
 * operation, so both give the same bits:
 * x = n ln2 + r with n = round-half-even(x log2 e), r in two FMA steps, p(r) the degree-7 Taylor
 * polynomial in FMAs, e^x = p * 2^n (ldexpf / scalef: both round once). Relative error < 3e-7;
 * NaN propagates; e^x saturates to 0 / inf past |x| = 104. Used by the sigmoid/silu rows
 * (kernels/optimized/f32_sigmoid__avx512f.c), the softmax of llama::custom_sdpa
 * (kernels/optimized/sdpa_heads__avx512f.c) and the CPU backend's softmax rows
 * (f32_rows__avx512f.c): one recipe, the same bits everywhere.
 *
 * x86-64 with GNU C only (the AVX-512 form is compiled through a target attribute); include it
 * inside the same guard as the callers' ISA dispatch.
 */
#ifndef EMBER_VMATH_EXP_H
#define EMBER_VMATH_EXP_H

#include <immintrin.h>
#include <math.h>

static const float exp_c[8] = {1.0f,         1.0f,          0.5f,          1.0f / 6.0f,
                               1.0f / 24.0f, 1.0f / 120.0f, 1.0f / 720.0f, 1.0f / 5040.0f};

static inline float exp_recipe(float x) {
  if (x != x) return x;
  x = x < -104.0f ? -104.0f : x > 104.0f ? 104.0f : x;
  float n = nearbyintf(x * 1.44269504f);
  float r = fmaf(n, -0.693145752f, x);
  r = fmaf(n, -1.42860677e-6f, r);
  float p = exp_c[7];
  for (int i = 6; i >= 0; i--) p = fmaf(p, r, exp_c[i]);
  return ldexpf(p, (int)n);
}

/* The recipe's steps after the clamp, on 16 lanes: e^c for c in [-104, 104]. */
__attribute__((target("avx512f"))) static inline __m512 exp_clamped512(__m512 c) {
  __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(c, _mm512_set1_ps(1.44269504f)),
                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-0.693145752f), c);
  r = _mm512_fmadd_ps(n, _mm512_set1_ps(-1.42860677e-6f), r);
  __m512 p = _mm512_set1_ps(exp_c[7]);
  for (int i = 6; i >= 0; i--) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(exp_c[i]));
  return _mm512_scalef_ps(p, n);
}

__attribute__((target("avx512f"))) static inline __m512 exp_recipe512(__m512 x) {
  __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  __m512 c = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-104.0f)), _mm512_set1_ps(104.0f));
  return _mm512_mask_mov_ps(exp_clamped512(c), nan, x);
}

/* exp_recipe512 for x in [-inf, 0] (no NaN): the same bits there, without the NaN select and
 * the upper clamp. A softmax row whose maximum is finite and which holds no NaN subtracts that
 * maximum first, so every lane is in this range: -25 % on rows of 128 (Zen 4). */
__attribute__((target("avx512f"))) static inline __m512 exp_nonpos512(__m512 x) {
  return exp_clamped512(_mm512_max_ps(x, _mm512_set1_ps(-104.0f)));
}

#endif /* EMBER_VMATH_EXP_H */
