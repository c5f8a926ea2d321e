"""dsv4d_http: what the HTTP integration tests share (python3 standard library only).

A TAP producer, and Daemon: a dsv4d started on 127.0.0.1 port 0 (the daemon binds a port
the kernel picks and its "listening on" line names it, so no other process can take the
port between choosing and binding), a temporary configuration and the tiny synthetic model
written by `dsv4ctl mkmodel` into a temporary folder. Every wait is bounded, and stop()
always leaves no daemon behind.
"""
import atexit
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

TOP_SRCDIR = os.environ.get("top_srcdir", os.path.join(os.path.dirname(__file__), "..", ".."))
TOP_BUILDDIR = os.environ.get("top_builddir", TOP_SRCDIR)
DSV4D = os.environ.get("DSV4D", os.path.join(TOP_BUILDDIR, "dsv4d"))
DSV4CTL = os.environ.get("DSV4CTL", os.path.join(TOP_BUILDDIR, "dsv4ctl"))
START_TIMEOUT = 120  # seconds for the daemon to start (writing nothing, loading the model)
REQUEST_TIMEOUT = 120

_n = 0
_failed = 0


def plan(n):
    print("1..%d" % n, flush=True)


def ok(cond, desc, detail=None):
    global _n, _failed
    _n += 1
    if cond:
        print("ok %d - %s" % (_n, desc), flush=True)
    else:
        _failed += 1
        print("not ok %d - %s" % (_n, desc), flush=True)
        if detail is not None:
            for line in str(detail).splitlines()[:20]:
                print("#   " + line, flush=True)
    return cond


def skip(desc, why):
    """A check that cannot be made here: ok, with the TAP SKIP directive and the reason."""
    global _n
    _n += 1
    print("ok %d - %s # SKIP %s" % (_n, desc, why), flush=True)


def is_(got, want, desc):
    return ok(got == want, desc, "got:      %r\nexpected: %r" % (got, want))


def diag(msg):
    for line in str(msg).splitlines():
        print("# " + line, flush=True)


def done():
    sys.exit(1 if _failed else 0)


class Response:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers
        self.body = body

    def json(self):
        try:
            return json.loads(self.body)
        except ValueError:
            return None

    def error_ok(self, status, param=None):
        """An OpenAI-style error body with this status (and param, when given)."""
        j = self.json()
        e = j.get("error") if isinstance(j, dict) else None
        return (self.status == status and isinstance(e, dict)
                and isinstance(e.get("message"), str) and e["message"] != ""
                and isinstance(e.get("type"), str) and "param" in e and "code" in e
                and (param is None or e["param"] == param))


# The host tier's counters (0 where a daemon has none), which the soaks report.
HOSTCACHE_METRICS = ("dsv4d_hostcache_loads_total", "dsv4d_hostcache_hits_total",
                     "dsv4d_hostcache_load_bytes_total", "dsv4d_hostcache_save_bytes_total",
                     "dsv4d_hostcache_load_wait_seconds_total")


def soak_daemon():
    """The soak drivers' Daemon settings from the environment: SOAK_DEVICE cpu (2 threads,
    the default) or cuda, SOAK_KV_DTYPE (f32), SOAK_KV_POOL (64M), SOAK_INI (a file of more
    sections, e.g. [indexk] and [hostcache]). Returns (Daemon keywords, the sections, the
    machine in words for a write-up)."""
    device = os.environ.get("SOAK_DEVICE", "cpu")
    core = "device = cpu\nthreads = 2\n" if device == "cpu" else "device = %s\n" % device
    sections = ""
    if os.environ.get("SOAK_INI"):
        with open(os.environ["SOAK_INI"]) as f:
            sections = f.read()
    return (dict(core=core, kv_dtype=os.environ.get("SOAK_KV_DTYPE", "f32"),
                 kv_pool=os.environ.get("SOAK_KV_POOL", "64M")), sections,
            "CPU" if device == "cpu" else "GPU (device = %s)" % device)


def serve_daemon(server="", model=""):
    """The Daemon of the serving benchmarks (bench/serve-env.sh), from the environment:
    SERVE_DEVICE cpu (2 threads) or cuda (CUDA device 0), SERVE_KV_POOL, SERVE_MKMODEL (the
    `dsv4ctl mkmodel` arguments); server and model: more keys of those sections."""
    global serve_load_at_start
    serve_load_at_start = os.getloadavg()[0]
    cpu = os.environ["SERVE_DEVICE"] == "cpu"
    return Daemon(server=server, model=model, kv_pool=os.environ["SERVE_KV_POOL"],
                  core="device = cpu\nthreads = 2\n" if cpu else "device = cuda\ncuda_device = 0\n",
                  mkmodel=os.environ["SERVE_MKMODEL"].split())


