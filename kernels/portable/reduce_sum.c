/*
 * reduce_sum.c — additive reductions and scans: sum, mean, prod, var, std,
 * var_mean, cumsum, cumprod.
 *
 * Floating results accumulate in double and round once to the out dtype;
 * integral results accumulate in wrapping int64. The input is cast to the
 * result dtype element by element first, as ATen's reduction iterator does.
 * f32 sum/mean over one contiguous run (mean(x, -1)) skips the walk: a plain
 * loop, still in double, with four partial sums.
 */
#include <math.h>

#include "portable/ew_util.h"

/*
 * Parses dims (args[dim_i], None/[] = all), resizes out to the reduced shape
 * and plans the loops. keepdim_i < 0 means keepdim = false.
 */
static em_status plan(em_kernel_ctx *ctx, em_evalue **args, const em_tensor *in, int dim_i,
                      int keepdim_i, em_tensor *const *outs, int n_outs, ew_reduce *r) {
  bool mask[EM_MAX_DIM];
  EM_KTRY(ew_parse_dims(ctx, dim_i >= 0 ? args[dim_i] : NULL, in->dim, true, mask));
  bool keepdim = false;
  if (keepdim_i >= 0)
    EM_KCHECK(ctx, em_arg_bool(args[keepdim_i], &keepdim), "keepdim must be a bool");
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

/* Reads an optional ScalarType argument: -1 when None. */
static em_status opt_dtype(em_kernel_ctx *ctx, const em_evalue *v, int *d) {
  *d = -1;
  if (v->tag == EM_TAG_NONE) return EM_OK;
  EM_KCHECK(ctx, v->tag == EM_TAG_INT && ew_dtype_is_real_or_bool((int)v->u.i),
            "dtype must be a supported ScalarType or None");
  *d = (int)v->u.i;
  return EM_OK;
}

enum { R_SUM, R_PROD, R_MEAN };

/*
 * Sum of the f32 run p[0..n) in double, in four interleaved partial sums (the generic loop's
 * single chain, reassociated: the f32 result differs from it in the last bit at most, and
 * rarely; ATen itself sums f32 in f32 with a cascade).
 */
static double sum_f32_run(const float *p, int64_t n) {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) {
    s0 += (double)p[j];
    s1 += (double)p[j + 1];
    s2 += (double)p[j + 2];
    s3 += (double)p[j + 3];
  }
  for (; j < n; j++) s0 += (double)p[j];
  return (s0 + s1) + (s2 + s3);
}

/*
 * sum/mean of f32 into f32 when the reduced elements of each output are one contiguous run
 * (the last dims, e.g. mean(x, -1) in RMSNorm): a plain loop per output. False when the
 * layout does not allow it, and nothing was written.
 */
static bool run_additive_f32_rows(const ew_reduce *rp, const em_tensor *in, em_tensor *out,
                                  int kind) {
  if (kind == R_PROD || in->dtype != EM_DTYPE_F32 || out->dtype != EM_DTYPE_F32) return false;
  ew_reduce r = *rp;
  ew_iter it;
  ew_reduce_inner(&r, &it, 0);
  if (it.numel == 0 || (it.dim > 1) || (it.dim == 1 && it.strides[0][0] != 1 && it.numel > 1))
    return false;
  const float *src = (const float *)in->data;
  float *dst = (float *)out->data;
  int64_t n = it.numel;
  for (int64_t o = 0; o < r.out_numel; o++) {
    double acc = sum_f32_run(src + r.outer.off[0], n);
    if (kind == R_MEAN) acc /= (double)n;
    dst[r.outer.off[1]] = (float)acc;
    ew_iter_next(&r.outer);
  }
  return true;
}

enum { COLS_BLOCK = 64 }; /* outputs run_additive_f32_cols sums side by side */

/*
 * sum/mean of f32 into f32 over one strided run per output when neighbouring outputs read
 * neighbouring elements (a middle dim of a contiguous tensor: mean(x, 1) over channels): blocks
 * of 64 outputs summed side by side, each in double over its run in order, so the same values as
 * the generic loop, which walked each output's strided run alone (~5 ns an element). False when
 * the layout does not allow it, and nothing was written.
 */
