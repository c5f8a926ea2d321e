/* api.c: parsing and checking the JSON request bodies of the HTTP API (api.h). */
#include "core/http/api.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "core/tokenizer/utf8.h"
#include "core/util/clock.h"

/* The message quotes the client's bytes (jansson's error text, field names) and vsnprintf
 * may cut it inside a sequence; JSON strings must be UTF-8, so every byte that is not part
 * of a well-formed sequence becomes '?' (else the refusal could not be sent at all). */
static void utf8_scrub(char *s)
{
    size_t len = strlen(s);
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        size_t n = dsv4_utf8_decode(s + i, len - i, &cp);
        if (n == 0) {
            s[i] = '?';
            n = 1;
        }
        i += n;
    }
}

int dsv4_api_fail(dsv4_api_error *err, int status, const char *code, const char *param,
                  const char *fmt, ...)
{
    va_list ap;
    err->status = status;
    err->type = status == 401   ? "authentication_error"
                : status >= 500 ? "server_error"
                                : "invalid_request_error";
    err->code = code;
    snprintf(err->param, sizeof(err->param), "%s", param ? param : "");
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof(err->message), fmt, ap);
    va_end(ap);
    utf8_scrub(err->param);
    utf8_scrub(err->message);
    return -EINVAL;
}

char *dsv4_api_error_json(const dsv4_api_error *err)
{
    json_t *root =
        json_pack("{s:{s:s, s:s, s:o, s:o}}", "error", "message", err->message, "type", err->type,
                  "param", err->param[0] ? json_string(err->param) : json_null(), "code",
                  err->code ? json_string(err->code) : json_null());
    if (!root)
        return NULL;
    char *s = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    return s;
}

void dsv4_api_request_free(dsv4_api_request *req)
{
    for (size_t i = 0; i < req->n_messages; i++)
        free(req->messages[i].content);
    free(req->messages);
    free(req->prompt_ids);
    free(req->logit_bias);
    json_decref(req->root);
    memset(req, 0, sizeof(*req));
}

/* A field of obj, with JSON null read as absent (clients send null for unset options). The
 * names read of the request's own object are noted for strict parsing (unread_field). */
static json_t *field(dsv4_api_request *req, json_t *obj, const char *name)
{
    if (obj == req->root && req->n_read < DSV4_API_MAX_FIELDS)
        req->read[req->n_read++] = name;
    json_t *v = json_object_get(obj, name);
    return json_is_null(v) ? NULL : v;
}

static int want_bool(dsv4_api_request *req, json_t *root, const char *name, bool *out,
                     dsv4_api_error *err)
{
    json_t *v = field(req, root, name);
    if (!v)
        return 0;
    if (!json_is_boolean(v))
        return dsv4_api_fail(err, 400, "invalid_type", name, "%s must be a boolean", name);
    *out = json_is_true(v);
    return 0;
}

static int want_number(dsv4_api_request *req, json_t *root, const char *name, double lo, double hi,
                       double *out, dsv4_api_error *err)
{
    json_t *v = field(req, root, name);
    if (!v)
        return 0;
    if (!json_is_number(v))
        return dsv4_api_fail(err, 400, "invalid_type", name, "%s must be a number", name);
    double d = json_number_value(v);
    if (!(d >= lo && d <= hi))
        return dsv4_api_fail(err, 400, "invalid_value", name,
                             "%s must be between %g and %g (got %g)", name, lo, hi, d);
    *out = d;
    return 0;
}

static int want_int(dsv4_api_request *req, json_t *root, const char *name, json_int_t lo,
                    json_int_t hi, json_int_t *out, dsv4_api_error *err)
{
    json_t *v = field(req, root, name);
    if (!v)
        return 0;
    if (!json_is_integer(v))
        return dsv4_api_fail(err, 400, "invalid_type", name, "%s must be an integer", name);
    json_int_t i = json_integer_value(v);
    if (i < lo || i > hi)
        return dsv4_api_fail(err, 400, "invalid_value", name,
                             "%s must be between %lld and %lld (got %lld)", name, (long long)lo,
                             (long long)hi, (long long)i);
    *out = i;
    return 0;
}

