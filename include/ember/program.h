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

/*
 * A BundledProgram's test suites, read in place: a view of the `.bpte` bytes,
 * which the caller keeps alive and unchanged while it is used. Filled by
 * em_bundled_open(); the fields are for the em_bundled_* functions.
 */
typedef struct em_bundled {
  const uint8_t *data;
  size_t size;
  uint32_t version;
  uint32_t suites;                     /* offset of the method_test_suites vector's first element */
  uint32_t n_suites;                   /* number of BundledMethodTestSuite tables */
  size_t program_offset, program_size; /* the embedded `.pte` */
} em_bundled;

/* One bundled input or expected output (BundledProgram's `Value`). */
typedef struct em_bundled_value {
  uint32_t tag; /* EM_TAG_TENSOR, EM_TAG_INT, EM_TAG_BOOL or EM_TAG_DOUBLE */
  int8_t dtype; /* tensors: em_dtype */
  int32_t dim;  /* tensors: rank */
  int64_t sizes[EM_MAX_DIM];
  uint8_t dim_order[EM_MAX_DIM]; /* 0..dim-1 when the file gives none */
  int64_t numel;
  const void *data; /* tensors: contents, a view into the file (NULL when empty) */
  size_t nbytes;    /* numel * element size */
  int64_t i;        /* EM_TAG_INT */
  double d;         /* EM_TAG_DOUBLE */
  bool b;           /* EM_TAG_BOOL */
} em_bundled_value;

/*
 * Parses and fully checks a BundledProgram (identifier BP08) held in
 * `data[0..size)`: every offset, length, union type, dtype, rank, size and
 * tensor byte count of every test case, and the embedded program's bounds.
 * EM_ERR_NOT_FOUND when `data` is not a bundled program;
 * EM_ERR_INVALID_PROGRAM naming the field (em_last_error()) when malformed.
 * Nothing is allocated.
 */
em_status em_bundled_open(const void *data, size_t size, em_bundled *out);

/* Number of method test suites. */
size_t em_bundled_suite_count(const em_bundled *b);

/*
 * Suite `s`: its method name (NUL-terminated, in the file) and number of test
 * cases. EM_ERR_INVALID_ARGUMENT when `s` is out of range.
 */
em_status em_bundled_suite(const em_bundled *b, size_t s, const char **method_out,
                           size_t *n_cases_out);

/* Test case `c` of suite `s`: its number of inputs and of expected outputs. */
em_status em_bundled_case(const em_bundled *b, size_t s, size_t c, size_t *n_inputs_out,
                          size_t *n_expected_out);

/*
 * Input `i` (expected = false) or expected output `i` (expected = true) of
 * test case `c` of suite `s`, into `out` (tensor data is a view into the file).
 */
em_status em_bundled_value_get(const em_bundled *b, size_t s, size_t c, bool expected, size_t i,
                               em_bundled_value *out);

/* Outcome of comparing one output with its expected value. */
typedef struct em_bundled_diff {
  bool pass;
  const char *why;    /* NULL, or why the value cannot match ("dtype differs", ...) */
  double max_abs_err; /* largest |actual - expected| over the elements */
  int64_t worst;      /* element index of the largest tolerance violation (or error), -1 none */
  double worst_actual, worst_expected;
  int64_t n_bad; /* elements outside the tolerance */
} em_bundled_diff;

/*
 * Compares `actual` with `expected` as ExecuTorch's bundled verification does:
 * same dtype and sizes; floating elements (f32, f64, f16, bf16) pass when they
 * are equal (infinities included), both NaN, or |actual - expected| <=
 * atol + rtol * |expected|; other dtypes and Int / Bool must be equal; a
 * Double passes within the same tolerance. Fills `diff`; returns EM_OK
 * whether or not it passes (EM_ERR_INVALID_ARGUMENT on NULL arguments).
 */
em_status em_bundled_compare(const em_bundled_value *expected, const em_evalue *actual, double rtol,
                             double atol, em_bundled_diff *diff);

#ifdef __cplusplus
}
#endif

#endif /* EMBER_PROGRAM_H */
