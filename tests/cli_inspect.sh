#!/usr/bin/env bash
# cli_inspect.sh: 'tela inspect' on the reference fixtures in ../shared (GGUF
# files and the HF checkpoint), checked against an independent reading of
# the files with Python's struct/json modules and against the HF configs in
# refs-d1.json; plus usage errors and truncated files (non-zero exit, the
# library's message). Skips (77) when ../shared is absent.
set -u
BIN=${TELA_BIN:?TELA_BIN must point to the tela binary}
SHARED=${TELA_SHARED_DIR:-}
FIX=$SHARED/reference/fixtures
fails=0
pass=0
ok() { pass=$((pass + 1)); }
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
check() { if eval "$1"; then ok; else fail "$2"; fi; }

TMP=$(mktemp -d /tmp/tela_cli_inspect.XXXXXX)
trap 'rm -rf "$TMP"' EXIT

# ---- usage
"$BIN" inspect --help >"$TMP/out" 2>&1; rc=$?
check '[ $rc -eq 0 ] && grep -q "usage: tela inspect" "$TMP/out"' "--help"
"$BIN" inspect >"$TMP/out" 2>"$TMP/err"; rc=$?
check '[ $rc -eq 2 ] && grep -q "no file" "$TMP/err"' "no path: exit 2"
"$BIN" inspect --bogus x >"$TMP/out" 2>"$TMP/err"; rc=$?
check '[ $rc -eq 2 ] && grep -q "unknown option" "$TMP/err"' "unknown option: exit 2"
"$BIN" inspect "$TMP/nonexistent.gguf" >"$TMP/out" 2>"$TMP/err"; rc=$?
check '[ $rc -eq 1 ] && grep -q "nonexistent.gguf" "$TMP/err"' "missing file: exit 1 naming it"
printf 'hello, world\n' >"$TMP/junk.bin"
"$BIN" inspect "$TMP/junk.bin" >"$TMP/out" 2>"$TMP/err"; rc=$?
check '[ $rc -eq 1 ] && grep -q "junk.bin" "$TMP/err"' "junk file: exit 1 naming it"

if [ -z "$SHARED" ] || [ ! -f "$FIX/llama-d1.gguf" ]; then
    echo "SKIP: $FIX/llama-d1.gguf absent ($pass checks passed, $fails failed)"
    [ $fails -eq 0 ] && exit 77 || exit 1
fi
if ! command -v python3 >/dev/null; then
    echo "SKIP: python3 (the independent reader) not found"
    [ $fails -eq 0 ] && exit 77 || exit 1
fi

# ---- an independent GGUF reader: prints architecture, tensor count, data
# section offset, and name/type/dims/file offset of one tensor
cat >"$TMP/gguf.py" <<'EOF'
import struct, sys
d = open(sys.argv[1], 'rb').read()
want = sys.argv[2]
p = 0
def rd(f):
    global p
    v = struct.unpack_from('<' + f, d, p)[0]; p += struct.calcsize('<' + f); return v
def rs():
    global p
    n = rd('Q'); s = d[p:p + n]; p += n; return s.decode('utf-8', 'replace')
SC = {0: 'B', 1: 'b', 2: 'H', 3: 'h', 4: 'I', 5: 'i', 6: 'f', 7: '?', 10: 'Q', 11: 'q', 12: 'd'}
def rv(t):
    if t in SC: return rd(SC[t])
    if t == 8: return rs()
    et = rd('I'); n = rd('Q'); return [rv(et) for _ in range(n)]
assert d[:4] == b'GGUF'; p = 4
rd('I'); nt = rd('Q'); nkv = rd('Q')
kv = {}
for _ in range(nkv):
    k = rs(); kv[k] = rv(rd('I'))
info = {}
for _ in range(nt):
    n = rs(); nd = rd('I'); ne = [rd('Q') for _ in range(nd)]; ty = rd('I'); off = rd('Q')
    info[n] = (ty, ne, off)
al = kv.get('general.alignment', 32)
data = (p + al - 1) // al * al
ty, ne, off = info[want]
print(kv['general.architecture'], nt, data, len(kv['tokenizer.ggml.tokens']), ty, ' '.join(map(str, ne)), data + off)
EOF

