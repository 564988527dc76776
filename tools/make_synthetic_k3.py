#!/usr/bin/env python3
"""A synthetic Kimi K3-shaped checkpoint with random weights, for storage and memory measurements
and for tests (not for correctness: golden tests use tools/make_golden_k3.py).

Real K3 tensor names under the `language_model.` prefix, the release config.json layout
(KimiK3ForConditionalGeneration with the text model in `text_config`) and every K3 feature the
engine runs: layer 0 dense, the rest MoE; KDA layers with full MLA every 4th layer and the last
(`linear_attn_config`, 1-based); Block Attention Residuals; latent MoE with `routed_expert_norm`,
2 fused shared experts, sigmoid router with `e_score_correction_bias` (0.02 N: small, so expert
use stays near uniform, as under a trained load-balanced router); SiTU. Routed experts are
MXFP4 as the release stores them (compressed-tensors `mxfp4-pack-quantized`):
`experts.E.w{1,3,2}.weight_packed` U8 [rows, cols/2] + `weight_scale` U8 E8M0 [rows, cols/32], random
E2M1 nibbles with scales drawn so each weight is ~N(0, 1/fan_in); the spine is BF16 (F32 for the
KDA A_log, dt_bias, conv taps, o_norm and the router bias, as in the release). Tensors are laid out as
safetensors' writer orders them (F32, BF16, U8, each by name), so an expert's six tensors are back to
back and experts are in name order (0, 1, 10, 100, ...), as in the real shards. One shard per layer
plus one for the embedding and head, model.safetensors.index.json and config.json last; every file
is written under a temporary name and renamed. Deterministic for a given seed. Needs only numpy.

Presets (dims derived from --hidden: latent = hidden/2, heads = hidden/head_dim, q_lora = hidden/4,
kv_lora = hidden/8, dense width = 2*hidden):
  bench  hidden 2048, 9 layers (8 MoE), 256 experts top-16, expert width 768 x latent 1024:
         1,253,376 B a routed expert, 2.57 GB of routed experts, 0.75 GB spine, vocab 16384;
         ~20 s to write on 2 cores
  small  hidden 256, 5 layers (4 MoE), 32 experts top-8, expert width 128 x latent 128:
         26,112 B a routed expert, 3.3 MB of routed experts, 10 MB in all, vocab 1024
  k3     K3's real per-layer shapes (hidden 7168; 96 heads of 128 for KDA and MLA, q_lora 1536,
         kv_lora 512, rope 64; dense width 33792; expert width 3072 x latent 3584, 17,547,264 B a
         routed expert; 2 shared experts) with 5 layers (4 MoE; MLA at 1-based 4 and 5), 128
         experts top-16 and vocab 32768 (the real one is 163840): 9.0 GB of routed experts,
         ~16 GB in all (the CUDA benchmark's model, scripts/gpu-test.sh)

Usage: python3 tools/make_synthetic_k3.py OUT_DIR [--preset bench|small] [--layers N] [--hidden H]
           [--experts E] [--top-k K] [--moe-inter I] [--vocab V] [--seed S] [--force]
       python3 tools/make_synthetic_k3.py --list-tensors [--preset ...]: the checkpoint's tensors
           as JSON lines {"name", "dtype", "shape", "nbytes"}, writing nothing (k3-public-bench/
           bench_space.py sizes the benchmark's drives from them)
"""
import argparse
import glob
import json
import os
import sys
import time

import numpy as np

from safetensors_writer import ITEMSIZE, Lazy, bf16, bf16_bits, nbytes, write_json, write_shard

PRESETS = {
    "bench": dict(layers=9, hidden=2048, head_dim=128, experts=256, top_k=16, moe_inter=768, vocab=16384),
    "small": dict(layers=5, hidden=256, head_dim=32, experts=32, top_k=8, moe_inter=128, vocab=1024),
    "k3": dict(layers=5, hidden=7168, head_dim=128, experts=128, top_k=16, moe_inter=3072, vocab=32768,
               exact=dict(heads=96, q_lora=1536, kv_lora=512, inter=33792)),
}
E2M1_MEAN_SQUARE = (0 + 0.25 + 1 + 2.25 + 4 + 9 + 16 + 36) / 8  # uniform random codes, either sign
QUANT = {
    "config_groups": {"group_0": {
        "format": "mxfp4-pack-quantized", "input_activations": None, "output_activations": None,
        "targets": ["re:.*block_sparse_moe\\.experts\\.\\d+\\.w[123]$"],
        "weights": {"actorder": None, "dynamic": False, "group_size": 32, "num_bits": 4, "observer": None,
                    "scale_dtype": "torch.uint8", "strategy": "group", "symmetric": True, "type": "float",
                    "zp_dtype": None}}},
    "format": "mxfp4-pack-quantized", "ignore": ["lm_head", "re:.*vision_tower.*", "re:.*mm_projector.*"],
    "kv_cache_scheme": None, "quant_method": "compressed-tensors", "quantization_status": "compressed",
}


