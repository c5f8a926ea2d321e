#!/bin/sh
# t-gpu-pd-ucx-golden-tokens-match-unified: the one-GPU PD golden test over transport/ucx
# (tls = shm,self): device pools staged through pinned host buffers give the tokens of a
# unified device = cuda server, bit for bit, every transfer verified the first time. The
# test is t-gpu-pd-local-golden-tokens-match-unified.sh with TRANSPORT=ucx-shm.
TRANSPORT=ucx-shm exec sh "${top_srcdir:-.}/tests/gpu/t-gpu-pd-local-golden-tokens-match-unified.sh"
