/*
 * shape_cat.c — joining and splitting: cat, stack, split_copy,
 * split_with_sizes_copy, unbind_copy.
 *
 * cat and stack promote like ATen: the result type of all inputs must be
 * castable to out's dtype, and each input is cast directly into out. The
 * split family writes into a Tensor[] out argument and returns nothing, so
 * their argument count is the schema's (no trailing return value).
 */
#include "portable/shape_util.h"

/* Checks that every input's dtype can be cast to out's (ATen's result_type + canCast). */
static em_status check_promotion(em_kernel_ctx *ctx, em_evalue **items, size_t n, int out_dt) {
  int rt = -1;
  for (size_t i = 0; i < n; i++) {
    const em_tensor *t = em_evalue_tensor(items[i]);
    EM_KCHECK(ctx, t, "tensors[%d] is not a tensor", (int)i);
    if (rt < 0 || rt == t->dtype) {
      rt = t->dtype;
      continue;
    }
    int p = em_promote_types(rt, t->dtype);
    EM_KCHECK(ctx, p >= 0, "cannot promote %s and %s", em_dtype_name(rt), em_dtype_name(t->dtype));
    rt = p;
  }
  if (rt == out_dt) return EM_OK;
  EM_KCHECK(ctx, em_promote_types(rt, out_dt) >= 0 && em_shape_can_cast(rt, out_dt),
            "input types (%s) can't be cast to the desired output type %s", em_dtype_name(rt),
            em_dtype_name(out_dt));
  return EM_OK;
}

/* Legacy rule: 1-D tensors of size 0 are skipped by cat. */
static bool cat_skipped(const em_tensor *t) { return t->dim == 1 && t->sizes[0] == 0; }

/* cat.out(tensors, dim, *, out). */
em_status em_cat_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_evalue **items;
  size_t n;
  int64_t dim;
  em_tensor *out = EM_ARG_TENSOR(args, 2);
  EM_KCHECK(ctx, em_shape_tensor_list(args[0], &items, &n) && out, "expected (Tensor[], out)");
  EM_KCHECK(ctx, em_arg_int(args[1], &dim), "dim must be an int");
  EM_KCHECK(ctx, n > 0, "expected a non-empty list of Tensors");
  EM_KTRY(check_promotion(ctx, items, n, out->dtype));
  const em_tensor *ref = NULL;
  for (size_t i = 0; i < n && !ref; i++)
    if (!cat_skipped(items[i]->u.tensor)) ref = items[i]->u.tensor;
  if (!ref) {
    int64_t zero = 0;
    EM_KCHECK(ctx, out->dim == 1, "out has rank %d, expected 1", (int)out->dim);
    return em_resize_out(ctx, out, &zero, 1);
  }
  int32_t d;
  EM_KCHECK(ctx, ref->dim > 0, "zero-dimensional tensor cannot be concatenated");
  EM_KCHECK(ctx, em_norm_dim(dim, ref->dim, &d), "dim %lld out of range for rank %d",
            (long long)dim, (int)ref->dim);
  int64_t sizes[EM_MAX_DIM];
  for (int32_t k = 0; k < ref->dim; k++) sizes[k] = ref->sizes[k];
  sizes[d] = 0;
  for (size_t i = 0; i < n; i++) {
    const em_tensor *t = items[i]->u.tensor;
    if (cat_skipped(t)) continue;
    EM_KCHECK(ctx, t->dim == ref->dim,
              "tensors must have same number of dimensions: got %d and "
              "%d",
              (int)ref->dim, (int)t->dim);
    for (int32_t k = 0; k < t->dim; k++)
      EM_KCHECK(ctx, k == d || t->sizes[k] == ref->sizes[k],
                "sizes of tensors must match except in dimension %d: expected %lld but got %lld "
                "for tensor number %d",
                (int)d, (long long)ref->sizes[k], (long long)t->sizes[k], (int)i);
    sizes[d] += t->sizes[d];
  }
  EM_KCHECK(ctx, out->dim == ref->dim, "out has rank %d, expected %d", (int)out->dim,
            (int)ref->dim);
  EM_KTRY(em_resize_out(ctx, out, sizes, ref->dim));
  size_t oes = em_dtype_size(out->dtype);
  int64_t pos = 0;
  for (size_t i = 0; i < n; i++) {
    const em_tensor *t = items[i]->u.tensor;
    if (cat_skipped(t) || t->numel == 0) {
      if (!cat_skipped(t)) pos += t->sizes[d];
      continue;
    }
    em_shape_copy_cast(em_shape_at(out->data, pos * out->strides[d], oes), out->dtype, out->strides,
                       t->data, t->dtype, t->strides, t->sizes, t->dim);
    pos += t->sizes[d];
  }
  return EM_OK;
}

