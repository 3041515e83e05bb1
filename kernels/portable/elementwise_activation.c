/*
 * elementwise_activation.c — activations and clamps: relu, leaky_relu, elu,
 * gelu, glu, sigmoid, tanh, silu, mish, softplus, hardswish, hardsigmoid,
 * hardtanh, clamp / clamp_min / clamp_max (Scalar and Tensor bounds), logit.
 *
 * Float-only activations reject integral inputs as ATen does; sigmoid, tanh and
 * logit compute integral inputs in f32. NaN inputs propagate through clamps.
 * The all-f32 rows here are plain C; sigmoid and silu take faster bodies (AVX-512F on x86-64)
 * from the optional optimized layer when its table has them (kernels/optimized/,
 * portable/fast_config.h).
 */
#include <math.h>

#include "portable/ew_util.h"
#include "portable/fast_config.h"

/* Checks self (args[0]) and the out tensor at args[oi]; float_only rejects non-float self. */
static em_status act_args(em_kernel_ctx *ctx, em_evalue **args, int oi, bool float_only,
                          em_tensor **self_out, em_tensor **out_out) {
  em_tensor *self = ew_arg_real_tensor(ctx, args, 0);
  if (!self) return EM_ERR_INVALID_ARGUMENT;
  em_tensor *out = EM_ARG_TENSOR(args, oi);
  EM_KCHECK(ctx, out && ew_dtype_is_real_or_bool(out->dtype), "out must be a real or bool tensor");
  EM_KCHECK(ctx, !float_only || em_dtype_is_float(self->dtype),
            "not implemented for dtype %s (floating point only)", em_dtype_name(self->dtype));
  int common = em_dtype_is_float(self->dtype) ? self->dtype : EM_DTYPE_F32;
  if (float_only)
    EM_KCHECK(ctx, ew_can_cast(common, out->dtype), "result dtype %s can't be cast to out %s",
              em_dtype_name(common), em_dtype_name(out->dtype));
  *self_out = self;
  *out_out = out;
  return EM_OK;
}

/* Runs fn over a float-only (or promoted-to-f32) unary activation. */
static em_status act_float(em_kernel_ctx *ctx, em_evalue **args, int oi, bool float_only, ew_fn fn,
                           ew_op *op_params) {
  em_tensor *self, *out;
  EM_KTRY(act_args(ctx, args, oi, float_only, &self, &out));
  int common = em_dtype_is_float(self->dtype) ? self->dtype : EM_DTYPE_F32;
  EM_KCHECK(ctx, em_dtype_is_float(out->dtype), "out dtype %s must be floating",
            em_dtype_name(out->dtype));
  ew_op op;
  ew_op_init(&op, common, common);
  if (op_params) {
    memcpy(op.p, op_params->p, sizeof op.p);
    op.mode = op_params->mode;
    op.f32 = op_params->f32;
    op.f32_row = op_params->f32_row;
  }
  ew_in in[1] = {ew_in_tensor(self, common)};
  return ew_map(ctx, out, in, 1, fn, &op);
}

/* A Scalar parameter in opmath precision (f32 unless the common dtype is f64). */
static bool scalar_param(const em_evalue *v, bool f64, double *out) {
  double d;
  if (!ew_is_scalar(v) || !em_arg_double(v, &d)) return false;
  *out = f64 ? d : (double)(float)d;
  return true;
}

static bool self_is_f64(em_evalue **args) {
  const em_tensor *t = EM_ARG_TENSOR(args, 0);
  return t && t->dtype == EM_DTYPE_F64;
}

/* ---- sigmoid / tanh / silu / hardswish / hardsigmoid ---- */

static double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

enum {
  A_SIGMOID,
  A_TANH,
  A_SILU,
  A_HSWISH,
  A_HSIGMOID,
  A_LEAKY,
  A_ELU,
  A_GELU,
  A_SOFTPLUS,
  A_MISH,
  A_GELU_TANH
};

