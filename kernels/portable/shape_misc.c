/*
 * shape_misc.c — copies that rearrange whole blocks: repeat, roll, tril, triu,
 * and the *_scatter ops that write a view back into a copy of self
 * (select_scatter, slice_scatter, diagonal_scatter, as_strided_scatter).
 *
 * Like the view copies, these are dtype-agnostic byte moves over
 * em_shape_copy. The scatter ops cast src into out's dtype as ATen's copy_ does.
 */
#include "portable/shape_util.h"

/* repeat.out(self, repeats, *, out): out dim i of size r_i*s_i is split into [r_i, s_i]. */
em_status em_repeat_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *in = EM_ARG_TENSOR(args, 0), *out = EM_ARG_TENSOR(args, 2);
  const int64_t *rep;
  size_t n;
  EM_KCHECK(ctx, in && out, "expected tensor arguments");
  EM_KCHECK(ctx, em_shape_int_list(args[1], &rep, &n, EM_MAX_DIM), "repeats must be an int list");
  EM_KCHECK(ctx, (int32_t)n >= in->dim,
            "number of dimensions of repeat dims (%d) can not be smaller than number of "
            "dimensions of tensor (%d)",
            (int)n, (int)in->dim);
  EM_KCHECK(ctx, out->dtype == in->dtype, "out dtype %s differs from input dtype %s",
            em_dtype_name(out->dtype), em_dtype_name(in->dtype));
  int32_t lead = (int32_t)n - in->dim;
  int64_t sizes[EM_MAX_DIM];
  for (int32_t i = 0; i < (int32_t)n; i++) {
    int64_t s = i < lead ? 1 : in->sizes[i - lead];
    EM_KCHECK(ctx, rep[i] >= 0, "repeats cannot be negative, got %lld", (long long)rep[i]);
    EM_KCHECK(ctx, s == 0 || rep[i] <= INT64_MAX / s, "repeat: output size overflows");
    sizes[i] = rep[i] * s;
  }
  EM_KCHECK(ctx, out->dim == (int32_t)n, "out has rank %d, expected %d", (int)out->dim, (int)n);
  EM_KTRY(em_resize_out(ctx, out, sizes, (int32_t)n));
  if (out->numel == 0) return EM_OK;
  int64_t bs[EM_SHAPE_COPY_MAX_DIM], ds[EM_SHAPE_COPY_MAX_DIM], ss[EM_SHAPE_COPY_MAX_DIM];
  for (int32_t i = 0; i < (int32_t)n; i++) {
    int64_t s = i < lead ? 1 : in->sizes[i - lead];
    bs[2 * i] = rep[i];
    bs[2 * i + 1] = s;
    ds[2 * i] = s * out->strides[i];
    ds[2 * i + 1] = out->strides[i];
    ss[2 * i] = 0;
    ss[2 * i + 1] = i < lead ? 0 : in->strides[i - lead];
  }
  em_shape_copy(out->data, ds, in->data, ss, bs, 2 * (int32_t)n, em_dtype_size(in->dtype));
  return EM_OK;
}

/* Rolls a tensor as a flat row-major sequence by `shift` positions. */
static void roll_flat(em_tensor *out, const em_tensor *in, int64_t shift) {
  int64_t n = in->numel;
  size_t es = em_dtype_size(in->dtype);
  int64_t s = ((shift % n) + n) % n;
  if (em_shape_is_dense(in) && em_shape_is_dense(out)) {
    memmove(em_shape_at(out->data, s, es), in->data, (size_t)(n - s) * es);
    memmove(out->data, em_shape_at(in->data, n - s, es), (size_t)s * es);
    return;
  }
  em_shape_iter it;
  em_shape_iter_init(&it, in->sizes, in->dim);
  em_shape_iter_add(&it, in->strides);
  for (int64_t i = 0; i < n; i++, em_shape_iter_next(&it)) {
    int64_t j = i + s < n ? i + s : i + s - n;
    memmove(em_shape_at(out->data, em_strided_offset(out, j), es),
            em_shape_at(in->data, it.off[0], es), es);
  }
}

