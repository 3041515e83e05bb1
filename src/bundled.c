/*
 * bundled.c — BundledProgram (`.bpte`, BP08; docs/pte-format.md §9, docs/devtools.md):
 * BundledProgram{0 version, 1 method_test_suites, 2 program [ubyte] (force_align 32)},
 * BundledMethodTestSuite{0 method_name, 1 test_cases}, BundledMethodTestCase{0 inputs,
 * 1 expected_outputs}, Value{0 val_type, 1 val} with the union ValueUnion{1 Tensor, 2 Int,
 * 3 Bool, 4 Double}, Tensor{0 scalar_type, 1 sizes, 2 data (force_align 16), 3 dim_order}.
 *
 * The file is untrusted: em_bundled_open() walks every suite, case and value and checks
 * every offset, length, union type, dtype, rank and byte count before anything else reads
 * it; the accessors read through the bounds-checked flatbuffer reader again. Values are
 * views into the caller's bytes; nothing is allocated. em_bundled_compare() applies
 * ExecuTorch's bundled-verification tolerances (|a - e| <= atol + rtol * |e|).
 */
#include <math.h>
#include <string.h>

#include "internal.h"

enum { BP_VERSION = 0, BP_SUITES = 1, BP_PROGRAM = 2 };
enum { VU_NONE = 0, VU_TENSOR = 1, VU_INT = 2, VU_BOOL = 3, VU_DOUBLE = 4 };

em_status em_bundled_program_find(const void *data, size_t size, size_t *offset_out,
                                  size_t *size_out) {
  if (!data || size < 8 || memcmp((const uint8_t *)data + 4, "BP08", 4) != 0)
    return EM_ERR_NOT_FOUND;
  fb_reader r;
  fb_init(&r, data, size);
  fb_tab root = fb_root(&r);
  fb_vec prog = fb_vector(&r, root, BP_PROGRAM, 1, 1);
  if (r.bad || prog.n == 0)
    EM_FAIL(EM_ERR_INVALID_PROGRAM, "bundled program without a program: %s",
            r.why ? r.why : "empty");
  *offset_out = prog.data;
  *size_out = prog.n;
  return EM_OK;
}

/* Reads one Value table into `out`; on failure returns the name of the bad field. */
static const char *read_value(fb_reader *r, fb_tab v, em_bundled_value *out) {
  memset(out, 0, sizeof *out);
  if (!fb_present(v) || r->bad) return "Value";
  uint8_t type = fb_u8(r, v, 0, VU_NONE);
  fb_tab t = fb_table(r, v, 1);
  if (r->bad) return "Value.val";
  if (type == VU_NONE || type > VU_DOUBLE) return "Value.val_type (unknown union type)";
  if (!fb_present(t)) return "Value.val (missing)";
  if (type == VU_INT) {
    out->tag = EM_TAG_INT;
    out->i = fb_i64(r, t, 0, 0);
    return r->bad ? "Int.int_val" : NULL;
  }
  if (type == VU_BOOL) {
    out->tag = EM_TAG_BOOL;
    out->b = fb_u8(r, t, 0, 0) != 0;
    return r->bad ? "Bool.bool_val" : NULL;
  }
  if (type == VU_DOUBLE) {
    out->tag = EM_TAG_DOUBLE;
    out->d = fb_f64(r, t, 0, 0.0);
    return r->bad ? "Double.double_val" : NULL;
  }
  out->tag = EM_TAG_TENSOR;
  int8_t dtype = fb_i8(r, t, 0, EM_DTYPE_U8);
  size_t esz = em_dtype_size(dtype);
  if (r->bad || esz == 0) return "Tensor.scalar_type (unknown dtype)";
  out->dtype = dtype;
  fb_vec sizes = fb_vector(r, t, 1, 4, 4);
  if (r->bad) return "Tensor.sizes";
  if (sizes.n > EM_MAX_DIM) return "Tensor.sizes (rank above 16)";
  out->dim = (int32_t)sizes.n;
  uint64_t numel = 1;
  for (uint32_t d = 0; d < sizes.n; d++) {
    int32_t s = fb_vec_i32(r, sizes, d);
    if (s < 0) return "Tensor.sizes (negative size)";
    out->sizes[d] = s;
    numel *= (uint64_t)s;
    if (numel > r->size) return "Tensor.sizes (more elements than the file has bytes)";
  }
  out->numel = (int64_t)numel;
  out->nbytes = (size_t)numel * esz;
  fb_vec order = fb_vector(r, t, 3, 1, 1);
  if (r->bad) return "Tensor.dim_order";
  if (order.n != 0 && order.n != sizes.n) return "Tensor.dim_order (length differs from rank)";
  uint32_t seen = 0;
  for (uint32_t d = 0; d < sizes.n; d++) {
    uint8_t o = order.n ? fb_vec_u8(r, order, d) : (uint8_t)d;
    if (o >= sizes.n || (seen & (1u << o))) return "Tensor.dim_order (not a permutation)";
    seen |= 1u << o;
    out->dim_order[d] = o;
  }
  unsigned align = esz < 8 ? (unsigned)esz : 8;
  fb_vec data = fb_vector(r, t, 2, 1, align);
  if (r->bad) return "Tensor.data";
  if ((uint64_t)data.n != (uint64_t)out->nbytes)
    return "Tensor.data (byte count differs from sizes x element size)";
  out->data = data.n ? r->buf + data.data : NULL;
  return NULL;
}

