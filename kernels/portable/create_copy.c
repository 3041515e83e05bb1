/*
 * create_copy.c — copies and casts: clone, _to_copy, copy, copy_,
 * detach_copy, lift_fresh_copy, alias_copy, _conj-free dim-order copies
 * (dim_order_ops::_to_dim_order_copy, _clone_dim_order) and native_dropout.
 *
 * Every copy honors both tensors' strides, so a copy between dim orders
 * (contiguous <-> channels-last) is a layout conversion.
 */
#include "portable/ew_util.h"

/* out = cast(self) with out resized to self's shape. */
static em_status copy_to_out(em_kernel_ctx *ctx, const em_tensor *self, em_tensor *out,
                             bool same_dtype) {
  EM_KCHECK(ctx, out && ew_dtype_is_real_or_bool(out->dtype), "out must be a real or bool tensor");
  if (same_dtype)
    EM_KCHECK(ctx, out->dtype == self->dtype, "out dtype %s must match input dtype %s",
              em_dtype_name(out->dtype), em_dtype_name(self->dtype));
  EM_KTRY(em_resize_out(ctx, out, self->sizes, self->dim));
  EM_KCHECK(ctx, out->numel == 0 || out->data, "out has no data");
  return ew_copy_cast(ctx, out, self);
}

static em_status check_memory_format(em_kernel_ctx *ctx, const em_evalue *v) {
  EM_KCHECK(ctx, v->tag == EM_TAG_NONE || v->tag == EM_TAG_INT,
            "memory_format must be an int or None");
  return EM_OK;
}

static em_status check_bool_arg(em_kernel_ctx *ctx, const em_evalue *v) {
  EM_KCHECK(ctx, v->tag == EM_TAG_BOOL, "non_blocking must be a bool");
  return EM_OK;
}

em_status em_clone_out(em_kernel_ctx *ctx, em_evalue **args) {
  EW_TENSOR_ARG(self, ctx, args, 0);
  EM_KTRY(check_memory_format(ctx, args[1]));
  return copy_to_out(ctx, self, EM_ARG_TENSOR(args, 2), true);
}

em_status em_to_copy_out(em_kernel_ctx *ctx, em_evalue **args) {
  EW_TENSOR_ARG(self, ctx, args, 0);
  EM_KTRY(check_bool_arg(ctx, args[1]));
  EM_KTRY(check_memory_format(ctx, args[2]));
  return copy_to_out(ctx, self, EM_ARG_TENSOR(args, 3), false);
}

/* detach_copy / lift_fresh_copy / alias_copy: [self, out, out]. */
em_status em_detach_copy_out(em_kernel_ctx *ctx, em_evalue **args) {
  EW_TENSOR_ARG(self, ctx, args, 0);
  return copy_to_out(ctx, self, EM_ARG_TENSOR(args, 1), true);
}
em_status em_lift_fresh_copy_out(em_kernel_ctx *ctx, em_evalue **args) {
  EW_TENSOR_ARG(self, ctx, args, 0);
  return copy_to_out(ctx, self, EM_ARG_TENSOR(args, 1), true);
}
em_status em_alias_copy_out(em_kernel_ctx *ctx, em_evalue **args) {
  EW_TENSOR_ARG(self, ctx, args, 0);
  return copy_to_out(ctx, self, EM_ARG_TENSOR(args, 1), true);
}

/* copy.out: [self, src, non_blocking, out, out]: src broadcast to self's shape, in out's dtype. */
em_status em_copy_out(em_kernel_ctx *ctx, em_evalue **args) {
  EW_TENSOR_ARG(self, ctx, args, 0);
  EW_TENSOR_ARG(src, ctx, args, 1);
  EM_KTRY(check_bool_arg(ctx, args[2]));
  em_tensor *out = EM_ARG_TENSOR(args, 3);
  EM_KCHECK(ctx, out && ew_dtype_is_real_or_bool(out->dtype), "out must be a real or bool tensor");
  EM_KCHECK(ctx, out->dtype == self->dtype, "out dtype %s must match self dtype %s",
            em_dtype_name(out->dtype), em_dtype_name(self->dtype));
  EM_KTRY(em_resize_out(ctx, out, self->sizes, self->dim));
  EM_KCHECK(ctx, out->numel == 0 || out->data, "out has no data");
  return ew_copy_cast(ctx, out, src);
}

