/*
 * pte_mutator.h — a structure-aware libFuzzer mutator for .pte files: walks the flatbuffer with
 * the runtime's bounds-checked reader and collects the positions of the fields that steer
 * loading and execution — segment offsets and sizes, arena sizes, every tensor's scalar type,
 * sizes, dim order, dynamism, data buffer index and planned placement (memory id, offset), list
 * items, int values, instruction operator / delegate indices, arguments, jump destinations, move
 * and free operands, method inputs and outputs — then writes one of them with a value chosen to
 * hurt (0, 1, -1, the type's extremes, the old value nudged or doubled, an index one past the
 * end). Half the time, or when the walk finds nothing (the bytes are no flatbuffer any more),
 * libFuzzer's own byte-level mutation runs instead.
 */
#ifndef EMBER_TESTS_PTE_MUTATOR_H
#define EMBER_TESTS_PTE_MUTATOR_H

#include <stdint.h>
#include <string.h>

#include "../../src/flatbuf.h"
#include "../../src/schema.h"

size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);
size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed);

#define PM_MAX_FIELDS 8192

typedef struct pm_field {
  uint32_t at;
  uint8_t width; /* 1, 4 or 8 */
} pm_field;

typedef struct pm_walk {
  fb_reader r;
  pm_field f[PM_MAX_FIELDS];
  uint32_t n;
} pm_walk;

static void pm_add(pm_walk *w, uint32_t at, unsigned width) {
  if (at && w->n < PM_MAX_FIELDS) w->f[w->n++] = (pm_field){at, (uint8_t)width};
}

static void pm_scalar(pm_walk *w, fb_tab t, unsigned slot, unsigned width) {
  pm_add(w, fb_field(&w->r, t, slot, width), width);
}

static void pm_items(pm_walk *w, fb_tab t, unsigned slot, unsigned width) {
  fb_vec v = fb_vector(&w->r, t, slot, width, width);
  for (uint32_t i = 0; i < v.n && i < 64 && !w->r.bad; i++) pm_add(w, v.data + i * width, width);
}

static void pm_tensor(pm_walk *w, fb_tab t) {
  pm_scalar(w, t, TENSOR_SCALAR_TYPE, 1);
  pm_scalar(w, t, TENSOR_DATA_BUFFER_IDX, 4);
  pm_scalar(w, t, TENSOR_SHAPE_DYNAMISM, 1);
  pm_items(w, t, TENSOR_SIZES, 4);
  pm_items(w, t, TENSOR_DIM_ORDER, 1);
  fb_tab a = fb_table(&w->r, t, TENSOR_ALLOCATION_INFO);
  if (fb_present(a)) {
    pm_scalar(w, a, ALLOC_MEMORY_ID, 4);
    pm_scalar(w, a, ALLOC_OFFSET_LOW, 4);
    pm_scalar(w, a, ALLOC_OFFSET_HIGH, 4);
  }
}

static void pm_plan(pm_walk *w, fb_tab plan) {
  fb_reader *r = &w->r;
  pm_items(w, plan, PLAN_NON_CONST_BUFFER_SIZES, 8);
  pm_items(w, plan, PLAN_INPUTS, 4);
  pm_items(w, plan, PLAN_OUTPUTS, 4);
  fb_vec values = fb_vector(r, plan, PLAN_VALUES, 4, 4);
  for (uint32_t i = 0; i < values.n && i < 2048 && !r->bad; i++) {
    fb_tab ev = fb_vec_table(r, values, i);
    uint8_t kt = fb_u8(r, ev, EVALUE_TYPE, 0);
    pm_scalar(w, ev, EVALUE_TYPE, 1);
    fb_tab v = fb_table(r, ev, EVALUE_VAL);
    if (!fb_present(v)) continue;
    if (kt == KT_TENSOR) pm_tensor(w, v);
    if (kt == KT_INT) pm_scalar(w, v, SCALAR_VAL, 8);
    if (kt == KT_INT_LIST) pm_items(w, v, LIST_ITEMS, 8);
    if (kt == KT_TENSOR_LIST || kt == KT_OPTIONAL_TENSOR_LIST) pm_items(w, v, LIST_ITEMS, 4);
  }
  fb_vec chains = fb_vector(r, plan, PLAN_CHAINS, 4, 4);
  for (uint32_t c = 0; c < chains.n && c < 16 && !r->bad; c++) {
    fb_vec ins = fb_vector(r, fb_vec_table(r, chains, c), CHAIN_INSTRUCTIONS, 4, 4);
    for (uint32_t i = 0; i < ins.n && i < 2048 && !r->bad; i++) {
      fb_tab in = fb_vec_table(r, ins, i);
      uint8_t type = fb_u8(r, in, INSTRUCTION_TYPE, 0);
      pm_scalar(w, in, INSTRUCTION_TYPE, 1);
      fb_tab a = fb_table(r, in, INSTRUCTION_ARGS);
      if (!fb_present(a)) continue;
      switch (type) {
      case INSTR_KERNEL_CALL:
        pm_scalar(w, a, KERNEL_CALL_OP_INDEX, 4);
        pm_items(w, a, KERNEL_CALL_ARGS, 4);
        break;
      case INSTR_DELEGATE_CALL:
        pm_scalar(w, a, DELEGATE_CALL_INDEX, 4);
        pm_items(w, a, DELEGATE_CALL_ARGS, 4);
        break;
      case INSTR_MOVE_CALL:
        pm_scalar(w, a, MOVE_FROM, 4);
        pm_scalar(w, a, MOVE_TO, 4);
        break;
      case INSTR_JUMP_FALSE_CALL:
        pm_scalar(w, a, JUMP_FALSE_COND, 4);
        pm_scalar(w, a, JUMP_FALSE_DEST, 4);
        break;
      case INSTR_FREE_CALL: pm_scalar(w, a, FREE_VALUE, 4); break;
      default: break;
      }
    }
  }
  fb_vec ds = fb_vector(r, plan, PLAN_DELEGATES, 4, 4);
  for (uint32_t i = 0; i < ds.n && i < 64 && !r->bad; i++) {
    fb_tab ref = fb_table(r, fb_vec_table(r, ds, i), DELEGATE_PROCESSED);
    if (!fb_present(ref)) continue;
    pm_scalar(w, ref, DATA_REF_LOCATION, 1);
    pm_scalar(w, ref, DATA_REF_INDEX, 4);
  }
}

