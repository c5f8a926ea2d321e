# kernels/cuda: build rules (owned by the area)
