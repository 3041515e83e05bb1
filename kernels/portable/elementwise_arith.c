/*
 * elementwise_arith.c — binary arithmetic: add, sub, rsub, mul, div (all
 * rounding modes), floor_divide, fmod, remainder, pow, maximum, minimum,
 * fmax, fmin, atan2, hypot, logaddexp, copysign, xlogy.
 *
 * Dtypes follow ATen: the operands promote with torch.result_type (0-dim
 * tensors and Python scalars rank below dimensioned tensors), are cast to that
 * common dtype, the op computes in double (floats, rounded to the common dtype
 * like ATen's opmath) or wrapping int64 (integers, wrapped to the common dtype),
 * and the result is cast to `out`, which must be castable from it.
 */
#include <math.h>

#include "portable/ew_util.h"

/* Rounds an intermediate like ATen's opmath type: f32 for f16/bf16/f32, f64 for f64. */
static double opm(double v, int common) { return common == EM_DTYPE_F64 ? v : (double)(float)v; }

static em_status check_out_cast(em_kernel_ctx *ctx, int from, const em_tensor *out) {
  EM_KCHECK(ctx, ew_can_cast(from, out->dtype), "result dtype %s can't be cast to out dtype %s",
            em_dtype_name(from), em_dtype_name(out->dtype));
  return EM_OK;
}

/* Checks that args[0] / args[1] are a tensor (true) or a Scalar (false). */
static em_status kinds(em_kernel_ctx *ctx, em_evalue **args, bool t0, bool t1) {
  bool want[2] = {t0, t1};
  for (int k = 0; k < 2; k++) {
    if (want[k])
      EM_KCHECK(ctx, EM_ARG_TENSOR(args, k), "argument %d must be a tensor", k);
    else
      EM_KCHECK(ctx, ew_is_scalar(args[k]), "argument %d must be a scalar", k);
  }
  return EM_OK;
}

/* Checks alpha against the common dtype as ATen's alpha_check does. */
static em_status check_alpha(em_kernel_ctx *ctx, const em_evalue *alpha, int common) {
  EM_KCHECK(ctx, ew_is_scalar(alpha), "alpha must be a scalar");
  EM_KCHECK(ctx, alpha->tag != EM_TAG_BOOL || common == EM_DTYPE_BOOL,
            "boolean alpha only supported for boolean results");
  EM_KCHECK(ctx, em_dtype_is_float(common) || alpha->tag != EM_TAG_DOUBLE,
            "for integral inputs, alpha must not be a floating point number");
  return EM_OK;
}

/* ---- add / sub / rsub / mul ---- */

static ew_val f_add(const ew_val *x, ew_op *op) {
  ew_val r;
  if (op->fp)
    r.f = x[0].f + op->p[0].f * x[1].f;
  else
    r.i = ew_add_i64(x[0].i, ew_mul_i64(op->p[0].i, x[1].i));
  return r;
}

static float f32_add(const float *x, const ew_op *op) { return x[0] + (float)op->p[0].f * x[1]; }
static float f32_mul(const float *x, const ew_op *op) {
  (void)op;
  return x[0] * x[1];
}
static float f32_div(const float *x, const ew_op *op) {
  (void)op;
  return x[0] / x[1];
}

/* Row forms of f32_add (alpha 1 and -1 written out: x + 1*y == x + y and x + (-1*y) == x - y
 * exactly), f32_mul and f32_div. */
EW_F32_ROW_BINARY(row_add1, A + B)
EW_F32_ROW_BINARY(row_sub1, A - B)
EW_F32_ROW_BINARY(row_add, A + (float)op->p[0].f * B)
EW_F32_ROW_BINARY(row_mul, A *B)
EW_F32_ROW_BINARY(row_div, A / B)

