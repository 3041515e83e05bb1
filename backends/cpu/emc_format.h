/*
 * emc_format.h — the EmberCpuBackend blob ("EMC1"), written by
 * python/ember/backends/cpu/blob.py and read by cpu_backend.c.
 *
 * Layout (little-endian, every offset from the start of the blob):
 *
 *   emc_header   64 bytes at 0
 *   emc_tensor   n_tensors records at tensors_off (48 bytes each)
 *   emc_op       n_ops records at ops_off (160 bytes each), in execution order
 *   data         data_nbytes at data_off (64-aligned): constant tensors, each
 *                64-aligned, weights already packed in the micro-kernel layout
 *
 * A tensor names a storage: a delegate input or output (args[index]), a
 * constant (data + offset) or the backend arena (arena + offset; the arena is
 * arena_nbytes, planned at export time, allocated once at init). Several
 * tensors may share a storage with different shapes (views). Everything is f32.
 *
 * Packed GEMM weights ("A panels"): for a [M, K] matrix, ceil(M / 6) panels of
 * [K][6] floats, rows past M zero. Panels are what EMC_MR-row micro-kernels
 * broadcast from, whatever the ISA chosen at init. Packed GEMM B operands (linear weights;
 * conv inputs in the im2col scratch) are ceil(N / 16) panels of [K][16], columns past N zero.
 */
#ifndef EMBER_BACKENDS_CPU_EMC_FORMAT_H
#define EMBER_BACKENDS_CPU_EMC_FORMAT_H

#include <stdint.h>

#define EMC_MAGIC "EMC1"
/* 2: EMC_CONV_TRANSPOSED; 3: EMC_CONV_WINOGRAD (older: zero there); 4: residual in[3] of conv2d
 * and gemm (older: -1 there), transposed Winograd convs, depthwise plane means out[1];
 * 5: EMC_CONV_PAIRS (older: zero there); 6: EMC_CONV_IN_SCALE (older: zero there);
 * 7: softmax input scale and mask (older: zero / -1 there) */
#define EMC_VERSION    7u
#define EMC_MAX_DIMS   6
#define EMC_MR         6 /* rows of a packed weight panel */
#define EMC_DATA_ALIGN 64
#define EMC_NR_PANEL   16 /* columns of a packed B panel: [ceil(N/16)][K][16] */

typedef struct emc_header {
  char magic[4];
  uint32_t version;
  uint32_t n_tensors;
  uint32_t n_ops;
  uint32_t n_inputs;
  uint32_t n_outputs;
  uint64_t arena_nbytes;
  uint64_t tensors_off;
  uint64_t ops_off;
  uint64_t data_off;
  uint64_t data_nbytes;
} emc_header;
_Static_assert(sizeof(emc_header) == 64, "emc_header is 64 bytes");

enum emc_storage { EMC_INPUT = 0, EMC_OUTPUT = 1, EMC_CONST = 2, EMC_ARENA = 3 };

typedef struct emc_tensor {
  uint32_t storage; /* emc_storage */
  uint32_t index;   /* argument index for inputs / outputs */
  uint64_t offset;  /* bytes into data or arena; 0 for arguments */
  uint32_t ndim;
  int32_t sizes[EMC_MAX_DIMS];
  uint32_t reserved;
} emc_tensor;
_Static_assert(sizeof(emc_tensor) == 48, "emc_tensor is 48 bytes");

