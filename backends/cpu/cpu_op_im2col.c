/*
 * cpu_op_im2col.c — the data movement of the GEMM convs: the im2col matrix (whole, in 16-column
 * panels or row-major, or strip by strip for the GEMM driver's B operand), the zero-padded copy
 * of the input whose strips are plain copies, and the transpose of a C^T product into NCHW.
 * Used by the conv paths (cpu_op_conv.c, cpu_op_wino.c) and the conv + max pool chain
 * (cpu_op_chain.c).
 */
#include "cpu_ops.h"

/* Rows [begin, end) of the im2col matrix, written straight into 16-column panels. */
void emc_im2col_rows(void *ctx, int64_t begin, int64_t end) {
  const im2col_job *j = ctx;
  const int64_t khw = j->q.kh * j->q.kw, kg = j->khw_rows, pstride = kg * EMC_NR_PANEL;
  for (int64_t r = begin; r < end; r++) {
    int64_t c = r / khw, ky = (r % khw) / j->q.kw, kx = r % j->q.kw;
    const float *plane = j->x + c * j->q.h * j->q.w;
    float *base = j->col + r * EMC_NR_PANEL;
    int64_t off = kx * j->q.dw - j->q.pw;
    int64_t lo = off >= 0 ? 0 : (-off + j->q.sw - 1) / j->q.sw;
    int64_t hi = (j->q.w - 1 - off) < 0 ? 0 : (j->q.w - 1 - off) / j->q.sw + 1;
    if (hi > j->q.ow) hi = j->q.ow;
    if (lo > hi) lo = hi;
    float *dst = base;
    int lane = 0;
    for (int64_t oy = 0; oy < j->q.oh; oy++) {
      int64_t iy = oy * j->q.sh + ky * j->q.dh - j->q.ph;
      const float *src = (iy < 0 || iy >= j->q.h) ? NULL : plane + iy * j->q.w + off;
      for (int64_t ox = 0; ox < j->q.ow; ox++) {
        *dst++ = (src && ox >= lo && ox < hi) ? src[ox * j->q.sw] : 0.0f;
        if (++lane == EMC_NR_PANEL) lane = 0, dst += pstride - EMC_NR_PANEL;
      }
    }
  }
}

/*
 * Rows [k0, k0 + kc), pixels [n0, n0 + nc) of the im2col matrix of j, into dst[kc][ldd]: the
 * GEMM driver's B strip, built in L1 as it goes instead of a [kg, OH * OW] matrix in memory.
 * Pixels run along output rows, so each matrix row is a few contiguous input runs (stride 1:
 * memcpy) with zeros where the window hangs over the padding.
 */
void emc_im2col_strip(const void *ctx, size_t k0, size_t kc, size_t n0, size_t nc, float *dst,
                      size_t ldd) {
  const im2col_job *j = ctx;
  const int64_t khw = j->q.kh * j->q.kw, oy0 = (int64_t)n0 / j->q.ow, ox0 = (int64_t)n0 % j->q.ow;
  /* (c, ky, kx) of row k0, then stepped row by row (no divisions in the loop). */
  int64_t c = (int64_t)k0 / khw, ky = ((int64_t)k0 % khw) / j->q.kw, kx = (int64_t)k0 % j->q.kw;
  for (size_t r = 0; r < kc; r++) {
    const float *plane = j->x + c * j->q.h * j->q.w;
    const int64_t off = kx * j->q.dw - j->q.pw;
    int64_t lo, hi;
    if (j->q.sw == 1) {
      lo = off >= 0 ? 0 : -off, hi = j->q.w - off;
    } else {
      lo = off >= 0 ? 0 : (-off + j->q.sw - 1) / j->q.sw;
      hi = (j->q.w - 1 - off) < 0 ? 0 : (j->q.w - 1 - off) / j->q.sw + 1;
    }
    if (hi > j->q.ow) hi = j->q.ow;
    if (lo > hi) lo = hi;
    float *d = dst + r * ldd;
    int64_t oy = oy0, ox = ox0;
    for (size_t i = 0; i < nc; oy++, ox = 0) {
      const int64_t run =
          (int64_t)nc - (int64_t)i < j->q.ow - ox ? (int64_t)nc - (int64_t)i : j->q.ow - ox;
      const int64_t iy = oy * j->q.sh + ky * j->q.dh - j->q.ph;
      float *dr = d + i - ox; /* dr[x] is output column x of this run */
      if (iy < 0 || iy >= j->q.h) {
        memset(dr + ox, 0, (size_t)run * sizeof *dr);
      } else {
        const float *src = plane + iy * j->q.w + off;
        int64_t a = ox > lo ? ox : lo, b = ox + run < hi ? ox + run : hi;
        if (a > b) a = b = ox + run;
        for (int64_t x = ox; x < a; x++) dr[x] = 0.0f;
        if (j->q.sw == 1)
          memcpy(dr + a, src + a, (size_t)(b - a) * sizeof *dr);
        else if (j->q.sw == 2) /* the ISA's kernel (AVX-512: two loads, one permute per 16) */
          j->cfg->copy_stride2((size_t)(b - a), src + 2 * a, dr + a);
        else
          for (int64_t x = a; x < b; x++) dr[x] = src[x * j->q.sw];
        for (int64_t x = b; x < ox + run; x++) dr[x] = 0.0f;
      }
      i += (size_t)run;
    }
    if (++kx == j->q.kw) {
      kx = 0;
      if (++ky == j->q.kh) ky = 0, c++;
    }
  }
}

