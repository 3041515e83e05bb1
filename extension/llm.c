/*
 * llm.c — the LLM runner: metadata, prefill/decode loop, sampling, streaming, statistics.
 *
 * Positions: the prompt occupies [0, n_prompt); generated token k sits at n_prompt + k. With a
 * KV cache each forward call passes only the new tokens and their start position; the program's
 * mutable buffers keep the cache between calls. Logits are read at the last position of the
 * call. Sampling follows llama2.c: greedy argmax at temperature 0, otherwise softmax(logits/T)
 * and, with top_p < 1, the smallest set of tokens whose mass exceeds top_p (tokens below
 * (1 - top_p) / (V - 1) cannot be in it and are dropped before sorting).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "ember/ember.h"
#include "ember_ext/llm.h"
#include "ember_ext/module.h"

struct em_llm {
  em_module *mod;
  em_threadpool *pool;
  em_tokenizer *tok;
  em_method *fwd;
  int64_t max_seq_len, vocab, bos;
  int64_t eos[8];
  size_t n_eos;
  int kv_cache;
  int64_t max_chunk; /* bound of the tokens input's sequence dim */
  int64_t *seq;      /* [max_seq_len] tokens so far */
  float *probs;      /* [vocab] sampler scratch */
  int32_t *order;    /* [vocab] */
  double load_s;
};

em_llm_gen_options em_llm_gen_defaults(void) {
  em_llm_gen_options g = {128, 0.0f, 1.0f, 42, 0, 0};
  return g;
}

static double now_s(void) { return (double)em_now_ns() * 1e-9; }

/* Runs a metadata method and reads its ints (Int, int list, or an integer/bool tensor). */
static size_t read_meta(em_llm *l, const char *name, int64_t *vals, size_t cap) {
  const em_program *p = em_module_program(l->mod);
  int found = 0;
  for (size_t i = 0; i < em_program_method_count(p); i++)
    if (strcmp(em_program_method_name(p, i), name) == 0) found = 1;
  em_method *m;
  if (!found || em_module_method(l->mod, name, &m) != EM_OK || em_method_execute(m) != EM_OK ||
      em_method_output_count(m) < 1)
    return 0;
  em_evalue *v = (em_evalue *)em_method_output(m, 0);
  size_t n = 0;
  if (v->tag == EM_TAG_INT) {
    vals[n++] = v->u.i;
  } else if (v->tag == EM_TAG_BOOL) {
    vals[n++] = v->u.b;
  } else if (v->tag == EM_TAG_LIST_INT) {
    size_t k;
    const int64_t *xs = em_evalue_int_list(v, &k);
    for (size_t i = 0; xs && i < k && n < cap; i++) vals[n++] = xs[i];
  } else if (v->tag == EM_TAG_TENSOR) {
    const em_tensor *t = v->u.tensor;
    for (int64_t i = 0; i < t->numel && n < cap; i++) {
      switch (t->dtype) {
      case EM_DTYPE_I64: vals[n++] = ((const int64_t *)t->data)[i]; break;
      case EM_DTYPE_I32: vals[n++] = ((const int32_t *)t->data)[i]; break;
      case EM_DTYPE_BOOL:
      case EM_DTYPE_U8: vals[n++] = ((const uint8_t *)t->data)[i]; break;
      case EM_DTYPE_F32: vals[n++] = (int64_t)((const float *)t->data)[i]; break;
      default: return n;
      }
    }
  }
  return n;
}

