/*
 * cpu_op_gemm.c — gemm (linear, matmul, batched matmul): its checks and its run on the GEMM
 * driver (cpu_gemm.c), or as GEMVs over packed B panels for one row; emc_run_gemm_job also runs
 * the convs' GEMMs.
 */
#include "cpu_ops.h"

bool emc_check_gemm(const emc_delegate *d, const emc_op *op, char *why, size_t why_n) {
  const emc_rt_tensor *a = tensor_at(d, op->in[0]), *b = tensor_at(d, op->in[1]);
  const emc_rt_tensor *bias = op->in[2] < 0 ? NULL : tensor_at(d, op->in[2]);
  const emc_rt_tensor *y = tensor_at(d, op->out[0]);
  if (!a || !b || !y || (op->in[2] >= 0 && !bias)) WHY("gemm: bad tensor id");
  if (!params_nonneg(op, EMC_GEMM_N_PARAMS, why, why_n)) return false;
  const emc_gemm_params p = emc_gemm_params_of(op);
  int64_t batch = p.batch, m = p.m, k = p.k, n = p.n;
  if (batch < 1 || m < 1 || k < 1 || n < 1) WHY("gemm: empty problem");
  int64_t a_rows = p.a_packed ? (int64_t)emc_div_up((size_t)m, EMC_MR) * EMC_MR : m;
  if (a->numel < (batch - 1) * p.a_bstride + a_rows * k)
    WHY("gemm: A has %lld elements, too few", (long long)a->numel);
  int64_t b_cols = p.b_packed ? (int64_t)emc_div_up((size_t)n, EMC_NR_PANEL) * EMC_NR_PANEL : n;
  if (b->numel < (batch - 1) * p.b_bstride + k * b_cols)
    WHY("gemm: B has %lld elements, too few", (long long)b->numel);
  if (y->numel != batch * m * n)
    WHY("gemm: output has %lld elements, expected %lld", (long long)y->numel,
        (long long)(batch * m * n));
  if (bias && bias->numel != n) WHY("gemm: bias has %lld elements", (long long)bias->numel);
  if (p.c_heads > 1 || (p.c_heads && op->in[3] >= 0))
    WHY("gemm: interleaved output flag %lld (0 or 1, no residual)", (long long)p.c_heads);
  return check_residual(d, op, why, why_n) && check_act(op, why, why_n);
}

/* M = 1 with a packed B: stream each 16-column panel once (no 6-row tile). */
static void gemv_panels(void *ctx, int64_t begin, int64_t end) {
  const emc_gemm *j = ctx;
  for (int64_t pi = begin; pi < end; pi++) {
    size_t n0 = (size_t)pi * EMC_NR_PANEL, nc = j->n - n0 < EMC_NR_PANEL ? j->n - n0 : EMC_NR_PANEL;
    float *c = j->c + n0;
    const em_minmax_params none = {-INFINITY, INFINITY, 0};
    j->cfg->gemv16(j->k, nc, j->a, j->b + (size_t)pi * j->k * EMC_NR_PANEL,
                   j->bias_n ? j->bias_n + n0 : NULL, c, j->res ? &none : &j->mm);
    if (j->res) j->cfg->vbin[EMC_BIN_ADD](nc, c, j->res + n0, c, &j->mm);
    if (j->act) j->cfg->vact(nc, c, c, j->act, j->fp);
  }
}

void emc_run_gemm_job(emc_gemm *j, em_threadpool *pool) {
  if (j->m == 1 && j->b_packed && !j->bias_m && !j->a_packed) {
    size_t panels = emc_div_up(j->n, EMC_NR_PANEL);
    par_for(pool, (int64_t)panels, gemv_panels, j, (int64_t)(j->n * j->k));
    return;
  }
  emc_gemm_run(j, pool);
}

typedef struct gemm_batch_job {
  const emc_delegate *d;
  const emc_op *op;
  em_threadpool *pool; /* for each GEMM; NULL when the batch itself is split over threads */
} gemm_batch_job;

/* GEMMs [begin, end) of a batched GEMM operator. */
static void gemm_batch(void *ctx, int64_t begin, int64_t end) {
  const gemm_batch_job *bj = ctx;
  const emc_delegate *d = bj->d;
  const emc_op *op = bj->op;
  const emc_gemm_params p = emc_gemm_params_of(op);
  const float *a = data_of(d, op->in[0]), *b = data_of(d, op->in[1]);
  float *y = data_of(d, op->out[0]);
  size_t m = (size_t)p.m, k = (size_t)p.k, n = (size_t)p.n;
  for (int64_t bi = begin; bi < end; bi++) {
    emc_gemm j;
    gemm_init(&j, d);
    j.m = m, j.k = k, j.n = n;
    j.a = a + bi * p.a_bstride, j.a_packed = (int)p.a_packed;
    j.a_rs = j.a_packed ? 1 : k, j.a_ks = j.a_packed ? EMC_MR : 1;
    j.b = b + bi * p.b_bstride, j.ldb = n, j.b_packed = (int)p.b_packed;
    if (p.c_heads) /* row r of product bi at y[(r * batch + bi) * n] */
      j.c = y + bi * (int64_t)n, j.ldc = (size_t)p.batch * n;
    else
      j.c = y + bi * (int64_t)(m * n), j.ldc = n;
    j.res = op->in[3] >= 0 ? data_of(d, op->in[3]) + bi * (int64_t)(m * n) : NULL, j.ldr = n;
    j.bias_n = data_of(d, op->in[2]);
    j.mm = clamp_of(op), j.act = post_act(op), j.fp = op->fp;
    emc_run_gemm_job(&j, bj->pool);
  }
}

void emc_run_gemm_range(const emc_delegate *d, const emc_op *op, int64_t begin, int64_t end) {
  gemm_batch_job bj = {d, op, NULL};
  gemm_batch(&bj, begin, end);
}

/* A batch of at least two GEMMs per thread (attention's per-head products) is split over the
 * threads whole GEMMs at a time: one barrier instead of one per GEMM, each GEMM in one L2. */
em_status emc_run_gemm(const emc_delegate *d, const emc_op *op, em_threadpool *pool) {
  const int64_t batch = emc_gemm_params_of(op).batch;
  const bool split = batch >= 2 * (int64_t)em_threadpool_size(pool);
  gemm_batch_job bj = {d, op, split ? NULL : pool};
  if (split)
    em_parallel_for(pool, batch, gemm_batch, &bj);
  else
    gemm_batch(&bj, 0, batch);
  return EM_OK;
}