em_status em_bundled_open(const void *data, size_t size, em_bundled *out) {
  if (!data || !out) return EM_ERR_INVALID_ARGUMENT;
  memset(out, 0, sizeof *out);
  if (size < 8 || memcmp((const uint8_t *)data + 4, "BP08", 4) != 0)
    EM_FAIL(EM_ERR_NOT_FOUND, "not a bundled program (no BP08 identifier)");
  if (size > UINT32_MAX) EM_FAIL(EM_ERR_INVALID_PROGRAM, "bundled program over 4 GiB");
  fb_reader r;
  fb_init(&r, data, size);
  fb_tab root = fb_root(&r);
  if (r.bad || !fb_present(root))
    EM_FAIL(EM_ERR_INVALID_PROGRAM, "bundled program: BundledProgram (root): %s",
            r.why ? r.why : "absent");
  uint32_t version = fb_u32(&r, root, BP_VERSION, 0);
  fb_vec suites = fb_vector(&r, root, BP_SUITES, 4, 4);
  if (r.bad)
    EM_FAIL(EM_ERR_INVALID_PROGRAM, "bundled program: BundledProgram.method_test_suites: %s",
            r.why);
  fb_vec prog = fb_vector(&r, root, BP_PROGRAM, 1, 1);
  if (r.bad || prog.n == 0)
    EM_FAIL(EM_ERR_INVALID_PROGRAM, "bundled program: BundledProgram.program: %s",
            r.bad ? r.why : "empty");
  for (uint32_t s = 0; s < suites.n; s++) {
    fb_tab suite = fb_vec_table(&r, suites, s);
    const char *name = r.bad ? NULL : fb_string(&r, suite, 0, NULL);
    if (r.bad || !name)
      EM_FAIL(EM_ERR_INVALID_PROGRAM, "bundled program: method_test_suites[%u].method_name: %s", s,
              r.why ? r.why : "missing");
    fb_vec cases = fb_vector(&r, suite, 1, 4, 4);
    if (r.bad)
      EM_FAIL(EM_ERR_INVALID_PROGRAM, "bundled program: suite '%s'.test_cases: %s", name, r.why);
    for (uint32_t c = 0; c < cases.n; c++) {
      fb_tab tc = fb_vec_table(&r, cases, c);
      for (unsigned side = 0; side < 2; side++) {
        const char *what = side ? "expected_outputs" : "inputs";
        fb_vec vals = r.bad ? (fb_vec){0, 0} : fb_vector(&r, tc, side, 4, 4);
        if (r.bad)
          EM_FAIL(EM_ERR_INVALID_PROGRAM, "bundled program: suite '%s' test case %u.%s: %s", name,
                  c, what, r.why);
        for (uint32_t i = 0; i < vals.n; i++) {
          em_bundled_value v;
          fb_tab vt = fb_vec_table(&r, vals, i);
          const char *field = read_value(&r, vt, &v);
          if (field)
            EM_FAIL(EM_ERR_INVALID_PROGRAM,
                    "bundled program: suite '%s' test case %u %s[%u]: %s%s%s", name, c, what, i,
                    field, r.why ? ": " : "", r.why ? r.why : "");
        }
      }
    }
  }
  out->data = data;
  out->size = size;
  out->version = version;
  out->suites = suites.data;
  out->n_suites = suites.n;
  out->program_offset = prog.data;
  out->program_size = prog.n;
  return EM_OK;
}

