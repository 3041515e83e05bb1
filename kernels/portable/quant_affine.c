/*
 * quant_affine.c — affine (de)quantization in namespace quantized_decomposed:
 * quantize/dequantize per tensor (scalar and Tensor qparams), per channel and
 * per token, choose_qparams.Tensor_out and choose_qparams_per_token_asymmetric.
 *
 * Semantics are torch's reference implementations
 * (torch/ao/quantization/fx/_decomposed.py), op by op and in torch's dtypes:
 * each elementary step is rounded to the dtype eager PyTorch would compute it
 * in (f32 for f32 inputs and Python-scalar qparams, the promoted dtype when
 * qparams are tensors), rounding is half-to-even (nearbyint under the default
 * rounding mode), and quantized values are clamped to [quant_min, quant_max].
 */
#include "portable/nn_util.h"

/* Rounds v to the precision of floating dtype dt (identity for f64 and non-floats). */
static double rd(int dt, double v) {
  switch (dt) {
  case EM_DTYPE_F32: return (float)v;
  case EM_DTYPE_F16: return em_f16_to_f32(em_f32_to_f16((float)v));
  case EM_DTYPE_BF16: return em_bf16_to_f32(em_f32_to_bf16((float)v));
  default: return v;
  }
}

#define QUANT_OUT_DTYPES (EM_DT_U8 | EM_DT_I8 | EM_DT_I16 | EM_DT_I32 | EM_DTYPE_BIT(EM_DTYPE_U16))

/* Checks the target dtype argument against out and quant_min/quant_max against its range. */
static em_status check_qrange(em_kernel_ctx *ctx, em_evalue *dtype_v, int64_t qmin, int64_t qmax,
                              const em_tensor *q) {
  int64_t dt;
  EM_KCHECK(ctx, em_arg_int(dtype_v, &dt), "dtype must be a ScalarType");
  EM_KCHECK(ctx, q->dtype == dt, "tensor dtype %s does not match dtype argument %s",
            em_dtype_name(q->dtype), em_dtype_name((int)dt));
  EM_KCHECK(ctx, (QUANT_OUT_DTYPES & EM_DTYPE_BIT(q->dtype)) != 0, "unsupported quantized dtype %s",
            em_dtype_name(q->dtype));
  int64_t lo = 0, hi = 0;
  switch (q->dtype) {
  case EM_DTYPE_U8: hi = 255; break;
  case EM_DTYPE_I8: lo = -128, hi = 127; break;
  case EM_DTYPE_I16: lo = -32768, hi = 32767; break;
  case EM_DTYPE_U16: hi = 65535; break;
  default: lo = INT32_MIN, hi = INT32_MAX; break;
  }
  EM_KCHECK(ctx, qmin <= qmax && qmin >= lo && qmax <= hi,
            "quant range [%lld, %lld] invalid for %s", (long long)qmin, (long long)qmax,
            em_dtype_name(q->dtype));
  return EM_OK;
}

static void store_q(em_tensor *q, int64_t i, int64_t v) {
  if (q->dtype == EM_DTYPE_U16)
    ((uint16_t *)q->data)[i] = (uint16_t)v;
  else
    em_store_i64(q->data, q->dtype, i, v);
}

static int64_t load_q(const em_tensor *q, int64_t i) {
  if (q->dtype == EM_DTYPE_U16) return ((const uint16_t *)q->data)[i];
  return em_load_i64(q->data, q->dtype, i);
}

/* Clamps an already rounded value in compute dtype and converts it to an integer. */
static int64_t clamp_q(double v, int64_t qmin, int64_t qmax) {
  if (v != v) return qmin; /* NaN: unspecified in torch; pick the low end */
  if (v < (double)qmin) return qmin;
  if (v > (double)qmax) return qmax;
  return (int64_t)v;
}

