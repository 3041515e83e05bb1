/*
 * index_gather.c — indexing along one dim: index_select, gather, and the
 * scatter family (scatter.src/value, scatter_add, scatter.reduce/value_reduce,
 * scatter_reduce.two).
 *
 * Index values are validated before anything is written: a value outside
 * [0, size) fails the call (ATen does not wrap negatives here). As in ATen, a
 * 0-dim tensor acts as a 1-D tensor of one element, and an empty index skips
 * the shape checks. Reductions compute in double (floats; exact for f32 and
 * narrower since one op is correctly rounded through double) or wrapping int64.
 */
#include "portable/shape_util.h"

/* Sizes/strides of t with a 0-dim tensor seen as [1] (ATen's ensure_nonempty_*). */
typedef struct nview {
  int64_t sizes[EM_MAX_DIM];
  int64_t strides[EM_MAX_DIM];
  int32_t dim;
} nview;

static void nview_of(nview *v, const em_tensor *t) {
  v->dim = t->dim ? t->dim : 1;
  v->sizes[0] = 1;
  v->strides[0] = 0;
  for (int32_t d = 0; d < t->dim; d++) {
    v->sizes[d] = t->sizes[d];
    v->strides[d] = t->strides[d];
  }
}

/* Copies one element of `es` bytes. */
static inline void copy_elem(char *dst, const char *src, size_t es) {
  switch (es) {
  case 1: *dst = *src; break;
  case 2: memmove(dst, src, 2); break;
  case 4: memmove(dst, src, 4); break;
  case 8: memmove(dst, src, 8); break;
  default: memmove(dst, src, es); break;
  }
}

/* Checks that `index` is an int32/int64 tensor. */
static em_status check_index_dtype(em_kernel_ctx *ctx, const em_tensor *index) {
  EM_KCHECK(ctx, index->dtype == EM_DTYPE_I64 || index->dtype == EM_DTYPE_I32,
            "expected dtype int32/int64 for index, got %s", em_dtype_name(index->dtype));
  return EM_OK;
}

/* index_select.out(self, dim, index, *, out). */
em_status em_index_select_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *in = EM_ARG_TENSOR(args, 0), *index = EM_ARG_TENSOR(args, 2);
  em_tensor *out = EM_ARG_TENSOR(args, 3);
  int64_t dim;
  int32_t d;
  EM_KCHECK(ctx, in && index && out, "expected tensor arguments");
  EM_KCHECK(ctx, em_arg_int(args[1], &dim), "dim must be an int");
  EM_KCHECK(ctx, em_norm_dim(dim, in->dim, &d), "dim %lld out of range for rank %d", (long long)dim,
            (int)in->dim);
  EM_KTRY(check_index_dtype(ctx, index));
  EM_KCHECK(ctx, index->dim <= 1, "index_select(): Index is supposed to be a vector");
  EM_KCHECK(ctx, in->dim > 0 || index->numel == 1,
            "index_select(): Index to scalar can have only 1 value, got %lld value(s)",
            (long long)index->numel);
  EM_KCHECK(ctx, out->dtype == in->dtype, "out dtype %s differs from input dtype %s",
            em_dtype_name(out->dtype), em_dtype_name(in->dtype));
  int64_t k = index->numel, istride = index->dim ? index->strides[0] : 0;
  int64_t n = in->dim ? in->sizes[d] : 1;
  for (int64_t i = 0; i < k; i++) {
    int64_t v = em_shape_index_at(index, i * istride);
    EM_KCHECK(ctx, v >= 0 && v < n, "index %lld out of range for dim %d of size %lld", (long long)v,
              (int)d, (long long)n);
  }
  int64_t sizes[EM_MAX_DIM];
  for (int32_t j = 0; j < in->dim; j++) sizes[j] = j == d ? k : in->sizes[j];
  EM_KCHECK(ctx, out->dim == in->dim, "out has rank %d, expected %d", (int)out->dim, (int)in->dim);
  EM_KTRY(em_resize_out(ctx, out, sizes, in->dim));
  if (out->numel == 0) return EM_OK;
  size_t es = em_dtype_size(in->dtype);
  if (in->dim == 0) {
    copy_elem(out->data, in->data, es);
    return EM_OK;
  }
  for (int32_t j = 0; j < in->dim; j++) sizes[j] = j == d ? 1 : in->sizes[j];
  for (int64_t i = 0; i < k; i++) {
    int64_t v = em_shape_index_at(index, i * istride);
    em_shape_copy(em_shape_at(out->data, i * out->strides[d], es), out->strides,
                  em_shape_at(in->data, v * in->strides[d], es), in->strides, sizes, in->dim, es);
  }
  return EM_OK;
}

