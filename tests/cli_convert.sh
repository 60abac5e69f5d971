#!/usr/bin/env bash
# cli_convert.sh: 'tela convert' as a user runs it: --help, usage errors,
# --no-mtp documented, an unsupported checkpoint (clean error, no output file left), and, when
# ../shared is present, llama-d1-hf.tgz -> F16 GGUF with the same tensor table
# as llama.cpp's llama-d1.gguf (checked with an independent struct parser).
set -u
tela=${TELA_BIN:?TELA_BIN not set}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fail=1; fi; }

"$tela" convert --help > "$tmp/help" 2>&1
check "--help exits 0 and names the types" "grep -q 'q8_0' '$tmp/help'"
check "--help documents --no-mtp" "grep -q -- '--no-mtp' '$tmp/help'"
"$tela" convert > /dev/null 2>&1
check "no arguments is an error" "[ $? -ne 0 ]"
"$tela" convert "$tmp" -o "$tmp/x.gguf" --type q4_K > /dev/null 2> "$tmp/err"
check "bad --type is an error" "[ $? -ne 0 ] && grep -q 'type' '$tmp/err'"

mkdir -p "$tmp/gpt2"
printf '{"architectures": ["GPT2LMHeadModel"], "num_hidden_layers": 1}' > "$tmp/gpt2/config.json"
printf '\x02\x00\x00\x00\x00\x00\x00\x00{}' > "$tmp/gpt2/model.safetensors"
"$tela" convert "$tmp/gpt2" -o "$tmp/gpt2.gguf" 2> "$tmp/err"
rc=$?
check "unsupported architecture fails" "[ $rc -ne 0 ] && grep -q 'GPT2LMHeadModel' '$tmp/err'"
check "no output file after a failure" "[ ! -e '$tmp/gpt2.gguf' ] && [ -z \"\$(ls '$tmp' | grep -i scratch)\" ]"

shared=${TELA_SHARED_DIR:-}
if [ -n "$shared" ] && [ -f "$shared/reference/fixtures/llama-d1-hf.tgz" ]; then
    mkdir -p "$tmp/llama-d1"
    tar xzf "$shared/reference/fixtures/llama-d1-hf.tgz" -C "$tmp/llama-d1"
    "$tela" convert "$tmp/llama-d1" -o "$tmp/d1.gguf" --type f16 -q
    check "llama-d1 converts" "[ $? -eq 0 ] && [ -s '$tmp/d1.gguf' ]"
    table() {
        python3 - "$1" <<'PY'
import struct, sys
d = open(sys.argv[1], "rb").read()
p = 24
def take(fmt):
    global p
    v = struct.unpack_from("<" + fmt, d, p); p += struct.calcsize("<" + fmt); return v[0]
def skip(t):
    global p
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    if t in sizes: p += sizes[t]
    elif t == 8: n = take("Q"); p += n
    else:
        et = take("I"); n = take("Q")
        for _ in range(n): skip(et)
n_t, n_kv = struct.unpack_from("<QQ", d, 8)
for _ in range(n_kv):
    n = take("Q"); p += n; skip(take("I"))
for _ in range(n_t):
    n = take("Q"); name = d[p:p + n].decode(); p += n
    nd = take("I"); ne = [take("Q") for _ in range(nd)]
    print(name, ne, take("I"), take("Q"))
PY
    }
    table "$shared/reference/fixtures/llama-d1.gguf" > "$tmp/ref.txt"
    table "$tmp/d1.gguf" > "$tmp/ours.txt"
    check "tensor table (names, shapes, types, offsets) equals llama.cpp's" "cmp -s '$tmp/ref.txt' '$tmp/ours.txt' && [ -s '$tmp/ref.txt' ]"
else
    echo "skip: ../shared absent"
fi
exit $fail
