/*
 * cpu.h — the CPU features Ember's kernels may use, detected once, and the one cap on them.
 *
 * Every ISA choice in the library (EmberCpuBackend's micro-kernels, the quantized linear
 * kernels, the optimized paths of the portable GEMM, activations and attention) reads these
 * flags, so one call caps all of them:
 *
 *     em_cpu_set_isa_cap("avx2");     // no AVX-512 / AMX anywhere from now on
 *     em_cpu_set_isa_cap("scalar");   // plain C everywhere (tests of the fallback paths)
 *     em_cpu_set_isa_cap(NULL);       // back to everything the CPU has
 *
 * Caps, from the most to the least: "amx" (= everything), "avx512f" (AVX-512 with VNNI/BW/BF16
 * where present, no AMX), "avx2" (AVX2 + FMA), "neon" (AArch64), "scalar". The library reads no
 * environment variable: the CLIs map EMBER_CPU_ISA onto this (ember_ext/cpu_env.h).
 */
#ifndef EMBER_CPU_H
#define EMBER_CPU_H

#include <stdbool.h>

#include "ember/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct em_cpu_features {
  bool avx2_fma;   /* AVX2 and FMA3 */
  bool avx512f;    /* AVX-512 Foundation */
  bool avx512bw;   /* AVX-512 byte/word */
  bool avx512vnni; /* AVX-512 VNNI (vpdpbusd) */
  bool avx512bf16; /* AVX-512 BF16 */
  bool amx_bf16;   /* AMX tiles with bf16 products, and the OS lets this process use them */
  bool neon;       /* AArch64 Advanced SIMD */
  /* AVX-512 executed as two 256-bit halves (AMD family 19h, Zen 4): half the int8 VNNI
     throughput per instruction of full-width cores, for kernel choices that trade int8 products
     for f32 ones (measured, none does today: EmberCpuBackend's int8 3x3 convs beat their f32
     Winograd alternative there too). */
  bool avx512_split;
  bool avx512vbmi; /* AVX-512 VBMI and VL (vpermi2b: 128-byte table lookups) */
} em_cpu_features;

/* The features of this CPU under the current cap (detected on the first call; thread-safe). */
const em_cpu_features *em_cpu_features_get(void);

/* The features of this CPU with no cap. */
const em_cpu_features *em_cpu_features_detected(void);

/*
 * Caps every later ISA choice at `isa` (see above; NULL or "": no cap). EM_ERR_NOT_SUPPORTED,
 * and the cap unchanged, for an unknown name or one this CPU cannot run (e.g. "avx512f" on an
 * AVX2-only CPU). Choices already made (delegates initialized) keep their ISA.
 */
em_status em_cpu_set_isa_cap(const char *isa);

/* The current cap's name ("none" when there is none). */
const char *em_cpu_isa_cap(void);

#ifdef __cplusplus
}
#endif

#endif /* EMBER_CPU_H */
