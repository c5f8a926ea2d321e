#!/bin/sh
# t-soak-80-clients-with-aborts-leak-nothing: the soak of bench/soak.sh, bounded: 80
# streamed clients send 3 requests each (mixed lengths, 5% hanging up mid-stream); every
# answer read to its end is well formed, dsv4d still answers /health, and no request, kv
# page or state slot stays held beyond the baseline and the prefix cache.
SOAK_CLIENTS=80 SOAK_REQUESTS=240 SOAK_ABORT=5 SOAK_PROMPTS=16,64,256,1024 SOAK_OUTS=8,32,128 \
    exec sh "$top_srcdir/bench/soak.sh" "$top_builddir"
