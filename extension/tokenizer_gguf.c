/*
 * tokenizer_gguf.c — a small GGUF metadata reader and the tokenizer loader on top of it.
 *
 * GGUF (ggml's file format, versions 2 and 3; little-endian): "GGUF", u32 version,
 * u64 n_tensors, u64 n_kv, then n_kv × { string key; u32 type; value }, where a string is
 * u64 length + bytes and an array is u32 item type + u64 count + items. Only the metadata is
 * read (stdio, sequentially); the tensor data is never touched. Keys used:
 *   tokenizer.ggml.model ("gpt2" byte-level BPE, "llama" SentencePiece), .pre (split pattern),
 *   .tokens, .scores, .token_type, .merges, .bos_token_id, .eos_token_id, .eot_token_id,
 *   .add_bos_token, .add_space_prefix.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ember/platform.h"
#include "tokenizer_model.h"

enum {
  GG_U8 = 0,
  GG_I8,
  GG_U16,
  GG_I16,
  GG_U32,
  GG_I32,
  GG_F32,
  GG_BOOL,
  GG_STRING,
  GG_ARRAY,
  GG_U64,
  GG_I64,
  GG_F64
};

typedef struct gg {
  FILE *f;
  const char *path;
  int bad;
  uint64_t remaining; /* bytes left in the file */
} gg;

static int gg_read(gg *g, void *p, size_t n) {
  if (g->bad || n > g->remaining || fread(p, 1, n, g->f) != n) {
    g->bad = 1;
    return 0;
  }
  g->remaining -= n;
  return 1;
}

static uint64_t gg_uint(gg *g, size_t n) {
  uint8_t b[8] = {0};
  if (!gg_read(g, b, n)) return 0;
  uint64_t v = 0;
  for (size_t i = n; i-- > 0;) v = (v << 8) | b[i];
  return v;
}

