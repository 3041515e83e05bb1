/*
 * tokenizer_compact.c — the compact "EMTK" tokenizer file (format in ember_ext/tokenizer.h) and
 * tiktoken rank files ("base64(token) rank" per line; ranks are token ids).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ember/platform.h"
#include "tokenizer_model.h"

typedef struct rd {
  const uint8_t *p;
  size_t n, at;
  int bad;
} rd;

static uint32_t rd_u32(rd *r) {
  if (r->bad || r->n - r->at < 4) {
    r->bad = 1;
    return 0;
  }
  const uint8_t *p = r->p + r->at;
  r->at += 4;
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static const uint8_t *rd_bytes(rd *r, size_t n) {
  if (r->bad || r->n - r->at < n) {
    r->bad = 1;
    return NULL;
  }
  const uint8_t *p = r->p + r->at;
  r->at += n;
  return p;
}

em_status em_tokenizer_load_compact(const char *path, em_tokenizer **out) {
  if (!path || !out) return EM_ERR_INVALID_ARGUMENT;
  char *buf;
  size_t n;
  em_status st = tok_read_file(path, &buf, &n);
  if (st != EM_OK) return st;
  rd r = {(const uint8_t *)buf, n, 0, 0};
  em_tokenizer *t = NULL;
  const uint8_t *magic = rd_bytes(&r, 4);
  uint32_t version = rd_u32(&r), model = rd_u32(&r), pretok = rd_u32(&r), flags = rd_u32(&r);
  int32_t bos = (int32_t)rd_u32(&r);
  uint32_t n_eos = rd_u32(&r);
  st = EM_ERR_INVALID_ARGUMENT;
  if (r.bad || memcmp(magic, "EMTK", 4) != 0 || version != 1 || model < 1 || model > 3 ||
      pretok > EM_PRETOK_DIGITS_GPT2 || n_eos > 1024) {
    EM_LOG_ERROR("tokenizer: %s: bad EMTK header (version %u, model %u, pretok %u)", path,
                 (unsigned)version, (unsigned)model, (unsigned)pretok);
    goto fail;
  }
  int32_t eos[1024];
  for (uint32_t i = 0; i < n_eos; i++) eos[i] = (int32_t)rd_u32(&r);
  uint32_t n_vocab = rd_u32(&r);
  if (r.bad || n_vocab == 0 || n_vocab > n / 9) {
    EM_LOG_ERROR("tokenizer: %s: bad vocabulary size %u", path, (unsigned)n_vocab);
    goto fail;
  }
  st = EM_ERR_MEMORY_ALLOCATION_FAILED;
  t = tok_alloc((em_tokenizer_model)model, n_vocab);
  if (!t) goto fail;
  t->pretok = (em_pretok)pretok;
  t->flags = flags & 7u;
  t->bos_id = bos;
  t->eos_ids = malloc((n_eos ? n_eos : 1) * sizeof *t->eos_ids);
  if (!t->eos_ids) goto fail;
  memcpy(t->eos_ids, eos, n_eos * sizeof *eos);
  t->n_eos = n_eos;
  st = EM_ERR_INVALID_ARGUMENT;
  for (uint32_t i = 0; i < n_vocab; i++) {
    uint32_t k = rd_u32(&r);
    const uint8_t *b = rd_bytes(&r, k);
    uint32_t sc = rd_u32(&r);
    const uint8_t *ty = rd_bytes(&r, 1);
    if (r.bad) {
      EM_LOG_ERROR("tokenizer: %s: truncated at token %u", path, (unsigned)i);
      goto fail;
    }
    float score;
    memcpy(&score, &sc, 4);
    if (!tok_set(t, i, (const char *)b, k, score, *ty)) {
      st = EM_ERR_MEMORY_ALLOCATION_FAILED;
      goto fail;
    }
  }
  uint32_t n_merges = rd_u32(&r);
  if (r.bad || n_merges > (n - r.at) / 8) {
    EM_LOG_ERROR("tokenizer: %s: bad merge count %u", path, (unsigned)n_merges);
    goto fail;
  }
  for (uint32_t i = 0; i < n_merges; i++) {
    int32_t a = (int32_t)rd_u32(&r), b = (int32_t)rd_u32(&r);
    if (!tok_add_merge(t, a, b)) {
      EM_LOG_ERROR("tokenizer: %s: merge %u has ids (%d, %d) out of range", path, (unsigned)i,
                   (int)a, (int)b);
      goto fail;
    }
  }
  st = tok_finish(t);
  if (st != EM_OK) goto fail;
  free(buf);
  *out = t;
  return EM_OK;
fail:
  em_tokenizer_destroy(t);
  free(buf);
  return st;
}

static void put_u32(FILE *f, uint32_t v) {
  uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
  fwrite(b, 1, 4, f);
}

em_status em_tokenizer_save_compact(const em_tokenizer *t, const char *path) {
  if (!t || !path) return EM_ERR_INVALID_ARGUMENT;
  FILE *f = fopen(path, "wb");
  if (!f) {
    EM_LOG_ERROR("tokenizer: cannot write %s", path);
    return EM_ERR_ACCESS_FAILED;
  }
  fwrite("EMTK", 1, 4, f);
  put_u32(f, 1);
  put_u32(f, (uint32_t)t->model);
  put_u32(f, (uint32_t)t->pretok);
  put_u32(f, t->flags);
  put_u32(f, (uint32_t)t->bos_id);
  put_u32(f, (uint32_t)t->n_eos);
  for (size_t i = 0; i < t->n_eos; i++) put_u32(f, (uint32_t)t->eos_ids[i]);
  put_u32(f, (uint32_t)t->n_vocab);
  for (size_t i = 0; i < t->n_vocab; i++) {
    put_u32(f, t->len[i]);
    fwrite(t->blob + t->off[i], 1, t->len[i], f);
    uint32_t sc;
    memcpy(&sc, &t->scores[i], 4);
    put_u32(f, sc);
    fputc(t->types[i], f);
  }
  put_u32(f, (uint32_t)t->n_merges);
  for (size_t i = 0; i < 2 * t->n_merges; i++) put_u32(f, (uint32_t)t->merges[i]);
  int err = ferror(f);
  if (fclose(f) != 0 || err) {
    EM_LOG_ERROR("tokenizer: write error on %s", path);
    return EM_ERR_ACCESS_FAILED;
  }
  return EM_OK;
}

/* ---------------------------------------------------------------- tiktoken */

