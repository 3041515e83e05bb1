/*
 * f32_wino__avx512f.c — the Winograd F(m x m, 3 x 3) input and output
 * transforms (m = 2 or 4) for avx512f; the plain-C versions every other ISA
 * uses are in f32_vops_impl.h, with the transforms' algebra.
 *
 * Tiles run 16 to a vector (lane t = tile t). A tile's input columns are
 * t * m + j, so the input transform deinterleaves each row of B^T d into its m
 * phases (two permutes per phase pair, then 128-bit lane shuffles) and gets
 * columns m and m + 1 by shifting phases 0 and 1 one lane; the output
 * transform interleaves its m columns back the same way. The input transform's
 * lanes may hold several runs of tiles with a gap lane between two (a keep
 * mask): the tiles' lanes are packed down by a register compress as they are
 * stored (vcompressps to memory is microcoded and slow on Zen 4).
 */
#include <immintrin.h>

#include "cpu_ukernels.h"

#define RW (EM_WINO_MAX_LANES * 4 + 48) /* one row of B^T d, with room to over-read */

static inline __mmask16 tail_mask(size_t n) {
  return n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1u);
}

static inline __m512i idx16(int i0, int i1, int i2, int i3, int i4, int i5, int i6, int i7, int i8,
                            int i9, int i10, int i11, int i12, int i13, int i14, int i15) {
  return _mm512_setr_epi32(i0, i1, i2, i3, i4, i5, i6, i7, i8, i9, i10, i11, i12, i13, i14, i15);
}

/* B^T applied down 6 (m = 4) or 4 (m = 2) rows: one vector of each row in, of each output out. */
__attribute__((target("avx512f"))) static inline void bt_vec(int m, const __m512 *x, __m512 *o) {
  if (m == 2) {
    o[0] = _mm512_sub_ps(x[0], x[2]), o[1] = _mm512_add_ps(x[1], x[2]);
    o[2] = _mm512_sub_ps(x[2], x[1]), o[3] = _mm512_sub_ps(x[1], x[3]);
    return;
  }
  const __m512 four = _mm512_set1_ps(4.0f), five = _mm512_set1_ps(5.0f), two = _mm512_set1_ps(2.0f);
  const __m512 x4mx2 = _mm512_sub_ps(x[4], x[2]), d31 = _mm512_sub_ps(x[3], x[1]);
  o[0] = _mm512_add_ps(_mm512_fnmadd_ps(five, x[2], _mm512_mul_ps(four, x[0])), x[4]);
  o[1] = _mm512_fnmadd_ps(four, _mm512_add_ps(x[1], x[2]), _mm512_add_ps(x[3], x[4]));
  o[2] = _mm512_fmadd_ps(four, _mm512_sub_ps(x[1], x[2]), _mm512_sub_ps(x[4], x[3]));
  o[3] = _mm512_fmadd_ps(two, d31, x4mx2);
  o[4] = _mm512_fnmadd_ps(two, d31, x4mx2);
  o[5] = _mm512_add_ps(_mm512_fnmadd_ps(five, x[3], _mm512_mul_ps(four, x[1])), x[5]);
}

