/*
 * cpu_op_qconv.c — int8 conv2d (EMC_CONV_Q8, blob version 8): the checks after emc_check_conv's
 * common ones, and the run.
 *
 * An int8 Q/DQ program's convs read an input that a fake-quant (EMC_ACT_FAKEQUANT) wrote, so
 * x = (q - zp) * s exactly, and weights the exporter stored as int8 with a scale per output
 * channel. The conv requantizes x as it builds its im2col panels (q comes back exactly), sums
 * u8 x int8 products in int32 with the ISA's tile (d->q8_gemm: vpdpbusd on AVX-512 VNNI) and
 * scales each channel's sums back to f32: the same products as the f32 conv of the dequantized
 * operands, summed exactly instead of in f32. Bias, residual, clamp and activation follow as
 * for f32 convs.
 *
 * Per image: the input's u8 values channels last with zero-point padding (channels padded to a
 * multiple of 4, so each group of 4 depths — ky, kx, 4 channels — is one 4-byte copy), the u8
 * im2col panels gathered from them (both in the scratch), then the tiles in jobs of
 * up to Q8_NB column panels by a run of 6-row panels, each job finishing its rows (residual,
 * clamp, activation) while they are in cache.
 */
#include "cpu_ops.h"

#define Q8_NB 8 /* column panels (16 pixels each) a job takes */

static size_t q8_kq(int64_t kg) { return emc_div_up((size_t)kg, 4); }

/* Channels padded to a multiple of 4 (the weights are zero there). */
static int64_t q8_cp(int64_t cin) { return (cin + 3) / 4 * 4; }

/* Bytes of the u8 im2col panels, [ceil(npix / 16)][kq][16][4], kq = kh * kw * cp / 4. The
 * padded image, [h + 2 ph][w + 2 pw][cp], follows them in the scratch. */
static uint64_t q8_col_bytes(int64_t npix, int64_t kg) {
  return (uint64_t)emc_div_up((size_t)npix, 16) * q8_kq(kg) * 64;
}

/* The checks every int8 conv shares: its input's zero point, range and scale, the u8 bits and
 * what a u8 input or output needs. */
static bool q8_io_checks(const emc_delegate *d, const emc_op *op, const emc_conv_params *pp,
                         char *why, size_t why_n) {
  const emc_conv_params p = *pp;
  if (p.q8_zp > 255 || p.q8_lo > p.q8_hi || p.q8_hi > 255)
    WHY("conv2d: int8 input zero point %lld or range [%lld, %lld] outside [0, 255]",
        (long long)p.q8_zp, (long long)p.q8_lo, (long long)p.q8_hi);
  if (!(p.q8_inv > 0.0f && p.q8_inv <= 3.4e38f))
    WHY("conv2d: int8 input scale inverse %g not positive and finite", (double)p.q8_inv);
  if (p.q8_u8 & ~(int64_t)(EMC_Q8_U8_IN | EMC_Q8_U8_OUT))
    WHY("conv2d: int8 u8 activation bits %lld", (long long)p.q8_u8);
  const emc_rt_tensor *x = tensor_at(d, op->in[0]), *y = tensor_at(d, op->out[0]);
  if ((p.q8_u8 & EMC_Q8_U8_IN) && x->storage != EMC_ARENA)
    WHY("conv2d: a u8 input must be in the backend's arena");
  if (p.q8_u8 & EMC_Q8_U8_OUT) {
    if (op->act != EMC_ACT_FAKEQUANT || op->in[3] >= 0 || y->storage != EMC_ARENA)
      WHY("conv2d: a u8 output needs a fake-quant, no residual and the backend's arena");
    if (!check_act(op, why, why_n)) return false; /* the fake-quant's slots first */
    const float qmin = op->fp[EMC_ACT_FP_QMIN], off = qmin < 0.0f ? 128.0f : 0.0f;
    if (!(qmin + off >= 0.0f && op->fp[EMC_ACT_FP_QMAX] + off <= 255.0f &&
          op->fp[EMC_ACT_FP_ZP] + off >= 0.0f && op->fp[EMC_ACT_FP_ZP] + off <= 255.0f))
      WHY("conv2d: a u8 output's range [%g, %g] does not map into [0, 255]", (double)qmin,
          (double)op->fp[EMC_ACT_FP_QMAX]);
  }
  return check_act(op, why, why_n);
}

