/*
 * method.c — preparing a method: values, tensors, operators, delegates,
 * instructions; and binding inputs and outputs.
 *
 * Everything comes from the caller's method allocator. Preparation resolves every operator and
 * delegate by name once (docs/architecture.md, "The runtime's flow"); execute calls them through
 * pointers. The one string comparison left on the execute path is execute.c's check_bound,
 * which compares an instruction's operator name with executorch_prim::et_view, and only for the
 * instructions flagged at prepare (an argument had no data then).
 */
#include <string.h>

#include "method_internal.h"

#define PFAIL(...) EM_FAIL(EM_ERR_INVALID_PROGRAM, __VA_ARGS__)

typedef struct prep {
  em_method *m;
  const em_program *p;
  const em_method_config *cfg;
  fb_reader r;
  fb_tab plan;
  fb_vec values;
} prep;

static void *alloc0(prep *s, size_t n) {
  void *q = em_allocator_alloc(s->cfg->method_alloc, n ? n : 1, 16);
  if (q) memset(q, 0, n ? n : 1);
  return q;
}

#define ALLOC_OR_FAIL(ptr, s, n)                                                                   \
  do {                                                                                             \
    (ptr) = alloc0((s), (n));                                                                      \
    if (!(ptr))                                                                                    \
      EM_FAIL(EM_ERR_MEMORY_ALLOCATION_FAILED,                                                     \
              "method allocator: %zu bytes for %s do not fit (%zu of %zu bytes used)",             \
              (size_t)(n), #ptr, (s)->cfg->method_alloc->used, (s)->cfg->method_alloc->size);      \
  } while (0)

/* Resolves the data pointer of a tensor per docs/pte-format.md §5. */
static em_status bind_data(prep *s, const tensor_desc *d, em_tensor *t, uint32_t vi);

/* Binds the data pointer, then requires it aligned to the element size (kernels load typed). */
static em_status bind_tensor_data(prep *s, const tensor_desc *d, em_tensor *t, uint32_t vi) {
  EM_TRY(bind_data(s, d, t, vi));
  size_t es = em_dtype_size(d->dtype);
  if (t->data && es > 1 && ((uintptr_t)t->data % es) != 0)
    PFAIL("value %u: tensor data at %p is not aligned to its %zu-byte elements", vi, t->data, es);
  return EM_OK;
}

static em_status bind_data(prep *s, const tensor_desc *d, em_tensor *t, uint32_t vi) {
  const em_method_config *cfg = s->cfg;
  uint8_t *planned = NULL;
  if (d->planned) {
    if (d->memory_id == 0 || d->memory_id > cfg->n_arenas)
      PFAIL("value %u: memory_id %u but %zu arenas were provided", vi, d->memory_id, cfg->n_arenas);
    uint64_t size = cfg->arena_sizes[d->memory_id - 1];
    if (d->memory_offset > size || d->nbytes > size - d->memory_offset)
      PFAIL("value %u: planned range [%llu, +%llu) outside arena %u (%llu bytes)", vi,
            (unsigned long long)d->memory_offset, (unsigned long long)d->nbytes, d->memory_id,
            (unsigned long long)size);
    planned = cfg->arenas[d->memory_id - 1] + d->memory_offset;
    t->data = planned;
  }
  if (d->external) {
    if (!cfg->external)
      EM_FAIL(EM_ERR_INVALID_EXTERNAL_DATA,
              "tensor '%s' lives in external data: pass the .ptd file", d->fqn);
    const void *ext;
    size_t n;
    em_tensor_layout lay;
    em_status st = em_data_map_get(cfg->external, d->fqn, &ext, &n, &lay);
    if (st == EM_ERR_NOT_FOUND)
      EM_FAIL(EM_ERR_NOT_FOUND, "external tensor '%s' is missing from the .ptd", d->fqn);
    EM_TRY(st);
    if (n < d->nbytes || (lay.has_layout && (lay.dtype != d->dtype || lay.dim != d->dim)))
      EM_FAIL(EM_ERR_INVALID_EXTERNAL_DATA, "external tensor '%s' does not match its layout",
              d->fqn);
    for (int32_t k = 0; lay.has_layout && k < d->dim; k++)
      if (lay.sizes[k] != d->sizes[k])
        EM_FAIL(EM_ERR_INVALID_EXTERNAL_DATA, "external tensor '%s' has another shape", d->fqn);
    if (planned)
      memcpy(planned, ext, (size_t)d->nbytes);
    else
      t->data = (void *)(uintptr_t)ext;
    return EM_OK;
  }
  if (d->data_buffer_idx > 0) {
    const uint8_t *src;
    uint64_t avail;
    EM_TRY(planned ? em_program_mutable(s->p, d->data_buffer_idx, &src, &avail)
                   : em_program_constant(s->p, d->data_buffer_idx, &src, &avail));
    if (avail < d->nbytes)
      PFAIL("value %u: data buffer %u has %llu bytes, tensor needs %llu", vi, d->data_buffer_idx,
            (unsigned long long)avail, (unsigned long long)d->nbytes);
    if (planned) {
      memcpy(planned, src, (size_t)d->nbytes);
      /* the file's copy of the initial state is not read again while this method lives */
      em_data_loader *l = s->p->loader;
      if (l->discard) l->discard(l, src, d->nbytes);
    } else {
      t->data = (void *)(uintptr_t)src;
    }
  }
  return EM_OK;
}

static em_status parse_tensor(prep *s, fb_tab tt, em_evalue *v, uint32_t vi) {
  tensor_desc d;
  EM_TRY(em_tensor_desc_read(&s->r, tt, &d));
  em_tensor *t;
  ALLOC_OR_FAIL(t, s, sizeof *t);
  size_t dim = (size_t)d.dim;
  ALLOC_OR_FAIL(t->sizes, s, dim * sizeof(int64_t));
  ALLOC_OR_FAIL(t->strides, s, dim * sizeof(int64_t));
  ALLOC_OR_FAIL(t->dim_order, s, dim);
  memcpy(t->sizes, d.sizes, dim * sizeof(int64_t));
  memcpy(t->dim_order, d.dim_order, dim);
  em_strides_from_dim_order(t->sizes, t->dim_order, d.dim, t->strides);
  t->dim = d.dim;
  t->dtype = d.dtype;
  t->dynamism = d.dynamism;
  t->numel = d.numel;
  t->numel_bound = d.numel;
  EM_TRY(bind_tensor_data(s, &d, t, vi));
  v->tag = EM_TAG_TENSOR;
  v->u.tensor = t;
  return EM_OK;
}

/* Boxed list of value pointers; `allow_null` maps -1 (and Null values) to NULL. */
static em_status parse_value_list(prep *s, fb_tab lt, unsigned elem, em_evalue *v, uint32_t vi,
                                  bool allow_null) {
  fb_vec items = fb_vector(&s->r, lt, LIST_ITEMS, elem, elem);
  em_evalue **ptrs;
  ALLOC_OR_FAIL(ptrs, s, items.n * sizeof *ptrs);
  for (uint32_t k = 0; k < items.n; k++) {
    int64_t idx = elem == 8 ? fb_vec_i64(&s->r, items, k) : fb_vec_i32(&s->r, items, k);
    if (allow_null && idx == -1) continue;
    if (idx < 0 || idx >= (int64_t)s->values.n)
      PFAIL("value %u: list item %u refers to value %lld", vi, k, (long long)idx);
    ptrs[k] = &s->m->values[idx];
  }
  v->u.list.items = ptrs;
  v->u.list.n = items.n;
  return EM_OK;
}

static em_status parse_value(prep *s, uint32_t i) {
  fb_reader *r = &s->r;
  fb_tab ev = fb_vec_table(r, s->values, i);
  uint8_t kt = fb_u8(r, ev, EVALUE_TYPE, 0);
  fb_tab v = fb_table(r, ev, EVALUE_VAL);
  em_evalue *out = &s->m->values[i];
  if (kt > KT_NULL && !fb_present(v)) PFAIL("value %u of kind %u has no payload", i, kt);
  fb_vec items;
  switch (kt) {
  case KT_NONE:
  case KT_NULL: out->tag = EM_TAG_NONE; break;
  case KT_INT:
    out->tag = EM_TAG_INT;
    out->u.i = fb_i64(r, v, SCALAR_VAL, 0);
    break;
  case KT_BOOL:
    out->tag = EM_TAG_BOOL;
    out->u.b = fb_u8(r, v, SCALAR_VAL, 0) != 0;
    break;
  case KT_DOUBLE:
    out->tag = EM_TAG_DOUBLE;
    out->u.d = fb_f64(r, v, SCALAR_VAL, 0.0);
    break;
  case KT_STRING: {
    uint32_t len = 0;
    const char *str = fb_string(r, v, SCALAR_VAL, &len);
    if (!str) PFAIL("value %u: string without text", i);
    out->tag = EM_TAG_STRING;
    out->u.str.ptr = str;
    out->u.str.len = len;
    break;
  }
  case KT_TENSOR: return parse_tensor(s, v, out, i);
  case KT_INT_LIST:
    out->tag = EM_TAG_LIST_INT;
    EM_TRY(parse_value_list(s, v, 8, out, i, false));
    ALLOC_OR_FAIL(out->u.list.u.ints, s, out->u.list.n * sizeof(int64_t));
    break;
  case KT_DOUBLE_LIST:
    items = fb_vector(r, v, LIST_ITEMS, 8, 8);
    out->tag = EM_TAG_LIST_DOUBLE;
    out->u.list.u.doubles = (const double *)(const void *)(r->buf + items.data);
    out->u.list.n = items.n;
    break;
  case KT_BOOL_LIST:
    items = fb_vector(r, v, LIST_ITEMS, 1, 1);
    out->tag = EM_TAG_LIST_BOOL;
    out->u.list.u.bools = r->buf + items.data;
    out->u.list.n = items.n;
    break;
  case KT_TENSOR_LIST:
    out->tag = EM_TAG_LIST_TENSOR;
    return parse_value_list(s, v, 4, out, i, false);
  case KT_OPTIONAL_TENSOR_LIST:
    out->tag = EM_TAG_LIST_OPTIONAL_TENSOR;
    return parse_value_list(s, v, 4, out, i, true);
  default: PFAIL("value %u has unknown kind %u", i, kt);
  }
  if (r->bad) PFAIL("value %u: %s", i, r->why);
  return EM_OK;
}

/* After all values exist: optional-tensor-list items naming Null values become NULL. */
static void fix_optional_lists(em_method *m) {
  for (uint32_t i = 0; i < m->n_values; i++) {
    em_evalue *v = &m->values[i];
    if (v->tag != EM_TAG_LIST_OPTIONAL_TENSOR) continue;
    for (size_t k = 0; k < v->u.list.n; k++)
      if (v->u.list.items[k] && v->u.list.items[k]->tag == EM_TAG_NONE) v->u.list.items[k] = NULL;
  }
}

static em_status resolve_operators(prep *s) {
  em_method *m = s->m;
  fb_vec ops = fb_vector(&s->r, s->plan, PLAN_OPERATORS, 4, 4);
  m->n_ops = ops.n;
  ALLOC_OR_FAIL(m->op_names, s, ops.n * sizeof(char *));
  char missing[768];
  size_t n_missing = 0, used = 0;
  missing[0] = '\0';
  for (uint32_t i = 0; i < ops.n; i++) {
    char buf[128];
    EM_TRY(em_operator_name(&s->r, fb_vec_table(&s->r, ops, i), buf, sizeof buf));
    size_t len = strlen(buf);
    char *name;
    ALLOC_OR_FAIL(name, s, len + 1);
    memcpy(name, buf, len + 1);
    m->op_names[i] = name;
    if (em_find_kernel(name)) continue;
    n_missing++;
    if (used + len + 3 < sizeof missing) {
      if (used) {
        memcpy(missing + used, ", ", 2);
        used += 2;
      }
      memcpy(missing + used, name, len + 1);
      used += len;
    }
  }
  if (n_missing)
    EM_FAIL(EM_ERR_OPERATOR_MISSING, "method '%s' needs %zu operator%s missing from this build: %s",
            m->name, n_missing, n_missing == 1 ? "" : "s", missing);
  return EM_OK;
}

static em_status arg_list(prep *s, fb_tab call, unsigned slot, em_evalue ***out, uint32_t *n) {
  fb_vec args = fb_vector(&s->r, call, slot, 4, 4);
  em_evalue **ptrs;
  ALLOC_OR_FAIL(ptrs, s, args.n * sizeof *ptrs);
  for (uint32_t k = 0; k < args.n; k++) {
    int32_t a = fb_vec_i32(&s->r, args, k);
    if (a < 0 || (uint32_t)a >= s->m->n_values) PFAIL("instruction argument %d out of range", a);
    ptrs[k] = &s->m->values[a];
  }
  *out = ptrs;
  *n = args.n;
  return EM_OK;
}

/* Whether a tensor (or tensor-list item) argument has no data bound at prepare time. */
static uint32_t unbound_tensor_args(em_evalue **args, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) {
    const em_evalue *v = args[i];
    if (v->tag == EM_TAG_TENSOR && !v->u.tensor->data) return 1;
    if (v->tag == EM_TAG_LIST_TENSOR || v->tag == EM_TAG_LIST_OPTIONAL_TENSOR)
      for (size_t k = 0; k < v->u.list.n; k++) {
        const em_evalue *it = v->u.list.items[k];
        if (it && it->tag == EM_TAG_TENSOR && !it->u.tensor->data) return 1;
      }
  }
  return 0;
}