/*
 * Validates every index value against [0, n): the index is walked with its
 * own strides. Returns EM_OK or fails naming the bad value.
 */
static em_status check_index_values(em_kernel_ctx *ctx, const em_tensor *index, const nview *iv,
                                    int64_t n, int32_t d) {
  em_shape_iter it;
  em_shape_iter_init(&it, iv->sizes, iv->dim);
  em_shape_iter_add(&it, iv->strides);
  for (int64_t i = 0; i < index->numel; i++, em_shape_iter_next(&it)) {
    int64_t v = em_shape_index_at(index, it.off[0]);
    EM_KCHECK(ctx, v >= 0 && v < n, "index %lld is out of bounds for dimension %d with size %lld",
              (long long)v, (int)d, (long long)n);
  }
  return EM_OK;
}

/* gather.out(self, dim, index, *, sparse_grad, out): out[i][j] = self[index[i][j]][j] (dim 0). */
em_status em_gather_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *in = EM_ARG_TENSOR(args, 0), *index = EM_ARG_TENSOR(args, 2);
  em_tensor *out = EM_ARG_TENSOR(args, 4);
  int64_t dim;
  int32_t d;
  EM_KCHECK(ctx, in && index && out, "expected tensor arguments");
  EM_KCHECK(ctx, em_arg_int(args[1], &dim), "dim must be an int");
  EM_KCHECK(ctx, em_norm_dim(dim, in->dim, &d), "dim %lld out of range for rank %d", (long long)dim,
            (int)in->dim);
  EM_KTRY(check_index_dtype(ctx, index));
  EM_KCHECK(ctx, out->dtype == in->dtype, "out dtype %s differs from input dtype %s",
            em_dtype_name(out->dtype), em_dtype_name(in->dtype));
  nview sv, iv;
  nview_of(&sv, in);
  nview_of(&iv, index);
  if (index->numel > 0) {
    EM_KCHECK(ctx, sv.dim == iv.dim,
              "index tensor must have the same number of dimensions as input tensor");
    for (int32_t j = 0; j < sv.dim; j++)
      EM_KCHECK(ctx, j == d || iv.sizes[j] <= sv.sizes[j],
                "size does not match at dimension %d: index %lld is larger than self %lld", (int)j,
                (long long)iv.sizes[j], (long long)sv.sizes[j]);
    EM_KTRY(check_index_values(ctx, index, &iv, sv.sizes[d], d));
  }
  EM_KCHECK(ctx, out->dim == index->dim, "out has rank %d, expected %d", (int)out->dim,
            (int)index->dim);
  EM_KTRY(em_resize_out(ctx, out, index->sizes, index->dim));
  if (out->numel == 0) return EM_OK;
  nview ov;
  nview_of(&ov, out);
  int64_t dstride = sv.strides[d];
  sv.strides[d] = 0;
  size_t es = em_dtype_size(in->dtype);
  em_shape_iter it;
  em_shape_iter_init(&it, iv.sizes, iv.dim);
  em_shape_iter_add(&it, iv.strides);
  em_shape_iter_add(&it, sv.strides);
  em_shape_iter_add(&it, ov.strides);
  for (int64_t i = 0; i < index->numel; i++, em_shape_iter_next(&it)) {
    int64_t v = em_shape_index_at(index, it.off[0]);
    copy_elem(em_shape_at(out->data, it.off[2], es),
              em_shape_at(in->data, it.off[1] + v * dstride, es), es);
  }
  return EM_OK;
}

/* How scattered values combine with what is in out. */
typedef enum red_op { RED_SET, RED_SUM, RED_PROD, RED_MAX, RED_MIN, RED_MEAN } red_op;

/* Combines src into dst (one element each, same dtype `dt`) with `op`. */
static void reduce_elem(char *dst, const char *src, int dt, red_op op) {
  if (op == RED_SET) {
    copy_elem(dst, src, em_dtype_size(dt));
  } else if (em_dtype_is_float(dt)) {
    double a = em_load_f64(dst, dt, 0), b = em_load_f64(src, dt, 0), r;
    switch (op) {
    case RED_PROD: r = a * b; break;
    case RED_MAX: r = (b != b) ? b : (a < b ? b : a); break;
    case RED_MIN: r = (b != b) ? b : (b < a ? b : a); break;
    default: r = a + b; break;
    }
    em_store_f64(dst, dt, 0, r);
  } else {
    int64_t a = em_load_i64(dst, dt, 0), b = em_load_i64(src, dt, 0), r;
    bool is_bool = dt == EM_DTYPE_BOOL;
    switch (op) {
    case RED_PROD: r = is_bool ? (a && b) : (int64_t)((uint64_t)a * (uint64_t)b); break;
    case RED_MAX: r = a < b ? b : a; break;
    case RED_MIN: r = b < a ? b : a; break;
    default: r = is_bool ? (a || b) : (int64_t)((uint64_t)a + (uint64_t)b); break;
    }
    em_store_i64(dst, dt, 0, r);
  }
}

