/*
 * cpu_op_chain.c — operators fused at init and run as one chain in bands of output rows, the
 * tensors inside the chain built band by band in blocks that L2 holds: a depthwise conv with the
 * 1x1 convs around it (MobileNets' inverted residual blocks), and an im2col conv with the max
 * pool that alone reads its output (a network stem). emc_fuse_chain finds them, emc_run_chain
 * runs them (cpu_internal.h). On smaller maps, with a pool, the same three convs run split by
 * the wide tensor's channels instead (xsl_*, below).
 */
#include "cpu_ops.h"

/* ---- depthwise convs with the 1x1 convs around them, in bands of rows ------------------- */

/*
 * MobileNets' inverted residual blocks widen the activations 6x with a 1x1 conv, run a depthwise
 * conv over the wide tensor and narrow it again with another 1x1 conv. On large maps the wide
 * tensors are several MB (MobileNetV2: 96 x 112 x 112 floats, 4.8 MB): each conv writes its
 * output out past L2 and the next reads it back, at the memory's speed. Run as a chain, each
 * thread takes bands of the depthwise conv's output rows: it computes just the rows of the
 * wide tensor those windows read (recomputing a row or two at each band's edges) into a block of
 * the wide tensor's own buffer that L2 holds, the depthwise conv over them into a block of its
 * output's buffer, then the projection's rows of the block's output. The tensors inside the
 * chain are never whole, so no other operator may read them, and no tensor the chain writes may
 * share memory with one it still reads (emc_fuse_chain and emc_run_chain check).
 */
/* A tensor inside a chain, its least size: MobileNetV2's 1.2-4.8 MB ones ran 1.1-1.2x faster
 * fused (2 threads), its 0.3-0.6 MB ones, which stay in L2 anyway, up to 1.5x slower. */
#define XDW_MIN_BYTES (1u << 20)
/* An expansion's output, its least size to join a chain: a band recomputes the rows it shares
 * with the next (stride 1: two of every ~9), which only big tensors repay. On Zen 4 (per op,
 * alternating with EMBER_CPU_NO_FUSE=1) MobileNetV2's 4.8 MB expansion ran 1.11-1.13x faster
 * in its chain, its 1.8 MB ones 0.82-0.93x as fast; the dw + 1x1 pair behind such an expansion
 * (no rows recomputed) still gained. */
#define XDW_EXPAND_MIN_BYTES (3u << 20)
/* A thread's blocks of wide rows and depthwise output rows: L2 holds them. */
#define XDW_BAND_BYTES (512u << 10)

typedef struct xdw_job {
  const emc_delegate *d;
  const emc_op *a, *b, *c; /* expansion (or NULL), depthwise, projection (or NULL) */
  const float *x;          /* the chain's input [cin][h][w] */
  float *e;                /* a: the wide tensor's buffer, a block of e_floats per slot */
  float *dbuf;             /* c: the depthwise output's buffer, a block of d_floats per slot */
  float *y;                /* the chain's output: c's [co][oh][ow], else b's [ce][oh][ow] */
  em_dw_params q;          /* the depthwise conv over its whole input */
  int64_t cin, ce, co, bands, e_floats, d_floats;
  int n_slots;
  atomic_flag busy[EMC_GEMM_MAX_SLOTS];
} xdw_job;

/* A serial GEMM of a 1x1 conv op over npix columns of B (ldb apart) into C (ldc apart). */
static void band_gemm(const emc_delegate *d, const emc_op *op, size_t m, size_t k, size_t npix,
                      const float *b, size_t ldb, float *c, size_t ldc, const float *res) {
  emc_gemm g;
  gemm_init(&g, d);
  g.m = m, g.k = k, g.n = npix;
  g.a = data_of(d, op->in[1]), g.a_packed = 1;
  const int64_t pairs_id = emc_conv_params_of(op).pairs_id;
  g.a_pairs = pairs_id >= 0 ? (const uint32_t *)data_of(d, (int32_t)pairs_id) : NULL;
  g.b = b, g.ldb = ldb, g.b_packed = 0;
  g.c = c, g.ldc = ldc, g.res = res, g.ldr = ldc;
  g.bias_m = data_of(d, op->in[2]), g.mm = clamp_of(op), g.act = post_act(op), g.fp = op->fp;
  emc_gemm_run(&g, NULL);
}

