/*
 * nn_matmul.c — aten::mm.out, bmm.out, addmm.out, linear.out and the
 * any-dtype matrix product (nn_mm_any) they share with convolution.
 *
 * All operands must have one dtype (ATen's rule for these ops); f32 runs on
 * the packed GEMM (nn_gemm.c), f16/bf16 are widened to f32 for the product
 * when scratch allows, everything else uses exact reference loops. Operands
 * are read through their strides, so transposed and sliced views work.
 */
#include "portable/nn_util.h"

#define MM_DTYPES (EM_DT_REALS)

/* Reference product: double accumulation for floats, wrapping u64 for integers. */
static void mm_generic(int dtype, int64_t m, int64_t n, int64_t k, nn_view a, nn_view b,
                       nn_view c) {
  bool fl = em_dtype_is_float(dtype);
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      int64_t ci = c.off + i * c.rs + j * c.cs;
      if (fl) {
        double acc = 0.0;
        for (int64_t p = 0; p < k; p++)
          acc += em_load_f64(a.p, dtype, a.off + i * a.rs + p * a.cs) *
                 em_load_f64(b.p, dtype, b.off + p * b.rs + j * b.cs);
        em_store_f64(c.p, dtype, ci, acc);
      } else {
        uint64_t acc = 0;
        for (int64_t p = 0; p < k; p++)
          acc += (uint64_t)em_load_i64(a.p, dtype, a.off + i * a.rs + p * a.cs) *
                 (uint64_t)em_load_i64(b.p, dtype, b.off + p * b.rs + j * b.cs);
        em_store_i64(c.p, dtype, ci, (int64_t)acc);
      }
    }
}

/* One f16/bf16 element (bits) as f32. */
static inline float half_to_f32(int dtype, uint16_t h) {
  return dtype == EM_DTYPE_BF16 ? em_bf16_to_f32(h) : em_f16_to_f32(h);
}

/* Copies an [r, s] f16/bf16 view into a row-major f32 buffer dst[i * s + j]. */
static void widen(int dtype, nn_view v, int64_t r, int64_t s, float *dst) {
  const uint16_t *src = (const uint16_t *)v.p + v.off;
  for (int64_t i = 0; i < r; i++)
    for (int64_t j = 0; j < s; j++) dst[i * s + j] = half_to_f32(dtype, src[i * v.rs + j * v.cs]);
}

/*
 * f16/bf16 product through f32: A widened once, B widened and multiplied in
 * column blocks sized to the scratch (a large weight never needs a full f32
 * copy). Blocks of B are stored column-major so a decode-time product keeps the
 * matrix-vector path. Returns EM_ERR_MEMORY_ALLOCATION_FAILED (nothing logged)
 * when even one column does not fit.
 */
static em_status mm_half(em_kernel_ctx *ctx, int dtype, int64_t m, int64_t n, int64_t k, nn_view a,
                         nn_view b, nn_view c) {
  size_t mark = nn_temp_mark(ctx); /* widened copies live for this call only */
  float *aw = nn_temp(ctx, m * k, sizeof(float));
  int64_t nb = aw ? nn_temp_fit(ctx, (k + m) * (int64_t)sizeof(float), n) : 0;
  float *bw = aw ? nn_temp(ctx, k * nb, sizeof(float)) : NULL;
  float *cw = bw ? nn_temp(ctx, m * nb, sizeof(float)) : NULL;
  if (!cw) {
    nn_temp_release(ctx, mark);
    return EM_ERR_MEMORY_ALLOCATION_FAILED;
  }
  widen(dtype, a, m, k, aw);
  const uint16_t *bsrc = (const uint16_t *)b.p + b.off;
  uint16_t *cdst = (uint16_t *)c.p + c.off;
  for (int64_t n0 = 0; n0 < n; n0 += nb) {
    int64_t w = n - n0 < nb ? n - n0 : nb;
    for (int64_t j = 0; j < w; j++) /* column j of the block, contiguous in bw */
      for (int64_t p = 0; p < k; p++)
        bw[j * k + p] = half_to_f32(dtype, bsrc[p * b.rs + (n0 + j) * b.cs]);
    EM_KTRY(
        nn_sgemm(ctx, m, w, k, (nn_mat){aw, k, 1}, (nn_mat){bw, 1, k}, (nn_mat){cw, w, 1}, false));
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < w; j++) {
        float v = cw[i * w + j];
        cdst[i * c.rs + (n0 + j) * c.cs] =
            dtype == EM_DTYPE_BF16 ? em_f32_to_bf16(v) : em_f32_to_f16(v);
      }
  }
  nn_temp_release(ctx, mark);
  return EM_OK;
}

