/*
 * main.c — the `ember` command-line tool.
 *
 *   ember info model.pte [--ptd weights.ptd]
 *   ember run model.pte [--ptd F] [--method NAME] [--input a.npy ...] [--output-dir DIR]
 *                       [--iters N] [--threads N] [--profile] [--no-mmap] [--max-memory BYTES]
 *                       [--etdump OUT.etdp [--debug-buffer BYTES]]
 *   ember run --bundled X.bpte [--method NAME] [--rtol R] [--atol A] (bundled.c)
 *   --no-mmap reads the files into (huge-page) heap memory instead of mapping them
 *   ember ops [--all]
 * Every subcommand answers --help / -h; unknown options are refused by name (exit 2).
 *
 * A tool: it uses only include/ember and extension/ headers, stdio and the heap.
 */
#define _POSIX_C_SOURCE 200809L
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ember/backend_cpu.h"
#include "ember/backend_vulkan.h"
#include "ember/ember.h"
#include "ember_ext/cpu_env.h"
#include "ember_ext/module.h"
#include "npy.h"

int cmd_ops(int argc, char **argv);
int cmd_bundled(const char *path, const char *method, double rtol, double atol, int threads,
                int no_mmap);

static const char *const k_usage_info =
    "  ember info MODEL.pte [--ptd DATA.ptd]\n"
    "      methods, inputs/outputs, operators, delegates, arenas; exits 1 when a kernel or a\n"
    "      backend the file needs is missing from this build\n";
static const char *const k_usage_run =
    "  ember run MODEL.pte [--ptd DATA.ptd] [--method NAME] [--input X.npy ...]\n"
    "            [--output-dir DIR] [--iters N] [--threads N] [--profile] [--no-mmap]\n"
    "            [--max-memory BYTES] [--etdump OUT.etdp [--debug-buffer BYTES]]\n"
    "      --no-mmap: reads the files into memory (huge pages where the system grants them, as\n"
    "      the Python API and ember-llm hold them) instead of mapping them: a slower load, a\n"
    "      faster execute where the weights stream from memory (LLM decode, large models)\n"
    "      --max-memory: the most the method may take (planned arenas, scratch, method memory;\n"
    "      suffix K, M or G; default: the machine's memory), checked before allocating;\n"
    "      with it, scratch is at most a quarter\n"
    "      --etdump: writes an ExecuTorch ETDump (profile events of every instruction, one\n"
    "      RunData per iteration, Method::init / Method::execute) that ExecuTorch's Inspector\n"
    "      opens; --debug-buffer: also records every kernel's output tensor (suffix K, M or G),\n"
    "      saved as OUT.etdp.debug.bin (the Inspector's debug_buffer_path); docs/devtools.md\n"
    "  ember run --bundled X.bpte [--method NAME] [--rtol R] [--atol A] [--threads N]\n"
    "      runs every test case of an ExecuTorch BundledProgram and checks each output\n"
    "      within |got - expected| <= atol + rtol*|expected| (default rtol 1e-5, atol 1e-8);\n"
    "      exit 1 with the worst case's numbers when one fails\n";
static const char *const k_usage_ops = "  ember ops [--all]\n";

static void usage_to(FILE *f, const char *cmd) {
  fprintf(f, "usage:\n");
  if (!cmd || strcmp(cmd, "info") == 0) fputs(k_usage_info, f);
  if (!cmd || strcmp(cmd, "run") == 0) fputs(k_usage_run, f);
  if (!cmd || strcmp(cmd, "ops") == 0) fputs(k_usage_ops, f);
}

static void usage(void) { usage_to(stderr, NULL); }

static int is_help(const char *a) { return strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0; }

/* Parses a count or a byte size ("64", "10K", "3M", "2G"); -1 when it is not one. */
static long long parse_size(const char *s, int suffixes) {
  char *end = NULL;
  if (!s || !*s || *s == '-') return -1;
  unsigned long long v = strtoull(s, &end, 10);
  if (end == s) return -1;
  unsigned long long mul = 1;
  if (suffixes && *end) {
    switch (*end) {
    case 'k':
    case 'K': mul = 1ull << 10; break;
    case 'm':
    case 'M': mul = 1ull << 20; break;
    case 'g':
    case 'G': mul = 1ull << 30; break;
    default: return -1;
    }
    end++;
  }
  if (*end || v > (unsigned long long)(LLONG_MAX / (long long)mul)) return -1;
  return (long long)(v * mul);
}

