/*
 * linear_q_gemm__avx512vnni.c — AVX-512 VNNI micro-kernels of ember::linear_q4 / linear_q8
 * (linear_q.h): a tile of up to 4 activation rows x 8 weight rows per call (1x8 for decode, its
 * rows read all at once or, p->pairs, two at a time; two 4x4 tiles otherwise).
 *
 * vpdpbusd multiplies unsigned by signed bytes, four per 32-bit lane. The weights become the
 * unsigned operand by their offset (q4: the stored nibble q + 8; q8: q ^ 0x80 = q + 128) and the
 * lane accumulator starts at the packed row's correction -off * sum(activations of the lane), so
 * each lane's integer is exact. A 64-byte chunk of a weight row is 16 lanes (q4: 128 elements in
 * 4 blocks; q8: 64 elements in 2 blocks); lanes are converted to f32 once per chunk and scaled by
 * a_scale(lane) * w_scale(lane) with one FMA. Tails (weight bytes per row not a multiple of 64)
 * use masked loads; the packed activations are zero-padded to 64 bytes. The folded decode
 * (p->fold: f16 scales, groups of 32) starts the lanes at zero instead and takes the offset's
 * excess off per group in f32 with the offsets' term (mac_fold, fold_term): f32-rounding close to
 * the exact form, not bit-equal to it.
 *
 * Compiled with -mavx512f -mavx512bw -mavx512vnni (CMakeLists.txt) and chosen at run time only
 * when CPUID reports them (linear_q.c). Elsewhere this file is empty.
 */
#include "quantized/linear_q.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
#include <immintrin.h>
#include <math.h>
#include <string.h>

/* w_scale for the 16 lanes of chunk c of one weight row (0 past the row's groups). */
static inline __m512 wscale(const float *ws, size_t c, size_t lanes_valid, const em_qgemm_params *p,
                            __m512i gidx) {
  size_t l0 = c * 16;
  unsigned sh = p->gl_shift;
  if (sh >= 4) return _mm512_set1_ps(ws[l0 >> sh]);
  size_t ng = (lanes_valid + ((size_t)1 << sh) - 1) >> sh;
  __m512 v = _mm512_maskz_loadu_ps((__mmask16)((1u << ng) - 1), ws + (l0 >> sh));
  return _mm512_permutexvar_ps(gidx, v);
}

/* The same from f16 scales (or offsets): the chunk's at most 4 values converted, then spread. */
static inline __m512 wscale_h(const uint16_t *ws, size_t c, size_t lanes_valid,
                              const em_qgemm_params *p, __m512i gidx) {
  size_t l0 = c * 16;
  unsigned sh = p->gl_shift;
  if (sh >= 4) return _mm512_cvtph_ps(_mm256_set1_epi16((short)ws[l0 >> sh]));
  size_t ng = (lanes_valid + ((size_t)1 << sh) - 1) >> sh;
  __m512i v = _mm512_maskz_loadu_epi16((__mmask32)((1u << ng) - 1), ws + (l0 >> sh));
  return _mm512_permutexvar_ps(gidx, _mm512_cvtph_ps(_mm512_castsi512_si256(v)));
}

/* A per-channel scale (or offset) of a row, broadcast: what wscale / wscale_h give every chunk. */
static inline __m512 chan_scale(const char *row, int half) {
  if (half) return _mm512_cvtph_ps(_mm256_set1_epi16(*(const short *)(const void *)row));
  return _mm512_set1_ps(*(const float *)(const void *)row);
}

/* v, kept in a register: GCC otherwise folds a value used twice into both users as a memory
 * operand (a weight chunk into its nibble mask and shift, an activation chunk into both rows'
 * dot products), loading it twice; Zen 4 loads one 512-bit vector a cycle, so in
 * pair_fold_blocks the doubled loads (9 a chunk pair instead of 4) bounded the loop. */
static inline __attribute__((always_inline)) __m512i in_reg(__m512i v) {
  __asm__("" : "+v"(v));
  return v;
}

/* Weight row wr's chunk decoded into the unsigned dpbusd operands lo (and hi, q4). */
static inline __attribute__((always_inline)) void decode(int bits, const uint8_t *wr,
                                                         __mmask64 mask, __m512i *lo, __m512i *hi) {
  __m512i v = in_reg(_mm512_maskz_loadu_epi8(mask, wr));
  if (bits == 4) {
    *lo = _mm512_and_si512(v, _mm512_set1_epi8(0x0F));
    *hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), _mm512_set1_epi8(0x0F));
  } else {
    *lo = _mm512_xor_si512(v, _mm512_set1_epi8((char)0x80)); /* padding meets zero activations */
    *hi = *lo;
  }
}

/* acc + f32(exact lane dots of packed row ar with lo/hi) * a_scale * w_scale, for chunk c. */
static inline __attribute__((always_inline)) __m512 mac(int bits, __m512 acc, const uint8_t *ar,
                                                        size_t c, __m512i lo, __m512i hi, __m512 sw,
                                                        const em_qgemm_params *p) {
  size_t off = c * 64;
  __m512i d = _mm512_dpbusd_epi32(_mm512_load_si512(ar + p->off_corr + off), lo,
                                  _mm512_load_si512(ar + off));
  if (bits == 4) d = _mm512_dpbusd_epi32(d, hi, _mm512_load_si512(ar + p->off_a1 + off));
  __m512 sl = _mm512_load_ps((const float *)(ar + p->off_sl) + c * 16);
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_mul_ps(sl, sw), acc);
}

