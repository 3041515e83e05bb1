/*
 * shape_util.h — helpers shared by the shape, copy and indexing kernels
 * (kernels/portable/shape_*.c, index_*.c).
 *
 * Nearly every op of this group is a byte move: the output is a strided view
 * of the input (permute, expand, slice, flip...) or a gathered one (index,
 * gather). So the kernels describe the source as a strided view over element
 * size and copy with em_shape_copy(), which works for every dtype (bool, f16,
 * bf16, complex...) without a dtype switch.
 *
 *     int64_t sizes[2] = {in->sizes[1], in->sizes[0]};
 *     int64_t sstr[2] = {in->strides[1], in->strides[0]};
 *     EM_KTRY(em_resize_out(ctx, out, sizes, 2));
 *     em_shape_copy(out->data, out->strides, in->data, sstr, sizes, 2, em_dtype_size(in->dtype));
 *
 * Strides are in elements and may be 0 (broadcast) or negative (flip).
 */
#ifndef EMBER_KERNELS_PORTABLE_SHAPE_UTIL_H
#define EMBER_KERNELS_PORTABLE_SHAPE_UTIL_H

#include "portable/kutil.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Index dtypes (int32 and int64). */
#define EM_DT_INDEX (EM_DT_I32 | EM_DT_I64)

/* Most dims em_shape_copy accepts (repeat splits each output dim in two). */
#define EM_SHAPE_COPY_MAX_DIM (2 * EM_MAX_DIM)

/*
 * Copies the `dim`-dimensional box `sizes` from src (strides src_strides) to
 * dst (strides dst_strides), elements of `elsize` bytes. Both pointers address
 * element [0, ..., 0]. Size-1 dims are dropped and contiguous runs merged, so
 * contiguous copies become one memcpy. dim may be 0 (one element), at most
 * EM_SHAPE_COPY_MAX_DIM. When dst == src with the same layout (a view the
 * exporter elided into shared memory) nothing is copied; other overlaps are
 * not supported.
 */
void em_shape_copy(void *dst, const int64_t *dst_strides, const void *src,
                   const int64_t *src_strides, const int64_t *sizes, int32_t dim, size_t elsize);

/*
 * As em_shape_copy, converting each element from src_dtype to dst_dtype with
 * ATen's cast rules (exact for integer→integer).
 */
void em_shape_copy_cast(void *dst, int dst_dtype, const int64_t *dst_strides, const void *src,
                        int src_dtype, const int64_t *src_strides, const int64_t *sizes,
                        int32_t dim);

/*
 * Copies all elements of `src` into `dst` in row-major logical order (a
 * reshape copy); both must have the same numel and dtype. Handles any strides.
 */
void em_shape_copy_flat(em_tensor *dst, const em_tensor *src);

/* Copies src into dst elementwise (same sizes and dtype, any strides); no-op when they alias. */
void em_shape_copy_tensor(em_tensor *dst, const em_tensor *src);

/*
 * Converts element 0 of src (dtype sdt) into element 0 of dst (dtype ddt), as
 * ATen's static_cast between scalar types.
 */
void em_shape_cast_elem(void *dst, int ddt, const void *src, int sdt);

/* True when ATen's canCast(from, to) holds (no float→int, no non-bool→bool). */
bool em_shape_can_cast(int from, int to);

/* True when t's strides are the dense row-major ones (size-1 dims ignored); dim order is not
 * trusted. */
bool em_shape_is_dense(const em_tensor *t);

/* True when a and b have the same rank and sizes. */
bool em_shape_same_sizes(const em_tensor *a, const em_tensor *b);

/*
 * ATen's slice bounds for a dim of size n: clamps start (default 0) and end
 * (default n) into [0, n]; *start_out gets the start; returns the length with `step` (> 0).
 */
int64_t em_shape_slice_bounds(int64_t n, bool has_start, int64_t start, bool has_end, int64_t end,
                              int64_t step, int64_t *start_out);

/* Product of sizes[0..dim) (1 for dim 0). */
int64_t em_shape_numel(const int64_t *sizes, int32_t dim);

/*
 * Reads the int list argument `v` into `out` (at most `cap` items); false when
 * `v` is not an int list or holds more than `cap` items.
 */
bool em_shape_int_list(em_evalue *v, const int64_t **out, size_t *n, size_t cap);

/* Optional int argument: None gives `dflt`; false when neither None nor Int. */
bool em_shape_opt_int(const em_evalue *v, int64_t dflt, int64_t *out);

/*
 * Tensor list argument (EM_TAG_LIST_TENSOR or LIST_OPTIONAL_TENSOR): returns
 * the items and count, or false when `v` is not a tensor list. An empty list of
 * any list tag counts as an empty tensor list.
 */
bool em_shape_tensor_list(const em_evalue *v, em_evalue ***items, size_t *n);

/* String argument: true when `v` is a string equal to `s`. */
bool em_shape_str_eq(const em_evalue *v, const char *s);

/*
 * A multi-index counter over `sizes` that keeps up to EM_SHAPE_ITER_MAX
 * element offsets (one per operand) in step. Iterates row-major, last dim fastest.
 *
 *     em_shape_iter it;
 *     em_shape_iter_init(&it, sizes, dim);
 *     em_shape_iter_add(&it, a->strides);    // operand 0
 *     for (int64_t i = 0; i < n; i++, em_shape_iter_next(&it)) use(it.off[0]);
 */
#define EM_SHAPE_ITER_MAX 4
typedef struct em_shape_iter {
  int64_t sizes[EM_MAX_DIM];
  int64_t idx[EM_MAX_DIM];
  int64_t strides[EM_SHAPE_ITER_MAX][EM_MAX_DIM];
  int64_t off[EM_SHAPE_ITER_MAX];
  int32_t dim;
  int32_t n_ops;
} em_shape_iter;

void em_shape_iter_init(em_shape_iter *it, const int64_t *sizes, int32_t dim);
/* Adds an operand with `strides` (NULL = all zero); returns its number. */
int32_t em_shape_iter_add(em_shape_iter *it, const int64_t *strides);
void em_shape_iter_next(em_shape_iter *it);

/* Pointer to element `off` of a buffer of `elsize`-byte elements. */
static inline char *em_shape_at(const void *base, int64_t off, size_t elsize) {
  return (char *)base + off * (int64_t)elsize;
}

/* Reads an index value (int32/int64/any int) at element offset `off` of `t`. */
static inline int64_t em_shape_index_at(const em_tensor *t, int64_t off) {
  return t->dtype == EM_DTYPE_I64 ? ((const int64_t *)t->data)[off]
                                  : em_load_i64(t->data, t->dtype, off);
}

#ifdef __cplusplus
}
#endif

#endif /* EMBER_KERNELS_PORTABLE_SHAPE_UTIL_H */
