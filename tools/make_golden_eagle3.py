#!/usr/bin/env python3
"""Golden references for an EAGLE-3 head on Kimi K3 (vLLM's Eagle3DeepseekV2ForCausalLM), numpy, float64.

Makes a tiny random EAGLE-3 MLA head in the published layout (lightseekorg/kimi-k3-eagle3.1-mla as
vLLM loads it: config.json with DeepSeek-V3 MLA fields, `eagle_config.eagle_aux_hidden_state_layer_ids`,
`target_hidden_size`; tensors fc.weight, midlayer.* (vLLM renames midlayer. -> layers.0.), norm.weight,
its own lm_head.weight, no embed_tokens (then the target's embedding is shared), no d2t/t2d) attached to
the tiny K3 fixture tests/fixtures/k3_tiny, and computes the head's greedy draft chains from that
fixture's target hidden rows (hidden.npy).

Semantics, written from the public serving code (paths and commits in PROVENANCE):
  * aux rows: vLLM aux layer id v captures the stream ENTERING target layer v (K3 with
    VLLM_KIMI_K3_AUX_ATTN_RES_STREAM=0: the within-block AttnRes prefix sum), i.e. the output of 0-based
    layer v - 1 = hidden.npy row v. Default ids (2, L // 2, L - 3). combine_hidden_states: optional
    per-chunk RMSNorm (fc_norm), then fc over the concatenation -> g_t [hidden];
  * one decoder layer at position p with token e and hidden g:
      en = RMSNorm(embed[e], input_layernorm)
      norm_before_residual: hn = RMSNorm(g, hidden_norm), residual = hn;  else residual = g, hn = RMSNorm(g, hidden_norm)
      x = concat(en, hn) [2 * hidden]  (q_a_proj and kv_a_proj_with_mqa read 2 * hidden)
      residual += MLA(x) (causal, its own latent cache, RoPE at p); h = RMSNorm(residual, post_attention_layernorm)
      out = RMSNorm(residual + MLP(h), norm); logits = lm_head(out); the fed-back hidden is the pre-norm
      sum residual + MLP(h) (norm_output: out);
  * context (llm_base_proposer set_inputs_first_pass): row t pairs g_t with token t + 1 at position t;
    the last context row pairs g with the pending token (the anchor). Drafting at anchor a (target
    passes covered positions 0 .. a - 1): the cache holds rows 0 .. a - 2; step 0 is the row at
    position a - 1 (g_{a-1}, anchor) -> draft 1; step i > 0 runs at position a - 1 + i with token
    draft i and the previous step's fed-back hidden -> draft i + 1 (greedy argmax each step);
  * MLA as DeepSeek-V3: q = q_b(RMSNorm(q_a(x))) per head [nope | rope]; kv_a(x) = [c | k_pe], c
    normalised by kv_a_layernorm, kv_b(c) per head [k_nope | v]; RoPE interleaved pairs
    (is_neox_style=False), DeepSeek YaRN; softmax scale (nope + rope)^-0.5 x mscale(f, mscale_all_dim)^2.
The math uses the stored (BF16-rounded) weights. A second, row-by-row implementation (complex RoPE,
online softmax over keys one at a time, a fresh loop over the context) must agree to 1e-10. VARIANTS
records how far plausible misreadings move the goldens.

Outputs in OUT_DIR (default tests/fixtures/k3_tiny_eagle3): config.json, model.safetensors, golden.json,
logits.npy [anchors, k, vocab] (along the greedy chain), fed.npy [anchors, k, hidden] (each step's
fed-back hidden, for localising a mismatch). With --variant: norm_before_residual, fc_norm and
norm_output all on (OUT_DIR default tests/fixtures/k3_tiny_eagle3_variant).

Usage: /usr/bin/python3 tools/make_golden_eagle3.py [--target tests/fixtures/k3_tiny] [--out DIR] [--variant]
"""
import argparse
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_golden_dspark import bf16_value, read_safetensors, rms_norm, rope_complex, rope_interleaved, silu, \
    top2_margin, yarn_mscale  # noqa: E402
from safetensors_writer import bf16_bits, write_json, write_shard  # noqa: E402

