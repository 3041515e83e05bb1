/*
 * threadpool.c — a fixed pthread pool for em_parallel_for.
 *
 * One job at a time: the caller publishes (fn, ctx, n), wakes the workers and takes part
 * itself; chunks are claimed with an atomic counter so uneven work balances. Workers join a job
 * while it is open; once every chunk is claimed the caller closes it and waits only for the
 * workers that joined, so one that the host is slow to wake never holds a loop up. Built with
 * EMBER_NO_THREADS the pool is never created and every loop runs serially on the caller. Part of
 * the platform-dependent layer.
 */
#include "ember/threadpool.h"

#include "ember/platform.h"

#if defined(EMBER_NO_THREADS)

em_threadpool *em_threadpool_create(int n_threads) {
  (void)n_threads;
  return NULL;
}
void em_threadpool_destroy(em_threadpool *pool) { (void)pool; }
void em_threadpool_wake(em_threadpool *pool) { (void)pool; }
int em_threadpool_size(const em_threadpool *pool) {
  (void)pool;
  return 1;
}
int em_threadpool_thread_index(void) { return 0; }
void em_parallel_for(em_threadpool *pool, int64_t n, em_parallel_fn fn, void *ctx) {
  (void)pool;
  if (n > 0) fn(ctx, 0, n);
}
void em_parallel_for_static(em_threadpool *pool, int64_t n, em_parallel_fn fn, void *ctx) {
  em_parallel_for(pool, n, fn, ctx);
}
int64_t em_threadpool_handoff_ns(em_threadpool *pool) {
  (void)pool;
  return -1;
}

#else

#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

#define MAX_THREADS 64
#define JOB_CLOSED  (1ull << 31)
#define JOB_JOINED  (JOB_CLOSED - 1)
#define JOB_GEN(s)  ((s) >> 32)

/* One thread's share of a ranged job; padded so two threads' counters share no cache line. */
typedef struct range_slot {
  atomic_llong next;
  int64_t end;
  char pad[48];
} range_slot;

typedef struct worker_arg {
  struct em_threadpool *pool;
  int id;
} worker_arg;

struct em_threadpool {
  pthread_t threads[MAX_THREADS];
  int n_threads;     /* including the caller */
  unsigned fork_gen; /* g_fork_gen when created: another value, a fork's child (no workers) */
  pthread_mutex_t mu;
  pthread_cond_t wake;
  pthread_cond_t done;
  /* The current job: generation << 32 | JOB_CLOSED | number of workers that joined it. A worker
   * joins while the job is open; the caller closes it once every chunk is claimed and then
   * waits only for those that joined, never for one still waking up. */
  atomic_ullong job;
  atomic_int finished;       /* joined workers done with the current job */
  atomic_int caller_waiting; /* the caller sleeps on `done` */
  atomic_ullong wake_gen;    /* em_threadpool_wake: sleeping workers go back to spinning */
  atomic_int sleeping;       /* workers blocked on `wake` */
  atomic_int stop;
  em_parallel_fn fn;
  void *ctx;
  int64_t n;
  int64_t chunk;
  atomic_llong next;
  int ranged; /* em_parallel_for_static: claims from ranges[] */
  range_slot ranges[MAX_THREADS];
  worker_arg args[MAX_THREADS];
};

/* A ranged job: thread `self` first claims chunks of its own contiguous range, in order, then
 * helps finish the others' (a thread slowed by the host does not hold the rest up). */
static void run_ranges(em_threadpool *p, int self) {
  for (int k = 0; k < p->n_threads; k++) {
    range_slot *r = &p->ranges[(self + k) % p->n_threads];
    for (;;) {
      int64_t begin = atomic_fetch_add(&r->next, p->chunk);
      if (begin >= r->end) break;
      p->fn(p->ctx, begin, begin + p->chunk < r->end ? begin + p->chunk : r->end);
    }
  }
}

static void run_chunks(em_threadpool *p, int self) {
  if (p->ranged) {
    run_ranges(p, self);
    return;
  }
  for (;;) {
    int64_t begin = atomic_fetch_add(&p->next, p->chunk);
    if (begin >= p->n) break;
    int64_t end = begin + p->chunk < p->n ? begin + p->chunk : p->n;
    p->fn(p->ctx, begin, end);
  }
}

/* Spin iterations before blocking (~1-2 ms): a job that follows soon (the next operator, after
 * a few serial ones) is picked up without a futex wake-up, which costs tens of microseconds to a
 * scheduler tick on a busy host. 200000 (10x the first 20000) measured +7 % 2-thread SmolLM2
 * decode; 2000000 then measured, interleaved against 200000 at 2 threads (bench/run.py
 * --baseline-build): MiniLM 17.0 vs 18.5 ms, ResNet-18 17.1 vs 20.2, MobileNetV2 6.7 vs 7.1 —
 * since small memory-bound operators run on the caller alone, the workers would otherwise fall
 * asleep between the parallel ones. The cost: a worker burns up to ~2 ms of CPU after its last
 * job before it sleeps.
 */
#define SPIN_ITERS  2000000

