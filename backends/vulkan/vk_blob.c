/*
 * vk_blob.c — EmberVulkanBackend: validates a blob (emv_format.h) and compiles each operator to
 * the dispatch its shader runs.
 *
 * The blob is untrusted. Every tensor must have a known storage type, be aligned to its element
 * size and lie inside the arena (or, for a constant, inside the weights section); every
 * operator's operands must have the shapes its shader assumes, so that no index a shader
 * computes from the push constants leaves the operand it reads or writes. Each dispatch also
 * carries its operands' storage (EMV_PUSH_STORAGE). Nothing here calls Vulkan.
 */
#include <string.h>

#include "ember/platform.h"
#include "vk_internal.h"

#define FAIL(...)                                                                                  \
  do {                                                                                             \
    EM_LOG_ERROR("EmberVulkanBackend: " __VA_ARGS__);                                              \
    return EM_ERR_INVALID_PROGRAM;                                                                 \
  } while (0)

static uint32_t rd32(const uint8_t *p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
}

static uint32_t f2u(float f) {
  uint32_t v;
  memcpy(&v, &f, 4);
  return v;
}

/* Element strides of t's contiguous layout, right-aligned to 4 dims (leading dims size 1). */
static void shape4(const emv_rt_tensor *t, uint32_t sizes[4], uint32_t strides[4]) {
  uint32_t pad = 4u - t->ndim, st = 1;
  for (int d = 3; d >= 0; d--) {
    sizes[d] = (uint32_t)d >= pad ? t->sizes[(uint32_t)d - pad] : 1u;
    strides[d] = st;
    st *= sizes[d];
  }
}

static const emv_rt_tensor *operand(const emv_plan *p, uint32_t idx, uint32_t op, const char *what,
                                    bool optional) {
  if (idx == EMV_NONE && optional) return NULL;
  if (idx >= p->n_tensors) {
    EM_LOG_ERROR("EmberVulkanBackend: op %u: %s is tensor %u of %u", op, what, idx, p->n_tensors);
    return NULL;
  }
  return &p->t[idx];
}

static bool same_shape(const emv_rt_tensor *a, const emv_rt_tensor *b) {
  if (a->ndim != b->ndim) return false;
  for (uint32_t d = 0; d < a->ndim; d++)
    if (a->sizes[d] != b->sizes[d]) return false;
  return true;
}

static bool act_ok(int32_t act) { return act >= EMV_ACT_NONE && act < EMV_ACT_END; }

/* in0 (op) in1 -> out: out must be the broadcast of both (numpy rules, right-aligned). */
static em_status compile_binary(const emv_op *o, uint32_t i, const emv_rt_tensor *a,
                                const emv_rt_tensor *b, const emv_rt_tensor *y, emv_dispatch *dp) {
  if (o->ip[0] < 0 || o->ip[0] >= EMV_BIN_END) FAIL("op %u: binary operator %d", i, o->ip[0]);
  uint32_t as[4], ast[4], bs[4], bst[4], ys[4], yst[4];
  shape4(a, as, ast), shape4(b, bs, bst), shape4(y, ys, yst);
  if (a->ndim > y->ndim || b->ndim > y->ndim)
    FAIL("op %u: binary operand rank above the output's", i);
  for (int d = 0; d < 4; d++) {
    /* each operand matches the output or is 1 there (the output may be wider than both: an
       expand, written as x * 1) */
    if ((as[d] != ys[d] && as[d] != 1) || (bs[d] != ys[d] && bs[d] != 1))
      FAIL("op %u: binary shapes do not broadcast to the output in dim %d (%u, %u -> %u)", i, d,
           as[d], bs[d], ys[d]);
    dp->u[6 + d] = ys[d];
    dp->u[10 + d] = as[d] == 1 ? 0 : ast[d];
    dp->u[14 + d] = bs[d] == 1 ? 0 : bst[d];
  }
  dp->pipe = EMV_PIPE_BINARY;
  dp->u[0] = y->numel, dp->u[2] = a->elem, dp->u[3] = b->elem, dp->u[4] = y->elem;
  dp->u[5] = (uint32_t)o->ip[0];
  return EM_OK;
}

