/*
 * q8_gemm_impl.h — the portable int8 GEMM tile of the int8 convs (EMC_CONV_Q8) and their input
 * quantizer, included by one file per ISA (q8_gemm__scalar.c, q8_gemm__avx2.c,
 * q8_gemm_6x16__avx512vnni.c: the compiler vectorizes them with that ISA's flags; the VNNI file
 * has its own tile, quantizer and packer and defines EM_Q8_NO_TILE, _QUANT and _PACK). Before
 * including, define EM_ISA.
 *
 * A tile is up to 6 rows (output channels) by 16 columns (pixels): a holds the row panel,
 * [kq][6][4] int8 weights; b the column panel, [kq][16][4] u8 inputs. Each row's dot products of
 * groups of 4 are summed exactly in int32 (the conv's check bounds K by 65536, so no sum
 * overflows), then c[r][j] = (acc - corr[r]) * scale[r] + bias[r] for r < mr, j < nr.
 */
#include <stdint.h>
#include <string.h>

#include "cpu_ukernels.h"

#define EM_Q8_CAT2(a, b) a##b
#define EM_Q8_CAT(a, b)  EM_Q8_CAT2(a, b)

#ifndef EM_Q8_NO_QUANT /* the ISA file has its own quantizer */
/* Planes to channels last (cpu_ukernels.h): one plane at a time, its bytes spread ys apart. */
void EM_Q8_CAT(em_q8_quant_ukernel__, EM_ISA)(size_t c, size_t n, const float *x, size_t xs,
                                              uint8_t *y, size_t ys, const em_q8_quant_params *p) {
  for (size_t ch = 0; ch < c; ch++)
    for (size_t i = 0; i < n; i++) y[i * ys + ch] = em_q8_quant1(x[ch * xs + i], p);
}
#endif /* EM_Q8_NO_QUANT */

/* One tap of a column panel (cpu_ukernels.h): a 4-byte copy per pixel and group. */
static inline void EM_Q8_CAT(q8_pack_groups_, EM_ISA)(const uint8_t *const *src, size_t off,
                                                      size_t q0, size_t cq, uint8_t *dst) {
  for (size_t q = q0; q < cq; q++)
    for (size_t j = 0; j < 16; j++) memcpy(dst + q * 64 + j * 4, src[j] + off + q * 4, 4);
}

#ifndef EM_Q8_NO_DW /* the ISA file has its own depthwise row */
void EM_Q8_CAT(em_q8_dwconv_ukernel__, EM_ISA)(const uint8_t *in, uint8_t *out,
                                               const em_q8_dw_params *p) {
  for (size_t o = 0; o < p->ow; o++)
    for (size_t c = 0; c < p->ch; c++) {
      float acc = 0.0f;
      for (size_t ky = 0; ky < p->kh; ky++)
        for (size_t kx = 0; kx < p->kw; kx++)
          acc +=
              in[o * p->step + ky * p->dy + kx * p->dx + c] * p->w[(ky * p->kw + kx) * p->cw + c];
      const float y = (acc - p->corr[c]) * p->scale[c] + p->bias[c];
      out[o * p->cpo + c] = em_q8_quant1(y, &p->oq);
    }
}
#endif /* EM_Q8_NO_DW */

#ifndef EM_Q8_NO_ADD /* the ISA file has its own add row */
void EM_Q8_CAT(em_q8_add_ukernel__, EM_ISA)(size_t n, const uint8_t *a, const uint8_t *b,
                                            uint8_t *y, const em_q8_add_params *p) {
  for (size_t i = 0; i < n; i++) {
    const float ta = ((float)a[i] - p->za) * p->sa; /* (statements apart: never contracted) */
    const float tb = ((float)b[i] - p->zb) * p->sb;
    y[i] = em_q8_quant1(ta + tb, &p->oq);
  }
}
#endif /* EM_Q8_NO_ADD */

#ifndef EM_Q8_NO_PACK /* the ISA file has its own packer */
void EM_Q8_CAT(em_q8_pack16_ukernel__, EM_ISA)(const uint8_t *const *src, size_t off, size_t cq,
                                               uint8_t *dst) {
  EM_Q8_CAT(q8_pack_groups_, EM_ISA)(src, off, 0, cq, dst);
}
#endif /* EM_Q8_NO_PACK */

#ifndef EM_Q8_NO_TILE /* the ISA file has its own tile */
void EM_Q8_CAT(em_q8_gemm_6x16_ukernel__, EM_ISA)(size_t mr, size_t nr, size_t kq, const int8_t *a,
                                                  const uint8_t *b, const int32_t *corr,
                                                  const float *scale, const float *bias, float *c,
                                                  size_t ldc) {
  int32_t acc[6][16];
  memset(acc, 0, sizeof acc);
  for (size_t q = 0; q < kq; q++) {
    const int8_t *ap = a + q * 24;
    const uint8_t *bp = b + q * 64;
    for (size_t r = 0; r < 6; r++) {
      const int32_t a0 = ap[r * 4], a1 = ap[r * 4 + 1], a2 = ap[r * 4 + 2], a3 = ap[r * 4 + 3];
      for (size_t j = 0; j < 16; j++)
        acc[r][j] += a0 * bp[j * 4] + a1 * bp[j * 4 + 1] + a2 * bp[j * 4 + 2] + a3 * bp[j * 4 + 3];
    }
  }
  for (size_t r = 0; r < mr; r++) {
    const float s = scale[r], t = bias ? bias[r] : 0.0f;
    for (size_t j = 0; j < nr; j++) c[r * ldc + j] = (float)((int64_t)acc[r][j] - corr[r]) * s + t;
  }
}
#endif /* EM_Q8_NO_TILE */