static em_status same_shape_out(em_kernel_ctx *ctx, const em_tensor *x, em_tensor *out) {
  EM_KCHECK(ctx, out && out->dim == x->dim, "out must be a tensor of rank %d", (int)(x->dim));
  return em_resize_out(ctx, out, x->sizes, x->dim);
}

/* quantize_per_tensor with scalar qparams: f32 math, as torch's reference. */
static em_status quantize_tensor_scalar(em_kernel_ctx *ctx, em_tensor *x, double scale, int64_t zp,
                                        int64_t qmin, int64_t qmax, em_tensor *out) {
  EM_KCHECK(ctx, em_dtype_is_float(x->dtype), "input must be floating point");
  EM_KTRY(same_shape_out(ctx, x, out));
  int ct = x->dtype == EM_DTYPE_F64 ? EM_DTYPE_F64 : EM_DTYPE_F32;
  double inv = rd(ct, 1.0 / scale);
  for (int64_t i = 0; i < x->numel; i++) {
    double v = rd(ct, em_load_f64(x->data, x->dtype, em_strided_offset(x, i)) * inv);
    v = rd(ct, nearbyint(v) + (double)zp);
    store_q(out, em_strided_offset(out, i), clamp_q(v, qmin, qmax));
  }
  return EM_OK;
}

/*
 * quantized_decomposed::quantize_per_tensor.out(Tensor input, float scale, int zero_point,
 *   int quant_min, int quant_max, ScalarType dtype, *, Tensor(a!) out)
 */
em_status em_qd_quantize_per_tensor_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *x = EM_ARG_TENSOR(args, 0), *out = EM_ARG_TENSOR(args, 6);
  double scale;
  int64_t zp, qmin, qmax;
  NN_CHECK_TENSOR(ctx, x, "input");
  EM_KCHECK(ctx, out, "out must be a tensor");
  EM_KCHECK(ctx,
            em_arg_double(args[1], &scale) && em_arg_int(args[2], &zp) &&
                em_arg_int(args[3], &qmin) && em_arg_int(args[4], &qmax),
            "bad scale/zero_point/quant_min/quant_max");
  EM_KTRY(check_qrange(ctx, args[5], qmin, qmax, out));
  return quantize_tensor_scalar(ctx, x, scale, zp, qmin, qmax, out);
}

/* Reads the single value of a one-element qparam tensor. */
static em_status one_value(em_kernel_ctx *ctx, em_evalue *v, const char *name, double *d,
                           int64_t *i) {
  em_tensor *t = em_evalue_tensor(v);
  EM_KCHECK(ctx, t && t->numel == 1 && t->data, "%s must be a one-element tensor", name);
  if (d) *d = em_load_f64(t->data, t->dtype, 0);
  if (i) *i = em_load_i64(t->data, t->dtype, 0);
  return EM_OK;
}

/*
 * quantized_decomposed::quantize_per_tensor.Tensor_out(Tensor input, Tensor scale,
 *   Tensor zero_point, int quant_min, int quant_max, ScalarType dtype, *, Tensor(a!) out)
 */
em_status em_qd_quantize_per_tensor_tensor_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *x = EM_ARG_TENSOR(args, 0), *out = EM_ARG_TENSOR(args, 6);
  double scale;
  int64_t zp, qmin, qmax;
  NN_CHECK_TENSOR(ctx, x, "input");
  EM_KCHECK(ctx, out, "out must be a tensor");
  EM_KTRY(one_value(ctx, args[1], "scale", &scale, NULL));
  EM_KTRY(one_value(ctx, args[2], "zero_point", NULL, &zp));
  EM_KCHECK(ctx, em_arg_int(args[3], &qmin) && em_arg_int(args[4], &qmax), "bad quant range");
  EM_KTRY(check_qrange(ctx, args[5], qmin, qmax, out));
  return quantize_tensor_scalar(ctx, x, scale, zp, qmin, qmax, out);
}

