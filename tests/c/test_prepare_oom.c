/*
 * test_prepare_oom.c — em_method_prepare fails cleanly at every point where the
 * method allocator can run out. For every method of every program in
 * tests/fixtures (portable and EmberCpuBackend-delegated), it measures the
 * method-allocator bytes a successful prepare uses, then prepares again with
 * every smaller allocator (8-byte steps): each attempt must return
 * EM_ERR_MEMORY_ALLOCATION_FAILED without crashing (the sanitizer build checks
 * the cleanup path: em_method_destroy on a half-built method, delegates that
 * were and were not initialized), and a last prepare at the measured size must
 * succeed. This is SQLite's "make the Nth allocation fail for every N" for a
 * bump allocator: its size decides which allocation fails. The CPU backend runs with its
 * AVX-512 configuration here (EMBER_CPU_ISA=avx512f unless set): the AMX one adds a single
 * multi-megabyte workspace allocation that 8-byte steps would sweep for minutes.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "ember/backend_cpu.h"
#include "ember/ember.h"
#include "ember_ext/cpu_env.h"
#include "test_util.h"

#define MAX_ARENAS       8
#define BIG_METHOD_BYTES ((size_t)4 << 20)

typedef struct arenas {
  uint8_t *mem[MAX_ARENAS];
  uint64_t sizes[MAX_ARENAS];
  size_t n;
} arenas;

static em_status prepare_with(const em_program *p, const char *name, arenas *a, uint8_t *mem,
                              size_t mem_n, size_t *used_out) {
  static uint8_t temp[1 << 16];
  em_allocator ma, ta;
  em_allocator_init(&ma, mem, mem_n);
  em_allocator_init(&ta, temp, sizeof temp);
  em_method_config cfg = {&ma, &ta, a->mem, a->sizes, a->n, NULL, NULL, NULL, 0};
  em_method *m = NULL;
  em_status st = em_method_prepare(p, name, &cfg, &m);
  if (st == EM_OK) {
    CHECK(m != NULL, "%s: prepared without a method", name);
    em_method_destroy(m);
  } else {
    CHECK(m == NULL, "%s: failed prepare returned a method", name);
  }
  *used_out = ma.used;
  return st;
}

/* Returns the number of methods swept (0 when the program cannot be prepared here). */
static int sweep_method(const char *path, const em_program *p, const char *name) {
  em_method_meta meta;
  if (em_program_method_meta(p, name, &meta) != EM_OK || meta.n_arenas > MAX_ARENAS) return 0;
  arenas a = {{0}, {0}, meta.n_arenas};
  int swept = 0;
  for (size_t i = 0; i < a.n; i++) {
    a.sizes[i] = em_method_meta_arena_size(&meta, i);
    a.mem[i] = calloc(1, a.sizes[i] ? (size_t)a.sizes[i] : 1);
    if (!a.mem[i]) goto done;
  }
  uint8_t *mem = malloc(BIG_METHOD_BYTES);
  if (!mem) goto done;
  size_t need = 0;
  if (prepare_with(p, name, &a, mem, BIG_METHOD_BYTES, &need) == EM_OK) {
    for (size_t n = 0; n < need; n += 8) {
      size_t used;
      em_status st = prepare_with(p, name, &a, mem, n, &used);
      CHECK(st == EM_ERR_MEMORY_ALLOCATION_FAILED, "%s '%s': %zu of %zu method bytes gave %s", path,
            name, n, need, em_status_str(st));
    }
    size_t used;
    CHECK(prepare_with(p, name, &a, mem, need, &used) == EM_OK, "%s '%s': %zu bytes not enough",
          path, name, need);
    swept = 1;
  }
  free(mem);
done:
  for (size_t i = 0; i < a.n; i++) free(a.mem[i]);
  return swept;
}

static int sweep_file(const char *path, int *delegated) {
  size_t n = 0;
  unsigned char *bytes = read_file(path, &n);
  if (!bytes) return 0;
  em_buffer_loader bl;
  em_data_loader *loader = em_buffer_loader_init(&bl, bytes, n);
  static uint8_t prog_mem[1 << 16];
  em_allocator pa;
  em_allocator_init(&pa, prog_mem, sizeof prog_mem);
  em_program *p = NULL;
  int swept = 0;
  if (em_program_load(loader, EM_VERIFY_FULL, &pa, &p) == EM_OK) {
    for (size_t i = 0; i < em_program_method_count(p); i++)
      swept += sweep_method(path, p, em_program_method_name(p, i));
    if (swept && memmem(bytes, n, EM_CPU_BACKEND_NAME, strlen(EM_CPU_BACKEND_NAME))) ++*delegated;
  }
  free(bytes);
  return swept;
}

int main(void) {
  /* No AMX workspace (see the banner), unless EMBER_CPU_ISA says otherwise. */
  if (!getenv("EMBER_CPU_ISA")) {
    em_cpu_backend_options fma = {"avx512f", false, false, 0, 0, 0};
    (void)em_cpu_backend_configure(&fma); /* refused on a CPU without AVX-512: the best stays */
  } else {
    (void)em_cpu_backend_configure_from_env();
  }
  em_log_set_level(EM_LOG_FATAL);
  em_register_prim_ops();
  em_register_portable_kernels();
  em_register_quantized_kernels();
  em_register_cpu_backend();
  DIR *d = opendir("tests/fixtures");
  CHECK(d != NULL, "cannot open tests/fixtures (run from the repository root)");
  int swept = 0, delegated = 0;
  struct dirent *e;
  while (d && (e = readdir(d))) {
    size_t l = strlen(e->d_name);
    if (l < 5 || strcmp(e->d_name + l - 4, ".pte") != 0) continue;
    char path[1024];
    snprintf(path, sizeof path, "tests/fixtures/%s", e->d_name);
    swept += sweep_file(path, &delegated);
  }
  if (d) closedir(d);
  CHECK(swept >= 4, "only %d methods swept", swept);
  CHECK(delegated >= 1, "no EmberCpuBackend program among the fixtures");
  printf("methods swept: %d (%d delegated programs)\n", swept, delegated);
  return test_summary("test_prepare_oom");
}
