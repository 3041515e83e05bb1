/*
 * shape_view.c — the *_copy kernels of ATen view ops: view_copy, _unsafe_view,
 * permute_copy, transpose_copy, t_copy, expand_copy, squeeze_copy (3 forms),
 * unsqueeze_copy, select_copy, slice_copy, narrow_copy, diagonal_copy,
 * as_strided_copy, unfold_copy, flip, view_as_real_copy, view_as_complex_copy.
 *
 * Each kernel builds the strided view ATen would return (sizes, strides and an
 * element offset into the input) and copies it into `out` with em_shape_copy.
 * Output dtype must equal the input's (as ATen's out= variants require).
 */
#include "portable/shape_util.h"

/* A strided view of an input tensor: data + off elements, sizes, strides. */
typedef struct view {
  int64_t sizes[EM_MAX_DIM];
  int64_t strides[EM_MAX_DIM];
  int64_t off;
  int32_t dim;
} view;

static void view_of(view *v, const em_tensor *t) {
  v->dim = t->dim;
  v->off = 0;
  for (int32_t d = 0; d < t->dim; d++) {
    v->sizes[d] = t->sizes[d];
    v->strides[d] = t->strides[d];
  }
}

/* Resizes out to the view's shape and copies the view into it. */
static em_status emit(em_kernel_ctx *ctx, const em_tensor *in, em_tensor *out, const view *v) {
  EM_KCHECK(ctx, out->dtype == in->dtype, "out dtype %s differs from input dtype %s",
            em_dtype_name(out->dtype), em_dtype_name(in->dtype));
  EM_KCHECK(ctx, out->dim == v->dim, "out has rank %d, expected %d", (int)out->dim, (int)v->dim);
  EM_KTRY(em_resize_out(ctx, out, v->sizes, v->dim));
  if (out->numel == 0) return EM_OK;
  size_t es = em_dtype_size(in->dtype);
  em_shape_copy(out->data, out->strides, em_shape_at(in->data, v->off, es), v->strides, v->sizes,
                v->dim, es);
  return EM_OK;
}

/* Fetches tensor args a (input) and b (out); fails when either is not a tensor. */
#define GET_IN_OUT(in, ia, out, ib)                                                                \
  em_tensor *in = EM_ARG_TENSOR(args, ia), *out = EM_ARG_TENSOR(args, ib);                         \
  EM_KCHECK(ctx, in &&out, "expected tensor arguments")

/* Infers a view size list (one -1 allowed) for `numel` elements into sizes_out. */
static em_status infer_size(em_kernel_ctx *ctx, const int64_t *size, size_t n, int64_t numel,
                            int64_t *sizes_out) {
  int64_t known = 1;
  int infer = -1;
  for (size_t i = 0; i < n; i++) {
    if (size[i] == -1) {
      EM_KCHECK(ctx, infer < 0, "only one dimension can be inferred");
      infer = (int)i;
    } else {
      EM_KCHECK(ctx, size[i] >= 0, "invalid shape dimension %lld", (long long)size[i]);
      EM_KCHECK(ctx, size[i] == 0 || known <= INT64_MAX / size[i], "shape is too large");
      known *= size[i];
    }
    sizes_out[i] = size[i];
  }
  if (infer >= 0) {
    EM_KCHECK(ctx, known != 0,
              "cannot reshape tensor of %lld elements into a shape with -1 and a 0 dimension",
              (long long)numel);
    EM_KCHECK(ctx, numel % known == 0, "shape is invalid for input of size %lld", (long long)numel);
    sizes_out[infer] = numel / known;
  } else {
    EM_KCHECK(ctx, known == numel, "shape (numel %lld) is invalid for input of size %lld",
              (long long)known, (long long)numel);
  }
  return EM_OK;
}

