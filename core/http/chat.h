/* chat.h: chat messages to prompt token ids, the way DeepSeek-V4 checkpoints expect.
 *
 * The DeepSeek-V3.1+/V4 template in its non-thinking ("chat") mode, with no newlines
 * between turns:
 *
 *   <｜begin▁of▁sentence｜>{system}<｜User｜>{user}<｜Assistant｜></think>{reply}<｜end▁of▁sentence｜>
 *   <｜User｜>{user}<｜Assistant｜></think>
 *
 * System (and developer) messages are joined with "\n\n" and go right after BOS wherever
 * they appear; the prompt ends with the assistant marker so the model answers. `</think>`
 * marks "no reasoning" in vocabularies that have it (V3.1 and later); a vocabulary
 * without it (V3) gets the V3 template, which is the same without that token. Message
 * text is tokenised as plain text: a message cannot smuggle in special tokens by
 * spelling them. Synthetic byte-level models use the same template with their own
 * special tokens (see tokenizer.h).
 */
#ifndef DSV4_CORE_HTTP_CHAT_H
#define DSV4_CORE_HTTP_CHAT_H

#include <stddef.h>
#include <stdint.h>

#include "core/tokenizer/tokenizer.h"

typedef enum dsv4_chat_role {
    DSV4_CHAT_SYSTEM, /* "system" and "developer" */
    DSV4_CHAT_USER,
    DSV4_CHAT_ASSISTANT,
} dsv4_chat_role;

typedef struct dsv4_chat_msg {
    dsv4_chat_role role;
    char *content;
} dsv4_chat_msg;

/* The role named by an OpenAI "role" string, or -EINVAL. */
int dsv4_chat_role_parse(const char *name);

/* A /v1/completions text prompt: BOS, then the text with special tokens written in it
 * recognised (a raw prompt may spell out a template itself). 0 with *ids_p (malloc'd)
 * and *n_p, or -EINVAL / -ENOMEM with the reason in err. */
int dsv4_chat_encode_prompt(const dsv4_tokenizer *tok, const char *text, size_t len,
                            int32_t **ids_p, size_t *n_p, char *err, size_t errlen);
/* Encode msgs[0..n) with the generation prompt. 0 with *ids_p (malloc'd) and *n_p, or
 * -EINVAL (the vocabulary lacks a template token, or the tokenizer failed) / -ENOMEM with
 * the reason in err. */
int dsv4_chat_encode(const dsv4_tokenizer *tok, const dsv4_chat_msg *msgs, size_t n,
                     int32_t **ids_p, size_t *n_p, char *err, size_t errlen);

#endif