static em_status compile_linear(const emv_op *o, uint32_t i, const emv_rt_tensor *x,
                                const emv_rt_tensor *w, const emv_rt_tensor *b,
                                const emv_rt_tensor *y, emv_dispatch *dp) {
  const int32_t *ip = o->ip;
  for (int k = 0; k < 4; k++)
    if (ip[k] < 1) FAIL("op %u: linear size ip[%d] = %d", i, k, ip[k]);
  uint64_t B = (uint64_t)ip[0], M = (uint64_t)ip[1], K = (uint64_t)ip[2], N = (uint64_t)ip[3];
  if (x->ndim == 0 || y->ndim == 0) FAIL("op %u: linear operands of rank 0", i);
  if ((ip[4] != 0 && ip[4] != 1) || (ip[5] != 0 && ip[5] != 1) || !act_ok(ip[6]))
    FAIL("op %u: linear flags trans_w %d w_batched %d act %d", i, ip[4], ip[5], ip[6]);
  if (x->numel != B * M * K || y->numel != B * M * N || w->numel != (ip[5] ? B : 1) * K * N ||
      x->sizes[x->ndim - 1] != K || y->sizes[y->ndim - 1] != N)
    FAIL("op %u: linear shapes: x %u, w %u, out %u elements for B %d M %d K %d N %d", i, x->numel,
         w->numel, y->numel, ip[0], ip[1], ip[2], ip[3]);
  if (b && b->numel != N) FAIL("op %u: linear bias has %u elements, N is %d", i, b->numel, ip[3]);
  dp->pipe = EMV_PIPE_LINEAR;
  uint32_t *u = dp->u;
  u[0] = y->numel, u[2] = x->elem, u[3] = w->elem, u[4] = b ? b->elem : 0, u[5] = b != NULL;
  u[6] = y->elem, u[7] = (uint32_t)M, u[8] = (uint32_t)K, u[9] = (uint32_t)N;
  u[10] = (uint32_t)ip[4], u[11] = ip[5] ? (uint32_t)(K * N) : 0, u[12] = (uint32_t)ip[6];
  u[13] = f2u(o->fp[0]), u[14] = f2u(o->fp[1]);
  return EM_OK;
}

/* The output extent of a window: floor or (ceil_ok) ceil mode, ATen's rule for the latter (the
   last window must start inside the input or its left padding). 0 when the window does not fit. */
static bool window_out(uint32_t in, int32_t k, int32_t s, int32_t p, int32_t d, uint32_t out,
                       bool ceil_ok) {
  int64_t span = (int64_t)in + 2 * (int64_t)p - (int64_t)d * (k - 1) - 1;
  if (span < 0) return false;
  int64_t fl = span / s + 1;
  if ((int64_t)out == fl) return true;
  if (!ceil_ok) return false;
  int64_t ce = (span + s - 1) / s + 1;
  if ((ce - 1) * s >= (int64_t)in + p) ce--;
  return (int64_t)out == ce;
}

