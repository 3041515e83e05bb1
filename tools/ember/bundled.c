/*
 * bundled.c — `ember run --bundled FILE.bpte`: runs every test case of every method test
 * suite of an ExecuTorch BundledProgram (Ember's or stock ExecuTorch's), sets the stored
 * inputs, executes and compares every output with the stored expected output within
 * rtol / atol (ExecuTorch's defaults 1e-5 / 1e-8; em_bundled_compare). One line per case,
 * then a summary; exit 1 with the worst case's numbers when a case fails, and a message
 * naming the field when the file is malformed (the parsing is em_bundled_open's).
 *
 * A tool: it uses only include/ember and extension/ headers, stdio and the heap.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ember/ember.h"
#include "ember_ext/module.h"

/* Options of `ember run --bundled` (rtol / atol default to ExecuTorch's 1e-5 / 1e-8). */
typedef struct bundled_opts {
  const char *path, *method;
  double rtol, atol;
  int threads, no_mmap;
} bundled_opts;

int cmd_bundled(const char *path, const char *method, double rtol, double atol, int threads,
                int no_mmap);

/* Reads a whole file into malloc'd memory (16-byte aligned by malloc). */
static void *read_all(const char *path, size_t *size_out) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  void *buf = NULL;
  long n = -1;
  if (fseek(f, 0, SEEK_END) == 0) n = ftell(f);
  if (n >= 0 && fseek(f, 0, SEEK_SET) == 0) {
    buf = malloc((size_t)n ? (size_t)n : 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
      free(buf);
      buf = NULL;
    }
  }
  fclose(f);
  *size_out = n > 0 ? (size_t)n : 0;
  return buf;
}

/* Sets input i of `m` from a bundled value. */
static em_status set_bundled_input(em_method *m, size_t i, const em_bundled_value *v) {
  if (v->tag == EM_TAG_TENSOR) {
    int64_t sizes[EM_MAX_DIM], strides[EM_MAX_DIM];
    uint8_t order[EM_MAX_DIM];
    memcpy(sizes, v->sizes, sizeof sizes);
    memcpy(order, v->dim_order, sizeof order);
    em_strides_from_dim_order(sizes, order, v->dim, strides);
    em_tensor t = {(void *)(uintptr_t)v->data,
                   sizes,
                   strides,
                   order,
                   v->numel,
                   v->numel,
                   v->dim,
                   v->dtype,
                   EM_SHAPE_STATIC};
    return em_method_set_input_tensor(m, i, &t);
  }
  em_evalue e = {.tag = v->tag};
  if (v->tag == EM_TAG_INT) e.u.i = v->i;
  if (v->tag == EM_TAG_BOOL) e.u.b = v->b;
  if (v->tag == EM_TAG_DOUBLE) e.u.d = v->d;
  return em_method_set_input(m, i, &e);
}

/* How far a failed comparison is off: infinite when the value cannot match at all. */
static double badness(const em_bundled_diff *d) {
  return d->why ? INFINITY : fabs(d->worst_actual - d->worst_expected);
}

typedef struct worst_case {
  const char *method;
  size_t index, output;
  em_bundled_diff diff;
  int have;
} worst_case;

static int error(const char *path, const char *what, em_status st) {
  const char *msg = em_last_error();
  fprintf(stderr, "ember: %s: %s: %s%s%s\n", path, what, em_status_str(st), msg[0] ? ": " : "",
          msg);
  return 1;
}

/* Runs test case c of suite s on `m`; prints its line; returns 1 on mismatch, -1 on error. */
static int run_case(const bundled_opts *o, const em_bundled *b, em_method *m, size_t s, size_t c,
                    const char *name, worst_case *worst) {
  size_t n_in = 0, n_exp = 0;
  em_status st = em_bundled_case(b, s, c, &n_in, &n_exp);
  if (st != EM_OK) return error(o->path, "test case", st), -1;
  if (n_in != em_method_input_count(m) || n_exp != em_method_output_count(m)) {
    fprintf(stderr,
            "ember: %s: method '%s' test case %zu has %zu inputs and %zu expected outputs; the "
            "method takes %zu inputs and returns %zu outputs\n",
            o->path, name, c, n_in, n_exp, em_method_input_count(m), em_method_output_count(m));
    return -1;
  }
  for (size_t i = 0; i < n_in; i++) {
    em_bundled_value v;
    st = em_bundled_value_get(b, s, c, false, i, &v);
    if (st == EM_OK) st = set_bundled_input(m, i, &v);
    if (st != EM_OK) {
      char what[256];
      snprintf(what, sizeof what, "method '%s' test case %zu input %zu", name, c, i);
      return error(o->path, what, st), -1;
    }
  }
  st = em_method_execute(m);
  if (st != EM_OK) return error(o->path, "execute", st), -1;
  double max_err = 0;
  em_bundled_diff cd = {.pass = true, .worst = -1};
  size_t bad_out = 0;
  for (size_t k = 0; k < n_exp; k++) {
    em_bundled_value e;
    em_bundled_diff d;
    st = em_bundled_value_get(b, s, c, true, k, &e);
    if (st == EM_OK) st = em_bundled_compare(&e, em_method_output(m, k), o->rtol, o->atol, &d);
    if (st != EM_OK) return error(o->path, "expected output", st), -1;
    max_err = fmax(max_err, d.max_abs_err);
    if (!d.pass && (cd.pass || badness(&d) > badness(&cd))) {
      cd = d;
      bad_out = k;
    }
  }
  cd.max_abs_err = max_err;
  printf("%-16s case %-4zu max abs err %-12.4g %s", name, c, cd.max_abs_err,
         cd.pass ? "PASS" : "FAIL");
  if (!cd.pass && cd.why)
    printf("  (output %zu: %s)", bad_out, cd.why);
  else if (!cd.pass)
    printf("  (output %zu element %lld: got %.9g, expected %.9g; %lld elements outside)", bad_out,
           (long long)cd.worst, cd.worst_actual, cd.worst_expected, (long long)cd.n_bad);
  printf("\n");
  if (!cd.pass && (!worst->have || badness(&cd) > badness(&worst->diff))) {
    *worst = (worst_case){name, c, bad_out, cd, 1};
  }
  return cd.pass ? 0 : 1;
}

