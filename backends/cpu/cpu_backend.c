/*
 * cpu_backend.c — EmberCpuBackend: the fast-path delegate.
 *
 * init parses and fully validates an EMC1 blob (emc_format.h; untrusted
 * bytes: every offset, size, index and shape is checked before use), binds
 * constants zero-copy into the blob and takes the planned arena from the
 * method allocator. execute binds the argument tensors and runs the operators
 * in order on the pool. Nothing is allocated while executing.
 */
#define _POSIX_C_SOURCE 200809L
#include "ember/backend_cpu.h"

#include <time.h>
#include <string.h>

#include "cpu_internal.h"
#include "ember/cpu.h"
#include "ember/platform.h"
#include "ember/profiler.h"

#define FAIL(st, ...)                                                                              \
  do {                                                                                             \
    EM_LOG_ERROR("EmberCpuBackend: " __VA_ARGS__);                                                 \
    return (st);                                                                                   \
  } while (0)

static bool mul_ok(int64_t a, int64_t b, int64_t *out) {
  return !__builtin_mul_overflow(a, b, out);
}

static em_status bind_tensor(emc_delegate *d, const emc_header *h, const uint8_t *data,
                             const emc_tensor *rec, uint32_t i) {
  emc_rt_tensor *t = &d->t[i];
  if (rec->ndim > EMC_MAX_DIMS) FAIL(EM_ERR_INVALID_PROGRAM, "tensor %u has rank %u", i, rec->ndim);
  int64_t numel = 1;
  for (uint32_t k = 0; k < rec->ndim; k++) {
    if (rec->sizes[k] < 0 || !mul_ok(numel, rec->sizes[k], &numel) || numel > ((int64_t)1 << 40))
      FAIL(EM_ERR_INVALID_PROGRAM, "tensor %u has a bad size in dim %u", i, k);
    t->sizes[k] = rec->sizes[k];
  }
  t->numel = numel, t->ndim = rec->ndim, t->storage = rec->storage, t->index = rec->index;
  t->dtype = rec->dtype;
  const bool half = rec->dtype == EMC_DTYPE_F16 || rec->dtype == EMC_DTYPE_BF16;
  if (rec->dtype != EMC_DTYPE_F32 && !(half && rec->storage == EMC_CONST) &&
      (rec->storage != EMC_INPUT || (rec->dtype != EMC_DTYPE_I64 && rec->dtype != EMC_DTYPE_I32)))
    FAIL(EM_ERR_INVALID_PROGRAM,
         "tensor %u has dtype %u (integers only as inputs, halves only as constants)", i,
         rec->dtype);
  uint64_t nbytes = (uint64_t)numel * (half ? sizeof(uint16_t) : sizeof(float));
  switch (rec->storage) {
  case EMC_INPUT:
  case EMC_OUTPUT: {
    uint32_t n = rec->storage == EMC_INPUT ? h->n_inputs : h->n_outputs;
    if (rec->index >= n || rec->offset != 0)
      FAIL(EM_ERR_INVALID_PROGRAM, "tensor %u names argument %u of %u", i, rec->index, n);
    uint32_t a = rec->storage == EMC_INPUT ? rec->index : h->n_inputs + rec->index;
    if (d->arg_need[a] >= 0 && d->arg_dtype[a] != rec->dtype)
      FAIL(EM_ERR_INVALID_PROGRAM, "tensor %u names argument %u with a second dtype", i, a);
    d->arg_dtype[a] = (uint8_t)rec->dtype;
    if (numel > d->arg_need[a]) d->arg_need[a] = numel;
    t->data = NULL;
    break;
  }
  case EMC_CONST:
    if (rec->offset % (half ? sizeof(uint16_t) : sizeof(float)) || rec->offset > h->data_nbytes ||
        nbytes > h->data_nbytes - rec->offset)
      FAIL(EM_ERR_INVALID_PROGRAM, "constant %u [%llu, +%llu) lies outside the %llu-byte data", i,
           (unsigned long long)rec->offset, (unsigned long long)nbytes,
           (unsigned long long)h->data_nbytes);
    t->data = (float *)(uintptr_t)(data + rec->offset);
    break;
  case EMC_ARENA:
    if (rec->offset % 16 || rec->offset > h->arena_nbytes || nbytes > h->arena_nbytes - rec->offset)
      FAIL(EM_ERR_INVALID_PROGRAM, "arena tensor %u [%llu, +%llu) lies outside the %llu-byte arena",
           i, (unsigned long long)rec->offset, (unsigned long long)nbytes,
           (unsigned long long)h->arena_nbytes);
    t->data = (float *)(d->arena + rec->offset);
    break;
  default: FAIL(EM_ERR_INVALID_PROGRAM, "tensor %u has unknown storage %u", i, rec->storage);
  }
  return EM_OK;
}

