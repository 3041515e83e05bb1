/*
 * cpu_op_conv.c — conv2d: its checks (the depthwise and Winograd ones in cpu_op_dwconv.c and
 * cpu_op_wino.c) and its run, which picks the path: depthwise, the direct stem kernel
 * (cpu_op_smallc.c), Winograd, a GEMV per weight panel for 1x1 maps, transposed (deep convs on
 * small maps), else a GEMM.
 *
 * GEMM convs take the packed weights as A (EMC_MR-row panels) and the input as B — its rows for
 * 1x1 stride-1 convs, else im2col rows built strip by strip in per-thread scratch
 * (cpu_op_im2col.c) — so the output lands in NCHW with no transpose. Deep convs on small maps
 * (EMC_CONV_TRANSPOSED) swap the operands, pixels broadcast and output channels in the vectors,
 * and transpose after.
 */
#include "cpu_ops.h"

/*
 * Scratch floats of a transposed conv (EMC_CONV_TRANSPOSED): 16 of slack to align the start to
 * 64 bytes, the im2col [kg][npix] (room for ceil(npix / 6) * 6 columns, rounded up to 16
 * floats), then C^T [npix][co].
 */
static uint64_t conv_t_scratch_floats(int64_t kg, int64_t npix, int64_t co) {
  return 16 + emc_div_up(emc_div_up((size_t)npix, EMC_MR) * EMC_MR * (size_t)kg, 16) * 16 +
         (uint64_t)npix * (uint64_t)co;
}

