#!/bin/sh
# t-describe-prints-schema: `dsv4ctl describe FAMILY/NAME` prints the plugin's identity and
# every key of its schema (default, type, range or values, help); `describe core` prints
# the core sections; an unknown or failed plugin exits 1, a malformed argument 2.
. "$top_srcdir/tests/tap.sh"
FX=$top_builddir/tests/fixtures/plugins/.libs
plan 15

out=$("$DSV4CTL" --plugin-dir "$FX" describe sched/good)
is $? 0 "describe sched/good: exit 0"
is "$out" "sched/good 1.0.0 (ABI 1.0)
shortest (or longest) prompt first, a loader test fixture
flags: test-only
path: $FX/dsv4-sched-good.so

[sched.good]
  direction = shortest
      enum, shortest|longest
      which prompts run first
  priority_first = false
      bool
      order by priority (larger first) before prompt length
  window = 64
      int, 1..4096
      how many of the oldest requests are reordered" "describe sched/good prints its schema"

out=$("$DSV4CTL" describe core)
is $? 0 "describe core: exit 0"
for s in core model server pd; do
    n=$(printf '%s\n' "$out" | awk -v h="[$s]" '$0 == h { on = 1; next } /^\[/ { on = 0 } on && /^  [a-z_]+ =/' | wc -l)
    ok "[$s] is described with its keys" [ "$n" -gt 0 ]
done
has "$out" "  device = auto
      enum, auto|cpu|cuda" "a core key with its default, type and values"

out=$("$DSV4CTL" --plugin-dir "$FX" describe sched/nothere 2>&1)
is "$out $?" "dsv4ctl describe: no plugin sched/nothere in the plugin search path 1" \
    "an unknown plugin: message and exit 1"
out=$("$DSV4CTL" --plugin-dir "$FX" describe sched/unavail 2>&1)
is "$out $?" "dsv4ctl describe: plugin sched/unavail (dsv4-sched-unavail.so): not available here (needs a device this fixture never finds) 1" \
    "a plugin that failed to load: its reason and exit 1"
out=$("$DSV4CTL" describe bogus/x 2>&1)
is "$out $?" "dsv4ctl describe: unknown family in 'bogus/x' (expected indexk, transport, hostcache or sched) 2" \
    "an unknown family: exit 2"
out=$("$DSV4CTL" describe sched 2>&1)
rc=$?
has "$out" "dsv4ctl describe: 'sched' is not FAMILY/NAME or core" "no name: message"
is $rc 2 "no name: exit 2"
"$DSV4CTL" describe >/dev/null 2>&1
is $? 2 "no argument: exit 2"
"$DSV4CTL" describe sched/good core >/dev/null 2>&1
is $? 2 "two arguments: exit 2"
done_testing
