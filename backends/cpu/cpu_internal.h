/*
 * cpu_internal.h — the CPU backend's bound state, shared by cpu_backend.c
 * (blob parsing, validation, binding), the operators (cpu_ops.c, the dispatch,
 * and cpu_op_<family>.c: validation and execution; their own header is
 * cpu_ops.h) and the GEMM driver (cpu_gemm.c).
 */
#ifndef EMBER_BACKENDS_CPU_INTERNAL_H
#define EMBER_BACKENDS_CPU_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cpu_ukernels.h"
#include "ember/allocator.h"
#include "ember/status.h"
#include "ember/threadpool.h"
#include "emc_format.h"

/* Slots of AMX workspace a delegate keeps (at most this many threads take the AMX path). */
#define EMC_AMX_SLOTS 8

/* One tensor of the blob, bound to memory. */
typedef struct emc_rt_tensor {
  float *data; /* constants and arena tensors: set at init; arguments: at every execute */
  int64_t numel;
  uint32_t ndim;
  uint32_t storage;
  uint32_t index;
  uint32_t dtype; /* emc_dtype: EMC_DTYPE_F32 but for an embedding's index input */
  int64_t sizes[EMC_MAX_DIMS];
} emc_rt_tensor;

/* Whether each execute runs on the pool or on the caller alone (cpu_threads.c). */
#define EMC_THR_TRIALS   5   /* executes timed in each mode while choosing (odd) */
#define EMC_THR_RECHOOSE 256 /* far executes between two choices */
typedef struct emc_threads {
  bool adaptive;      /* em_cpu_backend_options.threads_adaptive >= 0 at init */
  bool far;           /* the last probe found the hand-off slow */
  int choice;         /* while far: 0 the pool, 1 the caller alone, -1 choosing */
  int mode;           /* this execute's (0 / 1) */
  uint32_t trial;     /* choosing: the step of the trials' schedule (cpu_threads.c) */
  uint32_t since;     /* far executes since the last choice */
  uint64_t probed_at; /* em_now_ns of the last probe (0: none yet) */
  uint64_t start;     /* this execute's start while choosing, else 0 */
  uint64_t t[2][EMC_THR_TRIALS];
} emc_threads;

typedef struct emc_delegate {
  const em_cpu_config *cfg;
  em_q8_gemm_fn q8_gemm;                 /* the int8 convs' tile (em_q8_gemm_for cfg's ISA) */
  size_t q8_nr;                          /* ... its columns: 16 or 32 (em_q8_gemm_nr_for) */
  em_q8_quant_fn q8_quant;               /* ... their input quantizer (em_q8_quant_for) */
  em_q8_quant_scaled_fn q8_quant_scaled; /* ... of scaled planes (em_q8_quant_scaled_for; NULL) */
  em_q8_pack_fn q8_pack;                 /* ... their panel packer (em_q8_pack_for) */
  em_q8_dw_fn q8_dw;                     /* ... and the int8 depthwise convs' row (em_q8_dw_for) */
  em_q8_dw2_fn q8_dw2;                   /* ... two 5x5 rows at once (em_q8_dw2_for; NULL) */
  em_q8_dw_fn q8_dwd;                    /* ... on dot products (em_q8_dwdot_for; NULL) */
  em_q8_dw2_fn q8_dwd2;                  /* ... two rows of it (em_q8_dwdot2_for; NULL) */
  em_q8_dwv_fn q8_dwdv;                  /* ... two rows side by side (em_q8_dwdotv_for; NULL) */
  em_q8_add_fn q8_add;                   /* ... and the int8 adds' row (em_q8_add_for) */
  em_q8_lut_fn q8_lut;                   /* ... and the u8 table lookups' row (em_q8_lut_for) */
  em_q8_lutf_fn q8_lutf;                 /* ... and into f32 planes (em_q8_lutf_for) */
  em_q8_lutq_fn q8_lutq; /* ... and the readers of planes never written (em_q8_lutq_for) */
  em_q8_lutm_fn q8_lutm; /* ... (em_q8_lutm_for) */
  em_q8_pw_fn q8_pw;     /* ... the pointwise ones' pixel-major tile, NULL: none / off */
  em_q8_dq_fn q8_dq;     /* the dynamic int8 linears' tile (em_q8_dq_for) */
  em_q8_rowq_fn q8_rowq; /* ... and their row quantizer (em_q8_rowq_for) */
  em_q8_rowt_fn q8_rowt; /* ... under one set of qparams (em_q8_rowt_for) */
  uint32_t n_tensors, n_ops, n_inputs, n_outputs;
  emc_rt_tensor *t;   /* [n_tensors] */
  emc_op *ops;        /* [n_ops], copied from the blob (aligned) */
  int64_t *arg_need;  /* [n_inputs + n_outputs]: the most elements any tensor reads from an arg */
  uint8_t *arg_dtype; /* [n_inputs + n_outputs]: the emc_dtype its tensors name (one per arg) */
  uint8_t *arena;
  uint64_t arena_nbytes;
  void *amx_ws; /* AMX GEMM workspace, amx_slots slots (cfg->amx only; else NULL) */
  int amx_slots;
  atomic_flag *amx_busy;  /* [amx_slots]: a slot in use (by any GEMM of this delegate) */
  uint8_t *fused;         /* [n_ops]: n > 1 where ops i to i + n - 1 run as one (emc_run_chain) */
  uint8_t *xsl;           /* [n_ops]: s > 1 where op i, a projection, sums its depth in s slices
                             (emc_xsl_plan, cpu_op_chain.c) */
  uint8_t *q8_pad;        /* [n_ops]: the padded u8 links of emc_q8_pad_plan (cpu_ops.h) */
  int32_t *q8_lk;         /* [n_ops]: the lookups never written of emc_q8_lk_plan */
  bool profile;           /* em_cpu_backend_options.profile when this delegate was initialized */
  const int8_t **q8_pw_w; /* [n_ops] or NULL: the repacked weights of each pointwise int8 conv
                             that takes the pixel-major tile (emc_q8_pw_prepare), else NULL */
  const int8_t **q8_dw_w; /* [n_ops] or NULL: the dot-product tables of each int8 depthwise
                             conv that q8_dwd takes (emc_q8_dw_prepare), else NULL */
  emc_threads thr;
} emc_delegate;

