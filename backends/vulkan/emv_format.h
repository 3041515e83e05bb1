/*
 * emv_format.h — the EmberVulkanBackend blob (BackendDelegate.processed), version 3.
 *
 * Written by python/ember/backends/vulkan/blob.py; read and validated by vk_blob.c. Every
 * field is a little-endian uint32 (f32 for fp[]), read with memcpy (the blob may sit at any
 * alignment in the file):
 *
 *   header    emv_header (8 words)
 *   tensors   emv_tensor[n_tensors]   (8 words each)
 *   inputs    uint32[n_inputs]        tensor indices, in the delegate's argument order
 *   outputs   uint32[n_outputs]       tensor indices, after the inputs
 *   ops       emv_op[n_ops]           (20 words each), run in order
 *   weights   weight_bytes bytes: each constant tensor's values in its own storage type (f32,
 *             or IEEE f16); the blob ends here exactly
 *
 * All tensors live in one device buffer (the arena, arena_bytes bytes); a tensor is a
 * contiguous row-major [sizes] block of elements of its storage type (per tensor: mixed
 * storage) at byte `offset`, a multiple of its element size. Two tensors may share storage (a
 * reshape is an alias: same offset, same element count, same storage). arena_bytes must equal
 * the highest end (offset + numel x element size) of any tensor and weight_bytes that of any
 * constant, so that no single corrupted field can make init reserve a huge buffer or leave
 * bytes unaccounted for. The shaders compute in f32 whatever the storage, and the delegate's
 * arguments are f32 (converted at the boundary). Version 2 (one storage type for the whole
 * arena, offsets in elements) is refused as another version.
 */
#ifndef EMBER_EMV_FORMAT_H
#define EMBER_EMV_FORMAT_H

#include <stdint.h>

#define EMV_MAGIC       0x4B564D45u /* "EMVK" */
#define EMV_VERSION     3u
#define EMV_MAX_DIMS    4
#define EMV_NONE        0xFFFFFFFFu /* an absent tensor operand / a tensor that is not a constant */
#define EMV_MAX_TENSORS (1u << 20)
#define EMV_MAX_OPS     (1u << 20)
#define EMV_MAX_ARGS    4096u

typedef struct emv_header {
  uint32_t magic, version;
  uint32_t n_tensors, n_ops, n_inputs, n_outputs;
  uint32_t arena_bytes;  /* size of the device arena */
  uint32_t weight_bytes; /* size of the trailing weights section */
} emv_header;

/* Storage types (emv_tensor.storage): how the arena and the weights hold a tensor's elements. */
enum {
  EMV_STORAGE_F32, /* 4-byte IEEE single */
  EMV_STORAGE_F16, /* 2-byte IEEE half (the device needs storageBuffer16BitAccess) */
  EMV_STORAGE_END
};

typedef struct emv_tensor {
  uint32_t offset;              /* byte offset in the arena, a multiple of the element size */
  uint32_t weight;              /* EMV_NONE, or byte offset in the weights section (a multiple
                                   of the element size) */
  uint32_t ndim;                /* 0..EMV_MAX_DIMS */
  uint32_t sizes[EMV_MAX_DIMS]; /* >= 1 below ndim, 0 from ndim on */
  uint32_t storage;             /* EMV_STORAGE_*, in the arena and in the weights section */
} emv_tensor;

/* Operator codes (python/ember/backends/vulkan/blob.py OPS). */
enum {
  EMV_OP_UNARY = 1,   /* in0 -> out, same element count; ip[0] act, fp[0..1] its bounds */
  EMV_OP_BINARY = 2,  /* in0 (op) in1 -> out, numpy broadcasting up to 4-d (out may be wider:
                         expand); ip[0] EMV_BIN_* */
  EMV_OP_LINEAR = 3,  /* in0 [B,M,K] x in1 -> out [B,M,N] (+ in2 [N]); ip: B M K N trans_w
                         w_batched act; trans_w: in1 is [N,K] (else [K,N]) */
  EMV_OP_CONV2D = 4,  /* in0 [N,C,H,W], in1 [OC,C/g,KH,KW], in2 [OC] or none -> out
                         [N,OC,OH,OW]; ip: sh sw ph pw dh dw groups act */
  EMV_OP_POOL2D = 5,  /* in0 [N,C,H,W] -> out; ip: kind(0 max, 1 avg) kh kw sh sw ph pw dh dw
                         count_include_pad divisor_override(0 none) */
  EMV_OP_SOFTMAX = 6, /* in0 -> out over the last dim; ip[0] 1 for log-softmax */
  EMV_OP_LAYERNORM =
      7,               /* in0, in1 weight or none, in2 bias or none -> out; ip[0] cols, fp[0] eps */
  EMV_OP_COPY = 8,     /* in0 -> out, same element count (a reshape that needs its own storage) */
  EMV_OP_MEAN = 9,     /* in0 [outer, cols, inner] -> out [outer, inner]; ip: outer cols inner sum
                         (1: the sum, 0: the mean) */
  EMV_OP_PERMUTE = 10, /* in0 -> out, ip[0..ndim) the permutation */
  EMV_OP_SLICE = 11,   /* in0 -> out along ip[0] from ip[1] step ip[2] */
  EMV_OP_CAT_PART = 12, /* in0 -> out's [ip[1], ip[1] + in0.sizes[ip[0]]) along dim ip[0] */
  EMV_OP_FILL = 13,     /* in0 (1 element) -> every element of out (a pad's border) */
  EMV_OP_PLACE = 14,    /* in0 -> out at per-dim offsets ip[0..ndim) (a pad's interior) */
  EMV_OP_UPSAMPLE = 15, /* in0 [N,C,H,W] -> out [N,C,OH,OW]; ip: mode (0 nearest, 1 bilinear)
                           align_corners; fp: the f32 source scale of H, of W */
  EMV_OP_END
};

/* Binary operators: out = a (op) b; rsub is b - a. */
enum { EMV_BIN_ADD, EMV_BIN_SUB, EMV_BIN_MUL, EMV_BIN_DIV, EMV_BIN_RSUB, EMV_BIN_END };

/* Activations (unary ops and the act of linear / conv2d); the numbering is EmberCpuBackend's
   (python/ember/backends/cpu/blob.py ACT). */
enum {
  EMV_ACT_NONE,
  EMV_ACT_CLAMP, /* fp[0] <= x <= fp[1] */
  EMV_ACT_HARDSWISH,
  EMV_ACT_SIGMOID,
  EMV_ACT_SILU,
  EMV_ACT_GELU,
  EMV_ACT_GELU_TANH,
  EMV_ACT_TANH,
  EMV_ACT_HARDSIGMOID,
  EMV_ACT_EXP,
  EMV_ACT_SQRT,
  EMV_ACT_RSQRT,
  EMV_ACT_NEG,
  EMV_ACT_ABS,
  EMV_ACT_END
};

#define EMV_OP_IP 11
#define EMV_OP_FP 4

typedef struct emv_op {
  uint32_t code;
  uint32_t in[3]; /* tensor indices or EMV_NONE */
  uint32_t out;
  int32_t ip[EMV_OP_IP];
  float fp[EMV_OP_FP];
} emv_op;

_Static_assert(sizeof(emv_header) == 32, "emv_header is 8 words");
_Static_assert(sizeof(emv_tensor) == 32, "emv_tensor is 8 words");
_Static_assert(sizeof(emv_op) == 80, "emv_op is 20 words");

#endif /* EMBER_EMV_FORMAT_H */
