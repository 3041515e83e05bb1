/*
 * test_cpu_ukernels.c — every EmberCpuBackend micro-kernel of every ISA this
 * CPU runs (AVX-512F, AVX2+FMA, NEON, scalar), at sizes below, at, above and
 * multiples of its tile, against a double-precision scalar reference. GEMM
 * tiles are also checked for writes outside [mr, nc]. The GEMM driver
 * (cpu_gemm.c: K blocks, M blocks, strips, B packing, threads) is checked the
 * same way on whole matrices, every B form, with and without a thread pool.
 * The Winograd transforms are checked against double-precision B^T d B and A^T M A. Where the
 * CPU and OS allow AMX, the "amx" configuration's bf16x3 GEMM path is checked within its own
 * error bound (test_gemm_amx).
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../backends/cpu/cpu_internal.h"
#include "../../backends/cpu/cpu_ukernels.h"
#include "../../backends/cpu/emc_format.h"
#include "ember/threadpool.h"
#include "ember_ext/cpu_env.h"
#include "test_util.h"

static unsigned g_seed = 12345;
static float frand(void) {
  g_seed = g_seed * 1103515245u + 12345u;
  return (float)((g_seed >> 8) & 0xFFFF) / 32768.0f - 1.0f;
}

static int close_to(double got, double want, double tol) {
  return fabs(got - want) <= tol * (1.0 + fabs(want));
}

#define SENTINEL 12345.0f

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
          em_minmax_params p = {-2.5f, 2.5f};
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

/* The reference for output (oy, ox) of a depthwise conv: in double, zero padding, clamped. */
static double dw_ref(const em_dw_params *q, const float *in, const float *w, float bias, int64_t oy,
                     int64_t ox, const em_minmax_params *p) {
  double acc = bias;
  for (int64_t ky = 0; ky < q->kh; ky++)
    for (int64_t kx = 0; kx < q->kw; kx++) {
      const int64_t iy = oy * q->sh + ky * q->dh - q->ph, ix = ox * q->sw + kx * q->dw - q->pw;
      if (iy >= 0 && iy < q->h && ix >= 0 && ix < q->w)
        acc += (double)w[ky * q->kw + kx] * in[iy * q->w + ix];
    }
  return fmin(fmax(acc, p->min), p->max);
}

static void test_dwconv(const em_cpu_config *cfg) {
  static float in[40 * 40], w[49], out[40 * 40];
  static const int64_t sizes[] = {1, 5, 7, 16, 17, 33};
  int bad = 0;
  for (size_t hi = 0; hi < 6; hi++)
    for (int64_t k = 1; k <= 5; k += 2)
      for (int64_t s = 1; s <= 3; s++)
        for (int64_t pad = 0; pad <= 2; pad++)
          for (int64_t dil = 1; dil <= 2; dil++) {
            int64_t h = sizes[hi], wd = sizes[(hi + 2) % 6];
            int64_t span = dil * (k - 1) + 1;
            if (h + 2 * pad < span || wd + 2 * pad < span) continue;
            em_dw_params q = {h,
                              wd,
                              (h + 2 * pad - span) / s + 1,
                              (wd + 2 * pad - span) / s + 1,
                              k,
                              k,
                              s,
                              s,
                              pad,
                              pad,
                              dil,
                              dil};
            for (int64_t i = 0; i < h * wd; i++) in[i] = frand();
            for (int64_t i = 0; i < k * k; i++) w[i] = frand();
            em_minmax_params p = {-1.5f, 1.5f};
            cfg->dwconv(&q, in, w, 0.25f, out, &p);
            for (int64_t oy = 0; oy < q.oh; oy++)
              for (int64_t ox = 0; ox < q.ow; ox++) {
                const double acc = dw_ref(&q, in, w, 0.25f, oy, ox, &p);
                if (!close_to(out[oy * q.ow + ox], acc, 1e-5) && bad++ < 5)
                  CHECK(
                      0,
                      "%s dwconv h=%lld w=%lld k=%lld s=%lld p=%lld d=%lld at %lld,%lld: %g vs %g",
                      cfg->isa, (long long)h, (long long)wd, (long long)k, (long long)s,
                      (long long)pad, (long long)dil, (long long)oy, (long long)ox,
                      out[oy * q.ow + ox], acc);
              }
          }
  CHECK(bad == 0, "%s dwconv: %d mismatches", cfg->isa, bad);
}

/* The direct few-channel conv (stems): every output of rows [oy0, oy1) against a double
 * reference, for 1-4 input channels, 1x1 to 3x3 (and 1x7 / 5x1) kernels, stride 1 and 2, padding
 * 0 to 3, rows past a 16-lane vector and ragged ones, 1 to 16 channels; nothing written outside
 * those rows or past channel nco. */