/* roll.out(self, shifts, dims, *, out). Shifts on a repeated dim add up, as in ATen. */
em_status em_roll_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *in = EM_ARG_TENSOR(args, 0), *out = EM_ARG_TENSOR(args, 3);
  const int64_t *shifts, *dims;
  size_t ns, nd;
  EM_KCHECK(ctx, in && out, "expected tensor arguments");
  EM_KCHECK(ctx,
            em_shape_int_list(args[1], &shifts, &ns, SIZE_MAX) &&
                em_shape_int_list(args[2], &dims, &nd, SIZE_MAX),
            "shifts and dims must be int lists");
  EM_KCHECK(ctx, ns > 0, "`shifts` required");
  EM_KCHECK(ctx, nd == ns || (nd == 0 && ns == 1),
            "shifts and dimensions must align. shifts: %d, dims: %d", (int)ns, (int)nd);
  EM_KCHECK(ctx, out->dtype == in->dtype, "out dtype %s differs from input dtype %s",
            em_dtype_name(out->dtype), em_dtype_name(in->dtype));
  EM_KCHECK(ctx, out->dim == in->dim, "out has rank %d, expected %d", (int)out->dim, (int)in->dim);
  int64_t total[EM_MAX_DIM] = {0};
  bool rolled[EM_MAX_DIM] = {false};
  for (size_t i = 0; i < nd; i++) {
    int32_t d;
    EM_KCHECK(ctx, in->dim > 0 && em_norm_dim(dims[i], in->dim, &d),
              "dim %lld out of range for rank %d", (long long)dims[i], (int)in->dim);
    total[d] += shifts[i] % (in->sizes[d] ? in->sizes[d] : 1);
    rolled[d] = true;
  }
  EM_KTRY(em_resize_out(ctx, out, in->sizes, in->dim));
  if (in->numel == 0) return EM_OK;
  if (nd == 0) {
    roll_flat(out, in, shifts[0]);
    return EM_OK;
  }
  /* Each rolled dim splits into two segments: 2^k block copies. */
  int32_t rd[EM_MAX_DIM], k = 0;
  int64_t sh[EM_MAX_DIM];
  for (int32_t d = 0; d < in->dim; d++) {
    if (!rolled[d]) continue;
    int64_t n = in->sizes[d];
    sh[k] = ((total[d] % n) + n) % n;
    rd[k++] = d;
  }
  size_t es = em_dtype_size(in->dtype);
  for (uint32_t mask = 0; mask < (1u << k); mask++) {
    int64_t sizes[EM_MAX_DIM], ioff = 0, ooff = 0;
    for (int32_t d = 0; d < in->dim; d++) sizes[d] = in->sizes[d];
    for (int32_t j = 0; j < k; j++) {
      int32_t d = rd[j];
      int64_t n = in->sizes[d], s = sh[j];
      if (mask & (1u << j)) { /* in[n-s, n) -> out[0, s) */
        sizes[d] = s;
        ioff += (n - s) * in->strides[d];
      } else { /* in[0, n-s) -> out[s, n) */
        sizes[d] = n - s;
        ooff += s * out->strides[d];
      }
    }
    if (em_shape_numel(sizes, in->dim) == 0) continue;
    em_shape_copy(em_shape_at(out->data, ooff, es), out->strides, em_shape_at(in->data, ioff, es),
                  in->strides, sizes, in->dim, es);
  }
  return EM_OK;
}

/* Shared body of tril/triu: copies self, then zeroes the masked-out triangle. */
static em_status tri(em_kernel_ctx *ctx, em_evalue **args, bool lower) {
  em_tensor *in = EM_ARG_TENSOR(args, 0), *out = EM_ARG_TENSOR(args, 2);
  int64_t diag;
  EM_KCHECK(ctx, in && out, "expected tensor arguments");
  EM_KCHECK(ctx, em_arg_int(args[1], &diag), "diagonal must be an int");
  EM_KCHECK(ctx, in->dim >= 2, "input tensor must have at least 2 dimensions");
  EM_KCHECK(ctx, out->dtype == in->dtype, "out dtype %s differs from input dtype %s",
            em_dtype_name(out->dtype), em_dtype_name(in->dtype));
  EM_KCHECK(ctx, out->dim == in->dim, "out has rank %d, expected %d", (int)out->dim, (int)in->dim);
  EM_KTRY(em_resize_out(ctx, out, in->sizes, in->dim));
  if (out->numel == 0) return EM_OK;
  em_shape_copy_tensor(out, in);
  int32_t r = in->dim;
  int64_t rows = in->sizes[r - 2], cols = in->sizes[r - 1];
  int64_t rs = out->strides[r - 2], cs = out->strides[r - 1];
  int64_t batch = em_shape_numel(in->sizes, r - 2);
  size_t es = em_dtype_size(in->dtype);
  em_shape_iter it;
  em_shape_iter_init(&it, in->sizes, r - 2);
  em_shape_iter_add(&it, out->strides);
  for (int64_t b = 0; b < batch; b++, em_shape_iter_next(&it)) {
    for (int64_t i = 0; i < rows; i++) {
      /* tril keeps j <= i + diag; triu keeps j >= i + diag. */
      int64_t lo = lower ? i + diag + 1 : 0, hi = lower ? cols : i + diag;
      if (lo < 0) lo = 0;
      if (hi > cols) hi = cols;
      char *row = em_shape_at(out->data, it.off[0] + i * rs, es);
      for (int64_t j = lo; j < hi; j++) memset(row + j * cs * (int64_t)es, 0, es);
    }
  }
  return EM_OK;
}

