/*
 * elementwise_unary.c — one-input math: trigonometric, hyperbolic, exp/log,
 * roots, rounding (also to decimals), sign/sgn, frac, abs, neg, isinf/isnan/
 * isposinf/isneginf/signbit, nan_to_num, _conj_physical.
 *
 * Three output rules, as ATen:
 *  - FLOAT: floating results; integral and bool inputs compute in f32.
 *  - SAME: the input's dtype (abs, neg, sign, ceil/floor/round/trunc).
 *  - BOOL: a bool result cast to out (isinf, isnan).
 */
#include <math.h>

#include "portable/ew_util.h"

enum { OUT_FLOAT, OUT_SAME, OUT_BOOL };

typedef double (*math_fn)(double);
typedef float (*mathf_fn)(float);

static ew_val f_math(const ew_val *x, ew_op *op) {
  ew_val r;
  r.f = op->math(x[0].f);
  return r;
}

static float f32_math(const float *x, const ew_op *op) { return op->mathf(x[0]); }
EW_F32_ROW_UNARY(row_math, op->mathf(A))

static double m_rsqrt(double x) { return 1.0 / sqrt(x); }
static double m_reciprocal(double x) { return 1.0 / x; }
static float m_rsqrtf(float x) { return 1.0f / sqrtf(x); }
static float m_reciprocalf(float x) { return 1.0f / x; }

/* Rows of the hot ones with the math inlined (the same function as mathf). */
EW_F32_ROW_UNARY(row_rsqrt, 1.0f / sqrtf(A))
EW_F32_ROW_UNARY(row_exp, expf(A))

/* Runs a FLOAT-rule unary op computing `fn` in double (`fnf` in float on the all-f32 path). */
static em_status unary_float(em_kernel_ctx *ctx, em_evalue **args, math_fn fn, mathf_fn fnf) {
  EW_TENSOR_ARG(self, ctx, args, 0);
  em_tensor *out = EM_ARG_TENSOR(args, 1);
  EM_KCHECK(ctx, out && ew_dtype_is_real_or_bool(out->dtype), "out must be a real or bool tensor");
  int common = em_dtype_is_float(self->dtype) ? self->dtype : EM_DTYPE_F32;
  EM_KCHECK(ctx, em_dtype_is_float(out->dtype), "out dtype %s must be floating",
            em_dtype_name(out->dtype));
  ew_op op;
  ew_op_init(&op, common, common);
  op.math = fn;
  op.mathf = fnf;
  if (fnf) {
    op.f32 = f32_math;
    op.f32_row = fnf == m_rsqrtf ? row_rsqrt : fnf == expf ? row_exp : row_math;
  }
  ew_in in[1] = {ew_in_tensor(self, common)};
  return ew_map(ctx, out, in, 1, f_math, &op);
}

#define EW_FLOAT_UNARY(name, fn, fnf)                                                              \
  em_status em_##name##_out(em_kernel_ctx *ctx, em_evalue **args) {                                \
    return unary_float(ctx, args, fn, fnf);                                                        \
  }
EW_FLOAT_UNARY(acos, acos, acosf)
EW_FLOAT_UNARY(acosh, acosh, acoshf)
EW_FLOAT_UNARY(asin, asin, asinf)
EW_FLOAT_UNARY(asinh, asinh, asinhf)
EW_FLOAT_UNARY(atan, atan, atanf)
EW_FLOAT_UNARY(atanh, atanh, atanhf)
EW_FLOAT_UNARY(cos, cos, cosf)
EW_FLOAT_UNARY(cosh, cosh, coshf)
EW_FLOAT_UNARY(sin, sin, sinf)
EW_FLOAT_UNARY(sinh, sinh, sinhf)
EW_FLOAT_UNARY(tan, tan, tanf)
EW_FLOAT_UNARY(erf, erf, erff)
EW_FLOAT_UNARY(exp, exp, expf)
EW_FLOAT_UNARY(expm1, expm1, expm1f)
EW_FLOAT_UNARY(log, log, logf)
EW_FLOAT_UNARY(log10, log10, log10f)
EW_FLOAT_UNARY(log1p, log1p, log1pf)
EW_FLOAT_UNARY(log2, log2, log2f)
EW_FLOAT_UNARY(sqrt, sqrt, sqrtf)
EW_FLOAT_UNARY(rsqrt, m_rsqrt, m_rsqrtf)
EW_FLOAT_UNARY(reciprocal, m_reciprocal, m_reciprocalf)
EW_FLOAT_UNARY(exp2, exp2, exp2f)
EW_FLOAT_UNARY(erfc, erfc, erfcf)
EW_FLOAT_UNARY(lgamma, lgamma, NULL)

static double m_sinc(double x) {
  if (x == 0) return 1.0;
  double px = 3.14159265358979323846 * x;
  return sin(px) / px;
}
EW_FLOAT_UNARY(sinc, m_sinc, NULL)

/* ---- same-dtype ops ---- */

