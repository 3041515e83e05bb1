/*
 * test_alias.c — the aliasing rule (docs/runtime-aliasing.md) on programs whose planned buffers
 * were made to overlap on purpose, for every kernel family the fixtures hold: elementwise,
 * reductions, softmax, shape/copy (cat, split, transpose, view), index_put / scatter, cumsum,
 * conv / gemm / pooling, batch norm, int8 Q/DQ, the LLM kernels (embedding, RoPE, attention with
 * a KV cache, 4-bit linears) and EmberCpuBackend delegate calls.
 *
 * For each kernel or delegate call, for each ordered pair (a, b) of its planned tensor operands,
 * the planned offset of a is rewritten in the file:
 *   - partial: a starts 16 bytes into b. The verifier must refuse the file, naming the
 *     instruction, the operator and the two values (or refuse the offset for another reason).
 *   - exact: a gets b's offset when both have the same byte size. The file loads (unless a third
 *     operand now partially overlaps), and every method is prepared and executed on zero inputs:
 *     under ASan/UBSan (make test-asan) no report — memcpy on overlapping ranges included.
 * Fixtures: the .pte files of tests/fixtures and tests/fixtures/alias (made by
 * tools/make_robust_seeds.py: e_shapes, e_kvcache, e_int8, e_llm_q4, e_inplace, and e_cat80 whose
 * cat has 81 operands, past the 32 the verifier keeps on its stack).
 */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <string.h>

#include "ember/backend_cpu.h"
#include "internal.h"
#include "test_util.h"
#include "try_program.h"

#define MAX_OPS        24
#define MAX_EDITS      4096
#define EDITS_PER_FILE 400

typedef struct operand {
  uint32_t value, mem, pos; /* pos: file offset of the planned offset's low word; 0 if absent */
  uint64_t off, len;
} operand;

typedef struct edit {
  uint32_t pos, val;
  int partial;
} edit;

typedef struct totals {
  unsigned files, partial, partial_refused, named, exact, exact_loaded, exact_refused;
  unsigned index_put_named;
} totals;

static int collect(fb_reader *r, fb_vec values, uint32_t vi, const uint8_t *base, operand *o) {
  fb_tab ev = fb_vec_table(r, values, vi);
  if (fb_u8(r, ev, EVALUE_TYPE, 0) != KT_TENSOR) return 0;
  fb_tab t = fb_table(r, ev, EVALUE_VAL);
  tensor_desc d;
  if (em_tensor_desc_read(r, t, &d) != EM_OK || !d.planned || d.nbytes == 0) return 0;
  fb_tab alloc = fb_table(r, t, TENSOR_ALLOCATION_INFO);
  uint32_t lo = fb_field(r, alloc, ALLOC_OFFSET_LOW, 4);
  if (fb_u32(r, alloc, ALLOC_OFFSET_HIGH, 0) != 0) return 0;
  *o = (operand){vi, d.memory_id, lo ? (uint32_t)(r->buf + lo - base) : 0, d.memory_offset,
                 d.nbytes};
  return 1;
}

/* The edits for one file: every ordered operand pair of every kernel / delegate call. */
static size_t plan_edits(const em_program *p, const uint8_t *base, edit *out, size_t cap) {
  fb_reader r = p->r;
  size_t n = 0;
  for (uint32_t pi = 0; pi < p->plans.n; pi++) {
    fb_tab plan = fb_vec_table(&r, p->plans, pi);
    fb_vec values = fb_vector(&r, plan, PLAN_VALUES, 4, 4);
    fb_vec chains = fb_vector(&r, plan, PLAN_CHAINS, 4, 4);
    for (uint32_t c = 0; c < chains.n; c++) {
      fb_vec ins = fb_vector(&r, fb_vec_table(&r, chains, c), CHAIN_INSTRUCTIONS, 4, 4);
      for (uint32_t i = 0; i < ins.n; i++) {
        fb_tab in = fb_vec_table(&r, ins, i);
        uint8_t type = fb_u8(&r, in, INSTRUCTION_TYPE, 0);
        if (type != INSTR_KERNEL_CALL && type != INSTR_DELEGATE_CALL) continue;
        fb_tab a = fb_table(&r, in, INSTRUCTION_ARGS);
        fb_vec args = fb_vector(
            &r, a, type == INSTR_KERNEL_CALL ? KERNEL_CALL_ARGS : DELEGATE_CALL_ARGS, 4, 4);
        operand ops[MAX_OPS];
        size_t k = 0;
        for (uint32_t j = 0; j < args.n && k < MAX_OPS; j++) {
          uint32_t vi = (uint32_t)fb_vec_i32(&r, args, j);
          fb_tab ev = fb_vec_table(&r, values, vi);
          uint8_t kt = fb_u8(&r, ev, EVALUE_TYPE, 0);
          if (kt == KT_TENSOR_LIST) {
            fb_vec items = fb_vector(&r, fb_table(&r, ev, EVALUE_VAL), LIST_ITEMS, 4, 4);
            for (uint32_t q = 0; q < items.n && k < MAX_OPS; q++)
              k += (size_t)collect(&r, values, (uint32_t)fb_vec_i32(&r, items, q), base, &ops[k]);
          } else {
            k += (size_t)collect(&r, values, vi, base, &ops[k]);
          }
        }
        for (size_t x = 0; x < k; x++)
          for (size_t y = 0; y < k; y++) {
            const operand *A = &ops[x], *B = &ops[y];
            if (x == y || A->value == B->value || !A->pos || A->mem != B->mem) continue;
            if (B->len > 16 && n < cap) out[n++] = (edit){A->pos, (uint32_t)(B->off + 16), 1};
            if (A->len == B->len && A->off != B->off && n < cap)
              out[n++] = (edit){A->pos, (uint32_t)B->off, 0};
          }
      }
    }
  }
  return n;
}

