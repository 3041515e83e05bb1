/*
 * program_segments.c — the byte ranges of a parsed program: segment `idx` of the file, constant
 * buffer `idx` (constant segment or legacy Buffer tables) and the initial state of a mutable
 * tensor, each bounds-checked against the file (internal.h).
 *
 * A lower layer of program loading: it reads only the fields program.c's load has filled in
 * (`struct em_program`) and the flatbuffer, and calls nothing in program.c or verify.c. program.c
 * (binding constants), verify.c (checking every range at load) and method.c (binding tensors and
 * delegate blobs) call it.
 */
#include "internal.h"

em_status em_program_segment(const em_program *p, uint32_t idx, const uint8_t **data,
                             uint64_t *size) {
  fb_reader r = p->r;
  if (idx >= p->segments.n)
    EM_FAIL(EM_ERR_INVALID_PROGRAM, "segment index %u out of range (%u segments)", idx,
            p->segments.n);
  fb_tab seg = fb_vec_table(&r, p->segments, idx);
  uint64_t off = fb_u64(&r, seg, SEGMENT_OFFSET, 0);
  uint64_t n = fb_u64(&r, seg, SEGMENT_SIZE, 0);
  if (r.bad) EM_FAIL(EM_ERR_INVALID_PROGRAM, "bad segment %u: %s", idx, r.why);
  if (p->seg_base > p->file_size || off > p->file_size - p->seg_base ||
      n > p->file_size - p->seg_base - off)
    EM_FAIL(EM_ERR_INVALID_PROGRAM, "segment %u [%llu, +%llu) lies outside the file", idx,
            (unsigned long long)off, (unsigned long long)n);
  const void *d = NULL;
  EM_TRY(p->loader->load(p->loader, p->seg_base + off, n, &d));
  *data = d;
  *size = n;
  return EM_OK;
}

em_status em_program_constant(const em_program *p, uint32_t idx, const uint8_t **data,
                              uint64_t *avail) {
  fb_reader r = p->r;
  if (p->legacy_constants) {
    if (idx >= p->constant_buffer.n)
      EM_FAIL(EM_ERR_INVALID_PROGRAM, "constant buffer %u out of range (%u)", idx,
              p->constant_buffer.n);
    fb_tab b = fb_vec_table(&r, p->constant_buffer, idx);
    fb_vec s = fb_vector(&r, b, BUFFER_STORAGE, 1, 16);
    if (r.bad) EM_FAIL(EM_ERR_INVALID_PROGRAM, "bad constant buffer %u: %s", idx, r.why);
    *data = p->bytes + s.data;
    *avail = s.n;
    return EM_OK;
  }
  if (idx >= p->const_offsets.n)
    EM_FAIL(EM_ERR_INVALID_PROGRAM, "constant %u out of range (%u constants)", idx,
            p->const_offsets.n);
  uint64_t off = fb_vec_u64(&r, p->const_offsets, idx);
  if (off > p->const_seg_size)
    EM_FAIL(EM_ERR_INVALID_PROGRAM, "constant %u offset %llu past its %llu-byte segment", idx,
            (unsigned long long)off, (unsigned long long)p->const_seg_size);
  *data = p->const_seg + off;
  *avail = p->const_seg_size - off;
  return EM_OK;
}

em_status em_program_mutable(const em_program *p, uint32_t idx, const uint8_t **data,
                             uint64_t *avail) {
  fb_reader r = p->r;
  if (!fb_present(p->mutable_seg))
    EM_FAIL(EM_ERR_INVALID_PROGRAM, "tensor has initial state %u but no mutable_data_segments",
            idx);
  fb_vec offs = fb_vector(&r, p->mutable_seg, SUBSEGMENT_OFFSETS, 8, 8);
  uint32_t seg = fb_u32(&r, p->mutable_seg, SUBSEGMENT_INDEX, 0);
  if (r.bad || idx >= offs.n) EM_FAIL(EM_ERR_INVALID_PROGRAM, "mutable data %u out of range", idx);
  const uint8_t *base;
  uint64_t n;
  EM_TRY(em_program_segment(p, seg, &base, &n));
  uint64_t off = fb_vec_u64(&r, offs, idx);
  if (off > n) EM_FAIL(EM_ERR_INVALID_PROGRAM, "mutable data %u offset past its segment", idx);
  *data = base + off;
  *avail = n - off;
  return EM_OK;
}