enum { U_ABS, U_NEG, U_SIGN, U_CEIL, U_FLOOR, U_ROUND, U_TRUNC, U_COPY, U_FRAC, U_ROUND_DEC };

static ew_val f_same(const ew_val *x, ew_op *op) {
  ew_val r;
  if (op->fp) {
    double a = x[0].f;
    switch (op->mode) {
    case U_ABS: r.f = fabs(a); break;
    case U_NEG: r.f = -a; break;
    case U_SIGN: r.f = (double)((0 < a) - (a < 0)); break;
    case U_CEIL: r.f = ceil(a); break;
    case U_FLOOR: r.f = floor(a); break;
    case U_ROUND: r.f = nearbyint(a); break;
    case U_TRUNC: r.f = trunc(a); break;
    case U_FRAC: r.f = a - trunc(a); break;
    case U_ROUND_DEC: /* ATen round(decimals): scale by 10^|d|, round half to even, unscale */
      r.f = op->p[1].i ? nearbyint(a / op->p[0].f) * op->p[0].f
                       : nearbyint(a * op->p[0].f) / op->p[0].f;
      break;
    default: r.f = a; break;
    }
  } else {
    int64_t a = x[0].i;
    switch (op->mode) {
    case U_ABS: r.i = a < 0 ? ew_sub_i64(0, a) : a; break;
    case U_NEG: r.i = ew_sub_i64(0, a); break;
    case U_SIGN: r.i = (0 < a) - (a < 0); break;
    default: r.i = a; break;
    }
  }
  return r;
}

/* neg and abs on the all-f32 path: exactly -a and fabs(a), as f_same computes them. */
static float f32_same(const float *x, const ew_op *op) {
  return op->mode == U_NEG ? -x[0] : fabsf(x[0]);
}
EW_F32_ROW_UNARY(row_neg, -A)
EW_F32_ROW_UNARY(row_abs, fabsf(A))

static em_status unary_same(em_kernel_ctx *ctx, em_evalue **args, int mode, bool allow_bool) {
  EW_TENSOR_ARG(self, ctx, args, 0);
  em_tensor *out = EM_ARG_TENSOR(args, 1);
  EM_KCHECK(ctx, out && ew_dtype_is_real_or_bool(out->dtype), "out must be a real or bool tensor");
  int d = self->dtype;
  EM_KCHECK(ctx, allow_bool || d != EM_DTYPE_BOOL, "not supported for bool tensors");
  EM_KCHECK(ctx, ew_can_cast(d, out->dtype), "result dtype %s can't be cast to out %s",
            em_dtype_name(d), em_dtype_name(out->dtype));
  ew_op op;
  ew_op_init(&op, d, d);
  op.mode = mode;
  if (mode == U_NEG || mode == U_ABS) {
    op.f32 = f32_same;
    op.f32_row = mode == U_NEG ? row_neg : row_abs;
    op.f32_row_cheap = true;
  }
  ew_in in[1] = {ew_in_tensor(self, d)};
  return ew_map(ctx, out, in, 1, f_same, &op);
}

em_status em_frac_out(em_kernel_ctx *ctx, em_evalue **args) {
  EW_TENSOR_ARG(self, ctx, args, 0);
  EM_KCHECK(ctx, em_dtype_is_float(self->dtype), "frac needs a floating input, got %s",
            em_dtype_name(self->dtype));
  return unary_same(ctx, args, U_FRAC, false);
}

em_status em_sgn_out(em_kernel_ctx *ctx, em_evalue **args) {
  return unary_same(ctx, args, U_SIGN, true);
}

/* round.decimals_out: [self, decimals, out, out]. */
em_status em_round_decimals_out(em_kernel_ctx *ctx, em_evalue **args) {
  EW_TENSOR_ARG(self, ctx, args, 0);
  em_tensor *out = EM_ARG_TENSOR(args, 2);
  int64_t dec;
  EM_KCHECK(ctx, em_arg_int(args[1], &dec), "decimals must be an int");
  EM_KCHECK(ctx, out && ew_dtype_is_real_or_bool(out->dtype), "out must be a real or bool tensor");
  int d = self->dtype;
  EM_KCHECK(ctx, em_dtype_is_float(d), "round with decimals needs a floating input, got %s",
            em_dtype_name(d));
  EM_KCHECK(ctx, ew_can_cast(d, out->dtype), "result dtype %s can't be cast to out %s",
            em_dtype_name(d), em_dtype_name(out->dtype));
  ew_op op;
  ew_op_init(&op, d, d);
  op.mode = U_ROUND_DEC;
  op.p[1].i = dec < 0;
  double ten = pow(10.0, (double)(dec < 0 ? -dec : dec));
  op.p[0].f = d == EM_DTYPE_F64 ? ten : (double)(float)ten;
  ew_in in[1] = {ew_in_tensor(self, d)};
  return ew_map(ctx, out, in, 1, f_same, &op);
}

