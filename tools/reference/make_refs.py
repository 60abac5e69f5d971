#!/usr/bin/env python3
"""make_refs.py: builds small random-weight Llama and Qwen3.5 checkpoints with
Hugging Face transformers and saves reference outputs for tela's parity tests.

Runs on a machine with PyTorch, transformers (5.x), safetensors and numpy; no
network. Everything goes into one directory (--out):

  OUT/manifest.json            models, files, configs, prompts
  OUT/hf/NAME/                 config.json + model.safetensors (float32)
  OUT/refs/NAME.json           per-prompt argmax, logsumexp, top-2 margin,
                               greedy continuation and its margins
  OUT/refs/NAME.logits.f32     logits at every prompt position, float32 LE

Weights are random and rounded to values exactly representable in f16, so a
F32 and a F16 GGUF of the same checkpoint compute the same function. The
reference forward runs on the CPU (no TF32, deterministic) with the model in
float64; a float32 forward is compared against it as a sanity check.

"llama-gqa-q8_0" is llama-gqa with every weight that `tela convert --type q8_0`
quantizes replaced by its exact Q8_0 dequantization (ggml's reference
quantizer), so tela's Q8_0 GGUF has an exact reference too.

Usage (repo root):
  python3 tools/reference/make_refs.py --out $OUT/refs
"""

import sys

# Force transformers' pure-torch Gated DeltaNet and causal-conv1d paths: the
# hub-kernel decorators pick flash-linear-attention / causal-conv1d when they
# can be imported, so make them unimportable before transformers is loaded.
for _blocked in ("fla", "causal_conv1d"):
    sys.modules[_blocked] = None

import argparse
import copy
import json
import math
import os
import time

import numpy as np
import torch

import transformers
from transformers import AutoModelForCausalLM, LlamaConfig

try:
    from transformers import Qwen3_5TextConfig
except ImportError:  # older layout
    from transformers.models.qwen3_5.configuration_qwen3_5 import Qwen3_5TextConfig

GREEDY_STEPS = 24
VOCAB = 512


def log(msg):
    print(msg, flush=True)


# ------------------------------------------------------------------ models

def llama_gqa_config():
    return LlamaConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, head_dim=24,
        max_position_embeddings=1024, rms_norm_eps=1e-5,
        rope_parameters={
            "rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0,
            "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,
        },
        tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
    )


def llama_tied_config():
    return LlamaConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, head_dim=16,
        max_position_embeddings=1024, rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
        tie_word_embeddings=True, bos_token_id=1, eos_token_id=2,
    )


def qwen35_config(n_v_heads, tied, n_k_heads=2):
    return Qwen3_5TextConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
        num_attention_heads=2, num_key_value_heads=1, head_dim=32,
        max_position_embeddings=1024, rms_norm_eps=1e-6,
        linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=16,
        linear_num_key_heads=n_k_heads, linear_num_value_heads=n_v_heads,
        layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"],
        rope_parameters={
            "rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25,
            "mrope_section": [2, 1, 1], "mrope_interleaved": True,
        },
        tie_word_embeddings=tied, bos_token_id=1, eos_token_id=2,
    )


MODELS = [
    # name, arch, config factory, long prompt length, GGUF types to build
    ("llama-gqa", "llama", llama_gqa_config, 260, ["f32", "f16", "q8_0"]),
    ("llama-tied", "llama", llama_tied_config, 260, ["f32", "f16"]),
    ("qwen35-sym", "qwen35", lambda: qwen35_config(2, True), 150, ["f32", "f16"]),
    ("qwen35-asym", "qwen35", lambda: qwen35_config(4, False), 150, ["f32", "f16"]),
    # 4 key / 8 value heads: several key heads of value heads each (the
    # tiled value order of a GGUF matters within a tensor-parallel rank)
    ("qwen35-wide", "qwen35", lambda: qwen35_config(8, True, n_k_heads=4), 70, ["f32"]),
]


def build_model(config):
    """Eager attention (plain matmul + softmax: float64-capable, no fused kernels)."""
    try:
        model = AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    except (TypeError, ValueError):
        config._attn_implementation = "eager"
        model = AutoModelForCausalLM.from_config(config)
    return model.float().eval()


