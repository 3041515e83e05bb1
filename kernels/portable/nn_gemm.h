/*
 * nn_gemm.h — what the f32 GEMM of nn_gemm.c shares with its optional optimized layer
 * (kernels/optimized/, reached through portable/fast_config.h): the micro-kernel tile
 * (NN_GEMM_MR x NN_GEMM_NR), and the row-major matrix-vector task, whose plain C body
 * (NN_GEMV_RM_BODY) is compiled twice: here for any CPU, there with AVX2+FMA flags.
 * Plain C only: no intrinsics.
 */
#ifndef EMBER_KERNELS_PORTABLE_NN_GEMM_H
#define EMBER_KERNELS_PORTABLE_NN_GEMM_H

#include "portable/nn_util.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The micro-kernel's tile: NN_GEMM_MR rows of C by NN_GEMM_NR columns. */
#define NN_GEMM_MR 6
#define NN_GEMM_NR 16

/*
 * Row-major B (x @ W^T with W^T stored [K, N], as the exporter folds linear
 * weights): B is streamed in storage order. The K rows are split into
 * contiguous ranges of rows_per_task; task t accumulates a[i][p] * B[p][:] over
 * its rows into its own m x n partial sums part[t] (scratch carved before the
 * loop), so every task reads one sequential stream; the caller adds the partials.
 */
typedef struct nn_gemv_rm_job {
  nn_mat a, b, c;
  int64_t m, n, k, rows_per_task;
  float *part; /* [task][m][n] */
} nn_gemv_rm_job;

/* The body of an em_parallel_fn over tasks [begin, end) of the nn_gemv_rm_job at `arg`. */
#define NN_GEMV_RM_BODY                                                                            \
  const nn_gemv_rm_job *j = arg;                                                                   \
  int64_t m = j->m, n = j->n;                                                                      \
  for (int64_t t = begin; t < end; t++) {                                                          \
    float *restrict acc = j->part + t * m * n;                                                     \
    for (int64_t q = 0; q < m * n; q++) acc[q] = 0.0f;                                             \
    int64_t p0 = t * j->rows_per_task;                                                             \
    int64_t p1 = p0 + j->rows_per_task < j->k ? p0 + j->rows_per_task : j->k;                      \
    for (int64_t p = p0; p < p1; p++) {                                                            \
      const float *restrict bp = j->b.p + p * j->b.rs;                                             \
      for (int64_t i = 0; i < m; i++) {                                                            \
        float av = j->a.p[i * j->a.rs + p * j->a.cs];                                              \
        float *restrict ai = acc + i * n;                                                          \
        for (int64_t q = 0; q < n; q++) ai[q] += av * bp[q];                                       \
      }                                                                                            \
    }                                                                                              \
  }

#ifdef __cplusplus
}
#endif

#endif /* EMBER_KERNELS_PORTABLE_NN_GEMM_H */