/* stack.out(tensors, dim, *, out): inserts a new dim and concatenates along it. */
em_status em_stack_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_evalue **items;
  size_t n;
  int64_t dim;
  em_tensor *out = EM_ARG_TENSOR(args, 2);
  EM_KCHECK(ctx, em_shape_tensor_list(args[0], &items, &n) && out, "expected (Tensor[], out)");
  EM_KCHECK(ctx, em_arg_int(args[1], &dim), "dim must be an int");
  EM_KCHECK(ctx, n > 0, "stack expects a non-empty TensorList");
  EM_KTRY(check_promotion(ctx, items, n, out->dtype));
  const em_tensor *ref = items[0]->u.tensor;
  EM_KCHECK(ctx, ref->dim < EM_MAX_DIM, "rank %d is at the limit", (int)ref->dim);
  int64_t r = ref->dim + 1;
  EM_KCHECK(ctx, dim >= -r && dim < r, "dim %lld out of range [%lld, %lld]", (long long)dim,
            (long long)-r, (long long)(r - 1));
  int32_t d = (int32_t)(dim < 0 ? dim + r : dim);
  for (size_t i = 1; i < n; i++)
    EM_KCHECK(ctx, em_shape_same_sizes(items[i]->u.tensor, ref),
              "stack expects each tensor to be equal size (tensor %d differs)", (int)i);
  int64_t sizes[EM_MAX_DIM];
  for (int32_t k = 0, j = 0; k < (int32_t)r; k++) sizes[k] = k == d ? (int64_t)n : ref->sizes[j++];
  EM_KCHECK(ctx, out->dim == (int32_t)r, "out has rank %d, expected %d", (int)out->dim, (int)r);
  EM_KTRY(em_resize_out(ctx, out, sizes, (int32_t)r));
  if (out->numel == 0) return EM_OK;
  int64_t dstr[EM_MAX_DIM];
  for (int32_t k = 0, j = 0; k < (int32_t)r; k++)
    if (k != d) dstr[j++] = out->strides[k];
  size_t oes = em_dtype_size(out->dtype);
  for (size_t i = 0; i < n; i++) {
    const em_tensor *t = items[i]->u.tensor;
    em_shape_copy_cast(em_shape_at(out->data, (int64_t)i * out->strides[d], oes), out->dtype, dstr,
                       t->data, t->dtype, t->strides, t->sizes, t->dim);
  }
  return EM_OK;
}

/*
 * Writes consecutive chunks of `in` along dim d into the tensors of `outs`:
 * chunk i has length lengths[i], or with lengths NULL min(chunk, rest). With
 * `drop` the chunks have length 1 and the dim is removed (unbind).
 */
static em_status split_into(em_kernel_ctx *ctx, const em_tensor *in, int32_t d,
                            const int64_t *lengths, int64_t chunk, em_evalue **outs, size_t n,
                            bool drop) {
  int64_t sizes[EM_MAX_DIM], sstr[EM_MAX_DIM];
  for (size_t i = 0; i < n; i++) {
    em_tensor *o = em_evalue_tensor(outs[i]);
    EM_KCHECK(ctx, o, "out[%d] is not a tensor", (int)i);
    EM_KCHECK(ctx, o->dtype == in->dtype, "out[%d] dtype %s differs from input dtype %s", (int)i,
              em_dtype_name(o->dtype), em_dtype_name(in->dtype));
  }
  int64_t pos = 0;
  size_t es = em_dtype_size(in->dtype);
  for (size_t i = 0; i < n; i++) {
    em_tensor *o = outs[i]->u.tensor;
    int64_t len = lengths ? lengths[i] : in->sizes[d] - pos < chunk ? in->sizes[d] - pos : chunk;
    int32_t r = 0;
    for (int32_t k = 0; k < in->dim; k++) {
      if (k == d && drop) continue;
      sizes[r] = k == d ? len : in->sizes[k];
      sstr[r++] = in->strides[k];
    }
    EM_KCHECK(ctx, o->dim == r, "out[%d] has rank %d, expected %d", (int)i, (int)o->dim, (int)r);
    EM_KTRY(em_resize_out(ctx, o, sizes, r));
    if (o->numel > 0)
      em_shape_copy(o->data, o->strides, em_shape_at(in->data, pos * in->strides[d], es), sstr,
                    sizes, r, es);
    pos += len;
  }
  return EM_OK;
}

