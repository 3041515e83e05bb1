/*
 * nn_pool.c — pooling: aten::max_pool2d_with_indices.out (+ its backward
 * .grad_input), avg_pool2d.out, _adaptive_avg_pool2d.out,
 * adaptive_max_pool2d.out and the 3-D max_pool3d_with_indices.out.
 *
 * 2-D inputs are [C, H, W] or [N, C, H, W], 3-D ones [C, D, H, W] or
 * [N, C, D, H, W], with any strides (channels-last included); a plane (or
 * volume) is one (n, c). Window rules follow ATen's CPU kernels: output sizes
 * from pooling_output_shape (ceil_mode drops a window that would start in the
 * right padding), max pooling propagates NaN (a later NaN replaces an earlier
 * one) and returns the flat index of the winner within its plane or volume
 * ((d * H + h) * W + w; the first valid position when every value is -inf),
 * adaptive windows span [floor(o * I / O), ceil((o + 1) * I / O)), average
 * pooling divides by the padded window (count_include_pad), the clipped one,
 * or divisor_override. (ATen's channels-last 3-D max pool drops the depth term
 * of that first-position index for the channels past its last SIMD vector;
 * the contiguous kernel's rule is used for every layout here.)
 */
#include "portable/nn_util.h"

typedef struct pool_geom {
  int64_t n, c, ih, iw, oh, ow;
  int64_t k[2], s[2], p[2], d[2];
  int64_t is[4], os[4]; /* strides (n, c, h, w); n stride 0 for 3-D tensors */
} pool_geom;

static int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

/* ATen's pooling_output_shape. */
static int64_t pool_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  int64_t o = floor_div(in + 2 * p - d * (k - 1) - 1 + (ceil_mode ? s - 1 : 0), s) + 1;
  if (ceil_mode && (o - 1) * s >= in + p) o--;
  return o;
}

static void strides4(const em_tensor *t, int64_t *st) {
  int32_t off = 4 - t->dim;
  st[0] = 0;
  for (int32_t i = 0; i < t->dim; i++) st[off + i] = t->strides[i];
}

/*
 * One max-pooling window of one plane (2-D: lo[0] = 0, hi[0] = 1) or volume: the taps
 * lo[i], lo[i] + st[i], ... below hi[i] of the input whose (0, 0, 0) element is xb, with
 * element strides xs[3] (d, h, w) and a plane of ih x iw. Stores the maximum at out index
 * oi and the flat index (d * ih + h) * iw + w of the winner at *ip, as ATen's CPU loop:
 * a larger value or any NaN replaces the current one, starting from -inf (the dtype's
 * lowest integer) at the window's first tap, which is what an empty window returns.
 */
static void window_max(const em_tensor *x, int64_t xb, const int64_t *xs, const int64_t *lo,
                       const int64_t *hi, const int64_t *st, int64_t ih, int64_t iw, em_tensor *out,
                       int64_t oi, int64_t *ip) {
  int dt = x->dtype;
  bool fl = em_dtype_is_float(dt);
  /* Unsigned: an empty window's first tap may lie past the input (its index is not read). */
  int64_t best = (int64_t)(((uint64_t)lo[0] * (uint64_t)ih + (uint64_t)lo[1]) * (uint64_t)iw +
                           (uint64_t)lo[2]);
  double bf = -INFINITY;
  int64_t bi = dt == EM_DTYPE_U8    ? 0
               : dt == EM_DTYPE_I8  ? INT8_MIN
               : dt == EM_DTYPE_I16 ? INT16_MIN
               : dt == EM_DTYPE_I32 ? INT32_MIN
                                    : INT64_MIN;
  for (int64_t d = lo[0]; d < hi[0]; d += st[0])
    for (int64_t h = lo[1]; h < hi[1]; h += st[1])
      for (int64_t w = lo[2]; w < hi[2]; w += st[2]) {
        int64_t xi = xb + d * xs[0] + h * xs[1] + w * xs[2];
        if (fl) {
          double v = em_load_f64(x->data, dt, xi);
          if (v > bf || isnan(v)) {
            bf = v;
            best = (d * ih + h) * iw + w;
          }
        } else {
          int64_t v = em_load_i64(x->data, dt, xi);
          if (v > bi) {
            bi = v;
            best = (d * ih + h) * iw + w;
          }
        }
      }
  if (fl)
    em_store_f64(out->data, dt, oi, bf);
  else
    em_store_i64(out->data, dt, oi, bi);
  *ip = best;
}

