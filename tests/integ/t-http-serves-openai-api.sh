#!/bin/sh
# t-http-serves-openai-api: dsv4d serves the tiny model over HTTP with OpenAI's shapes:
# /health, /v1/models and /v1/models/{id}, /v1/completions and /v1/chat/completions whole
# and streamed (SSE chunks that add up to the whole answer, [DONE] last, usage when asked),
# stop strings (matched on the text, never returned, finish_reason stop), seeded sampling,
# logprobs and their top alternatives (completions, chat whole and streamed, /generate), n
# choices (choice i drawn with seed + i; whole and streamed, chunks by index), /generate
# with token ids (its ids decode to the completion's text), presence and
# frequency penalties (a greedy answer repeats less under positive ones, more under
# negative ones), logit_bias (a token biased by 100 is every answer) and /metrics (its
# counters, the engine loop's decode steps and time in decode and prefill among them, and
# its CUDA graph counts at zero on the CPU).
exec python3 - <<'EOF'
import math, os, sys, time
sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.join(os.environ.get("top_srcdir", "."), "tests", "integ"))
from dsv4d_http import Daemon, plan, ok, is_, diag, done, byte_decode

plan(64)
t_start = time.monotonic()
d = Daemon()

r = d.request("GET", "/health")
is_((r.status, r.json()), (200, {"status": "ok"}), "/health answers ok")
r = d.request("GET", "/v1/models")
m = r.json()
ok(r.status == 200 and m["object"] == "list" and m["data"][0]["id"] == "model"
   and m["data"][0]["object"] == "model" and isinstance(m["data"][0]["created"], int),
   "/v1/models lists the model by its folder name", r.body)
r1 = d.request("GET", "/v1/models/model")
ok(r1.status == 200 and r1.json() == m["data"][0], "/v1/models/model answers that model", r1.body)
r2 = d.request("GET", "/v1/models/other")
ok(r2.error_ok(404, "model") and r2.json()["error"]["code"] == "model_not_found",
   "/v1/models/other: 404 model_not_found", r2.body)

# --- completions, whole and streamed
base = {"model": "model", "prompt": "Hello", "max_tokens": 8, "temperature": 0,
        "ignore_eos": True}
r = d.post("/v1/completions", base)
c = r.json()
ok(r.status == 200 and r.headers.get("Content-Type") == "application/json",
   "completion: 200 application/json", r.body)
ok(c["object"] == "text_completion" and c["id"].startswith("cmpl-")
   and isinstance(c["created"], int) and c["model"] == "model",
   "completion: object, id, created, model", c)
ch = c["choices"][0]
ok(len(c["choices"]) == 1 and ch["index"] == 0 and ch["finish_reason"] == "length"
   and ch["logprobs"] is None, "completion: one choice, finish_reason length at max_tokens", ch)
is_(c["usage"], {"prompt_tokens": 6, "completion_tokens": 8, "total_tokens": 14},
    "completion: usage counts BOS + 5 bytes and 8 generated tokens")
text = ch["text"]

status, ctype, ev = d.stream("/v1/completions", dict(base, stream=True))
ok(status == 200 and ctype == "text/event-stream", "stream: 200 text/event-stream", ctype)
is_(ev[-1], "[DONE]", "stream: ends with data: [DONE]")
import json
chunks = [json.loads(e) for e in ev[:-1]]
ok(all(k["object"] == "text_completion" and k["id"] == chunks[0]["id"] for k in chunks),
   "stream: every chunk is a text_completion with one id")
is_("".join(k["choices"][0]["text"] for k in chunks), text,
    "stream: the chunks add up to the whole completion")
is_([k["choices"][0]["finish_reason"] for k in chunks][-1], "length",
    "stream: the last chunk says finish_reason length")
ok(all(k["choices"][0]["finish_reason"] is None for k in chunks[:-1]),
   "stream: earlier chunks have finish_reason null")

status, ctype, ev = d.stream("/v1/completions",
                             dict(base, stream=True, stream_options={"include_usage": True}))
usage_chunk = json.loads(ev[-2])
ok(usage_chunk["choices"] == [] and usage_chunk["usage"] == c["usage"],
   "stream with include_usage: a usage chunk with no choices before [DONE]", ev[-2])
