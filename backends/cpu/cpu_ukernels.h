/*
 * cpu_ukernels.h — micro-kernel signatures of the CPU backend and the
 * per-ISA configuration chosen once at init (cpu_config.c).
 *
 * GEMM micro-kernels compute one tile C[mr, nc] (mr <= EMC_MR, nc <= NR) of
 * C = A @ B, A read through (a_rs, a_ks) strides (a packed weight panel has
 * a_rs = 1, a_ks = EMC_MR; a row-major activation has a_rs = K, a_ks = 1), B
 * row-major with leading dimension ldb; columns 16..31 of a tile start at b + b_next (16 for a
 * row-major B, K * 16 for B packed in 16-column panels, EMC_NR_PANEL), 32..47 at b + 2 b_next,
 * and so on. The
 * accumulator starts from C when `accumulate`, else from bias_m[row] + bias_n[col] (either may be
 * NULL); the result is clamped to [p->min, p->max]. Rows past mr are never read or written, nor
 * columns past nc. a_pf (the name is historical), when not NULL, is what a kernel may prefetch
 * a line at a time while it computes: with a packed A (a_rs = 1, a_ks = 6), the A panel of the
 * driver's next tile (kc * 6 floats; the driver used to prefetch a whole panel before the call,
 * and the burst stalled on the line-fill buffers); with a strided A, kc rows of one 16-column
 * packed B panel the driver reads next (a 64-byte line per k: weights on their way from memory).
 */
#ifndef EMBER_BACKENDS_CPU_UKERNELS_H
#define EMBER_BACKENDS_CPU_UKERNELS_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ember/status.h"

typedef struct em_minmax_params {
  float min, max;
  /* Nonzero: a hardswish x * clamp(x + 3, 0, 6) * (1 / 6) after the clamp, as the ISA's vact
   * computes it (the same bits), where the kernel supports it (em_cpu_config.hswish);
   * kernels without that support ignore it. */
  uint32_t hswish;
} em_minmax_params;

typedef void (*em_f32_gemm_ukernel_fn)(size_t mr, size_t nc, size_t kc, const float *a, size_t a_rs,
                                       size_t a_ks, const float *b, size_t ldb, size_t b_next,
                                       float *c, size_t ldc, const float *bias_m,
                                       const float *bias_n, int accumulate,
                                       const em_minmax_params *p, const float *a_pf);

#define EM_GEMM_UKERNEL_DECL(name)                                                                 \
  void name(size_t mr, size_t nc, size_t kc, const float *a, size_t a_rs, size_t a_ks,             \
            const float *b, size_t ldb, size_t b_next, float *c, size_t ldc, const float *bias_m,  \
            const float *bias_n, int accumulate, const em_minmax_params *p, const float *a_pf)

/* A tile's 6 row pointers into A and C; rows past mr alias the last real row (never stored). */
static inline void em_gemm_tile_rows(size_t mr, const float *a, size_t a_rs, float *c, size_t ldc,
                                     const float *ap[6], float *cp[6]) {
  ap[0] = a, cp[0] = c;
  for (size_t r = 1; r < 6; r++) {
    ap[r] = r < mr ? ap[r - 1] + a_rs : ap[r - 1];
    cp[r] = r < mr ? cp[r - 1] + ldc : cp[r - 1];
  }
}

/*
 * One column of C over the 6-row tiles t < ntiles of a GEMM with packed A (panel t at a + t *
 * a_next, [kc][6] floats; rows of the last tile past mr_last not stored): element (r, j) exactly
 * as the 6x64 tile computes it (bias_n_j + bias_m[r] or, with `accumulate`, zero; then its FMAs
 * over k in order with x[k] = B[k][j]; then + C with `accumulate`; then p's clamp and hardswish),
 * so the same bits as the tile of this and every ISA. c: C's element (row 0 of tile 0, j), rows
 * ldc apart. For a strip whose last 16-lane vector would hold just that column (N = 49).
 */
typedef void (*em_f32_gemm_col_fn)(size_t ntiles, size_t mr_last, size_t kc, const float *a,
                                   size_t a_next, const float *x, const float *bias_m,
                                   float bias_n_j, int accumulate, const em_minmax_params *p,
                                   float *c, size_t ldc);
void em_f32_gemm_col_ukernel__avx512f(size_t ntiles, size_t mr_last, size_t kc, const float *a,
                                      size_t a_next, const float *x, const float *bias_m,
                                      float bias_n_j, int accumulate, const em_minmax_params *p,
                                      float *c, size_t ldc);

EM_GEMM_UKERNEL_DECL(em_f32_gemm_minmax_ukernel_6x32__avx512f);
EM_GEMM_UKERNEL_DECL(em_f32_gemm_minmax_ukernel_6x48__avx512f);
EM_GEMM_UKERNEL_DECL(em_f32_gemm_minmax_ukernel_6x64__avx512f);
EM_GEMM_UKERNEL_DECL(em_f32_gemm_minmax_ukernel_6x16__avx2);
EM_GEMM_UKERNEL_DECL(em_f32_gemm_minmax_ukernel_6x16__neon); /* AArch64 only */
EM_GEMM_UKERNEL_DECL(em_f32_gemm_minmax_ukernel_6x8__scalar);

/*
 * Depthwise conv2d over one NCHW channel plane: out[OH, OW] = bias +
 * sum_{ky,kx} w[ky*kw+kx] * in[oh*sh + ky*dh - ph, ow*sw + kx*dw - pw]
 * (zero outside the input), then clamped.
 */
typedef struct em_dw_params {
  int64_t h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw;
} em_dw_params;
typedef void (*em_f32_dwconv_fn)(const em_dw_params *q, const float *in, const float *w, float bias,
                                 float *out, const em_minmax_params *p);

/* Elementwise: y[i] = clamp(a[i] op b[i], min, max); the "c" form takes a scalar *b. */
typedef void (*em_f32_vbinary_fn)(size_t n, const float *a, const float *b, float *y,
                                  const em_minmax_params *p);
/* y[i] = act(x[i]) (emc_act; fp[0], fp[1] are the clamp bounds). In place is allowed. */
typedef void (*em_f32_vact_fn)(size_t n, const float *x, float *y, uint32_t act, const float *fp);
/* y = x * s + t, clamped (an unfolded batch norm over one channel plane). */
typedef void (*em_f32_vaffine_fn)(size_t n, const float *x, float s, float t, float *y,
                                  const em_minmax_params *p);
