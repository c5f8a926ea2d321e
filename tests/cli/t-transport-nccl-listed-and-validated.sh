#!/bin/sh
# t-transport-nccl-listed-and-validated: when this tree builds transport/nccl, `dsv4ctl list`
# shows it; on a machine without a visible GPU its status says why it cannot run, and
# validating a config that selects it says the same; with a GPU, describe prints its key
# and every config of tests/fixtures/nccl validates to exactly its .expect (device = cpu,
# device = auto, an unset cuda_device, a clean one). Wrapping nccl in chaos with drop or
# corrupt is refused on any machine (chaos loads everywhere). Without NCCL in the build,
# selecting it says so.
. "$top_srcdir/tests/tap.sh"
BUILT=$top_builddir/plugins/.libs
FIXTURES=$top_srcdir/tests/fixtures/nccl
T=$(printf '\t')
cd "$FIXTURES" || exit 1
export DSV4D_PLUGIN_PATH=$BUILT
if [ ! -f "$BUILT/dsv4-transport-nccl.so" ]; then
    # configure found no NCCL: selecting the plugin names the missing build
    plan 2
    got=$("$DSV4CTL" validate -c own-gpu.ini 2>&1 >/dev/null)
    is "$?" 1 "without NCCL, validate of an nccl config exits 1"
    is "$got" "own-gpu.ini:12: [transport] plugin: plugin transport/nccl is not built (this dsv4d was built without NCCL (configure --with-nccl))" \
        "and says the build has no NCCL"
    done_testing
    exit
fi

line=$("$DSV4CTL" list --porcelain | awk -F "$T" '$1 == "transport" && $2 == "nccl"')
status=$(printf '%s\n' "$line" | cut -f5)
if [ "$status" = ok ]; then plan 11; else plan 9; fi
is "$(printf '%s\n' "$line" | cut -f6)" "$BUILT/dsv4-transport-nccl.so" "list shows transport/nccl"

got=$("$DSV4CTL" validate -c chaos-drop.ini 2>&1 >/dev/null)
is "$?" 1 "chaos around nccl with drop: exit 1"
is "$got" "chaos-drop.ini:13: [transport] plugin: warning: plugin transport/chaos is experimental
chaos-drop.ini:17: [transport.chaos] drop: inner = nccl is two-sided: drop and corrupt would pair its sends with the wrong receives (use delay and hang)" \
    "chaos around nccl with drop: refused, naming the key"

if [ "$status" != ok ]; then
    has "$status" "not available here (no CUDA device visible" \
        "without a GPU the status says why"
    got=$("$DSV4CTL" describe transport/nccl 2>&1)
    is "$?" 1 "describe exits 1 for the unavailable plugin"
    has "$got" "plugin transport/nccl (dsv4-transport-nccl.so): not available here (no CUDA device visible" \
        "describe says why"
    got=$("$DSV4CTL" validate -c own-gpu.ini 2>&1 >/dev/null)
    is "$?" 1 "validate of an nccl config exits 1 here"
    has "$got" "own-gpu.ini:12: [transport] plugin: plugin transport/nccl (dsv4-transport-nccl.so): not available here (no CUDA device visible" \
        "validate points at the plugin line and says why"
    skip 1 "no CUDA device visible: the rules of a loaded transport/nccl (fixtures) need a GPU"
    done_testing
    exit
fi

is "$status" ok "with a GPU it loads"
got=$("$DSV4CTL" describe transport/nccl 2>&1)
is "$?" 0 "describe exits 0"
has "$got" "[transport.nccl]
  init_timeout = 30s" "describe prints the section and its key"
for case in device-cpu device-auto cuda-device-unset own-gpu; do
    got=$("$DSV4CTL" validate -c "$case.ini" 2>&1 >/dev/null)
    rc=$?
    if grep -qv 'warning: ' "$case.expect"; then want=1; else want=0; fi
    is "$got $rc" "$(cat "$case.expect") $want" "$case: diagnostics and exit status"
done
is "$(cat own-gpu.expect)" "" "a clean config exists among the fixtures"
done_testing
