/*
 * cpu_op_eltwise.c — elementwise operators: binary (broadcasting add / sub / mul / div / rsub,
 * scalar forms), unary (an activation; copy, the identity, with its optional activation) and
 * channel affine (an unfolded batch norm): their checks and runs.
 */
#include "cpu_ops.h"

/* ---- binary ---------------------------------------------------------------------------------- */

static bool broadcasts_to(const emc_rt_tensor *x, const emc_rt_tensor *y) {
  if (x->ndim > y->ndim) return false;
  for (uint32_t i = 0; i < x->ndim; i++) {
    int64_t xs = x->sizes[x->ndim - 1 - i], ys = y->sizes[y->ndim - 1 - i];
    if (xs != ys && xs != 1) return false;
  }
  return true;
}

/* An int8 add on u8 activations (EMC_BINARY_Q8): its tensors, table and fake-quant. */
static bool check_add_q8(const emc_delegate *d, const emc_op *op, const emc_binary_params *p,
                         char *why, size_t why_n) {
  const emc_rt_tensor *a = tensor_at(d, op->in[0]), *y = tensor_at(d, op->out[0]);
  const emc_rt_tensor *b = op->in[1] < 0 ? NULL : tensor_at(d, op->in[1]);
  const emc_rt_tensor *t = p->q8_table_id < 0 ? NULL : tensor_at(d, (int32_t)p->q8_table_id);
  if (p->q8 != 1 || p->op != EMC_BIN_ADD || !b || !t)
    WHY("binary: an int8 form (flag %lld) is an add of two tensors with a table", (long long)p->q8);
  if (y->ndim != 4 || a->ndim != 4 || b->ndim != 4)
    WHY("binary: an int8 add's tensors must be 4-d");
  for (int i = 0; i < 4; i++)
    if (a->sizes[i] != y->sizes[i] || b->sizes[i] != y->sizes[i])
      WHY("binary: an int8 add's operands and output differ in shape");
  if (a->storage != EMC_ARENA || b->storage != EMC_ARENA || y->storage != EMC_ARENA)
    WHY("binary: an int8 add's u8 tensors must be in the backend's arena");
  if (!is_const(t) || t->numel < 4) WHY("binary: an int8 add's table is not a constant of 4");
  const float *q = t->data;
  for (int i = 0; i < 2; i++)
    if (!(q[2 * i] > 0.0f && q[2 * i] <= 3.4e38f && q[2 * i + 1] >= 0.0f &&
          q[2 * i + 1] <= 255.0f && q[2 * i + 1] == (float)(int)q[2 * i + 1]))
      WHY("binary: an int8 add's operand %d scale %g / zero point %g", i, (double)q[2 * i],
          (double)q[2 * i + 1]);
  if (op->act != EMC_ACT_FAKEQUANT) WHY("binary: an int8 add's output needs a fake-quant");
  if (!check_act(op, why, why_n)) return false;
  const float qmin = op->fp[EMC_ACT_FP_QMIN], off = qmin < 0.0f ? 128.0f : 0.0f;
  if (!(qmin + off >= 0.0f && op->fp[EMC_ACT_FP_QMAX] + off <= 255.0f &&
        op->fp[EMC_ACT_FP_ZP] + off >= 0.0f && op->fp[EMC_ACT_FP_ZP] + off <= 255.0f))
    WHY("binary: an int8 add's output range [%g, %g] does not map into [0, 255]", (double)qmin,
        (double)op->fp[EMC_ACT_FP_QMAX]);
  return true;
}

bool emc_check_binary(const emc_delegate *d, const emc_op *op, char *why, size_t why_n) {
  const emc_rt_tensor *a = tensor_at(d, op->in[0]), *y = tensor_at(d, op->out[0]);
  const emc_rt_tensor *b = op->in[1] < 0 ? NULL : tensor_at(d, op->in[1]);
  const emc_binary_params p = emc_binary_params_of(op);
  if (!a || !y || (op->in[1] >= 0 && !b)) WHY("binary: bad tensor id");
  if (p.op < 0 || p.op > EMC_BIN_RSUB) WHY("binary: unknown operation %lld", (long long)p.op);
  if (p.q8 || p.q8_table_id >= 0) return check_add_q8(d, op, &p, why, why_n);
  if (!broadcasts_to(a, y) || (b && !broadcasts_to(b, y)))
    WHY("binary: operands do not broadcast to the output");
  return check_act(op, why, why_n);
}

