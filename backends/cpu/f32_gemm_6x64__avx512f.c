/*
 * f32_gemm_6x64__avx512f.c — em_f32_gemm_minmax_ukernel_6x64__avx512f.
 *
 * 6 rows x 64 columns = 24 zmm accumulators (29 of the 32 registers with the
 * four B vectors and the broadcast): loads per FMA 10/24, against 9/18 for
 * 6x48 — measured ~5-8 % more FMA throughput from L1 on Sapphire
 * Rapids-class Xeons. Columns 16j..16j+15 are at b + j * b_next (16-column
 * panels); tails use masked loads and stores.
 *
 * The k loop is specialised on the number of live 16-column vectors (1 to 4,
 * and 4 with no mask at all for a full tile): a tile of nc <= 16 columns
 * (the ragged last strip of a GEMM, N = 49 in late CNN layers) costs a third
 * of a full one instead of as much. With a packed A panel (a_rs = 1, a_ks =
 * EMC_MR) every row is read from the panel, whose rows past M are zero
 * padding; otherwise rows past mr alias the previous row. Rows past mr are
 * never stored.
 *
 * A ragged last tile of full width (mr < 6) runs a k loop of its own rows
 * only, instead of six with copies.
 *
 * When `accumulate`, the accumulators start at zero and C is added after the
 * k loop: the C tile (often in L2 or L3 between K blocks) is prefetched
 * first, so its latency hides behind the FMAs instead of stalling them;
 * otherwise it is prefetched for writing (PREFETCHW).
 */
#include <immintrin.h>

#include "cpu_ukernels.h"
#include "f32_hswish__avx512f.h"

static inline __mmask16 lane_mask(size_t nc, size_t from) {
  if (nc <= from) return 0;
  size_t n = nc - from;
  return n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1u);
}

/*
 * The k loop for NV live column vectors (a literal; 5 means 4 full ones), A row r read at
 * AR(r, k). Accumulators are named variables (an array would be spilled): v<r><j>. Only the
 * last live vector can be partial, so only it is loaded with a mask.
 */
#define EM_FMA1(r, x) v##r##0 = _mm512_fmadd_ps(x, w0, v##r##0)
#define EM_FMA2(r, x) EM_FMA1(r, x), v##r##1 = _mm512_fmadd_ps(x, w1, v##r##1)
#define EM_FMA3(r, x) EM_FMA2(r, x), v##r##2 = _mm512_fmadd_ps(x, w2, v##r##2)
#define EM_FMA4(r, x) EM_FMA3(r, x), v##r##3 = _mm512_fmadd_ps(x, w3, v##r##3)
#define EM_FMA5(r, x) EM_FMA4(r, x)
/* The k loop of the first mr (1-5) rows only, ROWS a literal in each case (a ragged tile). */
#define EM_KLOOP_MR(A_MODE, PF)                                                                    \
  switch (mr) {                                                                                    \
  case 1: EM_KLOOP_ROWS(5, A_MODE, PF, 1) break;                                                   \
  case 2: EM_KLOOP_ROWS(5, A_MODE, PF, 2) break;                                                   \
  case 3: EM_KLOOP_ROWS(5, A_MODE, PF, 3) break;                                                   \
  case 4: EM_KLOOP_ROWS(5, A_MODE, PF, 4) break;                                                   \
  default: EM_KLOOP_ROWS(5, A_MODE, PF, 5) break;                                                  \
  }