/* A row vector times one zero-padded 16-column B panel (M = 1 GEMMs: classifier heads). */
typedef void (*em_f32_gemv16_fn)(size_t kc, size_t nc, const float *x, const float *b,
                                 const float *bias, float *y, const em_minmax_params *p);
/* One 6-row A panel ([kc][6], rows past mr zero) times a column vector: y[0, mr) =
 * clamp(bias[0, mr) + a^T x) (bias may be NULL). N = 1 convs: squeeze-and-excitation FCs. */
typedef void (*em_f32_gemv6_fn)(size_t kc, size_t mr, const float *a, const float *x,
                                const float *bias, float *y, const em_minmax_params *p);
/* Max pool geometry (undilated): input h x w, output oh x ow, window kh x kw, strides sh x sw,
 * padding ph x pw; the padded row (pw + w) and the windows' span ((ow - 1) * sw + kw) at most
 * EM_POOL_ROW_MAX. */
#define EM_POOL_ROW_MAX 4096
typedef struct em_pool_params {
  int64_t h, w, oh, ow, kh, kw, sh, sw, ph, pw;
} em_pool_params;
/* One plane of a max pool: y[oy][ox] = the max over the window, padding excluded, NaN if any
 * element is (torch.max_pool2d's rule). */
typedef void (*em_f32_maxpool_fn)(const em_pool_params *q, const float *x, float *y);
/* A strided copy (y[i] = x[2 i]: a stride-2 convolution's im2col row). */
typedef void (*em_f32_copy_fn)(size_t n, const float *x, float *y);
/* One softmax row (log_softmax when `log`). */
typedef void (*em_f32_softmax_fn)(size_t n, const float *x, float *y, int log);
/* One softmax row of x * *scale + mask (scale, mask: NULL when absent), the bits of the multiply
 * and the add written out and then em_f32_softmax_fn's row. */
typedef void (*em_f32_softmax_sm_fn)(size_t n, const float *x, const float *scale,
                                     const float *mask, float *y);
void em_f32_softmax_sm_ukernel__avx512f(size_t n, const float *x, const float *scale,
                                        const float *mask, float *y);
/* Layer-norm rows (rms-norm when `rms`): `rows` rows of n floats, x's and y's contiguous (y may
 * be x); w / b may be NULL. */
typedef void (*em_f32_norm_fn)(size_t rows, size_t n, const float *x, const float *w,
                               const float *b, float eps, int rms, float *y);

/* Tiles of a Winograd F(m x m, 3 x 3) conv per block: one 64-column GEMM strip. */
#define EM_WINO_MAX_TILES 64
/* Lanes of a Winograd input transform: a block's tiles and a gap lane between two runs of them. */
#define EM_WINO_MAX_LANES (2 * EM_WINO_MAX_TILES)
/* Winograd input transform of n <= EM_WINO_MAX_LANES lanes side by side (m = 2 or 4): rows holds
 * the m + 2 zero-padded input rows (ldr floats apart, n * m + 2 columns), lane l's window in
 * columns [l * m, l * m + m + 2). keep == NULL: every lane is a tile, and v[xi * vs + l] receives
 * element xi = p * (m + 2) + q of lane l's B^T d B. Otherwise only the lanes whose bit l % 16 of
 * keep[l / 16] is set are tiles, stored in order (the k-th of them at v[xi * vs + k]); the others
 * are gaps, whose windows straddle two runs of tiles (the rows of the image they come from) laid
 * side by side so that one vector holds several short runs. */
typedef void (*em_f32_wino_in_fn)(int m, size_t n, const uint16_t *keep, const float *rows,
                                  size_t ldr, float *v, size_t vs);
/* Winograd output transform: mm[xi * ms + t] (the GEMMs' products) -> rows (m rows, ldr floats
 * apart; tile t in columns [t * m, t * m + m)) = clamp(A^T mm A + bias). */
typedef void (*em_f32_wino_out_fn)(int m, size_t n, const float *mm, size_t ms, float bias,
                                   float *rows, size_t ldr, const em_minmax_params *p);

/* y[c * ldy + r] = x[r * ldx + c] for r < rows, c < cols: a matrix transposed (x and y do not
 * overlap). */
typedef void (*em_f32_transpose_fn)(size_t rows, size_t cols, const float *x, size_t ldx, float *y,
                                    size_t ldy);

/* Declares the elementwise family of one ISA (instantiated by f32_vops__<isa>.c). */
#define EM_VOPS_DECL(isa)                                                                          \
  void em_f32_dwconv2d_minmax_ukernel__##isa(const em_dw_params *q, const float *in,               \
                                             const float *w, float bias, float *out,               \
                                             const em_minmax_params *p);                           \
  void em_f32_vadd_minmax_ukernel__##isa(size_t, const float *, const float *, float *,            \
                                         const em_minmax_params *);                                \
  void em_f32_vsub_minmax_ukernel__##isa(size_t, const float *, const float *, float *,            \
                                         const em_minmax_params *);                                \
  void em_f32_vmul_minmax_ukernel__##isa(size_t, const float *, const float *, float *,            \
                                         const em_minmax_params *);                                \
  void em_f32_vdiv_minmax_ukernel__##isa(size_t, const float *, const float *, float *,            \
                                         const em_minmax_params *);                                \
  void em_f32_vaddc_minmax_ukernel__##isa(size_t, const float *, const float *, float *,           \
                                          const em_minmax_params *);                               \
  void em_f32_vsubc_minmax_ukernel__##isa(size_t, const float *, const float *, float *,           \
                                          const em_minmax_params *);                               \
  void em_f32_vmulc_minmax_ukernel__##isa(size_t, const float *, const float *, float *,           \
                                          const em_minmax_params *);                               \
  void em_f32_vdivc_minmax_ukernel__##isa(size_t, const float *, const float *, float *,           \
                                          const em_minmax_params *);                               \
  void em_f32_vact_ukernel__##isa(size_t n, const float *x, float *y, uint32_t act,                \
                                  const float *fp);                                                \
  void em_f32_vaffine_minmax_ukernel__##isa(size_t n, const float *x, float s, float t, float *y,  \
                                            const em_minmax_params *p);                            \
  void em_f32_softmax_ukernel__##isa(size_t n, const float *x, float *y, int log);                 \
  void em_f32_gemv16_minmax_ukernel__##isa(size_t kc, size_t nc, const float *x, const float *b,   \
                                           const float *bias, float *y,                            \
                                           const em_minmax_params *p);                             \
  void em_f32_gemv6_minmax_ukernel__##isa(size_t kc, size_t mr, const float *a, const float *x,    \
                                          const float *bias, float *y, const em_minmax_params *p); \
  void em_f32_norm_ukernel__##isa(size_t rows, size_t n, const float *x, const float *w,           \
                                  const float *b, float eps, int rms, float *y);                   \
  void em_f32_copy_stride2_ukernel__##isa(size_t n, const float *x, float *y);                     \
  void em_f32_maxpool2d_ukernel__##isa(const em_pool_params *q, const float *x, float *y);         \
  void em_f32_wino_in_ukernel__##isa(int m, size_t n, const uint16_t *keep, const float *rows,     \
                                     size_t ldr, float *v, size_t vs);                             \
  void em_f32_wino_out_ukernel__##isa(int m, size_t n, const float *mm, size_t ms, float bias,     \
                                      float *rows, size_t ldr, const em_minmax_params *p);         \
  void em_f32_transpose_ukernel__##isa(size_t rows, size_t cols, const float *x, size_t ldx,       \
                                       float *y, size_t ldy);