static void pm_walk_program(pm_walk *w, const uint8_t *data, size_t size) {
  w->n = 0;
  fb_init(&w->r, data, size);
  fb_tab root = fb_root(&w->r);
  if (w->r.bad || !fb_present(root)) return;
  fb_vec segs = fb_vector(&w->r, root, PROGRAM_SEGMENTS, 4, 4);
  for (uint32_t i = 0; i < segs.n && i < 64 && !w->r.bad; i++) {
    fb_tab s = fb_vec_table(&w->r, segs, i);
    pm_scalar(w, s, SEGMENT_OFFSET, 8);
    pm_scalar(w, s, SEGMENT_SIZE, 8);
  }
  fb_tab cs = fb_table(&w->r, root, PROGRAM_CONSTANT_SEGMENT);
  if (fb_present(cs)) {
    pm_scalar(w, cs, SUBSEGMENT_INDEX, 4);
    pm_items(w, cs, SUBSEGMENT_OFFSETS, 8);
  }
  fb_vec plans = fb_vector(&w->r, root, PROGRAM_EXECUTION_PLAN, 4, 4);
  for (uint32_t i = 0; i < plans.n && i < 16 && !w->r.bad; i++)
    pm_plan(w, fb_vec_table(&w->r, plans, i));
}

static uint32_t pm_rand(uint32_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 17;
  *s ^= *s << 5;
  return *s;
}

static uint64_t pm_value(uint64_t old, unsigned width, uint32_t *s) {
  static const int64_t deltas[] = {-16, -8, -4, -1, 1, 2, 4, 8, 16};
  switch (pm_rand(s) % 8) {
  case 0: return 0;
  case 1: return 1;
  case 2: return (uint64_t)-1;
  case 3: return width == 1 ? 0x7f : width == 4 ? 0x7fffffffu : (uint64_t)INT64_MAX;
  case 4: return width == 1 ? 0x80 : width == 4 ? 0x80000000u : (uint64_t)1 << 40;
  case 5: return old * 2 + 1;
  case 6: return old + (uint64_t)deltas[pm_rand(s) % 9];
  default: return pm_rand(s) % 32;
  }
}

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed) {
  static pm_walk w;
  uint32_t s = seed | 1u;
  if ((pm_rand(&s) & 1) == 0 || size < 16) return LLVMFuzzerMutate(data, size, max_size);
  pm_walk_program(&w, data, size);
  if (w.n == 0) return LLVMFuzzerMutate(data, size, max_size);
  unsigned edits = 1 + (pm_rand(&s) % 4 == 0 ? pm_rand(&s) % 3 : 0);
  for (unsigned k = 0; k < edits; k++) {
    pm_field f = w.f[pm_rand(&s) % w.n];
    uint64_t old = 0;
    memcpy(&old, data + f.at, f.width);
    uint64_t v = pm_value(old, f.width, &s);
    memcpy(data + f.at, &v, f.width); /* little-endian: the low bytes */
  }
  return size;
}

#endif
