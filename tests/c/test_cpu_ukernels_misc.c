/*
 * test_cpu_ukernels_misc.c — the remaining EmberCpuBackend micro-kernels of every ISA this CPU
 * runs (AVX-512F, AVX2+FMA, NEON, scalar): elementwise rows and activations, copy_stride2 and
 * the matrix transpose, against double-precision references;
 * the dynamic int8 linears' row quantizer and tile against the scalar ones (the same bytes and
 * bits, rows near rounding ties included); then the ISA choice:
 * EMBER_CPU_ISA forces an ISA the CPU runs and is refused for one it does not, and
 * em_cpu_backend_configure refuses an unknown ISA without changing the choice.
 * GEMMs: test_cpu_ukernels_gemm.c; convolutions and pooling: test_cpu_ukernels_conv.c.
 */
#define _POSIX_C_SOURCE 200809L
#include "cpu_ukernels_util.h"
#include "ember_ext/cpu_env.h"

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
  case EMC_ACT_LEAKY_RELU: return x > 0 ? x : x * fp[EMC_ACT_FP_ALPHA];
  case EMC_ACT_CUBE: return x * x * x;
  case EMC_ACT_ERF: return erf(x);
  case EMC_ACT_RECIPROCAL: return 1 / x;
  case EMC_ACT_SIGN: return (x > 0) - (x < 0);
  case EMC_ACT_SOFTPLUS: {
    const double beta = fp[EMC_ACT_FP_ALPHA], t = x * beta;
    return t > fp[EMC_ACT_FP_THRESHOLD] ? x : log1p(exp(t)) / beta;
  }
  case EMC_ACT_MISH: return x * tanh(log1p(exp(x)));
  case EMC_ACT_ELU: /* ATen's elu(x, alpha, scale, input_scale) */
    return x <= 0 ? expm1(x * fp[EMC_ACT_FP_ELU_INPUT_SCALE]) * fp[EMC_ACT_FP_ALPHA] *
                        fp[EMC_ACT_FP_ELU_SCALE]
                  : x * fp[EMC_ACT_FP_ELU_SCALE];
  case EMC_ACT_HARDSWISH_FQ: /* ATen's decomposed hardswish in f32, then the fake-quant */
    x = ((float)x * fminf(fmaxf((float)x + 3.0f, 0.0f), 6.0f)) / 6.0f;
    /* fall through */
  case EMC_ACT_FAKEQUANT: { /* the portable quantize then dequantize, in f32 */
    const float v = fminf(fmaxf((float)x, fp[0]), fp[1]);
    float q = nearbyintf(v * fp[EMC_ACT_FP_INV_SCALE]) + fp[EMC_ACT_FP_ZP];
    q = fminf(fmaxf(q, fp[EMC_ACT_FP_QMIN]), fp[EMC_ACT_FP_QMAX]);
    return (q - fp[EMC_ACT_FP_ZP]) * fp[EMC_ACT_FP_SCALE];
  }
  default: return x;
  }
}

/* EMC_ACT_HARDSWISH_FQ gives the portable kernels' values bit for bit: its division by 6 must
 * be one (times 1 / 6 differs by an ulp now and then, which moves a value across a rounding
 * boundary about once in 4096 at this scale: 2^20 values catch it). */
static void test_hardswish_fq_bits(const em_cpu_config *cfg) {
  enum { N = 1 << 20 };
  static float x[N], y[N];
  const float fp[8] = {-INFINITY, INFINITY, 0.0f, 1000.0f, 0.001f, 0.0f, -4000.0f, 4000.0f};
  for (size_t i = 0; i < N; i++) x[i] = -4.0f + 8.0f * (float)i / (float)N;
  cfg->vact(N, x, y, EMC_ACT_HARDSWISH_FQ, fp);
  int bad = 0;
  for (size_t i = 0; i < N; i++) bad += y[i] != (float)ref_act(EMC_ACT_HARDSWISH_FQ, x[i], fp);
  CHECK(bad == 0, "%s hardswish_fq: %d of %d values differ from the portable steps", cfg->isa, bad,
        N);
  /* where the division's refinement could part from it: infinities, NaN, past FLT_MAX / 6,
   * subnormal quotients (under a 1 / scale of 1e30, the exporter's bound), zeros; 19 values (a
   * tail past 16 lanes), under two parameter sets */
  static const float sp[19] = {INFINITY, -INFINITY, NAN,     3.4e38f, -3.4e38f, 1e38f, 6e37f,
                               1e-39f,   -1e-39f,   3e-38f,  1e-45f,  0.0f,     -0.0f, -3.0f,
                               3.0f,     -1.5f,     2.9999f, 1e-30f,  -2.0e-38f};
  const float fp2[8] = {-INFINITY, INFINITY, 0.0f, 1e30f, 1e-30f, 5.0f, -128.0f, 127.0f};
  const float *fps[2] = {fp, fp2};
  for (int k = 0; k < 2; k++) {
    float ys[19];
    cfg->vact(19, sp, ys, EMC_ACT_HARDSWISH_FQ, fps[k]);
    for (size_t i = 0; i < 19; i++) {
      const float want = (float)ref_act(EMC_ACT_HARDSWISH_FQ, sp[i], fps[k]);
      CHECK(ys[i] == want || (ys[i] != ys[i] && want != want),
            "%s hardswish_fq(%g), parameters %d: %g, want %g", cfg->isa, (double)sp[i], k,
            (double)ys[i], (double)want);
    }
  }
}

