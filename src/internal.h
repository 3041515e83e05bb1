/*
 * internal.h — runtime-internal structures shared by program, data map,
 * verifier and method code. Not installed. It includes verify.h (the verifier and
 * the checked Tensor / Operator table readers) for the files that use both.
 */
#ifndef EMBER_SRC_INTERNAL_H
#define EMBER_SRC_INTERNAL_H

#include "ember/backend.h"
#include "ember/data_map.h"
#include "ember/kernel.h"
#include "ember/method.h"
#include "ember/platform.h"
#include "ember/program.h"
#include "flatbuf.h"
#include "schema.h"
#include "verify.h"

/* Logs an error and returns `status` from the current function. */
#define EM_FAIL(status, ...)                                                                       \
  do {                                                                                             \
    EM_LOG_ERROR(__VA_ARGS__);                                                                     \
    return (status);                                                                               \
  } while (0)

#define EM_TRY(expr)                                                                               \
  do {                                                                                             \
    em_status st_ = (expr);                                                                        \
    if (st_ != EM_OK) return st_;                                                                  \
  } while (0)

/* A `.ptd` map or a program's own named data. */
struct em_data_map {
  em_data_loader *loader;
  fb_reader r;
  fb_tab root;
  fb_vec segments; /* DataSegment tables */
  fb_vec named;    /* NamedData tables */
  uint64_t seg_base;
  uint64_t seg_data_size;
  bool has_layouts; /* FlatTensor (true) or program named data (false) */
};

struct em_program {
  em_data_loader *loader;
  const uint8_t *bytes; /* [0, program_size) */
  fb_reader r;
  fb_tab root;
  uint64_t file_size;
  uint64_t program_size;
  uint64_t seg_base;
  uint64_t seg_data_size;
  bool has_header;
  fb_vec plans;
  fb_vec segments;
  fb_vec constant_buffer; /* legacy Buffer tables */
  fb_vec delegate_data;   /* BackendDelegateInlineData tables */
  /* constants in a segment */
  const uint8_t *const_seg;
  uint64_t const_seg_size;
  fb_vec const_offsets; /* u64, offsets[0] is a placeholder */
  bool legacy_constants;
  /* mutable initial state (always mutable_data_segments[0]) */
  fb_tab mutable_seg;
  bool has_named;
  struct em_data_map named;
};

/* Loads segment `idx` of the program; bounds-checked against the file (program_segments.c). */
em_status em_program_segment(const em_program *p, uint32_t idx, const uint8_t **data,
                             uint64_t *size);

/* Constant buffer `idx`: pointer and available bytes (program_segments.c). */
em_status em_program_constant(const em_program *p, uint32_t idx, const uint8_t **data,
                              uint64_t *avail);

/* Mutable initial-state buffer `idx`: pointer and available bytes (program_segments.c). */
em_status em_program_mutable(const em_program *p, uint32_t idx, const uint8_t **data,
                             uint64_t *avail);

#endif /* EMBER_SRC_INTERNAL_H */