ok(all("usage" in json.loads(e) and json.loads(e)["usage"] is None for e in ev[:-2]),
   "stream with include_usage: other chunks carry usage null")

# --- /generate: token ids in and out, and they decode to the completion's text
prompt_ids = [256] + list(b"Hello")
r = d.post("/generate", {"input_ids": prompt_ids, "max_tokens": 8, "temperature": 0,
                         "ignore_eos": True, "logprobs": True})
g = r.json()
ok(r.status == 200 and len(g["output_ids"]) == 8 and g["finish_reason"] == "length",
   "/generate: 8 output ids, finish_reason length", r.body)
ok(len(g["output_logprobs"]) == 8 and all(x <= 0 for x in g["output_logprobs"]),
   "/generate: one logprob (<= 0) per output id")
is_(g["usage"], {"prompt_tokens": 6, "completion_tokens": 8, "total_tokens": 14},
    "/generate: usage")
gt = d.post("/generate", {"input_ids": prompt_ids, "max_tokens": 8, "temperature": 0,
                          "ignore_eos": True, "logprobs": True, "top_logprobs": 4}).json()
ok(gt["output_ids"] == g["output_ids"] and gt["output_logprobs"] == g["output_logprobs"]
   and len(gt["output_top_logprobs"]) == 8
   and all(len(t) == 4 and len({a["id"] for a in t}) == 4
           and t[0]["id"] == i and t[0]["logprob"] == v
           and all(t[j]["logprob"] >= t[j + 1]["logprob"] for j in range(3))
           for t, i, v in zip(gt["output_top_logprobs"], g["output_ids"], g["output_logprobs"])),
   "/generate top_logprobs 4: four distinct ids a token, likeliest first, the greedy id "
   "first with its logprob", gt)
is_(byte_decode(g["output_ids"]), text,
    "/generate's ids decode (specials skipped, lossy UTF-8) to the completion text")


def repeats(ids):
    return len(ids) - len(set(ids))


# --- presence and frequency penalties reach the sampler: greedy, a positive penalty makes
# the answer repeat less than the plain one and a negative one more
def penalized(v):
    r = d.post("/generate", {"input_ids": prompt_ids, "max_tokens": 32, "temperature": 0,
                             "ignore_eos": True, "frequency_penalty": v, "presence_penalty": v})
    return r.status, r.json().get("output_ids", [])


plain = penalized(0)[1]
(st_pos, pos), (st_neg, neg) = penalized(2), penalized(-2)
ok(st_pos == st_neg == 200 and len(pos) == len(neg) == 32 and pos != plain
   and repeats(pos) <= repeats(plain) < repeats(neg),
   "/generate with presence and frequency penalties: repeated ids of 32 at 2, 0 and -2: "
   "%d, %d, %d" % (repeats(pos), repeats(plain), repeats(neg)), (pos, plain, neg))
r = d.post("/generate", {"input_ids": prompt_ids, "max_tokens": 8, "temperature": 0.9,
                         "seed": 5, "ignore_eos": True, "logit_bias": {"65": 100}})
is_((r.status, r.json().get("output_ids")), (200, [65] * 8),
    "/generate with logit_bias {65: 100}, sampled: every output id is 65")

r = d.post("/v1/completions", dict(base, prompt=prompt_ids[1:]))
ok(r.status == 200, "a token-id prompt is served", r.body)
is_(r.json()["usage"]["prompt_tokens"], 5, "a token-id prompt is used as given (no BOS added)")

# --- sampling: a seed reproduces a sampled answer
samp = {"prompt": "Hello", "max_tokens": 12, "temperature": 1.0, "seed": 7, "ignore_eos": True}
a = d.post("/v1/completions", samp).json()["choices"][0]["text"]
b = d.post("/v1/completions", samp).json()["choices"][0]["text"]
is_(a, b, "the same seed gives the same sampled text")
r = d.post("/v1/completions", dict(samp, top_k=1))
is_(r.json()["choices"][0]["text"],
    d.post("/v1/completions", dict(base, max_tokens=12)).json()["choices"][0]["text"],
    "top_k 1 samples greedily")

# --- n choices: choice i is the single answer of seed + i
r = d.post("/v1/completions", dict(samp, n=3)).json()
singles = [d.post("/v1/completions", dict(samp, seed=7 + i)).json()["choices"][0]["text"]
           for i in range(3)]
