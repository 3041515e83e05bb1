/*
 * ops.c — `ember ops`: operator coverage of this build.
 *
 * Compares the registered kernels with ExecuTorch's portable library (209
 * kernels) and with the Core ATen operator set (functional names; a Core ATen
 * op counts as covered when any registered kernel implements one of its
 * out-variant overloads), and lists the dtypes each kernel accepts.
 */
#include <stdio.h>
#include <string.h>

#include "ember/ember.h"

static const char *const k_et_portable[] = {
#include "et_portable_ops.inc"
};

static const char *const k_core_aten[] = {
#include "core_aten_ops.inc"
};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* True when a registered kernel name starts with `base` followed by '.' or end. */
static int covers(const char *functional) {
  char base[128];
  const char *dot = strchr(functional + 6, '.');
  size_t n = dot ? (size_t)(dot - functional) : strlen(functional);
  if (n >= sizeof base) return 0;
  memcpy(base, functional, n);
  base[n] = '\0';
  for (size_t i = 0; i < em_kernel_count(); i++) {
    const char *k = em_kernel_at(i)->name;
    size_t kl = strlen(k);
    /* "aten::add" covers "aten::add.out"; "aten::view" also by "aten::view_copy.out". */
    if (strncmp(k, base, n) == 0 && (k[n] == '.' || k[n] == '\0' || k[n] == '_')) return 1;
    (void)kl;
  }
  return 0;
}

static void dtype_list(uint32_t mask, char *buf, size_t len) {
  size_t n = 0;
  buf[0] = '\0';
  for (int d = 0; d < EM_DTYPE_COUNT; d++)
    if (mask & EM_DTYPE_BIT(d)) {
      int w = snprintf(buf + n, len - n, "%s%s", n ? "," : "", em_dtype_name(d));
      if (w < 0 || (size_t)w >= len - n) break;
      n += (size_t)w;
    }
}

int cmd_ops(int argc, char **argv) {
  int all = argc > 1 && strcmp(argv[1], "--all") == 0;
  size_t have_et = 0, have_core = 0;
  printf("Registered kernels: %zu\n", em_kernel_count());
  if (all) {
    for (size_t i = 0; i < em_kernel_count(); i++) {
      char dts[256];
      dtype_list(em_kernel_at(i)->dtypes, dts, sizeof dts);
      printf("  %-56s %s\n", em_kernel_at(i)->name, dts);
    }
  }
  printf("\nExecuTorch portable kernels missing here:\n");
  for (size_t i = 0; i < COUNT(k_et_portable); i++) {
    if (em_find_kernel(k_et_portable[i]))
      have_et++;
    else
      printf("  %s\n", k_et_portable[i]);
  }
  for (size_t i = 0; i < COUNT(k_core_aten); i++) have_core += (size_t)covers(k_core_aten[i]);
  printf("\nCoverage of ExecuTorch's portable library: %zu / %zu (%.1f%%)\n", have_et,
         COUNT(k_et_portable), 100.0 * (double)have_et / (double)COUNT(k_et_portable));
  printf("Coverage of Core ATen (functional ops with a kernel): %zu / %zu (%.1f%%)\n", have_core,
         COUNT(k_core_aten), 100.0 * (double)have_core / (double)COUNT(k_core_aten));
  return 0;
}
