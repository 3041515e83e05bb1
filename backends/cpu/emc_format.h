/*
 * emc_format.h — the EmberCpuBackend blob ("EMC1"), written by
 * python/ember/backends/cpu/blob.py and read by cpu_backend.c; the operators
 * (cpu_op_*.c) read each kind's parameter slots through the typed views at the
 * end of this file (emc_conv_params_of, ...).
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
 * 7: softmax input scale and mask (older: zero / -1 there); 8: EMC_ACT_FAKEQUANT, EMC_CONV_Q8
 * (older: zero there); 9: EMC_CONV_WINO_AT_LOAD (older: zero there), EMC_OP_TOKEN_FQ;
 * 10: EMC_CONV_Q8_WINO, EMC_CONV_Q8_U8 (older: zero there); 11: EMC_ACT_HARDSWISH_FQ;
 * 12: EMC_OP_PAD; 13: EMC_OP_DQ_LINEAR; 14: asymmetric padding of int8 depthwise convs (the
 * high bits of EMC_CONV_PH / PW; older: zero there), EMC_BINARY_Q8, EMC_POOL_Q8; 15: EMC_DQL_ROWQ
 * (older: zero there); 16: EMC_UNARY_Q8 (older: zero there); 17: EMC_OP_TENSOR_FQ,
 * EMC_ACT_LEAKY_RELU, EMC_ACT_ELU, EMC_ACT_CUBE, EMC_SOFTMAX_SAFE (older: zero there);
 * 18: EMC_OP_EMBEDDING and integer input tensors (emc_tensor.dtype), EMC_OP_RESIZE, EMC_OP_GATHER,
 * EMC_SLICE_REVERSE, EMC_MEAN_SUM (older: zero there), EMC_ACT_ERF, EMC_ACT_RECIPROCAL,
 * EMC_ACT_SIGN, EMC_ACT_SOFTPLUS, EMC_ACT_MISH; 19: constants stored as f16 / bf16 halves
 * (EMC_DTYPE_F16 / BF16 on an EMC_CONST record; the exporter writes 19 only then) */
#define EMC_VERSION    19u
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
  uint32_t dtype; /* emc_dtype (version 18; older: zero, f32) */
} emc_tensor;
_Static_assert(sizeof(emc_tensor) == 48, "emc_tensor is 48 bytes");

/* Element types of tensors: f32 everywhere, but an input (EMC_INPUT) may hold the integer
 * indices of an embedding (EMC_OP_EMBEDDING's in[1], the only operator that reads them), and a
 * constant (EMC_CONST, version 19) may be stored as IEEE halves or bfloat16 (2 bytes an element:
 * the exporter does so only where that is exact, the weights of a half-precision model); the
 * backend widens such a constant to f32 once at init, so every operator reads f32. */
enum emc_dtype {
  EMC_DTYPE_F32 = 0,
  EMC_DTYPE_I64 = 1,
  EMC_DTYPE_I32 = 2,
  EMC_DTYPE_F16 = 3,
  EMC_DTYPE_BF16 = 4
};

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
  EMC_OP_CAT = 12,            /* in0..3 along a dim: ip0 outer, ip1 n_in, ip2.. row lengths  */
  EMC_OP_SLICE = 13,          /* ip: outer, in_len, inner, start, step, out_len             */
  EMC_OP_CHANNEL_AFFINE = 14, /* in: x[N,C,...], scale[C], shift[C] (unfolded batch norm) */
  EMC_OP_RMSNORM = 15,        /* in: x, weight|-1; ip: rows, cols; fp[0] eps                */
  EMC_OP_TOKEN_FQ = 16,       /* in: x; ip: rows, cols: per-token int8 fake-quant (version 9) */
  EMC_OP_PAD = 17,            /* in: x [outer, h, w]; constant pad of the last two dims (v 12) */
  EMC_OP_DQ_LINEAR = 18,      /* in: x [M, K], int8 w, bias|-1, residual|-1: dynamic int8 (v 13) */
  EMC_OP_TENSOR_FQ = 19,      /* in: x; per-tensor dynamic int8 fake-quant (version 17), below */
  EMC_OP_EMBEDDING = 20,      /* in: table [V, D], indices (i64 / i32); out [n, D] (version 18) */
  EMC_OP_RESIZE = 21,         /* in: x [P, H, W], row taps, column taps; nearest / bilinear (18) */
  EMC_OP_GATHER = 22,         /* in: x, constant source offsets; out[i] = x[off[i]] (18) */
  EMC_OP_KIND_END
};

