#!/usr/bin/env bash
# build_fixtures.sh: turns the output of make_refs.py (run on the GPU machine)
# into the committed fixtures tests/fixtures/{llama,qwen35}/: converts each HF
# checkpoint with `tela convert` into the GGUF types its manifest entry lists,
# copies the reference JSON and logits, and checks tela's Q8_0 file against
# the checkpoint that make_refs.py dequantized itself (exact equality).
#
# Usage (repo root): tools/reference/build_fixtures.sh [REFS_DIR]
#   REFS_DIR: the directory holding manifest.json, hf/ and refs/ (the "refs"
#             folder inside refs.tgz); default .ref/out/refs
#   TELA_BIN: the tela binary (default build/bin/tela)
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
refs=${1:-$root/.ref/out/refs}
tela=${TELA_BIN:-$root/build/bin/tela}
limit=$((8 * 1024 * 1024))

[ -f "$refs/manifest.json" ] || { echo "build_fixtures: no $refs/manifest.json (extract refs.tgz first)" >&2; exit 1; }
[ -x "$tela" ] || { echo "build_fixtures: no tela binary at $tela (build first or set TELA_BIN)" >&2; exit 1; }

# one line per job: name arch hf_dir refs logits type1,type2,... reference_only
python3 - "$refs/manifest.json" > "$refs/.jobs" <<'EOF'
import json, sys
m = json.load(open(sys.argv[1]))
for e in m["models"]:
    print(e["name"], e["arch"], e["hf_dir"], e["refs"], e["logits"],
          ",".join(e["gguf_types"]) or "-", "1" if e.get("reference_only") else "0")
EOF

while read -r name arch hf_dir ref_json logits types ref_only; do
    case "$arch" in
        llama) out="$root/tests/fixtures/llama" ;;
        qwen35) out="$root/tests/fixtures/qwen35" ;;
        *) echo "build_fixtures: unknown arch $arch" >&2; exit 1 ;;
    esac
    mkdir -p "$out"
    if [ "$ref_only" = 0 ]; then
        for t in ${types//,/ }; do
            echo "== $name: tela convert --type $t"
            "$tela" convert "$refs/$hf_dir" -o "$out/$name-$t.gguf" --type "$t" --no-vocab -q
        done
    fi
    cp "$refs/$ref_json" "$refs/$logits" "$out/"
done < "$refs/.jobs"
rm -f "$refs/.jobs"

# tela's Q8_0 file must hold exactly the values make_refs.py's reference used
if [ -d "$refs/hf/llama-gqa-q8_0-dequant" ]; then
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    "$tela" convert "$refs/hf/llama-gqa-q8_0-dequant" -o "$tmp/dequant-f32.gguf" --type f32 --no-vocab -q
    echo "== llama-gqa-q8_0.gguf vs make_refs.py's own Q8_0 dequantization"
    python3 "$root/tools/reference/check_gguf_equal.py" "$root/tests/fixtures/llama/llama-gqa-q8_0.gguf" \
        "$tmp/dequant-f32.gguf"
fi

total=$(cat "$root"/tests/fixtures/llama/* "$root"/tests/fixtures/qwen35/* | wc -c)
echo "fixtures: $total bytes in tests/fixtures/llama and tests/fixtures/qwen35"
ls -l "$root/tests/fixtures/llama" "$root/tests/fixtures/qwen35"
if [ "$total" -gt "$limit" ]; then
    echo "build_fixtures: fixtures exceed 8 MB; trim prompts/logits in make_refs.py" >&2
    exit 1
fi
