/*
 * kutil.h — shared helpers for portable kernels: argument access, error
 * checks, dtype conversion (including f16/bf16), type promotion, broadcasting.
 *
 * Portable kernels are the correctness oracle: they favour exact ATen
 * semantics over speed. The generic element path loads every element as a
 * double (floating dtypes) or int64 (integral dtypes and bool), computes, and
 * stores with the destination dtype's rounding: for +, -, *, /, sqrt this is
 * exactly the single-precision result, and integer math stays exact.
 *
 *     em_tensor *a = EM_ARG_TENSOR(args, 0), *out = EM_ARG_TENSOR(args, 3);
 *     EM_KCHECK(ctx, a && out, "expected tensors");
 *     double v = em_load_f64(a->data, a->dtype, i);
 *     em_store_f64(out->data, out->dtype, i, v * 2.0);
 */
#ifndef EMBER_KERNELS_PORTABLE_KUTIL_H
#define EMBER_KERNELS_PORTABLE_KUTIL_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ember/kernel.h"
#include "ember/platform.h"
#include "ember/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Dtype masks used in ops.def registrations (Python's oplist.py reads these names). */
#define EM_DT_U8     EM_DTYPE_BIT(EM_DTYPE_U8)
#define EM_DT_I8     EM_DTYPE_BIT(EM_DTYPE_I8)
#define EM_DT_I16    EM_DTYPE_BIT(EM_DTYPE_I16)
#define EM_DT_I32    EM_DTYPE_BIT(EM_DTYPE_I32)
#define EM_DT_I64    EM_DTYPE_BIT(EM_DTYPE_I64)
#define EM_DT_F16    EM_DTYPE_BIT(EM_DTYPE_F16)
#define EM_DT_BF16   EM_DTYPE_BIT(EM_DTYPE_BF16)
#define EM_DT_F32    EM_DTYPE_BIT(EM_DTYPE_F32)
#define EM_DT_F64    EM_DTYPE_BIT(EM_DTYPE_F64)
#define EM_DT_BOOL   EM_DTYPE_BIT(EM_DTYPE_BOOL)
#define EM_DT_FLOATS (EM_DT_F16 | EM_DT_BF16 | EM_DT_F32 | EM_DT_F64)
#define EM_DT_INTS   (EM_DT_U8 | EM_DT_I8 | EM_DT_I16 | EM_DT_I32 | EM_DT_I64)
#define EM_DT_REALS  (EM_DT_FLOATS | EM_DT_INTS)
#define EM_DT_ALL    (EM_DT_REALS | EM_DT_BOOL)

/* Logs "<op>: <message>" and returns EM_ERR_INVALID_ARGUMENT when `cond` is false. */
#define EM_KCHECK(ctx, cond, ...)                                                                  \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      em_kernel_fail((ctx), __FILE__, __LINE__, __VA_ARGS__);                                      \
      return EM_ERR_INVALID_ARGUMENT;                                                              \
    }                                                                                              \
  } while (0)

/* Returns the status of `expr` when it is not EM_OK. */
#define EM_KTRY(expr)                                                                              \
  do {                                                                                             \
    em_status st_ = (expr);                                                                        \
    if (st_ != EM_OK) return st_;                                                                  \
  } while (0)

/* Argument accessors (NULL/0 when the tag differs; check before use). */
#define EM_ARG_TENSOR(args, i)  em_evalue_tensor((args)[i])
#define EM_ARG_IS_NONE(args, i) ((args)[i]->tag == EM_TAG_NONE)

/* Logs an error message prefixed with the op name (used by EM_KCHECK). */
void em_kernel_fail(em_kernel_ctx *ctx, const char *file, int line, const char *fmt, ...)
/* Format checking on hosts; on arm-none-eabi uint32_t is `long`, and %u for it is fine there. */
#if defined(__GNUC__) && !defined(__arm__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

/* Int argument: *out = value; false when the value is not an Int. */
bool em_arg_int(const em_evalue *v, int64_t *out);
/* Scalar argument (Int/Double/Bool) as double. */
bool em_arg_double(const em_evalue *v, double *out);
/* Bool argument. */
bool em_arg_bool(const em_evalue *v, bool *out);
/* True when a Scalar argument is integral (Int or Bool), false for Double. */
bool em_scalar_is_integral(const em_evalue *v);

/* f16 / bf16 conversions (round to nearest even). */
float em_f16_to_f32(uint16_t h);
uint16_t em_f32_to_f16(float f);
float em_bf16_to_f32(uint16_t b);
uint16_t em_f32_to_bf16(float f);

/* True for f16, bf16, f32, f64. */
bool em_dtype_is_float(int dtype);
/* True for u8, i8, i16, i32, i64 (not bool). */
bool em_dtype_is_int(int dtype);

/* Loads element i of a buffer of `dtype` as a double / as an int64 (floats truncate). */
double em_load_f64(const void *data, int dtype, int64_t i);
int64_t em_load_i64(const void *data, int dtype, int64_t i);
/* Stores v into element i with the dtype's conversion (float→int truncates, →bool is v != 0). */
void em_store_f64(void *data, int dtype, int64_t i, double v);
void em_store_i64(void *data, int dtype, int64_t i, int64_t v);

/* torch.promote_types(a, b) for the real dtypes and bool; -1 when undefined. */
int em_promote_types(int a, int b);

/*
 * Result dtype of `tensor (op) scalar`, as torch.result_type: the tensor's
 * dtype unless the scalar is of a higher category (bool < int < float), in which
 * case the default dtype of that category (i64 / f32).
 */
int em_promote_with_scalar(int tensor_dtype, bool scalar_is_float, bool scalar_is_bool);

/* Normalizes a possibly negative dim against `rank` (rank 0 accepts 0 and -1). false if out of
 * range. */
bool em_norm_dim(int64_t dim, int32_t rank, int32_t *out);

/*
 * Broadcasts shapes a and b into out_sizes; returns false when they do not
 * broadcast. out_dim = max(a_dim, b_dim).
 */
bool em_broadcast_shapes(const int64_t *a, int32_t a_dim, const int64_t *b, int32_t b_dim,
                         int64_t *out_sizes, int32_t *out_dim);

/* Resizes `out` to sizes, logging a clear error naming the op when it cannot. */
em_status em_resize_out(em_kernel_ctx *ctx, em_tensor *out, const int64_t *sizes, int32_t dim);

/*
 * Element offsets of `t` (in elements, honoring strides) for the linear index
 * `i` of an output of shape out_sizes[out_dim], broadcasting t's dims (aligned
 * from the right; size-1 dims repeat).
 */
int64_t em_bcast_offset(const em_tensor *t, const int64_t *out_sizes, int32_t out_dim, int64_t i);

/* Offset of contiguous (row-major logical) index i in a tensor with arbitrary strides. */
int64_t em_strided_offset(const em_tensor *t, int64_t i);

#ifdef __cplusplus
}
#endif

#endif /* EMBER_KERNELS_PORTABLE_KUTIL_H */
