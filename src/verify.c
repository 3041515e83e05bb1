/*
 * verify.c — full verification of an untrusted program (docs/architecture.md, decision 5).
 *
 * Walks every table the runtime will read and checks: offsets, lengths,
 * vtables and alignment (through the bounds-checked reader), enum values,
 * ranks (≤ 16), sizes (non-negative, numel × element size without overflow),
 * dim orders (permutations), planned ranges inside their declared arenas,
 * value kinds matching their use (list items, instruction arguments, jump
 * destinations), segment and constant ranges inside the file. After it passes,
 * method preparation cannot read outside the file.
 *
 * Also the checked readers of Tensor and Operator tables (em_tensor_desc_read, em_operator_name)
 * that program metadata and method preparation use (verify.h). A layer below program.c: it reads
 * the parsed flatbuffer and the program's byte ranges (program_segments.c) and calls nothing in
 * program.c.
 */
#include <string.h>

#include "internal.h"
#include "verify.h"

#define VFAIL(...) EM_FAIL(EM_ERR_INVALID_PROGRAM, __VA_ARGS__)

/* Whether a name (printed in messages and `ember info`) is printable ASCII. */
static bool printable(const char *s, uint32_t n) {
  for (uint32_t i = 0; i < n; i++)
    if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] > 0x7e) return false;
  return true;
}

em_status em_tensor_desc_read(fb_reader *r, fb_tab t, tensor_desc *d) {
  memset(d, 0, sizeof *d);
  if (!fb_present(t)) VFAIL("tensor value without a Tensor table");
  d->dtype = fb_i8(r, t, TENSOR_SCALAR_TYPE, 0);
  if (d->dtype < 0 || d->dtype >= EM_DTYPE_COUNT)
    VFAIL("tensor has invalid scalar type %d", d->dtype);
  if (fb_i32(r, t, TENSOR_STORAGE_OFFSET, 0) != 0)
    EM_FAIL(EM_ERR_NOT_SUPPORTED, "tensor has a non-zero storage_offset");
  int8_t dyn = fb_i8(r, t, TENSOR_SHAPE_DYNAMISM, 0);
  if (dyn < 0 || dyn > 2) VFAIL("tensor has invalid shape_dynamism %d", dyn);
  if (dyn == EM_SHAPE_DYNAMIC_UNBOUND)
    EM_FAIL(EM_ERR_NOT_SUPPORTED, "DYNAMIC_UNBOUND tensors are not supported");
  d->dynamism = (uint8_t)dyn;
  if (fb_i8(r, t, TENSOR_LAYOUT, 0) != 0)
    EM_FAIL(EM_ERR_NOT_SUPPORTED, "non-strided tensor layout");
  if (!fb_has(r, t, TENSOR_SIZES) || !fb_has(r, t, TENSOR_DIM_ORDER))
    VFAIL("tensor without sizes or dim_order");
  fb_vec sizes = fb_vector(r, t, TENSOR_SIZES, 4, 4);
  fb_vec order = fb_vector(r, t, TENSOR_DIM_ORDER, 1, 1);
  if (r->bad) VFAIL("bad tensor shape: %s", r->why);
  if (sizes.n > EM_MAX_DIM) VFAIL("tensor rank %u exceeds %d", sizes.n, EM_MAX_DIM);
  if (order.n != sizes.n) VFAIL("tensor dim_order has %u entries for rank %u", order.n, sizes.n);
  d->dim = (int32_t)sizes.n;
  uint32_t seen = 0;
  int64_t numel = 1;
  bool zero = false;
  for (uint32_t i = 0; i < sizes.n; i++) {
    int32_t s = fb_vec_i32(r, sizes, i);
    if (s < 0) VFAIL("tensor size[%u] = %d is negative", i, s);
    uint8_t o = fb_vec_u8(r, order, i);
    if (o >= sizes.n || (seen & (1u << o))) VFAIL("tensor dim_order is not a permutation");
    seen |= 1u << o;
    d->sizes[i] = s;
    d->dim_order[i] = o;
    if (s == 0)
      zero = true;
    else if (!zero && numel > INT64_MAX / s)
      VFAIL("tensor numel overflows");
    else if (!zero)
      numel *= s;
  }
  d->numel = zero ? 0 : numel;
  size_t es = em_dtype_size(d->dtype);
  if (es == 0) VFAIL("tensor scalar type %d has no element size", d->dtype);
  if ((uint64_t)d->numel > UINT64_MAX / 2 / es) VFAIL("tensor byte size overflows");
  d->nbytes = (uint64_t)d->numel * es;
  d->data_buffer_idx = fb_u32(r, t, TENSOR_DATA_BUFFER_IDX, 0);
  fb_tab alloc = fb_table(r, t, TENSOR_ALLOCATION_INFO);
  if (fb_present(alloc)) {
    d->planned = true;
    d->memory_id = fb_u32(r, alloc, ALLOC_MEMORY_ID, 0);
    d->memory_offset = ((uint64_t)fb_u32(r, alloc, ALLOC_OFFSET_HIGH, 0) << 32) |
                       fb_u32(r, alloc, ALLOC_OFFSET_LOW, 0);
  }
  fb_tab extra = fb_table(r, t, TENSOR_EXTRA_INFO);
  if (fb_present(extra)) {
    int8_t loc = fb_i8(r, extra, EXTRA_LOCATION, LOCATION_SEGMENT);
    if (loc != LOCATION_SEGMENT && loc != LOCATION_EXTERNAL)
      VFAIL("bad tensor data location %d", loc);
    d->external = loc == LOCATION_EXTERNAL;
    d->fqn = fb_string(r, extra, EXTRA_FQN, NULL);
    if (d->external && !d->fqn) VFAIL("external tensor without a fully-qualified name");
  }
  if (r->bad) VFAIL("bad tensor: %s", r->why);
  return EM_OK;
}

