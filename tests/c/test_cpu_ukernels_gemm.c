/*
 * test_cpu_ukernels_gemm.c — the EmberCpuBackend GEMM micro-kernels of every ISA this CPU runs
 * (AVX-512F, AVX2+FMA, NEON, scalar), at sizes below, at, above and multiples of their tile,
 * against a double-precision scalar reference, with writes outside [mr, nc] caught; the
 * matrix-vector kernels (gemv16, gemv6); the GEMM driver (cpu_gemm.c: K blocks, M blocks,
 * strips, B packing, threads) on whole matrices, every B form, with and without a thread pool;
 * and, where the CPU and OS allow AMX, the "amx" configuration's bf16x3 GEMM path within its own
 * error bound (test_gemm_amx). The other kernels: test_cpu_ukernels_conv.c and _misc.c.
 */
#define _POSIX_C_SOURCE 200809L
#include "cpu_ukernels_util.h"

static void test_gemm(const em_cpu_config *cfg) {
  static const size_t ncs[] = {1, 3, 7, 8, 9, 15, 16, 17, 24, 31, 32, 33, 40, 47, 48, 49, 63, 64};
  static const size_t kcs[] = {1, 2, 5, 16, 67};
  enum { MAXK = 67, LDC = 72, LDB = 64 };
  static float a[MAXK * 8 * 6], b[MAXK * 64], c[8 * LDC], ref[8 * LDC], bias_m[6], bias_n[64];
  int bad = 0;
  for (size_t ki = 0; ki < sizeof kcs / sizeof kcs[0]; ki++)
    for (size_t mr = 1; mr <= EMC_MR; mr++)
      for (size_t ni = 0; ni < sizeof ncs / sizeof ncs[0]; ni++)
        for (int variant = 0; variant < 8; variant++) {
          size_t kc = kcs[ki], nc = ncs[ni];
          if (nc > cfg->nr) continue;
          int packed_a = variant & 1, packed_b = (variant >> 1) & 1, accumulate = variant >> 2;
          for (size_t i = 0; i < sizeof a / sizeof a[0]; i++) a[i] = frand();
          for (size_t i = 0; i < sizeof b / sizeof b[0]; i++) b[i] = frand();
          for (size_t i = 0; i < 6; i++) bias_m[i] = frand();
          for (size_t i = 0; i < 64; i++) bias_n[i] = frand();
          for (size_t i = 0; i < 8 * LDC; i++)
            c[i] = (i / LDC < mr && i % LDC < nc) ? frand() : SENTINEL;
          size_t a_rs = packed_a ? 1 : kc, a_ks = packed_a ? EMC_MR : 1;
          size_t ldb = packed_b ? EMC_NR_PANEL : LDB, b_next = packed_b ? kc * EMC_NR_PANEL : 16;
          em_minmax_params p = {-2.5f, 2.5f, 0};
          for (size_t m = 0; m < mr; m++)
            for (size_t n = 0; n < nc; n++) {
              double acc = accumulate ? c[m * LDC + n] : (double)bias_m[m] + bias_n[n];
              for (size_t k = 0; k < kc; k++) {
                const float *bk =
                    packed_b ? b + (n / 16) * b_next + k * 16 + n % 16 : b + k * ldb + n;
                acc += (double)a[m * a_rs + k * a_ks] * *bk;
              }
              ref[m * LDC + n] = (float)fmin(fmax(acc, p.min), p.max);
            }
          cfg->gemm(mr, nc, kc, a, a_rs, a_ks, b, ldb, b_next, c, LDC, bias_m, bias_n, accumulate,
                    &p, a_rs == 1 ? a : NULL);
          for (size_t i = 0; i < 8 * LDC && bad < 5; i++) {
            size_t m = i / LDC, n = i % LDC;
            int inside = m < mr && n < nc;
            int ok = inside ? close_to(c[i], ref[i], 1e-5) : c[i] == SENTINEL;
            if (!ok) {
              bad++;
              CHECK(ok, "%s gemm mr=%zu nc=%zu kc=%zu variant=%d: c[%zu][%zu] = %g, want %g",
                    cfg->isa, mr, nc, kc, variant, m, n, c[i], inside ? ref[i] : SENTINEL);
            }
          }
          if (!bad) g_pass++;
        }
}

static void test_gemv16(const em_cpu_config *cfg) {
  static float x[300], b[300 * 16], bias[16], y[17];
  static const size_t kcs[] = {1, 5, 16, 300}, ncs[] = {1, 7, 15, 16};
  for (size_t ki = 0; ki < 4; ki++)
    for (size_t ni = 0; ni < 4; ni++) {
      size_t kc = kcs[ki], nc = ncs[ni];
      for (size_t i = 0; i < kc; i++) x[i] = frand();
      for (size_t i = 0; i < kc * 16; i++) b[i] = (i % 16) < nc ? frand() : 0.0f;
      for (size_t i = 0; i < 16; i++) bias[i] = frand();
      y[nc] = SENTINEL;
      em_minmax_params p = {-3.0f, 3.0f, 0};
      cfg->gemv16(kc, nc, x, b, bias, y, &p);
      int ok = y[nc] == SENTINEL;
      for (size_t j = 0; j < nc; j++) {
        double acc = bias[j];
        for (size_t k = 0; k < kc; k++) acc += (double)x[k] * b[k * 16 + j];
        ok &= close_to(y[j], fmin(fmax(acc, -3.0), 3.0), 1e-5);
      }
      CHECK(ok, "%s gemv16 kc=%zu nc=%zu", cfg->isa, kc, nc);
    }
}

