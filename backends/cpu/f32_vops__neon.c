/*
 * f32_vops__neon.c — the elementwise, depthwise and row micro-kernels for
 * neon (AArch64). Vector binary ops, vaffine and gemv16 are written here with
 * NEON intrinsics (fused vfmaq, vmaxq/vminq clamps that GCC does not produce
 * from the portable C under -std=c11's fp-contract=off and its NaN-exact
 * ?: clamps); the rest is f32_vops_impl.h, whose loops GCC vectorizes to
 * 4-lane NEON since Advanced SIMD is the AArch64 baseline (flags from
 * CMakeLists.txt). Compiles to nothing on other CPUs.
 */
#include "cpu_ukernels.h"

#if defined(__aarch64__)
#include <arm_neon.h>

#define EM_ISA                  neon
#define EM_VOPS_OWN_ELEMENTWISE 1
#define EM_VOPS_OWN_GEMV16      1
#include "f32_vops_impl.h"

static inline float32x4_t clamp4(float32x4_t x, float32x4_t lo, float32x4_t hi) {
  return vminq_f32(vmaxq_f32(x, lo), hi);
}

/* y = clamp(a op b) (vector b) and y = clamp(a op *b) (scalar b): 8 then 4 lanes a step, the
 * last n % 4 elements in scalar code. y may alias a or b. */
#define VBIN_NEON(op, vop, expr)                                                                   \
  void em_f32_v##op##_minmax_ukernel__neon(size_t n, const float *a, const float *b, float *y,     \
                                           const em_minmax_params *p) {                            \
    const float32x4_t lo = vdupq_n_f32(p->min), hi = vdupq_n_f32(p->max);                          \
    size_t i = 0;                                                                                  \
    for (; i + 8 <= n; i += 8) {                                                                   \
      const float32x4_t y0 = vop(vld1q_f32(a + i), vld1q_f32(b + i));                              \
      const float32x4_t y1 = vop(vld1q_f32(a + i + 4), vld1q_f32(b + i + 4));                      \
      vst1q_f32(y + i, clamp4(y0, lo, hi)), vst1q_f32(y + i + 4, clamp4(y1, lo, hi));              \
    }                                                                                              \
    for (; i + 4 <= n; i += 4)                                                                     \
      vst1q_f32(y + i, clamp4(vop(vld1q_f32(a + i), vld1q_f32(b + i)), lo, hi));                   \
    for (; i < n; i++) {                                                                           \
      const float x = a[i], z = b[i];                                                              \
      y[i] = vx_clampf(expr, p->min, p->max);                                                      \
    }                                                                                              \
  }                                                                                                \
  void em_f32_v##op##c_minmax_ukernel__neon(size_t n, const float *a, const float *b, float *y,    \
                                            const em_minmax_params *p) {                           \
    const float32x4_t lo = vdupq_n_f32(p->min), hi = vdupq_n_f32(p->max), vz = vdupq_n_f32(*b);    \
    const float z = *b;                                                                            \
    size_t i = 0;                                                                                  \
    for (; i + 8 <= n; i += 8) {                                                                   \
      const float32x4_t y0 = vop(vld1q_f32(a + i), vz), y1 = vop(vld1q_f32(a + i + 4), vz);        \
      vst1q_f32(y + i, clamp4(y0, lo, hi)), vst1q_f32(y + i + 4, clamp4(y1, lo, hi));              \
    }                                                                                              \
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, clamp4(vop(vld1q_f32(a + i), vz), lo, hi));        \
    for (; i < n; i++) {                                                                           \
      const float x = a[i];                                                                        \
      y[i] = vx_clampf(expr, p->min, p->max);                                                      \
    }                                                                                              \
  }
VBIN_NEON(add, vaddq_f32, x + z)
VBIN_NEON(sub, vsubq_f32, x - z)
VBIN_NEON(mul, vmulq_f32, x *z)
VBIN_NEON(div, vdivq_f32, x / z)
#undef VBIN_NEON

void em_f32_vaffine_minmax_ukernel__neon(size_t n, const float *x, float s, float t, float *y,
                                         const em_minmax_params *p) {
  const float32x4_t lo = vdupq_n_f32(p->min), hi = vdupq_n_f32(p->max), vt = vdupq_n_f32(t);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const float32x4_t y0 = vfmaq_n_f32(vt, vld1q_f32(x + i), s);
    const float32x4_t y1 = vfmaq_n_f32(vt, vld1q_f32(x + i + 4), s);
    vst1q_f32(y + i, clamp4(y0, lo, hi)), vst1q_f32(y + i + 4, clamp4(y1, lo, hi));
  }
  for (; i + 4 <= n; i += 4) vst1q_f32(y + i, clamp4(vfmaq_n_f32(vt, vld1q_f32(x + i), s), lo, hi));
  for (; i < n; i++) y[i] = vx_clampf(x[i] * s + t, p->min, p->max);
}