/* Bands [begin, end) of the chain, in the blocks of the slot this thread claims. */
static void xdw_bands(void *ctx, int64_t begin, int64_t end) {
  xdw_job *j = ctx;
  const emc_delegate *d = j->d;
  const emc_op *b = j->b;
  const int slot =
      emc_claim_flag_from(j->busy, j->n_slots, em_threadpool_thread_index() % j->n_slots);
  const float *wb = data_of(d, b->in[1]), *bb = data_of(d, b->in[2]);
  const float *res = j->c ? data_of(d, j->c->in[3]) : NULL;
  const em_minmax_params mm = clamp_of(b);
  const int64_t hw = j->q.h * j->q.w, khw = j->q.kh * j->q.kw, out_plane = j->q.oh * j->q.ow;
  for (int64_t band = begin; band < end; band++) {
    em_dw_params sub;
    int64_t oy0, iy0;
    dw_band(&j->q, j->bands, band, &sub, &oy0, &iy0);
    /* the depthwise conv's input rows [iy0, iy0 + sub.h): the expansion's, built here, or the
     * chain's input in place */
    const float *src = j->x + iy0 * j->q.w;
    int64_t src_plane = hw;
    if (j->a) {
      src_plane = sub.h * j->q.w;
      float *e = j->e + (int64_t)slot * j->e_floats;
      if (src_plane > 0)
        band_gemm(d, j->a, (size_t)j->ce, (size_t)j->cin, (size_t)src_plane, src, (size_t)hw, e,
                  (size_t)src_plane, NULL);
      src = e;
    }
    /* its output rows [oy0, oy0 + sub.oh): into the block for the projection, or in place */
    const int64_t npix = sub.oh * j->q.ow;
    float *dst = j->c ? j->dbuf + (int64_t)slot * j->d_floats : j->y + oy0 * j->q.ow;
    const int64_t dst_plane = j->c ? npix : out_plane;
    for (int64_t ch = 0; ch < j->ce; ch++) {
      float *out = dst + ch * dst_plane;
      d->cfg->dwconv(&sub, src + ch * src_plane, wb + ch * khw, bb ? bb[ch] : 0.0f, out, &mm);
      if (post_act(b)) d->cfg->vact((size_t)npix, out, out, b->act, b->fp);
    }
    if (j->c)
      band_gemm(d, j->c, (size_t)j->co, (size_t)j->ce, (size_t)npix, dst, (size_t)npix,
                j->y + oy0 * j->q.ow, (size_t)out_plane, res ? res + oy0 * j->q.ow : NULL);
  }
  atomic_flag_clear(&j->busy[slot]);
}

/* ---- the same three convs on small maps, split by the wide tensor's channels ----------- */

/*
 * On maps whose wide tensor L2 holds anyway (MobileNetV2's 28x28 and 14x14 blocks, 0.2-0.6 MB)
 * the three convs ran one after the other, each split over the threads its own way: the
 * expansion and the depthwise conv by channels, the projection by output channels, so each
 * thread's projection read every channel of the depthwise output, half of it from the other
 * core, and the next block's depthwise conv then wrote over lines the other core still held
 * (2 threads, Zen 4: a 14x14 depthwise conv 22 us the first time, 13 us run again at once).
 *
 * So such a projection sums its depth in two fixed halves of the wide channels (emc_xsl_plan;
 * the edge on a whole 6-row weight panel, and on a 16-plane block where the depthwise conv takes
 * 16 planes at once): a part per half (the first's with the bias), each into the wide tensor's
 * rows of its half (the depthwise conv has read them), then, over the output channels, the parts
 * added into the output and the residual, clamp and activation last (the output is written only
 * there: it may be the residual's or the block input's buffer). That is the projection's
 * arithmetic whatever runs it, so every way below gives the same bits at every thread count:
 * with one or two threads the three convs run as one chain, a half of the wide channels at a
 * time through all three on one thread (xsl_slices: no wide row crosses a core); with more, or
 * with chains off, one by one, the projection's parts on the whole pool (emc_run_xsl_proj).
 * MobileNetV2 on Zen 4 (per-operator time, the lowest of 6 interleaved rounds' medians): 2
 * threads 4.04 -> 3.75 ms (its 14x14 blocks 140-145 -> 120-121 us), 1 thread 7.18 -> 7.03 ms
 * (each half's wide rows still in L2 for the depthwise conv); 4 slices (a chain for 4 threads)
 * were 1-4 us a block slower than 2 at 2 threads.
 */
/* Slices; the largest plane of the wide tensor (bigger: each thread's expansion reads all of
 * the block's input, which the convs before split by pixels, so half of it from the other core:
 * MobileNetV3-Small's 56x56 block 79 -> 89 us at 2 threads, its 28x28 one unchanged). */
enum { XSL_MAX = 2, XSL_MAX_PLANE = 28 * 28 };

typedef struct xsl_job {
  const emc_delegate *d;
  const emc_op *a, *b, *c; /* expansion, depthwise conv, projection */
  const float *x, *res;    /* the chain's input [cin][hw]; the projection's residual or NULL */
  float *e, *dw, *y;       /* the wide tensor [ce][hw], the depthwise output [ce][npix], y */
  int64_t cin, ce, co, hw, npix;
  bool t;                    /* the projection transposed: its parts [npix][co] (run_conv_t) */
  int64_t align;             /* slice edges: multiples of EMC_MR, and of 16 for dwconv_c16 */
  int64_t edge[XSL_MAX + 1]; /* slice s: wide channels [edge[s], edge[s + 1]) */
  int slices;
} xsl_job;

