/*
 * etdump.c — the ETDump writer (include/ember/etdump.h).
 *
 * The caller's buffer holds, in order: this writer's state (with a small hash
 * table from name pointers to stored names), the event records growing up, and
 * the names growing down from the end; when they would meet, events are
 * dropped and counted. A record is an instruction or method event, or a marker
 * opening a run (one per execute). Names are copied once each, so the method
 * may be gone when finish runs. finish builds the flatbuffer with fb_builder
 * (back to front): names, then each ProfileEvent and its Event, then each
 * RunData with its events vector, then the run_data vector and the root.
 */
#include "ember/etdump.h"

#include <string.h>

#include "fb_builder.h"
#include "internal.h"

/* Name hash slots (a power of two); names remembered in it (later new names are copied per
 * event); longer names are cut; etd_rec.name of a run marker and of a debug event (a tensor);
 * etd_name.len flag of a debug event's sizes and strides. */
#define ETD_SLOTS        256u
#define ETD_MAX_NAMES    192u
#define ETD_MAX_NAME_LEN 511u
#define ETD_MARKER       UINT32_MAX
#define ETD_DEBUG        (UINT32_MAX - 1u)
#define ETD_DIMS         0x80000000u
#define ETD_DSTR         (-2) /* etd_rec.dbg of an operator inside a delegate: its name is its id */

typedef struct etd_rec {
  uint64_t start, end;
  uint32_t name;             /* offset of the name entry in the area; ETD_MARKER, ETD_DEBUG */
  int32_t chain, instr, dbg; /* dbg: delegate_debug_id_int, ETD_DSTR; a debug event: see below */
  uint32_t run;              /* 0: "Default" (outside execute); k: the k-th execute */
  uint32_t fb;               /* finish's scratch: the Event's (a marker: the RunData's) reference */
} etd_rec;

/* A stored name: header then the bytes and a NUL, padded to 4. With ETD_DIMS in `len`: a debug
 * event's tensors (len & ~ETD_DIMS bytes, see etd_debug); its record holds 1 in `end` for a
 * list, this entry's offset in `dbg` and, inside a delegate, 1 + its id's name offset in
 * `start` (else 0). */
typedef struct etd_name {
  uint32_t len;
  uint32_t fb; /* finish's scratch: the string's reference */
} etd_name;

typedef struct etd_slot {
  const char *ptr; /* the caller's pointer; a name kept by content: its stored copy */
  uint32_t pos;
  uint32_t by_content;
} etd_slot;

struct em_etdump {
  uint8_t *area;    /* records from area[0] up, names from area[cap] down */
  size_t cap;       /* bytes of the area */
  size_t n_rec;     /* records, markers included */
  size_t n_events;  /* records that are events */
  size_t str_used;  /* bytes of names at the top of the area */
  uint32_t n_names; /* names in the hash */
  uint32_t n_runs;  /* executes begun */
  uint32_t cur_run; /* the execute under way, 0 outside */
  uint64_t dropped; /* events (and run markers) that did not fit */
  uint8_t *dbg_buf; /* intermediate outputs: tensor bytes at 64-aligned offsets */
  size_t dbg_cap, dbg_used;
  etd_slot slots[ETD_SLOTS];
};

_Static_assert(sizeof(etd_rec) == EM_ETDUMP_EVENT_BYTES, "EM_ETDUMP_EVENT_BYTES is stale");

static etd_rec *etd_rec_at(const em_etdump *d, size_t i) { return (etd_rec *)(void *)d->area + i; }

static etd_name *etd_name_at(const em_etdump *d, uint32_t pos) {
  return (etd_name *)(void *)(d->area + pos);
}

static bool etd_room(const em_etdump *d, size_t extra) {
  return (d->n_rec + 1) * sizeof(etd_rec) + d->str_used + extra <= d->cap;
}