static size_t gg_scalar_size(uint32_t type) {
  static const size_t sz[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
  return type <= GG_F64 ? sz[type] : 0;
}

/* Reads a string into a malloc'd buffer (NUL-terminated). */
static char *gg_string(gg *g, size_t *len) {
  uint64_t n = gg_uint(g, 8);
  if (g->bad || n > g->remaining) {
    g->bad = 1;
    return NULL;
  }
  char *s = malloc((size_t)n + 1);
  if (!s || !gg_read(g, s, (size_t)n)) {
    free(s);
    g->bad = 1;
    return NULL;
  }
  s[n] = 0;
  if (len) *len = (size_t)n;
  return s;
}

static void gg_skip(gg *g, uint64_t n) {
  if (g->bad || n > g->remaining || fseek(g->f, (long)n, SEEK_CUR) != 0) {
    g->bad = 1;
    return;
  }
  g->remaining -= n;
}

static void gg_skip_value(gg *g, uint32_t type, int depth) {
  if (type == GG_STRING) {
    gg_skip(g, gg_uint(g, 8));
  } else if (type == GG_ARRAY) {
    uint32_t it = (uint32_t)gg_uint(g, 4);
    uint64_t n = gg_uint(g, 8);
    if (depth > 4 || g->bad) {
      g->bad = 1;
      return;
    }
    if (it == GG_STRING || it == GG_ARRAY) {
      for (uint64_t i = 0; i < n && !g->bad; i++) gg_skip_value(g, it, depth + 1);
    } else if (gg_scalar_size(it) && n <= g->remaining / gg_scalar_size(it)) {
      gg_skip(g, n * gg_scalar_size(it));
    } else {
      g->bad = 1;
    }
  } else if (gg_scalar_size(type)) {
    gg_skip(g, gg_scalar_size(type));
  } else {
    g->bad = 1;
  }
}

/* Reads a scalar integer/bool of any integer type as int64. */
static int64_t gg_int(gg *g, uint32_t type) {
  size_t n = gg_scalar_size(type);
  if (!n || type == GG_F32 || type == GG_F64) {
    gg_skip_value(g, type, 0);
    return -1;
  }
  uint64_t v = gg_uint(g, n);
  int sign = (type == GG_I8 || type == GG_I16 || type == GG_I32 || type == GG_I64);
  if (sign && n < 8 && (v >> (8 * n - 1)) & 1) v |= ~0ull << (8 * n);
  return (int64_t)v;
}

typedef struct gg_tok {
  char *model, *pre;
  char **tokens;
  size_t *token_lens, n_tokens;
  float *scores;
  size_t n_scores;
  int32_t *types;
  size_t n_types;
  char **merges;
  size_t n_merges;
  int64_t bos, eos, eot;
  int add_bos, add_space_prefix;
} gg_tok;

static void gg_tok_free(gg_tok *k) {
  for (size_t i = 0; k->tokens && i < k->n_tokens; i++) free(k->tokens[i]);
  for (size_t i = 0; k->merges && i < k->n_merges; i++) free(k->merges[i]);
  free(k->tokens);
  free(k->token_lens);
  free(k->merges);
  free(k->scores);
  free(k->types);
  free(k->model);
  free(k->pre);
}

/* Reads an array header of the expected item type; returns the count or -1. */
static int64_t gg_array(gg *g, uint32_t type, uint32_t want) {
  if (type != GG_ARRAY) {
    gg_skip_value(g, type, 0);
    return -1;
  }
  uint32_t it = (uint32_t)gg_uint(g, 4);
  uint64_t n = gg_uint(g, 8);
  if (g->bad || it != want || n > g->remaining) {
    g->bad = 1;
    return -1;
  }
  return (int64_t)n;
}

static int gg_strings(gg *g, uint32_t type, char ***out, size_t **lens, size_t *n_out) {
  int64_t n = gg_array(g, type, GG_STRING);
  if (n < 0) return 0;
  *out = calloc((size_t)n + 1, sizeof **out);
  if (lens) *lens = calloc((size_t)n + 1, sizeof **lens);
  if (!*out || (lens && !*lens)) return 0;
  *n_out = (size_t)n;
  for (int64_t i = 0; i < n && !g->bad; i++) (*out)[i] = gg_string(g, lens ? &(*lens)[i] : NULL);
  return !g->bad;
}

static int gg_read_tokenizer(gg *g, gg_tok *k) {
  char magic[4];
  if (!gg_read(g, magic, 4) || memcmp(magic, "GGUF", 4) != 0) return 0;
  uint32_t version = (uint32_t)gg_uint(g, 4);
  if (version < 2 || version > 3) {
    EM_LOG_ERROR("tokenizer: %s: GGUF version %u not supported", g->path, (unsigned)version);
    return 0;
  }
  gg_uint(g, 8); /* n_tensors */
  uint64_t n_kv = gg_uint(g, 8);
  for (uint64_t i = 0; i < n_kv && !g->bad; i++) {
    char *key = gg_string(g, NULL);
    uint32_t type = (uint32_t)gg_uint(g, 4);
    if (!key || g->bad) {
      free(key);
      break;
    }
    const char *p = "tokenizer.ggml.";
    if (strncmp(key, p, strlen(p)) != 0) {
      gg_skip_value(g, type, 0);
      free(key);
      continue;
    }
    const char *name = key + strlen(p);
    if (!strcmp(name, "model") && type == GG_STRING) {
      k->model = gg_string(g, NULL);
    } else if (!strcmp(name, "pre") && type == GG_STRING) {
      k->pre = gg_string(g, NULL);
    } else if (!strcmp(name, "tokens")) {
      gg_strings(g, type, &k->tokens, &k->token_lens, &k->n_tokens);
    } else if (!strcmp(name, "merges")) {
      gg_strings(g, type, &k->merges, NULL, &k->n_merges);
    } else if (!strcmp(name, "scores")) {
      int64_t n = gg_array(g, type, GG_F32);
      if (n >= 0 && (k->scores = malloc((size_t)n * 4 + 4)) != NULL) {
        k->n_scores = (size_t)n;
        for (int64_t j = 0; j < n; j++) {
          uint32_t v = (uint32_t)gg_uint(g, 4);
          memcpy(&k->scores[j], &v, 4);
        }
      }
    } else if (!strcmp(name, "token_type")) {
      int64_t n = gg_array(g, type, GG_I32);
      if (n >= 0 && (k->types = malloc((size_t)n * 4 + 4)) != NULL) {
        k->n_types = (size_t)n;
        for (int64_t j = 0; j < n; j++) k->types[j] = (int32_t)gg_uint(g, 4);
      }
    } else if (!strcmp(name, "bos_token_id")) {
      k->bos = gg_int(g, type);
    } else if (!strcmp(name, "eos_token_id")) {
      k->eos = gg_int(g, type);
    } else if (!strcmp(name, "eot_token_id")) {
      k->eot = gg_int(g, type);
    } else if (!strcmp(name, "add_bos_token")) {
      k->add_bos = (int)gg_int(g, type);
    } else if (!strcmp(name, "add_space_prefix")) {
      k->add_space_prefix = (int)gg_int(g, type);
    } else {
      gg_skip_value(g, type, 0);
    }
    free(key);
  }
  return !g->bad;
}

/* Maps llama.cpp's tokenizer.ggml.pre names to a split pattern (-1 when unknown). */
static int pretok_from_name(const char *pre) {
  if (!pre || !strcmp(pre, "default") || !strcmp(pre, "gpt-2") || !strcmp(pre, "gpt2"))
    return EM_PRETOK_GPT2;
  if (!strcmp(pre, "smollm") || !strcmp(pre, "starcoder") || !strcmp(pre, "refact"))
    return EM_PRETOK_DIGITS_GPT2;
  if (!strcmp(pre, "llama3") || !strcmp(pre, "llama-bpe") || !strcmp(pre, "smaug-bpe") ||
      !strcmp(pre, "dbrx"))
    return EM_PRETOK_LLAMA3;
  return -1;
}

static em_status build_from_gguf(const gg_tok *k, const char *path, em_tokenizer **out) {
  int spm = k->model && !strcmp(k->model, "llama");
  if (!k->model || (!spm && strcmp(k->model, "gpt2") != 0) || !k->n_tokens) {
    EM_LOG_ERROR("tokenizer: %s: tokenizer.ggml.model '%s' with %zu tokens not supported", path,
                 k->model ? k->model : "(none)", k->n_tokens);
    return EM_ERR_NOT_SUPPORTED;
  }
  int pre = spm ? EM_PRETOK_NONE : pretok_from_name(k->pre);
  if (pre < 0) {
    EM_LOG_ERROR("tokenizer: %s: pre-tokenizer '%s' not supported", path, k->pre);
    return EM_ERR_NOT_SUPPORTED;
  }
  em_tokenizer *t = tok_alloc(spm ? EM_TOKENIZER_SPM_BPE : EM_TOKENIZER_BPE_BYTELEVEL, k->n_tokens);
  if (!t) return EM_ERR_MEMORY_ALLOCATION_FAILED;
  em_status st = EM_ERR_MEMORY_ALLOCATION_FAILED;
  t->pretok = (em_pretok)pre;
  char *tmp = NULL;
  for (size_t i = 0; i < k->n_tokens; i++) {
    const char *s = k->tokens[i];
    size_t n = k->token_lens[i];
    uint8_t type = (uint8_t)(i < k->n_types ? k->types[i] : EM_TOKEN_NORMAL);
    float score = i < k->n_scores ? k->scores[i] : 0.0f;
    char *p = realloc(tmp, n + 1);
    if (!p) goto fail;
    tmp = p;
    size_t m = (size_t)-1;
    if (!spm && type != EM_TOKEN_CONTROL && type != EM_TOKEN_USER_DEFINED)
      m = tok_unmap_bytelevel(s, n, tmp);
    if (!tok_set(t, i, m == (size_t)-1 ? s : tmp, m == (size_t)-1 ? n : m, score, type)) goto fail;
  }
  if (tok_index_vocab(t) != EM_OK) goto fail;
  for (size_t i = 0; i < k->n_merges; i++) {
    const char *s = k->merges[i];
    const char *sp = strchr(s, ' ');
    if (!sp) continue;
    char *p = realloc(tmp, strlen(s) + 1);
    if (!p) goto fail;
    tmp = p;
    int32_t a = -1, b = -1;
    size_t la = tok_unmap_bytelevel(s, (size_t)(sp - s), tmp);
    if (la != (size_t)-1) a = tok_lookup(t, tmp, la);
    size_t lb = tok_unmap_bytelevel(sp + 1, strlen(sp + 1), tmp);
    if (lb != (size_t)-1) b = tok_lookup(t, tmp, lb);
    if (a < 0 || b < 0) {
      EM_LOG_ERROR("tokenizer: %s: merge %zu '%s' names unknown tokens", path, i, s);
      st = EM_ERR_INVALID_ARGUMENT;
      goto fail;
    }
    if (!tok_add_merge(t, a, b)) goto fail;
  }
  t->bos_id = (int32_t)k->bos;
  if (k->add_bos) t->flags |= TOKF_ADD_BOS;
  if (spm && k->add_space_prefix) t->flags |= TOKF_SPM_PREFIX;
  t->eos_ids = malloc(2 * sizeof *t->eos_ids);
  if (!t->eos_ids) goto fail;
  if (k->eos >= 0) t->eos_ids[t->n_eos++] = (int32_t)k->eos;
  if (k->eot >= 0 && k->eot != k->eos) t->eos_ids[t->n_eos++] = (int32_t)k->eot;
  st = tok_finish(t);
  if (st != EM_OK) goto fail;
  free(tmp);
  *out = t;
  return EM_OK;
fail:
  free(tmp);
  em_tokenizer_destroy(t);
  return st;
}

em_status em_tokenizer_load_gguf(const char *path, em_tokenizer **out) {
  if (!path || !out) return EM_ERR_INVALID_ARGUMENT;
  FILE *f = fopen(path, "rb");
  if (!f) {
    EM_LOG_ERROR("tokenizer: cannot open %s", path);
    return EM_ERR_ACCESS_FAILED;
  }
  gg g = {f, path, 0, 0};
  if (fseek(f, 0, SEEK_END) == 0) {
    long size = ftell(f);
    g.remaining = size > 0 ? (uint64_t)size : 0;
  }
  rewind(f);
  gg_tok k = {0};
  k.bos = k.eos = k.eot = -1;
  k.add_space_prefix = 1;
  int ok = gg_read_tokenizer(&g, &k);
  fclose(f);
  em_status st;
  if (!ok) {
    EM_LOG_ERROR("tokenizer: %s: not a GGUF file, or its metadata is truncated or malformed", path);
    st = EM_ERR_INVALID_ARGUMENT;
  } else {
    st = build_from_gguf(&k, path, out);
  }
  gg_tok_free(&k);
  return st;
}
