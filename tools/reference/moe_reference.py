#!/usr/bin/python3
"""Independent PyTorch reference for mxserve's MoE models, written from the HF transformers modeling
semantics (modeling_glm4_moe.py, modeling_deepseek_v3.py, modeling_qwen3_moe.py) plus the sglang / vLLM
NextN (MTP) forward, float64 throughout so it is ground truth rather than a second bf16/fp32 implementation.
See docs/architectures.md sections 1-3 for tensor names, shapes and sources.

usage: moe_reference.py MODEL_DIR "1 2 3" [--mtp-hidden=postnorm|prenorm] [--mtp-mask-pos0] [--list-tensors]
  -> JSON {"logits": [[V floats] per position t = 0..T-1],
           "mtp_logits": [[V floats] per position t = 0..T-2]}    (only if num_nextn_predict_layers >= 1)

  --mtp-hidden=postnorm  (default) MTP consumes the target's hidden state AFTER model.norm, which is what
                         sglang (LogitsProcessor stores the normed hidden_states it is given) and vLLM
                         (target_hidden_states = model output, DeepseekV2Model/Glm4MoeModel end with
                         self.norm) do. "prenorm" uses the last decoder layer output before model.norm.
  --mtp-mask-pos0        vLLM DeepSeekMultiTokenPredictorLayer zeroes the token embedding of rows whose
                         position is 0 ("masking inputs at position 0, as not needed by MTP") before enorm;
                         sglang does not. Default off (sglang). Only row 0's input changes (later rows
                         see it through the MTP layer's attention).
  --list-tensors         print the names of the tensors used (sorted) to stderr; all routed experts of
                         a MoE layer count as used (each must exist) whether or not a token picked them.

Architectures: Glm4MoeForCausalLM, DeepseekV3ForCausalLM, Qwen3MoeForCausalLM (Qwen3MoE has no MTP in its
released configs; if num_nextn_predict_layers >= 1 is set anyway, the same NextN block is applied).
"""
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_reference  # noqa: E402  (shared: rms_norm, rotate_half, rope_init, apply_rope, mlp, loaders)
from hf_reference import apply_rope, mlp, rms_norm, rope_init  # noqa: E402

torch.set_default_dtype(torch.float64)

# HF config-class defaults (configuration_glm4_moe.py / configuration_deepseek_v3.py /
# configuration_qwen3_moe.py) for every field this script reads; config.json values override them.
DEFAULTS = {
    "Glm4MoeForCausalLM": dict(
        vocab_size=151552, hidden_size=4096, intermediate_size=10944, num_hidden_layers=46,
        num_attention_heads=96, num_key_value_heads=8, head_dim=None, partial_rotary_factor=0.5,
        hidden_act="silu", max_position_embeddings=131072, rms_norm_eps=1e-5, tie_word_embeddings=False,
        rope_scaling=None, attention_bias=False, use_qk_norm=False, moe_intermediate_size=1408,
        num_experts_per_tok=8, n_shared_experts=1, n_routed_experts=128, routed_scaling_factor=1.0,
        n_group=1, topk_group=1, first_k_dense_replace=1, norm_topk_prob=True, num_nextn_predict_layers=0),
    "DeepseekV3ForCausalLM": dict(
        vocab_size=129280, hidden_size=7168, intermediate_size=18432, moe_intermediate_size=2048,
        num_hidden_layers=61, num_attention_heads=128, n_shared_experts=1, n_routed_experts=256,
        routed_scaling_factor=2.5, kv_lora_rank=512, q_lora_rank=1536, qk_rope_head_dim=64, v_head_dim=128,
        qk_nope_head_dim=128, n_group=8, topk_group=4, num_experts_per_tok=8, first_k_dense_replace=3,
        norm_topk_prob=True, hidden_act="silu", max_position_embeddings=4096, rms_norm_eps=1e-6,
        tie_word_embeddings=False, rope_scaling=None, rope_interleave=True, attention_bias=False,
        moe_layer_freq=1, scoring_func="sigmoid", topk_method="noaux_tc", num_nextn_predict_layers=0),
    "Qwen3MoeForCausalLM": dict(
        vocab_size=151936, hidden_size=2048, intermediate_size=6144, num_hidden_layers=24,
        num_attention_heads=32, num_key_value_heads=4, head_dim=None, partial_rotary_factor=1.0,
        hidden_act="silu", max_position_embeddings=32768, rms_norm_eps=1e-6, tie_word_embeddings=False,
        rope_scaling=None, attention_bias=False, use_sliding_window=False, decoder_sparse_step=1,
        moe_intermediate_size=768, num_experts_per_tok=8, num_experts=128, norm_topk_prob=False,
        mlp_only_layers=[], num_nextn_predict_layers=0),
}


