# core/engine: build rules (owned by the area)