/* Checks that value `idx` exists and (when kind >= 0) has union tag `kind` (or `alt`). */
static em_status check_value_ref(fb_reader *r, fb_vec values, int64_t idx, int kind, int alt,
                                 const char *what) {
  if (idx < 0 || idx >= (int64_t)values.n)
    VFAIL("%s refers to value %lld of %u", what, (long long)idx, values.n);
  if (kind < 0) return EM_OK;
  uint8_t k = fb_u8(r, fb_vec_table(r, values, (uint32_t)idx), EVALUE_TYPE, 0);
  if (k != kind && k != alt)
    VFAIL("%s refers to value %lld of kind %u (expected %d)", what, (long long)idx, k, kind);
  return EM_OK;
}

static em_status verify_tensor(em_program *p, fb_tab t, const uint64_t *arena, uint32_t n_arena,
                               uint32_t vi) {
  fb_reader *r = &p->r;
  tensor_desc d;
  EM_TRY(em_tensor_desc_read(r, t, &d));
  const uint8_t *src = NULL;
  uint64_t avail;
  if (!d.external && d.data_buffer_idx > 0) {
    em_status st = d.planned ? em_program_mutable(p, d.data_buffer_idx, &src, &avail)
                             : em_program_constant(p, d.data_buffer_idx, &src, &avail);
    if (st != EM_OK) return st;
    if (avail < d.nbytes)
      VFAIL("value %u: %s data %u has %llu bytes, tensor needs %llu", vi,
            d.planned ? "initial" : "constant", d.data_buffer_idx, (unsigned long long)avail,
            (unsigned long long)d.nbytes);
  }
  size_t es = em_dtype_size(d.dtype);
  if (!d.external && !d.planned && d.data_buffer_idx > 0 && ((uintptr_t)src % es) != 0)
    VFAIL("value %u: constant data %u is not aligned to its %zu-byte elements", vi,
          d.data_buffer_idx, es);
  if (d.planned && (d.memory_offset % es) != 0)
    VFAIL("value %u: planned offset %llu is not aligned to its %zu-byte elements", vi,
          (unsigned long long)d.memory_offset, es);
  if (d.planned) {
    if (d.memory_id == 0 || d.memory_id > n_arena)
      VFAIL("value %u: memory_id %u outside the %u planned arenas", vi, d.memory_id, n_arena);
    uint64_t size = arena[d.memory_id];
    if (d.memory_offset > size || d.nbytes > size - d.memory_offset)
      VFAIL("value %u: planned range [%llu, +%llu) outside arena %u of %llu bytes", vi,
            (unsigned long long)d.memory_offset, (unsigned long long)d.nbytes, d.memory_id,
            (unsigned long long)size);
  }
  return EM_OK;
}