class Weights(dict):
    """Tensor dict that records which names were read (to list them and to flag unread ones)."""

    def __init__(self, *a):
        super().__init__(*a)
        self.used = set()

    def __getitem__(self, k):
        if not dict.__contains__(self, k):
            raise SystemExit(f"moe_reference: missing tensor {k}")
        self.used.add(k)
        return dict.__getitem__(self, k)

    def opt(self, k):
        return self[k] if k in self else None

    def require(self, k):
        """Must exist (HF would fail to load without it) though this input may not read it (unrouted expert)."""
        if not dict.__contains__(self, k):
            raise SystemExit(f"moe_reference: missing tensor {k}")
        self.used.add(k)


def warn(msg):
    print(f"moe_reference: {msg}", file=sys.stderr)


def resolve_config(cfg):
    arch = cfg["architectures"][0]
    if arch not in DEFAULTS:
        raise SystemExit(f"moe_reference: unsupported architecture {arch}")
    c = dict(DEFAULTS[arch])
    c.update(cfg)
    c["arch"] = arch
    rp = cfg.get("rope_parameters") or {}
    if "partial_rotary_factor" not in cfg and "partial_rotary_factor" in rp:  # transformers v5 layout
        c["partial_rotary_factor"] = rp["partial_rotary_factor"]
    if c.get("num_key_value_heads") is None:
        c["num_key_value_heads"] = c["num_attention_heads"]
    if arch == "Qwen3MoeForCausalLM" and "num_experts" not in cfg and "num_local_experts" in cfg:
        c["num_experts"] = cfg["num_local_experts"]  # HF attribute_map
    for k in ("n_group", "topk_group"):  # null in a config.json means no grouping (HF would crash on None)
        if k in c and c[k] is None:
            c[k] = 1
    if c.get("hidden_act", "silu") != "silu":
        raise SystemExit(f"moe_reference: unsupported hidden_act {c['hidden_act']}")
    if arch == "DeepseekV3ForCausalLM":
        # HF DeepseekV3 always routes with sigmoid + e_score_correction_bias ("noaux_tc"); it ignores these
        # keys, but a checkpoint declaring something else (DeepSeek-V2 softmax/greedy) is not this model.
        if c["scoring_func"] != "sigmoid" or c["topk_method"] != "noaux_tc":
            raise SystemExit("moe_reference: DeepseekV3 needs scoring_func=sigmoid, topk_method=noaux_tc")
        if c["moe_layer_freq"] != 1:
            # HF ignores moe_layer_freq; vLLM/sglang also require layer_idx % moe_layer_freq == 0.
            raise SystemExit("moe_reference: moe_layer_freq != 1 is ambiguous between HF and vLLM")
    if arch == "Qwen3MoeForCausalLM" and c["use_sliding_window"]:
        raise SystemExit("moe_reference: use_sliding_window is not supported")
    return c


def is_moe_layer(c, i):
    if c["arch"] == "Qwen3MoeForCausalLM":  # HF Qwen3MoeDecoderLayer
        return (i not in c["mlp_only_layers"]) and c["num_experts"] > 0 and (i + 1) % c["decoder_sparse_step"] == 0
    return i >= c["first_k_dense_replace"]  # HF Glm4MoeDecoderLayer / DeepseekV3DecoderLayer


