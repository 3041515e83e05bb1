/*
 * platform.h — the platform layer: the only place the runtime touches the OS.
 *
 * The core logs, reads time and (in the rare unrecoverable case) aborts only
 * through these functions. Two implementations ship: POSIX (src/platform/posix.c)
 * and a no-OS one (src/platform/noos.c) for bare metal. An application may
 * install its own hooks at run time with em_platform_set().
 *
 *     em_platform_hooks h = *em_platform_get();
 *     h.log = my_uart_log;
 *     em_platform_set(&h);
 *     EM_LOG_ERROR("tensor %d has rank %d", i, r);
 */
#ifndef EMBER_PLATFORM_H
#define EMBER_PLATFORM_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum em_log_level {
  EM_LOG_DEBUG = 'D',
  EM_LOG_INFO = 'I',
  EM_LOG_ERROR = 'E',
  EM_LOG_FATAL = 'F'
} em_log_level;

typedef struct em_platform_hooks {
  /* Writes one formatted message (no trailing newline). */
  void (*log)(em_log_level level, const char *file, int line, const char *msg, size_t len);
  /* Monotonic nanoseconds. */
  uint64_t (*now_ns)(void);
  /* Ends the program; only for states where going on would corrupt memory. */
  void (*abort)(void);
  /* Optional allocation hooks for extensions (NULL on bare metal). */
  void *(*alloc)(size_t n);
  void (*free)(void *p);
} em_platform_hooks;

/* Returns the hooks in use (never NULL). */
const em_platform_hooks *em_platform_get(void);

/* Installs `hooks` (copied); NULL members keep the built-in default. */
void em_platform_set(const em_platform_hooks *hooks);

/* Minimum level that em_log emits (default EM_LOG_INFO). */
void em_log_set_level(em_log_level level);

/* The current minimum level. */
em_log_level em_log_get_level(void);

/*
 * em_log_quiet(1) ... em_log_quiet(0): while on (calls nest), messages of the calling thread
 * still become em_last_error() but are not passed to the log hook; other threads and the
 * process-wide level are untouched. For a caller that retries an operation whose failed
 * attempts are expected (em_module growing a method allocator).
 */
void em_log_quiet(int on);

/* Formats and emits a log message (printf-style subset: %d %i %u %ld %lld %zu %s %c %x %p %%). */
void em_log(em_log_level level, const char *file, int line, const char *fmt, ...)
/* Format checking on hosts; on arm-none-eabi uint32_t is `long`, and %u for it is fine there. */
#if defined(__GNUC__) && !defined(__arm__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

/* As em_log, with a va_list. */
void em_logv(em_log_level level, const char *file, int line, const char *fmt, va_list ap);

/*
 * Formats like vsnprintf for the subset log messages use (d i u x X c s p g f e, flags '-' '0',
 * width, precision, length modifiers). Writes at most cap bytes including the NUL; returns the
 * full length. Needs no stdio, so bare-metal images stay small.
 */
size_t em_vformat(char *dst, size_t cap, const char *fmt, va_list ap);

/* Returns the message of the last error logged on this thread ("" if none). */
const char *em_last_error(void);

/* Clears the last error message. */
void em_clear_last_error(void);

/* Monotonic time in nanoseconds. */
uint64_t em_now_ns(void);

/* Aborts through the platform hook. */
void em_abort(void);

/*
 * Asks the OS to let this process use the x86 AMX tile registers (Linux: arch_prctl
 * ARCH_REQ_XCOMP_PERM for the tile data state, process-wide). Returns 1 when granted, 0 where
 * there is no such OS permission to get (bare metal, other OSes, other architectures) or it was
 * refused. The CPU backend asks once before its first AMX kernel.
 */
int em_platform_enable_amx(void);

#ifndef EM_LOG_ENABLED
#define EM_LOG_ENABLED 1
#endif

#if EM_LOG_ENABLED
#define EM_LOG_ERROR(...) em_log(EM_LOG_ERROR, __FILE__, __LINE__, __VA_ARGS__)
#define EM_LOG_INFO(...)  em_log(EM_LOG_INFO, __FILE__, __LINE__, __VA_ARGS__)
#define EM_LOG_DEBUG(...) em_log(EM_LOG_DEBUG, __FILE__, __LINE__, __VA_ARGS__)
#else
#define EM_LOG_ERROR(...) ((void)0)
#define EM_LOG_INFO(...)  ((void)0)
#define EM_LOG_DEBUG(...) ((void)0)
#endif

#ifdef __cplusplus
}
#endif

#endif /* EMBER_PLATFORM_H */
