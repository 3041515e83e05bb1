/* q8_dq__scalar.c — the portable dynamic int8 linear kernels (q8_dq_impl.h), baseline ISA. */
#define EM_ISA scalar
#include "q8_dq_impl.h"
