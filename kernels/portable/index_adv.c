/*
 * index_adv.c — advanced (NumPy-style) indexing: index.Tensor_out,
 * index_put.out and index_put_.
 *
 * `indices` is a Tensor?[] over self's leading dims. An int32/int64 tensor
 * indexes one dim (negative values wrap); a bool/uint8 mask of rank k indexes
 * k dims and acts as the k coordinate lists of its true elements. The index
 * tensors broadcast together to a shape B. The result R is
 *   pre + B + post   when the indexed dims are adjacent (pre = free dims before them),
 *   B + free dims    otherwise,
 * as in ATen (and NumPy). Masks are never materialized: a cursor walks to the
 * q-th true element, so no scratch memory is needed. Every index value is
 * checked before anything is written.
 */
#include "portable/shape_util.h"

/* Walks the true elements of a mask in row-major order. */
typedef struct mask_cursor {
  int64_t idx[EM_MAX_DIM]; /* coordinates of the current element */
  int64_t off;             /* its element offset in the mask */
  int64_t q;               /* ordinal of the current true element, -1 before the first */
} mask_cursor;

/* One index tensor, after broadcasting to B. */
typedef struct index_src {
  const em_tensor *t;
  bool is_mask;
  int32_t first_dim;        /* first self dim it indexes */
  int32_t k;                /* number of self dims it indexes */
  int64_t count;            /* masks: number of true elements */
  int64_t bstr[EM_MAX_DIM]; /* strides over B: elements of t, or mask ordinals */
  mask_cursor cur;
} index_src;

/* The parsed call: sources, B, and the free dims before (pre) and after (post) B in R. */
typedef struct adv {
  const em_tensor *self;
  index_src src[EM_MAX_DIM];
  int32_t n_src;
  int64_t bsizes[EM_MAX_DIM];
  int32_t nb;
  int32_t pre[EM_MAX_DIM], post[EM_MAX_DIM]; /* self dims */
  int32_t n_pre, n_post;
  int64_t rsizes[EM_MAX_DIM];
  int32_t rdim;
} adv;

static bool mask_at(const em_tensor *m, int64_t off) {
  return ((const uint8_t *)m->data)[off] != 0;
}

static void cursor_reset(mask_cursor *c, const em_tensor *m) {
  (void)m;
  for (int32_t d = 0; d < EM_MAX_DIM; d++) c->idx[d] = 0;
  c->off = 0;
  c->q = -1;
}

/* Advances the cursor one element (row-major). */
static void cursor_step(mask_cursor *c, const em_tensor *m) {
  for (int32_t d = m->dim - 1; d >= 0; d--) {
    c->off += m->strides[d];
    if (++c->idx[d] < m->sizes[d]) return;
    c->off -= m->strides[d] * m->sizes[d];
    c->idx[d] = 0;
  }
}

/* Moves to the q-th true element (0-based; it must exist). */
static void cursor_seek(mask_cursor *c, const em_tensor *m, int64_t q) {
  if (q < c->q) cursor_reset(c, m);
  while (c->q < q) {
    if (c->q >= 0) cursor_step(c, m);
    while (!mask_at(m, c->off)) cursor_step(c, m);
    c->q++;
  }
}

/* Counts the true elements of a mask. */
static int64_t mask_count(const em_tensor *m) {
  mask_cursor c;
  int64_t n = 0;
  cursor_reset(&c, m);
  for (int64_t i = 0; i < m->numel; i++, cursor_step(&c, m)) n += mask_at(m, c.off);
  return n;
}

