#!/usr/bin/env python3
"""A synthetic DSpark drafter for a Kimi K3 checkpoint, with random weights, for memory and speed
measurements and for greedy-identity tests (not for correctness against a reference: that is
tools/make_golden_dspark.py's fixture).

The published layout (Inferact/Kimi-K3-DSpark, vLLM's K3DSparkModel; docs/dspark.md): config.json
with model_type k3_dspark, and one model.safetensors of BF16 tensors without a prefix:
context_proj [hidden, layers_captured * target_hidden], context_norm, final_norm,
markov_head.markov_w1 / markov_w2 [vocab, rank], confidence_head.proj weight [1, hidden + rank] and
bias [1] (F32), and per draft layer i `layers.{i}.` input/post-attention norms, the MLA's
q_a_proj, q_a_layernorm, q_b_proj, kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj and a
SiLU MLP (gate/up/down). No embedding or lm_head: the drafter uses the target's.

The shapes come from the target's config.json (hidden size, vocabulary, layers) and a preset:
  k3     the published drafter's shapes: 5 layers, 64 heads of 128 + 64, q_lora 1536, kv_lora 512,
         MLP 14336, Markov rank 256, target layers [2, 23, 47, 71, 89] (each id taken modulo the
         target's layer count, so a 5-layer K3-shaped target keeps the 5 x 7168 context width)
  small  2 layers, MLA scaled from the target's hidden size, target layers spread over the target

Usage: python3 tools/make_synthetic_dspark.py TARGET_DIR OUT_DIR [--preset k3|small] [--seed S]
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_writer import Lazy, bf16, bf16_bits, write_json, write_shard  # noqa: E402

K3_IDS = [2, 23, 47, 71, 89]


def shapes(preset, target):
    h = target["hidden_size"]
    layers = target["num_hidden_layers"]
    if preset == "k3":
        d = dict(layers=5, heads=64, nope=128, rope=64, v=128, q_lora=1536, kv_lora=512, inter=14336, rank=256)
        ids = [i % layers for i in K3_IDS]
    else:
        heads = max(2, h // 64)
        d = dict(layers=2, heads=heads, nope=32, rope=16, v=32, q_lora=max(16, h // 4), kv_lora=max(16, h // 8),
                 inter=2 * h, rank=32)
        ids = sorted({(layers - 1) * j // 2 for j in range(3)})
    return d, ids


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("target")
    ap.add_argument("out")
    ap.add_argument("--preset", choices=["k3", "small"], default="small")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    outer = json.load(open(os.path.join(a.target, "config.json")))
    target = outer.get("text_config", outer)
    d, ids = shapes(a.preset, target)
    h, vocab = target["hidden_size"], target["vocab_size"]
    rng = np.random.default_rng(a.seed)

    def linear(rows, cols):
        return ("BF16", Lazy((rows, cols), lambda: bf16(rng, (rows, cols), 1.0 / np.sqrt(cols))))

    def ones(n):  # norm weights 1 + 0.1 N
        return ("BF16", Lazy((n,), lambda: bf16_bits(1.0 + 0.1 * rng.standard_normal(n, dtype=np.float32))))

    qk = d["nope"] + d["rope"]
    t = {"context_proj.weight": linear(h, h * len(ids)), "context_norm.weight": ones(h), "final_norm.weight": ones(h),
         "markov_head.markov_w1.weight": linear(vocab, d["rank"]), "markov_head.markov_w2.weight": linear(vocab, d["rank"]),
         "confidence_head.proj.weight": ("F32", (rng.standard_normal((1, h + d["rank"])) / np.sqrt(h)).astype(np.float32)),
         "confidence_head.proj.bias": ("F32", np.array([0.3], dtype=np.float32))}
    for i in range(d["layers"]):
        p = f"layers.{i}."
        t[p + "input_layernorm.weight"] = ones(h)
        t[p + "post_attention_layernorm.weight"] = ones(h)
        t[p + "self_attn.q_a_proj.weight"] = linear(d["q_lora"], h)
        t[p + "self_attn.q_a_layernorm.weight"] = ones(d["q_lora"])
        t[p + "self_attn.q_b_proj.weight"] = linear(d["heads"] * qk, d["q_lora"])
        t[p + "self_attn.kv_a_proj_with_mqa.weight"] = linear(d["kv_lora"] + d["rope"], h)
        t[p + "self_attn.kv_a_layernorm.weight"] = ones(d["kv_lora"])
        t[p + "self_attn.kv_b_proj.weight"] = linear(d["heads"] * (d["nope"] + d["v"]), d["kv_lora"])
        t[p + "self_attn.o_proj.weight"] = linear(h, d["heads"] * d["v"])
        t[p + "mlp.gate_proj.weight"] = linear(d["inter"], h)
        t[p + "mlp.up_proj.weight"] = linear(d["inter"], h)
        t[p + "mlp.down_proj.weight"] = linear(h, d["inter"])
    os.makedirs(a.out, exist_ok=True)
    written = write_shard(os.path.join(a.out, "model.safetensors"), t)
    config = {
        "architectures": ["K3DSparkModel"], "model_type": "k3_dspark", "hidden_size": h,
        "intermediate_size": d["inter"], "num_hidden_layers": d["layers"], "num_attention_heads": d["heads"],
        "num_key_value_heads": d["heads"], "q_lora_rank": d["q_lora"], "kv_lora_rank": d["kv_lora"],
        "qk_nope_head_dim": d["nope"], "qk_rope_head_dim": d["rope"], "v_head_dim": d["v"],
        "mla_use_nope": False, "mla_use_output_gate": False, "vocab_size": vocab, "draft_vocab_size": vocab,
        "rms_norm_eps": 1e-5, "max_position_embeddings": 1048576, "rope_theta": 50000.0,
        "num_target_layers": len(ids), "target_hidden_size": h,
        "target_num_hidden_layers": target["num_hidden_layers"], "target_layer_ids": ids,
        "mask_token_id": vocab - 3, "markov_rank": d["rank"], "markov_head_type": "vanilla",
        "enable_confidence_head": True, "confidence_head_with_markov": True, "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "rope_parameters": {"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 32768,
                            "rope_theta": 50000.0, "beta_fast": 32, "beta_slow": 1, "mscale": 1.0,
                            "mscale_all_dim": 1.0},
    }
    write_json(os.path.join(a.out, "config.json"), config)
    print(f"{a.out}: {d['layers']} DSpark layers for target layers {ids}, {written / 1e9:.3f} GB")


if __name__ == "__main__":
    main()
