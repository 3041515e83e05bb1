/*
 * cpu_ops.h — internal to the CPU backend's operators: cpu_ops.c (the dispatch, emc_op_check /
 * emc_op_run) and one cpu_op_<family>.c per operator family, each with its operators'
 * validation (emc_check_<op>, at init) next to their execution (emc_run_<op>, on the thread
 * pool). Here: the helpers every family shares (tensor lookup, clamp and activation, loop
 * splitting, validation building blocks), the pieces several families run (im2col, transposes,
 * depthwise bands, the stem path), and each family's entry points.
 *
 * Every tensor is f32, contiguous, NCHW for images. Validation proves that the loops stay
 * inside each tensor's bound memory for any blob; execution checks nothing. Parameters are read
 * through the typed views of emc_format.h (emc_conv_params_of, ...), never by slot number.
 */
#ifndef EMBER_BACKENDS_CPU_OPS_H
#define EMBER_BACKENDS_CPU_OPS_H

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "cpu_internal.h"

/* Writes a reason to why (why_n bytes) and returns false: for the check functions, whose
 * parameters are named why and why_n. */
#define WHY(...)                                                                                   \
  do {                                                                                             \
    snprintf(why, why_n, __VA_ARGS__);                                                             \
    return false;                                                                                  \
  } while (0)

/* ---- shared helpers ------------------------------------------------------------------------ */

/* Tensor id of the delegate, or NULL when out of range (-1 included). */
static inline const emc_rt_tensor *tensor_at(const emc_delegate *d, int32_t id) {
  return (id >= 0 && (uint32_t)id < d->n_tensors) ? &d->t[id] : NULL;
}

/* The data of a validated tensor id, NULL for -1. */
static inline float *data_of(const emc_delegate *d, int32_t id) {
  return id >= 0 ? d->t[id].data : NULL;
}

/* A GEMM job of this delegate: its kernels and its AMX workspace, everything else zero. */
static inline void gemm_init(emc_gemm *j, const emc_delegate *d) {
  memset(j, 0, sizeof *j);
  j->cfg = d->cfg, j->amx_ws = d->amx_ws, j->amx_busy = d->amx_busy, j->amx_slots = d->amx_slots;
}

/* The op's clamp bounds (none unless its activation is EMC_ACT_CLAMP). */
static inline em_minmax_params clamp_of(const emc_op *op) {
  em_minmax_params p = {-INFINITY, INFINITY, 0};
  if (op->act == EMC_ACT_CLAMP) p.min = op->fp[EMC_ACT_FP_MIN], p.max = op->fp[EMC_ACT_FP_MAX];
  return p;
}

/* The activation that must run after a kernel that already clamped. */
static inline uint32_t post_act(const emc_op *op) { return op->act == EMC_ACT_CLAMP ? 0 : op->act; }

/* The same for a kernel of d's table that applies mm's hardswish in its stores (the direct,
 * depthwise and stem convs, em_cpu_config.hswish): sets mm->hswish for the op's hardswish and
 * returns 0 then, so no vact pass follows. */
static inline uint32_t post_act_fused(const emc_delegate *d, const emc_op *op,
                                      em_minmax_params *mm) {
  if (op->act == EMC_ACT_HARDSWISH && d->cfg->hswish) {
    mm->hswish = 1;
    return 0;
  }
  return post_act(op);
}

/*
 * em_parallel_for for a loop of about `work` element operations: small loops run on the caller,
 * since waking a worker costs more than they do (and far more when the machine is loaded).
 */
static inline void par_for(em_threadpool *pool, int64_t n, em_parallel_fn fn, void *ctx,
                           int64_t work) {
  em_parallel_for(work < EMC_MIN_PARALLEL_WORK ? NULL : pool, n, fn, ctx);
}

/*
 * The same in contiguous ranges, thread t the t-th (then helping the others finish): a depthwise
 * conv's planes go to the threads as the channels of the GEMMs around it do (a split by output
 * rows before it, by K after it), so each thread reads the planes it wrote and writes those it
 * will read. Split in dynamic chunks, about half came from the other core's cache each time:
 * MobileNetV2 1.3 % and MobileNetV3-Small 3.3 % slower at 2 threads (paired medians); the
 * int8 nets' convs, adds and lookups 5-8 % (cpu_op_qpw.c). Every loop over an activation's
 * pixels, rows or planes uses it, so that consecutive operators split alike.
 */
