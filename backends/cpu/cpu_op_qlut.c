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
