#!/bin/sh
# t-gpu-pd-local-golden-tokens-match-unified: on one GPU, a prefill and a decode server with
# device = cuda over transport/local (CUDA IPC between the two processes) give the tokens of
# a unified device = cuda server for the same requests (greedy and seeded; prompts of 1, 2,
# 17 tokens, around a page boundary and over several pages), bit for bit; the prefill
# server attached to the decode server's device pool over CUDA IPC, every transfer verified
# the first time, a repeated prompt adopts the decode server's cached device pages, and the
# decode pages return to their baseline. Skips without a GPU or without CUDA in this build.
# TRANSPORT names another entry of tests/integ/dsv4d_pd.py's TRANSPORTS to run the same
# test over it (t-gpu-pd-ucx-golden-tokens-match-unified.sh: ucx-shm, device pools staged
# through pinned buffers); it then also skips when that plugin is not built.
. "${top_srcdir:-.}/tests/gpu/skip-without-cuda-daemon.sh"
top=${top_builddir:-.}
if [ "${TRANSPORT:-local}" != local ] && \
    [ ! -f "${DSV4D_PLUGIN_PATH:-$top/plugins/.libs}/dsv4-transport-${TRANSPORT%%-*}.so" ]; then
    echo "1..0 # SKIP transport/${TRANSPORT%%-*} is not built"
    exit 0
fi
exec python3 - <<'PY'
import os, sys
sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.join(os.environ.get("top_srcdir", "."), "tests", "integ"))
from dsv4d_http import Daemon, plan, ok, is_, done
from dsv4d_pd import TRANSPORTS, prefill, decode, wait_connected, wait_log, generate, prompts, \
    held_pages

# what the prefill server logs once it reached the decode server's device pool
ATTACHED = {
    "local": r"transport/local: attached to a device pool of \d+ pages \(CUDA IPC",
    "ucx-shm": r"transport/ucx: device pool staged through pinned buffers",
    "ucx-tcp": r"transport/ucx: device pool staged through pinned buffers",
}
name = os.environ.get("TRANSPORT", "local")
cases = prompts()
GPU0 = dict(core="device = cuda\ncuda_device = 0\n")  # every daemon on GPU 0
plan(8)
u = Daemon(**GPU0)
want = [generate(u, ids, temperature=t, seed=s) for ids, t, s in cases]
ok(all(w[0] == 200 for w in want), "the unified device = cuda server answers every request", want)
u.stop()

p = prefill(TRANSPORTS[name], **GPU0)
d = decode(TRANSPORTS[name], [p], **GPU0)
ok(wait_connected(d, 1), "the decode server connects to its prefill server")
ok(wait_log(p, ATTACHED[name]),
   "the prefill server reached the decode server's device pool over %s" % name)
base = held_pages(d.metrics())
got = [generate(d, ids, temperature=t, seed=s) for ids, t, s in cases]
bad = [(len(c[0]), c[1], w, g) for c, w, g in zip(cases, want, got) if w != g]
ok(not bad, "%d requests through prefill + decode give the unified server's tokens"
   % len(cases), bad)
m = d.wait_idle()
is_(m.get("dsv4d_pd_leases_total"), float(sum(1 for c in cases if len(c[0]) > 1)),
    "one lease per request with more than one prompt token")
ok(m.get("dsv4d_pd_transfer_bytes_total", 0) > 0
   and m.get("dsv4d_pd_checksum_mismatches_total") == 0
   and m.get("dsv4d_pd_retries_total") == 0 and m.get("dsv4d_pd_stale_messages_total") == 0,
   "every transfer verified the first time", m)
# the seeded run of the 700-token prompt finds the greedy run's first 2 pages cached
is_(m.get("dsv4d_prefix_cache_hit_tokens_total"), 512.0,
    "a repeated prompt adopted its cached whole pages from the device pool, once")
is_(held_pages(m), base, "decode pages back to the baseline")
done()
PY