/* Parses `indices` against self into a: sources, B, R. */
static em_status adv_parse(em_kernel_ctx *ctx, adv *a, const em_tensor *self, em_evalue *list) {
  em_evalue **items;
  size_t n;
  EM_KCHECK(ctx, em_shape_tensor_list(list, &items, &n), "indices must be a Tensor?[] list");
  EM_KCHECK(ctx, n > 0, "at least one index must be provided");
  a->self = self;
  a->n_src = 0;
  int32_t d = 0, first = -1, last = -1;
  bool adjacent = true, indexed[EM_MAX_DIM] = {false};
  for (size_t i = 0; i < n; i++) {
    const em_tensor *t = items[i] ? em_evalue_tensor(items[i]) : NULL;
    EM_KCHECK(ctx, !items[i] || items[i]->tag == EM_TAG_NONE || t, "indices[%d] is not a tensor",
              (int)i);
    int32_t k = 1;
    if (t && (t->dtype == EM_DTYPE_BOOL || t->dtype == EM_DTYPE_U8)) {
      EM_KCHECK(ctx, t->dim > 0, "0-dim boolean masks are not supported as indices");
      k = t->dim;
    }
    EM_KCHECK(ctx, d + k <= self->dim, "too many indices for tensor of dimension %d",
              (int)self->dim);
    if (t) {
      index_src *s = &a->src[a->n_src++];
      s->t = t;
      s->first_dim = d;
      s->k = k;
      s->is_mask = t->dtype == EM_DTYPE_BOOL || t->dtype == EM_DTYPE_U8;
      EM_KCHECK(ctx, s->is_mask || t->dtype == EM_DTYPE_I64 || t->dtype == EM_DTYPE_I32,
                "tensors used as indices must be long, int, byte or bool tensors, got %s",
                em_dtype_name(t->dtype));
      if (s->is_mask) {
        for (int32_t j = 0; j < k; j++)
          EM_KCHECK(ctx, t->sizes[j] == self->sizes[d + j],
                    "the shape of the mask at index %d (size %lld) does not match the indexed "
                    "tensor (size %lld) at dim %d",
                    (int)j, (long long)t->sizes[j], (long long)self->sizes[d + j], (int)(d + j));
        s->count = mask_count(t);
        cursor_reset(&s->cur, t);
      }
      if (last >= 0 && last != d) adjacent = false;
      if (first < 0) first = d;
      last = d + k;
      for (int32_t j = 0; j < k; j++) indexed[d + j] = true;
    }
    d += k;
  }
  EM_KCHECK(ctx, a->n_src > 0, "at least one non-None index must be provided");
  /* B = broadcast of the source shapes. */
  a->nb = 0;
  for (int32_t i = 0; i < a->n_src; i++) {
    const index_src *s = &a->src[i];
    int64_t one = s->count;
    const int64_t *sz = s->is_mask ? &one : s->t->sizes;
    int32_t sd = s->is_mask ? 1 : s->t->dim;
    int64_t prev[EM_MAX_DIM];
    for (int32_t j = 0; j < a->nb; j++) prev[j] = a->bsizes[j];
    EM_KCHECK(ctx, sd <= EM_MAX_DIM && em_broadcast_shapes(prev, a->nb, sz, sd, a->bsizes, &a->nb),
              "shape mismatch: indexing tensors could not be broadcast together");
  }
  for (int32_t i = 0; i < a->n_src; i++) {
    index_src *s = &a->src[i];
    int32_t sd = s->is_mask ? 1 : s->t->dim;
    for (int32_t j = 0; j < a->nb; j++) {
      int32_t tj = j - (a->nb - sd);
      int64_t size = tj < 0 ? 1 : s->is_mask ? s->count : s->t->sizes[tj];
      s->bstr[j] = (tj < 0 || size == 1) ? 0 : s->is_mask ? 1 : s->t->strides[tj];
    }
  }
  /* R: free dims before the (adjacent) indexed block, B, the other free dims. */
  a->n_pre = a->n_post = 0;
  for (int32_t j = 0; j < self->dim; j++) {
    if (indexed[j]) continue;
    if (adjacent && j < first)
      a->pre[a->n_pre++] = j;
    else
      a->post[a->n_post++] = j;
  }
  a->rdim = a->n_pre + a->nb + a->n_post;
  EM_KCHECK(ctx, a->rdim <= EM_MAX_DIM, "indexing result has rank %d > %d", (int)a->rdim,
            EM_MAX_DIM);
  int32_t r = 0;
  for (int32_t j = 0; j < a->n_pre; j++) a->rsizes[r++] = self->sizes[a->pre[j]];
  for (int32_t j = 0; j < a->nb; j++) a->rsizes[r++] = a->bsizes[j];
  for (int32_t j = 0; j < a->n_post; j++) a->rsizes[r++] = self->sizes[a->post[j]];
  return EM_OK;
}