static bool is_false(json_t *v)
{
    return json_is_false(v);
}

static bool is_empty_array(json_t *v)
{
    return json_is_array(v) && json_array_size(v) == 0;
}

static bool is_empty_string(json_t *v)
{
    return json_is_string(v) && json_string_length(v) == 0;
}

static bool is_no_tool(json_t *v)
{
    return json_is_string(v) &&
           (!strcmp(json_string_value(v), "none") || !strcmp(json_string_value(v), "auto"));
}

static bool is_text_format(json_t *v)
{
    json_t *type = json_is_object(v) ? json_object_get(v, "type") : NULL;
    return json_is_string(type) && !strcmp(json_string_value(type), "text") &&
           json_object_size(v) == 1;
}

static bool is_number_one(json_t *v)
{
    return json_is_number(v) && json_number_value(v) == 1;
}

static bool is_number_zero(json_t *v)
{
    return json_is_number(v) && json_number_value(v) == 0;
}

/* Options OpenAI's API (or vLLM's, which clients send too) names but dsv4d does not
 * implement: accepted at their neutral value only, refused otherwise rather than silently
 * ignored, since each would change the answer. */
static const struct {
    const char *name;
    bool (*neutral)(json_t *v);
    const char *why;
} unsupported[] = {
    {"suffix", is_empty_string, "suffix is not supported"},
    {"tools", is_empty_array, "tools are not supported"},
    {"functions", is_empty_array, "functions are not supported"},
    {"tool_choice", is_no_tool, "tool_choice must be none or auto (tools are not supported)"},
    {"function_call", is_no_tool,
     "function_call must be none or auto (functions are not supported)"},
    {"response_format", is_text_format,
     "response_format must be {\"type\": \"text\"} (structured output is not supported)"},
    {"repetition_penalty", is_number_one,
     "repetition_penalty must be 1 (presence_penalty and frequency_penalty are supported)"},
    {"min_p", is_number_zero, "min_p must be 0 (use top_p or top_k)"},
};

static int check_unsupported(dsv4_api_request *req, dsv4_api_error *err)
{
    for (size_t i = 0; i < sizeof(unsupported) / sizeof(*unsupported); i++) {
        json_t *v = field(req, req->root, unsupported[i].name);
        if (v && !unsupported[i].neutral(v))
            return dsv4_api_fail(err, 400, "unsupported_parameter", unsupported[i].name, "%s",
                                 unsupported[i].why);
    }
    return 0;
}

static int parse_ids(json_t *arr, const char *name, dsv4_api_request *req, dsv4_api_error *err)
{
    size_t n = json_array_size(arr);
    if (n == 0)
        return dsv4_api_fail(err, 400, "invalid_value", name, "%s must not be empty", name);
    req->prompt_ids = malloc(n * sizeof(*req->prompt_ids));
    if (!req->prompt_ids)
        return dsv4_api_fail(err, 500, NULL, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(arr, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX)
            return dsv4_api_fail(err, 400, "invalid_value", name,
                                 "%s[%zu] must be a non-negative token id", name, i);
        req->prompt_ids[i] = (int32_t)json_integer_value(v);
    }
    req->n_prompt_ids = n;
    return 0;
}

static int parse_prompt(dsv4_api_request *req, dsv4_api_error *err)
{
    json_t *v = field(req, req->root, "prompt");
    if (!v)
        return dsv4_api_fail(err, 400, "missing_required_parameter", "prompt",
                             "prompt is required");
    if (json_is_string(v)) {
        if (json_string_length(v) == 0)
            return dsv4_api_fail(err, 400, "invalid_value", "prompt", "prompt must not be empty");
        req->prompt = json_string_value(v);
        req->prompt_len = json_string_length(v);
        return 0;
    }
    /* a batch of prompts (["a", "b"] or [[1,2],[3]]) would need n choices; a batch of one
     * (what lm-evaluation-harness sends) is that prompt */
    json_t *first = json_array_get(v, 0);
    if (json_is_array(v) && json_array_size(v) == 1 && json_is_string(first)) {
        req->prompt = json_string_value(first);
        req->prompt_len = json_string_length(first);
        return req->prompt_len
                   ? 0
                   : dsv4_api_fail(err, 400, "invalid_value", "prompt", "prompt must not be empty");
    }
    if (json_is_array(v) && !json_is_array(first) && !json_is_string(first))
        return parse_ids(v, "prompt", req, err);
    if (json_is_array(v) && json_array_size(v) == 1) /* [[1,2]]: one prompt of ids */
        return parse_ids(first, "prompt", req, err);
    return dsv4_api_fail(err, 400, "invalid_type", "prompt",
                         "prompt must be a string or an array of token ids (one prompt per "
                         "request)");
}

