#!/usr/bin/env python3
"""chat_cases.py: reference renderings of chat templates, for tela's parity test.

Renders every conversation of tests/fixtures/chat/conversations.json with each
chat template through Hugging Face transformers' own chat-template renderer
(transformers.utils.chat_template_utils.render_jinja_template, the function
tokenizer.apply_chat_template(..., tokenize=False) calls), and writes
tests/fixtures/chat/expected_<template>.json: the template text, the special
tokens given to it, and per case the rendered string or the error it raised.
tests/test_chat_parity.c renders the same cases with tela and compares.

Templates come from the "templates" table of conversations.json (.jinja files
beside it); --template NAME=PATH overrides one, where PATH is a .jinja file or
a tokenizer_config.json (its chat_template, bos_token and eos_token are used).

Usage (from the repository root):
  python3 tools/reference/chat_cases.py \\
      --template llama3=build-data/llama3/tokenizer_config.json \\
      --template qwen3=build-data/qwen3/tokenizer_config.json

--engine jinja2 renders with plain jinja2 set up the way transformers sets it
up (for a machine without transformers); the output records which engine made
it, and only transformers output belongs in the repository.
"""
import argparse
import hashlib
import json
import os
import sys


def load_template(path):
    """Returns (template text, bos, eos, has_tokens); bos/eos only from a tokenizer_config.json."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if not path.endswith(".json"):
        return text, None, None, False
    cfg = json.loads(text)
    tmpl = cfg.get("chat_template")
    if isinstance(tmpl, list):  # named templates: use "default"
        tmpl = next((t["template"] for t in tmpl if t.get("name") == "default"), None)
    if not isinstance(tmpl, str):
        sys.exit(f"{path}: no chat_template string")

    def token(v):
        if isinstance(v, dict):  # AddedToken serialization
            v = v.get("content")
        return v if isinstance(v, str) else None

    return tmpl, token(cfg.get("bos_token")), token(cfg.get("eos_token")), True


def make_transformers_renderer():
    import transformers
    from transformers.utils.chat_template_utils import render_jinja_template

    def render(template, messages, tools, add_generation_prompt, kwargs):
        rendered, _ = render_jinja_template(
            conversations=[messages],
            tools=tools,
            chat_template=template,
            add_generation_prompt=add_generation_prompt,
            **kwargs,
        )
        return rendered[0]

    return render, f"transformers {transformers.__version__} render_jinja_template"


def make_jinja2_renderer():
    """The environment transformers builds (trim_blocks, lstrip_blocks,
    loopcontrols, its tojson, raise_exception, strftime_now)."""
    from datetime import datetime

    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now

    def render(template, messages, tools, add_generation_prompt, kwargs):
        return env.from_string(template).render(
            messages=messages, tools=tools, documents=None, add_generation_prompt=add_generation_prompt, **kwargs
        )

    return render, f"jinja2 {jinja2.__version__} (transformers' settings, NOT transformers)"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--conversations", default="tests/fixtures/chat/conversations.json")
    ap.add_argument("--template", action="append", default=[], metavar="NAME=PATH",
                    help="template source: a .jinja file or a tokenizer_config.json")
    ap.add_argument("--only", action="append", default=[], metavar="NAME", help="render only these templates")
    ap.add_argument("--out-dir", default=None, help="default: the directory of the conversations file")
    ap.add_argument("--engine", choices=["transformers", "jinja2"], default="transformers")
    args = ap.parse_args()

    with open(args.conversations, encoding="utf-8") as f:
        conv = json.load(f)
    base = os.path.dirname(args.conversations)
    out_dir = args.out_dir or base
    os.makedirs(out_dir, exist_ok=True)

    sources = {name: (os.path.join(base, t["file"]), t) for name, t in conv["templates"].items()}
    for spec in args.template:
        name, sep, path = spec.partition("=")
        if not sep or name not in sources:
            sys.exit(f"--template {spec}: expected NAME=PATH with NAME one of {', '.join(sources)}")
        sources[name] = (path, sources[name][1])

    if args.engine == "transformers":
        try:
            render, generator = make_transformers_renderer()
        except ImportError as e:
            sys.exit(f"transformers is not available ({e}); use --engine jinja2 for a local check")
    else:
        render, generator = make_jinja2_renderer()

    for name, (path, meta) in sources.items():
        if args.only and name not in args.only:
            continue
        template, bos, eos, from_config = load_template(path)
        if not from_config:
            bos, eos = meta.get("bos_token"), meta.get("eos_token")
        fixture = os.path.join(base, meta["file"])
        if os.path.abspath(fixture) != os.path.abspath(path) and os.path.exists(fixture):
            with open(fixture, encoding="utf-8") as f:
                if f.read() != template:
                    print(f"note: {path} differs from {fixture}; the expected file records the text used")
        results = []
        for case in conv["cases"]:
            if "templates" in case and name not in case["templates"]:
                continue
            # special tokens first, then the extra variables (they win, as in apply_chat_template)
            kwargs = {}
            if bos is not None:
                kwargs["bos_token"] = bos
            if eos is not None:
                kwargs["eos_token"] = eos
            kwargs.update(conv.get("template_vars", {}).get(name, {}))
            kwargs.update(case.get("extra", {}))
            entry = {"name": case["name"]}
            try:
                entry["rendered"] = render(template, case["messages"], case.get("tools"),
                                           case.get("add_generation_prompt", False), kwargs)
            except Exception as e:  # a template error is an expected outcome too
                entry["error"] = f"{type(e).__name__}: {e}"
            results.append(entry)
        doc = {
            "template_name": name,
            "template_source": path,
            "template_sha256": hashlib.sha256(template.encode("utf-8")).hexdigest(),
            "generator": generator,
            "bos_token": bos,
            "eos_token": eos,
            "template": template,
            "cases": results,
        }
        out = os.path.join(out_dir, f"expected_{name}.json")
        with open(out, "w", encoding="utf-8") as f:
            f.write(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
        n_err = sum("error" in r for r in results)
        print(f"{out}: {len(results)} cases ({n_err} raise an error)")


if __name__ == "__main__":
    main()
