/*
 * linear_q.h — internal interface of the weight-quantized linear kernels ember::linear_q4.out and
 * ember::linear_q8.out (f32 in and out, 4-bit or int8 weights; python/ember/quant/llm.py holds the
 * reference and the exact semantics):
 *
 *   a_scale[m,b] = max_{k in b} |x[m,k]| / 127, qa = round_half_even(x * (1 / a_scale))  (b: 32)
 *   y[m,n]       = sum_b (a_scale[m,b] * w_scale[n, g(b)]) * sum_{k in b} qa[m,k] qw[n,k]
 *                  (+ sum_g offsets[n,g] * S[m,g], S[m,g] = sum_{b in g} a_scale[m,b] sum_{k in b}
 * qa)
 *                  (+ bias)
 *
 * The optional offsets (affine weights w = w_scale * q + offset, per group) are added from per-row
 * group sums S taken off the quantized activations: by the decode micro-kernel (AVX-512, M = 1),
 * the prefill tiles, or else a pass of the driver after the micro-kernels.
 *
 * Weights: q4 is uint8 [N, K/2], element 2j in the HIGH nibble of byte j and 2j+1 in the LOW one,
 * each stored as q + 8 (ExecuTorch's embedding_4bit layout); q8 is int8 [N, K]. Weight scales are
 * f32 or f16 [N, K/group] (one per row when per channel: group = K), the offsets of the scales'
 * dtype. An f16 value means exactly its f32 conversion (the arithmetic above is unchanged), and
 * memory holds and streams 2 bytes per scale (q4 groups of 32: 4.5 bits per weight symmetric, 5
 * affine). The AVX-512 decode micro-kernel (M = 1, decode_f16) reads them itself, 16 groups'
 * converted at a time; elsewhere the driver converts a chunk of columns' scales and offsets at a
 * time into f32 on the running thread's stack (the ISA's em_qcvt_fn) and runs the same
 * micro-kernels on it. The prefill route converts while re-laying out its tiles.
 *
 * Activations are quantized once per row into scratch. The portable kernels read the plain form
 * (qa [K] int8 then a_scale [K/32] f32). The SIMD micro-kernels read a "packed" row built for the
 * weight layout, in 32-bit lanes of 4 weight bytes (8 q4 or 4 q8 elements), every array padded
 * with zeros to kbp = round_up(weight bytes per row, 64):
 *
 *   a0   int8  [kbp]     q4: qa[2j+1] (pairs with the low nibble of byte j); q8: qa[j]
 *   a1   int8  [kbp]     q4 only: qa[2j] (pairs with the high nibble)
 *   corr int32 [kbp/4]   -off * (sum of the activations of lane l): off = 8 (q4) or 128 (q8), so
 *                        that a lane's dot with the offset (unsigned) weights q + off is exact
 *   sl   f32   [kbp/4]   a_scale of lane l's block
 *   sf   f32   [kbp/4]   with offsets: a_scale * (sum of lane l's activations), so the offsets'
 *                        term is one more lane-wise FMA in the decode micro-kernel
 *   bc   int32 [K/32]    -off * (sum of the activations of block b): the corrections of the
 *                        prefill micro-kernels, whose lanes are weight columns (padded to 64 bytes)
 *   sb   f32   [K/32]    a_scale of block b (the folded decode's, p->fold; padded to 64 bytes)
 *
 * Prefill (M >= EM_QPREFILL_MIN_M rows, where the ISA has it) takes another route: the weights of a
 * tile of EM_QTILE_N columns are re-laid out once per call into a column-interleaved scratch tile
 * (one unsigned byte per element, 32-bit lanes = columns) that every activation row then sweeps,
 * with int32 sums per block, the scales applied once per block and the offsets once per group.
 *
 * The micro-kernel and ISA for a process are chosen once (em_linear_q_isa) from the CPU backend's
 * CPUID probe (backends/cpu/cpu_config.c, EMBER_CPU_ISA forces a lower ISA) plus the AVX-512
 * VNNI/BW feature bits.
 */