em_status nn_mm_any(em_kernel_ctx *ctx, int dtype, int64_t m, int64_t n, int64_t k, nn_view a,
                    nn_view b, nn_view c) {
  if (m <= 0 || n <= 0) return EM_OK;
  if (dtype == EM_DTYPE_F32) {
    float *ap = (float *)a.p + a.off, *bp = (float *)b.p + b.off, *cp = (float *)c.p + c.off;
    return nn_sgemm(ctx, m, n, k, (nn_mat){ap, a.rs, a.cs}, (nn_mat){bp, b.rs, b.cs},
                    (nn_mat){cp, c.rs, c.cs}, false);
  }
  if (dtype == EM_DTYPE_F16 || dtype == EM_DTYPE_BF16) {
    em_status st = mm_half(ctx, dtype, m, n, k, a, b, c);
    if (st != EM_ERR_MEMORY_ALLOCATION_FAILED) return st;
  }
  mm_generic(dtype, m, n, k, a, b, c);
  return EM_OK;
}

static nn_view view2(em_tensor *t, int64_t off, int d0, int d1) {
  return (nn_view){t->data, off, t->strides[d0], t->strides[d1]};
}

/* Common checks for mm-like ops: tensors present, one real dtype. */
static em_status check_operands(em_kernel_ctx *ctx, em_tensor *a, em_tensor *b, em_tensor *out) {
  NN_CHECK_TENSOR(ctx, a, "self");
  NN_CHECK_TENSOR(ctx, b, "mat2");
  EM_KCHECK(ctx, out, "out must be a tensor");
  EM_KCHECK(ctx, a->dtype == b->dtype && a->dtype == out->dtype,
            "dtypes must match (self %s, mat2 %s, out %s)", em_dtype_name(a->dtype),
            em_dtype_name(b->dtype), em_dtype_name(out->dtype));
  EM_KCHECK(ctx, (MM_DTYPES & EM_DTYPE_BIT(a->dtype)) != 0, "unsupported dtype %s",
            em_dtype_name(a->dtype));
  return EM_OK;
}

/* aten::mm.out(Tensor self, Tensor mat2, *, Tensor(a!) out) */
em_status em_mm_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *a = EM_ARG_TENSOR(args, 0), *b = EM_ARG_TENSOR(args, 1), *out = EM_ARG_TENSOR(args, 2);
  EM_KTRY(check_operands(ctx, a, b, out));
  EM_KCHECK(ctx, a->dim == 2 && b->dim == 2, "expected 2-D tensors, got %d-D and %d-D",
            (int)(a->dim), (int)(b->dim));
  EM_KCHECK(ctx, a->sizes[1] == b->sizes[0],
            "shapes cannot be multiplied (%lldx%lld and %lldx%lld)", (long long)a->sizes[0],
            (long long)a->sizes[1], (long long)b->sizes[0], (long long)b->sizes[1]);
  int64_t sz[2] = {a->sizes[0], b->sizes[1]};
  EM_KTRY(em_resize_out(ctx, out, sz, 2));
  return nn_mm_any(ctx, a->dtype, sz[0], sz[1], a->sizes[1], view2(a, 0, 0, 1), view2(b, 0, 0, 1),
                   view2(out, 0, 0, 1));
}

/* aten::bmm.out(Tensor self, Tensor mat2, *, Tensor(a!) out) */
em_status em_bmm_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *a = EM_ARG_TENSOR(args, 0), *b = EM_ARG_TENSOR(args, 1), *out = EM_ARG_TENSOR(args, 2);
  EM_KTRY(check_operands(ctx, a, b, out));
  EM_KCHECK(ctx, a->dim == 3 && b->dim == 3, "expected 3-D tensors, got %d-D and %d-D",
            (int)(a->dim), (int)(b->dim));
  EM_KCHECK(ctx, a->sizes[0] == b->sizes[0] && a->sizes[2] == b->sizes[1],
            "shapes cannot be multiplied ([%lld,%lld,%lld] and [%lld,%lld,%lld])",
            (long long)a->sizes[0], (long long)a->sizes[1], (long long)a->sizes[2],
            (long long)b->sizes[0], (long long)b->sizes[1], (long long)b->sizes[2]);
  int64_t sz[3] = {a->sizes[0], a->sizes[1], b->sizes[2]};
  EM_KTRY(em_resize_out(ctx, out, sz, 3));
  for (int64_t i = 0; i < sz[0]; i++)
    EM_KTRY(nn_mm_any(ctx, a->dtype, sz[1], sz[2], a->sizes[2], view2(a, i * a->strides[0], 1, 2),
                      view2(b, i * b->strides[0], 1, 2), view2(out, i * out->strides[0], 1, 2)));
  return EM_OK;
}

