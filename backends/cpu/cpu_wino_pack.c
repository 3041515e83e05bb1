/*
 * cpu_wino_pack.c — Winograd filters transformed at load (EMC_CONV_WINO_AT_LOAD, blob version
 * 9): a conv whose file holds its plain [Co, Cin, 3, 3] weights gets the (m + 2)^2 transformed
 * filters G g G^T at init, in the panel layout cpu_op_wino.c reads, in memory from the method
 * allocator. The file then carries the weights once (4x less for F(4x4) than storing the
 * transform); the run is the same. Computed in double, one (out, in) pair at a time, in the
 * exporter's order of operations (python/ember/backends/cpu/packing.py, _winograd_filters), so
 * the filters are bit-identical to the ones a file would store.
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

enum { LANES = 32 }; /* filters transformed side by side (the loops over them vectorize) */

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

/* Checks one flagged conv and returns the floats of its transformed filters (0 with a reason
 * in why when it is invalid). */
static int64_t transformed_floats(const emc_delegate *d, const emc_op *ops, uint32_t i, char *why,
                                  size_t why_n) {
  const emc_conv_params p = emc_conv_params_of(&ops[i]);
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
static void transform_conv(emc_delegate *d, const emc_op *op, float *u) {
  const emc_conv_params p = emc_conv_params_of(op);
  emc_rt_tensor *w = &d->t[op->in[1]];
  const int64_t co = w->sizes[0], cin = w->sizes[1], a = p.winograd + 2;
  const int64_t lanes = p.transposed ? EMC_NR_PANEL : EMC_MR, cstep = LANES / lanes;
  const int64_t per_xi = (co + lanes - 1) / lanes * lanes * cin;
  const double(*G)[3] = p.winograd == 4 ? G4 : G2;
  double x[9][LANES], f[36][LANES];
  for (int64_t o0 = 0; o0 < co; o0 += lanes) {
    for (int64_t c0 = 0; c0 < cin; c0 += cstep) {
      const int64_t nc = cin - c0 < cstep ? cin - c0 : cstep;
      const int n = (int)(nc * lanes); /* filter l: channel c0 + l / lanes, output o0 + l % lanes */
      for (int l = 0; l < n; l++) {
        const int64_t o = o0 + l % lanes, c = c0 + l / lanes;
        const float *g = o < co ? w->data + (o * cin + c) * 9 : NULL;
        for (int k = 0; k < 9; k++) x[k][l] = g ? (double)g[k] : 0.0;
      }
      transform_filters(x, n, (int)a, G, f);
      float *dst = u + o0 * cin + c0 * lanes;
      for (int64_t xi = 0; xi < a * a; xi++, dst += per_xi)
        for (int l = 0; l < n; l++) dst[l] = o0 + l % lanes < co ? (float)f[xi][l] : 0.0f;
    }
  }
  w->data = u, w->numel = a * a * per_xi, w->ndim = 1, w->sizes[0] = w->numel;
}

em_status emc_wino_pack_at_load(emc_delegate *d, const emc_op *ops, em_allocator *al, char *why,
                                size_t why_n) {
  /* Every flagged conv checked and sized first, one allocation, then the transforms: a method
   * allocator too small (the module grows it and tries again) costs no transform. */
  int64_t total = 0;
  for (uint32_t i = 0; i < d->n_ops; i++) {
    if (ops[i].kind != EMC_OP_CONV2D) continue;
    const int64_t flag = emc_conv_params_of(&ops[i]).wino_at_load;
    if (flag == 0) continue;
    if (flag != 1) {
      snprintf(why, why_n, "operator %u: Winograd-at-load flag %lld", i, (long long)flag);
      return EM_ERR_INVALID_PROGRAM;
    }
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
    if (ops[i].kind != EMC_OP_CONV2D || emc_conv_params_of(&ops[i]).wino_at_load != 1) continue;
    char sub[8];
    const int64_t n = transformed_floats(d, ops, i, sub, sizeof sub);
    transform_conv(d, &ops[i], u);
    u += n;
  }
  return EM_OK;
}