static bool run_additive_f32_cols(const ew_reduce *rp, const em_tensor *in, em_tensor *out,
                                  int kind) {
  if (kind == R_PROD || in->dtype != EM_DTYPE_F32 || out->dtype != EM_DTYPE_F32) return false;
  ew_reduce r = *rp;
  int64_t n, s, inner;
  if (!ew_reduce_cols(&r, &n, &s, &inner)) return false;
  const float *src = (const float *)in->data;
  float *dst = (float *)out->data;
  double acc[COLS_BLOCK];
  for (int64_t o = 0; o < r.out_numel; o += inner) { /* r.outer at the row's first output */
    const float *x = src + r.outer.off[0];
    float *y = dst + r.outer.off[1];
    for (int64_t i0 = 0; i0 < inner; i0 += COLS_BLOCK) {
      const int64_t nb = inner - i0 < COLS_BLOCK ? inner - i0 : COLS_BLOCK;
      for (int64_t i = 0; i < nb; i++) acc[i] = 0.0;
      for (int64_t j = 0; j < n; j++)
        for (int64_t i = 0; i < nb; i++) acc[i] += (double)x[j * s + i0 + i];
      for (int64_t i = 0; i < nb; i++)
        y[i0 + i] = (float)(kind == R_MEAN ? acc[i] / (double)n : acc[i]);
    }
    for (int64_t i = 0; i < inner; i++) ew_iter_next(&r.outer);
  }
  return true;
}

/* Sum/prod/mean of in over the planned dims into out, accumulating in out's dtype domain. */
static void run_additive(const ew_reduce *rp, const em_tensor *in, em_tensor *out, int kind) {
  if (run_additive_f32_rows(rp, in, out, kind) || run_additive_f32_cols(rp, in, out, kind)) return;
  ew_reduce r = *rp;
  int od = out->dtype;
  bool fp = em_dtype_is_float(od);
  for (int64_t o = 0; o < r.out_numel; o++) {
    ew_iter it;
    ew_reduce_inner(&r, &it, r.outer.off[0]);
    ew_val acc;
    if (fp) {
      acc.f = kind == R_PROD ? 1.0 : 0.0;
      for (int64_t j = 0; j < it.numel; j++) {
        double v = ew_load(in, it.off[0], od).f;
        acc.f = kind == R_PROD ? acc.f * v : acc.f + v;
        ew_iter_next(&it);
      }
      if (kind == R_MEAN) acc.f /= (double)it.numel;
    } else {
      acc.i = kind == R_PROD ? 1 : 0;
      for (int64_t j = 0; j < it.numel; j++) {
        int64_t v = ew_load(in, it.off[0], od).i;
        acc.i = kind == R_PROD ? ew_mul_i64(acc.i, v) : ew_add_i64(acc.i, v);
        ew_iter_next(&it);
      }
    }
    ew_store(out, r.outer.off[1], acc, od);
    ew_iter_next(&r.outer);
  }
}

/* Shared body of sum/prod/mean: self args[0], optional dims, keepdim, dtype, out. */
static em_status additive(em_kernel_ctx *ctx, em_evalue **args, int dim_i, int keepdim_i,
                          int dtype_i, int out_i, int kind) {
  EW_TENSOR_ARG(self, ctx, args, 0);
  em_tensor *out = EM_ARG_TENSOR(args, out_i);
  EM_KCHECK(ctx, out && ew_dtype_is_real_or_bool(out->dtype), "out must be a real or bool tensor");
  int dt;
  EM_KTRY(opt_dtype(ctx, args[dtype_i], &dt));
  if (dt >= 0)
    EM_KCHECK(ctx, out->dtype == dt, "out dtype %s does not match dtype %s",
              em_dtype_name(out->dtype), em_dtype_name(dt));
  if (kind == R_MEAN) {
    int src = dt >= 0 ? dt : self->dtype;
    EM_KCHECK(ctx, em_dtype_is_float(src) && em_dtype_is_float(out->dtype),
              "mean needs a floating dtype (input %s, out %s)", em_dtype_name(self->dtype),
              em_dtype_name(out->dtype));
  } else if (dt < 0) {
    EM_KCHECK(ctx, ew_can_cast(self->dtype, out->dtype) || out->dtype == EM_DTYPE_I64,
              "input dtype %s can't be cast to out dtype %s", em_dtype_name(self->dtype),
              em_dtype_name(out->dtype));
  }
  ew_reduce r;
  EM_KTRY(plan(ctx, args, self, dim_i, keepdim_i, &out, 1, &r));
  run_additive(&r, self, out, kind);
  return EM_OK;
}