static void test_elementwise(const em_cpu_config *cfg) {
  static const size_t ns[] = {0, 1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 64, 100};
  static float a[128], b[128], y[128];
  /* clamp bounds, then the fake-quant's 1 / scale, scale, zero point, range (q in [-20, 12]) */
  const float fp[8] = {-0.75f, 0.5f, 0.0f, 20.0f, 0.05f, 3.0f, -20.0f, 12.0f};
  for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
    size_t n = ns[ni];
    for (size_t i = 0; i < 128; i++) a[i] = 4 * frand(), b[i] = frand() + 2.0f;
    em_minmax_params p = {-3.0f, 3.0f, 0};
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
      /* leaky ReLU, ELU, erf, sign, softplus, mish on both signs (a is not negative by now) */
      const bool both = act == EMC_ACT_LEAKY_RELU || act == EMC_ACT_ELU || act == EMC_ACT_ERF ||
                        act == EMC_ACT_SIGN || act == EMC_ACT_SOFTPLUS || act == EMC_ACT_MISH;
      static float sx[128];
      for (size_t i = 0; i < n; i++) sx[i] = both ? 1.0f - 0.7f * a[i] : a[i];
      y[n] = SENTINEL;
      cfg->vact(n, sx, y, act, fp);
      int ok = y[n] == SENTINEL;
      for (size_t i = 0; i < n; i++) {
        double want = ref_act(act, sx[i], fp);
        if (act == EMC_ACT_SQRT || act == EMC_ACT_RSQRT)
          want = act == EMC_ACT_SQRT ? sqrt(a[i]) : 1 / sqrt(a[i]);
        if (act == EMC_ACT_FAKEQUANT || act == EMC_ACT_HARDSWISH_FQ) /* exact: the same f32 steps */
          ok &= y[i] == (float)want;
        else
          ok &= fabs(y[i] - want) <= 2e-6 + 2e-6 * fabs(want);
        if (!ok) {
          CHECK(ok, "%s act %u n=%zu x=%g: %g vs %g", cfg->isa, act, n, sx[i], y[i], want);
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
      cfg->norm(1, n, a, b, rms ? NULL : b + 1, 1e-5f, rms, y);
      int ok = 1;
      for (size_t i = 0; i < n; i++)
        ok &= close_to(y[i], (a[i] - mean) * rstd * b[i] + (rms ? 0 : b[i + 1]), 1e-5);
      CHECK(ok, "%s norm rms=%d n=%zu", cfg->isa, rms, n);
    }
    em_minmax_params p2 = {-1.0f, 1.0f, 0};
    cfg->vaffine(n, a, 0.5f, 0.25f, y, &p2);
    int ok = 1;
    for (size_t i = 0; i < n; i++) ok &= close_to(y[i], fmin(fmax(a[i] * 0.5 + 0.25, -1), 1), 1e-6);
    CHECK(ok, "%s vaffine n=%zu", cfg->isa, n);
  }
}

/* Norm rows in blocks (em_f32_norm_fn over `rows` rows): every row the bits of the row alone and
 * of the plain-C scalar row, within 1e-5 of the f64 layer / RMS norm, a row of equal values
 * exactly its bias, nothing written past the rows; 1-9 rows (the blocks of 4 and their ragged
 * ends), lengths across the 16-lane partial sums' tails. */
static void test_norm_rows(const em_cpu_config *cfg) {
  const em_cpu_config *plain = em_cpu_config_for("scalar");
  enum { R = 9, N = 400 };
  static float x[R * N], y[R * N + 16], one[N], w[N], b[N];
  static const size_t ns[] = {1, 15, 16, 17, 47, 384, 400};
  for (size_t i = 0; i < N; i++) w[i] = 0.5f + frand(), b[i] = frand();
  for (size_t ni = 0; ni < 7; ni++)
    for (size_t rows = 1; rows <= R; rows++)
      for (int rms = 0; rms < 2; rms++) {
        const size_t n = ns[ni];
        for (size_t r = 0; r < rows; r++)
          for (size_t i = 0; i < n; i++) x[r * n + i] = r == 2 ? 1.25f : 3.0f * frand() + (float)r;
        for (size_t i = 0; i < rows * n + 16; i++) y[i] = SENTINEL;
        cfg->norm(rows, n, x, w, rms ? NULL : b, 1e-5f, rms, y);
        int ok = 1;
        for (size_t r = 0; r < rows; r++) {
          cfg->norm(1, n, x + r * n, w, rms ? NULL : b, 1e-5f, rms, one);
          ok &= memcmp(one, y + r * n, n * sizeof(float)) == 0;
          if (plain) {
            plain->norm(1, n, x + r * n, w, rms ? NULL : b, 1e-5f, rms, one);
            ok &= memcmp(one, y + r * n, n * sizeof(float)) == 0;
          }
          double mean = 0, var = 0;
          for (size_t i = 0; i < n; i++) mean += rms ? 0 : x[r * n + i];
          mean /= (double)n;
          for (size_t i = 0; i < n; i++) var += (x[r * n + i] - mean) * (x[r * n + i] - mean);
          const double rstd = 1 / sqrt(var / (double)n + 1e-5);
          for (size_t i = 0; i < n; i++) {
            const double want = (x[r * n + i] - mean) * rstd * w[i] + (rms ? 0 : b[i]);
            ok &= close_to(y[r * n + i], want, 1e-5);
            if (r == 2 && !rms) ok &= y[r * n + i] == b[i];
          }
        }
        for (size_t i = rows * n; i < rows * n + 16; i++) ok &= y[i] == SENTINEL;
        CHECK(ok, "%s norm rows=%zu n=%zu rms=%d", cfg->isa, rows, n, rms);
      }
}

/* EMC_ACT_FAKEQUANT against the portable quantize's steps written out here (clamp, scale, round
 * half to even, zero point, range with NaN to qmin, dequantize), bit for bit: values at the
 * rounding ties, past the clamp and the range, +-1e30, infinities and NaN, under clamps inside
 * the quantized range (relu6-like, one-sided, none) and an inverted one. */