/* The f32 value of IEEE half h (subnormals, infinities and NaN included). */
static float f16_to_f32(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112u) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;
  } else { /* subnormal: man * 2^-24, exact in f32 */
    float f = (float)man * 0x1p-24f;
    memcpy(&bits, &f, sizeof bits);
    bits |= sign;
  }
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

/* Constant i stored as 16-bit halves (EMC_DTYPE_F16 / BF16) widened into f32 memory of the
 * method allocator, once: every operator then reads it as any f32 constant. */
static em_status widen_const(emc_delegate *d, em_allocator *al, uint32_t i) {
  emc_rt_tensor *t = &d->t[i];
  const uint8_t *src = (const uint8_t *)t->data;
  float *w = em_allocator_alloc(al, (size_t)(t->numel ? t->numel : 1) * sizeof(float), 64);
  if (!w)
    FAIL(EM_ERR_MEMORY_ALLOCATION_FAILED,
         "method allocator too small to widen constant %u (%lld halves)", i, (long long)t->numel);
  const bool bf16 = t->dtype == EMC_DTYPE_BF16;
  for (int64_t k = 0; k < t->numel; k++) {
    uint16_t v;
    memcpy(&v, src + 2 * k, sizeof v); /* the blob is little-endian, as every target */
    if (bf16) {
      const uint32_t bits = (uint32_t)v << 16;
      memcpy(&w[k], &bits, sizeof bits);
    } else {
      w[k] = f16_to_f32(v);
    }
  }
  t->data = w, t->dtype = EMC_DTYPE_F32;
  return EM_OK;
}

/* The blob's operator kinds as the exporter names them (python/ember/backends/cpu/blob.py OP):
 * the delegate debug ids of profile events are built from them, and the ETRecord's delegate
 * map is keyed by the same strings. */
static const char *const kind_names[EMC_OP_KIND_END] = {
    "?",         "conv2d",   "gemm",           "binary",    "unary",   "maxpool2d",
    "avgpool2d", "mean",     "softmax",        "layernorm", "permute", "copy",
    "cat",       "slice",    "channel_affine", "rmsnorm",   "tokenfq", "pad",
    "dqlinear",  "tensorfq", "embedding",      "resize",    "gather"};

/* Appends s to p (bounded by end); returns the new end of the text. */
static char *put_str(char *p, const char *end, const char *s) {
  while (*s && p < end) *p++ = *s++;
  return p;
}

static char *put_u32(char *p, const char *end, uint32_t v) {
  char tmp[10];
  int n = 0;
  do tmp[n++] = (char)('0' + v % 10u), v /= 10u;
  while (v);
  while (n && p < end) *p++ = tmp[--n];
  return p;
}

/* Writes "kind #i" (n == 1) or "kind+kind+kind #i-j" for ops [i, i + n) into buf. */
static void make_id(char *buf, size_t size, const emc_delegate *d, uint32_t i, uint32_t n) {
  char *p = buf;
  const char *end = buf + size - 1;
  for (uint32_t k = 0; k < n; k++) {
    uint32_t kind = d->ops[i + k].kind;
    if (k) p = put_str(p, end, "+");
    p = put_str(p, end, kind_names[kind < EMC_OP_KIND_END ? kind : 0]);
  }
  p = put_str(p, end, " #");
  p = put_u32(p, end, i);
  if (n > 1) p = put_u32(put_str(p, end, "-"), end, i + n - 1);
  *p = '\0';
}

