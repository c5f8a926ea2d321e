/* buf.c: growable byte buffer (buf.h). */
#include "core/tokenizer/buf.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int dsv4_tok_buf_reserve(dsv4_tok_buf *b, size_t extra)
{
    if (b->cap - b->n >= extra)
        return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap - b->n < extra) {
        if (cap > ((size_t)-1) / 2)
            return -ENOMEM;
        cap *= 2;
    }
    char *p = realloc(b->p, cap);
    if (!p)
        return -ENOMEM;
    b->p = p;
    b->cap = cap;
    return 0;
}

int dsv4_tok_buf_append(dsv4_tok_buf *b, const void *data, size_t len)
{
    int rc = dsv4_tok_buf_reserve(b, len);
    if (rc)
        return rc;
    if (len)
        memcpy(b->p + b->n, data, len);
    b->n += len;
    return 0;
}

void dsv4_tok_buf_free(dsv4_tok_buf *b)
{
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}