/*
 * The pool an execute of d runs on: `pool` itself, or NULL (the caller alone) while the pool's
 * hand-off is slow and the caller alone was measured faster (cpu_threads.c). Pair each call with
 * emc_threads_end once the execute's operators have run.
 */
em_threadpool *emc_threads_begin(emc_delegate *d, em_threadpool *pool);
void emc_threads_end(emc_delegate *d);

/*
 * Checks op against the bound tensors (ids, shapes, parameters, scratch) so
 * that running it can never touch memory outside its tensors. Writes a reason
 * to why (at least 160 bytes) and returns false when it is invalid.
 */
bool emc_op_check(const emc_delegate *d, const emc_op *op, char *why, size_t why_n);

/*
 * Transforms the weights of every conv flagged EMC_CONV_WINO_AT_LOAD into Winograd filters in
 * memory from al (cpu_wino_pack.c), re-pointing its weight tensor at them; with q8_wino, also
 * those of every int8 conv with a Winograd alternative (EMC_CONV_Q8_WINO), each then rewritten
 * in ops into that f32 Winograd conv. Run at init before the operators are checked. Writes a
 * reason naming the operator to why on failure.
 */
em_status emc_wino_pack_at_load(emc_delegate *d, emc_op *ops, bool q8_wino, em_allocator *al,
                                char *why, size_t why_n);

/*
 * With d->q8_pw, repacks the weights of every validated pointwise int8 conv with u8 on both sides
 * (cpu_op_qpw.c) into the pixel-major tile's layout in memory from al and points d->q8_pw_w at
 * them; those convs then run on that tile. Run at init after the operators are checked.
 */
em_status emc_q8_pw_prepare(emc_delegate *d, em_allocator *al, char *why, size_t why_n);

/*
 * With d->q8_dwd, repacks the tables of every validated int8 depthwise conv with a window it
 * takes (3x3 or 5x5, stride 1 or 2 times the dilation; cpu_op_qdw.c) into em_q8_dwdot_pack's
 * layout in memory from al and points d->q8_dw_w at them; those convs then run on q8_dwd. Run at
 * init after the operators are checked.
 */
em_status emc_q8_dw_prepare(emc_delegate *d, em_allocator *al, char *why, size_t why_n);

/* Runs one validated operator on the pool (cpu_ops.c dispatches to its family's file). */
em_status emc_op_run(const emc_delegate *d, const emc_op *op, em_threadpool *pool);

/*
 * The length of the chain of validated operators from i that emc_run_chain runs as one, or 0:
 * a depthwise conv with the 1x1 conv whose output only it reads before it, the 1x1 conv that
 * alone reads its output after it, or both (2 or 3 operators); or an im2col conv with the max
 * pool that alone reads its output (2); or a plane scale with the int8 conv that alone reads it
 * (2, emc_q8_pw_fuse_scale); or an int8 conv with the u8 table lookup that alone reads it (2,
 * emc_q8_pw_fuse_lut); or a fake-quant of an f32 tensor with the int8 conv that alone reads it
 * and, where it has one, the conv's u8 lookup (2 or 3, emc_q8_pw_fuse_fq); or attention's two
 * batched gemms with the softmax between them (3, emc_attn_fuse).
 */