em_status em_etdump_init(void *buf, size_t size, em_etdump **out) {
  if (!out) EM_FAIL(EM_ERR_INVALID_ARGUMENT, "em_etdump_init: no output pointer");
  *out = NULL;
  if (!buf || size < EM_ETDUMP_MIN_BUFFER)
    EM_FAIL(EM_ERR_INVALID_ARGUMENT, "em_etdump_init: the buffer needs at least %u bytes, has %zu",
            EM_ETDUMP_MIN_BUFFER, buf ? size : (size_t)0);
  uintptr_t p = (uintptr_t)buf, a = (p + 7u) & ~(uintptr_t)7u;
  size_t hdr = (sizeof(em_etdump) + 7u) & ~(size_t)7u;
  em_etdump *d = (em_etdump *)a;
  memset(d, 0, sizeof *d);
  d->area = (uint8_t *)a + hdr;
  size_t cap = size - (size_t)(a - p) - hdr;
  d->cap = (cap > 0xfffffff0u ? 0xfffffff0u : cap) & ~(size_t)7u;
  *out = d;
  return EM_OK;
}

void em_etdump_attach(em_etdump *d, em_profiler *p) {
  if (!p) return;
  p->record = d ? em_etdump_record : NULL;
  p->record_ctx = d;
}

void em_etdump_reset(em_etdump *d) {
  if (!d) return;
  d->n_rec = d->n_events = d->str_used = 0;
  d->n_names = d->n_runs = d->cur_run = 0;
  d->dropped = 0;
  d->dbg_used = 0;
  memset(d->slots, 0, sizeof d->slots);
}

size_t em_etdump_event_count(const em_etdump *d) { return d ? d->n_events : 0; }
uint64_t em_etdump_dropped(const em_etdump *d) { return d ? d->dropped : 0; }
size_t em_etdump_run_count(const em_etdump *d) { return d ? d->n_runs : 0; }
size_t em_etdump_debug_size(const em_etdump *d) { return d ? d->dbg_used : 0; }

void em_etdump_set_debug_buffer(em_etdump *d, void *buf, size_t size) {
  if (!d) return;
  d->dbg_buf = buf;
  d->dbg_cap = buf ? size : 0;
  d->dbg_used = 0;
}

static size_t etd_entry_bytes(const etd_name *e) {
  size_t n = e->len & ETD_DIMS ? (e->len & ~ETD_DIMS) : e->len + 1;
  return (sizeof(etd_name) + n + 3) & ~(size_t)3;
}

/* The stored copy of `s` (one per distinct pointer, or with by_content one per distinct text,
 * while the hash has room), or ETD_MARKER when it and one more record do not fit. Operator names
 * are static strings: their pointer identifies them. A delegate's ids are built per event in the
 * delegate's stack: their text does. */
static uint32_t etd_intern(em_etdump *d, const char *s, bool by_content) {
  size_t len = 0;
  while (len < ETD_MAX_NAME_LEN && s[len]) len++;
  uintptr_t h = ((uintptr_t)s >> 3) * 2654435761u;
  if (by_content) {
    h = 2166136261u;
    for (size_t k = 0; k < len; k++) h = (h ^ (uint8_t)s[k]) * 16777619u;
  }
  uint32_t i = (uint32_t)(h ^ (h >> 15)) & (ETD_SLOTS - 1);
  while (d->slots[i].ptr) {
    const etd_slot *sl = &d->slots[i];
    if (!by_content && !sl->by_content && sl->ptr == s) return sl->pos;
    if (by_content && sl->by_content && etd_name_at(d, sl->pos)->len == len &&
        memcmp(sl->ptr, s, len) == 0)
      return sl->pos;
    i = (i + 1) & (ETD_SLOTS - 1);
  }
  size_t bytes = (sizeof(etd_name) + len + 1 + 3) & ~(size_t)3;
  if (!etd_room(d, bytes)) return ETD_MARKER;
  d->str_used += bytes;
  uint32_t pos = (uint32_t)(d->cap - d->str_used);
  etd_name *e = etd_name_at(d, pos);
  e->len = (uint32_t)len;
  e->fb = 0;
  memcpy(e + 1, s, len);
  ((char *)(e + 1))[len] = '\0';
  if (d->n_names < ETD_MAX_NAMES) {
    d->slots[i].ptr = by_content ? (const char *)(e + 1) : s;
    d->slots[i].pos = pos;
    d->slots[i].by_content = by_content;
    d->n_names++;
  }
  return pos;
}

