/*
 * data_loader.h — file and mmap data loaders (extension: uses the OS).
 *
 *     em_file_loader fl;
 *     if (em_mmap_loader_open(&fl, "model.pte") != EM_OK) ...;
 *     em_program_load(&fl.base, EM_VERIFY_FULL, &alloc, &prog);
 *     ...
 *     em_file_loader_close(&fl);
 */
#ifndef EMBER_EXT_DATA_LOADER_H
#define EMBER_EXT_DATA_LOADER_H

#include "ember/loader.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A loader over a whole file, mapped (zero-copy) or read into memory. */
typedef struct em_file_loader {
  em_data_loader base;
  void *data; /* the mapping or the 64-aligned copy */
  size_t size;
  int mapped; /* 1 when `data` is an mmap */
} em_file_loader;

/* Maps `path` read-only. Falls back to reading when mapping is impossible. */
em_status em_mmap_loader_open(em_file_loader *fl, const char *path);

/* Reads `path` into a 64-byte-aligned heap buffer. */
em_status em_file_loader_open(em_file_loader *fl, const char *path);

/* Copies `data[0..size)` into a 64-byte-aligned heap buffer (for unaligned caller bytes). */
em_status em_copy_loader_open(em_file_loader *fl, const void *data, size_t size);

/* Unmaps or frees. Safe on a zeroed or closed loader. */
void em_file_loader_close(em_file_loader *fl);

/*
 * A 64-byte-aligned heap buffer of `size` bytes (free() releases it); from 4 MiB up it is 2 MiB
 * aligned and marked for transparent huge pages where the OS has them, so streaming weights and
 * KV caches through it misses the TLB less. NULL when out of memory.
 */
void *em_ext_alloc_large(size_t size);

#ifdef __cplusplus
}
#endif

#endif /* EMBER_EXT_DATA_LOADER_H */
