/*
 * test_ext_oom.c — every heap allocation outside the method allocator may fail, cleanly.
 *
 * SQLite's "make the Nth allocation fail, for every N" for the parts that allocate from the heap
 * (test_prepare_oom covers the method allocator): this executable interposes malloc, calloc,
 * realloc, posix_memalign, aligned_alloc, mmap and their frees (forwarding to glibc), and for
 * each scenario below runs it once per allocation, making that one fail. Every run must end
 * without a crash with EM_OK (the code recovered) or an error whose message says what failed,
 * and must free everything it allocated (the interposer counts live blocks: its own leak check,
 * since ASan owns malloc and cannot share it; the test is skipped under ASan).
 *
 * Scenarios: em_module_open_ex (file read and mmap) and em_module_open_buffer (what the Python
 * bindings call) of every program in tests/fixtures, preparing every method (EmberCpuBackend
 * init included) and executing it; with `--tokenizer PATH` tokenizer loading; with
 * `--llm PTE TOKENIZER` em_llm_create and a short generation (tests/python/test_ext_oom.py
 * passes generated files).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include "ember/backend_cpu.h"
#include "ember/ember.h"
#include "ember_ext/llm.h"
#include "ember_ext/module.h"
#include "ember_ext/tokenizer.h"
#include "test_util.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
int main(void) {
  printf("test_ext_oom: skipped under a sanitizer (it owns malloc)\n");
  printf("test_ext_oom: 0 passed, 0 failed\n");
  return 0;
}
#else

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);
extern void *__libc_memalign(size_t, size_t);
extern void *__mmap(void *, size_t, int, int, int, off_t);
extern int __munmap(void *, size_t);

static int g_armed;      /* count (and maybe fail) allocations */
static long g_calls;     /* allocation calls since armed */
static long g_fail_at;   /* the call number that fails (1-based); 0: none */
static long g_live;      /* blocks allocated and not yet freed, while armed */
static long g_recovered; /* runs where a failed allocation still ended in EM_OK */

static int fail_now(void) {
  if (!g_armed) return 0;
  return ++g_calls == g_fail_at;
}

void *malloc(size_t n) {
  if (fail_now()) return errno = ENOMEM, NULL;
  void *p = __libc_malloc(n);
  if (p && g_armed) g_live++;
  return p;
}
void *calloc(size_t a, size_t b) {
  if (fail_now()) return errno = ENOMEM, NULL;
  void *p = __libc_calloc(a, b);
  if (p && g_armed) g_live++;
  return p;
}
void *realloc(void *q, size_t n) {
  if (fail_now()) return errno = ENOMEM, NULL;
  void *p = __libc_realloc(q, n);
  if (p && !q && g_armed) g_live++;
  return p;
}
void free(void *p) {
  if (p && g_armed) g_live--;
  __libc_free(p);
}
int posix_memalign(void **out, size_t align, size_t n) {
  if (fail_now()) return ENOMEM;
  *out = __libc_memalign(align, n);
  if (*out && g_armed) g_live++;
  return *out ? 0 : ENOMEM;
}
void *aligned_alloc(size_t align, size_t n) {
  if (fail_now()) return errno = ENOMEM, NULL;
  void *p = __libc_memalign(align, n);
  if (p && g_armed) g_live++;
  return p;
}
void *mmap(void *addr, size_t n, int prot, int flags, int fd, off_t off) {
  if (fail_now()) return errno = ENOMEM, MAP_FAILED;
  void *p = __mmap(addr, n, prot, flags, fd, off);
  if (p != MAP_FAILED && g_armed) g_live++;
  return p;
}
int munmap(void *addr, size_t n) {
  if (g_armed) g_live--;
  return __munmap(addr, n);
}

typedef em_status (*scenario_fn)(const void *arg);

/* Runs `fn` once per allocation it makes, failing that one; returns the allocations counted. */
static long sweep(const char *what, scenario_fn fn, const void *arg) {
  g_armed = 1, g_fail_at = 0, g_calls = 0, g_live = 0;
  em_status st = fn(arg); /* the count, and the run must pass */
  long total = g_calls, live = g_live;
  g_armed = 0;
  CHECK(st == EM_OK, "%s: fails with no allocation failing: %s", what, em_last_error());
  CHECK(live == 0, "%s: %ld blocks left allocated after a clean run", what, live);
  for (long n = 1; n <= total; n++) {
    em_clear_last_error();
    g_armed = 1, g_fail_at = n, g_calls = 0, g_live = 0;
    st = fn(arg);
    live = g_live;
    g_armed = 0;
    CHECK(live == 0, "%s: allocation %ld of %ld failed: %ld blocks leaked (status %s)", what, n,
          total, live, em_status_str(st));
    if (st == EM_OK)
      g_recovered++;
    else
      CHECK(em_last_error()[0] != '\0', "%s: allocation %ld of %ld failed: %s with no message",
            what, n, total, em_status_str(st));
  }
  return total;
}

/* ---- scenarios ---- */

typedef struct module_case {
  const char *path;
  int use_mmap;
  const void *bytes;
  size_t n;
} module_case;