/* A 6-row A panel times a vector: every depth around the 8- and 16-step blocks, every row count,
 * with and without bias; nothing written past row mr. */
static void test_gemv6(const em_cpu_config *cfg) {
  static float a[301 * 6], x[301], bias[6], y[7];
  static const size_t kcs[] = {1, 5, 7, 8, 9, 15, 16, 17, 23, 24, 31, 33, 144, 301};
  for (size_t ki = 0; ki < sizeof kcs / sizeof kcs[0]; ki++)
    for (size_t mr = 1; mr <= 6; mr++)
      for (int with_bias = 0; with_bias < 2; with_bias++) {
        const size_t kc = kcs[ki];
        for (size_t i = 0; i < kc; i++) x[i] = frand();
        for (size_t i = 0; i < kc * 6; i++) a[i] = (i % 6) < mr ? frand() : 0.0f;
        for (size_t i = 0; i < 6; i++) bias[i] = frand();
        y[mr] = SENTINEL;
        em_minmax_params p = {-2.0f, 2.5f, 0};
        cfg->gemv6(kc, mr, a, x, with_bias ? bias : NULL, y, &p);
        int ok = y[mr] == SENTINEL;
        for (size_t r = 0; r < mr; r++) {
          double acc = with_bias ? bias[r] : 0.0;
          for (size_t k = 0; k < kc; k++) acc += (double)x[k] * a[k * 6 + r];
          ok &= close_to(y[r], fmin(fmax(acc, -2.0), 2.5), 1e-5);
        }
        CHECK(ok, "%s gemv6 kc=%zu mr=%zu bias=%d", cfg->isa, kc, mr, with_bias);
      }
}

/* ---- the GEMM driver ------------------------------------------------------------------ */

enum { DMAXM = 70, DMAXN = 130, DMAXK = 300, DPAD_N = 144 /* DMAXN rounded up to 16 */ };
static float d_a[DMAXM * DMAXK], d_ap[12 * 6 * DMAXK], d_b[DMAXK * DMAXN], d_bp[DMAXK * DPAD_N];
static float d_c[DMAXM * DMAXN + 8], d_bm[DMAXM], d_bn[DMAXN], d_pack[2 * 160 * 64 + 64];
static double d_ref[DMAXM * DMAXN];

typedef struct strip_src {
  const float *b;
  size_t ldb;
} strip_src;

/* A pack_b callback: copies the strip from a row-major B (as the im2col callback would build). */
static void copy_strip(const void *ctx, size_t k0, size_t kc, size_t n0, size_t nc, float *dst,
                       size_t ldd) {
  const strip_src *s = ctx;
  for (size_t k = 0; k < kc; k++)
    for (size_t n = 0; n < nc; n++) dst[k * ldd + n] = s->b[(k0 + k) * s->ldb + n0 + n];
}

static float d_res[DMAXM * DMAXN];

/* One GEMM: A packed or strided; B packed (0), row-major (1), row-major copied into per-thread
 * scratch (2) or built by a pack_b callback (3); post 0: the clamp alone, 1: a hardswish after
 * it (in the kernels' stores where they take it), 2: a residual added before the clamp. */
static int run_driver_case(const em_cpu_config *cfg, em_threadpool *pool, size_t m, size_t n,
                           size_t k, int a_packed, int bmode, int post) {
  for (size_t i = 0; i < m * k; i++) d_a[i] = frand();
  for (size_t i = 0; i < k * n; i++) d_b[i] = frand();
  for (size_t i = 0; i < m; i++) d_bm[i] = frand();
  for (size_t i = 0; i < n; i++) d_bn[i] = frand();
  memset(d_ap, 0, sizeof d_ap), memset(d_bp, 0, sizeof d_bp);
  for (size_t r = 0; r < m; r++)
    for (size_t kk = 0; kk < k; kk++) d_ap[(r / 6) * k * 6 + kk * 6 + r % 6] = d_a[r * k + kk];
  for (size_t kk = 0; kk < k; kk++)
    for (size_t c = 0; c < n; c++) d_bp[(c / 16) * k * 16 + kk * 16 + c % 16] = d_b[kk * n + c];
  for (size_t i = 0; i < m * n + 8; i++) d_c[i] = SENTINEL;
  const em_minmax_params mm = {-3.0f, 3.0f, 0};
  for (size_t r = 0; r < m; r++)
    for (size_t c = 0; c < n; c++) {
      double acc = (double)d_bm[r] + d_bn[c];
      for (size_t kk = 0; kk < k; kk++) acc += (double)d_a[r * k + kk] * d_b[kk * n + c];
      d_res[r * n + c] = frand();
      if (post == 2) acc += d_res[r * n + c];
      acc = fmin(fmax(acc, mm.min), mm.max);
      if (post == 1) acc = acc * fmin(fmax(acc + 3.0, 0.0), 6.0) / 6.0;
      d_ref[r * n + c] = acc;
    }
  strip_src src = {d_b, n};
  emc_gemm g = {0};
  g.cfg = cfg, g.m = m, g.k = k, g.n = n, g.a_packed = a_packed;
  g.a = a_packed ? d_ap : d_a, g.a_rs = a_packed ? 1 : k, g.a_ks = a_packed ? EMC_MR : 1;
  g.b = bmode == 0 ? d_bp : d_b, g.ldb = n, g.b_packed = bmode == 0;
  g.c = d_c, g.ldc = n, g.bias_m = d_bm, g.bias_n = d_bn, g.mm = mm;
  if (post == 1) g.act = EMC_ACT_HARDSWISH;
  if (post == 2) g.res = d_res, g.ldr = n;
  if (bmode >= 2) {
    CHECK(emc_gemm_pack_floats(cfg, k, em_threadpool_size(pool)) <= sizeof d_pack / sizeof(float),
          "pack scratch");
    g.pack = d_pack + 1; /* deliberately not 64-byte aligned: the driver aligns its slots */
  }
  if (bmode == 3) g.pack_b = copy_strip, g.pack_ctx = &src;
  emc_gemm_run(&g, pool);
  for (size_t i = 0; i < m * n; i++)
    if (!close_to(d_c[i], d_ref[i], 1e-4)) {
      CHECK(0,
            "%s driver m=%zu n=%zu k=%zu a_packed=%d bmode=%d post=%d threads=%d: c[%zu] = %g, "
            "want %g",
            cfg->isa, m, n, k, a_packed, bmode, post, em_threadpool_size(pool), i, d_c[i],
            d_ref[i]);
      return 0;
    }
  for (size_t i = m * n; i < m * n + 8; i++)
    if (d_c[i] != SENTINEL) {
      CHECK(0, "%s driver m=%zu n=%zu k=%zu: wrote past C", cfg->isa, m, n, k);
      return 0;
    }
  if (cfg->gemm_col) { /* the column kernel (N % 16 == 1): the bits of the tile alone */
    static float first[DMAXM * DMAXN];
    memcpy(first, d_c, m * n * sizeof(float));
    em_cpu_config tile_only = *cfg;
    tile_only.gemm_col = NULL;
    g.cfg = &tile_only;
    g.mm = mm, g.act = post == 1 ? EMC_ACT_HARDSWISH : 0; /* the driver moved it into mm */
    emc_gemm_run(&g, pool);
    if (memcmp(first, d_c, m * n * sizeof(float)) != 0) {
      CHECK(0, "%s driver m=%zu n=%zu k=%zu a_packed=%d bmode=%d post=%d: column kernel's bits",
            cfg->isa, m, n, k, a_packed, bmode, post);
      return 0;
    }
  }
  return 1;
}

