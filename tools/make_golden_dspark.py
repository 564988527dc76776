#!/usr/bin/env python3
"""Golden references for Kimi K3's DSpark drafter (K3DSparkModel), numpy only, float64 math.

Makes a tiny random DSpark drafter in the published on-disk layout (Inferact/Kimi-K3-DSpark:
config.json keys, 68-tensor naming scheme without a "model." prefix, a frozen copy of the target's
embed_tokens, no lm_head) attached to the tiny K3 fixture tests/fixtures/k3_tiny, and computes the
drafter's block outputs from that fixture's captured target hidden rows (hidden.npy).

The semantics are written from the public serving code (vLLM; paths and commits in PROVENANCE):
  * context: the target's hidden rows at target_layer_ids (the OUTPUT of 0-based layer L, i.e.
    hidden.npy row L + 1), concatenated in config order -> context_proj -> RMSNorm(context_norm);
    each draft layer projects every context vector with its own kv_a_proj_with_mqa (no
    input_layernorm), normalises the latent with kv_a_layernorm and applies RoPE to k_pe at the
    context position: that layer's latent KV cache;
  * block: input ids [anchor token, mask, ..., mask] (k rows) at positions anchor .. anchor+k-1,
    embedded with the target's embedding; pre-norm decoder layers (MLA with RoPE, no output gate,
    dense SiLU MLP); every block row attends to all context rows (positions < anchor) and to every
    block row (non-causal inside the block); final_norm; the target's lm_head (no logit scale);
  * Markov head: logits_i = base_i + markov_w2 @ markov_w1[prev], prev = the anchor token for row
    0, then the previous row's (greedy) draft token; row i gives draft token i + 1;
  * confidence head: sigmoid(proj . concat(final-normed row i, markov_w1[prev_i]) + bias);
  * MLA: q = q_b(rmsnorm(q_a(x))) per head [nope | rope]; kv_a(x) = [c | k_pe], c normalised,
    kv_b(c) per head [k_nope | v], k_pe shared by all heads; RoPE interleaved pairs (GPT-J style,
    is_neox_style=False), DeepSeek YaRN inv_freq, cos/sin x mscale(f, mscale)/mscale(f, mscale_all)
    and softmax scale (nope + rope)^-0.5 x mscale(f, mscale_all_dim)^2.
The math uses the stored (BF16-rounded) weights. A second, position-by-position implementation
(absorbed MLA in latent space, complex-number RoPE, online softmax over keys one at a time)
must agree to 1e-10. A discrimination table (VARIANTS) records how far each plausible misreading
(neox RoPE, no YaRN, causal block, layer input rows, ...) moves the goldens.

Outputs in OUT_DIR (default tests/fixtures/k3_tiny_dspark): config.json, model.safetensors,
golden.json, logits.npy [anchors, k, vocab] (Markov-biased, along the greedy path),
base_logits.npy, confidence.npy [anchors, k], context.npy [T, hidden] (the context vectors after
context_norm, for localising a mismatch), and the k = 8 set logits_k8.npy / base_logits_k8.npy /
confidence_k8.npy [1, 8, ...].

Usage: python3 tools/make_golden_dspark.py [--target tests/fixtures/k3_tiny] [--out DIR]
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_writer import bf16_bits, write_json, write_shard  # noqa: E402

FIRST_SEED = 3901
SEED_ATTEMPTS = 40
MIN_TOP2_MARGIN = 1e-2      # greedy draft tokens must survive engine error (~2e-3 on logits)
MIN_MARKOV_FLIPS = 2        # rows where the Markov bias changes the argmax (so it is exercised)
BLOCK = 4
ANCHORS = [8, 13, 20, 27, 31]
BLOCK_K8 = 8
ANCHOR_K8 = 20
SELF_CHECK_TOL = 1e-10
CONFIDENCE_DTYPE = "F32"
# Plausible misreadings of the public code; each must move the goldens well past the engine tolerance.
VARIANTS = {
    "neox_rope": "RoPE on halves (x[i], x[i + d/2]) instead of interleaved pairs",
    "plain_rope": "no YaRN: inv_freq = theta^(-2i/d), cos/sin and softmax scale unscaled",
    "no_mscale_squared": "softmax scale (nope + rope)^-0.5 without mscale(factor, mscale_all_dim)^2",
    "causal_block": "block rows attend causally inside the block",
    "layer_input_rows": "target layer L captured as its input (hidden row L) instead of its output (row L + 1)",
    "context_input_layernorm": "context vectors pass the draft layer's input_layernorm before kv_a_proj_with_mqa",
    "markov_first_prev_last_context": "first Markov predecessor = token at anchor - 1 instead of the anchor token",
}    # vLLM builds confidence_head.proj with params_dtype float32

CONFIG = {
    "architectures": ["K3DSparkModel"],
    "model_type": "k3_dspark",
    "hidden_size": 48,
    "intermediate_size": 96,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "q_lora_rank": 24,
    "kv_lora_rank": 16,
    "qk_nope_head_dim": 16,
    "qk_rope_head_dim": 8,
    "v_head_dim": 16,
    "mla_use_nope": False,
    "mla_use_output_gate": False,
    "vocab_size": 320,
    "rms_norm_eps": 1e-05,
    "max_position_embeddings": 4096,
    "rope_theta": 50000.0,
    "num_target_layers": 3,
    "target_hidden_size": 48,
    "target_num_hidden_layers": 13,
    "target_layer_ids": [1, 5, 9],
    "mask_token_id": 317,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 0,
    "markov_rank": 8,
    "markov_head_type": "vanilla",
    "enable_confidence_head": True,
    "confidence_head_with_markov": True,
    "tie_word_embeddings": False,
    "draft_vocab_size": 320,
    "_torchspec_version": "0.1.0",
    "torch_dtype": "bfloat16",
    "rope_parameters": {
        "rope_type": "yarn",
        "factor": 4.0,
        "original_max_position_embeddings": 16,
        "rope_theta": 50000.0,
        "beta_fast": 32,
        "beta_slow": 1,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
    },
}

PROVENANCE = {
    "note": "semantics written from these public files (read, not copied; none is in this repository)",
    "repo": "vllm-project/vllm",
    "files": {
        "vllm/models/kimi_k3/common/dspark_mla.py": "811a171771e41914fb83bdee23acdac2fc86a926",
        "vllm/models/kimi_k3/nvidia/dspark_mla.py": "00eb0c874eb54594184ace2b4711db1df48ba85c",
        "vllm/models/kimi_k3/nvidia/mla.py": "01b867e884625778a017f9edf5cab0311af29a8b",
        "vllm/models/kimi_k3/nvidia/model.py": "006193b5a9a7957c11bc6472588f951e778072b5",
        "vllm/model_executor/models/qwen3_dspark.py": "0302ff40439493d0db2e3bbfd509211703375d08",
        "vllm/v1/spec_decode/dspark.py": "26a86f53842d97d16e23cf4a69378f358e328c48",
        "vllm/v1/spec_decode/dspark_sampling.py": "432d4cea495c873aee1daae9ee80b509537f04db",
        "vllm/model_executor/layers/rotary_embedding/deepseek_scaling_rope.py":
            "00d678e109f09c2d1845e7a6626ba9fd5980e4f0",
        "vllm/model_executor/layers/rotary_embedding/common.py": "002d181a55a03803d7d69547846630069d2378b8",
        "vllm/model_executor/layers/rotary_embedding/__init__.py": "07b12f1b16d5568eeb29a52fd8c9296a51f478ed",
        "vllm/transformers_utils/configs/k3_dspark.py": "b540657fef8aaa174e9693517b848be26a811760",
    },
}


# ---------------------------------------------------------------- storage

def read_safetensors(path, names):
    """{name: float64 array} for the named BF16/F32 tensors of one safetensors file."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        base = 8 + n
        out = {}
        for name in names:
            meta = header[name]
            start, end = meta["data_offsets"]
            f.seek(base + start)
            raw = f.read(end - start)
            if meta["dtype"] == "BF16":
                bits = np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16
                arr = bits.view(np.float32)
            elif meta["dtype"] == "F32":
                arr = np.frombuffer(raw, dtype=np.float32)
            else:
                raise ValueError(f"{path}: {name} has unsupported dtype {meta['dtype']}")
            out[name] = (arr.reshape(meta["shape"]).astype(np.float64), raw, meta["dtype"])
    return out


