/*
 * linear_q_prefill__avx512vnni.c — AVX-512 VNNI prefill kernel of ember::linear_q4 / linear_q8
 * (linear_q.h, em_qd8_prefill__avx512vnni): many activation rows against column-interleaved weight
 * tiles repacked per slab, the form for prompts (decode and short inputs use
 * linear_q_gemm__avx512vnni.c).
 *
 * Compiled with -mavx512f -mavx512bw -mavx512vnni (CMakeLists.txt) and chosen at run time only
 * when CPUID reports them (linear_q.c). Elsewhere this file is empty.
 */
#include "quantized/linear_q.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
#include <immintrin.h>
#include <string.h>

/* ---- prefill: column-interleaved tiles ----
 *
 * A tile holds EM_QTILE_N = 32 weight columns (two vectors of 16 lanes) for a slab of K, laid out
 * for vpdpbusd with the columns as lanes: per block of 32 elements, 8 "quads" i, each two 64-byte
 * vectors of 16 columns x 4 unsigned bytes. q4: quads 0-3 are the low nibbles of the row's bytes
 * 16b + 4i .. +3 (elements 2j+1, paired with the packed row's a0), quads 4-7 the high nibbles
 * (elements 2j, paired with a1); q8: quad i is elements 32b + 4i .. +3, offset by 128. Each
 * activation row then needs one broadcast 32-bit word per quad, int32 sums per block (started at
 * the block's correction bc), one scale per block and one offset term per group. */

#define PF_KC 1024 /* most K elements per slab (a multiple of 128, so of every group size) */
#define PF_MR 4    /* activation rows per micro-kernel call */

typedef struct pf_tile {
  uint8_t w[PF_KC * EM_QTILE_N];               /* PF_KC/32 blocks x 8 quads x 2 x 64 bytes */
  float ws[PF_KC / EM_QA_BLOCK * EM_QTILE_N];  /* per slab group: 32 column scales */
  float off[PF_KC / EM_QA_BLOCK * EM_QTILE_N]; /* per slab group: 32 column offsets */
} pf_tile;

/* Element i of an f32 (f16 NULL) or f16 scale / offset array, as f32. */
static inline float scale_at(const float *f32, const uint16_t *f16, size_t i) {
  return f16 ? _mm512_cvtss_f32(_mm512_cvtph_ps(_mm256_set1_epi16((short)f16[i]))) : f32[i];
}

/* Columns [n, n + nc) x slab [k0, k0 + kc) (groups g0 .. g0 + ng - 1) into the tile t. */
/* g[i] lane r = the 32-bit word i (i < 4) of the 16 bytes at src + r * stride, rows r < valid
 * (0 past them): what four gathers give, from 16 row loads and a 4x4 transpose of 32-bit words
 * in each 128-bit lane (gathers are microcoded and slow on Zen 4). Lane L of
 * z[j] holds row 4L + j, so after the transpose lane L of g[i] holds rows 4L..4L+3 in order. */
static inline void quads16(const uint8_t *src, size_t stride, size_t valid, __m512i g[4]) {
  __m512i z[4];
  for (size_t j = 0; j < 4; j++) {
    __m128i x[4];
    for (size_t l = 0; l < 4; l++) {
      size_t r = 4 * l + j;
      x[l] = r < valid ? _mm_loadu_si128((const __m128i *)(const void *)(src + r * stride))
                       : _mm_setzero_si128();
    }
    __m512i v = _mm512_castsi128_si512(x[0]); /* (immediates: also unoptimised builds) */
    v = _mm512_inserti32x4(v, x[1], 1);
    v = _mm512_inserti32x4(v, x[2], 2);
    z[j] = _mm512_inserti32x4(v, x[3], 3);
  }
  const __m512i t0 = _mm512_unpacklo_epi32(z[0], z[1]), t1 = _mm512_unpackhi_epi32(z[0], z[1]);
  const __m512i t2 = _mm512_unpacklo_epi32(z[2], z[3]), t3 = _mm512_unpackhi_epi32(z[2], z[3]);
  g[0] = _mm512_unpacklo_epi64(t0, t2);
  g[1] = _mm512_unpackhi_epi64(t0, t2);
  g[2] = _mm512_unpacklo_epi64(t1, t3);
  g[3] = _mm512_unpackhi_epi64(t1, t3);
}

