/*
 * ember_bench.c — times one Ember program the way the peers are timed.
 *
 *   ember_bench MODEL.pte INPUT.bin OUTPUT.bin THREADS WARMUP RUNS
 *
 * Opens the file (mmap, full verification), prepares "forward" (load time =
 * both), binds input 0 from raw bytes, runs WARMUP then RUNS times, writes
 * output 0's raw bytes (the input is bound before every run, inside the timing) and prints one JSON
 * line: load_ms, per-run ms, peak RSS. Built by bench/run.py against the static library (no Python
 * in the process, so its RSS is the runtime's own).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

#include "ember/backend_cpu.h"
#include "ember/backend_vulkan.h"
#include "ember/ember.h"
#include "ember_ext/cpu_env.h"
#include "ember_ext/module.h"

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static void *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  void *buf = NULL;
  if (len < 0 || posix_memalign(&buf, 64, (size_t)len + 64) != 0) return fclose(f), NULL;
  *n = fread(buf, 1, (size_t)len, f);
  fclose(f);
  return buf;
}

int main(int argc, char **argv) {
  if (argc != 7) {
    fprintf(stderr, "usage: ember_bench MODEL.pte INPUT.bin OUTPUT.bin THREADS WARMUP RUNS\n");
    return 2;
  }
  int threads = atoi(argv[4]), warmup = atoi(argv[5]), runs = atoi(argv[6]);
  em_register_prim_ops();
  em_register_portable_kernels();
  em_register_cpu_backend();
  (void)em_register_vulkan_backend();        /* EM_ERR_NOT_SUPPORTED in a build without Vulkan */
  (void)em_cpu_backend_configure_from_env(); /* EMBER_CPU_ISA / _NO_FUSE / _PROFILE */
  em_threadpool *pool = threads > 1 ? em_threadpool_create(threads) : NULL;
  em_module_options mo = {EM_VERIFY_FULL, 1, pool, NULL, 0};
  em_module *mod = NULL;
  em_method *m = NULL;
  double t0 = now_ms();
  em_status st = em_module_open_ex(argv[1], NULL, &mo, &mod);
  if (st == EM_OK) st = em_module_method(mod, "forward", &m);
  double load_ms = now_ms() - t0;
  if (st != EM_OK) {
    fprintf(stderr, "ember_bench: load failed: %s\n", em_status_str(st));
    return 1;
  }
  size_t in_n = 0;
  void *in = slurp(argv[2], &in_n);
  const em_evalue *iv = em_method_input(m, 0);
  if (!in || !iv || iv->tag != EM_TAG_TENSOR || em_tensor_nbytes(iv->u.tensor) != in_n) {
    fprintf(stderr, "ember_bench: input %s does not match input 0\n", argv[2]);
    return 1;
  }
  em_tensor t = *iv->u.tensor;
  t.data = in;
  if ((st = em_method_set_input_tensor(m, 0, &t)) != EM_OK) {
    fprintf(stderr, "ember_bench: set_input: %s\n", em_status_str(st));
    return 1;
  }
  double *times = calloc((size_t)(runs > 0 ? runs : 1), sizeof *times);
  for (int i = 0; i < warmup + runs; i++) {
    double s = now_ms();
    /* Bound on every run (as the peers are handed their input on every call): read in place
       where the method lets it, copied into planned memory otherwise. */
    if ((st = em_method_bind_input_tensor(m, 0, &t)) != EM_OK ||
        (st = em_method_execute(m)) != EM_OK) {
      fprintf(stderr, "ember_bench: execute: %s\n", em_status_str(st));
      return 1;
    }
    if (i >= warmup) times[i - warmup] = now_ms() - s;
  }
  const em_tensor *y = em_evalue_tensor(em_method_output(m, 0));
  FILE *f = fopen(argv[3], "wb");
  if (f && y) fwrite(y->data, 1, em_tensor_nbytes(y), f);
  if (f) fclose(f);
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  printf("{\"load_ms\": %.3f, \"rss_mb\": %.1f, \"isa\": \"%s\", \"times_ms\": [", load_ms,
         ru.ru_maxrss / 1024.0, em_cpu_backend_isa());
  for (int i = 0; i < runs; i++) printf("%s%.4f", i ? ", " : "", times[i]);
  printf("]}\n");
  em_module_destroy(mod);
  em_threadpool_destroy(pool);
  free(times);
  free(in);
  return 0;
}
