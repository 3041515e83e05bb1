/*
 * index_mask.c — mask-driven and data-dependent-size ops: masked_select,
 * masked_scatter, nonzero, nonzero_static, repeat_interleave.Tensor.
 *
 * masked_select, nonzero and repeat_interleave produce a shape known only
 * from the data: the kernel counts first, then resizes `out` (it must be a
 * DYNAMIC tensor with enough capacity unless its static shape already fits)
 * and fails clearly when the result does not fit. self and mask broadcast
 * together as in ATen.
 */
#include "portable/shape_util.h"

/* Strides of t broadcast to sizes[0..dim) (0 on missing and size-1 dims). */
static void bcast_strides(const em_tensor *t, const int64_t *sizes, int32_t dim, int64_t *out) {
  for (int32_t j = 0; j < dim; j++) {
    int32_t tj = j - (dim - t->dim);
    out[j] = (tj < 0 || t->sizes[tj] == 1 || sizes[j] == 1) ? 0 : t->strides[tj];
  }
}

/* Broadcast shape of self and mask (mask must be bool). */
static em_status mask_shape(em_kernel_ctx *ctx, const em_tensor *self, const em_tensor *mask,
                            int64_t *sizes, int32_t *dim) {
  EM_KCHECK(ctx, mask->dtype == EM_DTYPE_BOOL, "expected a bool mask, got %s",
            em_dtype_name(mask->dtype));
  EM_KCHECK(ctx, em_broadcast_shapes(self->sizes, self->dim, mask->sizes, mask->dim, sizes, dim),
            "shapes of self and mask are not broadcastable");
  return EM_OK;
}

/* masked_select.out(self, mask, *, out): the elements of self where mask is true, as 1-D. */
em_status em_masked_select_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *self = EM_ARG_TENSOR(args, 0), *mask = EM_ARG_TENSOR(args, 1);
  em_tensor *out = EM_ARG_TENSOR(args, 2);
  EM_KCHECK(ctx, self && mask && out, "expected tensor arguments");
  EM_KCHECK(ctx, out->dtype == self->dtype, "out dtype %s differs from input dtype %s",
            em_dtype_name(out->dtype), em_dtype_name(self->dtype));
  EM_KCHECK(ctx, out->dim == 1, "out must be 1-D, has rank %d", (int)out->dim);
  int64_t sizes[EM_MAX_DIM], ss[EM_MAX_DIM], ms[EM_MAX_DIM];
  int32_t dim;
  EM_KTRY(mask_shape(ctx, self, mask, sizes, &dim));
  bcast_strides(self, sizes, dim, ss);
  bcast_strides(mask, sizes, dim, ms);
  int64_t total = em_shape_numel(sizes, dim), n = 0;
  em_shape_iter it;
  em_shape_iter_init(&it, sizes, dim);
  em_shape_iter_add(&it, ms);
  for (int64_t i = 0; i < total; i++, em_shape_iter_next(&it))
    n += ((const uint8_t *)mask->data)[it.off[0]] != 0;
  EM_KTRY(em_resize_out(ctx, out, &n, 1));
  if (n == 0) return EM_OK;
  size_t es = em_dtype_size(self->dtype);
  int64_t k = 0, ostride = out->strides[0];
  em_shape_iter_init(&it, sizes, dim);
  em_shape_iter_add(&it, ms);
  em_shape_iter_add(&it, ss);
  for (int64_t i = 0; i < total; i++, em_shape_iter_next(&it)) {
    if (!((const uint8_t *)mask->data)[it.off[0]]) continue;
    memmove(em_shape_at(out->data, k++ * ostride, es), em_shape_at(self->data, it.off[1], es), es);
  }
  return EM_OK;
}

/*
 * masked_scatter.out(self, mask, source, *, out): out = broadcast(self), and
 * the positions where mask is true take source's elements in row-major order.
 */
