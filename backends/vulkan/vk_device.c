/*
 * vk_device.c — EmberVulkanBackend's process-wide Vulkan device: loads libvulkan.so.1 with
 * dlopen, creates the instance, the first compute-capable device (with 16-bit storage buffers
 * enabled where it has them), its queue and the compute pipelines (from the SPIR-V embedded at
 * build time: the all-f32 variant and, where 16-bit storage is enabled, the mixed-storage one),
 * once per process (vk_device.h).
 */
#define _GNU_SOURCE
#include "vk_device.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "ember/backend_vulkan.h"
#include "ember/platform.h"

static emv_device g_dev;
static em_status g_status = EM_ERR_INTERNAL;
static char g_why[160];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t g_queue_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_bool g_allow_f16 = true;

static void why(const char *s, int vk) {
  size_t n = strlen(s);
  if (n >= sizeof g_why - 24) n = sizeof g_why - 24;
  memcpy(g_why, s, n);
  g_why[n] = '\0';
  if (vk) {
    /* append " (VkResult -N)" without stdio */
    char tmp[16];
    int k = 0, v = vk < 0 ? -vk : vk;
    do tmp[k++] = (char)('0' + v % 10), v /= 10;
    while (v && k < 15);
    char *p = g_why + n;
    const char *pre = vk < 0 ? " (VkResult -" : " (VkResult ";
    while (*pre) *p++ = *pre++;
    while (k) *p++ = tmp[--k];
    *p++ = ')';
    *p = '\0';
  }
}

static em_status make_pipelines(emv_device *d) {
  /* the arena, twice: binding 0 as float[], binding 1 as float16_t[] (the mixed shaders) */
  VkDescriptorSetLayoutBinding bind[2] = {
      {0, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, NULL},
      {1, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, NULL}};
  VkDescriptorSetLayoutCreateInfo sl = {VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO, NULL,
                                        0, 2, bind};
  if (d->vkCreateDescriptorSetLayout(d->dev, &sl, NULL, &d->set_layout) != VK_SUCCESS) {
    why("Vulkan: vkCreateDescriptorSetLayout failed", 0);
    return EM_ERR_INTERNAL;
  }
  VkPushConstantRange pr = {VK_SHADER_STAGE_COMPUTE_BIT, 0, EMV_PUSH_WORDS * 4u};
  VkPipelineLayoutCreateInfo pl = {
      VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO, NULL, 0, 1, &d->set_layout, 1, &pr};
  if (d->vkCreatePipelineLayout(d->dev, &pl, NULL, &d->layout) != VK_SUCCESS) {
    why("Vulkan: vkCreatePipelineLayout failed", 0);
    return EM_ERR_INTERNAL;
  }
  for (int i = 0; i < (d->f16 ? EMV_STORAGE_END : 1) * EMV_PIPE_END; i++) {
    VkShaderModuleCreateInfo sm = {VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO, NULL, 0,
                                   emv_spirv_words[i] * 4u, emv_spirv[i]};
    VkShaderModule mod;
    VkResult r = d->vkCreateShaderModule(d->dev, &sm, NULL, &mod);
    if (r != VK_SUCCESS) {
      why("Vulkan: vkCreateShaderModule failed", r);
      return EM_ERR_INTERNAL;
    }
    VkComputePipelineCreateInfo ci = {VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
                                      NULL,
                                      0,
                                      {VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO, NULL, 0,
                                       VK_SHADER_STAGE_COMPUTE_BIT, mod, "main", NULL},
                                      d->layout,
                                      VK_NULL_HANDLE,
                                      -1};
    r = d->vkCreateComputePipelines(d->dev, VK_NULL_HANDLE, 1, &ci, NULL,
                                    &d->pipe[i / EMV_PIPE_END][i % EMV_PIPE_END]);
    d->vkDestroyShaderModule(d->dev, mod, NULL);
    if (r != VK_SUCCESS) {
      why("Vulkan: vkCreateComputePipelines failed", r);
      return EM_ERR_INTERNAL;
    }
  }
  return EM_OK;
}

