/*
 * cpu_op_wino.c — 3x3 stride-1 conv2d as Winograd F(m x m, 3 x 3) (EMC_CONV_WINOGRAD, m = 2 or
 * 4): its checks after emc_check_conv's common ones, and its run, one image at a time, in blocks
 * of EM_WINO_MAX_TILES output tiles (input transform, one GEMM per transform element, output
 * transform), split over the threads by tiles or by the phases of each block.
 */
#include "cpu_ops.h"

/* Floats of one Winograd slot: [a * a][cin][64] transformed inputs, [a * a][co][64] products
 * (transposed: then [a * a][64][co] products as the GEMMs leave them). */
static uint64_t wino_slot_floats(int64_t a, int64_t cin, int64_t co, bool transposed) {
  return (uint64_t)(a * a) * (uint64_t)(cin + co + (transposed ? co : 0)) * EM_WINO_MAX_TILES;
}

bool emc_check_conv_wino(const emc_delegate *d, const emc_op *op, const emc_rt_tensor *w,
                         int64_t cin, int64_t co, char *why, size_t why_n) {
  const emc_conv_params p = emc_conv_params_of(op);
  const int64_t m = p.winograd, a = m + 2, slots = p.wino_slots;
  if (m != 2 && m != 4) WHY("conv2d: Winograd tile %lld, expected 2 or 4", (long long)m);
  if (p.groups != 1 || p.kh != 3 || p.kw != 3 || p.sh != 1 || p.sw != 1 || p.dh != 1 || p.dw != 1)
    WHY("conv2d: Winograd needs a 3x3, stride 1, undilated, ungrouped conv");
  const bool tr = p.transposed != 0;
  /* Filters per element: [co, cin] in 6-row A panels, or transposed [cin, co] in 16-column B
   * panels. */
  const int64_t per_xi = tr ? (int64_t)emc_div_up((size_t)co, EMC_NR_PANEL) * EMC_NR_PANEL * cin
                            : (int64_t)emc_div_up((size_t)co, EMC_MR) * EMC_MR * cin;
  if (w->numel != a * a * per_xi)
    WHY("conv2d: Winograd weights have %lld elements, expected %lld", (long long)w->numel,
        (long long)(a * a * per_xi));
  if (slots < 1 || slots > EMC_GEMM_MAX_SLOTS)
    WHY("conv2d: %lld Winograd slots (1 to %d)", (long long)slots, EMC_GEMM_MAX_SLOTS);
  uint64_t need = (16 + (uint64_t)slots * wino_slot_floats(a, cin, co, tr)) * sizeof(float);
  return scratch_holds(d, &p, need, "Winograd", why, why_n) && check_act(op, why, why_n);
}

/*
 * Winograd F(m x m, 3 x 3) (EMC_CONV_WINOGRAD): the output is cut into m x m tiles, numbered in
 * raster order and run in blocks of EM_WINO_MAX_TILES. For one block: every input channel's
 * (m + 2) x (m + 2) windows are transformed (B^T d B) into V[xi][cin][64]; then, for each of the
 * (m + 2)^2 elements xi, one GEMM M[xi] = U[xi] @ V[xi] with the exporter's transformed filters
 * U[xi] [co, cin] as A panels and V[xi] as a row-major 64-column B; then every output channel's
 * tiles are transformed back (A^T M A), bias and clamp added, and written out. 2.25x (m = 2) or 4x
 * (m = 4) fewer multiplies than the direct GEMM, for the transforms' cost. Many tiles: each
 * thread runs its own range of them, block by block, in its own scratch slot; few: the three
 * phases of each block are split over the threads instead (channels, xi, output channels).
 */
typedef struct wino_job {
  const emc_delegate *d;
  const emc_op *op;
  const float *x, *u, *bias;
  float *y;
  const float *res; /* residual [co][oh][ow] or NULL */
  float *scratch;   /* slots of wino_slot_floats each */
  int64_t cin, co, h, w, oh, ow, ph, pw, m, a, tw, ntiles;
  size_t slot_floats, u_floats; /* per slot; one xi's packed filters */
  bool transposed;              /* EMC_CONV_TRANSPOSED: U^T as B panels, C^T per xi */
  int64_t t0, t1;               /* the block the phase functions work on (phase-split mode) */
  int64_t n_parts;              /* part mode: tile ranges, one per slot */
  em_minmax_params mm;          /* clamp of the output */
  em_minmax_params mm_t;        /* clamp in the output transform: mm, or none before a residual */
} wino_job;

/* Width of the padded row buffers: a block's tiles side by side, plus the windows' overlap. */
#define WINO_LDR (EM_WINO_MAX_TILES * 4 + 8)

