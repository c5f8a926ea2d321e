#!/bin/sh
# t-repro-records-then-matches-golden: dsv4ctl repro against a dsv4d serving the tiny
# model records every turn of its agentic sessions one at a time, then replays them at
# concurrency 6 and finds every session identical; a golden file with one token changed
# is reported as exactly that session, turn and position (exit 1, report and plot say
# so); a golden file of another workload, --record with --golden, a closed port and a
# server that never answers are each reported for what they are.
exec python3 - <<'EOF'
import json, os, re, socket, subprocess, sys
sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.join(os.environ.get("top_srcdir", "."), "tests", "integ"))
from dsv4d_http import Daemon, DSV4CTL, plan, ok, is_, diag, done

plan(27)
d = Daemon(server="max_running = 8\n")
url = "http://127.0.0.1:%d" % d.port
tmp = d.tmp
golden = os.path.join(tmp, "golden.json")
base = ["--sessions", "6", "--turns", "3", "--seed", "11", "--max-tokens", "6"]


def repro(*args, timeout=600):
    p = subprocess.run([DSV4CTL, "repro"] + list(args), capture_output=True, text=True,
                       timeout=timeout)
    return p.returncode, p.stdout + p.stderr


rc, out = repro("--url", url, "--concurrency", "1", "--record", golden, *base)
is_(rc, 0, "record: exit 0")
ok("requests: 18 ok, 0 failed, 0 timed out, 0 not run" in out, "record: 18 requests ok", out)
g = json.load(open(golden))
ok(g["format"] == "dsv4-repro-golden" and g["seed"] == 11 and g["sessions"] == 6
   and g["turns"] == 3 and g["max_tokens"] == 6
   and all(len(t) == 6 for s in g["outputs"] for t in s), "golden: 6 x 3 answers of 6 ids")

report = os.path.join(tmp, "report.json")
plot = os.path.join(tmp, "plot.svg")
rc, out = repro("--url", url, "--concurrency", "6", "--golden", golden, "--report", report,
                "--plot", plot, *base)
is_(rc, 0, "compare at concurrency 6: exit 0")
ok("sessions: 0 corrupted, 0 failed" in out, "compare: no session corrupted", out)
r = json.load(open(report))
ok(r["format"] == "dsv4-repro-report" and r["compared"] and r["concurrency"] == 6,
   "report: a comparison at concurrency 6")
is_(r["requests"], {"total": 18, "ok": 18, "failed": 0, "timed_out": 0, "not_run": 0},
    "report: request counts")
is_((r["sessions_corrupted"], r["corrupted"], r["failures"]), (0, [], []),
    "report: nothing corrupted or failed")
is_(len(r["requests_log"]), 18, "report: one log entry per request")
grows = all(a["prompt_tokens"] < b["prompt_tokens"] for a, b in
            zip(r["requests_log"], r["requests_log"][1:]) if a["session"] == b["session"])
ok(grows, "report: each session's prompt grows turn by turn")
ok(r["latency_ms"]["p50"] > 0 and r["latency_ms"]["p99"] >= r["latency_ms"]["p50"],
   "report: client latency percentiles")
ok(r["server"]["ttft_s"]["p50"] is not None and r["server"]["itl_s"]["p99"] is not None,
   "report: server TTFT and ITL from /metrics", r["server"])
c = r["server"]["counters"]
ok(c.get("dsv4d_requests_total") == 18 and c.get("dsv4d_prefix_cache_hit_tokens_total", 0) > 0,
   "report: the run's server counters, later turns hit the prefix cache", c)
svg = open(plot).read()
ok(svg.startswith("<svg") and svg.rstrip().endswith("</svg>") and svg.count("<circle") == 18 + 1,
   "plot: an SVG with one point per request (and the legend's)")

# one token changed: session 2, turn 1, position 3
g["outputs"][2][1][3] = (g["outputs"][2][1][3] + 1) % 256
bad = os.path.join(tmp, "bad.json")
json.dump(g, open(bad, "w"))
rc, out = repro("--url", url, "--concurrency", "6", "--golden", bad, "--report", report,
                "--plot", plot, *base)
is_(rc, 1, "a changed golden token: exit 1")
ok("sessions: 1 corrupted, 0 failed" in out, "one session corrupted", out)
ok("session 2: corrupted from turn 1, token 3" in out, "the first divergence is named", out)
r = json.load(open(report))
is_(r["corrupted"], [{"session": 2, "turn": 1, "position": 3}], "report: where it diverged")
ok(abs(r["corruption_rate"] - 1 / 6) < 1e-9, "report: corruption rate 1/6")
svg = open(plot).read()
ok("session 2 turn 1: differs at token 3" in svg, "plot: the corrupted request is marked")

g["seed"] = 12
json.dump(g, open(bad, "w"))
rc, out = repro("--url", url, "--concurrency", "6", "--golden", bad, *base)
ok(rc == 2 and "golden file was recorded with seed 12" in out,
   "a golden file of another workload is refused", out)
rc, out = repro("--url", url, "--concurrency", "1", "--golden", golden, "--record", bad, *base)
ok(rc == 2 and "exclude each other" in out, "--record with --golden is a usage error", out)
# a port bound but not listening refuses connections, and no other process can take it
s = socket.socket()
s.bind(("127.0.0.1", 0))
rc, out = repro("--url", "http://127.0.0.1:%d" % s.getsockname()[1], "--concurrency", "2", *base)
s.close()
ok(rc == 1 and "requests: 0 ok, 6 failed, 0 timed out, 12 not run" in out
   and "connect failed" in out, "a closed port: every session fails at its first turn", out)

# a server that accepts connections and never answers
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(16)
rc, out = repro("--url", "http://127.0.0.1:%d" % s.getsockname()[1], "--concurrency", "6",
                "--timeout", "1", "--report", report, *base)
s.close()
ok(rc == 1 and "0 failed, 6 timed out" in out, "a silent server: requests time out", out)
is_(json.load(open(report))["failures"][0]["status"], "timed_out", "report: timed_out named")

rc, out = repro("--url", url, "--sessions", "0", "--concurrency", "1", "--turns", "1")
ok(rc == 2 and "--sessions" in out, "--sessions 0 is a usage error", out)
m = d.wait_idle()
ok(m.get("dsv4d_requests_running") == 0 and m.get("dsv4d_requests_waiting") == 0,
   "the server is idle afterwards", m)
d.stop()
done()
EOF
