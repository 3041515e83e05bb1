/*
 * cpu_op_rows.c — operators over rows: mean or sum (over the middle of [outer, len, inner]),
 * softmax / log-softmax (with an optional scale and additive mask), layer norm and RMS norm,
 * per-token int8 fake-quant: their checks and one run for all, rows split over the threads; and the
 * per-tensor dynamic int8 fake-quant (two passes over the tensor).
 */
#include "cpu_ops.h"

bool emc_check_mean(const emc_delegate *d, const emc_op *op, char *why, size_t why_n) {
  const emc_mean_params p = emc_mean_params_of(op);
  int64_t inner = p.inner < 1 ? 1 : p.inner;
  if (p.outer < 0 || p.len < 1) WHY("mean: bad shape");
  if (p.sum < EMC_REDUCE_MEAN || p.sum > EMC_REDUCE_MIN)
    WHY("mean: reduction %lld is not a mean, sum, max or min", (long long)p.sum);
  return check_rows(d, op, p.outer * p.len * inner, p.outer * inner, why, why_n);
}

/* Softmax rows, with an optional scale (scaled = 1, fp scale) and additive mask (in[1]: mask_rows
 * rows of the axis length, repeating down the rows) applied first. */
bool emc_check_softmax(const emc_delegate *d, const emc_op *op, char *why, size_t why_n) {
  const emc_softmax_params p = emc_softmax_params_of(op);
  const int64_t rows = p.rows, cols = p.cols, mask_rows = p.mask_rows;
  int64_t n;
  if (rows < 0 || cols < 1 || p.inner < 1 || __builtin_mul_overflow(rows, cols, &n) ||
      __builtin_mul_overflow(n, p.inner, &n))
    WHY("softmax: bad shape");
  if (p.inner > 1 && (p.scaled || op->in[1] >= 0))
    WHY("softmax: scale or mask on a softmax over a non-last dim");
  if (p.inner > 1 && tensor_at(d, op->in[0]) && tensor_at(d, op->out[0]) &&
      out_shared(tensor_at(d, op->in[0]), tensor_at(d, op->out[0])))
    WHY("softmax over a non-last dim: input and output overlap");
  if (p.log != 0 && p.log != 1) WHY("softmax: log flag %lld is not 0 or 1", (long long)p.log);
  if (p.scaled != 0 && p.scaled != 1)
    WHY("softmax: scale flag %lld is not 0 or 1", (long long)p.scaled);
  if (p.log && (p.scaled || op->in[1] >= 0)) /* the row runs in place: not for log */
    WHY("softmax: scale or mask on a log-softmax");
  if (p.safe != 0 && p.safe != 1) WHY("softmax: safe flag %lld is not 0 or 1", (long long)p.safe);
  if (p.safe && (p.log || p.inner > 1))
    WHY("softmax: a safe softmax is over the last dim, not log");
  if (op->in[1] >= 0) {
    const emc_rt_tensor *m = tensor_at(d, op->in[1]);
    if (!m) WHY("softmax: bad mask tensor id");
    if (mask_rows < 1 || rows % mask_rows != 0)
      WHY("softmax: mask of %lld rows does not tile %lld rows", (long long)mask_rows,
          (long long)rows);
    if (m->numel != mask_rows * cols)
      WHY("softmax: mask has %lld elements, expected %lld", (long long)m->numel,
          (long long)(mask_rows * cols));
    if (out_shared(m, tensor_at(d, op->out[0]))) WHY("softmax: mask shares the output's storage");
  } else if (mask_rows != 0) {
    WHY("softmax: mask rows %lld without a mask", (long long)mask_rows);
  }
  return check_rows(d, op, n, n, why, why_n);
}

/* Softmax (log-softmax) over the middle of one [cols, inner] block (a non-last dim): the
 * steps of the portable f32 softmax per column, 64 columns at a time (the max, x - max through
 * the ISA's exp into y with the sums, then y / sum or (x - max) - log(sum)), reading rows. */