/* Conv2d ip[] slots. */
enum {
  EMC_CONV_GROUPS,
  EMC_CONV_KH,
  EMC_CONV_KW,
  EMC_CONV_SH,
  EMC_CONV_SW,
  /* Zero rows (columns) before the input, bits 0..15, and as many after plus bits 16..30 (version
   * 14: TensorFlow's "same" padding, one more after than before at stride 2; only int8
   * depthwise convs take a nonzero extra, older blobs have none). */
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
  EMC_CONV_IN_SCALE,
  /* Version 8: 0, or 1 + the id of a constant of 2 * Co words, an int8 conv's per-channel
   * table: Co f32 output scales (s_in * s_w[c]), then Co int32 corrections (zp * sum_k w[c][k]).
   * The weights (in[1]) are then int8 panels, [ceil(Co / 6)][ceil(K / 4)][6][4] bytes (K =
   * Cin * kh * kw, at most 65536; zero past Co and K), and the conv quantizes its f32 input as
   * it builds the u8 im2col panels [ceil(OH * OW / 16)][ceil(K / 4)][16][4] in the scratch:
   * u = clamp(nearbyint(x * fp[EMC_CONV_FP_Q8_INV]) + ZP, LO, HI), ZP (the zero point, the value
   * of the padding) and LO <= HI in [0, 255]; then out = (sum_k u * w - correction) * scale +
   * bias, residual, clamp and activation as for f32. Only for ungrouped convs that are not
   * depthwise, Winograd, transposed or with pairs, an input scale or plane means. */
  EMC_CONV_Q8,
  EMC_CONV_Q8_ZP,
  EMC_CONV_Q8_LO,
  EMC_CONV_Q8_HI,
  /* Version 9: 1 when in[1] holds a Winograd conv's plain weights [Co, Cin, 3, 3] (a constant
   * no other operator reads) and the runtime transforms them into the filters described under
   * EMC_CONV_WINOGRAD at init (cpu_wino_pack.c), 0 when the file stores the transform. */
  EMC_CONV_WINO_AT_LOAD,
  /* Version 10: 0, or the Winograd tile m (2 or 4) of an int8 conv (EMC_CONV_Q8: 3x3, stride 1,
   * undilated) that may run as an f32 Winograd conv instead: its channel table then has 3 * Co
   * words, the third part the weights' own scales s_w (so w = q * s_w, the f32 weights of the
   * program's dequantize), EMC_CONV_WINO_SLOTS and the scratch are sized for both forms, and a
   * CPU where f32 Winograd beats the int8 products (AVX-512 as two halves, Zen 4; or as the
   * backend's options say) transforms the int8 weights at init, as EMC_CONV_WINO_AT_LOAD does
   * plain ones (the same filters, bit for bit), and runs the conv as that Winograd conv. */
  EMC_CONV_Q8_WINO,
  /* Version 10: bits of an int8 conv's u8 activations (an int8 value between two int8 convs
   * never exists in f32). EMC_Q8_U8_IN: in[0] holds u8 values channels last, [N][H][W][cp] bytes
   * (cp = Cin rounded up to 4; the bytes past Cin are not read into any product that counts)
   * with this conv's ZP, LO, HI: the conv takes them as they are. EMC_Q8_U8_OUT: the output is
   * written the same way, [N][OH][OW][cpo] bytes, each the u8 value of the output's fake-quant
   * (the act must be EMC_ACT_FAKEQUANT, with no residual): q = clamp(nearbyint(clamp(y, fp[MIN],
   * fp[MAX]) * fp[INV_SCALE]) + fp[ZP], fp[QMIN], fp[QMAX]) + off, off = 128 when fp[QMIN] < 0
   * (int8) else 0, q within [0, 255]. Either tensor must be in the arena; its bytes fit the f32
   * tensor's storage (cp <= 4 * C). */
  EMC_CONV_Q8_U8
};
enum { EMC_Q8_U8_IN = 1, EMC_Q8_U8_OUT = 2 };
/* Conv2d fp[] slot (version 8, with EMC_CONV_Q8): 1 / the input's scale. */
enum { EMC_CONV_FP_Q8_INV = 2 };
/* GEMM ip[] slots: batch, M, K, N, element strides between batches of A and B (0 = shared);
 * version 13: EMC_GEMM_C_HEADS 1 writes out[b] interleaved, row r of product b at
 * y[(r * batch + b) * N] ([M, batch, N]: attention's heads back into rows as they are stored;
 * no residual), 0 (older: zero there) one product after the other. */
enum {
  EMC_GEMM_BATCH,
  EMC_GEMM_M,
  EMC_GEMM_K,
  EMC_GEMM_N,
  EMC_GEMM_A_BSTRIDE,
  EMC_GEMM_B_BSTRIDE,
  EMC_GEMM_A_PACKED,
  EMC_GEMM_B_PACKED,
  EMC_GEMM_C_HEADS
};
/*
 * Dynamic int8 linear ip[] slots (EMC_OP_DQ_LINEAR, version 13): y [M, N] = x [M, K] @ W^T + bias
 * with x quantized per row at run time as quantized_decomposed's
 * choose_qparams_per_token_asymmetric and quantize_per_token (em_q8_rowq_fn) and W int8 with a
 * scale per output channel. in[1] holds the int8 weights in blocks of 16 channels, [ceil(N /
 * 16)][ceil(K / 4)][16][4] bytes (zero past N and K); EMC_DQL_TABLE is 1 + the id of a constant of
 * 2 * N words: N f32 weight scales, then N int32 sums of each channel's weights. Then y = (sum (q -
 * zp) * w) * (s_row * s_w) + bias, the residual (in[3]) added and the activation applied as for
 * gemm. K is at most 65536.
 *
 * The quantized rows are an arena tensor of at least R = ceil(M * kp / 64) * 64 + 8 * M bytes
 * (kp = ceil(K / 4) * 4): [M][kp] u8 rows, then from byte ceil(M * kp / 64) * 64 the M int32 zero
 * points and M f32 scales. With EMC_DQL_QUANTIZED 0 the op quantizes in[0] (f32 x) into out[1];
 * with 1, in[0] is such a tensor an earlier dq linear wrote (linears reading one activation, as a
 * transformer's Q, K and V projections, quantize it once).
 *
 * EMC_DQL_HEAD_DIM: 0, or D (a multiple of 32 dividing N; no residual): y is written head-major,
 * [N / D][M][D] (the permute of attention's heads, [M, H, D] -> [H, M, D], done as it is stored);
 * with EMC_DQL_HEAD_T 1 (and no activation) each head transposed, [N / D][D][M] (attention's
 * K^T as the product Q K^T reads it).
 *
 * EMC_DQL_ROWQ (version 15): how x's rows are quantized. 0 (EMC_DQL_PER_TOKEN): per row, as above;
 * 1 (EMC_DQL_PER_TENSOR): with one scale and zero point for all of x, as quantized_decomposed's
 * choose_qparams.tensor (em_q8_tensor_qparams of x's minimum and maximum) and
 * quantize_per_tensor.tensor compute them (em_q8_rowt_fn; a non-finite scale makes every output
 * NaN); 2 (EMC_DQL_STATIC): with constant ones (x is the output of a static fake-quant with them,
 * so the rows get its int8 values back). Either way the table holds 5 more words after its 2 * N:
 * qmin, qmax (int32, -128 <= qmin < qmax <= 127), then eps (1) or the f32 scale (2), the int32 zero
 * point (2) and the f32 1 / scale (2).
 */
