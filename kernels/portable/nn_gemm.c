/*
 * nn_gemm.c — the f32 GEMM behind mm/bmm/addmm/linear/convolution, plus the
 * small argument helpers of nn_util.h.
 *
 * Goto-style blocking: B is packed in KC x NC blocks of NR-wide column
 * panels, A in MC x KC blocks of MR-high row panels, and a 6x16 micro-kernel
 * accumulates one MR x NR tile of C in registers. Packing reads operands
 * through their strides, so transposed and channels-last views cost nothing
 * extra. The micro-kernel is plain C with fixed trip counts that compilers
 * vectorize. Faster bodies of the micro-kernel, the dot product and the
 * row-major matrix-vector task (AVX2+FMA on x86-64) live in the optional
 * optimized layer (kernels/optimized/, portable/fast_config.h): this file calls
 * them when its table has them and runs its own loops otherwise.
 * Products with at most 4 rows or columns (decode-time linear layers) skip
 * packing: contiguous A rows against contiguous B columns run as dot products
 * (threaded over the longer side); few A rows against a row-major B (a folded
 * weight transpose) stream B in storage order, threads splitting its rows.
 * Up to 64 rows against a row-major B (prefill) skip packing B: the
 * micro-kernel reads its full NR-wide panels in place (row stride ldb). Packing buffers come
 * from the kernel's temp arena, shrink (NC, KC, MC) until they fit it, and are released when the
 * call returns. Summation order per output element is k-ascending within each KC block.
 */
#include "portable/fast_config.h"
#include "portable/nn_gemm.h"
#include "portable/nn_util.h"

#define MR NN_GEMM_MR
#define NR NN_GEMM_NR
#define KC 256
#define MC 144
#define NC 3072

/* ---- argument helpers ---- */

bool nn_int_list(em_evalue *v, int32_t n, const int64_t *dflt, int64_t *out) {
  size_t len = 0;
  const int64_t *xs = em_evalue_int_list(v, &len);
  if (!xs) return false;
  if (len == 0) {
    if (!dflt) return false;
    for (int32_t i = 0; i < n; i++) out[i] = dflt[i];
    return true;
  }
  if (len != 1 && len != (size_t)n) return false;
  for (int32_t i = 0; i < n; i++) out[i] = xs[len == 1 ? 0 : i];
  return true;
}

bool nn_opt_double(const em_evalue *v, double dflt, double *out) {
  if (!v || v->tag == EM_TAG_NONE) {
    *out = dflt;
    return true;
  }
  return em_arg_double(v, out);
}

bool nn_opt_int(const em_evalue *v, int64_t dflt, int64_t *out) {
  if (!v || v->tag == EM_TAG_NONE) {
    *out = dflt;
    return true;
  }
  return em_arg_int(v, out);
}

bool nn_same_dtype(em_tensor *const *ts, int n, int d) {
  for (int i = 0; i < n; i++)
    if (ts[i] && ts[i]->dtype != d) return false;
  return true;
}

bool nn_is_contiguous(const em_tensor *t) {
  int64_t expect = 1;
  for (int32_t d = t->dim - 1; d >= 0; d--) {
    if (t->sizes[d] != 1 && t->strides[d] != expect) return false;
    expect *= t->sizes[d];
  }
  return true;
}

size_t nn_temp_mark(em_kernel_ctx *ctx) { return ctx && ctx->temp ? ctx->temp->used : 0; }

void nn_temp_release(em_kernel_ctx *ctx, size_t mark) {
  if (ctx && ctx->temp && mark <= ctx->temp->used) ctx->temp->used = mark;
}

int64_t nn_temp_fit(em_kernel_ctx *ctx, int64_t unit_bytes, int64_t want) {
  if (!ctx || !ctx->temp || unit_bytes <= 0) return want;
  size_t avail = ctx->temp->size > ctx->temp->used ? ctx->temp->size - ctx->temp->used : 0;
  int64_t fit = (int64_t)(avail / 2 / (size_t)unit_bytes);
  if (fit < 1) fit = 1;
  return want < fit ? want : fit;
}

void *nn_temp(em_kernel_ctx *ctx, int64_t n, size_t size) {
  if (n < 0 || (n > 0 && (uint64_t)n > SIZE_MAX / size)) return NULL;
  size_t bytes = (size_t)n * size;
  return em_kernel_alloc_temp(ctx, bytes ? bytes : 1, 64);
}