static em_status verify_values(em_program *p, fb_vec values, const uint64_t *arena,
                               uint32_t n_arena) {
  fb_reader *r = &p->r;
  uint32_t n = values.n;
  for (uint32_t i = 0; i < n && !r->bad; i++) {
    fb_tab ev = fb_vec_table(r, values, i);
    uint8_t kt = fb_u8(r, ev, EVALUE_TYPE, 0);
    if (kt >= KT_COUNT) VFAIL("value %u has unknown kind %u", i, kt);
    fb_tab v = fb_table(r, ev, EVALUE_VAL);
    if (kt > KT_NULL && !fb_present(v)) VFAIL("value %u of kind %u has no payload", i, kt);
    fb_vec items;
    switch (kt) {
    case KT_INT: (void)fb_i64(r, v, SCALAR_VAL, 0); break;
    case KT_BOOL: (void)fb_u8(r, v, SCALAR_VAL, 0); break;
    case KT_DOUBLE: (void)fb_f64(r, v, SCALAR_VAL, 0); break;
    case KT_STRING:
      if (!fb_string(r, v, SCALAR_VAL, NULL)) VFAIL("value %u: string without text", i);
      break;
    case KT_TENSOR: EM_TRY(verify_tensor(p, v, arena, n_arena, i)); break;
    case KT_INT_LIST:
      items = fb_vector(r, v, LIST_ITEMS, 8, 8);
      for (uint32_t k = 0; k < items.n; k++)
        EM_TRY(
            check_value_ref(r, values, fb_vec_i64(r, items, k), KT_INT, KT_INT, "int list item"));
      break;
    case KT_DOUBLE_LIST: (void)fb_vector(r, v, LIST_ITEMS, 8, 8); break;
    case KT_BOOL_LIST: (void)fb_vector(r, v, LIST_ITEMS, 1, 1); break;
    case KT_TENSOR_LIST:
      items = fb_vector(r, v, LIST_ITEMS, 4, 4);
      for (uint32_t k = 0; k < items.n; k++)
        EM_TRY(check_value_ref(r, values, fb_vec_i32(r, items, k), KT_TENSOR, KT_TENSOR,
                               "tensor list item"));
      break;
    case KT_OPTIONAL_TENSOR_LIST:
      items = fb_vector(r, v, LIST_ITEMS, 4, 4);
      for (uint32_t k = 0; k < items.n; k++) {
        int32_t idx = fb_vec_i32(r, items, k);
        if (idx != -1)
          EM_TRY(check_value_ref(r, values, idx, KT_TENSOR, KT_NULL, "optional tensor list item"));
      }
      break;
    default: break;
    }
  }
  if (r->bad) VFAIL("bad value table: %s at byte %u", r->why, r->where);
  return EM_OK;
}

static em_status verify_args(fb_reader *r, fb_tab call, unsigned slot, uint32_t n_values,
                             const char *what) {
  if (!fb_has(r, call, slot)) VFAIL("%s without an argument list", what);
  fb_vec args = fb_vector(r, call, slot, 4, 4);
  for (uint32_t k = 0; k < args.n; k++) {
    int32_t a = fb_vec_i32(r, args, k);
    if (a < 0 || (uint32_t)a >= n_values)
      VFAIL("%s argument %u = value %d of %u", what, k, a, n_values);
  }
  return EM_OK;
}

