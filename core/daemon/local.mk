# core/daemon: the dsv4d program (dsv4d(8)).
sbin_PROGRAMS += dsv4d
dsv4d_SOURCES = core/daemon/dsv4d.c
dsv4d_CPPFLAGS = $(AM_CPPFLAGS) -DDSV4_CONFIG_FILE='"$(dsv4dconfdir)/dsv4d.ini"'
dsv4d_LDADD = core/http/libdsv4http.la core/libdsv4core.la
