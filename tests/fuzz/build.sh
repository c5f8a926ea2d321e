#!/bin/sh
# build.sh: builds the fuzz targets in a configured build directory without automake's
# help, for as long as tests/fuzz/local.mk is not included from Makefile.am. It reads the
# compiler and flags from that directory's Makefile and links against the core library
# already built there (make core/libdsv4core.la core/http/libdsv4http.la first).
#   tests/fuzz/build.sh BUILDDIR     targets land in BUILDDIR/tests/fuzz/
set -eu
b=$(cd "${1:?usage: build.sh BUILDDIR}" && pwd)
src=$(cd "$(dirname "$0")/../.." && pwd)
# A makefile read after the build's own prints the variables; a file, not stdin, since
# make re-executes itself when it regenerates the Makefile.
mk=$(mktemp)
trap 'rm -f "$mk"' EXIT
cat > "$mk" <<'MK'
fuzz-vars:
	@echo "CC='$(CC)' CFLAGS='$(CFLAGS) $(WARN_CFLAGS) $(SAN_CFLAGS)' FUZZ_LDFLAGS='$(FUZZ_LDFLAGS)' JANSSON_CFLAGS='$(JANSSON_CFLAGS)' CRYPTO_CFLAGS='$(CRYPTO_CFLAGS)' CRYPTO_LIBS='$(CRYPTO_LIBS)'"
MK
eval "$(make -s -C "$b" -f Makefile -f "$mk" fuzz-vars)"
common="$src/tests/fuzz/fuzz.c"
[ -n "$FUZZ_LDFLAGS" ] || common="$common $src/tests/fuzz/replay.c"
mkdir -p "$b/tests/fuzz"
for t in config http-request safetensors model-config tokenizer-encode tokenizer-json pd-wire; do
    echo "  CCLD     tests/fuzz/fuzz-$t"
    libs=core/libdsv4core.la
    [ "$t" != http-request ] || libs="core/http/libdsv4http.la $libs"
    # shellcheck disable=SC2086 # the flags are word lists
    (cd "$b" && ./libtool --quiet --mode=link $CC $CFLAGS -pthread -I"$src/include" -I"$src" -I"$b" \
        $JANSSON_CFLAGS $CRYPTO_CFLAGS -DDSV4_FUZZ_FIXTURES="\"$src/tests/fixtures\"" \
        $FUZZ_LDFLAGS -o "tests/fuzz/fuzz-$t" "$src/tests/fuzz/fuzz-$t.c" $common \
        $libs $CRYPTO_LIBS)
done
