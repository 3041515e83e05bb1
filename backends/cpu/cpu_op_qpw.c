/*
 * cpu_op_qpw.c — pointwise int8 convs on the pixel-major tile (d->q8_pw, em_q8_pw_fn): 1x1,
 * stride 1, no padding, ungrouped, no residual, a u8 channels-last output (EMC_Q8_U8_OUT) and
 * an input in u8 channels last (EMC_Q8_U8_IN) or in f32 planes.
 *
 * Such a conv is a GEMM of the input's pixels (rows, channels last) by the weights. The panel
 * path (cpu_op_qconv.c) packs the input into column panels, runs weight rows by pixels and
 * transposes the u8 result back into channels last; here the tile reads each pixel's channels
 * where they are and writes its output channels where they go: one parallel phase for a u8
 * input, two for an f32 one (its quantizer into channels last first, the panel path's). The
 * weights, stored in the panel path's layout ([row panels of 6][kq][6][4]), are repacked once at
 * init into blocks of 16 channels ([kq][16][4]) in memory from the method allocator. Same bytes
 * as the panel path (tests/python/test_backend_cpu_q8pw.py forces both).
 */
#include "cpu_ops.h"

enum {
  PW_CHUNK = 64, /* pixels a job takes */
  PW_NC = 32     /* channels a tile call takes */
};

/* Whether op (validated) is a pointwise int8 conv with a u8 output. */
static bool pw_takes(const emc_op *op) {
  if (op->kind != EMC_OP_CONV2D) return false;
  const emc_conv_params p = emc_conv_params_of(op);
  return p.q8_id >= 0 && !p.depthwise && p.groups == 1 && p.kh == 1 && p.kw == 1 && p.sh == 1 &&
         p.sw == 1 && p.ph == 0 && p.pw == 0 && p.winograd == 0 && p.wino_at_load == 0 &&
         (p.q8_u8 & EMC_Q8_U8_OUT) && op->in[3] < 0;
}

/* Input channels padded to a multiple of 4, as the panel path's u8 images. */
static size_t pw_cp(int64_t c) { return (size_t)(c + 3) / 4 * 4; }

/* Bytes of op's repacked weights: 16-channel blocks of [kq][16][4]. */
static size_t pw_bytes(const emc_delegate *d, const emc_op *op) {
  const size_t cin = (size_t)d->t[op->in[0]].sizes[1], co = (size_t)d->t[op->out[0]].sizes[1];
  return emc_div_up(co, 16) * (pw_cp((int64_t)cin) / 4) * 64;
}

em_status emc_q8_pw_prepare(emc_delegate *d, em_allocator *al, char *why, size_t why_n) {
  if (!d->q8_pw) return EM_OK;
  size_t total = 0;
  for (uint32_t i = 0; i < d->n_ops; i++)
    if (pw_takes(&d->ops[i])) total += (pw_bytes(d, &d->ops[i]) + 63) / 64 * 64;
  if (total == 0) return EM_OK;
  const int8_t **table = em_allocator_alloc(al, d->n_ops * sizeof *table, 16);
  int8_t *mem = em_allocator_alloc(al, total, 64);
  if (!table || !mem) {
    snprintf(why, why_n, "method allocator too small for %zu bytes of pointwise int8 weights",
             total);
    return EM_ERR_MEMORY_ALLOCATION_FAILED;
  }
  for (uint32_t i = 0; i < d->n_ops; i++) {
    const emc_op *op = &d->ops[i];
    table[i] = NULL;
    if (!pw_takes(op)) continue;
    const size_t co = (size_t)d->t[op->out[0]].sizes[1];
    const size_t kq = pw_cp(d->t[op->in[0]].sizes[1]) / 4, blocks = emc_div_up(co, 16);
    const int8_t *w = (const int8_t *)(const void *)d->t[op->in[1]].data; /* [co / 6][kq][6][4] */
    for (size_t c = 0; c < blocks * 16; c++)
      for (size_t q = 0; q < kq; q++) {
        int8_t *dst = mem + (c / 16) * kq * 64 + q * 64 + (c % 16) * 4;
        if (c < co)
          memcpy(dst, w + (c / EMC_MR) * kq * EMC_MR * 4 + q * EMC_MR * 4 + (c % EMC_MR) * 4, 4);
        else
          memset(dst, 0, 4);
      }
    table[i] = mem;
    mem += (pw_bytes(d, op) + 63) / 64 * 64;
  }
  d->q8_pw_w = table;
  return EM_OK;
}

typedef struct pw_job {
  em_q8_pw_fn tile;
  const uint8_t *x; /* [npix][cp] */
  uint8_t *y;       /* [npix][cpo] */
  const int8_t *w;
  const int32_t *corr;
  const float *scale, *bias;
  size_t npix, cp, cpo, co, kq, nblk;
  em_q8_quant_params oq;
} pw_job;

/* Jobs [begin, end): PW_CHUNK pixels by PW_NC channels each, pixel chunks outermost (the jobs
 * of one chunk read the same input rows). */
