#!/bin/sh
# pd-soak.sh: the soak of bench/soak.sh on a prefill/decode set under transport faults: one
# decode server and two prefill servers (so a failed transfer has somewhere to retry), each
# prefill server sending through transport/chaos around local (cross-process shared memory)
# with some transfers corrupted, dropped, hung and delayed; many streamed clients, some
# hanging up mid-stream. The resident memory of every daemon is sampled every
# PD_SOAK_SAMPLE seconds. At the end, as TAP: every request completed, was aborted by its
# client or got a clean error (an OpenAI error event in its stream, one per request the
# decode server counts as failed) and none was malformed or hung (bench/serve-load's read
# timeout); /health still answers on every server; memory is flat (skipped under the
# sanitizers, which keep memory resident beyond the servers' own); the pools are back to
# their baseline (no request running or waiting, no kv page held outside the prefix cache,
# nothing quarantined, state slots at most the cache's snapshots above the baseline); the
# PD fault counters show the faults happened and were caught, and every retry answers a
# counted fault (no control connection was lost); and every greedy answer was
# its recipe's first byte for byte (SOAK_GREEDY recipes, 16: serve-load -g), whichever
# prefill server, retry or cache state served it.
#
#   bench/pd-soak.sh [BUILDDIR]
#
# SOAK_SECONDS (1800), SOAK_CLIENTS (80), SOAK_ABORT percent (5), SOAK_PROMPTS and
# SOAK_OUTS (bench/serve-load -p, -o); SOAK_DEVICE, SOAK_KV_DTYPE, SOAK_KV_POOL and SOAK_INI
# as for bench/soak.sh (every daemon); CHAOS: transport/chaos keys for the prefill servers
# ("corrupt = 2, drop = 2, hang = 1, delay = 5"); PD_SOAK_SAMPLE seconds between memory
# samples (30); SOAK_OUT names a markdown file to write the result to, COMMIT the commit it
# names (default: the source tree's HEAD); SOAK_LOGS a directory to keep the daemons' logs in.
#
# "Flat" memory: after a warm-up of min(300 s, a third of the run) every daemon's last
# sample, less what its host tier grew by since (dsv4d_kv_host_high_water_bytes, sampled
# with it: on the CPU a tier fills its host_size as it is written to, for as long as the
# load lasts; on a GPU its memory is page-locked, so resident, from the start),
# is at most 1.1 x its sample at the end of the warm-up (the pool and the prefix cache fill
# during the warm-up; a leak keeps growing after it).
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
: "${top_srcdir:=$src}"
: "${top_builddir:=$(cd "${1:-.}" && pwd)}"
: "${DSV4D_PLUGIN_PATH:=$top_builddir/plugins/.libs}"
export top_srcdir top_builddir DSV4D_PLUGIN_PATH
exec python3 - <<'EOF'
import os, re, subprocess, sys, time
sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.join(os.environ["top_srcdir"], "tests", "integ"))
from dsv4d_http import plan, ok, is_, skip, diag, done, soak_daemon, HOSTCACHE_METRICS
from dsv4d_pd import TRANSPORTS, chaos, prefill, decode, wait_connected, held_pages

clients = int(os.environ.get("SOAK_CLIENTS", "80"))
abort_pct = float(os.environ.get("SOAK_ABORT", "5"))
seconds = float(os.environ.get("SOAK_SECONDS", "1800"))
sample_s = float(os.environ.get("PD_SOAK_SAMPLE", "30"))
faults = dict((k.strip(), v.strip()) for k, v in
              (kv.split("=") for kv in
               os.environ.get("CHAOS", "corrupt = 2, drop = 2, hang = 1, delay = 5").split(",")))
out = os.environ.get("SOAK_OUT")
greedy = int(os.environ.get("SOAK_GREEDY", "16"))
kw, sections, machine = soak_daemon()
warmup = min(300.0, seconds / 3)
READ_TIMEOUT = 300  # a request silent this long counts as hung
# As bench/soak.sh: fewer batch places than clients, so requests also wait.
MAX_RUNNING, STATE_SLOTS = 64, 96
# Deadlines of a loaded machine (2 cores for three daemons and 80 clients): a prefill
# server may queue a lease behind many prompts; a hung transfer ends at transfer_timeout.
DEADLINES = ("bootstrap_timeout = 10s\nwaiting_timeout = 120s\ntransfer_timeout = 10s\n"
             "retries = %d\n")
CLEAN_ERROR = re.compile(r'^serve-load: request \d+: not a text_completion chunk '
                         r'\(\{"error": ?\{')

plan(15)
load_avg = open("/proc/loadavg").read().split()[0]
pre = [prefill(chaos("local", seed=11 + i, **faults), server="max_running = %d\n" % MAX_RUNNING,
               deadlines=DEADLINES, sections=sections, **kw) for i in range(2)]
