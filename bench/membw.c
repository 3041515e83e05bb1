/*
 * membw.c — measured memory read bandwidth, the denominator of the LLM decode bound.
 *
 * Streams a buffer much larger than the last-level cache with N threads, each reading its own
 * contiguous slice, and prints the best pass as JSON: {"threads": N, "bytes": B, "gbps": G, ...}.
 * The threads are started once and meet at a barrier before and after every pass, so a pass
 * times the reads only (not thread creation). Each thread first touches its own slice, which
 * is backed by huge pages where the kernel grants them (as Ember's runtime copy of a file is),
 * so the probe is not held back by TLB misses the decode does not pay. Two readers: eight
 * 64-bit sums (the plain loop) and 64-byte vector sums four lines an iteration (GCC vector
 * extensions, the widest the host has with -march=native); "gbps" is the best of both, and
 * each one's best is printed beside it. Benchmark code, not shipped: it may allocate, print and
 * use the host's widest vectors.
 *
 *     cc -O2 -march=native -pthread bench/membw.c -o membw && ./membw 2 1024
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

enum { PASSES = 7, READERS = 2, MAX_THREADS = 64 };

typedef long long v64b __attribute__((vector_size(64)));

typedef struct {
  const uint64_t *p;
  size_t n; /* words */
  uint64_t sum;
  int index;
} slice;

static pthread_barrier_t g_start, g_end;
static slice g_slices[MAX_THREADS];
static int g_threads;
static int g_reader; /* which reader the current pass uses; -1 ends the workers */
static double g_t0;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t read_words(const uint64_t *p, size_t n) {
  uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0, a4 = 0, a5 = 0, a6 = 0, a7 = 0;
  for (size_t i = 0; i + 8 <= n; i += 8) {
    a0 += p[i];
    a1 += p[i + 1];
    a2 += p[i + 2];
    a3 += p[i + 3];
    a4 += p[i + 4];
    a5 += p[i + 5];
    a6 += p[i + 6];
    a7 += p[i + 7];
  }
  return a0 ^ a1 ^ a2 ^ a3 ^ a4 ^ a5 ^ a6 ^ a7;
}

static uint64_t read_vectors(const uint64_t *p, size_t n) {
  const v64b *v = (const v64b *)p; /* slices are 64-byte aligned */
  size_t lines = n / 8;
  v64b a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
  for (size_t i = 0; i + 4 <= lines; i += 4) {
    a0 += v[i];
    a1 += v[i + 1];
    a2 += v[i + 2];
    a3 += v[i + 3];
  }
  a0 += a1 + a2 + a3;
  uint64_t s = 0;
  for (int k = 0; k < 8; k++) s ^= (uint64_t)a0[k];
  return s;
}

static void run_slice(slice *s) {
  s->sum ^= g_reader == 0 ? read_words(s->p, s->n) : read_vectors(s->p, s->n);
}

static void *worker(void *arg) {
  slice *s = arg;
  /* First touch: the slice's pages are this thread's. */
  memset((void *)s->p, s->index + 1, s->n * 8);
  pthread_barrier_wait(&g_end);
  for (;;) {
    pthread_barrier_wait(&g_start);
    if (g_reader < 0) return NULL;
    run_slice(s);
    pthread_barrier_wait(&g_end);
  }
}

int main(int argc, char **argv) {
  g_threads = argc > 1 ? atoi(argv[1]) : 1;
  size_t mib = argc > 2 ? (size_t)atol(argv[2]) : 1024;
  if (g_threads < 1 || g_threads > MAX_THREADS || mib < 64) {
    fprintf(stderr, "usage: membw THREADS MIB (THREADS 1-64, MIB >= 64)\n");
    return 2;
  }
  const size_t huge = (size_t)2 << 20;
  size_t bytes = mib << 20, words = bytes / 8;
  uint64_t *buf = aligned_alloc(huge, bytes);
  if (!buf) {
    fprintf(stderr, "membw: cannot allocate %zu MiB\n", mib);
    return 1;
  }
#ifdef MADV_HUGEPAGE
  (void)madvise(buf, bytes, MADV_HUGEPAGE);
#endif
  size_t per = words / (size_t)g_threads / 8 * 8; /* whole 64-byte lines */
  pthread_barrier_init(&g_start, NULL, (unsigned)g_threads);
  pthread_barrier_init(&g_end, NULL, (unsigned)g_threads);
  pthread_t tid[MAX_THREADS];
  for (int t = 0; t < g_threads; t++) {
    g_slices[t] = (slice){buf + (size_t)t * per, per, 0, t};
    if (t > 0) pthread_create(&tid[t], NULL, worker, &g_slices[t]);
  }
  memset(buf, 1, per * 8); /* thread 0 is this one */
  pthread_barrier_wait(&g_end);

  double best[READERS] = {0, 0};
  for (int pass = 0; pass < PASSES * READERS; pass++) {
    g_reader = pass % READERS;
    pthread_barrier_wait(&g_start);
    g_t0 = now();
    run_slice(&g_slices[0]);
    pthread_barrier_wait(&g_end);
    double gbps = (double)(per * (size_t)g_threads * 8) / (now() - g_t0) / 1e9;
    if (gbps > best[g_reader]) best[g_reader] = gbps;
  }
  g_reader = -1;
  pthread_barrier_wait(&g_start);
  uint64_t check = 0;
  for (int t = 0; t < g_threads; t++) {
    if (t > 0) pthread_join(tid[t], NULL);
    check ^= g_slices[t].sum;
  }
  double gbps = best[0] > best[1] ? best[0] : best[1];
  printf("{\"threads\": %d, \"bytes\": %zu, \"gbps\": %.2f, \"gbps_words\": %.2f, "
         "\"gbps_vectors\": %.2f, \"check\": %llu}\n",
         g_threads, per * (size_t)g_threads * 8, gbps, best[0], best[1],
         (unsigned long long)(check & 1));
  free(buf);
  return 0;
}
