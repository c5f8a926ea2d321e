#!/bin/sh
# t-validate-exit-status: dsv4ctl validate exits 0 for a valid file (warnings allowed) and
# says so on stdout, 1 for an invalid one, 2 for usage errors, an unreadable file or a
# --plugin-dir that is not a directory; device = cuda is refused exactly when this build
# has no CUDA.
. "$top_srcdir/tests/tap.sh"
plan 16
tap_tmpdir
cd "$TAP_TMP" || exit 1

printf '[core]\ndevice = cpu\n' > ok.ini
out=$("$DSV4CTL" validate -c ok.ini 2>/dev/null)
is $? 0 "valid file: exit 0"
is "$out" "ok.ini: valid (0 warnings)" "valid file: verdict on stdout"

printf '[core]\ndevice = cpu\ncuda_device = 0\n' > warn.ini
out=$("$DSV4CTL" validate -c warn.ini 2>/dev/null)
is $? 0 "warnings only: exit 0"
is "$out" "warn.ini: valid (1 warning)" "warnings only: counted in the verdict"

printf '[core]\ndevice = gpu\n' > bad.ini
out=$("$DSV4CTL" validate -c bad.ini 2>/dev/null)
is $? 1 "invalid file: exit 1"
is "$out" "" "invalid file: no verdict on stdout"

err=$("$DSV4CTL" validate -c missing.ini 2>&1 >/dev/null)
is $? 2 "missing file: exit 2"
is "$err" "missing.ini: cannot read the configuration (No such file or directory)" \
    "missing file: says which and why"

"$DSV4CTL" validate >/dev/null 2>&1
is $? 2 "no -c: exit 2"
"$DSV4CTL" validate -c ok.ini extra >/dev/null 2>&1
is $? 2 "extra argument: exit 2"
"$DSV4CTL" validate --frobnicate -c ok.ini >/dev/null 2>&1
is $? 2 "unknown option: exit 2"
err=$("$DSV4CTL" --plugin-dir "$TAP_TMP/none" validate -c ok.ini 2>&1 >/dev/null)
is $? 2 "--plugin-dir that is not a directory: exit 2"
is "$err" "plugin directory $TAP_TMP/none: not a directory" "--plugin-dir: says so"
out=$("$DSV4CTL" validate -h)
is $? 0 "-h: exit 0"

printf '[core]\ndevice = cuda\n' > cuda.ini
err=$("$DSV4CTL" validate -c cuda.ini 2>&1 >/dev/null)
rc=$?
if "$DSV4D" -VV | grep -qx 'cuda: no CUDA'; then
    is $rc 1 "device = cuda without CUDA: exit 1"
    is "$err" "cuda.ini:2: [core] device: device cuda is not available (this dsv4d was built without CUDA; see dsv4d -VV)" \
        "device = cuda without CUDA: says why"
else
    is $rc 0 "device = cuda with CUDA built: exit 0"
    is "$err" "" "device = cuda with CUDA built: no diagnostics"
fi
done_testing