/* The four sums of c0..c3 (one output row's tile), in order. */
static inline __m128 reduce4(__m512 c0, __m512 c1, __m512 c2, __m512 c3) {
  __m512 a = _mm512_add_ps(_mm512_unpacklo_ps(c0, c1), _mm512_unpackhi_ps(c0, c1));
  __m512 b = _mm512_add_ps(_mm512_unpacklo_ps(c2, c3), _mm512_unpackhi_ps(c2, c3));
  __m512 s = _mm512_add_ps(_mm512_shuffle_ps(a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                           _mm512_shuffle_ps(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
  __m256 h = _mm256_add_ps(_mm512_castps512_ps256(s),
                           _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(s), 1)));
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

/* Writes one row of the tile (nc <= 4 outputs, + bias). */
static inline void store_row(__m128 v, size_t nc, const float *bias, float *yr) {
  float t[4];
  _mm_storeu_ps(t, v);
  for (size_t j = 0; j < nc; j++) yr[j] = bias ? t[j] + bias[j] : t[j];
}

/* Chunk c's byte mask (the last chunk of a row may be short) and valid lane count. */
static inline __mmask64 chunk_mask(size_t c, const em_qgemm_params *p, size_t *lanes) {
  size_t off = c * 64, bytes = p->kbytes - off < 64 ? p->kbytes - off : 64;
  *lanes = (bytes + 3) / 4;
  return bytes == 64 ? ~(__mmask64)0 : (((__mmask64)1 << bytes) - 1);
}

/* Column pointers: columns past nc repeat the last one (computed, never stored). */
#define COLUMNS                                                                                    \
  const uint8_t *wr0 = w, *wr1 = nc > 1 ? wr0 + p->w_stride : wr0;                                 \
  const uint8_t *wr2 = nc > 2 ? wr1 + p->w_stride : wr1, *wr3 = nc > 3 ? wr2 + p->w_stride : wr2;  \
  const float *sr0 = ws, *sr1 = nc > 1 ? sr0 + p->ws_stride : sr0;                                 \
  const float *sr2 = nc > 2 ? sr1 + p->ws_stride : sr1, *sr3 = nc > 3 ? sr2 + p->ws_stride : sr2;  \
  const __m512i iota = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);     \
  const __m512i gidx = _mm512_srl_epi32(iota, _mm_cvtsi32_si128((int)(p->gl_shift & 31)));         \
  const size_t n_chunks = (p->kbytes + 63) / 64

/* Decodes column J of chunk c: lo##J, hi##J, sw##J. */
#define DECODE(J)                                                                                  \
  __m512i lo##J, hi##J;                                                                            \
  decode(bits, wr##J + c * 64, mask, &lo##J, &hi##J);                                              \
  const __m512 sw##J = wscale(sr##J, c, lanes, p, gidx)

/* acc + f32(lane dots) * a_scale * w_scale with the activation operands already loaded. */
static inline __attribute__((always_inline)) __m512 mac_pre(int bits, __m512 acc, __m512i a0,
                                                            __m512i a1, __m512i corr, __m512 sl,
                                                            __m512i lo, __m512i hi, __m512 sw) {
  __m512i d = _mm512_dpbusd_epi32(corr, lo, a0);
  if (bits == 4) d = _mm512_dpbusd_epi32(d, hi, a1);
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_mul_ps(sl, sw), acc);
}

/* Folded decode (p->fold: f16 scales in groups of 32, the activation blocks): a lane's integer is
 * the dot with the offset weights alone (no correction), scaled by w_scale * a_scale premultiplied
 * once per 16 groups (s); the offset weights' excess, off * a_scale * (block sum) = off * S(g),
 * leaves with the offsets' term, once per 16 groups (fold_term). Per chunk that drops the corr
 * and sl loads and a multiply, and the packed activations a pass reads halve. */
static inline __attribute__((always_inline)) __m512
mac_fold(int bits, __m512 acc, __m512i a0, __m512i a1, __m512i lo, __m512i hi, __m512 s) {
  __m512i d = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, a0);
  if (bits == 4) d = _mm512_dpbusd_epi32(d, hi, a1);
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), s, acc);
}

/* c + (offset(g) - off * w_scale(g)) * S(g) for 16 groups (lane g); without offsets the same with
 * offset 0. off * w_scale is exact (a power of two). */
static inline __attribute__((always_inline)) __m512 fold_term(int bits, int offs, __m512 c,
                                                              __m512 sv, __m512 ov, __m512 gs) {
  const __m512 moff = _mm512_set1_ps(bits == 4 ? -8.0f : -128.0f);
  __m512 t = offs ? _mm512_fmadd_ps(moff, sv, ov) : _mm512_mul_ps(moff, sv);
  return _mm512_fmadd_ps(t, gs, c);
}

#ifndef PF_TILES
#define PF_TILES 2
#endif

/* The permutation spreading a block's 16 group scales over chunk cc's lanes (cpl = 4 or 8
 * chunks a block: groups of 32 or 64), for the folded block loops. */
static inline __attribute__((always_inline)) void block_perm_idx(const size_t cpl, __m512i idx[8]) {
  const int sh = cpl == 4 ? 2 : 3;
  const __m512i iota = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  const __m512i gidx = _mm512_srli_epi32(iota, sh);
  for (size_t cc = 0; cc < cpl; cc++)
    idx[cc] = _mm512_add_epi32(gidx, _mm512_set1_epi32((int)(cc << (4 - sh))));
}

/* tile_1x8's whole blocks of 16 groups in the folded form (f16 scales, 1 << gl_shift = cpl
 * chunks a block, every byte in the rows: no masks), as pair_fold_blocks does for pairs: the same
 * operations in the same order as tile_1x8's chunk loop (so the same bits), the chunks of a block
 * unrolled with their permutation indices in registers and the per-chunk bookkeeping (masks,
 * the block test, the scale prefetch loop) out of the loop (SmolLM2's 576 -> 1536, Zen 4, 1
 * thread, in L2: 21.4-22.4 -> 22.1-24.1 GB/s with offsets, 17.8-24.3 -> 25.5-26.1 without). Returns
 * the number of chunks done. */