/* A tensor the debug buffer can take: a sane shape, and data when it has bytes. */
static bool etd_loggable(const em_tensor *t) {
  return t && t->dim >= 0 && t->dim <= EM_MAX_DIM && (!t->dim || (t->sizes && t->strides)) &&
         (t->data || em_tensor_nbytes(t) == 0);
}

#define ETD_MAX_LIST 64u /* longest tensor list logged */

static const em_tensor *etd_item(const em_evalue *v, size_t k) {
  return v->tag == EM_TAG_TENSOR ? v->u.tensor : em_evalue_tensor(v->u.list.items[k]);
}

/*
 * Copies what an instruction wrote (a tensor, or a list of tensors: ExecuTorch passes several
 * outputs as one TensorList argument) into the debug buffer, each at a 64-aligned offset, and
 * records a debug event. Its entry holds int64s: the count, then per tensor its offset, scalar
 * type, dim, sizes and strides.
 */
/* Records a scalar output (int, double, bool: sym_size, _local_scalar_dense, prim ops) as a
 * debug event; its entry holds three int64s: 0 (no tensors), the tag and the value's bits. */
static void etd_debug_scalar(em_etdump *d, const em_profile_event *ev, uint32_t run,
                             uint64_t dstr) {
  const em_evalue *v = ev->output;
  if (!etd_room(d, sizeof(etd_name) + 24)) {
    d->dropped++;
    return;
  }
  d->str_used += sizeof(etd_name) + 24;
  uint32_t pos = (uint32_t)(d->cap - d->str_used);
  etd_name *e = etd_name_at(d, pos);
  e->len = 24u | ETD_DIMS;
  e->fb = 0;
  int64_t w[3] = {0, v->tag, 0};
  if (v->tag == EM_TAG_INT)
    w[2] = v->u.i;
  else if (v->tag == EM_TAG_BOOL)
    w[2] = v->u.b;
  else
    memcpy(&w[2], &v->u.d, 8);
  memcpy(e + 1, w, sizeof w);
  *etd_rec_at(d, d->n_rec++) =
      (etd_rec){dstr, 0, ETD_DEBUG, ev->chain, ev->instruction, (int32_t)pos, run, 0};
  d->n_events++;
}

