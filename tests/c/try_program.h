/*
 * try_program.h — loads untrusted bytes, prepares every method and executes
 * it (arenas up to 8 MiB; inputs of the sizes the file declares, upper bounds
 * for dynamic ones, filled with small values of their dtype). Shared by the corruption test and
 * the libFuzzer target: the only requirement is "no crash, no hang, no
 * out-of-bounds access"; any em_status is an acceptable outcome.
 */
#ifndef EMBER_TESTS_TRY_PROGRAM_H
#define EMBER_TESTS_TRY_PROGRAM_H

#include <stdlib.h>
#include <string.h>

#include "ember/ember.h"

#define TRY_ARENA_CAP ((uint64_t)8 << 20)

typedef struct try_stats {
  unsigned loaded, prepared, executed, rejected;
} try_stats;

/* Executions per prepared method (the fuzz target asks for 2: state carried between calls). */
static unsigned try_exec_rounds = 1;

/* Inputs get small values of their dtype (not only zeros): both branches of a cond, non-zero
 * indices, KV-cache positions — in range or not, the kernels must check. */
static inline void try_fill(em_tensor *t, uint32_t seed) {
  uint8_t *d = (uint8_t *)t->data;
  size_t es = em_dtype_size(t->dtype), n = em_tensor_nbytes(t) / (es ? es : 1);
  uint32_t s = seed * 2654435761u + 1u;
  for (size_t i = 0; i < n; i++) {
    s ^= s << 13;
    s ^= s >> 17;
    s ^= s << 5;
    int v = (int)(s % 9u) - 1; /* -1 .. 7 */
    switch (t->dtype) {
    case EM_DTYPE_F32: ((float *)(void *)d)[i] = (float)v * 0.5f; break;
    case EM_DTYPE_F64: ((double *)(void *)d)[i] = (double)v * 0.5; break;
    case EM_DTYPE_I64: ((int64_t *)(void *)d)[i] = v; break;
    case EM_DTYPE_I32: ((int32_t *)(void *)d)[i] = v; break;
    case EM_DTYPE_BOOL: d[i] = (uint8_t)(v & 1); break;
    default: memset(d + i * es, (int)(s >> 24), es); break;
    }
  }
}

static inline void try_method(const em_program *p, const char *name, try_stats *s) {
  em_method_meta meta;
  if (em_program_method_meta(p, name, &meta) != EM_OK) return;
  if (meta.n_arenas > 8) return;
  uint8_t *arenas[8] = {0};
  uint64_t sizes[8] = {0};
  size_t mem_n = 1 << 20, temp_n = 1 << 20;
  uint8_t *mem = malloc(mem_n), *temp = malloc(temp_n);
  int ok = mem && temp;
  for (size_t i = 0; ok && i < meta.n_arenas; i++) {
    sizes[i] = em_method_meta_arena_size(&meta, i);
    if (sizes[i] > TRY_ARENA_CAP)
      ok = 0;
    else if (!(arenas[i] = calloc(1, sizes[i] ? (size_t)sizes[i] : 1)))
      ok = 0;
  }
  if (ok) {
    em_allocator ma, ta;
    em_allocator_init(&ma, mem, mem_n);
    em_allocator_init(&ta, temp, temp_n);
    em_method_config cfg = {&ma, &ta, arenas, sizes, meta.n_arenas, NULL, NULL, NULL, 100000};
    em_method *m = NULL;
    if (em_method_prepare(p, name, &cfg, &m) == EM_OK) {
      s->prepared++;
      /* Unplanned inputs get a zeroed buffer of their full size. */
      void *bufs[16] = {0};
      for (size_t i = 0; i < em_method_input_count(m) && i < 16; i++) {
        const em_evalue *v = em_method_input(m, i);
        if (v->tag != EM_TAG_TENSOR) {
          em_method_set_input(m, i, v);
          continue;
        }
        em_tensor t = *v->u.tensor;
        size_t nb = em_tensor_nbytes(&t);
        if (nb > TRY_ARENA_CAP) continue;
        bufs[i] = calloc(1, nb + 16);
        t.data = bufs[i];
        if (bufs[i]) try_fill(&t, (uint32_t)i + (uint32_t)nb);
        em_method_set_input_tensor(m, i, &t);
      }
      for (unsigned k = 0; k < try_exec_rounds; k++)
        if (em_method_execute(m) == EM_OK) s->executed++;
      em_method_destroy(m);
      for (size_t i = 0; i < 16; i++) free(bufs[i]);
    }
  }
  for (size_t i = 0; i < meta.n_arenas; i++) free(arenas[i]);
  free(mem);
  free(temp);
}

/* Runs everything on a private, exactly sized, 16-aligned copy of `data`. */
static inline void try_program(const uint8_t *data, size_t n, try_stats *s) {
  uint8_t *copy = NULL;
  if (posix_memalign((void **)&copy, 16, n ? n : 1) != 0) return;
  if (n) memcpy(copy, data, n);
  em_buffer_loader bl;
  em_data_loader *loader = em_buffer_loader_init(&bl, copy, n);
  uint8_t prog_mem[1024];
  em_allocator pa;
  em_allocator_init(&pa, prog_mem, sizeof prog_mem);
  em_program *p = NULL;
  if (em_program_load(loader, EM_VERIFY_FULL, &pa, &p) == EM_OK) {
    s->loaded++;
    for (size_t i = 0; i < em_program_method_count(p) && i < 8; i++) {
      const char *name = em_program_method_name(p, i);
      if (name) try_method(p, name, s);
    }
  } else {
    s->rejected++;
  }
  free(copy);
}

#endif