static em_status compile_conv(const emv_op *o, uint32_t i, const emv_rt_tensor *x,
                              const emv_rt_tensor *w, const emv_rt_tensor *b,
                              const emv_rt_tensor *y, emv_dispatch *dp) {
  const int32_t *ip = o->ip;
  if (x->ndim != 4 || w->ndim != 4 || y->ndim != 4) FAIL("op %u: conv2d operands are not 4-d", i);
  for (int k = 0; k < 7; k++) {
    bool pad = k == 2 || k == 3;
    if (ip[k] < (pad ? 0 : 1) || ip[k] > 65536) FAIL("op %u: conv2d ip[%d] = %d", i, k, ip[k]);
  }
  if (!act_ok(ip[7])) FAIL("op %u: conv2d act %d", i, ip[7]);
  uint32_t g = (uint32_t)ip[6], C = x->sizes[1], OC = w->sizes[0];
  if (C % g || OC % g || w->sizes[1] != C / g || y->sizes[0] != x->sizes[0] || y->sizes[1] != OC)
    FAIL("op %u: conv2d channels: input %u, weight [%u, %u], output %u, groups %u", i, C, OC,
         w->sizes[1], y->sizes[1], g);
  if (!window_out(x->sizes[2], (int32_t)w->sizes[2], ip[0], ip[2], ip[4], y->sizes[2], false) ||
      !window_out(x->sizes[3], (int32_t)w->sizes[3], ip[1], ip[3], ip[5], y->sizes[3], false))
    FAIL("op %u: conv2d output %ux%u does not follow from input %ux%u", i, y->sizes[2], y->sizes[3],
         x->sizes[2], x->sizes[3]);
  if (b && b->numel != OC)
    FAIL("op %u: conv2d bias has %u elements for %u channels", i, b->numel, OC);
  dp->pipe = EMV_PIPE_CONV2D;
  uint32_t *u = dp->u;
  u[0] = y->numel, u[2] = x->elem, u[3] = w->elem, u[4] = b ? b->elem : 0, u[5] = b != NULL;
  u[6] = y->elem;
  for (int d = 0; d < 4; d++) u[7 + d] = x->sizes[d];
  u[11] = OC, u[12] = y->sizes[2], u[13] = y->sizes[3], u[14] = w->sizes[2], u[15] = w->sizes[3];
  for (int k = 0; k < 8; k++) u[16 + k] = (uint32_t)ip[k];
  u[24] = f2u(o->fp[0]), u[25] = f2u(o->fp[1]);
  return EM_OK;
}

static em_status compile_pool(const emv_op *o, uint32_t i, const emv_rt_tensor *x,
                              const emv_rt_tensor *y, emv_dispatch *dp) {
  const int32_t *ip = o->ip;
  if (x->ndim != 4 || y->ndim != 4 || x->sizes[0] != y->sizes[0] || x->sizes[1] != y->sizes[1])
    FAIL("op %u: pool2d operands are not [N, C, H, W] of the same N, C", i);
  if (ip[0] != 0 && ip[0] != 1) FAIL("op %u: pool2d kind %d", i, ip[0]);
  for (int k = 1; k < 9; k++) {
    bool pad = k == 5 || k == 6;
    if (ip[k] < (pad ? 0 : 1) || ip[k] > 65536) FAIL("op %u: pool2d ip[%d] = %d", i, k, ip[k]);
  }
  if (ip[5] > ip[1] / 2 || ip[6] > ip[2] / 2)
    FAIL("op %u: pool2d padding above half the kernel", i);
  if ((ip[9] != 0 && ip[9] != 1) || ip[10] < 0 || ip[10] > (1 << 24))
    FAIL("op %u: pool2d count_include_pad %d divisor %d", i, ip[9], ip[10]);
  if (!window_out(x->sizes[2], ip[1], ip[3], ip[5], ip[7], y->sizes[2], true) ||
      !window_out(x->sizes[3], ip[2], ip[4], ip[6], ip[8], y->sizes[3], true))
    FAIL("op %u: pool2d output %ux%u does not follow from input %ux%u", i, y->sizes[2], y->sizes[3],
         x->sizes[2], x->sizes[3]);
  dp->pipe = EMV_PIPE_POOL2D;
  uint32_t *u = dp->u;
  u[0] = y->numel, u[2] = x->elem, u[3] = y->elem, u[4] = x->sizes[2], u[5] = x->sizes[3];
  u[6] = y->sizes[2], u[7] = y->sizes[3];
  for (int k = 0; k < 8; k++) u[8 + k] = (uint32_t)ip[1 + k];
  u[16] = (uint32_t)ip[0], u[17] = (uint32_t)ip[9], u[18] = (uint32_t)ip[10];
  return EM_OK;
}

/* Nearest or bilinear resampling of [N, C, H, W]; the shader clamps every source index to the
   input, so the scales need only be finite and in range. */
