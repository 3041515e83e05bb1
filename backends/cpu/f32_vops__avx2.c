/*
 * f32_vops__avx2.c — the elementwise, depthwise and row micro-kernels for
 * avx2 (see f32_vops_impl.h; ISA flags come from CMakeLists.txt).
 */
#define EM_ISA avx2
#include "f32_vops_impl.h"
