/*
 * tokenizer_json.c — loads a HuggingFace `tokenizer.json` (byte-level BPE models).
 *
 * A small JSON parser builds a DOM (nodes in one array, children as linked lists; strings
 * unescaped into one buffer), then the loader reads:
 *   model {type "BPE", vocab {token: id}, merges ["a b"] or [["a","b"]], ignore_merges},
 *   added_tokens [{id, content, special}], pre_tokenizer (ByteLevel with its regex;
 *   Sequence[Digits(individual_digits), ByteLevel]; Sequence[Split(Regex P), ByteLevel] where P is
 *   the GPT-2 or Llama-3 pattern), post_processor (TemplateProcessing's leading special token
 *   becomes the BOS added by EM_TOK_DEFAULT_BOS).
 * EOS ids are the added tokens named <|endoftext|>, <|im_end|>, <|eot_id|>, <|end_of_text|>, </s>.
 */
#include <stdlib.h>
#include <string.h>

#include "ember/platform.h"
#include "tokenizer_model.h"

enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ };

typedef struct jnode {
  uint8_t type;
  int32_t next, child;   /* siblings; first child of arrays/objects (-1 = none) */
  uint32_t key, key_len; /* member name in the string buffer (objects' children) */
  uint32_t str, str_len;
  double num;
} jnode;

typedef struct jparser {
  const char *s;
  size_t n, at;
  jnode *nodes;
  size_t n_nodes, cap;
  char *strs; /* unescaped strings; never longer than the input */
  size_t n_strs;
  const char *err;
} jparser;

static void ws(jparser *p) {
  while (p->at < p->n &&
         (p->s[p->at] == ' ' || p->s[p->at] == '\n' || p->s[p->at] == '\r' || p->s[p->at] == '\t'))
    p->at++;
}

static int32_t new_node(jparser *p, uint8_t type) {
  if (p->n_nodes == p->cap) {
    size_t cap = p->cap ? p->cap * 2 : 1024;
    jnode *nn = realloc(p->nodes, cap * sizeof *nn);
    if (!nn) {
      p->err = "out of memory";
      return -1;
    }
    p->nodes = nn;
    p->cap = cap;
  }
  jnode *j = &p->nodes[p->n_nodes];
  memset(j, 0, sizeof *j);
  j->type = type;
  j->next = j->child = -1;
  return (int32_t)p->n_nodes++;
}

static int hex4(const char *s, uint32_t *v) {
  *v = 0;
  for (int i = 0; i < 4; i++) {
    char c = s[i];
    int d = (c >= '0' && c <= '9')   ? c - '0'
            : (c >= 'a' && c <= 'f') ? c - 'a' + 10
            : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                     : -1;
    if (d < 0) return 0;
    *v = (*v << 4) | (uint32_t)d;
  }
  return 1;
}

static void put_utf8(jparser *p, uint32_t cp) {
  char *o = p->strs + p->n_strs;
  if (cp < 0x80) {
    o[0] = (char)cp;
    p->n_strs += 1;
  } else if (cp < 0x800) {
    o[0] = (char)(0xC0 | (cp >> 6));
    o[1] = (char)(0x80 | (cp & 0x3F));
    p->n_strs += 2;
  } else if (cp < 0x10000) {
    o[0] = (char)(0xE0 | (cp >> 12));
    o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[2] = (char)(0x80 | (cp & 0x3F));
    p->n_strs += 3;
  } else {
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    p->n_strs += 4;
  }
}

/* Parses a string at p->at (on the opening quote) into the string buffer. An escape is at least
 * as long as its UTF-8 output (\uXXXX -> <= 3 bytes; a surrogate pair's 12 -> 4). */
static int parse_str(jparser *p, uint32_t *off, uint32_t *len) {
  if (p->at >= p->n || p->s[p->at] != '"') return 0;
  p->at++;
  *off = (uint32_t)p->n_strs;
  while (p->at < p->n && p->s[p->at] != '"') {
    char c = p->s[p->at++];
    if (c != '\\') {
      p->strs[p->n_strs++] = c;
      continue;
    }
    if (p->at >= p->n) return 0;
    c = p->s[p->at++];
    switch (c) {
    case 'n': p->strs[p->n_strs++] = '\n'; break;
    case 't': p->strs[p->n_strs++] = '\t'; break;
    case 'r': p->strs[p->n_strs++] = '\r'; break;
    case 'b': p->strs[p->n_strs++] = '\b'; break;
    case 'f': p->strs[p->n_strs++] = '\f'; break;
    case 'u': {
      uint32_t cp, lo;
      if (p->n - p->at < 4 || !hex4(p->s + p->at, &cp)) return 0;
      p->at += 4;
      if (cp >= 0xD800 && cp < 0xDC00 && p->n - p->at >= 6 && p->s[p->at] == '\\' &&
          p->s[p->at + 1] == 'u' && hex4(p->s + p->at + 2, &lo) && lo >= 0xDC00 && lo < 0xE000) {
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        p->at += 6;
      }
      put_utf8(p, cp);
      break;
    }
    default: p->strs[p->n_strs++] = c; break; /* \" \\ \/ */
    }
  }
  if (p->at >= p->n) return 0;
  p->at++;
  *len = (uint32_t)(p->n_strs - *off);
  return 1;
}