static inline __attribute__((always_inline)) size_t
tile_fold_blocks_n(int bits, int offs, const size_t cpl, const uint8_t *a,
                   const uint8_t *const wr[8], const char *const sr[8], const char *const orow[8],
                   const uint8_t *pf, const char *pfs, const char *pfo, size_t ws_lines,
                   const em_qgemm_params *p, __m512 acc[8]) {
  const size_t nblk = p->kbytes / 64 / cpl;
  __m512i idx[8];
  block_perm_idx(cpl, idx);
  const float *sbv = (const float *)(const void *)(a + p->off_sb);
  for (size_t b = 0; b < nblk; b++) {
    const size_t g0 = b * 16, cb = b * cpl;
    const __m512 gs = _mm512_loadu_ps(p->gsum + g0), sb = _mm512_loadu_ps(sbv + g0);
    __m512 sv[8];
#pragma GCC unroll 8
    for (size_t j = 0; j < 8; j++) {
      const uint16_t *s16 = (const uint16_t *)(const void *)sr[j] + g0;
      sv[j] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)s16));
      __m512 ov = _mm512_setzero_ps();
      if (offs) {
        const uint16_t *o16 = (const uint16_t *)(const void *)orow[j] + g0;
        ov = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)o16));
      }
      acc[j] = fold_term(bits, offs, acc[j], sv[j], ov, gs);
      sv[j] = _mm512_mul_ps(sv[j], sb);
    }
#pragma GCC unroll 8
    for (size_t cc = 0; cc < cpl; cc++) {
      const size_t c = cb + cc, off = c * 64;
      if (c < ws_lines) { /* one scale (offset) line a chunk: tile_1x8's ws_per 1 */
        _mm_prefetch(pfs + c * 64, _MM_HINT_T0);
        if (offs) _mm_prefetch(pfo + c * 64, _MM_HINT_T0);
      }
      const __m512i a0 = in_reg(_mm512_load_si512(a + off));
      const __m512i a1 = bits == 4 ? in_reg(_mm512_load_si512(a + p->off_a1 + off)) : a0;
#pragma GCC unroll 8
      for (size_t j = 0; j < 8; j++) {
        __m512i lo, hi;
        _mm_prefetch((const char *)(pf + (c * 8 + j) * 64), _MM_HINT_T0);
        decode(bits, wr[j] + off, ~(__mmask64)0, &lo, &hi);
        acc[j] = mac_fold(bits, acc[j], a0, a1, lo, hi, _mm512_permutexvar_ps(idx[cc], sv[j]));
      }
    }
  }
  return nblk * cpl;
}

/* One activation row x 8 weight rows (decode: a GEMV streaming the weights). The activation
 * operands of a chunk are loaded once for the 8 columns; columns past nc repeat the last one.
 * OFFS: the offsets' term too, lane-wise: offset(lane's group) * sf(lane), summed with the rest.
 * HALF: the scales and offsets are f16 (converted per chunk as they are used). */
