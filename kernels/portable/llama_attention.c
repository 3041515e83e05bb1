/*
 * llama_attention.c — the LLM custom ops of namespace llama:: that attention
 * with a KV cache needs: llama::custom_sdpa.out and llama::update_cache.out
 * (executorch extension/llm/custom_ops, op_sdpa.cpp / op_update_cache.cpp).
 *
 * Layout is [B, S, H, D] (sequence at dim 1) for q, the caches and out. The
 * query at row s sits at absolute position start_pos + s and attends over
 * cache rows [0, start_pos + S); with is_causal only rows <= start_pos + s.
 * An optional 2-D mask [S, >= start_pos + S] is added to the scores (a bool
 * mask keeps True positions); it cannot be combined with is_causal. Query
 * heads map to kv head h / (Hq / Hkv) (grouped-query attention). The default
 * scale is 1 / sqrt(D). A query row whose every key is masked gives zeros.
 * f32 with contiguous head dims runs one task per (batch, query head) over
 * ctx->pool (dot products, softmax, axpys; see sdpa_f32_heads); other f32
 * layouts run two GEMMs per (batch, head, query chunk); f16/bf16 widen to f32;
 * otherwise a scalar reference path in double. An f16 KV cache: f32 query and out with f16
 * key / value caches (an Ember extension of the schema, which wants one dtype), computed as the
 * f32 op on the caches' f32 values: by the optimized d16 task straight from the f16 rows where
 * it applies, else on f32 copies of the visible rows. A decode row (one query row, head dim 64, no
 * mask) takes the optimized layer's split task where it has one: the keys in chunks over the pool,
 * each kv head's rows read once for all its query heads, the chunks merged (sdpa_split). The head
 * task is plain C here (llama_attention.h); AVX2+FMA and AVX-512F bodies of it come from the
 * optional optimized layer when its table has them (kernels/optimized/,
 * portable/fast_config.h).
 */
#include "portable/fast_config.h"
#include "portable/llama_attention.h"
#include "portable/nn_util.h"

/* Scores scratch per chunk of query rows, in floats. */
#define SDPA_SCORES_BUDGET (1 << 18)

/* Softmax of row[0..n) in place (masked -inf entries become 0; all -inf gives all 0). */
static void softmax_row(float *row, int64_t n) {
  float mx = -INFINITY;
  for (int64_t j = 0; j < n; j++) mx = row[j] > mx ? row[j] : mx;
  if (mx == -INFINITY) {
    for (int64_t j = 0; j < n; j++) row[j] = 0.0f;
    return;
  }
  double sum = 0.0;
  for (int64_t j = 0; j < n; j++) {
    row[j] = expf(row[j] - mx);
    sum += row[j];
  }
  float inv = (float)(1.0 / sum);
  for (int64_t j = 0; j < n; j++) row[j] *= inv;
}

