/*
 * elementwise_util.c — the strided iterator, ATen dtype rules, the generic
 * elementwise driver and the reduction planner declared in ew_util.h.
 *
 * ew_map has three loops: the all-f32 row path (op->f32_row over whole
 * innermost runs, no index arithmetic per element), the typed f32 loop and
 * the generic one (double / int64 per element). A row kernel must give the
 * bits of op->f32, so which loop runs never changes a result.
 */
#include "portable/ew_util.h"
#include "portable/shape_util.h"

/* Merges dim d into the current outer dim where every operand is linear across the pair. */
static void coalesce(ew_iter *it) {
  if (it->dim <= 1) return;
  int32_t out = 0;
  for (int32_t d = 1; d < it->dim; d++) {
    if (it->sizes[d] == 1) continue;
    bool ok = true;
    for (int k = 0; k < it->n_ops && ok; k++)
      ok = it->strides[k][out] == it->strides[k][d] * it->sizes[d];
    if (it->sizes[out] == 1 || ok) {
      it->sizes[out] = it->sizes[out] == 1 ? it->sizes[d] : it->sizes[out] * it->sizes[d];
    } else {
      out++;
      it->sizes[out] = it->sizes[d];
    }
    for (int k = 0; k < it->n_ops; k++) it->strides[k][out] = it->strides[k][d];
  }
  it->dim = out + 1;
}

static void iter_start(ew_iter *it) {
  it->numel = 1;
  for (int32_t d = 0; d < it->dim; d++) {
    it->idx[d] = 0;
    it->numel *= it->sizes[d];
  }
  for (int k = 0; k < it->n_ops; k++) it->off[k] = 0;
  if (it->numel > 0) coalesce(it);
}

void ew_iter_init(ew_iter *it, const int64_t *sizes, int32_t dim, const em_tensor *const *ts,
                  int n_ops) {
  it->dim = dim;
  it->n_ops = n_ops;
  for (int32_t d = 0; d < dim; d++) it->sizes[d] = sizes[d];
  for (int k = 0; k < n_ops; k++) {
    const em_tensor *t = ts[k];
    for (int32_t d = 0; d < dim; d++) {
      int32_t td = t ? d - (dim - t->dim) : -1;
      it->strides[k][d] = (td >= 0 && t->sizes[td] != 1) ? t->strides[td] : 0;
    }
  }
  iter_start(it);
}

void ew_iter_init_strided(ew_iter *it, const int64_t *sizes, int32_t dim,
                          const int64_t *const *strides, int n_ops) {
  it->dim = dim;
  it->n_ops = n_ops;
  for (int32_t d = 0; d < dim; d++) it->sizes[d] = sizes[d];
  for (int k = 0; k < n_ops; k++)
    for (int32_t d = 0; d < dim; d++) it->strides[k][d] = sizes[d] == 1 ? 0 : strides[k][d];
  iter_start(it);
}

/* ---- dtype rules (c10/core/ScalarType.h, ATen TypeProperties.cpp) ---- */

void ew_rt_init(ew_rt *s) { s->dim_r = s->zero_r = s->wrapped_r = -1; }

static int promote_skip(int a, int b) {
  if (a < 0) return b;
  if (b < 0) return a;
  return em_promote_types(a, b);
}

void ew_rt_tensor(ew_rt *s, const em_tensor *t) {
  if (t->dim > 0)
    s->dim_r = promote_skip(s->dim_r, t->dtype);
  else
    s->zero_r = promote_skip(s->zero_r, t->dtype);
}

void ew_rt_scalar(ew_rt *s, const em_evalue *v) {
  int d = v->tag == EM_TAG_DOUBLE ? EM_DTYPE_F32
          : v->tag == EM_TAG_BOOL ? EM_DTYPE_BOOL
                                  : EM_DTYPE_I64;
  s->wrapped_r = promote_skip(s->wrapped_r, d);
}

static int combine_categories(int higher, int lower) {
  if (higher >= 0 && em_dtype_is_float(higher)) return higher;
  if (higher == EM_DTYPE_BOOL || (lower >= 0 && em_dtype_is_float(lower)))
    return promote_skip(higher, lower);
  if (higher >= 0) return higher;
  return lower;
}