size_t em_bundled_suite_count(const em_bundled *b) { return b ? b->n_suites : 0; }

/* The reader over `b` and test case (s, c); false when out of range or unreadable. */
static bool case_table(const em_bundled *b, size_t s, size_t c, fb_reader *r, fb_tab *suite,
                       fb_tab *tc) {
  if (!b || !b->data || s >= b->n_suites) return false;
  fb_init(r, b->data, b->size);
  *suite = fb_vec_table(r, (fb_vec){b->suites, b->n_suites}, (uint32_t)s);
  if (c == SIZE_MAX) return !r->bad;
  fb_vec cases = fb_vector(r, *suite, 1, 4, 4);
  if (r->bad || c >= cases.n) return false;
  *tc = fb_vec_table(r, cases, (uint32_t)c);
  return !r->bad;
}

em_status em_bundled_suite(const em_bundled *b, size_t s, const char **method_out,
                           size_t *n_cases_out) {
  fb_reader r;
  fb_tab suite, tc;
  if (!case_table(b, s, SIZE_MAX, &r, &suite, &tc)) return EM_ERR_INVALID_ARGUMENT;
  const char *name = fb_string(&r, suite, 0, NULL);
  fb_vec cases = fb_vector(&r, suite, 1, 4, 4);
  if (r.bad || !name) return EM_ERR_INVALID_PROGRAM;
  if (method_out) *method_out = name;
  if (n_cases_out) *n_cases_out = cases.n;
  return EM_OK;
}

em_status em_bundled_case(const em_bundled *b, size_t s, size_t c, size_t *n_inputs_out,
                          size_t *n_expected_out) {
  fb_reader r;
  fb_tab suite, tc;
  if (c == SIZE_MAX || !case_table(b, s, c, &r, &suite, &tc)) return EM_ERR_INVALID_ARGUMENT;
  fb_vec in = fb_vector(&r, tc, 0, 4, 4), exp = fb_vector(&r, tc, 1, 4, 4);
  if (r.bad) return EM_ERR_INVALID_PROGRAM;
  if (n_inputs_out) *n_inputs_out = in.n;
  if (n_expected_out) *n_expected_out = exp.n;
  return EM_OK;
}

em_status em_bundled_value_get(const em_bundled *b, size_t s, size_t c, bool expected, size_t i,
                               em_bundled_value *out) {
  fb_reader r;
  fb_tab suite, tc;
  if (!out || c == SIZE_MAX || !case_table(b, s, c, &r, &suite, &tc))
    return EM_ERR_INVALID_ARGUMENT;
  fb_vec vals = fb_vector(&r, tc, expected ? 1 : 0, 4, 4);
  if (r.bad) return EM_ERR_INVALID_PROGRAM;
  if (i >= vals.n) return EM_ERR_INVALID_ARGUMENT;
  const char *field = read_value(&r, fb_vec_table(&r, vals, (uint32_t)i), out);
  if (field) EM_FAIL(EM_ERR_INVALID_PROGRAM, "bundled value: %s", field);
  return EM_OK;
}

/* ---- comparison ---------------------------------------------------------------------------- */

/* |x| without libm (src/ links on bare metal without it; isnan / isfinite are macros). */
static double abs_d(double x) { return x < 0 ? -x : x; }

static double half_to_double(uint16_t h) {
  uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ff;
  double v;
  if (e == 0) {
    v = (double)m * (1.0 / 16777216.0); /* m * 2^-24 */
  } else if (e == 31) {
    v = m ? NAN : INFINITY;
  } else {
    uint32_t bits = ((e + 112u) << 23) | (m << 13); /* rebias 15 -> 127 */
    float f;
    memcpy(&f, &bits, 4);
    v = f;
  }
  return (h & 0x8000) ? -v : v;
}