static em_status compile_upsample(const emv_op *o, uint32_t i, const emv_rt_tensor *x,
                                  const emv_rt_tensor *y, emv_dispatch *dp) {
  const int32_t *ip = o->ip;
  if (x->ndim != 4 || y->ndim != 4 || x->sizes[0] != y->sizes[0] || x->sizes[1] != y->sizes[1])
    FAIL("op %u: upsample operands are not [N, C, H, W] of the same N, C", i);
  if ((ip[0] != 0 && ip[0] != 1) || ip[1] < 0 || ip[1] > ip[0])
    FAIL("op %u: upsample mode %d align_corners %d", i, ip[0], ip[1]);
  for (int k = 0; k < 2; k++)
    if (!(o->fp[k] >= 0.0f && o->fp[k] <= 16777216.0f))
      FAIL("op %u: upsample scale fp[%d] is not in [0, 2^24]", i, k);
  dp->pipe = EMV_PIPE_UPSAMPLE;
  uint32_t *u = dp->u;
  u[0] = y->numel, u[2] = x->elem, u[3] = y->elem, u[4] = x->sizes[2], u[5] = x->sizes[3];
  u[6] = y->sizes[2], u[7] = y->sizes[3], u[8] = (uint32_t)ip[0], u[9] = (uint32_t)ip[1];
  u[10] = f2u(o->fp[0]), u[11] = f2u(o->fp[1]);
  return EM_OK;
}

/* A gather over index space `sizes` with source / destination strides. */
static void gather(emv_dispatch *dp, uint32_t n, uint32_t src, uint32_t dst, const uint32_t sz[4],
                   const uint32_t sst[4], const uint32_t dst_st[4]) {
  dp->pipe = EMV_PIPE_GATHER;
  dp->u[0] = n, dp->u[2] = src, dp->u[3] = dst;
  for (int d = 0; d < 4; d++)
    dp->u[6 + d] = sz[d], dp->u[10 + d] = sst[d], dp->u[14 + d] = dst_st[d];
}

static em_status compile_shape_op(const emv_op *o, uint32_t i, const emv_rt_tensor *x,
                                  const emv_rt_tensor *y, emv_dispatch *dp) {
  const int32_t *ip = o->ip;
  uint32_t xs[4], xst[4], ys[4], yst[4], sz[4], st[4];
  shape4(x, xs, xst), shape4(y, ys, yst);
  if (o->code == EMV_OP_COPY) {
    if (x->numel != y->numel) FAIL("op %u: copy of %u elements into %u", i, x->numel, y->numel);
    uint32_t n4[4] = {1, 1, 1, x->numel}, z[4] = {0, 0, 0, 1};
    gather(dp, x->numel, x->elem, y->elem, n4, z, z);
    return EM_OK;
  }
  if (o->code == EMV_OP_FILL) {
    uint32_t z[4] = {0, 0, 0, 0};
    if (x->numel != 1) FAIL("op %u: fill value has %u elements", i, x->numel);
    gather(dp, y->numel, x->elem, y->elem, ys, z, yst);
    return EM_OK;
  }
  if (o->code == EMV_OP_PLACE) {
    uint32_t nd = x->ndim, pad = 4u - nd, at = y->elem;
    if (y->ndim != nd || nd == 0) FAIL("op %u: place of rank %u into rank %u", i, nd, y->ndim);
    for (uint32_t d = 0; d < nd; d++) {
      if (ip[d] < 0 || (int64_t)ip[d] + x->sizes[d] > (int64_t)y->sizes[d])
        FAIL("op %u: place of %u at %d in dim %u does not fit %u", i, x->sizes[d], ip[d], d,
             y->sizes[d]);
      at += (uint32_t)ip[d] * yst[pad + d];
    }
    gather(dp, x->numel, x->elem, at, xs, xst, yst);
    return EM_OK;
  }
  if (o->code == EMV_OP_PERMUTE) {
    uint32_t nd = x->ndim, seen = 0, pad = 4u - nd;
    if (y->ndim != nd || nd == 0) FAIL("op %u: permute of rank %u into rank %u", i, nd, y->ndim);
    for (uint32_t d = 0; d < nd; d++) {
      int32_t p = ip[d];
      if (p < 0 || (uint32_t)p >= nd || (seen >> p) & 1u || y->sizes[d] != x->sizes[p])
        FAIL("op %u: permute dim %u is %d", i, d, p);
      seen |= 1u << p;
    }
    for (uint32_t d = 0; d < 4; d++) st[d] = d < pad ? 0 : xst[pad + (uint32_t)ip[d - pad]];
    gather(dp, y->numel, x->elem, y->elem, ys, st, yst);
    return EM_OK;
  }
  int32_t dim = ip[0];
  if (x->ndim != y->ndim || x->ndim == 0 || dim < 0 || (uint32_t)dim >= x->ndim)
    FAIL("op %u: slice / cat dim %d of rank %u into rank %u", i, dim, x->ndim, y->ndim);
  for (uint32_t d = 0; d < x->ndim; d++)
    if ((int32_t)d != dim && x->sizes[d] != y->sizes[d])
      FAIL("op %u: slice / cat operands differ in dim %u", i, d);
  uint32_t d4 = 4u - x->ndim + (uint32_t)dim;
  if (o->code == EMV_OP_SLICE) {
    int64_t start = ip[1], step = ip[2], len = y->sizes[dim];
    if (start < 0 || step < 1 || start + (len - 1) * step >= (int64_t)x->sizes[dim])
      FAIL("op %u: slice [%d::%d] of %u elements does not fit %u", i, ip[1], ip[2], (uint32_t)len,
           x->sizes[dim]);
    memcpy(st, xst, sizeof st);
    st[d4] *= (uint32_t)step;
    gather(dp, y->numel, x->elem + (uint32_t)start * xst[d4], y->elem, ys, st, yst);
    return EM_OK;
  }
  int64_t at = ip[1];
  if (at < 0 || at + x->sizes[dim] > (int64_t)y->sizes[dim])
    FAIL("op %u: cat piece of %u at %d does not fit %u", i, x->sizes[dim], ip[1], y->sizes[dim]);
  memcpy(sz, xs, sizeof sz);
  gather(dp, x->numel, x->elem, y->elem + (uint32_t)at * yst[d4], sz, xst, yst);
  return EM_OK;
}