int ew_rt_result(const ew_rt *s) {
  return combine_categories(s->dim_r, combine_categories(s->zero_r, s->wrapped_r));
}

bool ew_can_cast(int from, int to) {
  if (em_dtype_is_float(from) && !em_dtype_is_float(to)) return false;
  if (from != EM_DTYPE_BOOL && to == EM_DTYPE_BOOL) return false;
  return true;
}

bool ew_dtype_is_real_or_bool(int d) {
  return em_dtype_is_float(d) || em_dtype_is_int(d) || d == EM_DTYPE_BOOL;
}

/* ---- generic driver ---- */

void ew_op_init(ew_op *op, int common, int res) {
  memset(op, 0, sizeof *op);
  op->common = common;
  op->res = res;
  op->fp = em_dtype_is_float(common);
  op->res_fp = em_dtype_is_float(res);
}

ew_val ew_scalar_val(const em_evalue *v, int dtype) {
  ew_val r;
  if (dtype == EM_DTYPE_BOOL) {
    double d = 0;
    em_arg_double(v, &d);
    r.i = d != 0.0;
  } else if (em_dtype_is_float(dtype)) {
    double d = 0;
    em_arg_double(v, &d);
    r.f = dtype == EM_DTYPE_F64 ? d : (double)(float)d;
  } else if (v->tag == EM_TAG_DOUBLE) {
    double d = v->u.d;
    r.i = ew_wrap_int(d != d         ? 0
                      : d >= 9.2e18  ? INT64_MAX
                      : d <= -9.2e18 ? INT64_MIN
                                     : (int64_t)d,
                      dtype);
  } else {
    r.i = ew_wrap_int(v->tag == EM_TAG_BOOL ? (int64_t)v->u.b : v->u.i, dtype);
  }
  return r;
}

ew_in ew_in_scalar(const em_evalue *v, int dtype) {
  ew_in r;
  r.t = NULL;
  r.s = ew_scalar_val(v, dtype);
  r.dtype = dtype;
  return r;
}

bool ew_is_contiguous(const em_tensor *t) {
  int64_t expect = 1;
  for (int32_t d = t->dim - 1; d >= 0; d--) {
    if (t->sizes[d] == 1) continue;
    if (t->strides[d] != expect) return false;
    expect *= t->sizes[d];
  }
  return true;
}

bool ew_is_dense(const em_tensor *t) {
  /* selection sort of the non-trivial dims by stride, innermost first */
  int32_t order[EM_MAX_DIM], n = 0;
  for (int32_t d = 0; d < t->dim; d++)
    if (t->sizes[d] != 1) order[n++] = d;
  for (int32_t i = 0; i < n; i++)
    for (int32_t j = i + 1; j < n; j++)
      if (t->strides[order[j]] < t->strides[order[i]]) {
        int32_t tmp = order[i];
        order[i] = order[j];
        order[j] = tmp;
      }
  int64_t expect = 1;
  for (int32_t i = 0; i < n; i++) {
    if (t->strides[order[i]] != expect) return false;
    expect *= t->sizes[order[i]];
  }
  return true;
}

/* True when t has `dim` dims equal to sizes and row-major contiguous strides. */
static bool dense_same(const em_tensor *t, const int64_t *sizes, int32_t dim) {
  if (t->dim != dim || !ew_is_contiguous(t)) return false;
  for (int32_t d = 0; d < dim; d++)
    if (t->sizes[d] != sizes[d]) return false;
  return true;
}

/* True when the output, every tensor input and the computation are all f32. */
static bool all_f32(const em_tensor *out, const ew_in *ins, int n_in, const ew_op *op) {
  if (out->dtype != EM_DTYPE_F32 || op->res != EM_DTYPE_F32 || op->common != EM_DTYPE_F32)
    return false;
  for (int k = 0; k < n_in; k++) {
    if (!ins[k].t) {
      if (!em_dtype_is_float(ins[k].dtype)) return false;
    } else if (ins[k].t->dtype != EM_DTYPE_F32 || ins[k].dtype != EM_DTYPE_F32) {
      return false;
    }
  }
  return true;
}

