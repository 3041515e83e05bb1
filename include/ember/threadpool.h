/*
 * threadpool.h — a fixed pool of worker threads for parallel kernels.
 *
 * A NULL pool means "run serially on the caller": kernels always call
 * em_parallel_for and never branch on whether threads exist.
 *
 *     em_threadpool *pool = em_threadpool_create(2);   // NULL if unavailable
 *     em_parallel_for(pool, n_rows, body, &args);      // body(&args, begin, end)
 *     em_threadpool_destroy(pool);
 */
#ifndef EMBER_THREADPOOL_H
#define EMBER_THREADPOOL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct em_threadpool em_threadpool;

/* Runs items [begin, end) of a parallel loop. */
typedef void (*em_parallel_fn)(void *ctx, int64_t begin, int64_t end);

/*
 * Creates a pool of `n_threads` (the caller counts as one; 0 = number of CPUs).
 * Returns NULL when threads are unavailable (a NULL pool runs serially).
 */
em_threadpool *em_threadpool_create(int n_threads);

/* Stops and frees the pool. NULL is a no-op. In the child of a fork after the pool was made
 * (where its workers do not exist) loops run on the caller and this only frees the memory. */
void em_threadpool_destroy(em_threadpool *pool);

/*
 * Wakes workers that went to sleep (after spinning idle for a millisecond or two) so that they
 * spin again, without giving them work: a caller about to run a series of loops after a pause
 * (a method's execute) hides their wake-up, which on a busy host can cost milliseconds, behind
 * its own serial work. Cheap when no worker sleeps; no-op for NULL.
 */
void em_threadpool_wake(em_threadpool *pool);

/* Number of threads that take part in a loop (1 for NULL). */
int em_threadpool_size(const em_threadpool *pool);

/*
 * The calling thread's place in the pool that runs it: 0 for a loop's caller (and any thread
 * outside a pool), 1 to size - 1 for a pool's workers, fixed for the thread's life. A loop body
 * that keeps per-thread scratch picks its slot with it, so the slot, and the scratch in that
 * core's cache, stays with the thread from loop to loop whichever chunks the thread runs.
 */
int em_threadpool_thread_index(void);

/*
 * Splits [0, n) into contiguous chunks and runs fn on them, the caller
 * included; returns when every chunk is done. Serial when pool is NULL.
 */
void em_parallel_for(em_threadpool *pool, int64_t n, em_parallel_fn fn, void *ctx);

/*
 * The round trip between the caller and a worker of the pool (the first to join), in ns: the
 * fastest of a few ping-pongs through one cache line once the worker has joined (about 50-100 ns
 * between cores that share a cache, several hundred between cores far apart; the fastest, so that
 * one interrupted round does not count). -1 for a NULL pool (or a build without threads); INT64_MAX
 * when the worker did not join or answer within ~0.1 ms (asleep, or its core busy with another
 * thread). Costs about eight round trips; a caller that adapts to the host (EmberCpuBackend:
 * em_cpu_backend_options.threads_adaptive) calls it now and then.
 */
int64_t em_threadpool_handoff_ns(em_threadpool *pool);

/*
 * The same with one contiguous range per thread (n / threads items each), claimed in order in
 * eighths; a thread done with its own range then takes what is left of the others'. For uniform
 * work that streams memory (LLM matrix-vector products): whole ranges keep the hardware
 * prefetchers on one stream, and the stealing keeps a thread the host slows down from holding up
 * the rest. em_parallel_for's interleaved chunks suit uneven work.
 */
void em_parallel_for_static(em_threadpool *pool, int64_t n, em_parallel_fn fn, void *ctx);

#ifdef __cplusplus
}
#endif

#endif /* EMBER_THREADPOOL_H */
