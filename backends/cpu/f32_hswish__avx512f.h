/*
 * f32_hswish__avx512f.h — hardswish on 16 lanes for the AVX-512 micro-kernels that apply it in
 * their stores (em_minmax_params.hswish): x * clamp(x + 3, 0, 6) * (1 / 6), step by step as the
 * ISA's vact row computes it (f32_vops_impl.h), so the same bits; NaN stays NaN (each clamp's
 * second operand is the value, which MAXPS / MINPS return when either is NaN).
 * Include only from files compiled for AVX-512F.
 */
#ifndef EMBER_BACKENDS_CPU_F32_HSWISH_AVX512F_H
#define EMBER_BACKENDS_CPU_F32_HSWISH_AVX512F_H

#include <immintrin.h>

static inline __m512 em_hswish_f32x16(__m512 x) {
  __m512 t = _mm512_add_ps(x, _mm512_set1_ps(3.0f));
  t = _mm512_min_ps(_mm512_set1_ps(6.0f), _mm512_max_ps(_mm512_setzero_ps(), t));
  return _mm512_mul_ps(_mm512_mul_ps(x, t), _mm512_set1_ps(1.0f / 6.0f));
}

/* y[0, n) = hardswish(y[0, n)) in place. */
static inline void em_hswish_row_f32(float *y, size_t n) {
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1u);
    _mm512_mask_storeu_ps(y + i, m, em_hswish_f32x16(_mm512_maskz_loadu_ps(m, y + i)));
  }
}

#endif /* EMBER_BACKENDS_CPU_F32_HSWISH_AVX512F_H */
