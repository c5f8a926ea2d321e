# core/http: build rules (owned by the area)