static inline __attribute__((always_inline)) void
tile_1x8(int bits, int offs, int half, int fold, size_t nc, const uint8_t *a, const uint8_t *w,
         const void *ws, const float *bias, float *y, const em_qgemm_params *p) {
  const uint8_t *wr[8];
  const char *sr[8], *orow[8];
  const size_t esz = half ? 2 : 4; /* bytes per scale */
  for (size_t j = 0; j < 8; j++) {
    size_t jj = j < nc ? j : nc - 1;
    wr[j] = w + jj * p->w_stride;
    sr[j] = (const char *)ws + jj * p->ws_stride * esz;
    orow[j] = offs ? (const char *)p->off_base + (sr[j] - (const char *)p->ws_base) : sr[j];
  }
  const __m512i iota = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  const __m512i gidx = _mm512_srl_epi32(iota, _mm_cvtsi32_si128((int)(p->gl_shift & 31)));
  const size_t n_chunks = (p->kbytes + 63) / 64;
  __m512 c0 = _mm512_setzero_ps(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0, c6 = c0, c7 = c0;
  const uint8_t *pf = w + PF_TILES * 8 * p->w_stride;
  /* The same tile's scales (and offsets): 8 rows of ws_stride floats each, contiguous, spread
   * over the chunks (with groups of 32, a q4 row's scales and offsets are half its bytes). */
  const char *pfs = sr[0] + PF_TILES * 8 * p->ws_stride * esz;
  const char *pfo = offs ? orow[0] + PF_TILES * 8 * p->ws_stride * esz : NULL;
  const size_t ws_lines = (8 * p->ws_stride * esz + 63) / 64;
  const size_t ws_per = (ws_lines + n_chunks - 1) / n_chunks;
  /* f16 with several groups per chunk (gl_shift < 4): the 16 scales (offsets) of 16 groups are
   * loaded and converted once per column for the 2^gl_shift chunks they cover, each chunk then
   * spreading its own with one permute; the offsets' term is added there too, once per 16
   * groups, from the row's group sums (p->gsum) instead of lane by lane in every chunk. */
  const unsigned sh = p->gl_shift;
  const int hoist = half && sh < 4;
  const size_t cpl = hoist ? (size_t)1 << sh : 1; /* chunks per 16 groups */
  __m512 sv[8], ov[8];
  for (size_t j = 0; j < 8; j++) sv[j] = ov[j] = _mm512_setzero_ps();
  const int pc = sh >= 32; /* per channel: the row's one scale (offset), broadcast once */
  for (size_t j = 0; pc && j < 8; j++) {
    sv[j] = chan_scale(sr[j], half);
    if (offs) ov[j] = chan_scale(orow[j], half);
  }
  size_t c_begin = 0;
  if (fold && hoist && ws_per == 1 && (sh == 2 || sh == 3)) {
    __m512 acc[8] = {c0, c1, c2, c3, c4, c5, c6, c7};
    c_begin =
        sh == 2
            ? tile_fold_blocks_n(bits, offs, 4, a, wr, sr, orow, pf, pfs, pfo, ws_lines, p, acc)
            : tile_fold_blocks_n(bits, offs, 8, a, wr, sr, orow, pf, pfs, pfo, ws_lines, p, acc);
    c0 = acc[0], c1 = acc[1], c2 = acc[2], c3 = acc[3], c4 = acc[4], c5 = acc[5], c6 = acc[6];
    c7 = acc[7];
  }
  for (size_t c = c_begin; c < n_chunks; c++) {
    size_t lanes, off = c * 64;
    __m512i idx = gidx;
    if (hoist) {
      size_t cc = c & (cpl - 1);
      if (cc == 0) {
        size_t g0 = (c * 16) >> sh, rem = p->ws_stride - g0;
        __mmask32 gm = rem >= 16 ? (__mmask32)0xFFFF : (__mmask32)((1u << rem) - 1);
        for (size_t j = 0; j < 8; j++) {
          const uint16_t *s16 = (const uint16_t *)(const void *)sr[j] + g0;
          sv[j] = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_maskz_loadu_epi16(gm, s16)));
          if (offs) {
            const uint16_t *o16 = (const uint16_t *)(const void *)orow[j] + g0;
            ov[j] = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_maskz_loadu_epi16(gm, o16)));
          }
        }
        if (fold) {
          const __m512 gs = _mm512_maskz_loadu_ps((__mmask16)gm, p->gsum + g0);
          const __m512 sb =
              _mm512_maskz_loadu_ps((__mmask16)gm, (const float *)(a + p->off_sb) + g0);
#define FOLD(J) c##J = fold_term(bits, offs, c##J, sv[J], ov[J], gs)
          FOLD(0);
          FOLD(1);
          FOLD(2);
          FOLD(3);
          FOLD(4);
          FOLD(5);
          FOLD(6);
          FOLD(7);
#undef FOLD
          for (size_t j = 0; j < 8; j++) sv[j] = _mm512_mul_ps(sv[j], sb);
        } else if (offs) { /* the 16 groups' offset terms at once: offset(g) * S(g), lane g */
          const __m512 gs = _mm512_maskz_loadu_ps((__mmask16)gm, p->gsum + g0);
          c0 = _mm512_fmadd_ps(ov[0], gs, c0);
          c1 = _mm512_fmadd_ps(ov[1], gs, c1);
          c2 = _mm512_fmadd_ps(ov[2], gs, c2);
          c3 = _mm512_fmadd_ps(ov[3], gs, c3);
          c4 = _mm512_fmadd_ps(ov[4], gs, c4);
          c5 = _mm512_fmadd_ps(ov[5], gs, c5);
          c6 = _mm512_fmadd_ps(ov[6], gs, c6);
          c7 = _mm512_fmadd_ps(ov[7], gs, c7);
        }
      }
      idx = _mm512_add_epi32(gidx, _mm512_set1_epi32((int)(cc << (4 - sh))));
    }
    for (size_t i = c * ws_per; i < (c + 1) * ws_per && i < ws_lines; i++) {
      _mm_prefetch(pfs + i * 64, _MM_HINT_T0);
      if (offs) _mm_prefetch(pfo + i * 64, _MM_HINT_T0);
    }
    __mmask64 mask = chunk_mask(c, p, &lanes);
    const __m512i a0 = in_reg(_mm512_load_si512(a + off));
    const __m512i a1 = bits == 4 ? in_reg(_mm512_load_si512(a + p->off_a1 + off)) : a0;
    const __m512i corr =
        fold ? _mm512_setzero_si512() : in_reg(_mm512_load_si512(a + p->off_corr + off));
    const __m512 sl =
        fold ? _mm512_setzero_ps() : _mm512_load_ps((const float *)(a + p->off_sl) + c * 16);
    const __m512 sf = offs ? _mm512_load_ps((const float *)(a + p->off_sf) + c * 16) : sl;
    __m512i lo, hi;
    /* The tile PF_TILES ahead (its 8 rows are one contiguous block), line by line in address
     * order: 8 lines per chunk cover it in the tile's n_chunks steps. Rows of 288-576 bytes read
     * 8 at a time, chunk by chunk, are a pattern the hardware prefetchers follow poorly. */
#define SCALE(ptr, vec)                                                                            \
  (hoist  ? _mm512_permutexvar_ps(idx, vec)                                                        \
   : pc   ? (vec)                                                                                  \
   : half ? wscale_h((const uint16_t *)(const void *)(ptr), c, lanes, p, gidx)                     \
          : wscale((const float *)(const void *)(ptr), c, lanes, p, gidx))
#define COL(J)                                                                                     \
  _mm_prefetch((const char *)(pf + (c * 8 + J) * 64), _MM_HINT_T0);                                \
  decode(bits, wr[J] + off, mask, &lo, &hi);                                                       \
  c##J = fold ? mac_fold(bits, c##J, a0, a1, lo, hi, _mm512_permutexvar_ps(idx, sv[J]))            \
              : mac_pre(bits, c##J, a0, a1, corr, sl, lo, hi, SCALE(sr[J], sv[J]));                \
  if (offs && !hoist) c##J = _mm512_fmadd_ps(SCALE(orow[J], ov[J]), sf, c##J)
    COL(0);
    COL(1);
    COL(2);
    COL(3);
    COL(4);
    COL(5);
    COL(6);
    COL(7);
#undef COL
#undef SCALE
  }
  store_row(reduce4(c0, c1, c2, c3), nc < 4 ? nc : 4, bias, y);
  if (nc > 4) store_row(reduce4(c4, c5, c6, c7), nc - 4, bias ? bias + 4 : NULL, y + 4);
}

/* ---- decode streaming two weight rows at a time (p->pairs) ----
 *
 * tile_1x8 reads its 8 rows chunk by chunk: 8 weight streams at once. On Zen 4 one core streams
 * far faster from two adjacent rows (one contiguous run of 2 * w_stride bytes) prefetched in
 * address order (bench/results/llm_1b_zen4_2026-12-03.md), so tile_1x8p runs the tile's rows in
 * pairs, each over the whole row. Its price: the packed activations are read once per pair
 * instead of once per tile, so the driver asks for it only while they stay in L1 beside the
 * weight stream (EM_QL_PAIRS_MAX_ACT_BYTES). Per column the arithmetic and its order are those of
 * tile_1x8, so both give the same bits. */

