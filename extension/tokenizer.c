/*
 * tokenizer.c — BPE encode and decode, the queries, and em_tokenizer_load by file kind: the top
 * of the tokenizer's layers (tokenizer_model.h). The representation is built in
 * tokenizer_model.c by the loaders in tokenizer_{json,gguf,compact}.c (tiktoken rank files in
 * tokenizer_compact.c), which never call back into this file; the split regexes are in
 * tokenizer_pretok.c.
 *
 * Encoding: the text is first cut at special tokens (with EM_TOK_PARSE_SPECIAL; leftmost, then
 * longest, as HF's added-token matcher), each remaining stretch is pre-tokenized into pieces,
 * and each piece is merged by BPE:
 *  - byte-level BPE (HF): symbols start as single bytes; the adjacent pair with the lowest merge
 *    rank merges first (leftmost on ties); with "ignore_merges" a piece that is a whole token is
 *    emitted directly;
 *  - tiktoken: the same over raw bytes, where a pair's rank is the rank of its concatenation,
 *    and a piece that is a whole token is emitted directly (tiktoken's fast path);
 *  - SentencePiece BPE: spaces become U+2581 (plus a leading one), symbols start as UTF-8
 *    characters, the pair whose concatenation has the highest score merges first (leftmost on
 *    ties), and symbols left outside the vocabulary become <0xXX> byte tokens.
 * The merge loop uses a heap with lazy invalidation: O(n log n) per piece.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ember/platform.h"
#include "tokenizer_model.h"

/* ---------------------------------------------------------------- BPE */

typedef struct sym {
  size_t start, n; /* bytes of the piece */
  int32_t id;      /* -1: not (yet) a token */
  int32_t prev, next;
} sym;

typedef struct cand {
  double pri; /* lower merges first */
  int32_t left, right;
  size_t n;       /* combined length when queued (stale if it changed) */
  int32_t merged; /* token id after the merge */
} cand;

typedef struct bpe_work {
  sym *syms;
  cand *heap;
  size_t cap_syms, cap_heap, n_heap;
} bpe_work;

static int cand_less(const cand *a, const cand *b, const sym *s) {
  if (a->pri != b->pri) return a->pri < b->pri;
  return s[a->left].start < s[b->left].start;
}

static void heap_push(bpe_work *w, cand c) {
  size_t i = w->n_heap++;
  w->heap[i] = c;
  while (i > 0) {
    size_t p = (i - 1) / 2;
    if (!cand_less(&w->heap[i], &w->heap[p], w->syms)) break;
    cand tmp = w->heap[i];
    w->heap[i] = w->heap[p];
    w->heap[p] = tmp;
    i = p;
  }
}

static cand heap_pop(bpe_work *w) {
  cand top = w->heap[0];
  w->heap[0] = w->heap[--w->n_heap];
  size_t i = 0;
  for (;;) {
    size_t l = 2 * i + 1, r = l + 1, m = i;
    if (l < w->n_heap && cand_less(&w->heap[l], &w->heap[m], w->syms)) m = l;
    if (r < w->n_heap && cand_less(&w->heap[r], &w->heap[m], w->syms)) m = r;
    if (m == i) break;
    cand tmp = w->heap[i];
    w->heap[i] = w->heap[m];
    w->heap[m] = tmp;
    i = m;
  }
  return top;
}

/* Queues the merge of symbols l and r = l.next if the model allows it. */
static void try_pair(const em_tokenizer *t, bpe_work *w, const uint8_t *s, int32_t l) {
  if (l < 0) return;
  int32_t r = w->syms[l].next;
  if (r < 0) return;
  const sym *a = &w->syms[l], *b = &w->syms[r];
  cand c = {0, l, r, a->n + b->n, -1};
  if (t->model == EM_TOKENIZER_BPE_BYTELEVEL) {
    if (a->id < 0 || b->id < 0) return;
    const tok_merge *m = tok_merge_find(t, a->id, b->id);
    if (!m) return;
    c.pri = m->rank;
    c.merged = m->id;
  } else {
    int32_t id = tok_lookup(t, (const char *)s + a->start, c.n);
    if (id < 0) return;
    if (t->model == EM_TOKENIZER_SPM_BPE) {
      if (t->types[id] != EM_TOKEN_NORMAL && t->types[id] != EM_TOKEN_USER_DEFINED) return;
      c.pri = -(double)t->scores[id];
    } else {
      c.pri = id; /* tiktoken: rank == id */
    }
    c.merged = id;
  }
  heap_push(w, c);
}

typedef struct out_ids {
  int32_t *ids;
  size_t cap, n;
} out_ids;

static void emit(out_ids *o, int32_t id) {
  if (o->n < o->cap) o->ids[o->n] = id;
  o->n++;
}

