/*
 * quantized_conv2d.c — ember::quantized_conv2d.out: an int8 2-D convolution (NCHW) with
 * per-output-channel symmetric int8 weights, int32 bias and accumulation, and fixed-point
 * requantization (integer-only inference).
 *
 *   acc[n,o,y,x] = bias[o] + sum_{c,i,j} (in[n, g*Cg + c, y*sh - ph + i*dh, x*sw - pw + j*dw]
 *                                         - in_zp) * w[o, c, i, j]      (padding: in_zp)
 *   out          = clamp(requant(acc, mult[o], shift[o]) + out_zp, act_min, act_max)
 *
 * Bit-exact with ember.quant.fused.quantized_conv2d_ref. For each output pixel the receptive
 * field of one group is gathered into a column of Cg*KH*KW int8 (kernel scratch: 72 bytes for a
 * 3x3 conv over 8 channels), then every output channel of the group is one contiguous dot
 * product of that column with its weights (PyTorch's [O, Cg, KH, KW] layout, read in place
 * from flash) — q8_dot, with dual 16-bit MACs on a Cortex-M with the DSP extension. The input
 * zero point is folded into a per-channel constant, bias - in_zp * sum(w), computed once per call
 * (kernel scratch: 4 bytes per output channel).
 *
 * ember::quantized_conv2d_max_pool2d.out is the same followed by a max pool (no padding) of the
 * int32 accumulators, so the full-resolution output is never stored: a conv + ReLU + 2x2 pool
 * needs only the pooled activations in the planned arena.
 *
 * Args: [input i8 [N, C, H, W], weight i8 [O, C/groups, KH, KW], bias i32 [O],
 *        multiplier i32 [O], shift i32 [O], stride int[2], padding int[2], dilation int[2],
 *        groups, input_zero_point, output_zero_point, activation_min, activation_max,
 *        (max_pool2d only: pool_kernel int[2], pool_stride int[2],) out i8 [N, O, OH, OW], ret]
 */
#include "quantized/q8_util.h"

/* The convolution, then a max pool of pk x pk' windows with stride ps (1x1/1: none) on the int32
 * accumulators — requantization and clamp are monotonic, so max-then-requantize equals
 * requantize-then-max bit for bit, and the full-resolution conv output never exists. */