ok([c["index"] for c in r["choices"]] == [0, 1, 2]
   and [c["text"] for c in r["choices"]] == singles and len(set(singles)) == 3
   and all(c["finish_reason"] == "length" for c in r["choices"]),
   "n = 3: three choices, choice i the answer of seed 7 + i (three different texts)", r)
is_(r["usage"], {"prompt_tokens": 6, "completion_tokens": 36, "total_tokens": 42},
    "n = 3: the prompt counted once, every choice's tokens")
# a prompt of 600 ids (pages of 256 tokens): choices 1 and 2 start from the 512 tokens choice
# 0 computed and put in the prefix cache while it ran
long_ids = [(37 * i) % 200 + 10 for i in range(600)]
hits = d.metrics().get("dsv4d_prefix_cache_hit_tokens_total", 0)
r = d.post("/v1/completions", dict(samp, prompt=long_ids, n=3, max_tokens=4)).json()
shared = d.metrics().get("dsv4d_prefix_cache_hit_tokens_total", 0) - hits
singles = [d.post("/v1/completions", dict(samp, prompt=long_ids, seed=7 + i, max_tokens=4))
           .json()["choices"][0]["text"] for i in range(3)]
ok(shared == 2 * 512 and [c["text"] for c in r["choices"]] == singles,
   "n = 3 over a 600-token prompt: the prompt computed once (%d tokens taken from the cache), "
   "choice i still the answer of seed 7 + i" % shared, r)
chat_n = {"model": "model", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 6,
          "temperature": 1.0, "seed": 5, "ignore_eos": True, "n": 2, "logprobs": True,
          "top_logprobs": 2}
whole = d.post("/v1/chat/completions", chat_n).json()
status, ctype, ev = d.stream("/v1/chat/completions",
                             dict(chat_n, stream=True, stream_options={"include_usage": True}))
chunks = [json.loads(e) for e in ev[:-1]]
by = {0: [], 1: []}
for k in chunks:
    for c in k["choices"]:
        by[c["index"]].append(c)
ok(all(by[i][0]["delta"].get("role") == "assistant"
       and "".join(c["delta"].get("content", "") for c in by[i])
       == whole["choices"][i]["message"]["content"]
       and [c["finish_reason"] for c in by[i]].count("length") == 1
       and by[i][-1]["finish_reason"] == "length" for i in (0, 1))
   and whole["choices"][0]["message"]["content"] != whole["choices"][1]["message"]["content"],
   "chat n = 2 streamed: each index opens with the role, its deltas add up to that choice's "
   "whole answer, one finish_reason last", chunks)
ok(all([e for c in by[i] for e in ((c["logprobs"] or {}).get("content") or [])]
       == whole["choices"][i]["logprobs"]["content"]
       and len(whole["choices"][i]["logprobs"]["content"]) == 6 for i in (0, 1))
   and chunks[-1]["usage"]["completion_tokens"] == 12 and ev[-1] == "[DONE]",
   "and its logprobs are each choice's own; the usage chunk counts both choices' tokens",
   chunks[-1])

# --- stop strings, on the decoded text
long = d.post("/v1/completions", dict(base, max_tokens=40)).json()["choices"][0]["text"]
k = len(long) // 2
stop = long[k:k + 2]
cut = long.find(stop)
diag("stop string %r first at %d of %r" % (stop, cut, long))
r = d.post("/v1/completions", dict(base, max_tokens=40, stop=[stop, "\u2603never"]))
sc = r.json()["choices"][0]
is_(sc["text"], long[:cut], "stop: the text ends before the stop string, which is not returned")
is_(sc["finish_reason"], "stop", "stop: finish_reason stop")
ok(r.json()["usage"]["completion_tokens"] <= 40, "stop: usage counts what was generated")
status, ctype, ev = d.stream("/v1/completions", dict(base, max_tokens=40, stop=stop, stream=True))
chunks = [json.loads(e) for e in ev[:-1]]
is_("".join(k["choices"][0]["text"] for k in chunks), long[:cut],
    "stop, streamed: no part of the stop string is sent")
