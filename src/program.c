/*
 * program.c — loading a `.pte`: headers, the segment and constant tables, method metadata.
 *
 * Layout (docs/pte-format.md §2): u32 root offset, "ET12", an optional "eh00"
 * extended header at byte 8 (program_size, segment_base_offset,
 * segment_data_size), the flatbuffer, then 128-aligned segments. Everything the
 * program hands out points into the loader's bytes (zero copy).
 *
 * Layers below this file: program_segments.c (segment, constant and mutable-data ranges) and
 * verify.c (verification at load, the Tensor / Operator table readers of the metadata).
 */
#include <string.h>

#include "internal.h"
#include "verify.h"

#define HEAD_BYTES 64
#define EH_MAGIC   "eh00"

static uint64_t rd64(const uint8_t *p) {
  uint64_t v;
  memcpy(&v, p, 8);
  return v;
}
static uint32_t rd32(const uint8_t *p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
}

/* Parses the optional eh00 header from the first bytes of the file. */
static em_status parse_header(em_program *p, const uint8_t *head, uint64_t n) {
  p->has_header = n >= 32 && memcmp(head + 8, EH_MAGIC, 4) == 0;
  if (!p->has_header) {
    p->program_size = p->file_size;
    return EM_OK;
  }
  uint32_t len = rd32(head + 12);
  if (len < 24) EM_FAIL(EM_ERR_INVALID_PROGRAM, "extended header length %u < 24", len);
  if (n < 8u + len && len <= 56)
    EM_FAIL(EM_ERR_INVALID_PROGRAM, "file too short for its %u-byte extended header", len);
  p->program_size = rd64(head + 16);
  p->seg_base = rd64(head + 24);
  p->seg_data_size = len >= 32 && n >= 40 ? rd64(head + 32) : 0;
  if (p->program_size < 16 || p->program_size > p->file_size)
    EM_FAIL(EM_ERR_INVALID_PROGRAM, "program_size %llu outside file of %llu bytes",
            (unsigned long long)p->program_size, (unsigned long long)p->file_size);
  if (p->seg_base > p->file_size || p->seg_data_size > p->file_size - p->seg_base)
    EM_FAIL(EM_ERR_INVALID_PROGRAM,
            "segment data [%llu, +%llu) runs past the end of the %llu-byte file",
            (unsigned long long)p->seg_base, (unsigned long long)p->seg_data_size,
            (unsigned long long)p->file_size);
  if (p->seg_base != 0 && p->seg_base < p->program_size)
    EM_FAIL(EM_ERR_INVALID_PROGRAM, "segment base %llu inside the flatbuffer (%llu bytes)",
            (unsigned long long)p->seg_base, (unsigned long long)p->program_size);
  return EM_OK;
}

/* Locates the constant data (segment or legacy buffers). */
static em_status bind_constants(em_program *p) {
  fb_reader *r = &p->r;
  fb_tab cs = fb_table(r, p->root, PROGRAM_CONSTANT_SEGMENT);
  fb_vec offsets = {0, 0};
  if (fb_present(cs)) offsets = fb_vector(r, cs, SUBSEGMENT_OFFSETS, 8, 8);
  p->constant_buffer = fb_vector(r, p->root, PROGRAM_CONSTANT_BUFFER, 4, 4);
  if (offsets.n > 1 && p->constant_buffer.n > 0)
    EM_FAIL(EM_ERR_INVALID_PROGRAM, "both constant_segment and constant_buffer hold constants");
  if (offsets.n > 1) {
    uint32_t seg = fb_u32(r, cs, SUBSEGMENT_INDEX, 0);
    EM_TRY(em_program_segment(p, seg, &p->const_seg, &p->const_seg_size));
    p->const_offsets = offsets;
  } else if (offsets.n == 0) {
    p->legacy_constants = p->constant_buffer.n > 0;
  }
  fb_vec muts = fb_vector(r, p->root, PROGRAM_MUTABLE_DATA_SEGMENTS, 4, 4);
  if (muts.n > 0) p->mutable_seg = fb_vec_table(r, muts, 0);
  if (r->bad)
    EM_FAIL(EM_ERR_INVALID_PROGRAM, "bad program tables: %s at byte %u", r->why, r->where);
  return EM_OK;
}