static int fail(const char *what, em_status st) {
  const char *msg = em_last_error();
  fprintf(stderr, "ember: %s: %s%s%s\n", what, em_status_str(st), msg[0] ? ": " : "", msg);
  return 1;
}

static void print_value_info(const char *kind, size_t i, const em_value_info *v) {
  static const char *tags[] = {"None",    "Tensor",     "String",     "Double",
                               "Int",     "Bool",       "BoolList",   "DoubleList",
                               "IntList", "TensorList", "ScalarList", "OptionalTensorList"};
  printf("    %s %zu: %s", kind, i, v->tag < 12 ? tags[v->tag] : "?");
  if (v->tag == EM_TAG_TENSOR) {
    printf(" %s [", em_dtype_name(v->dtype));
    for (int32_t d = 0; d < v->dim; d++) printf("%s%lld", d ? ", " : "", (long long)v->sizes[d]);
    printf("]%s%s", v->dynamism ? " (dynamic, upper bound)" : "",
           v->planned ? " planned" : " unplanned");
    bool contiguous = true;
    for (int32_t d = 0; d < v->dim; d++) contiguous &= v->dim_order[d] == d;
    if (!contiguous) {
      printf(" dim_order (");
      for (int32_t d = 0; d < v->dim; d++) printf("%s%u", d ? "," : "", v->dim_order[d]);
      printf(")");
    }
  }
  printf("\n");
}

static int cmd_info(const char *path, const char *ptd) {
  em_module *mod;
  em_status st = em_module_open(path, ptd, &mod);
  if (st != EM_OK) return fail(path, st);
  const em_program *p = em_module_program(mod);
  em_program_stats s;
  em_program_get_stats(p, &s);
  printf("%s\n", path);
  printf("  file: %llu bytes; flatbuffer %llu bytes; extended header: %s\n",
         (unsigned long long)s.file_size, (unsigned long long)s.program_size,
         s.has_extended_header ? "eh00" : "none");
  printf("  segments: %zu (base %llu, %llu bytes)\n", s.n_segments,
         (unsigned long long)s.segment_base_offset, (unsigned long long)s.segment_data_size);
  printf("  constants: %zu tensors, %llu bytes%s\n", s.n_constants,
         (unsigned long long)s.constant_bytes,
         s.legacy_constant_buffer ? " (legacy constant_buffer)" : "");
  if (s.n_named_data) printf("  named data: %zu entries\n", s.n_named_data);
  size_t n = em_program_method_count(p);
  printf("  methods: %zu\n", n);
  int missing_total = 0, missing_backends = 0;
  for (size_t i = 0; i < n; i++) {
    const char *name = em_program_method_name(p, i);
    em_method_meta meta;
    if (em_program_method_meta(p, name, &meta) != EM_OK) continue;
    printf("  method '%s': %zu inputs, %zu outputs, %zu instructions\n", name, meta.n_inputs,
           meta.n_outputs, meta.n_instructions);
    for (size_t k = 0; k < meta.n_inputs; k++) {
      em_value_info v;
      if (em_method_meta_input(&meta, k, &v) == EM_OK) print_value_info("input", k, &v);
    }
    for (size_t k = 0; k < meta.n_outputs; k++) {
      em_value_info v;
      if (em_method_meta_output(&meta, k, &v) == EM_OK) print_value_info("output", k, &v);
    }
    uint64_t total = 0;
    for (size_t a = 0; a < meta.n_arenas; a++) total += em_method_meta_arena_size(&meta, a);
    if (meta.n_arenas == 0) {
      printf("    planned arenas: none\n");
    } else {
      printf("    planned arenas: %zu (", meta.n_arenas);
      for (size_t a = 0; a < meta.n_arenas; a++)
        printf("%s%llu", a ? ", " : "", (unsigned long long)em_method_meta_arena_size(&meta, a));
      printf(" bytes; total %llu)\n", (unsigned long long)total);
    }
    size_t n_ops = em_method_meta_operator_count(&meta);
    uint32_t *calls = calloc(n_ops ? n_ops : 1, sizeof *calls);
    em_method_meta_operator_calls(&meta, calls);
    printf("    operators: %zu\n", n_ops);
    for (size_t k = 0; k < n_ops; k++) {
      char buf[128];
      if (em_method_meta_operator(&meta, k, buf, sizeof buf) != EM_OK) continue;
      int have = em_find_kernel(buf) != NULL;
      missing_total += !have;
      printf("      %-48s calls %-4u%s\n", buf, calls[k], have ? "" : "  MISSING in this build");
    }
    free(calls);
    size_t nd = em_method_meta_delegate_count(&meta);
    for (size_t k = 0; k < nd; k++) {
      const char *id = em_method_meta_delegate_id(&meta, k);
      int have = id && em_find_backend(id);
      missing_backends += !have;
      printf("    delegate %zu: %s%s\n", k, id ? id : "?",
             have ? "" : "  MISSING backend in this build");
    }
  }
  printf("  missing kernels in this build: %d\n", missing_total);
  printf("  missing backends in this build: %d\n", missing_backends);
  em_module_destroy(mod);
  return missing_total || missing_backends ? 1 : 0;
}

