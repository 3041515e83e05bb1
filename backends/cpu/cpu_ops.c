/*
 * cpu_ops.c — the CPU backend's operators: validation (at init) and execution
 * (on the thread pool) of each emc_op kind.
 *
 * Every tensor is f32, contiguous, NCHW for images. Validation proves that the
 * loops below stay inside each tensor's bound memory for any blob; execution
 * checks nothing. Convolutions are GEMMs (cpu_gemm.c) with the packed weights
 * as A (EMC_MR-row panels) and the input as B — its rows for 1x1 stride-1
 * convs, else im2col rows built strip by strip in per-thread scratch — so the
 * output lands in NCHW with no transpose; depthwise convs run per channel
 * plane. Deep convs on small maps (EMC_CONV_TRANSPOSED) swap the operands,
 * pixels broadcast and output channels in the vectors, and transpose after.
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "cpu_internal.h"

#define WHY(...)                                                                                   \
  do {                                                                                             \
    snprintf(why, why_n, __VA_ARGS__);                                                             \
    return false;                                                                                  \
  } while (0)

static const emc_rt_tensor *tensor_at(const emc_delegate *d, int32_t id) {
  return (id >= 0 && (uint32_t)id < d->n_tensors) ? &d->t[id] : NULL;
}

static float *data_of(const emc_delegate *d, int32_t id) { return id >= 0 ? d->t[id].data : NULL; }

/* A GEMM job of this delegate: its kernels and its AMX workspace, everything else zero. */
static void gemm_init(emc_gemm *j, const emc_delegate *d) {
  memset(j, 0, sizeof *j);
  j->cfg = d->cfg, j->amx_ws = d->amx_ws, j->amx_busy = d->amx_busy, j->amx_slots = d->amx_slots;
}

static em_minmax_params clamp_of(const emc_op *op) {
  em_minmax_params p = {-INFINITY, INFINITY};
  if (op->act == EMC_ACT_CLAMP) p.min = op->fp[0], p.max = op->fp[1];
  return p;
}

/* The activation that must run after a kernel that already clamped. */
static uint32_t post_act(const emc_op *op) { return op->act == EMC_ACT_CLAMP ? 0 : op->act; }

/*
 * em_parallel_for for a loop of about `work` element operations: small loops run on the caller,
 * since waking a worker costs more than they do (and far more when the machine is loaded).
 */
static void par_for(em_threadpool *pool, int64_t n, em_parallel_fn fn, void *ctx, int64_t work) {
  em_parallel_for(work < EMC_MIN_PARALLEL_WORK ? NULL : pool, n, fn, ctx);
}

/*
 * The same in contiguous ranges, thread t the t-th (then helping the others finish): a depthwise
 * conv's planes go to the threads as the channels of the GEMMs around it do (a split by output
 * rows before it, by K after it), so each thread reads the planes it wrote and writes those it
 * will read. Split in dynamic chunks, about half came from the other core's cache each time:
 * MobileNetV2 1.3 % and MobileNetV3-Small 3.3 % slower at 2 threads (paired medians).
 */
static void par_for_static(em_threadpool *pool, int64_t n, em_parallel_fn fn, void *ctx,
                           int64_t work) {
  em_parallel_for_static(work < EMC_MIN_PARALLEL_WORK ? NULL : pool, n, fn, ctx);
}

/*
 * The same for a loop that only streams memory (elementwise, permute, copy): one over fewer
 * than this many elements (1 MiB of f32) stays on the caller. Its data was just written by the
 * previous operator, split over the threads differently; below about this size, moving it
 * between the cores' caches and the wake-up cost more than the second core gains (measured:
 * MiniLM's 49K-197K-element adds and permutes ran 1.2-2x slower on 2 threads, ResNet-50's
 * 401K-element adds 1.8x faster).
 */
#define EMC_MIN_PARALLEL_ELEMS 262144
static void par_for_mem(em_threadpool *pool, int64_t n, em_parallel_fn fn, void *ctx,
                        int64_t elems) {
  em_parallel_for(elems < EMC_MIN_PARALLEL_ELEMS ? NULL : pool, n, fn, ctx);
}

/* ---- validation helpers ----------------------------------------------------------------- */

static bool is_const(const emc_rt_tensor *t) { return t && t->storage == EMC_CONST; }

static bool check_act(const emc_op *op, char *why, size_t why_n) {
  if (op->act >= EMC_ACT_END) WHY("unknown activation %u", op->act);
  if (op->act == EMC_ACT_CLAMP && !(op->fp[0] <= op->fp[1]))
    WHY("clamp bounds [%g, %g] are not ordered", op->fp[0], op->fp[1]);
  return true;
}

static bool params_nonneg(const emc_op *op, int n, char *why, size_t why_n) {
  for (int i = 0; i < n; i++)
    if (op->ip[i] < 0) WHY("parameter %d is negative (%d)", i, op->ip[i]);
  return true;
}

/* conv output extent, or -1 when the window never fits. */
static int64_t conv_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t dil) {
  int64_t span = dil * (k - 1) + 1;
  if (in + 2 * p < span) return -1;
  return (in + 2 * p - span) / s + 1;
}

/*
 * Scratch floats of a transposed conv (EMC_CONV_TRANSPOSED): 16 of slack to align the start to
 * 64 bytes, the im2col [kg][npix] (room for ceil(npix / 6) * 6 columns, rounded up to 16
 * floats), then C^T [npix][co].
 */
static uint64_t conv_t_scratch_floats(int64_t kg, int64_t npix, int64_t co) {
  return 16 + emc_div_up(emc_div_up((size_t)npix, EMC_MR) * EMC_MR * (size_t)kg, 16) * 16 +
         (uint64_t)npix * (uint64_t)co;
}

/* Floats of one Winograd slot: [a * a][cin][64] transformed inputs, [a * a][co][64] products
 * (transposed: then [a * a][64][co] products as the GEMMs leave them). */
static uint64_t wino_slot_floats(int64_t a, int64_t cin, int64_t co, bool transposed) {
  return (uint64_t)(a * a) * (uint64_t)(cin + co + (transposed ? co : 0)) * EM_WINO_MAX_TILES;
}

/* Whether the conv's planned scratch (16-aligned, inside the arena) holds `need` bytes. */
static bool scratch_holds(const emc_delegate *d, const emc_op *op, uint64_t need, const char *what,
                          char *why, size_t why_n) {
  uint64_t off = (uint64_t)op->ip[EMC_CONV_SCRATCH_OFF],
           nb = (uint64_t)op->ip[EMC_CONV_SCRATCH_NBYTES];
  if (nb < need || off % 16 || off + nb > d->arena_nbytes)
    WHY("conv2d: %s scratch [%llu, +%llu) does not hold %llu bytes inside the %llu-byte arena",
        what, (unsigned long long)off, (unsigned long long)nb, (unsigned long long)need,
        (unsigned long long)d->arena_nbytes);
  return true;
}

/* Whether two tensors may overlap in memory (the same argument, or overlapping arena ranges). */
static bool out_shared(const emc_rt_tensor *a, const emc_rt_tensor *b) {
  if (a->storage == EMC_ARENA && b->storage == EMC_ARENA)
    return a->data < b->data + b->numel && b->data < a->data + a->numel;
  return a->storage == b->storage && a->storage != EMC_CONST && a->index == b->index;
}

/* A residual (in[3], -1: none) has the output's shape and shares none of its storage. */
static bool check_residual(const emc_delegate *d, const emc_op *op, char *why, size_t why_n) {
  if (op->in[3] < 0) return true;
  const emc_rt_tensor *r = tensor_at(d, op->in[3]), *y = tensor_at(d, op->out[0]);
  if (!r || !y) WHY("residual: bad tensor id");
  if (r->ndim != y->ndim) WHY("residual has %u dims, the output %u", r->ndim, y->ndim);
  for (uint32_t i = 0; i < r->ndim; i++)
    if (r->sizes[i] != y->sizes[i])
      WHY("residual size %lld in dim %u, the output %lld", (long long)r->sizes[i], i,
          (long long)y->sizes[i]);
  if (out_shared(r, y)) WHY("residual shares the output's storage");
  return true;
}

static bool check_conv(const emc_delegate *d, const emc_op *op, char *why, size_t why_n) {
  const emc_rt_tensor *x = tensor_at(d, op->in[0]), *w = tensor_at(d, op->in[1]);
  const emc_rt_tensor *b = op->in[2] < 0 ? NULL : tensor_at(d, op->in[2]);
  const emc_rt_tensor *y = tensor_at(d, op->out[0]);
  if (!x || !w || !y || (op->in[2] >= 0 && !b)) WHY("conv2d: bad tensor id");
  if (x->ndim != 4 || y->ndim != 4) WHY("conv2d: input and output must be 4-d");
  if (!is_const(w) || (b && !is_const(b))) WHY("conv2d: weights and bias must be constants");
  if (!params_nonneg(op, EMC_CONV_IN_SCALE + 1, why, why_n)) return false;
  const int32_t *ip = op->ip;
  int64_t g = ip[EMC_CONV_GROUPS], kh = ip[EMC_CONV_KH], kw = ip[EMC_CONV_KW];
  if (g < 1 || kh < 1 || kw < 1 || ip[EMC_CONV_SH] < 1 || ip[EMC_CONV_SW] < 1 ||
      ip[EMC_CONV_DH] < 1 || ip[EMC_CONV_DW] < 1)
    WHY("conv2d: groups, kernel, stride and dilation must be >= 1");
  int64_t n = x->sizes[0], cin = x->sizes[1], co = y->sizes[1];
  if (y->sizes[0] != n || cin % g || co % g || cin == 0 || co == 0)
    WHY("conv2d: channels %lld -> %lld do not split into %lld groups", (long long)cin,
        (long long)co, (long long)g);
  int64_t oh = conv_out(x->sizes[2], kh, ip[EMC_CONV_SH], ip[EMC_CONV_PH], ip[EMC_CONV_DH]);
  int64_t ow = conv_out(x->sizes[3], kw, ip[EMC_CONV_SW], ip[EMC_CONV_PW], ip[EMC_CONV_DW]);
  if (oh != y->sizes[2] || ow != y->sizes[3])
    WHY("conv2d: output %lldx%lld, expected %lldx%lld", (long long)y->sizes[2],
        (long long)y->sizes[3], (long long)oh, (long long)ow);
  if (b && b->numel != co)
    WHY("conv2d: bias has %lld elements for %lld channels", (long long)b->numel, (long long)co);
  if (!check_residual(d, op, why, why_n)) return false;
  if (ip[EMC_CONV_IN_SCALE]) { /* version 6: an input channel scale */
    const emc_rt_tensor *st = tensor_at(d, ip[EMC_CONV_IN_SCALE] - 1);
    if (!st) WHY("conv2d: bad input-scale tensor id");
    if (ip[EMC_CONV_DEPTHWISE] || g != 1 || kh != 1 || kw != 1 || ip[EMC_CONV_SH] != 1 ||
        ip[EMC_CONV_SW] != 1 || ip[EMC_CONV_PH] || ip[EMC_CONV_PW] || ip[EMC_CONV_WINOGRAD])
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
    if (!ip[EMC_CONV_DEPTHWISE]) WHY("conv2d: only a depthwise conv writes plane means");
    if (mt->storage == EMC_CONST || mt->storage == EMC_INPUT)
      WHY("conv2d: plane means go to a constant or an input");
    if (mt->numel != n * co)
      WHY("conv2d: plane means have %lld elements, expected %lld", (long long)mt->numel,
          (long long)(n * co));
    if (out_shared(mt, y) || out_shared(mt, x)) WHY("conv2d: plane means share storage");
  }
  if (ip[EMC_CONV_DEPTHWISE]) {
    if (op->in[3] >= 0) WHY("conv2d: a depthwise conv takes no residual");
    if (g != cin || g != co) WHY("conv2d: depthwise needs groups == in == out channels");
    if (w->numel != co * kh * kw)
      WHY("conv2d: depthwise weights have %lld elements", (long long)w->numel);
    return check_act(op, why, why_n);
  }
  int64_t mg = co / g, kg = cin / g * kh * kw;
  if (ip[EMC_CONV_PAIRS]) { /* version 5: the weights again as bf16 pairs */
    const emc_rt_tensor *pw = tensor_at(d, ip[EMC_CONV_PAIRS] - 1);
    const int64_t want =
        (int64_t)emc_div_up((size_t)co, 32) * 32 * (int64_t)emc_div_up((size_t)kg, 16) * 16;
    if (!pw || !is_const(pw)) WHY("conv2d: the bf16-pair weights are not a constant");
    if (g != 1 || ip[EMC_CONV_WINOGRAD])
      WHY("conv2d: bf16-pair weights need an ungrouped conv that is not Winograd");
    if (pw->numel != want)
      WHY("conv2d: bf16-pair weights have %lld words, expected %lld", (long long)pw->numel,
          (long long)want);
  }
  if (ip[EMC_CONV_TRANSPOSED] > 1) WHY("conv2d: transposed flag %d", ip[EMC_CONV_TRANSPOSED]);
  if (ip[EMC_CONV_WINOGRAD]) {
    const int64_t m = ip[EMC_CONV_WINOGRAD], a = m + 2, slots = ip[EMC_CONV_WINO_SLOTS];
    if (m != 2 && m != 4) WHY("conv2d: Winograd tile %lld, expected 2 or 4", (long long)m);
    if (g != 1 || kh != 3 || kw != 3 || ip[EMC_CONV_SH] != 1 || ip[EMC_CONV_SW] != 1 ||
        ip[EMC_CONV_DH] != 1 || ip[EMC_CONV_DW] != 1)
      WHY("conv2d: Winograd needs a 3x3, stride 1, undilated, ungrouped conv");
    const bool tr = ip[EMC_CONV_TRANSPOSED] != 0;
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
    return scratch_holds(d, op, need, "Winograd", why, why_n) && check_act(op, why, why_n);
  }
  if (ip[EMC_CONV_TRANSPOSED]) {
    if (g != 1) WHY("conv2d: a transposed conv has %lld groups, not 1", (long long)g);
    if (w->numel != (int64_t)emc_div_up((size_t)co, EMC_NR_PANEL) * EMC_NR_PANEL * kg)
      WHY("conv2d: transposed packed weights have %lld elements, expected %lld",
          (long long)w->numel,
          (long long)(emc_div_up((size_t)co, EMC_NR_PANEL) * EMC_NR_PANEL * kg));
    uint64_t need = conv_t_scratch_floats(kg, oh * ow, co) * sizeof(float);
    if (!scratch_holds(d, op, need, "transposed", why, why_n)) return false;
    if (!ip[EMC_CONV_PAIRS]) return check_act(op, why, why_n);
    /* with pairs it may run untransposed (run_conv): the im2col scratch too */
  } else if (w->numel != g * (int64_t)emc_div_up((size_t)mg, EMC_MR) * EMC_MR * kg)
    WHY("conv2d: packed weights have %lld elements, expected %lld", (long long)w->numel,
        (long long)(g * (int64_t)emc_div_up((size_t)mg, EMC_MR) * EMC_MR * kg));
  const uint64_t need =
      (uint64_t)kg * emc_div_up((size_t)(oh * ow), EMC_NR_PANEL) * EMC_NR_PANEL * sizeof(float);
  return scratch_holds(d, op, need, "im2col", why, why_n) && check_act(op, why, why_n);
}

