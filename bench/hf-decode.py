#!/usr/bin/env python3
"""hf-decode.py: Hugging Face transformers' DeepseekV4ForCausalLM on the same checkpoint as
bench/decode-e2e: decode tokens/s on the GPU and, with --parity, the logits parity of dsv4d
against transformers.

Decode: the checkpoint loads with from_pretrained in bfloat16, eager attention (the only one
DeepseekV4 supports) and the grouped_mm experts backend; the float32 tensors transformers
keeps outside the mHC modules are then cast to bf16 (narrow_to says why; probe_bf16 falls
back to torch.autocast if a dtype clash remains). Per batch B: a prompt of --prompt tokens
per row (row i, position j: token (7919 i + 31 j) mod vocab, the ids
decode-e2e feeds dsv4d), prefilled in chunks through the model's own DynamicCache (its
sliding-window layers carry the CSA/HCA compressor state; DeepseekV4 refuses StaticCache and
full-graph compile, so no CUDA graphs), then --warmup greedy steps and --steps timed ones,
torch.cuda.synchronize() around the timed loop; tokens/s = B * steps / seconds. Where the
weight copies of batched_mm fit (--batched-mm-gib), the steps are timed again with it, as
generate() switches to it for decoding, and the faster backend is reported.

Parity (--parity FILE, written by decode-e2e --parity): the model loads in --parity-dtype
(float32 by default, eager experts) and runs teacher-forced on dsv4d's greedy sequence: the
prompt, then each token dsv4d fed back, so both produce logits at the same S+1 positions.
Per dsv4d mode in FILE: max abs error, max abs error relative to the largest |logit| of
the row, and how many of the S+1 argmax tokens agree. The bfloat16 model repeats the
teacher-forced run, which puts the bf16-vs-fp32 error of transformers itself beside it.

Writes a JSON summary (--json) and prints markdown. Exit 0 when every phase ran (OOM or a
time budget that skips a batch is reported in its row, not an error), 1 otherwise.
"""

import argparse
import gc
import json
import sys
import time
import traceback

import torch
import transformers
from safetensors.torch import load_file

try:
    from transformers import DeepseekV4ForCausalLM
except ImportError:  # older layouts export the class only from the model package
    from transformers.models.deepseek_v4 import DeepseekV4ForCausalLM

T0 = time.time()


def log(msg):
    print(f"[hf-decode {time.time() - T0:6.1f}s] {msg}", file=sys.stderr, flush=True)


def free_gpu():
    """Give back the memory of the tensors the caller has just dropped."""
    gc.collect()
    torch.cuda.empty_cache()


def load(model_dir, dtype, experts):
    """from_pretrained onto the GPU; raises when a checkpoint tensor was not used or a model
    tensor was not loaded (the model would run on random values)."""
    t = time.time()
    kw = dict(dtype=dtype, attn_implementation="eager", experts_implementation=experts,
              output_loading_info=True)
    try:
        model, info = DeepseekV4ForCausalLM.from_pretrained(model_dir, device_map="cuda", **kw)
    except (ImportError, ValueError) as e:  # device_map needs accelerate in some versions
        log(f"device_map='cuda' refused ({e}); loading on the CPU, then moving")
        model, info = DeepseekV4ForCausalLM.from_pretrained(model_dir, **kw)
        model = model.cuda()
    bad = {k: sorted(v)[:8] for k, v in info.items() if v}
    if bad:
        raise RuntimeError(f"checkpoint and model disagree: {bad}")
    model.eval()
    dt = time.time() - t
    log(f"loaded {dtype} ({experts} experts) in {dt:.1f} s, "
        f"{torch.cuda.memory_allocated() / 2**30:.1f} GiB on the GPU")
    return model, dt


def narrow_to(model, dtype):
    """Cast the float32 weights transformers kept (_keep_in_fp32_modules_strict) to dtype,
    except the mHC modules, which compute in float32 from their own .float() copies and hand
    back dtype, and the rotary frequencies. Needed: transformers 5.17's DeepseekV4 in bf16
    without its fp8 quantizer keeps the RMSNorm weights float32, so the norms hand float32
    activations to bf16 linear layers ("expected mat1 and mat2 to have the same dtype"); sinks,
    position_bias and the router bias would promote the attention and compressor math the
    same way. Returns the number of tensors cast."""
    n = 0
    for mod in model.modules():
        cls = type(mod).__name__
        if "Hyper" in cls or "Rotary" in cls:
            continue
        for tensors in (mod._parameters, mod._buffers):
            for name, t in tensors.items():
                if t is not None and t.dtype == torch.float32:
                    if isinstance(t, torch.nn.Parameter):
                        t.data = t.data.to(dtype)
                    else:
                        tensors[name] = t.to(dtype)
                    n += 1
    return n