#define EM_KLOOP(NV, AR, PF) EM_KLOOP_ROWS(NV, AR, PF, 6)
/* ROWS (a literal, 1 to 6): only the first ROWS rows are computed (a ragged last tile). */
#define EM_KLOOP_ROWS(NV, AR, PF, ROWS)                                                            \
  for (size_t k = 0; k < kc; k++) {                                                                \
    PF;                                                                                            \
    const __m512 w0 =                                                                              \
        NV > 1 ? _mm512_loadu_ps(b + k * ldb) : _mm512_maskz_loadu_ps(k0, b + k * ldb);            \
    const __m512 w1 = NV > 2   ? _mm512_loadu_ps(b1 + k * ldb)                                     \
                      : NV > 1 ? _mm512_maskz_loadu_ps(k1, b1 + k * ldb)                           \
                               : w0;                                                               \
    const __m512 w2 = NV > 3   ? _mm512_loadu_ps(b2 + k * ldb)                                     \
                      : NV > 2 ? _mm512_maskz_loadu_ps(k2, b2 + k * ldb)                           \
                               : w0;                                                               \
    const __m512 w3 = NV > 4   ? _mm512_loadu_ps(b3 + k * ldb)                                     \
                      : NV > 3 ? _mm512_maskz_loadu_ps(k3, b3 + k * ldb)                           \
                               : w0;                                                               \
    (void)w1, (void)w2, (void)w3;                                                                  \
    __m512 x;                                                                                      \
    x = _mm512_set1_ps(AR(0, k)), EM_FMA##NV(0, x);                                                \
    if (ROWS > 1) x = _mm512_set1_ps(AR(1, k)), EM_FMA##NV(1, x);                                  \
    if (ROWS > 2) x = _mm512_set1_ps(AR(2, k)), EM_FMA##NV(2, x);                                  \
    if (ROWS > 3) x = _mm512_set1_ps(AR(3, k)), EM_FMA##NV(3, x);                                  \
    if (ROWS > 4) x = _mm512_set1_ps(AR(4, k)), EM_FMA##NV(4, x);                                  \
    if (ROWS > 5) x = _mm512_set1_ps(AR(5, k)), EM_FMA##NV(5, x);                                  \
  }
#define EM_A_PACKED(r, k)  a[6 * (k) + (r)]
#define EM_A_STRIDED(r, k) a##r[(k)*a_ks]
/* One line of the next tile's A panel per k (24 bytes of it a step: every line, some twice);
 * without one, the current panel's own lines (in L1 already: nearly free). */
#define EM_PF_NEXT _mm_prefetch(pf + 24 * k, _MM_HINT_T0)
/* With a strided A: one line per k of a 16-column B panel the next call will read, toward L2. */
#define EM_PF_B _mm_prefetch(pf + 64 * k, _MM_HINT_T1)
/* The same when the driver asked for it (the ragged tiles' loops serve both cases). */
#define EM_PF_B_IF                                                                                 \
  if (a_pf) EM_PF_B

/* The accumulators v<r>0..3 of rows 0-5 declared, row r's starting at n0..n3 (bias_n's vectors)
 * plus BM(r) (its bias_m, broadcast). */
#define EM_ROW_INIT(r, BMV)                                                                        \
  const __m512 bm##r = (BMV);                                                                      \
  __m512 v##r##0 = _mm512_add_ps(n0, bm##r), v##r##1 = _mm512_add_ps(n1, bm##r);                   \
  __m512 v##r##2 = _mm512_add_ps(n2, bm##r), v##r##3 = _mm512_add_ps(n3, bm##r)
#define EM_ROWS_INIT(BM)                                                                           \
  EM_ROW_INIT(0, BM(0));                                                                           \
  EM_ROW_INIT(1, BM(1));                                                                           \
  EM_ROW_INIT(2, BM(2));                                                                           \
  EM_ROW_INIT(3, BM(3));                                                                           \
  EM_ROW_INIT(4, BM(4));                                                                           \
  EM_ROW_INIT(5, BM(5))

/* A whole 6 x 64 tile of packed A, its own K block: the common case with none of the general
 * path's per-call choices (row aliases, masks, live vectors, accumulation): ~17 fewer cycles a
 * tile of its ~90 outside the k loop (Zen 4, in L1: a K = 16 tile 81 -> 85 % of the FMA peak). */
