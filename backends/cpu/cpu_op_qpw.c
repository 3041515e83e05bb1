/*
 * cpu_op_qpw.c — int8 convs on the pixel-major tile (d->q8_pw, em_q8_pw_fn): EMC_CONV_Q8,
 * ungrouped, not depthwise, any kernel, stride, padding and dilation; the input in u8 channels
 * last (EMC_Q8_U8_IN) or in f32 planes; the output in u8 channels last (EMC_Q8_U8_OUT) or in f32
 * planes (then with the panel path's clamp and activation per row, as it does); no residual.
 *
 * Such a conv is a GEMM of the output's pixels (rows) by the weights over the window's depths.
 * The panel path (cpu_op_qconv.c) gathers the input into im2col column panels, runs weight rows
 * by pixels and transposes the u8 result back into channels last; here the tile reads each
 * pixel's window where it lies in the channels-last image (an origin per pixel, an offset per
 * group of 4 depths) and writes its output channels where they go. Per image: the input's u8
 * image (an f32 input quantized into it, a padded u8 one copied into it, an unpadded u8 one
 * read in place), then one parallel phase of tiles (each job finishing its f32 rows while they
 * are in cache). The weights, stored in the panel path's
 * layout ([row panels of 6][kq][6][4], depths in (ky, kx, channel) order), are repacked once at
 * init into blocks of 16 channels ([kq][16][4]), with the groups' offsets in the padded image,
 * in memory from the method allocator. Same bytes as the panel path
 * (tests/python/test_backend_cpu_q8pw.py forces both).
 */
#include "cpu_ops.h"

enum {
  PW_CHUNK = 64, /* pixels a job takes */
  PW_NC = 32     /* channels a tile call takes */
};

/* Whether op (validated) is an int8 conv the tile takes (one with a residual stays on the panel
 * path: the exporter fuses none into int8 convs, whose outputs a fake-quant reads). */
static bool pw_takes(const emc_op *op) {
  if (op->kind != EMC_OP_CONV2D) return false;
  const emc_conv_params p = emc_conv_params_of(op);
  return p.q8_id >= 0 && !p.depthwise && p.groups == 1 && p.winograd == 0 && p.wino_at_load == 0 &&
         op->in[3] < 0;
}

/* Input channels padded to a multiple of 4, as the panel path's u8 images. */
static size_t pw_cp(int64_t c) { return (size_t)(c + 3) / 4 * 4; }

/* Whether op's window goes in compact rows: the conv quantizes its f32 input into its own image
 * (no u8 input), of channels not a multiple of 4, undilated along x, and fewer groups come of it.
 * The image then holds the channels unpadded (cp = cin), so a window row's kw taps are kw * cin
 * contiguous bytes, taken 4 at a time (the last group's bytes past the row meet zero weights:
 * the next pixel's channels, or the scratch's slack past the image). A network's 7x7 stem on 3
 * channels: 7 x 6 groups instead of 49 taps of 3 channels padded to 4 (the same exact sums). */
static bool pw_compact(const emc_delegate *d, const emc_op *op) {
  const emc_conv_params p = emc_conv_params_of(op);
  const size_t cin = (size_t)d->t[op->in[0]].sizes[1], kw = (size_t)p.kw;
  if ((p.q8_u8 & EMC_Q8_U8_IN) || cin % 4 == 0 || p.dw != 1) return false;
  return (kw * cin + 3) / 4 < kw * (pw_cp((int64_t)cin) / 4);
}

/* The channels' bytes a pixel takes in op's image. */
static size_t pw_img_cp(const emc_delegate *d, const emc_op *op) {
  const int64_t cin = d->t[op->in[0]].sizes[1];
  return pw_compact(d, op) ? (size_t)cin : pw_cp(cin);
}

/* Depth groups of op's window: kh * kw taps of cp / 4 groups, or kh rows of ceil(kw * cin / 4)
 * (pw_compact). */
static size_t pw_kq(const emc_delegate *d, const emc_op *op) {
  const emc_conv_params p = emc_conv_params_of(op);
  const int64_t cin = d->t[op->in[0]].sizes[1];
  if (pw_compact(d, op)) return (size_t)p.kh * (((size_t)(p.kw * cin) + 3) / 4);
  return (size_t)(p.kh * p.kw) * (pw_cp(cin) / 4);
}

/* Bytes of op's repacked weights (16-channel blocks of [kq][16][4]) and group offsets (kq
 * int32), rounded up to 64. */
static size_t pw_bytes(const emc_delegate *d, const emc_op *op) {
  const size_t co = (size_t)d->t[op->out[0]].sizes[1], kq = pw_kq(d, op);
  return (emc_div_up(co, 16) * kq * 64 + kq * 4 + 63) / 64 * 64;
}

