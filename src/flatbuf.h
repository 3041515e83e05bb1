/*
 * flatbuf.h — a bounds-checked FlatBuffers reader (docs/pte-format.md §1).
 *
 * Every accessor checks what it touches against the buffer: an offset, vtable,
 * vector or string that falls outside it (or is misaligned) reads as absent /
 * empty / default and sets the reader's sticky `bad` flag with a reason. The
 * verifier walks the whole file with these accessors and fails on `bad`; code
 * that runs after verification can use them without re-checking, and a file
 * loaded with minimal verification still cannot make them read out of bounds.
 *
 * Assumes a little-endian host (every target Ember supports is).
 */
#ifndef EMBER_SRC_FLATBUF_H
#define EMBER_SRC_FLATBUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct fb_reader {
  const uint8_t *buf;
  uint32_t size;
  bool bad;
  const char *why; /* first problem found */
  uint32_t where;  /* byte offset of that problem */
} fb_reader;

/* A table: `t` is its absolute offset (0 = absent). */
typedef struct fb_tab {
  uint32_t t;
  uint32_t vt;
  uint16_t vlen; /* vtable bytes */
  uint16_t tlen; /* table inline bytes */
} fb_tab;

/* A vector: `data` is the absolute offset of element 0, `n` elements (n = 0 when absent). */
typedef struct fb_vec {
  uint32_t data;
  uint32_t n;
} fb_vec;

void fb_init(fb_reader *r, const void *buf, size_t size);

/* Marks the reader bad (keeps the first reason). Returns false for convenience. */
bool fb_fail(fb_reader *r, const char *why, uint32_t where);

/* The root table (offset at byte 0). */
fb_tab fb_root(fb_reader *r);

static inline bool fb_present(fb_tab t) { return t.t != 0; }

/* Absolute offset of field `slot` of size `sz` (0 if absent or invalid). */
uint32_t fb_field(fb_reader *r, fb_tab t, unsigned slot, unsigned sz);

static inline uint8_t fb_rd_u8(const fb_reader *r, uint32_t at) { return r->buf[at]; }
static inline uint16_t fb_rd_u16(const fb_reader *r, uint32_t at) {
  uint16_t v;
  memcpy(&v, r->buf + at, 2);
  return v;
}
static inline uint32_t fb_rd_u32(const fb_reader *r, uint32_t at) {
  uint32_t v;
  memcpy(&v, r->buf + at, 4);
  return v;
}
static inline uint64_t fb_rd_u64(const fb_reader *r, uint32_t at) {
  uint64_t v;
  memcpy(&v, r->buf + at, 8);
  return v;
}

uint8_t fb_u8(fb_reader *r, fb_tab t, unsigned slot, uint8_t def);
int8_t fb_i8(fb_reader *r, fb_tab t, unsigned slot, int8_t def);
int32_t fb_i32(fb_reader *r, fb_tab t, unsigned slot, int32_t def);
uint32_t fb_u32(fb_reader *r, fb_tab t, unsigned slot, uint32_t def);
int64_t fb_i64(fb_reader *r, fb_tab t, unsigned slot, int64_t def);
uint64_t fb_u64(fb_reader *r, fb_tab t, unsigned slot, uint64_t def);
double fb_f64(fb_reader *r, fb_tab t, unsigned slot, double def);

/* Sub-table at `slot` (absent → t = 0). */
fb_tab fb_table(fb_reader *r, fb_tab t, unsigned slot);

/* Vector at `slot` of `elem` -byte elements whose data must be aligned to `align`. */
fb_vec fb_vector(fb_reader *r, fb_tab t, unsigned slot, unsigned elem, unsigned align);

/* True when `slot` holds a reference (string/vector/table), valid or not. */
bool fb_has(fb_reader *r, fb_tab t, unsigned slot);

/* String at `slot`: NUL-terminated pointer into the buffer, or NULL when absent. */
const char *fb_string(fb_reader *r, fb_tab t, unsigned slot, uint32_t *len_out);

/* Element i of a vector of tables. */
fb_tab fb_vec_table(fb_reader *r, fb_vec v, uint32_t i);

static inline int32_t fb_vec_i32(const fb_reader *r, fb_vec v, uint32_t i) {
  return (int32_t)fb_rd_u32(r, v.data + 4 * i);
}
static inline int64_t fb_vec_i64(const fb_reader *r, fb_vec v, uint32_t i) {
  return (int64_t)fb_rd_u64(r, v.data + 8 * i);
}
static inline uint64_t fb_vec_u64(const fb_reader *r, fb_vec v, uint32_t i) {
  return fb_rd_u64(r, v.data + 8 * i);
}
static inline uint8_t fb_vec_u8(const fb_reader *r, fb_vec v, uint32_t i) {
  return r->buf[v.data + i];
}

#endif /* EMBER_SRC_FLATBUF_H */
