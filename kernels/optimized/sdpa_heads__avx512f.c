/*
 * sdpa_heads__avx512f.c — the AVX-512F body of llama::custom_sdpa's f32 head task
 * (kernels/portable/llama_attention.c) for D == Dv, D a multiple of 16 up to 256 and no mask:
 * the query row (pre-scaled) and the output stay in zmm registers, the softmax runs 16 scores
 * at a time with e^x from ember/vmath_exp.h. The caches are f32, or f16 (sdpa_args.kv_f16: an
 * f16 KV cache, each row converted as it is read, the arithmetic otherwise the same). Compiled
 * with -mavx512f (CMakeLists.txt; the target attribute says the same). Reached through
 * config.c's tables only.
 */
#include <immintrin.h>

#include "ember/vmath_exp.h"
#include "optimized/config.h"
#include "portable/llama_attention.h"

/* 16 cache values from element i of row r (f32, or f16 when kv16) as f32. */
__attribute__((target("avx512f"), always_inline)) static inline __m512 load16(const char *r,
                                                                              int64_t i, int kv16) {
  if (kv16) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(r + 2 * i)));
  return _mm512_loadu_ps((const float *)(r + 4 * i));
}

/* The task split of llama_attention.h (task t = batch t / Hq, query head t % Hq). */
__attribute__((target("avx512f"), always_inline)) static inline void
heads(const sdpa_job *j, int64_t begin, int64_t end, int kv16) {
  const sdpa_args *a = j->a;
  int64_t rep = a->Hq / a->Hkv, nk = a->n_keys, nv = a->D / 16;
  const int64_t es = kv16 ? 2 : 4; /* bytes per cache element */
  const float scale = (float)a->scale;
  for (int64_t t = begin; t < end; t++) {
    int64_t b = t / a->Hq, h = t % a->Hq, hk = h / rep;
    float *sc = j->scratch + t * nk;
    const char *kb = (const char *)a->k->data + sdpa_off4(a->k, b, 0, hk, 0) * es;
    const char *vb = (const char *)a->v->data + sdpa_off4(a->v, b, 0, hk, 0) * es;
    int64_t ks = a->k->strides[1] * es, vs = a->v->strides[1] * es; /* bytes between rows */
    for (int64_t s = 0; s < a->S; s++) {
      const float *q = (const float *)a->q->data + sdpa_off4(a->q, b, s, h, 0);
      float *o = (float *)a->out->data + sdpa_off4(a->out, b, s, h, 0);
      int64_t vis = sdpa_keys_for(a, s);
      __m512 qv[16], ov[16];
      for (int64_t i = 0; i < nv; i++) {
        qv[i] = _mm512_mul_ps(_mm512_loadu_ps(q + 16 * i), _mm512_set1_ps(scale));
        ov[i] = _mm512_setzero_ps();
      }
      float mx = -INFINITY;
      for (int64_t r = 0; r < vis; r++) {
        const char *kr = kb + r * ks;
        if (r + SDPA_PREFETCH_ROWS < vis)
          for (int64_t i = 0; i < nv * 16 * es; i += 64)
            _mm_prefetch(kr + SDPA_PREFETCH_ROWS * ks + i, _MM_HINT_T0);
        __m512 acc = _mm512_mul_ps(qv[0], load16(kr, 0, kv16));
        for (int64_t i = 1; i < nv; i++)
          acc = _mm512_fmadd_ps(qv[i], load16(kr, 16 * i, kv16), acc);
        float x = _mm512_reduce_add_ps(acc);
        sc[r] = x;
        mx = x > mx ? x : mx;
      }
      if (!(mx > -INFINITY)) { /* every score -inf (or NaN): the reference paths decide */
        for (int64_t d = 0; d < a->Dv; d++) o[d] = mx == mx ? 0.0f : mx;
        continue;
      }
      __m512 sum = _mm512_setzero_ps(), vmx = _mm512_set1_ps(mx);
      int64_t r = 0;
      for (; r + 16 <= vis; r += 16) {
        __m512 e = exp_recipe512(_mm512_sub_ps(_mm512_loadu_ps(sc + r), vmx));
        _mm512_storeu_ps(sc + r, e);
        sum = _mm512_add_ps(sum, e);
      }
      if (r < vis) {
        __mmask16 m = (__mmask16)((1u << (vis - r)) - 1);
        __m512 e = exp_recipe512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, sc + r), vmx));
        _mm512_mask_storeu_ps(sc + r, m, e);
        sum = _mm512_add_ps(sum, _mm512_maskz_mov_ps(m, e));
      }
      for (r = 0; r < vis; r++) {
        const char *vr = vb + r * vs;
        if (r + SDPA_PREFETCH_ROWS < vis)
          for (int64_t i = 0; i < nv * 16 * es; i += 64)
            _mm_prefetch(vr + SDPA_PREFETCH_ROWS * vs + i, _MM_HINT_T0);
        __m512 pr = _mm512_set1_ps(sc[r]);
        for (int64_t i = 0; i < nv; i++)
          ov[i] = _mm512_fmadd_ps(pr, load16(vr, 16 * i, kv16), ov[i]);
      }
      __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sum));
      for (int64_t i = 0; i < nv; i++) _mm512_storeu_ps(o + 16 * i, _mm512_mul_ps(ov[i], inv));
    }
  }
}

__attribute__((target("avx512f"))) void em_sdpa_heads_d16__avx512f(void *arg, int64_t begin,
                                                                   int64_t end) {
  const sdpa_job *j = arg;
  if (j->a->kv_f16)
    heads(j, begin, end, 1);
  else
    heads(j, begin, end, 0);
}
