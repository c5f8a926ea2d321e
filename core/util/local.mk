# core/util: status text, logging. Part of the core convenience library.
noinst_LTLIBRARIES += core/libdsv4core.la
core_libdsv4core_la_SOURCES = \
	core/util/status.c core/util/status.h \
	core/util/log.c core/util/log.h \
	core/util/diag.c core/util/diag.h \
	core/util/json.c core/util/json.h \
	core/util/clock.h
core_libdsv4core_la_CFLAGS = $(AM_CFLAGS) $(INIH_CFLAGS) $(JANSSON_CFLAGS) $(XXHASH_CFLAGS) $(PCRE2_CFLAGS)
core_libdsv4core_la_LIBADD = $(INIH_LIBS) $(JANSSON_LIBS) $(XXHASH_LIBS) $(PCRE2_LIBS) $(PTHREAD_LIBS)
