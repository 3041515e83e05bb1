/*
 * nn_embed_dist.c — aten::embedding.out (row gather) and the pairwise
 * distances aten::_cdist_forward.out and _pdist_forward.out.
 *
 * Distances are computed directly in double for every p (ATen's mm-based
 * Euclidean shortcut only changes rounding): p = 0 counts differing
 * coordinates, p = inf takes the largest |difference|, otherwise
 * (sum |d|^p)^(1/p) with exact forms for p = 1 and 2.
 */
#include "portable/nn_util.h"

/*
 * aten::embedding.out(Tensor weight, Tensor indices, SymInt padding_idx=-1,
 *   bool scale_grad_by_freq=False, bool sparse=False, *, Tensor(a!) out)
 */
em_status em_embedding_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *w = EM_ARG_TENSOR(args, 0), *idx = EM_ARG_TENSOR(args, 1),
            *out = EM_ARG_TENSOR(args, 5);
  NN_CHECK_TENSOR(ctx, w, "weight");
  NN_CHECK_TENSOR(ctx, idx, "indices");
  EM_KCHECK(ctx, w->dim == 2, "weight must be 2-D, got %d-D", (int)(w->dim));
  EM_KCHECK(ctx, idx->dtype == EM_DTYPE_I64 || idx->dtype == EM_DTYPE_I32,
            "indices must be int64 or int32");
  EM_KCHECK(ctx, idx->dim + 1 <= EM_MAX_DIM, "indices rank too large");
  EM_KCHECK(ctx, out && out->dtype == w->dtype && out->dim == idx->dim + 1,
            "out must have weight's dtype and rank indices.dim + 1");
  int64_t sz[EM_MAX_DIM];
  for (int32_t d = 0; d < idx->dim; d++) sz[d] = idx->sizes[d];
  int64_t D = w->sizes[1], V = w->sizes[0];
  sz[idx->dim] = D;
  EM_KTRY(em_resize_out(ctx, out, sz, idx->dim + 1));
  size_t es = em_dtype_size(w->dtype);
  int32_t od = idx->dim;
  for (int64_t i = 0; i < idx->numel; i++) {
    int64_t k = em_load_i64(idx->data, idx->dtype, em_strided_offset(idx, i));
    EM_KCHECK(ctx, k >= 0 && k < V, "index %lld out of range [0, %lld)", (long long)k,
              (long long)V);
    if (D == 0) continue; /* empty rows: no data to point into (a [V, 0] weight has none) */
    int64_t ob = 0, rem = i;
    for (int32_t d = od - 1; d >= 0; d--) {
      ob += (rem % out->sizes[d]) * out->strides[d];
      rem /= out->sizes[d];
    }
    const char *src = (const char *)w->data + k * w->strides[0] * (int64_t)es;
    char *dst = (char *)out->data + ob * (int64_t)es;
    int64_t ws = w->strides[1], os = out->strides[od];
    if (ws == 1 && os == 1) {
      memmove(dst, src, (size_t)D * es);
    } else {
      for (int64_t j = 0; j < D; j++)
        memmove(dst + j * os * (int64_t)es, src + j * ws * (int64_t)es, es);
    }
  }
  return EM_OK;
}

/* p-norm distance between rows a (stride as) and b (stride bs) of m doubles. */
static double pdist_row(const em_tensor *ta, int64_t a, int64_t as, const em_tensor *tb, int64_t b,
                        int64_t bs, int64_t m, double p) {
  double acc = 0.0;
  for (int64_t k = 0; k < m; k++) {
    double d = fabs(em_load_f64(ta->data, ta->dtype, a + k * as) -
                    em_load_f64(tb->data, tb->dtype, b + k * bs));
    if (p == 0.0)
      acc += d != 0.0;
    else if (isinf(p))
      acc = d > acc || isnan(d) ? d : acc;
    else if (p == 1.0)
      acc += d;
    else if (p == 2.0)
      acc += d * d;
    else
      acc += pow(d, p);
  }
  if (p == 0.0 || p == 1.0 || isinf(p)) return acc;
  if (p == 2.0) return sqrt(acc);
  return pow(acc, 1.0 / p);
}