enum {
  EMC_DQL_M,
  EMC_DQL_K,
  EMC_DQL_N,
  EMC_DQL_TABLE,
  EMC_DQL_QUANTIZED,
  EMC_DQL_HEAD_DIM,
  EMC_DQL_HEAD_T,
  EMC_DQL_ROWQ
};
enum { EMC_DQL_PER_TOKEN, EMC_DQL_PER_TENSOR, EMC_DQL_STATIC }; /* EMC_DQL_ROWQ values */
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
  EMC_POOL_DIVISOR,
  /* Version 14 (older: zero there): 1 for a max pool of u8 values channels last, in and out
   * [N][H][W][cp] bytes in the arena (cp = C rounded up to 4), its act the fake-quant of its
   * input's own qparams (the max of the levels is the level of the max: the bytes are the
   * f32 pool's levels); 0: f32. */
  EMC_POOL_Q8
};
/* Binary ip[] slots: the emc_binary operation; version 14 (older: zero there): EMC_BINARY_Q8 1
 * for an int8 add on u8 activations channels last (in[0], in[1] and out[0] the same 4-d shape,
 * [N][H][W][cp] bytes in the arena, cp = C rounded up to 4, no broadcasting): y = the
 * fake-quant (the act, EMC_ACT_FAKEQUANT, its range mapped into [0, 255] as for int8 convs' u8
 * outputs) of (a - zp_a) * s_a + (b - zp_b) * s_b, each term exactly the f32 fake-quant value
 * its u8 stands for; EMC_BINARY_Q8_TABLE: 1 + the id of a constant [s_a, zp_a, s_b, zp_b] (the
 * zero points of the u8 values). fp[] slot: b when in[1] is -1. */
enum { EMC_BINARY_OP, EMC_BINARY_Q8, EMC_BINARY_Q8_TABLE };
enum { EMC_BINARY_FP_SCALAR = 2 };
/* Unary ip[] slots, version 16 (older: zero there): EMC_UNARY_Q8 1 for a table lookup from u8
 * activations channels last to u8 ones (in[0] and out[0] the same 4-d shape, [N][H][W][cp] bytes
 * in the arena, cp = C rounded up to 4, the channels past C the output's zero point), 2 from
 * u8 ones to f32 [N][C][H][W]: y = the act (EMC_ACT_FAKEQUANT or EMC_ACT_HARDSWISH_FQ, u8 out:
 * its range mapped into [0, 255] as for int8 convs' u8 outputs) of (x - zp) * s, the f32
 * fake-quant value the u8 x stands for; EMC_UNARY_Q8_TABLE: 1 + the id of a constant [s, zp]
 * (zp the u8 values' zero point). 0: f32. EMC_UNARY_PRE (version 16, either form, f32 too): 1 +
 * an activation without parameters (sigmoid, SiLU, GELU, GELU tanh, tanh, hardswish,
 * hardsigmoid) applied to x first, 0: none; EMC_UNARY_PRE_TIMES_X 1: that times x (x * sigmoid(x),
 * as PT2E's decomposed SiLU multiplies), so the op is act(pre(x)) or act(x * pre(x)): an
 * activation and the fake-quant after it as one op. */
enum { EMC_UNARY_Q8, EMC_UNARY_Q8_TABLE, EMC_UNARY_PRE, EMC_UNARY_PRE_TIMES_X };
/* Mean ip[] slots: x is [outer, len, inner] (inner 0 reads as 1), y [outer, inner];
 * EMC_MEAN_SUM (version 18): the reduction, an emc_reduce: 1 for the sum, not the mean, 2 the
 * maximum, 3 the minimum (NaN propagating; older: zero there). */
enum { EMC_MEAN_OUTER, EMC_MEAN_LEN, EMC_MEAN_INNER, EMC_MEAN_SUM };
enum emc_reduce { EMC_REDUCE_MEAN = 0, EMC_REDUCE_SUM = 1, EMC_REDUCE_MAX = 2, EMC_REDUCE_MIN = 3 };
/* Softmax ip[] slots (rows of cols floats; inner must be 1; log 0 / 1; scaled 0 / 1; the mask's
 * rows, 0 without one) and fp[] slot (the scale when scaled). */
enum {
  EMC_SOFTMAX_ROWS,
  EMC_SOFTMAX_COLS,
  EMC_SOFTMAX_INNER,
  EMC_SOFTMAX_LOG,
  EMC_SOFTMAX_SCALED,
  EMC_SOFTMAX_MASK_ROWS,
  /* 1 (version 17): a row whose every value (after the scale and mask) is -inf gives zeros, not
   * NaN: torch's _safe_softmax (scaled_dot_product_attention's decomposition). Last dim only,
   * not log. */
  EMC_SOFTMAX_SAFE
};
enum { EMC_SOFTMAX_FP_SCALE = 0 };
/* Layer / RMS norm ip[] slots (rows of cols floats) and fp[] slot (epsilon). */
enum { EMC_NORM_ROWS, EMC_NORM_COLS };
enum { EMC_NORM_FP_EPS = 0 };