em_status emc_q8_pw_prepare(emc_delegate *d, em_allocator *al, char *why, size_t why_n) {
  if (!d->q8_pw) return EM_OK;
  size_t total = 0;
  for (uint32_t i = 0; i < d->n_ops; i++)
    if (pw_takes(&d->ops[i])) total += pw_bytes(d, &d->ops[i]);
  if (total == 0) return EM_OK;
  const int8_t **table = em_allocator_alloc(al, d->n_ops * sizeof *table, 16);
  int8_t *mem = em_allocator_alloc(al, total, 64);
  if (!table || !mem) {
    snprintf(why, why_n, "method allocator too small for %zu bytes of int8 pixel-major weights",
             total);
    return EM_ERR_MEMORY_ALLOCATION_FAILED;
  }
  for (uint32_t i = 0; i < d->n_ops; i++) {
    const emc_op *op = &d->ops[i];
    table[i] = NULL;
    if (!pw_takes(op)) continue;
    const emc_conv_params p = emc_conv_params_of(op);
    const emc_rt_tensor *xt = &d->t[op->in[0]];
    const size_t cin = (size_t)xt->sizes[1], co = (size_t)d->t[op->out[0]].sizes[1];
    const size_t cq = pw_cp((int64_t)cin) / 4, kw = (size_t)p.kw;
    const size_t kq = pw_kq(d, op), blocks = emc_div_up(co, 16), kq0 = (size_t)p.kh * kw * cq;
    const size_t wp = (size_t)(xt->sizes[3] + 2 * p.pw);
    const bool compact = pw_compact(d, op);
    const size_t gr = (kw * cin + 3) / 4; /* compact: groups a window row */
    const int8_t *w = (const int8_t *)(const void *)d->t[op->in[1]].data; /* [co / 6][kq0][6][4] */
    for (size_t c = 0; c < blocks * 16; c++)
      for (size_t q = 0; q < kq; q++) {
        int8_t *dst = mem + (c / 16) * kq * 64 + q * 64 + (c % 16) * 4;
        const int8_t *wc = w + (c / EMC_MR) * kq0 * EMC_MR * 4 + (c % EMC_MR) * 4;
        if (c >= co) {
          memset(dst, 0, 4);
        } else if (!compact) {
          memcpy(dst, wc + q * EMC_MR * 4, 4);
        } else { /* byte b: row ky's byte 4 g + b, tap kx's channel ch (0 past the row) */
          const size_t ky = q / gr, g = q % gr;
          for (size_t b = 0; b < 4; b++) {
            const size_t i = 4 * g + b, kx = i / cin, ch = i % cin;
            dst[b] = kx < kw ? wc[((ky * kw + kx) * cq + ch / 4) * EMC_MR * 4 + ch % 4] : 0;
          }
        }
      }
    int32_t *qoff = (int32_t *)(void *)(mem + blocks * kq * 64);
    for (size_t q = 0; q < kq; q++) { /* group q: tap (ky, kx) = q / cq, channels 4 (q % cq) */
      const size_t t = q / cq, ky = t / kw, kx = t % kw;
      qoff[q] = compact
                    ? (int32_t)((q / gr) * (size_t)p.dh * wp * cin + (q % gr) * 4)
                    : (int32_t)(((ky * (size_t)p.dh * wp + kx * (size_t)p.dw) * cq + q % cq) * 4);
    }
    table[i] = mem;
    mem += pw_bytes(d, op);
  }
  d->q8_pw_w = table;
  return EM_OK;
}

typedef struct pw_job {
  const emc_delegate *d;
  const emc_op *op;
  em_q8_pw_fn tile;
  const uint8_t *src; /* the image's u8 values channels last, [hp][wp][cp] */
  uint8_t *y;         /* a u8 output: [npix][cpo]; else NULL */
  float *yf;          /* an f32 output: [co][npix]; else NULL */
  const int8_t *w;
  const int32_t *qoff, *corr;
  const float *scale, *bias;
  size_t npix, ow, sh, sw, wp, cp, cpo, co, kq, nblk;
  size_t chunk; /* pixels a job takes (at most PW_CHUNK) */
  em_q8_quant_params oq;
  const uint8_t *lut; /* a u8 lookup after the conv (emc_q8_pw_fuse_lut): 256 levels; or NULL */
  size_t wpo; /* a u8 output in the padded layout of the depthwise conv after it (emc_q8_pad_plan):
               * its rows' pixels (y: the first inside pixel); 0: rows end to end */
} pw_job;

/* Where pixel p of a u8 output goes (a byte offset from j->y). */
static inline size_t pw_at(const pw_job *j, size_t p) {
  return (j->wpo ? p / j->ow * j->wpo + p % j->ow : p) * j->cpo;
}

/* A chunk's pixels: their windows' origins in the image and, for a u8 output, their bytes
 * (channels last, or the padded layout's rows: each pixel's place given to the tile, so a chunk
 * is one call whatever the row width; split at each row's end, 28- and 14-pixel rows ran tiles
 * of 4 and 6). */
typedef struct pw_chunk {
  const uint8_t *x[PW_CHUNK];
  uint8_t *y[PW_CHUNK];
} pw_chunk;