/* content: a string, or an array of {"type":"text","text":...} parts joined. */
static int parse_content(json_t *c, size_t i, char **out, dsv4_api_error *err)
{
    char param[64];
    snprintf(param, sizeof(param), "messages[%zu].content", i);
    if (!c || json_is_string(c)) {
        *out = strdup(c ? json_string_value(c) : "");
        return *out ? 0 : dsv4_api_fail(err, 500, NULL, NULL, "out of memory");
    }
    if (!json_is_array(c))
        return dsv4_api_fail(err, 400, "invalid_type", param,
                             "%s must be a string or an array of text parts", param);
    size_t total = 1, k;
    json_t *part;
    json_array_foreach(c, k, part)
    {
        json_t *t = json_object_get(part, "text");
        if (!json_is_object(part) || !json_is_string(json_object_get(part, "type")) ||
            strcmp(json_string_value(json_object_get(part, "type")), "text") != 0 ||
            !json_is_string(t))
            return dsv4_api_fail(err, 400, "invalid_value", param,
                                 "%s[%zu] must be a text part ({\"type\":\"text\",\"text\":...})",
                                 param, k);
        total += json_string_length(t);
    }
    if (!(*out = malloc(total)))
        return dsv4_api_fail(err, 500, NULL, NULL, "out of memory");
    size_t at = 0;
    json_array_foreach(c, k, part)
    {
        json_t *t = json_object_get(part, "text");
        memcpy(*out + at, json_string_value(t), json_string_length(t));
        at += json_string_length(t);
    }
    (*out)[at] = '\0';
    return 0;
}

static int parse_messages(dsv4_api_request *req, dsv4_api_error *err)
{
    json_t *arr = field(req, req->root, "messages");
    if (!arr)
        return dsv4_api_fail(err, 400, "missing_required_parameter", "messages",
                             "messages is required");
    if (!json_is_array(arr) || json_array_size(arr) == 0)
        return dsv4_api_fail(err, 400, "invalid_value", "messages",
                             "messages must be a non-empty array");
    size_t n = json_array_size(arr);
    req->messages = calloc(n, sizeof(*req->messages));
    if (!req->messages)
        return dsv4_api_fail(err, 500, NULL, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(arr, i);
        json_t *role = json_is_object(m) ? json_object_get(m, "role") : NULL;
        char param[64];
        snprintf(param, sizeof(param), "messages[%zu].role", i);
        if (!json_is_string(role))
            return dsv4_api_fail(err, 400, "invalid_value", param,
                                 "messages[%zu] must be an object with a string role", i);
        int r = dsv4_chat_role_parse(json_string_value(role));
        if (r < 0)
            return dsv4_api_fail(err, 400, "invalid_value", param,
                                 "%s must be system, developer, user or assistant (got '%s')",
                                 param, json_string_value(role));
        req->messages[i].role = (dsv4_chat_role)r;
        int rc = parse_content(field(req, m, "content"), i, &req->messages[i].content, err);
        req->n_messages = i + 1; /* so that free releases what was allocated */
        if (rc != 0)
            return rc;
    }
    return 0;
}