is_(chunks[-1]["choices"][0]["finish_reason"], "stop", "stop, streamed: finish_reason stop")
r = d.post("/v1/completions", dict(base, max_tokens=40, stop=stop, n=2)).json()
ok([c["text"] for c in r["choices"]] == [long[:cut]] * 2
   and [c["finish_reason"] for c in r["choices"]] == ["stop", "stop"],
   "stop with n = 2 (greedy): each choice stops on its own text", r)

# --- logprobs
r = d.post("/v1/completions", dict(base, logprobs=0))
lp = r.json()["choices"][0]["logprobs"]
ok(len(lp["token_logprobs"]) == 8 and len(lp["tokens"]) == 8
   and all(x <= 0 for x in lp["token_logprobs"]),
   "completion logprobs: one per generated token", lp)
r = d.post("/v1/completions", dict(base, logprobs=5))
lp = r.json()["choices"][0]["logprobs"]
tops = lp["top_logprobs"]
ok(len(tops) == 8 and all(1 <= len(t) <= 5 for t in tops)
   and all(list(t.values()) == sorted(t.values(), reverse=True) for t in tops)
   and all(max(t.values()) == v and t.get(s) == v
           for t, s, v in zip(tops, lp["tokens"], lp["token_logprobs"]))
   and all(sum(math.exp(x) for x in t.values()) <= 1 + 1e-6 for t in tops),
   "completion logprobs 5: up to 5 alternatives a token, likeliest first, the greedy "
   "token the first of them", lp)

# --- chat
chat = {"model": "model", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 6,
        "temperature": 0, "ignore_eos": True}
r = d.post("/v1/chat/completions", chat)
cc = r.json()
ok(r.status == 200 and cc["object"] == "chat.completion" and cc["id"].startswith("chatcmpl-"),
   "chat: object chat.completion, id chatcmpl-", r.body)
msg = cc["choices"][0]["message"]
ok(msg["role"] == "assistant" and isinstance(msg["content"], str)
   and cc["choices"][0]["finish_reason"] == "length", "chat: an assistant message", cc)
is_(cc["usage"]["prompt_tokens"], 6,
    "chat: the template is BOS <User> H i <Assistant> </think> (6 tokens)")
g = d.post("/generate", {"input_ids": [256, 259, 72, 105, 260, 262], "max_tokens": 6,
                         "temperature": 0, "ignore_eos": True}).json()
is_(byte_decode(g["output_ids"]), msg["content"],
    "chat: the answer is what those template ids generate")
status, ctype, ev = d.stream("/v1/chat/completions", dict(chat, stream=True))
chunks = [json.loads(e) for e in ev[:-1]]
ok(chunks[0]["choices"][0]["delta"].get("role") == "assistant"
   and all(k["object"] == "chat.completion.chunk" for k in chunks),
   "chat stream: chat.completion.chunk, the first delta names the role", chunks[0])
is_("".join(k["choices"][0]["delta"].get("content", "") for k in chunks), msg["content"],
    "chat stream: the deltas add up to the whole answer")
ok(chunks[-1]["choices"][0]["finish_reason"] == "length"
   and chunks[-1]["choices"][0]["delta"] == {}, "chat stream: a last empty delta with finish_reason")
is_(ev[-1], "[DONE]", "chat stream: ends with [DONE]")
r = d.post("/v1/chat/completions", dict(chat, logprobs=True))
lc = r.json()["choices"][0]["logprobs"]["content"]
ok(len(lc) == 6 and all("token" in x and x["logprob"] <= 0 for x in lc),
   "chat logprobs: one entry per token", lc)
r = d.post("/v1/chat/completions", dict(chat, logprobs=True, top_logprobs=3))
lt = r.json()["choices"][0]["logprobs"]["content"]
ok(len(lt) == 6 and all(len(x["top_logprobs"]) == 3 for x in lt)
   and all([a["logprob"] for a in x["top_logprobs"]]
           == sorted((a["logprob"] for a in x["top_logprobs"]), reverse=True) for x in lt)
   and all(x["top_logprobs"][0]["token"] == x["token"]
           and x["top_logprobs"][0]["logprob"] == x["logprob"] for x in lt)
   and all(bytes(e["bytes"]).decode("utf-8", "replace") == e["token"]
           for x in lt for e in [x] + x["top_logprobs"]),
   "chat top_logprobs 3: three alternatives a token, likeliest first, the greedy token "
   "first, each with its bytes", lt)
