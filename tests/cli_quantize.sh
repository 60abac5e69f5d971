#!/usr/bin/env bash
# cli_quantize.sh: 'tela quantize' as a user runs it, on the llama-gqa
# fixture (F32 GGUF): --help and usage errors (no file left behind); Q8_0 and
# Q4_K_M outputs that 'tela run' loads and runs; the Q8_0 file gives
# transformers' greedy tokens and logits for the same model with Q8_0 weights
# (llama-gqa-q8_0.json, computed from ggml's Q8_0 rounding of each weight,
# compared in tela's exact matmul mode);
# --threads 1 and 2 give identical files; --dry-run writes nothing.
set -u
tela=${TELA_BIN:?TELA_BIN not set}
src=${TELA_SOURCE_DIR:?TELA_SOURCE_DIR not set}
fix="$src/tests/fixtures/llama"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fail=1; fi; }

"$tela" quantize --help > "$tmp/help" 2>&1
check "--help exits 0 and names the types" "[ $? -eq 0 ] && grep -q 'Q4_K_M' '$tmp/help' && grep -q 'Q8_0' '$tmp/help'"
"$tela" quantize > /dev/null 2>&1
check "no arguments is an error" "[ $? -ne 0 ]"
"$tela" quantize "$fix/llama-gqa-f32.gguf" "$tmp/x.gguf" Q4_K_Z 2> "$tmp/err"
check "unknown type is an error naming it" "[ $? -ne 0 ] && grep -q 'Q4_K_Z' '$tmp/err' && [ ! -e '$tmp/x.gguf' ]"
"$tela" quantize "$tmp/missing.gguf" "$tmp/x.gguf" Q8_0 2> "$tmp/err"
check "missing input is an error" "[ $? -ne 0 ] && grep -q 'missing.gguf' '$tmp/err' && [ ! -e '$tmp/x.gguf' ]"
printf 'not a gguf file' > "$tmp/bad.gguf"
"$tela" quantize "$tmp/bad.gguf" "$tmp/x.gguf" Q8_0 2> "$tmp/err"
check "non-GGUF input is an error" "[ $? -ne 0 ] && [ -s '$tmp/err' ] && [ -z \"\$(ls '$tmp' | grep '^x.gguf')\" ]"
"$tela" quantize "$fix/llama-gqa-f32.gguf" "$tmp/x.gguf" Q8_0 --threads 0 2> "$tmp/err"
check "--threads 0 is an error" "[ $? -ne 0 ] && [ ! -e '$tmp/x.gguf' ]"

"$tela" quantize "$fix/llama-gqa-f32.gguf" "$tmp/q8.gguf" Q8_0 -t 1 2> "$tmp/q8.err"
check "Q8_0 quantizes" "[ $? -eq 0 ] && [ -s '$tmp/q8.gguf' ] && grep -q 'wrote' '$tmp/q8.err'"
"$tela" quantize "$fix/llama-gqa-f32.gguf" "$tmp/q8-t2.gguf" q8_0 --threads 2 -q 2> "$tmp/err"
check "-q prints nothing" "[ $? -eq 0 ] && [ ! -s '$tmp/err' ]"
check "--threads 1 and 2 give the same file" "cmp -s '$tmp/q8.gguf' '$tmp/q8-t2.gguf'"
"$tela" quantize "$fix/llama-gqa-f32.gguf" "$tmp/q4km.gguf" Q4_K_M -q
check "Q4_K_M quantizes" "[ $? -eq 0 ] && [ -s '$tmp/q4km.gguf' ]"
"$tela" quantize --dry-run "$fix/llama-gqa-f32.gguf" Q4_K_M > "$tmp/dry" 2>&1
check "--dry-run lists tensors and writes nothing" \
    "[ $? -eq 0 ] && grep -q 'blk.2.ffn_down.weight' '$tmp/dry' && [ \$(ls '$tmp' | grep -c gguf) -eq 4 ]"

"$tela" inspect "$tmp/q4km.gguf" > "$tmp/inspect" 2>&1
check "general.file_type is 15 (MOSTLY_Q4_K_M)" "grep -Eq 'general.file_type +uint32 += 15' '$tmp/inspect'"
"$tela" inspect "$tmp/q8.gguf" > "$tmp/inspect" 2>&1
check "general.file_type is 7 (MOSTLY_Q8_0)" "grep -Eq 'general.file_type +uint32 += 7' '$tmp/inspect'"