static float *wino_v(const wino_job *j, int slot) { return j->scratch + slot * j->slot_floats; }
static float *wino_m(const wino_job *j, int slot) {
  return wino_v(j, slot) + j->a * j->a * j->cin * EM_WINO_MAX_TILES;
}

/* A run of a block's tiles within one tile row: n tiles from column tx0 of tile row ty, the
 * first being tile t of the block. */
typedef struct wino_run {
  int64_t ty, tx0, n, t;
} wino_run;

/* The runs of the block of tiles [t_begin, t_end) (at most EM_WINO_MAX_TILES); returns how many. */
static int wino_runs(const wino_job *j, int64_t t_begin, int64_t t_end, wino_run *r) {
  int nr = 0;
  for (int64_t tg = t_begin; tg < t_end; nr++) {
    const int64_t ty = tg / j->tw, tx0 = tg % j->tw;
    const int64_t n = t_end - tg < j->tw - tx0 ? t_end - tg : j->tw - tx0;
    r[nr] = (wino_run){ty, tx0, n, tg - t_begin};
    tg += n;
  }
  return nr;
}

/* Width of wino_in_block's row buffers: a block's tiles, a gap lane between runs, the overlap. */
#define WINO_LDR_IN (EM_WINO_MAX_LANES * 4 + 8)

/* Input channels [c0, c1) of the block of tiles [t0, t1) into slot s's V. The block's runs lie
 * side by side in one set of rows, a gap lane between two (the columns its window takes past the
 * first run's end), so that the transform fills its 16-lane vectors with tiles of several rows
 * of the image (a 28x28 map has runs of 7 tiles) and skips the gaps as it stores. */
static void wino_in_block(const wino_job *j, int s, int64_t t0, int64_t t1, int64_t c0,
                          int64_t c1) {
  float rows[6 * WINO_LDR_IN];
  float *v = wino_v(j, s);
  const size_t vxs = (size_t)(j->cin * EM_WINO_MAX_TILES); /* between elements xi */
  wino_run runs[EM_WINO_MAX_TILES];
  int64_t lane0[EM_WINO_MAX_TILES]; /* each run's first lane */
  uint16_t keep[EM_WINO_MAX_LANES / 16] = {0};
  const int nruns = wino_runs(j, t0, t1, runs);
  int64_t lanes = 0;
  for (int ri = 0; ri < nruns; ri++) {
    lane0[ri] = lanes;
    for (int64_t l = lanes; l < lanes + runs[ri].n; l++) keep[l / 16] |= (uint16_t)(1u << (l % 16));
    lanes += runs[ri].n + 1;
  }
  lanes--; /* no gap after the last run */
  const int64_t ldw = lanes * j->m + 2;
  /* Zero once: what lies outside the image (padding rows and columns) is at the same place for
   * every channel and no run's data lands there, and the columns of a gap lane past the overlap
   * are never written (zero, not garbage that could be a denormal and cost microcode assists in
   * lanes that are thrown away). Each channel then copies only the image's pixels. */
  for (int64_t i = 0; i < j->a; i++) memset(rows + i * WINO_LDR_IN, 0, (size_t)ldw * sizeof *rows);
  for (int64_t c = c0; c < c1; c++) {
    const float *plane = j->x + c * j->h * j->w;
    for (int ri = 0; ri < nruns; ri++) {
      const int64_t ty = runs[ri].ty, tx0 = runs[ri].tx0, n = runs[ri].n;
      /* The a input rows under these tiles, columns [ix0, ix0 + wd); inside the image: [lo, hi). */
      const int64_t ix0 = tx0 * j->m - j->pw, wd = n * j->m + 2;
      const int64_t lo = ix0 < 0 ? -ix0 : 0, hi = j->w - ix0 < wd ? j->w - ix0 : wd;
      if (hi <= lo) continue;
      for (int64_t i = 0; i < j->a; i++) {
        const int64_t iy = ty * j->m - j->ph + i;
        if (iy < 0 || iy >= j->h) continue;
        memcpy(rows + i * WINO_LDR_IN + lane0[ri] * j->m + lo, plane + iy * j->w + ix0 + lo,
               (size_t)(hi - lo) * sizeof *rows);
      }
    }
    j->d->cfg->wino_in((int)j->m, (size_t)lanes, nruns > 1 ? keep : NULL, rows, WINO_LDR_IN,
                       v + (size_t)c * EM_WINO_MAX_TILES, vxs);
  }
}

/*
 * GEMMs xi in [x0, x1) of a block of nt tiles in slot s: M[xi][co][64] = U[xi] @ V[xi].
 * Transposed (few tiles: M[xi] would be a matrix-vector product per 16 tiles): C^T[nt][co] =
 * V[xi]^T @ U[xi]^T, V read in place as a strided A (tiles as the 6-row side), U^T packed B
 * panels streamed with the kernel's B prefetch; then C^T is transposed into M[xi].
 */
