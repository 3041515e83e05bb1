/*
 * vk_stub.c — EmberVulkanBackend's entry points in a build without Vulkan (EMBER_VULKAN off or
 * no Vulkan headers / glslangValidator at configure time): callers register the backend
 * unconditionally and get EM_ERR_NOT_SUPPORTED here.
 */
#include "ember/backend_vulkan.h"

em_status em_register_vulkan_backend(void) { return EM_ERR_NOT_SUPPORTED; }

em_status em_vulkan_blob_check(const void *blob, size_t nbytes, void *scratch,
                               size_t scratch_nbytes) {
  (void)blob, (void)nbytes, (void)scratch, (void)scratch_nbytes;
  return EM_ERR_NOT_SUPPORTED;
}

const char *em_vulkan_device_name(void) { return 0; }

bool em_vulkan_has_f16_storage(void) { return false; }

void em_vulkan_allow_f16_storage(bool allow) { (void)allow; }
