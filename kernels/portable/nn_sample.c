/*
 * nn_sample.c — resampling: aten::upsample_nearest2d.vec_out,
 * upsample_bilinear2d.vec_out, grid_sampler_2d.out, pixel_shuffle.out and
 * pixel_unshuffle.out.
 *
 * Coordinate rules are ATen's (aten/src/ATen/native/UpSample.h,
 * GridSampler.h): nearest uses floor(dst * scale) in float with scale =
 * 1/scale_factor when factors are given, else in/out; bilinear maps
 * dst -> (dst + 0.5) * scale - 0.5 clamped at 0 (or dst * (in-1)/(out-1)
 * with align_corners) and interpolates in the op-math type (float for
 * f32/f16/bf16, double for f64). Inputs are [N, C, H, W] with any strides.
 */
#include "portable/nn_util.h"

/* Output size of one dim from output_size or scale_factors (exactly one given). */
static em_status up_sizes(em_kernel_ctx *ctx, em_evalue *osz_v, em_evalue *sc_v, const em_tensor *x,
                          int64_t *osz, double *scales) {
  bool has_size = osz_v->tag != EM_TAG_NONE, has_scale = sc_v->tag != EM_TAG_NONE;
  EM_KCHECK(ctx, has_size != has_scale, "exactly one of output_size and scale_factors is needed");
  if (has_size) {
    size_t n = 0;
    const int64_t *s = em_evalue_int_list(osz_v, &n);
    EM_KCHECK(ctx, s && n == 2, "output_size must have 2 ints");
    osz[0] = s[0];
    osz[1] = s[1];
    scales[0] = scales[1] = 0.0; /* none */
  } else {
    EM_KCHECK(ctx, sc_v->tag == EM_TAG_LIST_DOUBLE && sc_v->u.list.n == 2,
              "scale_factors must have 2 floats");
    for (int i = 0; i < 2; i++) {
      scales[i] = sc_v->u.list.u.doubles[i];
      EM_KCHECK(ctx, scales[i] > 0.0, "scale factors must be positive");
      const double o = floor((double)x->sizes[2 + i] * scales[i]);
      /* NaN or an output past 2^40 (an int64 cast of it would be undefined behaviour) */
      EM_KCHECK(ctx, o == o && o <= 1099511627776.0, "scale factor %g gives an output of %g",
                scales[i], o);
      osz[i] = (int64_t)o;
    }
  }
  EM_KCHECK(ctx, osz[0] > 0 && osz[1] > 0, "output size must be positive");
  return EM_OK;
}

static em_status up_front(em_kernel_ctx *ctx, em_tensor *x, em_tensor *out, const int64_t *osz,
                          uint32_t dtypes) {
  NN_CHECK_TENSOR(ctx, x, "input");
  EM_KCHECK(ctx, x->dim == 4, "expected a 4-D input, got %d-D", (int)(x->dim));
  EM_KCHECK(ctx, (dtypes & EM_DTYPE_BIT(x->dtype)) != 0, "unsupported dtype %s",
            em_dtype_name(x->dtype));
  EM_KCHECK(ctx, x->sizes[2] > 0 && x->sizes[3] > 0, "input spatial dims must be non-empty");
  EM_KCHECK(ctx, out && out->dtype == x->dtype && out->dim == 4,
            "out must be 4-D of the input dtype");
  int64_t sz[4] = {x->sizes[0], x->sizes[1], osz[0], osz[1]};
  return em_resize_out(ctx, out, sz, 4);
}

/* ATen's nearest_idx. */
static int64_t nearest_idx(int64_t o, int64_t in, int64_t out, double scale) {
  if (out == in) return o;
  if (out == 2 * in) return o >> 1;
  float s = scale > 0.0 ? (float)(1.0 / scale) : (float)in / (float)out;
  int64_t i = (int64_t)floorf((float)o * s);
  return i < in - 1 ? i : in - 1;
}