/* The chunk of pixels [p0, p1) (at most PW_CHUNK). */
static void pw_origins(const pw_job *j, size_t p0, size_t p1, pw_chunk *ck) {
  const size_t n = p1 - p0;
  if (j->sh == 1 && j->sw == 1 && j->wp == j->ow && !j->wpo) { /* pixels end to end both sides */
    const uint8_t *x = j->src + p0 * j->cp;
    uint8_t *y = j->y ? j->y + p0 * j->cpo : NULL;
    for (size_t k = 0; k < n; k++) ck->x[k] = x + k * j->cp;
    if (y)
      for (size_t k = 0; k < n; k++) ck->y[k] = y + k * j->cpo;
    return;
  }
  /* row by row: each pointer one step on from the last, a row's start from the last start */
  const size_t oy = p0 / j->ow, dx = j->sw * j->cp, dy = j->sh * j->wp * j->cp;
  const size_t dyo = (j->wpo ? j->wpo : j->ow) * j->cpo;
  size_t ox = p0 % j->ow;
  const uint8_t *xr = j->src + oy * dy; /* the row's first window */
  uint8_t *yr = j->y ? j->y + pw_at(j, oy * j->ow) : NULL;
  for (size_t k = 0; k < n;) {
    const size_t m = j->ow - ox < n - k ? j->ow - ox : n - k; /* this row's pixels */
    for (size_t a = 0; a < m; a++) ck->x[k + a] = xr + (ox + a) * dx;
    if (yr)
      for (size_t a = 0; a < m; a++) ck->y[k + a] = yr + (ox + a) * j->cpo;
    k += m, ox = 0;
    if (k < n) xr += dy, yr = yr ? yr + dyo : NULL;
  }
}

/* Pixels [p0, p1) (at most PW_CHUNK; their chunk ck) by channel block cb (PW_NC channels) of
 * the tile, then, for an f32 output, those rows' clamp and activation. */
static void pw_block(const pw_job *j, size_t p0, size_t p1, size_t cb, const pw_chunk *ck) {
  const size_t c0 = cb * PW_NC, nc = j->co - c0 < PW_NC ? j->co - c0 : PW_NC, np = p1 - p0;
  const int8_t *w = j->w + c0 / 16 * j->kq * 64;
  const float *bias = j->bias ? j->bias + c0 : NULL;
  if (j->yf)
    j->tile(np, nc, j->kq, ck->x, j->qoff, w, j->corr + c0, j->scale + c0, bias, NULL, 0, &j->oq,
            j->yf + c0 * j->npix + p0, j->npix);
  else
    j->tile(np, nc, j->kq, ck->x, j->qoff, w, j->corr + c0, j->scale + c0, bias, ck->y, c0, &j->oq,
            NULL, 0);
  if (!j->yf) return;
  /* the f32 rows' clamp and activation, as the panel path's q8_tiles */
  const em_cpu_config *cfg = j->d->cfg;
  const uint32_t act = post_act(j->op);
  /* rows of the whole image lie end to end (a linear layer's: one pixel): one call for all */
  const size_t len = np == j->npix ? nc * j->npix : np;
  for (size_t r = c0; r < c0 + nc; r += len / np) {
    float *row = j->yf + r * j->npix + p0;
    if (j->op->act == EMC_ACT_CLAMP) cfg->vact(len, row, row, EMC_ACT_CLAMP, j->op->fp);
    if (act) cfg->vact(len, row, row, act, j->op->fp);
  }
}

/* The u8 lookup of pixels [p0, p1) in place (whole rows of them end to end, or each output
 * row's run in the padded layout). */
static void pw_lut(const pw_job *j, size_t p0, size_t p1) {
  for (size_t p = p0; p < p1;) {
    const size_t m = j->wpo ? (j->ow - p % j->ow < p1 - p ? j->ow - p % j->ow : p1 - p) : p1 - p;
    uint8_t *y = j->y + pw_at(j, p);
    j->d->q8_lut(m * j->cpo, y, y, j->lut);
    p += m;
  }
}

/* Jobs [begin, end): j->chunk pixels by PW_NC channels each, pixel chunks outermost (the jobs
 * of one chunk read the same windows). */
static void pw_jobs(void *ctx, int64_t begin, int64_t end) {
  const pw_job *j = ctx;
  if (j->lut) { /* a job is a chunk: every channel block, then the chunk's lookup in place */
    for (int64_t job = begin; job < end; job++) {
      const size_t p0 = (size_t)job * j->chunk;
      const size_t p1 = p0 + j->chunk < j->npix ? p0 + j->chunk : j->npix;
      pw_chunk ck;
      pw_origins(j, p0, p1, &ck);
      for (size_t cb = 0; cb < j->nblk; cb++) pw_block(j, p0, p1, cb, &ck);
      pw_lut(j, p0, p1);
    }
    return;
  }
  pw_chunk ck;
  size_t at = SIZE_MAX; /* the chunk ck holds (a range's jobs share their chunks) */
  for (int64_t job = begin; job < end; job++) {
    const size_t pc = (size_t)job / j->nblk, cb = (size_t)job % j->nblk;
    const size_t p0 = pc * j->chunk, p1 = p0 + j->chunk < j->npix ? p0 + j->chunk : j->npix;
    if (pc != at) pw_origins(j, p0, p1, &ck), at = pc;
    pw_block(j, p0, p1, cb, &ck);
  }
}

typedef struct pw_quant_job {
  em_q8_quant_fn quant;
  em_q8_quant_scaled_fn quant_scaled; /* the scaled planes in one pass (NULL: through blk) */
  const float *x;                     /* one image's planes, [cin][h][w] */
  uint8_t *img; /* its u8 values channels last, zero-point padded, [hp][wp][cp] */
  size_t cin, h, w, wp, cp, ph, pw;
  em_q8_quant_params q;
  /* a fused scale per plane (emc_q8_pw_fuse_scale): x[c] * s[c] by vmulc, else s is NULL */
  const float *s;
  em_f32_vbinary_fn vmulc;
  em_minmax_params mm;
  /* planes a lookup never wrote (emc_q8_lk_plan): x[c] looked up from its u8 input (lk_x,
   * [pixels][lk_xs]) by lutq, else lutq is NULL */
  em_q8_lutq_fn lutq;
  const uint8_t *lk_x, *lk_t;
  size_t lk_xs;
  float lk_zp, lk_s;
} pw_quant_job;

