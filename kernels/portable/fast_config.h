/*
 * fast_config.h — the portable kernels' optional optimized layer, as they see it: one table of
 * function pointers per ISA (XNNPACK-style), each entry a faster body of a loop some portable
 * kernel also has in plain C.
 *
 *     const em_portable_fast_config *cfg = em_portable_fast_config_get();
 *     em_parallel_fn fn = cfg->gemv_rm ? cfg->gemv_rm : gemv_rm_task__scalar;
 *
 * A NULL entry means "run the plain C loop"; every non-NULL entry gives results the kernel's
 * tests accept, and the same bits whichever table the kernel got them from. The tables live in
 * kernels/optimized/ (x86-64: AVX2+FMA and AVX-512F bodies, each file compiled with its own
 * target flags), built when CMake's EMBER_OPTIMIZED_KERNELS is ON (the default), which defines
 * EMBER_OPTIMIZED_KERNELS=1 for the kernels. Without it (the option OFF, the MCU build, the
 * amalgamation) the getter below returns a table of NULLs and kernels/portable stays plain C:
 * no intrinsics, no <immintrin.h>, no CPU probe.
 */
#ifndef EMBER_KERNELS_PORTABLE_FAST_CONFIG_H
#define EMBER_KERNELS_PORTABLE_FAST_CONFIG_H

#include "portable/ew_util.h"
#include "portable/nn_util.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * c[0..mr, 0..nr) (+)= a_panel @ b_panel over kc (nn_gemm.c): a is [kc][NN_GEMM_MR], b is kc
 * rows of NN_GEMM_NR floats ldb apart, both zero-padded past mr / nr; C element (i, j) is
 * c[i * rs + j * cs]; accumulate adds to C instead of overwriting it.
 */
typedef void (*em_f32_gemm_tile_fn)(int64_t kc, const float *a, const float *b, int64_t ldb,
                                    float *c, int64_t rs, int64_t cs, int mr, int nr,
                                    bool accumulate);

/* The dot product of two contiguous rows of k floats (nn_gemm.c's matrix-vector path). */
typedef float (*em_f32_dot_fn)(const float *x, const float *y, int64_t k);

/* One element of an all-f32 activation (ew_op.f32; x[0] is the input). */
typedef float (*em_f32_act_fn)(const float *x, const ew_op *op);

/* The optimized bodies of one ISA; NULL: the portable kernel's plain C loop. */
typedef struct em_portable_fast_config {
  const char *isa; /* "avx512f", "avx2" or "none" */
  /* nn_gemm.c */
  em_f32_gemm_tile_fn gemm; /* the NN_GEMM_MR x NN_GEMM_NR micro-kernel */
  em_f32_dot_fn dot;        /* the matrix-vector dot products */
  em_parallel_fn gemv_rm;   /* tasks of an nn_gemv_rm_job (nn_gemm.h) */
  /* elementwise_activation.c: sigmoid and silu, each per element and by rows (ew_op.f32 and
     ew_op.f32_row: set together, they give the same bits) */
  em_f32_act_fn sigmoid, silu;
  ew_f32_row_fn sigmoid_row, silu_row;
  /* llama_attention.c: tasks of an sdpa_job (llama_attention.h) */
  em_parallel_fn sdpa_heads;     /* any head dims */
  em_parallel_fn sdpa_heads_d16; /* only D == Dv, D % 16 == 0, D <= 256, no mask; reads f16
                                    caches too (sdpa_args.kv_f16) */
  em_parallel_fn sdpa_split;     /* tasks of an sdpa_split_job (one query row, D == Dv == 64, no
                                    mask; f16 caches too) */
} em_portable_fast_config;

#if defined(EMBER_OPTIMIZED_KERNELS) && EMBER_OPTIMIZED_KERNELS
/*
 * The table for this CPU's features under the library's one ISA cap (include/ember/cpu.h:
 * em_cpu_features_get). The tables are constant, so the call is two loads; a cap set later
 * (em_cpu_set_isa_cap) reaches the next kernel call. Thread-safe.
 */
const em_portable_fast_config *em_portable_fast_config_get(void);
#else
/* The optimized layer is not built: every entry NULL. */
static inline const em_portable_fast_config *em_portable_fast_config_get(void) {
  static const em_portable_fast_config none = {"none", NULL, NULL, NULL, NULL, NULL,
                                               NULL,   NULL, NULL, NULL, NULL};
  return &none;
}
#endif

#ifdef __cplusplus
}
#endif

#endif /* EMBER_KERNELS_PORTABLE_FAST_CONFIG_H */
