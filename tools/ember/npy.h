/*
 * npy.h — reading and writing NumPy .npy files (format 1.0/2.0, little-endian,
 * C or Fortran order is rejected unless C) for the ember CLI.
 */
#ifndef EMBER_TOOLS_NPY_H
#define EMBER_TOOLS_NPY_H

#include <stddef.h>
#include <stdint.h>

#include "ember/tensor.h"

typedef struct npy_array {
  int dtype; /* em_dtype */
  int32_t dim;
  int64_t sizes[EM_MAX_DIM];
  void *data; /* malloc'd, 64-aligned */
  size_t nbytes;
} npy_array;

/* Reads `path`; on failure returns nonzero and writes a message to `err`. */
int npy_read(const char *path, npy_array *out, char *err, size_t err_len);

/* Writes tensor `t` (contiguous data assumed in dim order) to `path`. */
int npy_write(const char *path, const em_tensor *t);

void npy_free(npy_array *a);

#endif