/*
 * Offset in the indexed tensor (strides `tstr` over self's dims) of B
 * position `boff` (per-source offsets). Fails on an out-of-range index.
 */
static em_status adv_offset(em_kernel_ctx *ctx, adv *a, const int64_t *boff, const int64_t *tstr,
                            int64_t *off) {
  int64_t o = 0;
  for (int32_t i = 0; i < a->n_src; i++) {
    index_src *s = &a->src[i];
    if (s->is_mask) {
      cursor_seek(&s->cur, s->t, boff[i]);
      for (int32_t j = 0; j < s->k; j++) o += s->cur.idx[j] * tstr[s->first_dim + j];
      continue;
    }
    int64_t v = em_shape_index_at(s->t, boff[i]);
    int64_t n = a->self->sizes[s->first_dim];
    EM_KCHECK(ctx, v >= -n && v < n, "index %lld is out of bounds for dimension %d with size %lld",
              (long long)v, (int)s->first_dim, (long long)n);
    o += (v < 0 ? v + n : v) * tstr[s->first_dim];
  }
  *off = o;
  return EM_OK;
}

/* What adv_run does at each position. */
typedef enum adv_mode { ADV_CHECK, ADV_GATHER, ADV_PUT, ADV_ACCUMULATE } adv_mode;

/* Adds one element of src into dst (same dtype), as ATen's `+=` (bool: or). */
static void add_elem(char *dst, const char *src, int dt) {
  if (em_dtype_is_float(dt)) {
    em_store_f64(dst, dt, 0, em_load_f64(dst, dt, 0) + em_load_f64(src, dt, 0));
  } else if (dt == EM_DTYPE_BOOL) {
    *dst = (char)(*dst || *src);
  } else {
    uint64_t r = (uint64_t)em_load_i64(dst, dt, 0) + (uint64_t)em_load_i64(src, dt, 0);
    em_store_i64(dst, dt, 0, (int64_t)r);
  }
}

/* Advances a row-major counter over B (bidx) with the sources' offsets (boff) and the R
 * offset (ob, strides bo). */
static void adv_next_b(const adv *a, int64_t *bidx, int64_t *boff, int64_t *ob, const int64_t *bo) {
  for (int32_t j = a->nb - 1; j >= 0; j--) {
    for (int32_t i = 0; i < a->n_src; i++) boff[i] += a->src[i].bstr[j];
    *ob += bo[j];
    if (++bidx[j] < a->bsizes[j]) break;
    for (int32_t i = 0; i < a->n_src; i++) boff[i] -= a->src[i].bstr[j] * a->bsizes[j];
    *ob -= bo[j] * a->bsizes[j];
    bidx[j] = 0;
  }
}

/* One element of es (1, 2, 4 or 8) bytes. */
static inline void copy_es(char *dst, const char *src, size_t es) {
  switch (es) {
  case 1: memcpy(dst, src, 1); break;
  case 2: memcpy(dst, src, 2); break;
  case 4: memcpy(dst, src, 4); break;
  default: memcpy(dst, src, 8); break;
  }
}

/*
 * ADV_GATHER when every index position picks one element (no free dims after the indexed
 * block) and free dims come before it (planes): each position's offset is found once and its
 * element copied for every plane, instead of the position's indices read again per plane (a
 * reflection pad's index over H and W took ~15 ns an element).
 */
static em_status gather_elems(em_kernel_ctx *ctx, adv *a, char *tgt, const int64_t *tstr, char *oth,
                              const int64_t *ostr, const int64_t *pre_sizes, const int64_t *pre_t,
                              int64_t n_pre, int64_t n_b, size_t es) {
  const int64_t *bo = ostr + a->n_pre;
  int64_t bidx[EM_MAX_DIM] = {0}, boff[EM_MAX_DIM] = {0}, ob = 0;
  for (int64_t b = 0; b < n_b; b++) {
    int64_t toff;
    EM_KTRY(adv_offset(ctx, a, boff, tstr, &toff));
    em_shape_iter pit;
    em_shape_iter_init(&pit, pre_sizes, a->n_pre);
    em_shape_iter_add(&pit, pre_t);
    em_shape_iter_add(&pit, ostr);
    for (int64_t p = 0; p < n_pre; p++, em_shape_iter_next(&pit))
      copy_es(em_shape_at(oth, pit.off[1] + ob, es), em_shape_at(tgt, pit.off[0] + toff, es), es);
    adv_next_b(a, bidx, boff, &ob, bo);
  }
  return EM_OK;
}

