/*
 * nn_conv.c — aten::convolution.out: 1-D, 2-D and 3-D convolution, regular and
 * transposed, with stride, padding, dilation, groups and output_padding.
 *
 * Every case is normalized to 3 spatial dims (a 1-D conv is D = H = 1). The
 * f32 path lowers to GEMM: a regular conv multiplies the group's weight
 * [Cout/g, Cin/g*k] with an im2col buffer built in column chunks (skipped for
 * 1x1 stride-1 convs, whose input already is the matrix); a transposed conv
 * multiplies weight^T [Cout/g*k, Cin/g] with the input and scatters the
 * columns back (col2im). Other dtypes, and layouts whose spatial dims cannot
 * be walked with one stride, use direct reference loops (double or int64
 * accumulation), which are also the semantic definition of the op.
 */
#include "portable/nn_util.h"

/* Largest im2col chunk, in floats (bounded scratch however big the image). */
#define COL_BUDGET (1 << 21)

typedef struct conv_geom {
  int64_t n, cin, cout, groups, cin_g, cout_g;
  int64_t in[3], out[3], k[3], s[3], p[3], d[3], op[3];
  int64_t istr[5], wstr[5], ostr[5]; /* strides over (n|c, c, d, h, w), 0 for missing dims */
  int64_t kk;                        /* k[0] * k[1] * k[2] */
  int64_t p_in, p_out;               /* spatial sizes */
  bool transposed;
} conv_geom;

/* Copies sizes/strides of a rank-(2+S) tensor into 5-entry arrays (missing spatial dims 1/0). */
static void norm5(const em_tensor *t, int32_t S, int64_t *sz, int64_t *st) {
  sz[0] = t->sizes[0];
  sz[1] = t->sizes[1];
  st[0] = t->strides[0];
  st[1] = t->strides[1];
  for (int32_t i = 0; i < 3; i++) {
    int32_t src = i - (3 - S);
    sz[2 + i] = src >= 0 ? t->sizes[2 + src] : 1;
    st[2 + i] = src >= 0 ? t->strides[2 + src] : 0;
  }
}

static em_status read_geom(em_kernel_ctx *ctx, em_evalue **args, em_tensor *x, em_tensor *w,
                           conv_geom *g, int32_t *S_out) {
  int32_t S = x->dim - 2;
  EM_KCHECK(ctx, S >= 1 && S <= 3, "expected a 3-D, 4-D or 5-D input, got %d-D", (int)(x->dim));
  EM_KCHECK(ctx, w->dim == x->dim, "weight rank %d must equal input rank %d", (int)(w->dim),
            (int)(x->dim));
  int64_t s[3], p[3], d[3], op[3], one[3] = {1, 1, 1}, zero[3] = {0, 0, 0};
  EM_KCHECK(ctx, nn_int_list(args[3], S, one, s), "bad stride");
  EM_KCHECK(ctx, nn_int_list(args[4], S, zero, p), "bad padding");
  EM_KCHECK(ctx, nn_int_list(args[5], S, one, d), "bad dilation");
  EM_KCHECK(ctx, em_arg_bool(args[6], &g->transposed), "transposed must be a bool");
  EM_KCHECK(ctx, nn_int_list(args[7], S, zero, op), "bad output_padding");
  EM_KCHECK(ctx, em_arg_int(args[8], &g->groups) && g->groups > 0 && g->groups <= (1 << 24),
            "groups must be in [1, 2^24]");
  int64_t xs[5], ws[5];
  norm5(x, S, xs, g->istr);
  norm5(w, S, ws, g->wstr);
  g->n = xs[0];
  g->cin = xs[1];
  for (int32_t i = 0; i < 3; i++) {
    int32_t src = i - (3 - S);
    g->in[i] = xs[2 + i];
    g->k[i] = ws[2 + i];
    g->s[i] = src >= 0 ? s[src] : 1;
    g->p[i] = src >= 0 ? p[src] : 0;
    g->d[i] = src >= 0 ? d[src] : 1;
    g->op[i] = src >= 0 ? op[src] : 0;
    EM_KCHECK(ctx, g->k[i] > 0 && g->k[i] <= (1 << 24), "kernel size %lld is not in [1, 2^24]",
              (long long)g->k[i]);
    EM_KCHECK(ctx, g->in[i] <= ((int64_t)1 << 40), "input size %lld larger than 2^40",
              (long long)g->in[i]);
    EM_KCHECK(ctx, g->s[i] > 0 && g->d[i] > 0 && g->p[i] >= 0 && g->op[i] >= 0,
              "stride and dilation must be positive, padding non-negative");
    /* Bounded so the geometry arithmetic below cannot overflow int64. */
    EM_KCHECK(ctx,
              g->s[i] <= (1 << 24) && g->d[i] <= (1 << 24) && g->p[i] <= (1 << 24) &&
                  g->op[i] <= (1 << 24),
              "stride, padding or dilation larger than 2^24");
  }
  if (!g->transposed) {
    g->cout = ws[0];
    g->cin_g = ws[1];
    EM_KCHECK(ctx, g->cin_g * g->groups == g->cin,
              "input has %lld channels, weight expects %lld x %lld groups", (long long)g->cin,
              (long long)g->cin_g, (long long)g->groups);
    EM_KCHECK(ctx, g->cout % g->groups == 0, "out channels %lld not divisible by groups",
              (long long)g->cout);
    g->cout_g = g->cout / g->groups;
    for (int32_t i = 0; i < 3; i++) {
      int64_t eff = g->d[i] * (g->k[i] - 1) + 1;
      EM_KCHECK(ctx, g->in[i] + 2 * g->p[i] >= eff,
                "input size %lld (padded) smaller than the kernel extent %lld",
                (long long)(g->in[i] + 2 * g->p[i]), (long long)eff);
      g->out[i] = (g->in[i] + 2 * g->p[i] - eff) / g->s[i] + 1;
    }
  } else {
    EM_KCHECK(ctx, ws[0] == g->cin, "weight has %lld input channels, input %lld", (long long)ws[0],
              (long long)g->cin);
    EM_KCHECK(ctx, g->cin % g->groups == 0, "in channels not divisible by groups");
    g->cin_g = g->cin / g->groups;
    g->cout_g = ws[1];
    g->cout = g->cout_g * g->groups;
    for (int32_t i = 0; i < 3; i++) {
      EM_KCHECK(ctx, g->op[i] < g->s[i] || g->op[i] < g->d[i],
                "output padding must be smaller than either stride or dilation");
      g->out[i] = (g->in[i] - 1) * g->s[i] - 2 * g->p[i] + g->d[i] * (g->k[i] - 1) + g->op[i] + 1;
      EM_KCHECK(ctx, g->out[i] > 0, "computed output size %lld is not positive",
                (long long)g->out[i]);
    }
  }
  g->kk = g->k[0] * g->k[1] * g->k[2];
  g->p_in = g->in[0] * g->in[1] * g->in[2];
  g->p_out = g->out[0] * g->out[1] * g->out[2];
  *S_out = S;
  return EM_OK;
}

