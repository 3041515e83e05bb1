/*
 * quantized_linear.c — ember::quantized_linear.out: an int8 fully connected layer with
 * int32 accumulation and fixed-point requantization (integer-only inference).
 *
 *   acc[m,n] = bias[n] + sum_k (x[m,k] - in_zp) * w[n,k]                 (int32)
 *   y[m,n]   = clamp(((acc * mult[n] + 2^(t-1)) >> t) + out_zp, act_min, act_max),
 *              t = 31 - shift[n]                                         (int64 product)
 *
 * Bit-exact with ember.quant.fused.quantized_linear_ref. Weights are symmetric per output
 * channel (zero point 0) and stored [N, K], so each output is one contiguous dot product read
 * straight from flash: no packing, no scratch memory. The dot product (q8_dot, q8_util.h) uses
 * dual 16-bit MACs on a Cortex-M with the DSP extension.
 *
 * Args: [input i8 [.., K], weight i8 [N, K], bias i32 [N], multiplier i32 [N], shift i32 [N],
 *        input_zero_point, output_zero_point, activation_min, activation_max, out i8 [.., N], ret]
 */
#include "quantized/q8_util.h"

em_status em_quantized_linear_out(em_kernel_ctx *ctx, em_evalue **args);
em_status em_quantized_linear_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *x = EM_ARG_TENSOR(args, 0), *w = EM_ARG_TENSOR(args, 1);
  em_tensor *bias = EM_ARG_TENSOR(args, 2), *mult = EM_ARG_TENSOR(args, 3);
  em_tensor *shift = EM_ARG_TENSOR(args, 4), *out = EM_ARG_TENSOR(args, 9);
  EM_KCHECK(ctx, x && w && bias && mult && shift && out, "expected tensor arguments");
  for (int i = 5; i <= 8; i++) EM_KCHECK(ctx, args[i]->tag == EM_TAG_INT, "argument %d: int", i);
  int64_t in_zp = args[5]->u.i, out_zp = args[6]->u.i;
  int64_t act_min = args[7]->u.i, act_max = args[8]->u.i;
  EM_KCHECK(ctx, x->dtype == EM_DTYPE_I8 && w->dtype == EM_DTYPE_I8 && out->dtype == EM_DTYPE_I8,
            "input, weight and out must be int8");
  EM_KCHECK(ctx,
            bias->dtype == EM_DTYPE_I32 && mult->dtype == EM_DTYPE_I32 &&
                shift->dtype == EM_DTYPE_I32,
            "bias, multiplier and shift must be int32");
  EM_KCHECK(ctx, x->dim >= 1 && w->dim == 2, "input rank >= 1 and weight rank 2 expected");
  int64_t n = w->sizes[0], k = w->sizes[1];
  EM_KCHECK(ctx, x->sizes[x->dim - 1] == k, "input has %lld features, weight %lld",
            (long long)x->sizes[x->dim - 1], (long long)k);
  EM_KCHECK(ctx, bias->numel == n && mult->numel == n && shift->numel == n,
            "bias, multiplier and shift need %lld entries", (long long)n);
  EM_KCHECK(ctx,
            in_zp >= -128 && in_zp <= 127 && out_zp >= -128 && out_zp <= 127 && act_min >= -128 &&
                act_max <= 127 && act_min <= act_max,
            "zero points and activation bounds must lie in int8");
  EM_KCHECK(ctx, em_tensor_is_contiguous_order(x) && em_tensor_is_contiguous_order(w),
            "contiguous input and weight expected");
  EM_KCHECK(ctx, k <= (1 << 20), "%lld input features: at most 2^20 (int32 accumulation)",
            (long long)k);
  const int32_t *sh = shift->data, *mu = mult->data, *b = bias->data;
  for (int64_t j = 0; j < n; j++)
    EM_KCHECK(ctx, sh[j] >= -30 && sh[j] <= 30, "shift %d out of [-30, 30]", (int)sh[j]);

  int64_t sizes[EM_MAX_DIM];
  for (int32_t d = 0; d < x->dim - 1; d++) sizes[d] = x->sizes[d];
  sizes[x->dim - 1] = n;
  EM_KTRY(em_resize_out(ctx, out, sizes, x->dim));
  int64_t m = k ? x->numel / k : 0;
  const int8_t *xp = x->data, *wp = w->data;
  int8_t *yp = out->data;
  for (int64_t r = 0; r < m; r++) {
    for (int64_t j = 0; j < n; j++) {
      int32_t acc = b[j] + q8_dot_zp(xp + r * k, wp + j * k, (int32_t)k, (int32_t)in_zp);
      int32_t v = q8_requantize(acc, mu[j], sh[j]) + (int32_t)out_zp;
      yp[r * n + j] = (int8_t)q8_clamp(v, (int32_t)act_min, (int32_t)act_max);
    }
  }
  return EM_OK;
}