/* Positions a walk at linear element i (row-major over the walk's shape). */
static void iter_seek(ew_iter *it, int64_t i) {
  for (int k = 0; k < it->n_ops; k++) it->off[k] = 0;
  for (int32_t d = it->dim - 1; d >= 0; d--) {
    it->idx[d] = i % it->sizes[d];
    i /= it->sizes[d];
    for (int k = 0; k < it->n_ops; k++) it->off[k] += it->idx[d] * it->strides[k][d];
  }
}

/* One ew_map call, shared by the chunks of a parallel loop. */
typedef struct map_job {
  em_tensor *out;
  const ew_in *ins;
  int n_in;
  ew_fn fn;
  const ew_op *op;
  bool f32;   /* all-f32 typed path */
  bool dense; /* every tensor dense in the output's shape: linear indexing */
  ew_iter it; /* the strided walk (when !dense), at element 0 */
  bool err;   /* set by a serial run when the op reported an error */
  const char *errmsg;
} map_job;

/* Computes elements [begin, end) of a job. */
static void map_chunk(void *ctx, int64_t begin, int64_t end) {
  map_job *job = (map_job *)ctx;
  ew_op op = *job->op; /* chunk-local: ops may record errors in it */
  const ew_in *ins = job->ins;
  int n_in = job->n_in;
  ew_iter it = job->it;
  if (!job->dense) iter_seek(&it, begin);
  ew_val x[EW_MAX_OPS];
  float xf[EW_MAX_OPS];
  for (int k = 0; k < n_in; k++) {
    x[k] = ins[k].s;
    xf[k] = (float)ins[k].s.f;
  }
  for (int64_t i = begin; i < end; i++) {
    int64_t oo = job->dense ? i : it.off[0];
    if (job->f32) {
      float *o = (float *)job->out->data;
      if (op.f32) {
        for (int k = 0; k < n_in; k++)
          if (ins[k].t) xf[k] = ((const float *)ins[k].t->data)[job->dense ? i : it.off[k + 1]];
        o[oo] = op.f32(xf, &op);
      } else {
        for (int k = 0; k < n_in; k++)
          if (ins[k].t) x[k].f = ((const float *)ins[k].t->data)[job->dense ? i : it.off[k + 1]];
        o[oo] = (float)job->fn(x, &op).f;
      }
    } else {
      for (int k = 0; k < n_in; k++)
        if (ins[k].t) x[k] = ew_load(ins[k].t, job->dense ? i : it.off[k + 1], ins[k].dtype);
      ew_store(job->out, oo, job->fn(x, &op), op.res);
    }
    if (!job->dense) ew_iter_next(&it);
  }
  if (op.err) {
    job->err = true;
    job->errmsg = op.errmsg;
  }
}

/* Below this many elements a loop runs on the caller alone. */
#define EW_PARALLEL_MIN 32768

/* Shortest innermost run the row path takes (it seeks the outer dims once per row). */
#define EW_ROW_MIN 8

/* Fewest elements for which a cheap (memory-bound) row op runs on the pool: below this, waking
 * the workers costs more than it saves (SmolLM2 prefill, 64 x 576 mul: 2x slower threaded on a
 * 2-core machine; bench/results/portable_ew.md). */
#define EW_PARALLEL_MIN_CHEAP (1 << 18)

/*
 * The all-f32 row path of ew_map: the merged walk's innermost dim is contiguous (stride 1) in
 * the output and contiguous or repeated (stride 0) in every input, so op->f32_row computes
 * whole runs. Scalars are one float repeated.
 */
typedef struct row_job {
  float *out;
  const float *base[EW_MAX_OPS];
  float scalar[EW_MAX_OPS];
  int64_t s[EW_MAX_OPS]; /* innermost stride of each input: 0 or 1 */
  int n_in;
  int64_t inner;
  ew_iter it; /* the walk (out, then inputs); its last dim is the row */
  const ew_op *op;
} row_job;