/* Output dtype from an optional ScalarType argument (default f32); must equal out's dtype. */
static em_status out_dtype_arg(em_kernel_ctx *ctx, em_evalue *v, const em_tensor *out) {
  int64_t od;
  EM_KCHECK(ctx, nn_opt_int(v, EM_DTYPE_F32, &od), "out_dtype must be a ScalarType or None");
  EM_KCHECK(ctx, out->dtype == od, "out dtype %s does not match out_dtype %s",
            em_dtype_name(out->dtype), em_dtype_name((int)od));
  EM_KCHECK(ctx, em_dtype_is_float(out->dtype), "out_dtype must be floating point");
  return EM_OK;
}

/* (q.to(od) - zp) * scale with od's op-math (f32 for f32/f16/bf16, f64 for f64). */
static em_status dequantize_tensor_scalar(em_kernel_ctx *ctx, em_tensor *q, double scale,
                                          int64_t zp, em_tensor *out) {
  EM_KTRY(same_shape_out(ctx, q, out));
  int od = out->dtype;
  double s = od == EM_DTYPE_F64 ? scale : (float)scale, z = (double)zp;
  if (od != EM_DTYPE_F64) z = (float)z;
  for (int64_t i = 0; i < q->numel; i++) {
    double v = rd(od, (double)load_q(q, em_strided_offset(q, i)));
    v = rd(od, v - z);
    em_store_f64(out->data, od, em_strided_offset(out, i), rd(od, v * s));
  }
  return EM_OK;
}

/*
 * quantized_decomposed::dequantize_per_tensor.out(Tensor input, float scale, int zero_point,
 *   int quant_min, int quant_max, ScalarType dtype, *, ScalarType? out_dtype=None, out)
 */
em_status em_qd_dequantize_per_tensor_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *q = EM_ARG_TENSOR(args, 0), *out = EM_ARG_TENSOR(args, 7);
  double scale;
  int64_t zp, qmin, qmax;
  NN_CHECK_TENSOR(ctx, q, "input");
  EM_KCHECK(ctx, out, "out must be a tensor");
  EM_KCHECK(ctx,
            em_arg_double(args[1], &scale) && em_arg_int(args[2], &zp) &&
                em_arg_int(args[3], &qmin) && em_arg_int(args[4], &qmax),
            "bad scale/zero_point/quant_min/quant_max");
  EM_KTRY(check_qrange(ctx, args[5], qmin, qmax, q));
  EM_KTRY(out_dtype_arg(ctx, args[6], out));
  return dequantize_tensor_scalar(ctx, q, scale, zp, out);
}

/*
 * quantized_decomposed::dequantize_per_tensor.Tensor_out(Tensor input, Tensor scale,
 *   Tensor zero_point, int quant_min, int quant_max, ScalarType dtype, *,
 *   ScalarType? out_dtype=None, Tensor(a!) out)
 */
em_status em_qd_dequantize_per_tensor_tensor_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *q = EM_ARG_TENSOR(args, 0), *out = EM_ARG_TENSOR(args, 7);
  double scale;
  int64_t zp, qmin, qmax;
  NN_CHECK_TENSOR(ctx, q, "input");
  EM_KCHECK(ctx, out, "out must be a tensor");
  EM_KTRY(one_value(ctx, args[1], "scale", &scale, NULL));
  EM_KTRY(one_value(ctx, args[2], "zero_point", NULL, &zp));
  EM_KCHECK(ctx, em_arg_int(args[3], &qmin) && em_arg_int(args[4], &qmax), "bad quant range");
  EM_KTRY(check_qrange(ctx, args[5], qmin, qmax, q));
  EM_KTRY(out_dtype_arg(ctx, args[6], out));
  return dequantize_tensor_scalar(ctx, q, scale, zp, out);
}

/* Index along `axis` of logical element i of t. */
static int64_t axis_index(const em_tensor *t, int32_t axis, int64_t i) {
  for (int32_t d = t->dim - 1; d > axis; d--) i /= t->sizes[d];
  return i % t->sizes[axis];
}