/* Parameter slots each operator reads (ip, fp); the rest must be 0, so that no bit of an
   operator record goes unchecked. Indexed by EMV_OP_*. */
static const uint8_t used_ip[EMV_OP_END] = {0, 1, 1, 7, 8, 11, 1, 1, 0, 4, 4, 3, 2, 0, 4, 2};
static const uint8_t used_fp[EMV_OP_END] = {0, 2, 0, 2, 2, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2};
_Static_assert(EMV_OP_END == 16, "used_ip / used_fp list every operator");

static em_status compile_op(const emv_plan *p, const emv_op *o, uint32_t i, emv_dispatch *dp) {
  if (o->code < EMV_OP_UNARY || o->code >= EMV_OP_END)
    FAIL("op %u has unknown code %u", i, o->code);
  for (uint32_t k = used_ip[o->code]; k < EMV_OP_IP; k++)
    if (o->ip[k] != 0) FAIL("op %u (code %u): unused ip[%u] is %d, not 0", i, o->code, k, o->ip[k]);
  for (uint32_t k = used_fp[o->code]; k < EMV_OP_FP; k++)
    if (f2u(o->fp[k]) != 0) FAIL("op %u (code %u): unused fp[%u] is not 0", i, o->code, k);
  const emv_rt_tensor *x = operand(p, o->in[0], i, "input 0", false);
  const emv_rt_tensor *y = operand(p, o->out, i, "output", false);
  if (!x || !y) return EM_ERR_INVALID_PROGRAM;
  if (y->weight != EMV_NONE) FAIL("op %u writes constant tensor %u", i, o->out);
  bool two = o->code == EMV_OP_BINARY || o->code == EMV_OP_LINEAR || o->code == EMV_OP_CONV2D;
  bool opt1 = o->code == EMV_OP_LAYERNORM;
  bool three = o->code == EMV_OP_LINEAR || o->code == EMV_OP_CONV2D || o->code == EMV_OP_LAYERNORM;
  const emv_rt_tensor *a1 = NULL, *a2 = NULL;
  if (two || opt1) {
    a1 = operand(p, o->in[1], i, "input 1", opt1);
    if (!a1 && (two || o->in[1] != EMV_NONE)) return EM_ERR_INVALID_PROGRAM;
  } else if (o->in[1] != EMV_NONE) {
    FAIL("op %u (code %u) takes no input 1", i, o->code);
  }
  if (three) {
    a2 = operand(p, o->in[2], i, "input 2", true);
    if (!a2 && o->in[2] != EMV_NONE) return EM_ERR_INVALID_PROGRAM;
  } else if (o->in[2] != EMV_NONE) {
    FAIL("op %u (code %u) takes no input 2", i, o->code);
  }
  uint32_t *u = dp->u;
  /* each operand's storage (shaders/common.glsl ld / st); the compilers below leave this word */
  u[EMV_PUSH_STORAGE] =
      (x->run == EMV_STORAGE_F16 ? 1u : 0u) | (a1 && a1->run == EMV_STORAGE_F16 ? 2u : 0u) |
      (a2 && a2->run == EMV_STORAGE_F16 ? 4u : 0u) | (y->run == EMV_STORAGE_F16 ? 8u : 0u);
  switch (o->code) {
  case EMV_OP_UNARY:
    if (x->numel != y->numel || !act_ok(o->ip[0]))
      FAIL("op %u: unary of %u elements into %u, act %d", i, x->numel, y->numel, o->ip[0]);
    dp->pipe = EMV_PIPE_UNARY;
    u[0] = y->numel, u[2] = x->elem, u[3] = y->elem, u[4] = (uint32_t)o->ip[0];
    u[5] = f2u(o->fp[0]), u[6] = f2u(o->fp[1]);
    return EM_OK;
  case EMV_OP_BINARY: return compile_binary(o, i, x, a1, y, dp);
  case EMV_OP_LINEAR: return compile_linear(o, i, x, a1, a2, y, dp);
  case EMV_OP_CONV2D: return compile_conv(o, i, x, a1, a2, y, dp);
  case EMV_OP_POOL2D: return compile_pool(o, i, x, y, dp);
  case EMV_OP_UPSAMPLE: return compile_upsample(o, i, x, y, dp);
  case EMV_OP_SOFTMAX:
    if (!same_shape(x, y) || x->ndim == 0 || (o->ip[0] != 0 && o->ip[0] != 1))
      FAIL("op %u: softmax shapes or log flag %d", i, o->ip[0]);
    dp->pipe = EMV_PIPE_SOFTMAX;
    u[4] = x->sizes[x->ndim - 1], u[0] = x->numel / u[4], u[2] = x->elem, u[3] = y->elem;
    u[5] = (uint32_t)o->ip[0];
    return EM_OK;
  case EMV_OP_LAYERNORM: {
    int32_t cols = o->ip[0];
    if (!same_shape(x, y) || cols < 1 || x->numel % (uint32_t)cols ||
        (a1 && a1->numel != (uint32_t)cols) || (a2 && a2->numel != (uint32_t)cols) ||
        !(o->fp[0] >= 0.0f && o->fp[0] < 1.0f))
      FAIL("op %u: layer norm over %d columns of %u elements, eps %g", i, cols, x->numel,
           (double)o->fp[0]);
    dp->pipe = EMV_PIPE_LAYERNORM;
    u[0] = x->numel / (uint32_t)cols, u[2] = x->elem, u[3] = a1 ? a1->elem : 0;
    u[4] = a2 ? a2->elem : 0, u[5] = (a1 ? 1u : 0u) | (a2 ? 2u : 0u), u[6] = y->elem;
    u[7] = (uint32_t)cols, u[8] = f2u(o->fp[0]);
    return EM_OK;
  }
  case EMV_OP_MEAN: {
    const int32_t *ip = o->ip;
    if (ip[0] < 1 || ip[1] < 1 || ip[2] < 1 || (ip[3] != 0 && ip[3] != 1) ||
        (uint64_t)ip[0] * (uint64_t)ip[1] * (uint64_t)ip[2] != x->numel ||
        (uint64_t)ip[0] * (uint64_t)ip[2] != y->numel)
      FAIL("op %u: mean [%d, %d, %d] of %u elements into %u", i, ip[0], ip[1], ip[2], x->numel,
           y->numel);
    dp->pipe = EMV_PIPE_MEAN;
    u[0] = y->numel, u[2] = x->elem, u[3] = y->elem, u[4] = (uint32_t)ip[1];
    u[5] = (uint32_t)ip[2], u[6] = (uint32_t)ip[3];
    return EM_OK;
  }
  default: return compile_shape_op(o, i, x, y, dp);
  }
}

