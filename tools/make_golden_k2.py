#!/usr/bin/env python3
"""Golden references for the Kimi K2 family (DeepSeek-V3 architecture) from HF transformers.

Runs where torch + transformers are installed (the GPU machine; CPU works too, only slower).
For each tiny config it:
  1. builds a random DeepseekV3ForCausalLM (fp32, eager attention) with randomised norms and
     e_score_correction_bias so that biased selection differs from unbiased weights;
  2. writes the checkpoint in the *real* on-disk layout (one tensor per expert projection,
     `model.layers.N.mlp.experts.E.gate_proj.weight`, ...), optionally sharded with
     `model.safetensors.index.json`, optionally DeepSeek block-fp8 (e4m3 + weight_scale_inv per
     128x128 block), or with the routed experts as compressed-tensors pack-quantized INT4
     (symmetric, group 32: `weight_packed` I32, `weight_scale` BF16, `weight_shape` I32, as in
     Kimi-K2-Thinking / K2.5);
  3. loads those files back through transformers' own `from_pretrained` (for fp8 and int4: a
     dequantized copy) and records float32 logits for every position, per-layer hidden states, and a 24-token
     greedy continuation from `generate`.

Outputs (per fixture dir): config.json, *.safetensors [+ index], golden.json
({prompt, generated, transformers}), logits.npy [T, vocab] f32, hidden.npy [L+1, T, hidden] f32.

Usage: python3 tools/make_golden_k2.py OUT_DIR
"""
import json
import math
import os
import re
import shutil
import sys
import tempfile

import numpy as np
import torch
import transformers
from safetensors.torch import save_file
from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

PROMPT_LEN = 8
GEN_LEN = 24


def make_config(spec):
    rope = dict(spec["rope"])
    common = {k: v for k, v in spec.items() if k not in ("name", "rope", "store", "init", "fp8", "int4",
                                                          "shards", "engine_config", "seed")}
    try:
        cfg = DeepseekV3Config(rope_parameters=dict(rope), **common)
    except TypeError:
        theta = rope.pop("rope_theta")
        cfg = DeepseekV3Config(rope_scaling=rope, rope_theta=theta, **common)
    cfg._attn_implementation = "eager"
    return cfg


def randomise(model, spec, gen):
    sd = model.state_dict()
    with torch.no_grad():
        for name, t in sd.items():
            if name.endswith("e_score_correction_bias"):
                t.copy_((torch.rand(t.shape, generator=gen) - 0.5) * 0.2)
            elif "norm" in name and t.dim() == 1:
                t.copy_(1.0 + 0.2 * torch.randn(t.shape, generator=gen))
            elif t.dim() >= 2:
                t.copy_(torch.randn(t.shape, generator=gen) * spec["init"])


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


def is_quantizable(name, t):
    """Which tensors DeepSeek/Kimi store in block fp8: every Linear except router, embed, lm_head."""
    return (t.dim() == 2 and name.endswith(".weight") and ".mlp.gate." not in name
            and "embed_tokens" not in name and not name.startswith("lm_head"))


def fp8_quantize(w):
    """w [N, K] fp32 -> (q [N, K] float8_e4m3fn, scale_inv [ceil(N/128), ceil(K/128)] fp32)."""
    n, k = w.shape
    bn, bk = math.ceil(n / 128), math.ceil(k / 128)
    padded = torch.zeros(bn * 128, bk * 128, dtype=torch.float32)
    padded[:n, :k] = w
    blocks = padded.view(bn, 128, bk, 128)
    amax = blocks.abs().amax(dim=(1, 3)).clamp(min=1e-12)
    scale = amax / 448.0
    q = (blocks / scale[:, None, :, None]).clamp(-448, 448).to(torch.float8_e4m3fn)
    q = q.view(bn * 128, bk * 128)[:n, :k].contiguous()
    return q, scale.contiguous()