/*
 * Aliasing (docs/runtime-aliasing.md). Within one kernel or delegate call, two planned tensor
 * operands (arguments, and the items of tensor-list arguments) in the same arena either occupy
 * the very same bytes (same offset, same byte size: a value passed twice, an in-place op such as
 * `copy_(self, src, out=self)`, a view of a root) or are disjoint. A partial overlap is refused:
 * no valid memory plan makes two values live at the same instruction share part of their bytes,
 * and kernels are not written for it. Operands are enumerated without allocating: the first
 * ALIAS_CACHE are kept on the stack, later ones are re-read, under a per-program work budget.
 */
#define ALIAS_CACHE  32
#define ALIAS_BUDGET ((uint64_t)1 << 24)

typedef struct alias_rng {
  uint64_t off, len;
  uint32_t mem, value;
} alias_rng;

typedef struct operand_it {
  fb_reader *r;
  fb_vec values, args, items;
  uint32_t k, j;
  bool in_list;
} operand_it;

/* Next tensor value index among the operands (list items expanded); false at the end. */
static bool operand_next(operand_it *it, uint32_t *vi) {
  fb_reader *r = it->r;
  for (;;) {
    if (it->in_list) {
      while (it->j < it->items.n) {
        int32_t v = fb_vec_i32(r, it->items, it->j++);
        if (v >= 0 && (uint32_t)v < it->values.n) {
          *vi = (uint32_t)v;
          return true;
        }
      }
      it->in_list = false;
    }
    if (it->k >= it->args.n || r->bad) return false;
    int32_t a = fb_vec_i32(r, it->args, it->k++);
    if (a < 0 || (uint32_t)a >= it->values.n) continue;
    fb_tab ev = fb_vec_table(r, it->values, (uint32_t)a);
    uint8_t kt = fb_u8(r, ev, EVALUE_TYPE, 0);
    if (kt == KT_TENSOR) {
      *vi = (uint32_t)a;
      return true;
    }
    if (kt == KT_TENSOR_LIST || kt == KT_OPTIONAL_TENSOR_LIST) {
      it->items = fb_vector(r, fb_table(r, ev, EVALUE_VAL), LIST_ITEMS, 4, 4);
      it->j = 0;
      it->in_list = true;
    }
  }
}

/* The planned range of tensor value `vi`; false when it has none (unplanned or empty). */
static bool operand_range(fb_reader *r, fb_vec values, uint32_t vi, alias_rng *out) {
  fb_tab ev = fb_vec_table(r, values, vi);
  if (fb_u8(r, ev, EVALUE_TYPE, 0) != KT_TENSOR) return false;
  tensor_desc d;
  if (em_tensor_desc_read(r, fb_table(r, ev, EVALUE_VAL), &d) != EM_OK) return false;
  if (!d.planned || d.nbytes == 0) return false;
  *out = (alias_rng){d.memory_offset, d.nbytes, d.memory_id, vi};
  return true;
}

static bool partial_overlap(const alias_rng *a, const alias_rng *b) {
  if (a->mem != b->mem) return false;
  if (a->off >= b->off + b->len || b->off >= a->off + a->len) return false;
  return a->off != b->off || a->len != b->len;
}