static int b64(int c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

/* Decodes base64 s[0..n) into out; returns the length or (size_t)-1. */
static size_t b64_decode(const char *s, size_t n, uint8_t *out) {
  size_t o = 0;
  uint32_t acc = 0;
  int bits = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] == '=') break;
    int v = b64(s[i]);
    if (v < 0) return (size_t)-1;
    acc = (acc << 6) | (uint32_t)v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out[o++] = (uint8_t)(acc >> bits);
    }
  }
  return o;
}

em_status em_tokenizer_load_tiktoken(const char *path, em_pretok pretok,
                                     const char *const *specials, size_t n_specials,
                                     em_tokenizer **out) {
  if (!path || !out || (!specials && n_specials)) return EM_ERR_INVALID_ARGUMENT;
  char *buf;
  size_t n;
  em_status st = tok_read_file(path, &buf, &n);
  if (st != EM_OK) return st;
  size_t n_lines = 0;
  long max_rank = -1;
  for (size_t i = 0; i < n;) { /* pass 1: count and find the highest rank */
    size_t e = i;
    while (e < n && buf[e] != '\n') e++;
    char *sp = memchr(buf + i, ' ', e - i);
    if (sp) {
      long r = strtol(sp + 1, NULL, 10);
      if (r > max_rank) max_rank = r;
      n_lines++;
    }
    i = e + 1;
  }
  em_tokenizer *t = NULL;
  st = EM_ERR_INVALID_ARGUMENT;
  if (n_lines == 0 || max_rank < 0 || max_rank > 16 * 1024 * 1024) {
    EM_LOG_ERROR("tokenizer: %s is not a tiktoken rank file", path);
    goto fail;
  }
  st = EM_ERR_MEMORY_ALLOCATION_FAILED;
  t = tok_alloc(EM_TOKENIZER_TIKTOKEN, (size_t)max_rank + 1 + n_specials);
  if (!t) goto fail;
  t->pretok = pretok;
  st = EM_ERR_INVALID_ARGUMENT;
  uint8_t tmp[1024];
  size_t line = 0;
  for (size_t i = 0; i < n; line++) {
    size_t e = i;
    while (e < n && buf[e] != '\n') e++;
    char *sp = memchr(buf + i, ' ', e - i);
    if (sp) {
      size_t k = (size_t)(sp - (buf + i));
      long r = strtol(sp + 1, NULL, 10);
      size_t len = k <= 1360 ? b64_decode(buf + i, k, tmp) : (size_t)-1;
      if (len == (size_t)-1 || r < 0 || t->len[r] ||
          !tok_set(t, (size_t)r, (char *)tmp, len, 0, 1)) {
        EM_LOG_ERROR("tokenizer: %s:%zu: bad token or duplicate rank %ld", path, line + 1, r);
        goto fail;
      }
    }
    i = e + 1;
  }
  for (size_t k = 0; k < n_specials; k++)
    if (!tok_set(t, (size_t)max_rank + 1 + k, specials[k], strlen(specials[k]), 0,
                 EM_TOKEN_CONTROL))
      goto fail;
  if (n_specials) {
    t->eos_ids = malloc(sizeof *t->eos_ids);
    if (!t->eos_ids) goto fail;
    t->eos_ids[0] = (int32_t)(max_rank + 1);
    t->n_eos = 1;
  }
  st = tok_finish(t);
  if (st != EM_OK) goto fail;
  free(buf);
  *out = t;
  return EM_OK;
fail:
  em_tokenizer_destroy(t);
  free(buf);
  return st;
}
