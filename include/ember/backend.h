/*
 * backend.h — the delegate interface and the backend registry.
 *
 * A backend runs a subgraph that the exporter handed it as an opaque blob
 * (BackendDelegate.processed). Backends are registered explicitly, once, and
 * looked up by id when a method is prepared; an unknown id fails preparation.
 * New members are only ever added at the end of em_backend (versioned ABI).
 *
 *     static const em_backend my_backend = {
 *       .name = "EmberCpuBackend", .init = my_init, .execute = my_execute,
 *     };
 *     em_register_backend(&my_backend);
 */
#ifndef EMBER_BACKEND_H
#define EMBER_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ember/allocator.h"
#include "ember/data_map.h"
#include "ember/profiler.h"
#include "ember/status.h"
#include "ember/tensor.h"
#include "ember/threadpool.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A compile spec, passed verbatim from the file. */
typedef struct em_compile_spec {
  const char *key;
  const void *value;
  size_t nbytes;
} em_compile_spec;

/* What init may use. */
typedef struct em_backend_init_ctx {
  em_allocator *method_alloc; /* lives as long as the method: allocate the handle here */
  const char *method_name;
  const em_data_map *named_data; /* the program's named data, or NULL */
  const em_data_map *external;   /* the external `.ptd` map, or NULL */
  em_threadpool *pool;
} em_backend_init_ctx;

/* What execute may use. */
typedef struct em_backend_exec_ctx {
  em_allocator *temp; /* reset after the call; may be NULL */
  em_threadpool *pool;
  const char *method_name;
  /* Appended: the method's profiler when it has a recorder, else NULL; and the delegate call's
   * chain and instruction index. A backend may hand the recorder one EM_PROFILE_DELEGATE_OP
   * event per operator it runs (ember/profiler.h), with these ids. */
  const struct em_profiler *profiler;
  int32_t chain;
  int32_t instruction;
} em_backend_exec_ctx;

typedef struct em_backend {
  const char *name;
  /* NULL means always available. */
  bool (*is_available)(void);
  /*
   * Validates and binds a blob (untrusted bytes); `blob` stays valid for the
   * method's lifetime. Sets *handle_out.
   */
  em_status (*init)(em_backend_init_ctx *ctx, const void *blob, size_t blob_nbytes,
                    const em_compile_spec *specs, size_t n_specs, void **handle_out);
  /* Runs the subgraph: args are the delegate inputs, then its outputs. */
  em_status (*execute)(em_backend_exec_ctx *ctx, void *handle, em_evalue **args, size_t n_args);
  /* Releases what init acquired; NULL means nothing to do. */
  void (*destroy)(void *handle);
} em_backend;

/* Most backends a registry holds. */
#define EM_MAX_BACKENDS 16

/* Registers `b` (retained). EM_ERR_REGISTRATION_ALREADY_REGISTERED for a duplicate name. */
em_status em_register_backend(const em_backend *b);

/* Finds a backend by name; NULL when missing. */
const em_backend *em_find_backend(const char *name);

/* Removes every backend registration (tests). */
void em_backends_clear(void);

#ifdef __cplusplus
}
#endif

#endif /* EMBER_BACKEND_H */