static em_status alias_fail(em_program *p, fb_tab plan, uint32_t ins, bool delegate, int32_t what,
                            const alias_rng *a, const alias_rng *b) {
  fb_reader *r = &p->r;
  char name[128] = "?";
  if (delegate) {
    fb_vec ds = fb_vector(r, plan, PLAN_DELEGATES, 4, 4);
    const char *id = what >= 0 && (uint32_t)what < ds.n
                         ? fb_string(r, fb_vec_table(r, ds, (uint32_t)what), DELEGATE_ID, NULL)
                         : NULL;
    if (id) {
      size_t n = strlen(id) < sizeof name - 1 ? strlen(id) : sizeof name - 1;
      memcpy(name, id, n);
      name[n] = '\0';
    }
  } else {
    fb_vec ops = fb_vector(r, plan, PLAN_OPERATORS, 4, 4);
    if (what >= 0 && (uint32_t)what < ops.n &&
        em_operator_name(r, fb_vec_table(r, ops, (uint32_t)what), name, sizeof name) != EM_OK)
      memcpy(name, "?", 2);
  }
  const char *method = fb_string(r, plan, PLAN_NAME, NULL);
  VFAIL("method '%s', instruction %u (%s%s): values %u and %u partially overlap in planned arena "
        "%u ([%llu, +%llu) and [%llu, +%llu)); only identical or disjoint operands are allowed",
        method ? method : "?", ins, delegate ? "delegate " : "", name, a->value, b->value, a->mem,
        (unsigned long long)a->off, (unsigned long long)a->len, (unsigned long long)b->off,
        (unsigned long long)b->len);
}

static em_status verify_aliasing(em_program *p, fb_tab plan, fb_vec values, fb_vec args,
                                 uint32_t ins, bool delegate, int32_t what, uint64_t *budget) {
  fb_reader *r = &p->r;
  alias_rng cache[ALIAS_CACHE];
  operand_it outer = {r, values, args, {0, 0}, 0, 0, false};
  uint32_t vi;
  bool more = true;
  while (more) {
    /* Fill the cache with the next chunk of planned operands, checking them against each other. */
    uint32_t n = 0;
    while (n < ALIAS_CACHE && (more = operand_next(&outer, &vi))) {
      alias_rng a;
      if (!operand_range(r, values, vi, &a)) continue;
      for (uint32_t i = 0; i < n; i++)
        if (partial_overlap(&cache[i], &a))
          return alias_fail(p, plan, ins, delegate, what, &cache[i], &a);
      cache[n++] = a;
    }
    if (!more || n == 0) break;
    /* Then against every later operand, re-read. */
    operand_it inner = outer;
    while (operand_next(&inner, &vi)) {
      if (++*budget > ALIAS_BUDGET)
        EM_FAIL(EM_ERR_NOT_SUPPORTED,
                "instruction %u: too many tensor operands to check for aliasing", ins);
      alias_rng b;
      if (!operand_range(r, values, vi, &b)) continue;
      for (uint32_t i = 0; i < n; i++)
        if (partial_overlap(&cache[i], &b))
          return alias_fail(p, plan, ins, delegate, what, &cache[i], &b);
    }
  }
  if (r->bad) VFAIL("bad instruction arguments: %s at byte %u", r->why, r->where);
  return EM_OK;
}