#ifndef EMBER_KERNELS_QUANTIZED_LINEAR_Q_H
#define EMBER_KERNELS_QUANTIZED_LINEAR_Q_H

#include <stddef.h>
#include <stdint.h>

#include "ember/kernel.h"

#define EM_QA_BLOCK 32 /* activation quantization block (elements) */

/* Geometry shared by the micro-kernels of one call. */
typedef struct em_qgemm_params {
  size_t kbytes;   /* weight bytes per row: K/2 (q4) or K (q8) */
  size_t a_stride; /* bytes between packed activation rows */
  size_t off_a1;   /* offsets of a1, corr and sl in a packed row (bytes) */
  size_t off_corr;
  size_t off_sl;
  size_t off_bc;
  size_t off_sb; /* f32 [K/32]: a_scale of each block (the folded decode reads them, p->fold) */
  size_t off_sf; /* with offsets: f32 [kbp/4] a_scale * (activation sum) of lane l */
  const void *ws_base;  /* the whole scales tensor, and the offsets shaped like it: a kernel */
  const void *off_base; /* that fuses the offsets (M = 1) finds column n's at the same index;
                           off_base NULL: no offsets, or the driver adds them */
  int half;             /* the scales (ws, ws_base) and offsets are f16: only with mr == 1 on a
                           configuration with decode_f16 */
  const float *gsum;    /* with off_base: the activation row's group sums S [K / group] */
  size_t w_stride;      /* bytes between weight rows */
  size_t ws_stride;     /* elements between weight-scale rows */
  unsigned gl_shift;    /* log2(lanes per weight-scale group): group/8 (q4) or group/4 (q8) lanes;
                          63 when per channel (every lane in group 0) */
  int pairs;            /* mr == 1 on a configuration with decode_pairs: stream the tile's weight
                           rows two at a time (same results; the faster memory pattern on Zen 4) */
  int fold;             /* with half and groups of 32 (= the activation blocks), mr == 1: the
                           folded decode, which reads gsum (also without offsets) and off_sb */
} em_qgemm_params;

/*
 * A micro-kernel: y[i * ldy + j] = sum over the row of packed activations a + i * a_stride against
 * weight row w + j * w_stride (scales ws + j * ws_stride elements: f32, or f16 when p->half), +
 * bias[j] when bias is not NULL, for i < mr <= MR and j < nc <= NR. Reads no weight byte past
 * kbytes of a row.
 */
typedef void (*em_qgemm_ukernel_fn)(size_t mr, size_t nc, const uint8_t *a, const uint8_t *w,
                                    const void *ws, const float *bias, float *y, size_t ldy,
                                    const em_qgemm_params *p);

/*
 * Quantizes one f32 row x [k] straight into its packed form (row: a_stride bytes, 64-aligned),
 * exactly as the portable quantization followed by the generic packing would (linear_q.c).
 */
typedef void (*em_qpack_fn)(const float *x, size_t k, uint8_t *row, const em_qgemm_params *p);

/* Rows at which the prefill route (column-interleaved tiles) takes over, and its tile width. */
#define EM_QPREFILL_MIN_M 4
#define EM_QTILE_N        32

/* Everything one linear_q call's prefill route reads and writes. */
typedef struct em_qprefill_args {
  int bits;
  size_t m, n, k, group; /* group = k when per channel */
  const uint8_t *w;      /* weights [n, kbytes] */
  const float *ws;       /* scales [n, k / group] */
  const float *offsets;  /* [n, k / group] or NULL */
  const float *bias;     /* [n] or NULL */
  const uint8_t *packed; /* m packed activation rows (a_stride bytes each) */
  const float *gsum;     /* [m, k / group] group sums S (with offsets) */
  float *y;              /* [m, n] */
  const uint16_t *ws16;  /* f16 scales [n, k / group] instead of ws (ws NULL), or NULL */
  const uint16_t *off16; /* f16 offsets instead of offsets, or NULL */
  const em_qgemm_params *p;
} em_qprefill_args;