def bf16_value(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def make_weights(cfg, seed, embed_bits):
    """Random drafter weights. Returns ({name: (dtype, stored array)}, {name: float64 value})."""
    rng = np.random.default_rng(seed)
    hid, inter, heads = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_attention_heads"]
    nope, rope, vdim = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
    qr, kvr, rank = cfg["q_lora_rank"], cfg["kv_lora_rank"], cfg["markov_rank"]
    ctx_in = cfg["target_hidden_size"] * cfg["num_target_layers"]
    stored, value = {}, {}

    def put_bf16(name, x):
        bits = bf16_bits(x.astype(np.float32))
        stored[name] = ("BF16", bits)
        value[name] = bf16_value(bits)

    def linear(name, out_dim, in_dim):
        put_bf16(name, rng.standard_normal((out_dim, in_dim)) / math.sqrt(in_dim))

    def norm(name, dim):
        put_bf16(name, 1.0 + 0.1 * rng.standard_normal(dim))

    linear("context_proj.weight", hid, ctx_in)
    norm("context_norm.weight", hid)
    for i in range(cfg["num_hidden_layers"]):
        p = f"layers.{i}"
        norm(f"{p}.input_layernorm.weight", hid)
        norm(f"{p}.post_attention_layernorm.weight", hid)
        linear(f"{p}.self_attn.q_a_proj.weight", qr, hid)
        norm(f"{p}.self_attn.q_a_layernorm.weight", qr)
        linear(f"{p}.self_attn.q_b_proj.weight", heads * (nope + rope), qr)
        linear(f"{p}.self_attn.kv_a_proj_with_mqa.weight", kvr + rope, hid)
        norm(f"{p}.self_attn.kv_a_layernorm.weight", kvr)
        linear(f"{p}.self_attn.kv_b_proj.weight", heads * (nope + vdim), kvr)
        linear(f"{p}.self_attn.o_proj.weight", hid, heads * vdim)
        linear(f"{p}.mlp.gate_proj.weight", inter, hid)
        linear(f"{p}.mlp.up_proj.weight", inter, hid)
        linear(f"{p}.mlp.down_proj.weight", hid, inter)
    norm("final_norm.weight", hid)
    # variance 0.5/sqrt(r) each, so the bias w2 @ w1[prev] has standard deviation 0.5
    markov_std = math.sqrt(0.5 / math.sqrt(rank))
    put_bf16("markov_head.markov_w1.weight", markov_std * rng.standard_normal((cfg["vocab_size"], rank)))
    put_bf16("markov_head.markov_w2.weight", markov_std * rng.standard_normal((cfg["draft_vocab_size"], rank)))
    conf_w = rng.standard_normal((1, hid + rank)) / math.sqrt(hid + rank)
    conf_b = np.array([0.3])
    if CONFIDENCE_DTYPE == "F32":
        for name, x in (("confidence_head.proj.weight", conf_w), ("confidence_head.proj.bias", conf_b)):
            stored[name] = ("F32", x.astype(np.float32))
            value[name] = x.astype(np.float32).astype(np.float64)
    else:
        put_bf16("confidence_head.proj.weight", conf_w)
        put_bf16("confidence_head.proj.bias", conf_b)
    stored["embed_tokens.weight"] = ("BF16", embed_bits)
    return dict(sorted(stored.items())), value


# ---------------------------------------------------------------- shared math

def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def yarn_mscale(factor, m):
    return 1.0 if factor <= 1 else 0.1 * m * math.log(factor) + 1.0


def rope_tables(cfg):
    """(inv_freq [rope/2], cos/sin multiplier, softmax scale) for DeepSeek YaRN (or plain RoPE)."""
    rp, dim = cfg["rope_parameters"], cfg["qk_rope_head_dim"]
    base = rp.get("rope_theta", cfg["rope_theta"])
    pos_freqs = base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    scale = (cfg["qk_nope_head_dim"] + dim) ** -0.5
    if rp.get("rope_type", "default") == "default":
        return 1.0 / pos_freqs, 1.0, scale
    factor, orig = rp["factor"], rp["original_max_position_embeddings"]

    def correction_dim(rot):
        return dim * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(base))

    low = max(math.floor(correction_dim(rp.get("beta_fast", 32))), 0)
    high = min(math.ceil(correction_dim(rp.get("beta_slow", 1))), dim - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / (high - low), 0, 1)
    extrapolate = 1 - ramp
    inv_freq = (1.0 / (factor * pos_freqs)) * (1 - extrapolate) + (1.0 / pos_freqs) * extrapolate
    m_all = rp.get("mscale_all_dim", 0)
    cos_mul = yarn_mscale(factor, rp.get("mscale", 1)) / yarn_mscale(factor, m_all)
    return inv_freq, cos_mul, scale * yarn_mscale(factor, m_all) ** 2


