/*
 * module.c — em_module: a program plus lazily prepared methods, with all the
 * memory (method allocator, temp allocator, planned arenas) taken from the
 * heap. The method allocator starts small and doubles until preparation fits.
 * Every allocation failure names what was being allocated and its size; with
 * em_module_options.max_memory_bytes, a method's planned arenas, scratch and
 * method memory are checked against that budget before anything is allocated.
 */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS, madvise */
#define _POSIX_C_SOURCE 200809L
#include "ember_ext/module.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "ember_ext/data_loader.h"

#define MAX_METHODS 64

/* Logs what could not be allocated, with its size, and returns `st`. */
#define MEM_FAIL(st, ...)                                                                          \
  do {                                                                                             \
    EM_LOG_ERROR(__VA_ARGS__);                                                                     \
    return (st);                                                                                   \
  } while (0)

typedef struct module_method {
  char *name;
  em_method *method;
  void *method_mem;
  size_t method_bytes;
  void *temp_mem;
  em_allocator method_alloc;
  em_allocator temp_alloc;
  uint8_t **arenas;
  uint64_t *arena_sizes;
  size_t n_arenas;
  size_t arena_bytes;
} module_method;

/* Bytes this module holds for prepared methods (arenas, scratch, method memory). */
static uint64_t module_bytes(const struct em_module *m);

struct em_module {
  em_file_loader pte;
  em_file_loader ptd;
  int has_ptd;
  em_allocator prog_alloc;
  uint8_t prog_mem[1024];
  em_allocator ptd_alloc;
  uint8_t ptd_mem[1024];
  const em_program *program;
  em_data_map *external;
  em_module_options opts;
  module_method methods[MAX_METHODS];
  size_t n_methods;
};

/* A bundled program (.bpte) holds a whole .pte: re-point the loader at it (aligned copy). */
static em_status unwrap_bundled(em_file_loader *fl) {
  size_t off = 0, n = 0;
  if (em_bundled_program_find(fl->data, fl->size, &off, &n) != EM_OK) return EM_OK;
  em_file_loader inner;
  em_status st = em_copy_loader_open(&inner, (const uint8_t *)fl->data + off, n);
  if (st != EM_OK) return st;
  em_file_loader_close(fl);
  *fl = inner;
  return EM_OK;
}

static em_status finish_open(em_module *m, const em_module_options *opts) {
  if (opts) m->opts = *opts;
  em_status ust = unwrap_bundled(&m->pte);
  if (ust != EM_OK) return ust;
  if (!m->opts.temp_bytes) m->opts.temp_bytes = (size_t)64 << 20;
  em_allocator_init(&m->prog_alloc, m->prog_mem, sizeof m->prog_mem);
  em_program *p = NULL;
  em_status st = em_program_load(&m->pte.base, m->opts.verification, &m->prog_alloc, &p);
  if (st != EM_OK) return st;
  m->program = p;
  if (m->has_ptd) {
    em_allocator_init(&m->ptd_alloc, m->ptd_mem, sizeof m->ptd_mem);
    st = em_data_map_load(&m->ptd.base, &m->ptd_alloc, &m->external);
  }
  return st;
}

em_status em_module_open_ex(const char *pte_path, const char *ptd_path,
                            const em_module_options *opts, em_module **out) {
  if (!pte_path || !out) return EM_ERR_INVALID_ARGUMENT;
  *out = NULL;
  em_module *m = calloc(1, sizeof *m);
  if (!m)
    MEM_FAIL(EM_ERR_MEMORY_ALLOCATION_FAILED, "module: %zu bytes for the module do not fit",
             sizeof *m);
  int use_mmap = !opts || opts->use_mmap;
  em_status st =
      use_mmap ? em_mmap_loader_open(&m->pte, pte_path) : em_file_loader_open(&m->pte, pte_path);
  if (st == EM_OK && ptd_path) {
    m->has_ptd = 1;
    st = use_mmap ? em_mmap_loader_open(&m->ptd, ptd_path) : em_file_loader_open(&m->ptd, ptd_path);
  }
  if (st == EM_OK) st = finish_open(m, opts);
  if (st != EM_OK) {
    em_module_destroy(m);
    return st;
  }
  *out = m;
  return EM_OK;
}

em_status em_module_open(const char *pte_path, const char *ptd_path, em_module **out) {
  return em_module_open_ex(pte_path, ptd_path, NULL, out);
}