static void test_conv_smallc(const em_cpu_config *cfg) {
  if (!cfg->conv_smallc) return;
  enum { H = 23, W = 37, CO = 16 };
  static float in[4 * H * W], wb[4 * 9 * 16], out[(CO + 1) * (H + 6) * (W + 6)];
  static const int64_t shapes[][2] = {{1, 1}, {3, 3}, {2, 2}, {1, 7}, {5, 1}};
  float bias[CO];
  int bad = 0;
  for (size_t si = 0; si < 5; si++)
    for (int64_t cin = 1; cin <= 4; cin++)
      for (int64_t s = 1; s <= 2; s++)
        for (int64_t pad = 0; pad <= 3; pad++)
          for (int64_t wd = 15; wd <= W; wd += 11) {
            const int64_t kh = shapes[si][0], kw = shapes[si][1];
            if (cin * kh * kw > 36) continue;
            const int64_t h = H - wd % 5, oh = (h + 2 * pad - kh) / s + 1,
                          ow = (wd + 2 * pad - kw) / s + 1, nco = 1 + (cin * 5 + pad + s) % CO;
            em_dw_params q = {h, wd, oh, ow, kh, kw, s, s, pad, pad, 1, 1};
            for (int64_t i = 0; i < cin * h * wd; i++) in[i] = frand();
            for (int64_t i = 0; i < cin * kh * kw * 16; i++) wb[i] = i % 16 < nco ? frand() : 0.f;
            for (int64_t c = 0; c < CO; c++) bias[c] = frand();
            for (int64_t i = 0; i < (CO + 1) * (H + 6) * (W + 6); i++) out[i] = SENTINEL;
            const int64_t oy0 = oh > 4 ? 1 : 0, oy1 = oh > 4 ? oh - 1 : oh;
            em_minmax_params p = {-2.0f, 2.5f};
            cfg->conv_smallc(&q, cin, oy0, oy1, in, wb, si % 2 ? NULL : bias, nco, out, &p);
            for (int64_t c = 0; c <= CO; c++)
              for (int64_t oy = 0; oy < oh; oy++)
                for (int64_t ox = 0; ox < ow; ox++) {
                  const float got = out[(c * oh + oy) * ow + ox];
                  if (c >= nco || oy < oy0 || oy >= oy1) {
                    if (got != SENTINEL && bad++ < 5)
                      CHECK(0,
                            "%s conv_smallc wrote channel %lld row %lld (rows %lld-%lld, %lld "
                            "channels)",
                            cfg->isa, (long long)c, (long long)oy, (long long)oy0, (long long)oy1,
                            (long long)nco);
                    continue;
                  }
                  double acc = si % 2 ? 0.0 : bias[c];
                  for (int64_t ci = 0; ci < cin; ci++)
                    for (int64_t ky = 0; ky < kh; ky++)
                      for (int64_t kx = 0; kx < kw; kx++) {
                        const int64_t iy = oy * s + ky - pad, ix = ox * s + kx - pad;
                        if (iy >= 0 && iy < h && ix >= 0 && ix < wd)
                          acc += (double)wb[((ci * kh + ky) * kw + kx) * 16 + c] *
                                 in[(ci * h + iy) * wd + ix];
                      }
                  acc = fmin(fmax(acc, p.min), p.max);
                  if (!close_to(got, acc, 1e-5) && bad++ < 5)
                    CHECK(0,
                          "%s conv_smallc cin=%lld %lldx%lld s=%lld p=%lld w=%lld at c%lld "
                          "(%lld,%lld): %g vs %g",
                          cfg->isa, (long long)cin, (long long)kh, (long long)kw, (long long)s,
                          (long long)pad, (long long)wd, (long long)c, (long long)oy, (long long)ox,
                          got, acc);
                }
          }
  CHECK(bad == 0, "%s conv_smallc: %d mismatches", cfg->isa, bad);
}

/* 3x3 pad 1 and 5x5 pad 2 stride-1 convs over small planes (the flat AVX-512 path at h * w <= 64
 * and 128, just past each, and bigger): every output checked, nothing past the plane written. */
