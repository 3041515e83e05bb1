/* q8_lut__scalar.c — the int8 table lookup's row (EMC_UNARY_Q8, em_q8_lut_fn), baseline ISA. */
#include "cpu_ukernels.h"

void em_q8_lut_ukernel__scalar(size_t n, const uint8_t *x, uint8_t *y, const uint8_t *t) {
  for (size_t i = 0; i < n; i++) y[i] = t[x[i]];
}

void em_q8_lutf_ukernel__scalar(size_t c, size_t n, const uint8_t *x, size_t xs, float *y,
                                size_t ys, const uint8_t *t, float zp, float s) {
  for (size_t p0 = 0; p0 < n; p0 += 16) { /* 16 pixels at a time: each plane's stores in lines */
    const size_t p1 = n - p0 < 16 ? n : p0 + 16;
    for (size_t i = p0; i < p1; i++)
      for (size_t ch = 0; ch < c; ch++) y[ch * ys + i] = ((float)t[x[i * xs + ch]] - zp) * s;
  }
}