static int32_t parse_value(jparser *p, int depth) {
  ws(p);
  if (p->at >= p->n || depth > 64) {
    p->err = depth > 64 ? "nesting too deep" : "unexpected end";
    return -1;
  }
  char c = p->s[p->at];
  int32_t id;
  if (c == '{' || c == '[') {
    int obj = c == '{';
    id = new_node(p, obj ? J_OBJ : J_ARR);
    if (id < 0) return -1;
    p->at++;
    int32_t last = -1;
    ws(p);
    if (p->at < p->n && p->s[p->at] == (obj ? '}' : ']')) {
      p->at++;
      return id;
    }
    for (;;) {
      uint32_t koff = 0, klen = 0;
      if (obj) {
        ws(p);
        if (!parse_str(p, &koff, &klen)) {
          p->err = "bad object key";
          return -1;
        }
        ws(p);
        if (p->at >= p->n || p->s[p->at++] != ':') {
          p->err = "expected ':'";
          return -1;
        }
      }
      int32_t v = parse_value(p, depth + 1);
      if (v < 0) return -1;
      p->nodes[v].key = koff;
      p->nodes[v].key_len = klen;
      if (last < 0)
        p->nodes[id].child = v;
      else
        p->nodes[last].next = v;
      last = v;
      ws(p);
      if (p->at < p->n && p->s[p->at] == ',') {
        p->at++;
        continue;
      }
      if (p->at < p->n && p->s[p->at] == (obj ? '}' : ']')) {
        p->at++;
        return id;
      }
      p->err = "expected ',' or a closing bracket";
      return -1;
    }
  }
  if (c == '"') {
    id = new_node(p, J_STR);
    if (id < 0) return -1;
    uint32_t off, len;
    if (!parse_str(p, &off, &len)) {
      p->err = "bad string";
      return -1;
    }
    p->nodes[id].str = off;
    p->nodes[id].str_len = len;
    return id;
  }
  if (p->n - p->at >= 4 && (!memcmp(p->s + p->at, "true", 4) || !memcmp(p->s + p->at, "null", 4))) {
    id = new_node(p, p->s[p->at] == 't' ? J_BOOL : J_NULL);
    if (id >= 0) p->nodes[id].num = 1;
    p->at += 4;
    return id;
  }
  if (p->n - p->at >= 5 && !memcmp(p->s + p->at, "false", 5)) {
    id = new_node(p, J_BOOL);
    p->at += 5;
    return id;
  }
  char *end;
  double v = strtod(p->s + p->at, &end);
  if (end == p->s + p->at) {
    p->err = "unexpected character";
    return -1;
  }
  p->at = (size_t)(end - p->s);
  id = new_node(p, J_NUM);
  if (id >= 0) p->nodes[id].num = v;
  return id;
}

/* ---------------------------------------------------------------- DOM queries */

static const jnode *jget(const jparser *p, const jnode *obj, const char *key) {
  if (!obj || obj->type != J_OBJ) return NULL;
  size_t kl = strlen(key);
  for (int32_t c = obj->child; c >= 0; c = p->nodes[c].next) {
    const jnode *j = &p->nodes[c];
    if (j->key_len == kl && memcmp(p->strs + j->key, key, kl) == 0) return j;
  }
  return NULL;
}

static int jstr_is(const jparser *p, const jnode *j, const char *s) {
  return j && j->type == J_STR && j->str_len == strlen(s) &&
         !memcmp(p->strs + j->str, s, j->str_len);
}

static int jtrue(const jnode *j) { return j && j->type == J_BOOL && j->num != 0; }

