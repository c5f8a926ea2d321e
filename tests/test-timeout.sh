#!/bin/sh
# test-timeout.sh: runs one test of `make check` (its program or script and arguments)
# under a time limit, so that a hung kernel or a deadlock fails that test by name instead
# of wedging the suite: DSV4_TEST_TIMEOUT seconds (1200 by default, 0 for none), then
# SIGTERM to the test's process group (the servers it started too), SIGKILL 30 s later.
# A test stopped so ends with a TAP "Bail out!" naming the limit, and exits 124 (137 when
# it had to be killed).
limit=${DSV4_TEST_TIMEOUT:-1200}
case $limit in
'' | *[!0-9]*)
    echo "Bail out! DSV4_TEST_TIMEOUT must be a whole number of seconds, not '$limit'"
    exit 99
    ;;
esac
[ "$limit" -eq 0 ] && exec "$@"
timeout -k 30 "$limit" "$@"
rc=$?
case $rc in
124 | 137) printf '\nBail out! %s did not end within %s s (DSV4_TEST_TIMEOUT): stopped\n' "$1" "$limit" ;;
esac
exit $rc
