#!/bin/sh
# t-http-sigterm-drains-then-exits: on SIGTERM (or SIGINT) dsv4d stops accepting
# connections, lets a running stream finish within [server] shutdown_grace (it ends with
# its finish_reason and [DONE]), and exits 0; with no grace left, a running stream is
# aborted cleanly (finish_reason abort, then [DONE]) and dsv4d still exits 0.
exec python3 - <<'EOF'
import json, os, signal, socket, sys, threading, time
sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.join(os.environ.get("top_srcdir", "."), "tests", "integ"))
from dsv4d_http import Daemon, plan, ok, is_, diag, done, sse_events, post_raw

plan(9)


def stream_in_thread(d, body, out):
    """Start a stream; set out["started"] at its first chunk, keep every event."""
    def run():
        c = d.conn()
        try:
            c.request("POST", "/v1/completions", body=json.dumps(body).encode(),
                      headers={"Content-Type": "application/json"})
            r = c.getresponse()
            buf = b""
            while True:
                b = r.read1(4096) if hasattr(r, "read1") else r.read(4096)
                if not b:
                    break
                buf += b
                if b"data: " in buf:
                    out["started"].set()
            out["events"] = [e[6:] for e in buf.decode().split("\n\n") if e.startswith("data: ")]
        except Exception as e:  # reported by the assertions below
            out["error"] = repr(e)
        finally:
            out["started"].set()
            c.close()
    out["started"] = threading.Event()
    t = threading.Thread(target=run)
    t.start()
    return t


# --- within the grace: new connections are refused, the running stream finishes.
# The client stops reading after the first chunk, so the stream is certainly still
# being delivered while dsv4d drains; it then reads the rest.
d = Daemon(server="shutdown_grace = 60s\n")
s, got = post_raw(d.port, "/v1/completions", {"prompt": "Go", "max_tokens": 3000,
                                                "temperature": 0, "ignore_eos": True,
                                                "stream": True}, events=1, timeout=60)
d.signal(signal.SIGTERM)
refused = False
deadline = time.time() + 30  # a bound for a loaded machine, not a speed requirement
while not refused and time.time() < deadline:
    try:
        socket.create_connection(("127.0.0.1", d.port), timeout=5).close()
        time.sleep(0.01)
    except OSError:
        refused = True
ok(refused, "SIGTERM: new connections are refused while the stream drains")
while True:
    b = s.recv(65536)
    if not b:
        break
    got += b
s.close()
ev = sse_events(got)
ok(ev and ev[-1] == "[DONE]", "SIGTERM: the running stream still ends with [DONE]", ev[-3:])
last = json.loads(ev[-2]) if len(ev) >= 2 else {}
is_(last.get("choices", [{}])[0].get("finish_reason"), "length",
    "SIGTERM within the grace: the stream ran to max_tokens")
is_(d.wait(60), 0, "SIGTERM: exit 0")
ok("listening on" in d.log() and ": error: " not in d.log(), "no error logged", d.log())
d.stop()

# --- no grace: the running stream is aborted cleanly
d = Daemon(server="shutdown_grace = 0s\n")
out = {}
t = stream_in_thread(d, {"prompt": "Go", "max_tokens": 4000, "temperature": 0,
                         "ignore_eos": True, "stream": True}, out)
out["started"].wait(60)
d.signal(signal.SIGINT)
t.join(120)
ev = out.get("events", [])
ok(not t.is_alive() and ev and ev[-1] == "[DONE]", "SIGINT with no grace: the stream is closed with [DONE]",
   out.get("error"))
last = json.loads(ev[-2]) if len(ev) >= 2 else {}
is_(last.get("choices", [{}])[0].get("finish_reason"), "abort",
    "no grace: the stream says finish_reason abort")
ok(sum(1 for e in ev[:-1] if json.loads(e)["choices"][0]["text"]) < 4000,
   "no grace: it ended before max_tokens")
is_(d.wait(60), 0, "SIGINT: exit 0")
d.stop()
done()
EOF
