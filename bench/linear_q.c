/*
 * linear_q.c — micro-benchmark of the weight-quantized linear kernels (ember::linear_q4.out,
 * ember::linear_q8.out) next to the f32 baseline (aten::linear.out), on SmolLM2-135M's shapes.
 *
 * Each case cycles over enough copies of its weights (>= 256 MiB in all) that every call streams
 * them from DRAM, as a decode step does (one pass over the whole model). Reported: time per
 * call (best of 5 batches), weight GB/s (weight + scale bytes per call / time), GFLOP/s
 * (2 M N K / time), and the machine's read bandwidth measured here (AVX2 sum over 512 MiB; it and
 * the weights in huge pages), the bound for decode. Kernels are called through the registry exactly
 * as the runtime calls them.
 *
 *   cc -O2 -Iinclude -Ikernels bench/linear_q.c build/libember.a -lpthread -lm -o linear_q_bench
 *   ./linear_q_bench [threads...]            (default: 1 2; EMBER_CPU_ISA caps the ISA)
 *   LQ_1B=1 ./linear_q_bench 1               (Llama-3.2-1B's shapes; LQ_PAIRS=0/1 forces the
 *                                             decode tile's row order for an A/B)
 *   LQ_F16=1 (f16 scales and offsets, as the LLM exports store them: the folded decode),
 *   LQ_HOT=1 (one copy of the weights: cache-resident where they fit, the kernel's compute rate;
 *   with LQ_N=512 on the 1B shapes, resident in a 1 MiB L2)
 */
#define _POSIX_C_SOURCE 199309L
#define _DEFAULT_SOURCE /* madvise, MADV_HUGEPAGE */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "ember/kernel.h"
#include "ember/platform.h"
#include "quantized/linear_q.h"