em_status em_module_open_buffer(const void *pte, size_t pte_n, const void *ptd, size_t ptd_n,
                                const em_module_options *opts, em_module **out) {
  if (!pte || !out) return EM_ERR_INVALID_ARGUMENT;
  *out = NULL;
  em_module *m = calloc(1, sizeof *m);
  if (!m)
    MEM_FAIL(EM_ERR_MEMORY_ALLOCATION_FAILED, "module: %zu bytes for the module do not fit",
             sizeof *m);
  em_status st = em_copy_loader_open(&m->pte, pte, pte_n);
  if (st == EM_OK && ptd) {
    m->has_ptd = 1;
    st = em_copy_loader_open(&m->ptd, ptd, ptd_n);
  }
  if (st == EM_OK) st = finish_open(m, opts);
  if (st != EM_OK) {
    em_module_destroy(m);
    return st;
  }
  *out = m;
  return EM_OK;
}

const em_program *em_module_program(const em_module *m) { return m ? m->program : NULL; }

/*
 * Planned arenas start zeroed. Large ones (and a large method allocator) are anonymous mappings,
 * zero pages the kernel fills on first touch: a file that plans gigabytes it never uses costs
 * address space, not a memset of gigabytes at prepare (a 2 GiB arena took 6.5 s to prepare, found
 * by tools/mutation_sweep.py).
 */
#define ARENA_MMAP_MIN ((size_t)4 << 20)

static void *arena_alloc(size_t n) {
  if (n < ARENA_MMAP_MIN) {
    void *p = NULL;
    if (posix_memalign(&p, 64, n ? n : 64) != 0) return NULL;
    memset(p, 0, n ? n : 64);
    return p;
  }
  void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return NULL;
#if defined(MADV_HUGEPAGE)
  (void)madvise(p, n, MADV_HUGEPAGE); /* a hint: fewer TLB misses on large activations */
#endif
  return p;
}

static void arena_free(void *p, uint64_t n) {
  if (!p) return;
  if (n < ARENA_MMAP_MIN)
    free(p);
  else
    munmap(p, (size_t)n);
}

static void free_method(module_method *mm) {
  em_method_destroy(mm->method);
  for (size_t i = 0; mm->arenas && mm->arena_sizes && i < mm->n_arenas; i++)
    arena_free(mm->arenas[i], mm->arena_sizes[i]);
  free(mm->arenas);
  free(mm->arena_sizes);
  arena_free(mm->method_mem, mm->method_bytes);
  free(mm->temp_mem);
  free(mm->name);
  memset(mm, 0, sizeof *mm);
}

static em_status alloc_arenas(module_method *mm, const em_method_meta *meta, const char *name) {
  mm->n_arenas = meta->n_arenas;
  mm->arenas = calloc(mm->n_arenas ? mm->n_arenas : 1, sizeof *mm->arenas);
  mm->arena_sizes = calloc(mm->n_arenas ? mm->n_arenas : 1, sizeof *mm->arena_sizes);
  if (!mm->arenas || !mm->arena_sizes)
    MEM_FAIL(EM_ERR_MEMORY_ALLOCATION_FAILED, "method '%s': the table of %zu planned arenas", name,
             mm->n_arenas);
  for (size_t i = 0; i < mm->n_arenas; i++) {
    uint64_t n = em_method_meta_arena_size(meta, i);
    void *p = n <= SIZE_MAX - 64 ? arena_alloc((size_t)n) : NULL;
    if (!p)
      MEM_FAIL(EM_ERR_MEMORY_ALLOCATION_FAILED,
               "method '%s': planned arena %zu of %llu bytes could not be allocated", name, i + 1,
               (unsigned long long)n);
    mm->arenas[i] = p;
    mm->arena_sizes[i] = n;
    mm->arena_bytes += (size_t)n;
  }
  return EM_OK;
}

