/*
 * f32_sigmoid__avx512f.c — the AVX-512F bodies of the portable sigmoid and silu
 * (kernels/portable/elementwise_activation.c; the LLM feed-forward's gate): e^-x from
 * ember/vmath_exp.h, whose scalar (per element, ew_op.f32) and 16-lane row (ew_op.f32_row) forms
 * give the same bits, as ew_op requires. NaN inputs come out unchanged.
 * Compiled with -mavx512f (CMakeLists.txt); the target attributes say the same. Reached through
 * config.c's tables only.
 */
#include <immintrin.h>

#include "ember/vmath_exp.h"
#include "optimized/config.h"

float em_f32_sigmoid__avx512f(const float *x, const ew_op *op) {
  (void)op;
  float a = x[0];
  return a != a ? a : 1.0f / (1.0f + exp_recipe(-a));
}

float em_f32_silu__avx512f(const float *x, const ew_op *op) {
  (void)op;
  float a = x[0];
  return a != a ? a : a / (1.0f + exp_recipe(-a));
}

/* silu != 0: x / (1 + e^-x), else 1 / (1 + e^-x); NaN lanes keep x. */
__attribute__((target("avx512f"))) static void row_gate512(float *o, const float *const *x,
                                                           const int64_t *s, int64_t n, int silu) {
  const float *a = x[0];
  if (!s[0]) {
    float v = silu ? em_f32_silu__avx512f(a, NULL) : em_f32_sigmoid__avx512f(a, NULL);
    for (int64_t i = 0; i < n; i++) o[i] = v;
    return;
  }
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 16) {
    __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
    __m512 v = _mm512_maskz_loadu_ps(m, a + i);
    __m512 e = exp_recipe512(_mm512_sub_ps(_mm512_setzero_ps(), v));
    __m512 y = _mm512_div_ps(silu ? v : one, _mm512_add_ps(one, e));
    y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), v);
    _mm512_mask_storeu_ps(o + i, m, y);
  }
}

void em_f32_sigmoid_row__avx512f(float *o, const float *const *x, const int64_t *s, int64_t n,
                                 const ew_op *op) {
  (void)op;
  row_gate512(o, x, s, n, 0);
}

void em_f32_silu_row__avx512f(float *o, const float *const *x, const int64_t *s, int64_t n,
                              const ew_op *op) {
  (void)op;
  row_gate512(o, x, s, n, 1);
}