em_status em_program_load(em_data_loader *loader, em_verification verification, em_allocator *alloc,
                          em_program **program_out) {
  em_clear_last_error();
  if (!loader || !loader->load || !alloc || !program_out)
    EM_FAIL(EM_ERR_INVALID_ARGUMENT, "em_program_load: loader, allocator and output are required");
  *program_out = NULL;
  em_program *p = em_allocator_alloc(alloc, sizeof *p, 16);
  if (!p) EM_FAIL(EM_ERR_MEMORY_ALLOCATION_FAILED, "method allocator too small for the program");
  memset(p, 0, sizeof *p);
  p->loader = loader;
  p->file_size = loader->size;
  if (p->file_size < 8)
    EM_FAIL(EM_ERR_INVALID_PROGRAM, "file of %llu bytes is too small to be a program",
            (unsigned long long)p->file_size);
  const void *head = NULL;
  uint64_t head_n = p->file_size < HEAD_BYTES ? p->file_size : HEAD_BYTES;
  EM_TRY(loader->load(loader, 0, head_n, &head));
  em_status st = parse_header(p, head, head_n);
  if (loader->release) loader->release(loader, head, head_n);
  if (st != EM_OK) return st;
  if (p->program_size > 0x7fffffffu)
    EM_FAIL(EM_ERR_INVALID_PROGRAM, "flatbuffer of %llu bytes exceeds 2 GiB",
            (unsigned long long)p->program_size);
  const void *bytes = NULL;
  EM_TRY(loader->load(loader, 0, p->program_size, &bytes));
  p->bytes = bytes;
  if (((uintptr_t)bytes & 15) != 0)
    EM_FAIL(EM_ERR_INVALID_ARGUMENT, "program bytes must be 16-byte aligned (got %p)", bytes);
  if (memcmp(p->bytes + 4, "ET12", 4) != 0) {
    if (p->bytes[4] == 'E' && p->bytes[5] == 'T')
      EM_FAIL(EM_ERR_NOT_SUPPORTED, "incompatible program version '%.4s' (expected ET12)",
              (const char *)p->bytes + 4);
    EM_FAIL(EM_ERR_INVALID_PROGRAM, "not an ExecuTorch program: identifier is not ET12");
  }
  fb_init(&p->r, p->bytes, p->program_size);
  p->root = fb_root(&p->r);
  if (p->r.bad) EM_FAIL(EM_ERR_INVALID_PROGRAM, "bad root table: %s", p->r.why);
  p->plans = fb_vector(&p->r, p->root, PROGRAM_EXECUTION_PLAN, 4, 4);
  p->segments = fb_vector(&p->r, p->root, PROGRAM_SEGMENTS, 4, 4);
  p->delegate_data = fb_vector(&p->r, p->root, PROGRAM_BACKEND_DELEGATE_DATA, 4, 4);
  if (p->r.bad) EM_FAIL(EM_ERR_INVALID_PROGRAM, "bad program table: %s", p->r.why);
  EM_TRY(bind_constants(p));
#if !defined(EMBER_MINIMAL_VERIFY_ONLY)
  if (verification == EM_VERIFY_FULL) EM_TRY(em_program_verify(p));
#else
  (void)verification;
#endif
  fb_vec named = fb_vector(&p->r, p->root, PROGRAM_NAMED_DATA, 4, 4);
  if (named.n > 0) {
    p->has_named = true;
    p->named.loader = loader;
    p->named.r = p->r;
    p->named.root = p->root;
    p->named.segments = p->segments;
    p->named.named = named;
    p->named.seg_base = p->seg_base;
    p->named.seg_data_size = p->seg_data_size;
    p->named.has_layouts = false;
  }
  if (p->r.bad)
    EM_FAIL(EM_ERR_INVALID_PROGRAM, "malformed program: %s at byte %u", p->r.why, p->r.where);
  *program_out = p;
  return EM_OK;
}

size_t em_program_method_count(const em_program *p) { return p ? p->plans.n : 0; }

const char *em_program_method_name(const em_program *p, size_t i) {
  if (!p || i >= p->plans.n) return NULL;
  fb_reader r = p->r;
  fb_tab plan = fb_vec_table(&r, p->plans, (uint32_t)i);
  const char *s = fb_string(&r, plan, PLAN_NAME, NULL);
  return r.bad ? NULL : s;
}

const em_data_map *em_program_named_data(const em_program *p) {
  return p && p->has_named ? &p->named : NULL;
}

