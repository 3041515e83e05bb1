/*
 * elementwise_logic.c — bitwise, shift, logical and comparison operators, and
 * the selection ops where and masked_fill.
 *
 * Bitwise ops accept integral and bool dtypes only; shifts integral only.
 * Logical ops and comparisons accept every real dtype and bool and produce a
 * bool result that is cast to out's dtype (any dtype).
 */
#include "portable/ew_util.h"

/* Checks that args[1] is a tensor (want_tensor) or a Scalar. */
static em_status other_kind(em_kernel_ctx *ctx, em_evalue **args, bool want_tensor) {
  EM_KCHECK(ctx, EM_ARG_TENSOR(args, 0), "self must be a tensor");
  if (want_tensor)
    EM_KCHECK(ctx, EM_ARG_TENSOR(args, 1), "other must be a tensor");
  else
    EM_KCHECK(ctx, ew_is_scalar(args[1]), "other must be a scalar");
  return EM_OK;
}

/* ---- bitwise ---- */

enum { BIT_AND, BIT_OR, BIT_XOR, BIT_SHL, BIT_SHR };

static ew_val f_bitwise(const ew_val *x, ew_op *op) {
  ew_val r;
  int64_t a = x[0].i, b = x[1].i;
  switch (op->mode) {
  case BIT_AND: r.i = a & b; break;
  case BIT_OR: r.i = a | b; break;
  case BIT_XOR: r.i = a ^ b; break;
  default: {
    /* ATen's lshift/rshift: the shift count is read as signed of the same width */
    int bits = (int)em_dtype_size(op->common) * 8;
    int64_t sb = op->common == EM_DTYPE_U8 ? (int8_t)b : b;
    bool is_signed = op->common != EM_DTYPE_U8;
    if (op->mode == BIT_SHL) {
      r.i = (sb < 0 || sb >= bits) ? 0 : (int64_t)((uint64_t)a << sb);
    } else {
      int max_shift = bits - (is_signed ? 1 : 0);
      r.i = (sb < 0 || sb >= max_shift) ? (a >> max_shift) : (a >> sb);
    }
  }
  }
  return r;
}

static em_status bitwise(em_kernel_ctx *ctx, em_evalue **args, int mode, bool tensor_other) {
  EM_KTRY(other_kind(ctx, args, tensor_other));
  ew_bin b;
  EM_KTRY(ew_bin_setup(ctx, args[0], args[1], args[2], &b));
  bool shift = mode == BIT_SHL || mode == BIT_SHR;
  EM_KCHECK(ctx, em_dtype_is_int(b.common) || (!shift && b.common == EM_DTYPE_BOOL),
            "not implemented for dtype %s", em_dtype_name(b.common));
  EM_KCHECK(ctx, ew_can_cast(b.common, b.out->dtype), "result dtype %s can't be cast to out %s",
            em_dtype_name(b.common), em_dtype_name(b.out->dtype));
  ew_op op;
  ew_op_init(&op, b.common, b.common);
  op.mode = mode;
  ew_in in[2];
  ew_bin_ins(&b, b.common, in);
  return ew_map(ctx, b.out, in, 2, f_bitwise, &op);
}

