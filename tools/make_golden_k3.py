#!/usr/bin/env python3
"""Golden references for the Kimi K3 architecture from Moonshot's own release modeling code.

transformers 5.17 does not implement K3, so the reference is Moonshot's `modeling_kimi_linear.py`
(the K3 release remote code, in a public verbatim copy; see REFERENCE_SOURCE) run unmodified on
the GPU machine. That file imports `fla` (flash-linear-attention), whose Triton kernels are not
installed there; this script installs pure-torch stand-ins for exactly those imports, taken from
transformers' own `kimi_linear` module (torch chunk / recurrent KDA, causal_conv1d_fn/update, the
gated RMSNorm), plus FLA's documented gate formula. The fetched code is never committed: pass the
directory holding it with --reference-code (the lead keeps it in the ignored folder `.refcode/`).

For each tiny config it:
  1. writes config.json in the real K3 layout (model_type kimi_k3, nested text_config of
     model_type kimi_linear, vision_config placeholder, quantization_config for MXFP4);
  2. builds the release KimiLinearForCausalLM from that text_config, randomises every parameter
     (norms, biases, A_log, dt_bias, conv taps, e_score_correction_bias, AttnRes queries) so that
     biased routing differs from unbiased routing, rounds them to the storage dtypes, and writes
     the checkpoint in the real layout (`language_model.` prefix, one tensor per expert projection
     w1/w2/w3, F32 A_log/dt_bias/e_score bias/conv taps/KDA o_norm, BF16 otherwise, or MXFP4
     `weight_packed` U8 [N, K/2] (low nibble = even column) + `weight_scale` U8 E8M0 [N, K/32]
     for routed experts), sharded with model.safetensors.index.json for one fixture;
  3. loads the stored values back (MXFP4 dequantized exactly) into the release model, float32 on
     CUDA with TF32 off, and records: a 24-token greedy continuation made with the model's own
     KimiDynamicCache (prefill, then one token per step), float32 logits of every position from one
     uncached forward over prompt + continuation, per-layer AttnRes prefix sums and the sealed
     block snapshots.

Outputs (per fixture dir): config.json, *.safetensors [+ index], golden.json, logits.npy
[T, vocab] f32, hidden.npy [L + 3, T, hidden] f32 (row 0 embedding, row l+1 the output P_l of
layer l (the within-block AttnRes prefix sum the release returns), row L+1 the output AttnRes
mix, row L+2 the final-normed hidden fed to lm_head). The sealed AttnRes snapshots are hidden
rows 0, bs, 2*bs, ... (checked against the release's block_residual when generating).

Usage: python3 tools/make_golden_k3.py OUT_DIR --reference-code .refcode
"""
import argparse
import contextlib
import hashlib
import importlib
import json
import math
import os
import re
import shutil
import sys
import types

import numpy as np
import torch
import torch.nn.functional as F
import transformers
from safetensors.torch import save_file
from torch import nn

PROMPT_LEN = 8
GEN_LEN = 24
MIN_TOP2_MARGIN = 2e-3      # reject seeds whose greedy path has a near-tie (flips legitimately)
SEED_ATTEMPTS = 8

# Where the reference code came from. The sha256 is checked (warning only) and recorded.
REFERENCE_SOURCE = {
    "modeling_kimi_linear.py": {
        "repo": "TOOLS-droid724/Vedika-5.6-PRO", "path": "modeling_kimi_linear.py",
        "commit": "a11b9e07baacd54412be7d086c4001fe5449cc89",
        "sha256": "df61709f6565b8a6e5b71a96ac9c8e123eddebea4658ae9c7a32a81c5df0f96c",
        "upstream": "moonshotai/Kimi-K3 modeling_kimi_linear.py (Kimi K3 License header); this copy "
                    "imports its config as `.vedika_configuration_kimi_k3`",
    },
    "vedika_configuration.py": {
        "repo": "TOOLS-droid724/Vedika-5.6-PRO", "path": "vedika_configuration.py",
        "commit": "66937d39acb6d332d9520bec781b672412e7d629",
        "sha256": "f0076d79269e5252db7ff26ae507e8d40213a64296062f10c3fabff8029a3803",
        "upstream": "moonshotai/Kimi-K3 configuration_kimi_k3.py with KimiLinearConfig renamed "
                    "VedikaLinearConfig (model_type default renamed); field handling identical",
    },
}


# ---------------------------------------------------------------------------------------------
# Pure-torch stand-ins for the `fla` imports of the release code.

def _tf_kimi_linear():
    # Must run before the fake `fla` package exists: transformers 5.17's
    # use_kernel_func_from_hub_with_fallback("chunk_kda", "fla") resolves `fla` when the module is
    # imported, and would otherwise bind our own stand-ins (infinite recursion).
    if "fla" in sys.modules and getattr(sys.modules["fla"], "__version__", "") == "0+pure-torch-shim" \
            and "transformers.models.kimi_linear.modeling_kimi_linear" not in sys.modules:
        raise RuntimeError("import transformers' kimi_linear before installing the fla stand-ins")
    return importlib.import_module("transformers.models.kimi_linear.modeling_kimi_linear")


def _pick(mod, names, pattern):
    for n in names:
        f = getattr(mod, n, None)
        if callable(f) and not isinstance(f, type):
            return n, f
    for n in sorted(dir(mod)):
        f = getattr(mod, n)
        if re.search(pattern, n) and callable(f) and not isinstance(f, type):
            return n, f
    return None, None