static em_status parse_tensors(const uint8_t *b, emv_plan *p) {
  uint64_t top = 0, wtop = 0;
  for (uint32_t i = 0; i < p->n_tensors; i++) {
    emv_tensor r;
    memcpy(&r, b + (size_t)i * sizeof r, sizeof r);
    emv_rt_tensor *t = &p->t[i];
    if (r.ndim > EMV_MAX_DIMS) FAIL("tensor %u: rank %u", i, r.ndim);
    if (r.storage >= EMV_STORAGE_END)
      FAIL("tensor %u: storage type %u (%u: f32, %u: f16)", i, r.storage, EMV_STORAGE_F32,
           EMV_STORAGE_F16);
    uint64_t numel = 1;
    for (uint32_t d = 0; d < EMV_MAX_DIMS; d++) {
      if (d < r.ndim ? r.sizes[d] == 0 : r.sizes[d] != 0)
        FAIL("tensor %u: size %u in dim %u (rank %u)", i, r.sizes[d], d, r.ndim);
      if (d < r.ndim) numel *= r.sizes[d];
      if (numel > (1u << 31)) FAIL("tensor %u: more than 2^31 elements", i);
      t->sizes[d] = r.sizes[d];
    }
    uint32_t es = emv_storage_bytes(r.storage);
    t->offset = r.offset, t->weight = r.weight, t->ndim = r.ndim, t->numel = (uint32_t)numel;
    t->storage = r.storage;
    if (r.offset % es || (r.weight != EMV_NONE && r.weight % es))
      FAIL("tensor %u: offset %u or weight %u is not a multiple of its %u-byte elements", i,
           r.offset, r.weight, es);
    uint64_t end = (uint64_t)r.offset + numel * es;
    if (end > p->arena_bytes)
      FAIL("tensor %u: bytes [%u, %llu) lie outside the %u-byte arena", i, r.offset,
           (unsigned long long)end, p->arena_bytes);
    if (r.weight != EMV_NONE) {
      uint64_t wend = (uint64_t)r.weight + numel * es;
      if (wend > p->weight_bytes)
        FAIL("tensor %u: weight bytes [%u, %llu) lie outside the %u-byte weights section", i,
             r.weight, (unsigned long long)wend, p->weight_bytes);
      if (wend > wtop) wtop = wend;
    }
    if (end > top) top = end;
    p->any_f16 |= r.storage == EMV_STORAGE_F16;
  }
  if (top != p->arena_bytes)
    FAIL("arena_bytes is %u, the tensors end at %llu", p->arena_bytes, (unsigned long long)top);
  if (wtop != p->weight_bytes)
    FAIL("weight_bytes is %u, the constants end at %llu", p->weight_bytes,
         (unsigned long long)wtop);
  return EM_OK;
}