static int parse_stop(dsv4_api_request *req, dsv4_api_error *err)
{
    json_t *v = field(req, req->root, "stop");
    if (!v)
        return 0;
    if (json_is_string(v)) {
        req->stop[req->n_stop++] = json_string_value(v);
    } else if (json_is_array(v) && json_array_size(v) <= DSV4_API_MAX_STOPS) {
        size_t i;
        json_t *s;
        json_array_foreach(v, i, s)
        {
            if (!json_is_string(s))
                return dsv4_api_fail(err, 400, "invalid_type", "stop",
                                     "stop must be a string or an array of strings");
            req->stop[req->n_stop++] = json_string_value(s);
        }
    } else {
        return dsv4_api_fail(err, 400, "invalid_type", "stop",
                             "stop must be a string or an array of at most %d strings",
                             DSV4_API_MAX_STOPS);
    }
    for (size_t i = 0; i < req->n_stop; i++)
        if (!req->stop[i][0])
            return dsv4_api_fail(err, 400, "invalid_value", "stop",
                                 "stop strings must not be empty");
    return 0;
}

/* logit_bias: an object of token ids (decimal strings, no sign or leading zero, so each
 * id is named once) to biases from -100 to 100. */
static int parse_logit_bias(dsv4_api_request *req, dsv4_api_error *err)
{
    json_t *lb = field(req, req->root, "logit_bias");
    if (!lb)
        return 0;
    if (!json_is_object(lb))
        return dsv4_api_fail(err, 400, "invalid_type", "logit_bias",
                             "logit_bias must be an object of token ids to biases");
    size_t n = json_object_size(lb);
    if (n > DSV4_API_MAX_LOGIT_BIAS)
        return dsv4_api_fail(err, 400, "invalid_value", "logit_bias",
                             "logit_bias names %zu tokens (at most %d)", n,
                             DSV4_API_MAX_LOGIT_BIAS);
    if (n == 0)
        return 0;
    if (!(req->logit_bias = malloc(n * sizeof(*req->logit_bias))))
        return dsv4_api_fail(err, 500, NULL, NULL, "out of memory");
    const char *key;
    json_t *v;
    size_t i = 0;
    json_object_foreach(lb, key, v)
    {
        size_t len = strlen(key);
        bool canonical =
            len > 0 && len <= 10 && strspn(key, "0123456789") == len && (key[0] != '0' || len == 1);
        unsigned long long id = canonical ? strtoull(key, NULL, 10) : 0;
        if (!canonical || id > INT32_MAX)
            return dsv4_api_fail(err, 400, "invalid_value", "logit_bias",
                                 "logit_bias key '%s' is not a token id", key);
        if (!json_is_number(v) || !(json_number_value(v) >= -100 && json_number_value(v) <= 100))
            return dsv4_api_fail(err, 400, "invalid_value", "logit_bias",
                                 "logit_bias[%s] must be a number from -100 to 100", key);
        req->logit_bias[i++] = (dsv4_logit_bias){(int32_t)id, (float)json_number_value(v)};
    }
    req->params.logit_bias = req->logit_bias;
    req->params.n_logit_bias = (uint32_t)n;
    return 0;
}

/* The sampling and length options every endpoint shares. */
/* n, and best_of, which may only repeat it (choices are not ranked): 1 on /generate, whose
 * answer has no list of choices. */
static int parse_choices(dsv4_api_request *req, dsv4_api_error *err)
{
    json_int_t n = 1, best_of = 0;
    int rc = want_int(req, req->root, "n", 1, DSV4_API_MAX_CHOICES, &n, err);
    if (rc == 0)
        rc = want_int(req, req->root, "best_of", 1, DSV4_API_MAX_CHOICES, &best_of, err);
    if (rc)
        return rc;
    if (best_of && best_of != n)
        return dsv4_api_fail(err, 400, "unsupported_parameter", "best_of",
                             "best_of must equal n (choices are not ranked)");
    if (n > 1 && req->kind == DSV4_API_GENERATE)
        return dsv4_api_fail(err, 400, "unsupported_parameter", "n",
                             "n must be 1 on /generate (its answer holds one output)");
    req->n_choices = (uint32_t)n;
    return 0;
}

/* The seed of a request that names none: fresh bits from the kernel, so that two unseeded
 * sampled requests do not give the same text (OpenAI's behaviour). Should the kernel have
 * no entropy to give at once, the clock's nanoseconds mixed with a process-wide count
 * (splitmix64's finaliser): distinct for every request of the process. */