EM_VOPS_DECL(avx512f)
/* y[i] = gelu(x[i]) (erf form), the AVX-512 vact's GELU row (f32_rows__avx512f.c). */
void em_f32_gelu_row__avx512f(size_t n, const float *x, float *y);
/* GELU in place over `rows` rows of n floats, ys apart (the vact row's bits). */
typedef void (*em_f32_gelu_rows_fn)(size_t rows, size_t n, float *y, size_t ys);
void em_f32_gelu_rows__avx512f(size_t rows, size_t n, float *y, size_t ys);

/* EMC_ACT_HARDSWISH_FQ on n floats (y may be x), the AVX-512 vact's row (f32_rows__avx512f.c):
 * the steps of f32_vops_impl.h's vx_hardswish_fq_row in intrinsics, the same values. k: 1 /
 * scale, scale, then the levels' bounds less the zero point: level(min), level(max), qmin. */
void em_f32_hardswish_fq_row__avx512f(size_t n, const float *x, float *y, const float k[5]);
void em_f32_dwconv2d_chw_minmax_ukernel__avx512f(const em_dw_params *q, const float *in,
                                                 const float *w, float bias, float *out,
                                                 const em_minmax_params *p);
/*
 * Direct conv2d for few input channels (network stems), NCHW, groups 1, undilated, column
 * stride q->sw of 1 or 2: output rows [oy0, oy1) of nco <= 16 channels, channel c's plane at
 * out + c * oh * ow, = clamp(bias[c] + sum over ci, ky, kx of wb[((ci * kh + ky) * kw + kx) * 16
 * + c] * in[ci][oy * sh + ky - ph][ox * sw + kx - pw]) (zero outside the input). wb holds 16
 * weights per tap (those of channels >= nco zero); bias may be NULL. kw <= EM_SMALLC_MAX_KW.
 */
#define EM_SMALLC_MAX_KW 8
typedef void (*em_f32_conv_smallc_fn)(const em_dw_params *q, int64_t cin, int64_t oy0, int64_t oy1,
                                      const float *in, const float *wb, const float *bias,
                                      int64_t nco, float *out, const em_minmax_params *p);
void em_f32_conv2d_smallc_minmax_ukernel__avx512f(const em_dw_params *q, int64_t cin, int64_t oy0,
                                                  int64_t oy1, const float *in, const float *wb,
                                                  const float *bias, int64_t nco, float *out,
                                                  const em_minmax_params *p);
/*
 * Depthwise conv2d of nc <= 16 NCHW channel planes at once (in + c * is, weights w + c * kh * kw,
 * bias[c] or 0 when bias is NULL, out + c * os): each plane as em_f32_dwconv_fn computes it,
 * the same bits. Only for geometries em_f32_dwconv2d_c16_fits accepts: 3x3 or 5x5 taps, stride
 * 1 or 2, undilated, padding below the kernel, at least 4 output columns and at most
 * EM_DW_C16_OUT_MAX output pixels, the padded plane within the kernel's stack buffer.
 */
#define EM_DW_C16_OUT_MAX 64
#define EM_DW_C16_IN_MAX  512 /* padded input pixels: rows x columns the buffer holds */
typedef void (*em_f32_dwconv_c16_fn)(const em_dw_params *q, size_t nc, const float *in, size_t is,
                                     const float *w, const float *bias, float *out, size_t os,
                                     const em_minmax_params *p);
/* Whether an em_f32_dwconv_c16_fn takes geometry q. */
static inline int em_dw_c16_fits(const em_dw_params *q) {
  if (!(q->kh == 3 || q->kh == 5) || q->kw != q->kh || !(q->sh == 1 || q->sh == 2) ||
      q->sw != q->sh || q->dh != 1 || q->dw != 1 || q->ph < 0 || q->pw < 0 || q->ph >= q->kh ||
      q->pw >= q->kw || q->ow < 4 || q->oh < 1 || q->oh * q->ow > EM_DW_C16_OUT_MAX || q->h < 1 ||
      q->w < 1)
    return 0;
  const int64_t th = (q->oh - 1) * q->sh + q->kh, tw = (q->ow - 1) * q->sw + q->kw;
  const int64_t rows = th > q->ph + q->h ? th : q->ph + q->h;
  const int64_t cols = tw > q->pw + q->w ? tw : q->pw + q->w;
  return rows * cols <= EM_DW_C16_IN_MAX;
}
void em_f32_dwconv2d_c16_minmax_ukernel__avx512f(const em_dw_params *q, size_t nc, const float *in,
                                                 size_t is, const float *w, const float *bias,
                                                 float *out, size_t os, const em_minmax_params *p);
EM_VOPS_DECL(avx2)
EM_VOPS_DECL(neon) /* AArch64 only */
EM_VOPS_DECL(scalar)

/*
 * The int8 GEMM tile of the int8 convs (EMC_CONV_Q8; q8_gemm_impl.h has the contract): up to 6
 * rows by 16 columns, exact int32 sums of int8 weights (a, [kq][6][4]) times u8 inputs (b,
 * [kq][16][4]), then c[r][j] = (acc - corr[r]) * scale[r] + bias[r] (bias may be NULL).
 */
typedef void (*em_q8_gemm_fn)(size_t mr, size_t nr, size_t kq, const int8_t *a, const uint8_t *b,
                              const int32_t *corr, const float *scale, const float *bias, float *c,
                              size_t ldc);