enum { PW_SCALE_SPAN = 128 }; /* pixels of a scaled block (16 planes of them: 8 KiB) */

/* Pixels [p0, p1) of the image quantized from x[c] * s[c], products in blocks of 16 planes of
 * PW_SCALE_SPAN pixels on the stack (the multiply the binary operator runs, then the fake-quant
 * that followed it: the conv's quantizer gives its bytes), stored from dst (the pixel p0). */
static void pw_quant_scaled(const pw_quant_job *j, size_t p0, size_t p1, uint8_t *dst) {
  const size_t hw = j->h * j->w;
  if (j->lutq) { /* the planes from the lookup's u8 levels: the same bytes */
    j->lutq(j->cin, p1 - p0, j->lk_x + p0 * j->lk_xs, j->lk_xs, j->lk_t, j->lk_zp, j->lk_s, j->s,
            &j->mm, dst, j->cp, &j->q);
    return;
  }
  if (j->quant_scaled && !j->mm.hswish) { /* the same bytes without the buffer */
    j->quant_scaled(j->cin, p1 - p0, j->x + p0, hw, j->s, &j->mm, dst, j->cp, &j->q);
    return;
  }
  float blk[16 * PW_SCALE_SPAN];
  for (size_t i = p0; i < p1; i += PW_SCALE_SPAN) {
    const size_t n = p1 - i < PW_SCALE_SPAN ? p1 - i : PW_SCALE_SPAN;
    for (size_t c0 = 0; c0 < j->cin; c0 += 16) {
      const size_t nc = j->cin - c0 < 16 ? j->cin - c0 : 16;
      for (size_t c = 0; c < nc; c++)
        j->vmulc(n, j->x + (c0 + c) * hw + i, j->s + c0 + c, blk + c * PW_SCALE_SPAN, &j->mm);
      j->quant(nc, n, blk, PW_SCALE_SPAN, dst + (i - p0) * j->cp + c0, j->cp, &j->q);
    }
  }
}

/* Rows [begin, end) of an f32 input quantized into the padded channels-last image (the panel
 * path's q8_image: one call per row, or one for all when the image has no side padding). */
static void pw_quant(void *ctx, int64_t begin, int64_t end) {
  const pw_quant_job *j = ctx;
  const size_t step = j->pw == 0 ? (size_t)(end - begin) : 1;
  for (size_t y = (size_t)begin; y < (size_t)end; y += step) {
    uint8_t *dst = j->img + ((y + j->ph) * j->wp + j->pw) * j->cp;
    if (j->s)
      pw_quant_scaled(j, y * j->w, (y + step) * j->w, dst);
    else
      j->quant(j->cin, step * j->w, j->x + y * j->w, j->h * j->w, dst, j->cp, &j->q);
  }
}

/* A 1x1, stride-1, unpadded conv of an f32 input in one parallel phase: each job quantizes its
 * pixels (all channels: a pixel's window is itself) and runs every channel block over them
 * while they are in cache, instead of a phase of quantizing rows and a phase of tiles. */
typedef struct pw_one_phase {
  const pw_job *t;
  const pw_quant_job *q;
} pw_one_phase;

static void pw_quant_jobs(void *ctx, int64_t begin, int64_t end) {
  const pw_one_phase *f = ctx;
  const pw_job *j = f->t;
  const pw_quant_job *q = f->q;
  for (int64_t job = begin; job < end; job++) {
    const size_t p0 = (size_t)job * j->chunk;
    const size_t p1 = p0 + j->chunk < j->npix ? p0 + j->chunk : j->npix;
    uint8_t *dst = q->img + p0 * q->cp;
    if (q->cp != q->cin) memset(dst, (int)q->q.zp, (p1 - p0) * q->cp); /* channels past cin */
    if (q->s)
      pw_quant_scaled(q, p0, p1, dst);
    else
      q->quant(q->cin, p1 - p0, q->x + p0, q->h * q->w, dst, q->cp, &q->q);
    pw_chunk ck;
    pw_origins(j, p0, p1, &ck);
    for (size_t cb = 0; cb < j->nblk; cb++) pw_block(j, p0, p1, cb, &ck);
    if (j->lut) pw_lut(j, p0, p1);
  }
}

/* The conv, its f32 input's planes scaled first when sc is not NULL (sc->x, sc->s, sc->mm; the
 * input's quantizer sc->q). */
