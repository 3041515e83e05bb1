/*
 * tokenizer_internal.h — the tokenizer's shared representation and its text layer (private to
 * extension/tokenizer*.c): the em_tokenizer structure, UTF-8 and Unicode classes
 * (tokenizer_unicode.c) and the pre-tokenizer (tokenizer_pretok.c). The functions that build an
 * em_tokenizer are in tokenizer_model.h.
 *
 * Every loader fills one em_tokenizer: token bytes in one blob, a hash from bytes to id, a hash
 * from merge pairs to (rank, merged id), and the bytes each token decodes to. Invariants after
 * tok_finish(): every id in [0, n_vocab) has bytes; byte_id[b] is the token for the single byte b
 * (or -1); specials lists the ids matched in text with EM_TOK_PARSE_SPECIAL, longest first.
 */
#ifndef EMBER_TOKENIZER_INTERNAL_H
#define EMBER_TOKENIZER_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "ember_ext/tokenizer.h"

enum { EM_UC_OTHER = 0, EM_UC_LETTER = 1, EM_UC_NUMBER = 2, EM_UC_SPACE = 3 };

/* Flags stored in the tokenizer (and the compact file). */
#define TOKF_ADD_BOS       1u
#define TOKF_IGNORE_MERGES 2u
#define TOKF_SPM_PREFIX    4u

typedef struct tok_merge {
  int32_t a, b; /* pair of token ids; a == -1 marks an empty slot */
  int32_t rank;
  int32_t id; /* merged token */
} tok_merge;

struct em_tokenizer {
  em_tokenizer_model model;
  em_pretok pretok;
  unsigned flags;
  int32_t bos_id;
  int32_t *eos_ids;
  size_t n_eos;

  size_t n_vocab;
  uint32_t *off; /* [n_vocab] offset of token i's raw bytes in blob */
  uint32_t *len; /* [n_vocab] */
  char *blob;
  size_t blob_n, blob_cap;
  float *scores;  /* [n_vocab] */
  uint8_t *types; /* [n_vocab] em_token_type */

  uint32_t *dec_off, *dec_len; /* [n_vocab] decoded bytes of each token in dec_blob */
  char *dec_blob;

  int32_t *vhash; /* open addressing, -1 = empty */
  size_t vhash_cap;
  tok_merge *mhash;
  size_t mhash_cap;
  int32_t *merges; /* [n_merges][2] in rank order (kept for save_compact) */
  size_t n_merges;

  int32_t byte_id[256];
  int32_t unk_id;
  int32_t *specials;
  size_t n_specials;
};

/* Unicode class of a code point (tokenizer_unicode.c, generated). */
int em_tok_uclass(uint32_t cp);

/* Decodes one UTF-8 character at s[0..n) (n >= 1); invalid bytes decode as themselves with
 * length 1 and class OTHER. Returns the byte length. */
size_t tok_utf8_next(const uint8_t *s, size_t n, uint32_t *cp_out);

/* Pre-tokenizes text into spans; calls fn(ctx, start, end) for each piece. */
typedef int (*tok_span_fn)(void *ctx, size_t start, size_t end);
int tok_pretokenize(em_pretok p, const uint8_t *s, size_t n, tok_span_fn fn, void *ctx);

#endif /* EMBER_TOKENIZER_INTERNAL_H */