static em_status build_instr(prep *s, fb_tab in, uint32_t n_in_chain, em_instr *out, uint32_t idx) {
  fb_reader *r = &s->r;
  em_method *m = s->m;
  out->kind = fb_u8(r, in, INSTRUCTION_TYPE, 0);
  fb_tab a = fb_table(r, in, INSTRUCTION_ARGS);
  if (!fb_present(a)) PFAIL("instruction %u has no arguments", idx);
  switch (out->kind) {
  case INSTR_KERNEL_CALL: {
    int32_t op = fb_i32(r, a, KERNEL_CALL_OP_INDEX, 0);
    if (op < 0 || (uint32_t)op >= m->n_ops)
      PFAIL("instruction %u: operator %d out of range", idx, op);
    const em_kernel_entry *k = em_find_kernel(m->op_names[op]);
    out->u.k.fn = k->fn;
    out->u.k.op = (uint32_t)op;
    EM_TRY(arg_list(s, a, KERNEL_CALL_ARGS, &out->u.k.args, &out->u.k.n_args));
    out->u.k.check_data = unbound_tensor_args(out->u.k.args, out->u.k.n_args);
    if (k->n_args >= 0 && (uint32_t)k->n_args != out->u.k.n_args)
      PFAIL("instruction %u: %s takes %d arguments, the program passes %u", idx, m->op_names[op],
            k->n_args, out->u.k.n_args);
    break;
  }
  case INSTR_DELEGATE_CALL: {
    int32_t d = fb_i32(r, a, DELEGATE_CALL_INDEX, 0);
    if (d < 0 || (uint32_t)d >= m->n_delegates)
      PFAIL("instruction %u: delegate %d out of range", idx, d);
    out->u.d.delegate = (uint32_t)d;
    EM_TRY(arg_list(s, a, DELEGATE_CALL_ARGS, &out->u.d.args, &out->u.d.n_args));
    break;
  }
  case INSTR_MOVE_CALL: {
    int32_t from = fb_i32(r, a, MOVE_FROM, 0), to = fb_i32(r, a, MOVE_TO, 0);
    if (from < 0 || to < 0 || (uint32_t)from >= m->n_values || (uint32_t)to >= m->n_values)
      PFAIL("instruction %u: move between values %d and %d out of range", idx, from, to);
    out->u.mv.from = (uint32_t)from;
    out->u.mv.to = (uint32_t)to;
    break;
  }
  case INSTR_JUMP_FALSE_CALL: {
    int32_t c = fb_i32(r, a, JUMP_FALSE_COND, 0), dest = fb_i32(r, a, JUMP_FALSE_DEST, 0);
    if (c < 0 || (uint32_t)c >= m->n_values) PFAIL("instruction %u: condition out of range", idx);
    uint32_t tag = m->values[c].tag;
    if (tag != EM_TAG_BOOL && tag != EM_TAG_TENSOR)
      PFAIL("instruction %u: jump condition is neither a bool nor a tensor", idx);
    if (dest < 0 || (uint32_t)dest > n_in_chain)
      PFAIL("instruction %u: jump to %d out of range", idx, dest);
    out->u.jf.cond = (uint32_t)c;
    out->u.jf.dest = (uint32_t)dest;
    break;
  }
  case INSTR_FREE_CALL: {
    int32_t v = fb_i32(r, a, FREE_VALUE, 0);
    if (v < 0 || (uint32_t)v >= m->n_values || m->values[v].tag != EM_TAG_TENSOR)
      PFAIL("instruction %u: free of a non-tensor value", idx);
    out->u.fr.value = (uint32_t)v;
    break;
  }
  default: PFAIL("instruction %u has unknown type %u", idx, out->kind);
  }
  if (r->bad) PFAIL("instruction %u: %s at byte %u", idx, r->why, r->where);
  return EM_OK;
}

