/*
 * nn_util.h — helpers shared by the neural-network kernels (nn_*.c, quant_*.c,
 * llama_*.c): int-list arguments with ATen's defaulting rules, a strided
 * 2-D float matrix, and the f32 GEMM every compute-heavy kernel goes through.
 *
 *     nn_mat a = {x, rows_stride, cols_stride}, b = ..., c = ...;
 *     EM_KTRY(nn_sgemm(ctx, m, n, k, a, b, c, false));    // c = a @ b
 *
 * Matrices are views (pointer + row stride + column stride, in elements), so a
 * transposed or channels-last operand needs no copy: the GEMM packs its inputs.
 */
#ifndef EMBER_KERNELS_PORTABLE_NN_UTIL_H
#define EMBER_KERNELS_PORTABLE_NN_UTIL_H

#include "portable/kutil.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A strided 2-D float view: element (i, j) is p[i * rs + j * cs]. */
typedef struct nn_mat {
  float *p;
  int64_t rs;
  int64_t cs;
} nn_mat;

/*
 * c = a @ b (accumulate false) or c += a @ b (accumulate true), with a [m, k],
 * b [k, n], c [m, n]. c must not alias a or b. Packs operands into temp memory
 * and runs on ctx->pool. Returns EM_ERR_MEMORY_ALLOCATION_FAILED without scratch.
 */
em_status nn_sgemm(em_kernel_ctx *ctx, int64_t m, int64_t n, int64_t k, nn_mat a, nn_mat b,
                   nn_mat c, bool accumulate);

/* A strided 2-D view of any dtype: element (i, j) is at index off + i * rs + j * cs of p. */
typedef struct nn_view {
  void *p;
  int64_t off;
  int64_t rs;
  int64_t cs;
} nn_view;

/*
 * c = a @ b for a, b, c of one dtype `dtype` (real dtypes): f32 through
 * nn_sgemm, f16/bf16 converted to f32 (accumulating in f32, as ATen's CPU
 * path), f64 in double, integers in wrapping 64-bit arithmetic.
 */
em_status nn_mm_any(em_kernel_ctx *ctx, int dtype, int64_t m, int64_t n, int64_t k, nn_view a,
                    nn_view b, nn_view c);

/*
 * Reads an int-list argument of an op with `n` spatial dims (kernel_size,
 * stride, padding, dilation): a list of n values is taken as is, a list of one
 * value is repeated, an empty list gives `dflt` (NULL dflt: error). Values are
 * stored in out[0..n). Returns false on a wrong tag or length.
 */
bool nn_int_list(em_evalue *v, int32_t n, const int64_t *dflt, int64_t *out);

/* Scalar argument conversion helpers that accept None (returning `dflt`). */
bool nn_opt_double(const em_evalue *v, double dflt, double *out);
bool nn_opt_int(const em_evalue *v, int64_t dflt, int64_t *out);

/* Returns true when every tensor in ts[0..n) (NULL entries skipped) has dtype `d`. */
bool nn_same_dtype(em_tensor *const *ts, int n, int d);

/* True when t's strides are exactly row-major for its sizes (size-1 dims ignored). */
bool nn_is_contiguous(const em_tensor *t);

/* Allocates `n` elements of `size` bytes from the kernel's temp allocator (64-byte aligned). */
void *nn_temp(em_kernel_ctx *ctx, int64_t n, size_t size);

/*
 * Scratch stack discipline: nn_temp_release(ctx, nn_temp_mark(ctx)) frees every
 * temp allocation made after the mark (the temp allocator is a bump arena), so
 * helpers called in loops (GEMM per batch, group or head) do not accumulate
 * scratch over one instruction. Only release what the caller no longer uses.
 */
size_t nn_temp_mark(em_kernel_ctx *ctx);

/*
 * How many units of `unit_bytes` to allocate for a chunked buffer: `want`, or
 * fewer so the buffer takes at most half of the scratch left (the rest stays
 * for the GEMM's packing buffers); at least 1.
 */
int64_t nn_temp_fit(em_kernel_ctx *ctx, int64_t unit_bytes, int64_t want);
void nn_temp_release(em_kernel_ctx *ctx, size_t mark);

/* Logs and returns EM_ERR_MEMORY_ALLOCATION_FAILED when `p` is NULL. */
#define NN_CHECK_ALLOC(ctx, p)                                                                     \
  do {                                                                                             \
    if (!(p)) {                                                                                    \
      em_kernel_fail((ctx), __FILE__, __LINE__, "out of temp memory");                             \
      return EM_ERR_MEMORY_ALLOCATION_FAILED;                                                      \
    }                                                                                              \
  } while (0)

/* Validates that `t` is a tensor (non-NULL) whose data is present when it has elements. */
#define NN_CHECK_TENSOR(ctx, t, name)                                                              \
  EM_KCHECK(ctx, (t) && ((t)->numel == 0 || (t)->data), "%s must be a tensor with data", name)

#ifdef __cplusplus
}
#endif

#endif /* EMBER_KERNELS_PORTABLE_NN_UTIL_H */
