/*
 * tokenizer_model.c — building the tokenizer's representation (tokenizer_model.h): allocation,
 * token bytes, merges, the vocabulary and merge hashes, decoded pieces and special-token lists
 * (tok_finish), destruction, GPT-2's byte <-> unicode mapping, and reading a whole file.
 *
 * The layer every loader (tokenizer_{json,gguf,compact}.c) builds on; tokenizer.c (encode,
 * decode, load by file kind) sits above the loaders and uses the lookups here. This file calls
 * nothing in tokenizer.c or the loaders, only tok_utf8_next (tokenizer_pretok.c).
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ember/platform.h"
#include "tokenizer_model.h"

/* ---------------------------------------------------------------- construction */

em_tokenizer *tok_alloc(em_tokenizer_model model, size_t n_vocab) {
  if (n_vocab == 0 || n_vocab > (size_t)INT32_MAX / 2) return NULL;
  em_tokenizer *t = calloc(1, sizeof *t);
  if (!t) return NULL;
  t->model = model;
  t->bos_id = -1;
  t->unk_id = -1;
  t->n_vocab = n_vocab;
  t->off = calloc(n_vocab, sizeof *t->off);
  t->len = calloc(n_vocab, sizeof *t->len);
  t->scores = calloc(n_vocab, sizeof *t->scores);
  t->types = calloc(n_vocab, 1);
  t->blob_cap = n_vocab * 8 + 64;
  t->blob = malloc(t->blob_cap);
  if (!t->off || !t->len || !t->scores || !t->types || !t->blob) {
    em_tokenizer_destroy(t);
    return NULL;
  }
  for (size_t i = 0; i < n_vocab; i++) t->types[i] = EM_TOKEN_NORMAL;
  return t;
}

int tok_set(em_tokenizer *t, size_t id, const char *bytes, size_t n, float score, uint8_t type) {
  if (id >= t->n_vocab || n > UINT32_MAX / 2) return 0;
  if (t->blob_n + n > t->blob_cap) {
    size_t cap = t->blob_cap * 2 + n;
    char *b = realloc(t->blob, cap);
    if (!b) return 0;
    t->blob = b;
    t->blob_cap = cap;
  }
  if (t->blob_n + n > UINT32_MAX) return 0;
  memcpy(t->blob + t->blob_n, bytes, n);
  t->off[id] = (uint32_t)t->blob_n;
  t->len[id] = (uint32_t)n;
  t->blob_n += n;
  t->scores[id] = score;
  t->types[id] = type;
  return 1;
}

static uint64_t hash_bytes(const char *s, size_t n) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
  return h;
}

static uint64_t hash_pair(int32_t a, int32_t b) {
  uint64_t x = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return x;
}

int32_t tok_lookup(const em_tokenizer *t, const char *s, size_t n) {
  if (!t->vhash) return -1;
  size_t mask = t->vhash_cap - 1;
  for (size_t h = hash_bytes(s, n) & mask;; h = (h + 1) & mask) {
    int32_t id = t->vhash[h];
    if (id < 0) return -1;
    if (t->len[id] == n && memcmp(t->blob + t->off[id], s, n) == 0) return id;
  }
}

const tok_merge *tok_merge_find(const em_tokenizer *t, int32_t a, int32_t b) {
  if (!t->mhash) return NULL;
  size_t mask = t->mhash_cap - 1;
  for (size_t h = hash_pair(a, b) & mask;; h = (h + 1) & mask) {
    const tok_merge *e = &t->mhash[h];
    if (e->a < 0) return NULL;
    if (e->a == a && e->b == b) return e;
  }
}

int tok_add_merge(em_tokenizer *t, int32_t a, int32_t b) {
  if (a < 0 || b < 0 || (size_t)a >= t->n_vocab || (size_t)b >= t->n_vocab) return 0;
  if ((t->n_merges & (t->n_merges + 1)) == 0 || t->n_merges == 0) {
    size_t cap = (t->n_merges + 1) * 2;
    int32_t *m = realloc(t->merges, cap * 2 * sizeof *m);
    if (!m) return 0;
    t->merges = m;
  }
  t->merges[2 * t->n_merges] = a;
  t->merges[2 * t->n_merges + 1] = b;
  t->n_merges++;
  return 1;
}

static size_t pow2_at_least(size_t n) {
  size_t c = 16;
  while (c < n) c *= 2;
  return c;
}