static void run_pw(const emc_delegate *d, const emc_op *op, const int8_t *w, const pw_quant_job *sc,
                   const uint8_t *lut, uint8_t *yout, em_threadpool *pool) {
  const emc_conv_params p = emc_conv_params_of(op);
  const emc_rt_tensor *xt = &d->t[op->in[0]], *yt = &d->t[op->out[0]];
  const size_t n = (size_t)xt->sizes[0], cin = (size_t)xt->sizes[1], co = (size_t)yt->sizes[1];
  const size_t h = (size_t)xt->sizes[2], wd = (size_t)xt->sizes[3], cp = pw_img_cp(d, op);
  const size_t hp = h + 2 * (size_t)p.ph, wp = wd + 2 * (size_t)p.pw;
  const size_t ow = (size_t)yt->sizes[3], npix = (size_t)yt->sizes[2] * ow, kq = pw_kq(d, op);
  const float *table = data_of(d, (int32_t)p.q8_id), *f = op->fp;
  const float off = f[EMC_ACT_FP_QMIN] < 0.0f ? 128.0f : 0.0f;
  pw_job j = {.d = d,
              .op = op,
              .tile = d->q8_pw,
              .w = w,
              .qoff = (const int32_t *)(const void *)(w + emc_div_up(co, 16) * kq * 64),
              .corr = (const int32_t *)(const void *)(table + co),
              .scale = table,
              .bias = data_of(d, op->in[2]),
              .npix = npix,
              .ow = ow,
              .sh = (size_t)p.sh,
              .sw = (size_t)p.sw,
              .wp = wp,
              .cp = cp,
              .cpo = pw_cp((int64_t)co),
              .co = co,
              .kq = kq,
              .nblk = emc_div_up(co, PW_NC),
              .oq = {f[EMC_ACT_FP_INV_SCALE], f[EMC_ACT_FP_ZP] + off, f[EMC_ACT_FP_QMIN] + off,
                     f[EMC_ACT_FP_QMAX] + off, f[EMC_ACT_FP_MIN], f[EMC_ACT_FP_MAX]},
              .lut = lut};
  uint8_t *img = d->arena + p.scratch_off; /* the scratch holds more than the image */
  uint8_t *y8 = yout ? yout : (uint8_t *)(void *)yt->data; /* a u8 output's images */
  size_t img_bytes = npix * j.cpo, first = 0; /* a u8 output image's bytes, its first pixel's */
  const uint8_t pad = d->q8_pad ? d->q8_pad[op - d->ops] : 0;
  if (pad && pad != EMC_Q8_PAD_IN) { /* the padded layout of the depthwise conv pad ops on */
    const emc_conv_params dp = emc_conv_params_of(op + pad);
    const size_t wpo = (size_t)(ow + 2 * dp.pw + dp.ew),
                 hpo = (size_t)yt->sizes[2] + 2 * dp.ph + dp.eh;
    j.wpo = wpo, img_bytes = hpo * wpo * j.cpo,
    first = ((size_t)dp.ph * wpo + (size_t)dp.pw) * j.cpo;
  }
  const bool in_u8 = !sc && (p.q8_u8 & EMC_Q8_U8_IN) != 0, padded = p.ph || p.pw;
  const bool out_u8 = (p.q8_u8 & EMC_Q8_U8_OUT) != 0;
  pw_quant_job qj = {
      .quant = d->q8_quant,
      .img = img,
      .cin = cin,
      .h = h,
      .w = wd,
      .wp = wp,
      .cp = cp,
      .ph = (size_t)p.ph,
      .pw = (size_t)p.pw,
      .q = {p.q8_inv, (float)p.q8_zp, (float)p.q8_lo, (float)p.q8_hi, -INFINITY, INFINITY}};
  if (sc)
    qj.q = sc->q, qj.s = sc->s, qj.vmulc = sc->vmulc, qj.mm = sc->mm,
    qj.quant_scaled = d->q8_quant_scaled, qj.lutq = sc->lutq, qj.lk_x = sc->lk_x,
    qj.lk_t = sc->lk_t, qj.lk_xs = sc->lk_xs, qj.lk_zp = sc->lk_zp, qj.lk_s = sc->lk_s;
  /* Pixel chunks small enough to give each thread about four jobs (maps of 7x7 or 14x14 at the
   * end of a network have one or two 64-pixel chunks), at least 8 pixels (one tile). */
  const size_t threads = (size_t)em_threadpool_size(pool);
  /* (a linear layer's single pixel would be one job: quantized first, then split by channels) */
  const bool one_phase = !in_u8 && !padded && p.kh == 1 && p.kw == 1 && p.sh == 1 && p.sw == 1 &&
                         (threads < 2 || npix >= 8 * threads);
  const size_t per_chunk = one_phase || lut ? 1 : j.nblk; /* jobs a chunk of pixels makes */
  j.chunk = PW_CHUNK;
  while (threads > 1 && j.chunk > 8 && emc_div_up(npix, j.chunk) * per_chunk < 4 * threads)
    j.chunk -= 8;
  const int64_t jobs = (int64_t)(emc_div_up(npix, j.chunk) * per_chunk);
  for (size_t b = 0; b < n; b++) {
    if (one_phase) {
      qj.x = (sc ? sc->x : xt->data) + b * cin * h * wd;
      j.src = img;
      if (out_u8)
        j.y = y8 + b * img_bytes + first;
      else
        j.yf = yt->data + b * co * npix;
      const pw_one_phase f = {&j, &qj};
      par_for_static(pool, jobs, pw_quant_jobs, (void *)&f,
                     (int64_t)(co * npix * kq * 4 + 8 * cin * npix));
      continue;
    }
    if (in_u8) {
      const uint8_t *xb = (const uint8_t *)(const void *)xt->data + b * h * wd * cp;
      j.src = xb;
      if (padded) { /* the rows into the zero-point padded image */
        memset(img, (int)p.q8_zp, hp * wp * cp);
        for (size_t y = 0; y < h; y++)
          memcpy(img + ((y + (size_t)p.ph) * wp + (size_t)p.pw) * cp, xb + y * wd * cp, wd * cp);
        j.src = img;
      }
    } else { /* padding and channels past cin at the zero point, as the panel path's image */
      if (padded || cp != cin) memset(img, (int)p.q8_zp, hp * wp * cp);
      qj.x = (sc ? sc->x : xt->data) + b * cin * h * wd;
      par_for_static(pool, (int64_t)h, pw_quant, &qj, (int64_t)(8 * cin * h * wd));
      j.src = img;
    }
    if (out_u8)
      j.y = y8 + b * img_bytes + first;
    else
      j.yf = yt->data + b * co * npix;
    /* Contiguous ranges of jobs (pixel chunks outermost): each thread takes the same part of the
     * image in every conv (and the depthwise convs' rows, the adds' pixels, the same), so what a
     * thread reads its own core wrote. Claimed from one counter, about half of every tensor
     * crossed between the cores: 2 threads, alternating runs of 300, MobileNetV2 int8 1.698 ->
     * 1.603 ms, MobileNetV3-Small 0.714 -> 0.660, EfficientNet-Lite0 2.136 -> 2.028. */
    par_for_static(pool, jobs, pw_jobs, &j, (int64_t)(co * npix * kq * 4));
  }
}

