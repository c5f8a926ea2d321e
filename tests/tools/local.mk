# tests/tools: build rules (owned by the area)