/* Byte-pair-merges piece s[0..n) and appends its ids. Returns 0 on allocation failure. */
static int bpe_piece(const em_tokenizer *t, bpe_work *w, const uint8_t *s, size_t n, out_ids *o) {
  if (n == 0) return 1;
  if (t->model == EM_TOKENIZER_TIKTOKEN || (t->flags & TOKF_IGNORE_MERGES)) {
    int32_t id = tok_lookup(t, (const char *)s, n);
    if (id >= 0) {
      emit(o, id);
      return 1;
    }
  }
  if (n > w->cap_syms) {
    size_t cap = n * 2;
    sym *ns = realloc(w->syms, cap * sizeof *ns);
    if (!ns) return 0;
    w->syms = ns;
    w->cap_syms = cap;
    cand *nh = realloc(w->heap, cap * 3 * sizeof *nh); /* pushes <= (n-1) + 2 per merge */
    if (!nh) return 0;
    w->heap = nh;
    w->cap_heap = cap * 3;
  }
  int32_t m = 0;
  for (size_t i = 0; i < n; m++) {
    size_t k = 1;
    if (t->model == EM_TOKENIZER_SPM_BPE) {
      uint32_t cp;
      k = tok_utf8_next(s + i, n - i, &cp);
    }
    sym *y = &w->syms[m];
    y->start = i;
    y->n = k;
    y->id = (k == 1 && t->model != EM_TOKENIZER_SPM_BPE) ? t->byte_id[s[i]]
                                                         : tok_lookup(t, (const char *)s + i, k);
    y->prev = m - 1;
    y->next = -1;
    if (m > 0) w->syms[m - 1].next = m;
    i += k;
  }
  w->n_heap = 0;
  for (int32_t i = 0; i + 1 < m; i++) try_pair(t, w, s, i);
  while (w->n_heap > 0) {
    cand c = heap_pop(w);
    sym *a = &w->syms[c.left];
    if (a->n == 0 || a->next != c.right) continue;
    sym *b = &w->syms[c.right];
    if (a->n + b->n != c.n) continue; /* stale: a side merged since */
    a->n += b->n;
    a->id = c.merged;
    a->next = b->next;
    if (b->next >= 0) w->syms[b->next].prev = c.left;
    b->n = 0;
    try_pair(t, w, s, a->prev);
    try_pair(t, w, s, c.left);
  }
  for (int32_t i = 0; i >= 0; i = w->syms[i].next) {
    const sym *y = &w->syms[i];
    if (y->id >= 0) {
      emit(o, y->id);
    } else {
      for (size_t k = 0; k < y->n; k++) { /* byte fallback, else unknown */
        int32_t b = t->byte_id[s[y->start + k]];
        if (b >= 0) {
          emit(o, b);
        } else if (t->unk_id >= 0) {
          emit(o, t->unk_id);
          break;
        }
      }
    }
  }
  return 1;
}

typedef struct enc_ctx {
  const em_tokenizer *t;
  bpe_work *w;
  const uint8_t *s;
  out_ids *o;
} enc_ctx;

static int enc_span(void *ctx, size_t a, size_t b) {
  enc_ctx *e = ctx;
  return bpe_piece(e->t, e->w, e->s + a, b - a, e->o);
}

/* Encodes a stretch with no special tokens in it. */
static int encode_plain(const em_tokenizer *t, bpe_work *w, const uint8_t *s, size_t n, int prefix,
                        out_ids *o) {
  if (t->model != EM_TOKENIZER_SPM_BPE) {
    enc_ctx e = {t, w, s, o};
    return tok_pretokenize(t->pretok, s, n, enc_span, &e);
  }
  /* SentencePiece: ' ' -> U+2581 and a dummy prefix, then BPE over the whole stretch. */
  size_t cap = 3 * n + 3;
  uint8_t *buf = malloc(cap ? cap : 1);
  if (!buf) return 0;
  size_t k = 0;
  if (prefix) {
    memcpy(buf, "\xE2\x96\x81", 3);
    k = 3;
  }
  for (size_t i = 0; i < n; i++) {
    if (s[i] == ' ') {
      memcpy(buf + k, "\xE2\x96\x81", 3);
      k += 3;
    } else {
      buf[k++] = s[i];
    }
  }
  int ok = bpe_piece(t, w, buf, k, o);
  free(buf);
  return ok;
}

/* The special token starting earliest in s[0..n) (longest on ties); *at receives its offset. */
static int32_t find_special(const em_tokenizer *t, const uint8_t *s, size_t n, size_t *at) {
  for (size_t i = 0; i < n; i++) {
    for (size_t k = 0; k < t->n_specials; k++) { /* specials are sorted longest first */
      int32_t id = t->specials[k];
      size_t L = t->len[id];
      if (L <= n - i && (uint8_t)t->blob[t->off[id]] == s[i] &&
          memcmp(t->blob + t->off[id], s + i, L) == 0) {
        *at = i;
        return id;
      }
    }
  }
  return -1;
}

