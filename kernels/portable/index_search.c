/*
 * index_search.c — binary search ops: searchsorted (Tensor/Scalar) and
 * bucketize (Tensor/Scalar), out variants.
 *
 * The search is ATen's (aten/src/ATen/native/BucketizationUtils.h): lower
 * bound keeps going right while !(seq[mid] >= v), upper bound (right=True)
 * while !(seq[mid] > v), so NaN values land at the end. Values compare in the
 * promoted type of the sequence and the input (a Scalar input is a "wrapped
 * number" as in ATen: it takes the sequence's float type, or f32/i64).
 */
#include "portable/shape_util.h"

/* One searchsorted call. */
typedef struct search {
  const em_tensor *seq;    /* [..., n] */
  const em_tensor *sorter; /* NULL or int64 like seq */
  const em_tensor *in;     /* values (maybe a 0-dim stand-in for a Scalar) */
  em_tensor *out;
  int cmp_dt; /* dtype the comparison happens in */
  bool right;
} search;

/* Loads element `off` of t converted to the comparison dtype (as a double). */
static double load_cmp_f(const em_tensor *t, int64_t off, int cmp_dt) {
  double v = em_load_f64(t->data, t->dtype, off);
  if (t->dtype != cmp_dt) { /* round through the promoted dtype */
    uint8_t buf[8];
    em_store_f64(buf, cmp_dt, 0, v);
    v = em_load_f64(buf, cmp_dt, 0);
  }
  return v;
}

