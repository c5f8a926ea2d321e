/* args.c: number options of dsv4ctl repro and matrix (args.h). */
#include "config.h"

#include "core/repro/args.h"

#include <errno.h>
#include <stdlib.h>

int dsv4_arg_uint(const char *s, uint64_t min, uint64_t max, uint64_t *v_p)
{
    char *end;
    if (!s || *s < '0' || *s > '9')
        return -EINVAL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end != '\0')
        return -EINVAL;
    if (errno == ERANGE || v < min || v > max)
        return -ERANGE;
    *v_p = v;
    return 0;
}
