#!/bin/sh
# t-matrix-negative-controls-are-caught: the harness sees the bugs it is for. dsv4ctl
# matrix --controls runs hostcache/unfenced (a host tier whose fence does not wait) with
# a 200 ms load delay per layer under KV-pool pressure, which repro must report as corrupted sessions;
# and a PD pair over transport/chaos corrupting 30% of transfers, each of which (as chaos
# counted them) the decode server must refuse by checksum or discard past its deadline,
# at least one by checksum, with no session corrupted. Both plugins are built with the tests, so a control
# that does not run, or runs without seeing its fault, fails. MATRIX_DEVICE=cuda runs them on
# the GPU (tests/gpu/t-gpu-matrix-negative-controls-are-caught.sh; chaos drops transfers there).
exec python3 - <<'PY'
import json, os, shutil, subprocess, sys, tempfile
sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.join(os.environ.get("top_srcdir", "."), "tests", "integ"))
from dsv4d_http import DSV4CTL, DSV4D, TOP_BUILDDIR, plan, ok, is_, diag, done

plugin_dir = os.environ.get("DSV4D_PLUGIN_PATH", os.path.join(TOP_BUILDDIR, "plugins", ".libs"))
plan(4)
tmp = tempfile.mkdtemp(prefix="dsv4-controls-test.")
report = os.path.join(tmp, "matrix.json")
p = subprocess.run([DSV4CTL, "--plugin-dir", plugin_dir, "matrix", "--dsv4d", DSV4D,
                    "--device", os.environ.get("MATRIX_DEVICE", "cpu"), "--sessions", "8", "--turns", "2", "--max-tokens", "4", "--concurrency", "8",
                    "--controls", "--only", "control:", "--report", report],
                   capture_output=True, text=True, timeout=3600)
for line in (p.stdout + p.stderr).splitlines():
    diag(line[:300])
is_(p.returncode, 0, "matrix --controls: exit 0 (every control that ran was caught)")
rows = {row["combination"]: row for row in json.load(open(report))["rows"]}
ok(rows and all(c.startswith("control") or c.startswith("reference") for c in rows),
   "--only control: runs the controls (and the reference they need) alone", list(rows))


def control(prefix, what):
    """A negative control's row: it ran and caught its fault."""
    row = next((row for c, row in rows.items() if c.startswith(prefix)), None)
    ok(row is not None and row["status"] == "pass" and row["note"].startswith("caught"), what,
       row)


control("control: unified hostcache=unfenced",
        "unfenced host tier with a load delay: repro reports corrupted sessions")
control("control: pd transport=chaos",
        "chaos-faulted PD transfers: refused by checksum or discarded past their "
        "deadline, none used")
shutil.rmtree(tmp, ignore_errors=True)
done()
PY