def fla_kda_gate(g, A_log, dt_bias, lower_bound):
    """FLA's in-kernel KDA gate (fla/ops/kda/gate.py naive_kda_lowerbound_gate / naive_kda_gate).

    K3 (gate_lower_bound=-5): g = lower_bound * sigmoid(exp(A_log[h]) * (g + dt_bias[h, c])).
    Without a lower bound (Kimi-Linear-48B): g = -exp(A_log[h]) * softplus(g + dt_bias[h, c]).
    """
    H = g.shape[-2]
    g = g.float()
    if dt_bias is not None:
        g = g + dt_bias.float().view(H, -1)
    a = A_log.float().view(H, 1).exp()
    if lower_bound is not None:
        return lower_bound * torch.sigmoid(a * g)
    return -a * F.softplus(g)


class FlaShims:
    """The callables installed as fla.ops.kda / fla.modules, backed by transformers' kimi_linear."""

    def __init__(self):
        self.tfm = _tf_kimi_linear()
        self.chunk_name, self.chunk_fn = _pick(
            self.tfm, ["torch_chunk_kda", "chunk_kimi_delta_attention", "torch_chunk_kimi_delta_attention"],
            r"chunk.*(kda|kimi_delta)")
        self.rec_name, self.rec_fn = _pick(
            self.tfm, ["torch_recurrent_kda", "recurrent_kimi_delta_attention",
                       "torch_recurrent_kimi_delta_attention", "fused_recurrent_kimi_delta_attention"],
            r"recurrent.*(kda|kimi_delta)")
        self.conv_name, self.conv_fn = _pick(self.tfm, ["causal_conv1d_fn", "torch_causal_conv1d_fn"], r"^$")
        self.upd_name, self.upd_fn = _pick(self.tfm, ["causal_conv1d_update", "torch_causal_conv1d_update"], r"^$")
        self.norm_cls = getattr(self.tfm, "KimiLinearRMSNormGated", None)
        if self.chunk_fn is None or self.rec_fn is None:
            raise RuntimeError("transformers' kimi_linear has no torch chunk/recurrent KDA function; found: "
                               + ", ".join(n for n in dir(self.tfm) if "kda" in n.lower() or "delta" in n.lower()))

    def describe(self):
        return {
            "chunk_kda": f"transformers.models.kimi_linear.modeling_kimi_linear.{self.chunk_name}",
            "fused_recurrent_kda": f"transformers.models.kimi_linear.modeling_kimi_linear.{self.rec_name}",
            "ShortConvolution": "nn.Conv1d + transformers kimi_linear "
                                f"{self.conv_name or 'F.conv1d (fallback)'} / {self.upd_name or 'F.conv1d (fallback)'}",
            "FusedRMSNormGated": ("transformers kimi_linear KimiLinearRMSNormGated.forward with activation "
                                  "'sigmoid'") if self.norm_cls is not None else "torch formula (fallback)",
            "kda_gate": "FLA naive_kda_lowerbound_gate formula (use_gate_in_kernel=True)",
        }

    # -- KDA ---------------------------------------------------------------------------------
    def _kda(self, fn, q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
             use_qk_l2norm_in_kernel=False, use_gate_in_kernel=False, use_beta_sigmoid_in_kernel=False,
             A_log=None, dt_bias=None, lower_bound=None, safe_gate=False, transpose_state_layout=False,
             cu_seqlens=None, allow_neg_eigval=False, **unused):
        if cu_seqlens is not None:
            raise NotImplementedError("varlen KDA is not used by these fixtures")
        if scale is not None and abs(scale - q.shape[-1] ** -0.5) > 1e-12:
            raise NotImplementedError("the transformers KDA functions always scale q by K^-0.5")
        if use_gate_in_kernel:
            g = fla_kda_gate(g, A_log, dt_bias, lower_bound)
        if use_beta_sigmoid_in_kernel:
            beta = beta.float().sigmoid() * (2.0 if allow_neg_eigval else 1.0)
        state = initial_state
        if state is not None and transpose_state_layout:      # FLA [B,H,V,K] -> transformers [B,H,K,V]
            state = state.transpose(-1, -2).contiguous()
        o, state = fn(q, k, v, g, beta, initial_state=state, output_final_state=output_final_state,
                      use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel)
        if state is not None and transpose_state_layout:
            state = state.transpose(-1, -2).contiguous()
        return o, state

    def chunk_kda(self, q, k, v, g, beta, **kw):
        return self._kda(self.chunk_fn, q, k, v, g, beta, **kw)

    def fused_recurrent_kda(self, q, k, v, g, beta, **kw):
        return self._kda(self.rec_fn, q, k, v, g, beta, **kw)

    # -- short convolution -------------------------------------------------------------------
    def conv_prefill(self, x_bdt, w_dw, activation):
        if self.conv_fn is not None:
            return self.conv_fn(x_bdt, w_dw, None, activation=activation)
        T, W = x_bdt.shape[-1], w_dw.shape[-1]
        y = F.conv1d(x_bdt, w_dw.unsqueeze(1), padding=W - 1, groups=x_bdt.shape[1])[..., :T]
        return F.silu(y) if activation in ("silu", "swish") else y

    def conv_update(self, x_bdt, state, w_dw, activation):
        if self.upd_fn is not None:
            return self.upd_fn(x_bdt, state, w_dw, None, activation=activation)
        T, W = x_bdt.shape[-1], state.shape[-1]
        full = torch.cat([state, x_bdt], dim=-1)
        state.copy_(full[..., -W:])
        y = F.conv1d(full, w_dw.unsqueeze(1), groups=x_bdt.shape[1])[..., -T:]
        return F.silu(y) if activation in ("silu", "swish") else y

    def make_short_convolution(shims):
        class ShortConvolution(nn.Conv1d):
            """fla.modules.ShortConvolution: depthwise causal conv, weight [D, 1, W], state [B, D, W]."""

            def __init__(self, hidden_size, kernel_size, bias=False, activation="silu", **unused):
                super().__init__(hidden_size, hidden_size, kernel_size, groups=hidden_size,
                                 padding=kernel_size - 1, bias=bias)
                self.hidden_size = hidden_size
                self.activation = activation

            def forward(self, x, residual=None, mask=None, cache=None, output_final_state=False,
                        cu_seqlens=None, **unused):
                if residual is not None or mask is not None or cu_seqlens is not None or self.bias is not None:
                    raise NotImplementedError("ShortConvolution stand-in: plain causal use only")
                W = self.kernel_size[0]
                xt = x.transpose(1, 2)
                w = self.weight.squeeze(1)
                if cache is None:
                    y = shims.conv_prefill(xt, w, self.activation)
                    state = F.pad(xt, (max(W - xt.shape[-1], 0), 0))[..., -W:].contiguous() \
                        if output_final_state else None
                else:
                    state = cache
                    y = shims.conv_update(xt, state, w, self.activation)
                return y.transpose(1, 2), state
        return ShortConvolution

    def make_gated_norm(shims):
        base = shims.norm_cls
        use = {"base": base is not None}

        class FusedRMSNormGated(nn.Module):
            """fla.modules.FusedRMSNormGated: RMSNorm(x) * weight * act(gate), norm before gate."""

            def __init__(self, hidden_size, elementwise_affine=True, eps=1e-5, activation="swish", **unused):
                super().__init__()
                self.weight = nn.Parameter(torch.ones(hidden_size))
                self.variance_epsilon = eps
                self.eps = eps
                self.activation = activation

            def forward(self, x, g, residual=None, prenorm=False, residual_in_fp32=False):
                if use["base"]:
                    return base.forward(self, x, g)
                return self.formula(x, g)

            def formula(self, x, g):
                dtype = x.dtype
                xf = x.float()
                xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
                act = torch.sigmoid if self.activation == "sigmoid" else F.silu
                return (self.weight * xf.to(dtype) * act(g.float()).to(dtype)).to(dtype)

        # Use transformers' forward only if it honours activation='sigmoid' (probe on CPU).
        if use["base"]:
            probe = FusedRMSNormGated(8, eps=1e-5, activation="sigmoid")
            with torch.no_grad():
                probe.weight.copy_(torch.linspace(0.5, 1.5, 8))
                xg = torch.randn(2, 3, 8, generator=torch.Generator().manual_seed(7))
                gg = torch.randn(2, 3, 8, generator=torch.Generator().manual_seed(8))
                try:
                    ok = torch.allclose(base.forward(probe, xg, gg), probe.formula(xg, gg), atol=1e-6)
                except Exception as exc:
                    print("  KimiLinearRMSNormGated.forward unusable:", repr(exc))
                    ok = False
            if not ok:
                print("  KimiLinearRMSNormGated does not honour activation='sigmoid'; using the formula")
                use["base"] = False
                shims.norm_cls = None
        return FusedRMSNormGated

    def install(self):
        """Registers a fake `fla` package exposing exactly the names the release code imports."""
        def module(name):
            m = types.ModuleType(name)
            m.__path__ = []
            sys.modules[name] = m
            return m
        fla = module("fla")
        fla.__version__ = "0+pure-torch-shim"
        modules = module("fla.modules")
        modules.ShortConvolution = self.make_short_convolution()
        modules.FusedRMSNormGated = self.make_gated_norm()
        module("fla.ops")
        kda = module("fla.ops.kda")
        kda.chunk_kda = self.chunk_kda
        kda.fused_recurrent_kda = self.fused_recurrent_kda
        gate = module("fla.ops.kda.gate")
        gate.fused_kda_gate = lambda g, A_log, dt_bias=None, lower_bound=None, **kw: \
            fla_kda_gate(g, A_log, dt_bias, lower_bound)
        module("fla.ops.utils")
        index = module("fla.ops.utils.index")
        index.prepare_lens_from_mask = lambda mask: mask.sum(dim=-1, dtype=torch.int32)
        index.prepare_cu_seqlens_from_mask = lambda mask, dtype=torch.int32: F.pad(
            mask.sum(dim=-1, dtype=torch.int32).cumsum(dim=0, dtype=dtype), (1, 0))
        utils = module("fla.utils")
        utils.tensor_cache = lambda fn: fn
        return self