def dump(args, res):
    """The JSON summary so far: a run cut short by its time limit still leaves its rows."""
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)


def prompt_ids(batch, length, vocab):
    i = torch.arange(batch, dtype=torch.long)[:, None]
    j = torch.arange(length, dtype=torch.long)[None, :]
    return ((i * 7919 + j * 31) % vocab).cuda()


@torch.inference_mode()
def step(model, ids, cache):
    # bench_autocast: set by probe_bf16 when the cast of narrow_to was not enough
    cast = getattr(model, "bench_autocast", False)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=cast):
        out = model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
    return out.logits[:, -1, :], out.past_key_values


def probe_bf16(model, res):
    """One short forward; on a dtype clash left after narrow_to, run under autocast."""
    ids = prompt_ids(1, 8, model.config.vocab_size)
    try:
        step(model, ids, None)
    except RuntimeError as e:
        if "dtype" not in str(e):
            raise
        res["bf16_autocast"] = str(e).splitlines()[0]
        log(f"bf16 forward failed ({res['bf16_autocast']}); running under torch.autocast")
        model.bench_autocast = True
        step(model, ids, None)


@torch.inference_mode()
def teacher_forced(model, prompt, fed):
    """Logits (float32, CPU, [len(fed) + 1, vocab]) after the prompt and after each fed
    token, through the cache as decoding does."""
    logits, cache = step(model, prompt[None, :].cuda(), None)
    rows = [logits[0].float().cpu()]
    for tok in fed:
        logits, cache = step(model, torch.tensor([[tok]], device="cuda"), cache)
        rows.append(logits[0].float().cpu())
    return torch.stack(rows)


@torch.inference_mode()
def decode(model, nxt, cache, steps):
    """steps greedy decode steps, synchronised at the end."""
    for _ in range(steps):
        logits, cache = step(model, nxt, cache)
        nxt = logits.argmax(dim=-1, keepdim=True)
    torch.cuda.synchronize()
    return nxt, cache


def set_experts(model, impl):
    """Switch the experts backend; False where this transformers cannot."""
    try:
        model.set_experts_implementation(impl)
        return True
    except (AttributeError, ValueError, ImportError) as e:
        log(f"experts backend {impl} not available ({e})")
        return False


def compare(ref, got, got_tokens=None):
    """Errors of got against ref ([S+1, V] float32)."""
    d = (got - ref).abs()
    scale = ref.abs().amax(dim=1)
    ref_arg = ref.argmax(dim=1)
    tokens = got_tokens if got_tokens is not None else got.argmax(dim=1)
    return dict(max_abs=d.max().item(), max_rel=(d.amax(dim=1) / scale).max().item(),
                mean_abs=d.mean().item(), max_abs_logit=scale.max().item(),
                argmax_agree=int((tokens == ref_arg).sum().item()), positions=len(ref_arg),
                first_disagreement=next((i for i, (a, b) in enumerate(zip(tokens.tolist(),
                                         ref_arg.tolist())) if a != b), None))


def parity_phase(args, res):
    par = load_file(args.parity)
    prompt = par["prompt"].long()
    modes = sorted(k[: -len(".tokens")] for k in par if k.endswith(".tokens"))
    fed = par[modes[0] + ".tokens"][:-1].tolist()
    for m in modes[1:]:
        if par[m + ".tokens"][:-1].tolist() != fed:
            log(f"dsv4d modes decoded different tokens ({modes[0]} vs {m}); feeding {modes[0]}'s")
    model, _ = load(args.model, getattr(torch, args.parity_dtype), "eager")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    ref = teacher_forced(model, prompt, fed)
    del model
    free_gpu()
    out = dict(dtype=args.parity_dtype, prompt_len=len(prompt), fed=fed,
               hf_tokens=ref.argmax(dim=1).tolist(), modes={})
    for m in modes:
        out["modes"][m] = compare(ref, par[m + ".logits"].float(), par[m + ".tokens"].long())
        log(f"parity dsv4d {m} vs transformers {args.parity_dtype}: {out['modes'][m]}")
    res["parity"] = out
    dump(args, res)
    return prompt, fed, ref, par, modes


