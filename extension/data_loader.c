/*
 * data_loader.c — file and mmap data loaders over whole files.
 *
 * Both give zero-copy ranges of one in-memory image: the mapping, or one
 * aligned heap copy. A range outside the file is EM_ERR_INVALID_ARGUMENT.
 */
#define _DEFAULT_SOURCE /* madvise, MADV_HUGEPAGE */
#define _POSIX_C_SOURCE 200809L
#include "ember_ext/data_loader.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ember/platform.h"

static em_status whole_load(em_data_loader *self, uint64_t offset, uint64_t size,
                            const void **data_out) {
  em_file_loader *fl = (em_file_loader *)self;
  if (offset > fl->size || size > fl->size - offset) {
    EM_LOG_ERROR("load of [%llu, +%llu) is outside the %zu-byte file", (unsigned long long)offset,
                 (unsigned long long)size, fl->size);
    return EM_ERR_INVALID_ARGUMENT;
  }
  *data_out = (const uint8_t *)fl->data + offset;
  return EM_OK;
}

/* Whether the page-aligned bytes [p, p + n) are all zero. */
static int all_zero(const uint8_t *p, size_t n) {
  const uint64_t *w = (const uint64_t *)(const void *)p;
  uint64_t acc = 0;
  for (size_t i = 0; i < n / 8; i++) acc |= w[i];
  return acc == 0;
}

/* The whole pages inside [data, data + size) leave memory: a mapping's are re-read from the file
 * when touched again; a heap copy's only where they are all zero (the kernel hands back zero
 * pages). Either way later reads see the same bytes; the resident set shrinks (a KV cache's
 * initial zeros, copied into the planned arena, no longer count twice). */
static void whole_discard(em_data_loader *self, const void *data, uint64_t size) {
#if defined(MADV_DONTNEED)
  em_file_loader *fl = (em_file_loader *)self;
  long pg = sysconf(_SC_PAGESIZE);
  if (pg <= 0 || !data || (const uint8_t *)data < (const uint8_t *)fl->data) return;
  uintptr_t b = (uintptr_t)data, e = b + (uintptr_t)size, ps = (uintptr_t)pg;
  uintptr_t lo = (b + ps - 1) / ps * ps, hi = e / ps * ps;
  if (hi <= lo || e > (uintptr_t)fl->data + fl->size) return;
  if (fl->mapped) {
    (void)madvise((void *)lo, hi - lo, MADV_DONTNEED);
    return;
  }
  /* runs of zero pages, one madvise each */
  uintptr_t run = 0;
  for (uintptr_t at = lo; at <= hi; at += ps) {
    int zero = at < hi && all_zero((const uint8_t *)at, (size_t)ps);
    if (zero && !run) run = at;
    if (!zero && run) {
      (void)madvise((void *)run, at - run, MADV_DONTNEED);
      run = 0;
    }
  }
#else
  (void)self, (void)data, (void)size;
#endif
}

static void init_base(em_file_loader *fl) {
  fl->base.load = whole_load;
  fl->base.release = NULL;
  fl->base.size = fl->size;
  fl->base.discard = whole_discard;
}

void *em_ext_alloc_large(size_t size) {
  void *p = NULL;
  size_t huge = (size_t)2 << 20;
  if (size < 2 * huge) return posix_memalign(&p, 64, size ? size : 1) == 0 ? p : NULL;
  if (posix_memalign(&p, huge, size) != 0) return NULL;
#if defined(MADV_HUGEPAGE)
  (void)madvise(p, size, MADV_HUGEPAGE); /* a hint: fewer TLB misses while streaming weights */
#endif
  return p;
}

static void *aligned_buffer(size_t size) { return em_ext_alloc_large(size); }

em_status em_copy_loader_open(em_file_loader *fl, const void *data, size_t size) {
  memset(fl, 0, sizeof *fl);
  fl->data = aligned_buffer(size);
  if (!fl->data) {
    EM_LOG_ERROR("copy loader: %zu bytes for the aligned copy of the program", size);
    return EM_ERR_MEMORY_ALLOCATION_FAILED;
  }
  if (size) memcpy(fl->data, data, size);
  fl->size = size;
  init_base(fl);
  return EM_OK;
}

em_status em_file_loader_open(em_file_loader *fl, const char *path) {
  memset(fl, 0, sizeof *fl);
  FILE *f = fopen(path, "rb");
  if (!f) {
    EM_LOG_ERROR("cannot open %s", path);
    return EM_ERR_ACCESS_FAILED;
  }
  em_status st = EM_OK;
  if (fseek(f, 0, SEEK_END) != 0) st = EM_ERR_ACCESS_FAILED;
  long n = st == EM_OK ? ftell(f) : -1;
  if (n < 0 || fseek(f, 0, SEEK_SET) != 0) st = EM_ERR_ACCESS_FAILED;
  if (st == EM_OK) {
    fl->data = aligned_buffer((size_t)n);
    if (!fl->data) {
      EM_LOG_ERROR("file loader: %ld bytes to read %s into", n, path);
      st = EM_ERR_MEMORY_ALLOCATION_FAILED;
    }
  }
  if (st == EM_OK && n > 0 && fread(fl->data, 1, (size_t)n, f) != (size_t)n) {
    EM_LOG_ERROR("short read of %s", path);
    st = EM_ERR_ACCESS_FAILED;
  }
  fclose(f);
  if (st != EM_OK) {
    free(fl->data);
    fl->data = NULL;
    return st;
  }
  fl->size = (size_t)n;
  init_base(fl);
  return EM_OK;
}

em_status em_mmap_loader_open(em_file_loader *fl, const char *path) {
  memset(fl, 0, sizeof *fl);
  int fd = open(path, O_RDONLY);
  if (fd < 0) {
    EM_LOG_ERROR("cannot open %s", path);
    return EM_ERR_ACCESS_FAILED;
  }
  struct stat sb;
  if (fstat(fd, &sb) != 0 || sb.st_size <= 0) {
    close(fd);
    return em_file_loader_open(fl, path);
  }
  /* Private and writable: pages are shared with the page cache until written, and a write (a
   * hostile program whose kernel output is a constant tensor) copies the page instead of
   * faulting on a read-only mapping; the file itself never changes. */
  void *p = mmap(NULL, (size_t)sb.st_size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return em_file_loader_open(fl, path);
  fl->data = p;
  fl->size = (size_t)sb.st_size;
  fl->mapped = 1;
  init_base(fl);
  return EM_OK;
}

void em_file_loader_close(em_file_loader *fl) {
  if (!fl || !fl->data) return;
  if (fl->mapped)
    munmap(fl->data, fl->size);
  else
    free(fl->data);
  fl->data = NULL;
  fl->size = 0;
}
