/*
 * q8_gemm_6x16__avx512vnni.c — the int8 GEMM tile of the int8 convs (EMC_CONV_Q8) with AVX-512
 * VNNI: per group of 4 depths one 64-byte load of the u8 column panel (16 pixels x 4) and, for
 * each of the 6 rows, vpdpbusd with that row's 4 int8 weights broadcast. Two sets of
 * accumulators (even and odd groups) give 12 independent chains, enough to keep both vector
 * pipes busy on Zen 4 (512-bit ops as two halves) and on Intel. Same contract and results as
 * q8_gemm_impl.h (exact int32 sums, then (acc - corr) * scale + bias).
 *
 * The 6x32 tile (em_q8_gemm_6x32_ukernel__avx512vnni, what the int8 convs use with VNNI) runs
 * two consecutive column panels at once, so each broadcast of a row's weights feeds two
 * vpdpbusd: one broadcast per 2 multiply-adds instead of one per 1. On Zen 5 (two full 512-bit
 * VNNI pipes) the 6x16 tile is bound by the broadcasts at 53-56 % of the VNNI peak and the 6x32
 * one reaches 86-90 % (bench/gemm/q8_tile_bench.c); on Zen 4 both have the pipes' throughput.
 */
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#include <string.h>

#include "cpu_ukernels.h"

#define EM_ISA         avx512vnni
#define EM_Q8_NO_TILE  1
#define EM_Q8_NO_QUANT 1
#define EM_Q8_NO_PACK  1
#define EM_Q8_NO_DW    1  /* q8_dwconv__avx512vnni.c */
#define EM_Q8_NO_ADD   1  /* q8_dwconv__avx512vnni.c */
#include "q8_gemm_impl.h" /* q8_pack_groups_avx512vnni, for the tails */

/* 16 rows of 16 bytes transposed: r[i][j] <- r[j][i] (four rounds of interleaves, each pairing
 * rows so that the runs of bytes from one input row double in length). */
static inline __attribute__((always_inline)) void transpose16x16_u8(__m128i r[16]) {
  __m128i a[16], b[16];
  for (int i = 0; i < 8; i++) { /* a[2i]: pixels 0-7 of rows 2i, 2i+1 interleaved; a[2i+1]: 8-15 */
    a[2 * i] = _mm_unpacklo_epi8(r[2 * i], r[2 * i + 1]);
    a[2 * i + 1] = _mm_unpackhi_epi8(r[2 * i], r[2 * i + 1]);
  }
  for (int j = 0; j < 4; j++) { /* b[4j + k]: pixels 4k..4k+3, rows 4j..4j+3 (4 bytes each) */
    b[4 * j] = _mm_unpacklo_epi16(a[4 * j], a[4 * j + 2]);
    b[4 * j + 1] = _mm_unpackhi_epi16(a[4 * j], a[4 * j + 2]);
    b[4 * j + 2] = _mm_unpacklo_epi16(a[4 * j + 1], a[4 * j + 3]);
    b[4 * j + 3] = _mm_unpackhi_epi16(a[4 * j + 1], a[4 * j + 3]);
  }
  for (int k = 0; k < 4; k++) { /* rows 0-7 and 8-15 of pixels 4k..4k+3, then all 16 rows */
    const __m128i d0 = _mm_unpacklo_epi32(b[k], b[4 + k]), d1 = _mm_unpackhi_epi32(b[k], b[4 + k]);
    const __m128i e0 = _mm_unpacklo_epi32(b[8 + k], b[12 + k]);
    const __m128i e1 = _mm_unpackhi_epi32(b[8 + k], b[12 + k]);
    r[4 * k] = _mm_unpacklo_epi64(d0, e0);
    r[4 * k + 1] = _mm_unpackhi_epi64(d0, e0);
    r[4 * k + 2] = _mm_unpacklo_epi64(d1, e1);
    r[4 * k + 3] = _mm_unpackhi_epi64(d1, e1);
  }
}

/* v * s[ch] clamped to [mm->min, mm->max] as em_f32_vmulc_minmax does it (NaN stays: the
 * vector max and min return their second operand when it is NaN); v itself when s is NULL. */