/* The GELU row (vact EMC_ACT_GELU) against x Phi(x) in f64 on a grid of 1/64 over [-12, 12]
 * and on rows of every length to 40 (the tail lanes, the bytes after them): |error| <=
 * 4e-7 max(1, |x|) (about 3 f32 ulps of the result); NaN stays NaN, +inf stays +inf. */
static void test_gelu_row(const em_cpu_config *cfg) {
  enum { N = 24 * 64 + 1 };
  static float x[N + 8], y[N + 8];
  for (size_t i = 0; i < N; i++) x[i] = -12.0f + (float)i / 64.0f;
  int bad = 0;
  double worst = 0;
  for (size_t n = 1; n <= 40; n++) { /* lengths 1-40 at every offset of the grid's start */
    y[n] = SENTINEL;
    cfg->vact(n, x + 700, y, EMC_ACT_GELU, NULL);
    bad += y[n] != SENTINEL;
  }
  cfg->vact(N, x, y, EMC_ACT_GELU, NULL);
  for (size_t i = 0; i < N; i++) {
    const double v = x[i], want = 0.5 * v * erfc(-v / sqrt(2.0));
    const double err = fabs(y[i] - want) / fmax(1.0, fabs(v));
    worst = err > worst ? err : worst;
    if (!(err <= 4e-7) && bad++ < 3)
      CHECK(0, "%s gelu(%g) = %.9g, want %.9g", cfg->isa, v, (double)y[i], want);
  }
  const float sp[3] = {NAN, INFINITY, -0.0f};
  float sy[3];
  cfg->vact(3, sp, sy, EMC_ACT_GELU, NULL);
  CHECK(sy[0] != sy[0] && sy[1] == INFINITY && sy[2] == 0.0f, "%s gelu(NaN, inf, -0) = %g %g %g",
        cfg->isa, (double)sy[0], (double)sy[1], (double)sy[2]);
  CHECK(bad == 0, "%s gelu: %d values off (worst %.3g relative to max(1, |x|))", cfg->isa, bad,
        worst);
  if (!cfg->gelu_rows) return;
  /* In place over rows 37 floats apart, n of each (every tail): vact's bits row by row, the
   * floats between the rows untouched. */
  enum { ROWS = 5, LD = 37 };
  static float g[ROWS * LD], w[ROWS * LD];
  for (size_t n = 1; n <= 33; n++) {
    for (size_t i = 0; i < ROWS * LD; i++) g[i] = x[(i * 7 + n) % N];
    memcpy(w, g, sizeof g);
    for (size_t r = 0; r < ROWS; r++) cfg->vact(n, w + r * LD, w + r * LD, EMC_ACT_GELU, NULL);
    cfg->gelu_rows(ROWS, n, g, LD);
    CHECK(memcmp(g, w, sizeof g) == 0, "%s gelu_rows(%d, %zu, ld %d) differs from vact's rows",
          cfg->isa, ROWS, n, LD);
  }
}

static void test_fakequant_special(const em_cpu_config *cfg) {
  enum { N = 4096 };
  static float x[N], y[N];
  /* min, max, scale, 1 / scale, zero point, qmin, qmax (fp[2] unused) */
  static const float fps[][8] = {{0.0f, 6.0f, 0.0f, 0.05f, 20.0f, 3.0f, -128.0f, 127.0f},
                                 {-INFINITY, INFINITY, 0.0f, 0.5f, 2.0f, -7.0f, -128.0f, 127.0f},
                                 {-1.5f, INFINITY, 0.0f, 0.01f, 100.0f, 0.0f, 0.0f, 255.0f},
                                 {2.0f, -2.0f, 0.0f, 0.1f, 10.0f, 1.0f, -20.0f, 12.0f}};
  int bad = 0;
  for (size_t f = 0; f < sizeof fps / sizeof fps[0]; f++) {
    const float *fp = fps[f];
    for (size_t i = 0; i < N; i++) {
      const int kind = rand() % 16;
      x[i] = kind == 0   ? (float)(rand() % 600 - 300) * 0.5f * fp[EMC_ACT_FP_SCALE] /* ties */
             : kind == 1 ? (rand() % 2 ? 1e30f : -1e30f)
             : kind == 2 ? (rand() % 2 ? INFINITY : -INFINITY)
             : kind == 3 ? NAN
                         : 20.0f * frand();
    }
    cfg->vact(N, x, y, EMC_ACT_FAKEQUANT, fp);
    for (size_t i = 0; i < N && bad < 5; i++) {
      float v = x[i] < fp[0] ? fp[0] : x[i]; /* NaN stays */
      v = v > fp[1] ? fp[1] : v;
      const float zp = fp[EMC_ACT_FP_ZP], qmin = fp[EMC_ACT_FP_QMIN], qmax = fp[EMC_ACT_FP_QMAX];
      float q = nearbyintf(v * fp[EMC_ACT_FP_INV_SCALE]) + zp;
      q = q >= qmin ? q : qmin; /* NaN: qmin */
      q = q <= qmax ? q : qmax;
      const float want = (q - zp) * fp[EMC_ACT_FP_SCALE];
      if (memcmp(&y[i], &want, sizeof want) != 0) {
        bad++;
        CHECK(0, "%s fakequant params %zu: x = %g gives %g, want %g", cfg->isa, f, (double)x[i],
              (double)y[i], (double)want);
      }
    }
  }
  if (!bad) g_pass++;
}

#if defined(__x86_64__)
#include "ember/vmath_exp.h"
/* exp_recipe512 (w) and exp_nonpos512 (g) of 16 floats. */
__attribute__((target("avx512f"))) static void exp_pair(const float *v, float *w, float *g) {
  const __m512 x = _mm512_loadu_ps(v);
  _mm512_storeu_ps(w, exp_recipe512(x));
  _mm512_storeu_ps(g, exp_nonpos512(x));
}
#endif