static uint64_t fresh_seed(void)
{
    uint64_t s;
    if (getrandom(&s, sizeof(s), GRND_NONBLOCK) == (ssize_t)sizeof(s))
        return s;
    static _Atomic uint64_t count;
    s = dsv4_now_ns() + 0x9e3779b97f4a7c15ull * ++count;
    s = (s ^ (s >> 30)) * 0xbf58476d1ce4e5b9ull;
    s = (s ^ (s >> 27)) * 0x94d049bb133111ebull;
    return s ^ (s >> 31);
}

static int parse_params(dsv4_api_request *req, dsv4_api_error *err)
{
    json_t *root = req->root;
    dsv4_gen_params *p = &req->params;
    double temperature = 1.0, top_p = 1.0, presence = 0, frequency = 0;
    json_int_t max_tokens = 0, top_k = 0, seed = 0, priority = 0;
    int rc = 0;
    const char *max_name =
        field(req, root, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    req->has_max_tokens = field(req, root, max_name) != NULL;
    if ((rc = want_int(req, root, max_name, 0, INT32_MAX, &max_tokens, err)) ||
        (rc = want_number(req, root, "temperature", 0, 2, &temperature, err)) ||
        (rc = want_number(req, root, "top_p", 0, 1, &top_p, err)) ||
        (rc = want_int(req, root, "top_k", -1, INT32_MAX, &top_k, err)) ||
        (rc = want_number(req, root, "presence_penalty", -2, 2, &presence, err)) ||
        (rc = want_number(req, root, "frequency_penalty", -2, 2, &frequency, err)) ||
        (rc = want_int(req, root, "seed", INT64_MIN, INT64_MAX, &seed, err)) ||
        (rc = want_int(req, root, "priority", INT32_MIN, INT32_MAX, &priority, err)) ||
        (rc = want_bool(req, root, "ignore_eos", &p->ignore_eos, err)) ||
        (rc = want_bool(req, root, "stream", &req->stream, err)))
        return rc;
    if (top_p == 0)
        return dsv4_api_fail(err, 400, "invalid_value", "top_p", "top_p must be above 0");
    p->max_tokens = (uint32_t)max_tokens;
    p->temperature = (float)temperature;
    p->top_p = (float)top_p;
    p->top_k = top_k < 0 ? 0 : (uint32_t)top_k; /* -1 is vLLM's "off" */
    p->presence_penalty = (float)presence;
    p->frequency_penalty = (float)frequency;
    if ((rc = parse_logit_bias(req, err)))
        return rc;
    json_t *given = field(req, root, "seed"); /* null, as other options, means absent */
    p->seed = given && !json_is_null(given) ? (uint64_t)seed : fresh_seed();
    p->priority = (int32_t)priority;

    json_t *so = field(req, root, "stream_options");
    if (so) {
        if (!json_is_object(so))
            return dsv4_api_fail(err, 400, "invalid_type", "stream_options",
                                 "stream_options must be an object");
        if ((rc = want_bool(req, so, "include_usage", &req->include_usage, err)))
            return rc;
    }
    /* logprobs: a boolean for chat and /generate, with top_logprobs alternatives; for
     * completions the number of alternatives (0 = the sampled token's logprob only) */
    json_int_t top = 0;
    if (req->kind == DSV4_API_COMPLETION) {
        json_t *tl = field(req, root, "top_logprobs");
        if (tl && !is_number_zero(tl))
            return dsv4_api_fail(err, 400, "unsupported_parameter", "top_logprobs",
                                 "completions take the number of alternatives in logprobs");
        if ((rc = want_int(req, root, "logprobs", 0, DSV4_TOP_LOGPROBS_MAX, &top, err)))
            return rc;
        p->logprobs = field(req, root, "logprobs") != NULL;
    } else {
        if ((rc = want_bool(req, root, "logprobs", &p->logprobs, err)) ||
            (rc = want_int(req, root, "top_logprobs", 0, DSV4_TOP_LOGPROBS_MAX, &top, err)))
            return rc;
        if (top && !p->logprobs)
            return dsv4_api_fail(err, 400, "invalid_value", "top_logprobs",
                                 "top_logprobs needs logprobs set to true");
    }
    p->top_logprobs = (uint32_t)top;
    /* the prompt's own logprobs: completions' echo (with logprobs, the lists open with the
     * prompt's tokens), /generate's input_logprobs */
    if (req->kind == DSV4_API_COMPLETION) {
        if ((rc = want_bool(req, root, "echo", &req->echo, err)))
            return rc;
        p->prompt_logprobs = req->echo && p->logprobs;
    } else if (req->kind == DSV4_API_GENERATE) {
        if ((rc = want_bool(req, root, "input_logprobs", &p->prompt_logprobs, err)))
            return rc;
    }
    json_t *echo = field(req, root, "echo");
    if (req->kind != DSV4_API_COMPLETION && echo && !is_false(echo))
        return dsv4_api_fail(err, 400, "unsupported_parameter", "echo",
                             "echo is only supported on /v1/completions");
    /* nothing to generate makes sense only for the prompt's echo (and its logprobs) */
    if (req->has_max_tokens && max_tokens == 0 && !req->echo)
        return dsv4_api_fail(err, 400, "invalid_value", max_name,
                             "%s must be at least 1 (0 only with echo)", max_name);
    if ((rc = parse_choices(req, err)))
        return rc;
    return parse_stop(req, err);
}

/* Fields OpenAI's API takes that change nothing in the answer: accepted in strict parsing
 * too. */
static const char *const no_effect[] = {"user", "metadata", "store", "service_tier",
                                        "parallel_tool_calls"};

/* The first top-level field of the request that no parsing step read and that is not one
 * of no_effect, or NULL. */
static const char *unread_field(const dsv4_api_request *req)
{
    const char *key;
    json_t *v;
    json_object_foreach(req->root, key, v)
    {
        bool read = false;
        for (size_t i = 0; i < sizeof(no_effect) / sizeof(*no_effect) && !read; i++)
            read = strcmp(no_effect[i], key) == 0;
        for (size_t i = 0; i < req->n_read && !read; i++)
            read = strcmp(req->read[i], key) == 0;
        if (!read)
            return key;
    }
    return NULL;
}

int dsv4_api_parse(dsv4_api_kind kind, const char *body, size_t len, bool strict,
                   dsv4_api_request *req, dsv4_api_error *err)
{
    json_error_t jerr;
    memset(req, 0, sizeof(*req));
    req->kind = kind;
    req->root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!req->root)
        return dsv4_api_fail(err, 400, "invalid_json", NULL,
                             "request body is not valid JSON (%s at line %d column %d)", jerr.text,
                             jerr.line, jerr.column);
    int rc;
    if (!json_is_object(req->root)) {
        rc = dsv4_api_fail(err, 400, "invalid_json", NULL, "request body must be a JSON object");
        goto free_req;
    }
    json_t *model = field(req, req->root, "model");
    if (model && !json_is_string(model)) {
        rc = dsv4_api_fail(err, 400, "invalid_type", "model", "model must be a string");
        goto free_req;
    }
    req->model = model ? json_string_value(model) : NULL;
    if ((rc = check_unsupported(req, err)) || (rc = parse_params(req, err)))
        goto free_req;
    switch (kind) {
    case DSV4_API_COMPLETION: rc = parse_prompt(req, err); break;
    case DSV4_API_CHAT: rc = parse_messages(req, err); break;
    case DSV4_API_GENERATE: {
        json_t *ids = field(req, req->root, "input_ids");
        if (!ids)
            rc = dsv4_api_fail(err, 400, "missing_required_parameter", "input_ids",
                               "input_ids is required");
        else if (!json_is_array(ids))
            rc = dsv4_api_fail(err, 400, "invalid_type", "input_ids",
                               "input_ids must be an array of token ids");
        else if (req->stream)
            rc = dsv4_api_fail(err, 400, "unsupported_parameter", "stream",
                               "stream is not supported on /generate");
        else
            rc = parse_ids(ids, "input_ids", req, err);
        break;
    }
    }
    const char *unread = rc == 0 && strict ? unread_field(req) : NULL;
    if (unread)
        rc = dsv4_api_fail(err, 400, "unknown_parameter", unread,
                           "unrecognized request argument: %s ([server] strict_api refuses what "
                           "dsv4d does not read)",
                           unread);
    if (rc == 0)
        return 0;
free_req:
    dsv4_api_request_free(req);
    return rc;
}
