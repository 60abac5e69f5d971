#!/usr/bin/env python3
"""tokenizer_cases.py: reference tokenizations from Hugging Face tokenizers.

For each tokenizer directory (holding tokenizer.json), encodes a fixed list
of test strings with the `tokenizers` library (the Rust tokenizer behind
transformers' fast tokenizers) and writes tests/fixtures/tokenizer/
hf_cases_<name>.json, which tests/test_tokenizer_hf.c compares tela against.

    python3 tools/reference/tokenizer_cases.py \\
        --tokenizer llama3=build-data/llama3 --tokenizer qwen3=build-data/qwen3 \\
        --out tests/fixtures/tokenizer

What each case records:
  input_hex            the input bytes (some cases are invalid UTF-8; HF
                       receives bytes.decode("utf-8", errors="replace"))
  ids                  encode(text, add_special_tokens=False)
  ids_no_special       the same with encode_special_tokens = True (special
                       tokens written in the text are plain text)
  decoded              decode(ids, skip_special_tokens=False)
  decoded_skip_special decode(ids, skip_special_tokens=True)
and decode_cases hold id sequences of single-byte tokens that do not form
valid UTF-8, with what decode() makes of them (U+FFFD replacement).

Decoding is the tokenizer's own decoder, without transformers'
clean_up_tokenization_spaces. Needs only the `tokenizers` package; no network.
"""
import argparse
import hashlib
import json
import os
import sys


