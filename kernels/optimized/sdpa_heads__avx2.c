/*
 * sdpa_heads__avx2.c — the AVX2+FMA body of llama::custom_sdpa's f32 head task
 * (kernels/portable/llama_attention.c): llama_attention.h's SDPA_HEAD_BODY, the same C as the
 * portable task, compiled with -mavx2 -mfma (CMakeLists.txt; the target attribute says the
 * same) so its 8-lane dot products and axpys become ymm code. Reached through config.c's tables.
 */
#include "optimized/config.h"
#include "portable/llama_attention.h"

__attribute__((target("avx2,fma"))) void em_sdpa_heads__avx2(void *arg, int64_t begin,
                                                             int64_t end) {
  const sdpa_job *j = arg;
  SDPA_HEAD_BODY
}