/*
 * Walks R. `tgt` is the indexed tensor (strides tstr over self dims); `oth` is
 * the tensor laid out as R (strides ostr over R's dims): the output of index,
 * or the broadcast values of index_put. ADV_CHECK validates every index once.
 */
static em_status adv_run(em_kernel_ctx *ctx, adv *a, adv_mode mode, char *tgt, const int64_t *tstr,
                         char *oth, const int64_t *ostr, int dt) {
  size_t es = em_dtype_size(dt);
  static const int64_t zeros[EM_MAX_DIM];
  if (!ostr) ostr = zeros;
  int64_t pre_sizes[EM_MAX_DIM], pre_t[EM_MAX_DIM], post_sizes[EM_MAX_DIM], post_t[EM_MAX_DIM];
  for (int32_t j = 0; j < a->n_pre; j++) {
    pre_sizes[j] = a->self->sizes[a->pre[j]];
    pre_t[j] = tstr[a->pre[j]];
  }
  for (int32_t j = 0; j < a->n_post; j++) {
    post_sizes[j] = a->self->sizes[a->post[j]];
    post_t[j] = tstr[a->post[j]];
  }
  const int64_t *bo = ostr + a->n_pre, *po = ostr + a->n_pre + a->nb;
  int64_t n_pre = mode == ADV_CHECK ? 1 : em_shape_numel(pre_sizes, a->n_pre);
  int64_t n_b = em_shape_numel(a->bsizes, a->nb);
  int64_t n_post = em_shape_numel(post_sizes, a->n_post);
  if (mode != ADV_CHECK && n_post == 0) return EM_OK;
  if (mode == ADV_GATHER && a->n_post == 0 && n_pre > 1 &&
      (es == 1 || es == 2 || es == 4 || es == 8))
    return gather_elems(ctx, a, tgt, tstr, oth, ostr, pre_sizes, pre_t, n_pre, n_b, es);
  em_shape_iter pit;
  em_shape_iter_init(&pit, pre_sizes, a->n_pre);
  em_shape_iter_add(&pit, pre_t);
  em_shape_iter_add(&pit, ostr);
  for (int64_t p = 0; p < n_pre; p++, em_shape_iter_next(&pit)) {
    int64_t bidx[EM_MAX_DIM] = {0}, boff[EM_MAX_DIM] = {0}, ob = 0;
    for (int64_t b = 0; b < n_b; b++) {
      int64_t toff;
      EM_KTRY(adv_offset(ctx, a, boff, tstr, &toff));
      char *t = em_shape_at(tgt, pit.off[0] + toff, es);
      char *o = mode == ADV_CHECK ? NULL : em_shape_at(oth, pit.off[1] + ob, es);
      if (mode == ADV_GATHER) {
        em_shape_copy(o, po, t, post_t, post_sizes, a->n_post, es);
      } else if (mode == ADV_PUT) {
        em_shape_copy(t, post_t, o, po, post_sizes, a->n_post, es);
      } else if (mode == ADV_ACCUMULATE) {
        em_shape_iter it;
        em_shape_iter_init(&it, post_sizes, a->n_post);
        em_shape_iter_add(&it, post_t);
        em_shape_iter_add(&it, po);
        for (int64_t i = 0; i < n_post; i++, em_shape_iter_next(&it))
          add_elem(t + it.off[0] * (int64_t)es, o + it.off[1] * (int64_t)es, dt);
      }
      adv_next_b(a, bidx, boff, &ob, bo); /* next B position: row-major over bsizes */
    }
  }
  return EM_OK;
}