def context_inputs(cfg, hidden, count, row_offset=1):
    """Concatenated target rows [count, target_hidden * layers]: layer L's output is hidden row L + 1."""
    return np.concatenate([hidden[layer + row_offset, :count] for layer in cfg["target_layer_ids"]], axis=-1)


def context_vectors(cfg, w, hidden, count, row_offset=1):
    x = context_inputs(cfg, hidden, count, row_offset) @ w["context_proj.weight"].T
    return rms_norm(x, w["context_norm.weight"], cfg["rms_norm_eps"])


def silu(x):
    return x / (1 + np.exp(-x))


def mlp(w, p, h):
    gate, up = h @ w[f"{p}.mlp.gate_proj.weight"].T, h @ w[f"{p}.mlp.up_proj.weight"].T
    return (silu(gate) * up) @ w[f"{p}.mlp.down_proj.weight"].T


def heads_of(cfg):
    return (cfg["num_attention_heads"], cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"],
            cfg["v_head_dim"], cfg["kv_lora_rank"])


# ---------------------------------------------------------------- implementation A (vectorised)

def rope_interleaved(x, pos, inv_freq, cos_mul, neox=False):
    """x [..., n, dim] rotated by pos [n] * inv_freq on pairs (x[2i], x[2i+1]) (neox: (x[i], x[i + dim/2]),
    only for the discrimination table)."""
    ang = pos[:, None] * inv_freq[None, :]
    cos, sin = np.cos(ang) * cos_mul, np.sin(ang) * cos_mul
    half = x.shape[-1] // 2
    first, second = (slice(0, half), slice(half, None)) if neox else (slice(0, None, 2), slice(1, None, 2))
    x0, x1 = x[..., first], x[..., second]
    out = np.empty_like(x)
    out[..., first] = x0 * cos - x1 * sin
    out[..., second] = x1 * cos + x0 * sin
    return out


