/*
 * fuzz_loader.c — libFuzzer target: load, verify, prepare and execute
 * arbitrary bytes as a program. Built by `make test-fuzz` with clang.
 */
#define _POSIX_C_SOURCE 200809L
#include <stddef.h>
#include <stdint.h>

#include "../c/try_program.h"
#include "ember/backend_cpu.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static int ready;
  if (!ready) {
    em_log_set_level(EM_LOG_FATAL);
    em_register_prim_ops();
    em_register_portable_kernels();
    em_register_quantized_kernels();
    em_register_cpu_backend();
    ready = 1;
  }
  try_stats s = {0, 0, 0, 0};
  try_program(data, size, &s);
  return 0;
}