/* ---- reference loops (any real dtype) ---- */

static em_status conv_generic(const conv_geom *g, em_tensor *x, em_tensor *w, em_tensor *b,
                              em_tensor *out) {
  int dt = x->dtype;
  bool fl = em_dtype_is_float(dt);
  const int64_t *is = g->istr, *ws = g->wstr, *os = g->ostr;
  for (int64_t n = 0; n < g->n; n++)
    for (int64_t co = 0; co < g->cout; co++) {
      int64_t grp = co / g->cout_g, cog = co % g->cout_g;
      for (int64_t o0 = 0; o0 < g->out[0]; o0++)
        for (int64_t o1 = 0; o1 < g->out[1]; o1++)
          for (int64_t o2 = 0; o2 < g->out[2]; o2++) {
            double accf = 0.0;
            uint64_t acci = 0;
            int64_t oo[3] = {o0, o1, o2};
            for (int64_t cig = 0; cig < g->cin_g; cig++) {
              int64_t ci = grp * g->cin_g + cig;
              for (int64_t k0 = 0; k0 < g->k[0]; k0++)
                for (int64_t k1 = 0; k1 < g->k[1]; k1++)
                  for (int64_t k2 = 0; k2 < g->k[2]; k2++) {
                    int64_t kq[3] = {k0, k1, k2}, ii[3];
                    bool ok = true;
                    for (int i = 0; i < 3 && ok; i++) {
                      if (!g->transposed) {
                        ii[i] = oo[i] * g->s[i] - g->p[i] + kq[i] * g->d[i];
                      } else {
                        int64_t t = oo[i] + g->p[i] - kq[i] * g->d[i];
                        ok = t >= 0 && t % g->s[i] == 0;
                        ii[i] = t / g->s[i];
                      }
                      ok = ok && ii[i] >= 0 && ii[i] < g->in[i];
                    }
                    if (!ok) continue;
                    int64_t xi =
                        n * is[0] + ci * is[1] + ii[0] * is[2] + ii[1] * is[3] + ii[2] * is[4];
                    int64_t wi =
                        k0 * ws[2] + k1 * ws[3] + k2 * ws[4] +
                        (g->transposed ? ci * ws[0] + cog * ws[1] : co * ws[0] + cig * ws[1]);
                    if (fl)
                      accf += em_load_f64(x->data, dt, xi) * em_load_f64(w->data, dt, wi);
                    else
                      acci += (uint64_t)em_load_i64(x->data, dt, xi) *
                              (uint64_t)em_load_i64(w->data, dt, wi);
                  }
            }
            int64_t oi = n * os[0] + co * os[1] + o0 * os[2] + o1 * os[3] + o2 * os[4];
            if (fl) {
              if (b) accf += em_load_f64(b->data, dt, co * b->strides[0]);
              em_store_f64(out->data, dt, oi, accf);
            } else {
              if (b) acci += (uint64_t)em_load_i64(b->data, dt, co * b->strides[0]);
              em_store_i64(out->data, dt, oi, (int64_t)acci);
            }
          }
    }
  return EM_OK;
}