/* The scaled / masked softmax row (cfg->softmax_sm, where the ISA has one) gives the bits of the
 * multiply, the add and the softmax row it replaces: lengths around the vector width, NaN,
 * infinities, -0 and masked-out (-inf, -1e9) columns, each of scale and mask alone and both. */
static void test_softmax_sm(const em_cpu_config *cfg) {
  if (!cfg->softmax_sm) return;
  enum { N = 150 }; /* both sides of the register-held rows' 128 */
  float x[N], mask[N], want[N], got[N];
  const em_minmax_params none = {-INFINITY, INFINITY, 0};
  const float scale = 0.17677669f;
  int bad = 0;
  for (size_t n = 1; n <= N; n++)
    for (int form = 1; form < 4; form++) {
      for (size_t i = 0; i < n; i++) {
        x[i] = 6.0f * frand(), mask[i] = i % 5 == 0 ? -1e9f : 3.0f * frand(); /* a bias */
        if (n % 7 == 0 && i == n / 2) x[i] = n % 2 ? NAN : INFINITY;
        if (i == 1) x[i] = -0.0f, mask[i] = -INFINITY;
      }
      const float *sp = form & 1 ? &scale : NULL, *mp = form & 2 ? mask : NULL;
      const float *xr = x;
      if (sp) cfg->vbinc[EMC_BIN_MUL](n, xr, sp, want, &none), xr = want;
      if (mp) cfg->vbin[EMC_BIN_ADD](n, xr, mp, want, &none), xr = want;
      cfg->softmax(n, xr, want, 0);
      cfg->softmax_sm(n, x, sp, mp, got);
      for (size_t i = 0; i < n; i++)
        if (memcmp(&want[i], &got[i], 4) && !(want[i] != want[i] && got[i] != got[i])) bad++;
    }
  CHECK(bad == 0, "%s softmax_sm: %d values differ from multiply, add, softmax", cfg->isa, bad);
  if (!bad) g_pass++;
#if defined(__x86_64__)
  /* The AVX-512 rows' exp for x in [-inf, 0] (a row's maximum finite, no NaN): exp_recipe512's
   * bits on every 5th float from -0 to past the -104 clamp, and -inf. */
  bad = 0;
  for (uint32_t b = 0x80000000u; b <= 0xC2E00000u; b += 5 * 16) {
    float v[16], w[16], g[16];
    for (int j = 0; j < 16; j++) {
      const uint32_t u = b + 5u * (uint32_t)j;
      memcpy(&v[j], &u, 4);
    }
    if (b == 0x80000000u) v[15] = -INFINITY;
    exp_pair(v, w, g);
    bad += memcmp(w, g, sizeof w) != 0;
  }
  CHECK(bad == 0, "%s exp_nonpos512: %d blocks differ from exp_recipe512", cfg->isa, bad);
#endif
}

/* A 24-bit pseudo-random integer from *s (a seeded LCG). */
static uint32_t lcg(uint32_t *s) {
  *s = *s * 1664525u + 1013904223u;
  return *s >> 8;
}

/* The dynamic int8 linear's row quantizer (em_q8_rowq_for) and tile (em_q8_dq_for) of cfg's ISA
 * give the scalar ones' bytes and bits: rows of random scales, constant rows, rows whose values
 * land on or an ulp off half-integer steps (the AVX-512 quantizer's f64 fallback), rows with an
 * infinity or a NaN; tiles of 1-8 rows by 1-32 channels, K not a multiple of 4, stored row-major
 * and transposed. */
