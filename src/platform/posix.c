/*
 * posix.c — the POSIX platform: stderr logging, clock_gettime, abort, malloc.
 * Built unless EMBER_PLATFORM_NOOS is selected.
 */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* syscall() */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "ember/platform.h"

static void posix_log(em_log_level level, const char *file, int line, const char *msg, size_t len) {
  const char *base = file;
  for (const char *p = file; p && *p; p++)
    if (*p == '/') base = p + 1;
  fprintf(stderr, "[ember %c %s:%d] %.*s\n", (char)level, base ? base : "?", line, (int)len, msg);
}

static uint64_t posix_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void posix_abort(void) { abort(); }

static em_platform_hooks g_hooks = {posix_log, posix_now_ns, posix_abort, malloc, free};

const em_platform_hooks *em_platform_get(void) { return &g_hooks; }

void em_platform_set(const em_platform_hooks *h) {
  if (!h) return;
  if (h->log) g_hooks.log = h->log;
  if (h->now_ns) g_hooks.now_ns = h->now_ns;
  if (h->abort) g_hooks.abort = h->abort;
  if (h->alloc) g_hooks.alloc = h->alloc;
  if (h->free) g_hooks.free = h->free;
}

uint64_t em_now_ns(void) { return g_hooks.now_ns(); }

int em_platform_enable_amx(void) {
#if defined(__linux__) && defined(__x86_64__) && defined(SYS_arch_prctl)
  /* ARCH_REQ_XCOMP_PERM (0x1023) for XFEATURE_XTILEDATA (18): Linux 5.16 and later. */
  return syscall(SYS_arch_prctl, 0x1023, 18) == 0;
#else
  return 0;
#endif
}

void em_abort(void) {
  g_hooks.abort();
  for (;;) {
  }
}