/* Writes the identity of `op` (for include_self=False) into one element of dtype dt. */
static void store_identity(char *dst, int dt, red_op op) {
  if (op == RED_PROD) {
    em_store_i64(dst, dt, 0, 1);
  } else if (op == RED_MAX || op == RED_MIN) {
    bool mx = op == RED_MAX;
    if (em_dtype_is_float(dt)) {
      em_store_f64(dst, dt, 0, mx ? -INFINITY : INFINITY);
      return;
    }
    int64_t lo, hi;
    switch (dt) {
    case EM_DTYPE_U8: lo = 0, hi = UINT8_MAX; break;
    case EM_DTYPE_I8: lo = INT8_MIN, hi = INT8_MAX; break;
    case EM_DTYPE_I16: lo = INT16_MIN, hi = INT16_MAX; break;
    case EM_DTYPE_I32: lo = INT32_MIN, hi = INT32_MAX; break;
    case EM_DTYPE_BOOL: lo = 0, hi = 1; break;
    default: lo = INT64_MIN, hi = INT64_MAX; break;
    }
    em_store_i64(dst, dt, 0, mx ? lo : hi);
  } else {
    memset(dst, 0, em_dtype_size(dt));
  }
}

/* Arguments of one scatter call. `src` NULL means the scalar in `value` (already out's dtype). */
typedef struct scatter_call {
  em_tensor *self, *index, *src, *out;
  const char *value;
  int32_t dim;
  red_op op;
  bool include_self;
} scatter_call;

/*
 * scatter_reduce "mean": divides every target of out by the number of values
 * it received (plus one with include_self); ints use floor division as ATen.
 */
static em_status divide_by_count(em_kernel_ctx *ctx, const scatter_call *c, const nview *iv,
                                 const nview *ov) {
  em_tensor *out = c->out, *index = c->index;
  int32_t *count = em_kernel_alloc_temp(ctx, (size_t)out->numel * sizeof(int32_t), 4);
  if (!count) return EM_ERR_MEMORY_ALLOCATION_FAILED;
  for (int64_t i = 0; i < out->numel; i++) count[i] = c->include_self ? 1 : 0;
  int64_t rm[EM_MAX_DIM], s = 1; /* row-major strides of out's shape */
  for (int32_t j = ov->dim - 1; j >= 0; j--) {
    rm[j] = s;
    s *= ov->sizes[j];
  }
  int64_t rm_d = rm[c->dim];
  rm[c->dim] = 0;
  em_shape_iter it;
  em_shape_iter_init(&it, iv->sizes, iv->dim);
  em_shape_iter_add(&it, iv->strides);
  em_shape_iter_add(&it, rm);
  for (int64_t i = 0; i < index->numel; i++, em_shape_iter_next(&it))
    count[it.off[1] + em_shape_index_at(index, it.off[0]) * rm_d]++;
  size_t es = em_dtype_size(out->dtype);
  em_shape_iter_init(&it, ov->sizes, ov->dim);
  em_shape_iter_add(&it, ov->strides);
  for (int64_t i = 0; i < out->numel; i++, em_shape_iter_next(&it)) {
    int64_t n = count[i];
    if (n <= 1) continue;
    char *p = em_shape_at(out->data, it.off[0], es);
    if (em_dtype_is_float(out->dtype)) {
      em_store_f64(p, out->dtype, 0, em_load_f64(p, out->dtype, 0) / (double)n);
    } else {
      int64_t a = em_load_i64(p, out->dtype, 0), q = a / n;
      if (a % n != 0 && a < 0) q--; /* floor division */
      em_store_i64(p, out->dtype, 0, q);
    }
  }
  return EM_OK;
}

