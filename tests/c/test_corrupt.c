/*
 * test_corrupt.c — robustness of loading, preparing and executing untrusted
 * files. Thousands of corrupt files are derived from valid ones (truncation
 * at every length, bit and byte flips, oversized counts and offsets written
 * over aligned words, misaligned buffers); each must be rejected with an error
 * or run — never crash, hang or read out of bounds (run under ASan/UBSan too).
 * EmberCpuBackend is registered, so the corrupted delegate blobs of
 * tests/fixtures/delegated.pte reach its init and execute as well.
 */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <string.h>

#include "ember/backend_cpu.h"
#include "test_util.h"
#include "try_program.h"

static uint32_t g_rng = 0x12345678u;
static uint32_t rnd(void) {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 17;
  g_rng ^= g_rng << 5;
  return g_rng;
}

static unsigned corrupt_file(const unsigned char *orig, size_t n, try_stats *s, int rounds) {
  unsigned count = 0;
  unsigned char *buf = malloc(n + 64);
  /* 1. Truncation at every length. */
  for (size_t len = 0; len < n; len++, count++) try_program(orig, len, s);
  /* 2. Single bit flips and random bytes. */
  for (int i = 0; i < rounds; i++, count++) {
    memcpy(buf, orig, n);
    size_t at = rnd() % n;
    if (i & 1)
      buf[at] ^= (unsigned char)(1u << (rnd() % 8));
    else
      buf[at] = (unsigned char)rnd();
    try_program(buf, n, s);
  }
  /* 3. Oversized counts and offsets over aligned u32 words. */
  static const uint32_t evil[] = {0xffffffffu, 0x7fffffffu, 0x80000000u, 0xfffffff0u, 0x10000u,
                                  1u << 20,    0,           1,           2,           3};
  for (int i = 0; i < rounds; i++, count++) {
    memcpy(buf, orig, n);
    size_t at = (rnd() % (n / 4)) * 4;
    uint32_t v = evil[rnd() % (sizeof evil / sizeof evil[0])];
    if (rnd() % 3 == 0) v = (uint32_t)n + (rnd() % 64) - 32;
    memcpy(buf + at, &v, 4);
    try_program(buf, n, s);
  }
  /* 4. Several simultaneous corruptions. */
  for (int i = 0; i < rounds / 2; i++, count++) {
    memcpy(buf, orig, n);
    for (int k = 0; k < 8; k++) buf[rnd() % n] = (unsigned char)rnd();
    try_program(buf, n, s);
  }
  /* 5. A misaligned buffer must be refused, not read. */
  memcpy(buf + 1, orig, n);
  {
    em_buffer_loader bl;
    uint8_t mem[1024];
    em_allocator a;
    em_allocator_init(&a, mem, sizeof mem);
    em_program *p;
    em_status st = em_program_load(em_buffer_loader_init(&bl, buf + 1, n), EM_VERIFY_FULL, &a, &p);
    CHECK(st != EM_OK, "misaligned program was accepted");
    count++;
  }
  free(buf);
  return count;
}

static int run_dir(const char *dir, int rounds, unsigned *total, try_stats *s) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  struct dirent *e;
  int files = 0;
  while ((e = readdir(d))) {
    size_t l = strlen(e->d_name);
    if (l < 5 ||
        (strcmp(e->d_name + l - 4, ".pte") != 0 && strcmp(e->d_name + l - 5, ".bpte") != 0))
      continue;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    size_t n = 0;
    unsigned char *data = read_file(path, &n);
    if (!data || n < 16) {
      free(data);
      continue;
    }
    try_stats one = {0, 0, 0, 0};
    try_program(data, n, &one);
    CHECK(one.loaded == 1 || strstr(e->d_name, ".bpte"), "valid file %s did not load: %s", path,
          em_last_error());
    unsigned c = corrupt_file(data, n, s, rounds);
    *total += c;
    files++;
    free(data);
  }
  closedir(d);
  return files;
}

/* Inputs the fuzzer once crashed on, kept as regressions. */
static void regressions(try_stats *s) {
  /* "ET1\xff": an almost-identifier; the error message printed 4 bytes with %.4s past the end. */
  static const unsigned char short_et[] = {0x24, 0, 0, 0, 0x45, 0x54, 0x31, 0xff};
  try_program(short_et, sizeof short_et, s);
}

int main(void) {
  em_log_set_level(EM_LOG_FATAL);
  em_register_prim_ops();
  em_register_portable_kernels();
  em_register_quantized_kernels();
  em_register_cpu_backend(); /* delegated.pte's EmberCpuBackend blobs are corrupted too */
  const char *rounds_env = getenv("EMBER_CORRUPT_ROUNDS");
  int rounds = rounds_env ? atoi(rounds_env) : 1500;
  const char *seed_env = getenv("EMBER_CORRUPT_SEED");
  if (seed_env && atoi(seed_env) != 0) g_rng = (uint32_t)atoi(seed_env);
  unsigned total = 0;
  try_stats s = {0, 0, 0, 0};
  regressions(&s);
  /* The stock-ExecuTorch files (`make fixtures`): ExecuTorch's own layouts, legacy ones, a
   * delegated program and a BundledProgram. */
  int files = run_dir(EMBER_FIXTURES, rounds, &total, &s);
  CHECK(files >= 6, "%d files in %s: run `make fixtures` first", files, EMBER_FIXTURES);
  files += run_dir("tests/fixtures", rounds, &total, &s);
  CHECK(files >= 3, "expected fixture files, found %d", files);
  CHECK(total >= 1000, "only %u corrupt variants", total);
  printf("corrupt variants: %u from %d files; loaded %u, rejected %u, prepared %u, executed %u\n",
         total, files, s.loaded, s.rejected, s.prepared, s.executed);
  return test_summary("test_corrupt");
}