static em_status prepare_method(em_module *m, module_method *mm, const char *name) {
  em_method_meta meta;
  em_status st = em_program_method_meta(m->program, name, &meta);
  if (st != EM_OK) return st;
  /* The budget: planned arenas + scratch + the first method allocator, before allocating. */
  uint64_t budget = m->opts.max_memory_bytes, held = module_bytes(m);
  uint64_t want = (uint64_t)m->opts.temp_bytes + 16384;
  for (size_t i = 0; i < meta.n_arenas; i++) {
    uint64_t n = em_method_meta_arena_size(&meta, i);
    if (budget && (n > budget || held + want > budget - n))
      MEM_FAIL(EM_ERR_MEMORY_ALLOCATION_FAILED,
               "method '%s': planned arena %zu of %llu bytes exceeds the memory budget "
               "(%llu bytes; %llu go to scratch, method memory and other arenas)",
               name, i + 1, (unsigned long long)n, (unsigned long long)budget,
               (unsigned long long)(held + want));
    want += n;
  }
  if (budget && held + want > budget)
    MEM_FAIL(EM_ERR_MEMORY_ALLOCATION_FAILED,
             "method '%s': %llu bytes (arenas, %zu bytes of scratch, method memory) exceed the "
             "memory budget of %llu bytes (%llu already held)",
             name, (unsigned long long)want, m->opts.temp_bytes, (unsigned long long)budget,
             (unsigned long long)held);
  size_t len = strlen(name);
  mm->name = malloc(len + 1);
  if (!mm->name)
    MEM_FAIL(EM_ERR_MEMORY_ALLOCATION_FAILED, "method '%s': %zu bytes for its name", name, len + 1);
  memcpy(mm->name, name, len + 1);
  st = alloc_arenas(mm, &meta, name);
  if (st != EM_OK) return st;
  mm->temp_mem = em_ext_alloc_large(m->opts.temp_bytes);
  if (!mm->temp_mem)
    MEM_FAIL(EM_ERR_MEMORY_ALLOCATION_FAILED, "method '%s': %zu bytes of scratch (temp allocator)",
             name, m->opts.temp_bytes);
  em_allocator_init(&mm->temp_alloc, mm->temp_mem, m->opts.temp_bytes);
  /* Grow the method allocator until preparation fits; the failed attempts stay quiet (on this
     thread only: em_log_quiet, not the process-wide log level). */
  for (size_t size = 16384;; size *= 2) {
    arena_free(mm->method_mem, mm->method_bytes);
    mm->method_mem = NULL;
    if (budget && held + mm->arena_bytes + m->opts.temp_bytes + size > budget) {
      MEM_FAIL(EM_ERR_MEMORY_ALLOCATION_FAILED,
               "method '%s': %zu bytes of method memory (method allocator) exceed the memory "
               "budget of %llu bytes",
               name, size, (unsigned long long)budget);
    }
    mm->method_mem = arena_alloc(size); /* large: a lazy mapping, like the arenas */
    if (!mm->method_mem)
      MEM_FAIL(EM_ERR_MEMORY_ALLOCATION_FAILED,
               "method '%s': %zu bytes of method memory (method allocator)", name, size);
    mm->method_bytes = size;
    em_allocator_init(&mm->method_alloc, mm->method_mem, size);
    em_method_config cfg = {&mm->method_alloc, &mm->temp_alloc,  mm->arenas,
                            mm->arena_sizes,   mm->n_arenas,     m->external,
                            m->opts.pool,      m->opts.profiler, 0};
    int last_try = size > ((size_t)1 << 31);
    if (!last_try) em_log_quiet(1);
    st = em_method_prepare(m->program, name, &cfg, &mm->method);
    if (!last_try) em_log_quiet(0);
    if (st != EM_ERR_MEMORY_ALLOCATION_FAILED || last_try) {
      /* A real error was silenced if it happened on a quiet try: report it now. */
      if (st != EM_OK && !last_try) EM_LOG_ERROR("%s", em_last_error());
      return st;
    }
  }
}

em_status em_module_method(em_module *m, const char *name, em_method **out) {
  if (!m || !name || !out) return EM_ERR_INVALID_ARGUMENT;
  for (size_t i = 0; i < m->n_methods; i++)
    if (strcmp(m->methods[i].name, name) == 0) {
      *out = m->methods[i].method;
      return EM_OK;
    }
  if (m->n_methods == MAX_METHODS) return EM_ERR_OUT_OF_RESOURCES;
  module_method *mm = &m->methods[m->n_methods];
  em_status st = prepare_method(m, mm, name);
  if (st != EM_OK) {
    free_method(mm);
    return st;
  }
  m->n_methods++;
  *out = mm->method;
  return EM_OK;
}

size_t em_module_method_bytes(const em_module *m, const char *name) {
  for (size_t i = 0; m && i < m->n_methods; i++)
    if (strcmp(m->methods[i].name, name) == 0)
      return m->methods[i].method_alloc.used + m->methods[i].arena_bytes;
  return 0;
}

static uint64_t module_bytes(const em_module *m) {
  uint64_t n = 0;
  for (size_t i = 0; i < m->n_methods; i++) {
    const module_method *mm = &m->methods[i];
    n += mm->arena_bytes + mm->method_bytes + (mm->temp_mem ? m->opts.temp_bytes : 0);
  }
  return n;
}

void em_module_destroy(em_module *m) {
  if (!m) return;
  for (size_t i = 0; i < m->n_methods; i++) free_method(&m->methods[i]);
  em_file_loader_close(&m->ptd);
  em_file_loader_close(&m->pte);
  free(m);
}
