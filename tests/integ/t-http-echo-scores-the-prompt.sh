#!/bin/sh
# t-http-echo-scores-the-prompt: /v1/completions with echo answers the prompt's text
# before the completion's and, with logprobs, opens its lists with the prompt's tokens (the
# first with null log-probability and alternatives), as OpenAI's legacy API and
# lm-evaluation-harness's loglikelihood requests use it; /generate's input_logprobs gives
# the same values. Each prompt token's log-probability is the model's: the one the same
# token gets when generated after the tokens before it (forced there by a logit_bias,
# under which logprobs stay the model's own). A prompt in the prefix cache is scored
# whole; streamed chunks add up to the whole answer; n choices each echo; chat and
# /generate refuse echo.
exec python3 - <<'EOF'
import json, math, os, sys
sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.join(os.environ.get("top_srcdir", "."), "tests", "integ"))
from dsv4d_http import Daemon, plan, ok, is_, done, byte_decode

plan(19)
d = Daemon()

base = {"model": "model", "prompt": "Hello there", "max_tokens": 3, "temperature": 0,
        "ignore_eos": True}
plain = d.post("/v1/completions", dict(base, logprobs=2)).json()
r = d.post("/v1/completions", dict(base, echo=True, logprobs=2))
c = r.json()
ch = c["choices"][0]
lp = ch["logprobs"]
n_prompt = c["usage"]["prompt_tokens"]
ok(r.status == 200 and ch["text"] == "Hello there" + plain["choices"][0]["text"],
   "echo: the text is the prompt's, then the completion's", ch)
ok(len(lp["tokens"]) == n_prompt + 3 and lp["token_logprobs"][0] is None
   and lp["top_logprobs"][0] is None and lp["tokens"][1:n_prompt] == list("Hello there"),
   "its logprobs open with the %d prompt tokens (BOS first, with nulls), then the 3 "
   "generated" % n_prompt, lp)
gen = plain["choices"][0]["logprobs"]
ok(lp["tokens"][n_prompt:] == gen["tokens"] and lp["token_logprobs"][n_prompt:]
   == gen["token_logprobs"] and lp["top_logprobs"][n_prompt:] == gen["top_logprobs"],
   "the generated tokens' entries are those of the same request without echo")
ok(all(v <= 0 and len(t) == 2 and list(t.values()) == sorted(t.values(), reverse=True)
       for v, t in zip(lp["token_logprobs"][1:], lp["top_logprobs"][1:])),
   "every prompt token after the first has a log-probability and 2 alternatives, "
   "likeliest first")
ok(ch["text"] == "Hello there" + plain["choices"][0]["text"]
   and d.post("/v1/completions", dict(base, echo=True)).json()["choices"][0]["logprobs"] is None,
   "echo without logprobs: the text alone")

# --- token ids, as lm-evaluation-harness sends them (a batch of one prompt)
ids = d.post("/generate", {"input_ids": [0, 72, 101], "max_tokens": 9, "temperature": 0,
                           "ignore_eos": True}).json()["output_ids"]
ids = [0, 72, 101] + ids
lm = d.post("/v1/completions", {"model": "model", "prompt": [ids], "echo": True, "logprobs": 1,
                                 "max_tokens": 1, "temperature": 0, "seed": 1234}).json()
llp = lm["choices"][0]["logprobs"]
ok(len(llp["token_logprobs"]) == len(ids) + 1 and llp["token_logprobs"][0] is None
   and math.isfinite(sum(llp["token_logprobs"][3:-1])),
   "a prompt of %d ids in a batch of one, max_tokens 1: %d entries, the continuation's sum "
   "finite" % (len(ids), len(ids) + 1), llp)
# the continuation is the model's greedy answer: each token its position's likeliest
ok(all(v == max(t.values()) for v, t in zip(llp["token_logprobs"][3:-1],
                                           llp["top_logprobs"][3:-1])),
   "the prompt's greedy continuation is greedy by its logprobs (lm-eval's is_greedy)")

g = d.post("/generate", {"input_ids": ids, "max_tokens": 1, "temperature": 0,
                         "input_logprobs": True, "logprobs": True, "top_logprobs": 1}).json()
ok(g["input_logprobs"][0] is None and g["input_logprobs"][1:] == llp["token_logprobs"][1:len(ids)]
   and g["input_top_logprobs"][0] is None and len(g["input_top_logprobs"]) == len(ids)
   and [t[0]["logprob"] for t in g["input_top_logprobs"][1:]]
   == [max(t.values()) for t in llp["top_logprobs"][1:len(ids)]],
   "/generate input_logprobs: the same values, the first null", g)