static void test_dq_linear(const em_cpu_config *cfg) {
  enum { K = 77, KP = 80, KQ = 20, ROWS = 8, CH = 32 };
  const em_q8_rowq_fn rowq = em_q8_rowq_for(cfg->isa);
  const em_q8_dq_fn dq = em_q8_dq_for(cfg->isa);
  static uint8_t a[ROWS * KP], b[ROWS * KP];
  static int8_t w[2 * KQ * 64];
  int32_t za[ROWS], zb[ROWS], wsum[CH];
  float sa[ROWS], sb[ROWS], ws[CH], bias[CH], ya[ROWS * CH], yb[ROWS * CH], yc[ROWS * CH];
  float res[ROWS * CH];
  static float x[ROWS * K];
  uint32_t seed = 12345;
  int bad = 0, rows_done = 0;
  for (int it = 0; rows_done < 20000; it++) { /* blocks of 1-8 rows: one call each */
    const int nrows = 1 + it % ROWS;
    for (int r = 0; r < nrows; r++) {
      const int mode = (rows_done + r) % 5;
      float *xr = x + r * K;
      const float sc = powf(10.0f, (float)((int)(lcg(&seed) % 13) - 6));
      for (int j = 0; j < K; j++) {
        const float u = (float)(lcg(&seed) % 100000) / 50000.0f - 1.0f;
        xr[j] = mode == 0 ? u * sc : mode == 1 ? u * sc + 0.3f * sc : 2.5f;
        if (mode >= 3) /* min -1, max 1: scale 2 / 255, zero point 0: on half-integer steps */
          xr[j] = ((float)(lcg(&seed) % 255) - 126.5f) * (2.0f / 255) * (mode == 4 ? 0.999f : 1.0f);
      }
      if (mode >= 3) xr[0] = -1.0f, xr[1] = 1.0f;
      if ((rows_done + r) % 97 == 0) xr[lcg(&seed) % K] = (rows_done + r) % 2 ? INFINITY : NAN;
    }
    memset(a, 0x5A, sizeof a);
    rowq((size_t)nrows, K, x, a, KP, za, sa);
    for (int r = 0; r < nrows; r++) {
      em_q8_rowq_ukernel__scalar(1, K, x + r * K, b + r * KP, KP, &zb[r], &sb[r]);
      if (memcmp(a + r * KP, b + r * KP, KP) || za[r] != zb[r] || memcmp(&sa[r], &sb[r], 4)) bad++;
    }
    for (size_t i = (size_t)nrows * KP; i < sizeof a; i++) bad += a[i] != 0x5A; /* rows past */
    rows_done += nrows;
  }
  CHECK(bad == 0, "%s dq row quantizer: %d of %d rows differ from the scalar one", cfg->isa, bad,
        rows_done);
  for (size_t i = 0; i < sizeof w; i++) w[i] = (int8_t)((int)(lcg(&seed) % 255) - 127);
  for (int c = 0; c < CH; c++) {
    int32_t t = 0;
    for (int k = 0; k < KP; k++) t += w[(c / 16) * KQ * 64 + (k / 4) * 64 + (c % 16) * 4 + k % 4];
    wsum[c] = t, ws[c] = 1e-3f * (float)(1 + c), bias[c] = 0.25f * (float)(c - 16);
  }
  for (int i = 0; i < ROWS * CH; i++) res[i] = 0.37f * (float)((int)(lcg(&seed) % 201) - 100);
  int tiles_bad = 0;
  for (size_t np = 1; np <= ROWS; np++)
    for (size_t nc = 1; nc <= CH; nc += (nc < 17 ? 1 : 5)) {
      memset(ya, 0, sizeof ya), memset(yb, 0, sizeof yb);
      const size_t ys = nc % 3 ? CH : 1, cs = nc % 3 ? 1 : ROWS; /* row-major or transposed */
      const float *rs = cs == 1 && np % 2 ? res : NULL;          /* a residual: row-major only */
      dq(np, nc, KQ, b, KP, w, wsum, ws, nc % 2 ? bias : NULL, rs, zb, sb, ya, ys, cs);
      em_q8_dq_ukernel__scalar(np, nc, KQ, b, KP, w, wsum, ws, nc % 2 ? bias : NULL, rs, zb, sb, yb,
                               ys, cs);
      if (rs) { /* the residual added to what the tile stores without it */
        memset(yc, 0, sizeof yc);
        em_q8_dq_ukernel__scalar(np, nc, KQ, b, KP, w, wsum, ws, nc % 2 ? bias : NULL, NULL, zb, sb,
                                 yc, ys, cs);
        for (size_t i = 0; i < np; i++)
          for (size_t c = 0; c < nc; c++) {
            const float want = yc[i * ys + c] + res[i * ys + c];
            if (memcmp(&want, &yb[i * ys + c], 4) &&
                !(want != want && yb[i * ys + c] != yb[i * ys + c]))
              tiles_bad++;
          }
      }
      for (size_t i = 0; i < ROWS * CH; i++)
        if (memcmp(&ya[i], &yb[i], 4) && !(ya[i] != ya[i] && yb[i] != yb[i])) tiles_bad++;
    }
  CHECK(tiles_bad == 0, "%s dq tile: %d values differ from the scalar tile", cfg->isa, tiles_bad);
  if (!bad && !tiles_bad) g_pass++;
}

/* A depthwise row's parameters: ow outputs of ch channels (cp bytes a pixel in and out, a row
 * of W pixels), kh x kw taps at stride st and dilation dil, weights w [kh * kw][cw] and the table
 * tab [scale | corr | bias] of cw each, output quantizer oq. */
static em_q8_dw_params dw_params(size_t ow, size_t ch, size_t cp, size_t W, size_t kh, size_t kw,
                                 size_t cw, size_t st, size_t dil, const float *w, const float *tab,
                                 em_q8_quant_params oq) {
  return (em_q8_dw_params){.ow = ow,
                           .ch = ch,
                           .cpo = cp,
                           .kh = kh,
                           .kw = kw,
                           .cw = cw,
                           .step = st * cp,
                           .dy = dil * W * cp,
                           .dx = dil * cp,
                           .w = w,
                           .scale = tab,
                           .corr = tab + cw,
                           .bias = tab + 2 * cw,
                           .oq = oq};
}

/* The int8 depthwise conv's output row (em_q8_dw_for) of cfg's ISA gives the scalar row's bytes:
 * 3x3, 5x5 (the blocked path: outputs 4 at a time, then the rest), 7x3 and 2x5 windows at
 * strides 1-3 and dilations 1-2, 1-41 channels (masked tails), rows of 1-13 outputs, u8 inputs
 * over the full range and int8 weights, an output zero point and range of the int8 form. */