/* ---- f32 GEMM lowering ---- */

/* Stride that walks the merged spatial dims of a 5-entry stride array, or 0 if they do not merge.
 */
static int64_t spatial_stride(const int64_t *sz3, const int64_t *st) {
  int64_t inner = 0; /* stride of the innermost non-trivial dim */
  int64_t expect = 0;
  for (int i = 2; i >= 0; i--) {
    if (sz3[i] == 1) continue;
    if (inner == 0) {
      inner = st[2 + i];
      expect = inner * sz3[i];
    } else {
      if (st[2 + i] != expect) return 0;
      expect *= sz3[i];
    }
  }
  return inner == 0 ? 1 : inner;
}

/* Contiguous f32 copy of the weight when its non-leading dims are not row-major. */
static em_status weight_matrix(em_kernel_ctx *ctx, const conv_geom *g, em_tensor *w,
                               const float **wp, int64_t *w0, int64_t *w1) {
  int64_t d1 = g->transposed ? g->cout_g : g->cin_g;
  bool rowmajor = true;
  int64_t inner[4] = {d1, g->k[0], g->k[1], g->k[2]};
  int64_t st[4] = {g->wstr[1], g->wstr[2], g->wstr[3], g->wstr[4]};
  int64_t expect = 1;
  for (int i = 3; i >= 0; i--) {
    if (inner[i] != 1 && st[i] != expect) rowmajor = false;
    expect *= inner[i];
  }
  if (rowmajor) {
    *wp = w->data;
    *w0 = g->wstr[0];
    *w1 = 1;
    return EM_OK;
  }
  int64_t d0 = g->transposed ? g->cin : g->cout, per = d1 * g->kk;
  float *c = nn_temp(ctx, d0 * per, sizeof(float));
  NN_CHECK_ALLOC(ctx, c);
  const float *src = w->data;
  for (int64_t a = 0; a < d0; a++)
    for (int64_t b = 0; b < d1; b++)
      for (int64_t k0 = 0; k0 < g->k[0]; k0++)
        for (int64_t k1 = 0; k1 < g->k[1]; k1++)
          for (int64_t k2 = 0; k2 < g->k[2]; k2++)
            c[a * per + ((b * g->k[0] + k0) * g->k[1] + k1) * g->k[2] + k2] =
                src[a * g->wstr[0] + b * g->wstr[1] + k0 * g->wstr[2] + k1 * g->wstr[3] +
                    k2 * g->wstr[4]];
  *wp = c;
  *w0 = per;
  *w1 = 1;
  return EM_OK;
}

/* Builds im2col rows [K = cin_g*kk] x columns [p0, p1) of image n, group grp. */
static void im2col(const conv_geom *g, const float *x, int64_t n, int64_t grp, int64_t p0,
                   int64_t p1, float *col) {
  int64_t pc = p1 - p0;
  const int64_t *is = g->istr;
  for (int64_t cig = 0; cig < g->cin_g; cig++) {
    const float *xc = x + n * is[0] + (grp * g->cin_g + cig) * is[1];
    for (int64_t k0 = 0; k0 < g->k[0]; k0++)
      for (int64_t k1 = 0; k1 < g->k[1]; k1++)
        for (int64_t k2 = 0; k2 < g->k[2]; k2++) {
          float *row = col + (((cig * g->k[0] + k0) * g->k[1] + k1) * g->k[2] + k2) * pc;
          int64_t o2 = p0 % g->out[2], o1 = (p0 / g->out[2]) % g->out[1];
          int64_t o0 = p0 / (g->out[2] * g->out[1]);
          for (int64_t q = 0; q < pc; q++) {
            int64_t i0 = o0 * g->s[0] - g->p[0] + k0 * g->d[0];
            int64_t i1 = o1 * g->s[1] - g->p[1] + k1 * g->d[1];
            int64_t i2 = o2 * g->s[2] - g->p[2] + k2 * g->d[2];
            bool in =
                i0 >= 0 && i0 < g->in[0] && i1 >= 0 && i1 < g->in[1] && i2 >= 0 && i2 < g->in[2];
            row[q] = in ? xc[i0 * is[2] + i1 * is[3] + i2 * is[4]] : 0.0f;
            if (++o2 == g->out[2]) {
              o2 = 0;
              if (++o1 == g->out[1]) {
                o1 = 0;
                o0++;
              }
            }
          }
        }
  }
}