static void etd_debug(em_etdump *d, const em_profile_event *ev, uint32_t run, uint64_t dstr) {
  const em_evalue *v = ev->output;
  if (v->tag == EM_TAG_INT || v->tag == EM_TAG_DOUBLE || v->tag == EM_TAG_BOOL) {
    etd_debug_scalar(d, ev, run, dstr);
    return;
  }
  bool list = v->tag == EM_TAG_LIST_TENSOR;
  size_t n = list ? v->u.list.n : 1, words = 1, end = d->dbg_used;
  if ((!list && v->tag != EM_TAG_TENSOR) || n == 0 || n > ETD_MAX_LIST) return;
  for (size_t k = 0; k < n; k++) {
    const em_tensor *t = etd_item(v, k);
    if (!etd_loggable(t)) return;
    size_t off = (end + 63u) & ~(size_t)63u, nbytes = em_tensor_nbytes(t);
    if (off > d->dbg_cap || nbytes > d->dbg_cap - off) {
      d->dropped++;
      return;
    }
    end = off + nbytes;
    words += 3 + 2 * (size_t)t->dim;
  }
  if (!etd_room(d, sizeof(etd_name) + 8 * words)) {
    d->dropped++;
    return;
  }
  d->str_used += sizeof(etd_name) + 8 * words;
  uint32_t pos = (uint32_t)(d->cap - d->str_used);
  etd_name *e = etd_name_at(d, pos);
  e->len = (uint32_t)(8 * words) | ETD_DIMS;
  e->fb = 0;
  uint8_t *p = (uint8_t *)(e + 1);
  int64_t head[3] = {(int64_t)n, 0, 0};
  memcpy(p, head, 8);
  p += 8;
  for (size_t k = 0; k < n; k++) {
    const em_tensor *t = etd_item(v, k);
    size_t off = (d->dbg_used + 63u) & ~(size_t)63u, nbytes = em_tensor_nbytes(t);
    if (nbytes) memcpy(d->dbg_buf + off, t->data, nbytes);
    d->dbg_used = off + nbytes;
    head[0] = (int64_t)off;
    head[1] = t->dtype;
    head[2] = t->dim;
    memcpy(p, head, 24);
    memcpy(p + 24, t->sizes, 8u * (size_t)t->dim);
    memcpy(p + 24 + 8u * (size_t)t->dim, t->strides, 8u * (size_t)t->dim);
    p += 24 + 16u * (size_t)t->dim;
  }
  *etd_rec_at(d, d->n_rec++) =
      (etd_rec){dstr, list, ETD_DEBUG, ev->chain, ev->instruction, (int32_t)pos, run, 0};
  d->n_events++;
}

void em_etdump_record(void *etdump, const em_profile_event *ev) {
  em_etdump *d = etdump;
  if (!d || !ev) return;
  uint32_t run = ev->kind == EM_PROFILE_METHOD ? 0 : d->cur_run;
  if (ev->kind == EM_PROFILE_RUN_BEGIN) {
    d->cur_run = run = ++d->n_runs;
    if (!etd_room(d, 0)) {
      d->dropped++;
      return;
    }
    etd_rec *r = etd_rec_at(d, d->n_rec++);
    *r = (etd_rec){ev->start_ns, ev->start_ns, ETD_MARKER, -1, 0, -1, run, 0};
    return;
  }
  if (ev->kind == EM_PROFILE_RUN_END) d->cur_run = 0;
  const bool inner = ev->kind == EM_PROFILE_DELEGATE_OP;
  uint32_t name = etd_intern(d, ev->name ? ev->name : "", inner);
  if (name == ETD_MARKER) {
    d->dropped += 1u + (d->dbg_buf && ev->output);
    return;
  }
  if (d->dbg_buf && ev->output && (inner || ev->kind == EM_PROFILE_INSTRUCTION))
    etd_debug(d, ev, run, inner ? (uint64_t)name + 1u : 0u);
  if (!etd_room(d, 0)) {
    d->dropped++;
    return;
  }
  etd_rec *r = etd_rec_at(d, d->n_rec++);
  *r = (etd_rec){ev->start_ns,
                 ev->end_ns,
                 name,
                 ev->chain,
                 ev->instruction,
                 inner ? ETD_DSTR : ev->delegate_debug_id,
                 run,
                 0};
  d->n_events++;
}

/* ProfileEvent then Event for record r (schema etdump_schema_flatcc.fbs). An operator inside a
 * delegate has its name as delegate_debug_id_str (and no name, as ExecuTorch writes it). */
static fbb_ref etd_write_event(fbb *b, const em_etdump *d, const etd_rec *r) {
  const bool inner = r->dbg == ETD_DSTR;
  const fbb_ref name = etd_name_at(d, r->name)->fb;
  fbb_field pe[] = {
      {inner ? 4 : 0, 4, 1, name},                      /* name, delegate_debug_id_str */
      {1, 4, 0, (uint32_t)r->chain},                    /* chain_index */
      {2, 4, 0, (uint32_t)r->instr},                    /* instruction_id */
      {3, 4, 0, inner ? UINT32_MAX : (uint32_t)r->dbg}, /* delegate_debug_id_int */
      {6, 8, 0, r->start},                              /* start_time */
      {7, 8, 0, r->end > r->start ? r->end : r->start}, /* end_time */
  };
  fbb_ref p = fbb_table(b, pe, sizeof pe / sizeof pe[0]);
  fbb_field e[] = {{0, 4, 1, p}}; /* Event.profile_event */
  return fbb_table(b, e, 1);
}

