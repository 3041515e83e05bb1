/*
 * quantized_pool.c — int8 2-D pooling (NCHW) on the input's own scale and zero point
 * (integer-only inference):
 *
 *   ember::quantized_max_pool2d.out: out = max over the window (padding never wins).
 *   ember::quantized_avg_pool2d.out: out = zp + round((sum over the window of (in - zp)) / d),
 *     d = KH*KW (count_include_pad: padding counts as real zeros, i.e. zp) or the number of
 *     in-bounds elements; rounding half away from zero. Integer division only.
 *
 * Output size floor((H + 2p - K) / s) + 1 (no ceil mode, no dilation; the lowering rejects
 * them). Bit-exact with ember.quant.fused.quantized_max_pool2d_ref / quantized_avg_pool2d_ref.
 *
 * Args (max): [input i8 [N, C, H, W], kernel_size int[2], stride int[2], padding int[2], out,
 *              ret]
 * Args (avg): [input, kernel_size, stride, padding, count_include_pad (bool), zero_point, out,
 *              ret]
 */
#include "quantized/q8_util.h"

typedef struct q8_pool {
  int64_t nc, h, w, oh, ow, k[2], s[2], p[2];
} q8_pool;

static em_status pool_geom(em_kernel_ctx *ctx, em_evalue **args, const em_tensor *x, em_tensor *out,
                           q8_pool *g) {
  EM_KCHECK(ctx, x && out, "expected tensor arguments");
  EM_KCHECK(ctx, x->dtype == EM_DTYPE_I8 && out->dtype == EM_DTYPE_I8,
            "input and out must be int8");
  EM_KCHECK(ctx, x->dim == 4 && em_tensor_is_contiguous_order(x),
            "contiguous 4-D input expected (NCHW)");
  EM_KCHECK(ctx,
            q8_int_pair(args[1], g->k) && g->k[0] > 0 && g->k[1] > 0 && g->k[0] <= 4096 &&
                g->k[1] <= 4096,
            "kernel_size must be 1 or 2 ints in [1, 4096]");
  if (args[2]->tag == EM_TAG_LIST_INT && args[2]->u.list.n == 0) {
    g->s[0] = g->k[0], g->s[1] = g->k[1]; /* stride=[] means stride = kernel_size */
  } else {
    EM_KCHECK(ctx,
              q8_int_pair(args[2], g->s) && g->s[0] > 0 && g->s[1] > 0 && g->s[0] <= 4096 &&
                  g->s[1] <= 4096,
              "stride must be 1 or 2 ints in [1, 4096]");
  }
  EM_KCHECK(ctx,
            q8_int_pair(args[3], g->p) && g->p[0] >= 0 && g->p[1] >= 0 && 2 * g->p[0] <= g->k[0] &&
                2 * g->p[1] <= g->k[1],
            "padding must be 1 or 2 ints in [0, kernel_size / 2]");
  g->nc = x->sizes[0] * x->sizes[1], g->h = x->sizes[2], g->w = x->sizes[3];
  EM_KCHECK(ctx, g->h + 2 * g->p[0] >= g->k[0] && g->w + 2 * g->p[1] >= g->k[1],
            "pooling window larger than the padded input");
  g->oh = (g->h + 2 * g->p[0] - g->k[0]) / g->s[0] + 1;
  g->ow = (g->w + 2 * g->p[1] - g->k[1]) / g->s[1] + 1;
  int64_t sizes[4] = {x->sizes[0], x->sizes[1], g->oh, g->ow};
  return em_resize_out(ctx, out, sizes, 4);
}

em_status em_quantized_max_pool2d_out(em_kernel_ctx *ctx, em_evalue **args);
em_status em_quantized_max_pool2d_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *x = EM_ARG_TENSOR(args, 0), *out = EM_ARG_TENSOR(args, 4);
  q8_pool g;
  EM_KTRY(pool_geom(ctx, args, x, out, &g));
  EM_KCHECK(ctx, x->numel <= INT32_MAX, "input too large for the int8 kernel (int32 indexing)");
  const int8_t *xp = x->data;
  int8_t *yp = out->data;
  int32_t H = (int32_t)g.h, W = (int32_t)g.w, KH = (int32_t)g.k[0], KW = (int32_t)g.k[1];
  int32_t SH = (int32_t)g.s[0], SW = (int32_t)g.s[1], PH = (int32_t)g.p[0], PW = (int32_t)g.p[1];
  for (int32_t c = 0; c < (int32_t)g.nc; c++) {
    const int8_t *plane = xp + c * H * W;
    for (int32_t y = 0; y < (int32_t)g.oh; y++) {
      int32_t y0 = y * SH - PH, i0 = y0 < 0 ? -y0 : 0, i1 = y0 + KH > H ? H - y0 : KH;
      for (int32_t xo = 0; xo < (int32_t)g.ow; xo++) {
        int32_t x0 = xo * SW - PW, j0 = x0 < 0 ? -x0 : 0, j1 = x0 + KW > W ? W - x0 : KW;
        int32_t best = -128;
        for (int32_t i = i0; i < i1; i++) {
          const int8_t *row = plane + (y0 + i) * W + x0;
          for (int32_t j = j0; j < j1; j++)
            if (row[j] > best) best = row[j];
        }
        *yp++ = (int8_t)best;
      }
    }
  }
  return EM_OK;
}

em_status em_quantized_avg_pool2d_out(em_kernel_ctx *ctx, em_evalue **args);
em_status em_quantized_avg_pool2d_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *x = EM_ARG_TENSOR(args, 0), *out = EM_ARG_TENSOR(args, 6);
  bool include_pad;
  int64_t zp;
  EM_KCHECK(ctx, em_arg_bool(args[4], &include_pad), "count_include_pad must be a bool");
  EM_KCHECK(ctx, q8_int_in(args[5], -128, 127, &zp), "zero_point must be an int in [-128, 127]");
  q8_pool g;
  EM_KTRY(pool_geom(ctx, args, x, out, &g));
  const int8_t *xp = x->data;
  int8_t *yp = out->data;
  for (int64_t c = 0; c < g.nc; c++) {
    const int8_t *plane = xp + c * g.h * g.w;
    for (int64_t y = 0; y < g.oh; y++) {
      for (int64_t xo = 0; xo < g.ow; xo++) {
        int64_t sum = 0, cnt = 0;
        for (int64_t i = 0; i < g.k[0]; i++) {
          int64_t iy = y * g.s[0] - g.p[0] + i;
          if (iy < 0 || iy >= g.h) continue;
          for (int64_t j = 0; j < g.k[1]; j++) {
            int64_t ix = xo * g.s[1] - g.p[1] + j;
            if (ix < 0 || ix >= g.w) continue;
            sum += plane[iy * g.w + ix] - zp;
            cnt++;
          }
        }
        int64_t d = include_pad ? g.k[0] * g.k[1] : cnt;
        int64_t mag = ((sum < 0 ? -sum : sum) * 2 + d) / (2 * d); /* round half away from 0 */
        int64_t v = zp + (sum < 0 ? -mag : mag);
        *yp++ = (int8_t)q8_clamp((int32_t)v, -128, 127);
      }
    }
  }
  return EM_OK;
}