def latent(cfg, w, p, x, pos, rope):
    """kv_a_proj_with_mqa rows -> (normalised latent [n, kv_lora], roped k_pe [n, rope])."""
    inv_freq, cos_mul, _, neox = rope
    kv = x @ w[f"{p}.self_attn.kv_a_proj_with_mqa.weight"].T
    kvr = cfg["kv_lora_rank"]
    c = rms_norm(kv[:, :kvr], w[f"{p}.self_attn.kv_a_layernorm.weight"], cfg["rms_norm_eps"])
    return c, rope_interleaved(kv[:, kvr:], pos, inv_freq, cos_mul, neox)


def attention(cfg, w, p, h, pos, ctx_c, ctx_pe, rope, causal=False):
    heads, nope, rdim, vdim, _ = heads_of(cfg)
    inv_freq, cos_mul, scale, neox = rope
    eps = cfg["rms_norm_eps"]
    q = rms_norm(h @ w[f"{p}.self_attn.q_a_proj.weight"].T, w[f"{p}.self_attn.q_a_layernorm.weight"], eps)
    q = (q @ w[f"{p}.self_attn.q_b_proj.weight"].T).reshape(len(h), heads, nope + rdim)
    q_nope = q[..., :nope]
    q_pe = rope_interleaved(q[..., nope:].transpose(1, 0, 2), pos, inv_freq, cos_mul, neox).transpose(1, 0, 2)
    blk_c, blk_pe = latent(cfg, w, p, h, pos, rope)
    c = np.concatenate([ctx_c, blk_c])          # keys: context rows, then every block row
    k_pe = np.concatenate([ctx_pe, blk_pe])
    kv = (c @ w[f"{p}.self_attn.kv_b_proj.weight"].T).reshape(len(c), heads, nope + vdim)
    k_nope, v = kv[..., :nope], kv[..., nope:]
    scores = (np.einsum("qhd,khd->hqk", q_nope, k_nope) + np.einsum("qhd,kd->hqk", q_pe, k_pe)) * scale
    if causal:
        n_ctx = len(ctx_c)
        scores[:, :, n_ctx:] += np.triu(np.full((len(h), len(h)), -np.inf), 1)
    scores -= scores.max(axis=-1, keepdims=True)
    probs = np.exp(scores)
    probs /= probs.sum(axis=-1, keepdims=True)
    out = np.einsum("hqk,khd->qhd", probs, v).reshape(len(h), heads * vdim)
    return out @ w[f"{p}.self_attn.o_proj.weight"].T


