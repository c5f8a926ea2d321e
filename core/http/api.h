/* api.h: the JSON request bodies of the HTTP API, parsed and checked before any model
 * work (OpenAI's /v1/completions and /v1/chat/completions, and /generate).
 *
 * What is checked here is what the body alone decides: JSON syntax, field types and
 * ranges, unsupported options. What needs the model (token ids in the vocabulary, prompt
 * plus max_tokens within the context) is checked by the caller once the prompt is
 * tokenised. Every refusal is an OpenAI-style error: an HTTP status, a type
 * ("invalid_request_error"), a message, the offending parameter and a code.
 *
 * A parsed request keeps the JSON document; the strings it points to (prompt, message
 * contents, stop strings, model) live until dsv4_api_request_free.
 */
#ifndef DSV4_CORE_HTTP_API_H
#define DSV4_CORE_HTTP_API_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/http/chat.h"
#include "core/serve/serve.h"

#define DSV4_API_MAX_STOPS 16
/* Top-level field names the parser notes as read (strict parsing), at most. */
#define DSV4_API_MAX_FIELDS 96
/* Choices (n) one request may ask for: each is a request of the serving loop. */
#define DSV4_API_MAX_CHOICES 16
/* logit_bias entries a request may name */
#define DSV4_API_MAX_LOGIT_BIAS 1024

typedef enum dsv4_api_kind {
    DSV4_API_COMPLETION, /* POST /v1/completions */
    DSV4_API_CHAT,       /* POST /v1/chat/completions */
    DSV4_API_GENERATE,   /* POST /generate: token ids in and out */
} dsv4_api_kind;

typedef struct dsv4_api_error {
    int status;       /* HTTP status */
    const char *type; /* "invalid_request_error", "authentication_error", ... */
    const char *code; /* machine-readable code or NULL */
    char param[64];   /* the offending field, or "" */
    char message[512];
} dsv4_api_error;

typedef struct dsv4_api_request {
    dsv4_api_kind kind;
    json_t *root;
    const char *model;  /* NULL when absent */
    const char *prompt; /* completions: a text prompt, else NULL */
    size_t prompt_len;
    int32_t *prompt_ids; /* completions (array form) and /generate, else NULL */
    size_t n_prompt_ids;
    dsv4_chat_msg *messages; /* chat */
    size_t n_messages;
    bool has_max_tokens;    /* max_tokens (or max_completion_tokens) was given */
    dsv4_gen_params params; /* max_tokens only meaningful when has_max_tokens */
    const char *stop[DSV4_API_MAX_STOPS];
    size_t n_stop;
    dsv4_logit_bias *logit_bias; /* params.logit_bias points here (token ids not yet checked
                                    against the vocabulary) */
    bool stream;
    bool include_usage; /* stream_options.include_usage */
    bool echo;          /* completions: the answer's text starts with the prompt's */
    uint32_t n_choices; /* n: choices to generate (1 for /generate) */
    /* the top-level field names the parser looked at, present or not */
    const char *read[DSV4_API_MAX_FIELDS];
    size_t n_read;
} dsv4_api_request;

/* Parse body (len bytes, not necessarily NUL-terminated) for an endpoint. 0 and req
 * filled (free it with dsv4_api_request_free), or -EINVAL with err filled (req needs no
 * freeing). strict ([server] strict_api): a top-level field the endpoint does not read is
 * refused (400 unknown_parameter) rather than ignored. */
int dsv4_api_parse(dsv4_api_kind kind, const char *body, size_t len, bool strict,
                   dsv4_api_request *req, dsv4_api_error *err);
void dsv4_api_request_free(dsv4_api_request *req);

/* Fill err; returns -EINVAL so callers can `return dsv4_api_fail(...)`. */
int dsv4_api_fail(dsv4_api_error *err, int status, const char *code, const char *param,
                  const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* The error as OpenAI's body: {"error":{"message","type","param","code"}}, malloc'd
 * (NULL on out of memory). */
char *dsv4_api_error_json(const dsv4_api_error *err);

#endif