/* Depthwise (cin_g == 1) f32 job: one output channel per task item, direct loops. */
typedef struct dw_job {
  const conv_geom *g;
  const float *x, *w, *b;
  float *out;
  int64_t bstride;
} dw_job;

static void dw_task(void *arg, int64_t begin, int64_t end) {
  const dw_job *j = arg;
  const conv_geom *g = j->g;
  for (int64_t t = begin; t < end; t++) {
    int64_t n = t / g->cout, co = t % g->cout, ci = co / g->cout_g;
    const float *xc = j->x + n * g->istr[0] + ci * g->istr[1];
    const float *wc = j->w + co * g->wstr[0];
    float *oc = j->out + n * g->ostr[0] + co * g->ostr[1];
    float bv = j->b ? j->b[co * j->bstride] : 0.0f;
    for (int64_t o0 = 0; o0 < g->out[0]; o0++)
      for (int64_t o1 = 0; o1 < g->out[1]; o1++)
        for (int64_t o2 = 0; o2 < g->out[2]; o2++) {
          float acc = bv;
          for (int64_t k0 = 0; k0 < g->k[0]; k0++) {
            int64_t i0 = o0 * g->s[0] - g->p[0] + k0 * g->d[0];
            if (i0 < 0 || i0 >= g->in[0]) continue;
            for (int64_t k1 = 0; k1 < g->k[1]; k1++) {
              int64_t i1 = o1 * g->s[1] - g->p[1] + k1 * g->d[1];
              if (i1 < 0 || i1 >= g->in[1]) continue;
              const float *xr = xc + i0 * g->istr[2] + i1 * g->istr[3];
              const float *wr = wc + k0 * g->wstr[2] + k1 * g->wstr[3];
              for (int64_t k2 = 0; k2 < g->k[2]; k2++) {
                int64_t i2 = o2 * g->s[2] - g->p[2] + k2 * g->d[2];
                if (i2 >= 0 && i2 < g->in[2]) acc += xr[i2 * g->istr[4]] * wr[k2 * g->wstr[4]];
              }
            }
          }
          oc[o0 * g->ostr[2] + o1 * g->ostr[3] + o2 * g->ostr[4]] = acc;
        }
  }
}

static em_status conv_f32(em_kernel_ctx *ctx, const conv_geom *g, em_tensor *x, em_tensor *w,
                          em_tensor *b, em_tensor *out, int64_t xsp, int64_t osp) {
  if (g->cin_g == 1 && g->groups > 1) { /* depthwise: a GEMM would have K = k only */
    dw_job j = {g, x->data, w->data, b ? b->data : NULL, out->data, b ? b->strides[0] : 0};
    em_parallel_for(ctx ? ctx->pool : NULL, g->n * g->cout, dw_task, &j);
    return EM_OK;
  }
  const float *wp;
  int64_t w0, w1;
  EM_KTRY(weight_matrix(ctx, g, w, &wp, &w0, &w1));
  const float *xp = x->data;
  float *op = out->data;
  int64_t K = g->cin_g * g->kk;
  bool direct = g->kk == 1 && g->s[0] == 1 && g->s[1] == 1 && g->s[2] == 1 && g->p[0] == 0 &&
                g->p[1] == 0 && g->p[2] == 0;
  int64_t chunk = K > 0 ? COL_BUDGET / K : g->p_out;
  if (chunk < 64) chunk = 64;
  if (chunk > g->p_out) chunk = g->p_out;
  if (!direct) chunk = nn_temp_fit(ctx, K * (int64_t)sizeof(float), chunk);
  float *col = direct ? NULL : nn_temp(ctx, K * chunk, sizeof(float));
  if (!direct) NN_CHECK_ALLOC(ctx, col);
  for (int64_t n = 0; n < g->n; n++)
    for (int64_t grp = 0; grp < g->groups; grp++) {
      nn_mat a = {(float *)wp + grp * g->cout_g * w0, w0, w1};
      float *obase = op + n * g->ostr[0] + grp * g->cout_g * g->ostr[1];
      if (direct) {
        const float *xb = xp + n * g->istr[0] + grp * g->cin_g * g->istr[1];
        EM_KTRY(nn_sgemm(ctx, g->cout_g, g->p_out, K, a, (nn_mat){(float *)xb, g->istr[1], xsp},
                         (nn_mat){obase, g->ostr[1], osp}, false));
        continue;
      }
      for (int64_t p0 = 0; p0 < g->p_out; p0 += chunk) {
        int64_t p1 = p0 + chunk < g->p_out ? p0 + chunk : g->p_out;
        im2col(g, xp, n, grp, p0, p1, col);
        EM_KTRY(nn_sgemm(ctx, g->cout_g, p1 - p0, K, a, (nn_mat){col, p1 - p0, 1},
                         (nn_mat){obase + p0 * osp, g->ostr[1], osp}, false));
      }
    }
  if (b) {
    const float *bp = b->data;
    for (int64_t n = 0; n < g->n; n++)
      for (int64_t co = 0; co < g->cout; co++) {
        float bv = bp[co * b->strides[0]], *o = op + n * g->ostr[0] + co * g->ostr[1];
        for (int64_t q = 0; q < g->p_out; q++) o[q * osp] += bv;
      }
  }
  return EM_OK;
}

