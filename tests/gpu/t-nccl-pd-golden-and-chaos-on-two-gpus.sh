#!/bin/sh
# t-nccl-pd-golden-and-chaos-on-two-gpus: prefill and decode servers on two GPUs (prefill on
# GPU 0, decode on GPU 1, device = cuda) over transport/nccl give the tokens of a unified
# server on GPU 0, bit for bit, every transfer verifying the first time and the decode
# pages back at their baseline; with one of two prefill servers behind transport/chaos
# (delayed and hung transfers), the hung ones end at their transfer_timeout, abort and rebuild
# that prefill server's NCCL connection and are retried, clients still get the unified
# tokens, pages return to baseline and nothing is quarantined. Skips unless two GPUs are
# visible and transport/nccl is built.
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
if [ "${gpus:-0}" -lt 2 ]; then
    echo "1..0 # SKIP needs two GPUs (${gpus:-0} visible)"
    exit 0
fi
if [ ! -f "$DSV4D_PLUGIN_PATH/dsv4-transport-nccl.so" ]; then
    echo "1..0 # SKIP transport/nccl is not built (configure found no NCCL)"
    exit 0
fi
exec python3 - <<'PY'
import os, stat, sys, tempfile, time
sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.join(os.environ.get("top_srcdir", "."), "tests", "integ"))
# The daemons of dsv4d_http run on the CPU; a wrapper moves each to its GPU (decode on 1,
# the others on 0) before dsv4d reads its configuration.
top = os.environ.get("top_builddir", ".")
real = os.environ.get("DSV4D", os.path.join(top, "dsv4d"))
wrap = os.path.join(tempfile.mkdtemp(prefix="dsv4-nccl."), "dsv4d")
with open(wrap, "w") as f:
    f.write('#!/bin/sh\ng=0\ngrep -q "^role = decode" "$2" && g=1\n'
            'sed -i "s/^device = cpu$/device = cuda\\ncuda_device = $g/" "$2"\n'
            'exec "%s" "$@"\n' % real)
os.chmod(wrap, stat.S_IRWXU)
os.environ["DSV4D"] = wrap
from dsv4d_http import Daemon, plan, ok, is_, diag, done
from dsv4d_pd import chaos, prefill, decode, wait_connected, generate, prompts, held_pages

NCCL = "[transport]\nplugin = nccl\n"
cases = prompts()
plan(11)
u = Daemon()
want = [generate(u, ids, temperature=t, seed=s) for ids, t, s in cases]
ok(all(w[0] == 200 for w in want), "the unified server on GPU 0 answers every request", want)
u.stop()

p = prefill(NCCL)
d = decode(NCCL, [p])
ok(wait_connected(d, 1), "nccl: the decode server (GPU 1) connects to its prefill server (GPU 0)")
base = held_pages(d.metrics())
got = [generate(d, ids, temperature=t, seed=s) for ids, t, s in cases]
bad = [(len(c[0]), c[1], w, g) for c, w, g in zip(cases, want, got) if w != g]
ok(not bad, "nccl: %d requests give the unified server's tokens" % len(cases), bad)
m = d.wait_idle()
is_(m.get("dsv4d_pd_leases_total"), float(sum(1 for c in cases if len(c[0]) > 1)),
    "nccl: one lease per request with more than one prompt token")
ok(m.get("dsv4d_pd_transfer_bytes_total", 0) > 0
   and m.get("dsv4d_pd_checksum_mismatches_total") == 0
   and m.get("dsv4d_pd_retries_total") == 0 and m.get("dsv4d_pd_stale_messages_total") == 0,
   "nccl: every transfer verified the first time", m)
is_(held_pages(m), base, "nccl: decode pages back to the baseline")
for x in (d, p):
    x.stop()

some = [(c, w) for c, w in zip(cases, want) if len(c[0]) > 1][:8]
p1 = prefill(chaos("nccl", delay=40, hang=30, seed=5))
p2 = prefill(NCCL)
d = decode(NCCL, [p1, p2], retries=3)
ok(wait_connected(d, 2), "chaos: both prefill servers connected")
base = held_pages(d.metrics())
t0 = time.time()
got = [generate(d, ids, temperature=t, seed=s) for (ids, t, s), _ in some]
took = time.time() - t0
bad = [(len(c[0]), w, g) for (c, w), g in zip(some, got) if w != g]
ok(not bad, "chaos: every client still gets the unified server's tokens", bad)
m = d.wait_idle()
ok(m.get("dsv4d_pd_timeouts_total", 0) >= 1 and m.get("dsv4d_pd_retries_total", 0) >= 1
   and m.get("dsv4d_requests_failed_total") == 0,
   "chaos: hung transfers timed out and were retried, none failed (%.1fs)" % took, m)
is_(held_pages(m), base, "chaos: decode pages back to the baseline")
is_(m.get("dsv4d_pd_quarantined_pages"), 0.0, "chaos: nothing quarantined")
done()
PY
