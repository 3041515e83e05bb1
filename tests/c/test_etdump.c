/*
 * test_etdump.c — the ETDump writer (include/ember/etdump.h) and its flatbuffer builder
 * (src/fb_builder.c) without a program: synthetic events, the result read back with Ember's
 * flatbuffer reader (schema etdump_schema_flatcc.fbs), too-small buffers refused with a clear
 * status and never written past, a full event buffer counting what it dropped.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <string.h>

#include "ember/ember.h"
#include "fb_builder.h"
#include "flatbuf.h"
#include "test_util.h"

static void ev(em_etdump *d, uint32_t kind, const char *name, int32_t chain, int32_t instr,
               uint64_t t0, uint64_t t1) {
  em_profile_event e = {name, t0, t1, chain, instr, -1, kind, NULL};
  em_etdump_record(d, &e);
}

/* Records a Method::init and `runs` executes of the instructions in `names`. */
static void record_runs(em_etdump *d, const char *const *names, int n, int runs) {
  uint64_t t = 1000;
  ev(d, EM_PROFILE_METHOD, "Method::init", -1, 0, t, t + 50);
  for (int r = 0; r < runs; r++) {
    uint64_t t0 = t += 100;
    ev(d, EM_PROFILE_RUN_BEGIN, "forward", -1, 0, t0, t0);
    for (int i = 0; i < n; i++, t += 10) ev(d, EM_PROFILE_INSTRUCTION, names[i], 0, i, t, t + 7);
    ev(d, EM_PROFILE_RUN_END, "Method::execute", -1, 0, t0, t);
  }
}

/*
 * Opens a size-prefixed ETDump with Ember's flatbuffer reader, which wants the root offset at
 * byte 0 and checks alignment from its start: it reads a copy with 8 bytes in front (a root
 * offset, padding), so offsets keep their alignment. False when the file is too big.
 */
static bool open_file(const uint8_t *buf, size_t n, fb_reader *r) {
  static uint8_t copy[1 << 18];
  CHECK(n + 8 <= sizeof copy, "file too big for the test: %zu", n);
  if (n + 8 > sizeof copy) return false;
  uint32_t root_at =
      8 + 4 +
      ((uint32_t)buf[4] | (uint32_t)buf[5] << 8 | (uint32_t)buf[6] << 16 | (uint32_t)buf[7] << 24);
  memset(copy, 0, 8);
  for (int i = 0; i < 4; i++) copy[i] = (uint8_t)(root_at >> (8 * i));
  memcpy(copy + 8, buf, n);
  fb_init(r, copy, n + 8);
  return true;
}

/* Reads the size-prefixed ETDump back: returns its number of RunData, checks their events. */
static int check_file(const uint8_t *buf, size_t n, const char *const *names, int n_instr) {
  CHECK(n >= 16 && n % 8 == 0, "size %zu", n);
  uint32_t prefix =
      (uint32_t)buf[0] | (uint32_t)buf[1] << 8 | (uint32_t)buf[2] << 16 | (uint32_t)buf[3] << 24;
  CHECK(prefix == n - 4, "size prefix %u of %zu", prefix, n);
  CHECK(memcmp(buf + 8, "ED00", 4) == 0, "file identifier");
  fb_reader r;
  if (!open_file(buf, n, &r)) return -1;
  fb_tab root = fb_root(&r);
  CHECK(fb_u32(&r, root, 0, 99) == 0, "version");
  fb_vec runs = fb_vector(&r, root, 1, 4, 4);
  for (uint32_t k = 0; k < runs.n; k++) {
    fb_tab rd = fb_vec_table(&r, runs, k);
    const char *rname = fb_string(&r, rd, 0, NULL);
    CHECK(fb_i32(&r, rd, 1, 0) == -1, "bundled_input_index");
    fb_vec evs = fb_vector(&r, rd, 3, 4, 4);
    if (k == 0) {
      CHECK(rname && strcmp(rname, "Default") == 0, "run 0 is %s", rname ? rname : "(null)");
      CHECK(evs.n == 1, "Default holds %u events", evs.n);
      continue;
    }
    CHECK(rname && strcmp(rname, "Execute") == 0, "run %u is %s", k, rname ? rname : "(null)");
    CHECK(evs.n == (uint32_t)n_instr + 1, "run %u holds %u events", k, evs.n);
    for (uint32_t i = 0; i < evs.n; i++) {
      fb_tab e = fb_table(&r, fb_vec_table(&r, evs, i), 0);
      const char *nm = fb_string(&r, e, 0, NULL);
      const char *want = i < (uint32_t)n_instr ? names[i] : "Method::execute";
      CHECK(nm && strcmp(nm, want) == 0, "event %u is %s, want %s", i, nm ? nm : "(null)", want);
      int32_t chain = fb_i32(&r, e, 1, 7), instr = fb_i32(&r, e, 2, 7);
      CHECK(chain == (i < (uint32_t)n_instr ? 0 : -1), "chain %d", chain);
      CHECK(instr == (i < (uint32_t)n_instr ? (int32_t)i : 0), "instruction %d", instr);
      CHECK(fb_i32(&r, e, 3, 7) == -1, "delegate_debug_id_int");
      CHECK(fb_u64(&r, e, 7, 0) >= fb_u64(&r, e, 6, 1), "end >= start");
    }
  }
  CHECK(!r.bad, "reader: %s at %u", r.why ? r.why : "", r.where);
  return (int)runs.n;
}