def byte_cases():
    """(name, bytes) pairs: the categories of issue 4."""
    c = []

    def add(name, s):
        c.append((name, s if isinstance(s, bytes) else s.encode("utf-8")))

    # whitespace runs
    for name, s in [
        ("ws_space", " "), ("ws_two_spaces", "  "), ("ws_tabs", "\t\t"), ("ws_between", "a  b"),
        ("ws_many_between", "a        b"), ("ws_newlines", "a\n\n\nb"), ("ws_indent", "  \n  x"),
        ("ws_trailing", "x   "), ("ws_crlf", "one\r\ntwo\r\n\r\nthree"), ("ws_ideographic", "a\u3000b"),
        ("ws_nbsp", "a\u00a0b \u00a0 c"), ("ws_six_newlines", "line\n\n\n\n\n\nend"),
        ("ws_vt_ff", "a\x0b\x0cb"), ("ws_mixed", " \t \n \t\t\n  \n   x  \t"),
        ("ws_only_newline", "\n"), ("ws_space_newline", " \n"), ("ws_nel", "a\u0085b"),
        ("ws_em_space", "a\u2003b\u2028c"),
    ]:
        add(name, s)
    # digits and numbers
    for name, s in [
        ("num_0", "0"), ("num_12", "12"), ("num_123", "123"), ("num_1234", "1234"),
        ("num_long", "12345678901234567890"), ("num_pi", "3.14159"), ("num_commas", "1,000,000.50"),
        ("num_arabic_indic", "\u0663\u0664\u0665"), ("num_circled", "\u2460\u2461\u2462"),
        ("num_mixed", "x1y22z333w4444"), ("num_roman", "\u216b\u2163"), ("num_fullwidth", "\uff11\uff12\uff13"),
        ("num_neg_exp", "-1.5e-10 +2E+3"), ("num_phone", "+1 (555) 010-9999"), ("num_date", "2024-07-26T12:34:56Z"),
    ]:
        add(name, s)
    # contractions and quotes
    for name, s in [
        ("ctr_im", "I'm"), ("ctr_youre", "you're"), ("ctr_weve", "we've"), ("ctr_hell", "he'll"),
        ("ctr_shed", "she'd"), ("ctr_its", "it's"), ("ctr_caps", "IT'S DON'T WE'LL THEY'RE I'D"),
        ("ctr_mixed_case", "It'S we'Ve a'lL"), ("ctr_oneil", "O'Neil's"), ("ctr_rock", "rock 'n' roll"),
        ("ctr_quotes", "''''\"\"\"``"), ("ctr_s_alone", "'s'"), ("ctr_long_s", "it'\u017f"),
        ("ctr_curly", "it\u2019s \u201cquoted\u201d"), ("ctr_space_before", "he 's"),
    ]:
        add(name, s)
    # scripts
    for name, s in [
        ("cjk_zh", "\u6211\u60f3\u5728apple\u5de5\u4f5c1314151\u5929\uff5e \u4f60\u597d\uff0c\u4e16\u754c\u3002"),
        ("cjk_ja", "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3067\u3059\u3002\u30ab\u30bf\u30ab\u30ca\u3082\u3002"),
        ("cjk_ko", "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8\uc785\ub2c8\ub2e4."),
        ("ar_plain", "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645"),
        ("ar_diacritics", "\u0645\u064e\u0631\u0652\u062d\u064e\u0628\u064b\u0627"),
        ("hi_devanagari", "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e"),
        ("th_thai", "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e0a\u0e32\u0e27\u0e42\u0e25\u0e01"),
        ("ru_cyrillic", "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440! \u0401\u043b\u043a\u0430."),
        ("el_greek", "\u0393\u03b5\u03b9\u03b1 \u03c3\u03bf\u03c5 \u03ba\u03cc\u03c3\u03bc\u03b5"),
        ("he_hebrew", "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd"),
        ("km_khmer", "\u1780\u17b6\u1793\u17cb\u178f\u17c2\u1796\u17b7\u179f\u17c1\u179f"),
        ("vi_viet", "C\u1eeda Vi\u1ec7t ti\u1ebfng Vi\u1ec7t"),
    ]:
        add(name, s)
    # emoji
    for name, s in [
        ("emoji_smile", "\U0001f642"), ("emoji_family", "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466"),
        ("emoji_flag", "\U0001f1fa\U0001f1f3 \U0001f1ef\U0001f1f5"), ("emoji_skin", "\U0001f44d\U0001f3fd"),
        ("emoji_run", "\U0001f600\U0001f603\U0001f604\U0001f601"), ("emoji_text", "I \u2764\ufe0f tela \U0001f999!"),
        ("emoji_keycap", "1\ufe0f\u20e3 #\ufe0f\u20e3"),
    ]:
        add(name, s)
    # Unicode normalization
    for name, s in [
        ("nfc_e_acute", "caf\u0065\u0301"), ("nfc_a_ring", "A\u030a"), ("nfc_angstrom", "\u212b"),
        ("nfc_ohm", "\u2126"), ("nfc_ligature", "\ufb01 ligature"), ("nfc_hangul_jamo", "\u1100\u1161\u11a8"),
        ("nfc_reorder", "\u1e0b\u0323"), ("nfc_fullwidth", "\uff21\uff22\uff23"),
        ("nfc_greek_tonos", "\u03b1\u0301 \u1f71"), ("nfc_kana_voiced", "\u304b\u3099"),
    ]:
        add(name, s)
    # invalid UTF-8 (HF sees the text decoded with errors="replace")
    for name, s in [
        ("bad_ff", b"\xff"), ("bad_continuation", b"abc\x80def"), ("bad_truncated", b"x\xe4\xbd"),
        ("bad_surrogate", b"\xed\xa0\x80"), ("bad_overlong", b"\xc0\x80"), ("bad_emoji_cut", b"\xf0\x9f\x98"),
        ("bad_above_max", b"\xf4\x90\x80\x80"), ("bad_mixed", b"A\xe4\xbd\xa0\xe4B"),
        ("bad_fe_ff", b"\xfe\xff text"), ("bad_lone_lead_space", b"\xc3 \xa9"), ("bad_replacement_char", "\ufffd ok"),
    ]:
        add(name, s)
    # very long words
    b64 = "".join("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"[(i * 37 + 11) % 64] for i in range(2000))
    for name, s in [
        ("long_a", "a" * 1000), ("long_word_repeat", "supercalifragilistic" * 50), ("long_base64", b64),
        ("long_x_then_y", "x" * 5000 + " y"), ("long_digits", "1" * 500), ("long_emoji", "\U0001f600" * 200),
        ("long_spaces", " " * 1000 + "end"), ("long_newlines", "\n" * 300), ("long_url",
         "https://example.com/" + "/".join("segment%d" % i for i in range(60)) + "?q=" + "abc" * 40),
        ("long_cjk", "\u4e2d\u6587" * 400), ("long_dashes", "-" * 700 + "=" * 300),
    ]:
        add(name, s)
    # special and added tokens written in the text
    for name, s in [
        ("sp_llama_header", "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHello!<|eot_id|>"),
        ("sp_llama_eot_twice", "<|eot_id|><|eot_id|>"), ("sp_llama_spaces", " <|eot_id|> x <|eot_id|>  "),
        ("sp_partial", "<|eot_id <|im_start"), ("sp_case", "<|EOT_ID|> <|IM_START|>"),
        ("sp_qwen_chat", "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"),
        ("sp_qwen_think", "<think>\nLet me see.\n</think>\n\nThe answer is 4."),
        ("sp_qwen_tool", "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>"),
        ("sp_endoftext", "end<|endoftext|>start"), ("sp_adjacent", "<|im_end|><|im_start|>"),
        ("sp_in_word", "abc<|im_start|>def<|begin_of_text|>ghi"),
    ]:
        add(name, s)
    # code and prose
    for name, s in [
        ("code_python", "def f(x):\n    if x > 0:\n        return x ** 2  # square\n    return -x\n"),
        ("code_c", "int main(void) {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}\n"),
        ("code_json", "{\"a\": [1, 2, 3], \"b\": {\"c\": null, \"d\": true}}"),
        ("code_html", "<div class=\"x\"><p>Hi &amp; bye</p></div>"),
        ("prose_en", "It was the best of times, it was the worst of times; it was the age of wisdom..."),
        ("prose_de", "Gr\u00fc\u00dfe aus M\u00fcnchen! \u00c4pfel, \u00d6l und \u00dcbermut."),
        ("punct_runs", "!!!???...,,,;;; --- ***"), ("empty", ""),
    ]:
        add(name, s)
    return c


