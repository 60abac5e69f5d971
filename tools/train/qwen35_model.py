"""qwen35_model.py: a small Qwen3.5 hybrid (transformers' Qwen3_5ForCausalLM,
text only, dense) with its multi-token-prediction block, for train.py.

Outside the product. Same parameter names as transformers (model.*,
linear_attn.*, self_attn.*) and as the Qwen3.5 checkpoints' MTP block
(mtp.fc, mtp.pre_fc_norm_embedding, mtp.pre_fc_norm_hidden, mtp.layers.0.*,
mtp.norm), plus dropout for training. What it computes:

  layers: Gated DeltaNet ("linear_attention") and gated full attention
  ("full_attention") as config["layer_types"] says, each
      x = x + mixer(norm(x));  x = x + mlp(norm(x))
  with Qwen3.5's RMSNorm x / rms(x) * (1 + w) (w stored, zero at init).

  Gated DeltaNet (nk key heads, nv value heads, value head j reading key
  head j // (nv / nk)): qkv = silu(causal depthwise conv1d(W_qkv h)), q and
  k L2-normalized, beta = sigmoid(W_b h), g = -exp(A_log) softplus(W_a h +
  dt_bias); per value head S = exp(g) S + k (beta (v - S^T k))^T, o = S^T q
  / sqrt(dk); out = W_out (rmsnorm(o) * w * silu(W_z h)). Computed in chunks
  of 64 (the WY form: a unit lower-triangular solve per chunk), checked
  against the token-by-token recurrence (recurrent_delta_rule).

  Gated attention: W_q gives per head [query | gate]; q, k RMSNorm per head;
  RoPE on the first partial_rotary_factor of each head (rotate-half); out =
  W_o (softmax(q k^T / sqrt(hd)) v * sigmoid(gate)).

  MTP (multi-token prediction, as vLLM's Qwen3-Next/Qwen3.5 MTP runs it):
  for position i, from the main model's final (normed) hidden state h_i and
  the next token x_{i+1}:
      u = fc([pre_fc_norm_embedding(emb(x_{i+1})) ; pre_fc_norm_hidden(h_i)])
      u = decoder layer (full attention, rotary position i, own KV cache)
      g_i = mtp.norm(u);  logits = lm_head(g_i)  -> a guess at x_{i+2}
  Chained (step 2, draft k >= 2): g_i takes the place of h_i with the drafted
  token, at position i + 1, attending to the step-1 keys of positions <= i
  and to itself, exactly what an inference engine's MTP cache holds then.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

CHUNK = 64


class QRMSNorm(nn.Module):
    """Qwen3.5's RMSNorm: weight stored as (w - 1)."""

    def __init__(self, d, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(d))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (xf * (1.0 + self.weight.float())).to(x.dtype)


class GatedRMSNorm(nn.Module):
    """rmsnorm(o) * w * silu(z), w stored plainly (ones at init)."""

    def __init__(self, d, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, o, z):
        of = o.float()
        of = of * torch.rsqrt(of.pow(2).mean(-1, keepdim=True) + self.eps)
        return (self.weight * of * F.silu(z.float())).to(o.dtype)


def l2norm(x, eps=1e-6):
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


def recurrent_delta_rule(q, k, v, g, beta):
    """Token by token (the reference): q, k [B, H, T, dk] normalized and q
    scaled, v [B, H, T, dv], g, beta [B, H, T]. Returns o [B, H, T, dv]."""
    B, H, T, dk = k.shape
    S = torch.zeros(B, H, dk, v.shape[-1], dtype=q.dtype, device=q.device)
    out = []
    for t in range(T):
        S = S * g[:, :, t].exp()[..., None, None]
        kt = k[:, :, t]
        delta = beta[:, :, t, None] * (v[:, :, t] - torch.einsum("bhkv,bhk->bhv", S, kt))
        S = S + kt[..., :, None] * delta[..., None, :]
        out.append(torch.einsum("bhkv,bhk->bhv", S, q[:, :, t]))
    return torch.stack(out, 2)


