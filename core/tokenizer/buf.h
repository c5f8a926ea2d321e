/* buf.h: a growable byte buffer (the tokenizer's string arenas and decode output). */
#ifndef DSV4_CORE_TOKENIZER_BUF_H
#define DSV4_CORE_TOKENIZER_BUF_H

#include <stddef.h>

typedef struct dsv4_tok_buf {
    char *p;
    size_t n, cap;
} dsv4_tok_buf;

/* Make room for extra more bytes. 0 or -ENOMEM. */
int dsv4_tok_buf_reserve(dsv4_tok_buf *b, size_t extra);
/* Append len bytes. 0 or -ENOMEM. */
int dsv4_tok_buf_append(dsv4_tok_buf *b, const void *data, size_t len);
void dsv4_tok_buf_free(dsv4_tok_buf *b);

#endif