static void test_gemm_driver(const em_cpu_config *cfg, em_threadpool *pool) {
  /* N: whole vectors, and 1-4 columns past them (the GEMV tail of cpu_gemm.c) or more */
  static const size_t ms[] = {1, 5, 6, 7, 13, 70}, ns[] = {1, 17, 49, 64, 65, 100, 130},
                      ks[] = {1, 7, 129, 300};
  for (size_t mi = 0; mi < 6; mi++)
    for (size_t ni = 0; ni < 7; ni++)
      for (size_t ki = 0; ki < 4; ki++)
        for (int v = 0; v < 24; v++)
          if (run_driver_case(cfg, pool, ms[mi], ns[ni], ks[ki], v & 1, (v >> 1) & 3, v >> 3))
            g_pass++;
}

#if defined(__x86_64__)
/* Full 24-bit significands, so that splitting them in two bf16 numbers loses something. */
static float frand24(void) {
  g_seed = g_seed * 1103515245u + 12345u;
  unsigned hi = g_seed >> 8;
  g_seed = g_seed * 1103515245u + 12345u;
  return (float)(((double)hi + (double)(g_seed >> 8) / 16777216.0) / 8388608.0 - 1.0);
}

/* The bf16 nearest x (ties to even), as its 16 bits. */
static uint32_t bf16_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  return (uint32_t)(((uint64_t)u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}

/* A [m, k] as EMC_CONV_PAIRS words (the exporter's _bf16_pairs): [ceil(m / 32) * 2][kp / 16]
 * tiles of [16][16], word = bf16(x) | bf16(x - hi) << 16, zero past m and k. */
static uint32_t *make_pairs(const float *a, size_t m, size_t k) {
  const size_t mp = (m + 31) / 32 * 32, kp = (k + 15) / 16 * 16;
  uint32_t *w = calloc(mp * kp, 4);
  for (size_t r = 0; r < m; r++)
    for (size_t kk = 0; kk < k; kk++) {
      const float x = a[r * k + kk];
      const uint32_t hi = bf16_bits(x), hi32 = hi << 16;
      float hf;
      memcpy(&hf, &hi32, 4);
      w[((r / 16) * (kp / 16) + kk / 16) * 256 + (r % 16) * 16 + kk % 16] = hi | bf16_bits(x - hf)
                                                                                     << 16;
    }
  return w;
}

/*
 * The AMX paths (f32_gemm_32x32__amx.c) on GEMMs big enough to take them: every A form (packed
 * weight panels, row-major rows: bf16x3; bf16 pairs made ahead: four bf16 products each), every
 * B form, K over one and several K blocks and not a multiple of 32 (300 x 2000: several M blocks
 * of several K blocks; pairs: K blocks of up to 768), M and N with ragged 32-row / 32-column edges
 * (N over one and several groups of eight strips for pairs), bias on either side, a residual, a
 * clamp and an activation, 1, 2 and 3 threads (pairs with one strip group split K over them). The
 * bound is the split's: each product within 2^-15 of itself, so |c - ref| <= 4e-5 * sum |a b|
 * (plain bf16 products, or a lost lo term, miss it by ~50x); nothing is written outside C.
 */
static void test_gemm_amx(const em_cpu_config *cfg, em_threadpool *pool) {
  static const size_t shapes[][3] = {{64, 64, 512},   {70, 130, 300}, {97, 200, 257},
                                     {128, 96, 1000}, {66, 257, 130}, {300, 80, 2000},
                                     {512, 49, 1700}, {40, 20, 70}};
  for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
    const size_t m = shapes[si][0], n = shapes[si][1], k = shapes[si][2];
    const size_t mp = (m + 5) / 6 * 6, np = (n + 15) / 16 * 16;
    float *a = malloc(m * k * 4), *ap = calloc(mp * k, 4), *b = malloc(k * n * 4);
    float *bp = calloc(k * np, 4), *c = malloc((m * n + 8) * 4), *res = malloc(m * n * 4);
    float *bm = malloc(m * 4), *bn = malloc(n * 4), *pack = malloc(4 * 64 * 1024 + 256);
    double *ref = malloc(m * n * 8), *mag = malloc(m * n * 8);
    void *ws = malloc(EMC_AMX_SLOTS * emc_gemm_amx_slot_bytes() + 64);
    atomic_flag busy[EMC_AMX_SLOTS];
    for (int i = 0; i < EMC_AMX_SLOTS; i++) atomic_flag_clear(&busy[i]);
    for (size_t i = 0; i < m * k; i++) a[i] = frand24();
    for (size_t i = 0; i < k * n; i++) b[i] = frand24();
    for (size_t i = 0; i < m * n; i++) res[i] = frand24();
    for (size_t i = 0; i < m; i++) bm[i] = frand24();
    for (size_t i = 0; i < n; i++) bn[i] = frand24();
    for (size_t r = 0; r < m; r++)
      for (size_t kk = 0; kk < k; kk++) ap[(r / 6) * k * 6 + kk * 6 + r % 6] = a[r * k + kk];
    for (size_t kk = 0; kk < k; kk++)
      for (size_t j = 0; j < n; j++) bp[(j / 16) * k * 16 + kk * 16 + j % 16] = b[kk * n + j];
    uint32_t *pairs = make_pairs(a, m, k);
    for (size_t r = 0; r < m; r++)
      for (size_t j = 0; j < n; j++) {
        double acc = 0, s = 0;
        for (size_t kk = 0; kk < k; kk++) {
          acc += (double)a[r * k + kk] * b[kk * n + j];
          s += fabs((double)a[r * k + kk] * b[kk * n + j]);
        }
        ref[r * n + j] = acc, mag[r * n + j] = s;
      }
    strip_src src = {b, n};
    /* 40 x 20 x 70: below the bf16x3 path's thresholds, so only the pairs form runs */
    const int small = m < 64 || n < 64;
    for (int v = small ? 16 : 0; v < 24; v++) {
      const int a_packed = v < 16 ? v & 1 : 1, a_pairs = v >= 16;
      const int bmode = (v >> 1) & 3, extras = v < 16 ? v >> 3 : v & 1;
      emc_gemm g = {0};
      g.cfg = cfg, g.m = m, g.k = k, g.n = n, g.a_packed = a_packed;
      g.a = a_packed ? ap : a, g.a_rs = a_packed ? 1 : k, g.a_ks = a_packed ? EMC_MR : 1;
      g.a_pairs = a_pairs ? pairs : NULL;
      g.b = bmode == 0 ? bp : b, g.ldb = n, g.b_packed = bmode == 0;
      g.c = c, g.ldc = n, g.mm.min = extras ? -20.0f : -INFINITY;
      g.mm.max = extras ? 20.0f : INFINITY;
      g.bias_m = extras ? bm : NULL, g.bias_n = extras ? NULL : bn;
      g.res = extras ? res : NULL, g.ldr = n, g.act = extras ? EMC_ACT_SIGMOID : 0;
      if (bmode >= 2) g.pack = pack + 1;
      if (bmode == 3) g.pack_b = copy_strip, g.pack_ctx = &src;
      g.amx_ws = (char *)ws + 1, g.amx_busy = busy, g.amx_slots = EMC_AMX_SLOTS;
      if (a_pairs)
        CHECK(emc_gemm_amx_pairs_fits(&g), "m=%zu n=%zu k=%zu: pairs do not take the AMX path", m,
              n, k);
      else
        CHECK(emc_gemm_amx_fits(&g), "m=%zu n=%zu k=%zu does not take the AMX path", m, n, k);
      for (size_t i = 0; i < m * n + 8; i++) c[i] = SENTINEL;
      emc_gemm_run(&g, pool);
      int ok = 1;
      for (size_t r = 0; r < m && ok; r++)
        for (size_t j = 0; j < n && ok; j++) {
          double want = ref[r * n + j] + (extras ? (double)bm[r] + res[r * n + j] : bn[j]);
          if (extras) want = 1.0 / (1.0 + exp(-fmin(fmax(want, -20.0), 20.0)));
          const double tol = 4e-5 * (mag[r * n + j] + 2.0) + 1e-6;
          if (!(fabs(c[r * n + j] - want) <= tol)) {
            CHECK(0,
                  "amx m=%zu n=%zu k=%zu a_packed=%d pairs=%d bmode=%d extras=%d threads=%d: "
                  "c[%zu,%zu] = %.9g, want %.9g (tol %.3g)",
                  m, n, k, a_packed, a_pairs, bmode, extras, em_threadpool_size(pool), r, j,
                  c[r * n + j], want, tol);
            ok = 0;
          }
        }
      for (size_t i = m * n; i < m * n + 8 && ok; i++)
        if (c[i] != SENTINEL) {
          CHECK(0, "amx m=%zu n=%zu k=%zu: wrote past C", m, n, k);
          ok = 0;
        }
      if (ok) g_pass++;
    }
    free(a), free(ap), free(b), free(bp), free(c), free(res), free(bm), free(bn), free(pack);
    free(ref), free(mag), free(ws), free(pairs);
  }
}
#endif