/* softplus with beta and threshold (linear above threshold, as ATen). */
static double softplus(double x, double beta, double threshold) {
  return x * beta > threshold ? x : log1p(exp(x * beta)) / beta;
}

static ew_val f_act(const ew_val *x, ew_op *op) {
  double a = x[0].f;
  ew_val r;
  switch (op->mode) {
  case A_SIGMOID: r.f = sigmoid(a); break;
  case A_TANH: r.f = tanh(a); break;
  case A_SILU: r.f = a * sigmoid(a); break;
  case A_HSWISH: r.f = a * fmin(fmax(a + 3.0, 0.0), 6.0) / 6.0; break;
  case A_HSIGMOID: r.f = fmin(fmax(a + 3.0, 0.0), 6.0) / 6.0; break;
  case A_LEAKY: r.f = a > 0 ? a : a * op->p[0].f; break;
  case A_ELU:
    r.f = a <= 0 ? expm1(a * op->p[2].f) * op->p[0].f * op->p[1].f : a * op->p[1].f;
    break;
  case A_GELU: r.f = 0.5 * a * (1.0 + erf(a * 0.70710678118654752440)); break;
  case A_SOFTPLUS: r.f = softplus(a, op->p[0].f, op->p[1].f); break;
  case A_MISH: r.f = a * tanh(softplus(a, 1.0, 20.0)); break;
  default: {
    double k = 0.79788456080286535588; /* sqrt(2/pi) */
    r.f = 0.5 * a * (1.0 + tanh(k * (a + 0.044715 * a * a * a)));
  }
  }
  if (a != a) r.f = a;
  return r;
}

/* Single-precision versions of the common activations (see ew_op.f32). */
static float f32_act(const float *x, const ew_op *op) {
  float a = x[0];
  if (a != a) return a;
  switch (op->mode) {
  case A_SIGMOID: return 1.0f / (1.0f + expf(-a));
  case A_TANH: return tanhf(a);
  case A_SILU: return a / (1.0f + expf(-a));
  case A_HSWISH: return a * fminf(fmaxf(a + 3.0f, 0.0f), 6.0f) / 6.0f;
  case A_HSIGMOID: return fminf(fmaxf(a + 3.0f, 0.0f), 6.0f) / 6.0f;
  case A_LEAKY: return a > 0 ? a : a * (float)op->p[0].f;
  case A_GELU: return 0.5f * a * (1.0f + erff(a * 0.70710678f));
  default: {
    float k = 0.7978845608f;
    return 0.5f * a * (1.0f + tanhf(k * (a + 0.044715f * a * a * a)));
  }
  }
}

/* Rows of f32_act: sigmoid and silu written out (the hot ones in LLMs), the rest through it. */
EW_F32_ROW_UNARY(row_sigmoid, A != A ? A : 1.0f / (1.0f + expf(-A)))
EW_F32_ROW_UNARY(row_silu, A != A ? A : A / (1.0f + expf(-A)))
EW_F32_ROW_UNARY(row_act, f32_act(&A, op))

static em_status act_mode(em_kernel_ctx *ctx, em_evalue **args, int oi, bool float_only, int mode) {
  ew_op p;
  memset(&p, 0, sizeof p);
  p.mode = mode;
  if (mode != A_SOFTPLUS && mode != A_MISH && mode != A_ELU) {
    p.f32 = f32_act;
    p.f32_row = mode == A_SIGMOID ? row_sigmoid : mode == A_SILU ? row_silu : row_act;
  }
  const em_portable_fast_config *cfg = em_portable_fast_config_get();
  if (mode == A_SIGMOID && cfg->sigmoid && cfg->sigmoid_row) {
    p.f32 = cfg->sigmoid;
    p.f32_row = cfg->sigmoid_row;
  } else if (mode == A_SILU && cfg->silu && cfg->silu_row) {
    p.f32 = cfg->silu;
    p.f32_row = cfg->silu_row;
  }
  return act_float(ctx, args, oi, float_only, f_act, &p);
}