em_status em_llm_create(const char *pte_path, const char *tokenizer_path,
                        const em_llm_options *opts, em_llm **out) {
  if (!pte_path || !tokenizer_path || !out) return EM_ERR_INVALID_ARGUMENT;
  double t0 = now_s();
  em_llm *l = calloc(1, sizeof *l);
  if (!l) {
    EM_LOG_ERROR("llm: %zu bytes for the runner", sizeof *l);
    return EM_ERR_MEMORY_ALLOCATION_FAILED;
  }
  em_status st = em_tokenizer_load(tokenizer_path, &l->tok);
  if (st != EM_OK) goto fail;
  em_module_options mo = {0};
  mo.verification = EM_VERIFY_FULL;
  mo.use_mmap = opts ? opts->use_mmap : 1;
  if (opts && opts->n_threads > 1) {
    l->pool = em_threadpool_create(opts->n_threads);
    mo.pool = l->pool;
  }
  st = em_module_open_ex(pte_path, NULL, &mo, &l->mod);
  if (st != EM_OK) goto fail;
  st = em_module_method(l->mod, "forward", &l->fwd);
  if (st != EM_OK) goto fail;
  if (em_method_input_count(l->fwd) < 1) {
    EM_LOG_ERROR("llm: %s: forward takes no inputs (expected tokens[1,S], start_pos[1])", pte_path);
    st = EM_ERR_INVALID_PROGRAM;
    goto fail;
  }
  const em_tensor *tin = em_evalue_tensor(em_method_input(l->fwd, 0));
  if (!tin || tin->dim != 2 || tin->dtype != EM_DTYPE_I64) {
    EM_LOG_ERROR("llm: %s: forward input 0 must be an int64 tensor [1, S]", pte_path);
    st = EM_ERR_INVALID_PROGRAM;
    goto fail;
  }
  l->max_chunk = tin->numel_bound;
  int64_t v[8];
  l->max_seq_len = read_meta(l, "get_max_seq_len", v, 1) ? v[0] : l->max_chunk;
  l->vocab = read_meta(l, "get_vocab_size", v, 1) ? v[0] : (int64_t)em_tokenizer_vocab_size(l->tok);
  l->bos = read_meta(l, "get_bos_id", v, 1) ? v[0] : em_tokenizer_bos_id(l->tok);
  l->kv_cache =
      read_meta(l, "use_kv_cache", v, 1) ? (int)v[0] : (em_method_input_count(l->fwd) > 1);
  l->n_eos = read_meta(l, "get_eos_ids", l->eos, 8);
  if (l->n_eos == 0) {
    const int32_t *ids;
    size_t n = em_tokenizer_eos_ids(l->tok, &ids);
    for (size_t i = 0; i < n && i < 8; i++) l->eos[l->n_eos++] = ids[i];
  }
  if (l->max_seq_len <= 0 || l->vocab <= 0 || l->max_seq_len > (1 << 24)) {
    EM_LOG_ERROR("llm: bad metadata (max_seq_len %lld, vocab %lld)", (long long)l->max_seq_len,
                 (long long)l->vocab);
    st = EM_ERR_INVALID_PROGRAM;
    goto fail;
  }
  l->seq = malloc((size_t)l->max_seq_len * sizeof *l->seq);
  l->probs = malloc((size_t)l->vocab * sizeof *l->probs);
  l->order = malloc((size_t)l->vocab * sizeof *l->order);
  st = EM_ERR_MEMORY_ALLOCATION_FAILED;
  if (!l->seq || !l->probs || !l->order) {
    EM_LOG_ERROR("llm: %zu bytes of token buffer and %zu bytes of sampling buffers",
                 (size_t)l->max_seq_len * sizeof *l->seq,
                 (size_t)l->vocab * (sizeof *l->probs + sizeof *l->order));
    goto fail;
  }
  l->load_s = now_s() - t0;
  *out = l;
  return EM_OK;
fail:
  em_llm_destroy(l);
  return st;
}

void em_llm_destroy(em_llm *l) {
  if (!l) return;
  em_module_destroy(l->mod);
  em_threadpool_destroy(l->pool);
  em_tokenizer_destroy(l->tok);
  free(l->seq);
  free(l->probs);
  free(l->order);
  free(l);
}

int64_t em_llm_max_seq_len(const em_llm *l) { return l->max_seq_len; }
int64_t em_llm_vocab_size(const em_llm *l) { return l->vocab; }
int em_llm_uses_kv_cache(const em_llm *l) { return l->kv_cache; }
const em_tokenizer *em_llm_tokenizer(const em_llm *l) { return l->tok; }

