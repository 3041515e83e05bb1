/*
 * method.h — preparing and executing one method of a program.
 *
 * Preparation builds every value, binds planned tensors to the caller's arenas,
 * copies mutable-buffer initial state, resolves every operator once (reporting
 * all missing operators in one error) and initializes delegates. Execution
 * allocates nothing: all memory came from the config.
 *
 *     em_method_config cfg = {.method_alloc = &ma, .temp_alloc = &ta,
 *                             .arenas = arenas, .arena_sizes = sizes, .n_arenas = 1};
 *     em_method *m;
 *     em_method_prepare(prog, "forward", &cfg, &m);
 *     em_method_set_input_tensor(m, 0, &x);
 *     em_method_execute(m);
 *     const em_tensor *y = em_evalue_tensor(em_method_output(m, 0));
 *     em_method_destroy(m);
 */
#ifndef EMBER_METHOD_H
#define EMBER_METHOD_H

#include <stddef.h>
#include <stdint.h>

#include "ember/allocator.h"
#include "ember/data_map.h"
#include "ember/profiler.h"
#include "ember/program.h"
#include "ember/status.h"
#include "ember/tensor.h"
#include "ember/threadpool.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct em_method em_method;

/* Memory and services a method runs with. All pointers are retained. */
typedef struct em_method_config {
  em_allocator *method_alloc;  /* required: values, tensors, kernel table, delegate state */
  em_allocator *temp_alloc;    /* optional: kernel scratch, reset after every instruction */
  uint8_t **arenas;            /* planned memory: arenas[i] is memory_id i + 1 */
  const uint64_t *arena_sizes; /* bytes of each arena */
  size_t n_arenas;
  const em_data_map *external; /* optional `.ptd` data for EXTERNAL tensors */
  em_threadpool *pool;         /* optional */
  const em_profiler *profiler; /* optional */
  uint64_t max_instructions;   /* 0 = 10,000,000 (guards against loops) */
} em_method_config;

/* Prepares method `name` of `p`. On failure, em_last_error() says what was wrong. */
em_status em_method_prepare(const em_program *p, const char *name, const em_method_config *cfg,
                            em_method **method_out);

/* Number of inputs and outputs. */
size_t em_method_input_count(const em_method *m);
size_t em_method_output_count(const em_method *m);

/* The current value of input i (read-only view), NULL when out of range. */
const em_evalue *em_method_input(const em_method *m, size_t i);

/*
 * Sets tensor input i from `src`: checks dtype and shape (a dynamic input may
 * shrink within its bound), then copies into planned memory or, for an
 * unplanned input, shares src->data (retained until the next set_input).
 * Planned input memory is reused by the method's own values once the input
 * has been read: set every input again before each execute.
 */
em_status em_method_set_input_tensor(em_method *m, size_t i, const em_tensor *src);

/*
 * As em_method_set_input_tensor, but without the copy where the method lets it: a planned
 * input that no instruction writes, moves, frees or views and that is not an output is read
 * from src->data itself by the next execute, which then points the input back at its planned
 * memory. src->data must stay alive and unchanged until that execute returns; bind (or set)
 * the input again before each execute. Inputs the method may write are copied, as
 * em_method_set_input_tensor does.
 */
em_status em_method_bind_input_tensor(em_method *m, size_t i, const em_tensor *src);

/* Sets a non-tensor input; it must equal the value the program was traced with. */
em_status em_method_set_input(em_method *m, size_t i, const em_evalue *v);

/* Gives an unplanned output tensor its memory (retained). */
em_status em_method_set_output_data(em_method *m, size_t i, void *data, size_t nbytes);

/* Runs the method. Allocation-free. */
em_status em_method_execute(em_method *m);

/* Output i after execute (tensors point into planned memory until the next execute). */
const em_evalue *em_method_output(const em_method *m, size_t i);

/* Number of values, and value i (for debugging tools). */
size_t em_method_value_count(const em_method *m);
const em_evalue *em_method_value(const em_method *m, size_t i);

/* Destroys delegates; the memory belongs to the caller's allocators. NULL is a no-op. */
void em_method_destroy(em_method *m);

#ifdef __cplusplus
}
#endif

#endif /* EMBER_METHOD_H */