static em_status sdpa_f32(em_kernel_ctx *ctx, const sdpa_args *a) {
  int64_t nk = a->n_keys;
  int64_t chunk = nk > 0 ? SDPA_SCORES_BUDGET / nk : a->S;
  if (chunk < 1) chunk = 1;
  if (chunk > a->S) chunk = a->S;
  chunk = nn_temp_fit(ctx, (nk ? nk : 1) * (int64_t)sizeof(float), chunk);
  float *sc = nn_temp(ctx, (chunk ? chunk : 1) * (nk ? nk : 1), sizeof(float));
  NN_CHECK_ALLOC(ctx, sc);
  int64_t rep = a->Hq / a->Hkv;
  float *qp = a->q->data, *kp = a->k->data, *vp = a->v->data, *op = a->out->data;
  for (int64_t b = 0; b < a->B; b++)
    for (int64_t h = 0; h < a->Hq; h++) {
      int64_t hk = h / rep;
      for (int64_t s0 = 0; s0 < a->S; s0 += chunk) {
        int64_t m = a->S - s0 < chunk ? a->S - s0 : chunk;
        nn_mat qm = {qp + sdpa_off4(a->q, b, s0, h, 0), a->q->strides[1], a->q->strides[3]};
        nn_mat kt = {kp + sdpa_off4(a->k, b, 0, hk, 0), a->k->strides[3], a->k->strides[1]};
        EM_KTRY(nn_sgemm(ctx, m, nk, a->D, qm, kt, (nn_mat){sc, nk, 1}, false));
        for (int64_t i = 0; i < m; i++) {
          float *row = sc + i * nk;
          int64_t vis = sdpa_keys_for(a, s0 + i);
          for (int64_t j = 0; j < nk; j++)
            row[j] = j < vis ? (float)(row[j] * a->scale + sdpa_mask_at(a, s0 + i, j)) : -INFINITY;
          softmax_row(row, nk);
        }
        nn_mat vm = {vp + sdpa_off4(a->v, b, 0, hk, 0), a->v->strides[1], a->v->strides[3]};
        nn_mat om = {op + sdpa_off4(a->out, b, s0, h, 0), a->out->strides[1], a->out->strides[3]};
        EM_KTRY(nn_sgemm(ctx, m, a->Dv, nk, (nn_mat){sc, nk, 1}, vm, om, false));
      }
    }
  return EM_OK;
}

/*
 * Fast f32 path (every last dim contiguous): one task per (batch, query head),
 * spread over ctx->pool. A task handles its query rows one at a time: scores
 * against kv head h / (Hq / Hkv) rows [0, visible) as 8-lane dot products,
 * softmax, then out = sum_j p_j * v_j as contiguous axpys over D. Only the
 * cache rows [0, start_pos + S) are read. Each task owns n_keys floats of
 * scores, carved from the temp allocator before the loop (no allocation in
 * workers). The body is SDPA_HEAD_BODY (llama_attention.h).
 */
static void sdpa_heads__scalar(void *arg, int64_t begin, int64_t end) {
  const sdpa_job *j = arg;
  SDPA_HEAD_BODY
}

/* The optimized d16 head task when it applies to these arguments, else NULL. */
static em_parallel_fn pick_sdpa_heads_d16(const sdpa_args *a) {
  const em_portable_fast_config *cfg = em_portable_fast_config_get();
  if (cfg->sdpa_heads_d16 && !a->mask && a->D == a->Dv && a->D % 16 == 0 && a->D <= 256)
    return cfg->sdpa_heads_d16;
  return NULL;
}

/* The optimized layer's head task for these (f32) arguments, else the plain C one. */
static em_parallel_fn pick_sdpa_heads(const sdpa_args *a) {
  const em_portable_fast_config *cfg = em_portable_fast_config_get();
  em_parallel_fn d16 = pick_sdpa_heads_d16(a);
  if (d16) return d16;
  return cfg->sdpa_heads ? cfg->sdpa_heads : sdpa_heads__scalar;
}

static bool inner_contiguous(const sdpa_args *a) {
  return a->q->strides[3] == 1 && a->k->strides[3] == 1 && a->v->strides[3] == 1 &&
         a->out->strides[3] == 1;
}

/* Least keys of a chunk in the split decode, and chunks per thread (a thread the host slows
 * leaves the other some to take): one thread splits 96 keys or more in two, two threads 101
 * keys (SmolLM2 at position 100) in three. */
#define SDPA_SPLIT_MIN_KEYS   48
#define SDPA_SPLIT_PER_THREAD 2

/*
 * Decode (one query row, D == Dv, 64 or 128, no mask, contiguous head dims) through the optimized
 * layer's split task: the keys in chunks over the pool, every query head of a kv head in one
 * pass over its rows (an f16 cache row converted once for them, not once per query head), then
 * the chunks' partials merged here: with m the largest chunk maximum, out = sum_c e^(m_c - m)
 * o_c / sum_c e^(m_c - m) l_c (one chunk: o / l). Returns false, having written nothing, where
 * it does not apply, the scratch does not fit, or a chunk's scores have no maximum (every one
 * -inf or NaN): the head path then decides.
 */