/* The input transform for a literal m (so every loop over a = m + 2 unrolls). */
__attribute__((target("avx512f"), always_inline)) static inline void
wino_in(const int m, size_t n, const uint16_t *keep, const float *rows, size_t ldr, float *v,
        size_t vs) {
  const size_t a = (size_t)m + 2, wd = n * (size_t)m + 2;
  __attribute__((aligned(64))) float r[6 * RW];
  /* Pass 1, along the rows: r[p] = sum_i B^T[p][i] rows[i], zero past wd up to what pass 2
   * reads for its last vector of tiles (lanes never stored, but garbage there could be
   * denormals, which cost microcode assists). */
  const size_t rend = (n + 15) / 16 * 16 * (size_t)m + 16;
  for (size_t x0 = 0; x0 < rend; x0 += 16) {
    const __mmask16 k = x0 < wd ? tail_mask(wd - x0) : 0;
    __m512 x[6], o[6];
    for (size_t i = 0; i < a; i++) x[i] = _mm512_maskz_loadu_ps(k, rows + i * ldr + x0);
    bt_vec(m, x, o);
    for (size_t p = 0; p < a; p++) _mm512_store_ps(r + p * RW + x0, o[p]);
  }
  /* Pass 2, across: tile t's column j is r[p][t * m + j]. */
  const __m512i ev = idx16(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i od = _mm512_add_epi32(ev, _mm512_set1_epi32(1));
  const __m512i q01 = idx16(0, 4, 8, 12, 16, 20, 24, 28, 1, 5, 9, 13, 17, 21, 25, 29);
  const __m512i q23 = _mm512_add_epi32(q01, _mm512_set1_epi32(2));
  size_t out = 0; /* tiles stored so far */
  for (size_t t0 = 0; t0 < n; t0 += 16) {
    const __mmask16 k = keep ? (__mmask16)(keep[t0 / 16] & tail_mask(n - t0)) : tail_mask(n - t0);
    const unsigned cnt = (unsigned)__builtin_popcount(k);
    for (size_t p = 0; p < a; p++) {
      const float *rp = r + p * RW + t0 * (size_t)m;
      __m512 x[6], o[6];
      if (m == 2) {
        const __m512 v0 = _mm512_load_ps(rp), v1 = _mm512_load_ps(rp + 16);
        x[0] = _mm512_permutex2var_ps(v0, ev, v1), x[1] = _mm512_permutex2var_ps(v0, od, v1);
        x[2] = _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(_mm512_set1_ps(rp[32])),
                                                       _mm512_castps_si512(x[0]), 1));
        x[3] = _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(_mm512_set1_ps(rp[33])),
                                                       _mm512_castps_si512(x[1]), 1));
      } else {
        const __m512 v0 = _mm512_load_ps(rp), v1 = _mm512_load_ps(rp + 16);
        const __m512 v2 = _mm512_load_ps(rp + 32), v3 = _mm512_load_ps(rp + 48);
        const __m512 w01 = _mm512_permutex2var_ps(v0, q01, v1),
                     z01 = _mm512_permutex2var_ps(v2, q01, v3);
        const __m512 w23 = _mm512_permutex2var_ps(v0, q23, v1),
                     z23 = _mm512_permutex2var_ps(v2, q23, v3);
        x[0] = _mm512_shuffle_f32x4(w01, z01, 0x44), x[1] = _mm512_shuffle_f32x4(w01, z01, 0xEE);
        x[2] = _mm512_shuffle_f32x4(w23, z23, 0x44), x[3] = _mm512_shuffle_f32x4(w23, z23, 0xEE);
        x[4] = _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(_mm512_set1_ps(rp[64])),
                                                       _mm512_castps_si512(x[0]), 1));
        x[5] = _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(_mm512_set1_ps(rp[65])),
                                                       _mm512_castps_si512(x[1]), 1));
      }
      bt_vec(m, x, o);
      float *op = v + p * a * vs + out;
      if (keep) { /* the tiles' lanes packed down (a register compress: fast, unlike to memory) */
        const __mmask16 kc = tail_mask(cnt);
        for (size_t q = 0; q < a; q++)
          _mm512_mask_storeu_ps(op + q * vs, kc, _mm512_maskz_compress_ps(k, o[q]));
      } else {
        for (size_t q = 0; q < a; q++) _mm512_mask_storeu_ps(op + q * vs, k, o[q]);
      }
    }
    out += cnt;
  }
}

