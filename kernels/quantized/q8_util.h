/*
 * q8_util.h — shared arithmetic of Ember's integer-only int8 kernels (kernels/quantized):
 * fixed-point requantization, the int8 dot product (portable, or dual 16-bit MACs on a
 * Cortex-M with the DSP extension) and argument helpers. Header-only (static inline), so each
 * kernel file stays self-contained for a selective build.
 *
 * The Python references of the same arithmetic are in python/ember/quant/fused.py.
 */
#ifndef EMBER_KERNELS_QUANTIZED_Q8_UTIL_H
#define EMBER_KERNELS_QUANTIZED_Q8_UTIL_H

#include "portable/kutil.h"

#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
#include <arm_acle.h>
#endif

/*
 * Fixed-point requantization: round(acc * mult * 2^(shift - 31)), i.e.
 * (acc * mult + 2^(t-1)) >> t with t = 31 - shift (int64 product, floor shift, as Python's >>).
 * `shift` must lie in [-30, 30] (checked by the kernels).
 */
static inline int32_t q8_requantize(int32_t acc, int32_t mult, int32_t shift) {
  int t = 31 - shift;
  int64_t p = (int64_t)acc * mult + ((int64_t)1 << (t - 1));
  /* p >> t for negative p is implementation-defined in C; compute floor division explicitly. */
  return (int32_t)(p >= 0 ? p >> t : -((-p + (((int64_t)1 << t) - 1)) >> t));
}

/* Clamps `v` to [lo, hi]. */
static inline int32_t q8_clamp(int32_t v, int32_t lo, int32_t hi) {
  return v < lo ? lo : v > hi ? hi : v;
}

#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
/*
 * Cortex-M with the DSP extension (M4/M7/M33...): four int8 pairs per step with two dual 16-bit
 * multiply-accumulates. __sxtb16 sign-extends bytes 0 and 2 (and, after a rotate by 8, bytes 1
 * and 3) into two int16 halves; __smlad adds both products. Same integer sums as the portable
 * loops, so the results are bit-exact with them.
 */

/* sum_i x[i] * w[i] (int32 accumulation). */
static inline int32_t q8_dot(const int8_t *x, const int8_t *w, int32_t k) {
  int32_t acc = 0, i = 0;
  for (; i + 4 <= k; i += 4) {
    uint32_t xv, wv;
    memcpy(&xv, x + i, 4);
    memcpy(&wv, w + i, 4);
    uint32_t x02 = __sxtb16(xv), x13 = __sxtb16((xv >> 8) | (xv << 24));
    uint32_t w02 = __sxtb16(wv), w13 = __sxtb16((wv >> 8) | (wv << 24));
    acc = (int32_t)__smlad(x02, w02, (uint32_t)acc);
    acc = (int32_t)__smlad(x13, w13, (uint32_t)acc);
  }
  for (; i < k; i++) acc += (int32_t)x[i] * w[i];
  return acc;
}

/* sum_i (x[i] - in_zp) * w[i], computed as sum x*w - in_zp * sum w in one pass. */
static inline int32_t q8_dot_zp(const int8_t *x, const int8_t *w, int32_t k, int32_t in_zp) {
  int32_t acc = 0, wsum = 0, i = 0;
  for (; i + 4 <= k; i += 4) {
    uint32_t xv, wv;
    memcpy(&xv, x + i, 4);
    memcpy(&wv, w + i, 4);
    uint32_t x02 = __sxtb16(xv), x13 = __sxtb16((xv >> 8) | (xv << 24));
    uint32_t w02 = __sxtb16(wv), w13 = __sxtb16((wv >> 8) | (wv << 24));
    acc = (int32_t)__smlad(x02, w02, (uint32_t)acc);
    acc = (int32_t)__smlad(x13, w13, (uint32_t)acc);
    wsum = (int32_t)__smlad(w02, 0x00010001u, (uint32_t)wsum);
    wsum = (int32_t)__smlad(w13, 0x00010001u, (uint32_t)wsum);
  }
  for (; i < k; i++) {
    acc += (int32_t)x[i] * w[i];
    wsum += w[i];
  }
  return acc - in_zp * wsum;
}
#else
/* sum_i x[i] * w[i] (int32 accumulation; portable C). */
static inline int32_t q8_dot(const int8_t *x, const int8_t *w, int32_t k) {
  int32_t acc = 0;
  for (int32_t i = 0; i < k; i++) acc += (int32_t)x[i] * w[i];
  return acc;
}

/* sum_i (x[i] - in_zp) * w[i] (int32 accumulation; portable C). */
static inline int32_t q8_dot_zp(const int8_t *x, const int8_t *w, int32_t k, int32_t in_zp) {
  int32_t acc = 0, wsum = 0;
  for (int32_t i = 0; i < k; i++) {
    acc += (int32_t)x[i] * w[i];
    wsum += w[i];
  }
  return acc - in_zp * wsum;
}
#endif

/* sum_i w[i]. */
static inline int32_t q8_sum(const int8_t *w, int32_t k) {
  int32_t s = 0;
  for (int32_t i = 0; i < k; i++) s += w[i];
  return s;
}

/* Reads an int[2] argument (a one-item list repeats its value) into out[2]; false if malformed. */
static inline bool q8_int_pair(em_evalue *v, int64_t out[2]) {
  size_t n = 0;
  const int64_t *p = em_evalue_int_list(v, &n);
  if (!p || (n != 1 && n != 2)) return false;
  out[0] = p[0];
  out[1] = p[n - 1];
  return true;
}

/* Reads an Int argument that must lie in [lo, hi]; false otherwise. */
static inline bool q8_int_in(const em_evalue *v, int64_t lo, int64_t hi, int64_t *out) {
  return em_arg_int(v, out) && *out >= lo && *out <= hi;
}

/* True when the int32 multiplier/shift pair is a valid requantization (mult > 0, shift in
 * [-30, 30]). */
static inline bool q8_valid_requant(int64_t mult, int64_t shift) {
  return mult > 0 && mult <= INT32_MAX && shift >= -30 && shift <= 30;
}

#endif /* EMBER_KERNELS_QUANTIZED_Q8_UTIL_H */