/* pair_1x2's prefetches for chunk c (byte offset off): its share of the scale (offset) lines
 * `ahead` pairs on, and two lines of that pair's weights in address order (into L2 when to_l2). */
static inline __attribute__((always_inline)) void pair_prefetch(size_t c, size_t off, int offs,
                                                                const char *pfs, const char *pfo,
                                                                const uint8_t *pf, size_t ws_lines,
                                                                size_t ws_per, int to_l2) {
  for (size_t i = c * ws_per; i < (c + 1) * ws_per && i < ws_lines; i++) {
    _mm_prefetch(pfs + i * 64, _MM_HINT_T0);
    if (offs) _mm_prefetch(pfo + i * 64, _MM_HINT_T0);
  }
  if (to_l2) {
    _mm_prefetch((const char *)(pf + 2 * off), _MM_HINT_T1);
    _mm_prefetch((const char *)(pf + 2 * off + 64), _MM_HINT_T1);
  } else {
    _mm_prefetch((const char *)(pf + 2 * off), _MM_HINT_T0);
    _mm_prefetch((const char *)(pf + 2 * off + 64), _MM_HINT_T0);
  }
}

static inline __attribute__((always_inline)) size_t
pair_fold_blocks_n(int bits, int offs, const size_t cpl, const uint8_t *a, const uint8_t *w0,
                   const uint8_t *w1, const char *s0, const char *s1, const char *o0,
                   const char *o1, const char *pfs, const char *pfo, const uint8_t *pf,
                   size_t ws_lines, size_t ws_per, int to_l2, const em_qgemm_params *p, __m512 *r0,
                   __m512 *r1) {
  const size_t nblk = p->kbytes / 64 / cpl;
  __m512i idx[8];
  block_perm_idx(cpl, idx);
  const uint16_t *s016 = (const uint16_t *)(const void *)s0;
  const uint16_t *s116 = (const uint16_t *)(const void *)s1;
  const uint16_t *o016 = (const uint16_t *)(const void *)o0;
  const uint16_t *o116 = (const uint16_t *)(const void *)o1;
  const float *sbv = (const float *)(const void *)(a + p->off_sb);
  __m512 c0 = *r0, c1 = *r1;
  for (size_t b = 0; b < nblk; b++) {
    const size_t g0 = b * 16, cb = b * cpl;
    __m512 sv0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(s016 + g0)));
    __m512 sv1 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(s116 + g0)));
    __m512 ov0 = _mm512_setzero_ps(), ov1 = ov0;
    if (offs) {
      ov0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(o016 + g0)));
      ov1 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(o116 + g0)));
    }
    const __m512 gs = _mm512_loadu_ps(p->gsum + g0), sb = _mm512_loadu_ps(sbv + g0);
    c0 = fold_term(bits, offs, c0, sv0, ov0, gs);
    c1 = fold_term(bits, offs, c1, sv1, ov1, gs);
    sv0 = _mm512_mul_ps(sv0, sb);
    sv1 = _mm512_mul_ps(sv1, sb);
#pragma GCC unroll 8
    for (size_t cc = 0; cc < cpl; cc++) {
      const size_t off = (cb + cc) * 64;
      pair_prefetch(cb + cc, off, offs, pfs, pfo, pf, ws_lines, ws_per, to_l2);
      const __m512i a0 = in_reg(_mm512_load_si512(a + off));
      const __m512i a1 = bits == 4 ? in_reg(_mm512_load_si512(a + p->off_a1 + off)) : a0;
      __m512i lo, hi;
      decode(bits, w0 + off, ~(__mmask64)0, &lo, &hi);
      c0 = mac_fold(bits, c0, a0, a1, lo, hi, _mm512_permutexvar_ps(idx[cc], sv0));
      decode(bits, w1 + off, ~(__mmask64)0, &lo, &hi);
      c1 = mac_fold(bits, c1, a0, a1, lo, hi, _mm512_permutexvar_ps(idx[cc], sv1));
    }
  }
  *r0 = c0;
  *r1 = c1;
  return nblk * cpl;
}

/* The folded decode's whole blocks of 16 groups (1 << sh chunks, every byte in the row: no masks)
 * for pair_1x2: the same operations in the same order as its chunk loop, so the same bits, with
 * the per-chunk bookkeeping (masks, the block test, the group index, the scale prefetch loop)
 * hoisted out (the loop was front-end bound on Zen 4: ~10 cycles a chunk in L2 for ~9 vector
 * operations; now +10-18 % in L2, the same from DRAM). The scale prefetches stay spread over the
 * chunks as in pair_1x2: issued at once per block they cost 10-20 % of the DRAM rate at K = 2048
 * (bench/linear_q.c, Zen 4). The chunks of a block unrolled (groups of 32 or 64: 4 or 8 chunks)
 * so their permutation indices stay in registers. Returns the number of chunks done. */
static inline __attribute__((always_inline)) size_t
pair_fold_blocks(int bits, int offs, const uint8_t *a, const uint8_t *w0, const uint8_t *w1,
                 const char *s0, const char *s1, const char *o0, const char *o1, const char *pfs,
                 const char *pfo, const uint8_t *pf, size_t ws_lines, size_t ws_per, int to_l2,
                 const em_qgemm_params *p, __m512 *r0, __m512 *r1) {
  /* specialised on the common case's constants: with f16 scales a pair's scale (offset) lines
   * never outnumber its chunks (ws_per 1), and on the prefetch level */
#define EM_PFB(CPL, WSP, L2)                                                                       \
  pair_fold_blocks_n(bits, offs, CPL, a, w0, w1, s0, s1, o0, o1, pfs, pfo, pf, ws_lines, WSP, L2,  \
                     p, r0, r1)
  if (p->gl_shift != 2 && p->gl_shift != 3) return 0;
  if (ws_per != 1) return p->gl_shift == 2 ? EM_PFB(4, ws_per, to_l2) : EM_PFB(8, ws_per, to_l2);
  if (p->gl_shift == 2) return to_l2 ? EM_PFB(4, 1, 1) : EM_PFB(4, 1, 0);
  return to_l2 ? EM_PFB(8, 1, 1) : EM_PFB(8, 1, 0);
#undef EM_PFB
}