/* aten::upsample_nearest2d.vec_out(Tensor input, SymInt[]? output_size, float[]? scale_factors, *,
 * out) */
em_status em_upsample_nearest2d_vec_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *x = EM_ARG_TENSOR(args, 0), *out = EM_ARG_TENSOR(args, 3);
  int64_t osz[2];
  double sc[2];
  NN_CHECK_TENSOR(ctx, x, "input");
  EM_KCHECK(ctx, x->dim == 4, "expected a 4-D input, got %d-D", (int)(x->dim));
  EM_KTRY(up_sizes(ctx, args[1], args[2], x, osz, sc));
  EM_KTRY(up_front(ctx, x, out, osz, EM_DT_FLOATS | EM_DT_U8));
  size_t es = em_dtype_size(x->dtype);
  if (es == 4) { /* f32: elements copied as words (a memmove per element took ~15 ns each) */
    const uint32_t *xp = (const uint32_t *)x->data;
    uint32_t *op = (uint32_t *)out->data;
    const int64_t *xs = x->strides, *os = out->strides;
    for (int64_t n = 0; n < x->sizes[0]; n++)
      for (int64_t c = 0; c < x->sizes[1]; c++)
        for (int64_t oh = 0; oh < osz[0]; oh++) {
          const int64_t ih = nearest_idx(oh, x->sizes[2], osz[0], sc[0]);
          const uint32_t *xr = xp + n * xs[0] + c * xs[1] + ih * xs[2];
          uint32_t *orow = op + n * os[0] + c * os[1] + oh * os[2];
          for (int64_t ow = 0; ow < osz[1]; ow++)
            orow[ow * os[3]] = xr[nearest_idx(ow, x->sizes[3], osz[1], sc[1]) * xs[3]];
        }
    return EM_OK;
  }
  for (int64_t n = 0; n < x->sizes[0]; n++)
    for (int64_t c = 0; c < x->sizes[1]; c++)
      for (int64_t oh = 0; oh < osz[0]; oh++) {
        int64_t ih = nearest_idx(oh, x->sizes[2], osz[0], sc[0]);
        for (int64_t ow = 0; ow < osz[1]; ow++) {
          int64_t iw = nearest_idx(ow, x->sizes[3], osz[1], sc[1]);
          int64_t xi =
              n * x->strides[0] + c * x->strides[1] + ih * x->strides[2] + iw * x->strides[3];
          int64_t oi = n * out->strides[0] + c * out->strides[1] + oh * out->strides[2] +
                       ow * out->strides[3];
          memmove((char *)out->data + oi * (int64_t)es, (const char *)x->data + xi * (int64_t)es,
                  es);
        }
      }
  return EM_OK;
}

/* Source index and weights of one output coordinate (bilinear, ATen's area_pixel_* helpers). */
typedef struct lin_tap {
  int64_t i0, i1;
  double l0, l1;
} lin_tap;

static lin_tap bilinear_tap(int64_t o, int64_t in, int64_t out, bool align, double scale,
                            bool f64) {
  lin_tap t;
  if (f64) {
    double s = align ? (out > 1 ? (double)(in - 1) / (double)(out - 1) : 0.0)
                     : (scale > 0.0 ? 1.0 / scale : (double)in / (double)out);
    double r = align ? s * (double)o : s * ((double)o + 0.5) - 0.5;
    if (!align && r < 0) r = 0;
    t.i0 = (int64_t)r;
    t.l1 = r - (double)t.i0;
  } else {
    float s = align ? (out > 1 ? (float)(in - 1) / (float)(out - 1) : 0.0f)
                    : (scale > 0.0 ? (float)(1.0 / scale) : (float)in / (float)out);
    float r = align ? s * (float)o : s * ((float)o + 0.5f) - 0.5f;
    if (!align && r < 0) r = 0;
    t.i0 = (int64_t)r;
    t.l1 = (double)(r - (float)t.i0);
  }
  t.i1 = t.i0 + (t.i0 < in - 1 ? 1 : 0);
  t.l0 = 1.0 - t.l1;
  return t;
}

