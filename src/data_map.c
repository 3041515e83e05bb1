/*
 * data_map.c — named data from a `.ptd` (FlatTensor, docs/pte-format.md §8) or
 * from a program's own named_data table.
 *
 * A `.ptd` starts with a u32 root offset, "FT01", then the "FH01" header at
 * byte 8 (length ≥ 40, flatbuffer_offset, flatbuffer_size,
 * segment_base_offset, segment_data_size). Everything is verified at load;
 * lookups are linear in the number of keys (done once per method prepare).
 */
#include <string.h>

#include "internal.h"

static uint64_t rd64(const uint8_t *p) {
  uint64_t v;
  memcpy(&v, p, 8);
  return v;
}

/* Verifies the whole FlatTensor: keys, segments, layouts. */
static em_status verify_ptd(em_data_map *m) {
  fb_reader *r = &m->r;
  if (fb_u32(r, m->root, FLAT_TENSOR_VERSION, 0) != 0)
    EM_FAIL(EM_ERR_INVALID_EXTERNAL_DATA, ".ptd has unsupported version");
  for (uint32_t i = 0; i < m->segments.n; i++) {
    fb_tab s = fb_vec_table(r, m->segments, i);
    uint64_t off = fb_u64(r, s, SEGMENT_OFFSET, 0), n = fb_u64(r, s, SEGMENT_SIZE, 0);
    if (off > m->seg_data_size || n > m->seg_data_size - off)
      EM_FAIL(EM_ERR_INVALID_EXTERNAL_DATA, ".ptd segment %u lies outside the segment data", i);
  }
  for (uint32_t i = 0; i < m->named.n; i++) {
    fb_tab nd = fb_vec_table(r, m->named, i);
    if (!fb_string(r, nd, NAMED_DATA_KEY, NULL))
      EM_FAIL(EM_ERR_INVALID_EXTERNAL_DATA, ".ptd entry %u has no key", i);
    if (fb_u32(r, nd, NAMED_DATA_SEGMENT, 0) >= m->segments.n)
      EM_FAIL(EM_ERR_INVALID_EXTERNAL_DATA, ".ptd entry %u refers to a missing segment", i);
    fb_tab lay = fb_table(r, nd, NAMED_DATA_LAYOUT);
    if (fb_present(lay)) {
      int8_t dt = fb_i8(r, lay, LAYOUT_SCALAR_TYPE, 0);
      fb_vec sz = fb_vector(r, lay, LAYOUT_SIZES, 4, 4);
      fb_vec order = fb_vector(r, lay, LAYOUT_DIM_ORDER, 1, 1);
      if (dt < 0 || dt >= EM_DTYPE_COUNT || sz.n > EM_MAX_DIM || order.n != sz.n)
        EM_FAIL(EM_ERR_INVALID_EXTERNAL_DATA, ".ptd entry %u has a bad tensor layout", i);
    }
  }
  if (r->bad)
    EM_FAIL(EM_ERR_INVALID_EXTERNAL_DATA, "malformed .ptd: %s at byte %u", r->why, r->where);
  return EM_OK;
}

em_status em_data_map_load(em_data_loader *loader, em_allocator *alloc, em_data_map **map_out) {
  if (!loader || !loader->load || !alloc || !map_out) return EM_ERR_INVALID_ARGUMENT;
  *map_out = NULL;
  if (loader->size < 48)
    EM_FAIL(EM_ERR_INVALID_EXTERNAL_DATA, ".ptd too small (%llu bytes)",
            (unsigned long long)loader->size);
  const void *head_v;
  EM_TRY(loader->load(loader, 0, 48, &head_v));
  const uint8_t *head = head_v;
  if (memcmp(head + 4, "FT01", 4) != 0 || memcmp(head + 8, "FH01", 4) != 0)
    EM_FAIL(EM_ERR_INVALID_EXTERNAL_DATA, "not a .ptd file (expected FT01/FH01)");
  uint32_t hlen;
  memcpy(&hlen, head + 12, 4);
  if (hlen < 40) EM_FAIL(EM_ERR_INVALID_EXTERNAL_DATA, ".ptd header length %u < 40", hlen);
  uint64_t fb_off = rd64(head + 16), fb_size = rd64(head + 24);
  uint64_t seg_base = rd64(head + 32), seg_size = rd64(head + 40);
  uint64_t fsize = loader->size;
  if (fb_off > fsize || fb_size > fsize - fb_off || fb_off + fb_size > 0x7fffffffu ||
      seg_base > fsize || seg_size > fsize - seg_base)
    EM_FAIL(EM_ERR_INVALID_EXTERNAL_DATA, ".ptd header ranges exceed the %llu-byte file",
            (unsigned long long)fsize);
  if (loader->release) loader->release(loader, head_v, 48);
  em_data_map *m = em_allocator_alloc(alloc, sizeof *m, 16);
  if (!m)
    EM_FAIL(EM_ERR_MEMORY_ALLOCATION_FAILED,
            ".ptd: %zu bytes for the data map do not fit the allocator", sizeof *m);
  memset(m, 0, sizeof *m);
  const void *bytes;
  EM_TRY(loader->load(loader, 0, fb_off + fb_size, &bytes));
  m->loader = loader;
  fb_init(&m->r, bytes, fb_off + fb_size);
  m->root = fb_root(&m->r);
  m->segments = fb_vector(&m->r, m->root, FLAT_TENSOR_SEGMENTS, 4, 4);
  m->named = fb_vector(&m->r, m->root, FLAT_TENSOR_NAMED_DATA, 4, 4);
  m->seg_base = seg_base;
  m->seg_data_size = seg_size;
  m->has_layouts = true;
  if (m->r.bad) EM_FAIL(EM_ERR_INVALID_EXTERNAL_DATA, "malformed .ptd: %s", m->r.why);
  EM_TRY(verify_ptd(m));
  *map_out = m;
  return EM_OK;
}