/* The output transform for a literal m. */
__attribute__((target("avx512f"), always_inline)) static inline void
wino_out(const int m, size_t n, const float *mm, size_t ms, float bias, float *rows, size_t ldr,
         const em_minmax_params *p) {
  const size_t a = (size_t)m + 2;
  const __m512 lo = _mm512_set1_ps(p->min), hi = _mm512_set1_ps(p->max), b = _mm512_set1_ps(bias);
  const __m512 two = _mm512_set1_ps(2.0f), four = _mm512_set1_ps(4.0f),
               eight = _mm512_set1_ps(8.0f);
  /* Interleave indices: m = 2, y[2 i + c] = Y_c[i]; m = 4 (after 128-bit shuffles), see below. */
  const __m512i il0 = idx16(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i il1 = _mm512_add_epi32(il0, _mm512_set1_epi32(8));
  const __m512i iq0 = idx16(0, 8, 16, 24, 1, 9, 17, 25, 2, 10, 18, 26, 3, 11, 19, 27);
  const __m512i iq1 = _mm512_add_epi32(iq0, _mm512_set1_epi32(4));
  for (size_t t0 = 0; t0 < n; t0 += 16) {
    const __mmask16 k = tail_mask(n - t0);
    __m512 s[4][6]; /* A^T applied down the columns: s[i][q] */
    for (size_t q = 0; q < a; q++) {
      __m512 x[6];
      for (size_t r = 0; r < a; r++) x[r] = _mm512_maskz_loadu_ps(k, mm + (r * a + q) * ms + t0);
      if (m == 2) {
        s[0][q] = _mm512_add_ps(_mm512_add_ps(x[0], x[1]), x[2]);
        s[1][q] = _mm512_sub_ps(_mm512_sub_ps(x[1], x[2]), x[3]);
      } else {
        const __m512 s12 = _mm512_add_ps(x[1], x[2]), d12 = _mm512_sub_ps(x[1], x[2]);
        const __m512 s34 = _mm512_add_ps(x[3], x[4]), d34 = _mm512_sub_ps(x[3], x[4]);
        s[0][q] = _mm512_add_ps(_mm512_add_ps(x[0], s12), s34);
        s[1][q] = _mm512_fmadd_ps(two, d34, d12);
        s[2][q] = _mm512_fmadd_ps(four, s34, s12);
        s[3][q] = _mm512_add_ps(_mm512_fmadd_ps(eight, d34, d12), x[5]);
      }
    }
    for (size_t i = 0; i < (size_t)m; i++) {
      const __m512 *x = s[i];
      float *y = rows + i * ldr + t0 * (size_t)m;
      if (m == 2) {
        __m512 y0 = _mm512_add_ps(_mm512_add_ps(x[0], x[1]), _mm512_add_ps(x[2], b));
        __m512 y1 = _mm512_sub_ps(_mm512_sub_ps(x[1], x[2]), _mm512_sub_ps(x[3], b));
        y0 = _mm512_min_ps(hi, _mm512_max_ps(lo, y0)),
        y1 = _mm512_min_ps(hi, _mm512_max_ps(lo, y1));
        _mm512_storeu_ps(y, _mm512_permutex2var_ps(y0, il0, y1));
        _mm512_storeu_ps(y + 16, _mm512_permutex2var_ps(y0, il1, y1));
        continue;
      }
      const __m512 s12 = _mm512_add_ps(x[1], x[2]), d12 = _mm512_sub_ps(x[1], x[2]);
      const __m512 s34 = _mm512_add_ps(x[3], x[4]), d34 = _mm512_sub_ps(x[3], x[4]);
      __m512 y0 = _mm512_add_ps(_mm512_add_ps(x[0], s12), _mm512_add_ps(s34, b));
      __m512 y1 = _mm512_add_ps(_mm512_fmadd_ps(two, d34, d12), b);
      __m512 y2 = _mm512_add_ps(_mm512_fmadd_ps(four, s34, s12), b);
      __m512 y3 = _mm512_add_ps(_mm512_add_ps(_mm512_fmadd_ps(eight, d34, d12), x[5]), b);
      y0 = _mm512_min_ps(hi, _mm512_max_ps(lo, y0)), y1 = _mm512_min_ps(hi, _mm512_max_ps(lo, y1));
      y2 = _mm512_min_ps(hi, _mm512_max_ps(lo, y2)), y3 = _mm512_min_ps(hi, _mm512_max_ps(lo, y3));
      /* w01 = [y0 0..7 | y1 0..7], z01 = [y0 8..15 | y1 8..15], likewise w23 / z23; then
       * output vector c (tiles 4c..4c+3, four columns each) picks lanes from them. */
      const __m512 w01 = _mm512_shuffle_f32x4(y0, y1, 0x44),
                   z01 = _mm512_shuffle_f32x4(y0, y1, 0xEE);
      const __m512 w23 = _mm512_shuffle_f32x4(y2, y3, 0x44),
                   z23 = _mm512_shuffle_f32x4(y2, y3, 0xEE);
      _mm512_storeu_ps(y, _mm512_permutex2var_ps(w01, iq0, w23));
      _mm512_storeu_ps(y + 16, _mm512_permutex2var_ps(w01, iq1, w23));
      _mm512_storeu_ps(y + 32, _mm512_permutex2var_ps(z01, iq0, z23));
      _mm512_storeu_ps(y + 48, _mm512_permutex2var_ps(z01, iq1, z23));
    }
  }
}

__attribute__((target("avx512f"))) void
em_f32_wino_in_ukernel__avx512f(int m, size_t n, const uint16_t *keep, const float *rows,
                                size_t ldr, float *v, size_t vs) {
  if (m == 2)
    wino_in(2, n, keep, rows, ldr, v, vs);
  else
    wino_in(4, n, keep, rows, ldr, v, vs);
}

__attribute__((target("avx512f"))) void
em_f32_wino_out_ukernel__avx512f(int m, size_t n, const float *mm, size_t ms, float bias,
                                 float *rows, size_t ldr, const em_minmax_params *p) {
  if (m == 2)
    wino_out(2, n, mm, ms, bias, rows, ldr, p);
  else
    wino_out(4, n, mm, ms, bias, rows, ldr, p);
}