void em_q8_gemm_6x16_ukernel__scalar(size_t mr, size_t nr, size_t kq, const int8_t *a,
                                     const uint8_t *b, const int32_t *corr, const float *scale,
                                     const float *bias, float *c, size_t ldc);
void em_q8_gemm_6x16_ukernel__avx2(size_t mr, size_t nr, size_t kq, const int8_t *a,
                                   const uint8_t *b, const int32_t *corr, const float *scale,
                                   const float *bias, float *c, size_t ldc);
void em_q8_gemm_6x16_ukernel__avx512vnni(size_t mr, size_t nr, size_t kq, const int8_t *a,
                                         const uint8_t *b, const int32_t *corr, const float *scale,
                                         const float *bias, float *c, size_t ldc);
/* Up to 6 rows by 32 columns: two consecutive column panels, b and b + kq * 64 (the second is
 * read only when nr > 16); otherwise as the 6x16 tiles, with the same results. */
void em_q8_gemm_6x32_ukernel__avx512vnni(size_t mr, size_t nr, size_t kq, const int8_t *a,
                                         const uint8_t *b, const int32_t *corr, const float *scale,
                                         const float *bias, float *c, size_t ldc);
/* The best int8 tile for configuration isa (its name) on this CPU. */
em_q8_gemm_fn em_q8_gemm_for(const char *isa);
/* The columns of em_q8_gemm_for(isa)'s tile: 16 or 32 (two column panels per call). */
size_t em_q8_gemm_nr_for(const char *isa);

/* The int8 convs' input quantizer, planes to channels last: for ch < c and i < n,
 * y[i * ys + ch] = clamp(nearbyint(v * inv) + zp, lo, hi) as u8 with v = x[ch * xs + i] clamped
 * to [xlo, xhi] first (x: c planes of stride xs floats; y: n pixels of ys bytes), rounded step
 * for step as EMC_ACT_FAKEQUANT (NaN: lo); lo <= hi within [0, 255]; xlo, xhi may be infinite.
 * Every ISA's kernel gives the same bytes. */
typedef struct em_q8_quant_params {
  float inv, zp, lo, hi, xlo, xhi;
} em_q8_quant_params;
typedef void (*em_q8_quant_fn)(size_t c, size_t n, const float *x, size_t xs, uint8_t *y, size_t ys,
                               const em_q8_quant_params *p);

/* The u8 value of x under p, step for step as EMC_ACT_FAKEQUANT: the reference every ISA's
 * quantizer and int8 epilogue reproduces. */
static inline uint8_t em_q8_quant1(float x, const em_q8_quant_params *p) {
  const float zp = p->zp, lo = p->lo, hi = p->hi;
  const float tlo = lo - zp - 1.0f, thi = hi - zp + 1.0f, magic = 12582912.0f;
  x = x < p->xlo ? p->xlo : x; /* as EMC_ACT_FAKEQUANT's clamp: NaN stays NaN */
  x = x > p->xhi ? p->xhi : x;
  float t = x * p->inv;
  t = t >= tlo ? t : tlo; /* keeps |t| small for the rounding trick */
  t = t <= thi ? t : thi;
  float r = ((t + magic) - magic) + zp;
  r = r >= lo ? r : lo; /* NaN: lo */
  r = r <= hi ? r : hi;
  return (uint8_t)(int32_t)r;
}

/*
 * The bounds of the SIMD epilogues' short form of em_q8_quant1: with u = x * inv (one rounding,
 * as there), em_q8_quant1(x) == max(rne(clamp(u, *flo, *fhi)) + zp, lo) for every x, where
 * *flo = em_q8_quant1(xlo) - zp and *fhi = em_q8_quant1(xhi) - zp, clamp(u, a, b) =
 * min(b, max(a, u)) keeping NaN, and rne of NaN is INT32_MIN (vcvtps2dq). Why: every step after
 * the activation's clamp is non-decreasing in x, so clamping x to [xlo, xhi] first is clamping
 * the result to [q(xlo), q(xhi)]; those are integers, so the clamp moves before the rounding;
 * with it the value is in [lo, hi] already, and NaN, which the reference sends to lo, reaches
 * the last max as INT32_MIN + zp. Two clamps and the rounding trick become one clamp and one
 * conversion: 4 vector operations fewer per 16 outputs. Where *flo + zp == lo (no clamp above the
 * range's bottom: xlo infinite, or mapped to lo), the lower clamp can go too: rne is
 * non-decreasing and *flo an integer, so a value under it converts to at most *flo (or to
 * INT32_MIN past the int32 range), and the last max takes it to lo.
 */
static inline void em_q8_quant_bounds(const em_q8_quant_params *p, float *flo, float *fhi) {
  *flo = (float)em_q8_quant1(p->xlo, p) - p->zp;
  *fhi = (float)em_q8_quant1(p->xhi, p) - p->zp;
}
void em_q8_quant_ukernel__scalar(size_t c, size_t n, const float *x, size_t xs, uint8_t *y,
                                 size_t ys, const em_q8_quant_params *p);
void em_q8_quant_ukernel__avx2(size_t c, size_t n, const float *x, size_t xs, uint8_t *y, size_t ys,
                               const em_q8_quant_params *p);
void em_q8_quant_ukernel__avx512vnni(size_t c, size_t n, const float *x, size_t xs, uint8_t *y,
                                     size_t ys, const em_q8_quant_params *p);
/* The input quantizer that goes with em_q8_gemm_for(isa). */
em_q8_quant_fn em_q8_quant_for(const char *isa);

/* em_q8_quant_fn of planes scaled first (a squeeze-and-excitation product): each value is
 * v = x[ch * xs + i] * s[ch] clamped to [mm->min, mm->max] (NaN stays), the steps of
 * em_f32_vmulc_minmax (mm->hswish must be 0), then quantized by p as em_q8_quant_fn: the same
 * bytes as that multiply into a buffer followed by the ISA's quantizer. */
typedef void (*em_q8_quant_scaled_fn)(size_t c, size_t n, const float *x, size_t xs, const float *s,
                                      const em_minmax_params *mm, uint8_t *y, size_t ys,
                                      const em_q8_quant_params *p);
void em_q8_quant_scaled_ukernel__avx512vnni(size_t c, size_t n, const float *x, size_t xs,
                                            const float *s, const em_minmax_params *mm, uint8_t *y,
                                            size_t ys, const em_q8_quant_params *p);