static bool sdpa_split(em_kernel_ctx *ctx, const sdpa_args *a) {
  const em_portable_fast_config *cfg = em_portable_fast_config_get();
  if (!cfg->sdpa_split || a->S != 1 || a->mask || (a->D != 64 && a->D != 128) || a->Dv != a->D ||
      !inner_contiguous(a) || a->n_keys < 1)
    return false;
  em_threadpool *pool = ctx ? ctx->pool : NULL;
  int64_t chunks = (int64_t)em_threadpool_size(pool) * SDPA_SPLIT_PER_THREAD;
  const int64_t most = (a->n_keys + SDPA_SPLIT_MIN_KEYS - 1) / SDPA_SPLIT_MIN_KEYS;
  if (chunks > most) chunks = most;
  const int64_t clen = (a->n_keys + chunks - 1) / chunks;
  chunks = (a->n_keys + clen - 1) / clen; /* none empty */
  const int64_t tasks = a->B * chunks, D = a->D;
  size_t mark = nn_temp_mark(ctx);
  float *scores = nn_temp(ctx, tasks * a->Hq * clen, sizeof(float));
  float *part = nn_temp(ctx, tasks * a->Hq * SDPA_PART, sizeof(float));
  if (!scores || !part) {
    nn_temp_release(ctx, mark);
    return false;
  }
  sdpa_split_job j = {a, scores, part, chunks, clen};
  em_parallel_for(pool, tasks, cfg->sdpa_split, &j);
  bool ok = true;
  for (int64_t i = 0; i < tasks * a->Hq && ok; i++)
    ok = part[i * SDPA_PART + SDPA_SPLIT_M] > -INFINITY;
  for (int64_t b = 0; b < a->B && ok; b++)
    for (int64_t h = 0; h < a->Hq; h++) {
      const float *p0 = part + (b * chunks * a->Hq + h) * SDPA_PART;
      float m = p0[SDPA_SPLIT_M], l = 0.0f, w[SDPA_SPLIT_M];
      for (int64_t c = 1; c < chunks; c++) {
        const float mc = p0[c * a->Hq * SDPA_PART + SDPA_SPLIT_M];
        m = mc > m ? mc : m;
      }
      for (int64_t d = 0; d < D; d++) w[d] = 0.0f;
      for (int64_t c = 0; c < chunks; c++) {
        const float *pc = p0 + c * a->Hq * SDPA_PART;
        const float e = chunks == 1 ? 1.0f : expf(pc[SDPA_SPLIT_M] - m);
        l += e * pc[SDPA_SPLIT_M + 1];
        for (int64_t d = 0; d < D; d++) w[d] += e * pc[d];
      }
      const float inv = 1.0f / l;
      float *o = (float *)a->out->data + sdpa_off4(a->out, b, 0, h, 0);
      for (int64_t d = 0; d < D; d++) o[d] = w[d] * inv;
    }
  nn_temp_release(ctx, mark);
  return ok;
}

/* EM_ERR_MEMORY_ALLOCATION_FAILED (nothing logged) when the scores do not fit the scratch. */
static em_status sdpa_f32_heads(em_kernel_ctx *ctx, const sdpa_args *a) {
  if (sdpa_split(ctx, a)) return EM_OK;
  int64_t tasks = a->B * a->Hq, rows = a->S >= SDPA_QB ? SDPA_QB : 1;
  float *scratch = nn_temp(ctx, tasks * rows * (a->n_keys ? a->n_keys : 1), sizeof(float));
  if (!scratch) return EM_ERR_MEMORY_ALLOCATION_FAILED;
  sdpa_job j = {a, scratch, rows};
  em_parallel_for(ctx ? ctx->pool : NULL, tasks,
                  a->kv_f16 ? pick_sdpa_heads_d16(a) : pick_sdpa_heads(a), &j);
  return EM_OK;
}