static inline void par_for_static(em_threadpool *pool, int64_t n, em_parallel_fn fn, void *ctx,
                                  int64_t work) {
  em_parallel_for_static(work < EMC_MIN_PARALLEL_WORK ? NULL : pool, n, fn, ctx);
}

/*
 * The same for a loop that only streams memory (elementwise, permute, copy): one over fewer
 * than this many elements (1 MiB of f32) stays on the caller. Its data was just written by the
 * previous operator, split over the threads differently; below about this size, moving it
 * between the cores' caches and the wake-up cost more than the second core gains (measured:
 * MiniLM's 49K-197K-element adds and permutes ran 1.2-2x slower on 2 threads, ResNet-50's
 * 401K-element adds 1.8x faster).
 */
#define EMC_MIN_PARALLEL_ELEMS 262144
static inline void par_for_mem(em_threadpool *pool, int64_t n, em_parallel_fn fn, void *ctx,
                               int64_t elems) {
  em_parallel_for(elems < EMC_MIN_PARALLEL_ELEMS ? NULL : pool, n, fn, ctx);
}

/* The sum of n floats in four partial sums, and the mean / sum operators' rows, a depthwise conv's
 * plane means. */
static inline float plane_sum4(const float *x, int64_t n) {
  float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) s0 += x[i], s1 += x[i + 1], s2 += x[i + 2], s3 += x[i + 3];
  for (; i < n; i++) s0 += x[i];
  return (s0 + s1) + (s2 + s3);
}

/* Pairwise over blocks of 128 (a binary counter of partial sums): the rounding error grows with
 * log2(n), not n, so a sum that cancels to nearly nothing (of a layer norm's output) stays
 * within f32 rounding of the exact one, as PyTorch's cascade sum does. */
static inline float plane_sum(const float *x, int64_t n) {
  if (n <= 128) return plane_sum4(x, n);
  float stack[64];
  int top = 0;
  for (int64_t i = 0, c = 1; i < n; i += 128, c++) {
    float v = plane_sum4(x + i, n - i < 128 ? n - i : 128);
    for (int64_t t = c; !(t & 1); t >>= 1) v = stack[--top] + v; /* blocks of equal size */
    stack[top++] = v;
  }
  float r = stack[--top];
  while (top) r = stack[--top] + r;
  return r;
}

/* (Four partial sums, as the int8 lookup's fused plane means compute them: the same bits.) */
static inline float plane_mean(const float *x, int64_t n) { return plane_sum4(x, n) / (float)n; }

/* ---- validation helpers -------------------------------------------------------------------- */

static inline bool is_const(const emc_rt_tensor *t) { return t && t->storage == EMC_CONST; }