em_status tok_index_vocab(em_tokenizer *t) {
  if (t->vhash) return EM_OK;
  t->vhash_cap = pow2_at_least(t->n_vocab * 2);
  t->vhash = malloc(t->vhash_cap * sizeof *t->vhash);
  if (!t->vhash) return EM_ERR_MEMORY_ALLOCATION_FAILED;
  memset(t->vhash, 0xFF, t->vhash_cap * sizeof *t->vhash);
  size_t mask = t->vhash_cap - 1;
  for (size_t id = 0; id < t->n_vocab; id++) {
    const char *s = t->blob + t->off[id];
    size_t h = hash_bytes(s, t->len[id]) & mask;
    int dup = 0;
    for (; t->vhash[h] >= 0; h = (h + 1) & mask) {
      int32_t o = t->vhash[h];
      if (t->len[o] == t->len[id] && memcmp(t->blob + t->off[o], s, t->len[id]) == 0) dup = 1;
      if (dup) break;
    }
    if (!dup) t->vhash[h] = (int32_t)id; /* the first id of duplicate strings wins */
  }
  return EM_OK;
}

static em_status build_hashes(em_tokenizer *t) {
  em_status st = tok_index_vocab(t);
  if (st != EM_OK) return st;
  size_t mask;
  t->mhash_cap = pow2_at_least(t->n_merges * 2);
  t->mhash = malloc(t->mhash_cap * sizeof *t->mhash);
  if (!t->mhash) return EM_ERR_MEMORY_ALLOCATION_FAILED;
  for (size_t i = 0; i < t->mhash_cap; i++) t->mhash[i].a = -1;
  mask = t->mhash_cap - 1;
  char *tmp = NULL;
  size_t tmp_cap = 0;
  for (size_t r = 0; r < t->n_merges; r++) {
    int32_t a = t->merges[2 * r], b = t->merges[2 * r + 1];
    size_t n = (size_t)t->len[a] + t->len[b];
    if (n > tmp_cap) {
      tmp_cap = n * 2;
      char *p = realloc(tmp, tmp_cap);
      if (!p) {
        free(tmp);
        return EM_ERR_MEMORY_ALLOCATION_FAILED;
      }
      tmp = p;
    }
    memcpy(tmp, t->blob + t->off[a], t->len[a]);
    memcpy(tmp + t->len[a], t->blob + t->off[b], t->len[b]);
    int32_t id = tok_lookup(t, tmp, n);
    if (id < 0 || tok_merge_find(t, a, b)) continue; /* a merge into nothing, or a duplicate */
    size_t h = hash_pair(a, b) & mask;
    while (t->mhash[h].a >= 0) h = (h + 1) & mask;
    t->mhash[h] = (tok_merge){a, b, (int32_t)r, id};
  }
  free(tmp);
  return EM_OK;
}

/* Decoded bytes of each token: SentencePiece maps U+2581 to ' ', <0xXX> to the byte and control
 * tokens to nothing; other models decode to the raw bytes. */
static em_status build_decoded(em_tokenizer *t) {
  t->dec_off = malloc(t->n_vocab * sizeof *t->dec_off);
  t->dec_len = malloc(t->n_vocab * sizeof *t->dec_len);
  t->dec_blob = malloc(t->blob_n + 1);
  if (!t->dec_off || !t->dec_len || !t->dec_blob) return EM_ERR_MEMORY_ALLOCATION_FAILED;
  size_t o = 0;
  for (size_t id = 0; id < t->n_vocab; id++) {
    const char *s = t->blob + t->off[id];
    size_t n = t->len[id];
    t->dec_off[id] = (uint32_t)o;
    if (t->model == EM_TOKENIZER_SPM_BPE) {
      unsigned v;
      if (t->types[id] == EM_TOKEN_BYTE && n == 6 && sscanf(s, "<0x%2X>", &v) == 1) {
        t->dec_blob[o++] = (char)v;
      } else if (t->types[id] != EM_TOKEN_CONTROL) {
        for (size_t i = 0; i < n;) {
          if (i + 3 <= n && memcmp(s + i, "\xE2\x96\x81", 3) == 0) {
            t->dec_blob[o++] = ' ';
            i += 3;
          } else {
            t->dec_blob[o++] = s[i++];
          }
        }
      }
    } else {
      memcpy(t->dec_blob + o, s, n);
      o += n;
    }
    t->dec_len[id] = (uint32_t)(o - t->dec_off[id]);
  }
  return EM_OK;
}

static int cmp_special_len(const void *pa, const void *pb, void *ctx);
static const em_tokenizer *g_sort_tok; /* qsort has no context argument in C11 */

static int cmp_special(const void *pa, const void *pb) {
  return cmp_special_len(pa, pb, (void *)g_sort_tok);
}

static int cmp_special_len(const void *pa, const void *pb, void *ctx) {
  const em_tokenizer *t = ctx;
  int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
  if (t->len[a] != t->len[b]) return t->len[a] > t->len[b] ? -1 : 1;
  return a < b ? -1 : (a > b);
}

