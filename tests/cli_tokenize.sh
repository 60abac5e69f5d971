#!/usr/bin/env bash
# cli_tokenize.sh: 'tela tokenize' and 'tela detokenize' as a user runs them:
# usage errors (non-zero exit, a message on stderr), ids against llama.cpp's
# test vectors and refs-d1.json (both from Hugging Face tokenizers), the
# --json / --add-special / --no-parse-special / --show-pieces options, a
# tokenizer.json directory as MODEL, and detokenize giving the text back.
# Skips (77) when ../shared is absent.
set -u
BIN=${TELA_BIN:?TELA_BIN must point to the tela binary}
SHARED=${TELA_SHARED_DIR:-}
VOC=$SHARED/reference/llamacpp-vocab
FIX=$SHARED/reference/fixtures
fails=0
pass=0
ok() { pass=$((pass + 1)); }
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
check() { if eval "$1"; then ok; else fail "$2"; fi; }

TMP=$(mktemp -d /tmp/tela_cli_tokenize.XXXXXX)
trap 'rm -rf "$TMP"' EXIT

# ---- usage
"$BIN" tokenize --help >"$TMP/out" 2>&1; rc=$?
check '[ $rc -eq 0 ] && grep -q "usage: tela tokenize" "$TMP/out"' "tokenize --help"
"$BIN" detokenize --help >"$TMP/out" 2>&1; rc=$?
check '[ $rc -eq 0 ] && grep -q "usage: tela detokenize" "$TMP/out"' "detokenize --help"
"$BIN" tokenize -p hi >"$TMP/out" 2>"$TMP/err"; rc=$?
check '[ $rc -eq 2 ] && grep -q "MODEL" "$TMP/err"' "tokenize without -m: exit 2"
"$BIN" tokenize -m x --bogus >"$TMP/out" 2>"$TMP/err"; rc=$?
check '[ $rc -eq 2 ] && grep -q "unknown option" "$TMP/err"' "unknown option: exit 2"
"$BIN" tokenize -m "$TMP/none.gguf" -p hi >"$TMP/out" 2>"$TMP/err"; rc=$?
check '[ $rc -eq 1 ] && grep -q "none.gguf" "$TMP/err"' "missing model: exit 1 naming it"
"$BIN" detokenize -m x >"$TMP/out" 2>"$TMP/err"; rc=$?
check '[ $rc -eq 2 ] && grep -q "tokens" "$TMP/err"' "detokenize without --tokens: exit 2"

if [ -z "$SHARED" ] || [ ! -f "$VOC/ggml-vocab-gpt-2.gguf" ]; then
    echo "SKIP: $VOC absent ($pass checks passed, $fails failed)"
    [ $fails -eq 0 ] && exit 77 || exit 1
fi

# ---- expected ids from llama.cpp's vectors (.inp string k -> .out line k+1)
"$BIN" tokenize -m "$VOC/ggml-vocab-gpt-2.gguf" -p "Hello world" >"$TMP/out" 2>"$TMP/err"
check '[ "$(cat "$TMP/out")" = "15496 995" ]' "gpt-2 'Hello world' -> 15496 995 (got $(cat "$TMP/out"))"
"$BIN" tokenize -m "$VOC/ggml-vocab-gpt-2.gguf" -p " Hello, world!" --json >"$TMP/out" 2>"$TMP/err"
check '[ "$(tail -n 1 "$TMP/out")" = "[18435, 11, 995, 0]" ]' "gpt-2 --json (got $(tail -n 1 "$TMP/out"))"
printf 'Hello world' >"$TMP/in.txt"
"$BIN" tokenize -m "$VOC/ggml-vocab-llama-spm.gguf" -f "$TMP/in.txt" >"$TMP/out" 2>"$TMP/err"
check '[ "$(cat "$TMP/out")" = "15043 3186" ]' "llama-spm -f FILE (got $(cat "$TMP/out"))"
"$BIN" tokenize -m "$VOC/ggml-vocab-llama-spm.gguf" -f - <"$TMP/in.txt" >"$TMP/out" 2>"$TMP/err"
check '[ "$(cat "$TMP/out")" = "15043 3186" ]' "llama-spm -f - (stdin)"
"$BIN" tokenize -m "$VOC/ggml-vocab-llama-spm.gguf" -p "Hello world" --add-special >"$TMP/out" 2>"$TMP/err"
check '[ "$(cat "$TMP/out")" = "1 15043 3186" ]' "llama-spm --add-special adds BOS 1 (got $(cat "$TMP/out"))"
"$BIN" tokenize -m "$VOC/ggml-vocab-gpt-2.gguf" -p "Hello world" --show-pieces >"$TMP/out" 2>"$TMP/err"
check 'grep -q "15496  .Hello." "$TMP/out" && grep -q "995  . world." "$TMP/out" && [ "$(tail -n 1 "$TMP/out")" = "15496 995" ]' \
    "--show-pieces lists each token's text"