enum { UP_BLOCK = 128 }; /* output columns whose taps bilinear_f32 computes at once */

/* upsample_bilinear2d over f32: the generic loop's taps and double arithmetic, plane by plane
 * (the generic loop runs every plane for each output pixel, ~50 ns an element on a 64-plane
 * map), the column taps computed once per block of columns. */
static void bilinear_f32(const em_tensor *x, em_tensor *out, const int64_t *osz, bool align,
                         const double *sc) {
  const float *xp = (const float *)x->data;
  float *op = (float *)out->data;
  const int64_t *xs = x->strides, *os = out->strides;
  lin_tap tw[UP_BLOCK];
  for (int64_t ow0 = 0; ow0 < osz[1]; ow0 += UP_BLOCK) {
    const int64_t nb = osz[1] - ow0 < UP_BLOCK ? osz[1] - ow0 : UP_BLOCK;
    for (int64_t k = 0; k < nb; k++)
      tw[k] = bilinear_tap(ow0 + k, x->sizes[3], osz[1], align, sc[1], false);
    for (int64_t oh = 0; oh < osz[0]; oh++) {
      const lin_tap th = bilinear_tap(oh, x->sizes[2], osz[0], align, sc[0], false);
      for (int64_t n = 0; n < x->sizes[0]; n++)
        for (int64_t c = 0; c < x->sizes[1]; c++) {
          const float *r0 = xp + n * xs[0] + c * xs[1] + th.i0 * xs[2];
          const float *r1 = xp + n * xs[0] + c * xs[1] + th.i1 * xs[2];
          float *o = op + n * os[0] + c * os[1] + oh * os[2] + ow0 * os[3];
          for (int64_t k = 0; k < nb; k++) {
            const double v00 = r0[tw[k].i0 * xs[3]], v01 = r0[tw[k].i1 * xs[3]];
            const double v10 = r1[tw[k].i0 * xs[3]], v11 = r1[tw[k].i1 * xs[3]];
            const double v = th.l0 * (tw[k].l0 * v00 + tw[k].l1 * v01) +
                             th.l1 * (tw[k].l0 * v10 + tw[k].l1 * v11);
            o[k * os[3]] = (float)v;
          }
        }
    }
  }
}

/*
 * aten::upsample_bilinear2d.vec_out(Tensor input, SymInt[]? output_size, bool align_corners,
 *   float[]? scale_factors, *, Tensor(a!) out)
 */
em_status em_upsample_bilinear2d_vec_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *x = EM_ARG_TENSOR(args, 0), *out = EM_ARG_TENSOR(args, 4);
  int64_t osz[2];
  double sc[2];
  bool align;
  NN_CHECK_TENSOR(ctx, x, "input");
  EM_KCHECK(ctx, x->dim == 4, "expected a 4-D input, got %d-D", (int)(x->dim));
  EM_KCHECK(ctx, em_arg_bool(args[2], &align), "align_corners must be a bool");
  EM_KTRY(up_sizes(ctx, args[1], args[3], x, osz, sc));
  EM_KTRY(up_front(ctx, x, out, osz, EM_DT_FLOATS));
  bool f64 = x->dtype == EM_DTYPE_F64;
  const int64_t *xs = x->strides, *os = out->strides;
  if (x->dtype == EM_DTYPE_F32) {
    bilinear_f32(x, out, osz, align, sc);
    return EM_OK;
  }
  for (int64_t oh = 0; oh < osz[0]; oh++) {
    lin_tap th = bilinear_tap(oh, x->sizes[2], osz[0], align, sc[0], f64);
    for (int64_t ow = 0; ow < osz[1]; ow++) {
      lin_tap tw = bilinear_tap(ow, x->sizes[3], osz[1], align, sc[1], f64);
      for (int64_t n = 0; n < x->sizes[0]; n++)
        for (int64_t c = 0; c < x->sizes[1]; c++) {
          int64_t b = n * xs[0] + c * xs[1];
          double v00 = em_load_f64(x->data, x->dtype, b + th.i0 * xs[2] + tw.i0 * xs[3]);
          double v01 = em_load_f64(x->data, x->dtype, b + th.i0 * xs[2] + tw.i1 * xs[3]);
          double v10 = em_load_f64(x->data, x->dtype, b + th.i1 * xs[2] + tw.i0 * xs[3]);
          double v11 = em_load_f64(x->data, x->dtype, b + th.i1 * xs[2] + tw.i1 * xs[3]);
          double v = th.l0 * (tw.l0 * v00 + tw.l1 * v01) + th.l1 * (tw.l0 * v10 + tw.l1 * v11);
          em_store_f64(out->data, out->dtype, n * os[0] + c * os[1] + oh * os[2] + ow * os[3], v);
        }
    }
  }
  return EM_OK;
}

