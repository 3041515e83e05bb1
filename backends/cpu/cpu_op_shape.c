/*
 * cpu_op_shape.c — data movement: permute, cat, slice (and flip), pad, embedding (rows of a
 * table by index) and gather (elements at constant offsets), their checks and runs (copy, the
 * identity with an optional activation, runs as a unary: cpu_op_eltwise.c).
 */
#include "cpu_ops.h"
#include "ember/platform.h"

/* ---- permute --------------------------------------------------------------------------------- */

bool emc_check_permute(const emc_delegate *d, const emc_op *op, char *why, size_t why_n) {
  const emc_rt_tensor *x = tensor_at(d, op->in[0]), *y = tensor_at(d, op->out[0]);
  if (!x || !y || x->ndim != y->ndim) WHY("permute: bad tensors");
  const emc_permute_params pp = emc_permute_params_of(op);
  unsigned seen = 0;
  for (uint32_t i = 0; i < x->ndim; i++) {
    int64_t p = pp.dims[i];
    if (p < 0 || p >= (int64_t)x->ndim || (seen >> p) & 1u) WHY("permute: not a permutation");
    seen |= 1u << p;
    if (y->sizes[i] != x->sizes[p]) WHY("permute: output dim %u has the wrong size", i);
  }
  return check_act(op, why, why_n);
}

typedef struct permute_job {
  const float *x;
  float *y;
  uint32_t nd;
  int64_t ysz[EMC_MAX_DIMS], xst[EMC_MAX_DIMS]; /* input stride of each output dim */
  /* a permute that moves the input's last dim off the output's last: output dim q reads the
   * input's last dim (stride 1), and the work goes as 2-D transposes (rows blocks of the output's
   * last dim) of every index of the other dims */
  const em_f32_transpose_fn transpose;
  uint32_t q;
  int64_t yst[EMC_MAX_DIMS]; /* output strides */
  int64_t blocks;            /* row blocks of a transpose */
} permute_job;

enum { PERMUTE_T_ROWS = 64 }; /* output-last-dim rows of one transposing item */

/* One output row (last output dim) per item. */
static void permute_rows(void *ctx, int64_t begin, int64_t end) {
  const permute_job *j = ctx;
  const int64_t inner = j->ysz[j->nd - 1], ist = j->xst[j->nd - 1];
  for (int64_t r = begin; r < end; r++) {
    int64_t rem = r, off = 0;
    for (int i = (int)j->nd - 2; i >= 0; i--) {
      off += (rem % j->ysz[i]) * j->xst[i];
      rem /= j->ysz[i];
    }
    float *dst = j->y + r * inner;
    const float *src = j->x + off;
    if (ist == 1)
      memcpy(dst, src, (size_t)inner * sizeof *dst);
    else
      for (int64_t i = 0; i < inner; i++) dst[i] = src[i * ist];
  }
}

/* Pairs of rows interleaved: y[2l] = a[l], y[2l + 1] = b[l] (a loop the compiler vectorizes). */
static void interleave2(const float *restrict a, const float *restrict b, float *restrict y,
                        int64_t n) {
  for (int64_t l = 0; l < n; l++) y[2 * l] = a[l], y[2 * l + 1] = b[l];
}

/* Items of an interleaving permute (the output's last dim short, the input's last one just before
 * it: a transposed conv's phases put back together): one index of the other dims an item, whose
 * output rows y[l][r] = x[r * ist + l] interleave k input rows. */
static void permute_interleave(void *ctx, int64_t begin, int64_t end) {
  const permute_job *j = ctx;
  const uint32_t last = j->nd - 1;
  const int64_t k = j->ysz[last], n = j->ysz[last - 1], ist = j->xst[last];
  for (int64_t it = begin; it < end; it++) {
    int64_t rem = it, off = 0;
    for (int i = (int)last - 2; i >= 0; i--) {
      off += (rem % j->ysz[i]) * j->xst[i];
      rem /= j->ysz[i];
    }
    const float *src = j->x + off;
    float *dst = j->y + it * n * k;
    if (k == 2) {
      interleave2(src, src + ist, dst, n);
      continue;
    }
    for (int64_t l = 0; l < n; l++)
      for (int64_t r = 0; r < k; r++) dst[l * k + r] = src[r * ist + l];
  }
}

