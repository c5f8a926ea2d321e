#!/bin/sh
# t-gpu-matrix-combinations-match-reference: tests/integ/t-matrix-cpu-combinations-match-
# reference.sh with every server on the GPU (dsv4ctl matrix --device cuda): each unified and
# PD combination of the built plugins (PD over CUDA IPC and UCX-staged device pools) matches
# its serial reference exactly, and each exercised what it names (host-tier loads, KV moved).
# Skips without a GPU or without CUDA in this build.
. "${top_srcdir:-.}/tests/gpu/skip-without-cuda-daemon.sh"
MATRIX_DEVICE=cuda exec sh "${top_srcdir:-.}/tests/integ/t-matrix-cpu-combinations-match-reference.sh"