/* ---- micro-kernel and dot product (plain C; the optimized layer may replace them) ---- */

/* c[0..mr, 0..nr) (+)= a_panel @ b_panel over kc (em_f32_gemm_tile_fn, portable/fast_config.h). */
static void em_f32_gemm_ukernel_6x16__scalar(int64_t kc, const float *a, const float *b,
                                             int64_t ldb, float *c, int64_t rs, int64_t cs, int mr,
                                             int nr, bool accumulate) {
  float acc[MR][NR];
  for (int i = 0; i < MR; i++)
    for (int j = 0; j < NR; j++) acc[i][j] = 0.0f;
  for (int64_t p = 0; p < kc; p++) {
    const float *bp = b + p * ldb;
    const float *ap = a + p * MR;
    for (int i = 0; i < MR; i++) {
      float av = ap[i];
      for (int j = 0; j < NR; j++) acc[i][j] += av * bp[j];
    }
  }
  if (mr == MR && nr == NR && cs == 1) {
    for (int i = 0; i < MR; i++) {
      float *cr = c + i * rs;
      if (accumulate)
        for (int j = 0; j < NR; j++) cr[j] += acc[i][j];
      else
        for (int j = 0; j < NR; j++) cr[j] = acc[i][j];
    }
  } else {
    for (int i = 0; i < mr; i++)
      for (int j = 0; j < nr; j++) {
        float *cp = c + i * rs + j * cs;
        *cp = accumulate ? *cp + acc[i][j] : acc[i][j];
      }
  }
}

/* Dot product of two contiguous rows with 8 independent partial sums (vectorizable). */
static float em_f32_dot__scalar(const float *x, const float *y, int64_t k) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t p = 0;
  for (; p + 8 <= k; p += 8)
    for (int l = 0; l < 8; l++) acc[l] += x[p + l] * y[p + l];
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; p < k; p++) s += x[p] * y[p];
  return s;
}

/* ---- packing ---- */

/* Packs rows [0, mc) x cols [0, kc) of a into MR-row panels: dst[panel][p][i]. */
static void pack_a(nn_mat a, int64_t mc, int64_t kc, float *dst, int64_t panel_begin,
                   int64_t panel_end) {
  for (int64_t pi = panel_begin; pi < panel_end; pi++) {
    int64_t i0 = pi * MR;
    int64_t mr = mc - i0 < MR ? mc - i0 : MR;
    float *d = dst + pi * MR * kc;
    for (int64_t p = 0; p < kc; p++) {
      const float *src = a.p + i0 * a.rs + p * a.cs;
      int64_t i = 0;
      for (; i < mr; i++) d[p * MR + i] = src[i * a.rs];
      for (; i < MR; i++) d[p * MR + i] = 0.0f;
    }
  }
}

/* Packs rows [0, kc) x cols [0, nc) of b into NR-column panels: dst[panel][p][j]. */
static void pack_b(nn_mat b, int64_t kc, int64_t nc, float *dst, int64_t panel_begin,
                   int64_t panel_end) {
  for (int64_t pj = panel_begin; pj < panel_end; pj++) {
    int64_t j0 = pj * NR;
    int64_t nr = nc - j0 < NR ? nc - j0 : NR;
    float *d = dst + pj * NR * kc;
    for (int64_t p = 0; p < kc; p++) {
      const float *src = b.p + p * b.rs + j0 * b.cs;
      float *dp = d + p * NR;
      int64_t j = 0;
      if (b.cs == 1 && nr == NR)
        for (; j < NR; j++) dp[j] = src[j];
      else
        for (; j < nr; j++) dp[j] = src[j * b.cs];
      for (; j < NR; j++) dp[j] = 0.0f;
    }
  }
}

typedef struct gemm_job {
  nn_mat a, b, c;
  int64_t mc, nc, kc;
  int64_t n_mpanels, n_npanels;
  float *ap, *bp;
  bool accumulate;
  bool direct_b; /* full NR-wide panels read straight from a row-major B */
  em_f32_gemm_tile_fn uk;
} gemm_job;

static void pack_b_task(void *arg, int64_t begin, int64_t end) {
  gemm_job *j = arg;
  pack_b(j->b, j->kc, j->nc, j->bp, begin, end);
}

