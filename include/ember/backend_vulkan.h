/*
 * backend_vulkan.h — EmberVulkanBackend, a delegate that runs subgraphs as Vulkan compute
 * shaders (backends/vulkan/README.md).
 *
 * Programs exported with `ember.export(..., backend="vulkan")` hand the operators this backend
 * supports to it. libember opens the Vulkan loader (libvulkan.so.1) itself when the first such
 * delegate is prepared, so it has no link-time dependency on Vulkan; in a build configured
 * without Vulkan (EMBER_VULKAN off) every function below returns EM_ERR_NOT_SUPPORTED / NULL.
 *
 *     em_register_portable_kernels();
 *     em_register_cpu_backend();
 *     if (em_register_vulkan_backend() == EM_ERR_NOT_SUPPORTED) { ... built without Vulkan ... }
 *     ... em_program_load / em_method_prepare: a missing Vulkan device fails prepare, naming it ...
 */
#ifndef EMBER_BACKEND_VULKAN_H
#define EMBER_BACKEND_VULKAN_H

#include <stdbool.h>

#include "ember/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The id the exporter writes into BackendDelegate.id. */
#define EM_VULKAN_BACKEND_NAME "EmberVulkanBackend"

/* Registers EmberVulkanBackend; EM_ERR_NOT_SUPPORTED in a build without Vulkan,
   EM_ERR_REGISTRATION_ALREADY_REGISTERED when it already is. Needs no Vulkan device (prepare
   fails, naming Vulkan, when there is none). */
em_status em_register_vulkan_backend(void);

/* Validates a blob as init does, without a Vulkan device (the exporter's check). `scratch`
   (scratch_nbytes bytes, borrowed) holds the parsed tables: about 140 bytes per op and tensor.
   EM_OK, or the status init would return with em_last_error() naming the field. */
em_status em_vulkan_blob_check(const void *blob, size_t nbytes, void *scratch,
                               size_t scratch_nbytes);

/* The Vulkan device's name (creating the process-wide device on first use), or NULL when
   there is none or the build has no Vulkan. */
const char *em_vulkan_device_name(void);

/* Whether the Vulkan device has 16-bit storage buffers (storageBuffer16BitAccess, asked of a
   Vulkan 1.1 device), which the blobs of `ember.export(..., vulkan_storage="f16")` use
   (creating the process-wide device on first use). false without a device or Vulkan build. */
bool em_vulkan_has_f16_storage(void);

/* Whether delegates initialized from now on run f16-storage blobs with f16 storage (true, the
   default, where the device has it) or with f32 storage (false: their f16 weights are widened
   to f32 at init, as on a device without 16-bit storage). Process-wide; thread-safe; a no-op
   in a build without Vulkan. */
void em_vulkan_allow_f16_storage(bool allow);

#ifdef __cplusplus
}
#endif

#endif /* EMBER_BACKEND_VULKAN_H */
