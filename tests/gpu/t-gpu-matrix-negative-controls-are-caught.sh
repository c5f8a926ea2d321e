#!/bin/sh
# t-gpu-matrix-negative-controls-are-caught: tests/integ/t-matrix-negative-controls-are-
# caught.sh with every server on the GPU (dsv4ctl matrix --device cuda --controls): the
# unfenced host tier with a load delay corrupts sessions and repro reports them; transfers
# chaos drops into the decode server's device pool are refused by checksum, none used. Skips
# without a GPU or without CUDA in this build.
. "${top_srcdir:-.}/tests/gpu/skip-without-cuda-daemon.sh"
MATRIX_DEVICE=cuda exec sh "${top_srcdir:-.}/tests/integ/t-matrix-negative-controls-are-caught.sh"
