/*
 * cpu_op_dwconv.c — depthwise conv2d (EMC_CONV_DEPTHWISE: one plane per channel): its checks
 * after emc_check_conv's common ones, and its run: per plane (cfg->dwconv), 16 small planes at
 * once (cfg->dwconv_c16), or in bands of output rows of every plane; with the planes' means
 * (out[1]) taken as they are written. The chains of a depthwise conv with the 1x1 convs around
 * it are in cpu_op_chain.c.
 */
#include "cpu_ops.h"

bool emc_check_dwconv(const emc_delegate *d, const emc_op *op, const emc_rt_tensor *w, int64_t cin,
                      int64_t co, char *why, size_t why_n) {
  (void)d;
  const emc_conv_params p = emc_conv_params_of(op);
  const int64_t g = p.groups, kh = p.kh, kw = p.kw;
  if (op->in[3] >= 0) WHY("conv2d: a depthwise conv takes no residual");
  if (g != cin || g != co) WHY("conv2d: depthwise needs groups == in == out channels");
  if (w->numel != co * kh * kw)
    WHY("conv2d: depthwise weights have %lld elements", (long long)w->numel);
  return check_act(op, why, why_n);
}

typedef struct dw_job {
  const emc_delegate *d;
  const emc_op *op;
  em_dw_params q;
  int64_t c;
  const float *x, *w, *bias;
  float *y;
  em_minmax_params mm;
  int64_t planes, bands; /* dw_bands */
  float *mean;           /* out[1]: each output plane's mean (after the activation), or NULL */
  uint32_t act;          /* what runs after the kernel (post_act_fused) */
} dw_job;

/* Planes [begin, end) of a depthwise conv's out[1] (the banded split leaves it to this). */
static void dw_means(void *ctx, int64_t begin, int64_t end) {
  const dw_job *j = ctx;
  const int64_t out_plane = j->q.oh * j->q.ow;
  for (int64_t p = begin; p < end; p++) j->mean[p] = plane_mean(j->y + p * out_plane, out_plane);
}

/* Blocks [begin, end) of 16 channels (image-major) through cfg->dwconv_c16, then each plane's
 * activation and mean as dw_planes does. */
static void dw_c16_blocks(void *ctx, int64_t begin, int64_t end) {
  const dw_job *j = ctx;
  const int64_t in_plane = j->q.h * j->q.w, out_plane = j->q.oh * j->q.ow, khw = j->q.kh * j->q.kw;
  const int64_t blocks = (j->c + 15) / 16;
  for (int64_t b = begin; b < end; b++) {
    const int64_t c0 = b % blocks * 16, nc = j->c - c0 < 16 ? j->c - c0 : 16;
    const int64_t p0 = b / blocks * j->c + c0; /* the block's first plane */
    float *out = j->y + p0 * out_plane;
    j->d->cfg->dwconv_c16(&j->q, (size_t)nc, j->x + p0 * in_plane, (size_t)in_plane,
                          j->w + c0 * khw, j->bias ? j->bias + c0 : NULL, out, (size_t)out_plane,
                          &j->mm);
    if (j->act) j->d->cfg->vact((size_t)(nc * out_plane), out, out, j->act, j->op->fp);
    if (j->mean)
      for (int64_t c = 0; c < nc; c++) j->mean[p0 + c] = plane_mean(out + c * out_plane, out_plane);
  }
}

static void dw_planes(void *ctx, int64_t begin, int64_t end) {
  const dw_job *j = ctx;
  const int64_t in_plane = j->q.h * j->q.w, out_plane = j->q.oh * j->q.ow, khw = j->q.kh * j->q.kw;
  for (int64_t p = begin; p < end; p++) {
    int64_t ch = p % j->c;
    float *out = j->y + p * out_plane;
    j->d->cfg->dwconv(&j->q, j->x + p * in_plane, j->w + ch * khw, j->bias ? j->bias[ch] : 0.0f,
                      out, &j->mm);
    if (j->act) j->d->cfg->vact((size_t)out_plane, out, out, j->act, j->op->fp);
    if (j->mean) j->mean[p] = plane_mean(out, out_plane); /* while the plane is in L1 */
  }
}
/*
 * Items [begin, end) of a depthwise conv split into bands of output rows: item i is band
 * i / planes of plane i % planes, so each thread's contiguous range (em_parallel_for_static) is
 * the same rows of every channel. Those are the pixels the 1x1 convs before and after (their
 * GEMMs split by pixel strips) give the thread: the planes stay in its core's L2 instead of
 * half of each crossing to the other core, as a split by channels makes them.
 */