em_status em_sum_intlist_out(em_kernel_ctx *ctx, em_evalue **args) {
  return additive(ctx, args, 1, 2, 3, 4, R_SUM);
}
em_status em_sum_out(em_kernel_ctx *ctx, em_evalue **args) {
  return additive(ctx, args, -1, -1, 1, 2, R_SUM);
}
em_status em_mean_out(em_kernel_ctx *ctx, em_evalue **args) {
  return additive(ctx, args, 1, 2, 3, 4, R_MEAN);
}
em_status em_mean_dtype_out(em_kernel_ctx *ctx, em_evalue **args) {
  return additive(ctx, args, -1, -1, 1, 2, R_MEAN);
}
em_status em_prod_out(em_kernel_ctx *ctx, em_evalue **args) {
  return additive(ctx, args, -1, -1, 1, 2, R_PROD);
}

em_status em_prod_int_out(em_kernel_ctx *ctx, em_evalue **args) {
  EM_KCHECK(ctx, args[1]->tag == EM_TAG_INT, "dim must be an int");
  return additive(ctx, args, 1, 2, 3, 4, R_PROD);
}

/* ---- var / var_mean ---- */

/* Variance (and mean) with divisor max(N - correction, 0), two-pass in double. */
static em_status variance(em_kernel_ctx *ctx, em_evalue **args, double correction, int keepdim_i,
                          em_tensor *var_out, em_tensor *mean_out, bool take_sqrt) {
  EW_TENSOR_ARG(self, ctx, args, 0);
  EM_KCHECK(ctx, em_dtype_is_float(self->dtype), "var needs a floating input, got %s",
            em_dtype_name(self->dtype));
  em_tensor *outs[2] = {var_out, mean_out};
  int n_outs = mean_out ? 2 : 1;
  for (int k = 0; k < n_outs; k++)
    EM_KCHECK(ctx, em_dtype_is_float(outs[k]->dtype), "out dtype %s must be floating",
              em_dtype_name(outs[k]->dtype));
  ew_reduce r;
  EM_KTRY(plan(ctx, args, self, 1, keepdim_i, outs, n_outs, &r));
  int cd = self->dtype;
  for (int64_t o = 0; o < r.out_numel; o++) {
    ew_iter it;
    ew_reduce_inner(&r, &it, r.outer.off[0]);
    double sum = 0;
    for (int64_t j = 0; j < it.numel; j++) {
      sum += ew_load(self, it.off[0], cd).f;
      ew_iter_next(&it);
    }
    double n = (double)it.numel, mean = sum / n, m2 = 0;
    ew_reduce_inner(&r, &it, r.outer.off[0]);
    for (int64_t j = 0; j < it.numel; j++) {
      double d = ew_load(self, it.off[0], cd).f - mean;
      m2 += d * d;
      ew_iter_next(&it);
    }
    double div = n - correction > 0 ? n - correction : 0.0;
    ew_val v;
    v.f = it.numel == 0 ? NAN : m2 / div;
    if (take_sqrt) v.f = sqrt(v.f);
    ew_store(var_out, r.outer.off[1], v, cd);
    if (mean_out) {
      v.f = mean;
      ew_store(mean_out, r.outer.off[2], v, cd);
    }
    ew_iter_next(&r.outer);
  }
  return EM_OK;
}

em_status em_var_out(em_kernel_ctx *ctx, em_evalue **args) {
  bool unbiased;
  EM_KCHECK(ctx, em_arg_bool(args[2], &unbiased), "unbiased must be a bool");
  em_tensor *out = EM_ARG_TENSOR(args, 4);
  EM_KCHECK(ctx, out, "out must be a tensor");
  return variance(ctx, args, unbiased ? 1.0 : 0.0, 3, out, NULL, false);
}

/* Reads `Scalar? correction` (None = 1). */
static em_status correction_arg(em_kernel_ctx *ctx, const em_evalue *v, double *c) {
  *c = 1.0;
  if (v->tag == EM_TAG_NONE) return EM_OK;
  EM_KCHECK(ctx, ew_is_scalar(v) && em_arg_double(v, c), "correction must be a scalar or None");
  return EM_OK;
}

em_status em_var_correction_out(em_kernel_ctx *ctx, em_evalue **args) {
  double c;
  EM_KTRY(correction_arg(ctx, args[2], &c));
  em_tensor *out = EM_ARG_TENSOR(args, 4);
  EM_KCHECK(ctx, out, "out must be a tensor");
  return variance(ctx, args, c, 3, out, NULL, false);
}

