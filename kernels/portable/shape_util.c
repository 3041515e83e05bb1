/*
 * shape_util.c — strided copies, casts, iterators and argument readers for
 * the shape, copy and indexing kernels (see shape_util.h).
 *
 * em_shape_copy is the workhorse: it simplifies the box (drops size-1 dims,
 * merges dims that are contiguous in both operands) and then moves rows with
 * memmove when both inner strides are 1, or with a typed loop per element size
 * (memmove: an output may be its very input, docs/runtime-aliasing.md).
 */
#include "portable/shape_util.h"

/* Drops size-1 dims and merges adjacent dims contiguous in both operands; returns the new rank. */
static int32_t simplify(int64_t *sz, int64_t *ds, int64_t *ss, const int64_t *sizes,
                        const int64_t *dst_strides, const int64_t *src_strides, int32_t dim) {
  int32_t n = 0;
  for (int32_t d = 0; d < dim; d++) {
    if (sizes[d] == 1) continue;
    if (n > 0 && ds[n - 1] == dst_strides[d] * sizes[d] && ss[n - 1] == src_strides[d] * sizes[d]) {
      sz[n - 1] *= sizes[d];
      ds[n - 1] = dst_strides[d];
      ss[n - 1] = src_strides[d];
      continue;
    }
    sz[n] = sizes[d];
    ds[n] = dst_strides[d];
    ss[n] = src_strides[d];
    n++;
  }
  return n;
}

/* Copies one row of n elements with strides dstr/sstr (in elements). */
static void copy_row(char *dst, int64_t dstr, const char *src, int64_t sstr, int64_t n,
                     size_t elsize) {
  if (dstr == 1 && sstr == 1) {
    memmove(dst, src, (size_t)n * elsize);
    return;
  }
  if (dstr == 1 && sstr == 0 && elsize == 4) { /* expand of a 4-byte value: a fill */
    uint32_t v, *d = (uint32_t *)(void *)dst;
    memcpy(&v, src, 4);
    for (int64_t i = 0; i < n; i++) d[i] = v;
    return;
  }
  switch (elsize) {
  case 1:
    for (int64_t i = 0; i < n; i++) dst[i * dstr] = src[i * sstr];
    break;
  case 2: {
    uint16_t *d = (uint16_t *)(void *)dst;
    const uint16_t *s = (const uint16_t *)(const void *)src;
    for (int64_t i = 0; i < n; i++) d[i * dstr] = s[i * sstr];
    break;
  }
  case 4: {
    uint32_t *d = (uint32_t *)(void *)dst;
    const uint32_t *s = (const uint32_t *)(const void *)src;
    for (int64_t i = 0; i < n; i++) d[i * dstr] = s[i * sstr];
    break;
  }
  case 8: {
    uint64_t *d = (uint64_t *)(void *)dst;
    const uint64_t *s = (const uint64_t *)(const void *)src;
    for (int64_t i = 0; i < n; i++) d[i * dstr] = s[i * sstr];
    break;
  }
  default: {
    int64_t db = dstr * (int64_t)elsize, sb = sstr * (int64_t)elsize;
    for (int64_t i = 0; i < n; i++) memmove(dst + i * db, src + i * sb, elsize);
    break;
  }
  }
}

/* Copies the 2-D box [a, b] with strides (da, db) / (sa, sb) in 32x32 tiles (cache-friendly
 * transposes). */
#define EM_SHAPE_TILE 32
#define TILE_LOOP(T)                                                                               \
  do {                                                                                             \
    T *d_ = (T *)dst;                                                                              \
    const T *s_ = (const T *)src;                                                                  \
    for (int64_t i = i0; i < i1; i++)                                                              \
      for (int64_t j = j0; j < j1; j++) d_[i * da + j * db] = s_[i * sa + j * sb];                 \
  } while (0)