static em_status init_delegates(prep *s) {
  em_method *m = s->m;
  fb_reader *r = &s->r;
  fb_vec ds = fb_vector(r, s->plan, PLAN_DELEGATES, 4, 4);
  /* The count only once the array exists: em_method_destroy walks it when prepare fails. */
  ALLOC_OR_FAIL(m->delegates, s, ds.n * sizeof *m->delegates);
  m->n_delegates = ds.n;
  for (uint32_t i = 0; i < ds.n; i++) {
    fb_tab d = fb_vec_table(r, ds, i);
    const char *id = fb_string(r, d, DELEGATE_ID, NULL);
    if (!id) PFAIL("delegate %u has no backend id", i);
    const em_backend *b = em_find_backend(id);
    if (!b || (b->is_available && !b->is_available()))
      EM_FAIL(EM_ERR_NOT_FOUND, "method '%s' uses backend '%s', which is not %s in this build",
              m->name, id, b ? "available" : "registered");
    fb_tab ref = fb_table(r, d, DELEGATE_PROCESSED);
    int8_t loc = fb_i8(r, ref, DATA_REF_LOCATION, DATA_INLINE);
    uint32_t idx = fb_u32(r, ref, DATA_REF_INDEX, 0);
    const uint8_t *blob = NULL;
    uint64_t blob_n = 0;
    if (loc == DATA_SEGMENT) {
      EM_TRY(em_program_segment(s->p, idx, &blob, &blob_n));
    } else {
      if (idx >= s->p->delegate_data.n) PFAIL("delegate %u inline data out of range", i);
      fb_vec data = fb_vector(r, fb_vec_table(r, s->p->delegate_data, idx), BUFFER_STORAGE, 1, 16);
      blob = r->buf + data.data;
      blob_n = data.n;
    }
    fb_vec specs_v = fb_vector(r, d, DELEGATE_COMPILE_SPECS, 4, 4);
    em_compile_spec *specs;
    ALLOC_OR_FAIL(specs, s, specs_v.n * sizeof *specs);
    for (uint32_t k = 0; k < specs_v.n; k++) {
      fb_tab cs = fb_vec_table(r, specs_v, k);
      fb_vec val = fb_vector(r, cs, COMPILE_SPEC_VALUE, 1, 1);
      specs[k].key = fb_string(r, cs, COMPILE_SPEC_KEY, NULL);
      specs[k].value = r->buf + val.data;
      specs[k].nbytes = val.n;
    }
    if (r->bad) PFAIL("delegate %u: %s", i, r->why);
    em_backend_init_ctx ictx = {s->cfg->method_alloc, m->name, em_program_named_data(s->p),
                                s->cfg->external, s->cfg->pool};
    void *handle = NULL;
    em_clear_last_error(); /* so that what the backend reports is told with the failure */
    em_status st = b->init(&ictx, blob, (size_t)blob_n, specs, specs_v.n, &handle);
    if (st != EM_OK)
      EM_FAIL(st, "backend '%s' failed to initialize delegate %u: %s%s%s", id, i, em_status_str(st),
              em_last_error()[0] ? ": " : "", em_last_error());
    m->delegates[i] = (em_delegate_inst){b, handle, id, true};
  }
  return EM_OK;
}

