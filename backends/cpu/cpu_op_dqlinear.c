/*
 * cpu_op_dqlinear.c — dynamic int8 linear layers (EMC_OP_DQ_LINEAR): a transformer's linear with
 * int8 weights whose input PT2E quantizes per token at run time (choose_qparams_per_token_
 * asymmetric, quantize_per_token, dequantize_per_token before a linear with dequantized int8
 * weights), run as an int8 product: each row of x quantized into u8 with its own zero point and
 * scale (d->q8_rowq, the same int8 values as the three operators), then tiles of 8 rows by 32
 * channels (d->q8_dq: exact int32 sums, then (sum - zp * wsum) * (s_row * s_w) + bias), each
 * tile's rows finished while they are in cache (residual, clamp, activation as for gemm). The
 * quantized rows go to an arena tensor (out[1]) that later dq linears of the same activation read
 * instead of quantizing it again (EMC_DQL_QUANTIZED); attention's Q, K and V projections may
 * write their heads apart (EMC_DQL_HEAD_DIM), so no permute runs after them.
 *
 * Two parallel phases: the rows' quantization, then jobs of up to 64 rows by 32 channels
 * (consecutive jobs share a block of weights). Rows under one set of qparams (EMC_DQL_ROWQ: PT2E's
 * dynamic per-tensor form, as ExecuTorch's XNNPACKQuantizer writes it, or a static fake-quant
 * before the linear) take a first pass for the per-tensor minimum and maximum (dynamic) and the
 * same tile.
 */
#include "cpu_ops.h"

enum {
  DQL_MR = 8,    /* rows per tile call */
  DQL_NC = 32,   /* channels per tile call */
  DQL_CHUNK = 64 /* rows per job */
};

/* Bytes of the u8 rows of the quantized rows' tensor (the zero points and scales follow). */
static size_t dql_rows_bytes(const emc_dql_params *p) {
  return ((size_t)p->m * (size_t)((p->k + 3) / 4 * 4) + 63) / 64 * 64;
}

/* Whether t is an arena tensor that holds op's quantized rows and overlaps none of the others
 * (ids[n]). */
static bool dql_rows_ok(const emc_delegate *d, const emc_dql_params *p, const emc_rt_tensor *t,
                        const int32_t *ids, int n, char *why, size_t why_n) {
  const uint64_t need = dql_rows_bytes(p) + (uint64_t)p->m * 8;
  if (!t || t->storage != EMC_ARENA || (uint64_t)t->numel * sizeof(float) < need)
    WHY("dq linear: quantized rows not an arena tensor of at least %llu bytes",
        (unsigned long long)need);
  if (((uintptr_t)t->data - (uintptr_t)d->arena) % 64) WHY("dq linear: quantized rows unaligned");
  for (int i = 0; i < n; i++) {
    const emc_rt_tensor *o = ids[i] >= 0 ? tensor_at(d, ids[i]) : NULL;
    if (o && out_shared(t, o)) WHY("dq linear: quantized rows overlap tensor %d", ids[i]);
  }
  return true;
}

enum { DQL_TAIL = 5 }; /* words of the table after its 2 * N with EMC_DQL_ROWQ 1 or 2 */

/* The table's tail (emc_format.h): word i of the 5 after the 2 * N. */
static float tail_f32(const emc_dql_params *p, const float *tab, int i) {
  return tab[2 * p->n + i];
}
static int32_t tail_i32(const emc_dql_params *p, const float *tab, int i) {
  int32_t v;
  memcpy(&v, tab + 2 * p->n + i, sizeof v);
  return v;
}

static bool dql_tail_ok(const emc_dql_params *p, const float *tab) {
  const int32_t qmin = tail_i32(p, tab, 0), qmax = tail_i32(p, tab, 1);
  const float sc = tail_f32(p, tab, 2);
  if (qmin < -128 || qmax > 127 || qmin >= qmax || !(sc > 0.0f && sc < INFINITY)) return false;
  if (p->rowq == EMC_DQL_PER_TENSOR) return true;
  const int32_t zp = tail_i32(p, tab, 3);
  const float inv = tail_f32(p, tab, 4);
  return zp >= qmin && zp <= qmax && inv > 0.0f && inv < INFINITY;
}

