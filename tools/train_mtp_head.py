#!/usr/bin/python3
"""Trains a model's MTP ("nextn") layer by self-distillation on the model's own
generations (no dataset), and exports it in the GLM-4.5 / DeepSeek-V3 nextn
tensor layout that `mxserve --mtp-head` loads (model.layers.{num_hidden_layers}.*).

    build/mxserve mtp-data --model M --out data.safetensors --sequences 384 --length 192
    /usr/bin/python3 tools/train_mtp_head.py --model M --data data.safetensors --out head.safetensors
    build/mxserve generate --model M --mtp-head head.safetensors --speculative mtp ...

Run with Debian's python (python3-torch, python3-numpy). M is a llama2.c .bin or
an HF directory (Llama / Qwen2 / Qwen3 dense, Qwen3-MoE, GLM-4.5 MoE; not
DeepSeek-V3's MLA). `mxserve mtp-data` (src/devtools/mtp_data.h) generates the
sequences with our engine and records the target's hidden state after the final
norm and its top-k logits at every position.

What the head computes, exactly as the engine runs it (src/models/decoder.cpp
forward_mtp): for position t, with h_t the target's hidden state after
model.norm and x_{t+1} the next token,
    x   = eh_proj(cat[enorm(embed(x_{t+1})), hnorm(h_t)])
    x   = decoder_layer(x)            (causal attention over the MTP positions, RoPE at t)
    out = head(shared_head.norm(x))   -> predicts x_{t+2}
decoder_layer is the model's own kind at index num_hidden_layers (MoE for GLM-4.5
and Qwen3-MoE). embed and head are frozen and not exported: the checkpoint's
MTP copies where it stores them (GLM-4.5), else the main model's. The loss is
the cross-entropy of the head against the model's own distribution for x_{t+2}
(its logits at t+1, top-k): the head learns to predict what the model will say,
which is what speculative acceptance rewards.

Initialisation: --init checkpoint takes the checkpoint's own MTP layer (then,
before training, the torch forward must reproduce the engine's MTP predictions
recorded in the data: a check that both compute the same layer); --init
last-layer copies the model's last decoder layer, with eh_proj passing the
hidden state through and adding a little of the token.

Written out: every trained tensor of the layer (F32, or --dtype bf16). With
`--mtp-head`, a head's tensors replace the checkpoint's tensors of the same
names; the rest of the checkpoint's MTP layer (embed_tokens, shared_head.head)
stays.
"""
import argparse
import json
import math
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference"))
import hf_reference  # noqa: E402  (rope_init: every rope_scaling kind of the engine)
import safetensors_np  # noqa: E402

torch.set_default_dtype(torch.float32)  # hf_reference sets float64 for its own use


# ---------------------------------------------------------------- safetensors
read_header = safetensors_np.read_header


def read_tensors(path, names=None):
    """{name: float32 or int32 numpy array} of the named tensors (all when None)."""
    header = read_header(path)[0]
    for name, e in header.items():
        if name != "__metadata__" and (names is None or name in names) and e["dtype"] not in ("F32", "BF16", "F16", "I32"):
            sys.exit(f"{path}: tensor {name} is {e['dtype']}; the trainer reads F32 / BF16 / F16 / I32 "
                     "(train on the unquantized checkpoint)")
    return {n: a if a.dtype == np.int32 else a.astype(np.float32) for n, a in safetensors_np.read_file(path, names).items()}


def model_files(d):
    return [os.path.join(d, f) for f in sorted(os.listdir(d)) if f.endswith(".safetensors")]


