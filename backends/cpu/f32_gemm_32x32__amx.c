/*
 * f32_gemm_32x32__amx.c — the GEMM driver's AMX path: C = A @ B in f32 through
 * the bf16 tile multiplier (TDPBF16PS), with every f32 operand split in two
 * bf16 numbers (x = hi + lo, hi = bf16(x), lo = bf16(x - hi)) and each
 * product taken as hi*hi + hi*lo + lo*hi ("bf16x3", the precision PyTorch
 * calls "high"): about 16 significant bits per product (relative error of a
 * product below 2^-16; the dropped lo*lo term and the two roundings), summed
 * in f32. One core's tile unit does about 16x the bf16 products of its f32
 * FMA units, so even three of them per f32 product leave it ~5x ahead.
 *
 * The split happens as the driver packs its operands, so the micro-kernel is a
 * plain bf16 GEMM over K' = 3 K: per 32 k of the original,
 *
 *   A' row   [hi(k0..15) lo(k0..15)] [hi(k16..31) lo(k16..31)] [hi(k0..31)]
 *   B' rows  [bhi(k0..15); bhi(k0..15)] [bhi(k16..31); bhi(k16..31)] [blo(k0..31)]
 *
 * (B' in the tile unit's pair-interleaved layout), so A' B' sums hi bhi + lo bhi + hi blo.
 * The kernel keeps a 32 x 32 C block in four tiles (tiles 0-3), with two A' tiles (4, 5) and
 * two B' tiles (6, 7) per 32-deep step of K'.
 *
 * Loop order (as cpu_gemm.c's): per work item group (an M block of up to AMX_MB 32-row tiles and
 * a run of 32-column strips), per K block of at most AMX_KC: the M block's A' built once, then
 * per strip its B' (weights, an im2col, activations: f32 from wherever the caller keeps them),
 * then every tile of the M block through it. Whole tiles accumulate in C across K blocks;
 * ragged ones through a 32 x 32 buffer. The last K block adds bias and residual, clamps and
 * applies the activation while the block is in cache.
 *
 * Where the split loses to plain f32: an infinite operand gives NaN (its lo is inf - inf), and
 * a finite value that rounds up to bf16 infinity (above 3.39e38) is lost; bf16 arithmetic also
 * flushes subnormals. EMBER_CPU_ISA=avx512f turns the path off.
 */
#if defined(__x86_64__)
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "cpu_internal.h"

#define AMX_KC      192          /* original k per K block (a multiple of 32) */
#define AMX_A_BYTES (384 * 1024) /* A' block budget: mb * 32 rows * 3 * kc bf16 */
#define AMX_T       32           /* tile block rows and columns */
#define AMX_B_BYTES (3 * AMX_KC * AMX_T * 2)

typedef struct amx_tilecfg {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} amx_tilecfg;

/* Bytes of one slot's workspace: A' block, B' strip, an f32 strip for pack_b, the ragged-tile
 * buffer, and alignment. */
size_t emc_gemm_amx_slot_bytes(void) {
  return AMX_A_BYTES + AMX_B_BYTES + AMX_KC * AMX_T * 4 + AMX_T * AMX_T * 4 + 3 * 64;
}

static __mmask16 mask16(size_t n) {
  return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1);
}

/* bf16 halves of two 16-float vectors: h = [bf16(x0), bf16(x1)], l the same of x - hi. */
static inline void split2(__m512 x0, __m512 x1, __m512i *h, __m512i *l) {
  const __m512i hb = (__m512i)_mm512_cvtne2ps_pbh(x1, x0);
  const __m512 h0 =
      _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(hb)), 16));
  const __m512 h1 = _mm512_castsi512_ps(
      _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(hb, 1)), 16));
  *h = hb;
  *l = (__m512i)_mm512_cvtne2ps_pbh(_mm512_sub_ps(x1, h1), _mm512_sub_ps(x0, h0));
}

/* One A' row chunk (32 k, x0 = k 0..15, x1 = k 16..31): its three 32-bf16 pieces, one per
 * K' step, 512 bf16 (a tile) apart. */
static inline void store_a_chunk(uint16_t *dst, __m512 x0, __m512 x1) {
  __m512i h, l;
  split2(x0, x1, &h, &l);
  _mm512_storeu_si512(dst, _mm512_inserti64x4(h, _mm512_castsi512_si256(l), 1));
  _mm512_storeu_si512(dst + 512, _mm512_shuffle_i64x2(h, l, _MM_SHUFFLE(3, 2, 3, 2)));
  _mm512_storeu_si512(dst + 1024, h);
}

/* Row q (0..5) of 16 k of a 6-row weight panel, from the 96 floats v[0..5] holding them
 * ([k][6] order): element 6 t + q of the run, taken from the register pairs by permutes. */
static inline __m512 panel_row(const __m512 v[6], int q) {
  const __m512i e = _mm512_add_epi32(
      _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                         _mm512_set1_epi32(6)),
      _mm512_set1_epi32(q));
  const __mmask16 in1 = _mm512_cmpge_epi32_mask(e, _mm512_set1_epi32(32));
  const __mmask16 in2 = _mm512_cmpge_epi32_mask(e, _mm512_set1_epi32(64));
  __m512 r = _mm512_permutex2var_ps(v[0], e, v[1]); /* the index's low 5 bits pick the lane */
  r = _mm512_mask_mov_ps(r, in1, _mm512_permutex2var_ps(v[2], e, v[3]));
  return _mm512_mask_mov_ps(r, in2, _mm512_permutex2var_ps(v[4], e, v[5]));
}

