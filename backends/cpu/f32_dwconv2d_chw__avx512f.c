/*
 * f32_dwconv2d_chw__avx512f.c — em_f32_dwconv2d_chw_minmax_ukernel__avx512f:
 * depthwise conv2d over one NCHW channel plane with AVX-512.
 *
 * Three paths, by shape:
 *  - dw_flat: 3x3 and 5x5 stride-1 "same" convs over planes of at most 128
 *    pixels (7x7) work on the flat plane, 16 pixels a vector.
 *  - dw_direct: other 3x3 and 5x5 convs of stride 1 or 2 (any padding below
 *    the kernel, undilated) read the plane in place, one 16-wide column of
 *    outputs at a time in blocks of 8 (3x3 stride 1) or 4 output rows: each
 *    input row the block's windows cover is loaded once as its K tap vectors
 *    (masked loads: the masks stand in for the zero padding; stride 2 splits
 *    32 loaded columns into even and odd ones by permutes) and feeds every
 *    output row that reads it. 1.5-1.8x faster on L2-resident 3x3 planes than
 *    loading each output row's 9 taps, 2-2.6x faster than the padded copy.
 *  - otherwise (dilation, 7x7, stride 3...) the plane is copied into a
 *    zero-padded buffer on the stack (for stride 2, split into even and odd
 *    columns) and blocked the same way; planes too big for the buffer and
 *    strides above 2 go to the generic kernel.
 */
#include <immintrin.h>
#include <string.h>

#include "cpu_ukernels.h"
#include "f32_hswish__avx512f.h"

#define PAD_FLOATS 24576 /* 96 KiB of stack */

/* Lanes of the 16-wide output vector at column ox that lie inside a row of ow. */
static inline __mmask16 ox_mask(int64_t ow, int64_t ox) {
  if (ox >= ow) return 0;
  return ow - ox >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (ow - ox)) - 1u);
}

/*
 * dst[0, cols) = the row src[0, w) shifted right by pw, zeros around it: one masked load and
 * store per 16 columns (small planes, 7x7 or 14x14, would spend more in memset / memcpy calls
 * than in the convolution). Lanes outside [0, w) of src are masked off, never read.
 */
static inline __attribute__((target("avx512f"))) void pad_row(float *dst, const float *src,
                                                              int64_t pw, int64_t w, int64_t cols) {
  for (int64_t i = 0; i < cols; i += 16) {
    const int64_t lo = pw - i < 0 ? 0 : pw - i > 16 ? 16 : pw - i;
    const int64_t hi = pw + w - i < 0 ? 0 : pw + w - i > 16 ? 16 : pw + w - i;
    const uint32_t valid = hi > lo ? ((1u << hi) - 1u) & ~((1u << lo) - 1u) : 0u;
    const __mmask16 st = cols - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (cols - i)) - 1u);
    /* src + i - pw may point before src: only lanes of `valid` (inside the row) are loaded. */
    const __m512 v = _mm512_maskz_loadu_ps((__mmask16)valid, (const char *)src + (i - pw) * 4);
    _mm512_mask_storeu_ps(dst + i, st, v);
  }
}

/* The padded (for stride 2, de-interleaved) input plane and what every block needs. */
typedef struct dw_plane {
  const float *even, *odd;
  int64_t cols, s;
  const __m512 *wv;
  __m512 lo, hi, b0;
  int hs; /* em_minmax_params.hswish */
} dw_plane;

/*
 * All output rows, in blocks of R rows x V vectors (R * V <= 8, literals after inlining, so acc
 * stays in registers). Rows past the plane alias the block's last real row and are stored
 * first, so the real row's store wins.
 */
