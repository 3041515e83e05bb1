/*
 * create_fill.c — tensor factories: full, full_like, zeros, ones, empty,
 * _empty_dim_order, scalar_tensor, arange, fill (Scalar and Tensor), rand, randn.
 *
 * The out tensor's dtype decides the element type; fill values are converted
 * with ATen's overflow check. rand/randn use a fixed-seed SplitMix64 stream
 * (deterministic across runs; each call continues the stream).
 */
#include <math.h>
#if !defined(EMBER_NO_THREADS) && !defined(__STDC_NO_ATOMICS__)
#include <stdatomic.h>
#define EW_RNG_ATOMIC 1
#endif

#include "portable/ew_util.h"

static em_tensor *out_arg(em_kernel_ctx *ctx, em_evalue **args, int i) {
  em_tensor *t = EM_ARG_TENSOR(args, i);
  if (!t || !ew_dtype_is_real_or_bool(t->dtype)) {
    em_kernel_fail(ctx, __FILE__, __LINE__, "out must be a real or bool tensor");
    return NULL;
  }
  return t;
}

/* Resizes out to sizes and fills it with Scalar v (checked conversion to out's dtype). */
static em_status fill_sized(em_kernel_ctx *ctx, em_tensor *out, const int64_t *sizes, int32_t dim,
                            const em_evalue *v) {
  EM_KCHECK(ctx, ew_is_scalar(v), "fill value must be a scalar");
  EM_KCHECK(ctx, ew_scalar_fits(v, out->dtype), "value cannot be converted to %s without overflow",
            em_dtype_name(out->dtype));
  EM_KTRY(em_resize_out(ctx, out, sizes, dim));
  EM_KCHECK(ctx, out->numel == 0 || out->data, "out has no data");
  ew_fill(out, ew_scalar_val(v, out->dtype), out->dtype);
  return EM_OK;
}

em_status em_full_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *out = out_arg(ctx, args, 2);
  if (!out) return EM_ERR_INVALID_ARGUMENT;
  int64_t sizes[EM_MAX_DIM];
  int32_t dim;
  EM_KTRY(ew_size_list(ctx, args[0], sizes, &dim));
  return fill_sized(ctx, out, sizes, dim, args[1]);
}

em_status em_full_like_out(em_kernel_ctx *ctx, em_evalue **args) {
  EW_TENSOR_ARG(self, ctx, args, 0);
  em_tensor *out = out_arg(ctx, args, 3);
  if (!out) return EM_ERR_INVALID_ARGUMENT;
  EM_KCHECK(ctx, args[2]->tag == EM_TAG_NONE || args[2]->tag == EM_TAG_INT,
            "memory_format must be an int or None");
  return fill_sized(ctx, out, self->sizes, self->dim, args[1]);
}

/* zeros / ones: [size, out, out]. */
static em_status const_fill(em_kernel_ctx *ctx, em_evalue **args, int64_t value) {
  em_tensor *out = out_arg(ctx, args, 1);
  if (!out) return EM_ERR_INVALID_ARGUMENT;
  int64_t sizes[EM_MAX_DIM];
  int32_t dim;
  EM_KTRY(ew_size_list(ctx, args[0], sizes, &dim));
  em_evalue v;
  v.tag = EM_TAG_INT;
  v.u.i = value;
  return fill_sized(ctx, out, sizes, dim, &v);
}

em_status em_zeros_out(em_kernel_ctx *ctx, em_evalue **args) { return const_fill(ctx, args, 0); }
em_status em_ones_out(em_kernel_ctx *ctx, em_evalue **args) { return const_fill(ctx, args, 1); }

em_status em_empty_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *out = out_arg(ctx, args, 2);
  if (!out) return EM_ERR_INVALID_ARGUMENT;
  EM_KCHECK(ctx, args[1]->tag == EM_TAG_NONE || args[1]->tag == EM_TAG_INT,
            "memory_format must be an int or None");
  int64_t sizes[EM_MAX_DIM];
  int32_t dim;
  EM_KTRY(ew_size_list(ctx, args[0], sizes, &dim));
  return em_resize_out(ctx, out, sizes, dim);
}