static void test_dwconv_small(const em_cpu_config *cfg) {
  static float in[40 * 40], out[40 * 40 + 16], w[25];
  static const int64_t hw[][2] = {{1, 1}, {2, 3},  {7, 7},   {8, 8},   {5, 13}, {13, 5}, {1, 40},
                                  {9, 9}, {8, 16}, {14, 14}, {16, 16}, {6, 40}, {40, 1}, {17, 16}};
  int bad = 0;
  for (size_t c = 0; c < 2 * sizeof hw / sizeof hw[0]; c++) {
    const int64_t h = hw[c / 2][0], wd = hw[c / 2][1], k = c % 2 ? 5 : 3, r = k / 2;
    em_dw_params q = {h, wd, h, wd, k, k, 1, 1, r, r, 1, 1};
    for (int64_t i = 0; i < h * wd; i++) in[i] = frand();
    for (int i = 0; i < 25; i++) w[i] = frand();
    for (int64_t i = 0; i < h * wd + 16; i++) out[i] = 1234.0f;
    em_minmax_params p = {-1.5f, 1.5f};
    cfg->dwconv(&q, in, w, -0.25f, out, &p);
    for (int64_t oy = 0; oy < h; oy++)
      for (int64_t ox = 0; ox < wd; ox++) {
        const double acc = dw_ref(&q, in, w, -0.25f, oy, ox, &p);
        if (!close_to(out[oy * wd + ox], acc, 1e-5) && bad++ < 5)
          CHECK(0, "%s dwconv %lldx%lld h=%lld w=%lld at %lld,%lld: %g vs %g", cfg->isa,
                (long long)k, (long long)k, (long long)h, (long long)wd, (long long)oy,
                (long long)ox, out[oy * wd + ox], acc);
      }
    for (int64_t i = h * wd; i < h * wd + 16; i++)
      if (out[i] != 1234.0f && bad++ < 5)
        CHECK(0, "%s dwconv %lldx%lld h=%lld w=%lld wrote past the plane", cfg->isa, (long long)k,
              (long long)k, (long long)h, (long long)wd);
  }
  CHECK(bad == 0, "%s dwconv small planes: %d mismatches", cfg->isa, bad);
}

/* The 16-plane depthwise kernel (where the ISA has one), on every geometry it takes up to 16 x 16
 * inputs (3x3 / 5x5, stride 1 / 2, each padding below the kernel, 4-16 output columns, ragged
 * channel counts, with and without a bias): each plane bit-for-bit what the one-plane kernel
 * gives, within 1e-5 of the double reference, and nothing between or past the planes written. */
static void test_dwconv_c16(const em_cpu_config *cfg) {
  if (!cfg->dwconv_c16) return;
  enum { IS = 16 * 16 + 3, OS = EM_DW_C16_OUT_MAX + 5 };
  static float in[16 * IS], w[16 * 25], bias[16], out[16 * OS], one[OS];
  static const size_t ncs[] = {1, 5, 16};
  int bad = 0, ran = 0;
  for (int64_t k = 3; k <= 5; k += 2)
    for (int64_t s = 1; s <= 2; s++)
      for (int64_t pad = 0; pad < k; pad++)
        for (int64_t h = 1; h <= 16; h++)
          for (int64_t wd = 1; wd <= 16; wd += (wd < 8 ? 1 : 3)) {
            if (h + 2 * pad < k || wd + 2 * pad < k) continue;
            em_dw_params q = {
                h, wd, (h + 2 * pad - k) / s + 1, (wd + 2 * pad - k) / s + 1, k, k, s, s, pad, pad,
                1, 1};
            if (!em_dw_c16_fits(&q)) continue;
            const size_t nc = ncs[ran % 3];
            const int with_bias = ran % 2;
            ran++;
            for (size_t i = 0; i < 16 * IS; i++) in[i] = frand();
            for (size_t i = 0; i < 16 * 25; i++) w[i] = frand();
            for (size_t i = 0; i < 16; i++) bias[i] = frand();
            for (size_t i = 0; i < 16 * OS; i++) out[i] = SENTINEL;
            em_minmax_params p = {-1.5f, 1.5f};
            cfg->dwconv_c16(&q, nc, in, IS, w, with_bias ? bias : NULL, out, OS, &p);
            const int64_t n = q.oh * q.ow;
            for (size_t c = 0; c < 16; c++) {
              const float *y = out + c * OS;
              if (c < nc)
                cfg->dwconv(&q, in + c * IS, w + c * k * k, with_bias ? bias[c] : 0.0f, one, &p);
              for (int64_t i = 0; i < OS; i++) {
                const int inside = c < nc && i < n;
                const double want = inside
                                        ? dw_ref(&q, in + c * IS, w + c * k * k,
                                                 with_bias ? bias[c] : 0.0f, i / q.ow, i % q.ow, &p)
                                        : SENTINEL;
                const int ok =
                    inside ? y[i] == one[i] && close_to(y[i], want, 1e-5) : y[i] == SENTINEL;
                if (!ok && bad++ < 5)
                  CHECK(0,
                        "%s dwconv_c16 k=%lld s=%lld p=%lld h=%lld w=%lld nc=%zu plane %zu at %lld:"
                        " %g, one-plane kernel %g, reference %g",
                        cfg->isa, (long long)k, (long long)s, (long long)pad, (long long)h,
                        (long long)wd, nc, c, (long long)i, y[i], inside ? one[i] : SENTINEL, want);
              }
            }
          }
  CHECK(ran > 100, "%s dwconv_c16: only %d geometries ran", cfg->isa, ran);
  CHECK(bad == 0, "%s dwconv_c16: %d mismatches", cfg->isa, bad);
}

/* 3x3 and 5x5, stride 1 and 2, every padding below the kernel, on rows wider than one block of
 * output vectors (AVX-512's direct path: 64 columns a block) and ragged at both ends: every
 * output checked, nothing past the output plane written. */