/* Reads alpha/beta-like scalars, rejecting floats for integral dtypes as ATen does. */
static em_status scalar_arg(em_kernel_ctx *ctx, em_evalue *v, int dtype, const char *name,
                            double *out) {
  EM_KCHECK(ctx, em_arg_double(v, out), "%s must be a number", name);
  EM_KCHECK(ctx, em_dtype_is_float(dtype) || em_scalar_is_integral(v),
            "%s must not be a floating point number for integral tensors", name);
  return EM_OK;
}

/*
 * out = alpha * out + beta * add, add broadcast over [m, n] (add may be NULL
 * or beta 0: then it is ignored entirely, NaNs included, as in ATen).
 */
static void epilogue(em_tensor *out, em_tensor *add, double alpha, double beta) {
  int64_t m = out->sizes[0], n = out->sizes[1];
  bool fl = em_dtype_is_float(out->dtype);
  bool use_add = add && beta != 0.0;
  if (!use_add && alpha == 1.0) return;
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      int64_t oi = i * out->strides[0] + j * out->strides[1];
      int64_t ai = 0;
      if (use_add) {
        int64_t idx[2] = {i, j};
        for (int32_t d = 0; d < add->dim; d++)
          if (add->sizes[d] != 1) ai += idx[d + (2 - add->dim)] * add->strides[d];
      }
      if (fl) {
        double v = em_load_f64(out->data, out->dtype, oi) * alpha;
        if (use_add) v += beta * em_load_f64(add->data, add->dtype, ai);
        em_store_f64(out->data, out->dtype, oi, v);
      } else {
        uint64_t v = (uint64_t)em_load_i64(out->data, out->dtype, oi) * (uint64_t)(int64_t)alpha;
        if (use_add)
          v += (uint64_t)(int64_t)beta * (uint64_t)em_load_i64(add->data, add->dtype, ai);
        em_store_i64(out->data, out->dtype, oi, (int64_t)v);
      }
    }
}

/* aten::addmm.out(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1, out) */
em_status em_addmm_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *self = EM_ARG_TENSOR(args, 0), *a = EM_ARG_TENSOR(args, 1),
            *b = EM_ARG_TENSOR(args, 2), *out = EM_ARG_TENSOR(args, 5);
  EM_KTRY(check_operands(ctx, a, b, out));
  NN_CHECK_TENSOR(ctx, self, "self");
  EM_KCHECK(ctx, self->dtype == a->dtype, "self dtype %s differs from mat1 dtype %s",
            em_dtype_name(self->dtype), em_dtype_name(a->dtype));
  EM_KCHECK(ctx, a->dim == 2 && b->dim == 2, "expected 2-D mat1 and mat2");
  EM_KCHECK(ctx, a->sizes[1] == b->sizes[0], "mat1 and mat2 shapes cannot be multiplied");
  int64_t sz[2] = {a->sizes[0], b->sizes[1]};
  EM_KCHECK(ctx, self->dim <= 2, "self must have at most 2 dims");
  for (int32_t d = 0; d < self->dim; d++)
    EM_KCHECK(ctx, self->sizes[d] == 1 || self->sizes[d] == sz[d + 2 - self->dim],
              "self does not broadcast to the product shape");
  double beta, alpha;
  EM_KTRY(scalar_arg(ctx, args[3], a->dtype, "beta", &beta));
  EM_KTRY(scalar_arg(ctx, args[4], a->dtype, "alpha", &alpha));
  EM_KTRY(em_resize_out(ctx, out, sz, 2));
  EM_KTRY(nn_mm_any(ctx, a->dtype, sz[0], sz[1], a->sizes[1], view2(a, 0, 0, 1), view2(b, 0, 0, 1),
                    view2(out, 0, 0, 1)));
  epilogue(out, self, alpha, beta);
  return EM_OK;
}

/* True when dims [0, nd) of t can be walked as one dim with the stride of dim nd-1. */
static bool leading_dims_merge(const em_tensor *t, int32_t nd) {
  for (int32_t d = 0; d + 1 < nd; d++)
    if (t->sizes[d] != 1 && t->strides[d] != t->strides[d + 1] * t->sizes[d + 1]) return false;
  return true;
}

