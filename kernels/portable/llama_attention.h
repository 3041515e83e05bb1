/*
 * llama_attention.h — what llama::custom_sdpa (llama_attention.c) shares with its optional
 * optimized layer (kernels/optimized/sdpa_heads__*.c, reached through portable/fast_config.h):
 * the validated arguments, the per-(batch, query head) job, the index helpers, and the plain C
 * body of the head task (SDPA_HEAD_BODY), compiled twice: in llama_attention.c for any CPU and
 * in kernels/optimized/ with AVX2+FMA flags. Plain C only: no intrinsics.
 */
#ifndef EMBER_KERNELS_PORTABLE_LLAMA_ATTENTION_H
#define EMBER_KERNELS_PORTABLE_LLAMA_ATTENTION_H

#include "portable/nn_util.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One custom_sdpa call, checked: q [B, S, Hq, D], caches [B, L, Hkv, D|Dv], out like q. */
typedef struct sdpa_args {
  em_tensor *q, *k, *v, *mask, *out;
  int64_t B, S, Hq, Hkv, D, Dv, L, start, n_keys;
  bool causal;
  bool kv_f16; /* f32 q and out with f16 caches (an f16 KV cache): only the optimized d16 task
                  reads them as they are; the other paths run on f32 copies */
  double scale;
} sdpa_args;

/* Additive mask value for query row s, key j (0 when there is no mask). */
static inline double sdpa_mask_at(const sdpa_args *a, int64_t s, int64_t j) {
  if (!a->mask) return 0.0;
  int64_t i = s * a->mask->strides[0] + j * a->mask->strides[1];
  if (a->mask->dtype == EM_DTYPE_BOOL) return ((const uint8_t *)a->mask->data)[i] ? 0.0 : -INFINITY;
  return em_load_f64(a->mask->data, a->mask->dtype, i);
}

/* Number of keys query row s may see. */
static inline int64_t sdpa_keys_for(const sdpa_args *a, int64_t s) {
  return a->causal ? a->start + s + 1 : a->n_keys;
}

/* Element offset of [b, s, h, d] in t. */
static inline int64_t sdpa_off4(const em_tensor *t, int64_t b, int64_t s, int64_t h, int64_t d) {
  return b * t->strides[0] + s * t->strides[1] + h * t->strides[2] + d * t->strides[3];
}

/*
 * The f32 head tasks (every last dim contiguous): task t = b * Hq + h handles the
 * query rows of batch b, query head h, using n_keys floats of scores at
 * scratch + t * n_keys (carved before the loop: no allocation in workers).
 */
typedef struct sdpa_job {
  const sdpa_args *a;
  float *scratch; /* rows * n_keys floats per task */
  int64_t rows;   /* score rows per task: SDPA_QB when S >= SDPA_QB (a kernel may score that
                     many query rows at once), else 1 */
} sdpa_job;

/*
 * Decode with the keys split (one query row, D == Dv, 64 or 128, no mask): task
 * t = b * chunks + c takes keys [c * clen, min(n_keys, (c + 1) * clen)) for every query head of
 * batch b, each kv head's rows read once for all the query heads that share it, and leaves per
 * head an unnormalised partial at part + (t * Hq + h) * SDPA_PART: [0, D) the sum of
 * e^(s_j - m) v_j, [SDPA_SPLIT_M] the chunk's largest score m (-inf when none beats -inf: the
 * caller then takes the head path), [SDPA_SPLIT_M + 1] the sum of e^(s_j - m). The caller merges
 * the chunks.
 */
typedef struct sdpa_split_job {
  const sdpa_args *a;
  float *scores; /* Hq * clen floats per task */
  float *part;   /* Hq * SDPA_PART floats per task */
  int64_t chunks, clen;
} sdpa_split_job;
#define SDPA_SPLIT_M 128 /* the largest D the split takes: where a partial's m and l sit */
#define SDPA_PART    (SDPA_SPLIT_M + 16)
/* Query rows an optimized head task may score at once (prefill). */
#define SDPA_QB 4