/*
 * A' for rows [r0, r0 + rows) (zero past M), k [k0, k0 + kc), kp = kc rounded up to 32 (the k past
 * kc zero): tile after tile, each 16 rows of the 3 kp / 32 K' steps as whole contiguous 16 x 32
 * bf16 tiles (one 1 KiB stream per tile load, which the prefetchers follow). Packed weights are
 * read a 6-row panel at a time, 96 contiguous floats per 16 k, and transposed by permutes.
 */
static void pack_a(const emc_gemm *g, size_t r0, size_t rows_pad, size_t k0, size_t kc,
                   uint16_t *dst) {
  const size_t kp = emc_div_up(kc, 32) * 32, steps = 3 * kp / 32;
  const size_t rows = g->m > r0 ? emc_min_sz(g->m - r0, rows_pad) : 0;
  for (size_t r = rows; r < rows_pad; r++) {
    uint16_t *d = dst + (r / 16) * steps * 512 + (r % 16) * 32;
    for (size_t s = 0; s < steps; s++) memset(d + s * 512, 0, 32 * sizeof *d);
  }
  if (!g->a_packed) {
    for (size_t r = 0; r < rows; r++) {
      uint16_t *d = dst + (r / 16) * steps * 512 + (r % 16) * 32;
      const float *a = g->a + (r0 + r) * g->a_rs + k0;
      for (size_t j = 0; j < kp; j += 32) {
        const size_t left = kc > j ? kc - j : 0;
        const __m512 x0 = _mm512_maskz_loadu_ps(mask16(left), a + j);
        const __m512 x1 = _mm512_maskz_loadu_ps(mask16(left > 16 ? left - 16 : 0), a + j + 16);
        store_a_chunk(d + (j / 32) * 3 * 512, x0, x1);
      }
    }
    return;
  }
  for (size_t pi = r0 / EMC_MR; pi * EMC_MR < r0 + rows; pi++) {
    const float *panel = g->a + pi * emc_gemm_a_panel(g) + k0 * EMC_MR;
    for (size_t j = 0; j < kp; j += 32) {
      __m512 x[2][6]; /* rows q of k j..j+15, j+16..j+31 */
      for (int h = 0; h < 2; h++) {
        const size_t kk = j + 16 * (size_t)h, left = kc > kk ? emc_min_sz(kc - kk, 16) : 0;
        const size_t nf = left * EMC_MR; /* valid floats of the 96 */
        __m512 v[6];
        for (size_t u = 0; u < 6; u++)
          v[u] = _mm512_maskz_loadu_ps(mask16(nf > 16 * u ? nf - 16 * u : 0),
                                       panel + kk * EMC_MR + 16 * u);
        for (int q = 0; q < 6; q++) x[h][q] = panel_row(v, q);
      }
      for (size_t q = 0; q < EMC_MR; q++) {
        const size_t i = pi * EMC_MR + q;
        if (i < r0 || i >= r0 + rows) continue;
        const size_t r = i - r0;
        store_a_chunk(dst + (r / 16) * steps * 512 + (r % 16) * 32 + (j / 32) * 3 * 512, x[0][q],
                      x[1][q]);
      }
    }
  }
}

/*
 * Rows [k0, k0 + kc) (kc <= AMX_KC), columns [n0, n0 + nc) (nc <= 32) of B in f32: where they
 * are, row k's columns 16 h .. 16 h + 15 at src + k * *ld + h * *half (packed weight panels, a
 * row-major matrix), or built into fb (AMX_KC x 32) by the caller's pack_b (an im2col).
 */
static const float *b_rows(const emc_gemm *g, size_t n0, size_t nc, size_t k0, size_t kc, float *fb,
                           size_t *ld, size_t *half) {
  if (g->b_packed) {
    *ld = EMC_NR_PANEL, *half = emc_gemm_b_panel(g);
    return g->b + (n0 / EMC_NR_PANEL) * emc_gemm_b_panel(g) + k0 * EMC_NR_PANEL;
  }
  *half = 16;
  if (g->pack_b) {
    g->pack_b(g->pack_ctx, k0, kc, n0, nc, fb, AMX_T);
    *ld = AMX_T;
    return fb;
  }
  *ld = g->ldb;
  return g->b + k0 * g->ldb + n0;
}

/*
 * B' for kc rows of f32 and nc <= 32 columns: row k's columns 16 h .. 16 h + 15 at
 * src + k * ld + h * half. dst: (3 kp / 32) K' steps of two 16 x 32 bf16 tiles.
 */
static void pack_b_tiles(const float *src, size_t ld, size_t half, size_t kc, size_t nc,
                         uint16_t *dst) {
  const size_t kp = emc_div_up(kc, 32) * 32;
  /* VNNI: element (k', n) of a tile at row k' / 2, column 2 n + k' % 2. */
  const __m512i inter = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24,
                                         8, 23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  for (size_t hf = 0; hf < 2; hf++) {
    const size_t cols = nc > hf * 16 ? nc - hf * 16 : 0;
    const __mmask16 cm = mask16(cols);
    for (size_t j = 0; j < kp; j += 32) {
      uint16_t *s0 = dst + ((j / 32) * 3 * 2 + hf) * 512; /* step 3 (j / 32), this half */
      uint16_t *s1 = s0 + 2 * 512, *s2 = s0 + 4 * 512;
      for (size_t kl = 0; kl < 32; kl += 2) {
        __m512 x0 = _mm512_setzero_ps(), x1 = _mm512_setzero_ps();
        const float *r = src + (j + kl) * ld + hf * half;
        if (cols && j + kl < kc) x0 = _mm512_maskz_loadu_ps(cm, r);
        if (cols && j + kl + 1 < kc) x1 = _mm512_maskz_loadu_ps(cm, r + ld);
        __m512i h, l;
        split2(x0, x1, &h, &l);
        h = _mm512_permutexvar_epi16(inter, h);
        l = _mm512_permutexvar_epi16(inter, l);
        uint16_t *t = kl < 16 ? s0 : s1;
        const size_t p = (kl % 16) / 2;
        _mm512_storeu_si512(t + p * 32, h);
        _mm512_storeu_si512(t + (p + 8) * 32, h);
        _mm512_storeu_si512(s2 + (kl / 2) * 32, l);
      }
    }
  }
}