/* Computes elements [begin, end) of a row job, one f32_row call per (partial) row. */
static void row_chunk(void *ctx, int64_t begin, int64_t end) {
  const row_job *job = (const row_job *)ctx;
  const ew_iter *it = &job->it;
  int64_t inner = job->inner;
  int32_t od = it->dim - 1; /* the outer dims: 0 .. od-1 */
  for (int64_t pos = begin; pos < end;) {
    int64_t row = pos / inner, col = pos % inner;
    int64_t n = inner - col < end - pos ? inner - col : end - pos;
    int64_t off[EW_MAX_OPS + 1] = {0};
    for (int32_t d = od - 1; d >= 0 && row; d--) {
      int64_t i = row % it->sizes[d];
      row /= it->sizes[d];
      for (int k = 0; k <= job->n_in; k++) off[k] += i * it->strides[k][d];
    }
    const float *x[EW_MAX_OPS];
    for (int k = 0; k < job->n_in; k++)
      x[k] = job->base[k] ? job->base[k] + off[k + 1] + col * job->s[k] : &job->scalar[k];
    job->op->f32_row(job->out + off[0] + col, x, job->s, n, job->op);
    pos += n;
  }
}

/*
 * Runs ew_map's all-f32 loop by rows when the layout allows (see row_job); false when it does
 * not, and nothing was written.
 */
static bool map_rows(em_kernel_ctx *ctx, em_tensor *out, const ew_in *ins, int n_in,
                     const int64_t *sizes, int32_t dim, const ew_op *op) {
  if (n_in + 1 > EW_MAX_OPS) return false; /* the walk holds out and the inputs */
  row_job job;
  memset(&job, 0, sizeof job);
  const em_tensor *ts[EW_MAX_OPS];
  ts[0] = out;
  for (int k = 0; k < n_in; k++) ts[k + 1] = ins[k].t;
  ew_iter_init(&job.it, sizes, dim, ts, n_in + 1);
  if (job.it.dim < 1) return false; /* a 0-dim output: one element, the generic loop */
  int32_t last = job.it.dim - 1;
  job.inner = job.it.sizes[last];
  if (job.inner < EW_ROW_MIN && job.it.dim > 1) return false;
  if (job.it.strides[0][last] != 1 && job.inner != 1) return false;
  for (int k = 0; k < n_in; k++) {
    int64_t st = job.it.strides[k + 1][last];
    if (st != 0 && st != 1) return false;
    job.s[k] = st;
    if (ins[k].t) {
      job.base[k] = (const float *)ins[k].t->data;
    } else {
      job.scalar[k] = (float)ins[k].s.f;
      job.s[k] = 0;
    }
  }
  job.out = (float *)out->data;
  job.n_in = n_in;
  job.op = op;
  if (out->numel >= (op->f32_row_cheap ? EW_PARALLEL_MIN_CHEAP : EW_PARALLEL_MIN) && ctx)
    em_parallel_for(ctx->pool, out->numel, row_chunk, &job);
  else
    row_chunk(&job, 0, out->numel);
  return true;
}

