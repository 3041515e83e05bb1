/*
 * test_loader_discard.c — the file loaders' discard hook (include/ember/loader.h): after
 * discarding any range, every byte of the file still reads as it was (mapped: re-read from the
 * file; heap copy: only all-zero pages dropped), and the heap copy's whole zero pages inside the
 * range have left memory (mincore) while its other pages stay. Then a program whose method has
 * a planned tensor with initial state (a KV cache) runs with identical outputs from a mapped
 * file, a heap copy and caller memory (no discard), on every fixture that has one.
 */
#define _DEFAULT_SOURCE
#include <dirent.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ember/ember.h"
#include "ember_ext/data_loader.h"
#include "ember_ext/module.h"
#include "test_util.h"

#define PAGES 12

/* Page i's content: zero for the pages in `zero` (a bit mask), else a pattern. */
static void fill(uint8_t *buf, size_t pg, unsigned zero) {
  for (size_t i = 0; i < PAGES; i++)
    for (size_t b = 0; b < pg; b++)
      buf[i * pg + b] = (zero >> i) & 1 ? 0 : (uint8_t)(1 + (i * 31 + b) % 251);
  /* a zero page with one late nonzero byte must not count as zero */
  if (!((zero >> 9) & 1)) {
    memset(buf + 9 * pg, 0, pg);
    buf[9 * pg + pg - 1] = 7;
  }
}

static int resident(const void *p, size_t pg) {
  unsigned char v = 0;
  if (mincore((void *)((uintptr_t)p / pg * pg), pg, &v) != 0) return -1;
  return v & 1;
}

static void loaders(const char *path, size_t pg) {
  /* pages 2-5 and 7 zero; 9 nearly zero; the rest patterned */
  unsigned zero = (1u << 2) | (1u << 3) | (1u << 4) | (1u << 5) | (1u << 7);
  uint8_t *want = malloc(PAGES * pg);
  fill(want, pg, zero);
  FILE *f = fopen(path, "wb");
  CHECK(f && fwrite(want, 1, PAGES * pg, f) == PAGES * pg, "writing %s", path);
  if (f) fclose(f);
  for (int mapped = 0; mapped < 2; mapped++) {
    em_file_loader fl;
    em_status st = mapped ? em_mmap_loader_open(&fl, path) : em_file_loader_open(&fl, path);
    CHECK(st == EM_OK && fl.base.discard, "open (mapped %d)", mapped);
    if (st != EM_OK) continue;
    const void *all;
    CHECK(fl.base.load(&fl.base, 0, PAGES * pg, &all) == EM_OK, "load");
    const uint8_t *d = all;
    /* a range from inside page 1 to inside page 10: whole pages 2..9 may go */
    fl.base.discard(&fl.base, d + pg + 100, 9 * pg - 200);
    /* a range inside one page: nothing to drop */
    fl.base.discard(&fl.base, d + 11 * pg + 8, 64);
    if (!mapped && fl.size >= PAGES * pg && ((uintptr_t)d % pg) == 0) {
      for (size_t i = 0; i < PAGES; i++) {
        int want_res = !(i >= 2 && i <= 5) && i != 7;
        CHECK(resident(d + i * pg, pg) == want_res, "heap copy page %zu resident %d, want %d", i,
              resident(d + i * pg, pg), want_res);
      }
    }
    CHECK(memcmp(d, want, PAGES * pg) == 0, "bytes changed by discard (mapped %d)", mapped);
    em_file_loader_close(&fl);
  }
  free(want);
  remove(path);
}

/* Output 0 of `method` after two runs (the second sees the state the first left) from `mod`. */
static int run_twice(em_module *mod, const char *method, float *out, size_t cap, size_t *n) {
  em_method *m = NULL;
  if (em_module_method(mod, method, &m) != EM_OK) return 0;
  for (int r = 0; r < 2; r++)
    if (em_method_execute(m) != EM_OK) return 0;
  const em_evalue *v = em_method_output(m, 0);
  if (!v || v->tag != EM_TAG_TENSOR || v->u.tensor->dtype != EM_DTYPE_F32) return 0;
  *n = (size_t)v->u.tensor->numel < cap ? (size_t)v->u.tensor->numel : cap;
  memcpy(out, v->u.tensor->data, *n * sizeof(float));
  return 1;
}

static void programs(const char *dir) {
  DIR *dp = opendir(dir);
  if (!dp) return;
  struct dirent *e;
  int compared = 0;
  static float a[4096], b[4096], c[4096];
  while ((e = readdir(dp))) {
    size_t len = strlen(e->d_name);
    if (len < 5 || strcmp(e->d_name + len - 4, ".pte") != 0) continue;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    size_t nbytes = 0;
    unsigned char *bytes = read_file(path, &nbytes);
    if (!bytes) continue;
    em_module_options o[2] = {{EM_VERIFY_FULL, 1, NULL, NULL, 0, 0},
                              {EM_VERIFY_FULL, 0, NULL, NULL, 0, 0}};
    em_module *mm = NULL, *mh = NULL, *mb = NULL;
    size_t na = 0, nb = 0, nc = 0;
    if (em_module_open_ex(path, NULL, &o[0], &mm) == EM_OK &&
        em_module_open_ex(path, NULL, &o[1], &mh) == EM_OK &&
        em_module_open_buffer(bytes, nbytes, NULL, 0, NULL, &mb) == EM_OK &&
        run_twice(mm, "forward", a, 4096, &na)) {
      CHECK(run_twice(mh, "forward", b, 4096, &nb) && run_twice(mb, "forward", c, 4096, &nc), "%s",
            path);
      CHECK(na == nb && na == nc && memcmp(a, b, na * 4) == 0 && memcmp(a, c, na * 4) == 0,
            "%s: outputs differ between mapped, heap and buffer loads", path);
      compared++;
    }
    em_module_destroy(mm);
    em_module_destroy(mh);
    em_module_destroy(mb);
    free(bytes);
  }
  closedir(dp);
  CHECK(compared > 0, "no program with a 'forward' method ran in %s", dir);
}

int main(int argc, char **argv) {
  em_log_set_level(EM_LOG_FATAL);
  em_register_prim_ops();
  em_register_portable_kernels();
  em_register_quantized_kernels();
  long pg = sysconf(_SC_PAGESIZE);
  char tmp[] = "/tmp/ember_discard_XXXXXX";
  int fd = mkstemp(tmp);
  CHECK(fd >= 0 && pg > 0, "mkstemp");
  if (fd >= 0) {
    close(fd);
    loaders(tmp, (size_t)pg);
  }
  programs(argc > 1 ? argv[1] : "tests/fixtures/alias");
  return test_summary("test_loader_discard");
}