/* Where each tensor runs (emv_rt_tensor.run / elem), then each operator's dispatch. */
static em_status compile_all(emv_plan *p, bool wide) {
  p->wide = wide;
  for (uint32_t i = 0; i < p->n_tensors; i++) {
    emv_rt_tensor *t = &p->t[i];
    t->run = wide ? EMV_STORAGE_F32 : t->storage;
    t->elem = wide ? t->offset / 2u : t->offset / emv_storage_bytes(t->storage);
  }
  for (uint32_t i = 0; i < p->n_ops; i++) {
    emv_op o;
    memcpy(&o, p->ops + (size_t)i * sizeof o, sizeof o);
    memset(&p->dispatch[i], 0, sizeof p->dispatch[i]);
    em_status st = compile_op(p, &o, i, &p->dispatch[i]);
    if (st != EM_OK) return st;
  }
  return EM_OK;
}

em_status emv_plan_widen(emv_plan *p) { return compile_all(p, true); }
static em_status parse_args(const uint8_t *b, uint32_t n, uint32_t *out, const emv_plan *p,
                            const char *what) {
  for (uint32_t i = 0; i < n; i++) {
    out[i] = rd32(b + 4u * i);
    if (out[i] >= p->n_tensors || p->t[out[i]].weight != EMV_NONE)
      FAIL("%s %u is tensor %u (of %u) or a constant", what, i, out[i], p->n_tensors);
  }
  return EM_OK;
}

