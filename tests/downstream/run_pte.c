/*
 * run_pte.c — a downstream program using an installed Ember: loads a .pte, fills every float
 * input tensor with x[i] = (i % 7) * 0.25 - 0.5, runs `forward` and prints every float output
 * element, one per line. tests/python/test_downstream.py builds it with find_package(Ember)
 * and with pkg-config and compares the printed values with eager PyTorch.
 */
#include <stdio.h>
#include <stdlib.h>

#include "ember/backend_cpu.h"
#include "ember/ember.h"
#include "ember_ext/module.h"

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: run_pte MODEL.pte\n");
    return 2;
  }
  em_register_prim_ops();
  em_register_portable_kernels();
  em_register_quantized_kernels();
  em_register_cpu_backend();
  em_module *mod;
  em_method *m;
  if (em_module_open(argv[1], NULL, &mod) != EM_OK) {
    fprintf(stderr, "open: %s\n", em_last_error());
    return 1;
  }
  if (em_module_method(mod, "forward", &m) != EM_OK) {
    fprintf(stderr, "method: %s\n", em_last_error());
    return 1;
  }
  void *bufs[16] = {0};
  for (size_t k = 0; k < em_method_input_count(m) && k < 16; k++) {
    const em_tensor *in = em_evalue_tensor(em_method_input(m, k));
    if (!in || in->dtype != EM_DTYPE_F32) continue;
    em_tensor t = *in;
    float *d = malloc(em_tensor_nbytes(&t) + 1);
    for (int64_t i = 0; i < t.numel; i++) d[i] = (float)(i % 7) * 0.25f - 0.5f;
    t.data = d;
    bufs[k] = d;
    if (em_method_set_input_tensor(m, k, &t) != EM_OK) {
      fprintf(stderr, "input %zu: %s\n", k, em_last_error());
      return 1;
    }
  }
  if (em_method_execute(m) != EM_OK) {
    fprintf(stderr, "execute: %s\n", em_last_error());
    return 1;
  }
  for (size_t k = 0; k < em_method_output_count(m); k++) {
    const em_tensor *y = em_evalue_tensor(em_method_output(m, k));
    if (!y || y->dtype != EM_DTYPE_F32) continue;
    const float *v = y->data;
    for (int64_t i = 0; i < y->numel; i++) printf("%.9g\n", v[i]);
  }
  for (size_t k = 0; k < 16; k++) free(bufs[k]);
  em_module_destroy(mod);
  return 0;
}