static bool check_gemm(const emc_delegate *d, const emc_op *op, char *why, size_t why_n) {
  const emc_rt_tensor *a = tensor_at(d, op->in[0]), *b = tensor_at(d, op->in[1]);
  const emc_rt_tensor *bias = op->in[2] < 0 ? NULL : tensor_at(d, op->in[2]);
  const emc_rt_tensor *y = tensor_at(d, op->out[0]);
  if (!a || !b || !y || (op->in[2] >= 0 && !bias)) WHY("gemm: bad tensor id");
  if (!params_nonneg(op, 8, why, why_n)) return false;
  const int32_t *ip = op->ip;
  int64_t batch = ip[EMC_GEMM_BATCH], m = ip[EMC_GEMM_M], k = ip[EMC_GEMM_K], n = ip[EMC_GEMM_N];
  if (batch < 1 || m < 1 || k < 1 || n < 1) WHY("gemm: empty problem");
  int64_t a_rows = ip[EMC_GEMM_A_PACKED] ? (int64_t)emc_div_up((size_t)m, EMC_MR) * EMC_MR : m;
  if (a->numel < (batch - 1) * ip[EMC_GEMM_A_BSTRIDE] + a_rows * k)
    WHY("gemm: A has %lld elements, too few", (long long)a->numel);
  int64_t b_cols =
      ip[EMC_GEMM_B_PACKED] ? (int64_t)emc_div_up((size_t)n, EMC_NR_PANEL) * EMC_NR_PANEL : n;
  if (b->numel < (batch - 1) * ip[EMC_GEMM_B_BSTRIDE] + k * b_cols)
    WHY("gemm: B has %lld elements, too few", (long long)b->numel);
  if (y->numel != batch * m * n)
    WHY("gemm: output has %lld elements, expected %lld", (long long)y->numel,
        (long long)(batch * m * n));
  if (bias && bias->numel != n) WHY("gemm: bias has %lld elements", (long long)bias->numel);
  return check_residual(d, op, why, why_n) && check_act(op, why, why_n);
}

static bool broadcasts_to(const emc_rt_tensor *x, const emc_rt_tensor *y) {
  if (x->ndim > y->ndim) return false;
  for (uint32_t i = 0; i < x->ndim; i++) {
    int64_t xs = x->sizes[x->ndim - 1 - i], ys = y->sizes[y->ndim - 1 - i];
    if (xs != ys && xs != 1) return false;
  }
  return true;
}

static bool check_binary(const emc_delegate *d, const emc_op *op, char *why, size_t why_n) {
  const emc_rt_tensor *a = tensor_at(d, op->in[0]), *y = tensor_at(d, op->out[0]);
  const emc_rt_tensor *b = op->in[1] < 0 ? NULL : tensor_at(d, op->in[1]);
  if (!a || !y || (op->in[1] >= 0 && !b)) WHY("binary: bad tensor id");
  if (op->ip[0] < 0 || op->ip[0] > EMC_BIN_RSUB) WHY("binary: unknown operation %d", op->ip[0]);
  if (!broadcasts_to(a, y) || (b && !broadcasts_to(b, y)))
    WHY("binary: operands do not broadcast to the output");
  return check_act(op, why, why_n);
}

static bool check_same_numel(const emc_delegate *d, const emc_op *op, char *why, size_t why_n) {
  const emc_rt_tensor *x = tensor_at(d, op->in[0]), *y = tensor_at(d, op->out[0]);
  if (!x || !y) WHY("bad tensor id");
  if (x->numel != y->numel)
    WHY("input has %lld elements, output %lld", (long long)x->numel, (long long)y->numel);
  return check_act(op, why, why_n);
}

static bool check_pool(const emc_delegate *d, const emc_op *op, char *why, size_t why_n) {
  const emc_rt_tensor *x = tensor_at(d, op->in[0]), *y = tensor_at(d, op->out[0]);
  if (!x || !y || x->ndim != 4 || y->ndim != 4) WHY("pool: needs 4-d input and output");
  if (!params_nonneg(op, 10, why, why_n)) return false;
  for (int i = 0; i < 4; i++)
    if (op->ip[i] < 1) WHY("pool: kernel and stride must be >= 1");
  if (op->ip[EMC_POOL_DH] < 1 || op->ip[EMC_POOL_DW] < 1) WHY("pool: dilation must be >= 1");
  if (x->sizes[0] != y->sizes[0] || x->sizes[1] != y->sizes[1]) WHY("pool: N, C differ");
  /* torch's rules: padding at most half the (dilated) window; each output side the floor or the
   * ceil-mode count of windows (the runtime's chains size their bands from them). */
  for (int a = 0; a < 2; a++) {
    const int64_t k = op->ip[EMC_POOL_KH + a], st = op->ip[EMC_POOL_SH + a],
                  p = op->ip[EMC_POOL_PH + a], dl = op->ip[EMC_POOL_DH + a];
    const int64_t span = dl * (k - 1) + 1, in = x->sizes[2 + a], out = y->sizes[2 + a];
    if (2 * p > span) WHY("pool: padding %lld wider than half the window", (long long)p);
    const int64_t room = in + 2 * p - span;
    if (room < 0) WHY("pool: window larger than the padded input");
    int64_t ceil_n = (room + st - 1) / st + 1;
    if ((ceil_n - 1) * st >= in + p) ceil_n--;
    if (out != room / st + 1 && out != ceil_n)
      WHY("pool: output side %lld does not follow from input %lld, window %lld, stride %lld, "
          "padding %lld",
          (long long)out, (long long)in, (long long)k, (long long)st, (long long)p);
  }
  return check_act(op, why, why_n);
}

static bool check_rows(const emc_delegate *d, const emc_op *op, int64_t in_n, int64_t out_n,
                       char *why, size_t why_n) {
  const emc_rt_tensor *x = tensor_at(d, op->in[0]), *y = tensor_at(d, op->out[0]);
  if (!x || !y) WHY("bad tensor id");
  if (x->numel != in_n || y->numel != out_n)
    WHY("tensors have %lld / %lld elements, expected %lld / %lld", (long long)x->numel,
        (long long)y->numel, (long long)in_n, (long long)out_n);
  return check_act(op, why, why_n);
}

/* Softmax rows, with an optional scale (ip[4] = 1, fp[0]) and additive mask (in[1]: ip[5] rows
 * of the axis length, repeating down the rows) applied first. */
static bool check_softmax(const emc_delegate *d, const emc_op *op, char *why, size_t why_n) {
  const int64_t rows = op->ip[0], cols = op->ip[1], mask_rows = op->ip[5];
  if (rows < 0 || cols < 1 || op->ip[2] != 1) WHY("softmax: bad shape");
  if (op->ip[3] != 0 && op->ip[3] != 1) WHY("softmax: log flag %d is not 0 or 1", op->ip[3]);
  if (op->ip[4] != 0 && op->ip[4] != 1) WHY("softmax: scale flag %d is not 0 or 1", op->ip[4]);
  if (op->ip[3] && (op->ip[4] || op->in[1] >= 0)) /* the row runs in place: not for log */
    WHY("softmax: scale or mask on a log-softmax");
  if (op->in[1] >= 0) {
    const emc_rt_tensor *m = tensor_at(d, op->in[1]);
    if (!m) WHY("softmax: bad mask tensor id");
    if (mask_rows < 1 || rows % mask_rows != 0)
      WHY("softmax: mask of %lld rows does not tile %lld rows", (long long)mask_rows,
          (long long)rows);
    if (m->numel != mask_rows * cols)
      WHY("softmax: mask has %lld elements, expected %lld", (long long)m->numel,
          (long long)(mask_rows * cols));
    if (out_shared(m, tensor_at(d, op->out[0]))) WHY("softmax: mask shares the output's storage");
  } else if (mask_rows != 0) {
    WHY("softmax: mask rows %lld without a mask", (long long)mask_rows);
  }
  return check_rows(d, op, rows * cols, rows * cols, why, why_n);
}

static bool check_norm(const emc_delegate *d, const emc_op *op, char *why, size_t why_n) {
  int64_t rows = op->ip[0], cols = op->ip[1];
  if (rows < 0 || cols < 1) WHY("norm: bad shape");
  for (int i = 1; i < 3; i++) {
    if (op->in[i] < 0) continue;
    const emc_rt_tensor *w = tensor_at(d, op->in[i]);
    if (!w || w->numel != cols) WHY("norm: affine parameter %d has the wrong size", i);
  }
  return check_rows(d, op, rows * cols, rows * cols, why, why_n);
}

static bool check_permute(const emc_delegate *d, const emc_op *op, char *why, size_t why_n) {
  const emc_rt_tensor *x = tensor_at(d, op->in[0]), *y = tensor_at(d, op->out[0]);
  if (!x || !y || x->ndim != y->ndim) WHY("permute: bad tensors");
  unsigned seen = 0;
  for (uint32_t i = 0; i < x->ndim; i++) {
    int32_t p = op->ip[i];
    if (p < 0 || (uint32_t)p >= x->ndim || (seen >> p) & 1u) WHY("permute: not a permutation");
    seen |= 1u << p;
    if (y->sizes[i] != x->sizes[p]) WHY("permute: output dim %u has the wrong size", i);
  }
  return check_act(op, why, why_n);
}