static const jnode *jchild(const jparser *p, const jnode *j, size_t i) {
  if (!j || (j->type != J_ARR && j->type != J_OBJ)) return NULL;
  int32_t c = j->child;
  while (c >= 0 && i--) c = p->nodes[c].next;
  return c >= 0 ? &p->nodes[c] : NULL;
}

static const jnode *jnext(const jparser *p, const jnode *j) {
  return j->next >= 0 ? &p->nodes[j->next] : NULL;
}

static const char k_gpt2_re[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char k_llama3_re[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* Maps one pre-tokenizer (or Sequence) to an em_pretok; -1 when not supported. */
static int pretok_of(const jparser *p, const jnode *pt) {
  if (!pt || pt->type == J_NULL) return -1;
  const jnode *type = jget(p, pt, "type");
  if (jstr_is(p, type, "ByteLevel")) {
    if (jtrue(jget(p, pt, "add_prefix_space"))) return -1;
    const jnode *re = jget(p, pt, "use_regex");
    return (!re || jtrue(re)) ? EM_PRETOK_GPT2 : EM_PRETOK_NONE;
  }
  if (!jstr_is(p, type, "Sequence")) return -1;
  const jnode *list = jget(p, pt, "pretokenizers");
  const jnode *a = jchild(p, list, 0), *b = a ? jnext(p, a) : NULL;
  if (!a || !b || jnext(p, b) || pretok_of(p, b) < 0) return -1;
  int tail = pretok_of(p, b);
  const jnode *ta = jget(p, a, "type");
  if (jstr_is(p, ta, "Digits") && jtrue(jget(p, a, "individual_digits")) && tail == EM_PRETOK_GPT2)
    return EM_PRETOK_DIGITS_GPT2;
  if (jstr_is(p, ta, "Split") && tail == EM_PRETOK_NONE &&
      jstr_is(p, jget(p, a, "behavior"), "Isolated") && !jtrue(jget(p, a, "invert"))) {
    const jnode *re = jget(p, jget(p, a, "pattern"), "Regex");
    if (jstr_is(p, re, k_llama3_re)) return EM_PRETOK_LLAMA3;
    if (jstr_is(p, re, k_gpt2_re)) return EM_PRETOK_GPT2;
  }
  return -1;
}

static em_status build(const jparser *p, const jnode *root, const char *path, em_tokenizer **out) {
  const jnode *model = jget(p, root, "model");
  const jnode *vocab = jget(p, model, "vocab"), *merges = jget(p, model, "merges");
  if (!jstr_is(p, jget(p, model, "type"), "BPE") || !vocab || vocab->type != J_OBJ || !merges ||
      merges->type != J_ARR) {
    EM_LOG_ERROR("tokenizer: %s: only BPE models (with vocab and merges) are supported", path);
    return EM_ERR_NOT_SUPPORTED;
  }
  int pre = pretok_of(p, jget(p, root, "pre_tokenizer"));
  if (pre < 0) {
    EM_LOG_ERROR("tokenizer: %s: pre_tokenizer not supported (byte-level BPE with the GPT-2 or "
                 "Llama-3 split, optionally after Digits(individual_digits))",
                 path);
    return EM_ERR_NOT_SUPPORTED;
  }
  size_t n_vocab = 0;
  for (const jnode *e = jchild(p, vocab, 0); e; e = jnext(p, e))
    if (e->type == J_NUM && e->num >= 0 && e->num < (double)INT32_MAX &&
        (size_t)e->num + 1 > n_vocab)
      n_vocab = (size_t)e->num + 1;
  const jnode *added = jget(p, root, "added_tokens");
  for (const jnode *e = jchild(p, added, 0); e; e = jnext(p, e)) {
    const jnode *id = jget(p, e, "id");
    if (id && id->type == J_NUM && id->num >= 0 && id->num < (double)INT32_MAX &&
        (size_t)id->num + 1 > n_vocab)
      n_vocab = (size_t)id->num + 1;
  }
  em_tokenizer *t = tok_alloc(EM_TOKENIZER_BPE_BYTELEVEL, n_vocab);
  if (!t) return EM_ERR_MEMORY_ALLOCATION_FAILED;
  em_status st = EM_ERR_MEMORY_ALLOCATION_FAILED;
  char *tmp = malloc(p->n_strs + 1);
  if (!tmp) goto fail;
  t->pretok = (em_pretok)pre;
  if (jtrue(jget(p, model, "ignore_merges"))) t->flags |= TOKF_IGNORE_MERGES;
  for (const jnode *e = jchild(p, vocab, 0); e; e = jnext(p, e)) {
    if (e->type != J_NUM) continue;
    size_t m = tok_unmap_bytelevel(p->strs + e->key, e->key_len, tmp);
    const char *s = m == (size_t)-1 ? p->strs + e->key : tmp;
    if (!tok_set(t, (size_t)e->num, s, m == (size_t)-1 ? e->key_len : m, 0, EM_TOKEN_NORMAL))
      goto fail;
  }
  t->eos_ids = malloc(8 * sizeof *t->eos_ids);
  if (!t->eos_ids) goto fail;
  static const char *const eos_names[] = {"<|endoftext|>", "<|im_end|>", "<|eot_id|>",
                                          "<|end_of_text|>", "</s>"};
  for (const jnode *e = jchild(p, added, 0); e; e = jnext(p, e)) {
    const jnode *id = jget(p, e, "id"), *content = jget(p, e, "content");
    if (!id || id->type != J_NUM || !content || content->type != J_STR) continue;
    uint8_t type = jtrue(jget(p, e, "special")) ? EM_TOKEN_CONTROL : EM_TOKEN_USER_DEFINED;
    if (!tok_set(t, (size_t)id->num, p->strs + content->str, content->str_len, 0, type)) goto fail;
    for (size_t k = 0; k < sizeof eos_names / sizeof *eos_names && t->n_eos < 8; k++)
      if (jstr_is(p, content, eos_names[k])) t->eos_ids[t->n_eos++] = (int32_t)id->num;
  }
  if (tok_index_vocab(t) != EM_OK) goto fail;
  size_t r = 0;
  for (const jnode *e = jchild(p, merges, 0); e; e = jnext(p, e), r++) {
    const char *sa, *sb;
    size_t la, lb;
    if (e->type == J_STR) {
      const char *s = p->strs + e->str;
      const char *sp = memchr(s, ' ', e->str_len);
      if (!sp) continue;
      sa = s;
      la = (size_t)(sp - s);
      sb = sp + 1;
      lb = e->str_len - la - 1;
    } else {
      const jnode *a = jchild(p, e, 0), *b = a ? jnext(p, a) : NULL;
      if (!a || !b || a->type != J_STR || b->type != J_STR) continue;
      sa = p->strs + a->str;
      la = a->str_len;
      sb = p->strs + b->str;
      lb = b->str_len;
    }
    size_t ma = tok_unmap_bytelevel(sa, la, tmp);
    int32_t ia = ma == (size_t)-1 ? -1 : tok_lookup(t, tmp, ma);
    size_t mb = tok_unmap_bytelevel(sb, lb, tmp);
    int32_t ib = mb == (size_t)-1 ? -1 : tok_lookup(t, tmp, mb);
    if (ia < 0 || ib < 0) {
      EM_LOG_ERROR("tokenizer: %s: merge %zu names a token not in the vocabulary", path, r);
      st = EM_ERR_INVALID_ARGUMENT;
      goto fail;
    }
    if (!tok_add_merge(t, ia, ib)) goto fail;
  }
  const jnode *single = jget(p, jget(p, root, "post_processor"), "single");
  const jnode *first = jget(p, jchild(p, single, 0), "SpecialToken");
  if (first) {
    const jnode *name = jget(p, first, "id");
    if (name && name->type == J_STR) {
      memcpy(tmp, p->strs + name->str, name->str_len);
      t->bos_id = tok_lookup(t, tmp, name->str_len);
      if (t->bos_id >= 0) t->flags |= TOKF_ADD_BOS;
    }
  }
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

em_status em_tokenizer_load_json(const char *path, em_tokenizer **out) {
  if (!path || !out) return EM_ERR_INVALID_ARGUMENT;
  char *buf;
  size_t n;
  em_status st = tok_read_file(path, &buf, &n);
  if (st != EM_OK) return st;
  jparser p = {buf, n, 0, NULL, 0, 0, malloc(n + 1), 0, NULL};
  if (!p.strs) {
    free(buf);
    return EM_ERR_MEMORY_ALLOCATION_FAILED;
  }
  int32_t root = parse_value(&p, 0);
  if (root < 0 || p.nodes[root].type != J_OBJ) {
    EM_LOG_ERROR("tokenizer: %s: JSON error at byte %zu: %s", path, p.at,
                 p.err ? p.err : "not an object");
    st = EM_ERR_INVALID_ARGUMENT;
  } else {
    st = build(&p, &p.nodes[root], path, out);
  }
  free(p.nodes);
  free(p.strs);
  free(buf);
  return st;
}
