#!/usr/bin/env python3
"""Train Deltafin's bundled default model: a small Kimi K2-family (DeepSeek-V3 architecture) MoE, a dense
draft model on the same tokenizer, and a byte-level BPE tokenizer, all on the Python standard library's
own source (PSF licence).

Runs where torch + transformers + tokenizers are installed (the GPU machine). One process does it all:

  1. data: every .py file under the running interpreter's stdlib (sysconfig 'stdlib'; site-packages and
     dist-packages excluded), decoded as UTF-8 (undecodable files skipped), ~3% of files held out for
     validation by a hash of their relative path;
  2. tokenizer: byte-level BPE (HF `tokenizers`, GPT-2 regex via ByteLevel(use_regex=True), no
     normalizer), vocabulary 4096 including the special token <|endoftext|> (id 0), which separates files;
  3. target: transformers' DeepseekV3ForCausalLM (MLA, YaRN rope interleaved, 1 dense + 5 MoE layers,
     32 routed experts top-4 sigmoid router with e_score_correction_bias updated aux-loss-free as in
     DeepSeek-V3, 1 shared expert), AdamW, bf16 autocast, sequence 512, time-boxed;
  4. draft: the same architecture with every layer dense (first_k_dense_replace = num_hidden_layers);
  5. export: real on-disk layout (one tensor per expert projection), bf16 spine, routed experts as
     compressed-tensors pack-quantized INT4 group 32 (Kimi-K2-Thinking), config.json in the Kimi K2
     spelling; the draft all bf16;
  6. golden: the quantized target loaded (dequantized) through transformers' from_pretrained in fp32 with
     eager attention: logits of all 32 positions of an 8-token prompt + its 24-token greedy continuation
     (as tools/make_golden_k2.py);
  7. metrics: held-out perplexity of target (quantized and unquantized) and draft, bits per byte, the
     draft's greedy acceptance rate against the target (k = 4), expert load balance; a loss CSV + plot.

Usage (what produced models/default and models/default-draft; see docs/default-model.md):
  python3 tools/train_default_model.py --out OUTDIR --total-seconds 520
  python3 tools/train_default_model.py --out OUTDIR --smoke          # tiny end-to-end check
Fixed step counts instead of the wall-clock budget: --target-steps N --draft-steps M.

The same script trains the larger routing-study model (docs/routing-model.md): more, smaller experts
(--experts, --top-k, --moe-layers, --moe-inter), no draft (--no-draft), extra plain text besides the
stdlib (--corpus DIR: every *.txt / *.txt.gz under it, made by tools/make_prose_corpus.py), a sharded
checkpoint (--shard-mb: model-0000X-of-0000Y.safetensors + model.safetensors.index.json) and its own
directory name inside models.tgz (--name). Without these flags it does exactly what it did for
models/default.
"""
import argparse
import csv
import gzip
import hashlib
import json
import math
import os
import re
import shutil
import sys
import sysconfig
import tempfile
import time

import numpy as np
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")      # the GPU machine reaches no network
os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
import torch.nn.functional as F

T0 = time.time()


def log(*a):
    print(f"[{time.time() - T0:7.1f}s]", *a, flush=True)


# --------------------------------------------------------------------------------------------- config
VOCAB = 4096
SEQ = 512
EOS = "<|endoftext|>"

ROPE = {"rope_type": "yarn", "rope_theta": 50000.0, "factor": 32.0, "original_max_position_embeddings": SEQ,
        "beta_fast": 1.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0}

COMMON = dict(
    vocab_size=VOCAB, hidden_act="silu", rms_norm_eps=1e-6, tie_word_embeddings=False, attention_bias=False,
    rope_interleave=True, bos_token_id=0, eos_token_id=0, pad_token_id=0, n_group=1, topk_group=1,
    norm_topk_prob=True, routed_scaling_factor=2.827, initializer_range=0.02,
    # the pitfall in model-spec-k2.md 2.5: keep max_position_embeddings = factor * original
    max_position_embeddings=int(ROPE["factor"] * ROPE["original_max_position_embeddings"]),
)

TARGET = dict(COMMON, hidden_size=256, intermediate_size=768, moe_intermediate_size=256, num_hidden_layers=6,
              first_k_dense_replace=1, num_attention_heads=8, num_key_value_heads=8, q_lora_rank=128,
              kv_lora_rank=64, qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32, n_routed_experts=32,
              num_experts_per_tok=4, n_shared_experts=1)

DRAFT = dict(COMMON, hidden_size=256, intermediate_size=512, moe_intermediate_size=256, num_hidden_layers=4,
             first_k_dense_replace=4, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=96,
             kv_lora_rank=64, qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32, n_routed_experts=32,
             num_experts_per_tok=4, n_shared_experts=1)

INT4_GROUP = 32
ROUTED_EXPERT_PROJ = re.compile(r"\.mlp\.experts\.\d+\.(gate|up|down)_proj\.weight$")
QUANT_CONFIG = {  # Kimi-K2-Thinking's (model-spec-k2.md section 4.2), as tools/make_golden_k2.py writes it
    "quant_method": "compressed-tensors", "format": "pack-quantized", "quantization_status": "compressed",
    "config_groups": {"group_0": {
        "targets": ["Linear"], "input_activations": None, "output_activations": None,
        "weights": {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group",
                    "group_size": INT4_GROUP, "dynamic": False, "actorder": None,
                    "observer": "minmax", "observer_kwargs": {}}}},
    "ignore": ["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*",
               "re:.*mlp\\.(gate|up|gate_up|down)_proj.*"],
    "kv_cache_scheme": None,
}