#define EMC_PAD_ROW_MAX 2048 /* widest padded row (per parity) emc_pad_planes takes */

/* dst[0, n) = the row src[0, w) after pw zeros, zeros after it. */
static void zero_padded_row(float *dst, const float *src, int64_t pw, int64_t w, int64_t n) {
  memset(dst, 0, (size_t)pw * sizeof *dst);
  memcpy(dst + pw, src, (size_t)w * sizeof *dst);
  memset(dst + pw + w, 0, (size_t)(n - pw - w) * sizeof *dst);
}

/* Channels [begin, end) of the input into ij->padded (see im2col_job). */
void emc_pad_planes(void *ctx, int64_t begin, int64_t end) {
  const im2col_job *j = ctx;
  const int64_t s = j->q.sw, pc = j->pcols, row = s * pc; /* floats per padded row, both parities */
  float tmp[2 * EMC_PAD_ROW_MAX + 2];
  for (int64_t c = begin; c < end; c++) {
    const float *src = j->x + c * j->q.h * j->q.w;
    float *dst = j->padded + c * j->prows * row;
    for (int64_t y = 0; y < j->prows; y++) {
      float *d = dst + y * row;
      const int64_t iy = y - j->q.ph;
      if (iy < 0 || iy >= j->q.h) {
        memset(d, 0, (size_t)row * sizeof *d);
        continue;
      }
      const float *r = src + iy * j->q.w;
      if (s == 1) {
        zero_padded_row(d, r, j->q.pw, j->q.w, pc);
      } else { /* the padded row, then its even and odd columns (the ISA's stride-2 copy) */
        zero_padded_row(tmp, r, j->q.pw, j->q.w, 2 * pc + 1);
        j->cfg->copy_stride2((size_t)pc, tmp, d);
        j->cfg->copy_stride2((size_t)pc, tmp + 1, d + pc);
      }
    }
  }
}

/* The im2col job of conv parameters p over one image and group x [cg][h][w] (col: where
 * emc_im2col_rows writes; the padded input not yet set up: emc_padded_floats). */
im2col_job emc_im2col_of(const emc_delegate *d, const emc_conv_params *p, const float *x,
                         float *col, int64_t h, int64_t w, int64_t oh, int64_t ow, int64_t kg) {
  im2col_job j;
  memset(&j, 0, sizeof j);
  j.x = x, j.col = col, j.q = dw_params_of(p, h, w, oh, ow), j.khw_rows = kg, j.cfg = d->cfg;
  return j;
}

/* Sets ij's padded-input geometry (emc_pad_planes, emc_im2col_strip_padded) and returns the floats
 * the padded input of cg channels takes, or 0 when the conv cannot take that path: a stride other
 * than 1 or 2 or not the same both ways, dilation, rows wider than emc_pad_planes takes. */
