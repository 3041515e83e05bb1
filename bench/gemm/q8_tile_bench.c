/*
 * q8_tile_bench.c — the int8 conv tiles (EMC_CONV_Q8's em_q8_gemm_6x16_ukernel__avx512vnni and
 * the 6x32 one the convs use, two column panels a call) against the measured AVX-512 VNNI peak.
 *
 * The peak is measured here with 12 independent vpdpbusd chains (no memory traffic); the GEMM
 * is C[M, N] = A[M, K] B[K, N] with A in the tile's [K/4][6][4] int8 row panels and B in its
 * [K/4][16][4] u8 column panels (what cpu_op_qconv.c builds), every (row panel, column panel)
 * tile in the order the conv's jobs take them (a block of 8 column panels, all row panels).
 * Peak and GEMM alternate round after round and the best of each is kept; both are timed in
 * thread CPU time (one thread), so time spent descheduled on a shared machine does not count.
 * The packing and the requantization of the input are not in the figure (the tile only).
 *
 * Also the dynamic int8 linears' tile (em_q8_dq_ukernel__avx512vnni, EMC_OP_DQ_LINEAR) on the
 * same problem seen as a linear layer: N rows (tokens) by M output channels over K, 8 rows by 32
 * channels a call in the operator's order (a block of 32 channels, then its rows in chunks of
 * 64), the row-major f32 output and its per-row epilogue included; and its row quantizer
 * (em_q8_rowq_ukernel__avx512vnni) over the N rows of K floats, in ns per value.
 *
 *   cc -O2 -mavx512f -mavx512bw -mavx512vnni -Iinclude -Ibackends/cpu \
 *      bench/gemm/q8_tile_bench.c build/libember.a -lm -lpthread -o q8_tile_bench
 *   ./q8_tile_bench [M N K] [rounds]
 */
#define _POSIX_C_SOURCE 200809L
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu_ukernels.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Multiply-adds per second of 12 independent vpdpbusd chains (64 per instruction). */
static double vnni_peak(long iters) {
  __m512i a0 = _mm512_set1_epi32(0), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0,
          a8 = a0, a9 = a0, a10 = a0, a11 = a0;
  const __m512i x = _mm512_set1_epi8(1), y = _mm512_set1_epi8(2);
  const double t0 = now();
  for (long i = 0; i < iters; i++) {
    a0 = _mm512_dpbusd_epi32(a0, x, y), a1 = _mm512_dpbusd_epi32(a1, x, y);
    a2 = _mm512_dpbusd_epi32(a2, x, y), a3 = _mm512_dpbusd_epi32(a3, x, y);
    a4 = _mm512_dpbusd_epi32(a4, x, y), a5 = _mm512_dpbusd_epi32(a5, x, y);
    a6 = _mm512_dpbusd_epi32(a6, x, y), a7 = _mm512_dpbusd_epi32(a7, x, y);
    a8 = _mm512_dpbusd_epi32(a8, x, y), a9 = _mm512_dpbusd_epi32(a9, x, y);
    a10 = _mm512_dpbusd_epi32(a10, x, y), a11 = _mm512_dpbusd_epi32(a11, x, y);
    __asm__ volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5));
    __asm__ volatile("" : "+v"(a6), "+v"(a7), "+v"(a8), "+v"(a9), "+v"(a10), "+v"(a11));
  }
  const double dt = now() - t0;
  __m512i s = _mm512_add_epi32(_mm512_add_epi32(a0, a1), _mm512_add_epi32(a2, a3));
  s = _mm512_add_epi32(s, _mm512_add_epi32(_mm512_add_epi32(a4, a5), _mm512_add_epi32(a6, a7)));
  s = _mm512_add_epi32(s, _mm512_add_epi32(_mm512_add_epi32(a8, a9), _mm512_add_epi32(a10, a11)));
  if (_mm512_reduce_add_epi32(s) == 42) printf(" ");
  return (double)iters * 12 * 64 / dt;
}