static bool check_cat(const emc_delegate *d, const emc_op *op, char *why, size_t why_n) {
  const emc_rt_tensor *y = tensor_at(d, op->out[0]);
  int64_t outer = op->ip[0], n_in = op->ip[1], total = 0;
  if (!y || outer < 0 || n_in < 1 || n_in > 4) WHY("cat: bad parameters");
  for (int i = 0; i < n_in; i++) {
    const emc_rt_tensor *x = tensor_at(d, op->in[i]);
    int64_t row = op->ip[2 + i];
    if (!x || row < 0 || x->numel != outer * row) WHY("cat: input %d has the wrong size", i);
    total += row;
  }
  if (y->numel != outer * total) WHY("cat: output has the wrong size");
  return check_act(op, why, why_n);
}

static bool check_slice(const emc_delegate *d, const emc_op *op, char *why, size_t why_n) {
  if (!params_nonneg(op, 6, why, why_n)) return false;
  int64_t outer = op->ip[0], len = op->ip[1], inner = op->ip[2], start = op->ip[3],
          step = op->ip[4], out_len = op->ip[5];
  if (step < 1 || (out_len > 0 && start + (out_len - 1) * step >= len))
    WHY("slice: range runs past the dimension");
  return check_rows(d, op, outer * len * inner, outer * out_len * inner, why, why_n);
}

static bool check_affine(const emc_delegate *d, const emc_op *op, char *why, size_t why_n) {
  if (!params_nonneg(op, 3, why, why_n)) return false;
  int64_t n = op->ip[0], c = op->ip[1], inner = op->ip[2];
  const emc_rt_tensor *s = tensor_at(d, op->in[1]), *t = tensor_at(d, op->in[2]);
  if (!s || !t || s->numel != c || t->numel != c) WHY("affine: scale / shift size");
  return check_rows(d, op, n * c * inner, n * c * inner, why, why_n);
}

bool emc_op_check(const emc_delegate *d, const emc_op *op, char *why, size_t why_n) {
  for (int i = 0; i < 4; i++)
    if (op->in[i] < -1 || op->in[i] >= (int32_t)d->n_tensors) WHY("input id %d", op->in[i]);
  for (int i = 0; i < 2; i++)
    if (op->out[i] < -1 || op->out[i] >= (int32_t)d->n_tensors) WHY("output id %d", op->out[i]);
  if (op->out[0] < 0) WHY("operator has no output");
  if (d->t[op->out[0]].storage == EMC_CONST || d->t[op->out[0]].storage == EMC_INPUT)
    WHY("operator writes a constant or an input");
  switch (op->kind) {
  case EMC_OP_CONV2D: return check_conv(d, op, why, why_n);
  case EMC_OP_GEMM: return check_gemm(d, op, why, why_n);
  case EMC_OP_BINARY: return check_binary(d, op, why, why_n);
  case EMC_OP_UNARY:
  case EMC_OP_COPY: return check_same_numel(d, op, why, why_n);
  case EMC_OP_MAXPOOL2D:
  case EMC_OP_AVGPOOL2D: return check_pool(d, op, why, why_n);
  case EMC_OP_MEAN: {
    int64_t inner = op->ip[2] < 1 ? 1 : op->ip[2];
    if (op->ip[0] < 0 || op->ip[1] < 1) WHY("mean: bad shape");
    return check_rows(d, op, (int64_t)op->ip[0] * op->ip[1] * inner, op->ip[0] * inner, why, why_n);
  }
  case EMC_OP_SOFTMAX: return check_softmax(d, op, why, why_n);
  case EMC_OP_LAYERNORM:
  case EMC_OP_RMSNORM: return check_norm(d, op, why, why_n);
  case EMC_OP_PERMUTE: return check_permute(d, op, why, why_n);
  case EMC_OP_CAT: return check_cat(d, op, why, why_n);
  case EMC_OP_SLICE: return check_slice(d, op, why, why_n);
  case EMC_OP_CHANNEL_AFFINE: return check_affine(d, op, why, why_n);
  default: WHY("unknown operator kind %u", op->kind);
  }
}

/* ---- GEMM (the driver is cpu_gemm.c) ------------------------------------------------------ */

/* M = 1 with a packed B: stream each 16-column panel once (no 6-row tile). */
static void gemv_panels(void *ctx, int64_t begin, int64_t end) {
  const emc_gemm *j = ctx;
  for (int64_t pi = begin; pi < end; pi++) {
    size_t n0 = (size_t)pi * EMC_NR_PANEL, nc = j->n - n0 < EMC_NR_PANEL ? j->n - n0 : EMC_NR_PANEL;
    float *c = j->c + n0;
    const em_minmax_params none = {-INFINITY, INFINITY};
    j->cfg->gemv16(j->k, nc, j->a, j->b + (size_t)pi * j->k * EMC_NR_PANEL,
                   j->bias_n ? j->bias_n + n0 : NULL, c, j->res ? &none : &j->mm);
    if (j->res) j->cfg->vbin[EMC_BIN_ADD](nc, c, j->res + n0, c, &j->mm);
    if (j->act) j->cfg->vact(nc, c, c, j->act, j->fp);
  }
}

static void run_gemm_job(emc_gemm *j, em_threadpool *pool) {
  if (j->m == 1 && j->b_packed && !j->bias_m && !j->a_packed) {
    size_t panels = emc_div_up(j->n, EMC_NR_PANEL);
    par_for(pool, (int64_t)panels, gemv_panels, j, (int64_t)(j->n * j->k));
    return;
  }
  emc_gemm_run(j, pool);
}

typedef struct gemm_batch_job {
  const emc_delegate *d;
  const emc_op *op;
  em_threadpool *pool; /* for each GEMM; NULL when the batch itself is split over threads */
} gemm_batch_job;

/* GEMMs [begin, end) of a batched GEMM operator. */
static void gemm_batch(void *ctx, int64_t begin, int64_t end) {
  const gemm_batch_job *bj = ctx;
  const emc_delegate *d = bj->d;
  const emc_op *op = bj->op;
  const int32_t *ip = op->ip;
  const float *a = data_of(d, op->in[0]), *b = data_of(d, op->in[1]);
  float *y = data_of(d, op->out[0]);
  size_t m = (size_t)ip[EMC_GEMM_M], k = (size_t)ip[EMC_GEMM_K], n = (size_t)ip[EMC_GEMM_N];
  for (int64_t bi = begin; bi < end; bi++) {
    emc_gemm j;
    gemm_init(&j, d);
    j.m = m, j.k = k, j.n = n;
    j.a = a + bi * ip[EMC_GEMM_A_BSTRIDE], j.a_packed = ip[EMC_GEMM_A_PACKED];
    j.a_rs = j.a_packed ? 1 : k, j.a_ks = j.a_packed ? EMC_MR : 1;
    j.b = b + bi * ip[EMC_GEMM_B_BSTRIDE], j.ldb = n, j.b_packed = ip[EMC_GEMM_B_PACKED];
    j.c = y + bi * (int64_t)(m * n), j.ldc = n;
    j.res = op->in[3] >= 0 ? data_of(d, op->in[3]) + bi * (int64_t)(m * n) : NULL, j.ldr = n;
    j.bias_n = data_of(d, op->in[2]);
    j.mm = clamp_of(op), j.act = post_act(op), j.fp = op->fp;
    run_gemm_job(&j, bj->pool);
  }
}

/* A batch of at least two GEMMs per thread (attention's per-head products) is split over the
 * threads whole GEMMs at a time: one barrier instead of one per GEMM, each GEMM in one L2. */
static em_status run_gemm(const emc_delegate *d, const emc_op *op, em_threadpool *pool) {
  const int64_t batch = op->ip[EMC_GEMM_BATCH];
  const bool split = batch >= 2 * (int64_t)em_threadpool_size(pool);
  gemm_batch_job bj = {d, op, split ? NULL : pool};
  if (split)
    em_parallel_for(pool, batch, gemm_batch, &bj);
  else
    gemm_batch(&bj, 0, batch);
  return EM_OK;
}

/* ---- convolution ------------------------------------------------------------------------- */

typedef struct im2col_job {
  const float *x;   /* [cg, H, W] of one image and group */
  float *col;       /* [cg * kh * kw, OH * OW] as 16-column panels, see EMC_NR_PANEL */
  em_dw_params q;   /* the conv's geometry (its fields as a depthwise conv's) */
  int64_t khw_rows; /* rows of the matrix (cg * kh * kw) */
  const em_cpu_config *cfg;
  /* im2col_strip_padded: the input zero-padded (stride 2: each padded row split into its even
   * then its odd columns), plane after plane; pcols floats a row (per parity), prows rows. */
  float *padded;
  int64_t pcols, prows;
  /* The first output pixel of the matrix's columns (a band of rows: emc_run_chain). */
  int64_t pix0;
} im2col_job;

/* Rows [begin, end) of the im2col matrix, written straight into 16-column panels. */
static void im2col_rows(void *ctx, int64_t begin, int64_t end) {
  const im2col_job *j = ctx;
  const int64_t khw = j->q.kh * j->q.kw, kg = j->khw_rows, pstride = kg * EMC_NR_PANEL;
  for (int64_t r = begin; r < end; r++) {
    int64_t c = r / khw, ky = (r % khw) / j->q.kw, kx = r % j->q.kw;
    const float *plane = j->x + c * j->q.h * j->q.w;
    float *base = j->col + r * EMC_NR_PANEL;
    int64_t off = kx * j->q.dw - j->q.pw;
    int64_t lo = off >= 0 ? 0 : (-off + j->q.sw - 1) / j->q.sw;
    int64_t hi = (j->q.w - 1 - off) < 0 ? 0 : (j->q.w - 1 - off) / j->q.sw + 1;
    if (hi > j->q.ow) hi = j->q.ow;
    if (lo > hi) lo = hi;
    float *dst = base;
    int lane = 0;
    for (int64_t oy = 0; oy < j->q.oh; oy++) {
      int64_t iy = oy * j->q.sh + ky * j->q.dh - j->q.ph;
      const float *src = (iy < 0 || iy >= j->q.h) ? NULL : plane + iy * j->q.w + off;
      for (int64_t ox = 0; ox < j->q.ow; ox++) {
        *dst++ = (src && ox >= lo && ox < hi) ? src[ox * j->q.sw] : 0.0f;
        if (++lane == EMC_NR_PANEL) lane = 0, dst += pstride - EMC_NR_PANEL;
      }
    }
  }
}

/*
 * Rows [k0, k0 + kc), pixels [n0, n0 + nc) of the im2col matrix of j, into dst[kc][ldd]: the
 * GEMM driver's B strip, built in L1 as it goes instead of a [kg, OH * OW] matrix in memory.
 * Pixels run along output rows, so each matrix row is a few contiguous input runs (stride 1:
 * memcpy) with zeros where the window hangs over the padding.
 */
static void im2col_strip(const void *ctx, size_t k0, size_t kc, size_t n0, size_t nc, float *dst,
                         size_t ldd) {
  const im2col_job *j = ctx;
  const int64_t khw = j->q.kh * j->q.kw, oy0 = (int64_t)n0 / j->q.ow, ox0 = (int64_t)n0 % j->q.ow;
  /* (c, ky, kx) of row k0, then stepped row by row (no divisions in the loop). */
  int64_t c = (int64_t)k0 / khw, ky = ((int64_t)k0 % khw) / j->q.kw, kx = (int64_t)k0 % j->q.kw;
  for (size_t r = 0; r < kc; r++) {
    const float *plane = j->x + c * j->q.h * j->q.w;
    const int64_t off = kx * j->q.dw - j->q.pw;
    int64_t lo, hi;
    if (j->q.sw == 1) {
      lo = off >= 0 ? 0 : -off, hi = j->q.w - off;
    } else {
      lo = off >= 0 ? 0 : (-off + j->q.sw - 1) / j->q.sw;
      hi = (j->q.w - 1 - off) < 0 ? 0 : (j->q.w - 1 - off) / j->q.sw + 1;
    }
    if (hi > j->q.ow) hi = j->q.ow;
    if (lo > hi) lo = hi;
    float *d = dst + r * ldd;
    int64_t oy = oy0, ox = ox0;
    for (size_t i = 0; i < nc; oy++, ox = 0) {
      const int64_t run =
          (int64_t)nc - (int64_t)i < j->q.ow - ox ? (int64_t)nc - (int64_t)i : j->q.ow - ox;
      const int64_t iy = oy * j->q.sh + ky * j->q.dh - j->q.ph;
      float *dr = d + i - ox; /* dr[x] is output column x of this run */
      if (iy < 0 || iy >= j->q.h) {
        memset(dr + ox, 0, (size_t)run * sizeof *dr);
      } else {
        const float *src = plane + iy * j->q.w + off;
        int64_t a = ox > lo ? ox : lo, b = ox + run < hi ? ox + run : hi;
        if (a > b) a = b = ox + run;
        for (int64_t x = ox; x < a; x++) dr[x] = 0.0f;
        if (j->q.sw == 1)
          memcpy(dr + a, src + a, (size_t)(b - a) * sizeof *dr);
        else if (j->q.sw == 2) /* the ISA's kernel (AVX-512: two loads, one permute per 16) */
          j->cfg->copy_stride2((size_t)(b - a), src + 2 * a, dr + a);
        else
          for (int64_t x = a; x < b; x++) dr[x] = src[x * j->q.sw];
        for (int64_t x = b; x < ox + run; x++) dr[x] = 0.0f;
      }
      i += (size_t)run;
    }
    if (++kx == j->q.kw) {
      kx = 0;
      if (++ky == j->q.kh) ky = 0, c++;
    }
  }
}