em_status em_sigmoid_out(em_kernel_ctx *ctx, em_evalue **args) {
  return act_mode(ctx, args, 1, false, A_SIGMOID);
}
em_status em_tanh_out(em_kernel_ctx *ctx, em_evalue **args) {
  return act_mode(ctx, args, 1, false, A_TANH);
}
em_status em_silu_out(em_kernel_ctx *ctx, em_evalue **args) {
  return act_mode(ctx, args, 1, true, A_SILU);
}
em_status em_hardswish_out(em_kernel_ctx *ctx, em_evalue **args) {
  return act_mode(ctx, args, 1, true, A_HSWISH);
}
em_status em_hardsigmoid_out(em_kernel_ctx *ctx, em_evalue **args) {
  return act_mode(ctx, args, 1, true, A_HSIGMOID);
}
em_status em_mish_out(em_kernel_ctx *ctx, em_evalue **args) {
  return act_mode(ctx, args, 1, true, A_MISH);
}

/* softplus.out: [self, beta, threshold, out, out]. */
em_status em_softplus_out(em_kernel_ctx *ctx, em_evalue **args) {
  ew_op p;
  memset(&p, 0, sizeof p);
  p.mode = A_SOFTPLUS;
  bool f64 = self_is_f64(args);
  for (int k = 0; k < 2; k++)
    EM_KCHECK(ctx, scalar_param(args[1 + k], f64, &p.p[k].f), "beta/threshold must be scalars");
  return act_float(ctx, args, 3, true, f_act, &p);
}

em_status em_leaky_relu_out(em_kernel_ctx *ctx, em_evalue **args) {
  ew_op p;
  memset(&p, 0, sizeof p);
  p.mode = A_LEAKY;
  p.f32 = f32_act;
  p.f32_row = row_act;
  EM_KCHECK(ctx, scalar_param(args[1], self_is_f64(args), &p.p[0].f),
            "negative_slope must be a scalar");
  return act_float(ctx, args, 2, true, f_act, &p);
}

em_status em_elu_out(em_kernel_ctx *ctx, em_evalue **args) {
  ew_op p;
  memset(&p, 0, sizeof p);
  p.mode = A_ELU;
  bool f64 = self_is_f64(args);
  for (int k = 0; k < 3; k++)
    EM_KCHECK(ctx, scalar_param(args[1 + k], f64, &p.p[k].f),
              "alpha/scale/input_scale must be scalars");
  return act_float(ctx, args, 4, true, f_act, &p);
}

em_status em_gelu_out(em_kernel_ctx *ctx, em_evalue **args) {
  const em_evalue *a = args[1];
  int mode = A_GELU;
  if (a->tag == EM_TAG_STRING) {
    if (a->u.str.len == 4 && memcmp(a->u.str.ptr, "tanh", 4) == 0)
      mode = A_GELU_TANH;
    else
      EM_KCHECK(ctx, a->u.str.len == 4 && memcmp(a->u.str.ptr, "none", 4) == 0,
                "approximate must be 'none' or 'tanh'");
  } else {
    EM_KCHECK(ctx, a->tag == EM_TAG_NONE, "approximate must be a string");
  }
  return act_mode(ctx, args, 2, true, mode);
}

/* ---- logit ---- */

static ew_val f_logit(const ew_val *x, ew_op *op) {
  double a = x[0].f;
  if (op->mode) a = a < op->p[0].f ? op->p[0].f : a > 1.0 - op->p[0].f ? 1.0 - op->p[0].f : a;
  ew_val r;
  r.f = log(a / (1.0 - a));
  return r;
}

em_status em_logit_out(em_kernel_ctx *ctx, em_evalue **args) {
  ew_op p;
  memset(&p, 0, sizeof p);
  if (args[1]->tag != EM_TAG_NONE) {
    EM_KCHECK(ctx, scalar_param(args[1], self_is_f64(args), &p.p[0].f), "eps must be a float");
    p.mode = 1;
  }
  return act_float(ctx, args, 2, false, f_logit, &p);
}