/* The activation is known and its clamp bounds ordered. */
static inline bool check_act(const emc_op *op, char *why, size_t why_n) {
  const float lo = op->fp[EMC_ACT_FP_MIN], hi = op->fp[EMC_ACT_FP_MAX];
  if (op->act >= EMC_ACT_END) WHY("unknown activation %u", op->act);
  if (op->act == EMC_ACT_CLAMP && !(lo <= hi)) WHY("clamp bounds [%g, %g] are not ordered", lo, hi);
  if (op->act == EMC_ACT_LEAKY_RELU || op->act == EMC_ACT_ELU) {
    const float *f = op->fp;
    const int n = op->act == EMC_ACT_ELU ? 3 : 1;
    for (int i = 0; i < n; i++)
      if (!isfinite(f[EMC_ACT_FP_ALPHA + i]))
        WHY("%s parameter %d is %g, not finite", op->act == EMC_ACT_ELU ? "elu" : "leaky relu", i,
            f[EMC_ACT_FP_ALPHA + i]);
  }
  if (op->act == EMC_ACT_FAKEQUANT || op->act == EMC_ACT_HARDSWISH_FQ) {
    const float *f = op->fp;
    const float qmin = f[EMC_ACT_FP_QMIN], qmax = f[EMC_ACT_FP_QMAX], zp = f[EMC_ACT_FP_ZP];
    if (!(lo <= hi)) WHY("fake-quant clamp bounds [%g, %g] are not ordered", lo, hi);
    if (!(f[EMC_ACT_FP_SCALE] > 0.0f && f[EMC_ACT_FP_SCALE] <= 3.4e38f &&
          f[EMC_ACT_FP_INV_SCALE] > 0.0f && f[EMC_ACT_FP_INV_SCALE] <= 3.4e38f))
      WHY("fake-quant scale %g / inverse %g not positive and finite", f[EMC_ACT_FP_SCALE],
          f[EMC_ACT_FP_INV_SCALE]);
    /* Integers within +-2^16, so every step of the rounding above is exact. */
    if (!(qmin >= -65536.0f && qmax <= 65536.0f && qmin <= qmax && zp >= -65536.0f &&
          zp <= 65536.0f && qmin == (float)(int32_t)qmin && qmax == (float)(int32_t)qmax &&
          zp == (float)(int32_t)zp))
      WHY("fake-quant range [%g, %g] or zero point %g not integers within 2^16", qmin, qmax, zp);
  }
  return true;
}

/* The op's first n parameter slots (a kind's EMC_<KIND>_N_PARAMS) are non-negative. */
static inline bool params_nonneg(const emc_op *op, int n, char *why, size_t why_n) {
  for (int i = 0; i < n; i++)
    if (op->ip[i] < 0) WHY("parameter %d is negative (%d)", i, op->ip[i]);
  return true;
}

/* Whether two tensors may overlap in memory (the same argument, or overlapping arena ranges). */
static inline bool out_shared(const emc_rt_tensor *a, const emc_rt_tensor *b) {
  if (a->storage == EMC_ARENA && b->storage == EMC_ARENA)
    return a->data < b->data + b->numel && b->data < a->data + a->numel;
  return a->storage == b->storage && a->storage != EMC_CONST && a->index == b->index;
}

/* A residual (in[3], -1: none) has the output's shape and shares none of its storage. */
static inline bool check_residual(const emc_delegate *d, const emc_op *op, char *why,
                                  size_t why_n) {
  if (op->in[3] < 0) return true;
  const emc_rt_tensor *r = tensor_at(d, op->in[3]), *y = tensor_at(d, op->out[0]);
  if (!r || !y) WHY("residual: bad tensor id");
  if (r->ndim != y->ndim) WHY("residual has %u dims, the output %u", r->ndim, y->ndim);
  for (uint32_t i = 0; i < r->ndim; i++)
    if (r->sizes[i] != y->sizes[i])
      WHY("residual size %lld in dim %u, the output %lld", (long long)r->sizes[i], i,
          (long long)y->sizes[i]);
  if (out_shared(r, y)) WHY("residual shares the output's storage");
  return true;
}

/* in[0] has in_n elements, out[0] out_n, and the activation is valid. */
static inline bool check_rows(const emc_delegate *d, const emc_op *op, int64_t in_n, int64_t out_n,
                              char *why, size_t why_n) {
  const emc_rt_tensor *x = tensor_at(d, op->in[0]), *y = tensor_at(d, op->out[0]);
  if (!x || !y) WHY("bad tensor id");
  if (x->numel != in_n || y->numel != out_n)
    WHY("tensors have %lld / %lld elements, expected %lld / %lld", (long long)x->numel,
        (long long)y->numel, (long long)in_n, (long long)out_n);
  return check_act(op, why, why_n);
}

/* conv output extent, or -1 when the window never fits. */
static inline int64_t conv_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t dil) {
  int64_t span = dil * (k - 1) + 1;
  if (in + 2 * p < span) return -1;
  return (in + 2 * p - span) / s + 1;
}

