/*
 * config.h — the bodies of the portable kernels' optimized layer (kernels/optimized/), one
 * file per family and ISA (<family>__<isa>.c, each compiled with its own target flags by
 * CMakeLists.txt), and the tables of config.c that portable/fast_config.h hands out.
 * Internal to the kernel library: the portable kernels see only em_portable_fast_config.
 */
#ifndef EMBER_KERNELS_OPTIMIZED_CONFIG_H
#define EMBER_KERNELS_OPTIMIZED_CONFIG_H

#include "portable/fast_config.h"

#ifdef __cplusplus
extern "C" {
#endif

/* f32_gemm__avx2.c (AVX2 + FMA): nn_gemm.c's 6x16 micro-kernel, dot product (4 x 8-lane FMA
 * partial sums) and row-major matrix-vector task (NN_GEMV_RM_BODY with AVX2+FMA flags). */
void em_f32_gemm_ukernel_6x16__avx2(int64_t kc, const float *a, const float *b, int64_t ldb,
                                    float *c, int64_t rs, int64_t cs, int mr, int nr,
                                    bool accumulate);
float em_f32_dot__avx2(const float *x, const float *y, int64_t k);
void em_f32_gemv_rm_task__avx2(void *arg, int64_t begin, int64_t end);

/* f32_sigmoid__avx512f.c (AVX-512F): sigmoid and silu with e^-x from ember/vmath_exp.h, per
 * element (scalar recipe) and by rows (16 lanes), the same bits either way. */
float em_f32_sigmoid__avx512f(const float *x, const ew_op *op);
float em_f32_silu__avx512f(const float *x, const ew_op *op);
void em_f32_sigmoid_row__avx512f(float *o, const float *const *x, const int64_t *s, int64_t n,
                                 const ew_op *op);
void em_f32_silu_row__avx512f(float *o, const float *const *x, const int64_t *s, int64_t n,
                              const ew_op *op);

/* sdpa_heads__avx2.c: llama_attention.h's SDPA_HEAD_BODY with AVX2+FMA flags. */
void em_sdpa_heads__avx2(void *arg, int64_t begin, int64_t end);
/* sdpa_heads__avx512f.c: D == Dv, D % 16 == 0, D <= 256, no mask; query row and output in
 * registers, the softmax 16 scores at a time with the vmath_exp.h recipe. */
void em_sdpa_heads_d16__avx512f(void *arg, int64_t begin, int64_t end);
/* sdpa_heads__avx512f.c: tasks of an sdpa_split_job (llama_attention.h): decode with the keys
 * split (head dim 64 or 128), each kv head's rows read once for the query heads that share it
 * (up to four at a time at 64, two at 128). */
void em_sdpa_split__avx512f(void *arg, int64_t begin, int64_t end);

#ifdef __cplusplus
}
#endif

#endif /* EMBER_KERNELS_OPTIMIZED_CONFIG_H */