/* Wall time, or this thread's CPU time with LQ_CPUTIME=1 (1 thread on a shared machine). */
static double now(void) {
  struct timespec ts;
  clock_gettime(getenv("LQ_CPUTIME") ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- tensors and boxed calls ---- */

typedef struct btensor {
  em_tensor t;
  int64_t sizes[2], strides[2];
  uint8_t order[2];
} btensor;

static void bt_init(btensor *b, void *data, int dtype, int dim, int64_t s0, int64_t s1) {
  memset(b, 0, sizeof *b);
  b->sizes[0] = s0;
  b->sizes[1] = s1;
  b->strides[0] = dim == 2 ? s1 : 1;
  b->strides[1] = 1;
  b->order[0] = 0;
  b->order[1] = 1;
  b->t.data = data;
  b->t.sizes = b->sizes;
  b->t.strides = b->strides;
  b->t.dim_order = b->order;
  b->t.numel = dim == 2 ? s0 * s1 : s0;
  b->t.numel_bound = b->t.numel;
  b->t.dim = dim;
  b->t.dtype = (int8_t)dtype;
}

static em_evalue ev_tensor(btensor *b) {
  em_evalue v;
  memset(&v, 0, sizeof v);
  v.tag = EM_TAG_TENSOR;
  v.u.tensor = &b->t;
  return v;
}

static em_evalue ev_int(int64_t i) {
  em_evalue v;
  memset(&v, 0, sizeof v);
  v.tag = EM_TAG_INT;
  v.u.i = i;
  return v;
}

static em_evalue ev_none(void) {
  em_evalue v;
  memset(&v, 0, sizeof v);
  v.tag = EM_TAG_NONE;
  return v;
}

/* n bytes in huge pages where the kernel grants them, as Ember's runtime holds a model's weights
 * (its copy of the file, extension/data_loader.c): 4 KiB pages cost the stream its TLB misses. */
static void *huge_alloc(size_t n) {
  const size_t huge = (size_t)2 << 20;
  void *p = aligned_alloc(huge, (n + huge - 1) / huge * huge);
#ifdef MADV_HUGEPAGE
  if (p) (void)madvise(p, (n + huge - 1) / huge * huge, MADV_HUGEPAGE);
#endif
  return p;
}

/* ---- read bandwidth ---- */

typedef struct bw_job {
  const uint8_t *buf;
  size_t n;
  int64_t chunks;
  double sink[64];
} bw_job;

__attribute__((target("avx2"))) static void bw_task(void *ctx, int64_t c0, int64_t c1) {
  bw_job *j = ctx;
  size_t per = j->n / (size_t)j->chunks;
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t c = c0; c < c1; c++) {
    const __m256i *p = (const __m256i *)(j->buf + (size_t)c * per);
    for (size_t i = 0; i < per / 32; i += 4) {
      a0 = _mm256_add_epi64(a0, _mm256_load_si256(p + i));
      a1 = _mm256_add_epi64(a1, _mm256_load_si256(p + i + 1));
      a2 = _mm256_add_epi64(a2, _mm256_load_si256(p + i + 2));
      a3 = _mm256_add_epi64(a3, _mm256_load_si256(p + i + 3));
    }
  }
  a0 = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
  j->sink[c0 % 64] += (double)_mm256_extract_epi64(a0, 0);
}

static double read_bandwidth(em_threadpool *pool) {
  size_t n = (size_t)512 << 20;
  uint8_t *buf = huge_alloc(n);
  memset(buf, 1, n);
  bw_job j = {buf, n, 64, {0}};
  double best = 1e30;
  for (int r = 0; r < 5; r++) {
    double t0 = now();
    em_parallel_for(pool, j.chunks, bw_task, &j);
    double t = now() - t0;
    best = t < best ? t : best;
  }
  free(buf);
  return (double)n / best * 1e-9;
}

/* ---- cases ---- */

typedef enum { F32, Q4, Q4A, Q8 } kind; /* Q4A: affine 4-bit (per-group offsets, "4w32") */

static const char *kind_name(kind k, int64_t gs) {
  static char s[32];
  if (k == F32) return "f32";
  snprintf(s, sizeof s,
           k == Q4    ? "q4 g%lld"
           : k == Q4A ? "q4 g%lld+off"
                      : (gs ? "q8 g%lld" : "q8 chan"),
           (long long)gs);
  return s;
}

static double run_case(kind kd, int64_t gs, int64_t m, int64_t n, int64_t k, em_threadpool *pool,
                       double *gbs_out) {
  size_t wbytes = kd == F32               ? (size_t)(n * k * 4)
                  : kd == Q4 || kd == Q4A ? (size_t)(n * k / 2)
                                          : (size_t)(n * k);
  int64_t groups = gs ? k / gs : 1;
  const int f16 = getenv("LQ_F16") != NULL && kd != F32; /* LQ_F16=1: f16 scales (offsets) */
  size_t sbytes = kd == F32 ? 0 : (size_t)(n * groups * (f16 ? 2 : 4)) * (kd == Q4A ? 2 : 1);
  size_t per = (wbytes + sbytes + 63) / 64 * 64;
  size_t copies = getenv("LQ_HOT") ? 1 : ((size_t)256 << 20) / per + 1;
  uint8_t *wmem = huge_alloc(per * copies);
  for (size_t i = 0; i < per * copies; i++) wmem[i] = (uint8_t)(i * 2654435761u >> 13);
  for (size_t c = 0; c < copies; c++) /* sane scales / f32 weights */
    if (kd == F32)
      for (size_t i = 0; i < wbytes / 4; i++)
        ((float *)(wmem + c * per))[i] = 0.01f * (float)(i % 7);
    else if (f16)
      for (size_t i = 0; i < sbytes / 2; i++) ((uint16_t *)(wmem + c * per + wbytes))[i] = 0x211F;
    else
      for (size_t i = 0; i < sbytes / 4; i++) ((float *)(wmem + c * per + wbytes))[i] = 0.01f;
  float *x = aligned_alloc(64, (size_t)(m * k * 4)), *y = aligned_alloc(64, (size_t)(m * n * 4));
  for (int64_t i = 0; i < m * k; i++) x[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
  size_t temp_n = (size_t)64 << 20;
  void *temp_buf = aligned_alloc(64, temp_n);
  em_allocator temp;
  em_kernel_ctx ctx = {&temp, pool, ""};
  const char *op = kd == F32               ? "aten::linear.out"
                   : kd == Q4 || kd == Q4A ? "ember::linear_q4.out"
                                           : "ember::linear_q8.out";
  const em_kernel_entry *e = em_find_kernel(op);
  if (!e) {
    fprintf(stderr, "%s not registered\n", op);
    exit(1);
  }
  btensor bx, bw, bs, bo, by;
  bt_init(&bx, x, EM_DTYPE_F32, 2, m, k);
  bt_init(&by, y, EM_DTYPE_F32, 2, m, n);
  int reps = (int)(((size_t)128 << 20) / per) + 1;
  reps = reps < 4 ? 4 : reps > 400 ? 400 : reps;
  double best = 1e30;
  for (int batch = 0; batch < 6; batch++) {
    double t0 = now();
    for (int r = 0; r < reps; r++) {
      uint8_t *wc = wmem + ((size_t)(batch * reps + r) % copies) * per;
      em_evalue v[8];
      em_evalue *args[8];
      if (kd == F32) {
        bt_init(&bw, wc, EM_DTYPE_F32, 2, n, k);
        v[0] = ev_tensor(&bx), v[1] = ev_tensor(&bw), v[2] = ev_none(), v[3] = ev_tensor(&by);
        v[4] = v[3];
      } else {
        int q4 = kd == Q4 || kd == Q4A;
        bt_init(&bw, wc, q4 ? EM_DTYPE_U8 : EM_DTYPE_I8, 2, n, q4 ? k / 2 : k);
        const int sdt = f16 ? EM_DTYPE_F16 : EM_DTYPE_F32;
        bt_init(&bs, wc + wbytes, sdt, gs ? 2 : 1, n, groups);
        bt_init(&bo, wc + wbytes + sbytes / 2, sdt, gs ? 2 : 1, n, groups);
        v[0] = ev_tensor(&bx), v[1] = ev_tensor(&bw), v[2] = ev_tensor(&bs), v[3] = ev_int(gs);
        v[4] = ev_none(), v[5] = kd == Q4A ? ev_tensor(&bo) : ev_none(), v[6] = ev_tensor(&by);
        v[7] = v[6];
      }
      for (int i = 0; i < 8; i++) args[i] = &v[i];
      em_allocator_init(&temp, temp_buf, temp_n);
      if (e->fn(&ctx, args) != EM_OK) {
        fprintf(stderr, "%s failed\n", op);
        exit(1);
      }
    }
    double t = (now() - t0) / reps;
    if (batch > 0) best = t < best ? t : best; /* batch 0 warms up */
  }
  *gbs_out = (double)(wbytes + sbytes) / best * 1e-9;
  free(temp_buf), free(x), free(y), free(wmem);
  return best;
}

int main(int argc, char **argv) {
  em_register_prim_ops();
  em_register_portable_kernels();
  em_register_quantized_kernels();
  if (getenv("LQ_PAIRS")) /* LQ_PAIRS=0 / 1: force the decode tile's row order (A/B) */
    em_linear_q_force_pairs(atoi(getenv("LQ_PAIRS")));
  int threads[8] = {1, 2}, n_threads = 2;
  if (argc > 1) {
    n_threads = 0;
    for (int i = 1; i < argc && n_threads < 8; i++) threads[n_threads++] = atoi(argv[i]);
  }
  static const int64_t shapes_135m[][2] = {{576, 1536}, {1536, 576}, {576, 49152}}; /* K, N */
  /* LQ_1B=1: Llama-3.2-1B's (q/o, gate/up, down, a 32k slice of the 128k head) */
  static const int64_t shapes_1b[][2] = {{2048, 2048}, {2048, 8192}, {8192, 2048}, {2048, 32768}};
  const int64_t(*shapes)[2] = getenv("LQ_1B") ? shapes_1b : shapes_135m;
  size_t n_shapes = getenv("LQ_1B") ? 4 : 3;
  static const int64_t ms[] = {1, 128};
  struct {
    kind k;
    int64_t gs;
  } kinds[] = {{F32, 0}, {Q4, 32}, {Q4A, 32}, {Q4, 64}, {Q8, 0}, {Q8, 32}};
  printf("linear_q micro-kernels: %s\n", em_linear_q_isa());
  for (int ti = 0; ti < n_threads; ti++) {
    em_threadpool *pool = threads[ti] > 1 ? em_threadpool_create(threads[ti]) : NULL;
    double bw = read_bandwidth(pool);
    printf("\n### %d thread%s — read bandwidth %.1f GB/s\n\n", threads[ti],
           threads[ti] > 1 ? "s" : "", bw);
    printf(
        "| K -> N | M | weights | time/call | weight GB/s | %% of read BW | GFLOP/s | vs f32 |\n");
    printf("|---|---:|---|---:|---:|---:|---:|---:|\n");
    for (size_t si = 0; si < n_shapes; si++)
      for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++) {
        double f32_time = 0;
        for (size_t ki = 0; ki < sizeof kinds / sizeof kinds[0]; ki++) {
          int64_t k = shapes[si][0], n = shapes[si][1], m = ms[mi];
          if (getenv("LQ_N")) n = atoll(getenv("LQ_N")); /* LQ_N=512: fewer rows (in L2 hot) */
          const char *only_m = getenv("LQ_M");           /* LQ_M=128: only that M (profiling) */
          if (only_m && atoll(only_m) != m) continue;
          const char *only_k = getenv("LQ_KIND"); /* LQ_KIND=1: only kinds[1] (profiling) */
          if (only_k && (size_t)atoi(only_k) != ki && kinds[ki].k != F32) continue;
          const char *only_s = getenv("LQ_SHAPE"); /* LQ_SHAPE=0: only shapes[0] */
          if (only_s && (size_t)atoi(only_s) != si) continue;
          double gbs, t = run_case(kinds[ki].k, kinds[ki].gs, m, n, k, pool, &gbs);
          if (kinds[ki].k == F32) f32_time = t;
          printf("| %lld -> %lld | %lld | %s | %.1f us | %.1f | %.0f %% | %.1f | %.2fx |\n",
                 (long long)k, (long long)n, (long long)m, kind_name(kinds[ki].k, kinds[ki].gs),
                 t * 1e6, gbs, 100.0 * gbs / bw, 2.0 * (double)(m * n * k) / t * 1e-9,
                 f32_time / t);
          fflush(stdout);
        }
      }
    em_threadpool_destroy(pool);
  }
  return 0;
}