/* Rows j0 and j1 = j0 + 1 of a tile (w0, w1 = w0 + w_stride; w1 == w0 when j0 is the last
 * column, its results then dropped) over all chunks into *r0 / *r1, prefetching the pair `ahead`
 * pairs on, two lines a chunk in address order (into L2 when to_l2, leaving L1 to the
 * activations). */
static inline __attribute__((always_inline)) void
pair_1x2(int bits, int offs, int half, int fold, const uint8_t *a, const uint8_t *w0,
         const uint8_t *w1, const char *s0, const char *s1, const char *o0, const char *o1,
         size_t ahead, int to_l2, const em_qgemm_params *p, __m512 *r0, __m512 *r1) {
  const __m512i iota = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  const __m512i gidx = _mm512_srl_epi32(iota, _mm_cvtsi32_si128((int)(p->gl_shift & 31)));
  const size_t n_chunks = (p->kbytes + 63) / 64, esz = half ? 2 : 4;
  const uint8_t *pf = w0 + ahead * 2 * p->w_stride;
  /* the pair's scales (offsets): 2 rows of ws_stride elements, contiguous, over the chunks */
  const char *pfs = s0 + ahead * 2 * p->ws_stride * esz;
  const char *pfo = offs ? o0 + ahead * 2 * p->ws_stride * esz : NULL;
  const size_t ws_lines = (2 * p->ws_stride * esz + 63) / 64;
  const size_t ws_per = (ws_lines + n_chunks - 1) / n_chunks;
  const unsigned sh = p->gl_shift;
  const int hoist = half && sh < 4; /* as in tile_1x8 */
  const size_t cpl = hoist ? (size_t)1 << sh : 1;
  __m512 c0 = _mm512_setzero_ps(), c1 = c0;
  __m512 sv0 = c0, sv1 = c0, ov0 = c0, ov1 = c0;
  const int pc = sh >= 32; /* as in tile_1x8 */
  if (pc) {
    sv0 = chan_scale(s0, half);
    sv1 = chan_scale(s1, half);
    if (offs) {
      ov0 = chan_scale(o0, half);
      ov1 = chan_scale(o1, half);
    }
  }
  size_t c0_done = 0;
  if (fold && hoist)
    c0_done = pair_fold_blocks(bits, offs, a, w0, w1, s0, s1, o0, o1, pfs, pfo, pf, ws_lines,
                               ws_per, to_l2, p, &c0, &c1);
  for (size_t c = c0_done; c < n_chunks; c++) {
    size_t lanes, off = c * 64;
    __m512i idx = gidx;
    if (hoist) {
      size_t cc = c & (cpl - 1);
      if (cc == 0) {
        size_t g0 = (c * 16) >> sh, rem = p->ws_stride - g0;
        __mmask32 gm = rem >= 16 ? (__mmask32)0xFFFF : (__mmask32)((1u << rem) - 1);
#define LOADH(ptr)                                                                                 \
  _mm512_cvtph_ps(_mm512_castsi512_si256(                                                          \
      _mm512_maskz_loadu_epi16(gm, (const uint16_t *)(const void *)(ptr) + g0)))
        sv0 = LOADH(s0);
        sv1 = LOADH(s1);
        if (offs) {
          ov0 = LOADH(o0);
          ov1 = LOADH(o1);
        }
        if (fold) { /* as in tile_1x8 */
          const __m512 gs = _mm512_maskz_loadu_ps((__mmask16)gm, p->gsum + g0);
          const __m512 sb =
              _mm512_maskz_loadu_ps((__mmask16)gm, (const float *)(a + p->off_sb) + g0);
          c0 = fold_term(bits, offs, c0, sv0, ov0, gs);
          c1 = fold_term(bits, offs, c1, sv1, ov1, gs);
          sv0 = _mm512_mul_ps(sv0, sb);
          sv1 = _mm512_mul_ps(sv1, sb);
        } else if (offs) {
          const __m512 gs = _mm512_maskz_loadu_ps((__mmask16)gm, p->gsum + g0);
          c0 = _mm512_fmadd_ps(ov0, gs, c0);
          c1 = _mm512_fmadd_ps(ov1, gs, c1);
        }
#undef LOADH
      }
      idx = _mm512_add_epi32(gidx, _mm512_set1_epi32((int)(cc << (4 - sh))));
    }
    pair_prefetch(c, off, offs, pfs, pfo, pf, ws_lines, ws_per, to_l2);
    __mmask64 mask = chunk_mask(c, p, &lanes);
    const __m512i a0 = in_reg(_mm512_load_si512(a + off));
    const __m512i a1 = bits == 4 ? in_reg(_mm512_load_si512(a + p->off_a1 + off)) : a0;
    const __m512i corr =
        fold ? _mm512_setzero_si512() : in_reg(_mm512_load_si512(a + p->off_corr + off));
    const __m512 sl =
        fold ? _mm512_setzero_ps() : _mm512_load_ps((const float *)(a + p->off_sl) + c * 16);
    __m512i lo, hi;
#define SCALE(ptr, vec)                                                                            \
  (hoist  ? _mm512_permutexvar_ps(idx, vec)                                                        \
   : pc   ? (vec)                                                                                  \
   : half ? wscale_h((const uint16_t *)(const void *)(ptr), c, lanes, p, gidx)                     \
          : wscale((const float *)(const void *)(ptr), c, lanes, p, gidx))
    decode(bits, w0 + off, mask, &lo, &hi);
    c0 = fold ? mac_fold(bits, c0, a0, a1, lo, hi, _mm512_permutexvar_ps(idx, sv0))
              : mac_pre(bits, c0, a0, a1, corr, sl, lo, hi, SCALE(s0, sv0));
    decode(bits, w1 + off, mask, &lo, &hi);
    c1 = fold ? mac_fold(bits, c1, a0, a1, lo, hi, _mm512_permutexvar_ps(idx, sv1))
              : mac_pre(bits, c1, a0, a1, corr, sl, lo, hi, SCALE(s1, sv1));
    if (offs && !hoist) {
      const __m512 sf = _mm512_load_ps((const float *)(a + p->off_sf) + c * 16);
      c0 = _mm512_fmadd_ps(SCALE(o0, ov0), sf, c0);
      c1 = _mm512_fmadd_ps(SCALE(o1, ov1), sf, c1);
    }
#undef SCALE
  }
  *r0 = c0;
  *r1 = c1;
}