static void softmax_columns(const em_cpu_config *cfg, const float *x, float *y, int64_t cols,
                            int64_t inner, bool log_sm, const float *fp) {
  enum { SB = 64 };
  float m[SB], s[SB];
  for (int64_t i0 = 0; i0 < inner; i0 += SB) {
    const int64_t nb = inner - i0 < SB ? inner - i0 : SB;
    for (int64_t i = 0; i < nb; i++) m[i] = -INFINITY, s[i] = 0.0f;
    for (int64_t l = 0; l < cols; l++) {
      const float *xr = x + l * inner + i0;
      for (int64_t i = 0; i < nb; i++) {
        const float v = xr[i];
        m[i] = (v != v || m[i] != m[i]) ? NAN : fmaxf(m[i], v);
      }
    }
    for (int64_t l = 0; l < cols; l++) {
      const float *xr = x + l * inner + i0;
      float *yr = y + l * inner + i0;
      for (int64_t i = 0; i < nb; i++) yr[i] = xr[i] - m[i];
      cfg->vact((size_t)nb, yr, yr, EMC_ACT_EXP, fp);
      for (int64_t i = 0; i < nb; i++) s[i] += yr[i];
    }
    if (log_sm)
      for (int64_t i = 0; i < nb; i++) s[i] = logf(s[i]);
    for (int64_t l = 0; l < cols; l++) {
      const float *xr = x + l * inner + i0;
      float *yr = y + l * inner + i0;
      if (log_sm)
        for (int64_t i = 0; i < nb; i++) yr[i] = (xr[i] - m[i]) - s[i];
      else
        for (int64_t i = 0; i < nb; i++) yr[i] /= s[i];
    }
  }
}

bool emc_check_norm(const emc_delegate *d, const emc_op *op, char *why, size_t why_n) {
  const emc_norm_params p = emc_norm_params_of(op);
  int64_t rows = p.rows, cols = p.cols;
  if (rows < 0 || cols < 1) WHY("norm: bad shape");
  for (int i = 1; i < 3; i++) {
    if (op->in[i] < 0) continue;
    const emc_rt_tensor *w = tensor_at(d, op->in[i]);
    if (!w || w->numel != cols) WHY("norm: affine parameter %d has the wrong size", i);
  }
  return check_rows(d, op, rows * cols, rows * cols, why, why_n);
}

/* Per-token int8 fake-quant (EMC_OP_TOKEN_FQ, rows x cols as the norms' slots): each row goes
 * through quantized_decomposed's choose_qparams_per_token_asymmetric (f32 input: the qparams
 * rounded to f32 step by step, then kept as an f64 scale and an int64 zero point),
 * quantize_per_token and dequantize_per_token to f32, with the portable kernels' arithmetic
 * (kernels/portable/quant_affine.c) for those dtypes, so the same bits. */
bool emc_check_token_fq(const emc_delegate *d, const emc_op *op, char *why, size_t why_n) {
  const emc_norm_params p = emc_norm_params_of(op);
  if (p.rows < 0 || p.cols < 1) WHY("token fake-quant: bad shape");
  return check_rows(d, op, p.rows * p.cols, p.rows * p.cols, why, why_n);
}

static void token_fq_row(const float *x, float *y, int64_t n) {
  double mn = INFINITY, mx = -INFINITY;
  for (int64_t j = 0; j < n; j++) {
    const double v = x[j];
    if (v < mn || v != v) mn = v;
    if (v > mx || v != v) mx = v;
  }
  const double qmin = -128, qmax = 127;
  double scale, zp;
  em_q8_token_qparams(mn, mx, &scale, &zp);
  /* a NaN zero point (an infinite value in the row): INT64_MIN, as the portable kernel */
  const int64_t z = zp != zp ? INT64_MIN : (int64_t)nearbyint(zp);
  const double inv = 1.0 / scale, zd = (double)z;
  for (int64_t j = 0; j < n; j++) {
    const double v = nearbyint((double)x[j] * inv + zd);
    const int64_t q = v != v ? -128 : v < qmin ? -128 : v > qmax ? 127 : (int64_t)v;
    const uint64_t d = (uint64_t)q - (uint64_t)z; /* q - z, wrapping as the portable kernel */
    const int64_t dq = d > (uint64_t)INT64_MAX ? -(int64_t)(UINT64_MAX - d) - 1 : (int64_t)d;
    y[j] = (float)((double)dq * scale);
  }
}

