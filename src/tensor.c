/*
 * tensor.c — dtype traits, tensor shape helpers and EValue accessors.
 *
 * Strides come from the dim order (docs/pte-format.md §5): the innermost dimension
 * has stride 1 and each outer one is the product of the sizes inside it, with
 * a size of 0 treated as 1 so strides stay well defined.
 */
#include "ember/tensor.h"

typedef struct dtype_traits {
  const char *name;
  uint8_t size;
} dtype_traits;

static const dtype_traits k_dtypes[EM_DTYPE_COUNT] = {
    [EM_DTYPE_U8] = {"u8", 1},
    [EM_DTYPE_I8] = {"i8", 1},
    [EM_DTYPE_I16] = {"i16", 2},
    [EM_DTYPE_I32] = {"i32", 4},
    [EM_DTYPE_I64] = {"i64", 8},
    [EM_DTYPE_F16] = {"f16", 2},
    [EM_DTYPE_F32] = {"f32", 4},
    [EM_DTYPE_F64] = {"f64", 8},
    [EM_DTYPE_C32] = {"c32", 4},
    [EM_DTYPE_C64] = {"c64", 8},
    [EM_DTYPE_C128] = {"c128", 16},
    [EM_DTYPE_BOOL] = {"bool", 1},
    [EM_DTYPE_QI8] = {"qi8", 1},
    [EM_DTYPE_QU8] = {"qu8", 1},
    [EM_DTYPE_QI32] = {"qi32", 4},
    [EM_DTYPE_BF16] = {"bf16", 2},
    [EM_DTYPE_QU4X2] = {"qu4x2", 1},
    [EM_DTYPE_QU2X4] = {"qu2x4", 1},
    [EM_DTYPE_BITS1X8] = {"bits1x8", 1},
    [EM_DTYPE_BITS2X4] = {"bits2x4", 1},
    [EM_DTYPE_BITS4X2] = {"bits4x2", 1},
    [EM_DTYPE_BITS8] = {"bits8", 1},
    [EM_DTYPE_BITS16] = {"bits16", 2},
    [EM_DTYPE_F8E5M2] = {"f8e5m2", 1},
    [EM_DTYPE_F8E4M3FN] = {"f8e4m3fn", 1},
    [EM_DTYPE_F8E5M2FNUZ] = {"f8e5m2fnuz", 1},
    [EM_DTYPE_F8E4M3FNUZ] = {"f8e4m3fnuz", 1},
    [EM_DTYPE_U16] = {"u16", 2},
    [EM_DTYPE_U32] = {"u32", 4},
    [EM_DTYPE_U64] = {"u64", 8},
};

size_t em_dtype_size(int dtype) {
  if (dtype < 0 || dtype >= EM_DTYPE_COUNT) return 0;
  return k_dtypes[dtype].size;
}

const char *em_dtype_name(int dtype) {
  if (dtype < 0 || dtype >= EM_DTYPE_COUNT) return "?";
  return k_dtypes[dtype].name;
}

size_t em_tensor_nbytes(const em_tensor *t) { return (size_t)t->numel * em_dtype_size(t->dtype); }

bool em_tensor_is_contiguous_order(const em_tensor *t) {
  for (int32_t i = 0; i < t->dim; i++)
    if (t->dim_order[i] != i) return false;
  return true;
}

void em_strides_from_dim_order(const int64_t *sizes, const uint8_t *dim_order, int32_t dim,
                               int64_t *strides) {
  if (dim <= 0) return;
  strides[dim_order[dim - 1]] = 1;
  for (int32_t i = dim - 2; i >= 0; i--) {
    int64_t inner = sizes[dim_order[i + 1]], st;
    /* Saturates: only a tensor with no elements (a 0 elsewhere in its sizes) can have sizes
     * whose product overflows, and its strides address nothing. */
    if (__builtin_mul_overflow(strides[dim_order[i + 1]], inner == 0 ? 1 : inner, &st))
      st = INT64_MAX;
    strides[dim_order[i]] = st;
  }
}

em_status em_tensor_resize(em_tensor *t, const int64_t *sizes, int32_t dim) {
  if (dim != t->dim) return EM_ERR_INVALID_ARGUMENT;
  int64_t numel = 1;
  bool same = true;
  for (int32_t i = 0; i < dim; i++) {
    if (sizes[i] < 0) return EM_ERR_INVALID_ARGUMENT;
    if (sizes[i] != t->sizes[i]) same = false;
    if (sizes[i] != 0 && numel > INT64_MAX / sizes[i]) return EM_ERR_INVALID_ARGUMENT;
    numel *= sizes[i];
  }
  if (same) return EM_OK;
  if (t->dynamism == EM_SHAPE_STATIC || numel > t->numel_bound) return EM_ERR_INVALID_ARGUMENT;
  for (int32_t i = 0; i < dim; i++) t->sizes[i] = sizes[i];
  t->numel = numel;
  em_strides_from_dim_order(t->sizes, t->dim_order, dim, t->strides);
  return EM_OK;
}

const int64_t *em_evalue_int_list(em_evalue *v, size_t *n_out) {
  if (!v || v->tag != EM_TAG_LIST_INT) return NULL;
  em_list *l = &v->u.list;
  for (size_t i = 0; i < l->n; i++) {
    const em_evalue *item = l->items[i];
    if (!item || item->tag != EM_TAG_INT) return NULL;
    l->u.ints[i] = item->u.i;
  }
  if (n_out) *n_out = l->n;
  return l->u.ints;
}

double em_evalue_to_double(const em_evalue *v, bool *ok) {
  bool good = true;
  double r = 0.0;
  if (!v) {
    good = false;
  } else if (v->tag == EM_TAG_DOUBLE) {
    r = v->u.d;
  } else if (v->tag == EM_TAG_INT) {
    r = (double)v->u.i;
  } else if (v->tag == EM_TAG_BOOL) {
    r = v->u.b ? 1.0 : 0.0;
  } else {
    good = false;
  }
  if (ok) *ok = good;
  return r;
}
