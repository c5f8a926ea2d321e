#!/bin/sh
# t-matrix-cpu-combinations-match-reference: dsv4ctl matrix --quick over the built plugins,
# on the tiny model with 8 sessions x 3 turns at concurrency 8 (so requests batch) in a KV
# pool the sessions outgrow (so the host tier reloads prefixes), runs every CPU-capable
# unified combination (indexk x hostcache x sched) and every PD one (indexk x hostcache x
# transport, with the first scheduler: the unified rows cover the schedulers), and each
# matches its reference exactly. The rows must have exercised what they name: host-tier
# loads for sync/async (in a PD pair counted on its prefill server, whose prefix cache
# saves computing; the decode server's own saves moving pages), KV bytes moved for PD. (The
# negative controls are t-matrix-negative-controls-are-caught.) MATRIX_DEVICE=cuda runs every
# server on the GPU (tests/gpu/t-gpu-matrix-combinations-match-reference.sh).
exec python3 - <<'EOF'
import json, os, re, subprocess, sys
sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.join(os.environ.get("top_srcdir", "."), "tests", "integ"))
import shutil, tempfile
from dsv4d_http import DSV4CTL, DSV4D, TOP_BUILDDIR, plan, ok, is_, diag, done

plugin_dir = os.environ.get("DSV4D_PLUGIN_PATH", os.path.join(TOP_BUILDDIR, "plugins", ".libs"))
device = os.environ.get("MATRIX_DEVICE", "cpu")
listed = subprocess.run([DSV4CTL, "--plugin-dir", plugin_dir, "list", "--porcelain"],
                        capture_output=True, text=True, timeout=60).stdout
plugins = {}
for line in listed.splitlines():
    f = line.split("\t")
    if len(f) >= 5 and f[4] == "ok":
        plugins.setdefault(f[0], []).append(f[1])
desc = {}
for fam, names in plugins.items():
    for n in names:
        desc[(fam, n)] = subprocess.run([DSV4CTL, "--plugin-dir", plugin_dir, "describe",
                                         "%s/%s" % (fam, n)], capture_output=True, text=True,
                                        timeout=60).stdout


def flags(fam, name):
    line = next((l for l in desc[(fam, name)].splitlines() if l.startswith("flags:")), "")
    return line[len("flags:"):].replace(",", " ").split()


def runnable(fam):
    """The family's plugins the matrix runs here: not test-only, not GPU-bound."""
    return sorted(n for n in plugins.get(fam, [])
                  if not set(flags(fam, n)) & {"test-only", "needs-gpu", "needs-cuda"})


want = ["unified indexk=%s hostcache=%s sched=%s" % (i, h, s)
        for i in runnable("indexk") for h in runnable("hostcache") for s in runnable("sched")]
transports = [t for t in runnable("transport") if t != "chaos"]
want_pd = ["pd indexk=%s hostcache=%s sched=%s transport=%s" % (i, h, runnable("sched")[0], t)
           for i in runnable("indexk") for h in runnable("hostcache") for t in transports]
plan(10)
diag("%d unified combinations expected: indexk %s, hostcache %s, sched %s"
     % (len(want), runnable("indexk"), runnable("hostcache"), runnable("sched")))

tmp = tempfile.mkdtemp(prefix="dsv4-matrix-test.")
report = os.path.join(tmp, "matrix.json")
p = subprocess.run([DSV4CTL, "--plugin-dir", plugin_dir, "matrix",
                    "--dsv4d", DSV4D, "--device", device, "--quick", "--sessions", "8",
                    "--turns", "3", "--max-tokens", "4", "--concurrency", "8",
                    "--report", report], capture_output=True, text=True, timeout=3600)
out = p.stdout + p.stderr
for line in p.stdout.splitlines():
    diag(line)
is_(p.returncode, 0, "matrix: exit 0 (no mismatch, no failure)")
r = json.load(open(report))
rows = {row["combination"]: row for row in r["rows"]}
ok(r["ok"] and r["sessions"] == 8 and r["concurrency"] == 8 and r["device"] == device,
   "report: ok, 8 sessions at 8, device = %s" % device)
missing = [c for c in want if c not in rows]
ok(len(want) >= 27 and not missing, "every unified combination ran on device = %s (%d)" % (device, len(want)),
   "missing: %s" % missing)
bad = [c for c in want if c in rows and rows[c]["status"] != "pass"]
ok(not bad, "every unified combination matches its reference exactly",
   "\n".join("%s: %s %s" % (c, rows[c]["status"], rows[c]["note"]) for c in bad))
refs = [c for c in rows if c.startswith("reference indexk=")]
is_(len(refs), len(runnable("indexk")), "one serial reference per indexk plugin")
missing_pd = [c for c in want_pd if c not in rows]
ok(len(transports) >= 1 and not missing_pd,
   "every PD combination ran (%d over %s)" % (len(want_pd), transports),
   "missing: %s" % missing_pd)
bad_pd = [c for c in want_pd if c in rows and rows[c]["status"] != "pass"]
ok(not bad_pd, "every PD combination matches its reference exactly",
   "\n".join("%s: %s %s" % (c, rows[c]["status"], rows[c]["note"]) for c in bad_pd))


def counted(row, what):
    m = re.search(what + r" (\d+)", row["note"])
    return int(m.group(1)) if m else 0


def rerun(combination):
    """The row of combination from a matrix run of it alone (--only), or None."""
    again = os.path.join(tmp, "again.json")
    q = subprocess.run([DSV4CTL, "--plugin-dir", plugin_dir, "matrix", "--dsv4d", DSV4D,
                        "--device", device, "--quick", "--sessions", "8", "--turns", "3", "--max-tokens", "4",
                        "--concurrency", "8", "--only", combination, "--report", again],
                       capture_output=True, text=True, timeout=600)
    try:
        return next((row for row in json.load(open(again))["rows"]
                     if row["combination"] == combination), None) if q.returncode == 0 else None
    except (OSError, ValueError):
        return None


# Whether a turn finds its prefix evicted to the host depends on how the 8 sessions'
# turns interleave, which the machine's load decides: a row that happened to reload
# nothing runs again (alone, at most twice) until it does; each run must still match
# its reference exactly.
tiered = [c for c in want + want_pd if "hostcache=off" not in c]
unloaded = [c for c in tiered if c in rows and counted(rows[c], "host-tier loads") == 0]
for c in list(unloaded):
    for attempt in (1, 2):
        row = rerun(c)
        diag("%s reloaded nothing; run %d alone: %s" % (c, attempt, row and row["note"]))
        if row is None or row["status"] != "pass":
            break
        if counted(row, "host-tier loads") > 0:
            unloaded.remove(c)
            break
pd_tiered = [c for c in tiered if c.startswith("pd ")]
ok(pd_tiered and all("prefill server: " in rows[c]["note"] for c in pd_tiered if c in rows),
   "the PD rows count the prefix cache on their prefill server (%d)" % len(pd_tiered))
ok(tiered and not unloaded, "every host-tier row, unified and PD, reloaded prefixes from the host tier",
   "\n".join("%s: %s" % (c, rows[c]["note"]) for c in unloaded))
unmoved = [c for c in want_pd if c in rows and counted(rows[c], "pd transfer bytes") == 0]
ok(not unmoved, "every PD row moved its KV through the transport",
   "\n".join("%s: %s" % (c, rows[c]["note"]) for c in unmoved))

shutil.rmtree(tmp, ignore_errors=True)
done()
EOF
