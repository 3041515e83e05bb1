/*
 * cpu_gemm.c — the CPU backend's GEMM driver: C[M, N] = A[M, K] @ B[K, N]
 * (+ bias, clamp, activation) through the ISA's EMC_MR x nr micro-kernel.
 *
 * Blocking (GotoBLAS / BLIS order, with the roles fitted to a kernel that
 * broadcasts A and loads B vectors, so B is the operand with the most bytes
 * per k):
 *
 *   for each work item group (an M block of mb tiles x a run of column strips)
 *     for each K block of kcb rows            — A block [mb * 6, kcb] stays in L2
 *       for each column strip of nr columns   — B micro-panel [kcb, nr] stays in L1
 *         for each 6-row tile of the M block  — A micro-panel streams from L2
 *           micro-kernel
 *
 * When an M block's whole A (all of K) fits the A-block budget, the strip and
 * K-block loops swap (strip outside): C tiles then stay hot across K blocks.
 *
 * Partial sums go through C (the kernel prefetches it); bias is added by the
 * first K block, clamp and activation by the last. A row-major B (a 1x1
 * convolution's activations, ldb = H * W) is copied strip by strip into a
 * per-thread buffer when the caller gives one: contiguous rows cannot alias
 * in L1 the way rows H * W floats apart do. A caller's pack_b callback builds
 * the strip instead (a convolution's im2col rows), so no im2col matrix is ever
 * materialised. Work items are numbered M block major, strip minor, and
 * handed out in contiguous chunks, so any split over threads keeps each
 * thread's A block in its own L2.
 */
#include <math.h>
#include <string.h>

#include "cpu_internal.h"

/* K block: a [kcb, 64] B micro-panel is 32 KiB, 2/3 of this Xeon's 48 KiB L1d (96 and 192
 * measured no better on it). On Zen 4 (32 KiB L1d) 96 and 64 were slower too: ViT-B/16 and
 * ResNet-50 0.96-1.00x at 1 thread, paired. */
#define EMC_KCB 128
/* A block: [mb * 6, kcb] floats within 512 KiB, half of the smallest L2 we target (Zen 4). */
#define EMC_A_BLOCK_FLOATS (128 * 1024)

/*
 * The K block for depth k: blocks of equal depth near EMC_KCB and at most EMC_KCB * 5 / 4, so
 * no sliver of a last block pays a whole C round trip for a few k (K = 147, a 7x7 RGB stem: one
 * block of 147, not 128 + 19; K = 576: 5 x 116, not 4 x 128 + 64).
 */
static size_t k_block(size_t k) {
  size_t nb = (k + EMC_KCB / 2) / EMC_KCB;
  if (nb < 1) nb = 1;
  if (emc_div_up(k, nb) > EMC_KCB * 5 / 4) nb++;
  return emc_div_up(k, nb);
}

/* Copies rows [k0, k0 + kc), columns [n0, n0 + nc) of a row-major B into dst[kc][ldd]. */
static void pack_strip(const emc_gemm *g, size_t k0, size_t kc, size_t n0, size_t nc, float *dst,
                       size_t ldd) {
  const float *src = g->b + k0 * g->ldb + n0;
  for (size_t k = 0; k < kc; k++) memcpy(dst + k * ldd, src + k * g->ldb, nc * sizeof *dst);
}

/*
 * One strip (columns from n0) of one K block (rows from k0) over tiles [t0, t1); pf_a: prefetch
 * each next tile's A micro-panel (A not in cache yet, or too big to stay in L2: gemm_items).
 */
