#!/usr/bin/env python3
"""train.py: trains tela's demo model, a small Llama on the King James Bible.

Outside the product (a tool, like tools/reference): PyTorch on a GPU machine.

  python3 tools/train/train.py --data .train-data --out OUTDIR [--train-seconds 300]

Stages
  1. tokenizer: a byte-level BPE of --vocab tokens trained on train.txt with
     Hugging Face tokenizers, laid out exactly like Llama 3's tokenizer.json
     (its Split regex + ByteLevel, ignore_merges, BOS added by the
     post-processor), so `tela convert` names its pre-tokenizer "llama-bpe".
     Special tokens: <|begin_of_text|> (BOS), <|end_of_text|> (EOS) and the
     ChatML pair <|im_start|>, <|im_end|>.
  2. data: train.txt as one token stream (training rows are BOS + 512 tokens
     from a random offset: exactly what a perplexity window looks like), plus
     1/8 of each batch from ChatML conversations made of consecutive training
     verses (user: a verse; assistant: the verses after it), so `tela chat`
     has something to do.
  3. training: a few configurations (dropout, epochs) at once, one process
     each on the same GPU, bf16 autocast, AdamW, warmup + cosine; each keeps
     the state with the best loss on valid.txt. The best of them wins.
  4. export: weights rounded to float16 (so the F16 GGUF computes exactly the
     function measured here), a Hugging Face checkpoint (config.json,
     model.safetensors, tokenizer.json, tokenizer_config.json) and
     results.json with the perplexity of heldout.txt in float32 with
     llama-perplexity's rules, measured by transformers' LlamaForCausalLM
     loaded from that checkpoint (and by this script's own model, as a check).

--arch qwen35 trains a Qwen3.5 hybrid instead (qwen35_model.py: Gated
DeltaNet and gated attention layers, 3 : 1) with its multi-token-prediction
block trained jointly (loss = main + mtp_weight * step 1 + mtp2_weight *
step 2, the chained step an engine drafts with); --tokenizer-from GGUF
takes the tokenizer of an existing model (the shipped Llama demo) instead of
training one, so the two models share a vocabulary. Its export also writes
mtp-reference.json/.f32: main and MTP logits of the model at a few
positions, the reference of tela's MTP test.

--byte-tokenizer replaces stage 1 by a plain byte vocabulary (no merges) and
works without HF tokenizers/transformers; with --cpu --tiny it is a dry run
of the whole pipeline on a laptop-class CPU.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import qwen35_model as qm  # noqa: E402

SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>", "<|im_end|>"]
BOS, EOS, IM_START, IM_END = 0, 1, 2, 3
# Llama 3's pre-tokenizer regex, character for character (tela convert
# recognizes the tokenizer by it).
LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                r"\s*[\r\n]+|\s+(?!\S)|\s+")
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
          "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def log(*a):
    print("[%7.1fs]" % (time.time() - T0), *a, flush=True)


T0 = time.time()

# ---------------------------------------------------------------- tokenizer


def bytes_to_unicode():
    """GPT-2's byte -> printable character table (ByteLevel's alphabet)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + \
        list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