/* Reads input sizes (3-D or 4-D) into g and checks the rank. */
static em_status pool_input(em_kernel_ctx *ctx, em_tensor *x, pool_geom *g) {
  NN_CHECK_TENSOR(ctx, x, "self");
  EM_KCHECK(ctx, x->dim == 3 || x->dim == 4, "expected 3-D or 4-D input, got %d-D", (int)(x->dim));
  int32_t off = x->dim - 3;
  g->n = off ? x->sizes[0] : 1;
  g->c = x->sizes[off];
  g->ih = x->sizes[off + 1];
  g->iw = x->sizes[off + 2];
  EM_KCHECK(ctx, g->ih > 0 && g->iw > 0, "input spatial dims must be non-empty");
  EM_KCHECK(ctx, g->ih <= ((int64_t)1 << 40) && g->iw <= ((int64_t)1 << 40),
            "input spatial dims larger than 2^40");
  strides4(x, g->is);
  return EM_OK;
}

/* Reads kernel/stride/padding/dilation lists and computes the output size. */
static em_status pool_window(em_kernel_ctx *ctx, em_evalue **args, int ia_k, int ia_s, int ia_p,
                             int ia_d, bool ceil_mode, pool_geom *g) {
  int64_t zero[2] = {0, 0}, one[2] = {1, 1};
  EM_KCHECK(ctx, nn_int_list(args[ia_k], 2, NULL, g->k), "kernel_size must have 1 or 2 ints");
  EM_KCHECK(ctx, nn_int_list(args[ia_s], 2, g->k, g->s), "stride must have 0, 1 or 2 ints");
  EM_KCHECK(ctx, nn_int_list(args[ia_p], 2, zero, g->p), "padding must have 1 or 2 ints");
  if (ia_d >= 0)
    EM_KCHECK(ctx, nn_int_list(args[ia_d], 2, one, g->d), "dilation must have 1 or 2 ints");
  else
    g->d[0] = g->d[1] = 1;
  for (int i = 0; i < 2; i++) {
    EM_KCHECK(ctx, g->k[i] > 0 && g->s[i] > 0 && g->d[i] > 0,
              "kernel size, stride and dilation must be positive");
    /* Bounded so the output-size arithmetic cannot overflow int64. */
    EM_KCHECK(ctx, g->k[i] <= (1 << 24) && g->s[i] <= (1 << 24) && g->d[i] <= (1 << 24),
              "kernel size, stride or dilation larger than 2^24");
    EM_KCHECK(ctx, g->p[i] >= 0 && g->p[i] <= g->k[i] / 2,
              "pad should be at most half of the kernel size");
  }
  g->oh = pool_out(g->ih, g->k[0], g->s[0], g->p[0], g->d[0], ceil_mode);
  g->ow = pool_out(g->iw, g->k[1], g->s[1], g->p[1], g->d[1], ceil_mode);
  EM_KCHECK(ctx, g->oh >= 1 && g->ow >= 1, "output size %lldx%lld is too small", (long long)g->oh,
            (long long)g->ow);
  return EM_OK;
}

static em_status resize_like_input(em_kernel_ctx *ctx, em_tensor *x, em_tensor *out, int64_t oh,
                                   int64_t ow) {
  EM_KCHECK(ctx, out && out->dim == x->dim, "out must be a %d-D tensor", (int)(x->dim));
  int64_t sz[4];
  for (int32_t i = 0; i < x->dim; i++) sz[i] = x->sizes[i];
  sz[x->dim - 2] = oh;
  sz[x->dim - 1] = ow;
  return em_resize_out(ctx, out, sz, x->dim);
}

/*
 * aten::max_pool2d_with_indices.out(Tensor self, int[2] kernel_size, int[2] stride=[],
 *   int[2] padding=0, int[2] dilation=1, bool ceil_mode=False, *, out, indices)
 */