em_status em_bitwise_and_tensor_out(em_kernel_ctx *ctx, em_evalue **args) {
  return bitwise(ctx, args, BIT_AND, true);
}
em_status em_bitwise_and_scalar_out(em_kernel_ctx *ctx, em_evalue **args) {
  return bitwise(ctx, args, BIT_AND, false);
}
em_status em_bitwise_or_tensor_out(em_kernel_ctx *ctx, em_evalue **args) {
  return bitwise(ctx, args, BIT_OR, true);
}
em_status em_bitwise_or_scalar_out(em_kernel_ctx *ctx, em_evalue **args) {
  return bitwise(ctx, args, BIT_OR, false);
}
em_status em_bitwise_xor_tensor_out(em_kernel_ctx *ctx, em_evalue **args) {
  return bitwise(ctx, args, BIT_XOR, true);
}
em_status em_bitwise_xor_scalar_out(em_kernel_ctx *ctx, em_evalue **args) {
  return bitwise(ctx, args, BIT_XOR, false);
}
em_status em_bitwise_left_shift_tensor_out(em_kernel_ctx *ctx, em_evalue **args) {
  return bitwise(ctx, args, BIT_SHL, true);
}
em_status em_bitwise_left_shift_tensor_scalar_out(em_kernel_ctx *ctx, em_evalue **args) {
  return bitwise(ctx, args, BIT_SHL, false);
}
em_status em_bitwise_right_shift_tensor_out(em_kernel_ctx *ctx, em_evalue **args) {
  return bitwise(ctx, args, BIT_SHR, true);
}
em_status em_bitwise_right_shift_tensor_scalar_out(em_kernel_ctx *ctx, em_evalue **args) {
  return bitwise(ctx, args, BIT_SHR, false);
}

static ew_val f_not(const ew_val *x, ew_op *op) {
  ew_val r;
  r.i = op->common == EM_DTYPE_BOOL ? !x[0].i : ~x[0].i;
  return r;
}

em_status em_bitwise_not_out(em_kernel_ctx *ctx, em_evalue **args) {
  EW_TENSOR_ARG(self, ctx, args, 0);
  em_tensor *out = EM_ARG_TENSOR(args, 1);
  EM_KCHECK(ctx, out, "out must be a tensor");
  int d = self->dtype;
  EM_KCHECK(ctx, em_dtype_is_int(d) || d == EM_DTYPE_BOOL, "not implemented for dtype %s",
            em_dtype_name(d));
  EM_KCHECK(ctx, ew_can_cast(d, out->dtype), "result dtype %s can't be cast to out %s",
            em_dtype_name(d), em_dtype_name(out->dtype));
  ew_op op;
  ew_op_init(&op, d, d);
  ew_in in[1] = {ew_in_tensor(self, d)};
  return ew_map(ctx, out, in, 1, f_not, &op);
}

/* ---- logical ---- */

static ew_val f_logical(const ew_val *x, ew_op *op) {
  ew_val r;
  switch (op->mode) {
  case BIT_AND: r.i = x[0].i && x[1].i; break;
  case BIT_OR: r.i = x[0].i || x[1].i; break;
  case BIT_XOR: r.i = (x[0].i != 0) != (x[1].i != 0); break;
  default: r.i = !x[0].i; break;
  }
  return r;
}

static em_status logical(em_kernel_ctx *ctx, em_evalue **args, int mode, int n_in) {
  EW_TENSOR_ARG(self, ctx, args, 0);
  em_tensor *other = NULL;
  if (n_in == 2) {
    other = ew_arg_real_tensor(ctx, args, 1);
    if (!other) return EM_ERR_INVALID_ARGUMENT;
  }
  em_tensor *out = EM_ARG_TENSOR(args, n_in);
  EM_KCHECK(ctx, out && ew_dtype_is_real_or_bool(out->dtype), "out must be a real or bool tensor");
  ew_op op;
  ew_op_init(&op, EM_DTYPE_BOOL, EM_DTYPE_BOOL);
  op.mode = mode;
  ew_in in[2] = {ew_in_tensor(self, EM_DTYPE_BOOL), ew_in_tensor(other, EM_DTYPE_BOOL)};
  return ew_map(ctx, out, in, n_in, f_logical, &op);
}

em_status em_logical_and_out(em_kernel_ctx *ctx, em_evalue **args) {
  return logical(ctx, args, BIT_AND, 2);
}
em_status em_logical_or_out(em_kernel_ctx *ctx, em_evalue **args) {
  return logical(ctx, args, BIT_OR, 2);
}
em_status em_logical_xor_out(em_kernel_ctx *ctx, em_evalue **args) {
  return logical(ctx, args, BIT_XOR, 2);
}
em_status em_logical_not_out(em_kernel_ctx *ctx, em_evalue **args) {
  return logical(ctx, args, -1, 1);
}