def naive_kda_check(q, k, v, g, beta, S0):
    """Token-by-token KDA (FLA naive_recurrent_kda semantics), only to check the stand-ins' wiring.

    q,k [B,T,H,K] (already l2-normalised), v [B,T,H,V], g log-decay [B,T,H,K], beta [B,T,H],
    S0 [B,H,K,V]. Decay first, delta update, read-out after the update; q scaled by K^-0.5.
    """
    q, k, v, g, beta = (t.double() for t in (q, k, v, g, beta))
    S = S0.double().clone()
    out = torch.zeros_like(v)
    scale = q.shape[-1] ** -0.5
    for t in range(q.shape[1]):
        S = S * g[:, t].exp().unsqueeze(-1)
        pred = torch.einsum("bhk,bhkv->bhv", k[:, t], S)
        S = S + torch.einsum("bhk,bhv->bhkv", k[:, t], beta[:, t].unsqueeze(-1) * (v[:, t] - pred))
        out[:, t] = torch.einsum("bhk,bhkv->bhv", q[:, t] * scale, S)
    return out, S


@torch.no_grad()
def self_check(shims, device):
    """Checks the stand-ins against each other and against the token recurrence; returns errors."""
    gen = torch.Generator().manual_seed(1234)
    B, T, H, K, V = 1, 37, 3, 8, 6          # V != K so a state-layout mix-up cannot pass
    r = lambda *s: torch.randn(*s, generator=gen).to(device)
    q, k, v, graw, braw = r(B, T, H, K), r(B, T, H, K), r(B, T, H, V), r(B, T, H, K), r(B, T, H)
    A_log = torch.log(torch.rand(H, generator=gen) * 15 + 1).to(device)
    dt_bias = (0.5 * torch.randn(H * K, generator=gen)).to(device)
    S0 = (0.3 * torch.randn(B, H, V, K, generator=gen)).to(device)        # FLA layout [B,H,V,K]
    kw = dict(A_log=A_log, dt_bias=dt_bias, use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True,
              use_beta_sigmoid_in_kernel=True, lower_bound=-5.0, transpose_state_layout=True,
              output_final_state=True)
    o_c, s_c = shims.chunk_kda(q, k, v, graw, braw, initial_state=S0, safe_gate=True, **kw)
    o_r, s_r = shims.fused_recurrent_kda(q, k, v, graw, braw, initial_state=S0, **kw)
    o_a, s_a = shims.chunk_kda(q[:, :20], k[:, :20], v[:, :20], graw[:, :20], braw[:, :20],
                               initial_state=S0, safe_gate=True, **kw)
    o_b, s_b = shims.fused_recurrent_kda(q[:, 20:], k[:, 20:], v[:, 20:], graw[:, 20:], braw[:, 20:],
                                         initial_state=s_a, **kw)
    l2 = lambda x: x * torch.rsqrt((x * x).sum(-1, keepdim=True) + 1e-6)
    o_n, s_n = naive_kda_check(l2(q.float()), l2(k.float()), v, fla_kda_gate(graw, A_log, dt_bias, -5.0),
                               braw.sigmoid(), S0.transpose(-1, -2))
    s_n = s_n.transpose(-1, -2)
    rel = lambda a, b: float((a.double() - b.double()).abs().max() / (b.double().abs().max() + 1e-30))
    out = {
        "kda_chunk_vs_naive": rel(o_c, o_n), "kda_chunk_state_vs_naive": rel(s_c, s_n),
        "kda_recurrent_vs_naive": rel(o_r, o_n), "kda_recurrent_state_vs_naive": rel(s_r, s_n),
        "kda_split_prefill_decode_vs_naive": rel(torch.cat([o_a, o_b], 1), o_n),
    }
    # short convolution: prefill vs direct conv, and prefill(T-1) + update(1) vs prefill(T)
    conv_cls = sys.modules["fla.modules"].ShortConvolution
    conv = conv_cls(hidden_size=6, kernel_size=4, activation="silu").to(device)
    with torch.no_grad():
        conv.weight.copy_(r(6, 1, 4))
    x = r(1, 9, 6)
    y_full, st_full = conv(x, output_final_state=True)
    direct = F.silu(F.conv1d(F.pad(x.transpose(1, 2), (3, 0)), conv.weight, groups=6)).transpose(1, 2)
    y_a, st = conv(x[:, :8], output_final_state=True)
    y_b, st = conv(x[:, 8:], cache=st, output_final_state=True)
    out["conv_prefill_vs_direct"] = rel(y_full, direct)
    out["conv_prefill_plus_update_vs_prefill"] = rel(torch.cat([y_a, y_b], 1), y_full)
    out["conv_state_vs_prefill_state"] = rel(st, st_full)
    norm = sys.modules["fla.modules"].FusedRMSNormGated(8, eps=1e-5, activation="sigmoid").to(device)
    with torch.no_grad():
        norm.weight.copy_(r(8))
    xn, gn = r(2, 5, 3, 8), r(2, 5, 3, 8)
    want = xn * torch.rsqrt(xn.pow(2).mean(-1, keepdim=True) + 1e-5) * norm.weight * gn.sigmoid()
    out["gated_norm_vs_formula"] = rel(norm(xn, gn), want)
    bad = {kk: vv for kk, vv in out.items() if not vv < 1e-4}
    if bad:
        raise RuntimeError(f"fla stand-in self-check failed: {bad}")
    return out


