/*
 * test_util.h — a minimal test harness for C tests: CHECK macros and a
 * summary line ("N passed, N failed") that CI reads.
 */
#ifndef EMBER_TESTS_TEST_UTIL_H
#define EMBER_TESTS_TEST_UTIL_H

#include <stdio.h>
#include <stdlib.h>

static int g_pass, g_fail;

#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (cond) {                                                                                    \
      g_pass++;                                                                                    \
    } else {                                                                                       \
      g_fail++;                                                                                    \
      fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);                     \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fprintf(stderr, "\n");                                                                       \
    }                                                                                              \
  } while (0)

static inline int test_summary(const char *name) {
  printf("%s: %d passed, %d failed\n", name, g_pass, g_fail);
  return g_fail ? 1 : 0;
}

/* Reads a whole file into a 16-aligned heap buffer; NULL if missing. */
static inline unsigned char *read_file(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  void *buf = NULL;
  if (len < 0 || posix_memalign(&buf, 64, (size_t)len + 1) != 0) {
    fclose(f);
    return NULL;
  }
  *n = fread(buf, 1, (size_t)len, f);
  fclose(f);
  return buf;
}

#endif