static em_status run_methods(em_module *mod) {
  const em_program *p = em_module_program(mod);
  em_status st = EM_OK;
  for (size_t i = 0; st == EM_OK && i < em_program_method_count(p); i++) {
    em_method *m;
    st = em_module_method(mod, em_program_method_name(p, i), &m);
    if (st != EM_OK) break;
    /* Inputs keep the planned buffers' zeros; the run must not depend on an allocation. */
    em_status ex = em_method_execute(m);
    (void)ex; /* a method may refuse zero inputs (e.g. an index out of range): not our concern */
  }
  return st;
}

static em_status open_file(const void *arg) {
  const module_case *c = arg;
  em_module_options o = {EM_VERIFY_FULL, c->use_mmap, NULL, NULL, 1 << 20, 0};
  em_module *mod = NULL;
  em_status st = em_module_open_ex(c->path, NULL, &o, &mod);
  if (st == EM_OK) st = run_methods(mod);
  em_module_destroy(mod);
  return st;
}

static em_status open_buffer(const void *arg) {
  const module_case *c = arg;
  em_module_options o = {EM_VERIFY_FULL, 0, NULL, NULL, 1 << 20, 0};
  em_module *mod = NULL;
  em_status st = em_module_open_buffer(c->bytes, c->n, NULL, 0, &o, &mod);
  if (st == EM_OK) st = run_methods(mod);
  em_module_destroy(mod);
  return st;
}

static em_status load_tokenizer(const void *arg) {
  em_tokenizer *t = NULL;
  em_status st = em_tokenizer_load((const char *)arg, &t);
  if (st == EM_OK) {
    int32_t ids[64];
    size_t n = 0;
    st = em_tokenizer_encode(t, "hello world", 11, 0, ids, 64, &n);
  }
  em_tokenizer_destroy(t);
  return st;
}

typedef struct llm_case {
  const char *pte, *tok;
} llm_case;

static int count_text(void *ctx, const char *s, size_t n) {
  (void)s;
  *(size_t *)ctx += n;
  return 0;
}

static em_status llm_run(const void *arg) {
  const llm_case *c = arg;
  em_llm_options o;
  memset(&o, 0, sizeof o);
  o.use_mmap = 0;
  em_llm *l = NULL;
  em_status st = em_llm_create(c->pte, c->tok, &o, &l);
  if (st == EM_OK) {
    em_llm_gen_options g = em_llm_gen_defaults();
    g.max_new_tokens = 3;
    size_t chars = 0;
    em_llm_stats stats;
    st = em_llm_generate(l, "ab", &g, count_text, &chars, &stats);
  }
  em_llm_destroy(l);
  return st;
}

static void *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long sz = ftell(f);
  fseek(f, 0, SEEK_SET);
  void *b = __libc_malloc(sz > 0 ? (size_t)sz : 1);
  if (b && fread(b, 1, (size_t)sz, f) != (size_t)sz) {
    __libc_free(b);
    b = NULL;
  }
  fclose(f);
  *n = (size_t)sz;
  return b;
}

int main(int argc, char **argv) {
  em_log_set_level(EM_LOG_FATAL);
  em_register_prim_ops();
  em_register_portable_kernels();
  em_register_quantized_kernels();
  em_register_cpu_backend();
  long allocs = 0;
  int files = 0;
  DIR *d = opendir("tests/fixtures");
  CHECK(d != NULL, "cannot open tests/fixtures (run from the repository root)");
  struct dirent *e;
  while (d && (e = readdir(d))) {
    size_t l = strlen(e->d_name);
    if (l < 5 || strcmp(e->d_name + l - 4, ".pte") != 0) continue;
    char path[1024], what[1100];
    snprintf(path, sizeof path, "tests/fixtures/%s", e->d_name);
    for (int mm = 0; mm < 2; mm++) {
      module_case c = {path, mm, NULL, 0};
      snprintf(what, sizeof what, "em_module_open_ex(%s, %s)", path, mm ? "mmap" : "read");
      allocs += sweep(what, open_file, &c);
    }
    module_case c = {path, 0, NULL, 0};
    c.bytes = slurp(path, &c.n);
    CHECK(c.bytes != NULL, "cannot read %s", path);
    if (c.bytes) {
      snprintf(what, sizeof what, "em_module_open_buffer(%s)", path);
      allocs += sweep(what, open_buffer, &c);
      __libc_free((void *)c.bytes);
    }
    files++;
  }
  if (d) closedir(d);
  CHECK(files >= 5, "only %d fixtures", files);
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--tokenizer") == 0 && i + 1 < argc) {
      char what[1100];
      snprintf(what, sizeof what, "em_tokenizer_load(%s)", argv[i + 1]);
      allocs += sweep(what, load_tokenizer, argv[i + 1]);
      i++;
    } else if (strcmp(argv[i], "--llm") == 0 && i + 2 < argc) {
      llm_case c = {argv[i + 1], argv[i + 2]};
      char what[2100];
      snprintf(what, sizeof what, "em_llm_create(%s, %s) + generate", c.pte, c.tok);
      allocs += sweep(what, llm_run, &c);
      i += 2;
    }
  }
  printf("allocations failed one at a time: %ld (%d fixtures; %ld runs recovered with EM_OK)\n",
         allocs, files, g_recovered);
  return test_summary("test_ext_oom");
}
#endif