/* Transposed conv: col = W^T @ x (per group, in column chunks), then col2im into out. */
static em_status conv_transposed_f32(em_kernel_ctx *ctx, const conv_geom *g, em_tensor *x,
                                     em_tensor *w, em_tensor *b, em_tensor *out, int64_t xsp,
                                     int64_t osp) {
  const float *wp;
  int64_t w0, w1;
  EM_KTRY(weight_matrix(ctx, g, w, &wp, &w0, &w1)); /* rows ci, cols (co, k) */
  const float *xp = x->data;
  float *op = out->data;
  int64_t M = g->cout_g * g->kk;
  int64_t chunk = M > 0 ? COL_BUDGET / M : g->p_in;
  if (chunk < 64) chunk = 64;
  if (chunk > g->p_in) chunk = g->p_in;
  chunk = nn_temp_fit(ctx, M * (int64_t)sizeof(float), chunk);
  float *col = nn_temp(ctx, M * chunk, sizeof(float));
  NN_CHECK_ALLOC(ctx, col);
  const float *bp = b ? b->data : NULL;
  for (int64_t n = 0; n < g->n; n++)
    for (int64_t co = 0; co < g->cout; co++) {
      float bv = bp ? bp[co * b->strides[0]] : 0.0f, *o = op + n * g->ostr[0] + co * g->ostr[1];
      for (int64_t q = 0; q < g->p_out; q++) o[q * osp] = bv;
    }
  for (int64_t n = 0; n < g->n; n++)
    for (int64_t grp = 0; grp < g->groups; grp++) {
      /* A[r = (co, k), ci] = W[grp*cin_g + ci][r] */
      nn_mat a = {(float *)wp + grp * g->cin_g * w0, w1, w0};
      const float *xb = xp + n * g->istr[0] + grp * g->cin_g * g->istr[1];
      float *obase = op + n * g->ostr[0] + grp * g->cout_g * g->ostr[1];
      for (int64_t p0 = 0; p0 < g->p_in; p0 += chunk) {
        int64_t p1 = p0 + chunk < g->p_in ? p0 + chunk : g->p_in, pc = p1 - p0;
        EM_KTRY(nn_sgemm(ctx, M, pc, g->cin_g, a, (nn_mat){(float *)xb + p0 * xsp, g->istr[1], xsp},
                         (nn_mat){col, pc, 1}, false));
        for (int64_t r = 0; r < M; r++) {
          int64_t cog = r / g->kk, kr = r % g->kk;
          int64_t k2 = kr % g->k[2], k1 = (kr / g->k[2]) % g->k[1], k0 = kr / (g->k[2] * g->k[1]);
          float *oc = obase + cog * g->ostr[1];
          const float *cr = col + r * pc;
          for (int64_t q = 0; q < pc; q++) {
            int64_t p = p0 + q;
            int64_t i2 = p % g->in[2], i1 = (p / g->in[2]) % g->in[1],
                    i0 = p / (g->in[2] * g->in[1]);
            int64_t o0 = i0 * g->s[0] - g->p[0] + k0 * g->d[0];
            int64_t o1 = i1 * g->s[1] - g->p[1] + k1 * g->d[1];
            int64_t o2 = i2 * g->s[2] - g->p[2] + k2 * g->d[2];
            if (o0 < 0 || o0 >= g->out[0] || o1 < 0 || o1 >= g->out[1] || o2 < 0 || o2 >= g->out[2])
              continue;
            oc[((o0 * g->out[1] + o1) * g->out[2] + o2) * osp] += cr[q];
          }
        }
      }
    }
  return EM_OK;
}

/* Row-major strides of a 5-entry (n, c, d, h, w) shape. */
static void contiguous5(const int64_t *sz, int64_t *st) {
  st[4] = 1;
  for (int i = 3; i >= 0; i--) st[i] = st[i + 1] * sz[i + 1];
}

