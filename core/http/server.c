/* server.c: the libmicrohttpd daemon behind the HTTP API (http.h): listening, request
 * bodies and their size limit, the API key, routing, and the small endpoints (/health,
 * /v1/models, /v1/models/{id}, /metrics). Generation endpoints are in generate.c. */
#include "config.h"

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/http/http_priv.h"
#include "core/serve/metrics.h"
#include "core/util/log.h"

/* Per-request state between libmicrohttpd's calls of the access handler. */
typedef struct http_conn {
    char *body;
    size_t len, cap;
    bool too_large;
} http_conn;

/* A complete response; allow names the methods of a 405 (NULL otherwise). */
static enum MHD_Result reply(struct MHD_Connection *conn, unsigned status, const char *ctype,
                             const char *body, size_t len, const char *allow)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    if (status == MHD_HTTP_UNAUTHORIZED)
        MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    if (status == MHD_HTTP_SERVICE_UNAVAILABLE) /* overloaded or shutting down */
        MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    if (allow)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
    enum MHD_Result ret = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return ret;
}

enum MHD_Result dsv4_http_reply(struct MHD_Connection *conn, unsigned status, const char *ctype,
                                const char *body, size_t len)
{
    return reply(conn, status, ctype, body, len, NULL);
}

static enum MHD_Result reply_error(struct MHD_Connection *conn, const dsv4_api_error *err,
                                   const char *allow)
{
    dsv4_metric_add(DSV4_M_HTTP_ERRORS, 1);
    char *body = dsv4_api_error_json(err);
    if (!body)
        return MHD_NO;
    enum MHD_Result ret =
        reply(conn, (unsigned)err->status, "application/json", body, strlen(body), allow);
    free(body);
    return ret;
}

enum MHD_Result dsv4_http_reply_error(struct MHD_Connection *conn, const dsv4_api_error *err)
{
    return reply_error(conn, err, NULL);
}

static enum MHD_Result reply_json(struct MHD_Connection *conn, json_t *root)
{
    char *s = root ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(root);
    if (!s)
        return MHD_NO;
    enum MHD_Result ret = dsv4_http_reply(conn, MHD_HTTP_OK, "application/json", s, strlen(s));
    free(s);
    return ret;
}

static enum MHD_Result get_health(dsv4_http *http, struct MHD_Connection *conn)
{
    if (atomic_load(&http->quiesced)) {
        dsv4_api_error err;
        dsv4_api_fail(&err, 503, "shutting_down", NULL, "server is shutting down");
        return dsv4_http_reply_error(conn, &err);
    }
    return reply_json(conn, json_pack("{s:s}", "status", "ok"));
}

/* OpenAI's model object for the model served. */
static json_t *model_json(const dsv4_http *http)
{
    return json_pack("{s:s, s:s, s:I, s:s, s:I}", "id", http->model_id, "object", "model",
                     "created", (json_int_t)http->started, "owned_by", "dsv4d", "max_model_len",
                     (json_int_t)dsv4_server_max_context(http->srv));
}

static enum MHD_Result get_models(dsv4_http *http, struct MHD_Connection *conn)
{
    return reply_json(conn, json_pack("{s:s, s:[o]}", "object", "list", "data", model_json(http)));
}

int dsv4_http_check_model(const dsv4_http *http, const char *id, dsv4_api_error *err)
{
    if (strcmp(id, http->model_id) == 0)
        return 0;
    return dsv4_api_fail(err, 404, "model_not_found", "model",
                         "the model '%s' does not exist (this server serves '%s')", id,
                         http->model_id);
}

/* GET /v1/models/{id}: the model served, or 404 for any other id. */
static enum MHD_Result get_model(dsv4_http *http, struct MHD_Connection *conn, const char *id)
{
    dsv4_api_error err;
    if (dsv4_http_check_model(http, id, &err) != 0)
        return dsv4_http_reply_error(conn, &err);
    return reply_json(conn, model_json(http));
}

