#!/bin/sh
# shared-prefix-burst.sh: what a burst of requests costs when their prompts begin with one
# system prompt nothing has cached yet (many clients starting on a new system prompt at
# once), against the same burst where each prompt begins with a system prompt of its own
# (every request computes its whole prompt: what the shared burst cost before requests
# arriving together shared a prefix in flight), written as a markdown result.
#
#   bench/shared-prefix-burst.sh [BUILDDIR] [OUT.md]
#
# BUILDDIR is a configured build tree (default: the current directory); OUT defaults to
# bench/results/<date>-shared-prefix-burst-<cpu|gpu>.md in the source tree. For each system
# prompt length in SYSTEM (token ids: "1024 3072") and each burst size in CLIENTS ("8"),
# ROUNDS (3) rounds, each on system prompts no earlier request used: the shared burst, then
# the burst of separate system prompts, every request adding QUESTION (64) ids of its own
# and sampling MAX_TOKENS (8) tokens (that the texts are those of each request alone is
# tests/unit/t-serve-arrivals-share-a-prefix-in-flight's). SERVE_DEVICE, SERVE_MKMODEL,
# SERVE_KV_POOL (512M) and COMMIT as in serve-load.sh.
set -eu
name=shared-prefix-burst pool=512M
. "$(dirname "$0")/serve-env.sh"
make -C "$build" -s dsv4d dsv4ctl plugins/dsv4-indexk-fp8.la plugins/dsv4-sched-fcfs.la >/dev/null
export OUT="$out" SYSTEM="${SYSTEM:-1024 3072}" CLIENTS="${CLIENTS:-8}" ROUNDS="${ROUNDS:-3}"
export QUESTION="${QUESTION:-64}" MAX_TOKENS="${MAX_TOKENS:-8}"
exec python3 - <<'EOF'
import os, statistics, sys, threading, time
sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.join(os.environ["top_srcdir"], "tests", "integ"))
from dsv4d_http import fresh_ids, serve_daemon, serve_result_head

env = os.environ
d = serve_daemon()
body = {"max_tokens": int(env["MAX_TOKENS"]), "temperature": 1.0, "ignore_eos": True}
QUESTION = int(env["QUESTION"])
def burst(prompts):
    """The prompts sent at once (request i with seed 7 + i): seconds and cached tokens."""
    out = [None] * len(prompts)

    def go(i):
        out[i] = d.post("/v1/completions", dict(body, prompt=prompts[i], seed=7 + i))

    h, t = d.prefix_hits(), time.monotonic()
    threads = [threading.Thread(target=go, args=(i,)) for i in range(len(prompts))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    took = time.monotonic() - t
    assert all(o.status == 200 for o in out), [o.body for o in out if o.status != 200]
    return took, d.prefix_hits() - h


rows = []
for system in map(int, env["SYSTEM"].split()):
    for n in map(int, env["CLIENTS"].split()):
        a, b, cached, alone = [], [], 0, 0
        for _ in range(int(env["ROUNDS"])):
            shared = fresh_ids(system)
            ta, cached = burst([shared + fresh_ids(QUESTION) for _ in range(n)])
            tb, alone = burst([fresh_ids(system) + fresh_ids(QUESTION) for _ in range(n)])
            a.append(ta)
            b.append(tb)
        rows.append((system, n, statistics.median(a), statistics.median(b), cached, alone))
        print("system %d, %d clients: %.2f s vs %.2f s" % (system, n, rows[-1][2], rows[-1][3]),
              file=sys.stderr, flush=True)

with open(env["OUT"], "w") as f:
    f.write(serve_result_head("A burst of requests on one new system prompt against one of "
                              "separate prompts", "shared-prefix-burst.sh"))
    f.write("Each row: the median of %s rounds, each request adding %d ids of its own to its "
            "system prompt and sampling %s tokens. **shared**: the requests sent at once, "
            "their prompts beginning with one system prompt nothing cached; **separate**: "
            "the same burst, each system prompt of its own (every request computes its whole "
            "prompt); cached tokens: the prompt tokens of the shared burst served from the "
            "cache (last round), and those of the separate burst.\n\n"
            % (env["ROUNDS"], QUESTION, env["MAX_TOKENS"]))
    f.write("| system ids | clients | shared s | separate s | speedup | cached tokens (shared) "
            "| cached tokens (separate) |\n")
    f.write("|---:|---:|---:|---:|---:|---:|---:|\n")
    for system, n, ta, tb, cached, alone in rows:
        f.write("| %d | %d | %.2f | %.2f | %.1fx | %d | %d |\n"
                % (system, n, ta, tb, tb / ta, cached, alone))
print(open(env["OUT"]).read())
EOF
