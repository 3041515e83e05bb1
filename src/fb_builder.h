/*
 * fb_builder.h — a small FlatBuffers BUILDER (src/flatbuf.h is the reader).
 *
 * Objects are written back to front into a caller-given buffer, as FlatBuffers
 * are: a child (string, table, vector) is written before whatever refers to
 * it, and is named by its `fbb_ref`, its distance from the end of the buffer.
 * With a NULL buffer, or once the buffer is full, nothing is written but the
 * size keeps being counted, so one pass tells how many bytes the result needs.
 * Little-endian output whatever the host. Not installed.
 *
 *     fbb b;
 *     fbb_init(&b, buf, cap);
 *     fbb_ref name = fbb_string(&b, "hi", 2);
 *     fbb_field f[] = {{0, 4, 1, name}, {1, 8, 0, 42}};
 *     fbb_ref root = fbb_table(&b, f, 2);
 *     size_t n;
 *     if (fbb_finish(&b, root, "ED00", 1, &n) == EM_OK) ... the buffer holds n bytes ...
 */
#ifndef EMBER_SRC_FB_BUILDER_H
#define EMBER_SRC_FB_BUILDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ember/status.h"

typedef uint32_t fbb_ref;

typedef struct fbb {
  uint8_t *buf;    /* NULL: count only */
  size_t cap;      /* bytes of buf */
  size_t used;     /* bytes written so far, at the end of buf */
  size_t minalign; /* largest alignment asked for */
  bool full;       /* something did not fit (or the size passed 4 GiB): nothing more written */
} fbb;

/* One table field: `id` in the schema, `size` 1, 2, 4 or 8 bytes; `is_ref` marks an offset
 * field (string, vector, table) whose `val` is the child's fbb_ref; otherwise `val` holds the
 * scalar's bits (two's complement for signed). */
typedef struct fbb_field {
  uint16_t id;
  uint8_t size;
  uint8_t is_ref;
  uint64_t val;
} fbb_field;

/* Starts a builder on buf[0..cap) (buf may be NULL to count only). */
void fbb_init(fbb *b, void *buf, size_t cap);

/* Writes a string of `len` bytes (a NUL is added). */
fbb_ref fbb_string(fbb *b, const char *s, size_t len);

/* Writes a table from up to 16 fields (any order; absent fields are omitted) and its vtable. */
fbb_ref fbb_table(fbb *b, const fbb_field *fields, size_t n);

/* A vector of `n` child references: call fbb_refvec_begin, then fbb_refvec_push for the
 * elements LAST FIRST, then fbb_refvec_end. */
void fbb_refvec_begin(fbb *b, uint32_t n);
void fbb_refvec_push(fbb *b, fbb_ref child);
fbb_ref fbb_refvec_end(fbb *b, uint32_t n);

/* A vector of `n` 64-bit integers. */
fbb_ref fbb_vec_i64(fbb *b, const int64_t *v, uint32_t n);

/*
 * Writes the root reference, the 4-character file identifier (NULL: none) and, if
 * `size_prefixed`, the 32-bit size prefix, then moves the result to the start of the buffer.
 * *size_out is always the total size needed. Returns EM_ERR_OUT_OF_RESOURCES when the
 * buffer was NULL or too small (its contents are then unspecified).
 */
em_status fbb_finish(fbb *b, fbb_ref root, const char *ident, bool size_prefixed, size_t *size_out);

#endif /* EMBER_SRC_FB_BUILDER_H */