/* An int8 depthwise conv: u8 in and out, its table [scale | corr | bias] of cw words each and
 * its weights [kh * kw][cw] (cw = channels rounded up to 16). */
static bool check_dwconv_q8(const emc_delegate *d, const emc_op *op, const emc_rt_tensor *w,
                            int64_t cin, int64_t co, char *why, size_t why_n) {
  const emc_conv_params p = emc_conv_params_of(op);
  const emc_rt_tensor *t = tensor_at(d, (int32_t)p.q8_id), *x = tensor_at(d, op->in[0]);
  if (!t || !is_const(t)) WHY("conv2d: the int8 channel table is not a constant");
  if (p.groups != cin || co != cin || p.winograd || p.transposed || p.pairs_id >= 0 ||
      p.in_scale_id >= 0 || p.q8_wino || op->out[1] >= 0 || op->in[2] >= 0 || op->in[3] >= 0)
    WHY("conv2d: an int8 depthwise conv has one channel per group and no bias tensor, residual, "
        "plane means or other form");
  if (p.q8_u8 != (EMC_Q8_U8_IN | EMC_Q8_U8_OUT))
    WHY("conv2d: an int8 depthwise conv reads and writes u8 activations");
  const int64_t kk = p.kh * p.kw, cw = (cin + 15) / 16 * 16;
  if (kk > 256) WHY("conv2d: int8 depthwise kernel of %lld taps exceeds 256", (long long)kk);
  if (t->numel != 3 * cw || w->numel != kk * cw)
    WHY("conv2d: int8 depthwise table or weights of %lld / %lld words, expected %lld / %lld",
        (long long)t->numel, (long long)w->numel, (long long)(3 * cw), (long long)(kk * cw));
  if (!q8_io_checks(d, op, &p, why, why_n)) return false;
  const uint64_t img = (uint64_t)q8_cp(cin) * (uint64_t)(x->sizes[2] + 2 * p.ph + p.eh) *
                       (uint64_t)(x->sizes[3] + 2 * p.pw + p.ew);
  return scratch_holds(d, &p, p.ph || p.pw || p.eh || p.ew ? img : 0, "int8 depthwise image", why,
                       why_n);
}

bool emc_check_conv_q8(const emc_delegate *d, const emc_op *op, const emc_rt_tensor *w, int64_t cin,
                       int64_t co, int64_t npix, char *why, size_t why_n) {
  const emc_conv_params p = emc_conv_params_of(op);
  if (p.depthwise) return check_dwconv_q8(d, op, w, cin, co, why, why_n);
  const emc_rt_tensor *t = tensor_at(d, (int32_t)p.q8_id), *x = tensor_at(d, op->in[0]);
  if (!t || !is_const(t)) WHY("conv2d: the int8 channel table is not a constant");
  if (p.groups != 1 || p.winograd || p.transposed || p.pairs_id >= 0 || p.in_scale_id >= 0 ||
      op->out[1] >= 0)
    WHY("conv2d: an int8 conv must be ungrouped, not Winograd, transposed or paired");
  const int64_t cp = q8_cp(cin), kg = cp * p.kh * p.kw;
  if (kg > 65536) WHY("conv2d: int8 conv depth %lld exceeds 65536", (long long)kg);
  if (p.q8_wino != 0 && p.q8_wino != 2 && p.q8_wino != 4)
    WHY("conv2d: int8 conv's Winograd alternative %lld is not 0, 2 or 4", (long long)p.q8_wino);
  const int64_t words = (p.q8_wino ? 3 : 2) * co; /* with the weights' scales for the alternative */
  if (t->numel != words)
    WHY("conv2d: int8 channel table has %lld words, expected %lld", (long long)t->numel,
        (long long)words);
  const int64_t want = (int64_t)emc_div_up((size_t)co, EMC_MR) * (int64_t)q8_kq(kg) * EMC_MR;
  if (w->numel != want)
    WHY("conv2d: int8 weights have %lld words, expected %lld", (long long)w->numel,
        (long long)want);
  if (!q8_io_checks(d, op, &p, why, why_n)) return false;
  const uint64_t img =
      (uint64_t)cp * (uint64_t)(x->sizes[2] + 2 * p.ph) * (uint64_t)(x->sizes[3] + 2 * p.pw);
  return scratch_holds(d, &p, q8_col_bytes(npix, kg) + img, "int8 im2col", why, why_n);
}