for model in llama-d1 qwen35-d1; do
    f="$FIX/$model.gguf"
    [ -f "$f" ] || continue
    read -r arch nt data ntok ttype ne0 ne1 toff < <(python3 "$TMP/gguf.py" "$f" token_embd.weight)
    "$BIN" inspect "$f" >"$TMP/out" 2>"$TMP/err"; rc=$?
    check '[ $rc -eq 0 ]' "$model: exit $rc: $(cat "$TMP/err")"
    check 'grep -q "GGUF version 3" "$TMP/out"' "$model: version"
    check 'grep -Eq "^  general.architecture +string += \"$arch\"$" "$TMP/out"' "$model: architecture $arch"
    check 'grep -q "^tensors: $nt$" "$TMP/out"' "$model: tensor count $nt"
    check 'grep -q "^data offset: $data$" "$TMP/out"' "$model: data offset $data"
    check 'grep -q "tokenizer.ggml.tokens .*= \[$ntok strings: \"!\", \"\\\\\"\", \"#\", ... \]" "$TMP/out"' \
        "$model: token array summary"
    # token_embd.weight: f16 (type 1), shape [ne0, ne1] at file offset toff
    [ "$ttype" = 1 ] && tname=f16 || tname=other
    check 'grep -Eq "^  token_embd.weight +$tname +\[$ne0, $ne1\] +$toff +$((ne0 * ne1 * 2))$" "$TMP/out"' \
        "$model: token_embd.weight row"
    check 'grep -q "^totals: $nt tensors" "$TMP/out"' "$model: totals"

    # --json, read back with python's json module
    "$BIN" inspect --json "$f" >"$TMP/json" 2>"$TMP/err"; rc=$?
    check '[ $rc -eq 0 ]' "$model --json: exit $rc"
    python3 - "$TMP/json" "$arch" "$nt" "$ntok" "$ne0" "$ne1" "$toff" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
arch, nt, ntok, ne0, ne1, toff = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7])
assert j['format'] == 'gguf' and j['version'] == 3, 'format'
assert j['metadata']['general.architecture'] == {'type': 'string', 'value': arch}, 'arch'
toks = j['metadata']['tokenizer.ggml.tokens']
assert toks['n'] == ntok and toks['elem_type'] == 'string' and toks['truncated'] and toks['value'][:3] == ['!', '"', '#'], 'tokens'
assert j['n_tensors'] == nt and len(j['tensors']) == nt, 'n_tensors'
t = [t for t in j['tensors'] if t['name'] == 'token_embd.weight'][0]
assert t['ne'] == [ne0, ne1] and t['offset'] == toff and t['bytes'] == ne0 * ne1 * 2 and t['type'] == 'f16', t
assert j['n_bytes'] == sum(t['bytes'] for t in j['tensors']), 'n_bytes'
EOF
    check '[ $? -eq 0 ]' "$model --json content"

    "$BIN" inspect --no-tensors "$f" >"$TMP/out" 2>&1; rc=$?
    check '[ $rc -eq 0 ] && ! grep -q "token_embd.weight" "$TMP/out" && grep -q "^totals: $nt tensors" "$TMP/out"' \
        "$model --no-tensors"

    # a truncated copy: exit 1 with the library's message naming the file
    head -c 1000000 "$f" >"$TMP/trunc.gguf"
    "$BIN" inspect "$TMP/trunc.gguf" >"$TMP/out" 2>"$TMP/err"; rc=$?
    check '[ $rc -eq 1 ] && grep -q "trunc.gguf" "$TMP/err" && grep -Eq "past the end|truncated" "$TMP/err"' \
        "$model truncated: exit $rc, $(cat "$TMP/err")"
    head -c 20 "$f" >"$TMP/trunc.gguf"
    "$BIN" inspect "$TMP/trunc.gguf" >"$TMP/out" 2>"$TMP/err"; rc=$?
    check '[ $rc -eq 1 ] && grep -q "truncated" "$TMP/err"' "$model truncated to 20 bytes"
