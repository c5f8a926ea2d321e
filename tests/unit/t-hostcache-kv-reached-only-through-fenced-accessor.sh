#!/bin/sh
# t-hostcache-kv-reached-only-through-fenced-accessor: the fence rule of DESIGN.md §9 holds
# in the source: the forward passes reach KV memory only through the accessor (the CPU
# forward through dsv4_kv_pool_layer(), the CUDA forward through dsv4_kv_pool_layer_on()
# with its stream; one call site each, no walk of the buffer table, no other pool
# accessor), the engine and the kernels touch no KV buffer, the prefix cache's state copy
# (snapshots, adoption) goes through the same accessor, dsv4_kv_pool_layer() is only the
# host-fenced form of dsv4_kv_pool_layer_on(), and that calls the fence (host or stream)
# before it hands out a pointer. A new read path that bypasses the fence
# (reference/sglang.md §3.6) fails here.
. "$top_srcdir/tests/tap.sh"
src=$top_srcdir
plan 15
fwd=$src/core/engine/forward.c
is "$(grep -c 'dsv4_kv_pool_layer(' "$fwd")" 1 "forward.c gets layer views from one call site"
is "$(grep -cE 'buffers|dsv4_engine_kv|dsv4_kv_pool_(page|slot)' "$fwd")" 0 \
    "forward.c never walks the buffer table or another pool accessor"
# the layout is read once, for geometry (page_tokens, kv_dtype), never for memory
is "$(grep -o 'lay->[a-z_]*' "$fwd" | sort -u | grep -vcE 'lay->(page_tokens|kv_dtype)$')" 0 \
    "forward.c reads only geometry from the layout"
cfwd=$src/core/engine/forward_cuda.c
is "$(grep -c 'dsv4_kv_pool_layer_on(f->pool, l, f->stream, ' "$cfwd")" 1 \
    "forward_cuda.c gets layer views from one call site, fenced on its stream"
is "$(grep -c 'dsv4_kv_pool_layer(' "$cfwd")" 0 "forward_cuda.c has no other call of the accessor"
is "$(grep -cE 'buffers|dsv4_engine_kv|dsv4_kv_pool_(page|slot)' "$cfwd")" 0 \
    "forward_cuda.c never walks the buffer table or another pool accessor"
is "$(grep -oE '(lay|dsv4_kv_pool_layout\([a-z_>-]*\))->[a-z_]*' "$cfwd" | sed 's/.*->//' | sort -u |
    grep -vcE '^(page_tokens|kv_dtype|indexk)$')" 0 \
    "forward_cuda.c reads only geometry and the indexk name from the layout"
is "$(grep -lE '\->base|buffers\[|dsv4_kv_pool_layer' "$src"/core/engine/engine.c \
    "$src"/kernels/cpu/*.c 2>/dev/null | wc -l)" 0 "engine.c and the kernels touch no KV buffer"
pfx=$src/core/engine/prefix.c
is "$(grep -c 'buffers' "$pfx")" 0 "prefix.c never walks the buffer table"
is "$(grep 'dsv4_kv_pool_layout' "$pfx" | grep -vc 'dsv4_kv_pool_layout(eng->pool)->n_layers;')" 0 \
    "prefix.c reads only the layer count from the layout"
ok "prefix.c copies state through dsv4_kv_pool_layer" grep -q 'dsv4_kv_pool_layer(eng->pool, ' "$pfx"
host=$(sed -n '/^int dsv4_kv_pool_layer(/,/^}/p' "$src/core/engine/kvpool.c" | sed '1,2d;$d')
is "$(printf '%s' "$host" | tr -s ' ')" " return dsv4_kv_pool_layer_on(pool, layer, NULL, view_p);" \
    "dsv4_kv_pool_layer is the accessor with the host fence, nothing else"
body=$(sed -n '/^int dsv4_kv_pool_layer_on(/,/^}/p' "$src/core/engine/kvpool.c")
fence=$(printf '%s\n' "$body" | grep -n 'pool->fence(' | cut -d: -f1)
view=$(printf '%s\n' "$body" | grep -n 'view_p->' | head -1 | cut -d: -f1)
ok "the accessor calls the fence" [ -n "$fence" ]
sfence=$(printf '%s\n' "$body" | grep -n 'stream && pool->stream_fence ? pool->stream_fence(' |
    cut -d: -f1)
ok "the accessor calls the stream fence when given a stream" [ -n "$sfence" ]
order=none
[ -n "$fence" ] && [ -n "$sfence" ] && [ -n "$view" ] && [ "$fence" -lt "$view" ] &&
    [ "$sfence" -lt "$view" ] && order=fence-first
is "$order" fence-first "it calls either fence before it fills the view"
done_testing