/* Checks an `int[]? dim_order` argument against t's dim order. */
em_status ew_check_dim_order(em_kernel_ctx *ctx, em_evalue *v, const em_tensor *t) {
  if (v->tag == EM_TAG_NONE) return EM_OK;
  size_t n = 0;
  EM_KCHECK(ctx, v->tag == EM_TAG_LIST_INT, "dim_order must be an int list or None");
  const int64_t *d = em_evalue_int_list(v, &n);
  EM_KCHECK(ctx, (d || v->u.list.n == 0) && n == (size_t)t->dim,
            "dim_order has %zu entries, out has rank %d", n, (int)t->dim);
  for (size_t i = 0; i < n; i++)
    EM_KCHECK(ctx, d[i] == t->dim_order[i], "dim_order[%zu] = %lld does not match out's (%d)", i,
              (long long)d[i], (int)t->dim_order[i]);
  return EM_OK;
}

em_status em_empty_dim_order_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *out = out_arg(ctx, args, 2);
  if (!out) return EM_ERR_INVALID_ARGUMENT;
  EM_KTRY(ew_check_dim_order(ctx, args[1], out));
  int64_t sizes[EM_MAX_DIM];
  int32_t dim;
  EM_KTRY(ew_size_list(ctx, args[0], sizes, &dim));
  return em_resize_out(ctx, out, sizes, dim);
}

em_status em_scalar_tensor_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *out = out_arg(ctx, args, 1);
  if (!out) return EM_ERR_INVALID_ARGUMENT;
  return fill_sized(ctx, out, NULL, 0, args[0]);
}

em_status em_fill_scalar_out(em_kernel_ctx *ctx, em_evalue **args) {
  EW_TENSOR_ARG(self, ctx, args, 0);
  em_tensor *out = out_arg(ctx, args, 2);
  if (!out) return EM_ERR_INVALID_ARGUMENT;
  return fill_sized(ctx, out, self->sizes, self->dim, args[1]);
}

em_status em_fill_tensor_out(em_kernel_ctx *ctx, em_evalue **args) {
  EW_TENSOR_ARG(self, ctx, args, 0);
  EW_TENSOR_ARG(value, ctx, args, 1);
  em_tensor *out = out_arg(ctx, args, 2);
  if (!out) return EM_ERR_INVALID_ARGUMENT;
  EM_KCHECK(ctx, value->dim == 0, "fill only supports a 0-dim value tensor, got rank %d",
            (int)value->dim);
  EM_KTRY(em_resize_out(ctx, out, self->sizes, self->dim));
  EM_KCHECK(ctx, out->numel == 0 || out->data, "out has no data");
  int d = em_dtype_is_float(value->dtype) || em_dtype_is_float(out->dtype) ? EM_DTYPE_F64
                                                                           : EM_DTYPE_I64;
  ew_fill(out, ew_load(value, 0, d), d);
  return EM_OK;
}

/* ---- arange ---- */

static em_status arange(em_kernel_ctx *ctx, const em_evalue *start, const em_evalue *end,
                        const em_evalue *step, em_tensor *out) {
  EM_KCHECK(ctx, ew_is_scalar(start) && ew_is_scalar(end) && ew_is_scalar(step),
            "start/end/step must be scalars");
  EM_KCHECK(ctx, out->dtype != EM_DTYPE_BOOL, "arange is not implemented for bool");
  EM_KCHECK(ctx, out->dim == 1, "out must be 1-D, got rank %d", (int)out->dim);
  double s, e, st;
  em_arg_double(start, &s);
  em_arg_double(end, &e);
  em_arg_double(step, &st);
  bool fp = em_dtype_is_float(out->dtype);
  ew_val a = ew_scalar_val(start, EM_DTYPE_I64), b = ew_scalar_val(end, EM_DTYPE_I64),
         c = ew_scalar_val(step, EM_DTYPE_I64);
  int64_t n;
  if (out->dtype == EM_DTYPE_I64) { /* ATen sizes i64 outs with the truncated integer bounds */
    EM_KCHECK(ctx, c.i != 0, "step must be nonzero");
    EM_KCHECK(ctx, (c.i > 0 && b.i >= a.i) || (c.i < 0 && b.i <= a.i),
              "upper bound and larger bound inconsistent with step sign");
    int64_t sgn = c.i > 0 ? 1 : -1;
    n = (b.i - a.i + c.i - sgn) / c.i;
  } else { /* other dtypes: ceil((end - start) / step) on the exact bounds */
    EM_KCHECK(ctx, st != 0 && isfinite(s) && isfinite(e), "step must be nonzero, bounds finite");
    EM_KCHECK(ctx, (st > 0 && e >= s) || (st < 0 && e <= s),
              "upper bound and larger bound inconsistent with step sign");
    double nd = ceil((e - s) / st);
    EM_KCHECK(ctx, nd >= 0 && nd < 9.0e18, "invalid arange size");
    n = (int64_t)nd;
  }
  EM_KTRY(em_resize_out(ctx, out, &n, 1));
  EM_KCHECK(ctx, n == 0 || out->data, "out has no data");
  /* start + i * step in ATen's accumulate type: int64, f32 for f16/bf16, else double */
  bool f32acc = out->dtype == EM_DTYPE_F16 || out->dtype == EM_DTYPE_BF16;
  for (int64_t i = 0; i < n; i++) {
    int64_t off = i * out->strides[0];
    if (fp) {
      double v = f32acc ? (double)((float)s + (float)st * (float)i) : s + st * (double)i;
      em_store_f64(out->data, out->dtype, off, v);
    } else {
      em_store_i64(out->data, out->dtype, off, ew_add_i64(a.i, ew_mul_i64(c.i, i)));
    }
  }
  return EM_OK;
}