/* view_copy.out(self, size, *, out) and _unsafe_view.out: a reshape copy. */
em_status em_view_copy_out(em_kernel_ctx *ctx, em_evalue **args) {
  GET_IN_OUT(in, 0, out, 2);
  const int64_t *size;
  size_t n;
  EM_KCHECK(ctx, em_shape_int_list(args[1], &size, &n, EM_MAX_DIM), "size must be an int list");
  int64_t sizes[EM_MAX_DIM];
  EM_KTRY(infer_size(ctx, size, n, in->numel, sizes));
  EM_KCHECK(ctx, out->dtype == in->dtype, "out dtype %s differs from input dtype %s",
            em_dtype_name(out->dtype), em_dtype_name(in->dtype));
  EM_KCHECK(ctx, out->dim == (int32_t)n, "out has rank %d, expected %d", (int)out->dim, (int)n);
  EM_KTRY(em_resize_out(ctx, out, sizes, (int32_t)n));
  em_shape_copy_flat(out, in);
  return EM_OK;
}

em_status em_unsafe_view_out(em_kernel_ctx *ctx, em_evalue **args) {
  return em_view_copy_out(ctx, args);
}

/* permute_copy.out(self, dims, *, out). */
em_status em_permute_copy_out(em_kernel_ctx *ctx, em_evalue **args) {
  GET_IN_OUT(in, 0, out, 2);
  const int64_t *dims;
  size_t n;
  EM_KCHECK(ctx, em_shape_int_list(args[1], &dims, &n, EM_MAX_DIM), "dims must be an int list");
  EM_KCHECK(ctx, (int32_t)n == in->dim, "dims has %d entries, input has rank %d", (int)n,
            (int)in->dim);
  view v;
  v.dim = in->dim;
  v.off = 0;
  bool seen[EM_MAX_DIM] = {false};
  for (size_t i = 0; i < n; i++) {
    int32_t d;
    EM_KCHECK(ctx, em_norm_dim(dims[i], in->dim, &d) && in->dim > 0, "dim %lld out of range",
              (long long)dims[i]);
    EM_KCHECK(ctx, !seen[d], "dim %d repeats in dims", (int)d);
    seen[d] = true;
    v.sizes[i] = in->sizes[d];
    v.strides[i] = in->strides[d];
  }
  return emit(ctx, in, out, &v);
}

/* Swaps dims a and b of the view. */
static em_status transpose_into(em_kernel_ctx *ctx, const em_tensor *in, view *v, int64_t a,
                                int64_t b) {
  int32_t da, db;
  EM_KCHECK(ctx, em_norm_dim(a, in->dim, &da) && em_norm_dim(b, in->dim, &db),
            "dims (%lld, %lld) out of range for rank %d", (long long)a, (long long)b, (int)in->dim);
  view_of(v, in);
  if (in->dim == 0) return EM_OK;
  int64_t s = v->sizes[da], st = v->strides[da];
  v->sizes[da] = v->sizes[db];
  v->strides[da] = v->strides[db];
  v->sizes[db] = s;
  v->strides[db] = st;
  return EM_OK;
}

/* transpose_copy.int_out(self, dim0, dim1, *, out). */
em_status em_transpose_copy_int_out(em_kernel_ctx *ctx, em_evalue **args) {
  GET_IN_OUT(in, 0, out, 3);
  int64_t a, b;
  EM_KCHECK(ctx, em_arg_int(args[1], &a) && em_arg_int(args[2], &b), "dims must be ints");
  view v;
  EM_KTRY(transpose_into(ctx, in, &v, a, b));
  return emit(ctx, in, out, &v);
}

/* t_copy.out(self, *, out): transposes a matrix; 0-D and 1-D inputs are copied. */
em_status em_t_copy_out(em_kernel_ctx *ctx, em_evalue **args) {
  GET_IN_OUT(in, 0, out, 1);
  EM_KCHECK(ctx, in->dim <= 2, "t() expects a tensor with <= 2 dimensions, got %d", (int)in->dim);
  view v;
  EM_KTRY(transpose_into(ctx, in, &v, 0, in->dim < 2 ? 0 : 1));
  return emit(ctx, in, out, &v);
}

