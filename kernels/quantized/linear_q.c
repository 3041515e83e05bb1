/*
 * linear_q.c — the operator entries and the driver of ember::linear_q4.out / ember::linear_q8.out
 * (linear_q.h): argument checks, per-row dynamic activation quantization into temp memory, the
 * once-per-process choice of micro-kernels, and the split of the output columns over the thread
 * pool. The top of the linear_q files: it calls down into the portable reference loops
 * (linear_q4.c, linear_q8.c) and the SIMD micro-kernels (linear_q_gemm__<isa>.c), which call
 * nothing here (tests/python/test_layering.py keeps it so).
 *
 * Work split: output columns over em_parallel_for_static (one contiguous range per thread, so each
 * core streams its own part of the weights once). Decode and short inputs (M < 4) run the MR x NR
 * micro-kernels on the packed rows: inside a thread, blocks of weight rows that fit in L2 are
 * swept by blocks of activation rows that fit in L1, so decode (M = 1) is a GEMV streaming the
 * weights once (AVX-512: the affine offsets in the same pass). Prefill (M >= 4) takes the ISA's
 * prefill route: 32-column tiles re-laid out once per K slab and swept by every row (linear_q.h).
 * Activation rows are quantized in chunks that fit the temp allocator (all rows at once for the
 * usual 64 MiB).
 */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "ember/cpu.h"
#include "portable/kutil.h"
#include "quantized/linear_q.h"

#if defined(EMBER_LINEAR_Q_X86)
#endif

/* ---- ISA choice ------------------------------------------------------------------------------ */

static const em_qlinear_config configs[] = {
#if defined(EMBER_LINEAR_Q_X86)
    {"avx512vnni", 4, 8, em_qd8_qc4w_f32_gemm_ukernel_4x8__avx512vnni,
     em_qd8_qc8w_f32_gemm_ukernel_4x8__avx512vnni, em_qd8_q4_pack_ukernel__avx512vnni,
     em_qd8_q8_pack_ukernel__avx512vnni, em_qd8_prefill__avx512vnni, em_qd8_offsets__avx512vnni, 1,
     1, em_qd8_cvt_f16__avx512vnni, 1},
    {"avx2", 4, 4, em_qd8_qc4w_f32_gemm_ukernel_4x4__avx2, em_qd8_qc8w_f32_gemm_ukernel_4x4__avx2,
     em_qd8_q4_pack_ukernel__avx2, em_qd8_q8_pack_ukernel__avx2, NULL, NULL, 0, 0,
     em_qd8_cvt_f16__avx2, 0},
#endif
    {"portable", 1, 16, NULL, NULL, NULL, NULL, NULL, NULL, 0, 0, NULL, 0},
};
#define N_CONFIGS (sizeof configs / sizeof configs[0])

static int isa_available(const char *isa) {
  if (strcmp(isa, "portable") == 0) return 1;
#if defined(EMBER_LINEAR_Q_X86)
  const em_cpu_features *f = em_cpu_features_get(); /* the library's one probe, under its cap */
  if (strcmp(isa, "avx512vnni") == 0) return f->avx512f && f->avx512bw && f->avx512vnni;
  if (strcmp(isa, "avx2") == 0) return f->avx2_fma;
#endif
  return 0;
}

/* NULL unless forced (tests): then the best configuration the capped features allow. */
static _Atomic(const em_qlinear_config *) forced;

static const em_qlinear_config *config_get(void) {
  const em_qlinear_config *c = atomic_load_explicit(&forced, memory_order_acquire);
  for (size_t i = 0; !c && i < N_CONFIGS; i++)
    if (isa_available(configs[i].isa)) c = &configs[i];
  return c;
}

