/*
 * cpu_op_qlut.c — a unary on u8 activations as a table (EMC_UNARY_Q8): its check and run.
 *
 * Between an int8 conv and the next, an activation that is not a clamp (hardswish, with its
 * fake-quant: EMC_ACT_HARDSWISH_FQ) or a change of qparams (EMC_ACT_FAKEQUANT) reads a tensor
 * with at most 256 values: the (q - zp) * s of its u8 levels. The op builds the 256 answers with
 * the f32 path's own row (cfg->vact over those values: the same bits as the f32 op), each an
 * output level, and then looks every element up: into u8 levels (form 1: the next int8 op reads
 * them as they are) or into f32 planes [N][C][H][W] (form 2, the levels' values (level - zp) *
 * scale, which are the f32 op's bits: for f32 readers, e.g. a squeeze-and-excitation block's
 * mean and multiply). The inputs' and form 1's outputs' channels-last layout is the int8 convs'
 * (cpu_op_qconv.c): [N][H][W][cp], cp = C rounded up to 4.
 */
#include "cpu_ops.h"

bool emc_check_unary_pre(const emc_op *op, char *why, size_t why_n) {
  const emc_unary_params p = emc_unary_params_of(op);
  if (p.pre < 0 && !p.times_x) return true;
  switch (p.pre) {
  case EMC_ACT_SIGMOID:
  case EMC_ACT_SILU:
  case EMC_ACT_GELU:
  case EMC_ACT_GELU_TANH:
  case EMC_ACT_TANH:
  case EMC_ACT_HARDSWISH:
  case EMC_ACT_HARDSIGMOID: break;
  default: WHY("unary: a first activation %lld is not one without parameters", (long long)p.pre);
  }
  if (p.times_x != 0 && p.times_x != 1) WHY("unary: times-x flag %lld", (long long)p.times_x);
  if (op->in[1] >= 0) WHY("unary: an activation with a first one reads one tensor");
  return true;
}

void emc_unary_pre(const emc_delegate *d, const emc_op *op, size_t n, const float *x, float *y) {
  const emc_unary_params p = emc_unary_params_of(op);
  static const float none[8] = {0};
  if (!p.times_x) {
    d->cfg->vact(n, x, y, (uint32_t)p.pre, none);
    return;
  }
  float t[256]; /* x * pre(x), the f32 multiply the decomposed graph's mul does; y may be x */
  for (size_t i0 = 0; i0 < n; i0 += 256) {
    const size_t m = n - i0 < 256 ? n - i0 : 256;
    d->cfg->vact(m, x + i0, t, (uint32_t)p.pre, none);
    for (size_t i = 0; i < m; i++) y[i0 + i] = x[i0 + i] * t[i];
  }
}

