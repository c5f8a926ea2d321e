# etc: build rules (owned by the area)
