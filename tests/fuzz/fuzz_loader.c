/*
 * fuzz_loader.c — libFuzzer target: load, verify, prepare and execute every method of arbitrary
 * bytes as a program, twice (state carried between calls), with inputs of the sizes the file
 * declares filled with small values (tests/c/try_program.h), EmberCpuBackend, EmberVulkanBackend
 * (when the build has Vulkan; its blobs then reach validation, and init and execute where a
 * device exists) and the portable, quantized and LLM kernels registered; a structure-aware
 * mutator edits flatbuffer fields (pte_mutator.h). Built by `make test-fuzz` with clang; seed
 * corpus: every kind of file the project makes (tests/fixtures, tests/fixtures/alias,
 * tests/fixtures/vulkan, build/fixtures/executorch). The CPU backend's q8_winograd option
 * alternates with the input's size, so int8 convs with a Winograd alternative reach both their
 * int8 run and the transform of their int8 weights at init on any CPU; its q8_pixel_major option
 * alternates too (the pixel-major tile of int8 convs with a u8 output and its weight repacking,
 * or the panel path).
 */
#define _POSIX_C_SOURCE 200809L
#include <stddef.h>
#include <stdint.h>

#include "../c/try_program.h"
#include "ember/backend_cpu.h"
#include "ember/backend_vulkan.h"
#include "pte_mutator.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static int ready;
  if (!ready) {
    em_log_set_level(EM_LOG_FATAL);
    em_register_prim_ops();
    em_register_portable_kernels();
    em_register_quantized_kernels();
    em_register_cpu_backend();
    (void)em_register_vulkan_backend(); /* EM_ERR_NOT_SUPPORTED in a build without Vulkan */
    try_exec_rounds = 2;
    ready = 1;
  }
  const em_cpu_backend_options opts = {
      NULL, false, false, (size & 1) ? 1 : -1, (size & 2) ? 0 : -1, (size & 4) ? 0 : -1};
  (void)em_cpu_backend_configure(&opts);
  try_stats s = {0, 0, 0, 0};
  try_program(data, size, &s);
  return 0;
}
