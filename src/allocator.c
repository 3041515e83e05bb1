/*
 * allocator.c — the bump allocator (em_allocator).
 *
 * Invariant: base + used never passes base + size. Alignment is measured on
 * the absolute address, so a buffer with any alignment works.
 */
#include "ember/allocator.h"

void em_allocator_init(em_allocator *a, void *buf, size_t size) {
  a->base = (uint8_t *)buf;
  a->size = buf ? size : 0;
  a->used = 0;
  a->peak = 0;
}

void *em_allocator_alloc(em_allocator *a, size_t n, size_t align) {
  if (!a || !a->base) return NULL;
  if (align == 0) align = 16;
  if (align & (align - 1)) return NULL;
  uintptr_t start = (uintptr_t)a->base + a->used;
  uintptr_t aligned = (start + (align - 1)) & ~(uintptr_t)(align - 1);
  size_t pad = (size_t)(aligned - start);
  if (pad > a->size - a->used || n > a->size - a->used - pad) return NULL;
  a->used += pad + n;
  if (a->used > a->peak) a->peak = a->used;
  return (void *)aligned;
}

void em_allocator_reset(em_allocator *a) {
  if (a) a->used = 0;
}
