/*
 * prim_tensor.c — prim ops that read or alias tensors: aten::sym_size.int,
 * aten::sym_numel, aten::_local_scalar_dense, executorch_prim::et_copy_index.tensor
 * (the loop-carried stacking of lowered map/scan bodies) and
 * executorch_prim::et_view.default (a zero-copy view).
 */
#include "portable/ew_util.h"

/* sym_size.int: [self, dim, result]. */
em_status em_prim_sym_size_int(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *t = EM_ARG_TENSOR(args, 0);
  int64_t d;
  EM_KCHECK(ctx, t, "self must be a tensor");
  EM_KCHECK(ctx, em_arg_int(args[1], &d), "dim must be an Int");
  int32_t nd;
  EM_KCHECK(ctx, t->dim > 0 && em_norm_dim(d, t->dim, &nd), "dim %lld out of range for rank %d",
            (long long)d, (int)t->dim);
  args[2]->tag = EM_TAG_INT;
  args[2]->u.i = t->sizes[nd];
  return EM_OK;
}

/* sym_numel: [self, result]. */
em_status em_prim_sym_numel(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *t = EM_ARG_TENSOR(args, 0);
  EM_KCHECK(ctx, t, "self must be a tensor");
  args[1]->tag = EM_TAG_INT;
  args[1]->u.i = t->numel;
  return EM_OK;
}

/* _local_scalar_dense: [self, result]: Bool, Int or Double by self's dtype. */
em_status em_prim_local_scalar_dense(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *t = ew_arg_real_tensor(ctx, args, 0);
  if (!t) return EM_ERR_INVALID_ARGUMENT;
  EM_KCHECK(ctx, t->numel == 1, "a tensor with %lld elements cannot be converted to a scalar",
            (long long)t->numel);
  em_evalue *r = args[1];
  if (t->dtype == EM_DTYPE_BOOL) {
    r->tag = EM_TAG_BOOL;
    r->u.b = ((const uint8_t *)t->data)[0] != 0;
  } else if (em_dtype_is_float(t->dtype)) {
    r->tag = EM_TAG_DOUBLE;
    r->u.d = em_load_f64(t->data, t->dtype, 0);
  } else {
    r->tag = EM_TAG_INT;
    r->u.i = em_load_i64(t->data, t->dtype, 0);
  }
  return EM_OK;
}

/*
 * et_copy_index.tensor: [copy_to, copy_from, index] (no result value).
 * copy_to[index] = copy_from, growing copy_to's dim 0 to index + 1 when needed.
 */
em_status em_prim_et_copy_index_tensor(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *to = ew_arg_real_tensor(ctx, args, 0);
  if (!to) return EM_ERR_INVALID_ARGUMENT;
  em_tensor *from = ew_arg_real_tensor(ctx, args, 1);
  if (!from) return EM_ERR_INVALID_ARGUMENT;
  int64_t index;
  EM_KCHECK(ctx, em_arg_int(args[2], &index), "index must be an Int");
  EM_KCHECK(ctx, index >= 0, "index %lld is negative", (long long)index);
  EM_KCHECK(ctx, to->dim == from->dim + 1,
            "ranks of copy_to (%d) and copy_from (%d) must differ by 1", (int)to->dim,
            (int)from->dim);
  EM_KCHECK(ctx, to->dtype == from->dtype, "dtypes differ (%s vs %s)", em_dtype_name(to->dtype),
            em_dtype_name(from->dtype));
  int64_t sizes[EM_MAX_DIM];
  sizes[0] = index + 1 > to->sizes[0] ? index + 1 : to->sizes[0];
  for (int32_t d = 0; d < from->dim; d++) {
    if (index > 0)
      EM_KCHECK(ctx, to->sizes[d + 1] == from->sizes[d],
                "shape mismatch between copy_to and copy_from at dim %d", (int)d + 1);
    sizes[d + 1] = from->sizes[d];
  }
  void *data_before = to->data;
  EM_KTRY(em_resize_out(ctx, to, sizes, to->dim));
  EM_KCHECK(ctx, to->data == data_before && (to->numel == 0 || to->data), "copy_to has no data");
  /* copy_to[index] as a view */
  em_tensor row = *to;
  row.dim = to->dim - 1;
  row.sizes = to->sizes + 1;
  row.strides = to->strides + 1;
  row.dim_order = NULL;
  row.numel = from->numel;
  row.data = (char *)to->data + (size_t)(index * to->strides[0]) * em_dtype_size(to->dtype);
  if (row.numel == 0) return EM_OK;
  return ew_copy_cast(ctx, &row, from);
}

/*
 * et_view.default: [self, size, result]: result aliases self's data with
 * shape `size` (one -1 is inferred). result is an unplanned tensor.
 */
em_status em_prim_et_view_default(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *self = EM_ARG_TENSOR(args, 0), *out = EM_ARG_TENSOR(args, 2);
  EM_KCHECK(ctx, self && out, "self and result must be tensors");
  EM_KCHECK(ctx, self->dtype == out->dtype, "dtypes differ (%s vs %s)", em_dtype_name(self->dtype),
            em_dtype_name(out->dtype));
  size_t n = 0;
  EM_KCHECK(ctx, args[1]->tag == EM_TAG_LIST_INT, "size must be an int list");
  const int64_t *size = em_evalue_int_list(args[1], &n);
  EM_KCHECK(ctx, size || args[1]->u.list.n == 0, "size list holds a non-Int item");
  if (!size) n = 0;
  EM_KCHECK(ctx, n == (size_t)out->dim, "size has %zu entries, result has rank %d", n,
            (int)out->dim);
  int64_t sizes[EM_MAX_DIM], known = 1;
  int minus1 = -1;
  for (size_t i = 0; i < n; i++) {
    if (size[i] == -1) {
      EM_KCHECK(ctx, minus1 < 0, "at most one view dim can be -1");
      minus1 = (int)i;
      continue;
    }
    EM_KCHECK(ctx, size[i] >= 0, "negative size %lld", (long long)size[i]);
    sizes[i] = size[i];
    known *= size[i];
  }
  if (minus1 >= 0) {
    EM_KCHECK(ctx, known != 0 && self->numel % known == 0, "cannot infer the -1 dim");
    sizes[minus1] = self->numel / known;
    known *= sizes[minus1];
  }
  EM_KCHECK(ctx, known == self->numel, "view of %lld elements from a tensor of %lld",
            (long long)known, (long long)self->numel);
  EM_KCHECK(ctx, ew_is_contiguous(self), "et_view needs a contiguous input");
  if (em_tensor_resize(out, sizes, out->dim) != EM_OK) {
    /* the result aliases self, so its capacity is self's, not a planned bound */
    EM_KCHECK(ctx, out->dynamism != EM_SHAPE_STATIC, "cannot resize a static result");
    for (int32_t d = 0; d < out->dim; d++) out->sizes[d] = sizes[d];
    out->numel = known;
    out->numel_bound = known;
    em_strides_from_dim_order(out->sizes, out->dim_order, out->dim, out->strides);
  }
  out->data = self->data;
  return EM_OK;
}