bool emc_check_unary_q8(const emc_delegate *d, const emc_op *op, char *why, size_t why_n) {
  const emc_unary_params p = emc_unary_params_of(op);
  const emc_rt_tensor *x = tensor_at(d, op->in[0]), *y = tensor_at(d, op->out[0]);
  const emc_rt_tensor *t = p.q8_table_id < 0 ? NULL : tensor_at(d, (int32_t)p.q8_table_id);
  if (!x || !y) WHY("unary: bad tensor id");
  if ((p.q8 != 1 && p.q8 != 2) || !t)
    WHY("unary: an int8 form (%lld) is 1 or 2, with a table", (long long)p.q8);
  if (op->kind != EMC_OP_UNARY || op->in[1] >= 0)
    WHY("unary: an int8 table lookup reads one tensor");
  if (op->act != EMC_ACT_FAKEQUANT && op->act != EMC_ACT_HARDSWISH_FQ)
    WHY("unary: an int8 table lookup's act must be a fake-quant (or hardswish, then one), not %u",
        op->act);
  if (!check_act(op, why, why_n)) return false;
  if (x->ndim != 4 || y->ndim != 4) WHY("unary: an int8 table lookup's tensors must be 4-d");
  for (int i = 0; i < 4; i++)
    if (x->sizes[i] != y->sizes[i]) WHY("unary: an int8 table lookup's input and output differ");
  if (x->storage != EMC_ARENA || (p.q8 == 1 && y->storage != EMC_ARENA))
    WHY("unary: an int8 table lookup's u8 tensors must be in the backend's arena");
  if (p.q8 == 2 && out_shared(x, y)) WHY("unary: an int8 table lookup's f32 output is its input");
  if (!is_const(t) || t->numel < 2)
    WHY("unary: an int8 table lookup's table is not a constant of 2");
  const float *q = t->data;
  if (!(q[0] > 0.0f && q[0] <= 3.4e38f && q[1] >= 0.0f && q[1] <= 255.0f &&
        q[1] == (float)(int)q[1]))
    WHY("unary: an int8 table lookup's input scale %g / zero point %g", (double)q[0], (double)q[1]);
  const float qmin = op->fp[EMC_ACT_FP_QMIN], off = qmin < 0.0f ? 128.0f : 0.0f;
  if (!(qmin + off >= 0.0f && op->fp[EMC_ACT_FP_QMAX] + off <= 255.0f &&
        op->fp[EMC_ACT_FP_ZP] + off >= 0.0f && op->fp[EMC_ACT_FP_ZP] + off <= 255.0f))
    WHY("unary: an int8 table lookup's output range [%g, %g] does not map into [0, 255]",
        (double)qmin, (double)op->fp[EMC_ACT_FP_QMAX]);
  return true;
}

typedef struct lut_job {
  const emc_delegate *d;
  const uint8_t *x;
  void *y;
  size_t c, cp, plane; /* channels, bytes between pixels, pixels per image (form 2) */
  uint8_t zp;          /* form 1: the output's u8 zero point (the channels past c) */
  const uint8_t *t8;   /* 256 levels (u8) */
  float zpf, s;        /* form 2: the levels' zero point and scale */
} lut_job;

/* Pixels [begin, end) (all images' pixels in order) of form 1. */
static void lut_u8_pixels(void *ctx, int64_t begin, int64_t end) {
  const lut_job *j = ctx;
  uint8_t *y = j->y;
  if (j->c == j->cp) { /* no channel padding: one run */
    const size_t o = (size_t)begin * j->cp;
    j->d->q8_lut((size_t)(end - begin) * j->c, j->x + o, y + o, j->t8);
    return;
  }
  for (int64_t px = begin; px < end; px++) {
    const size_t at = (size_t)px * j->cp;
    j->d->q8_lut(j->c, j->x + at, y + at, j->t8);
    for (size_t ch = j->c; ch < j->cp; ch++) y[at + ch] = j->zp;
  }
}

/* Blocks [begin, end) of form 2: block i is pixels [pb * LUTF_PX, ...) of channels [cg * 16,
 * cg * 16 + 16) of image img, i = (img * groups + cg) * nb + pb; a contiguous range of blocks is
 * a range of channels, the planes the f32 readers after (a depthwise conv's, a mean's) split by. */
#define LUTF_PX 64
static void lut_f32_blocks(void *ctx, int64_t begin, int64_t end) {
  const lut_job *j = ctx;
  const size_t nb = (j->plane + LUTF_PX - 1) / LUTF_PX, groups = (j->c + 15) / 16;
  for (int64_t b = begin; b < end; b++) {
    const size_t pb = (size_t)b % nb, cg = (size_t)b / nb % groups, img = (size_t)b / nb / groups;
    const size_t p0 = pb * LUTF_PX, c0 = cg * 16;
    const size_t np = j->plane - p0 < LUTF_PX ? j->plane - p0 : LUTF_PX;
    j->d->q8_lutf(j->c - c0 < 16 ? j->c - c0 : 16, np, j->x + (img * j->plane + p0) * j->cp + c0,
                  j->cp, (float *)j->y + (img * j->c + c0) * j->plane + p0, j->plane, j->t8, j->zpf,
                  j->s);
  }
}