static void copy_tile2d(void *dst, int64_t da, int64_t db, const void *src, int64_t sa, int64_t sb,
                        int64_t a, int64_t b, size_t elsize) {
  for (int64_t i0 = 0; i0 < a; i0 += EM_SHAPE_TILE) {
    int64_t i1 = i0 + EM_SHAPE_TILE < a ? i0 + EM_SHAPE_TILE : a;
    for (int64_t j0 = 0; j0 < b; j0 += EM_SHAPE_TILE) {
      int64_t j1 = j0 + EM_SHAPE_TILE < b ? j0 + EM_SHAPE_TILE : b;
      switch (elsize) {
      case 1: TILE_LOOP(uint8_t); break;
      case 2: TILE_LOOP(uint16_t); break;
      case 4: TILE_LOOP(uint32_t); break;
      case 8: TILE_LOOP(uint64_t); break;
      default:
        for (int64_t i = i0; i < i1; i++)
          for (int64_t j = j0; j < j1; j++)
            memmove((char *)dst + (i * da + j * db) * (int64_t)elsize,
                    (const char *)src + (i * sa + j * sb) * (int64_t)elsize, elsize);
      }
    }
  }
}
#undef TILE_LOOP

/*
 * When exactly one operand is contiguous in the innermost dim and the other
 * has its unit stride on another dim j (a transpose), moves j next to the
 * innermost dim so that copy_tile2d can walk both in tiles. Returns true if
 * the box (already simplified, n >= 2) should be tiled.
 */
static bool plan_tiles(int64_t *sz, int64_t *ds, int64_t *ss, int32_t n) {
  const int64_t *other = ds[n - 1] == 1 ? ss : ss[n - 1] == 1 ? ds : NULL;
  if (!other || other[n - 1] == 1) return false;
  int32_t j = -1;
  for (int32_t d = 0; d < n - 1; d++)
    if (other[d] == 1) j = d;
  if (j < 0 || sz[j] < 8 || sz[n - 1] < 8) return false;
  int64_t a = sz[j], b = ds[j], c = ss[j];
  for (int32_t d = j; d < n - 2; d++) {
    sz[d] = sz[d + 1];
    ds[d] = ds[d + 1];
    ss[d] = ss[d + 1];
  }
  sz[n - 2] = a;
  ds[n - 2] = b;
  ss[n - 2] = c;
  return true;
}

void em_shape_copy(void *dst, const int64_t *dst_strides, const void *src,
                   const int64_t *src_strides, const int64_t *sizes, int32_t dim, size_t elsize) {
  int64_t sz[EM_SHAPE_COPY_MAX_DIM], ds[EM_SHAPE_COPY_MAX_DIM], ss[EM_SHAPE_COPY_MAX_DIM];
  for (int32_t d = 0; d < dim; d++)
    if (sizes[d] == 0) return;
  int32_t n = simplify(sz, ds, ss, sizes, dst_strides, src_strides, dim);
  if (dst == src) { /* an elided view (out aliases self): nothing to move when layouts agree */
    bool same = true;
    for (int32_t d = 0; d < n; d++) same = same && ds[d] == ss[d];
    if (same) return;
  }
  if (n == 0) {
    memmove(dst, src, elsize);
    return;
  }
  bool tiled = n >= 2 && plan_tiles(sz, ds, ss, n);
  int32_t inner = tiled ? 2 : 1; /* dims handled per step of the outer counter */
  int64_t idx[EM_SHAPE_COPY_MAX_DIM] = {0};
  int64_t rows = em_shape_numel(sz, n - inner);
  int64_t doff = 0, soff = 0;
  int64_t eb = (int64_t)elsize;
  for (int64_t r = 0; r < rows; r++) {
    if (tiled)
      copy_tile2d((char *)dst + doff * eb, ds[n - 2], ds[n - 1], (const char *)src + soff * eb,
                  ss[n - 2], ss[n - 1], sz[n - 2], sz[n - 1], elsize);
    else
      copy_row((char *)dst + doff * eb, ds[n - 1], (const char *)src + soff * eb, ss[n - 1],
               sz[n - 1], elsize);
    for (int32_t d = n - inner - 1; d >= 0; d--) {
      doff += ds[d];
      soff += ss[d];
      if (++idx[d] < sz[d]) break;
      doff -= ds[d] * sz[d];
      soff -= ss[d] * sz[d];
      idx[d] = 0;
    }
  }
}