em_status em_masked_scatter_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *self = EM_ARG_TENSOR(args, 0), *mask = EM_ARG_TENSOR(args, 1);
  em_tensor *source = EM_ARG_TENSOR(args, 2), *out = EM_ARG_TENSOR(args, 3);
  EM_KCHECK(ctx, self && mask && source && out, "expected tensor arguments");
  EM_KCHECK(ctx, out->dtype == self->dtype, "out dtype %s differs from input dtype %s",
            em_dtype_name(out->dtype), em_dtype_name(self->dtype));
  EM_KCHECK(ctx, source->dtype == self->dtype,
            "expected self and source to have same dtypes but got %s and %s",
            em_dtype_name(self->dtype), em_dtype_name(source->dtype));
  int64_t sizes[EM_MAX_DIM], ss[EM_MAX_DIM], ms[EM_MAX_DIM];
  int32_t dim;
  EM_KTRY(mask_shape(ctx, self, mask, sizes, &dim));
  bcast_strides(self, sizes, dim, ss);
  bcast_strides(mask, sizes, dim, ms);
  int64_t total = em_shape_numel(sizes, dim), n = 0;
  em_shape_iter it;
  em_shape_iter_init(&it, sizes, dim);
  em_shape_iter_add(&it, ms);
  for (int64_t i = 0; i < total; i++, em_shape_iter_next(&it))
    n += ((const uint8_t *)mask->data)[it.off[0]] != 0;
  EM_KCHECK(ctx, n <= source->numel,
            "number of elements of source (%lld) < number of ones in mask (%lld)",
            (long long)source->numel, (long long)n);
  EM_KCHECK(ctx, out->dim == dim, "out has rank %d, expected %d", (int)out->dim, (int)dim);
  EM_KTRY(em_resize_out(ctx, out, sizes, dim));
  if (total == 0) return EM_OK;
  size_t es = em_dtype_size(self->dtype);
  em_shape_copy(out->data, out->strides, self->data, ss, sizes, dim, es);
  em_shape_iter src;
  em_shape_iter_init(&src, source->sizes, source->dim);
  em_shape_iter_add(&src, source->strides);
  em_shape_iter_init(&it, sizes, dim);
  em_shape_iter_add(&it, ms);
  em_shape_iter_add(&it, out->strides);
  for (int64_t i = 0; i < total; i++, em_shape_iter_next(&it)) {
    if (!((const uint8_t *)mask->data)[it.off[0]]) continue;
    memmove(em_shape_at(out->data, it.off[1], es), em_shape_at(source->data, src.off[0], es), es);
    em_shape_iter_next(&src);
  }
  return EM_OK;
}

/* True when element `off` of t is nonzero (NaN counts as nonzero, -0.0 as zero). */
static bool is_nonzero(const em_tensor *t, int64_t off) {
  if (em_dtype_is_float(t->dtype)) return em_load_f64(t->data, t->dtype, off) != 0.0;
  return em_load_i64(t->data, t->dtype, off) != 0;
}

/*
 * Writes the coordinates of the first `limit` nonzero elements of `in` into
 * rows of out [*, rank] and returns the total count of nonzeros in *count.
 */
static void write_nonzero(const em_tensor *in, em_tensor *out, int64_t limit, int64_t *count) {
  em_shape_iter it;
  int64_t n = 0;
  em_shape_iter_init(&it, in->sizes, in->dim);
  em_shape_iter_add(&it, in->strides);
  for (int64_t i = 0; i < in->numel; i++, em_shape_iter_next(&it)) {
    if (!is_nonzero(in, it.off[0])) continue;
    if (n < limit) {
      int64_t *row = (int64_t *)out->data + n * out->strides[0];
      for (int32_t d = 0; d < in->dim; d++) row[d * out->strides[1]] = it.idx[d];
    }
    n++;
  }
  *count = n;
}

/* nonzero.out(self, *, out): int64 [n, rank] coordinates of the nonzero elements. */
em_status em_nonzero_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *in = EM_ARG_TENSOR(args, 0), *out = EM_ARG_TENSOR(args, 1);
  EM_KCHECK(ctx, in && out, "expected tensor arguments");
  EM_KCHECK(ctx, out->dtype == EM_DTYPE_I64, "expected out tensor to have dtype i64, got %s",
            em_dtype_name(out->dtype));
  EM_KCHECK(ctx, out->dim == 2, "out must be 2-D, has rank %d", (int)out->dim);
  EM_KCHECK(
      ctx, em_dtype_is_float(in->dtype) || em_dtype_is_int(in->dtype) || in->dtype == EM_DTYPE_BOOL,
      "unsupported dtype %s", em_dtype_name(in->dtype));
  int64_t n = 0;
  em_shape_iter it;
  em_shape_iter_init(&it, in->sizes, in->dim);
  em_shape_iter_add(&it, in->strides);
  for (int64_t i = 0; i < in->numel; i++, em_shape_iter_next(&it)) n += is_nonzero(in, it.off[0]);
  int64_t sizes[2] = {n, in->dim};
  EM_KTRY(em_resize_out(ctx, out, sizes, 2));
  write_nonzero(in, out, n, &n);
  return EM_OK;
}