float emc_q8_lut_levels(const emc_delegate *d, const emc_op *op, uint8_t t8[256]) {
  const emc_unary_params p = emc_unary_params_of(op);
  const float *q = d->t[p.q8_table_id].data, *f = op->fp;
  /* The 256 values the u8 levels stand for, through the f32 path's own row. */
  float v[256], a[256];
  for (int i = 0; i < 256; i++) v[i] = ((float)i - q[1]) * q[0];
  if (p.pre >= 0) { /* the first activation (times x), then the act, as the f32 op */
    emc_unary_pre(d, op, 256, v, a);
    d->cfg->vact(256, a, a, op->act, f);
  } else {
    d->cfg->vact(256, v, a, op->act, f);
  }
  /* Each answer is (level - zp) * scale, |level - zp| <= 255: times the inverse scale it rounds
   * back to that integer; form 2 turns the levels back into the answers, (level - zp) * scale. */
  const float off = f[EMC_ACT_FP_QMIN] < 0.0f ? 128.0f : 0.0f, zp = f[EMC_ACT_FP_ZP] + off;
  const float magic = 12582912.0f;
  for (int i = 0; i < 256; i++) {
    float r = ((a[i] * f[EMC_ACT_FP_INV_SCALE] + magic) - magic) + zp;
    r = r >= 0.0f ? r : 0.0f;
    t8[i] = (uint8_t)(int32_t)(r <= 255.0f ? r : 255.0f);
  }
  return zp;
}

em_status emc_run_unary_q8(const emc_delegate *d, const emc_op *op, em_threadpool *pool) {
  if (d->q8_lk && d->q8_lk[op - d->ops] < 0) return EM_OK; /* its readers look the levels up */
  const emc_unary_params p = emc_unary_params_of(op);
  const emc_rt_tensor *xt = &d->t[op->in[0]], *yt = &d->t[op->out[0]];
  const int64_t c = yt->sizes[1], plane = yt->sizes[2] * yt->sizes[3];
  const int64_t npix = yt->sizes[0] * plane;
  uint8_t t8[256];
  const float zp = emc_q8_lut_levels(d, op, t8);
  lut_job j = {d,
               (const uint8_t *)(const void *)xt->data,
               yt->data,
               (size_t)c,
               (size_t)(c + 3) / 4 * 4,
               (size_t)plane,
               (uint8_t)(int32_t)zp,
               t8,
               zp,
               op->fp[EMC_ACT_FP_SCALE]};
  if (p.q8 == 1) {
    /* in contiguous ranges: the pixels each thread's conv wrote and the next one reads */
    em_parallel_for_static(npix * c / 4 < EMC_MIN_PARALLEL_ELEMS ? NULL : pool, npix, lut_u8_pixels,
                           &j);
  } else {
    /* ~1 operation a value: threads from a few thousand values, as the f32 activation rows */
    const int64_t nb = (plane + LUTF_PX - 1) / LUTF_PX, groups = (c + 15) / 16;
    par_for_static(pool, yt->sizes[0] * groups * nb, lut_f32_blocks, &j, npix * c * 4);
  }
  return EM_OK;
}

/* ---- lookups into planes never written (emc_q8_lk_plan) ----------------------------------- */

static const uint8_t *bytes_of(const emc_rt_tensor *t) {
  return (const uint8_t *)(const void *)t->data;
}
static size_t nbytes_of(const emc_rt_tensor *t) { return (size_t)t->numel * sizeof(float); }

static bool overlap(const uint8_t *a, size_t an, const uint8_t *b, size_t bn) {
  return a && b && a < b + bn && b < a + an;
}

/* Whether op k writes any byte of [p, p + n): an arena output, or a conv's scratch. */
static bool writes_into(const emc_delegate *d, uint32_t k, const uint8_t *p, size_t n) {
  const emc_op *op = &d->ops[k];
  for (int r = 0; r < 2; r++) {
    const emc_rt_tensor *t = op->out[r] >= 0 ? &d->t[op->out[r]] : NULL;
    if (t && t->storage == EMC_ARENA && overlap(bytes_of(t), nbytes_of(t), p, n)) return true;
  }
  if (op->kind == EMC_OP_CONV2D) {
    const emc_conv_params c = emc_conv_params_of(op);
    if (c.scratch_nbytes > 0 && overlap(d->arena + c.scratch_off, (size_t)c.scratch_nbytes, p, n))
      return true;
  }
  return false;
}

