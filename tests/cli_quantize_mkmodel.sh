#!/usr/bin/env bash
# cli_quantize_mkmodel.sh: tela-mkmodel (random-weight models at real shapes)
# feeding tela quantize and tela run, on its small presets: usage errors;
# the same file for any thread count and a given seed; the tokenizer keys of
# another GGUF copied and padded with [PADn] tokens of type 5 (unused), as
# llama.cpp's converter pads; Llama and Qwen3.5 models quantized to Q4_K_M
# and Q8_0 that tela run loads and runs; --mtp's nextn block, which tela
# run --spec mtp drafts with, giving the plain greedy tokens. Tensor tables and keys are read
# back with an independent parser (Python struct).
set -u
tela=${TELA_BIN:?TELA_BIN not set}
mk="$(dirname "$tela")/tela-mkmodel"
if [ ! -x "$mk" ]; then echo "SKIP: no $mk"; exit 77; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fail=1; fi; }

"$mk" --help > "$tmp/help" 2>&1
check "--help lists the presets" "[ $? -eq 0 ] && grep -q 'llama-3.2-1b' '$tmp/help' && grep -q 'qwen3.5-2b' '$tmp/help'"
"$mk" no-such-model -o "$tmp/x.gguf" 2> "$tmp/err"
check "an unknown preset is an error" "[ $? -ne 0 ] && grep -q 'no-such-model' '$tmp/err' && [ ! -e '$tmp/x.gguf' ]"
"$mk" llama-tiny 2> "$tmp/err"
check "no output file is an error" "[ $? -ne 0 ]"

"$mk" llama-tiny -o "$tmp/a.gguf" --seed 7 --threads 1 -q && "$mk" llama-tiny -o "$tmp/b.gguf" --seed 7 --threads 2 -q
check "the same seed gives the same file for 1 and 2 threads" "cmp -s '$tmp/a.gguf' '$tmp/b.gguf'"
"$mk" llama-tiny -o "$tmp/c.gguf" --seed 8 -q
check "another seed gives another file" "! cmp -s '$tmp/a.gguf' '$tmp/c.gguf' && [ \$(stat -c %s '$tmp/a.gguf') -eq \$(stat -c %s '$tmp/c.gguf') ]"

# a vocabulary-only GGUF with 100 tokens, written here
python3 - "$tmp/vocab.gguf" <<'EOF'
import struct, sys
def s(x): b = x.encode(); return struct.pack('<Q', len(b)) + b
kv = [(b'tokenizer.ggml.model', struct.pack('<I', 8) + s('gpt2')),
      (b'tokenizer.ggml.tokens', struct.pack('<IIQ', 9, 8, 100) + b''.join(s('tok%d' % i) for i in range(100))),
      (b'tokenizer.ggml.token_type', struct.pack('<IIQ', 9, 5, 100) + struct.pack('<100i', *([1] * 99 + [3]))),
      (b'tokenizer.ggml.bos_token_id', struct.pack('<II', 4, 99))]
out = b'GGUF' + struct.pack('<IQQ', 3, 0, len(kv))
for k, v in kv: out += struct.pack('<Q', len(k)) + k + v
open(sys.argv[1], 'wb').write(out)
EOF
# reads back: n_vocab, tokens[99], tokens[100], tokens[511], token_type[99], token_type[100], bos id, tensor rows of token_embd
read_vocab() {
    python3 - "$1" <<'EOF'
import struct, sys
d = open(sys.argv[1], 'rb').read()
p = 8
n_t, n_kv = struct.unpack_from('<QQ', d, p); p += 16
def take(f):
    global p
    v = struct.unpack_from('<' + f, d, p); p += struct.calcsize('<' + f); return v[0]
def string():
    global p
    n = take('Q'); v = d[p:p + n].decode(); p += n; return v
sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
fmt = {4: 'I', 5: 'i', 6: 'f'}
def value(t):
    global p
    if t == 8: return string()
    if t == 9:
        et = take('I'); n = take('Q'); return [value(et) for _ in range(n)]
    if t in fmt: return take(fmt[t])
    p += sizes[t]; return None
kv = {}
for _ in range(n_kv):
    k = string(); kv[k] = value(take('I'))
rows = None
for _ in range(n_t):
    name = string(); nd = take('I'); ne = [take('Q') for _ in range(nd)]; take('I'); take('Q')
    if name == 'token_embd.weight': rows = ne[1]
t, tt = kv['tokenizer.ggml.tokens'], kv['tokenizer.ggml.token_type']
print(len(t), t[99], t[100], t[511], tt[99], tt[100], kv['tokenizer.ggml.bos_token_id'], rows)
EOF
}
"$mk" llama-tiny -o "$tmp/v.gguf" --vocab-from "$tmp/vocab.gguf" -q 2> "$tmp/err"
check "--vocab-from copies and pads the tokenizer" \
    "[ \"\$(read_vocab '$tmp/v.gguf')\" = '512 tok99 [PAD100] [PAD511] 3 5 99 512' ]"