static void test_dwconv_wide(const em_cpu_config *cfg) {
  static float in[6 * 130], w[25], out[10 * 134 + 16]; /* the largest output: pad 4 */
  static const int64_t hw[][2] = {{6, 130}, {5, 113}, {4, 64}, {3, 65}, {6, 97}, {2, 48}};
  int bad = 0;
  for (size_t c = 0; c < sizeof hw / sizeof hw[0]; c++)
    for (int64_t k = 3; k <= 5; k += 2)
      for (int64_t s = 1; s <= 2; s++)
        for (int64_t d = 1; d <= 2; d++) /* dilation 2: the padded-copy kernel */
          for (int64_t pad = 0; pad < 2 * k; pad++) {
            /* pad >= k: padding below the plane only (pad - k + 1 rows, none above), as a band of
             * rows at the bottom of a plane has (cpu_ops.c: dw_bands). */
            const int64_t h = hw[c][0], wd = hw[c][1], below = pad < k ? pad : pad - k + 1;
            const int64_t above = pad < k ? pad : 0;
            const int64_t span = d * (k - 1) + 1;
            if (h + above + below < span || wd + 2 * above < span) continue;
            em_dw_params q = {h,
                              wd,
                              (h + above + below - span) / s + 1,
                              (wd + 2 * above - span) / s + 1,
                              k,
                              k,
                              s,
                              s,
                              above,
                              above,
                              d,
                              d};
            for (int64_t i = 0; i < h * wd; i++) in[i] = frand();
            for (int i = 0; i < 25; i++) w[i] = frand();
            for (int64_t i = 0; i < q.oh * q.ow + 16; i++) out[i] = 1234.0f;
            em_minmax_params p = {-1.5f, 1.5f};
            cfg->dwconv(&q, in, w, 0.5f, out, &p);
            for (int64_t oy = 0; oy < q.oh; oy++)
              for (int64_t ox = 0; ox < q.ow; ox++) {
                const double acc = dw_ref(&q, in, w, 0.5f, oy, ox, &p);
                if (!close_to(out[oy * q.ow + ox], acc, 1e-5) && bad++ < 5)
                  CHECK(0,
                        "%s dwconv %lldx%lld s=%lld d=%lld p=%lld h=%lld w=%lld at %lld,%lld: %g "
                        "vs %g",
                        cfg->isa, (long long)k, (long long)k, (long long)s, (long long)d,
                        (long long)pad, (long long)h, (long long)wd, (long long)oy, (long long)ox,
                        out[oy * q.ow + ox], acc);
              }
            for (int64_t i = q.oh * q.ow; i < q.oh * q.ow + 16; i++)
              if (out[i] != 1234.0f && bad++ < 5)
                CHECK(0, "%s dwconv %lldx%lld s=%lld h=%lld w=%lld wrote past the plane", cfg->isa,
                      (long long)k, (long long)k, (long long)s, (long long)h, (long long)wd);
          }
  CHECK(bad == 0, "%s dwconv wide rows: %d mismatches", cfg->isa, bad);
}

/* copy_stride2 at every length up to 3 vectors and a bit: exact, nothing past n written. */
static void test_copy_stride2(const em_cpu_config *cfg) {
  static float x[2 * 64], y[64 + 16];
  int bad = 0;
  for (size_t i = 0; i < 2 * 64; i++) x[i] = frand();
  for (size_t n = 0; n <= 52; n++) {
    for (size_t i = 0; i < n + 16; i++) y[i] = 1234.0f;
    cfg->copy_stride2(n, x, y);
    for (size_t i = 0; i < n + 16; i++)
      if (y[i] != (i < n ? x[2 * i] : 1234.0f)) bad++;
  }
  CHECK(bad == 0, "%s copy_stride2: %d wrong elements", cfg->isa, bad);
}

/*
 * maxpool2d on planes around the 16-lane vector (widths 1-37, heights 1-9), windows 1-4 wide and
 * high, strides 1-3, paddings up to half the window, NaNs scattered in: against the window max
 * with padding excluded, exact, NaN wherever the window holds one, nothing past the plane.
 */
