/* cmd_mkmodel.c: `dsv4ctl mkmodel`: write a deterministic synthetic checkpoint. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/cli/commands.h"
#include "core/model/mkmodel.h"

static void usage(FILE *out)
{
    fprintf(out, "usage: dsv4ctl mkmodel --preset tiny|small|flash-shape [--seed N] "
                 "[--dtype f32|bf16|fp8]\n"
                 "                        [--names upstream|hf] [--experts fp4|fp8] [--shards N] "
                 "[--threads N]\n"
                 "                        [--layers N] -o DIR\n");
}

/* An unsigned number in [lo, hi] into *v_p; false (with a message) otherwise. */
static bool number(const char *opt, const char *s, uintmax_t lo, uintmax_t hi, uintmax_t *v_p)
{
    char *end;
    errno = 0;
    uintmax_t v = strtoumax(s, &end, 0);
    if (errno || *end || !s[0] || s[0] == '-' || v < lo || v > hi) {
        fprintf(stderr, "dsv4ctl mkmodel: --%s '%s' is not a number from %ju to %ju\n", opt, s, lo,
                hi);
        return false;
    }
    *v_p = v;
    return true;
}

int dsv4ctl_mkmodel(int argc, char **argv)
{
    static const struct option opts[] = {
        {"preset", required_argument, NULL, 'p'},
        {"seed", required_argument, NULL, 's'},
        {"dtype", required_argument, NULL, 'd'},
        {"names", required_argument, NULL, 'n'},
        {"experts", required_argument, NULL, 'e'},
        {"shards", required_argument, NULL, 'S'},
        {"threads", required_argument, NULL, 't'},
        {"layers", required_argument, NULL, 'L'},
        {"output", required_argument, NULL, 'o'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    dsv4_mkmodel_opts o = {.shards = 1};
    const char *dir = NULL;
    uintmax_t v;
    int c;
    while ((c = getopt_long(argc, argv, "o:h", opts, NULL)) != -1) {
        switch (c) {
        case 'p': o.preset = optarg; break;
        case 'd': o.dtype = optarg; break;
        case 'n': o.names = optarg; break;
        case 'e': o.experts = optarg; break;
        case 'o': dir = optarg; break;
        case 's':
            if (!number("seed", optarg, 0, UINT64_MAX, &v))
                return 2;
            o.seed = (uint64_t)v;
            break;
        case 'S':
            if (!number("shards", optarg, 1, 128, &v))
                return 2;
            o.shards = (unsigned)v;
            break;
        case 't':
            if (!number("threads", optarg, 1, 16, &v))
                return 2;
            o.threads = (unsigned)v;
            break;
        case 'L':
            /* the preset's own range is checked by dsv4_mkmodel_run */
            if (!number("layers", optarg, 1, DSV4_MAX_LAYERS, &v))
                return 2;
            o.layers = (unsigned)v;
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (!o.preset || !dir || optind != argc) {
        usage(stderr);
        return 2;
    }
    char err[512];
    if (dsv4_mkmodel_run(&o, dir, err, sizeof(err)) != 0) {
        fprintf(stderr, "dsv4ctl mkmodel: %s\n", err);
        return 2;
    }
    return 0;
}