/* The job of the three convs from op i; slices 0 (xsl_edges sets them). */
static xsl_job xsl_job_of(const emc_delegate *d, uint32_t i) {
  const emc_op *a = &d->ops[i], *b = a + 1, *c = a + 2;
  const emc_rt_tensor *xt = &d->t[a->in[0]], *et = &d->t[a->out[0]], *dt = &d->t[b->out[0]];
  const emc_rt_tensor *yt = &d->t[c->out[0]];
  xsl_job j = {.d = d, .a = a, .b = b, .c = c, .x = xt->data, .res = data_of(d, c->in[3])};
  j.e = et->data, j.dw = dt->data, j.y = yt->data;
  j.cin = xt->sizes[1], j.ce = et->sizes[1], j.co = yt->sizes[1];
  j.hw = et->sizes[2] * et->sizes[3], j.npix = dt->sizes[2] * dt->sizes[3];
  j.t = emc_conv_params_of(c).transposed != 0;
  const emc_conv_params bp = emc_conv_params_of(b);
  const em_dw_params q = dw_params_of(&bp, et->sizes[2], et->sizes[3], dt->sizes[2], dt->sizes[3]);
  j.align = d->cfg->dwconv_c16 && em_dw_c16_fits(&q) ? 48 : EMC_MR;
  return j;
}

/* Slice edges for n slices (multiples of j->align), or false when a slice would be empty or
 * too small to hold its part of the projection's output in its wide rows. */
static bool xsl_edges(xsl_job *j, int n) {
  j->slices = n;
  for (int s = 0; s <= n; s++) {
    j->edge[s] = s == n ? j->ce : j->ce * s / n / j->align * j->align;
    if (s && j->edge[s] <= j->edge[s - 1]) return false;
    if (s && (j->edge[s] - j->edge[s - 1]) * j->hw < j->co * j->npix) return false;
  }
  return true;
}

/* Slice s's part of the projection (on the pool, or NULL): depth [edge[s], edge[s + 1]) of the
 * packed weights' panels (s = 0: with the bias) into the slice's wide rows: [co][npix], or
 * transposed [npix][co] (the depthwise output as a strided A, the weights as B panels). */
static void xsl_part(const xsl_job *j, int s, em_threadpool *pool) {
  const emc_delegate *d = j->d;
  const int64_t c0 = j->edge[s];
  const float *w = data_of(d, j->c->in[1]), *bias = s ? NULL : data_of(d, j->c->in[2]);
  emc_gemm g;
  gemm_init(&g, d);
  g.amx_ws = NULL; /* the FMA tile's sums, whatever the pool */
  g.k = (size_t)(j->edge[s + 1] - c0);
  g.c = j->e + c0 * j->hw;
  g.mm = (em_minmax_params){-INFINITY, INFINITY, 0};
  if (j->t) {
    g.m = (size_t)j->npix, g.n = (size_t)j->co;
    g.a = j->dw + c0 * j->npix, g.a_packed = 0, g.a_rs = 1, g.a_ks = g.m;
    g.b = w + c0 * EMC_NR_PANEL, g.b_packed = 1, g.b_kp = (size_t)j->ce;
    g.ldc = g.n, g.bias_n = bias;
  } else {
    g.m = (size_t)j->co, g.n = (size_t)j->npix;
    g.a = w + c0 * EMC_MR, g.a_packed = 1, g.a_kp = (size_t)j->ce;
    g.b = j->dw + c0 * j->npix, g.ldb = g.n, g.b_packed = 0;
    g.ldc = g.n, g.bias_m = bias;
  }
  emc_gemm_run(&g, pool);
}

/* Transposed parts, pixels [begin, end): added in slice order into part 0, then (without a
 * residual) the clamp and activation, as the transposed conv's GEMM applies them. */
static void xsl_sum_t(void *ctx, int64_t begin, int64_t end) {
  const xsl_job *j = ctx;
  const em_cpu_config *cfg = j->d->cfg;
  const em_minmax_params none = {-INFINITY, INFINITY, 0}, mm = clamp_of(j->c);
  const size_t n = (size_t)((end - begin) * j->co);
  float *p0 = j->e + begin * j->co;
  for (int s = 1; s < j->slices; s++)
    cfg->vbin[EMC_BIN_ADD](n, p0, j->e + j->edge[s] * j->hw + begin * j->co, p0,
                           s == j->slices - 1 && !j->res ? &mm : &none);
  if (!j->res && post_act(j->c)) cfg->vact(n, p0, p0, j->c->act, j->c->fp);
}

/* Output channels [begin, end): the parts added in slice order into y, then the residual, clamp
 * and activation as the projection's GEMM applies them. */
static void xsl_sum(void *ctx, int64_t begin, int64_t end) {
  const xsl_job *j = ctx;
  const em_cpu_config *cfg = j->d->cfg;
  const em_minmax_params none = {-INFINITY, INFINITY, 0}, mm = clamp_of(j->c);
  const size_t n = (size_t)j->npix;
  for (int64_t ch = begin; ch < end; ch++) {
    float *y = j->y + ch * j->npix;
    for (int s = 1; s < j->slices; s++)
      cfg->vbin[EMC_BIN_ADD](n, s == 1 ? j->e + ch * j->npix : y,
                             j->e + j->edge[s] * j->hw + ch * j->npix, y,
                             s == j->slices - 1 && !j->res ? &mm : &none);
    if (j->res) cfg->vbin[EMC_BIN_ADD](n, y, j->res + ch * j->npix, y, &mm);
    if (post_act(j->c)) cfg->vact(n, y, y, j->c->act, j->c->fp);
  }
}

