/*
 * tokenizer_pretok.c — pre-tokenizers: the reference split regexes implemented by hand.
 *
 * A regex engine tries the alternatives of a pattern in order at each position and takes the
 * first that matches; the functions below do the same, alternative by alternative, on decoded
 * code points with their Unicode class (letter \p{L}, number \p{N}, White_Space \s, other).
 *
 * GPT-2 (HF ByteLevel, tiktoken r50k/gpt2):
 *     's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * Llama-3 (tiktoken cl100k-style):
 *     (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}
 *     | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * DIGITS_GPT2 (SmolLM): each \p{N} isolated (HF Digits(individual_digits)), GPT-2 on the rest.
 */
#include <stdlib.h>

#include "ember/platform.h"
#include "tokenizer_internal.h"

/* Decodes one UTF-8 character; malformed input yields one byte as its own "character". */
size_t tok_utf8_next(const uint8_t *s, size_t n, uint32_t *cp_out) {
  uint8_t c = s[0];
  size_t need;
  uint32_t cp;
  if (c < 0x80) {
    *cp_out = c;
    return 1;
  } else if ((c & 0xE0) == 0xC0) {
    need = 2;
    cp = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    need = 3;
    cp = c & 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    need = 4;
    cp = c & 0x07;
  } else {
    *cp_out = 0xFFFFFFFFu; /* invalid lead byte */
    return 1;
  }
  if (need > n) {
    *cp_out = 0xFFFFFFFFu;
    return 1;
  }
  for (size_t k = 1; k < need; k++) {
    if ((s[k] & 0xC0) != 0x80) {
      *cp_out = 0xFFFFFFFFu;
      return 1;
    }
    cp = (cp << 6) | (s[k] & 0x3F);
  }
  *cp_out = cp;
  return need;
}

typedef struct chars {
  uint32_t *cp; /* [m] */
  uint8_t *cl;  /* [m] */
  size_t *off;  /* [m + 1] byte offsets */
  size_t m;
} chars;

static int is_nl(uint32_t c) { return c == '\r' || c == '\n'; }

