/*
 * cpu_env.h — maps the EMBER_CPU_* environment variables onto EmberCpuBackend's options.
 *
 * For programs (the CLIs, benchmarks, tests), not for the library: libember reads no
 * environment variable, so a program that wants these switches calls this once, after
 * em_register_cpu_backend() and before preparing methods:
 *
 *   EMBER_CPU_ISA=amx|avx512f|avx2|neon|scalar   use that ISA (when this CPU has it)
 *   EMBER_CPU_NO_FUSE=1                          every operator on its own (A/B runs)
 *   EMBER_CPU_PROFILE=1                          log each operator's time at INFO
 *   EMBER_CPU_Q8_WINOGRAD=1|0                    int8 3x3 convs with a Winograd alternative:
 *                                                always f32 Winograd (1) or always int8 (0)
 *   EMBER_CPU_Q8_PIXEL_MAJOR=0                   int8 convs on the panel path, not the
 *                                                pixel-major tile (A/B runs)
 *   EMBER_CPU_THREADS_ADAPTIVE=0                 always run on the pool, even where its
 *                                                hand-off is slow (A/B runs)
 *
 * Returns the status of em_cpu_backend_configure (EM_ERR_NOT_SUPPORTED: the ISA is unknown or
 * this CPU lacks it; the best one stays chosen).
 */
#ifndef EMBER_EXT_CPU_ENV_H
#define EMBER_EXT_CPU_ENV_H

#include <stdlib.h>

#include "ember/backend_cpu.h"

static inline em_status em_cpu_backend_configure_from_env(void) {
  const char *wino = getenv("EMBER_CPU_Q8_WINOGRAD");
  const char *pw = getenv("EMBER_CPU_Q8_PIXEL_MAJOR");
  const char *ad = getenv("EMBER_CPU_THREADS_ADAPTIVE");
  em_cpu_backend_options o = {getenv("EMBER_CPU_ISA"),
                              getenv("EMBER_CPU_NO_FUSE") != NULL,
                              getenv("EMBER_CPU_PROFILE") != NULL,
                              !wino || !*wino ? 0
                              : *wino == '0'  ? -1
                                              : 1,
                              pw && *pw == '0' ? -1 : 0,
                              ad && *ad == '0' ? -1 : 0};
  em_status st = em_cpu_backend_configure(&o);
  if (st != EM_OK) { /* keep the other switches with the best ISA */
    o.isa = NULL;
    (void)em_cpu_backend_configure(&o);
  }
  return st;
}

#endif /* EMBER_EXT_CPU_ENV_H */
