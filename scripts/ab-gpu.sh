#!/usr/bin/env bash
# ab-gpu.sh FILE...: tg128 of each file under each setting of the
# environment in SETS (space-separated; "X=0" is the default build's
# behaviour, "A=1,B=2" sets two), alternating setting by setting and file
# by file for ROUNDS rounds (default 3), so that a machine's drift falls
# on every setting alike; then a table, one line a file and setting with
# its rounds sorted. Each setting first decodes 32 greedy tokens of each
# file and prints a digest of the ids (settings that keep the bits give
# the same digest). FILE is a path, or one of l1b-q4_k_m, l1b-q8_0,
# l8b-q4_k_m, q35-2b-q4_k_m (made on the spot in $TELA_MODELS as
# bench-gpu.sh makes them; the 8B as Q8_0 requantized). Needs
# build-cuda/ (scripts/test-gpu.sh) or TELA_BIN_DIR.
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/gpu-env.sh
B=${TELA_BIN_DIR:-./build-cuda/bin}
D=${TELA_MODELS:-/tmp/tela-models}
SETS=${SETS:-X=0}
mkdir -p "$D"
file_of() {
    case "$1" in
    l1b-q4_k_m | l1b-q8_0)
        [ -f "$D/l1b-f16.gguf" ] || "$B/tela-mkmodel" llama-3.2-1b -o "$D/l1b-f16.gguf" -q
        [ -f "$D/$1.gguf" ] || "$B/tela" quantize "$D/l1b-f16.gguf" "$D/$1.gguf" "${1#l1b-}" > /dev/null ;;
    q35-2b-q4_k_m)
        [ -f "$D/q35-2b-f16.gguf" ] || "$B/tela-mkmodel" qwen3.5-2b -o "$D/q35-2b-f16.gguf" -q
        [ -f "$D/$1.gguf" ] || "$B/tela" quantize "$D/q35-2b-f16.gguf" "$D/$1.gguf" Q4_K_M > /dev/null ;;
    l8b-q4_k_m)
        if [ ! -f "$D/$1.gguf" ]; then
            "$B/tela-mkmodel" llama-3.1-8b -o "$D/l8b-q8_0.gguf" --type q8_0 -q &&
                "$B/tela" quantize "$D/l8b-q8_0.gguf" "$D/$1.gguf" Q4_K_M --allow-requantize > /dev/null 2>&1 &&
                rm -f "$D/l8b-q8_0.gguf"
        fi ;;
    *) [ -f "$1" ] && { echo "$1"; return; } ;;
    esac
    echo "$D/$1.gguf"
}
files=()
for f in "$@"; do files+=("$(file_of "$f" | tail -1)"); done
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader 2>/dev/null
for f in "${files[@]}"; do
    for s in $SETS; do
        ids=$(env ${s//,/ } "$B/tela" run -m "$f" -n 32 --temp 0 --tokens 1,2,3,4 --print-ids 2>/dev/null | md5sum | cut -c1-8)
        echo "ids $(basename "$f") $s: $ids"
    done
done
res=$(mktemp)
for r in $(seq 1 "${ROUNDS:-3}"); do
    for f in "${files[@]}"; do
        for s in $SETS; do
            v=$(env ${s//,/ } "$B/tela" bench -m "$f" -p 0 -n 128 -r 2 --json 2>/dev/null |
                grep -o '"avg_ts": *[0-9.]*' | grep -o '[0-9.]*$' | head -1)
            echo "$(basename "$f") $s ${v:-fail}" >> "$res"
        done
    done
done
echo "== tg128 tok/s, rounds sorted"
sort "$res" | awk '{k = $1 " " $2; s[k] = s[k] " " $3} END {for (k in s) print k ":" s[k]}' | sort
rm -f "$res"
