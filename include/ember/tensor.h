/*
 * tensor.h — scalar types, tensors and values (EValues) of the Ember runtime.
 *
 * Tensors never own memory: `data` points into a planned arena, a constant
 * segment of the program, or caller memory. Sizes and strides are int64_t
 * elements; strides are derived from the dim order (docs/pte-format.md §5).
 *
 *     const em_tensor *t = em_evalue_tensor(out);      // NULL unless a tensor
 *     if (t && t->dtype == EM_DTYPE_F32) {
 *       const float *p = (const float *)t->data;
 *       for (int64_t i = 0; i < t->numel; i++) use(p[i]);
 *     }
 */
#ifndef EMBER_TENSOR_H
#define EMBER_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ember/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The most dimensions a tensor may have (ExecuTorch's kTensorDimensionLimit). */
#define EM_MAX_DIM 16

/* Scalar types, numbered as ExecuTorch's ScalarType (schema/scalar_type.fbs). */
typedef enum em_dtype {
  EM_DTYPE_U8 = 0,
  EM_DTYPE_I8 = 1,
  EM_DTYPE_I16 = 2,
  EM_DTYPE_I32 = 3,
  EM_DTYPE_I64 = 4,
  EM_DTYPE_F16 = 5,
  EM_DTYPE_F32 = 6,
  EM_DTYPE_F64 = 7,
  EM_DTYPE_C32 = 8,   /* ComplexHalf */
  EM_DTYPE_C64 = 9,   /* ComplexFloat */
  EM_DTYPE_C128 = 10, /* ComplexDouble */
  EM_DTYPE_BOOL = 11,
  EM_DTYPE_QI8 = 12,
  EM_DTYPE_QU8 = 13,
  EM_DTYPE_QI32 = 14,
  EM_DTYPE_BF16 = 15,
  EM_DTYPE_QU4X2 = 16,
  EM_DTYPE_QU2X4 = 17,
  EM_DTYPE_BITS1X8 = 18,
  EM_DTYPE_BITS2X4 = 19,
  EM_DTYPE_BITS4X2 = 20,
  EM_DTYPE_BITS8 = 21,
  EM_DTYPE_BITS16 = 22,
  EM_DTYPE_F8E5M2 = 23,
  EM_DTYPE_F8E4M3FN = 24,
  EM_DTYPE_F8E5M2FNUZ = 25,
  EM_DTYPE_F8E4M3FNUZ = 26,
  EM_DTYPE_U16 = 27,
  EM_DTYPE_U32 = 28,
  EM_DTYPE_U64 = 29,
  EM_DTYPE_COUNT = 30
} em_dtype;

/* Bit for dtype `d` in a dtype mask (kernel registrations use masks). */
#define EM_DTYPE_BIT(d) (1u << (unsigned)(d))

/* Returns the element size in bytes of `dtype`, or 0 if it is not a valid dtype. */
size_t em_dtype_size(int dtype);

/* Returns the short name of `dtype` ("f32", "i64", ...) or "?" if invalid. */
const char *em_dtype_name(int dtype);

/* How a tensor's shape may change (schema TensorShapeDynamism). */
typedef enum em_dynamism {
  EM_SHAPE_STATIC = 0,
  EM_SHAPE_DYNAMIC_BOUND = 1,
  EM_SHAPE_DYNAMIC_UNBOUND = 2
} em_dynamism;

/* A strided view of memory. Owned by whoever built it (usually a method). */
typedef struct em_tensor {
  void *data;          /* may be NULL until an input is bound */
  int64_t *sizes;      /* [dim] */
  int64_t *strides;    /* [dim], in elements */
  uint8_t *dim_order;  /* [dim], outermost first */
  int64_t numel;       /* product of sizes */
  int64_t numel_bound; /* capacity in elements (== numel for static tensors) */
  int32_t dim;
  int8_t dtype;     /* em_dtype */
  uint8_t dynamism; /* em_dynamism */
} em_tensor;

/* Returns numel * element size. */
size_t em_tensor_nbytes(const em_tensor *t);

/* Returns true when the dim order is 0, 1, ..., dim-1. */
bool em_tensor_is_contiguous_order(const em_tensor *t);

/*
 * Resizes `t` to `sizes[0..dim)`. The rank cannot change. A STATIC tensor
 * accepts only its own sizes; a DYNAMIC tensor accepts any sizes whose numel
 * fits `numel_bound`. Strides are recomputed from the dim order.
 * Returns EM_ERR_INVALID_ARGUMENT (nothing changed) when the shape does not fit.
 */
em_status em_tensor_resize(em_tensor *t, const int64_t *sizes, int32_t dim);

/* Fills `strides` from `sizes` and `dim_order` (a size of 0 copies the inner stride). */
void em_strides_from_dim_order(const int64_t *sizes, const uint8_t *dim_order, int32_t dim,
                               int64_t *strides);

/* Value tags, numbered as ExecuTorch's Tag (runtime/core/tag.h). */
typedef enum em_tag {
  EM_TAG_NONE = 0,
  EM_TAG_TENSOR = 1,
  EM_TAG_STRING = 2,
  EM_TAG_DOUBLE = 3,
  EM_TAG_INT = 4,
  EM_TAG_BOOL = 5,
  EM_TAG_LIST_BOOL = 6,
  EM_TAG_LIST_DOUBLE = 7,
  EM_TAG_LIST_INT = 8,
  EM_TAG_LIST_TENSOR = 9,
  EM_TAG_LIST_SCALAR = 10,
  EM_TAG_LIST_OPTIONAL_TENSOR = 11
} em_tag;

struct em_evalue;

/*
 * A list payload.
 *  - LIST_INT: `items` are boxed Int values (SymInts may change at run time);
 *    `ints` is a cache of n int64_t refreshed by em_evalue_int_list().
 *  - LIST_TENSOR / LIST_OPTIONAL_TENSOR: `items` point at Tensor values (NULL = None).
 *  - LIST_DOUBLE: `doubles` (n). LIST_BOOL: `bools` (n bytes, 0/1).
 */
typedef struct em_list {
  struct em_evalue **items;
  union {
    int64_t *ints;
    const double *doubles;
    const uint8_t *bools;
  } u;
  size_t n;
} em_list;

/* A tagged value: the argument and result type of every kernel and instruction. */
typedef struct em_evalue {
  union {
    int64_t i;
    double d;
    bool b;
    em_tensor *tensor;
    struct {
      const char *ptr;
      size_t len;
    } str;
    em_list list;
  } u;
  uint32_t tag; /* em_tag */
} em_evalue;

/* Returns the tensor of `v`, or NULL when `v` is not a Tensor. */
static inline em_tensor *em_evalue_tensor(const em_evalue *v) {
  return (v && v->tag == EM_TAG_TENSOR) ? v->u.tensor : NULL;
}

/*
 * Returns the int64 items of a LIST_INT value, refreshing its cache from the
 * boxed Int values; `n_out` receives the count. NULL if `v` is not an int list
 * or an item is not an Int.
 */
const int64_t *em_evalue_int_list(em_evalue *v, size_t *n_out);

/* Scalar as double (Int, Double or Bool), with `ok` false for other tags. */
double em_evalue_to_double(const em_evalue *v, bool *ok);

#ifdef __cplusplus
}
#endif

#endif /* EMBER_TENSOR_H */
