#!/usr/bin/env python3
"""gen_hf_fixtures.py: Hugging Face parity fixtures for dsv4d's CPU model.

Builds tiny random DeepseekV4ForCausalLM models with transformers (float32, eager
attention, on the CPU), runs them on fixed token ids and writes, per case:

    OUT/<case>/config.json          written by transformers itself
    OUT/<case>/model.safetensors    HF-internal names, or save_pretrained's names
    OUT/<case>/input.safetensors    input_ids  I32 [B, T]
    OUT/<case>/logits.safetensors   logits     F32 [B, T, V]
    OUT/manifest.json               cases, versions, seeds, checks, file hashes

The cases together cover every path of the forward pass (see CASES and the coverage
summary printed at the end). Every parameter is random and non-trivial, including the
ones transformers initialises to 0 or 1. Seeds are re-drawn until no indexer top-k or
MoE top-k decision is a near-tie, so an implementation that agrees with transformers
to float32 rounding picks the same rows and experts.

Same script + same torch/transformers versions => same bytes (CPU, one thread,
deterministic algorithms, no timestamps).

Run where torch and transformers are installed:
    python3 tests/tools/gen_hf_fixtures.py --out tests/fixtures/hf [--cases a,b]
The exit status is 1 when a check failed (the files are still written; read the log).
"""

import argparse
import hashlib
import json
import math
import os
import platform
import shutil
import struct
import sys
import zlib

import torch
import torch.nn.functional as F

import safetensors
import transformers
from safetensors.torch import load_file, save_file

try:
    from transformers import DeepseekV4Config, DeepseekV4ForCausalLM
except ImportError:  # older layouts export the classes only from the model package
    from transformers.models.deepseek_v4 import DeepseekV4Config, DeepseekV4ForCausalLM

CSA = "compressed_sparse_attention"
HCA = "heavily_compressed_attention"
SWA = "sliding_attention"

# A decision whose gap is below TIE_TOL times the largest score of that query is "close":
# an fp32 implementation could order it differently from transformers.
TIE_TOL = 1e-3
MAX_ATTEMPTS = 200

# Shared tiny shape; each case overrides what it exercises.
BASE = dict(
    vocab_size=96,
    hidden_size=32,
    num_attention_heads=4,
    num_key_value_heads=1,
    head_dim=32,
    partial_rotary_factor=0.5,
    q_lora_rank=16,
    o_groups=8,
    o_lora_rank=8,
    sliding_window=8,
    compress_rates={CSA: 4, HCA: 8},
    index_n_heads=4,
    index_head_dim=32,
    index_topk=2,
    n_routed_experts=6,
    n_shared_experts=1,
    num_experts_per_tok=2,
    moe_intermediate_size=16,
    scoring_func="sqrtsoftplus",
    routed_scaling_factor=1.5,
    norm_topk_prob=True,
    swiglu_limit=10.0,
    hidden_act="silu",
    hc_mult=4,
    hc_sinkhorn_iters=20,
    hc_eps=1e-6,
    rms_norm_eps=1e-6,
    rope_theta=10000.0,
    compress_rope_theta=160000.0,
    max_position_embeddings=128,
    num_nextn_predict_layers=0,
    tie_word_embeddings=False,
    bos_token_id=0,
    eos_token_id=1,
)

# YaRN on the compress rope. max_position_embeddings is set to factor * original so that
# the versions of transformers that derive the factor from that ratio agree with `factor`.
YARN_A = dict(factor=4.0, original_max_position_embeddings=32, beta_fast=32.0, beta_slow=1.0)
YARN_B = dict(factor=8.0, original_max_position_embeddings=8, beta_fast=32.0, beta_slow=1.0)
YARN_C = dict(factor=4.0, original_max_position_embeddings=32, beta_fast=16.0, beta_slow=2.0)

# The short-sequence cases share this 3-layer model (one layer of each type).
SHORT = dict(
    num_hidden_layers=3,
    layer_types=[SWA, CSA, HCA],
    mlp_layer_types=["hash_moe", "moe", "moe"],
    o_groups=2,
    sliding_window=4,
    index_topk=1,
    n_routed_experts=4,
)