/* Items of a transposing permute: rows block b of the transpose at one index of the other dims:
 * y[.. i_q ..][l] = x[.. i_q ..][l * ist] for l in the block, i_q along dim q, 16 x 16 at a time.
 */
static void permute_transposes(void *ctx, int64_t begin, int64_t end) {
  const permute_job *j = ctx;
  const uint32_t last = j->nd - 1;
  const int64_t sl = j->ysz[last], sq = j->ysz[j->q];
  for (int64_t it = begin; it < end; it++) {
    int64_t rem = it / j->blocks, xo = 0, yo = 0;
    const int64_t l0 = it % j->blocks * PERMUTE_T_ROWS;
    for (int i = (int)last - 1; i >= 0; i--) {
      if ((uint32_t)i == j->q) continue;
      const int64_t v = rem % j->ysz[i];
      rem /= j->ysz[i];
      xo += v * j->xst[i], yo += v * j->yst[i];
    }
    const int64_t nl = sl - l0 < PERMUTE_T_ROWS ? sl - l0 : PERMUTE_T_ROWS;
    j->transpose((size_t)nl, (size_t)sq, j->x + xo + l0 * j->xst[last], (size_t)j->xst[last],
                 j->y + yo + l0, (size_t)j->yst[j->q]);
  }
}

em_status emc_run_permute(const emc_delegate *d, const emc_op *op, em_threadpool *pool) {
  const emc_rt_tensor *xt = &d->t[op->in[0]], *yt = &d->t[op->out[0]];
  permute_job j = {xt->data, yt->data, xt->ndim, {0}, {0}, d->cfg->transpose, 0, {0}, 0};
  if (yt->numel == 0) return EM_OK;
  if (xt->ndim == 0) {
    j.y[0] = j.x[0];
    return EM_OK;
  }
  /* Zeroed: aarch64 gcc 12 cannot see that dims[] < ndim (validated at init) and warns. */
  int64_t st[EMC_MAX_DIMS] = {0}, s = 1;
  for (int i = (int)xt->ndim - 1; i >= 0; i--) st[i] = s, s *= xt->sizes[i];
  const emc_permute_params pp = emc_permute_params_of(op);
  for (uint32_t i = 0; i < xt->ndim; i++) j.ysz[i] = yt->sizes[i], j.xst[i] = st[pp.dims[i]];
  const uint32_t last = xt->ndim - 1;
  /* the output dim the input's last one went to, when that is not the output's last: the rows
   * of the output's last dim would each gather one float a stride apart (attention's K^T, an
   * NCHW <-> NHWC permute); as transposes of 16 x 16 blocks in registers instead */
  for (uint32_t i = 0; i < last; i++)
    if (pp.dims[i] == (int64_t)last && j.ysz[i] >= 4 && j.ysz[last] >= 4 && j.transpose)
      j.q = i + 1;
  if (j.q && j.xst[last] != 1) {
    j.q -= 1;
    for (int64_t i = (int64_t)last, s2 = 1; i >= 0; i--) j.yst[i] = s2, s2 *= j.ysz[i];
    j.blocks = (j.ysz[last] + PERMUTE_T_ROWS - 1) / PERMUTE_T_ROWS;
    par_for_mem(pool, yt->numel / (j.ysz[last] * j.ysz[j.q]) * j.blocks, permute_transposes, &j,
                yt->numel);
    return EM_OK;
  }
  if (last >= 1 && pp.dims[last - 1] == (int64_t)last && j.ysz[last] < 16 && j.xst[last] != 1) {
    par_for_mem(pool, yt->numel / (j.ysz[last] * j.ysz[last - 1]), permute_interleave, &j,
                yt->numel);
    return EM_OK;
  }
  par_for_mem(pool, yt->numel / j.ysz[last], permute_rows, &j, yt->numel);
  return EM_OK;
}

/* ---- cat ------------------------------------------------------------------------------------- */