# ---------------------------------------------------------------------------------------------
# Loading the release code.

def _passthrough(fn=None, *args, **kwargs):
    if callable(fn) and not args and not kwargs:
        return fn
    return lambda f: f


@contextlib.contextmanager
def _patched(patches):
    saved = []
    for mod, name, value, always in patches:
        had = hasattr(mod, name)
        if always or not had:
            saved.append((mod, name, had, getattr(mod, name, None)))
            setattr(mod, name, value)
    try:
        yield
    finally:
        for mod, name, had, old in reversed(saved):
            if had:
                setattr(mod, name, old)
            else:
                delattr(mod, name)


def _sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def causal_mask(config=None, input_embeds=None, inputs_embeds=None, attention_mask=None,
                cache_position=None, past_key_values=None, position_ids=None, **unused):
    """Replaces transformers' create_causal_mask (whose keyword API changed after the release was
    written): the additive causal mask [B, 1, T, past + T] the release's eager MLA adds to its
    scores. Single unpadded sequences only."""
    emb = input_embeds if input_embeds is not None else inputs_embeds
    if attention_mask is not None and not bool(attention_mask.bool().all()):
        raise NotImplementedError("padding masks are not used by these fixtures")
    B, T = emb.shape[:2]
    past = int(cache_position[0]) if cache_position is not None else 0
    qpos = torch.arange(past, past + T, device=emb.device)[:, None]
    kpos = torch.arange(past + T, device=emb.device)[None, :]
    m = torch.zeros(T, past + T, dtype=emb.dtype, device=emb.device)
    m = m.masked_fill(kpos > qpos, torch.finfo(emb.dtype).min)
    return m[None, None].expand(B, 1, T, past + T)


