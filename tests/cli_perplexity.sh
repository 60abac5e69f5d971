#!/usr/bin/env bash
# cli_perplexity.sh: 'tela perplexity' against llama-perplexity's definition,
# computed here in Python from transformers' reference logits of the
# tests/fixtures/llama models (no tokenizer: the token ids come from
# --tokens-file). Windows are built from the fixtures' prompts so that each
# window, evaluated from an empty context, is a prefix of a reference prompt
# whose logits are known: e.g. -c 32 over p33[:32] + p260[:32]. Checks every
# running value "[i]x," and the final "PPL = X +/- E" (error estimate
# PPL * sqrt(var(nll)/(count-1))), --chunks, the dropped partial window, the
# token-file formats, and the errors.
set -u
TELA=${TELA_BIN:?TELA_BIN is not set}
SRC=${TELA_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
FIX=$SRC/tests/fixtures/llama
if [ ! -f "$FIX/llama-gqa-f32.gguf" ] || [ ! -f "$FIX/llama-gqa.json" ]; then
    echo "SKIP: no tests/fixtures/llama"
    exit 77
fi
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fail=1; }

# Writes a token file (and the matching expected values) for a window spec:
# SPEC is "ctx:prompt_len:n,prompt_len:n,..." (the first n ids of the prompt
# of that length, concatenated), FMT the file format.
cat >"$tmp/ref.py" <<'EOF'
import array, json, math, sys
ref_json, spec, fmt, tokens_out, expect_out = sys.argv[1:6]
chunks_limit = int(sys.argv[6]) if len(sys.argv) > 6 else -1
ref = json.load(open(ref_json))
V = ref["n_vocab"]
logits = array.array("f")
with open(ref_json.rsplit("/", 1)[0] + "/" + ref["logits_file"], "rb") as f:
    logits.frombytes(f.read())
if sys.byteorder != "little":
    logits.byteswap()
by_len = {p["n_tokens"]: p for p in ref["prompts"]}
ctx_s, parts = spec.split(":", 1)
ctx = int(ctx_s)
tokens, rows = [], []   # rows[i]: (prompt, position) whose logits follow token i
for part in parts.split(","):
    plen, n = map(int, part.split(":"))
    p = by_len[plen]
    tokens += p["ids"][:n]
    rows += [(p, j) for j in range(n)]
with open(tokens_out, "w") as f:
    if fmt == "spaces":
        f.write(" ".join(map(str, tokens)) + "\n")
    elif fmt == "json":
        f.write(json.dumps(tokens))
    else:
        f.write(",\n".join(map(str, tokens)) + "\n")
# llama-perplexity: windows of ctx tokens, from an empty context, scoring the
# logits at positions ctx/2 .. ctx-2 against the next token (no BOS: no vocab)
n_chunk = len(tokens) // ctx
if chunks_limit > 0:
    n_chunk = min(n_chunk, chunks_limit)
first = ctx // 2
nll = nll2 = 0.0
count = 0
running = []
for c in range(n_chunk):
    for j in range(first, ctx - 1):
        p, pos = rows[c * ctx + j]
        assert pos == j, "window %d is not a prompt prefix" % c
        off = p["logits_offset_bytes"] // 4 + pos * V
        row = logits[off:off + V]
        m = max(row)
        lse = m + math.log(sum(math.exp(x - m) for x in row))
        v = lse - row[tokens[c * ctx + j + 1]]
        nll += v
        nll2 += v * v
        count += 1
    running.append(math.exp(nll / count))
mean = nll / count
var = nll2 / count - mean * mean
ppl = math.exp(mean)
json.dump({"running": running, "ppl": ppl, "err": math.sqrt(var / (count - 1)) * ppl}, open(expect_out, "w"))
EOF

cat >"$tmp/cmp.py" <<'EOF'
import json, re, sys
exp = json.load(open(sys.argv[1]))
out = open(sys.argv[2]).read()
rel = float(sys.argv[3])
got = [float(x) for x in re.findall(r"\[\d+\]([0-9.]+),", out)]
idx = [int(x) for x in re.findall(r"\[(\d+)\][0-9.]+,", out)]
assert idx == list(range(1, len(exp["running"]) + 1)), "chunk numbers %s, expected 1..%d" % (idx, len(exp["running"]))
for i, (g, e) in enumerate(zip(got, exp["running"])):
    assert abs(g - e) <= rel * e + 6e-5, "chunk %d: running ppl %.4f, reference %.6f" % (i + 1, g, e)
m = re.search(r"^Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)$", out, re.M)
assert m, "no final estimate line in: %r" % out[-200:]
ppl, err = float(m.group(1)), float(m.group(2))
assert abs(ppl - exp["ppl"]) <= rel * exp["ppl"] + 6e-5, "PPL %.4f, reference %.6f" % (ppl, exp["ppl"])
assert abs(err - exp["err"]) <= 10 * rel * exp["err"] + 6e-6, "error %.5f, reference %.6f" % (err, exp["err"])
print("PPL %.4f +/- %.5f (reference %.4f +/- %.5f) over %d chunks" % (ppl, err, exp["ppl"], exp["err"], len(got)))
EOF