status, ctype, ev = d.stream("/v1/chat/completions",
                             dict(chat, logprobs=True, top_logprobs=3, stream=True))
streamed = [e for k in (json.loads(e) for e in ev[:-1])
            for e in ((k["choices"][0]["logprobs"] or {}).get("content") or [])]
is_(streamed, lt, "chat top_logprobs, streamed: the chunks' entries are the whole answer's")
sampled = d.post("/generate", {"input_ids": [256, 259, 72, 105, 260, 262], "max_tokens": 12,
                               "temperature": 1, "seed": 11, "ignore_eos": True,
                               "logprobs": True, "top_logprobs": 20}).json()
ok(all(len(t) == 20 and v <= t[0]["logprob"]
       and all(a["logprob"] == v for a in t if a["id"] == i)
       for t, i, v in zip(sampled["output_top_logprobs"], sampled["output_ids"],
                          sampled["output_logprobs"]))
   and any(i != t[0]["id"] for t, i in zip(sampled["output_top_logprobs"], sampled["output_ids"])),
   "top_logprobs 20, sampled: a drawn id is never likelier than the first alternative, and "
   "where it is one of them its logprob is the same", sampled)
two = dict(chat, messages=[{"role": "system", "content": "S"},
                           {"role": "user", "content": "a"},
                           {"role": "assistant", "content": "b"},
                           {"role": "user", "content": "c"}])
is_(d.post("/v1/chat/completions", two).json()["usage"]["prompt_tokens"], 12,
    "chat: a multi-turn conversation is encoded whole")

# --- no max_tokens: completions default to 16
r = d.post("/v1/completions", {"prompt": "x", "temperature": 0, "ignore_eos": True})
is_(r.json()["usage"]["completion_tokens"], 16, "completions without max_tokens generate 16")

# --- metrics
r = d.request("GET", "/metrics")
ok(r.status == 200 and r.headers.get("Content-Type", "").startswith("text/plain; version=0.0.4"),
   "/metrics: Prometheus text", r.headers)
m = d.metrics()
ok(m.get("dsv4d_requests_total", 0) >= 15, "/metrics counts the requests", m)
ok(m.get("dsv4d_generation_tokens_total", 0) >= 100, "/metrics counts generated tokens")
busy = [m.get("dsv4d_engine_%s_seconds_total" % k, 0) for k in ("decode", "prefill")]
ok(min(busy) > 0 and sum(busy) < time.monotonic() - t_start and
   0 < m.get("dsv4d_engine_decode_steps_total", 0) <= m.get("dsv4d_engine_steps_total", 0),
   "/metrics: the engine loop's decode steps, and its time in decode and prefill: more than "
   "none, less than the run", m)
ok(m.get("dsv4d_engine_decode_host_choices_total", 0) >= m.get("dsv4d_engine_decode_steps_total")
   and m.get("dsv4d_engine_decode_device_choices_total") == 0,
   "/metrics: on the CPU every decode token is chosen on the host (at least one a step), none "
   "on a device", m)
graphs = ["dsv4d_engine_graph_%s_total" % k for k in ("replays", "captures", "capture_seconds")]
is_([m.get(k) for k in graphs + ["dsv4d_engine_direct_passes_total"]], [0, 0, 0, 0],
    "/metrics: no CUDA graph or direct pass on the CPU backend")
m = d.wait_idle()
ok(m.get("dsv4d_requests_running") == 0 and
   m.get("dsv4d_kv_pages_used", -1) - m.get("dsv4d_prefix_cache_pages", 0) == 0,
   "after the requests no page is held outside the prefix cache", m)
ok("http: listening on" in d.log() and
   not any(": error: " in l or ": warning: " in l for l in d.log().splitlines()),
   "the daemon logged its listening line and no warning or error", d.log())
d.signal()
is_(d.wait(60), 0, "SIGTERM: dsv4d exits 0")

# state slots no more than max_running leave none for the prefix cache: said at start
w = Daemon(model="state_slots = 32\n")
ok(any(": warning: server: [model] state_slots 32 is not above [server] max_running 32" in l
       for l in w.log().splitlines()),
   "state_slots = max_running: the daemon warns that no prompt is served from the cache",
   w.log())
w.stop()
done()
EOF
