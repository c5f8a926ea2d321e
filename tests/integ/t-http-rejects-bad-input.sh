#!/bin/sh
# t-http-rejects-bad-input: every kind of bad request gets its 4xx with an OpenAI-style
# error body {"error":{"message","type","param","code"}} (malformed JSON, wrong types,
# unknown endpoint, wrong method, a prompt over the context, token ids outside the
# vocabulary (in the prompt or logit_bias), negative or huge max_tokens, n > 16, an unknown
# model, an oversized body, a missing or wrong API key, under [server] strict_api an option
# dsv4d does not read); slow clients are disconnected after [server]
# idle_timeout; clients that hang up mid-stream or mid-request have their request
# cancelled and its pages freed; and through all of it the server keeps serving.
exec python3 - <<'EOF'
import json, os, socket, sys, time
sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.join(os.environ.get("top_srcdir", "."), "tests", "integ"))
from dsv4d_http import Daemon, plan, ok, is_, diag, done, raw_socket, recv_all, post_raw

plan(42)
KEY = "s3cret-key"
d = Daemon(server="api_key = %s\nmax_body = 4K\nidle_timeout = 1s\nstrict_api = true\n" % KEY,
           model="")
auth = {"Authorization": "Bearer " + KEY}


def post(path, body, **kw):
    return d.post(path, body, headers=auth)


def raw(method, path, data, headers=None):
    h = dict(auth)
    h.update(headers or {})
    return d.request(method, path, raw=data, headers=h)


good = {"prompt": "Hi", "max_tokens": 2, "temperature": 0}

# --- API key
r = d.post("/v1/completions", good)
ok(r.error_ok(401) and r.json()["error"]["type"] == "authentication_error"
   and r.headers.get("WWW-Authenticate") == "Bearer", "no API key: 401", r.body)
r = d.post("/v1/completions", good, headers={"Authorization": "Bearer s3cret-kez"})
ok(r.error_ok(401), "a wrong API key: 401")
r = d.post("/v1/completions", good, headers={"Authorization": "Bearer " + KEY + "x"})
ok(r.error_ok(401), "a longer key with the right prefix: 401")
r = d.request("GET", "/v1/models")
ok(r.error_ok(401), "/v1/models needs the key too")
is_(d.request("GET", "/health").status, 200, "/health is open for monitoring")
is_(post("/v1/completions", good).status, 200, "the right key: 200")

# --- routing
r = d.request("GET", "/v1/nothing", headers=auth)
ok(r.error_ok(404), "an unknown endpoint: 404", r.body)
r = d.request("GET", "/v1/completions", headers=auth)
ok(r.error_ok(405), "GET on a POST endpoint: 405", r.body)
r = d.request("POST", "/health", body={}, headers=auth)
ok(r.error_ok(405), "POST on a GET endpoint: 405")

# --- bodies
r = raw("POST", "/v1/completions", b'{"prompt": "x",')
ok(r.error_ok(400) and r.json()["error"]["code"] == "invalid_json", "malformed JSON: 400", r.body)
r = raw("POST", "/v1/completions", b"")
ok(r.error_ok(400), "an empty body: 400")
r = raw("POST", "/v1/completions", b'\xff\xfe{"prompt":"x"}')
ok(r.error_ok(400), "a body that is not UTF-8: 400")
ok(post("/v1/completions", {"prompt": 5}).error_ok(400, "prompt"), "a prompt number: 400 prompt")
ok(post("/v1/completions", {"prompt": "x", "max_tokens": -4}).error_ok(400, "max_tokens"),
   "negative max_tokens: 400 max_tokens")
ok(post("/v1/completions", {"prompt": "x", "max_tokens": 1 << 40}).error_ok(400, "max_tokens"),
   "max_tokens beyond 32 bits: 400 max_tokens")
r = post("/v1/completions", {"prompt": "x", "max_tokens": 100000})
ok(r.error_ok(400, "prompt") and r.json()["error"]["code"] == "context_length_exceeded",
   "max_tokens over the context: 400 context_length_exceeded", r.body)
r = post("/v1/completions", {"prompt": "x" * 3000, "max_tokens": 1200})
ok(r.error_ok(400) and r.json()["error"]["code"] == "context_length_exceeded",
   "a prompt that leaves no room in the context: 400", r.body)
r = post("/generate", {"input_ids": [1, 2, 320], "max_tokens": 2})
ok(r.error_ok(400, "input_ids") and "320" in r.json()["error"]["message"],
   "a token id outside the vocabulary: 400 naming it", r.body)
ok(post("/generate", {"input_ids": [1, -2]}).error_ok(400, "input_ids"), "a negative token id: 400")
r = post("/generate", {"input_ids": [1, 2], "max_tokens": 2, "logit_bias": {"320": 5}})
ok(r.error_ok(400, "logit_bias") and "320" in r.json()["error"]["message"],
   "a logit_bias id outside the vocabulary: 400 naming it", r.body)
ok(post("/v1/completions", {"prompt": [5, 999999]}).error_ok(400, "prompt"),
   "a completions prompt id outside the vocabulary: 400")