static em_status conv2d(em_kernel_ctx *ctx, em_evalue **args, em_tensor *out, const int64_t pk[2],
                        const int64_t ps[2]) {
  em_tensor *x = EM_ARG_TENSOR(args, 0), *w = EM_ARG_TENSOR(args, 1);
  em_tensor *bias = EM_ARG_TENSOR(args, 2), *mult = EM_ARG_TENSOR(args, 3);
  em_tensor *shift = EM_ARG_TENSOR(args, 4);
  EM_KCHECK(ctx, x && w && bias && mult && shift && out, "expected tensor arguments");
  int64_t st[2], pad[2], dil[2], groups, in_zp, out_zp, act_min, act_max;
  EM_KCHECK(ctx,
            q8_int_pair(args[5], st) && st[0] > 0 && st[1] > 0 && st[0] <= 4096 && st[1] <= 4096,
            "stride must be 1 or 2 ints in [1, 4096]");
  EM_KCHECK(ctx,
            q8_int_pair(args[6], pad) && pad[0] >= 0 && pad[1] >= 0 && pad[0] <= 4096 &&
                pad[1] <= 4096,
            "padding must be 1 or 2 ints in [0, 4096]");
  EM_KCHECK(ctx,
            q8_int_pair(args[7], dil) && dil[0] > 0 && dil[1] > 0 && dil[0] <= 4096 &&
                dil[1] <= 4096,
            "dilation must be 1 or 2 ints in [1, 4096]");
  EM_KCHECK(ctx, q8_int_in(args[8], 1, 1 << 16, &groups), "groups must be in [1, 65536]");
  EM_KCHECK(ctx,
            q8_int_in(args[9], -128, 127, &in_zp) && q8_int_in(args[10], -128, 127, &out_zp) &&
                q8_int_in(args[11], -128, 127, &act_min) &&
                q8_int_in(args[12], -128, 127, &act_max) && act_min <= act_max,
            "zero points and activation bounds must be ints in [-128, 127], min <= max");
  EM_KCHECK(ctx, x->dtype == EM_DTYPE_I8 && w->dtype == EM_DTYPE_I8 && out->dtype == EM_DTYPE_I8,
            "input, weight and out must be int8");
  EM_KCHECK(ctx,
            bias->dtype == EM_DTYPE_I32 && mult->dtype == EM_DTYPE_I32 &&
                shift->dtype == EM_DTYPE_I32,
            "bias, multiplier and shift must be int32");
  EM_KCHECK(ctx, x->dim == 4 && w->dim == 4, "4-D input and weight expected (NCHW, OIHW)");
  EM_KCHECK(ctx, em_tensor_is_contiguous_order(x) && em_tensor_is_contiguous_order(w),
            "contiguous input and weight expected");
  int64_t nb = x->sizes[0], c = x->sizes[1], h = x->sizes[2], wd = x->sizes[3];
  int64_t o = w->sizes[0], cg = w->sizes[1], kh = w->sizes[2], kw = w->sizes[3];
  EM_KCHECK(ctx, cg * groups == c && o % groups == 0,
            "input has %lld channels; weight [%lld, %lld, ..] with %lld groups does not fit",
            (long long)c, (long long)o, (long long)cg, (long long)groups);
  EM_KCHECK(ctx, bias->numel == o && mult->numel == o && shift->numel == o,
            "bias, multiplier and shift need %lld entries", (long long)o);
  int64_t eh = dil[0] * (kh - 1) + 1, ew = dil[1] * (kw - 1) + 1;
  EM_KCHECK(ctx, kh > 0 && kw > 0 && h + 2 * pad[0] >= eh && wd + 2 * pad[1] >= ew,
            "kernel %lldx%lld larger than the padded input %lldx%lld", (long long)kh, (long long)kw,
            (long long)(h + 2 * pad[0]), (long long)(wd + 2 * pad[1]));
  const int32_t *mu = mult->data, *sh = shift->data, *b = bias->data;
  for (int64_t j = 0; j < o; j++)
    EM_KCHECK(ctx, q8_valid_requant(mu[j], sh[j]), "channel %lld: bad multiplier/shift %d/%d",
              (long long)j, (int)mu[j], (int)sh[j]);
  int64_t oh = (h + 2 * pad[0] - eh) / st[0] + 1, ow = (wd + 2 * pad[1] - ew) / st[1] + 1;
  EM_KCHECK(ctx, pk[0] <= oh && pk[1] <= ow,
            "pool window %lldx%lld larger than the %lldx%lld conv output", (long long)pk[0],
            (long long)pk[1], (long long)oh, (long long)ow);
  int64_t qh = (oh - pk[0]) / ps[0] + 1, qw = (ow - pk[1]) / ps[1] + 1;
  int64_t sizes[4] = {nb, o, qh, qw};
  EM_KTRY(em_resize_out(ctx, out, sizes, 4));

  /* Sizes fit int32 from here on (32-bit index arithmetic is what a Cortex-M does fast). */
  EM_KCHECK(ctx, x->numel <= INT32_MAX && out->numel <= INT32_MAX && w->numel <= (1 << 24),
            "tensors too large for the int8 kernel (int32 indexing)");
  int32_t k = (int32_t)(cg * kh * kw), og = (int32_t)(o / groups), ng = (int32_t)groups;
  int32_t H = (int32_t)h, W = (int32_t)wd, KH = (int32_t)kh, KW = (int32_t)kw, CG = (int32_t)cg;
  int32_t QH = (int32_t)qh, QW = (int32_t)qw, O = (int32_t)o, C = (int32_t)c;
  int32_t SH = (int32_t)st[0], SW = (int32_t)st[1], PH = (int32_t)pad[0], PW = (int32_t)pad[1];
  int32_t DH = (int32_t)dil[0], DW = (int32_t)dil[1];
  int32_t PKH = (int32_t)pk[0], PKW = (int32_t)pk[1], PSH = (int32_t)ps[0], PSW = (int32_t)ps[1];
  /* Scratch: the column, per channel bias - in_zp * sum(w) (so the dot needs no zp), and the
   * running max of each channel's accumulator over the pool window. */
  int8_t *col = em_kernel_alloc_temp(ctx, (size_t)k, 4);
  int32_t *bz = em_kernel_alloc_temp(ctx, (size_t)o * sizeof(int32_t), 4);
  int32_t *mx = em_kernel_alloc_temp(ctx, (size_t)og * sizeof(int32_t), 4);
  EM_KCHECK(ctx, col && bz && mx, "no scratch memory for a %d-byte column and %d sums", (int)k,
            (int)O);
  const int8_t *xp = x->data, *wp = w->data;
  int8_t *yp = out->data;
  int32_t zp = (int32_t)in_zp, lo = (int32_t)act_min, hi = (int32_t)act_max, ozp = (int32_t)out_zp;
  for (int32_t oc = 0; oc < O; oc++) bz[oc] = b[oc] - zp * q8_sum(wp + oc * k, k);
  for (int32_t n = 0; n < (int32_t)nb; n++) {
    for (int32_t g = 0; g < ng; g++) {
      const int8_t *xg = xp + (n * C + g * CG) * H * W;
      const int8_t *wg = wp + g * og * k;
      for (int32_t py = 0; py < QH; py++) {
        for (int32_t px = 0; px < QW; px++) {
          for (int32_t oc = 0; oc < og; oc++) mx[oc] = INT32_MIN;
          for (int32_t pi = 0; pi < PKH; pi++) {
            for (int32_t pj = 0; pj < PKW; pj++) {
              /* Gather the receptive field of conv output (y, xo); padding holds the zero point
               * ((zp - zp) * w = 0). */
              int32_t y0 = (py * PSH + pi) * SH - PH, x0 = (px * PSW + pj) * SW - PW;
              int8_t *cp = col;
              for (int32_t ci = 0; ci < CG; ci++) {
                const int8_t *plane = xg + ci * H * W;
                for (int32_t i = 0; i < KH; i++) {
                  int32_t iy = y0 + i * DH;
                  if (iy < 0 || iy >= H) {
                    for (int32_t j = 0; j < KW; j++) *cp++ = (int8_t)zp;
                    continue;
                  }
                  const int8_t *row = plane + iy * W;
                  for (int32_t j = 0; j < KW; j++) {
                    int32_t ix = x0 + j * DW;
                    *cp++ = (ix >= 0 && ix < W) ? row[ix] : (int8_t)zp;
                  }
                }
              }
              const int8_t *wo = wg;
              for (int32_t oc = 0; oc < og; oc++, wo += k) {
                int32_t acc = bz[g * og + oc] + q8_dot(col, wo, k);
                if (acc > mx[oc]) mx[oc] = acc;
              }
            }
          }
          int8_t *yo = yp + (n * O + g * og) * QH * QW + py * QW + px;
          for (int32_t oc = 0; oc < og; oc++, yo += QH * QW) {
            int32_t v = q8_requantize(mx[oc], mu[g * og + oc], sh[g * og + oc]) + ozp;
            *yo = (int8_t)q8_clamp(v, lo, hi);
          }
        }
      }
    }
  }
  return EM_OK;
}