/* ---- run ----------------------------------------------------------------------------------- */

typedef struct prof_row {
  const char *name;
  uint64_t calls;
  uint64_t ns;
} prof_row;

typedef struct prof_table {
  prof_row rows[512];
  size_t n;
  int enabled;
} prof_table;

static void prof_end(void *ctx, uint32_t idx, const char *name, uint64_t ns) {
  (void)idx;
  prof_table *t = ctx;
  if (!t->enabled) return;
  size_t i = 0;
  while (i < t->n && strcmp(t->rows[i].name, name) != 0) i++;
  if (i == t->n) {
    if (t->n == 512) return;
    t->rows[t->n++] = (prof_row){name, 0, 0};
  }
  t->rows[i].calls++;
  t->rows[i].ns += ns;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static int cmp_rows(const void *a, const void *b) {
  uint64_t x = ((const prof_row *)a)->ns, y = ((const prof_row *)b)->ns;
  return x < y ? 1 : x > y ? -1 : 0;
}

static void fill_generated(em_tensor *t, uint32_t seed) {
  uint32_t s = seed * 2654435761u + 12345u;
  for (int64_t i = 0; i < t->numel; i++) {
    s = s * 1664525u + 1013904223u;
    float f = (float)((s >> 8) & 0xffff) / 32768.0f - 1.0f;
    switch (t->dtype) {
    case EM_DTYPE_F32: ((float *)t->data)[i] = f; break;
    case EM_DTYPE_F64: ((double *)t->data)[i] = f; break;
    case EM_DTYPE_BOOL: ((uint8_t *)t->data)[i] = 1; break;
    default:
      memset((uint8_t *)t->data + (size_t)i * em_dtype_size(t->dtype), 0, em_dtype_size(t->dtype));
    }
  }
}

static void summarize(size_t i, const em_evalue *v) {
  if (v->tag == EM_TAG_INT) {
    printf("output %zu: int %lld\n", i, (long long)v->u.i);
    return;
  }
  if (v->tag == EM_TAG_DOUBLE) {
    printf("output %zu: double %g\n", i, v->u.d);
    return;
  }
  if (v->tag == EM_TAG_BOOL) {
    printf("output %zu: bool %s\n", i, v->u.b ? "true" : "false");
    return;
  }
  const em_tensor *t = em_evalue_tensor(v);
  if (!t) {
    printf("output %zu: (tag %u)\n", i, v->tag);
    return;
  }
  printf("output %zu: %s [", i, em_dtype_name(t->dtype));
  for (int32_t d = 0; d < t->dim; d++) printf("%s%lld", d ? ", " : "", (long long)t->sizes[d]);
  printf("]");
  if (t->dtype == EM_DTYPE_F32 && t->numel > 0) {
    const float *p = t->data;
    double mn = p[0], mx = p[0], sum = 0;
    for (int64_t k = 0; k < t->numel; k++) {
      mn = p[k] < mn ? p[k] : mn;
      mx = p[k] > mx ? p[k] : mx;
      sum += p[k];
    }
    printf(" min %.6g max %.6g mean %.6g  first:", mn, mx, sum / (double)t->numel);
    for (int64_t k = 0; k < t->numel && k < 6; k++) printf(" %.6g", p[k]);
  } else if (t->dtype == EM_DTYPE_I64 && t->numel > 0) {
    printf("  first:");
    for (int64_t k = 0; k < t->numel && k < 8; k++)
      printf(" %lld", (long long)((const int64_t *)t->data)[k]);
  }
  printf("\n");
}

typedef struct run_opts {
  const char *path, *ptd, *method, *out_dir, *etdump;
  const char *inputs[64];
  int n_inputs, iters, threads, profile, no_mmap;
  long long max_memory, debug_buffer;
  int bundled;
  double rtol, atol;
} run_opts;

static int set_inputs(em_method *m, const run_opts *o, npy_array *arrays, void **gen) {
  size_t n = em_method_input_count(m);
  for (size_t i = 0; i < n; i++) {
    const em_evalue *in = em_method_input(m, i);
    if (in->tag != EM_TAG_TENSOR) {
      em_status st = em_method_set_input(m, i, in);
      if (st != EM_OK) return fail("set_input", st);
      continue;
    }
    const em_tensor *want = in->u.tensor;
    em_tensor t = *want;
    int64_t sizes[EM_MAX_DIM];
    uint8_t order[EM_MAX_DIM];
    int64_t strides[EM_MAX_DIM];
    if ((int)i < o->n_inputs) {
      char err[256] = "";
      if (!arrays[i].data && npy_read(o->inputs[i], &arrays[i], err, sizeof err) != 0) {
        fprintf(stderr, "ember: %s\n", err);
        return 1;
      }
      t.dtype = (int8_t)arrays[i].dtype;
      t.dim = arrays[i].dim;
      t.numel = 1;
      for (int32_t d = 0; d < t.dim; d++) {
        sizes[d] = arrays[i].sizes[d];
        order[d] = (uint8_t)d;
        t.numel *= sizes[d];
      }
      t.sizes = sizes;
      t.dim_order = order;
      t.strides = strides;
      em_strides_from_dim_order(sizes, order, t.dim, strides);
      t.data = arrays[i].data;
    } else {
      if (!gen[i]) {
        gen[i] = calloc(1, em_tensor_nbytes(want) + 64);
        t.data = gen[i];
        fill_generated(&t, (uint32_t)i + 1);
      }
      t.data = gen[i];
    }
    /* read in place where the method lets it (the arrays outlive every execute) */
    em_status st = em_method_bind_input_tensor(m, i, &t);
    if (st != EM_OK) return fail("set_input", st);
  }
  return 0;
}

static int write_outputs(em_method *m, const char *dir) {
  for (size_t i = 0; i < em_method_output_count(m); i++) {
    const em_tensor *t = em_evalue_tensor(em_method_output(m, i));
    if (!t) continue;
    char path[1024];
    snprintf(path, sizeof path, "%s/output_%zu.npy", dir, i);
    if (npy_write(path, t) != 0) {
      fprintf(stderr, "ember: cannot write %s\n", path);
      return 1;
    }
  }
  return 0;
}

/* Sizes the ETDump writer's buffer for every iteration of the method and attaches it. */
static int start_etdump(em_module *mod, const run_opts *o, em_profiler *p, void **mem,
                        uint8_t **debug) {
  em_method_meta meta;
  size_t n_instr = 0;
  if (em_program_method_meta(em_module_program(mod), o->method, &meta) == EM_OK)
    n_instr = meta.n_instructions;
  size_t iters = o->iters > 0 ? (size_t)o->iters : 1;
  /* room for every instruction and, inside delegate calls, a few hundred operators per run */
  size_t bytes = ((size_t)1 << 20) + (n_instr + 512) * iters * EM_ETDUMP_EVENT_BYTES;
  em_etdump *d = NULL;
  size_t dbg = (size_t)o->debug_buffer;
  *mem = bytes + dbg >= bytes ? malloc(bytes + dbg) : NULL;
  if (!*mem) {
    fprintf(stderr, "ember: no memory for the ETDump buffer (%zu bytes)\n", bytes);
    return 1;
  }
  em_status st = em_etdump_init(*mem, bytes, &d);
  if (st != EM_OK) return fail("etdump", st);
  em_etdump_attach(d, p);
  *debug = dbg ? (uint8_t *)*mem + bytes : NULL;
  em_etdump_set_debug_buffer(d, *debug, dbg);
  return 0;
}

static int write_file(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  int ok = f && fwrite(data, 1, n, f) == n;
  if (f && fclose(f) != 0) ok = 0;
  if (!ok) fprintf(stderr, "ember: cannot write %s\n", path);
  return ok ? 0 : 1;
}

static int write_etdump(em_etdump *d, const char *path, const void *debug) {
  size_t need = 0;
  em_etdump_finish(d, NULL, 0, &need);
  uint8_t *buf = malloc(need ? need : 1);
  em_status st = buf ? em_etdump_finish(d, buf, need, &need) : EM_ERR_MEMORY_ALLOCATION_FAILED;
  if (st != EM_OK) {
    free(buf);
    return fail("etdump", st);
  }
  int bad = write_file(path, buf, need);
  free(buf);
  if (bad) return 1;
  char dpath[1024];
  size_t dn = em_etdump_debug_size(d);
  if (debug && (size_t)snprintf(dpath, sizeof dpath, "%s.debug.bin", path) >= sizeof dpath) {
    fprintf(stderr, "ember: path too long: %s\n", path);
    return 1;
  }
  if (debug) {
    if (write_file(dpath, debug, dn) != 0) return 1;
    printf("etdump: intermediate outputs -> %s (%zu bytes)\n", dpath, dn);
  }
  printf("etdump: %zu events in %zu runs%s -> %s (%zu bytes)\n", em_etdump_event_count(d),
         em_etdump_run_count(d), em_etdump_dropped(d) ? " (some DROPPED: buffer full)" : "", path,
         need);
  if (em_etdump_dropped(d))
    fprintf(stderr, "warning: the ETDump%s buffer was full; %llu events were dropped\n",
            debug ? " or the debug" : "", (unsigned long long)em_etdump_dropped(d));
  return 0;
}

static int cmd_run(const run_opts *o) {
  em_threadpool *pool = o->threads > 1 ? em_threadpool_create(o->threads) : NULL;
  prof_table *prof = calloc(1, sizeof *prof);
  em_profiler profiler = {NULL, o->profile ? prof_end : NULL, prof, NULL, NULL};
  int traced = o->profile || o->etdump;
  em_module_options mo = {EM_VERIFY_FULL, !o->no_mmap, pool, traced ? &profiler : NULL, 0, 0};
  void *etdump_mem = NULL;
  uint8_t *debug_mem = NULL; /* the debug buffer, inside etdump_mem */
  if (o->max_memory > 0) {
    mo.max_memory_bytes = (uint64_t)o->max_memory;
    size_t quarter = (size_t)(o->max_memory / 4);
    mo.temp_bytes = quarter < ((size_t)64 << 20) ? quarter : (size_t)64 << 20;
    if (mo.temp_bytes < 4096) mo.temp_bytes = 4096;
  } else {
    /* Default budget: the machine's memory. A file asking for more is refused by name. */
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0) mo.max_memory_bytes = (uint64_t)pages * (uint64_t)page;
  }
  em_module *mod = NULL;
  em_method *m = NULL;
  npy_array arrays[64];
  void *gen[256] = {0};
  memset(arrays, 0, sizeof arrays);
  int rc = 1;
  uint64_t t0 = em_now_ns();
  em_status st = em_module_open_ex(o->path, o->ptd, &mo, &mod);
  if (st != EM_OK) {
    rc = fail(o->path, st);
    goto done;
  }
  if (o->etdump && start_etdump(mod, o, &profiler, &etdump_mem, &debug_mem) != 0) goto done;
  st = em_module_method(mod, o->method, &m);
  uint64_t load_ns = em_now_ns() - t0;
  if (st != EM_OK) {
    rc = fail(o->method, st);
    goto done;
  }
  if (em_method_input_count(m) > 256) goto done;
  if (set_inputs(m, o, arrays, gen) != 0) goto done;
  int iters = o->iters > 0 ? o->iters : 1;
  uint64_t *times = calloc((size_t)iters, sizeof *times);
  for (int it = 0; it < iters; it++) {
    prof->enabled = o->profile && it == iters - 1;
    /* Planned input memory may be reused by activations after its last use: set inputs again. */
    if (it > 0 && set_inputs(m, o, arrays, gen) != 0) {
      free(times);
      goto done;
    }
    uint64_t s = em_now_ns();
    st = em_method_execute(m);
    times[it] = em_now_ns() - s;
    if (st != EM_OK) {
      free(times);
      rc = fail("execute", st);
      goto done;
    }
  }
  for (size_t i = 0; i < em_method_output_count(m); i++) summarize(i, em_method_output(m, i));
  qsort(times, (size_t)iters, sizeof *times, cmp_u64);
  printf("load+prepare: %.3f ms; execute: median %.4f ms over %d iteration%s (min %.4f ms)\n",
         (double)load_ns / 1e6, (double)times[iters / 2] / 1e6, iters, iters == 1 ? "" : "s",
         (double)times[0] / 1e6);
  if (o->profile) {
    qsort(prof->rows, prof->n, sizeof prof->rows[0], cmp_rows);
    uint64_t total = 0;
    for (size_t i = 0; i < prof->n; i++) total += prof->rows[i].ns;
    printf("%-48s %8s %12s %12s %7s\n", "operator", "calls", "total ms", "mean us", "%");
    for (size_t i = 0; i < prof->n; i++)
      printf("%-48s %8llu %12.3f %12.2f %6.1f%%\n", prof->rows[i].name,
             (unsigned long long)prof->rows[i].calls, (double)prof->rows[i].ns / 1e6,
             (double)prof->rows[i].ns / 1e3 / (double)prof->rows[i].calls,
             total ? 100.0 * (double)prof->rows[i].ns / (double)total : 0.0);
  }
  free(times);
  rc = o->out_dir ? write_outputs(m, o->out_dir) : 0;
  if (rc == 0 && o->etdump) rc = write_etdump(profiler.record_ctx, o->etdump, debug_mem);
done:
  em_module_destroy(mod);
  for (int i = 0; i < 64; i++) npy_free(&arrays[i]);
  for (int i = 0; i < 256; i++) free(gen[i]);
  free(prof);
  free(etdump_mem);
  em_threadpool_destroy(pool);
  return rc;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage();
    return 2;
  }
  const char *cmd = argv[1];
  if (is_help(cmd)) {
    usage_to(stdout, NULL);
    return 0;
  }
  int known = strcmp(cmd, "info") == 0 || strcmp(cmd, "run") == 0 || strcmp(cmd, "ops") == 0;
  if (!known) {
    fprintf(stderr, "ember: unknown command '%s'\n", cmd);
    usage();
    return 2;
  }
  for (int i = 2; i < argc; i++)
    if (is_help(argv[i])) {
      usage_to(stdout, cmd);
      return 0;
    }
  em_register_prim_ops();
  em_register_portable_kernels();
  em_register_quantized_kernels();
  em_register_cpu_backend();
  em_register_vulkan_backend(); /* EM_ERR_NOT_SUPPORTED in a build without Vulkan */
  if (em_cpu_backend_configure_from_env() != EM_OK)
    fprintf(stderr, "warning: EMBER_CPU_ISA=%s is unknown or not on this CPU: ignored\n",
            getenv("EMBER_CPU_ISA"));
  if (strcmp(cmd, "ops") == 0) {
    for (int i = 2; i < argc; i++)
      if (strcmp(argv[i], "--all") != 0) {
        fprintf(stderr, "ember ops: unknown option '%s'\n", argv[i]);
        usage_to(stderr, cmd);
        return 2;
      }
    return cmd_ops(argc - 1, argv + 1);
  }
  int is_run = strcmp(cmd, "run") == 0;
  run_opts o = {NULL, NULL, "forward", NULL, NULL, {0}, 0, 1, 1, 0, 0, 0, 0, 0, 1e-5, 1e-8};
  int method_given = 0;
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i];
    const char *val = i + 1 < argc ? argv[i + 1] : NULL;
    int takes = strcmp(a, "--ptd") == 0 ||
                (is_run && (strcmp(a, "--method") == 0 || strcmp(a, "--input") == 0 ||
                            strcmp(a, "--output-dir") == 0 || strcmp(a, "--iters") == 0 ||
                            strcmp(a, "--threads") == 0 || strcmp(a, "--max-memory") == 0 ||
                            strcmp(a, "--etdump") == 0 || strcmp(a, "--debug-buffer") == 0 ||
                            strcmp(a, "--rtol") == 0 || strcmp(a, "--atol") == 0));
    int flag = is_run && (strcmp(a, "--profile") == 0 || strcmp(a, "--no-mmap") == 0 ||
                          strcmp(a, "--bundled") == 0);
    if (a[0] == '-' && a[1] != '\0' && !takes && !flag) {
      fprintf(stderr, "ember %s: unknown option '%s'\n", cmd, a);
      usage_to(stderr, cmd);
      return 2;
    }
    if (takes && !val) {
      fprintf(stderr, "ember %s: option '%s' needs a value\n", cmd, a);
      return 2;
    }
    if (!takes && !flag) {
      if (o.path) {
        fprintf(stderr, "ember %s: unexpected argument '%s' (the model is '%s')\n", cmd, a, o.path);
        return 2;
      }
      o.path = a;
      continue;
    }
    if (flag) {
      if (strcmp(a, "--profile") == 0)
        o.profile = 1;
      else if (strcmp(a, "--bundled") == 0)
        o.bundled = 1;
      else
        o.no_mmap = 1;
      continue;
    }
    i++;
    if (strcmp(a, "--ptd") == 0) {
      o.ptd = val;
    } else if (strcmp(a, "--method") == 0) {
      o.method = val;
      method_given = 1;
    } else if (strcmp(a, "--rtol") == 0 || strcmp(a, "--atol") == 0) {
      char *end = NULL;
      double v = strtod(val, &end);
      if (end == val || *end || !(v >= 0) || v > 1e300) {
        fprintf(stderr, "ember run: %s wants a non-negative number, not '%s'\n", a, val);
        return 2;
      }
      *(strcmp(a, "--rtol") == 0 ? &o.rtol : &o.atol) = v;
    } else if (strcmp(a, "--input") == 0) {
      if (o.n_inputs == 64) {
        fprintf(stderr, "ember run: more than 64 --input files\n");
        return 2;
      }
      o.inputs[o.n_inputs++] = val;
    } else if (strcmp(a, "--output-dir") == 0) {
      o.out_dir = val;
    } else if (strcmp(a, "--etdump") == 0) {
      o.etdump = val;
    } else {
      int is_dbg = strcmp(a, "--debug-buffer") == 0;
      int is_mem = strcmp(a, "--max-memory") == 0 || is_dbg;
      long long v = parse_size(val, is_mem);
      long long cap = strcmp(a, "--threads") == 0 ? 1024 : is_mem ? LLONG_MAX : INT_MAX;
      if (v < 1 || v > cap) {
        fprintf(stderr, "ember run: %s wants a positive %s, not '%s'\n", a,
                is_mem ? "byte count (suffix K, M or G)" : "integer", val);
        return 2;
      }
      if (is_dbg)
        o.debug_buffer = v;
      else if (is_mem)
        o.max_memory = v;
      else if (strcmp(a, "--iters") == 0)
        o.iters = (int)v;
      else
        o.threads = (int)v;
    }
  }
  if (o.bundled &&
      (o.n_inputs || o.etdump || o.profile || o.out_dir || o.ptd || o.iters > 1 || o.max_memory)) {
    fprintf(stderr, "ember run: --bundled takes only --method, --rtol, --atol, --threads and "
                    "--no-mmap (the inputs are the file's)\n");
    return 2;
  }
  if (o.debug_buffer && !o.etdump) {
    fprintf(stderr, "ember run: --debug-buffer needs --etdump\n");
    return 2;
  }
  if (!o.path) {
    fprintf(stderr, "ember %s: no model file given\n", cmd);
    usage_to(stderr, cmd);
    return 2;
  }
  /* Errors are printed once, by fail(); EMBER_CPU_PROFILE's per-operator lines are INFO. */
  em_log_set_level(getenv("EMBER_CPU_PROFILE") ? EM_LOG_INFO : EM_LOG_FATAL);
  if (strcmp(cmd, "info") == 0) return cmd_info(o.path, o.ptd);
  if (o.bundled)
    return cmd_bundled(o.path, method_given ? o.method : NULL, o.rtol, o.atol, o.threads,
                       o.no_mmap);
  return cmd_run(&o);
}