/* Tiles 0-3 (a 32 x 32 C block) from cin (ldi floats a row), or zero when cin is NULL. */
static inline void c_tiles_load(const float *cin, size_t ldi) {
  if (cin) {
    _tile_loadd(0, cin, ldi * 4);
    _tile_loadd(1, cin + 16, ldi * 4);
    _tile_loadd(2, cin + 16 * ldi, ldi * 4);
    _tile_loadd(3, cin + 16 * ldi + 16, ldi * 4);
  } else {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  }
}

/* Tiles 0-3 into out (ldo floats a row). */
static inline void c_tiles_store(float *out, size_t ldo) {
  _tile_stored(0, out, ldo * 4);
  _tile_stored(1, out + 16, ldo * 4);
  _tile_stored(2, out + 16 * ldo, ldo * 4);
  _tile_stored(3, out + 16 * ldo + 16, ldo * 4);
}

/* Every tile 16 rows of 64 bytes: C blocks, A' and B' tiles alike. */
static void tiles_configure(void) {
  amx_tilecfg cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.palette = 1;
  for (int t = 0; t < 8; t++) cfg.rows[t] = 16, cfg.colsb[t] = 64;
  _tile_loadconfig(&cfg);
}

/*
 * The calling thread's workspace slot (its index in the pool) when free, so that each thread
 * packs into the same slot operator after operator, whichever parts it runs. Taking the first
 * free slot let the threads trade slots about every other operator
 * (counted: 7533 trades in 16000 jobs), and each packed B' then moved between the cores' caches:
 * a chain of 1x1 convs on 28x28 at 2 threads packed B' at 41 cycles a row on the caller against
 * 28 with the slots kept, and ran 0.91 -> 0.77 ms.
 */
static int claim_slot(emc_gemm *g) {
  return emc_claim_flag_from(g->amx_busy, g->amx_slots,
                             em_threadpool_thread_index() % g->amx_slots);
}

/* Workspace slot `slot` (64-byte aligned). */
static uint8_t *slot_ws(const emc_gemm *g, int slot) {
  return (uint8_t *)(((uintptr_t)g->amx_ws + 63) & ~(uintptr_t)63) +
         (size_t)slot * emc_gemm_amx_slot_bytes();
}

/* The 32 x 32 block: out (ldo floats) = cin (ldi floats; NULL: zero) + A' (rows 0-15: `steps`
 * tiles from a, rows 16-31: the next `steps`) @ B' over `steps` 32-deep steps. */
