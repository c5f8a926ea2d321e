# core/config: build rules (owned by the area)
