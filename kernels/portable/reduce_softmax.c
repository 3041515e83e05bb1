/*
 * reduce_softmax.c — reductions along one dim that write a full line:
 * _softmax, _log_softmax and topk.
 *
 * Softmax computes in double with the max subtracted; topk sorts each line
 * (NaN ranks above every number, equal values keep index order) with a merge
 * sort in temp memory.
 */
#include <math.h>

#include "portable/ew_util.h"

/* Plans a walk over every line along `dim` of in (and outs of the same rank). */
static void plan_lines(const em_tensor *in, int32_t dim, em_tensor *const *outs, int n_outs,
                       ew_reduce *r) {
  bool mask[EM_MAX_DIM] = {false};
  if (in->dim > 0) mask[dim] = true;
  ew_reduce_init(r, in, mask, outs, n_outs);
}

static em_status softmax(em_kernel_ctx *ctx, em_evalue **args, bool log_sm) {
  EW_TENSOR_ARG(self, ctx, args, 0);
  em_tensor *out = EM_ARG_TENSOR(args, 3);
  EM_KCHECK(ctx, out, "out must be a tensor");
  EM_KCHECK(ctx, em_dtype_is_float(self->dtype), "softmax needs a floating input, got %s",
            em_dtype_name(self->dtype));
  int64_t dim_arg;
  bool h2f;
  EM_KCHECK(ctx, em_arg_int(args[1], &dim_arg), "dim must be an int");
  EM_KCHECK(ctx, em_arg_bool(args[2], &h2f), "half_to_float must be a bool");
  int32_t dim;
  EM_KCHECK(ctx, em_norm_dim(dim_arg, self->dim, &dim), "dim %lld out of range",
            (long long)dim_arg);
  if (h2f)
    EM_KCHECK(ctx,
              (self->dtype == EM_DTYPE_F16 || self->dtype == EM_DTYPE_BF16) &&
                  out->dtype == EM_DTYPE_F32,
              "half_to_float needs a f16/bf16 input and a f32 out");
  else
    EM_KCHECK(ctx, out->dtype == self->dtype, "out dtype %s must match input dtype %s",
              em_dtype_name(out->dtype), em_dtype_name(self->dtype));
  EM_KTRY(em_resize_out(ctx, out, self->sizes, self->dim));
  if (out->numel == 0) return EM_OK;
  EM_KCHECK(ctx, out->data, "out has no data");
  ew_reduce r;
  plan_lines(self, dim, &out, 1, &r);
  int64_t n = self->dim > 0 ? self->sizes[dim] : 1;
  int64_t si = self->dim > 0 ? self->strides[dim] : 0, so = self->dim > 0 ? out->strides[dim] : 0;
  int d = self->dtype;
  bool fast = d == EM_DTYPE_F32 && out->dtype == EM_DTYPE_F32;
  for (int64_t o = 0; o < r.out_numel; o++) {
    int64_t bi = r.outer.off[0], bo = r.outer.off[1];
    double mx = -INFINITY, sum = 0;
    if (fast) { /* single precision, as ATen's vectorized f32 softmax */
      const float *x = (const float *)self->data + bi;
      float *y = (float *)out->data + bo;
      float m = -INFINITY, sf = 0.0f;
      for (int64_t j = 0; j < n; j++) {
        float v = x[j * si];
        m = (v != v || m != m) ? NAN : fmaxf(m, v);
      }
      for (int64_t j = 0; j < n; j++) sf += expf(x[j * si] - m);
      float lsf = logf(sf);
      for (int64_t j = 0; j < n; j++) {
        float e = x[j * si] - m;
        y[j * so] = log_sm ? e - lsf : expf(e) / sf;
      }
    } else {
      for (int64_t j = 0; j < n; j++) {
        double v = em_load_f64(self->data, d, bi + j * si);
        mx = (v != v || mx != mx) ? NAN : fmax(mx, v);
      }
      for (int64_t j = 0; j < n; j++) sum += exp(em_load_f64(self->data, d, bi + j * si) - mx);
      double ls = log(sum);
      for (int64_t j = 0; j < n; j++) {
        double e = em_load_f64(self->data, d, bi + j * si) - mx;
        em_store_f64(out->data, out->dtype, bo + j * so, log_sm ? e - ls : exp(e) / sum);
      }
    }
    ew_iter_next(&r.outer);
  }
  return EM_OK;
}

em_status em_softmax_out(em_kernel_ctx *ctx, em_evalue **args) { return softmax(ctx, args, false); }
em_status em_log_softmax_out(em_kernel_ctx *ctx, em_evalue **args) {
  return softmax(ctx, args, true);
}

/* ---- topk ---- */

typedef struct topk_item {
  ew_val v;
  int64_t i;
} topk_item;