/*
 * Per-tensor dynamic int8 fake-quant (EMC_OP_TENSOR_FQ, version 17): quantized_decomposed's
 * choose_qparams.tensor over all of x (ip rows x cols, the norms' slots; its quant range
 * ip[EMC_TFQ_QMIN], ip[EMC_TFQ_QMAX] within [-128, 127], eps fp[EMC_TFQ_FP_EPS], finite and
 * not negative), then quantize_per_tensor.tensor and dequantize_per_tensor.tensor with those
 * qparams, in f32 as the portable kernels (ExecuTorch's XNNPACKQuantizer's dynamic form before a
 * convolution). No activation.
 */
enum { EMC_TFQ_QMIN = 2, EMC_TFQ_QMAX = 3 };
enum { EMC_TFQ_FP_EPS = 2 };
/* Permute: ip[EMC_PERMUTE_DIMS + i] is the input dim of output dim i, for i < ndim. */
enum { EMC_PERMUTE_DIMS };
/* Cat ip[] slots: in[i] is [outer, ip[EMC_CAT_LEN + i]], i < n_in (1 to 4); out [outer, sum]. */
enum { EMC_CAT_OUTER, EMC_CAT_N_IN, EMC_CAT_LEN };
/* Slice ip[] slots: x [outer, len, inner] -> y [outer, out_len, inner], rows start + i * step;
 * EMC_SLICE_REVERSE (version 18; older: zero there): 1 takes those rows in reverse order (a
 * flip: y row i is x row start + (out_len - 1 - i) * step). */
enum {
  EMC_SLICE_OUTER,
  EMC_SLICE_LEN,
  EMC_SLICE_INNER,
  EMC_SLICE_START,
  EMC_SLICE_STEP,
  EMC_SLICE_OUT_LEN,
  EMC_SLICE_REVERSE
};
/* Embedding ip[] slots (EMC_OP_EMBEDDING, version 18): in[0] the f32 table [rows, cols], in[1]
 * n indices (an EMC_INPUT of dtype EMC_DTYPE_I64 or EMC_DTYPE_I32), out[0] [n, cols]: row i of
 * the output is the table's row indices[i]; an index outside [0, rows) fails the execute. */
enum { EMC_EMBED_ROWS, EMC_EMBED_COLS };
/* Resize ip[] slots (EMC_OP_RESIZE, version 18: upsample_nearest2d / upsample_bilinear2d):
 * x [planes, h, w] -> y [planes, oh, ow]. in[1] (oh x 4 floats) and in[2] (ow x 4), constants,
 * are each output row's and column's taps (i0, i1, l0, l1) as the exporter computed them with
 * ATen's coordinate rules: i0 <= i1 integers within the input, l0, l1 finite. EMC_RESIZE_MODE
 * 1, nearest: y = x[i0 of the row][i0 of the column]; 0, bilinear:
 * y = l0r * (l0c * x00 + l1c * x01) + l1r * (l0c * x10 + l1c * x11), in f32 as ATen; 2, adaptive
 * average pooling (_adaptive_avg_pool2d): y = the sum of x over rows i0..i1 and columns
 * i0..i1 (inclusive, row by row) divided by the window's element count. */
enum {
  EMC_RESIZE_PLANES,
  EMC_RESIZE_H,
  EMC_RESIZE_W,
  EMC_RESIZE_OH,
  EMC_RESIZE_OW,
  EMC_RESIZE_MODE
};
enum { EMC_RESIZE_MODE_BILINEAR, EMC_RESIZE_MODE_NEAREST, EMC_RESIZE_MODE_ADAPTIVE_AVG };
/* Gather (EMC_OP_GATHER, version 18): in[1] a constant of out's element count, each an integer
 * offset into x (within [0, numel(x)), at most 2^24, exact in f32): y[i] = x[in[1][i]]. The
 * exporter's advanced indexing, gathers and strided views by constant indices. No parameters. */
/* Pad ip[] slots: x [outer, h, w] -> y [outer, top + h + bottom, left + w + right], the new
 * elements fp[EMC_PAD_FP_VALUE]. */
enum {
  EMC_PAD_OUTER,
  EMC_PAD_H,
  EMC_PAD_W,
  EMC_PAD_TOP,
  EMC_PAD_BOTTOM,
  EMC_PAD_LEFT,
  EMC_PAD_RIGHT
};
enum { EMC_PAD_FP_VALUE = 2 }; /* fp[0], fp[1]: the activation's, as every kind's */
/* Channel affine ip[] slots: x and y [n, c, inner]. */
enum { EMC_AFFINE_N, EMC_AFFINE_C, EMC_AFFINE_INNER };
/* How many slots from ip[0] on a kind's check requires to be non-negative (params_nonneg). */
enum {
  EMC_CONV_N_PARAMS = EMC_CONV_Q8_U8 + 1,
  EMC_GEMM_N_PARAMS = EMC_GEMM_C_HEADS + 1,
  EMC_POOL_N_PARAMS = EMC_POOL_Q8 + 1,
  EMC_SLICE_N_PARAMS = EMC_SLICE_REVERSE + 1,
  EMC_EMBED_N_PARAMS = EMC_EMBED_COLS + 1,
  EMC_RESIZE_N_PARAMS = EMC_RESIZE_MODE + 1,
  EMC_PAD_N_PARAMS = EMC_PAD_RIGHT + 1,
  EMC_AFFINE_N_PARAMS = EMC_AFFINE_INNER + 1,
  EMC_DQL_N_PARAMS = EMC_DQL_ROWQ + 1
};