/* expand_copy.out(self, size, *, implicit, out): broadcast dims get stride 0. */
em_status em_expand_copy_out(em_kernel_ctx *ctx, em_evalue **args) {
  GET_IN_OUT(in, 0, out, 3);
  const int64_t *size;
  size_t n;
  EM_KCHECK(ctx, em_shape_int_list(args[1], &size, &n, EM_MAX_DIM), "size must be an int list");
  EM_KCHECK(ctx, (int32_t)n >= in->dim, "expand: %d sizes given for a tensor of rank %d", (int)n,
            (int)in->dim);
  view v;
  v.dim = (int32_t)n;
  v.off = 0;
  int32_t lead = (int32_t)n - in->dim;
  for (int32_t i = 0; i < (int32_t)n; i++) {
    int32_t j = i - lead;
    if (j < 0) {
      EM_KCHECK(ctx, size[i] >= 0, "expand: -1 not allowed in leading, non-existing dim %d",
                (int)i);
      v.sizes[i] = size[i];
      v.strides[i] = 0;
    } else if (size[i] == -1 || size[i] == in->sizes[j]) {
      v.sizes[i] = in->sizes[j];
      v.strides[i] = in->strides[j];
    } else {
      EM_KCHECK(ctx, in->sizes[j] == 1 && size[i] >= 0,
                "expand: size %lld must match existing size %lld at dim %d", (long long)size[i],
                (long long)in->sizes[j], (int)i);
      v.sizes[i] = size[i];
      v.strides[i] = 0;
    }
  }
  return emit(ctx, in, out, &v);
}

/* Removes the dims flagged in `drop` (only size-1 dims are removed). */
static void squeeze_view(view *v, const em_tensor *in, const bool *drop) {
  v->dim = 0;
  v->off = 0;
  for (int32_t d = 0; d < in->dim; d++) {
    if (drop[d] && in->sizes[d] == 1) continue;
    v->sizes[v->dim] = in->sizes[d];
    v->strides[v->dim] = in->strides[d];
    v->dim++;
  }
}

/* squeeze_copy.dim_out(self, dim, *, out). */
em_status em_squeeze_copy_dim_out(em_kernel_ctx *ctx, em_evalue **args) {
  GET_IN_OUT(in, 0, out, 2);
  int64_t dim;
  int32_t d;
  EM_KCHECK(ctx, em_arg_int(args[1], &dim), "dim must be an int");
  EM_KCHECK(ctx, em_norm_dim(dim, in->dim, &d), "dim %lld out of range for rank %d", (long long)dim,
            (int)in->dim);
  bool drop[EM_MAX_DIM] = {false};
  if (in->dim > 0) drop[d] = true;
  view v;
  squeeze_view(&v, in, drop);
  return emit(ctx, in, out, &v);
}

/* squeeze_copy.dims_out(self, dims, *, out). */
em_status em_squeeze_copy_dims_out(em_kernel_ctx *ctx, em_evalue **args) {
  GET_IN_OUT(in, 0, out, 2);
  const int64_t *dims;
  size_t n;
  EM_KCHECK(ctx, em_shape_int_list(args[1], &dims, &n, EM_MAX_DIM), "dims must be an int list");
  bool drop[EM_MAX_DIM] = {false};
  for (size_t i = 0; i < n; i++) {
    int32_t d;
    EM_KCHECK(ctx, em_norm_dim(dims[i], in->dim, &d), "dim %lld out of range for rank %d",
              (long long)dims[i], (int)in->dim);
    if (in->dim == 0) continue;
    EM_KCHECK(ctx, !drop[d], "dim %d appears multiple times in dims", (int)d);
    drop[d] = true;
  }
  view v;
  squeeze_view(&v, in, drop);
  return emit(ctx, in, out, &v);
}

/* squeeze_copy.out(self, *, out): removes every size-1 dim. */
em_status em_squeeze_copy_out(em_kernel_ctx *ctx, em_evalue **args) {
  GET_IN_OUT(in, 0, out, 1);
  bool drop[EM_MAX_DIM];
  for (int32_t d = 0; d < EM_MAX_DIM; d++) drop[d] = true;
  view v;
  squeeze_view(&v, in, drop);
  return emit(ctx, in, out, &v);
}

