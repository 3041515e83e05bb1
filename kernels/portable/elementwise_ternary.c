/*
 * elementwise_ternary.c — three-input arithmetic: addcmul, addcdiv, lerp
 * (Scalar and Tensor weight).
 *
 * The tensors promote together with torch.result_type (the Scalar value and
 * weight do not take part), broadcast, and compute in double (floats) or
 * wrapping int64 (integers).
 */
#include "portable/ew_util.h"

enum { T_ADDCMUL, T_ADDCDIV, T_LERP };

static ew_val f_ternary(const ew_val *x, ew_op *op) {
  ew_val r;
  if (op->mode == T_LERP) {
    double s = x[0].f, e = x[1].f, w = op->p[1].i ? x[2].f : op->p[0].f;
    r.f = fabs(w) < 0.5 ? s + w * (e - s) : e - (e - s) * (1.0 - w);
  } else if (op->fp) {
    double t = op->mode == T_ADDCMUL ? x[1].f * x[2].f : x[1].f / x[2].f;
    r.f = x[0].f + op->p[0].f * t;
  } else {
    r.i = ew_add_i64(x[0].i, ew_mul_i64(op->p[0].i, ew_mul_i64(x[1].i, x[2].i)));
  }
  return r;
}

/*
 * The shared body: args [self, t1, t2(or weight), value?, out, out]. n_tensors is 3 (or 2 for
 * lerp with a Scalar weight at args[2]); value_i the index of the Scalar, out_i of out.
 */
static em_status ternary(em_kernel_ctx *ctx, em_evalue **args, int mode, int n_tensors, int value_i,
                         int out_i) {
  em_tensor *t[3] = {NULL, NULL, NULL};
  ew_rt rt;
  ew_rt_init(&rt);
  for (int k = 0; k < n_tensors; k++) {
    t[k] = ew_arg_real_tensor(ctx, args, k);
    if (!t[k]) return EM_ERR_INVALID_ARGUMENT;
    ew_rt_tensor(&rt, t[k]);
  }
  em_tensor *out = EM_ARG_TENSOR(args, out_i);
  EM_KCHECK(ctx, out && ew_dtype_is_real_or_bool(out->dtype), "out must be a real or bool tensor");
  EM_KCHECK(ctx, ew_is_scalar(args[value_i]), "value/weight must be a scalar");
  int common = ew_rt_result(&rt);
  EM_KCHECK(ctx, common >= 0 && common != EM_DTYPE_BOOL, "not implemented for dtype %s",
            common >= 0 ? em_dtype_name(common) : "?");
  if (mode == T_LERP)
    EM_KCHECK(ctx, em_dtype_is_float(common), "lerp needs floating inputs, got %s",
              em_dtype_name(common));
  if (mode == T_ADDCDIV)
    EM_KCHECK(ctx, em_dtype_is_float(common), "integer division with addcdiv is not supported");
  if (!em_dtype_is_float(common))
    EM_KCHECK(ctx, args[value_i]->tag != EM_TAG_DOUBLE,
              "for integral inputs, value must not be a floating point number");
  EM_KCHECK(ctx, ew_can_cast(common, out->dtype), "result dtype %s can't be cast to out %s",
            em_dtype_name(common), em_dtype_name(out->dtype));
  ew_op op;
  ew_op_init(&op, common, common);
  op.mode = mode;
  op.p[0] = ew_scalar_val(args[value_i], common);
  op.p[1].i = n_tensors == 3 && mode == T_LERP;
  ew_in in[3];
  for (int k = 0; k < 3; k++) in[k] = ew_in_tensor(t[k], common);
  return ew_map(ctx, out, in, n_tensors, f_ternary, &op);
}

em_status em_addcmul_out(em_kernel_ctx *ctx, em_evalue **args) {
  return ternary(ctx, args, T_ADDCMUL, 3, 3, 4);
}
em_status em_addcdiv_out(em_kernel_ctx *ctx, em_evalue **args) {
  return ternary(ctx, args, T_ADDCDIV, 3, 3, 4);
}
em_status em_lerp_scalar_out(em_kernel_ctx *ctx, em_evalue **args) {
  return ternary(ctx, args, T_LERP, 2, 2, 3);
}

em_status em_lerp_tensor_out(em_kernel_ctx *ctx, em_evalue **args) {
  /* weight is a tensor: pass a dummy Scalar for the value slot */
  em_evalue one;
  memset(&one, 0, sizeof one);
  one.tag = EM_TAG_DOUBLE;
  one.u.d = 0.0;
  em_evalue *a[6] = {args[0], args[1], args[2], &one, args[3], args[4]};
  return ternary(ctx, a, T_LERP, 3, 3, 4);
}