/* The parts' sum into y (after the projection's GEMMs; pool or NULL). */
static void xsl_finish(xsl_job *j, em_threadpool *pool) {
  const int64_t work = j->co * j->npix * j->slices;
  if (!j->t) {
    par_for_static(pool, j->co, xsl_sum, j, work);
    return;
  }
  par_for_static(pool, j->npix, xsl_sum_t, j, work);
  transpose_job tj = {j->e,   j->y,      j->npix,        j->co,          j->npix,
                      j->res, j->d->cfg, clamp_of(j->c), post_act(j->c), j->c->fp};
  par_for(pool, j->co, emc_transpose_rows, &tj, j->co * j->npix);
}

/* Slices [begin, end) through the three convs, each on the calling thread. */
static void xsl_slices(void *ctx, int64_t begin, int64_t end) {
  const xsl_job *j = ctx;
  const emc_delegate *d = j->d;
  const emc_op *a = j->a;
  const float *ba = data_of(d, a->in[2]);
  for (int64_t s = begin; s < end; s++) {
    const int64_t c0 = j->edge[s], nc = j->edge[s + 1] - c0;
    emc_gemm g; /* the expansion's rows [c0, c0 + nc): the same sums as its whole GEMM */
    gemm_init(&g, d);
    g.m = (size_t)nc, g.k = (size_t)j->cin, g.n = (size_t)j->hw;
    g.a = data_of(d, a->in[1]) + c0 * j->cin, g.a_packed = 1;
    g.b = j->x, g.ldb = g.n, g.b_packed = 0;
    g.c = j->e + c0 * j->hw, g.ldc = g.n;
    g.bias_m = ba ? ba + c0 : NULL, g.mm = clamp_of(a), g.act = post_act(a), g.fp = a->fp;
    emc_gemm_run(&g, NULL);
    emc_dwconv_channels(d, j->b, c0, c0 + nc);
    xsl_part(j, (int)s, NULL);
  }
}

/* A plain 1x1 conv: one group, stride 1, no padding, weights as they are, no input scale. */
static bool is_1x1(const emc_op *o) {
  const emc_conv_params p = emc_conv_params_of(o);
  return o->kind == EMC_OP_CONV2D && !p.depthwise && p.groups == 1 && p.kh == 1 && p.kw == 1 &&
         p.sh == 1 && p.sw == 1 && !p.ph && !p.pw && !p.transposed && !p.winograd &&
         p.in_scale_id < 0 && p.q8_id < 0 && o->out[1] < 0;
}

/* The same, transposed (EMC_CONV_TRANSPOSED: B panels of weights) or not, without bf16 pairs. */
static bool is_1x1_t(const emc_op *o) {
  const emc_conv_params p = emc_conv_params_of(o);
  if (!p.transposed) return is_1x1(o);
  return o->kind == EMC_OP_CONV2D && !p.depthwise && p.groups == 1 && p.kh == 1 && p.kw == 1 &&
         p.sh == 1 && p.sw == 1 && !p.ph && !p.pw && !p.winograd && p.in_scale_id < 0 &&
         p.q8_id < 0 && p.pairs_id < 0 && o->out[1] < 0;
}

/* A depthwise conv without a residual or plane means. */
static bool is_dw(const emc_op *o) {
  return o->kind == EMC_OP_CONV2D && emc_conv_params_of(o).depthwise &&
         emc_conv_params_of(o).q8_id < 0 && o->in[3] < 0 && o->out[1] < 0;
}

/* Tensor t lies in the arena, one image, at least XDW_MIN_BYTES, and only op `reader` reads it. */
static bool chain_inner(const emc_delegate *d, int32_t t, uint32_t reader) {
  const emc_rt_tensor *x = &d->t[t];
  if (x->storage != EMC_ARENA || x->sizes[0] != 1 ||
      (uint64_t)x->numel * sizeof(float) < XDW_MIN_BYTES)
    return false;
  return emc_alone_reads(d, t, reader);
}

/* Whether the bound tensors s and t share any byte. */
static bool overlap(const emc_delegate *d, int32_t s, int32_t t) {
  const uint8_t *a0 = (const uint8_t *)d->t[s].data, *b0 = (const uint8_t *)d->t[t].data;
  const int64_t an = d->t[s].numel * (int64_t)sizeof(float),
                bn = d->t[t].numel * (int64_t)sizeof(float);
  return a0 && b0 && a0 < b0 + bn && b0 < a0 + an;
}

/* What a chain of a (or NULL), b and c (or NULL) writes (its inner tensors in blocks or
 * slices, its output) shares no memory with what it reads later: the memory plan may give a
 * tensor that dies inside the chain's span to one born there, and a caller may bind one buffer
 * twice. x: the chain's input. */
static bool chain_disjoint(const emc_delegate *d, const emc_op *a, const emc_op *b, const emc_op *c,
                           int32_t x) {
  int32_t ts[5]; /* the tensors it writes, then those it only reads */
  int nt = 0, nw;
  if (a) ts[nt++] = a->out[0];
  ts[nt++] = b->out[0];
  if (c) ts[nt++] = c->out[0];
  nw = nt;
  ts[nt++] = x;
  if (c && c->in[3] >= 0) ts[nt++] = c->in[3];
  for (int p = 0; p < nw; p++)
    for (int q = p + 1; q < nt; q++)
      if (overlap(d, ts[p], ts[q])) return false;
  return true;
}

