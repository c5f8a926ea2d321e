# kernels/cpu: build rules (owned by the area)
