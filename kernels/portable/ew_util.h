/*
 * ew_util.h — helpers shared by the elementwise, reduction and creation kernels
 * (elementwise_*.c, reduce_*.c, create_*.c).
 *
 * Three pieces:
 *  - ew_iter: a strided walk over an output shape that keeps one element offset
 *    per operand (broadcast dims have stride 0), in logical row-major order, so
 *    any dim order (channels-last included) works without copies.
 *  - torch.result_type and can_cast, the dtype rules of ATen's TensorIterator.
 *  - ew_map: the generic N-ary elementwise driver. Each input is cast to its own
 *    compute dtype (the common dtype for arithmetic), an ew_fn computes the
 *    result in the "float domain" (double, rounded to the compute dtype like
 *    ATen's opmath) or the "int domain" (int64 wrapped to the compute dtype),
 *    and the result is cast to the out tensor's dtype. All-f32 calls take a
 *    typed path (single precision when the op provides ew_op.f32), by whole
 *    rows when the op also provides ew_op.f32_row and the layout allows.
 *
 *     ew_op op;
 *     ew_op_init(&op, common, common);
 *     ew_in in[2] = {ew_in_tensor(a, common), ew_in_tensor(b, common)};
 *     return ew_map(ctx, out, in, 2, add_fn, &op);
 */
#ifndef EMBER_KERNELS_PORTABLE_EW_UTIL_H
#define EMBER_KERNELS_PORTABLE_EW_UTIL_H

#include "portable/kutil.h"

#define EW_MAX_OPS 4

/* Walk over `dim` dims of `sizes` with n operands, each with its own strides. */
typedef struct ew_iter {
  int32_t dim;
  int n_ops;
  int64_t numel;
  int64_t sizes[EM_MAX_DIM];
  int64_t idx[EM_MAX_DIM];
  int64_t strides[EW_MAX_OPS][EM_MAX_DIM];
  int64_t off[EW_MAX_OPS];
} ew_iter;

/*
 * Starts a walk over the shape sizes[0..dim). Operand k is tensor ts[k]
 * broadcast to that shape (aligned right, size-1 dims repeat), or a scalar
 * (stride 0 everywhere) when ts[k] is NULL. Adjacent dims are merged when
 * every operand allows it.
 */
void ew_iter_init(ew_iter *it, const int64_t *sizes, int32_t dim, const em_tensor *const *ts,
                  int n_ops);

/* Same with explicit strides: strides[k] has `dim` entries for operand k. */
void ew_iter_init_strided(ew_iter *it, const int64_t *sizes, int32_t dim,
                          const int64_t *const *strides, int n_ops);

/* Advances to the next element (row-major over the iterator's shape). */
static inline void ew_iter_next(ew_iter *it) {
  for (int32_t d = it->dim - 1; d >= 0; d--) {
    if (++it->idx[d] < it->sizes[d]) {
      for (int k = 0; k < it->n_ops; k++) it->off[k] += it->strides[k][d];
      return;
    }
    it->idx[d] = 0;
    for (int k = 0; k < it->n_ops; k++) it->off[k] -= it->strides[k][d] * (it->sizes[d] - 1);
  }
}

/* ---- dtype rules ---- */

/* torch.result_type bookkeeping: dimensioned tensors > 0-dim tensors > Python scalars. */
typedef struct ew_rt {
  int dim_r, zero_r, wrapped_r; /* -1 = none yet */
} ew_rt;

void ew_rt_init(ew_rt *s);
void ew_rt_tensor(ew_rt *s, const em_tensor *t);
/* A Scalar argument (Int → i64, Double → f32 (default dtype), Bool → bool). */
void ew_rt_scalar(ew_rt *s, const em_evalue *v);
/* The result dtype, or -1 when no operand was given or a dtype is not promotable. */
int ew_rt_result(const ew_rt *s);

/* ATen's canCast: no float → integral, no non-bool → bool. */
bool ew_can_cast(int from, int to);

/* Strides are row-major contiguous (size-1 dims ignored). */
bool ew_is_contiguous(const em_tensor *t);
/* The elements fill [0, numel) exactly, in some dim order. */
bool ew_is_dense(const em_tensor *t);

/* True for the dtypes Ember kernels compute on (reals and bool). */
bool ew_dtype_is_real_or_bool(int d);

/* Rounds v to the floating dtype (f16/bf16/f32; f64 unchanged). */
static inline double ew_round_to(double v, int dtype) {
  switch (dtype) {
  case EM_DTYPE_F32: return (double)(float)v;
  case EM_DTYPE_F16: return (double)em_f16_to_f32(em_f32_to_f16((float)v));
  case EM_DTYPE_BF16: return (double)em_bf16_to_f32(em_f32_to_bf16((float)v));
  default: return v;
  }
}

