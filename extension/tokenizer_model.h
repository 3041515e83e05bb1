/*
 * tokenizer_model.h — building an em_tokenizer (tokenizer_model.c; private to
 * extension/tokenizer*.c): allocation, token bytes, merges, tok_finish (hashes, decoded pieces,
 * specials), lookups, GPT-2's byte <-> unicode mapping and reading a file.
 *
 * Layering, one way down: tokenizer.c (encode, decode, em_tokenizer_load by file kind) -> the
 * loaders tokenizer_{json,gguf,compact}.c -> tokenizer_model.c -> tokenizer_pretok.c ->
 * tokenizer_unicode.c. A loader calls only this layer and below, never tokenizer.c
 * (tests/python/test_layering.py keeps it so). em_tokenizer_destroy (ember_ext/tokenizer.h) is
 * defined in tokenizer_model.c too.
 */
#ifndef EMBER_TOKENIZER_MODEL_H
#define EMBER_TOKENIZER_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "tokenizer_internal.h"

/* Allocation of a tokenizer with n_vocab empty tokens. */
em_tokenizer *tok_alloc(em_tokenizer_model model, size_t n_vocab);

/* Sets token id's raw bytes, score and type. */
int tok_set(em_tokenizer *t, size_t id, const char *bytes, size_t n, float score, uint8_t type);

/* Adds merge (a, b) with the next rank; returns 0 on failure (unknown merged token is skipped). */
int tok_add_merge(em_tokenizer *t, int32_t a, int32_t b);

/* Builds hashes, byte ids, decoded pieces and special lists; returns EM_OK or an error. */
em_status tok_finish(em_tokenizer *t);

/* Builds the bytes -> id hash once all tokens are set (tok_finish calls it too). */
em_status tok_index_vocab(em_tokenizer *t);

/* Looks up raw bytes; -1 when absent (or before tok_index_vocab). */
int32_t tok_lookup(const em_tokenizer *t, const char *s, size_t n);

/* The merge of token pair (a, b), or NULL when there is none (or before tok_finish). */
const tok_merge *tok_merge_find(const em_tokenizer *t, int32_t a, int32_t b);

/* GPT-2 byte<->unicode mapping: code point of byte b; and the byte of code point cp (-1). */
uint32_t tok_byte_to_cp(uint8_t b);
int tok_cp_to_byte(uint32_t cp);

/* Converts a GPT-2-mapped token string to raw bytes into out (capacity >= n); returns the raw
 * length, or (size_t)-1 when a character is not in the mapping. */
size_t tok_unmap_bytelevel(const char *s, size_t n, char *out);

/* Reads a whole file into a malloc'd buffer (NUL-terminated). */
em_status tok_read_file(const char *path, char **buf_out, size_t *n_out);

#endif /* EMBER_TOKENIZER_MODEL_H */