def tokenizer_json_skeleton(vocab, merges):
    """tokenizer.json in Llama 3's layout for the given vocab/merges."""
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True} for i, s in enumerate(SPECIALS)],
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": LLAMA3_REGEX}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
        "post_processor": {"type": "Sequence", "processors": [
            {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
            {"type": "TemplateProcessing",
             "single": [{"SpecialToken": {"id": SPECIALS[BOS], "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
             "pair": [{"SpecialToken": {"id": SPECIALS[BOS], "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                      {"SpecialToken": {"id": SPECIALS[BOS], "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
             "special_tokens": {SPECIALS[BOS]: {"id": SPECIALS[BOS], "ids": [BOS], "tokens": [SPECIALS[BOS]]}}}]},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": True,
                  "vocab": vocab, "merges": merges},
    }


def byte_tokenizer():
    """Specials + the 256 byte tokens (+ one unused merge): every byte is one
    token, whatever the pre-tokenizer does, so encoding needs no library."""
    b2u = bytes_to_unicode()
    vocab = {s: i for i, s in enumerate(SPECIALS)}
    for b in range(256):
        vocab[b2u[b]] = len(SPECIALS) + b
    # one merge that plain text never uses (bytes 0x00 0x01): GGUF readers
    # want a non-empty merge list
    vocab[b2u[0] + b2u[1]] = len(vocab)
    tj = tokenizer_json_skeleton(vocab, [b2u[0] + " " + b2u[1]])
    ids_of = {b: vocab[b2u[b]] for b in range(256)}

    def encode(text):
        return [ids_of[b] for b in text.encode("utf-8")]
    return tj, encode


def train_bpe(train_path, vocab_size):
    """Byte-level BPE trained with HF tokenizers, then re-read from the
    Llama-3-layout JSON so encoding uses exactly what is shipped."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train([train_path], trainer)
    trained = json.loads(tok.to_str())
    tj = tokenizer_json_skeleton(trained["model"]["vocab"], trained["model"]["merges"])
    for i, s in enumerate(SPECIALS):
        assert tj["model"]["vocab"].get(s, i) == i, "special token %s is not id %d" % (s, i)
    final = Tokenizer.from_str(json.dumps(tj))

    def encode(text):
        return final.encode(text, add_special_tokens=False).ids
    # the post-processor adds BOS, as Llama 3's does
    assert final.encode("In the beginning").ids[0] == BOS
    return tj, encode


def gguf_tokenizer(path):
    """The vocabulary and merges of a GGUF file (tokenizer.ggml.tokens /
    .merges), laid out as tokenizer_json_skeleton does (the file was made
    from such a tokenizer.json by tela convert)."""
    import struct
    f = open(path, "rb")
    rd = lambda fmt: struct.unpack("<" + fmt, f.read(struct.calcsize("<" + fmt)))[0]
    if f.read(4) != b"GGUF":
        raise SystemExit("%s is not a GGUF file" % path)
    rd("I")
    rd("Q")
    n_kv = rd("Q")
    rstr = lambda: f.read(rd("Q")).decode("utf-8")
    sizes = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

    def value(t):
        if t == 8:
            return rstr()
        if t == 9:
            et, n = rd("I"), rd("Q")
            return [value(et) for _ in range(n)]
        return rd(sizes[t])
    kv = {}
    for _ in range(n_kv):
        k = rstr()
        kv[k] = value(rd("I"))
    tokens, merges = kv["tokenizer.ggml.tokens"], kv["tokenizer.ggml.merges"]
    vocab = {t: i for i, t in enumerate(tokens) if not (t.startswith("[PAD") and t.endswith("]"))}
    for i, s in enumerate(SPECIALS):
        assert tokens[i] == s, "token %d of %s is %r, not %s" % (i, path, tokens[i], s)
    from tokenizers import Tokenizer
    tj = tokenizer_json_skeleton(vocab, merges)
    final = Tokenizer.from_str(json.dumps(tj))
    return tj, (lambda text: final.encode(text, add_special_tokens=False).ids)


def tokenizer_config(ctx):
    return {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": SPECIALS[BOS], "eos_token": SPECIALS[EOS],
            "add_bos_token": True, "add_eos_token": False, "clean_up_tokenization_spaces": False,
            "model_max_length": ctx, "chat_template": CHATML}

# -------------------------------------------------------------------- model


class RMSNorm(nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(x.dtype)


def rope_tables(head_dim, n_pos, theta, device):
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device=device) / head_dim))
    f = torch.outer(torch.arange(n_pos, dtype=torch.float32, device=device), inv)
    emb = torch.cat([f, f], dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.nh, self.nkv, self.hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        d = c["hidden_size"]
        self.q_proj = nn.Linear(d, self.nh * self.hd, bias=False)
        self.k_proj = nn.Linear(d, self.nkv * self.hd, bias=False)
        self.v_proj = nn.Linear(d, self.nkv * self.hd, bias=False)
        self.o_proj = nn.Linear(self.nh * self.hd, d, bias=False)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.nh, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.nkv, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.nkv, self.hd).transpose(1, 2)
        q = q * cos.to(q.dtype) + rotate_half(q) * sin.to(q.dtype)
        k = k * cos.to(k.dtype) + rotate_half(k) * sin.to(k.dtype)
        rep = self.nh // self.nkv
        if rep > 1:
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        if hasattr(F, "scaled_dot_product_attention"):
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # old torch (CPU dry runs)
            s = (q @ k.transpose(-1, -2)) / math.sqrt(self.hd)
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
            o = s.masked_fill(mask, float("-inf")).softmax(-1) @ v
        return self.o_proj(o.transpose(1, 2).reshape(B, T, self.nh * self.hd))


MLP = qm.MLP  # the SwiGLU block, the same in both architectures


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.input_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.self_attn = Attention(c)
        self.post_attention_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.mlp = MLP(c)


class Body(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList([Layer(c) for _ in range(c["num_hidden_layers"])])
        self.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])


class Llama(nn.Module):
    """Transformers' LlamaForCausalLM (default RoPE, tied embeddings), with
    the same parameter names, plus dropout on the embeddings and on each
    residual branch for training."""

    def __init__(self, c, dropout=0.0):
        super().__init__()
        self.c = c
        self.model = Body(c)
        self.dropout = dropout
        cos, sin = rope_tables(c["head_dim"], c["max_position_embeddings"], c["rope_theta"], "cpu")
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        std = 0.02
        for n, p in self.named_parameters():
            if p.dim() == 2:
                s = std / math.sqrt(2 * c["num_hidden_layers"]) if n.endswith(("o_proj.weight", "down_proj.weight")) else std
                nn.init.normal_(p, 0.0, s)

    def forward(self, ids):
        T = ids.shape[1]
        cos, sin = self.cos[:T], self.sin[:T]
        drop = lambda t: F.dropout(t, self.dropout, self.training) if self.dropout > 0 else t
        h = drop(self.model.embed_tokens(ids))
        for layer in self.model.layers:
            h = h + drop(layer.self_attn(layer.input_layernorm(h), cos, sin))
            h = h + drop(layer.mlp(layer.post_attention_layernorm(h)))
        h = self.model.norm(h)
        return F.linear(h, self.model.embed_tokens.weight)  # tied lm_head


def model_config(a, vocab_size):
    if a.arch == "qwen35":
        return qm.config(vocab_size, a.hidden, a.ff, a.layers, a.heads, a.kv_heads, a.head_dim or a.hidden // a.heads,
                         a.ctx, a.linear_k_heads, a.linear_v_heads, a.linear_dim, a.linear_dim, a.mtp_layers, BOS,
                         EOS)
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "vocab_size": vocab_size, "hidden_size": a.hidden, "intermediate_size": a.ff,
        "num_hidden_layers": a.layers, "num_attention_heads": a.heads, "num_key_value_heads": a.kv_heads,
        "head_dim": a.hidden // a.heads, "hidden_act": "silu", "max_position_embeddings": a.ctx,
        "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
        "attention_bias": False, "attention_dropout": 0.0, "mlp_bias": False, "tie_word_embeddings": True,
        "bos_token_id": BOS, "eos_token_id": EOS, "initializer_range": 0.02, "use_cache": True,
        "pretraining_tp": 1, "dtype": "float16",
    }

# ---------------------------------------------------------------- perplexity


@torch.no_grad()
def perplexity(logits_fn, tokens, ctx, n_chunks=-1):
    """llama-perplexity's rules: tokens already hold BOS first (the vocab adds
    BOS); windows of ctx tokens, the first of each replaced by BOS; score the
    tokens after position ctx/2 given everything before them in the window.
    Returns ppl, its error estimate, the running ppl after each chunk, count."""
    n_max = len(tokens) // ctx
    n = n_max if n_chunks < 0 else min(n_chunks, n_max)
    first = ctx // 2
    nll = nll2 = 0.0
    count = 0
    running = []
    for i in range(n):
        chunk = list(tokens[i * ctx:(i + 1) * ctx])
        chunk[0] = BOS
        logits = logits_fn(chunk)  # [ctx, V] float32
        lp = torch.log_softmax(logits[first:ctx - 1].double(), dim=-1)
        tgt = torch.tensor(chunk[first + 1:ctx], device=lp.device)
        v = -lp.gather(1, tgt[:, None])[:, 0]
        nll += v.sum().item()
        nll2 += (v * v).sum().item()
        count += ctx - first - 1
        running.append(math.exp(nll / count))
    if count == 0:
        return float("nan"), float("nan"), [], 0
    mean = nll / count
    var = nll2 / count - mean * mean
    ppl = math.exp(mean)
    err = math.sqrt(var / (count - 1)) * ppl if var > 0 else float("nan")
    return ppl, err, running, count

# ------------------------------------------------------------------ data


def chapters(text):
    """kjv text -> list of chapters, each a list of verse lines."""
    parts = text.split("\n\n")  # heading, verses, heading, verses, ...
    return [[l for l in body.split("\n") if l] for body in parts[1::2]]


def chat_conversations(text, rng):
    """ChatML conversations from consecutive verses of the training chapters:
    the user says a verse, the assistant answers with the next one or two."""
    convs = []
    for verses in chapters(text):
        i = 0
        while i + 1 < len(verses):
            turns = []
            for _ in range(1 + int(rng.random() * 3)):
                if i + 1 >= len(verses):
                    break
                k = 1 + int(rng.random() * 2)
                turns.append(("user", verses[i]))
                turns.append(("assistant", " ".join(verses[i + 1:i + 1 + k])))
                i += 1 + k
            convs.append("".join("<|im_start|>%s\n%s<|im_end|>\n" % t for t in turns))
    return convs


def encode_chat(conv, encode):
    """ChatML text -> ids, the special tokens as single ids (the text is split
    at them; the pieces between are ordinary text)."""
    ids = []
    for part in conv.split("<|im_start|>"):
        if not part:
            continue
        ids.append(IM_START)
        body, _, rest = part.partition("<|im_end|>")
        ids += encode(body)
        ids.append(IM_END)
        ids += encode(rest)
    return ids


def prepare(a, out):
    """Stages 1-2; writes work/data.pt and returns (tokenizer json, config)."""
    rd = lambda n: open(os.path.join(a.data, n), encoding="utf-8").read()
    train_text, valid_text, held_text = rd("train.txt"), rd("valid.txt"), rd("heldout.txt")
    excerpt_text = rd("heldout-excerpt.txt")
    if a.tiny:
        train_text = train_text[:300000]
    t = time.time()
    if a.byte_tokenizer:
        tj, encode = byte_tokenizer()
    elif a.tokenizer_from:
        tj, encode = gguf_tokenizer(a.tokenizer_from)
    else:
        tj, encode = train_bpe(os.path.join(a.data, "train.txt") if not a.tiny else write_tmp(out, train_text), a.vocab)
    n_vocab = max(max(tj["model"]["vocab"].values()), max(x["id"] for x in tj["added_tokens"])) + 1
    if n_vocab > a.vocab:
        raise SystemExit("the tokenizer has %d tokens, more than --vocab %d" % (n_vocab, a.vocab))
    n_vocab = a.vocab  # a shorter vocabulary is padded (tela convert names the pads [PADn])
    log("tokenizer: %d tokens, %d merges (%.1fs)" % (n_vocab, len(tj["model"]["merges"]), time.time() - t))
    t = time.time()
    ids = {k: [BOS] + encode(v) for k, v in
           (("train", train_text), ("valid", valid_text), ("heldout", held_text), ("excerpt", excerpt_text))}
    import random
    rng = random.Random(1234)
    convs = chat_conversations(train_text, rng)
    chat_ids = [encode_chat(c, encode) for c in convs]
    # pack conversations into rows of ctx+1 tokens, each row BOS + whole conversations
    rows, cur = [], [BOS]
    for c in chat_ids:
        if len(cur) + len(c) > a.ctx + 1:
            if len(cur) > 1:
                rows.append(cur)
            cur = [BOS]
            c = c[:a.ctx]
        cur += c
    rows.append(cur)
    chat = torch.full((len(rows), a.ctx + 1), -1, dtype=torch.int32)
    for i, r in enumerate(rows):
        chat[i, :len(r)] = torch.tensor(r, dtype=torch.int32)
    for k, v in ids.items():
        log("%-8s %8d tokens (%.2f bytes/token)" % (k, len(v), len(
            {"train": train_text, "valid": valid_text, "heldout": held_text, "excerpt": excerpt_text}[k].encode()) / len(v)))
    log("chat: %d conversations in %d rows (%.1fs)" % (len(convs), len(rows), time.time() - t))
    cfg = model_config(a, n_vocab)
    torch.save({k: torch.tensor(v, dtype=torch.int32) for k, v in ids.items()} | {"chat": chat},
               os.path.join(out, "work", "data.pt"))
    return tj, cfg, ids


def write_tmp(out, text):
    p = os.path.join(out, "work", "train-tiny.txt")
    with open(p, "w", encoding="utf-8") as f:
        f.write(text)
    return p

# ------------------------------------------------------------------ worker


def worker(a, wcfg):
    """Trains one configuration until its planned steps or the deadline;
    saves the state with the best valid loss (second-half scoring, as the
    perplexity is measured) to work/NAME.pt and its log to work/NAME.json."""
    dev = "cuda" if torch.cuda.is_available() and not a.cpu else "cpu"
    if dev == "cpu":
        torch.set_num_threads(1)
    torch.manual_seed(wcfg["seed"])
    name = wcfg["name"]
    for ext in (".pt", ".json"):  # never pick up a file of an earlier run
        if os.path.exists(os.path.join(a.out, "work", name + ext)):
            os.remove(os.path.join(a.out, "work", name + ext))
    c = json.load(open(os.path.join(a.out, "work", "config.json")))
    data = torch.load(os.path.join(a.out, "work", "data.pt"))
    train = data["train"].long().to(dev)
    valid = data["valid"].long()
    chat = data["chat"].long().to(dev)
    ctx, B = a.ctx, a.batch
    n_chat = B // 8 if len(chat) else 0
    model = make_model(c, wcfg["dropout"]).to(dev)
    use_mtp = isinstance(model, qm.Qwen35) and model.mtp is not None
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt_kw = {"fused": True} if dev == "cuda" else {}
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": wcfg["wd"]}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=wcfg["lr"], betas=(0.9, 0.95), eps=1e-8, **opt_kw)
    steps_per_epoch = max(1, len(train) // (ctx * (B - n_chat)))
    planned = max(1, int(wcfg["epochs"] * steps_per_epoch))
    warm = min(a.warmup, planned // 4 + 1)
    total = planned
    eval_every = max(1, steps_per_epoch // 2)
    # validation windows, second half scored (llama-perplexity's rule)
    nv = len(valid) // ctx
    vwin = valid[:nv * ctx].view(nv, ctx).clone()
    vwin[:, 0] = BOS
    vwin = vwin.to(dev)
    first = ctx // 2
    amp = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if dev == "cuda" else \
        (lambda: torch.autocast("cpu", enabled=False))

    mtp_val = {}

    @torch.no_grad()
    def val_loss():
        """The main model's loss (second halves); with MTP, also how often
        each MTP step's greedy guess equals the main model's greedy pick
        there (greedy speculative decoding's acceptance), in mtp_val."""
        model.eval()
        tot, n = 0.0, 0
        agree, cnt = [0, 0], [0, 0]
        for i in range(0, nv, 32):
            x = vwin[i:i + 32]
            with amp():
                if use_mtp:
                    h = model.hidden(x)
                    lg = model.head(h)
                    ml, _ = model.mtp_forward(x, h, steps=2)
                else:
                    lg = model(x)
            lp = F.cross_entropy(lg[:, first:ctx - 1].float().reshape(-1, lg.shape[-1]),
                                 x[:, first + 1:].reshape(-1), reduction="sum")
            tot += lp.item()
            n += x.shape[0] * (ctx - first - 1)
            if use_mtp:
                pick = lg.argmax(-1)  # pick[:, t] guesses x[t + 1]
                for s_, m in enumerate(ml):  # step s_ + 1, row i guesses x[i + 2 + s_] = pick[:, i + 1 + s_]
                    agree[s_] += (m.argmax(-1) == pick[:, 1 + s_:]).sum().item()
                    cnt[s_] += m.shape[0] * m.shape[1]
        if use_mtp:
            mtp_val["agree1"], mtp_val["agree2"] = agree[0] / cnt[0], agree[1] / cnt[1]
        model.train()
        return tot / n

    hist = {"name": name, "cfg": wcfg, "planned_steps": planned, "steps_per_epoch": steps_per_epoch, "val": []}
    best, best_state, step, t_start = float("inf"), None, 0, time.time()
    deadline = wcfg["deadline"]
    offsets_hi = len(train) - ctx - 1
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    t10 = time.time()
    try:
        while step < total:
            if time.time() > deadline:
                hist["stopped"] = "deadline"
                break
            if step == 30:  # fit the schedule to the time left, measured on steps 10..30
                sync()
                per = (time.time() - t10) / 20
                fit = int((deadline - time.time()) / per * 0.92) + step
                total = max(step + 1, min(planned, fit))
                hist["step_seconds"] = per
                log("%s: %.1f ms/step, %d steps planned, %d fit, running %d (%.1f epochs)" % (
                    name, per * 1e3, planned, fit, total, total / steps_per_epoch))
            if step == 10:
                sync()
                t10 = time.time()
            lr = wcfg["lr"] * (step + 1) / warm if step < warm else \
                wcfg["lr"] * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, (step - warm) / max(1, total - warm)))))
            for g in opt.param_groups:
                g["lr"] = lr
            off = torch.randint(0, offsets_hi, (B - n_chat, 1), device=dev)
            rows = train[off + torch.arange(ctx, device=dev)]  # [B, ctx] text tokens
            x_text = torch.cat([torch.full((B - n_chat, 1), BOS, device=dev), rows], dim=1)
            if n_chat:
                x_chat = chat[torch.randint(0, len(chat), (n_chat,), device=dev)]
                x = torch.cat([x_text, x_chat], 0)
            else:
                x = x_text
            inp, tgt = x[:, :-1].clamp(min=0), x[:, 1:]
            with amp():
                if use_mtp:
                    h = model.hidden(inp)
                    lg = model.head(h)
                    ml, _ = model.mtp_forward(inp, h, steps=2)
                else:
                    lg = model(inp)
            loss = F.cross_entropy(lg.float().reshape(-1, lg.shape[-1]), tgt.reshape(-1), ignore_index=-1)
            if use_mtp:
                ce = lambda l, t: F.cross_entropy(l.float().reshape(-1, l.shape[-1]), t.reshape(-1), ignore_index=-1)
                main_loss = loss
                loss = loss + a.mtp_weight * ce(ml[0], x[:, 2:]) + a.mtp2_weight * ce(ml[1], x[:, 3:])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            step += 1
            if step % eval_every == 0 or step == total:
                vl = val_loss()
                hist["val"].append([step, round((main_loss if use_mtp else loss).item(), 4), round(vl, 4)] +
                                   ([round(mtp_val["agree1"], 4), round(mtp_val["agree2"], 4)] if use_mtp else []))
                if vl < best:
                    best = vl
                    best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
                    hist["best_step"] = step
                    if use_mtp:
                        hist["best_mtp_agree"] = [mtp_val["agree1"], mtp_val["agree2"]]
                if step % (eval_every * 4) == 0 or step == total:
                    log("%s: step %d/%d epoch %.1f lr %.2e train %.4f valid %.4f (ppl %.2f) best %.4f%s" % (
                        name, step, total, step / steps_per_epoch, lr, loss.item(), vl, math.exp(vl), best,
                        " mtp agree %.3f %.3f" % (mtp_val["agree1"], mtp_val["agree2"]) if use_mtp else ""))
    except Exception as e:  # keep what was learnt (e.g. out of memory)
        hist["error"] = repr(e)
        log("%s: stopped by %r" % (name, e))
    if best_state is None and step > 0:  # stopped before the first evaluation
        try:
            best = val_loss()
            best_state = model.state_dict()
            hist["best_step"] = step
        except Exception as e:
            hist["error_final_eval"] = repr(e)
    hist["steps"] = step
    hist["best_val"] = best
    hist["seconds"] = time.time() - t_start
    if best_state is not None:
        torch.save({k: v.cpu() for k, v in best_state.items()}, os.path.join(a.out, "work", name + ".pt"))
    json.dump(hist, open(os.path.join(a.out, "work", name + ".json"), "w"), indent=1)

# ------------------------------------------------------------------ export


def save_safetensors(path, tensors):
    """Minimal safetensors writer (float16 / float32 tensors)."""
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        t = t.detach().cpu().contiguous()
        b = t.numpy().tobytes()
        header[name] = {"dtype": {torch.float16: "F16", torch.float32: "F32"}[t.dtype], "shape": list(t.shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little"))
        f.write(h)
        for b in blobs:
            f.write(b)


def make_model(c, dropout=0.0):
    return qm.Qwen35(c, dropout) if c["model_type"].startswith("qwen3_5") else Llama(c, dropout)


def export(a, tj, cfg, ids, results):
    dev = "cuda" if torch.cuda.is_available() and not a.cpu else "cpu"
    hists = []
    for w in range(len(grid(a))):
        p = os.path.join(a.out, "work", "w%d.json" % w)
        if os.path.exists(p):
            hists.append(json.load(open(p)))
    results["runs"] = hists
    ok = [h for h in hists if os.path.exists(os.path.join(a.out, "work", h["name"] + ".pt"))]
    if not ok:
        raise SystemExit("no worker produced a model")
    win = min(ok, key=lambda h: h["best_val"])
    results["chosen"] = win["name"]
    log("chosen: %s (%s), valid loss %.4f at step %d" % (win["name"], win["cfg"], win["best_val"], win.get("best_step", -1)))
    state = torch.load(os.path.join(a.out, "work", win["name"] + ".pt"))
    state = {k: v.half() for k, v in state.items()}  # what the F16 GGUF holds
    hf = os.path.join(a.out, "hf")
    os.makedirs(hf, exist_ok=True)
    save_safetensors(os.path.join(hf, "model.safetensors"), state)
    json.dump(tj, open(os.path.join(hf, "tokenizer.json"), "w", encoding="utf-8"), ensure_ascii=False)
    json.dump(tokenizer_config(a.ctx), open(os.path.join(hf, "tokenizer_config.json"), "w"), indent=1)
    json.dump(cfg, open(os.path.join(hf, "config.json"), "w"), indent=1)
    json.dump({"bos_token_id": BOS, "eos_token_id": [EOS, IM_END]}, open(os.path.join(hf, "generation_config.json"), "w"))
    qwen = cfg["model_type"].startswith("qwen3_5")
    try:  # transformers' own config.json, the canonical form for its version
        if qwen:
            try:
                from transformers import Qwen3_5TextConfig as Cfg
            except ImportError:
                from transformers.models.qwen3_5.configuration_qwen3_5 import Qwen3_5TextConfig as Cfg
        else:
            from transformers import LlamaConfig as Cfg
        tc = Cfg(**{k: v for k, v in cfg.items() if k not in ("architectures", "model_type", "dtype", "rope_theta")})
        tc.architectures = cfg["architectures"]
        tc.save_pretrained(hf)
        c2 = json.load(open(os.path.join(hf, "config.json")))
        c2["dtype"] = "float16"
        json.dump(c2, open(os.path.join(hf, "config.json"), "w"), indent=1)
        for k in ("mtp_num_hidden_layers", "layer_types"):  # what tela convert must see
            if k in cfg and c2.get(k) != cfg[k]:
                raise ValueError("transformers' config wrote %s = %r, not %r" % (k, c2.get(k), cfg[k]))
        json.dump(c2, open(os.path.join(hf, "config.json"), "w"), indent=1)
    except Exception as e:  # keep the hand-written one
        log("transformers' config: %r" % e)
        json.dump(cfg, open(os.path.join(hf, "config.json"), "w"), indent=1)

    # own model, float32, f16-rounded weights
    own = make_model(cfg).to(dev)
    own.load_state_dict({k: v.float() for k, v in state.items()})
    own.eval()
    own_fn = lambda chunk: own(torch.tensor([chunk], device=dev))[0].float()
    if dev == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    fns = {"own": own_fn}
    if qwen:
        with torch.no_grad():  # the chunked delta rule against the token-by-token one
            x = torch.tensor([ids["excerpt"][:min(a.ctx, 200)]], device=dev)
            d = (own(x) - own(x, recurrent=True)).abs().max().item()
        results["own_chunked_vs_recurrent_max_abs_logit_diff"] = d
        log("own model, chunked vs recurrent delta rule: max |logit diff| %.3g" % d)
        mtp_reference(a, own, ids, results, dev)
    try:
        if qwen:
            from transformers import AutoModelForCausalLM as Auto
        else:
            from transformers import LlamaForCausalLM as Auto
        m = Auto.from_pretrained(hf, dtype=torch.float32, attn_implementation="eager").to(dev).eval()
        fns["transformers"] = lambda chunk: m(torch.tensor([chunk], device=dev)).logits[0].float()
        with torch.no_grad():
            x = ids["excerpt"][:a.ctx]
            d = (fns["own"](x) - fns["transformers"](x)).abs().max().item()
        results["own_vs_transformers_max_abs_logit_diff"] = d
        log("own model vs transformers: max |logit diff| %.3g" % d)
    except Exception as e:
        fns.pop("transformers", None)
        results["transformers_error"] = repr(e)
        log("transformers' model: %r" % e)
    ref = "transformers" if "transformers" in fns else "own"
    results["reference"] = ref
    results["ppl"] = {}
    for impl, fn in fns.items():
        for name, ctx in (("heldout", a.ctx), ("heldout", a.ctx // 2), ("excerpt", min(256, a.ctx)),
                          ("excerpt", min(128, a.ctx // 2))):
            if impl != ref and name != "heldout":
                continue
            t = time.time()
            ppl, err, running, count = perplexity(fn, ids[name], ctx)
            key = "%s@%d" % (name, ctx)
            r = {"ppl": ppl, "err": err, "count": count, "n_tokens": len(ids[name]), "chunks": len(running)}
            if impl == ref:
                r["running"] = running
                results["ppl"][key] = r
            else:
                results["ppl"][key + "/" + impl] = {"ppl": ppl, "err": err}
            log("%-13s %-18s PPL = %.4f +/- %.5f over %d chunks (%.1fs)" % (impl, key, ppl, err, len(running),
                                                                          time.time() - t))
    results["excerpt_ids"] = ids["excerpt"]
    # to check another tokenizer against this one: sha256 of the heldout ids
    # (BOS first) written as 'tela tokenize --add-special' prints them
    import hashlib
    results["heldout_ids_sha256"] = hashlib.sha256(" ".join(map(str, ids["heldout"])).encode()).hexdigest()
    results["n_params"] = sum(v.numel() for v in state.values())
    results["config"] = cfg
    # a few greedy samples (for the README)
    samples = {}
    enc = None
    if not a.byte_tokenizer:
        from tokenizers import Tokenizer
        tk = Tokenizer.from_str(json.dumps(tj))
        enc, dec = (lambda s: tk.encode(s).ids), (lambda i: tk.decode(i))
        for p in ("And God said", "The LORD is my shepherd", "In the beginning"):
            x = enc(p)
            with torch.no_grad():
                for _ in range(40):
                    x.append(int(own(torch.tensor([x], device=dev))[0, -1].argmax()))
            samples[p] = dec(x)
    results["greedy_samples"] = samples


@torch.no_grad()
def mtp_reference(a, own, ids, results, dev):
    """What tela's MTP test checks (mtp-reference.json + .f32, float32
    rows of n_vocab): over the excerpt's first N tokens x, the main logits
    and MTP step-1 logits (from h_i and x[i+1], guessing x[i+2]) at the
    rows listed, and MTP step-2 logits there (from step 1's output g_i and
    x[i+2] at position i+1, guessing x[i+3]). Also the MTP steps' greedy
    agreement with the main model over the heldout text (windows of ctx)."""
    n = 48
    x = torch.tensor([ids["excerpt"][:n]], device=dev)
    h = own.hidden(x)
    main = own.head(h)[0]
    (m1, m2), _ = own.mtp_forward(x, h, steps=2)
    rows = [0, 5, 17, 33, n - 3]
    blob = torch.cat([main[rows], m1[0, rows], m2[0, rows]]).float().cpu().contiguous()
    open(os.path.join(a.out, "mtp-reference.f32"), "wb").write(blob.numpy().tobytes())
    json.dump({"tokens": ids["excerpt"][:n], "rows": rows, "n_vocab": main.shape[-1],
               "layout": "main logits at rows, then MTP step 1 at rows, then MTP step 2 at rows (float32)"},
              open(os.path.join(a.out, "mtp-reference.json"), "w"), indent=1)
    held = ids["heldout"]
    agree, cnt = [0, 0], [0, 0]
    for s in range(0, len(held) - a.ctx, a.ctx):
        w = torch.tensor([held[s:s + a.ctx]], device=dev)
        h = own.hidden(w)
        pick = own.head(h).argmax(-1)
        ml, _ = own.mtp_forward(w, h, steps=2)
        for k, m in enumerate(ml):
            agree[k] += (m.argmax(-1) == pick[:, 1 + k:]).sum().item()
            cnt[k] += m.shape[1]
    results["mtp_greedy_agreement_heldout"] = [agree[0] / max(1, cnt[0]), agree[1] / max(1, cnt[1])]
    log("MTP greedy agreement with the main model on heldout: step 1 %.3f, step 2 %.3f" % tuple(
        results["mtp_greedy_agreement_heldout"]))


GRID_QWEN35 = [  # fewer at once: each step costs more than the Llama's
    ("w0", 0.2, 40, 2e-3, 0.1),
    ("w1", 0.3, 80, 1.5e-3, 0.1),
    ("w2", 0.4, 120, 1.5e-3, 0.1),
]

GRID = [  # name, dropout, epochs, lr, weight decay
    ("w0", 0.1, 12, 2e-3, 0.1),
    ("w1", 0.2, 25, 2e-3, 0.1),
    ("w2", 0.3, 40, 2e-3, 0.1),
    ("w3", 0.2, 50, 1e-3, 0.1),
    ("w4", 0.4, 80, 2e-3, 0.1),
    ("w5", 0.3, 120, 1.5e-3, 0.1),
]
TINY_GRID = [("w0", 0.1, 2, 3e-3, 0.1), ("w1", 0.2, 3, 3e-3, 0.1)]


def grid(a):
    return TINY_GRID if a.tiny else GRID_QWEN35 if a.arch == "qwen35" else GRID


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default=".train-data")
    p.add_argument("--out", required=True)
    p.add_argument("--train-seconds", type=float, default=300)
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--hidden", type=int, default=320)
    p.add_argument("--ff", type=int, default=768)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--heads", type=int, default=5)
    p.add_argument("--kv-heads", type=int, default=1)
    p.add_argument("--ctx", type=int, default=512)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--warmup", type=int, default=150)
    p.add_argument("--arch", choices=("llama", "qwen35"), default="llama")
    p.add_argument("--tokenizer-from", help="a GGUF whose tokenizer to use (no tokenizer training)")
    p.add_argument("--head-dim", type=int, default=0, help="attention head size (0: hidden / heads)")
    p.add_argument("--linear-k-heads", type=int, default=2, help="qwen35: Gated DeltaNet key heads")
    p.add_argument("--linear-v-heads", type=int, default=4, help="qwen35: Gated DeltaNet value heads")
    p.add_argument("--linear-dim", type=int, default=64, help="qwen35: Gated DeltaNet key and value head size")
    p.add_argument("--mtp-layers", type=int, default=1, help="qwen35: MTP blocks (0: none)")
    p.add_argument("--mtp-weight", type=float, default=0.3, help="qwen35: loss weight of MTP step 1")
    p.add_argument("--mtp2-weight", type=float, default=0.15, help="qwen35: loss weight of MTP step 2 (chained)")
    p.add_argument("--byte-tokenizer", action="store_true", help="no BPE: one token per byte (dry runs)")
    p.add_argument("--tiny", action="store_true", help="a tiny model on a slice of the data (dry runs)")
    p.add_argument("--cpu", action="store_true")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        worker(a, json.loads(a.worker))
        return
    os.makedirs(os.path.join(a.out, "work"), exist_ok=True)
    results = {"args": vars(a), "torch": torch.__version__}
    try:
        import transformers
        import tokenizers
        results["transformers"], results["tokenizers"] = transformers.__version__, tokenizers.__version__
    except ImportError:
        pass
    if torch.cuda.is_available() and not a.cpu:
        results["gpu"] = torch.cuda.get_device_name(0)
    tj, cfg, ids = prepare(a, a.out)
    json.dump(cfg, open(os.path.join(a.out, "work", "config.json"), "w"))
    log("model: %d parameters" % sum(p.numel() for p in make_model(cfg).parameters()))
    deadline = time.time() + a.train_seconds
    procs = []
    for i, (name, dr, ep, lr, wd) in enumerate(grid(a)):
        w = {"name": name, "dropout": dr, "epochs": ep, "lr": lr, "wd": wd, "seed": 1000 + i, "deadline": deadline}
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", json.dumps(w)] + \
            [x for k, v in vars(a).items() if k not in ("worker",) for x in arg_of(k, v)]
        procs.append(subprocess.Popen(cmd))
    for pr in procs:
        try:
            pr.wait(timeout=max(1, deadline - time.time() + 90))
        except subprocess.TimeoutExpired:
            pr.kill()
            pr.wait()
    log("training done")
    try:
        export(a, tj, cfg, ids, results)
    except Exception as e:  # the checkpoint is saved first; keep what was measured
        import traceback
        traceback.print_exc()
        results["export_error"] = repr(e)
    json.dump(results, open(os.path.join(a.out, "results.json"), "w"), indent=1)
    log("wrote %s" % os.path.join(a.out, "results.json"))


def arg_of(k, v):
    flag = "--" + k.replace("_", "-")
    if v is None:
        return []
    if isinstance(v, bool):
        return [flag] if v else []
    return [flag, str(v)]


if __name__ == "__main__":
    main()