typedef struct q8_pack_job {
  const float *x;     /* one image, [cin][h][w] */
  uint8_t *img;       /* its u8 values channels last, zero-point padded: [hp][wp][cp] */
  const uint8_t *src; /* what the panels read: img, or a u8 input without padding itself */
  uint8_t *col;       /* [npanels][kq][16][4] */
  int64_t cin, h, w, ow, npix, hp, wp, cp;
  size_t kq;
  emc_conv_params p;
  em_q8_quant_fn quant;
  em_q8_pack_fn pack;
} q8_pack_job;

/* Rows [begin, end) of the padded u8 image (channels last), quantized and transposed from the
 * input's planes by the ISA's kernel (d->q8_quant, as the fake-quant that wrote x rounds): one
 * call per row, or one for all the rows when the image has no side padding (its rows are then
 * contiguous). The padding (and the channels past cin) already hold zp. */
static void q8_image(void *ctx, int64_t begin, int64_t end) {
  const q8_pack_job *j = ctx;
  const emc_conv_params *p = &j->p;
  const em_q8_quant_params qp = {p->q8_inv,       (float)p->q8_zp, (float)p->q8_lo,
                                 (float)p->q8_hi, -INFINITY,       INFINITY};
  const int64_t step = p->pw == 0 ? end - begin : 1;
  for (int64_t y = begin; y < end; y += step)
    j->quant((size_t)j->cin, (size_t)(step * j->w), j->x + y * j->w, (size_t)(j->h * j->w),
             j->img + ((y + p->ph) * j->wp + p->pw) * j->cp, (size_t)j->cp, &qp);
}

/* Column panels [begin, end) of the u8 im2col matrix (depth order ky, kx, channel), a tap at a
 * time by the ISA's packer (d->q8_pack: groups of 4 depths of a pixel are 4-byte runs of the
 * channels-last image). */
static void q8_pack(void *ctx, int64_t begin, int64_t end) {
  const q8_pack_job *j = ctx;
  const emc_conv_params *p = &j->p;
  const size_t cq = (size_t)j->cp / 4;
  for (int64_t pn = begin; pn < end; pn++) {
    const uint8_t *src[16];
    for (int c = 0; c < 16; c++) {
      const int64_t n = pn * 16 + c; /* a column past the map reads the first pixel */
      src[c] = j->src + (n < j->npix ? (n / j->ow * p->sh * j->wp + n % j->ow * p->sw) * j->cp : 0);
    }
    uint8_t *dst = j->col + (size_t)pn * j->kq * 64;
    for (int64_t ky = 0; ky < p->kh; ky++)
      for (int64_t kx = 0; kx < p->kw; kx++, dst += cq * 64)
        j->pack(src, (size_t)((ky * p->dh * j->wp + kx * p->dw) * j->cp), cq, dst);
  }
}

typedef struct q8_gemm_job {
  const emc_delegate *d;
  const emc_op *op;
  const int8_t *w;
  const uint8_t *col;
  const float *scale, *bias, *res;
  const int32_t *corr;
  float *y;
  uint8_t *out;          /* a u8 output (EMC_Q8_U8_OUT): [npix][cpo] of this image, else NULL */
  size_t cpo;            /* ... its channels rounded up to 4 */
  em_q8_quant_params oq; /* ... and the output fake-quant's step, shifted into u8 */
  em_q8_quant_fn quant;
  int64_t co, npix;
  size_t kq, mpanels, npanels, mchunk, mchunks;
} q8_gemm_job;

/* Row panel mp's tiles over column panels [p0, p1) into c (column p0 * 16 at c, rows ldc
 * apart): the tile takes q8_nr / 16 column panels a call (a block's panels are an even run). */
static void row_panel(const q8_gemm_job *j, size_t mp, size_t p0, size_t p1, float *c, size_t ldc) {
  const size_t r0 = mp * EMC_MR, mr = (size_t)j->co - r0 < EMC_MR ? (size_t)j->co - r0 : EMC_MR;
  for (size_t pn = p0; pn < p1; pn += j->d->q8_nr / 16) {
    const size_t cs = pn * 16, cn = (p1 - pn) * 16 < j->d->q8_nr ? (p1 - pn) * 16 : j->d->q8_nr;
    const size_t nr = (size_t)j->npix - cs < cn ? (size_t)j->npix - cs : cn;
    j->d->q8_gemm(mr, nr, j->kq, j->w + mp * j->kq * 24, j->col + pn * j->kq * 64, j->corr + r0,
                  j->scale + r0, j->bias ? j->bias + r0 : NULL, c + (cs - p0 * 16), ldc);
  }
}