em_status em_arange_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *out = out_arg(ctx, args, 1);
  if (!out) return EM_ERR_INVALID_ARGUMENT;
  em_evalue zero, one;
  zero.tag = one.tag = EM_TAG_INT;
  zero.u.i = 0;
  one.u.i = 1;
  return arange(ctx, &zero, args[0], &one, out);
}

em_status em_arange_start_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *out = out_arg(ctx, args, 3);
  if (!out) return EM_ERR_INVALID_ARGUMENT;
  return arange(ctx, args[0], args[1], args[2], out);
}

/* ---- rand / randn ---- */

/* The stream position; single-threaded builds (and MCUs without 64-bit atomics) use a plain
 * counter. */
#ifdef EW_RNG_ATOMIC
static _Atomic uint64_t g_rng_state = 0x853c49e6748fea9bULL;
#else
static uint64_t g_rng_state = 0x853c49e6748fea9bULL;
#endif

/* SplitMix64 (Steele, Lea, Flood 2014): one 64-bit draw. */
static uint64_t splitmix64(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/* Uniform double in [0, 1) with 53 random bits. */
static double uniform(uint64_t *s) { return (double)(splitmix64(s) >> 11) * 0x1.0p-53; }

uint64_t ew_rng_begin(int64_t n) {
  uint64_t step = 0x9e3779b97f4a7c15ULL * (uint64_t)(n + 1);
#ifdef EW_RNG_ATOMIC
  return atomic_fetch_add(&g_rng_state, step);
#else
  uint64_t s = g_rng_state;
  g_rng_state += step;
  return s;
#endif
}

double ew_rng_uniform(uint64_t *state) { return uniform(state); }

em_status ew_random_fill(em_kernel_ctx *ctx, em_tensor *out, bool normal) {
  EM_KCHECK(ctx, em_dtype_is_float(out->dtype), "out must be floating, got %s",
            em_dtype_name(out->dtype));
  EM_KCHECK(ctx, out->numel == 0 || out->data, "out has no data");
  uint64_t s = ew_rng_begin(out->numel);
  const em_tensor *ts[1] = {out};
  ew_iter it;
  ew_iter_init(&it, out->sizes, out->dim, ts, 1);
  for (int64_t i = 0; i < it.numel; i++) {
    double v;
    if (normal) { /* Box–Muller */
      double u1 = uniform(&s), u2 = uniform(&s);
      v = sqrt(-2.0 * log(1.0 - u1)) * cos(6.283185307179586 * u2);
    } else {
      v = uniform(&s);
      /* rounding up to 1.0 in a narrow dtype would leave [0, 1) */
      if (ew_round_to(v, out->dtype) >= 1.0) v = 0.0;
    }
    em_store_f64(out->data, out->dtype, it.off[0], v);
    ew_iter_next(&it);
  }
  return EM_OK;
}

static em_status random_sized(em_kernel_ctx *ctx, em_evalue **args, bool normal) {
  em_tensor *out = out_arg(ctx, args, 1);
  if (!out) return EM_ERR_INVALID_ARGUMENT;
  int64_t sizes[EM_MAX_DIM];
  int32_t dim;
  EM_KTRY(ew_size_list(ctx, args[0], sizes, &dim));
  EM_KTRY(em_resize_out(ctx, out, sizes, dim));
  return ew_random_fill(ctx, out, normal);
}

em_status em_rand_out(em_kernel_ctx *ctx, em_evalue **args) {
  return random_sized(ctx, args, false);
}
em_status em_randn_out(em_kernel_ctx *ctx, em_evalue **args) {
  return random_sized(ctx, args, true);
}
