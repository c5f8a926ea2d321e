# plugins/indexk: build rules (owned by the area)