enum { Q8_OUT_PANELS = 8 }; /* row panels a u8 output quantizes at once (48 rows, 24 KiB) */

/* One job's tiles of a u8 output: Q8_OUT_PANELS row panels at a time into a block on the stack,
 * then quantized and transposed into the channels-last output while the block is in cache. */
static void q8_tiles_u8(const q8_gemm_job *j, size_t p0, size_t p1, size_t m0, size_t m1) {
  float blk[Q8_OUT_PANELS * EMC_MR * Q8_NB * 16];
  const size_t ld = Q8_NB * 16, c0 = p0 * 16;
  const size_t c1 = p1 * 16 < (size_t)j->npix ? p1 * 16 : (size_t)j->npix;
  for (size_t ma = m0; ma < m1; ma += Q8_OUT_PANELS) {
    const size_t mb = ma + Q8_OUT_PANELS < m1 ? ma + Q8_OUT_PANELS : m1;
    for (size_t mp = ma; mp < mb; mp++) row_panel(j, mp, p0, p1, blk + (mp - ma) * EMC_MR * ld, ld);
    const size_t ra = ma * EMC_MR, rb = mb * EMC_MR < (size_t)j->co ? mb * EMC_MR : (size_t)j->co;
    j->quant(rb - ra, c1 - c0, blk, ld, j->out + c0 * j->cpo + ra, j->cpo, &j->oq);
  }
}

/* Jobs [begin, end): a block of Q8_NB column panels by a chunk of row panels, then its rows'
 * residual, clamp and activation. */
static void q8_tiles(void *ctx, int64_t begin, int64_t end) {
  const q8_gemm_job *j = ctx;
  const em_cpu_config *cfg = j->d->cfg;
  const em_minmax_params mm = clamp_of(j->op);
  const uint32_t act = post_act(j->op);
  for (int64_t job = begin; job < end; job++) {
    const size_t nb = (size_t)job / j->mchunks, mc = (size_t)job % j->mchunks;
    const size_t p0 = nb * Q8_NB, p1 = p0 + Q8_NB < j->npanels ? p0 + Q8_NB : j->npanels;
    const size_t m0 = mc * j->mchunk,
                 m1 = m0 + j->mchunk < j->mpanels ? m0 + j->mchunk : j->mpanels;
    if (j->out) {
      q8_tiles_u8(j, p0, p1, m0, m1);
      continue;
    }
    for (size_t mp = m0; mp < m1; mp++)
      row_panel(j, mp, p0, p1, j->y + mp * EMC_MR * (size_t)j->npix + p0 * 16, (size_t)j->npix);
    const size_t c0 = p0 * 16, c1 = p1 * 16 < (size_t)j->npix ? p1 * 16 : (size_t)j->npix;
    const size_t r1 = m1 * EMC_MR < (size_t)j->co ? m1 * EMC_MR : (size_t)j->co;
    for (size_t r = m0 * EMC_MR; r < r1; r++) {
      float *row = j->y + r * (size_t)j->npix + c0;
      if (j->res)
        cfg->vbin[EMC_BIN_ADD](c1 - c0, row, j->res + r * (size_t)j->npix + c0, row, &mm);
      else if (j->op->act == EMC_ACT_CLAMP)
        cfg->vact(c1 - c0, row, row, EMC_ACT_CLAMP, j->op->fp);
      if (act) cfg->vact(c1 - c0, row, row, act, j->op->fp);
    }
  }
}

typedef struct q8_dw_job {
  const emc_delegate *d;
  const uint8_t *src; /* the (padded) u8 input of one image */
  uint8_t *out;       /* its u8 output, [oh][ow][cpo] */
  size_t row, sh;     /* floats per input row; stride down */
  size_t blocks;      /* channel blocks of DW_BLOCK a row is split into (1: whole rows) */
  size_t oh;          /* output rows */
  em_q8_dw_fn one;    /* the row kernel */
  em_q8_dw2_fn two;   /* rows two at a time (a 5x5 conv of stride 1), else NULL */
  em_q8_dwv_fn pair;  /* or two rows side by side (17-32 channels, any stride), else NULL */
  size_t wd_block;    /* bytes of q.wd's tables per 64 channels */
  em_q8_dw_params q;
} q8_dw_job;

