/*
 * cpu_threads.c — whether an execute runs on the pool or on the caller alone
 * (em_cpu_backend_options.threads_adaptive).
 *
 * On the shared 2-vCPU reference host the two vCPUs are sometimes on cores that share a cache
 * (a cross-core round trip ~55 ns, a 256 KB block written by one core read by the other at the
 * speed of a local one) and sometimes on cores far apart (~330 ns, a third of that speed), for
 * seconds to minutes at a time; each core alone is as fast either way. Far apart, every
 * operator that reads what the other core wrote pays for it: MobileNetV3-Small f32 ran 1.90 ms
 * at 2 threads against 1.70 at 1 (near: 1.04), and raising the size below which operators stay
 * on one thread (4x, 16x) did not help (1.91, 1.97). A thread that shares its core with a busy
 * process looks the same from here (a slow or absent answer).
 *
 * So each delegate probes the hand-off (em_threadpool_handoff_ns, ~0.5-3 us) at most every
 * THR_PROBE_EVERY_NS; near, it runs on the pool. Far, it times its executes alternately on the
 * caller alone and then on the pool, EMC_THR_TRIALS each after one that moves the data to where
 * the mode wants it (alternating, each execute of the caller alone first fetched what the other
 * core had written: 2.1-2.3 ms against 1.70 in a 1-thread process), keeps the caller alone
 * unless the pool's median is more than 3 % faster (ResNet-18 far apart: 16.6 ms on the pool,
 * 22 alone; MobileNetV3-Small: 1.9 / 1.7), and chooses again after EMC_THR_RECHOOSE far
 * executes. Both ways give the same bits (the
 * operators' results do not depend on the thread count), so the choice changes only the time.
 */
#include "cpu_internal.h"
#include "ember/platform.h"

#define THR_PROBE_EVERY_NS 20000000ull /* 20 ms */
#define THR_FAR_NS         150         /* a round trip slower than this is "far" */

/* The median of n <= EMC_THR_TRIALS times (odd n). */
static uint64_t median(const uint64_t *t, int n) {
  uint64_t s[EMC_THR_TRIALS];
  for (int i = 0; i < n; i++) { /* insertion sort */
    int k = i;
    for (; k > 0 && s[k - 1] > t[i]; k--) s[k] = s[k - 1];
    s[k] = t[i];
  }
  return s[n / 2];
}

em_threadpool *emc_threads_begin(emc_delegate *d, em_threadpool *pool) {
  emc_threads *s = &d->thr;
  s->mode = 0;
  s->start = 0;
  if (!s->adaptive || em_threadpool_size(pool) < 2) return pool;
  const uint64_t now = em_now_ns();
  if (!s->probed_at || now - s->probed_at > THR_PROBE_EVERY_NS) {
    s->far = em_threadpool_handoff_ns(pool) > THR_FAR_NS; /* INT64_MAX: no answer */
    s->probed_at = em_now_ns();
  }
  if (!s->far) return pool;
  if (s->choice >= 0 && ++s->since > EMC_THR_RECHOOSE) s->choice = -1, s->trial = 0;
  if (s->choice < 0) { /* a block on the caller alone, then one on the pool */
    s->mode = s->trial <= EMC_THR_TRIALS;
    s->start = em_now_ns();
  } else {
    s->mode = s->choice;
  }
  return s->mode ? NULL : pool;
}

void emc_threads_end(emc_delegate *d) {
  emc_threads *s = &d->thr;
  if (!s->start) return;
  const uint32_t k = s->trial % (EMC_THR_TRIALS + 1); /* the first of a block moves the data */
  if (k) s->t[s->mode][k - 1] = em_now_ns() - s->start;
  s->start = 0;
  if (++s->trial == 2 * (EMC_THR_TRIALS + 1)) {
    /* the caller alone unless the pool is clearly faster: it then leaves the other core free */
    const uint64_t alone = median(s->t[1], EMC_THR_TRIALS), both = median(s->t[0], EMC_THR_TRIALS);
    s->choice = alone <= both + both / 32 ? 1 : 0;
    s->since = 0;
  }
}