/* nonzero_static.out(self, *, size, fill_value, out): [size, rank], padded with fill_value. */
em_status em_nonzero_static_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *in = EM_ARG_TENSOR(args, 0), *out = EM_ARG_TENSOR(args, 3);
  int64_t size, fill;
  EM_KCHECK(ctx, in && out, "expected tensor arguments");
  EM_KCHECK(ctx, em_arg_int(args[1], &size) && em_arg_int(args[2], &fill),
            "size and fill_value must be ints");
  EM_KCHECK(ctx, size >= 0, "nonzero_static: 'size' must be non-negative, got %lld",
            (long long)size);
  EM_KCHECK(ctx, out->dtype == EM_DTYPE_I64, "expected out tensor to have dtype i64, got %s",
            em_dtype_name(out->dtype));
  EM_KCHECK(ctx, out->dim == 2, "out must be 2-D, has rank %d", (int)out->dim);
  EM_KCHECK(
      ctx, em_dtype_is_float(in->dtype) || em_dtype_is_int(in->dtype) || in->dtype == EM_DTYPE_BOOL,
      "unsupported dtype %s", em_dtype_name(in->dtype));
  int64_t sizes[2] = {size, in->dim}, n;
  EM_KTRY(em_resize_out(ctx, out, sizes, 2));
  write_nonzero(in, out, size, &n);
  for (int64_t r = n; r < size; r++)
    for (int32_t d = 0; d < in->dim; d++)
      ((int64_t *)out->data)[r * out->strides[0] + d * out->strides[1]] = fill;
  return EM_OK;
}

/* repeat_interleave.Tensor_out(repeats, *, output_size, out): i repeated repeats[i] times. */
em_status em_repeat_interleave_tensor_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *rep = EM_ARG_TENSOR(args, 0), *out = EM_ARG_TENSOR(args, 2);
  EM_KCHECK(ctx, rep && out, "expected tensor arguments");
  EM_KCHECK(ctx, rep->dim == 1, "repeat_interleave only accept 1D vector as repeat");
  EM_KCHECK(ctx, rep->dtype == EM_DTYPE_I64 || rep->dtype == EM_DTYPE_I32,
            "repeats must be int32 or int64, got %s", em_dtype_name(rep->dtype));
  EM_KCHECK(ctx, out->dtype == rep->dtype, "out dtype %s differs from repeats dtype %s",
            em_dtype_name(out->dtype), em_dtype_name(rep->dtype));
  EM_KCHECK(ctx, out->dim == 1, "out must be 1-D, has rank %d", (int)out->dim);
  int64_t total = 0;
  for (int64_t i = 0; i < rep->numel; i++) {
    int64_t r = em_shape_index_at(rep, i * rep->strides[0]);
    EM_KCHECK(ctx, r >= 0, "repeats can not be negative");
    EM_KCHECK(ctx, total <= INT64_MAX - r, "repeats sum overflows");
    total += r;
  }
  if (args[1]->tag != EM_TAG_NONE) {
    int64_t want;
    EM_KCHECK(ctx, em_arg_int(args[1], &want), "output_size must be an int or None");
    EM_KCHECK(ctx, want == total, "output_size %lld does not match the sum of repeats %lld",
              (long long)want, (long long)total);
  }
  EM_KTRY(em_resize_out(ctx, out, &total, 1));
  int64_t k = 0, os = out->strides[0];
  for (int64_t i = 0; i < rep->numel; i++) {
    int64_t r = em_shape_index_at(rep, i * rep->strides[0]);
    for (int64_t j = 0; j < r; j++, k++) em_store_i64(out->data, out->dtype, k * os, i);
  }
  return EM_OK;
}