em_status em_llm_forward(em_llm *l, const int64_t *tokens, size_t n, int64_t start_pos,
                         const float **logits_out, size_t *vocab_out) {
  if (n == 0 || (int64_t)n > l->max_chunk) {
    EM_LOG_ERROR("llm: forward on %zu tokens (the program takes 1..%lld)", n,
                 (long long)l->max_chunk);
    return EM_ERR_INVALID_ARGUMENT;
  }
  int64_t sizes[2] = {1, (int64_t)n}, strides[2] = {(int64_t)n, 1};
  uint8_t order[2] = {0, 1};
  em_tensor t = {
      (void *)tokens,        sizes, strides, order, (int64_t)n, (int64_t)n, 2, EM_DTYPE_I64,
      EM_SHAPE_DYNAMIC_BOUND};
  em_status st = em_method_set_input_tensor(l->fwd, 0, &t);
  if (st != EM_OK) return st;
  if (em_method_input_count(l->fwd) > 1) {
    int64_t one = 1, s1 = 1;
    uint8_t o1 = 0;
    int64_t pos = start_pos;
    em_tensor p = {&pos, &one, &s1, &o1, 1, 1, 1, EM_DTYPE_I64, EM_SHAPE_STATIC};
    st = em_method_set_input_tensor(l->fwd, 1, &p);
    if (st != EM_OK) return st;
  }
  st = em_method_execute(l->fwd);
  if (st != EM_OK) return st;
  const em_tensor *y = em_evalue_tensor(em_method_output(l->fwd, 0));
  if (!y || y->dtype != EM_DTYPE_F32 || y->dim < 1 || y->sizes[y->dim - 1] != l->vocab) {
    EM_LOG_ERROR("llm: forward output 0 must be f32 logits [..., %lld]", (long long)l->vocab);
    return EM_ERR_INVALID_PROGRAM;
  }
  *logits_out = (const float *)y->data + (y->numel - l->vocab); /* last position */
  *vocab_out = (size_t)l->vocab;
  return EM_OK;
}

/* ---------------------------------------------------------------- sampling */

static uint32_t rng_u32(uint64_t *s) { /* xorshift64* */
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return (uint32_t)((*s * 0x2545F4914F6CDD1Dull) >> 32);
}

static float rng_f32(uint64_t *s) { return (rng_u32(s) >> 8) / 16777216.0f; }

/* Whether token a comes before token b: higher probability first, then the lower id. */
static int before(const float *p, int32_t a, int32_t b) {
  return p[a] > p[b] || (p[a] == p[b] && a < b);
}

static void sift_down(int32_t *h, size_t n, size_t i, const float *p) {
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= n) return;
    if (c + 1 < n && before(p, h[c], h[c + 1])) c++; /* a max-heap of "comes last" */
    if (!before(p, h[i], h[c])) return;
    int32_t t = h[i];
    h[i] = h[c], h[c] = t, i = c;
  }
}

/* Sorts token ids by descending probability (ties: ascending id), in place, with no global
 * state (heap sort: O(n log n), no allocation). */
static void sort_by_prob_desc(int32_t *ids, size_t n, const float *p) {
  for (size_t i = n / 2; i-- > 0;) sift_down(ids, n, i, p);
  for (size_t end = n; end > 1; end--) {
    int32_t t = ids[0];
    ids[0] = ids[end - 1], ids[end - 1] = t;
    sift_down(ids, end - 1, 0, p);
  }
}

static int32_t sample(em_llm *l, const float *logits, size_t V, float temp, float top_p,
                      uint64_t *rng) {
  size_t best = 0;
  for (size_t i = 1; i < V; i++)
    if (logits[i] > logits[best]) best = i;
  if (temp <= 0.0f) return (int32_t)best;
  float mx = logits[best], sum = 0.0f;
  for (size_t i = 0; i < V; i++) sum += (l->probs[i] = expf((logits[i] - mx) / temp));
  for (size_t i = 0; i < V; i++) l->probs[i] /= sum;
  float r = rng_f32(rng);
  if (top_p <= 0.0f || top_p >= 1.0f) {
    float c = 0.0f;
    for (size_t i = 0; i < V; i++)
      if (r < (c += l->probs[i])) return (int32_t)i;
    return (int32_t)(V - 1);
  }
  float cutoff = V > 1 ? (1.0f - top_p) / (float)(V - 1) : 0.0f;
  size_t n = 0;
  for (size_t i = 0; i < V; i++)
    if (l->probs[i] >= cutoff) l->order[n++] = (int32_t)i;
  if (n == 0) return (int32_t)best;
  sort_by_prob_desc(l->order, n, l->probs);
  float c = 0.0f;
  size_t last = n - 1;
  for (size_t i = 0; i < n; i++)
    if ((c += l->probs[l->order[i]]) > top_p) {
      last = i;
      break;
    }
  float rc = r * c, acc = 0.0f;
  for (size_t i = 0; i <= last; i++)
    if (rc < (acc += l->probs[l->order[i]])) return l->order[i];
  return l->order[last];
}

