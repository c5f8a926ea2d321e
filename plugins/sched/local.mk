# plugins/sched: build rules (owned by the area)