size_t em_data_map_count(const em_data_map *m) { return m ? m->named.n : 0; }

const char *em_data_map_key(const em_data_map *m, size_t i) {
  if (!m || i >= m->named.n) return NULL;
  fb_reader r = m->r;
  return fb_string(&r, fb_vec_table(&r, m->named, (uint32_t)i), NAMED_DATA_KEY, NULL);
}

em_status em_data_map_get(const em_data_map *m, const char *key, const void **data_out,
                          size_t *nbytes_out, em_tensor_layout *layout_out) {
  if (!m || !key) return EM_ERR_INVALID_ARGUMENT;
  fb_reader r = m->r;
  for (uint32_t i = 0; i < m->named.n; i++) {
    fb_tab nd = fb_vec_table(&r, m->named, i);
    const char *k = fb_string(&r, nd, NAMED_DATA_KEY, NULL);
    if (!k || strcmp(k, key) != 0) continue;
    uint32_t si = fb_u32(&r, nd, NAMED_DATA_SEGMENT, 0);
    if (si >= m->segments.n)
      EM_FAIL(EM_ERR_INVALID_EXTERNAL_DATA, "named data '%s': bad segment", key);
    fb_tab s = fb_vec_table(&r, m->segments, si);
    uint64_t off = fb_u64(&r, s, SEGMENT_OFFSET, 0), n = fb_u64(&r, s, SEGMENT_SIZE, 0);
    if (m->seg_base > m->loader->size || off > m->loader->size - m->seg_base ||
        n > m->loader->size - m->seg_base - off)
      EM_FAIL(EM_ERR_INVALID_EXTERNAL_DATA, "named data '%s' lies outside the file", key);
    EM_TRY(m->loader->load(m->loader, m->seg_base + off, n, data_out));
    *nbytes_out = (size_t)n;
    if (layout_out) {
      memset(layout_out, 0, sizeof *layout_out);
      fb_tab lay = m->has_layouts ? fb_table(&r, nd, NAMED_DATA_LAYOUT) : (fb_tab){0, 0, 0, 0};
      if (fb_present(lay)) {
        fb_vec sz = fb_vector(&r, lay, LAYOUT_SIZES, 4, 4);
        fb_vec order = fb_vector(&r, lay, LAYOUT_DIM_ORDER, 1, 1);
        layout_out->has_layout = 1;
        layout_out->dtype = fb_i8(&r, lay, LAYOUT_SCALAR_TYPE, 0);
        layout_out->dim = (int32_t)(sz.n > EM_MAX_DIM ? EM_MAX_DIM : sz.n);
        for (int32_t d = 0; d < layout_out->dim; d++) {
          layout_out->sizes[d] = fb_vec_i32(&r, sz, (uint32_t)d);
          layout_out->dim_order[d] = (uint32_t)d < order.n ? fb_vec_u8(&r, order, (uint32_t)d) : 0;
        }
      }
    }
    if (r.bad) EM_FAIL(EM_ERR_INVALID_EXTERNAL_DATA, "malformed named data '%s'", key);
    return EM_OK;
  }
  return EM_ERR_NOT_FOUND;
}