enum { DW_BLOCK = 64 }; /* channels of a job when rows are too few to split the work */

/* Jobs [begin, end): output row job / blocks (with j->two, the pair of rows from 2 (job /
 * blocks)), its channel block job % blocks (a block is the row kernel on those channels: its
 * pointers moved to them, the tables' stride kept). */
static void q8_dw_rows(void *ctx, int64_t begin, int64_t end) {
  const q8_dw_job *j = ctx;
  const size_t orow = j->q.ow * j->q.cpo;
  for (int64_t job = begin; job < end; job++) {
    const size_t r = (size_t)job / j->blocks, c0 = (size_t)job % j->blocks * DW_BLOCK;
    const size_t oy = j->two || j->pair ? 2 * r : r;
    em_q8_dw_params q = j->q;
    if (j->blocks > 1) {
      q.ch = q.ch - c0 < DW_BLOCK ? q.ch - c0 : DW_BLOCK;
      q.w += c0, q.scale += c0, q.corr += c0, q.bias += c0;
      if (q.wd) q.wd += c0 / 64 * j->wd_block;
    }
    const uint8_t *in = j->src + oy * j->sh * j->row + c0;
    uint8_t *out = j->out + oy * orow + c0;
    if (j->pair)
      j->pair(in, out, orow, oy + 1 < j->oh ? 2 : 1, &q);
    else if (j->two && oy + 1 < j->oh)
      j->two(in, out, orow, &q);
    else
      j->one(in, out, &q);
  }
}

typedef struct q8_pad_job {
  const uint8_t *x; /* one image, [h][w][cp] */
  uint8_t *img;     /* its zero-point padded copy, [h + 2 ph + eh][w + 2 pw + ew][cp] */
  int64_t h, w, cp, ph, pw, ew;
  int zp;
} q8_pad_job;

/* Rows [begin, end) of the padded image: the zero point around, the image's row inside. */
static void q8_pad_rows(void *ctx, int64_t begin, int64_t end) {
  const q8_pad_job *j = ctx;
  const size_t wp = (size_t)(j->w + 2 * j->pw + j->ew), cp = (size_t)j->cp;
  for (int64_t r = begin; r < end; r++) {
    uint8_t *dst = j->img + (size_t)r * wp * cp;
    const int64_t y = r - j->ph;
    if (y < 0 || y >= j->h) {
      memset(dst, j->zp, wp * cp);
      continue;
    }
    memset(dst, j->zp, (size_t)j->pw * cp);
    memcpy(dst + (size_t)j->pw * cp, j->x + (size_t)(y * j->w) * cp, (size_t)j->w * cp);
    memset(dst + (size_t)(j->pw + j->w) * cp, j->zp, (size_t)(j->pw + j->ew) * cp);
  }
}

