/*
 * test_cpu_ukernels_conv.c — the EmberCpuBackend convolution and pooling micro-kernels of every
 * ISA this CPU runs (AVX-512F, AVX2+FMA, NEON, scalar): depthwise convs (general, small planes,
 * 16-plane, wide rows), the direct few-channel conv of stems, max pooling and the Winograd
 * transforms, at sizes around their vector and tile widths, against double-precision references
 * (B^T d B and A^T M A for Winograd). GEMMs: test_cpu_ukernels_gemm.c; the rest: _misc.c.
 */
#define _POSIX_C_SOURCE 200809L
#include "cpu_ukernels_util.h"

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
            em_minmax_params p = {-1.5f, 1.5f, 0};
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
            em_minmax_params p = {-2.0f, 2.5f, (uint32_t)((cin + pad) % 2)}; /* + hardswish */
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
                  if (p.hswish) acc = acc * fmin(fmax(acc + 3.0, 0.0), 6.0) / 6.0;
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
    em_minmax_params p = {-1.5f, 1.5f, 0};
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
            em_minmax_params p = {-1.5f, 1.5f, 0};
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
             * rows at the bottom of a plane has (cpu_op_dwconv.c: dw_bands). */
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
            em_minmax_params p = {-1.5f, 1.5f, 0};
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
      const em_minmax_params mmp = {-0.5f, 2.0f, 0};
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

static void test_isa(const em_cpu_config *cfg) {
  test_dwconv(cfg);
  test_dwconv_small(cfg);
  test_dwconv_wide(cfg);
  test_dwconv_c16(cfg);
  test_conv_smallc(cfg);
  test_maxpool(cfg);
  test_wino(cfg);
}

int main(void) {
  CHECK(for_each_isa(test_isa) > 0, "no ISA tested");
  return test_summary("test_cpu_ukernels_conv");
}