def draft_block(cfg, w, ctx, embed, lm_head, tokens, anchor, k, variant=()):
    """Block drafted at anchor (context = positions < anchor): base logits [k, V], final rows [k, hidden].
    variant: deliberate misreadings, only for the discrimination table (see VARIANTS)."""
    rope_cfg = dict(cfg, rope_parameters={"rope_type": "default"}) if "plain_rope" in variant else cfg
    inv_freq, cos_mul, scale = rope_tables(rope_cfg)
    if "no_mscale_squared" in variant:
        scale = (cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]) ** -0.5
    rope = (inv_freq, cos_mul, scale, "neox_rope" in variant)
    eps = cfg["rms_norm_eps"]
    pos = np.arange(anchor, anchor + k, dtype=np.float64)
    ctx_pos = np.arange(anchor, dtype=np.float64)
    x = embed[[tokens[anchor]] + [cfg["mask_token_id"]] * (k - 1)]
    for i in range(cfg["num_hidden_layers"]):
        p = f"layers.{i}"
        ctx_in = ctx[:anchor]
        if "context_input_layernorm" in variant:
            ctx_in = rms_norm(ctx_in, w[f"{p}.input_layernorm.weight"], eps)
        ctx_c, ctx_pe = latent(cfg, w, p, ctx_in, ctx_pos, rope)
        h = rms_norm(x, w[f"{p}.input_layernorm.weight"], eps)
        r = x + attention(cfg, w, p, h, pos, ctx_c, ctx_pe, rope, causal="causal_block" in variant)
        x = r + mlp(w, p, rms_norm(r, w[f"{p}.post_attention_layernorm.weight"], eps))
    y = rms_norm(x, w["final_norm.weight"], eps)
    return y @ lm_head.T, y


def markov_walk(w, base, y, first_prev):
    """Greedy sequential Markov walk: (biased logits [k, V], draft tokens [k], confidence [k])."""
    w1, w2 = w["markov_head.markov_w1.weight"], w["markov_head.markov_w2.weight"]
    cw, cb = w["confidence_head.proj.weight"][0], w["confidence_head.proj.bias"][0]
    prev, logits, drafts, conf = first_prev, [], [], []
    for i in range(len(base)):
        row = base[i] + w2 @ w1[prev]
        conf.append(1 / (1 + math.exp(-(cw @ np.concatenate([y[i], w1[prev]]) + cb))))
        prev = int(np.argmax(row))
        logits.append(row)
        drafts.append(prev)
    return np.array(logits), drafts, np.array(conf)


# ---------------------------------------------------------------- implementation B (position by position)

def rope_complex(x, pos, inv_freq, cos_mul):
    z = (x[0::2] + 1j * x[1::2]) * (cos_mul * np.exp(1j * pos * inv_freq))
    out = np.empty_like(x)
    out[0::2], out[1::2] = z.real, z.imag
    return out


