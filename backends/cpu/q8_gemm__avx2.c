/* q8_gemm__avx2.c — the portable int8 GEMM tile (q8_gemm_impl.h) compiled with AVX2 (x86 only). */
#define EM_ISA avx2
#include "q8_gemm_impl.h"