/* Hands the recorder the event of ops [i, i + n) (their ids, their last op's first output). */
static void record_op(const em_backend_exec_ctx *ctx, const emc_delegate *d, uint32_t i, uint32_t n,
                      uint64_t t0, uint64_t t1) {
  const emc_rt_tensor *y = &d->t[d->ops[i + n - 1].out[0]];
  int64_t strides[EMC_MAX_DIMS];
  int64_t sizes[EMC_MAX_DIMS];
  int64_t st = 1;
  for (uint32_t k = y->ndim; k-- > 0;) sizes[k] = y->sizes[k], strides[k] = st, st *= y->sizes[k];
  em_tensor t = {y->data,          sizes,        strides, NULL, y->numel, y->numel,
                 (int32_t)y->ndim, EM_DTYPE_F32, 0};
  em_evalue v = {.u.tensor = &t, .tag = EM_TAG_TENSOR};
  char id[96];
  make_id(id, sizeof id, d, i, n);
  em_profile_event ev = {id,
                         t0,
                         t1 < t0 ? t0 : t1,
                         ctx->chain,
                         ctx->instruction,
                         (int32_t)i,
                         EM_PROFILE_DELEGATE_OP,
                         y->data ? &v : NULL};
  ctx->profiler->record(ctx->profiler->record_ctx, &ev);
}

/* em_cpu_backend_options, read by each delegate's init. */
static atomic_bool opt_no_fuse, opt_profile;
static atomic_int opt_q8_winograd, opt_q8_pixel_major, opt_threads_adaptive;

em_status em_cpu_backend_configure(const em_cpu_backend_options *opts) {
  if (!opts) return EM_ERR_INVALID_ARGUMENT;
  em_status st = em_cpu_config_force(opts->isa);
  if (st != EM_OK) return st;
  atomic_store_explicit(&opt_no_fuse, opts->no_fuse, memory_order_relaxed);
  atomic_store_explicit(&opt_profile, opts->profile, memory_order_relaxed);
  atomic_store_explicit(&opt_q8_winograd, opts->q8_winograd, memory_order_relaxed);
  atomic_store_explicit(&opt_q8_pixel_major, opts->q8_pixel_major, memory_order_relaxed);
  atomic_store_explicit(&opt_threads_adaptive, opts->threads_adaptive, memory_order_relaxed);
  return EM_OK;
}

