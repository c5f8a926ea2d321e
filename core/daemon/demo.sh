#!/bin/sh
# demo.sh: dsv4d's main job from the build tree (`make demo`): serve the embedded tiny
# model with etc/dsv4d.ini, show one real completion, print a curl example, then keep
# serving in the foreground until Ctrl-C.
#   demo.sh BUILDDIR SRCDIR
set -eu
build=$1
src=$2
export DSV4D_PLUGIN_PATH="$build/plugins/.libs"
state=$build/demo
mkdir -p "$state"
# etc/dsv4d.ini as shipped, but the tiny model goes into the build tree (the installed
# default directory may not be writable when the demo runs as a user).
sed "s|^path =\$|path = $state/dsv4-tiny|" "$src/etc/dsv4d.ini" > "$state/dsv4d.ini"
if [ ! -f "$state/dsv4-tiny/config.json" ]; then
    "$build/dsv4ctl" mkmodel --preset tiny --seed 1 -o "$state/dsv4-tiny"
fi
"$build/dsv4ctl" list
"$build/dsv4ctl" validate -c "$state/dsv4d.ini"
url=http://127.0.0.1:8000
if curl -s -o /dev/null "$url/health" 2>/dev/null; then
    echo "demo: something already answers on $url; stop it first" >&2
    exit 1
fi
"$build/dsv4d" -c "$state/dsv4d.ini" &
pid=$!
trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null' INT TERM
i=0
until kill -0 "$pid" 2>/dev/null && curl -sf "$url/health" >/dev/null 2>&1; do
    i=$((i + 1))
    if [ $i -gt 100 ] || ! kill -0 "$pid" 2>/dev/null; then
        echo "demo: dsv4d did not come up" >&2
        kill "$pid" 2>/dev/null
        exit 1
    fi
    sleep 0.1
done
body='{"model":"dsv4-tiny","prompt":"Hello, DeepSeek","max_tokens":16,"temperature":0}'
echo "demo: POST $url/v1/completions $body"
curl -sS --fail-with-body "$url/v1/completions" -H 'Content-Type: application/json' -d "$body"
echo
cat <<MSG

dsv4d is serving the embedded tiny model on $url (Ctrl-C stops it). Try:

  curl $url/v1/chat/completions -H 'Content-Type: application/json' \\
    -d '{"model":"dsv4-tiny","messages":[{"role":"user","content":"hi"}],"max_tokens":16,"stream":true}'

MSG
wait "$pid"
