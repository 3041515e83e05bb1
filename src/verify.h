/*
 * verify.h — the verifier's interface (verify.c): full verification of a loaded program, and the
 * checked readers of Tensor and Operator tables that program metadata (program.c) and method
 * preparation (method.c) share with it. Not installed.
 *
 * Layering: verify.c sits below program.c. It reads the parsed flatbuffer and the program's byte
 * ranges (program_segments.c) and calls nothing in program.c; program.c calls it at load
 * (EM_VERIFY_FULL) and for method metadata. tests/python/test_layering.py keeps it so.
 */
#ifndef EMBER_SRC_VERIFY_H
#define EMBER_SRC_VERIFY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ember/program.h"
#include "flatbuf.h"

/*
 * Full verification of a loaded program: every table the runtime will read, every segment,
 * constant and planned range, instruction arguments and operand aliasing. EM_OK, or
 * EM_ERR_INVALID_PROGRAM / EM_ERR_NOT_SUPPORTED with the reason logged.
 */
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

/* Fills *d from Tensor table `tensor`; EM_OK or the first broken rule (logged). */
em_status em_tensor_desc_read(fb_reader *r, fb_tab tensor, tensor_desc *d);

/* Writes "name.overload" (or "name") of an Operator table into buf; refuses a missing, too long
 * (for len) or non-printable name. */
em_status em_operator_name(fb_reader *r, fb_tab op, char *buf, size_t len);

#endif /* EMBER_SRC_VERIFY_H */