static void test_too_small_buffers(void) {
  static uint8_t mem[EM_ETDUMP_MIN_BUFFER];
  em_etdump *d = (em_etdump *)&d;
  CHECK(em_etdump_init(mem, sizeof mem - 1, &d) == EM_ERR_INVALID_ARGUMENT && d == NULL, "small");
  CHECK(em_etdump_init(NULL, 1 << 20, &d) == EM_ERR_INVALID_ARGUMENT, "NULL buffer");
}

static void test_round_trip_and_short_output(void) {
  static uint8_t mem[1 << 16];
  static uint8_t out[1 << 14];
  const char *names[] = {"aten::convolution.out", "aten::relu.out", "EmberCpuBackend",
                         "aten::relu.out"};
  em_etdump *d;
  CHECK(em_etdump_init(mem + 3, sizeof mem - 3, &d) == EM_OK, "init (unaligned buffer)");
  em_profiler p = {0};
  em_etdump_attach(d, &p);
  CHECK(p.record == em_etdump_record && p.record_ctx == d && !p.end, "attach");
  record_runs(d, names, 4, 3);
  CHECK(em_etdump_event_count(d) == 1 + 3 * 5, "events %zu", em_etdump_event_count(d));
  CHECK(em_etdump_run_count(d) == 3 && em_etdump_dropped(d) == 0, "runs, dropped");
  size_t need = 0;
  CHECK(em_etdump_finish(d, NULL, 0, &need) == EM_ERR_OUT_OF_RESOURCES && need > 0, "size query");
  for (size_t cut = 1; cut <= 64 && cut <= need; cut += 9) {
    memset(out, 0xA5, sizeof out);
    size_t got = 0;
    em_status st = em_etdump_finish(d, out, need - cut, &got);
    CHECK(st == EM_ERR_OUT_OF_RESOURCES && got == need, "short by %zu: %s", cut, em_status_str(st));
    CHECK(strstr(em_last_error(), "ETDump needs") != NULL, "last error: %s", em_last_error());
    int clean = 1;
    for (size_t i = need - cut; i < sizeof out; i++) clean &= out[i] == 0xA5;
    CHECK(clean, "bytes past the %zu-byte buffer were written", need - cut);
  }
  size_t n = 0;
  CHECK(em_etdump_finish(d, out, need, &n) == EM_OK && n == need, "finish %zu of %zu", n, need);
  CHECK(check_file(out, n, names, 4) == 4, "Default + 3 runs");
  /* finish is repeatable, and reset forgets everything */
  size_t n2 = 0;
  CHECK(em_etdump_finish(d, out, sizeof out, &n2) == EM_OK && n2 == n, "finish again");
  em_etdump_reset(d);
  CHECK(em_etdump_event_count(d) == 0 && em_etdump_run_count(d) == 0, "reset");
  CHECK(em_etdump_finish(d, out, sizeof out, &n2) == EM_OK && n2 > 0, "empty ETDump");
}

