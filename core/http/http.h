/* http.h: the HTTP API of dsv4d (DESIGN.md §7, dsv4d(8)): OpenAI-compatible
 * /v1/completions, /v1/chat/completions (SSE streaming or not) and /v1/models, /generate
 * with token ids, /health and /metrics, served by libmicrohttpd.
 *
 * One thread per connection (libmicrohttpd's internal polling thread accepts): a handler
 * may wait for its request's events from the serving loop without holding up other
 * clients, and watches its socket meanwhile so that a client that goes away gets its
 * request cancelled (the serving loop then frees its pages).
 *
 * The server, tokenizer and the strings in conf belong to the caller and must outlive
 * the HTTP front end.
 */
#ifndef DSV4_CORE_HTTP_H
#define DSV4_CORE_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include "core/config/config.h"
#include "core/serve/serve.h"
#include "core/tokenizer/tokenizer.h"

typedef struct dsv4_http dsv4_http;

/* Listen on conf->listen ("host:port"; port 0 picks a free one) and serve model_id.
 * NULL with the reason in err (bad address, port in use). */
dsv4_http *dsv4_http_start(const dsv4_server_conf *conf, dsv4_server *srv,
                           const dsv4_tokenizer *tok, const char *model_id, char *err,
                           size_t errlen);
/* The port actually bound (useful with port 0). */
uint16_t dsv4_http_port(const dsv4_http *http);
/* Stop accepting connections; requests already in flight keep their connections. */
void dsv4_http_quiesce(dsv4_http *http);
/* Wait up to grace_ms for in-flight requests to finish, then close every connection and
 * free the front end. Call after dsv4_server_stop, which ends every request. */
void dsv4_http_stop(dsv4_http *http, uint64_t grace_ms);

#endif
