# core/daemon: build rules (owned by the area)