bool emc_check_dq_linear(const emc_delegate *d, const emc_op *op, char *why, size_t why_n) {
  if (!params_nonneg(op, EMC_DQL_N_PARAMS, why, why_n)) return false;
  const emc_dql_params p = emc_dql_params_of(op);
  const emc_rt_tensor *x = tensor_at(d, op->in[0]), *w = tensor_at(d, op->in[1]);
  const emc_rt_tensor *bias = op->in[2] < 0 ? NULL : tensor_at(d, op->in[2]);
  const emc_rt_tensor *tab = p.table_id < 0 ? NULL : tensor_at(d, (int32_t)p.table_id);
  const emc_rt_tensor *y = tensor_at(d, op->out[0]);
  if (!x || !w || !y || !tab || (op->in[2] >= 0 && !bias)) WHY("dq linear: bad tensor id");
  if (p.m < 1 || p.k < 1 || p.n < 1 || p.k > 65536)
    WHY("dq linear: M %lld, K %lld, N %lld (each at least 1, K at most 65536)", (long long)p.m,
        (long long)p.k, (long long)p.n);
  if (p.quantized > 1) WHY("dq linear: quantized flag %lld", (long long)p.quantized);
  if (p.head_dim && (p.head_dim % 32 || p.n % p.head_dim || op->in[3] >= 0))
    WHY("dq linear: head dim %lld (a multiple of 32 dividing N %lld, no residual)",
        (long long)p.head_dim, (long long)p.n);
  if (p.head_t > 1 || (p.head_t && (!p.head_dim || op->act)))
    WHY("dq linear: transposed heads flag %lld (0 or 1, with a head dim, no activation)",
        (long long)p.head_t);
  if ((!p.quantized && x->numel != p.m * p.k) || y->numel != p.m * p.n)
    WHY("dq linear: x has %lld elements, y %lld; expected %lld and %lld", (long long)x->numel,
        (long long)y->numel, (long long)(p.m * p.k), (long long)(p.m * p.n));
  const int32_t others[3] = {op->in[0], op->in[3], op->out[0]};
  if (p.quantized ? !dql_rows_ok(d, &p, x, others + 1, 2, why, why_n)
                  : !dql_rows_ok(d, &p, tensor_at(d, op->out[1]), others, 3, why, why_n))
    return false;
  if (!is_const(w) || !is_const(tab)) WHY("dq linear: weights or channel table not constant");
  const int64_t wbytes = (p.n + 15) / 16 * ((p.k + 3) / 4) * 64;
  if (w->numel * (int64_t)sizeof(float) < wbytes)
    WHY("dq linear: weights have %lld bytes, expected %lld",
        (long long)(w->numel * (int64_t)sizeof(float)), (long long)wbytes);
  if (p.rowq > EMC_DQL_STATIC) WHY("dq linear: row quantization %lld", (long long)p.rowq);
  const int64_t words = 2 * p.n + (p.rowq ? DQL_TAIL : 0);
  if (tab->numel < words)
    WHY("dq linear: channel table has %lld words, expected %lld", (long long)tab->numel,
        (long long)words);
  if (p.rowq && !dql_tail_ok(&p, tab->data))
    WHY("dq linear: per-tensor qparams out of range (qmin < qmax within [-128, 127], a finite "
        "positive eps or scale, a zero point within the range)");
  if (bias && bias->numel != p.n) WHY("dq linear: bias has %lld elements", (long long)bias->numel);
  return check_residual(d, op, why, why_n) && check_act(op, why, why_n);
}

typedef struct dql_run {
  const emc_delegate *d;
  const emc_op *op;
  const float *x, *ws, *bias, *res;
  const int8_t *w;
  const int32_t *wsum;
  uint8_t *a;
  int32_t *za;
  float *s, *y;
  size_t m, k, n, kq, hd, ht;
  int64_t row_blocks;
  em_minmax_params mm;
  em_q8_rowt_params tq; /* EMC_DQL_PER_TENSOR / _STATIC: the rows' qparams */
  float scale;          /* ... and their scale */
} dql_run;

static void dql_quant(void *ctx, int64_t begin, int64_t end) {
  const dql_run *r = ctx;
  r->d->q8_rowq((size_t)(end - begin), r->k, r->x + (size_t)begin * r->k,
                r->a + (size_t)begin * r->kq * 4, r->kq * 4, r->za + begin, r->s + begin);
}

