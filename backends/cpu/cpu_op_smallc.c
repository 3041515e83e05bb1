/*
 * cpu_op_smallc.c — conv2d stems with few input channels (an RGB image) on the direct kernel,
 * cfg->conv_smallc, instead of an im2col GEMM.
 */
#include "cpu_ops.h"

/*
 * Stems (few input channels: MobileNets' 3x3 over RGB) with the direct kernel, cfg->conv_smallc:
 * bands of output rows x blocks of 16 channels, each block's weights regathered from the packed
 * panels into [depth][16] on the stack. MobileNetV3-Small's 3x3 stem, 1 / 2 threads: 0.225 /
 * 0.173 -> 0.155 / 0.101 ms (the GEMM path copied a 27-deep im2col, and its 6-row tiles spent a
 * third of their FMAs on 16 channels).
 */
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
  uint32_t act; /* what runs after the kernel (post_act_fused) */
} smallc_job;

/* kg: the conv's depth, cin * kh * kw (groups 1). */
bool emc_smallc_fits(const emc_delegate *d, const emc_op *op, int64_t cin, int64_t g, int64_t kg) {
  const emc_conv_params p = emc_conv_params_of(op);
  return d->cfg->conv_smallc && g == 1 && cin <= SMALLC_MAX_CIN && kg <= SMALLC_MAX_DEPTH &&
         p.kw <= EM_SMALLC_MAX_KW && !p.transposed && p.q8_id < 0 && op->in[3] < 0 &&
         op->out[1] < 0 && (p.sw == 1 || p.sw == 2) && p.dh == 1 && p.dw == 1;
}

/*
 * Items [begin, end): image, band of rows, 16-channel block. Bands outside blocks: a thread's
 * contiguous share of the items is then rows of every channel, the split of the operators that
 * read a stem's output (depthwise convs and their chains in bands of rows, GEMMs by pixel strips),
 * so they find it in their own core's cache; split by channel blocks, half of it came from the
 * other core (MobileNetV2, 2 threads, Zen 4, per-operator wall time: the chain after the stem
 * 148 -> 139 us, the stem itself 164 -> 169, within this host's noise).
 */
static void smallc_items(void *ctx, int64_t begin, int64_t end) {
  const smallc_job *j = ctx;
  const int64_t plane = j->q.oh * j->q.ow;
  float wb[SMALLC_MAX_DEPTH * 16];
  int64_t built = -1; /* the block wb holds */
  for (int64_t it = begin; it < end; it++) {
    const int64_t b = it / (j->blocks * j->bands), blk = it % j->blocks;
    const int64_t oy0 = it / j->blocks % j->bands * SMALLC_BAND,
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
    const uint32_t act = j->act;
    if (act)
      for (int64_t c = 0; c < nco; c++) {
        float *rows = y + c * plane + oy0 * j->q.ow;
        j->d->cfg->vact((size_t)((oy1 - oy0) * j->q.ow), rows, rows, act, j->op->fp);
      }
  }
}

void emc_run_conv_smallc(const emc_delegate *d, const emc_op *op, const float *x, const float *w,
                         const float *bias, float *y, int64_t n, int64_t cin, int64_t h, int64_t wd,
                         int64_t co, int64_t oh, int64_t ow, int64_t kg, em_threadpool *pool) {
  const emc_conv_params p = emc_conv_params_of(op);
  smallc_job j = {d,
                  op,
                  {h, wd, oh, ow, p.kh, p.kw, p.sh, p.sw, p.ph, p.pw, 1, 1},
                  cin,
                  co,
                  kg,
                  (int64_t)emc_div_up((size_t)co, 16),
                  (int64_t)emc_div_up((size_t)oh, SMALLC_BAND),
                  x,
                  w,
                  bias,
                  y,
                  clamp_of(op),
                  0};
  j.act = post_act_fused(d, op, &j.mm);
  par_for_static(pool, n * j.blocks * j.bands, smallc_items, &j, n * co * oh * ow * j.kg);
}