/* Wraps v to the integral dtype as a C cast does (bool: v != 0). */
static inline int64_t ew_wrap_int(int64_t v, int dtype) {
  switch (dtype) {
  case EM_DTYPE_U8: return (uint8_t)v;
  case EM_DTYPE_I8: return (int8_t)v;
  case EM_DTYPE_I16: return (int16_t)v;
  case EM_DTYPE_I32: return (int32_t)v;
  case EM_DTYPE_BOOL: return v != 0;
  default: return v;
  }
}

/* Wrapping int64 arithmetic (no signed-overflow UB). */
static inline int64_t ew_add_i64(int64_t a, int64_t b) {
  return (int64_t)((uint64_t)a + (uint64_t)b);
}
static inline int64_t ew_sub_i64(int64_t a, int64_t b) {
  return (int64_t)((uint64_t)a - (uint64_t)b);
}
static inline int64_t ew_mul_i64(int64_t a, int64_t b) {
  return (int64_t)((uint64_t)a * (uint64_t)b);
}

/* ---- the generic elementwise driver ---- */

/* One value in the float (f) or int (i) domain. */
typedef union ew_val {
  double f;
  int64_t i;
} ew_val;

/* Parameters and state of one elementwise operation. */
typedef struct ew_op {
  int common;             /* compute dtype of the inputs */
  int res;                /* dtype of the op's result before the cast to out */
  bool fp;                /* common is floating */
  bool res_fp;            /* res is floating */
  ew_val p[4];            /* op parameters (alpha, bounds, ...) */
  int mode;               /* op variant (rounding mode, which bound, ...) */
  double (*math)(double); /* a float-domain function for table-driven ops */
  float (*mathf)(float);  /* its single-precision version, when there is one */
  /* Optional single-precision version of the op for the all-f32 path (MCUs without a double
   * FPU); x holds the inputs as floats, p[] the parameters as above. */
  float (*f32)(const float *x, const struct ew_op *op);
  bool err; /* set by the op on a data-dependent error */
  const char *errmsg;
  /* Optional row form of f32 (see ew_f32_row_fn); needs f32 set and must give its exact bits. */
  void (*f32_row)(float *o, const float *const *x, const int64_t *s, int64_t n,
                  const struct ew_op *op);
  /* f32_row is a few cycles per element (add, mul, neg, clamp): memory-bound, so it runs on
   * the thread pool only for much larger tensors than the transcendental ones. */
  bool f32_row_cheap;
} ew_op;

/*
 * A row kernel of the all-f32 path: o[i] = f32(x[0][i * s[0]], x[1][i * s[1]], ...) for i < n,
 * where each s[k] is 1 (a contiguous run) or 0 (one value repeated: a Scalar or a broadcast dim).
 * o is contiguous and may equal an x[k] (in-place ops) but never overlaps one partially.
 */
typedef void (*ew_f32_row_fn)(float *o, const float *const *x, const int64_t *s, int64_t n,
                              const ew_op *op);

/*
 * Defines a static unary row kernel `name` from an expression EXPR of the float A (the input)
 * and `op`. The contiguous case is a plain loop the compiler can vectorize.
 */
#define EW_F32_ROW_UNARY(name, EXPR)                                                               \
  static void name(float *o, const float *const *x, const int64_t *s, int64_t n,                   \
                   const ew_op *op_arg) {                                                          \
    const ew_op op_copy = *op_arg; /* a local copy: stores to o cannot change it */                \
    const ew_op *op = &op_copy;                                                                    \
    (void)op;                                                                                      \
    const float *a = x[0];                                                                         \
    if (s[0]) {                                                                                    \
      for (int64_t i = 0; i < n; i++) {                                                            \
        float A = a[i];                                                                            \
        o[i] = (EXPR);                                                                             \
      }                                                                                            \
    } else {                                                                                       \
      float A = a[0];                                                                              \
      float r = (EXPR);                                                                            \
      for (int64_t i = 0; i < n; i++) o[i] = r;                                                    \
    }                                                                                              \
  }

/*
 * Same for a binary kernel from an expression of A, B and op, with one loop per stride pattern
 * (both contiguous, A repeated, B repeated) so each inner loop is a plain vectorizable loop.
 */