bool emc_check_conv(const emc_delegate *d, const emc_op *op, char *why, size_t why_n) {
  const emc_rt_tensor *x = tensor_at(d, op->in[0]), *w = tensor_at(d, op->in[1]);
  const emc_rt_tensor *b = op->in[2] < 0 ? NULL : tensor_at(d, op->in[2]);
  const emc_rt_tensor *y = tensor_at(d, op->out[0]);
  if (!x || !w || !y || (op->in[2] >= 0 && !b)) WHY("conv2d: bad tensor id");
  if (x->ndim != 4 || y->ndim != 4) WHY("conv2d: input and output must be 4-d");
  if (!is_const(w) || (b && !is_const(b))) WHY("conv2d: weights and bias must be constants");
  if (!params_nonneg(op, EMC_CONV_N_PARAMS, why, why_n)) return false;
  const emc_conv_params p = emc_conv_params_of(op);
  if (p.scratch_off + p.scratch_nbytes > (int64_t)d->arena_nbytes)
    WHY("conv2d: scratch [%lld, +%lld) past the %llu-byte arena", (long long)p.scratch_off,
        (long long)p.scratch_nbytes, (unsigned long long)d->arena_nbytes);
  if (!scratch_apart(d, op, why, why_n)) return false;
  int64_t g = p.groups, kh = p.kh, kw = p.kw;
  if (g < 1 || kh < 1 || kw < 1 || p.sh < 1 || p.sw < 1 || p.dh < 1 || p.dw < 1)
    WHY("conv2d: groups, kernel, stride and dilation must be >= 1");
  int64_t n = x->sizes[0], cin = x->sizes[1], co = y->sizes[1];
  if (y->sizes[0] != n || cin % g || co % g || cin == 0 || co == 0)
    WHY("conv2d: channels %lld -> %lld do not split into %lld groups", (long long)cin,
        (long long)co, (long long)g);
  if ((p.eh || p.ew) && !(p.depthwise && p.q8_id >= 0))
    WHY("conv2d: %lld / %lld more zero rows / columns after than before: only int8 depthwise "
        "convs pad asymmetrically",
        (long long)p.eh, (long long)p.ew);
  int64_t oh = conv_out(x->sizes[2] + p.eh, kh, p.sh, p.ph, p.dh);
  int64_t ow = conv_out(x->sizes[3] + p.ew, kw, p.sw, p.pw, p.dw);
  if (oh != y->sizes[2] || ow != y->sizes[3])
    WHY("conv2d: output %lldx%lld, expected %lldx%lld", (long long)y->sizes[2],
        (long long)y->sizes[3], (long long)oh, (long long)ow);
  if (b && b->numel != co)
    WHY("conv2d: bias has %lld elements for %lld channels", (long long)b->numel, (long long)co);
  if (!check_residual(d, op, why, why_n)) return false;
  if (p.in_scale_id >= 0) { /* version 6: an input channel scale */
    const emc_rt_tensor *st = tensor_at(d, (int32_t)p.in_scale_id);
    if (!st) WHY("conv2d: bad input-scale tensor id");
    if (p.depthwise || g != 1 || kh != 1 || kw != 1 || p.sh != 1 || p.sw != 1 || p.ph || p.pw ||
        p.winograd)
      WHY("conv2d: an input scale needs a 1x1, stride-1, unpadded, ungrouped conv");
    if (st->numel != n * cin)
      WHY("conv2d: input scale has %lld elements, expected %lld", (long long)st->numel,
          (long long)(n * cin));
    if (x->storage != EMC_ARENA) WHY("conv2d: a scaled input must be in the arena");
    if (out_shared(x, y) || out_shared(st, x) ||
        (op->in[3] >= 0 && out_shared(tensor_at(d, op->in[3]), x)))
      WHY("conv2d: a scaled input shares storage with the output, scale or residual");
  }
  if (op->out[1] >= 0) { /* a depthwise conv's plane means (version 4) */
    const emc_rt_tensor *mt = tensor_at(d, op->out[1]);
    if (!p.depthwise) WHY("conv2d: only a depthwise conv writes plane means");
    if (mt->storage == EMC_CONST || mt->storage == EMC_INPUT)
      WHY("conv2d: plane means go to a constant or an input");
    if (mt->numel != n * co)
      WHY("conv2d: plane means have %lld elements, expected %lld", (long long)mt->numel,
          (long long)(n * co));
    if (out_shared(mt, y) || out_shared(mt, x)) WHY("conv2d: plane means share storage");
  }
  if (p.q8_id >= 0) return emc_check_conv_q8(d, op, w, cin, co, oh * ow, why, why_n);
  if (p.depthwise) return emc_check_dwconv(d, op, w, cin, co, why, why_n);
  int64_t mg = co / g, kg = cin / g * kh * kw;
  if (p.pairs_id >= 0) { /* version 5: the weights again as bf16 pairs */
    const emc_rt_tensor *pw = tensor_at(d, (int32_t)p.pairs_id);
    const int64_t want =
        (int64_t)emc_div_up((size_t)co, 32) * 32 * (int64_t)emc_div_up((size_t)kg, 16) * 16;
    if (!pw || !is_const(pw)) WHY("conv2d: the bf16-pair weights are not a constant");
    if (g != 1 || p.winograd)
      WHY("conv2d: bf16-pair weights need an ungrouped conv that is not Winograd");
    if (pw->numel != want)
      WHY("conv2d: bf16-pair weights have %lld words, expected %lld", (long long)pw->numel,
          (long long)want);
  }
  if (p.transposed > 1) WHY("conv2d: transposed flag %lld", (long long)p.transposed);
  if (p.winograd) return emc_check_conv_wino(d, op, w, cin, co, why, why_n);
  if (p.transposed) {
    if (g != 1) WHY("conv2d: a transposed conv has %lld groups, not 1", (long long)g);
    if (w->numel != (int64_t)emc_div_up((size_t)co, EMC_NR_PANEL) * EMC_NR_PANEL * kg)
      WHY("conv2d: transposed packed weights have %lld elements, expected %lld",
          (long long)w->numel,
          (long long)(emc_div_up((size_t)co, EMC_NR_PANEL) * EMC_NR_PANEL * kg));
    uint64_t need = conv_t_scratch_floats(kg, oh * ow, co) * sizeof(float);
    if (!scratch_holds(d, &p, need, "transposed", why, why_n)) return false;
    if (p.pairs_id < 0) return check_act(op, why, why_n);
    /* with pairs it may run untransposed (emc_run_conv): the im2col scratch too */
  } else if (w->numel != g * (int64_t)emc_div_up((size_t)mg, EMC_MR) * EMC_MR * kg)
    WHY("conv2d: packed weights have %lld elements, expected %lld", (long long)w->numel,
        (long long)(g * (int64_t)emc_div_up((size_t)mg, EMC_MR) * EMC_MR * kg));
  const uint64_t need =
      (uint64_t)kg * emc_div_up((size_t)(oh * ow), EMC_NR_PANEL) * EMC_NR_PANEL * sizeof(float);
  return scratch_holds(d, &p, need, "im2col", why, why_n) && check_act(op, why, why_n);
}

/* B rows of a 1x1 conv with an input scale (EMC_CONV_IN_SCALE): row k of x times s[k]. */
typedef struct scaled_rows {
  const float *x, *s;
  size_t ldx;
  const em_cpu_config *cfg;
} scaled_rows;