/* index.Tensor_out(self, indices, *, out). */
em_status em_index_tensor_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *self = EM_ARG_TENSOR(args, 0), *out = EM_ARG_TENSOR(args, 2);
  EM_KCHECK(ctx, self && out, "expected tensor arguments");
  EM_KCHECK(ctx, out->dtype == self->dtype, "out dtype %s differs from input dtype %s",
            em_dtype_name(out->dtype), em_dtype_name(self->dtype));
  adv a;
  EM_KTRY(adv_parse(ctx, &a, self, args[1]));
  EM_KTRY(adv_run(ctx, &a, ADV_CHECK, self->data, self->strides, NULL, NULL, self->dtype));
  EM_KCHECK(ctx, out->dim == a.rdim, "out has rank %d, expected %d", (int)out->dim, (int)a.rdim);
  EM_KTRY(em_resize_out(ctx, out, a.rsizes, a.rdim));
  if (out->numel == 0) return EM_OK;
  return adv_run(ctx, &a, ADV_GATHER, self->data, self->strides, out->data, out->strides,
                 self->dtype);
}

/* Writes values (broadcast to R) into `tgt` (self's shape) at the indexed positions. */
static em_status index_put(em_kernel_ctx *ctx, em_tensor *self, em_evalue *indices,
                           em_tensor *values, bool accumulate, em_tensor *tgt) {
  EM_KCHECK(ctx, values->dtype == self->dtype,
            "index put requires the source and destination dtypes match, got %s for the "
            "destination and %s for the source",
            em_dtype_name(self->dtype), em_dtype_name(values->dtype));
  adv a;
  EM_KTRY(adv_parse(ctx, &a, self, indices));
  EM_KCHECK(ctx, values->dim <= a.rdim,
            "shape mismatch: value tensor of rank %d cannot be "
            "broadcast to indexing result of rank %d",
            (int)values->dim, (int)a.rdim);
  int64_t vstr[EM_MAX_DIM];
  for (int32_t j = 0; j < a.rdim; j++) {
    int32_t vj = j - (a.rdim - values->dim);
    int64_t vs = vj < 0 ? 1 : values->sizes[vj];
    EM_KCHECK(ctx, vs == 1 || vs == a.rsizes[j],
              "shape mismatch: value tensor size %lld cannot be broadcast to indexing result "
              "size %lld at dim %d",
              (long long)vs, (long long)a.rsizes[j], (int)j);
    vstr[j] = vs == 1 ? 0 : values->strides[vj];
  }
  EM_KTRY(adv_run(ctx, &a, ADV_CHECK, tgt->data, tgt->strides, NULL, NULL, self->dtype));
  if (tgt != self) em_shape_copy_tensor(tgt, self);
  if (em_shape_numel(a.rsizes, a.rdim) == 0) return EM_OK;
  return adv_run(ctx, &a, accumulate ? ADV_ACCUMULATE : ADV_PUT, tgt->data, tgt->strides,
                 values->data, vstr, self->dtype);
}

/* index_put.out(self, indices, values, accumulate, *, out). */
em_status em_index_put_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *self = EM_ARG_TENSOR(args, 0), *values = EM_ARG_TENSOR(args, 2);
  em_tensor *out = EM_ARG_TENSOR(args, 4);
  bool acc;
  EM_KCHECK(ctx, self && values && out, "expected tensor arguments");
  EM_KCHECK(ctx, em_arg_bool(args[3], &acc), "accumulate must be a bool");
  EM_KCHECK(ctx, out->dtype == self->dtype, "out dtype %s differs from input dtype %s",
            em_dtype_name(out->dtype), em_dtype_name(self->dtype));
  EM_KCHECK(ctx, out->dim == self->dim, "out has rank %d, expected %d", (int)out->dim,
            (int)self->dim);
  EM_KTRY(em_resize_out(ctx, out, self->sizes, self->dim));
  return index_put(ctx, self, args[1], values, acc, out);
}

/* index_put_(self, indices, values, accumulate) -> self, in place. */
em_status em_index_put_(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *self = EM_ARG_TENSOR(args, 0), *values = EM_ARG_TENSOR(args, 2);
  bool acc;
  EM_KCHECK(ctx, self && values, "expected tensor arguments");
  EM_KCHECK(ctx, em_arg_bool(args[3], &acc), "accumulate must be a bool");
  return index_put(ctx, self, args[1], values, acc, self);
}