def chunk_delta_rule(q, k, v, g, beta, chunk=CHUNK):
    """The same in chunks (float32): within a chunk, with G the cumulative
    log decay, the corrected values U = T (beta V - beta exp(G) K S0) where
    T = (I + strict_lower(beta K K^T * exp(G_i - G_j)))^-1; outputs
    O = exp(G) Q S0 + (Q K^T * exp(G_i - G_j), causal) U; state S =
    exp(G_last) S0 + (K * exp(G_last - G))^T U."""
    B, H, T, dk = k.shape
    dv = v.shape[-1]
    pad = (chunk - T % chunk) % chunk
    if pad:
        q, k, v = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v))
        g, beta = (F.pad(x, (0, pad)) for x in (g, beta))
    n = (T + pad) // chunk
    q, k, v = (x.reshape(B, H, n, chunk, x.shape[-1]) for x in (q, k, v))
    g, beta = g.reshape(B, H, n, chunk), beta.reshape(B, H, n, chunk)
    G = g.cumsum(-1)
    tri = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).tril()
    decay = (G[..., :, None] - G[..., None, :]).masked_fill(~tri, float("-inf")).exp()  # [B,H,n,C,C]
    kb = k * beta[..., None]
    A = (kb @ k.transpose(-1, -2)) * decay
    A = A.tril(-1)  # strictly lower
    eye = torch.eye(chunk, dtype=q.dtype, device=q.device)
    Tm = torch.linalg.solve_triangular(eye + A, eye.expand_as(A), upper=False, unitriangular=True)
    u_v = Tm @ (v * beta[..., None])           # T beta V
    w_k = Tm @ (kb * G.exp()[..., None])       # T beta exp(G) K
    attn = (q @ k.transpose(-1, -2)) * decay   # causal incl. diagonal
    S = torch.zeros(B, H, dk, dv, dtype=q.dtype, device=q.device)
    outs = []
    for c in range(n):
        U = u_v[:, :, c] - w_k[:, :, c] @ S
        outs.append((q[:, :, c] * G[:, :, c, :, None].exp()) @ S + attn[:, :, c] @ U)
        last = G[:, :, c, -1]
        S = S * last.exp()[..., None, None] + (k[:, :, c] * (last[..., None] - G[:, :, c]).exp()[..., None]).transpose(-1, -2) @ U
    o = torch.stack(outs, 2).reshape(B, H, n * chunk, dv)
    return o[:, :, :T]


class GatedDeltaNet(nn.Module):
    def __init__(self, c):
        super().__init__()
        d = c["hidden_size"]
        self.nk, self.nv = c["linear_num_key_heads"], c["linear_num_value_heads"]
        self.dk, self.dv = c["linear_key_head_dim"], c["linear_value_head_dim"]
        self.kernel = c["linear_conv_kernel_dim"]
        self.key_dim, self.value_dim = self.nk * self.dk, self.nv * self.dv
        self.conv_dim = 2 * self.key_dim + self.value_dim
        self.in_proj_qkv = nn.Linear(d, self.conv_dim, bias=False)
        self.in_proj_z = nn.Linear(d, self.value_dim, bias=False)
        self.in_proj_b = nn.Linear(d, self.nv, bias=False)
        self.in_proj_a = nn.Linear(d, self.nv, bias=False)
        self.conv1d = nn.Conv1d(self.conv_dim, self.conv_dim, self.kernel, groups=self.conv_dim, padding=self.kernel - 1,
                                bias=False)
        self.dt_bias = nn.Parameter(torch.ones(self.nv))
        self.A_log = nn.Parameter(torch.log(torch.empty(self.nv).uniform_(1, 16)))
        self.norm = GatedRMSNorm(self.dv, c["rms_norm_eps"])
        self.out_proj = nn.Linear(self.value_dim, d, bias=False)

    def forward(self, h, recurrent=False):
        B, T, _ = h.shape
        x = self.in_proj_qkv(h).transpose(1, 2)
        x = F.silu(self.conv1d(x)[..., :T]).transpose(1, 2)
        q, k, v = torch.split(x, [self.key_dim, self.key_dim, self.value_dim], dim=-1)
        q = q.reshape(B, T, self.nk, self.dk)
        k = k.reshape(B, T, self.nk, self.dk)
        v = v.reshape(B, T, self.nv, self.dv)
        z = self.in_proj_z(h).reshape(B, T, self.nv, self.dv)
        beta = self.in_proj_b(h).float().sigmoid()
        g = -self.A_log.float().exp() * F.softplus(self.in_proj_a(h).float() + self.dt_bias.float())
        rep = self.nv // self.nk
        if rep > 1:
            q, k = q.repeat_interleave(rep, dim=2), k.repeat_interleave(rep, dim=2)
        q = l2norm(q.float()) / math.sqrt(self.dk)
        k = l2norm(k.float())
        tr = lambda t: t.transpose(1, 2).contiguous()
        rule = recurrent_delta_rule if recurrent else chunk_delta_rule
        o = rule(tr(q), tr(k), tr(v.float()), tr(g), tr(beta)).transpose(1, 2)  # [B, T, nv, dv]
        o = self.norm(o, z)
        return self.out_proj(o.reshape(B, T, self.value_dim).to(h.dtype))


