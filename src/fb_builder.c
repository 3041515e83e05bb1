/*
 * fb_builder.c — a small FlatBuffers builder, back to front (see fb_builder.h).
 *
 * Layout follows the FlatBuffers binary format: a table starts with a signed
 * 32-bit offset back to its vtable (written just before it), the vtable lists
 * the vtable size, the table size and each field's offset in the table (0 when
 * absent); offsets to children are unsigned and point forward; every scalar is
 * aligned to its size relative to the end of the buffer, and the finished
 * buffer is padded to the largest alignment used, so it is aligned at its start.
 */
#include "fb_builder.h"

#include <string.h>

/* Where the object that ends `endoff` bytes before the buffer's end starts; NULL when counting
 * only or when it does not fit. */
static uint8_t *fbb_at(const fbb *b, size_t endoff) {
  return b->buf && endoff <= b->cap ? b->buf + (b->cap - endoff) : NULL;
}

static void fbb_put_le(uint8_t *p, uint64_t v, size_t n) {
  for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void fbb_push(fbb *b, uint64_t v, size_t n) {
  b->used += n;
  uint8_t *p = fbb_at(b, b->used);
  if (p) fbb_put_le(p, v, n);
}

/* Pads so that `extra` more bytes end on an `align` boundary. */
static void fbb_prep(fbb *b, size_t align, size_t extra) {
  if (align > b->minalign) b->minalign = align;
  size_t pad = (align - ((b->used + extra) % align)) % align;
  b->used += pad;
  uint8_t *p = fbb_at(b, b->used);
  if (p) memset(p, 0, pad);
}

void fbb_init(fbb *b, void *buf, size_t cap) {
  b->buf = buf;
  b->cap = buf ? cap : 0;
  b->used = 0;
  b->minalign = 1;
  b->full = false;
}

fbb_ref fbb_string(fbb *b, const char *s, size_t len) {
  fbb_prep(b, 4, len + 1);
  b->used += len + 1;
  uint8_t *p = fbb_at(b, b->used);
  if (p) {
    if (len) memcpy(p, s, len);
    p[len] = 0;
  }
  fbb_push(b, len, 4);
  return (fbb_ref)b->used;
}

fbb_ref fbb_table(fbb *b, const fbb_field *f, size_t n) {
  uint16_t offs[16];
  size_t off = 4, align = 4, n_slots = 0;
  if (n > 16) n = 16;
  /* Largest fields first, each aligned to its size, after the vtable offset. */
  for (size_t sz = 8; sz >= 1; sz /= 2)
    for (size_t i = 0; i < n; i++) {
      if (f[i].size != sz) continue;
      off = (off + sz - 1) / sz * sz;
      offs[i] = (uint16_t)off;
      off += sz;
      if (sz > align) align = sz;
      if ((size_t)f[i].id + 1 > n_slots) n_slots = (size_t)f[i].id + 1;
    }
  size_t tsize = off, vt_size = 4 + 2 * n_slots;
  fbb_prep(b, align, tsize);
  b->used += tsize;
  size_t t = b->used;
  uint8_t *p = fbb_at(b, t);
  if (p) {
    memset(p, 0, tsize);
    fbb_put_le(p, vt_size, 4); /* the vtable sits right before the table */
    for (size_t i = 0; i < n; i++) {
      if (f[i].size != 1 && f[i].size != 2 && f[i].size != 4 && f[i].size != 8) continue;
      uint64_t v = f[i].is_ref ? (uint64_t)(t - offs[i] - f[i].val) : f[i].val;
      fbb_put_le(p + offs[i], v, f[i].size);
    }
  }
  b->used += vt_size;
  uint8_t *vt = fbb_at(b, b->used);
  if (vt) {
    memset(vt, 0, vt_size);
    fbb_put_le(vt, vt_size, 2);
    fbb_put_le(vt + 2, tsize, 2);
    for (size_t i = 0; i < n; i++)
      if (f[i].size == 1 || f[i].size == 2 || f[i].size == 4 || f[i].size == 8)
        fbb_put_le(vt + 4 + 2 * (size_t)f[i].id, offs[i], 2);
  }
  return (fbb_ref)t;
}

void fbb_refvec_begin(fbb *b, uint32_t n) { fbb_prep(b, 4, 4 * (size_t)n); }

void fbb_refvec_push(fbb *b, fbb_ref child) {
  b->used += 4;
  uint8_t *p = fbb_at(b, b->used);
  if (p) fbb_put_le(p, b->used - child, 4);
}

fbb_ref fbb_refvec_end(fbb *b, uint32_t n) {
  fbb_push(b, n, 4);
  return (fbb_ref)b->used;
}

fbb_ref fbb_vec_i64(fbb *b, const int64_t *v, uint32_t n) {
  fbb_prep(b, 4, 8 * (size_t)n);
  fbb_prep(b, 8, 8 * (size_t)n); /* elements 8-aligned, the length right before them */
  for (uint32_t i = n; i-- > 0;) fbb_push(b, (uint64_t)v[i], 8);
  fbb_push(b, n, 4);
  return (fbb_ref)b->used;
}

em_status fbb_finish(fbb *b, fbb_ref root, const char *ident, bool size_prefixed,
                     size_t *size_out) {
  fbb_prep(b, b->minalign > 4 ? b->minalign : 4, 4 + (ident ? 4 : 0) + (size_prefixed ? 4 : 0));
  if (ident) {
    b->used += 4;
    uint8_t *p = fbb_at(b, b->used);
    if (p) memcpy(p, ident, 4);
  }
  b->used += 4;
  uint8_t *r = fbb_at(b, b->used);
  if (r) fbb_put_le(r, b->used - root, 4);
  if (size_prefixed) fbb_push(b, b->used, 4);
  if (size_out) *size_out = b->used;
  /* Offsets are 32-bit: a buffer past 2 GiB cannot be addressed by its readers. */
  b->full = !b->buf || b->used > b->cap || b->used > 0x7ffffff0u;
  if (b->full) return EM_ERR_OUT_OF_RESOURCES;
  memmove(b->buf, b->buf + (b->cap - b->used), b->used);
  return EM_OK;
}
