/*
 * llm.h — a text-generation runner for LLM programs (extension: uses the heap and stdio).
 *
 * The program follows ExecuTorch's LLM runner contract (extension/llm/runner):
 *   forward(tokens [1, S] int64, start_pos [1] int64) -> logits [1, S, V] or [1, V] (f32)
 * with metadata methods that take no inputs and return a constant (an Int, or a one-element
 * tensor; get_eos_ids may return a list or a 1-D tensor): get_max_seq_len, get_vocab_size,
 * get_bos_id, get_eos_ids, use_kv_cache. Missing metadata falls back to the tokenizer (BOS/EOS)
 * and to the forward input's bound (max_seq_len). With a KV cache the prompt is prefilled in
 * chunks of at most the `tokens` input's bound, then one token per step; without one, every
 * step re-runs the whole sequence from position 0.
 *
 *     em_llm *llm;
 *     if (em_llm_create("model.pte", "tokenizer.gguf", NULL, &llm) != EM_OK) puts(em_last_error());
 *     em_llm_gen_options g = em_llm_gen_defaults();
 *     g.max_new_tokens = 64;
 *     em_llm_stats st;
 *     em_llm_generate(llm, "Hello", &g, print_piece, NULL, &st);
 *     printf("%.1f tok/s\n", st.decode_tok_per_s);
 *     em_llm_destroy(llm);
 */
#ifndef EMBER_EXT_LLM_H
#define EMBER_EXT_LLM_H

#include <stddef.h>
#include <stdint.h>

#include "ember/status.h"
#include "ember_ext/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct em_llm em_llm;

typedef struct em_llm_options {
  int n_threads; /* 0 or 1: run on the caller's thread */
  int use_mmap;  /* 1 (default when options are NULL): map the .pte */
} em_llm_options;

typedef struct em_llm_gen_options {
  int max_new_tokens; /* default 128; stops earlier at EOS or the context limit; 0 (or less):
                         the prompt's forward pass only, no token generated */
  float temperature;  /* <= 0: greedy (argmax) */
  float top_p;        /* nucleus sampling mass in (0, 1]; 1 disables */
  uint64_t seed;      /* sampler seed */
  int chat;           /* apply the ChatML template (<|im_start|>user ... assistant) */
  int echo;           /* also stream the prompt's text */
} em_llm_gen_options;

/* Why generation stopped. */
typedef enum em_llm_stop {
  EM_LLM_STOP_EOS = 1,
  EM_LLM_STOP_MAX_TOKENS = 2,
  EM_LLM_STOP_CONTEXT = 3, /* max_seq_len reached */
  EM_LLM_STOP_CALLBACK = 4
} em_llm_stop;

typedef struct em_llm_stats {
  size_t n_prompt_tokens, n_generated;
  double load_s, prefill_s, decode_s, ttft_s; /* ttft: prompt start to first sampled token */
  double prefill_tok_per_s, decode_tok_per_s;
  long peak_rss_kb; /* getrusage ru_maxrss */
  em_llm_stop stop;
} em_llm_stats;

/* Streaming callback: UTF-8 text (whole characters); return nonzero to stop. */
typedef int (*em_llm_text_fn)(void *ctx, const char *text, size_t len);

/* Default generation options. */
em_llm_gen_options em_llm_gen_defaults(void);

/* Loads the program and the tokenizer (any format em_tokenizer_load reads). */
em_status em_llm_create(const char *pte_path, const char *tokenizer_path,
                        const em_llm_options *opts, em_llm **out);

/*
 * Generates from `prompt`, streaming text through `fn` (may be NULL). Positions continue from
 * 0 each call (the KV cache is overwritten). `stats` may be NULL.
 */
em_status em_llm_generate(em_llm *llm, const char *prompt, const em_llm_gen_options *opts,
                          em_llm_text_fn fn, void *ctx, em_llm_stats *stats);

/*
 * Lower-level step: runs forward on tokens[0..n) at position `start_pos` and returns the last
 * position's logits (valid until the next call) with *vocab_out entries.
 */
em_status em_llm_forward(em_llm *llm, const int64_t *tokens, size_t n, int64_t start_pos,
                         const float **logits_out, size_t *vocab_out);

/* Metadata (after create). */
int64_t em_llm_max_seq_len(const em_llm *llm);
int64_t em_llm_vocab_size(const em_llm *llm);
int em_llm_uses_kv_cache(const em_llm *llm);
const em_tokenizer *em_llm_tokenizer(const em_llm *llm);

/* Frees everything. NULL is a no-op. */
void em_llm_destroy(em_llm *llm);

#ifdef __cplusplus
}
#endif

#endif /* EMBER_EXT_LLM_H */