/* Whether op k writes all of [lo, hi) with one of its arena outputs. */
static bool writes_all(const emc_delegate *d, uint32_t k, const uint8_t *lo, const uint8_t *hi) {
  for (int r = 0; r < 2; r++) {
    const int32_t o = d->ops[k].out[r];
    const emc_rt_tensor *t = o >= 0 ? &d->t[o] : NULL;
    if (t && t->storage == EMC_ARENA && bytes_of(t) <= lo && hi <= bytes_of(t) + nbytes_of(t))
      return true;
  }
  return false;
}

/* The tensors op reads (operands, a conv's plane scale): ids[5], -1 for none. */
static void read_ids(const emc_op *op, int32_t ids[5]) {
  for (int r = 0; r < 4; r++) ids[r] = op->in[r];
  ids[4] = op->kind == EMC_OP_CONV2D ? (int32_t)emc_conv_params_of(op).in_scale_id : -1;
}

/* Whether op k reads a byte of [p, p + n) that no op after l and before k wrote since. */
static bool reads_stale(const emc_delegate *d, uint32_t l, uint32_t k, const uint8_t *p, size_t n) {
  int32_t ids[5];
  read_ids(&d->ops[k], ids);
  for (int r = 0; r < 5; r++) {
    const emc_rt_tensor *t = ids[r] >= 0 ? &d->t[ids[r]] : NULL;
    if (!t || t->storage != EMC_ARENA || !overlap(bytes_of(t), nbytes_of(t), p, n)) continue;
    const uint8_t *lo = bytes_of(t) > p ? bytes_of(t) : p;
    const uint8_t *hi = bytes_of(t) + nbytes_of(t) < p + n ? bytes_of(t) + nbytes_of(t) : p + n;
    bool written = false;
    for (uint32_t w = l + 1; w < k && !written; w++) written = writes_all(d, w, lo, hi);
    if (!written) return true;
  }
  return false;
}

/* Whether op k runs inside a chain of emc_fuse_chain (its head included). */
static bool in_chain(const emc_delegate *d, uint32_t k) {
  for (uint32_t j = k > 3 ? k - 3 : 0; j <= k; j++)
    if (d->fused[j] > 1 && j + d->fused[j] > k) return true;
  return false;
}