def to_f16_exact(t):
    return t.to(torch.float16).to(torch.float32)


def randomize(model, gen):
    """Gives every parameter random f16-exact values, scaled so activations
    stay O(1) and the logits spread over a few units (clear margins)."""
    hidden = model.config.hidden_size
    with torch.no_grad():
        for name, p in model.named_parameters():
            shape = p.shape
            if name.endswith("A_log"):
                # decay rates A in [0.5, 4]: log stored, as in HF
                v = torch.log(torch.empty(shape).uniform_(0.5, 4.0, generator=gen))
            elif name.endswith("dt_bias"):
                v = torch.empty(shape).uniform_(-1.0, 1.0, generator=gen)
            elif "norm" in name and p.dim() == 1:
                # multiples of 2^-10 in [-0.25, 0.25]: f16-exact, and 1 + w is
                # exact too (Qwen3.5's (1 + w) RMSNorm convention)
                w = torch.randint(-256, 257, shape, generator=gen).to(torch.float32) / 1024.0
                is_qwen_centered = model.config.model_type.startswith("qwen3_5") and \
                    not name.endswith("linear_attn.norm.weight")
                v = w if is_qwen_centered else 1.0 + w
            elif "conv1d" in name:
                v = torch.randn(shape, generator=gen) * 0.4
            elif "embed_tokens" in name:
                v = torch.randn(shape, generator=gen)
            elif name.endswith("lm_head.weight"):
                v = torch.randn(shape, generator=gen) * (2.0 / math.sqrt(hidden))
            elif p.dim() == 2:
                fan_in = shape[1]
                v = torch.randn(shape, generator=gen) * (1.0 / math.sqrt(fan_in))
            else:
                v = torch.randn(shape, generator=gen) * 0.1
            p.copy_(to_f16_exact(v))


# --------------------------------------------------------- Q8_0 reference

def roundf_half_away(x):
    """C roundf (halfway cases away from zero), exact in float32."""
    a = np.abs(x)
    fl = np.floor(a)
    frac = a - fl                       # exact
    r = fl + (frac >= np.float32(0.5)).astype(np.float32)
    return np.copysign(r, x).astype(np.float32)


def q8_0_dequant_rows(w):
    """ggml's reference Q8_0 round trip of a 2-D float32 array along its last
    (contiguous) dimension: per block of 32, d = amax/127 (f32),
    q = roundf(x * (1/d)), stored d = f16(d); value = f16(d) * q."""
    w = np.ascontiguousarray(w, dtype=np.float32)
    rows, cols = w.shape
    assert cols % 32 == 0
    b = w.reshape(rows, cols // 32, 32)
    amax = np.max(np.abs(b), axis=2, keepdims=True).astype(np.float32)
    d = (amax / np.float32(127.0)).astype(np.float32)
    with np.errstate(divide="ignore"):
        inv = np.where(d == 0, np.float32(0.0), np.float32(1.0) / d).astype(np.float32)
    q = roundf_half_away((b * inv).astype(np.float32))
    assert np.all(np.abs(q) <= 127)
    d16 = d.astype(np.float16).astype(np.float32)
    return (d16 * q).astype(np.float32).reshape(rows, cols)


def q8_0_selected(name, p):
    """The tensors `tela convert --type q8_0` (like llama.cpp's --outtype q8_0)
    quantizes: 2-D weights whose rows (the HF last dim) are a multiple of 32,
    token embeddings and output included. 1-D tensors (norms) stay F32; 2-D
    weights with other row lengths fall back to F16 (exact here)."""
    return p.dim() == 2 and name.endswith(".weight") and p.shape[1] % 32 == 0


def make_q8_0_variant(model):
    q = copy.deepcopy(model)
    n = 0
    with torch.no_grad():
        for name, p in q.named_parameters():
            if q8_0_selected(name, p):
                p.copy_(torch.from_numpy(q8_0_dequant_rows(p.detach().cpu().numpy())))
                n += 1
    return q, n


# ------------------------------------------------------------- reference

def full_logits(model, ids):
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids], dtype=torch.long), use_cache=False)
    return out.logits[0]


