/*
 * allocator.h — the bump allocator every runtime structure comes from.
 *
 * The runtime never calls malloc. The caller hands it memory as em_allocator
 * instances over buffers it owns: one for the method (lives as long as the
 * method), one for temporary kernel scratch (reset after every instruction).
 *
 *     static uint8_t method_mem[64 * 1024];
 *     em_allocator a;
 *     em_allocator_init(&a, method_mem, sizeof method_mem);
 *     float *x = em_allocator_alloc(&a, 16 * sizeof(float), 16);
 *     if (!x) { ... out of memory ... }
 */
#ifndef EMBER_ALLOCATOR_H
#define EMBER_ALLOCATOR_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct em_allocator {
  uint8_t *base;
  size_t size;
  size_t used;
  size_t peak; /* the most ever used, for sizing reports */
} em_allocator;

/* Initializes `a` over `buf[0..size)`. The buffer is borrowed and must outlive `a`. */
void em_allocator_init(em_allocator *a, void *buf, size_t size);

/*
 * Returns `n` bytes aligned to `align` (a power of two; 0 means 16), or NULL
 * when the buffer is exhausted. Zero-byte requests return a valid pointer.
 */
void *em_allocator_alloc(em_allocator *a, size_t n, size_t align);

/* Forgets every allocation (the memory is reused from the start). */
void em_allocator_reset(em_allocator *a);

#ifdef __cplusplus
}
#endif

#endif /* EMBER_ALLOCATOR_H */