/* The GEMM's pack_b for scaled_rows: rows [k0, k0 + kc), columns [n0, n0 + nc) into dst. */
static void scaled_strip(const void *ctx, size_t k0, size_t kc, size_t n0, size_t nc, float *dst,
                         size_t ldd) {
  const scaled_rows *r = ctx;
  const em_minmax_params none = {-INFINITY, INFINITY, 0};
  for (size_t k = 0; k < kc; k++)
    r->cfg->vbinc[EMC_BIN_MUL](nc, r->x + (k0 + k) * r->ldx + n0, r->s + k0 + k, dst + k * ldd,
                               &none);
}

typedef struct scale_job {
  float *x;
  const float *s;
  int64_t plane;
  const em_cpu_config *cfg;
} scale_job;

/* Planes [begin, end) of x scaled in place: x[p] *= s[p]. */
static void scale_planes(void *ctx, int64_t begin, int64_t end) {
  const scale_job *j = ctx;
  const em_minmax_params none = {-INFINITY, INFINITY, 0};
  for (int64_t p = begin; p < end; p++)
    j->cfg->vbinc[EMC_BIN_MUL]((size_t)j->plane, j->x + p * j->plane, j->s + p, j->x + p * j->plane,
                               &none);
}

/*
 * A 1x1 conv of a 1x1 map (N = 1: squeeze-and-excitation FCs) as one GEMV per 6-row weight
 * panel. Through the GEMM, its 6 x 64 tiles had one column of 64 filled: MobileNetV3-Small's
 * 144 -> 576 FC took 28 us for its 83K multiply-adds.
 */
typedef struct conv_gemv_job {
  const emc_delegate *d;
  const emc_op *op;
  const float *x, *w, *bias, *res;
  float *y;
  int64_t g, cg, mg, kg;
  size_t panels; /* 6-row panels a group */
  em_minmax_params mm;
} conv_gemv_job;

/* Panels [begin, end) over batch, group, panel (the output's channel order). */
static void conv_gemv(void *ctx, int64_t begin, int64_t end) {
  const conv_gemv_job *j = ctx;
  const em_cpu_config *cfg = j->d->cfg;
  const em_minmax_params none = {-INFINITY, INFINITY, 0};
  const int64_t per_b = j->g * (int64_t)j->panels;
  for (int64_t i = begin; i < end; i++) {
    const int64_t b = i / per_b, gi = i % per_b / (int64_t)j->panels;
    const int64_t m0 = i % (int64_t)j->panels * EMC_MR,
                  mr = j->mg - m0 < EMC_MR ? j->mg - m0 : EMC_MR;
    const int64_t c0 = (b * j->g + gi) * j->mg + m0; /* output channel (and element) */
    float *y = j->y + c0;
    const float *a =
        j->w + ((size_t)gi * j->panels + (size_t)(m0 / EMC_MR)) * EMC_MR * (size_t)j->kg;
    cfg->gemv6((size_t)j->kg, (size_t)mr, a, j->x + (b * j->g + gi) * j->cg,
               j->bias ? j->bias + gi * j->mg + m0 : NULL, y, j->res ? &none : &j->mm);
    if (j->res) cfg->vbin[EMC_BIN_ADD]((size_t)mr, y, j->res + c0, y, &j->mm);
    if (post_act(j->op)) cfg->vact((size_t)mr, y, y, j->op->act, j->op->fp);
  }
}

/*
 * One image of a transposed conv (EMC_CONV_TRANSPOSED): the GEMM C^T[npix, co] = im2col^T @ W^T
 * with W^T in 16-column B panels (bias per column, clamp and activation in the driver), then
 * y[co][npix] = C^T^T. A is read in place, strided (a_ks = npix: row k of the im2col holds the
 * k-th element of every pixel's row of A): the activations themselves for a 1x1 stride-1 conv,
 * else an im2col matrix [kg][npix] built in the scratch (ij->col) with whole input runs copied.
 */
