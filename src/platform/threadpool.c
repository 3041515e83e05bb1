/*
 * threadpool.c — a fixed pthread pool for em_parallel_for.
 *
 * One job at a time: the caller publishes (fn, ctx, n), wakes the workers and
 * takes part itself; chunks are claimed with an atomic counter so uneven work
 * balances. Built with EMBER_NO_THREADS the pool is never created and every
 * loop runs serially on the caller. Part of the platform-dependent layer.
 */
#include "ember/threadpool.h"

#include "ember/platform.h"

#if defined(EMBER_NO_THREADS)

em_threadpool *em_threadpool_create(int n_threads) {
  (void)n_threads;
  return NULL;
}
void em_threadpool_destroy(em_threadpool *pool) { (void)pool; }
int em_threadpool_size(const em_threadpool *pool) {
  (void)pool;
  return 1;
}
void em_parallel_for(em_threadpool *pool, int64_t n, em_parallel_fn fn, void *ctx) {
  (void)pool;
  if (n > 0) fn(ctx, 0, n);
}
void em_parallel_for_static(em_threadpool *pool, int64_t n, em_parallel_fn fn, void *ctx) {
  em_parallel_for(pool, n, fn, ctx);
}

#else

#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#define MAX_THREADS 64

struct em_threadpool {
  pthread_t threads[MAX_THREADS];
  int n_threads; /* including the caller */
  pthread_mutex_t mu;
  pthread_cond_t wake;
  pthread_cond_t done;
  atomic_ullong generation;
  atomic_int active; /* workers still inside the current job */
  atomic_int stop;
  em_parallel_fn fn;
  void *ctx;
  int64_t n;
  int64_t chunk;
  atomic_llong next;
};

static void run_chunks(em_threadpool *p) {
  for (;;) {
    int64_t begin = atomic_fetch_add(&p->next, p->chunk);
    if (begin >= p->n) break;
    int64_t end = begin + p->chunk < p->n ? begin + p->chunk : p->n;
    p->fn(p->ctx, begin, end);
  }
}

/* Spin iterations before blocking (~0.1-0.2 ms): a job that follows soon (the next operator,
 * after a few serial ones) is picked up without a futex wake-up, which costs a scheduler tick on
 * a busy host. 10x the earlier 20000 measured +7 % 2-thread SmolLM2 decode (6/6 alternated runs).
 */
#define SPIN_ITERS  200000

static void *worker(void *arg) {
  em_threadpool *p = arg;
  unsigned long long seen = 0;
  for (;;) {
    for (int i = 0; i < SPIN_ITERS && atomic_load(&p->generation) == seen && !atomic_load(&p->stop);
         i++) {
    }
    if (atomic_load(&p->generation) == seen && !atomic_load(&p->stop)) {
      /* Nothing arrived while spinning: sleep. (A job seen by the spin needs no lock: the caller
       * wrote its fields before the generation's seq_cst increment that this thread read.) */
      pthread_mutex_lock(&p->mu);
      while (!atomic_load(&p->stop) && atomic_load(&p->generation) == seen)
        pthread_cond_wait(&p->wake, &p->mu);
      pthread_mutex_unlock(&p->mu);
    }
    if (atomic_load(&p->stop)) break;
    seen = atomic_load(&p->generation);
    run_chunks(p);
    if (atomic_fetch_sub(&p->active, 1) == 1) {
      pthread_mutex_lock(&p->mu);
      pthread_cond_signal(&p->done);
      pthread_mutex_unlock(&p->mu);
    }
  }
  return NULL;
}

em_threadpool *em_threadpool_create(int n_threads) {
  if (n_threads <= 0) {
    long c = sysconf(_SC_NPROCESSORS_ONLN);
    n_threads = c > 0 ? (int)c : 1;
  }
  if (n_threads > MAX_THREADS) n_threads = MAX_THREADS;
  if (n_threads <= 1) return NULL;
  em_threadpool *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->wake, NULL);
  pthread_cond_init(&p->done, NULL);
  p->n_threads = 1;
  for (int i = 1; i < n_threads; i++) {
    if (pthread_create(&p->threads[i], NULL, worker, p) != 0) break;
    p->n_threads++;
  }
  return p;
}

void em_threadpool_destroy(em_threadpool *p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  atomic_store(&p->stop, 1);
  pthread_cond_broadcast(&p->wake);
  pthread_mutex_unlock(&p->mu);
  for (int i = 1; i < p->n_threads; i++) pthread_join(p->threads[i], NULL);
  pthread_cond_destroy(&p->done);
  pthread_cond_destroy(&p->wake);
  pthread_mutex_destroy(&p->mu);
  free(p);
}

int em_threadpool_size(const em_threadpool *p) { return p ? p->n_threads : 1; }

static void parallel_run(em_threadpool *p, int64_t n, em_parallel_fn fn, void *ctx,
                         int64_t parts_per_thread) {
  if (n <= 0) return;
  if (!p || p->n_threads == 1 || n == 1) {
    fn(ctx, 0, n);
    return;
  }
  int64_t parts = (int64_t)p->n_threads * parts_per_thread;
  int64_t chunk = (n + parts - 1) / parts;
  pthread_mutex_lock(&p->mu);
  p->fn = fn;
  p->ctx = ctx;
  p->n = n;
  p->chunk = chunk < 1 ? 1 : chunk;
  atomic_store(&p->next, 0);
  atomic_store(&p->active, p->n_threads - 1);
  atomic_fetch_add(&p->generation, 1);
  pthread_cond_broadcast(&p->wake);
  pthread_mutex_unlock(&p->mu);
  run_chunks(p);
  /* Every worker must leave the job before the next one reuses fn/ctx: spin, then block. */
  for (int i = 0; i < SPIN_ITERS && atomic_load(&p->active) > 0; i++) {
  }
  if (atomic_load(&p->active) > 0) {
    pthread_mutex_lock(&p->mu);
    while (atomic_load(&p->active) > 0) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
  }
}

void em_parallel_for(em_threadpool *p, int64_t n, em_parallel_fn fn, void *ctx) {
  parallel_run(p, n, fn, ctx, 4);
}

void em_parallel_for_static(em_threadpool *p, int64_t n, em_parallel_fn fn, void *ctx) {
  parallel_run(p, n, fn, ctx, 1);
}

#endif