/* The scaled quantizer that goes with em_q8_gemm_for(isa), or NULL where there is none (the
 * caller then multiplies into a buffer and quantizes that). */
em_q8_quant_scaled_fn em_q8_quant_scaled_for(const char *isa);

/* One tap of an int8 im2col column panel: dst[q][j][0..3] = src[j][off + 4 q .. off + 4 q + 3]
 * for the panel's 16 pixels j (each src[j] a pixel of the channels-last u8 image) and q < cq
 * groups of 4 channels: dst is [cq][16][4]. */
typedef void (*em_q8_pack_fn)(const uint8_t *const *src, size_t off, size_t cq, uint8_t *dst);
void em_q8_pack16_ukernel__scalar(const uint8_t *const *src, size_t off, size_t cq, uint8_t *dst);
void em_q8_pack16_ukernel__avx2(const uint8_t *const *src, size_t off, size_t cq, uint8_t *dst);
void em_q8_pack16_ukernel__avx512vnni(const uint8_t *const *src, size_t off, size_t cq,
                                      uint8_t *dst);
/* The panel packer that goes with em_q8_gemm_for(isa). */
em_q8_pack_fn em_q8_pack_for(const char *isa);

/*
 * The pixel-major tile of an int8 conv (a u8 channels-last output, or f32 planes): for pixel
 * i < np (any count: the kernel runs them 8 at a time, its epilogue's constants loaded once)
 * and channel c < nc (<= 32), acc = exact int32 sum over q < kq, j < 4 of
 * x[i][qoff[q] + j] (u8: x[i] is the pixel's window origin in the channels-last image, qoff[q]
 * the byte offset of depth group q, a tap's 4 channels) * w[(c / 16) * kq * 64 + q * 64 +
 * (c % 16) * 4 + j] (int8: blocks of 16 channels, [kq][16][4] each), y = (acc - corr[c]) *
 * scale[c] + bias[c] (bias may be NULL; a multiply and an add, two roundings), and
 * y[i][yc + c] = y quantized by p (as em_q8_quant_fn; y[i]: pixel i's output bytes, anywhere:
 * rows of a padded layout too); or, with yf, yf[c * yfs + i] = y (f32 planes; y and p unused). The
 * same values as the panel path (em_q8_gemm_fn, then the quantizer).
 */
typedef void (*em_q8_pw_fn)(size_t np, size_t nc, size_t kq, const uint8_t *const *x,
                            const int32_t *qoff, const int8_t *w, const int32_t *corr,
                            const float *scale, const float *bias, uint8_t *const *y, size_t yc,
                            const em_q8_quant_params *p, float *yf, size_t yfs);
/* em_q8_pw_fn with AVX-512 VNNI for cores that run 512-bit operations as two halves (Zen 4):
 * a u8 output over more than 9 depth groups and 17-32 channels streams 4 pixels at a time. */
void em_q8_pw_ukernel__avx512vnni(size_t np, size_t nc, size_t kq, const uint8_t *const *x,
                                  const int32_t *qoff, const int8_t *w, const int32_t *corr,
                                  const float *scale, const float *bias, uint8_t *const *y,
                                  size_t yc, const em_q8_quant_params *p, float *yf, size_t yfs);
/* The same for cores with full 512-bit datapaths (Intel, Zen 5): those outputs in 8-pixel tiles
 * (16 chains of products); the same bytes. */
void em_q8_pw8_ukernel__avx512vnni(size_t np, size_t nc, size_t kq, const uint8_t *const *x,
                                   const int32_t *qoff, const int8_t *w, const int32_t *corr,
                                   const float *scale, const float *bias, uint8_t *const *y,
                                   size_t yc, const em_q8_quant_params *p, float *yf, size_t yfs);
/* The pixel-major tile that goes with em_q8_gemm_for(isa) on this CPU (by its datapath width,
 * em_cpu_features.avx512_split), or NULL where there is none (the panel path runs every int8
 * conv). */
em_q8_pw_fn em_q8_pw_for(const char *isa);

/*
 * One output row of an int8 depthwise conv (EMC_CONV_Q8 depthwise) over its u8 input values
 * channels last: for output pixel o < ow and channel c < ch, acc = sum over taps
 * t = (ky, kx) of in[o * step + ky * dy + kx * dx + c] * w[t * cw + c] (each product and the sum
 * exact in f32: the inputs are u8 values, the weights int8 ones and kh * kw <= 256),
 * y = (acc - corr[c]) * scale[c] + bias[c] (one rounding each, no fused multiply-add),
 * out[o * cpo + c] = y quantized by oq (as em_q8_quant_fn). Every ISA's kernel gives the same
 * bytes.
 */
typedef struct em_q8_dw_params {
  size_t ow, ch, cpo;  /* output pixels, channels, bytes between output pixels */
  size_t kh, kw, cw;   /* taps; cw = channels rounded up to 16 (the tables' stride) */
  size_t step, dy, dx; /* floats between windows, tap rows and tap columns in the input */
  const float *w;      /* [kh * kw][cw] */
  const float *corr, *scale, *bias; /* [cw] each */
  em_q8_quant_params oq;
  const int8_t *wd; /* em_q8_dwdot_pack's tables (the dot-product row's), else NULL */
  size_t ystep;     /* input bytes between two output rows' windows (em_q8_dwdotv_ukernel) */
} em_q8_dw_params;
typedef void (*em_q8_dw_fn)(const uint8_t *in, uint8_t *out, const em_q8_dw_params *p);
void em_q8_dwconv_ukernel__scalar(const uint8_t *in, uint8_t *out, const em_q8_dw_params *p);
void em_q8_dwconv_ukernel__avx2(const uint8_t *in, uint8_t *out, const em_q8_dw_params *p);
void em_q8_dwconv_ukernel__avx512vnni(const uint8_t *in, uint8_t *out, const em_q8_dw_params *p);
/* The depthwise row kernel that goes with em_q8_gemm_for(isa). */
em_q8_dw_fn em_q8_dw_for(const char *isa);
/* Two output rows of a 3x3 or 5x5 depthwise conv of stride 1 and dilation 1 (p->step == p->dx,
 * p->kh == p->kw == 3, or 5 with p->ow >= 4): the row of em_q8_dw_fn at (in, out) and the next
 * one at (in + p->dy, out + orow), each input row's columns widened once for both; the same
 * bytes. */
typedef void (*em_q8_dw2_fn)(const uint8_t *in, uint8_t *out, size_t orow,
                             const em_q8_dw_params *p);
