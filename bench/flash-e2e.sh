#!/bin/bash
# flash-e2e.sh: the end-to-end decode benchmark of issue 8 on one GPU: a DeepSeek-V4-Flash
# shaped checkpoint (dsv4ctl mkmodel --preset flash-shape: 43 layers at full attention
# widths, 8 routed experts; bf16 under Hugging Face names), dsv4d's engine over it
# (bench/decode-e2e, fast and deterministic mode, with the parity run), then transformers
# over the same files (bench/hf-decode.py), and one table: batch, dsv4d fast and
# deterministic tokens/s, fast mode's share of the bandwidth roofline (at the HBM ceiling
# decode-e2e measures in the same run), transformers tokens/s, and fast dsv4d over
# transformers; with --prefill, decode-e2e's prefill table after it (one prompt of each
# length, against the bf16 GEMM ceiling of the same run).
#
# usage: bench/flash-e2e.sh --bin BUILDDIR [--out DIR] [--ckpt DIR] [--batches 1,2,...,256]
#            [--prompt 256] [--steps 16] [--hf-steps 8] [--hf-budget SECONDS] [--no-hf]
#            [--parity-prompt 300] [--preset flash-shape] [--dsv4d-limit SECONDS (0: none)]
#            [--hf-parity-only] [--modes fast,deterministic] [--prefill 1024,8192,...]
# BUILDDIR holds dsv4ctl and bench/decode-e2e; DSV4D_PLUGIN_PATH must name the indexk
# plugins (fp8 and f32). The checkpoint (32 GB) is written once into --ckpt (default
# /tmp/dsv4-flash-bf16) and reused by later runs while its config.json says it is that
# preset. OUT gets table.md, dsv4d.md, hf.md, hf.json, mkmodel.txt and the logs. Budgeting
# a short device allowance: --dsv4d-limit cuts decode-e2e (its rows and the parity file
# come out as they are done), --hf-budget stops transformers starting new batches,
# --hf-parity-only skips its timings, --modes fast runs one engine mode. --preset small or
# tiny with --no-hf tries the script on a small model.
set -euo pipefail

bin='' out=. ckpt=/tmp/dsv4-flash-bf16 batches=1,2,4,8,16,32,64,128,256
prompt=256 steps=16 hf_steps=8 hf_budget=1e9 hf=1 preset=flash-shape limit=0
parity_prompt=300 hf_only=() modes=fast,deterministic prefill=()
while [ $# -gt 0 ]; do
    case $1 in
    --bin) bin=$2; shift ;;
    --out) out=$2; shift ;;
    --ckpt) ckpt=$2; shift ;;
    --batches) batches=$2; shift ;;
    --prompt) prompt=$2; shift ;;
    --steps) steps=$2; shift ;;
    --hf-steps) hf_steps=$2; shift ;;
    --hf-budget) hf_budget=$2; shift ;;
    --no-hf) hf=0 ;;
    --preset) preset=$2; shift ;;
    --dsv4d-limit) limit=$2; shift ;;
    --parity-prompt) parity_prompt=$2; shift ;;
    --hf-parity-only) hf_only=(--parity-only) ;;
    --modes) modes=$2; shift ;;
    --prefill) prefill=(--prefill "$2"); shift ;;
    *) echo "flash-e2e: unknown option '$1'" >&2; exit 2 ;;
    esac
    shift
done
[ -n "$bin" ] || { echo "flash-e2e: --bin BUILDDIR is required" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
say() { echo "[flash-e2e $(date -u +%H:%M:%S)] $*" >&2; }

made_by() {
    python3 -c 'import json, sys; m = json.load(open(sys.argv[1])).get("dsv4_mkmodel", {})
print(m.get("preset"), m.get("dtype"), m.get("names"))' "$ckpt/config.json" 2>/dev/null
}
if [ "$(made_by)" = "$preset bf16 hf" ] && [ -f "$ckpt/model.safetensors" ]; then
    say "reusing the checkpoint in $ckpt"
else
    say "writing the $preset checkpoint (bf16, hf names, 16 threads) into $ckpt"
    t0=$(date +%s%N)
    "$bin/dsv4ctl" mkmodel --preset "$preset" --dtype bf16 --names hf --threads 16 -o "$ckpt"
    t1=$(date +%s%N)
    echo "mkmodel: $(du -sb "$ckpt" | cut -f1) bytes in $(((t1 - t0) / 1000000)) ms" |
        tee "$out/mkmodel.txt" >&2
fi

rm -f "$ckpt.parity.safetensors"
say "dsv4d: decode-e2e (batches $batches, prompt $prompt, $steps steps)"
timeout "$limit" "$bin/bench/decode-e2e" --model "$ckpt" --batches "$batches" --prompt "$prompt" \
    --steps "$steps" --parity "$ckpt.parity.safetensors" --parity-prompt "$parity_prompt" \
    --modes "$modes" "${prefill[@]}" >"$out/dsv4d.md" \
    2> >(tee "$out/dsv4d.log" >&2) || say "decode-e2e failed (see dsv4d.log)"
cat "$out/dsv4d.md" >&2

if [ "$hf" = 1 ]; then
    say "transformers: hf-decode.py (batches $batches, prompt $prompt, $hf_steps steps)"
    parity=()
    [ -f "$ckpt.parity.safetensors" ] && parity=(--parity "$ckpt.parity.safetensors")
    python3 "$here/hf-decode.py" --model "$ckpt" --batches "$batches" --prompt "$prompt" \
        --steps "$hf_steps" --budget "$hf_budget" "${parity[@]}" "${hf_only[@]}" \
        --json "$out/hf.json" >"$out/hf.md" 2> >(tee "$out/hf.log" >&2) ||
        say "hf-decode.py reported a failure (see hf.log)"
    cat "$out/hf.md" >&2
fi

python3 - "$out" <<'EOF' | tee "$out/table.md"
import json, os, sys
out = sys.argv[1]
rows = {}
for line in open(os.path.join(out, "dsv4d.md")):
    if line.startswith("HBM ceiling:"):
        print(line.strip() + ", the roofline's\n")
    f = [c.strip() for c in line.strip().strip("|").split("|")]
    if len(f) == 6 and f[2].isdigit():
        r = rows.setdefault(int(f[2]), {})
        r[f[1]] = float(f[3])
        if f[1] == "fast":
            r["roof"], r["share"] = float(f[4]), f[5]
hf = {}
try:
    for r in json.load(open(os.path.join(out, "hf.json"))).get("rows", []):
        hf[r["batch"]] = r
except (OSError, ValueError):
    pass
print("| batch | dsv4d fast tok/s | dsv4d deterministic tok/s | fast % of roofline "
      "(roofline tok/s) | transformers tok/s | dsv4d fast / transformers |")
print("|---:|---:|---:|---:|---:|---:|")
for b in sorted(set(rows) | set(hf)):
    r, h = rows.get(b, {}), hf.get(b, {})
    fast, det, ht = r.get("fast"), r.get("deterministic"), h.get("tokens_s")
    cell = lambda v: f"{v:.0f}" if v is not None else "-"
    print(f"| {b} | {cell(fast)} | {cell(det)} | {r.get('share', '-')} ({cell(r.get('roof'))}) | "
          f"{f'{ht:.1f}' if ht else h.get('status', '-')} | "
          f"{f'{fast / ht:.1f}x' if fast and ht else '-'} |")
EOF
# decode-e2e's prefill table (--prefill), as it printed it
sed -n '/^bf16 GEMM ceiling\|^| prefill | mode/,$p' "$out/dsv4d.md" | tee -a "$out/table.md"