/* Whether ops i, i + 1, i + 2 are a 1x1 expansion (no residual), a depthwise conv and a 1x1
 * projection, each alone reading the one before's output, on one image whose wide tensors are
 * too small for the banded chain (under XDW_MIN_BYTES), every tensor in the arena and what the
 * three write apart from what they read later: a sliced projection (emc_xsl_plan). */
static bool xsl_fits(const emc_delegate *d, uint32_t i) {
  const emc_op *o = d->ops;
  if (i + 2 >= d->n_ops || !is_1x1(&o[i]) || o[i].in[3] >= 0 || !is_dw(&o[i + 1]) ||
      !is_1x1_t(&o[i + 2]) || o[i + 1].in[0] != o[i].out[0] || o[i + 2].in[0] != o[i + 1].out[0] ||
      d->t[o[i].in[0]].sizes[1] <= SMALLC_MAX_CIN) /* (such an expansion runs on conv_smallc) */
    return false;
  if (d->t[o[i].out[0]].sizes[2] * d->t[o[i].out[0]].sizes[3] > XSL_MAX_PLANE) return false;
  for (int k = 0; k < 2; k++) {
    const int32_t t = o[i + k].out[0];
    const emc_rt_tensor *x = &d->t[t];
    if (x->sizes[0] != 1 || (uint64_t)x->numel * sizeof(float) >= XDW_MIN_BYTES ||
        !emc_alone_reads(d, t, i + k + 1))
      return false;
  }
  /* what it writes apart from all else it touches: the wide and depthwise tensors, then the
   * output, which only the last pass writes, element by element over the residual's (so it may
   * be that tensor) and after the input was read; tensors bound at execute (the method's inputs
   * and outputs) lie outside the arena */
  const int32_t ts[5] = {o[i].out[0], o[i + 1].out[0], o[i + 2].out[0], o[i].in[0], o[i + 2].in[3]};
  for (int p = 0; p < 3; p++)
    for (int q = p + 1; q < 5; q++) {
      if (ts[q] < 0 || d->t[ts[p]].storage != EMC_ARENA || d->t[ts[q]].storage != EMC_ARENA)
        continue;
      const bool in_place = p == 2 && q == 4 && d->t[ts[p]].data == d->t[ts[q]].data;
      if (!in_place && overlap(d, ts[p], ts[q])) return false;
    }
  return d->t[ts[0]].storage == EMC_ARENA && d->t[ts[1]].storage == EMC_ARENA;
}

void emc_xsl_plan(const emc_delegate *d) {
  if (d->cfg->amx) return; /* the AMX path sums big GEMMs its own way: left as it is */
  for (uint32_t i = 0; i + 2 < d->n_ops; i++) {
    if (!xsl_fits(d, i)) continue;
    xsl_job j = xsl_job_of(d, i);
    for (int n = XSL_MAX; n >= 2; n--)
      if (xsl_edges(&j, n)) {
        d->xsl[i + 2] = (uint8_t)n;
        i += 2;
        break;
      }
  }
}

void emc_run_xsl_proj(const emc_delegate *d, uint32_t k, em_threadpool *pool) {
  xsl_job j = xsl_job_of(d, k - 2);
  (void)xsl_edges(&j, d->xsl[k]); /* held at plan time */
  for (int s = 0; s < j.slices; s++) xsl_part(&j, s, pool);
  xsl_finish(&j, pool);
}

/* The three convs from i as one chain, a slice at a time (at most d->xsl[i + 2] threads), or
 * false (nothing run): one by one. */
static bool xsl_run(const emc_delegate *d, uint32_t i, em_threadpool *pool) {
  xsl_job j = xsl_job_of(d, i);
  (void)xsl_edges(&j, d->xsl[i + 2]);
  if (em_threadpool_size(pool) > j.slices) return false;
  em_parallel_for_static(pool, j.slices, xsl_slices, &j);
  xsl_finish(&j, pool);
  return true;
}

static int cpool_fuse(const emc_delegate *d, uint32_t i);
static bool cpool_run(const emc_delegate *d, uint32_t i, em_threadpool *pool);

int emc_fuse_chain(const emc_delegate *d, uint32_t i) {
  const emc_op *ops = d->ops;
  if (ops[i].kind == EMC_OP_GEMM) return emc_attn_fuse(d, i);
  if (ops[i].kind == EMC_OP_BINARY) return emc_q8_pw_fuse_scale(d, i);
  if (i + 1 < d->n_ops && ops[i + 1].kind == EMC_OP_UNARY) return emc_q8_pw_fuse_lut(d, i);
  if (ops[i].kind == EMC_OP_UNARY) return emc_q8_pw_fuse_fq(d, i);
  if (i + 1 < d->n_ops && ops[i + 1].kind == EMC_OP_MAXPOOL2D) return cpool_fuse(d, i);
  if (i + 2 < d->n_ops && d->xsl[i + 2]) return 3;
  uint32_t bi = i;
  if (is_1x1(&ops[i]) && ops[i].in[3] < 0 && i + 1 < d->n_ops && is_dw(&ops[i + 1]) &&
      ops[i + 1].in[0] == ops[i].out[0] && d->t[ops[i].in[0]].sizes[1] > SMALLC_MAX_CIN &&
      (uint64_t)d->t[ops[i].out[0]].numel * sizeof(float) >= XDW_EXPAND_MIN_BYTES &&
      chain_inner(d, ops[i].out[0], i + 1))
    bi = i + 1;
  else if (!is_dw(&ops[i]) || d->t[ops[i].in[0]].sizes[0] != 1)
    return 0;
  const emc_op *b = &ops[bi];
  const bool proj = bi + 1 < d->n_ops && is_1x1(&ops[bi + 1]) && ops[bi + 1].in[0] == b->out[0] &&
                    chain_inner(d, b->out[0], bi + 1);
  const int n = (int)(bi - i) + 1 + proj;
  return n >= 2 ? n : 0;
}