static bool refers_to(const em_instr *in, const em_evalue *v) {
  for (uint32_t i = 0; i < in->u.k.n_args; i++) {
    const em_evalue *a = in->u.k.args[i];
    if (a == v) return true;
    if (a->tag == EM_TAG_LIST_TENSOR || a->tag == EM_TAG_LIST_OPTIONAL_TENSOR)
      for (size_t k = 0; k < a->u.list.n; k++)
        if (a->u.list.items[k] == v) return true;
  }
  return false;
}

/*
 * FreeCall forgets a tensor's data and MoveCall rebinds a value slot at run time: kernel calls
 * that read such values must check their arguments each time (a malformed program could free a
 * tensor and use it on the next execute).
 */
static void flag_rebound_values(em_method *m) {
  for (uint32_t c = 0; c < m->n_chains; c++)
    for (uint32_t i = 0; i < m->chains[c].n; i++) {
      const em_instr *src = &m->chains[c].instrs[i];
      const em_evalue *v = NULL;
      if (src->kind == INSTR_FREE_CALL)
        v = &m->values[src->u.fr.value];
      else if (src->kind == INSTR_MOVE_CALL)
        v = &m->values[src->u.mv.to];
      if (!v) continue;
      for (uint32_t c2 = 0; c2 < m->n_chains; c2++)
        for (uint32_t k = 0; k < m->chains[c2].n; k++) {
          em_instr *in = &m->chains[c2].instrs[k];
          if (in->kind == INSTR_KERNEL_CALL && !in->u.k.check_data && refers_to(in, v))
            in->u.k.check_data = 1;
        }
    }
}