void emc_run_conv_q8_pw(const emc_delegate *d, const emc_op *op, const int8_t *w,
                        em_threadpool *pool) {
  run_pw(d, op, w, NULL, NULL, NULL, pool);
}

/* ---- a plane scale (squeeze-and-excitation) with the int8 conv after it ------------------- */

/* The quantizer of the fake-quant act of op (its u8 form, as an int8 conv's input). */
static em_q8_quant_params fq_params(const emc_op *op) {
  const float *f = op->fp, off = f[EMC_ACT_FP_QMIN] < 0.0f ? 128.0f : 0.0f;
  return (em_q8_quant_params){f[EMC_ACT_FP_INV_SCALE],  f[EMC_ACT_FP_ZP] + off,
                              f[EMC_ACT_FP_QMIN] + off, f[EMC_ACT_FP_QMAX] + off,
                              f[EMC_ACT_FP_MIN],        f[EMC_ACT_FP_MAX]};
}

/* Whether tensor t is [1, c, h, w] (sz: [1, c, 1, 1] when plane is false) in the arena. */
static bool se_shape(const emc_rt_tensor *t, const emc_rt_tensor *y, bool plane) {
  return t->ndim == 4 && t->sizes[0] == 1 && t->sizes[1] == y->sizes[1] &&
         t->sizes[2] == (plane ? y->sizes[2] : 1) && t->sizes[3] == (plane ? y->sizes[3] : 1);
}

bool emc_alone_reads(const emc_delegate *d, int32_t t, uint32_t k) {
  for (uint32_t o = 0; o < d->n_ops; o++) {
    const emc_op *x = &d->ops[o];
    if (o == k) continue;
    for (int r = 0; r < 4; r++)
      if (x->in[r] == t) return false;
    if (x->kind == EMC_OP_CONV2D &&
        (emc_conv_params_of(x).in_scale_id == t || emc_conv_params_of(x).pairs_id == t ||
         emc_conv_params_of(x).q8_id == t))
      return false;
  }
  return true;
}

int emc_q8_pw_fuse_scale(const emc_delegate *d, uint32_t i) {
  if (i + 1 >= d->n_ops || !d->q8_pw_w || !d->q8_pw_w[i + 1]) return 0;
  const emc_op *m = &d->ops[i], *c = &d->ops[i + 1];
  if (m->kind != EMC_OP_BINARY || m->act != EMC_ACT_FAKEQUANT || m->in[1] < 0) return 0;
  const emc_binary_params bp = emc_binary_params_of(m);
  if (bp.op != EMC_BIN_MUL || bp.q8) return 0;
  const emc_rt_tensor *y = &d->t[m->out[0]], *a = &d->t[m->in[0]], *b = &d->t[m->in[1]];
  if (y->storage != EMC_ARENA || c->in[0] != m->out[0] || !se_shape(y, y, true)) return 0;
  if (!(se_shape(a, y, true) && se_shape(b, y, false)) &&
      !(se_shape(b, y, true) && se_shape(a, y, false)))
    return 0;
  const emc_conv_params p = emc_conv_params_of(c);
  if (p.q8_u8 & EMC_Q8_U8_IN) return 0; /* the conv reads the product's f32 planes */
  /* the conv's quantizer is the product's fake-quant (it reads back those levels) */
  const em_q8_quant_params q = fq_params(m);
  if (q.inv != p.q8_inv || q.zp != (float)p.q8_zp || q.lo != (float)p.q8_lo ||
      q.hi != (float)p.q8_hi)
    return 0;
  return emc_alone_reads(d, m->out[0], i + 1) ? 2 : 0; /* the conv alone reads the product */
}

