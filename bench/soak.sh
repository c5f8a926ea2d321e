#!/bin/sh
# soak.sh: many streamed clients against one dsv4d for a while, some hanging up
# mid-stream; then dsv4d must still answer /health, every answer read to its end must have
# been well formed (bench/serve-load checks each), and the pool must be back to its
# baseline: no request running or waiting, no kv page held outside the prefix cache, and
# no state slot held beyond what the cache's snapshots can account for. The greedy requests
# draw from SOAK_GREEDY (16) recipes, and every greedy answer must be its recipe's first
# byte for byte (serve-load -g): deterministic mode makes an answer independent of the
# batch and the cache state it met, so one that differs was garbled. Prints TAP.
#
#   bench/soak.sh [BUILDDIR]
#
# SOAK_CLIENTS (80), SOAK_ABORT percent (5), and either SOAK_SECONDS (600) or
# SOAK_REQUESTS (a fixed count: the bounded run the test suite makes); SOAK_PROMPTS and
# SOAK_OUTS the prompt lengths and max_tokens to mix (bench/serve-load -p, -o); SOAK_GREEDY
# the greedy recipes (16); SOAK_DEVICE, SOAK_KV_DTYPE, SOAK_KV_POOL and SOAK_INI the
# daemon's backend, KV and more sections (tests/integ/dsv4d_http.py soak_daemon: the CPU by
# default); SOAK_OUT names a markdown file to write the result to, COMMIT the commit it
# names (default: the source tree's HEAD; set it when BUILDDIR was built from a snapshot);
# SOAK_LOGS a directory to keep the daemon's log in.
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
: "${top_srcdir:=$src}"
: "${top_builddir:=$(cd "${1:-.}" && pwd)}"
: "${DSV4D_PLUGIN_PATH:=$top_builddir/plugins/.libs}"
export top_srcdir top_builddir DSV4D_PLUGIN_PATH
exec python3 - <<'EOF'
import os, subprocess, sys, time
sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.join(os.environ["top_srcdir"], "tests", "integ"))
from dsv4d_http import Daemon, plan, ok, is_, diag, done, soak_daemon, HOSTCACHE_METRICS

clients = int(os.environ.get("SOAK_CLIENTS", "80"))
abort_pct = float(os.environ.get("SOAK_ABORT", "5"))
requests = int(os.environ.get("SOAK_REQUESTS", "0"))
seconds = float(os.environ.get("SOAK_SECONDS", "600"))
out = os.environ.get("SOAK_OUT")
greedy = int(os.environ.get("SOAK_GREEDY", "16"))
# fewer batch places than clients, so requests also wait; the snapshots the prefix cache
# may take are bounded by the slots above max_running (core/serve/cache.c)
MAX_RUNNING, STATE_SLOTS = 64, 96

plan(10)
kw, sections, machine = soak_daemon()
d = Daemon(server="max_running = %d\n" % MAX_RUNNING, model="state_slots = %d\n" % STATE_SLOTS,
           extra=sections, **kw)
base = d.wait_idle()
load = [os.path.join(os.environ["top_builddir"], "bench", "serve-load"), "-P", str(d.port),
        "-c", str(clients), "-a", str(abort_pct),
        "-p", os.environ.get("SOAK_PROMPTS", "16,64,256,1024,2048"),
        "-o", os.environ.get("SOAK_OUTS", "8,32,128,512"), "-s", "29", "-g", str(greedy)]
load += ["-n", str(requests)] if requests else ["-d", str(seconds)]
diag(" ".join(load))
t0 = time.time()
r = subprocess.run(load, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                   timeout=(0 if requests else seconds) + 1800)
wall = time.time() - t0
diag(r.stdout.strip())
res = dict(kv.split("=", 1) for kv in r.stdout.split())
ok(r.returncode == 0 and res.get("bad") == "0",
   "every answer read to its end was well formed (SSE, JSON chunks, finish_reason, usage) "
   "and every greedy one its recipe's first",
   r.stderr)
ok(int(res.get("greedy_repeats", 0)) > 0, "greedy recipes were asked again and compared "
   "(%s repeats)" % res.get("greedy_repeats"), r.stdout)
completed, aborted = int(res.get("completed", 0)), int(res.get("aborted", 0))
ok(aborted > 0 and completed > 0, "clients hung up mid-stream and others completed",
   r.stdout)
if requests:
    is_(completed + aborted, requests, "every request was answered or aborted by its client")