em_status tok_finish(em_tokenizer *t) {
  em_status st = build_hashes(t);
  if (st == EM_OK) st = build_decoded(t);
  if (st != EM_OK) return st;
  for (int b = 0; b < 256; b++) {
    char c = (char)b;
    t->byte_id[b] = -1;
    if (t->model == EM_TOKENIZER_SPM_BPE) {
      char name[8];
      snprintf(name, sizeof name, "<0x%02X>", b);
      t->byte_id[b] = tok_lookup(t, name, 6);
    } else {
      t->byte_id[b] = tok_lookup(t, &c, 1);
    }
  }
  size_t n = 0;
  for (size_t id = 0; id < t->n_vocab; id++)
    if ((t->types[id] == EM_TOKEN_CONTROL || t->types[id] == EM_TOKEN_USER_DEFINED) && t->len[id])
      n++;
  t->specials = malloc((n ? n : 1) * sizeof *t->specials);
  if (!t->specials) return EM_ERR_MEMORY_ALLOCATION_FAILED;
  for (size_t id = 0; id < t->n_vocab; id++)
    if ((t->types[id] == EM_TOKEN_CONTROL || t->types[id] == EM_TOKEN_USER_DEFINED) && t->len[id])
      t->specials[t->n_specials++] = (int32_t)id;
  g_sort_tok = t;
  qsort(t->specials, t->n_specials, sizeof *t->specials, cmp_special);
  for (size_t id = 0; id < t->n_vocab && t->unk_id < 0; id++)
    if (t->types[id] == EM_TOKEN_UNKNOWN) t->unk_id = (int32_t)id;
  if (t->bos_id >= (int32_t)t->n_vocab) t->bos_id = -1;
  return EM_OK;
}

void em_tokenizer_destroy(em_tokenizer *t) {
  if (!t) return;
  free(t->eos_ids);
  free(t->off);
  free(t->len);
  free(t->blob);
  free(t->scores);
  free(t->types);
  free(t->dec_off);
  free(t->dec_len);
  free(t->dec_blob);
  free(t->vhash);
  free(t->mhash);
  free(t->merges);
  free(t->specials);
  free(t);
}

/* ---------------------------------------------------------------- GPT-2 byte mapping */

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes map to themselves, the other 68 bytes to
 * U+0100.. in byte order. */
static int is_printable_byte(unsigned b) {
  return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
}

uint32_t tok_byte_to_cp(uint8_t b) {
  if (is_printable_byte(b)) return b;
  uint32_t k = 0;
  for (unsigned x = 0; x < b; x++) k += !is_printable_byte(x);
  return 256 + k;
}

int tok_cp_to_byte(uint32_t cp) {
  if (cp < 256) return is_printable_byte(cp) ? (int)cp : -1;
  if (cp >= 256 + 68) return -1;
  uint32_t k = 0;
  for (unsigned x = 0; x < 256; x++)
    if (!is_printable_byte(x) && k++ == cp - 256) return (int)x;
  return -1;
}

size_t tok_unmap_bytelevel(const char *s, size_t n, char *out) {
  static int16_t table[324];
  static atomic_int state; /* 0 empty, 1 being filled by one thread, 2 ready */
  if (atomic_load_explicit(&state, memory_order_acquire) != 2) {
    int empty = 0;
    if (atomic_compare_exchange_strong(&state, &empty, 1)) {
      for (uint32_t cp = 0; cp < 324; cp++) table[cp] = (int16_t)tok_cp_to_byte(cp);
      atomic_store_explicit(&state, 2, memory_order_release);
    } else {
      while (atomic_load_explicit(&state, memory_order_acquire) != 2) {
      }
    }
  }
  size_t o = 0;
  for (size_t i = 0; i < n;) {
    uint32_t cp;
    size_t k = tok_utf8_next((const uint8_t *)s + i, n - i, &cp);
    if (cp >= 324 || table[cp] < 0) return (size_t)-1;
    out[o++] = (char)table[cp];
    i += k;
  }
  return o;
}

/* ---------------------------------------------------------------- files */

em_status tok_read_file(const char *path, char **buf_out, size_t *n_out) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    EM_LOG_ERROR("tokenizer: cannot open %s", path);
    return EM_ERR_ACCESS_FAILED;
  }
  char *buf = NULL;
  size_t n = 0, cap = 0;
  for (;;) {
    if (n + 65536 + 1 > cap) {
      cap = (cap + 65536) * 2;
      char *b = realloc(buf, cap);
      if (!b) {
        free(buf);
        fclose(f);
        return EM_ERR_MEMORY_ALLOCATION_FAILED;
      }
      buf = b;
    }
    size_t k = fread(buf + n, 1, 65536, f);
    n += k;
    if (k < 65536) break;
  }
  int err = ferror(f);
  fclose(f);
  if (err) {
    free(buf);
    EM_LOG_ERROR("tokenizer: read error on %s", path);
    return EM_ERR_ACCESS_FAILED;
  }
  buf[n] = 0;
  *buf_out = buf;
  *n_out = n;
  return EM_OK;
}