CASES = [
    dict(
        name="all-types-hc4-yarn-t33",
        desc="sliding, CSA and HCA layers, two hash layers, hc_mult 4, 8 output groups for 4 "
        "heads, window 8 < T, CSA rows (8) above index_topk 2, HCA rate 8, YaRN compress rope",
        naming="hf-internal", seed=1101, batch=2, seq=33, yarn=YARN_A,
        config=dict(
            num_hidden_layers=4,
            layer_types=[SWA, CSA, HCA, CSA],
            mlp_layer_types=["hash_moe", "hash_moe", "moe", "moe"],
        ),
    ),
    dict(
        name="hca-csa-hc2-t17",
        desc="HCA first, hc_mult 2 with 7 Sinkhorn iterations and hc_eps 1e-3, 2 output groups "
        "for 4 heads, window 4, HCA rate 16, top-3 of 6 experts, index_topk 3, default compress "
        "rope with non-default thetas, hidden 64, batch 3",
        naming="hf-internal", seed=1202, batch=3, seq=17, yarn=None,
        config=dict(
            num_hidden_layers=3,
            layer_types=[HCA, CSA, SWA],
            mlp_layer_types=["hash_moe", "moe", "moe"],
            vocab_size=128,
            hidden_size=64,
            head_dim=16,
            q_lora_rank=24,
            o_groups=2,
            o_lora_rank=16,
            sliding_window=4,
            compress_rates={CSA: 4, HCA: 16},
            index_n_heads=3,
            index_head_dim=16,
            index_topk=3,
            num_experts_per_tok=3,
            hc_mult=2,
            hc_sinkhorn_iters=7,
            hc_eps=1e-3,
            rope_theta=5000.0,
            compress_rope_theta=40000.0,
            max_position_embeddings=64,
        ),
    ),
    dict(
        name="csa-gelu-t16",
        desc="two CSA layers (moe then hash_moe), GELU experts, 2 heads in 4 output groups, "
        "window 16 = T (never slides), index_topk 1 with 2 index heads, rope dims 8 of 32, "
        "rms_norm_eps 1e-5, YaRN factor 8",
        naming="hf-internal", seed=1303, batch=2, seq=16, yarn=YARN_B,
        config=dict(
            num_hidden_layers=2,
            layer_types=[CSA, CSA],
            mlp_layer_types=["moe", "hash_moe"],
            vocab_size=80,
            num_attention_heads=2,
            partial_rotary_factor=0.25,
            o_groups=4,
            sliding_window=16,
            index_n_heads=2,
            index_head_dim=16,
            index_topk=1,
            n_routed_experts=4,
            hidden_act="gelu",
            rms_norm_eps=1e-5,
        ),
    ),
    dict(
        name="save-pretrained-t9",
        desc="written by save_pretrained (on-disk naming and the diff-only config.json), one "
        "layer of each type, YaRN with beta_fast 16 / beta_slow 2, num_nextn_predict_layers 1 "
        "without MTP tensors",
        naming="save_pretrained", seed=1404, batch=2, seq=9, yarn=YARN_C,
        config=dict(SHORT, num_nextn_predict_layers=1, index_n_heads=2),
    ),
    dict(
        name="clamp-sigmoid-hca4-t15",
        desc="swiglu_limit 0.75 (clamps active), sigmoid scoring, routed_scaling_factor 2.5, "
        "HCA rate 4, 8 heads in 4 output groups, hc_mult 2, window 5, hidden 48",
        naming="hf-internal", seed=1505, batch=2, seq=15, yarn=None,
        config=dict(
            num_hidden_layers=2,
            layer_types=[HCA, SWA],
            mlp_layer_types=["moe", "moe"],
            vocab_size=64,
            hidden_size=48,
            num_attention_heads=8,
            head_dim=16,
            o_groups=4,
            sliding_window=5,
            compress_rates={CSA: 4, HCA: 4},
            moe_intermediate_size=24,
            swiglu_limit=0.75,
            scoring_func="sigmoid",
            routed_scaling_factor=2.5,
            hc_mult=2,
        ),
    ),
    dict(
        name="sliding-only-t7",
        desc="two sliding layers (hash then moe), window 3, output groups = heads",
        naming="hf-internal", seed=1606, batch=2, seq=7, yarn=None,
        config=dict(
            num_hidden_layers=2,
            layer_types=[SWA, SWA],
            mlp_layer_types=["hash_moe", "moe"],
            vocab_size=64,
            o_groups=4,
            sliding_window=3,
        ),
    ),
    dict(name="short-t3", desc="T 3: no compressed row yet", naming="hf-internal",
         seed=1707, batch=2, seq=3, yarn=YARN_A, config=dict(SHORT)),
    dict(name="short-t4", desc="T 4: the first CSA row appears at the last token",
         naming="hf-internal", seed=1808, batch=2, seq=4, yarn=YARN_A, config=dict(SHORT)),
    dict(name="short-t5", desc="T 5: one CSA row and one pending token", naming="hf-internal",
         seed=1909, batch=2, seq=5, yarn=YARN_A, config=dict(SHORT)),
    dict(name="short-t8", desc="T 8: the first HCA row and 2 CSA rows (> index_topk 1) "
         "appear at the last token", naming="hf-internal", seed=2010, batch=3, seq=8,
         yarn=YARN_A, config=dict(SHORT)),
]