/* Cache rows ahead of the one in use that the dot / axpy loops ask the memory system for: the
 * caches are usually evicted by the weights streamed between two layers' attention. */
#define SDPA_PREFETCH_ROWS 16

/*
 * The body of an em_parallel_fn over tasks [begin, end), with `j` the sdpa_job: per query
 * row, scores against kv head h / (Hq / Hkv) rows [0, visible) as 8-lane dot products,
 * softmax, then out = sum_j p_j * v_j as contiguous axpys over D.
 */
#define SDPA_HEAD_BODY                                                                             \
  const sdpa_args *a = j->a;                                                                       \
  int64_t rep = a->Hq / a->Hkv, nk = a->n_keys, D = a->D;                                          \
  for (int64_t t = begin; t < end; t++) {                                                          \
    int64_t b = t / a->Hq, h = t % a->Hq, hk = h / rep;                                            \
    float *sc = j->scratch + t * nk * j->rows;                                                     \
    const float *kb = (const float *)a->k->data + sdpa_off4(a->k, b, 0, hk, 0);                    \
    const float *vb = (const float *)a->v->data + sdpa_off4(a->v, b, 0, hk, 0);                    \
    int64_t ks = a->k->strides[1], vs = a->v->strides[1];                                          \
    for (int64_t s = 0; s < a->S; s++) {                                                           \
      const float *q = (const float *)a->q->data + sdpa_off4(a->q, b, s, h, 0);                    \
      float *o = (float *)a->out->data + sdpa_off4(a->out, b, s, h, 0);                            \
      int64_t vis = sdpa_keys_for(a, s);                                                           \
      float mx = -INFINITY;                                                                        \
      for (int64_t r = 0; r < vis; r++) {                                                          \
        const float *kr = kb + r * ks;                                                             \
        if (r + SDPA_PREFETCH_ROWS < vis)                                                          \
          for (int64_t d = 0; d < D; d += 16)                                                      \
            __builtin_prefetch(kr + SDPA_PREFETCH_ROWS * ks + d);                                  \
        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};                                                   \
        int64_t d = 0;                                                                             \
        for (; d + 8 <= D; d += 8)                                                                 \
          for (int l = 0; l < 8; l++) acc[l] += q[d + l] * kr[d + l];                              \
        float dot =                                                                                \
            ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));     \
        for (; d < D; d++) dot += q[d] * kr[d];                                                    \
        float x =                                                                                  \
            a->mask ? (float)(dot * a->scale + sdpa_mask_at(a, s, r)) : (float)(dot * a->scale);   \
        sc[r] = x;                                                                                 \
        mx = x > mx ? x : mx;                                                                      \
      }                                                                                            \
      for (int64_t d = 0; d < a->Dv; d++) o[d] = 0.0f;                                             \
      if (mx == -INFINITY) continue; /* every key masked: zeros */                                 \
      double sum = 0.0;                                                                            \
      for (int64_t r = 0; r < vis; r++) {                                                          \
        sc[r] = expf(sc[r] - mx);                                                                  \
        sum += sc[r];                                                                              \
      }                                                                                            \
      float inv = (float)(1.0 / sum);                                                              \
      for (int64_t r = 0; r < vis; r++) {                                                          \
        const float *vr = vb + r * vs;                                                             \
        if (r + SDPA_PREFETCH_ROWS < vis)                                                          \
          for (int64_t d = 0; d < a->Dv; d += 16)                                                  \
            __builtin_prefetch(vr + SDPA_PREFETCH_ROWS * vs + d);                                  \
        float pr = sc[r] * inv;                                                                    \
        for (int64_t d = 0; d < a->Dv; d++) o[d] += pr * vr[d];                                    \
      }                                                                                            \
    }                                                                                              \
  }

#ifdef __cplusplus
}
#endif

#endif /* EMBER_KERNELS_PORTABLE_LLAMA_ATTENTION_H */
