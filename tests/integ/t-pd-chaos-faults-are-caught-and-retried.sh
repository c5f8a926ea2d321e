#!/bin/sh
# t-pd-chaos-faults-are-caught-and-retried: a decode server with two prefill servers, the
# first behind transport/chaos. Corrupted and dropped transfers (chaos over local, then over
# ucx on tcp) are caught by the checksums, aborted and retried on the other prefill server:
# the client still gets the unified server's tokens, /metrics counts the mismatches and the
# retries. A hung transfer ends at the prefill server's transfer_timeout after it was
# posted, long before the lease's deadline (waiting_timeout + transfer_timeout), and is
# retried. After every phase the decode server's pages are back to their baseline and
# nothing is quarantined.
exec python3 - <<'PY'
import os, sys, time
sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.join(os.environ.get("top_srcdir", "."), "tests", "integ"))
from dsv4d_http import Daemon, plan, ok, is_, diag, done
from dsv4d_pd import (TRANSPORTS, DEADLINES, chaos, prefill, decode, wait_connected, generate,
                      prompts, held_pages)

plugins = os.environ.get("DSV4D_PLUGIN_PATH", "")
have_ucx = os.path.exists(os.path.join(plugins, "dsv4-transport-ucx.so"))
cases = [c for c in prompts() if len(c[0]) > 1][:8]
plan(1 + 3 * 5)

u = Daemon()
want = [generate(u, ids, temperature=t, seed=s) for ids, t, s in cases]
ok(all(w[0] == 200 for w in want), "the unified server answers every request", want)


def phase(name, faulty, clean, n_cases, check, deadlines=DEADLINES):
    """A decode server over `clean` with a faulty and a clean prefill server."""
    p1 = prefill(faulty, deadlines=deadlines)
    p2 = prefill(clean, deadlines=deadlines)
    d = decode(clean, [p1, p2], retries=2, deadlines=deadlines)
    ok(wait_connected(d, 2), "%s: both prefill servers connected" % name)
    base = held_pages(d.metrics())
    t0 = time.time()
    got = [generate(d, ids, temperature=t, seed=s) for ids, t, s in cases[:n_cases]]
    took = time.time() - t0
    bad = [(len(c[0]), w, g) for c, w, g in zip(cases, want, got) if w != g]
    ok(not bad, "%s: every client still gets the unified server's tokens" % name, bad)
    m = d.wait_idle()
    check(m, took)
    is_(held_pages(m), base, "%s: decode pages back to the baseline" % name)
    is_(m.get("dsv4d_pd_quarantined_pages"), 0.0, "%s: nothing quarantined" % name)
    for x in (d, p1, p2):
        x.stop()


def caught(name):
    def check(m, took):
        ok(m.get("dsv4d_pd_checksum_mismatches_total", 0) > 0
           and m.get("dsv4d_pd_retries_total", 0) >= m.get("dsv4d_pd_checksum_mismatches_total")
           and m.get("dsv4d_requests_failed_total") == 0,
           "%s: checksum mismatches counted, each one retried, no request failed" % name, m)
    return check


phase("local", chaos("local", corrupt=50, drop=30, seed=7), TRANSPORTS["local"], len(cases),
      caught("local"))

if have_ucx:
    phase("ucx-tcp", chaos("ucx", "tls=tcp", corrupt=50, drop=30, seed=11),
          TRANSPORTS["ucx-tcp"], len(cases), caught("ucx-tcp"))
else:
    for i in range(5):
        ok(True, "# SKIP transport/ucx not built")


# a lease's deadline of 62 s, of which a posted transfer has 2 s to land
HANG_DEADLINES = DEADLINES.replace("waiting_timeout = 5s", "waiting_timeout = 60s").replace(
    "transfer_timeout = 3s", "transfer_timeout = 2s")


def hung(m, took):
    # each hung transfer is cancelled 2 s after it was posted and retried on the clean
    # server: both requests end long before one lease deadline (62 s) could pass
    ok(m.get("dsv4d_pd_timeouts_total", 0) >= 2 and m.get("dsv4d_pd_retries_total", 0) >= 2
       and took < 30,
       "hang: the hung transfers timed out at their transfer_timeout, not the lease's "
       "deadline, and were retried (%.1fs)" % took, m)


phase("hang", chaos("local", hang=100), TRANSPORTS["local"], 2, hung, HANG_DEADLINES)
done()
PY