em_status ew_map(em_kernel_ctx *ctx, em_tensor *out, const ew_in *ins, int n_in, ew_fn fn,
                 ew_op *op) {
  int64_t sizes[EM_MAX_DIM];
  int32_t dim = 0;
  for (int k = 0; k < n_in; k++) {
    if (!ins[k].t) continue;
    int64_t tmp[EM_MAX_DIM];
    int32_t tdim;
    EM_KCHECK(ctx, em_broadcast_shapes(sizes, dim, ins[k].t->sizes, ins[k].t->dim, tmp, &tdim),
              "input shapes do not broadcast (operand %d)", k);
    memcpy(sizes, tmp, sizeof(int64_t) * (size_t)tdim);
    dim = tdim;
  }
  EM_KTRY(em_resize_out(ctx, out, sizes, dim));
  if (out->numel == 0) return EM_OK;
  EM_KCHECK(ctx, out->data, "out has no data");
  map_job job;
  memset(&job, 0, sizeof job);
  job.out = out;
  job.ins = ins;
  job.n_in = n_in;
  job.fn = fn;
  job.op = op;
  job.f32 = all_f32(out, ins, n_in, op);
  if (job.f32 && op->f32 && op->f32_row && map_rows(ctx, out, ins, n_in, sizes, dim, op))
    return EM_OK;
  job.dense = dense_same(out, sizes, dim);
  for (int k = 0; k < n_in && job.dense; k++)
    job.dense = !ins[k].t || dense_same(ins[k].t, sizes, dim);
  if (!job.dense) {
    const em_tensor *ts[EW_MAX_OPS];
    ts[0] = out;
    for (int k = 0; k < n_in; k++) ts[k + 1] = ins[k].t;
    ew_iter_init(&job.it, sizes, dim, ts, n_in + 1);
  }
  /* Float-domain ops never report data errors, so their chunks may run concurrently. */
  if (op->fp && out->numel >= EW_PARALLEL_MIN && ctx)
    em_parallel_for(ctx->pool, out->numel, map_chunk, &job);
  else
    map_chunk(&job, 0, out->numel);
  EM_KCHECK(ctx, !job.err, "%s", job.errmsg ? job.errmsg : "invalid value");
  return EM_OK;
}

/* The casts between f32 and the 16-bit floats over identical dense layouts (an f16 KV cache's
 * updates), element by element with the same conversions as the generic loop; false for other
 * dtype pairs or when the two overlap. */
static bool dense_float_cast(em_tensor *dst, const em_tensor *src) {
  size_t n = (size_t)dst->numel;
  const char *s0 = src->data, *s1 = s0 + n * em_dtype_size(src->dtype);
  const char *d0 = dst->data, *d1 = d0 + n * em_dtype_size(dst->dtype);
  if (s0 < d1 && d0 < s1) return false;
  if (src->dtype == EM_DTYPE_F32 && dst->dtype == EM_DTYPE_F16) {
    const float *x = src->data;
    uint16_t *y = dst->data;
    for (size_t i = 0; i < n; i++) y[i] = em_f32_to_f16(x[i]);
  } else if (src->dtype == EM_DTYPE_F16 && dst->dtype == EM_DTYPE_F32) {
    const uint16_t *x = src->data;
    float *y = dst->data;
    for (size_t i = 0; i < n; i++) y[i] = em_f16_to_f32(x[i]);
  } else if (src->dtype == EM_DTYPE_F32 && dst->dtype == EM_DTYPE_BF16) {
    const float *x = src->data;
    uint16_t *y = dst->data;
    for (size_t i = 0; i < n; i++) y[i] = em_f32_to_bf16(x[i]);
  } else if (src->dtype == EM_DTYPE_BF16 && dst->dtype == EM_DTYPE_F32) {
    const uint16_t *x = src->data;
    float *y = dst->data;
    for (size_t i = 0; i < n; i++) y[i] = em_bf16_to_f32(x[i]);
  } else {
    return false;
  }
  return true;
}

