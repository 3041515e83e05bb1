/*
 * linear_q8.c — the portable reference loop of ember::linear_q8.out: f32 input times int8 weights
 * [N, K] with one scale per output channel (group_size 0, scales [N]) or per group of 32/64/128
 * inputs (scales [N, K/group]), f32 out, the input quantized dynamically per row in blocks of 32
 * (linear_q.h, python/ember/quant/llm.py). The operator entry and the driver that calls this loop
 * are in linear_q.c (this file calls nothing there); the SIMD micro-kernels are
 * linear_q_gemm__<isa>.c.
 *
 * Operator args: [input f32 [.., K], weight i8 [N, K], scales f32, group_size, bias f32 [N]?,
 *        out f32 [.., N], ret]
 */
#include "quantized/linear_q.h"

void em_linear_q8_portable(int64_t m, int64_t n0, int64_t n1, int64_t k, int64_t group,
                           const int8_t *qa, const float *sa, const int8_t *w, const float *ws,
                           const float *bias, float *y, int64_t ldy) {
  int64_t n_blocks = k / EM_QA_BLOCK, n_groups = k / group;
  for (int64_t r = 0; r < m; r++) {
    const int8_t *a = qa + r * k;
    const float *s = sa + r * n_blocks;
    for (int64_t n = n0; n < n1; n++) {
      const int8_t *wr = w + n * k;
      float acc = 0.0f;
      for (int64_t b = 0; b < n_blocks; b++) {
        int32_t dot = 0;
        for (int64_t i = b * EM_QA_BLOCK; i < (b + 1) * EM_QA_BLOCK; i++)
          dot += (int32_t)a[i] * (int32_t)wr[i];
        float scale = s[b] * ws[n * n_groups + b * EM_QA_BLOCK / group];
        acc = acc + (float)dot * scale;
      }
      y[r * ldy + n] = bias ? acc + bias[n] : acc;
    }
  }
}
