/* t-httpc-frames-length-chunked-and-deadline: repro's HTTP client reads bodies framed by
 * Content-Length, by chunks (split across reads, with extensions and trailers) and by the
 * end of the connection; refuses malformed responses; and gives up at its deadline on a
 * server that accepts and never answers. */
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/repro/httpc.h"
#include "tests/tap.h"

static int parse(const char *s, bool eof, dsv4_httpc_response *r)
{
    return dsv4_httpc_parse(s, strlen(s), eof, r);
}

static void test_url(void)
{
    dsv4_httpc_url u;
    ok(dsv4_httpc_url_parse("http://127.0.0.1:8000", &u) == 0 && strcmp(u.host, "127.0.0.1") == 0 &&
           strcmp(u.port, "8000") == 0,
       "url: host and port");
    ok(dsv4_httpc_url_parse("http://[::1]:80/", &u) == 0 && strcmp(u.host, "::1") == 0,
       "url: bracketed v6 host, trailing slash");
    const char *bad[] = {"https://a:1",    "http://a",   "http://a:0",
                         "http://a:70000", "http://:80", "http://a:80/generate"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++)
        is_int(dsv4_httpc_url_parse(bad[i], &u), -EINVAL, "url: '%s' refused", bad[i]);
}

static void test_parse(void)
{
    dsv4_httpc_response r;
    ok(parse("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", false, &r) == 0 &&
           r.status == 200 && r.len == 5 && strcmp(r.body, "hello") == 0,
       "content-length body");
    dsv4_httpc_response_free(&r);
    is_int(parse("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhel", false, &r), -EAGAIN,
           "short content-length body waits for more");
    is_int(parse("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhel", true, &r), -EPROTO,
           "short content-length body at eof is malformed");
    const char *chunked = "HTTP/1.1 404 Not Found\r\ntransfer-encoding: chunked\r\n\r\n"
                          "5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: 1\r\n\r\n";
    ok(parse(chunked, false, &r) == 0 && r.status == 404 && strcmp(r.body, "hello world") == 0 &&
           r.len == 11,
       "chunked body with an extension and a trailer");
    dsv4_httpc_response_free(&r);
    char part[256];
    snprintf(part, sizeof(part), "%.*s", (int)(strlen(chunked) - 20), chunked);
    is_int(parse(part, false, &r), -EAGAIN, "incomplete chunked body waits for more");
    is_int(parse(part, true, &r), -EPROTO, "incomplete chunked body at eof is malformed");
    is_int(parse("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", false, &r), -EPROTO,
           "bad chunk size is malformed");
    is_int(parse("HTTP/1.0 200 OK\r\n\r\nuntil close", false, &r), -EAGAIN,
           "unframed body waits for the close");
    ok(parse("HTTP/1.0 200 OK\r\n\r\nuntil close", true, &r) == 0 &&
           strcmp(r.body, "until close") == 0,
       "unframed body ends at the close");
    dsv4_httpc_response_free(&r);
    is_int(parse("SSH-2.0-OpenSSH_9.2\r\n\r\n", false, &r), -EPROTO, "not http is malformed");
}

/* A one-connection server: mode 0 answers in chunks over several writes, mode 1 accepts
 * and says nothing until the client goes away. */
typedef struct server {
    int lfd, mode;
    char got[4096];
} server;

static void *serve(void *arg)
{
    server *s = arg;
    int fd = accept(s->lfd, NULL, NULL);
    size_t n = 0;
    ssize_t r;
    while (fd >= 0 && n + 1 < sizeof(s->got) &&
           (r = recv(fd, s->got + n, sizeof(s->got) - 1 - n, 0)) > 0) {
        n += (size_t)r;
        s->got[n] = '\0';
        char *hdr = strstr(s->got, "\r\n\r\n");
        if (hdr && (!strstr(s->got, "Content-Length: 2") || strlen(hdr + 4) >= 2))
            break;
    }
    if (fd >= 0 && s->mode == 0) {
        const char *pieces[] = {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{\"a",
                                "\r\n5\r\n\":42}\r\n", "0\r\n\r\n"};
        for (size_t i = 0; i < 3; i++) {
            send(fd, pieces[i], strlen(pieces[i]), MSG_NOSIGNAL);
            usleep(20000);
        }
    } else if (fd >= 0) {
        char c;
        while (recv(fd, &c, 1, 0) > 0)
            ;
    }
    if (fd >= 0)
        close(fd);
    return NULL;
}

/* A socket on a free port of 127.0.0.1 (u gets its address), listening or only bound: a
 * bound port nobody listens on refuses connections, and while it is held no other process
 * can start listening there (a closed port could be taken by a test running alongside). */
static int bind_any(dsv4_httpc_url *u, bool listening)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        (listening && listen(fd, 1) != 0) || getsockname(fd, (struct sockaddr *)&a, &al) != 0)
        bail_out("cannot bind on 127.0.0.1");
    snprintf(u->host, sizeof(u->host), "127.0.0.1");
    snprintf(u->port, sizeof(u->port), "%d", ntohs(a.sin_port));
    return fd;
}

static void test_socket(void)
{
    dsv4_httpc_url u;
    dsv4_httpc_response r;
    char err[256];
    server s = {.mode = 0};
    s.lfd = bind_any(&u, true);
    pthread_t th;
    pthread_create(&th, NULL, serve, &s);
    int rc = dsv4_httpc_request(&u, "POST", "/generate", "{}", 2, 5000, &r, err, sizeof(err));
    pthread_join(th, NULL);
    ok(rc == 0 && r.status == 200 && strcmp(r.body, "{\"a\":42}") == 0,
       "a chunked answer written in pieces is read whole (%s)", rc ? err : "ok");
    if (rc == 0)
        dsv4_httpc_response_free(&r);
    has_str(s.got, "POST /generate HTTP/1.1\r\n", "the request line is sent");
    has_str(s.got, "Content-Length: 2\r\n", "the body's length is sent");
    has_str(s.got, "\r\n\r\n{}", "the body follows the headers");

    s = (server){.mode = 1, .lfd = s.lfd};
    pthread_create(&th, NULL, serve, &s);
    rc = dsv4_httpc_request(&u, "GET", "/metrics", NULL, 0, 300, &r, err, sizeof(err));
    pthread_join(th, NULL);
    is_int(rc, -ETIMEDOUT, "a silent server costs the deadline, then -ETIMEDOUT");
    has_str(err, "no complete response within 300 ms", "the timeout is named");
    close(s.lfd);
    int held = bind_any(&u, false);
    rc = dsv4_httpc_request(&u, "GET", "/health", NULL, 0, 1000, &r, err, sizeof(err));
    is_int(rc, -ECONNREFUSED, "a port nobody listens on is -ECONNREFUSED");
    close(held);
}

int main(void)
{
    plan(25);
    test_url();
    test_parse();
    test_socket();
    return done_testing();
}