em_status ew_copy_cast(em_kernel_ctx *ctx, em_tensor *dst, const em_tensor *src) {
  int64_t tmp[EM_MAX_DIM];
  int32_t tdim;
  EM_KCHECK(ctx,
            em_broadcast_shapes(dst->sizes, dst->dim, src->sizes, src->dim, tmp, &tdim) &&
                tdim == dst->dim && memcmp(tmp, dst->sizes, sizeof(int64_t) * (size_t)tdim) == 0,
            "source shape does not broadcast to the destination shape");
  if (dst->numel == 0) return EM_OK;
  size_t es = em_dtype_size(dst->dtype);
  if (src->dim == dst->dim && ew_is_dense(dst) && ew_is_dense(src)) {
    bool same = true;
    for (int32_t d = 0; d < dst->dim && same; d++)
      same = src->sizes[d] == dst->sizes[d] &&
             (dst->sizes[d] == 1 || src->strides[d] == dst->strides[d]);
    if (same && src->dtype == dst->dtype) { /* identical dense layouts: one block of numel */
      if (dst->data != src->data) memmove(dst->data, src->data, es * (size_t)dst->numel);
      return EM_OK;
    }
    if (same && dense_float_cast(dst, src)) return EM_OK;
  }
  if (src->dtype == dst->dtype && dst->data != src->data) {
    /* A byte move between layouts (dim order changes, broadcasts): em_shape_copy merges
     * contiguous runs into memcpy and tiles transposes. src aligns right; broadcast dims repeat
     * with stride 0. */
    int64_t sst[EM_MAX_DIM];
    for (int32_t d = 0; d < dst->dim; d++) {
      int32_t sd = d - (dst->dim - src->dim);
      sst[d] = (sd >= 0 && src->sizes[sd] != 1) ? src->strides[sd] : 0;
    }
    em_shape_copy(dst->data, dst->strides, src->data, sst, dst->sizes, dst->dim, es);
    return EM_OK;
  }
  const em_tensor *ts[2] = {dst, src};
  ew_iter it;
  ew_iter_init(&it, dst->sizes, dst->dim, ts, 2);
  bool fp = em_dtype_is_float(src->dtype) || em_dtype_is_float(dst->dtype);
  for (int64_t i = 0; i < it.numel; i++) {
    if (src->dtype == dst->dtype) {
      memmove((char *)dst->data + (size_t)it.off[0] * es,
              (const char *)src->data + (size_t)it.off[1] * es, es);
    } else if (fp && em_dtype_is_float(src->dtype)) {
      em_store_f64(dst->data, dst->dtype, it.off[0], em_load_f64(src->data, src->dtype, it.off[1]));
    } else {
      em_store_i64(dst->data, dst->dtype, it.off[0], em_load_i64(src->data, src->dtype, it.off[1]));
    }
    ew_iter_next(&it);
  }
  return EM_OK;
}

void ew_fill(em_tensor *t, ew_val v, int from) {
  if (t->numel == 0) return;
  size_t es = em_dtype_size(t->dtype);
  uint64_t elem[2];
  em_tensor one = *t;
  one.data = elem;
  ew_store(&one, 0, v, from);
  if (ew_is_dense(t)) {
    for (int64_t i = 0; i < t->numel; i++) memcpy((char *)t->data + (size_t)i * es, elem, es);
    return;
  }
  const em_tensor *ts[1] = {t};
  ew_iter it;
  ew_iter_init(&it, t->sizes, t->dim, ts, 1);
  for (int64_t i = 0; i < it.numel; i++) {
    memcpy((char *)t->data + (size_t)it.off[0] * es, elem, es);
    ew_iter_next(&it);
  }
}

/* ---- reductions ---- */

em_status ew_parse_dims(em_kernel_ctx *ctx, em_evalue *v, int32_t rank, bool empty_is_all,
                        bool *mask) {
  for (int32_t d = 0; d < EM_MAX_DIM; d++) mask[d] = false;
  const int64_t *dims = NULL;
  size_t n = 0;
  bool is_list = false;
  if (v && v->tag == EM_TAG_INT) {
    dims = &v->u.i;
    n = 1;
  } else if (v && v->tag == EM_TAG_LIST_INT) {
    is_list = true;
    dims = em_evalue_int_list(v, &n);
    EM_KCHECK(ctx, dims || v->u.list.n == 0, "dim list holds a non-Int item");
    n = dims ? n : 0;
  } else {
    EM_KCHECK(ctx, !v || v->tag == EM_TAG_NONE, "dim must be an int, an int list or None");
  }
  if (n == 0) {
    if (!is_list || empty_is_all)
      for (int32_t d = 0; d < rank; d++) mask[d] = true;
    return EM_OK;
  }
  bool seen0 = false;
  for (size_t i = 0; i < n; i++) {
    int32_t d;
    EM_KCHECK(ctx, em_norm_dim(dims[i], rank, &d), "dim %lld out of range for rank %d",
              (long long)dims[i], (int)rank);
    if (rank == 0) {
      EM_KCHECK(ctx, !seen0, "dim %lld appears more than once", (long long)dims[i]);
      seen0 = true;
      continue;
    }
    EM_KCHECK(ctx, !mask[d], "dim %lld appears more than once", (long long)dims[i]);
    mask[d] = true;
  }
  return EM_OK;
}