static void pw_jobs(void *ctx, int64_t begin, int64_t end) {
  const pw_job *j = ctx;
  for (int64_t job = begin; job < end; job++) {
    const size_t pc = (size_t)job / j->nblk, c0 = (size_t)job % j->nblk * PW_NC;
    const size_t nc = j->co - c0 < PW_NC ? j->co - c0 : PW_NC;
    const size_t p1 = (pc + 1) * PW_CHUNK < j->npix ? (pc + 1) * PW_CHUNK : j->npix;
    const int8_t *w = j->w + c0 / 16 * j->kq * 64;
    const float *bias = j->bias ? j->bias + c0 : NULL;
    for (size_t i = pc * PW_CHUNK; i < p1; i += 8)
      j->tile(p1 - i < 8 ? p1 - i : 8, nc, j->kq, j->x + i * j->cp, j->cp, w, j->corr + c0,
              j->scale + c0, bias, j->y + i * j->cpo + c0, j->cpo, &j->oq);
  }
}

typedef struct pw_quant_job {
  em_q8_quant_fn quant;
  const float *x; /* one image's planes, [cin][npix] */
  uint8_t *img;   /* its u8 values channels last, [npix][cp] */
  size_t cin, npix, cp;
  em_q8_quant_params q;
} pw_quant_job;

/* Pixel chunks [begin, end) of an f32 input quantized into channels last. */
static void pw_quant(void *ctx, int64_t begin, int64_t end) {
  const pw_quant_job *j = ctx;
  const size_t p0 = (size_t)begin * PW_CHUNK;
  const size_t p1 = (size_t)end * PW_CHUNK < j->npix ? (size_t)end * PW_CHUNK : j->npix;
  j->quant(j->cin, p1 - p0, j->x + p0, j->npix, j->img + p0 * j->cp, j->cp, &j->q);
}

void emc_run_conv_q8_pw(const emc_delegate *d, const emc_op *op, const int8_t *w,
                        em_threadpool *pool) {
  const emc_conv_params p = emc_conv_params_of(op);
  const emc_rt_tensor *xt = &d->t[op->in[0]], *yt = &d->t[op->out[0]];
  const size_t n = (size_t)xt->sizes[0], cin = (size_t)xt->sizes[1], co = (size_t)yt->sizes[1];
  const size_t npix = (size_t)(xt->sizes[2] * xt->sizes[3]), cp = pw_cp((int64_t)cin);
  const float *table = data_of(d, (int32_t)p.q8_id), *f = op->fp;
  const float off = f[EMC_ACT_FP_QMIN] < 0.0f ? 128.0f : 0.0f;
  pw_job j = {.tile = d->q8_pw,
              .x = (const uint8_t *)(const void *)xt->data,
              .y = (uint8_t *)(void *)yt->data,
              .w = w,
              .corr = (const int32_t *)(const void *)(table + co),
              .scale = table,
              .bias = data_of(d, op->in[2]),
              .npix = n * npix,
              .cp = cp,
              .cpo = pw_cp((int64_t)co),
              .co = co,
              .kq = cp / 4,
              .nblk = emc_div_up(co, PW_NC),
              .oq = {f[EMC_ACT_FP_INV_SCALE], f[EMC_ACT_FP_ZP] + off, f[EMC_ACT_FP_QMIN] + off,
                     f[EMC_ACT_FP_QMAX] + off, f[EMC_ACT_FP_MIN], f[EMC_ACT_FP_MAX]}};
  const int64_t work = (int64_t)(co * npix * cp);
  if (p.q8_u8 & EMC_Q8_U8_IN) { /* every image's pixels at once */
    par_for(pool, (int64_t)(emc_div_up(j.npix, PW_CHUNK) * j.nblk), pw_jobs, &j, work * (int64_t)n);
    return;
  }
  /* f32 planes: per image, its u8 values channels last into the scratch (channels past cin at
   * the zero point, as the panel path's image), then the tiles over them */
  uint8_t *img = d->arena + p.scratch_off;
  pw_quant_job qj = {
      .quant = d->q8_quant,
      .img = img,
      .cin = cin,
      .npix = npix,
      .cp = cp,
      .q = {p.q8_inv, (float)p.q8_zp, (float)p.q8_lo, (float)p.q8_hi, -INFINITY, INFINITY}};
  if (cp != cin) memset(img, (int)p.q8_zp, npix * cp);
  j.x = img, j.npix = npix;
  for (size_t b = 0; b < n; b++) {
    qj.x = xt->data + b * cin * npix;
    par_for(pool, (int64_t)emc_div_up(npix, PW_CHUNK), pw_quant, &qj, (int64_t)(8 * cin * npix));
    j.y = (uint8_t *)(void *)yt->data + b * npix * j.cpo;
    par_for(pool, (int64_t)(emc_div_up(npix, PW_CHUNK) * j.nblk), pw_jobs, &j, work);
  }
}