enum emc_op_kind {
  EMC_OP_CONV2D = 1,          /* in: x[N,C,H,W], w, bias|-1, residual|-1; out [N,Co,OH,OW] */
  EMC_OP_GEMM = 2,            /* in: A, B, bias[N]|-1, residual|-1; out[b] = A[b] @ B[b] + bias */
  EMC_OP_BINARY = 3,          /* in: a, b|-1 (scalar fp[2]); broadcast to out               */
  EMC_OP_UNARY = 4,           /* in: x; out = act(x)                                        */
  EMC_OP_MAXPOOL2D = 5,       /* in: x[N,C,H,W]                                             */
  EMC_OP_AVGPOOL2D = 6,       /* in: x[N,C,H,W]                                             */
  EMC_OP_MEAN = 7,            /* [ip0, ip1, ip2 (0 = 1)] -> [ip0, ip2]: mean over the middle   */
  EMC_OP_SOFTMAX = 8,         /* in: x, mask|-1; ip: outer, axis length, inner, log, scaled,
                                 mask rows; fp[0] scale: softmax(x * scale + mask)            */
  EMC_OP_LAYERNORM = 9,       /* in: x, weight|-1, bias|-1; ip: rows, cols; fp[0] eps       */
  EMC_OP_PERMUTE = 10,        /* ip[0..ndim) = permutation of in0's dims                    */
  EMC_OP_COPY = 11,           /* out = in0 (same numel)                                     */
  EMC_OP_CAT = 12,            /* in0..3 along a dim: ip0 outer, ip1 inner, ip2 n_in          */
  EMC_OP_SLICE = 13,          /* ip: outer, in_len, inner, start, step                      */
  EMC_OP_CHANNEL_AFFINE = 14, /* in: x[N,C,...], scale[C], shift[C] (unfolded batch norm) */
  EMC_OP_RMSNORM = 15,        /* in: x, weight|-1; ip: rows, cols; fp[0] eps                */
  EMC_OP_KIND_END
};

/* Conv2d ip[] slots. */
enum {
  EMC_CONV_GROUPS,
  EMC_CONV_KH,
  EMC_CONV_KW,
  EMC_CONV_SH,
  EMC_CONV_SW,
  EMC_CONV_PH,
  EMC_CONV_PW,
  EMC_CONV_DH,
  EMC_CONV_DW,
  EMC_CONV_DEPTHWISE,
  EMC_CONV_SCRATCH_OFF,
  EMC_CONV_SCRATCH_NBYTES,
  /* 1: weights are W^T [Cin*kh*kw, Co] in 16-column B panels and the conv runs as
   * C^T[OH*OW, Co] = im2col^T @ W^T, then transposes C^T into the output: for small maps
   * (7x7: 49 pixels), where pixels as the vector side leave lanes idle. Groups must be 1. The
   * scratch holds, from its first 64-byte boundary, the im2col [Cin*kh*kw][OH*OW] (room for
   * ceil(OH*OW / 6) * 6 columns), then from the next 64-byte boundary C^T. Version 1 blobs
   * have 0 here. */
  EMC_CONV_TRANSPOSED,
  /* 2 or 4: a 3x3 stride-1 conv (groups 1, dilation 1) run as Winograd F(m x m, 3 x 3) (0: not).
   * Weights are the (m + 2)^2 transformed filters G g G^T, element xi = p * (m + 2) + q of every
   * (out, in) pair, each [Co, Cin] matrix in 6-row A panels, xi major. Tiles of m x m outputs go
   * in blocks of EM_WINO_MAX_TILES (raster order); the scratch holds, from its first 64-byte
   * boundary, EMC_CONV_WINO_SLOTS slots of [(m+2)^2][Cin][64] transformed inputs followed by
   * [(m+2)^2][Co][64] GEMM products, one block in flight per slot. With EMC_CONV_TRANSPOSED
   * (version 4; for maps of few tiles) each filter matrix is [Cin, Co] in 16-column B panels,
   * the GEMMs compute C^T[tiles, Co] = V^T U^T, and every slot ends with [(m+2)^2][64][Co] for
   * them (transposed into the products before the output transform). */
  EMC_CONV_WINOGRAD,
  EMC_CONV_WINO_SLOTS,
  /* Version 5: 0, or 1 + the id of a constant holding the weights a second time as bf16 pairs
   * for the AMX path (groups 1, neither transposed nor Winograd): [ceil(Co / 32) * 2][kp / 16]
   * tiles of [16 rows][16 k] 32-bit words, kp = Cin*kh*kw rounded up to 16, word = bf16(w) |
   * bf16(w - bf16(w)) << 16 (each rounded to nearest even), rows past Co and k past kp zero.
   * Runtimes without AMX use the f32 panels and never touch these. */
  EMC_CONV_PAIRS,
  /* Version 6: 0, or 1 + the id of a tensor s of N * Cin floats: the conv reads x[b][c] * s[b *
   * Cin + c] for x[b][c] (a squeeze-and-excitation gate fused into the 1x1 conv after it). Only
   * for 1x1, stride-1, unpadded, ungrouped convs whose input is in the arena and read by nothing
   * else: the GEMM scales B's rows as it copies them, and a path that copies none scales the
   * input in place first. */
  EMC_CONV_IN_SCALE
};
/* GEMM ip[] slots: batch, M, K, N, element strides between batches of A and B (0 = shared). */
enum {
  EMC_GEMM_BATCH,
  EMC_GEMM_M,
  EMC_GEMM_K,
  EMC_GEMM_N,
  EMC_GEMM_A_BSTRIDE,
  EMC_GEMM_B_BSTRIDE,
  EMC_GEMM_A_PACKED,
  EMC_GEMM_B_PACKED
};
/* Pool ip[] slots (avg adds count_include_pad, divisor_override). */
enum {
  EMC_POOL_KH,
  EMC_POOL_KW,
  EMC_POOL_SH,
  EMC_POOL_SW,
  EMC_POOL_PH,
  EMC_POOL_PW,
  EMC_POOL_DH,
  EMC_POOL_DW,
  EMC_POOL_INCLUDE_PAD,
  EMC_POOL_DIVISOR
};