/* Every YIELD_EVERY spin iterations (~1-2 us) a spinning thread calls sched_yield. On a core of
 * its own the call returns at once; on a core it shares with another runnable thread (a busy
 * process, or the other thread of this pool before the scheduler spreads them) it hands the
 * core over, instead of spinning out its time slice while the thread it waits for cannot run.
 * MobileNetV2 at 2 threads with one busy-looping process on the 2-vCPU host: 13.0 / 13.5 ms a
 * run without the yields (1.7x its 1-thread time), 7.6 / 8.2 with them (ExecuTorch+XNNPACK
 * 8.0 / 8.4); idle, the same to 0.5 %. */
#define YIELD_EVERY 1024

/* Forks seen by this process's children: a pool made before a fork has no worker threads in
 * the child (fork copies only the calling thread), so there it runs loops on the caller and its
 * destroy frees the memory without joining threads or destroying the copies of locks and
 * condition variables others were waiting on (that wait never ends: a forked test worker hung in
 * pthread_cond_destroy finalizing a program its parent had made). */
static atomic_uint g_fork_gen;
static pthread_once_t g_atfork_once = PTHREAD_ONCE_INIT;
static void on_fork_child(void) { atomic_fetch_add(&g_fork_gen, 1u); }
static void atfork_register(void) { (void)pthread_atfork(NULL, NULL, on_fork_child); }
static bool pool_alive(const em_threadpool *p) {
  return atomic_load_explicit(&g_fork_gen, memory_order_relaxed) == p->fork_gen;
}

/* This thread's index in its pool (em_threadpool_thread_index); callers keep 0. */
static _Thread_local int t_index;

int em_threadpool_thread_index(void) { return t_index; }