else:
    ok(completed + aborted > 0, "requests were answered for the whole run")
h = d.request("GET", "/health")
is_((d.proc.poll(), h.status, h.json()), (None, 200, {"status": "ok"}),
    "dsv4d still runs and answers /health")
m = d.wait_idle(120)
ok(m.get("dsv4d_requests_running") == 0 and m.get("dsv4d_requests_waiting") == 0,
   "afterwards no request runs or waits", m)
held = m.get("dsv4d_kv_pages_used", -1) - m.get("dsv4d_prefix_cache_pages", 0)
base_held = base.get("dsv4d_kv_pages_used", -1) - base.get("dsv4d_prefix_cache_pages", 0)
is_(held, base_held, "kv pages held outside the prefix cache are back to the baseline")
# At rest every used state slot is a cache snapshot; each sits on a page of its own, and
# the cache never holds more than the slots above max_running.
slots = m.get("dsv4d_kv_state_slots_used", -1)
diag("at rest: %g state slots used, %g pages in the prefix cache"
     % (slots, m.get("dsv4d_prefix_cache_pages", 0)))
ok(0 <= slots - base.get("dsv4d_kv_state_slots_used", 0)
   <= min(m.get("dsv4d_prefix_cache_pages", 0), STATE_SLOTS - MAX_RUNNING),
   "state slots in use are back to the baseline plus at most the cache's snapshots",
   {"slots": slots, "base": base.get("dsv4d_kv_state_slots_used"),
    "cache_pages": m.get("dsv4d_prefix_cache_pages")})
diag("host tier: %s" % dict((k, m[k]) for k in HOSTCACHE_METRICS if k in m))
errors = [l for l in d.log().splitlines() if ": error: " in l]
ok(not errors, "dsv4d logged no error", "\n".join(errors[:10]))
d.signal()
rc = d.wait(120)
if os.environ.get("SOAK_LOGS"):  # the daemon's log kept, for reading after a run
    os.makedirs(os.environ["SOAK_LOGS"], exist_ok=True)
    with open(os.path.join(os.environ["SOAK_LOGS"], "dsv4d.log"), "w") as f:
        f.write(d.log())
if out:
    rev = os.environ.get("COMMIT") or subprocess.run(
        ["git", "-C", os.environ["top_srcdir"], "rev-parse", "--short", "HEAD"],
        stdout=subprocess.PIPE, text=True).stdout.strip()
    with open(out, "w") as f:
        f.write("# dsv4d soak on the %s (%s)\n\n"
                % (machine, time.strftime("%Y-%m-%d", time.gmtime())))
        f.write("Commit %s; %d cores (`nproc`), load average before the run: %s.\n\n"
                % (rev, os.cpu_count(), open("/proc/loadavg").read().split()[0]))
        f.write("Tiny synthetic model (`dsv4ctl mkmodel --preset tiny --seed 5`), [core] %s, "
                "kv %s, %s pool, [server] max_running %d, [model] state_slots %d%s.\n\n"
                % (kw["core"].strip().replace("\n", ", "), kw["kv_dtype"], kw["kv_pool"],
                   MAX_RUNNING, STATE_SLOTS,
                   "; more sections: " + sections.strip().replace("\n", " ") if sections else ""))
        f.write("`%s` (%.0f s wall)\n\n" % (" ".join(["bench/serve-load"] + load[1:]), wall))
        f.write("    %s\n\n" % r.stdout.strip())
        f.write("| | baseline | after |\n|---|---|---|\n")
        for k in ("dsv4d_requests_running", "dsv4d_requests_waiting", "dsv4d_kv_pages_used",
                  "dsv4d_prefix_cache_pages", "dsv4d_kv_state_slots_used",
                  "dsv4d_requests_total", "dsv4d_requests_aborted_total",
                  "dsv4d_requests_failed_total", "dsv4d_http_errors_total",
                  "dsv4d_retractions_total", "dsv4d_prefix_cache_evicted_pages_total",
                  "dsv4d_prefix_cache_hit_tokens_total",
                  "dsv4d_generation_tokens_total") + HOSTCACHE_METRICS:
            if k in m:
                f.write("| %s | %g | %g |\n" % (k, base.get(k, 0), m[k]))
        f.write("\n/health after the run: %d %s; dsv4d exit status on SIGTERM: %s.\n"
                % (h.status, h.body.decode().strip(), rc))
is_(rc, 0, "SIGTERM: dsv4d exits 0")
d.diag_exit("dsv4d", rc)
done()
EOF
