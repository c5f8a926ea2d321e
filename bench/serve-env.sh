# serve-env.sh: the common start of the serving benchmarks (serve-load.sh, n-choices.sh,
# prefix-reuse.sh, shared-prefix-burst.sh), sourced with their arguments in place after
# `name=<script's name for results>` and `pool=<the KV pool by default>`: sets src (the
# source tree), build ($1: a configured build tree, the current directory by default),
# device (SERVE_DEVICE: cpu, the default, or cuda) and out ($2, or
# bench/results/<date>-<name>-<cpu|gpu>.md), and exports what tests/integ/dsv4d_http.py's
# serve_daemon reads (SERVE_DEVICE, SERVE_KV_POOL: $pool by default, SERVE_MKMODEL:
# "--preset tiny --seed 5" by default) and COMMIT (the commit measured: the source tree's
# HEAD unless set, as when BUILDDIR was built from a snapshot). The caller builds what it
# runs.
src=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-.}" && pwd)
device=${SERVE_DEVICE:-cpu}
case $device in
cpu) machine=cpu ;;
cuda) machine=gpu ;;
*) echo "$name.sh: SERVE_DEVICE must be cpu or cuda, not '$device'" >&2; exit 2 ;;
esac
out=${2:-$src/bench/results/$(date -u +%Y-%m-%d)-$name-$machine.md}
export top_srcdir="$src" top_builddir="$build" DSV4D_PLUGIN_PATH="$build/plugins/.libs"
export SERVE_DEVICE="$device"
export SERVE_KV_POOL="${SERVE_KV_POOL:-$pool}" SERVE_MKMODEL="${SERVE_MKMODEL:---preset tiny --seed 5}"
export COMMIT="${COMMIT:-$(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo unknown)}"