static void test_full_buffer_drops(void) {
  static uint8_t mem[EM_ETDUMP_MIN_BUFFER];
  static uint8_t out[1 << 16];
  const char *names[] = {"aten::add.out", "aten::mul.out"};
  em_etdump *d;
  CHECK(em_etdump_init(mem, sizeof mem, &d) == EM_OK, "init");
  record_runs(d, names, 2, 500);
  CHECK(em_etdump_dropped(d) > 0, "nothing dropped from a full buffer");
  CHECK(em_etdump_run_count(d) == 500, "runs %zu", em_etdump_run_count(d));
  /* every record is kept or counted: 1 init + 500 * (marker + 2 + execute) */
  CHECK(em_etdump_event_count(d) + em_etdump_dropped(d) + 500 >= 1 + 500 * 4, "accounting");
  size_t n = 0;
  CHECK(em_etdump_finish(d, out, sizeof out, &n) == EM_OK, "finish after drops");
  CHECK(n > 0 && memcmp(out + 8, "ED00", 4) == 0, "identifier");
}

/* More distinct name pointers than the writer's hash remembers: every name still right. */
static void test_many_names(void) {
  static uint8_t mem[1 << 18];
  static uint8_t out[1 << 18];
  static char store[300][16];
  static const char *names[300];
  for (int i = 0; i < 300; i++) {
    snprintf(store[i], sizeof store[i], "op%d.out", i);
    names[i] = store[i];
  }
  em_etdump *d;
  CHECK(em_etdump_init(mem, sizeof mem, &d) == EM_OK, "init");
  record_runs(d, names, 300, 2);
  CHECK(em_etdump_dropped(d) == 0, "dropped %llu", (unsigned long long)em_etdump_dropped(d));
  size_t n = 0;
  CHECK(em_etdump_finish(d, out, sizeof out, &n) == EM_OK, "finish");
  CHECK(check_file(out, n, names, 300) == 3, "Default + 2 runs");
}

/* Intermediate outputs: a debug buffer receives each instruction's output tensor, a DebugEvent
 * (before the instruction's ProfileEvent, as ExecuTorch writes them) names it. */