void em_q8_dwconv2_ukernel__avx512vnni(const uint8_t *in, uint8_t *out, size_t orow,
                                       const em_q8_dw_params *p);
/* The two-row kernel that goes with em_q8_dw_for(isa), or NULL (rows one at a time). */
em_q8_dw2_fn em_q8_dw2_for(const char *isa);

/*
 * The depthwise row on VNNI dot products (q8_dwdot__avx512vnni.c): K x K windows, K 3 or 5, of
 * stride S 1 or 2 (p->step == S * p->dx; any dilation), each tap row's 4 neighbouring input
 * columns of a channel one vpdpbusd lane, with p->wd from em_q8_dwdot_pack; 64 channels at a
 * time, a last block of EM_Q8_DWDOT_TAIL channels or fewer (and rows of fewer outputs than a
 * group) through em_q8_dwconv_ukernel__avx512vnni. The same bytes as em_q8_dw_fn.
 */
enum { EM_Q8_DWDOT_TAIL = 16 };
void em_q8_dwdot_ukernel__avx512vnni(const uint8_t *in, uint8_t *out, const em_q8_dw_params *p);
/* Two output rows of it (em_q8_dw2_fn: windows of stride 1, 3x3 or 5x5 of 4 outputs or more). */
void em_q8_dwdot2_ukernel__avx512vnni(const uint8_t *in, uint8_t *out, size_t orow,
                                      const em_q8_dw_params *p);
/* Two output rows (rows: 1 or 2, orow bytes apart in the output and p->ystep in the input) of a
 * conv of 17-32 channels at once, each row's channels in 32 of the dot-product row's 64 lanes;
 * p->wd from em_q8_dwdot_pack for that ch. Another form (fewer channels too) runs row by row. */
void em_q8_dwdotv_ukernel__avx512vnni(const uint8_t *in, uint8_t *out, size_t orow, size_t rows,
                                      const em_q8_dw_params *p);
typedef void (*em_q8_dwv_fn)(const uint8_t *in, uint8_t *out, size_t orow, size_t rows,
                             const em_q8_dw_params *p);
em_q8_dwv_fn em_q8_dwdotv_for(const char *isa);
/* The dot-product row and its two-row form for `isa` (the VNNI ISA's), or NULL. */
em_q8_dw_fn em_q8_dwdot_for(const char *isa);
em_q8_dw2_fn em_q8_dwdot2_for(const char *isa);
/* Outputs per group of the dot-product row for K x K windows of stride S (0: not taken) and, in
 * *packs, the 4-column packs a group reads per tap row. */
size_t em_q8_dwdot_group(size_t k, size_t s, size_t *packs);
/* Bytes of em_q8_dwdot_pack's tables per 64-channel block. */
size_t em_q8_dwdot_block_bytes(size_t k, size_t s);
/* The dot-product row's tables for ch channels (w [k * k][cw], scale / corr / bias [cw], bias
 * may be NULL) into dst (blocks of em_q8_dwdot_block_bytes: one per 64 channels; for ch <= 32
 * one, whose lanes repeat the channels every 32, for em_q8_dwdotv_ukernel's rows side by side);
 * false, nothing usable, when the window is not taken or a weight or correction is not an integer
 * of the int32 sums' range. */
bool em_q8_dwdot_pack(size_t k, size_t s, size_t ch, size_t cw, const float *w, const float *scale,
                      const float *corr, const float *bias, int8_t *dst);

/* An int8 add's n u8 values (EMC_BINARY_Q8): y[i] = em_q8_quant1(ta + tb, &oq), ta = (a[i] - za)
 * * sa and tb = (b[i] - zb) * sb each rounded once (the f32 fake-quant values the u8 values
 * stand for), never contracted into an FMA. */
typedef struct em_q8_add_params {
  float sa, za, sb, zb;
  em_q8_quant_params oq;
} em_q8_add_params;
typedef void (*em_q8_add_fn)(size_t n, const uint8_t *a, const uint8_t *b, uint8_t *y,
                             const em_q8_add_params *p);
void em_q8_add_ukernel__scalar(size_t n, const uint8_t *a, const uint8_t *b, uint8_t *y,
                               const em_q8_add_params *p);
void em_q8_add_ukernel__avx2(size_t n, const uint8_t *a, const uint8_t *b, uint8_t *y,
                             const em_q8_add_params *p);
void em_q8_add_ukernel__avx512vnni(size_t n, const uint8_t *a, const uint8_t *b, uint8_t *y,
                                   const em_q8_add_params *p);
/* The add row that goes with em_q8_gemm_for(isa). */
em_q8_add_fn em_q8_add_for(const char *isa);

/* A table lookup's n u8 values (EMC_UNARY_Q8 1): y[i] = t[x[i]], t 256 bytes (y may be x). */
typedef void (*em_q8_lut_fn)(size_t n, const uint8_t *x, uint8_t *y, const uint8_t *t);
void em_q8_lut_ukernel__scalar(size_t n, const uint8_t *x, uint8_t *y, const uint8_t *t);
void em_q8_lut_ukernel__avx512vbmi(size_t n, const uint8_t *x, uint8_t *y, const uint8_t *t);
/* The lookup row for `isa`: AVX-512 VBMI's where the ISA is an AVX-512 one and the CPU has it
 * (under the cap), else the scalar loop. */
em_q8_lut_fn em_q8_lut_for(const char *isa);
/* A table lookup into f32 planes (EMC_UNARY_Q8 2): for pixels i < n and channels ch < c,
 * y[ch * ys + i] = ((float)t[x[i * xs + ch]] - zp) * s (the subtraction exact, one rounding). */
typedef void (*em_q8_lutf_fn)(size_t c, size_t n, const uint8_t *x, size_t xs, float *y, size_t ys,
                              const uint8_t *t, float zp, float s);
void em_q8_lutf_ukernel__scalar(size_t c, size_t n, const uint8_t *x, size_t xs, float *y,
                                size_t ys, const uint8_t *t, float zp, float s);
void em_q8_lutf_ukernel__avx512vbmi(size_t c, size_t n, const uint8_t *x, size_t xs, float *y,
                                    size_t ys, const uint8_t *t, float zp, float s);
/* The planes' lookup for `isa` (chosen as em_q8_lut_for's). */
em_q8_lutf_fn em_q8_lutf_for(const char *isa);

