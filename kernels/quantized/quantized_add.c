/*
 * quantized_add.c — ember::quantized_add.out: elementwise sum of two int8 tensors with their
 * own scales and zero points, requantized to the output's (integer-only inference).
 *
 *   a' = requant((a - a_zp) << 20, a_mult, a_shift)     (both inputs on a common scale 2^-20 *
 *   b' = requant((b - b_zp) << 20, b_mult, b_shift)      twice the larger input scale)
 *   out = clamp(requant(a' + b', out_mult, out_shift) + out_zp, act_min, act_max)
 *
 * The 20-bit left shift keeps the rescaled inputs exact to ~1e-6 relative while a' + b' stays
 * far from int32 overflow (|a - a_zp| <= 255). A ReLU after the add is folded into act_min.
 * Bit-exact with ember.quant.fused.quantized_add_ref. Shapes must be equal (no broadcasting).
 *
 * Args: [a i8, b i8, a_zero_point, a_multiplier, a_shift, b_zero_point, b_multiplier, b_shift,
 *        output_zero_point, output_multiplier, output_shift, activation_min, activation_max,
 *        out i8, ret]
 */
#include "quantized/q8_util.h"

#define Q8_ADD_LEFT_SHIFT 20

em_status em_quantized_add_out(em_kernel_ctx *ctx, em_evalue **args);
em_status em_quantized_add_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *a = EM_ARG_TENSOR(args, 0), *b = EM_ARG_TENSOR(args, 1);
  em_tensor *out = EM_ARG_TENSOR(args, 13);
  EM_KCHECK(ctx, a && b && out, "expected tensor arguments");
  int64_t v[11];
  for (int i = 0; i < 11; i++)
    EM_KCHECK(ctx, em_arg_int(args[2 + i], &v[i]), "argument %d must be an int", 2 + i);
  int64_t a_zp = v[0], b_zp = v[3], out_zp = v[6], act_min = v[9], act_max = v[10];
  EM_KCHECK(ctx,
            a_zp >= -128 && a_zp <= 127 && b_zp >= -128 && b_zp <= 127 && out_zp >= -128 &&
                out_zp <= 127 && act_min >= -128 && act_max <= 127 && act_min <= act_max,
            "zero points and activation bounds must lie in [-128, 127], min <= max");
  EM_KCHECK(ctx,
            q8_valid_requant(v[1], v[2]) && q8_valid_requant(v[4], v[5]) &&
                q8_valid_requant(v[7], v[8]),
            "multipliers must be positive int32 and shifts in [-30, 30]");
  /* The rescaled inputs must not grow past 2^28, so a' + b' fits int32: factor <= 1. */
  EM_KCHECK(ctx, v[2] <= 0 && v[5] <= 0, "input rescale factors must be at most 1 (shift <= 0)");
  EM_KCHECK(ctx, a->dtype == EM_DTYPE_I8 && b->dtype == EM_DTYPE_I8 && out->dtype == EM_DTYPE_I8,
            "a, b and out must be int8");
  EM_KCHECK(ctx, a->dim == b->dim, "a and b must have the same shape (no broadcasting)");
  for (int32_t d = 0; d < a->dim; d++)
    EM_KCHECK(ctx, a->sizes[d] == b->sizes[d], "a and b differ in dim %d: %lld vs %lld", (int)d,
              (long long)a->sizes[d], (long long)b->sizes[d]);
  EM_KCHECK(ctx, em_tensor_is_contiguous_order(a) && em_tensor_is_contiguous_order(b),
            "contiguous inputs expected");
  EM_KTRY(em_resize_out(ctx, out, a->sizes, a->dim));
  const int8_t *ap = a->data, *bp = b->data;
  int8_t *yp = out->data;
  int32_t am = (int32_t)v[1], as = (int32_t)v[2], bm = (int32_t)v[4], bs = (int32_t)v[5];
  int32_t om = (int32_t)v[7], os = (int32_t)v[8];
  for (int64_t i = 0; i < a->numel; i++) {
    int32_t x = q8_requantize((ap[i] - (int32_t)a_zp) * (1 << Q8_ADD_LEFT_SHIFT), am, as);
    int32_t y = q8_requantize((bp[i] - (int32_t)b_zp) * (1 << Q8_ADD_LEFT_SHIFT), bm, bs);
    int32_t r = q8_requantize(x + y, om, os) + (int32_t)out_zp;
    yp[i] = (int8_t)q8_clamp(r, (int32_t)act_min, (int32_t)act_max);
  }
  return EM_OK;
}