/* Checks a 1-D (or per-token) qparam tensor of n elements. */
static em_status qparam(em_kernel_ctx *ctx, em_tensor *t, int64_t n, const char *name) {
  EM_KCHECK(ctx, t && (t->numel == 0 || t->data), "%s must be a tensor", name);
  EM_KCHECK(ctx, t->numel == n, "%s must have %lld elements, has %lld", name, (long long)n,
            (long long)t->numel);
  return EM_OK;
}

/*
 * quantized_decomposed::quantize_per_channel.out(Tensor input, Tensor scales,
 *   Tensor zero_points, int axis, int quant_min, int quant_max, ScalarType dtype, *, out)
 */
em_status em_qd_quantize_per_channel_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *x = EM_ARG_TENSOR(args, 0), *s = EM_ARG_TENSOR(args, 1), *z = EM_ARG_TENSOR(args, 2),
            *out = EM_ARG_TENSOR(args, 7);
  int64_t axis, qmin, qmax;
  int32_t ax;
  NN_CHECK_TENSOR(ctx, x, "input");
  EM_KCHECK(ctx, out, "out must be a tensor");
  EM_KCHECK(ctx, em_dtype_is_float(x->dtype), "input must be floating point");
  EM_KCHECK(ctx, em_arg_int(args[3], &axis) && em_norm_dim(axis, x->dim, &ax) && x->dim > 0,
            "axis out of range");
  EM_KCHECK(ctx, em_arg_int(args[4], &qmin) && em_arg_int(args[5], &qmax), "bad quant range");
  EM_KTRY(check_qrange(ctx, args[6], qmin, qmax, out));
  EM_KTRY(qparam(ctx, s, x->sizes[ax], "scales"));
  EM_KTRY(qparam(ctx, z, x->sizes[ax], "zero_points"));
  EM_KCHECK(ctx, em_dtype_is_float(s->dtype), "scales must be floating point");
  EM_KTRY(same_shape_out(ctx, x, out));
  int xt = x->dtype == EM_DTYPE_F64 ? EM_DTYPE_F64 : EM_DTYPE_F32; /* f16/bf16 go to f32 first */
  int ct = em_promote_types(xt, s->dtype);
  int zt = em_promote_types(ct, z->dtype);
  for (int64_t i = 0; i < x->numel; i++) {
    int64_t c = axis_index(x, ax, i);
    double inv = rd(s->dtype, 1.0 / em_load_f64(s->data, s->dtype, em_strided_offset(s, c)));
    double v = rd(ct, em_load_f64(x->data, x->dtype, em_strided_offset(x, i)) * inv);
    v = rd(zt, nearbyint(v) + em_load_f64(z->data, z->dtype, em_strided_offset(z, c)));
    store_q(out, em_strided_offset(out, i), clamp_q(v, qmin, qmax));
  }
  return EM_OK;
}

/* a - b in int64 wrapping as torch's integer arithmetic does (a hostile zero point near INT64_MIN
 * must not be signed overflow): computed in uint64, mapped back without an out-of-range cast. */
static int64_t wrap_sub(int64_t a, int64_t b) {
  uint64_t r = (uint64_t)a - (uint64_t)b;
  return r > (uint64_t)INT64_MAX ? -(int64_t)(UINT64_MAX - r) - 1 : (int64_t)r;
}

/* (q - zp) * scale with torch's promotions; zp_t may be NULL. Returns the value before out cast. */
static double dequant_value(int64_t q, int qdt, const em_tensor *zp_t, int64_t zi,
                            const em_tensor *s, int64_t si) {
  double v;
  int t;
  if (zp_t) {
    t = em_promote_types(qdt, zp_t->dtype);
    if (em_dtype_is_float(t))
      v = rd(t, (double)q - em_load_f64(zp_t->data, zp_t->dtype, zi));
    else
      v = (double)wrap_sub(q, em_load_i64(zp_t->data, zp_t->dtype, zi));
  } else {
    t = qdt;
    v = (double)q;
  }
  int mt = em_promote_types(t, s->dtype);
  return rd(mt, v * em_load_f64(s->data, s->dtype, si));
}