/* ---------------------------------------------------------------- streaming */

typedef struct stream {
  char pend[8]; /* bytes of an unfinished UTF-8 character */
  size_t n_pend;
  em_llm_text_fn fn;
  void *ctx;
  int stopped;
} stream;

static size_t utf8_len(unsigned char c) {
  return c < 0x80             ? 1
         : (c & 0xE0) == 0xC0 ? 2
         : (c & 0xF0) == 0xE0 ? 3
         : (c & 0xF8) == 0xF0 ? 4
                              : 1;
}

/* Emits whole characters; holds back a trailing partial one. */
static void stream_put(stream *s, const char *p, size_t n) {
  if (!s->fn || s->stopped) return;
  char buf[256];
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    s->pend[s->n_pend++] = p[i];
    if (s->n_pend >= utf8_len((unsigned char)s->pend[0]) || s->n_pend == sizeof s->pend) {
      if (k + s->n_pend > sizeof buf) {
        if (s->fn(s->ctx, buf, k)) s->stopped = 1;
        k = 0;
      }
      memcpy(buf + k, s->pend, s->n_pend);
      k += s->n_pend;
      s->n_pend = 0;
    }
  }
  if (k && s->fn(s->ctx, buf, k)) s->stopped = 1;
}

static int is_eos(const em_llm *l, int64_t tok) {
  for (size_t i = 0; i < l->n_eos; i++)
    if (l->eos[i] == tok) return 1;
  return 0;
}

static long peak_rss_kb(void) {
  /* VmHWM is this address space's peak; ru_maxrss would survive execve on Linux and report a
   * parent's peak (e.g. the Python process that exported the model and then ran us). */
  FILE *f = fopen("/proc/self/status", "r");
  if (f) {
    char line[256];
    long kb = -1;
    while (fgets(line, sizeof line, f))
      if (strncmp(line, "VmHWM:", 6) == 0) kb = strtol(line + 6, NULL, 10);
    fclose(f);
    if (kb >= 0) return kb;
  }
  struct rusage ru;
  return getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_maxrss : -1;
}

/* Builds the prompt text (ChatML for chat) and encodes it into l->seq. */
static em_status encode_prompt(em_llm *l, const char *prompt, int chat, size_t *n_out) {
  const char *pre = chat ? "<|im_start|>user\n" : "";
  const char *post = chat ? "<|im_end|>\n<|im_start|>assistant\n" : "";
  size_t n = strlen(pre) + strlen(prompt) + strlen(post);
  char *text = malloc(n + 1);
  if (!text) {
    EM_LOG_ERROR("llm: %zu bytes for the prompt", n + 1);
    return EM_ERR_MEMORY_ALLOCATION_FAILED;
  }
  snprintf(text, n + 1, "%s%s%s", pre, prompt, post);
  size_t cap = (size_t)l->max_seq_len;
  int32_t *ids = malloc((n + 2) * sizeof *ids);
  size_t k = 0;
  em_status st = EM_ERR_MEMORY_ALLOCATION_FAILED;
  if (ids) {
    unsigned flags = EM_TOK_PARSE_SPECIAL | EM_TOK_DEFAULT_BOS;
    st = em_tokenizer_encode(l->tok, text, n, flags, ids, n + 2, &k);
  } else {
    EM_LOG_ERROR("llm: %zu bytes for the prompt's token ids", (n + 2) * sizeof *ids);
  }
  if (st == EM_OK && (k == 0 || k >= cap)) {
    EM_LOG_ERROR("llm: the prompt has %zu tokens; the context holds %zu", k, cap);
    st = EM_ERR_INVALID_ARGUMENT;
  }
  if (st == EM_OK) {
    for (size_t i = 0; i < k; i++) l->seq[i] = ids[i];
    *n_out = k;
  }
  free(ids);
  free(text);
  return st;
}