def rope_tables(n_rot, n_pos, theta, device):
    inv = 1.0 / (theta ** (torch.arange(0, n_rot, 2, dtype=torch.float64, device=device) / n_rot))
    f = torch.outer(torch.arange(n_pos, dtype=torch.float64, device=device), inv)
    emb = torch.cat([f, f], dim=-1)
    return emb.cos().float(), emb.sin().float()


def apply_rope(x, cos, sin):
    n = cos.shape[-1]
    r, rest = x[..., :n], x[..., n:]
    h = n // 2
    rot = torch.cat([-r[..., h:], r[..., :h]], dim=-1)
    return torch.cat([r * cos.to(x.dtype) + rot * sin.to(x.dtype), rest], dim=-1)


class GatedAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        d = c["hidden_size"]
        self.nh, self.nkv, self.hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        self.q_proj = nn.Linear(d, self.nh * self.hd * 2, bias=False)
        self.k_proj = nn.Linear(d, self.nkv * self.hd, bias=False)
        self.v_proj = nn.Linear(d, self.nkv * self.hd, bias=False)
        self.o_proj = nn.Linear(self.nh * self.hd, d, bias=False)
        self.q_norm = QRMSNorm(self.hd, c["rms_norm_eps"])
        self.k_norm = QRMSNorm(self.hd, c["rms_norm_eps"])

    def qkv(self, h, cos, sin):
        """Rotated queries [B, nh, T, hd], keys and values [B, nh, T, hd]
        (KV heads repeated), gates [B, T, nh * hd]."""
        B, T, _ = h.shape
        qg = self.q_proj(h).view(B, T, self.nh, 2 * self.hd)
        q, gate = qg[..., :self.hd], qg[..., self.hd:].reshape(B, T, self.nh * self.hd)
        q = self.q_norm(q).transpose(1, 2)
        k = self.k_norm(self.k_proj(h).view(B, T, self.nkv, self.hd)).transpose(1, 2)
        v = self.v_proj(h).view(B, T, self.nkv, self.hd).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        rep = self.nh // self.nkv
        if rep > 1:
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        return q, k, v, gate

    def finish(self, o, gate):
        B, H, T, hd = o.shape
        o = o.transpose(1, 2).reshape(B, T, H * hd)
        return self.o_proj(o * torch.sigmoid(gate))

    def forward(self, h, cos, sin):
        q, k, v, gate = self.qkv(h, cos, sin)
        T = h.shape[1]
        if hasattr(F, "scaled_dot_product_attention"):
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # old torch (CPU dry runs)
            s = (q @ k.transpose(-1, -2)) / math.sqrt(self.hd)
            mask = torch.ones(T, T, dtype=torch.bool, device=h.device).triu(1)
            o = s.masked_fill(mask, float("-inf")).softmax(-1) @ v
        return self.finish(o, gate)


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        d, ff = c["hidden_size"], c["intermediate_size"]
        self.gate_proj = nn.Linear(d, ff, bias=False)
        self.up_proj = nn.Linear(d, ff, bias=False)
        self.down_proj = nn.Linear(ff, d, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, c, kind):
        super().__init__()
        self.kind = kind
        self.input_layernorm = QRMSNorm(c["hidden_size"], c["rms_norm_eps"])
        if kind == "full_attention":
            self.self_attn = GatedAttention(c)
        else:
            self.linear_attn = GatedDeltaNet(c)
        self.post_attention_layernorm = QRMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.mlp = MLP(c)

    def forward(self, h, cos, sin, drop, recurrent=False):
        x = self.input_layernorm(h)
        x = self.self_attn(x, cos, sin) if self.kind == "full_attention" else self.linear_attn(x, recurrent)
        h = h + drop(x)
        return h + drop(self.mlp(self.post_attention_layernorm(h)))


