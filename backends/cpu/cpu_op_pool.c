/*
 * cpu_op_pool.c — max and avg pool2d: their checks and runs, per plane (separable max pools on
 * the ISA's kernel, cfg->maxpool; the rest window by window). A max pool after the conv that
 * alone feeds it may run fused with it (cpu_op_chain.c). And resize (nearest / bilinear
 * upsampling, adaptive average pooling), plane by plane from the taps the exporter computed.
 */
#include "cpu_ops.h"

bool emc_check_pool(const emc_delegate *d, const emc_op *op, char *why, size_t why_n) {
  const emc_rt_tensor *x = tensor_at(d, op->in[0]), *y = tensor_at(d, op->out[0]);
  if (!x || !y || x->ndim != 4 || y->ndim != 4) WHY("pool: needs 4-d input and output");
  if (!params_nonneg(op, EMC_POOL_N_PARAMS, why, why_n)) return false;
  const emc_pool2d_params pp = emc_pool2d_params_of(op);
  if (pp.kh < 1 || pp.kw < 1 || pp.sh < 1 || pp.sw < 1) WHY("pool: kernel and stride must be >= 1");
  if (pp.dh < 1 || pp.dw < 1) WHY("pool: dilation must be >= 1");
  if (x->sizes[0] != y->sizes[0] || x->sizes[1] != y->sizes[1]) WHY("pool: N, C differ");
  /* torch's rules: padding at most half the (dilated) window; each output side the floor or the
   * ceil-mode count of windows (the runtime's chains size their bands from them). */
  for (int a = 0; a < 2; a++) {
    const int64_t k = a ? pp.kw : pp.kh, st = a ? pp.sw : pp.sh, p = a ? pp.pw : pp.ph,
                  dl = a ? pp.dw : pp.dh;
    const int64_t span = dl * (k - 1) + 1, in = x->sizes[2 + a], out = y->sizes[2 + a];
    if (2 * p > span) WHY("pool: padding %lld wider than half the window", (long long)p);
    const int64_t room = in + 2 * p - span;
    if (room < 0) WHY("pool: window larger than the padded input");
    int64_t ceil_n = (room + st - 1) / st + 1;
    if ((ceil_n - 1) * st >= in + p) ceil_n--;
    if (out != room / st + 1 && out != ceil_n)
      WHY("pool: output side %lld does not follow from input %lld, window %lld, stride %lld, "
          "padding %lld",
          (long long)out, (long long)in, (long long)k, (long long)st, (long long)p);
  }
  if (pp.q8) {
    if (pp.q8 != 1 || op->kind != EMC_OP_MAXPOOL2D || op->act != EMC_ACT_FAKEQUANT ||
        x->storage != EMC_ARENA || y->storage != EMC_ARENA)
      WHY("pool: a u8 pool (flag %lld) is a max pool with a fake-quant, in the backend's arena",
          (long long)pp.q8);
  }
  return check_act(op, why, why_n);
}

typedef struct pool_q8_job {
  const uint8_t *x; /* [n][h][w][cp] */
  uint8_t *y;       /* [n][oh][ow][cp] */
  int64_t h, w, oh, ow, c, cp;
  emc_pool2d_params p;
} pool_q8_job;

/* Output rows [begin, end) (of every image: n * oh) of a u8 max pool: each output pixel's C
 * bytes the largest over the window's taps inside the map (padding never wins in torch). */
static void pool_q8_rows(void *ctx, int64_t begin, int64_t end) {
  const pool_q8_job *j = ctx;
  const emc_pool2d_params *pp = &j->p;
  const size_t c = (size_t)j->c, cp = (size_t)j->cp;
  for (int64_t r = begin; r < end; r++) {
    const int64_t b = r / j->oh, oy = r % j->oh, y0 = oy * pp->sh - pp->ph;
    const uint8_t *xb = j->x + (size_t)(b * j->h * j->w) * cp;
    uint8_t *yr = j->y + (size_t)(r * j->ow) * cp;
    for (int64_t ox = 0; ox < j->ow; ox++) {
      const int64_t x0 = ox * pp->sw - pp->pw;
      uint8_t *o = yr + (size_t)ox * cp;
      bool first = true;
      for (int64_t ky = 0; ky < pp->kh; ky++) {
        const int64_t iy = y0 + ky * pp->dh;
        if (iy < 0 || iy >= j->h) continue;
        for (int64_t kx = 0; kx < pp->kw; kx++) {
          const int64_t ix = x0 + kx * pp->dw;
          if (ix < 0 || ix >= j->w) continue;
          const uint8_t *v = xb + (size_t)(iy * j->w + ix) * cp;
          if (first)
            memcpy(o, v, c), first = false;
          else
            for (size_t i = 0; i < c; i++) o[i] = v[i] > o[i] ? v[i] : o[i];
        }
      }
    }
  }
}

typedef struct pool_job {
  const emc_delegate *d;
  const emc_op *op;
  const float *x;
  float *y;
  int64_t h, w, oh, ow;
  emc_pool2d_params p;
} pool_job;

