/*
 * test_no_alloc.c — execute never allocates. This executable interposes
 * malloc/calloc/realloc/free/posix_memalign (forwarding to glibc) and fails
 * if any is called between the start and the end of em_method_execute, for
 * every fixture that runs. (Not built under sanitizers, which own malloc.)
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <stddef.h>
#include <string.h>

#include "ember_ext/module.h"
#include "test_util.h"

#if defined(__SANITIZE_ADDRESS__)
int main(void) {
  printf("test_no_alloc: skipped under AddressSanitizer (it owns malloc)\n");
  printf("test_no_alloc: 0 passed, 0 failed\n");
  return 0;
}
#else

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);
extern void *__libc_memalign(size_t, size_t);

static volatile int g_watch;
static volatile int g_calls;

void *malloc(size_t n) {
  if (g_watch) g_calls++;
  return __libc_malloc(n);
}
void *calloc(size_t a, size_t b) {
  if (g_watch) g_calls++;
  return __libc_calloc(a, b);
}
void *realloc(void *p, size_t n) {
  if (g_watch) g_calls++;
  return __libc_realloc(p, n);
}
void free(void *p) {
  if (g_watch && p) g_calls++;
  __libc_free(p);
}
int posix_memalign(void **out, size_t align, size_t n) {
  if (g_watch) g_calls++;
  *out = __libc_memalign(align, n);
  return *out ? 0 : 12;
}

static int run_file(const char *path) {
  em_module *mod;
  if (em_module_open(path, NULL, &mod) != EM_OK) return 0;
  const em_program *p = em_module_program(mod);
  int ran = 0;
  for (size_t i = 0; i < em_program_method_count(p); i++) {
    em_method *m;
    if (em_module_method(mod, em_program_method_name(p, i), &m) != EM_OK) continue;
    void *bufs[32] = {0};
    for (size_t k = 0; k < em_method_input_count(m) && k < 32; k++) {
      const em_evalue *v = em_method_input(m, k);
      if (v->tag != EM_TAG_TENSOR) {
        em_method_set_input(m, k, v);
        continue;
      }
      em_tensor t = *v->u.tensor;
      bufs[k] = calloc(1, em_tensor_nbytes(&t) + 16);
      t.data = bufs[k];
      em_method_set_input_tensor(m, k, &t);
    }
    for (int rep = 0; rep < 3; rep++) {
      g_calls = 0;
      g_watch = 1;
      em_status st = em_method_execute(m);
      g_watch = 0;
      if (st != EM_OK) break;
      CHECK(g_calls == 0, "%s: execute made %d allocation calls", path, g_calls);
      ran++;
    }
    for (size_t k = 0; k < 32; k++) free(bufs[k]);
  }
  em_module_destroy(mod);
  return ran;
}

static int run_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  struct dirent *e;
  int ran = 0;
  while ((e = readdir(d))) {
    size_t l = strlen(e->d_name);
    if (l < 5 || strcmp(e->d_name + l - 4, ".pte") != 0) continue;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    ran += run_file(path);
  }
  closedir(d);
  return ran;
}

int main(void) {
  em_log_set_level(EM_LOG_FATAL);
  em_register_prim_ops();
  em_register_portable_kernels();
  em_register_quantized_kernels();
  int et = run_dir(EMBER_FIXTURES); /* stock-ExecuTorch files (`make fixtures`) */
  CHECK(et >= 15, "only %d executions of the files in %s (run `make fixtures`)", et,
        EMBER_FIXTURES);
  int ran = et + run_dir("tests/fixtures");
  CHECK(ran >= 3, "only %d executions ran", ran);
  printf("executions watched: %d\n", ran);
  return test_summary("test_no_alloc");
}
#endif