def make_config(spec, attn="sdpa"):
    from transformers import DeepseekV3Config
    rope = dict(ROPE)
    try:
        cfg = DeepseekV3Config(rope_parameters=dict(rope), **spec)
    except TypeError:
        theta = rope.pop("rope_theta")
        cfg = DeepseekV3Config(rope_scaling=rope, rope_theta=theta, **spec)
    cfg._attn_implementation = attn
    return cfg


def kimi_config(cfg, int4):
    """config.json in the Kimi K2 spelling (model_type kimi_k2, v4 rope_scaling + rope_theta)."""
    d = dict(cfg.to_dict())
    rope = d.pop("rope_parameters", None) or dict(d.pop("rope_scaling", {}) or {}, rope_theta=d.get("rope_theta"))
    rope = dict(rope)
    d["model_type"] = "kimi_k2"
    d["rope_theta"] = rope.pop("rope_theta")
    rope["type"] = rope.pop("rope_type", "yarn")
    d["rope_scaling"] = rope
    d["num_nextn_predict_layers"] = 0          # no MTP layer is trained or shipped (as Kimi K2)
    d.pop("_attn_implementation", None)
    d.pop("_experts_implementation", None)
    if int4:
        d["quantization_config"] = QUANT_CONFIG
    d["torch_dtype"] = "bfloat16"
    d["architectures"] = ["DeepseekV3ForCausalLM"]
    return d


# ------------------------------------------------------------------------------------------- weights
def real_layout(state_dict):
    """Split transformers' fused expert tensors back into one tensor per expert projection."""
    out = {}
    for name, t in state_dict.items():
        t = t.detach().cpu().contiguous()
        if name.endswith("mlp.experts.gate_up_proj"):       # [E, 2I, H]: gate rows first
            base = name[: -len("gate_up_proj")]
            inter = t.shape[1] // 2
            for e in range(t.shape[0]):
                out[f"{base}{e}.gate_proj.weight"] = t[e, :inter].clone()
                out[f"{base}{e}.up_proj.weight"] = t[e, inter:].clone()
        elif name.endswith("mlp.experts.down_proj"):        # [E, H, I]
            base = name[: -len("down_proj")]
            for e in range(t.shape[0]):
                out[f"{base}{e}.down_proj.weight"] = t[e].clone()
        else:
            out[name] = t
    return out


def int4_unpack(packed, k):
    words = packed.to(torch.int64) & 0xFFFFFFFF
    shifts = torch.arange(8, dtype=torch.int64) * 4
    u = ((words.unsqueeze(2) >> shifts) & 0xF).reshape(packed.shape[0], -1)[:, :k]
    return u - 8


def int4_quantize(w):
    """w [N, K] fp32 -> (packed I32 [N, ceil(K/8)], scale BF16 [N, ceil(K/32)], shape I32 [2]);
    scale = amax/7 rounded to bf16, q = clamp(round(w/scale), -8, 7), stored u = q + 8, element 0 lowest."""
    n, k = w.shape
    groups, words = math.ceil(k / INT4_GROUP), math.ceil(k / 8)
    padded = torch.zeros(n, groups * INT4_GROUP, dtype=torch.float32)
    padded[:, :k] = w
    amax = padded.view(n, groups, INT4_GROUP).abs().amax(dim=2)
    scale = (amax / 7.0).to(torch.bfloat16)
    s = scale.to(torch.float32).repeat_interleave(INT4_GROUP, dim=1)[:, :k]
    s = torch.where(s == 0, torch.ones_like(s), s)
    q = torch.clamp(torch.round(w / s), -8, 7).to(torch.int64)
    u = torch.zeros(n, words * 8, dtype=torch.int64)
    u[:, :k] = q + 8
    shifts = torch.arange(8, dtype=torch.int64) * 4
    packed = (u.view(n, words, 8) << shifts).sum(dim=2)
    packed = torch.where(packed >= 2 ** 31, packed - 2 ** 32, packed).to(torch.int32)
    assert torch.equal(int4_unpack(packed, k), q), "int4 packing does not round-trip"
    return packed.contiguous(), scale.contiguous(), torch.tensor([n, k], dtype=torch.int32)


def int4_dequantize(packed, scale, shape):
    n, k = (int(v) for v in shape.tolist())
    s = scale.to(torch.float32).repeat_interleave(INT4_GROUP, dim=1)[:, :k]
    return int4_unpack(packed, k).to(torch.float32) * s


def store(tensors, int4):
    out = {}
    for name, t in tensors.items():
        if name.endswith("e_score_correction_bias"):
            out[name] = t.to(torch.float32)
        elif int4 and ROUTED_EXPERT_PROJ.search(name):
            base = name[: -len(".weight")]
            packed, scale, shape = int4_quantize(t.to(torch.bfloat16).to(torch.float32))
            out[base + ".weight_packed"] = packed
            out[base + ".weight_scale"] = scale
            out[base + ".weight_shape"] = shape
        else:
            out[name] = t.to(torch.bfloat16)
    return out


def dequantized(stored):
    out = {}
    for name, t in stored.items():
        if name.endswith((".weight_scale", ".weight_shape")):
            continue
        if name.endswith(".weight_packed"):
            base = name[: -len("_packed")]
            out[base] = int4_dequantize(t, stored[base + "_scale"], stored[base + "_shape"])
        else:
            out[name] = t.to(torch.float32)
    return out


