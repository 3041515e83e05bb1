/*
 * bundled.c — finding the program inside a BundledProgram (`.bpte`, BP08;
 * docs/pte-format.md §9): BundledProgram{0 version, 1 method_test_suites,
 * 2 program [ubyte] (force_align 32)}. The embedded program is a whole `.pte`.
 */
#include <string.h>

#include "internal.h"

em_status em_bundled_program_find(const void *data, size_t size, size_t *offset_out,
                                  size_t *size_out) {
  if (!data || size < 8 || memcmp((const uint8_t *)data + 4, "BP08", 4) != 0)
    return EM_ERR_NOT_FOUND;
  fb_reader r;
  fb_init(&r, data, size);
  fb_tab root = fb_root(&r);
  fb_vec prog = fb_vector(&r, root, 2, 1, 1);
  if (r.bad || prog.n == 0)
    EM_FAIL(EM_ERR_INVALID_PROGRAM, "bundled program without a program: %s",
            r.why ? r.why : "empty");
  *offset_out = prog.data;
  *size_out = prog.n;
  return EM_OK;
}