"$tela" run -m "$tmp/v.gguf" --tokens 1,2,3 -n 2 --temp 0 --print-ids > /dev/null 2> "$tmp/err"
check "the padded model loads and runs" "[ $? -eq 0 ]"

# --mtp: one nextn block, as llama.cpp's converter writes Qwen3.5's MTP layer
"$mk" llama-tiny --mtp -o "$tmp/m.gguf" -q 2> "$tmp/err"
check "--mtp on a Llama preset is an error" "[ $? -eq 2 ] && grep -q 'Qwen3.5' '$tmp/err' && [ ! -e '$tmp/m.gguf' ]"
"$mk" qwen3.5-tiny --mtp -o "$tmp/mtp.gguf" -q
python3 - "$tmp/mtp.gguf" > "$tmp/mtp.txt" <<'EOF2'
import struct, sys
d = open(sys.argv[1], 'rb').read()
p = 8
n_t, n_kv = struct.unpack_from('<QQ', d, p); p += 16
def take(f):
    global p
    v = struct.unpack_from('<' + f, d, p); p += struct.calcsize('<' + f); return v[0]
def string():
    global p
    n = take('Q'); v = d[p:p + n].decode(); p += n; return v
sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
def value(t):
    global p
    if t == 8: return string()
    if t == 9:
        et = take('I'); n = take('Q'); return [value(et) for _ in range(n)]
    if t == 4: return take('I')
    p += sizes[t]; return None
kv = {}
for _ in range(n_kv):
    k = string(); kv[k] = value(take('I'))
names = {}
for _ in range(n_t):
    name = string(); nd = take('I'); ne = [take('Q') for _ in range(nd)]; take('I'); take('Q'); names[name] = ne
print(kv['qwen35.block_count'], kv['qwen35.nextn_predict_layers'], names.get('blk.4.nextn.eh_proj.weight'),
      'blk.4.attn_q.weight' in names, 'blk.4.ssm_a' in names, 'blk.5.attn_norm.weight' in names)
EOF2
check "--mtp writes block_count 5, one nextn layer, its projection [512, 256] on a full-attention layer" \
    "[ \"\$(cat '$tmp/mtp.txt')\" = '5 1 [512, 256] True False False' ]"
"$tela" run -m "$tmp/mtp.gguf" --tokens 5,9,2,7 -n 12 --temp 0 --print-ids -t 1 > "$tmp/plain" 2> /dev/null
"$tela" run -m "$tmp/mtp.gguf" --tokens 5,9,2,7 -n 12 --temp 0 --print-ids -t 1 --spec mtp --draft-max 2 > "$tmp/spec" 2> "$tmp/err"
check "tela run --spec mtp drafts with the block and gives the plain greedy tokens" \
    "[ -s '$tmp/plain' ] && cmp -s '$tmp/plain' '$tmp/spec' && grep -q 'drafts accepted' '$tmp/err'"

for preset in llama-tiny qwen3.5-tiny; do
    "$mk" "$preset" -o "$tmp/$preset.gguf" -q
    for type in Q4_K_M Q8_0; do
        out="$tmp/$preset-$type.gguf"
        "$tela" quantize "$tmp/$preset.gguf" "$out" "$type" -q
        check "$preset quantizes to $type" "[ $? -eq 0 ] && [ -s '$out' ]"
        if "$tela" run -m "$out" --tokens 1,2,3,4 -n 6 --temp 0 --print-ids -t 1 > "$tmp/ids" 2> "$tmp/err"; then
            check "$preset $type runs and gives 6 tokens" \
                "python3 -c \"import json,sys; a=json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]); sys.exit(0 if len(a)==6 and all(0<=x<512 for x in a) else 1)\" '$tmp/ids'"
        else
            check "tela run on $preset $type: $(head -c 300 "$tmp/err")" false
        fi
    done
done
exit $fail
