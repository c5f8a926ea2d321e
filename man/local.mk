# man/: the manual pages, in mdoc. tests/man checks they lint clean and stay true to the
# schemas (every key `dsv4ctl describe` prints appears in its page) and to dsv4ctl's usage
# texts (every long option of a command's SYNOPSIS is in its --help).
dist_man_MANS += \
	man/dsv4ctl.1 \
	man/dsv4d-indexk.5 \
	man/dsv4d-sched.5 \
	man/dsv4d.ini.5 \
	man/dsv4d-plugin.7 \
	man/dsv4d.8

TESTS += tests/man/t-man-pages-lint-clean.sh tests/man/t-man-pages-cover-every-key.sh \
	tests/man/t-dsv4ctl-usage-names-every-synopsis-option.sh
EXTRA_DIST += tests/man/t-man-pages-lint-clean.sh tests/man/t-man-pages-cover-every-key.sh \
	tests/man/t-dsv4ctl-usage-names-every-synopsis-option.sh