static void *worker(void *arg) {
  em_threadpool *p = ((worker_arg *)arg)->pool;
  const int self = ((worker_arg *)arg)->id;
  t_index = self;
  unsigned long long seen = 0; /* the last generation this thread has looked at */
  for (;;) {
    for (int i = 0;
         i < SPIN_ITERS && JOB_GEN(atomic_load(&p->job)) == seen && !atomic_load(&p->stop); i++) {
      if (i % YIELD_EVERY == YIELD_EVERY - 1) sched_yield();
    }
    if (JOB_GEN(atomic_load(&p->job)) == seen && !atomic_load(&p->stop)) {
      /* Nothing arrived while spinning: sleep until a job or a wake-up call (then spin again). */
      pthread_mutex_lock(&p->mu);
      const unsigned long long woken = atomic_load(&p->wake_gen);
      atomic_fetch_add(&p->sleeping, 1);
      while (!atomic_load(&p->stop) && JOB_GEN(atomic_load(&p->job)) == seen &&
             atomic_load(&p->wake_gen) == woken)
        pthread_cond_wait(&p->wake, &p->mu);
      atomic_fetch_sub(&p->sleeping, 1);
      pthread_mutex_unlock(&p->mu);
    }
    if (atomic_load(&p->stop)) break;
    unsigned long long st = atomic_load(&p->job);
    if (JOB_GEN(st) == seen) continue; /* woken without a job */
    seen = JOB_GEN(st);
    /* Join the job while it is open (its fields stay put until every joined worker is done); a
     * closed one was finished without this thread. */
    int joined = 0;
    while (!joined && !(st & JOB_CLOSED) && JOB_GEN(st) == seen)
      joined = atomic_compare_exchange_weak(&p->job, &st, st + 1);
    if (!joined) continue;
    run_chunks(p, self);
    atomic_fetch_add(&p->finished, 1);
    if (atomic_load(&p->caller_waiting)) {
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
  (void)pthread_once(&g_atfork_once, atfork_register);
  em_threadpool *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->fork_gen = atomic_load(&g_fork_gen);
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->wake, NULL);
  pthread_cond_init(&p->done, NULL);
  p->n_threads = 1;
  for (int i = 1; i < n_threads; i++) {
    p->args[i].pool = p;
    p->args[i].id = i;
    if (pthread_create(&p->threads[i], NULL, worker, &p->args[i]) != 0) break;
    p->n_threads++;
  }
  return p;
}

void em_threadpool_destroy(em_threadpool *p) {
  if (!p) return;
  if (!pool_alive(p)) { /* a fork's child: no threads to stop */
    free(p);
    return;
  }
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

void em_threadpool_wake(em_threadpool *p) {
  if (!p || !pool_alive(p) || atomic_load(&p->sleeping) == 0) return;
  pthread_mutex_lock(&p->mu);
  atomic_fetch_add(&p->wake_gen, 1);
  pthread_cond_broadcast(&p->wake);
  pthread_mutex_unlock(&p->mu);
}

static void parallel_run(em_threadpool *p, int64_t n, em_parallel_fn fn, void *ctx,
                         int64_t parts_per_thread) {
  if (n <= 0) return;
  if (!p || p->n_threads == 1 || n == 1 || !pool_alive(p)) {
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
  p->ranged = parts_per_thread == 1;
  if (p->ranged) { /* whole ranges, claimed in eighths */
    for (int t = 0; t < p->n_threads; t++) {
      atomic_store(&p->ranges[t].next, n * t / p->n_threads);
      p->ranges[t].end = n * (t + 1) / p->n_threads;
    }
    int64_t c = n / p->n_threads / 8;
    p->chunk = c < 1 ? 1 : c;
  }
  atomic_store(&p->next, 0);
  atomic_store(&p->finished, 0);
  atomic_store(&p->job, (JOB_GEN(atomic_load(&p->job)) + 1) << 32); /* open, nobody joined */
  pthread_cond_broadcast(&p->wake);
  pthread_mutex_unlock(&p->mu);
  run_chunks(p, 0);
  /* Every chunk is claimed: close the job, then wait (spin, then block) for the workers that
   * joined it to finish theirs before the next job reuses fn/ctx. */
  const int joined = (int)(atomic_fetch_or(&p->job, JOB_CLOSED) & JOB_JOINED);
  for (int i = 0; i < SPIN_ITERS && atomic_load(&p->finished) < joined; i++) {
    if (i % YIELD_EVERY == YIELD_EVERY - 1) sched_yield();
  }
  if (atomic_load(&p->finished) < joined) {
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->caller_waiting, 1);
    while (atomic_load(&p->finished) < joined) pthread_cond_wait(&p->done, &p->mu);
    atomic_store(&p->caller_waiting, 0);
    pthread_mutex_unlock(&p->mu);
  }
}

void em_parallel_for(em_threadpool *p, int64_t n, em_parallel_fn fn, void *ctx) {
  parallel_run(p, n, fn, ctx, 4);
}

void em_parallel_for_static(em_threadpool *p, int64_t n, em_parallel_fn fn, void *ctx) {
  parallel_run(p, n, fn, ctx, 1);
}

/* ---- em_threadpool_handoff_ns: ping-pong with a worker through one cache line ---- */

#define PROBE_ROUNDS     8
#define PROBE_TIMEOUT_NS 100000 /* the worker's join, or one answer */

typedef struct probe_job {
  _Alignas(64) atomic_int ball; /* 2r - 1: the caller's r-th ping; 2r: the worker's answer */
  atomic_int ready;             /* the worker joined */
  atomic_int over;              /* the caller is done (or gave up) */
  atomic_int caller_ran, worker_ran;
  int64_t ns;
} probe_job;

/* Spins until *a == want or `over` is set, yielding as the pool's spins do (the other thread may
 * share this core); false after PROBE_TIMEOUT_NS. */
static bool wait_for(probe_job *j, atomic_int *a, int want) {
  const uint64_t t0 = em_now_ns();
  for (unsigned i = 1;; i++) {
    if (atomic_load_explicit(a, memory_order_acquire) == want) return true;
    if (atomic_load_explicit(&j->over, memory_order_acquire)) return false;
    if (i % 64 == 0 && em_now_ns() - t0 > PROBE_TIMEOUT_NS) return false;
    if (i % YIELD_EVERY == 0) sched_yield();
  }
}

/* Each thread's share of the probe job: the caller (index 0) pings, the first worker to run an
 * item answers, once each whichever items they claim; other workers do nothing. */
static void probe_fn(void *ctx, int64_t begin, int64_t end) {
  (void)begin, (void)end;
  probe_job *j = ctx;
  if (t_index == 0) {
    if (atomic_exchange(&j->caller_ran, 1)) return;
    j->ns = INT64_MAX;
    if (wait_for(j, &j->ready, 1)) {
      uint64_t best = UINT64_MAX, t0 = em_now_ns();
      int r = 1;
      for (; r <= PROBE_ROUNDS; r++) {
        atomic_store_explicit(&j->ball, 2 * r - 1, memory_order_release);
        if (!wait_for(j, &j->ball, 2 * r)) break;
        const uint64_t t1 = em_now_ns();
        best = t1 - t0 < best ? t1 - t0 : best;
        t0 = t1;
      }
      if (r > PROBE_ROUNDS) j->ns = (int64_t)best;
    }
    atomic_store_explicit(&j->over, 1, memory_order_release);
  } else { /* the first worker to arrive answers (another may have taken worker 1's item) */
    if (atomic_exchange(&j->worker_ran, 1)) return;
    atomic_store_explicit(&j->ready, 1, memory_order_release);
    for (int r = 1; r <= PROBE_ROUNDS; r++) {
      if (!wait_for(j, &j->ball, 2 * r - 1)) return;
      atomic_store_explicit(&j->ball, 2 * r, memory_order_release);
    }
  }
}

int64_t em_threadpool_handoff_ns(em_threadpool *p) {
  if (!p || p->n_threads < 2 || !pool_alive(p)) return -1;
  probe_job j;
  atomic_init(&j.ball, 0);
  atomic_init(&j.ready, 0);
  atomic_init(&j.over, 0);
  atomic_init(&j.caller_ran, 0);
  atomic_init(&j.worker_ran, 0);
  j.ns = INT64_MAX;
  parallel_run(p, p->n_threads, probe_fn, &j, 1);
  return j.ns;
}

#endif
