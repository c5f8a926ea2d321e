/* pd-conn-pair.h: two PD control connections joined by a socket pair, handshake done,
 * for the tests of core/pd/conn.c. */
#ifndef DSV4_TESTS_UNIT_PD_CONN_PAIR_H
#define DSV4_TESTS_UNIT_PD_CONN_PAIR_H

#include "core/pd/conn.h"

/* The secret both ends of a pair() hold unless told otherwise. */
extern const char pd_pair_secret[];

typedef struct pd_side {
    dsv4_pd_conn *c;
    dsv4_pd_hello hello;
    dsv4_pd_msg peer; /* the other side's hello */
    int rc;           /* the handshake's */
    char err[1024];
} pd_side;

/* A hello of role with the test geometry (page_tokens varies it). */
dsv4_pd_hello pd_pair_hello(uint32_t role, uint32_t page_tokens, const char *transport);

/* Both ends shake hands concurrently: a (decode, pd_pair_secret, 16-token pages) and b
 * (prefill, secret_b, page_tokens_b); a->rc and b->rc say how it went. */
void pd_pair(pd_side *a, pd_side *b, const char *secret_b, uint32_t page_tokens_b);

/* Runs one side's handshake (a pthread start routine: arg is the pd_side). */
void *pd_pair_handshake(void *arg);

void pd_unpair(pd_side *a, pd_side *b);

/* Reads one whole raw frame off fd (malloc'd, *len_p bytes), bypassing the connection. */
uint8_t *pd_pair_grab(int fd, size_t *len_p);

#endif
