#!/bin/sh
# n-choices.sh: what a request for n choices costs against n separate requests for one
# sent at once, written as a markdown result. Up to 490d820 the separate requests each
# computed the prompt (what n choices cost before they shared it); since d3c3cbd requests
# arriving together share it too (bench/shared-prefix-burst.sh), so the two columns differ
# by what the separate requests cost beyond the shared prompt.
#
#   bench/n-choices.sh [BUILDDIR] [OUT.md]
#
# BUILDDIR is a configured build tree (default: the current directory); OUT defaults to
# bench/results/<date>-n-choices-<cpu|gpu>.md in the source tree. For each prompt length in
# PROMPTS (token ids: "1000 4000") and each n in CHOICES ("4 8"), ROUNDS (3) rounds, each on
# prompts no earlier request used: one completions request with n choices, then n
# concurrent requests with one choice each (seeds seed + i, so the same texts: checked),
# every choice sampling MAX_TOKENS (8) tokens. What is served: SERVE_DEVICE (cpu, on 2
# threads, or cuda: CUDA device 0), SERVE_MKMODEL (the `dsv4ctl mkmodel` arguments of the
# checkpoint: "--preset tiny --seed 5"), SERVE_KV_POOL (512M). COMMIT names the commit
# measured (default: the source tree's HEAD).
set -eu
name=n-choices pool=512M
. "$(dirname "$0")/serve-env.sh"
make -C "$build" -s dsv4d dsv4ctl plugins/dsv4-indexk-fp8.la plugins/dsv4-sched-fcfs.la >/dev/null
export OUT="$out" PROMPTS="${PROMPTS:-1000 4000}"
export CHOICES="${CHOICES:-4 8}" ROUNDS="${ROUNDS:-3}" MAX_TOKENS="${MAX_TOKENS:-8}"
exec python3 - <<'EOF'
import os, statistics, sys, threading, time
sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.join(os.environ["top_srcdir"], "tests", "integ"))
from dsv4d_http import fresh_ids, serve_daemon, serve_result_head

env = os.environ
d = serve_daemon()
body = {"max_tokens": int(env["MAX_TOKENS"]), "temperature": 1.0, "ignore_eos": True}
def timed(fn):
    h, t = d.prefix_hits(), time.monotonic()
    texts = fn()
    return time.monotonic() - t, d.prefix_hits() - h, texts


def one_request(ids, n):
    r = d.post("/v1/completions", dict(body, prompt=ids, n=n, seed=7))
    return [c["text"] for c in r.json()["choices"]]


def separate(ids, n):
    out = [None] * n

    def go(i):
        out[i] = d.post("/v1/completions", dict(body, prompt=ids, seed=7 + i))

    threads = [threading.Thread(target=go, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [o.json()["choices"][0]["text"] for o in out]


rows = []
for length in map(int, env["PROMPTS"].split()):
    for n in map(int, env["CHOICES"].split()):
        a, b, cached, same = [], [], 0, True
        for _ in range(int(env["ROUNDS"])):
            ta, ca, texts_a = timed(lambda: one_request(fresh_ids(length), n))
            ids = fresh_ids(length)
            tb, cb, texts_b = timed(lambda: separate(ids, n))
            # the same seeds over another prompt: compare with one request on that prompt
            same = same and texts_b == one_request(ids, n)
            a.append(ta)
            b.append(tb)
            cached = ca
        rows.append((length, n, statistics.median(a), statistics.median(b), cached, same))
        print("prompt %d, n %d: %.2f s vs %.2f s" % (length, n, rows[-1][2], rows[-1][3]),
              file=sys.stderr, flush=True)

with open(env["OUT"], "w") as f:
    f.write(serve_result_head("n choices over one prompt against n separate requests",
                              "n-choices.sh"))
    f.write("Each row: the median of %s rounds on fresh prompts, %s tokens a choice. "
            "**n choices**: one /v1/completions request with `n`; **n requests**: n "
            "concurrent requests of one choice each with seeds seed + i (sharing the prompt "
            "as requests arriving together do); same texts: those n requests answered "
            "what one request with n answers on the same prompt.\n\n"
            % (env["ROUNDS"], env["MAX_TOKENS"]))
    f.write("| prompt ids | n | n choices s | n requests s | speedup | cached tokens (n choices) | same texts |\n")
    f.write("|---:|---:|---:|---:|---:|---:|---|\n")
    for length, n, ta, tb, cached, same in rows:
        f.write("| %d | %d | %.2f | %.2f | %.1fx | %d | %s |\n"
                % (length, n, ta, tb, tb / ta, cached, "yes" if same else "NO"))
print(open(env["OUT"]).read())
EOF