static void pf_pack(const em_qprefill_args *a, size_t n, size_t nc, size_t k0, size_t kc, size_t g0,
                    size_t ng, pf_tile *t) {
  const em_qgemm_params *p = a->p;
  const __m512i low = _mm512_set1_epi8(0x0F), flip = _mm512_set1_epi8((char)0x80);
  size_t nb = kc / EM_QA_BLOCK;
  for (size_t v = 0; v < 2; v++) {
    size_t c0 = 16 * v, valid = nc > c0 ? (nc - c0 < 16 ? nc - c0 : 16) : 0;
    if (!valid) {
      for (size_t q = 0; q < nb * 8; q++)
        _mm512_store_si512(t->w + (q * 2 + v) * 64, _mm512_setzero_si512());
      continue;
    }
    const uint8_t *base = a->w + (n + c0) * p->w_stride;
    for (size_t b = 0; b < nb; b++) {
      uint8_t *dst = t->w + b * 8 * 128 + v * 64;
      if (a->bits == 4) {
        const uint8_t *src = base + k0 / 2 + 16 * b;
        __m512i g[4];
        quads16(src, p->w_stride, valid, g);
        for (size_t i = 0; i < 4; i++) {
          _mm512_store_si512(dst + i * 128, _mm512_and_si512(g[i], low));
          _mm512_store_si512(dst + (4 + i) * 128,
                             _mm512_and_si512(_mm512_srli_epi32(g[i], 4), low));
        }
      } else {
        const uint8_t *src = base + k0 + 32 * b;
        __m512i g[8];
        quads16(src, p->w_stride, valid, g);
        quads16(src + 16, p->w_stride, valid, g + 4);
        for (size_t i = 0; i < 8; i++)
          _mm512_store_si512(dst + i * 128, _mm512_xor_si512(g[i], flip));
      }
    }
  }
  size_t gs = p->ws_stride;
  int offs = a->offsets || a->off16;
  for (size_t g = 0; g < ng; g++)
    for (size_t c = 0; c < EM_QTILE_N; c++) {
      size_t i = (n + c) * gs + g0 + g;
      t->ws[g * EM_QTILE_N + c] = c < nc ? scale_at(a->ws, a->ws16, i) : 0.0f;
      if (offs) t->off[g * EM_QTILE_N + c] = c < nc ? scale_at(a->offsets, a->off16, i) : 0.0f;
    }
}

static inline int32_t word_at(const uint8_t *ptr) {
  int32_t v;
  memcpy(&v, ptr, sizeof v);
  return v;
}

/* Rows [0, mr) (mr <= PF_MR; rows past mr repeat the last) of the slab whose first block is b0
 * (nb blocks, groups from g0) against tile t: y[r, 0..nc) = (first ? 0 : y) + the slab's terms
 * (+ bias when last). */
