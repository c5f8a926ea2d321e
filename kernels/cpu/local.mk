# kernels/cpu: build rules (owned by the area)
# Scalar format conversions, linked into the core and into plugins (PIC convenience lib).
noinst_LTLIBRARIES += kernels/libdsv4num.la
kernels_libdsv4num_la_SOURCES = kernels/cpu/numfmt.c kernels/cpu/numfmt.h

# The fp32 CPU kernels behind kernels/kernels.h. -ffp-contract=off: a fused multiply-add
# in one code path and not in another would break the bitwise invariance the engine
# promises (DESIGN.md §6).
noinst_LTLIBRARIES += kernels/libdsv4cpu.la
kernels_libdsv4cpu_la_SOURCES = kernels/kernels.h \
	kernels/cpu/threads.c kernels/cpu/linalg.c kernels/cpu/rope.c kernels/cpu/hc.c \
	kernels/cpu/attn.c kernels/cpu/moe.c
kernels_libdsv4cpu_la_CFLAGS = $(AM_CFLAGS) -ffp-contract=off
kernels_libdsv4cpu_la_LIBADD = kernels/libdsv4num.la -lm $(PTHREAD_LIBS)
core_libdsv4core_la_LIBADD += kernels/libdsv4cpu.la
