/*
 * vk_device.h — EmberVulkanBackend's process-wide Vulkan device (vk_device.c).
 *
 * The Vulkan loader (libvulkan.so.1) is opened with dlopen on first use, so libember has no
 * link-time dependency on Vulkan and loads on machines without it; every entry point is called
 * through the emv_device table below. The instance, the device (the first physical device with
 * a compute queue), the queue and one pipeline per shader and storage type are created once per
 * process, on the first delegate's init, and kept until the process exits. The f16 pipelines
 * exist only on a Vulkan 1.1 device (and loader) reporting storageBuffer16BitAccess, which is
 * then enabled at device creation.
 */
#ifndef EMBER_VK_DEVICE_H
#define EMBER_VK_DEVICE_H

#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>

#include "ember/status.h"
#include "vk_internal.h"

#define EMV_FUNCS(X)                                                                               \
  X(vkGetDeviceQueue)                                                                              \
  X(vkCreateBuffer)                                                                                \
  X(vkDestroyBuffer)                                                                               \
  X(vkGetBufferMemoryRequirements)                                                                 \
  X(vkAllocateMemory)                                                                              \
  X(vkFreeMemory)                                                                                  \
  X(vkBindBufferMemory)                                                                            \
  X(vkMapMemory)                                                                                   \
  X(vkUnmapMemory)                                                                                 \
  X(vkCreateShaderModule)                                                                          \
  X(vkDestroyShaderModule)                                                                         \
  X(vkCreateDescriptorSetLayout)                                                                   \
  X(vkCreatePipelineLayout)                                                                        \
  X(vkCreateComputePipelines)                                                                      \
  X(vkCreateDescriptorPool)                                                                        \
  X(vkDestroyDescriptorPool)                                                                       \
  X(vkAllocateDescriptorSets)                                                                      \
  X(vkUpdateDescriptorSets)                                                                        \
  X(vkCreateCommandPool)                                                                           \
  X(vkDestroyCommandPool)                                                                          \
  X(vkAllocateCommandBuffers)                                                                      \
  X(vkBeginCommandBuffer)                                                                          \
  X(vkEndCommandBuffer)                                                                            \
  X(vkCmdBindPipeline)                                                                             \
  X(vkCmdBindDescriptorSets)                                                                       \
  X(vkCmdPushConstants)                                                                            \
  X(vkCmdDispatch)                                                                                 \
  X(vkCmdPipelineBarrier)                                                                          \
  X(vkCmdCopyBuffer)                                                                               \
  X(vkCreateFence)                                                                                 \
  X(vkDestroyFence)                                                                                \
  X(vkResetFences)                                                                                 \
  X(vkWaitForFences)                                                                               \
  X(vkQueueSubmit)

#define EMV_DECLARE(f) PFN_##f f;

/* The device every delegate shares. */
typedef struct emv_device {
  VkInstance instance;
  VkPhysicalDevice phys;
  VkDevice dev;
  VkQueue queue;
  uint32_t queue_family;
  VkPhysicalDeviceProperties props;
  VkPhysicalDeviceMemoryProperties mem;
  VkDescriptorSetLayout set_layout;
  VkPipelineLayout layout;
  bool f16; /* storageBuffer16BitAccess enabled: pipe[EMV_STORAGE_F16] (mixed storage) exist */
  VkPipeline pipe[EMV_STORAGE_END][EMV_PIPE_END];
  EMV_FUNCS(EMV_DECLARE)
} emv_device;

/* The shared device, created on the first call (later calls return the same one, or the same
   failure). EM_ERR_NOT_SUPPORTED, with em_last_error() naming what is missing (the loader, a
   device with a compute queue), when there is no usable Vulkan device. Thread-safe. */
em_status emv_device_get(const emv_device **dev_out);

/* Submits `cmd` on the shared queue (serialized between threads) and waits for `fence`. */
em_status emv_device_run(const emv_device *d, VkCommandBuffer cmd, VkFence fence);

/* The storage type a tensor the blob stores as `storage` runs with on `d`: EMV_STORAGE_F16
   only where the device has 16-bit storage and em_vulkan_allow_f16_storage has not turned it
   off; otherwise EMV_STORAGE_F32 (a blob with f16 tensors then runs widened, emv_plan_widen). */
uint32_t emv_device_storage(const emv_device *d, uint32_t storage);

/* Index of a memory type allowed by `bits` with all of `want`, or -1. */
int emv_device_memory_type(const emv_device *d, uint32_t bits, VkMemoryPropertyFlags want);

#endif /* EMBER_VK_DEVICE_H */