def log(msg=""):
    print(msg, flush=True)


# ------------------------------------------------------------------------------------------
# Configuration


def config_kwargs(case):
    kw = dict(BASE)
    kw.update(case["config"])
    prf = kw["partial_rotary_factor"]
    main = {"rope_type": "default", "rope_theta": kw["rope_theta"], "partial_rotary_factor": prf}
    compress = {"rope_type": "default", "rope_theta": kw["compress_rope_theta"],
                "partial_rotary_factor": prf}
    yarn = case["yarn"]
    if yarn is not None:
        compress.update(yarn)
        compress["rope_type"] = "yarn"
        compress["attention_factor"] = 1.0
        kw["max_position_embeddings"] = int(yarn["factor"] * yarn["original_max_position_embeddings"])
    kw["rope_parameters"] = {"main": main, "compress": compress}
    return kw


def make_config(case):
    kw = config_kwargs(case)
    cfg = DeepseekV4Config(**kw)
    problems = []
    for key in ("layer_types", "mlp_layer_types", "compress_rates", "hc_mult", "o_groups",
                "index_topk", "sliding_window", "hidden_act", "scoring_func", "swiglu_limit"):
        if getattr(cfg, key, None) != kw[key]:
            problems.append(f"config {key}: asked {kw[key]!r}, transformers has {getattr(cfg, key, None)!r}")
    rp = getattr(cfg, "rope_parameters", None) or {}
    want = kw["rope_parameters"]["compress"]["rope_type"]
    got = (rp.get("compress") or {}).get("rope_type")
    if got != want:
        problems.append(f"config rope_parameters.compress.rope_type: asked {want}, got {got} ({rp})")
    try:
        cfg._attn_implementation = "eager"
    except Exception as e:  # noqa: BLE001 - report and go on, the model call sets it too
        log(f"  note: cannot set config._attn_implementation ({e})")
    return cfg, problems


def build_model(cfg):
    torch.manual_seed(0)  # transformers' own init draws from the global generator
    for kw in (dict(attn_implementation="eager", dtype=torch.float32),
               dict(attn_implementation="eager", torch_dtype=torch.float32),
               dict(attn_implementation="eager")):
        try:
            model = DeepseekV4ForCausalLM._from_config(cfg, **kw)
            break
        except TypeError:
            continue
    else:
        model = DeepseekV4ForCausalLM(cfg)
    model = model.to(device="cpu", dtype=torch.float32).eval()
    return model


# ------------------------------------------------------------------------------------------
# Random parameters


def tensor_seed(seed, name):
    return (seed * 1000003 + zlib.crc32(name.encode())) % (2**63 - 1)