static inline __attribute__((always_inline)) __m512 scaled(__m512 v, const float *s, size_t ch,
                                                           const em_minmax_params *mm) {
  if (!s) return v;
  v = _mm512_mul_ps(v, _mm512_set1_ps(s[ch]));
  return _mm512_min_ps(_mm512_set1_ps(mm->max), _mm512_max_ps(_mm512_set1_ps(mm->min), v));
}

/* Planes to channels last (cpu_ukernels.h) in blocks of 16 channels by 16 pixels: each channel's
 * 16 values quantized in one vector (em_q8_quant1's bytes, in em_q8_quant_bounds's short form),
 * narrowed to 16 bytes, the block transposed and each pixel's 16 channels stored at once (a last
 * block of fewer than 16 channels stores only its own bytes). */
static inline __attribute__((always_inline)) void
quant_planes(size_t c, size_t n, const float *x, size_t xs, const float *s,
             const em_minmax_params *mm, uint8_t *y, size_t ys, const em_q8_quant_params *p) {
  float fl, fh;
  em_q8_quant_bounds(p, &fl, &fh);
  const __m512 inv = _mm512_set1_ps(p->inv), flo = _mm512_set1_ps(fl), fhi = _mm512_set1_ps(fh);
  const __m512i zp = _mm512_set1_epi32((int32_t)p->zp), lo = _mm512_set1_epi32((int32_t)p->lo);
  if (ys == 4 && c <= 4) { /* a network's stem (3 channels): 16 pixels' 4 bytes in one store */
    const uint64_t pattern = 0x1111111111111111ull * ((1u << c) - 1u); /* byte j of 4, j < c */
    for (size_t i = 0; i < n; i += 16) {
      const size_t m = n - i < 16 ? n - i : 16;
      const __mmask16 k = (__mmask16)((1u << m) - 1u);
      __m512i acc = _mm512_setzero_si512();
      for (size_t j = 0; j < c; j++) {
        __m512 t = scaled(_mm512_maskz_loadu_ps(k, x + j * xs + i), s, j, mm);
        t = _mm512_min_ps(fhi, _mm512_max_ps(flo, _mm512_mul_ps(t, inv))); /* NaN stays */
        __m512i v = _mm512_cvt_roundps_epi32(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        v = _mm512_max_epi32(_mm512_add_epi32(v, zp), lo); /* in [lo, hi]: one byte */
        acc = _mm512_or_si512(acc, _mm512_slli_epi32(v, (unsigned)(8 * j)));
      }
      const uint64_t bytes = m == 16 ? ~0ull : (1ull << (4 * m)) - 1u;
      _mm512_mask_storeu_epi8(y + i * 4, (__mmask64)(pattern & bytes), acc);
    }
    return;
  }
  if (ys == 3 && c == 3) { /* a stem's compact image (cpu_op_qpw.c): 16 pixels' 3 bytes */
    /* each pixel's 4 bytes (the 4th empty) to 3 within the 128-bit lanes, then the lanes' 12
     * bytes end to end: one 48-byte store */
    const __m512i pack = _mm512_broadcast_i32x4(
        _mm_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1));
    const __m512i order = _mm512_setr_epi32(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, 3, 7, 11, 15);
    for (size_t i = 0; i < n; i += 16) {
      const size_t m = n - i < 16 ? n - i : 16;
      const __mmask16 k = (__mmask16)((1u << m) - 1u);
      __m512i acc = _mm512_setzero_si512();
      for (size_t j = 0; j < 3; j++) {
        __m512 t = scaled(_mm512_maskz_loadu_ps(k, x + j * xs + i), s, j, mm);
        t = _mm512_min_ps(fhi, _mm512_max_ps(flo, _mm512_mul_ps(t, inv))); /* NaN stays */
        __m512i v = _mm512_cvt_roundps_epi32(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        v = _mm512_max_epi32(_mm512_add_epi32(v, zp), lo); /* in [lo, hi]: one byte */
        acc = _mm512_or_si512(acc, _mm512_slli_epi32(v, (unsigned)(8 * j)));
      }
      acc = _mm512_permutexvar_epi32(order, _mm512_shuffle_epi8(acc, pack));
      const __mmask64 bytes = m == 16 ? ((__mmask64)1 << 48) - 1u : ((__mmask64)1 << (3 * m)) - 1u;
      _mm512_mask_storeu_epi8(y + i * 3, bytes, acc);
    }
    return;
  }
  size_t ch = 0;
  for (; ch < c; ch += 16) { /* the last block: rem < 16 channels, the other rows unused */
    const size_t rem = c - ch < 16 ? c - ch : 16;
    const __mmask64 keep = ((__mmask64)1 << rem) - 1u;
    for (size_t i = 0; i < n; i += 16) {
      const size_t m = n - i < 16 ? n - i : 16;
      const __mmask16 k = (__mmask16)((1u << m) - 1u);
      __m128i r[16];
      for (size_t j = 0; j < 16; j++) {
        if (j >= rem) {
          r[j] = _mm_setzero_si128();
          continue;
        }
        __m512 t = scaled(_mm512_maskz_loadu_ps(k, x + (ch + j) * xs + i), s, ch + j, mm);
        t = _mm512_min_ps(fhi, _mm512_max_ps(flo, _mm512_mul_ps(t, inv))); /* NaN stays */
        __m512i v = _mm512_cvt_roundps_epi32(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        v = _mm512_max_epi32(_mm512_add_epi32(v, zp), lo); /* NaN: INT32_MIN + zp -> lo */
        r[j] = _mm512_cvtepi32_epi8(v);
      }
      transpose16x16_u8(r);
      for (size_t j = 0; j < m; j++) /* rem bytes: the ones past c are not this call's */
        _mm512_mask_storeu_epi8(y + (i + j) * ys + ch, keep, _mm512_castsi128_si512(r[j]));
    }
  }
}

void em_q8_quant_ukernel__avx512vnni(size_t c, size_t n, const float *x, size_t xs, uint8_t *y,
                                     size_t ys, const em_q8_quant_params *p) {
  quant_planes(c, n, x, xs, NULL, NULL, y, ys, p);
}

void em_q8_quant_scaled_ukernel__avx512vnni(size_t c, size_t n, const float *x, size_t xs,
                                            const float *s, const em_minmax_params *mm, uint8_t *y,
                                            size_t ys, const em_q8_quant_params *p) {
  quant_planes(c, n, x, xs, s, mm, y, ys, p);
}

/* One tap of a column panel (cpu_ukernels.h), 4 groups at a time: the 16 pixels' 16 bytes in
 * four vectors (pixel 4k + l in lane l of vector k), a 4 x 4 transpose of 32-bit words within
 * the lanes (vector q then holds group q of pixel l + 4 m in word 4 l + m) and one permute into
 * pixel order; the last cq % 4 groups by 4-byte copies. */
void em_q8_pack16_ukernel__avx512vnni(const uint8_t *const *src, size_t off, size_t cq,
                                      uint8_t *dst) {
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  size_t q = 0;
  for (; q + 4 <= cq; q += 4) {
    __m512i a[4];
    for (int k = 0; k < 4; k++) {
      const size_t o = off + q * 4;
      __m512i v =
          _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(const void *)(src[4 * k] + o)));
      v = _mm512_inserti32x4(
          v, _mm_loadu_si128((const __m128i *)(const void *)(src[4 * k + 1] + o)), 1);
      v = _mm512_inserti32x4(
          v, _mm_loadu_si128((const __m128i *)(const void *)(src[4 * k + 2] + o)), 2);
      a[k] = _mm512_inserti32x4(
          v, _mm_loadu_si128((const __m128i *)(const void *)(src[4 * k + 3] + o)), 3);
    }
    const __m512i t0 = _mm512_unpacklo_epi32(a[0], a[1]), t1 = _mm512_unpackhi_epi32(a[0], a[1]);
    const __m512i t2 = _mm512_unpacklo_epi32(a[2], a[3]), t3 = _mm512_unpackhi_epi32(a[2], a[3]);
    uint8_t *d = dst + q * 64;
    _mm512_storeu_si512((void *)d, _mm512_permutexvar_epi32(order, _mm512_unpacklo_epi64(t0, t2)));
    _mm512_storeu_si512((void *)(d + 64),
                        _mm512_permutexvar_epi32(order, _mm512_unpackhi_epi64(t0, t2)));
    _mm512_storeu_si512((void *)(d + 128),
                        _mm512_permutexvar_epi32(order, _mm512_unpacklo_epi64(t1, t3)));
    _mm512_storeu_si512((void *)(d + 192),
                        _mm512_permutexvar_epi32(order, _mm512_unpackhi_epi64(t1, t3)));
  }
  q8_pack_groups_avx512vnni(src, off, q, cq, dst);
}

