# core/cli: dsv4ctl. Each subcommand lives in its own file, listed by the area that owns it.
bin_PROGRAMS += dsv4ctl
dsv4ctl_SOURCES = core/cli/dsv4ctl.c core/cli/commands.h
dsv4ctl_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS)
dsv4ctl_LDADD = core/libdsv4core.la
dsv4ctl_SOURCES += core/cli/cmd_list.c core/cli/cmd_validate.c core/cli/cmd_mkmodel.c \
	core/cli/cmd_logits.c
