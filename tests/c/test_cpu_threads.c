/*
 * test_cpu_threads.c — EmberCpuBackend's choice between the pool and the caller alone
 * (backends/cpu/cpu_threads.c), its probe's verdict set by hand: near, every execute on the
 * pool; far, one execute on the pool and one alone (each after an untimed one), which settle it
 * when one mode takes more than 1.5x the other, else the rest of a block alone and a block on
 * the pool, then the faster mode (the caller alone unless the pool is more than 3 % faster)
 * until EMC_THR_RECHOOSE far executes have passed, then a new choice; off
 * (threads_adaptive -1) or without a pool, the pool as given.
 */
#define _POSIX_C_SOURCE 200809L
#include <string.h>
#include <time.h>

#include "../../backends/cpu/cpu_internal.h"
#include "ember/platform.h"
#include "ember/threadpool.h"
#include "test_util.h"

static void sleep_us(long us) {
  struct timespec t = {us / 1000000, (us % 1000000) * 1000};
  while (nanosleep(&t, &t) != 0) {
  }
}

/* One execute with the probe's verdict `far` (fresh): alone_us or pool_us of work as chosen.
 * Returns 1 when it ran on the caller alone, 0 on the pool. */
static int run(emc_delegate *d, em_threadpool *pool, bool far, long alone_us, long pool_us) {
  d->thr.far = far;
  d->thr.probed_at = em_now_ns();
  em_threadpool *p = emc_threads_begin(d, pool);
  CHECK(p == NULL || p == pool, "begin gave another pool");
  sleep_us(p ? pool_us : alone_us);
  emc_threads_end(d);
  return p == NULL;
}

/* The modes of n executes as a string of 'a' (alone) and 'p' (pool). */
static void modes(emc_delegate *d, em_threadpool *pool, bool far, long a_us, long p_us, int n,
                  char *out) {
  for (int i = 0; i < n; i++) out[i] = run(d, pool, far, a_us, p_us) ? 'a' : 'p';
  out[n] = '\0';
}

int main(void) {
  em_threadpool *pool = em_threadpool_create(2);
  CHECK(pool != NULL, "a pool of 2");
  if (!pool) return test_summary("test_cpu_threads");
  emc_delegate d;
  memset(&d, 0, sizeof d);
  d.thr.adaptive = true, d.thr.choice = -1;
  char m[EMC_THR_RECHOOSE + 64];

  modes(&d, pool, false, 0, 0, 6, m);
  CHECK(strcmp(m, "pppppp") == 0, "near: %s", m);
  /* far, the caller alone far faster: two executes each way settle it */
  modes(&d, pool, true, 200, 3000, 16, m);
  CHECK(strcmp(m, "ppaaaaaaaaaaaaaa") == 0, "far, alone faster: %s", m);
  CHECK(d.thr.choice == 1, "choice %d", d.thr.choice);
  modes(&d, pool, false, 0, 0, 3, m); /* near again: the pool, the choice kept for far */
  CHECK(strcmp(m, "ppp") == 0 && d.thr.choice == 1, "near after a choice: %s", m);
  /* twelve far executes so far since the choice, EMC_THR_RECHOOSE - 12 more keep it; the next
   * chooses again, the pool faster now */
  for (int i = 0; i < EMC_THR_RECHOOSE - 12; i++) m[i] = run(&d, pool, true, 0, 0) ? 'a' : 'p';
  m[EMC_THR_RECHOOSE - 12] = '\0';
  CHECK(strspn(m, "a") == EMC_THR_RECHOOSE - 12, "kept the choice: %.40s...", m);
  modes(&d, pool, true, 3000, 200, 16, m);
  CHECK(strcmp(m, "ppaapppppppppppp") == 0, "far, the pool faster: %s", m);
  CHECK(d.thr.choice == 0, "choice %d", d.thr.choice);
  /* close (1.2x): the whole schedule, the pool's timed block last, then the faster (the pool) */
  d.thr.choice = -1, d.thr.trial = 0;
  modes(&d, pool, true, 3600, 3000, 2 * EMC_THR_TRIALS + 8, m);
  CHECK(strcmp(m, "ppaaaaaapppppppppp") == 0, "far, close: %s", m);
  CHECK(d.thr.choice == 0, "choice %d", d.thr.choice);
  /* the rule itself, times set by hand: the caller alone 2 % slower still wins (it leaves the
   * other core free), 5 % slower does not */
  for (int slower = 2; slower <= 5; slower += 3) {
    d.thr.choice = -1, d.thr.trial = 2 * EMC_THR_TRIALS + 2, d.thr.mode = 0;
    for (int i = 0; i < EMC_THR_TRIALS; i++)
      d.thr.t[0][i] = 1000000, d.thr.t[1][i] = 1000000 + 10000 * (uint64_t)slower;
    d.thr.start = em_now_ns() - 1000000; /* the last pool execute: ~1 ms */
    emc_threads_end(&d);
    CHECK(d.thr.choice == (slower == 2 ? 1 : 0), "alone %d %% slower: choice %d", slower,
          d.thr.choice);
  }

  /* off, or no pool: as given */
  emc_delegate off;
  memset(&off, 0, sizeof off);
  off.thr.choice = -1;
  modes(&off, pool, true, 0, 0, 10, m);
  CHECK(strcmp(m, "pppppppppp") == 0, "off: %s", m);
  CHECK(emc_threads_begin(&d, NULL) == NULL, "no pool: none");
  emc_threads_end(&d);
  em_threadpool_destroy(pool);
  return test_summary("test_cpu_threads");
}