# case: name, model, reference json, window spec, ctx, token-file format, tolerance, [chunks]
run_case() {
    local name=$1 model=$2 refj=$3 spec=$4 ctx=$5 fmt=$6 tol=$7 chunks=${8:-}
    python3 "$tmp/ref.py" "$FIX/$refj" "$spec" "$fmt" "$tmp/$name.tok" "$tmp/$name.exp" ${chunks:+"$chunks"} ||
        { bad "$name: reference"; return; }
    if "$TELA" perplexity -m "$FIX/$model" --tokens-file "$tmp/$name.tok" -c "$ctx" ${chunks:+--chunks "$chunks"} -t 2 ${KV:+--kv-type "$KV"} \
        >"$tmp/$name.out" 2>"$tmp/$name.err"; then
        if msg=$(python3 "$tmp/cmp.py" "$tmp/$name.exp" "$tmp/$name.out" "$tol" 2>&1); then ok "$name: $msg"
        else bad "$name: $msg"; fi
    else
        bad "$name: tela perplexity failed: $(cat "$tmp/$name.err")"
    fi
}
# F32 weights: logits within 1e-4 of the logit range of the float64 reference
run_case gqa-c32 llama-gqa-f32.gguf llama-gqa.json "32:33:32,260:32" 32 spaces 2e-4
run_case gqa-c128 llama-gqa-f32.gguf llama-gqa.json "128:260:128,260:128,260:100" 128 json 2e-4
run_case gqa-c128-chunks1 llama-gqa-f32.gguf llama-gqa.json "128:260:128,260:128" 128 lines 2e-4 1
run_case gqa-c16-odd llama-gqa-f32.gguf llama-gqa.json "15:33:15,260:15,7:0,33:15" 15 spaces 2e-4
# F16 file of exactly-f16 weights: the same function
run_case tied-f16-c32 llama-tied-f16.gguf llama-tied.json "32:260:32,33:32,260:32" 32 spaces 1e-3
# Q8_0 file against the reference of its exact dequantization (exact matmul
# mode: the fast mode rounds activations to 8 bits, see test_llama_fixtures)
TELA_EXACT_MATMUL=1 run_case gqa-q8-c32 llama-gqa-q8_0.gguf llama-gqa-q8_0.json "32:33:32,260:32" 32 lines 1e-3
# an f16 KV cache (--kv-type f16) against the same float64 reference (the
# q8_0 cache is checked in test_mtp: these heads of 24 take no Q8_0 blocks)
KV=f16 run_case gqa-c128-kv-f16 llama-gqa-f32.gguf llama-gqa.json "128:260:128,260:128,260:100" 128 json 1e-3

# the stderr summary and ETA line
grep -q "2 chunks of 32 tokens, scoring tokens 17..31" "$tmp/gqa-c32.err" && grep -q "seconds per pass - ETA" "$tmp/gqa-c32.err" &&
    ok "stderr summary" || bad "stderr summary: $(cat "$tmp/gqa-c32.err")"

# help and errors
"$TELA" perplexity --help | grep -q "usage: tela perplexity" && ok "--help" || bad "--help"
"$TELA" --help | grep -q "perplexity" && ok "listed in tela --help" || bad "not listed in tela --help"
expect_error() { # description, expected stderr pattern, command...
    local what=$1 pat=$2; shift 2
    if "$@" >"$tmp/out" 2>"$tmp/err"; then bad "$what: exit status 0"; return; fi
    grep -qi -- "$pat" "$tmp/err" && ok "$what" || bad "$what: stderr was: $(cat "$tmp/err")"
}
M=$FIX/llama-gqa-f32.gguf
printf '1 2 3 4 5 6 7\n' >"$tmp/short.tok"
printf '1 2 x 4\n' >"$tmp/badtok.tok"
printf '1 2 600 4 5 6 7 8 9 10\n' >"$tmp/range.tok"
printf 'some text\n' >"$tmp/text.txt"
expect_error "no model" "-m MODEL" "$TELA" perplexity --tokens-file "$tmp/short.tok"
expect_error "no input" "either -f" "$TELA" perplexity -m "$M"
expect_error "both inputs" "either -f" "$TELA" perplexity -m "$M" -f "$tmp/text.txt" --tokens-file "$tmp/short.tok"
expect_error "too few tokens" "at least 8 tokens" "$TELA" perplexity -m "$M" --tokens-file "$tmp/short.tok" -c 4
expect_error "unreadable token file" "cannot read a token id at byte 4" "$TELA" perplexity -m "$M" --tokens-file "$tmp/badtok.tok" -c 4
expect_error "token out of range" "not below the vocabulary size 512" "$TELA" perplexity -m "$M" --tokens-file "$tmp/range.tok" -c 4
expect_error "text on a model without tokenizer" "no tokenizer" "$TELA" perplexity -m "$M" -f "$tmp/text.txt"
expect_error "missing text file" "cannot open" "$TELA" perplexity -m "$M" -f "$tmp/none.txt"
expect_error "missing model" "no such file" "$TELA" perplexity -m "$tmp/none.gguf" --tokens-file "$tmp/short.tok"
expect_error "context too small" "integer in" "$TELA" perplexity -m "$M" --tokens-file "$tmp/short.tok" -c 2
expect_error "bad --chunks" "integer in" "$TELA" perplexity -m "$M" --tokens-file "$tmp/short.tok" --chunks 0
expect_error "unknown option" "unknown option" "$TELA" perplexity -m "$M" --bogus
expect_error "option without value" "needs a value" "$TELA" perplexity -m "$M" -c
printf '1 2 3 4 5 6 7 8 9 10\n' >"$tmp/ten.tok"
expect_error "q8_0 KV with heads of 24" "multiples of 32 (keys 24, values 24)" "$TELA" perplexity -m "$M" --tokens-file "$tmp/ten.tok" -c 4 --kv-type q8_0
expect_error "bad --kv-type" "takes f16, f32 or q8_0" "$TELA" perplexity -m "$M" --tokens-file "$tmp/short.tok" --kv-type q4
exit $fail
