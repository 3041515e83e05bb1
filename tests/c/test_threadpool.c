/*
 * test_threadpool.c — the thread pool's contract under stress: every index of
 * every loop is run exactly once (em_parallel_for and em_parallel_for_static,
 * 1 to 300 items, 2 to 4 threads), loops never overlap (the next one starts
 * only after every chunk of the last has finished), and that holds when the
 * workers were asleep (pauses longer than their spin), when they are woken
 * with no work (em_threadpool_wake) and when the caller finishes a loop before
 * a worker wakes up (tiny loops right after a pause). em_threadpool_thread_index
 * is 0 on the caller and outside pools, and each worker has its own index in
 * [1, size) for the whole run. A pool made before a fork runs loops on the caller in the child
 * and its destroy returns there (the workers do not exist in the child).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdatomic.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ember/threadpool.h"
#include "test_util.h"

#define MAX_N 300

typedef struct job {
  atomic_int hits[MAX_N];
  atomic_int running; /* chunks in flight: must be 0 when the loop returns */
  atomic_int bad;
} job;

/* Per thread index, the address of a thread-local of the first thread seen with it. */
static _Atomic(const void *) g_owner[8];
static atomic_int g_index_bad;
static _Thread_local int t_tag;

static void body(void *ctx, int64_t begin, int64_t end) {
  job *j = ctx;
  atomic_fetch_add(&j->running, 1);
  const int me = em_threadpool_thread_index();
  if (me < 0 || me >= 8) {
    atomic_fetch_add(&g_index_bad, 1);
  } else {
    const void *want = NULL;
    /* the first thread seen with this index claims it; any other thread with it is an error */
    if (!atomic_compare_exchange_strong(&g_owner[me], &want, (const void *)&t_tag) &&
        want != (const void *)&t_tag)
      atomic_fetch_add(&g_index_bad, 1);
  }
  for (int64_t i = begin; i < end; i++) {
    if (i < 0 || i >= MAX_N) {
      atomic_fetch_add(&j->bad, 1);
      continue;
    }
    atomic_fetch_add(&j->hits[i], 1);
    for (volatile int spin = 0; spin < (int)(i % 7) * 50; spin++) {
    }
  }
  atomic_fetch_sub(&j->running, 1);
}

/* Resets the index owners for a new pool (its workers are new threads). */
static void reset_owners(void) {
  for (int i = 0; i < 8; i++) atomic_store(&g_owner[i], NULL);
}

static void pause_ms(long ms) {
  struct timespec ts = {0, ms * 1000000L};
  nanosleep(&ts, NULL);
}

static int run_one(em_threadpool *pool, int64_t n, int ranged) {
  static job j;
  memset(&j, 0, sizeof j);
  if (ranged)
    em_parallel_for_static(pool, n, body, &j);
  else
    em_parallel_for(pool, n, body, &j);
  int ok = atomic_load(&j.running) == 0 && atomic_load(&j.bad) == 0;
  for (int64_t i = 0; i < MAX_N; i++) ok &= atomic_load(&j.hits[i]) == (i < n ? 1 : 0);
  return ok;
}

/* A pool made before a fork, in the child: loops run (on the caller) and destroy returns, with
 * its workers asleep or spinning in the parent at the fork. 0 when the child exited 0 in time. */
static int fork_child_ok(int sleep_first) {
  reset_owners(); /* a new pool: new workers own its indices */
  atomic_store(&g_owner[0], (const void *)&t_tag);
  em_threadpool *pool = em_threadpool_create(2);
  if (!pool) return 1;
  for (int r = 0; r < 20; r++) (void)run_one(pool, 64, r & 1);
  if (sleep_first) pause_ms(5); /* past the spin: the worker waits on the condition variable */
  const pid_t pid = fork();
  if (pid == 0) {
    alarm(10); /* a hang fails the test instead of stalling it */
    const int ok =
        run_one(pool, 64, 0) && run_one(pool, 33, 1) && em_threadpool_handoff_ns(pool) == -1;
    em_threadpool_destroy(pool);
    _exit(ok ? 0 : 3);
  }
  int status = -1;
  if (pid > 0) waitpid(pid, &status, 0);
  em_threadpool_destroy(pool);
  return pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}

int main(void) {
  for (int threads = 2; threads <= 4; threads++) {
    reset_owners();
    atomic_store(&g_owner[0], (const void *)&t_tag); /* the caller is 0 */
    em_threadpool *pool = em_threadpool_create(threads);
    CHECK(pool != NULL && em_threadpool_size(pool) == threads, "pool of %d", threads);
    if (!pool) continue;
    int bad = 0, loops = 0;
    for (int round = 0; round < 400; round++) {
      const int64_t n = 1 + (round * 37) % MAX_N;
      if (round % 50 == 0) pause_ms(5); /* past the spin: the workers sleep */
      if (round % 50 == 25) {
        pause_ms(5);
        em_threadpool_wake(pool); /* woken with nothing to do, then a tiny loop */
        bad += !run_one(pool, 2, 0), loops++;
      }
      bad += !run_one(pool, n, round & 1), loops++;
    }
    CHECK(bad == 0, "%d threads: %d of %d loops ran an index other than once or overlapped",
          threads, bad, loops);
    /* the hand-off probe: a round trip (or INT64_MAX when the worker did not answer: a loaded
     * host), the pool still running loops after it, asleep or awake */
    int answered = 0;
    for (int k = 0; k < 6; k++) {
      if (k == 3) pause_ms(5);
      const int64_t ns = em_threadpool_handoff_ns(pool);
      CHECK(ns > 0, "%d threads: hand-off %lld ns", threads, (long long)ns);
      answered += ns > 0 && ns < 1000000;
      CHECK(run_one(pool, 64, k & 1), "%d threads: a loop after the probe", threads);
    }
    /* oversubscribed (more threads than CPUs, other tests running), no worker may run within a
     * probe's 0.1 ms a few times in a row: one answer in up to 200 tries */
    for (int k = 0; k < 200 && !answered; k++) {
      const int64_t ns = em_threadpool_handoff_ns(pool);
      answered += ns > 0 && ns < 1000000;
    }
    CHECK(answered > 0, "%d threads: the worker never answered the probe", threads);
    for (int i = threads; i < 8; i++)
      CHECK(atomic_load(&g_owner[i]) == NULL, "%d threads: a thread had index %d", threads, i);
    em_threadpool_destroy(pool);
  }
  em_threadpool_wake(NULL);
  CHECK(run_one(NULL, 17, 0) && run_one(NULL, 17, 1), "NULL pool runs serially");
  CHECK(em_threadpool_handoff_ns(NULL) == -1, "a NULL pool's hand-off is -1");
  CHECK(fork_child_ok(0) == 0, "a forked child of a spinning pool hung or failed");
  CHECK(fork_child_ok(1) == 0, "a forked child of a sleeping pool hung or failed");
  CHECK(em_threadpool_thread_index() == 0, "the caller's index is 0");
  CHECK(atomic_load(&g_index_bad) == 0,
        "%d chunks ran on a thread whose index was out of range or another thread's",
        atomic_load(&g_index_bad));
  return test_summary("test_threadpool");
}
