/*
 * profiler.h — per-instruction profiling hooks.
 *
 * When a method is prepared with a profiler, execute calls `begin` and `end`
 * around every instruction with the operator (or delegate) name. With
 * EM_ENABLE_PROFILING defined to 0 at build time the hooks compile out.
 *
 *     static void on_end(void *c, uint32_t idx, const char *name, uint64_t ns) {...}
 *     em_profiler p = {.end = on_end, .ctx = &table};
 *     cfg.profiler = &p;
 */
#ifndef EMBER_PROFILER_H
#define EMBER_PROFILER_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifndef EM_ENABLE_PROFILING
#define EM_ENABLE_PROFILING 1
#endif

typedef struct em_profiler {
  /* Before instruction `idx` runs; may be NULL. */
  void (*begin)(void *ctx, uint32_t idx, const char *name);
  /* After it ran, with its duration in ns; may be NULL. */
  void (*end)(void *ctx, uint32_t idx, const char *name, uint64_t elapsed_ns);
  void *ctx;
} em_profiler;

#ifdef __cplusplus
}
#endif

#endif /* EMBER_PROFILER_H */