/* tril.out(self, diagonal, *, out). */
em_status em_tril_out(em_kernel_ctx *ctx, em_evalue **args) { return tri(ctx, args, true); }

/* triu.out(self, diagonal, *, out). */
em_status em_triu_out(em_kernel_ctx *ctx, em_evalue **args) { return tri(ctx, args, false); }

/*
 * Copies self into out, then src into the view of out given by (sizes,
 * strides, off), casting src to out's dtype. src must have exactly `sizes`.
 */
static em_status scatter_view(em_kernel_ctx *ctx, const em_tensor *self, const em_tensor *src,
                              em_tensor *out, const int64_t *sizes, const int64_t *strides,
                              int32_t dim, int64_t off) {
  EM_KCHECK(ctx, src->dim == dim, "src has rank %d, expected %d", (int)src->dim, (int)dim);
  for (int32_t d = 0; d < dim; d++)
    EM_KCHECK(ctx, src->sizes[d] == sizes[d], "src size %lld at dim %d, expected %lld",
              (long long)src->sizes[d], (int)d, (long long)sizes[d]);
  EM_KCHECK(ctx,
            em_dtype_size(src->dtype) > 0 &&
                (src->dtype == out->dtype || (em_promote_types(src->dtype, out->dtype) >= 0)),
            "cannot copy src of dtype %s into %s", em_dtype_name(src->dtype),
            em_dtype_name(out->dtype));
  em_shape_copy_tensor(out, self);
  if (em_shape_numel(sizes, dim) == 0) return EM_OK;
  em_shape_copy_cast(em_shape_at(out->data, off, em_dtype_size(out->dtype)), out->dtype, strides,
                     src->data, src->dtype, src->strides, sizes, dim);
  return EM_OK;
}

/* Checks self/src/out and resizes out to self's shape. */
static em_status scatter_prep(em_kernel_ctx *ctx, em_tensor *self, em_tensor *src, em_tensor *out) {
  EM_KCHECK(ctx, self && src && out, "expected tensor arguments");
  EM_KCHECK(ctx, out->dtype == self->dtype, "out dtype %s differs from input dtype %s",
            em_dtype_name(out->dtype), em_dtype_name(self->dtype));
  EM_KCHECK(ctx, out->dim == self->dim, "out has rank %d, expected %d", (int)out->dim,
            (int)self->dim);
  return em_resize_out(ctx, out, self->sizes, self->dim);
}

/* select_scatter.out(self, src, dim, index, *, out). */
em_status em_select_scatter_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *self = EM_ARG_TENSOR(args, 0), *src = EM_ARG_TENSOR(args, 1);
  em_tensor *out = EM_ARG_TENSOR(args, 4);
  int64_t dim, index;
  int32_t d;
  EM_KTRY(scatter_prep(ctx, self, src, out));
  EM_KCHECK(ctx, em_arg_int(args[2], &dim) && em_arg_int(args[3], &index),
            "dim and index must be ints");
  EM_KCHECK(ctx, self->dim > 0, "select() cannot be applied to a 0-dim tensor");
  EM_KCHECK(ctx, em_norm_dim(dim, self->dim, &d), "dim %lld out of range for rank %d",
            (long long)dim, (int)self->dim);
  int64_t n = self->sizes[d];
  EM_KCHECK(ctx, index >= -n && index < n, "index %lld out of range for dim %d of size %lld",
            (long long)index, (int)d, (long long)n);
  if (index < 0) index += n;
  int64_t sizes[EM_MAX_DIM], strides[EM_MAX_DIM];
  int32_t r = 0;
  for (int32_t k = 0; k < self->dim; k++) {
    if (k == d) continue;
    sizes[r] = self->sizes[k];
    strides[r++] = out->strides[k];
  }
  return scatter_view(ctx, self, src, out, sizes, strides, r, index * out->strides[d]);
}