/* Whether the conv's planned scratch (16-aligned, inside the arena) holds `need` bytes. */
static inline bool scratch_holds(const emc_delegate *d, const emc_conv_params *p, uint64_t need,
                                 const char *what, char *why, size_t why_n) {
  uint64_t off = (uint64_t)p->scratch_off, nb = (uint64_t)p->scratch_nbytes;
  if (nb < need || off % 16 || off + nb > d->arena_nbytes)
    WHY("conv2d: %s scratch [%llu, +%llu) does not hold %llu bytes inside the %llu-byte arena",
        what, (unsigned long long)off, (unsigned long long)nb, (unsigned long long)need,
        (unsigned long long)d->arena_nbytes);
  return true;
}

/* Whether op's scratch [scratch_off, +scratch_nbytes) stays clear of the arena tensors it reads
 * and writes (input, residual, outputs): a path copies between them (a fuzzed blob that put the
 * scratch over the input made the int8 conv's padded copy overlap its source). */
static inline bool scratch_apart(const emc_delegate *d, const emc_op *op, char *why, size_t why_n) {
  const emc_conv_params p = emc_conv_params_of(op);
  if (p.scratch_nbytes <= 0) return true;
  const uint8_t *s0 = d->arena + p.scratch_off, *s1 = s0 + p.scratch_nbytes;
  const int32_t ids[4] = {op->in[0], op->in[3], op->out[0], op->out[1]};
  for (int i = 0; i < 4; i++) {
    const emc_rt_tensor *t = ids[i] >= 0 ? tensor_at(d, ids[i]) : NULL;
    if (!t || t->storage != EMC_ARENA) continue;
    const uint8_t *t0 = (const uint8_t *)t->data, *t1 = t0 + t->numel * (int64_t)sizeof(float);
    if (t0 < s1 && s0 < t1) WHY("conv2d: scratch overlaps tensor %d", ids[i]);
  }
  return true;
}

/* ---- conv geometry shared by the conv paths and the chains --------------------------------- */

/* A conv op's window over an h x w input and an oh x ow output, as a depthwise conv's params. */
static inline em_dw_params dw_params_of(const emc_conv_params *p, int64_t h, int64_t w, int64_t oh,
                                        int64_t ow) {
  return (em_dw_params){h, w, oh, ow, p->kh, p->kw, p->sh, p->sw, p->ph, p->pw, p->dh, p->dw};
}

/*
 * Band b of `bands` bands of output rows of q as a conv of its own: the output rows
 * [*oy0, *oy0 + sub->oh), the input rows from *iy0 its windows cover (sub->h of them, 0 when all
 * are padding) and the padding left above them (sub->ph).
 */
static inline void dw_band(const em_dw_params *q, int64_t bands, int64_t b, em_dw_params *sub,
                           int64_t *oy0, int64_t *iy0) {
  const int64_t o0 = b * q->oh / bands, o1 = (b + 1) * q->oh / bands;
  const int64_t top = o0 * q->sh - q->ph, bot = (o1 - 1) * q->sh - q->ph + (q->kh - 1) * q->dh + 1;
  const int64_t i0 = top > 0 ? top : 0, i1 = bot < q->h ? bot : q->h;
  *sub = *q;
  sub->oh = o1 - o0, sub->h = i1 > i0 ? i1 - i0 : 0, sub->ph = i0 - top;
  *oy0 = o0, *iy0 = i0;
}

/* The max pool geometry of pool parameters p over an h x w input and an oh x ow output. */
static inline em_pool_params pool_geom_of(const emc_pool2d_params *p, int64_t h, int64_t w,
                                          int64_t oh, int64_t ow) {
  return (em_pool_params){h, w, oh, ow, p->kh, p->kw, p->sh, p->sw, p->ph, p->pw};
}

/* Whether max pool op runs separably (the ISA's maxpool): a w-wide input, ow outputs a row. */
static inline bool pool_separable(const emc_op *op, int64_t w, int64_t ow) {
  const emc_pool2d_params p = emc_pool2d_params_of(op);
  const int64_t span = (ow - 1) * p.sw + p.kw;
  return op->kind == EMC_OP_MAXPOOL2D && !p.q8 && p.dh == 1 && p.dw == 1 && ow > 0 &&
         span <= EM_POOL_ROW_MAX && p.pw + w <= EM_POOL_ROW_MAX;
}