/* Whether every value of a softmax row, x * scale (when scale) + mask (when mask) in f32 as the
 * row's own pass computes it, is -inf: torch's _safe_softmax gives zeros there. Most rows stop
 * at their first value. */
static bool masked_row(const float *x, const float *scale, const float *mask, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    float v = scale ? x[i] * *scale : x[i];
    if (mask) v += mask[i];
    if (!(v == -INFINITY)) return false;
  }
  return true;
}

typedef struct rows_job {
  const emc_delegate *d;
  const emc_op *op;
  int64_t cols; /* floats a row: the mean's len, the softmax's or norm's cols */
  emc_mean_params mean;
  emc_softmax_params sm;
  emc_norm_params norm;
} rows_job;

/* Row r of a max (or min) over the middle of [outer, cols, inner] (inner 0 or 1: over a row),
 * NaN propagating as ATen's amax / max.dim: a NaN wins, the first of them kept. */
static void reduce_extreme(const float *x, float *y, int64_t r, int64_t cols, int64_t inner,
                           bool is_max) {
  if (inner < 1) inner = 1;
  float *yo = y + r * inner;
  const float *xr = x + r * cols * inner;
  for (int64_t i = 0; i < inner; i++) yo[i] = xr[i];
  for (int64_t l = 1; l < cols; l++) {
    const float *xl = xr + l * inner;
    if (is_max)
      for (int64_t i = 0; i < inner; i++)
        yo[i] = (xl[i] > yo[i] || xl[i] != xl[i]) && yo[i] == yo[i] ? xl[i] : yo[i];
    else
      for (int64_t i = 0; i < inner; i++)
        yo[i] = (xl[i] < yo[i] || xl[i] != xl[i]) && yo[i] == yo[i] ? xl[i] : yo[i];
  }
}

static void rows_chunk(void *ctx, int64_t begin, int64_t end) {
  const rows_job *j = ctx;
  const emc_delegate *d = j->d;
  const emc_op *op = j->op;
  const float *x = data_of(d, op->in[0]);
  float *y = data_of(d, op->out[0]);
  const int64_t cols = j->cols;
  if (op->kind == EMC_OP_LAYERNORM || op->kind == EMC_OP_RMSNORM) { /* the rows at once */
    d->cfg->norm((size_t)(end - begin), (size_t)cols, x + begin * cols, data_of(d, op->in[1]),
                 op->kind == EMC_OP_LAYERNORM ? data_of(d, op->in[2]) : NULL, j->norm.eps,
                 op->kind == EMC_OP_RMSNORM, y + begin * cols);
    for (int64_t r = begin; r < end && op->act; r++)
      d->cfg->vact((size_t)cols, y + r * cols, y + r * cols, op->act, op->fp);
    return;
  }
  for (int64_t r = begin; r < end; r++) {
    switch (op->kind) {
    case EMC_OP_MEAN: {
      if (j->mean.sum >= EMC_REDUCE_MAX) {
        reduce_extreme(x, y, r, cols, j->mean.inner, j->mean.sum == EMC_REDUCE_MAX);
        const int64_t inner = j->mean.inner > 1 ? j->mean.inner : 1;
        if (op->act) d->cfg->vact((size_t)inner, y + r * inner, y + r * inner, op->act, op->fp);
        break;
      }
      if (j->mean.inner > 1) { /* reduce the middle of [outer, cols, inner] */
        const int64_t inner = j->mean.inner;
        float *yo = y + r * inner;
        for (int64_t i = 0; i < inner; i++) yo[i] = 0.0f;
        for (int64_t l = 0; l < cols; l++) {
          const float *xr = x + (r * cols + l) * inner;
          for (int64_t i = 0; i < inner; i++) yo[i] += xr[i];
        }
        for (int64_t i = 0; i < inner && !j->mean.sum; i++) yo[i] /= (float)cols;
        if (op->act) d->cfg->vact((size_t)inner, yo, yo, op->act, op->fp);
        break;
      }
      y[r] = j->mean.sum ? plane_sum(x + r * cols, cols) : plane_mean(x + r * cols, cols);
      if (op->act) d->cfg->vact(1, y + r, y + r, op->act, op->fp);
      break;
    }
    case EMC_OP_SOFTMAX: {
      if (j->sm.inner > 1) { /* over a non-last dim: a [cols, inner] block */
        const int64_t inner = j->sm.inner;
        softmax_columns(d->cfg, x + r * cols * inner, y + r * cols * inner, cols, inner,
                        j->sm.log != 0, op->fp);
        break;
      }
      /* x * scale + mask into the output row, in L1; then the softmax there, in place */
      const em_minmax_params none = {-INFINITY, INFINITY, 0};
      const float *xr = x + r * cols;
      float *yr = y + r * cols;
      const float *mask =
          op->in[1] >= 0 ? data_of(d, op->in[1]) + (r % j->sm.mask_rows) * cols : NULL;
      if (j->sm.safe && masked_row(xr, j->sm.scaled ? &j->sm.scale : NULL, mask, cols)) {
        memset(yr, 0, (size_t)cols * sizeof *yr); /* before x is read: y may be x */
        break;
      }
      if (d->cfg->softmax_sm && (j->sm.scaled || mask)) { /* the same bits in three passes */
        d->cfg->softmax_sm((size_t)cols, xr, j->sm.scaled ? &j->sm.scale : NULL, mask, yr);
        break;
      }
      if (j->sm.scaled) {
        d->cfg->vbinc[EMC_BIN_MUL]((size_t)cols, xr, &j->sm.scale, yr, &none);
        xr = yr;
      }
      if (op->in[1] >= 0) {
        d->cfg->vbin[EMC_BIN_ADD]((size_t)cols, xr,
                                  data_of(d, op->in[1]) + (r % j->sm.mask_rows) * cols, yr, &none);
        xr = yr;
      }
      d->cfg->softmax((size_t)cols, xr, yr, (int)j->sm.log);
      break;
    }
    case EMC_OP_TOKEN_FQ:
      token_fq_row(x + r * cols, y + r * cols, cols);
      if (op->act) d->cfg->vact((size_t)cols, y + r * cols, y + r * cols, op->act, op->fp);
      break;
    default: break; /* the norms: above */
    }
  }
}