/* The int8 conv tile (em_q8_gemm_for the ISA: AVX-512 VNNI 6x32, the vectorized portable 6x16
 * or scalar) against exact int64 sums and the same float epilogue, bit for bit, at every mr, nr
 * up to its width (em_q8_gemm_nr_for: two column panels for the 6x32 tile) and odd / even kq,
 * with the extremes of u8 and int8; writes outside the tile caught. */
static void test_q8_gemm(const em_cpu_config *cfg) {
  enum { MAXKQ = 37, LDC = 36 };
  static int8_t a[MAXKQ * 24];
  static uint8_t b[2 * MAXKQ * 64];
  static float c[6 * LDC];
  static const size_t kqs[] = {1, 2, 3, 16, 37};
  const em_q8_gemm_fn fn = em_q8_gemm_for(cfg->isa);
  const size_t width = em_q8_gemm_nr_for(cfg->isa);
  CHECK(width == 16 || width == 32, "%s q8 tile width %zu", cfg->isa, width);
  int32_t corr[6];
  float scale[6], bias[6];
  int bad = 0;
  for (size_t ki = 0; ki < sizeof kqs / sizeof kqs[0]; ki++)
    for (size_t mr = 1; mr <= 6; mr++)
      for (size_t nr = 1; nr <= width; nr++)
        for (int extreme = 0; extreme < 2; extreme++) {
          const size_t kq = kqs[ki];
          for (size_t i = 0; i < kq * 24; i++)
            a[i] = extreme ? (int8_t)(i % 3 == 0 ? -128 : 127) : (int8_t)(rand() % 256 - 128);
          for (size_t i = 0; i < 2 * kq * 64; i++) /* two column panels, [2][kq][16][4] */
            b[i] = extreme ? (uint8_t)(i % 5 == 0 ? 0 : 255) : (uint8_t)(rand() % 256);
          for (int r = 0; r < 6; r++)
            corr[r] = rand() % 100000 - 50000, scale[r] = frand() * 1e-3f, bias[r] = frand();
          for (size_t i = 0; i < 6 * LDC; i++) c[i] = SENTINEL;
          fn(mr, nr, kq, a, b, corr, scale, (nr & 1) ? bias : NULL, c, LDC);
          for (size_t r = 0; r < 6 && bad < 5; r++)
            for (size_t j = 0; j < LDC && bad < 5; j++) {
              float want = SENTINEL;
              if (r < mr && j < nr) {
                int64_t acc = 0;
                for (size_t q = 0; q < kq; q++)
                  for (size_t t = 0; t < 4; t++)
                    acc += (int64_t)a[q * 24 + r * 4 + t] *
                           b[(j / 16) * kq * 64 + q * 64 + (j % 16) * 4 + t];
                const float prod = (float)(acc - corr[r]) * scale[r];
                want = prod + ((nr & 1) ? bias[r] : 0.0f);
              }
              if (c[r * LDC + j] != want) {
                bad++;
                CHECK(0, "%s q8 tile mr=%zu nr=%zu kq=%zu: c[%zu][%zu] = %g, want %g", cfg->isa, mr,
                      nr, kq, r, j, c[r * LDC + j], want);
              }
            }
          if (!bad) g_pass++;
        }
}

