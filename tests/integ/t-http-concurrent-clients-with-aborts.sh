#!/bin/sh
# t-http-concurrent-clients-with-aborts: 24 clients at once, each sending a mix of whole
# and streamed completions and chats, some hanging up mid-stream: every answer that is
# read is well formed (a whole body with usage, or chunks ending in [DONE]), greedy
# answers do not depend on what else was running, and afterwards no request runs and
# no page is held outside the prefix cache.
exec python3 - <<'EOF'
import json, os, socket, sys, threading
sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.join(os.environ.get("top_srcdir", "."), "tests", "integ"))
from dsv4d_http import Daemon, plan, ok, is_, diag, done

plan(6)
d = Daemon(server="max_running = 8\n")
CLIENTS, ROUNDS = 24, 4
prompts = ["Hello", "How are you", "x" * 300, "Tell me a story about ", "0123456789"]


def body(i, stream):
    return {"prompt": prompts[i % len(prompts)], "max_tokens": 8 + i % 24, "temperature": 0,
            "ignore_eos": True, "stream": stream}


# what each prompt/length gives alone
alone = {}
for i in range(len(prompts) * 24):
    key = (i % len(prompts), 8 + i % 24)
    if key not in alone:
        alone[key] = d.post("/v1/completions", body(i, False)).json()["choices"][0]["text"]

bad, mismatched, aborted = [], [], [0]
lock = threading.Lock()


def client(c):
    for r in range(ROUNDS):
        i = c * ROUNDS + r
        kind = i % 4
        key = (i % len(prompts), 8 + i % 24)
        try:
            if kind == 0:
                res = d.post("/v1/completions", body(i, False))
                j = res.json()
                good = res.status == 200 and j["usage"]["completion_tokens"] == key[1]
                text = j["choices"][0]["text"] if good else None
            elif kind == 1:
                status, ctype, ev = d.stream("/v1/completions", body(i, True))
                chunks = [json.loads(e) for e in ev[:-1]]
                good = status == 200 and ev[-1] == "[DONE]" and \
                    chunks[-1]["choices"][0]["finish_reason"] == "length"
                text = "".join(k["choices"][0]["text"] for k in chunks) if good else None
            elif kind == 2:
                res = d.post("/v1/chat/completions",
                             {"messages": [{"role": "user", "content": prompts[i % 5]}],
                              "max_tokens": 5, "temperature": 0, "ignore_eos": True})
                good = res.status == 200 and res.json()["usage"]["completion_tokens"] == 5
                text = None
            else:
                b = json.dumps(dict(body(i, True), max_tokens=2000)).encode()
                s = socket.create_connection(("127.0.0.1", d.port), timeout=60)
                s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                          b"Content-Length: %d\r\n\r\n" % len(b) + b)
                got = b""
                while b"data: {" not in got:
                    x = s.recv(4096)
                    if not x:
                        break
                    got += x
                s.close()
                good = got.startswith(b"HTTP/1.1 200")
                text = None
                with lock:
                    aborted[0] += 1
            with lock:
                if not good:
                    bad.append(i)
                elif text is not None and text != alone[key]:
                    mismatched.append((i, text, alone[key]))
        except Exception as e:
            with lock:
                bad.append((i, repr(e)))


threads = [threading.Thread(target=client, args=(c,)) for c in range(CLIENTS)]
for t in threads:
    t.start()
for t in threads:
    t.join(300)
ok(not any(t.is_alive() for t in threads), "every client finished")
ok(not bad, "every answer read was well formed", bad[:5])
ok(not mismatched, "greedy answers under load equal the answers alone", mismatched[:3])
ok(aborted[0] == CLIENTS * ROUNDS // 4, "a quarter of the requests hung up mid-stream")
m = d.wait_idle()
ok(m.get("dsv4d_requests_running") == 0 and m.get("dsv4d_requests_waiting") == 0 and
   m.get("dsv4d_kv_pages_used", -1) - m.get("dsv4d_prefix_cache_pages", 0) == 0,
   "afterwards no request runs and the pool is back to baseline", m)
d.signal()
is_(d.wait(60), 0, "SIGTERM: exit 0")
done()
EOF