em_status em_max_pool2d_with_indices_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *x = EM_ARG_TENSOR(args, 0), *out = EM_ARG_TENSOR(args, 6),
            *idx = EM_ARG_TENSOR(args, 7);
  pool_geom g;
  bool ceil_mode;
  EM_KTRY(pool_input(ctx, x, &g));
  EM_KCHECK(ctx, em_arg_bool(args[5], &ceil_mode), "ceil_mode must be a bool");
  EM_KTRY(pool_window(ctx, args, 1, 2, 3, 4, ceil_mode, &g));
  EM_KCHECK(ctx, out && idx, "out and indices must be tensors");
  EM_KCHECK(ctx, out->dtype == x->dtype, "out dtype must match input");
  EM_KCHECK(ctx, idx->dtype == EM_DTYPE_I64, "indices must be int64");
  EM_KCHECK(ctx, (EM_DT_REALS & EM_DTYPE_BIT(x->dtype)) != 0, "unsupported dtype %s",
            em_dtype_name(x->dtype));
  EM_KTRY(resize_like_input(ctx, x, out, g.oh, g.ow));
  EM_KTRY(resize_like_input(ctx, x, idx, g.oh, g.ow));
  int64_t is2[4];
  strides4(out, g.os);
  strides4(idx, is2);
  int64_t *ip = idx->data;
  int64_t xs[3] = {0, g.is[2], g.is[3]}, st[3] = {1, g.d[0], g.d[1]};
  for (int64_t n = 0; n < g.n; n++)
    for (int64_t c = 0; c < g.c; c++) {
      int64_t xb = n * g.is[0] + c * g.is[1];
      for (int64_t oh = 0; oh < g.oh; oh++) {
        int64_t lo[3] = {0, oh * g.s[0] - g.p[0], 0}, hi[3] = {1, 0, 0};
        hi[1] = lo[1] + (g.k[0] - 1) * g.d[0] + 1;
        if (hi[1] > g.ih) hi[1] = g.ih;
        while (lo[1] < 0) lo[1] += g.d[0];
        for (int64_t ow = 0; ow < g.ow; ow++) {
          lo[2] = ow * g.s[1] - g.p[1];
          hi[2] = lo[2] + (g.k[1] - 1) * g.d[1] + 1;
          if (hi[2] > g.iw) hi[2] = g.iw;
          while (lo[2] < 0) lo[2] += g.d[1];
          window_max(x, xb, xs, lo, hi, st, g.ih, g.iw, out,
                     n * g.os[0] + c * g.os[1] + oh * g.os[2] + ow * g.os[3],
                     &ip[n * is2[0] + c * is2[1] + oh * is2[2] + ow * is2[3]]);
        }
      }
    }
  return EM_OK;
}

/*
 * aten::max_pool2d_with_indices_backward.grad_input(Tensor grad_output, Tensor self,
 *   int[2] kernel_size, int[2] stride, int[2] padding, int[2] dilation, bool ceil_mode,
 *   Tensor indices, *, Tensor(a!) grad_input)
 */