/* The int8 convs' input quantizer (em_q8_quant_for the ISA), planes to channels last, against
 * the formula written here (nearbyint in the default rounding mode, NaN to lo) at channel counts
 * and pixel counts around the 16 x 16 blocks, strides wider than the data, values at the
 * rounding ties, past the range, infinities and NaN, with and without a clamp first (a fused
 * relu6); bytes between pixels left alone; and pixels 4 bytes apart (a stem's 1-4 channels). */
static void test_q8_quant(const em_cpu_config *cfg) {
  enum { MAXC = 40, MAXN = 37, XS = 41, YS = 45 };
  static float x[MAXC * XS];
  static uint8_t y[MAXN * YS];
  static const size_t cs[] = {1, 2, 3, 4, 15, 16, 17, 32, 40}, ns[] = {1, 7, 15, 16, 17, 33, 37};
  static const size_t yss[] = {YS, 4};
  static const em_q8_quant_params ps[] = {{10.0f, 3.0f, 0.0f, 255.0f, -INFINITY, INFINITY},
                                          {0.37f, 128.0f, 0.0f, 255.0f, -INFINITY, INFINITY},
                                          {1.0f, 0.0f, 0.0f, 6.0f, -INFINITY, INFINITY},
                                          {4.0f, 100.0f, 0.0f, 255.0f, 0.0f, 6.0f}};
  const em_q8_quant_fn fn = em_q8_quant_for(cfg->isa);
  int bad = 0;
  for (size_t pi = 0; pi < sizeof ps / sizeof ps[0]; pi++)
    for (size_t ci = 0; ci < sizeof cs / sizeof cs[0]; ci++)
      for (size_t ni = 0; ni < sizeof ns / sizeof ns[0] * 2; ni++) {
        const em_q8_quant_params *p = &ps[pi];
        const size_t c = cs[ci], n = ns[ni / 2], ys = yss[ni % 2];
        if (c > ys) continue;
        for (size_t i = 0; i < MAXC * XS; i++) {
          const int kind = rand() % 16;
          x[i] = kind == 0   ? (float)(rand() % 64 - 32) * 0.5f / p->inv /* ties */
                 : kind == 1 ? 1e30f * (rand() % 2 ? 1.0f : -1.0f)
                 : kind == 2 ? (rand() % 2 ? INFINITY : -INFINITY)
                 : kind == 3 ? NAN
                             : frand() * 300.0f / p->inv;
        }
        memset(y, 0xA5, sizeof y);
        fn(c, n, x, XS, y, ys, p);
        for (size_t i = 0; i < n && bad < 5; i++)
          for (size_t ch = 0; ch < ys && bad < 5; ch++) {
            int want = 0xA5;
            if (ch < c) {
              float v = x[ch * XS + i];
              v = v < p->xlo ? p->xlo : v > p->xhi ? p->xhi : v; /* NaN stays */
              const float t = v * p->inv;
              const float r = isnan(t) ? p->lo : nearbyintf(t) + p->zp;
              want = (int)(r < p->lo ? p->lo : r > p->hi ? p->hi : r);
            }
            if (y[i * ys + ch] != want) {
              bad++;
              CHECK(0,
                    "%s q8 quant c=%zu n=%zu ys=%zu params %zu: y[%zu][%zu] = %d, want %d (x = %g)",
                    cfg->isa, c, n, ys, pi, i, ch, y[i * ys + ch], want,
                    ch < c ? (double)x[ch * XS + i] : 0.0);
            }
          }
        for (size_t b = n * ys; b < sizeof y && bad < 5; b++) /* past the last pixel */
          if (y[b] != 0xA5) {
            bad++;
            CHECK(0, "%s q8 quant c=%zu n=%zu ys=%zu: byte %zu past the pixels written", cfg->isa,
                  c, n, ys, b);
          }
        if (!bad) g_pass++;
      }
}