def dims(a):
    h, hd = a.hidden, a.head_dim
    d = dict(h=h, hd=hd, heads=max(1, h // hd), latent=h // 2, q_lora=h // 4, kv_lora=h // 8, nope=hd,
             rope=hd // 2, v=hd, inter=2 * h, shared=2)
    d.update(getattr(a, "exact", None) or {})  # a preset's real shapes where they differ from the rule
    for name, value in (("routed_expert_hidden_size (hidden/2)", d["latent"]), ("--moe-inter", a.moe_inter)):
        if value <= 0 or value % 32:
            sys.exit(f"error: {name} = {value} must be a positive multiple of 32 (MXFP4 groups of 32)")
    if not 1 <= a.top_k <= a.experts or a.layers < 1 or a.vocab < 8 or d["kv_lora"] < 1:
        sys.exit("error: need 1 <= --top-k <= --experts, --layers >= 1, --vocab >= 8, --hidden >= 8")
    return d


def config(a, d, full_attn, kda):
    text = {
        "activation_situ_beta": 4.0, "activation_situ_linear_beta": 25.0, "architectures": ["KimiLinearForCausalLM"],
        "attn_res_block_size": 3, "bos_token_id": 1, "eos_token_id": 2, "first_k_dense_replace": 1,
        "hidden_act": "situ", "hidden_size": d["h"], "initializer_range": 0.02, "intermediate_size": d["inter"],
        "kv_lora_rank": d["kv_lora"], "latent_moe_use_norm": True,
        "linear_attn_config": {"full_attn_layers": full_attn, "gate_lower_bound": -5.0, "head_dim": d["hd"],
                               "kda_layers": kda, "num_heads": d["heads"], "short_conv_kernel_size": 4,
                               "use_full_rank_gate": True},
        "max_position_embeddings": 1048576, "mla_use_nope": True, "mla_use_output_gate": True,
        "model_type": "kimi_linear", "moe_intermediate_size": a.moe_inter, "moe_layer_freq": 1,
        "moe_renormalize": True, "moe_router_activation_func": "sigmoid", "num_attention_heads": d["heads"],
        "num_expert_group": 1, "num_experts": a.experts, "num_experts_per_token": a.top_k,
        "num_hidden_layers": a.layers, "num_key_value_heads": d["heads"], "num_nextn_predict_layers": 0,
        "num_shared_experts": d["shared"], "pad_token_id": 0, "q_lora_rank": d["q_lora"],
        "qk_nope_head_dim": d["nope"], "qk_rope_head_dim": d["rope"], "quantization_config": QUANT,
        "rms_norm_eps": 1e-05, "routed_expert_hidden_size": d["latent"], "routed_scaling_factor": 1.0,
        "tie_word_embeddings": False, "topk_group": 1, "topk_method": "noaux_tc", "torch_dtype": "bfloat16",
        "use_cache": True, "use_grouped_topk": True, "v_head_dim": d["v"], "vocab_size": a.vocab,
    }
    return {"architectures": ["KimiK3ForConditionalGeneration"], "ignore_index": -100,
            "media_placeholder_token_id": a.vocab - 1, "model_type": "kimi_k3",
            "pad_token_id": 0, "quantization_config": QUANT, "text_config": text, "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
            "vision_config": {"merge_kernel_size": [2, 2], "mm_projector_type": "patchmergerv2", "patch_size": 14,
                              "text_hidden_size": d["h"], "vt_hidden_size": 1024, "vt_num_attention_heads": 16,
                              "vt_num_hidden_layers": 27}}


class Maker:
    """Lazy random tensors drawn from one generator, in the order they are written."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)

    def linear(self, rows, cols, scale=None):  # BF16 [out, in] ~ N(0, 1/in)
        return "BF16", Lazy((rows, cols), lambda: bf16(self.rng, (rows, cols), scale or 1 / np.sqrt(cols)))

    def norm(self, n, dtype="BF16"):  # ~1 + 0.1 N
        def make():
            x = 1 + 0.1 * self.rng.standard_normal(n, dtype=np.float32)
            return bf16_bits(x) if dtype == "BF16" else x
        return dtype, Lazy((n,), make)

    def f32(self, shape, make):
        return "F32", Lazy(shape, lambda: make(self.rng).astype(np.float32).reshape(shape))

    def mxfp4(self, rows, cols):
        """(packed, scale): random E2M1 nibbles; per group of 32 an E8M0 exponent e or e+1, with the
        odds set so the mean square weight is 1/cols."""
        target = 1.0 / (cols * E2M1_MEAN_SQUARE)  # wanted mean of scale^2
        e = int(np.floor(np.log2(target) / 2))
        p_up = (target / 4.0 ** e - 1) / 3  # P(e+1): p 4^(e+1) + (1 - p) 4^e = target
        if not 0 < e + 127 < 254:
            sys.exit(f"error: E8M0 exponent {e} out of range")
        packed = Lazy((rows, cols // 2), lambda: self.rng.bit_generator.random_raw(-(-rows * cols // 16))
                      .astype("<u8").view(np.uint8)[: rows * cols // 2].reshape(rows, cols // 2))
        scale = Lazy((rows, cols // 32), lambda: (e + 127 + (self.rng.random((rows, cols // 32)) < p_up))
                     .astype(np.uint8))
        return ("U8", packed), ("U8", scale)


def layer_tensors(m, a, d, l, mla):
    h, heads, hd, ch = d["h"], d["heads"], d["hd"], d["heads"] * d["hd"]
    p = f"language_model.model.layers.{l}."
    t = {p + "input_layernorm.weight": m.norm(h), p + "post_attention_layernorm.weight": m.norm(h)}
    for site in ("self_attention_res", "mlp_res"):
        t[p + site + "_norm.weight"] = m.norm(h)
        t[p + site + "_proj.weight"] = m.linear(1, h, 1.5 / np.sqrt(h))
    s = p + "self_attn."
    if mla:
        qk, rank_kv = d["nope"] + d["rope"], d["kv_lora"]
        t.update({s + "q_a_proj.weight": m.linear(d["q_lora"], h), s + "q_a_layernorm.weight": m.norm(d["q_lora"]),
                  s + "q_b_proj.weight": m.linear(heads * qk, d["q_lora"]),
                  s + "kv_a_proj_with_mqa.weight": m.linear(rank_kv + d["rope"], h),
                  s + "kv_a_layernorm.weight": m.norm(rank_kv),
                  s + "kv_b_proj.weight": m.linear(heads * (d["nope"] + d["v"]), rank_kv),
                  s + "g_proj.weight": m.linear(heads * d["v"], h), s + "o_proj.weight": m.linear(h, heads * d["v"])})
    else:
        padded = -(-heads // 128) * 128  # A_log is zero-padded to a multiple of 128 in the release
        t.update({s + n + "_proj.weight": m.linear(ch, h) for n in ("q", "k", "v", "g")})
        t.update({s + n + "_conv1d.weight": m.f32((ch, 1, 4), lambda r: 0.5 * r.standard_normal(ch * 4))
                  for n in ("q", "k", "v")})
        t.update({s + "f_a_proj.weight": m.linear(hd, h), s + "f_b_proj.weight": m.linear(ch, hd),
                  s + "b_proj.weight": m.linear(heads, h), s + "o_proj.weight": m.linear(h, ch),
                  s + "o_norm.weight": m.norm(hd, "F32"),
                  s + "dt_bias": m.f32((ch,), lambda r: 0.5 * r.standard_normal(ch)),
                  s + "A_log": m.f32((padded,), lambda r: np.pad(np.log(r.uniform(1, 16, heads)), (0, padded - heads)))})
    if l == 0:  # first_k_dense_replace = 1
        t.update({p + "mlp.gate_proj.weight": m.linear(d["inter"], h), p + "mlp.up_proj.weight": m.linear(d["inter"], h),
                  p + "mlp.down_proj.weight": m.linear(h, d["inter"])})
        return t
    b, lat, width = p + "block_sparse_moe.", d["latent"], a.moe_inter * d["shared"]
    t.update({b + "gate.weight": m.linear(a.experts, h),
              b + "gate.e_score_correction_bias": m.f32((a.experts,), lambda r: 0.02 * r.standard_normal(a.experts)),
              b + "routed_expert_down_proj.weight": m.linear(lat, h), b + "routed_expert_norm.weight": m.norm(lat),
              b + "routed_expert_up_proj.weight": m.linear(h, lat),
              b + "shared_experts.gate_proj.weight": m.linear(width, h),
              b + "shared_experts.up_proj.weight": m.linear(width, h),
              b + "shared_experts.down_proj.weight": m.linear(h, width)})
    for e in range(a.experts):
        for w, (rows, cols) in (("w1", (a.moe_inter, lat)), ("w2", (lat, a.moe_inter)), ("w3", (a.moe_inter, lat))):
            t[f"{b}experts.{e}.{w}.weight_packed"], t[f"{b}experts.{e}.{w}.weight_scale"] = m.mxfp4(rows, cols)
    return t


def safetensors_order(t):
    """As the safetensors writer lays out a state dict: wider dtypes first, then by name."""
    return dict(sorted(t.items(), key=lambda kv: (-ITEMSIZE[kv[1][0]], kv[0])))


def shard_tensors(m, a, d, i, full_attn):
    """Shard i's tensors (lazy): 0 holds the embedding and head, i > 0 layer i - 1."""
    if i > 0:
        return layer_tensors(m, a, d, i - 1, i in full_attn)
    g = "language_model."
    return {g + "model.embed_tokens.weight": m.linear(a.vocab, d["h"], 1.0),
            g + "lm_head.weight": m.linear(a.vocab, d["h"]), g + "model.norm.weight": m.norm(d["h"]),
            g + "model.output_attn_res_norm.weight": m.norm(d["h"]),
            g + "model.output_attn_res_proj.weight": m.linear(1, d["h"], 1.5 / np.sqrt(d["h"]))}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", nargs="?")
    ap.add_argument("--preset", choices=sorted(PRESETS), default="bench")
    for flag in ("layers", "hidden", "experts", "top-k", "moe-inter", "vocab"):
        ap.add_argument("--" + flag, type=int, help="override the preset")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--force", action="store_true", help="write into a non-empty OUT_DIR")
    ap.add_argument("--list-tensors", action="store_true", help="print the tensors as JSON lines; write nothing")
    a = ap.parse_args()
    if not a.out and not a.list_tensors:
        ap.error("OUT_DIR is required (or --list-tensors)")
    for k, v in PRESETS[a.preset].items():
        if getattr(a, k, None) is None:
            setattr(a, k, v)
    d = dims(a)
    full_attn = [i for i in range(1, a.layers + 1) if i % 4 == 0 or i == a.layers]  # 1-based, as in K3
    kda = [i for i in range(1, a.layers + 1) if i not in full_attn]
    if a.list_tensors:
        for i in range(a.layers + 1):
            for name, (dtype, x) in shard_tensors(Maker(a.seed), a, d, i, full_attn).items():
                print(json.dumps({"name": name, "dtype": dtype, "shape": list(x.shape), "nbytes": nbytes(dtype, x)}))
        return
    if os.path.isdir(a.out) and os.listdir(a.out) and not a.force:
        sys.exit(f"error: {a.out} exists and is not empty (pass --force to write into it)")
    os.makedirs(a.out, exist_ok=True)
    for old in ("model.safetensors.index.json", "config.json"):  # not loadable while shards are rewritten
        if os.path.exists(os.path.join(a.out, old)):
            os.remove(os.path.join(a.out, old))

    m, shards, weight_map, total, experts_total = Maker(a.seed), a.layers + 1, {}, 0, 0
    started = time.time()
    for i in range(shards):
        t = shard_tensors(m, a, d, i, full_attn)
        name = f"model-{i + 1:05d}-of-{shards:06d}.safetensors"
        total += write_shard(os.path.join(a.out, name), safetensors_order(t), {"format": "pt"})
        experts_total += sum(ITEMSIZE[dt] * int(np.prod(x.shape)) for n, (dt, x) in t.items() if ".experts." in n)
        weight_map.update((n, name) for n in t)
        if sys.stderr.isatty():
            print(f"\r{name} ({time.time() - started:.0f} s)", end="", file=sys.stderr, flush=True)
    if sys.stderr.isatty():
        print(file=sys.stderr)
    for stale in glob.glob(os.path.join(a.out, "model-*-of-*.safetensors")):  # from an earlier --force run
        if os.path.basename(stale) not in set(weight_map.values()):
            os.remove(stale)
    write_json(os.path.join(a.out, "model.safetensors.index.json"),
               {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))})
    write_json(os.path.join(a.out, "config.json"), config(a, d, full_attn, kda))
    moe_layers = a.layers - 1
    per_expert = experts_total // max(1, moe_layers * a.experts)
    print(f"{a.out}: {total / 1e9:.3f} GB in {time.time() - started:.1f} s; {a.layers} layers ({moe_layers} MoE, "
          f"MLA at 1-based {full_attn}), {a.experts} experts top-{a.top_k}, {per_expert} B a routed expert, "
          f"routed experts {experts_total / 1e9:.3f} GB, spine {(total - experts_total) / 1e9:.3f} GB")


if __name__ == "__main__":
    main()
