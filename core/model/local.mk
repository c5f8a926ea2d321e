# core/model: build rules (owned by the area)