int emc_fuse_chain(const emc_delegate *d, uint32_t i);

/* Attention's batched gemm of the scores, the softmax over their rows and the batched gemm of
 * the probabilities (3 operators from i, each reading the one before, their writes apart from
 * every tensor they read), run head by head (cpu_op_attn.c); 0 when ops i.. are not that. */
int emc_attn_fuse(const emc_delegate *d, uint32_t i);
/* Runs that chain (false, having run nothing, when the pool has more than half as many threads
 * as heads: the operators then run one by one, each split over the threads). */
bool emc_attn_run(const emc_delegate *d, uint32_t i, em_threadpool *pool);

/* The int8 depthwise convs whose padded input image the pixel-major conv before them (or its
 * lookup) writes as it stores (d->q8_pad; after emc_fuse_chain): a padded depthwise conv that
 * alone reads that u8 output, whose padded images fit the output's bytes. The conv's entry is the
 * distance to the depthwise conv, the depthwise conv's EMC_Q8_PAD_IN: it then only sets the
 * border to its zero point instead of copying the image into its scratch. */
#define EMC_Q8_PAD_IN 255
void emc_q8_pad_plan(const emc_delegate *d);

/*
 * The u8 lookups into f32 planes (EMC_UNARY_Q8 2, a squeeze-and-excitation block's activation)
 * whose planes only a plane mean and a scaled int8 conv (emc_q8_pw_fuse_scale) read: both then
 * read the lookup's u8 input instead (em_q8_lutm_fn, em_q8_lutq_fn: the same bits) and the
 * planes are never written. d->q8_lk: the lookup's entry -1 (it does nothing), the mean's and
 * the scaled chain's the lookup's index + 1. Only where nothing between the lookup and the conv
 * writes the u8 input's memory (the exporter keeps it alive until the conv: blob.py
 * `_extend_for_chains`) and nothing else reads the planes' bytes before they are written again.
 * After emc_fuse_chain.
 */
void emc_q8_lk_plan(const emc_delegate *d);

/*
 * The projections whose depth sums in fixed slices (d->xsl; before emc_fuse_chain, chains on or
 * off): a 1x1 conv after a depthwise conv after a 1x1 expansion on small maps, each alone reading
 * the one before, all in the arena (cpu_op_chain.c). emc_fuse_chain then chains the three;
 * emc_run_xsl_proj runs such a projection k alone, with the same bits.
 */
void emc_xsl_plan(const emc_delegate *d);
void emc_run_xsl_proj(const emc_delegate *d, uint32_t k, em_threadpool *pool);

/*
 * Runs the chain of n operators from i (emc_fuse_chain) in bands of output rows (the pool's, for
 * a conv and max pool), the tensors inside it built band by band in their own buffers. Returns
 * false, having run nothing, when the bands' blocks do not fit those buffers with this many
 * threads: run the operators one by one.
 */
bool emc_run_chain(const emc_delegate *d, uint32_t i, int n, em_threadpool *pool);

/* Loops of fewer element operations than this run on the caller (waking a worker costs more). */
#define EMC_MIN_PARALLEL_WORK 32768

#define EMC_GEMM_MAX_SLOTS 64

/*
 * One GEMM for emc_gemm_run (cpu_gemm.c): C[m, n] = clamp(A @ B + bias_m[row] + bias_n[col]),
 * then act. A is packed ([ceil(m / 6)][k][6], a_packed) or strided (a_rs, a_ks); B is packed
 * ([ceil(n / 16)][k][16], b_packed) or row-major with leading dimension ldb. `pack`, when not
 * NULL, is emc_gemm_pack_floats() of scratch for copying a row-major B strip by strip. `res`,
 * when not NULL, is a residual [m, n] (leading dimension ldr) added before the clamp:
 * C = act(clamp(A @ B + bias + res)). The fields after `pack_ctx` are the driver's own.
 */
