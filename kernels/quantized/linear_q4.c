/*
 * linear_q4.c — the portable reference loop of ember::linear_q4.out: f32 input times 4-bit
 * groupwise weights (uint8 [N, K/2], element 2j in the high nibble of byte j, 2j+1 in the low one,
 * each stored q + 8), f32 out, with the input quantized dynamically per row in blocks of 32
 * (linear_q.h, python/ember/quant/llm.py). The operator entry and the driver that calls this loop
 * are in linear_q.c (this file calls nothing there); the SIMD micro-kernels are
 * linear_q_gemm__<isa>.c.
 *
 * Operator args: [input f32 [.., K], weight u8 [N, K/2], scales f32 [N, K/group], group_size,
 *        bias f32 [N]?, offsets f32 (shape of scales)?,
 *        out f32 [.., N], ret]
 */
#include "quantized/linear_q.h"

void em_linear_q4_portable(int64_t m, int64_t n0, int64_t n1, int64_t k, int64_t group,
                           const int8_t *qa, const float *sa, const uint8_t *w, const float *ws,
                           const float *bias, float *y, int64_t ldy) {
  int64_t n_blocks = k / EM_QA_BLOCK, n_groups = k / group;
  for (int64_t r = 0; r < m; r++) {
    const int8_t *a = qa + r * k;
    const float *s = sa + r * n_blocks;
    for (int64_t n = n0; n < n1; n++) {
      const uint8_t *wr = w + n * (k / 2);
      float acc = 0.0f;
      for (int64_t b = 0; b < n_blocks; b++) {
        int32_t dot = 0;
        for (int64_t j = b * EM_QA_BLOCK / 2; j < (b + 1) * EM_QA_BLOCK / 2; j++) {
          dot += (int32_t)a[2 * j] * ((int32_t)(wr[j] >> 4) - 8);
          dot += (int32_t)a[2 * j + 1] * ((int32_t)(wr[j] & 15) - 8);
        }
        float scale = s[b] * ws[n * n_groups + b * EM_QA_BLOCK / group];
        acc = acc + (float)dot * scale;
      }
      y[r * ldy + n] = bias ? acc + bias[n] : acc;
    }
  }
}