typedef struct bin_job {
  const emc_delegate *d;
  const emc_op *op;
  const float *a, *b;
  float *y;
  int64_t inner; /* elements per row */
  int kind;      /* 0: a, b rows; 1: b scalar per row; 2: a scalar per row */
  uint32_t ndim; /* outer dims */
  int64_t sizes[EMC_MAX_DIMS], as[EMC_MAX_DIMS], bs[EMC_MAX_DIMS];
  em_minmax_params mm;
  float scalar;
  int bop; /* the emc_binary operation */
} bin_job;

static void bin_row(const bin_job *j, const float *a, const float *b, float *y, size_t n) {
  const em_cpu_config *cfg = j->d->cfg;
  int op = j->bop;
  if (op == EMC_BIN_RSUB) { /* y = b - a */
    if (j->kind == 0)
      cfg->vbin[EMC_BIN_SUB](n, b, a, y, &j->mm);
    else if (j->kind == 1)
      for (size_t i = 0; i < n; i++) y[i] = fminf(fmaxf(*b - a[i], j->mm.min), j->mm.max);
    else
      cfg->vbinc[EMC_BIN_SUB](n, b, a, y, &j->mm);
  } else if (j->kind == 0) {
    cfg->vbin[op](n, a, b, y, &j->mm);
  } else if (j->kind == 1) {
    cfg->vbinc[op](n, a, b, y, &j->mm);
  } else if (op == EMC_BIN_ADD || op == EMC_BIN_MUL) {
    cfg->vbinc[op](n, b, a, y, &j->mm);
  } else {
    for (size_t i = 0; i < n; i++) {
      float v = op == EMC_BIN_SUB ? *a - b[i] : *a / b[i];
      y[i] = fminf(fmaxf(v, j->mm.min), j->mm.max);
    }
  }
  if (post_act(j->op)) cfg->vact(n, y, y, j->op->act, j->op->fp);
}

static void bin_rows(void *ctx, int64_t begin, int64_t end) {
  const bin_job *j = ctx;
  if (j->ndim == 0) { /* one row split across threads */
    int64_t ao = j->kind == 2 ? 0 : begin, bo = j->kind == 1 ? 0 : begin;
    bin_row(j, j->a + ao, j->b + bo, j->y + begin, (size_t)(end - begin));
    return;
  }
  for (int64_t r = begin; r < end; r++) {
    int64_t rem = r, ao = 0, bo = 0;
    for (int i = (int)j->ndim - 1; i >= 0; i--) {
      int64_t idx = rem % j->sizes[i];
      rem /= j->sizes[i];
      ao += idx * j->as[i], bo += idx * j->bs[i];
    }
    bin_row(j, j->a + ao, j->b + bo, j->y + r * j->inner, (size_t)j->inner);
  }
}

/* Row-major strides of x broadcast against out's rank (0 along broadcast dims). */
static void bcast_strides(const emc_rt_tensor *x, const emc_rt_tensor *y, int64_t *st,
                          int64_t *xs) {
  uint32_t lead = y->ndim - x->ndim;
  int64_t s = 1;
  for (int i = (int)y->ndim - 1; i >= 0; i--) {
    int64_t sz = i < (int)lead ? 1 : x->sizes[i - lead];
    xs[i] = sz;
    st[i] = sz == 1 ? 0 : s;
    s *= sz;
  }
}

typedef struct add_q8_job {
  const emc_delegate *d;
  const uint8_t *a, *b;
  uint8_t *y;
  size_t c, cp; /* channels, bytes between pixels */
  em_q8_add_params q;
} add_q8_job;

static void add_q8_rows(void *ctx, int64_t begin, int64_t end) {
  const add_q8_job *j = ctx;
  const size_t o = (size_t)begin * j->cp;
  if (j->c == j->cp) { /* no channel padding: one run */
    j->d->q8_add((size_t)(end - begin) * j->c, j->a + o, j->b + o, j->y + o, &j->q);
    return;
  }
  for (int64_t px = begin; px < end; px++) {
    const size_t at = (size_t)px * j->cp;
    j->d->q8_add(j->c, j->a + at, j->b + at, j->y + at, &j->q);
  }
}