bool emc_check_cat(const emc_delegate *d, const emc_op *op, char *why, size_t why_n) {
  const emc_rt_tensor *y = tensor_at(d, op->out[0]);
  const emc_cat_params p = emc_cat_params_of(op);
  int64_t outer = p.outer, n_in = p.n_in, total = 0;
  if (!y || outer < 0 || n_in < 1 || n_in > 4) WHY("cat: bad parameters");
  for (int i = 0; i < n_in; i++) {
    const emc_rt_tensor *x = tensor_at(d, op->in[i]);
    int64_t row = p.len[i];
    if (!x || row < 0 || x->numel != outer * row) WHY("cat: input %d has the wrong size", i);
    total += row;
  }
  if (y->numel != outer * total) WHY("cat: output has the wrong size");
  return check_act(op, why, why_n);
}

em_status emc_run_cat(const emc_delegate *d, const emc_op *op) {
  float *y = data_of(d, op->out[0]);
  const emc_cat_params p = emc_cat_params_of(op);
  int64_t outer = p.outer, n_in = p.n_in, total = 0;
  for (int i = 0; i < n_in; i++) total += p.len[i];
  for (int64_t o = 0; o < outer; o++) {
    float *dst = y + o * total;
    for (int i = 0; i < n_in; i++) {
      int64_t row = p.len[i];
      memcpy(dst, data_of(d, op->in[i]) + o * row, (size_t)row * sizeof *dst);
      dst += row;
    }
  }
  if (op->act) d->cfg->vact((size_t)(outer * total), y, y, op->act, op->fp);
  return EM_OK;
}

/* ---- slice ----------------------------------------------------------------------------------- */

bool emc_check_slice(const emc_delegate *d, const emc_op *op, char *why, size_t why_n) {
  if (!params_nonneg(op, EMC_SLICE_N_PARAMS, why, why_n)) return false;
  const emc_slice_params p = emc_slice_params_of(op);
  int64_t outer = p.outer, len = p.len, inner = p.inner, start = p.start, step = p.step,
          out_len = p.out_len;
  if (step < 1 || (out_len > 0 && start + (out_len - 1) * step >= len))
    WHY("slice: range runs past the dimension");
  if (p.reverse > 1) WHY("slice: reverse flag %lld is not 0 or 1", (long long)p.reverse);
  const emc_rt_tensor *x = tensor_at(d, op->in[0]), *y = tensor_at(d, op->out[0]);
  if (x && y && out_shared(x, y)) WHY("slice: input and output overlap");
  return check_rows(d, op, outer * len * inner, outer * out_len * inner, why, why_n);
}

/* Rows of the output's outer dim; a whole piece (step 1, in order) is one copy a row, single
 * floats (inner 1) are moved one by one, longer runs copied. */
typedef struct slice_job {
  const emc_delegate *d;
  const emc_op *op;
} slice_job;

static void slice_rows(void *ctx, int64_t begin, int64_t end) {
  const slice_job *j = ctx;
  const emc_delegate *d = j->d;
  const emc_op *op = j->op;
  const float *x = data_of(d, op->in[0]);
  float *y = data_of(d, op->out[0]);
  const emc_slice_params p = emc_slice_params_of(op);
  const int64_t row = p.out_len * p.inner;
  for (int64_t o = begin; o < end; o++) {
    const float *xo = x + (o * p.len + p.start) * p.inner;
    float *yo = y + o * row;
    if (p.step == 1 && !p.reverse) {
      memcpy(yo, xo, (size_t)row * sizeof *yo);
    } else if (p.inner == 1) {
      for (int64_t i = 0; i < p.out_len; i++)
        yo[i] = xo[(p.reverse ? p.out_len - 1 - i : i) * p.step];
    } else {
      for (int64_t i = 0; i < p.out_len; i++) {
        const int64_t k = p.reverse ? p.out_len - 1 - i : i;
        memcpy(yo + i * p.inner, xo + k * p.step * p.inner, (size_t)p.inner * sizeof *yo);
      }
    }
  }
}

em_status emc_run_slice(const emc_delegate *d, const emc_op *op, em_threadpool *pool) {
  const emc_slice_params p = emc_slice_params_of(op);
  slice_job j = {d, op};
  const int64_t n = p.outer * p.out_len * p.inner;
  par_for_mem(pool, p.outer, slice_rows, &j, n);
  float *y = data_of(d, op->out[0]);
  if (op->act) d->cfg->vact((size_t)n, y, y, op->act, op->fp);
  return EM_OK;
}

