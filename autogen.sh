#!/bin/sh
# Regenerates the build system from configure.ac and Makefile.am.
#   ./autogen.sh                   regenerate
#   ./autogen.sh --install-deps    first apt-get install what a Debian 12 machine lacks
#                                  to build and test dsv4d (run apt-get update before)
set -e
cd "$(dirname "$0")"

# Everything the build, the tests and the man-page checks need, by Debian package name.
DEBIAN_PACKAGES="autoconf automake libtool pkg-config make gcc libc6-dev python3
    libinih-dev libjansson-dev libxxhash-dev libpcre2-dev libmicrohttpd-dev libssl-dev libucx-dev ucx-utils
    mandoc groff-base curl"

if [ "${1:-}" = "--install-deps" ]; then
    missing=""
    for p in $DEBIAN_PACKAGES; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
            missing="$missing $p"
    done
    # Node.js runs the official OpenAI client against dsv4d in the tests; a machine that
    # already has node (from any source) keeps it, so Debian's nodejs cannot clash with it.
    command -v node >/dev/null 2>&1 || missing="$missing nodejs"
    command -v npm >/dev/null 2>&1 || missing="$missing npm"
    if [ -n "$missing" ]; then
        echo "autogen: installing$missing"
        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $missing
    fi
fi

mkdir -p build-aux m4
autoreconf --install --force
# automake's TAP driver is not installed by autoreconf; take the one automake ships.
cp -f "$(automake --print-libdir)/tap-driver.sh" build-aux/tap-driver.sh