/* The quantizer of scaled planes (em_q8_quant_scaled_for the ISA, where it has one) against
 * what it replaces: the ISA's multiply by each plane's scale with the clamp (vbinc's mul) into a
 * buffer, then its quantizer; scales of either sign, zero and infinite, clamps of a relu, none
 * and one outside the quantizer's own clamp, NaN and infinite inputs; bytes past the pixels and
 * channels left alone. */
static void test_q8_quant_scaled(const em_cpu_config *cfg) {
  enum { MAXC = 40, MAXN = 37, XS = 41, YS = 45 };
  static float x[MAXC * XS], s[MAXC], buf[MAXC * XS];
  static uint8_t y[MAXN * YS], want[MAXN * YS];
  static const size_t cs[] = {1, 3, 15, 16, 17, 40}, ns[] = {1, 8, 16, 17, 37};
  const em_q8_quant_params *ps = k_scaled_quants;
  const em_minmax_params *mms = k_scaled_clamps;
  const em_q8_quant_scaled_fn fn = em_q8_quant_scaled_for(cfg->isa);
  if (!fn) return;
  const em_q8_quant_fn quant = em_q8_quant_for(cfg->isa);
  int bad = 0;
  for (size_t pi = 0; pi < 2; pi++)
    for (size_t mi = 0; mi < 3; mi++)
      for (size_t ci = 0; ci < sizeof cs / sizeof cs[0]; ci++)
        for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
          const size_t c = cs[ci], n = ns[ni];
          for (size_t i = 0; i < MAXC * XS; i++) {
            const int kind = rand() % 16;
            x[i] = kind == 0   ? NAN
                   : kind == 1 ? (rand() % 2 ? INFINITY : -INFINITY)
                               : (frand() - 0.5f) * 40.0f;
          }
          for (size_t ch = 0; ch < MAXC; ch++) {
            const int kind = rand() % 10;
            s[ch] = kind == 0 ? 0.0f : kind == 1 ? INFINITY : (frand() - 0.3f) * 3.0f;
          }
          for (size_t ch = 0; ch < c; ch++)
            cfg->vbinc[EMC_BIN_MUL](n, x + ch * XS, s + ch, buf + ch * XS, &mms[mi]);
          memset(want, 0xA5, sizeof want);
          quant(c, n, buf, XS, want, YS, &ps[pi]);
          memset(y, 0xA5, sizeof y);
          fn(c, n, x, XS, s, &mms[mi], y, YS, &ps[pi]);
          for (size_t b = 0; b < sizeof y && bad < 5; b++)
            if (y[b] != want[b]) {
              bad++;
              CHECK(0,
                    "%s q8 quant scaled c=%zu n=%zu params %zu clamp %zu: byte %zu = %d, want %d",
                    cfg->isa, c, n, pi, mi, b, y[b], want[b]);
            }
          if (!bad) g_pass++;
        }
}

/* The int8 im2col packer (em_q8_pack_for the ISA) against the layout written here, at group
 * counts around its blocks of 4, offsets into the pixels and pixels in any order; the bytes
 * after the panel left alone. */
static void test_q8_pack(const em_cpu_config *cfg) {
  enum { PIX = 64, STRIDE = 80, MAXCQ = 11 };
  static uint8_t img[PIX * STRIDE], dst[MAXCQ * 64 + 64];
  const em_q8_pack_fn fn = em_q8_pack_for(cfg->isa);
  for (size_t i = 0; i < sizeof img; i++) img[i] = (uint8_t)rand();
  int bad = 0;
  for (size_t cq = 1; cq <= MAXCQ; cq++)
    for (size_t off = 0; off + cq * 4 <= STRIDE; off += 12) {
      const uint8_t *src[16];
      for (int j = 0; j < 16; j++) src[j] = img + (size_t)(rand() % PIX) * STRIDE;
      memset(dst, 0x5A, sizeof dst);
      fn(src, off, cq, dst);
      for (size_t i = 0; i < sizeof dst && bad < 5; i++) {
        const size_t q = i / 64, j = i % 64 / 4, t = i % 4;
        const int want = q < cq ? src[j][off + q * 4 + t] : 0x5A;
        if (dst[i] != want) {
          bad++;
          CHECK(0, "%s q8 pack cq=%zu off=%zu: dst[%zu] = %d, want %d", cfg->isa, cq, off, i,
                dst[i], want);
        }
      }
      if (!bad) g_pass++;
    }
}