/* ---- relu / hardtanh / clamp ---- */

/* p[0] = lower bound (if mode & 1), p[1] = upper bound (if mode & 2). */
static ew_val f_clamp(const ew_val *x, ew_op *op) {
  ew_val r = x[0];
  if (op->fp) {
    if (r.f != r.f) return r;
    if ((op->mode & 1) && r.f < op->p[0].f) r.f = op->p[0].f;
    if ((op->mode & 2) && r.f > op->p[1].f) r.f = op->p[1].f;
    if (op->p[0].f != op->p[0].f || op->p[1].f != op->p[1].f) r.f = NAN;
  } else {
    if ((op->mode & 1) && r.i < op->p[0].i) r.i = op->p[0].i;
    if ((op->mode & 2) && r.i > op->p[1].i) r.i = op->p[1].i;
  }
  return r;
}

static float f32_clamp(const float *x, const ew_op *op) {
  float r = x[0];
  if (r != r) return r;
  if ((op->mode & 1) && r < (float)op->p[0].f) r = (float)op->p[0].f;
  if ((op->mode & 2) && r > (float)op->p[1].f) r = (float)op->p[1].f;
  if (op->p[0].f != op->p[0].f || op->p[1].f != op->p[1].f) r = NAN;
  return r;
}

EW_F32_ROW_UNARY(row_clamp, f32_clamp(&A, op))

em_status em_relu_out(em_kernel_ctx *ctx, em_evalue **args) {
  EW_TENSOR_ARG(self, ctx, args, 0);
  em_tensor *out = EM_ARG_TENSOR(args, 1);
  EM_KCHECK(ctx, out && ew_dtype_is_real_or_bool(out->dtype), "out must be a real or bool tensor");
  int d = self->dtype;
  EM_KCHECK(ctx, d != EM_DTYPE_BOOL, "relu is not supported for bool tensors");
  EM_KCHECK(ctx, ew_can_cast(d, out->dtype), "result dtype %s can't be cast to out %s",
            em_dtype_name(d), em_dtype_name(out->dtype));
  ew_op op;
  ew_op_init(&op, d, d);
  op.mode = 1;
  op.p[0].i = 0; /* 0.0 has the same bits */
  op.f32 = f32_clamp;
  op.f32_row = row_clamp;
  op.f32_row_cheap = true;
  ew_in in[1] = {ew_in_tensor(self, d)};
  return ew_map(ctx, out, in, 1, f_clamp, &op);
}

em_status em_hardtanh_out(em_kernel_ctx *ctx, em_evalue **args) {
  EW_TENSOR_ARG(self, ctx, args, 0);
  em_tensor *out = EM_ARG_TENSOR(args, 3);
  EM_KCHECK(ctx, out && ew_dtype_is_real_or_bool(out->dtype), "out must be a real or bool tensor");
  int d = self->dtype;
  EM_KCHECK(ctx, d != EM_DTYPE_BOOL && d != EM_DTYPE_U8, "hardtanh is not supported for %s",
            em_dtype_name(d));
  EM_KCHECK(ctx, ew_is_scalar(args[1]) && ew_is_scalar(args[2]), "min_val/max_val must be scalars");
  EM_KCHECK(ctx, ew_can_cast(d, out->dtype), "result dtype %s can't be cast to out %s",
            em_dtype_name(d), em_dtype_name(out->dtype));
  ew_op op;
  ew_op_init(&op, d, d);
  op.mode = 3;
  op.p[0] = ew_scalar_val(args[1], d);
  op.p[1] = ew_scalar_val(args[2], d);
  op.f32 = f32_clamp;
  op.f32_row = row_clamp;
  op.f32_row_cheap = true;
  ew_in in[1] = {ew_in_tensor(self, d)};
  return ew_map(ctx, out, in, 1, f_clamp, &op);
}