void em_program_get_stats(const em_program *p, em_program_stats *s) {
  memset(s, 0, sizeof *s);
  fb_reader r = p->r;
  s->file_size = p->file_size;
  s->program_size = p->program_size;
  s->segment_base_offset = p->seg_base;
  s->segment_data_size = p->seg_data_size;
  s->n_segments = p->segments.n;
  s->has_extended_header = p->has_header;
  s->legacy_constant_buffer = p->legacy_constants;
  s->n_named_data = p->has_named ? p->named.named.n : 0;
  if (p->legacy_constants) {
    s->n_constants = p->constant_buffer.n ? p->constant_buffer.n - 1 : 0;
    for (uint32_t i = 0; i < p->constant_buffer.n; i++) {
      fb_tab b = fb_vec_table(&r, p->constant_buffer, i);
      s->constant_bytes += fb_vector(&r, b, BUFFER_STORAGE, 1, 16).n;
    }
  } else if (p->const_offsets.n > 1) {
    s->n_constants = p->const_offsets.n - 1;
    s->constant_bytes = p->const_seg_size;
  }
}

/* ---- method metadata ------------------------------------------------------------------- */

static fb_tab plan_of(const em_method_meta *m, fb_reader *r) {
  return fb_vec_table(r, m->program->plans, (uint32_t)m->plan_index);
}

em_status em_program_method_meta(const em_program *p, const char *name, em_method_meta *meta) {
  if (!p || !name || !meta) return EM_ERR_INVALID_ARGUMENT;
  fb_reader r = p->r;
  for (uint32_t i = 0; i < p->plans.n; i++) {
    fb_tab plan = fb_vec_table(&r, p->plans, i);
    const char *n = fb_string(&r, plan, PLAN_NAME, NULL);
    if (!n || strcmp(n, name) != 0) continue;
    memset(meta, 0, sizeof *meta);
    meta->program = p;
    meta->name = n;
    meta->plan_index = i;
    meta->n_inputs = fb_vector(&r, plan, PLAN_INPUTS, 4, 4).n;
    meta->n_outputs = fb_vector(&r, plan, PLAN_OUTPUTS, 4, 4).n;
    fb_vec chains = fb_vector(&r, plan, PLAN_CHAINS, 4, 4);
    for (uint32_t c = 0; c < chains.n; c++) {
      fb_tab ch = fb_vec_table(&r, chains, c);
      meta->n_instructions += fb_vector(&r, ch, CHAIN_INSTRUCTIONS, 4, 4).n;
    }
    fb_vec sizes = fb_vector(&r, plan, PLAN_NON_CONST_BUFFER_SIZES, 8, 8);
    meta->n_arenas = sizes.n > 0 ? sizes.n - 1 : 0;
    if (r.bad) EM_FAIL(EM_ERR_INVALID_PROGRAM, "bad method %s: %s", name, r.why);
    return EM_OK;
  }
  EM_FAIL(EM_ERR_NOT_FOUND, "no method named '%s'", name);
}

uint64_t em_method_meta_arena_size(const em_method_meta *m, size_t i) {
  fb_reader r = m->program->r;
  fb_vec sizes = fb_vector(&r, plan_of(m, &r), PLAN_NON_CONST_BUFFER_SIZES, 8, 8);
  if (i + 1 >= sizes.n) return 0;
  int64_t v = fb_vec_i64(&r, sizes, (uint32_t)i + 1);
  return v < 0 ? 0 : (uint64_t)v;
}