static void tile_block(const uint16_t *a, const uint16_t *b, size_t steps, const float *cin,
                       size_t ldi, float *out, size_t ldo) {
  const uint16_t *a1 = a + steps * 512;
  c_tiles_load(cin, ldi);
  for (size_t s = 0; s < steps; s++) {
    _tile_loadd(4, a + s * 512, 64);
    _tile_loadd(6, b + s * 1024, 64);
    _tile_loadd(7, b + s * 1024 + 512, 64);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_loadd(5, a1 + s * 512, 64);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  c_tiles_store(out, ldo);
}

/*
 * Prefetches part `part` of `parts` of B's rows [k0, k0 + kc), columns [n0, n0 + 32) toward L2
 * when B is in memory (packed weights or a row-major matrix; a pack_b strip is built): the next
 * strip's weights stream in while this one's tiles run (split in a burst by pack_b_tiles, ViT's
 * weights from memory stalled it for as long as its tiles took).
 */
static void prefetch_b(const emc_gemm *g, size_t n0, size_t k0, size_t kc, size_t part,
                       size_t parts) {
  if (n0 >= g->n || (!g->b_packed && g->pack_b)) return;
  const size_t halves = g->n - n0 > 16 ? 2 : 1;
  /* packed: each 16-column panel's rows are one run of kc * 64 bytes; row-major: a row a line
   * or two (32 floats from n0) */
  const size_t seg_lines = g->b_packed ? kc : 2, segs = g->b_packed ? halves : kc;
  const size_t lines = segs * seg_lines, l0 = lines * part / parts, l1 = lines * (part + 1) / parts;
  for (size_t l = l0; l < l1; l++) {
    const size_t sg = l / seg_lines, off = l % seg_lines;
    const float *p = g->b_packed ? g->b + (n0 / EMC_NR_PANEL + sg) * emc_gemm_b_panel(g) +
                                       (k0 + off) * EMC_NR_PANEL
                                 : g->b + (k0 + sg) * g->ldb + n0 + off * 16;
    _mm_prefetch((const char *)p, _MM_HINT_T1);
  }
}

/*
 * Prefetches part `part` of `parts` of the A block rows [r0, r0 + rows), k [k0, k0 + kc) toward
 * L2, a line at a time: the next A block's weights come from memory while this one's tiles run
 * (split in a burst by pack_a, they stalled it: ~10 % of ResNet-50).
 */
static void prefetch_a(const emc_gemm *g, size_t r0, size_t rows, size_t k0, size_t kc, size_t part,
                       size_t parts) {
  rows = g->m > r0 ? emc_min_sz(g->m - r0, rows) : 0;
  if (!rows) return;
  const size_t segs = g->a_packed ? emc_div_up(r0 + rows, EMC_MR) - r0 / EMC_MR : rows;
  const size_t seg_lines = emc_div_up(kc * (g->a_packed ? EMC_MR : 1) * 4, 64) + 1;
  const size_t lines = segs * seg_lines, l0 = lines * part / parts, l1 = lines * (part + 1) / parts;
  for (size_t l = l0; l < l1; l++) {
    const size_t sg = l / seg_lines, off = (l % seg_lines) * 16;
    const float *base = g->a_packed ? g->a + (r0 / EMC_MR + sg) * emc_gemm_a_panel(g) + k0 * EMC_MR
                                    : g->a + (r0 + sg) * g->a_rs + k0;
    _mm_prefetch((const char *)(base + off), _MM_HINT_T1);
  }
}

/* Rows [m0, m0 + mr), columns [n0, n0 + nc) of C: optionally c += t (tmp, 32 floats a row; or
 * c = t when !acc), then on the last K block bias, residual, clamp and activation. */
static void finish(const emc_gemm *g, size_t m0, size_t mr, size_t n0, size_t nc, const float *t,
                   int acc, int last) {
  const __mmask16 k0 = mask16(nc), k1 = mask16(nc > 16 ? nc - 16 : 0);
  const __m512 lo = _mm512_set1_ps(g->mm.min), hi = _mm512_set1_ps(g->mm.max);
  __m512 bn0 = _mm512_setzero_ps(), bn1 = _mm512_setzero_ps();
  if (last && g->bias_n) {
    bn0 = _mm512_maskz_loadu_ps(k0, g->bias_n + n0);
    bn1 = _mm512_maskz_loadu_ps(k1, g->bias_n + n0 + 16);
  }
  for (size_t r = 0; r < mr; r++) {
    float *c = g->c + (m0 + r) * g->ldc + n0;
    __m512 v0, v1;
    if (t) {
      v0 = _mm512_maskz_loadu_ps(k0, t + r * AMX_T);
      v1 = _mm512_maskz_loadu_ps(k1, t + r * AMX_T + 16);
      if (acc) {
        v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(k0, c));
        v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(k1, c + 16));
      }
    } else {
      v0 = _mm512_maskz_loadu_ps(k0, c);
      v1 = _mm512_maskz_loadu_ps(k1, c + 16);
    }
    if (last) {
      const __m512 bm = _mm512_set1_ps(g->bias_m ? g->bias_m[m0 + r] : 0.f);
      v0 = _mm512_add_ps(v0, _mm512_add_ps(bm, bn0));
      v1 = _mm512_add_ps(v1, _mm512_add_ps(bm, bn1));
      if (g->res) {
        const float *q = g->res + (m0 + r) * g->ldr + n0;
        v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(k0, q));
        v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(k1, q + 16));
      }
      /* min(hi, max(lo, v)): a NaN v comes through (x86 min / max return the second operand) */
      v0 = _mm512_min_ps(hi, _mm512_max_ps(lo, v0));
      v1 = _mm512_min_ps(hi, _mm512_max_ps(lo, v1));
    }
    _mm512_mask_storeu_ps(c, k0, v0);
    _mm512_mask_storeu_ps(c + 16, k1, v1);
    if (last && g->act) g->cfg->vact(nc, c, c, g->act, g->fp);
  }
}

typedef struct amx_plan {
  size_t mt, st, mb, kc; /* 32-row tiles, 32-column strips, tiles per M block, K block */
} amx_plan;

static amx_plan plan_of(const emc_gemm *g, int n_threads) {
  amx_plan p;
  p.mt = emc_div_up(g->m, AMX_T);
  p.st = emc_div_up(g->n, AMX_T);
  const size_t nkb = emc_div_up(g->k, AMX_KC);
  p.kc = emc_div_up(emc_div_up(g->k, nkb), 32) * 32;
  if (p.kc > g->k) p.kc = g->k;
  const size_t tile_bytes = AMX_T * 3 * emc_div_up(p.kc, 32) * 32 * 2;
  p.mb = emc_min_sz(p.mt, AMX_A_BYTES / tile_bytes);
  if (p.mb < 1) p.mb = 1;
  /* Under a split by strips every thread splits all of the M block's A, under a split by M
   * blocks all of B: when A is the larger (M > N: the 14x14 1x1 convs of ResNet-50, weights as
   * A, ran slower on 2 threads than on 1 split by strips), the threads take M blocks. */
  if (n_threads > 1 && g->m > g->n && p.mt >= (size_t)n_threads)
    p.mb = emc_min_sz(p.mb, emc_div_up(p.mt, (size_t)n_threads));
  p.mb = emc_div_up(p.mt, emc_div_up(p.mt, p.mb));
  return p;
}

typedef struct amx_job {
  emc_gemm *g;
  amx_plan p;
  size_t items, parts; /* work items (M blocks x strips), cut into `parts` contiguous runs */
} amx_job;

/* Runs [begin, end) of the job's parts: each part is one contiguous run of work items, so a
 * thread splits each A block it uses once per K block (a pool's small chunks would have it
 * split the same A block again for every strip). */
