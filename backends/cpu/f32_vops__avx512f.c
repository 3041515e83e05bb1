/*
 * f32_vops__avx512f.c — the elementwise, depthwise and row micro-kernels for
 * avx512f (see f32_vops_impl.h; ISA flags come from CMakeLists.txt), with the
 * Winograd transforms (f32_wino__avx512f.c), the softmax and GELU rows and the
 * 6-row panel GEMV (f32_rows__avx512f.c) written in intrinsics.
 */
#define EM_ISA                avx512f
#define EM_VOPS_OWN_WINO      1
#define EM_VOPS_OWN_SOFTMAX   1
#define EM_VOPS_OWN_NORM      1 /* f32_rows__avx512f.c */
#define EM_VOPS_OWN_GEMV6     1
#define EM_VOPS_OWN_TRANSPOSE 1 /* f32_transpose__avx512f.c */
#define EM_VOPS_GELU_ROW      em_f32_gelu_row__avx512f
#define EM_VOPS_HSFQ_ROW      em_f32_hardswish_fq_row__avx512f
#include "f32_vops_impl.h"