/* Per-tensor rows, first pass: each row's minimum (in s) and maximum (in za's bytes). */
static void dql_minmax(void *ctx, int64_t begin, int64_t end) {
  const dql_run *r = ctx;
  for (int64_t i = begin; i < end; i++) {
    float mx;
    r->d->q8_rowt(r->k, r->x + (size_t)i * r->k, NULL, NULL, r->s + i, &mx);
    memcpy(r->za + i, &mx, sizeof mx);
  }
}

/* Rows under one set of qparams (r->tq). */
static void dql_quant_fixed(void *ctx, int64_t begin, int64_t end) {
  const dql_run *r = ctx;
  for (int64_t i = begin; i < end; i++)
    r->d->q8_rowt(r->k, r->x + (size_t)i * r->k, r->a + (size_t)i * r->kq * 4, &r->tq, NULL, NULL);
}

/* The qparams of x as a whole from the rows' minima and maxima (dql_minmax). */
static void dql_tensor_qparams(dql_run *r, const float *tab, const emc_dql_params *p) {
  double mn = INFINITY, mx = -INFINITY;
  for (size_t i = 0; i < r->m; i++) { /* as the portable kernel's scan: a NaN sticks */
    float hi;
    memcpy(&hi, r->za + i, sizeof hi);
    const double lo = r->s[i];
    if (mn == mn && (lo < mn || lo != lo)) mn = lo;
    if (mx == mx && (hi > mx || hi != hi)) mx = hi;
  }
  double scale, zp;
  em_q8_tensor_qparams(mn, mx, tail_i32(p, tab, 0), tail_i32(p, tab, 1), tail_f32(p, tab, 2),
                       &scale, &zp);
  r->tq.inv = (float)(1.0 / scale), r->tq.zp = (float)zp;
  r->scale = isfinite(scale) ? (float)scale : NAN;
}

static void dql_tiles(void *ctx, int64_t begin, int64_t end) {
  const dql_run *r = ctx;
  const em_cpu_config *cfg = r->d->cfg;
  const uint32_t act = r->res ? post_act(r->op) : r->op->act;
  /* the residual in the tile's stores (the same add), unless a clamp must follow it first */
  const bool res_in_tile = r->res && r->op->act != EMC_ACT_CLAMP;
  /* GELU alone after the sums: once over a job's rows (8 KiB, in L1) instead of a call a row
   * of 32 values (MiniLM-L6's MLP up-projections, Zen 4: -2.3 %) */
  const em_f32_gelu_rows_fn gelu_rows =
      act == EMC_ACT_GELU && !r->res && !r->ht ? cfg->gelu_rows : NULL;
  for (int64_t j = begin; j < end; j++) {
    const size_t n0 = (size_t)(j / r->row_blocks) * DQL_NC;
    const size_t r0 = (size_t)(j % r->row_blocks) * DQL_CHUNK;
    const size_t nc = r->n - n0 < DQL_NC ? r->n - n0 : DQL_NC;
    const size_t r1 = r->m - r0 < DQL_CHUNK ? r->m : r0 + DQL_CHUNK;
    const int8_t *wb = r->w + n0 / 16 * r->kq * 64;
    /* row-major [M][N], head-major [N / hd][M][hd] (a tile's 32 channels in one head), or
     * transposed heads [N / hd][hd][M] (channels m apart, rows adjacent) */
    float *yb = r->ht   ? r->y + n0 / r->hd * r->m * r->hd + n0 % r->hd * r->m
                : r->hd ? r->y + n0 / r->hd * r->m * r->hd + n0 % r->hd
                        : r->y + n0;
    const size_t ys = r->ht ? 1 : r->hd ? r->hd : r->n, cs = r->ht ? r->m : 1;
    /* The next block's weights, fetched into L2 while this block's tiles run: tile t of the
     * block's ceil(m / 8) fetches the t-th slice, so the fetches spread over the whole block.
     * A model's weights come from L3 or memory each run; the hardware prefetcher left the first
     * tile of each block waiting on them (MiniLM-L6, Zen 4: the linears ran 6-7 % faster with
     * their weights read just before; with this, 1 %). */
    const size_t n1 = n0 + DQL_NC;
    const char *wn = n1 < r->n ? (const char *)(r->w + n1 / 16 * r->kq * 64) : NULL;
    const size_t wn_bytes =
        wn ? ((r->n - n1 < DQL_NC ? r->n - n1 : DQL_NC) + 15) / 16 * r->kq * 64 : 0;
    const size_t tiles = (r->m + DQL_MR - 1) / DQL_MR;
    const size_t slice = ((wn_bytes + tiles - 1) / tiles + 63) / 64 * 64;
    for (size_t i = r0; i < r1; i += DQL_MR) {
      const size_t np = r1 - i < DQL_MR ? r1 - i : DQL_MR;
      const size_t b0 = i / DQL_MR * slice, b1 = b0 + slice < wn_bytes ? b0 + slice : wn_bytes;
      for (size_t b = b0; b < b1; b += 64) __builtin_prefetch(wn + b, 0, 2);
      r->d->q8_dq(np, nc, r->kq, r->a + i * r->kq * 4, r->kq * 4, wb, r->wsum + n0, r->ws + n0,
                  r->bias ? r->bias + n0 : NULL, res_in_tile ? r->res + i * r->n + n0 : NULL,
                  r->za + i, r->s + i, yb + i * ys, ys, cs);
      if (gelu_rows) continue; /* after the job's tiles */
      for (size_t row = i; row < i + np && !r->ht && ((r->res && !res_in_tile) || act); row++) {
        float *yr = yb + row * ys;
        if (r->res && !res_in_tile)
          cfg->vbin[EMC_BIN_ADD](nc, yr, r->res + row * r->n + n0, yr, &r->mm);
        if (act) cfg->vact(nc, yr, yr, act, r->op->fp);
      }
    }
    if (gelu_rows) gelu_rows(r1 - r0, nc, yb + r0 * ys, ys);
  }
}

