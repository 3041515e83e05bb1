/* q8_lut__scalar.c — the int8 table lookups (EMC_UNARY_Q8: em_q8_lut_fn, em_q8_lutf_fn) and the
 * readers of never-written lookup planes (em_q8_lutq_fn, em_q8_lutm_fn), baseline ISA. */
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

void em_q8_lutq_ukernel__scalar(size_t c, size_t n, const uint8_t *x, size_t xs, const uint8_t *t,
                                float zp, float ls, const float *g, const em_minmax_params *mm,
                                uint8_t *y, size_t ys, const em_q8_quant_params *p) {
  for (size_t i = 0; i < n; i++)
    for (size_t ch = 0; ch < c; ch++) {
      float v = (((float)t[x[i * xs + ch]] - zp) * ls) * g[ch];
      v = v < mm->min ? mm->min : v; /* NaN stays */
      v = v > mm->max ? mm->max : v;
      y[i * ys + ch] = em_q8_quant1(v, p);
    }
}

void em_q8_lutm_ukernel__scalar(size_t c, size_t n, const uint8_t *x, size_t xs, const uint8_t *t,
                                float zp, float ls, float *mean) {
  for (size_t ch = 0; ch < c; ch++) {
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
      s0 += ((float)t[x[i * xs + ch]] - zp) * ls;
      s1 += ((float)t[x[(i + 1) * xs + ch]] - zp) * ls;
      s2 += ((float)t[x[(i + 2) * xs + ch]] - zp) * ls;
      s3 += ((float)t[x[(i + 3) * xs + ch]] - zp) * ls;
    }
    for (; i < n; i++) s0 += ((float)t[x[i * xs + ch]] - zp) * ls;
    mean[ch] = ((s0 + s1) + (s2 + s3)) / (float)n;
  }
}