static em_status sdpa_generic(em_kernel_ctx *ctx, const sdpa_args *a) {
  int64_t nk = a->n_keys, rep = a->Hq / a->Hkv;
  double *w = nn_temp(ctx, nk ? nk : 1, sizeof(double));
  NN_CHECK_ALLOC(ctx, w);
  int dt = a->q->dtype;
  for (int64_t b = 0; b < a->B; b++)
    for (int64_t h = 0; h < a->Hq; h++)
      for (int64_t s = 0; s < a->S; s++) {
        int64_t vis = sdpa_keys_for(a, s), hk = h / rep;
        double mx = -INFINITY, sum = 0.0;
        for (int64_t j = 0; j < nk; j++) {
          double acc = 0.0;
          if (j < vis)
            for (int64_t d = 0; d < a->D; d++)
              acc += em_load_f64(a->q->data, dt, sdpa_off4(a->q, b, s, h, d)) *
                     em_load_f64(a->k->data, a->k->dtype, sdpa_off4(a->k, b, j, hk, d));
          w[j] = j < vis ? acc * a->scale + sdpa_mask_at(a, s, j) : -INFINITY;
          mx = w[j] > mx ? w[j] : mx;
        }
        for (int64_t j = 0; j < nk; j++) {
          w[j] = mx == -INFINITY ? 0.0 : exp(w[j] - mx);
          sum += w[j];
        }
        for (int64_t d = 0; d < a->Dv; d++) {
          double acc = 0.0;
          for (int64_t j = 0; j < nk; j++)
            if (w[j] != 0.0)
              acc += w[j] * em_load_f64(a->v->data, a->v->dtype, sdpa_off4(a->v, b, j, hk, d));
          em_store_f64(a->out->data, dt, sdpa_off4(a->out, b, s, h, d), sum > 0 ? acc / sum : 0.0);
        }
      }
  return EM_OK;
}

/* A [B, rows, H, D] f32 copy of the first `rows` sequence rows of t, with its tensor header. */
typedef struct wide4 {
  em_tensor t;
  int64_t sizes[4], strides[4];
} wide4;

static bool widen4(em_kernel_ctx *ctx, const em_tensor *src, int64_t rows, wide4 *w) {
  for (int i = 0; i < 4; i++) w->sizes[i] = i == 1 ? rows : src->sizes[i];
  w->strides[3] = 1;
  for (int i = 2; i >= 0; i--) w->strides[i] = w->strides[i + 1] * w->sizes[i + 1];
  int64_t n = w->sizes[0] * w->strides[0];
  float *p = nn_temp(ctx, n, sizeof(float));
  if (!p) return false;
  int64_t i = 0;
  for (int64_t b = 0; b < w->sizes[0]; b++)
    for (int64_t s = 0; s < rows; s++)
      for (int64_t h = 0; h < w->sizes[2]; h++)
        for (int64_t d = 0; d < w->sizes[3]; d++)
          p[i++] = (float)em_load_f64(src->data, src->dtype, sdpa_off4(src, b, s, h, d));
  w->t = *src;
  w->t.data = p;
  w->t.dtype = EM_DTYPE_F32;
  w->t.sizes = w->sizes;
  w->t.strides = w->strides;
  w->t.numel = n;
  return true;
}

/*
 * f16/bf16: run the f32 path on widened copies of q and the visible cache rows,
 * rounding the result once. EM_ERR_MEMORY_ALLOCATION_FAILED (nothing logged)
 * when the copies do not fit, so the caller can use the reference loops.
 */