/* ---- im2col and transposes (cpu_op_im2col.c): the GEMM convs, the transposed and Winograd
 * paths and the conv + max pool chain -----------------------------------------------------------
 */

typedef struct im2col_job {
  const float *x;   /* [cg, H, W] of one image and group */
  float *col;       /* [cg * kh * kw, OH * OW] as 16-column panels, see EMC_NR_PANEL */
  em_dw_params q;   /* the conv's geometry (its fields as a depthwise conv's) */
  int64_t khw_rows; /* rows of the matrix (cg * kh * kw) */
  const em_cpu_config *cfg;
  /* emc_im2col_strip_padded: the input zero-padded (stride 2: each padded row split into its even
   * then its odd columns), plane after plane; pcols floats a row (per parity), prows rows. */
  float *padded;
  int64_t pcols, prows;
  /* The first output pixel of the matrix's columns (a band of rows: emc_run_chain). */
  int64_t pix0;
} im2col_job;

/* The im2col job of conv parameters p over one image and group x [cg][h][w] (col: where
 * emc_im2col_rows writes; the padded input not yet set up: emc_padded_floats). */
im2col_job emc_im2col_of(const emc_delegate *d, const emc_conv_params *p, const float *x,
                         float *col, int64_t h, int64_t w, int64_t oh, int64_t ow, int64_t kg);

/* Sets ij's padded-input geometry (emc_pad_planes, emc_im2col_strip_padded) and returns the floats
 * the padded input of cg channels takes, or 0 when the conv cannot take that path: a stride other
 * than 1 or 2 or not the same both ways, dilation, rows wider than emc_pad_planes takes. */
size_t emc_padded_floats(im2col_job *ij, int64_t cg);

/* Channels [begin, end) of the input into ij->padded (see im2col_job); ctx is the im2col_job. */
void emc_pad_planes(void *ctx, int64_t begin, int64_t end);

/* Rows [begin, end) of the im2col matrix, written straight into 16-column panels in j->col. */
void emc_im2col_rows(void *ctx, int64_t begin, int64_t end);

/* Rows [begin, end) of the im2col matrix of j, row-major [kg][OH * OW] in j->col. */
void emc_im2col_rows_rm(void *ctx, int64_t begin, int64_t end);

/*
 * Rows [k0, k0 + kc), pixels [n0, n0 + nc) of the im2col matrix of ctx (an im2col_job) into
 * dst[kc][ldd]: the GEMM driver's B strip (emc_gemm.pack_b), built in L1 as it goes.
 */
void emc_im2col_strip(const void *ctx, size_t k0, size_t kc, size_t n0, size_t nc, float *dst,
                      size_t ldd);

/* emc_im2col_strip from the padded input (emc_pad_planes), from output pixel pix0 on. */
void emc_im2col_strip_padded(const void *ctx, size_t k0, size_t kc, size_t n0, size_t nc,
                             float *dst, size_t ldd);

typedef struct transpose_job {
  const float *ct; /* [npix][co] */
  float *y;        /* [co][npix], rows ldy floats apart */
  int64_t npix, co, ldy;
  /* With a residual [co][npix]: y = act(clamp(ct^T + res)) (the GEMM left both out). */
  const float *res;
  const em_cpu_config *cfg;
  em_minmax_params mm;
  uint32_t act;
  const float *fp;
} transpose_job;

/* Output channels [begin, end) of y = ct^T (with a residual: see transpose_job). */
void emc_transpose_rows(void *ctx, int64_t begin, int64_t end);

/* ---- the families' entry points (cpu_ops.c dispatches to them) ------------------------------- */
/* Each emc_check_* writes a reason to why (why_n bytes) and returns false when op is invalid;
 * each emc_run_* runs a validated op on the pool. */

/* conv2d (cpu_op_conv.c): every path; depthwise, Winograd and stem parts in their files. */
bool emc_check_conv(const emc_delegate *d, const emc_op *op, char *why, size_t why_n);
em_status emc_run_conv(const emc_delegate *d, const emc_op *op, em_threadpool *pool);

