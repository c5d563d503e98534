#!/usr/bin/python3
"""Independent PyTorch reference for mxserve's models, written from the HF
transformers modeling semantics (modeling_llama.py, modeling_qwen2.py,
modeling_qwen3.py), float64 throughout so it is the ground truth, not a second
float32 implementation with the same rounding.

usage: hf_reference.py MODEL_DIR "1 2 3"   -> JSON {"logits": [[...] per position]}
"""
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_np  # noqa: E402

torch.set_default_dtype(torch.float64)


def rms_norm(x, w, eps):
    var = x.pow(2).mean(-1, keepdim=True)
    return x * torch.rsqrt(var + eps) * w


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def rope_theta(cfg):
    # config.json keeps rope_theta at top level; transformers v5 may nest it in rope_parameters.
    if "rope_theta" in cfg:
        return cfg["rope_theta"]
    return (cfg.get("rope_parameters") or {}).get("rope_theta", 10000.0)


def rope_init(cfg, dim):
    """(inv_freq [dim/2], attention_factor) like transformers ROPE_INIT_FUNCTIONS (modeling_rope_utils.py);
    dim = rotary dim (head_dim * partial_rotary_factor, or qk_rope_head_dim for MLA). attention_factor
    multiplies cos and sin (only yarn makes it != 1)."""
    base = rope_theta(cfg)
    inv = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    rs = cfg.get("rope_scaling") or cfg.get("rope_parameters") or {}
    kind = rs.get("rope_type", rs.get("type", "default"))
    factor = 1.0
    if kind == "linear":
        inv = inv / rs["factor"]
    elif kind == "llama3":  # transformers _compute_llama3_parameters
        f, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
        old = rs["original_max_position_embeddings"]
        low_wl, high_wl = old / lo, old / hi
        wl = 2 * math.pi / inv
        scaled = torch.where(wl > low_wl, inv / f, inv)
        smooth = (old / wl - lo) / (hi - lo)
        smoothed = (1 - smooth) * scaled / f + smooth * scaled
        medium = (wl >= high_wl) & (wl <= low_wl)
        inv = torch.where(medium, smoothed, scaled)
    elif kind == "yarn":  # transformers _compute_yarn_parameters (newer text: mscale/mscale_all_dim/truncate)
        f = float(rs["factor"])
        orig = rs.get("original_max_position_embeddings") or cfg.get("max_position_embeddings")
        beta_fast = rs.get("beta_fast") or 32
        beta_slow = rs.get("beta_slow") or 1

        def get_mscale(scale, m=1.0):
            return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

        factor = rs.get("attention_factor")
        if factor is None:
            ms, msa = rs.get("mscale"), rs.get("mscale_all_dim")
            factor = get_mscale(f, ms) / get_mscale(f, msa) if (ms and msa) else get_mscale(f)

        def corr_dim(n_rot):
            return (dim * math.log(orig / (n_rot * 2 * math.pi))) / (2 * math.log(base))

        low, high = corr_dim(beta_fast), corr_dim(beta_slow)
        if rs.get("truncate", True):
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, dim - 1)
        if low == high:
            high += 0.001
        ramp = ((torch.arange(dim // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
        extrap = 1 - ramp
        inv = (inv / f) * (1 - extrap) + inv * extrap
    elif kind != "default":
        raise SystemExit(f"unsupported rope_scaling {kind}")
    return inv, float(factor)


def inv_freq(cfg, dim):
    """Inverse frequencies only (drops rope_init's attention_factor, which is 1 except for yarn)."""
    return rope_init(cfg, dim)[0]


def apply_rope(x, pos, inv, attention_factor=1.0):
    # x: [T, heads, rot_dim]; rotate_half pairing (i, i + rot_dim/2), HF apply_rotary_pos_emb
    freqs = torch.outer(pos.double(), inv)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos()[:, None, :], emb.sin()[:, None, :]
    if attention_factor != 1.0:
        cos, sin = cos * attention_factor, sin * attention_factor
    return x * cos + rotate_half(x) * sin


def attention(cfg, W, p, x, pos, qk_norm, bias):
    T = x.shape[0]
    nh, nkv = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    hd = cfg.get("head_dim") or cfg["hidden_size"] // nh
    eps = cfg.get("rms_norm_eps", 1e-6)

    def lin(name, inp):
        y = inp @ W[f"{p}.{name}.weight"].T
        if bias and f"{p}.{name}.bias" in W:
            y = y + W[f"{p}.{name}.bias"]
        return y

    q = lin("q_proj", x).view(T, nh, hd)
    k = lin("k_proj", x).view(T, nkv, hd)
    v = lin("v_proj", x).view(T, nkv, hd)
    if qk_norm:
        q = rms_norm(q, W[f"{p}.q_norm.weight"], eps)
        k = rms_norm(k, W[f"{p}.k_norm.weight"], eps)
    inv, af = rope_init(cfg, hd)
    q, k = apply_rope(q, pos, inv, af), apply_rope(k, pos, inv, af)
    rep = nh // nkv
    k = k.repeat_interleave(rep, dim=1)
    v = v.repeat_interleave(rep, dim=1)
    scores = torch.einsum("thd,shd->hts", q, k) / math.sqrt(hd)
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
    scores = scores.masked_fill(mask, float("-inf"))
    probs = scores.softmax(-1)
    out = torch.einsum("hts,shd->thd", probs, v).reshape(T, nh * hd)
    return out @ W[f"{p}.o_proj.weight"].T


def mlp(W, p, x):
    g = x @ W[f"{p}.gate_proj.weight"].T
    u = x @ W[f"{p}.up_proj.weight"].T
    return (torch.nn.functional.silu(g) * u) @ W[f"{p}.down_proj.weight"].T


def load_config(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        return json.load(f)


def load_weights(model_dir):
    """Every tensor of the model directory as a float64 torch tensor (bf16/f16/f32 upcast exactly)."""
    return {k: torch.from_numpy(v).double() for k, v in safetensors_np.read_model(model_dir).items()}


def forward(model_dir, ids):
    cfg = load_config(model_dir)
    W = load_weights(model_dir)
    arch = cfg["architectures"][0]
    qk_norm = arch == "Qwen3ForCausalLM"
    bias = arch == "Qwen2ForCausalLM" or cfg.get("attention_bias", False)
    eps = cfg.get("rms_norm_eps", 1e-6)
    x = W["model.embed_tokens.weight"][torch.tensor(ids)]
    pos = torch.arange(len(ids))
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}"
        h = rms_norm(x, W[f"{p}.input_layernorm.weight"], eps)
        x = x + attention(cfg, W, f"{p}.self_attn", h, pos, qk_norm, bias)
        h = rms_norm(x, W[f"{p}.post_attention_layernorm.weight"], eps)
        x = x + mlp(W, f"{p}.mlp", h)
    x = rms_norm(x, W["model.norm.weight"], eps)
    head = W["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else W["lm_head.weight"]
    return x @ head.T


if __name__ == "__main__":
    ids = [int(t) for t in sys.argv[2].replace(",", " ").split()]
    logits = forward(sys.argv[1], ids)
    json.dump({"logits": logits.tolist()}, sys.stdout)
