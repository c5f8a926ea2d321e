# core/pd: build rules (owned by the area)