/* Tensor (or TensorList), Value, DebugEvent and Event for debug record r (ExecuTorch's shape:
 * the value with the instruction's ids, delegate_debug_id_int -1, no name; inside a delegate
 * the operator's delegate_debug_id_str). */
static fbb_ref etd_write_debug(fbb *b, const em_etdump *d, const etd_rec *r) {
  const uint8_t *p = (const uint8_t *)(etd_name_at(d, (uint32_t)r->dbg) + 1);
  int64_t n, head[3], sizes[EM_MAX_DIM], strides[EM_MAX_DIM];
  fbb_ref tensors[ETD_MAX_LIST];
  memcpy(&n, p, 8);
  p += 8;
  for (int64_t k = 0; k < n; k++) {
    memcpy(head, p, 24);
    size_t dim = (size_t)head[2];
    memcpy(sizes, p + 24, 8 * dim);
    memcpy(strides, p + 24 + 8 * dim, 8 * dim);
    p += 24 + 16 * dim;
    fbb_ref sv = fbb_vec_i64(b, sizes, (uint32_t)dim), stv = fbb_vec_i64(b, strides, (uint32_t)dim);
    fbb_field tensor[] = {{0, 1, 0, (uint8_t)head[1]}, /* scalar_type */
                          {1, 4, 1, sv},
                          {2, 4, 1, stv},
                          {3, 8, 0, (uint64_t)head[0]}}; /* offset in the debug buffer */
    tensors[k] = fbb_table(b, tensor, 4);
  }
  fbb_ref v;
  if (n == 0) { /* a scalar: tag, value */
    int64_t w[2];
    memcpy(w, p, 16);
    uint8_t type = w[0] == EM_TAG_INT ? 1 : w[0] == EM_TAG_BOOL ? 2 : 4; /* Int, Bool, Double */
    fbb_field f[] = {{0, type == 2 ? 1 : 8, 0, (uint64_t)w[1]}};
    fbb_ref sv = fbb_table(b, f, 1);
    uint16_t slot = type == 1 ? 3 : type == 2 ? 6 : 5; /* int_value, bool_value, double_value */
    fbb_field value[] = {{0, 1, 0, type}, {slot, 4, 1, sv}};
    v = fbb_table(b, value, 2);
  } else if (r->end) { /* a list */
    fbb_refvec_begin(b, (uint32_t)n);
    for (int64_t k = n; k-- > 0;) fbb_refvec_push(b, tensors[k]);
    fbb_field tl[] = {{0, 4, 1, fbb_refvec_end(b, (uint32_t)n)}};
    fbb_field value[] = {{0, 1, 0, 6 /* ValueType.TensorList */}, {2, 4, 1, fbb_table(b, tl, 1)}};
    v = fbb_table(b, value, 2);
  } else {
    fbb_field value[] = {{0, 1, 0, 5 /* ValueType.Tensor */}, {1, 4, 1, tensors[0]}};
    v = fbb_table(b, value, 2);
  }
  fbb_field de[] = {{0, 8, 0, (uint64_t)(int64_t)r->chain}, /* chain_index */
                    {1, 4, 0, (uint32_t)r->instr},          /* instruction_id */
                    {2, 4, 1, v},                           /* debug_entry */
                    {3, 4, 0, UINT32_MAX},                  /* delegate_debug_id_int -1 */
                    {4, 4, 1, 0}};                          /* delegate_debug_id_str */
  if (r->start) de[4].val = etd_name_at(d, (uint32_t)(r->start - 1u))->fb;
  fbb_ref dev = fbb_table(b, de, r->start ? 5 : 4);
  fbb_field ev[] = {{2, 4, 1, dev}}; /* Event.debug_event */
  return fbb_table(b, ev, 1);
}

