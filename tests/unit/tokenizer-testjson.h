/* tokenizer-testjson.h: small tokenizer.json documents for the tokenizer unit tests.
 *
 * tt_base() is a minimal valid byte-level BPE: the 256 byte tokens with id = byte value,
 * no merges, no added tokens, ByteLevel pre-tokenizer (use_regex false) and decoder. Tests
 * change it with tt_set() and load it with tt_load(). */
#ifndef DSV4_TESTS_TOKENIZER_TESTJSON_H
#define DSV4_TESTS_TOKENIZER_TESTJSON_H

#include <stddef.h>

#include <jansson.h>

#include "core/tokenizer/tokenizer.h"

json_t *tt_base(void);
/* Set the value at a dotted path of object keys ("model.vocab") to the JSON text value,
 * or delete it when value is NULL. Bails out on a bad path or value. */
void tt_set(json_t *root, const char *path, const char *value);
/* The byte-level alphabet spelling of raw text (GPT-2's bytes_to_unicode), malloc'd. */
char *tt_bytelevel(const char *raw);
/* Add a vocabulary token given as raw text (spelled in the byte-level alphabet). */
void tt_vocab_add(json_t *root, const char *raw, int id);
/* Write root to a temporary file and load it with dsv4_tokenizer_hf_load. */
dsv4_tokenizer *tt_load(const json_t *root, char *err, size_t errlen);

#endif
