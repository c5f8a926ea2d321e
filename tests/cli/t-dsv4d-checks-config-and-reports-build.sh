#!/bin/sh
# t-dsv4d-checks-config-and-reports-build: dsv4d -t checks a configuration exactly like
# dsv4ctl validate (ok: exit 0; invalid: the same diagnostics, exit 1); -V prints the
# version and plugin ABI; -VV adds configure options, CUDA and every plugin found with its
# status; a plain start with a model that cannot be loaded exits 1 naming it (serving
# itself is tested in tests/integ/t-http-*).
. "$top_srcdir/tests/tap.sh"
plan 15
tap_tmpdir
cd "$TAP_TMP" || exit 1
FX=$top_builddir/tests/fixtures/plugins/.libs

printf '[core]\ndevice = cpu\n[indexk]\nplugin = bf16\n[sched]\nplugin = lpm\n' > ok.ini
out=$("$DSV4D" -t -c ok.ini 2>&1)
is $? 0 "-t on a valid file: exit 0"
is "$out" "dsv4d: ok.ini: configuration ok" "-t on a valid file: says ok"

printf '[model]\nkv_pool = lots\n[sched]\nplugin = unavail\n' > bad.ini
out=$("$DSV4D" --plugin-dir "$FX" -t -c bad.ini 2>&1)
is $? 1 "-t on an invalid file: exit 1"
want=$("$DSV4CTL" --plugin-dir "$FX" validate -c bad.ini 2>&1)
is "$out" "$want" "-t prints what dsv4ctl validate prints"
has "$out" "bad.ini:4: [sched] plugin: plugin sched/unavail" "-t names the plugin that failed"

"$DSV4D" -t -c missing.ini >/dev/null 2>&1
is $? 2 "-t on a missing file: exit 2"
"$DSV4D" -t -c ok.ini stray >/dev/null 2>&1
is $? 2 "stray argument: exit 2"

v=$("$DSV4D" -V)
is $? 0 "-V: exit 0"
case $v in "dsv4d "*" (plugin ABI 1."*")") r=0 ;; *) r=1 ;; esac
is $r 0 "-V: version and plugin ABI ($v)"
vv=$("$DSV4D" --plugin-dir "$FX" -VV)
has "$vv" "configure: " "-VV: configure options"
has "$vv" "cuda: " "-VV: CUDA architecture or no CUDA"
has "$vv" "indexk/fp8 " "-VV: lists a plugin that loads"
has "$vv" "sched/abimajor failed: plugin sched/abimajor (dsv4-sched-abimajor.so): ABI 2.1 not supported" \
    "-VV: lists a plugin that failed, with its reason"

printf '[core]\ndevice = cpu\n[model]\npath = %s/no-model\n' "$TAP_TMP" > nomodel.ini
err=$("$DSV4D" -c nomodel.ini 2>&1)
is $? 1 "plain start with a missing model: exit 1"
has "$err" "dsv4d: error: model: cannot load $TAP_TMP/no-model" \
    "plain start: names the model it cannot load"
done_testing
