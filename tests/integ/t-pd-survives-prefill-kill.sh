#!/bin/sh
# t-pd-survives-prefill-kill: kill -9 of a prefill server while its transfer is in flight
# (transport/chaos delays the writes). With a second prefill server the request is retried
# there and the client gets the unified server's tokens; with none left it fails cleanly
# (an error answer, not a hang) and the decode server keeps serving: once a prefill server
# comes back on the same address it reconnects and answers again. The killed peer's
# leases are released (its connection closed: no write can come from a dead process), so
# pages return to their baseline and nothing stays quarantined.
exec python3 - <<'PY'
import os, signal, sys, threading, time
sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.join(os.environ.get("top_srcdir", "."), "tests", "integ"))
from dsv4d_http import Daemon, plan, ok, is_, diag, done
from dsv4d_pd import (TRANSPORTS, chaos, prefill, decode, wait_connected, wait_log, generate,
                      held_pages, restartable_port)

plan(12)
local = TRANSPORTS["local"]
slow = chaos("local", delay=100, delay_time="5s")
ids = [256] + [(3 * i) % 250 for i in range(300)]

u = Daemon()
want = generate(u, ids, temperature=0.7, seed=42)


def kill_mid_transfer(d, victim, leases_before):
    """Start a request on d, kill -9 victim once the lease is out; returns the answer."""
    out = {}
    t = threading.Thread(target=lambda: out.setdefault(
        "r", generate(d, ids, temperature=0.7, seed=42)))
    t.start()
    deadline = time.time() + 30
    while time.time() < deadline and \
            d.metrics().get("dsv4d_pd_leases_total", 0) <= leases_before:
        time.sleep(0.02)
    time.sleep(0.5)  # prefill of 300 tokens is done; the delayed writes are pending
    victim.proc.send_signal(signal.SIGKILL)
    victim.proc.wait()
    t.join(120)
    return out.get("r")


# --- two prefill servers: the first dies, the retry goes to the second
p1 = prefill(slow)
p2 = prefill(local)
d = decode(local, [p1, p2])
ok(wait_connected(d, 2), "both prefill servers connected")
base = held_pages(d.metrics())
got = kill_mid_transfer(d, p1, 0)
is_(got, want, "after kill -9 of the prefill server the request completes on the other one")
ok(wait_log(d, r"pd: prefill \S+: connection lost"), "the decode server saw the peer go")
is_(generate(d, ids[:40]), generate(u, ids[:40]), "the decode server keeps serving")
m = d.wait_idle()
is_(held_pages(m), base, "decode pages back to the baseline")
is_(m.get("dsv4d_pd_quarantined_pages"), 0.0, "nothing quarantined")
for x in (d, p2):
    x.stop()

# --- one prefill server: it dies, the client gets a clean error, then it comes back
port = restartable_port()
p1 = prefill(slow, port=port)
d = decode(local, [p1])
ok(wait_connected(d, 1), "the prefill server connected")
base = held_pages(d.metrics())
got = kill_mid_transfer(d, p1, 0)
ok(got is not None and got[0] == 503 and b'"error"' in got[1],
   "with no prefill server left the client gets an error answer", got)
is_(d.request("GET", "/health").status, 200, "the decode server is still up")
p3 = prefill(local, port=port)
ok(wait_connected(d, 2), "a prefill server on the same address is connected again")
is_(generate(d, ids, temperature=0.7, seed=42), want, "and requests complete again")
m = d.wait_idle()
ok(held_pages(m) == base and m.get("dsv4d_pd_quarantined_pages") == 0,
   "decode pages back to the baseline, nothing quarantined", m)
done()
PY