def draft_block_naive(cfg, w, hidden, embed, lm_head, tokens, anchor, k):
    """Same block, one context position at a time: absorbed MLA (q_nope folded into the latent through
    kv_b's key half, values read back from the latent), complex RoPE, online softmax."""
    heads, nope, rdim, vdim, kvr = heads_of(cfg)
    inv_freq, cos_mul, scale = rope_tables(cfg)
    eps = cfg["rms_norm_eps"]
    layers = cfg["target_layer_ids"]

    def ctx_vector(t):
        row = np.concatenate([hidden[layer + 1, t] for layer in layers])
        return rms_norm(w["context_proj.weight"] @ row, w["context_norm.weight"], eps)

    def latent_of(p, x, position):
        kv = w[f"{p}.self_attn.kv_a_proj_with_mqa.weight"] @ x
        c = rms_norm(kv[:kvr], w[f"{p}.self_attn.kv_a_layernorm.weight"], eps)
        return c, rope_complex(kv[kvr:], position, inv_freq, cos_mul)

    ctx = [ctx_vector(t) for t in range(anchor)]
    x = [embed[tokens[anchor] if i == 0 else cfg["mask_token_id"]].copy() for i in range(k)]
    for li in range(cfg["num_hidden_layers"]):
        p = f"layers.{li}"
        kvb = w[f"{p}.self_attn.kv_b_proj.weight"].reshape(heads, nope + vdim, kvr)
        h = [rms_norm(xi, w[f"{p}.input_layernorm.weight"], eps) for xi in x]
        keys = [latent_of(p, ctx[t], float(t)) for t in range(anchor)]
        keys += [latent_of(p, h[i], float(anchor + i)) for i in range(k)]
        new_x = []
        for i in range(k):
            qa = rms_norm(w[f"{p}.self_attn.q_a_proj.weight"] @ h[i], w[f"{p}.self_attn.q_a_layernorm.weight"], eps)
            q = (w[f"{p}.self_attn.q_b_proj.weight"] @ qa).reshape(heads, nope + rdim)
            outs = []
            for hd in range(heads):
                q_lat = kvb[hd, :nope].T @ q[hd, :nope]
                q_pe = rope_complex(q[hd, nope:], float(anchor + i), inv_freq, cos_mul)
                run_max, run_sum, acc = -math.inf, 0.0, np.zeros(kvr)
                for c, k_pe in keys:
                    s = (q_lat @ c + q_pe @ k_pe) * scale
                    new_max = max(run_max, s)
                    decay = math.exp(run_max - new_max) if run_max > -math.inf else 0.0
                    run_sum = run_sum * decay + math.exp(s - new_max)
                    acc = acc * decay + math.exp(s - new_max) * c
                    run_max = new_max
                outs.append(kvb[hd, nope:] @ (acc / run_sum))
            r = x[i] + w[f"{p}.self_attn.o_proj.weight"] @ np.concatenate(outs)
            hm = rms_norm(r, w[f"{p}.post_attention_layernorm.weight"], eps)
            gate = w[f"{p}.mlp.gate_proj.weight"] @ hm
            up = w[f"{p}.mlp.up_proj.weight"] @ hm
            new_x.append(r + w[f"{p}.mlp.down_proj.weight"] @ (gate / (1 + np.exp(-gate)) * up))
        x = new_x
    y = np.array([rms_norm(xi, w["final_norm.weight"], eps) for xi in x])
    return np.array([lm_head @ yi for yi in y]), y


# ---------------------------------------------------------------- goldens

def top2_margin(row):
    top = np.sort(row)[-2:]
    return float(top[1] - top[0])


def run_set(cfg, w, ctx, embed, lm_head, tokens, anchors, k):
    out = {"logits": [], "base": [], "conf": [], "drafts": [], "margins": [], "flips": 0}
    for a in anchors:
        base, y = draft_block(cfg, w, ctx, embed, lm_head, tokens, a, k)
        logits, drafts, conf = markov_walk(w, base, y, tokens[a])
        out["logits"].append(logits)
        out["base"].append(base)
        out["conf"].append(conf)
        out["drafts"].append(drafts)
        out["margins"].append(min(top2_margin(r) for r in logits))
        out["flips"] += int(sum(np.argmax(base[i]) != drafts[i] for i in range(k)))
    return out


