/*
 * q8_pw__avx512vnni.c — the pixel-major int8 tile of the int8 convs with a u8 channels-last
 * output (EMC_CONV_Q8 with EMC_Q8_U8_OUT) or an f32 one, ungrouped, AVX-512 VNNI.
 *
 * The panel path (q8_gemm_6x16__avx512vnni.c) computes weight rows by pixel columns: the input
 * is first gathered into im2col column panels, and a u8 output is transposed back into channels
 * last. Both are pure data movement, and on MobileNet-class layers (K = 16..160, or the 3-channel
 * stem) they cost as much as the products. Here the tile is 8 pixels by 32 channels: per group
 * of 4 depths (a tap's 4 channels), each pixel's 4 bytes are broadcast straight from the
 * channels-last image (the window's origin plus the group's offset) and multiplied (vpdpbusd)
 * with two vectors of 16 channels' weights ([kq][16][4] per 16-channel block, repacked at
 * init); the accumulators already hold each pixel's channels side by side, so the epilogue
 * quantizes and stores them as they are. No im2col, no transpose. An f32 output (planes, for an
 * f32 reader) is stored through an 8 x 16 transpose in registers instead. A u8 output takes
 * narrower streams of pixels (pw_small, pw_mid below): 3 or 4 pixels at a time, so that each
 * group's epilogue overlaps the next group's products.
 *
 * Same bytes as the panel path: exact int32 sums, then (acc - corr) * scale + bias (a multiply and
 * an add, two roundings), then the output quantizer's steps in em_q8_quant_ukernel__avx512vnni's
 * order.
 */
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "cpu_ukernels.h"
#include "q8_tile8__avx512.h"

enum { PW_MR = 8 }; /* pixels per tile */

/* (acc - corr) * scale + bias of one pixel's 16 channels, as the panel path's epilogue: the
 * sums started at -corr (wrapping, as the subtraction after them would), so acc is acc - corr. */
static inline __attribute__((always_inline)) __m512 pw_value(__m512i acc, __m512 scale,
                                                             __m512 bias) {
  return _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(acc), scale), bias);
}

/* The output quantizer's constants (em_q8_quant_bounds), loaded once (stores through uint8_t
 * pointers may alias the parameters, so the compiler would reload them at every store
 * otherwise). */
typedef struct pw_quant {
  __m512 inv, flo, fhi;
  __m512i zp, lo;
  bool low; /* flo + zp above lo (a clamp above the range's bottom): the lower clamp needed */
} pw_quant;

static inline pw_quant pw_quant_of(const em_q8_quant_params *p) {
  float flo, fhi;
  em_q8_quant_bounds(p, &flo, &fhi);
  return (pw_quant){_mm512_set1_ps(p->inv),
                    _mm512_set1_ps(flo),
                    _mm512_set1_ps(fhi),
                    _mm512_set1_epi32((int32_t)p->zp),
                    _mm512_set1_epi32((int32_t)p->lo),
                    flo + p->zp != p->lo};
}

/* acc's 16 channels of one pixel (acc - corr): times scale plus bias, quantized as the panel
 * path's output quantizer does (em_q8_quant1's bytes, in em_q8_quant_bounds's short form),
 * stored as `keep`'s bytes at y. LOW (a constant where it is called) is q->low: without it the
 * lower clamp is left to the last max (em_q8_quant_bounds), one operation fewer per 16 outputs
 * (Zen 4, MobileNetV2's 16 -> 96 expansion 193 -> 179 us), and a full row of 16 bytes is stored
 * unmasked (24 -> 144: 91 -> 83 us). */
