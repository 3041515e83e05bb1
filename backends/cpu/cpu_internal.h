/*
 * cpu_internal.h — the CPU backend's bound state, shared by cpu_backend.c
 * (blob parsing, validation, binding) and cpu_ops.c (operator validation and
 * execution).
 */
#ifndef EMBER_BACKENDS_CPU_INTERNAL_H
#define EMBER_BACKENDS_CPU_INTERNAL_H

#include <stdint.h>

#include "cpu_ukernels.h"
#include "ember/status.h"
#include "ember/threadpool.h"
#include "emc_format.h"

/* One tensor of the blob, bound to memory. */
typedef struct emc_rt_tensor {
  float *data; /* constants and arena tensors: set at init; arguments: at every execute */
  int64_t numel;
  uint32_t ndim;
  uint32_t storage;
  uint32_t index;
  int64_t sizes[EMC_MAX_DIMS];
} emc_rt_tensor;

typedef struct emc_delegate {
  const em_cpu_config *cfg;
  uint32_t n_tensors, n_ops, n_inputs, n_outputs;
  emc_rt_tensor *t;  /* [n_tensors] */
  emc_op *ops;       /* [n_ops], copied from the blob (aligned) */
  int64_t *arg_need; /* [n_inputs + n_outputs]: the most elements any tensor reads from an arg */
  uint8_t *arena;
  uint64_t arena_nbytes;
} emc_delegate;

/*
 * Checks op against the bound tensors (ids, shapes, parameters, scratch) so
 * that running it can never touch memory outside its tensors. Writes a reason
 * to why (at least 160 bytes) and returns false when it is invalid.
 */
bool emc_op_check(const emc_delegate *d, const emc_op *op, char *why, size_t why_n);

/* Runs one validated operator on the pool. */
em_status emc_op_run(const emc_delegate *d, const emc_op *op, em_threadpool *pool);

#endif /* EMBER_BACKENDS_CPU_INTERNAL_H */