static em_status verify_chain(em_program *p, fb_tab chain, fb_vec values, uint32_t n_ops,
                              uint32_t n_delegates, fb_tab plan, uint64_t *budget) {
  fb_reader *r = &p->r;
  uint32_t n_values = values.n;
  if (!fb_has(r, chain, CHAIN_INSTRUCTIONS)) VFAIL("chain without instructions");
  fb_vec ins = fb_vector(r, chain, CHAIN_INSTRUCTIONS, 4, 4);
  for (uint32_t i = 0; i < ins.n && !r->bad; i++) {
    fb_tab in = fb_vec_table(r, ins, i);
    uint8_t type = fb_u8(r, in, INSTRUCTION_TYPE, 0);
    fb_tab a = fb_table(r, in, INSTRUCTION_ARGS);
    if (type < INSTR_KERNEL_CALL || type > INSTR_FREE_CALL)
      VFAIL("instruction %u has type %u", i, type);
    if (!fb_present(a)) VFAIL("instruction %u has no arguments table", i);
    switch (type) {
    case INSTR_KERNEL_CALL: {
      int32_t op = fb_i32(r, a, KERNEL_CALL_OP_INDEX, 0);
      if (op < 0 || (uint32_t)op >= n_ops)
        VFAIL("instruction %u calls operator %d of %u", i, op, n_ops);
      EM_TRY(verify_args(r, a, KERNEL_CALL_ARGS, n_values, "kernel call"));
      EM_TRY(verify_aliasing(p, plan, values, fb_vector(r, a, KERNEL_CALL_ARGS, 4, 4), i, false, op,
                             budget));
      break;
    }
    case INSTR_DELEGATE_CALL: {
      int32_t d = fb_i32(r, a, DELEGATE_CALL_INDEX, 0);
      if (d < 0 || (uint32_t)d >= n_delegates)
        VFAIL("instruction %u calls delegate %d of %u", i, d, n_delegates);
      EM_TRY(verify_args(r, a, DELEGATE_CALL_ARGS, n_values, "delegate call"));
      EM_TRY(verify_aliasing(p, plan, values, fb_vector(r, a, DELEGATE_CALL_ARGS, 4, 4), i, true, d,
                             budget));
      break;
    }
    case INSTR_MOVE_CALL:
      EM_TRY(check_value_ref(r, values, fb_i32(r, a, MOVE_FROM, 0), -1, -1, "move source"));
      EM_TRY(check_value_ref(r, values, fb_i32(r, a, MOVE_TO, 0), -1, -1, "move target"));
      break;
    case INSTR_JUMP_FALSE_CALL: {
      EM_TRY(check_value_ref(r, values, fb_i32(r, a, JUMP_FALSE_COND, 0), KT_BOOL, KT_TENSOR,
                             "jump condition"));
      int32_t dest = fb_i32(r, a, JUMP_FALSE_DEST, 0);
      if (dest < 0 || (uint32_t)dest > ins.n)
        VFAIL("instruction %u jumps to %d of %u instructions", i, dest, ins.n);
      break;
    }
    case INSTR_FREE_CALL:
      EM_TRY(check_value_ref(r, values, fb_i32(r, a, FREE_VALUE, 0), KT_TENSOR, KT_TENSOR, "free"));
      break;
    default: break;
    }
  }
  if (r->bad) VFAIL("bad instruction table: %s at byte %u", r->why, r->where);
  return EM_OK;
}

static em_status verify_delegates(em_program *p, fb_tab plan, uint32_t *n_out) {
  fb_reader *r = &p->r;
  fb_vec ds = fb_vector(r, plan, PLAN_DELEGATES, 4, 4);
  for (uint32_t i = 0; i < ds.n; i++) {
    fb_tab d = fb_vec_table(r, ds, i);
    uint32_t idn = 0;
    const char *id = fb_string(r, d, DELEGATE_ID, &idn);
    if (!id) VFAIL("delegate %u has no backend id", i);
    if (!printable(id, idn)) VFAIL("delegate %u: backend id has a non-printable byte", i);
    fb_tab ref = fb_table(r, d, DELEGATE_PROCESSED);
    if (!fb_present(ref)) VFAIL("delegate %u has no processed data", i);
    int8_t loc = fb_i8(r, ref, DATA_REF_LOCATION, DATA_INLINE);
    uint32_t idx = fb_u32(r, ref, DATA_REF_INDEX, 0);
    if (loc == DATA_INLINE) {
      if (idx >= p->delegate_data.n) VFAIL("delegate %u inline data %u out of range", i, idx);
      (void)fb_vector(r, fb_vec_table(r, p->delegate_data, idx), BUFFER_STORAGE, 1, 16);
    } else if (loc == DATA_SEGMENT) {
      if (idx >= p->segments.n) VFAIL("delegate %u segment %u out of range", i, idx);
    } else {
      VFAIL("delegate %u has data location %d", i, loc);
    }
    fb_vec specs = fb_vector(r, d, DELEGATE_COMPILE_SPECS, 4, 4);
    for (uint32_t k = 0; k < specs.n; k++) {
      fb_tab s = fb_vec_table(r, specs, k);
      if (!fb_string(r, s, COMPILE_SPEC_KEY, NULL))
        VFAIL("delegate %u compile spec without key", i);
      (void)fb_vector(r, s, COMPILE_SPEC_VALUE, 1, 1);
    }
  }
  *n_out = ds.n;
  if (r->bad) VFAIL("bad delegate table: %s at byte %u", r->why, r->where);
  return EM_OK;
}

