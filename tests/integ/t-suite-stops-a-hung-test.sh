#!/bin/sh
# t-suite-stops-a-hung-test: tests/test-timeout.sh, which runs every test of `make
# check`, stops a test that outlives DSV4_TEST_TIMEOUT with a TAP bail-out naming it and
# the limit, and stops what the test started with it (its process group: a server it left
# running); a test that ends in time keeps its output and exit status; 0 means no limit;
# a limit that is not a number is refused.
wrap="$top_srcdir/tests/test-timeout.sh"
dir=$(mktemp -d) || exit 1
trap 'kill "$(cat "$dir/child" 2>/dev/null)" 2>/dev/null; rm -rf "$dir"' EXIT
cat >"$dir/hangs.sh" <<'SH'
#!/bin/sh
echo "ok 1 - before the hang"
sleep 300 &
echo $! > "$1/child"
wait
SH
chmod +x "$dir/hangs.sh"
echo "1..8"
start=$(date +%s)
out=$(DSV4_TEST_TIMEOUT=1 sh "$wrap" "$dir/hangs.sh" "$dir")
rc=$?
took=$(($(date +%s) - start))
n=0
check() { # COND DESCRIPTION
    n=$((n + 1))
    if [ "$1" = 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; fi
}
check "$([ $rc -eq 124 ]; echo $?)" "a hung test is stopped with status 124 (got $rc)"
check "$([ "$took" -lt 25 ]; echo $?)" "within its limit of 1 s plus the stop ($took s)"
check "$(printf '%s\n' "$out" | grep -q "^Bail out! $dir/hangs.sh did not end within 1 s"; echo $?)" \
    "it ends with a bail-out naming the test and the limit"
check "$(printf '%s\n' "$out" | grep -q '^ok 1 - before the hang$'; echo $?)" \
    "the results it gave before the hang are kept"
running() { # PID: alive and not a zombie (an orphan's is reaped by init, when init reaps)
    [ -r "/proc/$1/status" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status"
}
sleep 1
check "$( ! running "$(cat "$dir/child")"; echo $?)" \
    "what it started (its process group) is stopped too"
out=$(DSV4_TEST_TIMEOUT=30 sh "$wrap" sh -c 'echo "ok 1 - quick"; exit 3')
rc=$?
check "$([ $rc -eq 3 ] && [ "$out" = "ok 1 - quick" ]; echo $?)" \
    "a test that ends in time keeps its output and status (status $rc)"
out=$(DSV4_TEST_TIMEOUT=0 sh "$wrap" sh -c 'exit 5')
check "$([ $? -eq 5 ]; echo $?)" "DSV4_TEST_TIMEOUT=0: no limit, the status passed through"
out=$(DSV4_TEST_TIMEOUT=soon sh "$wrap" true)
rc=$?
check "$([ $rc -eq 99 ] && printf '%s\n' "$out" | grep -q "^Bail out! DSV4_TEST_TIMEOUT must be a whole number of seconds, not 'soon'"; echo $?)" \
    "a limit that is not a number is refused (status $rc)"