def save_shards(stored, directory, shard_mb):
    """model-0000X-of-0000Y.safetensors of at most shard_mb MiB each (tensors in state-dict order, as a
    real checkpoint groups them by layer) + model.safetensors.index.json; returns the shards' sizes."""
    from safetensors.torch import save_file
    limit = shard_mb * 2 ** 20
    shards, cur, cur_bytes = [], {}, 8 + 128                        # header length + its metadata
    for name, t in stored.items():
        need = t.numel() * t.element_size() + len(name) + 96      # data + this tensor's header entry
        if cur and cur_bytes + need > limit:
            shards.append(cur)
            cur, cur_bytes = {}, 8 + 128
        cur[name], cur_bytes = t, cur_bytes + need
    shards.append(cur)
    weight_map, sizes = {}, {}
    for i, part in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file(part, os.path.join(directory, fname), metadata={"format": "pt"})
        sizes[fname] = os.path.getsize(os.path.join(directory, fname))
        if sizes[fname] > limit:
            log(f"WARNING: {fname} has {sizes[fname]} bytes, over {limit}")
        weight_map.update({n: fname for n in part})
    total = sum(t.numel() * t.element_size() for t in stored.values())
    with open(os.path.join(directory, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=1)
    log("shards", sizes)
    return sizes


def load_reference(cfg, tensors, device, attn="eager"):
    """Load real-layout fp32 tensors through transformers' own from_pretrained (as make_golden_k2.py)."""
    from safetensors.torch import save_file
    from transformers import DeepseekV3ForCausalLM
    with tempfile.TemporaryDirectory() as tmp:
        cfg.save_pretrained(tmp)
        save_file({n: t.contiguous() for n, t in tensors.items()}, os.path.join(tmp, "model.safetensors"),
                  metadata={"format": "pt"})
        try:
            model = DeepseekV3ForCausalLM.from_pretrained(tmp, dtype=torch.float32, attn_implementation=attn,
                                                          experts_implementation="eager")
        except (TypeError, ValueError) as e:
            log("from_pretrained without experts_implementation:", repr(e)[:200])
            model = DeepseekV3ForCausalLM.from_pretrained(tmp, dtype=torch.float32, attn_implementation=attn)
    model = model.to(device).eval()
    reloaded = real_layout(model.state_dict())
    for n, t in tensors.items():
        assert n in reloaded, f"reload lost {n}"
        assert torch.equal(reloaded[n].float(), t.float()), f"reload mismatch on {n}"
    return model


# ---------------------------------------------------------------------------------------------- data
def collect_corpus(corpus, limit=None):
    """(relpath, text) of every *.txt / *.txt.gz under corpus, relpaths prefixed 'corpus/' (their own
    held-out hash space) and without '.gz' (a gzipped copy splits the same), in sorted order; limit
    subsamples as collect_files does."""
    texts = []
    for d, dirs, names in os.walk(corpus):
        dirs.sort()
        for n in sorted(names):
            p = os.path.join(d, n)
            if n.endswith(".txt.gz"):
                with gzip.open(p, "rb") as f:
                    t = f.read().decode("utf-8")
            elif n.endswith(".txt"):
                with open(p, "rb") as f:
                    t = f.read().decode("utf-8")
            else:
                continue
            if t.strip():
                texts.append(("corpus/" + os.path.relpath(p, corpus).removesuffix(".gz"), t))
    texts.sort()
    if limit:
        texts = texts[:: max(1, len(texts) // limit)][:limit]
    return texts


def collect_files(limit=None):
    root = sysconfig.get_paths()["stdlib"]
    files = []
    for d, dirs, names in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x not in ("site-packages", "dist-packages", "__pycache__"))
        for n in sorted(names):
            if n.endswith(".py"):
                files.append(os.path.join(d, n))
    files.sort()
    texts, skipped = [], 0
    for p in files:
        try:
            with open(p, "rb") as f:
                t = f.read().decode("utf-8")
        except (UnicodeDecodeError, OSError):
            skipped += 1
            continue
        if t.strip():
            texts.append((os.path.relpath(p, root), t))
    if limit:
        texts = texts[:: max(1, len(texts) // limit)][:limit]
    return root, texts, skipped


def is_heldout(rel):
    return int(hashlib.sha1(rel.encode()).hexdigest(), 16) % 100 < 3


def train_tokenizer(train_texts):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, min_frequency=2, special_tokens=[EOS],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(train_texts, trainer=trainer)
    assert tok.token_to_id(EOS) == 0
    if tok.get_vocab_size() != VOCAB:
        log(f"WARNING: tokenizer has {tok.get_vocab_size()} tokens, model vocab_size {VOCAB}")
    return tok


def save_tokenizer(tok, directory):
    tok.save(os.path.join(directory, "tokenizer.json"))
    with open(os.path.join(directory, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": EOS, "bos_token": EOS,
                   "pad_token": EOS, "unk_token": None, "add_bos_token": False, "add_eos_token": False,
                   "model_max_length": SEQ, "clean_up_tokenization_spaces": False,
                   "added_tokens_decoder": {"0": {"content": EOS, "lstrip": False, "rstrip": False,
                                                  "normalized": False, "single_word": False, "special": True}}},
                  f, indent=1)
    with open(os.path.join(directory, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 0, "eos_token_id": 0, "pad_token_id": 0, "do_sample": False}, f, indent=1)


def stream(tok, texts):
    encs = tok.encode_batch(texts)
    ids = []
    for e in encs:
        ids.append(0)
        ids.extend(e.ids)
    return torch.tensor(ids, dtype=torch.int64)


# ------------------------------------------------------------------------------------------ training
def build_model(spec, device, seed):
    from transformers import DeepseekV3ForCausalLM
    torch.manual_seed(seed)
    cfg = make_config(spec, "sdpa")
    model = DeepseekV3ForCausalLM(cfg).float()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():   # explicit init: independent of the installed version's _init_weights
        for name, p in model.named_parameters():
            if name.endswith("e_score_correction_bias"):
                p.zero_()
            elif p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=g) * 0.02)
            else:
                p.fill_(1.0)      # every 1-D parameter of this architecture is an RMSNorm weight
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.zero_()
    return cfg, model.to(device)


def pick_experts_impl(model, cfg, data, device, batch, candidates=("grouped_mm", "eager")):
    """grouped_mm if it runs forward+backward here and is faster than eager; else eager (the only
    candidate if one is named, eager if it fails)."""
    if cfg.first_k_dense_replace >= cfg.num_hidden_layers or not hasattr(model, "set_experts_implementation"):
        return "n/a"
    x = data[: batch * (SEQ + 1)].view(batch, SEQ + 1).to(device)
    best, best_t = None, 1e9
    for impl in candidates:
        try:
            model.set_experts_implementation(impl)
            ts = []
            for _ in range(3):
                torch.cuda.synchronize()
                t = time.time()
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    logits = model(input_ids=x[:, :-1], use_cache=False).logits
                loss = F.cross_entropy(logits.float().reshape(-1, VOCAB), x[:, 1:].reshape(-1))
                loss.backward()
                torch.cuda.synchronize()
                ts.append(time.time() - t)
            model.zero_grad(set_to_none=True)
            log(f"experts {impl}: {min(ts):.3f}s/step (loss {loss.item():.3f})")
            if min(ts) < best_t:
                best, best_t = impl, min(ts)
        except Exception as e:  # noqa: BLE001 - any failure just rules the backend out
            log(f"experts {impl} failed: {repr(e)[:300]}")
            model.zero_grad(set_to_none=True)
    best = best or "eager"
    model.set_experts_implementation(best)
    return best


class BiasBalancer:
    """DeepSeek-V3's auxiliary-loss-free balancing: after each step, b_i += u * sign(mean_load - load_i).
    transformers keeps e_score_correction_bias as a (non-trainable) buffer; this updates it."""

    def __init__(self, model, cfg, u):
        self.u, self.k, self.e = u, cfg.num_experts_per_tok, cfg.n_routed_experts
        self.gates = [m for _, m in model.named_modules() if hasattr(m, "e_score_correction_bias")]
        self.counts = {id(m): torch.zeros(self.e, device=m.e_score_correction_bias.device) for m in self.gates}
        self.enabled = True
        for m in self.gates:
            m.register_forward_pre_hook(self.hook)

    def hook(self, mod, inp):
        if not (self.enabled and mod.training):
            return
        with torch.no_grad(), torch.autocast("cuda", enabled=False):
            x = inp[0].detach().reshape(-1, mod.weight.shape[1]).float()
            s = torch.sigmoid(x @ mod.weight.float().t()) + mod.e_score_correction_bias
            idx = s.topk(self.k, dim=-1).indices
            self.counts[id(mod)] += torch.bincount(idx.flatten(), minlength=self.e).float()

    def step(self):
        with torch.no_grad():
            for m in self.gates:
                c = self.counts[id(m)]
                m.e_score_correction_bias += self.u * torch.sign(c.mean() - c)
                c.zero_()


def lr_at(step, total, peak, warm):
    if step < warm:
        return peak * (step + 1) / warm
    p = min(1.0, (step - warm) / max(1, total - warm))
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * p)))