done

# ---- the HF checkpoint
if [ -f "$FIX/llama-d1-hf.tgz" ] && mkdir "$TMP/hf" && tar xzf "$FIX/llama-d1-hf.tgz" -C "$TMP/hf"; then
    "$BIN" inspect "$TMP/hf" >"$TMP/out" 2>"$TMP/err"; rc=$?
    check '[ $rc -eq 0 ]' "hf: exit $rc: $(cat "$TMP/err")"
    # values from refs-d1.json's configs (written by transformers)
    read -r hidden layers vocab < <(python3 -c '
import json, sys
c = json.load(open(sys.argv[1]))["configs"]["llama-d1"]
print(c["hidden_size"], c["num_hidden_layers"], c["vocab_size"])' "$FIX/refs-d1.json")
    check 'grep -Eq "^  hidden_size +$hidden$" "$TMP/out"' "hf: hidden_size $hidden"
    check 'grep -Eq "^  num_hidden_layers +$layers$" "$TMP/out"' "hf: num_hidden_layers $layers"
    check 'grep -Eq "^  model.embed_tokens.weight +F32 +\[$vocab, $hidden\] +model.safetensors +$((vocab * hidden * 4))$" "$TMP/out"' \
        "hf: embed_tokens row"
    # the tensor count and data offset from the safetensors header itself
    read -r nst hdr < <(python3 -c '
import json, struct, sys
d = open(sys.argv[1], "rb").read(1 << 20)
n = struct.unpack_from("<Q", d)[0]
h = json.loads(d[8:8 + n])
print(len([k for k in h if k != "__metadata__"]), 8 + n)' "$TMP/hf/model.safetensors")
    check 'grep -q "^tensors: $nst " "$TMP/out"' "hf: tensor count $nst"
    check 'grep -q "model.safetensors: $nst tensors, data at byte offset $hdr" "$TMP/out"' "hf: file line"
    "$BIN" inspect --json "$TMP/hf/model.safetensors" >"$TMP/json" 2>"$TMP/err"; rc=$?
    check '[ $rc -eq 0 ]' "hf file --json: exit $rc"
    python3 - "$TMP/json" "$TMP/hf/model.safetensors" "$FIX/refs-d1.json" <<'EOF'
import json, struct, sys
j = json.load(open(sys.argv[1]))
d = open(sys.argv[2], 'rb').read(1 << 20)
n = struct.unpack_from('<Q', d)[0]
h = json.loads(d[8:8 + n])
ref = json.load(open(sys.argv[3]))['configs']['llama-d1']
assert j['format'] == 'safetensors' and j['config']['hidden_size'] == ref['hidden_size'], 'config'
assert j['n_tensors'] == len(h) - ('__metadata__' in h), 'n_tensors'
for t in j['tensors']:
    e = h[t['name']]
    assert t['dtype'] == e['dtype'] and t['shape'] == e['shape'] and t['ne'] == e['shape'][::-1], t
    assert t['offset'] == 8 + n + e['data_offsets'][0] and t['bytes'] == e['data_offsets'][1] - e['data_offsets'][0], t
assert j['files'][0]['metadata'] == h.get('__metadata__', {}), 'metadata'
EOF
    check '[ $? -eq 0 ]' "hf --json content"
    # truncated shard
    mkdir "$TMP/hf_trunc" && cp "$TMP/hf/config.json" "$TMP/hf_trunc/" &&
        head -c 100000 "$TMP/hf/model.safetensors" >"$TMP/hf_trunc/model.safetensors"
    "$BIN" inspect "$TMP/hf_trunc" >"$TMP/out" 2>"$TMP/err"; rc=$?
    check '[ $rc -eq 1 ] && grep -q "model.safetensors" "$TMP/err" && grep -q "data_offsets" "$TMP/err"' \
        "hf truncated: exit $rc, $(cat "$TMP/err")"
else
    echo "note: llama-d1-hf.tgz absent or not extractable, HF checks skipped"
fi

echo "$pass passed, $fails failed"
[ $fails -eq 0 ]