static inline __attribute__((always_inline)) void pf_rows(int bits, size_t mr, const uint8_t *a,
                                                          const em_qprefill_args *ar, size_t b0,
                                                          size_t nb, size_t g0, const pf_tile *t,
                                                          const float *gsum, float *y, size_t nc,
                                                          int first, const float *bias) {
  const em_qgemm_params *p = ar->p;
  const size_t bpg = ar->group / EM_QA_BLOCK, groups = ar->k / ar->group, ldy = ar->n;
  const size_t lpb = bits == 4 ? 4 : 8; /* packed-row lanes per block (for its a_scale) */
  const uint8_t *row[PF_MR];
  for (size_t r = 0; r < PF_MR; r++) row[r] = a + (r < mr ? r : mr - 1) * p->a_stride;
  const __mmask16 m0 = nc >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << nc) - 1);
  const __mmask16 m1 = nc >= 32  ? (__mmask16)0xFFFF
                       : nc > 16 ? (__mmask16)((1u << (nc - 16)) - 1)
                                 : 0;
  __m512 o[PF_MR][2];
  for (size_t r = 0; r < PF_MR; r++) {
    size_t rr = r < mr ? r : mr - 1;
    o[r][0] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m0, y + rr * ldy);
    o[r][1] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m1, y + rr * ldy + 16);
  }
  for (size_t b = 0; b < nb; b++) {
    const size_t gb = b0 + b, gi = gb / bpg - g0;
    const uint8_t *w = t->w + b * 8 * 128;
    __m512i s[PF_MR][2];
    const uint8_t *pa[PF_MR], *pb[PF_MR];
    for (size_t r = 0; r < PF_MR; r++) {
      s[r][0] = s[r][1] = _mm512_set1_epi32(((const int32_t *)(row[r] + p->off_bc))[gb]);
      pa[r] = bits == 4 ? row[r] + 16 * gb : row[r] + 32 * gb;
      pb[r] = bits == 4 ? row[r] + p->off_a1 + 16 * gb : row[r] + 32 * gb + 16;
    }
    for (size_t i = 0; i < 8; i++) {
      const __m512i w0 = _mm512_load_si512(w + i * 128), w1 = _mm512_load_si512(w + i * 128 + 64);
      for (size_t r = 0; r < PF_MR; r++) {
        const __m512i x = _mm512_set1_epi32(word_at(i < 4 ? pa[r] + 4 * i : pb[r] + 4 * (i - 4)));
        s[r][0] = _mm512_dpbusd_epi32(s[r][0], w0, x);
        s[r][1] = _mm512_dpbusd_epi32(s[r][1], w1, x);
      }
    }
    const __m512 ws0 = _mm512_load_ps(t->ws + gi * EM_QTILE_N);
    const __m512 ws1 = _mm512_load_ps(t->ws + gi * EM_QTILE_N + 16);
    for (size_t r = 0; r < PF_MR; r++) {
      const __m512 sa = _mm512_set1_ps(((const float *)(row[r] + p->off_sl))[gb * lpb]);
      o[r][0] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(s[r][0]), ws0), sa, o[r][0]);
      o[r][1] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(s[r][1]), ws1), sa, o[r][1]);
    }
    if ((ar->offsets || ar->off16) && gb % bpg == bpg - 1) {
      const __m512 f0 = _mm512_load_ps(t->off + gi * EM_QTILE_N);
      const __m512 f1 = _mm512_load_ps(t->off + gi * EM_QTILE_N + 16);
      for (size_t r = 0; r < PF_MR; r++) {
        const __m512 sg = _mm512_set1_ps(gsum[(r < mr ? r : mr - 1) * groups + gb / bpg]);
        o[r][0] = _mm512_fmadd_ps(sg, f0, o[r][0]);
        o[r][1] = _mm512_fmadd_ps(sg, f1, o[r][1]);
      }
    }
  }
  if (bias) {
    const __m512 b0v = _mm512_maskz_loadu_ps(m0, bias), b1v = _mm512_maskz_loadu_ps(m1, bias + 16);
    for (size_t r = 0; r < PF_MR; r++) {
      o[r][0] = _mm512_add_ps(o[r][0], b0v);
      o[r][1] = _mm512_add_ps(o[r][1], b1v);
    }
  }
  for (size_t r = 0; r < mr; r++) {
    _mm512_mask_storeu_ps(y + r * ldy, m0, o[r][0]);
    _mm512_mask_storeu_ps(y + r * ldy + 16, m1, o[r][1]);
  }
}

static void pf_run(int bits, const em_qprefill_args *a, size_t n0, size_t n1) {
  pf_tile tile __attribute__((aligned(64))); /* 40 KiB of stack, reused by every slab */
  const em_qgemm_params *p = a->p;
  size_t k = a->k, slabs = (k + PF_KC - 1) / PF_KC, kc = (k + slabs - 1) / slabs;
  kc = (kc + 127) / 128 * 128;
  size_t groups = k / a->group;
  for (size_t n = n0; n < n1; n += EM_QTILE_N) {
    size_t nc = n1 - n < EM_QTILE_N ? n1 - n : EM_QTILE_N;
    for (size_t k0 = 0; k0 < k; k0 += kc) {
      size_t kcs = k - k0 < kc ? k - k0 : kc, g0 = k0 / a->group;
      size_t ng = (k0 + kcs - 1) / a->group - g0 + 1;
      pf_pack(a, n, nc, k0, kcs, g0, ng, &tile);
      const float *bias = k0 + kcs == k && a->bias ? a->bias + n : NULL;
      for (size_t m = 0; m < a->m; m += PF_MR) {
        size_t mr = a->m - m < PF_MR ? a->m - m : PF_MR;
        const float *gs = a->gsum ? a->gsum + m * groups : NULL;
        pf_rows(bits, mr, a->packed + m * p->a_stride, a, k0 / EM_QA_BLOCK, kcs / EM_QA_BLOCK, g0,
                &tile, gs, a->y + m * a->n + n, nc, k0 == 0, bias);
      }
    }
  }
}

void em_qd8_prefill__avx512vnni(const em_qprefill_args *a, size_t n0, size_t n1) {
  if (a->bits == 4)
    pf_run(4, a, n0, n1);
  else
    pf_run(8, a, n0, n1);
}

#else
typedef int
    em_linear_q_prefill_avx512vnni_unavailable; /* ISO C forbids an empty translation unit */
#endif
