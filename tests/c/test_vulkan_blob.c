/*
 * test_vulkan_blob.c — EmberVulkanBackend's blob validation (em_vulkan_blob_check, no device
 * needed) on a hand-built version-3 blob (conv2d + clamp, broadcast add of a constant, max
 * pool, bilinear upsampling), once with every tensor f32 and once with mixed storage (per
 * tensor f32 / f16, byte offsets): the blob is accepted; every single-bit flip of its header,
 * tensor table (the storage fields among them), argument lists and operators and every
 * truncation returns a status without reading out of bounds (this test also runs under
 * ASan/UBSan in `make test-asan`); named fields give their statuses (a version-2 blob, unknown
 * storage types, a misaligned offset, arena_bytes and weight_bytes past the tensors' ends).
 * Passes trivially, saying so, in a build without Vulkan (EMBER_VULKAN off).
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ember/backend_vulkan.h"
#include "ember/platform.h"

#define CHECK(c)                                                                                   \
  do {                                                                                             \
    if (!(c)) {                                                                                    \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #c);                        \
      return 1;                                                                                    \
    }                                                                                              \
  } while (0)

static uint8_t blob[4096 + 4];
static uint8_t scratch[1 << 16];
static size_t n_blob, n_meta;

static void w32(size_t *at, uint32_t v) {
  memcpy(blob + *at, &v, 4);
  *at += 4;
}

static void wf(size_t *at, float v) {
  memcpy(blob + *at, &v, 4);
  *at += 4;
}

static void w16(size_t *at, uint16_t v) {
  memcpy(blob + *at, &v, 2);
  *at += 2;
}

static void tensor(size_t *at, uint32_t off, uint32_t weight, uint32_t nd, const uint32_t s[4],
                   uint32_t storage) {
  w32(at, off), w32(at, weight), w32(at, nd);
  for (int k = 0; k < 4; k++) w32(at, (uint32_t)k < nd ? s[k] : 0);
  w32(at, storage);
}

static void op(size_t *at, uint32_t code, uint32_t i0, uint32_t i1, uint32_t i2, uint32_t out,
               const int32_t ip[11], float f0, float f1) {
  w32(at, code), w32(at, i0), w32(at, i1), w32(at, i2), w32(at, out);
  for (int k = 0; k < 11; k++) w32(at, (uint32_t)ip[k]);
  wf(at, f0), wf(at, f1), wf(at, 0), wf(at, 0);
}

#define NT 8
/* x[1,2,5,5] -conv 3x3 (+bias, clamp)-> y[1,3,3,3] -+ c[3,1,1]-> z -maxpool 2/1-> p[1,3,2,2]
   -bilinear, align_corners-> u[1,3,5,3]. mixed 0: every tensor f32; mixed 1: the conv weight
   and x, z, u f16, the rest f32 (as the exporter's rule would mix them). Offsets in bytes,
   each tensor aligned to its element size; the weights f32 constants first. */
static const uint32_t shapes[NT][5] = {{4, 1, 2, 5, 5}, {4, 3, 2, 3, 3}, {1, 3},
                                       {4, 1, 3, 3, 3}, {3, 3, 1, 1},    {4, 1, 3, 3, 3},
                                       {4, 1, 3, 2, 2}, {4, 1, 3, 5, 3}};
static const bool is_const[NT] = {0, 1, 1, 0, 1, 0, 0, 0};
static const bool half16[NT] = {1, 1, 0, 0, 0, 1, 0, 1}; /* f16 with mixed storage */
static size_t t_at[NT];                                  /* each tensor record's position */
static uint32_t arena_top, wbytes;

static void build(int mixed) {
  const uint32_t N = 0xFFFFFFFFu;
  uint32_t off[NT], woff[NT], numel[NT], st[NT], top = 0, wtop = 0;
  for (int t = 0; t < NT; t++) {
    numel[t] = 1;
    for (uint32_t d = 0; d < shapes[t][0]; d++) numel[t] *= shapes[t][1 + d];
    st[t] = mixed && half16[t] ? 1u : 0u;
    uint32_t es = st[t] ? 2u : 4u;
    off[t] = (top + es - 1) / es * es;
    top = off[t] + numel[t] * es;
  }
  for (uint32_t want = 0; want < 2; want++) /* f32 constants, then f16 ones */
    for (int t = 0; t < NT; t++)
      if (is_const[t] && st[t] == want) woff[t] = wtop, wtop += numel[t] * (want ? 2u : 4u);
  arena_top = top, wbytes = wtop;
  size_t at = 0;
  w32(&at, 0x4B564D45u), w32(&at, 3), w32(&at, NT), w32(&at, 4), w32(&at, 1), w32(&at, 1);
  w32(&at, top), w32(&at, wtop);
  for (int t = 0; t < NT; t++) {
    t_at[t] = at;
    tensor(&at, off[t], is_const[t] ? woff[t] : N, shapes[t][0], shapes[t] + 1, st[t]);
  }
  w32(&at, 0), w32(&at, 7);
  const int32_t conv[11] = {1, 1, 0, 0, 1, 1, 1, 1}, add[11] = {0};
  const int32_t pool[11] = {0, 2, 2, 1, 1, 0, 0, 1, 1, 0, 0}, up[11] = {1, 1};
  op(&at, 4, 0, 1, 2, 3, conv, 0.0f, INFINITY);
  op(&at, 2, 3, 4, N, 5, add, 0, 0);
  op(&at, 5, 5, N, N, 6, pool, 0, 0);
  op(&at, 15, 6, N, N, 7, up, 0.25f, 0.5f);
  n_meta = at;
  for (uint32_t want = 0; want < 2; want++) /* (validation reads no weight value) */
    for (int t = 0; t < NT; t++)
      for (uint32_t k = 0; is_const[t] && st[t] == want && k < numel[t]; k++)
        want ? w16(&at, (uint16_t)(0x3C00 + k)) /* 1 + k / 1024 */ : wf(&at, (float)k * 0.01f);
  n_blob = at;
}

