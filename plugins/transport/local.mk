# plugins/transport: build rules (owned by the area)
