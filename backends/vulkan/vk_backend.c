/*
 * vk_backend.c — EmberVulkanBackend: the delegate vtable (include/ember/backend_vulkan.h).
 *
 * init validates the blob (vk_blob.c), then on the shared device (vk_device.c) allocates the
 * delegate's two buffers once — the arena (every tensor, device-local where the device has
 * such memory) and a host-visible staging buffer (the weights at init, then the inputs and
 * outputs) — uploads the weights, and records one command buffer: copy the inputs in, one
 * dispatch per operator with a barrier after each, copy the outputs out. execute copies the
 * inputs into the mapped staging buffer, submits that command buffer, waits, and copies the
 * outputs back: nothing is allocated per call.
 *
 * Mixed storage: each tensor has its own storage type (emv_format.h), f32 or IEEE f16. On a
 * device with 16-bit storage buffers the arena holds each tensor as the blob says, the weights
 * are uploaded as they are in the blob, the shaders of the mixed variant run (the arena bound
 * both as float[] and as float16_t[], each operand read in its own type) and execute converts
 * each f32 argument to its tensor's type (f16: round to nearest even) on the way in and back
 * on the way out. A blob with f16 tensors on a device without 16-bit storage (or after
 * em_vulkan_allow_f16_storage(false)) runs with every tensor f32 (emv_plan_widen): its f16
 * weights are widened at init and the all-f32 shaders run.
 */
#include <string.h>

#include "ember/backend_vulkan.h"
#include "ember/platform.h"
#include "portable/kutil.h" /* em_f16_to_f32, em_f32_to_f16 */
#include "vk_device.h"

typedef struct emv_delegate {
  const emv_device *d;
  emv_plan plan;
  uint64_t arena_nbytes, staging_nbytes;
  uint32_t variant; /* the shaders: EMV_STORAGE_F16 (mixed) when a tensor runs as f16, else F32 */
  uint32_t *io_off; /* [n_inputs + n_outputs] byte offset of each argument in the staging */
  VkBuffer arena, staging;
  VkDeviceMemory arena_mem, staging_mem;
  uint8_t *mapped; /* the staging buffer, mapped for the delegate's lifetime */
  VkDescriptorPool dpool;
  VkDescriptorSet set;
  VkCommandPool cpool;
  VkCommandBuffer cmd;
  VkFence fence;
} emv_delegate;

static void release(emv_delegate *g) {
  if (!g || !g->d) return;
  const emv_device *d = g->d;
  if (g->fence) d->vkDestroyFence(d->dev, g->fence, NULL);
  if (g->cpool) d->vkDestroyCommandPool(d->dev, g->cpool, NULL);
  if (g->dpool) d->vkDestroyDescriptorPool(d->dev, g->dpool, NULL);
  if (g->mapped) d->vkUnmapMemory(d->dev, g->staging_mem);
  if (g->staging) d->vkDestroyBuffer(d->dev, g->staging, NULL);
  if (g->staging_mem) d->vkFreeMemory(d->dev, g->staging_mem, NULL);
  if (g->arena) d->vkDestroyBuffer(d->dev, g->arena, NULL);
  if (g->arena_mem) d->vkFreeMemory(d->dev, g->arena_mem, NULL);
  g->d = NULL;
}