# GPT-2's byte -> printable character map (bytes_to_unicode)
def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def decode_byte_cases(tok):
    """Single-byte tokens put together into invalid UTF-8."""
    b2u = bytes_to_unicode()

    def ids_of(bs):
        out = []
        for b in bs:
            i = tok.token_to_id(b2u[b])
            if i is None:
                return None
            out.append(i)
        return out

    seqs = [
        ("dec_valid_split", b"\xe4\xbd\xa0"), ("dec_truncated", b"\xe4\xbd"), ("dec_lead_then_ascii", b"\xe4a"),
        ("dec_surrogate", b"\xed\xa0\x80"), ("dec_overlong", b"\xc0\x80"), ("dec_emoji_cut", b"\xf0\x9f\x98"),
        ("dec_continuation", b"\x80\x80"), ("dec_ff_fe", b"\xff\xfe"), ("dec_above_max", b"\xf4\x90\x80\x80"),
        ("dec_mixed", b"A\xe4\xbd\xa0\xe4B\xf0\x9f\x98\x80\xc3"),
    ]
    out = []
    for name, bs in seqs:
        ids = ids_of(bs)
        if ids is None:
            continue
        out.append({"name": name, "ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False)})
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer", action="append", required=True, metavar="NAME=DIR",
                    help="a name and a directory holding tokenizer.json (repeatable)")
    ap.add_argument("--out", required=True, help="directory for hf_cases_<name>.json")
    args = ap.parse_args()
    import tokenizers
    from tokenizers import Tokenizer

    os.makedirs(args.out, exist_ok=True)
    for spec in args.tokenizer:
        name, _, d = spec.partition("=")
        if not name or not d:
            sys.exit("--tokenizer takes NAME=DIR, got %r" % spec)
        path = os.path.join(d, "tokenizer.json")
        with open(path, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        tok = Tokenizer.from_file(path)
        cases = []
        for cname, raw in byte_cases():
            text = raw.decode("utf-8", errors="replace")
            tok.encode_special_tokens = False
            ids = tok.encode(text, add_special_tokens=False).ids
            tok.encode_special_tokens = True
            ids_plain = tok.encode(text, add_special_tokens=False).ids
            tok.encode_special_tokens = False
            cases.append({
                "name": cname,
                "input_hex": raw.hex(),
                "text": text,
                "ids": ids,
                "ids_no_special": ids_plain,
                "decoded": tok.decode(ids, skip_special_tokens=False),
                "decoded_skip_special": tok.decode(ids, skip_special_tokens=True),
            })
        doc = {
            "generator": "tools/reference/tokenizer_cases.py",
            "tokenizers_version": tokenizers.__version__,
            "tokenizer": name,
            "tokenizer_json_sha256": digest,
            "cases": cases,
            "decode_cases": decode_byte_cases(tok),
        }
        out = os.path.join(args.out, "hf_cases_%s.json" % name)
        with open(out, "w", encoding="utf-8") as f:
            # one case a line: readable diffs, small files
            f.write("{\n")
            for key in ("generator", "tokenizers_version", "tokenizer", "tokenizer_json_sha256"):
                f.write(" %s: %s,\n" % (json.dumps(key), json.dumps(doc[key])))
            for key in ("cases", "decode_cases"):
                f.write(" %s: [\n" % json.dumps(key))
                items = doc[key]
                for i, item in enumerate(items):
                    f.write("  " + json.dumps(item, ensure_ascii=False) + ("," if i + 1 < len(items) else "") + "\n")
                f.write(" ]%s\n" % ("," if key == "cases" else ""))
            f.write("}\n")
        print("%s: %d cases, %d decode cases -> %s" % (name, len(cases), len(doc["decode_cases"]), out))


if __name__ == "__main__":
    main()
