/* httpc.c: the blocking HTTP/1.1 client of dsv4ctl repro and matrix (httpc.h).
 *
 * The socket is non-blocking and every wait is a poll() bounded by what is left of the
 * request's one deadline, so a server that accepts and then says nothing costs the caller
 * timeout_ms and no more. The response is read whole into memory and decoded by
 * dsv4_httpc_parse, which the tests drive directly with hand-written bytes. */
#include "config.h"

#include "core/repro/httpc.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/util/clock.h"

int dsv4_httpc_url_parse(const char *url, dsv4_httpc_url *url_p)
{
    const char *p = url;
    if (strncmp(p, "http://", 7) != 0)
        return -EINVAL;
    p += 7;
    const char *host = p, *host_end;
    if (*p == '[') {
        host = ++p;
        if (!(host_end = strchr(p, ']')))
            return -EINVAL;
        p = host_end + 1;
    } else {
        host_end = strchr(p, ':');
        if (!host_end)
            return -EINVAL;
        p = host_end;
    }
    if (*p != ':' || host_end == host || (size_t)(host_end - host) >= sizeof(url_p->host))
        return -EINVAL;
    const char *port = ++p;
    while (*p >= '0' && *p <= '9')
        p++;
    size_t plen = (size_t)(p - port);
    if (plen == 0 || plen > 5 || atoi(port) < 1 || atoi(port) > 65535 ||
        !(p[0] == '\0' || (p[0] == '/' && p[1] == '\0')))
        return -EINVAL;
    memcpy(url_p->host, host, (size_t)(host_end - host));
    url_p->host[host_end - host] = '\0';
    memcpy(url_p->port, port, plen);
    url_p->port[plen] = '\0';
    return 0;
}

void dsv4_httpc_response_free(dsv4_httpc_response *resp)
{
    free(resp->body);
    resp->body = NULL;
    resp->len = 0;
}

/* The value of header name in the header block [h, end), or NULL. *len_p its length. */
static const char *header_value(const char *h, const char *end, const char *name, size_t *len_p)
{
    size_t nl = strlen(name);
    while (h < end) {
        const char *eol = memchr(h, '\n', (size_t)(end - h));
        if (!eol)
            eol = end;
        if ((size_t)(eol - h) > nl && h[nl] == ':' && strncasecmp(h, name, nl) == 0) {
            const char *v = h + nl + 1, *ve = eol;
            while (v < ve && (*v == ' ' || *v == '\t'))
                v++;
            while (ve > v && (ve[-1] == '\r' || ve[-1] == ' ' || ve[-1] == '\t'))
                ve--;
            *len_p = (size_t)(ve - v);
            return v;
        }
        h = eol + 1;
    }
    return NULL;
}

static int body_copy(const char *p, size_t n, dsv4_httpc_response *resp)
{
    resp->body = malloc(n + 1);
    if (!resp->body)
        return -ENOMEM;
    memcpy(resp->body, p, n);
    resp->body[n] = '\0';
    resp->len = n;
    return 0;
}

/* Decode a chunked body from [p, end): 0, -EAGAIN (incomplete) or -EPROTO. */
static int parse_chunked(const char *p, const char *end, dsv4_httpc_response *resp)
{
    /* two passes: the first checks framing and sizes the body, the second copies */
    for (int pass = 0; pass < 2; pass++) {
        const char *q = p;
        size_t total = 0;
        for (;;) {
            const char *eol = memchr(q, '\n', (size_t)(end - q));
            if (!eol)
                return -EAGAIN;
            char *num_end;
            errno = 0;
            unsigned long long size = strtoull(q, &num_end, 16);
            if (num_end == q || errno || size > SIZE_MAX / 2 ||
                !(*num_end == '\r' || *num_end == ';' || *num_end == '\n'))
                return -EPROTO;
            q = eol + 1;
            if (size == 0) {
                /* trailers (none expected) end with an empty line */
                for (;;) {
                    const char *t = memchr(q, '\n', (size_t)(end - q));
                    if (!t)
                        return -EAGAIN;
                    bool empty = t == q || (t == q + 1 && *q == '\r');
                    q = t + 1;
                    if (empty)
                        break;
                }
                break;
            }
            if ((size_t)(end - q) < size + 2)
                return -EAGAIN;
            if (pass == 1)
                memcpy(resp->body + total, q, size);
            total += size;
            q += size;
            if (q[0] == '\r')
                q++;
            if (q[0] != '\n')
                return -EPROTO;
            q++;
        }
        if (pass == 0) {
            if (!(resp->body = malloc(total + 1)))
                return -ENOMEM;
        } else {
            resp->body[total] = '\0';
            resp->len = total;
        }
    }
    return 0;
}

