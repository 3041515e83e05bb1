/*
 * cpu_op_attn.c — attention's three operators run head by head: the scores' batched gemm
 * (Q K^T), the softmax over their rows and the batched gemm of the probabilities by V
 * (emc_attn_fuse finds them, emc_attn_run runs them; cpu_op_chain.c calls both).
 *
 * One operator after the other, each writes all its heads' products before the next reads the
 * first: ViT-B/16's 12 heads of 197 x 197 scores are 1.9 MB a layer, past a Zen 4 core's 1 MB L2,
 * so the softmax read them back from L3 and wrote them there for the second gemm to read again.
 * Head by head, a head's scores (155 KB) go from the first gemm through the softmax to the second
 * while L2 holds them, and the threads meet once a layer's attention instead of three times.
 * Each head's work is that of the three operators, with the same kernels in the same order, so
 * the three output tensors get the same bits (every head's scores and probabilities are still
 * written whole: an ETDump debug buffer or any later reader finds them as before).
 */
#include "cpu_ops.h"

/* Whether the bound tensors s and t share a byte (unbound ones, NULL until execute: never). */
static bool attn_overlap(const emc_delegate *d, int32_t s, int32_t t) {
  if (s < 0 || t < 0) return false;
  const uint8_t *a0 = (const uint8_t *)d->t[s].data, *b0 = (const uint8_t *)d->t[t].data;
  const int64_t an = d->t[s].numel * (int64_t)sizeof(float),
                bn = d->t[t].numel * (int64_t)sizeof(float);
  return a0 && b0 && a0 < b0 + bn && b0 < a0 + an;
}

/* Whether tensors s and t are the same values (the same id, or views of the same bytes). */
static bool attn_same(const emc_delegate *d, int32_t s, int32_t t) {
  return s == t || (d->t[s].data && d->t[s].data == d->t[t].data && d->t[s].numel == d->t[t].numel);
}

int emc_attn_fuse(const emc_delegate *d, uint32_t i) {
  if (i + 2 >= d->n_ops) return 0;
  const emc_op *g1 = &d->ops[i], *sm = g1 + 1, *g2 = g1 + 2;
  if (g1->kind != EMC_OP_GEMM || sm->kind != EMC_OP_SOFTMAX || g2->kind != EMC_OP_GEMM) return 0;
  const emc_gemm_params p1 = emc_gemm_params_of(g1), p2 = emc_gemm_params_of(g2);
  const emc_softmax_params ps = emc_softmax_params_of(sm);
  if (p1.batch < 2 || p2.batch != p1.batch || p1.c_heads || g1->in[3] >= 0) return 0;
  if (!attn_same(d, sm->in[0], g1->out[0]) || ps.inner != 1 || ps.log ||
      ps.rows != p1.batch * p1.m || ps.cols != p1.n)
    return 0;
  if (!attn_same(d, g2->in[0], sm->out[0]) || p2.a_packed || p2.a_bstride != p1.m * p1.n ||
      p2.m != p1.m || p2.k != p1.n)
    return 0;
  /* Head h's writes must leave what a later head reads: the scores S, probabilities P (S itself
   * when in place) and output O apart from every input and from each other. */
  const int32_t s = g1->out[0], p = sm->out[0], o = g2->out[0];
  const int32_t reads[7] = {g1->in[0], g1->in[1], g1->in[2], sm->in[1],
                            g2->in[1], g2->in[2], g2->in[3]};
  for (int r = 0; r < 7; r++)
    if (attn_overlap(d, s, reads[r]) || attn_overlap(d, p, reads[r]) ||
        attn_overlap(d, o, reads[r]))
      return 0;
  const bool in_place = d->t[s].data == d->t[p].data && d->t[s].numel == d->t[p].numel;
  if ((!in_place && attn_overlap(d, s, p)) || attn_overlap(d, o, s) || attn_overlap(d, o, p))
    return 0;
  return 3;
}

typedef struct attn_job {
  const emc_delegate *d;
  const emc_op *g1;
  int64_t m; /* query rows of a head */
} attn_job;

static void attn_heads(void *ctx, int64_t begin, int64_t end) {
  const attn_job *j = ctx;
  for (int64_t h = begin; h < end; h++) {
    emc_run_gemm_range(j->d, j->g1, h, h + 1);
    emc_run_softmax_range(j->d, j->g1 + 1, h * j->m, (h + 1) * j->m);
    emc_run_gemm_range(j->d, j->g1 + 2, h, h + 1);
  }
}

bool emc_attn_run(const emc_delegate *d, uint32_t i, em_threadpool *pool) {
  const emc_gemm_params p1 = emc_gemm_params_of(&d->ops[i]);
  /* fewer heads than two a thread: each gemm splits over the threads instead (emc_run_gemm) */
  const int64_t threads = (int64_t)em_threadpool_size(pool);
  if (threads > 1 && p1.batch < 2 * threads) return false;
  attn_job j = {d, &d->ops[i], p1.m};
  em_parallel_for(threads > 1 ? pool : NULL, p1.batch, attn_heads, &j);
  return true;
}
