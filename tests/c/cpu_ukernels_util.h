/*
 * cpu_ukernels_util.h — shared by the EmberCpuBackend micro-kernel tests
 * (test_cpu_ukernels_*.c): a seeded random source, a relative tolerance check, the sentinel
 * written around outputs, and the loop over every ISA configuration this CPU runs.
 */
#ifndef EMBER_TESTS_CPU_UKERNELS_UTIL_H
#define EMBER_TESTS_CPU_UKERNELS_UTIL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../backends/cpu/cpu_internal.h"
#include "../../backends/cpu/cpu_ukernels.h"
#include "../../backends/cpu/emc_format.h"
#include "ember/threadpool.h"
#include "test_util.h"

static unsigned g_seed = 12345;

/* A pseudo-random float in [-1, 1) from a fixed seed (the same values on every run). */
static inline float frand(void) {
  g_seed = g_seed * 1103515245u + 12345u;
  return (float)((g_seed >> 8) & 0xFFFF) / 32768.0f - 1.0f;
}

/* The output quantizers and product clamps the scaled-quantizer tests sweep (test_q8_quant_scaled,
 * test_q8_lut_readers): a plain u8 range, and one with a relu6 narrower than it; no clamp, a
 * relu6, and one outside the quantizer's own range. */
static const em_q8_quant_params k_scaled_quants[2] = {
    {10.0f, 3.0f, 0.0f, 255.0f, -INFINITY, INFINITY}, {4.0f, 100.0f, 0.0f, 255.0f, 0.0f, 6.0f}};
static const em_minmax_params k_scaled_clamps[3] = {
    {-INFINITY, INFINITY, 0}, {0.0f, 6.0f, 0}, {-3.0f, -1.0f, 0}};

/* |got - want| within tol relative to 1 + |want|. */
static inline int close_to(double got, double want, double tol) {
  return fabs(got - want) <= tol * (1.0 + fabs(want));
}

/* Written around and past outputs; a kernel that writes outside its tile changes it. */
#define SENTINEL 12345.0f

/* Calls run(cfg) for every ISA configuration this CPU runs (amx, avx512f, avx2, neon, scalar),
 * printing the ones it does not; returns how many ran. */
static inline int for_each_isa(void (*run)(const em_cpu_config *cfg)) {
  static const char *isas[] = {"amx", "avx512f", "avx2", "neon", "scalar"};
  int tested = 0;
  for (size_t i = 0; i < sizeof isas / sizeof isas[0]; i++) {
    const em_cpu_config *cfg = em_cpu_config_for(isas[i]);
    if (!cfg) {
      printf("%s: not supported on this CPU, skipped\n", isas[i]);
      continue;
    }
    tested++;
    run(cfg);
  }
  return tested;
}

#endif
