/*
 * test_vulkan_pte.c — the EmberVulkanBackend fixtures (tests/fixtures/vulkan, made by
 * make_vulkan_fixtures.py) through the C runtime: each <name>.pte (delegated to the Vulkan
 * backend) and its <name>.ref.pte (the same model on the portable kernels) get the same inputs,
 * run three times from one prepare, and their outputs must agree: max |vulkan - portable| <=
 * 1e-4 x max |portable| (f32 storage), 1e-3 for the programs with f16 storage (<name> ending in
 * _f16). Prints a message and passes, checking nothing, when the build has no Vulkan or no Vulkan
 * device exists.
 */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ember/backend_cpu.h"
#include "ember/backend_vulkan.h"
#include "ember/ember.h"
#include "ember_ext/module.h"
#include "try_program.h"

#define DIR_PATH "tests/fixtures/vulkan"
#define CHECK(c, ...)                                                                              \
  do {                                                                                             \
    if (!(c)) {                                                                                    \
      fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #c);                        \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fprintf(stderr, " (%s)\n", em_last_error());                                                 \
      return 1;                                                                                    \
    }                                                                                              \
  } while (0)

/* Opens `path`, prepares forward and fills its inputs (try_fill, seeded by the input index). */
static em_status open_filled(const char *path, em_module **mod, em_method **m) {
  em_status st = em_module_open(path, NULL, mod);
  if (st == EM_OK) st = em_module_method(*mod, "forward", m);
  for (size_t i = 0; st == EM_OK && i < em_method_input_count(*m); i++) {
    em_tensor *t = em_evalue_tensor(em_method_input(*m, i));
    if (!t || t->dtype != EM_DTYPE_F32) return EM_ERR_INVALID_ARGUMENT;
    try_fill(t, (uint32_t)i + 1u);
  }
  return st;
}

/* Compares the outputs of the two methods; returns the largest relative error, or -1. */
static double compare(const em_method *vk, const em_method *ref) {
  if (em_method_output_count(vk) != em_method_output_count(ref)) return -1;
  double worst = 0;
  for (size_t o = 0; o < em_method_output_count(ref); o++) {
    const em_tensor *a = em_evalue_tensor(em_method_output(vk, o));
    const em_tensor *b = em_evalue_tensor(em_method_output(ref, o));
    if (!a || !b || em_tensor_nbytes(a) != em_tensor_nbytes(b) || a->dtype != EM_DTYPE_F32)
      return -1;
    size_t n = em_tensor_nbytes(b) / 4;
    const float *x = a->data, *y = b->data;
    double err = 0, top = 1e-12;
    for (size_t i = 0; i < n; i++) {
      err = fmax(err, fabs((double)x[i] - (double)y[i]));
      top = fmax(top, fabs((double)y[i]));
      if (x[i] != x[i]) return -1; /* NaN */
    }
    worst = fmax(worst, err / top);
  }
  return worst;
}

int main(void) {
  em_log_set_level('F');
  em_register_prim_ops();
  em_register_portable_kernels();
  em_register_cpu_backend();
  em_status st = em_register_vulkan_backend();
  if (st == EM_ERR_NOT_SUPPORTED) {
    printf("test_vulkan_pte: built without Vulkan (EMBER_VULKAN): skipped\n");
    return 0;
  }
  CHECK(st == EM_OK, "em_register_vulkan_backend: %s", em_status_str(st));
  const char *dev = em_vulkan_device_name();
  if (!dev) {
    printf("test_vulkan_pte: no Vulkan device (`make vulkan-deps` installs lavapipe): skipped\n");
    return 0;
  }
  DIR *d = opendir(DIR_PATH);
  CHECK(d != NULL, "cannot open " DIR_PATH " (run from the repository root)");
  int files = 0;
  double worst = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    size_t l = strlen(e->d_name);
    if (l < 9 || strcmp(e->d_name + l - 8, ".ref.pte") != 0) continue;
    char ref_path[512], vk_path[512];
    snprintf(ref_path, sizeof ref_path, DIR_PATH "/%s", e->d_name);
    snprintf(vk_path, sizeof vk_path, DIR_PATH "/%.*s.pte", (int)(l - 8), e->d_name);
    em_module *mv = NULL, *mr = NULL;
    em_method *v = NULL, *r = NULL;
    st = open_filled(vk_path, &mv, &v);
    CHECK(st == EM_OK, "%s: %s", vk_path, em_status_str(st));
    st = open_filled(ref_path, &mr, &r);
    CHECK(st == EM_OK, "%s: %s", ref_path, em_status_str(st));
    CHECK(em_method_execute(r) == EM_OK, "%s executes", ref_path);
    double tol = l > 12 && strncmp(e->d_name + l - 12, "_f16", 4) == 0 ? 1e-3 : 1e-4;
    for (int round = 0; round < 3; round++) { /* one init, repeated executes */
      CHECK(em_method_execute(v) == EM_OK, "%s executes (round %d)", vk_path, round);
      double err = compare(v, r);
      CHECK(err >= 0 && err <= tol, "%s: error %.3g vs the portable kernels", vk_path, err);
      worst = fmax(worst, err);
    }
    em_module_destroy(mv);
    em_module_destroy(mr);
    files++;
  }
  closedir(d);
  CHECK(files >= 3, "only %d fixture pairs in " DIR_PATH, files);
  printf("test_vulkan_pte: %d programs on %s match the portable kernels (max error %.2g)\n", files,
         dev, worst);
  return 0;
}