static inline __attribute__((always_inline)) void pw_store(__m512i acc, __m512 scale, __m512 bias,
                                                           const pw_quant *q, uint8_t *y,
                                                           __mmask16 keep, const int LOW) {
  __m512 t = _mm512_mul_ps(pw_value(acc, scale, bias), q->inv);
  if (LOW) t = _mm512_max_ps(q->flo, t);
  t = _mm512_min_ps(q->fhi, t); /* NaN stays */
  __m512i r = _mm512_cvt_roundps_epi32(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  r = _mm512_max_epi32(_mm512_add_epi32(r, q->zp), q->lo); /* NaN: lo */
  const __m128i b = _mm512_cvtepi32_epi8(r);
  if (keep == 0xFFFF)
    _mm_storeu_si128((__m128i *)(void *)y, b);
  else
    _mm512_mask_storeu_epi8(y, (__mmask64)keep, _mm512_castsi128_si512(b));
}

/* What the epilogue reads for one tile call, loaded once for all its 8-pixel tiles: the two
 * 16-channel blocks' negated corrections (the sums' starts), scales and biases, their masks,
 * the output quantizer. */
typedef struct pw_epi {
  __m512i ca, cb;
  __m512 sa, sb, ba, bb;
  __mmask16 ka, kb;
  pw_quant q;
} pw_epi;

static inline pw_epi pw_epi_of(size_t nc, const int32_t *corr, const float *scale,
                               const float *bias, const em_q8_quant_params *p, bool u8) {
  pw_epi e;
  e.ka = (__mmask16)(nc >= 16 ? 0xFFFFu : (1u << nc) - 1u);
  e.kb = (__mmask16)(nc >= 32 ? 0xFFFFu : nc > 16 ? (1u << (nc - 16)) - 1u : 0u);
  const __m512i z = _mm512_setzero_si512(); /* the sums' starts: minus the corrections */
  e.ca = _mm512_sub_epi32(z, _mm512_maskz_loadu_epi32(e.ka, corr));
  e.sa = _mm512_maskz_loadu_ps(e.ka, scale);
  e.ba = bias ? _mm512_maskz_loadu_ps(e.ka, bias) : _mm512_setzero_ps();
  e.cb = _mm512_sub_epi32(z, _mm512_maskz_loadu_epi32(e.kb, corr + 16));
  e.sb = _mm512_maskz_loadu_ps(e.kb, scale + 16);
  e.bb = bias ? _mm512_maskz_loadu_ps(e.kb, bias + 16) : _mm512_setzero_ps();
  if (u8)
    e.q = pw_quant_of(p);
  else
    memset(&e.q, 0, sizeof e.q);
  return e;
}

/* The epilogue of one 8-pixel tile's sums: f32 planes (yf) or u8 channels last (y). */
static inline __attribute__((always_inline)) void
pw_finish(const __m512i acc_a[PW_MR], const __m512i acc_b[PW_MR], size_t np, size_t nc,
          const pw_epi *e, uint8_t *const *y, size_t yc, float *yf, size_t yfs, const int LOW) {
  if (yf) { /* f32 planes */
    __m512 v[PW_MR];
    for (size_t i = 0; i < PW_MR; i++) v[i] = pw_value(acc_a[i], e->sa, e->ba);
    q8_store8_planes(v, np, nc < 16 ? nc : 16, yf, yfs);
    if (nc > 16) {
      for (size_t i = 0; i < PW_MR; i++) v[i] = pw_value(acc_b[i], e->sb, e->bb);
      q8_store8_planes(v, np, nc - 16, yf + 16 * yfs, yfs);
    }
    return;
  }
  for (size_t i = 0; i < np && i < PW_MR; i++)
    pw_store(acc_a[i], e->sa, e->ba, &e->q, y[i] + yc, e->ka, LOW);
  if (nc > 16)
    for (size_t i = 0; i < np && i < PW_MR; i++)
      pw_store(acc_b[i], e->sb, e->bb, &e->q, y[i] + yc + 16, e->kb, LOW);
}

/* One pixel (a linear layer's row, a map's last): two chains a block, not eight pixels'. */
static inline __attribute__((always_inline)) void pw_one(size_t nc, size_t kq, const uint8_t *x0,
                                                         const int32_t *qoff, const int8_t *w,
                                                         const pw_epi *e, __m512i acc_a[PW_MR],
                                                         __m512i acc_b[PW_MR]) {
  const int8_t *w2 = w + kq * 64; /* the second block of 16 channels (read when nc > 16) */
  const __m512i z = _mm512_setzero_si512();
  __m512i a0 = e->ca, a1 = z, b0 = e->cb, b1 = z;
  size_t q = 0;
  for (; q + 2 <= kq; q += 2) {
    const __m512i s = q8_bcast4(x0 + qoff[q]), t = q8_bcast4(x0 + qoff[q + 1]);
    a0 = _mm512_dpbusd_epi32(a0, s, _mm512_loadu_si512((const void *)(w + q * 64)));
    a1 = _mm512_dpbusd_epi32(a1, t, _mm512_loadu_si512((const void *)(w + q * 64 + 64)));
    if (nc > 16) {
      b0 = _mm512_dpbusd_epi32(b0, s, _mm512_loadu_si512((const void *)(w2 + q * 64)));
      b1 = _mm512_dpbusd_epi32(b1, t, _mm512_loadu_si512((const void *)(w2 + q * 64 + 64)));
    }
  }
  if (q < kq) {
    const __m512i s = q8_bcast4(x0 + qoff[q]);
    a0 = _mm512_dpbusd_epi32(a0, s, _mm512_loadu_si512((const void *)(w + q * 64)));
    if (nc > 16) b0 = _mm512_dpbusd_epi32(b0, s, _mm512_loadu_si512((const void *)(w2 + q * 64)));
  }
  for (size_t i = 0; i < PW_MR; i++) acc_a[i] = z, acc_b[i] = z;
  acc_a[0] = _mm512_add_epi32(a0, a1), acc_b[0] = _mm512_add_epi32(b0, b1); /* exact */
}

/*
 * A u8 output over few depth groups (kq <= PW_SMALL_KQ: MobileNet's expansions, 16-32 input
 * channels): the block's weights stay in registers (kq vectors a block) and the pixels stream
 * through them 3 at a time, each group's epilogue overlapping the next group's products. The
 * 8-pixel tile reloads the weights for every 8 pixels and ends each tile with 16 epilogues in a
 * row; on Zen 4 this ran MobileNetV2's 16 -> 96 expansion 0.81x its time, 24 -> 144 0.87x, 32 ->
 * 192 0.87x (4 or 8 pixels at a time: 0.88-0.95x). Up to 9 groups: a 3x3 stem on 3 channels
 * (a tap's 4 bytes a group), 16 channels 0.87x the 8-pixel tile's time, 32 as pw_mid's. KQ and
 * TWO (a second block of 16 channels) are constants where it is called.
 */
enum { PW_SMALL_KQ = 9, PW_SMALL_PX = 3 };

static inline __attribute__((always_inline)) void
pw_small(size_t np, const uint8_t *const *x, const int32_t *qoff, const int8_t *w, const pw_epi *e,
         uint8_t *const *y, size_t yc, const size_t KQ, const int TWO, const int LOW) {
  __m512i wa[PW_SMALL_KQ], wb[PW_SMALL_KQ];
  int32_t off[PW_SMALL_KQ];
  for (size_t q = 0; q < KQ; q++) {
    wa[q] = _mm512_loadu_si512((const void *)(w + q * 64));
    wb[q] = TWO ? _mm512_loadu_si512((const void *)(w + (KQ + q) * 64)) : _mm512_setzero_si512();
    off[q] = qoff[q];
  }
  size_t i = 0;
  for (; i + PW_SMALL_PX <= np; i += PW_SMALL_PX) {
    __m512i a[PW_SMALL_PX], b[PW_SMALL_PX];
    for (size_t k = 0; k < PW_SMALL_PX; k++) a[k] = e->ca, b[k] = e->cb;
#pragma GCC unroll 8
    for (size_t q = 0; q < KQ; q++)
#pragma GCC unroll 3
      for (size_t k = 0; k < PW_SMALL_PX; k++) {
        const __m512i t = q8_bcast4(x[i + k] + off[q]);
        a[k] = _mm512_dpbusd_epi32(a[k], t, wa[q]);
        if (TWO) b[k] = _mm512_dpbusd_epi32(b[k], t, wb[q]);
      }
#pragma GCC unroll 3
    for (size_t k = 0; k < PW_SMALL_PX; k++) {
      pw_store(a[k], e->sa, e->ba, &e->q, y[i + k] + yc, e->ka, LOW);
      if (TWO) pw_store(b[k], e->sb, e->bb, &e->q, y[i + k] + yc + 16, e->kb, LOW);
    }
  }
  for (; i < np; i++) {
    __m512i a = e->ca, b = e->cb;
#pragma GCC unroll 8
    for (size_t q = 0; q < KQ; q++) {
      const __m512i t = q8_bcast4(x[i] + off[q]);
      a = _mm512_dpbusd_epi32(a, t, wa[q]);
      if (TWO) b = _mm512_dpbusd_epi32(b, t, wb[q]);
    }
    pw_store(a, e->sa, e->ba, &e->q, y[i] + yc, e->ka, LOW);
    if (TWO) pw_store(b, e->sb, e->bb, &e->q, y[i] + yc + 16, e->kb, LOW);
  }
}

/* pw_small with kq, the block count and LOW as constants: false when kq is too deep for it. */
static inline __attribute__((always_inline)) bool
pw_small_for(size_t np, size_t nc, size_t kq, const uint8_t *const *x, const int32_t *qoff,
             const int8_t *w, const pw_epi *e, uint8_t *const *y, size_t yc, const int LOW) {
#define PW_SMALL_CASE(K)                                                                           \
  case K:                                                                                          \
    if (nc > 16)                                                                                   \
      pw_small(np, x, qoff, w, e, y, yc, K, 1, LOW);                                               \
    else                                                                                           \
      pw_small(np, x, qoff, w, e, y, yc, K, 0, LOW);                                               \
    return true;
  switch (kq) {
    PW_SMALL_CASE(1)
    PW_SMALL_CASE(2)
    PW_SMALL_CASE(3)
    PW_SMALL_CASE(4)
    PW_SMALL_CASE(5)
    PW_SMALL_CASE(6)
    PW_SMALL_CASE(7)
    PW_SMALL_CASE(8)
    PW_SMALL_CASE(9)
  default: return false;
  }
#undef PW_SMALL_CASE
}

/* A u8 output over more depth groups, two blocks of 16 channels: the same stream, 4 pixels at a
 * time, the weights loaded per group (MobileNetV2's 14x14 expansions and projections on Zen 4:
 * 0.93-0.96x the 8-pixel tile's time; 3 pixels: 1.02-1.35x, too few chains to hide the
 * products' latency over long depths). Only where AVX-512 runs as two halves: a core with two
 * full 512-bit vpdpbusd pipes takes the 8-pixel tile instead (em_q8_pw8_ukernel__avx512vnni:
 * on an Intel Xeon, family 6 model 207, ResNet-50's int8 convs ran at 52-61 % of the VNNI peak
 * in 4-pixel streams and at 70-86 % in 8-pixel tiles; 6-pixel streams were no faster). */
enum { PW_MID_PX = 4 };

static inline __attribute__((always_inline)) void
pw_mid(size_t np, size_t kq, const uint8_t *const *x, const int32_t *qoff, const int8_t *w,
       const pw_epi *e, uint8_t *const *y, size_t yc, const int LOW) {
  const int8_t *w2 = w + kq * 64;
  size_t i = 0;
  for (; i + PW_MID_PX <= np; i += PW_MID_PX) {
    __m512i a[PW_MID_PX], b[PW_MID_PX];
    for (size_t k = 0; k < PW_MID_PX; k++) a[k] = e->ca, b[k] = e->cb;
    for (size_t q = 0; q < kq; q++) {
      const __m512i u = _mm512_loadu_si512((const void *)(w + q * 64));
      const __m512i v = _mm512_loadu_si512((const void *)(w2 + q * 64));
      const int32_t o = qoff[q];
#pragma GCC unroll 4
      for (size_t k = 0; k < PW_MID_PX; k++) {
        const __m512i t = q8_bcast4(x[i + k] + o);
        a[k] = _mm512_dpbusd_epi32(a[k], t, u), b[k] = _mm512_dpbusd_epi32(b[k], t, v);
      }
    }
#pragma GCC unroll 4
    for (size_t k = 0; k < PW_MID_PX; k++) {
      pw_store(a[k], e->sa, e->ba, &e->q, y[i + k] + yc, e->ka, LOW);
      pw_store(b[k], e->sb, e->bb, &e->q, y[i + k] + yc + 16, e->kb, LOW);
    }
  }
  for (; i < np; i++) {
    __m512i a = e->ca, b = e->cb;
    for (size_t q = 0; q < kq; q++) {
      const __m512i t = q8_bcast4(x[i] + qoff[q]);
      a = _mm512_dpbusd_epi32(a, t, _mm512_loadu_si512((const void *)(w + q * 64)));
      b = _mm512_dpbusd_epi32(b, t, _mm512_loadu_si512((const void *)(w2 + q * 64)));
    }
    pw_store(a, e->sa, e->ba, &e->q, y[i] + yc, e->ka, LOW);
    pw_store(b, e->sb, e->bb, &e->q, y[i] + yc + 16, e->kb, LOW);
  }
}

/* The kernel with MID (pw_mid's streams for deep u8 outputs) and LOW constants (pw_entry picks
 * LOW once a call). */
static inline __attribute__((always_inline)) void
pw_run(size_t np, size_t nc, size_t kq, const uint8_t *const *x, const int32_t *qoff,
       const int8_t *w, const pw_epi *e, uint8_t *const *y, size_t yc, float *yf, size_t yfs,
       const int MID, const int LOW) {
  if (!yf && pw_small_for(np, nc, kq, x, qoff, w, e, y, yc, LOW)) return;
  if (!yf && nc > 16 && MID) {
    pw_mid(np, kq, x, qoff, w, e, y, yc, LOW);
    return;
  }
  for (size_t i0 = 0; i0 < np; i0 += PW_MR) {
    const size_t n8 = np - i0 < PW_MR ? np - i0 : PW_MR;
    __m512i acc_a[PW_MR], acc_b[PW_MR];
    if (n8 == 1) {
      pw_one(nc, kq, x[i0], qoff, w, e, acc_a, acc_b);
    } else { /* pixels past n8 read the last one (not stored): the loop stays fixed */
      const uint8_t *xp[PW_MR];
      for (size_t i = 0; i < PW_MR; i++) xp[i] = x[i0 + (i < n8 ? i : n8 - 1)];
      q8_tile8_sums(xp, qoff, kq, w, nc > 16, e->ca, e->cb, acc_a, acc_b);
    }
    pw_finish(acc_a, acc_b, n8, nc, e, yf ? NULL : y + i0, yc, yf ? yf + i0 : NULL, yfs, LOW);
  }
}

/* An entry point's body: the epilogue's constants, then pw_run with LOW picked once. */
static inline __attribute__((always_inline)) void
pw_entry(size_t np, size_t nc, size_t kq, const uint8_t *const *x, const int32_t *qoff,
         const int8_t *w, const int32_t *corr, const float *scale, const float *bias,
         uint8_t *const *y, size_t yc, const em_q8_quant_params *p, float *yf, size_t yfs,
         const int MID) {
  const pw_epi e = pw_epi_of(nc, corr, scale, bias, p, yf == NULL);
  if (e.q.low)
    pw_run(np, nc, kq, x, qoff, w, &e, y, yc, yf, yfs, MID, 1);
  else
    pw_run(np, nc, kq, x, qoff, w, &e, y, yc, yf, yfs, MID, 0);
}

void em_q8_pw_ukernel__avx512vnni(size_t np, size_t nc, size_t kq, const uint8_t *const *x,
                                  const int32_t *qoff, const int8_t *w, const int32_t *corr,
                                  const float *scale, const float *bias, uint8_t *const *y,
                                  size_t yc, const em_q8_quant_params *p, float *yf, size_t yfs) {
  pw_entry(np, nc, kq, x, qoff, w, corr, scale, bias, y, yc, p, yf, yfs, 1);
}

void em_q8_pw8_ukernel__avx512vnni(size_t np, size_t nc, size_t kq, const uint8_t *const *x,
                                   const int32_t *qoff, const int8_t *w, const int32_t *corr,
                                   const float *scale, const float *bias, uint8_t *const *y,
                                   size_t yc, const em_q8_quant_params *p, float *yf, size_t yfs) {
  pw_entry(np, nc, kq, x, qoff, w, corr, scale, bias, y, yc, p, yf, yfs, 0);
}

#endif