#define EW_F32_ROW_BINARY(name, EXPR)                                                              \
  static void name(float *o, const float *const *x, const int64_t *s, int64_t n,                   \
                   const ew_op *op_arg) {                                                          \
    const ew_op op_copy = *op_arg; /* a local copy: stores to o cannot change it */                \
    const ew_op *op = &op_copy;                                                                    \
    (void)op;                                                                                      \
    const float *a = x[0], *b = x[1];                                                              \
    if (s[0] && s[1]) {                                                                            \
      for (int64_t i = 0; i < n; i++) {                                                            \
        float A = a[i], B = b[i];                                                                  \
        o[i] = (EXPR);                                                                             \
      }                                                                                            \
    } else if (s[0]) {                                                                             \
      const float B = b[0];                                                                        \
      for (int64_t i = 0; i < n; i++) {                                                            \
        float A = a[i];                                                                            \
        o[i] = (EXPR);                                                                             \
      }                                                                                            \
    } else if (s[1]) {                                                                             \
      const float A = a[0];                                                                        \
      for (int64_t i = 0; i < n; i++) {                                                            \
        float B = b[i];                                                                            \
        o[i] = (EXPR);                                                                             \
      }                                                                                            \
    } else {                                                                                       \
      const float A = a[0], B = b[0];                                                              \
      float r = (EXPR);                                                                            \
      for (int64_t i = 0; i < n; i++) o[i] = r;                                                    \
    }                                                                                              \
  }

/* Sets common/res and the derived flags; clears the rest. */
void ew_op_init(ew_op *op, int common, int res);

/* An input: a tensor or a scalar (t == NULL), and the dtype it is cast to. */
typedef struct ew_in {
  const em_tensor *t;
  ew_val s;
  int dtype;
} ew_in;

static inline ew_in ew_in_tensor(const em_tensor *t, int dtype) {
  ew_in r;
  r.t = t;
  r.s.i = 0;
  r.dtype = dtype;
  return r;
}

/*
 * A Scalar argument as an input cast to `dtype`. In the float domain the value
 * keeps f32 precision for f16/bf16/f32 (ATen's opmath scalar) and f64 for f64;
 * in the int domain it is wrapped to dtype.
 */
ew_in ew_in_scalar(const em_evalue *v, int dtype);

/* A Scalar argument's value in the domain of `dtype` (same rules as ew_in_scalar). */
ew_val ew_scalar_val(const em_evalue *v, int dtype);

/* Computes the result for one element from the cast inputs x[0..n). */
typedef ew_val (*ew_fn)(const ew_val *x, ew_op *op);

/*
 * Broadcasts the tensor inputs, resizes `out` to the broadcast shape and
 * writes fn(inputs) cast to out's dtype into every element. Returns the op's
 * error (EM_ERR_INVALID_ARGUMENT, with op->errmsg) when fn set op->err.
 * When every operand is f32 it uses typed loads and op->f32 if set, and
 * op->f32_row over whole rows when the innermost (merged) dim is contiguous or
 * broadcast in every operand (same shape, a Scalar, a [.., 1] column, a suffix
 * row such as `x * weight`), with no index arithmetic per element; large
 * float-domain loops run in chunks on ctx->pool (fn must then not write *op:
 * each chunk works on a copy).
 */
em_status ew_map(em_kernel_ctx *ctx, em_tensor *out, const ew_in *ins, int n_in, ew_fn fn,
                 ew_op *op);

/* Loads element `off` of t cast to `dtype` (float or int domain by dtype). */
static inline ew_val ew_load(const em_tensor *t, int64_t off, int dtype) {
  ew_val v;
  if (dtype == EM_DTYPE_BOOL)
    v.i = em_load_f64(t->data, t->dtype, off) != 0.0;
  else if (em_dtype_is_float(dtype))
    v.f = ew_round_to(em_load_f64(t->data, t->dtype, off), dtype);
  else
    v.i = ew_wrap_int(em_load_i64(t->data, t->dtype, off), dtype);
  return v;
}

/* Stores v (a value of dtype `from`) into element off of t, cast to t's dtype. */
static inline void ew_store(em_tensor *t, int64_t off, ew_val v, int from) {
  if (em_dtype_is_float(from))
    em_store_f64(t->data, t->dtype, off, ew_round_to(v.f, from));
  else
    em_store_i64(t->data, t->dtype, off, ew_wrap_int(v.i, from));
}

/*
 * Copies src (broadcast to dst's shape) into dst with dtype conversion,
 * honoring both tensors' strides. dst must already have its final shape.
 */
em_status ew_copy_cast(em_kernel_ctx *ctx, em_tensor *dst, const em_tensor *src);

/* Fills every element of t with v (a value of dtype `from`). */
void ew_fill(em_tensor *t, ew_val v, int from);

/* ---- reductions ---- */

/*
 * Parses an `int[1]? dim` argument into mask[0..rank): None or an empty list
 * (when empty_is_all) selects every dim. Rejects out-of-range and repeated dims.
 * For a 0-dim tensor the mask has no entries and dims 0/-1 are accepted.
 */