/* ---- grid_sampler_2d ---- */

static double reflect_coord(double x, double twice_low, double twice_high) {
  if (twice_low == twice_high) return 0.0;
  double mn = twice_low / 2, span = (twice_high - twice_low) / 2;
  x = fabs(x - mn);
  double extra = fmod(x, span);
  int64_t flips = (int64_t)floor(x / span);
  return flips % 2 == 0 ? extra + mn : span - extra + mn;
}

static double clip(double x, int64_t size) {
  return x < 0 ? 0 : (x > (double)(size - 1) ? (double)(size - 1) : x);
}

/* Applies the padding mode to an unnormalized coordinate. */
static double pad_coord(double c, int64_t size, int pad, bool align) {
  if (pad == 1) {
    c = clip(c, size);
  } else if (pad == 2) {
    c = align ? reflect_coord(c, 0, 2.0 * (double)(size - 1))
              : reflect_coord(c, -1, 2.0 * (double)size - 1);
    c = clip(c, size);
  }
  return c;
}

static double unnormalize(double c, int64_t size, bool align) {
  return align ? (c + 1) / 2 * (double)(size - 1) : ((c + 1) * (double)size - 1) / 2;
}

static double cubic1(double x, double A) { return ((A + 2) * x - (A + 3)) * x * x + 1; }
static double cubic2(double x, double A) { return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A; }

/* Input value at (h, w) of a plane, 0 outside (after the padding mode for bicubic taps). */
static double at(const em_tensor *x, int64_t base, int64_t h, int64_t w) {
  if (h < 0 || w < 0 || h >= x->sizes[2] || w >= x->sizes[3]) return 0.0;
  return em_load_f64(x->data, x->dtype, base + h * x->strides[2] + w * x->strides[3]);
}

/*
 * aten::grid_sampler_2d.out(Tensor input, Tensor grid, int interpolation_mode,
 *   int padding_mode, bool align_corners, *, Tensor(a!) out)
 * interpolation 0 bilinear, 1 nearest, 2 bicubic; padding 0 zeros, 1 border, 2 reflection.
 */
