/*
 * q8_dwdot__avx512vnni.c — the int8 depthwise conv's output row on VNNI dot products
 * (em_q8_dwdot_ukernel__avx512vnni, cpu_ukernels.h): 3x3 and 5x5 windows of stride 1 or 2.
 *
 * vpdpbusd sums 4 u8 x s8 products per 32-bit lane, which a depthwise conv has no channels to
 * feed; here the 4 are 4 neighbouring columns of one channel. Per tap row, the u8 values of 4
 * consecutive input columns (64 channels each, one load a column) are interleaved by two rounds
 * of byte and word unpacks into 4 vectors whose lanes hold one channel's 4 columns (vector k,
 * 128-bit lane L, lane j: channel 16 L + 4 k + j). Each output whose window meets those columns
 * then takes one vpdpbusd a vector, with a weight variant that puts the window's taps under the
 * right columns and zeros under the others (repacked at init, em_q8_dwdot_pack): a 3x3 stride-1
 * row's 4 columns serve 2 outputs, a 5x5 one's 8 columns 4. The int32 sums start at minus the
 * zero-point correction and are exact; converted to f32 they are the f32 row's (acc - corr),
 * then scale, bias and the output quantizer in em_q8_dwconv_ukernel's order, so the bytes are
 * the same. The quantized lanes go back to channel order through the saturating packs (4 x 16
 * int32 -> 64 bytes, their lane order undoing the interleave), one store per output. Two output
 * rows of a 3x3 stride-1 conv share their input rows' packs (em_q8_dwdot2_ukernel); a conv of
 * 17-32 channels puts two output rows side by side in the 64 lanes (em_q8_dwdotv_ukernel).
 *
 * Compiled with the VNNI file's flags (AVX-512 F, BW, VNNI).
 */
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#include <string.h>

#include "cpu_ukernels.h"

/* The output quantizer's constants (em_q8_quant_bounds). */
typedef struct dd_quant {
  __m512 inv, flo, fhi;
  __m512i zp, lo;
} dd_quant;

/* 16 int32 sums (acc - corr) times scale plus bias, quantized (em_q8_quant_bounds's short form):
 * int32 values in [lo, hi], or with SAT (lo 0 and hi 255: the caller's signed-then-unsigned
 * saturating packs clamp to [lo, hi]) without the last max, and with SAT > 1 (flo == -zp: the
 * packs' clamp below is the quantizer's) without the max with flo too. NaN: INT32_MIN + zp, which
 * the packs or the max send to lo. */
static inline __attribute__((always_inline)) __m512i
dd_quant1(__m512i acc, const float *scale, const float *bias, const dd_quant *q, const int SAT) {
  __m512 t = _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(acc), _mm512_loadu_ps(scale)),
                           _mm512_loadu_ps(bias));
  t = _mm512_mul_ps(t, q->inv);
  if (SAT < 2) t = _mm512_max_ps(q->flo, t); /* NaN stays */
  t = _mm512_min_ps(q->fhi, t);
  const __m512i r = _mm512_add_epi32(
      _mm512_cvt_roundps_epi32(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), q->zp);
  return SAT ? r : _mm512_max_epi32(r, q->lo);
}

/* Two output rows' channels side by side (em_q8_dwdotv_ukernel): each row's ch <= 32 channels
 * (kc) in its 32 lanes, `rows` (1 or 2) of them in use, the second ystep input bytes on. */
typedef struct dd_virt {
  size_t rows, ystep;
  __mmask64 kc;
} dd_virt;

/* One input column's 64 lanes: 64 channels under km, or (V 2) two rows' 32. The second row's
 * bytes are merged straight into lanes 32-63 from 32 bytes before them (ystep >= 32: the
 * address stays inside the image). */