/* True if panel pj is read from B itself (else from the packed copy). */
static bool b_direct(const gemm_job *j, int64_t pj) {
  return j->direct_b && (pj + 1) * NR <= j->nc;
}

/* Runs tiles [begin, end) of the mc x nc block; tile t = (n panel major, m panel minor). */
static void compute_task(void *arg, int64_t begin, int64_t end) {
  gemm_job *j = arg;
  for (int64_t t = begin; t < end; t++) {
    int64_t pj = t / j->n_mpanels, pi = t % j->n_mpanels;
    int64_t i0 = pi * MR, j0 = pj * NR;
    int mr = (int)(j->mc - i0 < MR ? j->mc - i0 : MR);
    int nr = (int)(j->nc - j0 < NR ? j->nc - j0 : NR);
    float *c = j->c.p + i0 * j->c.rs + j0 * j->c.cs;
    const float *ap = j->ap + pi * MR * j->kc;
    if (b_direct(j, pj))
      j->uk(j->kc, ap, j->b.p + j0, j->b.rs, c, j->c.rs, j->c.cs, mr, nr, j->accumulate);
    else
      j->uk(j->kc, ap, j->bp + pj * NR * j->kc, NR, c, j->c.rs, j->c.cs, mr, nr, j->accumulate);
  }
}

/* ---- matrix-vector paths (decode-time linear layers: one side has at most 4 rows) ---- */

typedef struct gemv_job {
  nn_mat a, b, c;
  int64_t m, n, k;
  bool accumulate;
  em_f32_dot_fn dot;
} gemv_job;

/* C[i, n] = dot(A row i, B column n) for columns [begin, end): A rows and B columns contiguous. */
static void gemv_task(void *arg, int64_t begin, int64_t end) {
  const gemv_job *j = arg;
  for (int64_t n = begin; n < end; n++) {
    const float *col = j->b.p + n * j->b.cs;
    for (int64_t i = 0; i < j->m; i++) {
      float v = j->dot(j->a.p + i * j->a.rs, col, j->k);
      float *cp = j->c.p + i * j->c.rs + n * j->c.cs;
      *cp = j->accumulate ? *cp + v : v;
    }
  }
}

/* The same for rows [begin, end) of A (many rows, at most 4 columns: W [N, K] @ x^T). */
static void gemv_rows_task(void *arg, int64_t begin, int64_t end) {
  const gemv_job *j = arg;
  for (int64_t i = begin; i < end; i++) {
    const float *row = j->a.p + i * j->a.rs;
    for (int64_t n = 0; n < j->n; n++) {
      float v = j->dot(row, j->b.p + n * j->b.cs, j->k);
      float *cp = j->c.p + i * j->c.rs + n * j->c.cs;
      *cp = j->accumulate ? *cp + v : v;
    }
  }
}

/* Row-major B streamed in storage order, K rows split over tasks (nn_gemm.h). */
static void gemv_rm_task__scalar(void *arg, int64_t begin, int64_t end) { NN_GEMV_RM_BODY }

/* Returns false (nothing done) when the partial sums do not fit the scratch. */
static bool gemv_rowmajor(em_kernel_ctx *ctx, int64_t m, int64_t n, int64_t k, nn_mat a, nn_mat b,
                          nn_mat c, bool accumulate) {
  em_threadpool *pool = ctx ? ctx->pool : NULL;
  /* 4 row ranges per thread: a thread that is descheduled leaves its later ranges to others */
  int64_t threads = em_threadpool_size(pool);
  int64_t tasks = threads > 1 ? threads * 4 : 1;
  if (tasks > k) tasks = k;
  size_t mark = nn_temp_mark(ctx);
  float *part = nn_temp(ctx, tasks * m * n, sizeof(float));
  if (!part) return false;
  nn_gemv_rm_job j = {a, b, c, m, n, k, (k + tasks - 1) / tasks, part};
  const em_portable_fast_config *cfg = em_portable_fast_config_get();
  em_parallel_fn fn = cfg->gemv_rm ? cfg->gemv_rm : gemv_rm_task__scalar;
  em_parallel_for(pool, tasks, fn, &j);
  for (int64_t i = 0; i < m; i++)
    for (int64_t q = 0; q < n; q++) {
      float s = part[i * n + q];
      for (int64_t t = 1; t < tasks; t++) s += part[(t * m + i) * n + q];
      float *cp = c.p + i * c.rs + q * c.cs;
      *cp = accumulate ? *cp + s : s;
    }
  nn_temp_release(ctx, mark);
  return true;
}