static em_status make_buffer(emv_delegate *g, uint64_t nbytes, VkBufferUsageFlags usage, bool host,
                             VkBuffer *buf, VkDeviceMemory *mem) {
  const emv_device *d = g->d;
  VkBufferCreateInfo bi = {VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                           NULL,
                           0,
                           nbytes,
                           usage,
                           VK_SHARING_MODE_EXCLUSIVE,
                           0,
                           NULL};
  VkResult r = d->vkCreateBuffer(d->dev, &bi, NULL, buf);
  if (r != VK_SUCCESS) {
    EM_LOG_ERROR("EmberVulkanBackend: vkCreateBuffer of %llu bytes failed (VkResult %d)",
                 (unsigned long long)nbytes, (int)r);
    return EM_ERR_DELEGATE_MEMORY_ALLOCATION_FAILED;
  }
  VkMemoryRequirements req;
  d->vkGetBufferMemoryRequirements(d->dev, *buf, &req);
  VkMemoryPropertyFlags want =
      host ? VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT
           : VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
  int type = emv_device_memory_type(d, req.memoryTypeBits, want);
  if (type < 0 && !host) type = emv_device_memory_type(d, req.memoryTypeBits, 0);
  if (type < 0) {
    EM_LOG_ERROR("EmberVulkanBackend: no %s Vulkan memory type for a buffer",
                 host ? "host-visible coherent" : "usable");
    return EM_ERR_DELEGATE_MEMORY_ALLOCATION_FAILED;
  }
  VkMemoryAllocateInfo ai = {VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, NULL, req.size,
                             (uint32_t)type};
  r = d->vkAllocateMemory(d->dev, &ai, NULL, mem);
  if (r == VK_SUCCESS) r = d->vkBindBufferMemory(d->dev, *buf, *mem, 0);
  if (r != VK_SUCCESS) {
    EM_LOG_ERROR("EmberVulkanBackend: allocating %llu bytes of Vulkan memory failed (VkResult %d)",
                 (unsigned long long)req.size, (int)r);
    return EM_ERR_DELEGATE_MEMORY_ALLOCATION_FAILED;
  }
  return EM_OK;
}

static void barrier(const emv_device *d, VkCommandBuffer c, VkPipelineStageFlags src,
                    VkAccessFlags src_access, VkPipelineStageFlags dst, VkAccessFlags dst_access) {
  VkMemoryBarrier mb = {VK_STRUCTURE_TYPE_MEMORY_BARRIER, NULL, src_access, dst_access};
  d->vkCmdPipelineBarrier(c, src, dst, 0, 1, &mb, 0, NULL, 0, NULL);
}

/* Byte offset of tensor t in the arena as the device holds it. */
static uint64_t arena_at(const emv_rt_tensor *t) {
  return (uint64_t)t->elem * emv_storage_bytes(t->run);
}

/* Byte offset of constant t's values in the staging buffer (widened: twice the blob's). */
static uint64_t staged_at(const emv_plan *p, const emv_rt_tensor *t) {
  return (uint64_t)t->weight * (p->wide ? 2u : 1u);
}

/* Uploads the weights through the staging buffer (one submit, waited for); a widened plan has
   its f16 constants converted to f32 on the way. */
static em_status upload_weights(emv_delegate *g) {
  const emv_device *d = g->d;
  const emv_plan *p = &g->plan;
  if (p->weight_bytes == 0) return EM_OK;
  if (!p->wide) memcpy(g->mapped, p->weights, p->weight_bytes);
  for (uint32_t i = 0; p->wide && i < p->n_tensors; i++) {
    const emv_rt_tensor *t = &p->t[i];
    if (t->weight == EMV_NONE) continue;
    uint8_t *to = g->mapped + staged_at(p, t);
    if (t->storage == EMV_STORAGE_F32) {
      memcpy(to, p->weights + t->weight, 4u * (size_t)t->numel);
      continue;
    }
    for (uint32_t k = 0; k < t->numel; k++) {
      uint16_t h;
      memcpy(&h, p->weights + t->weight + 2u * (size_t)k, 2);
      float f = em_f16_to_f32(h);
      memcpy(to + 4u * (size_t)k, &f, 4);
    }
  }
  VkCommandBufferBeginInfo bi = {VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO, NULL,
                                 VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT, NULL};
  if (d->vkBeginCommandBuffer(g->cmd, &bi) != VK_SUCCESS) return EM_ERR_INTERNAL;
  for (uint32_t i = 0; i < p->n_tensors; i++) {
    const emv_rt_tensor *t = &p->t[i];
    if (t->weight == EMV_NONE) continue;
    VkBufferCopy c = {staged_at(p, t), arena_at(t), (uint64_t)t->numel * emv_storage_bytes(t->run)};
    d->vkCmdCopyBuffer(g->cmd, g->staging, g->arena, 1, &c);
  }
  if (d->vkEndCommandBuffer(g->cmd) != VK_SUCCESS) return EM_ERR_INTERNAL;
  return emv_device_run(d, g->cmd, g->fence);
}