def linear(W, name, x, bias):
    y = x @ W[f"{name}.weight"].T
    if bias:
        y = y + W[f"{name}.bias"]
    return y


def causal_attention(q, k, v, scaling):
    # q/k: [T, nH, Dqk], v: [T, nH, Dv]; HF eager_attention_forward with a causal mask
    T = q.shape[0]
    scores = torch.einsum("thd,shd->hts", q, k) * scaling
    scores = scores.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
    return torch.einsum("hts,shd->thd", scores.softmax(-1), v)


# ---------------------------------------------------------------- attention: GQA (GLM-4.5, Qwen3-MoE)
def gqa_attention(c, W, p, x, pos):
    T = x.shape[0]
    nh, nkv = c["num_attention_heads"], c["num_key_value_heads"]
    hd = c.get("head_dim") or c["hidden_size"] // nh
    eps = c["rms_norm_eps"]
    glm = c["arch"] == "Glm4MoeForCausalLM"
    bias = bool(c["attention_bias"])
    q = linear(W, f"{p}.q_proj", x, bias).view(T, nh, hd)
    k = linear(W, f"{p}.k_proj", x, bias).view(T, nkv, hd)
    v = linear(W, f"{p}.v_proj", x, bias).view(T, nkv, hd)
    if (not glm) or c["use_qk_norm"]:  # per-head RMSNorm over head_dim, BEFORE RoPE (both HF files)
        q = rms_norm(q, W[f"{p}.q_norm.weight"], eps)
        k = rms_norm(k, W[f"{p}.k_norm.weight"], eps)
    # HF: rotary dim = int(head_dim * partial_rotary_factor), inv_freq exponent over that dim, rotate_half
    # on the first rd dims (Glm4Moe apply_rotary_pos_emb splits [:rd] / [rd:]), the rest passes through.
    rd = int(hd * c["partial_rotary_factor"])
    inv, af = rope_init(c, rd)
    q = torch.cat((apply_rope(q[..., :rd], pos, inv, af), q[..., rd:]), -1)
    k = torch.cat((apply_rope(k[..., :rd], pos, inv, af), k[..., rd:]), -1)
    rep = nh // nkv  # repeat_kv: KV head j serves query heads j*rep .. j*rep+rep-1
    o = causal_attention(q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1), hd ** -0.5)
    # o_proj: GLM never has a bias (bias=False); Qwen3-MoE uses attention_bias on all four projections.
    return linear(W, f"{p}.o_proj", o.reshape(T, nh * hd), bias and not glm)