bool emc_run_chain(const emc_delegate *d, uint32_t i, int n, em_threadpool *pool) {
  const emc_op *ops = d->ops;
  if (ops[i].kind == EMC_OP_GEMM) return emc_attn_run(d, i, pool);
  if (n == 2 && ops[i + 1].kind == EMC_OP_MAXPOOL2D) return cpool_run(d, i, pool);
  if (n == 2 && ops[i].kind == EMC_OP_BINARY) return emc_q8_pw_run_scaled(d, i, pool);
  if (n == 2 && ops[i + 1].kind == EMC_OP_UNARY) return emc_q8_pw_run_lut(d, i, pool);
  if (ops[i].kind == EMC_OP_UNARY) return emc_q8_pw_run_fq(d, i, n, pool);
  if (n == 3 && d->xsl[i + 2]) return xsl_run(d, i, pool);
  xdw_job j;
  j.d = d;
  /* the chain starts with a 1x1 conv, or the depthwise one */
  j.a = emc_conv_params_of(&ops[i]).depthwise ? NULL : &ops[i];
  j.b = j.a ? &ops[i + 1] : &ops[i];
  j.c = (j.a ? n == 3 : n == 2) ? j.b + 1 : NULL;
  const emc_op *a = j.a, *b = j.b, *c = j.c;
  if (!chain_disjoint(d, a, b, c, ops[i].in[0])) return false;
  const emc_rt_tensor *xt = &d->t[ops[i].in[0]], *bin = &d->t[b->in[0]], *bout = &d->t[b->out[0]];
  j.x = xt->data, j.e = a ? bin->data : NULL, j.dbuf = c ? bout->data : NULL;
  j.y = c ? d->t[c->out[0]].data : bout->data;
  const int64_t h = bin->sizes[2], w = bin->sizes[3];
  const emc_conv_params bp = emc_conv_params_of(b);
  j.q = dw_params_of(&bp, h, w, bout->sizes[2], bout->sizes[3]);
  j.cin = xt->sizes[1], j.ce = bin->sizes[1], j.co = c ? d->t[c->out[0]].sizes[1] : 0;
  const int64_t threads = em_threadpool_size(pool), oh = j.q.oh, ow = j.q.ow;
  const int64_t span = (j.q.kh - 1) * j.q.dh + 1;
  /* Output rows per band: the most whose blocks fit the band budget (at least 4), then as many
   * bands as a multiple of the threads. */
  int64_t rows = 4;
  while (rows < oh && ((a ? (rows * j.q.sh + span) * w : 0) + (c ? rows * ow : 0)) * j.ce *
                              (int64_t)sizeof(float) <=
                          (int64_t)XDW_BAND_BYTES)
    rows++;
  j.n_slots = (int)(threads < EMC_GEMM_MAX_SLOTS ? threads : EMC_GEMM_MAX_SLOTS);
  /* Smaller bands until the slots' blocks fit in the tensors' own buffers (else the operators
   * run one after the other). */
  for (j.bands = (int64_t)emc_div_up((size_t)oh, (size_t)(threads * rows)) * threads;;
       j.bands += threads) {
    if (j.bands > oh) return false;
    const int64_t most = (int64_t)emc_div_up((size_t)oh, (size_t)j.bands);
    int64_t in_rows = (most - 1) * j.q.sh + span;
    if (in_rows > h) in_rows = h; /* rows past the plane are padding, never stored */
    j.e_floats = a ? (int64_t)emc_div_up((size_t)(in_rows * w * j.ce), 16) * 16 : 0;
    j.d_floats = c ? (int64_t)emc_div_up((size_t)(most * ow * j.ce), 16) * 16 : 0;
    if ((!a || j.e_floats * j.n_slots <= bin->numel) &&
        (!c || j.d_floats * j.n_slots <= bout->numel))
      break;
  }
  for (int s = 0; s < j.n_slots; s++) atomic_flag_clear(&j.busy[s]);
  em_parallel_for_static(pool, j.bands, xdw_bands, &j);
  return true;
}

/* ---- a conv with the max pool after it, in bands of pooled rows ---------------------------- */