/* tile_1x8's result from four pairs of rows streamed one after another (pair_1x2); columns past
 * nc are not computed. The prefetch runs about 8 KiB ahead, at least one pair. */
static inline __attribute__((always_inline)) void
tile_1x8p(int bits, int offs, int half, int fold, size_t nc, const uint8_t *a, const uint8_t *w,
          const void *ws, const float *bias, float *y, const em_qgemm_params *p) {
  const size_t esz = half ? 2 : 4, pair_bytes = 2 * p->w_stride;
  const size_t ahead = pair_bytes >= 8192 ? 1 : 8192 / pair_bytes;
  const int to_l2 = em_qpair_act_bytes(bits, p->kbytes, fold) > EM_QL_PAIRS_L1_ACT_BYTES;
  const char *wsc = (const char *)ws;
  const char *osc = offs ? (const char *)p->off_base + (wsc - (const char *)p->ws_base) : wsc;
  __m512 c[8];
  for (size_t j = 0; j < 8; j++) c[j] = _mm512_setzero_ps();
  for (size_t j0 = 0; j0 < nc; j0 += 2) {
    size_t j1 = j0 + 1 < nc ? j0 + 1 : j0;
    pair_1x2(bits, offs, half, fold, a, w + j0 * p->w_stride, w + j1 * p->w_stride,
             wsc + j0 * p->ws_stride * esz, wsc + j1 * p->ws_stride * esz,
             osc + j0 * p->ws_stride * esz, osc + j1 * p->ws_stride * esz, ahead, to_l2, p, &c[j0],
             &c[j0 + 1]);
  }
  store_row(reduce4(c[0], c[1], c[2], c[3]), nc < 4 ? nc : 4, bias, y);
  if (nc > 4) store_row(reduce4(c[4], c[5], c[6], c[7]), nc - 4, bias ? bias + 4 : NULL, y + 4);
}

/* Up to 4 activation rows x 4 weight rows (prefill): each weight chunk is decoded once for the
 * four rows; rows past mr repeat the last one (computed, never stored). */
static inline __attribute__((always_inline)) void
tile_4x4(int bits, size_t mr, size_t nc, const uint8_t *a, const uint8_t *w, const float *ws,
         const float *bias, float *y, size_t ldy, const em_qgemm_params *p) {
  const uint8_t *a0 = a, *a1 = mr > 1 ? a0 + p->a_stride : a0;
  const uint8_t *a2 = mr > 2 ? a1 + p->a_stride : a1, *a3 = mr > 3 ? a2 + p->a_stride : a2;
  COLUMNS;
  __m512 c00 = _mm512_setzero_ps(), c01 = c00, c02 = c00, c03 = c00, c10 = c00, c11 = c00,
         c12 = c00, c13 = c00, c20 = c00, c21 = c00, c22 = c00, c23 = c00, c30 = c00, c31 = c00,
         c32 = c00, c33 = c00;
  for (size_t c = 0; c < n_chunks; c++) {
    size_t lanes;
    __mmask64 mask = chunk_mask(c, p, &lanes);
    DECODE(0);
    c00 = mac(bits, c00, a0, c, lo0, hi0, sw0, p);
    c10 = mac(bits, c10, a1, c, lo0, hi0, sw0, p);
    c20 = mac(bits, c20, a2, c, lo0, hi0, sw0, p);
    c30 = mac(bits, c30, a3, c, lo0, hi0, sw0, p);
    DECODE(1);
    c01 = mac(bits, c01, a0, c, lo1, hi1, sw1, p);
    c11 = mac(bits, c11, a1, c, lo1, hi1, sw1, p);
    c21 = mac(bits, c21, a2, c, lo1, hi1, sw1, p);
    c31 = mac(bits, c31, a3, c, lo1, hi1, sw1, p);
    DECODE(2);
    c02 = mac(bits, c02, a0, c, lo2, hi2, sw2, p);
    c12 = mac(bits, c12, a1, c, lo2, hi2, sw2, p);
    c22 = mac(bits, c22, a2, c, lo2, hi2, sw2, p);
    c32 = mac(bits, c32, a3, c, lo2, hi2, sw2, p);
    DECODE(3);
    c03 = mac(bits, c03, a0, c, lo3, hi3, sw3, p);
    c13 = mac(bits, c13, a1, c, lo3, hi3, sw3, p);
    c23 = mac(bits, c23, a2, c, lo3, hi3, sw3, p);
    c33 = mac(bits, c33, a3, c, lo3, hi3, sw3, p);
  }
  store_row(reduce4(c00, c01, c02, c03), nc, bias, y);
  if (mr > 1) store_row(reduce4(c10, c11, c12, c13), nc, bias, y + ldy);
  if (mr > 2) store_row(reduce4(c20, c21, c22, c23), nc, bias, y + 2 * ldy);
  if (mr > 3) store_row(reduce4(c30, c31, c32, c33), nc, bias, y + 3 * ldy);
}

/* ---- activation quantization straight into the packed row ---- */

/* One block of 32: int8 values (elements 0-15 in *b0, 16-31 in *b1) and its scale, exactly as
 * linear_q.c's quantize_row (f32 scale and reciprocal, round half to even by the MXCSR default). */