# The Q8_0 model against its exact reference, with tela's exact matmul mode
# (weights dequantized, f32 activations) so the 1e-4 bound applies
export TELA_EXACT_MATMUL=1
ids=$(python3 -c "import json,sys; p=json.load(open(sys.argv[1]))['prompts'][1]; print(','.join(map(str,p['ids'])))" \
      "$fix/llama-gqa-q8_0.json")
if "$tela" run -m "$tmp/q8.gguf" --tokens "$ids" -n 24 --temp 0 --print-ids -t 1 > "$tmp/ids" 2> "$tmp/run.err"; then
    python3 - "$fix/llama-gqa-q8_0.json" "$tmp/ids" <<'EOF'
import json, sys
p = json.load(open(sys.argv[1]))['prompts'][1]
got = json.loads(open(sys.argv[2]).read().strip().splitlines()[-1])
assert len(got) == 24, "expected 24 ids, got %d" % len(got)
for i, (g, r) in enumerate(zip(got, p['greedy'])):
    assert g == r, "step %d: %d, reference %d" % (i, g, r)
    if p['greedy_margin'][i] < 0.01:
        break
EOF
    check "Q8_0 greedy tokens equal the reference" "[ $? -eq 0 ]"
else
    check "tela run on the Q8_0 file: $(cat "$tmp/run.err")" false
fi
if "$tela" logits -m "$tmp/q8.gguf" --tokens "$ids" -t 1 -o "$tmp/last.f32" 2> "$tmp/lg.err"; then
    python3 - "$fix/llama-gqa-q8_0.json" "$fix/llama-gqa-q8_0.logits.f32" "$tmp/last.f32" <<'EOF'
import array, json, sys
d = json.load(open(sys.argv[1]))
p, V = d['prompts'][1], d['n_vocab']
ref = array.array('f')
with open(sys.argv[2], 'rb') as f:
    f.seek(p['logits_offset_bytes'] + 4 * V * (p['logits_positions'] - 1))
    ref.frombytes(f.read(4 * V))
got = array.array('f'); got.frombytes(open(sys.argv[3], 'rb').read())
assert len(got) == V, "%d logits" % len(got)
tol = 1e-4 * (max(ref) - min(ref))
worst = max(abs(a - b) for a, b in zip(got, ref))
assert worst <= tol, "max |diff| %g > %g" % (worst, tol)
EOF
    check "Q8_0 last-position logits within 1e-4 of the range of the reference" "[ $? -eq 0 ]"
else
    check "tela logits on the Q8_0 file: $(cat "$tmp/lg.err")" false
fi

unset TELA_EXACT_MATMUL

# Q4_K_M: the mixture falls back to 32-element types on this small model;
# greedy tokens may differ from the F32 model, so only the count is checked
if "$tela" run -m "$tmp/q4km.gguf" --tokens "$ids" -n 8 --temp 0 --print-ids -t 1 > "$tmp/ids4" 2> "$tmp/run.err"; then
    check "Q4_K_M runs and gives 8 tokens" \
        "python3 -c \"import json,sys; a=json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]); sys.exit(0 if len(a)==8 and all(0<=x<512 for x in a) else 1)\" '$tmp/ids4'"
else
    check "tela run on the Q4_K_M file: $(cat "$tmp/run.err")" false
fi

# requantizing needs permission, and leaves nothing behind when refused
"$tela" quantize "$tmp/q8.gguf" "$tmp/rq.gguf" Q4_K_M 2> "$tmp/err"
check "requantizing is refused without --allow-requantize" \
    "[ $? -ne 0 ] && grep -q 'allow-requantize' '$tmp/err' && [ -z \"\$(ls '$tmp' | grep '^rq')\" ]"
"$tela" quantize "$tmp/q8.gguf" "$tmp/rq.gguf" Q4_K_M --allow-requantize 2> "$tmp/err"
check "--allow-requantize quantizes with a warning" "[ $? -eq 0 ] && [ -s '$tmp/rq.gguf' ] && grep -q 'warning' '$tmp/err'"
exit $fail