int dsv4_httpc_parse(const char *buf, size_t n, bool eof, dsv4_httpc_response *resp_p)
{
    const char *end = buf + n;
    int status, off = 0;
    if (n < 12)
        return eof ? -EPROTO : -EAGAIN;
    if (sscanf(buf, "HTTP/1.%*1[01] %3d%n", &status, &off) != 1 || off != 12 || status < 100)
        return -EPROTO;
    const char *hdr_end = NULL;
    for (const char *p = buf; p + 1 < end; p++) {
        if (p[0] == '\n' && p[1] == '\n') {
            hdr_end = p + 2;
            break;
        }
        if (p + 3 < end && p[0] == '\r' && p[1] == '\n' && p[2] == '\r' && p[3] == '\n') {
            hdr_end = p + 4;
            break;
        }
    }
    if (!hdr_end)
        return eof ? -EPROTO : -EAGAIN;
    dsv4_httpc_response r = {.status = status};
    size_t vlen;
    const char *te = header_value(buf, hdr_end, "Transfer-Encoding", &vlen);
    bool chunked = te && vlen >= 7 && strncasecmp(te + vlen - 7, "chunked", 7) == 0;
    const char *cl = header_value(buf, hdr_end, "Content-Length", &vlen);
    int rc;
    if (chunked) {
        rc = parse_chunked(hdr_end, end, &r);
        if (rc == -EAGAIN && eof)
            rc = -EPROTO;
    } else if (cl) {
        char *num_end;
        errno = 0;
        unsigned long long want = strtoull(cl, &num_end, 10);
        if (num_end == cl || errno || (size_t)(num_end - cl) != vlen)
            return -EPROTO;
        if ((size_t)(end - hdr_end) < want)
            return eof ? -EPROTO : -EAGAIN;
        rc = body_copy(hdr_end, (size_t)want, &r);
    } else if (status == 204 || status == 304 || status < 200) {
        rc = body_copy("", 0, &r);
    } else {
        rc = eof ? body_copy(hdr_end, (size_t)(end - hdr_end), &r) : -EAGAIN;
    }
    if (rc != 0) {
        free(r.body);
        return rc;
    }
    *resp_p = r;
    return 0;
}

/* Wait for events on fd until the deadline: 0, or -ETIMEDOUT / -errno. */
static int wait_fd(int fd, short events, int64_t deadline)
{
    for (;;) {
        int64_t left = deadline - (int64_t)dsv4_now_ms();
        if (left <= 0)
            return -ETIMEDOUT;
        struct pollfd p = {.fd = fd, .events = events};
        int n = poll(&p, 1, left > 1000000 ? 1000000 : (int)left);
        if (n > 0)
            return 0;
        if (n < 0 && errno != EINTR)
            return -errno;
    }
}

