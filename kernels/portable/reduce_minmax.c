/*
 * reduce_minmax.c — order reductions: amax, amin, argmax, argmin, max.dim,
 * min.dim, max/min over all elements, and any.
 *
 * NaN wins every comparison (it propagates to amax/amin/max/min and argmax
 * returns the first NaN's index), ties keep the first index, as ATen.
 */
#include <math.h>

#include "portable/ew_util.h"

/* Resizes outs to the reduction of `in` over mask and plans the loops. */
static em_status plan_mask(em_kernel_ctx *ctx, const em_tensor *in, const bool *mask, bool keepdim,
                           em_tensor *const *outs, int n_outs, ew_reduce *r) {
  int64_t sizes[EM_MAX_DIM];
  int32_t dim;
  ew_reduced_shape(in, mask, keepdim, sizes, &dim);
  for (int k = 0; k < n_outs; k++) {
    EM_KTRY(em_resize_out(ctx, outs[k], sizes, dim));
    EM_KCHECK(ctx, outs[k]->numel == 0 || outs[k]->data, "out has no data");
  }
  ew_reduce_init(r, in, mask, outs, n_outs);
  return EM_OK;
}

/* True when a should replace the current best b (max: a > b; min: a < b; NaN wins once). */
static bool better_f(double a, double b, bool is_max) {
  if (b != b) return false;
  if (a != a) return true;
  return is_max ? a > b : a < b;
}

/*
 * The core loop: for each output, the best value and its index over the
 * reduced elements. vals/idx may be NULL. Values are stored in self's dtype.
 */
static void run_best(ew_reduce *r, const em_tensor *in, em_tensor *vals, int vals_op,
                     em_tensor *idx, int idx_op, bool is_max) {
  int d = in->dtype;
  bool fp = em_dtype_is_float(d);
  for (int64_t o = 0; o < r->out_numel; o++) {
    ew_iter it;
    ew_reduce_inner(r, &it, r->outer.off[0]);
    ew_val best = ew_load(in, it.off[0], d);
    int64_t best_i = 0;
    ew_iter_next(&it);
    for (int64_t j = 1; j < it.numel; j++) {
      ew_val v = ew_load(in, it.off[0], d);
      bool take = fp ? better_f(v.f, best.f, is_max) : (is_max ? v.i > best.i : v.i < best.i);
      if (take) {
        best = v;
        best_i = j;
      }
      ew_iter_next(&it);
    }
    if (vals) ew_store(vals, r->outer.off[vals_op], best, d);
    if (idx) ((int64_t *)idx->data)[r->outer.off[idx_op]] = best_i;
    ew_iter_next(&r->outer);
  }
}

/*
 * amax / amin of f32 over one run per output when neighbouring outputs read neighbouring
 * elements (a middle dim of a contiguous tensor): the outputs of a row side by side, each taking
 * better_f's best over its run in order (NaN once seen stays), the values run_best gives (which
 * walked each output's run alone, ~6 ns an element). False when the layout does not allow it,
 * and nothing was written.
 */
static bool best_f32_cols(const ew_reduce *rp, const em_tensor *in, em_tensor *out, bool is_max) {
  if (in->dtype != EM_DTYPE_F32 || out->dtype != EM_DTYPE_F32) return false;
  ew_reduce r = *rp;
  int64_t n, s, inner;
  if (!ew_reduce_cols(&r, &n, &s, &inner)) return false;
  const float *src = (const float *)in->data;
  float *dst = (float *)out->data;
  for (int64_t o = 0; o < r.out_numel; o += inner) { /* r.outer at the row's first output */
    const float *x = src + r.outer.off[0];
    float *y = dst + r.outer.off[1];
    for (int64_t i = 0; i < inner; i++) y[i] = x[i];
    for (int64_t j = 1; j < n; j++)
      for (int64_t i = 0; i < inner; i++) {
        const float v = x[j * s + i], b = y[i];
        if (b == b && (v != v || (is_max ? v > b : v < b))) y[i] = v;
      }
    for (int64_t i = 0; i < inner; i++) ew_iter_next(&r.outer);
  }
  return true;
}