#define DIE(...)                                                                                   \
  do {                                                                                             \
    why(__VA_ARGS__);                                                                              \
    return;                                                                                        \
  } while (0)

static void create(void) {
  emv_device *d = &g_dev;
  g_status = EM_ERR_NOT_SUPPORTED;
  void *so = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!so)
    DIE("Vulkan loader libvulkan.so.1 not found (install a Vulkan driver, e.g. "
        "mesa-vulkan-drivers)",
        0);
  PFN_vkGetInstanceProcAddr gipa;
  *(void **)&gipa = dlsym(so, "vkGetInstanceProcAddr");
  if (!gipa) DIE("Vulkan loader has no vkGetInstanceProcAddr", 0);
  PFN_vkCreateInstance create_instance =
      (PFN_vkCreateInstance)gipa(VK_NULL_HANDLE, "vkCreateInstance");
  if (!create_instance) DIE("Vulkan loader has no vkCreateInstance", 0);
  /* Vulkan 1.1 where the loader has it: vkGetPhysicalDeviceFeatures2, to ask for 16-bit storage */
  PFN_vkEnumerateInstanceVersion instance_version =
      (PFN_vkEnumerateInstanceVersion)gipa(VK_NULL_HANDLE, "vkEnumerateInstanceVersion");
  uint32_t api = VK_API_VERSION_1_0;
  if (instance_version && instance_version(&api) != VK_SUCCESS) api = VK_API_VERSION_1_0;
  api = api >= VK_API_VERSION_1_1 ? VK_API_VERSION_1_1 : VK_API_VERSION_1_0;
  VkApplicationInfo app = {VK_STRUCTURE_TYPE_APPLICATION_INFO, NULL, "ember", 1, "ember", 1, api};
  VkInstanceCreateInfo ici = {
      VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, NULL, 0, &app, 0, NULL, 0, NULL};
  VkResult r = create_instance(&ici, NULL, &d->instance);
  if (r != VK_SUCCESS) DIE("Vulkan: vkCreateInstance failed (no Vulkan driver?)", r);
#define INST(f) PFN_##f f = (PFN_##f)gipa(d->instance, #f)
  INST(vkEnumeratePhysicalDevices);
  INST(vkGetPhysicalDeviceQueueFamilyProperties);
  INST(vkGetPhysicalDeviceProperties);
  INST(vkGetPhysicalDeviceMemoryProperties);
  INST(vkCreateDevice);
  INST(vkGetDeviceProcAddr);
#undef INST
  if (!vkEnumeratePhysicalDevices || !vkGetPhysicalDeviceQueueFamilyProperties ||
      !vkGetPhysicalDeviceProperties || !vkGetPhysicalDeviceMemoryProperties || !vkCreateDevice ||
      !vkGetDeviceProcAddr)
    DIE("Vulkan: instance entry points missing", 0);
  VkPhysicalDevice phys[16];
  uint32_t n = 16;
  r = vkEnumeratePhysicalDevices(d->instance, &n, phys);
  if ((r != VK_SUCCESS && r != VK_INCOMPLETE) || n == 0) DIE("Vulkan: no physical device", r);
  d->phys = VK_NULL_HANDLE;
  for (uint32_t i = 0; i < n && !d->phys; i++) {
    VkQueueFamilyProperties qf[16];
    uint32_t nq = 16;
    vkGetPhysicalDeviceQueueFamilyProperties(phys[i], &nq, qf);
    for (uint32_t q = 0; q < nq; q++)
      if (qf[q].queueFlags & VK_QUEUE_COMPUTE_BIT) {
        d->phys = phys[i], d->queue_family = q;
        break;
      }
  }
  if (!d->phys) DIE("Vulkan: no device with a compute queue", 0);
  vkGetPhysicalDeviceProperties(d->phys, &d->props);
  vkGetPhysicalDeviceMemoryProperties(d->phys, &d->mem);
  /* 16-bit storage buffers (core in 1.1; the f16 storage blobs' shaders need them) */
  VkPhysicalDevice16BitStorageFeatures s16 = {
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES, NULL, 0, 0, 0, 0};
  PFN_vkGetPhysicalDeviceFeatures2 features2 =
      (PFN_vkGetPhysicalDeviceFeatures2)gipa(d->instance, "vkGetPhysicalDeviceFeatures2");
  if (api >= VK_API_VERSION_1_1 && d->props.apiVersion >= VK_API_VERSION_1_1 && features2) {
    VkPhysicalDeviceFeatures2 f2 = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, &s16, {0}};
    features2(d->phys, &f2);
  }
  d->f16 = s16.storageBuffer16BitAccess == VK_TRUE;
  VkPhysicalDevice16BitStorageFeatures want16 = {
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES, NULL, VK_TRUE, 0, 0, 0};
  float prio = 1.0f;
  VkDeviceQueueCreateInfo qci = {
      VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, NULL, 0, d->queue_family, 1, &prio};
  VkDeviceCreateInfo dci = {VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
                            d->f16 ? &want16 : NULL,
                            0,
                            1,
                            &qci,
                            0,
                            NULL,
                            0,
                            NULL,
                            NULL};
  r = vkCreateDevice(d->phys, &dci, NULL, &d->dev);
  if (r != VK_SUCCESS) DIE("Vulkan: vkCreateDevice failed", r);