/*
 * A lookup into f32 planes that are never written (cpu_op_qlut.c, emc_q8_lk_plan), read by a
 * squeeze-and-excitation block's two readers straight from the u8 levels, channels last. The
 * value of pixel i < n, channel ch < c is v = ((float)t[x[i * xs + ch]] - zp) * ls, as
 * em_q8_lutf_fn computes it.
 *
 * em_q8_lutq_fn: v times g[ch], clamped to [mm->min, mm->max] (NaN stays) as
 * em_f32_vmulc_minmax does it, quantized by p (em_q8_quant1's bytes) into y[i * ys + ch]: the
 * bytes of the lookup into planes followed by em_q8_quant_scaled_fn.
 * em_q8_lutm_fn: mean[ch] over the pixels, summed as plane_mean (cpu_ops.h) sums a plane: four
 * partial sums over the groups of 4 pixels in order, the last n % 4 pixels into the first, then
 * ((s0 + s1) + (s2 + s3)) / n.
 */
typedef void (*em_q8_lutq_fn)(size_t c, size_t n, const uint8_t *x, size_t xs, const uint8_t *t,
                              float zp, float ls, const float *g, const em_minmax_params *mm,
                              uint8_t *y, size_t ys, const em_q8_quant_params *p);
typedef void (*em_q8_lutm_fn)(size_t c, size_t n, const uint8_t *x, size_t xs, const uint8_t *t,
                              float zp, float ls, float *mean);
void em_q8_lutq_ukernel__scalar(size_t c, size_t n, const uint8_t *x, size_t xs, const uint8_t *t,
                                float zp, float ls, const float *g, const em_minmax_params *mm,
                                uint8_t *y, size_t ys, const em_q8_quant_params *p);
void em_q8_lutq_ukernel__avx512vbmi(size_t c, size_t n, const uint8_t *x, size_t xs,
                                    const uint8_t *t, float zp, float ls, const float *g,
                                    const em_minmax_params *mm, uint8_t *y, size_t ys,
                                    const em_q8_quant_params *p);
void em_q8_lutm_ukernel__scalar(size_t c, size_t n, const uint8_t *x, size_t xs, const uint8_t *t,
                                float zp, float ls, float *mean);
void em_q8_lutm_ukernel__avx512vbmi(size_t c, size_t n, const uint8_t *x, size_t xs,
                                    const uint8_t *t, float zp, float ls, float *mean);
/* The two for `isa` (chosen as em_q8_lut_for's). */
em_q8_lutq_fn em_q8_lutq_for(const char *isa);
em_q8_lutm_fn em_q8_lutm_for(const char *isa);

/*
 * The qparams of one row of a dynamic int8 linear's input (EMC_OP_DQ_LINEAR, EMC_OP_TOKEN_FQ) from
 * its finite minimum and maximum, as quantized_decomposed's choose_qparams_per_token_asymmetric
 * computes them for an f32 input (each step rounded to f32, then kept as an f64 scale and a zero
 * point clamped to [-128, 127]; *zp is NaN only when mn or mx is not finite).
 */
static inline void em_q8_token_qparams(double mn, double mx, double *scale, double *zp) {
  const double qmin = -128, qmax = 127, eps = 1.1920928955078125e-07; /* finfo(f32).eps */
  const double mneg = mn < 0 ? mn : 0, mpos = mx > 0 ? mx : 0;
  double s = (float)((double)(float)(mpos - mneg) / (qmax - qmin));
  s = (float)(s < eps ? eps : s);
  const double dmin = (float)(mneg / s), dmax = (float)(mpos / s);
  const double emin = (float)(qmin + dmin), emax = (float)(qmax + dmax);
  double z = (double)(float)(emin + emax) > 0 ? (double)(float)(qmin - dmin)
                                              : (double)(float)(qmax - dmax);
  *scale = s, *zp = z < qmin ? qmin : z > qmax ? qmax : z;
}

/*
 * Rows i < rows of a dynamic int8 linear's input (EMC_OP_DQ_LINEAR), row i the k floats at
 * x + i k: with em_q8_token_qparams of its values' minimum and maximum, q = clamp(nearbyint(x *
 * (1 / scale) + zp), -128, 127) in f64 (the int8 values of quantize_per_token), stored as q + 128
 * at a + i as [0, k) and zp + 128 at [k, kp) (kp: k rounded up to 4); za[i] = zp + 128, s[i] =
 * (float)scale. A row holding an infinity or a NaN gets s[i] = NaN, za[i] = 0 and zero bytes:
 * all its outputs are NaN. Every ISA's kernel gives the same.
 */
typedef void (*em_q8_rowq_fn)(size_t rows, size_t k, const float *x, uint8_t *a, size_t as,
                              int32_t *za, float *s);
void em_q8_rowq_ukernel__scalar(size_t rows, size_t k, const float *x, uint8_t *a, size_t as,
                                int32_t *za, float *s);
void em_q8_rowq_ukernel__avx2(size_t rows, size_t k, const float *x, uint8_t *a, size_t as,
                              int32_t *za, float *s);
void em_q8_rowq_ukernel__avx512vnni(size_t rows, size_t k, const float *x, uint8_t *a, size_t as,
                                    int32_t *za, float *s);

/*
 * The dynamic int8 linear's tile: rows i < np (<= 8) of a (u8 rows as em_q8_rowq_fn writes them,
 * `as` bytes apart) by channels c < nc (<= 32) of w (int8, blocks of 16 channels of [kq][16][4]
 * bytes, the second block kq * 64 bytes after the first): acc = the exact int32 sum over kq * 4
 * depths of a[i][k] * w[c][k], then y[i * ys + c * cs] = (float)(acc - za[i] * wsum[c]) * (s[i] *
 * ws[c]) (+ bias[c] when bias is not NULL) (+ res[i * ys + c] when res is not NULL: a residual,
 * row-major only), each operation rounded once; cs is 1 (rows ys apart) or ys is 1 (channels cs
 * apart: a transposed output). wsum[c] is the sum of channel c's weights,
 * so the first factor is the exact sum of (q - zp) * w. Every ISA's kernel gives the same bits.
 */
typedef void (*em_q8_dq_fn)(size_t np, size_t nc, size_t kq, const uint8_t *a, size_t as,
                            const int8_t *w, const int32_t *wsum, const float *ws,
                            const float *bias, const float *res, const int32_t *za, const float *s,
                            float *y, size_t ys, size_t cs);