class Body(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList([Layer(c, t) for t in c["layer_types"]])
        self.norm = QRMSNorm(c["hidden_size"], c["rms_norm_eps"])


class MTP(nn.Module):
    def __init__(self, c):
        super().__init__()
        d = c["hidden_size"]
        self.fc = nn.Linear(2 * d, d, bias=False)
        self.pre_fc_norm_embedding = QRMSNorm(d, c["rms_norm_eps"])
        self.pre_fc_norm_hidden = QRMSNorm(d, c["rms_norm_eps"])
        self.layers = nn.ModuleList([Layer(c, "full_attention") for _ in range(c["mtp_num_hidden_layers"])])
        self.norm = QRMSNorm(d, c["rms_norm_eps"])

    def inputs(self, emb, h):
        return self.fc(torch.cat([self.pre_fc_norm_embedding(emb), self.pre_fc_norm_hidden(h)], dim=-1))


class Qwen35(nn.Module):
    """The model: main logits, and with mtp_steps the MTP blocks' logits."""

    def __init__(self, c, dropout=0.0):
        super().__init__()
        self.c = c
        self.model = Body(c)
        self.mtp = MTP(c) if c.get("mtp_num_hidden_layers", 0) > 0 else None
        self.dropout = dropout
        rp = c["rope_parameters"]
        n_rot = int(c["head_dim"] * rp["partial_rotary_factor"])
        cos, sin = rope_tables(n_rot, c["max_position_embeddings"] + 1, rp["rope_theta"], "cpu")
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        std = 0.02
        n_l = c["num_hidden_layers"]
        for n, p in self.named_parameters():
            if p.dim() == 2:
                s = std / math.sqrt(2 * n_l) if n.endswith(("o_proj.weight", "down_proj.weight", "out_proj.weight")) \
                    else std
                nn.init.normal_(p, 0.0, s)

    def drop(self, t):
        return F.dropout(t, self.dropout, self.training) if self.dropout > 0 else t

    def hidden(self, ids, recurrent=False):
        """The final normed hidden states [B, T, d]."""
        T = ids.shape[1]
        cos, sin = self.cos[:T], self.sin[:T]
        h = self.drop(self.model.embed_tokens(ids))
        for layer in self.model.layers:
            h = layer(h, cos, sin, self.drop, recurrent)
        return self.model.norm(h)

    def head(self, h):
        return F.linear(h, self.model.embed_tokens.weight)  # tied lm_head

    def forward(self, ids, recurrent=False):
        return self.head(self.hidden(ids, recurrent))

    def mtp_forward(self, ids, h, steps=1):
        """MTP over a sequence: ids [B, T], h = hidden(ids). Step 1 row i
        (i < T - 1) sees (h_i, ids[i + 1]) at position i and guesses ids[i + 2];
        step 2 row i (i < T - 2) sees (g_i, ids[i + 2]) at position i + 1,
        attending to step 1's keys of positions <= i and to itself, and
        guesses ids[i + 3]. Returns the logits of each step ([B, T-1, V],
        [B, T-2, V]) and the step-1 outputs g."""
        layer = self.mtp.layers[0]
        A = layer.self_attn
        T = ids.shape[1]
        emb = self.model.embed_tokens(ids)
        u = self.mtp.inputs(emb[:, 1:], h[:, :-1])
        cos, sin = self.cos[:T - 1], self.sin[:T - 1]
        x = layer.input_layernorm(u)
        q, k, v, gate = A.qkv(x, cos, sin)
        if hasattr(F, "scaled_dot_product_attention"):
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            s = (q @ k.transpose(-1, -2)) / math.sqrt(A.hd)
            mask = torch.ones(T - 1, T - 1, dtype=torch.bool, device=ids.device).triu(1)
            o = s.masked_fill(mask, float("-inf")).softmax(-1) @ v
        u = u + self.drop(A.finish(o, gate))
        u = u + self.drop(layer.mlp(layer.post_attention_layernorm(u)))
        g = self.mtp.norm(u)
        out = [self.head(g)]
        if steps >= 2:
            n = T - 2
            u2 = self.mtp.inputs(emb[:, 2:], g[:, :n])
            x2 = layer.input_layernorm(u2)
            q2, k2, v2, gate2 = A.qkv(x2, self.cos[1:n + 1], self.sin[1:n + 1])
            # keys: step 1's at positions j <= i, then the row's own
            s1 = (q2 @ k[:, :, :n].transpose(-1, -2)) / math.sqrt(A.hd)  # [B,H,n,n]
            mask = torch.ones(n, n, dtype=torch.bool, device=ids.device).triu(1)
            s1 = s1.masked_fill(mask, float("-inf"))
            s2 = (q2 * k2).sum(-1, keepdim=True) / math.sqrt(A.hd)  # [B,H,n,1]
            p = torch.cat([s1, s2], -1).float().softmax(-1).to(q2.dtype)
            o2 = p[..., :n] @ v[:, :, :n] + p[..., n:] * v2
            u2 = u2 + self.drop(A.finish(o2, gate2))
            u2 = u2 + self.drop(layer.mlp(layer.post_attention_layernorm(u2)))
            out.append(self.head(self.mtp.norm(u2)))
        return out, g


def mrope_sections(pairs):
    """Qwen's split of the rotary pairs into (temporal, height, width)
    sections; for text every section sees the same position."""
    t = (pairs + 2) // 3
    h = (pairs - t + 1) // 2
    return [t, h, pairs - t - h]


def config(vocab_size, hidden, ff, layers, heads, kv_heads, head_dim, ctx, nk, nv, dk, dv, mtp_layers, bos, eos):
    types = ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(layers)]
    return {
        "architectures": ["Qwen3_5ForCausalLM"], "model_type": "qwen3_5_text",
        "vocab_size": vocab_size, "hidden_size": hidden, "intermediate_size": ff,
        "num_hidden_layers": layers, "num_attention_heads": heads, "num_key_value_heads": kv_heads,
        "head_dim": head_dim, "hidden_act": "silu", "max_position_embeddings": ctx, "rms_norm_eps": 1e-6,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25,
                            "mrope_section": mrope_sections(head_dim // 8), "mrope_interleaved": True},
        "attention_bias": False, "attention_dropout": 0.0, "tie_word_embeddings": True,
        "layer_types": types, "full_attention_interval": 4,
        "linear_conv_kernel_dim": 4, "linear_key_head_dim": dk, "linear_value_head_dim": dv,
        "linear_num_key_heads": nk, "linear_num_value_heads": nv,
        "mtp_num_hidden_layers": mtp_layers,
        "bos_token_id": bos, "eos_token_id": eos, "initializer_range": 0.02, "use_cache": True, "dtype": "float16",
    }
