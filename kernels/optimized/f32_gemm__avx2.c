/*
 * f32_gemm__avx2.c — the AVX2+FMA bodies of the portable f32 GEMM (kernels/portable/nn_gemm.c):
 * the 6x16 micro-kernel in 12 ymm accumulators, the dot product of the matrix-vector path, and
 * the row-major matrix-vector task (nn_gemm.h's NN_GEMV_RM_BODY compiled for AVX2+FMA).
 * Compiled with -mavx2 -mfma (CMakeLists.txt); the target attributes say the same, so the file
 * does not depend on them. Reached through config.c's tables only.
 */
#include <immintrin.h>

#include "optimized/config.h"
#include "portable/nn_gemm.h"

#define MR NN_GEMM_MR
#define NR NN_GEMM_NR

/* 6x16 tile in 12 ymm accumulators: per k, two B vectors and six A broadcasts. */
__attribute__((target("avx2,fma"))) void
em_f32_gemm_ukernel_6x16__avx2(int64_t kc, const float *a, const float *b, int64_t ldb, float *c,
                               int64_t rs, int64_t cs, int mr, int nr, bool accumulate) {
  __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps();
  __m256 c10 = _mm256_setzero_ps(), c11 = _mm256_setzero_ps();
  __m256 c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps();
  __m256 c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps();
  __m256 c40 = _mm256_setzero_ps(), c41 = _mm256_setzero_ps();
  __m256 c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();
  for (int64_t p = 0; p < kc; p++) {
    if (ldb != NR) /* B read in place (row stride ldb): fetch row p of the panel two ahead */
      _mm_prefetch((const char *)((uintptr_t)(b + p * ldb) + 2 * NR * sizeof(float)), _MM_HINT_T0);
    __m256 b0 = _mm256_loadu_ps(b + p * ldb), b1 = _mm256_loadu_ps(b + p * ldb + 8);
    const float *ap = a + p * MR;
    __m256 av = _mm256_broadcast_ss(ap + 0);
    c00 = _mm256_fmadd_ps(av, b0, c00);
    c01 = _mm256_fmadd_ps(av, b1, c01);
    av = _mm256_broadcast_ss(ap + 1);
    c10 = _mm256_fmadd_ps(av, b0, c10);
    c11 = _mm256_fmadd_ps(av, b1, c11);
    av = _mm256_broadcast_ss(ap + 2);
    c20 = _mm256_fmadd_ps(av, b0, c20);
    c21 = _mm256_fmadd_ps(av, b1, c21);
    av = _mm256_broadcast_ss(ap + 3);
    c30 = _mm256_fmadd_ps(av, b0, c30);
    c31 = _mm256_fmadd_ps(av, b1, c31);
    av = _mm256_broadcast_ss(ap + 4);
    c40 = _mm256_fmadd_ps(av, b0, c40);
    c41 = _mm256_fmadd_ps(av, b1, c41);
    av = _mm256_broadcast_ss(ap + 5);
    c50 = _mm256_fmadd_ps(av, b0, c50);
    c51 = _mm256_fmadd_ps(av, b1, c51);
  }
  float acc[MR][NR];
  _mm256_storeu_ps(acc[0], c00);
  _mm256_storeu_ps(acc[0] + 8, c01);
  _mm256_storeu_ps(acc[1], c10);
  _mm256_storeu_ps(acc[1] + 8, c11);
  _mm256_storeu_ps(acc[2], c20);
  _mm256_storeu_ps(acc[2] + 8, c21);
  _mm256_storeu_ps(acc[3], c30);
  _mm256_storeu_ps(acc[3] + 8, c31);
  _mm256_storeu_ps(acc[4], c40);
  _mm256_storeu_ps(acc[4] + 8, c41);
  _mm256_storeu_ps(acc[5], c50);
  _mm256_storeu_ps(acc[5] + 8, c51);
  for (int i = 0; i < mr; i++)
    for (int j = 0; j < nr; j++) {
      float *cp = c + i * rs + j * cs;
      *cp = accumulate ? *cp + acc[i][j] : acc[i][j];
    }
}

/* Dot product of two contiguous rows: 4 x 8-lane FMA partial sums. */
__attribute__((target("avx2,fma"))) float em_f32_dot__avx2(const float *x, const float *y,
                                                           int64_t k) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  __m256 s2 = _mm256_setzero_ps(), s3 = _mm256_setzero_ps();
  int64_t p = 0;
  for (; p + 32 <= k; p += 32) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + p), _mm256_loadu_ps(y + p), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + p + 8), _mm256_loadu_ps(y + p + 8), s1);
    s2 = _mm256_fmadd_ps(_mm256_loadu_ps(x + p + 16), _mm256_loadu_ps(y + p + 16), s2);
    s3 = _mm256_fmadd_ps(_mm256_loadu_ps(x + p + 24), _mm256_loadu_ps(y + p + 24), s3);
  }
  for (; p + 8 <= k; p += 8)
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + p), _mm256_loadu_ps(y + p), s0);
  float lanes[8];
  _mm256_storeu_ps(lanes, _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
  float s = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
            ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
  for (; p < k; p++) s += x[p] * y[p];
  return s;
}

/* nn_gemm.h's row-major matrix-vector task, its inner loop over N compiled for AVX2+FMA. */
__attribute__((target("avx2,fma"))) void em_f32_gemv_rm_task__avx2(void *arg, int64_t begin,
                                                                   int64_t end) {
  NN_GEMV_RM_BODY
}