static void test_debug_events(void) {
  static uint8_t mem[1 << 16], dbg[4096], out[1 << 14];
  float data[6] = {1, 2, 3, 4, 5, 6};
  int64_t sizes[2] = {2, 3}, strides[2] = {3, 1};
  uint8_t order[2] = {0, 1};
  em_tensor t = {data, sizes, strides, order, 6, 6, 2, EM_DTYPE_F32, 0};
  em_evalue v = {.u.tensor = &t, .tag = EM_TAG_TENSOR};
  em_etdump *d;
  CHECK(em_etdump_init(mem, sizeof mem, &d) == EM_OK, "init");
  em_etdump_set_debug_buffer(d, dbg, sizeof dbg);
  em_profile_event b = {"forward", 10, 10, -1, 0, -1, EM_PROFILE_RUN_BEGIN, NULL};
  em_etdump_record(d, &b);
  for (int i = 0; i < 2; i++) {
    data[0] = (float)(100 + i);
    em_profile_event e = {"aten::add.out", 20, 30, 0, i, -1, EM_PROFILE_INSTRUCTION, &v};
    em_etdump_record(d, &e);
  }
  em_profile_event x = {"Method::execute", 10, 40, -1, 0, -1, EM_PROFILE_RUN_END, NULL};
  em_etdump_record(d, &x);
  CHECK(em_etdump_event_count(d) == 5, "2 debug + 3 profile events: %zu", em_etdump_event_count(d));
  CHECK(em_etdump_debug_size(d) == 64 + 24, "debug bytes %zu", em_etdump_debug_size(d));
  float got[2];
  memcpy(&got[0], dbg, 4);
  memcpy(&got[1], dbg + 64, 4);
  CHECK(got[0] == 100 && got[1] == 101, "tensor copies %g %g", got[0], got[1]);
  size_t n = 0;
  CHECK(em_etdump_finish(d, out, sizeof out, &n) == EM_OK, "finish");
  static uint8_t copy[1 << 14];
  uint32_t root_at = 12 + ((uint32_t)out[4] | (uint32_t)out[5] << 8 | (uint32_t)out[6] << 16 |
                           (uint32_t)out[7] << 24);
  memset(copy, 0, 8);
  for (int i = 0; i < 4; i++) copy[i] = (uint8_t)(root_at >> (8 * i));
  memcpy(copy + 8, out, n);
  fb_reader r;
  fb_init(&r, copy, n + 8);
  fb_vec runs = fb_vector(&r, fb_root(&r), 1, 4, 4);
  CHECK(runs.n == 1, "runs %u", runs.n);
  fb_vec evs = fb_vector(&r, fb_vec_table(&r, runs, 0), 3, 4, 4);
  CHECK(evs.n == 5, "events %u", evs.n);
  for (uint32_t i = 0; i < 2 && evs.n == 5; i++) {
    fb_tab de = fb_table(&r, fb_vec_table(&r, evs, 2 * i), 2);
    CHECK(fb_present(de), "event %u is a DebugEvent", 2 * i);
    CHECK(fb_u64(&r, de, 0, 9) == 0 && fb_i32(&r, de, 1, 9) == (int32_t)i, "chain, instruction");
    fb_tab val = fb_table(&r, de, 2);
    CHECK(fb_u8(&r, val, 0, 0) == 5, "ValueType.Tensor");
    fb_tab ten = fb_table(&r, val, 1);
    CHECK(fb_i8(&r, ten, 0, 0) == 6, "ScalarType.FLOAT");
    fb_vec sz = fb_vector(&r, ten, 1, 8, 8), st = fb_vector(&r, ten, 2, 8, 8);
    CHECK(sz.n == 2 && fb_vec_i64(&r, sz, 0) == 2 && fb_vec_i64(&r, sz, 1) == 3, "sizes");
    CHECK(st.n == 2 && fb_vec_i64(&r, st, 0) == 3 && fb_vec_i64(&r, st, 1) == 1, "strides");
    CHECK(fb_i64(&r, ten, 3, -1) == 64 * (int64_t)i, "offset");
    fb_tab pe = fb_table(&r, fb_vec_table(&r, evs, 2 * i + 1), 0);
    const char *nm = fb_string(&r, pe, 0, NULL);
    CHECK(nm && strcmp(nm, "aten::add.out") == 0, "then the ProfileEvent");
  }
  CHECK(!r.bad, "reader: %s at %u", r.why ? r.why : "", r.where);
  /* A debug buffer too small for the next tensor: the tensor is dropped, the event kept. */
  em_etdump_reset(d);
  em_etdump_set_debug_buffer(d, dbg, 70);
  em_etdump_record(d, &b);
  for (int i = 0; i < 2; i++) {
    em_profile_event e = {"aten::add.out", 20, 30, 0, i, -1, EM_PROFILE_INSTRUCTION, &v};
    em_etdump_record(d, &e);
  }
  CHECK(em_etdump_dropped(d) == 1 && em_etdump_event_count(d) == 3, "dropped %llu, events %zu",
        (unsigned long long)em_etdump_dropped(d), em_etdump_event_count(d));
}

/* Events inside a delegate (EM_PROFILE_DELEGATE_OP): each id is written as the event's
 * delegate_debug_id_str with no name and delegate_debug_id_int -1, kept by its text although
 * every id is built in the same buffer (as a backend builds them on its stack). */