/* aten::linear.out(Tensor input, Tensor weight, Tensor? bias=None, *, Tensor(a!) out) */
em_status em_linear_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *x = EM_ARG_TENSOR(args, 0), *w = EM_ARG_TENSOR(args, 1), *out = EM_ARG_TENSOR(args, 3);
  em_tensor *bias = EM_ARG_IS_NONE(args, 2) ? NULL : EM_ARG_TENSOR(args, 2);
  EM_KCHECK(ctx, EM_ARG_IS_NONE(args, 2) || bias, "bias must be a tensor or None");
  EM_KTRY(check_operands(ctx, x, w, out));
  EM_KCHECK(ctx, x->dim >= 1 && w->dim == 2, "expected input of rank >= 1 and a 2-D weight");
  int64_t in_f = w->sizes[1], out_f = w->sizes[0];
  EM_KCHECK(ctx, x->sizes[x->dim - 1] == in_f, "input features %lld do not match weight %lld",
            (long long)x->sizes[x->dim - 1], (long long)in_f);
  if (bias) {
    NN_CHECK_TENSOR(ctx, bias, "bias");
    EM_KCHECK(ctx, bias->dtype == x->dtype, "bias dtype must match input");
    EM_KCHECK(ctx, bias->dim <= 1 && (bias->numel == 1 || bias->numel == out_f),
              "bias must be a [%lld] tensor", (long long)out_f);
  }
  int64_t sz[EM_MAX_DIM];
  for (int32_t d = 0; d < x->dim; d++) sz[d] = x->sizes[d];
  sz[x->dim - 1] = out_f;
  EM_KCHECK(ctx, out->dim == x->dim, "out must have rank %d", (int)(x->dim));
  EM_KTRY(em_resize_out(ctx, out, sz, x->dim));
  if (out->numel == 0) return EM_OK;
  int32_t lead = x->dim - 1;                               /* leading (row) dims */
  nn_view wt = {w->data, 0, w->strides[1], w->strides[0]}; /* weight^T: [in_f, out_f] */
  int64_t ocs = out->strides[x->dim - 1];
  if (lead == 0) {
    EM_KTRY(nn_mm_any(ctx, x->dtype, 1, out_f, in_f, (nn_view){x->data, 0, 0, x->strides[0]}, wt,
                      (nn_view){out->data, 0, 0, ocs}));
  } else if (leading_dims_merge(x, lead) && leading_dims_merge(out, lead)) {
    int64_t rows = x->numel / in_f;
    if (in_f == 0) {
      rows = 1;
      for (int32_t d = 0; d < lead; d++) rows *= x->sizes[d];
    }
    EM_KTRY(nn_mm_any(ctx, x->dtype, rows, out_f, in_f,
                      (nn_view){x->data, 0, x->strides[lead - 1], x->strides[lead]}, wt,
                      (nn_view){out->data, 0, out->strides[lead - 1], ocs}));
  } else { /* one GEMM per position of the outer dims, rows along dim lead-1 */
    int64_t outer = 1;
    for (int32_t d = 0; d + 1 < lead; d++) outer *= x->sizes[d];
    for (int64_t o = 0; o < outer; o++) {
      int64_t xo = 0, oo = 0, rem = o;
      for (int32_t d = lead - 2; d >= 0; d--) {
        xo += (rem % x->sizes[d]) * x->strides[d];
        oo += (rem % x->sizes[d]) * out->strides[d];
        rem /= x->sizes[d];
      }
      EM_KTRY(nn_mm_any(ctx, x->dtype, x->sizes[lead - 1], out_f, in_f,
                        (nn_view){x->data, xo, x->strides[lead - 1], x->strides[lead]}, wt,
                        (nn_view){out->data, oo, out->strides[lead - 1], ocs}));
    }
  }
  if (!bias) return EM_OK;
  /* add the bias row by row over every leading position */
  int64_t rows = out->numel / out_f;
  int64_t bs = bias->dim == 1 && bias->sizes[0] != 1 ? bias->strides[0] : 0;
  for (int64_t r = 0; r < rows; r++) {
    int64_t oo = 0, rem = r;
    for (int32_t d = lead - 1; d >= 0; d--) {
      oo += (rem % out->sizes[d]) * out->strides[d];
      rem /= out->sizes[d];
    }
    if (out->dtype == EM_DTYPE_F32) {
      float *o = (float *)out->data + oo;
      const float *bp = bias->data;
      for (int64_t j = 0; j < out_f; j++) o[j * ocs] += bp[j * bs];
    } else {
      for (int64_t j = 0; j < out_f; j++) {
        int64_t oi = oo + j * ocs;
        if (em_dtype_is_float(out->dtype))
          em_store_f64(out->data, out->dtype, oi,
                       em_load_f64(out->data, out->dtype, oi) +
                           em_load_f64(bias->data, bias->dtype, j * bs));
        else
          em_store_i64(out->data, out->dtype, oi,
                       (int64_t)((uint64_t)em_load_i64(out->data, out->dtype, oi) +
                                 (uint64_t)em_load_i64(bias->data, bias->dtype, j * bs)));
      }
    }
  }
  return EM_OK;
}