def rule_for(name, t):
    """(rule name, draw function) for one state-dict entry; every value non-trivial."""
    leaf = name.rsplit(".", 1)[-1]
    fan_in = t.shape[-1] if t.dim() >= 2 else 1

    def normal(std):
        return lambda g: torch.randn(t.shape, generator=g, dtype=torch.float64) * std

    def uniform(lo, hi):
        return lambda g: lo + (hi - lo) * torch.rand(t.shape, generator=g, dtype=torch.float64)

    if leaf == "tid2eid":
        return "tid2eid: distinct random experts per token", None
    if leaf == "e_score_correction_bias":
        return "N(0, 0.3)", normal(0.3)
    if leaf == "sinks":
        return "N(0, 1)", normal(1.0)
    if leaf == "position_bias":
        return "N(0, 0.5)", normal(0.5)
    if name.endswith("embed_tokens.weight"):
        return "N(0, 1)", normal(1.0)
    if leaf in ("fn", "hc_fn"):
        return "N(0, 1/sqrt(in))", normal(1.0 / math.sqrt(fan_in))
    if leaf in ("base", "hc_base"):
        return "N(0, 0.5)", normal(0.5)
    if leaf in ("scale", "hc_scale"):
        return "U(0.5, 1.5)", uniform(0.5, 1.5)
    if leaf == "weight" and t.dim() == 1:
        return "norm U(0.7, 1.3)", uniform(0.7, 1.3)
    if t.dim() >= 2 and t.is_floating_point():
        return "N(0, 1/sqrt(in))", normal(1.0 / math.sqrt(fan_in))
    return "UNKNOWN N(0, 0.5)", normal(0.5)


def randomise(model, cfg, seed, show):
    """Overwrite every parameter and persistent buffer; return unknown names."""
    unknown = []
    sd = model.state_dict()
    with torch.no_grad():
        for name in sorted(sd):
            t = sd[name]
            g = torch.Generator().manual_seed(tensor_seed(seed, name))
            rule, draw = rule_for(name, t)
            if draw is None:  # tid2eid
                n_exp = cfg.n_routed_experts
                rows = [torch.randperm(n_exp, generator=g)[: t.shape[1]] for _ in range(t.shape[0])]
                t.copy_(torch.stack(rows).to(t.dtype))
            else:
                t.copy_(draw(g).to(t.dtype))
            if rule.startswith("UNKNOWN"):
                unknown.append(name)
            if show:
                log(f"    {name:60s} {str(t.dtype):15s} {list(t.shape)} <- {rule}")
    emb = model.get_input_embeddings().weight
    head = model.get_output_embeddings().weight
    if emb.data_ptr() == head.data_ptr() or torch.equal(emb, head):
        unknown.append("lm_head.weight is tied to embed_tokens.weight")
    return unknown


def draw_inputs(cfg, seed, batch, seq):
    g = torch.Generator().manual_seed(seed * 7 + 3)
    while True:
        ids = torch.randint(0, cfg.vocab_size, (batch, seq), generator=g)
        rows = {tuple(r.tolist()) for r in ids}
        if len(rows) == batch:
            return ids


# ------------------------------------------------------------------------------------------
# Near-tie probes on the indexer and the MoE router