static inline __attribute__((always_inline, target("avx512f"))) void
dw_rows(const em_dw_params *q, const dw_plane *pl, float *out, const int R, const int V) {
  const int64_t s = pl->s, cols = pl->cols;
  for (int64_t oy = 0; oy < q->oh; oy += R) {
    int64_t rows[8];
    float *orow[8];
    for (int r = 0; r < R; r++) {
      const int64_t y = oy + r < q->oh ? oy + r : q->oh - 1;
      rows[r] = y * s * cols, orow[r] = out + y * q->ow;
    }
    for (int64_t ox = 0; ox < q->ow; ox += 16 * V) {
      __mmask16 m[4];
      __m512 acc[8];
#pragma GCC unroll 4
      for (int v = 0; v < V; v++) m[v] = ox_mask(q->ow, ox + 16 * v);
#pragma GCC unroll 8
      for (int i = 0; i < R * V; i++) acc[i] = pl->b0;
      for (int64_t ky = 0; ky < q->kh; ky++) {
        for (int64_t kx = 0; kx < q->kw; kx++) {
          const int64_t c = kx * q->dw;
          const float *plane = s == 1 ? pl->even : ((c & 1) ? pl->odd : pl->even);
          const float *src = plane + ky * q->dh * cols + ox + (s == 1 ? c : c >> 1);
          const __m512 wt = pl->wv[ky * q->kw + kx];
#pragma GCC unroll 8
          for (int i = 0; i < R * V; i++)
            acc[i] = _mm512_fmadd_ps(
                wt, _mm512_maskz_loadu_ps(m[i % V], src + rows[i / V] + 16 * (i % V)), acc[i]);
        }
      }
#pragma GCC unroll 8
      for (int i = R * V - 1; i >= 0; i--) {
        const __m512 v = _mm512_min_ps(pl->hi, _mm512_max_ps(pl->lo, acc[i]));
        _mm512_mask_storeu_ps(orow[i / V] + ox + 16 * (i % V), m[i % V],
                              pl->hs ? em_hswish_f32x16(v) : v);
      }
    }
  }
}

/*
 * A K x K (3 or 5), stride 1, pad K / 2 conv over a plane of at most 16 V pixels (7x7), as the
 * flat array it is: output lane p reads input p + dy * w + dx, masked where the window leaves
 * the plane (rows above / below, columns left / right) or p the plane. V 16-wide accumulators,
 * each tap one masked load and FMA per vector: no padded copy, no per-row work (the row-blocked
 * kernel below spends ~250 cycles on a 7x7 plane, 7 of 16 lanes busy; this, ~100). 14x14 planes
 * measured no faster this way (~1 ns per pixel both), so they stay there. Masked-off lanes of a
 * load are never read, so loads may start before `in`.
 */