static inline __m512i bcast4(const int8_t *p) {
  int32_t v;
  memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

void em_q8_gemm_6x16_ukernel__avx512vnni(size_t mr, size_t nr, size_t kq, const int8_t *a,
                                         const uint8_t *b, const int32_t *corr, const float *scale,
                                         const float *bias, float *c, size_t ldc) {
  __m512i e0 = _mm512_setzero_si512(), e1 = e0, e2 = e0, e3 = e0, e4 = e0, e5 = e0;
  __m512i o0 = e0, o1 = e0, o2 = e0, o3 = e0, o4 = e0, o5 = e0;
  size_t q = 0;
  for (; q + 2 <= kq; q += 2) {
    const int8_t *ap = a + q * 24;
    const __m512i b0 = _mm512_loadu_si512((const void *)(b + q * 64));
    const __m512i b1 = _mm512_loadu_si512((const void *)(b + q * 64 + 64));
    _mm_prefetch((const char *)(b + q * 64 + 512), _MM_HINT_T0);
    e0 = _mm512_dpbusd_epi32(e0, b0, bcast4(ap + 0));
    e1 = _mm512_dpbusd_epi32(e1, b0, bcast4(ap + 4));
    e2 = _mm512_dpbusd_epi32(e2, b0, bcast4(ap + 8));
    e3 = _mm512_dpbusd_epi32(e3, b0, bcast4(ap + 12));
    e4 = _mm512_dpbusd_epi32(e4, b0, bcast4(ap + 16));
    e5 = _mm512_dpbusd_epi32(e5, b0, bcast4(ap + 20));
    o0 = _mm512_dpbusd_epi32(o0, b1, bcast4(ap + 24));
    o1 = _mm512_dpbusd_epi32(o1, b1, bcast4(ap + 28));
    o2 = _mm512_dpbusd_epi32(o2, b1, bcast4(ap + 32));
    o3 = _mm512_dpbusd_epi32(o3, b1, bcast4(ap + 36));
    o4 = _mm512_dpbusd_epi32(o4, b1, bcast4(ap + 40));
    o5 = _mm512_dpbusd_epi32(o5, b1, bcast4(ap + 44));
  }
  if (q < kq) {
    const int8_t *ap = a + q * 24;
    const __m512i b0 = _mm512_loadu_si512((const void *)(b + q * 64));
    e0 = _mm512_dpbusd_epi32(e0, b0, bcast4(ap + 0));
    e1 = _mm512_dpbusd_epi32(e1, b0, bcast4(ap + 4));
    e2 = _mm512_dpbusd_epi32(e2, b0, bcast4(ap + 8));
    e3 = _mm512_dpbusd_epi32(e3, b0, bcast4(ap + 12));
    e4 = _mm512_dpbusd_epi32(e4, b0, bcast4(ap + 16));
    e5 = _mm512_dpbusd_epi32(e5, b0, bcast4(ap + 20));
  }
  __m512i acc[6] = {_mm512_add_epi32(e0, o0), _mm512_add_epi32(e1, o1), _mm512_add_epi32(e2, o2),
                    _mm512_add_epi32(e3, o3), _mm512_add_epi32(e4, o4), _mm512_add_epi32(e5, o5)};
  const __mmask16 m = (__mmask16)(nr >= 16 ? 0xFFFFu : ((1u << nr) - 1u));
  for (size_t r = 0; r < mr; r++) {
    const __m512i v = _mm512_sub_epi32(acc[r], _mm512_set1_epi32(corr[r])); /* wraps, no UB */
    __m512 f = _mm512_cvtepi32_ps(v);
    /* multiply then add, two roundings, as the portable tile (bit-identical results) */
    f = _mm512_add_ps(_mm512_mul_ps(f, _mm512_set1_ps(scale[r])),
                      _mm512_set1_ps(bias ? bias[r] : 0.0f));
    _mm512_mask_storeu_ps(c + r * ldc, m, f);
  }
}

/* (acc - corr) * scale + bias of one row's 16 columns (mask m), as the 6x16 tile's epilogue. */
static inline void store_row(__m512i acc, int32_t corr, float scale, float bias, float *c,
                             __mmask16 m) {
  __m512 f = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc, _mm512_set1_epi32(corr)));
  f = _mm512_add_ps(_mm512_mul_ps(f, _mm512_set1_ps(scale)), _mm512_set1_ps(bias));
  _mm512_mask_storeu_ps(c, m, f);
}