/* An int8 add on u8 activations (checked by check_add_q8): pixels on the pool. */
static void run_add_q8(const emc_delegate *d, const emc_op *op, const emc_binary_params *p,
                       em_threadpool *pool) {
  const emc_rt_tensor *yt = &d->t[op->out[0]];
  const float *q = d->t[p->q8_table_id].data, *f = op->fp;
  const float off = f[EMC_ACT_FP_QMIN] < 0.0f ? 128.0f : 0.0f;
  const int64_t c = yt->sizes[1], npix = yt->sizes[0] * yt->sizes[2] * yt->sizes[3];
  add_q8_job j = {d,
                  (const uint8_t *)(const void *)d->t[op->in[0]].data,
                  (const uint8_t *)(const void *)d->t[op->in[1]].data,
                  (uint8_t *)(void *)yt->data,
                  (size_t)c,
                  (size_t)(c + 3) / 4 * 4,
                  {q[0],
                   q[1],
                   q[2],
                   q[3],
                   {f[EMC_ACT_FP_INV_SCALE], f[EMC_ACT_FP_ZP] + off, f[EMC_ACT_FP_QMIN] + off,
                    f[EMC_ACT_FP_QMAX] + off, f[EMC_ACT_FP_MIN], f[EMC_ACT_FP_MAX]}}};
  par_for_static(pool, npix, add_q8_rows, &j, npix * c * 4); /* ~20 operations per 16 values */
}

em_status emc_run_binary(const emc_delegate *d, const emc_op *op, em_threadpool *pool) {
  const emc_rt_tensor *at = &d->t[op->in[0]], *yt = &d->t[op->out[0]];
  const emc_binary_params p = emc_binary_params_of(op);
  if (p.q8) {
    run_add_q8(d, op, &p, pool);
    return EM_OK;
  }
  bin_job j = {0};
  j.d = d, j.op = op, j.a = at->data, j.y = yt->data, j.mm = clamp_of(op), j.scalar = p.scalar;
  j.bop = (int)p.op;
  int64_t as[EMC_MAX_DIMS], bs[EMC_MAX_DIMS], asz[EMC_MAX_DIMS], bsz[EMC_MAX_DIMS];
  bcast_strides(at, yt, as, asz);
  if (op->in[1] >= 0) {
    bcast_strides(&d->t[op->in[1]], yt, bs, bsz);
    j.b = d->t[op->in[1]].data;
  } else {
    for (uint32_t i = 0; i < yt->ndim; i++) bs[i] = 0, bsz[i] = 1;
    j.b = &j.scalar;
  }
  /* The innermost block where the roles of a and b stay the same. */
  int nd = (int)yt->ndim, k = nd;
  int kind = -1;
  while (k > 0) {
    int64_t o = yt->sizes[k - 1];
    int ka = asz[k - 1] == o, kb = bsz[k - 1] == o;
    if (o == 1) {
      k--;
      continue;
    }
    int this_kind = (ka && kb) ? 0 : (ka && bsz[k - 1] == 1) ? 1 : (kb && asz[k - 1] == 1) ? 2 : -1;
    if (this_kind < 0 || (kind >= 0 && this_kind != kind)) break;
    kind = this_kind;
    k--;
  }
  if (kind < 0) kind = 0;
  j.kind = kind;
  j.inner = 1;
  for (int i = k; i < nd; i++) j.inner *= yt->sizes[i];
  j.ndim = (uint32_t)k;
  int64_t rows = 1;
  for (int i = 0; i < k; i++)
    j.sizes[i] = yt->sizes[i], j.as[i] = as[i], j.bs[i] = bs[i], rows *= yt->sizes[i];
  if (rows == 1) {
    j.ndim = 0;
    par_for_mem(pool, j.inner, bin_rows, &j, yt->numel);
  } else if (kind != 0 && yt->ndim == 4 && k == 2) {
    /* Planes times a value per plane (a squeeze-and-excitation block's scale): in contiguous
     * ranges of planes, as the depthwise conv or lookup that wrote them split them, so each
     * thread reads what it wrote. On one thread, at 2 threads, half came from the other core:
     * MobileNetV3-Small's 19K-47K-element ones took 1.9-2x their 1-thread time. */
    par_for_static(pool, rows, bin_rows, &j, yt->numel);
  } else {
    par_for_mem(pool, rows, bin_rows, &j, yt->numel);
  }
  return EM_OK;
}
/* ---- unary and copy -------------------------------------------------------------------------- */