enum emc_binary {
  EMC_BIN_ADD = 0,
  EMC_BIN_SUB = 1,
  EMC_BIN_MUL = 2,
  EMC_BIN_DIV = 3,
  EMC_BIN_RSUB = 4
};

/* Activation applied to an operator's output; clamp bounds in fp[EMC_ACT_FP_MIN],
 * fp[EMC_ACT_FP_MAX]. */
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
  EMC_ACT_FAKEQUANT = 14,    /* version 8: int8 Q/DQ pair, see below */
  EMC_ACT_HARDSWISH_FQ = 15, /* version 11: hardswish, then EMC_ACT_FAKEQUANT */
  EMC_ACT_LEAKY_RELU = 16,   /* version 17: x > 0 ? x : x * fp[ALPHA] */
  EMC_ACT_ELU = 17,          /* version 17: see below */
  EMC_ACT_CUBE = 18,         /* version 17: (x * x) * x, as ATen's pow(x, 3) */
  EMC_ACT_ERF = 19,          /* version 18: erf(x) */
  EMC_ACT_RECIPROCAL = 20,   /* version 18: 1 / x */
  EMC_ACT_SIGN = 21,         /* version 18: (x > 0) - (x < 0), as ATen's (NaN: 0) */
  EMC_ACT_SOFTPLUS = 22,     /* version 18: ATen's softplus, beta fp[ALPHA], threshold fp[4] */
  EMC_ACT_MISH = 23,         /* version 18: x * tanh(softplus(x)) */
  EMC_ACT_END
};
enum { EMC_ACT_FP_MIN = 0, EMC_ACT_FP_MAX = 1 };

/*
 * EMC_ACT_FAKEQUANT (version 8): a quantize_per_tensor -> dequantize_per_tensor pair with one set
 * of qparams, applied to the output in float: v = clamp(x, fp[MIN], fp[MAX]) (a fused relu /
 * relu6; -inf, inf when none), q = clamp(nearbyint(v * fp[INV_SCALE]) + fp[ZP], fp[QMIN],
 * fp[QMAX]) (NaN -> QMIN), out = (q - fp[ZP]) * fp[SCALE] — the portable kernels' f32 rounding
 * step for step, so an int8 Q/DQ program runs at float speed with its quantization intact. The
 * slots sit above the binary op's scalar (fp[2]).
 *
 * EMC_ACT_HARDSWISH_FQ (version 11): x is first replaced by (x * clamp(x + 3, 0, 6)) / 6, the
 * steps of ATen's decomposed hardswish in f32 (a true division, so the quantized values are the
 * portable kernels'), then fake-quantized as above with the same slots: the hardswish of an int8
 * Q/DQ graph between its two fake-quants, in one pass instead of three.
 */
enum {
  EMC_ACT_FP_INV_SCALE = 3,
  EMC_ACT_FP_SCALE = 4,
  EMC_ACT_FP_ZP = 5,
  EMC_ACT_FP_QMIN = 6,
  EMC_ACT_FP_QMAX = 7
};

/*
 * EMC_ACT_LEAKY_RELU and EMC_ACT_ELU (version 17), in the same slots above the binary op's
 * scalar: leaky ReLU's negative slope in fp[ALPHA]; ELU (ATen's elu: alpha, scale, input_scale)
 * x <= 0 ? expm1(x * fp[ELU_INPUT_SCALE]) * fp[ALPHA] * fp[ELU_SCALE] : x * fp[ELU_SCALE], in
 * f32 (expm1 within a few f32 ulps of the portable kernel's double one). Every value finite.
 */
enum { EMC_ACT_FP_ALPHA = 3, EMC_ACT_FP_ELU_SCALE = 4, EMC_ACT_FP_ELU_INPUT_SCALE = 5 };
enum { EMC_ACT_FP_THRESHOLD = 4 }; /* EMC_ACT_SOFTPLUS's */

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

/*
 * Typed views of an operator's parameter slots: the operators read ip[] and fp[] through these
 * (never by slot number), so the layout above is spelled out once. A view reads the slots as
 * they are: the checks (cpu_op_*.c) decide whether their values are valid.
 */

/* conv2d (EMC_OP_CONV2D). */
typedef struct emc_conv_params {
  int64_t groups;         /* EMC_CONV_GROUPS: input and output channels split into this many */
  int64_t kh, kw;         /* EMC_CONV_KH, EMC_CONV_KW: kernel height and width */
  int64_t sh, sw;         /* EMC_CONV_SH, EMC_CONV_SW: stride */
  int64_t ph, pw;         /* EMC_CONV_PH, EMC_CONV_PW: zero padding before (and after) */
  int64_t eh, ew;         /* their high bits: the extra zero rows / columns after */
  int64_t dh, dw;         /* EMC_CONV_DH, EMC_CONV_DW: dilation */
  int64_t depthwise;      /* EMC_CONV_DEPTHWISE: 1 for one plane per channel (per-plane path) */
  int64_t scratch_off;    /* EMC_CONV_SCRATCH_OFF: the scratch's byte offset in the arena */
  int64_t scratch_nbytes; /* EMC_CONV_SCRATCH_NBYTES: its bytes */
  int64_t transposed;     /* EMC_CONV_TRANSPOSED: 1 for C^T = im2col^T @ W^T (small maps) */
  int64_t winograd;       /* EMC_CONV_WINOGRAD: 0, or the Winograd output tile m (2 or 4) */
  int64_t wino_slots;     /* EMC_CONV_WINO_SLOTS: Winograd scratch slots */
  int64_t pairs_id;       /* EMC_CONV_PAIRS - 1: the bf16-pair weights' tensor id, -1: none */
  int64_t in_scale_id;    /* EMC_CONV_IN_SCALE - 1: the input scale's tensor id, -1: none */
  int64_t q8_id;          /* EMC_CONV_Q8 - 1: an int8 conv's channel table's id, -1: none */
  int64_t q8_zp, q8_lo, q8_hi; /* EMC_CONV_Q8_ZP, _LO, _HI: the u8 input's zero point, range */
  float q8_inv;                /* fp[EMC_CONV_FP_Q8_INV]: 1 / the input's scale */
  int64_t wino_at_load;        /* EMC_CONV_WINO_AT_LOAD: 1 when init transforms the weights */
  int64_t q8_wino;             /* EMC_CONV_Q8_WINO: an int8 conv's Winograd alternative, 0: none */
  int64_t q8_u8;               /* EMC_CONV_Q8_U8: EMC_Q8_U8_IN | EMC_Q8_U8_OUT, 0: f32 both sides */
} emc_conv_params;