em_status em_max_pool2d_with_indices_backward_grad_input(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *go = EM_ARG_TENSOR(args, 0), *x = EM_ARG_TENSOR(args, 1),
            *idx = EM_ARG_TENSOR(args, 7), *gi = EM_ARG_TENSOR(args, 8);
  pool_geom g;
  bool ceil_mode;
  EM_KTRY(pool_input(ctx, x, &g));
  EM_KCHECK(ctx, em_arg_bool(args[6], &ceil_mode), "ceil_mode must be a bool");
  EM_KTRY(pool_window(ctx, args, 2, 3, 4, 5, ceil_mode, &g));
  NN_CHECK_TENSOR(ctx, go, "grad_output");
  NN_CHECK_TENSOR(ctx, idx, "indices");
  EM_KCHECK(ctx, gi, "grad_input must be a tensor");
  EM_KCHECK(ctx, em_dtype_is_float(x->dtype) && go->dtype == x->dtype && gi->dtype == x->dtype,
            "grad_output, self and grad_input must share a float dtype");
  EM_KCHECK(ctx, idx->dtype == EM_DTYPE_I64, "indices must be int64");
  EM_KCHECK(ctx, go->dim == x->dim && idx->dim == x->dim, "grad_output/indices rank mismatch");
  for (int32_t i = 0; i < x->dim; i++) {
    int64_t want = i == x->dim - 2 ? g.oh : i == x->dim - 1 ? g.ow : x->sizes[i];
    EM_KCHECK(ctx, go->sizes[i] == want && idx->sizes[i] == want,
              "grad_output/indices shape does not match the pooling output");
  }
  EM_KCHECK(ctx, gi->dim == x->dim, "grad_input must have the input's rank");
  EM_KTRY(em_resize_out(ctx, gi, x->sizes, x->dim));
  int64_t gs[4], ss[4], xs[4];
  strides4(go, gs);
  strides4(idx, xs);
  strides4(gi, ss);
  for (int64_t i = 0; i < gi->numel; i++)
    em_store_f64(gi->data, gi->dtype, em_strided_offset(gi, i), 0.0);
  const int64_t *ip = idx->data;
  int64_t plane = g.ih * g.iw;
  for (int64_t n = 0; n < g.n; n++)
    for (int64_t c = 0; c < g.c; c++)
      for (int64_t oh = 0; oh < g.oh; oh++)
        for (int64_t ow = 0; ow < g.ow; ow++) {
          int64_t k = ip[n * xs[0] + c * xs[1] + oh * xs[2] + ow * xs[3]];
          EM_KCHECK(ctx, k >= 0 && k < plane, "index %lld out of range", (long long)k);
          int64_t t = n * ss[0] + c * ss[1] + (k / g.iw) * ss[2] + (k % g.iw) * ss[3];
          double v =
              em_load_f64(go->data, go->dtype, n * gs[0] + c * gs[1] + oh * gs[2] + ow * gs[3]);
          em_store_f64(gi->data, gi->dtype, t, em_load_f64(gi->data, gi->dtype, t) + v);
        }
  return EM_OK;
}

/*
 * aten::avg_pool2d.out(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0,
 *   bool ceil_mode=False, bool count_include_pad=True, int? divisor_override=None, *, out)
 */
em_status em_avg_pool2d_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *x = EM_ARG_TENSOR(args, 0), *out = EM_ARG_TENSOR(args, 7);
  pool_geom g;
  bool ceil_mode, include_pad;
  int64_t divisor = 0;
  EM_KTRY(pool_input(ctx, x, &g));
  EM_KCHECK(ctx, em_arg_bool(args[4], &ceil_mode), "ceil_mode must be a bool");
  EM_KCHECK(ctx, em_arg_bool(args[5], &include_pad), "count_include_pad must be a bool");
  EM_KCHECK(ctx, nn_opt_int(args[6], 0, &divisor), "divisor_override must be an int or None");
  EM_KCHECK(ctx, EM_ARG_IS_NONE(args, 6) || divisor != 0, "divisor must be not zero");
  EM_KTRY(pool_window(ctx, args, 1, 2, 3, -1, ceil_mode, &g));
  EM_KCHECK(ctx, out && out->dtype == x->dtype, "out must be a tensor of the input dtype");
  EM_KCHECK(ctx, (EM_DT_REALS & EM_DTYPE_BIT(x->dtype)) != 0, "unsupported dtype %s",
            em_dtype_name(x->dtype));
  EM_KTRY(resize_like_input(ctx, x, out, g.oh, g.ow));
  strides4(out, g.os);
  int dt = x->dtype;
  bool fl = em_dtype_is_float(dt);
  for (int64_t n = 0; n < g.n; n++)
    for (int64_t c = 0; c < g.c; c++)
      for (int64_t oh = 0; oh < g.oh; oh++)
        for (int64_t ow = 0; ow < g.ow; ow++) {
          int64_t h0 = oh * g.s[0] - g.p[0], w0 = ow * g.s[1] - g.p[1];
          int64_t h1 = h0 + g.k[0], w1 = w0 + g.k[1];
          if (h1 > g.ih + g.p[0]) h1 = g.ih + g.p[0];
          if (w1 > g.iw + g.p[1]) w1 = g.iw + g.p[1];
          int64_t pool_size = (h1 - h0) * (w1 - w0);
          if (h0 < 0) h0 = 0;
          if (w0 < 0) w0 = 0;
          if (h1 > g.ih) h1 = g.ih;
          if (w1 > g.iw) w1 = g.iw;
          int64_t oi = n * g.os[0] + c * g.os[1] + oh * g.os[2] + ow * g.os[3];
          if (h0 >= h1 || w0 >= w1) {
            em_store_f64(out->data, dt, oi, 0.0);
            continue;
          }
          int64_t div = divisor ? divisor : include_pad ? pool_size : (h1 - h0) * (w1 - w0);
          double sf = 0.0;
          int64_t si = 0;
          for (int64_t h = h0; h < h1; h++)
            for (int64_t w = w0; w < w1; w++) {
              int64_t xi = n * g.is[0] + c * g.is[1] + h * g.is[2] + w * g.is[3];
              if (fl)
                sf += em_load_f64(x->data, dt, xi);
              else
                si += em_load_i64(x->data, dt, xi);
            }
          if (fl)
            em_store_f64(out->data, dt, oi, sf / (double)div);
          else
            em_store_i64(out->data, dt, oi, si / div);
        }
  return EM_OK;
}