/* The int8 depthwise row (em_q8_dw_for the ISA) against the portable row, byte for byte: 3x3
 * (the register paths: windows sharing columns at stride 1 or 2, and the others) and other
 * kernels, channel counts around 16, strides and dilations (1/1, 2/2, 2/1, 1/2), channels-last
 * strides wider than the channels, a clamp before the quantization or none. */
static void test_q8_dw(const em_cpu_config *cfg) {
  enum { IMG = 20000, MAXW = 25 * 48, OUT = 4096 };
  static uint8_t in[IMG], got[OUT], want[OUT];
  static float w[MAXW], corr[48], scale[48], bias[48];
  static const size_t chs[] = {1, 7, 16, 17, 40}, ks[][2] = {{3, 3}, {5, 5}, {1, 3}};
  const em_q8_dw_fn fn = em_q8_dw_for(cfg->isa);
  for (size_t i = 0; i < IMG; i++) in[i] = (uint8_t)rand();
  int bad = 0;
  for (size_t ci = 0; ci < sizeof chs / sizeof chs[0]; ci++)
    for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++)
      for (int variant = 0; variant < 4; variant++) {
        static const size_t steps[] = {1, 2, 2, 1}, dxs[] = {1, 2, 1, 2};
        const size_t ch = chs[ci], cp = (ch + 3) / 4 * 4 + 4 * (size_t)(variant & 1);
        const size_t cw = (ch + 15) / 16 * 16, kh = ks[ki][0], kw = ks[ki][1];
        for (size_t i = 0; i < kh * kw * cw; i++) w[i] = (float)(rand() % 256 - 128);
        for (size_t c = 0; c < cw; c++)
          corr[c] = (float)(rand() % 20000 - 10000), scale[c] = frand() * 1e-3f, bias[c] = frand();
        em_q8_dw_params p = {.ow = 7,
                             .ch = ch,
                             .cpo = cp,
                             .kh = kh,
                             .kw = kw,
                             .cw = cw,
                             .step = steps[variant] * cp,
                             .dy = 11 * cp,
                             .dx = dxs[variant] * cp,
                             .w = w,
                             .corr = corr,
                             .scale = scale,
                             .bias = bias,
                             .oq = {40.0f, 120.0f, 0.0f, 255.0f, variant & 1 ? 0.0f : -INFINITY,
                                    variant & 1 ? 3.0f : INFINITY}};
        memset(got, 0x5A, sizeof got), memset(want, 0x5A, sizeof want);
        fn(in, got, &p);
        em_q8_dwconv_ukernel__scalar(in, want, &p);
        for (size_t i = 0; i < OUT && bad < 5; i++)
          if (got[i] != want[i]) {
            bad++;
            CHECK(0, "%s q8 dw ch=%zu k=%zux%zu variant %d: byte %zu = %d, want %d", cfg->isa, ch,
                  kh, kw, variant, i, got[i], want[i]);
          }
        if (!bad) g_pass++;
      }
}

/* The pixel-major int8 tile (em_q8_pw_for the ISA, where there is one) against sums and the
 * reference quantizer written here (em_q8_quant1 of (acc - corr) * scale + bias, two roundings):
 * pixel counts 1-21 (8-pixel tiles, a last one of 1 or 5; the u8 streams' groups of 3 and 4
 * pixels and their tails), channel counts around its two 16-channel blocks, depth groups on
 * both sides of the register-held weights' limit (9) read at any
 * offset of each pixel, quantizers with and without a clamp whose bounds land inside the u8
 * range (zp above lo, a relu6 narrower than the range) and the f32-planes output, values past
 * the int32 range both ways and NaNs; each pixel's bytes where its pointer says (pixels in order
 * or backwards), bytes past nc left alone. */