void emc_run_softmax_range(const emc_delegate *d, const emc_op *op, int64_t begin, int64_t end) {
  rows_job j = {
      d, op, 0, emc_mean_params_of(op), emc_softmax_params_of(op), emc_norm_params_of(op)};
  j.cols = j.sm.cols;
  rows_chunk(&j, begin, end);
}

em_status emc_run_rows(const emc_delegate *d, const emc_op *op, em_threadpool *pool) {
  if (op->kind == EMC_OP_MEAN && d->q8_lk && d->q8_lk[op - d->ops] > 0) {
    emc_q8_lk_mean(d, op, pool);
    return EM_OK;
  }
  rows_job j = {
      d, op, 0, emc_mean_params_of(op), emc_softmax_params_of(op), emc_norm_params_of(op)};
  int64_t rows;
  if (op->kind == EMC_OP_MEAN)
    rows = j.mean.outer, j.cols = j.mean.len;
  else if (op->kind == EMC_OP_SOFTMAX)
    rows = j.sm.rows, j.cols = j.sm.cols;
  else
    rows = j.norm.rows, j.cols = j.norm.cols;
  par_for_static(pool, rows, rows_chunk, &j, d->t[op->in[0]].numel * 4);
  return EM_OK;
}

/* ---- per-tensor dynamic int8 fake-quant (EMC_OP_TENSOR_FQ) ------------------------------------
 */

bool emc_check_tensor_fq(const emc_delegate *d, const emc_op *op, char *why, size_t why_n) {
  const emc_norm_params p = emc_norm_params_of(op);
  const int32_t qmin = op->ip[EMC_TFQ_QMIN], qmax = op->ip[EMC_TFQ_QMAX];
  const float eps = op->fp[EMC_TFQ_FP_EPS];
  if (p.rows < 1 || p.cols < 1) WHY("tensor fake-quant: bad shape");
  if (qmin < -128 || qmax > 127 || qmin >= qmax)
    WHY("tensor fake-quant: range [%d, %d] is not an ordered part of int8's", qmin, qmax);
  if (!(eps >= 0.0f && eps < INFINITY)) WHY("tensor fake-quant: eps %g", eps);
  if (op->act != EMC_ACT_NONE) WHY("tensor fake-quant: an activation");
  return check_rows(d, op, p.rows * p.cols, p.rows * p.cols, why, why_n);
}