static void test_q8_dwconv(const em_cpu_config *cfg) {
  enum { CMAX = 41, CP = 44, CW = 48, W = 48, KMAX = 7 };
  static const size_t shapes[][2] = {{3, 3}, {5, 5}, {7, 3}, {2, 5}};
  const em_q8_dw_fn dw = em_q8_dw_for(cfg->isa);
  static uint8_t in[KMAX * 2 * W * CP], ya[13 * CP], yb[13 * CP];
  static float w[KMAX * KMAX * CW], tab[3 * CW];
  uint32_t seed = 777;
  int bad = 0, runs = 0;
  for (size_t i = 0; i < sizeof in; i++) in[i] = (uint8_t)(lcg(&seed) % 256);
  for (size_t i = 0; i < KMAX * KMAX * CW; i++) w[i] = (float)((int)(lcg(&seed) % 255) - 127);
  for (size_t c = 0; c < CW; c++) {
    tab[c] = 1e-4f * (float)(1 + c % 7);                    /* scale */
    tab[CW + c] = (float)((int)(lcg(&seed) % 2001) - 1000); /* corr */
    tab[2 * CW + c] = 0.125f * (float)((int)c - 20);        /* bias */
  }
  for (size_t sh = 0; sh < 4; sh++)
    for (size_t st = 1; st <= 3; st++)
      for (size_t dil = 1; dil <= 2; dil++)
        for (size_t ch = 1; ch <= CMAX; ch += 4)
          for (size_t ow = 1; ow <= 13; ow += 3) {
            const size_t kh = shapes[sh][0], kw = shapes[sh][1];
            em_q8_dw_params p =
                dw_params(ow, ch, CP, W, kh, kw, CW, st, dil, w, tab,
                          (em_q8_quant_params){40.0f, 3.0f, 0.0f, 255.0f, -1e30f, 1e30f});
            if ((ow - 1) * st + (kw - 1) * dil >= W) continue;
            memset(ya, 0xAB, sizeof ya), memset(yb, 0xAB, sizeof yb);
            dw(in, ya, &p);
            em_q8_dwconv_ukernel__scalar(in, yb, &p);
            bad += memcmp(ya, yb, sizeof ya) != 0;
            runs++;
          }
  CHECK(runs > 500 && bad == 0, "%s int8 depthwise row: %d of %d rows differ from the scalar row",
        cfg->isa, bad, runs);
  if (!bad) g_pass++;
  /* the two-row 3x3 and 5x5 kernel (stride and dilation 1) against the scalar rows */
  const em_q8_dw2_fn dw2 = em_q8_dw2_for(cfg->isa);
  static uint8_t y2[2 * 13 * CP], w2[2 * 13 * CP];
  int bad2 = 0, runs2 = 0;
  for (size_t kk = 3; dw2 && kk <= 5; kk += 2)
    for (size_t ch = 1; ch <= CMAX; ch += 4)
      for (size_t ow = kk == 3 ? 1 : 4; ow <= 13; ow += 3) {
        em_q8_dw_params p =
            dw_params(ow, ch, CP, W, kk, kk, CW, 1, 1, w, tab,
                      (em_q8_quant_params){40.0f, 3.0f, 0.0f, 255.0f, -1e30f, 1e30f});
        memset(y2, 0xAB, sizeof y2), memset(w2, 0xAB, sizeof w2);
        dw2(in, y2, 13 * CP, &p);
        em_q8_dwconv_ukernel__scalar(in, w2, &p);
        em_q8_dwconv_ukernel__scalar(in + W * CP, w2 + 13 * CP, &p);
        bad2 += memcmp(y2, w2, sizeof y2) != 0;
        runs2++;
      }
  CHECK(bad2 == 0, "%s int8 depthwise two rows: %d of %d pairs differ from the scalar rows",
        cfg->isa, bad2, runs2);
  if (dw2 && !bad2) g_pass++;
}

/* The depthwise row on dot products (em_q8_dwdot_for, where the ISA has one) gives the scalar
 * row's bytes: 3x3 and 5x5 windows, strides 1 and 2, dilations 1 and 2, 1-200 channels (64-channel
 * blocks, masked ones, tails left to the f32 row), rows of 1-13 outputs (fewer than a group too),
 * one row and two, under output quantizers whose clamps the packs' saturation replaces in part
 * (u8 range with the lower clamp at the range, a ReLU above it) or not at all (a narrower range),
 * and 17-32 channels two rows side by side (em_q8_dwdotv_for: rows 1 and 2, strides 1 and 2),
 * with infinite and NaN scales and biases on some channels; nothing written outside the row. The
 * packer refuses weights and corrections that are not integers of the sums' range. */