def serve_result_head(title, script, more=""):
    """The opening of a serving benchmark's markdown result: the title with today's date,
    then what was measured (commit, backend, checkpoint, pool, the daemon's keys, the load
    average when serve_daemon started it; `more` says what else) and the script that wrote
    it."""
    env = os.environ
    return ("# %s (%s)\n\nCommit %s, %s backend, `dsv4ctl mkmodel %s`, KV pool %s, pages of "
            "256 tokens, [server] and [model] keys at their defaults (max_running 32, "
            "state_slots 64) but max_context 4096; load average %.2f at the start.%s Produced "
            "by `bench/%s`.\n\n"
            % (title, time.strftime("%Y-%m-%d", time.gmtime()), env["COMMIT"],
               env["SERVE_DEVICE"], env["SERVE_MKMODEL"], env["SERVE_KV_POOL"],
               serve_load_at_start, " " + more if more else "", script))


_fresh = iter(range(1 << 30))


def fresh_ids(length):
    """length token ids no earlier call returned as a sequence (10..209): nothing of them
    is in a prefix cache (the serving benchmarks' prompts)."""
    k = next(_fresh)
    return [(37 * i + 101 * k) % 200 + 10 for i in range(length)]


class Daemon:
    def __init__(self, server="", model="", extra="", kv_pool="64M",
                 core="device = cpu\nthreads = 2\n", kv_dtype="f32",
                 mkmodel=("--preset", "tiny", "--seed", "5")):
        """server, model: more keys of those sections; extra: more sections; core: the
        [core] keys (the CPU backend on 2 threads unless a caller picks another); mkmodel:
        the `dsv4ctl mkmodel` arguments of the checkpoint served (the tiny model)."""
        self.tmp = tempfile.mkdtemp(prefix="dsv4-http.")
        atexit.register(self.stop)
        self.model = os.path.join(self.tmp, "model")
        subprocess.run([DSV4CTL, "mkmodel", *mkmodel, "-o", self.model],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=START_TIMEOUT)
        self.ini = os.path.join(self.tmp, "dsv4d.ini")
        with open(self.ini, "w") as f:
            f.write("[core]\n%s"
                    "[model]\npath = %s\nkv_dtype = %s\nkv_pool = %s\nmax_context = 4096\n%s"
                    "[server]\nlisten = 127.0.0.1:0\n%s%s"
                    % (core, self.model, kv_dtype, kv_pool, model, server, extra))
        self.err_path = os.path.join(self.tmp, "stderr")
        self.err = open(self.err_path, "w+")
        self.proc = subprocess.Popen([DSV4D, "-c", self.ini], stdout=subprocess.DEVNULL,
                                     stderr=self.err)
        self.port = None
        deadline = time.time() + START_TIMEOUT
        while time.time() < deadline and self.proc.poll() is None:
            m = re.search(r"^dsv4d: info: http: listening on 127\.0\.0\.1:(\d+)$", self.log(),
                          re.M)
            if m:
                self.port = int(m.group(1))
                break
            time.sleep(0.05)
        if self.port is None:
            diag("dsv4d did not start:\n" + self.log())
            self.stop()
            print("Bail out! dsv4d did not start", flush=True)
            sys.exit(1)

    def log(self):
        with open(self.err_path) as f:
            return f.read()

    def diag_exit(self, name, rc, lines=80):
        """After a nonzero exit, the log's last lines as diagnostics: where a sanitizer's
        report is (ThreadSanitizer exits 66), otherwise lost with the test's directory."""
        if rc != 0:
            diag("%s exited %s; its log's last %d lines:" % (name, rc, lines))
            diag("\n".join(self.log().splitlines()[-lines:]))

    def conn(self, timeout=REQUEST_TIMEOUT):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, raw=None):
        """body: an object sent as JSON; raw: bytes sent as they are."""
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None
                                            else None)
        c = self.conn()
        try:
            c.request(method, path, body=data, headers=h)
            r = c.getresponse()
            return Response(r.status, dict(r.getheaders()), r.read())
        finally:
            c.close()

    def post(self, path, body, headers=None):
        return self.request("POST", path, body, headers)

    def stream(self, path, body, headers=None):
        """POST with stream: true. Returns (status, content type, [data payloads])."""
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        c = self.conn()
        try:
            c.request("POST", path, body=json.dumps(body).encode(), headers=h)
            r = c.getresponse()
            text = r.read().decode("utf-8")
            events = []
            for block in text.split("\n\n"):
                if block.startswith("data: "):
                    events.append(block[6:])
                elif block.strip():
                    events.append("MALFORMED:" + block)
            return r.status, r.getheader("Content-Type"), events
        finally:
            c.close()

    def metrics(self):
        """Counters and gauges by name (unlabelled samples only)."""
        r = self.request("GET", "/metrics")
        out = {}
        for line in r.body.decode().splitlines():
            m = re.match(r"^([a-zA-Z0-9_:]+) ([-0-9.e+]+)$", line)
            if m:
                out[m.group(1)] = float(m.group(2))
        return out

    def prefix_hits(self):
        """Prompt tokens served from the prefix cache so far."""
        return self.metrics().get("dsv4d_prefix_cache_hit_tokens_total", 0)

    def wait_idle(self, timeout=60):
        """Wait until no request runs or waits and no page is held outside the prefix
        cache; return the last metrics."""
        deadline = time.time() + timeout
        m = {}
        while time.time() < deadline:
            m = self.metrics()
            if (m.get("dsv4d_requests_running", 1) == 0
                    and m.get("dsv4d_requests_waiting", 1) == 0
                    and m.get("dsv4d_kv_pages_used", 1) - m.get("dsv4d_prefix_cache_pages", 0)
                    == 0):
                break
            time.sleep(0.1)
        return m

    def signal(self, sig=signal.SIGTERM):
        self.proc.send_signal(sig)

    def wait(self, timeout=60):
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self):
        if getattr(self, "proc", None) is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            if self.wait(30) is None:
                self.proc.kill()
                self.proc.wait()
        if getattr(self, "err", None) is not None:
            self.err.close()
            self.err = None
        if getattr(self, "tmp", None):
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None