@torch.no_grad()
def eval_nll(model, windows, batch, autocast=True):
    """windows [N, SEQ+1]: sum of NLL over predicted tokens and their count."""
    model.eval()
    tot, n = 0.0, 0
    for i in range(0, windows.shape[0], batch):
        w = windows[i:i + batch]
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            logits = model(input_ids=w[:, :-1], use_cache=False).logits
        tot += F.cross_entropy(logits.float().reshape(-1, VOCAB), w[:, 1:].reshape(-1), reduction="sum").item()
        n += w[:, 1:].numel()
    return tot, n


def windows_of(ids, stride=SEQ):
    """Every token after the first predicted exactly once: windows of SEQ+1 at stride SEQ (last one padded
    by overlapping back, its repeated targets dropped is not worth it here: we cut the tail)."""
    nwin = (ids.numel() - 1) // stride
    return torch.stack([ids[i * stride: i * stride + SEQ + 1] for i in range(nwin)])


def train(name, spec, data, val_windows, device, seconds, steps, batch, lr, writer, seed, bias_u,
          experts_impls=("grouped_mm", "eager")):
    cfg, model = build_model(spec, device, seed)
    nparams = sum(p.numel() for p in model.parameters())
    log(f"{name}: {nparams / 1e6:.2f}M parameters")
    impl = pick_experts_impl(model, cfg, data, device, batch, experts_impls)
    balancer = BiasBalancer(model, cfg, bias_u) if cfg.first_k_dense_replace < cfg.num_hidden_layers else None
    decay = [p for p in model.parameters() if p.dim() >= 2]
    nodecay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": nodecay, "weight_decay": 0.0}],
                            lr=lr, betas=(0.9, 0.95), eps=1e-8, fused=True)
    gen = torch.Generator(device=device).manual_seed(seed)
    n_start = data.numel() - SEQ - 1
    offs = torch.arange(SEQ + 1, device=device)
    total = steps if steps else 10 ** 9
    warm = min(100, max(1, total // 20))
    t_start = time.time()
    t10, last_logged = None, 0
    run_loss, run_n, step, tokens = 0.0, 0, 0, 0
    model.train()
    while step < total:
        if not steps:
            now = time.time()
            if step == 10:
                t10 = now
            if step == 40:                      # fix the schedule from the measured step time
                per = (now - t10) / 30
                total = max(41, 40 + int((seconds - (now - t_start)) / per))
                warm = min(100, max(1, total // 20))
                log(f"{name}: {per * 1000:.1f} ms/step -> {total} steps in {seconds:.0f}s")
            if now - t_start > seconds * 1.05:
                log(f"{name}: wall-clock stop at step {step}")
                break
        cur = lr_at(step, total, lr, warm)
        for gr in opt.param_groups:
            gr["lr"] = cur
        idx = torch.randint(0, n_start, (batch,), device=device, generator=gen)
        x = data[idx[:, None] + offs]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(input_ids=x[:, :-1], use_cache=False).logits
        loss = F.cross_entropy(logits.float().reshape(-1, VOCAB), x[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if balancer:
            balancer.step()
        step += 1
        tokens += batch * SEQ
        run_loss += loss.item() if step % 10 == 0 or step <= 10 else 0.0
        run_n += 1 if step % 10 == 0 or step <= 10 else 0
        if step % 50 == 0 or step == total:
            val = ""
            if step % 250 == 0 or step == total:
                if balancer:
                    balancer.enabled = False
                vt, vn = eval_nll(model, val_windows[:32], 32)
                model.train()
                if balancer:
                    balancer.enabled = True
                val = f"{vt / vn:.4f}"
            # train_loss: mean of the losses sampled (every 10th step) since the last row; empty if none
            writer.writerow([name, step, tokens, f"{time.time() - t_start:.1f}", f"{cur:.3e}",
                             f"{run_loss / run_n:.4f}" if run_n else "", val])
            log(f"{name} step {step}/{total} loss {run_loss / max(1, run_n):.4f} val {val} lr {cur:.2e}")
            run_loss, run_n = 0.0, 0
            last_logged = step
    if step != last_logged:                     # stopped by the wall clock between two log points
        vt, vn = eval_nll(model, val_windows[:32], 32)
        writer.writerow([name, step, tokens, f"{time.time() - t_start:.1f}", f"{cur:.3e}",
                         f"{run_loss / run_n:.4f}" if run_n else "", f"{vt / vn:.4f}"])
    wall = time.time() - t_start
    model.eval()
    info = {"parameters": nparams, "steps": step, "tokens": tokens, "wall_s": round(wall, 1), "batch": batch,
            "seq": SEQ, "peak_lr": lr, "experts_implementation": impl, "final_train_loss": float(loss.item())}
    return cfg, model, info


# ------------------------------------------------------------------------------------------- metrics
@torch.no_grad()
def acceptance(draft, target, ids, device, n_windows, ctx, k, seed):
    g = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, ids.numel() - ctx - k - 1, (n_windows,), generator=g)
    offs = torch.arange(ctx)
    acc_total, n, hist = 0, 0, [0] * (k + 1)
    for i in range(0, n_windows, 64):
        s = starts[i:i + 64]
        x = ids[s[:, None] + offs].to(device)
        seq = x
        for _ in range(k):
            nxt = draft(input_ids=seq, use_cache=False).logits[:, -1].argmax(-1)
            seq = torch.cat([seq, nxt[:, None]], 1)
        proposed = seq[:, ctx:]
        tgt = target(input_ids=seq, use_cache=False).logits[:, ctx - 1: ctx - 1 + k].argmax(-1)
        match = (proposed == tgt).int()
        accepted = match.cumprod(1).sum(1)
        for a in accepted.tolist():
            hist[a] += 1
        acc_total += accepted.sum().item()
        n += x.shape[0]
    mean = acc_total / n
    return {"k": k, "windows": n, "context_tokens": ctx, "mean_accepted_per_step": mean,
            "acceptance_rate": mean / k, "tokens_per_target_pass": mean + 1, "accepted_histogram": hist}


@torch.no_grad()
def expert_load(model, windows):
    """Routed assignments per expert on held-out windows, per MoE layer: max/mean and min/mean load,
    normalized entropy of the load, the busiest 10 % of experts' share, unused experts, and the mean
    share of a position's top-k experts that the next position also chooses (independent uniform
    routing would give top_k / experts)."""
    gates = [(n, m) for n, m in model.named_modules() if hasattr(m, "e_score_correction_bias")]
    k, e = model.config.num_experts_per_tok, model.config.n_routed_experts
    counts, overlap = {}, {}

    def mk(name):
        def hook(mod, inp):
            x = inp[0].reshape(-1, mod.weight.shape[1]).float()
            s = torch.sigmoid(x @ mod.weight.float().t()) + mod.e_score_correction_bias
            idx = s.topk(model.config.num_experts_per_tok, -1).indices
            counts[name] = counts.get(name, 0) + torch.bincount(idx.flatten(), minlength=model.config.n_routed_experts)
            chosen = torch.zeros(idx.shape[0], e, dtype=torch.bool, device=idx.device)
            chosen.scatter_(1, idx, True)
            chosen = chosen.view(-1, SEQ, e)                 # windows of SEQ consecutive positions
            shared = (chosen[:, 1:] & chosen[:, :-1]).sum().item()
            o = overlap.get(name, (0, 0))
            overlap[name] = (o[0] + shared, o[1] + chosen.shape[0] * (SEQ - 1) * k)
        return hook
    hs = [m.register_forward_pre_hook(mk(n)) for n, m in gates]
    for i in range(0, min(64, windows.shape[0]), 16):
        model(input_ids=windows[i:i + 16, :-1], use_cache=False)
    for h in hs:
        h.remove()
    out = {}
    for n, c in counts.items():
        c = c.float()
        p = c / c.sum()
        nz = p[p > 0]
        top = max(1, e // 10)
        out[n.replace(".mlp.gate", "")] = {"max_over_mean": round((c.max() / c.mean()).item(), 3),
                                           "min_over_mean": round((c.min() / c.mean()).item(), 3),
                                           "normalized_entropy": round((-(nz * nz.log()).sum() / math.log(e)).item(), 4),
                                           "top10pct_share": round(p.sort(descending=True).values[:top].sum().item(), 4),
                                           "unused_experts": int((c == 0).sum().item()),
                                           "consecutive_overlap": round(overlap[n][0] / overlap[n][1], 4),
                                           "consecutive_overlap_if_independent": round(k / e, 4)}
    return out


def pick_prompt(tok, held_texts):
    for _, t in held_texts:
        for line in t.splitlines():
            s = line.strip()
            if s.startswith("def ") and len(s) > 16:
                ids = tok.encode(s).ids[:8]
                text = tok.decode(ids)
                if len(ids) == 8 and text.startswith("def ") and tok.encode(text).ids == ids:
                    return ids, text
    ids = tok.encode("def __init__(self, name, value):").ids[:8]
    return ids, tok.decode(ids)


# ---------------------------------------------------------------------------------------------- main
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", default="/tmp/deltafin-default-model")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--total-seconds", type=float, default=520, help="wall-clock budget of the whole script")
    ap.add_argument("--reserve-seconds", type=float, default=75, help="kept for eval, export, golden, tar")
    ap.add_argument("--draft-share", type=float, default=0.22)
    ap.add_argument("--target-steps", type=int, default=0)
    ap.add_argument("--draft-steps", type=int, default=0)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--draft-lr", type=float, default=3e-3)
    ap.add_argument("--bias-update", type=float, default=1e-3)
    ap.add_argument("--name", default="default", help="the target's directory inside models.tgz (models/NAME)")
    ap.add_argument("--experts", type=int, default=TARGET["n_routed_experts"], help="routed experts per MoE layer")
    ap.add_argument("--top-k", type=int, default=TARGET["num_experts_per_tok"], help="routed experts per token")
    ap.add_argument("--moe-layers", type=int, default=TARGET["num_hidden_layers"] - 1,
                    help="MoE layers after the one dense first layer")
    ap.add_argument("--moe-inter", type=int, default=TARGET["moe_intermediate_size"],
                    help="width of each routed (and the shared) expert")
    ap.add_argument("--no-draft", action="store_true", help="train and ship no draft model")
    ap.add_argument("--corpus", default="", help="folder of extra *.txt / *.txt.gz files to train on")
    ap.add_argument("--experts-impl", choices=["auto", "grouped_mm", "eager"], default="auto",
                    help="transformers' experts backend for training (auto: the faster of the two, timed)")
    ap.add_argument("--shard-mb", type=float, default=0,
                    help="write model-0000X-of-0000Y.safetensors shards of at most this many MiB + index")
    args = ap.parse_args()
    spec = dict(TARGET, n_routed_experts=args.experts, num_experts_per_tok=args.top_k,
                num_hidden_layers=args.moe_layers + 1, moe_intermediate_size=args.moe_inter)

    import tokenizers
    import transformers
    from safetensors.torch import save_file
    device = "cuda"
    torch.backends.cuda.matmul.allow_tf32 = True
    os.makedirs(args.out, exist_ok=True)
    shutil.rmtree(args.work, ignore_errors=True)
    tdir = os.path.join(args.work, "models", args.name)
    ddir = None if args.no_draft else os.path.join(args.work, "models", args.name + "-draft")
    gdir = os.path.join(tdir, "golden")
    for d in (tdir, ddir, gdir):
        if d:
            os.makedirs(d)
    metrics = {"python": sys.version, "torch": torch.__version__, "transformers": transformers.__version__,
               "tokenizers": tokenizers.__version__, "gpu": torch.cuda.get_device_name(0), "args": vars(args)}

    def dump_metrics():
        with open(os.path.join(args.out, "metrics.json"), "w") as f:
            json.dump(metrics, f, indent=1)

    # 1. data
    root, texts, skipped = collect_files(limit=300 if args.smoke else None)
    if args.corpus:
        texts = texts + collect_corpus(args.corpus, limit=100 if args.smoke else None)
    train_t = [(r, t) for r, t in texts if not is_heldout(r)]
    held_t = [(r, t) for r, t in texts if is_heldout(r)]
    corpus_hash = hashlib.sha256("".join(r + "\0" + t for r, t in texts).encode()).hexdigest()
    metrics["data"] = {"stdlib": root, "files": len(texts), "skipped_undecodable": skipped,
                       "train_files": len(train_t), "heldout_files": len(held_t),
                       "train_bytes": sum(len(t.encode()) for _, t in train_t),
                       "heldout_bytes": sum(len(t.encode()) for _, t in held_t),
                       "corpus_sha256": corpus_hash, "heldout_list": [r for r, _ in held_t]}
    if args.corpus:
        metrics["data"]["corpus"] = {"dir": args.corpus,
                                     "files": sum(r.startswith("corpus/") for r, _ in texts),
                                     "bytes": sum(len(t.encode()) for r, t in texts if r.startswith("corpus/"))}
    log("data", {k: v for k, v in metrics["data"].items() if k != "heldout_list"})

    # 2. tokenizer
    tok = train_tokenizer([t for _, t in train_t])
    for d in (tdir, ddir):
        if d:
            save_tokenizer(tok, d)
    train_ids = stream(tok, [t for _, t in train_t]).to(device)
    held_ids = stream(tok, [t for _, t in held_t])
    metrics["data"].update(train_tokens=int(train_ids.numel()), heldout_tokens=int(held_ids.numel()),
                           train_bytes_per_token=round(metrics["data"]["train_bytes"] / train_ids.numel(), 3))
    val_windows = windows_of(held_ids).to(device)
    log(f"tokens: train {train_ids.numel()}, held-out {held_ids.numel()}, {val_windows.shape[0]} windows")
    dump_metrics()

    # 3-4. training, time-boxed
    budget = args.total_seconds - (time.time() - T0) - args.reserve_seconds
    t_sec, d_sec = budget * (1 - args.draft_share), budget * args.draft_share
    if args.no_draft:
        t_sec, d_sec = budget, 0
    if args.smoke:
        t_sec, d_sec = 12, 6
    log(f"training budget: target {t_sec:.0f}s, draft {d_sec:.0f}s")
    csv_path = os.path.join(args.out, "loss.csv")
    with open(csv_path, "w", newline="") as fcsv:
        w = csv.writer(fcsv)
        w.writerow(["model", "step", "tokens", "elapsed_s", "lr", "train_loss", "val_loss"])
        tcfg, tmodel, tinfo = train("target", spec, train_ids, val_windows, device, t_sec, args.target_steps,
                                    args.batch, args.lr, w, 1234, args.bias_update,
                                    ("grouped_mm", "eager") if args.experts_impl == "auto" else (args.experts_impl,))
        fcsv.flush()
        metrics["target_training"] = tinfo
        dump_metrics()
        if not args.no_draft:
            dcfg, dmodel, dinfo = train("draft", DRAFT, train_ids, val_windows, device, d_sec, args.draft_steps,
                                        args.batch, args.draft_lr, w, 4321, 0.0)
            metrics["draft_training"] = dinfo
    dump_metrics()

    # held-out NLL of the trained (unquantized, fp32 master weights, bf16 autocast) models
    nt, nn_ = eval_nll(tmodel, val_windows, 32)
    # bytes of held-out text the scored tokens cover (the tail after the last whole window is cut)
    heldout_bytes = metrics["data"]["heldout_bytes"] * nn_ / (held_ids.numel() - 1)
    metrics["heldout"] = {"predicted_tokens": nn_,
                          "target_fp32_master_bf16_autocast": {"nll": nt / nn_, "ppl": math.exp(nt / nn_)}}

    # 5. export
    bias = {n: b.detach().cpu().tolist() for n, b in tmodel.named_buffers() if n.endswith("e_score_correction_bias")}
    metrics["e_score_correction_bias_range"] = {n: [round(min(v), 4), round(max(v), 4)] for n, v in bias.items()}
    t_stored = store(real_layout(tmodel.state_dict()), int4=True)
    d_stored = None if args.no_draft else store(real_layout(dmodel.state_dict()), int4=False)
    log("target tensors (layer 1, first 12):", [(n, tuple(t.shape), str(t.dtype)) for n, t in
                                                  sorted(t_stored.items()) if ".layers.1." in n][:12])
    log("target state_dict names (layer 1):", [n for n in tmodel.state_dict() if ".layers.1." in n])
    if args.shard_mb:
        metrics["shards"] = save_shards(t_stored, tdir, args.shard_mb)
    else:
        save_file(t_stored, os.path.join(tdir, "model.safetensors"), metadata={"format": "pt"})
    if d_stored is not None:
        save_file(d_stored, os.path.join(ddir, "model.safetensors"), metadata={"format": "pt"})
    for d, cfg, q in ((tdir, tcfg, True), (ddir, None if args.no_draft else dcfg, False)):
        if d:
            with open(os.path.join(d, "config.json"), "w") as f:
                json.dump(kimi_config(cfg, q), f, indent=1, sort_keys=True)
    del tmodel
    if not args.no_draft:
        del dmodel
    torch.cuda.empty_cache()
    log("exported")

    # 6. golden: quantized target, dequantized, through from_pretrained, fp32, eager attention
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    gcfg = make_config(spec, "eager")
    qt = load_reference(gcfg, dequantized(t_stored), device)
    qt.generation_config.eos_token_id = None
    qt.generation_config.pad_token_id = 0
    prompt, prompt_text = pick_prompt(tok, held_t)
    with torch.no_grad():
        gen = qt.generate(torch.tensor([prompt], device=device), max_new_tokens=24, do_sample=False)
        full = gen[0].tolist()
        logits = qt(torch.tensor([full], device=device)).logits[0].float().cpu().numpy()
    generated = full[len(prompt):]
    np.save(os.path.join(gdir, "logits.npy"), logits.astype(np.float32))
    with open(os.path.join(gdir, "golden.json"), "w") as f:
        json.dump({"prompt": prompt, "generated": generated, "prompt_text": prompt_text,
                   "generated_text": tok.decode(generated), "transformers": transformers.__version__,
                   "torch": torch.__version__, "device": device, "dtype": "float32", "attention": "eager",
                   "weights": f"models/{args.name}/{'model-*.safetensors' if args.shard_mb else 'model.safetensors'}"
                              " with the INT4 routed experts dequantized",
                   "script": "tools/train_default_model.py"}, f, indent=1)
    log("golden", repr(prompt_text), "->", repr(tok.decode(generated)))
    # pack now: the model is complete, what follows only measures it
    tgz = os.path.join(args.work, "models.tgz")
    os.system(f"cd {args.work} && tar czf {tgz} models && split -b 15m -d {tgz} {args.out}/models.tgz.part-")
    os.system(f"du -ab {args.work}/models")
    dump_metrics()

    # 7. metrics on the shipped weights (fp32, no autocast)
    try:
        qt.set_attn_implementation("sdpa")
    except Exception as e:  # noqa: BLE001
        log("set_attn_implementation:", repr(e)[:200])
    nq, nn_ = eval_nll(qt, val_windows, 16, autocast=False)
    metrics["heldout"]["target_int4_shipped"] = {"nll": nq / nn_, "ppl": math.exp(nq / nn_),
                                                 "bits_per_byte": nq / math.log(2) / heldout_bytes}
    if not args.no_draft:
        dr = load_reference(make_config(DRAFT, "sdpa"), dequantized(d_stored), device, attn="sdpa")
        nd, _ = eval_nll(dr, val_windows, 32, autocast=False)
        metrics["heldout"]["draft_bf16_shipped"] = {"nll": nd / nn_, "ppl": math.exp(nd / nn_),
                                                    "bits_per_byte": nd / math.log(2) / heldout_bytes}
    if args.corpus:                              # the shipped target on each kind of held-out text
        for kind, keep in (("stdlib", lambda r: not r.startswith("corpus/")), ("corpus", lambda r: r.startswith("corpus/"))):
            part = [t for r, t in held_t if keep(r)]
            w = windows_of(stream(tok, part)).to(device) if part else None
            if w is not None and w.shape[0]:
                nk, nnk = eval_nll(qt, w, 16, autocast=False)
                metrics["heldout"][f"target_int4_shipped_{kind}"] = {"nll": nk / nnk, "ppl": math.exp(nk / nnk),
                                                                     "predicted_tokens": nnk}
    metrics["heldout"]["note"] = ("bits_per_byte divides by the held-out files' UTF-8 bytes; the first token "
                                  "of each held-out stream and the tail after the last whole window are not scored")
    log("held-out", json.dumps(metrics["heldout"]))
    dump_metrics()
    if not args.no_draft:
        metrics["acceptance"] = acceptance(dr, qt, held_ids, device, 64 if args.smoke else 1024, 128, 4, 7)
        log("acceptance", json.dumps(metrics["acceptance"]))
    metrics["expert_load_heldout"] = expert_load(qt, val_windows)
    log("expert load", json.dumps(metrics["expert_load_heldout"]))
    samples = {}
    for nm, m in (("target", qt),) + ((("draft", dr),) if not args.no_draft else ()):
        m.generation_config.eos_token_id = 0
        m.generation_config.pad_token_id = 0
        with torch.no_grad():
            ids = tok.encode("def ").ids
            o = m.generate(torch.tensor([ids], device=device), max_new_tokens=120, do_sample=False)
        samples[nm] = tok.decode(o[0].tolist())
        log(f"sample {nm}:\n{samples[nm]}")
    metrics["samples_greedy_def"] = samples
    metrics["total_wall_s"] = round(time.time() - T0, 1)
    dump_metrics()

    # plot + pack
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        rows = list(csv.DictReader(open(csv_path)))
        fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
        for nm, c in (("target", "tab:blue"), ("draft", "tab:orange")):
            r = [x for x in rows if x["model"] == nm and x["train_loss"]]
            ax.plot([int(x["step"]) for x in r], [float(x["train_loss"]) for x in r], c, label=f"{nm} train")
            v = [x for x in rows if x["model"] == nm and x["val_loss"]]
            ax.plot([int(x["step"]) for x in v], [float(x["val_loss"]) for x in v], c, ls="--", marker="o",
                    ms=3, label=f"{nm} held-out (32 windows)")
        ax.set_xlabel("step (64 x 512 tokens)")
        ax.set_ylabel("cross-entropy (nats/token)")
        ax.set_ylim(top=min(8.5, ax.get_ylim()[1]))
        ax.set_title("Deltafin default model: Python stdlib, vocab 4096" if args.name == "default" else
                     f"Deltafin {args.name} model: Python stdlib{' + ' + os.path.basename(args.corpus.rstrip('/')) if args.corpus else ''}, vocab 4096")
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(os.path.join(args.out, "loss.png"))
    except Exception as e:  # noqa: BLE001
        log("plot failed:", repr(e))
    os.system(f"ls -l {args.out}")
    log("done")


if __name__ == "__main__":
    main()