em_status em_linear_q_force_isa(const char *isa) {
  if (!isa) {
    atomic_store_explicit(&forced, NULL, memory_order_release);
    return EM_OK;
  }
  for (size_t i = 0; i < N_CONFIGS; i++)
    if (strcmp(configs[i].isa, isa) == 0) {
      if (!isa_available(isa)) return EM_ERR_NOT_SUPPORTED;
      atomic_store_explicit(&forced, &configs[i], memory_order_release);
      return EM_OK;
    }
  return EM_ERR_NOT_SUPPORTED;
}

const char *em_linear_q_isa(void) { return config_get()->isa; }

/* -1: automatic; 0 / 1: forced (tests). */
static _Atomic int forced_pairs = -1;

em_status em_linear_q_force_pairs(int mode) {
  if (mode < -1 || mode > 1) return EM_ERR_INVALID_ARGUMENT;
  atomic_store_explicit(&forced_pairs, mode, memory_order_release);
  return EM_OK;
}

/* Whether a decode call with rows of kbytes weight bytes streams them in pairs: on Zen 4 for rows
 * of EM_QL_PAIRS_MIN_ROW_BYTES or more when the packed activations each pair re-reads (a0, a1
 * folded; + corr, sl otherwise) stay in L1. */
static int use_pairs(const em_qlinear_config *cfg, int bits, size_t kbytes, int fold) {
  if (!cfg->decode_pairs) return 0;
  int mode = atomic_load_explicit(&forced_pairs, memory_order_acquire);
  if (mode >= 0) return mode;
#if defined(EMBER_LINEAR_Q_X86)
  return em_cpu_features_get()->avx512_split && kbytes >= EM_QL_PAIRS_MIN_ROW_BYTES &&
         em_qpair_act_bytes(bits, kbytes, fold) <= EM_QL_PAIRS_MAX_ACT_BYTES;
#else
  (void)bits, (void)kbytes, (void)fold;
  return 0;
#endif
}

/* ---- activation quantization ----------------------------------------------------------------- */

/* One row: qa [k] and a_scale [k/32] exactly as the Python reference (f32, round half even). */
static void quantize_row(const float *x, int64_t k, int8_t *qa, float *sa) {
  for (int64_t b = 0; b < k / EM_QA_BLOCK; b++) {
    const float *xb = x + b * EM_QA_BLOCK;
    float amax = 0.0f;
    for (int i = 0; i < EM_QA_BLOCK; i++) {
      float v = fabsf(xb[i]);
      amax = v > amax || v != v ? v : amax; /* NaN propagates, as in torch.amax */
    }
    float s = amax / 127.0f, inv = s > 0.0f ? 1.0f / s : 0.0f;
    sa[b] = s;
    for (int i = 0; i < EM_QA_BLOCK; i++) {
      /* Round half to even without libm: adding 1.5 * 2^23 leaves no fraction bits, so the FPU's
       * default rounding mode rounds (|v| <= 127.5 here; C11 evaluates in float on x86-64/ARM). */
      float q = (xb[i] * inv + 12582912.0f) - 12582912.0f;
      /* Clamp; NaN (from a non-finite block, whose scale already poisons the sums) -> 0, as a
       * float-to-int conversion of NaN is undefined in C. */
      q = q > 127.0f ? 127.0f : q < -127.0f ? -127.0f : q == q ? q : 0.0f;
      qa[b * EM_QA_BLOCK + i] = (int8_t)q;
    }
  }
}