em_status em_llm_generate(em_llm *l, const char *prompt, const em_llm_gen_options *opts,
                          em_llm_text_fn fn, void *ctx, em_llm_stats *stats) {
  if (!l || !prompt) return EM_ERR_INVALID_ARGUMENT;
  em_llm_gen_options g = opts ? *opts : em_llm_gen_defaults();
  em_llm_stats s = {0};
  s.load_s = l->load_s;
  uint64_t rng = g.seed ? g.seed : 0x9E3779B97F4A7C15ull;
  stream out = {{0}, 0, fn, ctx, 0};
  size_t n = 0;
  em_status st = encode_prompt(l, prompt, g.chat, &n);
  if (st != EM_OK) return st;
  s.n_prompt_tokens = n;
  if (g.echo)
    for (size_t i = 0; i < n; i++) {
      size_t k;
      const char *p = em_tokenizer_piece(l->tok, (int32_t)l->seq[i], i == 0, &k);
      stream_put(&out, p, k);
    }
  double t0 = now_s();
  const float *logits = NULL;
  size_t V = 0;
  /* Prefill: chunks of at most max_chunk tokens (the whole sequence without a KV cache). */
  for (size_t at = 0; at < n && st == EM_OK;) {
    size_t k = n - at;
    if (!l->kv_cache) at = 0, k = n;
    if ((int64_t)k > l->max_chunk) k = (size_t)l->max_chunk;
    st = em_llm_forward(l, l->seq + at, k, (int64_t)at, &logits, &V);
    at += k;
    if (!l->kv_cache) break;
  }
  double t1 = now_s();
  s.prefill_s = t1 - t0;
  s.stop = EM_LLM_STOP_MAX_TOKENS;
  size_t pos = n, n_steps = 0; /* pos: tokens in l->seq; logits predict l->seq[pos] */
  for (int step = 0; st == EM_OK; step++) {
    if (step == 0 && g.max_new_tokens <= 0) break; /* the prompt's forward only */
    int32_t next = sample(l, logits, V, g.temperature, g.top_p, &rng);
    if (step == 0) s.ttft_s = now_s() - t0;
    if (is_eos(l, next)) {
      s.stop = EM_LLM_STOP_EOS;
      break;
    }
    s.n_generated++;
    size_t k;
    const char *p = em_tokenizer_piece(l->tok, next, pos == 0, &k);
    stream_put(&out, p, k);
    if (out.stopped) {
      s.stop = EM_LLM_STOP_CALLBACK;
      break;
    }
    if ((int)s.n_generated >= g.max_new_tokens) break;
    if ((int64_t)pos >= l->max_seq_len || (!l->kv_cache && (int64_t)pos + 1 > l->max_chunk)) {
      s.stop = EM_LLM_STOP_CONTEXT; /* no cache row left for this token */
      break;
    }
    l->seq[pos] = next;
    if (l->kv_cache)
      st = em_llm_forward(l, l->seq + pos, 1, (int64_t)pos, &logits, &V);
    else
      st = em_llm_forward(l, l->seq, pos + 1, 0, &logits, &V);
    pos++;
    n_steps++;
  }
  if (out.n_pend && out.fn && !out.stopped) out.fn(out.ctx, out.pend, out.n_pend); /* cut char */
  s.decode_s = now_s() - t1;
  s.prefill_tok_per_s = s.prefill_s > 0 ? (double)n / s.prefill_s : 0;
  s.decode_tok_per_s = s.decode_s > 0 ? (double)n_steps / s.decode_s : 0;
  s.peak_rss_kb = peak_rss_kb();
  if (stats) *stats = s;
  return st;
}