static void test_q8_dwdot(const em_cpu_config *cfg) {
  const em_q8_dw_fn dot = em_q8_dwdot_for(cfg->isa);
  const em_q8_dw2_fn dot2 = em_q8_dwdot2_for(cfg->isa);
  const em_q8_dwv_fn dotv = em_q8_dwdotv_for(cfg->isa);
  if (!dot) return;
  enum { CP = 200, CW = 208, W = 40, OWMAX = 13 };
  static const size_t chans[] = {1, 16, 17, 24, 32, 33, 63, 64, 65, 100, 128, 150, 200};
  static const em_q8_quant_params quants[3] = {{40.0f, 3.0f, 0.0f, 255.0f, -1e30f, 1e30f},
                                               {25.0f, 3.0f, 0.0f, 255.0f, 0.0f, 1e30f},
                                               {60.0f, 128.0f, 1.0f, 254.0f, -1e30f, 1e30f}};
  static uint8_t in[12 * W * CP], ya[2 * OWMAX * CP], yb[2 * OWMAX * CP];
  static float w[25 * CW], tab[3 * CW];
  static int8_t wd[4 * 768 + 4 * 5 * 4 * 2 * 256];
  uint32_t seed = 4242;
  int bad = 0, runs = 0;
  for (size_t i = 0; i < sizeof in; i++) in[i] = (uint8_t)(lcg(&seed) % 256);
  for (size_t i = 0; i < 25 * CW; i++) w[i] = (float)((int)(lcg(&seed) % 256) - 128);
  for (size_t c = 0; c < CW; c++) {
    tab[c] = c % 23 == 5 ? INFINITY : c % 29 == 7 ? NAN : 2e-4f * (float)(1 + c % 7);
    tab[CW + c] = (float)((int)(lcg(&seed) % 60001) - 30000);
    tab[2 * CW + c] = c % 31 == 9 ? -INFINITY : 0.125f * (float)((int)(c % 41) - 20);
  }
  for (size_t k = 3; k <= 5; k += 2)
    for (size_t st = 1; st <= 2; st++)
      for (size_t dil = 1; dil <= 2; dil++)
        for (size_t ci = 0; ci < sizeof chans / sizeof chans[0]; ci++)
          for (size_t qi = 0; qi < 3; qi++) {
            const size_t ch = chans[ci];
            CHECK(em_q8_dwdot_pack(k, st, ch, CW, w, tab, tab + CW, tab + 2 * CW, wd),
                  "%s dwdot: the %zux%zu stride %zu tables were refused", cfg->isa, k, k, st);
            for (size_t ow = 1; ow <= OWMAX; ow++) {
              if ((ow - 1) * st * dil + (k - 1) * dil >= W) continue;
              em_q8_dw_params p =
                  dw_params(ow, ch, CP, W, k, k, CW, st * dil, dil, w, tab, quants[qi]);
              p.wd = wd;
              memset(ya, 0xAB, sizeof ya), memset(yb, 0xAB, sizeof yb);
              dot(in, ya, &p);
              em_q8_dwconv_ukernel__scalar(in, yb, &p);
              bad += memcmp(ya, yb, sizeof ya) != 0;
              runs++;
              /* two rows side by side (17-32 channels; fewer: row by row), the second st rows
               * down, and one */
              if (dotv && ch <= 32 && (k - 1) * dil + st < 12) {
                p.ystep = st * W * CP;
                for (size_t rows = 1; rows <= 2; rows++) {
                  memset(ya, 0xAB, sizeof ya), memset(yb, 0xAB, sizeof yb);
                  dotv(in, ya, OWMAX * CP, rows, &p);
                  for (size_t r = 0; r < rows; r++)
                    em_q8_dwconv_ukernel__scalar(in + r * p.ystep, yb + r * OWMAX * CP, &p);
                  bad += memcmp(ya, yb, sizeof ya) != 0;
                  runs++;
                }
              }
              /* two rows: stride and dilation 1 (a 5x5 window's tail rows need 4 outputs) */
              if (!dot2 || st != 1 || dil != 1 || (k == 5 && ow < 4)) continue;
              memset(yb, 0xAB, sizeof yb);
              em_q8_dwconv_ukernel__scalar(in, yb, &p);
              memset(ya, 0xAB, sizeof ya);
              dot2(in, ya, OWMAX * CP, &p);
              em_q8_dwconv_ukernel__scalar(in + W * CP, yb + OWMAX * CP, &p);
              bad += memcmp(ya, yb, sizeof ya) != 0;
              runs++;
            }
          }
  CHECK(runs > 1000 && bad == 0,
        "%s int8 depthwise dot-product row: %d of %d rows differ from the "
        "scalar row",
        cfg->isa, bad, runs);
  w[7 * CW + 3] = 0.5f; /* not an integer weight */
  CHECK(!em_q8_dwdot_pack(3, 1, 8, CW, w, tab, tab + CW, tab + 2 * CW, wd),
        "%s dwdot: a fractional weight was packed", cfg->isa);
  w[7 * CW + 3] = 3.0f, tab[CW + 2] = 2.5f; /* nor an integer correction */
  CHECK(!em_q8_dwdot_pack(3, 1, 8, CW, w, tab, tab + CW, tab + 2 * CW, wd),
        "%s dwdot: a fractional correction was packed", cfg->isa);
  CHECK(!em_q8_dwdot_group(7, 1, NULL) && !em_q8_dwdot_group(3, 3, NULL),
        "dwdot: a 7x7 or stride-3 window was taken");
  if (!bad) g_pass++;
}

/* The int8 add's row (em_q8_add_for) of cfg's ISA against the definition, every pair of u8
 * operands (lengths 1-65536: masked tails), under qparams of odd scales with and without a
 * ReLU clamp: each term rounded once (a fused multiply-add fails this), then em_q8_quant1. */
static void test_q8_add(const em_cpu_config *cfg) {
  enum { N = 65536 };
  static uint8_t a[N], b[N], y[N];
  const em_q8_add_fn add = em_q8_add_for(cfg->isa);
  static const em_q8_add_params ps[] = {
      {0.0371f, 131.0f, 0.0123f, 7.0f, {1.0f / 0.0413f, 0.0f, 0.0f, 255.0f, 0.0f, 1e30f}},
      {0.00917f, 128.0f, 0.0211f, 140.0f, {1.0f / 0.0307f, 119.0f, 0.0f, 255.0f, -1e30f, 1e30f}},
      {1.7e-3f, 3.0f, 9.1e-2f, 255.0f, {1.0f / 0.05f, 128.0f, 1.0f, 254.0f, -1e30f, 1e30f}},
      /* a ReLU above the range's bottom (its lower clamp not the last max's) */
      {0.0371f, 131.0f, 0.0123f, 7.0f, {1.0f / 0.0413f, 100.0f, 0.0f, 255.0f, 0.0f, 1e30f}},
  };
  for (size_t i = 0; i < N; i++) a[i] = (uint8_t)(i & 255), b[i] = (uint8_t)(i >> 8);
  int bad = 0;
  for (size_t k = 0; k < sizeof ps / sizeof ps[0]; k++) {
    const em_q8_add_params *p = &ps[k];
    for (size_t n = 1; n <= N; n = n < 40 ? n + 1 : n * 4) {
      memset(y, 0xEE, sizeof y);
      add(n, a, b, y, p);
      for (size_t i = 0; i < n; i++) {
        volatile float ta = ((float)a[i] - p->za) * p->sa, tb = ((float)b[i] - p->zb) * p->sb;
        if (y[i] != em_q8_quant1(ta + tb, &p->oq)) bad++;
      }
      if (n < N && y[n] != 0xEE) bad++; /* nothing past n */
    }
    add(N, a, b, y, p);
    for (size_t i = 0; i < N; i++) {
      volatile float ta = ((float)a[i] - p->za) * p->sa, tb = ((float)b[i] - p->zb) * p->sb;
      if (y[i] != em_q8_quant1(ta + tb, &p->oq)) bad++;
    }
  }
  CHECK(bad == 0, "%s int8 add row: %d values differ from the definition", cfg->isa, bad);
  if (!bad) g_pass++;
}