static inline __attribute__((always_inline)) __m512i dd_col(const uint8_t *s, __mmask64 km,
                                                            const size_t V, const dd_virt *vt) {
  if (V == 1) return _mm512_maskz_loadu_epi8(km, s);
  const __m512i x = _mm512_maskz_loadu_epi8(vt->kc, s);
  return vt->rows < 2 ? x : _mm512_mask_loadu_epi8(x, vt->kc << 32, s + vt->ystep - 32);
}

/* One output's 64 bytes b to y: under km, or (V 2) each row's 32 lanes to its row, the second
 * orow bytes on (stored from 32 bytes before it: orow >= 32, inside the output). */
static inline __attribute__((always_inline)) void
dd_store(__m512i b, uint8_t *y, size_t orow, __mmask64 km, const size_t V, const dd_virt *vt) {
  if (V == 1) {
    _mm512_mask_storeu_epi8(y, km, b);
    return;
  }
  _mm512_mask_storeu_epi8(y, vt->kc, b);
  if (vt->rows > 1) _mm512_mask_storeu_epi8(y + orow - 32, vt->kc << 32, b);
}

/* The 4 interleaved vectors of input columns c0..c3 (dd_col's lanes; a column past the last
 * one a window reads, ncol, is not loaded). */
static inline __attribute__((always_inline)) void dd_pack(const uint8_t *s, size_t dx, __mmask64 km,
                                                          size_t ncol, __m512i v[4], const size_t V,
                                                          const dd_virt *vt) {
  const __m512i z = _mm512_setzero_si512();
  const __m512i a = dd_col(s, km, V, vt);
  const __m512i b = ncol > 1 ? dd_col(s + dx, km, V, vt) : z;
  const __m512i c = ncol > 2 ? dd_col(s + 2 * dx, km, V, vt) : z;
  const __m512i d = ncol > 3 ? dd_col(s + 3 * dx, km, V, vt) : z;
  const __m512i ab0 = _mm512_unpacklo_epi8(a, b), ab1 = _mm512_unpackhi_epi8(a, b);
  const __m512i cd0 = _mm512_unpacklo_epi8(c, d), cd1 = _mm512_unpackhi_epi8(c, d);
  v[0] = _mm512_unpacklo_epi16(ab0, cd0), v[1] = _mm512_unpackhi_epi16(ab0, cd0);
  v[2] = _mm512_unpacklo_epi16(ab1, cd1), v[3] = _mm512_unpackhi_epi16(ab1, cd1);
}

/*
 * One 64-channel block (lanes under km) of R output rows (the next one orow bytes on, its
 * windows S input rows down... with R 2, only for S 1: one row down): outputs in groups of G
 * sharing P packs of 4 input columns (window stride S, K x K taps), each pack of an input row
 * used by every output row whose window covers that row. wb is the block's packed tables:
 * negated corrections (int32), scales, biases (f32), each [4][16] in the interleaved order, then
 * the weight variants [K rows][G][P][4][64]. Needs ow >= G.
 */
