/*
 * f32_vops__avx512f.c — the elementwise, depthwise and row micro-kernels for
 * avx512f (see f32_vops_impl.h; ISA flags come from CMakeLists.txt), with the
 * Winograd transforms written in intrinsics (f32_wino__avx512f.c).
 */
#define EM_ISA           avx512f
#define EM_VOPS_OWN_WINO 1
#include "f32_vops_impl.h"
