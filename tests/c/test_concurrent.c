/*
 * test_concurrent.c — two methods of one program execute at the same time on two threads.
 *
 * For every fixture in tests/fixtures (portable, delegated to EmberCpuBackend, control flow,
 * dynamic shapes), each method is prepared twice over the same loaded program (each instance
 * with its own memory and its own two-thread pool), run once alone for a reference, then both
 * instances run 25 times concurrently: every output must equal the reference bit for bit. The
 * ThreadSanitizer build (`make test-tsan`) runs this test to show the runtime shares no
 * unsynchronised state between methods.
 */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ember/backend_cpu.h"
#include "ember/ember.h"
#include "ember_ext/module.h"
#include "test_util.h"

#define ROUNDS     25
#define MAX_ARENAS 8
#define MAX_OUT    16

typedef struct instance {
  em_method *m;
  em_threadpool *pool;
  uint8_t *mem, *temp, *arenas[MAX_ARENAS];
  void *inputs[32];
  em_tensor in_t[32]; /* the inputs, set again before every execute (planned input memory is
                         reused by the method once the input has been read) */
  size_t n_in;
  em_allocator method_alloc, temp_alloc;
  int mismatches;
  em_status failed;
  void *ref[MAX_OUT];
  size_t ref_n[MAX_OUT];
} instance;

static void fill(em_tensor *t, uint32_t seed) {
  uint8_t *d = t->data;
  size_t n = em_tensor_nbytes(t);
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1103515245u + 12345u;
    d[i] = (uint8_t)(seed >> 24 & 0x3f); /* small values of any dtype; no NaN payloads */
  }
}

static void instance_free(instance *in) {
  for (size_t k = 0; k < 32; k++) free(in->inputs[k]);
  for (size_t k = 0; k < MAX_ARENAS; k++) free(in->arenas[k]);
  for (size_t k = 0; k < MAX_OUT; k++) free(in->ref[k]);
  free(in->mem);
  free(in->temp);
  if (in->pool) em_threadpool_destroy(in->pool);
  memset(in, 0, sizeof *in);
}

/* Prepares `name` of `p` into `in` (its own memory and pool) with inputs from `seed`. */
static em_status instance_prepare(instance *in, const em_program *p, const char *name) {
  memset(in, 0, sizeof *in);
  em_method_meta meta;
  em_status st = em_program_method_meta(p, name, &meta);
  if (st != EM_OK || meta.n_arenas > MAX_ARENAS) return EM_ERR_NOT_SUPPORTED;
  uint64_t sizes[MAX_ARENAS] = {0};
  for (size_t i = 0; i < meta.n_arenas; i++) {
    sizes[i] = em_method_meta_arena_size(&meta, i);
    if (sizes[i] > ((uint64_t)64 << 20)) return EM_ERR_NOT_SUPPORTED;
    if (!(in->arenas[i] = calloc(1, sizes[i] ? (size_t)sizes[i] : 1)))
      return EM_ERR_MEMORY_ALLOCATION_FAILED;
  }
  in->pool = em_threadpool_create(2);
  const size_t temp_n = (size_t)16 << 20;
  in->temp = malloc(temp_n);
  if (!in->temp) return EM_ERR_MEMORY_ALLOCATION_FAILED;
  em_allocator_init(&in->temp_alloc, in->temp, temp_n);
  for (size_t mem_n = (size_t)1 << 20; mem_n <= ((size_t)256 << 20); mem_n *= 4) {
    free(in->mem);
    if (!(in->mem = malloc(mem_n))) return EM_ERR_MEMORY_ALLOCATION_FAILED;
    em_allocator_init(&in->method_alloc, in->mem, mem_n);
    em_method_config cfg = {&in->method_alloc,
                            &in->temp_alloc,
                            in->arenas,
                            sizes,
                            meta.n_arenas,
                            NULL,
                            in->pool,
                            NULL,
                            0};
    st = em_method_prepare(p, name, &cfg, &in->m);
    if (st != EM_ERR_MEMORY_ALLOCATION_FAILED) break;
  }
  if (st != EM_OK) return st;
  for (size_t k = 0; k < em_method_input_count(in->m) && k < 32; k++) {
    const em_evalue *v = em_method_input(in->m, k);
    if (v->tag != EM_TAG_TENSOR) continue;
    em_tensor t = *v->u.tensor;
    if (!(in->inputs[k] = calloc(1, em_tensor_nbytes(&t) + 16)))
      return EM_ERR_MEMORY_ALLOCATION_FAILED;
    t.data = in->inputs[k];
    fill(&t, 7u + (uint32_t)k);
    in->in_t[k] = t;
    in->n_in = k + 1;
  }
  return EM_OK;
}