FIRST_SEED = 3911
SEED_ATTEMPTS = 60
MIN_TOP2_MARGIN = 1e-2      # greedy draft tokens must survive engine error (~2e-3 on logits)
BLOCK = 4
ANCHORS = [8, 13, 20, 27, 31]
SELF_CHECK_TOL = 1e-10
VARIANTS = {
    "neox_rope": "RoPE on halves (x[i], x[i + d/2]) instead of interleaved pairs",
    "no_mscale_squared": "softmax scale (nope + rope)^-0.5 without mscale(factor, mscale_all_dim)^2",
    "aux_ids_as_layer_outputs": "aux id v read as the output of layer v (hidden row v + 1) instead of its input",
    "swapped_concat": "x = concat(hidden, embedding) instead of concat(embedding, hidden)",
    "feed_normed": "norm_output read the other way (the normed output fed back, or the pre-norm sum)",
    "norm_before_residual": "norm_before_residual read the other way",
    "context_same_token": "context row t paired with token t instead of t + 1",
}

CONFIG = {
    "architectures": ["Eagle3DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "hidden_size": 48,
    "intermediate_size": 96,
    "num_hidden_layers": 1,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "q_lora_rank": 24,
    "kv_lora_rank": 16,
    "qk_nope_head_dim": 16,
    "qk_rope_head_dim": 8,
    "v_head_dim": 16,
    "hidden_act": "silu",
    "vocab_size": 320,
    "draft_vocab_size": 320,
    "rms_norm_eps": 1e-05,
    "max_position_embeddings": 4096,
    "rope_theta": 50000.0,
    "rope_scaling": {
        "type": "yarn",
        "factor": 4.0,
        "original_max_position_embeddings": 16,
        "beta_fast": 32,
        "beta_slow": 1,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
    },
    "target_hidden_size": 48,
    "eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 6, 10], "use_aux_hidden_state": True},
    "norm_before_residual": False,
    "tie_word_embeddings": False,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "torch_dtype": "bfloat16",
}
VARIANT_FLAGS = {"norm_before_residual": True, "fc_norm": True, "norm_output": True}

PROVENANCE = {
    "note": "semantics written from these public files (read, not copied; none is in this repository)",
    "repo": "vllm-project/vllm",
    "files": {
        "vllm/model_executor/models/deepseek_eagle3.py": "035901930680fd42ee182a4dd9f34a9f0a7804d9",
        "vllm/model_executor/models/deepseek_v2.py": "002d6073aa034d4f5545d45021b0e56d1f3c3593",
        "vllm/v1/spec_decode/llm_base_proposer.py": "00c4f22dae4795e34658bead82fa071e6bb7ae39",
        "vllm/v1/worker/gpu/spec_decode/eagle/eagle3_utils.py": "0cfdd2e15d6991f354c6e22fd7f7e7577afe0424",
    },
    "aux_convention": "K3 prefix_only capture (VLLM_KIMI_K3_AUX_ATTN_RES_STREAM=0): after 0-based layer v - 1 the "
                      "capture is prefix_sum + that layer's pending MLP output (KimiLinearModel."
                      "_capture_aux_hidden_stream, vllm/models/kimi_k3/nvidia/model.py as rendered at "
                      "https://docs.vllm.ai/en/latest/api/vllm/models/kimi_k3/nvidia/model/, lastmod 2026-09-23); "
                      "default ids (2, L // 2, L - 3)",
}


def aux_layers(cfg, num_target_layers):
    """vLLM's runner: top-level eagle_aux_hidden_state_layer_ids, target_layer_ids + 1, eagle_config.layer_ids;
    then the model's eagle_config.eagle_aux_hidden_state_layer_ids; else the default (2, L // 2, L - 3)."""
    eagle = cfg.get("eagle_config") or {}
    ids = cfg.get("eagle_aux_hidden_state_layer_ids") \
        or [i + 1 for i in cfg.get("target_layer_ids") or []] \
        or eagle.get("layer_ids") or eagle.get("eagle_aux_hidden_state_layer_ids") \
        or [2, num_target_layers // 2, num_target_layers - 3]
    return list(ids)


def make_weights(cfg, seed, flags):
    """Random head weights. Returns ({name: (dtype, stored array)}, {name: float64 value})."""
    rng = np.random.default_rng(seed)
    hid, inter, heads = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_attention_heads"]
    nope, rope, vdim = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
    qr, kvr = cfg["q_lora_rank"], cfg["kv_lora_rank"]
    aux = len(cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"])
    stored, value = {}, {}

    def put_bf16(name, x):
        bits = bf16_bits(x.astype(np.float32))
        stored[name] = ("BF16", bits)
        value[name] = bf16_value(bits)

    def linear(name, out_dim, in_dim, gain=1.0):
        put_bf16(name, gain * rng.standard_normal((out_dim, in_dim)) / math.sqrt(in_dim))

    def norm(name, dim):
        put_bf16(name, 1.0 + 0.1 * rng.standard_normal(dim))

    linear("fc.weight", hid, cfg["target_hidden_size"] * aux)
    p = "midlayer"
    norm(f"{p}.input_layernorm.weight", hid)
    norm(f"{p}.hidden_norm.weight", hid)
    norm(f"{p}.post_attention_layernorm.weight", hid)
    linear(f"{p}.self_attn.q_a_proj.weight", qr, 2 * hid)
    norm(f"{p}.self_attn.q_a_layernorm.weight", qr)
    linear(f"{p}.self_attn.q_b_proj.weight", heads * (nope + rope), qr)
    linear(f"{p}.self_attn.kv_a_proj_with_mqa.weight", kvr + rope, 2 * hid)
    norm(f"{p}.self_attn.kv_a_layernorm.weight", kvr)
    linear(f"{p}.self_attn.kv_b_proj.weight", heads * (nope + vdim), kvr)
    linear(f"{p}.self_attn.o_proj.weight", hid, heads * vdim)
    linear(f"{p}.mlp.gate_proj.weight", inter, hid)
    linear(f"{p}.mlp.up_proj.weight", inter, hid)
    linear(f"{p}.mlp.down_proj.weight", hid, inter)
    norm("norm.weight", hid)
    linear("lm_head.weight", cfg["draft_vocab_size"], hid, gain=3.0)
    if flags.get("fc_norm"):
        for j in range(aux):
            norm(f"fc_norm.{j}.weight", cfg["target_hidden_size"])
    return dict(sorted(stored.items())), value


def rope_tables(cfg):
    """(inv_freq [rope/2], cos/sin multiplier, softmax scale) for DeepSeek YaRN from rope_scaling."""
    rp, dim = cfg["rope_scaling"], cfg["qk_rope_head_dim"]
    base = cfg["rope_theta"]
    pos_freqs = base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
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
    scale = (cfg["qk_nope_head_dim"] + dim) ** -0.5
    return inv_freq, cos_mul, scale * yarn_mscale(factor, m_all) ** 2


def combined(cfg, w, hidden, count, layers, flags, row_of=lambda v: v):
    """g_t = fc(concat of the aux rows) for t < count [count, hidden]."""
    chunks = []
    for j, v in enumerate(layers):
        x = hidden[row_of(v), :count]
        if flags.get("fc_norm"):
            x = rms_norm(x, w[f"fc_norm.{j}.weight"], cfg["rms_norm_eps"])
        chunks.append(x)
    return np.concatenate(chunks, axis=-1) @ w["fc.weight"].T


class Head:
    """The vectorised implementation: a latent cache [(c, k_pe)] grown row by row, one MLA layer."""

    def __init__(self, cfg, w, embed, flags, variant=()):
        self.cfg, self.w, self.embed, self.flags, self.variant = cfg, w, embed, flags, variant
        inv_freq, cos_mul, scale = rope_tables(cfg)
        if "no_mscale_squared" in variant:
            scale = (cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]) ** -0.5
        self.rope = (inv_freq, cos_mul, scale, "neox_rope" in variant)
        self.c, self.pe = [], []

    def rows(self, tokens, g, positions):
        """Runs rows (token, hidden, position) appending to the cache; returns (logits, fed-back hidden)."""
        cfg, w, eps = self.cfg, self.w, self.cfg["rms_norm_eps"]
        heads, nope, rdim, vdim, kvr = (cfg["num_attention_heads"], cfg["qk_nope_head_dim"],
                                        cfg["qk_rope_head_dim"], cfg["v_head_dim"], cfg["kv_lora_rank"])
        inv_freq, cos_mul, scale, neox = self.rope
        p = "midlayer"
        pos = np.asarray(positions, dtype=np.float64)
        en = rms_norm(self.embed[tokens], w[f"{p}.input_layernorm.weight"], eps)
        before = self.flags.get("norm_before_residual", False) != ("norm_before_residual" in self.variant)
        hn = rms_norm(g, w[f"{p}.hidden_norm.weight"], eps)
        residual = hn if before else g
        x = np.concatenate([hn, en] if "swapped_concat" in self.variant else [en, hn], axis=-1)
        q = rms_norm(x @ w[f"{p}.self_attn.q_a_proj.weight"].T, w[f"{p}.self_attn.q_a_layernorm.weight"], eps)
        q = (q @ w[f"{p}.self_attn.q_b_proj.weight"].T).reshape(len(x), heads, nope + rdim)
        q_nope = q[..., :nope]
        q_pe = rope_interleaved(q[..., nope:].transpose(1, 0, 2), pos, inv_freq, cos_mul, neox).transpose(1, 0, 2)
        kv = x @ w[f"{p}.self_attn.kv_a_proj_with_mqa.weight"].T
        start = len(self.c)
        self.c += list(rms_norm(kv[:, :kvr], w[f"{p}.self_attn.kv_a_layernorm.weight"], eps))
        self.pe += list(rope_interleaved(kv[:, kvr:], pos, inv_freq, cos_mul, neox))
        c, k_pe = np.array(self.c), np.array(self.pe)
        kvb = (c @ w[f"{p}.self_attn.kv_b_proj.weight"].T).reshape(len(c), heads, nope + vdim)
        k_nope, v = kvb[..., :nope], kvb[..., nope:]
        scores = (np.einsum("qhd,khd->hqk", q_nope, k_nope) + np.einsum("qhd,kd->hqk", q_pe, k_pe)) * scale
        mask = np.arange(len(c))[None, :] > (start + np.arange(len(x)))[:, None]
        scores[:, mask] = -np.inf
        scores -= scores.max(axis=-1, keepdims=True)
        probs = np.exp(scores)
        probs /= probs.sum(axis=-1, keepdims=True)
        attn = np.einsum("hqk,khd->qhd", probs, v).reshape(len(x), heads * vdim)
        residual = residual + attn @ w[f"{p}.self_attn.o_proj.weight"].T
        h = rms_norm(residual, w[f"{p}.post_attention_layernorm.weight"], eps)
        gate, up = h @ w[f"{p}.mlp.gate_proj.weight"].T, h @ w[f"{p}.mlp.up_proj.weight"].T
        summed = residual + (silu(gate) * up) @ w[f"{p}.mlp.down_proj.weight"].T
        out = rms_norm(summed, w["norm.weight"], eps)
        fed = out if self.flags.get("norm_output", False) != ("feed_normed" in self.variant) else summed
        return out @ w["lm_head.weight"].T, fed


def draft_chain(cfg, w, embed, g, tokens, anchor, k, flags, variant=()):
    """Greedy chain of k drafts after the anchor (tokens[anchor]); target rows cover positions < anchor."""
    head = Head(cfg, w, embed, flags, variant)
    shift = 0 if "context_same_token" in variant else 1
    if anchor > 1:
        head.rows(tokens[shift:anchor - 1 + shift], g[:anchor - 1], list(range(anchor - 1)))
    logits, fed = head.rows([tokens[anchor]], g[anchor - 1:anchor], [anchor - 1])
    out_logits, out_fed, drafts = [logits[0]], [fed[0]], [int(np.argmax(logits[0]))]
    for i in range(1, k):
        logits, fed = head.rows([drafts[-1]], fed, [anchor - 1 + i])
        out_logits.append(logits[0])
        out_fed.append(fed[0])
        drafts.append(int(np.argmax(logits[0])))
    return np.array(out_logits), np.array(out_fed), drafts


def draft_chain_naive(cfg, w, embed, hidden, layers, tokens, anchor, k, flags):
    """The same chain one row at a time: complex RoPE, online softmax over the keys one by one."""
    eps = cfg["rms_norm_eps"]
    heads, nope, rdim, vdim, kvr = (cfg["num_attention_heads"], cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"],
                                    cfg["v_head_dim"], cfg["kv_lora_rank"])
    inv_freq, cos_mul, scale = rope_tables(cfg)
    p = "midlayer"
    kvb = w[f"{p}.self_attn.kv_b_proj.weight"].reshape(heads, nope + vdim, kvr)
    keys = []

    def g_of(t):
        parts = []
        for j, v in enumerate(layers):
            x = hidden[v, t]
            if flags.get("fc_norm"):
                x = rms_norm(x, w[f"fc_norm.{j}.weight"], eps)
            parts.append(x)
        return w["fc.weight"] @ np.concatenate(parts)

    def row(token, g, position):
        en = rms_norm(embed[token], w[f"{p}.input_layernorm.weight"], eps)
        hn = rms_norm(g, w[f"{p}.hidden_norm.weight"], eps)
        residual = hn if flags.get("norm_before_residual") else g
        x = np.concatenate([en, hn])
        kv = w[f"{p}.self_attn.kv_a_proj_with_mqa.weight"] @ x
        keys.append((rms_norm(kv[:kvr], w[f"{p}.self_attn.kv_a_layernorm.weight"], eps),
                     rope_complex(kv[kvr:], position, inv_freq, cos_mul)))
        qa = rms_norm(w[f"{p}.self_attn.q_a_proj.weight"] @ x, w[f"{p}.self_attn.q_a_layernorm.weight"], eps)
        q = (w[f"{p}.self_attn.q_b_proj.weight"] @ qa).reshape(heads, nope + rdim)
        outs = []
        for hd in range(heads):
            q_lat = kvb[hd, :nope].T @ q[hd, :nope]
            q_pe = rope_complex(q[hd, nope:], position, inv_freq, cos_mul)
            run_max, run_sum, acc = -math.inf, 0.0, np.zeros(kvr)
            for c, k_pe in keys:
                s = (q_lat @ c + q_pe @ k_pe) * scale
                new_max = max(run_max, s)
                decay = math.exp(run_max - new_max) if run_max > -math.inf else 0.0
                run_sum = run_sum * decay + math.exp(s - new_max)
                acc = acc * decay + math.exp(s - new_max) * c
                run_max = new_max
            outs.append(kvb[hd, nope:] @ (acc / run_sum))
        residual = residual + w[f"{p}.self_attn.o_proj.weight"] @ np.concatenate(outs)
        h = rms_norm(residual, w[f"{p}.post_attention_layernorm.weight"], eps)
        gate, up = w[f"{p}.mlp.gate_proj.weight"] @ h, w[f"{p}.mlp.up_proj.weight"] @ h
        summed = residual + w[f"{p}.mlp.down_proj.weight"] @ (gate / (1 + np.exp(-gate)) * up)
        out = rms_norm(summed, w["norm.weight"], eps)
        return w["lm_head.weight"] @ out, (out if flags.get("norm_output") else summed)

    for t in range(anchor - 1):
        row(tokens[t + 1], g_of(t), float(t))
    logits, fed = row(tokens[anchor], g_of(anchor - 1), float(anchor - 1))
    out = [logits]
    for i in range(1, k):
        logits, fed = row(int(np.argmax(out[-1])), fed, float(anchor - 1 + i))
        out.append(logits)
    return np.array(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--target", default=os.path.join(here, "tests/fixtures/k3_tiny"))
    ap.add_argument("--out", default=None)
    ap.add_argument("--variant", action="store_true", help="norm_before_residual, fc_norm and norm_output on")
    args = ap.parse_args()
    flags = dict(VARIANT_FLAGS) if args.variant else {}
    out_dir = args.out or os.path.join(here, "tests/fixtures/k3_tiny_eagle3" + ("_variant" if args.variant else ""))
    cfg = dict(CONFIG, **flags)

    target_cfg = json.load(open(os.path.join(args.target, "config.json")))
    num_layers = (target_cfg.get("text_config") or target_cfg)["num_hidden_layers"]
    layers = aux_layers(cfg, num_layers)
    golden_k3 = json.load(open(os.path.join(args.target, "golden.json")))
    tokens = golden_k3["prompt"] + golden_k3["generated"]
    hidden = np.load(os.path.join(args.target, "hidden.npy")).astype(np.float64)
    target = read_safetensors(os.path.join(args.target, "model.safetensors"), ["language_model.model.embed_tokens.weight"])
    embed = target["language_model.model.embed_tokens.weight"][0]
    assert embed.shape == (cfg["vocab_size"], cfg["hidden_size"])
    assert np.array_equal(hidden[0, :len(tokens)], embed[tokens])  # row 0 the embedding, row l + 1 layer l's output

    tried = []
    for seed in range(FIRST_SEED + (100 if args.variant else 0), FIRST_SEED + (100 if args.variant else 0) + SEED_ATTEMPTS):
        stored, w = make_weights(cfg, seed, flags)
        g = combined(cfg, w, hidden, len(tokens), layers, flags)
        chains = [draft_chain(cfg, w, embed, g, tokens, a, BLOCK, flags) for a in ANCHORS]
        margin = min(top2_margin(r) for logits, _, _ in chains for r in logits)
        tried.append({"seed": seed, "min_top2_margin": margin})
        print(f"seed {seed}: min top-2 margin {margin:.4g}")
        if margin >= MIN_TOP2_MARGIN:
            break
    else:
        sys.exit(f"no seed reaches margin {MIN_TOP2_MARGIN}")

    check = 0.0
    for a, (logits, _, _) in zip(ANCHORS, chains):
        naive = draft_chain_naive(cfg, w, embed, hidden, layers, tokens, a, BLOCK, flags)
        check = max(check, float(np.max(np.abs(naive - logits))))
    print(f"naive vs vectorised max |logit diff| {check:.3g}")
    if check > SELF_CHECK_TOL:
        sys.exit(f"self-check failed: {check} > {SELF_CHECK_TOL}")

    table = {}
    for name, what in VARIANTS.items():
        row_of = (lambda v: v + 1) if name == "aux_ids_as_layer_outputs" else (lambda v: v)
        gv = combined(cfg, w, hidden, len(tokens), layers, flags, row_of)
        diff, changed = 0.0, 0
        for (logits, _, drafts), a in zip(chains, ANCHORS):
            lv, _, dv = draft_chain(cfg, w, embed, gv, tokens, a, BLOCK, flags, variant=(name,))
            diff = max(diff, float(np.max(np.abs(lv - logits))))
            changed += sum(x != y for x, y in zip(dv, drafts))
        table[name] = {"what": what, "max_abs_logit_diff_along_own_chain": diff, "draft_tokens_changed": int(changed)}
        print(f"variant {name}: max |logit diff| (own chain) {diff:.3g}, draft tokens changed {changed}")

    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    write_shard(os.path.join(out_dir, "model.safetensors"), stored, metadata={"format": "pt"})
    reloaded = {n: v[0] for n, v in read_safetensors(os.path.join(out_dir, "model.safetensors"), list(stored)).items()}
    assert all(np.array_equal(reloaded[n], w[n]) for n in stored)
    np.save(os.path.join(out_dir, "logits.npy"), np.array([c[0] for c in chains], dtype=np.float32))
    np.save(os.path.join(out_dir, "fed.npy"), np.array([c[1] for c in chains], dtype=np.float32))
    inv_freq, cos_mul, scale = rope_tables(cfg)
    golden = {
        "script": "tools/make_golden_eagle3.py" + (" --variant" if args.variant else ""),
        "numpy": np.__version__,
        "math": "float64; weights as stored (BF16 upcast)",
        "flags": {k: bool(cfg.get(k, False)) for k in VARIANT_FLAGS},
        "seed": seed,
        "seeds_tried": tried,
        "target_fixture": "tests/fixtures/k3_tiny",
        "tokens": tokens,
        "aux_layer_ids": layers,
        "aux_rows": "vLLM aux id v = hidden.npy row v (the stream entering 0-based layer v, the output of layer v - 1)",
        "block": BLOCK,
        "anchors": ANCHORS,
        "draft_tokens": [c[2] for c in chains],
        "min_top2_margin": min(top2_margin(r) for c in chains for r in c[0]),
        "rope": {"inv_freq": inv_freq.tolist(), "cos_sin_multiplier": cos_mul, "softmax_scale": scale},
        "self_check_naive_max_abs_diff": check,
        "discrimination": table,
        "provenance": PROVENANCE,
    }
    write_json(os.path.join(out_dir, "golden.json"), golden)
    print(f"seed {seed}; draft tokens {[c[2] for c in chains]}")


if __name__ == "__main__":
    main()
