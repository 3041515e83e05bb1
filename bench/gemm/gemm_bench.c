/*
 * gemm_bench.c — f32 GEMM micro-kernel throughput vs the measured FMA peak.
 *
 * The peak is measured here, on this machine, with 12 independent AVX-512
 * (or AVX2) FMA chains per thread; the GEMM is C[M,N] = A[M,K] B[K,N] with A
 * packed in EMC_MR-row panels (as the CPU backend's conv weights are) and B
 * packed in 16-column panels (as linear weights and the im2col scratch are), run tile by tile
 * through the chosen micro-kernel, single thread.
 *
 *   bench/gemm/gemm_bench [M N K] [reps]
 */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu_ukernels.h"
#include "emc_format.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* 12 independent accumulator chains in named registers (an array may be spilled). */
#define FMA12(T, fma, set1)                                                                        \
  T a0 = set1(0.f), a1 = set1(1.f), a2 = set1(2.f), a3 = set1(3.f), a4 = set1(4.f),                \
    a5 = set1(5.f), a6 = set1(6.f), a7 = set1(7.f), a8 = set1(8.f), a9 = set1(9.f),                \
    a10 = set1(10.f), a11 = set1(11.f);                                                            \
  const T x = set1(1.0000001f), y = set1(0.9999999f);                                              \
  for (long it = 0; it < iters; it++) {                                                            \
    a0 = fma(a0, x, y), a1 = fma(a1, x, y), a2 = fma(a2, x, y), a3 = fma(a3, x, y);                \
    a4 = fma(a4, x, y), a5 = fma(a5, x, y), a6 = fma(a6, x, y), a7 = fma(a7, x, y);                \
    a8 = fma(a8, x, y), a9 = fma(a9, x, y), a10 = fma(a10, x, y), a11 = fma(a11, x, y);            \
    __asm__ volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5));             \
    __asm__ volatile("" : "+v"(a6), "+v"(a7), "+v"(a8), "+v"(a9), "+v"(a10), "+v"(a11));           \
  }

/* 12 independent accumulator chains in named registers (an array may be spilled). */
#define FMA12(T, fma, set1)                                                                        \
  T a0 = set1(0.f), a1 = set1(1.f), a2 = set1(2.f), a3 = set1(3.f), a4 = set1(4.f),                \
    a5 = set1(5.f), a6 = set1(6.f), a7 = set1(7.f), a8 = set1(8.f), a9 = set1(9.f),                \
    a10 = set1(10.f), a11 = set1(11.f);                                                            \
  const T x = set1(1.0000001f), y = set1(0.9999999f);                                              \
  for (long it = 0; it < iters; it++) {                                                            \
    a0 = fma(a0, x, y), a1 = fma(a1, x, y), a2 = fma(a2, x, y), a3 = fma(a3, x, y);                \
    a4 = fma(a4, x, y), a5 = fma(a5, x, y), a6 = fma(a6, x, y), a7 = fma(a7, x, y);                \
    a8 = fma(a8, x, y), a9 = fma(a9, x, y), a10 = fma(a10, x, y), a11 = fma(a11, x, y);            \
    __asm__ volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5));             \
    __asm__ volatile("" : "+v"(a6), "+v"(a7), "+v"(a8), "+v"(a9), "+v"(a10), "+v"(a11));           \
  }

__attribute__((target("avx512f"), noinline)) static float fma_loop_avx512(long iters) {
  FMA12(__m512, _mm512_fmadd_ps, _mm512_set1_ps)
  __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                           _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
  s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)));
  return _mm512_reduce_add_ps(s);
}

__attribute__((target("avx2,fma"), noinline)) static float fma_loop_avx2(long iters) {
  FMA12(__m256, _mm256_fmadd_ps, _mm256_set1_ps)
  __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                           _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
  s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11)));
  float t[8];
  _mm256_storeu_ps(t, s);
  return t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7];
}

/* GFLOP/s of the FMA loop for the chosen ISA (best of 5). */
static double fma_peak(const char *isa) {
  long iters = 20 * 1000 * 1000;
  int lanes = strcmp(isa, "avx512f") == 0 ? 16 : 8;
  double best = 0;
  volatile float sink = 0;
  for (int r = 0; r < 5; r++) {
    double t0 = now();
    sink += lanes == 16 ? fma_loop_avx512(iters) : fma_loop_avx2(iters);
    double dt = now() - t0;
    double gf = 2.0 * lanes * 12 * (double)iters / dt * 1e-9;
    if (gf > best) best = gf;
  }
  (void)sink;
  return best;
}

int main(int argc, char **argv) {
  size_t m = argc > 3 ? (size_t)atol(argv[1]) : 768, n = argc > 3 ? (size_t)atol(argv[2]) : 3072,
         k = argc > 3 ? (size_t)atol(argv[3]) : 768;
  int reps = argc > 4 ? atoi(argv[4]) : 5;
  const em_cpu_config *cfg = em_cpu_config_get();
  size_t panels = (m + EMC_MR - 1) / EMC_MR;
  float *a = aligned_alloc(64, panels * EMC_MR * k * sizeof(float));
  float *b = aligned_alloc(64, k * (n + 16) * sizeof(float) + 64);
  float *c = aligned_alloc(64, m * n * sizeof(float) + 64);
  for (size_t i = 0; i < panels * EMC_MR * k; i++) a[i] = (float)(i % 7) * 0.1f;
  for (size_t i = 0; i < k * n; i++) b[i] = (float)(i % 5) * 0.1f;
  em_minmax_params p = {-1e30f, 1e30f};
  double best = 1e9;
  for (int r = 0; r < reps; r++) {
    double t0 = now();
    /* The backend's order (cpu_ops.c gemm_tiles): column strip, K block of 256, m-tiles. */
    for (size_t n0 = 0; n0 < n; n0 += cfg->nr) {
      size_t nc = n - n0 < cfg->nr ? n - n0 : cfg->nr;
      const float *bp = b + (n0 / EMC_NR_PANEL) * k * EMC_NR_PANEL + n0 % EMC_NR_PANEL;
      for (size_t k0 = 0; k0 < k; k0 += 256) {
        size_t kc = k - k0 < 256 ? k - k0 : 256;
        for (size_t mt = 0; mt < panels; mt++) {
          size_t mr = m - mt * EMC_MR < EMC_MR ? m - mt * EMC_MR : EMC_MR;
          cfg->gemm(mr, nc, kc, a + mt * EMC_MR * k + k0 * EMC_MR, 1, EMC_MR,
                    bp + k0 * EMC_NR_PANEL, EMC_NR_PANEL, k * EMC_NR_PANEL,
                    c + mt * EMC_MR * n + n0, n, NULL, NULL, k0 > 0, &p);
        }
      }
    }
    double dt = now() - t0;
    if (dt < best) best = dt;
  }
  double gflops = 2.0 * m * n * k / best * 1e-9;
  double peak = strcmp(cfg->isa, "scalar") ? fma_peak(cfg->isa) : 0;
  printf("isa %s  M=%zu N=%zu K=%zu  %.1f GFLOP/s  FMA peak %.1f GFLOP/s  %.1f%% of peak\n",
         cfg->isa, m, n, k, gflops, peak, peak > 0 ? 100 * gflops / peak : 0);
  free(a), free(b), free(c);
  return 0;
}
