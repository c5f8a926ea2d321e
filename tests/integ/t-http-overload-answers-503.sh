#!/bin/sh
# t-http-overload-answers-503: with [server] max_waiting, a request that would wait past
# the limit is answered 503 at once (an OpenAI-style error body with code overloaded and
# Retry-After: 1) instead of queueing, and counted in dsv4d_requests_rejected_total. With
# max_running 1 and max_waiting 1: a long stream runs; a request for two choices, of which
# only one would find a place, is refused whole (neither is queued); a second
# request waits, a third is refused; once the stream's client hangs up the waiting request is answered whole and the
# server takes new requests again.
exec python3 - <<'EOF'
import os, sys, threading, time
sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.join(os.environ.get("top_srcdir", "."), "tests", "integ"))
from dsv4d_http import Daemon, plan, ok, is_, diag, done, post_raw

plan(8)
d = Daemon(server="max_running = 1\nmax_waiting = 1\n")
small = {"prompt": "Hi", "max_tokens": 4, "temperature": 0, "ignore_eos": True}


def wait_metric(name, value, timeout=60):
    deadline = time.time() + timeout
    m = d.metrics()
    while m.get(name) != value and time.time() < deadline:
        time.sleep(0.02)
        m = d.metrics()
    return m


# a stream long enough to outlast the steps below (seconds; they take milliseconds), whose
# client hangs up before it ends
s, got = post_raw(d.port, "/v1/completions", {"prompt": "Tell me", "max_tokens": 4000,
                                                "temperature": 0, "ignore_eos": True,
                                                "stream": True}, events=1)
ok(got.startswith(b"HTTP/1.1 200") and b"data: {" in got, "a long stream runs", got[:200])

r = d.post("/v1/completions", dict(small, n=2))
m = wait_metric("dsv4d_requests_waiting", 0)
ok(r.error_ok(503) and r.json()["error"]["code"] == "overloaded"
   and m.get("dsv4d_requests_waiting") == 0 and m.get("dsv4d_requests_rejected_total") == 1,
   "n = 2 when one place is left: the request is refused whole, answered 503, neither "
   "choice queued (nothing left waiting)", (r.body, m))

waiting = {}
t = threading.Thread(target=lambda: waiting.update(r=d.post("/v1/completions", small)))
t.start()
m = wait_metric("dsv4d_requests_waiting", 1)
is_(m.get("dsv4d_requests_waiting"), 1.0, "a second request waits behind it")

r = d.post("/v1/completions", small)
ok(r.error_ok(503) and r.json()["error"]["code"] == "overloaded"
   and r.headers.get("Retry-After") == "1",
   "a third is answered 503 overloaded with Retry-After: 1", (r.status, r.headers, r.body))
is_(d.metrics().get("dsv4d_requests_rejected_total"), 2.0, "and counted as rejected")

s.close()
t.join(120)
w = waiting.get("r")
ok(w is not None and w.status == 200 and w.json()["usage"]["completion_tokens"] == 4,
   "once the stream's client hangs up the waiting request is answered whole",
   w.body if w else None)
m = d.wait_idle()
ok(m.get("dsv4d_requests_running") == 0 and m.get("dsv4d_requests_waiting") == 0,
   "nothing runs or waits after", m)
r = d.post("/v1/completions", small)
ok(r.status == 200 and r.json()["usage"]["completion_tokens"] == 4,
   "the server takes new requests again", r.body)
done()
EOF
