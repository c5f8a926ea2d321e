# man: build rules (owned by the area)