/*
 * quantized_decomposed::dequantize_per_channel.out(Tensor input, Tensor scales,
 *   Tensor? zero_points, int axis, int quant_min, int quant_max, ScalarType dtype, *,
 *   ScalarType? out_dtype=None, Tensor(a!) out)
 */
em_status em_qd_dequantize_per_channel_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *q = EM_ARG_TENSOR(args, 0), *s = EM_ARG_TENSOR(args, 1), *out = EM_ARG_TENSOR(args, 8);
  em_tensor *z = EM_ARG_IS_NONE(args, 2) ? NULL : EM_ARG_TENSOR(args, 2);
  int64_t axis, qmin, qmax;
  int32_t ax;
  NN_CHECK_TENSOR(ctx, q, "input");
  EM_KCHECK(ctx, out, "out must be a tensor");
  EM_KCHECK(ctx, em_arg_int(args[3], &axis) && q->dim > 0 && em_norm_dim(axis, q->dim, &ax),
            "axis out of range");
  EM_KCHECK(ctx, em_arg_int(args[4], &qmin) && em_arg_int(args[5], &qmax), "bad quant range");
  EM_KTRY(check_qrange(ctx, args[6], qmin, qmax, q));
  EM_KTRY(out_dtype_arg(ctx, args[7], out));
  EM_KTRY(qparam(ctx, s, q->sizes[ax], "scales"));
  EM_KCHECK(ctx, em_dtype_is_float(s->dtype), "scales must be floating point");
  if (z) EM_KTRY(qparam(ctx, z, q->sizes[ax], "zero_points"));
  EM_KTRY(same_shape_out(ctx, q, out));
  for (int64_t i = 0; i < q->numel; i++) {
    int64_t c = axis_index(q, ax, i);
    double v = dequant_value(load_q(q, em_strided_offset(q, i)), q->dtype, z,
                             z ? em_strided_offset(z, c) : 0, s, em_strided_offset(s, c));
    em_store_f64(out->data, out->dtype, em_strided_offset(out, i), v);
  }
  return EM_OK;
}

/* Number of tokens (product of all dims but the last) and the token length. */
static void tokens(const em_tensor *x, int64_t *n_tok, int64_t *len) {
  *len = x->dim ? x->sizes[x->dim - 1] : 1;
  *n_tok = 1;
  for (int32_t d = 0; d + 1 < x->dim; d++) *n_tok *= x->sizes[d];
}

/*
 * quantized_decomposed::quantize_per_token.out(Tensor input, Tensor scales, Tensor zero_points,
 *   int quant_min, int quant_max, ScalarType dtype, *, Tensor(a!) out)
 */
em_status em_qd_quantize_per_token_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *x = EM_ARG_TENSOR(args, 0), *s = EM_ARG_TENSOR(args, 1), *z = EM_ARG_TENSOR(args, 2),
            *out = EM_ARG_TENSOR(args, 6);
  int64_t qmin, qmax, nt, len;
  NN_CHECK_TENSOR(ctx, x, "input");
  EM_KCHECK(ctx, out, "out must be a tensor");
  EM_KCHECK(ctx, em_dtype_is_float(x->dtype), "input must be floating point");
  EM_KCHECK(ctx, em_arg_int(args[3], &qmin) && em_arg_int(args[4], &qmax), "bad quant range");
  EM_KTRY(check_qrange(ctx, args[5], qmin, qmax, out));
  tokens(x, &nt, &len);
  EM_KTRY(qparam(ctx, s, nt, "scales"));
  EM_KTRY(qparam(ctx, z, nt, "zero_points"));
  EM_KCHECK(ctx, em_dtype_is_float(s->dtype), "scales must be floating point");
  EM_KTRY(same_shape_out(ctx, x, out));
  int ct = em_promote_types(x->dtype, s->dtype), zt = em_promote_types(ct, z->dtype);
  for (int64_t i = 0; i < x->numel; i++) {
    int64_t t = i / (len ? len : 1);
    double inv = rd(s->dtype, 1.0 / em_load_f64(s->data, s->dtype, em_strided_offset(s, t)));
    double v = rd(ct, em_load_f64(x->data, x->dtype, em_strided_offset(x, i)) * inv);
    v = rd(zt, v + em_load_f64(z->data, z->dtype, em_strided_offset(z, t)));
    store_q(out, em_strided_offset(out, i), clamp_q(nearbyint(v), qmin, qmax));
  }
  return EM_OK;
}