em_status em_grid_sampler_2d_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *x = EM_ARG_TENSOR(args, 0), *gr = EM_ARG_TENSOR(args, 1),
            *out = EM_ARG_TENSOR(args, 5);
  int64_t mode, pad;
  bool align;
  NN_CHECK_TENSOR(ctx, x, "input");
  NN_CHECK_TENSOR(ctx, gr, "grid");
  EM_KCHECK(ctx,
            em_arg_int(args[2], &mode) && em_arg_int(args[3], &pad) && em_arg_bool(args[4], &align),
            "bad mode/padding/align_corners arguments");
  EM_KCHECK(ctx, mode >= 0 && mode <= 2 && pad >= 0 && pad <= 2, "unknown mode %lld / padding %lld",
            (long long)mode, (long long)pad);
  EM_KCHECK(ctx, x->dim == 4 && gr->dim == 4 && gr->sizes[3] == 2 && gr->sizes[0] == x->sizes[0],
            "expected input [N, C, H, W] and grid [N, H_out, W_out, 2]");
  EM_KCHECK(ctx, em_dtype_is_float(x->dtype) && gr->dtype == x->dtype,
            "input and grid must share a float dtype");
  EM_KCHECK(ctx, x->sizes[2] > 0 && x->sizes[3] > 0, "input spatial dims must be non-empty");
  EM_KCHECK(ctx, out && out->dtype == x->dtype && out->dim == 4,
            "out must be 4-D of the input dtype");
  int64_t N = x->sizes[0], C = x->sizes[1], H = x->sizes[2], W = x->sizes[3];
  int64_t Ho = gr->sizes[1], Wo = gr->sizes[2];
  int64_t sz[4] = {N, C, Ho, Wo};
  EM_KTRY(em_resize_out(ctx, out, sz, 4));
  const int64_t *gs = gr->strides, *os = out->strides;
  for (int64_t n = 0; n < N; n++)
    for (int64_t h = 0; h < Ho; h++)
      for (int64_t w = 0; w < Wo; w++) {
        int64_t gb = n * gs[0] + h * gs[1] + w * gs[2];
        double gx = em_load_f64(gr->data, gr->dtype, gb);
        double gy = em_load_f64(gr->data, gr->dtype, gb + gs[3]);
        double ix = unnormalize(gx, W, align), iy = unnormalize(gy, H, align);
        if (mode != 2) {
          ix = pad_coord(ix, W, (int)pad, align);
          iy = pad_coord(iy, H, (int)pad, align);
        }
        for (int64_t c = 0; c < C; c++) {
          int64_t base = n * x->strides[0] + c * x->strides[1];
          double v;
          if (mode == 0) {
            double x0 = floor(ix), y0 = floor(iy);
            double tx = ix - x0, ty = iy - y0;
            int64_t xw = (int64_t)x0, yn = (int64_t)y0;
            v = at(x, base, yn, xw) * (1 - tx) * (1 - ty) +
                at(x, base, yn, xw + 1) * tx * (1 - ty) + at(x, base, yn + 1, xw) * (1 - tx) * ty +
                at(x, base, yn + 1, xw + 1) * tx * ty;
          } else if (mode == 1) {
            v = at(x, base, (int64_t)nearbyint(iy), (int64_t)nearbyint(ix));
          } else {
            double x0 = floor(ix), y0 = floor(iy), tx = ix - x0, ty = iy - y0, A = -0.75;
            double cx[4] = {cubic2(tx + 1, A), cubic1(tx, A), cubic1(1 - tx, A), cubic2(2 - tx, A)};
            double cy[4] = {cubic2(ty + 1, A), cubic1(ty, A), cubic1(1 - ty, A), cubic2(2 - ty, A)};
            v = 0;
            for (int i = 0; i < 4; i++) {
              double row = 0;
              double yy = pad_coord(y0 - 1 + i, H, (int)pad, align);
              for (int j = 0; j < 4; j++) {
                double xx = pad_coord(x0 - 1 + j, W, (int)pad, align);
                row += at(x, base, (int64_t)yy, (int64_t)xx) * cx[j];
              }
              v += row * cy[i];
            }
          }
          em_store_f64(out->data, out->dtype, n * os[0] + c * os[1] + h * os[2] + w * os[3], v);
        }
      }
  return EM_OK;
}

/* ---- pixel shuffle ---- */