/* copy_: [self, src, non_blocking, ret]: in place, src broadcast to self. */
em_status em_copy_(em_kernel_ctx *ctx, em_evalue **args) {
  EW_TENSOR_ARG(self, ctx, args, 0);
  EW_TENSOR_ARG(src, ctx, args, 1);
  EM_KTRY(check_bool_arg(ctx, args[2]));
  return ew_copy_cast(ctx, self, src);
}

/* _to_dim_order_copy.out / _clone_dim_order.out: [self, non_blocking, dim_order?, out, out]. */
em_status em_to_dim_order_copy_out(em_kernel_ctx *ctx, em_evalue **args) {
  EW_TENSOR_ARG(self, ctx, args, 0);
  EM_KTRY(check_bool_arg(ctx, args[1]));
  em_tensor *out = EM_ARG_TENSOR(args, 3);
  EM_KCHECK(ctx, out, "out must be a tensor");
  EM_KTRY(ew_check_dim_order(ctx, args[2], out));
  return copy_to_out(ctx, self, out, false);
}

em_status em_clone_dim_order_out(em_kernel_ctx *ctx, em_evalue **args) {
  EW_TENSOR_ARG(self, ctx, args, 0);
  EM_KTRY(check_bool_arg(ctx, args[1]));
  em_tensor *out = EM_ARG_TENSOR(args, 3);
  EM_KCHECK(ctx, out, "out must be a tensor");
  EM_KTRY(ew_check_dim_order(ctx, args[2], out));
  return copy_to_out(ctx, self, out, true);
}

/*
 * native_dropout.out: [input, p, train?, out0, out1, (out0, out1)].
 * Not training (train == False): out0 = input, out1 = ones. Training (True or
 * None): keep each element with probability 1 - p, scaled by 1 / (1 - p).
 */
em_status em_native_dropout_out(em_kernel_ctx *ctx, em_evalue **args) {
  EW_TENSOR_ARG(self, ctx, args, 0);
  double p;
  EM_KCHECK(ctx, ew_is_scalar(args[1]) && em_arg_double(args[1], &p), "p must be a float");
  EM_KCHECK(ctx, p >= 0 && p <= 1, "dropout probability has to be between 0 and 1, got %g", p);
  bool train = true;
  if (args[2]->tag != EM_TAG_NONE)
    EM_KCHECK(ctx, em_arg_bool(args[2], &train), "train must be a bool or None");
  em_tensor *out = EM_ARG_TENSOR(args, 3), *mask = EM_ARG_TENSOR(args, 4);
  EM_KCHECK(ctx, out && mask && ew_dtype_is_real_or_bool(mask->dtype), "out0/out1 must be tensors");
  EM_KCHECK(ctx, em_dtype_is_float(self->dtype), "dropout needs a floating input");
  EM_KTRY(copy_to_out(ctx, self, out, false));
  EM_KTRY(em_resize_out(ctx, mask, self->sizes, self->dim));
  EM_KCHECK(ctx, mask->numel == 0 || mask->data, "out1 has no data");
  ew_val one;
  one.i = 1;
  if (!train) {
    ew_fill(mask, one, EM_DTYPE_I64);
    return EM_OK;
  }
  double scale = p >= 1.0 ? 0.0 : 1.0 / (1.0 - p);
  uint64_t s = ew_rng_begin(self->numel);
  const em_tensor *ts[2] = {out, mask};
  ew_iter it;
  ew_iter_init(&it, out->sizes, out->dim, ts, 2);
  for (int64_t i = 0; i < it.numel; i++) {
    bool keep = ew_rng_uniform(&s) >= p;
    double v = keep ? em_load_f64(out->data, out->dtype, it.off[0]) * scale : 0.0;
    em_store_f64(out->data, out->dtype, it.off[0], v);
    em_store_i64(mask->data, mask->dtype, it.off[1], keep);
    ew_iter_next(&it);
  }
  return EM_OK;
}
