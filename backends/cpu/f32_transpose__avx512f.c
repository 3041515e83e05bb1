/*
 * f32_transpose__avx512f.c — em_f32_transpose_ukernel__avx512f: y = x^T for an f32 matrix, in
 * 16 x 16 blocks transposed in registers (f32_transpose16__avx512f.h), edge blocks under masks.
 *
 * The transposed convs' and transposed Winograd GEMMs' C^T[pixels or tiles][channels] goes back
 * to channel-major through it: element by element with one strided load each it cost about
 * 1 ns an element (4 % of ResNet-18 on Zen 4).
 */
#include <immintrin.h>

#include "cpu_ukernels.h"
#include "f32_transpose16__avx512f.h"

static inline __mmask16 first(size_t n) {
  return n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1u);
}

void em_f32_transpose_ukernel__avx512f(size_t rows, size_t cols, const float *x, size_t ldx,
                                       float *y, size_t ldy) {
  for (size_t r0 = 0; r0 < rows; r0 += 16) {
    const size_t nr = rows - r0 < 16 ? rows - r0 : 16;
    const __mmask16 mr = first(nr);
    for (size_t c0 = 0; c0 < cols; c0 += 16) {
      const size_t nc = cols - c0 < 16 ? cols - c0 : 16;
      const __mmask16 mc = first(nc);
      __m512 v[16];
#pragma GCC unroll 16
      for (size_t i = 0; i < 16; i++)
        v[i] = i < nr ? _mm512_maskz_loadu_ps(mc, x + (r0 + i) * ldx + c0) : _mm512_setzero_ps();
      transpose16(v);
#pragma GCC unroll 16
      for (size_t j = 0; j < 16; j++)
        if (j < nc) _mm512_mask_storeu_ps(y + (c0 + j) * ldy + r0, mr, v[j]);
    }
  }
}