static void test_delegate_events(void) {
  static uint8_t mem[1 << 14], out[1 << 14];
  em_etdump *d = NULL;
  CHECK(em_etdump_init(mem, sizeof mem, &d) == EM_OK, "init");
  const char *ids[] = {"conv2d #0", "gemm #1", "conv2d+conv2d #2-3", "gemm #1"};
  char buf[32];
  ev(d, EM_PROFILE_RUN_BEGIN, "forward", -1, 0, 100, 100);
  for (int i = 0; i < 4; i++) {
    memcpy(buf, ids[i], strlen(ids[i]) + 1);
    em_profile_event e = {buf, 110u + 10u * i, 115u + 10u * i, 0, 5, i, EM_PROFILE_DELEGATE_OP,
                          NULL};
    em_etdump_record(d, &e);
    memset(buf, 'x', sizeof buf - 1);
  }
  ev(d, EM_PROFILE_INSTRUCTION, "DELEGATE_CALL", 0, 5, 105, 160);
  ev(d, EM_PROFILE_RUN_END, "Method::execute", -1, 0, 100, 170);
  size_t n = 0;
  CHECK(em_etdump_finish(d, out, sizeof out, &n) == EM_OK, "finish");
  fb_reader r;
  if (!open_file(out, n, &r)) return;
  fb_vec runs = fb_vector(&r, fb_root(&r), 1, 4, 4);
  CHECK(runs.n == 1, "%u runs", runs.n);
  if (runs.n != 1) return;
  fb_vec evs = fb_vector(&r, fb_vec_table(&r, runs, 0), 3, 4, 4);
  CHECK(evs.n == 6, "%u events", evs.n);
  for (uint32_t i = 0; i < evs.n && i < 6; i++) {
    fb_tab e = fb_table(&r, fb_vec_table(&r, evs, i), 0);
    const char *nm = fb_string(&r, e, 0, NULL), *id = fb_string(&r, e, 4, NULL);
    CHECK(fb_i32(&r, e, 3, 7) == -1, "event %u: delegate_debug_id_int", i);
    if (i < 4) {
      CHECK(!nm && id && strcmp(id, ids[i]) == 0, "event %u: id %s, want %s", i, id ? id : "(null)",
            ids[i]);
      CHECK(fb_i32(&r, e, 2, 7) == 5 && fb_i32(&r, e, 1, 7) == 0, "event %u: ids", i);
    } else {
      CHECK(nm && !id, "event %u: a name and no delegate id", i);
    }
  }
  CHECK(!r.bad, "reader: %s", r.why);
}

/* The builder alone: a table with every scalar size, read back. */
static void test_builder(void) {
  static uint8_t buf[256];
  fbb b;
  fbb_init(&b, buf, sizeof buf);
  fbb_ref s = fbb_string(&b, "xyz", 3);
  fbb_field f[] = {{0, 1, 0, 0x12},
                   {1, 2, 0, 0x3456},
                   {2, 8, 0, 0x1122334455667788ull},
                   {3, 4, 0, 0xdeadbeef},
                   {5, 4, 1, s}};
  fbb_ref t = fbb_table(&b, f, 5);
  size_t n = 0;
  CHECK(fbb_finish(&b, t, NULL, false, &n) == EM_OK, "finish");
  fb_reader r;
  fb_init(&r, buf, n);
  fb_tab root = fb_root(&r);
  CHECK(fb_u8(&r, root, 0, 0) == 0x12 && fb_u32(&r, root, 3, 0) == 0xdeadbeef, "u8, u32");
  CHECK(fb_u64(&r, root, 2, 0) == 0x1122334455667788ull, "u64");
  CHECK(!fb_has(&r, root, 4), "absent field");
  const char *str = fb_string(&r, root, 5, NULL);
  CHECK(str && strcmp(str, "xyz") == 0 && !r.bad, "string");
  fbb_init(&b, NULL, 0);
  fbb_string(&b, "abc", 3);
  CHECK(fbb_finish(&b, 0, "ED00", true, &n) == EM_ERR_OUT_OF_RESOURCES && n > 0, "count only");
}

int main(void) {
  em_log_set_level(EM_LOG_FATAL); /* the refusals below are expected; em_last_error() keeps them */
  test_too_small_buffers();
  test_round_trip_and_short_output();
  test_full_buffer_drops();
  test_many_names();
  test_debug_events();
  test_delegate_events();
  test_builder();
  return test_summary("test_etdump");
}