static void amx_items(void *ctx, int64_t part_begin, int64_t part_end) {
  const amx_job *job = ctx;
  emc_gemm *g = job->g;
  const amx_plan p = job->p;
  const int64_t begin = (int64_t)(job->items * (size_t)part_begin / job->parts);
  const int64_t end = (int64_t)(job->items * (size_t)part_end / job->parts);
  const int slot = claim_slot(g); /* delegate-wide */
  uint8_t *ws = slot_ws(g, slot);
  uint16_t *ap = (uint16_t *)ws;
  uint16_t *bp = (uint16_t *)(ws + AMX_A_BYTES);
  float *fb = (float *)(ws + AMX_A_BYTES + AMX_B_BYTES);
  float *tmp = fb + AMX_KC * AMX_T;
  tiles_configure();
  for (int64_t it = begin; it < end;) {
    const size_t mbi = (size_t)it / p.st;
    const int64_t grp_end = (int64_t)emc_min_sz((size_t)end, (mbi + 1) * p.st);
    const size_t s0 = (size_t)it % p.st, s1 = s0 + (size_t)(grp_end - it);
    const size_t t0 = mbi * p.mb, t1 = emc_min_sz(p.mt, t0 + p.mb);
    for (size_t k0 = 0; k0 < g->k; k0 += p.kc) {
      const size_t kc = emc_min_sz(g->k - k0, p.kc), steps = 3 * emc_div_up(kc, 32);
      const int first = k0 == 0, last = k0 + kc == g->k;
      /* the A block after this one: the next K block, or the next M block's first */
      const int more = !last || grp_end < end;
      const size_t nk0 = last ? 0 : k0 + kc, nt0 = last ? t1 : t0;
      const size_t nkc = emc_min_sz(g->k - nk0, p.kc),
                   nrows = emc_min_sz(p.mt - emc_min_sz(nt0, p.mt), p.mb);
      pack_a(g, t0 * AMX_T, (t1 - t0) * AMX_T, k0, kc, ap);
      for (size_t s = s0; s < s1; s++) {
        const size_t n0 = s * AMX_T, nc = emc_min_sz(g->n - n0, AMX_T);
        if (more) prefetch_a(g, nt0 * AMX_T, nrows * AMX_T, nk0, nkc, s - s0, s1 - s0);
        size_t ld, half;
        const float *src = b_rows(g, n0, nc, k0, kc, fb, &ld, &half);
        pack_b_tiles(src, ld, half, kc, nc, bp);
        for (size_t t = t0; t < t1; t++) {
          const size_t m0 = t * AMX_T, mr = emc_min_sz(g->m - m0, AMX_T);
          const uint16_t *a = ap + (t - t0) * 2 * steps * 512;
          if (s + 1 < s1) prefetch_b(g, (s + 1) * AMX_T, k0, kc, t - t0, t1 - t0);
          float *c = g->c + m0 * g->ldc + n0;
          if (mr == AMX_T && nc == AMX_T && !last) {
            tile_block(a, bp, steps, first ? NULL : c, g->ldc, c, g->ldc);
          } else if (mr == AMX_T && nc == AMX_T) { /* C read once, written once, finished */
            tile_block(a, bp, steps, first ? NULL : c, g->ldc, tmp, AMX_T);
            finish(g, m0, mr, n0, nc, tmp, 0, 1);
          } else {
            tile_block(a, bp, steps, NULL, 0, tmp, AMX_T);
            finish(g, m0, mr, n0, nc, tmp, !first, last);
          }
        }
      }
    }
    it = grp_end;
  }
  _tile_release();
  atomic_flag_clear(&g->amx_busy[slot]);
}

/*
 * Big enough to pay for splitting the operands: at least 64 in every dimension (a 32-row or
 * 32-column edge is then at most a third of the tiles; MobileNets' narrow 1x1 convs and ResNet's
 * 49-pixel layer, each weight used by few products, ran slower here) and 2M multiply-adds.
 */
int emc_gemm_amx_fits(const emc_gemm *g) {
  if (!g->amx_ws || !g->amx_busy || !g->cfg->amx || (!g->a_packed && g->a_ks != 1)) return 0;
  return g->m >= 64 && g->n >= 64 && g->k >= 64 && g->m * g->n * g->k >= ((size_t)1 << 21);
}

void emc_gemm_run_amx(emc_gemm *g, em_threadpool *pool) {
  const int n_threads = em_threadpool_size(pool);
  amx_job j = {g, plan_of(g, n_threads), 0, 0};
  j.items = emc_div_up(j.p.mt, j.p.mb) * j.p.st;
  j.parts = emc_min_sz(j.items, (size_t)(n_threads < 1 ? 1 : n_threads));
  em_parallel_for_static(pool, (int64_t)j.parts, amx_items, &j);
}

/* ---- A as bf16 pairs (EMC_CONV_PAIRS) ------------------------------------------------------
 *
 * Weights streamed from memory with few columns to share them (ResNet's 7x7 layers: 49) spend
 * more on the split above than the tiles take, so the exporter stores them split: each word a
 * pair (bf16 hi, bf16 lo) of one weight, [32-row tile pairs of 16-row groups][16-k chunks][16
 * rows][16 words], which tile loads read in place. A pair is one TDPBF16PS pair, so with B' as
 * duplicated pairs (bhi, bhi) and (blo, blo) the tiles sum hi bhi + lo bhi and hi blo + lo blo:
 * the whole product (hi + lo)(bhi + blo), four bf16 products a weight instead of three, with A
 * as 4 bytes a weight (f32's size) and no split at run time.
 */

/* Duplicated pairs of 16 floats: h's 32-bit lanes hold bf16(x) twice, l's bf16(x - hi) twice. */
static inline void split_dup(__m512 x, __m512i *h, __m512i *l) {
  const __m512i h16 = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(x));
  const __m512i hs = _mm512_slli_epi32(h16, 16); /* hi as f32 */
  const __m512i l16 =
      _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(_mm512_sub_ps(x, _mm512_castsi512_ps(hs))));
  *h = _mm512_or_si512(hs, h16);
  *l = _mm512_or_si512(_mm512_slli_epi32(l16, 16), l16);
}