static em_status build_chains(prep *s) {
  em_method *m = s->m;
  fb_vec chains = fb_vector(&s->r, s->plan, PLAN_CHAINS, 4, 4);
  if (chains.n == 0) PFAIL("method '%s' has no chains", m->name);
  m->n_chains = chains.n;
  ALLOC_OR_FAIL(m->chains, s, chains.n * sizeof *m->chains);
  for (uint32_t c = 0; c < chains.n; c++) {
    fb_vec ins = fb_vector(&s->r, fb_vec_table(&s->r, chains, c), CHAIN_INSTRUCTIONS, 4, 4);
    m->chains[c].n = ins.n;
    ALLOC_OR_FAIL(m->chains[c].instrs, s, ins.n * sizeof(em_instr));
    for (uint32_t i = 0; i < ins.n; i++)
      EM_TRY(build_instr(s, fb_vec_table(&s->r, ins, i), ins.n, &m->chains[c].instrs[i], i));
  }
  flag_rebound_values(m);
  return EM_OK;
}

/* Whether `name` ("ns::op.overload") is an in-place ATen operator (its base name ends in '_',
 * copy_ too) or ExecuTorch's view, which aliases its input. */
static bool writes_or_aliases(const char *name) {
  if (strncmp(name, "executorch_prim::et_view", 24) == 0) return true;
  const char *dot = strchr(name, '.');
  size_t n = dot ? (size_t)(dot - name) : strlen(name);
  return n > 0 && name[n - 1] == '_';
}

/* Whether instruction `in` only reads *v: every reference to it is an argument before the last
 * (out arguments come last, for kernels and delegates alike), directly or in a tensor list, of
 * a kernel that neither writes in place nor views, or of a delegate call; once at most. */
static bool only_reads(const em_method *m, const em_instr *in, const em_evalue *v) {
  if (in->kind == INSTR_MOVE_CALL)
    return &m->values[in->u.mv.from] != v && &m->values[in->u.mv.to] != v;
  if (in->kind == INSTR_FREE_CALL) return &m->values[in->u.fr.value] != v;
  if (in->kind != INSTR_KERNEL_CALL && in->kind != INSTR_DELEGATE_CALL) return true;
  em_evalue *const *args = in->kind == INSTR_KERNEL_CALL ? in->u.k.args : in->u.d.args;
  const uint32_t n = in->kind == INSTR_KERNEL_CALL ? in->u.k.n_args : in->u.d.n_args;
  uint32_t refs = 0;
  for (uint32_t i = 0; i < n; i++) {
    const em_evalue *a = args[i];
    uint32_t here = a == v;
    if (a && (a->tag == EM_TAG_LIST_TENSOR || a->tag == EM_TAG_LIST_OPTIONAL_TENSOR))
      for (size_t k = 0; k < a->u.list.n; k++) here += a->u.list.items[k] == v;
    if (here && i + 1 == n) return false;
    refs += here;
  }
  if (refs > 1) return false;
  return !refs || in->kind != INSTR_KERNEL_CALL || !writes_or_aliases(m->op_names[in->u.k.op]);
}

/* Whether an instruction writes *v as an out argument (the last, or in a list that is) or moves
 * a value into it. */