/* aten::_adaptive_avg_pool2d.out(Tensor self, SymInt[2] output_size, *, Tensor(a!) out) */
em_status em__adaptive_avg_pool2d_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *x = EM_ARG_TENSOR(args, 0), *out = EM_ARG_TENSOR(args, 2);
  pool_geom g;
  EM_KTRY(pool_input(ctx, x, &g));
  int64_t osz[2];
  EM_KCHECK(ctx, nn_int_list(args[1], 2, NULL, osz), "output_size must have 1 or 2 ints");
  EM_KCHECK(ctx, osz[0] >= 0 && osz[1] >= 0, "output_size must be non-negative");
  EM_KCHECK(ctx, out && out->dtype == x->dtype, "out must be a tensor of the input dtype");
  EM_KCHECK(ctx, em_dtype_is_float(x->dtype), "unsupported dtype %s", em_dtype_name(x->dtype));
  EM_KTRY(resize_like_input(ctx, x, out, osz[0], osz[1]));
  strides4(out, g.os);
  int dt = x->dtype;
  for (int64_t n = 0; n < g.n; n++)
    for (int64_t c = 0; c < g.c; c++)
      for (int64_t oh = 0; oh < osz[0]; oh++) {
        int64_t h0 = oh * g.ih / osz[0], h1 = ((oh + 1) * g.ih + osz[0] - 1) / osz[0];
        for (int64_t ow = 0; ow < osz[1]; ow++) {
          int64_t w0 = ow * g.iw / osz[1], w1 = ((ow + 1) * g.iw + osz[1] - 1) / osz[1];
          double s = 0.0;
          for (int64_t h = h0; h < h1; h++)
            for (int64_t w = w0; w < w1; w++)
              s += em_load_f64(x->data, dt, n * g.is[0] + c * g.is[1] + h * g.is[2] + w * g.is[3]);
          em_store_f64(out->data, dt, n * g.os[0] + c * g.os[1] + oh * g.os[2] + ow * g.os[3],
                       s / (double)((h1 - h0) * (w1 - w0)));
        }
      }
  return EM_OK;
}

/* ATen's adaptive window: [floor(o * in / osz), ceil((o + 1) * in / osz)). */
static void adaptive_range(int64_t o, int64_t in, int64_t osz, int64_t *lo, int64_t *hi) {
  *lo = o * in / osz;
  *hi = ((o + 1) * in + osz - 1) / osz;
}

/*
 * aten::adaptive_max_pool2d.out(Tensor self, int[2] output_size, *, Tensor(a!) out,
 *   Tensor(b!) indices)
 */
