/*
 * log.c — formatted logging and the last-error message, on top of the
 * platform hooks. Formatting is Ember's own (format.c): no stdio needed.
 */
#include <stdarg.h>
#include <string.h>

#include "ember/platform.h"

#ifndef EM_LAST_ERROR_LEN
#define EM_LAST_ERROR_LEN 512
#endif

static _Thread_local char t_last_error[EM_LAST_ERROR_LEN];
static em_log_level g_min_level = EM_LOG_INFO;
static _Thread_local int t_quiet; /* em_log_quiet depth of the calling thread */

static int level_rank(em_log_level l) {
  switch (l) {
  case EM_LOG_DEBUG: return 0;
  case EM_LOG_INFO: return 1;
  case EM_LOG_ERROR: return 2;
  case EM_LOG_FATAL: return 3;
  }
  return 1;
}

void em_log_set_level(em_log_level level) { g_min_level = level; }

em_log_level em_log_get_level(void) { return g_min_level; }

void em_log_quiet(int on) {
  if (on)
    t_quiet++;
  else if (t_quiet > 0)
    t_quiet--;
}

void em_log(em_log_level level, const char *file, int line, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  em_logv(level, file, line, fmt, ap);
  va_end(ap);
}

void em_logv(em_log_level level, const char *file, int line, const char *fmt, va_list ap) {
  char msg[EM_LAST_ERROR_LEN];
  size_t n = em_vformat(msg, sizeof msg, fmt, ap);
  size_t len = n < sizeof msg ? n : sizeof msg - 1;
  if (level_rank(level) >= level_rank(EM_LOG_ERROR)) memcpy(t_last_error, msg, len + 1);
  if (t_quiet || level_rank(level) < level_rank(g_min_level)) return;
  const em_platform_hooks *h = em_platform_get();
  if (h->log) h->log(level, file, line, msg, len);
}

const char *em_last_error(void) { return t_last_error; }

void em_clear_last_error(void) { t_last_error[0] = '\0'; }