em_status nn_sgemm(em_kernel_ctx *ctx, int64_t m, int64_t n, int64_t k, nn_mat a, nn_mat b,
                   nn_mat c, bool accumulate) {
  if (m <= 0 || n <= 0) return EM_OK;
  if (k <= 0) {
    if (!accumulate)
      for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) c.p[i * c.rs + j * c.cs] = 0.0f;
    return EM_OK;
  }
  em_threadpool *pool = ctx ? ctx->pool : NULL;
  if ((m <= 4 || n <= 4) && a.cs == 1 && b.rs == 1) { /* contiguous A rows . B columns */
    em_f32_dot_fn dot = em_portable_fast_config_get()->dot;
    gemv_job j = {a, b, c, m, n, k, accumulate, dot ? dot : em_f32_dot__scalar};
    if (m <= 4)
      em_parallel_for(pool, n, gemv_task, &j);
    else
      em_parallel_for(pool, m, gemv_rows_task, &j);
    return EM_OK;
  }
  /* few rows against row-major B (folded weights) */
  if (m <= 4 && b.cs == 1 && gemv_rowmajor(ctx, m, n, k, a, b, c, accumulate)) return EM_OK;
  /* Block sizes shrink (NC, then KC, then MC) until the packing buffers fit the scratch. */
  int64_t kcb = k < KC ? k : KC, ncb = n < NC ? n : NC, mcb = m < MC ? m : MC;
  size_t mark = nn_temp_mark(ctx); /* packing buffers live for this call only */
  float *bp = NULL, *ap = NULL;
  for (;;) {
    bp = nn_temp(ctx, kcb * ((ncb + NR - 1) / NR * NR), sizeof(float));
    ap = bp ? nn_temp(ctx, kcb * ((mcb + MR - 1) / MR * MR), sizeof(float)) : NULL;
    if (ap) break;
    nn_temp_release(ctx, mark);
    if (ncb > NR)
      ncb = (ncb / 2 + NR - 1) / NR * NR;
    else if (kcb > 16)
      kcb /= 2;
    else if (mcb > MR)
      mcb = (mcb / 2 + MR - 1) / MR * MR;
    else
      break;
  }
  NN_CHECK_ALLOC(ctx, bp && ap);
  gemm_job job;
  em_f32_gemm_tile_fn uk = em_portable_fast_config_get()->gemm;
  job.uk = uk ? uk : em_f32_gemm_ukernel_6x16__scalar;
  /* Few rows against a row-major B (prefill through folded weights): B's rows are read in
   * place, each NR-wide panel line a whole 64-byte line, instead of copying B at every call. */
  job.direct_b = b.cs == 1 && m <= 64;
  job.ap = ap;
  job.bp = bp;
  for (int64_t jc = 0; jc < n; jc += ncb) {
    int64_t nc = n - jc < ncb ? n - jc : ncb;
    for (int64_t pc = 0; pc < k; pc += kcb) {
      int64_t kc = k - pc < kcb ? k - pc : kcb;
      job.b = (nn_mat){b.p + pc * b.rs + jc * b.cs, b.rs, b.cs};
      job.kc = kc;
      job.nc = nc;
      job.n_npanels = (nc + NR - 1) / NR;
      if (!job.direct_b)
        em_parallel_for(pool, job.n_npanels, pack_b_task, &job);
      else if (nc % NR)
        pack_b(job.b, kc, nc, bp, job.n_npanels - 1, job.n_npanels);
      job.accumulate = accumulate || pc > 0;
      for (int64_t ic = 0; ic < m; ic += mcb) {
        int64_t mc = m - ic < mcb ? m - ic : mcb;
        job.a = (nn_mat){a.p + ic * a.rs + pc * a.cs, a.rs, a.cs};
        job.mc = mc;
        job.n_mpanels = (mc + MR - 1) / MR;
        pack_a(job.a, mc, kc, ap, 0, job.n_mpanels);
        job.c = (nn_mat){c.p + ic * c.rs + jc * c.cs, c.rs, c.cs};
        em_parallel_for(pool, job.n_mpanels * job.n_npanels, compute_task, &job);
      }
    }
  }
  nn_temp_release(ctx, mark);
  return EM_OK;
}
