/*
 * backend_cpu.h — EmberCpuBackend, Ember's fast CPU path (a delegate).
 *
 * Programs exported with `ember.export(..., backend="cpu")` (the default,
 * backend="auto", on a desktop / host target) hand whole subgraphs to this
 * backend; their weights are packed for its micro-kernels at
 * export time and used in place from the file. The ISA (AVX-512F, AVX2+FMA or
 * plain C) is picked once from CPUID; EMBER_CPU_ISA=avx2|scalar forces a lower
 * one. Register it once, before preparing methods:
 *
 *     em_register_portable_kernels();
 *     em_register_cpu_backend();
 *     ... em_program_load / em_method_prepare (with a thread pool for speed) ...
 */
#ifndef EMBER_BACKEND_CPU_H
#define EMBER_BACKEND_CPU_H

#include "ember/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The id the exporter writes into BackendDelegate.id. */
#define EM_CPU_BACKEND_NAME "EmberCpuBackend"

/* Registers EmberCpuBackend (EM_ERR_REGISTRATION_ALREADY_REGISTERED when it already is). */
em_status em_register_cpu_backend(void);

/* The ISA the backend's micro-kernels use on this CPU ("amx": AVX-512 with the AMX bf16x3 GEMM
 * path, "avx512f", "avx2", "neon", "scalar"). */
const char *em_cpu_backend_isa(void);

#ifdef __cplusplus
}
#endif

#endif /* EMBER_BACKEND_CPU_H */