/* ---- comparisons ---- */

enum { CMP_EQ, CMP_NE, CMP_LT, CMP_LE, CMP_GT, CMP_GE };

static ew_val f_cmp(const ew_val *x, ew_op *op) {
  ew_val r;
  int c;
  if (op->fp) {
    double a = x[0].f, b = x[1].f;
    switch (op->mode) {
    case CMP_EQ: c = a == b; break;
    case CMP_NE: c = a != b; break;
    case CMP_LT: c = a < b; break;
    case CMP_LE: c = a <= b; break;
    case CMP_GT: c = a > b; break;
    default: c = a >= b; break;
    }
  } else {
    int64_t a = x[0].i, b = x[1].i;
    switch (op->mode) {
    case CMP_EQ: c = a == b; break;
    case CMP_NE: c = a != b; break;
    case CMP_LT: c = a < b; break;
    case CMP_LE: c = a <= b; break;
    case CMP_GT: c = a > b; break;
    default: c = a >= b; break;
    }
  }
  r.i = c;
  return r;
}

/* An operand of the dense f32 where: one element (stride 0) or every element of the output in
 * the same row-major order (stride 1). -1: neither. A tensor that broadcasts to the output with
 * as many elements has the output's sizes up to leading 1s, so contiguous means same order. */
static int where_stride(const em_tensor *t, int64_t numel) {
  if (t->numel == 1) return 0;
  return t->numel == numel && ew_is_contiguous(t) ? 1 : -1;
}

#define CMP_LOOP(expr)                                                                             \
  for (int64_t i = 0; i < n; i++) {                                                                \
    const float a = x[i * sx], b = y[i * sy];                                                      \
    o[i] = (uint8_t)(expr);                                                                        \
  }

/*
 * A comparison of two f32 operands (tensors each dense in the output's shape or one element,
 * or a Scalar already rounded to f32) into a contiguous bool output, out already sized: a
 * direct loop; the generic path loads and stores each element through the dtype switches
 * (~15 ns an element: `x > 0` before a where or masked_fill took most of their time). The
 * same comparisons of the same floats, so the same bools. False (nothing written) otherwise.
 */
static bool compare_f32_dense(const ew_in *in, em_tensor *out, int mode) {
  if (out->dtype != EM_DTYPE_BOOL || !ew_is_contiguous(out)) return false;
  const int64_t n = out->numel;
  const float *p[2];
  float sv[2];
  int64_t st[2];
  for (int k = 0; k < 2; k++) {
    if (in[k].dtype != EM_DTYPE_F32) return false;
    if (!in[k].t) {
      sv[k] = (float)in[k].s.f, p[k] = &sv[k], st[k] = 0;
      continue;
    }
    const int w = in[k].t->dtype == EM_DTYPE_F32 ? where_stride(in[k].t, n) : -1;
    if (w < 0 || !in[k].t->data) return false;
    p[k] = in[k].t->data, st[k] = w;
  }
  const float *x = p[0], *y = p[1];
  const int64_t sx = st[0], sy = st[1];
  uint8_t *o = out->data;
  switch (mode) {
  case CMP_EQ: CMP_LOOP(a == b) break;
  case CMP_NE: CMP_LOOP(a != b) break;
  case CMP_LT: CMP_LOOP(a < b) break;
  case CMP_LE: CMP_LOOP(a <= b) break;
  case CMP_GT: CMP_LOOP(a > b) break;
  default: CMP_LOOP(a >= b) break;
  }
  return true;
}