em_status em_tokenizer_encode(const em_tokenizer *t, const char *text, size_t n, unsigned flags,
                              int32_t *ids, size_t cap, size_t *n_out) {
  if (!t || (!text && n) || !n_out || (!ids && cap)) return EM_ERR_INVALID_ARGUMENT;
  out_ids o = {ids, cap, 0};
  bpe_work w = {0};
  const uint8_t *s = (const uint8_t *)text;
  int bos = (flags & EM_TOK_ADD_BOS) || ((flags & EM_TOK_DEFAULT_BOS) && (t->flags & TOKF_ADD_BOS));
  if (bos && t->bos_id >= 0) emit(&o, t->bos_id);
  int ok = 1;
  int prefix = (t->flags & TOKF_SPM_PREFIX) != 0;
  while (ok && n > 0) {
    size_t at = n;
    int32_t sp = (flags & EM_TOK_PARSE_SPECIAL) ? find_special(t, s, n, &at) : -1;
    if (sp < 0) at = n;
    ok = encode_plain(t, &w, s, at, prefix, &o);
    prefix = 0;
    if (sp >= 0) {
      emit(&o, sp);
      at += t->len[sp];
    }
    s += at;
    n -= at;
  }
  free(w.syms);
  free(w.heap);
  if (!ok) {
    EM_LOG_ERROR("tokenizer: out of memory while encoding");
    return EM_ERR_MEMORY_ALLOCATION_FAILED;
  }
  *n_out = o.n;
  return EM_OK;
}

/* ---------------------------------------------------------------- decode and queries */

const char *em_tokenizer_piece(const em_tokenizer *t, int32_t id, int first, size_t *len) {
  if (!t || id < 0 || (size_t)id >= t->n_vocab) {
    if (len) *len = 0;
    return NULL;
  }
  const char *p = t->dec_blob + t->dec_off[id];
  size_t n = t->dec_len[id];
  if (first && t->model == EM_TOKENIZER_SPM_BPE && (t->flags & TOKF_SPM_PREFIX) && n && p[0] == ' ')
    p++, n--;
  if (len) *len = n;
  return p;
}

em_status em_tokenizer_decode(const em_tokenizer *t, const int32_t *ids, size_t n, char *buf,
                              size_t cap, size_t *n_out) {
  if (!t || (!ids && n) || !n_out || (!buf && cap)) return EM_ERR_INVALID_ARGUMENT;
  size_t o = 0;
  int first = 1;
  for (size_t i = 0; i < n; i++) {
    if (ids[i] < 0 || (size_t)ids[i] >= t->n_vocab) {
      EM_LOG_ERROR("tokenizer: token id %d out of range [0, %zu)", (int)ids[i], t->n_vocab);
      return EM_ERR_INVALID_ARGUMENT;
    }
    size_t k;
    const char *p = em_tokenizer_piece(t, ids[i], first, &k);
    if (t->types[ids[i]] != EM_TOKEN_CONTROL) first = 0;
    for (size_t j = 0; j < k; j++, o++)
      if (o < cap) buf[o] = p[j];
  }
  *n_out = o;
  return EM_OK;
}

size_t em_tokenizer_vocab_size(const em_tokenizer *t) { return t ? t->n_vocab : 0; }
int32_t em_tokenizer_bos_id(const em_tokenizer *t) { return t ? t->bos_id : -1; }
size_t em_tokenizer_eos_ids(const em_tokenizer *t, const int32_t **ids_out) {
  if (ids_out) *ids_out = t ? t->eos_ids : NULL;
  return t ? t->n_eos : 0;
}
int32_t em_tokenizer_token_id(const em_tokenizer *t, const char *s) {
  return (t && s) ? tok_lookup(t, s, strlen(s)) : -1;
}
em_tokenizer_model em_tokenizer_model_kind(const em_tokenizer *t) { return t->model; }
em_pretok em_tokenizer_pretok(const em_tokenizer *t) { return t->pretok; }

/* ---------------------------------------------------------------- loading by file kind */

static em_status tokenizer_load_any(const char *path, em_tokenizer **out) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    EM_LOG_ERROR("tokenizer: cannot open %s", path);
    return EM_ERR_ACCESS_FAILED;
  }
  char head[8] = {0};
  size_t k = fread(head, 1, sizeof head, f);
  fclose(f);
  if (k >= 4 && memcmp(head, "GGUF", 4) == 0) return em_tokenizer_load_gguf(path, out);
  if (k >= 4 && memcmp(head, "EMTK", 4) == 0) return em_tokenizer_load_compact(path, out);
  size_t i = 0;
  while (i < k && (head[i] == ' ' || head[i] == '\n' || head[i] == '\r' || head[i] == '\t')) i++;
  if (i < k && head[i] == '{') return em_tokenizer_load_json(path, out);
  static const char *const eot[] = {"<|endoftext|>"};
  return em_tokenizer_load_tiktoken(path, EM_PRETOK_GPT2, eot, 1, out);
}

em_status em_tokenizer_load(const char *path, em_tokenizer **out) {
  if (!path || !out) return EM_ERR_INVALID_ARGUMENT;
  em_clear_last_error();
  em_status st = tokenizer_load_any(path, out);
  /* The loaders' many tables fail alike: name the tokenizer and its file's size at least. */
  if (st == EM_ERR_MEMORY_ALLOCATION_FAILED && !em_last_error()[0]) {
    FILE *f = fopen(path, "rb");
    long n = f && fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (f) fclose(f);
    EM_LOG_ERROR("tokenizer: out of memory building the tables of %s (a %ld-byte file)", path, n);
  }
  return st;
}