static em_status sdpa_widened(em_kernel_ctx *ctx, const sdpa_args *a0) {
  size_t mark = nn_temp_mark(ctx);
  wide4 q, k, v, o;
  if (!widen4(ctx, a0->q, a0->S, &q) || !widen4(ctx, a0->k, a0->n_keys, &k) ||
      !widen4(ctx, a0->v, a0->n_keys, &v) || !widen4(ctx, a0->q, a0->S, &o)) {
    nn_temp_release(ctx, mark);
    return EM_ERR_MEMORY_ALLOCATION_FAILED;
  }
  sdpa_args a = *a0;
  a.q = &q.t;
  a.k = &k.t;
  a.v = &v.t;
  a.out = &o.t;
  EM_KTRY(sdpa_f32(ctx, &a));
  const float *op = o.t.data;
  int64_t i = 0;
  for (int64_t b = 0; b < a.B; b++)
    for (int64_t s = 0; s < a.S; s++)
      for (int64_t h = 0; h < a.Hq; h++)
        for (int64_t d = 0; d < a.Dv; d++)
          em_store_f64(a0->out->data, a0->out->dtype, sdpa_off4(a0->out, b, s, h, d), op[i++]);
  nn_temp_release(ctx, mark);
  return EM_OK;
}

/*
 * f32 query and out with f16 caches: the optimized d16 task reads the f16 rows itself; otherwise
 * f32 copies of the visible cache rows go through the f32 paths. EM_ERR_MEMORY_ALLOCATION_FAILED
 * (nothing logged) when the copies do not fit.
 */
static em_status sdpa_kv_f16(em_kernel_ctx *ctx, const sdpa_args *a0) {
  if (inner_contiguous(a0) && pick_sdpa_heads_d16(a0)) {
    em_status st = sdpa_f32_heads(ctx, a0);
    if (st != EM_ERR_MEMORY_ALLOCATION_FAILED) return st;
  }
  size_t mark = nn_temp_mark(ctx);
  wide4 k, v;
  if (!widen4(ctx, a0->k, a0->n_keys, &k) || !widen4(ctx, a0->v, a0->n_keys, &v)) {
    nn_temp_release(ctx, mark);
    return EM_ERR_MEMORY_ALLOCATION_FAILED;
  }
  sdpa_args a = *a0;
  a.k = &k.t;
  a.v = &v.t;
  a.kv_f16 = false;
  em_status st = EM_ERR_MEMORY_ALLOCATION_FAILED;
  if (inner_contiguous(&a)) st = sdpa_f32_heads(ctx, &a);
  if (st == EM_ERR_MEMORY_ALLOCATION_FAILED) st = sdpa_f32(ctx, &a);
  nn_temp_release(ctx, mark);
  return st;
}

/*
 * llama::custom_sdpa.out(Tensor query, Tensor key, Tensor value, SymInt start_pos,
 *   Tensor? attn_mask=None, float drpout_p=0., bool is_causal=False, float? scale=None, *,
 *   Tensor(a!) out)
 */
