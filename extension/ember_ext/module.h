/*
 * module.h — a convenience owner of a program and its prepared methods, for
 * callers who don't want to size allocators and arenas themselves (extension:
 * uses the heap). Mirrors ExecuTorch's extension/module.
 *
 *     em_module *mod;
 *     if (em_module_open("model.pte", NULL, &mod) != EM_OK) { puts(em_last_error()); ... }
 *     em_method *fwd;
 *     em_module_method(mod, "forward", &fwd);   // prepared once, then cached
 *     em_method_set_input_tensor(fwd, 0, &x);
 *     em_method_execute(fwd);
 *     em_module_destroy(mod);
 */
#ifndef EMBER_EXT_MODULE_H
#define EMBER_EXT_MODULE_H

#include "ember/ember.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct em_module em_module;

/* Options for em_module_open_ex; zero-initialize and set what you need. */
typedef struct em_module_options {
  em_verification verification; /* default EM_VERIFY_FULL */
  int use_mmap;                 /* 1 maps the files (also when opts is NULL), 0 reads them */
  em_threadpool *pool;          /* used by every method; retained */
  const em_profiler *profiler;  /* used by every method; retained */
  size_t temp_bytes;            /* scratch per method (default 64 MiB, reserved lazily) */
  uint64_t max_memory_bytes;    /* 0 = no limit; else the most bytes the module may hold for
                                   all prepared methods (planned arenas + scratch + method
                                   memory), checked before allocating: a method that would pass
                                   it fails with EM_ERR_MEMORY_ALLOCATION_FAILED, naming the
                                   arena (or scratch) and its size */
} em_module_options;

/* Opens `pte_path` (mmap) and, when not NULL, the `.ptd` at `ptd_path`. */
em_status em_module_open(const char *pte_path, const char *ptd_path, em_module **out);

/* As em_module_open with options (NULL = defaults). */
em_status em_module_open_ex(const char *pte_path, const char *ptd_path,
                            const em_module_options *opts, em_module **out);

/* Opens programs held in memory; the bytes are copied into aligned storage. */
em_status em_module_open_buffer(const void *pte, size_t pte_n, const void *ptd, size_t ptd_n,
                                const em_module_options *opts, em_module **out);

/* The loaded program. */
const em_program *em_module_program(const em_module *mod);

/* Prepares method `name` on first use (allocating its memory) and returns it. */
em_status em_module_method(em_module *mod, const char *name, em_method **out);

/* Bytes the module allocated for method `name` (method memory, arenas); 0 if not prepared. */
size_t em_module_method_bytes(const em_module *mod, const char *name);

/* Destroys methods, frees memory, unmaps files. NULL is a no-op. */
void em_module_destroy(em_module *mod);

#ifdef __cplusplus
}
#endif

#endif /* EMBER_EXT_MODULE_H */