static bool produced(const em_method *m, const em_evalue *v) {
  for (uint32_t c = 0; c < m->n_chains; c++)
    for (uint32_t k = 0; k < m->chains[c].n; k++) {
      const em_instr *in = &m->chains[c].instrs[k];
      if (in->kind == INSTR_MOVE_CALL && &m->values[in->u.mv.to] == v) return true;
      if (in->kind != INSTR_KERNEL_CALL && in->kind != INSTR_DELEGATE_CALL) continue;
      const uint32_t n = in->kind == INSTR_KERNEL_CALL ? in->u.k.n_args : in->u.d.n_args;
      const em_evalue *a =
          n ? (in->kind == INSTR_KERNEL_CALL ? in->u.k.args : in->u.d.args)[n - 1] : NULL;
      if (a == v) return true;
      if (a && (a->tag == EM_TAG_LIST_TENSOR || a->tag == EM_TAG_LIST_OPTIONAL_TENSOR))
        for (size_t i = 0; i < a->u.list.n; i++)
          if (a->u.list.items[i] == v) return true;
    }
  return false;
}

/* Whether another tensor value lies in input i's planned memory without an instruction writing
 * it: a view of the input that the memory plan aliased onto it (it reads the input's bytes). */
static bool aliased(const em_method *m, uint32_t i) {
  const em_tensor *x = m->values[m->inputs[i]].u.tensor;
  const uintptr_t lo = (uintptr_t)m->input_home[i];
  const uintptr_t hi = lo + (size_t)x->numel_bound * em_dtype_size(x->dtype);
  for (uint32_t j = 0; j < m->n_values; j++) {
    const em_evalue *v = &m->values[j];
    if (j == (uint32_t)m->inputs[i] || v->tag != EM_TAG_TENSOR || !v->u.tensor->data) continue;
    const em_tensor *t = v->u.tensor;
    const uintptr_t a = (uintptr_t)t->data;
    const uintptr_t b = a + (size_t)t->numel_bound * em_dtype_size(t->dtype);
    if ((a < hi && lo < b) || a == lo) /* (a zero-size view at the input's start too) */
      if (!produced(m, v)) return true;
  }
  return false;
}

/* Per input: whether it has planned memory (and where), and whether the method only reads it
 * and nothing else reads its planned memory before it is written (em_method_bind_input_tensor
 * may then let it read the caller's memory instead of a copy). */
static em_status classify_inputs(prep *s) {
  em_method *m = s->m;
  ALLOC_OR_FAIL(m->input_flags, s, m->n_inputs);
  ALLOC_OR_FAIL(m->input_home, s, m->n_inputs * sizeof(void *));
  em_method_meta meta;
  EM_TRY(em_program_method_meta(s->p, m->name, &meta));
  for (uint32_t i = 0; i < m->n_inputs; i++) {
    const em_evalue *v = &m->values[m->inputs[i]];
    em_value_info info;
    if (v->tag != EM_TAG_TENSOR) continue;
    if (em_method_meta_input(&meta, i, &info) == EM_OK && info.planned) {
      m->input_flags[i] = EM_IN_PLANNED;
      m->input_home[i] = v->u.tensor->data;
    }
    bool ro = true;
    for (uint32_t o = 0; o < m->n_outputs && ro; o++) ro = m->outputs[o] != m->inputs[i];
    for (uint32_t j = 0; j < m->n_inputs && ro; j++) ro = j == i || m->inputs[j] != m->inputs[i];
    for (uint32_t c = 0; c < m->n_chains && ro; c++)
      for (uint32_t k = 0; k < m->chains[c].n && ro; k++)
        ro = only_reads(m, &m->chains[c].instrs[k], v);
    if (ro && (m->input_flags[i] & EM_IN_PLANNED) && !aliased(m, i))
      m->input_flags[i] |= EM_IN_READ_ONLY;
  }
  return EM_OK;
}

static em_status copy_indices(prep *s, unsigned slot, int32_t **out, uint32_t *n) {
  fb_vec v = fb_vector(&s->r, s->plan, slot, 4, 4);
  int32_t *idx;
  ALLOC_OR_FAIL(idx, s, v.n * sizeof *idx);
  for (uint32_t i = 0; i < v.n; i++) {
    idx[i] = fb_vec_i32(&s->r, v, i);
    if (idx[i] < 0 || (uint32_t)idx[i] >= s->m->n_values)
      PFAIL("method input/output refers to value %d of %u", idx[i], s->m->n_values);
  }
  *out = idx;
  *n = v.n;
  return EM_OK;
}

static em_status check_arenas(prep *s) {
  fb_vec sizes = fb_vector(&s->r, s->plan, PLAN_NON_CONST_BUFFER_SIZES, 8, 8);
  size_t need = sizes.n > 0 ? sizes.n - 1 : 0;
  if (s->cfg->n_arenas < need)
    EM_FAIL(EM_ERR_INVALID_ARGUMENT, "method '%s' needs %zu planned arenas, %zu were provided",
            s->m->name, need, s->cfg->n_arenas);
  for (size_t i = 0; i < need; i++) {
    int64_t want = fb_vec_i64(&s->r, sizes, (uint32_t)(i + 1));
    if (want < 0 || (uint64_t)want > s->cfg->arena_sizes[i] || (want > 0 && !s->cfg->arenas[i]))
      EM_FAIL(EM_ERR_INVALID_ARGUMENT, "arena %zu of method '%s' needs %lld bytes, got %llu", i + 1,
              s->m->name, (long long)want, (unsigned long long)s->cfg->arena_sizes[i]);
  }
  return EM_OK;
}