/*
 * B' in pairs for kc rows of f32 (kcp: kc rounded up to 16, the rows past kc zero) and nc <= 32
 * columns (row k's columns 16 h .. 16 h + 15 at src + k * ld + h * half): per 16-k chunk four
 * 16 x 16-word tiles, bhi of columns 0-15, of 16-31, then blo of the same.
 */
static void pack_b_pairs(const float *src, size_t ld, size_t half, size_t kc, size_t kcp, size_t nc,
                         uint32_t *dst) {
  for (size_t hf = 0; hf < 2; hf++) {
    const size_t cols = nc > hf * 16 ? nc - hf * 16 : 0;
    const __mmask16 cm = mask16(cols);
    for (size_t k = 0; k < kcp; k++) {
      __m512 x = _mm512_setzero_ps();
      if (cols && k < kc) x = _mm512_maskz_loadu_ps(cm, src + k * ld + hf * half);
      __m512i h, l;
      split_dup(x, &h, &l);
      uint32_t *t = dst + (k / 16) * 1024 + hf * 256 + (k % 16) * 16;
      _mm512_store_si512(t, h);
      _mm512_store_si512(t + 512, l);
    }
  }
}

/* The 32 x 32 block over `chunks` 16-k chunks: out = cin (NULL: zero) + A (rows 0-15 from a0,
 * 16-31 from a1, a 16 x 16-word tile a chunk) @ B' (four tiles a chunk, see pack_b_pairs).
 * pf0 / pf1 (or NULL): the A tiles the next block will use, pulled toward L2 a chunk at a time
 * (straight from memory, the tile loads stalled on each). */
