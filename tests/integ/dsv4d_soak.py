"""dsv4d_soak: the soak drivers (bench/soak.sh, bench/pd-soak.sh) run from a test, and the
host-tier fence check both the CPU and the GPU soak tests make (python3 standard library
only). A soak's daemons serve with the given backend, kv dtype, device pool, [indexk] and
[hostcache]; its TAP output comes back as text for the caller's own checks.
"""
import ast
import os
import re
import subprocess
import tempfile

from dsv4d_http import ok, diag

SRC = os.environ.get("top_srcdir", ".")
BUILD = os.environ.get("top_builddir", ".")
_TMP = tempfile.mkdtemp(prefix="dsv4-soak.")


def soak(script, hostcache, device="cpu", kv_dtype="f32", indexk="", delay="0ms", **env):
    """Runs bench/SCRIPT (soak.sh or pd-soak.sh) with [hostcache] plugin HOSTCACHE (its
    loads delayed DELAY a layer) and, where given, [indexk] plugin INDEXK; env: more of the
    driver's variables (SOAK_KV_POOL, SOAK_GREEDY, SOAK_SECONDS or SOAK_REQUESTS, ...).
    Returns the driver's TAP output."""
    ini = os.path.join(_TMP, "%s-%s-%s.ini" % (script, device, hostcache))
    with open(ini, "w") as f:
        if indexk:
            f.write("[indexk]\nplugin = %s\n" % indexk)
        f.write("[hostcache]\nplugin = %s\n[hostcache.%s]\nhost_size = 256M\nhost_slots = 256\n"
                "inject_delay = %s\n" % (hostcache, hostcache, delay))
    e = dict(os.environ, SOAK_DEVICE=device, SOAK_KV_DTYPE=kv_dtype, SOAK_INI=ini, **env)
    r = subprocess.run(["sh", os.path.join(SRC, "bench", script), BUILD], env=e,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=900)
    return r.stdout


def passed(tap):
    """Whether every test of a TAP run passed and its plan was met."""
    m = re.search(r"^1\.\.(\d+)", tap, re.M)
    oks = len(re.findall(r"^ok ", tap, re.M))
    return bool(m) and oks == int(m.group(1)) and not re.search(r"^not ok ", tap, re.M)


def failures(tap):
    """The checks of a TAP run that failed, each with its diagnostics, or the whole run when
    none did (it then failed on its plan)."""
    out, keep = [], False
    for line in tap.splitlines():
        if line.startswith("not ok "):
            keep = True
        elif line.startswith("ok ") or line.startswith("1.."):
            keep = False
        if keep:
            out.append(line)
    return "\n".join(out) if out else tap


def host_tier(tap, who=""):
    """The host-tier counters a soak printed (server `who`'s for pd-soak)."""
    m = re.search(r"^# %shost tier: (\{.*\})$" % (who + " " if who else ""), tap, re.M)
    return ast.literal_eval(m.group(1)) if m else {}


def fence_checks(where, **kw):
    """Four checks: a unified soak (soak(..., **kw)) with every host-tier load delayed 2 ms a
    layer passes under async, whose fence waited, and fails under unfenced (every layer
    reported landed at once) on greedy answers that differ, which serve-load names."""
    tap = soak("soak.sh", "async", delay="2ms", **kw)
    ok(passed(tap), "%s, host-tier loads delayed 2 ms a layer, async: every soak check passes"
       % where, failures(tap))
    hc = host_tier(tap)
    ok(hc.get("dsv4d_hostcache_loads_total", 0) > 0 and
       hc.get("dsv4d_hostcache_load_wait_seconds_total", 0) > 0,
       "its loads were delayed and the forward waited in the fence (%s loads, %s s waited)"
       % (hc.get("dsv4d_hostcache_loads_total"),
          hc.get("dsv4d_hostcache_load_wait_seconds_total")), tap)
    tap = soak("soak.sh", "unfenced", delay="2ms", **kw)
    m = re.search(r"^# (clients=.* bad=(\d+) .*greedy_repeats=\d+)", tap, re.M)
    diag(m.group(1) if m else "no serve-load summary")
    ok(re.search(r"^not ok 1 - every answer read to its end was well formed .* and every "
                 r"greedy one its recipe's first$", tap, re.M) and m and int(m.group(2)) > 0,
       "unfenced (negative control): the soak fails on answers that differ", tap)
    ok("greedy answer differs from its recipe's first" in tap,
       "and serve-load names them as greedy answers that differ from their recipe's first", tap)
