/*
 * kutil.c — shared helpers for portable kernels (see kutil.h).
 */
#include "portable/kutil.h"

#include <stdarg.h>

void em_kernel_fail(em_kernel_ctx *ctx, const char *file, int line, const char *fmt, ...) {
#if !EM_LOG_ENABLED
  (void)ctx, (void)file, (void)line, (void)fmt;
#else
  char fmt2[256];
  const char *op = ctx && ctx->op_name ? ctx->op_name : "kernel";
  size_t n = 0;
  for (const char *p = op; *p && n < 120; p++) fmt2[n++] = *p == '%' ? '_' : *p;
  fmt2[n++] = ':';
  fmt2[n++] = ' ';
  for (const char *p = fmt; *p && n < sizeof fmt2 - 1; p++) fmt2[n++] = *p;
  fmt2[n] = '\0';
  va_list ap;
  va_start(ap, fmt);
  em_logv(EM_LOG_ERROR, file, line, fmt2, ap);
  va_end(ap);
#endif
}

bool em_arg_int(const em_evalue *v, int64_t *out) {
  if (!v || v->tag != EM_TAG_INT) return false;
  *out = v->u.i;
  return true;
}

bool em_arg_double(const em_evalue *v, double *out) {
  bool ok;
  *out = em_evalue_to_double(v, &ok);
  return ok;
}

bool em_arg_bool(const em_evalue *v, bool *out) {
  if (!v || v->tag != EM_TAG_BOOL) return false;
  *out = v->u.b;
  return true;
}

bool em_scalar_is_integral(const em_evalue *v) {
  return v && (v->tag == EM_TAG_INT || v->tag == EM_TAG_BOOL);
}

float em_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else { /* subnormal: renormalize */
      int e = -1;
      do {
        e++;
        man <<= 1;
      } while ((man & 0x400u) == 0);
      bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13);
  } else {
    bits = sign | ((exp + 112u) << 23) | (man << 13);
  }
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

uint16_t em_f32_to_f16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) /* inf or nan */
    return (uint16_t)(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0));
  if (absx >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* overflow after rounding */
  if (absx < 0x38800000u) {                                   /* subnormal or zero in f16 */
    if (absx < 0x33000000u) return (uint16_t)sign;            /* rounds to zero (<= 2^-25) */
    uint32_t e = absx >> 23;
    uint32_t m = (absx & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e; /* 14 + (113 - e) - ... */
    uint32_t r = m >> (shift - 0);
    /* value = m * 2^(e-150); f16 subnormal unit = 2^-24 -> shift = 126 - e */
    uint32_t rem = m & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1u))) r++;
    return (uint16_t)(sign | r);
  }
  uint32_t r = absx + 0xfffu + ((absx >> 13) & 1u); /* round to nearest even */
  r -= 0x38000000u;                                 /* rebias 127 -> 15 */
  return (uint16_t)(sign | (r >> 13));
}

float em_bf16_to_f32(uint16_t b) {
  uint32_t bits = (uint32_t)b << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

uint16_t em_f32_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u); /* quiet nan */
  x += 0x7fffu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
}

bool em_dtype_is_float(int d) {
  return d == EM_DTYPE_F16 || d == EM_DTYPE_BF16 || d == EM_DTYPE_F32 || d == EM_DTYPE_F64;
}

bool em_dtype_is_int(int d) {
  return d == EM_DTYPE_U8 || d == EM_DTYPE_I8 || d == EM_DTYPE_I16 || d == EM_DTYPE_I32 ||
         d == EM_DTYPE_I64;
}

double em_load_f64(const void *data, int dtype, int64_t i) {
  switch (dtype) {
  case EM_DTYPE_F32: return ((const float *)data)[i];
  case EM_DTYPE_F64: return ((const double *)data)[i];
  case EM_DTYPE_F16: return em_f16_to_f32(((const uint16_t *)data)[i]);
  case EM_DTYPE_BF16: return em_bf16_to_f32(((const uint16_t *)data)[i]);
  case EM_DTYPE_U8: return ((const uint8_t *)data)[i];
  case EM_DTYPE_I8: return ((const int8_t *)data)[i];
  case EM_DTYPE_I16: return ((const int16_t *)data)[i];
  case EM_DTYPE_I32: return ((const int32_t *)data)[i];
  case EM_DTYPE_I64: return (double)((const int64_t *)data)[i];
  case EM_DTYPE_BOOL: return ((const uint8_t *)data)[i] ? 1.0 : 0.0;
  default: return 0.0;
  }
}