static enum MHD_Result get_metrics(dsv4_http *http, struct MHD_Connection *conn)
{
    (void)http;
    size_t len;
    char *text = dsv4_metrics_render(&len);
    if (!text)
        return MHD_NO;
    enum MHD_Result ret =
        dsv4_http_reply(conn, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", text, len);
    free(text);
    return ret;
}

typedef enum route_kind { R_HEALTH, R_MODELS, R_MODEL, R_METRICS, R_GEN } route_kind;

static const struct route {
    const char *path;
    const char *method;
    route_kind kind;
    dsv4_api_kind api; /* R_GEN */
    bool open;         /* answered without the API key (monitoring) */
    bool prefix;       /* path is followed by a name (at least one byte) */
} routes[] = {
    {"/health", "GET", R_HEALTH, 0, true, false},
    {"/metrics", "GET", R_METRICS, 0, true, false},
    {"/v1/models", "GET", R_MODELS, 0, false, false},
    {"/v1/models/", "GET", R_MODEL, 0, false, true},
    {"/v1/completions", "POST", R_GEN, DSV4_API_COMPLETION, false, false},
    {"/v1/chat/completions", "POST", R_GEN, DSV4_API_CHAT, false, false},
    {"/generate", "POST", R_GEN, DSV4_API_GENERATE, false, false},
};

static bool route_matches(const struct route *r, const char *url)
{
    size_t n = strlen(r->path);
    return r->prefix ? strncmp(url, r->path, n) == 0 && url[n] != '\0' : strcmp(url, r->path) == 0;
}

/* Compare in time that depends only on the lengths, so the key cannot be guessed byte
 * by byte from response times. */
static bool key_matches(const char *got, const char *want)
{
    size_t n = strlen(got), m = strlen(want);
    unsigned char diff = n != m;
    for (size_t i = 0; i < m; i++)
        diff |= (unsigned char)(want[i] ^ (i < n ? got[i] : 0));
    return diff == 0;
}

static bool authorized(const dsv4_http *http, struct MHD_Connection *conn)
{
    if (!http->api_key)
        return true;
    const char *h =
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    return h && strncmp(h, "Bearer ", 7) == 0 && key_matches(h + 7, http->api_key);
}

static enum MHD_Result route(dsv4_http *http, struct MHD_Connection *conn, const char *url,
                             const char *method, http_conn *hc)
{
    dsv4_api_error err;
    const struct route *r = NULL;
    const char *allow = NULL;
    for (size_t i = 0; i < sizeof(routes) / sizeof(*routes); i++) {
        if (!route_matches(&routes[i], url))
            continue;
        allow = strcmp(routes[i].method, "GET") == 0 ? "GET, HEAD" : routes[i].method;
        if (strcmp(method, routes[i].method) == 0 ||
            (strcmp(method, "HEAD") == 0 && strcmp(routes[i].method, "GET") == 0))
            r = &routes[i];
    }
    if (!allow) {
        dsv4_api_fail(&err, 404, "not_found", NULL, "no endpoint %s %s", method, url);
        return dsv4_http_reply_error(conn, &err);
    }
    if (!r) {
        dsv4_api_fail(&err, 405, "method_not_allowed", NULL, "method %s not allowed on %s", method,
                      url);
        return reply_error(conn, &err, allow);
    }
    if (!r->open && !authorized(http, conn)) {
        dsv4_api_fail(&err, 401, "invalid_api_key", NULL,
                      "missing or incorrect API key (send Authorization: Bearer KEY)");
        return dsv4_http_reply_error(conn, &err);
    }
    if (hc->too_large) {
        dsv4_api_fail(&err, 413, "request_too_large", NULL,
                      "request body is larger than the server accepts ([server] max_body = %llu "
                      "bytes)",
                      (unsigned long long)http->max_body);
        return dsv4_http_reply_error(conn, &err);
    }
    switch (r->kind) {
    case R_HEALTH: return get_health(http, conn);
    case R_MODELS: return get_models(http, conn);
    case R_MODEL: return get_model(http, conn, url + strlen(r->path));
    case R_METRICS: return get_metrics(http, conn);
    case R_GEN: return dsv4_http_generate(http, conn, r->api, hc->body ? hc->body : "", hc->len);
    }
    return MHD_NO;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    dsv4_http *http = cls;
    http_conn *hc = *con_cls;
    (void)version;
    if (!hc) {
        if (!(hc = calloc(1, sizeof(*hc))))
            return MHD_NO;
        *con_cls = hc;
        atomic_fetch_add(&http->active, 1);
        /* refuse a declared oversized body before reading it */
        const char *cl =
            MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > http->max_body)
            hc->too_large = true;
        return hc->too_large ? route(http, conn, url, method, hc) : MHD_YES;
    }
    if (*upload_data_size) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (hc->too_large || hc->len + n > http->max_body) {
            hc->too_large = true;
            return MHD_YES;
        }
        if (hc->len + n + 1 > hc->cap) {
            size_t cap = hc->cap ? hc->cap : 4096;
            while (cap < hc->len + n + 1)
                cap *= 2;
            char *p = realloc(hc->body, cap);
            if (!p)
                return MHD_NO;
            hc->body = p;
            hc->cap = cap;
        }
        memcpy(hc->body + hc->len, upload_data, n);
        hc->len += n;
        hc->body[hc->len] = '\0';
        return MHD_YES;
    }
    return route(http, conn, url, method, hc);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    dsv4_http *http = cls;
    http_conn *hc = *con_cls;
    (void)conn;
    (void)toe;
    if (!hc)
        return;
    free(hc->body);
    free(hc);
    *con_cls = NULL;
    atomic_fetch_sub(&http->active, 1);
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char line[512];
    vsnprintf(line, sizeof(line), fmt, ap);
    line[strcspn(line, "\n")] = '\0';
    dsv4_log(DSV4_LOG_DEBUG, "http", "%s", line);
}