static em_status prepare(prep *s, const char *name) {
  em_method_meta meta;
  EM_TRY(em_program_method_meta(s->p, name, &meta));
  s->plan = fb_vec_table(&s->r, s->p->plans, (uint32_t)meta.plan_index);
  s->values = fb_vector(&s->r, s->plan, PLAN_VALUES, 4, 4);
  em_method *m = s->m;
  m->name = meta.name;
  EM_TRY(check_arenas(s));
  m->n_values = s->values.n;
  ALLOC_OR_FAIL(m->values, s, (size_t)m->n_values * sizeof(em_evalue));
  for (uint32_t i = 0; i < m->n_values; i++) EM_TRY(parse_value(s, i));
  fix_optional_lists(m);
  int32_t *inputs;
  EM_TRY(copy_indices(s, PLAN_INPUTS, &inputs, &m->n_inputs));
  m->inputs = inputs;
  EM_TRY(copy_indices(s, PLAN_OUTPUTS, &m->outputs, &m->n_outputs));
  ALLOC_OR_FAIL(m->input_set, s, m->n_inputs * sizeof(bool));
  EM_TRY(resolve_operators(s));
  EM_TRY(init_delegates(s));
  EM_TRY(build_chains(s));
  EM_TRY(classify_inputs(s));
  if (s->r.bad) PFAIL("malformed method '%s': %s", name, s->r.why);
  return EM_OK;
}

em_status em_method_prepare(const em_program *p, const char *name, const em_method_config *cfg,
                            em_method **method_out) {
  em_clear_last_error();
  if (!p || !name || !cfg || !cfg->method_alloc || !method_out)
    EM_FAIL(EM_ERR_INVALID_ARGUMENT, "em_method_prepare: program, name, config, method allocator "
                                     "and output are required");
  if (cfg->n_arenas && (!cfg->arenas || !cfg->arena_sizes))
    EM_FAIL(EM_ERR_INVALID_ARGUMENT, "em_method_prepare: arenas without sizes");
  *method_out = NULL;
#if EM_ENABLE_PROFILING
  const em_profiler *prof = cfg->profiler && cfg->profiler->record ? cfg->profiler : NULL;
  uint64_t t0 = prof ? em_now_ns() : 0;
#endif
  prep s = {NULL, p, cfg, p->r, {0, 0, 0, 0}, {0, 0}};
  ALLOC_OR_FAIL(s.m, &s, sizeof(em_method));
  em_method *m = s.m;
  m->program = p;
  m->temp = cfg->temp_alloc;
  m->pool = cfg->pool;
  m->profiler = cfg->profiler;
  m->max_instructions = cfg->max_instructions ? cfg->max_instructions : 10000000ull;
  em_status st = prepare(&s, name);
  if (st != EM_OK) {
    em_method_destroy(m);
    return st;
  }
#if EM_ENABLE_PROFILING
  if (prof) {
    /* ExecuTorch's name for this span; it covers Program::load_method too (one step here). */
    em_profile_event ev = {"Method::init", t0, em_now_ns(), -1, 0, -1, EM_PROFILE_METHOD, NULL};
    prof->record(prof->record_ctx, &ev);
  }
#endif
  *method_out = m;
  return EM_OK;
}

void em_method_destroy(em_method *m) {
  if (!m) return;
  for (uint32_t i = 0; i < m->n_delegates; i++) {
    em_delegate_inst *d = &m->delegates[i];
    if (d->ready && d->backend->destroy) d->backend->destroy(d->handle);
    d->ready = false;
  }
}

size_t em_method_input_count(const em_method *m) { return m ? m->n_inputs : 0; }
size_t em_method_output_count(const em_method *m) { return m ? m->n_outputs : 0; }

const em_evalue *em_method_input(const em_method *m, size_t i) {
  return m && i < m->n_inputs ? &m->values[m->inputs[i]] : NULL;
}

const em_evalue *em_method_output(const em_method *m, size_t i) {
  return m && i < m->n_outputs ? &m->values[m->outputs[i]] : NULL;
}

size_t em_method_value_count(const em_method *m) { return m ? m->n_values : 0; }

const em_evalue *em_method_value(const em_method *m, size_t i) {
  return m && i < m->n_values ? &m->values[i] : NULL;
}

