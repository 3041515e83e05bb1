/*
 * etdump.h — an ETDump writer: ExecuTorch's profiling file, from Ember's runtime.
 *
 * The writer records into one buffer the caller gives up front (no allocation,
 * no I/O) and is attached to a method as its profiler's recorder. It keeps a
 * profile event per executed instruction (operator name or delegate id, start
 * and end in ns of em_now_ns(), chain index, instruction index), a RunData per
 * execute ("Execute", ending with a "Method::execute" event) and method-level
 * events such as "Method::init" in a RunData named "Default", as ExecuTorch's
 * own runtime does. em_etdump_finish() serializes it all as the ETDump
 * flatbuffer of ExecuTorch 1.5 (schema etdump_schema_flatcc.fbs, file identifier
 * "ED00", size-prefixed), which its Inspector and deserializer read. When the
 * buffer is full, later events are counted as dropped (em_etdump_dropped()).
 * The ETDump has no debug-handle field for runtime events: an instruction's
 * instruction_id is its debug handle (ETRecord maps it to graph nodes).
 *
 *     static uint8_t mem[1 << 20], file[1 << 20];
 *     em_etdump *d;
 *     em_etdump_init(mem, sizeof mem, &d);
 *     em_profiler prof = {0};
 *     em_etdump_attach(d, &prof);
 *     cfg.profiler = &prof;                      // then prepare and execute
 *     size_t n;
 *     if (em_etdump_finish(d, file, sizeof file, &n) == EM_OK) ... write file[0..n) ...
 *
 * Not thread-safe: one writer serves methods executed one at a time.
 */
#ifndef EMBER_ETDUMP_H
#define EMBER_ETDUMP_H

#include <stddef.h>
#include <stdint.h>

#include "ember/profiler.h"
#include "ember/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct em_etdump em_etdump;

/* Bytes one recorded event takes in the writer's buffer (names are stored once each). */
#define EM_ETDUMP_EVENT_BYTES 40u
/* The smallest buffer em_etdump_init accepts (its bookkeeping plus a few events). */
#define EM_ETDUMP_MIN_BUFFER 8192u

/*
 * Starts a writer in buf[0..size) (any alignment; the writer lives inside it and the buffer
 * must outlive it). Fails with EM_ERR_INVALID_ARGUMENT when size < EM_ETDUMP_MIN_BUFFER.
 */
em_status em_etdump_init(void *buf, size_t size, em_etdump **out);

/* Sets p->record and p->record_ctx so that a method prepared with `p` records into `d`
 * (p->begin / p->end are left alone and keep working). */
void em_etdump_attach(em_etdump *d, em_profiler *p);

/* The recorder itself (em_profiler.record), with `etdump` an em_etdump *. */
void em_etdump_record(void *etdump, const em_profile_event *ev);

/*
 * Records intermediate outputs too: after each kernel call its output tensor (the call's last
 * argument) is copied into buf[0..size) at a 64-byte-aligned offset and a DebugEvent names it
 * (scalar type, sizes, strides, offset), as ExecuTorch's runtime does with a debug buffer.
 * The bytes are copied as laid out in memory (dense in the tensor's dim order). Save
 * buf[0..em_etdump_debug_size(d)) as the debug file the Inspector's debug_buffer_path reads.
 * A tensor that does not fit is counted as dropped. NULL turns it off.
 */
void em_etdump_set_debug_buffer(em_etdump *d, void *buf, size_t size);

/* Bytes of the debug buffer in use (what to save). */
size_t em_etdump_debug_size(const em_etdump *d);

/* Forgets every event and run (the buffer is reused). */
void em_etdump_reset(em_etdump *d);

/* Events recorded (kept; debug events too), events dropped because a buffer was full, and
 * executes begun. */
size_t em_etdump_event_count(const em_etdump *d);
uint64_t em_etdump_dropped(const em_etdump *d);
size_t em_etdump_run_count(const em_etdump *d);

/*
 * Serializes the ETDump into out[0..out_size) and sets *size_out to its size. When `out` is
 * NULL or too small, returns EM_ERR_OUT_OF_RESOURCES with *size_out the size needed; bytes
 * past out_size are never touched. The recorded events stay: finish may be called again.
 */
em_status em_etdump_finish(em_etdump *d, void *out, size_t out_size, size_t *size_out);

#ifdef __cplusplus
}
#endif

#endif /* EMBER_ETDUMP_H */