def fp8_dequantize(q, scale):
    n, k = q.shape
    s = scale.repeat_interleave(128, 0)[:n].repeat_interleave(128, 1)[:, :k]
    return q.to(torch.float32) * s


INT4_GROUP = 32
ROUTED_EXPERT_PROJ = re.compile(r"\.mlp\.experts\.\d+\.(gate|up|down)_proj\.weight$")


def int4_quantize(w):
    """w [N, K] fp32 -> compressed-tensors pack-quantized INT4, symmetric, group 32 along K:
    (packed I32 [N, ceil(K/8)], scale BF16 [N, ceil(K/32)], shape I32 [2]).
    scale = amax / 7 rounded to bf16, q = clamp(round(w / scale), -8, 7) stored as u = q + 8,
    element j of a row in word j/8 at bits 4*(j%8) (element 0 lowest), rows padded with u = 0."""
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
    shape = torch.tensor([n, k], dtype=torch.int32)
    assert torch.equal(int4_unpack(packed, k), q), "int4 packing does not round-trip"
    return packed.contiguous(), scale.contiguous(), shape


def int4_unpack(packed, k):
    """packed I32 [N, ceil(K/8)] -> q int64 [N, K] in [-8, 7]."""
    words = packed.to(torch.int64) & 0xFFFFFFFF
    shifts = torch.arange(8, dtype=torch.int64) * 4
    u = ((words.unsqueeze(2) >> shifts) & 0xF).reshape(packed.shape[0], -1)[:, :k]
    return u - 8


def int4_dequantize(packed, scale, shape):
    n, k = (int(v) for v in shape.tolist())
    s = scale.to(torch.float32).repeat_interleave(INT4_GROUP, dim=1)[:, :k]
    return int4_unpack(packed, k).to(torch.float32) * s


def store(tensors, spec):
    """Apply the fixture's storage dtypes; returns the tensors as written to disk."""
    out = {}
    for name, t in tensors.items():
        if name.endswith("e_score_correction_bias"):
            out[name] = t.to(torch.float32)
            continue
        dtype = spec["store"]["experts"] if ".mlp.experts." in name else spec["store"]["default"]
        if spec.get("int4") and ROUTED_EXPERT_PROJ.search(name):
            base = name[: -len(".weight")]
            packed, scale, shape = int4_quantize(t.to(dtype).to(torch.float32))
            out[base + ".weight_packed"] = packed
            out[base + ".weight_scale"] = scale
            out[base + ".weight_shape"] = shape
        elif spec.get("fp8") and is_quantizable(name, t):
            q, s = fp8_quantize(t.to(dtype).to(torch.float32))
            out[name] = q
            out[name + "_scale_inv"] = s
        else:
            out[name] = t.to(dtype)
    return out


def dequantized(stored):
    out = {}
    for name, t in stored.items():
        if name.endswith(("_scale_inv", ".weight_scale", ".weight_shape")):
            continue
        if name.endswith(".weight_packed"):
            base = name[: -len("_packed")]
            out[base] = int4_dequantize(t, stored[base + "_scale"], stored[base + "_shape"])
        elif t.dtype == torch.float8_e4m3fn:
            out[name] = fp8_dequantize(t, stored[name + "_scale_inv"])
        else:
            out[name] = t.to(torch.float32)
    return out


