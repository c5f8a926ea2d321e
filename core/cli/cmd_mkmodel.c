/* cmd_mkmodel.c: `dsv4ctl mkmodel`: write a deterministic synthetic checkpoint. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/cli/commands.h"
#include "core/model/mkmodel.h"

static void usage(FILE *out)
{
    fprintf(out, "usage: dsv4ctl mkmodel --preset tiny|small|flash-shape [--seed N] "
                 "[--dtype f32|bf16|fp8]\n"
                 "                        [--names upstream|hf] [--shards N] -o DIR\n");
}

int dsv4ctl_mkmodel(int argc, char **argv)
{
    static const struct option opts[] = {
        {"preset", required_argument, NULL, 'p'}, {"seed", required_argument, NULL, 's'},
        {"dtype", required_argument, NULL, 'd'},  {"names", required_argument, NULL, 'n'},
        {"shards", required_argument, NULL, 'S'}, {"output", required_argument, NULL, 'o'},
        {"help", no_argument, NULL, 'h'},         {NULL, 0, NULL, 0},
    };
    dsv4_mkmodel_opts o = {.shards = 1};
    const char *dir = NULL;
    int c;
    while ((c = getopt_long(argc, argv, "o:h", opts, NULL)) != -1) {
        char *end;
        switch (c) {
        case 'p': o.preset = optarg; break;
        case 'd': o.dtype = optarg; break;
        case 'n': o.names = optarg; break;
        case 'o': dir = optarg; break;
        case 's':
        case 'S': {
            errno = 0;
            uintmax_t v = strtoumax(optarg, &end, 0);
            if (errno || *end || optarg[0] == '-' || !optarg[0] || (c == 'S' && (!v || v > 128))) {
                fprintf(stderr, "dsv4ctl mkmodel: --%s '%s' is not %s\n",
                        c == 's' ? "seed" : "shards", optarg,
                        c == 's' ? "an unsigned 64-bit integer" : "a count from 1 to 128");
                return 2;
            }
            if (c == 's')
                o.seed = (uint64_t)v;
            else
                o.shards = (unsigned)v;
            break;
        }
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