/* Whether tensor t's bytes (as floats) and [p, p + n) share any. */
static bool shares(const emc_rt_tensor *t, const uint8_t *p, size_t n) {
  const uint8_t *a = (const uint8_t *)(const void *)t->data;
  return a && p && a < p + n && p < a + (size_t)t->numel * sizeof(float);
}

bool emc_q8_pw_run_scaled(const emc_delegate *d, uint32_t i, em_threadpool *pool) {
  const emc_op *m = &d->ops[i], *c = &d->ops[i + 1];
  const emc_rt_tensor *a = &d->t[m->in[0]], *b = &d->t[m->in[1]];
  const bool a_planes =
      a->sizes[2] * a->sizes[3] == d->t[m->out[0]].sizes[2] * d->t[m->out[0]].sizes[3] &&
      b->numel == b->sizes[1];
  const emc_rt_tensor *x = a_planes ? a : b, *s = a_planes ? b : a;
  /* the conv's scratch and output must not hold the planes or the scales it reads */
  const emc_conv_params p = emc_conv_params_of(c);
  const uint8_t *scratch = d->arena + p.scratch_off;
  const emc_rt_tensor *y = &d->t[c->out[0]];
  /* planes a lookup never wrote are not read (emc_q8_lk_plan checked the rest once) */
  const int32_t lk = d->q8_lk ? d->q8_lk[i] : 0;
  if ((!lk && (shares(x, scratch, (size_t)p.scratch_nbytes) ||
               shares(x, (const uint8_t *)(const void *)y->data, (size_t)y->numel * 4))) ||
      shares(s, scratch, (size_t)p.scratch_nbytes) ||
      shares(s, (const uint8_t *)(const void *)y->data, (size_t)y->numel * sizeof(float)))
    return false;
  pw_quant_job sc = {.x = x->data,
                     .s = s->data,
                     .vmulc = d->cfg->vbinc[EMC_BIN_MUL],
                     .mm = clamp_of(m),
                     .q = fq_params(m)};
  uint8_t t8[256];
  if (lk > 0) { /* the planes from the lookup's u8 input */
    const emc_op *u = &d->ops[lk - 1];
    sc.lutq = d->q8_lutq, sc.lk_t = t8, sc.lk_zp = emc_q8_lut_levels(d, u, t8);
    sc.lk_x = (const uint8_t *)(const void *)d->t[u->in[0]].data;
    sc.lk_xs = (size_t)(d->t[u->out[0]].sizes[1] + 3) / 4 * 4, sc.lk_s = u->fp[EMC_ACT_FP_SCALE];
  }
  run_pw(d, c, d->q8_pw_w[i + 1], &sc, NULL, NULL, pool);
  return true;
}

/* ---- a u8 table lookup after the conv ----------------------------------------------------- */

int emc_q8_pw_fuse_lut(const emc_delegate *d, uint32_t i) {
  if (i + 1 >= d->n_ops || !d->q8_pw_w || !d->q8_pw_w[i] || !d->q8_lut) return 0;
  const emc_op *c = &d->ops[i], *u = &d->ops[i + 1];
  if (c->kind != EMC_OP_CONV2D || u->kind != EMC_OP_UNARY || u->in[0] != c->out[0]) return 0;
  const emc_conv_params p = emc_conv_params_of(c);
  const emc_unary_params up = emc_unary_params_of(u);
  if (!(p.q8_u8 & EMC_Q8_U8_OUT) || up.q8 != 1) return 0;
  const emc_rt_tensor *y = &d->t[c->out[0]];
  /* whole 4-channel groups: the lookup of the pixels' whole rows has no padding bytes to keep */
  if (y->storage != EMC_ARENA || y->sizes[1] % 4 != 0) return 0;
  return emc_alone_reads(d, c->out[0], i + 1) ? 2 : 0;
}

/* Whether the pair at i may run as one: the conv writes the lookup's output while it reads its
 * input and (unless it reads an unpadded u8 input where it lies) its scratch. */
static bool lut_pair_ok(const emc_delegate *d, uint32_t i) {
  const emc_op *c = &d->ops[i], *u = &d->ops[i + 1];
  const emc_rt_tensor *x = &d->t[c->in[0]], *z = &d->t[u->out[0]];
  const emc_conv_params p = emc_conv_params_of(c);
  const uint8_t *zb = (const uint8_t *)(const void *)z->data;
  const size_t zn = (size_t)z->numel * sizeof(float);
  const bool scratch = !(p.q8_u8 & EMC_Q8_U8_IN) || p.ph || p.pw;
  return !shares(x, zb, zn) &&
         !(scratch && shares(z, d->arena + p.scratch_off, (size_t)p.scratch_nbytes));
}

bool emc_q8_pw_run_lut(const emc_delegate *d, uint32_t i, em_threadpool *pool) {
  if (!lut_pair_ok(d, i)) return false;
  uint8_t t8[256];
  emc_q8_lut_levels(d, &d->ops[i + 1], t8);
  run_pw(d, &d->ops[i], d->q8_pw_w[i], NULL, t8, (uint8_t *)(void *)d->t[d->ops[i + 1].out[0]].data,
         pool);
  return true;
}

/* ---- a fake-quant of an f32 tensor before the conv ---------------------------------------- */