ok(post("/v1/completions", dict(good, n=17)).error_ok(400, "n"), "n = 17 (above 16): 400 n")
ok(post("/v1/chat/completions", {"messages": "hi"}).error_ok(400, "messages"),
   "messages as a string: 400 messages")
r = post("/v1/completions", dict(good, model="gpt-4"))
ok(r.error_ok(404, "model") and r.json()["error"]["code"] == "model_not_found",
   "an unknown model: 404 model_not_found", r.body)
ok(post("/v1/completions", dict(good, temperature="hot")).error_ok(400, "temperature"),
   "temperature as a string: 400")
r = post("/v1/completions", dict(good, max_token=5))
ok(r.error_ok(400, "max_token") and r.json()["error"]["code"] == "unknown_parameter",
   "[server] strict_api: a misspelt option: 400 unknown_parameter naming it", r.body)

# --- size limit ([server] max_body = 4K)
r = post("/v1/completions", {"prompt": "x" * 5000})
ok(r.error_ok(413), "a body over max_body: 413", r.body[:200])
s = raw_socket(d.port)
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode()
          + b"\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
chunk = b'{"prompt":"' + b"y" * 3000
s.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
s.sendall(b"%x\r\n%s\r\n0\r\n\r\n" % (len(chunk), chunk))
reply = recv_all(s)
s.close()
ok(reply.startswith(b"HTTP/1.1 413"), "a chunked body growing over max_body: 413", reply[:100])

# --- a slow client: headers never finished
s = raw_socket(d.port, timeout=30)
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
t0 = time.time()
left = recv_all(s)
s.close()
ok(left == b"" and time.time() - t0 < 25, "a client that stalls mid-headers is disconnected")
s = raw_socket(d.port, timeout=30)
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode()
          + b"\r\nContent-Length: 100\r\n\r\n{\"prompt\":")
left = recv_all(s)
s.close()
ok(not left.startswith(b"HTTP/1.1 200"), "a client that stalls mid-body is disconnected", left[:100])

# --- clients that hang up: the request is cancelled and its pages freed
base = d.wait_idle()
ok(base.get("dsv4d_requests_running") == 0, "idle before the disconnect tests", base)
aborted0 = base.get("dsv4d_requests_aborted_total", 0)
long_stream = {"prompt": "Tell me", "max_tokens": 3000, "temperature": 0, "ignore_eos": True,
               "stream": True}
s, got = post_raw(d.port, "/v1/completions", long_stream, key=KEY, events=1)
ok(got.startswith(b"HTTP/1.1 200") and b"data: {" in got, "a stream started", got[:200])
s.close()
m = d.wait_idle()
ok(m.get("dsv4d_requests_running") == 0 and m.get("dsv4d_requests_waiting") == 0,
   "after a mid-stream hang-up no request runs", m)
is_(m.get("dsv4d_kv_pages_used", -1) - m.get("dsv4d_prefix_cache_pages", 0), 0.0,
    "after a mid-stream hang-up the pool is back to baseline (pages only in the prefix cache)")
ok(m.get("dsv4d_requests_aborted_total", 0) >= aborted0 + 1, "the request was aborted, not finished")
ok(m.get("dsv4d_generation_tokens_total", 0) - base.get("dsv4d_generation_tokens_total", 0) < 3000,
   "it stopped before max_tokens")

s, _ = post_raw(d.port, "/v1/completions", dict(long_stream, stream=False), key=KEY)
# hang up only once the server runs the request (a fixed sleep races a slow build)
deadline = time.time() + 60
while d.metrics().get("dsv4d_requests_running", 0) < 1 and time.time() < deadline:
    time.sleep(0.05)
s.close()
m2 = d.wait_idle()
ok(m2.get("dsv4d_requests_running") == 0 and
   m2.get("dsv4d_kv_pages_used", -1) - m2.get("dsv4d_prefix_cache_pages", 0) == 0,
   "a client that hangs up while waiting for a whole answer: cancelled, pages freed", m2)
ok(m2.get("dsv4d_requests_aborted_total", 0) >= aborted0 + 2, "that request was aborted too")

s, _ = post_raw(d.port, "/v1/completions", dict(long_stream, temperature=0.8, n=3), key=KEY,
               events=3)
s.close()
m3 = d.wait_idle()
ok(m3.get("dsv4d_requests_running") == 0 and
   m3.get("dsv4d_kv_pages_used", -1) - m3.get("dsv4d_prefix_cache_pages", 0) == 0 and
   m3.get("dsv4d_requests_aborted_total", 0) >= m2.get("dsv4d_requests_aborted_total", 0) + 3,
   "a client of three streamed choices that hangs up: all three cancelled, pages freed", m3)

# --- and the server still serves
r = post("/v1/completions", good)
ok(r.status == 200 and r.json()["choices"][0]["finish_reason"] in ("length", "stop"),
   "after all of this the server still answers", r.body)
m = d.metrics()
ok(m.get("dsv4d_http_errors_total", 0) >= 24, "/metrics counts the 24 error answers above", m)
d.signal()
is_(d.wait(60), 0, "SIGTERM: exit 0")
done()
EOF
