/*
 * prim_scalar.c — executorch_prim scalar ops on Int / Double / Bool values.
 *
 * Functional: the last argument is the result value, which the op overwrites.
 * Python semantics: Int op Int stays Int (wrapping on overflow), anything with
 * a Double gives a Double, truediv always gives a Double, floordiv floors and
 * mod takes the sign of the divisor; integer division by zero is an error.
 */
#include <math.h>

#include "portable/kutil.h"

static bool is_num(const em_evalue *v) {
  return v->tag == EM_TAG_INT || v->tag == EM_TAG_DOUBLE || v->tag == EM_TAG_BOOL;
}
static bool is_intlike(const em_evalue *v) { return v->tag == EM_TAG_INT || v->tag == EM_TAG_BOOL; }
static int64_t as_int(const em_evalue *v) { return v->tag == EM_TAG_BOOL ? v->u.b : v->u.i; }
static double as_double(const em_evalue *v) {
  return v->tag == EM_TAG_DOUBLE ? v->u.d : (double)as_int(v);
}

static void set_int(em_evalue *r, int64_t v) {
  r->tag = EM_TAG_INT;
  r->u.i = v;
}
static void set_double(em_evalue *r, double v) {
  r->tag = EM_TAG_DOUBLE;
  r->u.d = v;
}
static void set_bool(em_evalue *r, bool v) {
  r->tag = EM_TAG_BOOL;
  r->u.b = v;
}

/* Python's float floor division. */
static double py_floordiv_f(double a, double b) {
  if (b == 0) return a / b;
  double mod = fmod(a, b);
  double div = (a - mod) / b;
  if (mod != 0 && (b < 0) != (mod < 0)) div -= 1.0;
  if (div == 0) return copysign(0.0, a / b);
  double fl = floor(div);
  if (div - fl > 0.5) fl += 1.0;
  return fl;
}

static double py_mod_f(double a, double b) {
  double m = fmod(a, b);
  if (m != 0) {
    if ((b < 0) != (m < 0)) m += b;
  } else {
    m = copysign(0.0, b);
  }
  return m;
}

enum { P_ADD, P_SUB, P_MUL, P_TRUEDIV, P_FLOORDIV, P_MOD, P_MAX, P_MIN };

static em_status arith(em_kernel_ctx *ctx, em_evalue **args, int op, bool int_only) {
  const em_evalue *a = args[0], *b = args[1];
  EM_KCHECK(ctx, is_num(a) && is_num(b), "operands must be Int, Double or Bool");
  if (int_only) EM_KCHECK(ctx, is_intlike(a) && is_intlike(b), "operands must be Int");
  if (is_intlike(a) && is_intlike(b) && op != P_TRUEDIV) {
    int64_t x = as_int(a), y = as_int(b), r = 0;
    switch (op) {
    case P_ADD: r = (int64_t)((uint64_t)x + (uint64_t)y); break;
    case P_SUB: r = (int64_t)((uint64_t)x - (uint64_t)y); break;
    case P_MUL: r = (int64_t)((uint64_t)x * (uint64_t)y); break;
    case P_MAX: r = x > y ? x : y; break;
    case P_MIN: r = x < y ? x : y; break;
    default:
      EM_KCHECK(ctx, y != 0, "integer division or modulo by zero");
      if (y == -1) {
        r = op == P_FLOORDIV ? (int64_t)(0 - (uint64_t)x) : 0;
      } else if (op == P_FLOORDIV) {
        r = x / y;
        if (x % y != 0 && ((x < 0) != (y < 0))) r--;
      } else {
        r = x % y;
        if (r != 0 && ((r < 0) != (y < 0))) r += y;
      }
    }
    set_int(args[2], r);
    return EM_OK;
  }
  double x = as_double(a), y = as_double(b), r;
  switch (op) {
  case P_ADD: r = x + y; break;
  case P_SUB: r = x - y; break;
  case P_MUL: r = x * y; break;
  case P_TRUEDIV: r = x / y; break;
  case P_FLOORDIV: r = py_floordiv_f(x, y); break;
  case P_MOD: r = py_mod_f(x, y); break;
  case P_MAX: r = (x != x || y != y) ? NAN : (x > y ? x : y); break;
  default: r = (x != x || y != y) ? NAN : (x < y ? x : y); break;
  }
  set_double(args[2], r);
  return EM_OK;
}

em_status em_prim_add_scalar(em_kernel_ctx *ctx, em_evalue **args) {
  return arith(ctx, args, P_ADD, false);
}
em_status em_prim_sub_scalar(em_kernel_ctx *ctx, em_evalue **args) {
  return arith(ctx, args, P_SUB, false);
}
em_status em_prim_mul_scalar(em_kernel_ctx *ctx, em_evalue **args) {
  return arith(ctx, args, P_MUL, false);
}
em_status em_prim_truediv_scalar(em_kernel_ctx *ctx, em_evalue **args) {
  return arith(ctx, args, P_TRUEDIV, false);
}
em_status em_prim_floordiv_scalar(em_kernel_ctx *ctx, em_evalue **args) {
  return arith(ctx, args, P_FLOORDIV, false);
}
em_status em_prim_mod_scalar(em_kernel_ctx *ctx, em_evalue **args) {
  return arith(ctx, args, P_MOD, false);
}
em_status em_prim_sym_max_scalar(em_kernel_ctx *ctx, em_evalue **args) {
  return arith(ctx, args, P_MAX, false);
}
em_status em_prim_sym_min_scalar(em_kernel_ctx *ctx, em_evalue **args) {
  return arith(ctx, args, P_MIN, false);
}
em_status em_prim_floordiv_int(em_kernel_ctx *ctx, em_evalue **args) {
  return arith(ctx, args, P_FLOORDIV, true);
}
em_status em_prim_mod_int(em_kernel_ctx *ctx, em_evalue **args) {
  return arith(ctx, args, P_MOD, true);
}