em_status emv_plan_parse(const void *blob, size_t n, em_allocator *al, emv_plan *p) {
  const uint8_t *b = blob;
  emv_header h;
  memset(p, 0, sizeof *p);
  if (!blob || n < sizeof h) FAIL("blob of %zu bytes has no header", n);
  memcpy(&h, b, sizeof h);
  if (h.magic != EMV_MAGIC) FAIL("bad blob magic 0x%08x", h.magic);
  if (h.version != EMV_VERSION) {
    EM_LOG_ERROR("EmberVulkanBackend: blob version %u, this build reads %u", h.version,
                 EMV_VERSION);
    return EM_ERR_DELEGATE_INVALID_COMPATIBILITY;
  }
  if (h.n_tensors > EMV_MAX_TENSORS || h.n_ops > EMV_MAX_OPS || h.n_inputs > EMV_MAX_ARGS ||
      h.n_outputs > EMV_MAX_ARGS || h.n_tensors == 0 || h.n_outputs == 0)
    FAIL("implausible counts: %u tensors, %u ops, %u inputs, %u outputs", h.n_tensors, h.n_ops,
         h.n_inputs, h.n_outputs);
  uint64_t need = sizeof h + (uint64_t)h.n_tensors * sizeof(emv_tensor) +
                  4ull * (h.n_inputs + h.n_outputs) + (uint64_t)h.n_ops * sizeof(emv_op) +
                  (uint64_t)h.weight_bytes;
  if (need != n) FAIL("blob is %zu bytes, its header describes %llu", n, (unsigned long long)need);
  p->n_tensors = h.n_tensors, p->n_ops = h.n_ops, p->n_inputs = h.n_inputs;
  p->n_outputs = h.n_outputs, p->arena_bytes = h.arena_bytes, p->weight_bytes = h.weight_bytes;
  p->t = em_allocator_alloc(al, sizeof *p->t * h.n_tensors, 8);
  p->inputs = em_allocator_alloc(al, 4u * (h.n_inputs + h.n_outputs) + 4u, 4);
  p->dispatch = em_allocator_alloc(al, sizeof *p->dispatch * (h.n_ops + 1u), 8);
  if (!p->t || !p->inputs || !p->dispatch) {
    EM_LOG_ERROR("EmberVulkanBackend: out of method memory for %u tensors, %u ops", h.n_tensors,
                 h.n_ops);
    return EM_ERR_MEMORY_ALLOCATION_FAILED;
  }
  p->outputs = p->inputs + h.n_inputs;
  const uint8_t *q = b + sizeof h;
  em_status st = parse_tensors(q, p);
  if (st != EM_OK) return st;
  q += (size_t)h.n_tensors * sizeof(emv_tensor);
  if ((st = parse_args(q, h.n_inputs, p->inputs, p, "input")) != EM_OK) return st;
  q += 4u * h.n_inputs;
  if ((st = parse_args(q, h.n_outputs, p->outputs, p, "output")) != EM_OK) return st;
  q += 4u * h.n_outputs;
  p->ops = q;
  p->weights = q + (size_t)h.n_ops * sizeof(emv_op);
  return compile_all(p, false);
}
