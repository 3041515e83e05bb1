/*
 * internal.h — runtime-internal structures shared by program, data map,
 * verifier and method code. Not installed.
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

/* Loads segment `idx` of the program; bounds-checked against the file. */
em_status em_program_segment(const em_program *p, uint32_t idx, const uint8_t **data,
                             uint64_t *size);

/* Constant buffer `idx`: pointer and available bytes. */
em_status em_program_constant(const em_program *p, uint32_t idx, const uint8_t **data,
                              uint64_t *avail);

/* Mutable initial-state buffer `idx`: pointer and available bytes. */
em_status em_program_mutable(const em_program *p, uint32_t idx, const uint8_t **data,
                             uint64_t *avail);

/* Full verification of a loaded program (verify.c). */
em_status em_program_verify(em_program *p);

/*
 * Reads the shape of a Tensor table: dtype, rank, sizes, dim order, numel
 * and nbytes, checking every rule of docs/pte-format.md §5. Used by the verifier,
 * by method metadata and by method preparation.
 */
typedef struct tensor_desc {
  int8_t dtype;
  uint8_t dynamism;
  int32_t dim;
  int64_t sizes[EM_MAX_DIM];
  uint8_t dim_order[EM_MAX_DIM];
  int64_t numel;
  uint64_t nbytes;
  uint32_t data_buffer_idx;
  bool planned;
  uint32_t memory_id;
  uint64_t memory_offset;
  bool external;
  const char *fqn;
} tensor_desc;

em_status em_tensor_desc_read(fb_reader *r, fb_tab tensor, tensor_desc *d);

/* Writes "name.overload" (or "name") of an Operator table into buf. */
em_status em_operator_name(fb_reader *r, fb_tab op, char *buf, size_t len);

#endif /* EMBER_SRC_INTERNAL_H */
