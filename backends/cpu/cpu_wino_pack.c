/*
 * cpu_wino_pack.c — Winograd filters transformed at load (EMC_CONV_WINO_AT_LOAD, blob version
 * 9): a conv whose file holds its plain [Co, Cin, 3, 3] weights gets the (m + 2)^2 transformed
 * filters G g G^T at init, in the panel layout cpu_op_wino.c reads, in memory from the method
 * allocator. The file then carries the weights once (4x less for F(4x4) than storing the
 * transform); the run is the same. Computed in double, one (out, in) pair at a time, in the
 * exporter's order of operations (python/ember/backends/cpu/packing.py, _winograd_filters), so
 * the filters are bit-identical to the ones a file would store.
 *
 * An int8 conv with a Winograd alternative (EMC_CONV_Q8_WINO, version 10) goes the same way on a
 * CPU that prefers f32 Winograd to int8 products (emc_wino_pack_at_load's q8_wino): its filters
 * come from the int8 panels, each weight q * s_w in f32 as the program's dequantize computes it,
 * and the operator is rewritten into the f32 Winograd conv the file would otherwise describe.
 */
#include <string.h>

#include "cpu_ops.h"

/* Filter transforms G (a x 3) for m = 2 and m = 4 (F(4, 3) on the points 0, +-1, +-2, inf). */
static const double G2[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
static const double G4[6][3] = {
    {1.0 / 4, 0, 0},
    {-1.0 / 6, -1.0 / 6, -1.0 / 6},
    {-1.0 / 6, 1.0 / 6, -1.0 / 6},
    {1.0 / 24, 1.0 / 12, 1.0 / 6},
    {1.0 / 24, -1.0 / 12, 1.0 / 6},
    {0, 0, 1},
};

enum { LANES = 32 };  /* filters transformed side by side (the loops over them vectorize) */
enum { FROM_Q8 = 2 }; /* ip[EMC_CONV_WINO_AT_LOAD] while an int8 conv awaits its transform */

/* A conv's 3x3 weights: plain f32 [co][cin][3][3], or an int8 conv's panels [ceil(co / 6)][kq]
 * [6][4] (depth order ky, kx, channel; channels padded to cp) with the weights' scales sw. */
typedef struct wsrc {
  const float *plain;
  const int8_t *q;
  const float *sw;
  int64_t co, cin, cp, kq;
} wsrc;

/* Weight (o, c, k = 3 ky + kx) in double: as stored, or q * s_w rounded to f32 first. */
static double weight_at(const wsrc *s, int64_t o, int64_t c, int k) {
  if (s->plain) return (double)s->plain[(o * s->cin + c) * 9 + k];
  const int64_t depth = k * s->cp + c;
  const int8_t v =
      s->q[((o / EMC_MR) * s->kq + depth / 4) * EMC_MR * 4 + o % EMC_MR * 4 + depth % 4];
  return (double)((float)v * s->sw[o]);
}

/* u[xi][l] = (G g_l G^T)[xi] for the n <= LANES filters x[.][l] (3x3, row major, in double),
 * as t = G g, then u = t G^T; every sum left to right, in double, each product rounded on its
 * own (no fused multiply-add: ISO C mode does not contract). */
static void transform_filters(double x[9][LANES], int n, int a, const double (*G)[3],
                              double u[36][LANES]) {
  double t[6][3][LANES];
  for (int p = 0; p < a; p++)
    for (int j = 0; j < 3; j++) {
      const double g0 = G[p][0], g1 = G[p][1], g2 = G[p][2];
      for (int l = 0; l < n; l++) {
        const double s0 = g0 * x[j][l], s1 = g1 * x[3 + j][l], s2 = g2 * x[6 + j][l];
        t[p][j][l] = (s0 + s1) + s2;
      }
    }
  for (int p = 0; p < a; p++)
    for (int q = 0; q < a; q++) {
      const double g0 = G[q][0], g1 = G[q][1], g2 = G[q][2];
      for (int l = 0; l < n; l++) {
        const double s0 = t[p][0][l] * g0, s1 = t[p][1][l] * g1, s2 = t[p][2][l] * g2;
        u[p * a + q][l] = (s0 + s1) + s2;
      }
    }
}

/* How many of the ops' tensor slots (in[], out[], and the conv ids held in ip[]) name id. */
static uint32_t uses_of(const emc_op *ops, uint32_t n_ops, int32_t id) {
  uint32_t n = 0;
  for (uint32_t i = 0; i < n_ops; i++) {
    const emc_op *op = &ops[i];
    for (int k = 0; k < 4; k++) n += op->in[k] == id;
    for (int k = 0; k < 2; k++) n += op->out[k] == id;
    if (op->kind == EMC_OP_CONV2D) {
      const emc_conv_params p = emc_conv_params_of(op);
      n += (p.pairs_id == id) + (p.in_scale_id == id) + (p.q8_id == id);
    }
  }
  return n;
}

/* The weights of an int8 conv awaiting its transform (FROM_Q8), checked: 0 with a reason in why
 * when the conv or its tensors do not fit the int8 layout. */
static bool q8_source(const emc_delegate *d, const emc_op *op, wsrc *s, char *why, size_t why_n) {
  const emc_conv_params p = emc_conv_params_of(op);
  const emc_rt_tensor *x = tensor_at(d, op->in[0]), *y = tensor_at(d, op->out[0]);
  const emc_rt_tensor *w = tensor_at(d, op->in[1]), *t = tensor_at(d, (int32_t)p.q8_id);
  const char *bad = !x || !y || !w || !t || x->ndim != 4 || y->ndim != 4 ? "bad tensors"
                    : p.groups != 1 || p.kh != 3 || p.kw != 3 || p.sh != 1 || p.sw != 1 ||
                            p.dh != 1 || p.dw != 1 || p.depthwise || p.transposed ||
                            p.pairs_id >= 0 || p.in_scale_id >= 0
                        ? "not an ungrouped 3x3, stride-1, undilated conv"
                    : !is_const(w) || !is_const(t) ? "weights or channel table not constants"
                                                   : NULL;
  if (bad) {
    snprintf(why, why_n, "int8 conv with a Winograd alternative: %s", bad);
    return false;
  }
  s->plain = NULL, s->co = y->sizes[1], s->cin = x->sizes[1], s->cp = (s->cin + 3) / 4 * 4;
  s->kq = 9 * s->cp / 4;
  if (s->co < 1 || s->cin < 1 || s->cp * 9 > 65536 || t->numel != 3 * s->co ||
      w->numel != (s->co + EMC_MR - 1) / EMC_MR * s->kq * EMC_MR) {
    snprintf(why, why_n,
             "int8 conv with a Winograd alternative: weights or table do not match "
             "%lld -> %lld channels",
             (long long)s->cin, (long long)s->co);
    return false;
  }
  s->q = (const int8_t *)w->data, s->sw = t->data + 2 * s->co;
  return true;
}

/* Checks one flagged conv and returns the floats of its transformed filters (0 with a reason
 * in why when it is invalid). */
static int64_t transformed_floats(const emc_delegate *d, const emc_op *ops, uint32_t i, char *why,
                                  size_t why_n) {
  const emc_conv_params p = emc_conv_params_of(&ops[i]);
  if (p.wino_at_load == FROM_Q8) {
    wsrc s;
    if (!q8_source(d, &ops[i], &s, why, why_n)) return 0;
    if (uses_of(ops, d->n_ops, ops[i].in[1]) != 1) {
      snprintf(why, why_n, "int8 weights to transform at load are read by another operator too");
      return 0;
    }
    const int64_t a = p.q8_wino + 2, per_xi = (s.co + EMC_MR - 1) / EMC_MR * EMC_MR * s.cin;
    if (per_xi * a * a > ((int64_t)1 << 40)) { /* per_xi < 2^45: cin * 9 <= 65536 */
      snprintf(why, why_n, "transformed weights too large");
      return 0;
    }
    return (per_xi * a * a + 15) / 16 * 16;
  }
  if (p.winograd != 2 && p.winograd != 4) {
    snprintf(why, why_n, "Winograd at load needs a Winograd tile of 2 or 4, not %lld",
             (long long)p.winograd);
    return 0;
  }
  if (p.transposed != 0 && p.transposed != 1) {
    snprintf(why, why_n, "transposed flag %lld", (long long)p.transposed);
    return 0;
  }
  const int32_t wid = ops[i].in[1];
  const emc_rt_tensor *w = wid >= 0 && (uint32_t)wid < d->n_tensors ? &d->t[wid] : NULL;
  const char *bad =
      !w                        ? "weight tensor id out of range"
      : w->storage != EMC_CONST ? "weights to transform at load are not a constant"
      : uses_of(ops, d->n_ops, wid) != 1
          ? "weights to transform at load are read by another operator too"
      : (w->ndim != 4 || w->sizes[2] != 3 || w->sizes[3] != 3 || w->sizes[0] < 1 || w->sizes[1] < 1)
          ? "weights to transform at load are not [Co, Cin, 3, 3]"
          : NULL;
  if (bad) {
    snprintf(why, why_n, "%s (tensor %d)", bad, wid);
    return 0;
  }
  const int64_t a = p.winograd + 2, lanes = p.transposed ? EMC_NR_PANEL : EMC_MR;
  const int64_t per_xi = (w->sizes[0] + lanes - 1) / lanes * lanes * w->sizes[1]; /* < 2^45 */
  int64_t total;
  if (__builtin_mul_overflow(per_xi, a * a, &total) || total > ((int64_t)1 << 40)) {
    snprintf(why, why_n, "transformed weights too large");
    return 0;
  }
  return (total + 15) / 16 * 16; /* each conv's filters 64-byte aligned */
}

/* Transforms one checked conv's weights into u and re-points its weight tensor there. The
 * filters go panel by panel in the order the panels hold them — A panels [co / 6][cin][6] (row
 * o, column c), or B panels of U^T [co / 16][cin][16] (row c, column o) — so that each element
 * xi's filters are written front to back; rows past co are zero. */
static void transform_conv(emc_delegate *d, emc_op *op, float *u) {
  const emc_conv_params p = emc_conv_params_of(op);
  emc_rt_tensor *w = &d->t[op->in[1]];
  wsrc src = {.plain = w->data, .co = w->sizes[0], .cin = w->sizes[1]};
  const bool from_q8 = p.wino_at_load == FROM_Q8;
  char unused[8];
  if (from_q8) (void)q8_source(d, op, &src, unused, sizeof unused); /* checked before */
  const int64_t m = from_q8 ? p.q8_wino : p.winograd;
  const int64_t co = src.co, cin = src.cin, a = m + 2;
  const int64_t lanes = p.transposed ? EMC_NR_PANEL : EMC_MR, cstep = LANES / lanes;
  const int64_t per_xi = (co + lanes - 1) / lanes * lanes * cin;
  const double(*G)[3] = m == 4 ? G4 : G2;
  double x[9][LANES], f[36][LANES];
  for (int64_t o0 = 0; o0 < co; o0 += lanes) {
    for (int64_t c0 = 0; c0 < cin; c0 += cstep) {
      const int64_t nc = cin - c0 < cstep ? cin - c0 : cstep;
      const int n = (int)(nc * lanes); /* filter l: channel c0 + l / lanes, output o0 + l % lanes */
      for (int l = 0; l < n; l++) {
        const int64_t o = o0 + l % lanes, c = c0 + l / lanes;
        for (int k = 0; k < 9; k++) x[k][l] = o < co ? weight_at(&src, o, c, k) : 0.0;
      }
      transform_filters(x, n, (int)a, G, f);
      float *dst = u + o0 * cin + c0 * lanes;
      for (int64_t xi = 0; xi < a * a; xi++, dst += per_xi)
        for (int l = 0; l < n; l++) dst[l] = o0 + l % lanes < co ? (float)f[xi][l] : 0.0f;
    }
  }
  w->data = u, w->numel = a * a * per_xi, w->ndim = 1, w->sizes[0] = w->numel;
  if (from_q8) { /* now the f32 Winograd conv (its slots and scratch were sized for it) */
    op->ip[EMC_CONV_WINOGRAD] = (int32_t)m, op->ip[EMC_CONV_WINO_AT_LOAD] = 1;
    op->ip[EMC_CONV_Q8] = op->ip[EMC_CONV_Q8_ZP] = op->ip[EMC_CONV_Q8_LO] = 0;
    op->ip[EMC_CONV_Q8_HI] = op->ip[EMC_CONV_Q8_WINO] = 0, op->fp[EMC_CONV_FP_Q8_INV] = 0.0f;
  }
}

/* An int8 conv about to run as f32 Winograd reads and writes f32: the convs on the other side of
 * its u8 tensors (EMC_CONV_Q8_U8) then write and read f32 too (the same values: a u8 value is
 * what the reader's quantizer makes of the writer's fake-quantized f32). */
static void unlink_u8(emc_op *ops, uint32_t n_ops, uint32_t i) {
  const int32_t u8 = ops[i].ip[EMC_CONV_Q8_U8];
  for (uint32_t k = 0; k < n_ops; k++) {
    if (ops[k].kind != EMC_OP_CONV2D || k == i) continue;
    if ((u8 & EMC_Q8_U8_IN) && ops[k].out[0] == ops[i].in[0])
      ops[k].ip[EMC_CONV_Q8_U8] &= ~EMC_Q8_U8_OUT;
    if ((u8 & EMC_Q8_U8_OUT) && ops[k].in[0] == ops[i].out[0])
      ops[k].ip[EMC_CONV_Q8_U8] &= ~EMC_Q8_U8_IN;
  }
  ops[i].ip[EMC_CONV_Q8_U8] = 0;
}

/* Whether conv i shares a u8 tensor with an operator that runs on u8 only (an int8 depthwise
 * conv, an int8 add, a u8 max pool, a u8 table lookup): conv i then keeps its int8 form. */
static bool u8_pinned(const emc_op *ops, uint32_t n_ops, uint32_t i) {
  const int32_t u8 = ops[i].ip[EMC_CONV_Q8_U8];
  const int32_t in = (u8 & EMC_Q8_U8_IN) ? ops[i].in[0] : -2;
  const int32_t out = (u8 & EMC_Q8_U8_OUT) ? ops[i].out[0] : -2;
  for (uint32_t k = 0; k < n_ops; k++) {
    const emc_op *o = &ops[k];
    const bool u8_only =
        (o->kind == EMC_OP_CONV2D && o->ip[EMC_CONV_DEPTHWISE] && o->ip[EMC_CONV_Q8] > 0) ||
        (o->kind == EMC_OP_BINARY && o->ip[EMC_BINARY_Q8]) ||
        (o->kind == EMC_OP_MAXPOOL2D && o->ip[EMC_POOL_Q8]) ||
        (o->kind == EMC_OP_UNARY && o->ip[EMC_UNARY_Q8]);
    if (k == i || !u8_only) continue;
    if (o->out[0] == in || o->in[0] == out || (o->kind == EMC_OP_BINARY && o->in[1] == out))
      return true;
  }
  return false;
}

em_status emc_wino_pack_at_load(emc_delegate *d, emc_op *ops, bool q8_wino, em_allocator *al,
                                char *why, size_t why_n) {
  /* Every flagged conv checked and sized first, one allocation, then the transforms: a method
   * allocator too small (the module grows it and tries again) costs no transform. */
  int64_t total = 0;
  for (uint32_t i = 0; i < d->n_ops; i++) {
    if (ops[i].kind != EMC_OP_CONV2D) continue;
    const int64_t flag = emc_conv_params_of(&ops[i]).wino_at_load;
    if (flag != 0 && flag != 1) {
      snprintf(why, why_n, "operator %u: Winograd-at-load flag %lld", i, (long long)flag);
      return EM_ERR_INVALID_PROGRAM;
    }
    const emc_conv_params p = emc_conv_params_of(&ops[i]);
    if (q8_wino && flag == 0 && p.q8_id >= 0 && (p.q8_wino == 2 || p.q8_wino == 4) &&
        !u8_pinned(ops, d->n_ops, i)) {
      ops[i].ip[EMC_CONV_WINO_AT_LOAD] = FROM_Q8; /* this CPU runs it as f32 Winograd */
      unlink_u8(ops, d->n_ops, i);
    } else if (flag == 0)
      continue;
    char sub[160];
    const int64_t n = transformed_floats(d, ops, i, sub, sizeof sub);
    if (n == 0 || total > ((int64_t)1 << 40)) {
      snprintf(why, why_n, "operator %u (conv2d): %s", i,
               n ? "transformed weights too large" : sub);
      return EM_ERR_INVALID_PROGRAM;
    }
    total += n;
  }
  if (total == 0) return EM_OK;
  float *u = em_allocator_alloc(al, (size_t)total * sizeof(float), 64);
  if (!u) {
    snprintf(why, why_n, "method allocator too small for %lld bytes of Winograd filters",
             (long long)total * (long long)sizeof(float));
    return EM_ERR_MEMORY_ALLOCATION_FAILED;
  }
  for (uint32_t i = 0; i < d->n_ops; i++) {
    if (ops[i].kind != EMC_OP_CONV2D || emc_conv_params_of(&ops[i]).wino_at_load == 0) continue;
    char sub[8];
    const int64_t n = transformed_floats(d, ops, i, sub, sizeof sub);
    transform_conv(d, &ops[i], u);
    u += n;
  }
  return EM_OK;
}