/* Copies a tensor into a row-major f32 buffer (NULL when scratch runs out). */
static float *widen_tensor(em_kernel_ctx *ctx, const em_tensor *t) {
  float *p = nn_temp(ctx, t->numel, sizeof(float));
  if (p)
    for (int64_t i = 0; i < t->numel; i++)
      p[i] = (float)em_load_f64(t->data, t->dtype, em_strided_offset(t, i));
  return p;
}

/*
 * f16/bf16: widen input, weight and bias to f32, run the GEMM path into an f32
 * buffer and round once per output element (ATen's CPU path accumulates in
 * f32 as well). Returns EM_ERR_MEMORY_ALLOCATION_FAILED (nothing logged) when
 * scratch is short, so the caller can fall back to the reference loops.
 */
static em_status conv_widened(em_kernel_ctx *ctx, const conv_geom *g0, em_tensor *x, em_tensor *w,
                              em_tensor *b, em_tensor *out) {
  conv_geom g = *g0;
  float *xf = widen_tensor(ctx, x), *wf = widen_tensor(ctx, w),
        *bf = b ? widen_tensor(ctx, b) : NULL;
  float *of = nn_temp(ctx, out->numel, sizeof(float));
  if (!xf || !wf || (b && !bf) || !of) return EM_ERR_MEMORY_ALLOCATION_FAILED;
  int64_t sz[5];
  sz[0] = g.n, sz[1] = g.cin, sz[2] = g.in[0], sz[3] = g.in[1], sz[4] = g.in[2];
  contiguous5(sz, g.istr);
  sz[1] = g.cout, sz[2] = g.out[0], sz[3] = g.out[1], sz[4] = g.out[2];
  contiguous5(sz, g.ostr);
  sz[0] = g.transposed ? g.cin : g.cout, sz[1] = g.transposed ? g.cout_g : g.cin_g;
  sz[2] = g.k[0], sz[3] = g.k[1], sz[4] = g.k[2];
  contiguous5(sz, g.wstr);
  int64_t one = 1;
  em_tensor xt = *x, wt = *w, bt, ot = *out;
  xt.data = xf, xt.dtype = EM_DTYPE_F32;
  wt.data = wf, wt.dtype = EM_DTYPE_F32;
  ot.data = of, ot.dtype = EM_DTYPE_F32;
  if (b) {
    bt = *b;
    bt.data = bf, bt.dtype = EM_DTYPE_F32, bt.strides = &one;
  }
  em_status st = g.transposed ? conv_transposed_f32(ctx, &g, &xt, &wt, b ? &bt : NULL, &ot, 1, 1)
                              : conv_f32(ctx, &g, &xt, &wt, b ? &bt : NULL, &ot, 1, 1);
  if (st != EM_OK) return st;
  for (int64_t i = 0; i < out->numel; i++)
    em_store_f64(out->data, out->dtype, em_strided_offset(out, i), of[i]);
  return EM_OK;
}

/*
 * aten::convolution.out(Tensor input, Tensor weight, Tensor? bias, SymInt[] stride,
 *   SymInt[] padding, SymInt[] dilation, bool transposed, SymInt[] output_padding,
 *   SymInt groups, *, Tensor(a!) out)
 */
em_status em_convolution_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *x = EM_ARG_TENSOR(args, 0), *w = EM_ARG_TENSOR(args, 1), *out = EM_ARG_TENSOR(args, 9);
  em_tensor *b = EM_ARG_IS_NONE(args, 2) ? NULL : EM_ARG_TENSOR(args, 2);
  NN_CHECK_TENSOR(ctx, x, "input");
  NN_CHECK_TENSOR(ctx, w, "weight");
  EM_KCHECK(ctx, out, "out must be a tensor");
  EM_KCHECK(ctx, EM_ARG_IS_NONE(args, 2) || b, "bias must be a tensor or None");
  EM_KCHECK(ctx, x->dtype == w->dtype && x->dtype == out->dtype && (!b || b->dtype == x->dtype),
            "input, weight, bias and out must share a dtype");
  EM_KCHECK(ctx, (EM_DT_REALS & EM_DTYPE_BIT(x->dtype)) != 0, "unsupported dtype %s",
            em_dtype_name(x->dtype));
  conv_geom g;
  int32_t S;
  EM_KTRY(read_geom(ctx, args, x, w, &g, &S));
  if (b) {
    NN_CHECK_TENSOR(ctx, b, "bias");
    EM_KCHECK(ctx, b->dim == 1 && b->sizes[0] == g.cout, "bias must be [%lld]", (long long)g.cout);
  }
  int64_t osz[5] = {g.n, g.cout, 0, 0, 0};
  for (int32_t i = 0; i < S; i++) osz[2 + i] = g.out[3 - S + i];
  EM_KCHECK(ctx, out->dim == x->dim, "out must have rank %d", (int)(x->dim));
  EM_KTRY(em_resize_out(ctx, out, osz, x->dim));
  if (out->numel == 0) return EM_OK;
  int64_t tmp[5];
  norm5(out, S, tmp, g.ostr);
  if (x->numel == 0 || g.cin_g == 0) { /* no inputs to sum: out = bias or 0 */
    for (int64_t i = 0; i < out->numel; i++) {
      int64_t co = (i / g.p_out) % g.cout;
      double v = b ? em_load_f64(b->data, b->dtype, co * b->strides[0]) : 0.0;
      em_store_f64(out->data, out->dtype, em_strided_offset(out, i), v);
    }
    return EM_OK;
  }
  int64_t xsp = spatial_stride(g.in, g.istr), osp = spatial_stride(g.out, g.ostr);
  if (x->dtype == EM_DTYPE_F32 && xsp && osp) {
    if (g.transposed) return conv_transposed_f32(ctx, &g, x, w, b, out, xsp, osp);
    return conv_f32(ctx, &g, x, w, b, out, xsp, osp);
  }
  if (x->dtype == EM_DTYPE_F16 || x->dtype == EM_DTYPE_BF16) {
    em_status st = conv_widened(ctx, &g, x, w, b, out);
    if (st != EM_ERR_MEMORY_ALLOCATION_FAILED) return st;
  }
  return conv_generic(&g, x, w, b, out);
}