em_status em_llama_custom_sdpa_out(em_kernel_ctx *ctx, em_evalue **args) {
  sdpa_args a;
  a.q = EM_ARG_TENSOR(args, 0);
  a.k = EM_ARG_TENSOR(args, 1);
  a.v = EM_ARG_TENSOR(args, 2);
  a.out = EM_ARG_TENSOR(args, 8);
  a.mask = EM_ARG_IS_NONE(args, 4) ? NULL : EM_ARG_TENSOR(args, 4);
  double dropout;
  NN_CHECK_TENSOR(ctx, a.q, "query");
  NN_CHECK_TENSOR(ctx, a.k, "key");
  NN_CHECK_TENSOR(ctx, a.v, "value");
  EM_KCHECK(ctx, a.out, "out must be a tensor");
  EM_KCHECK(ctx, EM_ARG_IS_NONE(args, 4) || a.mask, "attn_mask must be a tensor or None");
  EM_KCHECK(ctx, em_arg_int(args[3], &a.start) && a.start >= 0,
            "start_pos must be a non-negative int");
  EM_KCHECK(ctx, em_arg_double(args[5], &dropout) && dropout == 0.0, "dropout is not supported");
  EM_KCHECK(ctx, em_arg_bool(args[6], &a.causal), "is_causal must be a bool");
  EM_KCHECK(ctx, a.q->dim == 4 && a.k->dim == 4 && a.v->dim == 4,
            "query, key and value must be 4-D [B, S, H, D]");
  a.kv_f16 = a.q->dtype == EM_DTYPE_F32 && a.k->dtype == EM_DTYPE_F16;
  EM_KCHECK(ctx,
            em_dtype_is_float(a.q->dtype) && (a.k->dtype == a.q->dtype || a.kv_f16) &&
                a.v->dtype == a.k->dtype && a.out->dtype == a.q->dtype,
            "query, key, value and out must share a float dtype (or: f32 query and out, f16 key "
            "and value)");
  a.B = a.q->sizes[0];
  a.S = a.q->sizes[1];
  a.Hq = a.q->sizes[2];
  a.D = a.q->sizes[3];
  a.L = a.k->sizes[1];
  a.Hkv = a.k->sizes[2];
  a.Dv = a.v->sizes[3];
  EM_KCHECK(ctx,
            a.k->sizes[0] == a.B && a.v->sizes[0] == a.B && a.k->sizes[3] == a.D &&
                a.v->sizes[1] == a.L && a.v->sizes[2] == a.Hkv,
            "key/value shapes do not match the query");
  EM_KCHECK(ctx, a.Dv == a.D, "value head dim must equal the query head dim");
  EM_KCHECK(ctx, a.Hkv > 0 && a.Hq % a.Hkv == 0, "query heads %lld not a multiple of kv heads %lld",
            (long long)a.Hq, (long long)a.Hkv);
  a.n_keys = a.start + a.S;
  EM_KCHECK(ctx, a.n_keys <= a.L, "start_pos + seq_len = %lld exceeds the cache length %lld",
            (long long)a.n_keys, (long long)a.L);
  if (a.mask) {
    EM_KCHECK(ctx, !a.causal, "attn_mask and is_causal cannot be set at the same time");
    EM_KCHECK(ctx, a.mask->dim == 2 && a.mask->sizes[0] == a.S && a.mask->sizes[1] >= a.n_keys,
              "attn_mask must be [seq_len, >= start_pos + seq_len]");
    EM_KCHECK(ctx, em_dtype_is_float(a.mask->dtype) || a.mask->dtype == EM_DTYPE_BOOL,
              "attn_mask must be float or bool");
    EM_KCHECK(ctx, a.mask->data || a.mask->numel == 0, "attn_mask has no data");
  }
  if (EM_ARG_IS_NONE(args, 7))
    a.scale = 1.0 / sqrt((double)a.D);
  else
    EM_KCHECK(ctx, em_arg_double(args[7], &a.scale), "scale must be a float or None");
  EM_KCHECK(ctx, a.out->dim == 4, "out must be 4-D");
  EM_KTRY(em_resize_out(ctx, a.out, a.q->sizes, 4));
  if (a.out->numel == 0) return EM_OK;
  if (a.kv_f16) {
    em_status st = sdpa_kv_f16(ctx, &a);
    if (st != EM_ERR_MEMORY_ALLOCATION_FAILED) return st;
    return sdpa_generic(ctx, &a);
  }
  if (a.q->dtype == EM_DTYPE_F32) {
    if (inner_contiguous(&a)) {
      em_status st = sdpa_f32_heads(ctx, &a);
      if (st != EM_ERR_MEMORY_ALLOCATION_FAILED) return st;
    }
    return sdpa_f32(ctx, &a);
  }
  if (a.q->dtype == EM_DTYPE_F16 || a.q->dtype == EM_DTYPE_BF16) {
    em_status st = sdpa_widened(ctx, &a);
    if (st != EM_ERR_MEMORY_ALLOCATION_FAILED) return st;
  }
  return sdpa_generic(ctx, &a);
}