# ---- detokenize: the ids of llama.cpp's vectors give their strings back
"$BIN" detokenize -m "$VOC/ggml-vocab-gpt-2.gguf" --tokens 18435,11,995,0 >"$TMP/out" 2>"$TMP/err"
check '[ "$(cat "$TMP/out")" = " Hello, world!" ]' "gpt-2 detokenize (got '$(cat "$TMP/out")')"
"$BIN" detokenize -m "$VOC/ggml-vocab-llama-spm.gguf" --tokens "1, 15043, 3186" --skip-special >"$TMP/out" 2>"$TMP/err"
check '[ "$(cat "$TMP/out")" = "Hello world" ]' "llama-spm detokenize --skip-special (got '$(cat "$TMP/out")')"
"$BIN" detokenize -m "$VOC/ggml-vocab-gpt-2.gguf" --tokens 99999999 >"$TMP/out" 2>"$TMP/err"; rc=$?
check '[ $rc -eq 1 ] && grep -q "out of range" "$TMP/err"' "detokenize of an id out of range: exit 1"

# ---- special tokens (refs-d1.json: '<|begin_of_text|>hello<|eot_id|>' -> 128000 15339 128009)
if [ -f "$FIX/llama-d1.gguf" ]; then
    M=$FIX/llama-d1.gguf
    "$BIN" tokenize -m "$M" -p "<|begin_of_text|>hello<|eot_id|>" >"$TMP/out" 2>"$TMP/err"
    check '[ "$(cat "$TMP/out")" = "128000 15339 128009" ]' "llama-d1 special tokens parsed by default (got $(cat "$TMP/out"))"
    "$BIN" tokenize -m "$M" -p "<|begin_of_text|>hello<|eot_id|>" --no-parse-special >"$TMP/out" 2>"$TMP/err"
    check '! grep -qw 128000 "$TMP/out" && [ $(wc -w <"$TMP/out") -gt 3 ]' "--no-parse-special keeps them as text"
    "$BIN" detokenize -m "$M" --tokens 128000,15339,128009 >"$TMP/out" 2>"$TMP/err"
    check '[ "$(cat "$TMP/out")" = "<|begin_of_text|>hello<|eot_id|>" ]' "llama-d1 detokenize keeps special tokens"
    "$BIN" detokenize -m "$M" --tokens 128000,15339,128009 --skip-special >"$TMP/out" 2>"$TMP/err"
    check '[ "$(cat "$TMP/out")" = "hello" ]' "llama-d1 detokenize --skip-special"
fi

# ---- a tokenizer.json directory as MODEL (refs-d1.json: Qwen3 '<|im_start|>user\nhi<|im_end|>')
DATA=${TELA_TEST_DATA:-${TELA_SOURCE_DIR:-.}/build-data}
if [ -f "$DATA/qwen3/tokenizer.json" ]; then
    printf '<|im_start|>user\nhi<|im_end|>' >"$TMP/q.txt"
    "$BIN" tokenize -m "$DATA/qwen3" -f "$TMP/q.txt" --json >"$TMP/out" 2>"$TMP/err"
    check '[ "$(tail -n 1 "$TMP/out")" = "[151644, 872, 198, 6023, 151645]" ]' "qwen3 tokenizer.json (got $(tail -n 1 "$TMP/out"))"
else
    echo "note: $DATA/qwen3 absent (scripts/fetch-test-data.sh): tokenizer.json MODEL not checked"
fi

echo "$pass passed, $fails failed"
[ $fails -eq 0 ]