/* An int8 depthwise conv (checked by check_dwconv_q8): u8 in, u8 out, rows on the pool. */
static void run_dwconv_q8(const emc_delegate *d, const emc_op *op, em_threadpool *pool) {
  const emc_conv_params p = emc_conv_params_of(op);
  const emc_rt_tensor *xt = &d->t[op->in[0]], *yt = &d->t[op->out[0]];
  const int64_t n = xt->sizes[0], c = xt->sizes[1], h = xt->sizes[2], wd = xt->sizes[3];
  const int64_t oh = yt->sizes[2], ow = yt->sizes[3], cp = q8_cp(c);
  const int64_t hp = h + 2 * p.ph + p.eh, wp = wd + 2 * p.pw + p.ew, kk = p.kh * p.kw;
  const int64_t cw = (c + 15) / 16 * 16;
  const float *table = data_of(d, (int32_t)p.q8_id), *f = op->fp;
  const float off = f[EMC_ACT_FP_QMIN] < 0.0f ? 128.0f : 0.0f;
  uint8_t *img = d->arena + p.scratch_off;
  const int8_t *dot = d->q8_dw_w ? d->q8_dw_w[op - d->ops] : NULL; /* on dot products */
  q8_dw_job j = {
      .d = d,
      .row = (size_t)(wp * cp),
      .sh = (size_t)p.sh,
      /* few rows (EfficientNet's 7x7 maps of 672-1152 channels): rows by channel blocks */
      .blocks = oh < 16 && c > DW_BLOCK ? (size_t)((c + DW_BLOCK - 1) / DW_BLOCK) : 1,
      .oh = (size_t)oh,
      /* 3x3 or 5x5, stride and dilation 1: two rows at a time, the shared input rows widened
       * once */
      .two = p.sh == 1 && p.sw == 1 && p.dh == 1 && p.dw == 1 &&
                     ((p.kh == 3 && p.kw == 3) || (p.kh == 5 && p.kw == 5 && ow >= 4))
                 ? (dot ? d->q8_dwd2 : d->q8_dw2)
                 : NULL,
      .one = dot ? d->q8_dwd : d->q8_dw,
      /* 17-32 channels on dot products: two rows side by side in the 64 lanes */
      .pair = dot && c > 16 && c <= 32 ? d->q8_dwdv : NULL,
      .wd_block = dot ? em_q8_dwdot_block_bytes((size_t)p.kh, (size_t)(p.sw / p.dw)) : 0,
      .q = {.ow = (size_t)ow,
            .ch = (size_t)c,
            .cpo = (size_t)cp,
            .kh = (size_t)p.kh,
            .kw = (size_t)p.kw,
            .cw = (size_t)cw,
            .step = (size_t)(p.sw * cp),
            .dy = (size_t)(p.dh * wp * cp),
            .dx = (size_t)(p.dw * cp),
            .w = data_of(d, op->in[1]),
            .scale = table,
            .corr = table + cw,
            .bias = table + 2 * cw,
            .oq = {f[EMC_ACT_FP_INV_SCALE], f[EMC_ACT_FP_ZP] + off, f[EMC_ACT_FP_QMIN] + off,
                   f[EMC_ACT_FP_QMAX] + off, f[EMC_ACT_FP_MIN], f[EMC_ACT_FP_MAX]},
            .wd = dot,
            .ystep = (size_t)(p.sh * wp * cp)}};
  for (int64_t b = 0; b < n; b++) {
    const uint8_t *xb = (const uint8_t *)(const void *)xt->data + (size_t)(b * h * wd * cp);
    j.src = xb;
    if (d->q8_pad && d->q8_pad[op - d->ops] == EMC_Q8_PAD_IN) { /* written padded: the border */
      const size_t rb = (size_t)(wp * cp), zp = (size_t)p.q8_zp, in = (size_t)(wd * cp);
      uint8_t *xi = (uint8_t *)(void *)xt->data + (size_t)(b * hp * wp * cp);
      memset(xi, (int)zp, (size_t)p.ph * rb);
      for (int64_t y = 0; y < h; y++) {
        uint8_t *r = xi + (size_t)(p.ph + y) * rb;
        memset(r, (int)zp, (size_t)(p.pw * cp));
        memset(r + (size_t)(p.pw * cp) + in, (int)zp, rb - (size_t)(p.pw * cp) - in);
      }
      memset(xi + (size_t)(p.ph + h) * rb, (int)zp, (size_t)(hp - p.ph - h) * rb);
      j.src = xi;
    } else if (p.ph || p.pw || p.eh || p.ew) { /* the rows into the zero-point padded image */
      q8_pad_job pj = {xb, img, h, wd, cp, p.ph, p.pw, p.ew, (int)p.q8_zp};
      par_for_static(pool, hp, q8_pad_rows, &pj, oh * ow * c * kk * 2);
      j.src = img;
    }
    j.out = (uint8_t *)(void *)yt->data + (size_t)(b * oh * ow * cp);
    const int64_t rows = j.two || j.pair ? (oh + 1) / 2 : oh;
    par_for_static(pool, rows * (int64_t)j.blocks, q8_dw_rows, &j, oh * ow * c * kk * 2);
  }
}

