/*
 * kernel.h — the kernel author's API and the kernel registry.
 *
 * A kernel is a boxed call over the method's values, with the ATen argument
 * convention of ExecuTorch (docs/pte-format.md §6): every schema argument in order,
 * out= arguments included, then the return value(s). `aten::add.out` receives
 * [self, other, alpha, out, out].
 *
 * Registration is explicit (no static constructors): a library exposes a table
 * and the application registers it once, before preparing methods.
 *
 *     static em_status relu_out(em_kernel_ctx *ctx, em_evalue **args) {
 *       em_tensor *in = args[0]->u.tensor, *out = args[1]->u.tensor;
 *       ...
 *       return EM_OK;
 *     }
 *     static const em_kernel_entry k[] = {
 *       {"aten::relu.out", relu_out, 3, EM_DTYPE_BIT(EM_DTYPE_F32)},
 *     };
 *     em_register_kernels(k, 1);
 */
#ifndef EMBER_KERNEL_H
#define EMBER_KERNEL_H

#include <stddef.h>
#include <stdint.h>

#include "ember/allocator.h"
#include "ember/status.h"
#include "ember/tensor.h"
#include "ember/threadpool.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a kernel may use while it runs. */
typedef struct em_kernel_ctx {
  em_allocator *temp;  /* scratch, reset after every instruction; may be NULL */
  em_threadpool *pool; /* NULL = serial */
  const char *op_name; /* "aten::add.out", for messages */
} em_kernel_ctx;

/* Returns `n` bytes of scratch aligned to `align`, valid until the instruction ends; NULL if none.
 */
void *em_kernel_alloc_temp(em_kernel_ctx *ctx, size_t n, size_t align);

/* A kernel: returns EM_OK or an error (and logs what was wrong). */
typedef em_status (*em_kernel_fn)(em_kernel_ctx *ctx, em_evalue **args);

/* Marks an entry whose argument count is not fixed. */
#define EM_ARGS_VARIABLE (-1)

/* One registered operator. */
typedef struct em_kernel_entry {
  const char *name; /* "namespace::op.overload" ("aten::copy_" when no overload) */
  em_kernel_fn fn;
  int32_t n_args;  /* schema arguments + returns, or EM_ARGS_VARIABLE */
  uint32_t dtypes; /* mask of EM_DTYPE_BIT()s the kernel accepts (informational) */
} em_kernel_entry;

/* Capacity of the global kernel registry. */
#ifndef EM_MAX_KERNELS
#define EM_MAX_KERNELS 1024
#endif

/*
 * Registers `n` entries (retained: the table must outlive the registry).
 * A name already registered is replaced by the later entry, so optimized
 * libraries registered after the portable one override it.
 * EM_ERR_REGISTRATION_EXCEEDING_MAX_KERNELS when the registry is full.
 */
em_status em_register_kernels(const em_kernel_entry *entries, size_t n);

/* Looks a kernel up by full name; NULL when missing. */
const em_kernel_entry *em_find_kernel(const char *name);

/* Number of registered kernels, and the i-th (in registration order). */
size_t em_kernel_count(void);
const em_kernel_entry *em_kernel_at(size_t i);

/* Removes every registration (tests). */
void em_registry_clear(void);

/* Registers the always-present prim ops (aten::sym_size.int, executorch_prim::*). */
em_status em_register_prim_ops(void);

/* Registers the portable kernel library (kernels/portable). */
em_status em_register_portable_kernels(void);

/* Registers Ember's integer-only quantized kernels (kernels/quantized, ember:: namespace). */
em_status em_register_quantized_kernels(void);

#ifdef __cplusplus
}
#endif

#endif /* EMBER_KERNEL_H */