static void strip_block(const emc_gemm *g, size_t s, size_t k0, size_t t0, size_t t1, float *buf,
                        int pf_a, size_t s_next, size_t k_next) {
  const size_t nr = g->cfg->nr, ldd = emc_div_up(nr, EMC_NR_PANEL) * EMC_NR_PANEL;
  const em_minmax_params none = {-INFINITY, INFINITY, 0};
  const size_t kc = emc_min_sz(g->k - k0, g->kcb);
  const int last = k0 + kc == g->k;
  const size_t n0 = s * nr, nc = emc_min_sz(g->n - n0, nr);
  const float *b;
  size_t ldb, b_next;
  if (g->b_packed) {
    b = g->b + (n0 / EMC_NR_PANEL) * emc_gemm_b_panel(g) + n0 % EMC_NR_PANEL + k0 * EMC_NR_PANEL;
    ldb = EMC_NR_PANEL, b_next = emc_gemm_b_panel(g);
  } else if (buf) {
    if (g->pack_b)
      g->pack_b(g->pack_ctx, k0, kc, n0, nc, buf, ldd);
    else
      pack_strip(g, k0, kc, n0, nc, buf, ldd);
    b = buf, ldb = ldd, b_next = EMC_NR_PANEL;
  } else {
    b = g->b + k0 * g->ldb + n0, ldb = g->ldb, b_next = EMC_NR_PANEL;
  }
  /* A strip whose last 16-lane vector would hold one column (N = 49, 7x7 maps: 49 of 64 lanes
   * busy) with packed A and nothing after the tile: the tile takes the whole vectors and that
   * column runs on cfg->gemm_col, the tile's own arithmetic element by element (same bits),
   * four tiles' chains at once instead of a vector of FMAs a depth on each row for one column.
   * MobileNetV3-Small's 96 -> 576 (hardswish) and MobileNetV2's 160 -> 960 convs on 7x7 ran
   * 0.87-0.88x / 0.86x their CPU time (Zen 4, 1 thread). Not for a strip of that one column
   * alone (N = 1: the squeeze-and-excitation FCs, a few tiles, no faster). */
  const size_t ntail =
      nc % 16 == 1 && nc > 16 && g->a_packed && g->cfg->gemm_col && !g->res && !g->act && kc >= 16
          ? 1
          : 0;
  float xcol[EMC_KCB * 5 / 4 + 1];
  if (ntail) {
    const size_t j = nc - 1;
    const float *bj = b + (j / EMC_NR_PANEL) * b_next + j % EMC_NR_PANEL;
    for (size_t k = 0; k < kc; k++) xcol[k] = bj[k * ldb];
  }
  for (size_t t = t0; t < t1; t++) {
    const size_t m0 = t * EMC_MR, mr = emc_min_sz(g->m - m0, EMC_MR);
    const float *a = g->a_packed ? g->a + t * emc_gemm_a_panel(g) + k0 * EMC_MR
                                 : g->a + m0 * g->a_rs + k0 * g->a_ks;
    float *c = g->c + m0 * g->ldc + n0;
    /* The next tile's A micro-panel, prefetched by the kernel as it computes: tiles are K * 6
     * floats apart, too far for the hardware prefetcher to follow, and with A beyond L2 the
     * first strip of a K block reads them from memory (weights used by few columns, as in late
     * CNN layers, every time). */
    const float *a_pf = pf_a && g->a_packed && t + 1 < t1 ? a + emc_gemm_a_panel(g) : NULL;
    /* A strided A (activations) with a packed B (weights, often in memory): the first four
     * tiles each have the kernel pull one 16-column panel of the next B micro-panel toward L2,
     * a line per k, while the rest of this one's tiles run on the current micro-panel. */
    const size_t pf_panel = s_next * nr / EMC_NR_PANEL + (t - t0);
    if (!g->a_packed && g->b_packed && t - t0 < 4 && s_next < g->strips && k_next < g->k &&
        pf_panel < emc_div_up(g->n, EMC_NR_PANEL))
      a_pf = g->b + pf_panel * emc_gemm_b_panel(g) + k_next * EMC_NR_PANEL;
    /* The tile's residual rows (ldr floats apart, one strip's worth of 256 rows at a time: too
     * many streams for the hardware prefetcher), fetched while the kernel runs its k loop
     * instead of missing one by one in the add after it (ResNet-50's 56x56 and 28x28 1x1 convs
     * with a residual, in place: 8-14 % faster at 1 thread, 6-16 % at 2, interleaved). */
    if (last && g->res)
      for (size_t r = 0; r < mr; r++)
        for (size_t j = 0; j < nc; j += 16)
          __builtin_prefetch(g->res + (m0 + r) * g->ldr + n0 + j, 0, 3);
    if (nc > ntail)
      g->cfg->gemm(mr, nc - ntail, kc, a, g->a_packed ? 1 : g->a_rs, g->a_packed ? EMC_MR : g->a_ks,
                   b, ldb, b_next, c, g->ldc, g->bias_m ? g->bias_m + m0 : NULL,
                   g->bias_n ? g->bias_n + n0 : NULL, k0 > 0, last && !g->res ? &g->mm : &none,
                   a_pf);
    if (last && g->res) /* the residual, then the clamp, while the tile is in L1 */
      for (size_t r = 0; r < mr; r++)
        g->cfg->vbin[EMC_BIN_ADD](nc, c + r * g->ldc, g->res + (m0 + r) * g->ldr + n0,
                                  c + r * g->ldc, &g->mm);
    if (last && g->act)
      for (size_t r = 0; r < mr; r++)
        g->cfg->vact(nc, c + r * g->ldc, c + r * g->ldc, g->act, g->fp);
  }
  if (ntail && t1 > t0) /* the column of tiles [t0, t1) */
    g->cfg->gemm_col(t1 - t0, emc_min_sz(g->m - (t1 - 1) * EMC_MR, EMC_MR), kc,
                     g->a + t0 * emc_gemm_a_panel(g) + k0 * EMC_MR, emc_gemm_a_panel(g), xcol,
                     g->bias_m ? g->bias_m + t0 * EMC_MR : NULL,
                     g->bias_n ? g->bias_n[n0 + nc - 1] : 0.0f, k0 > 0, last ? &g->mm : &none,
                     g->c + t0 * EMC_MR * g->ldc + n0 + nc - 1, g->ldc);
}

