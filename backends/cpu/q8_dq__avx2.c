/* q8_dq__avx2.c — the portable dynamic int8 linear kernels (q8_dq_impl.h) compiled with AVX2
 * (x86 only). */
#define EM_ISA avx2
#include "q8_dq_impl.h"