void emc_run_conv_q8(const emc_delegate *d, const emc_op *op, em_threadpool *pool) {
  const emc_conv_params p = emc_conv_params_of(op);
  if (p.depthwise) {
    run_dwconv_q8(d, op, pool);
    return;
  }
  const int8_t *pw = d->q8_pw_w ? d->q8_pw_w[op - d->ops] : NULL;
  if (pw) { /* pointwise, u8 both sides: the pixel-major tile (cpu_op_qpw.c) */
    emc_run_conv_q8_pw(d, op, pw, pool);
    return;
  }
  const emc_rt_tensor *xt = &d->t[op->in[0]], *yt = &d->t[op->out[0]];
  const int64_t n = xt->sizes[0], cin = xt->sizes[1], h = xt->sizes[2], wd = xt->sizes[3];
  const int64_t co = yt->sizes[1], ow = yt->sizes[3], npix = yt->sizes[2] * ow;
  const int64_t cp = q8_cp(cin), kg = cp * p.kh * p.kw, hp = h + 2 * p.ph, wp = wd + 2 * p.pw;
  const float *table = data_of(d, (int32_t)p.q8_id);
  const float *res = data_of(d, op->in[3]);
  q8_pack_job pj = {.col = d->arena + p.scratch_off,
                    .cin = cin,
                    .h = h,
                    .w = wd,
                    .ow = ow,
                    .npix = npix,
                    .hp = hp,
                    .wp = wp,
                    .cp = cp,
                    .kq = q8_kq(kg),
                    .p = p,
                    .quant = d->q8_quant,
                    .pack = d->q8_pack};
  pj.img = pj.col + q8_col_bytes(npix, kg);
  const bool in_u8 = (p.q8_u8 & EMC_Q8_U8_IN) != 0, out_u8 = (p.q8_u8 & EMC_Q8_U8_OUT) != 0;
  const size_t cpo = (size_t)q8_cp(co);
  q8_gemm_job gj = {.d = d,
                    .op = op,
                    .w = (const int8_t *)data_of(d, op->in[1]),
                    .col = pj.col,
                    .scale = table,
                    .bias = data_of(d, op->in[2]),
                    .corr = (const int32_t *)(table + co),
                    .co = co,
                    .npix = npix,
                    .kq = pj.kq,
                    .mpanels = emc_div_up((size_t)co, EMC_MR),
                    .npanels = emc_div_up((size_t)npix, 16)};
  /* Enough jobs for the threads: split the row panels where the map has few column blocks
   * (7x7 maps: one block). */
  const size_t nblocks = emc_div_up(gj.npanels, Q8_NB);
  const size_t threads = (size_t)em_threadpool_size(pool);
  size_t mchunks = nblocks >= 4 * threads ? 1 : emc_div_up(4 * threads, nblocks);
  if (mchunks > gj.mpanels) mchunks = gj.mpanels;
  gj.mchunk = emc_div_up(gj.mpanels, mchunks);
  gj.mchunks = emc_div_up(gj.mpanels, gj.mchunk);
  if (out_u8) {
    const float *f = op->fp, off = f[EMC_ACT_FP_QMIN] < 0.0f ? 128.0f : 0.0f;
    gj.cpo = cpo, gj.quant = d->q8_quant;
    gj.oq = (em_q8_quant_params){f[EMC_ACT_FP_INV_SCALE],  f[EMC_ACT_FP_ZP] + off,
                                 f[EMC_ACT_FP_QMIN] + off, f[EMC_ACT_FP_QMAX] + off,
                                 f[EMC_ACT_FP_MIN],        f[EMC_ACT_FP_MAX]};
  }
  for (int64_t b = 0; b < n; b++) {
    if (in_u8) { /* the input's bytes as they are, or copied into the padded image */
      const uint8_t *xb = (const uint8_t *)(const void *)xt->data + (size_t)(b * h * wd * cp);
      pj.src = xb;
      if (p.ph || p.pw) {
        memset(pj.img, (int)p.q8_zp, (size_t)(hp * wp * cp));
        for (int64_t y = 0; y < h; y++)
          memcpy(pj.img + ((y + p.ph) * wp + p.pw) * cp, xb + y * wd * cp, (size_t)(wd * cp));
        pj.src = pj.img;
      }
    } else {
      pj.x = xt->data + b * cin * h * wd, pj.src = pj.img;
      memset(pj.img, (int)p.q8_zp, (size_t)(hp * wp * cp));
      par_for(pool, h, q8_image, &pj, 8 * cin * h * wd);
    }
    par_for(pool, (int64_t)gj.npanels, q8_pack, &pj, (int64_t)gj.npanels * 16 * kg);
    gj.out = out_u8 ? (uint8_t *)(void *)yt->data + (size_t)b * (size_t)npix * cpo : NULL;
    gj.y = yt->data + b * co * npix;
    gj.res = res ? res + b * co * npix : NULL;
    par_for(pool, (int64_t)(nblocks * gj.mchunks), q8_tiles, &gj, co * npix * kg);
  }
}