/* ---- embedding ------------------------------------------------------------------------------- */

bool emc_check_embedding(const emc_delegate *d, const emc_op *op, char *why, size_t why_n) {
  if (!params_nonneg(op, EMC_EMBED_N_PARAMS, why, why_n)) return false;
  const int64_t rows = op->ip[EMC_EMBED_ROWS], cols = op->ip[EMC_EMBED_COLS];
  const emc_rt_tensor *w = tensor_at(d, op->in[0]), *ix = tensor_at(d, op->in[1]);
  const emc_rt_tensor *y = tensor_at(d, op->out[0]);
  if (!w || !ix || !y) WHY("embedding: bad tensor ids");
  if (w->numel != rows * cols)
    WHY("embedding: the table is not %lld x %lld", (long long)rows, (long long)cols);
  if (ix->storage != EMC_INPUT || (ix->dtype != EMC_DTYPE_I64 && ix->dtype != EMC_DTYPE_I32))
    WHY("embedding: the indices are not an integer input");
  if (y->numel != ix->numel * cols) WHY("embedding: output has the wrong size");
  if (out_shared(w, y)) WHY("embedding: table and output overlap");
  return check_act(op, why, why_n);
}

typedef struct embed_job {
  const float *w;
  const void *ix;
  int i64;
  int64_t cols;
  float *y;
} embed_job;

static void embed_rows(void *ctx, int64_t begin, int64_t end) {
  const embed_job *j = ctx;
  for (int64_t r = begin; r < end; r++) {
    const int64_t k = j->i64 ? ((const int64_t *)j->ix)[r] : ((const int32_t *)j->ix)[r];
    memcpy(j->y + r * j->cols, j->w + k * j->cols, (size_t)j->cols * sizeof *j->y);
  }
}

em_status emc_run_embedding(const emc_delegate *d, const emc_op *op, em_threadpool *pool) {
  const emc_rt_tensor *ix = &d->t[op->in[1]];
  const int64_t rows = op->ip[EMC_EMBED_ROWS], n = ix->numel;
  embed_job j = {d->t[op->in[0]].data, ix->data, ix->dtype == EMC_DTYPE_I64, op->ip[EMC_EMBED_COLS],
                 d->t[op->out[0]].data};
  for (int64_t r = 0; r < n; r++) { /* every index first: a bad one writes nothing */
    const int64_t k = j.i64 ? ((const int64_t *)j.ix)[r] : ((const int32_t *)j.ix)[r];
    if (k < 0 || k >= rows) {
      EM_LOG_ERROR("EmberCpuBackend: embedding index %lld (at %lld) is outside the table of %lld "
                   "rows",
                   (long long)k, (long long)r, (long long)rows);
      return EM_ERR_INVALID_ARGUMENT;
    }
  }
  par_for_mem(pool, n, embed_rows, &j, n * j.cols);
  if (op->act) d->cfg->vact((size_t)(n * j.cols), j.y, j.y, op->act, op->fp);
  return EM_OK;
}

/* ---- gather ---------------------------------------------------------------------------------- */

bool emc_check_gather(const emc_delegate *d, const emc_op *op, char *why, size_t why_n) {
  const emc_rt_tensor *x = tensor_at(d, op->in[0]), *t = tensor_at(d, op->in[1]);
  const emc_rt_tensor *y = tensor_at(d, op->out[0]);
  if (!x || !t || !y) WHY("gather: bad tensor ids");
  if (!is_const(t) || t->numel != y->numel)
    WHY("gather: the offsets are not a constant of the output's %lld elements",
        (long long)y->numel);
  for (int64_t i = 0; i < t->numel; i++) {
    const float o = t->data[i];
    if (!(o >= 0.0f && o < (float)x->numel && o <= 16777216.0f) || o != (float)(int64_t)o)
      WHY("gather: offset %lld is not an element of the input", (long long)i);
  }
  if (out_shared(x, y)) WHY("gather: input and output overlap");
  return check_act(op, why, why_n);
}

typedef struct gather_job {
  const float *x, *t;
  float *y;
  int64_t n;
} gather_job;