#define DEV(f)                                                                                     \
  if (!(d->f = (PFN_##f)vkGetDeviceProcAddr(d->dev, #f))) DIE("Vulkan: no " #f, 0);
  EMV_FUNCS(DEV)
#undef DEV
  d->vkGetDeviceQueue(d->dev, d->queue_family, 0, &d->queue);
  g_status = make_pipelines(d);
}

em_status emv_device_get(const emv_device **dev_out) {
  pthread_once(&g_once, create);
  if (g_status != EM_OK) {
    EM_LOG_ERROR("EmberVulkanBackend: %s", g_why);
    return g_status;
  }
  *dev_out = &g_dev;
  return EM_OK;
}

em_status emv_device_run(const emv_device *d, VkCommandBuffer cmd, VkFence fence) {
  VkSubmitInfo si = {VK_STRUCTURE_TYPE_SUBMIT_INFO, NULL, 0, NULL, NULL, 1, &cmd, 0, NULL};
  VkResult r = d->vkResetFences(d->dev, 1, &fence);
  if (r == VK_SUCCESS) {
    pthread_mutex_lock(&g_queue_lock);
    r = d->vkQueueSubmit(d->queue, 1, &si, fence);
    pthread_mutex_unlock(&g_queue_lock);
  }
  if (r == VK_SUCCESS) r = d->vkWaitForFences(d->dev, 1, &fence, VK_TRUE, UINT64_MAX);
  if (r != VK_SUCCESS) {
    EM_LOG_ERROR("EmberVulkanBackend: Vulkan submit or wait failed (VkResult %d)", (int)r);
    return EM_ERR_INTERNAL;
  }
  return EM_OK;
}

uint32_t emv_device_storage(const emv_device *d, uint32_t storage) {
  return storage == EMV_STORAGE_F16 && d->f16 && atomic_load(&g_allow_f16) ? EMV_STORAGE_F16
                                                                           : EMV_STORAGE_F32;
}

void em_vulkan_allow_f16_storage(bool allow) { atomic_store(&g_allow_f16, allow); }

bool em_vulkan_has_f16_storage(void) {
  const emv_device *d = NULL;
  return emv_device_get(&d) == EM_OK && d->f16;
}

int emv_device_memory_type(const emv_device *d, uint32_t bits, VkMemoryPropertyFlags want) {
  for (uint32_t i = 0; i < d->mem.memoryTypeCount; i++)
    if ((bits >> i) & 1u && (d->mem.memoryTypes[i].propertyFlags & want) == want) return (int)i;
  return -1;
}