static inline __attribute__((always_inline)) void
dd_block(const uint8_t *in, uint8_t *out, size_t orow, const em_q8_dw_params *p, const int8_t *wb,
         __mmask64 km, const dd_quant *q, const size_t K, const size_t S, const size_t G,
         const size_t P, const size_t R, const int SAT, const size_t V, const dd_virt *vt) {
  const size_t ow = p->ow, dy = p->dy, dx = p->dx, cpo = p->cpo;
  const int32_t *ncorr = (const int32_t *)(const void *)wb;
  const float *scale = (const float *)(const void *)(wb + 256);
  const float *bias = (const float *)(const void *)(wb + 512);
  const int8_t *w = wb + 768;
  const size_t ncols = S * (G - 1) + K; /* the columns the G windows read */
  for (size_t o = 0; o < ow; o += G) {
    const size_t o0 = o + G <= ow ? o : ow - G; /* the last group ends at ow (same bytes) */
    __m512i acc[2][4][4];
#pragma GCC unroll 2
    for (size_t rr = 0; rr < R; rr++)
#pragma GCC unroll 4
      for (size_t g = 0; g < G; g++)
#pragma GCC unroll 4
        for (size_t k = 0; k < 4; k++) acc[rr][g][k] = _mm512_loadu_si512(ncorr + 16 * k);
#pragma GCC unroll 6
    for (size_t iy = 0; iy < K + R - 1; iy++) { /* input row iy: tap row iy - rr of row rr */
      const uint8_t *s = in + iy * dy + o0 * S * dx;
#pragma GCC unroll 2
      for (size_t pk = 0; pk < P; pk++) {
        __m512i v[4];
        dd_pack(s + 4 * pk * dx, dx, km, ncols - 4 * pk, v, V, vt);
#pragma GCC unroll 2
        for (size_t rr = 0; rr < R; rr++) {
          if (iy < rr || iy - rr >= K) continue;
          const int8_t *wr = w + (iy - rr) * G * P * 256;
#pragma GCC unroll 4
          for (size_t g = 0; g < G; g++) {
            /* does output g's window (columns S g .. S g + K - 1) meet columns 4 pk .. 4 pk + 3? */
            if (S * g + K <= 4 * pk || 4 * pk + 4 <= S * g) continue;
            const int8_t *wv = wr + (g * P + pk) * 256;
#pragma GCC unroll 4
            for (size_t k = 0; k < 4; k++)
              acc[rr][g][k] =
                  _mm512_dpbusd_epi32(acc[rr][g][k], v[k], _mm512_loadu_si512(wv + 64 * k));
          }
        }
      }
    }
#pragma GCC unroll 2
    for (size_t rr = 0; rr < R; rr++)
#pragma GCC unroll 4
      for (size_t g = 0; g < G; g++) {
        __m512i r[4];
#pragma GCC unroll 4
        for (size_t k = 0; k < 4; k++)
          r[k] = dd_quant1(acc[rr][g][k], scale + 16 * k, bias + 16 * k, q, SAT);
        const __m512i b =
            _mm512_packus_epi16(_mm512_packs_epi32(r[0], r[1]), _mm512_packs_epi32(r[2], r[3]));
        dd_store(b, out + rr * orow + (o0 + g) * cpo, orow, km, V, vt);
      }
  }
}

/* dd_block for the window (K, S), its groups and packs as em_q8_dwdot_group's; R output rows
 * (2: 3x3 windows of stride 1 only, else rows one at a time), or V rows side by side (V > 1,
 * with R 1). */
static inline __attribute__((always_inline)) void
dd_shape(const uint8_t *in, uint8_t *out, size_t orow, const em_q8_dw_params *p, const int8_t *wb,
         __mmask64 km, const dd_quant *q, size_t K, size_t S, size_t R, const int SAT,
         const size_t V, const dd_virt *vt) {
  if (K == 3 && S == 1 && R == 2)
    dd_block(in, out, orow, p, wb, km, q, 3, 1, 2, 1, 2, SAT, V, vt);
  else if (K == 3 && S == 1)
    dd_block(in, out, orow, p, wb, km, q, 3, 1, 2, 1, 1, SAT, V, vt);
  else if (K == 3)
    dd_block(in, out, orow, p, wb, km, q, 3, 2, 1, 1, 1, SAT, V, vt);
  else if (S == 1) {
    for (size_t rr = 0; rr < R; rr++)
      dd_block(in + rr * p->dy, out + rr * orow, orow, p, wb, km, q, 5, 1, 4, 2, 1, SAT, V, vt);
  } else
    dd_block(in, out, orow, p, wb, km, q, 5, 2, 2, 2, 1, SAT, V, vt);
}

/* The output quantizer's constants, and which of its clamps the packs' saturation is (dd_quant1's
 * SAT: where the range is all of u8). */
static inline dd_quant dd_quant_of(const em_q8_quant_params *oq, int *sat) {
  float flo, fhi;
  em_q8_quant_bounds(oq, &flo, &fhi);
  *sat = oq->lo != 0.0f || oq->hi != 255.0f ? 0 : flo == -oq->zp ? 2 : 1;
  return (dd_quant){_mm512_set1_ps(oq->inv), _mm512_set1_ps(flo), _mm512_set1_ps(fhi),
                    _mm512_set1_epi32((int32_t)oq->zp), _mm512_set1_epi32((int32_t)oq->lo)};
}