em_status emc_run_dq_linear(const emc_delegate *d, const emc_op *op, em_threadpool *pool) {
  const emc_dql_params p = emc_dql_params_of(op);
  const float *tab = d->t[p.table_id].data;
  dql_run r = {.d = d, .op = op, .m = (size_t)p.m, .k = (size_t)p.k, .n = (size_t)p.n};
  r.kq = (r.k + 3) / 4, r.hd = (size_t)p.head_dim, r.ht = (size_t)p.head_t;
  r.x = data_of(d, op->in[0]), r.y = data_of(d, op->out[0]);
  r.w = (const int8_t *)(const void *)data_of(d, op->in[1]);
  r.bias = data_of(d, op->in[2]), r.res = data_of(d, op->in[3]);
  r.ws = tab, r.wsum = (const int32_t *)(const void *)(tab + r.n);
  r.a = (uint8_t *)(void *)data_of(d, p.quantized ? op->in[0] : op->out[1]);
  r.za = (int32_t *)(void *)(r.a + dql_rows_bytes(&p));
  r.s = (float *)(void *)(r.za + r.m);
  r.row_blocks = (int64_t)emc_div_up(r.m, DQL_CHUNK);
  r.mm = clamp_of(op);
  if (!p.quantized && p.rowq == EMC_DQL_PER_TOKEN)
    par_for(pool, (int64_t)r.m, dql_quant, &r, (int64_t)(r.m * r.k) * 4);
  else if (!p.quantized) {
    r.tq.qmin = (float)tail_i32(&p, tab, 0), r.tq.qmax = (float)tail_i32(&p, tab, 1);
    if (p.rowq == EMC_DQL_PER_TENSOR) {
      par_for(pool, (int64_t)r.m, dql_minmax, &r, (int64_t)(r.m * r.k));
      dql_tensor_qparams(&r, tab, &p);
    } else {
      r.tq.inv = tail_f32(&p, tab, 4), r.tq.zp = (float)tail_i32(&p, tab, 3);
      r.scale = tail_f32(&p, tab, 2);
    }
    par_for(pool, (int64_t)r.m, dql_quant_fixed, &r, (int64_t)(r.m * r.k) * 2);
    for (size_t i = 0; i < r.m; i++) r.za[i] = (int32_t)r.tq.zp + 128, r.s[i] = r.scale;
  }
  par_for(pool, (int64_t)emc_div_up(r.n, DQL_NC) * r.row_blocks, dql_tiles, &r,
          (int64_t)(r.m * r.n * r.k));
  return EM_OK;
}