void em_q8_gemm_6x32_ukernel__avx512vnni(size_t mr, size_t nr, size_t kq, const int8_t *a,
                                         const uint8_t *b, const int32_t *corr, const float *scale,
                                         const float *bias, float *c, size_t ldc) {
  if (nr <= 16) { /* one panel: the second may not exist */
    em_q8_gemm_6x16_ukernel__avx512vnni(mr, nr, kq, a, b, corr, scale, bias, c, ldc);
    return;
  }
  const uint8_t *b2 = b + kq * 64; /* the next column panel */
  __m512i l0 = _mm512_setzero_si512(), l1 = l0, l2 = l0, l3 = l0, l4 = l0, l5 = l0;
  __m512i h0 = l0, h1 = l0, h2 = l0, h3 = l0, h4 = l0, h5 = l0;
  for (size_t q = 0; q < kq; q++) {
    const int8_t *ap = a + q * 24;
    const __m512i b0 = _mm512_loadu_si512((const void *)(b + q * 64));
    const __m512i b1 = _mm512_loadu_si512((const void *)(b2 + q * 64));
    _mm_prefetch((const char *)(b + q * 64 + 256), _MM_HINT_T0);
    _mm_prefetch((const char *)(b2 + q * 64 + 256), _MM_HINT_T0);
    __m512i x = bcast4(ap + 0);
    l0 = _mm512_dpbusd_epi32(l0, b0, x), h0 = _mm512_dpbusd_epi32(h0, b1, x);
    x = bcast4(ap + 4);
    l1 = _mm512_dpbusd_epi32(l1, b0, x), h1 = _mm512_dpbusd_epi32(h1, b1, x);
    x = bcast4(ap + 8);
    l2 = _mm512_dpbusd_epi32(l2, b0, x), h2 = _mm512_dpbusd_epi32(h2, b1, x);
    x = bcast4(ap + 12);
    l3 = _mm512_dpbusd_epi32(l3, b0, x), h3 = _mm512_dpbusd_epi32(h3, b1, x);
    x = bcast4(ap + 16);
    l4 = _mm512_dpbusd_epi32(l4, b0, x), h4 = _mm512_dpbusd_epi32(h4, b1, x);
    x = bcast4(ap + 20);
    l5 = _mm512_dpbusd_epi32(l5, b0, x), h5 = _mm512_dpbusd_epi32(h5, b1, x);
  }
  const __m512i lo[6] = {l0, l1, l2, l3, l4, l5}, hi[6] = {h0, h1, h2, h3, h4, h5};
  const __mmask16 m = (__mmask16)(nr >= 32 ? 0xFFFFu : ((1u << (nr - 16)) - 1u));
  for (size_t r = 0; r < mr; r++) {
    const float bv = bias ? bias[r] : 0.0f;
    store_row(lo[r], corr[r], scale[r], bv, c + r * ldc, (__mmask16)0xFFFFu);
    store_row(hi[r], corr[r], scale[r], bv, c + r * ldc + 16, m);
  }
}
#endif