dec = decode(TRANSPORTS["local"], pre, server="max_running = %d\n" % MAX_RUNNING,
             model="state_slots = %d\n" % STATE_SLOTS, deadlines=DEADLINES, sections=sections,
             **kw)
ok(wait_connected(dec, 2), "both prefill servers connected to the decode server")
daemons = [("decode", dec)] + [("prefill%d" % i, p) for i, p in enumerate(pre)]
base = dict((n, d.wait_idle()) for n, d in daemons)


def sanitized(d):
    """Whether daemon d runs under AddressSanitizer or ThreadSanitizer (mapped libasan or
    libtsan)."""
    try:
        with open("/proc/%d/maps" % d.proc.pid) as f:
            maps = f.read()
        return "libasan" in maps or "libtsan" in maps
    except OSError:
        return False


def rss_kib(d):
    """VmRSS of the daemon; 0 once it is gone (its /health check then fails)."""
    try:
        with open("/proc/%d/status" % d.proc.pid) as f:
            return int(next(l.split()[1] for l in f if l.startswith("VmRSS:")))
    except (OSError, StopIteration):
        return 0


def tier_kib(d):
    """The host tier's high-water mark in KiB (0 without a tier, or when /metrics does not
    answer: the daemon's own checks say why). 0 on a GPU too: there the hostcache plugin
    page-locks the tier's whole slab when it attaches, so it is resident from the start."""
    if os.environ.get("SOAK_DEVICE", "cpu") != "cpu":
        return 0
    try:
        return d.metrics().get("dsv4d_kv_host_high_water_bytes", 0) / 1024
    except Exception:
        return 0


def sample():
    """(VmRSS KiB, host tier high-water KiB) of every daemon."""
    return dict((n, (rss_kib(d), tier_kib(d))) for n, d in daemons)


load = [os.path.join(os.environ["top_builddir"], "bench", "serve-load"), "-P", str(dec.port),
        "-c", str(clients), "-a", str(abort_pct), "-t", str(READ_TIMEOUT),
        "-p", os.environ.get("SOAK_PROMPTS", "16,64,256,1024,2048"),
        "-o", os.environ.get("SOAK_OUTS", "8,32,128,512"), "-s", "31", "-d", str(seconds),
        "-g", str(greedy)]