static void tile_block_pairs(const uint32_t *a0, const uint32_t *a1, const uint32_t *b,
                             size_t chunks, const float *cin, size_t ldi, float *out, size_t ldo,
                             const uint32_t *pf0, const uint32_t *pf1) {
  c_tiles_load(cin, ldi);
  for (size_t j = 0; j < chunks; j++) {
    const uint32_t *bj = b + j * 1024;
    if (pf0)
      for (int l = 0; l < 16; l++) {
        _mm_prefetch((const char *)(pf0 + j * 256 + l * 16), _MM_HINT_T1);
        _mm_prefetch((const char *)(pf1 + j * 256 + l * 16), _MM_HINT_T1);
      }
    _tile_loadd(4, a0 + j * 256, 64);
    _tile_loadd(6, bj, 64);
    _tile_loadd(7, bj + 256, 64);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_loadd(5, a1 + j * 256, 64);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
    _tile_loadd(6, bj + 512, 64);
    _tile_loadd(7, bj + 768, 64);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  c_tiles_store(out, ldo);
}

typedef struct pairs_job {
  emc_gemm *g;
  size_t mt, st, grp, kc, kp16; /* 32-row tiles, 32-column strips, most strips a group, K block */
  size_t groups;                /* strip groups: group i is strips [st * i / groups, ...) */
  size_t items, parts;          /* work items (strip groups x tiles), in `parts` runs */
} pairs_job;

/* B' of strip s, rows [k0, k0 + kc), into dst (pack_b_pairs's layout). */
static void pairs_strip(const emc_gemm *g, size_t s, size_t k0, size_t kc, float *fb,
                        uint32_t *dst) {
  const size_t n0 = s * AMX_T, nc = emc_min_sz(g->n - n0, AMX_T);
  for (size_t r = 0; r < kc; r += AMX_KC) { /* AMX_KC rows at a time: what the f32 strip holds */
    const size_t rc = emc_min_sz(kc - r, AMX_KC);
    size_t ld, half;
    const float *src = b_rows(g, n0, nc, k0 + r, rc, fb, &ld, &half);
    pack_b_pairs(src, ld, half, rc, emc_div_up(rc, 16) * 16, nc, dst + (r / 16) * 1024);
  }
}

/* A K block of tiles [t0, t1) x strips [s0, s1): its depth k0..k0 + kc (kchunks: the chunks of
 * all of K), whether it is the first of its run of K blocks (no C to add) and the last (finish
 * the tiles), and whether one follows (whose first tile's pairs to prefetch). */
typedef struct pairs_span {
  size_t kchunks, t0, t1, s0, s1, k0, kc;
  int first, last, more;
} pairs_span;

/* The span's tiles over B' at bp (strip s at bp + (s - s0) * chunks * 1024 words): into C, or
 * with `part` into its 32 x 32 blocks of partial sums (tile t, strip s: block t * st + s);
 * tmp: a 32 x 32 buffer for ragged tiles. */
static void pairs_tiles(emc_gemm *g, const pairs_span *sp, const uint32_t *bp, float *part,
                        size_t st, float *tmp) {
  const size_t kchunks = sp->kchunks, chunks = emc_div_up(sp->kc, 16);
  for (size_t t = sp->t0; t < sp->t1; t++) {
    const uint32_t *a0 = g->a_pairs + (2 * t * kchunks + sp->k0 / 16) * 256;
    const uint32_t *a1 = a0 + kchunks * 256;
    const size_t m0 = t * AMX_T, mr = emc_min_sz(g->m - m0, AMX_T);
    /* the next tile's pairs, or the next K block's first; as far as this block's chunks go */
    const uint32_t *pf0 = t + 1 < sp->t1 ? a1 + kchunks * 256
                          : sp->more
                              ? g->a_pairs + (2 * sp->t0 * kchunks + (sp->k0 + sp->kc) / 16) * 256
                              : NULL;
    for (size_t s = sp->s0; s < sp->s1; s++) {
      const size_t n0 = s * AMX_T, nc = emc_min_sz(g->n - n0, AMX_T);
      const uint32_t *b = bp + (s - sp->s0) * chunks * 1024;
      const uint32_t *p0 = s == sp->s0 ? pf0 : NULL, *p1 = p0 ? p0 + kchunks * 256 : NULL;
      if (part) { /* partial sums, whole blocks */
        float *q = part + (t * st + s) * AMX_T * AMX_T;
        tile_block_pairs(a0, a1, b, chunks, sp->first ? NULL : q, AMX_T, q, AMX_T, p0, p1);
        continue;
      }
      float *c = g->c + m0 * g->ldc + n0;
      if (mr == AMX_T && nc == AMX_T && !sp->last) {
        tile_block_pairs(a0, a1, b, chunks, sp->first ? NULL : c, g->ldc, c, g->ldc, p0, p1);
      } else if (mr == AMX_T && nc == AMX_T) {
        tile_block_pairs(a0, a1, b, chunks, sp->first ? NULL : c, g->ldc, tmp, AMX_T, p0, p1);
        finish(g, m0, mr, n0, nc, tmp, 0, 1);
      } else {
        tile_block_pairs(a0, a1, b, chunks, NULL, 0, tmp, AMX_T, p0, p1);
        finish(g, m0, mr, n0, nc, tmp, !sp->first, sp->last);
      }
    }
  }
}

/* Runs [begin, end) of the job's parts (contiguous runs of work items, strip group major). */
static void pairs_items(void *ctx, int64_t part_begin, int64_t part_end) {
  const pairs_job *job = ctx;
  emc_gemm *g = job->g;
  const size_t begin = job->items * (size_t)part_begin / job->parts;
  const size_t end = job->items * (size_t)part_end / job->parts;
  const int slot = claim_slot(g);
  uint8_t *ws = slot_ws(g, slot);
  uint32_t *bp = (uint32_t *)ws; /* B' of the group's strips: the A' and B' areas */
  float *fb = (float *)(ws + AMX_A_BYTES + AMX_B_BYTES);
  float *tmp = fb + AMX_KC * AMX_T;
  const size_t kchunks = job->kp16 / 16; /* chunks of a 16-row group */
  tiles_configure();
  for (size_t it = begin; it < end;) {
    const size_t gi = it / job->mt, grp_end = emc_min_sz(end, (gi + 1) * job->mt);
    const size_t t0 = it % job->mt, t1 = t0 + (grp_end - it);
    const size_t s0 = job->st * gi / job->groups, s1 = job->st * (gi + 1) / job->groups;
    for (size_t k0 = 0; k0 < g->k; k0 += job->kc) {
      const size_t kc = emc_min_sz(g->k - k0, job->kc), chunks = emc_div_up(kc, 16);
      for (size_t s = s0; s < s1; s++) pairs_strip(g, s, k0, kc, fb, bp + (s - s0) * chunks * 1024);
      const pairs_span sp = {kchunks,       t0, t1, s0, s1, k0, kc, k0 == 0, k0 + kc == g->k,
                             k0 + kc < g->k};
      pairs_tiles(g, &sp, bp, NULL, 0, tmp);
    }
    it = grp_end;
  }
  _tile_release();
  atomic_flag_clear(&g->amx_busy[slot]);
}

/*
 * With several threads and one strip group (N <= 256), the threads split K instead of the tiles:
 * under a split by tiles every thread packs the whole B' (an im2col, split; on ResNet's 7x7
 * layers a fifth of a thread's time), under a split by K each packs its own part. Part 0 sums
 * into C, part p > 0 into its partial buffer (32 x 32 blocks, tile after tile); a last pass adds
 * the partials and applies bias, residual, clamp and activation.
 */
typedef struct pairs_ksplit {
  emc_gemm *g;
  size_t mt, st, kp16, kc, parts;
  float *partial; /* parts - 1 buffers of mt * st blocks of 32 x 32 floats */
} pairs_ksplit;

static void ksplit_items(void *ctx, int64_t part_begin, int64_t part_end) {
  const pairs_ksplit *j = ctx;
  emc_gemm *g = j->g;
  const size_t kchunks = j->kp16 / 16;
  const int slot = claim_slot(g);
  uint8_t *ws = slot_ws(g, slot);
  uint32_t *bp = (uint32_t *)ws;
  float *fb = (float *)(ws + AMX_A_BYTES + AMX_B_BYTES);
  float *tmp = fb + AMX_KC * AMX_T;
  tiles_configure();
  for (size_t p = (size_t)part_begin; p < (size_t)part_end; p++) {
    const size_t k_lo = kchunks * p / j->parts * 16,
                 k_hi = emc_min_sz(kchunks * (p + 1) / j->parts * 16, g->k);
    float *part = p ? j->partial + (p - 1) * j->mt * j->st * AMX_T * AMX_T : NULL;
    for (size_t k0 = k_lo; k0 < k_hi; k0 += j->kc) {
      const size_t kc = emc_min_sz(k_hi - k0, j->kc), chunks = emc_div_up(kc, 16);
      for (size_t s = 0; s < j->st; s++) pairs_strip(g, s, k0, kc, fb, bp + s * chunks * 1024);
      const pairs_span sp = {kchunks, 0, j->mt, 0, j->st, k0, kc, k0 == k_lo, 0, k0 + kc < k_hi};
      pairs_tiles(g, &sp, bp, part, j->st, tmp);
    }
  }
  _tile_release();
  atomic_flag_clear(&g->amx_busy[slot]);
}

/* Blocks [begin, end) (tile major): C += the partials, then bias, residual, clamp, activation. */
static void ksplit_reduce(void *ctx, int64_t begin, int64_t end) {
  const pairs_ksplit *j = ctx;
  const size_t block = j->mt * j->st * AMX_T * AMX_T;
  for (size_t i = (size_t)begin; i < (size_t)end; i++) {
    const size_t t = i / j->st, s = i % j->st, m0 = t * AMX_T, n0 = s * AMX_T;
    float *q = j->partial + i * AMX_T * AMX_T;
    for (size_t p = 2; p < j->parts; p++)
      for (size_t e = 0; e < AMX_T * AMX_T; e += 16)
        _mm512_storeu_ps(
            q + e, _mm512_add_ps(_mm512_loadu_ps(q + e), _mm512_loadu_ps(q + (p - 1) * block + e)));
    finish(j->g, m0, emc_min_sz(j->g->m - m0, AMX_T), n0, emc_min_sz(j->g->n - n0, AMX_T), q, 1, 1);
  }
}

/* Tiles [begin, end) of the reduce: all their blocks, so each thread writes whole rows of C (a
 * split by blocks had two cores write the lines where their 32-column blocks meet, rows of 196 or
 * 49 floats not being whole lines, at the same moment: MobileNetV3-Small's 576 -> 96 projections
 * on 7x7 ran 1.16-1.22x faster split by tiles, MobileNetV2 1.03-1.05x at 2 threads). */
static void ksplit_reduce_tiles(void *ctx, int64_t begin, int64_t end) {
  const pairs_ksplit *j = ctx;
  ksplit_reduce(ctx, begin * (int64_t)j->st, end * (int64_t)j->st);
}

/* The top `want` workspace slots for the partial sums, or NULL (some in use). */
static float *claim_top_slots(emc_gemm *g, int want) {
  for (int i = 0; i < want; i++)
    if (atomic_flag_test_and_set(&g->amx_busy[g->amx_slots - 1 - i])) {
      for (int r = 0; r <= i; r++)
        if (r < i) atomic_flag_clear(&g->amx_busy[g->amx_slots - 1 - r]);
      return NULL;
    }
  return (float *)((uint8_t *)(((uintptr_t)g->amx_ws + 63) & ~(uintptr_t)63) +
                   (size_t)(g->amx_slots - want) * emc_gemm_amx_slot_bytes());
}

int emc_gemm_amx_pairs_fits(const emc_gemm *g) {
  return g->a_pairs && g->amx_ws && g->amx_busy && g->cfg->amx && g->m && g->n && g->k;
}

void emc_gemm_run_amx_pairs(emc_gemm *g, em_threadpool *pool) {
  const int n_threads = em_threadpool_size(pool);
  pairs_job j = {g, emc_div_up(g->m, AMX_T), emc_div_up(g->n, AMX_T), 0, 0, 0, 0, 0, 0};
  const size_t parts = (size_t)(n_threads < 1 ? 1 : n_threads);
  /* all strips of N <= 256 in one group, so A streams once (grouped by two, the 14x14 layers
   * read A 4 times: ResNet-50 3.5 % / 7 % slower at 1 / 2 threads); K blocks shrink to fit.
   * More strips: groups of at most 8, as many as a multiple of the threads and of equal size,
   * so each thread gets the same columns (N = 784 in groups of 8, 8, 8, 1 gave one of 2
   * threads 512 columns and the other 272: MobileNets' 28x28 1x1 convs ran slower on 2). */
  j.groups = emc_div_up(j.st, 8);
  if (j.groups > 1) j.groups = emc_div_up(j.groups, parts) * parts;
  if (j.groups > j.st) j.groups = j.st;
  j.grp = emc_div_up(j.st, j.groups);
  j.kp16 = emc_div_up(g->k, 16) * 16;
  /* K blocks of equal depth whose B' (4 KiB a strip and 16 k) fills the A' area at most */
  const size_t kmax = AMX_A_BYTES / (j.grp * 4096) * 16, nkb = emc_div_up(j.kp16, kmax);
  j.kc = emc_div_up(emc_div_up(j.kp16, nkb), 16) * 16;
  j.items = j.groups * j.mt;
  j.parts = emc_min_sz(j.items, (size_t)(n_threads < 1 ? 1 : n_threads));
  /* a K split: one strip group, at least 4 chunks a part, room for the partials */
  const size_t pbytes = (parts - 1) * j.mt * j.st * AMX_T * AMX_T * sizeof(float);
  const int top = (int)emc_div_up(pbytes, emc_gemm_amx_slot_bytes());
  float *partial = NULL;
  if (parts > 1 && j.groups == 1 && j.kp16 / 16 >= 4 * parts && top + (int)parts <= g->amx_slots &&
      (partial = claim_top_slots(g, top)) != NULL) {
    pairs_ksplit ks = {g, j.mt, j.st, j.kp16, j.kc, parts, partial};
    em_parallel_for_static(pool, (int64_t)parts, ksplit_items, &ks);
    if (j.mt >= parts)
      em_parallel_for_static(pool, (int64_t)j.mt, ksplit_reduce_tiles, &ks);
    else
      em_parallel_for(pool, (int64_t)(j.mt * j.st), ksplit_reduce, &ks);
    for (int i = 0; i < top; i++) atomic_flag_clear(&g->amx_busy[g->amx_slots - 1 - i]);
    return;
  }
  em_parallel_for_static(pool, (int64_t)j.parts, pairs_items, &j);
}

#endif /* __x86_64__ */