int64_t em_load_i64(const void *data, int dtype, int64_t i) {
  switch (dtype) {
  case EM_DTYPE_U8: return ((const uint8_t *)data)[i];
  case EM_DTYPE_I8: return ((const int8_t *)data)[i];
  case EM_DTYPE_I16: return ((const int16_t *)data)[i];
  case EM_DTYPE_I32: return ((const int32_t *)data)[i];
  case EM_DTYPE_I64: return ((const int64_t *)data)[i];
  case EM_DTYPE_BOOL: return ((const uint8_t *)data)[i] ? 1 : 0;
  default: {
    double v = em_load_f64(data, dtype, i);
    if (v != v) return 0;
    if (v >= 9.2233720368547758e18) return INT64_MAX;
    if (v <= -9.2233720368547758e18) return INT64_MIN;
    return (int64_t)v;
  }
  }
}

/* float -> integer conversion as C's cast does for in-range values; out of range wraps via int64.
 */
static int64_t f64_to_i64(double v) {
  if (v != v) return 0;
  if (v >= 9.2233720368547758e18) return INT64_MIN; /* what x86 cvttsd2si gives */
  if (v <= -9.2233720368547758e18) return INT64_MIN;
  return (int64_t)v;
}

void em_store_f64(void *data, int dtype, int64_t i, double v) {
  switch (dtype) {
  case EM_DTYPE_F32: ((float *)data)[i] = (float)v; break;
  case EM_DTYPE_F64: ((double *)data)[i] = v; break;
  case EM_DTYPE_F16: ((uint16_t *)data)[i] = em_f32_to_f16((float)v); break;
  case EM_DTYPE_BF16: ((uint16_t *)data)[i] = em_f32_to_bf16((float)v); break;
  case EM_DTYPE_BOOL: ((uint8_t *)data)[i] = v != 0.0; break;
  default: em_store_i64(data, dtype, i, f64_to_i64(v)); break;
  }
}

void em_store_i64(void *data, int dtype, int64_t i, int64_t v) {
  switch (dtype) {
  case EM_DTYPE_U8: ((uint8_t *)data)[i] = (uint8_t)v; break;
  case EM_DTYPE_I8: ((int8_t *)data)[i] = (int8_t)v; break;
  case EM_DTYPE_I16: ((int16_t *)data)[i] = (int16_t)v; break;
  case EM_DTYPE_I32: ((int32_t *)data)[i] = (int32_t)v; break;
  case EM_DTYPE_I64: ((int64_t *)data)[i] = v; break;
  case EM_DTYPE_BOOL: ((uint8_t *)data)[i] = v != 0; break;
  default: em_store_f64(data, dtype, i, (double)v); break;
  }
}

/* Index of a dtype in the promotion lattice, -1 if not promotable. */
static int lattice_index(int d) {
  switch (d) {
  case EM_DTYPE_U8: return 0;
  case EM_DTYPE_I8: return 1;
  case EM_DTYPE_I16: return 2;
  case EM_DTYPE_I32: return 3;
  case EM_DTYPE_I64: return 4;
  case EM_DTYPE_F16: return 5;
  case EM_DTYPE_F32: return 6;
  case EM_DTYPE_F64: return 7;
  case EM_DTYPE_BOOL: return 8;
  case EM_DTYPE_BF16: return 9;
  default: return -1;
  }
}