def write_checkpoint(tensors, directory, shards):
    names = sorted(tensors)
    if shards == 1:
        save_file(tensors, os.path.join(directory, "model.safetensors"), metadata={"format": "pt"})
        return
    per = math.ceil(len(names) / shards)
    weight_map, total = {}, 0
    for i in range(shards):
        fname = f"model-{i + 1:05d}-of-{shards:06d}.safetensors"   # Kimi's 6-digit total
        part = {n: tensors[n] for n in names[i * per:(i + 1) * per]}
        save_file(part, os.path.join(directory, fname), metadata={"format": "pt"})
        for n, t in part.items():
            weight_map[n] = fname
            total += t.numel() * t.element_size()
    with open(os.path.join(directory, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=1)


def reference(cfg, tensors, device, prompt):
    """Load `tensors` through transformers' from_pretrained (real layout, fp32) and run it."""
    with tempfile.TemporaryDirectory() as tmp:
        cfg.save_pretrained(tmp)
        save_file({n: t.contiguous() for n, t in tensors.items()},
                  os.path.join(tmp, "model.safetensors"), metadata={"format": "pt"})
        model = DeepseekV3ForCausalLM.from_pretrained(tmp, dtype=torch.float32,
                                                      attn_implementation="eager").to(device).eval()
    sd = model.state_dict()
    missing = [n for n in real_layout(sd) if n not in tensors]
    assert not missing, f"reload lost tensors: {missing[:5]}"
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    ids = torch.tensor([prompt], device=device)
    with torch.no_grad():
        gen = model.generate(ids, max_new_tokens=GEN_LEN, do_sample=False)
        full = gen[0].tolist()
        out = model(torch.tensor([full], device=device), output_hidden_states=True)
    logits = out.logits[0].float().cpu().numpy()
    hidden = torch.stack([h[0] for h in out.hidden_states]).float().cpu().numpy()
    return full[len(prompt):], logits, hidden, model


def engine_config(cfg_dict, spec):
    """The config.json as the engine should see it (spelling variants real checkpoints use)."""
    d = dict(cfg_dict)
    style = spec["engine_config"]
    rope = d.pop("rope_parameters", None) or dict(d.pop("rope_scaling", {}) or {}, rope_theta=d.get("rope_theta"))
    if style in ("v4_kimi", "v4_kimi_fp8"):
        d["model_type"] = "kimi_k2"
        d["rope_theta"] = rope.pop("rope_theta")
        rope["type"] = rope.pop("rope_type", "yarn")
        d["rope_scaling"] = rope
    else:
        d["rope_parameters"] = rope
        d.pop("rope_theta", None)
        d.pop("rope_scaling", None)
    if spec.get("fp8"):
        d["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3",
                                    "quant_method": "fp8", "weight_block_size": [128, 128]}
    if spec.get("int4"):  # Kimi-K2-Thinking's (model-spec-k2.md section 4.2)
        d["quantization_config"] = {
            "quant_method": "compressed-tensors", "format": "pack-quantized",
            "quantization_status": "compressed",
            "config_groups": {"group_0": {
                "targets": ["Linear"], "input_activations": None, "output_activations": None,
                "weights": {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group",
                            "group_size": INT4_GROUP, "dynamic": False, "actorder": None,
                            "observer": "minmax", "observer_kwargs": {}}}},
            "ignore": ["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*",
                       "re:.*mlp\\.(gate|up|gate_up|down)_proj.*"],
            "kv_cache_scheme": None,
        }
    d["torch_dtype"] = "bfloat16"
    d["architectures"] = ["DeepseekV3ForCausalLM"]
    return d


K2_LIKE = dict(
    name="k2_tiny", seed=1, init=0.08, shards=2, engine_config="v4_kimi",
    store={"default": torch.bfloat16, "experts": torch.bfloat16},
    vocab_size=320, hidden_size=128, intermediate_size=256, moe_intermediate_size=16,
    num_hidden_layers=3, first_k_dense_replace=1, num_attention_heads=4, num_key_value_heads=4,
    q_lora_rank=64, kv_lora_rank=48, qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32,
    n_routed_experts=32, num_experts_per_tok=8, n_shared_experts=1, n_group=1, topk_group=1,
    norm_topk_prob=True, routed_scaling_factor=2.827, hidden_act="silu", rms_norm_eps=1e-6,
    max_position_embeddings=32 * 16, tie_word_embeddings=False, attention_bias=False,
    rope_interleave=True, bos_token_id=0, eos_token_id=1,
    rope={"rope_type": "yarn", "rope_theta": 50000.0, "factor": 32.0,
          "original_max_position_embeddings": 16, "beta_fast": 1.0, "beta_slow": 1.0,
          "mscale": 1.0, "mscale_all_dim": 1.0},
)

DSV3_LIKE = dict(
    name="dsv3_tiny", seed=2, init=0.1, shards=1, engine_config="v5",
    store={"default": torch.float32, "experts": torch.float16},
    vocab_size=288, hidden_size=64, intermediate_size=128, moe_intermediate_size=16,
    num_hidden_layers=4, first_k_dense_replace=2, num_attention_heads=4, num_key_value_heads=4,
    q_lora_rank=None, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=16, v_head_dim=16,
    n_routed_experts=64, num_experts_per_tok=16, n_shared_experts=1, n_group=8, topk_group=4,
    norm_topk_prob=True, routed_scaling_factor=2.5, hidden_act="silu", rms_norm_eps=1e-6,
    max_position_embeddings=40 * 256, tie_word_embeddings=False, attention_bias=False,
    rope_interleave=True, bos_token_id=0, eos_token_id=1,
    rope={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0,
          "original_max_position_embeddings": 256, "beta_fast": 32.0, "beta_slow": 1.0,
          "mscale": 1.0, "mscale_all_dim": 1.0},
)

K2_FP8 = dict(K2_LIKE, name="k2_tiny_fp8", shards=3, engine_config="v4_kimi_fp8", fp8=True)

# The K2-like model with its routed experts (only mlp.experts.E.*) in INT4, as Kimi-K2-Thinking.
# Last in main(), so the fixtures before it are made exactly as before.
K2_INT4 = dict(K2_LIKE, name="k2_tiny_int4", shards=2, engine_config="v4_kimi", int4=True)


def build(spec, out_root, device):
    torch.manual_seed(spec["seed"])
    gen = torch.Generator().manual_seed(spec["seed"])
    cfg = make_config(spec)
    model = DeepseekV3ForCausalLM(cfg).float().eval()
    randomise(model, spec, gen)
    stored = store(real_layout(model.state_dict()), spec)
    fixture = os.path.join(out_root, spec["name"])
    shutil.rmtree(fixture, ignore_errors=True)
    os.makedirs(fixture)
    write_checkpoint(stored, fixture, spec["shards"])
    prompt = torch.randint(2, spec["vocab_size"], (PROMPT_LEN,), generator=gen).tolist()
    generated, logits, hidden, ref_model = reference(cfg, dequantized(stored), device, prompt)
    # The reload must reproduce the in-memory model's own weights (checks the expert split).
    reloaded = real_layout(ref_model.state_dict())
    for n, t in dequantized(stored).items():
        assert torch.equal(reloaded[n].cpu().float(), t.float()), f"reload mismatch on {n}"
    with open(os.path.join(fixture, "config.json"), "w") as f:
        json.dump(engine_config(cfg.to_dict(), spec), f, indent=1, sort_keys=True)
    np.save(os.path.join(fixture, "logits.npy"), logits.astype(np.float32))
    np.save(os.path.join(fixture, "hidden.npy"), hidden.astype(np.float32))
    with open(os.path.join(fixture, "golden.json"), "w") as f:
        json.dump({"prompt": prompt, "generated": generated,
                   "transformers": transformers.__version__, "torch": torch.__version__,
                   "device": device, "script": "tools/make_golden_k2.py"}, f, indent=1)
    print(spec["name"], "prompt", prompt, "generated", generated,
          "max|logit|", float(np.abs(logits).max()))


def main():
    out_root = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures"
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    print("transformers", transformers.__version__, "torch", torch.__version__, device)
    for spec in (K2_LIKE, DSV3_LIKE, K2_FP8, K2_INT4):
        build(spec, out_root, device)


if __name__ == "__main__":
    main()