void ew_reduced_shape(const em_tensor *in, const bool *mask, bool keepdim, int64_t *sizes,
                      int32_t *dim) {
  int32_t n = 0;
  for (int32_t d = 0; d < in->dim; d++) {
    if (!mask[d])
      sizes[n++] = in->sizes[d];
    else if (keepdim)
      sizes[n++] = 1;
  }
  *dim = n;
}

void ew_reduce_init(ew_reduce *r, const em_tensor *in, const bool *mask, em_tensor *const *outs,
                    int n_outs) {
  int64_t keep_sizes[EM_MAX_DIM];
  int64_t st[EW_MAX_OPS][EM_MAX_DIM];
  int32_t nk = 0;
  r->n_red = 0;
  r->red_numel = 1;
  for (int32_t d = 0; d < in->dim; d++) {
    if (mask[d]) {
      r->red_sizes[r->n_red] = in->sizes[d];
      r->red_strides[r->n_red++] = in->strides[d];
      r->red_numel *= in->sizes[d];
      continue;
    }
    keep_sizes[nk] = in->sizes[d];
    st[0][nk] = in->strides[d];
    for (int k = 0; k < n_outs; k++) {
      const em_tensor *o = outs[k];
      int32_t od = o->dim == in->dim ? d : nk;
      st[k + 1][nk] = o->strides[od];
    }
    nk++;
  }
  const int64_t *sp[EW_MAX_OPS];
  for (int k = 0; k <= n_outs; k++) sp[k] = st[k];
  ew_iter_init_strided(&r->outer, keep_sizes, nk, sp, n_outs + 1);
  r->out_numel = r->outer.numel;
}

void ew_reduce_inner(const ew_reduce *r, ew_iter *it, int64_t base) {
  const int64_t *sp[1] = {r->red_strides};
  ew_iter_init_strided(it, r->red_sizes, r->n_red, sp, 1);
  it->off[0] = base;
}

bool ew_reduce_cols(const ew_reduce *r, int64_t *n, int64_t *s, int64_t *inner) {
  ew_iter it;
  ew_reduce_inner(r, &it, 0);
  const int32_t od = r->outer.dim - 1;
  if (it.numel == 0 || it.dim != 1 || od < 0 || r->outer.strides[0][od] != 1 ||
      r->outer.strides[1][od] != 1 || r->outer.sizes[od] < 2)
    return false;
  *n = it.numel, *s = it.strides[0][0], *inner = r->outer.sizes[od];
  return true;
}

/* ---- argument helpers ---- */

bool ew_is_scalar(const em_evalue *v) {
  return v && (v->tag == EM_TAG_INT || v->tag == EM_TAG_DOUBLE || v->tag == EM_TAG_BOOL);
}

em_status ew_bin_setup(em_kernel_ctx *ctx, em_evalue *x, em_evalue *y, em_evalue *out, ew_bin *r) {
  memset(r, 0, sizeof *r);
  ew_rt rt;
  ew_rt_init(&rt);
  em_evalue *xy[2] = {x, y};
  for (int k = 0; k < 2; k++) {
    em_tensor *t = em_evalue_tensor(xy[k]);
    if (t) {
      EM_KCHECK(ctx, ew_dtype_is_real_or_bool(t->dtype), "operand %d has unsupported dtype %s", k,
                em_dtype_name(t->dtype));
      ew_rt_tensor(&rt, t);
    } else {
      EM_KCHECK(ctx, ew_is_scalar(xy[k]), "operand %d must be a tensor or a scalar", k);
      ew_rt_scalar(&rt, xy[k]);
    }
    if (k == 0) {
      r->a = t;
      r->as = xy[k];
    } else {
      r->b = t;
      r->bs = xy[k];
    }
  }
  r->out = em_evalue_tensor(out);
  EM_KCHECK(ctx, r->out, "out must be a tensor");
  EM_KCHECK(ctx, ew_dtype_is_real_or_bool(r->out->dtype), "out has unsupported dtype %s",
            em_dtype_name(r->out->dtype));
  r->common = ew_rt_result(&rt);
  EM_KCHECK(ctx, r->common >= 0, "no common dtype for the operands");
  return EM_OK;
}

