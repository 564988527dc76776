#!/usr/bin/env python3
"""A synthetic Kimi K2-shaped checkpoint with random bf16 weights, for memory and storage
measurements (not for correctness: golden tests use tools/make_golden_k2.py).

Real tensor names and layout (one tensor per expert projection), sharded one layer per shard
with model.safetensors.index.json. Needs only numpy.

Usage: python3 tools/make_synthetic_k2.py OUT_DIR [--hidden 1024] [--moe-inter 512] [--layers 8]
                                                  [--experts 32] [--top-k 8] [--seed 0]
"""
import argparse
import os

import numpy as np

from safetensors_writer import bf16, write_json, write_shard


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--moe-inter", type=int, default=512)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--experts", type=int, default=32)
    ap.add_argument("--top-k", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    h, heads, q_lora, kv_lora, nope, rope, v = a.hidden, 16, 512, 256, 64, 32, 64
    inter = 2816
    cfg = {
        "architectures": ["DeepseekV3ForCausalLM"], "model_type": "kimi_k2", "vocab_size": a.vocab,
        "hidden_size": h, "intermediate_size": inter, "moe_intermediate_size": a.moe_inter,
        "num_hidden_layers": a.layers, "first_k_dense_replace": 1, "num_attention_heads": heads,
        "num_key_value_heads": heads, "q_lora_rank": q_lora, "kv_lora_rank": kv_lora,
        "qk_nope_head_dim": nope, "qk_rope_head_dim": rope, "v_head_dim": v,
        "n_routed_experts": a.experts, "num_experts_per_tok": a.top_k, "n_shared_experts": 1,
        "n_group": 1, "topk_group": 1, "norm_topk_prob": True, "routed_scaling_factor": 2.827,
        "scoring_func": "sigmoid", "topk_method": "noaux_tc", "hidden_act": "silu", "rms_norm_eps": 1e-6,
        "max_position_embeddings": 131072, "rope_theta": 50000.0, "tie_word_embeddings": False,
        "rope_scaling": {"type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096,
                         "beta_fast": 1.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0},
        "bos_token_id": 0, "eos_token_id": 1, "torch_dtype": "bfloat16",
    }
    os.makedirs(a.out, exist_ok=True)
    shards = a.layers + 1
    weight_map, total = {}, 0
    s = lambda n: 1.0 / np.sqrt(n)

    def emit(index, tensors):
        nonlocal total
        name = f"model-{index + 1:05d}-of-{shards:06d}.safetensors"
        write_shard(os.path.join(a.out, name), tensors)
        for t, (_, arr) in tensors.items():
            weight_map[t] = name
            total += arr.nbytes

    ones = lambda n: ("BF16", bf16(rng, (n,), 0.0) + np.uint16(0x3F80))
    emit(0, {"model.embed_tokens.weight": ("BF16", bf16(rng, (a.vocab, h), 1.0)),
             "lm_head.weight": ("BF16", bf16(rng, (a.vocab, h), s(h))),
             "model.norm.weight": ones(h)})
    for l in range(a.layers):
        p = f"model.layers.{l}."
        t = {p + "input_layernorm.weight": ones(h), p + "post_attention_layernorm.weight": ones(h),
             p + "self_attn.q_a_proj.weight": ("BF16", bf16(rng, (q_lora, h), s(h))),
             p + "self_attn.q_a_layernorm.weight": ones(q_lora),
             p + "self_attn.q_b_proj.weight": ("BF16", bf16(rng, (heads * (nope + rope), q_lora), s(q_lora))),
             p + "self_attn.kv_a_proj_with_mqa.weight": ("BF16", bf16(rng, (kv_lora + rope, h), s(h))),
             p + "self_attn.kv_a_layernorm.weight": ones(kv_lora),
             p + "self_attn.kv_b_proj.weight": ("BF16", bf16(rng, (heads * (nope + v), kv_lora), s(kv_lora))),
             p + "self_attn.o_proj.weight": ("BF16", bf16(rng, (h, heads * v), s(heads * v)))}
        if l == 0:
            for n, shape in (("gate_proj", (inter, h)), ("up_proj", (inter, h)), ("down_proj", (h, inter))):
                t[p + f"mlp.{n}.weight"] = ("BF16", bf16(rng, shape, s(shape[1])))
        else:
            t[p + "mlp.gate.weight"] = ("BF16", bf16(rng, (a.experts, h), s(h)))
            t[p + "mlp.gate.e_score_correction_bias"] = ("F32", rng.uniform(-0.05, 0.05, a.experts).astype(np.float32))
            for e in ["shared_experts"] + [f"experts.{i}" for i in range(a.experts)]:
                for n, shape in (("gate_proj", (a.moe_inter, h)), ("up_proj", (a.moe_inter, h)),
                                 ("down_proj", (h, a.moe_inter))):
                    t[p + f"mlp.{e}.{n}.weight"] = ("BF16", bf16(rng, shape, s(shape[1])))
        emit(l + 1, t)
    write_json(os.path.join(a.out, "model.safetensors.index.json"), {"metadata": {"total_size": total}, "weight_map": weight_map})
    write_json(os.path.join(a.out, "config.json"), cfg)
    print(f"{a.out}: {total / 1e9:.3f} GB")


if __name__ == "__main__":
    main()