/* Validates shapes/indices, copies self to out and scatters. */
static em_status do_scatter(em_kernel_ctx *ctx, scatter_call *c) {
  em_tensor *self = c->self, *index = c->index, *out = c->out;
  int32_t d = c->dim;
  EM_KTRY(check_index_dtype(ctx, index));
  EM_KCHECK(ctx, out->dtype == self->dtype, "out dtype %s differs from self dtype %s",
            em_dtype_name(out->dtype), em_dtype_name(self->dtype));
  EM_KCHECK(ctx, !c->src || c->src->dtype == self->dtype,
            "expected self.dtype (%s) to be equal to src.dtype (%s)", em_dtype_name(self->dtype),
            em_dtype_name(c->src->dtype));
  nview sv, iv, rv;
  nview_of(&sv, self);
  nview_of(&iv, index);
  if (c->src) nview_of(&rv, c->src);
  if (index->numel > 0) {
    EM_KCHECK(ctx, sv.dim == iv.dim && (!c->src || rv.dim == iv.dim),
              "index tensor must have the same number of dimensions as self and src tensors");
    for (int32_t j = 0; j < sv.dim; j++)
      EM_KCHECK(ctx,
                (j == d || iv.sizes[j] <= sv.sizes[j]) && (!c->src || iv.sizes[j] <= rv.sizes[j]),
                "expected index size %lld at dim %d to be no larger than self (apart from dim "
                "%d) and src",
                (long long)iv.sizes[j], (int)j, (int)d);
    EM_KTRY(check_index_values(ctx, index, &iv, sv.sizes[d], d));
  }
  EM_KCHECK(ctx, out->dim == self->dim, "out has rank %d, expected %d", (int)out->dim,
            (int)self->dim);
  EM_KTRY(em_resize_out(ctx, out, self->sizes, self->dim));
  if (out->numel == 0) return EM_OK;
  em_shape_copy_tensor(out, self);
  if (index->numel == 0) return EM_OK;
  nview ov;
  nview_of(&ov, out);
  int64_t ostr[EM_MAX_DIM];
  for (int32_t j = 0; j < ov.dim; j++) ostr[j] = j == d ? 0 : ov.strides[j];
  size_t es = em_dtype_size(out->dtype);
  /* Pass 0 (include_self=False): reset targets to the identity; pass 1: combine. */
  for (int pass = c->include_self ? 1 : 0; pass < 2; pass++) {
    em_shape_iter it;
    em_shape_iter_init(&it, iv.sizes, iv.dim);
    em_shape_iter_add(&it, iv.strides);
    em_shape_iter_add(&it, ostr);
    em_shape_iter_add(&it, c->src ? rv.strides : NULL);
    for (int64_t i = 0; i < index->numel; i++, em_shape_iter_next(&it)) {
      int64_t v = em_shape_index_at(index, it.off[0]);
      char *dst = em_shape_at(out->data, it.off[1] + v * ov.strides[d], es);
      if (pass == 0) {
        store_identity(dst, out->dtype, c->op);
        continue;
      }
      const char *src = c->src ? em_shape_at(c->src->data, it.off[2], es) : c->value;
      reduce_elem(dst, src, out->dtype, c->op);
    }
  }
  return c->op == RED_MEAN ? divide_by_count(ctx, c, &iv, &ov) : EM_OK;
}

/* Reads (self, dim, index) from args 0..2 into c. */
static em_status scatter_head(em_kernel_ctx *ctx, em_evalue **args, scatter_call *c) {
  int64_t dim;
  memset(c, 0, sizeof *c);
  c->self = EM_ARG_TENSOR(args, 0);
  c->index = EM_ARG_TENSOR(args, 2);
  c->include_self = true;
  EM_KCHECK(ctx, c->self && c->index, "expected tensor arguments");
  EM_KCHECK(ctx, em_arg_int(args[1], &dim), "dim must be an int");
  EM_KCHECK(ctx, em_norm_dim(dim, c->self->dim, &c->dim), "dim %lld out of range for rank %d",
            (long long)dim, (int)c->self->dim);
  return EM_OK;
}

/* Converts a Scalar argument into one element of dtype dt at buf. */
static em_status scalar_to(em_kernel_ctx *ctx, const em_evalue *v, int dt, char *buf) {
  EM_KCHECK(ctx, v && (v->tag == EM_TAG_INT || v->tag == EM_TAG_DOUBLE || v->tag == EM_TAG_BOOL),
            "value must be a Scalar");
  EM_KCHECK(ctx,
            em_dtype_size(dt) <= 16 && em_dtype_size(dt) > 0 &&
                (em_dtype_is_float(dt) || em_dtype_is_int(dt) || dt == EM_DTYPE_BOOL),
            "unsupported dtype %s", em_dtype_name(dt));
  if (v->tag == EM_TAG_DOUBLE)
    em_store_f64(buf, dt, 0, v->u.d);
  else
    em_store_i64(buf, dt, 0, v->tag == EM_TAG_INT ? v->u.i : (int64_t)v->u.b);
  return EM_OK;
}