em_status em_var_mean_correction_out(em_kernel_ctx *ctx, em_evalue **args) {
  double c;
  EM_KTRY(correction_arg(ctx, args[2], &c));
  em_tensor *o0 = EM_ARG_TENSOR(args, 4), *o1 = EM_ARG_TENSOR(args, 5);
  EM_KCHECK(ctx, o0 && o1, "out0/out1 must be tensors");
  return variance(ctx, args, c, 3, o0, o1, false);
}

em_status em_std_out(em_kernel_ctx *ctx, em_evalue **args) {
  bool unbiased;
  EM_KCHECK(ctx, em_arg_bool(args[2], &unbiased), "unbiased must be a bool");
  em_tensor *out = EM_ARG_TENSOR(args, 4);
  EM_KCHECK(ctx, out, "out must be a tensor");
  return variance(ctx, args, unbiased ? 1.0 : 0.0, 3, out, NULL, true);
}

em_status em_std_correction_out(em_kernel_ctx *ctx, em_evalue **args) {
  double c;
  EM_KTRY(correction_arg(ctx, args[2], &c));
  em_tensor *out = EM_ARG_TENSOR(args, 4);
  EM_KCHECK(ctx, out, "out must be a tensor");
  return variance(ctx, args, c, 3, out, NULL, true);
}

/* ---- cumsum / cumprod ---- */

static em_status scan(em_kernel_ctx *ctx, em_evalue **args, bool is_prod) {
  EW_TENSOR_ARG(self, ctx, args, 0);
  em_tensor *out = EM_ARG_TENSOR(args, 3);
  EM_KCHECK(ctx, out && ew_dtype_is_real_or_bool(out->dtype), "out must be a real or bool tensor");
  int64_t dim_arg;
  EM_KCHECK(ctx, em_arg_int(args[1], &dim_arg), "dim must be an int");
  int32_t dim;
  EM_KCHECK(ctx, em_norm_dim(dim_arg, self->dim, &dim), "dim %lld out of range",
            (long long)dim_arg);
  int dt;
  EM_KTRY(opt_dtype(ctx, args[2], &dt));
  if (dt >= 0)
    EM_KCHECK(ctx, out->dtype == dt, "out dtype %s does not match dtype %s",
              em_dtype_name(out->dtype), em_dtype_name(dt));
  else
    EM_KCHECK(ctx, ew_can_cast(self->dtype, out->dtype) || out->dtype == EM_DTYPE_I64,
              "input dtype %s can't be cast to out dtype %s", em_dtype_name(self->dtype),
              em_dtype_name(out->dtype));
  EM_KTRY(em_resize_out(ctx, out, self->sizes, self->dim));
  if (out->numel == 0) return EM_OK;
  EM_KCHECK(ctx, out->data, "out has no data");
  bool mask[EM_MAX_DIM] = {false};
  if (self->dim > 0) mask[dim] = true;
  ew_reduce r;
  ew_reduce_init(&r, self, mask, &out, 1);
  int64_t n = self->dim > 0 ? self->sizes[dim] : 1;
  int64_t si = self->dim > 0 ? self->strides[dim] : 0, so = self->dim > 0 ? out->strides[dim] : 0;
  int od = out->dtype;
  for (int64_t o = 0; o < r.out_numel; o++) {
    ew_val acc;
    acc.i = is_prod ? 1 : 0;
    if (em_dtype_is_float(od)) acc.f = is_prod ? 1.0 : 0.0;
    for (int64_t j = 0; j < n; j++) {
      ew_val v = ew_load(self, r.outer.off[0] + j * si, od);
      if (em_dtype_is_float(od))
        acc.f = is_prod ? acc.f * v.f : acc.f + v.f;
      else
        acc.i = is_prod ? ew_mul_i64(acc.i, v.i) : ew_add_i64(acc.i, v.i);
      ew_store(out, r.outer.off[1] + j * so, acc, od);
    }
    ew_iter_next(&r.outer);
  }
  return EM_OK;
}

em_status em_cumsum_out(em_kernel_ctx *ctx, em_evalue **args) { return scan(ctx, args, false); }
em_status em_cumprod_out(em_kernel_ctx *ctx, em_evalue **args) { return scan(ctx, args, true); }