/* True when a ranks before b. */
static bool ranks_before(const topk_item *a, const topk_item *b, bool fp, bool largest) {
  if (fp) {
    bool an = a->v.f != a->v.f, bn = b->v.f != b->v.f;
    if (an || bn) {
      if (an && bn) return a->i < b->i;
      return largest ? an : bn;
    }
    if (a->v.f != b->v.f) return largest ? a->v.f > b->v.f : a->v.f < b->v.f;
  } else if (a->v.i != b->v.i) {
    return largest ? a->v.i > b->v.i : a->v.i < b->v.i;
  }
  return a->i < b->i;
}

/* Bottom-up merge sort of items[0..n) using tmp[0..n). */
static void merge_sort(topk_item *items, topk_item *tmp, int64_t n, bool fp, bool largest) {
  topk_item *src = items, *dst = tmp;
  for (int64_t w = 1; w < n; w *= 2) {
    for (int64_t lo = 0; lo < n; lo += 2 * w) {
      int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
      int64_t a = lo, b = mid, k = lo;
      while (a < mid && b < hi)
        dst[k++] = ranks_before(&src[b], &src[a], fp, largest) ? src[b++] : src[a++];
      while (a < mid) dst[k++] = src[a++];
      while (b < hi) dst[k++] = src[b++];
    }
    topk_item *t = src;
    src = dst;
    dst = t;
  }
  if (src != items) memcpy(items, src, sizeof(topk_item) * (size_t)n);
}

em_status em_topk_values(em_kernel_ctx *ctx, em_evalue **args) {
  EW_TENSOR_ARG(self, ctx, args, 0);
  EM_KCHECK(ctx, self->dtype != EM_DTYPE_BOOL, "topk is not implemented for bool");
  int64_t k, dim_arg;
  bool largest, sorted;
  EM_KCHECK(ctx, em_arg_int(args[1], &k), "k must be an int");
  EM_KCHECK(ctx, em_arg_int(args[2], &dim_arg), "dim must be an int");
  EM_KCHECK(ctx, em_arg_bool(args[3], &largest) && em_arg_bool(args[4], &sorted),
            "largest/sorted must be bools");
  em_tensor *vals = EM_ARG_TENSOR(args, 5), *idx = EM_ARG_TENSOR(args, 6);
  EM_KCHECK(ctx, vals && vals->dtype == self->dtype, "values must be a tensor of dtype %s",
            em_dtype_name(self->dtype));
  EM_KCHECK(ctx, idx && idx->dtype == EM_DTYPE_I64, "indices must be an i64 tensor");
  int32_t dim;
  EM_KCHECK(ctx, em_norm_dim(dim_arg, self->dim, &dim), "dim %lld out of range",
            (long long)dim_arg);
  int64_t n = self->dim > 0 ? self->sizes[dim] : 1;
  EM_KCHECK(ctx, k >= 0 && k <= n, "k (%lld) out of range for dim size %lld", (long long)k,
            (long long)n);
  int64_t sizes[EM_MAX_DIM];
  memcpy(sizes, self->sizes, sizeof(int64_t) * (size_t)self->dim);
  if (self->dim > 0) sizes[dim] = k;
  EM_KTRY(em_resize_out(ctx, vals, sizes, self->dim));
  EM_KTRY(em_resize_out(ctx, idx, sizes, self->dim));
  if (vals->numel == 0) return EM_OK;
  EM_KCHECK(ctx, vals->data && idx->data, "out has no data");
  topk_item *items = em_kernel_alloc_temp(ctx, sizeof(topk_item) * (size_t)n * 2, 16);
  if (!items) {
    em_kernel_fail(ctx, __FILE__, __LINE__, "no temp memory for %lld items", (long long)n * 2);
    return EM_ERR_MEMORY_ALLOCATION_FAILED;
  }
  em_tensor *outs[2] = {vals, idx};
  ew_reduce r;
  plan_lines(self, dim, outs, 2, &r);
  int64_t si = self->dim > 0 ? self->strides[dim] : 0;
  int64_t sv = self->dim > 0 ? vals->strides[dim] : 0, sx = self->dim > 0 ? idx->strides[dim] : 0;
  int d = self->dtype;
  bool fp = em_dtype_is_float(d);
  for (int64_t o = 0; o < r.out_numel; o++) {
    for (int64_t j = 0; j < n; j++) {
      items[j].v = ew_load(self, r.outer.off[0] + j * si, d);
      items[j].i = j;
    }
    merge_sort(items, items + n, n, fp, largest);
    for (int64_t j = 0; j < k; j++) {
      ew_store(vals, r.outer.off[1] + j * sv, items[j].v, d);
      ((int64_t *)idx->data)[r.outer.off[2] + j * sx] = items[j].i;
    }
    ew_iter_next(&r.outer);
  }
  return EM_OK;
}