def greedy_cached(model, ids, steps):
    """Greedy decoding with the cache: prefill once, then one token per step
    (for Qwen3.5 this is the recurrent GDN path)."""
    toks = []
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids], dtype=torch.long), use_cache=True)
        past = out.past_key_values
        last = out.logits[0, -1]
        for _ in range(steps):
            t = int(torch.argmax(last))
            toks.append(t)
            out = model(input_ids=torch.tensor([[t]], dtype=torch.long),
                        past_key_values=past, use_cache=True)
            past = out.past_key_values
            last = out.logits[0, -1]
    return toks


def row_stats(logits):
    """argmax, logsumexp and top-2 margin of each row (float64 math)."""
    l64 = logits.to(torch.float64)
    top2 = torch.topk(l64, 2, dim=-1).values
    return (torch.argmax(l64, dim=-1).tolist(),
            torch.logsumexp(l64, dim=-1).tolist(),
            (top2[:, 0] - top2[:, 1]).tolist())


def make_prompts(gen, long_len):
    lens = [1, 7, 33, long_len]
    prompts = []
    for n in lens:
        ids = torch.randint(0, VOCAB, (n,), generator=gen).tolist()
        prompts.append(ids)
    prompts[1][0] = 0            # edge ids appear somewhere
    prompts[1][1] = VOCAB - 1
    return prompts


