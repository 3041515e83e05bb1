/*
 * test_vulkan_blob.c — EmberVulkanBackend's blob validation (em_vulkan_blob_check, no device
 * needed) on a hand-built blob (conv2d + clamp, broadcast add of a constant, max pool, bilinear
 * upsampling), once with f32 and once with f16 storage: the
 * blob is accepted; every single-bit flip of its header, tensor table, argument lists and
 * operators and every truncation returns a status without reading out of bounds (this test
 * also runs under ASan/UBSan in `make test-asan`); named fields give their statuses (the
 * storage type among them: an unknown one, and one whose weights' size differs).
 * Passes trivially, saying so, in a build without Vulkan (EMBER_VULKAN off).
 */
#include <math.h>
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

static uint8_t blob[4096];
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

static void tensor(size_t *at, uint32_t off, uint32_t weight, uint32_t nd, uint32_t a, uint32_t b,
                   uint32_t c, uint32_t d) {
  uint32_t s[4] = {a, b, c, d};
  w32(at, off), w32(at, weight), w32(at, nd);
  for (int k = 0; k < 4; k++) w32(at, (uint32_t)k < nd ? s[k] : 0);
  w32(at, 0);
}

static void op(size_t *at, uint32_t code, uint32_t i0, uint32_t i1, uint32_t i2, uint32_t out,
               const int32_t ip[11], float f0, float f1) {
  w32(at, code), w32(at, i0), w32(at, i1), w32(at, i2), w32(at, out);
  for (int k = 0; k < 11; k++) w32(at, (uint32_t)ip[k]);
  wf(at, f0), wf(at, f1), wf(at, 0), wf(at, 0);
}

/* x[1,2,5,5] -conv 3x3 (+bias, clamp)-> y[1,3,3,3] -+ c[3,1,1]-> z -maxpool 2/1-> p[1,3,2,2]
   -bilinear, align_corners-> u[1,3,5,3]; storage 0 (f32) or 1 (f16: the weights are halves) */
static void build(uint32_t storage) {
  const uint32_t N = 0xFFFFFFFFu;
  size_t at = 0;
  w32(&at, 0x4B564D45u), w32(&at, 2), w32(&at, 8), w32(&at, 4), w32(&at, 1), w32(&at, 1);
  w32(&at, 221), w32(&at, 60), w32(&at, storage);
  tensor(&at, 0, N, 4, 1, 2, 5, 5);    /* 0 x */
  tensor(&at, 50, 0, 4, 3, 2, 3, 3);   /* 1 w */
  tensor(&at, 104, 54, 1, 3, 0, 0, 0); /* 2 bias */
  tensor(&at, 107, N, 4, 1, 3, 3, 3);  /* 3 y */
  tensor(&at, 134, 57, 3, 3, 1, 1, 0); /* 4 c */
  tensor(&at, 137, N, 4, 1, 3, 3, 3);  /* 5 z */
  tensor(&at, 164, N, 4, 1, 3, 2, 2);  /* 6 p */
  tensor(&at, 176, N, 4, 1, 3, 5, 3);  /* 7 u */
  w32(&at, 0), w32(&at, 7);
  const int32_t conv[11] = {1, 1, 0, 0, 1, 1, 1, 1}, add[11] = {0};
  const int32_t pool[11] = {0, 2, 2, 1, 1, 0, 0, 1, 1, 0, 0}, up[11] = {1, 1};
  op(&at, 4, 0, 1, 2, 3, conv, 0.0f, INFINITY);
  op(&at, 2, 3, 4, N, 5, add, 0, 0);
  op(&at, 5, 5, N, N, 6, pool, 0, 0);
  op(&at, 15, 6, N, N, 7, up, 0.25f, 0.5f);
  n_meta = at;
  for (int k = 0; k < 60; k++) /* (validation reads no weight value) */
    storage ? w16(&at, (uint16_t)(0x3C00 + k)) /* 1 + k / 1024 */ : wf(&at, (float)k * 0.01f);
  n_blob = at;
}

static em_status check(size_t n) { return em_vulkan_blob_check(blob, n, scratch, sizeof scratch); }

static int sweep(uint32_t storage) {
  build(storage);
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
  blob[0] ^= 1, blob[4] = 1; /* version 1 (no storage field) */
  CHECK(check(n_blob) == EM_ERR_DELEGATE_INVALID_COMPATIBILITY);
  blob[4] = 2;
  CHECK(check(n_blob - 4) == EM_ERR_INVALID_PROGRAM);
  blob[32] = 2; /* an unknown storage type */
  CHECK(check(n_blob) == EM_ERR_INVALID_PROGRAM);
  CHECK(strstr(em_last_error(), "storage type 2") != NULL);
  blob[32] = (uint8_t)(storage ^ 1u); /* the other type: the weights' size no longer matches */
  CHECK(check(n_blob) == EM_ERR_INVALID_PROGRAM);
  CHECK(strstr(em_last_error(), "describes") != NULL);
  blob[32] = (uint8_t)storage;
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
         storage ? "f16" : "f32", mutants, refused, n_blob);
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
