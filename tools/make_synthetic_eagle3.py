#!/usr/bin/env python3
"""A synthetic EAGLE-3 MLA head for a Kimi K3 checkpoint, with random weights, for memory and speed
measurements and greedy-identity runs (not for correctness against a reference: that is
tools/make_golden_eagle3.py's fixture).

The layout vLLM's Eagle3DeepseekV2ForCausalLM loads (docs/eagle3.md): config.json with the
DeepSeek-V3 MLA fields and eagle_config.eagle_aux_hidden_state_layer_ids, one model.safetensors of
BF16 tensors: fc.weight [hidden, 3 * hidden], midlayer.{input_layernorm, hidden_norm,
post_attention_layernorm}, midlayer.self_attn.{q_a_proj, q_a_layernorm, q_b_proj, kv_a_proj_with_mqa,
kv_a_layernorm, kv_b_proj, o_proj} (q_a_proj and kv_a_proj_with_mqa read 2 * hidden), midlayer.mlp
(SiLU gate/up/down), norm.weight and its own lm_head.weight [vocab, hidden]; no embed_tokens (the
target's is shared).

Presets (the published head's attention and MLP widths are not known here; these are assumptions):
  k3     K3's own MLA shapes: 96 heads of 128 + 64, q_lora 1536, kv_lora 512, v 128; MLP 18432
         (DeepSeek-V3's dense width); aux ids (2, L / 2, L - 3)
  small  MLA scaled from the target's hidden size, MLP 2 x hidden

Usage: python3 tools/make_synthetic_eagle3.py TARGET_DIR OUT_DIR [--preset k3|small] [--seed S]
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_writer import Lazy, bf16, bf16_bits, write_json, write_shard  # noqa: E402


def shapes(preset, h):
    if preset == "k3":
        return dict(heads=96, nope=128, rope=64, v=128, q_lora=1536, kv_lora=512, inter=18432)
    return dict(heads=max(2, h // 64), nope=32, rope=16, v=32, q_lora=max(16, h // 4), kv_lora=max(16, h // 8),
                inter=2 * h)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("target")
    ap.add_argument("out")
    ap.add_argument("--preset", choices=["k3", "small"], default="small")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    outer = json.load(open(os.path.join(a.target, "config.json")))
    target = outer.get("text_config", outer)
    h, vocab, layers = target["hidden_size"], target["vocab_size"], target["num_hidden_layers"]
    d = shapes(a.preset, h)
    ids = [2, layers // 2, layers - 3]
    rng = np.random.default_rng(a.seed)

    def linear(rows, cols):
        return ("BF16", Lazy((rows, cols), lambda: bf16(rng, (rows, cols), 1.0 / np.sqrt(cols))))

    def ones(n):  # norm weights 1 + 0.1 N
        return ("BF16", Lazy((n,), lambda: bf16_bits(1.0 + 0.1 * rng.standard_normal(n, dtype=np.float32))))

    qk = d["nope"] + d["rope"]
    p = "midlayer."
    t = {"fc.weight": linear(h, 3 * h), "norm.weight": ones(h), "lm_head.weight": linear(vocab, h),
         p + "input_layernorm.weight": ones(h), p + "hidden_norm.weight": ones(h),
         p + "post_attention_layernorm.weight": ones(h),
         p + "self_attn.q_a_proj.weight": linear(d["q_lora"], 2 * h),
         p + "self_attn.q_a_layernorm.weight": ones(d["q_lora"]),
         p + "self_attn.q_b_proj.weight": linear(d["heads"] * qk, d["q_lora"]),
         p + "self_attn.kv_a_proj_with_mqa.weight": linear(d["kv_lora"] + d["rope"], 2 * h),
         p + "self_attn.kv_a_layernorm.weight": ones(d["kv_lora"]),
         p + "self_attn.kv_b_proj.weight": linear(d["heads"] * (d["nope"] + d["v"]), d["kv_lora"]),
         p + "self_attn.o_proj.weight": linear(h, d["heads"] * d["v"]),
         p + "mlp.gate_proj.weight": linear(d["inter"], h), p + "mlp.up_proj.weight": linear(d["inter"], h),
         p + "mlp.down_proj.weight": linear(h, d["inter"])}
    os.makedirs(a.out, exist_ok=True)
    written = write_shard(os.path.join(a.out, "model.safetensors"), t)
    config = {
        "architectures": ["Eagle3DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": h,
        "intermediate_size": d["inter"], "num_hidden_layers": 1, "num_attention_heads": d["heads"],
        "num_key_value_heads": d["heads"], "q_lora_rank": d["q_lora"], "kv_lora_rank": d["kv_lora"],
        "qk_nope_head_dim": d["nope"], "qk_rope_head_dim": d["rope"], "v_head_dim": d["v"], "hidden_act": "silu",
        "vocab_size": vocab, "draft_vocab_size": vocab, "rms_norm_eps": 1e-5, "max_position_embeddings": 1048576,
        "rope_theta": 50000.0,
        "rope_scaling": {"type": "yarn", "factor": 32.0, "original_max_position_embeddings": 32768, "beta_fast": 32,
                         "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0},
        "target_hidden_size": h, "eagle_config": {"eagle_aux_hidden_state_layer_ids": ids, "use_aux_hidden_state": True},
        "norm_before_residual": False, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    }
    write_json(os.path.join(a.out, "config.json"), config)
    print(f"{a.out}: EAGLE-3 head on the stream entering target layers {ids}, {written / 1e9:.3f} GB")


if __name__ == "__main__":
    main()