class Probes:
    def __init__(self, model, cfg):
        self.cfg = cfg
        self.router = []
        self.scorer = []
        self.handles = []
        self.have_scorer = False
        self.have_router = False
        for name, mod in model.named_modules():
            cls = type(mod).__name__
            if cls.endswith("TopKRouter"):
                self.have_router = True
                self.handles.append(mod.register_forward_hook(self._on_router))
            elif cls.endswith("IndexerScorer"):
                self.have_scorer = True
                self.handles.append(mod.register_forward_hook(self._on_scorer))

    def _on_router(self, mod, inputs, output):
        self.router.append((mod, inputs[0].detach()))

    def _on_scorer(self, mod, inputs, output):
        self.scorer.append(output.detach())

    def reset(self):
        self.router, self.scorer = [], []

    def close(self):
        for h in self.handles:
            h.remove()

    @torch.no_grad()
    def count(self):
        """(moe decisions, moe close, indexer decisions, indexer close, smallest margins)."""
        moe_n = moe_close = idx_n = idx_close = 0
        worst_moe = worst_idx = math.inf
        for mod, hs in self.router:
            flat = hs.reshape(-1, hs.shape[-1]).float()
            scores = mod.score_fn(F.linear(flat, mod.weight)) + mod.e_score_correction_bias
            k = mod.top_k
            if k >= scores.shape[-1]:
                continue
            s = scores.sort(dim=-1, descending=True).values
            gap = s[:, k - 1] - s[:, k]
            scale = s.abs().max(dim=-1).values.clamp(min=1e-6)
            rel = gap / scale
            moe_n += rel.numel()
            moe_close += int((rel <= TIE_TOL).sum())
            worst_moe = min(worst_moe, float(rel.min()))
        rate = self.cfg.compress_rates[CSA]
        topk = self.cfg.index_topk
        for out in self.scorer:  # [B, S, rows], no cache: query s sits at position s
            b, s_len, rows = out.shape
            for t in range(s_len):
                n_valid = min((t + 1) // rate, rows)
                if n_valid <= topk:
                    continue
                vals = out[:, t, :n_valid].sort(dim=-1, descending=True).values
                gap = vals[:, topk - 1] - vals[:, topk]
                scale = vals.abs().max(dim=-1).values.clamp(min=1e-6)
                rel = gap / scale
                idx_n += rel.numel()
                idx_close += int((rel <= TIE_TOL).sum())
                worst_idx = min(worst_idx, float(rel.min()))
        return moe_n, moe_close, idx_n, idx_close, worst_moe, worst_idx


# ------------------------------------------------------------------------------------------
# Checks


def forward(model, ids):
    with torch.no_grad():
        return model(input_ids=ids, use_cache=False).logits.float()


def rel_diff(a, b):
    scale = max(float(b.abs().max()), 1e-30)
    return float((a - b).abs().max()) / scale


def incremental(model, ids, first, step):
    """Logits from a prefill of `first` tokens then chunks of `step` through HF's cache."""
    with torch.no_grad():
        out = model(input_ids=ids[:, :first], use_cache=True)
        cache = out.past_key_values
        parts = [out.logits.float()]
        t = first
        while t < ids.shape[1]:
            out = model(input_ids=ids[:, t:t + step], past_key_values=cache, use_cache=True)
            cache = out.past_key_values
            parts.append(out.logits.float())
            t += step
        return torch.cat(parts, dim=1)


def decode_checks(model, ids, logits):
    seq = ids.shape[1]
    res = {}
    plans = [(1, 1), (max(1, seq // 2 + 1), 1), (max(1, seq // 2), 3)]
    for first, step in plans:
        if first >= seq:
            continue
        key = f"prefill{first}_step{step}"
        try:
            res[key] = rel_diff(incremental(model, ids, first, step), logits)
        except Exception as e:  # noqa: BLE001 - informational only
            res[key] = f"error: {type(e).__name__}: {e}"
    return res


def causality_check(model, ids, logits, vocab):
    """Changing token t0 must leave positions < t0 alone and move positions >= t0."""
    t0 = ids.shape[1] // 2
    ids2 = ids.clone()
    ids2[:, t0] = (ids2[:, t0] + 1) % vocab
    l2 = forward(model, ids2)
    before = rel_diff(l2[:, :t0], logits[:, :t0]) if t0 > 0 else 0.0
    after = float((l2[:, t0:] - logits[:, t0:]).abs().max())
    return before, after


def batch_check(model, ids, logits):
    worst = 0.0
    for b in range(ids.shape[0]):
        worst = max(worst, rel_diff(forward(model, ids[b:b + 1]), logits[b:b + 1]))
    return worst


def rope_ref(theta, dims, yarn):
    """Inverse frequencies per the spec (dsv4-model-spec.md 3.3), independent of HF."""
    f0 = [theta ** (-(2.0 * i) / dims) for i in range(dims // 2)]
    if yarn is None:
        return f0

    def corr(r):
        return dims * math.log(yarn["original_max_position_embeddings"] / (2 * math.pi * r)) / (
            2 * math.log(theta))

    lo = max(math.floor(corr(yarn["beta_fast"])), 0)
    hi = min(math.ceil(corr(yarn["beta_slow"])), dims - 1)
    if lo == hi:
        hi += 0.001
    out = []
    for i, f in enumerate(f0):
        ramp = min(max((i - lo) / (hi - lo), 0.0), 1.0)
        out.append(f * ramp / yarn["factor"] + f * (1 - ramp))
    return out


def rope_check(model, cfg, case):
    rot = model.model.rotary_emb
    dims = int(cfg.head_dim * cfg.partial_rotary_factor)
    res, problems = {}, []
    for label, theta, yarn in (("main", cfg.rope_theta, None),
                               ("compress", cfg.compress_rope_theta, case["yarn"])):
        buf = getattr(rot, f"{label}_inv_freq", None)
        if buf is None:
            problems.append(f"rotary_emb has no {label}_inv_freq buffer; rope not checked")
            continue
        got = [float(x) for x in buf]
        ref = rope_ref(theta, dims, yarn)
        res[label] = got
        worst = max(abs(a - b) / b for a, b in zip(got, ref)) if len(got) == len(ref) else math.inf
        if worst > 1e-5:
            problems.append(f"{label} rope inverse frequencies differ from the spec's formula "
                            f"(max rel {worst:.3g}): HF {got} spec {ref}")
        scaling = getattr(rot, f"{label}_attention_scaling", 1.0)
        if abs(float(scaling) - 1.0) > 0:
            problems.append(f"{label} rope attention_scaling is {scaling}, expected 1.0")
    return res, problems


def reload_check(case, case_dir, logits, ids):
    """Rebuild the model from the written files and compare logits bitwise."""
    try:
        if case["naming"] == "save_pretrained":
            loaded = None
            for kw in (dict(dtype=torch.float32), dict(torch_dtype=torch.float32)):
                try:
                    loaded, info = DeepseekV4ForCausalLM.from_pretrained(
                        case_dir, attn_implementation="eager", output_loading_info=True, **kw)
                    break
                except TypeError:
                    continue
            if loaded is None:
                return "error: from_pretrained refused every dtype keyword"
            info = {k: sorted(v) if isinstance(v, (set, list)) else str(v) for k, v in info.items()
                    if v}
            if info:
                log(f"  from_pretrained loading info: {info}")
            model = loaded.float().eval()
        else:
            cfg = DeepseekV4Config.from_json_file(os.path.join(case_dir, "config.json"))
            model = build_model(cfg)
            state = load_file(os.path.join(case_dir, "model.safetensors"))
            missing, unexpected = model.load_state_dict(state, strict=False)
            if missing or unexpected:
                return f"error: missing {list(missing)} unexpected {list(unexpected)}"
        d = float((forward(model, ids) - logits).abs().max())
        return d
    except Exception as e:  # noqa: BLE001 - reported as a problem by the caller
        return f"error: {type(e).__name__}: {e}"


# ------------------------------------------------------------------------------------------
# Files


def safetensors_header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
    hdr.pop("__metadata__", None)
    return {k: f"{v['dtype']}{v['shape']}".replace(" ", "") for k, v in sorted(hdr.items())}


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def write_case(case, model, cfg, ids, logits, case_dir):
    if os.path.isdir(case_dir):
        shutil.rmtree(case_dir)
    os.makedirs(case_dir)
    if case["naming"] == "save_pretrained":
        model.save_pretrained(case_dir)
        for fname in sorted(os.listdir(case_dir)):
            if fname not in ("config.json", "model.safetensors") and not fname.startswith("model-"):
                if fname != "model.safetensors.index.json":
                    os.remove(os.path.join(case_dir, fname))
        config_form = "save_pretrained (non-default keys only)"
    else:
        state = {k: v.detach().cpu().contiguous().clone() for k, v in model.state_dict().items()}
        save_file(state, os.path.join(case_dir, "model.safetensors"), metadata={"format": "pt"})
        model.config.architectures = [type(model).__name__]  # as save_pretrained records it
        model.config.to_json_file(os.path.join(case_dir, "config.json"), use_diff=False)
        config_form = "to_json_file(use_diff=False) (every key)"
    save_file({"input_ids": ids.to(torch.int32).contiguous()},
              os.path.join(case_dir, "input.safetensors"))
    save_file({"logits": logits.to(torch.float32).contiguous()},
              os.path.join(case_dir, "logits.safetensors"))
    return config_form


# ------------------------------------------------------------------------------------------
# Coverage


def coverage(case, cfg):
    seq = case["seq"]
    kinds = set(cfg.layer_types)
    feats = set()
    for k in kinds:
        feats.add(f"layer:{k}")
    for k in set(cfg.mlp_layer_types):
        feats.add(f"mlp:{k}")
    feats.add(f"hc_mult:{cfg.hc_mult}")
    if cfg.o_groups > cfg.num_attention_heads:
        feats.add("o_groups>heads")
    elif cfg.o_groups < cfg.num_attention_heads:
        feats.add("o_groups<heads")
    else:
        feats.add("o_groups=heads")
    if cfg.sliding_window < seq:
        feats.add("window<T")
    if CSA in kinds and seq // cfg.compress_rates[CSA] > cfg.index_topk:
        feats.add("csa_rows>index_topk")
    if HCA in kinds and seq // cfg.compress_rates[HCA] > 0:
        feats.add("hca_rows")
    feats.add("yarn" if case["yarn"] else "rope_default")
    feats.add(f"act:{cfg.hidden_act}")
    feats.add(f"scoring:{cfg.scoring_func}")
    if case["batch"] >= 2:
        feats.add("batch>=2")
    feats.add(f"T:{seq}")
    feats.add(f"naming:{case['naming']}")
    return sorted(feats)


REQUIRED = [f"layer:{SWA}", f"layer:{CSA}", f"layer:{HCA}", "mlp:hash_moe", "mlp:moe",
            "hc_mult:2", "hc_mult:4", "o_groups>heads", "o_groups<heads", "window<T",
            "csa_rows>index_topk", "hca_rows", "yarn", "rope_default", "act:silu", "act:gelu",
            "batch>=2", "naming:hf-internal", "naming:save_pretrained"] + \
           [f"T:{t}" for t in (3, 4, 5, 7, 8, 9, 15, 16, 17, 33)]


# ------------------------------------------------------------------------------------------


def run_case(case, out_dir, show_rules):
    log(f"== {case['name']}: {case['desc']}")
    cfg, problems = make_config(case)
    best = None
    for attempt in range(MAX_ATTEMPTS):
        seed = case["seed"] + 7919 * attempt
        model = build_model(cfg)
        unknown = randomise(model, cfg, seed, show_rules and attempt == 0)
        ids = draw_inputs(cfg, seed, case["batch"], case["seq"])
        probes = Probes(model, cfg)
        logits = forward(model, ids)
        counts = probes.count()
        probes.close()
        close = counts[1] + counts[3]
        if best is None or close < best[0]:
            best = (close, attempt, seed, model, ids, logits, counts, unknown, probes)
        if close == 0:
            break
    close, attempt, seed, model, ids, logits, counts, unknown, probes = best
    moe_n, moe_close, idx_n, idx_close, worst_moe, worst_idx = counts
    log(f"  seed {seed} (attempt {attempt + 1}); close decisions: indexer {idx_close}/{idx_n} "
        f"(smallest rel gap {worst_idx:.3g}), moe {moe_close}/{moe_n} (smallest rel gap {worst_moe:.3g})")
    if not probes.have_router and "moe" in cfg.mlp_layer_types:
        problems.append("no *TopKRouter module found: MoE margins not checked")
    if not probes.have_scorer and CSA in cfg.layer_types:
        problems.append("no *IndexerScorer module found: indexer margins not checked")
    if close:
        problems.append(f"{close} near-tie top-k decisions remain after {MAX_ATTEMPTS} seeds")
    if unknown:
        problems.append(f"parameters without a randomisation rule: {unknown}")
    if not torch.isfinite(logits).all():
        raise SystemExit(f"{case['name']}: non-finite logits")
    log(f"  logits [{', '.join(map(str, logits.shape))}] max |x| {float(logits.abs().max()):.4g} "
        f"std {float(logits.std()):.4g}; attn impl {getattr(model.config, '_attn_implementation', '?')}")

    rope, rp = rope_check(model, cfg, case)
    problems += rp
    before, after = causality_check(model, ids, logits, cfg.vocab_size)
    if before > 1e-6 or after == 0.0:
        problems.append(f"causality: earlier positions moved by {before:.3g} (rel), later by {after:.3g}")
    batch_rel = batch_check(model, ids, logits)
    if batch_rel > 1e-5:
        problems.append(f"rows alone differ from the batch by {batch_rel:.3g} (rel)")
    decode = decode_checks(model, ids, logits)
    log(f"  causality: earlier positions {before:.3g}, later {after:.3g}; alone vs batched {batch_rel:.3g}")
    log(f"  HF incremental vs full (rel, informational): {decode}")

    case_dir = os.path.join(out_dir, case["name"])
    config_form = write_case(case, model, cfg, ids, logits, case_dir)
    reload = reload_check(case, case_dir, logits, ids)
    if isinstance(reload, str) or reload != 0.0:
        problems.append(f"reloading the written files does not reproduce the logits: {reload}")
    log(f"  reload from files: max |diff| {reload}")

    files = {}
    for fname in sorted(os.listdir(case_dir)):
        files[fname] = sha256(os.path.join(case_dir, fname))
    tensors = safetensors_header(os.path.join(case_dir, "model.safetensors")) \
        if os.path.exists(os.path.join(case_dir, "model.safetensors")) else {}
    size = sum(os.path.getsize(os.path.join(case_dir, f)) for f in files)
    log(f"  wrote {case_dir} ({size} bytes)")
    for p in problems:
        log(f"  PROBLEM: {p}")

    entry = dict(
        name=case["name"], description=case["desc"], naming=case["naming"], config_json=config_form,
        seed=seed, attempts=attempt + 1, batch=case["batch"], seq=case["seq"],
        covers=coverage(case, cfg),
        near_ties=dict(indexer_decisions=idx_n, indexer_close=idx_close, moe_decisions=moe_n,
                       moe_close=moe_close, tolerance_rel=TIE_TOL),
        checks=dict(causality_earlier_rel=before, batch_alone_rel=batch_rel, hf_incremental_rel=decode,
                    reload_abs=reload),
        rope_inv_freq=rope, files=files, bytes=size, tensors=tensors, problems=problems,
    )
    return entry


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="output folder (created)")
    ap.add_argument("--cases", help="comma-separated case names (default: all)")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    args = ap.parse_args()
    if args.list:
        for c in CASES:
            log(f"{c['name']:26s} {c['desc']}")
        return 0
    if not args.out:
        ap.error("--out is required")
    names = [c["name"] for c in CASES]
    wanted = args.cases.split(",") if args.cases else names
    bad = [n for n in wanted if n not in names]
    if bad:
        ap.error(f"unknown case(s) {bad}; known: {names}")

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    if hasattr(transformers.utils.logging, "disable_progress_bar"):
        transformers.utils.logging.disable_progress_bar()
    log(f"python {platform.python_version()}, torch {torch.__version__}, transformers "
        f"{transformers.__version__}, safetensors {safetensors.__version__}")
    os.makedirs(args.out, exist_ok=True)

    entries = []
    shown_naming = set()
    for case in CASES:
        if case["name"] not in wanted:
            continue
        entry = run_case(case, args.out, show_rules=not entries)
        entries.append(entry)
        if entry["naming"] not in shown_naming:
            shown_naming.add(entry["naming"])
            log(f"  model.safetensors header ({entry['naming']} names):")
            for k, v in entry["tensors"].items():
                log(f"    {k:70s} {v}")
            with open(os.path.join(args.out, entry["name"], "config.json")) as f:
                log(f"  config.json:\n{f.read()}")

    covered = set()
    for e in entries:
        covered.update(e["covers"])
    missing = [r for r in REQUIRED if r not in covered]
    log("== coverage: " + ", ".join(sorted(covered)))
    if missing and not args.cases:
        log(f"PROBLEM: required paths not covered: {missing}")

    manifest = dict(
        generator="tests/tools/gen_hf_fixtures.py",
        versions=dict(python=platform.python_version(), torch=torch.__version__,
                      transformers=transformers.__version__, safetensors=safetensors.__version__),
        precision="float32, eager attention, CPU, 1 thread, use_cache=False, full sequence",
        files=dict(config="config.json", model="model.safetensors",
                   input="input.safetensors: input_ids I32 [B,T]",
                   logits="logits.safetensors: logits F32 [B,T,V]"),
        cases=entries,
    )
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")

    n_prob = sum(len(e["problems"]) for e in entries) + (1 if missing and not args.cases else 0)
    log(f"== {len(entries)} case(s) written to {args.out}; {n_prob} problem(s)")
    return 1 if n_prob else 0


if __name__ == "__main__":
    sys.exit(main())