void emc_q8_lk_plan(const emc_delegate *d) {
  if (!d->q8_lk || !d->q8_lutq || !d->q8_lutm) return;
  for (uint32_t l = 0; l < d->n_ops; l++) {
    const emc_op *u = &d->ops[l];
    if (u->kind != EMC_OP_UNARY || emc_unary_params_of(u).q8 != 2 || in_chain(d, l)) continue;
    const int32_t yid = u->out[0];
    const emc_rt_tensor *x = &d->t[u->in[0]], *y = &d->t[yid];
    if (x->storage != EMC_ARENA || y->storage != EMC_ARENA || y->ndim != 4 || y->sizes[0] != 1)
      continue;
    /* its planes' readers: one plane mean and one scaled int8 conv's chain, after it */
    int64_t m = -1, s = -1;
    bool other = false;
    for (uint32_t k = 0; k < d->n_ops && !other; k++) {
      int32_t ids[5];
      read_ids(&d->ops[k], ids);
      bool reads = false;
      for (int r = 0; r < 5; r++) reads = reads || ids[r] == yid;
      if (!reads) continue;
      if (k > l && m < 0 && d->ops[k].kind == EMC_OP_MEAN && !emc_mean_params_of(&d->ops[k]).sum &&
          !in_chain(d, k))
        m = k;
      else if (k > l && s < 0 && d->ops[k].kind == EMC_OP_BINARY && d->fused[k] == 2)
        s = k;
      else
        other = true;
    }
    if (other || m < 0 || s < 0 || (uint32_t)s + 1 >= d->n_ops) continue;
    const emc_mean_params mp = emc_mean_params_of(&d->ops[m]);
    if (mp.outer != y->sizes[1] || mp.len != y->sizes[2] * y->sizes[3] || mp.inner > 1) continue;
    /* the product's planes are this lookup's (emc_q8_pw_run_scaled picks them the same way) */
    const emc_op *b = &d->ops[s], *conv = &d->ops[s + 1];
    const emc_rt_tensor *a0 = &d->t[b->in[0]], *a1 = &d->t[b->in[1]];
    const bool a_planes =
        a0->sizes[2] * a0->sizes[3] == y->sizes[2] * y->sizes[3] && a1->numel == a1->sizes[1];
    if ((a_planes ? b->in[0] : b->in[1]) != yid || (a_planes ? b->in[1] : b->in[0]) == yid)
      continue;
    /* the u8 levels stay put until the conv, whose scratch and output hold neither them nor the
     * gate (the chain then always runs) */
    const emc_rt_tensor *g = a_planes ? a1 : a0, *co = &d->t[conv->out[0]];
    const emc_conv_params cp = emc_conv_params_of(conv);
    const uint8_t *scratch = d->arena + cp.scratch_off;
    bool ok = !overlap(bytes_of(g), nbytes_of(g), scratch, (size_t)cp.scratch_nbytes) &&
              !overlap(bytes_of(g), nbytes_of(g), bytes_of(co), nbytes_of(co));
    for (uint32_t k = l + 1; ok && k <= (uint32_t)s + 1; k++)
      ok = !writes_into(d, k, bytes_of(x), nbytes_of(x));
    /* nothing else reads the planes' bytes before something writes them again */
    for (uint32_t k = l + 1; ok && k < d->n_ops; k++)
      if (k != (uint32_t)m && k != (uint32_t)s && k != (uint32_t)s + 1)
        ok = !reads_stale(d, l, k, bytes_of(y), nbytes_of(y));
    if (!ok) continue;
    d->q8_lk[l] = -1, d->q8_lk[m] = (int32_t)l + 1, d->q8_lk[s] = (int32_t)l + 1;
  }
}

typedef struct lk_mean_job {
  const emc_delegate *d;
  const uint8_t *x; /* the lookup's u8 input, [pixels][xs] */
  size_t xs, c, n;
  const uint8_t *t8;
  float zp, ls;
  float *y;
} lk_mean_job;

static void lk_mean_blocks(void *ctx, int64_t begin, int64_t end) {
  const lk_mean_job *j = ctx;
  for (int64_t b = begin; b < end; b++) {
    const size_t c0 = (size_t)b * 64, nc = j->c - c0 < 64 ? j->c - c0 : 64;
    j->d->q8_lutm(nc, j->n, j->x + c0, j->xs, j->t8, j->zp, j->ls, j->y + c0);
  }
}

void emc_q8_lk_mean(const emc_delegate *d, const emc_op *op, em_threadpool *pool) {
  const emc_op *u = &d->ops[d->q8_lk[op - d->ops] - 1];
  const emc_rt_tensor *planes = &d->t[u->out[0]];
  uint8_t t8[256];
  const float zp = emc_q8_lut_levels(d, u, t8);
  const size_t c = (size_t)planes->sizes[1];
  float *y = data_of(d, op->out[0]);
  const lk_mean_job j = {d,
                         (const uint8_t *)(const void *)d->t[u->in[0]].data,
                         (c + 3) / 4 * 4,
                         c,
                         (size_t)(planes->sizes[2] * planes->sizes[3]),
                         t8,
                         zp,
                         u->fp[EMC_ACT_FP_SCALE],
                         y};
  par_for_static(pool, (int64_t)((c + 63) / 64), lk_mean_blocks, (void *)&j,
                 (int64_t)(c * j.n * 4));
  for (size_t r = 0; op->act && r < c; r++) /* as the rows operator: one value at a time */
    d->cfg->vact(1, y + r, y + r, op->act, op->fp);
}