/* Sets the inputs and executes once. */
static em_status instance_run(instance *in) {
  for (size_t k = 0; k < in->n_in; k++) {
    if (!in->inputs[k]) continue;
    em_status st = em_method_set_input_tensor(in->m, k, &in->in_t[k]);
    if (st != EM_OK) return st;
  }
  return em_method_execute(in->m);
}

/* Output k of `in` as bytes (NULL for a non-tensor output). */
static const void *output_bytes(const instance *in, size_t k, size_t *n) {
  const em_evalue *v = em_method_output(in->m, k);
  if (!v || v->tag != EM_TAG_TENSOR) return NULL;
  *n = em_tensor_nbytes(v->u.tensor);
  return v->u.tensor->data;
}

static void *run_rounds(void *arg) {
  instance *in = arg;
  for (int r = 0; r < ROUNDS; r++) {
    em_status st = instance_run(in);
    if (st != EM_OK) {
      in->failed = st;
      return NULL;
    }
    for (size_t k = 0; k < em_method_output_count(in->m) && k < MAX_OUT; k++) {
      size_t n = 0;
      const void *got = output_bytes(in, k, &n);
      if (got && (n != in->ref_n[k] || memcmp(got, in->ref[k], n) != 0)) in->mismatches++;
    }
  }
  return NULL;
}

/* Runs both instances of every method of `path` concurrently; returns the methods run. */
static int run_file(const char *path) {
  em_module *mod;
  if (em_module_open(path, NULL, &mod) != EM_OK) return 0;
  const em_program *p = em_module_program(mod);
  int ran = 0;
  for (size_t i = 0; i < em_program_method_count(p); i++) {
    const char *name = em_program_method_name(p, i);
    instance a, b;
    em_status sa = instance_prepare(&a, p, name), sb = instance_prepare(&b, p, name);
    if (sa == EM_OK && sb == EM_OK && instance_run(&a) == EM_OK) {
      for (size_t k = 0; k < em_method_output_count(a.m) && k < MAX_OUT; k++) {
        size_t n = 0;
        const void *ref = output_bytes(&a, k, &n);
        if (!ref) continue;
        a.ref[k] = malloc(n ? n : 1), b.ref[k] = malloc(n ? n : 1);
        memcpy(a.ref[k], ref, n), memcpy(b.ref[k], ref, n);
        a.ref_n[k] = b.ref_n[k] = n;
      }
      /* A method with state (a KV cache, a counter) gives other outputs on a second run: such
         methods are left out (their rounds cannot be compared). */
      int stateful = instance_run(&a) != EM_OK;
      for (size_t k = 0; !stateful && k < em_method_output_count(a.m) && k < MAX_OUT; k++) {
        size_t n = 0;
        const void *got = output_bytes(&a, k, &n);
        stateful = got && memcmp(got, a.ref[k], n) != 0;
      }
      if (!stateful) {
        pthread_t ta, tb;
        CHECK(pthread_create(&ta, NULL, run_rounds, &a) == 0, "pthread_create");
        CHECK(pthread_create(&tb, NULL, run_rounds, &b) == 0, "pthread_create");
        pthread_join(ta, NULL);
        pthread_join(tb, NULL);
        CHECK(a.failed == EM_OK && b.failed == EM_OK, "%s/%s: a concurrent execute failed (%d, %d)",
              path, name, (int)a.failed, (int)b.failed);
        CHECK(a.mismatches == 0 && b.mismatches == 0,
              "%s/%s: %d + %d outputs differ from the reference when run concurrently", path, name,
              a.mismatches, b.mismatches);
        ran++;
      }
    }
    instance_free(&a);
    instance_free(&b);
  }
  em_module_destroy(mod);
  return ran;
}

int main(void) {
  em_log_set_level(EM_LOG_FATAL);
  em_register_prim_ops();
  em_register_portable_kernels();
  em_register_quantized_kernels();
  em_register_cpu_backend();
  DIR *d = opendir("tests/fixtures");
  CHECK(d != NULL, "cannot open tests/fixtures (run from the repository root)");
  int ran = 0, delegated = 0;
  struct dirent *e;
  while (d && (e = readdir(d))) {
    size_t l = strlen(e->d_name);
    if (l < 5 || strcmp(e->d_name + l - 4, ".pte") != 0) continue;
    char path[1024];
    snprintf(path, sizeof path, "tests/fixtures/%s", e->d_name);
    int n = run_file(path);
    ran += n;
    if (n && strcmp(e->d_name, "delegated.pte") == 0) delegated++;
  }
  if (d) closedir(d);
  CHECK(ran >= 4, "only %d methods ran concurrently", ran);
  CHECK(delegated == 1, "delegated.pte (EmberCpuBackend) did not run");
  printf("methods run concurrently: %d\n", ran);
  return test_summary("test_concurrent");
}