/* y[:, n0..n1) of a prefill call (n0 a multiple of EM_QTILE_N), offsets and bias included. */
typedef void (*em_qprefill_fn)(const em_qprefill_args *a, size_t n0, size_t n1);

/* y[r, n0..n1) += sum_g offsets[n, g] * gsum[r, g] (+ bias[n]) for r < m (groups in order). */
typedef void (*em_qoffsets_fn)(size_t m, size_t n0, size_t n1, size_t groups, const float *gsum,
                               const float *offsets, const float *bias, float *y, size_t ldy);

/* dst[i] = the f32 value of the IEEE binary16 src[i] for i < n (exact, subnormals, inf and NaN
 * included). */
typedef void (*em_qcvt_fn)(const uint16_t *src, float *dst, size_t n);

/* One ISA's micro-kernels; a NULL gemm means "use the portable kernel", a NULL pack "quantize and
 * pack in portable C". */
typedef struct em_qlinear_config {
  const char *isa; /* "portable", "avx2", "avx512vnni" */
  size_t mr, nr;   /* tile of the gemm micro-kernels */
  em_qgemm_ukernel_fn gemm_q4;
  em_qgemm_ukernel_fn gemm_q8;
  em_qpack_fn pack_q4;
  em_qpack_fn pack_q8;
  em_qprefill_fn prefill; /* NULL: prefill through gemm_q4 / gemm_q8 too */
  em_qoffsets_fn offsets; /* NULL: the portable loop */
  int fused_offsets;      /* gemm with mr == 1 adds the offsets itself (params off_base) */
  int decode_f16;         /* gemm with mr == 1 reads f16 scales and offsets itself (params half) */
  em_qcvt_fn cvt_f16;     /* NULL: the portable conversion */
  int decode_pairs;       /* gemm with mr == 1 can stream its rows in pairs (params pairs) */
} em_qlinear_config;

/*
 * Forces the micro-kernels of `isa` ("portable", "avx2", "avx512vnni") for the process, or
 * restores the automatic choice when isa is NULL (tests and benchmarks; not thread-safe against
 * running kernels). EM_ERR_NOT_SUPPORTED when this CPU or build lacks the ISA.
 */
em_status em_linear_q_force_isa(const char *isa);

/*
 * Forces the decode micro-kernel's row order (tests and benchmarks; not thread-safe against
 * running kernels): 1 streams weight rows in pairs wherever the ISA can, 0 never, -1 restores the
 * automatic choice (pairs on CPUs that execute AVX-512 as two halves, Zen 4, for rows of at least
 * EM_QL_PAIRS_MIN_ROW_BYTES while the packed activations a pair re-reads fit in
 * EM_QL_PAIRS_MAX_ACT_BYTES). Any other value:
 * EM_ERR_INVALID_ARGUMENT.
 */
em_status em_linear_q_force_pairs(int mode);

/* Most bytes of packed activations one pass of a pair may read for the automatic choice to
 * stream in pairs: beyond it they no longer stay in L1 beside the weight stream (measured on
 * Zen 4: K = 8192 q4 unfolded, 16 KiB a pass, is slower in pairs; folded, 8 KiB, faster). */
#define EM_QL_PAIRS_MAX_ACT_BYTES 8192
/* Fewest weight bytes a row must have for the automatic choice to stream in pairs: shorter rows
 * run faster through the eight-row tile, which loads each chunk's activations once for eight rows
 * (measured on Zen 4, 1 thread, f16 scales, weights from DRAM, pairs / eight rows: SmolLM2's
 * 288-byte q4 rows, K = 576, 16.6-17.9 / 19.2-20.4 GB/s; its 768-byte ones, K = 1536, 21.3-22.0 /
 * 16.2-19.9; 576-byte q8 rows mixed, within 10 % either way, left in pairs). */
#define EM_QL_PAIRS_MIN_ROW_BYTES 512
/* Past this many, the pairs' weight prefetches go to L2 instead of L1, which then keeps the
 * activations (measured on Zen 4: K = 8192 q4 folded, 8 KiB, 19 -> 23 GB/s; K = 2048, 2-6 KiB,
 * faster into L1). */