em_status em_clamp_out(em_kernel_ctx *ctx, em_evalue **args) {
  EW_TENSOR_ARG(self, ctx, args, 0);
  em_tensor *out = EM_ARG_TENSOR(args, 3);
  EM_KCHECK(ctx, out && ew_dtype_is_real_or_bool(out->dtype), "out must be a real or bool tensor");
  ew_rt rt;
  ew_rt_init(&rt);
  ew_rt_tensor(&rt, self);
  int mode = 0;
  for (int k = 0; k < 2; k++) {
    if (args[1 + k]->tag == EM_TAG_NONE) continue;
    EM_KCHECK(ctx, ew_is_scalar(args[1 + k]), "min/max must be scalars or None");
    ew_rt_scalar(&rt, args[1 + k]);
    mode |= 1 << k;
  }
  EM_KCHECK(ctx, mode, "at least one of 'min' or 'max' must not be None");
  int common = ew_rt_result(&rt);
  EM_KCHECK(ctx, common >= 0 && common != EM_DTYPE_BOOL, "clamp is not supported for dtype %s",
            em_dtype_name(self->dtype));
  EM_KCHECK(ctx, ew_can_cast(common, out->dtype), "result dtype %s can't be cast to out %s",
            em_dtype_name(common), em_dtype_name(out->dtype));
  ew_op op;
  ew_op_init(&op, common, common);
  op.mode = mode;
  for (int k = 0; k < 2; k++) {
    if (!(mode & (1 << k))) continue;
    EM_KCHECK(ctx, em_dtype_is_float(common) || ew_scalar_fits(args[1 + k], common),
              "clamp bound cannot be converted to %s without overflow", em_dtype_name(common));
    op.p[k] = ew_scalar_val(args[1 + k], common);
  }
  op.f32 = f32_clamp;
  op.f32_row = row_clamp;
  op.f32_row_cheap = true;
  ew_in in[1] = {ew_in_tensor(self, common)};
  return ew_map(ctx, out, in, 1, f_clamp, &op);
}

/* Tensor bounds: x[1] lower (mode & 1), x[2] upper (mode & 2). */
static ew_val f_clamp_t(const ew_val *x, ew_op *op) {
  ew_val r = x[0];
  if (op->fp) {
    if ((op->mode & 1) && (r.f < x[1].f || x[1].f != x[1].f)) r.f = r.f != r.f ? r.f : x[1].f;
    if ((op->mode & 2) && (r.f > x[2].f || x[2].f != x[2].f)) r.f = r.f != r.f ? r.f : x[2].f;
  } else {
    if ((op->mode & 1) && r.i < x[1].i) r.i = x[1].i;
    if ((op->mode & 2) && r.i > x[2].i) r.i = x[2].i;
  }
  return r;
}

em_status em_clamp_tensor_out(em_kernel_ctx *ctx, em_evalue **args) {
  EW_TENSOR_ARG(self, ctx, args, 0);
  em_tensor *out = EM_ARG_TENSOR(args, 3);
  EM_KCHECK(ctx, out && ew_dtype_is_real_or_bool(out->dtype), "out must be a real or bool tensor");
  ew_rt rt;
  ew_rt_init(&rt);
  ew_rt_tensor(&rt, self);
  em_tensor *b[2] = {NULL, NULL};
  int mode = 0;
  for (int k = 0; k < 2; k++) {
    if (args[1 + k]->tag == EM_TAG_NONE) continue;
    b[k] = ew_arg_real_tensor(ctx, args, 1 + k);
    if (!b[k]) return EM_ERR_INVALID_ARGUMENT;
    ew_rt_tensor(&rt, b[k]);
    mode |= 1 << k;
  }
  EM_KCHECK(ctx, mode, "at least one of 'min' or 'max' must not be None");
  int common = ew_rt_result(&rt);
  EM_KCHECK(ctx, common >= 0 && common != EM_DTYPE_BOOL, "clamp is not supported for dtype %s",
            em_dtype_name(self->dtype));
  EM_KCHECK(ctx, ew_can_cast(common, out->dtype), "result dtype %s can't be cast to out %s",
            em_dtype_name(common), em_dtype_name(out->dtype));
  ew_op op;
  ew_op_init(&op, common, common);
  op.mode = mode;
  ew_in in[3] = {ew_in_tensor(self, common), ew_in_tensor(b[0], common),
                 ew_in_tensor(b[1], common)};
  if (!b[0]) in[1].s.i = 0;
  if (!b[1]) in[2].s.i = 0;
  return ew_map(ctx, out, in, 3, f_clamp_t, &op);
}