/* out = x + sign * alpha * y, for add (sign 1, swap 0), sub (-1, 0) and rsub (-1, 1). */
static em_status add_like(em_kernel_ctx *ctx, em_evalue **args, int sign, bool swap) {
  ew_bin b;
  EM_KTRY(ew_bin_setup(ctx, args[0], args[1], args[3], &b));
  if (sign < 0) {
    bool any_bool = ew_operand_dtype(b.a, b.as) == EM_DTYPE_BOOL ||
                    ew_operand_dtype(b.b, b.bs) == EM_DTYPE_BOOL;
    EM_KCHECK(ctx, !any_bool, "subtraction with a bool tensor is not supported");
  }
  EM_KTRY(check_alpha(ctx, args[2], b.common));
  EM_KTRY(check_out_cast(ctx, b.common, b.out));
  ew_op op;
  ew_op_init(&op, b.common, b.common);
  op.p[0] = ew_scalar_val(args[2], b.common);
  if (sign < 0) {
    if (op.fp)
      op.p[0].f = -op.p[0].f;
    else
      op.p[0].i = ew_sub_i64(0, op.p[0].i);
  }
  ew_in in[2];
  ew_bin_ins(&b, b.common, in);
  if (swap) {
    ew_in t = in[0];
    in[0] = in[1];
    in[1] = t;
  }
  op.f32 = f32_add;
  float alpha = (float)op.p[0].f;
  op.f32_row = alpha == 1.0f ? row_add1 : alpha == -1.0f ? row_sub1 : row_add;
  op.f32_row_cheap = true;
  return ew_map(ctx, b.out, in, 2, f_add, &op);
}

em_status em_add_out(em_kernel_ctx *ctx, em_evalue **args) {
  EM_KTRY(kinds(ctx, args, true, true));
  return add_like(ctx, args, 1, false);
}
em_status em_add_scalar_out(em_kernel_ctx *ctx, em_evalue **args) {
  EM_KTRY(kinds(ctx, args, true, false));
  return add_like(ctx, args, 1, false);
}
em_status em_sub_out(em_kernel_ctx *ctx, em_evalue **args) {
  EM_KTRY(kinds(ctx, args, true, true));
  return add_like(ctx, args, -1, false);
}
em_status em_sub_scalar_out(em_kernel_ctx *ctx, em_evalue **args) {
  EM_KTRY(kinds(ctx, args, true, false));
  return add_like(ctx, args, -1, false);
}
em_status em_rsub_scalar_out(em_kernel_ctx *ctx, em_evalue **args) {
  EM_KTRY(kinds(ctx, args, true, false));
  return add_like(ctx, args, -1, true);
}

/* Generic binary op with out = fn(self, other) in the common dtype (res = common or `res`). */
static ew_val f_mul(const ew_val *x, ew_op *op) {
  ew_val r;
  if (op->fp)
    r.f = x[0].f * x[1].f;
  else
    r.i = ew_mul_i64(x[0].i, x[1].i);
  return r;
}

static ew_val f_fmod(const ew_val *x, ew_op *op);
static ew_val f_pow(const ew_val *x, ew_op *op);
static ew_val f_maxmin(const ew_val *x, ew_op *op);

/* f_maxmin on f32 operands: NaN (the constant) when either is NaN, else the larger (mode 0) or
 * smaller one, as the generic loop's double comparison picks it. */
static inline float maxmin_f32(float a, float b, int mode) {
  if (a != a || b != b) return NAN;
  return mode ? (a < b ? a : b) : (a > b ? a : b);
}
static float f32_maxmin(const float *x, const ew_op *op) {
  return maxmin_f32(x[0], x[1], op->mode);
}
EW_F32_ROW_BINARY(row_maxmin, maxmin_f32(A, B, op->mode))

/* f_pow on f32 operands rounded to f32, as the generic loop computes it; x ** 2 is a * a (the
 * double square of a float is exact, so one rounding of either gives the same float). */
static float pow_f32(float a, float b) {
  return b == 2.0f ? a * a : (float)pow((double)a, (double)b);
}
static float f32_pow(const float *x, const ew_op *op) {
  (void)op;
  return pow_f32(x[0], x[1]);
}
EW_F32_ROW_BINARY(row_pow, pow_f32(A, B))

static em_status binary(em_kernel_ctx *ctx, em_evalue **args, ew_fn fn, bool float_result,
                        int mode) {
  ew_bin b;
  EM_KTRY(ew_bin_setup(ctx, args[0], args[1], args[2], &b));
  int common = b.common;
  if (float_result && !em_dtype_is_float(common)) common = EM_DTYPE_F32;
  EM_KTRY(check_out_cast(ctx, common, b.out));
  ew_op op;
  ew_op_init(&op, common, common);
  op.mode = mode;
  if (fn == f_mul) {
    op.f32 = f32_mul;
    op.f32_row = row_mul;
    op.f32_row_cheap = true;
  } else if (fn == f_maxmin) {
    op.f32 = f32_maxmin;
    op.f32_row = row_maxmin;
    op.f32_row_cheap = true;
  } else if (fn == f_pow) {
    op.f32 = f32_pow;
    op.f32_row = row_pow;
    double e = 0;
    op.f32_row_cheap = !b.b && em_arg_double(b.bs, &e) && e == 2.0; /* a * a */
  }
  ew_in in[2];
  if (fn == f_fmod)
    ew_bin_ins_exact(&b, common, in);
  else
    ew_bin_ins(&b, common, in);
  return ew_map(ctx, b.out, in, 2, fn, &op);
}