em_status ew_parse_dims(em_kernel_ctx *ctx, em_evalue *v, int32_t rank, bool empty_is_all,
                        bool *mask);

/* Output shape of a reduction: reduced dims become 1 (keepdim) or are dropped. */
void ew_reduced_shape(const em_tensor *in, const bool *mask, bool keepdim, int64_t *sizes,
                      int32_t *dim);

/*
 * A reduction's loops: the outer walk visits each output element (operands:
 * input, then up to two outputs), the inner walk visits the reduced elements of
 * the input relative to the outer offset.
 */
typedef struct ew_reduce {
  ew_iter outer;
  int32_t n_red;
  int64_t red_sizes[EM_MAX_DIM];
  int64_t red_strides[EM_MAX_DIM];
  int64_t red_numel;
  int64_t out_numel;
} ew_reduce;

/*
 * Plans a reduction of `in` over mask into outs[0..n_outs) (each already
 * resized to the reduced shape, with or without keepdim).
 */
void ew_reduce_init(ew_reduce *r, const em_tensor *in, const bool *mask, em_tensor *const *outs,
                    int n_outs);

/* Starts an inner walk over the reduced dims from input offset base. */
void ew_reduce_inner(const ew_reduce *r, ew_iter *it, int64_t base);

/* Whether each output of r (input operand 0, output operand 1) reduces one run of n input
 * elements at stride s, and the outputs of a row (the innermost outer dim, inner >= 2 of them)
 * read neighbouring elements and are written side by side: a reduction over a middle dim of a
 * contiguous tensor, whose outputs a kernel may compute a row at a time. */
bool ew_reduce_cols(const ew_reduce *r, int64_t *n, int64_t *s, int64_t *inner);

/* ---- argument helpers ---- */

/* True for Int, Double and Bool values. */
bool ew_is_scalar(const em_evalue *v);

/* A binary op's operands: each a tensor (a/b) or a Scalar (as/bs), the out tensor, and
 * torch.result_type of the operands. */
typedef struct ew_bin {
  em_tensor *a, *b, *out;
  const em_evalue *as, *bs;
  int common;
} ew_bin;

/* Checks operands x, y (tensor or Scalar, real or bool) and out; fills r. */
em_status ew_bin_setup(em_kernel_ctx *ctx, em_evalue *x, em_evalue *y, em_evalue *out, ew_bin *r);
/* The two ew_in of a binary op, both cast to dtype. */
void ew_bin_ins(const ew_bin *b, int dtype, ew_in *ins);
/* Same, with Scalars rounded all the way to dtype (ATen casts a wrapped scalar to the common
 * dtype for comparisons, fmod, remainder; only add/sub/mul/div keep opmath precision). */
void ew_bin_ins_exact(const ew_bin *b, int dtype, ew_in *ins);
/* The dtype of an operand (a Scalar counts as i64/f64/bool). */
int ew_operand_dtype(const em_tensor *t, const em_evalue *s);

/* True when Scalar v converts to dtype d without overflow (ATen's checked conversion). */
bool ew_scalar_fits(const em_evalue *v, int d);

/* Reads a `SymInt[] size` argument (non-negative, at most EM_MAX_DIM entries). */
em_status ew_size_list(em_kernel_ctx *ctx, em_evalue *v, int64_t *sizes, int32_t *dim);

/* Checks an `int[]? dim_order` argument against t's dim order (None passes). */
em_status ew_check_dim_order(em_kernel_ctx *ctx, em_evalue *v, const em_tensor *t);

/* Deterministic random stream (create_fill.c): reserve a state for n draws, then draw. */
uint64_t ew_rng_begin(int64_t n);
double ew_rng_uniform(uint64_t *state);
/* Fills a floating tensor with U[0, 1) (normal = false) or N(0, 1) values. */
em_status ew_random_fill(em_kernel_ctx *ctx, em_tensor *out, bool normal);

/* args[i] as a tensor of a real or bool dtype with data; NULL (error logged) otherwise. */
em_tensor *ew_arg_real_tensor(em_kernel_ctx *ctx, em_evalue **args, int i);

/* Declares `var` = args[i] as a checked real/bool tensor or returns EM_ERR_INVALID_ARGUMENT. */
#define EW_TENSOR_ARG(var, ctx, args, i)                                                           \
  em_tensor *var = ew_arg_real_tensor((ctx), (args), (i));                                         \
  if (!var) return EM_ERR_INVALID_ARGUMENT

#endif /* EMBER_KERNELS_PORTABLE_EW_UTIL_H */
