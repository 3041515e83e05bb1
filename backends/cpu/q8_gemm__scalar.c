/* q8_gemm__scalar.c — the portable int8 GEMM tile (q8_gemm_impl.h), plain C. */
#define EM_ISA scalar
#include "q8_gemm_impl.h"