def load_release(refdir):
    """Imports the release modeling module from `refdir` as package `k3ref`; returns (mk, config class, files)."""
    refdir = os.path.abspath(refdir)
    modeling = None
    for cand in ("modeling_kimi_linear.py", "modeling_kimi_k3.py", "modeling_kimi.py"):
        p = os.path.join(refdir, cand)
        if os.path.exists(p) and "class KimiLinearForCausalLM" in open(p).read():
            modeling = cand
            break
    if modeling is None:
        raise FileNotFoundError(f"no K3 release modeling file (modeling_kimi_linear.py) in {refdir}")
    src = open(os.path.join(refdir, modeling)).read()
    m = re.search(r"from \.(\w+) import KimiLinearConfig", src)
    if not m:
        raise RuntimeError("the modeling file does not import KimiLinearConfig from a sibling module")
    cfg_module = m.group(1)

    pkg = types.ModuleType("k3ref")
    pkg.__path__ = [refdir]
    sys.modules["k3ref"] = pkg
    files = {modeling: os.path.join(refdir, modeling)}
    cfg_cls = None
    if os.path.exists(os.path.join(refdir, cfg_module + ".py")):
        cfg_cls = importlib.import_module(f"k3ref.{cfg_module}").KimiLinearConfig
        files[cfg_module + ".py"] = os.path.join(refdir, cfg_module + ".py")
    else:
        # The copy's config module is named differently: take the text config class from the other
        # files (a PretrainedConfig with is_kda_layer and attn_res_block_size handling).
        for fn in sorted(os.listdir(refdir)):
            if not fn.endswith(".py") or fn == modeling:
                continue
            text = open(os.path.join(refdir, fn)).read()
            if "def is_kda_layer" not in text or "attn_res_block_size" not in text:
                continue
            mod = importlib.import_module(f"k3ref.{fn[:-3]}")
            for name in ("KimiLinearConfig", "KimiK3TextConfig", "VedikaLinearConfig"):
                if hasattr(mod, name):
                    cfg_cls = getattr(mod, name)
                    break
            if cfg_cls is not None:
                files[fn] = os.path.join(refdir, fn)
                break
        if cfg_cls is None:
            raise FileNotFoundError(f"no KimiLinearConfig class found in {refdir}")
        alias = types.ModuleType(f"k3ref.{cfg_module}")
        alias.KimiLinearConfig = cfg_cls
        sys.modules[f"k3ref.{cfg_module}"] = alias

    import transformers.pytorch_utils as tpu
    import transformers.utils.generic as tug

    class _OutputRecorder:                       # only consulted by transformers' output capturing
        def __init__(self, *args, **kwargs):
            self.args, self.kwargs = args, kwargs

    # check_model_inputs only does transformers' output capturing / kwarg defaulting (its calling
    # convention changed across 5.x); the model math is untouched, so it is a pass-through here.
    patches = [(tug, "check_model_inputs", _passthrough, True),
               (tug, "OutputRecorder", _OutputRecorder, False),
               (tpu, "ALL_LAYERNORM_LAYERS", [], False)]
    with _patched(patches):
        mk = importlib.import_module(f"k3ref.{modeling[:-3]}")
    mk.create_causal_mask = causal_mask
    # transformers >= 5.14 GenerationConfig.from_model_config walks get_text_config() and mistakes
    # linear_attn_config for a sub-config (same patch as simply's gen_k3_golden.py).
    cfg_cls.get_text_config = lambda self, *a, **kw: self
    return mk, cfg_cls, files


def build_model(mk, cfg):
    try:
        model = mk.KimiLinearForCausalLM(cfg)
    except Exception as exc:       # transformers-version plumbing around tied-weight bookkeeping
        print("  model construction failed once:", repr(exc), "- retrying with _tied_weights_keys = {}")
        mk.KimiLinearForCausalLM._tied_weights_keys = {}
        model = mk.KimiLinearForCausalLM(cfg)
    model.config._attn_implementation = "eager"   # the release force-sets flash_attention_2
    return model.float().eval()


# ---------------------------------------------------------------------------------------------
# Configs, weights, storage.

K3_TINY = dict(
    name="k3_tiny", seed=301, shards=1, mxfp4=False, pad_a_log=False,
    vocab_size=320, hidden_size=48, num_hidden_layers=13, full_attn_layers=[4, 8, 12, 13],
    attn_res_block_size=3, intermediate_size=96,
    num_attention_heads=4, q_lora_rank=24, kv_lora_rank=16, qk_nope_head_dim=16, qk_rope_head_dim=8,
    v_head_dim=16, kda_heads=4, kda_head_dim=16,
    num_experts=8, num_experts_per_token=2, num_shared_experts=2, moe_intermediate_size=16,
    routed_expert_hidden_size=32,
)

K3_TINY_MXFP4 = dict(
    name="k3_tiny_mxfp4", seed=302, shards=3, mxfp4=True, pad_a_log=True, mxfp4_scale_bytes=(120, 123),
    vocab_size=320, hidden_size=48, num_hidden_layers=8, full_attn_layers=[4, 8],
    attn_res_block_size=3, intermediate_size=96,
    num_attention_heads=4, q_lora_rank=32, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8,
    v_head_dim=16, kda_heads=4, kda_head_dim=16,
    num_experts=10, num_experts_per_token=4, num_shared_experts=2, moe_intermediate_size=64,
    routed_expert_hidden_size=32,     # w1/w3 [64, 32] (one scale group per row), w2 [32, 64] (two)
)