/* Parses reduce names: scatter's "add"/"multiply" or scatter_reduce's five. */
static em_status parse_reduce(em_kernel_ctx *ctx, const em_evalue *v, bool two, red_op *op) {
  if (!two && em_shape_str_eq(v, "add"))
    *op = RED_SUM;
  else if (!two && em_shape_str_eq(v, "multiply"))
    *op = RED_PROD;
  else if (two && em_shape_str_eq(v, "sum"))
    *op = RED_SUM;
  else if (two && em_shape_str_eq(v, "prod"))
    *op = RED_PROD;
  else if (two && em_shape_str_eq(v, "mean"))
    *op = RED_MEAN;
  else if (two && em_shape_str_eq(v, "amax"))
    *op = RED_MAX;
  else if (two && em_shape_str_eq(v, "amin"))
    *op = RED_MIN;
  else
    EM_KCHECK(ctx, false,
              two ? "reduce argument must be one of sum, prod, mean, amax, amin"
                  : "reduce argument must be either add or multiply");
  return EM_OK;
}

/* scatter.src_out(self, dim, index, src, *, out). */
em_status em_scatter_src_out(em_kernel_ctx *ctx, em_evalue **args) {
  scatter_call c;
  EM_KTRY(scatter_head(ctx, args, &c));
  c.src = EM_ARG_TENSOR(args, 3);
  c.out = EM_ARG_TENSOR(args, 4);
  EM_KCHECK(ctx, c.src && c.out, "expected tensor arguments");
  c.op = RED_SET;
  return do_scatter(ctx, &c);
}

/* scatter.value_out(self, dim, index, value, *, out). */
em_status em_scatter_value_out(em_kernel_ctx *ctx, em_evalue **args) {
  scatter_call c;
  char buf[16];
  EM_KTRY(scatter_head(ctx, args, &c));
  c.out = EM_ARG_TENSOR(args, 4);
  EM_KCHECK(ctx, c.out, "expected tensor arguments");
  EM_KTRY(scalar_to(ctx, args[3], c.self->dtype, buf));
  c.value = buf;
  c.op = RED_SET;
  return do_scatter(ctx, &c);
}

/* scatter_add.out(self, dim, index, src, *, out). */
em_status em_scatter_add_out(em_kernel_ctx *ctx, em_evalue **args) {
  scatter_call c;
  EM_KTRY(scatter_head(ctx, args, &c));
  c.src = EM_ARG_TENSOR(args, 3);
  c.out = EM_ARG_TENSOR(args, 4);
  EM_KCHECK(ctx, c.src && c.out, "expected tensor arguments");
  c.op = RED_SUM;
  return do_scatter(ctx, &c);
}

/* scatter.reduce_out(self, dim, index, src, *, reduce, out). */
em_status em_scatter_reduce_out(em_kernel_ctx *ctx, em_evalue **args) {
  scatter_call c;
  EM_KTRY(scatter_head(ctx, args, &c));
  c.src = EM_ARG_TENSOR(args, 3);
  c.out = EM_ARG_TENSOR(args, 5);
  EM_KCHECK(ctx, c.src && c.out, "expected tensor arguments");
  EM_KTRY(parse_reduce(ctx, args[4], false, &c.op));
  return do_scatter(ctx, &c);
}

/* scatter.value_reduce_out(self, dim, index, value, *, reduce, out). */
em_status em_scatter_value_reduce_out(em_kernel_ctx *ctx, em_evalue **args) {
  scatter_call c;
  char buf[16];
  EM_KTRY(scatter_head(ctx, args, &c));
  c.out = EM_ARG_TENSOR(args, 5);
  EM_KCHECK(ctx, c.out, "expected tensor arguments");
  EM_KTRY(scalar_to(ctx, args[3], c.self->dtype, buf));
  c.value = buf;
  EM_KTRY(parse_reduce(ctx, args[4], false, &c.op));
  return do_scatter(ctx, &c);
}

/* scatter_reduce.two_out(self, dim, index, src, reduce, *, include_self, out). */
em_status em_scatter_reduce_two_out(em_kernel_ctx *ctx, em_evalue **args) {
  scatter_call c;
  EM_KTRY(scatter_head(ctx, args, &c));
  c.src = EM_ARG_TENSOR(args, 3);
  c.out = EM_ARG_TENSOR(args, 6);
  EM_KCHECK(ctx, c.src && c.out, "expected tensor arguments");
  EM_KTRY(parse_reduce(ctx, args[4], true, &c.op));
  EM_KCHECK(ctx, em_arg_bool(args[5], &c.include_self), "include_self must be a bool");
  return do_scatter(ctx, &c);
}
