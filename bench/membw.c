/*
 * membw.c — measured memory read bandwidth, the denominator of the LLM decode bound.
 *
 * Streams a buffer much larger than the last-level cache with N threads (each reads its own
 * contiguous slice, summing 64-byte lines so nothing is optimised away) and prints the best of
 * several passes as JSON: {"threads": N, "bytes": B, "gbps": G}. Benchmark code, not shipped:
 * it may allocate, print and use the host's widest vectors (-march=native is fine here).
 *
 *     cc -O2 -march=native -pthread bench/membw.c -o membw && ./membw 2 1024
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
  const uint64_t *p;
  size_t n; /* words */
  uint64_t sum;
} slice;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *reader(void *arg) {
  slice *s = arg;
  uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0, a4 = 0, a5 = 0, a6 = 0, a7 = 0;
  for (size_t i = 0; i + 8 <= s->n; i += 8) {
    a0 += s->p[i];
    a1 += s->p[i + 1];
    a2 += s->p[i + 2];
    a3 += s->p[i + 3];
    a4 += s->p[i + 4];
    a5 += s->p[i + 5];
    a6 += s->p[i + 6];
    a7 += s->p[i + 7];
  }
  s->sum = a0 ^ a1 ^ a2 ^ a3 ^ a4 ^ a5 ^ a6 ^ a7;
  return NULL;
}

int main(int argc, char **argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 1;
  size_t mib = argc > 2 ? (size_t)atol(argv[2]) : 1024;
  if (threads < 1 || threads > 64 || mib < 64) {
    fprintf(stderr, "usage: membw THREADS MIB (MIB >= 64)\n");
    return 2;
  }
  size_t bytes = mib << 20, words = bytes / 8;
  uint64_t *buf = aligned_alloc(64, bytes);
  if (!buf) {
    fprintf(stderr, "membw: cannot allocate %zu MiB\n", mib);
    return 1;
  }
  for (size_t i = 0; i < words; i++) buf[i] = i;
  double best = 0;
  uint64_t check = 0;
  for (int pass = 0; pass < 7; pass++) {
    pthread_t tid[64];
    slice sl[64];
    size_t per = words / (size_t)threads;
    double t0 = now();
    for (int t = 0; t < threads; t++) {
      sl[t] = (slice){buf + (size_t)t * per, per, 0};
      pthread_create(&tid[t], NULL, reader, &sl[t]);
    }
    for (int t = 0; t < threads; t++) {
      pthread_join(tid[t], NULL);
      check ^= sl[t].sum;
    }
    double gbps = (double)(per * (size_t)threads * 8) / (now() - t0) / 1e9;
    if (gbps > best) best = gbps;
  }
  printf("{\"threads\": %d, \"bytes\": %zu, \"gbps\": %.2f, \"check\": %llu}\n", threads, bytes,
         best, (unsigned long long)(check & 1));
  free(buf);
  return 0;
}
