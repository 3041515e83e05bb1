/*
 * register.c — the prim-op table (aten::sym_size.int, executorch_prim::*).
 */
#include "portable/kutil.h"

#define EM_OP(name, fn, n, dt) em_status fn(em_kernel_ctx *ctx, em_evalue **args);
#include "prim/ops.def"
#undef EM_OP

static const em_kernel_entry k_prim[] = {
#define EM_OP(name, fn, n, dt) {name, fn, n, dt},
#include "prim/ops.def"
#undef EM_OP
    {NULL, NULL, 0, 0}};

em_status em_register_prim_ops(void) {
  return em_register_kernels(k_prim, sizeof k_prim / sizeof k_prim[0] - 1);
}