static void run_conv_t(const emc_delegate *d, const emc_op *op, im2col_job *ij, bool direct,
                       float *y, const float *res, int64_t co, em_threadpool *pool) {
  const int64_t kg = ij->khw_rows, npix = ij->q.oh * ij->q.ow;
  float *a = (float *)(((uintptr_t)ij->col + 63) & ~(uintptr_t)63);
  float *ct = a + emc_div_up(emc_div_up((size_t)npix, EMC_MR) * EMC_MR * (size_t)kg, 16) * 16;
  if (!direct) {
    ij->col = a;
    par_for(pool, kg, emc_im2col_rows_rm, ij, kg * npix);
  }
  emc_gemm j;
  gemm_init(&j, d);
  j.m = (size_t)npix, j.k = (size_t)kg, j.n = (size_t)co;
  j.a = direct ? ij->x : a, j.a_packed = 0, j.a_rs = 1, j.a_ks = (size_t)npix;
  j.b = data_of(d, op->in[1]), j.b_packed = 1;
  j.c = ct, j.ldc = (size_t)co;
  j.bias_n = data_of(d, op->in[2]);
  const em_minmax_params none = {-INFINITY, INFINITY, 0};
  j.mm = res ? none : clamp_of(op), j.act = res ? 0 : post_act(op), j.fp = op->fp;
  emc_gemm_run(&j, pool);
  transpose_job tj = {ct, y, npix, co, npix, res, d->cfg, clamp_of(op), post_act(op), op->fp};
  par_for(pool, co, emc_transpose_rows, &tj, co * npix);
}