/* Element k of a tensor as a double; false for dtypes compared byte for byte. */
static bool load(const void *p, int dtype, int64_t k, double *v) {
  const uint8_t *b = p;
  size_t z = em_dtype_size(dtype);
  const uint8_t *e = b + (size_t)k * z;
  union {
    float f;
    double d;
    uint32_t u32;
    uint16_t u16;
    int64_t i64;
    int32_t i32;
    int16_t i16;
    uint8_t raw[8];
  } u;
  memcpy(u.raw, e, z);
  switch (dtype) {
  case EM_DTYPE_F32: *v = u.f; return true;
  case EM_DTYPE_F64: *v = u.d; return true;
  case EM_DTYPE_F16: *v = half_to_double(u.u16); return true;
  case EM_DTYPE_BF16:
    u.u32 = (uint32_t)u.u16 << 16;
    *v = u.f;
    return true;
  case EM_DTYPE_I64: *v = (double)u.i64; return true;
  case EM_DTYPE_I32: *v = u.i32; return true;
  case EM_DTYPE_I16: *v = u.i16; return true;
  case EM_DTYPE_I8: *v = (int8_t)e[0]; return true;
  case EM_DTYPE_U8:
  case EM_DTYPE_BOOL: *v = e[0]; return true;
  default: return false;
  }
}

static bool is_float(int dtype) {
  return dtype == EM_DTYPE_F32 || dtype == EM_DTYPE_F64 || dtype == EM_DTYPE_F16 ||
         dtype == EM_DTYPE_BF16;
}

/* One pair of elements (or scalars): updates `diff`. */
static void check(em_bundled_diff *diff, int64_t k, double a, double e, bool tolerant, double rtol,
                  double atol) {
  bool ok;
  double err = abs_d(a - e);
  if (a == e || (isnan(a) && isnan(e)))
    ok = true, err = 0;
  else
    ok = tolerant && isfinite(err) && err <= atol + rtol * abs_d(e);
  if (isnan(err)) err = INFINITY;
  if (err > diff->max_abs_err) diff->max_abs_err = err;
  if (!ok) {
    if (diff->n_bad == 0 || err >= abs_d(diff->worst_actual - diff->worst_expected)) {
      diff->worst = k;
      diff->worst_actual = a;
      diff->worst_expected = e;
    }
    diff->n_bad++;
  }
}

em_status em_bundled_compare(const em_bundled_value *expected, const em_evalue *actual, double rtol,
                             double atol, em_bundled_diff *diff) {
  if (!expected || !actual || !diff) return EM_ERR_INVALID_ARGUMENT;
  memset(diff, 0, sizeof *diff);
  diff->worst = -1;
  if (expected->tag != EM_TAG_TENSOR) {
    double a, e = expected->tag == EM_TAG_INT    ? (double)expected->i
                  : expected->tag == EM_TAG_BOOL ? (double)expected->b
                                                 : expected->d;
    if (actual->tag != expected->tag) {
      diff->why = "value type differs";
      return EM_OK;
    }
    a = actual->tag == EM_TAG_INT    ? (double)actual->u.i
        : actual->tag == EM_TAG_BOOL ? (double)actual->u.b
                                     : actual->u.d;
    if (actual->tag == EM_TAG_INT && actual->u.i != expected->i) a = e + 1 + abs_d(a - e);
    check(diff, 0, a, e, actual->tag == EM_TAG_DOUBLE, rtol, atol);
    diff->pass = diff->n_bad == 0;
    return EM_OK;
  }
  const em_tensor *t = em_evalue_tensor(actual);
  if (!t)
    diff->why = "not a tensor";
  else if (t->dtype != expected->dtype)
    diff->why = "dtype differs";
  else if (t->dim != expected->dim)
    diff->why = "rank differs";
  for (int32_t d = 0; !diff->why && d < t->dim; d++) {
    if (t->sizes[d] != expected->sizes[d])
      diff->why = "sizes differ";
    else if (t->dim_order && t->dim_order[d] != expected->dim_order[d])
      diff->why = "dim order differs";
  }
  if (!diff->why && t->numel > 0 && !t->data) diff->why = "output has no data";
  if (diff->why) return EM_OK;
  size_t z = em_dtype_size(t->dtype);
  bool tolerant = is_float(t->dtype);
  for (int64_t k = 0; k < t->numel; k++) {
    double a, e;
    if (load(t->data, t->dtype, k, &a) && load(expected->data, t->dtype, k, &e)) {
      check(diff, k, a, e, tolerant, rtol, atol);
    } else if (memcmp((const uint8_t *)t->data + (size_t)k * z,
                      (const uint8_t *)expected->data + (size_t)k * z, z) != 0) {
      check(diff, k, 1, 0, false, rtol, atol);
    }
  }
  diff->pass = diff->n_bad == 0;
  return EM_OK;
}