static void one_file(const char *path, totals *t) {
  size_t n = 0;
  unsigned char *data = read_file(path, &n);
  if (!data) return;
  em_buffer_loader bl;
  uint8_t mem[1024];
  em_allocator pa;
  em_allocator_init(&pa, mem, sizeof mem);
  em_program *p = NULL;
  em_status st = em_program_load(em_buffer_loader_init(&bl, data, n), EM_VERIFY_FULL, &pa, &p);
  CHECK(st == EM_OK, "%s does not load: %s", path, em_last_error());
  if (st != EM_OK) {
    free(data);
    return;
  }
  t->files++;
  static edit edits[MAX_EDITS];
  size_t ne = plan_edits(p, data, edits, MAX_EDITS);
  size_t step = ne > EDITS_PER_FILE ? ne / EDITS_PER_FILE : 1;
  unsigned char *buf = NULL;
  if (posix_memalign((void **)&buf, 64, n) != 0) abort();
  for (size_t e = 0; e < ne; e += step) {
    memcpy(buf, data, n);
    memcpy(buf + edits[e].pos, &edits[e].val, 4);
    em_allocator_init(&pa, mem, sizeof mem);
    em_clear_last_error();
    st = em_program_load(em_buffer_loader_init(&bl, buf, n), EM_VERIFY_FULL, &pa, &p);
    const char *why = em_last_error();
    int named = strstr(why, "partially overlap") != NULL;
    if (edits[e].partial) {
      t->partial++;
      t->partial_refused += st != EM_OK;
      t->named += named;
      if (named && strstr(why, "aten::index_put") && t->index_put_named++ == 0)
        printf("the issue's mutant (index_put's output moved into its input): %s\n", why);
      CHECK(st != EM_OK, "%s: partial overlap (edit %zu) was accepted", path, e);
      CHECK(st == EM_OK || named || strstr(why, "outside arena") || strstr(why, "aligned"),
            "%s: partial overlap refused without naming it: %s", path, why);
      if (named)
        CHECK(strstr(why, "instruction") && strstr(why, "values"), "message lacks names: %s", why);
    } else {
      t->exact++;
      if (st == EM_OK) {
        t->exact_loaded++;
        try_stats s = {0, 0, 0, 0};
        try_program(buf, n, &s); /* prepare and execute every method; ASan watches */
      } else {
        t->exact_refused++;
        CHECK(named, "%s: exact alias refused for another reason: %s", path, why);
      }
    }
  }
  free(buf);
  free(data);
}

static void run_dir(const char *dir, totals *t) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d))) {
    size_t l = strlen(e->d_name);
    if (l < 5 || strcmp(e->d_name + l - 4, ".pte") != 0) continue;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    one_file(path, t);
  }
  closedir(d);
}

int main(void) {
  em_log_set_level(EM_LOG_FATAL);
  em_register_prim_ops();
  em_register_portable_kernels();
  em_register_quantized_kernels();
  em_register_cpu_backend();
  totals t = {0};
  run_dir("tests/fixtures", &t);
  run_dir("tests/fixtures/alias", &t);
  CHECK(t.files >= 8, "expected the fixture files, found %u", t.files);
  CHECK(t.partial >= 200 && t.partial_refused == t.partial, "%u of %u partial overlaps refused",
        t.partial_refused, t.partial);
  CHECK(t.named * 2 >= t.partial, "only %u of %u refusals name the overlap", t.named, t.partial);
  CHECK(t.index_put_named > 0, "no refusal named aten::index_put (the issue's mutant)");
  CHECK(t.exact_loaded >= 50, "only %u exact aliases loaded and ran", t.exact_loaded);
  printf("aliasing: %u files; partial overlaps %u, refused %u (%u naming the overlap, %u at "
         "index_put); exact aliases %u, ran %u, refused %u (a third operand overlapped)\n",
         t.files, t.partial, t.partial_refused, t.named, t.index_put_named, t.exact, t.exact_loaded,
         t.exact_refused);
  return test_summary("test_alias");
}