enum emc_binary {
  EMC_BIN_ADD = 0,
  EMC_BIN_SUB = 1,
  EMC_BIN_MUL = 2,
  EMC_BIN_DIV = 3,
  EMC_BIN_RSUB = 4
};

/* Activation applied to an operator's output; clamp bounds in fp[0], fp[1]. */
enum emc_act {
  EMC_ACT_NONE = 0,
  EMC_ACT_CLAMP = 1, /* relu, relu6, hardtanh, clamp */
  EMC_ACT_HARDSWISH = 2,
  EMC_ACT_SIGMOID = 3,
  EMC_ACT_SILU = 4,
  EMC_ACT_GELU = 5,
  EMC_ACT_GELU_TANH = 6,
  EMC_ACT_TANH = 7,
  EMC_ACT_HARDSIGMOID = 8,
  EMC_ACT_EXP = 9,
  EMC_ACT_SQRT = 10,
  EMC_ACT_RSQRT = 11,
  EMC_ACT_NEG = 12,
  EMC_ACT_ABS = 13,
  EMC_ACT_END
};

/*
 * Residual (in[3] of conv2d and gemm, version 4; -1: none): a tensor of the output's shape added
 * to the result before the clamp and activation, out = act(clamp(conv(x) + bias + residual)), so
 * a residual connection costs no pass of its own. It may not share the output's storage. Not for
 * depthwise convs.
 *
 * Plane means (out[1] of a depthwise conv2d, version 4; -1: none): [N * C] floats, each output
 * plane's mean after the activation, taken as the plane is written (a squeeze-and-excitation
 * block's pooling).
 */
typedef struct emc_op {
  uint32_t kind; /* emc_op_kind */
  uint32_t act;  /* emc_act, applied last */
  int32_t in[4]; /* tensor ids, -1 = absent */
  int32_t out[2];
  int32_t ip[24];
  float fp[8]; /* fp[0], fp[1]: clamp min / max for EMC_ACT_CLAMP */
} emc_op;
_Static_assert(sizeof(emc_op) == 160, "emc_op is 160 bytes");

#endif /* EMBER_BACKENDS_CPU_EMC_FORMAT_H */