static void test_q8_pw_fn(const em_cpu_config *cfg, em_q8_pw_fn fn) {
  enum { PIX = 21, STRIDE = 96, MAXQ = 12, YS = 40 };
  static uint8_t img[PIX * STRIDE], y[PIX * YS];
  static int8_t w[2 * MAXQ * 64];
  static int32_t qoff[MAXQ], corr[32];
  static float scale[32], bias[32], yf[32 * PIX];
  static const size_t nps[] = {1, 3, 4, 5, 8, 9, 17, 21}, ncs[] = {3, 16, 17, 32};
  static const size_t kqs[] = {1, 2, 4, 8, 9, 10, 12};
  static const em_q8_quant_params ps[] = {{0.05f, 7.0f, 0.0f, 255.0f, -INFINITY, INFINITY},
                                          {0.02f, 130.0f, 0.0f, 255.0f, 0.0f, 6.0f},
                                          {0.5f, 0.0f, 0.0f, 255.0f, 0.0f, INFINITY}};
  for (size_t i = 0; i < sizeof img; i++) img[i] = (uint8_t)rand();
  for (size_t i = 0; i < sizeof w; i++) w[i] = (int8_t)(rand() % 256 - 128);
  int bad = 0;
  for (size_t a = 0; a < sizeof nps / sizeof nps[0]; a++)
    for (size_t b = 0; b < sizeof ncs / sizeof ncs[0]; b++)
      for (size_t kc = 0; kc < sizeof kqs / sizeof kqs[0]; kc++)
        for (size_t pi = 0; pi <= sizeof ps / sizeof ps[0]; pi++) { /* pi == 3: f32 planes */
          const size_t np = nps[a], nc = ncs[b], kq = kqs[kc];
          const uint8_t *x[PIX];
          for (size_t i = 0; i < PIX; i++) x[i] = img + (size_t)(rand() % PIX) * STRIDE;
          for (size_t q = 0; q < kq; q++) qoff[q] = (int32_t)(rand() % (STRIDE / 4)) * 4;
          for (size_t c = 0; c < 32; c++)
            corr[c] = rand() % 4000 - 2000, scale[c] = frand() * 2.0f, bias[c] = frand() * 50.0f;
          if (kc & 1) /* values past the int32 range both ways, and NaNs */
            scale[3] = 1e30f, scale[20] = -1e30f, bias[9] = NAN, scale[26] = INFINITY;
          const em_q8_quant_params *p = pi < 3 ? &ps[pi] : &ps[0];
          memset(y, 0x5A, sizeof y);
          /* pixel i's bytes at row at[i] of y: in order, or backwards (any place) */
          size_t at[PIX];
          uint8_t *yp[PIX];
          const size_t yc = kc % 2 ? 3 : 0; /* the first channel's byte in a pixel's: 0 or 3 */
          for (size_t i = 0; i < np; i++) at[i] = a % 2 ? np - 1 - i : i, yp[i] = y + at[i] * YS;
          fn(np, nc, kq, x, qoff, w, corr, scale, bias, yp, yc, p, pi < 3 ? NULL : yf, PIX);
          for (size_t i = 0; i < np && bad < 5; i++)
            for (size_t c = 0; c < nc && bad < 5; c++) {
              int32_t acc = 0;
              for (size_t q = 0; q < kq; q++)
                for (size_t t = 0; t < 4; t++)
                  acc += x[i][qoff[q] + t] * w[(c / 16) * kq * 64 + q * 64 + c % 16 * 4 + t];
              const float d = (float)(acc - corr[c]);
              const float m = d * scale[c];
              const float v = m + bias[c]; /* two roundings, as the tile */
              const float got = yf[c * PIX + i];
              const bool ok = pi < 3 ? y[at[i] * YS + yc + c] == em_q8_quant1(v, p)
                                     : got == v || (got != got && v != v);
              if (!ok) {
                bad++;
                CHECK(0, "%s q8 pw np=%zu nc=%zu kq=%zu params %zu: pixel %zu channel %zu",
                      cfg->isa, np, nc, kq, pi, i, c);
              }
            }
          for (size_t i = np; i < PIX && pi < 3 && bad < 5; i++) /* pixels past np */
            for (size_t c = 0; c < YS; c++)
              if (y[i * YS + c] != 0x5A) {
                bad++;
                CHECK(0, "%s q8 pw np=%zu: pixel %zu written", cfg->isa, np, i);
                break;
              }
          for (size_t i = 0; i < np && pi < 3 && bad < 5; i++)
            for (size_t c = 0; c < YS; c++) /* bytes before yc and past yc + nc */
              if ((c < yc || c >= yc + nc) && y[at[i] * YS + c] != 0x5A) {
                bad++;
                CHECK(0, "%s q8 pw np=%zu nc=%zu: byte %zu of pixel %zu written", cfg->isa, np, nc,
                      c, i);
                break;
              }
          if (!bad) g_pass++;
        }
}

/* The ISA's pixel-major tile; with AVX-512 VNNI both variants (4-pixel streams for split
 * datapaths, 8-pixel tiles for full ones), whichever this CPU's em_q8_pw_for picks. */
static void test_q8_pw(const em_cpu_config *cfg) {
  const em_q8_pw_fn fn = em_q8_pw_for(cfg->isa);
  if (!fn) return;
#if defined(__x86_64__) || defined(__i386__)
  if (fn == em_q8_pw_ukernel__avx512vnni || fn == em_q8_pw8_ukernel__avx512vnni) {
    test_q8_pw_fn(cfg, em_q8_pw_ukernel__avx512vnni);
    test_q8_pw_fn(cfg, em_q8_pw8_ukernel__avx512vnni);
    return;
  }
#endif
  test_q8_pw_fn(cfg, fn);
}

static void test_isa(const em_cpu_config *cfg) {
  test_q8_pw(cfg);
  test_q8_dw(cfg);
  test_gemm(cfg);
  test_q8_gemm(cfg);
  test_q8_quant(cfg);
  test_q8_quant_scaled(cfg);
  test_q8_pack(cfg);
#if defined(__x86_64__) || defined(__i386__)
  if (cfg->gemm == em_f32_gemm_minmax_ukernel_6x64__avx512f) { /* the 6x48, 6x32 ones too */
    em_cpu_config c48 = *cfg, c32 = *cfg;
    c48.isa = "avx512f-6x48", c48.nr = 48, c48.gemm = em_f32_gemm_minmax_ukernel_6x48__avx512f;
    c32.isa = "avx512f-6x32", c32.nr = 32, c32.gemm = em_f32_gemm_minmax_ukernel_6x32__avx512f;
    test_gemm(&c48);
    test_gemm(&c32);
  }
#endif
  test_gemm_driver(cfg, NULL);
  em_threadpool *pool = em_threadpool_create(2);
  test_gemm_driver(cfg, pool);
#if defined(__x86_64__)
  if (cfg->amx) {
    test_gemm_amx(cfg, NULL);
    test_gemm_amx(cfg, pool);
    em_threadpool *pool3 = em_threadpool_create(3); /* pairs: K split three ways */
    test_gemm_amx(cfg, pool3);
    em_threadpool_destroy(pool3);
  }
#endif
  em_threadpool_destroy(pool);
  test_gemv16(cfg);
  test_gemv6(cfg);
}

int main(void) {
  CHECK(for_each_isa(test_isa) > 0, "no ISA tested");
  return test_summary("test_cpu_ukernels_gemm");
}