#define EMC_PAD_ROW_MAX 2048 /* widest padded row (per parity) pad_planes takes */

/* dst[0, n) = the row src[0, w) after pw zeros, zeros after it. */
static void zero_padded_row(float *dst, const float *src, int64_t pw, int64_t w, int64_t n) {
  memset(dst, 0, (size_t)pw * sizeof *dst);
  memcpy(dst + pw, src, (size_t)w * sizeof *dst);
  memset(dst + pw + w, 0, (size_t)(n - pw - w) * sizeof *dst);
}

/* Channels [begin, end) of the input into ij->padded (see im2col_job). */
static void pad_planes(void *ctx, int64_t begin, int64_t end) {
  const im2col_job *j = ctx;
  const int64_t s = j->q.sw, pc = j->pcols, row = s * pc; /* floats per padded row, both parities */
  float tmp[2 * EMC_PAD_ROW_MAX + 2];
  for (int64_t c = begin; c < end; c++) {
    const float *src = j->x + c * j->q.h * j->q.w;
    float *dst = j->padded + c * j->prows * row;
    for (int64_t y = 0; y < j->prows; y++) {
      float *d = dst + y * row;
      const int64_t iy = y - j->q.ph;
      if (iy < 0 || iy >= j->q.h) {
        memset(d, 0, (size_t)row * sizeof *d);
        continue;
      }
      const float *r = src + iy * j->q.w;
      if (s == 1) {
        zero_padded_row(d, r, j->q.pw, j->q.w, pc);
      } else { /* the padded row, then its even and odd columns (the ISA's stride-2 copy) */
        zero_padded_row(tmp, r, j->q.pw, j->q.w, 2 * pc + 1);
        j->cfg->copy_stride2((size_t)pc, tmp, d);
        j->cfg->copy_stride2((size_t)pc, tmp + 1, d + pc);
      }
    }
  }
}

/* A depthwise conv op's parameters over an h x w input and an oh x ow output. */
static em_dw_params dw_params_of(const int32_t *ip, int64_t h, int64_t w, int64_t oh, int64_t ow) {
  return (em_dw_params){h,
                        w,
                        oh,
                        ow,
                        ip[EMC_CONV_KH],
                        ip[EMC_CONV_KW],
                        ip[EMC_CONV_SH],
                        ip[EMC_CONV_SW],
                        ip[EMC_CONV_PH],
                        ip[EMC_CONV_PW],
                        ip[EMC_CONV_DH],
                        ip[EMC_CONV_DW]};
}

/* The im2col job of conv parameters ip over one image and group x [cg][h][w] (col: where
 * im2col_rows writes; the padded input not yet set up: padded_floats). */
static im2col_job im2col_of(const emc_delegate *d, const int32_t *ip, const float *x, float *col,
                            int64_t h, int64_t w, int64_t oh, int64_t ow, int64_t kg) {
  im2col_job j;
  memset(&j, 0, sizeof j);
  j.x = x, j.col = col, j.q = dw_params_of(ip, h, w, oh, ow), j.khw_rows = kg, j.cfg = d->cfg;
  return j;
}

/* Sets ij's padded-input geometry (pad_planes, im2col_strip_padded) and returns the floats the
 * padded input of cg channels takes, or 0 when the conv cannot take that path: a stride other
 * than 1 or 2 or not the same both ways, dilation, rows wider than pad_planes takes. */
static size_t padded_floats(im2col_job *ij, int64_t cg) {
  const int64_t s = ij->q.sw;
  if ((s != 1 && s != 2) || ij->q.sh != s || ij->q.dh != 1 || ij->q.dw != 1) return 0;
  ij->prows = (ij->q.oh - 1) * s + ij->q.kh;
  ij->pcols = (int64_t)emc_div_up((size_t)((ij->q.ow - 1) * s + ij->q.kw), (size_t)s);
  if (ij->pcols * s < ij->q.pw + ij->q.w || ij->prows < ij->q.ph || ij->pcols > EMC_PAD_ROW_MAX)
    return 0;
  return (size_t)(cg * ij->prows * s * ij->pcols);
}

/*
 * im2col_strip from the padded input: every run of a matrix row is one contiguous copy (tap
 * (ky, kx) of output pixel (oy, ox) is padded row oy * s + ky, column ox * s + kx: for stride
 * 2, parity kx % 2 at index ox + kx / 2), with no bounds to work out: the per-run bookkeeping
 * of im2col_strip cost more than the copies on strided stems (1.7 cycles a float).
 */
static void im2col_strip_padded(const void *ctx, size_t k0, size_t kc, size_t n0, size_t nc,
                                float *dst, size_t ldd) {
  const im2col_job *j = ctx;
  const int64_t khw = j->q.kh * j->q.kw, s = j->q.sw, pc = j->pcols, row = s * pc;
  const int64_t oy0 = ((int64_t)n0 + j->pix0) / j->q.ow, ox0 = ((int64_t)n0 + j->pix0) % j->q.ow;
  int64_t c = (int64_t)k0 / khw, ky = ((int64_t)k0 % khw) / j->q.kw, kx = (int64_t)k0 % j->q.kw;
  for (size_t r = 0; r < kc; r++) {
    const float *base = j->padded + c * j->prows * row + (s == 1 ? kx : (kx & 1) * pc + (kx >> 1));
    float *d = dst + r * ldd;
    int64_t oy = oy0, ox = ox0;
    for (size_t i = 0; i < nc; oy++, ox = 0) {
      const int64_t run =
          (int64_t)nc - (int64_t)i < j->q.ow - ox ? (int64_t)nc - (int64_t)i : j->q.ow - ox;
      const float *src = base + (oy * s + ky) * row + ox;
      if (run == 32) /* a whole AMX strip: a fixed-size copy the compiler inlines */
        memcpy(d + i, src, 32 * sizeof *d);
      else if (run == 64) /* a whole 6x64 strip */
        memcpy(d + i, src, 64 * sizeof *d);
      else
        memcpy(d + i, src, (size_t)run * sizeof *d);
      i += (size_t)run;
    }
    if (++kx == j->q.kw) {
      kx = 0;
      if (++ky == j->q.kh) ky = 0, c++;
    }
  }
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
  const em_minmax_params none = {-INFINITY, INFINITY};
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
  const em_minmax_params none = {-INFINITY, INFINITY};
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
  const em_minmax_params none = {-INFINITY, INFINITY};
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

typedef struct dw_job {
  const emc_delegate *d;
  const emc_op *op;
  em_dw_params q;
  int64_t c;
  const float *x, *w, *bias;
  float *y;
  em_minmax_params mm;
  int64_t planes, bands; /* dw_bands */
  float *mean;           /* out[1]: each output plane's mean (after the activation), or NULL */
} dw_job;

/* The mean of n floats (four partial sums): the mean operator's rows, a depthwise conv's planes. */
static float plane_mean(const float *x, int64_t n) {
  float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) s0 += x[i], s1 += x[i + 1], s2 += x[i + 2], s3 += x[i + 3];
  for (; i < n; i++) s0 += x[i];
  return ((s0 + s1) + (s2 + s3)) / (float)n;
}

/* Planes [begin, end) of a depthwise conv's out[1] (the banded split leaves it to this). */
static void dw_means(void *ctx, int64_t begin, int64_t end) {
  const dw_job *j = ctx;
  const int64_t out_plane = j->q.oh * j->q.ow;
  for (int64_t p = begin; p < end; p++) j->mean[p] = plane_mean(j->y + p * out_plane, out_plane);
}

/* Blocks [begin, end) of 16 channels (image-major) through cfg->dwconv_c16, then each plane's
 * activation and mean as dw_planes does. */
static void dw_c16_blocks(void *ctx, int64_t begin, int64_t end) {
  const dw_job *j = ctx;
  const int64_t in_plane = j->q.h * j->q.w, out_plane = j->q.oh * j->q.ow, khw = j->q.kh * j->q.kw;
  const int64_t blocks = (j->c + 15) / 16;
  for (int64_t b = begin; b < end; b++) {
    const int64_t c0 = b % blocks * 16, nc = j->c - c0 < 16 ? j->c - c0 : 16;
    const int64_t p0 = b / blocks * j->c + c0; /* the block's first plane */
    float *out = j->y + p0 * out_plane;
    j->d->cfg->dwconv_c16(&j->q, (size_t)nc, j->x + p0 * in_plane, (size_t)in_plane,
                          j->w + c0 * khw, j->bias ? j->bias + c0 : NULL, out, (size_t)out_plane,
                          &j->mm);
    if (post_act(j->op)) j->d->cfg->vact((size_t)(nc * out_plane), out, out, j->op->act, j->op->fp);
    if (j->mean)
      for (int64_t c = 0; c < nc; c++) j->mean[p0 + c] = plane_mean(out + c * out_plane, out_plane);
  }
}

static void dw_planes(void *ctx, int64_t begin, int64_t end) {
  const dw_job *j = ctx;
  const int64_t in_plane = j->q.h * j->q.w, out_plane = j->q.oh * j->q.ow, khw = j->q.kh * j->q.kw;
  for (int64_t p = begin; p < end; p++) {
    int64_t ch = p % j->c;
    float *out = j->y + p * out_plane;
    j->d->cfg->dwconv(&j->q, j->x + p * in_plane, j->w + ch * khw, j->bias ? j->bias[ch] : 0.0f,
                      out, &j->mm);
    if (post_act(j->op)) j->d->cfg->vact((size_t)out_plane, out, out, j->op->act, j->op->fp);
    if (j->mean) j->mean[p] = plane_mean(out, out_plane); /* while the plane is in L1 */
  }
}

/*
 * Band b of `bands` bands of output rows of q as a conv of its own: the output rows
 * [*oy0, *oy0 + sub->oh), the input rows from *iy0 its windows cover (sub->h of them, 0 when all
 * are padding) and the padding left above them (sub->ph).
 */
static void dw_band(const em_dw_params *q, int64_t bands, int64_t b, em_dw_params *sub,
                    int64_t *oy0, int64_t *iy0) {
  const int64_t o0 = b * q->oh / bands, o1 = (b + 1) * q->oh / bands;
  const int64_t top = o0 * q->sh - q->ph, bot = (o1 - 1) * q->sh - q->ph + (q->kh - 1) * q->dh + 1;
  const int64_t i0 = top > 0 ? top : 0, i1 = bot < q->h ? bot : q->h;
  *sub = *q;
  sub->oh = o1 - o0, sub->h = i1 > i0 ? i1 - i0 : 0, sub->ph = i0 - top;
  *oy0 = o0, *iy0 = i0;
}

/*
 * Items [begin, end) of a depthwise conv split into bands of output rows: item i is band
 * i / planes of plane i % planes, so each thread's contiguous range (em_parallel_for_static) is
 * the same rows of every channel. Those are the pixels the 1x1 convs before and after (their
 * GEMMs split by pixel strips) give the thread: the planes stay in its core's L2 instead of
 * half of each crossing to the other core, as a split by channels makes them.
 */
