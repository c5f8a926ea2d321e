#!/bin/sh
# t-transport-ucx-validates-device-pools: where this tree builds transport/ucx, a decode
# config with device = cuda over ucx validates cleanly in a build with CUDA (device pools
# are staged through pinned buffers) and is refused, saying why, in one without; describe
# shows stage_size with its range, and a stage_size under 1M is refused naming the key
# (tests/fixtures/ucx, each .expect the exact diagnostics). Without UCX in the build it
# skips.
. "$top_srcdir/tests/tap.sh"
BUILT=$top_builddir/plugins/.libs
cd "$top_srcdir/tests/fixtures/ucx" || exit 1
export DSV4D_PLUGIN_PATH=$BUILT
if [ ! -f "$BUILT/dsv4-transport-ucx.so" ]; then
    skip_all "transport/ucx is not built (configure found no UCX)"
fi
plan 6
err=$("$DSV4CTL" validate -c device-cuda.ini 2>&1 >/dev/null)
rc=$?
if "$DSV4D" -VV | grep -qx 'cuda: no CUDA'; then
    is $rc 1 "device = cuda over ucx without CUDA: exit 1"
    has "$err" "device-cuda.ini:2: [core] device: device cuda is not available (this dsv4d was built without CUDA" \
        "device = cuda over ucx without CUDA: says why"
else
    is $rc 0 "device = cuda over ucx with CUDA built: exit 0"
    is "$err" "" "device = cuda over ucx with CUDA built: no diagnostics (device pools are staged)"
fi
err=$("$DSV4CTL" validate -c stage-too-small.ini 2>&1 >/dev/null)
is $? 1 "stage_size under 1M: exit 1"
is "$err" "$(cat stage-too-small.expect)" "stage_size under 1M: refused, naming the key and the range"
got=$("$DSV4CTL" describe transport/ucx 2>&1)
is $? 0 "describe transport/ucx exits 0"
has "$got" "  stage_size = 16M
      size, 1M..4G
      device pools: bytes of each pinned staging buffer" "describe shows stage_size, its default and range"
done_testing
