/*
 * register.c — the portable kernel table, built from the ops*.def files (the
 * one list of operators that both this registry and the Python exporter read).
 *
 * Each .def line is EM_OP("ns::op.overload", c_function, n_args, dtype_mask).
 * A selective build compiles a generated table instead (tools/selective_build.py).
 */
#include "portable/kutil.h"

#define EM_OP(name, fn, n, dt) em_status fn(em_kernel_ctx *ctx, em_evalue **args);
#include "portable/ops.def"
#undef EM_OP

#if !defined(EMBER_SELECTIVE_BUILD)
static const em_kernel_entry k_portable[] = {
#define EM_OP(name, fn, n, dt) {name, fn, n, dt},
#include "portable/ops.def"
#undef EM_OP
    {NULL, NULL, 0, 0}};

em_status em_register_portable_kernels(void) {
  return em_register_kernels(k_portable, sizeof k_portable / sizeof k_portable[0] - 1);
}
#endif
