/* dsv4ctl: inspect plugins, validate configurations, make and run models (dsv4ctl(1)). */
#include "config.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "core/cli/commands.h"

dsv4ctl_globals dsv4ctl_opts;

static const dsv4ctl_command commands[] = {
    {"list", "[--porcelain]", "list plugins with their status", dsv4ctl_list},
    {"describe", "FAMILY/NAME | core", "print a plugin's (or the core's) configuration keys",
     dsv4ctl_describe},
    {"validate", "-c FILE", "check a configuration file and every selected plugin's rules",
     dsv4ctl_validate},
    {"check-plugin", "FILE.so", "load one plugin file and report the result",
     dsv4ctl_check_plugin},
    {"mkmodel",
     "--preset tiny|small|flash-shape [--seed N] [--dtype f32|bf16|fp8] [--names upstream|hf] "
     "[--shards N] [--threads N] -o DIR",
     "write a deterministic synthetic checkpoint", dsv4ctl_mkmodel},
    {"logits", "--model DIR --input IN.safetensors --output OUT.safetensors [...]",
     "run the model on token ids and write logits", dsv4ctl_logits},
    {"generate", "--model DIR --prompt-ids 1,2,3 -n N [...]", "generate tokens greedily or sampled",
     dsv4ctl_generate},
    {"repro",
     "--url URL --sessions N --concurrency C --turns T --seed S [--record FILE | --golden FILE] "
     "[--report FILE] [--plot FILE]",
     "run multi-turn agentic sessions against a server; record or compare every turn",
     dsv4ctl_repro},
    {"matrix", "[--build DIR] [--quick] [--controls] [--device cpu|cuda] [--only TEXT] "
               "[--report FILE]",
     "run repro against every plugin combination and compare with the reference", dsv4ctl_matrix},
};

static void usage(FILE *out)
{
    fprintf(out, "usage: dsv4ctl [--plugin-dir DIR] COMMAND [ARGS]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        fprintf(out, "  %-13s %s\n  %-13s   %s\n", commands[i].name, commands[i].synopsis, "",
                commands[i].summary);
    fprintf(out, "\nsee dsv4ctl(1)\n");
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"plugin-dir", required_argument, NULL, 'P'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    int c;
    /* '+': stop at the subcommand; its options are its own. */
    while ((c = getopt_long(argc, argv, "+hV", opts, NULL)) != -1) {
        switch (c) {
        case 'P': dsv4ctl_opts.plugin_dir = optarg; break;
        case 'h': usage(stdout); return 0;
        case 'V': printf("dsv4ctl %s\n", PACKAGE_VERSION); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind >= argc) {
        usage(stderr);
        return 2;
    }
    const char *name = argv[optind];
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
        if (strcmp(commands[i].name, name) == 0) {
            int sub_argc = argc - optind;
            char **sub_argv = argv + optind;
            optind = 0; /* reset getopt for the subcommand */
            return commands[i].run(sub_argc, sub_argv);
        }
    }
    fprintf(stderr, "dsv4ctl: unknown command '%s'\n", name);
    usage(stderr);
    return 2;
}