/* Reads self (arg 0) and the dim (arg `di`), which must index a dim of a tensor of rank >= 1. */
static em_status split_args(em_kernel_ctx *ctx, em_evalue **args, int di, em_tensor **in,
                            int32_t *d) {
  int64_t dim;
  *in = EM_ARG_TENSOR(args, 0);
  EM_KCHECK(ctx, *in, "self must be a tensor");
  EM_KCHECK(ctx, em_arg_int(args[di], &dim), "dim must be an int");
  EM_KCHECK(ctx, (*in)->dim > 0, "expects at least a 1-dimensional tensor");
  EM_KCHECK(ctx, em_norm_dim(dim, (*in)->dim, d), "dim %lld out of range for rank %d",
            (long long)dim, (int)(*in)->dim);
  return EM_OK;
}

/* split_copy.Tensor_out(self, split_size, dim, *, out[]) -> (). */
em_status em_split_copy_tensor_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *in;
  int32_t d;
  int64_t split;
  em_evalue **outs;
  size_t n;
  EM_KTRY(split_args(ctx, args, 2, &in, &d));
  EM_KCHECK(ctx, em_arg_int(args[1], &split), "split_size must be an int");
  EM_KCHECK(ctx, em_shape_tensor_list(args[3], &outs, &n), "out must be a tensor list");
  int64_t size = in->sizes[d];
  EM_KCHECK(ctx, split >= 0, "split expects split_size be non-negative, but got %lld",
            (long long)split);
  EM_KCHECK(ctx, split > 0 || size == 0,
            "split_size can only be 0 if dimension size is 0, but got dimension size of %lld",
            (long long)size);
  int64_t chunks = split == 0 ? 1 : (size + split - 1) / split;
  if (chunks < 1) chunks = 1;
  EM_KCHECK(ctx, (int64_t)n == chunks, "expected %lld output tensors, got %d", (long long)chunks,
            (int)n);
  return split_into(ctx, in, d, NULL, split, outs, n, false);
}

/* split_with_sizes_copy.out(self, split_sizes, dim, *, out[]) -> (). */
em_status em_split_with_sizes_copy_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *in;
  int32_t d;
  const int64_t *lengths;
  size_t nl, n;
  em_evalue **outs;
  EM_KTRY(split_args(ctx, args, 2, &in, &d));
  EM_KCHECK(ctx, em_shape_int_list(args[1], &lengths, &nl, SIZE_MAX),
            "split_sizes must be an int list");
  EM_KCHECK(ctx, em_shape_tensor_list(args[3], &outs, &n), "out must be a tensor list");
  int64_t sum = 0;
  for (size_t i = 0; i < nl; i++) {
    EM_KCHECK(ctx, lengths[i] >= 0, "split_sizes[%d] = %lld is negative", (int)i,
              (long long)lengths[i]);
    EM_KCHECK(ctx, lengths[i] <= INT64_MAX - sum, "split_sizes sum past the int64 range at [%d]",
              (int)i);
    sum += lengths[i];
  }
  EM_KCHECK(ctx, sum == in->sizes[d], "split_sizes sum to %lld, but dimension %d has size %lld",
            (long long)sum, (int)d, (long long)in->sizes[d]);
  EM_KCHECK(ctx, n == nl, "expected %d output tensors, got %d", (int)nl, (int)n);
  return split_into(ctx, in, d, lengths, 0, outs, n, false);
}

/* unbind_copy.int_out(self, dim, *, out[]) -> (). */
em_status em_unbind_copy_int_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *in;
  int32_t d;
  em_evalue **outs;
  size_t n;
  EM_KTRY(split_args(ctx, args, 1, &in, &d));
  EM_KCHECK(ctx, em_shape_tensor_list(args[2], &outs, &n), "out must be a tensor list");
  EM_KCHECK(ctx, (int64_t)n == in->sizes[d], "expected %lld output tensors, got %d",
            (long long)in->sizes[d], (int)n);
  return split_into(ctx, in, d, NULL, 1, outs, n, true);
}
