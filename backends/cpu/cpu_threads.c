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
 * THR_PROBE_EVERY_NS; near, it runs on the pool. Far, it times its executes in each mode, each
 * mode's first execute after a switch untimed (it moves the data to where the mode wants it:
 * alternating, each execute of the caller alone first fetched what the other core had written,
 * 2.1-2.3 ms against 1.70 in a 1-thread process). First one execute each way, the pool then the
 * caller alone (after its move each): when one takes more than 1.5x the other, that
 * settles it (ViT-B/16 far apart: 175 ms on the pool, 340 alone; with the other core busy the
 * pool is the slow one), so a model where a mode is far slower pays for two such executes, not
 * a whole block of them. One sample each is enough for that: a hiccup of the host can only
 * settle it wrongly where the two modes are close, and there the wrong one costs little. Otherwise
 * EMC_THR_TRIALS timed in each mode (the caller alone's block goes on, then the pool's after its
 * move), and the caller alone is kept unless the pool's median is more than 3 % faster (ResNet-18
 * far apart: 16.6 ms on the pool, 22 alone; MobileNetV3-Small: 1.9 / 1.7); it chooses again after
 * EMC_THR_RECHOOSE far executes. Both ways give the same bits (the operators' results do not depend
 * on the thread count), so the choice changes only the time.
 *
 * The schedule, k = s->trial: 0 the pool (untimed), 1 the pool, 2 alone (untimed), 3 alone (the
 * quick verdict after it), 4 .. T + 2 alone, T + 3 the pool (untimed), T + 4 .. 2 T + 2 the pool
 * (T = EMC_THR_TRIALS; the verdict of the medians after the last).
 */
#include "cpu_internal.h"
#include "ember/platform.h"

#define THR_PROBE_EVERY_NS 20000000ull /* 20 ms */
#define THR_FAR_NS         150         /* a round trip slower than this is "far" */

enum { THR_T = EMC_THR_TRIALS, THR_LAST = 2 * THR_T + 2 };

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

/* Trial k's mode: 1 the caller alone, 0 the pool. */
static int trial_mode(uint32_t k) { return k >= 2 && k <= THR_T + 2; }

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
  if (s->choice < 0) {
    s->mode = trial_mode(s->trial);
    s->start = em_now_ns();
  } else {
    s->mode = s->choice;
  }
  return s->mode ? NULL : pool;
}

/* Settles the choice: mode c, the trials done. */
static void choose(emc_threads *s, int c) {
  s->choice = c;
  s->since = 0;
  s->trial = 0;
}

void emc_threads_end(emc_delegate *d) {
  emc_threads *s = &d->thr;
  if (!s->start) return;
  const uint32_t k = s->trial;
  const uint64_t t = em_now_ns() - s->start;
  s->start = 0;
  if (k == 1) s->t[0][0] = t;
  if (k >= 3 && k <= THR_T + 2) s->t[1][k - 3] = t;
  if (k >= THR_T + 4) s->t[0][k - THR_T - 3] = t;
  s->trial = k + 1;
  if (k == 3) { /* one execute each way: a clear difference settles it */
    const uint64_t both = s->t[0][0], alone = s->t[1][0];
    if (2 * alone > 3 * both) choose(s, 0);
    if (2 * both > 3 * alone) choose(s, 1);
  } else if (k == THR_LAST) {
    /* the caller alone unless the pool is clearly faster: it then leaves the other core free */
    const uint64_t alone = median(s->t[1], THR_T), both = median(s->t[0], THR_T);
    choose(s, alone <= both + both / 32 ? 1 : 0);
  }
}
