/* scaffolding: replaced by the area that owns this command */
#include <stdio.h>
#include "core/cli/commands.h"
int dsv4ctl_logits(int argc, char **argv) { (void)argc; fprintf(stderr, "%s: not built yet\n", argv[0]); return 2; }
int dsv4ctl_generate(int argc, char **argv) { (void)argc; fprintf(stderr, "%s: not built yet\n", argv[0]); return 2; }