void em_shape_cast_elem(void *dst, int ddt, const void *src, int sdt) {
  if (ddt == sdt) {
    memmove(dst, src, em_dtype_size(ddt));
  } else if (!em_dtype_is_float(ddt) && !em_dtype_is_float(sdt)) {
    em_store_i64(dst, ddt, 0, em_load_i64(src, sdt, 0));
  } else {
    em_store_f64(dst, ddt, 0, em_load_f64(src, sdt, 0));
  }
}

void em_shape_copy_cast(void *dst, int dst_dtype, const int64_t *dst_strides, const void *src,
                        int src_dtype, const int64_t *src_strides, const int64_t *sizes,
                        int32_t dim) {
  if (dst_dtype == src_dtype) {
    em_shape_copy(dst, dst_strides, src, src_strides, sizes, dim, em_dtype_size(dst_dtype));
    return;
  }
  int64_t n = em_shape_numel(sizes, dim);
  if (n == 0) return;
  size_t de = em_dtype_size(dst_dtype), se = em_dtype_size(src_dtype);
  em_shape_iter it;
  em_shape_iter_init(&it, sizes, dim);
  em_shape_iter_add(&it, dst_strides);
  em_shape_iter_add(&it, src_strides);
  for (int64_t i = 0; i < n; i++, em_shape_iter_next(&it))
    em_shape_cast_elem(em_shape_at(dst, it.off[0], de), dst_dtype, em_shape_at(src, it.off[1], se),
                       src_dtype);
}

bool em_shape_is_dense(const em_tensor *t) {
  int64_t s = 1;
  for (int32_t d = t->dim - 1; d >= 0; d--) {
    if (t->sizes[d] != 1 && t->strides[d] != s) return false;
    s *= t->sizes[d];
  }
  return true;
}

void em_shape_copy_flat(em_tensor *dst, const em_tensor *src) {
  size_t es = em_dtype_size(src->dtype);
  if (src->numel == 0) return;
  if (em_shape_is_dense(src)) {
    /* Re-view src (row-major dense) with dst's sizes. */
    int64_t st[EM_MAX_DIM];
    int64_t s = 1;
    for (int32_t d = dst->dim - 1; d >= 0; d--) {
      st[d] = s;
      s *= dst->sizes[d];
    }
    em_shape_copy(dst->data, dst->strides, src->data, st, dst->sizes, dst->dim, es);
    return;
  }
  if (em_shape_is_dense(dst)) {
    int64_t st[EM_MAX_DIM];
    int64_t s = 1;
    for (int32_t d = src->dim - 1; d >= 0; d--) {
      st[d] = s;
      s *= src->sizes[d];
    }
    em_shape_copy(dst->data, st, src->data, src->strides, src->sizes, src->dim, es);
    return;
  }
  em_shape_iter a, b;
  em_shape_iter_init(&a, dst->sizes, dst->dim);
  em_shape_iter_add(&a, dst->strides);
  em_shape_iter_init(&b, src->sizes, src->dim);
  em_shape_iter_add(&b, src->strides);
  for (int64_t i = 0; i < src->numel; i++) {
    memmove(em_shape_at(dst->data, a.off[0], es), em_shape_at(src->data, b.off[0], es), es);
    em_shape_iter_next(&a);
    em_shape_iter_next(&b);
  }
}

void em_shape_copy_tensor(em_tensor *dst, const em_tensor *src) {
  if (dst->data == src->data) {
    bool same = true;
    for (int32_t d = 0; d < dst->dim; d++)
      if (dst->sizes[d] > 1 && dst->strides[d] != src->strides[d]) same = false;
    if (same) return;
  }
  em_shape_copy(dst->data, dst->strides, src->data, src->strides, src->sizes, src->dim,
                em_dtype_size(src->dtype));
}

bool em_shape_can_cast(int from, int to) {
  if (em_dtype_is_float(from) && !em_dtype_is_float(to)) return false;
  if (from != EM_DTYPE_BOOL && to == EM_DTYPE_BOOL) return false;
  return true;
}

