/*
 * cpu_op_qdw.c — the int8 depthwise convs' weights for the VNNI dot-product row
 * (q8_dwdot__avx512vnni.c): which windows it takes, and their tables repacked at init.
 *
 * Per 64-channel block: the negated zero-point corrections (int32), scales and biases, each as
 * [4][16] in the row's interleaved order (vector k, 128-bit lane L, lane j: channel 16 L + 4 k +
 * j), then per tap row the weight variants [G outputs][P packs][4][64]: for output g and pack
 * pk, a channel's 4 bytes are the taps under the pack's 4 columns (tap 4 pk + b - S g for column
 * b, zero outside the window). Channels past the conv's are zero everywhere.
 */
#include <math.h>
#include <string.h>

#include "cpu_ops.h"

size_t em_q8_dwdot_group(size_t k, size_t s, size_t *packs) {
  size_t g = 0;
  if (k == 3) g = s == 1 ? 2 : s == 2 ? 1 : 0;
  if (k == 5) g = s == 1 ? 4 : s == 2 ? 2 : 0;
  if (packs) *packs = g ? (s * (g - 1) + k + 3) / 4 : 0;
  return g;
}

size_t em_q8_dwdot_block_bytes(size_t k, size_t s) {
  size_t p;
  const size_t g = em_q8_dwdot_group(k, s, &p);
  return 768 + k * g * p * 256;
}

bool em_q8_dwdot_pack(size_t k, size_t s, size_t ch, size_t cw, const float *w, const float *scale,
                      const float *corr, const float *bias, int8_t *dst) {
  size_t np;
  const size_t g = em_q8_dwdot_group(k, s, &np), bb = em_q8_dwdot_block_bytes(k, s);
  if (!g) return false;
  for (size_t c = 0; c < ch; c++) { /* integers of the int32 sums' range only */
    const float cr = corr[c];
    if (!(fabsf(cr) < 16777216.0f) || cr != (float)(int32_t)cr) return false;
    for (size_t t = 0; t < k * k; t++) {
      const float v = w[t * cw + c];
      if (!(v >= -128.0f && v <= 127.0f) || v != (float)(int32_t)v) return false;
    }
  }
  const size_t blocks = (ch + 63) / 64, cb = ch <= 32 ? 32 : 64;
  memset(dst, 0, blocks * bb);
  for (size_t b = 0; b < blocks; b++) {
    int8_t *blk = dst + b * bb;
    int32_t ncorr[64];
    float sc[64], bi[64];
    for (size_t i = 0; i < 64; i++) { /* slot i = 16 k + lane: channel 16 L + 4 k + j */
      const size_t kk = i / 16, lane = i % 16;
      const size_t at = 16 * (lane / 4) + 4 * kk + lane % 4, c = cb == 64 ? b * 64 + at : at % cb;
      ncorr[i] = c < ch ? -(int32_t)corr[c] : 0;
      sc[i] = c < ch ? scale[c] : 0.0f;
      bi[i] = c < ch && bias ? bias[c] : 0.0f;
    }
    memcpy(blk, ncorr, 256);
    memcpy(blk + 256, sc, 256);
    memcpy(blk + 512, bi, 256);
    for (size_t ky = 0; ky < k; ky++)
      for (size_t o = 0; o < g; o++)
        for (size_t pk = 0; pk < np; pk++)
          for (size_t i = 0; i < 64; i++) { /* vector i / 16, lane i % 16 */
            const size_t kk = i / 16, lane = i % 16;
            const size_t at = 16 * (lane / 4) + 4 * kk + lane % 4,
                         c = cb == 64 ? b * 64 + at : at % cb;
            int8_t *d4 = blk + 768 + ((ky * g + o) * np + pk) * 256 + kk * 64 + lane * 4;
            for (size_t col = 0; col < 4; col++) {
              const size_t at = 4 * pk + col; /* the column, from the group's first */
              if (c >= ch || at < s * o || at >= s * o + k) continue;
              d4[col] = (int8_t)w[(ky * k + (at - s * o)) * cw + c];
            }
          }
  }
  return true;
}

/* Op's window stride in dilated columns (sw / dw: what em_q8_dwdot_group takes), else 0. */
static size_t dwdot_stride(const emc_op *op) {
  if (op->kind != EMC_OP_CONV2D) return 0;
  const emc_conv_params p = emc_conv_params_of(op);
  if (p.q8_id < 0 || !p.depthwise || p.kh != p.kw || p.dw <= 0 || p.sw % p.dw) return 0;
  const size_t s = (size_t)(p.sw / p.dw);
  return em_q8_dwdot_group((size_t)p.kh, s, NULL) ? s : 0;
}

em_status emc_q8_dw_prepare(emc_delegate *d, em_allocator *al, char *why, size_t why_n) {
  if (!d->q8_dwd) return EM_OK;
  size_t total = 0;
  for (uint32_t i = 0; i < d->n_ops; i++) {
    const size_t s = dwdot_stride(&d->ops[i]);
    if (s)
      total += (size_t)(d->t[d->ops[i].in[0]].sizes[1] + 63) / 64 *
               em_q8_dwdot_block_bytes((size_t)emc_conv_params_of(&d->ops[i]).kh, s);
  }
  if (total == 0) return EM_OK;
  const int8_t **table = em_allocator_alloc(al, d->n_ops * sizeof *table, 16);
  int8_t *mem = em_allocator_alloc(al, total, 64);
  if (!table || !mem) {
    snprintf(why, why_n, "method allocator too small for %zu bytes of int8 depthwise tables",
             total);
    return EM_ERR_MEMORY_ALLOCATION_FAILED;
  }
  for (uint32_t i = 0; i < d->n_ops; i++) {
    const emc_op *op = &d->ops[i];
    const size_t s = dwdot_stride(op);
    table[i] = NULL;
    if (!s) continue;
    const emc_conv_params p = emc_conv_params_of(op);
    const size_t ch = (size_t)d->t[op->in[0]].sizes[1], cw = (ch + 15) / 16 * 16;
    const float *t = data_of(d, (int32_t)p.q8_id); /* [scale | corr | bias] */
    if (!em_q8_dwdot_pack((size_t)p.kh, s, ch, cw, data_of(d, op->in[1]), t, t + cw, t + 2 * cw,
                          mem))
      continue; /* (its bytes stay unused) */
    table[i] = mem;
    mem += (ch + 63) / 64 * em_q8_dwdot_block_bytes((size_t)p.kh, s);
  }
  d->q8_dw_w = table;
  return EM_OK;
}