em_status em_abs_out(em_kernel_ctx *ctx, em_evalue **args) {
  return unary_same(ctx, args, U_ABS, false);
}
em_status em_neg_out(em_kernel_ctx *ctx, em_evalue **args) {
  return unary_same(ctx, args, U_NEG, false);
}
em_status em_sign_out(em_kernel_ctx *ctx, em_evalue **args) {
  return unary_same(ctx, args, U_SIGN, true);
}
em_status em_ceil_out(em_kernel_ctx *ctx, em_evalue **args) {
  return unary_same(ctx, args, U_CEIL, false);
}
em_status em_floor_out(em_kernel_ctx *ctx, em_evalue **args) {
  return unary_same(ctx, args, U_FLOOR, false);
}
em_status em_round_out(em_kernel_ctx *ctx, em_evalue **args) {
  return unary_same(ctx, args, U_ROUND, false);
}
em_status em_trunc_out(em_kernel_ctx *ctx, em_evalue **args) {
  return unary_same(ctx, args, U_TRUNC, false);
}
em_status em_conj_physical_out(em_kernel_ctx *ctx, em_evalue **args) {
  return unary_same(ctx, args, U_COPY, true);
}

/* ---- bool results ---- */

static ew_val f_isx(const ew_val *x, ew_op *op) {
  ew_val r;
  double a = x[0].f;
  switch (op->mode) {
  case 0: r.i = op->fp && isinf(a); break;
  case 1: r.i = op->fp && isnan(a); break;
  case 2: r.i = op->fp && a == INFINITY; break;
  case 3: r.i = op->fp && a == -INFINITY; break;
  default: r.i = op->fp ? signbit(a) != 0 : x[0].i < 0; break;
  }
  return r;
}

static em_status unary_bool(em_kernel_ctx *ctx, em_evalue **args, int mode) {
  EW_TENSOR_ARG(self, ctx, args, 0);
  em_tensor *out = EM_ARG_TENSOR(args, 1);
  EM_KCHECK(ctx, out && ew_dtype_is_real_or_bool(out->dtype), "out must be a real or bool tensor");
  ew_op op;
  int d = em_dtype_is_float(self->dtype) ? self->dtype : EM_DTYPE_I64;
  ew_op_init(&op, d, EM_DTYPE_BOOL);
  op.mode = mode;
  ew_in in[1] = {ew_in_tensor(self, d)};
  return ew_map(ctx, out, in, 1, f_isx, &op);
}

em_status em_isinf_out(em_kernel_ctx *ctx, em_evalue **args) { return unary_bool(ctx, args, 0); }
em_status em_isnan_out(em_kernel_ctx *ctx, em_evalue **args) { return unary_bool(ctx, args, 1); }
em_status em_isposinf_out(em_kernel_ctx *ctx, em_evalue **args) { return unary_bool(ctx, args, 2); }
em_status em_isneginf_out(em_kernel_ctx *ctx, em_evalue **args) { return unary_bool(ctx, args, 3); }
em_status em_signbit_out(em_kernel_ctx *ctx, em_evalue **args) { return unary_bool(ctx, args, 4); }

/* ---- nan_to_num ---- */

static ew_val f_nan_to_num(const ew_val *x, ew_op *op) {
  ew_val r = x[0];
  if (!op->fp) return r;
  if (r.f != r.f)
    r.f = op->p[0].f;
  else if (r.f == INFINITY)
    r.f = op->p[1].f;
  else if (r.f == -INFINITY)
    r.f = op->p[2].f;
  return r;
}

/* Largest finite value of a floating dtype. */
static double float_max(int d) {
  switch (d) {
  case EM_DTYPE_F16: return 65504.0;
  case EM_DTYPE_BF16: return 3.3895313892515355e38;
  case EM_DTYPE_F32: return 3.4028234663852886e38;
  default: return 1.7976931348623157e308;
  }
}

/* nan_to_num.out: [self, nan?, posinf?, neginf?, out, out]. */
em_status em_nan_to_num_out(em_kernel_ctx *ctx, em_evalue **args) {
  EW_TENSOR_ARG(self, ctx, args, 0);
  em_tensor *out = EM_ARG_TENSOR(args, 4);
  EM_KCHECK(ctx, out && ew_dtype_is_real_or_bool(out->dtype), "out must be a real or bool tensor");
  int d = self->dtype;
  EM_KCHECK(ctx, ew_can_cast(d, out->dtype), "result dtype %s can't be cast to out %s",
            em_dtype_name(d), em_dtype_name(out->dtype));
  ew_op op;
  ew_op_init(&op, d, d);
  double defaults[3] = {0.0, float_max(d), -float_max(d)};
  for (int k = 0; k < 3; k++) {
    op.p[k].f = defaults[k];
    if (args[1 + k]->tag != EM_TAG_NONE)
      EM_KCHECK(ctx, em_arg_double(args[1 + k], &op.p[k].f), "nan/posinf/neginf must be floats");
  }
  ew_in in[1] = {ew_in_tensor(self, d)};
  return ew_map(ctx, out, in, 1, f_nan_to_num, &op);
}