#define EM_QL_PAIRS_L1_ACT_BYTES 6144

/* Bytes of packed activations one pass over a row reads in the decode micro-kernel: a0 (and a1,
 * q4), plus corr and sl unless folded. */
static inline size_t em_qpair_act_bytes(int bits, size_t kbytes, int fold) {
  return kbytes * (size_t)(fold ? (bits == 4 ? 2 : 1) : (bits == 4 ? 4 : 3));
}

/* The ISA the linear_q kernels use now (detected once on first use). */
const char *em_linear_q_isa(void);

/* Shared body of ember::linear_q4.out (bits 4) and ember::linear_q8.out (bits 8) (linear_q.c). */
em_status em_linear_q_run(em_kernel_ctx *ctx, em_evalue **args, int bits);

/*
 * Portable reference: y[m, n0..n1) for every row m of plain activations (qa [m*k], a_scale
 * [m*k/32]), exactly the block order of the Python reference (linear_q4.c, linear_q8.c).
 */
void em_linear_q4_portable(int64_t m, int64_t n0, int64_t n1, int64_t k, int64_t group,
                           const int8_t *qa, const float *sa, const uint8_t *w, const float *ws,
                           const float *bias, float *y, int64_t ldy);
void em_linear_q8_portable(int64_t m, int64_t n0, int64_t n1, int64_t k, int64_t group,
                           const int8_t *qa, const float *sa, const int8_t *w, const float *ws,
                           const float *bias, float *y, int64_t ldy);

#if defined(__x86_64__) || defined(__i386__)
void em_qd8_qc4w_f32_gemm_ukernel_4x8__avx512vnni(size_t mr, size_t nc, const uint8_t *a,
                                                  const uint8_t *w, const void *ws,
                                                  const float *bias, float *y, size_t ldy,
                                                  const em_qgemm_params *p);
void em_qd8_qc8w_f32_gemm_ukernel_4x8__avx512vnni(size_t mr, size_t nc, const uint8_t *a,
                                                  const uint8_t *w, const void *ws,
                                                  const float *bias, float *y, size_t ldy,
                                                  const em_qgemm_params *p);
void em_qd8_prefill__avx512vnni(const em_qprefill_args *a, size_t n0, size_t n1);
void em_qd8_offsets__avx512vnni(size_t m, size_t n0, size_t n1, size_t groups, const float *gsum,
                                const float *offsets, const float *bias, float *y, size_t ldy);
void em_qd8_q4_pack_ukernel__avx512vnni(const float *x, size_t k, uint8_t *row,
                                        const em_qgemm_params *p);
void em_qd8_q8_pack_ukernel__avx512vnni(const float *x, size_t k, uint8_t *row,
                                        const em_qgemm_params *p);
void em_qd8_cvt_f16__avx512vnni(const uint16_t *src, float *dst, size_t n);
void em_qd8_cvt_f16__avx2(const uint16_t *src, float *dst, size_t n);
void em_qd8_q4_pack_ukernel__avx2(const float *x, size_t k, uint8_t *row, const em_qgemm_params *p);
void em_qd8_q8_pack_ukernel__avx2(const float *x, size_t k, uint8_t *row, const em_qgemm_params *p);
void em_qd8_qc4w_f32_gemm_ukernel_4x4__avx2(size_t mr, size_t nc, const uint8_t *a,
                                            const uint8_t *w, const void *ws, const float *bias,
                                            float *y, size_t ldy, const em_qgemm_params *p);
void em_qd8_qc8w_f32_gemm_ukernel_4x4__avx2(size_t mr, size_t nc, const uint8_t *a,
                                            const uint8_t *w, const void *ws, const float *bias,
                                            float *y, size_t ldy, const em_qgemm_params *p);
#endif

#endif /* EMBER_KERNELS_QUANTIZED_LINEAR_Q_H */