em_status em_adaptive_max_pool2d_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *x = EM_ARG_TENSOR(args, 0), *out = EM_ARG_TENSOR(args, 2),
            *idx = EM_ARG_TENSOR(args, 3);
  pool_geom g;
  EM_KTRY(pool_input(ctx, x, &g));
  EM_KCHECK(ctx, g.c > 0, "expected input to have non-zero size for non-batch dimensions");
  int64_t osz[2];
  EM_KCHECK(ctx, nn_int_list(args[1], 2, NULL, osz), "output_size must have 1 or 2 ints");
  EM_KCHECK(ctx, osz[0] >= 0 && osz[1] >= 0, "output_size must be non-negative");
  /* (o + 1) * in must not overflow (in <= 2^40). */
  EM_KCHECK(ctx, osz[0] <= ((int64_t)1 << 22) && osz[1] <= ((int64_t)1 << 22),
            "output_size larger than 2^22");
  EM_KCHECK(ctx, out && idx, "out and indices must be tensors");
  EM_KCHECK(ctx, em_dtype_is_float(x->dtype), "unsupported dtype %s", em_dtype_name(x->dtype));
  EM_KCHECK(ctx, out->dtype == x->dtype, "out dtype must match input");
  EM_KCHECK(ctx, idx->dtype == EM_DTYPE_I64, "indices must be int64");
  EM_KTRY(resize_like_input(ctx, x, out, osz[0], osz[1]));
  EM_KTRY(resize_like_input(ctx, x, idx, osz[0], osz[1]));
  int64_t is2[4];
  strides4(out, g.os);
  strides4(idx, is2);
  int64_t *ip = idx->data;
  int64_t xs[3] = {0, g.is[2], g.is[3]}, st[3] = {1, 1, 1};
  for (int64_t n = 0; n < g.n; n++)
    for (int64_t c = 0; c < g.c; c++) {
      int64_t xb = n * g.is[0] + c * g.is[1];
      for (int64_t oh = 0; oh < osz[0]; oh++) {
        int64_t lo[3] = {0, 0, 0}, hi[3] = {1, 0, 0};
        adaptive_range(oh, g.ih, osz[0], &lo[1], &hi[1]);
        for (int64_t ow = 0; ow < osz[1]; ow++) {
          adaptive_range(ow, g.iw, osz[1], &lo[2], &hi[2]);
          window_max(x, xb, xs, lo, hi, st, g.ih, g.iw, out,
                     n * g.os[0] + c * g.os[1] + oh * g.os[2] + ow * g.os[3],
                     &ip[n * is2[0] + c * is2[1] + oh * is2[2] + ow * is2[3]]);
        }
      }
    }
  return EM_OK;
}

/* 3-D pooling geometry: sizes and window per spatial dim (d, h, w). */
typedef struct pool3_geom {
  int64_t n, c, in[3], out[3];
  int64_t k[3], s[3], p[3], d[3];
  int64_t is[5]; /* input strides (n, c, d, h, w); n stride 0 for 4-D tensors */
} pool3_geom;

static void strides5(const em_tensor *t, int64_t *st) {
  int32_t off = 5 - t->dim;
  st[0] = 0;
  for (int32_t i = 0; i < t->dim; i++) st[off + i] = t->strides[i];
}

/*
 * aten::max_pool3d_with_indices.out(Tensor self, int[3] kernel_size, int[3] stride=[],
 *   int[3] padding=0, int[3] dilation=1, bool ceil_mode=False, *, Tensor(a!) out,
 *   Tensor(b!) indices)
 */
