/*
 * f32_vops__avx512f.c — the elementwise, depthwise and row micro-kernels for
 * avx512f (see f32_vops_impl.h; ISA flags come from CMakeLists.txt).
 */
#define EM_ISA avx512f
#include "f32_vops_impl.h"