/* Blocks [begin, end) of 1024 output elements. */
static void gather_blocks(void *ctx, int64_t begin, int64_t end) {
  const gather_job *j = ctx;
  const int64_t stop = end * 1024 < j->n ? end * 1024 : j->n;
  for (int64_t i = begin * 1024; i < stop; i++) j->y[i] = j->x[(int64_t)j->t[i]];
}

em_status emc_run_gather(const emc_delegate *d, const emc_op *op, em_threadpool *pool) {
  const int64_t n = d->t[op->out[0]].numel;
  gather_job j = {d->t[op->in[0]].data, d->t[op->in[1]].data, d->t[op->out[0]].data, n};
  par_for_mem(pool, (n + 1023) / 1024, gather_blocks, &j, n);
  if (op->act) d->cfg->vact((size_t)n, j.y, j.y, op->act, op->fp);
  return EM_OK;
}

/* ---- pad ------------------------------------------------------------------------------------- */

bool emc_check_pad(const emc_delegate *d, const emc_op *op, char *why, size_t why_n) {
  if (!params_nonneg(op, EMC_PAD_N_PARAMS, why, why_n)) return false;
  const int32_t *ip = op->ip;
  const int64_t oh = (int64_t)ip[EMC_PAD_H] + ip[EMC_PAD_TOP] + ip[EMC_PAD_BOTTOM];
  const int64_t ow = (int64_t)ip[EMC_PAD_W] + ip[EMC_PAD_LEFT] + ip[EMC_PAD_RIGHT];
  int64_t in_n, out_n;
  if (__builtin_mul_overflow((int64_t)ip[EMC_PAD_OUTER], (int64_t)ip[EMC_PAD_H], &in_n) ||
      __builtin_mul_overflow(in_n, (int64_t)ip[EMC_PAD_W], &in_n) ||
      __builtin_mul_overflow((int64_t)ip[EMC_PAD_OUTER], oh, &out_n) ||
      __builtin_mul_overflow(out_n, ow, &out_n))
    WHY("pad: sizes overflow");
  const emc_rt_tensor *x = tensor_at(d, op->in[0]), *y = tensor_at(d, op->out[0]);
  if (x && y && out_shared(x, y)) WHY("pad: input and output overlap");
  return check_rows(d, op, in_n, out_n, why, why_n);
}

typedef struct pad_job {
  const float *x;
  float *y;
  int64_t h, w, top, bottom, left, right;
  float v;
} pad_job;

static void pad_fill(float *y, int64_t n, float v) {
  for (int64_t i = 0; i < n; i++) y[i] = v;
}

/* Planes [begin, end): the top rows, each row's left pad, values and right pad, the bottom rows. */
static void pad_planes(void *ctx, int64_t begin, int64_t end) {
  const pad_job *j = ctx;
  const int64_t ow = j->left + j->w + j->right, oh = j->top + j->h + j->bottom;
  for (int64_t p = begin; p < end; p++) {
    const float *x = j->x + p * j->h * j->w;
    float *y = j->y + p * oh * ow;
    pad_fill(y, j->top * ow, j->v);
    y += j->top * ow;
    for (int64_t r = 0; r < j->h; r++, y += ow, x += j->w) {
      pad_fill(y, j->left, j->v);
      memcpy(y + j->left, x, (size_t)j->w * sizeof *y);
      pad_fill(y + j->left + j->w, j->right, j->v);
    }
    pad_fill(y, j->bottom * ow, j->v);
  }
}

em_status emc_run_pad(const emc_delegate *d, const emc_op *op, em_threadpool *pool) {
  const int32_t *ip = op->ip;
  const emc_rt_tensor *yt = &d->t[op->out[0]];
  pad_job j = {data_of(d, op->in[0]), yt->data,          ip[EMC_PAD_H],
               ip[EMC_PAD_W],         ip[EMC_PAD_TOP],   ip[EMC_PAD_BOTTOM],
               ip[EMC_PAD_LEFT],      ip[EMC_PAD_RIGHT], op->fp[EMC_PAD_FP_VALUE]};
  par_for_mem(pool, ip[EMC_PAD_OUTER], pad_planes, &j, yt->numel);
  if (op->act) d->cfg->vact((size_t)yt->numel, yt->data, yt->data, op->act, op->fp);
  return EM_OK;
}