def text_config(spec):
    L = spec["num_hidden_layers"]
    full = list(spec["full_attn_layers"])
    keys = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
            "num_experts", "num_experts_per_token", "num_shared_experts", "moe_intermediate_size",
            "routed_expert_hidden_size", "attn_res_block_size")
    tc = {k: spec[k] for k in keys}
    tc.update(
        architectures=["KimiLinearForCausalLM"], model_type="kimi_linear",
        num_key_value_heads=spec["num_attention_heads"],
        hidden_act="situ", activation_situ_beta=4.0, activation_situ_linear_beta=25.0,
        rms_norm_eps=1e-5, initializer_range=0.02, use_cache=True, tie_word_embeddings=False,
        max_position_embeddings=4096, bos_token_id=1, eos_token_id=2, pad_token_id=0,
        mla_use_nope=True, mla_use_output_gate=True,
        latent_moe_use_norm=True, moe_renormalize=True, moe_router_activation_func="sigmoid",
        routed_scaling_factor=1.0, first_k_dense_replace=1, moe_layer_freq=1,
        use_grouped_topk=True, num_expert_group=1, topk_group=1, topk_method="noaux_tc",
        num_nextn_predict_layers=0,
        linear_attn_config={
            "kda_layers": [i for i in range(1, L + 1) if i not in full],   # 1-based, like the release
            "full_attn_layers": full,
            "head_dim": spec["kda_head_dim"], "num_heads": spec["kda_heads"],
            "short_conv_kernel_size": 4, "gate_lower_bound": -5.0, "use_full_rank_gate": True,
        },
        torch_dtype="bfloat16",
    )
    return tc


def quantization_config():
    return {
        "quant_method": "compressed-tensors", "format": "mxfp4-pack-quantized",
        "quantization_status": "compressed", "kv_cache_scheme": None,
        "config_groups": {"group_0": {
            "format": "mxfp4-pack-quantized",
            "targets": [r"re:.*block_sparse_moe\.experts\.\d+\.w[123]$"],
            "weights": {"num_bits": 4, "type": "float", "symmetric": True, "strategy": "group",
                        "group_size": 32, "dynamic": False, "scale_dtype": "torch.uint8",
                        "zp_dtype": None, "actorder": None, "observer": None},
            "input_activations": None, "output_activations": None}},
        "ignore": ["lm_head", r"re:.*vision_tower.*", r"re:.*mm_projector.*"],
    }


def engine_config(spec, tc):
    """The on-disk config.json: multimodal wrapper with the text model nested (real K3 layout)."""
    d = {
        "architectures": ["KimiK3ForConditionalGeneration"], "model_type": "kimi_k3",
        "text_config": dict(tc),
        # Placeholder only: these fixtures hold no vision tensors (vision_tower.*, mm_projector.*).
        "vision_config": {"patch_size": 14, "vt_hidden_size": 1024, "vt_num_hidden_layers": 27,
                          "vt_num_attention_heads": 16, "merge_kernel_size": [2, 2],
                          "mm_projector_type": "patchmergerv2", "text_hidden_size": tc["hidden_size"]},
        "ignore_index": -100, "media_placeholder_token_id": 163605, "pad_token_id": 0,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    }
    if spec["mxfp4"]:
        d["quantization_config"] = quantization_config()
        d["text_config"]["quantization_config"] = quantization_config()
    return d


def reference_config(cfg_cls, tc):
    kwargs = {k: v for k, v in tc.items() if k not in ("architectures", "torch_dtype", "quantization_config")}
    cfg = cfg_cls(**kwargs)
    cls = type(cfg)
    if not hasattr(cfg, "use_return_dict"):
        cls.use_return_dict = property(lambda self: True)
    if not hasattr(cfg, "return_dict"):
        cls.return_dict = True
    for name in ("output_attentions", "output_hidden_states"):
        if not hasattr(cfg, name):
            setattr(cls, name, False)
    return cfg


def randomise(model, gen):
    """Deterministic fill of every parameter (sorted names, one generator)."""
    sd = model.state_dict()
    out = {}
    for name in sorted(sd):
        t = sd[name]
        shape = tuple(t.shape)
        if name.endswith("A_log"):
            v = torch.log(torch.rand(shape, generator=gen) * 15.0 + 1.0)           # log U(1, 16)
        elif name.endswith("dt_bias"):
            v = 0.5 * torch.randn(shape, generator=gen)
        elif name.endswith("e_score_correction_bias"):
            v = 0.15 * torch.randn(shape, generator=gen)
        elif "conv1d.weight" in name:
            v = 0.5 * torch.randn(shape, generator=gen)
        elif name.endswith("norm.weight") or name.endswith("layernorm.weight"):
            v = 1.0 + 0.1 * torch.randn(shape, generator=gen)
        elif name.endswith("embed_tokens.weight"):
            v = 0.5 * torch.randn(shape, generator=gen)
        elif name.endswith("_res_proj.weight"):                                  # AttnRes queries [1, d]
            v = 1.5 * torch.randn(shape, generator=gen) / math.sqrt(shape[1])
        elif len(shape) == 2:
            v = torch.randn(shape, generator=gen) / math.sqrt(shape[1])
        else:
            raise RuntimeError(f"no init rule for {name} {shape}")
        out[name] = v.float()
    return out


F32_SUFFIXES = ("A_log", "dt_bias", "e_score_correction_bias")
MXFP4_LUT = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                          -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], dtype=torch.float32)


def is_f32(name):
    return name.endswith(F32_SUFFIXES) or "conv1d.weight" in name or name.endswith("self_attn.o_norm.weight")


def is_routed_expert(name):
    return re.search(r"block_sparse_moe\.experts\.\d+\.w[123]\.weight$", name) is not None


def mxfp4_dequantize(packed, scale):
    """weight_packed U8 [N, K/2] (low nibble = even column), weight_scale U8 E8M0 [N, K/32] -> f32 [N, K]."""
    p = packed.to(torch.int64)
    n, kh = p.shape
    w = torch.empty(n, 2 * kh, dtype=torch.float32)
    w[:, 0::2] = MXFP4_LUT[p & 0xF]
    w[:, 1::2] = MXFP4_LUT[p >> 4]
    s = (scale.to(torch.int32) << 23).view(torch.float32)     # E8M0: exactly 2^(byte - 127), byte 1..254
    return w * s.repeat_interleave(32, dim=1)