/*
 * A network stem (ResNet: a 7x7 stride-2 conv to 64 x 112 x 112, then a 3x3 stride-2 max pool)
 * writes several MB that the pool reads straight back, both past L2 and, on a model whose weights
 * stream through the caches, the conv's writes to memory that has gone cold. Run as a chain, each
 * thread takes bands of the pool's output rows: the conv computes just the rows their windows
 * read into a block of its output's own buffer that L2 holds, through the same padded input and
 * im2col strips as emc_run_conv (the same sums, so the same bits), then the pool runs over the
 * block; rows two bands share move from one band's block to the next's. The conv's output is
 * never whole, so only the pool may read it. ResNet-18's stem and pool: 4-11 % faster at 1
 * thread, 2-8 % at 2 (paired, one process; 512 KiB blocks were slower at 2 threads, 128 KiB
 * ones, a band a row of the pool, slower at both).
 */
#define CPOOL_BAND_BYTES (256u << 10)

typedef struct cpool_job {
  const emc_delegate *d;
  const emc_op *cv, *mp;
  im2col_job ij; /* the conv over its whole input, padded input built */
  float *blk;    /* the conv output's buffer: a block of blk_floats per slot */
  float *pack;   /* the GEMMs' strip buffers, pack_floats per slot */
  float *y;      /* the pool's output [co][poh][pow] */
  int64_t co, kg, rows, bands, maxrows, poh, pow;
  size_t blk_floats, pack_floats;
  int n_slots;
  atomic_flag busy[EMC_GEMM_MAX_SLOTS];
  int64_t held[EMC_GEMM_MAX_SLOTS][3]; /* per slot: the conv rows its block holds, their band */
} cpool_job;

/* The conv output rows [*r0, *r1) that pooled rows [py0, py1) read. */
static void cpool_rows(const emc_op *mp, int64_t oh, int64_t py0, int64_t py1, int64_t *r0,
                       int64_t *r1) {
  const emc_pool2d_params p = emc_pool2d_params_of(mp);
  const int64_t sh = p.sh, ph = p.ph, kh = p.kh;
  const int64_t a = py0 * sh - ph, b = (py1 - 1) * sh - ph + kh;
  *r0 = a < 0 ? 0 : a;
  *r1 = b > oh ? oh : b;
}

/* Bands [begin, end) of the chain, in the block of the slot this thread claims. A band that
 * follows the last one its slot's block holds takes the rows the two share (the windows'
 * overlap) from the block instead of computing them again: a thread's own run of bands goes in
 * order, so only a band taken from another thread's run pays for them. */
static void cpool_bands(void *ctx, int64_t begin, int64_t end) {
  cpool_job *j = ctx;
  const emc_delegate *d = j->d;
  const emc_op *cv = j->cv, *mp = j->mp;
  const int slot =
      emc_claim_flag_from(j->busy, j->n_slots, em_threadpool_thread_index() % j->n_slots);
  float *blk = j->blk + (size_t)slot * j->blk_floats;
  const int64_t oh = j->ij.q.oh, ow = j->ij.q.ow, plane = j->maxrows * ow;
  const emc_pool2d_params mpp = emc_pool2d_params_of(mp);
  for (int64_t band = begin; band < end; band++) {
    const int64_t py0 = band * j->rows, py1 = py0 + j->rows < j->poh ? py0 + j->rows : j->poh;
    int64_t r0, r1;
    cpool_rows(mp, oh, py0, py1, &r0, &r1);
    /* rows [r0, prev1) of the block's band, the one before this: moved to the block's top */
    const int64_t prev0 = j->held[slot][0], prev1 = j->held[slot][1];
    const int64_t keep = j->held[slot][2] == band - 1 && prev1 > r0 && r0 >= prev0 ? prev1 - r0 : 0;
    if (keep > 0)
      for (int64_t c = 0; c < j->co; c++)
        memmove(blk + c * plane, blk + c * plane + (r0 - prev0) * ow,
                (size_t)(keep * ow) * sizeof *blk);
    im2col_job ij = j->ij;
    ij.pix0 = (r0 + keep) * ow;
    emc_gemm g;
    gemm_init(&g, d);
    const int64_t fresh = r1 - r0 - keep; /* rows the conv computes for this band */
    g.m = (size_t)j->co, g.k = (size_t)j->kg, g.n = (size_t)((fresh > 0 ? fresh : 0) * ow);
    g.a = data_of(d, cv->in[1]), g.a_packed = 1;
    g.c = blk + keep * ow, g.ldc = (size_t)plane;
    g.bias_m = data_of(d, cv->in[2]);
    g.mm = clamp_of(cv), g.act = post_act(cv), g.fp = cv->fp;
    g.pack_b = emc_im2col_strip_padded, g.pack_ctx = &ij;
    g.pack = j->pack + (size_t)slot * j->pack_floats;
    if (g.n > 0) emc_gemm_run(&g, NULL);
    j->held[slot][0] = r0, j->held[slot][1] = r1, j->held[slot][2] = band;
    /* the pool over the block: rows r0.. of the conv's output as a plane of r1 - r0 rows */
    em_pool_params q = pool_geom_of(&mpp, r1 - r0, ow, py1 - py0, j->pow);
    q.ph = mpp.ph + r0 - py0 * mpp.sh;
    for (int64_t c = 0; c < j->co; c++) {
      float *y = j->y + c * j->poh * j->pow + py0 * j->pow;
      d->cfg->maxpool(&q, blk + c * plane, y);
      if (mp->act) d->cfg->vact((size_t)((py1 - py0) * j->pow), y, y, mp->act, mp->fp);
    }
  }
  atomic_flag_clear(&j->busy[slot]);
}