diag(" ".join(load))
samples = []  # (seconds since the start, {daemon: (VmRSS KiB, host tier high-water KiB)})
t0 = time.time()
lp = subprocess.Popen(load, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
next_sample = t0
while lp.poll() is None and time.time() < t0 + seconds + 2 * READ_TIMEOUT + 60:
    if time.time() >= next_sample:
        samples.append((time.time() - t0, sample()))
        diag("t=%4.0fs (rss, host tier) KiB %s" % samples[-1])
        next_sample += sample_s
    time.sleep(1)
if lp.poll() is None:
    lp.kill()
stdout, stderr = lp.communicate()
wall = time.time() - t0
samples.append((wall, sample()))
diag(stdout.strip())
diag(stderr.strip())
res = dict(kv.split("=", 1) for kv in stdout.split())
completed, aborted, bad = (int(res.get(k, -1)) for k in ("completed", "aborted", "bad"))
ok(lp.returncode is not None and wall < seconds + 2 * READ_TIMEOUT + 60,
   "the load generator ended (no request hung past its read timeout)", wall)
ok(completed > 0 and aborted > 0, "requests completed and clients hung up mid-stream", stdout)
ok(int(res.get("greedy_repeats", 0)) > 0, "greedy recipes were asked again and compared with "
   "their first answers (%s repeats; one that differed would count as bad below)"
   % res.get("greedy_repeats"), stdout)

health = dict((n, (d.proc.poll(), d.request("GET", "/health").status)) for n, d in daemons)
is_(health, dict((n, (None, 200)) for n, _ in daemons), "every server still runs and answers "
    "/health 200")
after = dict((n, d.wait_idle(180)) for n, d in daemons)
m = after["decode"]
# a request the decode server could not place ends with a 503 error event in its stream;
# serve-load counts it as not well formed and describes the first few on stderr
described = [l for l in stderr.splitlines() if l.startswith("serve-load: request ")]
failed = int(m.get("dsv4d_requests_failed_total", -1) - base["decode"].get(
    "dsv4d_requests_failed_total", 0))
ok(bad == failed and all(CLEAN_ERROR.match(l) for l in described),
   "every answer was complete or a clean error event, one per request the decode server "
   "failed (%d bad, %d failed)" % (bad, failed), stderr)

# memory: each server's own, its resident memory less what its host tier has written to
names = [n for n, _ in daemons]
after_warm = next((s for s in samples if s[0] >= warmup), samples[-1])
rows, flat = [], True
for n in names:
    own = [(s[0], s[1][n][0] - s[1][n][1]) for s in samples]
    post = [(t, v) for t, v in own if t >= after_warm[0]]
    slope = 0.0
    if len(post) >= 2:
        mt = sum(t for t, _ in post) / len(post)
        mv = sum(v for _, v in post) / len(post)
        var = sum((t - mt) ** 2 for t, _ in post)
        slope = sum((t - mt) * (v - mv) for t, v in post) / var * 60 if var else 0.0
    last, ref = own[-1][1], after_warm[1][n][0] - after_warm[1][n][1]
    flat = flat and last <= 1.1 * ref
    rss = [s[1][n][0] for s in samples]
    rows.append((n, rss[0], ref, last, max(rss), samples[-1][1][n][1], slope))
    diag("%s rss KiB: first %d, max %d; less the host tier's %d: at %.0fs %d, last %d, slope "
         "after warm-up %.1f KiB/min"
         % (n, rss[0], max(rss), samples[-1][1][n][1], after_warm[0], ref, last, slope))
FLAT = ("resident memory flat: every server's last sample <= 1.1 x its sample after the "
        "warm-up (%.0fs), less its host tier's high-water mark" % after_warm[0])
if any(sanitized(d) for _, d in daemons):
    skip(FLAT, "sanitizer build: AddressSanitizer's quarantine and ThreadSanitizer's shadow "
         "keep memory resident beyond the servers' own (LeakSanitizer checks for leaks when "
         "each server exits under AddressSanitizer)")
else:
    ok(flat, FLAT, rows)

# pools
ok(all(after[n].get("dsv4d_requests_running") == 0 and after[n].get("dsv4d_requests_waiting")
       == 0 for n in names), "afterwards no request runs or waits on any server", after)
is_(dict((n, held_pages(after[n])) for n in names),
    dict((n, held_pages(base[n])) for n in names),
    "kv pages held outside the prefix cache are back to the baseline on every server")
is_(m.get("dsv4d_pd_quarantined_pages"), 0.0, "nothing is quarantined on the decode server")
slots = m.get("dsv4d_kv_state_slots_used", -1)
ok(0 <= slots - base["decode"].get("dsv4d_kv_state_slots_used", 0)
   <= min(m.get("dsv4d_prefix_cache_pages", 0), STATE_SLOTS - MAX_RUNNING),
   "decode state slots are back to the baseline plus at most the cache's snapshots",
   {"slots": slots, "base": base["decode"].get("dsv4d_kv_state_slots_used"),
    "cache_pages": m.get("dsv4d_prefix_cache_pages")})

for n in names:
    diag("%s host tier: %s"
         % (n, dict((k, after[n][k]) for k in HOSTCACHE_METRICS if k in after[n])))

# faults
PD = ("dsv4d_pd_leases_total", "dsv4d_pd_checksum_mismatches_total", "dsv4d_pd_timeouts_total",
      "dsv4d_pd_retries_total", "dsv4d_pd_stale_messages_total")
pdc = dict((k, m.get(k, 0) - base["decode"].get(k, 0)) for k in PD)
diag("decode pd counters over the run: %s" % pdc)
ok(pdc["dsv4d_pd_checksum_mismatches_total"] > 0 and pdc["dsv4d_pd_retries_total"] > 0
   and (pdc["dsv4d_pd_timeouts_total"] > 0 or int(faults.get("hang", "0")) == 0),
   "faults happened and were caught: checksum mismatches (drop, corrupt) and timeouts "
   "(hang) counted, transfers retried", pdc)
# A lease is retried after a checksum mismatch or a deadline (both counted) or when its
# connection is lost, which retries every lease on it: with no prefill server killed here,
# more retries than counted faults means connections were lost.
ok(pdc["dsv4d_pd_retries_total"] <= pdc["dsv4d_pd_checksum_mismatches_total"]
   + pdc["dsv4d_pd_timeouts_total"],
   "every retry answers a counted fault (retries <= checksum mismatches + timeouts): no "
   "connection was lost", pdc)

# errors the servers logged, by kind (numbers dropped)
logged = {}
for n, d in daemons:
    kinds = {}
    for l in d.log().splitlines():
        if ": error: " in l:
            k = re.sub(r"\d+", "N", l)
            kinds[k] = kinds.get(k, 0) + 1
    logged[n] = kinds
    for k, c in sorted(kinds.items(), key=lambda kc: -kc[1]):
        diag("%s logged %d x %s" % (n, c, k))
undelivered = sum(c for k, c in logged["decode"].items() if "no prefill server delivered" in k)
is_(undelivered, failed, "the decode server logged one 'no prefill server delivered' per "
    "failed request")

rcs = {}
for n, d in daemons:
    d.signal()
for n, d in daemons:
    rcs[n] = d.wait(120)
if os.environ.get("SOAK_LOGS"):  # every daemon's log kept, for reading after a run
    os.makedirs(os.environ["SOAK_LOGS"], exist_ok=True)
    for n, d in daemons:
        with open(os.path.join(os.environ["SOAK_LOGS"], n + ".log"), "w") as f:
            f.write(d.log())

if out:
    rev = os.environ.get("COMMIT") or subprocess.run(
        ["git", "-C", os.environ["top_srcdir"], "rev-parse", "--short", "HEAD"],
        stdout=subprocess.PIPE, text=True).stdout.strip()
    with open(out, "w") as f:
        f.write("# dsv4d prefill/decode soak under transport faults on the %s (%s)\n\n"
                % (machine,
                   time.strftime("%Y-%m-%d", time.gmtime())))
        f.write("Commit %s; %d cores (`nproc`) shared with other work, load average %s at the "
                "start (1 min) and %s at the end.\n\n"
                % (rev, os.cpu_count(), load_avg, open("/proc/loadavg").read().split()[0]))
        f.write("`bench/pd-soak.sh`: one decode server and two prefill servers on 127.0.0.1, "
                "tiny synthetic model (`dsv4ctl mkmodel --preset tiny --seed 5`), [core] %s "
                "each, kv %s, %s pool each, [server] max_running %d, decode [model] "
                "state_slots %d%s. Decode transport local; each prefill server sends "
                "through transport/chaos around local (cross-process shared memory) with %s "
                "(percent of transfers; seeds 11 and 12). [pd] %s. Greedy requests from %d "
                "recipes (serve-load -g).\n\n"
                % (kw["core"].strip().replace("\n", ", "), kw["kv_dtype"], kw["kv_pool"],
                   MAX_RUNNING, STATE_SLOTS,
                   "; more sections: " + sections.strip().replace("\n", " ") if sections else "",
                   ", ".join("%s %s" % kv for kv in faults.items()),
                   DEADLINES.replace("\n", ", ").rstrip(", ") % 2, greedy))
        f.write("`%s` (%.0f s wall)\n\n" % (" ".join(["bench/serve-load"] + load[1:]), wall))
        f.write("    %s\n\n" % stdout.strip())
        if described:
            f.write("Answers serve-load did not count as well formed (the first %d):\n\n"
                    % len(described))
            f.write("".join("    %s\n" % l for l in described) + "\n")
        f.write("Resident memory (VmRSS, KiB), sampled every %.0f s; warm-up %.0f s; \"own\" "
                "is VmRSS less the host tier's high-water mark "
                "(dsv4d_kv_host_high_water_bytes):\n\n" % (sample_s, after_warm[0]))
        f.write("| server | first | own after warm-up | own last | max | host tier last | "
                "own slope after warm-up KiB/min |\n|---|---|---|---|---|---|---|\n")
        for r in rows:
            f.write("| %s | %d | %d | %d | %d | %d | %.1f |\n" % r)
        f.write("\n| metric | %s |\n|---|%s\n" % (" | ".join("%s baseline | %s after" % (n, n)
                                                          for n in names), "---|" * 2 * len(names)))
        for k in ("dsv4d_requests_running", "dsv4d_requests_waiting", "dsv4d_kv_pages_used",
                  "dsv4d_prefix_cache_pages", "dsv4d_kv_state_slots_used",
                  "dsv4d_pd_quarantined_pages", "dsv4d_requests_total",
                  "dsv4d_requests_aborted_total", "dsv4d_requests_failed_total",
                  "dsv4d_http_errors_total",
                  "dsv4d_generation_tokens_total") + PD + HOSTCACHE_METRICS:
            if all(k not in after[n] for n in names):
                continue
            f.write("| %s | %s |\n" % (k, " | ".join(
                "%g | %g" % (base[n].get(k, float("nan")), after[n].get(k, float("nan")))
                for n in names)))
        f.write("\nErrors the servers logged, by kind:\n\n")
        for n in names:
            for k, c in sorted(logged[n].items(), key=lambda kc: -kc[1]):
                f.write("    %s: %d x %s\n" % (n, c, k))
        f.write("\n/health after the run: %s; exit status on SIGTERM: %s.\n\n" % (health, rcs))
        f.write("Memory samples (s: decode, prefill0, prefill1 VmRSS / host tier KiB):\n\n")
        for t, v in samples:
            f.write("    %5.0f: %s\n" % (t, ", ".join("%d / %d" % v[n] for n in names)))
is_(rcs, dict((n, 0) for n in names), "SIGTERM: every server exits 0")
for n, d in daemons:
    d.diag_exit(n, rcs[n])
done()
EOF