def store(values, spec, gen, num_heads):
    """values: model-key -> f32. Returns (stored checkpoint dict with real names, model-key -> f32 as stored)."""
    stored, effective = {}, {}
    for name in sorted(values):
        t = values[name]
        key = "language_model." + name
        if spec["mxfp4"] and is_routed_expert(name):
            n, k = t.shape
            lo, hi = spec["mxfp4_scale_bytes"]
            packed = torch.randint(0, 256, (n, k // 2), generator=gen).to(torch.uint8)
            scale = torch.randint(lo, hi + 1, (n, k // 32), generator=gen).to(torch.uint8)
            base = key[: -len(".weight")]
            stored[base + ".weight_packed"] = packed
            stored[base + ".weight_scale"] = scale
            effective[name] = mxfp4_dequantize(packed, scale)
        elif is_f32(name):
            if name.endswith("A_log") and spec["pad_a_log"]:
                padded = torch.zeros(128 * math.ceil(num_heads / 128), dtype=torch.float32)
                padded[:num_heads] = t
                stored[key] = padded
            else:
                stored[key] = t.float().contiguous()
            effective[name] = t.float()
        else:
            stored[key] = t.to(torch.bfloat16).contiguous()
            effective[name] = stored[key].float()
    return stored, effective


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


# ---------------------------------------------------------------------------------------------
# Running the reference.

FWD = dict(output_attentions=False, output_hidden_states=False, return_dict=True)


def run_reference(mk, cfg, model, prompt, device):
    inner = model.model
    with torch.no_grad():
        # Greedy continuation with the model's own cache: prefill, then one token per step.
        cache = mk.KimiDynamicCache(config=cfg)
        out = model(input_ids=torch.tensor([prompt], device=device), past_key_values=cache, use_cache=True, **FWD)
        rows = [out.logits[0].float()]
        tokens, generated = list(prompt), []
        for _ in range(GEN_LEN):
            nxt = int(rows[-1][-1].argmax())
            generated.append(nxt)
            tokens.append(nxt)
            out = model(input_ids=torch.tensor([[nxt]], device=device), past_key_values=cache,
                        use_cache=True, **FWD)
            rows.append(out.logits[0].float())
        cached = torch.cat(rows)                         # [PROMPT_LEN + GEN_LEN, vocab]

        # One uncached forward over prompt + continuation, with per-layer captures.
        caps, routes, hooks = {}, [], []
        hooks.append(inner.embed_tokens.register_forward_hook(lambda m, i, o: caps.__setitem__("embed", o)))
        for li, layer in enumerate(inner.layers):
            hooks.append(layer.register_forward_hook(
                lambda m, i, o, li=li: caps.__setitem__(f"P{li}", (o[0], o[1]))))
            moe = getattr(layer, "block_sparse_moe", None)
            if moe is not None:
                hooks.append(moe.gate.register_forward_hook(
                    lambda m, i, o: routes.append((m, i[0].detach(), o[0].detach()))))
        hooks.append(inner.norm.register_forward_pre_hook(lambda m, i: caps.__setitem__("mix", i[0])))
        hooks.append(inner.norm.register_forward_hook(lambda m, i, o: caps.__setitem__("final", o)))
        full = model(input_ids=torch.tensor([tokens], device=device), use_cache=False, **FWD)
        for h in hooks:
            h.remove()
    logits = full.logits[0].float()
    L = len(inner.layers)
    hidden = torch.stack([caps["embed"][0]] + [caps[f"P{i}"][0][0] for i in range(L)]
                         + [caps["mix"][0], caps["final"][0]]).float()
    blocks = caps[f"P{L - 1}"][1].transpose(0, 1).float()          # [n_blocks, T, hidden]
    bs = cfg.attn_res_block_size
    for kblk in range(blocks.shape[0]):   # sealed snapshot k is P_{bs*k-1} (k >= 1), the embedding for k = 0
        assert torch.equal(blocks[kblk], hidden[bs * kblk]), f"AttnRes snapshot {kblk} is not hidden row {bs * kblk}"

    # Routing statistics: how often e_score_correction_bias changes the selected set.
    changed = total = 0
    used = set()
    for gate, x, idx in routes:
        xs = x.reshape(-1, x.shape[-1]).float()
        s = torch.sigmoid(xs @ gate.weight.float().t())
        plain = torch.topk(s, gate.top_k, dim=-1).indices
        for a, b in zip(plain.sort(-1).values.tolist(), idx.sort(-1).values.tolist()):
            changed += a != b
            total += 1
        used.update((id(gate), e) for e in idx.flatten().tolist())

    gen_rows = logits[PROMPT_LEN - 1:PROMPT_LEN - 1 + GEN_LEN]
    top2 = gen_rows.topk(2, dim=-1).values
    stats = {
        "decode_vs_full_max_abs_diff": float((cached - logits).abs().max()),
        "max_abs_logit": float(logits.abs().max()),
        "min_top2_margin_generated": float((top2[:, 0] - top2[:, 1]).min()),
        "full_argmax_matches_generated": gen_rows.argmax(-1).tolist() == generated,
        "routing_bias_changed_selection_fraction": changed / max(total, 1),
        "routing_tokens_x_layers": total,
        "routed_experts_used": len(used),
        "distinct_generated_tokens": len(set(generated)),
        "attn_implementation_used": model.config._attn_implementation,
        "attn_res_snapshots": int(blocks.shape[0]),
    }
    return generated, logits.cpu().numpy(), hidden.cpu().numpy(), stats


def attn_res_summary(L, bs):
    sealed_at = [l for l in range(L) if l % bs == 0]
    last = sealed_at[-1]
    return {"block_size": bs, "sealed_at_layers": sealed_at,
            "snapshots_after_last_layer": len(sealed_at),
            "partial_block_layers": list(range(last, L)),
            "partial_block_is_short": (L - last) < bs,
            "output_mix_candidates": len(sealed_at) + 1}


def build(spec, out_root, device, mk, cfg_cls, shims, ref_files, checks):
    tc = text_config(spec)
    cfg_disk = engine_config(spec, tc)
    cfg = reference_config(cfg_cls, tc)
    fixture = os.path.join(out_root, spec["name"])
    best = None
    for attempt in range(SEED_ATTEMPTS):
        seed = spec["seed"] + 1000 * attempt
        gen = torch.Generator().manual_seed(seed)
        torch.manual_seed(seed)
        model = build_model(mk, cfg)
        values = randomise(model, gen)
        stored, effective = store(values, spec, gen, spec["kda_heads"])
        missing = set(model.state_dict()) ^ set(effective)
        assert not missing, f"state-dict mismatch: {sorted(missing)[:5]}"
        model.load_state_dict({n: t.clone() for n, t in effective.items()}, strict=True)
        model.to(device)
        prompt = torch.randint(3, spec["vocab_size"], (PROMPT_LEN,), generator=gen).tolist()
        generated, logits, hidden, stats = run_reference(mk, cfg, model, prompt, device)
        good = (stats["full_argmax_matches_generated"]
                and stats["min_top2_margin_generated"] >= max(MIN_TOP2_MARGIN, 10 * stats["decode_vs_full_max_abs_diff"])
                and stats["distinct_generated_tokens"] >= 3)
        print(f"  {spec['name']} seed {seed}: margin {stats['min_top2_margin_generated']:.4g} "
              f"decode-vs-full {stats['decode_vs_full_max_abs_diff']:.3g} "
              f"argmax-ok {stats['full_argmax_matches_generated']} distinct {stats['distinct_generated_tokens']}"
              f" bias-changed {stats['routing_bias_changed_selection_fraction']:.3f}")
        cand = (good, stats["min_top2_margin_generated"], seed, stored, prompt, generated, logits, hidden, stats)
        if best is None or (cand[0], cand[1]) > (best[0], best[1]):
            best = cand
        if good:
            break
    good, _, seed, stored, prompt, generated, logits, hidden, stats = best
    if not good:
        print(f"  WARNING {spec['name']}: no seed met the margin/argmax criteria; keeping seed {seed}")

    shutil.rmtree(fixture, ignore_errors=True)
    os.makedirs(fixture)
    write_checkpoint(stored, fixture, spec["shards"])
    with open(os.path.join(fixture, "config.json"), "w") as f:
        json.dump(cfg_disk, f, indent=1, sort_keys=True)
    np.save(os.path.join(fixture, "logits.npy"), logits.astype(np.float32))
    np.save(os.path.join(fixture, "hidden.npy"), hidden.astype(np.float32))
    L = spec["num_hidden_layers"]
    golden = {
        "prompt": prompt, "generated": generated, "seed": seed,
        "transformers": transformers.__version__, "torch": torch.__version__, "device": device,
        "dtype": "float32", "tf32": False, "script": "tools/make_golden_k3.py",
        "reference": {name: dict(REFERENCE_SOURCE.get(name, {}), sha256_used=_sha256(path))
                      for name, path in ref_files.items()},
        "fla_replaced_by": shims.describe(),
        "fla_self_check_max_rel_err": checks,
        "kda_paths": {"prefill": "chunk_kda (chunk form, chunk 64)", "decode": "fused_recurrent_kda (token recurrence)"},
        "logits": "uncached forward over prompt + generated: row t predicts token t+1",
        "hidden_rows": f"0 embedding; 1..{L} layer outputs P_0..P_{L - 1} (AttnRes within-block prefix sums); "
                       f"{L + 1} output AttnRes mix; {L + 2} final RMSNorm output (lm_head input)",
        "blocks": f"sealed AttnRes snapshots = hidden rows 0, {spec['attn_res_block_size']}, "
                  f"{2 * spec['attn_res_block_size']}, ... (embedding, then P of each block's last layer)",
        "attn_res": attn_res_summary(L, spec["attn_res_block_size"]),
        "a_log_stored_shape": [128 * math.ceil(spec["kda_heads"] / 128)] if spec["pad_a_log"] else [spec["kda_heads"]],
        "routed_experts": "MXFP4 (compressed-tensors mxfp4-pack-quantized); the reference ran on the exact "
                          "dequantized values" if spec["mxfp4"] else "BF16",
        "eos_ignored": True,
        **stats,
    }
    with open(os.path.join(fixture, "golden.json"), "w") as f:
        json.dump(golden, f, indent=1)
    size = sum(os.path.getsize(os.path.join(fixture, n)) for n in os.listdir(fixture))
    print(spec["name"], "prompt", prompt, "generated", generated, "bytes", size)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir", nargs="?", default="tests/fixtures")
    ap.add_argument("--reference-code", default=".refcode",
                    help="directory with the fetched release modeling_kimi_linear.py + its config module")
    ap.add_argument("--only", choices=[K3_TINY["name"], K3_TINY_MXFP4["name"]])
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    print("transformers", transformers.__version__, "torch", torch.__version__, device)
    shims = FlaShims().install()
    print("fla stand-ins:", json.dumps(shims.describe(), indent=1))
    checks = self_check(shims, device)
    print("self-check:", checks)
    mk, cfg_cls, ref_files = load_release(args.reference_code)
    for name, path in ref_files.items():
        want = REFERENCE_SOURCE.get(name, {}).get("sha256")
        got = _sha256(path)
        print(f"reference {name} sha256 {got}" + ("" if want in (None, got) else f" (EXPECTED {want})"))
    for spec in (K3_TINY, K3_TINY_MXFP4):
        if args.only in (None, spec["name"]):
            build(spec, args.out_dir, device, mk, cfg_cls, shims, ref_files, checks)


if __name__ == "__main__":
    main()