/* Int8 conv2d (EMC_CONV_Q8, cpu_op_qconv.c): the checks after emc_check_conv's common ones (w
 * the packed int8 weights, npix the output map's pixels), and the run. */
bool emc_check_conv_q8(const emc_delegate *d, const emc_op *op, const emc_rt_tensor *w, int64_t cin,
                       int64_t co, int64_t npix, char *why, size_t why_n);
void emc_run_conv_q8(const emc_delegate *d, const emc_op *op, em_threadpool *pool);
/* A pointwise int8 conv on the pixel-major tile (cpu_op_qpw.c), w its repacked weights. */
void emc_run_conv_q8_pw(const emc_delegate *d, const emc_op *op, const int8_t *w,
                        em_threadpool *pool);
/* Whether op k alone of the delegate's operators reads tensor t (as an operand or a conv's side
 * table): what a chain may keep to itself (cpu_op_qpw.c). */
bool emc_alone_reads(const emc_delegate *d, int32_t t, uint32_t k);
/* 2 when op i multiplies planes by a value per plane with a fake-quant (a squeeze-and-excitation
 * scale) and op i + 1, an int8 conv on the pixel-major tile with an f32 input, alone reads the
 * product with that fake-quant as its quantizer: the conv then quantizes the products itself,
 * block by block (emc_q8_pw_run_scaled), and the product is never written; else 0. */
int emc_q8_pw_fuse_scale(const emc_delegate *d, uint32_t i);
/* Runs that pair (the same bytes as the two operators); false, having run nothing, when the
 * conv's scratch or output shares memory with the planes or scales it reads. */
bool emc_q8_pw_run_scaled(const emc_delegate *d, uint32_t i, em_threadpool *pool);
/* 2 when op i is a fake-quant of an f32 tensor (EMC_ACT_FAKEQUANT, f32 in and out: a network's
 * input quantized) that op i + 1, an int8 conv on the pixel-major tile with an f32 input whose
 * quantizer is that fake-quant, alone reads: the conv then quantizes the fake-quant's input
 * itself (a fake-quant of fake-quant levels gives those levels; emc_q8_pw_run_fq), and the
 * fake-quant's output is never written; 3 when the conv's u8 lookup joins too
 * (emc_q8_pw_fuse_lut of op i + 1); else 0. */
int emc_q8_pw_fuse_fq(const emc_delegate *d, uint32_t i);
/* Runs those n operators (the same bytes as one by one); false, having run nothing, when the
 * conv's scratch or what it writes shares memory with the fake-quant's input (or each other). */
bool emc_q8_pw_run_fq(const emc_delegate *d, uint32_t i, int n, em_threadpool *pool);
/* 2 when op i is an int8 conv on the pixel-major tile with a u8 output of whole 4-channel
 * groups that op i + 1, a table lookup into u8 levels (EMC_UNARY_Q8 form 1), alone reads, and the
 * backend has a lookup row: each job of the conv then looks its pixels up in place right after
 * computing them, into the lookup's output (emc_q8_pw_run_lut), so the conv's own output is
 * never written; else 0. */
int emc_q8_pw_fuse_lut(const emc_delegate *d, uint32_t i);
/* Runs that pair (the same bytes as the two operators); false, having run nothing, when the
 * lookup's output shares memory with what the conv reads. */
bool emc_q8_pw_run_lut(const emc_delegate *d, uint32_t i, em_threadpool *pool);

/* Depthwise conv2d (cpu_op_dwconv.c): the checks after emc_check_conv's common ones (w the
 * weights, cin and co the input's and output's channels), and the run of the whole op. */
bool emc_check_dwconv(const emc_delegate *d, const emc_op *op, const emc_rt_tensor *w, int64_t cin,
                      int64_t co, char *why, size_t why_n);
void emc_run_dwconv(const emc_delegate *d, const emc_op *op, em_threadpool *pool);
/* Channels [c0, c1) of depthwise conv op (one image) on the calling thread, through the kernels
 * emc_run_dwconv takes for it, so the same bits; c0 a multiple of 16, c1 too unless it is the
 * last channel. */