static inline emc_conv_params emc_conv_params_of(const emc_op *op) {
  const int32_t *ip = op->ip;
  return (emc_conv_params){.groups = ip[EMC_CONV_GROUPS],
                           .kh = ip[EMC_CONV_KH],
                           .kw = ip[EMC_CONV_KW],
                           .sh = ip[EMC_CONV_SH],
                           .sw = ip[EMC_CONV_SW],
                           .ph = ip[EMC_CONV_PH] & 0xFFFF,
                           .pw = ip[EMC_CONV_PW] & 0xFFFF,
                           .eh = (ip[EMC_CONV_PH] >> 16) & 0x7FFF,
                           .ew = (ip[EMC_CONV_PW] >> 16) & 0x7FFF,
                           .dh = ip[EMC_CONV_DH],
                           .dw = ip[EMC_CONV_DW],
                           .depthwise = ip[EMC_CONV_DEPTHWISE],
                           .scratch_off = ip[EMC_CONV_SCRATCH_OFF],
                           .scratch_nbytes = ip[EMC_CONV_SCRATCH_NBYTES],
                           .transposed = ip[EMC_CONV_TRANSPOSED],
                           .winograd = ip[EMC_CONV_WINOGRAD],
                           .wino_slots = ip[EMC_CONV_WINO_SLOTS],
                           .pairs_id = (int64_t)ip[EMC_CONV_PAIRS] - 1,
                           .in_scale_id = (int64_t)ip[EMC_CONV_IN_SCALE] - 1,
                           .q8_id = (int64_t)ip[EMC_CONV_Q8] - 1,
                           .q8_zp = ip[EMC_CONV_Q8_ZP],
                           .q8_lo = ip[EMC_CONV_Q8_LO],
                           .q8_hi = ip[EMC_CONV_Q8_HI],
                           .wino_at_load = ip[EMC_CONV_WINO_AT_LOAD],
                           .q8_wino = ip[EMC_CONV_Q8_WINO],
                           .q8_u8 = ip[EMC_CONV_Q8_U8],
                           .q8_inv = op->fp[EMC_CONV_FP_Q8_INV]};
}

/* gemm (EMC_OP_GEMM): out[b] = A[b] @ B[b] for b < batch. */
typedef struct emc_gemm_params {
  int64_t batch;     /* EMC_GEMM_BATCH: products */
  int64_t m, k, n;   /* EMC_GEMM_M, EMC_GEMM_K, EMC_GEMM_N: A [m, k], B [k, n] */
  int64_t a_bstride; /* EMC_GEMM_A_BSTRIDE: elements between A[b] and A[b + 1] (0: shared) */
  int64_t b_bstride; /* EMC_GEMM_B_BSTRIDE: the same for B */
  int64_t a_packed;  /* EMC_GEMM_A_PACKED: 1 when A is in 6-row panels */
  int64_t b_packed;  /* EMC_GEMM_B_PACKED: 1 when B is in 16-column panels */
  int64_t c_heads;   /* EMC_GEMM_C_HEADS: 1 when the products' rows interleave, [M, batch, N] */
} emc_gemm_params;

static inline emc_gemm_params emc_gemm_params_of(const emc_op *op) {
  const int32_t *ip = op->ip;
  return (emc_gemm_params){.batch = ip[EMC_GEMM_BATCH],
                           .m = ip[EMC_GEMM_M],
                           .k = ip[EMC_GEMM_K],
                           .n = ip[EMC_GEMM_N],
                           .a_bstride = ip[EMC_GEMM_A_BSTRIDE],
                           .b_bstride = ip[EMC_GEMM_B_BSTRIDE],
                           .a_packed = ip[EMC_GEMM_A_PACKED],
                           .b_packed = ip[EMC_GEMM_B_PACKED],
                           .c_heads = ip[EMC_GEMM_C_HEADS]};
}

/* dynamic int8 linear (EMC_OP_DQ_LINEAR). */
typedef struct emc_dql_params {
  int64_t m, k, n;   /* EMC_DQL_M, _K, _N: x [m, k], y [m, n] */
  int64_t table_id;  /* EMC_DQL_TABLE - 1: the channel table's tensor id */
  int64_t quantized; /* EMC_DQL_QUANTIZED: 1 when in[0] holds quantized rows, 0: f32 x */
  int64_t head_dim;  /* EMC_DQL_HEAD_DIM: D for a head-major output, 0: row-major */
  int64_t head_t;    /* EMC_DQL_HEAD_T: 1 when each head is stored transposed, [D][M] */
  int64_t rowq;      /* EMC_DQL_ROWQ: EMC_DQL_PER_TOKEN, _PER_TENSOR or _STATIC */
} emc_dql_params;