typedef struct emc_gemm {
  const em_cpu_config *cfg;
  size_t m, k, n;
  const float *a;
  size_t a_rs, a_ks;
  int a_packed;
  /* A packed: the depth its panels were packed with (0: k). A GEMM over k [k0, k0 + k) of a
   * panel packed for a larger depth kp starts a at the panel's k0 (a + k0 * EMC_MR) with kp. */
  size_t a_kp;
  /* B packed: the same for its 16-column panels (0: k). */
  size_t b_kp;
  const float *b;
  size_t ldb;
  int b_packed;
  float *c;
  size_t ldc;
  const float *bias_m, *bias_n;
  em_minmax_params mm;
  uint32_t act;
  const float *fp;
  float *pack;
  const float *res;
  size_t ldr;
  /* When set (with `pack`), B exists only implicitly: pack_b writes rows [k0, k0 + kc), columns
   * [n0, n0 + nc) of it into dst[kc][ldd] (an im2col, computed strip by strip). */
  void (*pack_b)(const void *pack_ctx, size_t k0, size_t kc, size_t n0, size_t nc, float *dst,
                 size_t ldd);
  const void *pack_ctx;
  /* The AMX path's workspace (amx_slots * emc_gemm_amx_slot_bytes() + 64 bytes, any alignment)
   * and its in-use flags, shared by every GEMM that may run at the same time (a batch of GEMMs
   * split over threads): with cfg->amx, GEMMs big enough run there when the pool has no more
   * threads than slots. */
  void *amx_ws;
  atomic_flag *amx_busy;
  int amx_slots;
  /* A as bf16 pairs (EMC_CONV_PAIRS, packed at export; NULL: none): the AMX path then reads its
   * tiles in place instead of splitting A. [ceil(M / 32) * 2][kp16 / 16][16 rows][16 k] words,
   * word = bf16 hi | bf16 lo << 16, rows past M and k past K zero; kp16 = K rounded up to 16. */
  const uint32_t *a_pairs;
  /* set by emc_gemm_run */
  size_t kcb, mtiles, strips, mb;
  int n_slots;
  atomic_flag slot_busy[EMC_GEMM_MAX_SLOTS];
} emc_gemm;

/* Floats from one packed A panel (EMC_MR rows) to the next. */
static inline size_t emc_gemm_a_panel(const emc_gemm *g) {
  return (g->a_kp ? g->a_kp : g->k) * EMC_MR;
}

/* Floats from one packed B panel (EMC_NR_PANEL columns) to the next. */
static inline size_t emc_gemm_b_panel(const emc_gemm *g) {
  return (g->b_kp ? g->b_kp : g->k) * EMC_NR_PANEL;
}

/* Spins until one of flags[0, n) is claimed (set), trying `first` before the others, and
 * returns its index: a pack or workspace slot; at most n claimants run at once, so one frees
 * up. A thread that asks for the same flag each time keeps the same slot, so the slot's scratch
 * stays in its core's cache. */
static inline int emc_claim_flag_from(atomic_flag *flags, int n, int first) {
  for (;;)
    for (int i = 0; i < n; i++) {
      const int s = (first + i) % n;
      if (!atomic_flag_test_and_set(&flags[s])) return s;
    }
}

static inline size_t emc_min_sz(size_t a, size_t b) { return a < b ? a : b; }
static inline size_t emc_div_up(size_t a, size_t b) { return (a + b - 1) / b; }

/* Floats of pack scratch emc_gemm_run needs for a row-major B with k rows on n_threads. */
size_t emc_gemm_pack_floats(const em_cpu_config *cfg, size_t k, int n_threads);

/* Runs g on the pool (NULL: on the caller). g is modified (driver state); A, B, C borrowed. */
void emc_gemm_run(emc_gemm *g, em_threadpool *pool);
/* Whether emc_gemm_run runs g on `pool` from its bf16 pairs alone (the AMX pairs path, which
 * never reads the f32 A). */
int emc_gemm_runs_pairs(const emc_gemm *g, em_threadpool *pool);

/* Bytes of one AMX workspace slot (f32_gemm_32x32__amx.c). */
size_t emc_gemm_amx_slot_bytes(void);
/* Whether g can take the AMX path (cfg->amx, a workspace, A packed or with unit k stride, big
 * enough to pay for splitting its operands). */
int emc_gemm_amx_fits(const emc_gemm *g);
/* emc_gemm_run through AMX bf16x3 tiles (see f32_gemm_32x32__amx.c): only when emc_gemm_amx_fits
 * and the pool has at most g->amx_slots threads. */
void emc_gemm_run_amx(emc_gemm *g, em_threadpool *pool);
/* Whether g can take the AMX path with A as bf16 pairs (g->a_pairs, cfg->amx and a workspace). */
int emc_gemm_amx_pairs_fits(const emc_gemm *g);
/* emc_gemm_run through AMX tiles with A as bf16 pairs (f32_gemm_32x32__amx.c): every product
 * (hi + lo)(bhi + blo) in four bf16 products. Only when emc_gemm_amx_pairs_fits and the pool has
 * at most g->amx_slots threads. */
void emc_gemm_run_amx_pairs(emc_gemm *g, em_threadpool *pool);

#endif /* EMBER_BACKENDS_CPU_INTERNAL_H */