/* Shared by shuffle (up = true) and unshuffle: moves r x r blocks between channels and space. */
static em_status shuffle(em_kernel_ctx *ctx, em_evalue **args, bool up) {
  em_tensor *x = EM_ARG_TENSOR(args, 0), *out = EM_ARG_TENSOR(args, 2);
  int64_t r;
  NN_CHECK_TENSOR(ctx, x, "self");
  EM_KCHECK(ctx, em_arg_int(args[1], &r) && r > 0, "factor must be a positive int");
  EM_KCHECK(ctx, x->dim >= 3, "expected at least 3 dims, got %d", (int)(x->dim));
  EM_KCHECK(ctx, out && out->dtype == x->dtype && out->dim == x->dim,
            "out must have the input's dtype and rank");
  int32_t d = x->dim;
  int64_t C = x->sizes[d - 3], H = x->sizes[d - 2], W = x->sizes[d - 1];
  int64_t sz[EM_MAX_DIM];
  for (int32_t i = 0; i < d; i++) sz[i] = x->sizes[i];
  if (up) {
    EM_KCHECK(ctx, C % (r * r) == 0, "channels %lld not divisible by %lld", (long long)C,
              (long long)(r * r));
    sz[d - 3] = C / (r * r);
    sz[d - 2] = H * r;
    sz[d - 1] = W * r;
  } else {
    EM_KCHECK(ctx, H % r == 0 && W % r == 0, "spatial dims not divisible by %lld", (long long)r);
    sz[d - 3] = C * r * r;
    sz[d - 2] = H / r;
    sz[d - 1] = W / r;
  }
  EM_KTRY(em_resize_out(ctx, out, sz, d));
  size_t es = em_dtype_size(x->dtype);
  int64_t Co = sz[d - 3], Ho = sz[d - 2], Wo = sz[d - 1];
  if (out->numel == 0) return EM_OK;
  int64_t outer = out->numel / (Co * Ho * Wo);
  for (int64_t b = 0; b < outer; b++) {
    int64_t xb = 0, ob = 0, rem = b;
    for (int32_t i = d - 4; i >= 0; i--) {
      xb += (rem % x->sizes[i]) * x->strides[i];
      ob += (rem % x->sizes[i]) * out->strides[i];
      rem /= x->sizes[i];
    }
    for (int64_t c = 0; c < Co; c++)
      for (int64_t h = 0; h < Ho; h++)
        for (int64_t w = 0; w < Wo; w++) {
          int64_t ic, ih, iw;
          if (up) {
            ic = c * r * r + (h % r) * r + (w % r);
            ih = h / r;
            iw = w / r;
          } else {
            int64_t cc = c / (r * r), k = c % (r * r);
            ic = cc;
            ih = h * r + k / r;
            iw = w * r + k % r;
          }
          int64_t xi =
              xb + ic * x->strides[d - 3] + ih * x->strides[d - 2] + iw * x->strides[d - 1];
          int64_t oi =
              ob + c * out->strides[d - 3] + h * out->strides[d - 2] + w * out->strides[d - 1];
          memmove((char *)out->data + oi * (int64_t)es, (const char *)x->data + xi * (int64_t)es,
                  es);
        }
  }
  return EM_OK;
}

/* aten::pixel_shuffle.out(Tensor self, int upscale_factor, *, Tensor(a!) out) */
em_status em_pixel_shuffle_out(em_kernel_ctx *ctx, em_evalue **args) {
  return shuffle(ctx, args, true);
}

/* aten::pixel_unshuffle.out(Tensor self, int downscale_factor, *, Tensor(a!) out) */
em_status em_pixel_unshuffle_out(em_kernel_ctx *ctx, em_evalue **args) {
  return shuffle(ctx, args, false);
}

/* ---- antialiased bilinear (ATen's separable AA interpolation, UpSampleKernel.cpp) ---- */

typedef struct aa_taps {
  int64_t *xmin, *xsize;
  double *w; /* [out][maxsz] normalized weights */
  int64_t maxsz;
} aa_taps;