/* Index of v in the row of seq at `row` (sorter row at `srow`), n elements. */
static int64_t bsearch_row(const search *s, int64_t row, int64_t srow, int64_t n,
                           const em_tensor *vt, int64_t voff) {
  const em_tensor *seq = s->seq;
  int64_t st = seq->strides[seq->dim - 1];
  int64_t sst = s->sorter ? s->sorter->strides[s->sorter->dim - 1] : 0;
  bool ints = !em_dtype_is_float(s->cmp_dt);
  int64_t vi = ints ? em_load_i64(vt->data, vt->dtype, voff) : 0;
  double vd = ints ? 0.0 : load_cmp_f(vt, voff, s->cmp_dt);
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    int64_t mid = lo + ((hi - lo) >> 1);
    int64_t k = s->sorter ? ((const int64_t *)s->sorter->data)[srow + mid * sst] : mid;
    bool go_right;
    if (ints) {
      int64_t m = em_load_i64(seq->data, seq->dtype, row + k * st);
      go_right = s->right ? !(m > vi) : !(m >= vi);
    } else {
      double m = load_cmp_f(seq, row + k * st, s->cmp_dt);
      go_right = s->right ? !(m > vd) : !(m >= vd);
    }
    if (go_right)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/* Validates the call, resizes out to the input's shape and searches every value. */
static em_status run_search(em_kernel_ctx *ctx, search *s, bool out_int32) {
  const em_tensor *seq = s->seq, *in = s->in;
  em_tensor *out = s->out;
  EM_KCHECK(ctx, seq->dim >= 1, "boundaries tensor must have at least 1 dimension");
  EM_KCHECK(ctx,
            seq->dtype != EM_DTYPE_BOOL && in->dtype != EM_DTYPE_BOOL &&
                (em_dtype_is_float(seq->dtype) || em_dtype_is_int(seq->dtype)) &&
                (em_dtype_is_float(in->dtype) || em_dtype_is_int(in->dtype)),
            "unsupported dtypes %s and %s", em_dtype_name(seq->dtype), em_dtype_name(in->dtype));
  int want = out_int32 ? EM_DTYPE_I32 : EM_DTYPE_I64;
  EM_KCHECK(ctx, out->dtype == want,
            "output tensor's dtype is wrong: expected %s (out_int32=%d), "
            "got %s",
            em_dtype_name(want), (int)out_int32, em_dtype_name(out->dtype));
  if (seq->dim > 1) {
    bool ok = in->dim == seq->dim;
    for (int32_t d = 0; ok && d + 1 < seq->dim; d++) ok = in->sizes[d] == seq->sizes[d];
    EM_KCHECK(ctx, ok,
              "boundaries tensor should be 1 dimension or the first N-1 dimensions of "
              "boundaries tensor and input value tensor must match");
  }
  int64_t n = seq->sizes[seq->dim - 1];
  if (s->sorter) {
    const em_tensor *so = s->sorter;
    EM_KCHECK(ctx, so->dtype == EM_DTYPE_I64, "sorter must be a tensor of long dtype, got %s",
              em_dtype_name(so->dtype));
    EM_KCHECK(ctx, em_shape_same_sizes(so, seq), "boundary and sorter must have the same size");
    em_shape_iter it;
    em_shape_iter_init(&it, so->sizes, so->dim);
    em_shape_iter_add(&it, so->strides);
    for (int64_t i = 0; i < so->numel; i++, em_shape_iter_next(&it)) {
      int64_t v = ((const int64_t *)so->data)[it.off[0]];
      EM_KCHECK(ctx, v >= 0 && v < n, "sorter index %lld out of range [0, %lld)", (long long)v,
                (long long)n);
    }
  }
  EM_KCHECK(ctx, out->dim == in->dim, "out has rank %d, expected %d", (int)out->dim, (int)in->dim);
  EM_KTRY(em_resize_out(ctx, out, in->sizes, in->dim));
  if (in->numel == 0) return EM_OK;
  /* Row offsets into seq/sorter follow the input's leading dims (N-D boundaries). */
  int64_t rs[EM_MAX_DIM] = {0}, rss[EM_MAX_DIM] = {0};
  if (seq->dim > 1) {
    for (int32_t d = 0; d + 1 < seq->dim; d++) {
      rs[d] = seq->strides[d];
      rss[d] = s->sorter ? s->sorter->strides[d] : 0;
    }
  }
  em_shape_iter it;
  em_shape_iter_init(&it, in->sizes, in->dim);
  em_shape_iter_add(&it, in->strides);
  em_shape_iter_add(&it, out->strides);
  em_shape_iter_add(&it, rs);
  em_shape_iter_add(&it, rss);
  for (int64_t i = 0; i < in->numel; i++, em_shape_iter_next(&it)) {
    int64_t r = bsearch_row(s, it.off[2], it.off[3], n, in, it.off[0]);
    em_store_i64(out->data, out->dtype, it.off[1], r);
  }
  return EM_OK;
}

/* Resolves `right` and `side` (None, "left" or "right"); they must not contradict. */
static em_status parse_side(em_kernel_ctx *ctx, em_evalue **args, int ri, int si, bool *right) {
  EM_KCHECK(ctx, em_arg_bool(args[ri], right), "right must be a bool");
  const em_evalue *side = args[si];
  if (side->tag == EM_TAG_NONE) return EM_OK;
  bool is_left = em_shape_str_eq(side, "left"), is_right = em_shape_str_eq(side, "right");
  EM_KCHECK(ctx, is_left || is_right, "side can only be 'left' or 'right'");
  EM_KCHECK(ctx, !(is_left && *right),
            "side and right can't be set to opposites, got side of left while right was True");
  *right = is_right;
  return EM_OK;
}

/* A 0-dim tensor holding a Scalar argument, typed as ATen's wrapped numbers promote. */
typedef struct scalar_tensor {
  em_tensor t;
  union {
    int64_t i;
    double d;
  } v;
} scalar_tensor;

static em_status wrap_scalar(em_kernel_ctx *ctx, const em_evalue *v, const em_tensor *seq,
                             scalar_tensor *st, int *cmp_dt) {
  memset(st, 0, sizeof *st);
  st->t.data = &st->v;
  st->t.numel = st->t.numel_bound = 1;
  bool is_float = v->tag == EM_TAG_DOUBLE;
  EM_KCHECK(ctx, is_float || v->tag == EM_TAG_INT || v->tag == EM_TAG_BOOL,
            "self must be a Scalar");
  if (is_float) {
    st->t.dtype = EM_DTYPE_F64;
    st->v.d = v->u.d;
  } else {
    st->t.dtype = EM_DTYPE_I64;
    st->v.i = v->tag == EM_TAG_INT ? v->u.i : (int64_t)v->u.b;
  }
  if (em_dtype_is_float(seq->dtype))
    *cmp_dt = seq->dtype;
  else
    *cmp_dt = is_float ? EM_DTYPE_F32 : EM_DTYPE_I64;
  return EM_OK;
}

/* searchsorted.Tensor_out(sorted_sequence, self, *, out_int32, right, side, sorter, out). */
em_status em_searchsorted_tensor_out(em_kernel_ctx *ctx, em_evalue **args) {
  search s = {0};
  bool i32;
  s.seq = EM_ARG_TENSOR(args, 0);
  s.in = EM_ARG_TENSOR(args, 1);
  s.out = EM_ARG_TENSOR(args, 6);
  EM_KCHECK(ctx, s.seq && s.in && s.out, "expected tensor arguments");
  EM_KCHECK(ctx, em_arg_bool(args[2], &i32), "out_int32 must be a bool");
  EM_KTRY(parse_side(ctx, args, 3, 4, &s.right));
  if (args[5]->tag != EM_TAG_NONE) {
    s.sorter = EM_ARG_TENSOR(args, 5);
    EM_KCHECK(ctx, s.sorter, "sorter must be a tensor or None");
  }
  s.cmp_dt = em_promote_types(s.seq->dtype, s.in->dtype);
  return run_search(ctx, &s, i32);
}

/* searchsorted.Scalar_out(sorted_sequence, self, *, out_int32, right, side, sorter, out). */
em_status em_searchsorted_scalar_out(em_kernel_ctx *ctx, em_evalue **args) {
  search s = {0};
  scalar_tensor st;
  bool i32;
  s.seq = EM_ARG_TENSOR(args, 0);
  s.out = EM_ARG_TENSOR(args, 6);
  EM_KCHECK(ctx, s.seq && s.out, "expected tensor arguments");
  EM_KCHECK(ctx, s.seq->dim == 1,
            "input value can be a scalar only when boundaries tensor "
            "dimension is 1, got %d",
            (int)s.seq->dim);
  EM_KTRY(wrap_scalar(ctx, args[1], s.seq, &st, &s.cmp_dt));
  s.in = &st.t;
  EM_KCHECK(ctx, em_arg_bool(args[2], &i32), "out_int32 must be a bool");
  EM_KTRY(parse_side(ctx, args, 3, 4, &s.right));
  if (args[5]->tag != EM_TAG_NONE) {
    s.sorter = EM_ARG_TENSOR(args, 5);
    EM_KCHECK(ctx, s.sorter, "sorter must be a tensor or None");
  }
  return run_search(ctx, &s, i32);
}

/* bucketize.Tensor_out(self, boundaries, *, out_int32, right, out). */
em_status em_bucketize_tensor_out(em_kernel_ctx *ctx, em_evalue **args) {
  search s = {0};
  bool i32;
  s.in = EM_ARG_TENSOR(args, 0);
  s.seq = EM_ARG_TENSOR(args, 1);
  s.out = EM_ARG_TENSOR(args, 4);
  EM_KCHECK(ctx, s.seq && s.in && s.out, "expected tensor arguments");
  EM_KCHECK(ctx, s.seq->dim == 1, "boundaries tensor must be 1 dimension, but got dim(%d)",
            (int)s.seq->dim);
  EM_KCHECK(ctx, em_arg_bool(args[2], &i32) && em_arg_bool(args[3], &s.right),
            "out_int32 and right must be bools");
  s.cmp_dt = em_promote_types(s.seq->dtype, s.in->dtype);
  return run_search(ctx, &s, i32);
}

/* bucketize.Scalar_out(self, boundaries, *, out_int32, right, out). */
em_status em_bucketize_scalar_out(em_kernel_ctx *ctx, em_evalue **args) {
  search s = {0};
  scalar_tensor st;
  bool i32;
  s.seq = EM_ARG_TENSOR(args, 1);
  s.out = EM_ARG_TENSOR(args, 4);
  EM_KCHECK(ctx, s.seq && s.out, "expected tensor arguments");
  EM_KCHECK(ctx, s.seq->dim == 1, "boundaries tensor must be 1 dimension, but got dim(%d)",
            (int)s.seq->dim);
  EM_KTRY(wrap_scalar(ctx, args[0], s.seq, &st, &s.cmp_dt));
  s.in = &st.t;
  EM_KCHECK(ctx, em_arg_bool(args[2], &i32) && em_arg_bool(args[3], &s.right),
            "out_int32 and right must be bools");
  return run_search(ctx, &s, i32);
}