em_status em_mul_out(em_kernel_ctx *ctx, em_evalue **args) {
  EM_KTRY(kinds(ctx, args, true, true));
  return binary(ctx, args, f_mul, false, 0);
}
em_status em_mul_scalar_out(em_kernel_ctx *ctx, em_evalue **args) {
  EM_KTRY(kinds(ctx, args, true, false));
  return binary(ctx, args, f_mul, false, 0);
}

/* ---- division family ---- */

enum { DIV_TRUE, DIV_TRUNC, DIV_FLOOR };

/* Python-style floor division of floats (ATen div_floor_floating). */
static double floor_div_f(double a, double b, int c) {
  if (b == 0) return a / b;
  double mod = fmod(a, b);
  double div = opm(opm(a - mod, c) / b, c);
  if (mod != 0 && (b < 0) != (mod < 0)) div = opm(div - 1, c);
  if (div != 0) {
    double fl = floor(div);
    if (opm(div - fl, c) > 0.5) fl += 1.0;
    return fl;
  }
  return copysign(0.0, a / b);
}

static int64_t floor_div_i(int64_t a, int64_t b) {
  if (b == -1) return ew_sub_i64(0, a);
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) q--;
  return q;
}

static ew_val f_div(const ew_val *x, ew_op *op) {
  ew_val r;
  if (op->fp) {
    double a = x[0].f, b = x[1].f;
    if (op->mode == DIV_TRUE)
      r.f = a / b;
    else if (op->mode == DIV_TRUNC)
      r.f = trunc(opm(a / b, op->common));
    else
      r.f = floor_div_f(a, b, op->common);
    return r;
  }
  int64_t a = x[0].i, b = x[1].i;
  if (b == 0) {
    op->err = true;
    op->errmsg = "ZeroDivisionError (integer division by zero)";
    r.i = 0;
  } else if (op->mode == DIV_TRUNC) {
    r.i = b == -1 ? ew_sub_i64(0, a) : a / b;
  } else {
    r.i = floor_div_i(a, b);
  }
  return r;
}

/* Parses a `str? rounding_mode` argument. */
static em_status parse_mode(em_kernel_ctx *ctx, const em_evalue *v, int *mode) {
  if (v->tag == EM_TAG_NONE) {
    *mode = DIV_TRUE;
    return EM_OK;
  }
  EM_KCHECK(ctx, v->tag == EM_TAG_STRING, "rounding_mode must be a string or None");
  if (v->u.str.len == 5 && memcmp(v->u.str.ptr, "trunc", 5) == 0)
    *mode = DIV_TRUNC;
  else if (v->u.str.len == 5 && memcmp(v->u.str.ptr, "floor", 5) == 0)
    *mode = DIV_FLOOR;
  else
    EM_KCHECK(ctx, false, "rounding_mode must be 'trunc', 'floor' or None");
  return EM_OK;
}

static em_status div_mode(em_kernel_ctx *ctx, em_evalue **args, int mode, int out_i) {
  ew_bin b;
  EM_KTRY(ew_bin_setup(ctx, args[0], args[1], args[out_i], &b));
  int common = b.common;
  if (mode == DIV_TRUE && !em_dtype_is_float(common)) common = EM_DTYPE_F32;
  EM_KTRY(check_out_cast(ctx, common, b.out));
  ew_op op;
  ew_op_init(&op, common, common);
  op.mode = mode;
  if (mode == DIV_TRUE) {
    op.f32 = f32_div;
    op.f32_row = row_div;
    op.f32_row_cheap = true;
  }
  ew_in in[2];
  ew_bin_ins(&b, common, in);
  return ew_map(ctx, b.out, in, 2, f_div, &op);
}

