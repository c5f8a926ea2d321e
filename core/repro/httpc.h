/* httpc.h: a small blocking HTTP/1.1 client for talking to a dsv4d on the local host
 * (dsv4ctl repro and matrix). One request per connection ("Connection: close"), bodies
 * framed by Content-Length, chunked transfer coding or the end of the connection, and one
 * deadline for the whole exchange. It is not a general client: no TLS, no redirects, no
 * keep-alive, no proxies.
 *
 * The caller owns the response body (dsv4_httpc_response_free). */
#ifndef DSV4_CORE_REPRO_HTTPC_H
#define DSV4_CORE_REPRO_HTTPC_H

#include <stdbool.h>
#include <stddef.h>

/* Where a server is: host (a name or an address) and port, from "http://HOST:PORT[/]". */
typedef struct dsv4_httpc_url {
    char host[256];
    char port[8];
} dsv4_httpc_url;

typedef struct dsv4_httpc_response {
    int status; /* the status line's code */
    char *body; /* the decoded body, NUL-terminated (the NUL is not counted in len) */
    size_t len;
} dsv4_httpc_response;

/* Parse "http://HOST:PORT" (a trailing "/" allowed; "[v6]" hosts are taken without
 * brackets). 0, or -EINVAL when url is not of that form. */
int dsv4_httpc_url_parse(const char *url, dsv4_httpc_url *url_p);

/* Decode a whole response held in buf[0..n). eof says whether the peer has closed (only
 * then is a body without a length complete). 0 with *resp_p filled, -EAGAIN when more
 * bytes are needed, -EPROTO when buf is not an HTTP/1.x response, -ENOMEM. */
int dsv4_httpc_parse(const char *buf, size_t n, bool eof, dsv4_httpc_response *resp_p);

/* Send method path with body (NULL for none; sent as application/json) and read the
 * response, all within timeout_ms. 0 with *resp_p filled (whatever its status), or
 * -ETIMEDOUT, -ECONNREFUSED and other -errno of the socket, -EPROTO for a malformed
 * response, -ENOMEM; err says which step failed. */
int dsv4_httpc_request(const dsv4_httpc_url *url, const char *method, const char *path,
                       const char *body, size_t body_len, int timeout_ms,
                       dsv4_httpc_response *resp_p, char *err, size_t errlen);

void dsv4_httpc_response_free(dsv4_httpc_response *resp);

#endif
