/*
 * gemm_bench.c — f32 GEMM micro-kernel throughput vs the measured FMA peak.
 *
 * The peak is measured here, on this machine, with 12 independent AVX-512
 * (or AVX2) FMA chains per thread; the GEMM is C[M,N] = A[M,K] B[K,N] with A
 * packed in EMC_MR-row panels (as the CPU backend's conv weights are) and B
 * either packed in 16-column panels (as linear weights and the im2col scratch
 * are) or row-major (as a 1x1 convolution's activations are, `rowmajor`), run
 * through the backend's own GEMM driver (cpu_gemm.c: blocking, packing,
 * threads). Peak and GEMM are timed alternately, round after round (one peak
 * loop, then three GEMMs back to back), and the best of each is kept, so a
 * busy neighbour skews both alike. On one thread
 * both are timed in thread CPU time, so time spent descheduled does not count.
 *
 *   bench/gemm/gemm_bench [M N K] [reps] [threads] [rowmajor: 0, 1 or 2]
 */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu_internal.h"
#include "ember/threadpool.h"

/* One thread: its CPU time (immune to being descheduled on a shared machine); more: wall time. */
static clockid_t g_clock = CLOCK_THREAD_CPUTIME_ID;

static double now(void) {
  struct timespec ts;
  clock_gettime(g_clock, &ts);
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

/* GFLOP/s of one run of the FMA loop for the chosen ISA, on every thread of the pool. */
typedef struct peak_job {
  int lanes;
  long iters;
  volatile float sink;
} peak_job;

static void peak_part(void *ctx, int64_t begin, int64_t end) {
  peak_job *j = ctx;
  for (int64_t i = begin; i < end; i++)
    j->sink += j->lanes == 16 ? fma_loop_avx512(j->iters) : fma_loop_avx2(j->iters);
}

static double fma_peak_once(const char *isa, em_threadpool *pool) {
  peak_job j = {strcmp(isa, "avx512f") == 0 || strcmp(isa, "amx") == 0 ? 16 : 8, 10 * 1000 * 1000,
                0};
  int n = em_threadpool_size(pool);
  double t0 = now();
  em_parallel_for(pool, n, peak_part, &j);
  double dt = now() - t0;
  return 2.0 * j.lanes * 12 * (double)j.iters * n / dt * 1e-9;
}

int main(int argc, char **argv) {
  size_t m = argc > 3 ? (size_t)atol(argv[1]) : 768, n = argc > 3 ? (size_t)atol(argv[2]) : 3072,
         k = argc > 3 ? (size_t)atol(argv[3]) : 768;
  int reps = argc > 4 ? atoi(argv[4]) : 5;
  int threads = argc > 5 ? atoi(argv[5]) : 1;
  int rowmajor = argc > 6 ? atoi(argv[6]) : 0;
  (void)em_cpu_config_force(getenv("EMBER_CPU_ISA")); /* unknown or absent: the best */
  const em_cpu_config *cfg = em_cpu_config_get();
  em_threadpool *pool = threads > 1 ? em_threadpool_create(threads) : NULL;
  if (pool) g_clock = CLOCK_MONOTONIC;
  size_t panels = (m + EMC_MR - 1) / EMC_MR;
  float *a = aligned_alloc(64, panels * EMC_MR * k * sizeof(float));
  float *b = aligned_alloc(64, k * (n + 16) * sizeof(float) + 64);
  float *c = aligned_alloc(64, m * n * sizeof(float) + 64);
  size_t pack_n = emc_gemm_pack_floats(cfg, k, threads);
  float *pack = aligned_alloc(64, pack_n * sizeof(float));
  /* The AMX path's workspace, as a delegate keeps it (EMBER_CPU_ISA=avx512f: FMAs only). */
  void *amx_ws = cfg->amx ? aligned_alloc(64, EMC_AMX_SLOTS * emc_gemm_amx_slot_bytes()) : NULL;
  atomic_flag amx_busy[EMC_AMX_SLOTS];
  for (int s = 0; s < EMC_AMX_SLOTS; s++) atomic_flag_clear(&amx_busy[s]);
  for (size_t i = 0; i < panels * EMC_MR * k; i++) a[i] = (float)(i % 7) * 0.1f;
  for (size_t i = 0; i < k * (n + 16); i++) b[i] = (float)(i % 5) * 0.1f;
  double best = 1e9, peak = 0;
  for (int r = 0; r < reps; r++) {
    double pk = strcmp(cfg->isa, "scalar") ? fma_peak_once(cfg->isa, pool) : 0;
    if (pk > peak) peak = pk;
    /* Three GEMMs back to back after each peak loop: the later ones find A, B and C where the
     * previous one left them (as a model's layers do), not where the peak loop's time let
     * other processes push them. */
    for (int rep = 0; rep < 3; rep++) {
      emc_gemm g = {0};
      g.cfg = cfg, g.m = m, g.k = k, g.n = n, g.a = a, g.a_packed = rowmajor != 2;
      g.a_rs = k, g.a_ks = 1; /* mode 2: A row-major, as a linear layer's activations */
      g.b = b, g.ldb = n, g.b_packed = rowmajor != 1, g.pack = rowmajor == 1 ? pack : NULL;
      g.c = c, g.ldc = n, g.mm.min = -1e30f, g.mm.max = 1e30f;
      g.amx_ws = amx_ws, g.amx_busy = amx_busy, g.amx_slots = amx_ws ? EMC_AMX_SLOTS : 0;
      double t0 = now();
      emc_gemm_run(&g, pool);
      double dt = now() - t0;
      if (dt < best) best = dt;
    }
  }
  double gflops = 2.0 * m * n * k / best * 1e-9;
  printf("isa %s  threads %d  B %s  M=%zu N=%zu K=%zu  %.1f GFLOP/s  FMA peak %.1f GFLOP/s  "
         "%.1f%% of peak\n",
         cfg->isa, threads,
         rowmajor == 1   ? "row-major"
         : rowmajor == 2 ? "packed, A row-major"
                         : "packed",
         m, n, k, gflops, peak, peak > 0 ? 100 * gflops / peak : 0);
  em_threadpool_destroy(pool);
  free(a), free(b), free(c), free(pack), free(amx_ws);
  return 0;
}
