#!/bin/sh
# t-pd-golden-tokens-match-unified: the same requests (greedy and seeded sampling; prompts
# of 1, 2, 17 tokens, around a page boundary and over several pages) give bit-identical
# token ids through a unified server and through a prefill + decode pair, over
# transport/local across processes (the decode pool in shared memory) and over transport/ucx
# on tcp and on shared memory. Every transfer verifies (no checksum mismatch, no retry), a
# repeated prompt adopts the decode server's cached pages instead of moving them, the
# decode server's pages return to their baseline, and the prefill server refuses client
# completions. A request for its prompt's logprobs is computed on the decode server itself
# (no lease): the unified server's logprobs and tokens.
exec python3 - <<'PY'
import os, sys
sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.join(os.environ.get("top_srcdir", "."), "tests", "integ"))
from dsv4d_http import Daemon, plan, ok, is_, diag, done
from dsv4d_pd import TRANSPORTS, prefill, decode, wait_connected, generate, prompts, held_pages

plugins = os.environ.get("DSV4D_PLUGIN_PATH", "")
kinds = ["local"]
if os.path.exists(os.path.join(plugins, "dsv4-transport-ucx.so")):
    kinds += ["ucx-tcp", "ucx-shm"]
cases = prompts()
plan(3 + 8 * 3)

u = Daemon()
want = [generate(u, ids, temperature=t, seed=s) for ids, t, s in cases]
ok(all(w[0] == 200 for w in want), "the unified server answers every request", want)

p0 = None
for kind in ["local", "ucx-tcp", "ucx-shm"]:
    if kind not in kinds:
        for i in range(8):
            ok(True, "# SKIP transport/ucx not built")
        continue
    p = prefill(TRANSPORTS[kind])
    d = decode(TRANSPORTS[kind], [p])
    ok(wait_connected(d, 1), "%s: the decode server connects to its prefill server" % kind)
    base = held_pages(d.metrics())
    got = [generate(d, ids, temperature=t, seed=s) for ids, t, s in cases]
    bad = [(len(c[0]), c[1], w, g) for c, w, g in zip(cases, want, got) if w != g]
    ok(not bad, "%s: %d requests give the unified server's tokens" % (kind, len(cases)), bad)
    m = d.wait_idle()
    n_pd = sum(1 for ids, _, _ in cases if len(ids) > 1)
    is_(m.get("dsv4d_pd_leases_total"), float(n_pd),
        "%s: one lease per request with more than one prompt token" % kind)
    ok(m.get("dsv4d_pd_transfer_bytes_total", 0) > 0
       and m.get("dsv4d_pd_checksum_mismatches_total") == 0
       and m.get("dsv4d_pd_retries_total") == 0 and m.get("dsv4d_pd_stale_messages_total") == 0,
       "%s: every transfer verified the first time" % kind, m)
    # the seeded run of the 700-token prompt finds the greedy run's first 2 pages cached
    is_(m.get("dsv4d_prefix_cache_hit_tokens_total"), 512.0,
        "%s: a repeated prompt adopted its cached whole pages, once" % kind)
    is_(held_pages(m), base, "%s: decode pages back to the baseline" % kind)
    pm = p.wait_idle()
    ok(held_pages(pm) == 0 and pm.get("dsv4d_pd_transfer_bytes_total") ==
       m.get("dsv4d_pd_transfer_bytes_total"),
       "%s: the prefill server wrote those bytes and holds no page" % kind, pm)
    scoring = {"input_ids": cases[6][0], "max_tokens": 4, "temperature": 0,
               "input_logprobs": True}
    wu = u.post("/generate", scoring).json()
    wd = d.post("/generate", scoring).json()
    ok(wd.get("input_logprobs") == wu["input_logprobs"] and wd["output_ids"] == wu["output_ids"]
       and d.wait_idle().get("dsv4d_pd_leases_total") == float(n_pd),
       "%s: input_logprobs on the decode server: the unified server's, computed there (no "
       "lease)" % kind, (wu, wd))
    if kind == "local":
        p0 = p
    else:
        d.stop()
        p.stop()

r = p0.post("/generate", {"input_ids": [256, 1, 2], "max_tokens": 2})
ok(r.status >= 400 and "error" in (r.json() or {}),
   "the prefill server refuses client completions with an error", r.body)
r = p0.request("GET", "/health")
is_(r.status, 200, "the prefill server answers /health")
done()
PY
