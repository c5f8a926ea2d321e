# core/engine: the KV pool, the forward pass over the CPU kernels, the engine API and
# sampling. Part of the core convenience library.
core_libdsv4core_la_SOURCES += \
	core/engine/kvpool.c core/engine/kvpool.h \
	core/engine/forward.c core/engine/forward.h \
	core/engine/engine.c core/engine/engine.h \
	core/engine/sample.c core/engine/sample.h