# The byte tokenizer's tokens after the 256 bytes that show in text (tokenizer.h): BOS,
# EOS and pad are special and skipped; ids past them are not in the byte vocabulary.
BYTE_TEXT_TOKENS = {259: "<｜User｜>", 260: "<｜Assistant｜>", 261: "<think>", 262: "</think>"}


def byte_decode(ids):
    """What dsv4d's text for these byte-tokenizer ids must be (lossy UTF-8)."""
    b = b""
    for t in ids:
        if t < 256:
            b += bytes([t])
        elif t in BYTE_TEXT_TOKENS:
            b += BYTE_TEXT_TOKENS[t].encode()
    return b.decode("utf-8", "replace")


def sse_events(raw):
    """The data payloads of a raw HTTP/1.1 response with a chunked event stream."""
    head, _, body = raw.partition(b"\r\n\r\n")
    data = b""
    while body:
        size, _, rest = body.partition(b"\r\n")
        n = int(size.split(b";")[0], 16) if size.strip() else 0
        if n == 0:
            break
        data += rest[:n]
        body = rest[n + 2:]
    return [e[6:] for e in data.decode("utf-8").split("\n\n") if e.startswith("data: ")]


def raw_socket(port, timeout=30):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    return s


def post_raw(port, path, body, key=None, events=0, timeout=30):
    """POST body (a dict, as JSON) over a socket of its own, with the API key when given,
    and read until `events` server-sent `data: {` events have come (or the peer closed).
    Returns (the socket, still open, for the caller to read on or hang up; the bytes read)."""
    data = json.dumps(body).encode()
    s = raw_socket(port, timeout)
    auth = b"Authorization: Bearer %s\r\n" % key.encode() if key else b""
    s.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\n%sContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % (path.encode(), auth, len(data)) + data)
    got = b""
    while got.count(b"data: {") < events:
        b = s.recv(4096)
        if not b:
            break
        got += b
    return s, got


def recv_all(s, limit=1 << 20):
    """Read until the peer closes (or limit bytes). Returns the bytes."""
    out = b""
    while len(out) < limit:
        try:
            b = s.recv(65536)
        except (ConnectionResetError, socket.timeout):
            break
        if not b:
            break
        out += b
    return out