/* R output rows (1, or 2 of stride 1) of em_q8_dwdot_ukernel__avx512vnni. */
static void dd_rows(const uint8_t *in, uint8_t *out, size_t orow, const em_q8_dw_params *p,
                    size_t R) {
  int sat;
  const dd_quant q = dd_quant_of(&p->oq, &sat);
  const size_t ch = p->ch, K = p->kh, S = p->step / p->dx;
  const size_t G = em_q8_dwdot_group(K, S, NULL);
  const size_t bb = em_q8_dwdot_block_bytes(K, S);
  size_t c = 0;
  for (; c < ch && p->wd && G && p->ow >= G && p->kw == K && p->step == S * p->dx; c += 64) {
    const size_t n = ch - c < 64 ? ch - c : 64;
    if (n <= EM_Q8_DWDOT_TAIL) break; /* a narrow tail: the f32 row's 16-channel blocks */
    const __mmask64 km = n == 64 ? ~(__mmask64)0 : ((__mmask64)1 << n) - 1u;
    const int8_t *wb = p->wd + c / 64 * bb;
    if (sat == 2)
      dd_shape(in + c, out + c, orow, p, wb, km, &q, K, S, R, 2, 1, NULL);
    else if (sat)
      dd_shape(in + c, out + c, orow, p, wb, km, &q, K, S, R, 1, 1, NULL);
    else
      dd_shape(in + c, out + c, orow, p, wb, km, &q, K, S, R, 0, 1, NULL);
  }
  if (c < ch) {
    em_q8_dw_params t = *p;
    t.ch = ch - c, t.w += c, t.corr += c, t.scale += c, t.bias += c;
    if (R == 2)
      em_q8_dwconv2_ukernel__avx512vnni(in + c, out + c, orow, &t);
    else
      em_q8_dwconv_ukernel__avx512vnni(in + c, out + c, &t);
  }
}

void em_q8_dwdot_ukernel__avx512vnni(const uint8_t *in, uint8_t *out, const em_q8_dw_params *p) {
  dd_rows(in, out, 0, p, 1);
}

void em_q8_dwdot2_ukernel__avx512vnni(const uint8_t *in, uint8_t *out, size_t orow,
                                      const em_q8_dw_params *p) {
  dd_rows(in, out, orow, p, 2);
}
void em_q8_dwdotv_ukernel__avx512vnni(const uint8_t *in, uint8_t *out, size_t orow, size_t rows,
                                      const em_q8_dw_params *p) {
  int sat;
  const dd_quant q = dd_quant_of(&p->oq, &sat);
  const size_t ch = p->ch, K = p->kh, S = p->step / p->dx;
  const size_t G = em_q8_dwdot_group(K, S, NULL);
  if (!p->wd || !G || p->ow < G || p->kw != K || p->step != S * p->dx || ch <= 16 || ch > 32 ||
      rows > 2 || p->ystep < 32 || orow < 32) { /* not its form: the rows one at a time */
    for (size_t r = 0; r < rows; r++)
      em_q8_dwdot_ukernel__avx512vnni(in + r * p->ystep, out + r * orow, p);
    return;
  }
  const dd_virt vt = {rows, p->ystep, ((__mmask64)1 << ch) - 1u};
  const __mmask64 km = ~(__mmask64)0;
  if (sat == 2)
    dd_shape(in, out, orow, p, p->wd, km, &q, K, S, 1, 2, 2, &vt);
  else if (sat)
    dd_shape(in, out, orow, p, p->wd, km, &q, K, S, 1, 1, 2, &vt);
  else
    dd_shape(in, out, orow, p, p->wd, km, &q, K, S, 1, 0, 2, &vt);
}
#endif