static em_status compare(em_kernel_ctx *ctx, em_evalue **args, int mode, bool tensor_other) {
  EM_KTRY(other_kind(ctx, args, tensor_other));
  ew_bin b;
  EM_KTRY(ew_bin_setup(ctx, args[0], args[1], args[2], &b));
  ew_op op;
  ew_op_init(&op, b.common, EM_DTYPE_BOOL);
  op.mode = mode;
  ew_in in[2];
  ew_bin_ins_exact(&b, b.common, in);
  if (b.common == EM_DTYPE_F32 && b.out->dtype == EM_DTYPE_BOOL && (in[0].t || in[1].t)) {
    int64_t sizes[EM_MAX_DIM];
    int32_t dim = 0;
    if (in[0].t && in[1].t) {
      EM_KCHECK(ctx,
                em_broadcast_shapes(in[0].t->sizes, in[0].t->dim, in[1].t->sizes, in[1].t->dim,
                                    sizes, &dim),
                "input shapes do not broadcast");
    } else {
      const em_tensor *t = in[0].t ? in[0].t : in[1].t;
      dim = t->dim;
      memcpy(sizes, t->sizes, sizeof(int64_t) * (size_t)dim);
    }
    EM_KTRY(em_resize_out(ctx, b.out, sizes, dim));
    if (b.out->numel == 0) return EM_OK;
    EM_KCHECK(ctx, b.out->data, "out has no data");
    if (compare_f32_dense(in, b.out, mode)) return EM_OK;
  }
  return ew_map(ctx, b.out, in, 2, f_cmp, &op);
}

#define EW_CMP(name, mode)                                                                         \
  em_status em_##name##_tensor_out(em_kernel_ctx *ctx, em_evalue **args) {                         \
    return compare(ctx, args, mode, true);                                                         \
  }                                                                                                \
  em_status em_##name##_scalar_out(em_kernel_ctx *ctx, em_evalue **args) {                         \
    return compare(ctx, args, mode, false);                                                        \
  }
EW_CMP(eq, CMP_EQ)
EW_CMP(ne, CMP_NE)
EW_CMP(lt, CMP_LT)
EW_CMP(le, CMP_LE)
EW_CMP(gt, CMP_GT)
EW_CMP(ge, CMP_GE)

/* ---- where / masked_fill ---- */

static ew_val f_select(const ew_val *x, ew_op *op) {
  (void)op;
  return x[0].i ? x[1] : x[2];
}

/*
 * where over f32 self / other / out whose operands are each dense in the output's shape or a
 * single element: exported transformers build their attention mask this way (a [1, 1, S, S]
 * bool mask choosing between two 0-d constants), which the generic per-element path took ~25 ns
 * an element for. Copies the chosen floats bit for bit, as the generic path's value does.
 * Returns false (out resized, nothing written) when the operands do not fit the pattern.
 */
static bool where_f32_dense(const em_tensor *cond, const em_tensor *a, const em_tensor *b,
                            em_tensor *out) {
  if (a->dtype != EM_DTYPE_F32 || b->dtype != EM_DTYPE_F32 || out->dtype != EM_DTYPE_F32 ||
      !ew_is_contiguous(out))
    return false;
  const int64_t n = out->numel;
  const int sc = where_stride(cond, n), sa = where_stride(a, n), sb = where_stride(b, n);
  if (sc < 0 || sa < 0 || sb < 0) return false;
  const uint8_t *c = cond->data;
  const float *x = a->data, *y = b->data;
  float *o = out->data;
  if (sc && !sa && !sb) { /* the mask pattern */
    const float xv = x[0], yv = y[0];
    for (int64_t i = 0; i < n; i++) o[i] = c[i] ? xv : yv;
    return true;
  }
  if (sc && sa && sb) { /* all dense: a loop the compiler vectorizes */
    for (int64_t i = 0; i < n; i++) o[i] = c[i] ? x[i] : y[i];
    return true;
  }
  for (int64_t i = 0; i < n; i++) o[i] = c[i * sc] ? x[i * sa] : y[i * sb];
  return true;
}