/* amax / amin: [self, dim list, keepdim, out, out]. */
static em_status amaxmin(em_kernel_ctx *ctx, em_evalue **args, bool is_max) {
  EW_TENSOR_ARG(self, ctx, args, 0);
  em_tensor *out = EM_ARG_TENSOR(args, 3);
  EM_KCHECK(ctx, out && out->dtype == self->dtype, "out must be a tensor of self's dtype %s",
            em_dtype_name(self->dtype));
  bool mask[EM_MAX_DIM], keepdim;
  EM_KTRY(ew_parse_dims(ctx, args[1], self->dim, true, mask));
  EM_KCHECK(ctx, em_arg_bool(args[2], &keepdim), "keepdim must be a bool");
  for (int32_t d = 0; d < self->dim; d++)
    EM_KCHECK(ctx, !mask[d] || self->sizes[d] > 0, "cannot reduce over a zero-size dim %d", (int)d);
  ew_reduce r;
  EM_KTRY(plan_mask(ctx, self, mask, keepdim, &out, 1, &r));
  EM_KCHECK(ctx, self->numel > 0 || r.out_numel == 0, "empty input");
  if (!best_f32_cols(&r, self, out, is_max)) run_best(&r, self, out, 1, NULL, 0, is_max);
  return EM_OK;
}

em_status em_amax_out(em_kernel_ctx *ctx, em_evalue **args) { return amaxmin(ctx, args, true); }
em_status em_amin_out(em_kernel_ctx *ctx, em_evalue **args) { return amaxmin(ctx, args, false); }

/* argmax / argmin: [self, dim?, keepdim, out, out]. */
static em_status argbest(em_kernel_ctx *ctx, em_evalue **args, bool is_max) {
  EW_TENSOR_ARG(self, ctx, args, 0);
  EM_KCHECK(ctx, self->dtype != EM_DTYPE_BOOL, "not implemented for bool");
  em_tensor *out = EM_ARG_TENSOR(args, 3);
  EM_KCHECK(ctx, out && out->dtype == EM_DTYPE_I64, "out must be an i64 tensor");
  bool keepdim;
  EM_KCHECK(ctx, em_arg_bool(args[2], &keepdim), "keepdim must be a bool");
  bool mask[EM_MAX_DIM];
  if (args[1]->tag == EM_TAG_NONE) {
    EM_KCHECK(ctx, self->numel > 0, "cannot compute arg%s of an empty tensor",
              is_max ? "max" : "min");
    for (int32_t d = 0; d < EM_MAX_DIM; d++) mask[d] = d < self->dim;
  } else {
    EM_KCHECK(ctx, args[1]->tag == EM_TAG_INT, "dim must be an int or None");
    EM_KTRY(ew_parse_dims(ctx, args[1], self->dim, true, mask));
    for (int32_t d = 0; d < self->dim; d++)
      EM_KCHECK(ctx, !mask[d] || self->sizes[d] > 0, "cannot reduce over a zero-size dim %d",
                (int)d);
  }
  ew_reduce r;
  EM_KTRY(plan_mask(ctx, self, mask, keepdim, &out, 1, &r));
  run_best(&r, self, NULL, 0, out, 1, is_max);
  return EM_OK;
}

em_status em_argmax_out(em_kernel_ctx *ctx, em_evalue **args) { return argbest(ctx, args, true); }
em_status em_argmin_out(em_kernel_ctx *ctx, em_evalue **args) { return argbest(ctx, args, false); }

/* max.dim_max / min.dim_min: [self, dim, keepdim, values, indices, (values, indices)]. */
static em_status dim_best(em_kernel_ctx *ctx, em_evalue **args, bool is_max) {
  EW_TENSOR_ARG(self, ctx, args, 0);
  em_tensor *vals = EM_ARG_TENSOR(args, 3), *idx = EM_ARG_TENSOR(args, 4);
  EM_KCHECK(ctx, vals && vals->dtype == self->dtype, "values must be a tensor of dtype %s",
            em_dtype_name(self->dtype));
  EM_KCHECK(ctx, idx && idx->dtype == EM_DTYPE_I64, "indices must be an i64 tensor");
  EM_KCHECK(ctx, args[1]->tag == EM_TAG_INT, "dim must be an int");
  bool mask[EM_MAX_DIM], keepdim;
  EM_KTRY(ew_parse_dims(ctx, args[1], self->dim, true, mask));
  EM_KCHECK(ctx, em_arg_bool(args[2], &keepdim), "keepdim must be a bool");
  for (int32_t d = 0; d < self->dim; d++)
    EM_KCHECK(ctx, !mask[d] || self->sizes[d] > 0, "cannot reduce over a zero-size dim %d", (int)d);
  em_tensor *outs[2] = {vals, idx};
  ew_reduce r;
  EM_KTRY(plan_mask(ctx, self, mask, keepdim, outs, 2, &r));
  run_best(&r, self, vals, 1, idx, 2, is_max);
  return EM_OK;
}