/* unsqueeze_copy.out(self, dim, *, out). */
em_status em_unsqueeze_copy_out(em_kernel_ctx *ctx, em_evalue **args) {
  GET_IN_OUT(in, 0, out, 2);
  int64_t dim;
  EM_KCHECK(ctx, em_arg_int(args[1], &dim), "dim must be an int");
  EM_KCHECK(ctx, in->dim < EM_MAX_DIM, "rank %d is at the limit", (int)in->dim);
  int64_t r = in->dim + 1;
  EM_KCHECK(ctx, dim >= -r && dim < r, "dim %lld out of range [%lld, %lld]", (long long)dim,
            (long long)-r, (long long)(r - 1));
  int32_t p = (int32_t)(dim < 0 ? dim + r : dim);
  view v;
  v.dim = 0;
  v.off = 0;
  for (int32_t d = 0; d <= in->dim; d++) {
    if (d == p) {
      v.sizes[v.dim] = 1;
      v.strides[v.dim++] = 0;
    }
    if (d < in->dim) {
      v.sizes[v.dim] = in->sizes[d];
      v.strides[v.dim++] = in->strides[d];
    }
  }
  return emit(ctx, in, out, &v);
}

/* Drops dim d from the view, adding `index` along it to the offset. */
static void select_view(view *v, const em_tensor *in, int32_t d, int64_t index) {
  view_of(v, in);
  v->off = index * in->strides[d];
  for (int32_t k = d; k + 1 < in->dim; k++) {
    v->sizes[k] = in->sizes[k + 1];
    v->strides[k] = in->strides[k + 1];
  }
  v->dim = in->dim - 1;
}

/* select_copy.int_out(self, dim, index, *, out). */
em_status em_select_copy_int_out(em_kernel_ctx *ctx, em_evalue **args) {
  GET_IN_OUT(in, 0, out, 3);
  int64_t dim, index;
  int32_t d;
  EM_KCHECK(ctx, em_arg_int(args[1], &dim) && em_arg_int(args[2], &index),
            "dim and index must be ints");
  EM_KCHECK(ctx, in->dim > 0, "select() cannot be applied to a 0-dim tensor");
  EM_KCHECK(ctx, em_norm_dim(dim, in->dim, &d), "dim %lld out of range for rank %d", (long long)dim,
            (int)in->dim);
  int64_t n = in->sizes[d];
  EM_KCHECK(ctx, index >= -n && index < n, "index %lld out of range for dim %d of size %lld",
            (long long)index, (int)d, (long long)n);
  view v;
  select_view(&v, in, d, index < 0 ? index + n : index);
  return emit(ctx, in, out, &v);
}

/* slice_copy.Tensor_out(self, dim, start, end, step, *, out). */
em_status em_slice_copy_tensor_out(em_kernel_ctx *ctx, em_evalue **args) {
  GET_IN_OUT(in, 0, out, 5);
  int64_t dim, start, end, step;
  int32_t d;
  EM_KCHECK(ctx,
            em_arg_int(args[1], &dim) && em_shape_opt_int(args[2], 0, &start) &&
                em_shape_opt_int(args[3], 0, &end) && em_arg_int(args[4], &step),
            "expected int arguments");
  EM_KCHECK(ctx, in->dim > 0, "slice() cannot be applied to a 0-dim tensor");
  EM_KCHECK(ctx, em_norm_dim(dim, in->dim, &d), "dim %lld out of range for rank %d", (long long)dim,
            (int)in->dim);
  EM_KCHECK(ctx, step > 0, "slice step must be positive, got %lld", (long long)step);
  int64_t s;
  int64_t len = em_shape_slice_bounds(in->sizes[d], args[2]->tag != EM_TAG_NONE, start,
                                      args[3]->tag != EM_TAG_NONE, end, step, &s);
  view v;
  view_of(&v, in);
  v.off = s * in->strides[d];
  v.sizes[d] = len;
  /* len > 1 bounds step by the dim's size; a huge step (len <= 1) must not overflow here */
  v.strides[d] = len > 1 ? in->strides[d] * step : in->strides[d];
  return emit(ctx, in, out, &v);
}

