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

/* Row r (64 values) of a cache at base (rows `stride` bytes apart, n rows in use) as f32,
 * prefetching every line of the row SDPA_PREFETCH_ROWS on (an f16 row's second line too: SmolLM2
 * at position 1000, Zen 4, 1 thread: 7.10 -> 6.95 ms a token). */
__attribute__((target("avx512f"), always_inline)) static inline void
row64(const char *base, int64_t r, int64_t stride, int64_t n, int kv16, __m512 x[4]) {
  const char *row = base + r * stride;
  if (r + SDPA_PREFETCH_ROWS < n) {
    const char *ahead = row + SDPA_PREFETCH_ROWS * stride;
    for (int64_t i = 0; i < 64 * (kv16 ? 2 : 4); i += 64) _mm_prefetch(ahead + i, _MM_HINT_T0);
  }
  for (int i = 0; i < 4; i++) x[i] = load16(row, 16 * i, kv16);
}

/* sc[r] = e^(sc[r] - mx) for r < n; returns their lane-wise sums. */
__attribute__((target("avx512f"), always_inline)) static inline __m512 exp_row(float *sc, int64_t n,
                                                                               float mx) {
  __m512 sum = _mm512_setzero_ps(), vmx = _mm512_set1_ps(mx);
  int64_t r = 0;
  for (; r + 16 <= n; r += 16) {
    __m512 e = exp_recipe512(_mm512_sub_ps(_mm512_loadu_ps(sc + r), vmx));
    _mm512_storeu_ps(sc + r, e);
    sum = _mm512_add_ps(sum, e);
  }
  if (r < n) {
    __mmask16 m = (__mmask16)((1u << (n - r)) - 1);
    __m512 e = exp_recipe512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, sc + r), vmx));
    _mm512_mask_storeu_ps(sc + r, m, e);
    sum = _mm512_add_ps(sum, _mm512_maskz_mov_ps(m, e));
  }
  return sum;
}