# each prompt token's log-probability is the one it gets when generated at that position
same = True
for t in (1, 2, 5, len(ids) - 1):
    f = d.post("/generate", {"input_ids": ids[:t], "max_tokens": 1, "temperature": 0,
                             "logprobs": True, "logit_bias": {str(ids[t]): 100}}).json()
    same = same and f["output_ids"] == [ids[t]] and f["output_logprobs"][0] == \
        llp["token_logprobs"][t]
ok(same, "prompt token t's log-probability equals that token's generated after the first t "
   "(t = 1, 2, 5, %d), bit for bit" % (len(ids) - 1))

# the prompt is now in the prefix cache: a scoring request still computes it whole
again = d.post("/v1/completions", {"model": "model", "prompt": [ids], "echo": True,
                                    "logprobs": 1, "max_tokens": 1, "temperature": 0}).json()
ok(again["choices"][0]["logprobs"] == llp, "the same request again (its prefix cached): the same "
   "logprobs")

# --- max_tokens 0: the prompt scored, nothing generated
z = d.post("/v1/completions", {"model": "model", "prompt": [ids], "echo": True, "logprobs": 1,
                               "max_tokens": 0, "temperature": 0}).json()
zc = z["choices"][0]
ok(zc["logprobs"]["token_logprobs"] == llp["token_logprobs"][:len(ids)]
   and zc["finish_reason"] == "length" and z["usage"]["completion_tokens"] == 0
   and zc["text"] == byte_decode(ids),
   "max_tokens 0 with echo: the prompt's text and logprobs, no token generated", z)
r = d.post("/v1/completions", dict(base, max_tokens=0))
ok(r.error_ok(400, "max_tokens"), "max_tokens 0 without echo: 400", r.body)

# --- streamed
status, _, ev = d.stream("/v1/completions", dict(base, echo=True, logprobs=2, stream=True))
chunks = [json.loads(e)["choices"][0] for e in ev[:-1]]
joined = {k: [x for k_ in chunks if k_["logprobs"] for x in k_["logprobs"][k]]
          for k in ("tokens", "token_logprobs", "top_logprobs")}
ok(status == 200 and "".join(k["text"] for k in chunks) == ch["text"] and joined == lp,
   "streamed: the chunks' text and logprobs add up to the whole answer's")
ok(chunks[0]["text"] == "Hello there" and len(chunks[0]["logprobs"]["tokens"]) == n_prompt,
   "the first chunk is the prompt with its logprobs", chunks[0])

# --- n choices: each echoes the prompt with the same scores
two = d.post("/v1/completions", dict(base, echo=True, logprobs=1, n=2, temperature=1.0,
                                     seed=3)).json()["choices"]
ok(len(two) == 2 and all(x["text"].startswith("Hello there") for x in two)
   and two[0]["logprobs"]["token_logprobs"][:n_prompt]
   == two[1]["logprobs"]["token_logprobs"][:n_prompt]
   == lp["token_logprobs"][:n_prompt],
   "n = 2: both choices echo the prompt with its scores")
# a prompt of 600 ids (pages of 256 tokens), the scoring call with n = 3: choice 0 scores it
# and the other two get its scores without computing anything
long_ids = [(37 * i) % 200 + 10 for i in range(600)]
score = {"model": "model", "prompt": [long_ids], "echo": True, "logprobs": 1, "max_tokens": 0}
one = d.post("/v1/completions", score).json()["choices"][0]["logprobs"]
asked = d.metrics().get("dsv4d_prefix_cache_query_tokens_total", 0)
three = d.post("/v1/completions", dict(score, n=3)).json()["choices"]
asked = d.metrics().get("dsv4d_prefix_cache_query_tokens_total", 0) - asked
ok(len(three) == 3 and all(x["logprobs"] == one for x in three) and asked == 600,
   "n = 3, max_tokens 0 over 600 ids: each choice has the scores of n = 1, and only one "
   "choice was computed (%d prompt tokens looked up)" % asked)

# --- refused elsewhere
r = d.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}],
                                    "echo": True})
ok(r.error_ok(400, "echo"), "chat completions refuse echo: 400 naming it", r.body)
r = d.post("/generate", {"input_ids": [1, 2], "echo": True})
ok(r.error_ok(400, "echo"), "/generate refuses echo (it has input_logprobs): 400", r.body)
r = d.post("/v1/completions", dict(base, echo="yes"))
ok(r.error_ok(400, "echo"), "echo must be a boolean: 400", r.body)
d.stop()
done()
EOF