static void test_maxpool(const em_cpu_config *cfg) {
  static float x[9 * 37], y[12 * 40 + 16]; /* outputs: up to (9 + 2) x (37 + 2) */
  int bad = 0, planes = 0;
  for (size_t i = 0; i < sizeof x / sizeof *x; i++) x[i] = i % 23 == 7 ? NAN : frand();
  for (int64_t h = 1; h <= 9; h += 2)
    for (int64_t w = 1; w <= 37; w += (w < 20 ? 1 : 5))
      for (int64_t k = 1; k <= 4; k++)
        for (int64_t s = 1; s <= 3; s++)
          for (int64_t p = 0; p <= k / 2; p++) {
            const int64_t oh = (h + 2 * p - k) / s + 1, ow = (w + 2 * p - k) / s + 1;
            if (oh < 1 || ow < 1) continue;
            const em_pool_params q = {h, w, oh, ow, k, k, s, s, p, p};
            for (size_t i = 0; i < sizeof y / sizeof *y; i++) y[i] = 1234.0f;
            cfg->maxpool(&q, x, y);
            planes++;
            for (int64_t oy = 0; oy < oh; oy++)
              for (int64_t ox = 0; ox < ow; ox++) {
                float m = -INFINITY;
                int nan = 0;
                for (int64_t ky = 0; ky < k; ky++)
                  for (int64_t kx = 0; kx < k; kx++) {
                    const int64_t iy = oy * s - p + ky, ix = ox * s - p + kx;
                    if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
                    const float v = x[iy * w + ix];
                    nan |= isnan(v);
                    m = v > m ? v : m;
                  }
                const float got = y[oy * ow + ox];
                bad += nan ? !isnan(got) : got != m;
              }
            for (int64_t i = oh * ow; i < oh * ow + 16; i++) bad += y[i] != 1234.0f;
          }
  CHECK(bad == 0, "%s maxpool2d: %d wrong elements over %d planes", cfg->isa, bad, planes);
}

/* Winograd transform matrices (B^T, A^T) for m = 2 and 4, in double: the reference. */
static const double wino_bt2[4][4] = {{1, 0, -1, 0}, {0, 1, 1, 0}, {0, -1, 1, 0}, {0, 1, 0, -1}};
static const double wino_at2[2][4] = {{1, 1, 1, 0}, {0, 1, -1, -1}};
static const double wino_bt4[6][6] = {{4, 0, -5, 0, 1, 0},  {0, -4, -4, 1, 1, 0},
                                      {0, 4, -4, -1, 1, 0}, {0, -2, -1, 2, 1, 0},
                                      {0, 2, -1, -2, 1, 0}, {0, 4, 0, -5, 0, 1}};
static const double wino_at4[4][6] = {
    {1, 1, 1, 1, 1, 0}, {0, 1, -1, 2, -2, 0}, {0, 1, 1, 4, 4, 0}, {0, 1, -1, 8, -8, 1}};

/* The matrix transpose at sizes around its 16 x 16 blocks, with row strides past the width:
 * exact, and nothing written outside y's rows x cols. */
static void test_transpose(const em_cpu_config *cfg) {
  enum { LD = 80 };
  static float x[70 * LD], y[70 * LD];
  static const size_t ns[] = {1, 3, 15, 16, 17, 33, 49, 64, 70};
  int bad = 0;
  for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
    for (size_t b = 0; b < sizeof ns / sizeof ns[0]; b++) {
      const size_t rows = ns[a], cols = ns[b];
      for (size_t i = 0; i < 70 * LD; i++) x[i] = frand(), y[i] = SENTINEL;
      cfg->transpose(rows, cols, x, LD, y, LD - 3);
      for (size_t c = 0; c < 70; c++)
        for (size_t r = 0; r < LD - 3; r++) {
          const float got = y[c * (LD - 3) + r];
          if (c < cols && r < rows ? got != x[r * LD + c] : got != SENTINEL) bad++;
        }
    }
  CHECK(bad == 0, "%s transpose: %d mismatches", cfg->isa, bad);
}

/* Double reference of element (p, q) of B^T d B for the window of lane l of rows (ldr apart). */
static double wino_in_ref(int m, const float *rows, size_t ldr, size_t l, size_t p, size_t q) {
  const size_t a = (size_t)m + 2;
  double want = 0;
  for (size_t i = 0; i < a; i++)
    for (size_t j = 0; j < a; j++) {
      const double bp = m == 2 ? wino_bt2[p][i] : wino_bt4[p][i];
      const double bq = m == 2 ? wino_bt2[q][j] : wino_bt4[q][j];
      want += bp * bq * rows[i * ldr + l * (size_t)m + j];
    }
  return want;
}

/*
 * The Winograd input and output transforms for m = 2 and 4 at tile counts around the 16-lane
 * vector and the 64-tile block (the input transform up to its 128 lanes, every lane a tile and
 * with gap lanes between runs of tiles): B^T d B and clamp(A^T M A + bias) against double
 * references, nothing written to v past the tiles.
 */