#define MAX_ARENAS 16

static em_status verify_plan(em_program *p, fb_tab plan, uint64_t *budget) {
  fb_reader *r = &p->r;
  uint32_t namen = 0;
  const char *mname = fb_string(r, plan, PLAN_NAME, &namen);
  if (!mname) VFAIL("method without a name");
  if (!printable(mname, namen)) VFAIL("method name has a non-printable byte");
  if (!fb_has(r, plan, PLAN_VALUES) || !fb_has(r, plan, PLAN_INPUTS) ||
      !fb_has(r, plan, PLAN_OUTPUTS) || !fb_has(r, plan, PLAN_CHAINS) ||
      !fb_has(r, plan, PLAN_NON_CONST_BUFFER_SIZES))
    VFAIL("method lacks values, inputs, outputs, chains or non_const_buffer_sizes");
  fb_vec values = fb_vector(r, plan, PLAN_VALUES, 4, 4);
  fb_vec sizes = fb_vector(r, plan, PLAN_NON_CONST_BUFFER_SIZES, 8, 8);
  if (r->bad) VFAIL("bad method table: %s", r->why);
  if (sizes.n > MAX_ARENAS + 1)
    EM_FAIL(EM_ERR_NOT_SUPPORTED, "method has %u planned arenas", sizes.n - 1);
  uint64_t arena[MAX_ARENAS + 1] = {0};
  for (uint32_t i = 1; i < sizes.n; i++) {
    int64_t s = fb_vec_i64(r, sizes, i);
    if (s < 0) VFAIL("planned arena %u has negative size", i);
    arena[i] = (uint64_t)s;
  }
  uint32_t n_arena = sizes.n > 0 ? sizes.n - 1 : 0;
  EM_TRY(verify_values(p, values, arena, n_arena));
  fb_vec io[2] = {fb_vector(r, plan, PLAN_INPUTS, 4, 4), fb_vector(r, plan, PLAN_OUTPUTS, 4, 4)};
  for (int k = 0; k < 2; k++)
    for (uint32_t i = 0; i < io[k].n; i++)
      EM_TRY(check_value_ref(r, values, fb_vec_i32(r, io[k], i), -1, -1,
                             k ? "method output" : "method input"));
  fb_vec ops = fb_vector(r, plan, PLAN_OPERATORS, 4, 4);
  for (uint32_t i = 0; i < ops.n; i++) {
    char name[128];
    EM_TRY(em_operator_name(r, fb_vec_table(r, ops, i), name, sizeof name));
  }
  uint32_t n_delegates = 0;
  EM_TRY(verify_delegates(p, plan, &n_delegates));
  fb_vec chains = fb_vector(r, plan, PLAN_CHAINS, 4, 4);
  if (chains.n == 0) VFAIL("method has no chains");
  for (uint32_t c = 0; c < chains.n; c++)
    EM_TRY(verify_chain(p, fb_vec_table(r, chains, c), values, ops.n, n_delegates, plan, budget));
  if (r->bad) VFAIL("bad method table: %s at byte %u", r->why, r->where);
  return EM_OK;
}