static void wino_gemm_block(const wino_job *j, int s, int64_t nt, int64_t x0, int64_t x1) {
  if (j->transposed) {
    float *ct0 = wino_m(j, s) + j->a * j->a * j->co * EM_WINO_MAX_TILES;
    for (int64_t xi = x0; xi < x1; xi++) {
      float *ct = ct0 + xi * j->co * EM_WINO_MAX_TILES;
      emc_gemm g = {0};
      g.cfg = j->d->cfg, g.m = (size_t)nt, g.k = (size_t)j->cin, g.n = (size_t)j->co;
      g.a = wino_v(j, s) + (size_t)(xi * j->cin) * EM_WINO_MAX_TILES, g.a_packed = 0;
      g.a_rs = 1, g.a_ks = EM_WINO_MAX_TILES;
      g.b = j->u + (size_t)xi * j->u_floats, g.b_packed = 1;
      g.c = ct, g.ldc = (size_t)j->co;
      g.mm.min = -INFINITY, g.mm.max = INFINITY;
      emc_gemm_run(&g, NULL);
      transpose_job tj = {0};
      tj.ct = ct, tj.y = wino_m(j, s) + (size_t)(xi * j->co) * EM_WINO_MAX_TILES;
      tj.npix = nt, tj.co = j->co, tj.ldy = EM_WINO_MAX_TILES, tj.cfg = j->d->cfg;
      emc_transpose_rows(&tj, 0, j->co);
    }
    return;
  }
  for (int64_t xi = x0; xi < x1; xi++) {
    emc_gemm g = {0};
    g.cfg = j->d->cfg, g.m = (size_t)j->co, g.k = (size_t)j->cin, g.n = (size_t)nt;
    g.a = j->u + (size_t)xi * j->u_floats, g.a_packed = 1;
    g.b = wino_v(j, s) + (size_t)(xi * j->cin) * EM_WINO_MAX_TILES, g.ldb = EM_WINO_MAX_TILES;
    g.c = wino_m(j, s) + (size_t)(xi * j->co) * EM_WINO_MAX_TILES, g.ldc = EM_WINO_MAX_TILES;
    g.mm.min = -INFINITY, g.mm.max = INFINITY;
    emc_gemm_run(&g, NULL);
  }
}

/* Output channels [c0, c1) of the block of tiles [t0, t1) from slot s's M into y (bias, clamp,
 * activation). */
static void wino_out_block(const wino_job *j, int s, int64_t t0, int64_t t1, int64_t c0,
                           int64_t c1) {
  float rows[4 * WINO_LDR];
  const float *mm = wino_m(j, s);
  const size_t mxs = (size_t)(j->co * EM_WINO_MAX_TILES); /* between elements xi */
  const uint32_t act = post_act(j->op);
  wino_run runs[EM_WINO_MAX_TILES];
  const int nruns = wino_runs(j, t0, t1, runs);
  for (int64_t c = c0; c < c1; c++) {
    float *plane = j->y + c * j->oh * j->ow;
    const float bias = j->bias ? j->bias[c] : 0.0f;
    /* All the block's tiles in one call, 16 to a vector whatever rows they lie in (one call per
     * row of tiles left 7 of 16 lanes busy on a 28x28 map, 4 on a 7x7 one); then each run's m
     * output rows go to their places. */
    j->d->cfg->wino_out((int)j->m, (size_t)(t1 - t0), mm + (size_t)c * EM_WINO_MAX_TILES, mxs, bias,
                        rows, WINO_LDR, &j->mm_t);
    for (int ri = 0; ri < nruns; ri++) {
      const int64_t ty = runs[ri].ty, tx0 = runs[ri].tx0, n = runs[ri].n, t = runs[ri].t;
      const int64_t ox0 = tx0 * j->m;
      const int64_t wd = n * j->m < j->ow - ox0 ? n * j->m : j->ow - ox0;
      for (int64_t i = 0; i < j->m && ty * j->m + i < j->oh; i++) {
        const int64_t at = (c * j->oh + ty * j->m + i) * j->ow + ox0;
        const float *src = rows + i * WINO_LDR + t * j->m;
        float *dst = plane + (ty * j->m + i) * j->ow + ox0;
        if (j->res) {
          j->d->cfg->vbin[EMC_BIN_ADD]((size_t)wd, src, j->res + at, dst, &j->mm);
          if (act) j->d->cfg->vact((size_t)wd, dst, dst, act, j->op->fp);
        } else if (act)
          j->d->cfg->vact((size_t)wd, src, dst, act, j->op->fp);
        else
          memcpy(dst, src, (size_t)wd * sizeof *dst);
      }
    }
  }
}