/* Records the delegate's command buffer (submitted by every execute). */
static em_status record(emv_delegate *g) {
  const emv_device *d = g->d;
  const emv_plan *p = &g->plan;
  VkCommandBuffer c = g->cmd;
  VkCommandBufferBeginInfo bi = {VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO, NULL, 0, NULL};
  if (d->vkBeginCommandBuffer(c, &bi) != VK_SUCCESS) return EM_ERR_INTERNAL;
  barrier(d, c, VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_HOST_WRITE_BIT,
          VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_READ_BIT);
  for (uint32_t i = 0; i < p->n_inputs; i++) {
    const emv_rt_tensor *t = &p->t[p->inputs[i]];
    VkBufferCopy cp = {g->io_off[i], arena_at(t), (uint64_t)t->numel * emv_storage_bytes(t->run)};
    d->vkCmdCopyBuffer(c, g->staging, g->arena, 1, &cp);
  }
  barrier(d, c, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT,
          VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
          VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
  d->vkCmdBindDescriptorSets(c, VK_PIPELINE_BIND_POINT_COMPUTE, d->layout, 0, 1, &g->set, 0, NULL);
  uint32_t bound = EMV_PIPE_END;
  for (uint32_t i = 0; i < p->n_ops; i++) {
    emv_dispatch *dp = &p->dispatch[i];
    uint32_t groups = (dp->u[0] + EMV_LOCAL_SIZE - 1) / EMV_LOCAL_SIZE;
    uint32_t gx = groups < 65535u ? groups : 65535u, gy = (groups + gx - 1) / gx;
    dp->u[1] = gx * EMV_LOCAL_SIZE;
    if (dp->pipe != bound)
      d->vkCmdBindPipeline(c, VK_PIPELINE_BIND_POINT_COMPUTE, d->pipe[g->variant][dp->pipe]),
          bound = dp->pipe;
    d->vkCmdPushConstants(c, d->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, EMV_PUSH_WORDS * 4u, dp->u);
    d->vkCmdDispatch(c, gx, gy, 1);
    barrier(d, c, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT,
            VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
            VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT);
  }
  for (uint32_t i = 0; i < p->n_outputs; i++) {
    const emv_rt_tensor *t = &p->t[p->outputs[i]];
    VkBufferCopy cp = {arena_at(t), g->io_off[p->n_inputs + i],
                       (uint64_t)t->numel * emv_storage_bytes(t->run)};
    d->vkCmdCopyBuffer(c, g->arena, g->staging, 1, &cp);
  }
  barrier(d, c, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT,
          VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_HOST_READ_BIT);
  return d->vkEndCommandBuffer(c) == VK_SUCCESS ? EM_OK : EM_ERR_INTERNAL;
}

/* Creates the delegate's Vulkan objects (g->d and g->plan set). */
static em_status build(emv_delegate *g) {
  const emv_device *d = g->d;
  const emv_plan *p = &g->plan;
  if (g->arena_nbytes > d->props.limits.maxStorageBufferRange) {
    EM_LOG_ERROR("EmberVulkanBackend: arena of %llu bytes exceeds the device's "
                 "maxStorageBufferRange %u",
                 (unsigned long long)g->arena_nbytes, d->props.limits.maxStorageBufferRange);
    return EM_ERR_NOT_SUPPORTED;
  }
  for (uint32_t i = 0; i < p->n_ops; i++)
    if ((p->dispatch[i].u[0] + EMV_LOCAL_SIZE - 1) / EMV_LOCAL_SIZE / 65535u >=
        d->props.limits.maxComputeWorkGroupCount[1]) {
      EM_LOG_ERROR("EmberVulkanBackend: op %u needs more workgroups than the device has", i);
      return EM_ERR_NOT_SUPPORTED;
    }
  em_status st = make_buffer(g, g->arena_nbytes,
                             VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                 VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                             false, &g->arena, &g->arena_mem);
  if (st == EM_OK)
    st = make_buffer(g, g->staging_nbytes,
                     VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT, true,
                     &g->staging, &g->staging_mem);
  if (st != EM_OK) return st;
  void *m = NULL;
  if (d->vkMapMemory(d->dev, g->staging_mem, 0, VK_WHOLE_SIZE, 0, &m) != VK_SUCCESS || !m) {
    EM_LOG_ERROR("EmberVulkanBackend: vkMapMemory of the staging buffer failed");
    return EM_ERR_INTERNAL;
  }
  g->mapped = m;
  VkDescriptorPoolSize ps = {VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 2};
  VkDescriptorPoolCreateInfo dpi = {
      VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO, NULL, 0, 1, 1, &ps};
  VkCommandPoolCreateInfo cpi = {VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO, NULL,
                                 VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT, d->queue_family};
  VkFenceCreateInfo fi = {VK_STRUCTURE_TYPE_FENCE_CREATE_INFO, NULL, 0};
  if (d->vkCreateDescriptorPool(d->dev, &dpi, NULL, &g->dpool) != VK_SUCCESS ||
      d->vkCreateCommandPool(d->dev, &cpi, NULL, &g->cpool) != VK_SUCCESS ||
      d->vkCreateFence(d->dev, &fi, NULL, &g->fence) != VK_SUCCESS) {
    EM_LOG_ERROR("EmberVulkanBackend: creating a descriptor pool, command pool or fence failed");
    return EM_ERR_INTERNAL;
  }
  VkDescriptorSetAllocateInfo sai = {VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO, NULL, g->dpool,
                                     1, &d->set_layout};
  VkCommandBufferAllocateInfo cai = {VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, NULL, g->cpool,
                                     VK_COMMAND_BUFFER_LEVEL_PRIMARY, 1};
  if (d->vkAllocateDescriptorSets(d->dev, &sai, &g->set) != VK_SUCCESS ||
      d->vkAllocateCommandBuffers(d->dev, &cai, &g->cmd) != VK_SUCCESS) {
    EM_LOG_ERROR("EmberVulkanBackend: allocating a descriptor set or command buffer failed");
    return EM_ERR_INTERNAL;
  }
  /* the arena twice: binding 0 (float[]) and binding 1 (float16_t[], the mixed shaders) */
  VkDescriptorBufferInfo dbi = {g->arena, 0, VK_WHOLE_SIZE};
  VkWriteDescriptorSet w[2];
  for (uint32_t b = 0; b < 2; b++)
    w[b] = (VkWriteDescriptorSet){VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET, NULL, g->set, b,   0, 1,
                                  VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,      NULL, &dbi,   NULL};
  d->vkUpdateDescriptorSets(d->dev, 2, w, 0, NULL);
  if ((st = upload_weights(g)) != EM_OK) return st;
  return record(g);
}

static em_status vk_init(em_backend_init_ctx *ctx, const void *blob, size_t n,
                         const em_compile_spec *specs, size_t n_specs, void **handle_out) {
  (void)specs, (void)n_specs;
  if (!ctx || !ctx->method_alloc || !handle_out) return EM_ERR_INVALID_ARGUMENT;
  emv_delegate *g = em_allocator_alloc(ctx->method_alloc, sizeof *g, 16);
  if (!g) return EM_ERR_MEMORY_ALLOCATION_FAILED;
  memset(g, 0, sizeof *g);
  em_status st = emv_plan_parse(blob, n, ctx->method_alloc, &g->plan);
  if (st != EM_OK) return st;
  const emv_plan *p = &g->plan;
  const emv_device *d = NULL;
  if ((st = emv_device_get(&d)) != EM_OK) return st;
  if (p->any_f16 && emv_device_storage(d, EMV_STORAGE_F16) != EMV_STORAGE_F16) {
    if ((st = emv_plan_widen(&g->plan)) != EM_OK) return st;
    EM_LOG_INFO("EmberVulkanBackend: the blob stores f16 tensors; %s runs them as f32 (%s)",
                d->props.deviceName,
                d->f16 ? "f16 storage turned off" : "no storageBuffer16BitAccess");
  }
  g->variant = p->any_f16 && !p->wide ? EMV_STORAGE_F16 : EMV_STORAGE_F32;
  uint32_t n_args = p->n_inputs + p->n_outputs;
  g->io_off = em_allocator_alloc(ctx->method_alloc, 4u * n_args + 4u, 4);
  if (!g->io_off) return EM_ERR_MEMORY_ALLOCATION_FAILED;
  uint64_t io = 0;
  for (uint32_t a = 0; a < n_args; a++) {
    const emv_rt_tensor *t = &p->t[a < p->n_inputs ? p->inputs[a] : p->outputs[a - p->n_inputs]];
    io = (io + 15u) & ~15ull; /* 16-byte aligned copies */
    if (io > 0xFFFFFFFFull) return EM_ERR_NOT_SUPPORTED;
    g->io_off[a] = (uint32_t)io;
    io += (uint64_t)t->numel * emv_storage_bytes(t->run);
  }
  uint64_t wbytes = (uint64_t)p->weight_bytes * (p->wide ? 2u : 1u);
  uint64_t staging = io > wbytes ? io : wbytes;
  g->staging_nbytes = ((staging ? staging : 4) + 3u) & ~3ull;
  g->arena_nbytes = ((uint64_t)p->arena_bytes * (p->wide ? 2u : 1u) + 3u) & ~3ull;
  g->d = d;
  if ((st = build(g)) != EM_OK) {
    release(g);
    return st;
  }
  *handle_out = g;
  return EM_OK;
}

static em_status vk_execute(em_backend_exec_ctx *ctx, void *handle, em_evalue **args,
                            size_t n_args) {
  (void)ctx;
  emv_delegate *g = handle;
  if (!g || !g->d) return EM_ERR_DELEGATE_INVALID_HANDLE;
  const emv_plan *p = &g->plan;
  if (n_args != (size_t)p->n_inputs + p->n_outputs) {
    EM_LOG_ERROR("EmberVulkanBackend: %zu arguments, the blob takes %u inputs and %u outputs",
                 n_args, p->n_inputs, p->n_outputs);
    return EM_ERR_INVALID_ARGUMENT;
  }
  for (size_t a = 0; a < n_args; a++) {
    uint32_t t = a < p->n_inputs ? p->inputs[a] : p->outputs[a - p->n_inputs];
    em_tensor *x = args[a] && args[a]->tag == EM_TAG_TENSOR ? args[a]->u.tensor : NULL;
    if (!x || x->dtype != EM_DTYPE_F32 || !x->data || x->numel != (int64_t)p->t[t].numel) {
      EM_LOG_ERROR("EmberVulkanBackend: argument %zu is not an f32 tensor of %u elements", a,
                   p->t[t].numel);
      return EM_ERR_INVALID_ARGUMENT;
    }
  }
  for (uint32_t a = 0; a < p->n_inputs; a++) {
    const float *x = args[a]->u.tensor->data;
    uint8_t *at = g->mapped + g->io_off[a];
    const emv_rt_tensor *t = &p->t[p->inputs[a]];
    size_t n = t->numel;
    if (t->run == EMV_STORAGE_F16) {
      for (size_t i = 0; i < n; i++) {
        uint16_t h = em_f32_to_f16(x[i]);
        memcpy(at + 2u * i, &h, 2);
      }
    } else {
      memcpy(at, x, n * 4u);
    }
  }
  em_status st = emv_device_run(g->d, g->cmd, g->fence);
  if (st != EM_OK) return st;
  for (uint32_t o = 0; o < p->n_outputs; o++) {
    float *y = args[p->n_inputs + o]->u.tensor->data;
    const uint8_t *at = g->mapped + g->io_off[p->n_inputs + o];
    const emv_rt_tensor *t = &p->t[p->outputs[o]];
    size_t n = t->numel;
    if (t->run == EMV_STORAGE_F16) {
      for (size_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, at + 2u * i, 2);
        y[i] = em_f16_to_f32(h);
      }
    } else {
      memcpy(y, at, n * 4u);
    }
  }
  return EM_OK;
}

static void vk_destroy(void *handle) { release(handle); }

static const em_backend vulkan_backend = {
    .name = EM_VULKAN_BACKEND_NAME,
    /* Always "available": init then fails with the reason there is no device (the loader,
       the driver, a compute queue), which says more than the registry's "not available". */
    .is_available = NULL,
    .init = vk_init,
    .execute = vk_execute,
    .destroy = vk_destroy,
};

em_status em_register_vulkan_backend(void) { return em_register_backend(&vulkan_backend); }

em_status em_vulkan_blob_check(const void *blob, size_t nbytes, void *scratch,
                               size_t scratch_nbytes) {
  em_allocator al;
  em_allocator_init(&al, scratch, scratch_nbytes);
  emv_plan p;
  return emv_plan_parse(blob, nbytes, &al, &p);
}

const char *em_vulkan_device_name(void) {
  const emv_device *d = NULL;
  return emv_device_get(&d) == EM_OK ? d->props.deviceName : NULL;
}