/*
 * quantized_decomposed::dequantize_per_token.out(Tensor input, Tensor scales,
 *   Tensor zero_points, int quant_min, int quant_max, ScalarType dtype,
 *   ScalarType output_dtype, *, Tensor(a!) out)
 */
em_status em_qd_dequantize_per_token_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *q = EM_ARG_TENSOR(args, 0), *s = EM_ARG_TENSOR(args, 1), *z = EM_ARG_TENSOR(args, 2),
            *out = EM_ARG_TENSOR(args, 7);
  int64_t qmin, qmax, od, nt, len;
  NN_CHECK_TENSOR(ctx, q, "input");
  EM_KCHECK(ctx, out, "out must be a tensor");
  EM_KCHECK(ctx, em_arg_int(args[3], &qmin) && em_arg_int(args[4], &qmax), "bad quant range");
  EM_KTRY(check_qrange(ctx, args[5], qmin, qmax, q));
  EM_KCHECK(ctx, em_arg_int(args[6], &od) && od == out->dtype && em_dtype_is_float(out->dtype),
            "output_dtype must be a float dtype equal to out's");
  tokens(q, &nt, &len);
  EM_KTRY(qparam(ctx, s, nt, "scales"));
  EM_KTRY(qparam(ctx, z, nt, "zero_points"));
  EM_KCHECK(ctx, em_dtype_is_float(s->dtype), "scales must be floating point");
  EM_KTRY(same_shape_out(ctx, q, out));
  for (int64_t i = 0; i < q->numel; i++) {
    int64_t t = i / (len ? len : 1);
    double v = dequant_value(load_q(q, em_strided_offset(q, i)), q->dtype, z,
                             em_strided_offset(z, t), s, em_strided_offset(s, t));
    em_store_f64(out->data, out->dtype, em_strided_offset(out, i), v);
  }
  return EM_OK;
}

/* Resizes a qparam output to `dim` sizes and checks it is float (scale) or integral (zp). */
static em_status qparam_out(em_kernel_ctx *ctx, em_tensor *t, const int64_t *sz, int32_t dim,
                            bool is_scale) {
  EM_KCHECK(ctx, t && t->dim == dim, "qparam output must be a %d-D tensor", (int)(dim));
  EM_KCHECK(ctx,
            is_scale ? em_dtype_is_float(t->dtype)
                     : (em_dtype_is_int(t->dtype) || em_dtype_is_float(t->dtype)),
            "bad qparam output dtype %s", em_dtype_name(t->dtype));
  return em_resize_out(ctx, t, sz, dim);
}

/*
 * quantized_decomposed::choose_qparams.Tensor_out(Tensor input, int quant_min, int quant_max,
 *   float eps, ScalarType dtype, *, Tensor(a!) scale_out, Tensor(b!) zero_point_out)
 * Per-tensor affine qparams as torch.ao.quantization.utils.determine_qparams.
 */
