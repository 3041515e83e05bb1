/*
 * f32_vops__scalar.c — the elementwise, depthwise and row micro-kernels for
 * scalar (see f32_vops_impl.h; ISA flags come from CMakeLists.txt).
 */
#define EM_ISA scalar
#include "f32_vops_impl.h"