em_status em_max_dim_max(em_kernel_ctx *ctx, em_evalue **args) { return dim_best(ctx, args, true); }
em_status em_min_dim_min(em_kernel_ctx *ctx, em_evalue **args) {
  return dim_best(ctx, args, false);
}

/* max / min over every element: [self, out, out]. */
static em_status all_best(em_kernel_ctx *ctx, em_evalue **args, bool is_max) {
  EW_TENSOR_ARG(self, ctx, args, 0);
  em_tensor *out = EM_ARG_TENSOR(args, 1);
  EM_KCHECK(ctx, out && out->dtype == self->dtype, "out must be a tensor of dtype %s",
            em_dtype_name(self->dtype));
  EM_KCHECK(ctx, self->numel > 0, "max()/min() of an empty tensor is undefined");
  bool mask[EM_MAX_DIM];
  for (int32_t d = 0; d < EM_MAX_DIM; d++) mask[d] = d < self->dim;
  ew_reduce r;
  EM_KTRY(plan_mask(ctx, self, mask, false, &out, 1, &r));
  run_best(&r, self, out, 1, NULL, 0, is_max);
  return EM_OK;
}

em_status em_max_unary_out(em_kernel_ctx *ctx, em_evalue **args) {
  return all_best(ctx, args, true);
}
em_status em_min_unary_out(em_kernel_ctx *ctx, em_evalue **args) {
  return all_best(ctx, args, false);
}

/* ---- any ---- */

static em_status any_mask(em_kernel_ctx *ctx, em_tensor *self, const bool *mask, bool keepdim,
                          em_tensor *out) {
  EM_KCHECK(ctx, out && (out->dtype == EM_DTYPE_BOOL || out->dtype == EM_DTYPE_U8),
            "out must be a bool (or u8) tensor");
  ew_reduce r;
  EM_KTRY(plan_mask(ctx, self, mask, keepdim, &out, 1, &r));
  for (int64_t o = 0; o < r.out_numel; o++) {
    ew_iter it;
    ew_reduce_inner(&r, &it, r.outer.off[0]);
    ew_val acc;
    acc.i = 0;
    for (int64_t j = 0; j < it.numel && !acc.i; j++) {
      acc.i = ew_load(self, it.off[0], EM_DTYPE_BOOL).i;
      ew_iter_next(&it);
    }
    ew_store(out, r.outer.off[1], acc, EM_DTYPE_BOOL);
    ew_iter_next(&r.outer);
  }
  return EM_OK;
}

em_status em_any_out(em_kernel_ctx *ctx, em_evalue **args) {
  EW_TENSOR_ARG(self, ctx, args, 0);
  EM_KCHECK(ctx, args[1]->tag == EM_TAG_INT, "dim must be an int");
  bool mask[EM_MAX_DIM], keepdim;
  EM_KTRY(ew_parse_dims(ctx, args[1], self->dim, true, mask));
  EM_KCHECK(ctx, em_arg_bool(args[2], &keepdim), "keepdim must be a bool");
  return any_mask(ctx, self, mask, keepdim, EM_ARG_TENSOR(args, 3));
}

em_status em_any_all_out(em_kernel_ctx *ctx, em_evalue **args) {
  EW_TENSOR_ARG(self, ctx, args, 0);
  bool mask[EM_MAX_DIM];
  for (int32_t d = 0; d < EM_MAX_DIM; d++) mask[d] = d < self->dim;
  return any_mask(ctx, self, mask, false, EM_ARG_TENSOR(args, 1));
}

em_status em_any_dims_out(em_kernel_ctx *ctx, em_evalue **args) {
  EW_TENSOR_ARG(self, ctx, args, 0);
  bool mask[EM_MAX_DIM], keepdim;
  /* None reduces every dim; an empty list reduces none (ATen any.dims) */
  EM_KTRY(ew_parse_dims(ctx, args[1], self->dim, false, mask));
  EM_KCHECK(ctx, em_arg_bool(args[2], &keepdim), "keepdim must be a bool");
  return any_mask(ctx, self, mask, keepdim, EM_ARG_TENSOR(args, 3));
}