/* slice_scatter.out(self, src, dim, start, end, step, *, out). */
em_status em_slice_scatter_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *self = EM_ARG_TENSOR(args, 0), *src = EM_ARG_TENSOR(args, 1);
  em_tensor *out = EM_ARG_TENSOR(args, 6);
  int64_t dim, start, end, step, s;
  int32_t d;
  EM_KTRY(scatter_prep(ctx, self, src, out));
  EM_KCHECK(ctx,
            em_arg_int(args[2], &dim) && em_shape_opt_int(args[3], 0, &start) &&
                em_shape_opt_int(args[4], 0, &end) && em_arg_int(args[5], &step),
            "expected int arguments");
  EM_KCHECK(ctx, self->dim > 0, "slice() cannot be applied to a 0-dim tensor");
  EM_KCHECK(ctx, em_norm_dim(dim, self->dim, &d), "dim %lld out of range for rank %d",
            (long long)dim, (int)self->dim);
  EM_KCHECK(ctx, step > 0, "slice step must be positive, got %lld", (long long)step);
  int64_t len = em_shape_slice_bounds(self->sizes[d], args[3]->tag != EM_TAG_NONE, start,
                                      args[4]->tag != EM_TAG_NONE, end, step, &s);
  int64_t sizes[EM_MAX_DIM], strides[EM_MAX_DIM];
  for (int32_t k = 0; k < self->dim; k++) {
    sizes[k] = k == d ? len : self->sizes[k];
    /* len > 1 bounds step by the dim's size; a huge step (len <= 1) must not overflow */
    strides[k] = k == d && len > 1 ? out->strides[k] * step : out->strides[k];
  }
  return scatter_view(ctx, self, src, out, sizes, strides, self->dim, s * out->strides[d]);
}

/* diagonal_scatter.out(self, src, offset, dim1, dim2, *, out). */
em_status em_diagonal_scatter_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *self = EM_ARG_TENSOR(args, 0), *src = EM_ARG_TENSOR(args, 1);
  em_tensor *out = EM_ARG_TENSOR(args, 5);
  int64_t offset, dim1, dim2;
  int32_t d1, d2;
  EM_KTRY(scatter_prep(ctx, self, src, out));
  EM_KCHECK(
      ctx, em_arg_int(args[2], &offset) && em_arg_int(args[3], &dim1) && em_arg_int(args[4], &dim2),
      "expected int arguments");
  EM_KCHECK(ctx, self->dim >= 2, "diagonal needs a tensor of rank >= 2, got %d", (int)self->dim);
  EM_KCHECK(ctx, em_norm_dim(dim1, self->dim, &d1) && em_norm_dim(dim2, self->dim, &d2),
            "dims out of range for rank %d", (int)self->dim);
  EM_KCHECK(ctx, d1 != d2, "diagonal dimensions cannot be identical");
  int64_t n1 = self->sizes[d1], n2 = self->sizes[d2], len, off;
  if (offset >= 0) {
    len = n2 - offset < n1 ? n2 - offset : n1;
    off = offset * out->strides[d2];
  } else {
    len = n1 + offset < n2 ? n1 + offset : n2;
    off = -offset * out->strides[d1];
  }
  if (len <= 0) {
    len = 0;
    off = 0;
  }
  int64_t sizes[EM_MAX_DIM], strides[EM_MAX_DIM];
  int32_t r = 0;
  for (int32_t k = 0; k < self->dim; k++) {
    if (k == d1 || k == d2) continue;
    sizes[r] = self->sizes[k];
    strides[r++] = out->strides[k];
  }
  sizes[r] = len;
  strides[r++] = out->strides[d1] + out->strides[d2];
  return scatter_view(ctx, self, src, out, sizes, strides, r, off);
}

/*
 * as_strided_scatter.out(self, src, size, stride, storage_offset, *, out):
 * out (dense) = self, then the as_strided view of out's memory = src.
 */
em_status em_as_strided_scatter_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *self = EM_ARG_TENSOR(args, 0), *src = EM_ARG_TENSOR(args, 1);
  em_tensor *out = EM_ARG_TENSOR(args, 5);
  const int64_t *size, *stride;
  size_t n, ns;
  int64_t so;
  EM_KTRY(scatter_prep(ctx, self, src, out));
  EM_KCHECK(ctx,
            em_shape_int_list(args[2], &size, &n, EM_MAX_DIM) &&
                em_shape_int_list(args[3], &stride, &ns, EM_MAX_DIM) && n == ns,
            "size and stride must be int lists of equal length");
  EM_KCHECK(ctx, em_shape_opt_int(args[4], 0, &so) && so >= 0,
            "storage_offset must be None or a non-negative int");
  EM_KCHECK(ctx, em_shape_is_dense(out), "as_strided_scatter needs a contiguous out");
  int64_t ext = 0;
  bool empty = false;
  for (size_t i = 0; i < n; i++) {
    EM_KCHECK(ctx, size[i] >= 0 && stride[i] >= 0, "negative size or stride at dim %d", (int)i);
    if (size[i] == 0)
      empty = true;
    else if (stride[i] != 0 && size[i] - 1 > (INT64_MAX - ext) / stride[i])
      ext = INT64_MAX;
    else
      ext += (size[i] - 1) * stride[i];
  }
  EM_KCHECK(ctx, empty || (ext < out->numel && so < out->numel - ext),
            "as_strided view reaches element %lld of a tensor of %lld elements",
            (long long)(so + ext), (long long)out->numel);
  return scatter_view(ctx, self, src, out, size, stride, (int32_t)n, so);
}
