/*
 * index_sort.c — sort.values and sort.values_stable: values and int64 indices
 * of self sorted along one dim.
 *
 * Every row is sorted with a stable merge sort over element numbers (scratch
 * from the kernel's temp allocator), so equal keys keep their order whether or
 * not `stable` is set (a valid result for the unstable overload too). NaN sorts
 * as the largest value, as in ATen: last when ascending, first when descending.
 */
#include "portable/shape_util.h"

/* One row's keys: doubles for floating dtypes, int64 otherwise. */
typedef struct sort_keys {
  const double *d;
  const int64_t *i;
  bool descending;
} sort_keys;

/* True when element b must come before element a (strictly). */
static bool before(const sort_keys *k, int64_t b, int64_t a) {
  if (k->d) {
    double x = k->d[b], y = k->d[a];
    bool xn = x != x, yn = y != y;
    if (k->descending) return (xn && !yn) || (!xn && !yn && x > y);
    return (yn && !xn) || (!xn && !yn && x < y);
  }
  return k->descending ? k->i[b] > k->i[a] : k->i[b] < k->i[a];
}

/* Stable bottom-up merge sort of idx[0..n) using tmp[0..n). */
static void merge_sort(const sort_keys *k, int64_t *idx, int64_t *tmp, int64_t n) {
  for (int64_t w = 1; w < n; w *= 2) {
    for (int64_t lo = 0; lo < n; lo += 2 * w) {
      int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
      int64_t a = lo, b = mid, o = lo;
      while (a < mid && b < hi) tmp[o++] = before(k, idx[b], idx[a]) ? idx[b++] : idx[a++];
      while (a < mid) tmp[o++] = idx[a++];
      while (b < hi) tmp[o++] = idx[b++];
    }
    memcpy(idx, tmp, (size_t)n * sizeof *idx);
  }
}

/* Shared body: args[vi], args[ii] are the values and indices outs. */
static em_status sort_impl(em_kernel_ctx *ctx, em_tensor *in, int64_t dim, bool descending,
                           em_tensor *values, em_tensor *indices) {
  int32_t d;
  EM_KCHECK(ctx, em_norm_dim(dim, in->dim, &d), "dim %lld out of range for rank %d", (long long)dim,
            (int)in->dim);
  EM_KCHECK(
      ctx, em_dtype_is_float(in->dtype) || em_dtype_is_int(in->dtype) || in->dtype == EM_DTYPE_BOOL,
      "unsupported dtype %s", em_dtype_name(in->dtype));
  EM_KCHECK(ctx, values->dtype == in->dtype, "values dtype %s differs from input dtype %s",
            em_dtype_name(values->dtype), em_dtype_name(in->dtype));
  EM_KCHECK(ctx, indices->dtype == EM_DTYPE_I64, "indices must be int64, got %s",
            em_dtype_name(indices->dtype));
  EM_KCHECK(ctx, values->dim == in->dim && indices->dim == in->dim,
            "values and indices must have rank %d", (int)in->dim);
  EM_KTRY(em_resize_out(ctx, values, in->sizes, in->dim));
  EM_KTRY(em_resize_out(ctx, indices, in->sizes, in->dim));
  if (in->numel == 0) return EM_OK;
  int64_t n = in->dim ? in->sizes[d] : 1;
  int64_t ist = in->dim ? in->strides[d] : 0, vst = in->dim ? values->strides[d] : 0;
  int64_t xst = in->dim ? indices->strides[d] : 0;
  bool is_f = em_dtype_is_float(in->dtype);
  int64_t *idx = em_kernel_alloc_temp(ctx, (size_t)n * sizeof(int64_t), 8);
  int64_t *tmp = em_kernel_alloc_temp(ctx, (size_t)n * sizeof(int64_t), 8);
  void *keys = em_kernel_alloc_temp(ctx, (size_t)n * 8, 8);
  if (!idx || !tmp || !keys) return EM_ERR_MEMORY_ALLOCATION_FAILED;
  sort_keys k = {is_f ? keys : NULL, is_f ? NULL : keys, descending};
  /* Iterate over every row: the dims other than d. */
  int64_t osz[EM_MAX_DIM], ost[3][EM_MAX_DIM];
  int32_t r = 0;
  for (int32_t j = 0; j < in->dim; j++) {
    if (j == d) continue;
    osz[r] = in->sizes[j];
    ost[0][r] = in->strides[j];
    ost[1][r] = values->strides[j];
    ost[2][r++] = indices->strides[j];
  }
  em_shape_iter it;
  em_shape_iter_init(&it, osz, r);
  em_shape_iter_add(&it, ost[0]);
  em_shape_iter_add(&it, ost[1]);
  em_shape_iter_add(&it, ost[2]);
  size_t es = em_dtype_size(in->dtype);
  int64_t rows = em_shape_numel(osz, r);
  for (int64_t row = 0; row < rows; row++, em_shape_iter_next(&it)) {
    for (int64_t j = 0; j < n; j++) {
      idx[j] = j;
      if (is_f)
        ((double *)keys)[j] = em_load_f64(in->data, in->dtype, it.off[0] + j * ist);
      else
        ((int64_t *)keys)[j] = em_load_i64(in->data, in->dtype, it.off[0] + j * ist);
    }
    merge_sort(&k, idx, tmp, n);
    for (int64_t j = 0; j < n; j++) {
      memmove(em_shape_at(values->data, it.off[1] + j * vst, es),
              em_shape_at(in->data, it.off[0] + idx[j] * ist, es), es);
      ((int64_t *)indices->data)[it.off[2] + j * xst] = idx[j];
    }
  }
  return EM_OK;
}

/* sort.values(self, dim, descending, *, values, indices). */
em_status em_sort_values(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *in = EM_ARG_TENSOR(args, 0), *values = EM_ARG_TENSOR(args, 3);
  em_tensor *indices = EM_ARG_TENSOR(args, 4);
  int64_t dim;
  bool desc;
  EM_KCHECK(ctx, in && values && indices, "expected tensor arguments");
  EM_KCHECK(ctx, em_arg_int(args[1], &dim) && em_arg_bool(args[2], &desc),
            "expected (dim: int, descending: bool)");
  return sort_impl(ctx, in, dim, desc, values, indices);
}

/* sort.values_stable(self, *, stable, dim, descending, values, indices). */
em_status em_sort_values_stable(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *in = EM_ARG_TENSOR(args, 0), *values = EM_ARG_TENSOR(args, 4);
  em_tensor *indices = EM_ARG_TENSOR(args, 5);
  int64_t dim;
  bool desc, stable;
  EM_KCHECK(ctx, in && values && indices, "expected tensor arguments");
  EM_KCHECK(ctx, args[1]->tag == EM_TAG_NONE || em_arg_bool(args[1], &stable),
            "stable must be a bool or None");
  EM_KCHECK(ctx, em_arg_int(args[2], &dim) && em_arg_bool(args[3], &desc),
            "expected (dim: int, descending: bool)");
  return sort_impl(ctx, in, dim, desc, values, indices);
}