static inline __attribute__((always_inline, target("avx512f"))) void
dw_flat(const em_dw_params *q, const float *in, const float *w, float bias, float *out,
        const em_minmax_params *p, const int K, const int V) {
  const int64_t wd = q->w, hw = q->h * q->w;
  const int R = K / 2;
  const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512 fw = _mm512_set1_ps((float)wd), inv = _mm512_set1_ps(1.0f / (float)wd);
  __m512 acc[8];
  __mmask16 mrow[8][5], mcol[8][5];
#pragma GCC unroll 8
  for (int v = 0; v < V; v++) {
    const __m512i idx = _mm512_add_epi32(_mm512_set1_epi32(16 * v), iota);
    const __m512 f = _mm512_cvtepi32_ps(idx);
    const __m512 row =
        _mm512_roundscale_ps(_mm512_mul_ps(_mm512_add_ps(f, _mm512_set1_ps(0.5f)), inv),
                             _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    const __m512 ox = _mm512_fnmadd_ps(row, fw, f); /* f - row * w: the lane's column */
    const __mmask16 in_plane = _mm512_cmplt_epi32_mask(idx, _mm512_set1_epi32((int)hw));
#pragma GCC unroll 5
    for (int t = 0; t < K; t++) {
      const int d = t - R; /* row / column offset of tap t */
      /* input row oy + d inside: flat index p + d * w in [0, hw); column ox + d in [0, w) */
      mrow[v][t] = in_plane, mcol[v][t] = (__mmask16)0xFFFF;
      if (d < 0) {
        mrow[v][t] &= _mm512_cmpge_epi32_mask(idx, _mm512_set1_epi32((int)(-d * wd)));
        mcol[v][t] = _mm512_cmp_ps_mask(ox, _mm512_set1_ps((float)-d), _CMP_GE_OQ);
      } else if (d > 0) {
        mrow[v][t] &= _mm512_cmplt_epi32_mask(idx, _mm512_set1_epi32((int)(hw - d * wd)));
        mcol[v][t] = _mm512_cmp_ps_mask(ox, _mm512_set1_ps((float)(wd - 1 - d)), _CMP_LE_OQ);
      }
    }
    acc[v] = _mm512_set1_ps(bias);
  }
  for (int ky = 0; ky < K; ky++)
    for (int kx = 0; kx < K; kx++) {
      const __m512 wt = _mm512_set1_ps(w[ky * K + kx]);
      const int64_t off = (ky - R) * wd + (kx - R);
#pragma GCC unroll 8
      for (int v = 0; v < V; v++)
        acc[v] = _mm512_fmadd_ps(
            wt,
            _mm512_maskz_loadu_ps(mrow[v][ky] & mcol[v][kx], (const char *)in + (16 * v + off) * 4),
            acc[v]);
    }
  const __m512 lo = _mm512_set1_ps(p->min), hi = _mm512_set1_ps(p->max);
#pragma GCC unroll 8
  for (int v = 0; v < V; v++) {
    const __m512 y = _mm512_min_ps(hi, _mm512_max_ps(lo, acc[v]));
    _mm512_mask_storeu_ps(out + 16 * v, mrow[v][R], p->hswish ? em_hswish_f32x16(y) : y);
  }
}

/* Lanes l of a 16-wide load at column c0 + l that lie inside a row [0, w). */
static inline __mmask16 in_mask(int64_t c0, int64_t w) {
  const int64_t lo = c0 >= 0 ? 0 : -c0 > 16 ? 16 : -c0;
  const int64_t hi = w - c0 < 0 ? 0 : w - c0 > 16 ? 16 : w - c0;
  return hi > lo ? (__mmask16)(((1u << hi) - 1u) & ~((1u << lo) - 1u)) : 0;
}

/*
 * One 16-wide column of outputs (from column ox) of a K x K (3 or 5) conv, stride S (1 or 2),
 * any padding below K, undilated, straight from the plane: no padded copy. Output rows go in
 * blocks of RB, each block walking the (RB - 1) S + K input rows its windows cover once: a row's
 * K tap vectors are loaded (stride 1: K masked loads at columns c + kx; stride 2: 32 columns a
 * tap pair, split into even and odd ones by one permute each) and feed every output row of the
 * block that reads the row, so each input vector is loaded once per block, not once per output
 * row (MobileNets' 3x3 convs: 9 loads a 16-wide output before, 3.75 with RB = 8). Masks stand
 * in for the zero padding left and right; rows above and below the plane are skipped. A last
 * partial block is moved up to end at the last row (recomputing a few rows, which rewrites the
 * same values), so oh must be at least RB. K, S and RB are literals after inlining: the loops
 * unroll and the accumulators stay in registers.
 */
static inline __attribute__((always_inline, target("avx512f"))) void
dw_column(const em_dw_params *q, const float *in, const __m512 *wt, __m512 b0, float *out,
          __m512 lo, __m512 hi, int hs, int64_t ox, const int K, const int S, const int RB) {
  const int64_t h = q->h, wd = q->w, oh = q->oh, ow = q->ow, ph = q->ph;
  const __m512i ieven =
      _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i iodd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  const int64_t c = S * ox - q->pw; /* the input column of tap 0, lane 0 */
  /* Stride 1: mask of tap kx's load (columns c + kx on); stride 2: of the halves of pair j
   * (columns c + 2 j and c + 2 j + 16 on). */
  __mmask16 mk[6];
  const int nmk = S == 1 ? K : 2 * (K / 2 + 1);
#pragma GCC unroll 6
  for (int t = 0; t < nmk; t++)
    mk[t] = S == 1 ? in_mask(c + t, wd) : in_mask(c + 2 * (t / 2) + 16 * (t % 2), wd);
  const __mmask16 om = ox_mask(ow, ox);
  for (int64_t oy0 = 0; oy0 < oh; oy0 += RB) {
    const int64_t oy = oy0 + RB <= oh ? oy0 : oh - RB;
    __m512 acc[8];
#pragma GCC unroll 8
    for (int r = 0; r < RB; r++) acc[r] = b0;
#pragma GCC unroll 16
    for (int i = 0; i < (RB - 1) * S + K; i++) {
      const int64_t iy = oy * S - ph + i;
      if (iy < 0 || iy >= h) continue;
      /* Loads may start before the row (masked-off lanes are never read). */
      const char *src = (const char *)(in + iy * wd) + c * 4;
      __m512 x[5];
      if (S == 1) {
#pragma GCC unroll 5
        for (int kx = 0; kx < K; kx++) x[kx] = _mm512_maskz_loadu_ps(mk[kx], src + kx * 4);
      } else {
#pragma GCC unroll 3
        for (int j = 0; j <= K / 2; j++) {
          const __m512 a = _mm512_maskz_loadu_ps(mk[2 * j], src + 8 * j);
          const __m512 b = _mm512_maskz_loadu_ps(mk[2 * j + 1], src + 8 * j + 64);
          x[2 * j] = _mm512_permutex2var_ps(a, ieven, b);
          if (2 * j + 1 < K) x[2 * j + 1] = _mm512_permutex2var_ps(a, iodd, b);
        }
      }
      /* every output row r of the block whose window holds input row i, as its row ky */
#pragma GCC unroll 8
      for (int r = 0; r < RB; r++) {
        const int ky = i - r * S;
        if (ky < 0 || ky >= K) continue;
#pragma GCC unroll 5
        for (int kx = 0; kx < K; kx++) acc[r] = _mm512_fmadd_ps(wt[ky * K + kx], x[kx], acc[r]);
      }
    }
#pragma GCC unroll 8
    for (int r = 0; r < RB; r++) {
      const __m512 v = _mm512_min_ps(hi, _mm512_max_ps(lo, acc[r]));
      _mm512_mask_storeu_ps(out + (oy + r) * ow + ox, om, hs ? em_hswish_f32x16(v) : v);
    }
  }
}

/* The whole plane in 16-wide columns, blocks of RB output rows (oh >= RB). */
static inline __attribute__((always_inline, target("avx512f"))) void
dw_direct(const em_dw_params *q, const float *in, const float *w, float bias, float *out,
          const em_minmax_params *p, const int K, const int S, const int RB) {
  const __m512 lo = _mm512_set1_ps(p->min), hi = _mm512_set1_ps(p->max);
  const __m512 b0 = _mm512_set1_ps(bias);
  __m512 wt[25];
#pragma GCC unroll 25
  for (int t = 0; t < K * K; t++) wt[t] = _mm512_set1_ps(w[t]);
  for (int64_t ox = 0; ox < q->ow; ox += 16)
    dw_column(q, in, wt, b0, out, lo, hi, (int)p->hswish, ox, K, S, RB);
}

/* The generic kernel (f32_vops_impl.h: clamps only), then the hardswish when p asks for it. */
static void dw_generic(const em_dw_params *q, const float *in, const float *w, float bias,
                       float *out, const em_minmax_params *p) {
  em_f32_dwconv2d_minmax_ukernel__avx512f(q, in, w, bias, out, p);
  if (p->hswish) em_hswish_row_f32(out, (size_t)(q->oh * q->ow));
}

__attribute__((target("avx512f"))) void
em_f32_dwconv2d_chw_minmax_ukernel__avx512f(const em_dw_params *q, const float *in, const float *w,
                                            float bias, float *out, const em_minmax_params *p) {
  const int64_t s = q->sw;
  /* Padded rows: the top padding, the plane, then zeros down to the last row a window reads
   * (ph rows below for a whole plane; a band of rows (cpu_op_dwconv.c: dw_bands) may need more or
   * fewer). */
  const int64_t span_h = (q->oh - 1) * q->sh + (q->kh - 1) * q->dh + 1;
  const int64_t ph = q->h + 2 * q->ph > span_h ? q->h + 2 * q->ph : span_h, pw = q->w + 2 * q->pw;
  const int64_t cols = s == 2 ? (pw + 1) / 2 : pw; /* width of each (de-interleaved) plane */
  if ((q->kh == 3 || q->kh == 5) && q->kw == q->kh && s == 1 && q->sh == 1 && q->ph == q->kh / 2 &&
      q->pw == q->kh / 2 && q->dh == 1 && q->dw == 1 && q->h * q->w <= 128 && q->oh == q->h &&
      q->ow == q->w) {
    if (q->kh == 3 && q->h * q->w <= 64)
      dw_flat(q, in, w, bias, out, p, 3, 4);
    else if (q->kh == 3)
      dw_flat(q, in, w, bias, out, p, 3, 8);
    else if (q->h * q->w <= 64)
      dw_flat(q, in, w, bias, out, p, 5, 4);
    else
      dw_flat(q, in, w, bias, out, p, 5, 8);
    return;
  }
  if ((q->kh == 3 || q->kh == 5) && q->kw == q->kh && (s == 1 || s == 2) && q->sh == s &&
      q->ph < q->kh && q->pw < q->kw && q->dh == 1 && q->dw == 1) {
    /* Blocks of 8 output rows for 3x3 stride 1 (8 accumulators, 9 weights and 3 tap vectors in
     * registers), else 4 (5x5 at 2 rows ran 1.1-1.3x slower: its 25 weights fit, but each input
     * row then fed at most 2 output rows); fewer when the plane has fewer rows. */
#define EM_DW_DIRECT(K, S, RB)                                                                     \
  do {                                                                                             \
    if (q->oh >= RB)                                                                               \
      dw_direct(q, in, w, bias, out, p, K, S, RB);                                                 \
    else if (RB > 4 && q->oh >= 4)                                                                 \
      dw_direct(q, in, w, bias, out, p, K, S, 4);                                                  \
    else if (q->oh >= 2)                                                                           \
      dw_direct(q, in, w, bias, out, p, K, S, 2);                                                  \
    else                                                                                           \
      dw_direct(q, in, w, bias, out, p, K, S, 1);                                                  \
  } while (0)
    if (q->oh < 1) return;
    if (q->kh == 3 && s == 1)
      EM_DW_DIRECT(3, 1, 8);
    else if (q->kh == 3)
      EM_DW_DIRECT(3, 2, 4);
    else if (s == 1)
      EM_DW_DIRECT(5, 1, 4);
    else
      EM_DW_DIRECT(5, 2, 4);
#undef EM_DW_DIRECT
    return;
  }
  if (q->sh != s || s > 2 || ph * cols * s > PAD_FLOATS || q->kh * q->kw > 64) {
    dw_generic(q, in, w, bias, out, p);
    return;
  }
  float buf[PAD_FLOATS];
  float trow[2 * 2048 + 64];
  if (s == 2 && cols > 2048) {
    dw_generic(q, in, w, bias, out, p);
    return;
  }
  const __m512i ieven =
      _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i iodd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  float *even = buf, *odd = buf + ph * cols;
  /* Only the padding needs zeros: every interior element is written below. */
  const int64_t below = ph - q->ph - q->h;
  for (int64_t pl = 0; pl < s; pl++) {
    memset(buf + pl * ph * cols, 0, (size_t)(q->ph * cols) * sizeof *buf);
    memset(buf + pl * ph * cols + (q->ph + q->h) * cols, 0, (size_t)(below * cols) * sizeof *buf);
  }
  for (int64_t y = 0; y < q->h; y++) {
    const float *src = in + y * q->w;
    if (s == 1) {
      pad_row(even + (y + q->ph) * cols, src, q->pw, q->w, cols);
    } else {
      /* The padded row, then even / odd columns 16 at a time. */
      float *e = even + (y + q->ph) * cols, *o = odd + (y + q->ph) * cols;
      pad_row(trow, src, q->pw, q->w, 2 * cols + 32);
      for (int64_t i = 0; i < cols; i += 16) {
        const int64_t n = cols - i < 16 ? cols - i : 16;
        const __mmask16 m = (__mmask16)((1u << n) - 1u);
        const __m512 a = _mm512_loadu_ps(trow + 2 * i), b = _mm512_loadu_ps(trow + 2 * i + 16);
        _mm512_mask_storeu_ps(e + i, m, _mm512_permutex2var_ps(a, ieven, b));
        _mm512_mask_storeu_ps(o + i, m, _mm512_permutex2var_ps(a, iodd, b));
      }
    }
  }
  __m512 wv[64];
  for (int64_t t = 0; t < q->kh * q->kw; t++) wv[t] = _mm512_set1_ps(w[t]);
  const __m512 lo = _mm512_set1_ps(p->min), hi = _mm512_set1_ps(p->max), b0 = _mm512_set1_ps(bias);
  /* Blocks of R output rows x V 16-wide vectors, R * V = 8 accumulators: wide rows take 2 x 4,
   * narrow ones (late layers, 7x7 or 14x14) more rows of fewer vectors. */
  const dw_plane pl = {even, odd, cols, s, wv, lo, hi, b0, (int)p->hswish};
  if (q->ow > 32)
    dw_rows(q, &pl, out, 2, 4);
  else if (q->ow > 16)
    dw_rows(q, &pl, out, 4, 2);
  else
    dw_rows(q, &pl, out, 8, 1);
}