em_status em_quantized_conv2d_out(em_kernel_ctx *ctx, em_evalue **args);
em_status em_quantized_conv2d_out(em_kernel_ctx *ctx, em_evalue **args) {
  const int64_t one[2] = {1, 1};
  em_tensor *out = EM_ARG_TENSOR(args, 13);
  EM_KCHECK(ctx, out != NULL, "out must be a tensor");
  return conv2d(ctx, args, out, one, one);
}

em_status em_quantized_conv2d_max_pool2d_out(em_kernel_ctx *ctx, em_evalue **args);
em_status em_quantized_conv2d_max_pool2d_out(em_kernel_ctx *ctx, em_evalue **args) {
  int64_t pk[2], ps[2];
  EM_KCHECK(ctx, q8_int_pair(args[13], pk) && pk[0] > 0 && pk[1] > 0 && pk[0] <= 64 && pk[1] <= 64,
            "pool_kernel must be 1 or 2 ints in [1, 64]");
  EM_KCHECK(ctx, q8_int_pair(args[14], ps) && ps[0] > 0 && ps[1] > 0 && ps[0] <= 64 && ps[1] <= 64,
            "pool_stride must be 1 or 2 ints in [1, 64]");
  em_tensor *out = EM_ARG_TENSOR(args, 15);
  EM_KCHECK(ctx, out != NULL, "out must be a tensor");
  return conv2d(ctx, args, out, pk, ps);
}
