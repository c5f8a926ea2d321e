/* chat.c: the DeepSeek-V4 chat template (chat.h). */
#include "core/http/chat.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOK_BOS "<｜begin▁of▁sentence｜>"
#define TOK_EOS "<｜end▁of▁sentence｜>"
#define TOK_USER "<｜User｜>"
#define TOK_ASSISTANT "<｜Assistant｜>"
#define TOK_NO_THINK "</think>"

int dsv4_chat_role_parse(const char *name)
{
    if (!strcmp(name, "system") || !strcmp(name, "developer"))
        return DSV4_CHAT_SYSTEM;
    if (!strcmp(name, "user"))
        return DSV4_CHAT_USER;
    if (!strcmp(name, "assistant"))
        return DSV4_CHAT_ASSISTANT;
    return -EINVAL;
}

/* Message text as ordinary text: spelled-out special tokens stay text. */
static int push_text(const dsv4_tokenizer *tok, dsv4_token_vec *out, const char *text)
{
    return dsv4_tokenizer_encode(tok, text, strlen(text), false, out);
}

static const char *failure(int rc)
{
    return rc == -ENOMEM ? "out of memory" : "text is not valid UTF-8";
}

int dsv4_chat_encode_prompt(const dsv4_tokenizer *tok, const char *text, size_t len,
                            int32_t **ids_p, size_t *n_p, char *err, size_t errlen)
{
    int32_t bos = dsv4_tokenizer_token_id(tok, TOK_BOS);
    dsv4_token_vec out = {0};
    if (bos < 0) {
        snprintf(err, errlen, "the vocabulary has no %s token", TOK_BOS);
        return -EINVAL;
    }
    int rc = dsv4_token_vec_push(&out, bos);
    if (rc == 0)
        rc = dsv4_tokenizer_encode(tok, text, len, true, &out);
    if (rc != 0) {
        snprintf(err, errlen, "%s", failure(rc));
        dsv4_token_vec_free(&out);
        return rc == -ENOMEM ? rc : -EINVAL;
    }
    *ids_p = out.ids;
    *n_p = out.n;
    return 0;
}

int dsv4_chat_encode(const dsv4_tokenizer *tok, const dsv4_chat_msg *msgs, size_t n,
                     int32_t **ids_p, size_t *n_p, char *err, size_t errlen)
{
    int32_t bos = dsv4_tokenizer_token_id(tok, TOK_BOS);
    int32_t eos = dsv4_tokenizer_token_id(tok, TOK_EOS);
    int32_t user = dsv4_tokenizer_token_id(tok, TOK_USER);
    int32_t assistant = dsv4_tokenizer_token_id(tok, TOK_ASSISTANT);
    int32_t no_think = dsv4_tokenizer_token_id(tok, TOK_NO_THINK);
    const char *missing = bos < 0         ? TOK_BOS
                          : eos < 0       ? TOK_EOS
                          : user < 0      ? TOK_USER
                          : assistant < 0 ? TOK_ASSISTANT
                                          : NULL;
    if (missing) {
        snprintf(err, errlen, "the vocabulary has no %s token for the chat template", missing);
        return -EINVAL;
    }
    dsv4_token_vec out = {0};
    int rc = dsv4_token_vec_push(&out, bos);
    /* every system message, joined, right after BOS */
    bool first = true;
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (msgs[i].role != DSV4_CHAT_SYSTEM)
            continue;
        if (!first)
            rc = push_text(tok, &out, "\n\n");
        if (rc == 0)
            rc = push_text(tok, &out, msgs[i].content);
        first = false;
    }
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (msgs[i].role == DSV4_CHAT_USER) {
            rc = dsv4_token_vec_push(&out, user);
            if (rc == 0)
                rc = push_text(tok, &out, msgs[i].content);
        } else if (msgs[i].role == DSV4_CHAT_ASSISTANT) {
            rc = dsv4_token_vec_push(&out, assistant);
            if (rc == 0 && no_think >= 0)
                rc = dsv4_token_vec_push(&out, no_think);
            if (rc == 0)
                rc = push_text(tok, &out, msgs[i].content);
            if (rc == 0)
                rc = dsv4_token_vec_push(&out, eos);
        }
    }
    /* the generation prompt: the model writes the next assistant turn */
    if (rc == 0)
        rc = dsv4_token_vec_push(&out, assistant);
    if (rc == 0 && no_think >= 0)
        rc = dsv4_token_vec_push(&out, no_think);
    if (rc != 0) {
        snprintf(err, errlen, "%s", failure(rc));
        dsv4_token_vec_free(&out);
        return rc == -ENOMEM ? rc : -EINVAL;
    }
    *ids_p = out.ids;
    *n_p = out.n;
    return 0;
}
