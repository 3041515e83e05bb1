/*
 * register.c — the table of Ember's integer-only quantized kernels (kernels/quantized/ops.def).
 * Not part of em_register_portable_kernels(): an application (or a selective build, which copies
 * these entries into its own table) registers them with em_register_quantized_kernels().
 */
#include "portable/kutil.h"

em_status em_register_quantized_kernels(void);

#define EM_OP(name, fn, n, dt) em_status fn(em_kernel_ctx *ctx, em_evalue **args);
#include "quantized/ops.def"
#undef EM_OP

static const em_kernel_entry k_quantized[] = {
#define EM_OP(name, fn, n, dt) {name, fn, n, dt},
#include "quantized/ops.def"
#undef EM_OP
    {NULL, NULL, 0, 0}};

em_status em_register_quantized_kernels(void) {
  return em_register_kernels(k_quantized, sizeof k_quantized / sizeof k_quantized[0] - 1);
}
