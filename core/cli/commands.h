/* commands.h: dsv4ctl subcommands. Each takes the arguments after its name (argv[0] is
 * the subcommand) and returns the process exit status: 0 success, 1 the thing checked is
 * bad (invalid config, failed plugin ...), 2 usage or I/O error. */
#ifndef DSV4_CLI_COMMANDS_H
#define DSV4_CLI_COMMANDS_H

typedef struct dsv4ctl_command {
    const char *name;
    const char *synopsis;   /* arguments, for the usage text */
    const char *summary;    /* one line */
    int (*run)(int argc, char **argv);
} dsv4ctl_command;

/* Global options given before the subcommand. */
typedef struct dsv4ctl_globals {
    const char *plugin_dir; /* --plugin-dir */
} dsv4ctl_globals;
extern dsv4ctl_globals dsv4ctl_opts;

int dsv4ctl_list(int argc, char **argv);
int dsv4ctl_describe(int argc, char **argv);
int dsv4ctl_check_plugin(int argc, char **argv);
int dsv4ctl_validate(int argc, char **argv);
int dsv4ctl_mkmodel(int argc, char **argv);
int dsv4ctl_logits(int argc, char **argv);
int dsv4ctl_generate(int argc, char **argv);
int dsv4ctl_repro(int argc, char **argv);
int dsv4ctl_matrix(int argc, char **argv);

#endif
