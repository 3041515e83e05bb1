/*
 * vk_internal.h — EmberVulkanBackend's internal interfaces.
 *
 * vk_blob.c turns a blob (emv_format.h, untrusted) into an emv_plan: the validated tensor table
 * and one emv_dispatch per operator (pipeline, invocation count and the push-constant words its
 * shader reads), with no Vulkan call, so the exporter can check a blob on any machine
 * (em_vulkan_blob_check). vk_device.c owns the process-wide device and pipelines; vk_backend.c
 * allocates a delegate's buffers, uploads its weights and records its command buffer at init.
 */
#ifndef EMBER_VK_INTERNAL_H
#define EMBER_VK_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "emv_format.h"
#include "ember/allocator.h"
#include "ember/status.h"

/* The compute shaders (shaders/<name>.comp), in the order of the generated SPIR-V table. */
enum {
  EMV_PIPE_UNARY,
  EMV_PIPE_BINARY,
  EMV_PIPE_LINEAR,
  EMV_PIPE_CONV2D,
  EMV_PIPE_POOL2D,
  EMV_PIPE_SOFTMAX,
  EMV_PIPE_LAYERNORM,
  EMV_PIPE_GATHER,
  EMV_PIPE_MEAN,
  EMV_PIPE_UPSAMPLE,
  EMV_PIPE_END
};

#define EMV_PUSH_WORDS 32u /* 128 bytes: the push-constant size every Vulkan device supports */
#define EMV_LOCAL_SIZE 64u /* local_size_x of every shader (shaders/common.glsl) */
/* The push-constant word holding the operands' storage (shaders/common.glsl): bit k set when
   in[k] (k < 3) is f16, bit 3 when the output is; 0 for the shaders of the all-f32 variant. */
#define EMV_PUSH_STORAGE 31u

/* One recorded dispatch: u[0] is the invocation count, u[1] is filled in at recording. */
typedef struct emv_dispatch {
  uint32_t pipe;
  uint32_t u[EMV_PUSH_WORDS];
} emv_dispatch;

/* A validated tensor. `offset` and `weight` are the blob's byte offsets and `storage` its type;
   `elem` and `run` are where and how the device holds it: the element index in the arena seen
   as an array of `run` elements (offset / element size, or offset / 2 with every tensor
   widened to f32, emv_plan_widen). */
typedef struct emv_rt_tensor {
  uint32_t offset, weight, ndim, numel;
  uint32_t sizes[EMV_MAX_DIMS];
  uint32_t storage, run, elem;
} emv_rt_tensor;

/* A validated blob; the arrays come from the allocator given to emv_plan_parse. */
typedef struct emv_plan {
  uint32_t n_tensors, n_ops, n_inputs, n_outputs;
  uint32_t arena_bytes, weight_bytes;
  bool any_f16;           /* some tensor is stored as f16 in the blob */
  bool wide;              /* every tensor runs as f32 at twice its byte offset (emv_plan_widen) */
  emv_rt_tensor *t;       /* [n_tensors] */
  uint32_t *inputs;       /* [n_inputs] tensor indices */
  uint32_t *outputs;      /* [n_outputs] tensor indices */
  emv_dispatch *dispatch; /* [n_ops] */
  const uint8_t *ops;     /* the blob's operator records (borrowed: valid while the blob is) */
  const uint8_t *weights; /* [weight_bytes], in the blob (unaligned; borrowed) */
} emv_plan;

/* Validates `blob` (n bytes, untrusted) into *plan, allocating its tables from `al`, and
   compiles each operator for the blob's own layout (each tensor in its storage type). Returns
   EM_ERR_INVALID_PROGRAM (or EM_ERR_DELEGATE_INVALID_COMPATIBILITY for another version) with
   em_last_error() naming the field and values; never reads outside [blob, blob + n). */
em_status emv_plan_parse(const void *blob, size_t n, em_allocator *al, emv_plan *plan);

/* Recompiles a parsed plan (its blob still alive) for a device without f16 storage: every
   tensor is then f32 at element index offset / 2 of an arena of 2 x arena_bytes (so tensors
   keep their relative places), and every dispatch's storage word is 0. */
em_status emv_plan_widen(emv_plan *plan);

/* Bytes per element of storage type `storage` (EMV_STORAGE_*). */
static inline uint32_t emv_storage_bytes(uint32_t storage) {
  return storage == EMV_STORAGE_F16 ? 2u : 4u;
}

/* The embedded SPIR-V of each EMV_PIPE_* shader in two variants, at [v * EMV_PIPE_END + pipe]:
   v = EMV_STORAGE_F32, every tensor f32 (binding 0 only), and v = EMV_STORAGE_F16, mixed
   storage (the same GLSL compiled with -DEMV_F16: the arena also bound as float16_t[] at
   binding 1, each operand read and written in the storage its push-constant bit says;
   generated at build time: vk_spirv.c). */
extern const uint32_t *const emv_spirv[EMV_STORAGE_END * EMV_PIPE_END];
extern const size_t emv_spirv_words[EMV_STORAGE_END * EMV_PIPE_END];

#endif /* EMBER_VK_INTERNAL_H */
