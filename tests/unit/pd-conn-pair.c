/* pd-conn-pair.c: see pd-conn-pair.h. */
#include "tests/unit/pd-conn-pair.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "tests/tap.h"

const char pd_pair_secret[] = "a shared secret of some length";
static uint8_t kinds[] = {0, 1, 2};
static dsv4_pd_buf_geom bufs[] = {{3, 0, 64}, {0, 1, 32}, {2, 2, 16}};

dsv4_pd_hello pd_pair_hello(uint32_t role, uint32_t page_tokens, const char *transport)
{
    return (dsv4_pd_hello){.role = role,
                           .geom = {page_tokens, DSV4_KV_BF16, 16, 3, 3, "fp8", kinds, bufs},
                           .transport = transport,
                           .blob = (const uint8_t *)"blob",
                           .blob_len = 4};
}

void *pd_pair_handshake(void *arg)
{
    pd_side *s = arg;
    s->rc = dsv4_pd_conn_handshake(s->c, &s->hello, &s->peer, dsv4_pd_deadline(5000), s->err,
                                   sizeof(s->err));
    return NULL;
}

void pd_pair(pd_side *a, pd_side *b, const char *secret_b, uint32_t page_tokens_b)
{
    int fds[2];
    char err[256];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0)
        bail_out("socketpair");
    memset(a, 0, sizeof(*a));
    memset(b, 0, sizeof(*b));
    a->c = dsv4_pd_conn_new(fds[0], pd_pair_secret, strlen(pd_pair_secret), err, sizeof(err));
    b->c = dsv4_pd_conn_new(fds[1], secret_b, strlen(secret_b), err, sizeof(err));
    if (!a->c || !b->c)
        bail_out("%s", err);
    a->hello = pd_pair_hello(DSV4_ROLE_DECODE, 16, "local");
    b->hello = pd_pair_hello(DSV4_ROLE_PREFILL, page_tokens_b, "local");
    pthread_t t;
    pthread_create(&t, NULL, pd_pair_handshake, b);
    pd_pair_handshake(a);
    pthread_join(t, NULL);
}

void pd_unpair(pd_side *a, pd_side *b)
{
    dsv4_pd_msg_clear(&a->peer);
    dsv4_pd_msg_clear(&b->peer);
    dsv4_pd_conn_free(a->c);
    dsv4_pd_conn_free(b->c);
}

uint8_t *pd_pair_grab(int fd, size_t *len_p)
{
    uint8_t h[DSV4_PD_HEADER_BYTES];
    size_t rest;
    char err[256];
    if (recv(fd, h, sizeof(h), MSG_WAITALL) != (ssize_t)sizeof(h) ||
        dsv4_pd_frame_header(h, &rest, err, sizeof(err)) != 0)
        bail_out("grab: no frame");
    uint8_t *f = malloc(sizeof(h) + rest);
    if (!f)
        bail_out("grab: out of memory");
    memcpy(f, h, sizeof(h));
    if (recv(fd, f + sizeof(h), rest, MSG_WAITALL) != (ssize_t)rest)
        bail_out("grab: short frame");
    *len_p = sizeof(h) + rest;
    return f;
}
