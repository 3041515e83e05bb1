/*
 * f32_vops__neon.c — the elementwise, depthwise and row micro-kernels for
 * neon (AArch64; see f32_vops_impl.h, whose loops GCC vectorizes to 4-lane
 * NEON since Advanced SIMD is the AArch64 baseline; flags from CMakeLists.txt).
 * Compiles to nothing on other CPUs.
 */
#include "cpu_ukernels.h"

#if defined(__aarch64__)
#define EM_ISA neon
#include "f32_vops_impl.h"
#endif