/* An im2col conv (one group, stride 1 or 2 both ways, undilated, nothing fused in) whose output
 * only the separable max pool after it reads: the chain cpool_run runs. */
static int cpool_fuse(const emc_delegate *d, uint32_t i) {
  const emc_op *cv = &d->ops[i], *mp = &d->ops[i + 1];
  const emc_conv_params cp = emc_conv_params_of(cv);
  if (cv->kind != EMC_OP_CONV2D || cp.depthwise || cp.groups != 1 || cp.winograd || cp.transposed ||
      cp.in_scale_id >= 0 || cp.pairs_id >= 0 || cp.q8_id >= 0 || cv->in[3] >= 0 ||
      cv->out[1] >= 0 || cp.dh != 1 || cp.dw != 1 || cp.sh != cp.sw || (cp.sw != 1 && cp.sw != 2) ||
      cp.kh * cp.kw < 2)
    return 0;
  const emc_rt_tensor *x = &d->t[cv->in[0]], *c = &d->t[cv->out[0]], *p = &d->t[mp->out[0]];
  if (mp->in[0] != cv->out[0] || !pool_separable(mp, c->sizes[3], p->sizes[3]) ||
      !chain_inner(d, cv->out[0], i + 1) ||
      emc_smallc_fits(d, cv, x->sizes[1], 1, x->sizes[1] * cp.kh * cp.kw))
    return 0;
  return 2;
}

/* Runs conv i and max pool i + 1 as one (cpool_fuse), or returns false (nothing run) when the
 * scratch or the conv's buffer cannot hold the blocks or the pool's output overlaps them. */
static bool cpool_run(const emc_delegate *d, uint32_t i, em_threadpool *pool) {
  const emc_op *cv = &d->ops[i], *mp = &d->ops[i + 1];
  const emc_conv_params p = emc_conv_params_of(cv);
  const emc_rt_tensor *xt = &d->t[cv->in[0]], *ct = &d->t[cv->out[0]], *pt = &d->t[mp->out[0]];
  if (overlap(d, cv->out[0], mp->out[0]) || overlap(d, cv->in[0], mp->out[0]) ||
      overlap(d, cv->in[0], cv->out[0]))
    return false;
  cpool_job j;
  memset(&j, 0, sizeof j);
  j.d = d, j.cv = cv, j.mp = mp;
  const int64_t cin = xt->sizes[1], oh = ct->sizes[2], ow = ct->sizes[3];
  j.co = ct->sizes[1], j.kg = cin * p.kh * p.kw;
  j.poh = pt->sizes[2], j.pow = pt->sizes[3];
  j.ij = emc_im2col_of(d, &p, xt->data, NULL, xt->sizes[2], xt->sizes[3], oh, ow, j.kg);
  const size_t pad_floats = emc_padded_floats(&j.ij, cin);
  if (!pad_floats) return false;
  const int64_t threads = em_threadpool_size(pool);
  j.n_slots = (int)(threads < EMC_GEMM_MAX_SLOTS ? threads : EMC_GEMM_MAX_SLOTS);
  /* Pooled rows per band: the most whose conv rows fit the band budget (at least one). */
  const emc_pool2d_params mpp = emc_pool2d_params_of(mp);
  const int64_t psh = mpp.sh, pkh = mpp.kh;
  j.rows = 1;
  while (j.rows < j.poh &&
         j.co * (j.rows * psh + pkh) * ow * (int64_t)sizeof(float) <= (int64_t)CPOOL_BAND_BYTES)
    j.rows++;
  j.bands = (int64_t)emc_div_up((size_t)j.poh, (size_t)j.rows);
  j.maxrows = (j.rows - 1) * psh + pkh;
  j.blk_floats = emc_div_up((size_t)(j.co * j.maxrows * ow), 16) * 16;
  if (j.blk_floats * (size_t)j.n_slots > (size_t)ct->numel) return false;
  j.blk = ct->data;
  /* The scratch: the slots' strip buffers, then the padded input. */
  j.pack_floats = emc_gemm_pack_floats(d->cfg, (size_t)j.kg, 1);
  float *col = (float *)(d->arena + p.scratch_off);
  if ((j.pack_floats * (size_t)j.n_slots + pad_floats + 16) * sizeof(float) >
      (size_t)p.scratch_nbytes)
    return false;
  j.pack = col;
  j.ij.padded =
      (float *)(((uintptr_t)(col + j.pack_floats * (size_t)j.n_slots) + 63) & ~(uintptr_t)63);
  j.y = pt->data;
  par_for_mem(pool, cin, emc_pad_planes, &j.ij, (int64_t)pad_floats);
  for (int k = 0; k < j.n_slots; k++) {
    atomic_flag_clear(&j.busy[k]);
    j.held[k][0] = j.held[k][1] = 0, j.held[k][2] = -2;
  }
  em_parallel_for_static(pool, j.bands, cpool_bands, &j);
  return true;
}