static em_status cpu_init(em_backend_init_ctx *ctx, const void *blob, size_t n,
                          const em_compile_spec *specs, size_t n_specs, void **handle_out) {
  (void)specs, (void)n_specs;
  const uint8_t *b = blob;
  emc_header h;
  if (!blob || n < sizeof h) FAIL(EM_ERR_INVALID_PROGRAM, "blob of %zu bytes has no header", n);
  memcpy(&h, b, sizeof h);
  if (memcmp(h.magic, EMC_MAGIC, 4) != 0) FAIL(EM_ERR_INVALID_PROGRAM, "bad blob magic");
  if (h.version < 1 || h.version > EMC_VERSION)
    FAIL(EM_ERR_DELEGATE_INVALID_COMPATIBILITY, "blob version %u, this build reads 1 to %u",
         h.version, EMC_VERSION);
  if (h.n_tensors > (1u << 24) || h.n_ops > (1u << 24) || h.n_inputs > 4096 || h.n_outputs > 4096)
    FAIL(EM_ERR_INVALID_PROGRAM, "implausible counts in the blob header");
  uint64_t tn = (uint64_t)h.n_tensors * sizeof(emc_tensor), on = (uint64_t)h.n_ops * sizeof(emc_op);
  if (h.tensors_off > n || tn > n - h.tensors_off || h.ops_off > n || on > n - h.ops_off ||
      h.data_off > n || h.data_nbytes > n - h.data_off || h.data_off % EMC_DATA_ALIGN)
    FAIL(EM_ERR_INVALID_PROGRAM, "blob sections lie outside its %zu bytes", n);
  if (h.arena_nbytes > ((uint64_t)1 << 40)) FAIL(EM_ERR_INVALID_PROGRAM, "implausible arena size");
  const em_cpu_config *cfg = em_cpu_config_get();
  if (!cfg) FAIL(EM_ERR_NOT_SUPPORTED, "no micro-kernels for this CPU");

  em_allocator *al = ctx->method_alloc;
  emc_delegate *d = em_allocator_alloc(al, sizeof *d, 16);
  emc_rt_tensor *ts = em_allocator_alloc(al, (h.n_tensors ? h.n_tensors : 1) * sizeof *ts, 16);
  emc_op *ops = em_allocator_alloc(al, (h.n_ops ? h.n_ops : 1) * sizeof *ops, 16);
  int64_t *need = em_allocator_alloc(al, (h.n_inputs + h.n_outputs + 1) * sizeof *need, 16);
  uint8_t *arg_dtype = em_allocator_alloc(al, h.n_inputs + h.n_outputs + 1, 16);
  uint8_t *arena = em_allocator_alloc(al, h.arena_nbytes ? (size_t)h.arena_nbytes : 64, 64);
  if (!d || !ts || !ops || !need || !arg_dtype || !arena)
    FAIL(EM_ERR_MEMORY_ALLOCATION_FAILED,
         "method allocator too small for the delegate (%llu-byte arena, %u tensors, %u ops)",
         (unsigned long long)h.arena_nbytes, h.n_tensors, h.n_ops);
  memset(d, 0, sizeof *d);
  d->cfg = cfg, d->q8_gemm = em_q8_gemm_for(cfg->isa), d->q8_quant = em_q8_quant_for(cfg->isa),
  d->q8_quant_scaled = em_q8_quant_scaled_for(cfg->isa), d->q8_pack = em_q8_pack_for(cfg->isa),
  d->q8_dw = em_q8_dw_for(cfg->isa), d->q8_add = em_q8_add_for(cfg->isa),
  d->q8_dq = em_q8_dq_for(cfg->isa), d->q8_lut = em_q8_lut_for(cfg->isa),
  d->q8_lutf = em_q8_lutf_for(cfg->isa), d->q8_rowq = em_q8_rowq_for(cfg->isa),
  d->q8_lutq = em_q8_lutq_for(cfg->isa), d->q8_lutm = em_q8_lutm_for(cfg->isa),
  d->q8_dw2 = em_q8_dw2_for(cfg->isa), d->q8_rowt = em_q8_rowt_for(cfg->isa),
  d->q8_dwd = em_q8_dwdot_for(cfg->isa), d->q8_dwd2 = em_q8_dwdot2_for(cfg->isa),
  d->q8_dwdv = em_q8_dwdotv_for(cfg->isa),
  d->q8_pw = atomic_load_explicit(&opt_q8_pixel_major, memory_order_relaxed) < 0
                 ? NULL
                 : em_q8_pw_for(cfg->isa);
  d->q8_nr = em_q8_gemm_nr_for(cfg->isa), d->n_tensors = h.n_tensors, d->n_ops = h.n_ops,
  d->n_inputs = h.n_inputs;
  d->n_outputs = h.n_outputs, d->t = ts, d->ops = ops, d->arg_need = need, d->arena = arena;
  d->arena_nbytes = h.arena_nbytes;
#if defined(__x86_64__)
  if (cfg->amx) { /* pages are touched only by the slots in use */
    d->amx_ws = em_allocator_alloc(al, EMC_AMX_SLOTS * emc_gemm_amx_slot_bytes() + 64, 64);
    d->amx_busy = em_allocator_alloc(al, EMC_AMX_SLOTS * sizeof *d->amx_busy, 16);
    if (!d->amx_ws || !d->amx_busy)
      FAIL(EM_ERR_MEMORY_ALLOCATION_FAILED, "method allocator too small for the AMX workspace");
    d->amx_slots = EMC_AMX_SLOTS;
    for (int s = 0; s < EMC_AMX_SLOTS; s++) atomic_flag_clear(&d->amx_busy[s]);
  }
#endif
  d->arg_dtype = arg_dtype;
  for (uint32_t a = 0; a <= h.n_inputs + h.n_outputs; a++) need[a] = -1, arg_dtype[a] = 0;
  for (uint32_t i = 0; i < h.n_tensors; i++) {
    emc_tensor rec;
    memcpy(&rec, b + h.tensors_off + (uint64_t)i * sizeof rec, sizeof rec);
    em_status st = bind_tensor(d, &h, b + h.data_off, &rec, i);
    if (st == EM_OK && d->t[i].dtype != EMC_DTYPE_F32 && rec.storage == EMC_CONST)
      st = widen_const(d, al, i);
    if (st != EM_OK) return st;
  }
  for (uint32_t a = 0; a <= h.n_inputs + h.n_outputs; a++)
    if (need[a] < 0) need[a] = 0; /* an argument no tensor names: any f32 tensor */
  memcpy(ops, b + h.ops_off, (size_t)on);
  char why[200];
  const int q8w = atomic_load_explicit(&opt_q8_winograd, memory_order_relaxed);
  /* Int8 on every CPU by default: with the quantizer and packer of blob version 10, int8 beats
   * the f32 Winograd alternative on each of ResNet-18's 3x3 convs on Zen 4 too (1 thread: 0.67-0.77
   * against 1.08-1.16 ms on 56x56, 0.63 against 1.04 on 28x28; the network 11.8 against 13.9). */
  const bool q8_wino = q8w > 0;
  em_status pst = emc_wino_pack_at_load(d, ops, q8_wino, al, why, sizeof why);
  if (pst != EM_OK) FAIL(pst, "%s", why);
  for (uint32_t i = 0; i < h.n_ops; i++)
    if (!emc_op_check(d, &ops[i], why, sizeof why))
      FAIL(EM_ERR_INVALID_PROGRAM, "operator %u (kind %u): %s", i, ops[i].kind, why);
  pst = emc_q8_pw_prepare(d, al, why, sizeof why);
  if (pst == EM_OK) pst = emc_q8_dw_prepare(d, al, why, sizeof why);
  if (pst != EM_OK) FAIL(pst, "%s", why);
  d->fused = em_allocator_alloc(al, h.n_ops ? h.n_ops : 1, 16);
  if (!d->fused)
    FAIL(EM_ERR_MEMORY_ALLOCATION_FAILED, "method allocator too small for the delegate");
  for (uint32_t i = 0; i < h.n_ops; i++) d->fused[i] = 0;
  d->xsl = em_allocator_alloc(al, h.n_ops ? h.n_ops : 1, 16);
  if (!d->xsl) FAIL(EM_ERR_MEMORY_ALLOCATION_FAILED, "method allocator too small for the delegate");
  memset(d->xsl, 0, h.n_ops ? h.n_ops : 1);
  emc_xsl_plan(d);
  d->profile = atomic_load_explicit(&opt_profile, memory_order_relaxed);
  d->thr.adaptive = atomic_load_explicit(&opt_threads_adaptive, memory_order_relaxed) >= 0;
  d->thr.choice = -1;
  const bool no_fuse = atomic_load_explicit(&opt_no_fuse, memory_order_relaxed);
  for (uint32_t i = 0; !no_fuse && i + 1 < h.n_ops; i++) {
    const int n = emc_fuse_chain(d, i);
    if (n > 1) d->fused[i] = (uint8_t)n, i += (uint32_t)n - 1;
  }
  d->q8_pad = em_allocator_alloc(al, h.n_ops ? h.n_ops : 1, 16);
  if (!d->q8_pad)
    FAIL(EM_ERR_MEMORY_ALLOCATION_FAILED, "method allocator too small for the delegate");
  for (uint32_t i = 0; i < h.n_ops; i++) d->q8_pad[i] = 0;
  if (!no_fuse) emc_q8_pad_plan(d);
  d->q8_lk = em_allocator_alloc(al, (h.n_ops ? h.n_ops : 1) * sizeof *d->q8_lk, 16);
  if (!d->q8_lk)
    FAIL(EM_ERR_MEMORY_ALLOCATION_FAILED, "method allocator too small for the delegate");
  for (uint32_t i = 0; i < h.n_ops; i++) d->q8_lk[i] = 0;
  if (!no_fuse) emc_q8_lk_plan(d);
  *handle_out = d;
  return EM_OK;
}