em_status em_div_out(em_kernel_ctx *ctx, em_evalue **args) {
  EM_KTRY(kinds(ctx, args, true, true));
  return div_mode(ctx, args, DIV_TRUE, 2);
}
em_status em_div_scalar_out(em_kernel_ctx *ctx, em_evalue **args) {
  EM_KTRY(kinds(ctx, args, true, false));
  return div_mode(ctx, args, DIV_TRUE, 2);
}
em_status em_div_out_mode(em_kernel_ctx *ctx, em_evalue **args) {
  EM_KTRY(kinds(ctx, args, true, true));
  int mode;
  EM_KTRY(parse_mode(ctx, args[2], &mode));
  return div_mode(ctx, args, mode, 3);
}
em_status em_div_scalar_mode_out(em_kernel_ctx *ctx, em_evalue **args) {
  EM_KTRY(kinds(ctx, args, true, false));
  int mode;
  EM_KTRY(parse_mode(ctx, args[2], &mode));
  return div_mode(ctx, args, mode, 3);
}
em_status em_floor_divide_out(em_kernel_ctx *ctx, em_evalue **args) {
  EM_KTRY(kinds(ctx, args, true, true));
  return div_mode(ctx, args, DIV_FLOOR, 2);
}

/* ---- fmod / remainder ---- */

static ew_val f_fmod(const ew_val *x, ew_op *op) {
  ew_val r;
  if (op->fp) {
    r.f = fmod(x[0].f, x[1].f);
    if (op->mode && r.f != 0 && ((x[1].f < 0) != (r.f < 0))) r.f = opm(r.f + x[1].f, op->common);
    return r;
  }
  int64_t a = x[0].i, b = x[1].i;
  if (b == 0) {
    op->err = true;
    op->errmsg = "ZeroDivisionError (integer modulo by zero)";
    r.i = 0;
    return r;
  }
  r.i = b == -1 ? 0 : a % b;
  if (op->mode && r.i != 0 && ((r.i < 0) != (b < 0))) r.i += b;
  return r;
}

em_status em_fmod_tensor_out(em_kernel_ctx *ctx, em_evalue **args) {
  EM_KTRY(kinds(ctx, args, true, true));
  return binary(ctx, args, f_fmod, false, 0);
}
em_status em_fmod_scalar_out(em_kernel_ctx *ctx, em_evalue **args) {
  EM_KTRY(kinds(ctx, args, true, false));
  return binary(ctx, args, f_fmod, false, 0);
}
em_status em_remainder_tensor_out(em_kernel_ctx *ctx, em_evalue **args) {
  EM_KTRY(kinds(ctx, args, true, true));
  return binary(ctx, args, f_fmod, false, 1);
}
em_status em_remainder_scalar_out(em_kernel_ctx *ctx, em_evalue **args) {
  EM_KTRY(kinds(ctx, args, true, false));
  return binary(ctx, args, f_fmod, false, 1);
}

/* ---- pow ---- */

/* Integer power as ATen's powi (negative exponents give 0, or ±1 for bases ±1). */
static int64_t powi(int64_t a, int64_t b) {
  if (b < 0) {
    if (a == 1) return 1;
    if (a == -1) return (b % 2) ? -1 : 1;
    return 0;
  }
  int64_t r = 1;
  while (b) {
    if (b & 1) r = ew_mul_i64(r, a);
    b /= 2;
    a = ew_mul_i64(a, a);
  }
  return r;
}

static ew_val f_pow(const ew_val *x, ew_op *op) {
  ew_val r;
  if (op->fp)
    r.f = pow(x[0].f, x[1].f);
  else
    r.i = powi(x[0].i, x[1].i);
  return r;
}

/* pow has no bool kernel in ATen. */
static em_status pow_common_ok(em_kernel_ctx *ctx, em_evalue **args) {
  ew_bin b;
  EM_KTRY(ew_bin_setup(ctx, args[0], args[1], args[2], &b));
  EM_KCHECK(ctx, b.common != EM_DTYPE_BOOL, "pow is not implemented for bool");
  return EM_OK;
}

em_status em_pow_tensor_tensor_out(em_kernel_ctx *ctx, em_evalue **args) {
  EM_KTRY(kinds(ctx, args, true, true));
  EM_KTRY(pow_common_ok(ctx, args));
  return binary(ctx, args, f_pow, false, 0);
}

em_status em_pow_tensor_scalar_out(em_kernel_ctx *ctx, em_evalue **args) {
  EM_KTRY(kinds(ctx, args, true, false));
  EM_KTRY(pow_common_ok(ctx, args));
  ew_bin b;
  EM_KTRY(ew_bin_setup(ctx, args[0], args[1], args[2], &b));
  EM_KCHECK(ctx,
            !b.a || em_dtype_is_float(b.common) || args[1]->tag != EM_TAG_INT || args[1]->u.i >= 0,
            "integers to negative integer powers are not allowed");
  return binary(ctx, args, f_pow, false, 0);
}