static void pool_planes(void *ctx, int64_t begin, int64_t end) {
  const pool_job *j = ctx;
  const emc_pool2d_params *pp = &j->p;
  const int is_max = j->op->kind == EMC_OP_MAXPOOL2D;
  for (int64_t p = begin; p < end; p++) {
    const float *x = j->x + p * j->h * j->w;
    float *y = j->y + p * j->oh * j->ow;
    for (int64_t oy = 0; oy < j->oh; oy++) {
      for (int64_t ox = 0; ox < j->ow; ox++) {
        int64_t y0 = oy * pp->sh - pp->ph, x0 = ox * pp->sw - pp->pw;
        float acc = is_max ? -INFINITY : 0.0f;
        const int64_t dh = pp->dh, dw = pp->dw;
        int64_t ky0 = y0 >= 0 ? 0 : (-y0 + dh - 1) / dh, kx0 = x0 >= 0 ? 0 : (-x0 + dw - 1) / dw;
        int64_t ky1 = pp->kh, kx1 = pp->kw;
        while (ky1 > ky0 && y0 + (ky1 - 1) * dh >= j->h) ky1--;
        while (kx1 > kx0 && x0 + (kx1 - 1) * dw >= j->w) kx1--;
        int64_t cnt = (ky1 - ky0) * (kx1 - kx0);
        for (int64_t ky = ky0; ky < ky1; ky++) {
          const float *row = x + (y0 + ky * dh) * j->w + x0;
          if (is_max)
            for (int64_t kx = kx0; kx < kx1; kx++) {
              float v = row[kx * dw];
              acc = (v > acc || v != v) ? v : acc;
            }
          else
            for (int64_t kx = kx0; kx < kx1; kx++) acc += row[kx * dw];
        }
        if (cnt < 0) cnt = 0;
        if (!is_max) {
          int64_t div = cnt;
          if (pp->divisor > 0)
            div = pp->divisor;
          else if (pp->include_pad) {
            /* PyTorch: the window clipped to the padded input. */
            int64_t ye = y0 + pp->kh, xe = x0 + pp->kw;
            int64_t hp = j->h + pp->ph, wp = j->w + pp->pw;
            div = ((ye < hp ? ye : hp) - y0) * ((xe < wp ? xe : wp) - x0);
          }
          acc = div > 0 ? acc / (float)div : 0.0f;
        }
        y[oy * j->ow + ox] = acc;
      }
    }
    if (j->op->act) j->d->cfg->vact((size_t)(j->oh * j->ow), y, y, j->op->act, j->op->fp);
  }
}

/* Planes [begin, end) of a separable max pool. */
static void maxpool_planes(void *ctx, int64_t begin, int64_t end) {
  const pool_job *j = ctx;
  const em_pool_params q = pool_geom_of(&j->p, j->h, j->w, j->oh, j->ow);
  for (int64_t p = begin; p < end; p++) {
    float *y = j->y + p * j->oh * j->ow;
    j->d->cfg->maxpool(&q, j->x + p * j->h * j->w, y);
    if (j->op->act) j->d->cfg->vact((size_t)(j->oh * j->ow), y, y, j->op->act, j->op->fp);
  }
}

em_status emc_run_pool(const emc_delegate *d, const emc_op *op, em_threadpool *pool) {
  const emc_rt_tensor *xt = &d->t[op->in[0]], *yt = &d->t[op->out[0]];
  if (emc_pool2d_params_of(op).q8) {
    const int64_t c = xt->sizes[1];
    pool_q8_job q = {(const uint8_t *)(const void *)xt->data,
                     (uint8_t *)(void *)yt->data,
                     xt->sizes[2],
                     xt->sizes[3],
                     yt->sizes[2],
                     yt->sizes[3],
                     c,
                     (c + 3) / 4 * 4,
                     emc_pool2d_params_of(op)};
    par_for_static(pool, yt->sizes[0] * q.oh, pool_q8_rows, &q, yt->numel * q.p.kh * q.p.kw);
    return EM_OK;
  }
  pool_job j = {d,
                op,
                xt->data,
                yt->data,
                xt->sizes[2],
                xt->sizes[3],
                yt->sizes[2],
                yt->sizes[3],
                emc_pool2d_params_of(op)};
  const bool separable = pool_separable(op, j.w, j.ow);
  par_for_static(pool, xt->sizes[0] * xt->sizes[1], separable ? maxpool_planes : pool_planes, &j,
                 yt->numel * j.p.kh * j.p.kw);
  return EM_OK;
}

/* ---- resize ---------------------------------------------------------------------------------- */