__attribute__((target("avx512f,prfchw"))) static inline __attribute__((always_inline)) void
full_tile(size_t kc, const float *a, const float *b, size_t ldb, size_t b_next, float *c,
          size_t ldc, const float *bias_m, const float *bias_n, const em_minmax_params *p,
          const float *a_pf) {
  float *const c0 = c, *const c1 = c + ldc, *const c2 = c1 + ldc, *const c3 = c2 + ldc,
               *const c4 = c3 + ldc, *const c5 = c4 + ldc;
#define EM_PFW(cr)                                                                                 \
  _mm_prefetch((const char *)(cr), _MM_HINT_ET0),                                                  \
      _mm_prefetch((const char *)((cr) + 16), _MM_HINT_ET0),                                       \
      _mm_prefetch((const char *)((cr) + 32), _MM_HINT_ET0),                                       \
      _mm_prefetch((const char *)((cr) + 48), _MM_HINT_ET0)
  EM_PFW(c0), EM_PFW(c1), EM_PFW(c2), EM_PFW(c3), EM_PFW(c4), EM_PFW(c5);
#undef EM_PFW
  __m512 n0 = _mm512_setzero_ps(), n1 = n0, n2 = n0, n3 = n0;
  if (bias_n)
    n0 = _mm512_loadu_ps(bias_n), n1 = _mm512_loadu_ps(bias_n + 16),
    n2 = _mm512_loadu_ps(bias_n + 32), n3 = _mm512_loadu_ps(bias_n + 48);
#define EM_FULL_BM(r) _mm512_set1_ps(bias_m ? bias_m[r] : 0.0f)
  EM_ROWS_INIT(EM_FULL_BM);
#undef EM_FULL_BM
  const float *b1 = b + b_next, *b2 = b + 2 * b_next, *b3 = b + 3 * b_next;
  const char *pf = (const char *)(a_pf ? a_pf : a);
  __mmask16 k0 = 0xFFFF, k1 = 0xFFFF, k2 = 0xFFFF, k3 = 0xFFFF;
  (void)k0, (void)k1, (void)k2, (void)k3;
  if (a_pf) {
    EM_KLOOP(5, EM_A_PACKED, EM_PF_NEXT)
  } else {
    EM_KLOOP(5, EM_A_PACKED, (void)0)
  }
  const __m512 lo = _mm512_set1_ps(p->min), hi = _mm512_set1_ps(p->max);
#define EM_ROW_OUT(r, HS)                                                                          \
  do {                                                                                             \
    __m512 e0 = _mm512_min_ps(hi, _mm512_max_ps(lo, v##r##0));                                     \
    __m512 e1 = _mm512_min_ps(hi, _mm512_max_ps(lo, v##r##1));                                     \
    __m512 e2 = _mm512_min_ps(hi, _mm512_max_ps(lo, v##r##2));                                     \
    __m512 e3 = _mm512_min_ps(hi, _mm512_max_ps(lo, v##r##3));                                     \
    if (HS)                                                                                        \
      e0 = em_hswish_f32x16(e0), e1 = em_hswish_f32x16(e1), e2 = em_hswish_f32x16(e2),             \
      e3 = em_hswish_f32x16(e3);                                                                   \
    _mm512_storeu_ps(c##r, e0), _mm512_storeu_ps(c##r + 16, e1);                                   \
    _mm512_storeu_ps(c##r + 32, e2), _mm512_storeu_ps(c##r + 48, e3);                              \
  } while (0)
  if (p->hswish) {
    EM_ROW_OUT(0, 1);
    EM_ROW_OUT(1, 1);
    EM_ROW_OUT(2, 1);
    EM_ROW_OUT(3, 1);
    EM_ROW_OUT(4, 1);
    EM_ROW_OUT(5, 1);
  } else {
    EM_ROW_OUT(0, 0);
    EM_ROW_OUT(1, 0);
    EM_ROW_OUT(2, 0);
    EM_ROW_OUT(3, 0);
    EM_ROW_OUT(4, 0);
    EM_ROW_OUT(5, 0);
  }
#undef EM_ROW_OUT
}

__attribute__((target("avx512f,prfchw")))
EM_GEMM_UKERNEL_DECL(em_f32_gemm_minmax_ukernel_6x64__avx512f) {
  if (mr == 6 && nc == 64 && !accumulate && a_rs == 1 && a_ks == 6) {
    full_tile(kc, a, b, ldb, b_next, c, ldc, bias_m, bias_n, p, a_pf);
    return;
  }
  float *cp[6];
  const float *ap[6];
  em_gemm_tile_rows(mr, a, a_rs, c, ldc, ap, cp);
  const __mmask16 k0 = lane_mask(nc, 0), k1 = lane_mask(nc, 16), k2 = lane_mask(nc, 32),
                  k3 = lane_mask(nc, 48);
  const int nv = nc > 48 ? 4 : nc > 32 ? 3 : nc > 16 ? 2 : 1;
  /* The accumulators are named variables from start to end: indexed in an array (acc[r][v] with
   * r a loop variable) they were spilled to the stack and reloaded around the k loop, ~100 of a
   * 6x64 tile's cycles (a K = 32 tile: 80 -> 92 % of the FMA peak in L1, Zen 4). */
  __m512 n0 = _mm512_setzero_ps(), n1 = n0, n2 = n0, n3 = n0;
  if (accumulate) {
    for (size_t r = 0; r < mr; r++)
      for (int v = 0; v < nv; v++) _mm_prefetch((const char *)(cp[r] + 16 * v), _MM_HINT_T0);
  } else {
    /* C's lines, for writing: their read-for-ownership overlaps the k loop instead of stalling
     * the stores at its end (outputs past L2 such as ResNet-50's 56x56 convs: 11-15 % faster
     * in isolation; MobileNets 2-4 % at 2 threads, interleaved). */
    for (size_t r = 0; r < mr; r++)
      for (int v = 0; v < nv; v++) _mm_prefetch((const char *)(cp[r] + 16 * v), _MM_HINT_ET0);
    if (bias_n) {
      n0 = _mm512_maskz_loadu_ps(k0, bias_n);
      n1 = _mm512_maskz_loadu_ps(k1, bias_n + 16);
      n2 = _mm512_maskz_loadu_ps(k2, bias_n + 32);
      n3 = _mm512_maskz_loadu_ps(k3, bias_n + 48);
    }
  }
  /* row r starts at bias_n + bias_m[r] (rows past mr: the last row's), or zero to accumulate */
#define EM_ROW_BM(r)                                                                               \
  _mm512_set1_ps(!accumulate && bias_m ? bias_m[(size_t)(r) < mr ? (size_t)(r) : mr - 1] : 0.0f)
  EM_ROWS_INIT(EM_ROW_BM);
#undef EM_ROW_BM
  const float *a0 = ap[0], *a1 = ap[1], *a2 = ap[2], *a3 = ap[3], *a4 = ap[4], *a5 = ap[5];
  const float *b1 = b + b_next, *b2 = b + 2 * b_next, *b3 = b + 3 * b_next;
  const char *pf = (const char *)(a_pf ? a_pf : a);
  if (nc == 64 && mr < 6) {
    /* A ragged last tile: only its rows (ResNet's 7x7 maps run transposed, M = 49 pixels: the
     * ninth tile holds one row; 49 x 512 x 4608 8 % faster, 49 x 2048 x 512 6 %; ResNet-18 /
     * ResNet-50 1.1 / 1.6 % at 1 thread, 2.7 / 1.8 % at 2, MiniLM 1.7 %, paired). */
    if (a_rs == 1 && a_ks == 6) {
      EM_KLOOP_MR(EM_A_PACKED, EM_PF_NEXT)
    } else {
      EM_KLOOP_MR(EM_A_STRIDED, EM_PF_B_IF)
    }
  } else if (a_rs == 1 && a_ks == 6) {
    if (nc == 64 && a_pf) {
      EM_KLOOP(5, EM_A_PACKED, EM_PF_NEXT)
    } else if (nc == 64) { /* A panels already in cache: no prefetch uop taking a load slot */
      EM_KLOOP(5, EM_A_PACKED, (void)0)
    } else if (nv == 4) {
      EM_KLOOP(4, EM_A_PACKED, EM_PF_NEXT)
    } else if (nv == 3) {
      EM_KLOOP(3, EM_A_PACKED, EM_PF_NEXT)
    } else if (nv == 2) {
      EM_KLOOP(2, EM_A_PACKED, EM_PF_NEXT)
    } else {
      EM_KLOOP(1, EM_A_PACKED, EM_PF_NEXT)
    }
  } else {
    if (nc == 64 && a_pf) {
      EM_KLOOP(5, EM_A_STRIDED, EM_PF_B)
    } else if (nc == 64) {
      EM_KLOOP(5, EM_A_STRIDED, (void)0)
    } else if (nv == 4) {
      EM_KLOOP(4, EM_A_STRIDED, (void)0)
    } else if (nv == 3) {
      EM_KLOOP(3, EM_A_STRIDED, (void)0)
    } else if (nv == 2) {
      EM_KLOOP(2, EM_A_STRIDED, (void)0)
    } else {
      EM_KLOOP(1, EM_A_STRIDED, (void)0)
    }
  }
  const __m512 lo = _mm512_set1_ps(p->min), hi = _mm512_set1_ps(p->max);
  const int hs = p->hswish != 0;
#define EM_ROW_STORE(r)                                                                            \
  do {                                                                                             \
    __m512 e0 = v##r##0, e1 = v##r##1, e2 = v##r##2, e3 = v##r##3;                                 \
    if (accumulate) {                                                                              \
      e0 = _mm512_add_ps(e0, _mm512_maskz_loadu_ps(k0, cp[r]));                                    \
      e1 = _mm512_add_ps(e1, _mm512_maskz_loadu_ps(k1, cp[r] + 16));                               \
      e2 = _mm512_add_ps(e2, _mm512_maskz_loadu_ps(k2, cp[r] + 32));                               \
      e3 = _mm512_add_ps(e3, _mm512_maskz_loadu_ps(k3, cp[r] + 48));                               \
    }                                                                                              \
    e0 = _mm512_min_ps(hi, _mm512_max_ps(lo, e0)), e1 = _mm512_min_ps(hi, _mm512_max_ps(lo, e1));  \
    e2 = _mm512_min_ps(hi, _mm512_max_ps(lo, e2)), e3 = _mm512_min_ps(hi, _mm512_max_ps(lo, e3));  \
    if (hs)                                                                                        \
      e0 = em_hswish_f32x16(e0), e1 = em_hswish_f32x16(e1), e2 = em_hswish_f32x16(e2),             \
      e3 = em_hswish_f32x16(e3);                                                                   \
    _mm512_mask_storeu_ps(cp[r], k0, e0);                                                          \
    _mm512_mask_storeu_ps(cp[r] + 16, k1, e1);                                                     \
    _mm512_mask_storeu_ps(cp[r] + 32, k2, e2);                                                     \
    _mm512_mask_storeu_ps(cp[r] + 48, k3, e3);                                                     \
  } while (0)
  EM_ROW_STORE(0);
  if (mr > 1) EM_ROW_STORE(1);
  if (mr > 2) EM_ROW_STORE(2);
  if (mr > 3) EM_ROW_STORE(3);
  if (mr > 4) EM_ROW_STORE(4);
  if (mr > 5) EM_ROW_STORE(5);
#undef EM_ROW_STORE
}

/* Tiles' rows of one column, four tiles' chains interleaved (each element's own chain of FMAs
 * over k, as in the tile; four of them hide the FMA's latency). */
__attribute__((target("avx512f"))) void
em_f32_gemm_col_ukernel__avx512f(size_t ntiles, size_t mr_last, size_t kc, const float *a,
                                 size_t a_next, const float *x, const float *bias_m, float bias_n_j,
                                 int accumulate, const em_minmax_params *p, float *c, size_t ldc) {
  const __mmask16 six = 0x3F;
  const __m512 lo = _mm512_set1_ps(p->min), hi = _mm512_set1_ps(p->max);
  const __m512 bn = _mm512_set1_ps(accumulate ? 0.0f : bias_n_j);
  for (size_t t0 = 0; t0 < ntiles; t0 += 4) {
    const size_t nt = ntiles - t0 < 4 ? ntiles - t0 : 4;
    const float *a0 = a + t0 * a_next, *a1 = nt > 1 ? a0 + a_next : a0;
    const float *a2 = nt > 2 ? a1 + a_next : a1, *a3 = nt > 3 ? a2 + a_next : a2;
    __m512 v[4];
    for (size_t i = 0; i < 4; i++) { /* bias_n + bias_m[r] (rows past M read as 0) */
      const size_t t = t0 + (i < nt ? i : nt - 1), rows = t + 1 == ntiles ? mr_last : 6;
      const __m512 bm = !accumulate && bias_m
                            ? _mm512_maskz_loadu_ps((__mmask16)((1u << rows) - 1u), bias_m + t * 6)
                            : _mm512_setzero_ps();
      v[i] = _mm512_add_ps(bn, bm);
    }
    __m512 v0 = v[0], v1 = v[1], v2 = v[2], v3 = v[3];
    for (size_t k = 0; k < kc; k++) {
      const __m512 xk = _mm512_set1_ps(x[k]);
      v0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(six, a0 + k * 6), xk, v0);
      v1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(six, a1 + k * 6), xk, v1);
      v2 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(six, a2 + k * 6), xk, v2);
      v3 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(six, a3 + k * 6), xk, v3);
    }
    v[0] = v0, v[1] = v1, v[2] = v2, v[3] = v3;
    for (size_t i = 0; i < nt; i++) {
      const size_t t = t0 + i, rows = t + 1 == ntiles ? mr_last : 6;
      float *ct = c + t * 6 * ldc, e[16];
      __m512 ev = v[i];
      if (accumulate) {
        float cv[16] = {0};
        for (size_t r = 0; r < rows; r++) cv[r] = ct[r * ldc];
        ev = _mm512_add_ps(ev, _mm512_loadu_ps(cv));
      }
      ev = _mm512_min_ps(hi, _mm512_max_ps(lo, ev));
      if (p->hswish) ev = em_hswish_f32x16(ev);
      _mm512_storeu_ps(e, ev);
      for (size_t r = 0; r < rows; r++) ct[r * ldc] = e[r];
    }
  }
}