/* RunData named `name` holding the events of run `run` among records [from, to). */
static fbb_ref etd_write_run(fbb *b, const em_etdump *d, fbb_ref name, uint32_t run, size_t from,
                             size_t to) {
  uint32_t n = 0;
  for (size_t k = from; k < to; k++)
    n += etd_rec_at(d, k)->name != ETD_MARKER && etd_rec_at(d, k)->run == run;
  fbb_refvec_begin(b, n);
  for (size_t k = to; k-- > from;)
    if (etd_rec_at(d, k)->name != ETD_MARKER && etd_rec_at(d, k)->run == run)
      fbb_refvec_push(b, etd_rec_at(d, k)->fb);
  fbb_ref events = fbb_refvec_end(b, n);
  fbb_field f[] = {
      {0, 4, 1, name}, {1, 4, 0, UINT32_MAX /* bundled_input_index -1 */}, {3, 4, 1, events}};
  return fbb_table(b, f, 3);
}

em_status em_etdump_finish(em_etdump *d, void *out, size_t out_size, size_t *size_out) {
  if (!d || !size_out) EM_FAIL(EM_ERR_INVALID_ARGUMENT, "em_etdump_finish: writer and size_out");
  *size_out = 0;
  fbb b;
  fbb_init(&b, out, out_size);
  for (size_t pos = d->cap - d->str_used; pos < d->cap;) {
    etd_name *e = etd_name_at(d, (uint32_t)pos);
    if (!(e->len & ETD_DIMS)) e->fb = fbb_string(&b, (const char *)(e + 1), e->len);
    pos += etd_entry_bytes(e);
  }
  fbb_ref s_default = fbb_string(&b, "Default", 7), s_execute = fbb_string(&b, "Execute", 7);
  bool has_default = false;
  uint32_t n_markers = 0;
  for (size_t k = 0; k < d->n_rec; k++) {
    etd_rec *r = etd_rec_at(d, k);
    if (r->name == ETD_MARKER) {
      n_markers++;
      continue;
    }
    r->fb = r->name == ETD_DEBUG ? etd_write_debug(&b, d, r) : etd_write_event(&b, d, r);
    has_default |= r->run == 0;
  }
  for (size_t k = 0; k < d->n_rec; k++) {
    etd_rec *r = etd_rec_at(d, k);
    if (r->name != ETD_MARKER) continue;
    size_t end = k + 1;
    while (end < d->n_rec && etd_rec_at(d, end)->name != ETD_MARKER) end++;
    r->fb = etd_write_run(&b, d, s_execute, r->run, k + 1, end);
  }
  fbb_ref def = has_default ? etd_write_run(&b, d, s_default, 0, 0, d->n_rec) : 0;
  uint32_t n_runs = n_markers + (has_default ? 1u : 0u);
  fbb_refvec_begin(&b, n_runs);
  for (size_t k = d->n_rec; k-- > 0;)
    if (etd_rec_at(d, k)->name == ETD_MARKER) fbb_refvec_push(&b, etd_rec_at(d, k)->fb);
  if (has_default) fbb_refvec_push(&b, def);
  fbb_ref runs = fbb_refvec_end(&b, n_runs);
  fbb_field root[] = {{0, 4, 0, 0 /* version */}, {1, 4, 1, runs}};
  fbb_ref r = fbb_table(&b, root, 2);
  em_status st = fbb_finish(&b, r, "ED00", true, size_out);
  if (st != EM_OK && !out) return st; /* a size query */
  if (st != EM_OK)
    EM_FAIL(st, "ETDump needs %zu bytes; the output buffer has %zu", *size_out,
            out ? out_size : (size_t)0);
  return EM_OK;
}