/* One 16-column B panel times a row vector: y[0, nc) = clamp(bias + x[0, kc) @ b[kc][16]).
 * Four sets of 4 accumulators (k % 4): four independent FMA chains per column vector; the panel
 * is zero-padded to 16 columns, so every B row is read whole, but only bias[0, nc) and
 * y[0, nc) are touched. */
void em_f32_gemv16_minmax_ukernel__neon(size_t kc, size_t nc, const float *x, const float *b,
                                        const float *bias, float *y, const em_minmax_params *p) {
  float t[16] = {0};
  for (size_t j = 0; j < nc && bias; j++) t[j] = bias[j];
  float32x4_t c0 = vld1q_f32(t), c1 = vld1q_f32(t + 4), c2 = vld1q_f32(t + 8),
              c3 = vld1q_f32(t + 12);
  const float32x4_t z = vdupq_n_f32(0.0f);
  float32x4_t d0 = z, d1 = z, d2 = z, d3 = z, e0 = z, e1 = z, e2 = z, e3 = z;
  float32x4_t f0 = z, f1 = z, f2 = z, f3 = z;
  size_t k = 0;
  for (; k + 4 <= kc; k += 4) {
    const float *br = b + k * 16;
    for (size_t l = 16; l < 20; l++) __builtin_prefetch(br + 16 * l); /* 1 KiB ahead */
    const float32x4_t xv = vld1q_f32(x + k);
    c0 = vfmaq_laneq_f32(c0, vld1q_f32(br), xv, 0);
    c1 = vfmaq_laneq_f32(c1, vld1q_f32(br + 4), xv, 0);
    c2 = vfmaq_laneq_f32(c2, vld1q_f32(br + 8), xv, 0);
    c3 = vfmaq_laneq_f32(c3, vld1q_f32(br + 12), xv, 0);
    d0 = vfmaq_laneq_f32(d0, vld1q_f32(br + 16), xv, 1);
    d1 = vfmaq_laneq_f32(d1, vld1q_f32(br + 20), xv, 1);
    d2 = vfmaq_laneq_f32(d2, vld1q_f32(br + 24), xv, 1);
    d3 = vfmaq_laneq_f32(d3, vld1q_f32(br + 28), xv, 1);
    e0 = vfmaq_laneq_f32(e0, vld1q_f32(br + 32), xv, 2);
    e1 = vfmaq_laneq_f32(e1, vld1q_f32(br + 36), xv, 2);
    e2 = vfmaq_laneq_f32(e2, vld1q_f32(br + 40), xv, 2);
    e3 = vfmaq_laneq_f32(e3, vld1q_f32(br + 44), xv, 2);
    f0 = vfmaq_laneq_f32(f0, vld1q_f32(br + 48), xv, 3);
    f1 = vfmaq_laneq_f32(f1, vld1q_f32(br + 52), xv, 3);
    f2 = vfmaq_laneq_f32(f2, vld1q_f32(br + 56), xv, 3);
    f3 = vfmaq_laneq_f32(f3, vld1q_f32(br + 60), xv, 3);
  }
  for (; k < kc; k++) {
    const float *br = b + k * 16;
    c0 = vfmaq_n_f32(c0, vld1q_f32(br), x[k]), c1 = vfmaq_n_f32(c1, vld1q_f32(br + 4), x[k]);
    c2 = vfmaq_n_f32(c2, vld1q_f32(br + 8), x[k]), c3 = vfmaq_n_f32(c3, vld1q_f32(br + 12), x[k]);
  }
  const float32x4_t lo = vdupq_n_f32(p->min), hi = vdupq_n_f32(p->max);
  vst1q_f32(t, clamp4(vaddq_f32(vaddq_f32(c0, d0), vaddq_f32(e0, f0)), lo, hi));
  vst1q_f32(t + 4, clamp4(vaddq_f32(vaddq_f32(c1, d1), vaddq_f32(e1, f1)), lo, hi));
  vst1q_f32(t + 8, clamp4(vaddq_f32(vaddq_f32(c2, d2), vaddq_f32(e2, f2)), lo, hi));
  vst1q_f32(t + 12, clamp4(vaddq_f32(vaddq_f32(c3, d3), vaddq_f32(e3, f3)), lo, hi));
  for (size_t j = 0; j < nc; j++) y[j] = t[j];
}
#endif /* __aarch64__ */