/* The packed row of linear_q.h from a plain one. */
static void pack_row(int bits, const int8_t *qa, const float *sa, int64_t k, uint8_t *row,
                     const em_qgemm_params *p) {
  memset(row, 0, p->a_stride);
  int8_t *a0 = (int8_t *)row, *a1 = (int8_t *)(row + p->off_a1);
  int32_t *corr = (int32_t *)(row + p->off_corr);
  float *sl = (float *)(row + p->off_sl);
  size_t lanes = (p->kbytes + 3) / 4;
  if (bits == 4) {
    for (size_t j = 0; j < (size_t)k / 2; j++) {
      a0[j] = qa[2 * j + 1];
      a1[j] = qa[2 * j];
    }
    for (size_t l = 0; l < lanes; l++) {
      int32_t s = 0;
      for (size_t t = 0; t < 4; t++) s += a0[4 * l + t] + a1[4 * l + t];
      corr[l] = -8 * s;
      sl[l] = sa[l / 4]; /* 8 elements per lane, 32 per block */
    }
  } else {
    memcpy(a0, qa, (size_t)k);
    for (size_t l = 0; l < lanes; l++) {
      int32_t s = 0;
      for (size_t t = 0; t < 4; t++) s += a0[4 * l + t];
      corr[l] = -128 * s;
      sl[l] = sa[l / 8]; /* 4 elements per lane */
    }
  }
}

/* Cache budgets of the blocking in run_tiles (bytes of packed activations / of weights). */
#define EM_QL_L1_BYTES ((size_t)24 << 10)
#define EM_QL_L2_BYTES ((size_t)512 << 10)

/* ---- parallel body --------------------------------------------------------------------------- */

typedef struct job {
  const em_qlinear_config *cfg;
  int bits;
  int64_t m, n, k, group;
  const uint8_t *w;
  const float *ws, *bias;
  const float *offsets;   /* [N, G] or NULL: then bias is added by the micro-kernels */
  const float *gsum;      /* [m, G]: S[m, g] of the activation rows (linear_q.h), with offsets */
  const float *bias_post; /* bias added after the offsets' term */
  float *y;
  const int8_t *qa; /* portable: plain rows */
  const float *sa;
  const uint8_t *packed; /* SIMD: packed rows */
  int64_t ldy;           /* floats between rows of y */
  const uint16_t *ws16; /* f16 scales (ws and, with off16, offsets are then per-chunk f32 copies) */
  const uint16_t *off16;
  em_qgemm_params p;
} job;

/* The affine weights' term y[m, n] += sum_g offsets[n, g] * S[m, g] (groups in order), then the
 * bias, over the columns [n0, n1) of every row. */
static void add_offsets(const job *j, int64_t n0, int64_t n1) {
  int64_t groups = j->group ? j->k / j->group : 0;
  for (int64_t r = 0; r < j->m; r++) {
    const float *sg = j->gsum + r * groups;
    float *y = j->y + r * j->ldy;
    for (int64_t n = n0; n < n1; n++) {
      const float *off = j->offsets + n * groups;
      float o = 0.0f;
      for (int64_t g = 0; g < groups; g++) o = o + sg[g] * off[g];
      y[n] = y[n] + o;
      if (j->bias_post) y[n] = y[n] + j->bias_post[n];
    }
  }
}

static void run_tiles_body(const job *j, int64_t n0, int64_t n1);

/* Columns [n0, n1): the micro-kernels, then the offsets' term unless they added it. */
static void run_columns(const job *j, int64_t n0, int64_t n1) {
  run_tiles_body(j, n0, n1);
  if (j->p.off_base) return; /* the micro-kernels added offsets and bias */
  if (j->offsets && j->packed && j->cfg->offsets)
    j->cfg->offsets((size_t)j->m, (size_t)n0, (size_t)n1, (size_t)(j->k / j->group), j->gsum,
                    j->offsets, j->bias_post, j->y, (size_t)j->ldy);
  else if (j->offsets)
    add_offsets(j, n0, n1);
}

/* f32 scales (and offsets) per chunk of columns of f16 weights' scales, on the thread's stack. */
#define EM_QL_F16_FLOATS 4096

static void cvt_f16_portable(const uint16_t *src, float *dst, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] = em_f16_to_f32(src[i]);
}