void em_q8_dq_ukernel__scalar(size_t np, size_t nc, size_t kq, const uint8_t *a, size_t as,
                              const int8_t *w, const int32_t *wsum, const float *ws,
                              const float *bias, const float *res, const int32_t *za,
                              const float *s, float *y, size_t ys, size_t cs);
void em_q8_dq_ukernel__avx2(size_t np, size_t nc, size_t kq, const uint8_t *a, size_t as,
                            const int8_t *w, const int32_t *wsum, const float *ws,
                            const float *bias, const float *res, const int32_t *za, const float *s,
                            float *y, size_t ys, size_t cs);
void em_q8_dq_ukernel__avx512vnni(size_t np, size_t nc, size_t kq, const uint8_t *a, size_t as,
                                  const int8_t *w, const int32_t *wsum, const float *ws,
                                  const float *bias, const float *res, const int32_t *za,
                                  const float *s, float *y, size_t ys, size_t cs);
/*
 * A dynamic int8 linear's rows under one set of qparams (EMC_DQL_ROWQ per tensor or static): with
 * a NULL, *mn and *mx get the minimum and maximum of x[0, k) (both NaN when one is NaN;
 * infinities count); otherwise q = clamp(nearbyint(x * p->inv) + p->zp, p->qmin, p->qmax), each
 * step in f32 and a NaN giving qmin (quantize_per_tensor's steps for an f32 input), is stored as q
 * + 128 at a[0, k) and p->zp + 128 at a[k, kp). Every ISA's kernel gives the same.
 */
typedef struct em_q8_rowt_params {
  float inv, zp, qmin, qmax; /* 1 / scale (f32), zero point, range within [-128, 127] */
} em_q8_rowt_params;
typedef void (*em_q8_rowt_fn)(size_t k, const float *x, uint8_t *a, const em_q8_rowt_params *p,
                              float *mn, float *mx);
void em_q8_rowt_ukernel__scalar(size_t k, const float *x, uint8_t *a, const em_q8_rowt_params *p,
                                float *mn, float *mx);
void em_q8_rowt_ukernel__avx2(size_t k, const float *x, uint8_t *a, const em_q8_rowt_params *p,
                              float *mn, float *mx);
void em_q8_rowt_ukernel__avx512vnni(size_t k, const float *x, uint8_t *a,
                                    const em_q8_rowt_params *p, float *mn, float *mx);

/*
 * The per-tensor qparams of quantized_decomposed's choose_qparams.tensor for an f32 input whose
 * minimum and maximum are mn and mx (NaN when the input holds one), as the portable kernel
 * computes them (kernels/portable/quant_affine.c: each step rounded to f32, eps rounded to f32,
 * the zero point qmin - round(min(mn, 0) / scale) clamped to [qmin, qmax]).
 */
static inline void em_q8_tensor_qparams(double mn, double mx, double qmin, double qmax, double eps,
                                        double *scale, double *zp) {
  const double mneg = mn < 0 ? mn : 0, mpos = mx > 0 ? mx : 0, e = (float)eps;
  double s = (float)((double)(float)(mpos - mneg) / (qmax - qmin));
  s = (float)(s > e ? s : e);
  const double r = nearbyint((double)(float)(mneg / s));
  /* -inf / inf is NaN: the portable kernel's int32 wrap of qmin + INT32_MIN, then the clamp */
  const double z =
      r == r ? qmin - r : (double)(int32_t)(uint32_t)((uint64_t)(int64_t)qmin + 2147483648u);
  *scale = s, *zp = z < qmin ? qmin : z > qmax ? qmax : z;
}

/* The dynamic int8 linear's tile and row quantizers for configuration isa on this CPU. */
em_q8_dq_fn em_q8_dq_for(const char *isa);
em_q8_rowq_fn em_q8_rowq_for(const char *isa);
em_q8_rowt_fn em_q8_rowt_for(const char *isa);

/* The kernels of one ISA. */
typedef struct em_cpu_config {
  const char *isa;
  size_t nr; /* GEMM tile columns (rows are always EMC_MR) */
  int amx;   /* big GEMMs take the AMX bf16x3 path (f32_gemm_32x32__amx.c) */
  em_f32_gemm_ukernel_fn gemm;
  int hswish; /* gemm, dwconv, dwconv_c16 and conv_smallc apply em_minmax_params.hswish */
  em_f32_dwconv_fn dwconv;
  em_f32_vbinary_fn vbin[4];  /* add, sub, mul, div with a vector */
  em_f32_vbinary_fn vbinc[4]; /* ... with a scalar *b */
  em_f32_vact_fn vact;
  em_f32_vaffine_fn vaffine;
  em_f32_softmax_fn softmax;
  em_f32_norm_fn norm;
  em_f32_gemv16_fn gemv16;
  em_f32_gemv6_fn gemv6;
  em_f32_copy_fn copy_stride2; /* y[i] = x[2 i] */
  em_f32_maxpool_fn maxpool;
  em_f32_wino_in_fn wino_in;
  em_f32_wino_out_fn wino_out;
  em_f32_conv_smallc_fn conv_smallc; /* NULL: stems go through im2col and the GEMM */
  em_f32_dwconv_c16_fn dwconv_c16;   /* NULL: depthwise convs go plane by plane (dwconv) */
  em_f32_transpose_fn transpose;
  em_f32_softmax_sm_fn softmax_sm; /* NULL: a scaled / masked softmax multiplies and adds first */
  em_f32_gemm_col_fn gemm_col;     /* NULL: every column of a GEMM on the tile */
  em_f32_gelu_rows_fn gelu_rows;   /* NULL: GELU rows one at a time through vact */
} em_cpu_config;

/* The best configuration this CPU runs under the library's ISA cap (include/ember/cpu.h). */
const em_cpu_config *em_cpu_config_get(void);

/* Caps the ISA of every later choice, this backend's and the other kernel families' alike, at
 * `isa` (em_cpu_set_isa_cap; NULL or "": no cap). EM_ERR_NOT_SUPPORTED (nothing changed) for an
 * ISA that is unknown or that this CPU lacks. */
em_status em_cpu_config_force(const char *isa);
/* The configuration for a named ISA ("amx": AVX-512 with the AMX bf16x3 GEMM path, "avx512f",
 * "avx2" on x86; "neon" on AArch64; "scalar" anywhere), or NULL when this build or CPU does not
 * support it (or, for "amx", the OS does not let the process use the tiles). */
const em_cpu_config *em_cpu_config_for(const char *isa);

#endif /* EMBER_BACKENDS_CPU_UKERNELS_H */