enum { C_EQ, C_GT, C_GE, C_LT, C_LE };

static em_status compare(em_kernel_ctx *ctx, em_evalue **args, int op) {
  const em_evalue *a = args[0], *b = args[1];
  EM_KCHECK(ctx, is_num(a) && is_num(b), "operands must be Int, Double or Bool");
  int c; /* -1, 0, 1, or 2 for unordered */
  if (is_intlike(a) && is_intlike(b)) {
    int64_t x = as_int(a), y = as_int(b);
    c = x < y ? -1 : x > y;
  } else {
    double x = as_double(a), y = as_double(b);
    c = (x != x || y != y) ? 2 : x < y ? -1 : x > y;
  }
  bool r;
  switch (op) {
  case C_EQ: r = c == 0; break;
  case C_GT: r = c == 1; break;
  case C_GE: r = c == 1 || c == 0; break;
  case C_LT: r = c == -1; break;
  default: r = c == -1 || c == 0; break;
  }
  set_bool(args[2], r);
  return EM_OK;
}

em_status em_prim_eq_scalar(em_kernel_ctx *ctx, em_evalue **args) {
  return compare(ctx, args, C_EQ);
}
em_status em_prim_gt_scalar(em_kernel_ctx *ctx, em_evalue **args) {
  return compare(ctx, args, C_GT);
}
em_status em_prim_ge_scalar(em_kernel_ctx *ctx, em_evalue **args) {
  return compare(ctx, args, C_GE);
}
em_status em_prim_lt_scalar(em_kernel_ctx *ctx, em_evalue **args) {
  return compare(ctx, args, C_LT);
}
em_status em_prim_le_scalar(em_kernel_ctx *ctx, em_evalue **args) {
  return compare(ctx, args, C_LE);
}

enum { U_NEG, U_CEIL, U_ROUND, U_TRUNC, U_FLOAT, U_INT };

/* Double → Int as Python's int(): out of range or NaN is an error. */
static em_status to_int(em_kernel_ctx *ctx, double v, em_evalue *r) {
  EM_KCHECK(ctx, v == v && v >= -9.2233720368547758e18 && v < 9.2233720368547758e18,
            "cannot convert %g to an integer", v);
  set_int(r, (int64_t)v);
  return EM_OK;
}

static em_status unary(em_kernel_ctx *ctx, em_evalue **args, int op) {
  const em_evalue *a = args[0];
  EM_KCHECK(ctx, is_num(a), "operand must be Int, Double or Bool");
  if (is_intlike(a)) {
    int64_t x = as_int(a);
    if (op == U_NEG)
      set_int(args[1], (int64_t)(0 - (uint64_t)x));
    else if (op == U_FLOAT)
      set_double(args[1], (double)x);
    else
      set_int(args[1], x);
    return EM_OK;
  }
  double x = a->u.d;
  switch (op) {
  case U_NEG: set_double(args[1], -x); return EM_OK;
  case U_FLOAT: set_double(args[1], x); return EM_OK;
  case U_CEIL: return to_int(ctx, ceil(x), args[1]);
  case U_ROUND: return to_int(ctx, nearbyint(x), args[1]); /* half to even, as Python */
  default: return to_int(ctx, trunc(x), args[1]);
  }
}

em_status em_prim_neg_scalar(em_kernel_ctx *ctx, em_evalue **args) {
  return unary(ctx, args, U_NEG);
}
em_status em_prim_ceil_scalar(em_kernel_ctx *ctx, em_evalue **args) {
  return unary(ctx, args, U_CEIL);
}
em_status em_prim_round_scalar(em_kernel_ctx *ctx, em_evalue **args) {
  return unary(ctx, args, U_ROUND);
}
em_status em_prim_trunc_scalar(em_kernel_ctx *ctx, em_evalue **args) {
  return unary(ctx, args, U_TRUNC);
}
em_status em_prim_sym_float_scalar(em_kernel_ctx *ctx, em_evalue **args) {
  return unary(ctx, args, U_FLOAT);
}
em_status em_prim_sym_int_scalar(em_kernel_ctx *ctx, em_evalue **args) {
  return unary(ctx, args, U_INT);
}

em_status em_prim_sym_not_scalar(em_kernel_ctx *ctx, em_evalue **args) {
  const em_evalue *a = args[0];
  EM_KCHECK(ctx, a->tag == EM_TAG_BOOL || a->tag == EM_TAG_INT, "operand must be Bool");
  set_bool(args[1], !as_int(a));
  return EM_OK;
}

/* sym_ite: [cond, then, else, result]. */
em_status em_prim_sym_ite_scalar(em_kernel_ctx *ctx, em_evalue **args) {
  const em_evalue *c = args[0];
  EM_KCHECK(ctx, c->tag == EM_TAG_BOOL || c->tag == EM_TAG_INT, "condition must be Bool");
  const em_evalue *pick = as_int(c) ? args[1] : args[2];
  EM_KCHECK(ctx, is_num(pick), "branches must be Int, Double or Bool");
  em_evalue v = *pick;
  *args[3] = v;
  return EM_OK;
}