int em_promote_types(int a, int b) {
  enum {
    u1 = EM_DTYPE_U8,
    i1 = EM_DTYPE_I8,
    i2 = EM_DTYPE_I16,
    i4 = EM_DTYPE_I32,
    i8 = EM_DTYPE_I64,
    f2 = EM_DTYPE_F16,
    f4 = EM_DTYPE_F32,
    f8 = EM_DTYPE_F64,
    b1 = EM_DTYPE_BOOL,
    bf = EM_DTYPE_BF16
  };
  /* torch's promoteTypes table restricted to these dtypes (c10/core/ScalarType.cpp). */
  static const signed char table[10][10] = {
      /*        u1  i1  i2  i4  i8  f2  f4  f8  b1  bf */
      /* u1 */ {u1, i2, i2, i4, i8, f2, f4, f8, u1, bf},
      /* i1 */ {i2, i1, i2, i4, i8, f2, f4, f8, i1, bf},
      /* i2 */ {i2, i2, i2, i4, i8, f2, f4, f8, i2, bf},
      /* i4 */ {i4, i4, i4, i4, i8, f2, f4, f8, i4, bf},
      /* i8 */ {i8, i8, i8, i8, i8, f2, f4, f8, i8, bf},
      /* f2 */ {f2, f2, f2, f2, f2, f2, f4, f8, f2, f4},
      /* f4 */ {f4, f4, f4, f4, f4, f4, f4, f8, f4, f4},
      /* f8 */ {f8, f8, f8, f8, f8, f8, f8, f8, f8, f8},
      /* b1 */ {u1, i1, i2, i4, i8, f2, f4, f8, b1, bf},
      /* bf */ {bf, bf, bf, bf, bf, f4, f4, f8, bf, bf},
  };
  int ia = lattice_index(a), ib = lattice_index(b);
  if (ia < 0 || ib < 0) return -1;
  return table[ia][ib];
}

int em_promote_with_scalar(int tensor_dtype, bool scalar_is_float, bool scalar_is_bool) {
  if (scalar_is_float) return em_dtype_is_float(tensor_dtype) ? tensor_dtype : EM_DTYPE_F32;
  if (scalar_is_bool) return tensor_dtype;
  return tensor_dtype == EM_DTYPE_BOOL ? EM_DTYPE_I64 : tensor_dtype;
}

bool em_norm_dim(int64_t dim, int32_t rank, int32_t *out) {
  int64_t r = rank == 0 ? 1 : rank;
  if (dim < -r || dim >= r) return false;
  *out = (int32_t)(dim < 0 ? dim + r : dim);
  return true;
}

bool em_broadcast_shapes(const int64_t *a, int32_t a_dim, const int64_t *b, int32_t b_dim,
                         int64_t *out_sizes, int32_t *out_dim) {
  int32_t n = a_dim > b_dim ? a_dim : b_dim;
  for (int32_t i = 0; i < n; i++) {
    int64_t sa = i < n - a_dim ? 1 : a[i - (n - a_dim)];
    int64_t sb = i < n - b_dim ? 1 : b[i - (n - b_dim)];
    if (sa != sb && sa != 1 && sb != 1) return false;
    out_sizes[i] = sa == 1 ? sb : sa;
  }
  *out_dim = n;
  return true;
}

em_status em_resize_out(em_kernel_ctx *ctx, em_tensor *out, const int64_t *sizes, int32_t dim) {
  if (em_tensor_resize(out, sizes, dim) == EM_OK) return EM_OK;
  char want[160];
  size_t n = 0;
  want[n++] = '[';
  for (int32_t i = 0; i < dim && n < sizeof want - 24; i++) {
    int64_t v = sizes[i];
    char tmp[24];
    int k = 0;
    bool neg = v < 0;
    uint64_t u = neg ? (uint64_t)(-(v + 1)) + 1 : (uint64_t)v;
    do {
      tmp[k++] = (char)('0' + u % 10);
      u /= 10;
    } while (u);
    if (neg) tmp[k++] = '-';
    while (k) want[n++] = tmp[--k];
    if (i + 1 < dim) want[n++] = ',';
  }
  want[n++] = ']';
  want[n] = '\0';
  em_kernel_fail(ctx, __FILE__, __LINE__,
                 "cannot resize output (rank %d, capacity %lld elements, %s) to %s", (int)out->dim,
                 (long long)out->numel_bound, out->dynamism ? "dynamic" : "static", want);
  return EM_ERR_INVALID_ARGUMENT;
}

int64_t em_bcast_offset(const em_tensor *t, const int64_t *out_sizes, int32_t out_dim, int64_t i) {
  int64_t off = 0;
  for (int32_t d = out_dim - 1; d >= 0; d--) {
    int64_t idx = i % out_sizes[d];
    i /= out_sizes[d];
    int32_t td = d - (out_dim - t->dim);
    if (td >= 0 && t->sizes[td] != 1) off += idx * t->strides[td];
  }
  return off;
}

int64_t em_strided_offset(const em_tensor *t, int64_t i) {
  int64_t off = 0;
  for (int32_t d = t->dim - 1; d >= 0; d--) {
    int64_t s = t->sizes[d];
    if (s == 0) return 0;
    off += (i % s) * t->strides[d];
    i /= s;
  }
  return off;
}