/* narrow_copy.out(self, dim, start, length, *, out). */
em_status em_narrow_copy_out(em_kernel_ctx *ctx, em_evalue **args) {
  GET_IN_OUT(in, 0, out, 4);
  int64_t dim, start, length;
  int32_t d;
  EM_KCHECK(
      ctx, em_arg_int(args[1], &dim) && em_arg_int(args[2], &start) && em_arg_int(args[3], &length),
      "expected int arguments");
  EM_KCHECK(ctx, in->dim > 0, "narrow() cannot be applied to a 0-dim tensor");
  EM_KCHECK(ctx, em_norm_dim(dim, in->dim, &d), "dim %lld out of range for rank %d", (long long)dim,
            (int)in->dim);
  int64_t n = in->sizes[d];
  EM_KCHECK(ctx, start >= -n && start <= n, "start %lld out of range for size %lld",
            (long long)start, (long long)n);
  if (start < 0) start += n;
  EM_KCHECK(ctx, length >= 0 && start <= n - length,
            "start (%lld) + length (%lld) exceeds dimension size (%lld)", (long long)start,
            (long long)length, (long long)n);
  view v;
  view_of(&v, in);
  v.off = start * in->strides[d];
  v.sizes[d] = length;
  return emit(ctx, in, out, &v);
}

/* diagonal_copy.out(self, offset, dim1, dim2, *, out). */
em_status em_diagonal_copy_out(em_kernel_ctx *ctx, em_evalue **args) {
  GET_IN_OUT(in, 0, out, 4);
  int64_t offset, dim1, dim2;
  int32_t d1, d2;
  EM_KCHECK(
      ctx, em_arg_int(args[1], &offset) && em_arg_int(args[2], &dim1) && em_arg_int(args[3], &dim2),
      "expected int arguments");
  EM_KCHECK(ctx, in->dim >= 2, "diagonal needs a tensor of rank >= 2, got %d", (int)in->dim);
  EM_KCHECK(ctx, em_norm_dim(dim1, in->dim, &d1) && em_norm_dim(dim2, in->dim, &d2),
            "dims out of range for rank %d", (int)in->dim);
  EM_KCHECK(ctx, d1 != d2, "diagonal dimensions cannot be identical %lld, %lld", (long long)dim1,
            (long long)dim2);
  int64_t n1 = in->sizes[d1], n2 = in->sizes[d2], len, off;
  if (offset >= 0) {
    len = n2 - offset < n1 ? n2 - offset : n1;
    off = offset * in->strides[d2];
  } else {
    len = n1 + offset < n2 ? n1 + offset : n2;
    off = -offset * in->strides[d1];
  }
  if (len <= 0) {
    len = 0;
    off = 0;
  }
  view v;
  v.dim = 0;
  v.off = off;
  for (int32_t d = 0; d < in->dim; d++) {
    if (d == d1 || d == d2) continue;
    v.sizes[v.dim] = in->sizes[d];
    v.strides[v.dim++] = in->strides[d];
  }
  v.sizes[v.dim] = len;
  v.strides[v.dim++] = in->strides[d1] + in->strides[d2];
  return emit(ctx, in, out, &v);
}

/*
 * Largest element offset a view with non-negative strides reaches: -1 when it
 * is empty, INT64_MAX when the sum overflows.
 */
static int64_t view_extent(const int64_t *sizes, const int64_t *strides, int32_t dim) {
  int64_t m = 0;
  for (int32_t d = 0; d < dim; d++)
    if (sizes[d] == 0) return -1;
  for (int32_t d = 0; d < dim; d++) {
    int64_t s = sizes[d] - 1, st = strides[d];
    if (st != 0 && s > (INT64_MAX - m) / st) return INT64_MAX;
    m += s * st;
  }
  return m;
}

/*
 * as_strided_copy.out(self, size, stride, storage_offset, *, out). The storage
 * is self's memory starting at self's element [0, ...]; the view must stay
 * within the memory self itself spans.
 */