/* Triangle filter weights of every output index along one dim (antialiased when downscaling). */
static em_status aa_weights(em_kernel_ctx *ctx, int64_t in, int64_t out, bool align,
                            double scale_arg, aa_taps *t) {
  double scale = align ? (out > 1 ? (double)(in - 1) / (double)(out - 1) : 0.0)
                       : (scale_arg > 0.0 ? 1.0 / scale_arg : (double)in / (double)out);
  double support = scale >= 1.0 ? scale : 1.0, invscale = scale >= 1.0 ? 1.0 / scale : 1.0;
  t->maxsz = (int64_t)ceil(support) * 2 + 1;
  t->xmin = nn_temp(ctx, 2 * out, sizeof(int64_t));
  t->w = nn_temp(ctx, out * t->maxsz, sizeof(double));
  NN_CHECK_ALLOC(ctx, t->xmin && t->w);
  t->xsize = t->xmin + out;
  for (int64_t i = 0; i < out; i++) {
    double center = scale * ((double)i + 0.5), total = 0.0;
    int64_t xmin = (int64_t)(center - support + 0.5), xmax = (int64_t)(center + support + 0.5);
    if (xmin < 0) xmin = 0;
    if (xmax > in) xmax = in;
    int64_t n = xmax - xmin;
    if (n > t->maxsz) n = t->maxsz;
    double *w = t->w + i * t->maxsz;
    for (int64_t j = 0; j < n; j++) {
      double x = fabs(((double)(j + xmin) - center + 0.5) * invscale);
      w[j] = x < 1.0 ? 1.0 - x : 0.0;
      total += w[j];
    }
    if (total != 0.0)
      for (int64_t j = 0; j < n; j++) w[j] /= total;
    t->xmin[i] = xmin;
    t->xsize[i] = n;
  }
  return EM_OK;
}

/*
 * aten::_upsample_bilinear2d_aa.out(Tensor self, SymInt[2] output_size, bool align_corners,
 *   float? scales_h=None, float? scales_w=None, *, Tensor(a!) out)
 */
em_status em__upsample_bilinear2d_aa_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *x = EM_ARG_TENSOR(args, 0), *out = EM_ARG_TENSOR(args, 5);
  int64_t osz[2];
  bool align;
  double sh, sw;
  NN_CHECK_TENSOR(ctx, x, "self");
  EM_KCHECK(ctx, x->dim == 4, "expected a 4-D input, got %d-D", (int)(x->dim));
  EM_KCHECK(ctx, nn_int_list(args[1], 2, NULL, osz) && osz[0] > 0 && osz[1] > 0,
            "output_size must be 2 positive ints");
  EM_KCHECK(ctx, em_arg_bool(args[2], &align), "align_corners must be a bool");
  EM_KCHECK(ctx, nn_opt_double(args[3], 0.0, &sh) && nn_opt_double(args[4], 0.0, &sw),
            "scales must be floats or None");
  EM_KTRY(up_front(ctx, x, out, osz, EM_DT_FLOATS));
  aa_taps th, tw;
  EM_KTRY(aa_weights(ctx, x->sizes[2], osz[0], align, sh, &th));
  EM_KTRY(aa_weights(ctx, x->sizes[3], osz[1], align, sw, &tw));
  const int64_t *xs = x->strides, *os = out->strides;
  for (int64_t n = 0; n < x->sizes[0]; n++)
    for (int64_t c = 0; c < x->sizes[1]; c++) {
      int64_t b = n * xs[0] + c * xs[1];
      for (int64_t oh = 0; oh < osz[0]; oh++)
        for (int64_t ow = 0; ow < osz[1]; ow++) {
          double acc = 0.0;
          const double *wh = th.w + oh * th.maxsz, *ww = tw.w + ow * tw.maxsz;
          for (int64_t i = 0; i < th.xsize[oh]; i++) {
            double row = 0.0;
            int64_t h = th.xmin[oh] + i;
            for (int64_t j = 0; j < tw.xsize[ow]; j++)
              row +=
                  ww[j] * em_load_f64(x->data, x->dtype, b + h * xs[2] + (tw.xmin[ow] + j) * xs[3]);
            acc += wh[i] * row;
          }
          em_store_f64(out->data, out->dtype, n * os[0] + c * os[1] + oh * os[2] + ow * os[3], acc);
        }
    }
  return EM_OK;
}