/* ---- glu ---- */

static ew_val f_glu(const ew_val *x, ew_op *op) {
  (void)op;
  ew_val r;
  r.f = x[0].f * sigmoid(x[1].f);
  return r;
}

em_status em_glu_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *self, *out;
  EM_KTRY(act_args(ctx, args, 2, true, &self, &out));
  int64_t dim_arg;
  EM_KCHECK(ctx, em_arg_int(args[1], &dim_arg), "dim must be an int");
  EM_KCHECK(ctx, self->dim > 0, "glu does not support 0-dim tensors");
  int32_t dim;
  EM_KCHECK(ctx, em_norm_dim(dim_arg, self->dim, &dim), "dim %lld out of range",
            (long long)dim_arg);
  EM_KCHECK(ctx, self->sizes[dim] % 2 == 0, "halving dimension must be even, got %lld",
            (long long)self->sizes[dim]);
  /* two views of self: the first and the second half along dim */
  int64_t sizes[EM_MAX_DIM];
  memcpy(sizes, self->sizes, sizeof(int64_t) * (size_t)self->dim);
  sizes[dim] /= 2;
  em_tensor a = *self, b = *self;
  a.sizes = b.sizes = sizes;
  a.numel = b.numel = self->numel / 2;
  b.data =
      (char *)self->data + (size_t)(sizes[dim] * self->strides[dim]) * em_dtype_size(self->dtype);
  if (self->numel == 0) b.data = self->data;
  EM_KCHECK(ctx, em_dtype_is_float(out->dtype), "out dtype %s must be floating",
            em_dtype_name(out->dtype));
  ew_op op;
  ew_op_init(&op, self->dtype, self->dtype);
  ew_in in[2] = {ew_in_tensor(&a, self->dtype), ew_in_tensor(&b, self->dtype)};
  return ew_map(ctx, out, in, 2, f_glu, &op);
}

/* ---- clamp_min / clamp_max: clamp with one bound ---- */

/* Calls fn on [self, min, max, out, out] built from a one-bound call [self, bound, out, out]. */
static em_status one_bound(em_kernel_ctx *ctx, em_evalue **args, bool is_max, em_kernel_fn fn) {
  em_evalue none;
  memset(&none, 0, sizeof none);
  none.tag = EM_TAG_NONE;
  em_evalue *a[5] = {args[0], is_max ? &none : args[1], is_max ? args[1] : &none, args[2], args[3]};
  return fn(ctx, a);
}

em_status em_clamp_min_out(em_kernel_ctx *ctx, em_evalue **args) {
  EM_KCHECK(ctx, ew_is_scalar(args[1]), "min must be a scalar");
  return one_bound(ctx, args, false, em_clamp_out);
}
em_status em_clamp_max_out(em_kernel_ctx *ctx, em_evalue **args) {
  EM_KCHECK(ctx, ew_is_scalar(args[1]), "max must be a scalar");
  return one_bound(ctx, args, true, em_clamp_out);
}
em_status em_clamp_min_tensor_out(em_kernel_ctx *ctx, em_evalue **args) {
  EM_KCHECK(ctx, EM_ARG_TENSOR(args, 1), "min must be a tensor");
  return one_bound(ctx, args, false, em_clamp_tensor_out);
}
em_status em_clamp_max_tensor_out(em_kernel_ctx *ctx, em_evalue **args) {
  EM_KCHECK(ctx, EM_ARG_TENSOR(args, 1), "max must be a tensor");
  return one_bound(ctx, args, true, em_clamp_tensor_out);
}