int emc_q8_pw_fuse_fq(const emc_delegate *d, uint32_t i) {
  if (i + 1 >= d->n_ops || !d->q8_pw_w || !d->q8_pw_w[i + 1]) return 0;
  const emc_op *m = &d->ops[i], *c = &d->ops[i + 1];
  if (m->kind != EMC_OP_UNARY || m->act != EMC_ACT_FAKEQUANT || m->in[1] >= 0 ||
      c->in[0] != m->out[0])
    return 0;
  const emc_unary_params up = emc_unary_params_of(m);
  if (up.q8 || up.pre >= 0 || up.times_x) return 0;
  const emc_conv_params p = emc_conv_params_of(c);
  if (p.q8_u8 & EMC_Q8_U8_IN) return 0; /* the conv reads the fake-quant's f32 values */
  const emc_rt_tensor *x = &d->t[m->in[0]], *y = &d->t[m->out[0]];
  if (y->storage != EMC_ARENA || x->ndim != 4 || y->ndim != 4) return 0;
  /* the conv's quantizer is the fake-quant's (it reads back those levels) */
  const em_q8_quant_params q = fq_params(m);
  if (q.inv != p.q8_inv || q.zp != (float)p.q8_zp || q.lo != (float)p.q8_lo ||
      q.hi != (float)p.q8_hi)
    return 0;
  if (!emc_alone_reads(d, m->out[0], i + 1)) return 0;
  return emc_q8_pw_fuse_lut(d, i + 1) == 2 ? 3 : 2; /* the conv's lookup too */
}

bool emc_q8_pw_run_fq(const emc_delegate *d, uint32_t i, int n, em_threadpool *pool) {
  const emc_op *m = &d->ops[i], *c = &d->ops[i + 1], *u = n == 3 ? &d->ops[i + 2] : NULL;
  const emc_rt_tensor *x = &d->t[m->in[0]], *y = &d->t[(u ? u : c)->out[0]];
  const emc_conv_params p = emc_conv_params_of(c);
  const uint8_t *scratch = d->arena + p.scratch_off, *yb = (const uint8_t *)(const void *)y->data;
  /* the conv's scratch and what it writes (its output, or the lookup's) must not hold the tensor
   * it now reads, nor each other */
  if (shares(x, scratch, (size_t)p.scratch_nbytes) ||
      shares(x, yb, (size_t)y->numel * sizeof(float)) ||
      (u && shares(y, scratch, (size_t)p.scratch_nbytes)))
    return false;
  const pw_quant_job sc = {.x = x->data, .q = fq_params(m)}; /* no scale: s NULL */
  uint8_t t8[256];
  if (u) emc_q8_lut_levels(d, u, t8);
  run_pw(d, c, d->q8_pw_w[i + 1], &sc, u ? t8 : NULL, u ? (uint8_t *)(void *)y->data : NULL, pool);
  return true;
}

/* ---- a u8 output in the padded layout of the depthwise conv after it ---------------------- */

void emc_q8_pad_plan(const emc_delegate *d) {
  if (!d->q8_pad || !d->q8_pw_w) return;
  for (uint32_t i = 0; i + 1 < d->n_ops; i++) {
    const emc_op *c = &d->ops[i];
    if (c->kind != EMC_OP_CONV2D || !d->q8_pw_w[i] || d->q8_pad[i]) continue;
    const emc_conv_params p = emc_conv_params_of(c);
    if (!(p.q8_u8 & EMC_Q8_U8_OUT)) continue;
    /* the writer of the depthwise conv's input: the conv, or the lookup its chain runs */
    /* with its lookup only where the pair surely runs as one (else the conv alone would write
     * the padded layout the lookup does not read): its input in the arena, memory apart */
    uint32_t k = i + 1;
    if (d->fused[i] == 2 && d->ops[k].kind == EMC_OP_UNARY && d->t[c->in[0]].storage == EMC_ARENA &&
        lut_pair_ok(d, i))
      k++;
    else if (d->fused[i])
      continue;
    /* (a chain of two ending at the conv, its input's fake-quant or plane scale then the conv,
     * runs the conv's own store: padded too; a longer one's last op writes the output) */
    if (k >= d->n_ops || d->fused[k] || (i > 0 && d->fused[i - 1] > 2)) continue;
    const emc_op *w = &d->ops[k - 1], *dw = &d->ops[k];
    const emc_conv_params q = emc_conv_params_of(dw);
    if (dw->kind != EMC_OP_CONV2D || !q.depthwise || q.q8_id < 0 || dw->in[0] != w->out[0] ||
        !(q.ph || q.pw || q.eh || q.ew))
      continue;
    const emc_rt_tensor *t = &d->t[w->out[0]];
    if (t->storage != EMC_ARENA || t->ndim != 4 || !emc_alone_reads(d, w->out[0], k)) continue;
    /* the padded images fit the tensor's bytes (f32-sized) */
    const uint64_t cp = pw_cp(t->sizes[1]), hp = (uint64_t)(t->sizes[2] + 2 * q.ph + q.eh),
                   wp = (uint64_t)(t->sizes[3] + 2 * q.pw + q.ew);
    if ((uint64_t)t->sizes[0] * hp * wp * cp > (uint64_t)t->numel * sizeof(float)) continue;
    d->q8_pad[i] = (uint8_t)(k - i), d->q8_pad[k] = EMC_Q8_PAD_IN;
  }
}