static em_status verify_subsegment(em_program *p, fb_tab s, const char *what) {
  fb_reader *r = &p->r;
  uint32_t seg = fb_u32(r, s, SUBSEGMENT_INDEX, 0);
  fb_vec offs = fb_vector(r, s, SUBSEGMENT_OFFSETS, 8, 8);
  if (r->bad) VFAIL("bad %s: %s at byte %u", what, r->why, r->where);
  if (offs.n <= 1) return EM_OK;
  const uint8_t *d;
  uint64_t n;
  if (seg >= p->segments.n) VFAIL("%s refers to segment %u of %u", what, seg, p->segments.n);
  EM_TRY(em_program_segment(p, seg, &d, &n));
  for (uint32_t i = 0; i < offs.n; i++)
    if (fb_vec_u64(r, offs, i) > n)
      VFAIL("%s offset %u lies past its %llu-byte segment", what, i, (unsigned long long)n);
  return EM_OK;
}

em_status em_program_verify(em_program *p) {
  fb_reader *r = &p->r;
  if (!fb_has(r, p->root, PROGRAM_EXECUTION_PLAN)) VFAIL("program has no execution_plan");
  for (uint32_t i = 0; i < p->segments.n; i++) {
    const uint8_t *d;
    uint64_t n;
    EM_TRY(em_program_segment(p, i, &d, &n));
  }
  for (uint32_t i = 0; i < p->constant_buffer.n; i++)
    (void)fb_vector(r, fb_vec_table(r, p->constant_buffer, i), BUFFER_STORAGE, 1, 16);
  fb_tab cs = fb_table(r, p->root, PROGRAM_CONSTANT_SEGMENT);
  if (fb_present(cs)) EM_TRY(verify_subsegment(p, cs, "constant segment"));
  fb_vec muts = fb_vector(r, p->root, PROGRAM_MUTABLE_DATA_SEGMENTS, 4, 4);
  for (uint32_t i = 0; i < muts.n; i++)
    EM_TRY(verify_subsegment(p, fb_vec_table(r, muts, i), "mutable data segment"));
  fb_vec named = fb_vector(r, p->root, PROGRAM_NAMED_DATA, 4, 4);
  for (uint32_t i = 0; i < named.n; i++) {
    fb_tab nd = fb_vec_table(r, named, i);
    if (!fb_string(r, nd, NAMED_DATA_KEY, NULL)) VFAIL("named data %u has no key", i);
    if (fb_u32(r, nd, NAMED_DATA_SEGMENT, 0) >= p->segments.n)
      VFAIL("named data %u refers to a missing segment", i);
  }
  uint64_t alias_budget = 0; /* operand re-reads of the aliasing check, for the whole program */
  for (uint32_t i = 0; i < p->plans.n && !r->bad; i++)
    EM_TRY(verify_plan(p, fb_vec_table(r, p->plans, i), &alias_budget));
  if (r->bad) VFAIL("malformed program: %s at byte %u", r->why, r->where);
  return EM_OK;
}

em_status em_operator_name(fb_reader *r, fb_tab op, char *buf, size_t len) {
  uint32_t nl = 0, ol = 0;
  const char *name = fb_string(r, op, OPERATOR_NAME, &nl);
  const char *ov = fb_string(r, op, OPERATOR_OVERLOAD, &ol);
  if (!name || r->bad) EM_FAIL(EM_ERR_INVALID_PROGRAM, "operator without a name");
  size_t need = nl + (ol ? ol + 1 : 0) + 1;
  if (need > len) EM_FAIL(EM_ERR_INVALID_PROGRAM, "operator name of %zu bytes is too long", need);
  memcpy(buf, name, nl);
  size_t n = nl;
  if (ol) {
    buf[n++] = '.';
    memcpy(buf + n, ov, ol);
    n += ol;
  }
  buf[n] = '\0';
  /* Names are printed in messages and `ember info`: printable ASCII only. */
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)buf[i] < 0x20 || (unsigned char)buf[i] > 0x7e)
      EM_FAIL(EM_ERR_INVALID_PROGRAM, "operator name has a non-printable byte 0x%02x at %zu",
              (unsigned char)buf[i], i);
  return EM_OK;
}
