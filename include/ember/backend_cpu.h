/*
 * backend_cpu.h — EmberCpuBackend, Ember's fast CPU path (a delegate).
 *
 * Programs exported with `ember.export(..., backend="cpu")` (the default,
 * backend="auto", on a desktop / host target) hand whole subgraphs to this
 * backend; their weights are packed for its micro-kernels at
 * export time and used in place from the file. The ISA (AVX-512F, AVX2+FMA or
 * plain C) is picked once from CPUID; em_cpu_backend_configure forces a lower
 * one (the CLIs and Python bindings map EMBER_CPU_ISA, EMBER_CPU_NO_FUSE and
 * EMBER_CPU_PROFILE onto it; the library reads no environment variable).
 * Register it once, before preparing methods:
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

/* Options of the delegates initialized after em_cpu_backend_configure(). */
typedef struct em_cpu_backend_options {
  /* The ISA to use ("amx", "avx512f", "avx2", "neon", "scalar"); NULL or "": the best this CPU
     runs. Also caps the quantized linear kernels, which share the backend's CPU probe. */
  const char *isa;
  /* Every operator runs on its own (no depthwise chains): for A/B measurements. */
  bool no_fuse;
  /* Logs each operator's time at INFO on every execute (one thread: its CPU time; with a pool:
     wall-clock time). */
  bool profile;
  /* Int8 3x3 convs stored with a Winograd alternative (blob EMC_CONV_Q8_WINO): 0 the default
     (int8: faster on every CPU measured, Zen 4 and Zen 5), 1 always runs them as f32 Winograd,
     -1 always in int8. */
  int q8_winograd;
  /* Ungrouped int8 convs (no fused residual): 0 the default (the pixel-major tile, no im2col
     panels, where the ISA has one: AVX-512 VNNI), -1 always the panel path (A/B runs, tests). */
  int q8_pixel_major;
  /* With a pool: 0 the default (each delegate probes now and then how fast the pool's threads
     hand work to each other; where slow, the threads on cores far apart or one core busy with
     another process, it times its executes with and without the pool and keeps the faster:
     the same bits either way), -1 always the pool (A/B runs). */
  int threads_adaptive;
} em_cpu_backend_options;

/*
 * Sets the options for delegates initialized from now on (those already initialized keep
 * theirs). EM_ERR_NOT_SUPPORTED, and nothing changed, when `opts->isa` is unknown or this CPU
 * lacks it; EM_ERR_INVALID_ARGUMENT for a NULL `opts`. Call it before preparing methods, not
 * while another thread initializes a delegate.
 */
em_status em_cpu_backend_configure(const em_cpu_backend_options *opts);

/* The ISA the backend's micro-kernels use on this CPU ("amx": AVX-512 with the AMX bf16x3 GEMM
 * path, "avx512f", "avx2", "neon", "scalar"). */
const char *em_cpu_backend_isa(void);

#ifdef __cplusplus
}
#endif

#endif /* EMBER_BACKEND_CPU_H */