/*
 * Runs work items [begin, end): see the banner for the loop order. When the M block's whole A
 * (all of K) fits the A-block budget, strips go outside K blocks instead: A stays in L2 either
 * way, a strip's C tiles stay in L1 / L2 across its K blocks, and a packed B is read panel by
 * panel from start to end (long streams the hardware prefetcher follows).
 */
static void gemm_items(void *ctx, int64_t begin, int64_t end) {
  emc_gemm *g = ctx;
  const size_t ldd = emc_div_up(g->cfg->nr, EMC_NR_PANEL) * EMC_NR_PANEL;
  /* The thread's own slot: the first free one let the threads trade slots, and each trade moved
   * the strip buffer between the cores' caches (a 16 -> 72 1x1 conv on 56x56, 2 threads: one
   * call in six took the other thread's slot). */
  const int slot = g->pack ? emc_claim_flag_from(g->slot_busy, g->n_slots,
                                                 em_threadpool_thread_index() % g->n_slots)
                           : -1;
  /* Slots start 64-byte aligned (scratch offsets are only promised 16): B rows are then whole
   * cache lines, never a load split across two. */
  float *const pack = g->pack ? (float *)(((uintptr_t)g->pack + 63) & ~(uintptr_t)63) : NULL;
  float *buf = slot >= 0 ? pack + (size_t)slot * g->kcb * ldd : NULL;
  const int strips_outer = g->mb * EMC_MR * g->k <= EMC_A_BLOCK_FLOATS;
  for (int64_t it = begin; it < end;) {
    const size_t mbi = (size_t)it / g->strips;
    const int64_t grp_end = (int64_t)emc_min_sz((size_t)end, (mbi + 1) * g->strips);
    const size_t s0 = (size_t)it % g->strips, s1 = s0 + (size_t)(grp_end - it);
    const size_t t0 = mbi * g->mb, t1 = emc_min_sz(g->mtiles, t0 + g->mb);
    if (strips_outer) {
      for (size_t s = s0; s < s1; s++)
        for (size_t k0 = 0; k0 < g->k; k0 += g->kcb) {
          const int more = k0 + g->kcb < g->k;
          strip_block(g, s, k0, t0, t1, buf, s == s0, more ? s : s + 1, more ? k0 + g->kcb : 0);
        }
    } else {
      for (size_t k0 = 0; k0 < g->k; k0 += g->kcb)
        for (size_t s = s0; s < s1; s++)
          strip_block(g, s, k0, t0, t1, buf, 1, s + 1 < s1 ? s + 1 : s0,
                      s + 1 < s1 ? k0 : k0 + g->kcb);
    }
    it = grp_end;
  }
  if (slot >= 0) atomic_flag_clear(&g->slot_busy[slot]);
}

size_t emc_gemm_pack_floats(const em_cpu_config *cfg, size_t k, int n_threads) {
  const size_t ldd = emc_div_up(cfg->nr, EMC_NR_PANEL) * EMC_NR_PANEL;
  return (size_t)(n_threads < 1 ? 1 : n_threads) * k_block(k) * ldd + 16; /* + align */
}

int emc_gemm_runs_pairs(const emc_gemm *g, em_threadpool *pool) {
#if defined(__x86_64__)
  /* each thread takes a workspace slot */
  return em_threadpool_size(pool) <= g->amx_slots && emc_gemm_amx_pairs_fits(g);
#else
  (void)g, (void)pool;
  return 0;
#endif
}