void ew_bin_ins(const ew_bin *b, int dtype, ew_in *ins) {
  ins[0] = b->a ? ew_in_tensor(b->a, dtype) : ew_in_scalar(b->as, dtype);
  ins[1] = b->b ? ew_in_tensor(b->b, dtype) : ew_in_scalar(b->bs, dtype);
}

void ew_bin_ins_exact(const ew_bin *b, int dtype, ew_in *ins) {
  ew_bin_ins(b, dtype, ins);
  for (int k = 0; k < 2; k++)
    if (!ins[k].t && em_dtype_is_float(dtype)) ins[k].s.f = ew_round_to(ins[k].s.f, dtype);
}

int ew_operand_dtype(const em_tensor *t, const em_evalue *s) {
  if (t) return t->dtype;
  return s->tag == EM_TAG_DOUBLE ? EM_DTYPE_F64
         : s->tag == EM_TAG_BOOL ? EM_DTYPE_BOOL
                                 : EM_DTYPE_I64;
}

em_tensor *ew_arg_real_tensor(em_kernel_ctx *ctx, em_evalue **args, int i) {
  em_tensor *t = EM_ARG_TENSOR(args, i);
  if (!t) {
    em_kernel_fail(ctx, __FILE__, __LINE__, "argument %d must be a tensor", i);
    return NULL;
  }
  if (!ew_dtype_is_real_or_bool(t->dtype)) {
    em_kernel_fail(ctx, __FILE__, __LINE__, "argument %d has unsupported dtype %s", i,
                   em_dtype_name(t->dtype));
    return NULL;
  }
  if (t->numel > 0 && !t->data) {
    em_kernel_fail(ctx, __FILE__, __LINE__, "argument %d has no data", i);
    return NULL;
  }
  return t;
}

bool ew_scalar_fits(const em_evalue *v, int d) {
  double x = 0;
  em_arg_double(v, &x);
  if (d == EM_DTYPE_BOOL || d == EM_DTYPE_F64) return true;
  if (em_dtype_is_float(d)) {
    double lim = d == EM_DTYPE_F16 ? 65504.0 : 3.4028234663852886e38;
    return x != x || isinf(x) || (x >= -lim && x <= lim);
  }
  if (v->tag == EM_TAG_INT || v->tag == EM_TAG_BOOL) {
    int64_t i = v->tag == EM_TAG_BOOL ? v->u.b : v->u.i;
    if (d == EM_DTYPE_U8) return i >= -255 && i <= 255; /* c10::overflows lets negatives wrap */
    return d == EM_DTYPE_I64 || ew_wrap_int(i, d) == i;
  }
  if (x != x) return false;
  switch (d) {
  case EM_DTYPE_U8: return x >= 0.0 && x <= 255.0;
  case EM_DTYPE_I8: return x >= -128.0 && x <= 127.0;
  case EM_DTYPE_I16: return x >= -32768.0 && x <= 32767.0;
  case EM_DTYPE_I32: return x >= -2147483648.0 && x <= 2147483647.0;
  default: return x >= -9.2233720368547758e18 && x < 9.2233720368547758e18;
  }
}

em_status ew_size_list(em_kernel_ctx *ctx, em_evalue *v, int64_t *sizes, int32_t *dim) {
  size_t n = 0;
  EM_KCHECK(ctx, v && v->tag == EM_TAG_LIST_INT, "size must be an int list");
  const int64_t *s = em_evalue_int_list(v, &n);
  EM_KCHECK(ctx, s || v->u.list.n == 0, "size list holds a non-Int item");
  if (!s) n = 0;
  EM_KCHECK(ctx, n <= EM_MAX_DIM, "too many dims (%zu)", n);
  for (size_t i = 0; i < n; i++) {
    EM_KCHECK(ctx, s[i] >= 0, "negative size %lld", (long long)s[i]);
    sizes[i] = s[i];
  }
  *dim = (int32_t)n;
  return EM_OK;
}
