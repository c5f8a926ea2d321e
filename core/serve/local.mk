# core/serve: build rules (owned by the area)