def bench_phase(args, res, parity):
    model, load_s = load(args.model, torch.bfloat16, args.experts)
    res["bf16_load_s"] = load_s
    res["bf16_narrowed_tensors"] = narrow_to(model, torch.bfloat16)
    log(f"cast {res['bf16_narrowed_tensors']} float32 tensors outside mHC to bf16")
    probe_bf16(model, res)
    if parity is not None:
        prompt, fed, ref, par, modes = parity
        bf = teacher_forced(model, prompt, fed)
        res["parity"]["hf_bf16_vs_hf_ref"] = compare(ref, bf)
        res["parity"]["dsv4d_vs_hf_bf16"] = {
            m: compare(bf, par[m + ".logits"].float(), par[m + ".tokens"].long()) for m in modes}
        log(f"parity transformers bf16 vs {args.parity_dtype}: "
            f"{res['parity']['hf_bf16_vs_hf_ref']}")
    cfg = model.config
    vocab = cfg.vocab_size
    # batched_mm copies each token's experts' weights: bytes per token of a decode step
    inter = getattr(cfg, "moe_intermediate_size", None) or cfg.intermediate_size
    dup_bytes = cfg.num_experts_per_tok * 3 * inter * cfg.hidden_size * 2
    rows = res["rows"] = []
    for B in args.batches:
        row = dict(batch=B)
        rows.append(row)
        if time.time() - T0 > args.budget:
            row["status"] = f"skipped (budget {args.budget:.0f} s spent)"
            log(f"batch {B}: {row['status']}")
            continue
        cache = None
        try:
            ids = prompt_ids(B, args.prompt, vocab)
            chunk = max(1, args.prefill_tokens // B)
            torch.cuda.synchronize()
            t = time.time()
            for c0 in range(0, args.prompt, chunk):
                logits, cache = step(model, ids[:, c0:c0 + chunk], cache)
            nxt = logits.argmax(dim=-1, keepdim=True)
            torch.cuda.synchronize()
            row["prefill_s"] = time.time() - t
            nxt, cache = decode(model, nxt, cache, args.warmup)
            t = time.time()
            nxt, cache = decode(model, nxt, cache, args.steps)
            times = {args.experts: time.time() - t}
            if B * dup_bytes <= args.batched_mm_gib * 2**30 and set_experts(model, "batched_mm"):
                # what generate() does on the GPU: batched_mm for the decode steps
                nxt, cache = decode(model, nxt, cache, 1)
                t = time.time()
                nxt, cache = decode(model, nxt, cache, args.steps)
                times["batched_mm"] = time.time() - t
                set_experts(model, args.experts)
            best = min(times, key=times.get)
            row.update(status="ok", steps=args.steps, experts_decode=best,
                       step_ms=1000 * times[best] / args.steps,
                       tokens_s=B * args.steps / times[best],
                       tokens_s_by_experts={k: B * args.steps / v for k, v in times.items()},
                       peak_gib=torch.cuda.max_memory_allocated() / 2**30)
        except torch.cuda.OutOfMemoryError as e:
            row["status"] = f"out of memory ({str(e).splitlines()[0][:120]})"
        log(f"batch {B}: {row}")
        dump(args, res)
        cache = logits = None
        free_gpu()
        torch.cuda.reset_peak_memory_stats()
    del model
    free_gpu()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--batches", default="1,2,4,8,16,32,64,128,256")
    ap.add_argument("--prompt", type=int, default=256)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--prefill-tokens", type=int, default=16384,
                    help="tokens per prefill forward (rows x chunk length)")
    ap.add_argument("--experts", default="grouped_mm")
    ap.add_argument("--batched-mm-gib", type=float, default=8,
                    help="also time decode with batched_mm where its weight copies fit this")
    ap.add_argument("--parity")
    ap.add_argument("--parity-dtype", default="float32")
    ap.add_argument("--parity-only", action="store_true", help="no bf16 load, no timing")
    ap.add_argument("--budget", type=float, default=1e9,
                    help="seconds from start after which no new batch starts")
    ap.add_argument("--json")
    args = ap.parse_args()
    args.batches = [int(b) for b in args.batches.split(",")]
    res = dict(versions=dict(torch=torch.__version__, transformers=transformers.__version__),
               gpu=torch.cuda.get_device_name(0), prompt=args.prompt, steps=args.steps,
               warmup=args.warmup, experts=args.experts, attention="eager",
               cache="DynamicCache (DeepseekV4's CSA/HCA cache layers)")
    ok = True
    parity = None
    for name, phase in (("parity", lambda: parity_phase(args, res)),
                        ("bench", lambda: bench_phase(args, res, parity))):
        if (name == "parity" and not args.parity) or (name == "bench" and args.parity_only):
            continue
        try:
            got = phase()
            if name == "parity":
                parity = got
        except Exception:  # noqa: BLE001 - report the phase and go on with the next
            ok = False
            res[name + "_error"] = traceback.format_exc()
            log(f"{name} failed:\n{res[name + '_error']}")
    dump(args, res)
    print("| batch | transformers tokens/s | step ms | prefill s | status |")
    print("|---:|---:|---:|---:|---|")
    for r in res.get("rows", []):
        print(f"| {r['batch']} | {r.get('tokens_s', 0):.1f} | {r.get('step_ms', 0):.1f} | "
              f"{r.get('prefill_s', 0):.1f} | {r.get('status', '')} |")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
