# plugins/hostcache: build rules (owned by the area)