static void run_tiles(void *vctx, int64_t t0, int64_t t1) {
  const job *j = vctx;
  int64_t nr = (int64_t)j->cfg->nr;
  int64_t n0 = t0 * nr, n1 = t1 * nr < j->n ? t1 * nr : j->n;
  if (!j->ws16 || j->p.half) { /* f32 scales, or a decode kernel that reads f16 itself */
    run_columns(j, n0, n1);
    return;
  }
  /* f16 scales: convert a chunk of whole tiles' (at least one column's) at a time, then run the
   * chunk as a call of its own whose column 0 is the chunk's first. */
  _Alignas(64) float ws[EM_QL_F16_FLOATS];
  _Alignas(64) float off[EM_QL_F16_FLOATS];
  em_qcvt_fn cvt = j->cfg->cvt_f16 ? j->cfg->cvt_f16 : cvt_f16_portable;
  int64_t g = (int64_t)j->p.ws_stride, cn = EM_QL_F16_FLOATS / g;
  cn = cn >= nr ? cn / nr * nr : cn; /* >= 1: the driver refuses K / group past the buffer */
  for (int64_t c0 = n0; c0 < n1; c0 += cn) {
    int64_t c1 = c0 + cn < n1 ? c0 + cn : n1;
    cvt(j->ws16 + c0 * g, ws, (size_t)((c1 - c0) * g));
    if (j->off16) cvt(j->off16 + c0 * g, off, (size_t)((c1 - c0) * g));
    job jc = *j;
    jc.n = c1 - c0;
    jc.w = j->w + (size_t)c0 * j->p.w_stride;
    jc.ws = ws;
    jc.offsets = j->off16 ? off : NULL;
    jc.bias = j->bias ? j->bias + c0 : NULL;
    jc.bias_post = j->bias_post ? j->bias_post + c0 : NULL;
    jc.y = j->y + c0;
    if (jc.p.off_base) {
      jc.p.ws_base = ws;
      jc.p.off_base = off;
    }
    run_columns(&jc, 0, c1 - c0);
  }
}

typedef struct prefill_job {
  em_qprefill_fn fn;
  em_qprefill_args a;
} prefill_job;

/* The prefill route over the column tiles [t0, t1) (EM_QTILE_N columns each). */
static void run_prefill(void *vctx, int64_t t0, int64_t t1) {
  const prefill_job *j = vctx;
  size_t n0 = (size_t)t0 * EM_QTILE_N, n1 = (size_t)t1 * EM_QTILE_N;
  j->fn(&j->a, n0, n1 < j->a.n ? n1 : j->a.n);
}

static void run_tiles_body(const job *j, int64_t n0, int64_t n1) {
  int64_t nr = (int64_t)j->cfg->nr, mr = (int64_t)j->cfg->mr;
  if (!j->packed) {
    if (j->bits == 4)
      em_linear_q4_portable(j->m, n0, n1, j->k, j->group, j->qa, j->sa, j->w, j->ws, j->bias, j->y,
                            j->ldy);
    else
      em_linear_q8_portable(j->m, n0, n1, j->k, j->group, j->qa, j->sa, (const int8_t *)j->w, j->ws,
                            j->bias, j->y, j->ldy);
    return;
  }
  em_qgemm_ukernel_fn gemm = j->bits == 4 ? j->cfg->gemm_q4 : j->cfg->gemm_q8;
  size_t ws_stride = j->p.ws_stride;
  /* Two-level blocking: a block of weight rows that fits in L2 (ND columns) is swept by blocks of
   * activation rows that fit in L1 (MD rows), so neither is streamed from further out once per
   * tile. With M = 1 this is a plain pass over the weights. */
  int64_t md = (int64_t)(EM_QL_L1_BYTES / j->p.a_stride) / mr * mr;
  int64_t nd = (int64_t)(EM_QL_L2_BYTES / (j->p.w_stride ? j->p.w_stride : 1)) / nr * nr;
  md = md < mr ? mr : md;
  nd = nd < nr ? nr : nd;
  for (int64_t nb = n0; nb < n1; nb += nd) {
    int64_t nb1 = nb + nd < n1 ? nb + nd : n1;
    for (int64_t mb = 0; mb < j->m; mb += md) {
      int64_t mb1 = mb + md < j->m ? mb + md : j->m;
      for (int64_t n = nb; n < nb1; n += nr) {
        size_t nc = (size_t)(nb1 - n < nr ? nb1 - n : nr);
        const uint8_t *w = j->w + (size_t)n * j->p.w_stride;
        for (int64_t m = mb; m < mb1; m += mr) {
          size_t mc = (size_t)(mb1 - m < mr ? mb1 - m : mr);
          const void *ws = j->p.half ? (const void *)(j->ws16 + (size_t)n * ws_stride)
                                     : (const void *)(j->ws + (size_t)n * ws_stride);
          gemm(mc, nc, j->packed + (size_t)m * j->p.a_stride, w, ws, j->bias ? j->bias + n : NULL,
               j->y + m * j->ldy + n, (size_t)j->ldy, &j->p);
        }
      }
    }
  }
}

