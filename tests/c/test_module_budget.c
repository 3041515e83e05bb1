/*
 * test_module_budget.c — em_module under a memory budget (issue 30): for every fixture and
 * every budget from 1 KiB to 256 MiB (doubling), opening the module and preparing each method
 * either succeeds (and the method executes) or fails with EM_ERR_MEMORY_ALLOCATION_FAILED and a
 * message naming what did not fit (arena, scratch or method memory) and its size — before the
 * memory is allocated. A budget that passed must keep passing when it grows. Run under ASan (make
 * test-asan) the failure paths leak nothing.
 */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <string.h>

#include "ember/backend_cpu.h"
#include "ember/ember.h"
#include "ember_ext/module.h"
#include "test_util.h"

typedef struct counts {
  unsigned files, refused, prepared, executed;
} counts;

static void one_file(const char *path, counts *c) {
  int passed = 0;
  c->files++;
  for (uint64_t budget = 1024; budget <= ((uint64_t)256 << 20); budget *= 2) {
    em_module_options o = {EM_VERIFY_FULL, 1, NULL, NULL, 0, budget};
    o.temp_bytes = budget / 4 < ((size_t)1 << 20) ? (size_t)(budget / 4) : (size_t)1 << 20;
    em_module *mod = NULL;
    em_status st = em_module_open_ex(path, NULL, &o, &mod);
    CHECK(st == EM_OK, "%s: open failed: %s", path, em_last_error());
    if (st != EM_OK) return;
    const em_program *p = em_module_program(mod);
    int all = 1;
    for (size_t i = 0; i < em_program_method_count(p); i++) {
      em_method *m = NULL;
      em_clear_last_error();
      st = em_module_method(mod, em_program_method_name(p, i), &m);
      if (st == EM_OK) {
        c->prepared++;
        /* Inputs: whatever the planned memory holds (zeros); unplanned ones are skipped. */
        int bound = 1;
        for (size_t k = 0; k < em_method_input_count(m); k++) {
          const em_evalue *v = em_method_input(m, k);
          if (v->tag == EM_TAG_TENSOR && !v->u.tensor->data) bound = 0;
        }
        if (bound && em_method_execute(m) == EM_OK) c->executed++;
        continue;
      }
      all = 0;
      const char *why = em_last_error();
      CHECK(st == EM_ERR_MEMORY_ALLOCATION_FAILED, "%s at %llu bytes: %s: %s", path,
            (unsigned long long)budget, em_status_str(st), why);
      CHECK(strstr(why, "bytes") && (strstr(why, "budget") || strstr(why, "allocator")),
            "%s at %llu bytes: the refusal names neither the budget nor the size: %s", path,
            (unsigned long long)budget, why);
      c->refused++;
    }
    CHECK(all || !passed, "%s: a budget of %llu bytes fails after a smaller one passed", path,
          (unsigned long long)budget);
    passed |= all;
    em_module_destroy(mod);
  }
  CHECK(passed, "%s does not run within 256 MiB", path);
}

static void run_dir(const char *dir, counts *c) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d))) {
    size_t l = strlen(e->d_name);
    if (l < 5 || strcmp(e->d_name + l - 4, ".pte") != 0) continue;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    one_file(path, c);
  }
  closedir(d);
}

int main(void) {
  em_log_set_level(EM_LOG_FATAL);
  em_register_prim_ops();
  em_register_portable_kernels();
  em_register_quantized_kernels();
  em_register_cpu_backend();
  counts c = {0, 0, 0, 0};
  run_dir("tests/fixtures", &c);
  run_dir("tests/fixtures/alias", &c);
  CHECK(c.files >= 8 && c.refused > 50 && c.prepared > 50, "%u files, %u refused, %u prepared",
        c.files, c.refused, c.prepared);
  printf("module budget: %u files x 19 budgets; %u methods refused by name, %u prepared, %u "
         "executed\n",
         c.files, c.refused, c.prepared, c.executed);
  return test_summary("test_module_budget");
}