static inline emc_dql_params emc_dql_params_of(const emc_op *op) {
  const int32_t *ip = op->ip;
  return (emc_dql_params){.m = ip[EMC_DQL_M],
                          .k = ip[EMC_DQL_K],
                          .n = ip[EMC_DQL_N],
                          .table_id = (int64_t)ip[EMC_DQL_TABLE] - 1,
                          .quantized = ip[EMC_DQL_QUANTIZED],
                          .head_dim = ip[EMC_DQL_HEAD_DIM],
                          .head_t = ip[EMC_DQL_HEAD_T],
                          .rowq = ip[EMC_DQL_ROWQ]};
}

/* max / avg pool (EMC_OP_MAXPOOL2D, EMC_OP_AVGPOOL2D). */
typedef struct emc_pool2d_params {
  int64_t kh, kw;      /* EMC_POOL_KH, EMC_POOL_KW: window */
  int64_t sh, sw;      /* EMC_POOL_SH, EMC_POOL_SW: stride */
  int64_t ph, pw;      /* EMC_POOL_PH, EMC_POOL_PW: padding, each side */
  int64_t dh, dw;      /* EMC_POOL_DH, EMC_POOL_DW: dilation */
  int64_t include_pad; /* EMC_POOL_INCLUDE_PAD: avg pool counts the padding (count_include_pad) */
  int64_t divisor;     /* EMC_POOL_DIVISOR: avg pool's divisor_override, 0: none */
  int64_t q8;          /* EMC_POOL_Q8: 1 for a max pool of u8 values channels last */
} emc_pool2d_params;

static inline emc_pool2d_params emc_pool2d_params_of(const emc_op *op) {
  const int32_t *ip = op->ip;
  return (emc_pool2d_params){.kh = ip[EMC_POOL_KH],
                             .kw = ip[EMC_POOL_KW],
                             .sh = ip[EMC_POOL_SH],
                             .sw = ip[EMC_POOL_SW],
                             .ph = ip[EMC_POOL_PH],
                             .pw = ip[EMC_POOL_PW],
                             .dh = ip[EMC_POOL_DH],
                             .dw = ip[EMC_POOL_DW],
                             .include_pad = ip[EMC_POOL_INCLUDE_PAD],
                             .divisor = ip[EMC_POOL_DIVISOR],
                             .q8 = ip[EMC_POOL_Q8]};
}

/* binary (EMC_OP_BINARY). */
typedef struct emc_binary_params {
  int64_t op;          /* EMC_BINARY_OP: an emc_binary */
  int64_t q8;          /* EMC_BINARY_Q8: 1 for an int8 add on u8 activations */
  int64_t q8_table_id; /* EMC_BINARY_Q8_TABLE - 1: its [s_a, zp_a, s_b, zp_b], -1: none */
  float scalar;        /* fp[EMC_BINARY_FP_SCALAR]: b when in[1] is -1 */
} emc_binary_params;

static inline emc_binary_params emc_binary_params_of(const emc_op *op) {
  return (emc_binary_params){.op = op->ip[EMC_BINARY_OP],
                             .q8 = op->ip[EMC_BINARY_Q8],
                             .q8_table_id = (int64_t)op->ip[EMC_BINARY_Q8_TABLE] - 1,
                             .scalar = op->fp[EMC_BINARY_FP_SCALAR]};
}

/* unary (EMC_OP_UNARY). */
typedef struct emc_unary_params {
  int64_t q8;          /* EMC_UNARY_Q8: 0 f32, 1 u8 -> u8, 2 u8 -> f32 */
  int64_t q8_table_id; /* EMC_UNARY_Q8_TABLE - 1: its [s, zp], -1: none */
  int64_t pre;         /* EMC_UNARY_PRE - 1: an emc_act applied first, -1: none */
  int64_t times_x;     /* EMC_UNARY_PRE_TIMES_X */
} emc_unary_params;

static inline emc_unary_params emc_unary_params_of(const emc_op *op) {
  return (emc_unary_params){.q8 = op->ip[EMC_UNARY_Q8],
                            .q8_table_id = (int64_t)op->ip[EMC_UNARY_Q8_TABLE] - 1,
                            .pre = (int64_t)op->ip[EMC_UNARY_PRE] - 1,
                            .times_x = op->ip[EMC_UNARY_PRE_TIMES_X]};
}

/* mean (EMC_OP_MEAN): [outer, len, inner] -> [outer, inner]. */
typedef struct emc_mean_params {
  int64_t outer; /* EMC_MEAN_OUTER */
  int64_t len;   /* EMC_MEAN_LEN: the reduced dim */
  int64_t inner; /* EMC_MEAN_INNER: as stored (0 and 1 both mean 1) */
  int64_t sum;   /* EMC_MEAN_SUM: an emc_reduce (1 the sum, 2 the max, 3 the min) */
} emc_mean_params;

static inline emc_mean_params emc_mean_params_of(const emc_op *op) {
  const int32_t *ip = op->ip;
  return (emc_mean_params){.outer = ip[EMC_MEAN_OUTER],
                           .len = ip[EMC_MEAN_LEN],
                           .inner = ip[EMC_MEAN_INNER],
                           .sum = ip[EMC_MEAN_SUM]};
}