/* The calling thread's CPU time (wall: wall-clock time instead). */
static uint64_t profile_ns(int wall) {
  struct timespec ts;
  clock_gettime(wall ? CLOCK_MONOTONIC : CLOCK_THREAD_CPUTIME_ID, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static em_status cpu_execute(em_backend_exec_ctx *ctx, void *handle, em_evalue **args,
                             size_t n_args) {
  emc_delegate *d = handle;
  if (!d) return EM_ERR_DELEGATE_INVALID_HANDLE;
  if (n_args != (size_t)d->n_inputs + d->n_outputs)
    FAIL(EM_ERR_INVALID_ARGUMENT, "%zu arguments, the blob takes %u inputs and %u outputs", n_args,
         d->n_inputs, d->n_outputs);
  for (size_t a = 0; a < n_args; a++) {
    em_tensor *t = args[a] && args[a]->tag == EM_TAG_TENSOR ? args[a]->u.tensor : NULL;
    const em_dtype want = d->arg_dtype[a] == EMC_DTYPE_I64   ? EM_DTYPE_I64
                          : d->arg_dtype[a] == EMC_DTYPE_I32 ? EM_DTYPE_I32
                                                             : EM_DTYPE_F32;
    if (!t || t->dtype != (int)want || (!t->data && t->numel) || t->numel < d->arg_need[a])
      FAIL(EM_ERR_INVALID_ARGUMENT, "argument %zu is not an %s tensor of at least %lld elements", a,
           want == EM_DTYPE_F32   ? "f32"
           : want == EM_DTYPE_I64 ? "int64"
                                  : "int32",
           (long long)d->arg_need[a]);
  }
  for (uint32_t i = 0; i < d->n_tensors; i++) {
    emc_rt_tensor *t = &d->t[i];
    if (t->storage == EMC_INPUT)
      t->data = args[t->index]->u.tensor->data;
    else if (t->storage == EMC_OUTPUT)
      t->data = args[d->n_inputs + t->index]->u.tensor->data;
  }
  /* options.profile logs each operator's time: on one thread its CPU time (immune to the
     host preempting the thread), with a pool its wall-clock time (the caller's CPU time would
     leave out what it spends waiting for the other threads). */
  const bool profile = d->profile;
  em_threadpool *pool = emc_threads_begin(d, ctx ? ctx->pool : NULL);
  const int wall = em_threadpool_size(pool) > 1;
  const bool trace = ctx && ctx->profiler && ctx->profiler->record;
  for (uint32_t i = 0; i < d->n_ops; i++) {
    uint64_t t0 = profile ? profile_ns(wall) : 0, e0 = trace ? em_now_ns() : 0;
    /* With a recorder, a sliced chain's convs run one by one (the same bits): each then has its
     * event and its output for ExecuTorch's Inspector to compare, as without the chain. */
    const bool apart = trace && d->fused[i] == 3 && d->xsl[i + 2];
    if (d->fused[i] > 1 && !apart && emc_run_chain(d, i, d->fused[i], pool)) {
      if (trace) record_op(ctx, d, i, d->fused[i], e0, em_now_ns());
      i += d->fused[i] - 1u; /* all ran: the profile line below is the chain's, under its last */
    } else {
      em_status st = emc_op_run(d, &d->ops[i], pool);
      if (st != EM_OK) {
        d->thr.start = 0; /* a failed execute times nothing */
        return st;
      }
      if (trace) record_op(ctx, d, i, 1, e0, em_now_ns());
    }
    if (profile) {
      const emc_op *op = &d->ops[i];
      const emc_rt_tensor *y = &d->t[op->out[0]];
      const emc_conv_params cp = emc_conv_params_of(op); /* a conv's path, as init chose it */
      const char *path = d->q8_lk[i] < 0                 ? " (u8 lookup read by its readers)"
                         : op->kind != EMC_OP_CONV2D     ? ""
                         : d->q8_pw_w && d->q8_pw_w[i]   ? " (int8 pixel-major)"
                         : d->q8_pad[i] == EMC_Q8_PAD_IN ? " (int8, input padded by its writer)"
                         : cp.q8_id >= 0                 ? " (int8)"
                         : cp.winograd == 4              ? " (winograd 4)"
                         : cp.winograd == 2              ? " (winograd 2)"
                                                         : "";
      em_log(EM_LOG_INFO, __FILE__, __LINE__,
             "emc op %3u kind %2u act %2u ip[%d %d %d %d %d %d] out %lld: %8.3f ms%s", i, op->kind,
             op->act, op->ip[0], op->ip[1], op->ip[2], op->ip[3], op->ip[4], op->ip[5],
             (long long)y->numel, (double)(profile_ns(wall) - t0) * 1e-6, path);
    }
  }
  emc_threads_end(d);
  return EM_OK;
}

static const em_backend cpu_backend = {
    .name = EM_CPU_BACKEND_NAME,
    .is_available = NULL,
    .init = cpu_init,
    .execute = cpu_execute,
    .destroy = NULL,
};

em_status em_register_cpu_backend(void) { return em_register_backend(&cpu_backend); }

const char *em_cpu_backend_isa(void) {
  const em_cpu_config *c = em_cpu_config_get();
  return c ? c->isa : "none";
}