em_status em_qd_choose_qparams_tensor_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *x = EM_ARG_TENSOR(args, 0), *so = EM_ARG_TENSOR(args, 5), *zo = EM_ARG_TENSOR(args, 6);
  int64_t qmin, qmax, dt;
  double eps;
  NN_CHECK_TENSOR(ctx, x, "input");
  EM_KCHECK(ctx, em_dtype_is_float(x->dtype) && x->dtype != EM_DTYPE_F64,
            "input must be f32, f16 or bf16");
  EM_KCHECK(ctx, x->numel > 0, "input must not be empty");
  EM_KCHECK(ctx, em_arg_int(args[1], &qmin) && em_arg_int(args[2], &qmax) && qmin < qmax,
            "bad quant range");
  EM_KCHECK(ctx, em_arg_double(args[3], &eps) && em_arg_int(args[4], &dt), "bad eps/dtype");
  int64_t one = 1;
  EM_KTRY(qparam_out(ctx, so, &one, 1, true));
  EM_KTRY(qparam_out(ctx, zo, &one, 1, false));
  int t = x->dtype;
  double mn = INFINITY, mx = -INFINITY;
  for (int64_t i = 0; i < x->numel; i++) {
    double v = em_load_f64(x->data, t, em_strided_offset(x, i));
    if (v < mn || v != v) mn = v;
    if (v > mx || v != v) mx = v;
  }
  double scale = 1.0;
  int64_t zp = 0;
  if (!(mn > mx)) { /* check_min_max_valid */
    double mneg = mn < 0 ? mn : 0, mpos = mx > 0 ? mx : 0;
    scale = rd(t, rd(t, mpos - mneg) / (double)(qmax - qmin));
    int et = em_promote_types(t, EM_DTYPE_F32);
    double e = rd(EM_DTYPE_F32, eps);
    scale = rd(et, scale > e ? scale : e);
    const double r = nearbyint(rd(et, mneg / scale));
    /* -inf / inf is NaN: torch casts it to int32's INT32_MIN (x86) and subtracts in int32,
     * wrapping; the same here, defined (a plain cast would be undefined behaviour). */
    zp = r == r ? qmin - (int64_t)r : (int64_t)(int32_t)(uint32_t)((uint64_t)qmin + 2147483648u);
    zp = zp < qmin ? qmin : zp > qmax ? qmax : zp;
  }
  em_store_f64(so->data, so->dtype, 0, scale);
  em_store_i64(zo->data, zo->dtype, 0, zp);
  return EM_OK;
}

/*
 * quantized_decomposed::choose_qparams_per_token_asymmetric.out(Tensor input, ScalarType dtype,
 *   *, Tensor(a!) scale_out, Tensor(b!) zero_point_out)
 * Per row of the last dim, int8 range [-128, 127], in the input's dtype (XNNPACK's rule).
 */
em_status em_qd_choose_qparams_per_token_asymmetric_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *x = EM_ARG_TENSOR(args, 0), *so = EM_ARG_TENSOR(args, 2), *zo = EM_ARG_TENSOR(args, 3);
  NN_CHECK_TENSOR(ctx, x, "input");
  EM_KCHECK(ctx, em_dtype_is_float(x->dtype) && x->dim >= 1, "input must be a float tensor");
  int64_t nt, len, sz[EM_MAX_DIM];
  tokens(x, &nt, &len);
  EM_KCHECK(ctx, len > 0, "token length must be positive");
  for (int32_t d = 0; d < x->dim; d++) sz[d] = d + 1 < x->dim ? x->sizes[d] : 1;
  EM_KTRY(qparam_out(ctx, so, sz, x->dim, true));
  EM_KTRY(qparam_out(ctx, zo, sz, x->dim, false));
  int t = x->dtype;
  const double qmin = -128, qmax = 127, eps = 1.1920928955078125e-07; /* finfo(f32).eps */
  for (int64_t k = 0; k < nt; k++) {
    double mn = INFINITY, mx = -INFINITY;
    for (int64_t j = 0; j < len; j++) {
      double v = em_load_f64(x->data, t, em_strided_offset(x, k * len + j));
      if (v < mn || v != v) mn = v;
      if (v > mx || v != v) mx = v;
    }
    double mneg = mn < 0 ? mn : 0, mpos = mx > 0 ? mx : 0;
    double scale = rd(t, rd(t, mpos - mneg) / (qmax - qmin));
    scale = rd(t, scale < eps ? eps : scale);
    double dmin = rd(t, mneg / scale), dmax = rd(t, mpos / scale);
    double emin = rd(t, qmin + dmin), emax = rd(t, qmax + dmax);
    double zp = rd(t, emin + emax) > 0 ? rd(t, qmin - dmin) : rd(t, qmax - dmax);
    zp = zp < qmin ? qmin : zp > qmax ? qmax : zp;
    zp = nearbyint(zp);
    em_store_f64(so->data, so->dtype, em_strided_offset(so, k), scale);
    /* An infinite value gives a NaN zero point; PyTorch's int64 cast of it is INT64_MIN on x86
     * (undefined behaviour in C): that value, defined. */
    em_store_i64(zo->data, zo->dtype, em_strided_offset(zo, k), zp != zp ? INT64_MIN : (int64_t)zp);
  }
  return EM_OK;
}