em_status em_as_strided_copy_out(em_kernel_ctx *ctx, em_evalue **args) {
  GET_IN_OUT(in, 0, out, 4);
  const int64_t *size, *stride;
  size_t n, ns;
  int64_t so;
  EM_KCHECK(ctx,
            em_shape_int_list(args[1], &size, &n, EM_MAX_DIM) &&
                em_shape_int_list(args[2], &stride, &ns, EM_MAX_DIM),
            "size and stride must be int lists");
  EM_KCHECK(ctx, n == ns, "mismatch in length of strides (%d) and shape (%d)", (int)ns, (int)n);
  EM_KCHECK(ctx, em_shape_opt_int(args[3], 0, &so), "storage_offset must be an int or None");
  EM_KCHECK(ctx, so >= 0, "negative storage offset %lld", (long long)so);
  view v;
  v.dim = (int32_t)n;
  v.off = so;
  for (size_t i = 0; i < n; i++) {
    EM_KCHECK(ctx, size[i] >= 0 && stride[i] >= 0, "negative size or stride at dim %d", (int)i);
    v.sizes[i] = size[i];
    v.strides[i] = stride[i];
  }
  int64_t ext = view_extent(v.sizes, v.strides, v.dim);
  for (int32_t d = 0; d < in->dim; d++)
    EM_KCHECK(ctx, in->strides[d] >= 0, "input with negative strides");
  int64_t have = view_extent(in->sizes, in->strides, in->dim);
  EM_KCHECK(ctx, ext < 0 || (ext <= have && so <= have - ext),
            "as_strided view reaches element %lld beyond the input's last element %lld",
            (long long)(so + ext), (long long)have);
  return emit(ctx, in, out, &v);
}

/* unfold_copy.out(self, dimension, size, step, *, out): sliding windows along a dim. */
em_status em_unfold_copy_out(em_kernel_ctx *ctx, em_evalue **args) {
  GET_IN_OUT(in, 0, out, 4);
  int64_t dim, size, step;
  int32_t d;
  EM_KCHECK(ctx,
            em_arg_int(args[1], &dim) && em_arg_int(args[2], &size) && em_arg_int(args[3], &step),
            "expected int arguments");
  EM_KCHECK(ctx, em_norm_dim(dim, in->dim, &d), "dimension %lld out of range for rank %d",
            (long long)dim, (int)in->dim);
  EM_KCHECK(ctx, in->dim < EM_MAX_DIM, "rank %d is at the limit", (int)in->dim);
  int64_t n = in->dim > 0 ? in->sizes[d] : 1;
  int64_t st = in->dim > 0 ? in->strides[d] : 1;
  EM_KCHECK(ctx, size >= 0 && size <= n,
            "maximum size for tensor at dimension %d is %lld but "
            "size is %lld",
            (int)d, (long long)n, (long long)size);
  EM_KCHECK(ctx, step > 0, "step is %lld but must be > 0", (long long)step);
  view v;
  view_of(&v, in);
  if (in->dim > 0) {
    v.sizes[d] = (n - size) / step + 1;
    v.strides[d] = st * step;
  }
  v.sizes[v.dim] = size;
  v.strides[v.dim++] = st;
  return emit(ctx, in, out, &v);
}

/* flip.out(self, dims, *, out): reversed dims become negative strides. */
em_status em_flip_out(em_kernel_ctx *ctx, em_evalue **args) {
  GET_IN_OUT(in, 0, out, 2);
  const int64_t *dims;
  size_t n;
  EM_KCHECK(ctx, em_shape_int_list(args[1], &dims, &n, EM_MAX_DIM), "dims must be an int list");
  view v;
  view_of(&v, in);
  bool seen[EM_MAX_DIM] = {false};
  for (size_t i = 0; i < n; i++) {
    int32_t d;
    EM_KCHECK(ctx, em_norm_dim(dims[i], in->dim, &d), "dim %lld out of range for rank %d",
              (long long)dims[i], (int)in->dim);
    if (in->dim == 0) continue;
    EM_KCHECK(ctx, !seen[d], "dim %d appears multiple times in the list of dims", (int)d);
    seen[d] = true;
    if (in->sizes[d] > 0) v.off += (in->sizes[d] - 1) * in->strides[d];
    v.strides[d] = -in->strides[d];
  }
  return emit(ctx, in, out, &v);
}