em_status em_max_pool3d_with_indices_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *x = EM_ARG_TENSOR(args, 0), *out = EM_ARG_TENSOR(args, 6),
            *idx = EM_ARG_TENSOR(args, 7);
  pool3_geom g;
  bool ceil_mode;
  NN_CHECK_TENSOR(ctx, x, "self");
  EM_KCHECK(ctx, x->dim == 4 || x->dim == 5, "expected 4-D or 5-D input, got %d-D", (int)(x->dim));
  int32_t off = x->dim - 4;
  g.n = off ? x->sizes[0] : 1;
  g.c = x->sizes[off];
  EM_KCHECK(ctx, g.c > 0, "expected input's non-batch dimensions to have positive length");
  for (int i = 0; i < 3; i++) {
    g.in[i] = x->sizes[off + 1 + i];
    EM_KCHECK(ctx, g.in[i] > 0, "expected input's non-batch dimensions to have positive length");
    EM_KCHECK(ctx, g.in[i] <= ((int64_t)1 << 40), "input spatial dims larger than 2^40");
  }
  /* Flat indices (d * H + h) * W + w must fit int64 (they do for any tensor with data). */
  EM_KCHECK(ctx, g.in[1] <= (((int64_t)1 << 62) / g.in[0]) / g.in[2],
            "input volume larger than 2^62");
  strides5(x, g.is);
  EM_KCHECK(ctx, em_arg_bool(args[5], &ceil_mode), "ceil_mode must be a bool");
  int64_t zero[3] = {0, 0, 0}, one[3] = {1, 1, 1};
  EM_KCHECK(ctx, nn_int_list(args[1], 3, NULL, g.k), "kernel_size must have 1 or 3 ints");
  EM_KCHECK(ctx, nn_int_list(args[2], 3, g.k, g.s), "stride must have 0, 1 or 3 ints");
  EM_KCHECK(ctx, nn_int_list(args[3], 3, zero, g.p), "padding must have 1 or 3 ints");
  EM_KCHECK(ctx, nn_int_list(args[4], 3, one, g.d), "dilation must have 1 or 3 ints");
  for (int i = 0; i < 3; i++) {
    EM_KCHECK(ctx, g.k[i] > 0 && g.s[i] > 0 && g.d[i] > 0,
              "kernel size, stride and dilation must be positive");
    EM_KCHECK(ctx, g.k[i] <= (1 << 24) && g.s[i] <= (1 << 24) && g.d[i] <= (1 << 24),
              "kernel size, stride or dilation larger than 2^24");
    EM_KCHECK(ctx, g.p[i] >= 0 && g.p[i] <= g.k[i] / 2,
              "pad should be at most half of the kernel size");
    g.out[i] = pool_out(g.in[i], g.k[i], g.s[i], g.p[i], g.d[i], ceil_mode);
    EM_KCHECK(ctx, g.out[i] >= 1, "output size %lldx%lldx%lld is too small",
              (long long)pool_out(g.in[0], g.k[0], g.s[0], g.p[0], g.d[0], ceil_mode),
              (long long)pool_out(g.in[1], g.k[1], g.s[1], g.p[1], g.d[1], ceil_mode),
              (long long)pool_out(g.in[2], g.k[2], g.s[2], g.p[2], g.d[2], ceil_mode));
  }
  EM_KCHECK(ctx, out && idx, "out and indices must be tensors");
  EM_KCHECK(ctx, (EM_DT_REALS & EM_DTYPE_BIT(x->dtype)) != 0, "unsupported dtype %s",
            em_dtype_name(x->dtype));
  EM_KCHECK(ctx, out->dtype == x->dtype, "out dtype must match input");
  EM_KCHECK(ctx, idx->dtype == EM_DTYPE_I64, "indices must be int64");
  EM_KCHECK(ctx, out->dim == x->dim && idx->dim == x->dim, "out and indices must be %d-D",
            (int)(x->dim));
  int64_t sz[5];
  for (int32_t i = 0; i < x->dim; i++) sz[i] = i <= off ? x->sizes[i] : g.out[i - off - 1];
  EM_KTRY(em_resize_out(ctx, out, sz, x->dim));
  EM_KTRY(em_resize_out(ctx, idx, sz, x->dim));
  int64_t os[5], js[5];
  strides5(out, os);
  strides5(idx, js);
  int64_t *ip = idx->data;
  for (int64_t n = 0; n < g.n; n++)
    for (int64_t c = 0; c < g.c; c++) {
      int64_t xb = n * g.is[0] + c * g.is[1];
      for (int64_t od = 0; od < g.out[0]; od++)
        for (int64_t oh = 0; oh < g.out[1]; oh++)
          for (int64_t ow = 0; ow < g.out[2]; ow++) {
            int64_t o[3] = {od, oh, ow}, lo[3], hi[3];
            for (int i = 0; i < 3; i++) {
              lo[i] = o[i] * g.s[i] - g.p[i];
              hi[i] = lo[i] + (g.k[i] - 1) * g.d[i] + 1;
              if (hi[i] > g.in[i]) hi[i] = g.in[i];
              if (lo[i] < 0) lo[i] += (-lo[i] + g.d[i] - 1) / g.d[i] * g.d[i];
            }
            window_max(x, xb, g.is + 2, lo, hi, g.d, g.in[1], g.in[2], out,
                       n * os[0] + c * os[1] + od * os[2] + oh * os[3] + ow * os[4],
                       &ip[n * js[0] + c * js[1] + od * js[2] + oh * js[3] + ow * js[4]]);
          }
    }
  return EM_OK;
}