/* The four horizontal sums of c0..c3, in order. */
__attribute__((target("avx512f"), always_inline)) static inline __m128 sum4(__m512 c0, __m512 c1,
                                                                            __m512 c2, __m512 c3) {
  __m512 a = _mm512_add_ps(_mm512_unpacklo_ps(c0, c1), _mm512_unpackhi_ps(c0, c1));
  __m512 b = _mm512_add_ps(_mm512_unpacklo_ps(c2, c3), _mm512_unpackhi_ps(c2, c3));
  __m512 s = _mm512_add_ps(_mm512_shuffle_ps(a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                           _mm512_shuffle_ps(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
  __m256 h = _mm256_add_ps(_mm512_castps512_ps256(s),
                           _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(s), 1)));
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

/* Query rows s .. s + 3 of batch b, head h, D = 64 (prefill): every cache row converted once for
 * the four (the f16 conversions dominate row-at-a-time), each query's scores in its own scratch
 * row (sc + q * nk). The per-query arithmetic is that of the one-row path below but for the
 * order of the additions in a score and in the output's sums. Returns 0, having written
 * nothing, when a query's scores are all -inf or NaN (the one-row path then decides). */
__attribute__((target("avx512f"), always_inline)) static inline int
block4(const sdpa_args *a, int64_t b, int64_t h, int64_t s, const char *kb, const char *vb,
       int64_t ks, int64_t vs, float *sc, int64_t nk, int kv16) {
  int64_t vis[4];
  for (int q = 0; q < 4; q++) vis[q] = sdpa_keys_for(a, s + q);
  int64_t vmax = vis[0];
  for (int q = 1; q < 4; q++) vmax = vis[q] > vmax ? vis[q] : vmax;
  const __m512 scale = _mm512_set1_ps((float)a->scale);
  __m512 qv[4][4];
  for (int q = 0; q < 4; q++) {
    const float *qp = (const float *)a->q->data + sdpa_off4(a->q, b, s + q, h, 0);
    for (int i = 0; i < 4; i++) qv[q][i] = _mm512_mul_ps(_mm512_loadu_ps(qp + 16 * i), scale);
  }
  for (int64_t r = 0; r < vmax; r++) { /* scores of keys past a query's vis are not used */
    __m512 kx[4];
    row64(kb, r, ks, vmax, kv16, kx);
    const __m512 k0 = kx[0], k1 = kx[1], k2 = kx[2], k3 = kx[3];
    __m512 acc[4];
    for (int q = 0; q < 4; q++)
      acc[q] = _mm512_fmadd_ps(
          qv[q][3], k3,
          _mm512_fmadd_ps(qv[q][2], k2,
                          _mm512_fmadd_ps(qv[q][1], k1, _mm512_mul_ps(qv[q][0], k0))));
    __m128 x = sum4(acc[0], acc[1], acc[2], acc[3]);
    float t[4];
    _mm_storeu_ps(t, x);
    for (int q = 0; q < 4; q++) sc[q * nk + r] = t[q];
  }
  float inv[4];
  for (int q = 0; q < 4; q++) {
    float *sq = sc + q * nk, mx = -INFINITY;
    for (int64_t r = 0; r < vis[q]; r++) mx = sq[r] > mx ? sq[r] : mx;
    if (!(mx > -INFINITY)) return 0;
    inv[q] = 1.0f / _mm512_reduce_add_ps(exp_row(sq, vis[q], mx));
  }
  __m512 ov[4][4];
  for (int q = 0; q < 4; q++)
    for (int i = 0; i < 4; i++) ov[q][i] = _mm512_setzero_ps();
  for (int64_t r = 0; r < vmax; r++) {
    __m512 vx[4];
    row64(vb, r, vs, vmax, kv16, vx);
    const __m512 v0 = vx[0], v1 = vx[1], v2 = vx[2], v3 = vx[3];
    for (int q = 0; q < 4; q++) {
      if (r >= vis[q]) continue; /* past this query's keys */
      const __m512 p = _mm512_set1_ps(sc[q * nk + r]);
      ov[q][0] = _mm512_fmadd_ps(p, v0, ov[q][0]);
      ov[q][1] = _mm512_fmadd_ps(p, v1, ov[q][1]);
      ov[q][2] = _mm512_fmadd_ps(p, v2, ov[q][2]);
      ov[q][3] = _mm512_fmadd_ps(p, v3, ov[q][3]);
    }
  }
  for (int q = 0; q < 4; q++) {
    float *o = (float *)a->out->data + sdpa_off4(a->out, b, s + q, h, 0);
    const __m512 iv = _mm512_set1_ps(inv[q]);
    for (int i = 0; i < 4; i++) _mm512_storeu_ps(o + 16 * i, _mm512_mul_ps(ov[q][i], iv));
  }
  return 1;
}

/* The task split of llama_attention.h (task t = batch t / Hq, query head t % Hq). */
__attribute__((target("avx512f"), always_inline)) static inline void
heads(const sdpa_job *j, int64_t begin, int64_t end, int kv16, int64_t NV) {
  const sdpa_args *a = j->a;
  /* NV: D / 16 as a constant (4, 8: the loops over a row unroll and the sums stay in registers)
   * or 0 (read from a->D) */
  int64_t rep = a->Hq / a->Hkv, nk = a->n_keys, nv = NV ? NV : a->D / 16;
  const int64_t es = kv16 ? 2 : 4; /* bytes per cache element */
  const float scale = (float)a->scale;
  for (int64_t t = begin; t < end; t++) {
    int64_t b = t / a->Hq, h = t % a->Hq, hk = h / rep;
    float *sc = j->scratch + t * nk * j->rows;
    const char *kb = (const char *)a->k->data + sdpa_off4(a->k, b, 0, hk, 0) * es;
    const char *vb = (const char *)a->v->data + sdpa_off4(a->v, b, 0, hk, 0) * es;
    int64_t ks = a->k->strides[1] * es, vs = a->v->strides[1] * es; /* bytes between rows */
    for (int64_t s = 0; s < a->S; s++) {
      if (NV == 4 && j->rows == SDPA_QB && s + SDPA_QB <= a->S &&
          block4(a, b, h, s, kb, vb, ks, vs, sc, nk, kv16)) {
        s += SDPA_QB - 1;
        continue;
      }
      const float *q = (const float *)a->q->data + sdpa_off4(a->q, b, s, h, 0);
      float *o = (float *)a->out->data + sdpa_off4(a->out, b, s, h, 0);
      int64_t vis = sdpa_keys_for(a, s);
      __m512 qv[16], ov[16];
      for (int64_t i = 0; i < nv; i++) {
        qv[i] = _mm512_mul_ps(_mm512_loadu_ps(q + 16 * i), _mm512_set1_ps(scale));
        ov[i] = _mm512_setzero_ps();
      }
      float mx = -INFINITY;
      int64_t r0 = 0;
      /* four keys at a time: their four sums reduced together (one shuffle tree, not four) */
      for (; r0 + 4 <= vis; r0 += 4) {
        const char *k0 = kb + r0 * ks;
        if (r0 + 4 + SDPA_PREFETCH_ROWS <= vis)
          for (int64_t rr = 0; rr < 4; rr++)
            for (int64_t i = 0; i < nv * 16 * es; i += 64)
              _mm_prefetch(k0 + (SDPA_PREFETCH_ROWS + rr) * ks + i, _MM_HINT_T0);
        __m512 a0 = _mm512_mul_ps(qv[0], load16(k0, 0, kv16));
        __m512 a1 = _mm512_mul_ps(qv[0], load16(k0 + ks, 0, kv16));
        __m512 a2 = _mm512_mul_ps(qv[0], load16(k0 + 2 * ks, 0, kv16));
        __m512 a3 = _mm512_mul_ps(qv[0], load16(k0 + 3 * ks, 0, kv16));
        for (int64_t i = 1; i < nv; i++) {
          a0 = _mm512_fmadd_ps(qv[i], load16(k0, 16 * i, kv16), a0);
          a1 = _mm512_fmadd_ps(qv[i], load16(k0 + ks, 16 * i, kv16), a1);
          a2 = _mm512_fmadd_ps(qv[i], load16(k0 + 2 * ks, 16 * i, kv16), a2);
          a3 = _mm512_fmadd_ps(qv[i], load16(k0 + 3 * ks, 16 * i, kv16), a3);
        }
        _mm_storeu_ps(sc + r0, sum4(a0, a1, a2, a3));
      }
      for (int64_t i = 0; i < r0; i++) mx = sc[i] > mx ? sc[i] : mx;
      for (int64_t r = r0; r < vis; r++) {
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
      __m512 sum = exp_row(sc, vis, mx);
      int64_t r = 0;
      if (nv <= 8) { /* two keys a step into two sets of sums: half the FMA latency chain */
        __m512 ow[8];
        for (int64_t i = 0; i < 8; i++) ow[i] = _mm512_setzero_ps();
        for (; r + 2 <= vis; r += 2) {
          const char *vr = vb + r * vs;
          if (r + 2 + SDPA_PREFETCH_ROWS <= vis)
            for (int64_t i = 0; i < nv * 16 * es; i += 64) {
              _mm_prefetch(vr + SDPA_PREFETCH_ROWS * vs + i, _MM_HINT_T0);
              _mm_prefetch(vr + (SDPA_PREFETCH_ROWS + 1) * vs + i, _MM_HINT_T0);
            }
          __m512 p0 = _mm512_set1_ps(sc[r]), p1 = _mm512_set1_ps(sc[r + 1]);
          for (int64_t i = 0; i < nv; i++) {
            ov[i] = _mm512_fmadd_ps(p0, load16(vr, 16 * i, kv16), ov[i]);
            ow[i] = _mm512_fmadd_ps(p1, load16(vr + vs, 16 * i, kv16), ow[i]);
          }
        }
        for (int64_t i = 0; i < nv; i++) ov[i] = _mm512_add_ps(ov[i], ow[i]);
      }
      for (; r < vis; r++) {
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
  int64_t nv = j->a->D / 16;
  int kv16 = j->a->kv_f16 != 0;
  if (nv == 4 && kv16)
    heads(j, begin, end, 1, 4);
  else if (nv == 4)
    heads(j, begin, end, 0, 4);
  else if (nv == 8 && kv16)
    heads(j, begin, end, 1, 8);
  else if (nv == 8)
    heads(j, begin, end, 0, 8);
  else if (kv16)
    heads(j, begin, end, 1, 0);
  else
    heads(j, begin, end, 0, 0);
}

/* ---- decode with the keys split (sdpa_split_job) ---- */

/* The largest of sc[0, n), 16 at a time (NaN never wins; -inf when nothing beats it). */
__attribute__((target("avx512f"), always_inline)) static inline float max_row(const float *sc,
                                                                              int64_t n) {
  __m512 m = _mm512_set1_ps(-INFINITY);
  int64_t r = 0;
  for (; r + 16 <= n; r += 16) m = _mm512_max_ps(_mm512_loadu_ps(sc + r), m);
  if (r < n) {
    const __mmask16 k = (__mmask16)((1u << (n - r)) - 1);
    m = _mm512_mask_max_ps(m, k, _mm512_maskz_loadu_ps(k, sc + r), m);
  }
  return _mm512_reduce_max_ps(m);
}

/* Query heads h0 .. h0 + G - 1 (G <= 4, a literal), which share the kv rows at kb / vb (ks / vs
 * bytes apart), against keys [0, len) of a chunk: four key rows converted once for the G heads,
 * each head's four dot products reduced together (sum4); a row past len repeats the last and
 * its score is dropped. Then each head's softmax over the chunk, and every value row once for
 * the G heads' sums. */
__attribute__((target("avx512f"), always_inline)) static inline void
split_group(const sdpa_split_job *j, int64_t b, int64_t h0, int G, const char *kb, const char *vb,
            int64_t ks, int64_t vs, int64_t len, float *sc, float *part, int kv16) {
  const sdpa_args *a = j->a;
  const int64_t cl = j->clen;
  const __m512 scale = _mm512_set1_ps((float)a->scale);
  __m512 qv[4][4];
  for (int g = 0; g < G; g++) {
    const float *qp = (const float *)a->q->data + sdpa_off4(a->q, b, 0, h0 + g, 0);
    for (int i = 0; i < 4; i++) qv[g][i] = _mm512_mul_ps(_mm512_loadu_ps(qp + 16 * i), scale);
  }
  for (int64_t r = 0; r < len; r += 4) {
    __m512 kx[4][4];
    for (int64_t u = 0; u < 4; u++) row64(kb, r + u < len ? r + u : len - 1, ks, len, kv16, kx[u]);
    for (int g = 0; g < G; g++) {
      __m512 acc[4];
      for (int u = 0; u < 4; u++)
        acc[u] =
            _mm512_fmadd_ps(qv[g][3], kx[u][3],
                            _mm512_fmadd_ps(qv[g][2], kx[u][2],
                                            _mm512_fmadd_ps(qv[g][1], kx[u][1],
                                                            _mm512_mul_ps(qv[g][0], kx[u][0]))));
      const __m128 x = sum4(acc[0], acc[1], acc[2], acc[3]);
      if (r + 4 <= len) {
        _mm_storeu_ps(sc + g * cl + r, x);
      } else {
        float t[4];
        _mm_storeu_ps(t, x);
        for (int64_t u = 0; u < len - r; u++) sc[g * cl + r + u] = t[u];
      }
    }
  }
  float mx[4], sum[4];
  for (int g = 0; g < G; g++) {
    float *sg = sc + g * cl;
    mx[g] = max_row(sg, len);
    sum[g] = mx[g] > -INFINITY ? _mm512_reduce_add_ps(exp_row(sg, len, mx[g])) : 0.0f;
  }
  __m512 ov[4][4];
  for (int g = 0; g < 4; g++)
    for (int i = 0; i < 4; i++) ov[g][i] = _mm512_setzero_ps();
  for (int64_t r = 0; r < len; r++) {
    __m512 vx[4];
    row64(vb, r, vs, len, kv16, vx);
    for (int g = 0; g < G; g++) {
      const __m512 p = _mm512_set1_ps(sc[g * cl + r]);
      for (int i = 0; i < 4; i++) ov[g][i] = _mm512_fmadd_ps(p, vx[i], ov[g][i]);
    }
  }
  for (int g = 0; g < G; g++) {
    float *o = part + (h0 + g) * SDPA_PART;
    for (int i = 0; i < 4; i++) _mm512_storeu_ps(o + 16 * i, ov[g][i]);
    o[SDPA_SPLIT_M] = mx[g];
    o[SDPA_SPLIT_M + 1] = sum[g];
  }
}

/* split_group for D = 128 (G <= 2 heads: their queries, four rows' sums and the value sums stay
 * in registers): each key row read 16 values at a time, every piece converted once for the G
 * heads and four rows, each head's four dot products reduced together (sum4); then the same
 * softmax and value pass as split_group's. */
__attribute__((target("avx512f"), always_inline)) static inline void
split_group128(const sdpa_split_job *j, int64_t b, int64_t h0, int G, const char *kb,
               const char *vb, int64_t ks, int64_t vs, int64_t len, float *sc, float *part,
               int kv16) {
  const sdpa_args *a = j->a;
  const int64_t cl = j->clen, es = kv16 ? 2 : 4;
  const __m512 scale = _mm512_set1_ps((float)a->scale);
  __m512 qv[2][8];
  for (int g = 0; g < G; g++) {
    const float *qp = (const float *)a->q->data + sdpa_off4(a->q, b, 0, h0 + g, 0);
    for (int i = 0; i < 8; i++) qv[g][i] = _mm512_mul_ps(_mm512_loadu_ps(qp + 16 * i), scale);
  }
  for (int64_t r = 0; r < len; r += 4) {
    const char *row[4];
    for (int64_t u = 0; u < 4; u++) {
      const int64_t rr = r + u < len ? r + u : len - 1;
      row[u] = kb + rr * ks;
      if (rr + SDPA_PREFETCH_ROWS < len)
        for (int64_t i = 0; i < 128 * es; i += 64)
          _mm_prefetch(row[u] + SDPA_PREFETCH_ROWS * ks + i, _MM_HINT_T0);
    }
    __m512 acc[2][4];
    for (int u = 0; u < 4; u++) {
      const __m512 k0 = load16(row[u], 0, kv16);
      for (int g = 0; g < G; g++) acc[g][u] = _mm512_mul_ps(qv[g][0], k0);
    }
    for (int i = 1; i < 8; i++)
      for (int u = 0; u < 4; u++) {
        const __m512 ki = load16(row[u], 16 * i, kv16);
        for (int g = 0; g < G; g++) acc[g][u] = _mm512_fmadd_ps(qv[g][i], ki, acc[g][u]);
      }
    for (int g = 0; g < G; g++) {
      const __m128 x = sum4(acc[g][0], acc[g][1], acc[g][2], acc[g][3]);
      if (r + 4 <= len) {
        _mm_storeu_ps(sc + g * cl + r, x);
      } else {
        float t[4];
        _mm_storeu_ps(t, x);
        for (int64_t u = 0; u < len - r; u++) sc[g * cl + r + u] = t[u];
      }
    }
  }
  float mx[2], sum[2];
  for (int g = 0; g < G; g++) {
    float *sg = sc + g * cl;
    mx[g] = max_row(sg, len);
    sum[g] = mx[g] > -INFINITY ? _mm512_reduce_add_ps(exp_row(sg, len, mx[g])) : 0.0f;
  }
  __m512 ov[2][8];
  for (int g = 0; g < 2; g++)
    for (int i = 0; i < 8; i++) ov[g][i] = _mm512_setzero_ps();
  for (int64_t r = 0; r < len; r++) {
    const char *row = vb + r * vs;
    if (r + SDPA_PREFETCH_ROWS < len)
      for (int64_t i = 0; i < 128 * es; i += 64)
        _mm_prefetch(row + SDPA_PREFETCH_ROWS * vs + i, _MM_HINT_T0);
    __m512 p[2];
    for (int g = 0; g < G; g++) p[g] = _mm512_set1_ps(sc[g * cl + r]);
    for (int i = 0; i < 8; i++) {
      const __m512 vx = load16(row, 16 * i, kv16);
      for (int g = 0; g < G; g++) ov[g][i] = _mm512_fmadd_ps(p[g], vx, ov[g][i]);
    }
  }
  for (int g = 0; g < G; g++) {
    float *o = part + (h0 + g) * SDPA_PART;
    for (int i = 0; i < 8; i++) _mm512_storeu_ps(o + 16 * i, ov[g][i]);
    o[SDPA_SPLIT_M] = mx[g];
    o[SDPA_SPLIT_M + 1] = sum[g];
  }
}

__attribute__((target("avx512f"), always_inline)) static inline void
split_tasks(const sdpa_split_job *j, int64_t begin, int64_t end, int kv16) {
  const sdpa_args *a = j->a;
  const int64_t rep = a->Hq / a->Hkv, es = kv16 ? 2 : 4;
  const int64_t ks = a->k->strides[1] * es, vs = a->v->strides[1] * es; /* bytes between rows */
  for (int64_t t = begin; t < end; t++) {
    const int64_t b = t / j->chunks, k0 = t % j->chunks * j->clen;
    const int64_t len = a->n_keys - k0 < j->clen ? a->n_keys - k0 : j->clen;
    float *sc = j->scores + t * a->Hq * j->clen, *part = j->part + t * a->Hq * SDPA_PART;
    for (int64_t hk = 0; hk < a->Hkv; hk++) {
      const char *kb = (const char *)a->k->data + sdpa_off4(a->k, b, k0, hk, 0) * es;
      const char *vb = (const char *)a->v->data + sdpa_off4(a->v, b, k0, hk, 0) * es;
      if (a->D == 128) { /* query heads two at a time */
        for (int64_t g0 = 0; g0 < rep; g0 += 2) {
          const int64_t h0 = hk * rep + g0;
          float *sg = sc + h0 * j->clen;
          if (rep - g0 >= 2)
            split_group128(j, b, h0, 2, kb, vb, ks, vs, len, sg, part, kv16);
          else
            split_group128(j, b, h0, 1, kb, vb, ks, vs, len, sg, part, kv16);
        }
        continue;
      }
      for (int64_t g0 = 0; g0 < rep; g0 += 4) {
        const int64_t h0 = hk * rep + g0, left = rep - g0;
        float *sg = sc + h0 * j->clen;
        switch (left >= 4 ? 4 : (int)left) {
        case 1: split_group(j, b, h0, 1, kb, vb, ks, vs, len, sg, part, kv16); break;
        case 2: split_group(j, b, h0, 2, kb, vb, ks, vs, len, sg, part, kv16); break;
        case 3: split_group(j, b, h0, 3, kb, vb, ks, vs, len, sg, part, kv16); break;
        default: split_group(j, b, h0, 4, kb, vb, ks, vs, len, sg, part, kv16); break;
        }
      }
    }
  }
}

__attribute__((target("avx512f"))) void em_sdpa_split__avx512f(void *arg, int64_t begin,
                                                               int64_t end) {
  const sdpa_split_job *j = arg;
  if (j->a->kv_f16)
    split_tasks(j, begin, end, 1);
  else
    split_tasks(j, begin, end, 0);
}