static void dw_bands(void *ctx, int64_t begin, int64_t end) {
  const dw_job *j = ctx;
  const em_dw_params *q = &j->q;
  const int64_t planes = j->planes, in_plane = q->h * q->w, out_plane = q->oh * q->ow;
  const int64_t khw = q->kh * q->kw;
  for (int64_t i = begin; i < end; i++) {
    const int64_t p = i % planes, ch = p % j->c;
    em_dw_params sub;
    int64_t oy0, iy0;
    dw_band(q, j->bands, i / planes, &sub, &oy0, &iy0);
    float *out = j->y + p * out_plane + oy0 * q->ow;
    j->d->cfg->dwconv(&sub, j->x + p * in_plane + iy0 * q->w, j->w + ch * khw,
                      j->bias ? j->bias[ch] : 0.0f, out, &j->mm);
    if (post_act(j->op)) j->d->cfg->vact((size_t)(sub.oh * q->ow), out, out, j->op->act, j->op->fp);
  }
}

/*
 * Whether every band has output rows, reads at least one input row (not all padding) and starts
 * on a cache line of its plane. Bands that share a line write it from two cores at the same
 * moment, plane after plane: 28x28 planes split at row 14 (pixel 392, mid-line) ran 1.6x slower
 * at 2 threads than whole planes (MobileNetV2's 192-channel depthwise convs: 0.061 against
 * 0.039 ms), so those split by planes instead.
 */
static bool dw_bands_ok(const em_dw_params *q, int64_t bands) {
  for (int64_t b = 0; b < bands; b++) {
    em_dw_params sub;
    int64_t oy0, iy0;
    dw_band(q, bands, b, &sub, &oy0, &iy0);
    if (sub.oh < 1 || sub.h < 1 || (oy0 * q->ow) % 16 != 0) return false;
  }
  return true;
}

typedef struct transpose_job {
  const float *ct; /* [npix][co] */
  float *y;        /* [co][npix], rows ldy floats apart */
  int64_t npix, co, ldy;
  /* With a residual [co][npix]: y = act(clamp(ct^T + res)) (the GEMM left both out). */
  const float *res;
  const em_cpu_config *cfg;
  em_minmax_params mm;
  uint32_t act;
  const float *fp;
} transpose_job;

/* Output channels [begin, end) of y = ct^T (with a residual: see transpose_job). */
static void transpose_rows(void *ctx, int64_t begin, int64_t end) {
  const transpose_job *j = ctx;
  j->cfg->transpose((size_t)j->npix, (size_t)(end - begin), j->ct + begin, (size_t)j->co,
                    j->y + begin * j->ldy, (size_t)j->ldy);
  for (int64_t c = begin; c < end; c++) {
    float *y = j->y + c * j->ldy;
    if (j->res) {
      j->cfg->vbin[EMC_BIN_ADD]((size_t)j->npix, y, j->res + c * j->npix, y, &j->mm);
      if (j->act) j->cfg->vact((size_t)j->npix, y, y, j->act, j->fp);
    }
  }
}