static uint32_t ascii_lower(uint32_t c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

/* Length in characters of a contraction at i ('s 't 're 've 'm 'll 'd), 0 if none. */
static size_t contraction(const chars *c, size_t i, size_t m, int ci) {
  if (c->cp[i] != '\'' || i + 1 >= m) return 0;
  uint32_t a = ci ? ascii_lower(c->cp[i + 1]) : c->cp[i + 1];
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (i + 2 >= m) return 0;
  uint32_t b = ci ? ascii_lower(c->cp[i + 2]) : c->cp[i + 2];
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

static size_t run(const chars *c, size_t i, size_t m, int cls) {
  size_t j = i;
  while (j < m && c->cl[j] == cls) j++;
  return j - i;
}

/* \s+(?!\S) then \s+ at i (c->cl[i] is SPACE). */
static size_t space_run(const chars *c, size_t i, size_t m) {
  size_t r = run(c, i, m, EM_UC_SPACE);
  if (i + r == m || r == 1) return r; /* at end: whole run; single space before \S: \s+ */
  return r - 1;                       /* leave the last space to prefix the next piece */
}

static size_t match_gpt2(const chars *c, size_t i, size_t m) {
  size_t k = contraction(c, i, m, 0);
  if (k) return k;
  /* ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+': a space joins a following non-space run. */
  if (c->cp[i] == ' ' && i + 1 < m && c->cl[i + 1] != EM_UC_SPACE)
    return 1 + run(c, i + 1, m, c->cl[i + 1]);
  if (c->cl[i] != EM_UC_SPACE) return run(c, i, m, c->cl[i]);
  return space_run(c, i, m);
}

static size_t match_llama3(const chars *c, size_t i, size_t m) {
  size_t k = contraction(c, i, m, 1);
  if (k) return k;
  int cl = c->cl[i];
  if (cl == EM_UC_LETTER) return run(c, i, m, EM_UC_LETTER);
  if (cl != EM_UC_NUMBER && !is_nl(c->cp[i]) && i + 1 < m && c->cl[i + 1] == EM_UC_LETTER)
    return 1 + run(c, i + 1, m, EM_UC_LETTER);
  if (cl == EM_UC_NUMBER) {
    size_t r = run(c, i, m, EM_UC_NUMBER);
    return r > 3 ? 3 : r;
  }
  size_t sp = (c->cp[i] == ' ' && i + 1 < m && c->cl[i + 1] == EM_UC_OTHER) ? 1 : 0;
  if (sp || cl == EM_UC_OTHER) {
    size_t j = i + sp;
    j += run(c, j, m, EM_UC_OTHER);
    while (j < m && is_nl(c->cp[j])) j++;
    return j - i;
  }
  /* cl is SPACE here. */
  size_t r = run(c, i, m, EM_UC_SPACE);
  for (size_t j = i + r; j > i; j--)
    if (is_nl(c->cp[j - 1])) return j - i; /* \s*[\r\n]+ ends at the last newline */
  return space_run(c, i, m);
}

static int split_range(const chars *c, size_t a, size_t b, em_pretok p, tok_span_fn fn, void *ctx) {
  size_t i = a;
  while (i < b) {
    size_t k = (p == EM_PRETOK_LLAMA3) ? match_llama3(c, i, b) : match_gpt2(c, i, b);
    if (!fn(ctx, c->off[i], c->off[i + k])) return 0;
    i += k;
  }
  return 1;
}

/* Splits s[0..n) per pretokenizer p, calling fn for each piece. Returns 0 on failure. */
int tok_pretokenize(em_pretok p, const uint8_t *s, size_t n, tok_span_fn fn, void *ctx) {
  if (n == 0) return 1;
  if (p == EM_PRETOK_NONE) return fn(ctx, 0, n);
  chars c;
  c.cp = malloc(n * sizeof *c.cp);
  c.cl = malloc(n);
  c.off = malloc((n + 1) * sizeof *c.off);
  int ok = 0;
  if (!c.cp || !c.cl || !c.off) goto done;
  c.m = 0;
  for (size_t i = 0; i < n;) {
    uint32_t cp;
    size_t k = tok_utf8_next(s + i, n - i, &cp);
    c.cp[c.m] = cp;
    c.cl[c.m] = (uint8_t)(cp == 0xFFFFFFFFu ? EM_UC_OTHER : em_tok_uclass(cp));
    c.off[c.m++] = i;
    i += k;
  }
  c.off[c.m] = n;
  if (p == EM_PRETOK_DIGITS_GPT2) {
    size_t a = 0;
    ok = 1;
    for (size_t i = 0; i < c.m && ok; i++) {
      if (c.cl[i] != EM_UC_NUMBER) continue;
      ok = split_range(&c, a, i, EM_PRETOK_GPT2, fn, ctx) && fn(ctx, c.off[i], c.off[i + 1]);
      a = i + 1;
    }
    ok = ok && split_range(&c, a, c.m, EM_PRETOK_GPT2, fn, ctx);
  } else {
    ok = split_range(&c, 0, c.m, p, fn, ctx);
  }
done:
  free(c.cp);
  free(c.cl);
  free(c.off);
  return ok;
}

typedef struct span_sink {
  size_t *spans;
  size_t cap, n;
} span_sink;

static int sink_span(void *ctx, size_t a, size_t b) {
  span_sink *k = ctx;
  if (k->n < k->cap) {
    k->spans[2 * k->n] = a;
    k->spans[2 * k->n + 1] = b;
  }
  k->n++;
  return 1;
}

em_status em_tokenizer_pretokenize(em_pretok pretok, const char *text, size_t n, size_t *spans,
                                   size_t cap, size_t *n_out) {
  if ((!text && n) || !n_out || (int)pretok < 0 || pretok > EM_PRETOK_DIGITS_GPT2)
    return EM_ERR_INVALID_ARGUMENT;
  span_sink k = {spans, spans ? cap : 0, 0};
  if (!tok_pretokenize(pretok, (const uint8_t *)text, n, sink_span, &k)) {
    EM_LOG_ERROR("tokenizer: out of memory pre-tokenizing %zu bytes", n);
    return EM_ERR_MEMORY_ALLOCATION_FAILED;
  }
  *n_out = k.n;
  return EM_OK;
}
