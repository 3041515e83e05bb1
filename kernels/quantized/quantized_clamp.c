/*
 * quantized_clamp.c — ember::quantized_clamp.out: an activation on int8 values that keeps the
 * input's scale and zero point (integer-only inference).
 *
 *   out = clamp(in, activation_min, activation_max)
 *
 * Quantization is monotonic, so a float ReLU / ReLU6 / hardtanh(lo, hi) on a value with scale s
 * and zero point zp is exactly this clamp with activation_min = zp + round(lo / s) and
 * activation_max = zp + round(hi / s) (each limited to [-128, 127]); ReLU is min = zp,
 * max = 127. The lowering folds an activation into the producing linear/conv/add's output clamp
 * when that producer has no other user; this kernel covers the rest (after a pool, a flatten,
 * the input, or a value read by several layers). Works in place (out may alias in).
 * Bit-exact with ember.quant.fused.quantized_clamp_ref.
 *
 * Args: [input i8, activation_min, activation_max, out i8, ret]
 */
#include "quantized/q8_util.h"

em_status em_quantized_clamp_out(em_kernel_ctx *ctx, em_evalue **args);
em_status em_quantized_clamp_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *x = EM_ARG_TENSOR(args, 0), *out = EM_ARG_TENSOR(args, 3);
  EM_KCHECK(ctx, x && out, "expected tensor arguments");
  int64_t lo = 0, hi = 0;
  EM_KCHECK(ctx, q8_int_in(args[1], -128, 127, &lo) && q8_int_in(args[2], -128, 127, &hi),
            "activation_min and activation_max must be ints in [-128, 127]");
  EM_KCHECK(ctx, lo <= hi, "activation_min %lld > activation_max %lld", (long long)lo,
            (long long)hi);
  EM_KCHECK(ctx, x->dtype == EM_DTYPE_I8 && out->dtype == EM_DTYPE_I8,
            "input and out must be int8");
  EM_KCHECK(ctx, em_tensor_is_contiguous_order(x), "contiguous input expected");
  EM_KTRY(em_resize_out(ctx, out, x->sizes, x->dim));
  const int8_t *xp = x->data;
  int8_t *yp = out->data;
  for (int64_t i = 0; i < x->numel; i++) yp[i] = (int8_t)q8_clamp(xp[i], (int32_t)lo, (int32_t)hi);
  return EM_OK;
}