/* Unary and copy: in[0] and out[0] have the same number of elements. */
bool emc_check_unary(const emc_delegate *d, const emc_op *op, char *why, size_t why_n) {
  const emc_rt_tensor *x = tensor_at(d, op->in[0]), *y = tensor_at(d, op->out[0]);
  if (op->kind == EMC_OP_UNARY && !emc_check_unary_pre(op, why, why_n)) return false;
  if (op->kind == EMC_OP_UNARY && (op->ip[EMC_UNARY_Q8] || op->ip[EMC_UNARY_Q8_TABLE]))
    return emc_check_unary_q8(d, op, why, why_n);
  if (!x || !y) WHY("bad tensor id");
  if (x->numel != y->numel)
    WHY("input has %lld elements, output %lld", (long long)x->numel, (long long)y->numel);
  return check_act(op, why, why_n);
}

typedef struct act_job {
  const emc_delegate *d;
  const emc_op *op;
  const float *x;
  float *y;
} act_job;

static void act_chunk(void *ctx, int64_t begin, int64_t end) {
  const act_job *j = ctx;
  if (j->op->kind == EMC_OP_UNARY && j->op->ip[EMC_UNARY_PRE]) {
    emc_unary_pre(j->d, j->op, (size_t)(end - begin), j->x + begin, j->y + begin);
    j->d->cfg->vact((size_t)(end - begin), j->y + begin, j->y + begin, j->op->act, j->op->fp);
    return;
  }
  if (j->op->kind == EMC_OP_COPY) {
    if (j->y + begin != j->x + begin)
      memmove(j->y + begin, j->x + begin, (size_t)(end - begin) * sizeof(float));
    if (!j->op->act) return;
    j->d->cfg->vact((size_t)(end - begin), j->y + begin, j->y + begin, j->op->act, j->op->fp);
    return;
  }
  j->d->cfg->vact((size_t)(end - begin), j->x + begin, j->y + begin, j->op->act, j->op->fp);
}

em_status emc_run_unary(const emc_delegate *d, const emc_op *op, em_threadpool *pool) {
  if (op->kind == EMC_OP_UNARY && op->ip[EMC_UNARY_Q8]) return emc_run_unary_q8(d, op, pool);
  act_job j = {d, op, data_of(d, op->in[0]), data_of(d, op->out[0])};
  if (op->act > 2 || op->ip[EMC_UNARY_PRE]) /* transcendental: threads from a few thousand */
    par_for_static(pool, d->t[op->out[0]].numel, act_chunk, &j, d->t[op->out[0]].numel * 8);
  else
    par_for_mem(pool, d->t[op->out[0]].numel, act_chunk, &j, d->t[op->out[0]].numel);
  return EM_OK;
}

/* ---- channel affine -------------------------------------------------------------------------- */

bool emc_check_affine(const emc_delegate *d, const emc_op *op, char *why, size_t why_n) {
  if (!params_nonneg(op, EMC_AFFINE_N_PARAMS, why, why_n)) return false;
  const emc_affine_params p = emc_affine_params_of(op);
  int64_t n = p.n, c = p.c, inner = p.inner;
  const emc_rt_tensor *s = tensor_at(d, op->in[1]), *t = tensor_at(d, op->in[2]);
  if (!s || !t || s->numel != c || t->numel != c) WHY("affine: scale / shift size");
  return check_rows(d, op, n * c * inner, n * c * inner, why, why_n);
}

typedef struct affine_job {
  const emc_delegate *d;
  const emc_op *op;
} affine_job;

static void affine_planes(void *ctx, int64_t begin, int64_t end) {
  const affine_job *j = ctx;
  const emc_op *op = j->op;
  const float *x = data_of(j->d, op->in[0]), *s = data_of(j->d, op->in[1]),
              *t = data_of(j->d, op->in[2]);
  float *y = data_of(j->d, op->out[0]);
  const emc_affine_params ap = emc_affine_params_of(op);
  int64_t c = ap.c, inner = ap.inner;
  em_minmax_params mm = clamp_of(op);
  for (int64_t p = begin; p < end; p++) {
    j->d->cfg->vaffine((size_t)inner, x + p * inner, s[p % c], t[p % c], y + p * inner, &mm);
    if (post_act(op)) j->d->cfg->vact((size_t)inner, y + p * inner, y + p * inner, op->act, op->fp);
  }
}

em_status emc_run_affine(const emc_delegate *d, const emc_op *op, em_threadpool *pool) {
  const emc_affine_params p = emc_affine_params_of(op);
  affine_job j = {d, op};
  par_for_mem(pool, p.n * p.c, affine_planes, &j, d->t[op->out[0]].numel);
  return EM_OK;
}
