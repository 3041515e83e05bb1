/*
 * xcore.c — how fast two CPUs hand data to each other: the round trip of a ping-pong through one
 * cache line between threads pinned to CPU 0 and CPU 1 (mean of 20000), and a 256 KB block
 * written by CPU 1 then summed by CPU 0, then summed again (locally); and, when linked with the
 * library, the pool's own probe (em_threadpool_handoff_ns, fastest of five after warm-up
 * loops). On the shared 2-vCPU reference host these say whether the vCPUs sit on cores near
 * each other or far apart (bench/results/threads_phase_zen4_2026-12-04.md). Benchmark code, not
 * shipped (Linux: pthread_setaffinity_np).
 *
 *     cc -O3 -march=native -ffast-math -pthread -Iinclude bench/xcore.c build/libember.a -lm \
 *         -o xcore && ./xcore
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "ember/threadpool.h"

enum { N = 64 * 1024, ROUNDS = 20000, BLOCKS = 200 };
static atomic_int flag;
static float *buf;
static volatile float sink;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void pin(int cpu) {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(cpu, &s);
  pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}

static void *partner(void *arg) {
  (void)arg;
  pin(1);
  for (int i = 0; i < ROUNDS; i++) {
    while (atomic_load(&flag) != 1) {
    }
    atomic_store(&flag, 0);
  }
  for (int r = 0; r < BLOCKS; r++) {
    while (atomic_load(&flag) != 2) {
    }
    for (int i = 0; i < N; i++) buf[i] = (float)(i + r);
    atomic_store(&flag, 3);
  }
  return NULL;
}

static void spin(void *ctx, int64_t b, int64_t e) {
  volatile double s = 0;
  for (int64_t i = b * 20000; i < e * 20000; i++) s += (double)i;
  (void)ctx;
}

int main(void) {
  buf = aligned_alloc(64, N * sizeof *buf);
  pthread_t t;
  pthread_create(&t, NULL, partner, NULL);
  pin(0);
  double t0 = now();
  for (int i = 0; i < ROUNDS; i++) {
    atomic_store(&flag, 1);
    while (atomic_load(&flag) != 0) {
    }
  }
  const double rt = (now() - t0) / ROUNDS;
  double far = 0, local = 0;
  for (int r = 0; r < BLOCKS; r++) {
    atomic_store(&flag, 2);
    while (atomic_load(&flag) != 3) {
    }
    float s = 0;
    double a = now();
    for (int i = 0; i < N; i++) s += buf[i];
    far += now() - a;
    a = now();
    for (int i = 0; i < N; i++) s += buf[i];
    local += now() - a;
    sink = s;
  }
  pthread_join(t, NULL);
  cpu_set_t all; /* the pool's worker inherits this thread's CPUs: every one again */
  CPU_ZERO(&all);
  for (int c = 0; c < CPU_SETSIZE; c++) CPU_SET(c, &all);
  pthread_setaffinity_np(pthread_self(), sizeof all, &all);
  em_threadpool *pool = em_threadpool_create(2);
  for (int r = 0; r < 200; r++) em_parallel_for(pool, 64, spin, NULL);
  long long probe = -1;
  for (int k = 0; k < 5; k++) {
    const long long v = (long long)em_threadpool_handoff_ns(pool);
    probe = probe < 0 || v < probe ? v : probe;
  }
  em_threadpool_destroy(pool);
  printf("{\"round_trip_ns\": %.0f, \"block_other_us\": %.1f, \"block_local_us\": %.1f, "
         "\"pool_probe_ns\": %lld}\n",
         rt * 1e9, far / BLOCKS * 1e6, local / BLOCKS * 1e6, probe);
  free(buf);
  return 0;
}
