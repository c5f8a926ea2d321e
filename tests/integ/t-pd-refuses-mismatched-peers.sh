#!/bin/sh
# t-pd-refuses-mismatched-peers: a prefill server with another index-K plugin (so another
# buffer geometry) and one with another shared secret are refused at the handshake, each
# with a log line that says why (the geometry line names what differs); no lease ever goes
# to them, the decode server's clients get a clean error instead of a hang (one error for a
# request of two choices, whole or streamed), and its pages stay at their baseline.
exec python3 - <<'PY'
import json, os, sys
sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.join(os.environ.get("top_srcdir", "."), "tests", "integ"))
from dsv4d_http import plan, ok, is_, diag, done
from dsv4d_pd import TRANSPORTS, prefill, decode, wait_log, generate, held_pages

plan(10)
local = TRANSPORTS["local"]
ids = [256] + list(range(40))

# --- geometry: index-K rows in bf16 at the prefill server, fp8 (the default) here
p = prefill(local + "[indexk]\nplugin = bf16\n")
d = decode(local, [p])
ok(wait_log(d, r"pd: prefill \S+ refused \(pd handshake: geometry differs \(.*indexk plugin fp8 here, "
            r"bf16 at the peer"),
   "the decode server refuses the peer and names the index-K plugin that differs")
ok(wait_log(p, r"pd: decode peer \S+ refused \(.*geometry differs"),
   "the prefill server refuses the decode server too")
st, body = generate(d, ids)
ok(st == 503 and b'"error"' in body, "a request gets a clean 503 error (no prefill server)",
   (st, body))
m = d.wait_idle()
ok(m.get("dsv4d_pd_leases_total") == 0 and held_pages(m) == 0,
   "no lease went out and no page is held", m)
d.stop()
p.stop()

# --- secret: the prefill server holds another one
p = prefill(local, secret="another-secret-0123456789abcdef")
d = decode(local, [p])
ok(wait_log(d, r"pd: prefill \S+ refused \(.*(secret|authenticat|mac)", ),
   "the decode server refuses a peer without the secret")
ok(wait_log(p, r"pd: decode peer \S+ refused"), "the prefill server refuses the decode server")
st, body = generate(d, ids)
ok(st == 503 and b'"error"' in body, "a request gets a clean 503 error", (st, body))
r = d.post("/v1/completions", {"prompt": ids, "max_tokens": 4, "n": 2})
ok(r.error_ok(503), "a request for two choices gets one 503 error", r.body)
status, ctype, ev = d.stream("/v1/completions",
                             {"prompt": ids, "max_tokens": 4, "n": 2, "stream": True})
chunks = [json.loads(e) for e in ev[:-1]]
ok(status == 200 and ev[-1] == "[DONE]" and any("error" in k for k in chunks)
   and not any(c.get("finish_reason") for k in chunks for c in k.get("choices", [])),
   "streamed, it ends in the error, no choice claiming a finish", ev)
m = d.wait_idle()
ok(m.get("dsv4d_pd_leases_total") == 0 and held_pages(m) == 0,
   "no lease went out and no page is held", m)
done()
PY