int main(int argc, char **argv) {
  const size_t m = argc > 3 ? (size_t)atol(argv[1]) : 512,
               n = argc > 3 ? (size_t)atol(argv[2]) : 49;
  const size_t k = argc > 3 ? (size_t)atol(argv[3]) : 4608;
  const int rounds = argc > 4 ? atoi(argv[4]) : 20;
  const size_t kq = (k + 3) / 4, mp = (m + 5) / 6, np = (n + 15) / 16;
  int8_t *a = aligned_alloc(64, mp * kq * 24 + 64);
  uint8_t *b = aligned_alloc(64, np * kq * 64 + 64);
  float *c = aligned_alloc(64, m * n * sizeof(float) + 64), *scale = malloc(mp * 6 * sizeof(float));
  int32_t *corr = calloc(mp * 6, sizeof(int32_t));
  if (!a || !b || !c || !scale || !corr) return 1;
  for (size_t i = 0; i < mp * kq * 24; i++) a[i] = (int8_t)(rand() % 255 - 127);
  for (size_t i = 0; i < np * kq * 64; i++) b[i] = (uint8_t)(rand() % 256);
  for (size_t i = 0; i < mp * 6; i++) scale[i] = 1e-4f;
  /* the dynamic int8 linear: weights in 16-channel blocks, N rows of K floats quantized */
  const size_t mb = (m + 15) / 16, kp = kq * 4;
  int8_t *wq = aligned_alloc(64, mb * kq * 64 + 64);
  uint8_t *rows = aligned_alloc(64, n * kp + 64);
  float *x = malloc(n * k * sizeof(float)), *y = malloc(n * m * sizeof(float));
  float *ws = malloc(mb * 16 * sizeof(float)), *rs = malloc(n * sizeof(float));
  int32_t *wsum = calloc(mb * 16, sizeof(int32_t)), *za = malloc(n * sizeof(int32_t));
  if (!wq || !rows || !x || !y || !ws || !rs || !wsum || !za) return 1;
  for (size_t i = 0; i < mb * kq * 64; i++) wq[i] = (int8_t)(rand() % 255 - 127);
  for (size_t i = 0; i < n * k; i++) x[i] = (float)(rand() % 2001 - 1000) * 1e-3f;
  for (size_t i = 0; i < mb * 16; i++) ws[i] = 1e-3f;
  double best_peak = 0, best[2] = {0, 0}, best_dq = 0, best_q = 1e9;
  for (int r = 0; r < rounds; r++) {
    const double p = vnni_peak(2000000);
    if (p > best_peak) best_peak = p;
    for (int wide = 0; wide < 2; wide++) { /* 6x16, then 6x32 (step of two column panels) */
      const size_t step = wide ? 2 : 1;
      const double t0 = now();
      for (size_t p0 = 0; p0 < np; p0 += 8)
        for (size_t i = 0; i < mp; i++) {
          const size_t mr = m - i * 6 < 6 ? m - i * 6 : 6;
          for (size_t j = p0; j < np && j < p0 + 8; j += step) {
            const size_t cn = (np - j < step ? np - j : step) * 16;
            const size_t nr = n - j * 16 < cn ? n - j * 16 : cn;
            (wide ? em_q8_gemm_6x32_ukernel__avx512vnni : em_q8_gemm_6x16_ukernel__avx512vnni)(
                mr, nr, kq, a + i * kq * 24, b + j * kq * 64, corr + i * 6, scale + i * 6, NULL,
                c + i * 6 * n + j * 16, n);
          }
        }
      const double g = (double)m * (double)n * (double)(kq * 4) / (now() - t0);
      if (g > best[wide]) best[wide] = g;
    }
    double t0 = now();
    em_q8_rowq_ukernel__avx512vnni(n, k, x, rows, kp, za, rs);
    const double tq = (now() - t0) / (double)(n * k);
    if (tq < best_q) best_q = tq;
    t0 = now();
    for (size_t c0 = 0; c0 < m; c0 += 32)
      for (size_t r0 = 0; r0 < n; r0 += 8) {
        const size_t nc = m - c0 < 32 ? m - c0 : 32, nr = n - r0 < 8 ? n - r0 : 8;
        em_q8_dq_ukernel__avx512vnni(nr, nc, kq, rows + r0 * kp, kp, wq + c0 / 16 * kq * 64,
                                     wsum + c0, ws + c0, NULL, NULL, za + r0, rs + r0,
                                     y + r0 * m + c0, m, 1);
      }
    const double g = (double)m * (double)n * (double)(kq * 4) / (now() - t0);
    if (g > best_dq) best_dq = g;
  }
  printf("VNNI peak %.1f GMAC/s (1 thread); M=%zu N=%zu K=%zu: 6x16 tile %.1f GMAC/s = %.0f %%, "
         "6x32 tile %.1f GMAC/s = %.0f %% of peak\n",
         best_peak * 1e-9, m, n, k, best[0] * 1e-9, 100.0 * best[0] / best_peak, best[1] * 1e-9,
         100.0 * best[1] / best_peak);
  printf("  as a linear layer (%zu rows, %zu channels): dq tile %.1f GMAC/s = %.0f %% of peak; "
         "row quantizer %.3f ns per value\n",
         n, m, best_dq * 1e-9, 100.0 * best_dq / best_peak, best_q * 1e9);
  free(a), free(b), free(c), free(scale), free(corr);
  free(wq), free(rows), free(x), free(y), free(ws), free(rs), free(wsum), free(za);
  return 0;
}