em_status em_where_self_out(em_kernel_ctx *ctx, em_evalue **args) {
  EW_TENSOR_ARG(cond, ctx, args, 0);
  EM_KCHECK(ctx, cond->dtype == EM_DTYPE_BOOL || cond->dtype == EM_DTYPE_U8,
            "condition must be a bool tensor, got %s", em_dtype_name(cond->dtype));
  EM_KCHECK(ctx, EM_ARG_TENSOR(args, 1) && EM_ARG_TENSOR(args, 2),
            "self and other must be tensors");
  ew_bin b;
  EM_KTRY(ew_bin_setup(ctx, args[1], args[2], args[3], &b));
  EM_KCHECK(ctx, ew_can_cast(b.common, b.out->dtype), "result dtype %s can't be cast to out %s",
            em_dtype_name(b.common), em_dtype_name(b.out->dtype));
  if (b.common == EM_DTYPE_F32 && b.out->dtype == EM_DTYPE_F32) {
    /* the output's shape: cond, self and other broadcast together */
    int64_t ab[EM_MAX_DIM], sizes[EM_MAX_DIM];
    int32_t ab_dim, dim;
    EM_KCHECK(ctx,
              em_broadcast_shapes(b.a->sizes, b.a->dim, b.b->sizes, b.b->dim, ab, &ab_dim) &&
                  em_broadcast_shapes(ab, ab_dim, cond->sizes, cond->dim, sizes, &dim),
              "condition, self and other shapes do not broadcast");
    EM_KTRY(em_resize_out(ctx, b.out, sizes, dim));
    if (b.out->numel == 0) return EM_OK;
    EM_KCHECK(ctx, b.out->data && cond->data && b.a->data && b.b->data, "a tensor has no data");
    if (where_f32_dense(cond, b.a, b.b, b.out)) return EM_OK;
  }
  ew_op op;
  ew_op_init(&op, b.common, b.common);
  ew_in in[3] = {ew_in_tensor(cond, EM_DTYPE_BOOL), ew_in_tensor(b.a, b.common),
                 ew_in_tensor(b.b, b.common)};
  return ew_map(ctx, b.out, in, 3, f_select, &op);
}

static ew_val f_masked(const ew_val *x, ew_op *op) { return x[1].i ? op->p[0] : x[0]; }

em_status em_masked_fill_scalar_out(em_kernel_ctx *ctx, em_evalue **args) {
  EW_TENSOR_ARG(self, ctx, args, 0);
  EW_TENSOR_ARG(mask, ctx, args, 1);
  EM_KCHECK(ctx, mask->dtype == EM_DTYPE_BOOL, "mask must be a bool tensor, got %s",
            em_dtype_name(mask->dtype));
  EM_KCHECK(ctx, ew_is_scalar(args[2]), "value must be a scalar");
  EM_KCHECK(ctx, ew_scalar_fits(args[2], self->dtype),
            "value cannot be converted to %s without overflow", em_dtype_name(self->dtype));
  em_tensor *out = EM_ARG_TENSOR(args, 3);
  EM_KCHECK(ctx, out && ew_dtype_is_real_or_bool(out->dtype), "out must be a real or bool tensor");
  int d = self->dtype;
  EM_KCHECK(ctx, ew_can_cast(d, out->dtype), "self dtype %s can't be cast to out %s",
            em_dtype_name(d), em_dtype_name(out->dtype));
  ew_op op;
  ew_op_init(&op, d, d);
  op.p[0] = ew_scalar_val(args[2], d);
  if (em_dtype_is_float(d)) op.p[0].f = ew_round_to(op.p[0].f, d);
  ew_in in[2] = {ew_in_tensor(self, d), ew_in_tensor(mask, EM_DTYPE_BOOL)};
  return ew_map(ctx, out, in, 2, f_masked, &op);
}