static void test_wino(const em_cpu_config *cfg) {
  enum { LDR = EM_WINO_MAX_LANES * 4 + 8, VS = 136 };
  static float rows[6 * LDR], v[36 * VS], mm[36 * VS], out[4 * LDR];
  static const size_t ns[] = {1, 5, 15, 16, 17, 31, 33, 48, 63, 64, 65, 80, 100, 127, 128};
  int bad = 0;
  for (int m = 2; m <= 4; m += 2) {
    const size_t a = (size_t)m + 2;
    for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
      const size_t n = ns[ni];
      for (size_t i = 0; i < 6 * LDR; i++) rows[i] = frand();
      for (size_t i = 0; i < 36 * VS; i++) v[i] = SENTINEL, mm[i] = frand();
      cfg->wino_in(m, n, NULL, rows, LDR, v, VS);
      for (size_t t = 0; t < VS; t++)
        for (size_t p = 0; p < a; p++)
          for (size_t q = 0; q < a; q++) {
            const float got = v[(p * a + q) * VS + t];
            if (t >= n) {
              if (got != SENTINEL) bad++;
              continue;
            }
            if (!close_to(got, wino_in_ref(m, rows, LDR, t, p, q), 1e-5)) bad++;
          }
      /* Lanes with gaps (runs of `run` tiles, one gap lane after each, as wino_in_block lays
       * out a block of short rows): the tiles stored packed in order, nothing past them. */
      for (size_t run = 1; run <= 15; run += 3) {
        uint16_t keep[EM_WINO_MAX_LANES / 16] = {0};
        size_t tiles = 0;
        for (size_t l = 0; l < n; l++)
          if (l % (run + 1) != run) keep[l / 16] |= (uint16_t)(1u << (l % 16)), tiles++;
        for (size_t i = 0; i < 36 * VS; i++) v[i] = SENTINEL;
        cfg->wino_in(m, n, keep, rows, LDR, v, VS);
        size_t k = 0;
        for (size_t l = 0; l < n; l++) {
          if (!((keep[l / 16] >> (l % 16)) & 1u)) continue;
          for (size_t p = 0; p < a; p++)
            for (size_t q = 0; q < a; q++)
              if (!close_to(v[(p * a + q) * VS + k], wino_in_ref(m, rows, LDR, l, p, q), 1e-5))
                bad++;
          k++;
        }
        for (size_t t = tiles; t < VS; t++)
          for (size_t xi = 0; xi < a * a; xi++)
            if (v[xi * VS + t] != SENTINEL) bad++;
      }
      const em_minmax_params mmp = {-0.5f, 2.0f};
      const float bias = 0.25f;
      if (n <= EM_WINO_MAX_TILES) cfg->wino_out(m, n, mm, VS, bias, out, LDR, &mmp);
      for (size_t t = 0; t < n && n <= EM_WINO_MAX_TILES; t++)
        for (size_t i = 0; i < (size_t)m; i++)
          for (size_t j = 0; j < (size_t)m; j++) {
            double want = bias;
            for (size_t p = 0; p < a; p++)
              for (size_t q = 0; q < a; q++) {
                const double ap = m == 2 ? wino_at2[i][p] : wino_at4[i][p];
                const double aq = m == 2 ? wino_at2[j][q] : wino_at4[j][q];
                want += ap * aq * mm[(p * a + q) * VS + t];
              }
            want = fmin(fmax(want, -0.5), 2.0);
            if (!close_to(out[i * LDR + t * (size_t)m + j], want, 1e-5)) bad++;
          }
      if (bad) {
        CHECK(0, "%s wino m=%d n=%zu: %d mismatches", cfg->isa, m, n, bad);
        return;
      }
      g_pass++;
    }
  }
}

static double ref_act(uint32_t act, double x, const float *fp) {
  switch (act) {
  case EMC_ACT_CLAMP: return fmin(fmax(x, fp[0]), fp[1]);
  case EMC_ACT_HARDSWISH: return x * fmin(fmax(x + 3, 0), 6) / 6;
  case EMC_ACT_HARDSIGMOID: return fmin(fmax(x + 3, 0), 6) / 6;
  case EMC_ACT_SIGMOID: return 1 / (1 + exp(-x));
  case EMC_ACT_SILU: return x / (1 + exp(-x));
  case EMC_ACT_GELU: return 0.5 * x * (1 + erf(x / sqrt(2.0)));
  case EMC_ACT_GELU_TANH:
    return 0.5 * x * (1 + tanh(sqrt(2 / 3.14159265358979323846) * (x + 0.044715 * x * x * x)));
  case EMC_ACT_TANH: return tanh(x);
  case EMC_ACT_EXP: return exp(x);
  case EMC_ACT_SQRT: return sqrt(fabs(x));
  case EMC_ACT_RSQRT: return 1 / sqrt(fabs(x) + 0.1);
  case EMC_ACT_NEG: return -x;
  case EMC_ACT_ABS: return fabs(x);
  default: return x;
  }
}