static int run_bundled(const bundled_opts *o);

int cmd_bundled(const char *path, const char *method, double rtol, double atol, int threads,
                int no_mmap) {
  bundled_opts o = {path, method, rtol, atol, threads, no_mmap};
  return run_bundled(&o);
}

static int run_bundled(const bundled_opts *o) {
  size_t size = 0;
  void *data = read_all(o->path, &size);
  if (!data) {
    fprintf(stderr, "ember: cannot read %s\n", o->path);
    return 1;
  }
  em_bundled b;
  em_status st = em_bundled_open(data, size, &b);
  if (st != EM_OK) {
    free(data);
    return error(o->path,
                 st == EM_ERR_NOT_FOUND ? "not a bundled program" : "malformed bundled program",
                 st);
  }
  em_threadpool *pool = o->threads > 1 ? em_threadpool_create(o->threads) : NULL;
  em_module_options mo = {EM_VERIFY_FULL, !o->no_mmap, pool, NULL, 0, 0};
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) mo.max_memory_bytes = (uint64_t)pages * (uint64_t)page;
  em_module *mod = NULL;
  int rc = 1;
  size_t n_cases = 0, n_fail = 0, n_suites_run = 0;
  worst_case worst = {0};
  st = em_module_open_ex(o->path, NULL, &mo, &mod);
  if (st != EM_OK) {
    error(o->path, "program", st);
    goto done;
  }
  printf("%s: BundledProgram version %u, %zu method test suite%s (rtol %g, atol %g)\n", o->path,
         b.version, em_bundled_suite_count(&b), em_bundled_suite_count(&b) == 1 ? "" : "s", o->rtol,
         o->atol);
  for (size_t s = 0; s < em_bundled_suite_count(&b); s++) {
    const char *name = NULL;
    size_t nc = 0;
    if ((st = em_bundled_suite(&b, s, &name, &nc)) != EM_OK) {
      error(o->path, "test suite", st);
      goto done;
    }
    if (o->method && strcmp(o->method, name) != 0) continue;
    em_method *m = NULL;
    if ((st = em_module_method(mod, name, &m)) != EM_OK) {
      char what[256];
      snprintf(what, sizeof what, "test suite %zu names method '%s'", s, name);
      error(o->path, what, st);
      goto done;
    }
    n_suites_run++;
    for (size_t c = 0; c < nc; c++) {
      int r = run_case(o, &b, m, s, c, name, &worst);
      if (r < 0) goto done;
      n_cases++;
      n_fail += (size_t)r;
    }
  }
  if (o->method && n_suites_run == 0) {
    fprintf(stderr, "ember: %s: no test suite for method '%s'\n", o->path, o->method);
    goto done;
  }
  printf("bundled: %zu test case%s, %zu passed, %zu failed\n", n_cases, n_cases == 1 ? "" : "s",
         n_cases - n_fail, n_fail);
  rc = n_fail ? 1 : 0;
  if (worst.have && worst.diff.why) {
    fprintf(stderr, "ember: bundled test FAILED: method '%s' case %zu output %zu: %s\n",
            worst.method, worst.index, worst.output, worst.diff.why);
  } else if (worst.have) {
    const em_bundled_diff *d = &worst.diff;
    fprintf(stderr,
            "ember: bundled test FAILED: worst: method '%s' case %zu output %zu element %lld: "
            "got %.9g, expected %.9g, |diff| %.6g > atol + rtol*|expected| = %.6g (%lld "
            "elements outside; max abs err %.6g)\n",
            worst.method, worst.index, worst.output, (long long)d->worst, d->worst_actual,
            d->worst_expected, fabs(d->worst_actual - d->worst_expected),
            o->atol + o->rtol * fabs(d->worst_expected), (long long)d->n_bad, d->max_abs_err);
  }
done:
  em_module_destroy(mod);
  em_threadpool_destroy(pool);
  free(data);
  return rc;
}
