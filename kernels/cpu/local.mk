# kernels/cpu: build rules (owned by the area)
# Scalar format conversions, linked into the core and into plugins (PIC convenience lib).
noinst_LTLIBRARIES += kernels/libdsv4num.la
kernels_libdsv4num_la_SOURCES = kernels/cpu/numfmt.c kernels/cpu/numfmt.h