em_status em_pow_scalar_out(em_kernel_ctx *ctx, em_evalue **args) {
  EM_KTRY(kinds(ctx, args, false, true));
  EM_KTRY(pow_common_ok(ctx, args));
  return binary(ctx, args, f_pow, false, 0);
}

/* ---- maximum / minimum / atan2 ---- */

static ew_val f_maxmin(const ew_val *x, ew_op *op) {
  ew_val r;
  if (op->fp) {
    double a = x[0].f, b = x[1].f;
    if (a != a || b != b)
      r.f = NAN;
    else
      r.f = op->mode ? (a < b ? a : b) : (a > b ? a : b);
  } else {
    int64_t a = x[0].i, b = x[1].i;
    r.i = op->mode ? (a < b ? a : b) : (a > b ? a : b);
  }
  return r;
}

em_status em_maximum_out(em_kernel_ctx *ctx, em_evalue **args) {
  EM_KTRY(kinds(ctx, args, true, true));
  return binary(ctx, args, f_maxmin, false, 0);
}
em_status em_minimum_out(em_kernel_ctx *ctx, em_evalue **args) {
  EM_KTRY(kinds(ctx, args, true, true));
  return binary(ctx, args, f_maxmin, false, 1);
}

static ew_val f_atan2(const ew_val *x, ew_op *op) {
  (void)op;
  ew_val r;
  r.f = atan2(x[0].f, x[1].f);
  return r;
}

em_status em_atan2_out(em_kernel_ctx *ctx, em_evalue **args) {
  EM_KTRY(kinds(ctx, args, true, true));
  return binary(ctx, args, f_atan2, true, 0);
}

/* ---- fmax / fmin / hypot / logaddexp / copysign / xlogy ---- */

enum { F_FMAX, F_FMIN, F_HYPOT, F_LOGADDEXP, F_COPYSIGN, F_XLOGY };

static ew_val f_misc(const ew_val *x, ew_op *op) {
  ew_val r;
  if (!op->fp) { /* fmax / fmin on integers */
    r.i = op->mode == F_FMAX ? (x[0].i > x[1].i ? x[0].i : x[1].i)
                             : (x[0].i < x[1].i ? x[0].i : x[1].i);
    return r;
  }
  double a = x[0].f, b = x[1].f;
  switch (op->mode) {
  case F_FMAX: r.f = fmax(a, b); break;
  case F_FMIN: r.f = fmin(a, b); break;
  case F_HYPOT: r.f = hypot(a, b); break;
  case F_LOGADDEXP: {
    double m = fmax(a, b);
    r.f = (isinf(m) && a == b) ? a : m + log1p(exp(-fabs(a - b)));
    break;
  }
  case F_COPYSIGN: r.f = copysign(a, b); break;
  default: r.f = b != b ? NAN : a == 0 ? 0.0 : a * log(b); break;
  }
  return r;
}

/* A binary op with float results (ints promote to f32) or, for fmax/fmin, the common dtype. */
static em_status misc(em_kernel_ctx *ctx, em_evalue **args, int mode) {
  EM_KTRY(kinds(ctx, args, true, true));
  ew_bin b;
  EM_KTRY(ew_bin_setup(ctx, args[0], args[1], args[2], &b));
  bool float_result = mode != F_FMAX && mode != F_FMIN;
  if (mode == F_HYPOT || mode == F_LOGADDEXP)
    EM_KCHECK(ctx, em_dtype_is_float(b.common), "not implemented for %s", em_dtype_name(b.common));
  return binary(ctx, args, f_misc, float_result, mode);
}

em_status em_fmax_out(em_kernel_ctx *ctx, em_evalue **args) { return misc(ctx, args, F_FMAX); }
em_status em_fmin_out(em_kernel_ctx *ctx, em_evalue **args) { return misc(ctx, args, F_FMIN); }
em_status em_hypot_out(em_kernel_ctx *ctx, em_evalue **args) { return misc(ctx, args, F_HYPOT); }
em_status em_logaddexp_out(em_kernel_ctx *ctx, em_evalue **args) {
  return misc(ctx, args, F_LOGADDEXP);
}
em_status em_copysign_out(em_kernel_ctx *ctx, em_evalue **args) {
  return misc(ctx, args, F_COPYSIGN);
}
em_status em_xlogy_outtensor(em_kernel_ctx *ctx, em_evalue **args) {
  return misc(ctx, args, F_XLOGY);
}