static em_status check(size_t n) { return em_vulkan_blob_check(blob, n, scratch, sizeof scratch); }

static int sweep(int mixed) {
  build(mixed);
  CHECK(check(n_blob) == EM_OK);
  int refused = 0, mutants = 0;
  for (size_t i = 0; i < n_meta; i++)
    for (int b = 0; b < 8; b++) {
      blob[i] ^= (uint8_t)(1u << b);
      refused += check(n_blob) != EM_OK;
      mutants++;
      blob[i] ^= (uint8_t)(1u << b);
    }
  for (size_t n = 0; n < n_blob; n++) CHECK(check(n) != EM_OK);
  CHECK(check(n_blob) == EM_OK);
  blob[0] ^= 1;
  CHECK(check(n_blob) == EM_ERR_INVALID_PROGRAM);
  CHECK(strstr(em_last_error(), "magic") != NULL);
  blob[0] ^= 1, blob[4] = 2; /* version 2 (one storage type for the arena) */
  CHECK(check(n_blob) == EM_ERR_DELEGATE_INVALID_COMPATIBILITY);
  CHECK(strstr(em_last_error(), "version 2") != NULL);
  blob[4] = 3;
  CHECK(check(n_blob - 4) == EM_ERR_INVALID_PROGRAM);
  for (uint32_t v = 2; v < 6; v += 3) { /* an unknown storage type in tensor 0 (x) */
    memcpy(blob + t_at[0] + 28, &v, 4);
    CHECK(check(n_blob) == EM_ERR_INVALID_PROGRAM);
    CHECK(strstr(em_last_error(), v == 2 ? "storage type 2" : "storage type 5") != NULL);
  }
  memcpy(blob + t_at[0] + 28, &(uint32_t){(uint32_t)mixed}, 4);
  CHECK(check(n_blob) == EM_OK);
  uint32_t y_off;
  memcpy(&y_off, blob + t_at[3], 4); /* y is f32 either way: an offset of 2 mod 4 */
  memcpy(blob + t_at[3], &(uint32_t){y_off + 2}, 4);
  CHECK(check(n_blob) == EM_ERR_INVALID_PROGRAM);
  CHECK(strstr(em_last_error(), "not a multiple") != NULL);
  memcpy(blob + t_at[3], &y_off, 4);
  memcpy(blob + 24, &(uint32_t){arena_top + 4}, 4); /* arena_bytes past the last tensor */
  CHECK(check(n_blob) == EM_ERR_INVALID_PROGRAM);
  CHECK(strstr(em_last_error(), "arena_bytes") != NULL);
  memcpy(blob + 24, &arena_top, 4);
  /* the conv weight (tensor 1) as the other type: f16 -> f32 leaves the weights section,
     f32 -> f16 leaves its tail unaccounted for, or its arena bytes past arena_bytes... */
  memcpy(blob + t_at[1] + 28, &(uint32_t){(uint32_t)!mixed}, 4);
  CHECK(check(n_blob) == EM_ERR_INVALID_PROGRAM || !mixed);
  memcpy(blob + t_at[1] + 28, &(uint32_t){(uint32_t)mixed}, 4);
  /* a weights section longer than its constants (4 more bytes, and the header says so) */
  memcpy(blob + 28, &(uint32_t){wbytes + 4}, 4);
  memset(blob + n_blob, 0, 4);
  CHECK(check(n_blob + 4) == EM_ERR_INVALID_PROGRAM);
  CHECK(strstr(em_last_error(), "constants end") != NULL);
  CHECK(check(n_blob) == EM_ERR_INVALID_PROGRAM);
  CHECK(strstr(em_last_error(), "describes") != NULL);
  memcpy(blob + 28, &wbytes, 4);
  CHECK(check(n_blob) == EM_OK);
  blob[n_meta - 80 + 20] = 2; /* the upsample's mode (ip[0] of the last operator) */
  CHECK(check(n_blob) == EM_ERR_INVALID_PROGRAM);
  CHECK(strstr(em_last_error(), "upsample mode") != NULL);
  blob[n_meta - 80 + 20] = 1;
  memcpy(blob + n_meta - 80 + 64, &(float){NAN}, 4); /* its first scale */
  CHECK(check(n_blob) == EM_ERR_INVALID_PROGRAM);
  CHECK(strstr(em_last_error(), "upsample scale") != NULL);
  memcpy(blob + n_meta - 80 + 64, &(float){0.25f}, 4);
  CHECK(check(n_blob) == EM_OK);
  /* every field is checked (unused parameter slots must be 0): the flips accepted are those
     of values with several valid settings (the clamp bounds, the binary operator); none may
     crash (ASan / UBSan) */
  CHECK(refused * 100 >= mutants * 95);
  printf("test_vulkan_blob: %s storage: %d bit flips, %d refused, %zu truncations refused\n",
         mixed ? "mixed" : "f32", mutants, refused, n_blob);
  return 0;
}

int main(void) {
  em_log_set_level('F');
  build(0);
  if (check(n_blob) == EM_ERR_NOT_SUPPORTED) {
    printf("test_vulkan_blob: built without Vulkan (EMBER_VULKAN): nothing to check\n");
    return 0;
  }
  return sweep(0) || sweep(1);
}
