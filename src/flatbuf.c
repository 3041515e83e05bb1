/*
 * flatbuf.c — the bounds-checked FlatBuffers reader (see flatbuf.h).
 *
 * Offsets are u32 and checked with 64-bit arithmetic so no sum can wrap.
 */
#include "flatbuf.h"

void fb_init(fb_reader *r, const void *buf, size_t size) {
  r->buf = (const uint8_t *)buf;
  r->size = size > 0x7fffffffu ? 0x7fffffffu : (uint32_t)size;
  r->bad = false;
  r->why = NULL;
  r->where = 0;
}

bool fb_fail(fb_reader *r, const char *why, uint32_t where) {
  if (!r->bad) {
    r->bad = true;
    r->why = why;
    r->where = where;
  }
  return false;
}

static bool in_bounds(const fb_reader *r, uint64_t at, uint64_t n) {
  return at <= r->size && n <= r->size - at;
}

/* Reads the table at absolute offset `at`, validating its vtable. */
static fb_tab table_at(fb_reader *r, uint64_t at) {
  fb_tab t = {0, 0, 0, 0};
  if (at == 0 || !in_bounds(r, at, 4) || (at & 3)) {
    fb_fail(r, "table offset out of bounds or misaligned", (uint32_t)at);
    return t;
  }
  int32_t soff = (int32_t)fb_rd_u32(r, (uint32_t)at);
  int64_t vt = (int64_t)at - (int64_t)soff;
  if (vt < 0 || !in_bounds(r, (uint64_t)vt, 4) || (vt & 1)) {
    fb_fail(r, "vtable out of bounds", (uint32_t)at);
    return t;
  }
  uint16_t vlen = fb_rd_u16(r, (uint32_t)vt);
  uint16_t tlen = fb_rd_u16(r, (uint32_t)vt + 2);
  if (vlen < 4 || (vlen & 1) || !in_bounds(r, (uint64_t)vt, vlen) || tlen < 4 ||
      !in_bounds(r, at, tlen)) {
    fb_fail(r, "bad vtable", (uint32_t)vt);
    return t;
  }
  t.t = (uint32_t)at;
  t.vt = (uint32_t)vt;
  t.vlen = vlen;
  t.tlen = tlen;
  return t;
}

fb_tab fb_root(fb_reader *r) {
  if (r->size < 8) {
    fb_fail(r, "buffer too small for a flatbuffer", 0);
    return (fb_tab){0, 0, 0, 0};
  }
  return table_at(r, fb_rd_u32(r, 0));
}

static uint16_t field_off(const fb_reader *r, fb_tab t, unsigned slot) {
  if (!t.t) return 0;
  uint32_t pos = 4 + 2 * slot;
  if (pos + 2 > t.vlen) return 0;
  return fb_rd_u16(r, t.vt + pos);
}

uint32_t fb_field(fb_reader *r, fb_tab t, unsigned slot, unsigned sz) {
  uint16_t off = field_off(r, t, slot);
  if (!off) return 0;
  /* Like flatbuffers' Verifier, require the field inside the buffer, not inside the table's
   * declared inline size: Python's builder writes sizes that omit trailing 8-byte fields. */
  uint32_t at = t.t + off;
  if (!in_bounds(r, at, sz)) {
    fb_fail(r, "field outside the buffer", t.t);
    return 0;
  }
  if (sz > 1 && (at % sz) != 0) {
    fb_fail(r, "misaligned scalar field", at);
    return 0;
  }
  return at;
}