static void dw_bands(void *ctx, int64_t begin, int64_t end) {
  const dw_job *j = ctx;
  const em_dw_params *q = &j->q;
  const int64_t planes = j->planes, in_plane = q->h * q->w, out_plane = q->oh * q->ow;
  const int64_t khw = q->kh * q->kw;
  for (int64_t i = begin; i < end; i++) {
    const int64_t p = i % planes, ch = p % j->c;
    em_dw_params sub;
    int64_t oy0, iy0;
    dw_band(q, j->bands, i / planes, &sub, &oy0, &iy0);
    float *out = j->y + p * out_plane + oy0 * q->ow;
    j->d->cfg->dwconv(&sub, j->x + p * in_plane + iy0 * q->w, j->w + ch * khw,
                      j->bias ? j->bias[ch] : 0.0f, out, &j->mm);
    if (j->act) j->d->cfg->vact((size_t)(sub.oh * q->ow), out, out, j->act, j->op->fp);
  }
}

/*
 * Whether every band has output rows, reads at least one input row (not all padding) and starts
 * on a cache line of its plane. Bands that share a line write it from two cores at the same
 * moment, plane after plane: 28x28 planes split at row 14 (pixel 392, mid-line) ran 1.6x slower
 * at 2 threads than whole planes (MobileNetV2's 192-channel depthwise convs: 0.061 against
 * 0.039 ms), so those split by planes instead.
 */
static bool dw_bands_ok(const em_dw_params *q, int64_t bands) {
  for (int64_t b = 0; b < bands; b++) {
    em_dw_params sub;
    int64_t oy0, iy0;
    dw_band(q, bands, b, &sub, &oy0, &iy0);
    if (sub.oh < 1 || sub.h < 1 || (oy0 * q->ow) % 16 != 0) return false;
  }
  return true;
}

/* The job of depthwise conv op over its whole input, its output split into `bands`. */
static dw_job dw_job_of(const emc_delegate *d, const emc_op *op, int64_t bands) {
  const emc_conv_params p = emc_conv_params_of(op);
  const emc_rt_tensor *xt = &d->t[op->in[0]], *yt = &d->t[op->out[0]];
  const float *x = xt->data, *w = data_of(d, op->in[1]), *bias = data_of(d, op->in[2]);
  float *y = yt->data;
  int64_t n = xt->sizes[0], h = xt->sizes[2], wd = xt->sizes[3];
  int64_t co = yt->sizes[1], oh = yt->sizes[2], ow = yt->sizes[3];
  dw_job j = {d,      op,    dw_params_of(&p, h, wd, oh, ow), co, x, w, bias, y, clamp_of(op),
              n * co, bands, data_of(d, op->out[1]),          0};
  j.act = post_act_fused(d, op, &j.mm);
  return j;
}

void emc_dwconv_channels(const emc_delegate *d, const emc_op *op, int64_t c0, int64_t c1) {
  dw_job j = dw_job_of(d, op, 1);
  if (d->cfg->dwconv_c16 && em_dw_c16_fits(&j.q))
    dw_c16_blocks(&j, c0 / 16, (c1 + 15) / 16);
  else
    dw_planes(&j, c0, c1);
}

void emc_run_dwconv(const emc_delegate *d, const emc_op *op, em_threadpool *pool) {
  dw_job j = dw_job_of(d, op, (int64_t)em_threadpool_size(pool));
  const emc_rt_tensor *yt = &d->t[op->out[0]];
  const int64_t n = yt->sizes[0], co = yt->sizes[1], oh = yt->sizes[2];
  const int64_t work = yt->numel * j.q.kh * j.q.kw;
  if (j.bands > 1 && work >= EMC_MIN_PARALLEL_WORK && oh >= 8 * j.bands &&
      dw_bands_ok(&j.q, j.bands)) {
    em_parallel_for_static(pool, j.bands * n * co, dw_bands, &j);
    if (j.mean) par_for_static(pool, n * co, dw_means, &j, yt->numel);
  } else if (d->cfg->dwconv_c16 && em_dw_c16_fits(&j.q)) {
    /* small planes, 16 at once (7x7 maps; on 14x14 the one-plane kernel wins) */
    par_for_static(pool, n * ((co + 15) / 16), dw_c16_blocks, &j, work);
  } else {
    par_for_static(pool, n * co, dw_planes, &j, work);
  }
}