/* Rows [begin, end) of the im2col matrix of j, row-major [kg][OH * OW] in j->col. */
static void im2col_rows_rm(void *ctx, int64_t begin, int64_t end) {
  const im2col_job *j = ctx;
  const size_t npix = (size_t)(j->q.oh * j->q.ow);
  im2col_strip(j, (size_t)begin, (size_t)(end - begin), 0, npix, j->col + (size_t)begin * npix,
               npix);
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
    par_for(pool, kg, im2col_rows_rm, ij, kg * npix);
  }
  emc_gemm j;
  gemm_init(&j, d);
  j.m = (size_t)npix, j.k = (size_t)kg, j.n = (size_t)co;
  j.a = direct ? ij->x : a, j.a_packed = 0, j.a_rs = 1, j.a_ks = (size_t)npix;
  j.b = data_of(d, op->in[1]), j.b_packed = 1;
  j.c = ct, j.ldc = (size_t)co;
  j.bias_n = data_of(d, op->in[2]);
  const em_minmax_params none = {-INFINITY, INFINITY};
  j.mm = res ? none : clamp_of(op), j.act = res ? 0 : post_act(op), j.fp = op->fp;
  emc_gemm_run(&j, pool);
  transpose_job tj = {ct, y, npix, co, npix, res, d->cfg, clamp_of(op), post_act(op), op->fp};
  par_for(pool, co, transpose_rows, &tj, co * npix);
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
      transpose_rows(&tj, 0, j->co);
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
static void run_conv_wino(const emc_delegate *d, const emc_op *op, const float *x, float *y,
                          const float *res, int64_t cin, int64_t h, int64_t w, int64_t co,
                          int64_t oh, int64_t ow, em_threadpool *pool) {
  wino_job *j = &(wino_job){0};
  const int64_t m = op->ip[EMC_CONV_WINOGRAD];
  j->d = d, j->op = op, j->x = x, j->y = y, j->res = res;
  j->u = data_of(d, op->in[1]), j->bias = data_of(d, op->in[2]);
  j->scratch =
      (float *)(((uintptr_t)(d->arena + op->ip[EMC_CONV_SCRATCH_OFF]) + 63) & ~(uintptr_t)63);
  j->cin = cin, j->co = co, j->h = h, j->w = w, j->oh = oh, j->ow = ow;
  j->ph = op->ip[EMC_CONV_PH], j->pw = op->ip[EMC_CONV_PW], j->m = m, j->a = m + 2;
  j->tw = (int64_t)emc_div_up((size_t)ow, (size_t)m);
  j->ntiles = j->tw * (int64_t)emc_div_up((size_t)oh, (size_t)m);
  j->transposed = op->ip[EMC_CONV_TRANSPOSED] != 0;
  j->slot_floats = wino_slot_floats(j->a, cin, co, j->transposed);
  j->u_floats = j->transposed ? emc_div_up((size_t)co, EMC_NR_PANEL) * EMC_NR_PANEL * (size_t)cin
                              : emc_div_up((size_t)co, EMC_MR) * EMC_MR * (size_t)cin;
  j->mm = clamp_of(op);
  j->mm_t = res ? (em_minmax_params){-INFINITY, INFINITY} : j->mm;
  const int64_t threads = em_threadpool_size(pool), slots = op->ip[EMC_CONV_WINO_SLOTS];
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

/*
 * Stems (few input channels: MobileNets' 3x3 over RGB) with the direct kernel, cfg->conv_smallc:
 * bands of output rows x blocks of 16 channels, each block's weights regathered from the packed
 * panels into [depth][16] on the stack. MobileNetV3-Small's 3x3 stem, 1 / 2 threads: 0.225 /
 * 0.173 -> 0.155 / 0.101 ms (the GEMM path copied a 27-deep im2col, and its 6-row tiles spent a
 * third of their FMAs on 16 channels).
 */
#define SMALLC_MAX_CIN   4
#define SMALLC_MAX_DEPTH 36 /* 4 channels of 3x3 (7x7 stems ran slower than the AMX path) */
#define SMALLC_BAND      8  /* output rows an item */

typedef struct smallc_job {
  const emc_delegate *d;
  const emc_op *op;
  em_dw_params q;
  int64_t cin, co, kg, blocks, bands;
  const float *x, *w, *bias;
  float *y;
  em_minmax_params mm;
} smallc_job;

/* kg: the conv's depth, cin * kh * kw (groups 1). */
static bool smallc_fits(const emc_delegate *d, const emc_op *op, int64_t cin, int64_t g,
                        int64_t kg) {
  const int32_t *ip = op->ip;
  return d->cfg->conv_smallc && g == 1 && cin <= SMALLC_MAX_CIN && kg <= SMALLC_MAX_DEPTH &&
         ip[EMC_CONV_KW] <= EM_SMALLC_MAX_KW && !ip[EMC_CONV_TRANSPOSED] && op->in[3] < 0 &&
         op->out[1] < 0 && (ip[EMC_CONV_SW] == 1 || ip[EMC_CONV_SW] == 2) && ip[EMC_CONV_DH] == 1 &&
         ip[EMC_CONV_DW] == 1;
}

/* Items [begin, end): image, 16-channel block, band of rows. */
static void smallc_items(void *ctx, int64_t begin, int64_t end) {
  const smallc_job *j = ctx;
  const int64_t plane = j->q.oh * j->q.ow;
  float wb[SMALLC_MAX_DEPTH * 16];
  int64_t built = -1; /* the block wb holds */
  for (int64_t it = begin; it < end; it++) {
    const int64_t b = it / (j->blocks * j->bands), blk = it / j->bands % j->blocks;
    const int64_t oy0 = it % j->bands * SMALLC_BAND,
                  oy1 = oy0 + SMALLC_BAND < j->q.oh ? oy0 + SMALLC_BAND : j->q.oh;
    const int64_t c0 = blk * 16, nco = j->co - c0 < 16 ? j->co - c0 : 16;
    if (built != blk) { /* panel element (row r, depth k): (r / MR) * kg * MR + k * MR + r % MR */
      for (int64_t k = 0; k < j->kg; k++)
        for (int64_t c = 0; c < 16; c++) {
          const int64_t r = c0 + c;
          wb[k * 16 + c] =
              c < nco ? j->w[(r / EMC_MR) * j->kg * EMC_MR + k * EMC_MR + r % EMC_MR] : 0.0f;
        }
      built = blk;
    }
    float *y = j->y + (b * j->co + c0) * plane;
    j->d->cfg->conv_smallc(&j->q, j->cin, oy0, oy1, j->x + b * j->cin * j->q.h * j->q.w, wb,
                           j->bias ? j->bias + c0 : NULL, nco, y, &j->mm);
    const uint32_t act = post_act(j->op);
    if (act)
      for (int64_t c = 0; c < nco; c++) {
        float *rows = y + c * plane + oy0 * j->q.ow;
        j->d->cfg->vact((size_t)((oy1 - oy0) * j->q.ow), rows, rows, act, j->op->fp);
      }
  }
}

static void run_conv_smallc(const emc_delegate *d, const emc_op *op, const float *x, const float *w,
                            const float *bias, float *y, int64_t n, int64_t cin, int64_t h,
                            int64_t wd, int64_t co, int64_t oh, int64_t ow, int64_t kg,
                            em_threadpool *pool) {
  const int32_t *ip = op->ip;
  smallc_job j = {d,
                  op,
                  {h, wd, oh, ow, ip[EMC_CONV_KH], ip[EMC_CONV_KW], ip[EMC_CONV_SH],
                   ip[EMC_CONV_SW], ip[EMC_CONV_PH], ip[EMC_CONV_PW], 1, 1},
                  cin,
                  co,
                  kg,
                  (int64_t)emc_div_up((size_t)co, 16),
                  (int64_t)emc_div_up((size_t)oh, SMALLC_BAND),
                  x,
                  w,
                  bias,
                  y,
                  clamp_of(op)};
  par_for(pool, n * j.blocks * j.bands, smallc_items, &j, n * co * oh * ow * j.kg);
}

static em_status run_conv(const emc_delegate *d, const emc_op *op, em_threadpool *pool) {
  const int32_t *ip = op->ip;
  const emc_rt_tensor *xt = &d->t[op->in[0]], *yt = &d->t[op->out[0]];
  const float *x = xt->data, *w = data_of(d, op->in[1]), *bias = data_of(d, op->in[2]);
  float *y = yt->data;
  const float *res = data_of(d, op->in[3]); /* residual or NULL */
  int64_t n = xt->sizes[0], cin = xt->sizes[1], h = xt->sizes[2], wd = xt->sizes[3];
  int64_t co = yt->sizes[1], oh = yt->sizes[2], ow = yt->sizes[3];
  int64_t g = ip[EMC_CONV_GROUPS], kh = ip[EMC_CONV_KH], kw = ip[EMC_CONV_KW];
  if (ip[EMC_CONV_DEPTHWISE]) {
    dw_job j = {d,
                op,
                dw_params_of(ip, h, wd, oh, ow),
                co,
                x,
                w,
                bias,
                y,
                clamp_of(op),
                n * co,
                (int64_t)em_threadpool_size(pool),
                data_of(d, op->out[1])};
    const int64_t work = yt->numel * kh * kw;
    if (j.bands > 1 && work >= EMC_MIN_PARALLEL_WORK && oh >= 8 * j.bands &&
        dw_bands_ok(&j.q, j.bands)) {
      em_parallel_for_static(pool, j.bands * n * co, dw_bands, &j);
      if (j.mean) par_for(pool, n * co, dw_means, &j, yt->numel);
    } else if (d->cfg->dwconv_c16 && em_dw_c16_fits(&j.q)) {
      /* small planes, 16 at once (7x7 maps; on 14x14 the one-plane kernel wins) */
      par_for_static(pool, n * ((co + 15) / 16), dw_c16_blocks, &j, work);
    } else {
      par_for_static(pool, n * co, dw_planes, &j, work);
    }
    return EM_OK;
  }
  int64_t cg = cin / g, mg = co / g, kg = cg * kh * kw, npix = oh * ow;
  bool direct = kh == 1 && kw == 1 && ip[EMC_CONV_SH] == 1 && ip[EMC_CONV_SW] == 1 &&
                ip[EMC_CONV_PH] == 0 && ip[EMC_CONV_PW] == 0;
  /* room in the scratch for the GEMM's per-thread B strips */
  const bool fits =
      emc_gemm_pack_floats(d->cfg, (size_t)kg, em_threadpool_size(pool)) * sizeof(float) <=
      (size_t)ip[EMC_CONV_SCRATCH_NBYTES];
  const uint32_t *pairs =
      ip[EMC_CONV_PAIRS] ? (const uint32_t *)data_of(d, ip[EMC_CONV_PAIRS] - 1) : NULL;
  /* A transposed conv with bf16 pairs (small maps) runs untransposed from the pairs where the
   * AMX path takes it: 32 x 32 tiles use 49 pixels better than 6 x 64 FMA tiles do either way
   * round. The transposed f32 weights serve every other configuration. */
  bool transposed = ip[EMC_CONV_TRANSPOSED] != 0;
  if (transposed && pairs) {
    emc_gemm t;
    gemm_init(&t, d);
    t.m = (size_t)mg, t.k = (size_t)kg, t.n = (size_t)npix, t.a_pairs = pairs;
    transposed = !emc_gemm_runs_pairs(&t, pool);
  }
  /* An input scale: folded into the copy of B's rows where the GEMM makes one (direct, with
   * room for the copies), else applied to the input in place (validated: private to this op). */
  const float *in_scale = ip[EMC_CONV_IN_SCALE] ? data_of(d, ip[EMC_CONV_IN_SCALE] - 1) : NULL;
  const bool smallc = !ip[EMC_CONV_WINOGRAD] && smallc_fits(d, op, cin, g, kg);
  const bool scale_rows = in_scale && direct && npix > 1 && !transposed && fits && !smallc;
  if (in_scale && !scale_rows) {
    scale_job sj = {(float *)x, in_scale, h * wd, d->cfg};
    par_for_mem(pool, n * cin, scale_planes, &sj, n * cin * h * wd);
    in_scale = NULL;
  }
  if (smallc) {
    run_conv_smallc(d, op, x, w, bias, y, n, cin, h, wd, co, oh, ow, kg, pool);
    return EM_OK;
  }
  if (ip[EMC_CONV_WINOGRAD]) {
    for (int64_t b = 0; b < n; b++)
      run_conv_wino(d, op, x + b * cin * h * wd, y + b * co * npix,
                    res ? res + b * co * npix : NULL, cin, h, wd, co, oh, ow, pool);
    return EM_OK;
  }
  if (direct && npix == 1 && !ip[EMC_CONV_TRANSPOSED]) {
    const conv_gemv_job j = {
        d, op, x, w, bias, res, y, g, cg, mg, kg, emc_div_up((size_t)mg, EMC_MR), clamp_of(op)};
    par_for(pool, n * g * (int64_t)j.panels, conv_gemv, (void *)&j, n * co * kg);
    return EM_OK;
  }
  float *col = (float *)(d->arena + ip[EMC_CONV_SCRATCH_OFF]);
  size_t panel = emc_div_up((size_t)mg, EMC_MR) * EMC_MR * (size_t)kg;
  for (int64_t b = 0; b < n; b++) {
    for (int64_t gi = 0; gi < g; gi++) {
      const float *xg = x + (b * cin + gi * cg) * h * wd;
      im2col_job ij = im2col_of(d, ip, xg, col, h, wd, oh, ow, kg);
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
      if (whole) par_for(pool, kg, im2col_rows, &ij, kg * npix);
      emc_gemm j;
      gemm_init(&j, d);
      j.m = (size_t)mg, j.k = (size_t)kg, j.n = (size_t)npix;
      /* transposed f32 weights are B panels: the pairs path, which alone runs here, never reads A
       */
      j.a = ip[EMC_CONV_TRANSPOSED] ? NULL : w + (size_t)gi * panel, j.a_packed = 1;
      j.a_pairs = pairs;
      j.c = y + (b * co + gi * mg) * npix, j.ldc = (size_t)npix;
      j.res = res ? res + (b * co + gi * mg) * npix : NULL, j.ldr = (size_t)npix;
      j.bias_m = bias ? bias + gi * mg : NULL;
      j.mm = clamp_of(op), j.act = post_act(op), j.fp = op->fp;
      if (whole) { /* a whole im2col matrix in the scratch */
        j.b = col, j.b_packed = 1;
      } else if (!direct) { /* im2col strip by strip, in per-thread scratch */
        j.pack_b = im2col_strip, j.pack_ctx = &ij, j.pack = col;
        /* Stride 1 or 2, undilated, and room after the pack slots: copy runs from a padded
         * input (pad_planes) built once. */
        const size_t pack_floats =
            emc_gemm_pack_floats(d->cfg, (size_t)kg, em_threadpool_size(pool));
        const size_t pad_floats = padded_floats(&ij, cg);
        if (pad_floats && (pack_floats + pad_floats + 16) * sizeof(float) <=
                              (size_t)ip[EMC_CONV_SCRATCH_NBYTES]) {
          ij.padded = (float *)(((uintptr_t)(col + pack_floats) + 63) & ~(uintptr_t)63);
          par_for_mem(pool, cg, pad_planes, &ij, (int64_t)pad_floats);
          j.pack_b = im2col_strip_padded;
        }
      } else {
        /* 1x1: B is the activations themselves, [kg, npix] row-major, copied strip by strip
         * into per-thread scratch (when the planned scratch holds it) as the GEMM goes. */
        j.b = xg, j.ldb = (size_t)npix, j.b_packed = 0;
        if (fits) j.pack = col;
      }
      const scaled_rows sr = {xg, in_scale ? in_scale + b * cin : NULL, (size_t)npix, d->cfg};
      if (in_scale) j.pack_b = scaled_strip, j.pack_ctx = &sr;
      run_gemm_job(&j, pool);
    }
  }
  return EM_OK;
}

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
  g.a_pairs =
      op->ip[EMC_CONV_PAIRS] ? (const uint32_t *)data_of(d, op->ip[EMC_CONV_PAIRS] - 1) : NULL;
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

/* A plain 1x1 conv: one group, stride 1, no padding, weights as they are, no input scale. */
static bool is_1x1(const emc_op *o) {
  const int32_t *ip = o->ip;
  return o->kind == EMC_OP_CONV2D && !ip[EMC_CONV_DEPTHWISE] && ip[EMC_CONV_GROUPS] == 1 &&
         ip[EMC_CONV_KH] == 1 && ip[EMC_CONV_KW] == 1 && ip[EMC_CONV_SH] == 1 &&
         ip[EMC_CONV_SW] == 1 && !ip[EMC_CONV_PH] && !ip[EMC_CONV_PW] && !ip[EMC_CONV_TRANSPOSED] &&
         !ip[EMC_CONV_WINOGRAD] && !ip[EMC_CONV_IN_SCALE] && o->out[1] < 0;
}

/* A depthwise conv without a residual or plane means. */
static bool is_dw(const emc_op *o) {
  return o->kind == EMC_OP_CONV2D && o->ip[EMC_CONV_DEPTHWISE] && o->in[3] < 0 && o->out[1] < 0;
}

/* Tensor t lies in the arena, one image, at least XDW_MIN_BYTES, and only op `reader` reads it. */
static bool chain_inner(const emc_delegate *d, int32_t t, uint32_t reader) {
  const emc_rt_tensor *x = &d->t[t];
  if (x->storage != EMC_ARENA || x->sizes[0] != 1 ||
      (uint64_t)x->numel * sizeof(float) < XDW_MIN_BYTES)
    return false;
  for (uint32_t k = 0; k < d->n_ops; k++) {
    const emc_op *o = &d->ops[k];
    if (k == reader) continue;
    for (int r = 0; r < 4; r++)
      if (o->in[r] == t) return false;
    if (o->kind == EMC_OP_CONV2D &&
        (o->ip[EMC_CONV_IN_SCALE] - 1 == t || o->ip[EMC_CONV_PAIRS] - 1 == t))
      return false;
  }
  return true;
}

/* Whether the bound tensors s and t share any byte. */
static bool overlap(const emc_delegate *d, int32_t s, int32_t t) {
  const uint8_t *a0 = (const uint8_t *)d->t[s].data, *b0 = (const uint8_t *)d->t[t].data;
  const int64_t an = d->t[s].numel * (int64_t)sizeof(float),
                bn = d->t[t].numel * (int64_t)sizeof(float);
  return a0 && b0 && a0 < b0 + bn && b0 < a0 + an;
}

static int cpool_fuse(const emc_delegate *d, uint32_t i);
static bool cpool_run(const emc_delegate *d, uint32_t i, em_threadpool *pool);

int emc_fuse_chain(const emc_delegate *d, uint32_t i) {
  const emc_op *ops = d->ops;
  if (i + 1 < d->n_ops && ops[i + 1].kind == EMC_OP_MAXPOOL2D) return cpool_fuse(d, i);
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
  if (n == 2 && ops[i + 1].kind == EMC_OP_MAXPOOL2D) return cpool_run(d, i, pool);
  xdw_job j;
  j.d = d;
  j.a = ops[i].ip[EMC_CONV_DEPTHWISE] ? NULL : &ops[i]; /* the chain starts with a 1x1 conv */
  j.b = j.a ? &ops[i + 1] : &ops[i];
  j.c = (j.a ? n == 3 : n == 2) ? j.b + 1 : NULL;
  const emc_op *a = j.a, *b = j.b, *c = j.c;
  /* What the chain writes (its inner tensors in blocks, its output in bands) must not share
   * memory with what it reads later: the memory plan may give a tensor that dies inside the
   * chain's span to one born there, and a caller may bind one buffer twice. */
  int32_t ts[5]; /* the tensors it writes, then those it only reads */
  int nt = 0, nw;
  if (a) ts[nt++] = a->out[0];
  ts[nt++] = b->out[0];
  if (c) ts[nt++] = c->out[0];
  nw = nt;
  ts[nt++] = ops[i].in[0];
  if (c && c->in[3] >= 0) ts[nt++] = c->in[3];
  for (int p = 0; p < nw; p++)
    for (int q = p + 1; q < nt; q++)
      if (overlap(d, ts[p], ts[q])) return false;
  const emc_rt_tensor *xt = &d->t[ops[i].in[0]], *bin = &d->t[b->in[0]], *bout = &d->t[b->out[0]];
  j.x = xt->data, j.e = a ? bin->data : NULL, j.dbuf = c ? bout->data : NULL;
  j.y = c ? d->t[c->out[0]].data : bout->data;
  const int64_t h = bin->sizes[2], w = bin->sizes[3];
  j.q = dw_params_of(b->ip, h, w, bout->sizes[2], bout->sizes[3]);
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

/* ---- elementwise ------------------------------------------------------------------------- */

typedef struct bin_job {
  const emc_delegate *d;
  const emc_op *op;
  const float *a, *b;
  float *y;
  int64_t inner; /* elements per row */
  int kind;      /* 0: a, b rows; 1: b scalar per row; 2: a scalar per row */
  uint32_t ndim; /* outer dims */
  int64_t sizes[EMC_MAX_DIMS], as[EMC_MAX_DIMS], bs[EMC_MAX_DIMS];
  em_minmax_params mm;
  float scalar;
} bin_job;

static void bin_row(const bin_job *j, const float *a, const float *b, float *y, size_t n) {
  const em_cpu_config *cfg = j->d->cfg;
  int op = j->op->ip[0];
  if (op == EMC_BIN_RSUB) { /* y = b - a */
    if (j->kind == 0)
      cfg->vbin[EMC_BIN_SUB](n, b, a, y, &j->mm);
    else if (j->kind == 1)
      for (size_t i = 0; i < n; i++) y[i] = fminf(fmaxf(*b - a[i], j->mm.min), j->mm.max);
    else
      cfg->vbinc[EMC_BIN_SUB](n, b, a, y, &j->mm);
  } else if (j->kind == 0) {
    cfg->vbin[op](n, a, b, y, &j->mm);
  } else if (j->kind == 1) {
    cfg->vbinc[op](n, a, b, y, &j->mm);
  } else if (op == EMC_BIN_ADD || op == EMC_BIN_MUL) {
    cfg->vbinc[op](n, b, a, y, &j->mm);
  } else {
    for (size_t i = 0; i < n; i++) {
      float v = op == EMC_BIN_SUB ? *a - b[i] : *a / b[i];
      y[i] = fminf(fmaxf(v, j->mm.min), j->mm.max);
    }
  }
  if (post_act(j->op)) cfg->vact(n, y, y, j->op->act, j->op->fp);
}

static void bin_rows(void *ctx, int64_t begin, int64_t end) {
  const bin_job *j = ctx;
  if (j->ndim == 0) { /* one row split across threads */
    int64_t ao = j->kind == 2 ? 0 : begin, bo = j->kind == 1 ? 0 : begin;
    bin_row(j, j->a + ao, j->b + bo, j->y + begin, (size_t)(end - begin));
    return;
  }
  for (int64_t r = begin; r < end; r++) {
    int64_t rem = r, ao = 0, bo = 0;
    for (int i = (int)j->ndim - 1; i >= 0; i--) {
      int64_t idx = rem % j->sizes[i];
      rem /= j->sizes[i];
      ao += idx * j->as[i], bo += idx * j->bs[i];
    }
    bin_row(j, j->a + ao, j->b + bo, j->y + r * j->inner, (size_t)j->inner);
  }
}

/* Row-major strides of x broadcast against out's rank (0 along broadcast dims). */
static void bcast_strides(const emc_rt_tensor *x, const emc_rt_tensor *y, int64_t *st,
                          int64_t *xs) {
  uint32_t lead = y->ndim - x->ndim;
  int64_t s = 1;
  for (int i = (int)y->ndim - 1; i >= 0; i--) {
    int64_t sz = i < (int)lead ? 1 : x->sizes[i - lead];
    xs[i] = sz;
    st[i] = sz == 1 ? 0 : s;
    s *= sz;
  }
}

static em_status run_binary(const emc_delegate *d, const emc_op *op, em_threadpool *pool) {
  const emc_rt_tensor *at = &d->t[op->in[0]], *yt = &d->t[op->out[0]];
  bin_job j = {0};
  j.d = d, j.op = op, j.a = at->data, j.y = yt->data, j.mm = clamp_of(op), j.scalar = op->fp[2];
  int64_t as[EMC_MAX_DIMS], bs[EMC_MAX_DIMS], asz[EMC_MAX_DIMS], bsz[EMC_MAX_DIMS];
  bcast_strides(at, yt, as, asz);
  if (op->in[1] >= 0) {
    bcast_strides(&d->t[op->in[1]], yt, bs, bsz);
    j.b = d->t[op->in[1]].data;
  } else {
    for (uint32_t i = 0; i < yt->ndim; i++) bs[i] = 0, bsz[i] = 1;
    j.b = &j.scalar;
  }
  /* The innermost block where the roles of a and b stay the same. */
  int nd = (int)yt->ndim, k = nd;
  int kind = -1;
  while (k > 0) {
    int64_t o = yt->sizes[k - 1];
    int ka = asz[k - 1] == o, kb = bsz[k - 1] == o;
    if (o == 1) {
      k--;
      continue;
    }
    int this_kind = (ka && kb) ? 0 : (ka && bsz[k - 1] == 1) ? 1 : (kb && asz[k - 1] == 1) ? 2 : -1;
    if (this_kind < 0 || (kind >= 0 && this_kind != kind)) break;
    kind = this_kind;
    k--;
  }
  if (kind < 0) kind = 0;
  j.kind = kind;
  j.inner = 1;
  for (int i = k; i < nd; i++) j.inner *= yt->sizes[i];
  j.ndim = (uint32_t)k;
  int64_t rows = 1;
  for (int i = 0; i < k; i++)
    j.sizes[i] = yt->sizes[i], j.as[i] = as[i], j.bs[i] = bs[i], rows *= yt->sizes[i];
  if (rows == 1) {
    j.ndim = 0;
    par_for_mem(pool, j.inner, bin_rows, &j, yt->numel);
  } else {
    par_for_mem(pool, rows, bin_rows, &j, yt->numel);
  }
  return EM_OK;
}

typedef struct act_job {
  const emc_delegate *d;
  const emc_op *op;
  const float *x;
  float *y;
} act_job;

static void act_chunk(void *ctx, int64_t begin, int64_t end) {
  const act_job *j = ctx;
  if (j->op->kind == EMC_OP_COPY) {
    if (j->y + begin != j->x + begin)
      memmove(j->y + begin, j->x + begin, (size_t)(end - begin) * sizeof(float));
    if (!j->op->act) return;
    j->d->cfg->vact((size_t)(end - begin), j->y + begin, j->y + begin, j->op->act, j->op->fp);
    return;
  }
  j->d->cfg->vact((size_t)(end - begin), j->x + begin, j->y + begin, j->op->act, j->op->fp);
}

static em_status run_unary(const emc_delegate *d, const emc_op *op, em_threadpool *pool) {
  act_job j = {d, op, data_of(d, op->in[0]), data_of(d, op->out[0])};
  if (op->act > 2) /* transcendental: worth threads from a few thousand elements */
    par_for(pool, d->t[op->out[0]].numel, act_chunk, &j, d->t[op->out[0]].numel * 8);
  else
    par_for_mem(pool, d->t[op->out[0]].numel, act_chunk, &j, d->t[op->out[0]].numel);
  return EM_OK;
}

/* ---- pooling, reductions, rows ------------------------------------------------------------ */

typedef struct pool_job {
  const emc_delegate *d;
  const emc_op *op;
  const float *x;
  float *y;
  int64_t h, w, oh, ow;
} pool_job;

static void pool_planes(void *ctx, int64_t begin, int64_t end) {
  const pool_job *j = ctx;
  const int32_t *ip = j->op->ip;
  const int is_max = j->op->kind == EMC_OP_MAXPOOL2D;
  for (int64_t p = begin; p < end; p++) {
    const float *x = j->x + p * j->h * j->w;
    float *y = j->y + p * j->oh * j->ow;
    for (int64_t oy = 0; oy < j->oh; oy++) {
      for (int64_t ox = 0; ox < j->ow; ox++) {
        int64_t y0 = oy * ip[EMC_POOL_SH] - ip[EMC_POOL_PH],
                x0 = ox * ip[EMC_POOL_SW] - ip[EMC_POOL_PW];
        float acc = is_max ? -INFINITY : 0.0f;
        const int64_t dh = ip[EMC_POOL_DH], dw = ip[EMC_POOL_DW];
        int64_t ky0 = y0 >= 0 ? 0 : (-y0 + dh - 1) / dh, kx0 = x0 >= 0 ? 0 : (-x0 + dw - 1) / dw;
        int64_t ky1 = ip[EMC_POOL_KH], kx1 = ip[EMC_POOL_KW];
        while (ky1 > ky0 && y0 + (ky1 - 1) * dh >= j->h) ky1--;
        while (kx1 > kx0 && x0 + (kx1 - 1) * dw >= j->w) kx1--;
        int64_t cnt = (ky1 - ky0) * (kx1 - kx0);
        for (int64_t ky = ky0; ky < ky1; ky++) {
          const float *row = x + (y0 + ky * dh) * j->w + x0;
          if (is_max)
            for (int64_t kx = kx0; kx < kx1; kx++) {
              float v = row[kx * dw];
              acc = (v > acc || v != v) ? v : acc;
            }
          else
            for (int64_t kx = kx0; kx < kx1; kx++) acc += row[kx * dw];
        }
        if (cnt < 0) cnt = 0;
        if (!is_max) {
          int64_t div = cnt;
          if (ip[EMC_POOL_DIVISOR] > 0)
            div = ip[EMC_POOL_DIVISOR];
          else if (ip[EMC_POOL_INCLUDE_PAD]) {
            /* PyTorch: the window clipped to the padded input. */
            int64_t ye = y0 + ip[EMC_POOL_KH], xe = x0 + ip[EMC_POOL_KW];
            int64_t hp = j->h + ip[EMC_POOL_PH], wp = j->w + ip[EMC_POOL_PW];
            div = ((ye < hp ? ye : hp) - y0) * ((xe < wp ? xe : wp) - x0);
          }
          acc = div > 0 ? acc / (float)div : 0.0f;
        }
        y[oy * j->ow + ox] = acc;
      }
    }
    if (j->op->act) j->d->cfg->vact((size_t)(j->oh * j->ow), y, y, j->op->act, j->op->fp);
  }
}

/* The max pool geometry of op parameters ip over an h x w input and an oh x ow output. */
static em_pool_params pool_geom_of(const int32_t *ip, int64_t h, int64_t w, int64_t oh,
                                   int64_t ow) {
  return (em_pool_params){h,
                          w,
                          oh,
                          ow,
                          ip[EMC_POOL_KH],
                          ip[EMC_POOL_KW],
                          ip[EMC_POOL_SH],
                          ip[EMC_POOL_SW],
                          ip[EMC_POOL_PH],
                          ip[EMC_POOL_PW]};
}

/* Whether max pool op runs separably (the ISA's maxpool): a w-wide input, ow outputs a row. */
static bool pool_separable(const emc_op *op, int64_t w, int64_t ow) {
  const int64_t span = (ow - 1) * op->ip[EMC_POOL_SW] + op->ip[EMC_POOL_KW];
  return op->kind == EMC_OP_MAXPOOL2D && op->ip[EMC_POOL_DH] == 1 && op->ip[EMC_POOL_DW] == 1 &&
         ow > 0 && span <= EM_POOL_ROW_MAX && op->ip[EMC_POOL_PW] + w <= EM_POOL_ROW_MAX;
}

/* Planes [begin, end) of a separable max pool. */
static void maxpool_planes(void *ctx, int64_t begin, int64_t end) {
  const pool_job *j = ctx;
  const em_pool_params q = pool_geom_of(j->op->ip, j->h, j->w, j->oh, j->ow);
  for (int64_t p = begin; p < end; p++) {
    float *y = j->y + p * j->oh * j->ow;
    j->d->cfg->maxpool(&q, j->x + p * j->h * j->w, y);
    if (j->op->act) j->d->cfg->vact((size_t)(j->oh * j->ow), y, y, j->op->act, j->op->fp);
  }
}

static em_status run_pool(const emc_delegate *d, const emc_op *op, em_threadpool *pool) {
  const emc_rt_tensor *xt = &d->t[op->in[0]], *yt = &d->t[op->out[0]];
  pool_job j = {d, op, xt->data, yt->data, xt->sizes[2], xt->sizes[3], yt->sizes[2], yt->sizes[3]};
  const bool separable = pool_separable(op, j.w, j.ow);
  par_for(pool, xt->sizes[0] * xt->sizes[1], separable ? maxpool_planes : pool_planes, &j,
          yt->numel * op->ip[EMC_POOL_KH] * op->ip[EMC_POOL_KW]);
  return EM_OK;
}

/* ---- a conv with the max pool after it, in bands of pooled rows ---------------------------- */

/*
 * A network stem (ResNet: a 7x7 stride-2 conv to 64 x 112 x 112, then a 3x3 stride-2 max pool)
 * writes several MB that the pool reads straight back, both past L2 and, on a model whose weights
 * stream through the caches, the conv's writes to memory that has gone cold. Run as a chain, each
 * thread takes bands of the pool's output rows: the conv computes just the rows their windows
 * read into a block of its output's own buffer that L2 holds, through the same padded input and
 * im2col strips as run_conv (the same sums, so the same bits), then the pool runs over the
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
  const int64_t sh = mp->ip[EMC_POOL_SH], ph = mp->ip[EMC_POOL_PH], kh = mp->ip[EMC_POOL_KH];
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
    g.pack_b = im2col_strip_padded, g.pack_ctx = &ij;
    g.pack = j->pack + (size_t)slot * j->pack_floats;
    if (g.n > 0) emc_gemm_run(&g, NULL);
    j->held[slot][0] = r0, j->held[slot][1] = r1, j->held[slot][2] = band;
    /* the pool over the block: rows r0.. of the conv's output as a plane of r1 - r0 rows */
    em_pool_params q = pool_geom_of(mp->ip, r1 - r0, ow, py1 - py0, j->pow);
    q.ph = mp->ip[EMC_POOL_PH] + r0 - py0 * mp->ip[EMC_POOL_SH];
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
  const int32_t *ip = cv->ip;
  if (cv->kind != EMC_OP_CONV2D || ip[EMC_CONV_DEPTHWISE] || ip[EMC_CONV_GROUPS] != 1 ||
      ip[EMC_CONV_WINOGRAD] || ip[EMC_CONV_TRANSPOSED] || ip[EMC_CONV_IN_SCALE] ||
      ip[EMC_CONV_PAIRS] || cv->in[3] >= 0 || cv->out[1] >= 0 || ip[EMC_CONV_DH] != 1 ||
      ip[EMC_CONV_DW] != 1 || ip[EMC_CONV_SH] != ip[EMC_CONV_SW] ||
      (ip[EMC_CONV_SW] != 1 && ip[EMC_CONV_SW] != 2) || ip[EMC_CONV_KH] * ip[EMC_CONV_KW] < 2)
    return 0;
  const emc_rt_tensor *x = &d->t[cv->in[0]], *c = &d->t[cv->out[0]], *p = &d->t[mp->out[0]];
  if (mp->in[0] != cv->out[0] || !pool_separable(mp, c->sizes[3], p->sizes[3]) ||
      !chain_inner(d, cv->out[0], i + 1) ||
      smallc_fits(d, cv, x->sizes[1], 1, x->sizes[1] * ip[EMC_CONV_KH] * ip[EMC_CONV_KW]))
    return 0;
  return 2;
}

/* Runs conv i and max pool i + 1 as one (cpool_fuse), or returns false (nothing run) when the
 * scratch or the conv's buffer cannot hold the blocks or the pool's output overlaps them. */
static bool cpool_run(const emc_delegate *d, uint32_t i, em_threadpool *pool) {
  const emc_op *cv = &d->ops[i], *mp = &d->ops[i + 1];
  const int32_t *ip = cv->ip;
  const emc_rt_tensor *xt = &d->t[cv->in[0]], *ct = &d->t[cv->out[0]], *pt = &d->t[mp->out[0]];
  if (overlap(d, cv->out[0], mp->out[0]) || overlap(d, cv->in[0], mp->out[0]) ||
      overlap(d, cv->in[0], cv->out[0]))
    return false;
  cpool_job j;
  memset(&j, 0, sizeof j);
  j.d = d, j.cv = cv, j.mp = mp;
  const int64_t cin = xt->sizes[1], oh = ct->sizes[2], ow = ct->sizes[3];
  j.co = ct->sizes[1], j.kg = cin * ip[EMC_CONV_KH] * ip[EMC_CONV_KW];
  j.poh = pt->sizes[2], j.pow = pt->sizes[3];
  j.ij = im2col_of(d, ip, xt->data, NULL, xt->sizes[2], xt->sizes[3], oh, ow, j.kg);
  const size_t pad_floats = padded_floats(&j.ij, cin);
  if (!pad_floats) return false;
  const int64_t threads = em_threadpool_size(pool);
  j.n_slots = (int)(threads < EMC_GEMM_MAX_SLOTS ? threads : EMC_GEMM_MAX_SLOTS);
  /* Pooled rows per band: the most whose conv rows fit the band budget (at least one). */
  const int64_t psh = mp->ip[EMC_POOL_SH], pkh = mp->ip[EMC_POOL_KH];
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
  float *col = (float *)(d->arena + ip[EMC_CONV_SCRATCH_OFF]);
  if ((j.pack_floats * (size_t)j.n_slots + pad_floats + 16) * sizeof(float) >
      (size_t)ip[EMC_CONV_SCRATCH_NBYTES])
    return false;
  j.pack = col;
  j.ij.padded =
      (float *)(((uintptr_t)(col + j.pack_floats * (size_t)j.n_slots) + 63) & ~(uintptr_t)63);
  j.y = pt->data;
  par_for_mem(pool, cin, pad_planes, &j.ij, (int64_t)pad_floats);
  for (int k = 0; k < j.n_slots; k++) {
    atomic_flag_clear(&j.busy[k]);
    j.held[k][0] = j.held[k][1] = 0, j.held[k][2] = -2;
  }
  em_parallel_for_static(pool, j.bands, cpool_bands, &j);
  return true;
}

typedef struct rows_job {
  const emc_delegate *d;
  const emc_op *op;
} rows_job;

static void rows_chunk(void *ctx, int64_t begin, int64_t end) {
  const rows_job *j = ctx;
  const emc_delegate *d = j->d;
  const emc_op *op = j->op;
  const float *x = data_of(d, op->in[0]);
  float *y = data_of(d, op->out[0]);
  const int64_t cols = op->ip[1];
  for (int64_t r = begin; r < end; r++) {
    switch (op->kind) {
    case EMC_OP_MEAN: {
      if (op->ip[2] > 1) { /* reduce the middle of [outer, cols, inner] */
        const int64_t inner = op->ip[2];
        float *yo = y + r * inner;
        for (int64_t i = 0; i < inner; i++) yo[i] = 0.0f;
        for (int64_t l = 0; l < cols; l++) {
          const float *xr = x + (r * cols + l) * inner;
          for (int64_t i = 0; i < inner; i++) yo[i] += xr[i];
        }
        for (int64_t i = 0; i < inner; i++) yo[i] /= (float)cols;
        if (op->act) d->cfg->vact((size_t)inner, yo, yo, op->act, op->fp);
        break;
      }
      y[r] = plane_mean(x + r * cols, cols);
      if (op->act) d->cfg->vact(1, y + r, y + r, op->act, op->fp);
      break;
    }
    case EMC_OP_SOFTMAX: {
      /* x * scale + mask into the output row, in L1; then the softmax there, in place */
      const em_minmax_params none = {-INFINITY, INFINITY};
      const float *xr = x + r * cols;
      float *yr = y + r * cols;
      if (op->ip[4]) {
        d->cfg->vbinc[EMC_BIN_MUL]((size_t)cols, xr, &op->fp[0], yr, &none);
        xr = yr;
      }
      if (op->in[1] >= 0) {
        d->cfg->vbin[EMC_BIN_ADD]((size_t)cols, xr, data_of(d, op->in[1]) + (r % op->ip[5]) * cols,
                                  yr, &none);
        xr = yr;
      }
      d->cfg->softmax((size_t)cols, xr, yr, op->ip[3]);
      break;
    }
    default: /* layer / rms norm */
      d->cfg->norm((size_t)cols, x + r * cols, data_of(d, op->in[1]),
                   op->kind == EMC_OP_LAYERNORM ? data_of(d, op->in[2]) : NULL, op->fp[0],
                   op->kind == EMC_OP_RMSNORM, y + r * cols);
      if (op->act) d->cfg->vact((size_t)cols, y + r * cols, y + r * cols, op->act, op->fp);
      break;
    }
  }
}

static em_status run_rows(const emc_delegate *d, const emc_op *op, em_threadpool *pool) {
  rows_job j = {d, op};
  par_for(pool, op->ip[0], rows_chunk, &j, d->t[op->in[0]].numel * 4);
  return EM_OK;
}

/* ---- data movement ------------------------------------------------------------------------ */

typedef struct permute_job {
  const float *x;
  float *y;
  uint32_t nd;
  int64_t ysz[EMC_MAX_DIMS], xst[EMC_MAX_DIMS]; /* input stride of each output dim */
} permute_job;

/* One output row (last output dim) per item. */
static void permute_rows(void *ctx, int64_t begin, int64_t end) {
  const permute_job *j = ctx;
  const int64_t inner = j->ysz[j->nd - 1], ist = j->xst[j->nd - 1];
  for (int64_t r = begin; r < end; r++) {
    int64_t rem = r, off = 0;
    for (int i = (int)j->nd - 2; i >= 0; i--) {
      off += (rem % j->ysz[i]) * j->xst[i];
      rem /= j->ysz[i];
    }
    float *dst = j->y + r * inner;
    const float *src = j->x + off;
    if (ist == 1)
      memcpy(dst, src, (size_t)inner * sizeof *dst);
    else
      for (int64_t i = 0; i < inner; i++) dst[i] = src[i * ist];
  }
}

static em_status run_permute(const emc_delegate *d, const emc_op *op, em_threadpool *pool) {
  const emc_rt_tensor *xt = &d->t[op->in[0]], *yt = &d->t[op->out[0]];
  permute_job j = {xt->data, yt->data, xt->ndim, {0}, {0}};
  if (yt->numel == 0) return EM_OK;
  if (xt->ndim == 0) {
    j.y[0] = j.x[0];
    return EM_OK;
  }
  /* Zeroed: aarch64 gcc 12 cannot see that ip[] < ndim (validated at init) and warns. */
  int64_t st[EMC_MAX_DIMS] = {0}, s = 1;
  for (int i = (int)xt->ndim - 1; i >= 0; i--) st[i] = s, s *= xt->sizes[i];
  for (uint32_t i = 0; i < xt->ndim; i++) j.ysz[i] = yt->sizes[i], j.xst[i] = st[op->ip[i]];
  par_for_mem(pool, yt->numel / j.ysz[xt->ndim - 1], permute_rows, &j, yt->numel);
  return EM_OK;
}

static em_status run_cat(const emc_delegate *d, const emc_op *op) {
  float *y = data_of(d, op->out[0]);
  int64_t outer = op->ip[0], n_in = op->ip[1], total = 0;
  for (int i = 0; i < n_in; i++) total += op->ip[2 + i];
  for (int64_t o = 0; o < outer; o++) {
    float *dst = y + o * total;
    for (int i = 0; i < n_in; i++) {
      int64_t row = op->ip[2 + i];
      memcpy(dst, data_of(d, op->in[i]) + o * row, (size_t)row * sizeof *dst);
      dst += row;
    }
  }
  if (op->act) d->cfg->vact((size_t)(outer * total), y, y, op->act, op->fp);
  return EM_OK;
}

static em_status run_slice(const emc_delegate *d, const emc_op *op) {
  const float *x = data_of(d, op->in[0]);
  float *y = data_of(d, op->out[0]);
  int64_t outer = op->ip[0], len = op->ip[1], inner = op->ip[2], start = op->ip[3],
          step = op->ip[4], out_len = op->ip[5];
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < out_len; i++)
      memcpy(y + (o * out_len + i) * inner, x + (o * len + start + i * step) * inner,
             (size_t)inner * sizeof *y);
  if (op->act) d->cfg->vact((size_t)(outer * out_len * inner), y, y, op->act, op->fp);
  return EM_OK;
}