/* softmax / log-softmax (EMC_OP_SOFTMAX) over rows: softmax(x * scale + mask). */
typedef struct emc_softmax_params {
  int64_t rows;      /* EMC_SOFTMAX_ROWS */
  int64_t cols;      /* EMC_SOFTMAX_COLS: the softmax axis */
  int64_t inner;     /* EMC_SOFTMAX_INNER: must be 1 (the axis is the last) */
  int64_t log;       /* EMC_SOFTMAX_LOG: 1 for log-softmax */
  int64_t scaled;    /* EMC_SOFTMAX_SCALED: 1 when x is multiplied by scale first */
  int64_t mask_rows; /* EMC_SOFTMAX_MASK_ROWS: rows of the mask in[1] (repeating), 0: none */
  int64_t safe;      /* EMC_SOFTMAX_SAFE: 1 for torch's _safe_softmax */
  float scale;       /* fp[EMC_SOFTMAX_FP_SCALE] */
} emc_softmax_params;

static inline emc_softmax_params emc_softmax_params_of(const emc_op *op) {
  const int32_t *ip = op->ip;
  return (emc_softmax_params){.rows = ip[EMC_SOFTMAX_ROWS],
                              .cols = ip[EMC_SOFTMAX_COLS],
                              .inner = ip[EMC_SOFTMAX_INNER],
                              .log = ip[EMC_SOFTMAX_LOG],
                              .scaled = ip[EMC_SOFTMAX_SCALED],
                              .mask_rows = ip[EMC_SOFTMAX_MASK_ROWS],
                              .safe = ip[EMC_SOFTMAX_SAFE],
                              .scale = op->fp[EMC_SOFTMAX_FP_SCALE]};
}

/* layer / RMS norm (EMC_OP_LAYERNORM, EMC_OP_RMSNORM) over rows. */
typedef struct emc_norm_params {
  int64_t rows; /* EMC_NORM_ROWS */
  int64_t cols; /* EMC_NORM_COLS: the normalized length (and the weight's and bias's) */
  float eps;    /* fp[EMC_NORM_FP_EPS] */
} emc_norm_params;

static inline emc_norm_params emc_norm_params_of(const emc_op *op) {
  return (emc_norm_params){
      .rows = op->ip[EMC_NORM_ROWS], .cols = op->ip[EMC_NORM_COLS], .eps = op->fp[EMC_NORM_FP_EPS]};
}

/* permute (EMC_OP_PERMUTE). */
typedef struct emc_permute_params {
  int64_t dims[EMC_MAX_DIMS]; /* EMC_PERMUTE_DIMS + i: the input dim of output dim i */
} emc_permute_params;

static inline emc_permute_params emc_permute_params_of(const emc_op *op) {
  emc_permute_params p;
  for (int i = 0; i < EMC_MAX_DIMS; i++) p.dims[i] = op->ip[EMC_PERMUTE_DIMS + i];
  return p;
}

/* cat (EMC_OP_CAT) along one dim. */
typedef struct emc_cat_params {
  int64_t outer;  /* EMC_CAT_OUTER */
  int64_t n_in;   /* EMC_CAT_N_IN: inputs, 1 to 4 */
  int64_t len[4]; /* EMC_CAT_LEN + i: input i's row length */
} emc_cat_params;

static inline emc_cat_params emc_cat_params_of(const emc_op *op) {
  const int32_t *ip = op->ip;
  return (emc_cat_params){
      .outer = ip[EMC_CAT_OUTER],
      .n_in = ip[EMC_CAT_N_IN],
      .len = {ip[EMC_CAT_LEN], ip[EMC_CAT_LEN + 1], ip[EMC_CAT_LEN + 2], ip[EMC_CAT_LEN + 3]}};
}

/* slice (EMC_OP_SLICE) of the middle dim. */
typedef struct emc_slice_params {
  int64_t outer;   /* EMC_SLICE_OUTER */
  int64_t len;     /* EMC_SLICE_LEN: the input's middle dim */
  int64_t inner;   /* EMC_SLICE_INNER */
  int64_t start;   /* EMC_SLICE_START: the first row taken */
  int64_t step;    /* EMC_SLICE_STEP */
  int64_t out_len; /* EMC_SLICE_OUT_LEN: rows taken */
  int64_t reverse; /* EMC_SLICE_REVERSE: 1 for the rows in reverse order */
} emc_slice_params;

static inline emc_slice_params emc_slice_params_of(const emc_op *op) {
  const int32_t *ip = op->ip;
  return (emc_slice_params){.outer = ip[EMC_SLICE_OUTER],
                            .len = ip[EMC_SLICE_LEN],
                            .inner = ip[EMC_SLICE_INNER],
                            .start = ip[EMC_SLICE_START],
                            .step = ip[EMC_SLICE_STEP],
                            .out_len = ip[EMC_SLICE_OUT_LEN],
                            .reverse = ip[EMC_SLICE_REVERSE]};
}

/* channel affine (EMC_OP_CHANNEL_AFFINE): y[b][c] = x[b][c] * scale[c] + shift[c]. */
typedef struct emc_affine_params {
  int64_t n;     /* EMC_AFFINE_N: images */
  int64_t c;     /* EMC_AFFINE_C: channels */
  int64_t inner; /* EMC_AFFINE_INNER: elements of a channel's plane */
} emc_affine_params;

static inline emc_affine_params emc_affine_params_of(const emc_op *op) {
  const int32_t *ip = op->ip;
  return (emc_affine_params){
      .n = ip[EMC_AFFINE_N], .c = ip[EMC_AFFINE_C], .inner = ip[EMC_AFFINE_INNER]};
}

#endif /* EMBER_BACKENDS_CPU_EMC_FORMAT_H */
