#!/bin/sh
# t-serve-load-flags-differing-greedy-answers: bench/serve-load -g against a scripted
# completions server (no dsv4d), so the soaks' garbling check is itself checked: where the
# server answers a prompt the same every time, every repeat of a greedy recipe is compared
# and none is bad; where a repeat's text differs (one byte, or one token shorter), serve-load
# counts it bad, says where the answers part, and exits 1. -G sets the share of greedy
# requests.
export top_builddir="${top_builddir:-.}"
exec python3 - <<'PYEOF'
import hashlib, http.server, json, os, subprocess, sys, threading
sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.join(os.environ["top_srcdir"], "tests", "integ"))
from dsv4d_http import plan, ok, is_, diag, done

LOAD = os.path.join(os.environ["top_builddir"], "bench", "serve-load")
state = {"mode": "stable", "greedy": 0}
lock = threading.Lock()


class Completions(http.server.BaseHTTPRequestHandler):
    """Streams max_tokens one-character text events, then the usage chunk and [DONE]; the
    text is the prompt's hash, and in mode "garble" every third greedy answer has its
    first character changed and every fifth one token less (finish_reason stop)."""

    protocol_version = "HTTP/1.1"  # serve-load reads HTTP/1.1 answers

    def do_POST(self):
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        n = req["max_tokens"]
        text = hashlib.sha256(req["prompt"].encode()).hexdigest() * (1 + n // 64)
        text = list(text[:n])
        with lock:
            k = state["greedy"] = state["greedy"] + (req["temperature"] == 0)
        finish = "length"
        if state["mode"] == "garble" and req["temperature"] == 0:
            if k % 3 == 0:
                text[0] = "#"
            elif k % 5 == 0 and n > 1:
                text, finish = text[:-1], "stop"
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        for j, c in enumerate(text):
            last = j == len(text) - 1
            self.event({"object": "text_completion", "id": "cmpl-1", "choices": [
                {"index": 0, "text": c, "finish_reason": finish if last else None}]})
        self.event({"object": "text_completion", "id": "cmpl-1", "choices": [], "usage": {
            "prompt_tokens": 5, "completion_tokens": len(text), "total_tokens": 5 + len(text)}})
        self.wfile.write(b"data: [DONE]\n\n")

    def event(self, obj):
        self.wfile.write(b"data: " + json.dumps(obj).encode() + b"\n\n")

    def log_message(self, *args):
        pass


srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Completions)
threading.Thread(target=srv.serve_forever, daemon=True).start()


def load(*extra):
    r = subprocess.run([LOAD, "-P", str(srv.server_address[1]), "-c", "4", "-n", "60",
                        "-p", "16,64", "-o", "8,32", "-s", "7"] + list(extra),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
    res = dict(kv.split("=", 1) for kv in r.stdout.split())
    return r, res


plan(12)
r, res = load("-g", "3")
is_((r.returncode, res.get("bad")), (0, "0"), "answers the same every time: none is bad")
ok(int(res.get("greedy_repeats", 0)) >= 20, "greedy recipes were asked again and compared "
   "(%s repeats)" % res.get("greedy_repeats"), r.stdout)
state["mode"] = "garble"
r, res = load("-g", "3")
diag(r.stderr.strip())
bad = int(res.get("bad", 0))
is_(r.returncode, 1, "differing greedy answers: serve-load exits 1")
ok(bad >= 5, "every differing repeat counted bad (%d)" % bad, r.stdout)
ok("greedy answer differs from its recipe's first (recipe " in r.stderr and "byte 0 of" in
   r.stderr, "serve-load says which recipe differed and at which byte", r.stderr)
r, res = load()
is_((r.returncode, res.get("bad"), "greedy_repeats" in res), (0, "0", False),
    "without -g each request has its own prompt: nothing compared, nothing bad")
state["mode"] = "stable"
for pct, want in (("100", 60), ("0", 0)):
    before = state["greedy"]
    r, res = load("-G", pct)
    is_((r.returncode, state["greedy"] - before), (0, want),
        "-G %s: %d of the 60 requests greedy" % (pct, want))
for pct, lo, hi in (("25", 5, 25), ("75", 35, 55)):
    before = state["greedy"]
    r, res = load("-G", pct)
    got = state["greedy"] - before
    ok(r.returncode == 0 and lo <= got <= hi,
       "-G %s: about that share of the 60 requests greedy (%d)" % (pct, got))
r, res = load("-G", "100", "-g", "3")
is_((r.returncode, res.get("bad"), res.get("greedy_repeats")), (0, "0", "57"),
    "-G 100 -g 3: every request asks one of 3 recipes, each repeat compared")
r, _ = load("-G", "101")
is_(r.returncode, 2, "-G 101: a usage error, exit 2")
srv.shutdown()
done()
PYEOF