/* ---- the operator ---------------------------------------------------------------------------- */

static size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

/* S[g] = sum_{b in g} a_scale[b] * sum_{k in b} qa[k] of one row, from its plain form. */
static void group_sums_plain(const int8_t *qa, const float *sa, int64_t k, int64_t group,
                             float *out) {
  int64_t bpg = group / EM_QA_BLOCK;
  for (int64_t g = 0; g < k / group; g++) {
    float acc = 0.0f;
    for (int64_t b = g * bpg; b < (g + 1) * bpg; b++) {
      int32_t t = 0;
      for (int i = 0; i < EM_QA_BLOCK; i++) t += qa[b * EM_QA_BLOCK + i];
      acc = acc + sa[b] * (float)t;
    }
    out[g] = acc;
  }
}

/* The same from a packed row: lane l's correction is -off * (its activations' sum), exact. */
static void group_sums_packed(int bits, const uint8_t *row, int64_t k, int64_t group,
                              const em_qgemm_params *p, float *out) {
  const int32_t *corr = (const int32_t *)(row + p->off_corr);
  const float *sl = (const float *)(row + p->off_sl);
  int64_t lpb = bits == 4 ? 4 : 8, bpg = group / EM_QA_BLOCK; /* lanes per block */
  int32_t off = bits == 4 ? 8 : 128;
  for (int64_t g = 0; g < k / group; g++) {
    float acc = 0.0f;
    for (int64_t b = g * bpg; b < (g + 1) * bpg; b++) {
      int32_t t = 0;
      for (int64_t l = b * lpb; l < (b + 1) * lpb; l++) t += corr[l];
      acc = acc + sl[b * lpb] * (float)(-t / off);
    }
    out[g] = acc;
  }
}

/* bc and sf of a packed row (linear_q.h): the block sums of its lane corrections, and the lanes'
 * scaled activation sums (exact integers -corr / off, times a_scale). */
static void block_corr(int bits, uint8_t *row, int64_t k, const em_qgemm_params *p) {
  const int32_t *corr = (const int32_t *)(row + p->off_corr);
  int32_t *bc = (int32_t *)(row + p->off_bc);
  const float *sl = (const float *)(row + p->off_sl);
  float *sf = (float *)(row + p->off_sf);
  int64_t lpb = bits == 4 ? 4 : 8, lanes = (int64_t)((p->kbytes + 3) / 4);
  int32_t off = bits == 4 ? 8 : 128;
  for (int64_t l = 0; l < lanes; l++) sf[l] = sl[l] * (float)(-corr[l] / off);
  memset(sf + lanes, 0, p->off_bc - p->off_sf - (size_t)lanes * 4);
  float *sb = (float *)(row + p->off_sb);
  for (int64_t b = 0; b < k / EM_QA_BLOCK; b++) {
    int32_t t = 0;
    for (int64_t l = b * lpb; l < (b + 1) * lpb; l++) t += corr[l];
    bc[b] = t;
    sb[b] = sl[b * lpb];
  }
}

