/*
 * noos.c — the bare-metal platform: no OS, no heap, no files. Logging is
 * dropped and time reads 0 until the application installs hooks with
 * em_platform_set() (a UART writer, a cycle counter).
 */
#include "ember/platform.h"

static void noos_log(em_log_level level, const char *file, int line, const char *msg, size_t len) {
  (void)level, (void)file, (void)line, (void)msg, (void)len;
}

static uint64_t noos_now_ns(void) { return 0; }

static void noos_abort(void) {
  for (;;) {
  }
}

static em_platform_hooks g_hooks = {noos_log, noos_now_ns, noos_abort, 0, 0};

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

int em_platform_enable_amx(void) { return 0; }

void em_abort(void) {
  g_hooks.abort();
  for (;;) {
  }
}
