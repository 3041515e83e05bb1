/*
 * program.h — a loaded, verified `.pte` program and its methods' metadata.
 *
 * Loading checks the ET12 identifier and eh00 header and (by default) verifies
 * every offset, length, index, enum, rank and size of the file before anything
 * else reads it (docs/pte-format.md §1–§6). A program is immutable once loaded and
 * may be shared by threads. Its bytes are borrowed from the loader.
 *
 *     em_program *prog;
 *     if (em_program_load(loader, EM_VERIFY_FULL, &alloc, &prog) != EM_OK) {
 *       puts(em_last_error());
 *     }
 *     for (size_t i = 0; i < em_program_method_count(prog); i++)
 *       puts(em_program_method_name(prog, i));
 */
#ifndef EMBER_PROGRAM_H
#define EMBER_PROGRAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ember/allocator.h"
#include "ember/data_map.h"
#include "ember/loader.h"
#include "ember/status.h"
#include "ember/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct em_program em_program;

typedef enum em_verification {
  EM_VERIFY_FULL = 0,   /* verify everything (untrusted input) */
  EM_VERIFY_MINIMAL = 1 /* header and root only: for files in the device's own flash */
} em_verification;

/*
 * Loads a program from `loader` (retained: it must outlive the program). The
 * program's bookkeeping comes from `alloc`. On failure a message naming what
 * was wrong is available from em_last_error().
 */
em_status em_program_load(em_data_loader *loader, em_verification verification, em_allocator *alloc,
                          em_program **program_out);

/* Number of methods (execution plans). */
size_t em_program_method_count(const em_program *p);

/* Name of method i (NUL-terminated, points into the file), NULL when out of range. */
const char *em_program_method_name(const em_program *p, size_t i);

/* The program's named data (for backends), or NULL when it has none. */
const em_data_map *em_program_named_data(const em_program *p);

/* Description of one input or output. */
typedef struct em_value_info {
  uint32_t tag; /* em_tag */
  int8_t dtype; /* tensors only */
  int32_t dim;
  int64_t sizes[EM_MAX_DIM]; /* upper bounds for dynamic tensors */
  uint8_t dim_order[EM_MAX_DIM];
  uint8_t dynamism;
  bool planned; /* memory-planned (set_input copies) or not (shares) */
  size_t nbytes;
} em_value_info;

/* Metadata of one method, read without preparing it. */
typedef struct em_method_meta {
  const em_program *program;
  const char *name;
  size_t plan_index;
  size_t n_inputs;
  size_t n_outputs;
  size_t n_instructions;
  size_t n_arenas; /* planned buffers, memory_id 1..n_arenas */
} em_method_meta;

/* Fills `meta` for method `name`. EM_ERR_NOT_FOUND when missing. */
em_status em_program_method_meta(const em_program *p, const char *name, em_method_meta *meta);

/* Size in bytes of planned arena i (memory_id i + 1). */
uint64_t em_method_meta_arena_size(const em_method_meta *meta, size_t i);

/* Describes input or output i. */
em_status em_method_meta_input(const em_method_meta *meta, size_t i, em_value_info *out);
em_status em_method_meta_output(const em_method_meta *meta, size_t i, em_value_info *out);

/* Operators of a method: count and full names ("aten::add.out") into `buf`. */
size_t em_method_meta_operator_count(const em_method_meta *meta);
em_status em_method_meta_operator(const em_method_meta *meta, size_t i, char *buf, size_t buf_len);

/* Counts of KernelCall instructions per operator index (`counts` has operator_count entries). */
void em_method_meta_operator_calls(const em_method_meta *meta, uint32_t *counts);

/* Delegates of a method: count and backend ids. */
size_t em_method_meta_delegate_count(const em_method_meta *meta);
const char *em_method_meta_delegate_id(const em_method_meta *meta, size_t i);

/* Program-wide layout facts for `ember info`. */
typedef struct em_program_stats {
  uint64_t file_size;
  uint64_t program_size; /* flatbuffer incl. headers */
  uint64_t segment_base_offset;
  uint64_t segment_data_size;
  size_t n_segments;
  size_t n_constants; /* constant buffers (excluding the placeholder) */
  uint64_t constant_bytes;
  size_t n_named_data;
  bool has_extended_header;
  bool legacy_constant_buffer;
} em_program_stats;

/* Fills `stats`. */
void em_program_get_stats(const em_program *p, em_program_stats *stats);

/*
 * Finds the `.pte` embedded in a BundledProgram (`.bpte`, identifier BP08):
 * sets its byte offset and size within `data`. EM_ERR_NOT_FOUND when `data`
 * is not a bundled program.
 */
em_status em_bundled_program_find(const void *data, size_t size, size_t *offset_out,
                                  size_t *size_out);

#ifdef __cplusplus
}
#endif

#endif /* EMBER_PROGRAM_H */