size_t emc_padded_floats(im2col_job *ij, int64_t cg) {
  const int64_t s = ij->q.sw;
  if ((s != 1 && s != 2) || ij->q.sh != s || ij->q.dh != 1 || ij->q.dw != 1) return 0;
  ij->prows = (ij->q.oh - 1) * s + ij->q.kh;
  ij->pcols = (int64_t)emc_div_up((size_t)((ij->q.ow - 1) * s + ij->q.kw), (size_t)s);
  if (ij->pcols * s < ij->q.pw + ij->q.w || ij->prows < ij->q.ph || ij->pcols > EMC_PAD_ROW_MAX)
    return 0;
  return (size_t)(cg * ij->prows * s * ij->pcols);
}

/*
 * emc_im2col_strip from the padded input: every run of a matrix row is one contiguous copy (tap
 * (ky, kx) of output pixel (oy, ox) is padded row oy * s + ky, column ox * s + kx: for stride
 * 2, parity kx % 2 at index ox + kx / 2), with no bounds to work out: the per-run bookkeeping
 * of emc_im2col_strip cost more than the copies on strided stems (1.7 cycles a float).
 */
void emc_im2col_strip_padded(const void *ctx, size_t k0, size_t kc, size_t n0, size_t nc,
                             float *dst, size_t ldd) {
  const im2col_job *j = ctx;
  const int64_t khw = j->q.kh * j->q.kw, s = j->q.sw, pc = j->pcols, row = s * pc;
  const int64_t oy0 = ((int64_t)n0 + j->pix0) / j->q.ow, ox0 = ((int64_t)n0 + j->pix0) % j->q.ow;
  int64_t c = (int64_t)k0 / khw, ky = ((int64_t)k0 % khw) / j->q.kw, kx = (int64_t)k0 % j->q.kw;
  for (size_t r = 0; r < kc; r++) {
    const float *base = j->padded + c * j->prows * row + (s == 1 ? kx : (kx & 1) * pc + (kx >> 1));
    float *d = dst + r * ldd;
    int64_t oy = oy0, ox = ox0;
    for (size_t i = 0; i < nc; oy++, ox = 0) {
      const int64_t run =
          (int64_t)nc - (int64_t)i < j->q.ow - ox ? (int64_t)nc - (int64_t)i : j->q.ow - ox;
      const float *src = base + (oy * s + ky) * row + ox;
      if (run == 32) /* a whole AMX strip: a fixed-size copy the compiler inlines */
        memcpy(d + i, src, 32 * sizeof *d);
      else if (run == 64) /* a whole 6x64 strip */
        memcpy(d + i, src, 64 * sizeof *d);
      else
        memcpy(d + i, src, (size_t)run * sizeof *d);
      i += (size_t)run;
    }
    if (++kx == j->q.kw) {
      kx = 0;
      if (++ky == j->q.kh) ky = 0, c++;
    }
  }
}

/* Output channels [begin, end) of y = ct^T (with a residual: see transpose_job). */
void emc_transpose_rows(void *ctx, int64_t begin, int64_t end) {
  const transpose_job *j = ctx;
  j->cfg->transpose((size_t)j->npix, (size_t)(end - begin), j->ct + begin, (size_t)j->co,
                    j->y + begin * j->ldy, (size_t)j->ldy);
  for (int64_t c = begin; c < end; c++) {
    float *y = j->y + c * j->ldy;
    if (j->res) {
      j->cfg->vbin[EMC_BIN_ADD]((size_t)j->npix, y, j->res + c * j->npix, y, &j->mm);
      if (j->act) j->cfg->vact((size_t)j->npix, y, y, j->act, j->fp);
    }
  }
}

/* Rows [begin, end) of the im2col matrix of j, row-major [kg][OH * OW] in j->col. */
void emc_im2col_rows_rm(void *ctx, int64_t begin, int64_t end) {
  const im2col_job *j = ctx;
  const size_t npix = (size_t)(j->q.oh * j->q.ow);
  emc_im2col_strip(j, (size_t)begin, (size_t)(end - begin), 0, npix, j->col + (size_t)begin * npix,
                   npix);
}
