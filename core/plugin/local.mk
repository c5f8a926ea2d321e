# core/plugin: build rules (owned by the area)