# ---------------------------------------------------------------- attention: MLA (DeepSeek-V3)
def yarn_get_mscale(scale=1.0, mscale=1.0):
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def mla_attention(c, W, p, x, pos):
    T = x.shape[0]
    nh = c["num_attention_heads"]
    P, R, Vd, Lkv = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"], c["kv_lora_rank"]
    bias = bool(c["attention_bias"])  # HF: bias on q_a_proj, kv_a_proj_with_mqa, o_proj only
    # HF builds q_a_layernorm / kv_a_layernorm as DeepseekV3RMSNorm(dim) -> eps 1e-6, NOT rms_norm_eps
    # (vLLM/sglang pass config.rms_norm_eps; identical for released V3, whose rms_norm_eps is 1e-6).
    lora_eps = 1e-6
    if c["q_lora_rank"] is None:
        q = linear(W, f"{p}.q_proj", x, False)
    else:
        q = linear(W, f"{p}.q_b_proj", rms_norm(linear(W, f"{p}.q_a_proj", x, bias),
                                                 W[f"{p}.q_a_layernorm.weight"], lora_eps), False)
    q = q.view(T, nh, P + R)
    q_nope, q_pe = q[..., :P], q[..., P:]  # nope first, rope last
    ckv = linear(W, f"{p}.kv_a_proj_with_mqa", x, bias)  # [T, Lkv + R]
    c_kv, k_pe = ckv[..., :Lkv], ckv[..., Lkv:]
    kv = (rms_norm(c_kv, W[f"{p}.kv_a_layernorm.weight"], lora_eps) @ W[f"{p}.kv_b_proj.weight"].T)
    kv = kv.view(T, nh, P + Vd)  # per head [k_nope | v]
    k_nope, v = kv[..., :P], kv[..., P:]
    k_pe = k_pe.view(T, 1, R)  # one MQA rope key shared by all heads
    # RoPE on the R slice. HF rope_interleave=True (apply_rotary_pos_emb_interleave): de-interleave
    # (x0,x2,..,x1,x3,..) then rotate_half -> pair (2i, 2i+1) rotated by pos*inv_freq[i] (GPT-J pairing,
    # vLLM is_neox_style=False), result left in de-interleaved order for both q and k (q.k unchanged).
    # Rotary dim = qk_rope_head_dim (HF sets config.head_dim = qk_rope_head_dim).
    inv, af = rope_init(c, R)

    def rope(t):
        if c["rope_interleave"]:
            t = t.reshape(*t.shape[:-1], R // 2, 2).transpose(-1, -2).reshape(*t.shape)
        return apply_rope(t, pos, inv, af)

    q_pe, k_pe = rope(q_pe), rope(k_pe)
    qs = torch.cat((q_nope, q_pe), -1)
    ks = torch.cat((k_nope, k_pe.expand(T, nh, R)), -1)
    # softmax scale: qk_head_dim^-0.5, times mscale^2 when rope_scaling has a truthy mscale_all_dim
    # (HF DeepseekV3Attention; vLLM yarn_get_mscale(factor, mscale_all_dim) gives 1.0 when it is 0/absent)
    scaling = (P + R) ** -0.5
    rs = c.get("rope_scaling") or c.get("rope_parameters")  # (transformers v5 nests it in rope_parameters)
    if rs and rs.get("mscale_all_dim", 0):
        m = yarn_get_mscale(rs["factor"], rs["mscale_all_dim"])
        scaling = scaling * m * m
    o = causal_attention(qs, ks, v, scaling)
    return linear(W, f"{p}.o_proj", o.reshape(T, nh * Vd), bias)


# ---------------------------------------------------------------- MoE blocks
def sigmoid_router(c, W, p, x):
    """HF Glm4MoeMoE.route_tokens_to_experts / DeepseekV3TopkRouter ("noaux_tc"). Returns (idx, w)."""
    E, G, tg, K = c["n_routed_experts"], c["n_group"], c["topk_group"], c["num_experts_per_tok"]
    T = x.shape[0]
    if E % G or E // G < 2 or tg > G or K > E:
        raise SystemExit(f"moe_reference: bad routing config E={E} n_group={G} topk_group={tg} top_k={K}")
    s = torch.sigmoid(x @ W[f"{p}.gate.weight"].T)  # router GEMM + sigmoid (fp32 in HF; fp64 here)
    b = W.opt(f"{p}.gate.e_score_correction_bias")
    if b is None:  # HF registers it as a zero buffer; a checkpoint without it routes with bias 0
        warn(f"{p}.gate.e_score_correction_bias absent, using zeros (HF buffer default)")
        b = torch.zeros(E)
    s_ch = s + b  # bias only for the CHOICE
    grp = s_ch.view(T, G, E // G).topk(2, dim=-1).values.sum(-1)  # group score = sum of top-2 biased scores
    gidx = grp.topk(tg, dim=-1, sorted=False).indices
    gmask = torch.zeros(T, G).scatter_(1, gidx, 1.0)
    keep = gmask.unsqueeze(-1).expand(T, G, E // G).reshape(T, E).bool()
    # HF fills the experts of dropped groups with 0.0 (masked_fill(~score_mask, 0.0)); the DeepSeek reference
    # and vLLM's torch grouped_topk use -inf. They differ only when a kept biased score is < 0 (or fewer than
    # top_k experts are kept); we follow HF and warn on stderr when the two choices would differ.
    idx = s_ch.masked_fill(~keep, 0.0).topk(K, dim=-1, sorted=False).indices
    idx_inf = s_ch.masked_fill(~keep, float("-inf")).topk(K, dim=-1, sorted=False).indices
    if not torch.equal(idx.sort(-1).values, idx_inf.sort(-1).values):
        warn(f"{p}: HF 0.0 group masking picks different experts than -inf masking (kept biased score < 0)")
    w = s.gather(1, idx)  # weights from the UN-biased sigmoid
    if c["norm_topk_prob"]:
        w = w / (w.sum(-1, keepdim=True) + 1e-20)
    w = w * c["routed_scaling_factor"]
    return idx, w


def softmax_router(c, W, p, x):
    """HF Qwen3MoeSparseMoeBlock: softmax over all experts, top-k, optional renorm (no epsilon)."""
    probs = torch.softmax(x @ W[f"{p}.gate.weight"].T, dim=-1)
    w, idx = torch.topk(probs, c["num_experts_per_tok"], dim=-1)
    if c["norm_topk_prob"]:
        w = w / w.sum(-1, keepdim=True)
    return idx, w


def moe_block(c, W, p, x):
    if c["arch"] == "Qwen3MoeForCausalLM":
        idx, w = softmax_router(c, W, p, x)
    else:
        idx, w = sigmoid_router(c, W, p, x)
    E = c["num_experts"] if c["arch"] == "Qwen3MoeForCausalLM" else c["n_routed_experts"]
    for e in range(E):  # every routed expert must be stored, picked by this input or not
        for n in ("gate_proj", "up_proj", "down_proj"):
            W.require(f"{p}.experts.{e}.{n}.weight")
    out = torch.zeros_like(x)
    for e in torch.unique(idx).tolist():  # expert e applied to the tokens that picked it, weighted
        tok, slot = torch.where(idx == e)
        out.index_add_(0, tok, mlp(W, f"{p}.experts.{e}", x[tok]) * w[tok, slot, None])
    if c["arch"] != "Qwen3MoeForCausalLM" and c["n_shared_experts"]:
        # shared experts: one MLP of width moe_intermediate_size * n_shared_experts, added with weight 1
        out = out + mlp(W, f"{p}.shared_experts", x)
    return out


# ---------------------------------------------------------------- decoder
def decoder_layer(c, W, i, x, pos):
    p = f"model.layers.{i}"
    eps = c["rms_norm_eps"]
    attn = mla_attention if c["arch"] == "DeepseekV3ForCausalLM" else gqa_attention
    h = rms_norm(x, W[f"{p}.input_layernorm.weight"], eps)
    x = x + attn(c, W, f"{p}.self_attn", h, pos)
    h = rms_norm(x, W[f"{p}.post_attention_layernorm.weight"], eps)
    x = x + (moe_block(c, W, f"{p}.mlp", h) if is_moe_layer(c, i) else mlp(W, f"{p}.mlp", h))
    return x


def lm_head(c, W):
    # tie_word_embeddings (default False for all three): HF ties lm_head to model.embed_tokens
    return W["model.embed_tokens.weight"] if c["tie_word_embeddings"] else W["lm_head.weight"]


def forward(model_dir, ids, mtp_hidden="postnorm", mtp_mask_pos0=False):
    c = resolve_config(hf_reference.load_config(model_dir))
    W = Weights(hf_reference.load_weights(model_dir))
    eps = c["rms_norm_eps"]
    L = c["num_hidden_layers"]
    ids_t = torch.tensor(ids)
    T = len(ids)
    pos = torch.arange(T)
    x = W["model.embed_tokens.weight"][ids_t]
    for i in range(L):
        x = decoder_layer(c, W, i, x, pos)
    h_pre = x
    h_post = rms_norm(x, W["model.norm.weight"], eps)
    out = {"logits": h_post @ lm_head(c, W).T}

    n_mtp = c.get("num_nextn_predict_layers") or 0
    if n_mtp >= 1:
        # First NextN layer, stored at model.layers.{num_hidden_layers} (vLLM mtp_start_layer_idx; sglang's
        # nextn_layer_id is also num_hidden_layers unless num_hidden_layers == 1, where it reads layer 0).
        j = L
        p = f"model.layers.{j}"
        if not is_moe_layer(c, j):
            # sglang builds the NextN decoder with is_nextn=True (always MoE); vLLM/HF-style index rule
            # would make it dense here. Ambiguous, so refuse.
            raise SystemExit("moe_reference: MTP layer index < first_k_dense_replace (engines disagree)")
        # embed / head: the MTP layer's own copies when stored (GLM-4.5, DeepSeek-V3), else the main
        # model's (GLM-4.6 ships neither; sglang always uses the target's, vLLM PR #27597 falls back).
        emb = W.opt(f"{p}.embed_tokens.weight")
        emb = W["model.embed_tokens.weight"] if emb is None else emb
        head = W.opt(f"{p}.shared_head.head.weight")
        head = lm_head(c, W) if head is None else head
        if T >= 2:
            # Row t (t = 0..T-2): token ids[t+1] and the target hidden state of position t.
            e = emb[ids_t[1:]].clone()
            if mtp_mask_pos0:
                e[0] = 0.0  # vLLM: inputs_embeds[positions == 0] = 0
            hid = (h_post if mtp_hidden == "postnorm" else h_pre)[:-1]
            # ORDER: cat([enorm(embed), hnorm(hidden)]) (vLLM deepseek_mtp / glm4_moe_mtp, sglang nextn)
            z = torch.cat((rms_norm(e, W[f"{p}.enorm.weight"], eps),
                           rms_norm(hid, W[f"{p}.hnorm.weight"], eps)), -1) @ W[f"{p}.eh_proj.weight"].T
            # Full decoder block of layer j over the MTP rows' own causal context (rows 0..t), with
            # position ids t: both engines pass the target positions unchanged to the draft
            # (vLLM propose(): target_positions; sglang draft extend reuses the batch positions), while
            # the token fed at row t is ids[t+1].
            z = decoder_layer(c, W, j, z, pos[:-1])
            z = rms_norm(z, W[f"{p}.shared_head.norm.weight"], eps)
            out["mtp_logits"] = z @ head.T
        else:
            out["mtp_logits"] = torch.zeros(0, head.shape[0])

    # Flag checkpoint tensors never read (a naming mismatch in a generated checkpoint shows up here).
    # MTP layers are only expected to be read when MTP ran, and only the first of them.
    mtp_ran = n_mtp >= 1 and T >= 2
    unused = [k for k in sorted(set(W.keys()) - W.used)
              if not any(k.startswith(f"model.layers.{m}.") for m in range(L + (1 if mtp_ran else 0), L + max(n_mtp, 1)))]
    if unused:
        warn(f"{len(unused)} checkpoint tensors not read, e.g. {unused[:5]}")
    return out, sorted(W.used)


def main(argv):
    args = [a for a in argv[1:] if not a.startswith("--")]
    flags = [a for a in argv[1:] if a.startswith("--")]
    if len(args) != 2:
        raise SystemExit(__doc__)
    mtp_hidden, mask0, list_tensors = "postnorm", False, False
    for f in flags:
        if f.startswith("--mtp-hidden="):
            mtp_hidden = f.split("=", 1)[1]
            if mtp_hidden not in ("postnorm", "prenorm"):
                raise SystemExit("--mtp-hidden must be postnorm or prenorm")
        elif f == "--mtp-mask-pos0":
            mask0 = True
        elif f == "--list-tensors":
            list_tensors = True
        else:
            raise SystemExit(f"unknown flag {f}")
    ids = [int(t) for t in args[1].replace(",", " ").split()]
    out, used = forward(args[0], ids, mtp_hidden, mask0)
    if list_tensors:
        print("\n".join(used), file=sys.stderr)
    json.dump({k: v.tolist() for k, v in out.items()}, sys.stdout)


if __name__ == "__main__":
    main(sys.argv)