/*
 * quantized_decomposed::add.out(Tensor a, float a_scale, int a_zero_point, int a_quant_min,
 *   int a_quant_max, Tensor b, float b_scale, int b_zero_point, int b_quant_min,
 *   int b_quant_max, float out_scale, int out_zero_point, int out_quant_min,
 *   int out_quant_max, *, Tensor(a!) out)
 * Dequantize -> f32 add -> quantize, with executorch's f32 rounding (scales cast to float).
 */
em_status em_qd_add_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *a = EM_ARG_TENSOR(args, 0), *b = EM_ARG_TENSOR(args, 5),
            *out = EM_ARG_TENSOR(args, 14);
  double sc[3];
  int64_t zp[3], lo[3], hi[3];
  NN_CHECK_TENSOR(ctx, a, "a");
  NN_CHECK_TENSOR(ctx, b, "b");
  EM_KCHECK(ctx, out, "out must be a tensor");
  for (int k = 0; k < 3; k++) {
    int base = k == 0 ? 1 : k == 1 ? 6 : 10;
    EM_KCHECK(ctx,
              em_arg_double(args[base], &sc[k]) && em_arg_int(args[base + 1], &zp[k]) &&
                  em_arg_int(args[base + 2], &lo[k]) && em_arg_int(args[base + 3], &hi[k]),
              "bad scale/zero_point/quant_min/quant_max");
    EM_KCHECK(ctx, lo[k] <= hi[k], "quant_min must not exceed quant_max");
  }
  EM_KCHECK(ctx, em_dtype_is_int(a->dtype) && b->dtype == a->dtype && out->dtype == a->dtype,
            "a, b and out must share an integer dtype");
  EM_KCHECK(ctx, a->dim == b->dim, "a and b must have the same shape");
  for (int32_t d = 0; d < a->dim; d++)
    EM_KCHECK(ctx, a->sizes[d] == b->sizes[d], "a and b must have the same shape");
  EM_KTRY(same_shape_out(ctx, a, out));
  float as = (float)sc[0], bs = (float)sc[1], inv = 1.0f / (float)sc[2];
  int32_t az = (int32_t)zp[0], bz = (int32_t)zp[1], oz = (int32_t)zp[2];
  for (int64_t i = 0; i < a->numel; i++) {
    float x = (float)((double)(em_load_i64(a->data, a->dtype, em_strided_offset(a, i)) - az) * as);
    float y = (float)((double)(em_load_i64(b->data, b->dtype, em_strided_offset(b, i)) - bz) * bs);
    float q = (float)oz + nearbyintf(inv * (x + y));
    int64_t v = clamp_q(q, lo[2], hi[2]);
    em_store_i64(out->data, out->dtype, em_strided_offset(out, i), v);
  }
  return EM_OK;
}
