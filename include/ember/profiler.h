/*
 * profiler.h — per-instruction profiling hooks.
 *
 * When a method is prepared with a profiler, execute calls `begin` and `end`
 * around every instruction with the operator (or delegate) name. With
 * EM_ENABLE_PROFILING defined to 0 at build time the hooks compile out.
 *
 * The optional `record` hook (appended after `ctx`, with its own context) gets
 * whole events: each instruction with its chain, index and start/end times, the
 * start of every execute, "Method::execute" when it ends and "Method::init" when
 * prepare succeeded. A delegate call's event is named "DELEGATE_CALL" there (as in ExecuTorch's
 * ETDump; `begin` / `end` get the backend id), and a backend may add an EM_PROFILE_DELEGATE_OP
 * event per operator it runs. The ETDump writer (ember/etdump.h) is such a recorder.
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

struct em_evalue;

#ifndef EM_ENABLE_PROFILING
#define EM_ENABLE_PROFILING 1
#endif

/* What an em_profile_event stands for. */
typedef enum em_profile_kind {
  EM_PROFILE_INSTRUCTION = 0, /* one instruction ran, from start_ns to end_ns */
  EM_PROFILE_METHOD = 1,      /* a method-level span outside execute ("Method::init") */
  EM_PROFILE_RUN_BEGIN = 2,   /* an execute starts (start_ns only; name is the method) */
  EM_PROFILE_RUN_END = 3,     /* the execute ended: the "Method::execute" span */
  /* An operator inside a delegate call ran: chain and instruction are the call's, `name` is
   * the operator's delegate debug id (a string the exporter's ETRecord maps to graph nodes),
   * delegate_debug_id its index in the subgraph, `output` what it wrote (or NULL). */
  EM_PROFILE_DELEGATE_OP = 4
} em_profile_kind;

/* One event, valid only during the `record` call (copy what you keep). */
typedef struct em_profile_event {
  const char *name;    /* operator or delegate id, or "Method::init" / "Method::execute" */
  uint64_t start_ns;   /* em_now_ns() clock */
  uint64_t end_ns;     /* >= start_ns */
  int32_t chain;       /* chain index; -1 for method-level events */
  int32_t instruction; /* index in the chain (the event's debug handle); 0 when method-level */
  int32_t delegate_debug_id; /* an event inside a delegate: its debug id; otherwise -1 */
  uint32_t kind;             /* em_profile_kind */
  /* An instruction's output after it ran (a kernel call's last argument), else NULL. */
  const struct em_evalue *output;
} em_profile_event;

typedef struct em_profiler {
  /* Before instruction `idx` runs; may be NULL. */
  void (*begin)(void *ctx, uint32_t idx, const char *name);
  /* After it ran, with its duration in ns; may be NULL. */
  void (*end)(void *ctx, uint32_t idx, const char *name, uint64_t elapsed_ns);
  void *ctx;
  /* Optional (appended; NULL when absent): whole events, see em_profile_event. */
  void (*record)(void *record_ctx, const struct em_profile_event *ev);
  void *record_ctx;
} em_profiler;

#ifdef __cplusplus
}
#endif

#endif /* EMBER_PROFILER_H */