void emc_gemm_run(emc_gemm *g, em_threadpool *pool) {
  const int n_threads = em_threadpool_size(pool);
#if defined(__x86_64__)
  if (emc_gemm_runs_pairs(g, pool)) {
    emc_gemm_run_amx_pairs(g, pool);
    return;
  }
  if (n_threads <= g->amx_slots) {
    if (emc_gemm_amx_fits(g)) {
      emc_gemm_run_amx(g, pool);
      return;
    }
  }
#endif
  /* A hardswish after the GEMM in the micro-kernel's stores (no residual between them), not a
   * pass of vact over each tile after it. */
  if (g->act == EMC_ACT_HARDSWISH && !g->res && g->cfg->hswish) g->mm.hswish = 1, g->act = 0;
  g->kcb = k_block(g->k);
  g->mtiles = emc_div_up(g->m, EMC_MR);
  g->strips = emc_div_up(g->n, g->cfg->nr);
  /* The largest M block whose A block fits; then smaller ones until every thread has work. */
  size_t mb = emc_min_sz(g->mtiles, EMC_A_BLOCK_FLOATS / (g->kcb * EMC_MR));
  if (mb < 1) mb = 1;
  mb = emc_div_up(g->mtiles,
                  emc_div_up(g->mtiles, mb)); /* equal blocks, not a full one and a sliver */
  /* Every M block packs its own copy of each B strip (an im2col), so when B is packed per strip
   * few-strip GEMMs (N = 49: one strip) split M into fewer, larger blocks: the copy costs about
   * what 8 tiles of FMAs do. But a few strips with a ragged last one (N = 196: 64, 64, 64, 4)
   * split two per thread leave one thread 128 columns and the other 68: M splits further so
   * each thread gets whole M blocks of every strip (MobileNetV2's 14x14 1x1 convs, 2 threads:
   * -3 %); gathered strips too where there are two or more (each thread then gathers every
   * strip, its own copy: ResNet-18's strided 3x3 and 1x1 convs to 14x14, 2 threads, 896 -> 756
   * and 102 -> 90 us; one strip, N = 49, splits by M anyway). */
  const int packs = g->pack != NULL;
  const int even_out = packs && (!g->pack_b || g->strips >= 2) && g->n % g->cfg->nr != 0 &&
                       g->strips < 8 * (size_t)n_threads;
  const int big_blocks = packs && !even_out;
  const size_t want = n_threads > 1 ? (big_blocks ? 2 : 4) * (size_t)n_threads : 1;
  const size_t mb_min = big_blocks ? 16 : 4;
  while (mb > mb_min && emc_div_up(g->mtiles, mb) * g->strips < want) mb = emc_div_up(mb, 2);
  /* A row-major A (activations) is written by the operator before, split over the threads by
   * rows or columns; under a split by strips every thread reads all of it, half from the other
   * core's cache, a line at a time as the kernel needs it (ViT-B/16's MLP down-projection,
   * K = 3072, N = 768, 2 threads: 4.1 ms, against 3.6 ms when each thread takes whole rows).
   * When A is the bigger side of the product (K >= 2N: the extra reads of B a split by rows
   * costs are then the smaller loss), each thread takes one M block of whole rows. Not for
   * few rows, though: then every thread streams all of B (weights, from memory) for too few
   * FLOPs per byte (M / 2 per thread): ResNet's transposed 7x7-map convs (M = 49 pixels, 512 x
   * 4608 weights) ran 10 % faster split by strips at 2 threads, ResNet-18 / 50 3 % (paired). */
  if (n_threads > 1 && !g->a_packed && g->k >= 2 * g->n && g->mtiles >= 2 * (size_t)n_threads &&
      g->m >= 64 * (size_t)n_threads)
    mb = emc_div_up(g->mtiles, (size_t)n_threads);
  g->mb = mb;
  g->n_slots = n_threads < EMC_GEMM_MAX_SLOTS ? n_threads : EMC_GEMM_MAX_SLOTS;
  /* Only the slots in use, and relaxed: a sequentially consistent clear is a locked exchange
   * (~20 cycles), and a Winograd conv runs this driver (36 GEMMs) for every block of tiles
   * (ResNet-18: 1.4 % of its time went to clearing all 64). Publishing the job to the pool
   * orders these stores before any worker's claim. */
  for (int s = 0; s < g->n_slots; s++)
    atomic_flag_clear_explicit(&g->slot_busy[s], memory_order_relaxed);
  const size_t items = emc_div_up(g->mtiles, mb) * g->strips;
  em_parallel_for_static(g->m * g->n * g->k < EMC_MIN_PARALLEL_WORK ? NULL : pool, (int64_t)items,
                         gemm_items, g);
}
