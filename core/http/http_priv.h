/* http_priv.h: what the HTTP front end's files share: the front end itself, and the
 * reply helpers (server.c) the generation endpoints (generate.c) answer with. */
#ifndef DSV4_CORE_HTTP_PRIV_H
#define DSV4_CORE_HTTP_PRIV_H

#include <microhttpd.h>
#include <stdatomic.h>
#include <time.h>

#include "core/http/api.h"
#include "core/http/http.h"

struct dsv4_http {
    struct MHD_Daemon *daemon;
    dsv4_server *srv;
    const dsv4_tokenizer *tok;
    const char *model_id;
    const char *api_key; /* NULL when every client is accepted */
    uint64_t max_body;
    bool strict_api; /* [server] strict_api: unknown request fields are refused */
    uint16_t port;
    time_t started;    /* "created" of the model in /v1/models */
    atomic_int active; /* requests between their first byte and completion */
    atomic_bool quiesced;
};

/* Queue a complete response (body copied). */
enum MHD_Result dsv4_http_reply(struct MHD_Connection *conn, unsigned status, const char *ctype,
                                const char *body, size_t len);
/* Queue err as OpenAI's error body with its status, and count it. */
enum MHD_Result dsv4_http_reply_error(struct MHD_Connection *conn, const dsv4_api_error *err);
/* Whether id names the model served: 0, or -EINVAL with err the 404 model_not_found. */
int dsv4_http_check_model(const dsv4_http *http, const char *id, dsv4_api_error *err);

/* POST /v1/completions, /v1/chat/completions and /generate with the whole body read. */
enum MHD_Result dsv4_http_generate(dsv4_http *http, struct MHD_Connection *conn, dsv4_api_kind kind,
                                   const char *body, size_t len);

#endif