em_status emc_run_conv(const emc_delegate *d, const emc_op *op, em_threadpool *pool) {
  const emc_conv_params p = emc_conv_params_of(op);
  if (p.q8_id >= 0) {
    emc_run_conv_q8(d, op, pool);
    return EM_OK;
  }
  if (p.depthwise) {
    emc_run_dwconv(d, op, pool);
    return EM_OK;
  }
  if (d->xsl && d->xsl[op - d->ops]) { /* a projection summed in slices (cpu_op_chain.c) */
    emc_run_xsl_proj(d, (uint32_t)(op - d->ops), pool);
    return EM_OK;
  }
  const emc_rt_tensor *xt = &d->t[op->in[0]], *yt = &d->t[op->out[0]];
  const float *x = xt->data, *w = data_of(d, op->in[1]), *bias = data_of(d, op->in[2]);
  float *y = yt->data;
  const float *res = data_of(d, op->in[3]); /* residual or NULL */
  int64_t n = xt->sizes[0], cin = xt->sizes[1], h = xt->sizes[2], wd = xt->sizes[3];
  int64_t co = yt->sizes[1], oh = yt->sizes[2], ow = yt->sizes[3];
  int64_t g = p.groups, kh = p.kh, kw = p.kw;
  int64_t cg = cin / g, mg = co / g, kg = cg * kh * kw, npix = oh * ow;
  bool direct = kh == 1 && kw == 1 && p.sh == 1 && p.sw == 1 && p.ph == 0 && p.pw == 0;
  /* room in the scratch for the GEMM's per-thread B strips */
  const bool fits =
      emc_gemm_pack_floats(d->cfg, (size_t)kg, em_threadpool_size(pool)) * sizeof(float) <=
      (size_t)p.scratch_nbytes;
  const uint32_t *pairs =
      p.pairs_id >= 0 ? (const uint32_t *)data_of(d, (int32_t)p.pairs_id) : NULL;
  /* A transposed conv with bf16 pairs (small maps) runs untransposed from the pairs where the
   * AMX path takes it: 32 x 32 tiles use 49 pixels better than 6 x 64 FMA tiles do either way
   * round. The transposed f32 weights serve every other configuration. */
  bool transposed = p.transposed != 0;
  if (transposed && pairs) {
    emc_gemm t;
    gemm_init(&t, d);
    t.m = (size_t)mg, t.k = (size_t)kg, t.n = (size_t)npix, t.a_pairs = pairs;
    transposed = !emc_gemm_runs_pairs(&t, pool);
  }
  /* An input scale: folded into the copy of B's rows where the GEMM makes one (direct, with
   * room for the copies), else applied to the input in place (validated: private to this op). */
  const float *in_scale = p.in_scale_id >= 0 ? data_of(d, (int32_t)p.in_scale_id) : NULL;
  const bool smallc = !p.winograd && emc_smallc_fits(d, op, cin, g, kg);
  const bool scale_rows = in_scale && direct && npix > 1 && !transposed && fits && !smallc;
  if (in_scale && !scale_rows) {
    scale_job sj = {(float *)x, in_scale, h * wd, d->cfg};
    par_for_mem(pool, n * cin, scale_planes, &sj, n * cin * h * wd);
    in_scale = NULL;
  }
  if (smallc) {
    emc_run_conv_smallc(d, op, x, w, bias, y, n, cin, h, wd, co, oh, ow, kg, pool);
    return EM_OK;
  }
  if (p.winograd) {
    for (int64_t b = 0; b < n; b++)
      emc_run_conv_wino(d, op, x + b * cin * h * wd, y + b * co * npix,
                        res ? res + b * co * npix : NULL, cin, h, wd, co, oh, ow, pool);
    return EM_OK;
  }
  if (direct && npix == 1 && !p.transposed) {
    const conv_gemv_job j = {
        d, op, x, w, bias, res, y, g, cg, mg, kg, emc_div_up((size_t)mg, EMC_MR), clamp_of(op)};
    par_for_static(pool, n * g * (int64_t)j.panels, conv_gemv, (void *)&j, n * co * kg);
    return EM_OK;
  }
  float *col = (float *)(d->arena + p.scratch_off);
  size_t panel = emc_div_up((size_t)mg, EMC_MR) * EMC_MR * (size_t)kg;
  for (int64_t b = 0; b < n; b++) {
    for (int64_t gi = 0; gi < g; gi++) {
      const float *xg = x + (b * cin + gi * cg) * h * wd;
      im2col_job ij = emc_im2col_of(d, &p, xg, col, h, wd, oh, ow, kg);
      if (transposed) {
        run_conv_t(d, op, &ij, direct, y + b * co * npix, res ? res + b * co * npix : NULL, co,
                   pool);
        continue;
      }
      /* The whole im2col matrix (for a 1x1 conv, its input in 16-column panels) instead of
       * strips built per M block when there are no strips to spread over threads (one strip: a
       * 7x7 map): the threads then split M, and each of its blocks would build the same strip
       * again (ResNet-18's 7x7 layers at 2 threads). */
      const bool whole = !direct && (!fits || (npix <= 64 && em_threadpool_size(pool) > 1));
      if (whole) par_for(pool, kg, emc_im2col_rows, &ij, kg * npix);
      emc_gemm j;
      gemm_init(&j, d);
      j.m = (size_t)mg, j.k = (size_t)kg, j.n = (size_t)npix;
      /* transposed f32 weights are B panels: the pairs path, which alone runs here, never reads A
       */
      j.a = p.transposed ? NULL : w + (size_t)gi * panel, j.a_packed = 1;
      j.a_pairs = pairs;
      j.c = y + (b * co + gi * mg) * npix, j.ldc = (size_t)npix;
      j.res = res ? res + (b * co + gi * mg) * npix : NULL, j.ldr = (size_t)npix;
      j.bias_m = bias ? bias + gi * mg : NULL;
      j.mm = clamp_of(op), j.act = post_act(op), j.fp = op->fp;
      if (whole) { /* a whole im2col matrix in the scratch */
        j.b = col, j.b_packed = 1;
      } else if (!direct) { /* im2col strip by strip, in per-thread scratch */
        j.pack_b = emc_im2col_strip, j.pack_ctx = &ij, j.pack = col;
        /* Stride 1 or 2, undilated, and room after the pack slots: copy runs from a padded
         * input (emc_pad_planes) built once. */
        const size_t pack_floats =
            emc_gemm_pack_floats(d->cfg, (size_t)kg, em_threadpool_size(pool));
        const size_t pad_floats = emc_padded_floats(&ij, cg);
        if (pad_floats &&
            (pack_floats + pad_floats + 16) * sizeof(float) <= (size_t)p.scratch_nbytes) {
          ij.padded = (float *)(((uintptr_t)(col + pack_floats) + 63) & ~(uintptr_t)63);
          par_for_mem(pool, cg, emc_pad_planes, &ij, (int64_t)pad_floats);
          j.pack_b = emc_im2col_strip_padded;
        }
      } else {
        /* 1x1: B is the activations themselves, [kg, npix] row-major, copied strip by strip
         * into per-thread scratch (when the planned scratch holds it) as the GEMM goes. */
        j.b = xg, j.ldb = (size_t)npix, j.b_packed = 0;
        if (fits) j.pack = col;
      }
      const scaled_rows sr = {xg, in_scale ? in_scale + b * cin : NULL, (size_t)npix, d->cfg};
      if (in_scale) j.pack_b = scaled_strip, j.pack_ctx = &sr;
      emc_run_gemm_job(&j, pool);
    }
  }
  return EM_OK;
}