/*
 * llama::update_cache.out(Tensor value, Tensor(a!) cache, SymInt start_pos, *, Tensor(b!) out)
 * Writes value [B, S, H, D] into cache[:, start_pos : start_pos + S]. `out` is a placeholder
 * the exporter needs and is left untouched.
 */
em_status em_llama_update_cache_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *v = EM_ARG_TENSOR(args, 0), *c = EM_ARG_TENSOR(args, 1);
  int64_t start;
  NN_CHECK_TENSOR(ctx, v, "value");
  NN_CHECK_TENSOR(ctx, c, "cache");
  EM_KCHECK(ctx, em_arg_int(args[2], &start) && start >= 0, "start_pos must be a non-negative int");
  EM_KCHECK(ctx, v->dim == 4 && c->dim == 4, "value and cache must be 4-D");
  EM_KCHECK(ctx, v->dtype == c->dtype, "value and cache dtypes differ (%s vs %s)",
            em_dtype_name(v->dtype), em_dtype_name(c->dtype));
  EM_KCHECK(ctx,
            v->sizes[0] == c->sizes[0] && v->sizes[2] == c->sizes[2] && v->sizes[3] == c->sizes[3],
            "value and cache must agree in dims 0, 2 and 3");
  EM_KCHECK(ctx, start + v->sizes[1] <= c->sizes[1],
            "start_pos %lld + seq_len %lld exceeds the cache length %lld", (long long)start,
            (long long)v->sizes[1], (long long)c->sizes[1]);
  size_t es = em_dtype_size(v->dtype);
  int64_t D = v->sizes[3];
  bool rows = v->strides[3] == 1 && c->strides[3] == 1;
  for (int64_t b = 0; b < v->sizes[0]; b++)
    for (int64_t s = 0; s < v->sizes[1]; s++)
      for (int64_t h = 0; h < v->sizes[2]; h++) {
        char *dst = (char *)c->data + sdpa_off4(c, b, start + s, h, 0) * (int64_t)es;
        const char *src = (const char *)v->data + sdpa_off4(v, b, s, h, 0) * (int64_t)es;
        if (rows) {
          memmove(dst, src, (size_t)D * es);
          continue;
        }
        for (int64_t d = 0; d < D; d++)
          memmove(dst + d * c->strides[3] * (int64_t)es, src + d * v->strides[3] * (int64_t)es, es);
      }
  return EM_OK;
}

/*
 * llama::sdpa_with_kv_cache.out(Tensor query, Tensor key, Tensor value, Tensor(a!) key_cache,
 *   Tensor(b!) value_cache, SymInt start_pos, SymInt seq_len, Tensor? attn_mask=None,
 *   float drpout_p=0., bool is_causal=False, float? scale=None, *, Tensor(c!) out)
 * The legacy fused form: update_cache for key and value, then custom_sdpa over the caches.
 */
em_status em_llama_sdpa_with_kv_cache_out(em_kernel_ctx *ctx, em_evalue **args) {
  em_tensor *q = EM_ARG_TENSOR(args, 0);
  int64_t seq_len;
  NN_CHECK_TENSOR(ctx, q, "query");
  EM_KCHECK(ctx, em_arg_int(args[6], &seq_len) && q->dim == 4 && seq_len == q->sizes[1],
            "seq_len must equal the query's sequence length");
  em_evalue *uk[4] = {args[1], args[3], args[5], args[3]};
  em_evalue *uv[4] = {args[2], args[4], args[5], args[4]};
  EM_KTRY(em_llama_update_cache_out(ctx, uk));
  EM_KTRY(em_llama_update_cache_out(ctx, uv));
  em_evalue *sd[10] = {args[0], args[3], args[4],  args[5],  args[7],
                       args[8], args[9], args[10], args[11], args[11]};
  return em_llama_custom_sdpa_out(ctx, sd);
}