/* The readers of never-written lookup planes (em_q8_lutq_for / em_q8_lutm_for the ISA) against
 * what they replace: the ISA's lookup into planes (em_q8_lutf_for), then the multiply by each
 * plane's gate with the clamp (vbinc's mul) and the quantizer; and the mean of each plane summed
 * as the mean operator sums it (written here). Random tables, zero points and scales, gates of
 * either sign, zero and infinite (0 x inf: NaN), clamps of none, a relu6 and one outside the
 * quantizer's; channel counts around the 16- and 64-channel blocks, pixel counts around groups
 * of 4;
 * bytes past the pixels and channels left alone. */
static void test_q8_lut_readers(const em_cpu_config *cfg) {
  enum { MAXC = 130, MAXN = 37, XS = 136, PS = 41, YS = 140 };
  static uint8_t x[MAXN * XS], t[256], y[MAXN * YS], want[MAXN * YS];
  static float planes[MAXC * PS], buf[MAXC * PS], g[MAXC], mean[MAXC + 1];
  static const size_t cs[] = {1, 3, 16, 17, 40, 64, 70, 130}, ns[] = {1, 3, 4, 5, 17, 37};
  const em_q8_quant_params *ps = k_scaled_quants;
  const em_minmax_params *mms = k_scaled_clamps;
  const em_q8_lutq_fn lutq = em_q8_lutq_for(cfg->isa);
  const em_q8_lutm_fn lutm = em_q8_lutm_for(cfg->isa);
  const em_q8_lutf_fn lutf = em_q8_lutf_for(cfg->isa);
  const em_q8_quant_fn quant = em_q8_quant_for(cfg->isa);
  int bad = 0;
  for (size_t pi = 0; pi < 2; pi++)
    for (size_t mi = 0; mi < 3; mi++)
      for (size_t ci = 0; ci < sizeof cs / sizeof cs[0]; ci++)
        for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
          const size_t c = cs[ci], n = ns[ni];
          for (size_t i = 0; i < sizeof x; i++) x[i] = (uint8_t)rand();
          for (size_t i = 0; i < 256; i++) t[i] = (uint8_t)rand();
          const float zp = (float)(rand() % 256), ls = 0.01f + 0.1f * frand();
          for (size_t ch = 0; ch < MAXC; ch++) {
            const int kind = rand() % 10;
            g[ch] = kind == 0 ? 0.0f : kind == 1 ? INFINITY : (frand() - 0.3f) * 3.0f;
          }
          lutf(c, n, x, XS, planes, PS, t, zp, ls);
          for (size_t ch = 0; ch < c; ch++)
            cfg->vbinc[EMC_BIN_MUL](n, planes + ch * PS, g + ch, buf + ch * PS, &mms[mi]);
          memset(want, 0xA5, sizeof want);
          quant(c, n, buf, PS, want, YS, &ps[pi]);
          memset(y, 0xA5, sizeof y);
          lutq(c, n, x, XS, t, zp, ls, g, &mms[mi], y, YS, &ps[pi]);
          for (size_t b = 0; b < sizeof y && bad < 5; b++)
            if (y[b] != want[b]) {
              bad++;
              CHECK(0, "%s q8 lutq c=%zu n=%zu params %zu clamp %zu: byte %zu = %d, want %d",
                    cfg->isa, c, n, pi, mi, b, y[b], want[b]);
            }
          mean[c] = 12345.0f;
          lutm(c, n, x, XS, t, zp, ls, mean);
          for (size_t ch = 0; ch < c && bad < 5; ch++) {
            const float *pl = planes + ch * PS;
            float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
            size_t i = 0;
            for (; i + 4 <= n; i += 4)
              s0 += pl[i], s1 += pl[i + 1], s2 += pl[i + 2], s3 += pl[i + 3];
            for (; i < n; i++) s0 += pl[i];
            const float m = ((s0 + s1) + (s2 + s3)) / (float)n;
            if (memcmp(&m, &mean[ch], sizeof m) != 0) {
              bad++;
              CHECK(0, "%s q8 lutm c=%zu n=%zu: channel %zu = %g, want %g", cfg->isa, c, n, ch,
                    (double)mean[ch], (double)m);
            }
          }
          CHECK(mean[c] == 12345.0f, "%s q8 lutm c=%zu: wrote past c", cfg->isa, c);
          if (!bad) g_pass++;
        }
}

static void test_isa(const em_cpu_config *cfg) {
  test_gelu_row(cfg);
  test_norm_rows(cfg);
  test_q8_lut_readers(cfg);
  test_q8_dwconv(cfg);
  test_q8_dwdot(cfg);
  test_q8_add(cfg);
  test_fakequant_special(cfg);
  test_copy_stride2(cfg);
  test_transpose(cfg);
  test_elementwise(cfg);
  test_hardswish_fq_bits(cfg);
  test_dq_linear(cfg);
  test_softmax_sm(cfg);
}

int main(void) {
  CHECK(for_each_isa(test_isa) > 0, "no ISA tested");
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
  em_cpu_backend_options bad = {"no-such-isa", false, false, 0, 0, 0};
  CHECK(em_cpu_backend_configure(&bad) == EM_ERR_NOT_SUPPORTED, "an unknown ISA was accepted");
  CHECK(em_cpu_config_get() == chosen, "a refused configure changed the ISA");
  em_cpu_backend_options scalar = {"scalar", false, false, 0, 0, 0};
  CHECK(em_cpu_backend_configure(&scalar) == EM_OK, "scalar refused");
  CHECK(strcmp(em_cpu_config_get()->isa, "scalar") == 0, "configure did not force scalar");
  if (chosen) {
    em_cpu_backend_options back = {chosen->isa, false, false, 0, 0, 0};
    CHECK(em_cpu_backend_configure(&back) == EM_OK, "%s refused", chosen->isa);
  }
  if (chosen) printf("chosen ISA: %s\n", chosen->isa);
  return test_summary("test_cpu_ukernels_misc");
}