/* "host:port" or "[v6]:port" into a socket address. 0, or -EINVAL with err filled. */
static int resolve_listen(const char *listen, struct sockaddr_storage *ss, char *err, size_t errlen)
{
    char host[256];
    const char *colon = strrchr(listen, ':');
    size_t hl = colon ? (size_t)(colon - listen) : 0;
    if (!colon || hl == 0 || hl >= sizeof(host) || !colon[1]) {
        snprintf(err, errlen, "listen address %s: expected host:port", listen);
        return -EINVAL;
    }
    memcpy(host, listen, hl);
    host[hl] = '\0';
    if (host[0] == '[' && host[hl - 1] == ']') {
        memmove(host, host + 1, hl - 2);
        host[hl - 2] = '\0';
    }
    struct addrinfo hints = {.ai_flags = AI_NUMERICSERV, .ai_socktype = SOCK_STREAM}, *ai;
    int rc = getaddrinfo(host, colon + 1, &hints, &ai);
    if (rc != 0) {
        snprintf(err, errlen, "listen address %s: %s", listen, gai_strerror(rc));
        return -EINVAL;
    }
    memcpy(ss, ai->ai_addr, ai->ai_addrlen);
    freeaddrinfo(ai);
    return 0;
}

dsv4_http *dsv4_http_start(const dsv4_server_conf *conf, dsv4_server *srv,
                           const dsv4_tokenizer *tok, const char *model_id, char *err,
                           size_t errlen)
{
    struct sockaddr_storage ss = {0};
    if (resolve_listen(conf->listen, &ss, err, errlen) != 0)
        return NULL;
    dsv4_http *http = calloc(1, sizeof(*http));
    if (!http) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    http->srv = srv;
    http->tok = tok;
    http->model_id = model_id;
    http->api_key = conf->api_key && conf->api_key[0] ? conf->api_key : NULL;
    http->max_body = conf->max_body;
    http->strict_api = conf->strict_api;
    http->started = time(NULL);
    unsigned flags = MHD_USE_AUTO | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ITC | MHD_USE_ERROR_LOG;
    if (ss.ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    /* the idle timeout is whole seconds in libmicrohttpd; round up, at least 1 */
    unsigned idle_s = (unsigned)((conf->idle_timeout_ms + 999) / 1000);
    http->daemon = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, http, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, http, MHD_OPTION_CONNECTION_TIMEOUT,
        idle_s ? idle_s : 1, MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, NULL, MHD_OPTION_END);
    if (!http->daemon) {
        snprintf(err, errlen, "cannot listen on %s (%s)", conf->listen,
                 errno ? strerror(errno) : "libmicrohttpd refused the settings");
        free(http);
        return NULL;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(http->daemon, MHD_DAEMON_INFO_BIND_PORT);
    http->port = info ? info->port : 0;
    return http;
}

uint16_t dsv4_http_port(const dsv4_http *http)
{
    return http->port;
}

void dsv4_http_quiesce(dsv4_http *http)
{
    atomic_store(&http->quiesced, true);
    MHD_socket fd = MHD_quiesce_daemon(http->daemon);
    if (fd != MHD_INVALID_SOCKET)
        close(fd);
}

void dsv4_http_stop(dsv4_http *http, uint64_t grace_ms)
{
    if (!http)
        return;
    /* responses whose request has ended are still being written: let them go out */
    struct timespec tick = {0, 10 * 1000 * 1000};
    for (uint64_t waited = 0; atomic_load(&http->active) > 0 && waited < grace_ms; waited += 10)
        nanosleep(&tick, NULL);
    MHD_stop_daemon(http->daemon);
    free(http);
}