static em_status value_info(const em_method_meta *m, unsigned slot, size_t i, em_value_info *out) {
  fb_reader r = m->program->r;
  fb_tab plan = plan_of(m, &r);
  fb_vec idx = fb_vector(&r, plan, slot, 4, 4);
  fb_vec values = fb_vector(&r, plan, PLAN_VALUES, 4, 4);
  if (i >= idx.n) return EM_ERR_INVALID_ARGUMENT;
  int32_t vi = fb_vec_i32(&r, idx, (uint32_t)i);
  if (vi < 0 || (uint32_t)vi >= values.n)
    EM_FAIL(EM_ERR_INVALID_PROGRAM, "method %s %zu refers to value %d of %u",
            slot == PLAN_INPUTS ? "input" : "output", i, vi, values.n);
  fb_tab ev = fb_vec_table(&r, values, (uint32_t)vi);
  uint8_t kt = fb_u8(&r, ev, EVALUE_TYPE, 0);
  memset(out, 0, sizeof *out);
  static const uint8_t tags[KT_COUNT] = {
      EM_TAG_NONE,        EM_TAG_NONE,      EM_TAG_INT,         EM_TAG_BOOL,
      EM_TAG_DOUBLE,      EM_TAG_TENSOR,    EM_TAG_STRING,      EM_TAG_LIST_INT,
      EM_TAG_LIST_DOUBLE, EM_TAG_LIST_BOOL, EM_TAG_LIST_TENSOR, EM_TAG_LIST_OPTIONAL_TENSOR};
  out->tag = kt < KT_COUNT ? tags[kt] : EM_TAG_NONE;
  if (kt == KT_TENSOR) {
    tensor_desc d;
    EM_TRY(em_tensor_desc_read(&r, fb_table(&r, ev, EVALUE_VAL), &d));
    out->dtype = d.dtype;
    out->dim = d.dim;
    memcpy(out->sizes, d.sizes, sizeof d.sizes);
    memcpy(out->dim_order, d.dim_order, sizeof d.dim_order);
    out->dynamism = d.dynamism;
    out->planned = d.planned || d.data_buffer_idx != 0;
    out->nbytes = (size_t)d.nbytes;
  }
  if (r.bad) EM_FAIL(EM_ERR_INVALID_PROGRAM, "bad value table: %s at byte %u", r.why, r.where);
  return EM_OK;
}

em_status em_method_meta_input(const em_method_meta *m, size_t i, em_value_info *out) {
  return value_info(m, PLAN_INPUTS, i, out);
}

em_status em_method_meta_output(const em_method_meta *m, size_t i, em_value_info *out) {
  return value_info(m, PLAN_OUTPUTS, i, out);
}

size_t em_method_meta_operator_count(const em_method_meta *m) {
  fb_reader r = m->program->r;
  return fb_vector(&r, plan_of(m, &r), PLAN_OPERATORS, 4, 4).n;
}

em_status em_method_meta_operator(const em_method_meta *m, size_t i, char *buf, size_t len) {
  fb_reader r = m->program->r;
  fb_vec ops = fb_vector(&r, plan_of(m, &r), PLAN_OPERATORS, 4, 4);
  if (i >= ops.n) return EM_ERR_INVALID_ARGUMENT;
  return em_operator_name(&r, fb_vec_table(&r, ops, (uint32_t)i), buf, len);
}

void em_method_meta_operator_calls(const em_method_meta *m, uint32_t *counts) {
  fb_reader r = m->program->r;
  fb_tab plan = plan_of(m, &r);
  size_t n_ops = fb_vector(&r, plan, PLAN_OPERATORS, 4, 4).n;
  memset(counts, 0, n_ops * sizeof *counts);
  fb_vec chains = fb_vector(&r, plan, PLAN_CHAINS, 4, 4);
  for (uint32_t c = 0; c < chains.n; c++) {
    fb_vec ins = fb_vector(&r, fb_vec_table(&r, chains, c), CHAIN_INSTRUCTIONS, 4, 4);
    for (uint32_t k = 0; k < ins.n; k++) {
      fb_tab in = fb_vec_table(&r, ins, k);
      if (fb_u8(&r, in, INSTRUCTION_TYPE, 0) != INSTR_KERNEL_CALL) continue;
      int32_t op = fb_i32(&r, fb_table(&r, in, INSTRUCTION_ARGS), KERNEL_CALL_OP_INDEX, 0);
      if (op >= 0 && (size_t)op < n_ops) counts[op]++;
    }
  }
}

size_t em_method_meta_delegate_count(const em_method_meta *m) {
  fb_reader r = m->program->r;
  return fb_vector(&r, plan_of(m, &r), PLAN_DELEGATES, 4, 4).n;
}

const char *em_method_meta_delegate_id(const em_method_meta *m, size_t i) {
  fb_reader r = m->program->r;
  fb_vec ds = fb_vector(&r, plan_of(m, &r), PLAN_DELEGATES, 4, 4);
  if (i >= ds.n) return NULL;
  const char *s = fb_string(&r, fb_vec_table(&r, ds, (uint32_t)i), DELEGATE_ID, NULL);
  return r.bad ? NULL : s;
}