/* Args: [input f32 [.., K], weight, scales f32 or f16, group_size, bias f32 [N]?,
 *        offsets (the scales' dtype)?, out f32 [.., N], ret] */
em_status em_linear_q_run(em_kernel_ctx *ctx, em_evalue **args, int bits) {
  em_tensor *x = EM_ARG_TENSOR(args, 0), *w = EM_ARG_TENSOR(args, 1);
  em_tensor *s = EM_ARG_TENSOR(args, 2), *out = EM_ARG_TENSOR(args, 6);
  em_tensor *bias = EM_ARG_IS_NONE(args, 4) ? NULL : EM_ARG_TENSOR(args, 4);
  em_tensor *offs = EM_ARG_IS_NONE(args, 5) ? NULL : EM_ARG_TENSOR(args, 5);
  int64_t gs;
  EM_KCHECK(ctx, x && w && s && out, "expected input, weight, scales and out tensors");
  EM_KCHECK(ctx, EM_ARG_IS_NONE(args, 4) || bias, "bias must be a tensor or None");
  EM_KCHECK(ctx, EM_ARG_IS_NONE(args, 5) || offs, "offsets must be a tensor or None");
  EM_KCHECK(ctx, em_arg_int(args[3], &gs), "group_size must be an int");
  EM_KCHECK(ctx, x->dtype == EM_DTYPE_F32 && out->dtype == EM_DTYPE_F32 && x->dim >= 1,
            "input and out must be float32, input [.., K]");
  EM_KCHECK(ctx, w->dim == 2 && w->dtype == (bits == 4 ? EM_DTYPE_U8 : EM_DTYPE_I8),
            "weight must be a 2-D %s tensor", bits == 4 ? "uint8 (packed 4-bit)" : "int8");
  int64_t n = w->sizes[0], k = w->sizes[1] * (bits == 4 ? 2 : 1);
  EM_KCHECK(ctx, x->sizes[x->dim - 1] == k, "input has %lld features, the weight holds %lld",
            (long long)x->sizes[x->dim - 1], (long long)k);
  EM_KCHECK(ctx, gs == 32 || gs == 64 || gs == 128 || (bits == 8 && gs == 0),
            "group_size must be 32, 64 or 128%s, got %lld", bits == 8 ? " or 0 (per channel)" : "",
            (long long)gs);
  int64_t group = gs ? gs : k;
  EM_KCHECK(ctx, k % EM_QA_BLOCK == 0 && (k == 0 || k % group == 0),
            "K = %lld must be a multiple of the group size %lld and of %d", (long long)k,
            (long long)group, EM_QA_BLOCK);
  int64_t n_groups = group ? k / group : 0;
  int half = s->dtype == EM_DTYPE_F16;
  EM_KCHECK(ctx,
            (s->dtype == EM_DTYPE_F32 || half) &&
                (gs ? (s->dim == 2 && s->sizes[0] == n && s->sizes[1] == n_groups)
                    : (s->numel == n && (s->dim == 1 || (s->dim == 2 && s->sizes[1] == 1)))),
            "scales must be float32 or float16 [%lld%s%lld]", (long long)n, gs ? ", " : "",
            gs ? (long long)n_groups : 0LL);
  EM_KCHECK(ctx, !half || n_groups <= EM_QL_F16_FLOATS,
            "float16 scales need K / group_size <= %d, got %lld", EM_QL_F16_FLOATS,
            (long long)n_groups);
  EM_KCHECK(ctx, !bias || (bias->dtype == EM_DTYPE_F32 && bias->numel == n && bias->dim == 1),
            "bias must be float32 [%lld]", (long long)n);
  EM_KCHECK(ctx,
            !offs || (offs->dtype == s->dtype && offs->numel == s->numel && offs->dim == s->dim &&
                      em_tensor_is_contiguous_order(offs)),
            "offsets must be a contiguous tensor shaped like scales, of their dtype (%s)",
            half ? "float16" : "float32");
  EM_KCHECK(ctx,
            em_tensor_is_contiguous_order(x) && em_tensor_is_contiguous_order(w) &&
                em_tensor_is_contiguous_order(s),
            "input, weight and scales must be contiguous");
  int64_t sizes[EM_MAX_DIM];
  for (int32_t d = 0; d < x->dim - 1; d++) sizes[d] = x->sizes[d];
  sizes[x->dim - 1] = n;
  EM_KTRY(em_resize_out(ctx, out, sizes, x->dim));
  int64_t m = k ? x->numel / k : 0;
  float *y = out->data;
  if (m == 0 || n == 0) return EM_OK;
  if (k == 0) {
    for (int64_t i = 0; i < m * n; i++) y[i] = bias ? ((const float *)bias->data)[i % n] : 0.0f;
    return EM_OK;
  }

  const em_qlinear_config *cfg = config_get();
  job j;
  memset(&j, 0, sizeof j);
  j.cfg = cfg;
  j.bits = bits;
  j.n = n;
  j.k = k;
  j.group = group;
  j.w = w->data;
  j.ws = half ? NULL : s->data;
  j.offsets = offs && !half ? offs->data : NULL;
  j.ws16 = half ? s->data : NULL;
  j.off16 = offs && half ? offs->data : NULL;
  j.ldy = n;
  size_t kbytes = (size_t)(bits == 4 ? k / 2 : k), kbp = round_up(kbytes, 64);
  em_qgemm_params *p = &j.p;
  p->kbytes = kbytes;
  p->off_a1 = kbp;
  p->off_corr = bits == 4 ? 2 * kbp : kbp;
  p->off_sl = p->off_corr + kbp;
  p->off_sf = p->off_sl + kbp;
  p->off_bc = p->off_sf + kbp;
  p->off_sb = p->off_bc + round_up((size_t)(k / EM_QA_BLOCK) * 4, 64);
  p->a_stride = p->off_sb + round_up((size_t)(k / EM_QA_BLOCK) * 4, 64);
  p->w_stride = kbytes;
  p->ws_stride = (size_t)n_groups;
  p->gl_shift = 63;
  if (gs)
    for (p->gl_shift = 0; ((size_t)1 << p->gl_shift) < (size_t)gs / (bits == 4 ? 8 : 4);)
      p->gl_shift++;
  int simd = (bits == 4 ? cfg->gemm_q4 : cfg->gemm_q8) != NULL;

  /* Rows per chunk: as many as fit in half the free temp memory (at least one). */
  size_t plain = (size_t)k + (size_t)(k / EM_QA_BLOCK) * sizeof(float);
  size_t row_bytes = round_up(plain, 64) + (simd ? p->a_stride : 0);
  int64_t rows = m;
  if (ctx && ctx->temp) {
    size_t avail = ctx->temp->size > ctx->temp->used ? ctx->temp->size - ctx->temp->used : 0;
    int64_t fit = (int64_t)(avail / 2 / row_bytes);
    rows = fit < 1 ? 1 : fit < m ? fit : m;
  }
  int8_t *qa = em_kernel_alloc_temp(ctx, round_up((size_t)rows * (size_t)k, 64), 64);
  float *sa = em_kernel_alloc_temp(ctx, (size_t)rows * (size_t)(k / EM_QA_BLOCK) * 4 + 4, 64);
  uint8_t *packed = simd ? em_kernel_alloc_temp(ctx, (size_t)rows * p->a_stride, 64) : NULL;
  /* The folded decode (f16 scales in groups of one activation block, M = 1) needs the group sums
   * without offsets too. */
  int fold =
      half && simd && m == 1 && group == EM_QA_BLOCK && cfg->decode_f16 && cfg->fused_offsets;
  float *gsum =
      offs || fold ? em_kernel_alloc_temp(ctx, (size_t)rows * (size_t)n_groups * 4 + 4, 64) : NULL;
  EM_KCHECK(ctx, qa && sa && (!simd || packed) && (!(offs || fold) || gsum),
            "needs %zu bytes of temp memory per input row (M = %lld, K = %lld)", row_bytes,
            (long long)m, (long long)k);
  const float *xp = x->data;
  int64_t n_tiles = (n + (int64_t)cfg->nr - 1) / (int64_t)cfg->nr;
  for (int64_t r0 = 0; r0 < m; r0 += rows) {
    int64_t rc = m - r0 < rows ? m - r0 : rows;
    for (int64_t r = 0; r < rc; r++) {
      int8_t *q = qa + r * k;
      float *sr = sa + r * (k / EM_QA_BLOCK);
      em_qpack_fn pack = bits == 4 ? cfg->pack_q4 : cfg->pack_q8;
      if (simd && pack) {
        pack(xp + (r0 + r) * k, (size_t)k, packed + (size_t)r * p->a_stride, p);
        block_corr(bits, packed + (size_t)r * p->a_stride, k, p);
        if (offs || fold)
          group_sums_packed(bits, packed + (size_t)r * p->a_stride, k, group, p,
                            gsum + r * n_groups);
        continue;
      }
      quantize_row(xp + (r0 + r) * k, k, q, sr);
      if (simd) {
        pack_row(bits, q, sr, k, packed + (size_t)r * p->a_stride, p);
        block_corr(bits, packed + (size_t)r * p->a_stride, k, p);
      }
      if (offs || fold) group_sums_plain(q, sr, k, group, gsum + r * n_groups);
    }
    if (simd && cfg->prefill && rc >= EM_QPREFILL_MIN_M) {
      prefill_job pj = {cfg->prefill,
                        {bits, (size_t)rc, (size_t)n, (size_t)k, (size_t)group, j.w, j.ws,
                         j.offsets, bias ? bias->data : NULL, packed, gsum, y + r0 * n, j.ws16,
                         j.off16, p}};
      em_parallel_for_static(ctx ? ctx->pool : NULL, (n + EM_QTILE_N - 1) / EM_QTILE_N, run_prefill,
                             &pj);
      continue;
    }
    /* Decode with offsets: the micro-kernels add offsets and bias in the same pass. */
    int fuse = offs && simd && cfg->fused_offsets && rc == 1;
    /* f16 scales: the decode kernel reads them itself where it can (p->half), else run_tiles
     * points ws_base / off_base at its f32 copies */
    p->half = half && simd && rc == 1 && cfg->decode_f16 && (!offs || fuse);
    p->fold = fold && p->half;
    p->pairs = simd && rc == 1 && use_pairs(cfg, bits, kbytes, p->fold);
    p->ws_base = s->data;
    p->off_base = fuse ? offs->data : NULL;
    p->gsum = fuse || p->fold ? gsum : NULL;
    j.bias = bias && (!offs || fuse) ? bias->data : NULL;
    j.bias_post = bias && offs && !fuse ? bias->data : NULL;
    j.m = rc;
    j.y = y + r0 * n;
    j.qa = qa;
    j.sa = sa;
    j.packed = packed;
    j.gsum = gsum;
    em_parallel_for_static(ctx ? ctx->pool : NULL, n_tiles, run_tiles, &j);
  }
  return EM_OK;
}

/* The operator entries (ops.def): ember::linear_q4.out and ember::linear_q8.out. */
em_status em_linear_q4_out(em_kernel_ctx *ctx, em_evalue **args);
em_status em_linear_q4_out(em_kernel_ctx *ctx, em_evalue **args) {
  return em_linear_q_run(ctx, args, 4);
}

em_status em_linear_q8_out(em_kernel_ctx *ctx, em_evalue **args);
em_status em_linear_q8_out(em_kernel_ctx *ctx, em_evalue **args) {
  return em_linear_q_run(ctx, args, 8);
}