typedef struct affine_job {
  const emc_delegate *d;
  const emc_op *op;
} affine_job;

static void affine_planes(void *ctx, int64_t begin, int64_t end) {
  const affine_job *j = ctx;
  const emc_op *op = j->op;
  const float *x = data_of(j->d, op->in[0]), *s = data_of(j->d, op->in[1]),
              *t = data_of(j->d, op->in[2]);
  float *y = data_of(j->d, op->out[0]);
  int64_t c = op->ip[1], inner = op->ip[2];
  em_minmax_params mm = clamp_of(op);
  for (int64_t p = begin; p < end; p++) {
    j->d->cfg->vaffine((size_t)inner, x + p * inner, s[p % c], t[p % c], y + p * inner, &mm);
    if (post_act(op)) j->d->cfg->vact((size_t)inner, y + p * inner, y + p * inner, op->act, op->fp);
  }
}

em_status emc_op_run(const emc_delegate *d, const emc_op *op, em_threadpool *pool) {
  switch (op->kind) {
  case EMC_OP_CONV2D: return run_conv(d, op, pool);
  case EMC_OP_GEMM: return run_gemm(d, op, pool);
  case EMC_OP_BINARY: return run_binary(d, op, pool);
  case EMC_OP_UNARY:
  case EMC_OP_COPY: return run_unary(d, op, pool);
  case EMC_OP_MAXPOOL2D:
  case EMC_OP_AVGPOOL2D: return run_pool(d, op, pool);
  case EMC_OP_MEAN:
  case EMC_OP_SOFTMAX:
  case EMC_OP_LAYERNORM:
  case EMC_OP_RMSNORM: return run_rows(d, op, pool);
  case EMC_OP_PERMUTE: return run_permute(d, op, pool);
  case EMC_OP_CAT: return run_cat(d, op);
  case EMC_OP_SLICE: return run_slice(d, op);
  case EMC_OP_CHANNEL_AFFINE: {
    affine_job j = {d, op};
    par_for_mem(pool, (int64_t)op->ip[0] * op->ip[1], affine_planes, &j, d->t[op->out[0]].numel);
    return EM_OK;
  }
  default: return EM_ERR_INVALID_PROGRAM;
  }
}
