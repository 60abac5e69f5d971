#!/usr/bin/env bash
# cli_qwen35.sh: 'tela run' and 'tela logits' on a Qwen3.5 hybrid model, the
# shared reference qwen35-d1 (F16 GGUF from llama.cpp's converter), as a user
# drives them: greedy ids equal transformers' (up to the first step whose
# reference margin is < 0.01) for a short prompt and for the 220-token one
# (a chunked prefill over several chunks, then recurrent decode steps);
# written logits match the reference file to 1e-4 of the logit range; a text
# prompt goes through the tokenizer and generates. Skips (77) without ../shared.
set -u
TELA=${TELA_BIN:?TELA_BIN is not set}
FIX=${TELA_SHARED_DIR:-/nonexistent}/reference/fixtures
if [ ! -f "$FIX/qwen35-d1.gguf" ] || [ ! -f "$FIX/refs-d1.json" ]; then
    echo "SKIP: no ../shared/reference/fixtures"
    exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fail=1; }
prompt_ids() { python3 -c "import json,sys; p=json.load(open(sys.argv[1]))['qwen35-d1']['prompts'][int(sys.argv[2])]; print(','.join(map(str,p['ids'])))" "$FIX/refs-d1.json" "$1"; }

for pi in 0 4; do
    ids=$(prompt_ids $pi)
    n=$(echo "$ids" | tr ',' '\n' | wc -l)
    if "$TELA" run -m "$FIX/qwen35-d1.gguf" --tokens "$ids" -n 24 --temp 0 --print-ids -t 2 >"$tmp/ids.json" 2>"$tmp/run.err"; then
        if python3 - "$FIX/refs-d1.json" "$tmp/ids.json" "$pi" <<'EOF'
import json, sys
p = json.load(open(sys.argv[1]))['qwen35-d1']['prompts'][int(sys.argv[3])]
lines = open(sys.argv[2]).read().strip().splitlines()
assert len(lines) == 1, "expected one line of output, got %d" % len(lines)
got = json.loads(lines[0])
assert len(got) == 24, "expected 24 ids, got %d" % len(got)
compared = 0
for i, (g, r) in enumerate(zip(got, p['greedy'])):
    if p['greedy_margin'][i] < 0.01:
        break
    assert g == r, "step %d: %d, reference %d" % (i, g, r)
    compared += 1
assert compared >= 3, "only %d steps comparable" % compared
EOF
        then ok "prompt $pi ($n tokens): run --print-ids matches the reference greedy tokens"; else bad "prompt $pi: run --print-ids"; fi
        grep -q "prompt: $n tokens in .* tok/s) | generation: 24 tokens in" "$tmp/run.err" && ok "timing line" ||
            bad "timing line: $(cat "$tmp/run.err")"
    else
        bad "tela run failed: $(cat "$tmp/run.err")"
    fi
done

# logits of every position of the long prompt: the last row against the reference
ids=$(prompt_ids 4)
if "$TELA" logits -m "$FIX/qwen35-d1.gguf" --tokens "$ids" --all -o "$tmp/all.f32" -t 2 2>"$tmp/lg.err"; then
    if python3 - "$FIX/refs-d1.json" "$FIX/qwen35-d1.logits.f32" "$tmp/all.f32" <<'EOF'
import array, json, os, sys
p = json.load(open(sys.argv[1]))['qwen35-d1']['prompts'][4]
V, n = p['vocab'], len(p['ids'])
assert os.path.getsize(sys.argv[3]) == 4 * V * n, "all.f32 has %d bytes" % os.path.getsize(sys.argv[3])
ref = array.array('f')
with open(sys.argv[2], 'rb') as f:
    f.seek(p['last_logits_offset_bytes'])
    ref.frombytes(f.read(4 * V))
allv = array.array('f'); allv.frombytes(open(sys.argv[3], 'rb').read())
if sys.byteorder != 'little':
    for a in (ref, allv): a.byteswap()
rng = max(ref) - min(ref)
d = max(abs(a - b) for a, b in zip(allv[(n - 1) * V:], ref))
assert d <= 1e-4 * rng, "last logits off by %g (range %g)" % (d, rng)
for t in range(0, n, 7):
    row = allv[t * V:(t + 1) * V]
    best = max(range(V), key=row.__getitem__)
    assert p['top2_margin'][t] <= 1e-3 or best == p['argmax'][t], "position %d argmax %d" % (t, best)
EOF
    then ok "logits --all: size and values"; else bad "logits --all"; fi
else
    bad "tela logits failed: $(cat "$tmp/lg.err")"
fi

# a text prompt through the model's tokenizer (Qwen's byte-level BPE)
if "$TELA" run -m "$FIX/qwen35-d1.gguf" -p "Once upon a time, there was a little robot named Tela." -n 8 --temp 0 --print-ids \
    -t 2 >"$tmp/text.json" 2>"$tmp/text.err"; then
    ref=$(python3 -c "import json,sys; p=json.load(open(sys.argv[1]))['qwen35-d1']['prompts'][0]; print(json.dumps(p['greedy'][:1]))" "$FIX/refs-d1.json")
    first=$(python3 -c "import json,sys; print(json.dumps(json.loads(open(sys.argv[1]).read())[:1]))" "$tmp/text.json")
    [ "$first" = "$ref" ] && ok "text prompt: tokenized like the reference, same first token" ||
        bad "text prompt: first token $first, reference $ref"
else
    bad "tela run -p failed: $(cat "$tmp/text.err")"
fi

exit $fail