/* aten::_cdist_forward.out(Tensor x1, Tensor x2, float p, int? compute_mode, *, Tensor(a!) out) */
em_status em__cdist_forward_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *x1 = EM_ARG_TENSOR(args, 0), *x2 = EM_ARG_TENSOR(args, 1),
            *out = EM_ARG_TENSOR(args, 4);
  double p;
  int64_t mode;
  NN_CHECK_TENSOR(ctx, x1, "x1");
  NN_CHECK_TENSOR(ctx, x2, "x2");
  EM_KCHECK(ctx, em_arg_double(args[2], &p) && p >= 0.0, "p must be a non-negative float");
  EM_KCHECK(ctx, nn_opt_int(args[3], 0, &mode) && mode >= 0 && mode <= 2, "bad compute_mode");
  EM_KCHECK(ctx, x1->dim >= 2 && x2->dim >= 2, "x1 and x2 must have at least 2 dims");
  EM_KCHECK(ctx, (x1->dtype == EM_DTYPE_F32 || x1->dtype == EM_DTYPE_F64) && x2->dtype == x1->dtype,
            "x1 and x2 must share dtype f32 or f64");
  EM_KCHECK(ctx, x1->sizes[x1->dim - 1] == x2->sizes[x2->dim - 1],
            "x1 and x2 must have the same number of columns");
  int64_t bsz[EM_MAX_DIM];
  int32_t bd;
  EM_KCHECK(ctx, em_broadcast_shapes(x1->sizes, x1->dim - 2, x2->sizes, x2->dim - 2, bsz, &bd),
            "batch dims do not broadcast");
  int64_t P = x1->sizes[x1->dim - 2], R = x2->sizes[x2->dim - 2], M = x1->sizes[x1->dim - 1];
  bsz[bd] = P;
  bsz[bd + 1] = R;
  EM_KCHECK(ctx, out && out->dtype == x1->dtype && out->dim == bd + 2,
            "out must be a %d-D tensor of the input dtype", (int)(bd + 2));
  EM_KTRY(em_resize_out(ctx, out, bsz, bd + 2));
  int64_t B = 1;
  for (int32_t d = 0; d < bd; d++) B *= bsz[d];
  for (int64_t b = 0; b < B; b++) {
    int64_t o1 = 0, o2 = 0, oo = 0, rem = b;
    for (int32_t d = bd - 1; d >= 0; d--) {
      int64_t i = rem % bsz[d];
      rem /= bsz[d];
      int32_t d1 = d - (bd - (x1->dim - 2)), d2 = d - (bd - (x2->dim - 2));
      if (d1 >= 0 && x1->sizes[d1] != 1) o1 += i * x1->strides[d1];
      if (d2 >= 0 && x2->sizes[d2] != 1) o2 += i * x2->strides[d2];
      oo += i * out->strides[d];
    }
    for (int64_t i = 0; i < P; i++)
      for (int64_t j = 0; j < R; j++) {
        double v = pdist_row(x1, o1 + i * x1->strides[x1->dim - 2], x1->strides[x1->dim - 1], x2,
                             o2 + j * x2->strides[x2->dim - 2], x2->strides[x2->dim - 1], M, p);
        em_store_f64(out->data, out->dtype, oo + i * out->strides[bd] + j * out->strides[bd + 1],
                     v);
      }
  }
  return EM_OK;
}

/* aten::_pdist_forward.out(Tensor self, float p=2., *, Tensor(a!) out) */
em_status em__pdist_forward_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *x = EM_ARG_TENSOR(args, 0), *out = EM_ARG_TENSOR(args, 2);
  double p;
  NN_CHECK_TENSOR(ctx, x, "self");
  EM_KCHECK(ctx, em_arg_double(args[1], &p) && p >= 0.0, "p must be a non-negative float");
  EM_KCHECK(ctx, x->dim == 2, "self must be 2-D, got %d-D", (int)(x->dim));
  EM_KCHECK(ctx, x->dtype == EM_DTYPE_F32 || x->dtype == EM_DTYPE_F64, "self must be f32 or f64");
  EM_KCHECK(ctx, out && out->dtype == x->dtype && out->dim == 1,
            "out must be 1-D of the input dtype");
  int64_t N = x->sizes[0], M = x->sizes[1];
  int64_t n = N > 1 ? N * (N - 1) / 2 : 0;
  EM_KTRY(em_resize_out(ctx, out, &n, 1));
  int64_t k = 0;
  for (int64_t i = 0; i < N; i++)
    for (int64_t j = i + 1; j < N; j++, k++)
      em_store_f64(out->data, out->dtype, k * out->strides[0],
                   pdist_row(x, i * x->strides[0], x->strides[1], x, j * x->strides[0],
                             x->strides[1], M, p));
  return EM_OK;
}