def write_safetensors(path, tensors, metadata, bf16):
    header, blobs, off = {"__metadata__": metadata}, [], 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name], dtype=np.float32)
        if bf16:  # round to nearest even
            u = a.view(np.uint32).astype(np.uint64)
            raw = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16).tobytes()
        else:
            raw = a.tobytes()
        header[name] = {"dtype": "BF16" if bf16 else "F32", "shape": list(a.shape),
                        "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


# ---------------------------------------------------------------- the target's parts and the MTP layer
def load_llama2c(path):
    """A llama2.c checkpoint as an HF-named family description (q/k rows in rotate-half order)."""
    with open(path, "rb") as f:
        hdr = struct.unpack("<7i", f.read(28))
        data = np.frombuffer(f.read(), dtype=np.float32)
    dim, hid, L, nh, nkv, V, seq = hdr
    tied, V, hd = V > 0, abs(V), dim // nh
    off = 0

    def take(*shape):
        nonlocal off
        n = int(np.prod(shape))
        a = data[off:off + n].reshape(shape)
        off += n
        return a

    w = {"emb": take(V, dim), "rms_att": take(L, dim), "wq": take(L, dim, dim), "wk": take(L, nkv * hd, dim),
         "wv": take(L, nkv * hd, dim), "wo": take(L, dim, dim), "rms_ffn": take(L, dim), "w1": take(L, hid, dim),
         "w2": take(L, dim, hid), "w3": take(L, hid, dim), "rms_final": take(dim)}
    off += seq * hd  # legacy RoPE tables
    cls = w["emb"] if tied else take(V, dim)
    perm = lambda m, heads: m.reshape(heads, hd // 2, 2, -1).transpose(0, 2, 1, 3).reshape(m.shape)
    last = {"input_layernorm.weight": w["rms_att"][L - 1], "post_attention_layernorm.weight": w["rms_ffn"][L - 1],
            "self_attn.q_proj.weight": perm(w["wq"][L - 1], nh), "self_attn.k_proj.weight": perm(w["wk"][L - 1], nkv),
            "self_attn.v_proj.weight": w["wv"][L - 1], "self_attn.o_proj.weight": w["wo"][L - 1],
            "mlp.gate_proj.weight": w["w1"][L - 1], "mlp.up_proj.weight": w["w3"][L - 1],
            "mlp.down_proj.weight": w["w2"][L - 1]}
    fam = dict(layers=L, dim=dim, heads=nh, kv_heads=nkv, head_dim=hd, vocab=V, eps=1e-5, rotary=hd,
               rope=dict(rope_theta=10000.0), qk_norm=False, bias=False, moe=None)
    return fam, w["emb"], cls, w["rms_final"], last


def load_hf(d, init):
    """init: "checkpoint", "last-layer" or None (the checkpoint's MTP layer when it has one).
    Returns (init, fam, embed, head, final norm, the layer's tensors by name within the layer)."""
    c = hf_reference.load_config(d)
    arch = c["architectures"][0]
    if arch == "DeepseekV3ForCausalLM":
        sys.exit("train_mtp_head: DeepSeek-V3's MTP layer uses MLA attention, which this trainer does not implement")
    known = ("LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "Qwen3MoeForCausalLM", "Glm4MoeForCausalLM")
    if arch not in known:
        sys.exit(f"train_mtp_head: architecture {arch} is not one of {', '.join(known)}")
    L, D = c["num_hidden_layers"], c["hidden_size"]
    nh = c["num_attention_heads"]
    hd = c.get("head_dim") or D // nh
    glm = arch == "Glm4MoeForCausalLM"
    moe = None
    if arch == "Qwen3MoeForCausalLM":
        E = c.get("num_experts") or c.get("num_local_experts")
        sparse = (L not in c.get("mlp_only_layers", [])) and E and (L + 1) % c.get("decoder_sparse_step", 1) == 0
        if sparse:
            moe = dict(E=E, k=c["num_experts_per_tok"], sigmoid=False, groups=1, topk_groups=1,
                       norm=c.get("norm_topk_prob", False), scale=1.0, shared=0)
    elif glm and L >= c.get("first_k_dense_replace", 1):
        moe = dict(E=c["n_routed_experts"], k=c["num_experts_per_tok"], sigmoid=True, groups=c.get("n_group") or 1,
                   topk_groups=c.get("topk_group") or 1, norm=c.get("norm_topk_prob", True),
                   scale=c.get("routed_scaling_factor", 1.0), shared=c.get("n_shared_experts", 0))
    fam = dict(layers=L, dim=D, heads=nh, kv_heads=c.get("num_key_value_heads") or nh, head_dim=hd,
               vocab=c["vocab_size"], eps=c.get("rms_norm_eps", 1e-6),
               rotary=int(hd * c.get("partial_rotary_factor", 1.0)), rope=c,
               qk_norm=arch in ("Qwen3ForCausalLM", "Qwen3MoeForCausalLM") or (glm and c.get("use_qk_norm", False)),
               bias=arch == "Qwen2ForCausalLM" or c.get("attention_bias", False), moe=moe, glm=glm)
    files = model_files(d)
    names = {}
    for f in files:
        for n in read_header(f)[0]:
            names[n] = f
    mtp, last = f"model.layers.{L}.", f"model.layers.{L - 1}."
    has_mtp = any(n.startswith(mtp) for n in names)
    init = init or ("checkpoint" if has_mtp else "last-layer")
    if init == "checkpoint" and not has_mtp:
        sys.exit(f"train_mtp_head: {d} has no MTP layer ({mtp}*): use --init last-layer")
    src = mtp if init == "checkpoint" else last
    want = [n for n in names if n.startswith(src)]
    emb_name = mtp + "embed_tokens.weight" if mtp + "embed_tokens.weight" in names else "model.embed_tokens.weight"
    head_name = (mtp + "shared_head.head.weight" if mtp + "shared_head.head.weight" in names
                 else "model.embed_tokens.weight" if c.get("tie_word_embeddings") else "lm_head.weight")
    want += [emb_name, head_name, "model.norm.weight"]
    t = {}
    for f in files:
        t.update(read_tensors(f, set(n for n in want if names.get(n) == f)))
    layer = {n[len(src):]: t[n] for n in want if n.startswith(src)}
    for k in ("embed_tokens.weight", "shared_head.head.weight"):
        layer.pop(k, None)  # frozen, not trained
    return init, fam, t[emb_name], t[head_name], t["model.norm.weight"], layer


def rms(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class MtpLayer(torch.nn.Module):
    """The MTP layer of one family, as src/models/decoder.cpp forward_mtp runs it."""

    def __init__(self, fam, layer, final_norm, fresh):
        super().__init__()
        self.fam = fam
        D = fam["dim"]
        self.p = torch.nn.ParameterDict()
        for k, v in layer.items():
            self.p[k.replace(".", "__")] = torch.nn.Parameter(torch.from_numpy(np.array(v, dtype=np.float32)))
        if fresh:  # "the hidden state passes through, the token adds a little"
            for k, v in {"enorm.weight": torch.ones(D), "hnorm.weight": torch.ones(D),
                         "eh_proj.weight": torch.cat([0.1 * torch.eye(D), torch.eye(D)], dim=1),
                         "shared_head.norm.weight": torch.from_numpy(np.array(final_norm))}.items():
                self.p[k.replace(".", "__")] = torch.nn.Parameter(v.clone().float())
        inv, self.af = hf_reference.rope_init(fam["rope"], fam["rotary"])
        self.inv = inv.float()

    def w(self, name):
        return self.p[name.replace(".", "__")]

    def has(self, name):
        return name.replace(".", "__") in self.p

    def attention(self, x, pos):
        f, (B, T, _) = self.fam, x.shape
        nh, nkv, hd, rd = f["heads"], f["kv_heads"], f["head_dim"], f["rotary"]

        def lin(n):
            y = x @ self.w(f"self_attn.{n}.weight").T
            return y + self.w(f"self_attn.{n}.bias") if f["bias"] and self.has(f"self_attn.{n}.bias") else y

        q, k, v = lin("q_proj").view(B, T, nh, hd), lin("k_proj").view(B, T, nkv, hd), lin("v_proj").view(B, T, nkv, hd)
        if f["qk_norm"]:
            q, k = rms(q, self.w("self_attn.q_norm.weight"), f["eps"]), rms(k, self.w("self_attn.k_norm.weight"), f["eps"])
        ang = pos[:, None].float() * self.inv[None, :]
        cos = (torch.cat([ang, ang], -1).cos() * self.af)[None, :, None, :]
        sin = (torch.cat([ang, ang], -1).sin() * self.af)[None, :, None, :]
        q = torch.cat([q[..., :rd] * cos + rotate_half(q[..., :rd]) * sin, q[..., rd:]], -1)
        k = torch.cat([k[..., :rd] * cos + rotate_half(k[..., :rd]) * sin, k[..., rd:]], -1)
        rep = nh // nkv
        k, v = k.repeat_interleave(rep, 2), v.repeat_interleave(rep, 2)
        s = torch.einsum("bthd,bshd->bhts", q, k) / math.sqrt(hd)
        s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        o = torch.einsum("bhts,bshd->bthd", s.softmax(-1), v).reshape(B, T, nh * hd)
        y = o @ self.w("self_attn.o_proj.weight").T
        # GLM never has an o_proj bias; Qwen2 has none either.
        return y

    def mlp(self, x, p):
        return (F.silu(x @ self.w(f"{p}.gate_proj.weight").T) * (x @ self.w(f"{p}.up_proj.weight").T)) @ \
            self.w(f"{p}.down_proj.weight").T

    def moe(self, x):
        m, (B, T, D) = self.fam["moe"], x.shape
        x2 = x.reshape(B * T, D)
        logits = x2 @ self.w("mlp.gate.weight").T
        with torch.no_grad():  # the routing choice (as the engine: route_impl.h)
            if m["sigmoid"]:
                s = torch.sigmoid(logits)
                b = self.w("mlp.gate.e_score_correction_bias") if self.has("mlp.gate.e_score_correction_bias") \
                    else torch.zeros(m["E"])
                sc = s + b
                G = m["groups"]
                if G > 1:
                    gs = sc.view(-1, G, m["E"] // G).topk(2, -1).values.sum(-1)
                    keep = torch.zeros_like(gs).scatter_(1, gs.topk(m["topk_groups"], -1).indices, 1.0)
                    # dropped groups: -inf, as the engine (backends/route_impl.h)
                    sc = sc.masked_fill(~keep.repeat_interleave(m["E"] // G, 1).bool(), float("-inf"))
                idx = sc.topk(m["k"], -1).indices
            else:
                idx = logits.softmax(-1).topk(m["k"], -1).indices
        if m["sigmoid"]:
            wgt = torch.sigmoid(logits).gather(1, idx)
            wgt = wgt / (wgt.sum(-1, keepdim=True) + 1e-20) if m["norm"] else wgt
            wgt = wgt * m["scale"]
        else:
            wgt = logits.softmax(-1).gather(1, idx)
            wgt = wgt / wgt.sum(-1, keepdim=True) if m["norm"] else wgt
        out = torch.zeros_like(x2)
        for e in torch.unique(idx).tolist():
            tok, slot = torch.where(idx == e)
            out = out.index_add(0, tok, self.mlp(x2[tok], f"mlp.experts.{e}") * wgt[tok, slot, None])
        if m["shared"]:
            out = out + self.mlp(x2, "mlp.shared_experts")
        return out.view(B, T, D)

    def forward(self, emb, head, next_ids, h):
        """next_ids [B, T] (token t+1), h [B, T, D] (hidden of t) -> logits [B, T, V] for x_{t+2}."""
        f, eps = self.fam, self.fam["eps"]
        T = next_ids.shape[1]
        x = torch.cat([rms(emb[next_ids], self.w("enorm.weight"), eps), rms(h, self.w("hnorm.weight"), eps)], -1)
        x = x @ self.w("eh_proj.weight").T
        x = x + self.attention(rms(x, self.w("input_layernorm.weight"), eps), torch.arange(T))
        y = rms(x, self.w("post_attention_layernorm.weight"), eps)
        x = x + (self.moe(y) if f["moe"] else self.mlp(y, "mlp"))
        return rms(x, self.w("shared_head.norm.weight"), eps) @ head.T

    def tensors(self, prefix, trained):
        return {prefix + k.replace("__", "."): v.detach().numpy() for k, v in self.p.items() if k in trained}


# ---------------------------------------------------------------- training
def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="llama2.c .bin or HF model directory (the data's model)")
    ap.add_argument("--data", required=True, help="safetensors from `mxserve mtp-data --model MODEL`")
    ap.add_argument("--out", required=True, help="safetensors file to write")
    ap.add_argument("--init", choices=["checkpoint", "last-layer"], default=None,
                    help="start from the checkpoint's MTP layer (default when it has one) or a copy of the last layer")
    ap.add_argument("--train", choices=["all", "no-experts"], default="all",
                    help="no-experts: keep the routed experts as they start (a much smaller head file)")
    ap.add_argument("--steps", type=int, default=1500, help="optimizer steps (0: check and export the start)")
    ap.add_argument("--batch", type=int, default=32, help="sequences per step")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--target-temperature", type=float, default=1.0,
                    help="1: the model's own distribution (top-k of it); below 1 sharpens it over the top-k "
                         "towards its argmax, what greedy acceptance needs (for nearly flat models)")
    ap.add_argument("--dtype", choices=["f32", "bf16"], default="f32", help="of the written tensors")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    if a.threads:
        torch.set_num_threads(a.threads)
    gen = torch.Generator().manual_seed(a.seed)

    if os.path.isdir(a.model):
        init, fam, emb, head, final_norm, layer = load_hf(a.model, a.init)
    else:
        if a.init == "checkpoint":
            sys.exit("train_mtp_head: a llama2.c checkpoint has no MTP layer: use --init last-layer")
        init = "last-layer"
        fam, emb, head, final_norm, layer = load_llama2c(a.model)
    d = read_tensors(a.data)
    meta = read_header(a.data)[0].get("__metadata__", {})
    if meta.get("format") != "mxserve-mtp-data":
        sys.exit(f"{a.data}: not written by `mxserve mtp-data`")
    if int(meta["hidden_size"]) != fam["dim"] or int(meta["vocab_size"]) != fam["vocab"]:
        sys.exit(f"{a.data}: hidden {meta['hidden_size']} / vocab {meta['vocab_size']} do not match the model's "
                 f"{fam['dim']} / {fam['vocab']}: the data is from another model")
    emb, head = torch.from_numpy(np.array(emb)), torch.from_numpy(np.array(head))
    tok = torch.from_numpy(d["tokens"]).long()
    hid = torch.from_numpy(d["hidden"])
    tid, tlg, lse = torch.from_numpy(d["topk_ids"]).long(), torch.from_numpy(d["topk_logits"]), torch.from_numpy(d["lse"])
    N, Lseq = tok.shape
    # Row t: input (x_{t+1}, h_t); target: the model's distribution at t+1 (top-k, normalised by lse).
    inp, h_in = tok[:, 1:], hid[:, :-1]
    if not 0 < a.target_temperature <= 1:
        sys.exit("--target-temperature must be in (0, 1]")
    t_ids = tid[:, 1:]
    t_p = ((tlg[:, 1:] - lse[:, 1:, None]).exp() if a.target_temperature == 1
           else (tlg[:, 1:] / a.target_temperature).softmax(-1))
    n_val = max(1, N // 8)
    val = torch.arange(n_val)

    if a.train == "no-experts" and init != "checkpoint":
        sys.exit("train_mtp_head: --train no-experts keeps the checkpoint's MTP experts: it needs --init checkpoint")
    net = MtpLayer(fam, layer, final_norm, fresh=init == "last-layer")
    trained = [k for k in net.p if not (a.train == "no-experts" and k.startswith("mlp__experts__"))]
    for k, p in net.p.items():
        p.requires_grad_(k in trained)

    def evaluate(rows):
        with torch.no_grad():
            outs = [net(emb, head, inp[rows[i:i + 4]], h_in[rows[i:i + 4]]) for i in range(0, len(rows), 4)]
            out = torch.cat(outs)
            agree = (out.argmax(-1) == t_ids[rows, :, 0]).float().mean().item()
            logq = out.log_softmax(-1).gather(-1, t_ids[rows])
            p = t_p[rows]
            kl = (p * (p.clamp_min(1e-30).log() - logq)).sum(-1).mean().item()
        return out, agree, kl

    out, agree, kl = evaluate(val)
    print(f"start ({init}): held-out top-1 agreement with the model's next-next token {agree:.3f}, "
          f"top-{tid.shape[-1]} KL {kl:.3f}")
    if init == "checkpoint" and "mtp_top1" in d:
        eng = torch.from_numpy(d["mtp_top1"]).long()[val, :-1]
        same = (out.argmax(-1) == eng).float().mean().item()
        print(f"check: the torch MTP forward picks the engine's MTP token at {same:.4f} of held-out rows")
        if same < 0.98:
            sys.exit("the trainer's MTP forward does not reproduce the engine's (different layer semantics)")

    opt = torch.optim.AdamW([net.p[k] for k in trained], lr=a.lr, weight_decay=0.0)
    warm = max(1, a.steps // 20)  # linear warm-up, then cosine decay to 0
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda i: min(1.0, (i + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(i, a.steps) / max(a.steps, 1))))
    t0 = time.time()
    for step in range(a.steps):
        b = torch.randint(n_val, N, (min(a.batch, N - n_val),), generator=gen)
        o = net(emb, head, inp[b], h_in[b])
        loss = -(t_p[b] * o.log_softmax(-1).gather(-1, t_ids[b])).sum(-1).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if (step + 1) % max(1, a.steps // 10) == 0:
            _, agree, kl = evaluate(val)
            print(f"step {step + 1}: train loss {loss.item():.3f}, held-out top-1 agreement {agree:.3f}, "
                  f"KL {kl:.3f} ({time.time() - t0:.0f} s)", flush=True)
    _, agree, kl = evaluate(val)
    meta_out = {"format": "mxserve-mtp-head", "base_model": os.path.basename(os.path.normpath(a.model)),
                "trained_by": "tools/train_mtp_head.py", "data": os.path.basename(a.data), "seqs": str(N),
                "len": str(Lseq), "steps": str(a.steps), "batch": str(a.batch), "init": init, "train": a.train,
                "target_temperature": str(a.target_temperature),
                "seed": str(a.seed), "heldout_top1": f"{agree:.4f}", "heldout_kl": f"{kl:.4f}"}
    write_safetensors(a.out, net.tensors(f"model.layers.{fam['layers']}.", set(trained)), meta_out, a.dtype == "bf16")
    print(f"wrote {a.out}: {len(trained)} tensors, held-out top-1 agreement {agree:.3f}, KL {kl:.3f}")


if __name__ == "__main__":
    main()