void emc_dwconv_channels(const emc_delegate *d, const emc_op *op, int64_t c0, int64_t c1);

/* Winograd conv2d (cpu_op_wino.c): the checks after emc_check_conv's common ones (w the
 * weights, cin and co the channels), and the run of one image x [cin, h, w] -> y [co, oh, ow]
 * (res: its residual or NULL). */
bool emc_check_conv_wino(const emc_delegate *d, const emc_op *op, const emc_rt_tensor *w,
                         int64_t cin, int64_t co, char *why, size_t why_n);
void emc_run_conv_wino(const emc_delegate *d, const emc_op *op, const float *x, float *y,
                       const float *res, int64_t cin, int64_t h, int64_t w, int64_t co, int64_t oh,
                       int64_t ow, em_threadpool *pool);

/* Stems with few input channels (cpu_op_smallc.c): SMALLC_MAX_CIN input channels at most. */
#define SMALLC_MAX_CIN 4
/* Whether conv op (cin input channels, g groups, depth kg = cin * kh * kw) runs on the direct
 * stem kernel. */
bool emc_smallc_fits(const emc_delegate *d, const emc_op *op, int64_t cin, int64_t g, int64_t kg);
/* Runs it: x [n][cin][h][wd] -> y [n][co][oh][ow] with the packed weights w. */
void emc_run_conv_smallc(const emc_delegate *d, const emc_op *op, const float *x, const float *w,
                         const float *bias, float *y, int64_t n, int64_t cin, int64_t h, int64_t wd,
                         int64_t co, int64_t oh, int64_t ow, int64_t kg, em_threadpool *pool);

/* gemm (cpu_op_gemm.c), and one GEMM job as the convs run theirs (a GEMV for M = 1). */
bool emc_check_gemm(const emc_delegate *d, const emc_op *op, char *why, size_t why_n);
em_status emc_run_gemm(const emc_delegate *d, const emc_op *op, em_threadpool *pool);
/* Products [begin, end) of a (batched) gemm op on the calling thread alone. */
void emc_run_gemm_range(const emc_delegate *d, const emc_op *op, int64_t begin, int64_t end);
void emc_run_gemm_job(emc_gemm *j, em_threadpool *pool);

/* Elementwise (cpu_op_eltwise.c): binary, unary (activations; also copy, the identity with an
 * activation), channel affine. */
bool emc_check_binary(const emc_delegate *d, const emc_op *op, char *why, size_t why_n);
em_status emc_run_binary(const emc_delegate *d, const emc_op *op, em_threadpool *pool);
bool emc_check_unary(const emc_delegate *d, const emc_op *op, char *why, size_t why_n);
em_status emc_run_unary(const emc_delegate *d, const emc_op *op, em_threadpool *pool);
/* A unary's first activation (EMC_UNARY_PRE, cpu_op_qlut.c): its check, and y = pre(x), or
 * x * pre(x), for n values (y may be x). */
bool emc_check_unary_pre(const emc_op *op, char *why, size_t why_n);
void emc_unary_pre(const emc_delegate *d, const emc_op *op, size_t n, const float *x, float *y);
/* A unary on u8 activations as a table (EMC_UNARY_Q8; cpu_op_qlut.c). */
bool emc_check_unary_q8(const emc_delegate *d, const emc_op *op, char *why, size_t why_n);
em_status emc_run_unary_q8(const emc_delegate *d, const emc_op *op, em_threadpool *pool);
/* A plane mean whose planes a lookup never wrote (d->q8_lk > 0, emc_q8_lk_plan): the means of
 * the lookup's u8 input (em_q8_lutm_fn), then the mean's activation as the rows operator. */
void emc_q8_lk_mean(const emc_delegate *d, const emc_op *op, em_threadpool *pool);
/* The output level of each of the 256 input levels of such an op into t8 (the f32 path's row
 * over the values they stand for, then its fake-quant); returns its output's u8 zero point. */