/* ATen's slice bounds: clamps start/end into [0, n]; returns the output length. */
int64_t em_shape_slice_bounds(int64_t n, bool has_start, int64_t start, bool has_end, int64_t end,
                              int64_t step, int64_t *start_out) {
  int64_t s = has_start ? start : 0;
  int64_t e = has_end ? end : INT64_MAX;
  if (s < 0) s += n;
  if (e < 0) e += n;
  if (s < 0)
    s = 0;
  else if (s > n)
    s = n;
  if (e < s)
    e = s;
  else if (e > n)
    e = n;
  *start_out = s;
  /* ATen's (e - s + step - 1) / step in int64, which wraps for a step near INT64_MAX (eager
   * gives 0 for x[1:5:2**63-1]); computed in uint64 so the wrap is defined, not overflow. */
  uint64_t num = (uint64_t)(e - s) + (uint64_t)step - 1u;
  int64_t wrapped = num > (uint64_t)INT64_MAX ? -(int64_t)(UINT64_MAX - num) - 1 : (int64_t)num;
  return wrapped / step;
}

bool em_shape_same_sizes(const em_tensor *a, const em_tensor *b) {
  if (a->dim != b->dim) return false;
  for (int32_t d = 0; d < a->dim; d++)
    if (a->sizes[d] != b->sizes[d]) return false;
  return true;
}

int64_t em_shape_numel(const int64_t *sizes, int32_t dim) {
  int64_t n = 1;
  for (int32_t d = 0; d < dim; d++) n *= sizes[d];
  return n;
}

bool em_shape_int_list(em_evalue *v, const int64_t **out, size_t *n, size_t cap) {
  if (!v || v->tag != EM_TAG_LIST_INT) return false;
  const int64_t *p = em_evalue_int_list(v, n);
  if (!p && *n != 0) return false;
  if (*n > cap) return false;
  *out = p;
  return true;
}

bool em_shape_opt_int(const em_evalue *v, int64_t dflt, int64_t *out) {
  if (v && v->tag == EM_TAG_NONE) {
    *out = dflt;
    return true;
  }
  return em_arg_int(v, out);
}

bool em_shape_tensor_list(const em_evalue *v, em_evalue ***items, size_t *n) {
  if (!v) return false;
  bool empty_list =
      (v->tag == EM_TAG_LIST_INT || v->tag == EM_TAG_LIST_DOUBLE || v->tag == EM_TAG_LIST_BOOL) &&
      v->u.list.n == 0;
  if (empty_list) { /* an empty list carries no element type */
    *items = NULL;
    *n = 0;
    return true;
  }
  if (v->tag != EM_TAG_LIST_TENSOR && v->tag != EM_TAG_LIST_OPTIONAL_TENSOR) return false;
  *items = v->u.list.items;
  *n = v->u.list.n;
  return true;
}

bool em_shape_str_eq(const em_evalue *v, const char *s) {
  if (!v || v->tag != EM_TAG_STRING) return false;
  size_t n = strlen(s);
  return v->u.str.len == n && memcmp(v->u.str.ptr, s, n) == 0;
}

void em_shape_iter_init(em_shape_iter *it, const int64_t *sizes, int32_t dim) {
  it->dim = dim;
  it->n_ops = 0;
  for (int32_t d = 0; d < dim; d++) {
    it->sizes[d] = sizes[d];
    it->idx[d] = 0;
  }
}

int32_t em_shape_iter_add(em_shape_iter *it, const int64_t *strides) {
  int32_t k = it->n_ops++;
  for (int32_t d = 0; d < it->dim; d++) it->strides[k][d] = strides ? strides[d] : 0;
  it->off[k] = 0;
  return k;
}

void em_shape_iter_next(em_shape_iter *it) {
  for (int32_t d = it->dim - 1; d >= 0; d--) {
    for (int32_t k = 0; k < it->n_ops; k++) it->off[k] += it->strides[k][d];
    if (++it->idx[d] < it->sizes[d]) return;
    for (int32_t k = 0; k < it->n_ops; k++) it->off[k] -= it->strides[k][d] * it->sizes[d];
    it->idx[d] = 0;
  }
}
