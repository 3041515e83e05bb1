/*
 * npy.c — .npy reader/writer for the ember CLI (tools may use stdio and heap).
 */
#define _POSIX_C_SOURCE 200809L
#include "npy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
  const char *descr;
  int dtype;
} k_descr[] = {
    {"<f4", EM_DTYPE_F32},  {"<f8", EM_DTYPE_F64}, {"<f2", EM_DTYPE_F16}, {"<i8", EM_DTYPE_I64},
    {"<i4", EM_DTYPE_I32},  {"<i2", EM_DTYPE_I16}, {"|i1", EM_DTYPE_I8},  {"|u1", EM_DTYPE_U8},
    {"|b1", EM_DTYPE_BOOL}, {"<u2", EM_DTYPE_U16}, {"<u4", EM_DTYPE_U32}, {"<u8", EM_DTYPE_U64},
};

int npy_read(const char *path, npy_array *out, char *err, size_t err_len) {
  memset(out, 0, sizeof *out);
  FILE *f = fopen(path, "rb");
  if (!f) return snprintf(err, err_len, "cannot open %s", path), 1;
  unsigned char pre[12];
  int rc = 1;
  char *hdr = NULL;
  if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY", 6) != 0) {
    snprintf(err, err_len, "%s is not a .npy file", path);
    goto done;
  }
  size_t hlen = (size_t)pre[8] | ((size_t)pre[9] << 8);
  if (pre[6] >= 2) {
    if (fread(pre + 10, 1, 2, f) != 2) goto done;
    hlen |= ((size_t)pre[10] << 16) | ((size_t)pre[11] << 24);
  }
  if (hlen > 1 << 20) goto done;
  hdr = calloc(1, hlen + 1);
  if (!hdr || fread(hdr, 1, hlen, f) != hlen) goto done;
  char *d = strstr(hdr, "'descr':");
  char *fo = strstr(hdr, "'fortran_order':");
  char *sh = strstr(hdr, "'shape':");
  if (!d || !fo || !sh) {
    snprintf(err, err_len, "%s: malformed header", path);
    goto done;
  }
  if (strncmp(fo + 16, " True", 5) == 0) {
    snprintf(err, err_len, "%s: Fortran order is not supported", path);
    goto done;
  }
  out->dtype = -1;
  for (size_t i = 0; i < sizeof k_descr / sizeof k_descr[0]; i++)
    if (strstr(d, k_descr[i].descr) == d + 10 || strstr(d, k_descr[i].descr) == d + 9)
      out->dtype = k_descr[i].dtype;
  if (out->dtype < 0) {
    snprintf(err, err_len, "%s: unsupported dtype", path);
    goto done;
  }
  char *p = strchr(sh, '(');
  if (!p) goto done;
  p++;
  int64_t numel = 1;
  while (*p && *p != ')') {
    while (*p == ' ' || *p == ',') p++;
    if (*p == ')') break;
    char *e;
    long long v = strtoll(p, &e, 10);
    if (e == p || v < 0 || out->dim >= EM_MAX_DIM) {
      snprintf(err, err_len, "%s: bad shape", path);
      goto done;
    }
    out->sizes[out->dim++] = v;
    numel *= v;
    p = e;
  }
  out->nbytes = (size_t)numel * em_dtype_size(out->dtype);
  if (posix_memalign(&out->data, 64, out->nbytes ? out->nbytes : 64) != 0) goto done;
  if (out->nbytes && fread(out->data, 1, out->nbytes, f) != out->nbytes) {
    snprintf(err, err_len, "%s: truncated data", path);
    goto done;
  }
  rc = 0;
done:
  if (rc && err[0] == '\0') snprintf(err, err_len, "%s: cannot read", path);
  free(hdr);
  fclose(f);
  return rc;
}

int npy_write(const char *path, const em_tensor *t) {
  const char *descr = NULL;
  for (size_t i = 0; i < sizeof k_descr / sizeof k_descr[0]; i++)
    if (k_descr[i].dtype == t->dtype) descr = k_descr[i].descr;
  if (!descr) return 1;
  char shape[256] = "";
  size_t n = 0;
  for (int32_t i = 0; i < t->dim; i++)
    n += (size_t)snprintf(shape + n, sizeof shape - n, "%lld,%s", (long long)t->sizes[i],
                          i + 1 < t->dim ? " " : "");
  if (t->dim > 1 && n > 0) shape[n - 1] = '\0';
  char hdr[512];
  int hl = snprintf(hdr, sizeof hdr, "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }",
                    descr, shape);
  int total = 10 + hl + 1;
  int pad = (64 - total % 64) % 64;
  FILE *f = fopen(path, "wb");
  if (!f) return 1;
  unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 0, 0};
  int hlen = hl + pad + 1;
  pre[8] = (unsigned char)(hlen & 0xff);
  pre[9] = (unsigned char)(hlen >> 8);
  fwrite(pre, 1, 10, f);
  fwrite(hdr, 1, (size_t)hl, f);
  for (int i = 0; i < pad; i++) fputc(' ', f);
  fputc('\n', f);
  size_t nb = em_tensor_nbytes(t);
  int rc = nb && fwrite(t->data, 1, nb, f) != nb;
  fclose(f);
  return rc;
}

void npy_free(npy_array *a) {
  free(a->data);
  a->data = NULL;
}