/* ---- backward ---- */

/* Resizes `t` to `sz` (rank dim) when it is wanted; checks dtype. */
static em_status grad_out(em_kernel_ctx *ctx, em_tensor *t, const int64_t *sz, int32_t dim, int dt,
                          const char *name) {
  EM_KCHECK(ctx, t && t->dim == dim && t->dtype == dt, "%s must be a %d-D %s tensor", name,
            (int)(dim), em_dtype_name(dt));
  return em_resize_out(ctx, t, sz, dim);
}

/*
 * aten::convolution_backward.out(Tensor grad_output, Tensor input, Tensor weight,
 *   SymInt[]? bias_sizes, SymInt[] stride, SymInt[] padding, SymInt[] dilation, bool transposed,
 *   SymInt[] output_padding, SymInt groups, bool[3] output_mask, *, out0, out1, out2)
 * Reference loops in double: for every (input position, output position, tap) the forward
 * pass pairs, grad_input += grad_output * weight and grad_weight += grad_output * input.
 */
em_status em_convolution_backward_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *go = EM_ARG_TENSOR(args, 0), *x = EM_ARG_TENSOR(args, 1), *w = EM_ARG_TENSOR(args, 2);
  em_tensor *gi = EM_ARG_TENSOR(args, 11), *gw = EM_ARG_TENSOR(args, 12),
            *gb = EM_ARG_TENSOR(args, 13);
  NN_CHECK_TENSOR(ctx, go, "grad_output");
  NN_CHECK_TENSOR(ctx, x, "input");
  NN_CHECK_TENSOR(ctx, w, "weight");
  EM_KCHECK(ctx, em_dtype_is_float(x->dtype) && go->dtype == x->dtype && w->dtype == x->dtype,
            "grad_output, input and weight must share a float dtype");
  EM_KCHECK(ctx, args[10]->tag == EM_TAG_LIST_BOOL && args[10]->u.list.n == 3,
            "output_mask must be 3 bools");
  const uint8_t *mask = args[10]->u.list.u.bools;
  conv_geom g;
  int32_t S;
  EM_KTRY(read_geom(ctx, args + 1, x, w, &g, &S));
  EM_KCHECK(ctx, go->dim == x->dim && go->sizes[0] == g.n && go->sizes[1] == g.cout,
            "grad_output shape does not match the convolution output");
  for (int32_t i = 0; i < S; i++)
    EM_KCHECK(ctx, go->sizes[2 + i] == g.out[3 - S + i],
              "grad_output spatial size does not match the convolution output");
  if (args[3]->tag != EM_TAG_NONE) {
    size_t nb = 0;
    const int64_t *bs = em_evalue_int_list(args[3], &nb);
    EM_KCHECK(ctx, bs && nb == 1 && bs[0] == g.cout, "bias_sizes must be [%lld]",
              (long long)g.cout);
  }
  int dt = x->dtype;
  double *agi = NULL, *agw = NULL;
  if (mask[0]) {
    EM_KTRY(grad_out(ctx, gi, x->sizes, x->dim, dt, "grad_input"));
    agi = nn_temp(ctx, x->numel, sizeof(double));
    NN_CHECK_ALLOC(ctx, agi);
    for (int64_t i = 0; i < x->numel; i++) agi[i] = 0.0;
  }
  if (mask[1]) {
    EM_KTRY(grad_out(ctx, gw, w->sizes, w->dim, dt, "grad_weight"));
    agw = nn_temp(ctx, w->numel, sizeof(double));
    NN_CHECK_ALLOC(ctx, agw);
    for (int64_t i = 0; i < w->numel; i++) agw[i] = 0.0;
  }
  int64_t gos[5], gsz[5], wsz[5], wcs[5];
  norm5(go, S, gsz, gos);
  norm5(w, S, wsz, wcs); /* contiguous strides of w's logical index, for agw */
  wcs[4] = 1;
  for (int i = 3; i >= 0; i--) wcs[i] = wcs[i + 1] * wsz[i + 1];
  int64_t xcs[5], xsz[5];
  norm5(x, S, xsz, xcs);
  xcs[4] = 1;
  for (int i = 3; i >= 0; i--) xcs[i] = xcs[i + 1] * xsz[i + 1];
  /* "outer" positions: output for a regular conv, input for a transposed one */
  const int64_t *outer = g.transposed ? g.in : g.out, *inner = g.transposed ? g.out : g.in;
  for (int64_t n = 0; n < g.n; n++)
    for (int64_t co = 0; co < g.cout; co++) {
      int64_t grp = co / g.cout_g, cog = co % g.cout_g;
      for (int64_t a0 = 0; a0 < outer[0]; a0++)
        for (int64_t a1 = 0; a1 < outer[1]; a1++)
          for (int64_t a2 = 0; a2 < outer[2]; a2++)
            for (int64_t k0 = 0; k0 < g.k[0]; k0++)
              for (int64_t k1 = 0; k1 < g.k[1]; k1++)
                for (int64_t k2 = 0; k2 < g.k[2]; k2++) {
                  int64_t aa[3] = {a0, a1, a2}, kq[3] = {k0, k1, k2}, bb[3];
                  bool ok = true;
                  for (int i = 0; i < 3; i++) {
                    bb[i] = aa[i] * g.s[i] - g.p[i] + kq[i] * g.d[i];
                    ok = ok && bb[i] >= 0 && bb[i] < inner[i];
                  }
                  if (!ok) continue;
                  const int64_t *op = g.transposed ? bb : aa, *ip = g.transposed ? aa : bb;
                  double gv = em_load_f64(go->data, dt,
                                          n * gos[0] + co * gos[1] + op[0] * gos[2] +
                                              op[1] * gos[3] + op[2] * gos[4]);
                  if (gv == 0.0) continue;
                  for (int64_t cig = 0; cig < g.cin_g; cig++) {
                    int64_t ci = grp * g.cin_g + cig;
                    int64_t wa = g.transposed ? ci : co, wb = g.transposed ? cog : cig;
                    int64_t kl = k0 * wcs[2] + k1 * wcs[3] + k2 * wcs[4];
                    int64_t xl =
                        n * xcs[0] + ci * xcs[1] + ip[0] * xcs[2] + ip[1] * xcs[3] + ip[2] * xcs[4];
                    if (agi) {
                      int64_t wi = wa * g.wstr[0] + wb * g.wstr[1] + k0 * g.wstr[2] +
                                   k1 * g.wstr[3] + k2 * g.wstr[4];
                      agi[xl] += gv * em_load_f64(w->data, dt, wi);
                    }
                    if (agw) {
                      int64_t xi = n * g.istr[0] + ci * g.istr[1] + ip[0] * g.istr[2] +
                                   ip[1] * g.istr[3] + ip[2] * g.istr[4];
                      agw[wa * wcs[0] + wb * wcs[1] + kl] += gv * em_load_f64(x->data, dt, xi);
                    }
                  }
                }
    }
  if (agi)
    for (int64_t i = 0; i < x->numel; i++)
      em_store_f64(gi->data, dt, em_strided_offset(gi, i), agi[i]);
  if (agw)
    for (int64_t i = 0; i < w->numel; i++)
      em_store_f64(gw->data, dt, em_strided_offset(gw, i), agw[i]);
  if (mask[2]) {
    EM_KTRY(grad_out(ctx, gb, &g.cout, 1, dt, "grad_bias"));
    for (int64_t co = 0; co < g.cout; co++) {
      double s = 0.0;
      for (int64_t n = 0; n < g.n; n++)
        for (int64_t q = 0; q < g.p_out; q++) {
          int64_t o2 = q % g.out[2], o1 = (q / g.out[2]) % g.out[1], o0 = q / (g.out[2] * g.out[1]);
          s += em_load_f64(go->data, dt,
                           n * gos[0] + co * gos[1] + o0 * gos[2] + o1 * gos[3] + o2 * gos[4]);
        }
      em_store_f64(gb->data, dt, co * gb->strides[0], s);
    }
  }
  return EM_OK;
}
