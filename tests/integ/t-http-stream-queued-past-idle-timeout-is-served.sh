#!/bin/sh
# t-http-stream-queued-past-idle-timeout-is-served: a streamed request that waits for its
# tokens (queued behind others, one batch place) for longer than [server] idle_timeout
# keeps its connection and gets its whole stream: waiting for tokens is not idleness.
# Before the fix such a stream was closed without a byte when its first token came.
exec python3 - <<'PY'
import json, os, sys, threading, time
sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.join(os.environ.get("top_srcdir", "."), "tests", "integ"))
from dsv4d_http import Daemon, plan, ok, is_, diag, done

plan(3)
d = Daemon(server="max_running = 1\nidle_timeout = 1s\n")
N, MAX = 3, 1500
got = {}


def client(i):
    t0 = time.time()
    try:
        status, ctype, ev = d.stream("/v1/completions",
                                     {"prompt": "queued %d " % i + "x" * 500, "max_tokens": MAX,
                                      "ignore_eos": True, "stream": True})
        chunks = [json.loads(e) for e in ev[:-1]]
        got[i] = (status, ev[-1] if ev else None, chunks[-1]["choices"][0]["finish_reason"]
                  if chunks else None, time.time() - t0)
    except Exception as e:
        got[i] = (repr(e),)


threads = [threading.Thread(target=client, args=(i,)) for i in range(N)]
for t in threads:
    t.start()
for t in threads:
    t.join(600)
diag("seconds per stream (the last ones waited behind the first): %s"
     % sorted(round(g[-1], 1) for g in got.values() if len(g) == 4))
bad = [g for g in got.values() if g[:3] != (200, "[DONE]", "length")]
ok(len(got) == N and not bad,
   "every stream, queued or not, ends with finish_reason length and [DONE]", bad)
m = d.wait_idle()
ok(m.get("dsv4d_requests_aborted_total") == 0, "no request was aborted", m)
d.signal()
is_(d.wait(60), 0, "SIGTERM: exit 0")
done()
PY