/* n taps (4 floats each) with integer indices i0 <= i1 in [0, in) and finite weights. */
static bool taps_ok(const float *t, int64_t n, int64_t in) {
  for (int64_t k = 0; k < n; k++) {
    const float i0 = t[4 * k], i1 = t[4 * k + 1], l0 = t[4 * k + 2], l1 = t[4 * k + 3];
    if (!(i0 >= 0.0f && i1 >= i0 && i1 < (float)in) || i0 != (float)(int64_t)i0 ||
        i1 != (float)(int64_t)i1 || !isfinite(l0) || !isfinite(l1))
      return false;
  }
  return true;
}

bool emc_check_resize(const emc_delegate *d, const emc_op *op, char *why, size_t why_n) {
  if (!params_nonneg(op, EMC_RESIZE_N_PARAMS, why, why_n)) return false;
  const int32_t *ip = op->ip;
  const int64_t p = ip[EMC_RESIZE_PLANES], h = ip[EMC_RESIZE_H], w = ip[EMC_RESIZE_W],
                oh = ip[EMC_RESIZE_OH], ow = ip[EMC_RESIZE_OW];
  if (h < 1 || w < 1 || h > (1 << 24) || w > (1 << 24) || ip[EMC_RESIZE_MODE] > 2)
    WHY("resize: bad parameters");
  const emc_rt_tensor *rt = tensor_at(d, op->in[1]), *ct = tensor_at(d, op->in[2]);
  if (!is_const(rt) || !is_const(ct) || rt->numel != 4 * oh || ct->numel != 4 * ow)
    WHY("resize: the taps are not constants of 4 x %lld and 4 x %lld floats", (long long)oh,
        (long long)ow);
  if (!taps_ok(rt->data, oh, h) || !taps_ok(ct->data, ow, w))
    WHY("resize: a tap lies outside the input or has a weight that is not finite");
  const emc_rt_tensor *x = tensor_at(d, op->in[0]), *y = tensor_at(d, op->out[0]);
  if (x && y && out_shared(x, y)) WHY("resize: input and output overlap");
  return check_rows(d, op, p * h * w, p * oh * ow, why, why_n);
}

typedef struct resize_job {
  const float *x, *rt, *ct;
  float *y;
  int64_t h, w, oh, ow;
  int32_t mode; /* EMC_RESIZE_MODE_BILINEAR, _NEAREST or _ADAPTIVE_AVG */
} resize_job;

/* Output rows [begin, end) of all planes, row r of plane r / oh. */
static void resize_rows(void *ctx, int64_t begin, int64_t end) {
  const resize_job *j = ctx;
  for (int64_t r = begin; r < end; r++) {
    const int64_t pl = r / j->oh, o = r % j->oh;
    const float *t = j->rt + 4 * o;
    const float *x0 = j->x + (pl * j->h + (int64_t)t[0]) * j->w;
    const float *x1 = j->x + (pl * j->h + (int64_t)t[1]) * j->w;
    const float l0 = t[2], l1 = t[3];
    float *y = j->y + r * j->ow;
    if (j->mode == EMC_RESIZE_MODE_NEAREST) {
      for (int64_t c = 0; c < j->ow; c++) y[c] = x0[(int64_t)j->ct[4 * c]];
      continue;
    }
    if (j->mode == EMC_RESIZE_MODE_ADAPTIVE_AVG) { /* rows t[0]..t[1], columns tc[0]..tc[1] */
      const int64_t rows = (int64_t)t[1] - (int64_t)t[0] + 1;
      for (int64_t c = 0; c < j->ow; c++) {
        const int64_t c0 = (int64_t)j->ct[4 * c], c1 = (int64_t)j->ct[4 * c + 1];
        float s = 0.0f;
        for (int64_t i = 0; i < rows; i++)
          for (int64_t k = c0; k <= c1; k++) s += x0[i * j->w + k];
        y[c] = s / (float)(rows * (c1 - c0 + 1));
      }
      continue;
    }
    for (int64_t c = 0; c < j->ow; c++) {
      const float *tc = j->ct + 4 * c;
      const int64_t c0 = (int64_t)tc[0], c1 = (int64_t)tc[1];
      const float top = tc[2] * x0[c0] + tc[3] * x0[c1];
      const float bottom = tc[2] * x1[c0] + tc[3] * x1[c1];
      y[c] = l0 * top + l1 * bottom;
    }
  }
}

em_status emc_run_resize(const emc_delegate *d, const emc_op *op, em_threadpool *pool) {
  const int32_t *ip = op->ip;
  const resize_job j = {d->t[op->in[0]].data,  d->t[op->in[1]].data, d->t[op->in[2]].data,
                        d->t[op->out[0]].data, ip[EMC_RESIZE_H],     ip[EMC_RESIZE_W],
                        ip[EMC_RESIZE_OH],     ip[EMC_RESIZE_OW],    ip[EMC_RESIZE_MODE]};
  const int64_t rows = (int64_t)ip[EMC_RESIZE_PLANES] * j.oh;
  par_for_mem(pool, rows, resize_rows, (void *)&j, rows * j.ow);
  if (op->act) d->cfg->vact((size_t)(rows * j.ow), j.y, j.y, op->act, op->fp);
  return EM_OK;
}