def reference(name, arch, model, prompts, out_dir, config_dict):
    """Writes NAME.json and NAME.logits.f32; returns the JSON object."""
    m64 = copy.deepcopy(model).double().eval()
    logits_path = os.path.join(out_dir, "refs", name + ".logits.f32")
    entries = []
    offset = 0
    max_abs_f32 = 0.0
    max_range = 0.0
    with open(logits_path, "wb") as f:
        for ids in prompts:
            ref = full_logits(m64, ids)                       # float64
            l32 = full_logits(model, ids)                     # float32
            max_abs_f32 = max(max_abs_f32, float((l32.double() - ref).abs().max()))
            max_range = max(max_range, float(ref.max() - ref.min()))
            argmax, lse, margin = row_stats(ref)
            data = ref.to(torch.float32).numpy().astype("<f4").tobytes()
            f.write(data)

            greedy = greedy_cached(m64, ids, GREEDY_STEPS)
            greedy32 = greedy_cached(model, ids, GREEDY_STEPS)
            full = full_logits(m64, ids + greedy)
            steps = full[len(ids) - 1: len(ids) - 1 + GREEDY_STEPS]
            g_argmax, _, g_margin = row_stats(steps)
            for i, (a, b) in enumerate(zip(g_argmax, greedy)):
                if a != b and g_margin[i] > 1e-9:
                    raise SystemExit(f"{name}: cached greedy step {i} = {b} but full recompute argmax = {a}")
            agree32 = 0
            while agree32 < GREEDY_STEPS and greedy32[agree32] == greedy[agree32]:
                agree32 += 1

            entries.append({
                "ids": ids,
                "n_tokens": len(ids),
                "logits_offset_bytes": offset,
                "logits_positions": len(ids),
                "argmax": argmax,
                "logsumexp": [round(x, 7) for x in lse],
                "top2_margin": [round(x, 7) for x in margin],
                "greedy": greedy,
                "greedy_margin": [round(x, 7) for x in g_margin],
                "greedy_f32_agree_steps": agree32,
            })
            offset += len(data)
    obj = {
        "name": name,
        "arch": arch,
        "hf_architecture": config_dict.get("architectures", ["?"])[0],
        "config": config_dict,
        "n_vocab": VOCAB,
        "reference_dtype": "float64",
        "reference_device": "cpu",
        "logits_file": name + ".logits.f32",
        "f32_vs_ref_max_abs": max_abs_f32,
        "max_logit_range": max_range,
        "greedy_steps": GREEDY_STEPS,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "numpy": np.__version__},
        "prompts": entries,
    }
    with open(os.path.join(out_dir, "refs", name + ".json"), "w") as f:
        json.dump(obj, f, indent=1)
    return obj


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="output directory (created)")
    ap.add_argument("--seed", type=int, default=20260)
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = default)")
    ap.add_argument("--only", default="", help="comma-separated model names to build (default: all); "
                    "each keeps the seed of its place in MODELS")
    args = ap.parse_args()
    only = set(filter(None, args.only.split(",")))

    t0 = time.time()
    torch.use_deterministic_algorithms(True, warn_only=True)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    os.makedirs(os.path.join(args.out, "hf"), exist_ok=True)
    os.makedirs(os.path.join(args.out, "refs"), exist_ok=True)
    log(f"make_refs: torch {torch.__version__}, transformers {transformers.__version__}, "
        f"numpy {np.__version__}, out {args.out}")

    manifest = {"generator": "tools/reference/make_refs.py", "seed": args.seed,
                "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
                "gdn_kernels": "torch (fla and causal_conv1d blocked)", "models": []}
    summary = []
    for idx, (name, arch, make_config, long_len, gguf_types) in enumerate(MODELS):
        if only and name not in only:
            continue
        t1 = time.time()
        gen = torch.Generator().manual_seed(args.seed + 1000 * idx)
        config = make_config()
        model = build_model(config)
        randomize(model, gen)
        hf_dir = os.path.join(args.out, "hf", name)
        model.save_pretrained(hf_dir)  # safetensors, float32
        with open(os.path.join(hf_dir, "config.json")) as f:
            config_dict = json.load(f)
        prompts = make_prompts(gen, long_len)
        log(f"[{name}] {type(model).__name__}: {sum(p.numel() for p in model.parameters())} params, "
            f"prompts {[len(p) for p in prompts]}")
        if arch == "qwen35":
            from transformers.models.qwen3_5 import modeling_qwen3_5 as mq
            try:
                fla = transformers.utils.is_flash_linear_attention_available()
            except AttributeError:
                fla = "?"
            log(f"[{name}] GDN kernel: {getattr(mq.torch_chunk_gated_delta_rule, '__module__', '?')}."
                f"{getattr(mq.torch_chunk_gated_delta_rule, '__name__', '?')}, "
                f"flash-linear-attention available: {fla}")
        obj = reference(name, arch, model, prompts, args.out, config_dict)
        entry = {"name": name, "arch": arch, "hf_dir": f"hf/{name}", "refs": f"refs/{name}.json",
                 "logits": f"refs/{name}.logits.f32", "gguf_types": gguf_types,
                 "prompt_lengths": [len(p) for p in prompts], "config": config_dict}
        manifest["models"].append(entry)
        summary.append((name, obj))

        if name == "llama-gqa":
            qmodel, nq = make_q8_0_variant(model)
            qname = name + "-q8_0"
            # the dequantized weights as a checkpoint too, so build_fixtures.sh
            # can check tela's Q8_0 file against them tensor by tensor
            qdir = os.path.join(args.out, "hf", qname + "-dequant")
            qmodel.save_pretrained(qdir)
            log(f"[{qname}] {nq} weights replaced by their Q8_0 dequantization")
            qobj = reference(qname, arch, qmodel, prompts, args.out, config_dict)
            manifest["models"].append({
                "name": qname, "arch": arch, "reference_only": True,
                "reference_for": f"{name} converted with --type q8_0",
                "hf_dir": f"hf/{qname}-dequant", "refs": f"refs/{qname}.json",
                "logits": f"refs/{qname}.logits.f32", "gguf_types": [],
                "prompt_lengths": [len(p) for p in prompts], "config": config_dict})
            summary.append((qname, qobj))
        log(f"[{name}] done in {time.time() - t1:.1f} s")

    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)

    log("\nsummary:")
    log(f"{'model':<16} {'prompts':<18} {'logit range':>11} {'f32 vs f64':>11} {'min margin':>10} greedy(f32 agrees)")
    for name, obj in summary:
        lens = ",".join(str(p["n_tokens"]) for p in obj["prompts"])
        min_margin = min(min(p["top2_margin"]) for p in obj["prompts"])
        agree = ",".join(str(p["greedy_f32_agree_steps"]) for p in obj["prompts"])
        log(f"{name:<16} {lens:<18} {obj['max_logit_range']:>11.3f} {obj['f32_vs_ref_max_abs']:>11.2e} "
            f"{min_margin:>10.2e} {agree}")
    total = 0
    for root, _, files in os.walk(args.out):
        for fn in files:
            total += os.path.getsize(os.path.join(root, fn))
    log(f"\nwrote {args.out}: {total / 1e6:.2f} MB in {time.time() - t0:.1f} s")


if __name__ == "__main__":
    main()