uint8_t fb_u8(fb_reader *r, fb_tab t, unsigned slot, uint8_t def) {
  uint32_t at = fb_field(r, t, slot, 1);
  return at ? fb_rd_u8(r, at) : def;
}
int8_t fb_i8(fb_reader *r, fb_tab t, unsigned slot, int8_t def) {
  uint32_t at = fb_field(r, t, slot, 1);
  return at ? (int8_t)fb_rd_u8(r, at) : def;
}
int32_t fb_i32(fb_reader *r, fb_tab t, unsigned slot, int32_t def) {
  uint32_t at = fb_field(r, t, slot, 4);
  return at ? (int32_t)fb_rd_u32(r, at) : def;
}
uint32_t fb_u32(fb_reader *r, fb_tab t, unsigned slot, uint32_t def) {
  uint32_t at = fb_field(r, t, slot, 4);
  return at ? fb_rd_u32(r, at) : def;
}
int64_t fb_i64(fb_reader *r, fb_tab t, unsigned slot, int64_t def) {
  uint32_t at = fb_field(r, t, slot, 8);
  return at ? (int64_t)fb_rd_u64(r, at) : def;
}
uint64_t fb_u64(fb_reader *r, fb_tab t, unsigned slot, uint64_t def) {
  uint32_t at = fb_field(r, t, slot, 8);
  return at ? fb_rd_u64(r, at) : def;
}
double fb_f64(fb_reader *r, fb_tab t, unsigned slot, double def) {
  uint32_t at = fb_field(r, t, slot, 8);
  if (!at) return def;
  double d;
  memcpy(&d, r->buf + at, 8);
  return d;
}

/* Follows the u32 reference stored in `slot`; 0 when absent or invalid. */
static uint32_t deref(fb_reader *r, fb_tab t, unsigned slot) {
  uint32_t at = fb_field(r, t, slot, 4);
  if (!at) return 0;
  uint64_t target = (uint64_t)at + fb_rd_u32(r, at);
  if (target >= r->size) {
    fb_fail(r, "reference out of bounds", at);
    return 0;
  }
  return (uint32_t)target;
}

bool fb_has(fb_reader *r, fb_tab t, unsigned slot) { return field_off(r, t, slot) != 0; }

fb_tab fb_table(fb_reader *r, fb_tab t, unsigned slot) {
  uint32_t at = deref(r, t, slot);
  if (!at) return (fb_tab){0, 0, 0, 0};
  return table_at(r, at);
}

static fb_vec vector_at(fb_reader *r, uint64_t at, unsigned elem, unsigned align) {
  fb_vec v = {0, 0};
  if ((at & 3) || !in_bounds(r, at, 4)) {
    fb_fail(r, "vector header out of bounds or misaligned", (uint32_t)at);
    return v;
  }
  uint32_t n = fb_rd_u32(r, (uint32_t)at);
  uint64_t data = at + 4;
  if (!in_bounds(r, data, (uint64_t)n * elem)) {
    fb_fail(r, "vector runs past the end of the buffer", (uint32_t)at);
    return v;
  }
  if (align > 1 && n > 0 && (data % align) != 0) {
    fb_fail(r, "vector data misaligned", (uint32_t)at);
    return v;
  }
  v.data = (uint32_t)data;
  v.n = n;
  return v;
}

fb_vec fb_vector(fb_reader *r, fb_tab t, unsigned slot, unsigned elem, unsigned align) {
  uint32_t at = deref(r, t, slot);
  if (!at) return (fb_vec){0, 0};
  return vector_at(r, at, elem, align);
}

const char *fb_string(fb_reader *r, fb_tab t, unsigned slot, uint32_t *len_out) {
  uint32_t at = deref(r, t, slot);
  if (len_out) *len_out = 0;
  if (!at) return NULL;
  fb_vec v = vector_at(r, at, 1, 1);
  if (r->bad) return NULL;
  if (!in_bounds(r, (uint64_t)v.data + v.n, 1) || r->buf[v.data + v.n] != 0) {
    fb_fail(r, "string not NUL-terminated", at);
    return NULL;
  }
  if (len_out) *len_out = v.n;
  return (const char *)(r->buf + v.data);
}

fb_tab fb_vec_table(fb_reader *r, fb_vec v, uint32_t i) {
  if (i >= v.n) {
    fb_fail(r, "vector index out of range", v.data);
    return (fb_tab){0, 0, 0, 0};
  }
  uint32_t slot = v.data + 4 * i;
  return table_at(r, (uint64_t)slot + fb_rd_u32(r, slot));
}