/* A connected non-blocking socket to url, or a negative status. */
static int dial(const dsv4_httpc_url *url, int64_t deadline, char *err, size_t errlen)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *ai;
    int grc = getaddrinfo(url->host, url->port, &hints, &ai);
    if (grc != 0) {
        snprintf(err, errlen, "http %s:%s: cannot resolve (%s)", url->host, url->port,
                 gai_strerror(grc));
        return -EHOSTUNREACH;
    }
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int rc = fd < 0 ? -errno : 0;
    if (rc == 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        rc = errno == EINPROGRESS ? wait_fd(fd, POLLOUT, deadline) : -errno;
        int soerr = 0;
        socklen_t sl = sizeof(soerr);
        if (rc == 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 && soerr)
            rc = -soerr;
    }
    freeaddrinfo(ai);
    if (rc != 0) {
        snprintf(err, errlen, "http %s:%s: connect failed (%s)", url->host, url->port,
                 strerror(-rc));
        if (fd >= 0)
            close(fd);
        return rc;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
}

static int send_all(int fd, const char *p, size_t n, int64_t deadline)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
            continue;
        }
        if (w < 0 && errno != EAGAIN && errno != EINTR)
            return -errno;
        int rc = wait_fd(fd, POLLOUT, deadline);
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* Read until the response is complete (or malformed, or the deadline passes). */
static int recv_response(int fd, int64_t deadline, dsv4_httpc_response *resp)
{
    char *buf = NULL;
    size_t n = 0, cap = 0;
    int rc;
    for (;;) {
        if (cap - n < 16384) {
            size_t c = cap ? 2 * cap : 65536;
            char *b = realloc(buf, c);
            if (!b) {
                rc = -ENOMEM;
                break;
            }
            buf = b;
            cap = c;
        }
        ssize_t r = recv(fd, buf + n, cap - n, 0);
        if (r < 0 && (errno == EAGAIN || errno == EINTR)) {
            if ((rc = wait_fd(fd, POLLIN, deadline)) != 0)
                break;
            continue;
        }
        if (r < 0) {
            rc = -errno;
            break;
        }
        n += (size_t)r;
        rc = dsv4_httpc_parse(buf, n, r == 0, resp);
        if (rc != -EAGAIN)
            break;
    }
    free(buf);
    return rc;
}

int dsv4_httpc_request(const dsv4_httpc_url *url, const char *method, const char *path,
                       const char *body, size_t body_len, int timeout_ms,
                       dsv4_httpc_response *resp_p, char *err, size_t errlen)
{
    int64_t deadline = (int64_t)dsv4_now_ms() + timeout_ms;
    int fd = dial(url, deadline, err, errlen);
    if (fd < 0)
        return fd;
    char head[1024];
    int hn =
        snprintf(head, sizeof(head),
                 "%s %s HTTP/1.1\r\nHost: %s:%s\r\nConnection: close\r\nAccept: */*\r\n%s", method,
                 path, url->host, url->port, body ? "Content-Type: application/json\r\n" : "");
    if (body && (size_t)hn < sizeof(head))
        hn += snprintf(head + hn, sizeof(head) - (size_t)hn, "Content-Length: %zu\r\n", body_len);
    if ((size_t)hn < sizeof(head))
        hn += snprintf(head + hn, sizeof(head) - (size_t)hn, "\r\n");
    int rc = (size_t)hn >= sizeof(head) ? -ENAMETOOLONG : send_all(fd, head, (size_t)hn, deadline);
    if (rc == 0 && body)
        rc = send_all(fd, body, body_len, deadline);
    if (rc != 0) {
        snprintf(err, errlen, "http %s %s: sending the request failed (%s)", method, path,
                 strerror(-rc));
        goto close_fd;
    }
    rc = recv_response(fd, deadline, resp_p);
    if (rc == -ETIMEDOUT)
        snprintf(err, errlen, "http %s %s: no complete response within %d ms", method, path,
                 timeout_ms);
    else if (rc == -EPROTO)
        snprintf(err, errlen, "http %s %s: malformed response", method, path);
    else if (rc != 0)
        snprintf(err, errlen, "http %s %s: reading the response failed (%s)", method, path,
                 strerror(-rc));
close_fd:
    close(fd);
    return rc;
}
