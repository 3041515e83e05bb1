/*
 * f32_vops_impl.h — the elementwise / depthwise / row micro-kernels, written
 * once in plain C and instantiated per ISA by f32_vops__<isa>.c, each compiled
 * with that ISA's flags (CMakeLists.txt) so the loops vectorize to it. Define
 * EM_ISA (the name suffix) before including. The exp used by sigmoid, gelu,
 * softmax is a branch-free polynomial (|rel err| < 2e-7) so those loops
 * vectorize too; libm is only called once per softmax row for log. An ISA file
 * may write some kernels itself with intrinsics: it defines EM_VOPS_OWN_ELEMENTWISE
 * (vbinary, vbinaryc, vaffine), EM_VOPS_OWN_GEMV16, EM_VOPS_OWN_SOFTMAX or EM_VOPS_OWN_WINO
 * (the Winograd transforms) before including, and those are left out here; EM_VOPS_GELU_ROW
 * names its own GELU row for vact.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "cpu_ukernels.h"
#include "emc_format.h"

#define EM_CAT2(a, b) a##b
#define EM_CAT(a, b)  EM_CAT2(a, b)
#define EM_NAME(base) EM_CAT(base, EM_ISA)

static inline float vx_clampf(float x, float lo, float hi) {
  x = x < lo ? lo : x;
  return x > hi ? hi : x;
}

/* exp(x) by 2^n * P(r), r = x - n ln2 in [-ln2/2, ln2/2], degree-6 Taylor. */
static inline float vx_expf(float x) {
  x = vx_clampf(x, -87.0f, 88.0f);
  const float fn = floorf(x * 1.44269504088896341f + 0.5f);
  float r = x - fn * 0.693359375f;
  r = r - fn * -2.12194440e-4f;
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  /* NaN passes the clamp: its exponent is 0 (the result is NaN through p), not an int cast. */
  const int32_t bits = ((fn == fn ? (int32_t)fn : 0) + 127) << 23;
  float scale;
  memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

static inline float vx_sigmoidf(float x) { return 1.0f / (1.0f + vx_expf(-x)); }

/* expm1(x): its Taylor polynomial (degree 8) for |x| < 0.5, where exp(x) - 1 would lose the
 * low bits; exp(x) - 1 elsewhere (|rel err| < 4e-7 both). Branch-free, so loops vectorize. */
static inline float vx_expm1f(float x) {
  float p = 1.0f / 40320.0f;
  p = p * x + 1.0f / 5040.0f;
  p = p * x + 1.0f / 720.0f;
  p = p * x + 1.0f / 120.0f;
  p = p * x + 1.0f / 24.0f;
  p = p * x + 1.0f / 6.0f;
  p = p * x + 0.5f;
  p = p * x + 1.0f;
  const float small = p * x, big = vx_expf(x) - 1.0f;
  return fabsf(x) < 0.5f ? small : big;
}

static inline float vx_tanhf(float x) {
  const float ax = fabsf(x);
  const float e = vx_expf(-2.0f * ax);
  float t = (1.0f - e) / (1.0f + e);
  const float x2 = x * x;
  const float small = ax * (1.0f + x2 * (-1.0f / 3.0f + x2 * (2.0f / 15.0f)));
  t = ax < 0.05f ? small : t;
  return x < 0.0f ? -t : t;
}

/* erf by Abramowitz & Stegun 7.1.26 (|abs err| <= 1.5e-7). */
static inline float vx_erff(float x) {
  const float ax = fabsf(x);
  const float t = 1.0f / (1.0f + 0.3275911f * ax);
  float p = 1.061405429f;
  p = p * t - 1.453152027f;
  p = p * t + 1.421413741f;
  p = p * t - 0.284496736f;
  p = p * t + 0.254829592f;
  const float y = 1.0f - p * t * vx_expf(-ax * ax);
  return x < 0.0f ? -y : y;
}

/* erf for EMC_ACT_ERF: vx_erff's 1.5e-7 absolute error is a large relative one near 0, so
 * |x| < 0.5 takes erf's Maclaurin series to x^13 (relative error < 2e-8 there). */
static inline float vx_erf_exactf(float x) {
  const float x2 = x * x;
  float p = -1.0f / 9360.0f;
  p = p * x2 + 1.0f / 1320.0f;
  p = p * x2 - 1.0f / 216.0f;
  p = p * x2 + 1.0f / 42.0f;
  p = p * x2 - 1.0f / 10.0f;
  p = p * x2 + 1.0f / 3.0f;
  const float small = 1.12837916709551257f * (x - x * x2 * p);
  const float big = vx_erff(x);
  return fabsf(x) < 0.5f ? small : big;
}

/* log1p(u) for u in [0, 1]: log(w), w = 1 + u in [1, 2], as Cephes' logf (w reduced to
 * [sqrt(1/2), sqrt(2)) by one halving, a degree-8 polynomial), plus the rounding error of w
 * ((u - (w - 1)) / w: exact small u). Branch-free. */
static inline float vx_log1p_unitf(float u) {
  const float w = 1.0f + u;
  const float e = w > 1.41421356f ? 1.0f : 0.0f;
  const float f = (e > 0.0f ? w * 0.5f : w) - 1.0f, z = f * f;
  float y = 7.0376836292e-2f;
  y = y * f - 1.1514610310e-1f;
  y = y * f + 1.1676998740e-1f;
  y = y * f - 1.2420140846e-1f;
  y = y * f + 1.4249322787e-1f;
  y = y * f - 1.6668057665e-1f;
  y = y * f + 2.0000714765e-1f;
  y = y * f - 2.4999993993e-1f;
  y = y * f + 3.3333331174e-1f;
  y = y * f * z - 2.12194440e-4f * e - 0.5f * z;
  return f + y + 0.693359375f * e + (u - (w - 1.0f)) / w;
}

/* softplus(x) = log(1 + exp(x)) as max(x, 0) + log1p(exp(-|x|)) (no overflow; NaN stays). */
static inline float vx_softplus1f(float x) {
  const float ax = fabsf(x);
  return (x > 0.0f ? x : 0.0f) + vx_log1p_unitf(vx_expf(-ax)); /* NaN: through the exp */
}

#ifndef EM_VOPS_OWN_ELEMENTWISE /* the ISA file defines vbinary and vaffine */
#define EM_VBIN(op, expr)                                                                          \
  void EM_NAME(em_f32_v##op##_minmax_ukernel__)(size_t n, const float *a, const float *b,          \
                                                float *y, const em_minmax_params *p) {             \
    const float lo = p->min, hi = p->max;                                                          \
    for (size_t i = 0; i < n; i++) {                                                               \
      const float x = a[i], z = b[i];                                                              \
      y[i] = vx_clampf(expr, lo, hi);                                                              \
    }                                                                                              \
  }                                                                                                \
  void EM_NAME(em_f32_v##op##c_minmax_ukernel__)(size_t n, const float *a, const float *b,         \
                                                 float *y, const em_minmax_params *p) {            \
    const float lo = p->min, hi = p->max, z = *b;                                                  \
    for (size_t i = 0; i < n; i++) {                                                               \
      const float x = a[i];                                                                        \
      y[i] = vx_clampf(expr, lo, hi);                                                              \
    }                                                                                              \
  }
EM_VBIN(add, x + z)
EM_VBIN(sub, x - z)
EM_VBIN(mul, x *z)
EM_VBIN(div, x / z)
#undef EM_VBIN

void EM_NAME(em_f32_vaffine_minmax_ukernel__)(size_t n, const float *x, float s, float t, float *y,
                                              const em_minmax_params *p) {
  const float lo = p->min, hi = p->max;
  for (size_t i = 0; i < n; i++) y[i] = vx_clampf(x[i] * s + t, lo, hi);
}
#endif /* EM_VOPS_OWN_ELEMENTWISE */

/* The quantized level of one value under EMC_ACT_FAKEQUANT's parameters, step for step as the
 * portable quantize: the clamp, the scaling, rounding half to even by the 1.5 * 2^23 trick (exact
 * for |t| < 2^22, which the clamp to one step past the quantized range keeps), the zero point
 * and the range (NaN: qmin). */
static inline float vx_fq_level(float v, const float *fp) {
  const float zp = fp[EMC_ACT_FP_ZP], qmin = fp[EMC_ACT_FP_QMIN], qmax = fp[EMC_ACT_FP_QMAX];
  const float tlo = qmin - zp - 1.0f, thi = qmax - zp + 1.0f, magic = 12582912.0f;
  const float t = vx_clampf(
      vx_clampf(v, fp[EMC_ACT_FP_MIN], fp[EMC_ACT_FP_MAX]) * fp[EMC_ACT_FP_INV_SCALE], tlo, thi);
  float q = ((t + magic) - magic) + zp;
  q = q >= qmin ? q : qmin;
  return q <= qmax ? q : qmax;
}

/*
 * EMC_ACT_FAKEQUANT on n floats (y may be x): (vx_fq_level(x) - zp) * scale, in a short form
 * with the same values. Every step after the clamp to [min, max] is non-decreasing in x, so
 * that clamp is a clamp of the level to [level(min), level(max)], integers, which moves before
 * the rounding: t = x * inv clamped to those levels less zp (NaN stays), rounded, then NaN sent
 * to qmin - zp by the last comparison. Five operations a value instead of ten.
 */
static inline void vx_fakequant_row(size_t n, const float *x, float *y, const float *fp) {
  const float inv = fp[EMC_ACT_FP_INV_SCALE], s = fp[EMC_ACT_FP_SCALE], zp = fp[EMC_ACT_FP_ZP];
  const float flo = vx_fq_level(fp[EMC_ACT_FP_MIN], fp) - zp;
  const float fhi = vx_fq_level(fp[EMC_ACT_FP_MAX], fp) - zp;
  const float rlo = fp[EMC_ACT_FP_QMIN] - zp, magic = 12582912.0f;
  for (size_t i = 0; i < n; i++) {
    float t = x[i] * inv;
    t = t < flo ? flo : t; /* NaN stays */
    t = t > fhi ? fhi : t;
    float r = (t + magic) - magic;
    r = r >= rlo ? r : rlo; /* NaN: qmin - zp */
    y[i] = r * s;
  }
}

/* p / 6 as ATen's division rounds it, for every p that is not below 2^-125 in magnitude (there
 * the quotient is subnormal and may differ in its last bit): with FMA, p * RN(1/6) refined once
 * (Markstein: the residual p - 6 y is exact, and y + r / 6 rounds to the quotient), checked
 * against the division for every f32; +inf goes through as itself. A vector division costs
 * ~14 cycles on Zen 4, the three operations ~2. */
static inline float vx_div6f(float p) {
#if defined(__FMA__) || defined(__ARM_FEATURE_FMA)
  const float c = 1.0f / 6.0f, y = p * c, q = fmaf(fmaf(-y, 6.0f, p), c, y);
  return q == q ? q : p; /* NaN only from p = +-inf or NaN: p / 6 is p */
#else
  return p / 6.0f;
#endif
}

/* EMC_ACT_HARDSWISH_FQ on n floats (y may be x): x * clamp(x + 3, 0, 6) / 6, then
 * vx_fakequant_row's steps, in one loop (the two loops over a block on the stack cost 3.6x a
 * fake-quant). The same values as with ATen's division: vx_div6f is exact down to 2^-125, and
 * below it x * inv (inv < 2^100, the exporter's bound) rounds to level 0 either way. */
static inline void vx_hardswish_fq_row(size_t n, const float *x, float *y, const float *fp) {
  const float inv = fp[EMC_ACT_FP_INV_SCALE], s = fp[EMC_ACT_FP_SCALE], zp = fp[EMC_ACT_FP_ZP];
  const float flo = vx_fq_level(fp[EMC_ACT_FP_MIN], fp) - zp;
  const float fhi = vx_fq_level(fp[EMC_ACT_FP_MAX], fp) - zp;
  const float rlo = fp[EMC_ACT_FP_QMIN] - zp, magic = 12582912.0f;
#ifdef EM_VOPS_HSFQ_ROW /* the ISA's own row, the same steps in intrinsics */
  const float k[5] = {inv, s, flo, fhi, rlo};
  EM_VOPS_HSFQ_ROW(n, x, y, k);
  (void)magic;
  return;
#endif
  for (size_t i = 0; i < n; i++) {
    const float v = x[i];
    float t = vx_div6f(v * vx_clampf(v + 3.0f, 0.0f, 6.0f)) * inv;
    t = t < flo ? flo : t; /* NaN stays */
    t = t > fhi ? fhi : t;
    float r = (t + magic) - magic;
    r = r >= rlo ? r : rlo; /* NaN: qmin - zp */
    y[i] = r * s;
  }
}

void EM_NAME(em_f32_vact_ukernel__)(size_t n, const float *x, float *y, uint32_t act,
                                    const float *fp) {
  switch (act) {
  case EMC_ACT_CLAMP: {
    const float lo = fp[0], hi = fp[1];
    for (size_t i = 0; i < n; i++) y[i] = vx_clampf(x[i], lo, hi);
    break;
  }
  /* Times 1/6 rather than / 6 (within an ulp of ATen's): a vector division costs ~10x a
   * multiply, and was 11 % of MobileNetV3-Small's time. */
  case EMC_ACT_HARDSWISH:
    for (size_t i = 0; i < n; i++) y[i] = x[i] * vx_clampf(x[i] + 3.0f, 0.0f, 6.0f) * (1.0f / 6.0f);
    break;
  case EMC_ACT_HARDSIGMOID:
    for (size_t i = 0; i < n; i++) y[i] = vx_clampf(x[i] + 3.0f, 0.0f, 6.0f) * (1.0f / 6.0f);
    break;
  case EMC_ACT_SIGMOID:
    for (size_t i = 0; i < n; i++) y[i] = vx_sigmoidf(x[i]);
    break;
  case EMC_ACT_SILU:
    for (size_t i = 0; i < n; i++) y[i] = x[i] * vx_sigmoidf(x[i]);
    break;
  case EMC_ACT_GELU:
#ifdef EM_VOPS_GELU_ROW /* the ISA's own GELU row */
    EM_VOPS_GELU_ROW(n, x, y);
#else
    for (size_t i = 0; i < n; i++)
      y[i] = 0.5f * x[i] * (1.0f + vx_erff(x[i] * 0.70710678118654752f));
#endif
    break;
  case EMC_ACT_GELU_TANH:
    for (size_t i = 0; i < n; i++) {
      const float v = x[i];
      y[i] = 0.5f * v * (1.0f + vx_tanhf(0.79788456080286536f * (v + 0.044715f * v * v * v)));
    }
    break;
  case EMC_ACT_TANH:
    for (size_t i = 0; i < n; i++) y[i] = vx_tanhf(x[i]);
    break;
  case EMC_ACT_EXP:
    for (size_t i = 0; i < n; i++) y[i] = vx_expf(x[i]);
    break;
  case EMC_ACT_SQRT:
    for (size_t i = 0; i < n; i++) y[i] = sqrtf(x[i]);
    break;
  case EMC_ACT_RSQRT:
    for (size_t i = 0; i < n; i++) y[i] = 1.0f / sqrtf(x[i]);
    break;
  case EMC_ACT_NEG:
    for (size_t i = 0; i < n; i++) y[i] = -x[i];
    break;
  case EMC_ACT_ABS:
    for (size_t i = 0; i < n; i++) y[i] = fabsf(x[i]);
    break;
  case EMC_ACT_FAKEQUANT: vx_fakequant_row(n, x, y, fp); break;
  case EMC_ACT_HARDSWISH_FQ: vx_hardswish_fq_row(n, x, y, fp); break;
  case EMC_ACT_CUBE: /* ATen's pow(x, 3): (x * x) * x */
    for (size_t i = 0; i < n; i++) y[i] = x[i] * x[i] * x[i];
    break;
  case EMC_ACT_ERF:
    for (size_t i = 0; i < n; i++) y[i] = vx_erf_exactf(x[i]);
    break;
  case EMC_ACT_RECIPROCAL:
    for (size_t i = 0; i < n; i++) y[i] = 1.0f / x[i];
    break;
  case EMC_ACT_SIGN:
    for (size_t i = 0; i < n; i++) y[i] = (float)(x[i] > 0.0f) - (float)(x[i] < 0.0f);
    break;
  case EMC_ACT_SOFTPLUS: { /* ATen's: x where x * beta > threshold, else softplus(x * beta) / beta
                            */
    const float beta = fp[EMC_ACT_FP_ALPHA], thr = fp[EMC_ACT_FP_THRESHOLD];
    for (size_t i = 0; i < n; i++) {
      const float t = x[i] * beta;
      y[i] = t > thr ? x[i] : vx_softplus1f(t) / beta;
    }
    break;
  }
  case EMC_ACT_MISH: /* tanh(softplus) taken as 0 below -88 (vx_expf's floor): -inf gives NaN */
    for (size_t i = 0; i < n; i++)
      y[i] = x[i] * (x[i] < -88.0f ? 0.0f : vx_tanhf(vx_softplus1f(x[i])));
    break;
  case EMC_ACT_LEAKY_RELU: {
    const float a = fp[EMC_ACT_FP_ALPHA];
    for (size_t i = 0; i < n; i++) y[i] = x[i] > 0.0f ? x[i] : x[i] * a;
    break;
  }
  case EMC_ACT_ELU: {
    const float neg = fp[EMC_ACT_FP_ALPHA], s = fp[EMC_ACT_FP_ELU_SCALE];
    const float is = fp[EMC_ACT_FP_ELU_INPUT_SCALE];
    for (size_t i = 0; i < n; i++) {
      const float v = x[i], e = vx_expm1f(v * is) * neg * s;
      y[i] = v <= 0.0f ? e : v * s;
    }
    break;
  }
  default:
    if (y != x) memmove(y, x, n * sizeof *y);
    break;
  }
}

/* Reductions keep 16 partial results so they vectorize without -ffast-math. */
static inline float vx_sum(size_t n, const float *x) {
  float part[16] = {0};
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (size_t j = 0; j < 16; j++) part[j] += x[i + j];
  float s = 0.0f;
  for (size_t j = 0; j < 16; j++) s += part[j];
  for (; i < n; i++) s += x[i];
  return s;
}

static inline float vx_max(size_t n, const float *x) {
  float part[16];
  for (size_t j = 0; j < 16; j++) part[j] = -INFINITY;
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (size_t j = 0; j < 16; j++) part[j] = x[i + j] > part[j] ? x[i + j] : part[j];
  float m = -INFINITY;
  for (size_t j = 0; j < 16; j++) m = part[j] > m ? part[j] : m;
  for (; i < n; i++) m = x[i] > m ? x[i] : m;
  return m;
}

#ifndef EM_VOPS_OWN_SOFTMAX /* the ISA file writes the softmax row itself */
void EM_NAME(em_f32_softmax_ukernel__)(size_t n, const float *x, float *y, int log) {
  if (n == 0) return;
  const float mx = vx_max(n, x);
  for (size_t i = 0; i < n; i++) y[i] = vx_expf(x[i] - mx);
  const float sum = vx_sum(n, y);
  if (log) {
    const float lse = mx + logf(sum);
    for (size_t i = 0; i < n; i++) y[i] = x[i] - lse;
    return;
  }
  const float inv = 1.0f / sum;
  for (size_t i = 0; i < n; i++) y[i] *= inv;
}
#endif /* EM_VOPS_OWN_SOFTMAX */

#ifndef EM_VOPS_OWN_NORM /* the ISA file writes the norm rows itself */
/* One layer / RMS norm row: the mean as the sum over n, then one correction pass (the mean of x
 * - mean: a row of equal values then gets its value exactly; sum / n alone can be an ulp off,
 * and 1 / sqrt(eps) turns that ulp into an error of 1e-5 where eager gives the bias exactly),
 * the variance of x - mean (of x for rms), y = (x - mean) * rstd (* w) (+ b). */
static void EM_NAME(norm_row_)(size_t n, const float *x, const float *w, const float *b, float eps,
                               int rms, float *y) {
  float mean = 0.0f;
  if (!rms) {
    mean = vx_sum(n, x) / (float)n;
    float corr[16] = {0};
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
      for (size_t j = 0; j < 16; j++) corr[j] += x[i + j] - mean;
    float c = 0.0f;
    for (size_t j = 0; j < 16; j++) c += corr[j];
    for (; i < n; i++) c += x[i] - mean;
    mean += c / (float)n;
  }
  float part[16] = {0};
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (size_t j = 0; j < 16; j++) {
      const float d = x[i + j] - mean;
      part[j] += d * d;
    }
  float var = 0.0f;
  for (size_t j = 0; j < 16; j++) var += part[j];
  for (; i < n; i++) var += (x[i] - mean) * (x[i] - mean);
  const float rstd = 1.0f / sqrtf(var / (float)n + eps);
  if (w && b)
    for (size_t k = 0; k < n; k++) y[k] = (x[k] - mean) * rstd * w[k] + b[k];
  else if (w)
    for (size_t k = 0; k < n; k++) y[k] = (x[k] - mean) * rstd * w[k];
  else if (b)
    for (size_t k = 0; k < n; k++) y[k] = (x[k] - mean) * rstd + b[k];
  else
    for (size_t k = 0; k < n; k++) y[k] = (x[k] - mean) * rstd;
}

void EM_NAME(em_f32_norm_ukernel__)(size_t rows, size_t n, const float *x, const float *w,
                                    const float *b, float eps, int rms, float *y) {
  for (size_t r = 0; r < rows && n; r++)
    EM_NAME(norm_row_)(n, x + r * n, w, b, eps, rms, y + r * n);
}
#endif /* EM_VOPS_OWN_NORM */

#ifndef EM_VOPS_OWN_GEMV16 /* the ISA file defines gemv16 */
/* One 16-column B panel times a row vector: y[0, nc) = clamp(bias + x[0, kc) @ b[kc][16]). */
void EM_NAME(em_f32_gemv16_minmax_ukernel__)(size_t kc, size_t nc, const float *x, const float *b,
                                             const float *bias, float *y,
                                             const em_minmax_params *p) {
  /* Four partial sums over k % 4: four independent FMA chains instead of one, and the panel
   * (streamed from memory once: classifier weights) prefetched 4 KiB ahead: at 1 KiB the
   * stream had too few lines in flight (MobileNetV3-Small's 576 -> 1024 and 1024 -> 1000
   * classifier layers, 1 thread, interleaved: 10-17 % slower). */
  float acc[16], a1[16] = {0}, a2[16] = {0}, a3[16] = {0};
  for (size_t j = 0; j < 16; j++) acc[j] = (bias && j < nc) ? bias[j] : 0.0f;
  size_t k = 0;
  for (; k + 4 <= kc; k += 4) {
    const float *restrict br = b + k * 16;
    for (size_t l = 64; l < 68; l++) __builtin_prefetch(br + 16 * l); /* 4 KiB ahead */
    for (size_t j = 0; j < 16; j++) acc[j] += x[k] * br[j];
    for (size_t j = 0; j < 16; j++) a1[j] += x[k + 1] * br[16 + j];
    for (size_t j = 0; j < 16; j++) a2[j] += x[k + 2] * br[32 + j];
    for (size_t j = 0; j < 16; j++) a3[j] += x[k + 3] * br[48 + j];
  }
  for (; k < kc; k++)
    for (size_t j = 0; j < 16; j++) acc[j] += x[k] * b[k * 16 + j];
  for (size_t j = 0; j < nc; j++)
    y[j] = vx_clampf((acc[j] + a1[j]) + (a2[j] + a3[j]), p->min, p->max);
}
#endif /* EM_VOPS_OWN_GEMV16 */

#ifndef EM_VOPS_OWN_GEMV6 /* the ISA file defines gemv6 */
/* One 6-row A panel times a column vector: y[0, mr) = clamp(bias + a[kc][6]^T x). */
void EM_NAME(em_f32_gemv6_minmax_ukernel__)(size_t kc, size_t mr, const float *a, const float *x,
                                            const float *bias, float *y,
                                            const em_minmax_params *p) {
  float acc[6] = {0}, a1[6] = {0};
  size_t k = 0;
  for (; k + 2 <= kc; k += 2) {
    for (size_t r = 0; r < 6; r++) acc[r] += a[k * 6 + r] * x[k];
    for (size_t r = 0; r < 6; r++) a1[r] += a[k * 6 + 6 + r] * x[k + 1];
  }
  for (; k < kc; k++)
    for (size_t r = 0; r < 6; r++) acc[r] += a[k * 6 + r] * x[k];
  for (size_t r = 0; r < mr; r++)
    y[r] = vx_clampf((bias ? bias[r] : 0.0f) + (acc[r] + a1[r]), p->min, p->max);
}
#endif /* EM_VOPS_OWN_GEMV6 */

/* y[i] = x[2 i] for i < n: the columns of a stride-2 convolution's im2col row. */
void EM_NAME(em_f32_copy_stride2_ukernel__)(size_t n, const float *x, float *y) {
  for (size_t i = 0; i < n; i++) y[i] = x[2 * i];
}

static inline float vx_maxnan(float a, float b) { return (b > a || b != b) ? b : a; }

/* One plane of a max pool (em_f32_maxpool_fn), separably: for each output row, the max over the
 * window's input rows into a row padded with -inf on both sides, then over the window's
 * columns: stride 1 from shifted reads of that row, stride 2 from its even and odd columns (tap
 * kx is column ox + kx / 2 of one of them). Plain loops the compiler vectorizes for the ISA. */
void EM_NAME(em_f32_maxpool2d_ukernel__)(const em_pool_params *q, const float *x, float *y) {
  float pad[EM_POOL_ROW_MAX + 1], even[EM_POOL_ROW_MAX / 2 + 1], odd[EM_POOL_ROW_MAX / 2 + 1];
  const int64_t w = q->w, ow = q->ow, sw = q->sw, kw = q->kw;
  const int64_t span = (ow - 1) * sw + kw; /* columns the windows cover, padding included */
  for (int64_t i = 0; i <= span; i++) pad[i] = -INFINITY;
  float *restrict row = pad + q->pw;
  for (int64_t oy = 0; oy < q->oh; oy++) {
    const int64_t y0 = oy * q->sh - q->ph;
    const int64_t ky0 = y0 < 0 ? -y0 : 0, ky1 = y0 + q->kh > q->h ? q->h - y0 : q->kh;
    if (ky1 <= ky0) {
      for (int64_t i = 0; i < w; i++) row[i] = -INFINITY;
    } else {
      const float *restrict r0 = x + (y0 + ky0) * w;
      for (int64_t i = 0; i < w; i++) row[i] = r0[i];
      for (int64_t ky = ky0 + 1; ky < ky1; ky++) {
        const float *restrict r = x + (y0 + ky) * w;
        for (int64_t i = 0; i < w; i++) row[i] = vx_maxnan(row[i], r[i]);
      }
    }
    float *restrict yr = y + oy * ow;
    if (sw == 2) {
      for (int64_t i = 0; i < (span + 1) / 2; i++) even[i] = pad[2 * i];
      for (int64_t i = 0; i < span / 2; i++) odd[i] = pad[2 * i + 1];
      for (int64_t ox = 0; ox < ow; ox++) yr[ox] = even[ox];
      for (int64_t kx = 1; kx < kw; kx++) {
        const float *restrict src = (kx & 1 ? odd : even) + kx / 2;
        for (int64_t ox = 0; ox < ow; ox++) yr[ox] = vx_maxnan(yr[ox], src[ox]);
      }
    } else {
      for (int64_t ox = 0; ox < ow; ox++) yr[ox] = pad[ox * sw];
      for (int64_t kx = 1; kx < kw; kx++)
        for (int64_t ox = 0; ox < ow; ox++) yr[ox] = vx_maxnan(yr[ox], pad[kx + ox * sw]);
    }
  }
}

/* First output column whose tap (ow * s + off) lands inside [0, w), and one past the last. */
static inline void vx_valid_cols(int64_t w, int64_t ow, int64_t s, int64_t off, int64_t *lo,
                                 int64_t *hi) {
  int64_t a = off >= 0 ? 0 : (-off + s - 1) / s;
  int64_t b = (w - 1 - off) < 0 ? 0 : (w - 1 - off) / s + 1;
  if (b > ow) b = ow;
  if (a > b) a = b;
  *lo = a, *hi = b;
}

void EM_NAME(em_f32_dwconv2d_minmax_ukernel__)(const em_dw_params *q, const float *in,
                                               const float *w, float bias, float *out,
                                               const em_minmax_params *p) {
  const int64_t OW = q->ow;
  for (int64_t oh = 0; oh < q->oh; oh++) {
    float *restrict orow = out + oh * OW;
    for (int64_t ow = 0; ow < OW; ow++) orow[ow] = bias;
    for (int64_t ky = 0; ky < q->kh; ky++) {
      const int64_t ih = oh * q->sh + ky * q->dh - q->ph;
      if (ih < 0 || ih >= q->h) continue;
      const float *restrict irow = in + ih * q->w;
      for (int64_t kx = 0; kx < q->kw; kx++) {
        const float wv = w[ky * q->kw + kx];
        const int64_t off = kx * q->dw - q->pw;
        int64_t lo, hi;
        vx_valid_cols(q->w, OW, q->sw, off, &lo, &hi);
        if (q->sw == 1) {
          const float *restrict src = irow + off;
          for (int64_t ow = lo; ow < hi; ow++) orow[ow] += wv * src[ow];
        } else if (q->sw == 2) {
          const float *restrict src = irow + off;
          for (int64_t ow = lo; ow < hi; ow++) orow[ow] += wv * src[2 * ow];
        } else {
          for (int64_t ow = lo; ow < hi; ow++) orow[ow] += wv * irow[ow * q->sw + off];
        }
      }
    }
    const float l = p->min, h = p->max;
    for (int64_t ow = 0; ow < OW; ow++) orow[ow] = vx_clampf(orow[ow], l, h);
  }
}

/* ---- Winograd F(m x m, 3 x 3), m = 2 or 4 (a = m + 2 input rows and columns per tile) --------
 *
 * The convolution of an a x a input window d with a 3 x 3 filter g is A^T [(G g G^T) .* (B^T d B)]
 * A (Lavin & Gray's minimal filtering; F(4, 3) with the points 0, +-1, +-2, infinity). The exporter
 * transforms the filters (G g G^T); these two kernels transform n tiles of one channel, side by
 * side in a row, one tile per lane t, so every loop runs over t (or along a row) and vectorizes.
 */
#ifndef EM_VOPS_OWN_WINO /* the ISA file writes the Winograd transforms itself */

/* o[p * os + t] = (B^T x)[p] for x[i] = x[i * is + t], t < n. */
static inline void vx_wino_bt(int m, size_t n, const float *restrict x, size_t is,
                              float *restrict o, size_t os) {
  if (m == 2) {
    for (size_t t = 0; t < n; t++) {
      const float x0 = x[t], x1 = x[is + t], x2 = x[2 * is + t], x3 = x[3 * is + t];
      o[t] = x0 - x2, o[os + t] = x1 + x2, o[2 * os + t] = x2 - x1, o[3 * os + t] = x1 - x3;
    }
    return;
  }
  for (size_t t = 0; t < n; t++) {
    const float x0 = x[t], x1 = x[is + t], x2 = x[2 * is + t], x3 = x[3 * is + t];
    const float x4 = x[4 * is + t], x5 = x[5 * is + t];
    o[t] = 4.0f * x0 - 5.0f * x2 + x4;
    o[os + t] = x3 + x4 - 4.0f * (x1 + x2);
    o[2 * os + t] = x4 - x3 + 4.0f * (x1 - x2);
    o[3 * os + t] = x4 - x2 + 2.0f * (x3 - x1);
    o[4 * os + t] = x4 - x2 - 2.0f * (x3 - x1);
    o[5 * os + t] = 4.0f * x1 - 5.0f * x3 + x5;
  }
}

/*
 * Input transform of n <= EM_WINO_MAX_LANES lanes side by side: rows holds a input rows (ldr
 * floats apart, n * m + 2 columns each, the lanes' windows overlapping by 2, zero padding already
 * in place); v[xi * vs + k] receives element xi = p * a + q of the k-th tile's B^T d B, the tiles
 * being every lane (keep NULL) or those whose bit is set in keep (the rest are gaps).
 */
void EM_NAME(em_f32_wino_in_ukernel__)(int m, size_t n, const uint16_t *keep, const float *rows,
                                       size_t ldr, float *v, size_t vs) {
  const size_t a = (size_t)m + 2, wd = n * (size_t)m + 2;
  float r[6 * (EM_WINO_MAX_LANES * 4 + 2)]; /* B^T applied down the columns: row p of B^T d */
  vx_wino_bt(m, wd, rows, ldr, r, wd);
  /* Then B^T along each kept lane's row window (columns t * m .. t * m + m + 1 of row p). */
  for (size_t p = 0; p < a; p++) {
    size_t k = 0; /* tiles stored so far */
    for (size_t t = 0; t < n; t++) {
      if (keep && !((keep[t / 16] >> (t % 16)) & 1u)) continue;
      vx_wino_bt(m, 1, r + p * wd + t * (size_t)m, 1, v + p * a * vs + k, vs);
      k++;
    }
  }
}

/*
 * Output transform of n <= EM_WINO_MAX_TILES tiles: mm[xi * ms + t] is element xi of tile t's
 * product (G g G^T) .* (B^T d B); rows (m rows, ldr floats apart, n * m columns) receives
 * clamp(A^T mm A + bias), tile t in columns [t * m, t * m + m).
 */
void EM_NAME(em_f32_wino_out_ukernel__)(int m, size_t n, const float *mm, size_t ms, float bias,
                                        float *rows, size_t ldr, const em_minmax_params *p) {
  const size_t a = (size_t)m + 2;
  float s[4 * 6 * EM_WINO_MAX_TILES]; /* A^T applied down the columns: s[(i * a + q) * n + t] */
  for (size_t q = 0; q < a; q++) {
    const float *restrict x = mm + q * ms;
    float *restrict o = s + q * n;
    const size_t is = a * ms, os = a * n;
    if (m == 2) {
      for (size_t t = 0; t < n; t++) {
        const float x0 = x[t], x1 = x[is + t], x2 = x[2 * is + t], x3 = x[3 * is + t];
        o[t] = x0 + x1 + x2, o[os + t] = x1 - x2 - x3;
      }
    } else {
      for (size_t t = 0; t < n; t++) {
        const float x0 = x[t], x1 = x[is + t], x2 = x[2 * is + t], x3 = x[3 * is + t];
        const float x4 = x[4 * is + t], x5 = x[5 * is + t];
        const float s12 = x1 + x2, d12 = x1 - x2, s34 = x3 + x4, d34 = x3 - x4;
        o[t] = x0 + s12 + s34, o[os + t] = d12 + 2.0f * d34;
        o[2 * os + t] = s12 + 4.0f * s34, o[3 * os + t] = d12 + 8.0f * d34 + x5;
      }
    }
  }
  const float lo = p->min, hi = p->max;
  for (size_t i = 0; i < (size_t)m; i++) {
    const float *restrict x = s + i * a * n;
    float *restrict y = rows + i * ldr;
    if (m == 2) {
      for (size_t t = 0; t < n; t++) {
        const float x0 = x[t], x1 = x[n + t], x2 = x[2 * n + t], x3 = x[3 * n + t];
        y[2 * t] = vx_clampf(x0 + x1 + x2 + bias, lo, hi);
        y[2 * t + 1] = vx_clampf(x1 - x2 - x3 + bias, lo, hi);
      }
    } else {
      for (size_t t = 0; t < n; t++) {
        const float x0 = x[t], x1 = x[n + t], x2 = x[2 * n + t], x3 = x[3 * n + t];
        const float x4 = x[4 * n + t], x5 = x[5 * n + t];
        const float s12 = x1 + x2, d12 = x1 - x2, s34 = x3 + x4, d34 = x3 - x4;
        y[4 * t] = vx_clampf(x0 + s12 + s34 + bias, lo, hi);
        y[4 * t + 1] = vx_clampf(d12 + 2.0f * d34 + bias, lo, hi);
        y[4 * t + 2] = vx_clampf(s12 + 4.0f * s34 + bias, lo, hi);
        y[4 * t + 3] = vx_clampf(d12 + 8.0f * d34 + x5 + bias, lo, hi);
      }
    }
  }
}
#endif /* EM_VOPS_OWN_WINO */

#ifndef EM_VOPS_OWN_TRANSPOSE /* the ISA file writes the transpose itself */
/* y = x^T in 8 x 8 blocks (each block's x rows and y rows stay in L1 while it is copied). */
void EM_NAME(em_f32_transpose_ukernel__)(size_t rows, size_t cols, const float *x, size_t ldx,
                                         float *y, size_t ldy) {
  for (size_t r0 = 0; r0 < rows; r0 += 8)
    for (size_t c0 = 0; c0 < cols; c0 += 8) {
      const size_t r1 = r0 + 8 < rows ? r0 + 8 : rows, c1 = c0 + 8 < cols ? c0 + 8 : cols;
      for (size_t c = c0; c < c1; c++)
        for (size_t r = r0; r < r1; r++) y[c * ldy + r] = x[r * ldx + c];
    }
}
#endif /* EM_VOPS_OWN_TRANSPOSE */
