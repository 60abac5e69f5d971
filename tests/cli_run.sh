#!/usr/bin/env bash
# cli_run.sh: 'tela run' and 'tela logits' as a user drives them, on the
# shared reference model llama-d1 (F16 GGUF from llama.cpp's converter):
# greedy ids equal transformers' (up to the first step whose reference
# margin is < 0.01), written logits have the right size and match the
# reference file to 1e-4 of the logit range; --help and errors behave.
# Skips (77) without ../shared.
set -u
TELA=${TELA_BIN:?TELA_BIN is not set}
FIX=${TELA_SHARED_DIR:-/nonexistent}/reference/fixtures
if [ ! -f "$FIX/llama-d1.gguf" ] || [ ! -f "$FIX/refs-d1.json" ]; then
    echo "SKIP: no ../shared/reference/fixtures"
    exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fail=1; }

ids=$(python3 -c "import json,sys; p=json.load(open(sys.argv[1]))['llama-d1']['prompts'][0]; print(','.join(map(str,p['ids'])))" "$FIX/refs-d1.json")

# greedy generation
if "$TELA" run -m "$FIX/llama-d1.gguf" --tokens "$ids" -n 24 --temp 0 --print-ids -t 1 >"$tmp/ids.json" 2>"$tmp/run.err"; then
    if python3 - "$FIX/refs-d1.json" "$tmp/ids.json" <<'EOF'
import json, sys
p = json.load(open(sys.argv[1]))['llama-d1']['prompts'][0]
lines = open(sys.argv[2]).read().strip().splitlines()
assert len(lines) == 1, "expected one line of output, got %d" % len(lines)
got = json.loads(lines[0])
assert len(got) == 24, "expected 24 ids, got %d" % len(got)
for i, (g, r) in enumerate(zip(got, p['greedy'])):
    assert g == r, "step %d: %d, reference %d" % (i, g, r)
    if p['greedy_margin'][i] < 0.01:
        break
EOF
    then ok "run --print-ids matches the reference greedy tokens"; else bad "run --print-ids"; fi
    grep -q "prompt: 14 tokens in .* tok/s) | generation: 24 tokens in" "$tmp/run.err" && ok "timing line" || bad "timing line: $(cat "$tmp/run.err")"
else
    bad "tela run failed: $(cat "$tmp/run.err")"
fi

# logits, last position and all positions
if "$TELA" logits -m "$FIX/llama-d1.gguf" --tokens "$ids" -t 1 -o "$tmp/last.f32" 2>"$tmp/lg.err" &&
   "$TELA" logits -m "$FIX/llama-d1.gguf" --tokens "$ids" -t 1 --all -o "$tmp/all.f32" 2>>"$tmp/lg.err"; then
    if python3 - "$FIX/refs-d1.json" "$FIX/llama-d1.logits.f32" "$tmp/last.f32" "$tmp/all.f32" <<'EOF'
import array, json, os, sys
p = json.load(open(sys.argv[1]))['llama-d1']['prompts'][0]
V, n = p['vocab'], len(p['ids'])
assert os.path.getsize(sys.argv[3]) == 4 * V, "last.f32 has %d bytes" % os.path.getsize(sys.argv[3])
assert os.path.getsize(sys.argv[4]) == 4 * V * n, "all.f32 has %d bytes" % os.path.getsize(sys.argv[4])
ref = array.array('f')
with open(sys.argv[2], 'rb') as f:
    f.seek(p['last_logits_offset_bytes'])
    ref.frombytes(f.read(4 * V))
last = array.array('f'); last.frombytes(open(sys.argv[3], 'rb').read())
allv = array.array('f'); allv.frombytes(open(sys.argv[4], 'rb').read())
if sys.byteorder != 'little':
    for a in (ref, last, allv): a.byteswap()
rng = max(ref) - min(ref)
d = max(abs(a - b) for a, b in zip(last, ref))
assert d <= 1e-4 * rng, "last logits off by %g (range %g)" % (d, rng)
d2 = max(abs(a - b) for a, b in zip(allv[(n - 1) * V:], last))
assert d2 <= 1e-6 * rng, "--all's last row differs from the last-position logits by %g" % d2
for t in range(n):
    row = allv[t * V:(t + 1) * V]
    best = max(range(V), key=row.__getitem__)
    assert p['top2_margin'][t] <= 1e-3 or best == p['argmax'][t], "position %d argmax %d" % (t, best)
EOF
    then ok "logits files: sizes and values"; else bad "logits files"; fi
else
    bad "tela logits failed: $(cat "$tmp/lg.err")"
fi

# help and errors
"$TELA" run --help | grep -q "usage: tela run" && ok "run --help" || bad "run --help"
"$TELA" logits --help | grep -q "usage: tela logits" && ok "logits --help" || bad "logits --help"
expect_error() { # description, expected stderr pattern, command...
    local what=$1 pat=$2; shift 2
    if "$@" >"$tmp/out" 2>"$tmp/err"; then bad "$what: exit status 0"; return; fi
    grep -qi -- "$pat" "$tmp/err" && ok "$what" || bad "$what: stderr was: $(cat "$tmp/err")"
}
expect_error "run without a model" "-m MODEL" env TELA_MODEL= "$TELA" run --tokens 1,2  # TELA_MODEL set empty: no default model
expect_error "run with a missing file" "no such file" "$TELA" run -m "$tmp/none.gguf" --tokens 1,2
expect_error "run with an out-of-range token" "vocabulary" "$TELA" run -m "$FIX/llama-d1.gguf" --tokens 1,999999 -n 2
expect_error "run with a bad option" "unknown option" "$TELA" run -m "$FIX/llama-d1.gguf" --bogus
expect_error "prompt longer than the context" "context" "$TELA" run -m "$FIX/llama-d1.gguf" --tokens "$ids" -c 8 -n 2
expect_error "logits without -o" "required" "$TELA" logits -m "$FIX/llama-d1.gguf" --tokens 1,2
if [ -f "$FIX/llama-d1-hf.tgz" ]; then
    mkdir "$tmp/hf" && tar xzf "$FIX/llama-d1-hf.tgz" -C "$tmp/hf"
    expect_error "-p on a model without a tokenizer" "tokenizer" "$TELA" run -m "$tmp/hf" -p "hello" -n 2
    "$TELA" run -m "$tmp/hf" --tokens "$ids" -n 24 --temp 0 --print-ids -t 1 >"$tmp/hf.json" 2>/dev/null &&
        cmp -s "$tmp/hf.json" "$tmp/ids.json" && ok "HF checkpoint gives the same greedy ids" || bad "HF greedy ids"
fi
exit $fail
