/*
 * run_fixture.c — runs a .pte on the single-file build (ember.c + ember.h from
 * tools/amalgamate.py), through the core API only: em_program_load, em_method_prepare with
 * caller-owned memory, em_method_execute. Inputs are generated exactly as `ember run` makes them
 * (tools/ember/main.c, fill_generated: seed i + 1), so tests/python/test_amalgamation.py can
 * compare the outputs with the regular build's `ember run --output-dir`.
 *
 *     cc -std=c11 -O1 -I build/amalgamation run_fixture.c build/amalgamation/ember.c -lm -lpthread
 *     ./a.out MODEL.pte OUTDIR [METHOD] [--module]
 *
 * With --module the method comes from em_module_open / em_module_method (extension/module.c,
 * which allocates for it) instead.
 * Writes OUTDIR/output_<i>.bin (a tensor's bytes) and prints one line per output:
 * "output <i>: tensor <dtype> <d0>x<d1>..." or "output <i>: int|double|bool <value>".
 * Exit status: 0 ok, 1 error, 3 the program needs an operator or a backend this build lacks.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ember.h"

static void fill_generated(em_tensor *t, uint32_t seed) {
  uint32_t s = seed * 2654435761u + 12345u;
  for (int64_t i = 0; i < t->numel; i++) {
    s = s * 1664525u + 1013904223u;
    float f = (float)((s >> 8) & 0xffff) / 32768.0f - 1.0f;
    switch (t->dtype) {
    case EM_DTYPE_F32: ((float *)t->data)[i] = f; break;
    case EM_DTYPE_F64: ((double *)t->data)[i] = f; break;
    case EM_DTYPE_BOOL: ((uint8_t *)t->data)[i] = 1; break;
    default:
      memset((uint8_t *)t->data + (size_t)i * em_dtype_size(t->dtype), 0, em_dtype_size(t->dtype));
    }
  }
}

static int fail(const char *what, em_status st) {
  fprintf(stderr, "run_fixture: %s: %s (%s)\n", what, em_status_str(st), em_last_error());
  return st == EM_ERR_OPERATOR_MISSING || st == EM_ERR_NOT_FOUND ? 3 : 1;
}

static int write_output(const char *dir, size_t i, const em_evalue *v) {
  if (v->tag == EM_TAG_INT) return printf("output %zu: int %lld\n", i, (long long)v->u.i) < 0;
  if (v->tag == EM_TAG_DOUBLE) return printf("output %zu: double %.17g\n", i, v->u.d) < 0;
  if (v->tag == EM_TAG_BOOL) return printf("output %zu: bool %d\n", i, v->u.b ? 1 : 0) < 0;
  const em_tensor *t = em_evalue_tensor(v);
  if (!t) return printf("output %zu: tag %u\n", i, v->tag) < 0;
  printf("output %zu: tensor %s ", i, em_dtype_name(t->dtype));
  for (int32_t d = 0; d < t->dim; d++) printf("%s%lld", d ? "x" : "", (long long)t->sizes[d]);
  printf("\n");
  char path[1024];
  snprintf(path, sizeof path, "%s/output_%zu.bin", dir, i);
  FILE *f = fopen(path, "wb");
  if (!f) return 1;
  size_t n = em_tensor_nbytes(t);
  int bad = n && fwrite(t->data, 1, n, f) != n;
  return fclose(f) != 0 || bad;
}

int main(int argc, char **argv) {
  int use_module = argc > 3 && strcmp(argv[argc - 1], "--module") == 0;
  if (use_module) argc--;
  if (argc < 3) {
    fprintf(stderr, "usage: run_fixture MODEL.pte OUTDIR [METHOD] [--module]\n");
    return 2;
  }
  const char *method = argc > 3 ? argv[3] : "forward";
  em_register_prim_ops();
  em_register_portable_kernels();
  size_t prog_bytes = (size_t)16 << 20, method_bytes = (size_t)64 << 20, temp_bytes = 64 << 20;
  uint8_t *prog_mem = malloc(prog_bytes), *method_mem = malloc(method_bytes);
  uint8_t *temp_mem = malloc(temp_bytes);
  uint8_t *arenas[64] = {0};
  uint64_t arena_sizes[64] = {0};
  void *inputs[256] = {0};
  em_allocator prog_alloc, method_alloc, temp_alloc;
  em_allocator_init(&prog_alloc, prog_mem, prog_bytes);
  em_allocator_init(&method_alloc, method_mem, method_bytes);
  em_allocator_init(&temp_alloc, temp_mem, temp_bytes);
  em_file_loader fl;
  memset(&fl, 0, sizeof fl);
  em_program *prog = NULL;
  em_method *m = NULL;
  em_module *mod = NULL;
  em_method_meta meta;
  int rc = 1;
  em_status st;
  if (use_module) {
    if ((st = em_module_open(argv[1], NULL, &mod)) != EM_OK) {
      rc = fail(argv[1], st);
      goto done;
    }
    if ((st = em_module_method(mod, method, &m)) != EM_OK) {
      m = NULL;
      rc = fail(method, st);
      goto done;
    }
    goto prepared;
  }
  st = em_mmap_loader_open(&fl, argv[1]);
  if (st != EM_OK) {
    rc = fail(argv[1], st);
    goto done;
  }
  if ((st = em_program_load(&fl.base, EM_VERIFY_FULL, &prog_alloc, &prog)) != EM_OK) {
    rc = fail("load", st);
    goto done;
  }
  if ((st = em_program_method_meta(prog, method, &meta)) != EM_OK) {
    rc = fail(method, st);
    goto done;
  }
  if (meta.n_arenas > 64) goto done;
  for (size_t i = 0; i < meta.n_arenas; i++) {
    arena_sizes[i] = em_method_meta_arena_size(&meta, i);
    arenas[i] = calloc(1, (size_t)arena_sizes[i] + 64);
  }
  em_method_config cfg = {.method_alloc = &method_alloc,
                          .temp_alloc = &temp_alloc,
                          .arenas = arenas,
                          .arena_sizes = arena_sizes,
                          .n_arenas = meta.n_arenas};
  if ((st = em_method_prepare(prog, method, &cfg, &m)) != EM_OK) {
    rc = fail("prepare", st);
    goto done;
  }
prepared:;
  size_t n_in = em_method_input_count(m);
  for (size_t i = 0; i < n_in && i < 256; i++) {
    const em_evalue *in = em_method_input(m, i);
    if (in->tag != EM_TAG_TENSOR) {
      st = em_method_set_input(m, i, in);
    } else {
      em_tensor t = *in->u.tensor;
      inputs[i] = calloc(1, em_tensor_nbytes(&t) + 64);
      t.data = inputs[i];
      fill_generated(&t, (uint32_t)i + 1);
      st = em_method_set_input_tensor(m, i, &t);
    }
    if (st != EM_OK) {
      rc = fail("set_input", st);
      goto done;
    }
  }
  if ((st = em_method_execute(m)) != EM_OK) {
    rc = fail("execute", st);
    goto done;
  }
  rc = 0;
  for (size_t i = 0; i < em_method_output_count(m); i++)
    rc |= write_output(argv[2], i, em_method_output(m, i));
done:
  if (mod)
    em_module_destroy(mod); /* owns its methods */
  else
    em_method_destroy(m);
  em_file_loader_close(&fl);
  for (size_t i = 0; i < 64; i++) free(arenas[i]);
  for (size_t i = 0; i < 256; i++) free(inputs[i]);
  free(prog_mem);
  free(method_mem);
  free(temp_mem);
  return rc;
}