static inline float quantize_block(const float *x, __m128i *b0, __m128i *b1) {
  __m512 x0 = _mm512_loadu_ps(x), x1 = _mm512_loadu_ps(x + 16);
  float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
  if (_mm512_cmp_ps_mask(x0, x0, _CMP_UNORD_Q) | _mm512_cmp_ps_mask(x1, x1, _CMP_UNORD_Q))
    amax = NAN; /* NaN propagates to the scale, as in torch.amax */
  float s = amax / 127.0f, inv = s > 0.0f ? 1.0f / s : 0.0f;
  __m512 vi = _mm512_set1_ps(inv);
  *b0 = _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(x0, vi)));
  *b1 = _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(x1, vi)));
  return s;
}

#include "quantized/linear_q_pack_impl.h"

void em_qd8_q4_pack_ukernel__avx512vnni(const float *x, size_t k, uint8_t *row,
                                        const em_qgemm_params *p) {
  pack_q4_row(x, k, row, p);
}

void em_qd8_q8_pack_ukernel__avx512vnni(const float *x, size_t k, uint8_t *row,
                                        const em_qgemm_params *p) {
  pack_q8_row(x, k, row, p);
}

/* Rows of up to 4 x columns of up to 8: 1x8 for decode, two 4x4 tiles otherwise. */
static inline __attribute__((always_inline)) void gemm(int bits, size_t mr, size_t nc,
                                                       const uint8_t *a, const uint8_t *w,
                                                       const void *ws, const float *bias, float *y,
                                                       size_t ldy, const em_qgemm_params *p) {
  if (mr == 1) {
#define TILE(t)                                                                                    \
  if (p->fold && p->off_base)                                                                      \
    t(bits, 1, 1, 1, nc, a, w, ws, bias, y, p);                                                    \
  else if (p->fold)                                                                                \
    t(bits, 0, 1, 1, nc, a, w, ws, bias, y, p);                                                    \
  else if (p->half && p->off_base)                                                                 \
    t(bits, 1, 1, 0, nc, a, w, ws, bias, y, p);                                                    \
  else if (p->half)                                                                                \
    t(bits, 0, 1, 0, nc, a, w, ws, bias, y, p);                                                    \
  else if (p->off_base)                                                                            \
    t(bits, 1, 0, 0, nc, a, w, ws, bias, y, p);                                                    \
  else                                                                                             \
    t(bits, 0, 0, 0, nc, a, w, ws, bias, y, p)
    if (p->pairs) {
      TILE(tile_1x8p);
    } else {
      TILE(tile_1x8);
    }
#undef TILE
    return;
  }
  const float *wsf = ws; /* f32 here: the driver converts f16 scales for tiles of rows */
  tile_4x4(bits, mr, nc < 4 ? nc : 4, a, w, wsf, bias, y, ldy, p);
  if (nc > 4)
    tile_4x4(bits, mr, nc - 4, a, w + 4 * p->w_stride, wsf + 4 * p->ws_stride,
             bias ? bias + 4 : NULL, y + 4, ldy, p);
}

void em_qd8_qc4w_f32_gemm_ukernel_4x8__avx512vnni(size_t mr, size_t nc, const uint8_t *a,
                                                  const uint8_t *w, const void *ws,
                                                  const float *bias, float *y, size_t ldy,
                                                  const em_qgemm_params *p) {
  gemm(4, mr, nc, a, w, ws, bias, y, ldy, p);
}

void em_qd8_qc8w_f32_gemm_ukernel_4x8__avx512vnni(size_t mr, size_t nc, const uint8_t *a,
                                                  const uint8_t *w, const void *ws,
                                                  const float *bias, float *y, size_t ldy,
                                                  const em_qgemm_params *p) {
  gemm(8, mr, nc, a, w, ws, bias, y, ldy, p);
}

/* ---- f16 scales and offsets to f32 (linear_q.c converts a chunk of columns at a time) ---- */

void em_qd8_cvt_f16__avx512vnni(const uint16_t *src, float *dst, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + i))));
  if (i < n) {
    uint16_t t[16] = {0};
    memcpy(t, src + i, (n - i) * sizeof *t);
    __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(dst + i, m, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)t)));
  }
}

/* ---- the affine weights' offsets term (decode and short inputs) ---- */

void em_qd8_offsets__avx512vnni(size_t m, size_t n0, size_t n1, size_t groups, const float *gsum,
                                const float *offsets, const float *bias, float *y, size_t ldy) {
  for (size_t r = 0; r < m; r++) {
    const float *sg = gsum + r * groups;
    float *yr = y + r * ldy;
    for (size_t n = n0; n < n1; n += 16) {
      size_t nc = n1 - n < 16 ? n1 - n : 16;
      const float *o[16];
      for (size_t j = 0; j < 16; j++) o[j] = offsets + (n + (j < nc ? j : nc - 1)) * groups;
      __m512 c[16];
      for (size_t j = 0; j < 16; j++) c[j] = _mm512_setzero_ps();
      for (size_t g = 0; g < groups; g += 16) {
        __mmask16 mk = groups - g >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (groups - g)) - 1);
        const __m512 s = _mm512_maskz_loadu_ps(mk, sg + g);
        for (size_t j = 0; j < 16; j++)
          c[j] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mk, o[j] + g), s, c[j]);
      }
      __m512 sum = _mm512_castps128_ps512(reduce4(c[0], c[1], c[2], c[3]));
      sum = _mm512_insertf32x4(sum, reduce4(c[4], c[5], c[6], c[7]), 1);
      sum = _mm512_insertf32x4(sum, reduce4(c[8], c[9], c[10], c[11]), 2);
      sum = _mm512_insertf32x4(sum, reduce4(c[12], c[13], c[14], c[15]), 3);
      __mmask16 mn = (__mmask16)((1u << nc) - 1);
      __m512 v = _mm512_add_ps(_mm512_maskz_loadu_ps(mn, yr + n), sum);
      if (bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mn, bias + n));
      _mm512_mask_storeu_ps(yr + n, mn, v);
    }
  }
}

#else
typedef int em_linear_q_avx512vnni_unavailable; /* ISO C forbids an empty translation unit */
#endif
