/*
 * reduce_norm.c — reductions with a nonlinear combine: logsumexp and
 * linalg_vector_norm.
 *
 * Both compute in double and round once to the out dtype. logsumexp shifts by
 * the slice maximum (0 when that maximum is infinite, as ATen) for stability.
 */
#include <math.h>

#include "portable/ew_util.h"

/* Parses dims and keepdim, resizes out and plans the reduction of in. */
static em_status plan(em_kernel_ctx *ctx, em_evalue *dims, em_evalue *keepdim_v,
                      const em_tensor *in, em_tensor *out, ew_reduce *r) {
  bool mask[EM_MAX_DIM], keepdim;
  EM_KTRY(ew_parse_dims(ctx, dims, in->dim, true, mask));
  EM_KCHECK(ctx, em_arg_bool(keepdim_v, &keepdim), "keepdim must be a bool");
  int64_t sizes[EM_MAX_DIM];
  int32_t dim;
  ew_reduced_shape(in, mask, keepdim, sizes, &dim);
  EM_KTRY(em_resize_out(ctx, out, sizes, dim));
  EM_KCHECK(ctx, out->numel == 0 || out->data, "out has no data");
  ew_reduce_init(r, in, mask, &out, 1);
  return EM_OK;
}

/* logsumexp.out: [self, dim list, keepdim, out, out]; integral inputs give f32. */
em_status em_logsumexp_out(em_kernel_ctx *ctx, em_evalue **args) {
  EW_TENSOR_ARG(self, ctx, args, 0);
  em_tensor *out = EM_ARG_TENSOR(args, 3);
  EM_KCHECK(ctx, out && em_dtype_is_float(out->dtype), "out must be a floating tensor");
  int cd = em_dtype_is_float(self->dtype) ? self->dtype : EM_DTYPE_F32;
  EM_KCHECK(ctx, ew_can_cast(cd, out->dtype), "result dtype %s can't be cast to out %s",
            em_dtype_name(cd), em_dtype_name(out->dtype));
  ew_reduce r;
  EM_KTRY(plan(ctx, args[1], args[2], self, out, &r));
  for (int64_t o = 0; o < r.out_numel; o++) {
    ew_iter it;
    ew_reduce_inner(&r, &it, r.outer.off[0]);
    double mx = -INFINITY;
    bool nan = false;
    for (int64_t j = 0; j < it.numel; j++) {
      double v = ew_load(self, it.off[0], cd).f;
      if (v != v) nan = true;
      if (v > mx) mx = v;
      ew_iter_next(&it);
    }
    double shift = isinf(mx) ? 0.0 : mx, sum = 0;
    ew_reduce_inner(&r, &it, r.outer.off[0]);
    for (int64_t j = 0; j < it.numel; j++) {
      sum += exp(ew_load(self, it.off[0], cd).f - shift);
      ew_iter_next(&it);
    }
    ew_val v;
    v.f = nan ? NAN : log(sum) + shift;
    ew_store(out, r.outer.off[1], v, cd);
    ew_iter_next(&r.outer);
  }
  return EM_OK;
}

/* linalg_vector_norm.out: [self, ord, dim?, keepdim, dtype?, out, out]. */
em_status em_linalg_vector_norm_out(em_kernel_ctx *ctx, em_evalue **args) {
  EW_TENSOR_ARG(self, ctx, args, 0);
  em_tensor *out = EM_ARG_TENSOR(args, 5);
  EM_KCHECK(ctx, out && em_dtype_is_float(out->dtype), "out must be a floating tensor");
  EM_KCHECK(ctx, em_dtype_is_float(self->dtype), "vector_norm needs a floating input, got %s",
            em_dtype_name(self->dtype));
  double ord;
  EM_KCHECK(ctx, ew_is_scalar(args[1]) && em_arg_double(args[1], &ord), "ord must be a scalar");
  int cd = self->dtype;
  if (args[4]->tag != EM_TAG_NONE) {
    EM_KCHECK(ctx, args[4]->tag == EM_TAG_INT && em_dtype_is_float((int)args[4]->u.i),
              "dtype must be a floating ScalarType");
    cd = (int)args[4]->u.i;
    EM_KCHECK(ctx, out->dtype == cd, "out dtype %s does not match dtype %s",
              em_dtype_name(out->dtype), em_dtype_name(cd));
  }
  EM_KCHECK(ctx, ew_can_cast(cd, out->dtype), "result dtype %s can't be cast to out %s",
            em_dtype_name(cd), em_dtype_name(out->dtype));
  ew_reduce r;
  EM_KTRY(plan(ctx, args[2], args[3], self, out, &r));
  if (ord < 0 || isinf(ord))
    EM_KCHECK(ctx, self->numel > 0 || r.out_numel == 0,
              "norm of order %g over an empty dim is undefined", ord);
  for (int64_t o = 0; o < r.out_numel; o++) {
    ew_iter it;
    ew_reduce_inner(&r, &it, r.outer.off[0]);
    EM_KCHECK(ctx, it.numel > 0 || !(ord < 0 || isinf(ord)),
              "norm of order %g over an empty dim is undefined", ord);
    double acc = isinf(ord) && ord < 0 ? INFINITY : 0.0;
    for (int64_t j = 0; j < it.numel; j++) {
      double a = fabs(ew_load(self, it.off[0], cd).f);
      if (a != a)
        acc = NAN;
      else if (acc != acc)
        ;
      else if (isinf(ord))
        acc = ord > 0 ? fmax(acc, a) : fmin(acc, a);
      else if (ord == 0)
        acc += a != 0;
      else if (ord == 1)
        acc += a;
      else if (ord == 2)
        acc += a * a;
      else
        acc += pow(a, ord);
      ew_iter_next(&it);
    }
    if (!isinf(ord) && ord != 0 && ord != 1) acc = ord == 2 ? sqrt(acc) : pow(acc, 1.0 / ord);
    ew_val v;
    v.f = acc;
    ew_store(out, r.outer.off[1], v, cd);
    ew_iter_next(&r.outer);
  }
  return EM_OK;
}