static void test_elementwise(const em_cpu_config *cfg) {
  static const size_t ns[] = {0, 1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 64, 100};
  static float a[128], b[128], y[128];
  const float fp[2] = {-0.75f, 0.5f};
  for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
    size_t n = ns[ni];
    for (size_t i = 0; i < 128; i++) a[i] = 4 * frand(), b[i] = frand() + 2.0f;
    em_minmax_params p = {-3.0f, 3.0f};
    for (int op = 0; op < 4; op++)
      for (int sc = 0; sc < 2; sc++) {
        y[n] = SENTINEL;
        (sc ? cfg->vbinc : cfg->vbin)[op](n, a, b, y, &p);
        int ok = y[n] == SENTINEL;
        for (size_t i = 0; i < n; i++) {
          double bv = sc ? b[0] : b[i];
          double r = op == 0   ? a[i] + bv
                     : op == 1 ? a[i] - bv
                     : op == 2 ? (double)a[i] * bv
                               : a[i] / bv;
          ok &= close_to(y[i], fmin(fmax(r, -3.0), 3.0), 1e-6);
        }
        CHECK(ok, "%s vbinary op=%d scalar=%d n=%zu", cfg->isa, op, sc, n);
      }
    for (uint32_t act = 1; act < EMC_ACT_END; act++) {
      for (size_t i = 0; i < n; i++) {
        if (act == EMC_ACT_SQRT) a[i] = fabsf(a[i]);
        if (act == EMC_ACT_RSQRT) a[i] = fabsf(a[i]) + 0.1f;
        if (act == EMC_ACT_EXP) a[i] = a[i] * 5.0f;
      }
      y[n] = SENTINEL;
      cfg->vact(n, a, y, act, fp);
      int ok = y[n] == SENTINEL;
      for (size_t i = 0; i < n; i++) {
        double want = ref_act(act, a[i], fp);
        if (act == EMC_ACT_SQRT || act == EMC_ACT_RSQRT)
          want = act == EMC_ACT_SQRT ? sqrt(a[i]) : 1 / sqrt(a[i]);
        ok &= fabs(y[i] - want) <= 2e-6 + 2e-6 * fabs(want);
        if (!ok) {
          CHECK(ok, "%s act %u n=%zu x=%g: %g vs %g", cfg->isa, act, n, a[i], y[i], want);
          break;
        }
      }
      if (ok) g_pass++;
    }
    if (n == 0) continue;
    for (int lg = 0; lg < 2; lg++) {
      double mx = -1e30, sum = 0;
      cfg->softmax(n, a, y, lg);
      /* Not fmax(): Debian's aarch64 gcc 12 crashes vectorizing that reduction (ICE). */
      for (size_t i = 0; i < n; i++) mx = a[i] > mx ? a[i] : mx;
      for (size_t i = 0; i < n; i++) sum += exp(a[i] - mx);
      int ok = 1;
      for (size_t i = 0; i < n; i++) {
        double want = lg ? a[i] - mx - log(sum) : exp(a[i] - mx) / sum;
        ok &= close_to(y[i], want, 2e-6);
      }
      CHECK(ok, "%s softmax log=%d n=%zu", cfg->isa, lg, n);
    }
    for (int rms = 0; rms < 2; rms++) {
      double mean = 0, var = 0;
      for (size_t i = 0; i < n; i++) mean += rms ? 0 : a[i];
      mean /= (double)n;
      for (size_t i = 0; i < n; i++) var += (a[i] - mean) * (a[i] - mean);
      double rstd = 1 / sqrt(var / (double)n + 1e-5);
      cfg->norm(n, a, b, rms ? NULL : b + 1, 1e-5f, rms, y);
      int ok = 1;
      for (size_t i = 0; i < n; i++)
        ok &= close_to(y[i], (a[i] - mean) * rstd * b[i] + (rms ? 0 : b[i + 1]), 1e-5);
      CHECK(ok, "%s norm rms=%d n=%zu", cfg->isa, rms, n);
    }
    em_minmax_params p2 = {-1.0f, 1.0f};
    cfg->vaffine(n, a, 0.5f, 0.25f, y, &p2);
    int ok = 1;
    for (size_t i = 0; i < n; i++) ok &= close_to(y[i], fmin(fmax(a[i] * 0.5 + 0.25, -1), 1), 1e-6);
    CHECK(ok, "%s vaffine n=%zu", cfg->isa, n);
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
      em_minmax_params p = {-3.0f, 3.0f};
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
        em_minmax_params p = {-2.0f, 2.5f};
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

/* One GEMM: A packed or strided; B packed (0), row-major (1), row-major copied into per-thread
 * scratch (2) or built by a pack_b callback (3). */
static int run_driver_case(const em_cpu_config *cfg, em_threadpool *pool, size_t m, size_t n,
                           size_t k, int a_packed, int bmode) {
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
  const em_minmax_params mm = {-3.0f, 3.0f};
  for (size_t r = 0; r < m; r++)
    for (size_t c = 0; c < n; c++) {
      double acc = (double)d_bm[r] + d_bn[c];
      for (size_t kk = 0; kk < k; kk++) acc += (double)d_a[r * k + kk] * d_b[kk * n + c];
      d_ref[r * n + c] = fmin(fmax(acc, mm.min), mm.max);
    }
  strip_src src = {d_b, n};
  emc_gemm g = {0};
  g.cfg = cfg, g.m = m, g.k = k, g.n = n, g.a_packed = a_packed;
  g.a = a_packed ? d_ap : d_a, g.a_rs = a_packed ? 1 : k, g.a_ks = a_packed ? EMC_MR : 1;
  g.b = bmode == 0 ? d_bp : d_b, g.ldb = n, g.b_packed = bmode == 0;
  g.c = d_c, g.ldc = n, g.bias_m = d_bm, g.bias_n = d_bn, g.mm = mm;
  if (bmode >= 2) {
    CHECK(emc_gemm_pack_floats(cfg, k, em_threadpool_size(pool)) <= sizeof d_pack / sizeof(float),
          "pack scratch");
    g.pack = d_pack + 1; /* deliberately not 64-byte aligned: the driver aligns its slots */
  }
  if (bmode == 3) g.pack_b = copy_strip, g.pack_ctx = &src;
  emc_gemm_run(&g, pool);
  for (size_t i = 0; i < m * n; i++)
    if (!close_to(d_c[i], d_ref[i], 1e-4)) {
      CHECK(0, "%s driver m=%zu n=%zu k=%zu a_packed=%d bmode=%d threads=%d: c[%zu] = %g, want %g",
            cfg->isa, m, n, k, a_packed, bmode, em_threadpool_size(pool), i, d_c[i], d_ref[i]);
      return 0;
    }
  for (size_t i = m * n; i < m * n + 8; i++)
    if (d_c[i] != SENTINEL) {
      CHECK(0, "%s driver m=%zu n=%zu k=%zu: wrote past C", cfg->isa, m, n, k);
      return 0;
    }
  return 1;
}

static void test_gemm_driver(const em_cpu_config *cfg, em_threadpool *pool) {
  static const size_t ms[] = {1, 5, 6, 7, 13, 70}, ns[] = {1, 17, 49, 64, 65, 130},
                      ks[] = {1, 7, 129, 300};
  for (size_t mi = 0; mi < 6; mi++)
    for (size_t ni = 0; ni < 6; ni++)
      for (size_t ki = 0; ki < 4; ki++)
        for (int v = 0; v < 8; v++)
          if (run_driver_case(cfg, pool, ms[mi], ns[ni], ks[ki], v & 1, v >> 1)) g_pass++;
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

int main(void) {
  static const char *isas[] = {"amx", "avx512f", "avx2", "neon", "scalar"};
  int tested = 0;
  for (size_t i = 0; i < sizeof isas / sizeof isas[0]; i++) {
    const em_cpu_config *cfg = em_cpu_config_for(isas[i]);
    if (!cfg) {
      printf("%s: not supported on this CPU, skipped\n", isas[i]);
      continue;
    }
    tested++;
    test_gemm(cfg);
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
    test_dwconv(cfg);
    test_dwconv_small(cfg);
    test_dwconv_wide(cfg);
    test_dwconv_c16(cfg);
    test_conv_smallc(cfg);
    test_copy_stride2(cfg);
    test_maxpool(cfg);
    test_wino(cfg);
    test_transpose(cfg);
    test_gemv16(cfg);
    test_gemv6(cfg);
    test_elementwise(cfg);
  }
  CHECK(tested > 0, "no ISA tested");
  /* Forcing an ISA the CPU runs must take effect (EMBER_CPU_ISA, mapped as the CLIs do). */
  const char *force = getenv("EMBER_CPU_ISA");
  em_status forced = em_cpu_backend_configure_from_env();
  const em_cpu_config *chosen = em_cpu_config_get();
  CHECK(chosen != NULL, "no configuration chosen");
  if (chosen && force && em_cpu_config_for(force))
    CHECK(forced == EM_OK && strcmp(chosen->isa, force) == 0, "EMBER_CPU_ISA=%s, but %s was chosen",
          force, chosen->isa);
  if (force && !em_cpu_config_for(force))
    CHECK(forced == EM_ERR_NOT_SUPPORTED, "EMBER_CPU_ISA=%s (not on this CPU) was not refused",
          force);
  /* The options struct, as a program sets it: an unknown ISA is refused and changes nothing. */
  em_cpu_backend_options bad = {"no-such-isa", false, false};
  CHECK(em_cpu_backend_configure(&bad) == EM_ERR_NOT_SUPPORTED, "an unknown ISA was accepted");
  CHECK(em_cpu_config_get() == chosen, "a refused configure changed the ISA");
  em_cpu_backend_options scalar = {"scalar", false, false};
  CHECK(em_cpu_backend_configure(&scalar) == EM_OK, "scalar refused");
  CHECK(strcmp(em_cpu_config_get()->isa, "scalar") == 0, "configure did not force scalar");
  if (chosen) {
    em_cpu_backend_options back = {chosen->isa, false, false};
    CHECK(em_cpu_backend_configure(&back) == EM_OK, "%s refused", chosen->isa);
  }
  if (chosen) printf("chosen ISA: %s\n", chosen->isa);
  return test_summary("test_cpu_ukernels");
}
