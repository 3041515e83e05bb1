/*
 * loader.h — data loaders: where a program's bytes come from.
 *
 * A loader hands out byte ranges of a file-like source. Buffer and mmap
 * loaders are zero-copy; a file loader reads what is asked for into memory it
 * owns (see extension/ember_ext/data_loader.h for file and mmap loaders).
 *
 *     em_buffer_loader bl;
 *     em_data_loader *loader = em_buffer_loader_init(&bl, bytes, n_bytes);
 *     em_program *prog;
 *     em_status st = em_program_load(loader, EM_VERIFY_FULL, &alloc, &prog);
 */
#ifndef EMBER_LOADER_H
#define EMBER_LOADER_H

#include <stddef.h>
#include <stdint.h>

#include "ember/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct em_data_loader em_data_loader;

/* A loader interface; all members but `release` are required. */
struct em_data_loader {
  /*
   * Sets *data_out to bytes [offset, offset + size) of the source, aligned to
   * at least 16 bytes when `offset` is. The bytes stay valid until released
   * (or until the loader is destroyed, for zero-copy loaders).
   */
  em_status (*load)(em_data_loader *self, uint64_t offset, uint64_t size, const void **data_out);
  /* Gives back what load returned; may be NULL (nothing to release). */
  void (*release)(em_data_loader *self, const void *data, uint64_t size);
  /* Total size of the source in bytes. */
  uint64_t size;
  /*
   * Optional (may be NULL): the runtime copied bytes [data, data + size) of a load out (the
   * initial state of a mutable buffer, e.g. a KV cache) and will not read them again soon. The
   * loader may drop them from memory as long as every later read of them still returns the same
   * bytes (a file mapping re-reads its file; a heap copy can only drop pages that are all zero).
   */
  void (*discard)(em_data_loader *self, const void *data, uint64_t size);
};

/* A loader over caller memory (zero-copy). The memory is borrowed. */
typedef struct em_buffer_loader {
  em_data_loader base;
  const uint8_t *data;
} em_buffer_loader;

/* Initializes `bl` over `data[0..size)` and returns its loader interface. */
em_data_loader *em_buffer_loader_init(em_buffer_loader *bl, const void *data, size_t size);

#ifdef __cplusplus
}
#endif

#endif /* EMBER_LOADER_H */