/* Real dtype of a complex dtype, -1 for others. */
static int complex_to_real(int dt) {
  switch (dt) {
  case EM_DTYPE_C32: return EM_DTYPE_F16;
  case EM_DTYPE_C64: return EM_DTYPE_F32;
  case EM_DTYPE_C128: return EM_DTYPE_F64;
  default: return -1;
  }
}

/* view_as_real_copy.out(self, *, out): complex [..] → real [.., 2]. */
em_status em_view_as_real_copy_out(em_kernel_ctx *ctx, em_evalue **args) {
  GET_IN_OUT(in, 0, out, 1);
  int rdt = complex_to_real(in->dtype);
  EM_KCHECK(ctx, rdt >= 0, "view_as_real expects a complex tensor, got %s",
            em_dtype_name(in->dtype));
  EM_KCHECK(ctx, out->dtype == rdt, "out dtype %s, expected %s", em_dtype_name(out->dtype),
            em_dtype_name(rdt));
  EM_KCHECK(ctx, in->dim < EM_MAX_DIM, "rank %d is at the limit", (int)in->dim);
  view v;
  view_of(&v, in);
  for (int32_t d = 0; d < in->dim; d++) v.strides[d] *= 2;
  v.sizes[v.dim] = 2;
  v.strides[v.dim++] = 1;
  EM_KCHECK(ctx, out->dim == v.dim, "out has rank %d, expected %d", (int)out->dim, (int)v.dim);
  EM_KTRY(em_resize_out(ctx, out, v.sizes, v.dim));
  if (out->numel == 0) return EM_OK;
  em_shape_copy(out->data, out->strides, in->data, v.strides, v.sizes, v.dim, em_dtype_size(rdt));
  return EM_OK;
}

/* view_as_complex_copy.out(self, *, out): real [.., 2] → complex [..]. */
em_status em_view_as_complex_copy_out(em_kernel_ctx *ctx, em_evalue **args) {
  GET_IN_OUT(in, 0, out, 1);
  int cdt = in->dtype == EM_DTYPE_F16   ? EM_DTYPE_C32
            : in->dtype == EM_DTYPE_F32 ? EM_DTYPE_C64
            : in->dtype == EM_DTYPE_F64 ? EM_DTYPE_C128
                                        : -1;
  EM_KCHECK(ctx, cdt >= 0, "view_as_complex expects f16/f32/f64, got %s", em_dtype_name(in->dtype));
  EM_KCHECK(ctx, out->dtype == cdt, "out dtype %s, expected %s", em_dtype_name(out->dtype),
            em_dtype_name(cdt));
  EM_KCHECK(ctx, in->dim >= 1 && in->sizes[in->dim - 1] == 2,
            "tensor must have a last dimension of size 2");
  EM_KCHECK(ctx, in->strides[in->dim - 1] == 1, "tensor must have a last dimension with stride 1");
  view v;
  v.dim = in->dim - 1;
  v.off = 0;
  for (int32_t d = 0; d < v.dim; d++) {
    EM_KCHECK(ctx, in->strides[d] % 2 == 0,
              "tensor must have a stride divisible by 2 for all "
              "but last dimension");
    v.sizes[d] = in->sizes[d];
    v.strides[d] = in->strides[d] / 2;
  }
  EM_KCHECK(ctx, out->dim == v.dim, "out has rank %d, expected %d", (int)out->dim, (int)v.dim);
  EM_KTRY(em_resize_out(ctx, out, v.sizes, v.dim));
  if (out->numel == 0) return EM_OK;
  em_shape_copy(out->data, out->strides, in->data, v.strides, v.sizes, v.dim, em_dtype_size(cdt));
  return EM_OK;
}