def discrimination(cfg, w, hidden, embed, lm_head, tokens, reference):
    """For each VARIANT: max |base logit difference| and max |Markov-biased logit difference| (that one
    also carries the changed predecessors) against the goldens, and the number of changed draft tokens."""
    table = {}
    for name, what in VARIANTS.items():
        offset = 0 if name == "layer_input_rows" else 1
        ctx = context_vectors(cfg, w, hidden, len(tokens), offset)
        base_diff, diff, changed = 0.0, 0.0, 0
        for j, a in enumerate(ANCHORS):
            base, y = draft_block(cfg, w, ctx, embed, lm_head, tokens, a, BLOCK, variant=(name,))
            first = tokens[a - 1] if name == "markov_first_prev_last_context" else tokens[a]
            logits, drafts, _ = markov_walk(w, base, y, first)
            base_diff = max(base_diff, float(np.max(np.abs(base - reference["base"][j]))))
            diff = max(diff, float(np.max(np.abs(logits - reference["logits"][j]))))
            changed += sum(d != e for d, e in zip(drafts, reference["drafts"][j]))
        table[name] = {"what": what, "max_abs_base_logit_diff": base_diff, "max_abs_logit_diff": diff,
                       "draft_tokens_changed": int(changed)}
        print(f"variant {name}: max |base logit diff| {base_diff:.3g}, |logit diff| {diff:.3g}, "
              f"draft tokens changed {changed}/{len(ANCHORS) * BLOCK}")
    return table


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--target", default=os.path.join(here, "tests/fixtures/k3_tiny"))
    ap.add_argument("--out", default=os.path.join(here, "tests/fixtures/k3_tiny_dspark"))
    args = ap.parse_args()

    cfg = CONFIG
    golden_k3 = json.load(open(os.path.join(args.target, "golden.json")))
    tokens = golden_k3["prompt"] + golden_k3["generated"]
    hidden = np.load(os.path.join(args.target, "hidden.npy")).astype(np.float64)
    target = read_safetensors(os.path.join(args.target, "model.safetensors"),
                              ["language_model.model.embed_tokens.weight", "language_model.lm_head.weight"])
    embed, embed_raw, embed_dtype = target["language_model.model.embed_tokens.weight"]
    lm_head = target["language_model.lm_head.weight"][0]
    assert embed_dtype == "BF16" and embed.shape == (cfg["vocab_size"], cfg["hidden_size"])
    assert hidden.shape[1] >= len(tokens) and hidden.shape[2] == cfg["target_hidden_size"]
    embed_bits = np.frombuffer(embed_raw, dtype=np.uint16).reshape(embed.shape)
    # the target tensors read right: hidden row 0 is the embedding, the last row times lm_head the logits
    assert np.array_equal(hidden[0, :len(tokens)], embed[tokens])
    target_logits = np.load(os.path.join(args.target, "logits.npy"))
    assert np.max(np.abs(hidden[-1, :len(tokens)] @ lm_head.T - target_logits)) < 1e-5

    tried = []
    for seed in range(FIRST_SEED, FIRST_SEED + SEED_ATTEMPTS):
        stored, w = make_weights(cfg, seed, embed_bits)
        ctx = context_vectors(cfg, w, hidden, len(tokens))
        main_set = run_set(cfg, w, ctx, embed, lm_head, tokens, ANCHORS, BLOCK)
        k8_set = run_set(cfg, w, ctx, embed, lm_head, tokens, [ANCHOR_K8], BLOCK_K8)
        margin = min(main_set["margins"] + k8_set["margins"])
        flips = main_set["flips"] + k8_set["flips"]
        tried.append({"seed": seed, "min_top2_margin": margin, "markov_flips": flips})
        print(f"seed {seed}: min top-2 margin {margin:.4g}, Markov-changed argmaxes {flips}")
        if margin >= MIN_TOP2_MARGIN and flips >= MIN_MARKOV_FLIPS:
            break
    else:
        sys.exit(f"no seed in {FIRST_SEED}..{FIRST_SEED + SEED_ATTEMPTS - 1} reaches margin {MIN_TOP2_MARGIN}")

    # self-check: the position-by-position implementation agrees
    check = 0.0
    blocks = [(a, BLOCK, main_set["base"][j]) for j, a in enumerate(ANCHORS)]
    for a, k, base in blocks + [(ANCHOR_K8, BLOCK_K8, k8_set["base"][0])]:
        naive, _ = draft_block_naive(cfg, w, hidden, embed, lm_head, tokens, a, k)
        check = max(check, float(np.max(np.abs(naive - base))))
    print(f"naive vs vectorised max |base logit diff| {check:.3g}")
    if check > SELF_CHECK_TOL:
        sys.exit(f"self-check failed: {check} > {SELF_CHECK_TOL}")

    table = discrimination(cfg, w, hidden, embed, lm_head, tokens, main_set)
    inv_freq, cos_mul, scale = rope_tables(cfg)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    write_shard(os.path.join(args.out, "model.safetensors"), stored, metadata={"format": "pt"})
    # the math used exactly the stored values: reload the file and redraft one block
    names = [n for n in stored if n != "embed_tokens.weight"]
    reloaded = {n: v[0] for n, v in read_safetensors(os.path.join(args.out, "model.safetensors"), names).items()}
    assert all(np.array_equal(reloaded[n], w[n]) for n in names)
    again, _ = draft_block(cfg, reloaded, context_vectors(cfg, reloaded, hidden, len(tokens)), embed, lm_head,
                           tokens, ANCHORS[0], BLOCK)
    assert np.array_equal(again, main_set["base"][0])
    np.save(os.path.join(args.out, "logits.npy"), np.array(main_set["logits"], dtype=np.float32))
    np.save(os.path.join(args.out, "base_logits.npy"), np.array(main_set["base"], dtype=np.float32))
    np.save(os.path.join(args.out, "confidence.npy"), np.array(main_set["conf"], dtype=np.float32))
    np.save(os.path.join(args.out, "logits_k8.npy"), np.array(k8_set["logits"], dtype=np.float32))
    np.save(os.path.join(args.out, "base_logits_k8.npy"), np.array(k8_set["base"], dtype=np.float32))
    np.save(os.path.join(args.out, "confidence_k8.npy"), np.array(k8_set["conf"], dtype=np.float32))
    np.save(os.path.join(args.out, "context.npy"), ctx.astype(np.float32))
    golden = {
        "script": "tools/make_golden_dspark.py",
        "numpy": np.__version__,
        "math": "float64; weights as stored (BF16 upcast; confidence head " + CONFIDENCE_DTYPE + ")",
        "seed": seed,
        "seeds_tried": tried,
        "target_fixture": "tests/fixtures/k3_tiny",
        "tokens": tokens,
        "context_rows": "hidden.npy row L + 1 (output of 0-based target layer L) for L in target_layer_ids, "
                        "concatenated in that order; context for anchor a = positions 0 .. a-1",
        "block": BLOCK,
        "anchors": ANCHORS,
        "anchor_tokens": [tokens[a] for a in ANCHORS],
        "draft_tokens": main_set["drafts"],
        "min_top2_margin_per_anchor": main_set["margins"],
        "min_top2_margin": min(main_set["margins"]),
        "markov_changed_argmaxes": main_set["flips"],
        "k8": {
            "block": BLOCK_K8,
            "anchor": ANCHOR_K8,
            "anchor_token": tokens[ANCHOR_K8],
            "draft_tokens": k8_set["drafts"][0],
            "min_top2_margin": k8_set["margins"][0],
            "markov_changed_argmaxes": k8_set["flips"],
            "files": ["logits_k8.npy", "base_logits_k8.npy", "confidence_k8.npy"],
        },
        "rope": {"inv_freq": inv_freq.tolist(), "cos_sin_multiplier": cos_mul, "softmax_scale": scale,
                 "style": "interleaved pairs (x[2i], x[2i+1]), GPT-J / DeepSeek, not neox half-split"},
        "self_check_naive_max_abs_diff": check,
        "discrimination": table,
        "provenance": PROVENANCE,
    }
    write_json(os.path.join(args.out, "golden.json"), golden)
    print(f"seed {seed}; draft tokens {main_set['drafts']} (k=8 at {ANCHOR_K8}: {k8_set['drafts'][0]})")
    print(f"min top-2 margin {min(main_set['margins']):.4g} (k=8: {k8_set['margins'][0]:.4g}); "
          f"Markov-changed argmaxes {main_set['flips']} + {k8_set['flips']}")
    print(f"confidence {np.round(np.array(main_set['conf']), 3).tolist()}")


if __name__ == "__main__":
    main()