/* Checks `src` against tensor input i and resizes the input to it. */
static em_status check_input_tensor(em_method *m, size_t i, const em_tensor *src) {
  if (!m || !src || i >= m->n_inputs)
    EM_FAIL(EM_ERR_INVALID_ARGUMENT, "set_input: bad index %zu", i);
  em_evalue *v = &m->values[m->inputs[i]];
  if (v->tag != EM_TAG_TENSOR)
    EM_FAIL(EM_ERR_INVALID_ARGUMENT, "input %zu of '%s' is not a tensor", i, m->name);
  em_tensor *dst = v->u.tensor;
  if (src->dtype != dst->dtype)
    EM_FAIL(EM_ERR_INVALID_ARGUMENT, "input %zu of '%s' must be %s, got %s", i, m->name,
            em_dtype_name(dst->dtype), em_dtype_name(src->dtype));
  if (src->dim != dst->dim)
    EM_FAIL(EM_ERR_INVALID_ARGUMENT, "input %zu of '%s' must have rank %d, got %d", i, m->name,
            (int)dst->dim, (int)src->dim);
  for (int32_t d = 0; d < src->dim; d++)
    if (src->dim_order[d] != dst->dim_order[d])
      EM_FAIL(EM_ERR_INVALID_ARGUMENT, "input %zu of '%s' has another dim order", i, m->name);
  if (em_tensor_resize(dst, src->sizes, src->dim) != EM_OK)
    EM_FAIL(EM_ERR_INVALID_ARGUMENT,
            "input %zu of '%s' has a shape that does not fit (%s tensor of at most %lld elements)",
            i, m->name, dst->dynamism ? "dynamic" : "static", (long long)dst->numel_bound);
  if (em_tensor_nbytes(dst) && !src->data)
    EM_FAIL(EM_ERR_INVALID_ARGUMENT, "input %zu of '%s' has no data", i, m->name);
  return EM_OK;
}

em_status em_method_set_input_tensor(em_method *m, size_t i, const em_tensor *src) {
  EM_TRY(check_input_tensor(m, i, src));
  em_tensor *dst = m->values[m->inputs[i]].u.tensor;
  if (m->input_flags[i] & EM_IN_PLANNED) {
    dst->data = m->input_home[i]; /* back from a binding that an error left in place */
    size_t n = em_tensor_nbytes(dst);
    if (n) memmove(dst->data, src->data, n);
  } else {
    dst->data = src->data;
  }
  m->input_flags[i] &= (uint8_t)~EM_IN_BOUND;
  m->input_set[i] = true;
  return EM_OK;
}

em_status em_method_bind_input_tensor(em_method *m, size_t i, const em_tensor *src) {
  EM_TRY(check_input_tensor(m, i, src));
  if ((m->input_flags[i] & (EM_IN_PLANNED | EM_IN_READ_ONLY)) != (EM_IN_PLANNED | EM_IN_READ_ONLY))
    return em_method_set_input_tensor(m, i, src);
  m->values[m->inputs[i]].u.tensor->data = src->data;
  m->input_flags[i] |= EM_IN_BOUND;
  m->input_set[i] = true;
  return EM_OK;
}

void em_method_unbind_inputs(em_method *m) {
  for (uint32_t i = 0; m && i < m->n_inputs; i++)
    if (m->input_flags[i] & EM_IN_BOUND) {
      m->values[m->inputs[i]].u.tensor->data = m->input_home[i];
      m->input_flags[i] &= (uint8_t)~EM_IN_BOUND;
    }
}

static bool scalar_equal(const em_evalue *a, const em_evalue *b) {
  if (a->tag != b->tag) return false;
  switch (a->tag) {
  case EM_TAG_NONE: return true;
  case EM_TAG_INT: return a->u.i == b->u.i;
  case EM_TAG_BOOL: return a->u.b == b->u.b;
  case EM_TAG_DOUBLE: {
    double d = a->u.d - b->u.d;
    if (d < 0) d = -d;
    double mag = b->u.d < 0 ? -b->u.d : b->u.d;
    return d <= 1e-4 + 1e-5 * mag;
  }
  case EM_TAG_STRING:
    return a->u.str.len == b->u.str.len && memcmp(a->u.str.ptr, b->u.str.ptr, a->u.str.len) == 0;
  default: return false;
  }
}

em_status em_method_set_input(em_method *m, size_t i, const em_evalue *v) {
  if (!m || !v || i >= m->n_inputs) EM_FAIL(EM_ERR_INVALID_ARGUMENT, "set_input: bad index %zu", i);
  if (v->tag == EM_TAG_TENSOR) return em_method_set_input_tensor(m, i, v->u.tensor);
  if (!scalar_equal(v, &m->values[m->inputs[i]]))
    EM_FAIL(EM_ERR_INVALID_ARGUMENT, "input %zu of '%s' must equal the value it was exported with",
            i, m->name);
  m->input_set[i] = true;
  return EM_OK;
}

em_status em_method_set_output_data(em_method *m, size_t i, void *data, size_t nbytes) {
  if (!m || i >= m->n_outputs) EM_FAIL(EM_ERR_INVALID_ARGUMENT, "set_output: bad index %zu", i);
  em_evalue *v = &m->values[m->outputs[i]];
  if (v->tag != EM_TAG_TENSOR) EM_FAIL(EM_ERR_INVALID_ARGUMENT, "output %zu is not a tensor", i);
  em_tensor *t = v->u.tensor;
  if (t->data) EM_FAIL(EM_ERR_INVALID_STATE, "output %zu is memory-planned", i);
  if (nbytes < (size_t)t->numel_bound * em_dtype_size(t->dtype))
    EM_FAIL(EM_ERR_INVALID_ARGUMENT, "output %zu needs %zu bytes", i,
            (size_t)t->numel_bound * em_dtype_size(t->dtype));
  t->data = data;
  return EM_OK;
}
