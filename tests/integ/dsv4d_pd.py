"""dsv4d_pd: what the PD integration tests share (python3 standard library only).

Prefill and decode daemons on 127.0.0.1 (dsv4d_http.Daemon with a [pd] section), each on
ports the kernel picks (port 0; their logs name them), the same tiny model (dsv4ctl mkmodel
is deterministic for a seed), one shared secret; helpers to wait for the decode server's
peers to connect, to ask /generate for token ids and to read PD metrics. Every wait is
bounded and every daemon is stopped at exit (Daemon registers its stop).
"""
import os
import random
import re
import socket
import sys
import time

from dsv4d_http import Daemon, diag

SECRET = "pd-test-secret-0123456789abcdef"
# Short deadlines keep the fault tests bounded; the defaults are for real deployments.
DEADLINES = ("bootstrap_timeout = 2s\nwaiting_timeout = 5s\ntransfer_timeout = 3s\n"
             "retries = %d\n")

TRANSPORTS = {
    "local": "[transport]\nplugin = local\n",
    "ucx-tcp": "[transport]\nplugin = ucx\n[transport.ucx]\ntls = tcp\n",
    "ucx-shm": "[transport]\nplugin = ucx\n[transport.ucx]\ntls = shm,self\n",
}


def chaos(inner="local", inner_options="", **faults):
    """A [transport] section for transport/chaos around `inner` with these percentages."""
    s = "[transport]\nplugin = chaos\n[transport.chaos]\ninner = %s\n" % inner
    if inner_options:
        s += "inner_options = %s\n" % inner_options
    for k, v in faults.items():
        s += "%s = %s\n" % (k, v)
    return s


def prefill(transport, secret=SECRET, model="", retries=2, port=None, server="",
            deadlines=DEADLINES, sections="", **daemon):
    """A prefill server (on control port `port`, or port 0: one the kernel picks); its
    control address, as it logged it, is .pd_addr. server: more [server] keys; deadlines:
    the [pd] deadline keys, with %d for retries (the soak driver uses the longer ones of a
    loaded machine); sections: more sections; daemon: Daemon's core, kv_dtype, kv_pool."""
    d = Daemon(server="role = prefill\n" + server, model=model,
               extra="[pd]\nlisten = 127.0.0.1:%d\nsecret = %s\n%s%s%s"
               % (port or 0, secret, deadlines % retries, transport, sections), **daemon)
    m = re.search(r"^dsv4d: info: pd: prefill role: accepting decode servers on "
                  r"(127\.0\.0\.1:(\d+))$", d.log(), re.M)
    if not m or (port and int(m.group(2)) != port):
        diag("the prefill server did not log the control port it listens on:\n" + d.log())
        d.stop()
        print("Bail out! the prefill server did not log its control port", flush=True)
        sys.exit(1)
    d.pd_addr = m.group(1)
    return d


def restartable_port():
    """A free port below the kernel's ephemeral range, for a prefill server that is killed
    and started again on the same address: port 0 and outgoing connections (the decode
    server's redials of the dead peer included) take ports from that range only, so
    nothing takes this one while its server is down."""
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        low = int(f.read().split()[0])
    rng = random.Random(os.getpid())
    for _ in range(100):
        port = rng.randrange(max(1024, low - 8192), low)
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", port))
            return port
        except OSError:
            pass
        finally:
            s.close()
    print("Bail out! no free port below the ephemeral range", flush=True)
    sys.exit(1)


def decode(transport, peers, secret=SECRET, retries=2, server="", model="",
           deadlines=DEADLINES, sections="", **daemon):
    """A decode server leasing to the prefill servers `peers` (Daemons or addresses);
    server, model: more keys of those sections; deadlines, sections, daemon as for
    prefill()."""
    addrs = ",".join(p if isinstance(p, str) else p.pd_addr for p in peers)
    return Daemon(server="role = decode\n" + server, model=model,
                  extra="[pd]\npeers = %s\nsecret = %s\n%s%s%s"
                  % (addrs, secret, deadlines % retries, transport, sections), **daemon)


def wait_log(d, pattern, timeout=30):
    """True once the daemon's log matches pattern (a regex)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if re.search(pattern, d.log(), re.M):
            return True
        time.sleep(0.05)
    diag("log of the daemon without /%s/:\n%s" % (pattern, d.log()[-3000:]))
    return False


def wait_connected(dec, n, timeout=30):
    """True once the decode server logged n connected prefill peers."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if len(re.findall(r"pd: prefill \S+ connected", dec.log())) >= n:
            return True
        time.sleep(0.05)
    diag("decode log:\n" + dec.log()[-3000:])
    return False


def generate(d, ids, max_tokens=12, temperature=0, seed=None, timeout=120):
    """(status, output ids or the error body) of /generate."""
    body = {"input_ids": ids, "max_tokens": max_tokens, "temperature": temperature,
            "ignore_eos": True}
    if seed is not None:
        body["seed"] = seed
    r = d.post("/generate", body)
    j = r.json()
    if r.status == 200 and isinstance(j, dict):
        return r.status, j.get("output_ids")
    return r.status, r.body


def prompts():
    """Prompts of 1, 2, a page boundary's worth and several pages of tokens, with greedy
    and seeded sampling: (ids, temperature, seed)."""
    out = []
    for n in (1, 2, 17, 255, 256, 257, 700):
        ids = [256] + [(7 * i + n) % 250 for i in range(n - 1)]
        out.append((ids, 0, None))
        out.append((ids, 0.8, 1000 + n))
    return out


def held_pages(m):
    """Pages held outside the prefix cache (0 when every request gave its pages back)."""
    return m.get("dsv4d_kv_pages_used", -1) - m.get("dsv4d_prefix_cache_pages", 0)
