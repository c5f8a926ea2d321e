#!/bin/sh
# t-pd-decode-reuses-its-cached-prefix: a multi-turn session through a prefill + decode pair
# moves each turn's history once. The decode server keeps every whole page of a finished
# request in its own prefix cache; a later turn adopts the longest cached whole-page prefix
# of its prompt and leases only the pages after it (and the state). Checked per turn: the
# tokens equal a unified server's (greedy and seeded), the decode server's prefix-cache hit
# tokens grow by exactly the adopted pages, and the bytes moved are exactly those of the
# pages after them (the page and state sizes solved from two turns, checked on the third),
# on the decode and the prefill side alike. A second session that shares only the first
# session's first page adopts that page. The choices of one request move the prompt's whole
# pages once: the first choice's lease moves them, the others adopt them from the cache and
# lease the last page and the state. The pool returns to its baseline. A decode pool
# that its cache fills still admits a longer prompt: its pages come from eviction.
exec python3 - <<'PY'
import os, sys
sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.join(os.environ.get("top_srcdir", "."), "tests", "integ"))
from dsv4d_http import Daemon, plan, ok, is_, diag, done
from dsv4d_pd import TRANSPORTS, prefill, decode, wait_connected, generate, held_pages

PT = 256             # the daemon's page size in tokens
PAGE_BYTES = 54272   # a page of the tiny model's KV (kv f32, every buffer of every layer)
NEW = 12             # tokens each turn generates
plan(20)


def pages(tokens):
    return (tokens + PT - 1) // PT


u = Daemon()
p = prefill(TRANSPORTS["local"])
d = decode(TRANSPORTS["local"], [p])
ok(wait_connected(d, 1), "the decode server connects to its prefill server")
base = held_pages(d.metrics())

# three turns: each prompt is the last prompt, its answer and a new message
more = [[256] + [(5 * i) % 250 for i in range(599)],
        [(11 * i + 3) % 250 for i in range(300)],
        [(13 * i + 7) % 250 for i in range(800)]]
prompt, moved, hits, sent, kept = [], [], [], [], 0
last = d.metrics()
for turn, extra in enumerate(more):
    prompt = prompt + extra
    temp, seed = (0, None) if turn != 1 else (0.8, 77)
    want = generate(u, prompt, max_tokens=NEW, temperature=temp, seed=seed)
    got = generate(d, prompt, max_tokens=NEW, temperature=temp, seed=seed)
    is_(got, want, "turn %d (%d prompt tokens): the unified server's tokens" % (turn + 1, len(prompt)))
    m = d.wait_idle()
    n_kv = len(prompt) - 1
    # at least one page moves; the cache holds the whole pages the last turn fed
    adopt = min(kept, (n_kv - 1) // PT)
    moved.append(pages(n_kv) - adopt)
    hits.append(m.get("dsv4d_prefix_cache_hit_tokens_total", 0)
                - last.get("dsv4d_prefix_cache_hit_tokens_total", 0))
    sent.append(m.get("dsv4d_pd_transfer_bytes_total", 0)
                - last.get("dsv4d_pd_transfer_bytes_total", 0))
    diag("turn %d: %d KV tokens, %d pages adopted, %d moved, %d bytes"
         % (turn + 1, n_kv, adopt, moved[-1], sent[-1]))
    kept = (len(prompt) + NEW - 1) // PT  # the KV of the prompt and all but the last token
    prompt = prompt + got[1]
    last = m

is_(hits, [0, 2 * PT, 3 * PT], "the decode server adopted 0, 2 and 3 cached pages")
ok(moved == [3, 2, 4], "so the turns moved 3, 2 and 4 of their 3, 4 and 7 pages", moved)
page = sent[0] - sent[1]
state = sent[0] - 3 * page
ok(page > 0 and state > 0, "a page and the state each move bytes (%d, %d)" % (page, state))
is_(sent[2], 4 * page + state, "the third turn moved exactly its 4 new pages and the state")
m = d.wait_idle()
ok(m.get("dsv4d_pd_checksum_mismatches_total") == 0 and m.get("dsv4d_pd_retries_total") == 0,
   "every transfer verified the first time", m)
pm = p.wait_idle()
is_(pm.get("dsv4d_pd_transfer_bytes_total"), m.get("dsv4d_pd_transfer_bytes_total"),
    "the prefill server wrote exactly those bytes")

# another session sharing only the first page of the first one
other = more[0][:PT] + [(17 * i + 1) % 250 for i in range(400)]
want = generate(u, other, max_tokens=NEW)
before = d.metrics()
is_(generate(d, other, max_tokens=NEW), want, "a session sharing one page: the unified tokens")
m = d.wait_idle()
is_(m.get("dsv4d_prefix_cache_hit_tokens_total") - before.get("dsv4d_prefix_cache_hit_tokens_total"),
    float(PT), "it adopted the shared page")
is_(m.get("dsv4d_pd_transfer_bytes_total") - before.get("dsv4d_pd_transfer_bytes_total"),
    float(2 * page + state), "and moved its two other pages")

# the 3 choices of one request over a fresh 600-id prompt: the first's lease moves its 3
# pages; then its 2 whole pages go to the cache, and each other choice adopts them and
# moves only its last page and the state
fresh = [256] + [(29 * i + 4) % 250 for i in range(599)]
body = {"prompt": fresh, "max_tokens": 4, "temperature": 1.0, "seed": 7, "n": 3,
        "ignore_eos": True}
want = [c["text"] for c in u.post("/v1/completions", body).json()["choices"]]
before = d.metrics()
got = d.post("/v1/completions", body).json()
m = d.wait_idle()
is_([c["text"] for c in got["choices"]], want, "n = 3 on the decode server: the unified texts")
is_(m.get("dsv4d_pd_transfer_bytes_total") - before.get("dsv4d_pd_transfer_bytes_total"),
    float(3 * page + state + 2 * (page + state)),
    "the first choice moved 3 pages and the state, the other two 1 page and the state each")
is_(held_pages(m), base, "decode pages back to the baseline (the rest is the prefix cache)")
r = d.post("/v1/completions", {"prompt": "Hello there", "max_tokens": 3, "temperature": 0})
is_(r.status, 200, "the decode server still serves text completions")
d.stop()

# A decode pool of 8 pages that its cache fills: a request's pages, taken at admission
# rather than step by step, come from evicting cached ones (never "no space").
small = decode(TRANSPORTS["local"], [p], kv_pool="%dK" % (8 * PAGE_BYTES // 1024))
ok(wait_connected(small, 1) and small.metrics().get("dsv4d_kv_pages_total") == 8,
   "a decode server with an 8-page pool connects")
a = [256] + [(19 * i + 2) % 250 for i in range(899)]
b = [256] + [(23 * i + 5) % 250 for i in range(1699)]
got = [generate(small, x, max_tokens=NEW) for x in (a, b, a)]
is_(got, [generate(u, x, max_tokens=NEW) for x in (a, b, a)],
    "3, then 7 pages of KV, then the first prompt again: the unified server's tokens")
m = small.wait_idle()
ok(m.get("dsv4d_prefix_cache_evicted_pages_total", 0) >= 2 and
   m.get("dsv4d_requests_failed_total") == 0,
   "the second request's pages came from evicting the first one's", m)
done()
PY