float emc_q8_lut_levels(const emc_delegate *d, const emc_op *op, uint8_t t8[256]);
bool emc_check_affine(const emc_delegate *d, const emc_op *op, char *why, size_t why_n);
em_status emc_run_affine(const emc_delegate *d, const emc_op *op, em_threadpool *pool);

/* Max and avg pool (cpu_op_pool.c). */
bool emc_check_pool(const emc_delegate *d, const emc_op *op, char *why, size_t why_n);
em_status emc_run_pool(const emc_delegate *d, const emc_op *op, em_threadpool *pool);

/* Row operators (cpu_op_rows.c): mean, softmax, layer and RMS norm (one run for all). */
bool emc_check_mean(const emc_delegate *d, const emc_op *op, char *why, size_t why_n);
bool emc_check_softmax(const emc_delegate *d, const emc_op *op, char *why, size_t why_n);
/* Dynamic int8 linear layers (cpu_op_dqlinear.c). */
bool emc_check_dq_linear(const emc_delegate *d, const emc_op *op, char *why, size_t why_n);
em_status emc_run_dq_linear(const emc_delegate *d, const emc_op *op, em_threadpool *pool);
bool emc_check_token_fq(const emc_delegate *d, const emc_op *op, char *why, size_t why_n);
/* Per-tensor dynamic int8 fake-quant (cpu_op_rows.c, EMC_OP_TENSOR_FQ): the tensor's qparams as
 * choose_qparams.tensor, then its values through int8 and back, the portable kernels' bits. */
bool emc_check_tensor_fq(const emc_delegate *d, const emc_op *op, char *why, size_t why_n);
em_status emc_run_tensor_fq(const emc_delegate *d, const emc_op *op, em_threadpool *pool);
bool emc_check_norm(const emc_delegate *d, const emc_op *op, char *why, size_t why_n);
em_status emc_run_rows(const emc_delegate *d, const emc_op *op, em_threadpool *pool);
/* Rows [begin, end) of a softmax op over its last dim on the calling thread alone. */
void emc_run_softmax_range(const emc_delegate *d, const emc_op *op, int64_t begin, int64_t end);

/* Data movement (cpu_op_shape.c): permute, cat, slice, pad (copy runs as a unary:
 * cpu_op_eltwise.c). */
bool emc_check_permute(const emc_delegate *d, const emc_op *op, char *why, size_t why_n);
em_status emc_run_permute(const emc_delegate *d, const emc_op *op, em_threadpool *pool);
bool emc_check_cat(const emc_delegate *d, const emc_op *op, char *why, size_t why_n);
em_status emc_run_cat(const emc_delegate *d, const emc_op *op);
bool emc_check_slice(const emc_delegate *d, const emc_op *op, char *why, size_t why_n);
em_status emc_run_slice(const emc_delegate *d, const emc_op *op, em_threadpool *pool);
/* Embedding (EMC_OP_EMBEDDING): the table's rows named by an integer input; the run fails with
 * EM_ERR_INVALID_ARGUMENT (nothing written) on an index outside the table. */
bool emc_check_embedding(const emc_delegate *d, const emc_op *op, char *why, size_t why_n);
em_status emc_run_embedding(const emc_delegate *d, const emc_op *op, em_threadpool *pool);
/* Gather (EMC_OP_GATHER): elements of x at constant offsets, checked at init. */
bool emc_check_gather(const emc_delegate *d, const emc_op *op, char *why, size_t why_n);
em_status emc_run_gather(const emc_delegate *d, const emc_op *op, em_threadpool *pool);
/* Resize (EMC_OP_RESIZE): nearest or bilinear upsampling by the blob's row and column taps. */
bool emc_check_resize(const emc_delegate *d, const emc_op *op, char *why, size_t why_n);
em_status emc_run_resize(const emc_delegate *d, const emc_op *op, em_threadpool *pool);
bool emc_check_pad(const emc_delegate *d, const emc_op *op, char *why, size_t why_n);
em_status emc_run_pad(const emc_delegate *d, const emc_op *op, em_threadpool *pool);

#endif /* EMBER_BACKENDS_CPU_OPS_H */