/* Part mode: parts [begin, end), each an equal range of tiles run in blocks in its own slot. */
static void wino_parts(void *ctx, int64_t begin, int64_t end) {
  const wino_job *j = ctx;
  for (int64_t s = begin; s < end; s++) {
    const int64_t p0 = j->ntiles * s / j->n_parts, p1 = j->ntiles * (s + 1) / j->n_parts;
    for (int64_t t0 = p0; t0 < p1; t0 += EM_WINO_MAX_TILES) {
      const int64_t t1 = t0 + EM_WINO_MAX_TILES < p1 ? t0 + EM_WINO_MAX_TILES : p1;
      wino_in_block(j, (int)s, t0, t1, 0, j->cin);
      wino_gemm_block(j, (int)s, t1 - t0, 0, j->a * j->a);
      wino_out_block(j, (int)s, t0, t1, 0, j->co);
    }
  }
}

static void wino_in_part(void *ctx, int64_t begin, int64_t end) {
  const wino_job *j = ctx;
  wino_in_block(j, 0, j->t0, j->t1, begin, end);
}
static void wino_gemm_part(void *ctx, int64_t begin, int64_t end) {
  const wino_job *j = ctx;
  wino_gemm_block(j, 0, j->t1 - j->t0, begin, end);
}
static void wino_out_part(void *ctx, int64_t begin, int64_t end) {
  const wino_job *j = ctx;
  wino_out_block(j, 0, j->t0, j->t1, begin, end);
}

/* One image of a Winograd conv: x [cin, h, w] -> y [co, oh, ow]. */
void emc_run_conv_wino(const emc_delegate *d, const emc_op *op, const float *x, float *y,
                       const float *res, int64_t cin, int64_t h, int64_t w, int64_t co, int64_t oh,
                       int64_t ow, em_threadpool *pool) {
  const emc_conv_params p = emc_conv_params_of(op);
  wino_job *j = &(wino_job){0};
  const int64_t m = p.winograd;
  j->d = d, j->op = op, j->x = x, j->y = y, j->res = res;
  j->u = data_of(d, op->in[1]), j->bias = data_of(d, op->in[2]);
  j->scratch = (float *)(((uintptr_t)(d->arena + p.scratch_off) + 63) & ~(uintptr_t)63);
  j->cin = cin, j->co = co, j->h = h, j->w = w, j->oh = oh, j->ow = ow;
  j->ph = p.ph, j->pw = p.pw, j->m = m, j->a = m + 2;
  j->tw = (int64_t)emc_div_up((size_t)ow, (size_t)m);
  j->ntiles = j->tw * (int64_t)emc_div_up((size_t)oh, (size_t)m);
  j->transposed = p.transposed != 0;
  j->slot_floats = wino_slot_floats(j->a, cin, co, j->transposed);
  j->u_floats = j->transposed ? emc_div_up((size_t)co, EMC_NR_PANEL) * EMC_NR_PANEL * (size_t)cin
                              : emc_div_up((size_t)co, EMC_MR) * EMC_MR * (size_t)cin;
  j->mm = clamp_of(op);
  j->mm_t = res ? (em_minmax_params){-INFINITY, INFINITY, 0} : j->mm;
  const int64_t threads = em_threadpool_size(pool), slots = p.wino_slots;
  /* Part mode: one range of tiles per thread, no barriers, but every thread reads all the
   * filters; phase mode: each block's phases split over the threads (three barriers a block),
   * for fewer than a whole block per thread or too few slots (measured, 2 threads: 196 tiles
   * 0.65 ms in parts against 0.85 in phases; 49 tiles 0.79 against 0.49). */
  if (threads == 1 || (slots >= threads && j->ntiles >= EM_WINO_MAX_TILES * threads)) {
    j->n_parts = threads < slots ? threads : slots;
    em_parallel_for(j->n_parts > 1 ? pool : NULL, j->n_parts, wino_parts, j);
    return;
  }
  const int64_t work = j->a * j->a * cin * EM_WINO_MAX_TILES;
  for (j->t0 = 0; j->t0 < j->ntiles; j->t0 = j->t1) {
    j->t1 = j->t0 + EM_WINO_MAX_TILES < j->ntiles ? j->t0 + EM_WINO_MAX_TILES : j->ntiles;
    par_for(pool, cin, wino_in_part, j, work);
    par_for(pool, j->a * j->a, wino_gemm_part, j, work * co);
    par_for(pool, co, wino_out_part, j, work);
  }
}
