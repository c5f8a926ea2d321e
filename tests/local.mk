# tests/: the TAP helpers. Each area lists its tests in its own fragment.
check_LTLIBRARIES += tests/libtap.la
tests_libtap_la_SOURCES = tests/tap.c tests/tap.h
EXTRA_DIST += tests/tap.sh
# Link line for C tests of the core.
TEST_CORE_LIBS = tests/libtap.la core/libdsv4core.la