#define TFQ_CHUNKS 64 /* the minimum and maximum in this many parts at most */

typedef struct tfq_job {
  const emc_delegate *d;
  const float *x;
  float *y;
  int64_t n, chunk;
  float mn[TFQ_CHUNKS], mx[TFQ_CHUNKS];
  float fp[8]; /* EMC_ACT_FAKEQUANT's slots for the qparams found */
  float inv, scale, zp, qmin, qmax;
} tfq_job;

static void tfq_minmax(void *ctx, int64_t begin, int64_t end) {
  tfq_job *j = ctx;
  for (int64_t c = begin; c < end; c++) {
    const int64_t lo = c * j->chunk, hi = lo + j->chunk < j->n ? lo + j->chunk : j->n;
    j->d->q8_rowt((size_t)(hi - lo), j->x + lo, NULL, NULL, j->mn + c, j->mx + c);
  }
}

static void tfq_apply(void *ctx, int64_t begin, int64_t end) {
  const tfq_job *j = ctx;
  j->d->cfg->vact((size_t)(end - begin), j->x + begin, j->y + begin, EMC_ACT_FAKEQUANT, j->fp);
}

/* A scale that is infinite or zero (an infinite input, eps 0 over zeros): the portable kernels'
 * steps one value at a time, in f32 (0 * inf and inf * 0 give NaN as there). */
static void tfq_apply_scalar(void *ctx, int64_t begin, int64_t end) {
  const tfq_job *j = ctx;
  for (int64_t i = begin; i < end; i++) {
    float v = nearbyintf(j->x[i] * j->inv) + j->zp;
    v = v != v ? j->qmin : v < j->qmin ? j->qmin : v > j->qmax ? j->qmax : v;
    j->y[i] = (v - j->zp) * j->scale;
  }
}

em_status emc_run_tensor_fq(const emc_delegate *d, const emc_op *op, em_threadpool *pool) {
  const emc_norm_params p = emc_norm_params_of(op);
  tfq_job j = {.d = d, .x = data_of(d, op->in[0]), .y = data_of(d, op->out[0])};
  j.n = p.rows * p.cols;
  j.chunk = (j.n + TFQ_CHUNKS - 1) / TFQ_CHUNKS;
  if (j.chunk < 4096) j.chunk = 4096;
  const int64_t chunks = (j.n + j.chunk - 1) / j.chunk;
  par_for_mem(pool, chunks, tfq_minmax, &j, j.n);
  double mn = INFINITY, mx = -INFINITY;
  for (int64_t c = 0; c < chunks; c++) { /* as the portable kernel's scan: a NaN sticks */
    const double lo = j.mn[c], hi = j.mx[c];
    if (mn == mn && (lo < mn || lo != lo)) mn = lo;
    if (mx == mx && (hi > mx || hi != hi)) mx = hi;
  }
  double scale, zp;
  j.qmin = (float)op->ip[EMC_TFQ_QMIN], j.qmax = (float)op->ip[EMC_TFQ_QMAX];
  em_q8_tensor_qparams(mn, mx, j.qmin, j.qmax, op->fp[EMC_TFQ_FP_EPS], &scale, &zp);
  j.inv = (float)(1.0 / scale), j.scale = (float)scale, j.zp = (float)zp;
  if (!(j.scale > 0.0f && j.scale < INFINITY && j.inv < INFINITY)) {
    par_for_mem(pool, j.n, tfq_apply_scalar, &j, j.n);
    return EM_OK;
  }
  j.fp[EMC_ACT_FP_MIN] = -INFINITY, j.fp[EMC_ACT_FP_MAX] = INFINITY;
  j.fp[EMC_ACT_FP_INV_SCALE] = j.inv, j.fp[EMC_ACT_FP_SCALE] = j.scale;
  j.fp[EMC_ACT_FP_ZP] = j.zp, j.fp[EMC_ACT_FP_QMIN] = j.qmin, j.fp[EMC_ACT_FP_QMAX] = j.qmax;
  par_for_mem(pool, j.n, tfq_apply, &j, j.n);
  return EM_OK;
}
